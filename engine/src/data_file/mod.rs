//! The data file as a node's reader holds it, opened once per reader.
//!
//! * Independent reads (the default): the reader opens the file on its own
//!   and reads its runs with positioned reads (`pread`) on a few threads,
//!   each taking the next run in the order the round's steps need them (see
//!   [`crate::step_ready`]). Several requests in flight is what a single
//!   reader needs to keep up with storage that serves parallel streams
//!   faster than one, and ROMIO's independent reads allow one at a time per
//!   handle (MPICH's global lock, glibc's one-request-per-descriptor AIO
//!   queue; see docs/design/independent-reads.md). For a regular file
//!   ROMIO's independent read is itself a `pread` loop, so no file system
//!   support is lost. Rounds the page cache does not hold are read around
//!   it (direct I/O) where the file system allows: straight into the window
//!   where it is in huge pages, else into a small buffer of the reader's
//!   own in huge pages and copied into the window; see [`DirectIo`],
//!   [`lmdbio_core::page_cache`] and [`lmdbio_core::huge_pages`].
//! * Collective reads: the readers open the file together with MPI-IO and
//!   read with `MPI_File_read_at_all`, so MPI-IO may aggregate across nodes
//!   when its hints enable collective buffering.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use super::EngineOptions;
use crate::mpi_raw::{Comm, MpiFile, MpiFileSource};
use crate::node_stage::NodeStage;
use lmdbio_core::error::{Error, Result};
use lmdbio_core::plan::ReadRun;
use lmdbio_core::source::{FileSource, ReadAt};

mod own_file;
mod staging;
mod streams;
mod tree_source;

#[cfg(test)]
mod tests;

use own_file::DescriptorMode;
pub(crate) use own_file::OwnFile;
use staging::Staging;
pub(crate) use streams::WindowRange;
pub(crate) use tree_source::DataSource;

/// Whether independent reads go around the kernel's page cache.
///
/// A direct read spares the kernel's copy into the window, and with the
/// window in huge pages it beat reads through the cache; into 4 KiB pages
/// it ran far slower (the device got four small requests for each read;
/// see docs/design/direct-io.md). A
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
            stage: OnceLock::new(),
        }))
    }

    /// Reads runs this node's stage holds from there from now on (see
    /// [`EngineOptions::stage`]); collective reads have none.
    pub(crate) fn attach_stage(&self, stage: NodeStage) {
        if let DataFile::Own(f) = self {
            let _ = f.stage.set(Arc::new(stage));
        }
    }

    /// The node's stage, if this reader has one.
    pub(crate) fn stage(&self) -> Option<&NodeStage> {
        match self {
            DataFile::Own(f) => f.stage.get().map(|s| &**s),
            DataFile::Shared(_) => None,
        }
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

    pub(crate) fn len(&self) -> u64 {
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
    /// Whole pages for every kind of read, not only the direct reads that need
    /// them: runs then start on a page of the file and land on a page of the
    /// window, so the kernel's copy from its cache (and MPI-IO's) moves each
    /// page to a page-aligned place. Where a run's window address was a few
    /// bytes past its file offset's place in a page (modulo 4 KiB), the copy
    /// (`rep movsb`) ran at a fraction of its speed, and packed runs met that
    /// for a large part of a bulk-loaded image database's reads (see
    /// docs/design/coalescing.md). Widening costs at most a page at each end of
    /// a stretch of adjacent runs.
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
    /// read completes all at once). Runs the node's stage holds are read
    /// from there, each setting its flag in `staged` (see
    /// [`crate::node_stage`]).
    pub(crate) fn read_runs(
        &self,
        runs: &[ReadRun],
        order: &[usize],
        dest: WindowRange,
        streams: usize,
        progress: &RunsDone<'_>,
        staged: &[std::sync::atomic::AtomicBool],
    ) -> Result<RunsRead> {
        match self {
            DataFile::Own(f) => f.read_runs_marking(runs, order, dest, streams, progress, staged),
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
