//! Periodic progress lines on rank 0 during a long method, so a run on a
//! slow file system shows it is moving (stderr, every few seconds).

use std::time::{Duration, Instant};

const EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    method: &'static str,
    enabled: bool,
    start: Instant,
    last: Instant,
}

impl Progress {
    /// Prints only on world rank 0 and only with `--progress`.
    pub fn new(method: &'static str, enabled: bool, world_rank: i32) -> Progress {
        let now = Instant::now();
        Progress {
            method,
            enabled: enabled && world_rank == 0,
            start: now,
            last: now,
        }
    }

    /// `done` of `total` units of this rank's share (steps, records, bytes),
    /// and the value bytes it has received so far.
    pub fn update(&mut self, done: u64, total: u64, bytes: u64) {
        if !self.enabled || self.last.elapsed() < EVERY {
            return;
        }
        self.last = Instant::now();
        let secs = self.start.elapsed().as_secs_f64();
        let pct = if total == 0 {
            100.0
        } else {
            100.0 * done as f64 / total as f64
        };
        let eta = if done == 0 {
            f64::NAN
        } else {
            secs * (total - done.min(total)) as f64 / done as f64
        };
        eprintln!(
            "bench: {}: rank 0 at {pct:.0}% after {secs:.0} s ({:.0} MB/s on rank 0, about {eta:.0} s left)",
            self.method,
            bytes as f64 / 1e6 / secs.max(1e-9)
        );
    }
}
