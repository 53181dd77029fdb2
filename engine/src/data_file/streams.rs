//! Read streams: a reader's runs read on a few threads straight into
//! the window (or through staging buffers), each thread taking the next
//! run in the order the steps need them.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use super::RunsDone;
use crate::node_stage::NodeStage;
use lmdbio_core::error::{Error, Result};
use lmdbio_core::huge_pages::{copy_streaming, StagingBuffer};
use lmdbio_core::plan::ReadRun;
use lmdbio_core::source::{FileSource, ReadAt};

/// A reader's range of the window, handed to the threads that fill it.
#[derive(Clone, Copy)]
pub(crate) struct WindowRange {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the range lies in the node's shared window, which the engine keeps
// alive until every thread writing it has been joined, and no one else reads
// or writes the range until then (the round is published only after).
unsafe impl Send for WindowRange {}
// SAFETY: as for Send; the threads sharing a range write disjoint parts.
unsafe impl Sync for WindowRange {}

impl WindowRange {
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes, and nobody else may
    /// read or write them until every user of this range has finished.
    pub(crate) unsafe fn new(ptr: *mut u8, len: usize) -> WindowRange {
        WindowRange { ptr, len }
    }

    /// Bytes `[at, at + n)` of the range, as a range of their own; `None`
    /// past its end.
    pub(crate) fn part(self, at: u64, n: u64) -> Option<WindowRange> {
        let end = at.checked_add(n)?;
        (end <= self.len as u64).then(|| WindowRange {
            ptr: self.ptr.wrapping_add(at as usize),
            len: n as usize,
        })
    }

    /// The range's bytes, to read.
    ///
    /// # Safety
    /// The range must be valid for reads and nobody may write it while the
    /// slice lives (the node stage's writer reads completed runs while the
    /// ranks read them too; see `NodeStage::reclaim`).
    pub(crate) unsafe fn as_shared<'r>(self) -> &'r [u8] {
        // SAFETY: the caller's contract above.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Bytes `[at, at + n)` of the range. The slice must not outlive the
    /// range's guarantee (the read it serves).
    pub(crate) fn slice<'r>(self, at: usize, n: usize) -> Result<&'r mut [u8]> {
        if at.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(Error::Internal("a read overruns its window range".into()));
        }
        // SAFETY: [at, at + n) lies inside the range (checked), which
        // `new`'s caller vouched for; the streams get disjoint parts of it
        // (`read_on_streams` gives each run to exactly one stream).
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), n) })
    }
}

/// Where [`read_on_streams`] reads a run.
pub(crate) enum Landing {
    /// Straight into its place in the window.
    InPlace,
    /// Into a staging buffer (one per stream, taken from here while the
    /// stream runs), then copied into its place: a run longer than the
    /// buffer in pieces of the buffer's length.
    Staged(Mutex<Vec<StagingBuffer>>),
}

/// Reads the runs `order` names (distinct indices into `runs`, which are
/// packed back to back into `dest` in file order) with `streams` threads,
/// each taking the next run of `order` as it finishes one; one request per
/// run (or per staging buffer's length), and returns how many it made.
/// Taking runs in order keeps the head of `order` complete first, which is
/// what `progress` reports after every run.
#[cfg(test)]
pub(crate) fn read_on_streams(
    file: &FileSource,
    runs: &[ReadRun],
    order: &[usize],
    dest: WindowRange,
    streams: usize,
    landing: &Landing,
    progress: &RunsDone<'_>,
) -> Result<u64> {
    let sources = Sources {
        file,
        stage: None,
        staged: &[],
    };
    read_on_streams_from(sources, runs, order, dest, streams, landing, progress).map(|s| s.issued)
}

/// Where runs are read from: the node's stage where it holds all of a
/// run, else the database file.
#[derive(Clone, Copy)]
pub(crate) struct Sources<'a> {
    pub(crate) file: &'a FileSource,
    pub(crate) stage: Option<&'a NodeStage>,
    /// Set for each run (by index into the runs) read from the stage;
    /// empty: not told.
    pub(crate) staged: &'a [AtomicBool],
}

/// What [`read_on_streams_from`] did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Streamed {
    /// Requests to the database file.
    pub(crate) issued: u64,
    /// Runs read from the stage instead.
    pub(crate) stage_runs: u64,
}

/// [`read_on_streams`], each run read from the stage where it holds it.
pub(crate) fn read_on_streams_from(
    sources: Sources<'_>,
    runs: &[ReadRun],
    order: &[usize],
    dest: WindowRange,
    streams: usize,
    landing: &Landing,
    progress: &RunsDone<'_>,
) -> Result<Streamed> {
    let Sources {
        file,
        stage,
        staged: marks,
    } = sources;
    let total: u64 = runs.iter().map(|r| r.len).sum();
    if total != dest.len as u64 {
        return Err(Error::Internal(
            "read buffer does not match its runs".into(),
        ));
    }
    let mut seen = vec![false; runs.len()];
    let distinct = order
        .iter()
        .all(|&i| i < runs.len() && !std::mem::replace(&mut seen[i], true));
    if !distinct {
        return Err(Error::Internal(
            "a read order that names a run twice or one that is not there".into(),
        ));
    }
    let base = runs.first().map_or(0, |r| r.buf_offset);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let done: Vec<AtomicBool> = order.iter().map(|_| AtomicBool::new(false)).collect();
    let complete = Mutex::new(0usize);
    let issued = AtomicU64::new(0);
    let stage_runs = AtomicU64::new(0);
    let read_one = |i: usize, stage_buffer: Option<&mut StagingBuffer>| -> Result<()> {
        let run = &runs[order[i]];
        let at = run
            .buf_offset
            .checked_sub(base)
            .ok_or_else(|| Error::Internal("runs out of buffer order".into()))?;
        let place = dest.slice(at as usize, run.len as usize)?;
        let staged = stage.is_some_and(|s| s.read_into(place, run.file_offset));
        if staged {
            stage_runs.fetch_add(1, Ordering::Relaxed);
            if let Some(mark) = marks.get(order[i]) {
                mark.store(true, Ordering::Relaxed);
            }
        }
        match stage_buffer {
            _ if staged => {}
            None => {
                file.read_exact_at(place, run.file_offset)?;
                issued.fetch_add(1, Ordering::Relaxed);
            }
            Some(buffer) => {
                let stage = buffer.as_mut_slice();
                let mut offset = run.file_offset;
                for piece in place.chunks_mut(stage.len()) {
                    let staged = &mut stage[..piece.len()];
                    file.read_exact_at(staged, offset)?;
                    issued.fetch_add(1, Ordering::Relaxed);
                    copy_streaming(piece, staged);
                    offset += piece.len() as u64;
                }
            }
        }
        done[i].store(true, Ordering::Release);
        // One stream at a time moves the complete head, so what progress
        // hears only grows.
        let mut head = complete.lock().unwrap_or_else(|p| p.into_inner());
        while *head < done.len() && done[*head].load(Ordering::Acquire) {
            *head += 1;
        }
        progress(*head);
        Ok(())
    };
    let stream = || -> Result<()> {
        let mut stage = match landing {
            Landing::InPlace => None,
            Landing::Staged(idle) => {
                let taken = idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
                if taken.is_none() {
                    return Err(Error::Internal(
                        "a staged read stream without a buffer".into(),
                    ));
                }
                taken
            }
        };
        let mut result = Ok(());
        while !failed.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= order.len() {
                break;
            }
            if let Err(e) = read_one(i, stage.as_mut()) {
                // The other streams stop at their next run.
                failed.store(true, Ordering::Relaxed);
                result = Err(e);
                break;
            }
        }
        if let (Landing::Staged(idle), Some(stage)) = (landing, stage) {
            idle.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(stage);
        }
        result
    };
    let streams = streams.clamp(1, order.len().max(1));
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let others: Vec<_> = (1..streams).map(|_| scope.spawn(stream)).collect();
        let mut results = vec![stream()];
        results.extend(others.into_iter().map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(Error::Internal("a read stream panicked".into())))
        }));
        results
    });
    results.into_iter().collect::<Result<Vec<()>>>()?;
    Ok(Streamed {
        issued: issued.into_inner(),
        stage_runs: stage_runs.into_inner(),
    })
}
