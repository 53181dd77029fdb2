//! How long a rank waits for the others before it gives up, and the roll
//! call that names the ranks that did not arrive.
//!
//! A collective call completes only when every rank has entered it, so a
//! stopped or hung rank would leave the others waiting forever. Every wait
//! of ours polls a nonblocking request; past the timeout the waiting rank
//! sends a roll-call message to every other rank of the communicator,
//! answers the roll calls of others while it waits for their answers for a
//! short grace period, and fails naming the ranks that did not answer. A
//! rank that receives a roll call while waiting gives up at once and makes
//! its own, so every waiting rank fails within about the timeout, not one
//! timeout after another. After a timeout every later wait of the process
//! gives up at once: the job cannot go on.
//!
//! The request given up on stays active (MPI cannot cancel a collective
//! call): its buffers must not be reused while the process goes on.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mpi::ffi;

use super::RawComm;

/// Milliseconds a rank waits for the others; `u64::MAX` for ever.
static TIMEOUT_MS: AtomicU64 = AtomicU64::new(u64::MAX);
/// Set once a wait of this process has timed out.
static TIMED_OUT: AtomicBool = AtomicBool::new(false);

/// Tags of the roll call, above any the engine uses (at least 32767 is
/// guaranteed to be a valid tag).
const ROLL_TAG: c_int = 32_101;
const ANSWER_TAG: c_int = 32_102;
/// How long a rank that called the roll waits for answers.
const GRACE: Duration = Duration::from_secs(1);

/// Sets how long waits on other ranks last (for every communicator).
pub fn set_timeout(timeout: Duration) {
    TIMEOUT_MS.store(
        u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        Ordering::SeqCst,
    );
}

/// How long waits on other ranks last now: as last set by
/// [`set_timeout`], practically unbounded before that.
pub fn timeout() -> Duration {
    Duration::from_millis(TIMEOUT_MS.load(Ordering::SeqCst))
}

/// Whether a wait that started at `started` has lasted too long.
pub fn expired(started: Instant) -> bool {
    TIMED_OUT.load(Ordering::SeqCst) || started.elapsed() >= timeout()
}

/// Notes that this process gave up waiting (every later wait gives up at
/// once).
pub fn give_up() {
    TIMED_OUT.store(true, Ordering::SeqCst);
}

/// Whether a wait of this process gave up: MPI_Finalize, which waits for
/// every rank, would then wait for ever for the rank that did not come.
pub fn gave_up() -> bool {
    TIMED_OUT.load(Ordering::SeqCst)
}

/// Answers roll calls waiting on `comm`; true if there was one (another
/// rank gave up waiting).
pub fn answer_roll_calls(comm: RawComm) -> bool {
    let mut any = false;
    while let Some(source) = receive_probed_byte(comm, ROLL_TAG) {
        send_byte(comm, source, ANSWER_TAG);
        any = true;
    }
    any
}

/// Receives one pending byte with `tag` from any rank, if there is one,
/// and returns its sender.
fn receive_probed_byte(comm: RawComm, tag: c_int) -> Option<c_int> {
    let mut flag: c_int = 0;
    let mut status = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
    // SAFETY: a valid communicator; flag and status are out pointers.
    let rc = unsafe {
        ffi::MPI_Iprobe(
            ffi::RSMPI_ANY_SOURCE,
            tag,
            comm,
            &mut flag,
            status.as_mut_ptr(),
        )
    };
    if rc != 0 || flag == 0 {
        return None;
    }
    // SAFETY: MPI_Iprobe found a message and filled status.
    let source = unsafe { status.assume_init() }.MPI_SOURCE;
    let mut byte = 0u8;
    // SAFETY: receives the one byte the probe found into `byte`.
    unsafe {
        ffi::MPI_Recv(
            &mut byte as *mut u8 as *mut c_void,
            1,
            ffi::RSMPI_UINT8_T,
            source,
            tag,
            comm,
            ffi::RSMPI_STATUS_IGNORE,
        )
    };
    Some(source)
}

/// Sends one byte without waiting for it to be received: the request is
/// freed at once (the byte is static, so it outlives the send).
fn send_byte(comm: RawComm, to: c_int, tag: c_int) {
    static BYTE: u8 = 1;
    // SAFETY: reading an immutable handle constant exported by rsmpi's shim.
    let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: BYTE is static; the request is freed, which MPI allows for
    // a point-to-point send in flight.
    unsafe {
        if ffi::MPI_Isend(
            &BYTE as *const u8 as *const c_void,
            1,
            ffi::RSMPI_UINT8_T,
            to,
            tag,
            comm,
            &mut request,
        ) == 0
        {
            ffi::MPI_Request_free(&mut request);
        }
    }
}

/// Calls the roll on `comm` and returns the ranks that did not answer
/// within the grace period (this rank excluded).
pub fn missing_ranks(comm: RawComm) -> Vec<usize> {
    give_up();
    let (mut rank, mut size): (c_int, c_int) = (0, 0);
    // SAFETY: a valid communicator and out pointers.
    unsafe {
        ffi::MPI_Comm_rank(comm, &mut rank);
        ffi::MPI_Comm_size(comm, &mut size);
    }
    for r in (0..size).filter(|&r| r != rank) {
        send_byte(comm, r, ROLL_TAG);
    }
    let mut answered = vec![false; size.max(0) as usize];
    if let Some(me) = answered.get_mut(rank as usize) {
        *me = true;
    }
    let started = Instant::now();
    while started.elapsed() < GRACE && answered.iter().any(|a| !a) {
        answer_roll_calls(comm);
        let Some(source) = receive_probed_byte(comm, ANSWER_TAG) else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        if let Some(a) = answered.get_mut(source as usize) {
            *a = true;
        }
    }
    answered
        .iter()
        .enumerate()
        .filter(|(_, a)| !**a)
        .map(|(r, _)| r)
        .collect()
}
