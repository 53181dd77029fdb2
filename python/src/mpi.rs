//! The few MPI calls the Python package makes itself: initialising MPI when
//! nobody has, finalising what it initialised, turning an mpi4py handle
//! into the engine's communicator type, and naming the MPI library (to
//! refuse an mpi4py built against another MPI). Everything else goes
//! through the engine.

use std::ffi::{c_char, c_int};

use lmdbio::mpi_raw::{self, RawComm};
use lmdbio::{Error, Result};
use mpi::ffi;

/// Whether this process's MPI was initialised by us (and so is ours to
/// finalise).
static INITIALISED_HERE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Initialises MPI with `MPI_THREAD_MULTIPLE` if nobody has: the engine runs
/// on a thread of its own while the caller may use mpi4py on theirs.
/// Returns whether this call initialised it.
pub fn ensure_initialized() -> Result<bool> {
    if mpi_raw::is_initialized() {
        return Ok(false);
    }
    let mut finalized: c_int = 0;
    // SAFETY: may be called at any time; a valid out pointer.
    unsafe { ffi::MPI_Finalized(&mut finalized) };
    if finalized != 0 {
        return Err(Error::InvalidArgument(
            "MPI was already finalised in this process".into(),
        ));
    }
    let mut provided: c_int = 0;
    // SAFETY: NULL argc/argv are allowed; a valid out pointer; MPI is
    // neither initialised nor finalised (checked above).
    let rc = unsafe {
        ffi::MPI_Init_thread(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            ffi::RSMPI_THREAD_MULTIPLE,
            &mut provided,
        )
    };
    if rc != 0 {
        return Err(Error::Mpi {
            call: "MPI_Init_thread",
            code: rc,
            message: "could not initialise MPI".into(),
        });
    }
    INITIALISED_HERE.store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(true)
}

/// Finalises MPI if we initialised it and it is still up.
pub fn finalize_if_ours() {
    if INITIALISED_HERE.swap(false, std::sync::atomic::Ordering::SeqCst)
        && mpi_raw::is_initialized()
    {
        // SAFETY: MPI is initialised, by us, and not finalised.
        unsafe { ffi::MPI_Finalize() };
    }
}

/// Whether MPI runs with `MPI_THREAD_MULTIPLE` (the engine thread may then
/// call MPI while the caller's thread does too).
pub fn thread_multiple() -> bool {
    mpi_raw::ThreadLevel::current() == mpi_raw::ThreadLevel::Multiple
}

/// The MPI library's own name and version (`MPI_Get_library_version`).
pub fn library_version() -> String {
    let mut buf = vec![0 as c_char; ffi::MPI_MAX_LIBRARY_VERSION_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: buf holds MPI_MAX_LIBRARY_VERSION_STRING characters plus a
    // terminator; callable before MPI_Init.
    let rc = unsafe { ffi::MPI_Get_library_version(buf.as_mut_ptr(), &mut len) };
    if rc != 0 {
        return String::new();
    }
    let bytes: Vec<u8> = buf[..len.clamp(0, buf.len() as c_int) as usize]
        .iter()
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_owned()
}

/// A communicator handle handed to the engine thread.
#[derive(Clone, Copy)]
pub struct CommHandle(pub RawComm);

// SAFETY: an MPI communicator handle is valid in every thread of the
// process; only the engine thread makes calls on it.
unsafe impl Send for CommHandle {}

/// The communicator behind a handle taken from mpi4py (an int: MPICH's
/// handles are 32-bit ints, Open MPI's are pointers; mpi4py may show a
/// 32-bit pattern signed or unsigned), or the world.
pub fn comm_from(handle: Option<i128>) -> CommHandle {
    let Some(value) = handle else {
        return CommHandle(mpi_raw::comm_world());
    };
    CommHandle(match std::mem::size_of::<RawComm>() {
        4 => from_bits((value as u32).to_ne_bytes()),
        _ => from_bits((value as u64).to_ne_bytes()),
    })
}

fn from_bits<const N: usize>(bits: [u8; N]) -> RawComm {
    assert_eq!(N, std::mem::size_of::<RawComm>(), "handle size");
    // SAFETY: RawComm is an int or a pointer of exactly N bytes (asserted),
    // for which every bit pattern is a value.
    unsafe { std::mem::transmute_copy::<[u8; N], RawComm>(&bits) }
}

/// Size of a communicator.
pub fn comm_size(comm: CommHandle) -> Result<usize> {
    Ok(mpi_raw::Comm::caller(comm.0)?.size())
}

/// Rank in a communicator.
pub fn comm_rank(comm: CommHandle) -> Result<usize> {
    Ok(mpi_raw::Comm::caller(comm.0)?.rank())
}
