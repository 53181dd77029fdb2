//! Collective agreement: every collective step of the engine ends with one
//! reduction over all ranks that says whether anyone failed (and carries a
//! few numbers the step needs). If any rank failed, the lowest failing rank
//! broadcasts its error and every rank returns it, so no rank is left
//! waiting in a collective the failed rank will never enter.

use crate::mpi_raw::{Comm, ReduceOp};
use lmdbio_core::error::{Error, ErrorKind, Result};

/// Agrees on `local` across `comm`. `mins` are reduced with MIN on the way
/// (ranks with nothing to say pass `i64::MAX`).
pub fn agree<T>(comm: &Comm, local: Result<T>, mins: &mut [i64]) -> Result<T> {
    let mut values = Vec::with_capacity(mins.len() + 1);
    values.push(if local.is_err() {
        comm.rank() as i64
    } else {
        i64::MAX
    });
    values.extend_from_slice(mins);
    comm.allreduce_i64(&mut values, ReduceOp::Min)?;
    mins.copy_from_slice(&values[1..]);
    if values[0] == i64::MAX {
        return local;
    }
    let root = values[0] as usize;
    let mut message = match &local {
        Err(e) if comm.rank() == root => encode(e),
        _ => Vec::new(),
    };
    comm.bcast_bytes(root, &mut message)?;
    match local {
        Err(e) if comm.rank() == root => Err(e),
        _ => Err(decode(&message, root)),
    }
}

/// Runs a rank-local piece of a collective step, turning a panic into an
/// error so it reaches the agreement instead of leaving the other ranks
/// waiting for a rank that unwound.
pub fn local<T>(work: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Error::Internal(what))
    })
}

/// Agreement on a resource created by a collective call (a file, a
/// window). If another rank failed, this rank's handle cannot be freed
/// collectively (the failed rank has none to free), so it is leaked rather
/// than left to hang in its destructor.
pub fn agree_resource<T>(comm: &Comm, local: Result<T>) -> Result<T> {
    let (status, value) = match local {
        Ok(v) => (Ok(()), Some(v)),
        Err(e) => (Err(e), None),
    };
    match (agree_ok(comm, status), value) {
        (Ok(()), Some(v)) => Ok(v),
        (Ok(()), None) => Err(Error::Internal("agreed success without a value".into())),
        (Err(e), v) => {
            std::mem::forget(v);
            Err(e)
        }
    }
}

/// Agreement with nothing else to reduce.
pub fn agree_ok<T>(comm: &Comm, local: Result<T>) -> Result<T> {
    agree(comm, local, &mut [])
}

fn encode(e: &Error) -> Vec<u8> {
    let mut out = e.kind().code().to_le_bytes().to_vec();
    out.extend_from_slice(e.to_string().as_bytes());
    out
}

fn decode(bytes: &[u8], rank: usize) -> Error {
    let code = bytes
        .get(..4)
        .map_or(0, |b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    Error::OnRank {
        rank,
        kind: ErrorKind::from_code(code),
        message: String::from_utf8_lossy(bytes.get(4..).unwrap_or_default()).into_owned(),
    }
}
