//! Ctrl-C and SIGTERM stop the conversion between two records or within
//! a wait for one, so the partial database is removed instead of left
//! behind.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // A second signal means the first was not heard in time: leave at
    // once; the partial left behind is removed as stale by the next run.
    if REQUESTED.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe and takes no pointers.
        unsafe { libc::_exit(130) };
    }
}

pub fn install() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; `signal` replaces the default disposition.
        unsafe {
            libc::signal(signal, on_signal as *const () as libc::sighandler_t);
        }
    }
}

pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
