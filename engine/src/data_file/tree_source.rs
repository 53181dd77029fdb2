//! The data file as the tree scan reads it, and dropping the tree's pages
//! from the page cache after the scan (see
//! docs/design/tree-scan-around-cache.md).

use std::path::Path;

use crate::mpi_raw::MpiFileSource;
use lmdbio_core::error::Result;
use lmdbio_core::index::{consecutive_runs, TreePages};
use lmdbio_core::source::{FileSource, IoSnapshot, ReadAt};

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
    /// Why: the kernel reads ahead in large folios (up to 2 MiB here), but a
    /// readahead window that meets a page already in the cache is read in
    /// single 4 KiB pages from there on. A bulk-loaded database has a leaf
    /// between the values every few dozen records, and the rounds' runs read
    /// across them, so most windows met one and much of the file went into the
    /// cache page by page (see docs/design/tree-scan-around-cache.md). The
    /// index lives in the node's memory from here on, so nothing needs those
    /// pages. A file the cache mostly holds is left alone: its reads meet no
    /// readahead, and a dropped page would be read from storage again.
    /// Collective reads leave caching to MPI-IO.
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
