//! Reads on helper threads: a round's outstanding read, the count that
//! `MPI_Finalize` waits on, and the order one reader's reads keep.

use std::sync::Arc;
use std::thread::JoinHandle;

use crate::counters::{EpochSource, ReadTally};
use crate::data_file::{DataFile, RunsRead, WindowRange};
use crate::exchange::RoundExchange;
use crate::round::run_bytes_by_epoch;
use crate::step_ready::Progress;
use lmdbio_core::error::{Error, Result};
use lmdbio_core::plan::ReadRun;
use std::sync::atomic::{AtomicBool, Ordering};

/// This reader's outstanding read of a round.
pub(crate) enum InFlight {
    /// A read that completed when it was started.
    Done(Option<Result<RunsRead>>),
    /// Reads on a helper thread (independent reads, or a blocking
    /// collective read); joined on drop, so the window it writes outlives
    /// it.
    Thread(Option<JoinHandle<Result<RunsRead>>>),
}

impl InFlight {
    pub(crate) fn wait(mut self) -> Result<RunsRead> {
        match &mut self {
            InFlight::Done(result) => result.take().unwrap_or(Ok(RunsRead::default())),
            InFlight::Thread(handle) => match handle.take().map(JoinHandle::join) {
                Some(Ok(result)) => result,
                Some(Err(_)) => Err(Error::Internal("the read thread panicked".into())),
                None => Ok(RunsRead::default()),
            },
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let InFlight::Thread(handle) = self {
            if let Some(h) = handle.take() {
                let _ = h.join();
            }
        }
    }
}

/// Counts reads running on helper threads, so that `MPI_Finalize` (whose
/// start runs [`topology::release_all`]) waits for them: a job may
/// finalise MPI while an engine still reads ahead, and no MPI call may be
/// running when MPI goes away.
pub(crate) static BACKGROUND_READS: (std::sync::Mutex<usize>, std::sync::Condvar) =
    (std::sync::Mutex::new(0), std::sync::Condvar::new());

/// One read on a helper thread, counted while it lives.
pub(crate) struct BackgroundRead;

impl BackgroundRead {
    pub(crate) fn start() -> BackgroundRead {
        *BACKGROUND_READS.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        BackgroundRead
    }
}

impl Drop for BackgroundRead {
    fn drop(&mut self) {
        let mut n = BACKGROUND_READS.0.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        BACKGROUND_READS.1.notify_all();
    }
}

/// Waits until no helper thread is reading.
pub(crate) fn wait_for_background_reads() {
    let (count, done) = &BACKGROUND_READS;
    let mut n = count.lock().unwrap_or_else(|p| p.into_inner());
    while *n > 0 {
        n = done.wait(n).unwrap_or_else(|p| p.into_inner());
    }
}

/// Set once a round's read has finished, failed or unwound; the reader's
/// next round reads only after it (see [`Engine::previous_read`]).
#[derive(Default)]
pub(crate) struct ReadFinished {
    finished: std::sync::Mutex<bool>,
    signal: std::sync::Condvar,
}

impl ReadFinished {
    pub(crate) fn wait(&self) {
        let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        while !*finished {
            finished = self
                .signal
                .wait(finished)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Marks its read finished when dropped, however the read thread ends.
pub(crate) struct FinishOnDrop(pub(crate) Arc<ReadFinished>);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        *self.0.finished.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.0.signal.notify_all();
    }
}

/// Where a read's progress goes: the progress word, the tally, and the
/// snapshot check each publication waits for (`crate::snapshot`).
pub(crate) struct Publish<'a> {
    pub(crate) progress: Progress,
    pub(crate) tally: &'a ReadTally,
    pub(crate) snapshot: Option<&'a crate::snapshot::SnapshotCheck>,
}

/// Reads `runs` in `order` and publishes the progress, ending with every
/// run complete or with the failure (also when the read unwinds), so that
/// no rank waits for a read that stopped. The read is counted in `tally`
/// before its last run is published; nothing is published once the
/// snapshot check fails. `epochs` gives the epoch each run counts for;
/// runs read from the node's stage count as such, and so do those other
/// nodes sent (`exchange`, see [`crate::exchange`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_and_publish(
    file: &DataFile,
    runs: &[ReadRun],
    order: &[usize],
    dest: WindowRange,
    streams: usize,
    publish: Publish,
    epochs: &[u64],
    exchange: Option<&RoundExchange>,
) -> Result<RunsRead> {
    let Publish {
        progress,
        tally,
        snapshot,
    } = publish;
    let intact = std::sync::atomic::AtomicBool::new(true);
    let still_intact = || {
        intact.load(std::sync::atomic::Ordering::SeqCst)
            && snapshot.is_none_or(|s| s.check().is_ok())
            || {
                intact.store(false, std::sync::atomic::Ordering::SeqCst);
                false
            }
    };
    struct FailUnlessDone(Progress, bool);
    impl Drop for FailUnlessDone {
        fn drop(&mut self) {
            if !self.1 {
                self.0.fail();
            }
        }
    }
    let mut guard = FailUnlessDone(progress, false);
    let all = runs.len();
    let stage = file.stage();
    if let Some(stage) = stage {
        stage.reclaim(dest);
    }
    let epoch = epochs.iter().copied().min().unwrap_or_default();
    // Runs other nodes send leave the database file to the filler.
    let asked = exchange.map(RoundExchange::asked).unwrap_or_default();
    let serving = match asked.is_empty() {
        true => stage.and_then(|s| s.serving(runs, epoch)),
        false => {
            let mine: Vec<ReadRun> = (0..runs.len())
                .filter(|i| asked.binary_search(i).is_err())
                .map(|i| runs[i])
                .collect();
            stage.and_then(|s| s.serving(&mine, epoch))
        }
    };
    let staged: Vec<AtomicBool> = match stage {
        Some(_) => runs.iter().map(|_| AtomicBool::new(false)).collect(),
        None => Vec::new(),
    };
    let crate::exchange::Exchanged {
        read,
        remote,
        filled,
    } = crate::exchange::read_runs(
        file,
        runs,
        order,
        dest,
        streams,
        &|n| {
            if n < all && still_intact() {
                progress.complete(n)
            }
        },
        &staged,
        exchange,
    )?;
    if let Some(s) = snapshot {
        s.check()?;
    }
    if !intact.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(Error::Internal(
            "the snapshot check failed, then passed".into(),
        ));
    }
    drop(serving);
    let from_stage = |i: usize| staged.get(i).is_some_and(|s| s.load(Ordering::Relaxed));
    let from_peer = |i: usize| remote.get(i).is_some_and(|&r| r);
    tally.add(
        &run_bytes_by_epoch(runs, epochs, |i| !from_stage(i) && !from_peer(i)),
        read,
    );
    for (epoch, bytes) in run_bytes_by_epoch(runs, epochs, from_stage) {
        tally.add_stage_read(epoch, bytes);
    }
    for (epoch, bytes) in run_bytes_by_epoch(runs, epochs, from_peer) {
        tally.add_epoch_bytes(epoch, EpochSource::Remote, bytes);
    }
    if let Some(&latest) = epochs.iter().max() {
        tally.current_epoch.fetch_max(latest, Ordering::Relaxed);
    }
    if filled > 0 {
        // Sent for the stage, not for this round's records: counted for
        // the epoch being read, as the filler's reads of the file are.
        let epoch = tally.current_epoch.load(Ordering::Relaxed);
        tally.add_epoch_bytes(epoch, EpochSource::Remote, filled);
    }
    progress.complete(all);
    guard.1 = true;
    // The writer stages from the window until the area is read into again
    // (which reclaims it first).
    if let Some(stage) = stage {
        stage.offer(runs, dest);
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[test]
    fn a_round_read_waits_for_the_one_before_however_that_one_ends() {
        for unwinds in [false, true] {
            let first = Arc::new(ReadFinished::default());
            let first_done = Arc::new(AtomicBool::new(false));
            let earlier = {
                let (finished, done) = (Arc::clone(&first), Arc::clone(&first_done));
                std::thread::spawn(move || {
                    let _finished = FinishOnDrop(finished);
                    std::thread::sleep(Duration::from_millis(50));
                    done.store(true, Ordering::SeqCst);
                    if unwinds {
                        panic!("a read thread that unwinds");
                    }
                })
            };
            let later = std::thread::spawn(move || {
                first.wait();
                first_done.load(Ordering::SeqCst)
            });
            assert!(
                later.join().unwrap(),
                "the later read started before the earlier one ended (unwinds: {unwinds})"
            );
            assert_eq!(earlier.join().is_err(), unwinds);
        }
    }
}
