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
//! * Collective reads: the readers open the file together with MPI-IO and
//!   read with `MPI_File_read_at_all`, so MPI-IO may aggregate across nodes
//!   when its hints enable collective buffering.

use std::path::Path;

use super::EngineOptions;
use crate::error::{Error, Result};
use crate::mpi_raw::{Comm, MpiFile, MpiFileSource};
use crate::plan::ReadRun;
use crate::source::{FileSource, IoSnapshot, ReadAt};

pub(crate) enum DataFile {
    /// A descriptor of this reader's own (independent reads).
    Own(FileSource),
    /// One MPI-IO handle shared by the readers (collective reads).
    Shared(MpiFile),
}

impl DataFile {
    /// Opens the file on a reader: on its own, or collectively over
    /// `readers` for collective reads.
    pub(crate) fn open(readers: &Comm, path: &Path, options: &EngineOptions) -> Result<DataFile> {
        if options.collective {
            let comm = Comm::dup(readers.raw())?;
            let hints = super::effective_hints(&options.hints);
            Ok(DataFile::Shared(MpiFile::open(comm, path, &hints)?))
        } else {
            Ok(DataFile::Own(FileSource::open(path)?))
        }
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            DataFile::Own(f) => f.path(),
            DataFile::Shared(f) => f.path(),
        }
    }

    /// Reads `runs` (packed back to back into `dest`) and returns the
    /// number of requests made: on `streams` threads for a file of the
    /// reader's own; collectively (every reader calls this the same number
    /// of times) for a shared one.
    pub(crate) fn read_runs(
        &self,
        runs: &[ReadRun],
        dest: WindowRange,
        streams: usize,
    ) -> Result<u64> {
        match self {
            DataFile::Own(f) => read_on_streams(f, runs, dest, streams),
            // SAFETY: dest is valid for its length and untouched by anyone
            // else until this returns (WindowRange::new's contract).
            DataFile::Shared(f) => unsafe { f.read_runs_collectively(runs, dest.ptr, dest.len) },
        }
    }

    /// Positioned reads of the tree's pages while the index is built.
    pub(crate) fn source(&self) -> DataSource<'_> {
        match self {
            DataFile::Own(f) => DataSource::Own(f),
            DataFile::Shared(f) => DataSource::Shared(MpiFileSource::new(f)),
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
/// each taking a contiguous share of about equal bytes, and returns the
/// number of requests made.
fn read_on_streams(
    file: &FileSource,
    runs: &[ReadRun],
    dest: WindowRange,
    streams: usize,
) -> Result<u64> {
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
    Ok(runs.len() as u64)
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
            assert_eq!(read_on_streams(&file, &runs, dest, streams).unwrap(), 5);
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
