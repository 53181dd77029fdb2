//! Positioned reads: the only way lmdbio touches a data file.
//!
//! No mmap and no liblmdb: every byte arrives through [`ReadAt`], so the
//! same index and batch code runs over `pread` here and over MPI-IO in the
//! engine, and every request is counted.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// A file that can be read at any offset from several threads at once.
pub trait ReadAt: Send + Sync {
    /// Fills `buf` from `offset`; a read past the end is an error, never a
    /// short buffer.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// Length of the file in bytes, as seen when it was opened.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Name used in error messages.
    fn path(&self) -> &Path;
    /// Requests and bytes served so far.
    fn counters(&self) -> IoSnapshot;
    /// Advice that `[offset, offset + len)` of each range will be read
    /// soon, so the storage may work on all of them at once. Advice only:
    /// it reads nothing into any buffer, counts nothing, and fails never.
    fn will_need(&self, _ranges: &[(u64, u64)]) {}
}

/// Read counters. Atomics so concurrent index threads can share one source.
#[derive(Debug, Default)]
pub struct IoCounters {
    requests: AtomicU64,
    bytes: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoSnapshot {
    pub read_requests: u64,
    pub bytes_read: u64,
}

impl IoSnapshot {
    pub fn since(self, earlier: IoSnapshot) -> IoSnapshot {
        IoSnapshot {
            read_requests: self.read_requests - earlier.read_requests,
            bytes_read: self.bytes_read - earlier.bytes_read,
        }
    }
}

impl IoCounters {
    pub fn record(&self, bytes: usize) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> IoSnapshot {
        IoSnapshot {
            read_requests: self.requests.load(Ordering::Relaxed),
            bytes_read: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// A data file read with `pread`. Opened read-only; the lock file is never
/// touched, so read-only and lockless file systems work.
pub struct FileSource {
    file: File,
    path: PathBuf,
    len: u64,
    counters: IoCounters,
}

impl FileSource {
    pub fn open(path: &Path) -> Result<FileSource> {
        let file = File::open(path).map_err(|e| Error::NotFound {
            path: path.to_owned(),
            reason: format!("cannot open for reading: {e}"),
        })?;
        let meta = file.metadata().map_err(|e| Error::NotFound {
            path: path.to_owned(),
            reason: format!("cannot stat: {e}"),
        })?;
        if !meta.is_file() {
            return Err(Error::NotFound {
                path: path.to_owned(),
                reason: "not a regular file".into(),
            });
        }
        Ok(FileSource {
            file,
            path: path.to_owned(),
            len: meta.len(),
            counters: IoCounters::default(),
        })
    }
}

impl FileSource {
    /// What direct reads of this file need, if its file system allows
    /// them (see [`crate::page_cache`]).
    pub fn direct_alignment(&self) -> Option<crate::page_cache::DirectAlignment> {
        crate::page_cache::direct_alignment(&self.file)
    }

    /// Whether reads of this source go around the page cache now.
    #[cfg(all(test, target_os = "linux"))]
    pub(crate) fn is_direct(&self) -> bool {
        crate::page_cache::is_direct(&self.file).expect("F_GETFL on an open file")
    }

    /// Switches direct reads on or off for every thread reading this
    /// source; no read of the other kind may be in flight meanwhile.
    pub fn set_direct(&self, on: bool) -> Result<()> {
        crate::page_cache::set_direct(&self.file, on).map_err(|e| {
            Error::InvalidArgument(format!(
                "{}: cannot switch direct reads {}: {e}",
                self.path.display(),
                if on { "on" } else { "off" }
            ))
        })
    }

    /// Bytes of `[offset, offset + len)` in the page cache, if the kernel
    /// can say.
    pub fn cached_bytes(&self, offset: u64, len: u64) -> Option<u64> {
        crate::page_cache::cached_bytes(&self.file, offset, len)
    }

    /// Drops `[offset, offset + len)` from the page cache where the kernel
    /// will (see [`crate::page_cache::forget`]). Advice, so a refusal is
    /// not an error.
    pub fn forget_cached(&self, offset: u64, len: u64) {
        let _ = crate::page_cache::forget(&self.file, offset, len);
    }
}

impl ReadAt for FileSource {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let end = offset.saturating_add(buf.len() as u64);
        if end > self.len {
            return Err(Error::Truncated {
                path: self.path.clone(),
                what: format!("a read of {} bytes at offset {offset}", buf.len()),
                needed_end: end,
                file_len: self.len,
            });
        }
        self.counters.record(buf.len());
        self.file.read_exact_at(buf, offset).map_err(|source| {
            if source.kind() == std::io::ErrorKind::UnexpectedEof {
                // The file shrank after we opened it.
                Error::Truncated {
                    path: self.path.clone(),
                    what: format!("a read of {} bytes at offset {offset}", buf.len()),
                    needed_end: end,
                    file_len: self.file.metadata().map(|m| m.len()).unwrap_or(0),
                }
            } else {
                Error::Io {
                    path: self.path.clone(),
                    offset,
                    len: buf.len(),
                    source,
                }
            }
        })
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn counters(&self) -> IoSnapshot {
        self.counters.snapshot()
    }

    fn will_need(&self, ranges: &[(u64, u64)]) {
        for &(offset, len) in ranges {
            let _ = crate::page_cache::will_need(&self.file, offset, len);
        }
    }
}

/// An in-memory file: lets the fuzzer and corruption tests drive the exact
/// code path real files take.
pub struct MemSource {
    bytes: Vec<u8>,
    path: PathBuf,
    counters: IoCounters,
}

impl MemSource {
    pub fn new(bytes: Vec<u8>, name: &str) -> MemSource {
        MemSource {
            bytes,
            path: PathBuf::from(name),
            counters: IoCounters::default(),
        }
    }
}

impl ReadAt for MemSource {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let end = offset.saturating_add(buf.len() as u64);
        if end > self.bytes.len() as u64 {
            return Err(Error::Truncated {
                path: self.path.clone(),
                what: format!("a read of {} bytes at offset {offset}", buf.len()),
                needed_end: end,
                file_len: self.bytes.len() as u64,
            });
        }
        self.counters.record(buf.len());
        buf.copy_from_slice(&self.bytes[offset as usize..end as usize]);
        Ok(())
    }

    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn counters(&self) -> IoSnapshot {
        self.counters.snapshot()
    }
}
