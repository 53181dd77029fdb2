//! Positioned reads: the only way lmdbio touches a data file.
//!
//! No mmap and no liblmdb: every byte arrives through [`ReadAt`], so the
//! same index and batch code runs over `pread` here and over MPI-IO in the
//! engine, and every request is counted.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Error, Result};

/// A file that can be read at any offset from several threads at once.
pub trait ReadAt: Send + Sync {
    /// Fills `buf` from `offset`; a read past the end is an error, never a
    /// short buffer.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// Length of the file in bytes, as seen when it was opened.
    fn len(&self) -> u64;
    /// The file has no bytes.
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

/// A source's read counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoSnapshot {
    /// Positioned reads issued (one per `read_exact_at` call).
    pub read_requests: u64,
    /// Bytes those reads asked for.
    pub bytes_read: u64,
}

impl IoSnapshot {
    /// The reads between `earlier` and this snapshot of the same source.
    pub fn since(self, earlier: IoSnapshot) -> IoSnapshot {
        IoSnapshot {
            read_requests: self.read_requests - earlier.read_requests,
            bytes_read: self.bytes_read - earlier.bytes_read,
        }
    }
}

impl IoCounters {
    /// Counts one read of `bytes` bytes.
    pub fn record(&self, bytes: usize) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    /// The counts so far.
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
    /// Opened to read around every page cache (see
    /// [`FileSource::open_around_cache`]); cleared if the file system
    /// refuses such a read, and the rest is read through the cache.
    around_cache: AtomicBool,
}

/// Opens `path` read-only as a regular file, never blocking: `O_NONBLOCK`
/// makes the open of a FIFO with no writer (or a device that waits for a
/// carrier) return at once, and the descriptor's own `fstat` refuses
/// anything but a regular file, so no path swapped in between a check and
/// the open gets through. The flag stays set: Linux ignores it for
/// regular files. `extra_flags` adds open flags (`O_DIRECT`).
pub fn open_regular(path: &Path, extra_flags: i32) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | extra_flags)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (FIFOs, devices and sockets are refused)",
        ));
    }
    Ok(file)
}

/// Reads around the cache are widened to whole blocks of this many bytes,
/// into memory aligned to it: what direct I/O asks of offsets, lengths and
/// buffers on file systems of 4 KiB blocks or smaller.
const AROUND_CACHE_BLOCK: usize = 4096;

impl FileSource {
    /// Opens `path` read-only (no lock file, no mmap); `NotFound` if it
    /// cannot be opened.
    pub fn open(path: &Path) -> Result<FileSource> {
        let file = open_regular(path, 0).map_err(|e| Error::NotFound {
            path: path.to_owned(),
            reason: format!("cannot open for reading: {e}"),
        })?;
        FileSource::from_file(file, path, false)
    }

    /// Opens `path` so that what is read from it is cached nowhere: not in
    /// this machine's page cache, and, on a file system whose server opens
    /// its own file the way the client did (GlusterFS), not in the
    /// server's either (`O_DIRECT` at open; switching it on later reaches
    /// only the client). For pages read once and never again, whose copies
    /// left in a cache would sit in the way of a later sequential stream.
    /// Any read works: it is widened to whole aligned blocks read into a
    /// buffer of its own. Fails where the file system refuses `O_DIRECT`.
    pub fn open_around_cache(path: &Path) -> Result<FileSource> {
        let file = crate::page_cache::open_direct(path).map_err(|e| Error::NotFound {
            path: path.to_owned(),
            reason: format!("cannot open for reading around the page cache: {e}"),
        })?;
        FileSource::from_file(file, path, true)
    }

    fn from_file(file: File, path: &Path, around_cache: bool) -> Result<FileSource> {
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
            around_cache: AtomicBool::new(around_cache),
        })
    }

    /// Whether reads of this source bypass every cache (see
    /// [`FileSource::open_around_cache`]).
    pub fn reads_around_cache(&self) -> bool {
        self.around_cache.load(Ordering::Relaxed)
    }

    /// Reads `buf.len()` bytes at `offset` through a descriptor opened for
    /// direct reads: the enclosing aligned blocks into an aligned buffer,
    /// then the bytes asked for out of it. A refusal (`EINVAL`: the file
    /// system wants other alignment, or takes no direct reads after all)
    /// switches the descriptor to cached reads for good, and the read is
    /// made again that way.
    fn read_around_cache(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        const BLOCK: u64 = AROUND_CACHE_BLOCK as u64;
        let start = offset / BLOCK * BLOCK;
        let end = (offset + buf.len() as u64).div_ceil(BLOCK) * BLOCK;
        let len = (end - start) as usize;
        let mut bounce = vec![0u8; len + AROUND_CACHE_BLOCK];
        let shift = bounce.as_ptr().align_offset(AROUND_CACHE_BLOCK);
        let blocks = &mut bounce[shift..shift + len];
        let mut got = 0;
        while got < len {
            match self.file.read_at(&mut blocks[got..], start + got as u64) {
                Ok(0) => break,
                // A short direct read ends at the end of the file; reading
                // on from an unaligned point would be refused anyway.
                Ok(n) if n % AROUND_CACHE_BLOCK != 0 => {
                    got += n;
                    break;
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    crate::page_cache::set_direct(&self.file, false)?;
                    self.around_cache.store(false, Ordering::Relaxed);
                    return self.file.read_exact_at(buf, offset);
                }
                Err(e) => return Err(e),
            }
        }
        let from = (offset - start) as usize;
        let to = from + buf.len();
        if got < to {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.copy_from_slice(&blocks[from..to]);
        Ok(())
    }
}

impl FileSource {
    /// What direct reads of this file need, if its file system allows
    /// them (see [`crate::page_cache`]).
    pub fn direct_alignment(&self) -> Option<crate::page_cache::DirectAlignment> {
        crate::page_cache::direct_alignment(&self.file)
    }

    /// Whether reads of this source go around the page cache now.
    #[cfg(target_os = "linux")]
    pub fn is_direct(&self) -> std::io::Result<bool> {
        crate::page_cache::is_direct(&self.file)
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

    /// See [`crate::page_cache::on_local_file_system`].
    pub fn on_local_file_system(&self) -> bool {
        crate::page_cache::on_local_file_system(&self.file)
    }

    /// Whether the page cache holds at least half of the file; `None` when
    /// the kernel cannot say. A file in this state is read from the cache
    /// as it is: dropping or bypassing its pages would send their reads to
    /// storage again.
    pub fn mostly_cached(&self) -> Option<bool> {
        self.cached_bytes(0, self.len).map(|c| c * 2 >= self.len)
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
        let read = if self.reads_around_cache() {
            self.read_around_cache(buf, offset)
        } else {
            self.file.read_exact_at(buf, offset)
        };
        read.map_err(|source| {
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
        // The advice would read the pages into the very caches this
        // source keeps them out of.
        if self.reads_around_cache() {
            return;
        }
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
    /// A file holding `bytes`, called `name` in error messages.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_read_around_the_cache_gives_every_range_and_leaves_none_of_it_cached() {
        const PAGE: u64 = 4096;
        let len = 3 * PAGE as usize + 100;
        let path = std::env::temp_dir().join(format!("lmdbio-{}-around", std::process::id()));
        let bytes: Vec<u8> = (0..len).map(|i| (i * 13 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        std::fs::File::open(&path).unwrap().sync_all().unwrap();
        let Ok(file) = FileSource::open_around_cache(&path) else {
            std::fs::remove_file(path).unwrap();
            return; // this file system takes no direct reads
        };
        let plain = FileSource::open(&path).unwrap();
        plain.forget_cached(0, 0);
        let uncached = plain.cached_bytes(0, len as u64) == Some(0);
        // Meta-page-sized reads, ranges across blocks, one ending at the
        // ragged end of the file, and the whole file.
        let ranges = [
            (0, 152),
            (PAGE, 152),
            (100, 5000),
            (PAGE - 1, 2),
            (3 * PAGE + 50, 50),
            (0, len as u64),
        ];
        for (offset, n) in ranges {
            let mut buf = vec![0u8; n as usize];
            file.read_exact_at(&mut buf, offset).unwrap();
            assert_eq!(
                buf,
                bytes[offset as usize..(offset + n) as usize],
                "{n} bytes at {offset}"
            );
        }
        assert!(matches!(
            file.read_exact_at(&mut [0u8; 200], 3 * PAGE),
            Err(Error::Truncated { .. })
        ));
        assert_eq!(file.counters().read_requests, ranges.len() as u64);
        // Unless the file system refused the direct reads on the way (the
        // source then reads through the cache, as it says).
        if uncached && file.reads_around_cache() {
            assert_eq!(plain.cached_bytes(0, len as u64), Some(0));
        }
        std::fs::remove_file(path).unwrap();
    }
}
