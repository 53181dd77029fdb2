//! Every record passes through a few buffers of its own size (file bytes,
//! pixels, the Datum, liblmdb's dirty overflow pages). Above glibc's
//! default mmap threshold each of them would be a fresh mmap, zero-filled
//! page by page and unmapped again; keeping them in the heap and not
//! trimming it lets freed buffers be reused without page faults.

/// Largest buffer still served from the heap (a 2048×2048 RGB image).
const MMAP_THRESHOLD: libc::c_int = 16 << 20;
/// Free heap kept instead of returned to the kernel.
const TRIM_THRESHOLD: libc::c_int = 512 << 20;

pub fn keep_buffers_in_heap() {
    // SAFETY: mallopt only changes glibc's malloc tuning; it is called
    // before the worker threads start, and a refused value is harmless
    // (the defaults stay).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}
