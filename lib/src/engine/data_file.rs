//! The data file as a node's reader holds it, opened once per reader.
//!
//! * Independent reads (the default): the reader opens the file on its own
//!   and reads its runs with positioned reads (`pread`) on a few threads,
//!   each taking a contiguous share of the round. Several requests in
//!   flight is what a single reader needs to keep up with storage that
//!   serves parallel streams faster than one: measured here, two streams
//!   delivered 1.1–1.6× what ROMIO's independent reads did with one handle
//!   per reader, where MPICH's global lock and glibc's
//!   one-request-per-descriptor AIO queue allow one request at a time
//!   (docs/PERFORMANCE.md). For a regular file ROMIO's independent read is
//!   itself a `pread` loop, so no file system support is lost.
//!   Rounds the page cache does not hold are read around it (direct I/O)
//!   where the file system allows, straight into the window; see
//!   [`DirectIo`] and [`crate::page_cache`].
//! * Collective reads: the readers open the file together with MPI-IO and
//!   read with `MPI_File_read_at_all`, so MPI-IO may aggregate across nodes
//!   when its hints enable collective buffering.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::EngineOptions;
use crate::error::{Error, Result};
use crate::mpi_raw::{Comm, MpiFile, MpiFileSource};
use crate::page_cache::DirectAlignment;
use crate::plan::ReadRun;
use crate::source::{FileSource, IoSnapshot, ReadAt};

/// Whether independent reads go around the kernel's page cache.
///
/// Measured on the test machine (docs/PERFORMANCE.md), direct reads cost a
/// fifth of the system CPU but delivered less than reads through the cache
/// with the kernel's readahead at one rank per node (0.8–0.9×), and about
/// the same at two; so the default stays with the cache, and the others
/// are there for nodes where CPU, not storage, is short, and for datasets
/// far larger than memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirectIo {
    /// Always read through the page cache.
    #[default]
    Never,
    /// Read a round directly when the file system supports it and the page
    /// cache holds less than half of the round's bytes; through the cache
    /// otherwise (a file read recently, or a kernel that cannot say what
    /// it holds: `cachestat` is Linux 6.5+).
    Auto,
    /// Read every round directly; opening fails where the file system
    /// does not support it.
    Always,
}

/// What one call to [`DataFile::read_runs`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RunsRead {
    pub requests: u64,
    /// Of those, read around the page cache.
    pub direct_requests: u64,
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
}

impl DataFile {
    /// Opens the file on a reader: on its own, or collectively over
    /// `readers` for collective reads.
    pub(crate) fn open(readers: &Comm, path: &Path, options: &EngineOptions) -> Result<DataFile> {
        if options.collective {
            let comm = Comm::dup(readers.raw())?;
            let hints = super::effective_hints(&options.hints);
            return Ok(DataFile::Shared(MpiFile::open(comm, path, &hints)?));
        }
        let source = FileSource::open(path)?;
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
        }))
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            DataFile::Own(f) => f.source.path(),
            DataFile::Shared(f) => f.path(),
        }
    }

    /// The granule (in bytes) this reader's rounds should be planned in
    /// for direct reads of a database with `page_size`-byte pages: the
    /// page size when direct reads of whole pages are possible, else 1.
    /// `Err` when direct reads were required and pages do not allow them.
    pub(crate) fn direct_granule(&self, page_size: u64) -> Result<u64> {
        let DataFile::Own(own) = self else {
            return Ok(1);
        };
        let whole_pages = page_size > 0 && own.source.len() % page_size == 0;
        match own.direct {
            Some(a) if a.divides(page_size) && whole_pages => Ok(page_size),
            Some(a) if own.mode == DirectIo::Always => Err(Error::InvalidArgument(format!(
                "{}: direct I/O was asked for (always), but its requirements ({} bytes of file, {} of memory) do not fit the database's {page_size}-byte pages in a {}-byte file",
                own.source.path().display(),
                a.offset,
                a.memory,
                own.source.len()
            ))),
            _ => Ok(1),
        }
    }

    /// Reads `runs` (packed back to back into `dest`): on `streams` threads
    /// for a file of the reader's own, directly or through the page cache
    /// (see [`DirectIo`]); collectively (every reader calls this the same
    /// number of times) for a shared one.
    pub(crate) fn read_runs(
        &self,
        runs: &[ReadRun],
        dest: WindowRange,
        streams: usize,
    ) -> Result<RunsRead> {
        match self {
            DataFile::Own(f) => f.read_runs(runs, dest, streams),
            // SAFETY: dest is valid for its length and untouched by anyone
            // else until this returns (WindowRange::new's contract).
            DataFile::Shared(f) => unsafe { f.read_runs_collectively(runs, dest.ptr, dest.len) }
                .map(|requests| RunsRead {
                    requests,
                    direct_requests: 0,
                }),
        }
    }

    /// Positioned reads of the tree's pages while the index is built.
    pub(crate) fn source(&self) -> DataSource<'_> {
        match self {
            DataFile::Own(f) => DataSource::Own(&f.source),
            DataFile::Shared(f) => DataSource::Shared(MpiFileSource::new(f)),
        }
    }
}

impl OwnFile {
    fn read_runs(&self, runs: &[ReadRun], dest: WindowRange, streams: usize) -> Result<RunsRead> {
        let requests = runs.len() as u64;
        let mut refused = 0;
        if self.wants_direct(runs, dest)? {
            self.source.set_direct(true)?;
            match read_on_streams(&self.source, runs, dest, streams) {
                Ok(()) => {
                    return Ok(RunsRead {
                        requests,
                        direct_requests: requests,
                    })
                }
                Err(Error::Io { source, .. })
                    if source.raw_os_error() == Some(libc::EINVAL)
                        && self.mode == DirectIo::Auto =>
                {
                    // The file system claimed support it does not have
                    // (some network file systems): read this and every
                    // later round through the cache, counting the refused
                    // requests (at most: the attempt may have stopped
                    // early).
                    self.direct_refused.store(true, Ordering::Relaxed);
                    refused = requests;
                }
                Err(e) => return Err(e),
            }
        }
        // Only a descriptor that may have been switched needs switching
        // back; the default never switches, so it makes no call here.
        if self.direct.is_some() {
            self.source.set_direct(false)?;
        }
        read_on_streams(&self.source, runs, dest, streams)?;
        Ok(RunsRead {
            requests: requests + refused,
            direct_requests: 0,
        })
    }

    /// Whether to read `runs` into `dest` around the page cache.
    fn wants_direct(&self, runs: &[ReadRun], dest: WindowRange) -> Result<bool> {
        let Some(align) = self.direct else {
            return Ok(false);
        };
        if self.direct_refused.load(Ordering::Relaxed) || runs.is_empty() {
            return Ok(false);
        }
        let aligned = dest.ptr as u64 % align.memory == 0
            && runs.iter().all(|r| {
                r.file_offset % align.offset == 0
                    && r.len % align.offset == 0
                    && r.buf_offset % align.memory == 0
            });
        match (self.mode, aligned) {
            (DirectIo::Always, false) => Err(Error::Internal(
                "a round planned for direct reads is not aligned for them".into(),
            )),
            (DirectIo::Always, true) => Ok(true),
            (_, false) => Ok(false),
            (_, true) => {
                let total: u64 = runs.iter().map(|r| r.len).sum();
                let cached = runs.iter().try_fold(0u64, |sum, r| {
                    self.source
                        .cached_bytes(r.file_offset, r.len)
                        .map(|c| sum + c.min(r.len))
                });
                // Without a way to tell, trust the cache: a file it holds
                // would be read from storage again.
                Ok(cached.is_some_and(|c| c * 2 < total))
            }
        }
    }
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

/// Reads `runs` (packed back to back into `dest`) with `streams` threads,
/// each taking a contiguous share of about equal bytes; one request per
/// run.
fn read_on_streams(
    file: &FileSource,
    runs: &[ReadRun],
    dest: WindowRange,
    streams: usize,
) -> Result<()> {
    let total: u64 = runs.iter().map(|r| r.len).sum();
    if total != dest.len as u64 {
        return Err(Error::Internal(
            "read buffer does not match its runs".into(),
        ));
    }
    // Where each run lands in `dest`, and which stream reads it.
    let streams = streams.clamp(1, runs.len().max(1));
    let mut shares: Vec<Vec<(u64, usize, usize)>> = vec![Vec::new(); streams];
    let mut at = 0u64;
    for r in runs {
        let share = (at * streams as u64 / total.max(1)) as usize;
        shares[share.min(streams - 1)].push((r.file_offset, at as usize, r.len as usize));
        at += r.len;
    }
    let read_share = |share: &[(u64, usize, usize)]| -> Result<()> {
        for &(offset, at, n) in share {
            file.read_exact_at(dest.slice(at, n)?, offset)?;
        }
        Ok(())
    };
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let (first, rest) = shares.split_first().expect("at least one stream");
        let others: Vec<_> = rest
            .iter()
            .map(|share| scope.spawn(move || read_share(share)))
            .collect();
        let mut results = vec![read_share(first)];
        results.extend(others.into_iter().map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(Error::Internal("a read stream panicked".into())))
        }));
        results
    });
    results.into_iter().collect::<Result<Vec<()>>>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch file of `len` bytes whose byte at offset i is `i * 7 % 251`.
    fn scratch_file(name: &str, len: usize) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("lmdbio-{}-{name}", std::process::id()));
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, bytes).unwrap();
        path
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
        for streams in 1..7 {
            let mut buf = vec![0u8; total];
            // SAFETY: buf is ours and outlives the call.
            let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
            read_on_streams(&file, &runs, dest, streams).unwrap();
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

    fn own(path: &std::path::Path, mode: DirectIo) -> OwnFile {
        let source = FileSource::open(path).unwrap();
        let direct = (mode != DirectIo::Never)
            .then(|| source.direct_alignment())
            .flatten();
        OwnFile {
            source,
            mode,
            direct,
            direct_refused: AtomicBool::new(false),
        }
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
            let done = file.read_runs(&runs, dest, 2).unwrap();
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
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(&path).unwrap();
        // SAFETY: advice on a descriptor we own.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let expect = if auto.source.cached_bytes(0, 4096).is_some() {
            4
        } else {
            0
        };
        assert_eq!(read(&auto, &mut storage).direct_requests, expect);
        // An unaligned destination: auto falls back, always refuses.
        let buf = &mut storage[skip + 1..skip + 1 + total];
        // SAFETY: buf is ours and outlives the calls.
        let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
        assert_eq!(auto.read_runs(&runs, dest, 2).unwrap().direct_requests, 0);
        assert!(matches!(
            always.read_runs(&runs, dest, 2),
            Err(Error::Internal(_))
        ));
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
        let err = read_on_streams(&file, &runs, dest, 2).unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }), "{err}");
        // SAFETY: as above, a shorter view of the same buffer.
        let short = unsafe { WindowRange::new(buf.as_mut_ptr(), 150) };
        assert!(read_on_streams(&file, &runs, short, 2).is_err());
        std::fs::remove_file(path).unwrap();
    }
}
