//! What the engine counts: per-rank counters, and the tally its read
//! threads keep.

use crate::data_file::RunsRead;

/// Per-rank counters; [`Engine::node_counters`](crate::Engine::node_counters) sums a node's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    /// Bytes this rank read from the file: the index's tree pages and the
    /// values (readers only; gaps read through by coalescing included).
    pub bytes_read: u64,
    /// Read requests behind `bytes_read`.
    pub read_requests: u64,
    /// Times this rank opened the data file (0 on ranks that do not read).
    pub file_opens: u64,
    /// Of `bytes_read`, the tree pages read to build the index.
    pub index_bytes_read: u64,
    /// Read requests behind `index_bytes_read`.
    pub index_read_requests: u64,
    /// Value bytes handed to the caller in batches.
    pub bytes_delivered: u64,
    /// Records handed to the caller in batches.
    pub records_delivered: u64,
    /// Rounds started (each covers `prefetch` steps of every rank on the
    /// node).
    pub rounds: u64,
    /// World agreements the steps were served under. Independent reads:
    /// one where each round starts (nodes meet there; steps in between
    /// wait only for their own node's bytes). Collective reads: steps that
    /// ended in an agreement of their own; the others were served under an
    /// earlier step's agreement, their bytes already in on every node.
    pub step_agreements: u64,
    /// Wall seconds this rank spent in reads (starting them, and waiting
    /// for background reads to finish).
    pub io_seconds: f64,
    /// Wall seconds this rank spent waiting for other ranks: agreements,
    /// and steps whose bytes another reader was still reading.
    pub wait_seconds: f64,
    /// What opening had to make with blocking MPI calls: 1 for the node
    /// communicators, 1 for the shared window; 0 when both were kept from
    /// an earlier engine or made by [`prepare`](crate::prepare).
    pub setup_made: u64,
    /// Of `read_requests`, those read around the page cache (direct I/O).
    pub direct_read_requests: u64,
}

/// What this reader's reads of values did, counted by the read threads
/// as each read ends: before the read's last run is published, so a rank
/// that has seen the data also sees it counted, even in a round the job
/// stops in the middle of.
#[derive(Default)]
pub(crate) struct ReadTally {
    pub(crate) bytes: std::sync::atomic::AtomicU64,
    pub(crate) requests: std::sync::atomic::AtomicU64,
    pub(crate) direct_requests: std::sync::atomic::AtomicU64,
}

impl ReadTally {
    pub(crate) fn add(&self, bytes: u64, n: RunsRead) {
        use std::sync::atomic::Ordering::Relaxed;
        self.bytes.fetch_add(bytes, Relaxed);
        self.requests.fetch_add(n.requests, Relaxed);
        self.direct_requests.fetch_add(n.direct_requests, Relaxed);
    }

    /// `c` with these reads added.
    pub(crate) fn added_to(&self, mut c: Counters) -> Counters {
        use std::sync::atomic::Ordering::Relaxed;
        c.bytes_read += self.bytes.load(Relaxed);
        c.read_requests += self.requests.load(Relaxed);
        c.direct_read_requests += self.direct_requests.load(Relaxed);
        c
    }
}
