//! The data file as a node's reader holds it, opened once per reader.
//!
//! * Independent reads (the default): the reader opens the file on its own
//!   and reads its runs with positioned reads (`pread`) on a few threads,
//!   each taking the next run in the order the round's steps need them
//!   (see [`super::step_ready`]). Several requests in
//!   flight is what a single reader needs to keep up with storage that
//!   serves parallel streams faster than one: measured here, two streams
//!   delivered 1.1–1.6× what ROMIO's independent reads did with one handle
//!   per reader, where MPICH's global lock and glibc's
//!   one-request-per-descriptor AIO queue allow one request at a time
//!   (docs/PERFORMANCE.md). For a regular file ROMIO's independent read is
//!   itself a `pread` loop, so no file system support is lost.
//!   Rounds the page cache does not hold are read around it (direct I/O)
//!   where the file system allows: straight into the window where it is in
//!   huge pages, else into a small buffer of the reader's own in huge pages
//!   and copied into the window; see [`DirectIo`], [`lmdbio_core::page_cache`]
//!   and [`lmdbio_core::huge_pages`].
//! * Collective reads: the readers open the file together with MPI-IO and
//!   read with `MPI_File_read_at_all`, so MPI-IO may aggregate across nodes
//!   when its hints enable collective buffering.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

use super::EngineOptions;
use crate::mpi_raw::{Comm, MpiFile, MpiFileSource};
use lmdbio_core::error::{Error, Result};
use lmdbio_core::huge_pages::{copy_streaming, StagingBuffer, HUGE_PAGE};
use lmdbio_core::index::{consecutive_runs, TreePages};
use lmdbio_core::page_cache::DirectAlignment;
use lmdbio_core::plan::ReadRun;
use lmdbio_core::source::{FileSource, IoSnapshot, ReadAt};

/// Whether independent reads go around the kernel's page cache.
///
/// Measured on the test machine (docs/PERFORMANCE.md, fourth, fifteenth
/// and sixteenth rounds): a direct read spares the kernel's copy into the
/// window, and with the window in huge pages it delivered 1.1-1.3 of the
/// storage limit at one rank per node where reads through the cache
/// delivered 0.85-1.0; into 4 KiB pages it ran at a third of the cache's
/// speed or less (the device got four small requests for each read). A
/// window in small pages (shared by several ranks, where shared memory
/// gets no huge pages) is filled through a staging buffer in huge pages
/// instead, one copy as through the cache but without the cache's work.
/// So the default is `Auto`, which reads directly only what the cache
/// does not hold, and only into huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirectIo {
    /// Always read through the page cache.
    Never,
    /// Read a round directly when the file system supports it, the page
    /// cache holds less than half of the round's bytes, and the bytes can
    /// land in huge pages (the window, as [`crate::prepare`] found
    /// it, or a staging buffer); through the cache otherwise (a file read
    /// recently, a kernel that cannot say what it holds: `cachestat` is
    /// Linux 6.5+, or one that gives no huge pages). On a file system
    /// that is not one of the local ones (FUSE and network file systems)
    /// the tree is also scanned through a second descriptor opened for
    /// direct reads, so that its pages stay out of every cache, the
    /// server's included (see `OwnFile::tree_descriptor`).
    #[default]
    Auto,
    /// Read every round directly; opening fails where the file system
    /// does not support it.
    Always,
}

/// Told how many runs at the head of the read order are complete.
pub(crate) type RunsDone<'a> = dyn Fn(usize) + Sync + 'a;

/// What one call to [`DataFile::read_runs`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RunsRead {
    pub requests: u64,
    /// Of those, read around the page cache.
    pub direct_requests: u64,
    /// Of the direct ones, read into a staging buffer and copied.
    pub staged_requests: u64,
}

pub(crate) enum DataFile {
    /// A descriptor of this reader's own (independent reads).
    Own(OwnFile),
    /// One MPI-IO handle shared by the readers (collective reads).
    Shared(MpiFile),
}

/// A reader's own descriptor and what it may do around the page cache.
pub(crate) struct OwnFile {
    source: FileSource,
    mode: DirectIo,
    /// The file system's requirements, when direct reads are wanted and
    /// possible.
    direct: Option<DirectAlignment>,
    /// Set after a direct read was refused (`EINVAL`) although the file
    /// system claimed support: the rest is read through the cache.
    direct_refused: AtomicBool,
    /// Whether the engine's window is in huge pages (see
    /// [`OwnFile::set_window_in_huge_pages`]).
    window_huge: AtomicBool,
    /// Buffers in huge pages for direct reads into a window that is not.
    staging: Staging,
    /// Which way the descriptor reads, and the reads relying on it.
    descriptor: DescriptorMode,
    /// The file system may be served by another machine (see
    /// [`lmdbio_core::page_cache::on_local_file_system`]).
    served_remotely: bool,
    /// A second descriptor that the tree is scanned through, opened on
    /// the first scan if it is to read around the caches
    /// ([`OwnFile::tree_descriptor`]); `None` inside: the scan reads
    /// through `source`.
    tree: OnceLock<Option<FileSource>>,
}

/// Where a round's runs are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Cache,
    /// Around the cache straight into the window.
    Direct,
    /// Around the cache into staging buffers, copied into the window.
    Staged,
}

/// A reader's staging buffers, kept between rounds. Each stream of a
/// staged read holds one; a run longer than a buffer is read in pieces.
struct Staging {
    idle: Mutex<Vec<StagingBuffer>>,
    /// Set once the system refused huge pages: not asked again.
    refused: AtomicBool,
    /// The largest buffer made: runs are about the coalescing target
    /// (4 MiB by default), so this only bounds the memory a round of huge
    /// runs would take.
    max_len: usize,
}

impl Staging {
    const MAX_LEN: usize = 16 << 20;

    fn new(max_len: usize) -> Staging {
        Staging {
            idle: Mutex::new(Vec::new()),
            refused: AtomicBool::new(false),
            max_len: max_len.max(HUGE_PAGE),
        }
    }

    /// The buffer length for `runs`: the longest, in whole huge pages, at
    /// most `max_len`.
    fn len_for(&self, runs: &[ReadRun]) -> usize {
        let longest = runs.iter().map(|r| r.len).max().unwrap_or(0);
        (longest.min(self.max_len as u64) as usize)
            .div_ceil(HUGE_PAGE)
            .max(1)
            * HUGE_PAGE
    }

    /// `n` buffers of at least `len` bytes, made where there are too few;
    /// `None` (the idle ones kept) once the system refuses huge pages.
    fn take(&self, n: usize, len: usize) -> Option<Vec<StagingBuffer>> {
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

    fn give_back(&self, buffers: Vec<StagingBuffer>) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(buffers);
    }
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
struct DescriptorMode {
    state: Mutex<ModeState>,
    changed: Condvar,
}

#[derive(Default)]
struct ModeState {
    direct: bool,
    reads: usize,
}

/// A read relying on the descriptor's mode; the mode stays until dropped.
struct ModeHeld<'m>(&'m DescriptorMode);

impl DescriptorMode {
    fn lock(&self) -> MutexGuard<'_, ModeState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until no read relies on the other mode, switches `source` to
    /// `direct` if it is not there yet, and holds it there.
    fn enter<'m>(&'m self, source: &FileSource, direct: bool) -> Result<ModeHeld<'m>> {
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

impl DataFile {
    /// Opens the file on a reader: on its own, or collectively over
    /// `readers` for collective reads.
    pub(crate) fn open(readers: &Comm, path: &Path, options: &EngineOptions) -> Result<DataFile> {
        if options.collective {
            let comm = Comm::dup(readers.raw())?;
            let hints = crate::options::effective_hints(&options.hints);
            return Ok(DataFile::Shared(MpiFile::open(comm, path, &hints)?));
        }
        let source = FileSource::open(path)?;
        let served_remotely = !source.on_local_file_system();
        let direct = match options.direct_io {
            DirectIo::Never => None,
            DirectIo::Auto | DirectIo::Always => source.direct_alignment(),
        };
        if options.direct_io == DirectIo::Always && direct.is_none() {
            return Err(Error::InvalidArgument(format!(
                "{}: direct I/O was asked for (always), but the file system does not support direct reads of this file (statx reports no direct-I/O alignment)",
                path.display()
            )));
        }
        Ok(DataFile::Own(OwnFile {
            source,
            mode: options.direct_io,
            direct,
            direct_refused: AtomicBool::new(false),
            window_huge: AtomicBool::new(false),
            staging: Staging::new(Staging::MAX_LEN),
            descriptor: DescriptorMode::default(),
            served_remotely,
            tree: OnceLock::new(),
        }))
    }

    /// Times this reader opened the file: once, and once more where the
    /// tree was scanned through a descriptor of its own.
    pub(crate) fn opens(&self) -> u64 {
        match self {
            DataFile::Own(f) => 1 + u64::from(matches!(f.tree.get(), Some(Some(_)))),
            DataFile::Shared(_) => 1,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            DataFile::Own(f) => f.source.path(),
            DataFile::Shared(f) => f.path(),
        }
    }

    fn len(&self) -> u64 {
        match self {
            DataFile::Own(f) => f.source.len(),
            DataFile::Shared(f) => f.len(),
        }
    }

    /// See [`OwnFile::set_window_in_huge_pages`]; collective reads have no
    /// say.
    pub(crate) fn set_window_in_huge_pages(&self, huge: bool) {
        if let DataFile::Own(f) = self {
            f.set_window_in_huge_pages(huge);
        }
    }

    /// The granule (in bytes) this reader's rounds are planned in: the
    /// page size of a file of whole pages, else 1. `Err` when direct reads
    /// were required and pages do not allow them.
    ///
    /// Whole pages for every kind of read, not only the direct reads that
    /// need them: runs then start on a page of the file and land on a page
    /// of the window, so the kernel's copy from its cache (and MPI-IO's)
    /// moves each page to a page-aligned place. Where a run's window
    /// address was a few bytes past its file offset's place in a page
    /// (modulo 4 KiB), the copy ran at a fifth of its speed on this
    /// project's AMD EPYC test machine (`rep movsb` into such a
    /// destination: 1.4-2.3 GB/s against 6.3-7.8 GB/s from a warm cache);
    /// packed runs met that whenever a round's second stretch started
    /// after a first one of the wrong length, a third of a bulk-loaded
    /// image database's reads, and the reader's copying took twice the
    /// CPU (docs/PERFORMANCE.md, eleventh round). Widening costs at most a
    /// page at each end of a stretch of adjacent runs.
    pub(crate) fn plan_granule(&self, page_size: u64) -> Result<u64> {
        let whole_pages = page_size.is_power_of_two() && self.len() % page_size == 0;
        let required_direct = match self {
            DataFile::Own(own) if own.mode == DirectIo::Always => own.direct.map(|a| (own, a)),
            _ => None,
        };
        if let Some((own, a)) = required_direct {
            if !(a.divides(page_size) && whole_pages) {
                return Err(Error::InvalidArgument(format!(
                    "{}: direct I/O was asked for (always), but its requirements ({} bytes of file, {} of memory) do not fit the database's {page_size}-byte pages in a {}-byte file",
                    own.source.path().display(),
                    a.offset,
                    a.memory,
                    own.source.len()
                )));
            }
        }
        Ok(if whole_pages { page_size } else { 1 })
    }

    /// Reads `runs` (packed back to back into `dest` in file order): on
    /// `streams` threads taking them in `order` (indices into `runs`) for
    /// a file of the reader's own, directly or through the page cache (see
    /// [`DirectIo`]); collectively (every reader calls this the same
    /// number of times) for a shared one. `progress` hears how many runs
    /// at the head of `order` are complete, as they complete (a collective
    /// read completes all at once).
    pub(crate) fn read_runs(
        &self,
        runs: &[ReadRun],
        order: &[usize],
        dest: WindowRange,
        streams: usize,
        progress: &RunsDone<'_>,
    ) -> Result<RunsRead> {
        match self {
            DataFile::Own(f) => f.read_runs(runs, order, dest, streams, progress),
            DataFile::Shared(f) => {
                // SAFETY: dest is valid for its length and untouched by
                // anyone else until this returns (WindowRange::new's
                // contract).
                let requests = unsafe { f.read_runs_collectively(runs, dest.ptr, dest.len) }?;
                progress(runs.len());
                Ok(RunsRead {
                    requests,
                    ..RunsRead::default()
                })
            }
        }
    }

    /// Positioned reads of the tree's pages while the index is built.
    pub(crate) fn source(&self) -> DataSource<'_> {
        match self {
            DataFile::Own(f) => DataSource::Own(
                f.tree
                    .get_or_init(|| f.tree_descriptor())
                    .as_ref()
                    .unwrap_or(&f.source),
            ),
            DataFile::Shared(f) => DataSource::Shared(MpiFileSource::new(f)),
        }
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
    /// later run into them one by one: on the GlusterFS volume the brick's
    /// readahead then fell back to single pages for megabytes after each,
    /// a third of the file went into its cache page by page, and every
    /// reader read 10-20% slower (docs/PERFORMANCE.md, seventeenth round).
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
    fn tree_descriptor(&self) -> Option<FileSource> {
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
    fn read_runs(
        &self,
        runs: &[ReadRun],
        order: &[usize],
        dest: WindowRange,
        streams: usize,
        progress: &RunsDone<'_>,
    ) -> Result<RunsRead> {
        let requests = runs.len() as u64;
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
            let read = read_on_streams(&self.source, runs, order, dest, streams, &landing, &heard);
            if let Landing::Staged(buffers) = landing {
                self.staging
                    .give_back(buffers.into_inner().unwrap_or_else(PoisonError::into_inner));
            }
            match read {
                Ok(issued) => {
                    // A staged run longer than its buffer took a request
                    // per piece.
                    let staged = route == Route::Staged;
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
        read_on_streams(&self.source, runs, rest, dest, streams, &land, &|n| {
            progress(head + n)
        })?;
        Ok(RunsRead {
            requests: requests + refused,
            ..RunsRead::default()
        })
    }

    /// Tells the reader whether the engine's window is in huge pages. Only
    /// then do direct reads land in it: a direct read reaches the device
    /// in one scatter-gather segment per physically contiguous piece of
    /// the destination, so into scattered 4 KiB pages a 4 MiB read left as
    /// four 1 MiB requests (the virtual disk here takes 254 segments each)
    /// and ran at a third of the page cache's speed, and into 2 MiB pages
    /// at more than it (docs/PERFORMANCE.md, fifteenth round). Into a
    /// window in small pages they go through staging buffers.
    pub(crate) fn set_window_in_huge_pages(&self, huge: bool) {
        self.window_huge.store(huge, Ordering::Relaxed);
    }

    /// Where to read `runs` (packed into `dest`): through the cache, or
    /// around it into the window or into staging buffers.
    fn route(&self, runs: &[ReadRun], dest: WindowRange) -> Result<Route> {
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
    fn without_staging(&self, runs: &[ReadRun], dest: WindowRange) -> Result<Route> {
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
fn lands_aligned(align: DirectAlignment, runs: &[ReadRun], dest: WindowRange) -> bool {
    let base = runs.first().map_or(0, |r| r.buf_offset);
    dest.ptr as u64 % align.memory == 0
        && runs
            .iter()
            .all(|r| r.buf_offset.wrapping_sub(base) % align.memory == 0)
}

/// [`ReadAt`] over either kind of data file.
pub(crate) enum DataSource<'f> {
    Own(&'f FileSource),
    Shared(MpiFileSource<'f>),
}

impl ReadAt for DataSource<'_> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        match self {
            DataSource::Own(f) => f.read_exact_at(buf, offset),
            DataSource::Shared(f) => f.read_exact_at(buf, offset),
        }
    }

    fn len(&self) -> u64 {
        match self {
            DataSource::Own(f) => f.len(),
            DataSource::Shared(f) => f.len(),
        }
    }

    fn path(&self) -> &Path {
        match self {
            DataSource::Own(f) => f.path(),
            DataSource::Shared(f) => f.path(),
        }
    }

    fn counters(&self) -> IoSnapshot {
        match self {
            DataSource::Own(f) => f.counters(),
            DataSource::Shared(f) => f.counters(),
        }
    }

    fn will_need(&self, ranges: &[(u64, u64)]) {
        // MPI-IO has no such advice.
        if let DataSource::Own(f) = self {
            f.will_need(ranges);
        }
    }
}

impl DataSource<'_> {
    /// Drops the tree's pages, which building the index has just read,
    /// from the page cache, unless the cache holds most of the file.
    ///
    /// Why: the kernel reads ahead in large folios (up to 2 MiB here), but
    /// a readahead window that meets a page already in the cache is read
    /// in single 4 KiB pages from there on. A bulk-loaded database has a
    /// leaf between the values every few dozen records, and the rounds'
    /// runs read across them, so most windows met one: over half of an
    /// image database went into the cache page by page, with the kernel's
    /// work per page to match (docs/PERFORMANCE.md, tenth and twelfth
    /// rounds). The index lives in the node's memory from here on, so
    /// nothing needs those pages. A file the cache mostly holds is left
    /// alone: its reads meet no readahead, and a dropped page would be read
    /// from storage again. Collective reads leave caching to MPI-IO.
    pub(crate) fn forget_tree_pages(&self, pages: &TreePages, page_size: u64) {
        let DataSource::Own(file) = self else {
            return;
        };
        // Without a way to tell, the pages stay: they may be all the
        // cache holds of a file read from there.
        if file.reads_around_cache() || file.mostly_cached() != Some(false) {
            return;
        }
        let mut pgnos: Vec<u64> = pages
            .branches
            .iter()
            .chain(&pages.leaves)
            .copied()
            .collect();
        pgnos.sort_unstable();
        // One piece of advice per stretch of consecutive pages.
        for run in consecutive_runs(&pgnos, usize::MAX) {
            file.forget_cached(pgnos[run.start] * page_size, run.len() as u64 * page_size);
        }
    }
}

/// A reader's range of the window, handed to the threads that fill it.
#[derive(Clone, Copy)]
pub(crate) struct WindowRange {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the range lies in the node's shared window, which the engine keeps
// alive until every thread writing it has been joined, and no one else reads
// or writes the range until then (the round is published only after).
unsafe impl Send for WindowRange {}
unsafe impl Sync for WindowRange {}

impl WindowRange {
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes, and nobody else may
    /// read or write them until every user of this range has finished.
    pub(crate) unsafe fn new(ptr: *mut u8, len: usize) -> WindowRange {
        WindowRange { ptr, len }
    }

    /// Bytes `[at, at + n)` of the range. The slice must not outlive the
    /// range's guarantee (the read it serves).
    fn slice<'r>(self, at: usize, n: usize) -> Result<&'r mut [u8]> {
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
enum Landing {
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
fn read_on_streams(
    file: &FileSource,
    runs: &[ReadRun],
    order: &[usize],
    dest: WindowRange,
    streams: usize,
    landing: &Landing,
    progress: &RunsDone<'_>,
) -> Result<u64> {
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
    let read_one = |i: usize, stage: Option<&mut StagingBuffer>| -> Result<()> {
        let run = &runs[order[i]];
        let at = run
            .buf_offset
            .checked_sub(base)
            .ok_or_else(|| Error::Internal("runs out of buffer order".into()))?;
        let place = dest.slice(at as usize, run.len as usize)?;
        match stage {
            None => {
                file.read_exact_at(place, run.file_offset)?;
                issued.fetch_add(1, Ordering::Relaxed);
            }
            Some(stage) => {
                let stage = stage.as_mut_slice();
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
    Ok(issued.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const IN_PLACE: Landing = Landing::InPlace;

    /// A scratch file of `len` bytes whose byte at offset i is `i * 7 % 251`.
    fn scratch_file(name: &str, len: usize) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("lmdbio-{}-{name}", std::process::id()));
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// [`scratch_file`] of `pages` pages, synced and out of the page
    /// cache, opened; `None` (the file removed) where the kernel cannot
    /// say what it caches or this file system keeps its pages.
    fn cold_scratch_file(name: &str, pages: u64) -> Option<(std::path::PathBuf, FileSource)> {
        let path = scratch_file(name, (pages * 4096) as usize);
        std::fs::File::open(&path).unwrap().sync_all().unwrap();
        let file = FileSource::open(&path).unwrap();
        file.forget_cached(0, 0);
        if file.cached_bytes(0, pages * 4096) == Some(0) {
            return Some((path, file));
        }
        std::fs::remove_file(path).unwrap();
        None
    }

    fn runs(spans: &[(u64, u64)]) -> Vec<ReadRun> {
        let mut at = 0;
        spans
            .iter()
            .map(|&(file_offset, len)| {
                let r = ReadRun {
                    file_offset,
                    len,
                    buf_offset: at,
                };
                at += len;
                r
            })
            .collect()
    }

    fn in_file_order(runs: &[ReadRun]) -> Vec<usize> {
        (0..runs.len()).collect()
    }

    #[test]
    fn every_stream_count_lands_each_run_where_the_plan_puts_it() {
        let path = scratch_file("streams", 100_000);
        let file = FileSource::open(&path).unwrap();
        let spans = [
            (0, 10),
            (50_000, 4096),
            (10, 7),
            (99_000, 1000),
            (20_000, 1),
        ];
        let runs = runs(&spans);
        let total: usize = spans.iter().map(|s| s.1 as usize).sum();
        let orders = [in_file_order(&runs), vec![3, 0, 4, 1, 2]];
        for (streams, order) in (1..7).flat_map(|s| orders.iter().map(move |o| (s, o))) {
            let mut buf = vec![0u8; total];
            // SAFETY: buf is ours and outlives the call.
            let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
            // What progress hears only grows, one run at a time at most per
            // call, and ends with every run.
            let heard = Mutex::new(vec![0usize]);
            let progress = |n: usize| heard.lock().unwrap().push(n);
            read_on_streams(
                &file,
                &runs,
                order,
                dest,
                streams,
                &Landing::InPlace,
                &progress,
            )
            .unwrap();
            let heard = heard.into_inner().unwrap();
            assert!(heard.windows(2).all(|w| w[0] <= w[1]), "{heard:?}");
            assert_eq!(heard.len(), runs.len() + 1);
            assert_eq!(heard.last(), Some(&runs.len()));
            if streams == 1 {
                assert_eq!(heard, (0..=runs.len()).collect::<Vec<_>>());
            }
            let mut at = 0;
            for &(offset, len) in &spans {
                for i in 0..len as usize {
                    assert_eq!(
                        buf[at + i],
                        ((offset as usize + i) * 7 % 251) as u8,
                        "streams {streams}: byte {i} of the run at {offset}"
                    );
                }
                at += len as usize;
            }
        }
        std::fs::remove_file(path).unwrap();
    }

    /// A reader's file whose window is in huge pages.
    fn own(path: &std::path::Path, mode: DirectIo) -> OwnFile {
        own_staging(path, mode, true, Staging::MAX_LEN)
    }

    fn own_staging(
        path: &std::path::Path,
        mode: DirectIo,
        window_huge: bool,
        staging_max: usize,
    ) -> OwnFile {
        let source = FileSource::open(path).unwrap();
        let direct = (mode != DirectIo::Never)
            .then(|| source.direct_alignment())
            .flatten();
        let served_remotely = !source.on_local_file_system();
        OwnFile {
            served_remotely,
            source,
            mode,
            direct,
            direct_refused: AtomicBool::new(false),
            window_huge: AtomicBool::new(window_huge),
            staging: Staging::new(staging_max),
            descriptor: DescriptorMode::default(),
            tree: OnceLock::new(),
        }
    }

    #[test]
    fn the_tree_is_scanned_around_the_caches_where_the_reader_cannot_do_so_itself() {
        const PAGE: u64 = 4096;
        let Some((path, plain)) = cold_scratch_file("tree-around", 64) else {
            return; // the kernel cannot say, or this file system keeps its pages
        };
        let cached = |pgno: u64| plain.cached_bytes(pgno * PAGE, PAGE);
        // As on a FUSE or network file system: served by another machine,
        // and no direct-I/O alignment reported.
        let like_fuse = |mode| {
            let mut f = own(&path, mode);
            f.direct = None;
            f.served_remotely = true;
            DataFile::Own(f)
        };
        if FileSource::open_around_cache(&path).is_err() {
            std::fs::remove_file(path).unwrap();
            return; // this file system takes no direct reads
        }
        let file = like_fuse(DirectIo::Auto);
        let DataSource::Own(tree) = file.source() else {
            unreachable!()
        };
        assert!(tree.reads_around_cache());
        assert_eq!(file.opens(), 2);
        let pages = TreePages {
            branches: vec![3],
            leaves: vec![10, 11, 40],
        };
        for pgno in [3, 10, 11, 40] {
            let mut page = vec![0u8; PAGE as usize];
            tree.read_exact_at(&mut page, pgno * PAGE).unwrap();
            let first = (pgno * PAGE) as usize;
            assert!(
                (0..PAGE as usize).all(|i| page[i] == ((first + i) * 7 % 251) as u8),
                "page {pgno}"
            );
            assert_eq!(
                cached(pgno),
                Some(0),
                "tree page {pgno} went into the cache"
            );
        }
        // Advice would bring them in; it is not given.
        file.source().will_need(&[(10 * PAGE, 2 * PAGE)]);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(
            cached(10),
            Some(0),
            "advice read a tree page into the cache"
        );
        // There is nothing to drop, and the second descriptor is kept.
        file.source().forget_tree_pages(&pages, PAGE);
        assert_eq!(file.opens(), 2);

        // Not where direct reads are ruled out, nor on a local file system
        // (whatever it reports of direct reads).
        let local = |direct| {
            let mut f = own(&path, DirectIo::Auto);
            f.direct = direct;
            f.served_remotely = false;
            DataFile::Own(f)
        };
        let alignment = Some(DirectAlignment {
            offset: 512,
            memory: 512,
        });
        for file in [like_fuse(DirectIo::Never), local(None), local(alignment)] {
            let DataSource::Own(tree) = file.source() else {
                unreachable!()
            };
            assert!(!tree.reads_around_cache());
            assert_eq!(file.opens(), 1);
        }
        // Nor where the cache holds most of the file: its pages are read
        // from there.
        let mut whole = vec![0u8; 64 * PAGE as usize];
        plain.read_exact_at(&mut whole, 0).unwrap();
        let file = like_fuse(DirectIo::Auto);
        let DataSource::Own(tree) = file.source() else {
            unreachable!()
        };
        assert!(!tree.reads_around_cache());
        assert_eq!(file.opens(), 1);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn tree_pages_leave_the_cache_unless_the_cache_holds_most_of_the_file() {
        const PAGE: u64 = 4096;
        let Some((path, file)) = cold_scratch_file("forget-tree", 64) else {
            return; // the kernel cannot say, or this file system keeps its pages
        };
        let cached = |pgno: u64| file.cached_bytes(pgno * PAGE, PAGE);
        let read_page = |pgno: u64| {
            let mut page = vec![0u8; PAGE as usize];
            file.read_exact_at(&mut page, pgno * PAGE).unwrap();
        };
        let tree = TreePages {
            branches: vec![3],
            leaves: vec![10, 11, 40],
        };
        // A cold file with its tree read: the tree's pages go.
        for pgno in [3, 10, 11, 40] {
            read_page(pgno);
        }
        assert_eq!(cached(10), Some(PAGE), "a page just read is cached");
        DataSource::Own(&file).forget_tree_pages(&tree, PAGE);
        for pgno in [3, 10, 11, 40] {
            assert_eq!(cached(pgno), Some(0), "tree page {pgno} is still cached");
        }
        // A file the cache holds: nothing goes.
        for pgno in 0..64 {
            read_page(pgno);
        }
        DataSource::Own(&file).forget_tree_pages(&tree, PAGE);
        assert_eq!(file.cached_bytes(0, 64 * PAGE), Some(64 * PAGE));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn rounds_are_planned_in_whole_pages_whenever_the_file_is_whole_pages() {
        let whole = scratch_file("granule-whole", 4 * 4096);
        let ragged = scratch_file("granule-ragged", 4 * 4096 + 100);
        for mode in [DirectIo::Never, DirectIo::Auto] {
            let file = DataFile::Own(own(&whole, mode));
            assert_eq!(file.plan_granule(4096).unwrap(), 4096, "{mode:?}");
            // A page size the file is not made of, or no page size at all.
            assert_eq!(file.plan_granule(3 * 4096).unwrap(), 1, "{mode:?}");
            assert_eq!(file.plan_granule(0).unwrap(), 1, "{mode:?}");
            let file = DataFile::Own(own(&ragged, mode));
            assert_eq!(file.plan_granule(4096).unwrap(), 1, "{mode:?}");
        }
        // Required direct reads of a file they cannot serve are refused.
        let always = own(&ragged, DirectIo::Always);
        if always.direct.is_some() {
            let e = DataFile::Own(always).plan_granule(4096).unwrap_err();
            assert!(e.to_string().contains("direct I/O was asked for"), "{e}");
        }
        std::fs::remove_file(whole).unwrap();
        std::fs::remove_file(ragged).unwrap();
    }

    #[test]
    fn a_read_in_the_other_mode_waits_for_the_reads_in_progress() {
        let path = scratch_file("modes", 1 << 16);
        let file = own(&path, DirectIo::Always);
        if file.direct.is_none() {
            std::fs::remove_file(path).unwrap();
            return; // no direct reads on this file system
        }
        let first = file.descriptor.enter(&file.source, true).unwrap();
        assert!(file.source.is_direct().unwrap());
        let cached = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _held = file.descriptor.enter(&file.source, false).unwrap();
                assert!(!file.source.is_direct().unwrap());
                cached.store(true, Ordering::SeqCst);
            });
            // Another direct read joins the one in progress ...
            let second = file.descriptor.enter(&file.source, true).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
            // ... while the cached one waits for both.
            assert!(!cached.load(Ordering::SeqCst));
            assert!(file.source.is_direct().unwrap());
            drop(second);
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!cached.load(Ordering::SeqCst));
            assert!(file.source.is_direct().unwrap());
            drop(first);
        });
        assert!(cached.load(Ordering::SeqCst));
        assert!(!file.source.is_direct().unwrap());
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn direct_rounds_deliver_the_same_bytes_and_auto_follows_the_page_cache() {
        let path = scratch_file("direct", 1 << 20);
        std::fs::File::open(&path).unwrap().sync_all().unwrap();
        let always = own(&path, DirectIo::Always);
        if always.direct.is_none() {
            std::fs::remove_file(path).unwrap();
            return; // checked by the MPI tests: refused at open
        }
        // Whole pages, out of file order, as an aligned plan makes them.
        let spans = [(8192, 4096), (0, 4096), (65536, 12288), (1 << 19, 4096)];
        let runs = runs(&spans);
        let total: usize = spans.iter().map(|s| s.1 as usize).sum();
        let mut storage = vec![0u8; total + 4096];
        let skip = storage.as_ptr().align_offset(4096);
        let check = |buf: &[u8]| {
            let mut at = 0;
            for &(offset, len) in &spans {
                for i in 0..len as usize {
                    assert_eq!(buf[at + i], ((offset as usize + i) * 7 % 251) as u8);
                }
                at += len as usize;
            }
        };
        let read = |file: &OwnFile, storage: &mut Vec<u8>| {
            storage.fill(0);
            let buf = &mut storage[skip..skip + total];
            // SAFETY: buf is ours and outlives the call.
            let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
            let done = file
                .read_runs(&runs, &in_file_order(&runs), dest, 2, &|_| {})
                .unwrap();
            check(&storage[skip..skip + total]);
            done
        };
        assert_eq!(read(&always, &mut storage).direct_requests, 4);
        let never = own(&path, DirectIo::Never);
        assert_eq!(read(&never, &mut storage).direct_requests, 0);
        // Never left the pages cached: auto reads through the cache ...
        let auto = own(&path, DirectIo::Auto);
        assert_eq!(read(&auto, &mut storage).direct_requests, 0);
        // ... until they are dropped (where the kernel can say).
        auto.source.forget_cached(0, 0);
        let expect = if auto.source.cached_bytes(0, 4096).is_some() {
            4
        } else {
            0
        };
        assert_eq!(read(&auto, &mut storage).direct_requests, expect);
        // An unaligned destination: both read through staging buffers
        // where the system gives huge pages; else auto falls back to the
        // cache and always refuses.
        let staging = StagingBuffer::new(HUGE_PAGE).is_some();
        auto.source.forget_cached(0, 0);
        let order = in_file_order(&runs);
        for file in [&auto, &always] {
            storage.fill(0);
            let buf = &mut storage[skip + 1..skip + 1 + total];
            // SAFETY: buf is ours and outlives the call.
            let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
            let read = file.read_runs(&runs, &order, dest, 2, &|_| {});
            match (staging, file.mode) {
                (true, mode) => {
                    let read = read.unwrap();
                    let want = if mode == DirectIo::Always { 4 } else { expect };
                    assert_eq!(read.staged_requests, want, "{mode:?}");
                    check(&storage[skip + 1..skip + 1 + total]);
                }
                (false, DirectIo::Auto) => assert_eq!(read.unwrap().direct_requests, 0),
                (false, _) => assert!(matches!(read, Err(Error::Internal(_)))),
            }
        }
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_window_in_small_pages_is_filled_through_staging_buffers_in_pieces() {
        const MIB: u64 = 1 << 20;
        let path = scratch_file("staged", 7 * MIB as usize);
        std::fs::File::open(&path).unwrap().sync_all().unwrap();
        // Buffers of one huge page: the 5 MiB run is read in three pieces.
        let file = own_staging(&path, DirectIo::Always, false, HUGE_PAGE);
        if file.direct.is_none() || StagingBuffer::new(HUGE_PAGE).is_none() {
            std::fs::remove_file(path).unwrap();
            return; // no direct reads here, or no huge pages to stage in
        }
        let spans = [(MIB, 5 * MIB), (0, 4096), (6 * MIB, 8192)];
        let runs = runs(&spans);
        let total: usize = spans.iter().map(|s| s.1 as usize).sum();
        for streams in [1, 3] {
            let mut buf = vec![0u8; total];
            // SAFETY: buf is ours and outlives the call.
            let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
            let read = file
                .read_runs(&runs, &[1, 0, 2], dest, streams, &|_| {})
                .unwrap();
            // 5 MiB in pieces of 2 MiB, and the two short runs.
            assert_eq!(
                (read.requests, read.direct_requests, read.staged_requests),
                (5, 5, 5)
            );
            let mut at = 0;
            for &(offset, len) in &spans {
                let want = (0..len as usize).map(|i| ((offset as usize + i) * 7 % 251) as u8);
                assert!(
                    buf[at..at + len as usize].iter().copied().eq(want),
                    "streams {streams}: the run at {offset}"
                );
                at += len as usize;
            }
            // The streams' buffers are kept for the next round.
            let idle = file.staging.idle.lock().unwrap();
            assert_eq!(idle.len(), streams);
            assert!(idle.iter().all(|b| b.len() == HUGE_PAGE));
        }
        // Where the system gives no huge pages, always reads straight into
        // the window as it is (aligned) or refuses (not), and auto reads
        // through the cache.
        let mut storage = vec![0u8; total + 4096 + 1];
        let skip = storage.as_ptr().align_offset(4096);
        for (shift, mode) in [
            (0, DirectIo::Always),
            (1, DirectIo::Always),
            (0, DirectIo::Auto),
        ] {
            let file = own_staging(&path, mode, false, HUGE_PAGE);
            file.staging.refused.store(true, Ordering::Relaxed);
            file.source.forget_cached(0, 0);
            let buf = &mut storage[skip + shift..skip + shift + total];
            // SAFETY: buf is ours and outlives the call.
            let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
            let read = file.read_runs(&runs, &[0, 1, 2], dest, 2, &|_| {});
            match (mode, shift) {
                (DirectIo::Always, 0) => {
                    let read = read.unwrap();
                    assert_eq!((read.direct_requests, read.staged_requests), (3, 0));
                }
                (DirectIo::Always, _) => assert!(matches!(read, Err(Error::Internal(_)))),
                _ => assert_eq!(read.unwrap().direct_requests, 0, "auto without huge pages"),
            }
        }
        // The window in huge pages: straight into it, no staging.
        file.set_window_in_huge_pages(true);
        let mut storage = vec![0u8; total + 4096];
        let skip = storage.as_ptr().align_offset(4096);
        let buf = &mut storage[skip..skip + total];
        // SAFETY: buf is ours and outlives the call.
        let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
        let read = file.read_runs(&runs, &[0, 1, 2], dest, 2, &|_| {}).unwrap();
        assert_eq!((read.direct_requests, read.staged_requests), (3, 0));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_run_past_the_end_fails_as_truncated_and_a_mismatched_buffer_is_refused() {
        let path = scratch_file("short", 1000);
        let file = FileSource::open(&path).unwrap();
        let runs = runs(&[(0, 100), (950, 100)]);
        let mut buf = vec![0u8; 200];
        // SAFETY: buf is ours and outlives the calls.
        let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
        // The run past the end is read first: nothing is reported complete.
        let heard = Mutex::new(Vec::new());
        let progress = |n: usize| heard.lock().unwrap().push(n);
        let err =
            read_on_streams(&file, &runs, &[1, 0], dest, 1, &IN_PLACE, &progress).unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }), "{err}");
        assert!(heard.lock().unwrap().is_empty());
        let err = read_on_streams(&file, &runs, &[0, 1], dest, 2, &IN_PLACE, &|_| {}).unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }), "{err}");
        // SAFETY: as above, a shorter view of the same buffer.
        let short = unsafe { WindowRange::new(buf.as_mut_ptr(), 150) };
        assert!(read_on_streams(&file, &runs, &[0, 1], short, 2, &IN_PLACE, &|_| {}).is_err());
        // An order that is not one of the runs.
        assert!(read_on_streams(&file, &runs, &[0, 0], dest, 2, &IN_PLACE, &|_| {}).is_err());
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_partial_order_reads_only_the_runs_it_names() {
        // What a read through the cache does after direct reads were
        // refused part way: the runs already in are not written again.
        let path = scratch_file("partial", 10_000);
        let file = FileSource::open(&path).unwrap();
        let runs = runs(&[(0, 100), (5000, 100), (9000, 100)]);
        let mut buf = vec![0u8; 300];
        // SAFETY: buf is ours and outlives the call.
        let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
        let heard = Mutex::new(Vec::new());
        let progress = |n: usize| heard.lock().unwrap().push(n);
        read_on_streams(&file, &runs, &[2, 1], dest, 2, &IN_PLACE, &progress).unwrap();
        assert!(buf[..100].iter().all(|&b| b == 0));
        for (at, offset) in [(100, 5000), (200, 9000)] {
            for i in 0..100 {
                assert_eq!(buf[at + i], ((offset + i) * 7 % 251) as u8);
            }
        }
        assert_eq!(heard.into_inner().unwrap().last(), Some(&2));
        std::fs::remove_file(path).unwrap();
    }
}
