//! Memory in 2 MiB pages, for reads that go around the page cache.
//!
//! Why it matters: a direct read lands straight from the device, one
//! scatter-gather segment per physically contiguous piece of the
//! destination. The virtual disk of this project's test machine takes at
//! most 254 segments per request, so a 4 MiB direct read into scattered
//! 4 KiB pages went out as four requests of about 1 MiB, and the disk
//! serves about as many requests per second whatever their size: direct
//! reads into 4 KiB pages were slower than reads through the page cache,
//! and into 2 MiB pages faster (see docs/design/direct-io.md).
//!
//! The engine's window gets huge pages where the system gives them to its
//! kind of memory ([`advise`], by `prepare`); where it does not (a window
//! shared by several ranks, when shared memory may not use huge pages),
//! direct reads land in a [`StagingBuffer`] of this process's own and are
//! copied into the window.

/// The huge page size asked for (x86-64 and arm64 with 4 KiB base pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// Asks for transparent huge pages over the whole 2 MiB pages inside
/// `[at, at + bytes)` (`MADV_HUGEPAGE`), before they are mapped. Private
/// memory gets them in `madvise` mode, shared memory only where the
/// system allows huge pages for shmem. Advice, so a refusal (an old
/// kernel, huge pages off) changes nothing but speed.
///
/// # Safety
/// The range is mapped for the caller's use; advice changes no contents.
pub unsafe fn advise(at: *mut u8, bytes: usize) {
    let start = (at as usize).div_ceil(HUGE_PAGE) * HUGE_PAGE;
    let end = (at as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: per the contract; [start, end) lies inside the range.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

/// Whether most of what is resident of `[addr, addr + len)` is in huge
/// pages, by `/proc/self/smaps` (`AnonHugePages`, `ShmemPmdMapped` and
/// `FilePmdMapped` against `Rss` of every mapping the range touches:
/// advice splits a mapping where it starts and ends). False where smaps
/// cannot be read or nothing is resident yet. Reading smaps walks every
/// mapping of the process, milliseconds in an MPI process: call it where
/// nothing is timed.
pub fn mostly_in_huge_pages(addr: *const u8, len: usize) -> bool {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return false;
    };
    let range = addr as usize..(addr as usize).saturating_add(len.max(1));
    let (mut inside, mut rss, mut huge) = (false, 0u64, 0u64);
    for line in smaps.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = head.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = lo < range.end && range.start < hi;
                continue;
            }
        }
        let Some((field, value)) = line.split_once(':').filter(|_| inside) else {
            continue;
        };
        let kib: u64 = value
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap_or(0);
        match field {
            "Rss" => rss += kib,
            "AnonHugePages" | "ShmemPmdMapped" | "FilePmdMapped" => huge += kib,
            _ => {}
        }
    }
    rss > 0 && huge * 2 >= rss
}

/// A private buffer of whole 2 MiB pages, mapped now and known to be in
/// huge pages; unmapped on drop.
pub struct StagingBuffer {
    /// The mapping as made: `at` rounded up to a huge page lies inside.
    mapping: *mut u8,
    mapping_len: usize,
    at: *mut u8,
    len: usize,
}

// SAFETY: the mapping belongs to the buffer alone; `&mut self` guards its
// bytes, so moving it to another thread shares nothing.
unsafe impl Send for StagingBuffer {}

impl StagingBuffer {
    /// At least `len` bytes (whole huge pages) in huge pages, or `None`
    /// where the system will not give them: the caller then reads another
    /// way rather than directly into small pages.
    ///
    /// The proof is `MADV_COLLAPSE` (Linux 6.1), which returns success only
    /// once the range is mapped by huge pages; on memory the advice already
    /// gave them it returns at once (measured: 0.00 ms, against 6 ms to
    /// collapse 4 MiB of small pages). An older kernel refuses it, and
    /// such a kernel gets no staging.
    pub fn new(len: usize) -> Option<StagingBuffer> {
        let len = len.max(1).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let mapping_len = len.checked_add(HUGE_PAGE)?;
        let mapping = map_private(mapping_len)?;
        let at = (mapping as usize).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let buffer = StagingBuffer {
            mapping,
            mapping_len,
            at: at as *mut u8,
            len,
        };
        let range = buffer.at as *mut libc::c_void;
        // SAFETY: [at, at + len) lies inside the fresh mapping (rounding
        // up skips less than one huge page of the extra one); nothing
        // reads it yet, and advice and populating change no contents a
        // reader could rely on.
        let huge = unsafe {
            libc::madvise(range, len, libc::MADV_HUGEPAGE) == 0
                && libc::madvise(range, len, libc::MADV_POPULATE_WRITE) == 0
                && libc::madvise(range, len, libc::MADV_COLLAPSE) == 0
        };
        huge.then_some(buffer)
    }

    /// The buffer's length in bytes (a multiple of the huge page size).
    pub fn len(&self) -> usize {
        self.len
    }

    /// The buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole buffer, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: [at, at + len) is mapped readable and writable for the
        // buffer's life, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.at, self.len) }
    }
}

/// Copies `src` into `dest` (of the same length) with non-temporal stores
/// where the CPU has them (x86-64, whose SSE2 every such CPU has), else
/// with a plain copy.
///
/// Why: the staging copy writes a window far larger than the CPU's caches,
/// and the ranks read those bytes a round later, when they have left the
/// cache anyway. A plain copy first reads every destination line into the
/// cache and then evicts it; streaming stores write the lines whole, for
/// about half the copy's CPU (see docs/design/streaming-copy.md).
///
/// Streaming stores are not ordered with later stores, so the copy ends
/// with a store fence: whoever publishes the bytes after it (an atomic
/// release) publishes them complete.
pub fn copy_streaming(dest: &mut [u8], src: &[u8]) {
    assert_eq!(dest.len(), src.len(), "a streaming copy of unequal lengths");
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        const LINE: usize = 64;
        let n = dest.len();
        let head = dest.as_ptr().align_offset(16).min(n);
        let body_end = head + (n - head) / LINE * LINE;
        dest[..head].copy_from_slice(&src[..head]);
        let mut at = head;
        while at < body_end {
            // SAFETY: [at, at + 64) lies inside both slices (at + 64 <=
            // body_end <= n); the destination is 16-byte aligned there
            // (head aligned it and 64 keeps it so), as the streaming
            // store requires; loads need no alignment. SSE2 is part of
            // x86-64.
            unsafe {
                let from = src.as_ptr().add(at) as *const __m128i;
                let to = dest.as_mut_ptr().add(at) as *mut __m128i;
                let (a, b) = (_mm_loadu_si128(from), _mm_loadu_si128(from.add(1)));
                let (c, d) = (_mm_loadu_si128(from.add(2)), _mm_loadu_si128(from.add(3)));
                _mm_stream_si128(to, a);
                _mm_stream_si128(to.add(1), b);
                _mm_stream_si128(to.add(2), c);
                _mm_stream_si128(to.add(3), d);
            }
            at += LINE;
        }
        dest[body_end..].copy_from_slice(&src[body_end..]);
        // SAFETY: a fence has no preconditions.
        unsafe { _mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    dest.copy_from_slice(src);
}

/// A fresh private anonymous mapping of `len` bytes, readable and
/// writable; the caller unmaps it.
fn map_private(len: usize) -> Option<*mut u8> {
    // SAFETY: asks for new memory; nothing existing is touched.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (at != libc::MAP_FAILED).then_some(at as *mut u8)
}

impl Drop for StagingBuffer {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unused once the buffer goes.
        unsafe { libc::munmap(self.mapping as *mut libc::c_void, self.mapping_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thp_mode() -> String {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default()
    }

    /// Private memory of `len` bytes, unmapped on drop.
    struct Mapping(*mut u8, usize);
    impl Mapping {
        fn new(len: usize) -> Mapping {
            Mapping(map_private(len).expect("mmap"), len)
        }
        fn map_now(&self) {
            // SAFETY: the test's own mapping, used by nothing else.
            let rc = unsafe {
                libc::madvise(
                    self.0 as *mut libc::c_void,
                    self.1,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            assert_eq!(rc, 0);
        }
    }
    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: the mapping made in new.
            unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
        }
    }

    #[test]
    fn advised_private_memory_is_mapped_in_huge_pages_and_unadvised_is_not() {
        let mode = thp_mode();
        if !mode.contains("[madvise]") && !mode.contains("[always]") {
            eprintln!(
                "transparent huge pages are off here ({}): nothing to check",
                mode.trim()
            );
            return;
        }
        // 8 MiB hold at least three whole 2 MiB pages wherever they start.
        let advised = Mapping::new(8 << 20);
        // SAFETY: the test's own mapping, used by nothing else.
        unsafe { advise(advised.0, advised.1) };
        advised.map_now();
        assert!(
            mostly_in_huge_pages(advised.0, advised.1),
            "advised memory is not in huge pages"
        );
        if mode.contains("[madvise]") {
            let plain = Mapping::new(8 << 20);
            plain.map_now();
            assert!(
                !mostly_in_huge_pages(plain.0, plain.1),
                "not advised, in madvise mode"
            );
        }
    }

    #[test]
    fn a_streaming_copy_copies_every_byte_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 253) as u8).collect();
        let mut dest = vec![0u8; 1100];
        for offset in 0..20 {
            for len in [0, 1, 15, 16, 63, 64, 65, 200, 977] {
                dest.fill(0);
                copy_streaming(&mut dest[offset..offset + len], &src[3..3 + len]);
                assert_eq!(
                    &dest[offset..offset + len],
                    &src[3..3 + len],
                    "{offset}+{len}"
                );
                assert!(
                    dest[..offset].iter().all(|&b| b == 0),
                    "{offset}+{len}: before"
                );
                assert!(
                    dest[offset + len..].iter().all(|&b| b == 0),
                    "{offset}+{len}: after"
                );
            }
        }
    }

    #[test]
    fn a_staging_buffer_is_whole_huge_pages_that_are_really_huge() {
        let mode = thp_mode();
        let Some(mut buffer) = StagingBuffer::new(3 << 20) else {
            // Refused only where huge pages are off or the kernel predates
            // MADV_COLLAPSE (6.1); where they are asked for by advice, a
            // fresh 4 MiB must be granted.
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
            let mut version = release
                .split(['.', '-'])
                .map(|n| n.parse::<u32>().unwrap_or(0));
            let (major, minor) = (version.next().unwrap_or(0), version.next().unwrap_or(0));
            assert!(
                !(mode.contains("[madvise]") || mode.contains("[always]"))
                    || (major, minor) < (6, 1),
                "huge pages are on ({}) in Linux {} but no staging buffer was made",
                mode.trim(),
                release.trim()
            );
            return;
        };
        assert_eq!(buffer.len(), 4 << 20, "rounded up to whole huge pages");
        let slice = buffer.as_mut_slice();
        assert_eq!(slice.as_ptr() as usize % HUGE_PAGE, 0);
        slice.fill(7);
        assert!(mostly_in_huge_pages(slice.as_ptr(), slice.len()));
        assert!(slice.iter().all(|&b| b == 7));
    }
}
