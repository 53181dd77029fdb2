//! The thin unsafe layer over MPI: owned communicators, MPI-IO files and
//! shared-memory windows, and the few collectives the engine needs.
//!
//! Every raw call's return code is checked and becomes an [`Error::Mpi`];
//! our communicators and files use `MPI_ERRORS_RETURN`, so a failure comes
//! back here instead of aborting the job. Handles are freed on drop.
//! Nothing above this module touches `mpi::ffi`.

mod comm;
pub mod deadline;
mod file;
mod p2p;
mod window;

pub use comm::{Comm, ReduceOp, ThreadLevel};
pub use file::{MpiFile, MpiFileSource};
pub use p2p::{PeerComm, Transfers};
pub use window::SharedWindow;

use std::ffi::{c_char, c_int};

use mpi::ffi;

use lmdbio_core::error::{Error, Result};

/// The raw communicator handle type of the MPI we were built against.
pub type RawComm = ffi::MPI_Comm;

/// Turns an MPI return code into an error naming the call.
pub(crate) fn check(code: c_int, call: &'static str) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    Err(Error::Mpi {
        call,
        code,
        message: error_string(code),
    })
}

fn error_string(code: c_int) -> String {
    let mut buf = vec![0 as c_char; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: buf holds MPI_MAX_ERROR_STRING characters plus a terminator,
    // as MPI_Error_string requires; len is a valid out pointer.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr(), &mut len) };
    if rc != 0 {
        return format!("MPI error code {code}");
    }
    let bytes: Vec<u8> = buf[..len.clamp(0, buf.len() as c_int) as usize]
        .iter()
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_owned()
}

/// Whether MPI is initialised and not yet finalised.
pub fn is_initialized() -> bool {
    let (mut init, mut fin): (c_int, c_int) = (0, 0);
    // SAFETY: both calls may be made at any time, even before MPI_Init.
    unsafe {
        ffi::MPI_Initialized(&mut init);
        ffi::MPI_Finalized(&mut fin);
    }
    init != 0 && fin == 0
}

/// `MPI_COMM_WORLD`.
pub fn comm_world() -> RawComm {
    // SAFETY: reading an immutable handle constant exported by rsmpi's shim.
    unsafe { ffi::RSMPI_COMM_WORLD }
}

/// Has `release` run when `MPI_Finalize` starts, while MPI still works, so
/// objects kept between calls (engine::topology) are freed before MPI goes
/// away. `MPI_Finalize` first frees `MPI_COMM_SELF`'s attributes; the hook
/// is the delete callback of one. Registering twice is a no-op.
pub fn call_at_finalize(release: fn()) -> Result<()> {
    static REGISTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if REGISTERED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return Ok(());
    }
    let mut keyval: c_int = 0;
    // SAFETY: both callbacks match the C prototypes (Open MPI refuses a
    // null copy callback, so ours declines to copy); extra_state carries
    // the function pointer, which is 'static.
    let registered = check(
        unsafe {
            ffi::MPI_Comm_create_keyval(
                Some(never_copy),
                Some(run_release),
                &mut keyval,
                release as *mut std::ffi::c_void,
            )
        },
        "MPI_Comm_create_keyval",
    )
    .and_then(|()| {
        // SAFETY: a valid keyval on MPI_COMM_SELF; the value is unused.
        check(
            unsafe { ffi::MPI_Comm_set_attr(ffi::RSMPI_COMM_SELF, keyval, std::ptr::null_mut()) },
            "MPI_Comm_set_attr",
        )
    });
    if registered.is_err() {
        REGISTERED.store(false, std::sync::atomic::Ordering::SeqCst);
    }
    registered
}

/// Duplicates of `MPI_COMM_SELF` do not inherit the hook.
unsafe extern "C" fn never_copy(
    _comm: ffi::MPI_Comm,
    _keyval: c_int,
    _extra_state: *mut std::ffi::c_void,
    _value_in: *mut std::ffi::c_void,
    _value_out: *mut std::ffi::c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes a valid flag pointer.
    unsafe { *flag = 0 };
    0
}

unsafe extern "C" fn run_release(
    _comm: ffi::MPI_Comm,
    _keyval: c_int,
    _value: *mut std::ffi::c_void,
    extra_state: *mut std::ffi::c_void,
) -> c_int {
    // SAFETY: extra_state is the `fn()` given to call_at_finalize.
    let release: fn() = unsafe { std::mem::transmute::<*mut std::ffi::c_void, fn()>(extra_state) };
    // A panic must not unwind into MPI.
    let _ = std::panic::catch_unwind(release);
    0
}
