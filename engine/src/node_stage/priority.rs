//! Lowering the stage filler thread's priority, so that the background
//! copy yields the disk and the cores to the reads the ranks wait for.

/// The idle I/O class (`IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT`): the
/// thread's requests are served only when no one else's wait.
const IOPRIO_IDLE: libc::c_long = 3 << 13;
const IOPRIO_WHO_PROCESS: libc::c_long = 1;

/// Puts the calling thread in the idle I/O class and at the lowest CPU
/// priority; best effort (a kernel or scheduler without them leaves it as
/// it was).
pub(crate) fn lower_this_thread() {
    // SAFETY: ioprio_set takes three integers and touches no memory of
    // ours; who 0 names the calling thread.
    let _ = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_IDLE) };
    // SAFETY: setpriority takes integers only; the thread id names the
    // calling thread (Linux sets nice values per thread).
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) };
}
