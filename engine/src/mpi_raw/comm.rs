//! Owned communicators and the collectives the engine uses.

use std::ffi::{c_int, c_void};

use mpi::ffi;

use super::{check, RawComm};
use lmdbio_core::error::{Error, Result};

/// A communicator we created (by dup or split), freed on drop, with MPI
/// errors on it returning codes instead of aborting; or a caller's,
/// borrowed for a single agreement ([`Comm::caller`]).
pub struct Comm {
    raw: RawComm,
    rank: usize,
    size: usize,
    /// Ours to free (and to set the error handler of).
    owned: bool,
}

// SAFETY: a communicator handle is valid in every thread of the process.
// The engine uses each of its communicators from one thread at a time (the
// read thread uses only the file), and the node topologies kept between
// engines (engine::topology) are handed from one owner to the next under a
// lock, never shared.
unsafe impl Send for Comm {}

/// Thread support the MPI library was initialised with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ThreadLevel {
    /// `MPI_THREAD_SINGLE`: one thread only.
    Single,
    /// `MPI_THREAD_FUNNELED`: only the thread that initialised MPI calls it.
    Funneled,
    /// `MPI_THREAD_SERIALIZED`: any thread, one at a time.
    Serialized,
    /// `MPI_THREAD_MULTIPLE`: any thread, concurrently.
    Multiple,
}

impl ThreadLevel {
    /// The level MPI provides (`MPI_Query_thread`). Call after MPI is
    /// initialised.
    pub fn current() -> ThreadLevel {
        let mut provided: c_int = 0;
        // SAFETY: valid after MPI_Init; provided is a valid out pointer.
        unsafe { ffi::MPI_Query_thread(&mut provided) };
        // SAFETY: reading immutable constants exported by rsmpi's shim.
        let (serialized, multiple, funneled) = unsafe {
            (
                ffi::RSMPI_THREAD_SERIALIZED,
                ffi::RSMPI_THREAD_MULTIPLE,
                ffi::RSMPI_THREAD_FUNNELED,
            )
        };
        match provided {
            p if p == multiple => ThreadLevel::Multiple,
            p if p == serialized => ThreadLevel::Serialized,
            p if p == funneled => ThreadLevel::Funneled,
            _ => ThreadLevel::Single,
        }
    }
}

/// Reduction operations we use.
#[derive(Debug, Clone, Copy)]
pub enum ReduceOp {
    /// `MPI_MIN`.
    Min,
    /// `MPI_MAX`.
    Max,
    /// `MPI_SUM`.
    Sum,
}

/// A communicator handle we may call MPI on.
fn check_usable(raw: RawComm) -> Result<()> {
    if !super::is_initialized() {
        return Err(Error::InvalidArgument(
            "MPI is not initialised (call MPI_Init before opening)".into(),
        ));
    }
    // SAFETY: reading an immutable handle constant.
    if raw == unsafe { ffi::RSMPI_COMM_NULL } {
        return Err(Error::InvalidArgument(
            "the communicator is MPI_COMM_NULL".into(),
        ));
    }
    Ok(())
}

impl Comm {
    /// Duplicates a caller's communicator so our traffic never mixes with
    /// theirs, and makes MPI errors on it return codes.
    pub fn dup(raw: RawComm) -> Result<Comm> {
        check_usable(raw)?;
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut out = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        check(
            // SAFETY: `raw` is a communicator handle from the caller (checked
            // usable); out and request are valid pointers for the new handles.
            unsafe { ffi::MPI_Comm_idup(raw, &mut out, &mut request) },
            "MPI_Comm_idup",
        )?;
        wait_politely(raw, &mut request, "MPI_Comm_idup")?;
        Comm::adopt(out)
    }

    /// The caller's communicator as it is: not freed on drop, and its
    /// error handler left alone (an MPI error on it does what the caller
    /// chose). For the one agreement that decides whether a kept
    /// duplicate can be used instead of making one, which is itself a
    /// collective call on the caller's communicator.
    pub fn caller(raw: RawComm) -> Result<Comm> {
        check_usable(raw)?;
        Comm {
            raw,
            rank: 0,
            size: 0,
            owned: false,
        }
        .sized()
    }

    fn adopt(raw: RawComm) -> Result<Comm> {
        // Freed on drop from here on, whatever fails below.
        let comm = Comm {
            raw,
            rank: 0,
            size: 0,
            owned: true,
        };
        check(
            // SAFETY: raw is a valid communicator we own; the errhandler
            // constant is always valid.
            unsafe { ffi::MPI_Comm_set_errhandler(raw, ffi::RSMPI_ERRORS_RETURN) },
            "MPI_Comm_set_errhandler",
        )?;
        comm.sized()
    }

    /// Fills in this rank's rank and the size.
    fn sized(mut self) -> Result<Comm> {
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        check(
            // SAFETY: valid communicator and out pointers.
            unsafe { ffi::MPI_Comm_rank(self.raw, &mut rank) },
            "MPI_Comm_rank",
        )?;
        check(
            // SAFETY: valid communicator and out pointer.
            unsafe { ffi::MPI_Comm_size(self.raw, &mut size) },
            "MPI_Comm_size",
        )?;
        self.rank = rank as usize;
        self.size = size as usize;
        Ok(self)
    }

    /// The underlying `MPI_Comm` handle, still owned by this value.
    pub fn raw(&self) -> RawComm {
        self.raw
    }

    /// This process's rank in the communicator.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the communicator.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The ranks that share memory with this one (`MPI_COMM_TYPE_SHARED`).
    pub fn split_shared(&self) -> Result<Comm> {
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut out = unsafe { ffi::RSMPI_COMM_NULL };
        check(
            // SAFETY: valid communicator, constants from the shim, out pointer.
            unsafe {
                ffi::MPI_Comm_split_type(
                    self.raw,
                    ffi::RSMPI_COMM_TYPE_SHARED,
                    self.rank as c_int,
                    ffi::RSMPI_INFO_NULL,
                    &mut out,
                )
            },
            "MPI_Comm_split_type",
        )?;
        Comm::adopt(out)
    }

    /// `MPI_Comm_split`; `None` colour means MPI_UNDEFINED (no new
    /// communicator for this rank). Collective over `self`.
    pub fn split(&self, color: Option<usize>, key: usize) -> Result<Option<Comm>> {
        // SAFETY: reading an immutable constant.
        let color = color.map_or(unsafe { ffi::RSMPI_UNDEFINED }, |c| c as c_int);
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut out = unsafe { ffi::RSMPI_COMM_NULL };
        check(
            // SAFETY: valid communicator and out pointer.
            unsafe { ffi::MPI_Comm_split(self.raw, color, key as c_int, &mut out) },
            "MPI_Comm_split",
        )?;
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        if out == unsafe { ffi::RSMPI_COMM_NULL } {
            return Ok(None);
        }
        Comm::adopt(out).map(Some)
    }

    /// A communicator of the ranks `members` (ranks of `self`, in the new
    /// order) with `MPI_Comm_create_group`: collective over the members
    /// only, so the others neither take part nor wait. Where ranks
    /// outnumber cores, MPICH's blocking creation calls spin; a split over
    /// all of `self` kept every rank spinning for every group.
    pub fn create_group(&self, members: &[usize], tag: i32) -> Result<Comm> {
        let ranks: Vec<c_int> = members.iter().map(|&r| r as c_int).collect();
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut parent = unsafe { ffi::RSMPI_GROUP_NULL };
        check(
            // SAFETY: valid communicator; parent is an out pointer.
            unsafe { ffi::MPI_Comm_group(self.raw, &mut parent) },
            "MPI_Comm_group",
        )?;
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut group = unsafe { ffi::RSMPI_GROUP_NULL };
        // SAFETY: parent is the group just obtained; ranks holds
        // ranks.len() valid ranks of it; group is an out pointer.
        let included = check(
            unsafe {
                ffi::MPI_Group_incl(parent, ranks.len() as c_int, ranks.as_ptr(), &mut group)
            },
            "MPI_Group_incl",
        );
        // SAFETY: we own parent and free it once.
        unsafe { ffi::MPI_Group_free(&mut parent) };
        included?;
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut out = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: valid communicator and group (this rank is a member, as
        // callers ensure); out is an out pointer.
        let created = check(
            unsafe { ffi::MPI_Comm_create_group(self.raw, group, tag, &mut out) },
            "MPI_Comm_create_group",
        );
        // SAFETY: we own group and free it once.
        unsafe { ffi::MPI_Group_free(&mut group) };
        created?;
        Comm::adopt(out)
    }

    /// Whether `other` holds the same ranks in the same order (a local
    /// check, `MPI_Comm_compare`).
    pub fn same_ranks_as(&self, other: RawComm) -> Result<bool> {
        let mut result: c_int = 0;
        check(
            // SAFETY: both handles are valid communicators; result is an out
            // pointer.
            unsafe { ffi::MPI_Comm_compare(self.raw, other, &mut result) },
            "MPI_Comm_compare",
        )?;
        // SAFETY: reading immutable constants.
        Ok(unsafe { result == ffi::RSMPI_IDENT || result == ffi::RSMPI_CONGRUENT })
    }

    /// A barrier that waits without spinning (see `wait_politely`).
    pub fn barrier(&self) -> Result<()> {
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        check(
            // SAFETY: valid communicator and request out pointer.
            unsafe { ffi::MPI_Ibarrier(self.raw, &mut request) },
            "MPI_Ibarrier",
        )?;
        wait_politely(self.raw, &mut request, "MPI_Ibarrier")
    }

    /// In-place reduction of `values` across all ranks.
    pub fn allreduce_i64(&self, values: &mut [i64], op: ReduceOp) -> Result<()> {
        // SAFETY: reading immutable constants.
        let op = unsafe {
            match op {
                ReduceOp::Min => ffi::RSMPI_MIN,
                ReduceOp::Max => ffi::RSMPI_MAX,
                ReduceOp::Sum => ffi::RSMPI_SUM,
            }
        };
        let send = values.to_vec();
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        check(
            // SAFETY: send and values hold values.len() i64s each and live until
            // the request completes below; the datatype matches.
            unsafe {
                ffi::MPI_Iallreduce(
                    send.as_ptr() as *const c_void,
                    values.as_mut_ptr() as *mut c_void,
                    values.len() as c_int,
                    ffi::RSMPI_INT64_T,
                    op,
                    self.raw,
                    &mut request,
                )
            },
            "MPI_Iallreduce",
        )?;
        wait_politely(self.raw, &mut request, "MPI_Iallreduce")
    }

    /// Broadcasts `bytes` from `root`; other ranks' vectors are replaced.
    pub fn bcast_bytes(&self, root: usize, bytes: &mut Vec<u8>) -> Result<()> {
        let mut len = [bytes.len() as i64];
        self.bcast_i64(root, &mut len)?;
        if self.rank != root {
            bytes.clear();
            bytes.resize(len[0] as usize, 0);
        }
        for chunk in bytes.chunks_mut(1 << 30) {
            // SAFETY: chunk is a valid buffer of chunk.len() (< 2^31) bytes,
            // the same length on every rank.
            unsafe {
                self.bcast_raw(
                    root,
                    chunk.as_mut_ptr() as *mut c_void,
                    chunk.len(),
                    ffi::RSMPI_UINT8_T,
                )?
            };
        }
        Ok(())
    }

    /// Broadcasts `values` from rank `root` (`MPI_Bcast`); every rank
    /// passes a slice of the same length.
    pub fn bcast_i64(&self, root: usize, values: &mut [i64]) -> Result<()> {
        // SAFETY: values is a valid buffer of values.len() i64s on every
        // rank (callers pass equal lengths).
        unsafe {
            self.bcast_raw(
                root,
                values.as_mut_ptr() as *mut c_void,
                values.len(),
                ffi::RSMPI_INT64_T,
            )
        }
    }

    /// `MPI_Bcast` of `count` elements of `datatype` at `buf`.
    ///
    /// # Safety
    /// `buf` must hold `count` elements of `datatype` (count < 2^31) on
    /// every rank.
    unsafe fn bcast_raw(
        &self,
        root: usize,
        buf: *mut c_void,
        count: usize,
        datatype: ffi::MPI_Datatype,
    ) -> Result<()> {
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        check(
            // SAFETY: forwarded from the caller; the communicator is valid and
            // the buffer outlives the request, completed before returning.
            unsafe {
                ffi::MPI_Ibcast(
                    buf,
                    count as c_int,
                    datatype,
                    root as c_int,
                    self.raw,
                    &mut request,
                )
            },
            "MPI_Ibcast",
        )?;
        wait_politely(self.raw, &mut request, "MPI_Ibcast")
    }

    /// Every rank contributes `mine` (same length everywhere); returns all
    /// contributions, rank-major.
    pub fn allgather_i64(&self, mine: &[i64]) -> Result<Vec<i64>> {
        let mut all = vec![0i64; mine.len() * self.size];
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        check(
            // SAFETY: send holds mine.len() i64s, recv size*mine.len(); both
            // outlive the request, completed before returning.
            unsafe {
                ffi::MPI_Iallgather(
                    mine.as_ptr() as *const c_void,
                    mine.len() as c_int,
                    ffi::RSMPI_INT64_T,
                    all.as_mut_ptr() as *mut c_void,
                    mine.len() as c_int,
                    ffi::RSMPI_INT64_T,
                    self.raw,
                    &mut request,
                )
            },
            "MPI_Iallgather",
        )?;
        wait_politely(self.raw, &mut request, "MPI_Iallgather")?;
        Ok(all)
    }

    /// Several gathers at once: for each `(mine, counts, out)`, every
    /// rank's `mine` lands in `out` (rank order, packed), whose length must
    /// be the sum of `counts`. They run together, so the whole takes about
    /// the time of the longest rather than their sum: each step of a
    /// gather waits for its ranks to be scheduled, and at eight ranks on
    /// two cores that is most of its time.
    pub fn allgatherv_bytes(&self, gathers: &mut [(&[u8], &[u64], &mut [u8])]) -> Result<()> {
        let mut layouts = Vec::with_capacity(gathers.len());
        for (mine, counts, out) in gathers.iter() {
            let total: u64 = counts.iter().sum();
            if total > i32::MAX as u64
                || out.len() as u64 != total
                || counts.get(self.rank) != Some(&(mine.len() as u64))
            {
                return Err(Error::ResourceLimit(format!(
                    "gathering {total} bytes in one MPI_Allgatherv exceeds what an int count can describe"
                )));
            }
            let recv_counts: Vec<c_int> = counts.iter().map(|&c| c as c_int).collect();
            let displs: Vec<c_int> = recv_counts
                .iter()
                .scan(0, |at, &c| {
                    let here = *at;
                    *at += c;
                    Some(here)
                })
                .collect();
            layouts.push((recv_counts, displs));
        }
        // SAFETY: reading an immutable handle constant.
        let mut requests = vec![unsafe { ffi::RSMPI_REQUEST_NULL }; gathers.len()];
        for (i, ((mine, _, out), (recv_counts, displs))) in
            gathers.iter_mut().zip(&layouts).enumerate()
        {
            // SAFETY: buffers match the counts checked above; all ints
            // fit; buffers, counts and displacements outlive the requests,
            // which complete before returning (or, if starting one fails,
            // those already started are completed first).
            let started = check(
                unsafe {
                    ffi::MPI_Iallgatherv(
                        mine.as_ptr() as *const c_void,
                        mine.len() as c_int,
                        ffi::RSMPI_UINT8_T,
                        out.as_mut_ptr() as *mut c_void,
                        recv_counts.as_ptr(),
                        displs.as_ptr(),
                        ffi::RSMPI_UINT8_T,
                        self.raw,
                        &mut requests[i],
                    )
                },
                "MPI_Iallgatherv",
            );
            if let Err(e) = started {
                wait_all_politely(self.raw, &mut requests[..i], "MPI_Iallgatherv")?;
                return Err(e);
            }
        }
        wait_all_politely(self.raw, &mut requests, "MPI_Iallgatherv")
    }
}

/// Completes `request` without monopolising a core: test, then sleep a
/// pause that starts at 20 µs and doubles up to a twentieth of the time
/// waited so far (at least 100 µs, at most 1 ms), and test again.
///
/// The engine's agreements are where ranks wait for other nodes' reads; a
/// waiter spinning inside MPI takes the core a reader needs whenever ranks
/// outnumber cores (under MPI_THREAD_MULTIPLE every MPI_Test also takes
/// the library's lock). But a collective advances only while its ranks
/// test it, so every pause may delay each step of its algorithm (see
/// docs/design/polite-wait.md). Short waits therefore keep short pauses; long
/// ones (a rank waiting tens of milliseconds for the slowest node) lengthen
/// them in proportion, so they neither cost much CPU nor delay the end by
/// more than a few percent.
fn wait_politely(comm: RawComm, request: &mut ffi::MPI_Request, call: &'static str) -> Result<()> {
    wait_all_politely(comm, std::slice::from_mut(request), call)
}

/// [`wait_politely`] for several requests, done when all are.
fn wait_all_politely(
    comm: RawComm,
    requests: &mut [ffi::MPI_Request],
    call: &'static str,
) -> Result<()> {
    wait_all(comm, requests, call, Pacing::Polite)
}

/// What a wait does between two tests of its requests.
#[derive(Clone, Copy)]
pub(super) enum Pacing {
    /// Pauses that lengthen with the wait ([`wait_politely`]).
    Polite,
    /// Test again as soon as the thread's turn comes back (transfers that
    /// move only while tested, see `p2p`).
    Busy,
}

/// Completes `requests`, done when all are. Gives up past the timeout (see
/// [`super::deadline`]), naming the ranks of `comm` that did not arrive.
pub(super) fn wait_all(
    comm: RawComm,
    requests: &mut [ffi::MPI_Request],
    call: &'static str,
    pacing: Pacing,
) -> Result<()> {
    use std::time::{Duration, Instant};
    const FIRST_PAUSE: Duration = Duration::from_micros(20);
    const SHORT_PAUSE: Duration = Duration::from_micros(100);
    const LONGEST_PAUSE: Duration = Duration::from_millis(1);
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        let mut done: c_int = 0;
        check(
            // SAFETY: requests we started (or null ones); MPI_STATUSES_IGNORE
            // is a valid statuses argument.
            unsafe {
                ffi::MPI_Testall(
                    requests.len() as c_int,
                    requests.as_mut_ptr(),
                    &mut done,
                    ffi::RSMPI_STATUSES_IGNORE,
                )
            },
            call,
        )?;
        if done != 0 {
            return Ok(());
        }
        if super::deadline::answer_roll_calls(comm) {
            super::deadline::give_up();
        }
        if super::deadline::expired(started) {
            return Err(timed_out(comm, call, started));
        }
        match pacing {
            Pacing::Busy => std::thread::yield_now(),
            Pacing::Polite => {
                std::thread::sleep(pause);
                let cap = (started.elapsed() / 20).clamp(SHORT_PAUSE, LONGEST_PAUSE);
                pause = (pause * 2).min(cap);
            }
        }
    }
}

/// The error of a wait given up: which ranks of `comm` never arrived.
fn timed_out(comm: RawComm, call: &'static str, started: std::time::Instant) -> Error {
    let missing = super::deadline::missing_ranks(comm);
    let waited = started.elapsed().as_secs_f64();
    let who = if missing.is_empty() {
        "every rank answered, yet the call did not complete (another rank gave up first)"
            .to_string()
    } else {
        let list: Vec<String> = missing.iter().map(|r| r.to_string()).collect();
        format!(
            "rank{} {} did not arrive",
            if missing.len() > 1 { "s" } else { "" },
            list.join(", ")
        )
    };
    Error::Mpi {
        call,
        code: 0,
        message: format!(
            "timed out after {waited:.1} s (LMDBIO_TIMEOUT / the timeout option is {} s): {who}",
            super::deadline::timeout().as_secs_f64()
        ),
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if self.owned && super::is_initialized() {
            // SAFETY: we own this communicator and free it once. A failure
            // here cannot be reported from drop and leaks only the handle.
            unsafe { ffi::MPI_Comm_free(&mut self.raw) };
        }
    }
}
