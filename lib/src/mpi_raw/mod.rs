//! The thin unsafe layer over MPI: owned communicators, MPI-IO files and
//! shared-memory windows, and the few collectives the engine needs.
//!
//! Every raw call's return code is checked and becomes an [`Error::Mpi`];
//! our communicators and files use `MPI_ERRORS_RETURN`, so a failure comes
//! back here instead of aborting the job. Handles are freed on drop.
//! Nothing above this module touches `mpi::ffi`.

mod comm;
mod file;
mod window;

pub use comm::{Comm, ReduceOp, ThreadLevel};
pub use file::{MpiFile, MpiFileSource, PendingRead};
pub use window::SharedWindow;

use std::ffi::{c_char, c_int};

use mpi::ffi;

use crate::error::{Error, Result};

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
