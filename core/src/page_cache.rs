//! The kernel's page cache, seen from a reader: whether a file can be read
//! around it (direct I/O), switching a descriptor to do so, and how much of
//! a byte range it already holds.
//!
//! Why read around it at all: a reader streaming a dataset larger than the
//! memory it will ever be cached in pays the kernel for allocating,
//! filling, and later evicting every page, then copies each page into the
//! shared window. A direct read lands in the window straight from the
//! device, sparing the kernel's page work at the same throughput (see
//! docs/design/direct-io.md); on a node whose cores also decode images,
//! that CPU is what a reader competes for. A file the cache already holds is
//! read faster through it, which is what [`cached_bytes`] lets the engine
//! notice.
//!
//! Linux only; everything here reports "unsupported" elsewhere and on
//! kernels without the calls, and the engine then reads as before.

use std::fs::File;
use std::io;

/// What direct reads of a file require: file offsets and lengths, and
/// memory addresses, multiples of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectAlignment {
    /// Alignment in bytes of file offsets and lengths (`statx`'s
    /// `stx_dio_offset_align`).
    pub offset: u64,
    /// Alignment in bytes of buffer addresses (`stx_dio_mem_align`).
    pub memory: u64,
}

impl DirectAlignment {
    /// Whether reads starting at multiples of `granule` bytes, of whole
    /// granules, into memory aligned to `granule`, meet these requirements.
    pub fn divides(&self, granule: u64) -> bool {
        granule != 0 && granule % self.offset == 0 && granule % self.memory == 0
    }
}

/// Direct-read alignment of `file` as its file system reports it
/// (`statx` with `STATX_DIOALIGN`, Linux 6.1+); `None` when the file system
/// does not support direct reads or the kernel cannot say.
#[cfg(target_os = "linux")]
pub fn direct_alignment(file: &File) -> Option<DirectAlignment> {
    use std::os::fd::AsRawFd;
    // SAFETY: statx is plain data, for which all-zero bytes are a value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx with AT_EMPTY_PATH on a valid descriptor and an empty
    // C string writes only into the zeroed struct we pass.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    let (offset, memory) = (stx.stx_dio_offset_align, stx.stx_dio_mem_align);
    // Zero means "no direct I/O"; anything but a power of two would be a
    // file system bug we would rather not build requests on.
    if offset == 0 || memory == 0 || !offset.is_power_of_two() || !memory.is_power_of_two() {
        return None;
    }
    Some(DirectAlignment {
        offset: offset.into(),
        memory: memory.into(),
    })
}

#[cfg(not(target_os = "linux"))]
pub fn direct_alignment(_file: &File) -> Option<DirectAlignment> {
    None
}

/// Opens `path` read-only for direct reads (`O_DIRECT`).
#[cfg(target_os = "linux")]
pub fn open_direct(path: &std::path::Path) -> io::Result<File> {
    crate::source::open_regular(path, libc::O_DIRECT)
}

#[cfg(not(target_os = "linux"))]
pub fn open_direct(_path: &std::path::Path) -> io::Result<File> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Turns direct reads on or off for every user of `file`'s open file
/// description. Callers must not have reads in flight that expect the
/// other mode: with direct reads on, an unaligned read fails with `EINVAL`.
#[cfg(target_os = "linux")]
pub fn set_direct(file: &File, on: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let wanted = if on {
        flags | libc::O_DIRECT
    } else {
        flags & !libc::O_DIRECT
    };
    if wanted != flags {
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, wanted) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether `file`'s open file description reads around the page cache
/// (`O_DIRECT` is set on it). Tests use it to check what a reader opened.
#[cfg(target_os = "linux")]
pub fn is_direct(file: &File) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: F_GETFL on a descriptor we own; no memory is passed.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags & libc::O_DIRECT != 0)
}

#[cfg(not(target_os = "linux"))]
pub fn set_direct(_file: &File, _on: bool) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Bytes of `[offset, offset + len)` of `file` in the page cache, in whole
/// pages (`cachestat`, Linux 6.5+); `None` when the kernel cannot say.
#[cfg(target_os = "linux")]
pub fn cached_bytes(file: &File, offset: u64, len: u64) -> Option<u64> {
    use std::os::fd::AsRawFd;
    // The kernel's struct cachestat_range and struct cachestat (uapi
    // linux/mman.h); the libc crate does not carry them.
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    // cachestat has number 451 on every architecture (the unified table).
    const SYS_CACHESTAT: libc::c_long = 451;
    if len == 0 {
        return Some(0);
    }
    let range = Range { off: offset, len };
    let mut stat = Stat::default();
    // SAFETY: the kernel reads `range` and writes `stat`, both live and of
    // the layout it expects; flags must be 0.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd() as libc::c_uint,
            &range as *const Range,
            &mut stat as *mut Stat,
            0 as libc::c_uint,
        )
    };
    if rc != 0 {
        return None;
    }
    Some(stat.nr_cache.saturating_mul(page_bytes()))
}

#[cfg(not(target_os = "linux"))]
pub fn cached_bytes(_file: &File, _offset: u64, _len: u64) -> Option<u64> {
    None
}

/// Asks the kernel to drop the clean cached pages of `[offset, offset +
/// len)` of `file` (`POSIX_FADV_DONTNEED`; a `len` of 0 reaches the end of
/// the file). Advice: pages in use stay, and no data is lost either way.
#[cfg(target_os = "linux")]
pub fn forget(file: &File, offset: u64, len: u64) -> io::Result<()> {
    advise(file, offset, len, libc::POSIX_FADV_DONTNEED)
}

#[cfg(target_os = "linux")]
fn advise(file: &File, offset: u64, len: u64, advice: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    // SAFETY: advice on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, advice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

#[cfg(not(target_os = "linux"))]
pub fn forget(_file: &File, _offset: u64, _len: u64) -> io::Result<()> {
    Ok(())
}

/// Whether `file` lives on a file system this machine serves from its own
/// storage or memory: the local ones by their `statfs` magic (ext2/3/4,
/// XFS, Btrfs, F2FS, ZFS, bcachefs, tmpfs, ramfs, overlayfs). Anything
/// else, FUSE and network file systems among them, may be served by
/// another machine with a page cache of its own. A file system it cannot
/// identify counts as not local.
#[cfg(target_os = "linux")]
pub fn on_local_file_system(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    const LOCAL: [i64; 10] = [
        0xEF53,      // ext2, ext3, ext4
        0x5846_5342, // XFS
        0x9123_683E, // Btrfs
        0xF2F5_2010, // F2FS
        0x2FC1_2FC1, // ZFS
        0xCA45_1A4E, // bcachefs
        0x0102_1994, // tmpfs
        0x8584_58F6, // ramfs
        0x794C_7630, // overlayfs
        0x6165_6673, // aufs
    ];
    // SAFETY: statfs is plain data, for which all-zero bytes are a value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on a descriptor we own writes only into the zeroed
    // struct we pass.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    LOCAL.contains(&(st.f_type as i64))
}

#[cfg(not(target_os = "linux"))]
pub fn on_local_file_system(_file: &File) -> bool {
    true
}

/// Asks the kernel to start reading `[offset, offset + len)` of `file`
/// into the page cache now (`POSIX_FADV_WILLNEED`), without waiting.
#[cfg(target_os = "linux")]
pub fn will_need(file: &File, offset: u64, len: u64) -> io::Result<()> {
    advise(file, offset, len, libc::POSIX_FADV_WILLNEED)
}

#[cfg(not(target_os = "linux"))]
pub fn will_need(_file: &File, _offset: u64, _len: u64) -> io::Result<()> {
    Ok(())
}

#[cfg(target_os = "linux")]
fn page_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    #[test]
    fn temporary_files_are_on_a_local_file_system_and_proc_is_not_known_as_one() {
        let (path, file) = scratch("local", 4096);
        assert!(
            on_local_file_system(&file),
            "the temporary directory's file system is not among the local ones"
        );
        std::fs::remove_file(path).unwrap();
        let proc = File::open("/proc/self/status").unwrap();
        assert!(!on_local_file_system(&proc));
    }

    fn scratch(name: &str, len: usize) -> (std::path::PathBuf, File) {
        let path = std::env::temp_dir().join(format!("lmdbio-pc-{}-{name}", std::process::id()));
        let mut f = File::create(&path).unwrap();
        let bytes: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
        f.write_all(&bytes).unwrap();
        f.sync_all().unwrap();
        (path.clone(), File::open(&path).unwrap())
    }

    #[test]
    fn direct_reads_deliver_the_same_bytes_or_are_reported_unsupported() {
        let (path, file) = scratch("direct", 1 << 20);
        let Some(align) = direct_alignment(&file) else {
            // Then switching on must not be what the engine relies on;
            // nothing else to check on this file system.
            std::fs::remove_file(path).unwrap();
            return;
        };
        assert!(align.divides(4096), "{align:?}");
        set_direct(&file, true).unwrap();
        // An aligned buffer from an over-allocated Vec.
        let mut storage = vec![0u8; 3 * 4096 + 4096];
        let skip = storage.as_ptr().align_offset(4096);
        let buf = &mut storage[skip..skip + 3 * 4096];
        file.read_exact_at(buf, 8192).unwrap();
        assert!(buf
            .iter()
            .enumerate()
            .all(|(i, &b)| b == ((8192 + i) % 253) as u8));
        // Unaligned offsets are refused while direct reads are on ...
        let err = file.read_exact_at(&mut buf[..4096], 100).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
        // ... and fine again once they are off.
        set_direct(&file, false).unwrap();
        let mut small = [0u8; 10];
        file.read_exact_at(&mut small, 100).unwrap();
        assert_eq!(small[0], 100, "byte 100 is 100 % 253");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn cached_bytes_sees_a_file_drop_out_of_the_cache() {
        let (path, file) = scratch("cached", 1 << 20);
        let mut all = vec![0u8; 1 << 20];
        file.read_exact_at(&mut all, 0).unwrap();
        let Some(before) = cached_bytes(&file, 0, 1 << 20) else {
            std::fs::remove_file(path).unwrap();
            return;
        };
        assert_eq!(before, 1 << 20, "a file just read is cached");
        // Clean pages of a synced file go when asked to.
        forget(&file, 0, 0).unwrap();
        let after = cached_bytes(&file, 0, 1 << 20).unwrap();
        assert!(after < before / 2, "{after} of {before} still cached");
        assert_eq!(cached_bytes(&file, 0, 0), Some(0));
        std::fs::remove_file(path).unwrap();
    }
}
