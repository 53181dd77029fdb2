//! Node-shared memory: one `MPI_Win_allocate_shared` segment owned by the
//! node's first rank and mapped by every rank of the node.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use mpi::ffi;

use super::{check, Comm};
use lmdbio_core::error::{Error, Result};
use lmdbio_core::huge_pages;

/// A shared segment of `len` bytes. Rank 0 of the node communicator
/// allocates it; every rank addresses it directly. Freed (collectively) on
/// drop.
pub struct SharedWindow {
    win: ffi::MPI_Win,
    base: *mut u8,
    len: usize,
    /// This rank allocated the segment (rank 0 of the node).
    owner: bool,
    /// Most of what [`SharedWindow::populate`] mapped here last, asked for
    /// in huge pages, is in them (false again once the pages are released).
    huge: AtomicBool,
}

// SAFETY: the window handle and the mapping are process-wide; access to the
// bytes is coordinated by the engine's collective steps.
unsafe impl Send for SharedWindow {}

impl SharedWindow {
    /// Collective over `node`: rank 0 provides `len` bytes (the value passed
    /// on other ranks is ignored).
    pub fn allocate(node: &Comm, len: usize) -> Result<SharedWindow> {
        let mine = if node.rank() == 0 { len.max(1) } else { 0 };
        let mut base: *mut c_void = std::ptr::null_mut();
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut win = unsafe { ffi::RSMPI_WIN_NULL };
        // SAFETY: valid communicator; base and win are out pointers; the
        // displacement unit of 1 makes offsets plain bytes.
        let rc = unsafe {
            ffi::MPI_Win_allocate_shared(
                mine as ffi::MPI_Aint,
                1,
                ffi::RSMPI_INFO_NULL,
                node.raw(),
                &mut base as *mut *mut c_void as *mut c_void,
                &mut win,
            )
        };
        if rc != 0 {
            return Err(Error::ResourceLimit(format!(
                "cannot allocate a {len}-byte shared-memory window: {}",
                super::error_string(rc)
            )));
        }
        let mut window = SharedWindow {
            win,
            base: std::ptr::null_mut(),
            len,
            owner: node.rank() == 0,
            huge: AtomicBool::new(false),
        };
        check(
            // SAFETY: win is the window just created.
            unsafe { ffi::MPI_Win_set_errhandler(win, ffi::RSMPI_ERRORS_RETURN) },
            "MPI_Win_set_errhandler",
        )?;
        let mut size: ffi::MPI_Aint = 0;
        let mut disp: c_int = 0;
        let mut shared: *mut c_void = std::ptr::null_mut();
        check(
            // SAFETY: rank 0's segment of a valid shared window; out pointers valid.
            unsafe {
                ffi::MPI_Win_shared_query(
                    win,
                    0,
                    &mut size,
                    &mut disp,
                    &mut shared as *mut *mut c_void as *mut c_void,
                )
            },
            "MPI_Win_shared_query",
        )?;
        if (size as usize) < len.max(1) || shared.is_null() {
            return Err(Error::ResourceLimit(format!(
                "shared window has {size} bytes, {len} were asked for"
            )));
        }
        window.base = shared as *mut u8;
        // Passive-target epoch for the window's lifetime, so MPI_Win_sync
        // can order our loads and stores against the other ranks'.
        // SAFETY: valid window; MPI_MODE_NOCHECK is 0-safe to omit.
        check(unsafe { ffi::MPI_Win_lock_all(0, win) }, "MPI_Win_lock_all")?;
        Ok(window)
    }

    /// Bytes of the node's shared segment.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The segment has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start of the segment in this process's address space (the same
    /// bytes, at possibly different addresses, on every rank of the node).
    pub fn as_ptr(&self) -> *const u8 {
        self.base
    }

    /// The whole segment, writable. Ranks of a node must not write the same
    /// bytes at once; the engine gives each writer its own range.
    ///
    /// # Safety
    /// No other rank may read or write the same bytes until the next
    /// synchronising step (sync + collective) of the engine.
    pub unsafe fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: base points at len bytes mapped for the window's life;
        // the caller guarantees exclusive use of what it touches.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }

    /// The whole segment, read-only.
    ///
    /// # Safety
    /// No rank may be writing these bytes (the engine's steps ensure it).
    pub unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: as for bytes_mut, for reading.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }

    /// Orders this rank's memory accesses with the window's public copy;
    /// call after writing and before a collective that publishes the data,
    /// and after that collective before reading.
    pub fn sync(&self) -> Result<()> {
        // SAFETY: valid window inside the lock_all epoch.
        check(unsafe { ffi::MPI_Win_sync(self.win) }, "MPI_Win_sync")
    }

    /// Whether the last [`SharedWindow::populate`] asked for huge pages and
    /// got them for most of what it mapped on this rank.
    pub fn in_huge_pages(&self) -> bool {
        self.huge.load(Ordering::Relaxed)
    }
}

impl SharedWindow {
    /// The whole pages inside the first `len` bytes of the segment.
    fn whole_pages(&self, len: usize) -> Option<(*mut libc::c_void, usize)> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let start = (self.base as usize).div_ceil(page) * page;
        let end = (self.base as usize + len.min(self.len)) / page * page;
        (end > start).then(|| (start as *mut libc::c_void, end - start))
    }

    /// Maps the first `len` bytes of the segment into this rank's address
    /// space now, allocating what is not yet allocated, so that the reads
    /// and the ranks' first look at each page do not fault one page at a
    /// time: a 256 MiB window is 65,536 faults per rank otherwise (see
    /// docs/design/one-reader-per-node.md). One
    /// `MADV_POPULATE_WRITE` (Linux 5.14) per rank; on older kernels the
    /// pages are touched one by one, which still moves the faults out of
    /// the reads. Every rank of the node may call it at once.
    ///
    /// `huge` first asks for 2 MiB pages where the system gives them to
    /// such memory (see [`lmdbio_core::huge_pages`]).
    ///
    /// Call only while no engine uses the window: the fallback writes a
    /// byte of every page (on the owner; others read one).
    pub fn populate(&self, len: usize, huge: bool) {
        if let Some((at, bytes)) = self.whole_pages(len) {
            if huge {
                // SAFETY: [at, at + bytes) lies inside the segment mapped
                // for the window's life; the advice changes no contents.
                unsafe { huge_pages::advise(at as *mut u8, bytes) };
            }
            // SAFETY: [at, at + bytes) lies inside the segment mapped for
            // the window's life, and no engine uses the window meanwhile
            // (the caller's contract), so the fallback's one byte per page
            // may change.
            unsafe { map_now(at as *mut u8, bytes, self.owner) };
            // Looked at here, where it costs nothing timed: reading smaps
            // walks every mapping of the process (milliseconds in an MPI
            // process), which an open would pay before its first read.
            self.huge.store(
                huge && huge_pages::mostly_in_huge_pages(at as *const u8, bytes),
                Ordering::Relaxed,
            );
        }
    }

    /// Gives the segment's memory back to the system while keeping the
    /// window: the owner punches the pages out of the shared segment
    /// (`MADV_REMOVE`), which also unmaps them from every rank; the next
    /// touch maps zeroed pages. Local: other ranks need not call it.
    ///
    /// Call only when no rank of the node will read the bytes again
    /// before rewriting them (no engine uses the window).
    pub fn release_pages(&self) {
        self.huge.store(false, Ordering::Relaxed);
        if !self.owner {
            return;
        }
        if let Some((at, len)) = self.whole_pages(self.len) {
            // SAFETY: [at, at + len) lies inside the segment mapped for this
            // window's life; the caller guarantees nobody reads it until it
            // is rewritten, and released pages read back as zeros, never as
            // invalid memory. A window of one rank may be private memory
            // (MPICH allocates it so), where MADV_REMOVE fails and
            // MADV_DONTNEED frees the pages instead; if both fail the pages
            // stay, which costs memory but nothing else.
            unsafe {
                if libc::madvise(at, len, libc::MADV_REMOVE) != 0 {
                    libc::madvise(at, len, libc::MADV_DONTNEED);
                }
            }
        }
    }
}

/// Maps `[at, at + bytes)` into this process now: one
/// `MADV_POPULATE_WRITE`, or where the kernel lacks it, a touch of every
/// 4 KiB. `write`: the fallback writes a zero byte per page, so private
/// memory gets pages of its own rather than the shared zero page;
/// otherwise it only reads (shared memory allocates on a read too).
///
/// # Safety
/// The range is mapped readable and writable, and nothing else reads or
/// writes it meanwhile; its contents may change where `write` is set.
unsafe fn map_now(at: *mut u8, bytes: usize, write: bool) {
    // SAFETY: per the contract; populating only maps and allocates.
    if unsafe { libc::madvise(at as *mut libc::c_void, bytes, libc::MADV_POPULATE_WRITE) } == 0 {
        return;
    }
    // SAFETY: per the contract.
    unsafe { touch_pages(at, bytes, write) }
}

/// The fallback of [`map_now`].
///
/// # Safety
/// As for [`map_now`].
unsafe fn touch_pages(at: *mut u8, bytes: usize, write: bool) {
    for offset in (0..bytes).step_by(4096) {
        // SAFETY: inside the range, per the contract.
        unsafe {
            let byte = at.add(offset);
            if write {
                std::ptr::write_volatile(byte, 0);
            } else {
                std::ptr::read_volatile(byte);
            }
        }
    }
}

impl Drop for SharedWindow {
    fn drop(&mut self) {
        if super::is_initialized() {
            // SAFETY: we own the window; unlock the epoch opened in
            // allocate, then free (collective over the node, which the
            // engine's close ensures).
            unsafe {
                ffi::MPI_Win_unlock_all(self.win);
                ffi::MPI_Win_free(&mut self.win);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages of `[at, at + len)` that are resident (`mincore`).
    fn resident(at: *mut u8, len: usize) -> usize {
        let mut vec = vec![0u8; len.div_ceil(4096)];
        // SAFETY: a mapping of len bytes made by the test; vec holds a
        // byte per page.
        let rc = unsafe { libc::mincore(at as *mut libc::c_void, len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0);
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }

    /// Private and shared anonymous memory of `pages` pages, unmapped on
    /// drop.
    struct Mapping(*mut u8, usize);
    impl Mapping {
        fn new(pages: usize, shared: bool) -> Mapping {
            let len = pages * 4096;
            let kind = if shared {
                libc::MAP_SHARED
            } else {
                libc::MAP_PRIVATE
            };
            // SAFETY: a fresh anonymous mapping.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    kind | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
            Mapping(at as *mut u8, len)
        }
    }
    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: the mapping made in new.
            unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
        }
    }

    #[test]
    fn memory_is_resident_after_mapping_it_now_and_after_the_fallback() {
        for shared in [false, true] {
            let m = Mapping::new(64, shared);
            assert_eq!(resident(m.0, m.1), 0, "fresh memory is not resident");
            // SAFETY: the test's own mapping, used by nothing else.
            unsafe { map_now(m.0, m.1, true) };
            assert_eq!(resident(m.0, m.1), 64, "shared {shared}: after map_now");

            let m = Mapping::new(64, shared);
            // Writing gives private memory pages of its own; reading
            // allocates shared memory.
            // SAFETY: as above.
            unsafe { touch_pages(m.0, m.1, !shared) };
            assert_eq!(resident(m.0, m.1), 64, "shared {shared}: after touching");
        }
    }
}
