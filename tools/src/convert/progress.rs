//! Progress on stderr: a bar redrawn in place on a terminal, plain lines
//! every few seconds otherwise (logs, CI), nothing with --quiet.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    total: usize,
    done: usize,
    start: Instant,
    last_shown: Instant,
    mode: Mode,
}

#[derive(PartialEq)]
enum Mode {
    Bar,
    Lines,
    Off,
}

impl Progress {
    pub fn new(total: usize, quiet: bool) -> Progress {
        let mode = if quiet {
            Mode::Off
        } else if std::io::stderr().is_terminal() {
            Mode::Bar
        } else {
            Mode::Lines
        };
        let now = Instant::now();
        Progress {
            total,
            done: 0,
            start: now,
            last_shown: now,
            mode,
        }
    }

    /// One more entry handled (written or skipped).
    pub fn advance(&mut self) {
        self.done += 1;
        let every = match self.mode {
            Mode::Bar => Duration::from_millis(200),
            Mode::Lines => Duration::from_secs(5),
            Mode::Off => return,
        };
        if self.last_shown.elapsed() >= every || self.done == self.total {
            self.last_shown = Instant::now();
            self.show();
        }
    }

    /// A message (a skipped image) that must not be drawn over.
    pub fn message(&mut self, text: &str) {
        if self.mode == Mode::Bar {
            eprint!("\r\x1b[2K");
        }
        eprintln!("{text}");
        if self.mode == Mode::Bar {
            self.show();
        }
    }

    pub fn finish(&mut self) {
        if self.mode == Mode::Bar {
            self.show();
            eprintln!();
        }
    }

    pub fn rate(&self) -> f64 {
        self.done as f64 / self.start.elapsed().as_secs_f64().max(1e-9)
    }

    fn show(&self) {
        let rate = self.rate();
        let eta = if rate > 0.0 {
            format_secs((self.total - self.done) as f64 / rate)
        } else {
            "?".into()
        };
        let percent = 100.0 * self.done as f64 / self.total.max(1) as f64;
        match self.mode {
            Mode::Bar => {
                const WIDTH: usize = 30;
                let filled = WIDTH * self.done / self.total.max(1);
                eprint!(
                    "\r\x1b[2K[{}{}] {}/{} {percent:.0}% {rate:.0} records/s ETA {eta}",
                    "#".repeat(filled),
                    "-".repeat(WIDTH - filled),
                    self.done,
                    self.total,
                );
                let _ = std::io::stderr().flush();
            }
            Mode::Lines => eprintln!(
                "converted {}/{} ({percent:.0}%), {rate:.0} records/s, ETA {eta}",
                self.done, self.total
            ),
            Mode::Off => {}
        }
    }
}

fn format_secs(secs: f64) -> String {
    let s = secs.round() as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}
