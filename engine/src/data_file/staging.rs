//! Staging buffers in huge pages, for direct reads into a window that is
//! not in huge pages (see docs/design/staging-buffers.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use lmdbio_core::huge_pages::{StagingBuffer, HUGE_PAGE};
use lmdbio_core::plan::ReadRun;

/// A reader's staging buffers, kept between rounds. Each stream of a
/// staged read holds one; a run longer than a buffer is read in pieces.
pub(crate) struct Staging {
    pub(crate) idle: Mutex<Vec<StagingBuffer>>,
    /// Set once the system refused huge pages: not asked again.
    pub(crate) refused: AtomicBool,
    /// The largest buffer made: runs are about the coalescing target
    /// (4 MiB by default), so this only bounds the memory a round of huge
    /// runs would take.
    pub(crate) max_len: usize,
}

impl Staging {
    pub(crate) const MAX_LEN: usize = 16 << 20;

    pub(crate) fn new(max_len: usize) -> Staging {
        Staging {
            idle: Mutex::new(Vec::new()),
            refused: AtomicBool::new(false),
            max_len: max_len.max(HUGE_PAGE),
        }
    }

    /// The buffer length for `runs`: the longest, in whole huge pages, at
    /// most `max_len`.
    pub(crate) fn len_for(&self, runs: &[ReadRun]) -> usize {
        let longest = runs.iter().map(|r| r.len).max().unwrap_or(0);
        (longest.min(self.max_len as u64) as usize)
            .div_ceil(HUGE_PAGE)
            .max(1)
            * HUGE_PAGE
    }

    /// `n` buffers of at least `len` bytes, made where there are too few;
    /// `None` (the idle ones kept) once the system refuses huge pages.
    pub(crate) fn take(&self, n: usize, len: usize) -> Option<Vec<StagingBuffer>> {
        if self.refused.load(Ordering::Relaxed) {
            return None;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.retain(|b| b.len() >= len);
        let reused = n.min(idle.len());
        let mut taken: Vec<StagingBuffer> = idle.drain(..reused).collect();
        drop(idle);
        while taken.len() < n {
            match StagingBuffer::new(len) {
                Some(b) => taken.push(b),
                None => {
                    self.refused.store(true, Ordering::Relaxed);
                    self.give_back(taken);
                    return None;
                }
            }
        }
        Some(taken)
    }

    pub(crate) fn give_back(&self, buffers: Vec<StagingBuffer>) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(buffers);
    }
}
