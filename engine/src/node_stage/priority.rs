//! Lowering the stage writer's I/O priority, so that its background copy
//! yields the disk to the reads the ranks wait for. Not its CPU priority:
//! a read that needs its window area back waits for the writer's current
//! piece (`NodeStage::reclaim`), and a writer at nice 19 on busy cores made
//! that wait long.

/// The idle I/O class (`IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT`): the
/// thread's requests are served only when no one else's wait.
const IOPRIO_IDLE: libc::c_long = 3 << 13;
const IOPRIO_WHO_PROCESS: libc::c_long = 1;

/// Puts the calling thread in the idle I/O class; best effort (a kernel or
/// scheduler without it leaves it as it was).
pub(crate) fn lower_this_thread() {
    // SAFETY: ioprio_set takes three integers and touches no memory of
    // ours; who 0 names the calling thread.
    let _ = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_IDLE) };
}
