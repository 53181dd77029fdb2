//! The unsafe part of holding a reader slot in liblmdb's lock file:
//! record locks, the shared mapping of the lock file, and its
//! process-shared pthread mutex (see docs/design/reader-slot.md).
//!
//! Only `lock.mdb` is mapped here, never the data file: lmdbio still reads
//! data with plain reads. Every word of the mapping other processes touch
//! is read and written as an atomic, as liblmdb treats them as `volatile`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Which kind of record lock to take.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Shared,
    Exclusive,
}

impl Kind {
    fn flock_type(self) -> libc::c_short {
        (match self {
            Kind::Shared => libc::F_RDLCK,
            Kind::Exclusive => libc::F_WRLCK,
        }) as libc::c_short
    }
}

fn one_byte(kind: Kind, at: u64) -> io::Result<libc::flock> {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind.flock_type();
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_start = libc::off_t::try_from(at)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "lock offset out of range"))?;
    l.l_len = 1;
    Ok(l)
}

/// `fcntl(cmd)` on one byte, retried on EINTR. `Ok(false)`: another
/// holder's lock conflicts (EAGAIN or EACCES).
fn set_lock(file: &File, cmd: libc::c_int, kind: Kind, at: u64) -> io::Result<bool> {
    let l = one_byte(kind, at)?;
    loop {
        // SAFETY: a valid descriptor and a valid flock for a set command.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &l) };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// An open-file-description lock on byte `at`: it belongs to this open of
/// the file, so no other descriptor of the file closed in this process
/// drops it, and it conflicts with liblmdb's locks in this process too.
pub(crate) fn ofd_lock(file: &File, kind: Kind, at: u64) -> io::Result<bool> {
    set_lock(file, libc::F_OFD_SETLK, kind, at)
}

/// A classic (process-owned) record lock on byte `at`: liblmdb's liveness
/// lock on the byte at the reader's pid is one, so that liblmdb in this
/// same process may take it as well.
pub(crate) fn process_lock(file: &File, kind: Kind, at: u64) -> io::Result<bool> {
    set_lock(file, libc::F_SETLK, kind, at)
}

/// Whether another process holds a lock on byte `at` that an exclusive
/// lock would conflict with (liblmdb's test that a reader's process
/// lives).
pub(crate) fn someone_locks(file: &File, at: u64) -> io::Result<bool> {
    let mut l = one_byte(Kind::Exclusive, at)?;
    loop {
        // SAFETY: a valid descriptor; F_GETLK writes into l.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut l) };
        if rc == 0 {
            return Ok(l.l_type != libc::F_UNLCK as libc::c_short);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// The file system type (`statfs` `f_type`) holding `file`.
pub(crate) fn file_system_type(file: &File) -> io::Result<u64> {
    // SAFETY: statfs is plain data; all-zero is a valid value.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and an out pointer to a statfs.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut s) } != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(s.f_type as u64)
}

/// The lock file mapped shared, read and write.
pub(crate) struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is shared memory that other processes change at any
// time anyway; this process only touches it through atomics and the
// process-shared mutex, from any thread.
unsafe impl Send for Mapping {}
// SAFETY: as for Send.
unsafe impl Sync for Mapping {}

/// What locking a mutex in the mapping gave.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Locked {
    /// Locked; the previous owner unlocked it.
    Clean,
    /// Locked; the previous owner died holding it (EOWNERDEAD): the
    /// protected data must be repaired, then marked consistent.
    OwnerDied,
}

impl Mapping {
    /// Maps the first `len` bytes of `file` (at least `len` long).
    pub(crate) fn new(file: &File, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of a descriptor opened for read and
        // write; the kernel chooses the address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            base: base.cast(),
            len,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn at<T>(&self, offset: usize) -> *mut T {
        let size = std::mem::size_of::<T>();
        assert!(
            offset + size <= self.len && offset % std::mem::align_of::<T>() == 0,
            "lock file offset {offset} out of the mapping or misaligned"
        );
        // SAFETY: in bounds of the mapping (asserted above).
        unsafe { self.base.add(offset).cast() }
    }

    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: in bounds and aligned (see `at`); the page is mapped for
        // the mapping's life, and other processes change it only as whole
        // aligned words.
        unsafe { &*self.at::<AtomicU64>(offset) }
    }

    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: as for `u64_at`.
        unsafe { &*self.at::<AtomicU32>(offset) }
    }

    pub(crate) fn load_u64(&self, offset: usize) -> u64 {
        self.u64_at(offset).load(Ordering::SeqCst)
    }

    pub(crate) fn store_u64(&self, offset: usize, v: u64) {
        self.u64_at(offset).store(v, Ordering::SeqCst)
    }

    pub(crate) fn load_u32(&self, offset: usize) -> u32 {
        self.u32_at(offset).load(Ordering::SeqCst)
    }

    pub(crate) fn store_u32(&self, offset: usize, v: u32) {
        self.u32_at(offset).store(v, Ordering::SeqCst)
    }

    /// Makes the pthread mutex at `offset` a fresh robust, process-shared
    /// one, as liblmdb does when it is the lock file's only user.
    pub(crate) fn init_mutex(&self, offset: usize) -> io::Result<()> {
        let m = self.at::<libc::pthread_mutex_t>(offset);
        // SAFETY: zero the mutex bytes before init (liblmdb does the same);
        // no other process uses the lock file (the caller holds it
        // exclusively).
        unsafe { std::ptr::write_bytes(m, 0, 1) };
        // SAFETY: attr is initialised before use and destroyed after; m is
        // in the mapping, aligned.
        let rc = unsafe {
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            let mut rc = libc::pthread_mutexattr_init(&mut attr);
            if rc == 0 {
                rc = libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
                if rc == 0 {
                    rc = libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
                }
                if rc == 0 {
                    rc = libc::pthread_mutex_init(m, &attr);
                }
                libc::pthread_mutexattr_destroy(&mut attr);
            }
            rc
        };
        match rc {
            0 => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }

    /// Locks the mutex at `offset`, waiting at most `limit`.
    pub(crate) fn lock_mutex(&self, offset: usize, limit: Duration) -> io::Result<Locked> {
        let m = self.at::<libc::pthread_mutex_t>(offset);
        // SAFETY: timespec is plain data.
        let mut now: libc::timespec = unsafe { std::mem::zeroed() };
        // SAFETY: an out pointer to a timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
        let mut until = now;
        until.tv_sec += limit.as_secs() as libc::time_t;
        until.tv_nsec += limit.subsec_nanos() as libc::c_long;
        if until.tv_nsec >= 1_000_000_000 {
            until.tv_sec += 1;
            until.tv_nsec -= 1_000_000_000;
        }
        // SAFETY: m is a process-shared mutex in the mapping, checked to be
        // one by the caller (liblmdb's lock format and the mutex kind).
        match unsafe { libc::pthread_mutex_timedlock(m, &until) } {
            0 => Ok(Locked::Clean),
            libc::EOWNERDEAD => Ok(Locked::OwnerDied),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }

    /// Marks the mutex at `offset` consistent after its owner died.
    pub(crate) fn mutex_consistent(&self, offset: usize) -> io::Result<()> {
        // SAFETY: this thread holds the mutex (locked with EOWNERDEAD).
        match unsafe { libc::pthread_mutex_consistent(self.at(offset)) } {
            0 => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }

    pub(crate) fn unlock_mutex(&self, offset: usize) {
        // SAFETY: this thread holds the mutex.
        unsafe { libc::pthread_mutex_unlock(self.at(offset)) };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; nothing refers to it after.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// This thread's id as liblmdb records it in a slot (`pthread_self`).
pub(crate) fn thread_id() -> u64 {
    // SAFETY: no preconditions.
    #[allow(clippy::unnecessary_cast)]
    let t = unsafe { libc::pthread_self() } as u64;
    t
}
