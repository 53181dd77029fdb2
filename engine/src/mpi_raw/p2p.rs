//! Nonblocking point-to-point transfers on one communicator, started one
//! by one and completed together (the exchange between node readers, see
//! docs/design/node-stage.md). A receive may scatter one message into
//! many places of a buffer (an `hindexed` datatype), so a peer's pieces
//! of a round arrive as one message straight where they go.

use std::ffi::{c_int, c_void};

use mpi::ffi;

use super::comm::{wait_all, Pacing};
use super::{check, Comm};
use lmdbio_core::error::{Error, Result};

/// Transfers in flight on `comm`; [`Transfers::wait`] completes them.
/// Dropped unfinished (an error while starting them), it waits for them
/// first, since their buffers may be freed right after.
pub struct Transfers<'c> {
    comm: &'c Comm,
    requests: Vec<ffi::MPI_Request>,
    /// Buffers of sends in flight, kept until they complete.
    sent: Vec<Vec<u8>>,
}

// SAFETY: request handles are valid in every thread of the process (MPI
// is initialised with MPI_THREAD_MULTIPLE wherever transfers are made:
// the exchange is only set up then); the buffers are owned or outlive the
// transfers (the callers' contracts).
unsafe impl Send for Transfers<'_> {}

fn count(len: u64) -> Result<c_int> {
    c_int::try_from(len).map_err(|_| {
        Error::ResourceLimit(format!(
            "a transfer of {len} bytes exceeds what an int count can describe"
        ))
    })
}

impl<'c> Transfers<'c> {
    /// None yet, on `comm`.
    pub fn new(comm: &'c Comm) -> Transfers<'c> {
        Transfers {
            comm,
            requests: Vec::new(),
            sent: Vec::new(),
        }
    }

    /// Sends `bytes` to `to` (kept until the send completes).
    pub fn send(&mut self, to: usize, tag: i32, bytes: Vec<u8>) -> Result<()> {
        let n = count(bytes.len() as u64)?;
        // SAFETY: reading an immutable handle constant of the MPI shim.
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        check(
            // SAFETY: `bytes` holds n bytes and is kept in `sent` (moving a
            // Vec does not move its heap buffer) until the request completes.
            unsafe {
                ffi::MPI_Isend(
                    bytes.as_ptr() as *const c_void,
                    n,
                    ffi::RSMPI_UINT8_T,
                    to as c_int,
                    tag,
                    self.comm.raw(),
                    &mut request,
                )
            },
            "MPI_Isend",
        )?;
        self.requests.push(request);
        self.sent.push(bytes);
        Ok(())
    }

    /// Receives one message from `from` into `pieces` of `base`, each an
    /// `(offset, length)`, filled in the order given.
    ///
    /// # Safety
    /// Every piece must lie in memory valid for writes, which nobody else
    /// reads or writes until the transfers complete.
    pub unsafe fn receive_scattered(
        &mut self,
        from: usize,
        tag: i32,
        base: *mut u8,
        pieces: &[(u64, u64)],
    ) -> Result<()> {
        let lens = pieces
            .iter()
            .map(|&(_, n)| count(n))
            .collect::<Result<Vec<c_int>>>()?;
        let displacements = pieces
            .iter()
            .map(|&(at, _)| {
                ffi::MPI_Aint::try_from(at)
                    .map_err(|_| Error::Internal("a receive offset out of range".into()))
            })
            .collect::<Result<Vec<ffi::MPI_Aint>>>()?;
        count(pieces.iter().map(|p| p.1).sum())?;
        // SAFETY: reading immutable handle constants of the MPI shim.
        let (mut datatype, mut request) =
            unsafe { (ffi::RSMPI_DATATYPE_NULL, ffi::RSMPI_REQUEST_NULL) };
        check(
            // SAFETY: lens and displacements hold pieces.len() entries each.
            unsafe {
                ffi::MPI_Type_create_hindexed(
                    count(pieces.len() as u64)?,
                    lens.as_ptr(),
                    displacements.as_ptr(),
                    ffi::RSMPI_UINT8_T,
                    &mut datatype,
                )
            },
            "MPI_Type_create_hindexed",
        )?;
        // SAFETY: a datatype made above.
        let posted = check(
            unsafe { ffi::MPI_Type_commit(&mut datatype) },
            "MPI_Type_commit",
        )
        .and_then(|()| {
            check(
                // SAFETY: the datatype's pieces lie where the caller
                // vouched for (base + offset, for length).
                unsafe {
                    ffi::MPI_Irecv(
                        base as *mut c_void,
                        1,
                        datatype,
                        from as c_int,
                        tag,
                        self.comm.raw(),
                        &mut request,
                    )
                },
                "MPI_Irecv",
            )
        });
        // SAFETY: MPI keeps a datatype in use by a pending request until it
        // completes; freeing our handle now is allowed.
        unsafe { ffi::MPI_Type_free(&mut datatype) };
        posted?;
        self.requests.push(request);
        Ok(())
    }

    /// Receives up to `into.len()` bytes from `from`.
    ///
    /// # Safety
    /// `into` must stay valid and untouched until the transfers complete.
    pub unsafe fn receive(&mut self, from: usize, tag: i32, into: &mut [u8]) -> Result<()> {
        // SAFETY: forwarded: `into` is one piece at offset 0.
        unsafe { self.receive_scattered(from, tag, into.as_mut_ptr(), &[(0, into.len() as u64)]) }
    }

    /// Completes every transfer, giving up past the timeout (see
    /// [`super::deadline`]); requests given up on stay active, and their
    /// send buffers are leaked with them.
    pub fn wait(mut self) -> Result<()> {
        let done = wait_all_busily(self.comm.raw(), &mut self.requests);
        if done.is_err() {
            std::mem::forget(std::mem::take(&mut self.sent));
        }
        self.requests.clear();
        done
    }
}

impl Drop for Transfers<'_> {
    fn drop(&mut self) {
        if !self.requests.is_empty() {
            let requests = std::mem::take(&mut self.requests);
            let me = Transfers {
                comm: self.comm,
                requests,
                sent: std::mem::take(&mut self.sent),
            };
            let _ = me.wait();
        }
    }
}

/// Completes `requests`, testing them again as soon as the thread's turn
/// comes back, past the timeout giving up as the collectives do. Not the
/// collectives' polite wait with its pauses: MPI moves a large message
/// between processes of one machine only while both sides test it, a piece
/// per test, so pauses of a millisecond held a round's transfer to a
/// fraction of the memory's speed.
fn wait_all_busily(comm: ffi::MPI_Comm, requests: &mut [ffi::MPI_Request]) -> Result<()> {
    wait_all(comm, requests, "exchange between nodes", Pacing::Busy)
}

/// A communicator whose point-to-point transfers run on helper threads.
pub struct PeerComm(Comm);

// SAFETY: made only where MPI runs with MPI_THREAD_MULTIPLE (`new`
// checks), under which a communicator may carry
// transfers from several threads at once; it is freed only when the last
// holder drops it.
unsafe impl Sync for PeerComm {}

impl PeerComm {
    /// Takes `comm` for transfers on helper threads; `None` unless MPI
    /// runs with `MPI_THREAD_MULTIPLE`.
    pub fn new(comm: Comm) -> Option<PeerComm> {
        (super::ThreadLevel::current() == super::ThreadLevel::Multiple).then_some(PeerComm(comm))
    }

    /// The communicator.
    pub fn comm(&self) -> &Comm {
        &self.0
    }
}
