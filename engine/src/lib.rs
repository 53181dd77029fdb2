//! The MPI read engine: P ranks read one LMDB together.
//!
//! * Ranks are grouped into nodes (`MPI_Comm_split_type(SHARED)`, or K
//!   consecutive ranks per virtual node). Only the first
//!   `readers_per_node` ranks of a node open the file, once each: on their
//!   own (independent reads, the default) or together on the readers'
//!   communicator (collective reads). On FUSE and network file systems
//!   the node's first rank opens it once more, for direct reads of the
//!   tree (see [`DirectIo::Auto`]). The communicators and the node's
//!   shared window are made once per process and kept between engines
//!   ([`topology`]).
//! * The record index is built across nodes (`index_build`) into each
//!   node's shared memory.
//! * Values are read in *rounds*: a round covers the next `prefetch`
//!   steps of every rank on the node. The node's readers plan the round's
//!   value spans into large coalesced runs and read them (positioned reads
//!   on a few threads, or collective MPI-IO; optionally staggered)
//!   straight into the node's shared window, one round after another, in
//!   the order the steps need them, publishing their progress there
//!   (`step_ready`). The next round's reads are queued while the ranks
//!   are served this one, into the other half of the window. A step is
//!   served as soon as its own runs are in; every rank gets pointers into
//!   the window. Nothing is copied after the read.
//! * Every rank can compute every other rank's batches (see
//!   [`lmdbio_core::schedule`]), so planning needs no messages; one
//!   reduction per round agrees on its length, and one at a step not yet
//!   known to be in everywhere agrees on how far the steps are in on every
//!   node (or on the error that stopped them); the steps up to there are
//!   served with no further message.
//!
//! `open`, `next_batch` and dropping the engine are collective over the
//! communicator given to `open`.

// Every public item says what it is: users read these docs, not the code.
#![deny(missing_docs)]

mod agree;
mod background;
mod batch;
mod counters;
mod data_file;
mod exchange;
mod index_build;
mod inline_pages;
mod launcher;
pub mod limits;
mod lock_file;
pub mod mpi_raw;
mod node_memory;
mod node_share;
mod node_stage;
mod open;
mod options;
mod reader_slot;
mod round;
mod round_planner;
mod same_inputs;
pub mod saved_index;
mod serve;
mod snapshot;
mod step_ready;
pub mod timeout;
pub mod topology;

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::Arc;

pub use batch::{Batch, BatchRecord};
pub use counters::{Counters, EpochCounters};
pub use data_file::DirectIo;
pub use open::job_start;
pub use options::{
    EngineOptions, DEFAULT_HINTS, DEFAULT_INLINE_PAGES_BYTES, DEFAULT_PREFETCH,
    MACHINE_READ_STREAMS,
};
pub use snapshot::SnapshotGuard;
pub use topology::{prepare, release_memory};

use agree::agree_ok;
use background::ReadFinished;
use counters::{EpochSource, ReadTally};
use data_file::DataFile;
use node_memory::NodeMemory;
use round::Round;
use topology::NodeTopology;

use crate::mpi_raw::{Comm, ReduceOp};
use lmdbio_core::cursor::{Cursor, DatabaseIdentity, JobCursor, CURSOR_BYTES};
use lmdbio_core::error::{Error, Result};
use lmdbio_core::order::EpochOrder;
use lmdbio_core::resume::JobSchedule;

/// One LMDB opened by every rank of a communicator ([`Engine::open`]),
/// serving each rank its batches ([`Engine::next_batch`]). Dropping it is
/// collective too.
pub struct Engine {
    // Dropped first: waits for reads into the window from `file`.
    pending: Option<Round>,
    file: Option<Arc<DataFile>>,
    /// The node topology and shared memory, taken from the kept ones at
    /// open and given back on drop (see [`topology`]); always present
    /// until then.
    parts: Option<NodeParts>,
    /// Collective reads run on a helper thread while the ranks work (MPI
    /// was initialised with MPI_THREAD_MULTIPLE); otherwise they complete
    /// when the round starts.
    threaded_reads: bool,
    schedule: JobSchedule,
    order: EpochOrder,
    database: DatabaseIdentity,
    /// The path given to open (errors name it on ranks without the file).
    path: PathBuf,
    options: EngineOptions,
    step: u64,
    /// The round being served.
    round: Option<Round>,
    batch: Vec<BatchRecord>,
    last_epoch: u64,
    /// The epoch limit left records out of a batch this rank was handed:
    /// no step cursor can resume right after it.
    cut_by_epoch_limit: bool,
    counters: Counters,
    /// What this rank was handed per epoch and the time it took (the
    /// bytes read per epoch are in `tally`).
    delivered_by_epoch: Vec<EpochCounters>,
    /// When the last step was delivered (at first: when open started), the
    /// start of the next step's time.
    step_clock: std::time::Instant,
    /// The epoch of this rank's first step: the index's reads count for it.
    first_epoch: u64,
    /// This reader's value reads, counted by its read threads.
    tally: Arc<ReadTally>,
    /// The latest round read started on a helper thread. The next one
    /// waits for it, so a reader's file sees one round's reads at a time.
    /// Two rounds read at once looked random to the kernel's readahead and
    /// their windows ran into each other's pages, so much of the file went
    /// into the page cache in single 4 KiB pages, with the kernel's work
    /// per page to match (see docs/design/read-rounds.md).
    previous_read: Option<Arc<ReadFinished>>,
    rounds_started: u64,
    /// Runs are planned in whole granules of this many bytes (the page
    /// size when the file is whole pages, else 1; see
    /// `DataFile::plan_granule`).
    plan_granule: u64,
    /// Steps a round takes at most (see `inline_pages::round_steps`).
    round_steps: usize,
    failed: Option<String>,
    /// Independent reads: this rank has served steps since its last world
    /// agreement, so it owes the others one before any other collective
    /// call (see `serve_from_own_node`). The same on every rank that has
    /// not failed: agreements fall on the same steps everywhere.
    owes_agreement: Cell<bool>,
    /// The last round's planning lists, for the next round to refill.
    spare_lists: Cell<round::RoundLists>,
    /// On readers: the check that the snapshot read is still intact.
    snapshot: Option<Arc<snapshot::SnapshotCheck>>,
    /// On node readers with a stage: the exchange with the other nodes'
    /// readers (see docs/design/node-stage.md).
    exchange: Option<exchange::Exchange>,
}

/// What the engine takes from the kept node topology (see [`topology`])
/// and gives back on drop: the node's communicators and its shared memory.
struct NodeParts {
    topology: NodeTopology,
    memory: NodeMemory,
}

/// The engine's parts; present from open until drop.
fn held(parts: &Option<NodeParts>) -> &NodeParts {
    parts
        .as_ref()
        .expect("an engine holds its node parts until dropped")
}

impl Engine {
    /// The engine's world: the kept duplicate of the caller's
    /// communicator that came with the node topology.
    fn world(&self) -> &Comm {
        held(&self.parts).topology.world()
    }

    /// Records in the database.
    pub fn records(&self) -> u64 {
        held(&self.parts).memory.len() as u64
    }

    /// This rank in the communicator given to `open`.
    pub fn rank(&self) -> usize {
        self.world().rank()
    }

    /// Ranks in the communicator given to `open`.
    pub fn ranks(&self) -> usize {
        self.world().size()
    }

    /// This rank within its node (real or virtual).
    pub fn node_rank(&self) -> usize {
        held(&self.parts).topology.node.rank()
    }

    /// Ranks on this rank's node.
    pub fn node_size(&self) -> usize {
        held(&self.parts).topology.node.size()
    }

    /// Whether this rank's snapshot is kept by a reader slot in liblmdb's
    /// lock file or only checked (see docs/reliability.md).
    pub fn snapshot_guard(&self) -> SnapshotGuard {
        self.snapshot
            .as_ref()
            .map_or(SnapshotGuard::NotReader, |s| s.guard())
    }

    /// This rank is one of its node's `readers_per_node` readers.
    pub fn is_reader(&self) -> bool {
        held(&self.parts).topology.readers.is_some()
    }

    /// The job's schedule (the same on every rank): which records each
    /// rank's steps hold.
    pub fn schedule(&self) -> &JobSchedule {
        &self.schedule
    }

    /// Sets [`EngineOptions::step_limit`] once the caller knows it (for
    /// example from [`Engine::schedule`]). Every rank must set the same
    /// limit before its next `next_batch`.
    pub fn set_step_limit(&mut self, limit: u64) {
        self.options.step_limit = Some(limit);
    }

    /// The step at which this engine stops (`next_batch` serves steps
    /// before it), from [`EngineOptions::step_limit`] and
    /// [`EngineOptions::epoch_limit`]; `None`: unbounded.
    pub fn step_limit(&self) -> Option<u64> {
        self.options.step_limit
    }

    /// This rank's position: everything needed to resume exactly here.
    /// Refused once the epoch limit has cut one of this rank's batches
    /// short (`Tail::Wrap`): a cursor names whole steps, and resuming
    /// after that batch would skip the records the limit left out of it.
    /// Jobs that stop at an epoch's end and resume later use `Tail::Short`.
    pub fn cursor(&self) -> Result<Cursor> {
        if self.cut_by_epoch_limit {
            return Err(Error::InvalidArgument(format!(
                "no cursor after step {}: the epoch limit ({}) cut a batch short, and resuming after it would skip the records left out (use the short tail for jobs that stop at an epoch's end and resume)",
                self.step,
                self.options.epoch_limit.unwrap_or_default()
            )));
        }
        let next = self
            .schedule
            .batch_slots(self.world().rank() as u64, self.step);
        let (epoch, position) = next
            .first()
            .map_or((self.last_epoch, 0), |s| (s.epoch, s.position));
        let base = self.schedule.base();
        Ok(Cursor {
            rank: self.world().rank() as u32,
            ranks: self.world().size() as u32,
            partition: base.partition,
            tail: base.tail,
            batch: base.batch,
            shuffle: self.order.shuffle(),
            step: self.step,
            epoch,
            position,
            database: self.database,
            after_repartition: !self.schedule.remainder().is_none(),
        })
    }

    /// The job's position: every rank's cursor and the remainder this job
    /// started with. Collective (an allgather); resume any rank count from
    /// it with [`EngineOptions::resume_job`].
    pub fn job_cursor(&self) -> Result<JobCursor> {
        self.settle_agreement()?;
        // Every rank learns if any rank has no cursor, before gathering.
        let mine = agree_ok(self.world(), self.cursor())?.encode();
        // Gathered as i64 words: a cursor is 13 of them.
        let words: Vec<i64> = mine
            .chunks(8)
            .map(|w| i64::from_le_bytes(w.try_into().unwrap_or_default()))
            .collect();
        let all = self.world().allgather_i64(&words)?;
        let bytes: Vec<u8> = all.iter().flat_map(|w| w.to_le_bytes()).collect();
        let cursors = bytes
            .chunks(CURSOR_BYTES)
            .map(Cursor::decode)
            .collect::<Result<Vec<_>>>()?;
        JobCursor::new(self.schedule.remainder().clone(), cursors)
    }

    /// The next step to be delivered.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// This rank's counters so far, its read threads' tally included.
    pub fn counters(&self) -> Counters {
        self.tally.added_to(self.counters)
    }

    /// This rank's counters per epoch so far, sorted by epoch, for every
    /// epoch it read or was handed records of (see [`EpochCounters`]).
    pub fn epoch_counters(&self) -> Vec<EpochCounters> {
        let mut epochs = self.tally.epochs();
        if self.counters.index_bytes_read > 0 {
            counters::epoch_entry(&mut epochs, self.first_epoch).db_bytes_read +=
                self.counters.index_bytes_read;
        }
        counters::merge_epochs(&mut epochs, &self.delivered_by_epoch);
        epochs
    }

    /// Counts `bytes` from `source` for `epoch` in [`Engine::epoch_counters`]
    /// (read threads count through their clone of `tally`).
    #[allow(dead_code)] // the stage's reads and exchanges count here
    pub(crate) fn count_epoch_bytes(&self, epoch: u64, source: EpochSource, bytes: u64) {
        self.tally.add_epoch_bytes(epoch, source, bytes);
    }

    /// The sums of the node's counters, on every rank of the node.
    /// Collective over every rank: one that served steps since the ranks
    /// last met meets them first.
    pub fn node_counters(&self) -> Result<Counters> {
        // A rank that failed a step waits in a world agreement for the
        // others; a node collective here would wait for it in turn.
        self.settle_agreement()?;
        let c = self.counters();
        let mut ints = [
            c.bytes_read,
            c.read_requests,
            c.file_opens,
            c.index_bytes_read,
            c.index_read_requests,
            c.bytes_delivered,
            c.records_delivered,
            (c.io_seconds * 1e6) as u64,
            (c.wait_seconds * 1e6) as u64,
            c.direct_read_requests,
            c.reader_slots,
            c.stage_bytes_read,
            c.stage_bytes_written,
            c.stage_warnings,
        ]
        .map(|v| v as i64);
        held(&self.parts)
            .topology
            .node
            .allreduce_i64(&mut ints, ReduceOp::Sum)?;
        Ok(Counters {
            bytes_read: ints[0] as u64,
            read_requests: ints[1] as u64,
            file_opens: ints[2] as u64,
            index_bytes_read: ints[3] as u64,
            index_read_requests: ints[4] as u64,
            bytes_delivered: ints[5] as u64,
            records_delivered: ints[6] as u64,
            rounds: c.rounds,
            step_agreements: c.step_agreements,
            io_seconds: ints[7] as f64 / 1e6,
            wait_seconds: ints[8] as f64 / 1e6,
            setup_made: c.setup_made,
            direct_read_requests: ints[9] as u64,
            reader_slots: ints[10] as u64,
            // Set on the node's first rank only: not summed.
            index_loaded: c.index_loaded,
            index_seconds: c.index_seconds,
            stage_bytes_read: ints[11] as u64,
            stage_bytes_written: ints[12] as u64,
            stage_warnings: ints[13] as u64,
        })
    }
}
