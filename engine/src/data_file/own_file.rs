//! A reader's own descriptor (independent reads): which way each round is
//! read (through the page cache, around it into the window, or around it
//! into staging buffers), and the descriptor's mode shared by the reads in
//! progress (see docs/design/direct-io.md).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

use super::staging::*;
use super::streams::*;
use super::{DirectIo, RunsDone, RunsRead};
use lmdbio_core::error::{Error, Result};
use lmdbio_core::page_cache::DirectAlignment;
use lmdbio_core::plan::ReadRun;
use lmdbio_core::source::{FileSource, ReadAt};

/// A reader's own descriptor and what it may do around the page cache.
pub(crate) struct OwnFile {
    pub(crate) source: FileSource,
    pub(crate) mode: DirectIo,
    /// The file system's requirements, when direct reads are wanted and
    /// possible.
    pub(crate) direct: Option<DirectAlignment>,
    /// Set after a direct read was refused (`EINVAL`) although the file
    /// system claimed support: the rest is read through the cache.
    pub(crate) direct_refused: AtomicBool,
    /// Whether the engine's window is in huge pages (see
    /// [`OwnFile::set_window_in_huge_pages`]).
    pub(crate) window_huge: AtomicBool,
    /// Buffers in huge pages for direct reads into a window that is not.
    pub(crate) staging: Staging,
    /// Which way the descriptor reads, and the reads relying on it.
    pub(crate) descriptor: DescriptorMode,
    /// The file system may be served by another machine (see
    /// [`lmdbio_core::page_cache::on_local_file_system`]).
    pub(crate) served_remotely: bool,
    /// A second descriptor that the tree is scanned through, opened on
    /// the first scan if it is to read around the caches
    /// ([`OwnFile::tree_descriptor`]); `None` inside: the scan reads
    /// through `source`.
    pub(crate) tree: OnceLock<Option<FileSource>>,
    /// The node's stage, once attached (see `DataFile::attach_stage`).
    pub(crate) stage: OnceLock<std::sync::Arc<crate::node_stage::NodeStage>>,
}

/// Where a round's runs are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    Cache,
    /// Around the cache straight into the window.
    Direct,
    /// Around the cache into staging buffers, copied into the window.
    Staged,
}

/// Whether the reader's descriptor reads around the page cache, shared by
/// the reads in progress. `O_DIRECT` belongs to the open file description,
/// which every stream of the reader shares, and with a round read ahead two
/// rounds' reads can be in flight: switching the flag for one would switch
/// it under the other (an unaligned read then fails, an aligned one is
/// counted under the wrong mode). A read that needs the other mode waits
/// for the reads in progress, which belong to the round the ranks need
/// first anyway.
#[derive(Default)]
pub(crate) struct DescriptorMode {
    pub(crate) state: Mutex<ModeState>,
    pub(crate) changed: Condvar,
}

#[derive(Default)]
pub(crate) struct ModeState {
    pub(crate) direct: bool,
    pub(crate) reads: usize,
}

/// A read relying on the descriptor's mode; the mode stays until dropped.
pub(crate) struct ModeHeld<'m>(pub(crate) &'m DescriptorMode);

impl DescriptorMode {
    pub(crate) fn lock(&self) -> MutexGuard<'_, ModeState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until no read relies on the other mode, switches `source` to
    /// `direct` if it is not there yet, and holds it there.
    pub(crate) fn enter<'m>(&'m self, source: &FileSource, direct: bool) -> Result<ModeHeld<'m>> {
        let mut state = self.lock();
        while state.direct != direct && state.reads > 0 {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if state.direct != direct {
            source.set_direct(direct)?;
            state.direct = direct;
        }
        state.reads += 1;
        Ok(ModeHeld(self))
    }
}

impl Drop for ModeHeld<'_> {
    fn drop(&mut self) {
        self.0.lock().reads -= 1;
        self.0.changed.notify_all();
    }
}

impl OwnFile {
    /// A descriptor that reads the tree around every cache, where one is
    /// needed and can be had; `None`: the tree is read through `source`,
    /// and its pages are dropped from the cache after the scan
    /// (`DataSource::forget_tree_pages`).
    ///
    /// Why: the tree's pages lie among the values (a leaf every few dozen
    /// records of a bulk-loaded database), each read once and never again.
    /// Where this machine's page cache is the only one, dropping them after
    /// the scan suffices. On a file system served by another machine,
    /// that machine's cache keeps them too, and the readers' value streams
    /// later run into them one by one, and the server's readahead falls
    /// back to single pages after each (see
    /// docs/design/tree-scan-around-cache.md).
    /// A descriptor opened with `O_DIRECT` keeps them out of both caches;
    /// switching `source` to direct reads would reach only this machine's
    /// cache, since a GlusterFS brick reads with the flags the file was
    /// opened with. It costs this reader a second open.
    ///
    /// Only on a file system that may be served by another machine (not
    /// one of the local ones: they keep one descriptor), where direct
    /// reads are not ruled out (`--direct-io never`), and where the cache
    /// does not already hold most of the file (its pages are then read
    /// from there; where the kernel cannot say, the scan reads around it,
    /// a few small reads at worst).
    pub(crate) fn tree_descriptor(&self) -> Option<FileSource> {
        if self.mode == DirectIo::Never || !self.served_remotely {
            return None;
        }
        if self.source.mostly_cached() == Some(true) {
            return None;
        }
        FileSource::open_around_cache(self.source.path()).ok()
    }
}

impl OwnFile {
    #[cfg(test)]
    pub(crate) fn read_runs(
        &self,
        runs: &[ReadRun],
        order: &[usize],
        dest: WindowRange,
        streams: usize,
        progress: &RunsDone<'_>,
    ) -> Result<RunsRead> {
        self.read_runs_marking(runs, order, dest, streams, progress, &[])
    }

    /// Reads `runs` (see `DataFile::read_runs`), each from the node's stage
    /// where it holds all of it, setting that run's flag in `staged`.
    pub(crate) fn read_runs_marking(
        &self,
        runs: &[ReadRun],
        order: &[usize],
        dest: WindowRange,
        streams: usize,
        progress: &RunsDone<'_>,
        staged: &[std::sync::atomic::AtomicBool],
    ) -> Result<RunsRead> {
        let requests = runs.len() as u64;
        let sources = Sources {
            file: &self.source,
            stage: self.stage.get().map(|s| &**s),
            staged,
        };
        let streams = streams.clamp(1, order.len().max(1));
        let mut refused = 0;
        // Runs at the head of `order` already complete (and published).
        let mut head = 0;
        let mut route = self.route(runs, dest)?;
        let mut landing = Landing::InPlace;
        if route == Route::Staged {
            match self.staging.take(streams, self.staging.len_for(runs)) {
                Some(buffers) => landing = Landing::Staged(Mutex::new(buffers)),
                None => route = self.without_staging(runs, dest)?,
            }
        }
        if route != Route::Cache {
            let _direct = self.descriptor.enter(&self.source, true)?;
            let reached = AtomicUsize::new(0);
            let heard = |n: usize| {
                reached.fetch_max(n, Ordering::Relaxed);
                progress(n)
            };
            let read = read_on_streams_from(sources, runs, order, dest, streams, &landing, &heard);
            if let Landing::Staged(buffers) = landing {
                self.staging
                    .give_back(buffers.into_inner().unwrap_or_else(PoisonError::into_inner));
            }
            match read {
                Ok(done) => {
                    // A staged run longer than its buffer took a request
                    // per piece.
                    let staged = route == Route::Staged;
                    let issued = done.issued;
                    return Ok(RunsRead {
                        requests: issued,
                        direct_requests: issued,
                        staged_requests: if staged { issued } else { 0 },
                    });
                }
                Err(Error::Io { source, .. })
                    if source.raw_os_error() == Some(libc::EINVAL)
                        && self.mode == DirectIo::Auto =>
                {
                    // The file system claimed support it does not have
                    // (some network file systems): read the rest of this
                    // and every later round through the cache, counting
                    // the refused requests (at most: the attempt may have
                    // stopped early). Runs it completed were published
                    // and ranks may be reading them: they are not read
                    // again.
                    self.direct_refused.store(true, Ordering::Relaxed);
                    refused = requests;
                    head = reached.load(Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        // Only a descriptor that may have been switched needs holding in
        // its cached mode; the default never switches it.
        let _cached = match self.direct {
            Some(_) => Some(self.descriptor.enter(&self.source, false)?),
            None => None,
        };
        let rest = &order[head..];
        let land = Landing::InPlace;
        let done = read_on_streams_from(sources, runs, rest, dest, streams, &land, &|n| {
            progress(head + n)
        })?;
        Ok(RunsRead {
            requests: requests + refused - done.stage_runs,
            ..RunsRead::default()
        })
    }

    /// Tells the reader whether the engine's window is in huge pages. Only
    /// then do direct reads land in it: a direct read reaches the device
    /// in one scatter-gather segment per physically contiguous piece of
    /// the destination, so into scattered 4 KiB pages a 4 MiB read leaves
    /// as several small requests and is slower than the page cache, and
    /// into 2 MiB pages faster (see docs/design/direct-io.md). Into a
    /// window in small pages they go through staging buffers.
    pub(crate) fn set_window_in_huge_pages(&self, huge: bool) {
        self.window_huge.store(huge, Ordering::Relaxed);
    }

    /// Where to read `runs` (packed into `dest`): through the cache, or
    /// around it into the window or into staging buffers.
    pub(crate) fn route(&self, runs: &[ReadRun], dest: WindowRange) -> Result<Route> {
        let Some(align) = self.direct else {
            return Ok(Route::Cache);
        };
        if self.direct_refused.load(Ordering::Relaxed) || runs.is_empty() {
            return Ok(Route::Cache);
        }
        let file_aligned = runs
            .iter()
            .all(|r| r.file_offset % align.offset == 0 && r.len % align.offset == 0);
        match (self.mode, file_aligned) {
            (DirectIo::Always, false) => {
                return Err(Error::Internal(
                    "a round planned for direct reads is not aligned for them".into(),
                ))
            }
            (_, false) => return Ok(Route::Cache),
            (DirectIo::Auto, true) => {
                let total: u64 = runs.iter().map(|r| r.len).sum();
                let cached = runs.iter().try_fold(0u64, |sum, r| {
                    self.source
                        .cached_bytes(r.file_offset, r.len)
                        .map(|c| sum + c.min(r.len))
                });
                // Without a way to tell, trust the cache: a file it holds
                // would be read from storage again.
                if cached.is_none_or(|c| c * 2 >= total) {
                    return Ok(Route::Cache);
                }
            }
            _ => {}
        }
        if self.window_huge.load(Ordering::Relaxed) && lands_aligned(align, runs, dest) {
            return Ok(Route::Direct);
        }
        Ok(Route::Staged)
    }

    /// The route of a staged read that got no huge pages: `auto` reads
    /// through the cache, `always` directly into the window as it is.
    pub(crate) fn without_staging(&self, runs: &[ReadRun], dest: WindowRange) -> Result<Route> {
        match self.direct {
            Some(align) if self.mode == DirectIo::Always => {
                if lands_aligned(align, runs, dest) {
                    Ok(Route::Direct)
                } else {
                    Err(Error::Internal(
                        "a round planned for direct reads lands unaligned, and no staging buffer was given".into(),
                    ))
                }
            }
            _ => Ok(Route::Cache),
        }
    }
}

/// Whether every run's place in `dest` meets direct reads' memory
/// alignment.
pub(crate) fn lands_aligned(align: DirectAlignment, runs: &[ReadRun], dest: WindowRange) -> bool {
    let base = runs.first().map_or(0, |r| r.buf_offset);
    dest.ptr as u64 % align.memory == 0
        && runs
            .iter()
            .all(|r| r.buf_offset.wrapping_sub(base) % align.memory == 0)
}
