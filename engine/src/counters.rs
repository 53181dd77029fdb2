//! What the engine counts: per-rank counters, the same per epoch, and
//! the tally its read threads keep.

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
    /// Reader slots held in liblmdb's lock file for the job's snapshot
    /// (1 on a reader whose snapshot liblmdb writers on its machine keep;
    /// 0 where a change is only detected: see
    /// [`Engine::snapshot_guard`](crate::Engine::snapshot_guard)).
    pub reader_slots: u64,
    /// 1 on a node's first rank that loaded a saved index instead of
    /// scanning the tree (docs/design/saved-index.md), else 0.
    pub index_loaded: u64,
    /// Wall seconds opening spent on the index: the scan (or loading a
    /// saved index) and its publication in the node's memory, agreements
    /// included.
    pub index_seconds: f64,
    /// Value bytes read from the node's stage instead of the database file
    /// (see [`EngineOptions::stage`](crate::EngineOptions::stage)).
    pub stage_bytes_read: u64,
    /// Bytes written to the node's stage.
    pub stage_bytes_written: u64,
    /// Problems with the stage that sent reads to the database file
    /// (stderr says the first).
    pub stage_warnings: u64,
}

/// One epoch's share of a rank's work ([`Engine::epoch_counters`](crate::Engine::epoch_counters)).
/// Bytes read are counted by the epoch of the records they were read for:
/// a read request holding records of two epochs (where a round crosses an
/// epoch's end) counts for the earlier one, and the tree pages read to
/// build the index count for the job's first epoch, so the epochs'
/// `db_bytes_read` add up to [`Counters::bytes_read`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EpochCounters {
    /// The epoch, counted as [`BatchRecord::epoch`](crate::BatchRecord::epoch).
    pub epoch: u64,
    /// Bytes this rank read from the database file for this epoch.
    pub db_bytes_read: u64,
    /// Bytes this rank read from its node's stage for this epoch.
    pub stage_bytes_read: u64,
    /// Bytes this rank received from other nodes for this epoch.
    pub remote_bytes_received: u64,
    /// Records of this epoch handed to the caller.
    pub records: u64,
    /// Value bytes of this epoch handed to the caller.
    pub bytes_delivered: u64,
    /// Wall seconds this rank spent on the epoch: from the engine's open
    /// (the first epoch) or the previous step's delivery to the delivery of
    /// each step, a step holding records of two epochs split between them
    /// by records. The caller's work between steps counts too, so the
    /// epochs add up to the time from open to the last batch.
    pub seconds: f64,
}

/// Where bytes counted for an epoch came from.
#[allow(dead_code)] // the stage's reads and the exchange between nodes count as these
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EpochSource {
    /// The database file (the shared file system).
    Database,
    /// This node's stage.
    Stage,
    /// Another node, over MPI.
    Remote,
}

/// The entry of `epoch` in `list` (kept sorted by epoch), made if missing.
pub(crate) fn epoch_entry(list: &mut Vec<EpochCounters>, epoch: u64) -> &mut EpochCounters {
    let at = match list.binary_search_by_key(&epoch, |e| e.epoch) {
        Ok(i) => i,
        Err(i) => {
            list.insert(
                i,
                EpochCounters {
                    epoch,
                    ..Default::default()
                },
            );
            i
        }
    };
    &mut list[at]
}

/// `b`'s counts added into `a` (same epochs merged; sorted by epoch).
pub(crate) fn merge_epochs(a: &mut Vec<EpochCounters>, b: &[EpochCounters]) {
    for e in b {
        let t = epoch_entry(a, e.epoch);
        t.db_bytes_read += e.db_bytes_read;
        t.stage_bytes_read += e.stage_bytes_read;
        t.remote_bytes_received += e.remote_bytes_received;
        t.records += e.records;
        t.bytes_delivered += e.bytes_delivered;
        t.seconds += e.seconds;
    }
}

/// Bytes of one read, by the epoch of the records they hold: `(epoch,
/// bytes)` pairs.
pub(crate) type BytesByEpoch = Vec<(u64, u64)>;

/// What this reader's reads of values did, counted by the read threads
/// as each read ends: before the read's last run is published, so a rank
/// that has seen the data also sees it counted, even in a round the job
/// stops in the middle of.
#[derive(Default)]
pub(crate) struct ReadTally {
    pub(crate) bytes: std::sync::atomic::AtomicU64,
    pub(crate) requests: std::sync::atomic::AtomicU64,
    pub(crate) direct_requests: std::sync::atomic::AtomicU64,
    /// The bytes by epoch and by where they came from.
    pub(crate) epochs: std::sync::Mutex<Vec<EpochCounters>>,
    pub(crate) stage_bytes: std::sync::atomic::AtomicU64,
    pub(crate) stage_bytes_written: std::sync::atomic::AtomicU64,
    pub(crate) stage_warnings: std::sync::atomic::AtomicU64,
    /// The epoch of the latest round read: the filler's reads of the
    /// database count for it.
    pub(crate) current_epoch: std::sync::atomic::AtomicU64,
}

impl ReadTally {
    /// A read of the database file: `by_epoch` adds up to its bytes.
    pub(crate) fn add(&self, by_epoch: &[(u64, u64)], n: RunsRead) {
        use std::sync::atomic::Ordering::Relaxed;
        let bytes = by_epoch.iter().map(|&(_, b)| b).sum();
        self.bytes.fetch_add(bytes, Relaxed);
        self.requests.fetch_add(n.requests, Relaxed);
        self.direct_requests.fetch_add(n.direct_requests, Relaxed);
        for &(epoch, b) in by_epoch {
            self.add_epoch_bytes(epoch, EpochSource::Database, b);
        }
    }

    /// Counts `bytes` from `source` for `epoch` (per epoch only: a read of
    /// the database file goes through [`ReadTally::add`], which also counts
    /// it in the totals). The stage's reads and the bytes other nodes send
    /// are counted here.
    pub(crate) fn add_epoch_bytes(&self, epoch: u64, source: EpochSource, bytes: u64) {
        let mut epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        let e = epoch_entry(&mut epochs, epoch);
        match source {
            EpochSource::Database => e.db_bytes_read += bytes,
            EpochSource::Stage => e.stage_bytes_read += bytes,
            EpochSource::Remote => e.remote_bytes_received += bytes,
        }
    }

    /// The per-epoch counts so far.
    pub(crate) fn epochs(&self) -> Vec<EpochCounters> {
        self.epochs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A read of the database file outside the rounds (staging it),
    /// counted for the epoch of the latest round read.
    pub(crate) fn add_db_read(&self, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let epoch = self.current_epoch.load(Relaxed);
        self.add(
            &[(epoch, bytes)],
            RunsRead {
                requests: 1,
                ..RunsRead::default()
            },
        );
    }

    /// Bytes read from the node's stage for `epoch`.
    pub(crate) fn add_stage_read(&self, epoch: u64, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.stage_bytes.fetch_add(bytes, Relaxed);
        self.add_epoch_bytes(epoch, EpochSource::Stage, bytes);
    }

    /// `c` with these reads added.
    pub(crate) fn added_to(&self, mut c: Counters) -> Counters {
        use std::sync::atomic::Ordering::Relaxed;
        c.bytes_read += self.bytes.load(Relaxed);
        c.read_requests += self.requests.load(Relaxed);
        c.direct_read_requests += self.direct_requests.load(Relaxed);
        c.stage_bytes_read += self.stage_bytes.load(Relaxed);
        c.stage_bytes_written += self.stage_bytes_written.load(Relaxed);
        c.stage_warnings += self.stage_warnings.load(Relaxed);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_counts_stay_sorted_and_add_up_to_the_totals() {
        let tally = ReadTally::default();
        tally.add(&[(2, 100), (1, 30)], RunsRead::default());
        tally.add(&[(1, 5)], RunsRead::default());
        tally.add_epoch_bytes(3, EpochSource::Stage, 7);
        tally.add_epoch_bytes(1, EpochSource::Remote, 9);
        let e = tally.epochs();
        assert_eq!(e.iter().map(|e| e.epoch).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!((e[0].db_bytes_read, e[0].remote_bytes_received), (35, 9));
        assert_eq!((e[1].db_bytes_read, e[2].stage_bytes_read), (100, 7));
        let c = tally.added_to(Counters::default());
        assert_eq!(
            c.bytes_read, 135,
            "stage and remote bytes are not file reads"
        );
        let mut merged = vec![EpochCounters {
            epoch: 2,
            records: 4,
            ..Default::default()
        }];
        merge_epochs(&mut merged, &e);
        assert_eq!(merged.len(), 3);
        assert_eq!((merged[1].records, merged[1].db_bytes_read), (4, 100));
    }
}
