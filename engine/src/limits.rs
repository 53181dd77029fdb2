//! Bounds on options, checked when they are set (C ABI) and at open: a
//! size no job can use (a batch of 10^8 records per rank, `SIZE_MAX`
//! steps of prefetch, a window larger than the machine) is refused with a
//! clear error before anything is allocated for it, instead of failing
//! later in an allocation that aborts or wakes the OOM killer.

use super::EngineOptions;
use lmdbio_core::error::{Error, Result};

/// Records per rank per step. Each record of a step takes bookkeeping of
/// its own (a placement, an offset, a length) before any value is read,
/// so this keeps one step's bookkeeping under about a GiB.
pub const MAX_BATCH: usize = 1 << 24;
/// Steps read ahead in one round.
pub const MAX_PREFETCH: usize = 1 << 16;
/// Readers on one node.
pub const MAX_READERS_PER_NODE: usize = 1 << 12;
/// Read streams (threads) of one reader.
pub const MAX_READ_STREAMS: usize = 1 << 10;
/// A coalesced request or a bridged gap larger than this is no longer a
/// read the window could take.
pub const MAX_COALESCE_BYTES: u64 = 1 << 40;

/// Bounds that need neither the database nor MPI.
pub fn check_static(o: &EngineOptions) -> Result<()> {
    let over = |what: &str, value: u64, max: u64| {
        Err(Error::ResourceLimit(format!(
            "{what} {value} is more than lmdbio accepts ({max})"
        )))
    };
    if o.batch > MAX_BATCH {
        return over(
            "batch size (records per rank per step)",
            o.batch as u64,
            MAX_BATCH as u64,
        );
    }
    if o.prefetch > MAX_PREFETCH {
        return over(
            "prefetch (steps per round)",
            o.prefetch as u64,
            MAX_PREFETCH as u64,
        );
    }
    if o.readers_per_node > MAX_READERS_PER_NODE {
        return over(
            "readers per node",
            o.readers_per_node as u64,
            MAX_READERS_PER_NODE as u64,
        );
    }
    if let Some(k) = o.ranks_per_node.filter(|&k| k > MAX_READERS_PER_NODE * 64) {
        return over(
            "ranks per node",
            k as u64,
            (MAX_READERS_PER_NODE * 64) as u64,
        );
    }
    if let Some(s) = o.read_streams.filter(|&s| s > MAX_READ_STREAMS) {
        return over("read streams", s as u64, MAX_READ_STREAMS as u64);
    }
    if o.coalesce.target > MAX_COALESCE_BYTES || o.coalesce.max_gap > MAX_COALESCE_BYTES {
        return over(
            "coalescing size",
            o.coalesce.target.max(o.coalesce.max_gap),
            MAX_COALESCE_BYTES,
        );
    }
    if let Some(memory) = physical_memory() {
        if o.window_bytes as u64 > memory {
            return Err(Error::ResourceLimit(format!(
                "window of {} bytes is larger than this machine's memory ({memory} bytes)",
                o.window_bytes
            )));
        }
    }
    Ok(())
}

/// Bounds that need the database: a batch larger than the whole database
/// would deliver records more than once in one step.
pub fn check_against_database(o: &EngineOptions, records: u64) -> Result<()> {
    if records > 0 && o.batch as u64 > records {
        return Err(Error::InvalidArgument(format!(
            "batch size {} is larger than the database ({records} records)",
            o.batch
        )));
    }
    Ok(())
}

fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf takes no pointers and has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && size > 0).then(|| pages as u64 * size as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_sizes_are_refused_and_ordinary_ones_kept() {
        let ok = EngineOptions::default();
        assert!(check_static(&ok).is_ok());
        for bad in [
            EngineOptions {
                batch: 100_000_000,
                ..EngineOptions::default()
            },
            EngineOptions {
                batch: usize::MAX,
                ..EngineOptions::default()
            },
            EngineOptions {
                prefetch: usize::MAX,
                ..EngineOptions::default()
            },
            EngineOptions {
                window_bytes: usize::MAX,
                ..EngineOptions::default()
            },
        ] {
            let e = check_static(&bad).unwrap_err();
            assert_eq!(
                e.kind(),
                lmdbio_core::error::ErrorKind::ResourceLimit,
                "{e}"
            );
        }
        let big = EngineOptions {
            batch: 1000,
            ..EngineOptions::default()
        };
        assert!(check_against_database(&big, 999).is_err());
        assert!(check_against_database(&big, 1000).is_ok());
        assert!(check_against_database(&big, 0).is_ok());
    }
}
