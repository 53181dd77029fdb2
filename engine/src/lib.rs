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
//!   [`lmdbio_core::schedule`]), so planning needs no messages; one reduction per
//!   round agrees on its length, and one at a step not yet known to be in
//!   everywhere agrees on how far the steps are in on every node (or on
//!   the error that stopped them); the steps up to there are served with
//!   no further message.
//!
//! `open`, `next_batch` and dropping the engine are collective over the
//! communicator given to `open`.

mod agree;
mod data_file;
mod index_build;
pub mod mpi_raw;
mod node_memory;
mod step_ready;
pub mod topology;

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use agree::{agree, agree_ok, agree_resource};
pub use data_file::DirectIo;
use data_file::{DataFile, RunsRead, WindowRange};
use node_memory::NodeMemory;
use step_ready::{Progress, ReadSchedule, StepReads};
use topology::NodeTopology;
pub use topology::{prepare, release_memory};

use crate::mpi_raw::{Comm, RawComm, ReduceOp, ThreadLevel};
use lmdbio_core::cursor::{Cursor, DatabaseIdentity, JobCursor, CURSOR_BYTES};
use lmdbio_core::database::data_file_path;
use lmdbio_core::error::{Error, Result};
use lmdbio_core::format::PAGEHDRSZ;
use lmdbio_core::order::{EpochOrder, Shuffle};
use lmdbio_core::plan::{CoalesceOptions, ReadPlan, ReadRun};
use lmdbio_core::resume::{self, JobSchedule};
use lmdbio_core::schedule::{Partition, Schedule, Slot, Tail};
use lmdbio_core::values::overflow_header_problem;

/// How the engine reads. Defaults suit a bulk-loaded image database.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Named database to read (`None`: the main one).
    pub subdb: Option<String>,
    /// Records per batch per rank.
    pub batch: usize,
    pub partition: Partition,
    pub tail: Tail,
    /// Group K consecutive ranks into a virtual node instead of grouping by
    /// shared memory (to exercise multi-node behaviour on one machine).
    pub ranks_per_node: Option<usize>,
    /// Ranks per node that open the file and read (at least 1).
    pub readers_per_node: usize,
    pub coalesce: CoalesceOptions,
    /// Bytes of node-shared memory for values. Every round must fit: a round
    /// holds the values of `prefetch` steps (fewer if they do not fit, but
    /// at least one) of every rank on the node.
    pub window_bytes: usize,
    /// Steps read ahead in one round, at most: a round also has to fit half
    /// the window (all of it without overlap), which bounds it first for
    /// large records.
    pub prefetch: usize,
    /// At most this many readers read at once (staggering); `None`: all.
    pub stagger: Option<usize>,
    /// Collective reads: the readers open the file together and read with
    /// `MPI_File_read_at_all`, so MPI-IO may aggregate across nodes (with
    /// hints that enable collective buffering). Default: independent reads,
    /// each reader on a file of its own read on `read_streams` threads,
    /// which skips the collective open and every wait on other readers;
    /// lmdbio's runs are already large and contiguous, which is when
    /// aggregation has nothing to add (measured in docs/PERFORMANCE.md).
    pub collective: bool,
    /// Threads each reader reads with (independent reads): requests in
    /// flight at once per reader. `None`: [`MACHINE_READ_STREAMS`] shared
    /// among the readers of the machine, at least one each.
    pub read_streams: Option<usize>,
    /// Whether independent reads go around the page cache (see
    /// [`DirectIo`]; collective reads leave it to MPI-IO).
    pub direct_io: DirectIo,
    /// MPI-IO hints passed at open, on top of [`DEFAULT_HINTS`] (a key
    /// given here replaces the default).
    pub hints: Vec<(String, String)>,
    /// Shuffle every epoch with this seed (see [`lmdbio_core::order`]).
    pub shuffle_seed: Option<u64>,
    /// Records per shuffled chunk; `None`: about 4 MiB of values.
    pub shuffle_chunk: Option<u64>,
    /// Chunks per shuffling window.
    pub shuffle_window_chunks: u64,
    /// Continue from this rank's cursor, taken by a job with the same rank
    /// count, order options and database.
    pub resume: Option<Cursor>,
    /// Continue from a job cursor ([`Engine::job_cursor`]) taken with the
    /// same order options and database: exactly on the same rank count, or
    /// on another one when `repartition` is set (see [`lmdbio_core::resume`]).
    pub resume_job: Option<JobCursor>,
    /// Allow `resume_job` from a job of another rank count: the records of
    /// the current epoch nobody was handed yet are split among this job's
    /// ranks, then normal epochs follow.
    pub repartition: bool,
    /// The caller will take at most this many steps: nothing past them is
    /// read ahead, and asking for more is an error. `None`: unbounded.
    pub step_limit: Option<u64>,
    /// The job reads epochs before this one and stops: records of later
    /// epochs are neither read nor delivered (under `Tail::Wrap` the batch
    /// that would reach into the next epoch comes short), and the step
    /// limit becomes the first step with nothing left of those epochs on
    /// any rank ([`Engine::step_limit`]). Under `Tail::Wrap` a job of
    /// whole epochs otherwise reads up to a batch per rank of the next
    /// epoch; on many ranks that is a large part of an epoch. Epochs count
    /// from the job's first, as in [`BatchRecord::epoch`]. `None`: unbounded.
    pub epoch_limit: Option<u64>,
    /// Read the next round into the other half of the window while the
    /// ranks work on the current one, on helper threads (collective reads
    /// only under `MPI_THREAD_MULTIPLE`; without it they are read when the
    /// round starts). A reader's reads of the next round start once its
    /// reads of the current one are done.
    pub overlap: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            subdb: None,
            batch: 64,
            partition: Partition::Contiguous,
            tail: Tail::Wrap,
            ranks_per_node: None,
            readers_per_node: 1,
            coalesce: CoalesceOptions::default(),
            window_bytes: 256 << 20,
            prefetch: DEFAULT_PREFETCH,
            stagger: None,
            collective: false,
            read_streams: None,
            direct_io: DirectIo::Auto,
            hints: Vec::new(),
            overlap: true,
            step_limit: None,
            epoch_limit: None,
            shuffle_seed: None,
            shuffle_chunk: None,
            shuffle_window_chunks: 16,
            resume: None,
            resume_job: None,
            repartition: false,
        }
    }
}

/// Per-rank counters; [`Engine::node_counters`] sums a node's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    pub bytes_read: u64,
    pub read_requests: u64,
    pub file_opens: u64,
    pub index_bytes_read: u64,
    pub index_read_requests: u64,
    pub bytes_delivered: u64,
    pub records_delivered: u64,
    pub rounds: u64,
    /// World agreements the steps were served under. Independent reads:
    /// one where each round starts (nodes meet there; steps in between
    /// wait only for their own node's bytes). Collective reads: steps that
    /// ended in an agreement of their own; the others were served under an
    /// earlier step's agreement, their bytes already in on every node.
    pub step_agreements: u64,
    pub io_seconds: f64,
    pub wait_seconds: f64,
    /// What opening had to make with blocking MPI calls: 1 for the node
    /// communicators, 1 for the shared window; 0 when both were kept from
    /// an earlier engine or made by [`prepare`].
    pub setup_made: u64,
    /// Of `read_requests`, those read around the page cache (direct I/O).
    pub direct_read_requests: u64,
}

/// What this reader's reads of values did, counted by the read threads
/// as each read ends: before the read's last run is published, so a rank
/// that has seen the data also sees it counted, even in a round the job
/// stops in the middle of.
#[derive(Default)]
struct ReadTally {
    bytes: std::sync::atomic::AtomicU64,
    requests: std::sync::atomic::AtomicU64,
    direct_requests: std::sync::atomic::AtomicU64,
}

impl ReadTally {
    fn add(&self, bytes: u64, n: RunsRead) {
        use std::sync::atomic::Ordering::Relaxed;
        self.bytes.fetch_add(bytes, Relaxed);
        self.requests.fetch_add(n.requests, Relaxed);
        self.direct_requests.fetch_add(n.direct_requests, Relaxed);
    }

    /// `c` with these reads added.
    fn added_to(&self, mut c: Counters) -> Counters {
        use std::sync::atomic::Ordering::Relaxed;
        c.bytes_read += self.bytes.load(Relaxed);
        c.read_requests += self.requests.load(Relaxed);
        c.direct_read_requests += self.direct_requests.load(Relaxed);
        c
    }
}

/// One record of a batch: where its key and value are, which record it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRecord {
    pub ordinal: u64,
    pub epoch: u64,
    key: (usize, usize),
    value: (usize, usize),
}

/// The records of one step, borrowed from the node's shared memory until
/// the next call to [`Engine::next_batch`].
pub struct Batch<'e> {
    engine: &'e Engine,
    pub step: u64,
}

impl<'e> Batch<'e> {
    pub fn len(&self) -> usize {
        self.engine.batch.len()
    }

    pub fn is_empty(&self) -> bool {
        self.engine.batch.is_empty()
    }

    pub fn records(&self) -> &'e [BatchRecord] {
        &self.engine.batch
    }

    pub fn key(&self, i: usize) -> &'e [u8] {
        let (at, len) = self.engine.batch[i].key;
        &held(&self.engine.parts).memory.keys()[at..at + len]
    }

    pub fn value(&self, i: usize) -> &'e [u8] {
        let (at, len) = self.engine.batch[i].value;
        // SAFETY: this step's bytes were all read (the readers' progress
        // words said so) and agreed on, and nobody writes them before the
        // round's area is read into again, which takes a collective step
        // that needs `&mut Engine` and so ends this borrow. Other parts of
        // the area may be written meanwhile.
        unsafe { held(&self.engine.parts).memory.data_range(at, len) }
    }

    /// Epoch of the batch's first record (ranks' epochs can differ by one
    /// when shares differ in size).
    pub fn epoch(&self) -> u64 {
        self.engine
            .batch
            .first()
            .map_or(self.engine.last_epoch, |r| r.epoch)
    }
}

/// Whose a planned span is.
#[derive(Debug, Clone, Copy)]
struct SpanOwner {
    /// Step offset within the round.
    step: usize,
    /// Node member (node rank).
    member: usize,
}

/// A round's records and read plan.
struct PlannedRound {
    steps: u64,
    owners: Vec<SpanOwner>,
    plan: ReadPlan,
}

/// A round: its records placed in the window and its reads started (or
/// done). Its steps are served as their own bytes come in (see
/// [`step_ready`]).
struct Round {
    first_step: u64,
    steps: u64,
    /// Names the round in the readers' progress words (never 0, the value
    /// the words start from).
    tag: u32,
    /// Which of the window's areas (and progress words) it uses.
    area: usize,
    /// Window offset and length of each record's span, by (step offset,
    /// node member), in schedule order.
    placements: Vec<Vec<Vec<(u64, u64)>>>,
    /// For each of the node's readers and each step: how many of the
    /// reader's runs must be in before the step is served.
    needs: Vec<Vec<usize>>,
    /// Steps before this one are agreed served (all their bytes in on
    /// every node); they need no agreement of their own.
    agreed_end: u64,
    /// Steps before this one have had this rank's overflow headers
    /// checked.
    checked_end: u64,
    /// This reader's read, while it runs on a helper thread.
    read: Option<InFlight>,
    /// A failure of this rank's part of the round, reported at the next
    /// step's agreement.
    error: Option<Error>,
}

impl Round {
    /// How many runs each reader must have complete before step `t` (of
    /// this round) is served.
    fn needs_of(&self, t: u64) -> Vec<usize> {
        let offset = (t - self.first_step) as usize;
        self.needs.iter().map(|n| n[offset]).collect()
    }
}

/// This reader's outstanding read of a round.
enum InFlight {
    /// A read that completed when it was started.
    Done(Option<Result<RunsRead>>),
    /// Reads on a helper thread (independent reads, or a blocking
    /// collective read); joined on drop, so the window it writes outlives
    /// it.
    Thread(Option<JoinHandle<Result<RunsRead>>>),
}

impl InFlight {
    fn wait(mut self) -> Result<RunsRead> {
        match &mut self {
            InFlight::Done(result) => result.take().unwrap_or(Ok(RunsRead::default())),
            InFlight::Thread(handle) => match handle.take().map(JoinHandle::join) {
                Some(Ok(result)) => result,
                Some(Err(_)) => Err(Error::Internal("the read thread panicked".into())),
                None => Ok(RunsRead::default()),
            },
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let InFlight::Thread(handle) = self {
            if let Some(h) = handle.take() {
                let _ = h.join();
            }
        }
    }
}

/// Counts reads running on helper threads, so that `MPI_Finalize` (whose
/// start runs [`topology::release_all`]) waits for them: a job may
/// finalise MPI while an engine still reads ahead, and no MPI call may be
/// running when MPI goes away.
static BACKGROUND_READS: (std::sync::Mutex<usize>, std::sync::Condvar) =
    (std::sync::Mutex::new(0), std::sync::Condvar::new());

/// One read on a helper thread, counted while it lives.
struct BackgroundRead;

impl BackgroundRead {
    fn start() -> BackgroundRead {
        *BACKGROUND_READS.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        BackgroundRead
    }
}

impl Drop for BackgroundRead {
    fn drop(&mut self) {
        let mut n = BACKGROUND_READS.0.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        BACKGROUND_READS.1.notify_all();
    }
}

/// Waits until no helper thread is reading.
fn wait_for_background_reads() {
    let (count, done) = &BACKGROUND_READS;
    let mut n = count.lock().unwrap_or_else(|p| p.into_inner());
    while *n > 0 {
        n = done.wait(n).unwrap_or_else(|p| p.into_inner());
    }
}

/// Set once a round's read has finished, failed or unwound; the reader's
/// next round reads only after it (see [`Engine::previous_read`]).
#[derive(Default)]
struct ReadFinished {
    finished: std::sync::Mutex<bool>,
    signal: std::sync::Condvar,
}

impl ReadFinished {
    fn wait(&self) {
        let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        while !*finished {
            finished = self
                .signal
                .wait(finished)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Marks its read finished when dropped, however the read thread ends.
struct FinishOnDrop(Arc<ReadFinished>);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        *self.0.finished.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.0.signal.notify_all();
    }
}

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
    /// This reader's value reads, counted by its read threads.
    tally: Arc<ReadTally>,
    /// The latest round read started on a helper thread. The next one
    /// waits for it, so a reader's file sees one round's reads at a time.
    /// Two rounds read at once looked random to the kernel's readahead and
    /// their windows ran into each other's pages, so much of the file went
    /// into the page cache in single 4 KiB pages, with the kernel's work
    /// per page to match. Queued one behind the other (and with the tree's
    /// pages dropped once the index is built), lmdbio went from 0.72–0.94
    /// to 0.89–1.03 of the storage limit with one reader per machine, and
    /// was higher or equal at every other point, on less CPU
    /// (docs/PERFORMANCE.md, twelfth round).
    previous_read: Option<Arc<ReadFinished>>,
    rounds_started: u64,
    /// Runs are planned in whole granules of this many bytes (the page
    /// size when the file is whole pages, else 1; see
    /// `DataFile::plan_granule`).
    plan_granule: u64,
    failed: Option<String>,
    /// Independent reads: this rank has served steps since its last world
    /// agreement, so it owes the others one before any other collective
    /// call (see `serve_from_own_node`). The same on every rank that has
    /// not failed: agreements fall on the same steps everywhere.
    owes_agreement: Cell<bool>,
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

/// What opening produced besides the topology.
struct Opened {
    window_made: bool,
    file: Option<Arc<DataFile>>,
    memory: NodeMemory,
    database: DatabaseIdentity,
    index_io: lmdbio_core::source::IoSnapshot,
    schedule: JobSchedule,
    order: EpochOrder,
    step: u64,
    plan_granule: u64,
}

/// The schedule, epoch order and step to start from, on this rank (the
/// ranks agree on it when the index is published).
fn start_point(
    world: &Comm,
    options: &EngineOptions,
    records: u64,
    value_bytes: u64,
    database: DatabaseIdentity,
) -> Result<(JobSchedule, EpochOrder, u64)> {
    let schedule = Schedule::new(
        records,
        world.size() as u64,
        options.batch as u64,
        options.partition,
        options.tail,
    );
    let shuffle = options.shuffle_seed.map(|seed| {
        let sized = Shuffle::with_default_sizes(seed, records, value_bytes);
        Shuffle {
            chunk: options.shuffle_chunk.unwrap_or(sized.chunk),
            window_chunks: options.shuffle_window_chunks,
            ..sized
        }
    });
    let (schedule, step) = resume_point(options, schedule, shuffle, database, world.rank())?;
    Ok((schedule, EpochOrder::new(records, shuffle), step))
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Reads into the window finish before it is given back.
        self.pending = None;
        self.round = None;
        if self.parts.is_none() {
            return;
        }
        if !crate::mpi_raw::is_initialized() {
            // MPI is gone (the engine outlived MPI_Finalize): no MPI call
            // may be made, and the handles died with it.
            std::mem::forget(self.parts.take());
            return;
        }
        // A rank that failed a step may be waiting for this one at a world
        // agreement: this rank learns nothing it could still act on, but
        // must not leave it waiting.
        let _ = self.settle_agreement();
        let Some(NodeParts {
            mut topology,
            memory,
        }) = self.parts.take()
        else {
            return;
        };
        let window = memory.into_window();
        // The node's ranks may still be reading their last batch: the
        // window is kept (memory and all, see topology) once all of them
        // are done with it, so that `release_memory` may free it at any
        // time. If the barrier fails the node is in trouble; keep nothing.
        if topology.node.barrier().is_ok() {
            topology.window = Some(window);
            topology::give_back(topology);
        } else {
            std::mem::forget(window);
            std::mem::forget(topology);
        }
    }
}

impl Engine {
    /// Opens `path` (database directory or data file) on every rank of
    /// `comm`. Collective; any rank's failure fails every rank.
    pub fn open(comm: RawComm, path: &Path, mut options: EngineOptions) -> Result<Engine> {
        let caller = Comm::caller(comm)?;
        let (mut topology, topology_made) =
            topology::take(&caller, &options, check_options(&options))?;
        let opened = match Engine::open_with(&mut topology, path, &options) {
            Ok(opened) => opened,
            Err(e) => {
                // Every rank failed at the same agreement, before anyone
                // read the window.
                topology::give_back(topology);
                return Err(e);
            }
        };
        let threaded_reads = options.overlap
            && options.collective
            && ThreadLevel::current() == ThreadLevel::Multiple;
        let io = opened.index_io;
        if let Some(epochs) = options.epoch_limit {
            let steps = opened.schedule.steps_for_epochs(epochs);
            options.step_limit = Some(options.step_limit.map_or(steps, |s| s.min(steps)));
        }
        Ok(Engine {
            pending: None,
            threaded_reads,
            counters: Counters {
                file_opens: opened.file.as_ref().map_or(0, |f| f.opens()),
                index_bytes_read: io.bytes_read,
                index_read_requests: io.read_requests,
                bytes_read: io.bytes_read,
                read_requests: io.read_requests,
                setup_made: u64::from(topology_made) + u64::from(opened.window_made),
                ..Default::default()
            },
            file: opened.file,
            parts: Some(NodeParts {
                topology,
                memory: opened.memory,
            }),
            schedule: opened.schedule,
            order: opened.order,
            database: opened.database,
            path: path.to_owned(),
            options,
            step: opened.step,
            round: None,
            batch: Vec::new(),
            last_epoch: 0,
            cut_by_epoch_limit: false,
            tally: Arc::default(),
            previous_read: None,
            rounds_started: 0,
            plan_granule: opened.plan_granule,
            failed: None,
            owes_agreement: Cell::new(false),
        })
    }

    /// The collective steps of opening on a taken topology: the file on the
    /// readers, the index in the node's memory, and the starting point. On
    /// failure the window is back in `topology`.
    ///
    /// Two agreements over the world with independent reads (the file and
    /// the tree scanned; the index published with the starting point), and
    /// a third when the window has to be made, where there were seven:
    /// each one before the first value is read cost 1-2 ms at eight ranks
    /// on two cores (docs/PERFORMANCE.md, fourteenth round).
    fn open_with(
        topology: &mut NodeTopology,
        path: &Path,
        options: &EngineOptions,
    ) -> Result<Opened> {
        let (file, opened) = match Engine::open_file(topology, path, options) {
            Ok(file) => (file.map(Arc::new), Ok(())),
            Err(e) => (None, Err(e)),
        };
        let scanned = index_build::scan(
            topology.world(),
            topology.masters.as_ref(),
            opened.map(|()| file.as_deref()),
            options.subdb.as_deref(),
        )?;
        // A record's run may take up to a granule more on each side.
        let plan_granule = scanned.plan_granule;
        let widest = match plan_granule {
            1 => scanned.largest_span,
            g => scanned.largest_span.saturating_add(2 * g),
        };
        let data_len = window_size(options, topology.node.size(), widest);
        let (records, key_bytes) = (scanned.records, scanned.key_bytes);
        let words = progress_words(topology.node.size());
        let (_, need) = node_memory::layout(words, records, key_bytes, data_len)?;
        let window_made = topology.ensure_window(need)?;
        let Some(window) = topology.window.take() else {
            return Err(Error::Internal("no node window after making one".into()));
        };
        // The window is large enough (ensured above), so this cannot fail
        // on one rank only.
        let mut memory = NodeMemory::new(window, words, records, key_bytes, data_len)?;
        if let Some(file) = file.as_deref() {
            // Direct reads land in the window only where prepare got it
            // huge pages, else in staging buffers (see
            // set_window_in_huge_pages).
            file.set_window_in_huge_pages(memory.in_huge_pages());
        }
        if topology.node.rank() == 0 {
            // Published with the index below, before any rank waits on them.
            memory.reset_progress();
        }
        let database = DatabaseIdentity {
            entries: records as u64,
            txnid: scanned.txnid,
            page_size: scanned.page_size,
        };
        let world = topology.world();
        let start = agree::local(|| {
            start_point(
                world,
                options,
                records as u64,
                scanned.value_bytes,
                database,
            )
        });
        let masters = topology.masters.as_ref();
        match index_build::publish(world, masters, &mut memory, scanned, start) {
            Ok((index_io, (schedule, order, step))) => Ok(Opened {
                window_made,
                file,
                memory,
                database,
                index_io,
                schedule,
                order,
                step,
                plan_granule,
            }),
            Err(e) => {
                topology.window = Some(memory.into_window());
                Err(e)
            }
        }
    }

    /// Opens the data file on the readers (`None` elsewhere).
    ///
    /// Independent reads open a file of the reader's own, a step of its
    /// own whose failure the tree scan's agreement carries to every rank.
    /// Collective reads agree on the path first, so that no reader enters
    /// `MPI_File_open` alone, and then on the file.
    fn open_file(
        topology: &NodeTopology,
        path: &Path,
        options: &EngineOptions,
    ) -> Result<Option<DataFile>> {
        if !options.collective {
            return match &topology.readers {
                Some(readers) => {
                    agree::local(|| DataFile::open(readers, &data_file_path(path)?, options))
                        .map(Some)
                }
                None => Ok(None),
            };
        }
        let world = topology.world();
        let resolved = match &topology.readers {
            Some(_) => data_file_path(path).map(Some),
            None => Ok(None),
        };
        let resolved = agree_ok(world, resolved)?;
        let file = match (&topology.readers, resolved) {
            (Some(r), Some(p)) => Some(DataFile::open(r, &p, options)),
            _ => None,
        };
        agree_resource(world, file.transpose())
    }

    /// The engine's world: the kept duplicate of the caller's
    /// communicator that came with the node topology.
    fn world(&self) -> &Comm {
        held(&self.parts).topology.world()
    }

    /// Records in the database.
    pub fn records(&self) -> u64 {
        held(&self.parts).memory.len() as u64
    }

    pub fn rank(&self) -> usize {
        self.world().rank()
    }

    pub fn ranks(&self) -> usize {
        self.world().size()
    }

    pub fn node_rank(&self) -> usize {
        held(&self.parts).topology.node.rank()
    }

    pub fn node_size(&self) -> usize {
        held(&self.parts).topology.node.size()
    }

    pub fn is_reader(&self) -> bool {
        held(&self.parts).topology.readers.is_some()
    }

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

    pub fn counters(&self) -> Counters {
        self.tally.added_to(self.counters)
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
        })
    }

    /// This rank's next batch. Collective over the communicator: every rank
    /// calls it once per step. The previous batch's slices become invalid.
    pub fn next_batch(&mut self) -> Result<Batch<'_>> {
        if let Some(message) = &self.failed {
            return Err(Error::InvalidArgument(format!(
                "the engine failed earlier and cannot continue: {message}"
            )));
        }
        match self.advance() {
            Ok(()) => Ok(Batch {
                engine: self,
                step: self.step - 1,
            }),
            Err(e) => {
                self.failed = Some(e.to_string());
                Err(e)
            }
        }
    }

    fn advance(&mut self) -> Result<()> {
        let t = self.step;
        if self.options.step_limit.is_some_and(|limit| t >= limit) {
            return Err(Error::InvalidArgument(format!(
                "step {t} is past the step limit given at open"
            )));
        }
        let loaded = self
            .round
            .as_ref()
            .is_some_and(|r| t < r.first_step + r.steps);
        if !loaded {
            self.load_round(t)?;
        }
        let agreed = self.round.as_ref().is_some_and(|r| t < r.agreed_end);
        let delivered = if agreed {
            // Every rank saw this step's bytes in, and checked its own
            // headers, before the agreement that covered it.
            let delivered = self.place_batch(t);
            held(&self.parts).memory.sync()?;
            delivered
        } else if self.options.collective {
            self.agree_on_steps_from(t)?
        } else {
            self.serve_from_own_node(t)?
        };
        if let Some(first) = self.batch.first() {
            self.last_epoch = first.epoch;
        }
        self.cut_by_epoch_limit |= delivered.cut;
        self.counters.records_delivered += self.batch.len() as u64;
        self.counters.bytes_delivered += delivered.bytes;
        self.step += 1;
        // The job's first round starts the read after it once its first
        // step is served, so that step does not share the storage (later
        // rounds start the next read as they begin: load_round).
        let next = self
            .round
            .as_ref()
            .map_or(t + 1, |r| r.first_step + r.steps);
        if self.pending.is_none() && !self.options.collective && self.reads_ahead_to(next) {
            self.pending = Some(self.start_round(next)?);
        }
        if self.options.step_limit == Some(self.step) {
            // The job's last step: no round starts after it, so the ranks
            // meet here, and a failure anywhere in the last round reaches
            // every rank before any of them leaves.
            let waited = Instant::now();
            self.settle_agreement()?;
            self.counters.wait_seconds += waited.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// Independent reads: serves step `t` as soon as this node's bytes for
    /// it are in and this rank's overflow headers check out, without
    /// waiting for other nodes. Nodes meet at the next world agreement
    /// instead: the next round's start (`start_round`), the job's last
    /// step, or a collective call (job cursor, node counters, close).
    ///
    /// Why: an agreement per step made every rank wait for the slowest
    /// node at every step, polling MPI all the while, and with several
    /// nodes' ranks on few cores the polling slowed the readers' storage.
    /// Meeting only where rounds start took lmdbio from 0.74-0.81 to
    /// 0.89-0.92 of the storage limit at four and eight one-rank nodes in
    /// paired runs here (docs/PERFORMANCE.md, thirteenth round).
    ///
    /// A rank that cannot serve `t` (its node's read failed, or one of its
    /// records is damaged) joins that next agreement at once and waits
    /// there, so every rank learns of the failure when it arrives and none
    /// waits for a rank that gave up. Rounds still start with a world
    /// agreement, so a window area is reused only once every rank has left
    /// the round that used it.
    fn serve_from_own_node(&mut self, t: u64) -> Result<PlacedBatch> {
        let (reads_in, delivered) = self.wait_and_place(t);
        let served = reads_in.and_then(|in_here| {
            if in_here {
                agree::local(|| self.check_overflow_headers(&self.batch))?;
                held(&self.parts).memory.sync()?;
            }
            Ok(in_here)
        });
        let failure = match served {
            Ok(true) => {
                self.owes_agreement.set(true);
                return Ok(delivered);
            }
            // Another reader of the node failed: it reports why.
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        // Not served: the meeting fails on every rank.
        match self.meet(failure, i64::MAX, false) {
            Err(e) => Err(e),
            Ok(_) => Err(Error::Internal(format!(
                "step {t} was not served, yet the ranks agreed it was"
            ))),
        }
    }

    /// Joins the world agreement this rank owes, if it owes one.
    fn settle_agreement(&self) -> Result<()> {
        if self.owes_agreement.get() {
            self.meet(Ok(()), i64::MAX, true)?;
        }
        Ok(())
    }

    /// The world agreement the ranks meet at, wherever they meet (a
    /// round's start, the job's last step, a collective call, a step a
    /// rank could not serve, and with collective reads every step): every
    /// kind has this one shape, so a rank that failed a step meets the
    /// others at whichever they reach first.
    /// Returns `local`'s value and the smallest `value` (ranks with no say
    /// pass `i64::MAX`). `served` is false on a rank with nothing to serve
    /// because another reader of its node failed (that reader reports why).
    fn meet<T>(&self, local: Result<T>, value: i64, served: bool) -> Result<(T, i64)> {
        let mut mins = [value, i64::from(served)];
        self.owes_agreement.set(false);
        let agreed = agree(self.world(), local, &mut mins)?;
        if mins[1] == 0 {
            return Err(Error::Internal(
                "a node's reader failed and no rank reported why".into(),
            ));
        }
        Ok((agreed, mins[0]))
    }

    /// Collective reads (independent ones use `serve_from_own_node`): waits
    /// until step `t`'s bytes are in, places this rank's batch, and agrees
    /// with every rank on how far the steps are served: `t`, and the later
    /// steps of the round that every node already has in (their ranks'
    /// overflow headers checked), which then need no agreement of their
    /// own. A reduction costs each rank about a millisecond
    /// with eight ranks on two cores (docs/bench/polite-wait), and a step
    /// already in everywhere has nothing to agree on.
    fn agree_on_steps_from(&mut self, t: u64) -> Result<PlacedBatch> {
        let (reads_in, delivered) = self.wait_and_place(t);
        // The step's values are checked only once they are in.
        let served_to = reads_in.and_then(|ready| {
            if !ready {
                return Ok(None);
            }
            let checked_end = self.round.as_ref().map_or(t, |r| r.checked_end);
            if t >= checked_end {
                agree::local(|| self.check_overflow_headers(&self.batch))?;
            }
            agree::local(|| Ok(Some(self.steps_in_after(t))))
        });
        let waited = Instant::now();
        // Every rank says whether its node's bytes for the step are in (a
        // rank whose node's reader failed has nothing to serve, and the
        // reader reports why in the same agreement) and up to which step
        // they are in with no wait.
        let (ready, end) = match served_to {
            Ok(Some(end)) => (true, end as i64),
            _ => (false, 0),
        };
        let published = served_to.and_then(|_| held(&self.parts).memory.sync());
        self.counters.step_agreements += 1;
        let ((), agreed_end) = self.meet(published, end, ready)?;
        held(&self.parts).memory.sync()?;
        self.counters.wait_seconds += waited.elapsed().as_secs_f64();
        if let Some(round) = self.round.as_mut() {
            round.agreed_end = (agreed_end as u64).max(t + 1);
        }
        Ok(delivered)
    }

    /// The end of the steps after `t` of the loaded round whose bytes are
    /// in on this node now and whose overflow headers in this rank's
    /// records check out. A step whose headers do not ends them: it fails
    /// at its own agreement, on every rank at once.
    fn steps_in_after(&mut self, t: u64) -> u64 {
        let round = self.round.as_ref().expect("round loaded before serving");
        let end = round.first_step + round.steps;
        let words = self.progress_words_of(round);
        let mut records = Vec::new();
        let mut s = t + 1;
        while s < end {
            if !step_ready::step_is_in(&words, round.tag, &round.needs_of(s)) {
                break;
            }
            if s >= round.checked_end {
                records.clear();
                self.own_records(s, &mut records);
                if self.check_overflow_headers(&records).is_err() {
                    break;
                }
            }
            s += 1;
        }
        let round = self.round.as_mut().expect("round loaded before serving");
        round.checked_end = round.checked_end.max(s);
        s
    }

    /// Waits until this node's bytes for step `t` are in (see
    /// `wait_for_step`; the wait counts as I/O time) and lays out this
    /// rank's batch.
    fn wait_and_place(&mut self, t: u64) -> (Result<bool>, PlacedBatch) {
        let io_start = Instant::now();
        let reads_in = self.wait_for_step(t);
        self.counters.io_seconds += io_start.elapsed().as_secs_f64();
        (reads_in, self.place_batch(t))
    }

    /// Lays out this rank's batch of step `t` of the loaded round (offsets
    /// only; no value byte is touched).
    fn place_batch(&mut self, t: u64) -> PlacedBatch {
        let mut batch = std::mem::take(&mut self.batch);
        let placed = self.own_records(t, &mut batch);
        self.batch = batch;
        placed
    }

    /// This rank's records of step `t` of the loaded round, with their
    /// places in the window, written over `batch`.
    fn own_records(&self, t: u64, batch: &mut Vec<BatchRecord>) -> PlacedBatch {
        let round = self.round.as_ref().expect("round loaded before placing");
        let me = held(&self.parts).topology.node.rank();
        let offset = (t - round.first_step) as usize;
        let places = &round.placements[offset][me];
        batch.clear();
        let entries = held(&self.parts).memory.entries();
        let mut n = 0;
        let mut bytes = 0u64;
        let world_rank = self.world().rank() as u64;
        let order = &self.order;
        let cut = for_each_wanted_slot(
            &self.schedule,
            self.options.epoch_limit,
            world_rank,
            t,
            |slot| {
                let ordinal = order.ordinal(slot.epoch, slot.position);
                let e = &entries[ordinal as usize];
                let (at, _) = places[n];
                let header = if e.is_overflow() { PAGEHDRSZ as u64 } else { 0 };
                batch.push(BatchRecord {
                    ordinal,
                    epoch: slot.epoch,
                    key: (e.key_start as usize, e.key_len as usize),
                    value: ((at + header) as usize, e.value_len as usize),
                });
                bytes += e.value_len as u64;
                n += 1;
            },
        );
        PlacedBatch { cut, bytes }
    }

    /// Waits until the node's bytes for step `t` of the loaded round are
    /// in: `Ok(true)`; `Ok(false)` when another reader of the node failed
    /// first (it reports why); this rank's own failure as `Err`.
    fn wait_for_step(&mut self, t: u64) -> Result<bool> {
        let me = held(&self.parts).topology.node.rank();
        if let Some(e) = self.round.as_mut().and_then(|r| r.error.take()) {
            return Err(e);
        }
        let round = self.round.as_ref().expect("round loaded before waiting");
        let words = self.progress_words_of(round);
        match step_ready::wait_for_step(&words, round.tag, &round.needs_of(t)) {
            StepReads::Ready => Ok(true),
            StepReads::Failed { reader } if reader == me => {
                let round = self.round.as_mut().expect("round loaded before waiting");
                let why = round.read.take().map(InFlight::wait);
                Err(match why {
                    Some(Err(e)) => e,
                    _ => Error::Internal("this reader's read failed without an error".into()),
                })
            }
            StepReads::Failed { .. } => Ok(false),
        }
    }

    /// Readers per node (the first node ranks).
    fn node_readers(&self) -> usize {
        self.options
            .readers_per_node
            .min(held(&self.parts).topology.node.size())
            .max(1)
    }

    /// Whether the round starting at step `next` is read ahead.
    fn reads_ahead_to(&self, next: u64) -> bool {
        self.options.overlap && self.options.step_limit.is_none_or(|limit| next < limit)
    }

    /// Spans of every node member's records for steps `[first, first+k)`,
    /// and who owns each: `(step offset, member)` per span.
    fn round_spans(&self, first: u64, k: u64) -> (Vec<(u64, u64)>, Vec<SpanOwner>) {
        let entries = held(&self.parts).memory.entries();
        let mut spans = Vec::new();
        let mut owners = Vec::new();
        for s in 0..k {
            for (m, &rank) in held(&self.parts).topology.members.iter().enumerate() {
                for_each_wanted_slot(
                    &self.schedule,
                    self.options.epoch_limit,
                    rank,
                    first + s,
                    |slot| {
                        let ordinal = self.order.ordinal(slot.epoch, slot.position) as usize;
                        spans.push(entries[ordinal].span());
                        owners.push(SpanOwner {
                            step: s as usize,
                            member: m,
                        });
                    },
                );
            }
        }
        (spans, owners)
    }

    /// Spans and plan of the round of `k` steps starting at `first`.
    fn plan_round(&self, first: u64, k: u64) -> PlannedRound {
        let (spans, owners) = self.round_spans(first, k);
        let plan = ReadPlan::for_spans_aligned(&spans, self.options.coalesce, self.plan_granule);
        PlannedRound {
            steps: k,
            owners,
            plan,
        }
    }

    /// The longest round (up to `prefetch` steps) that fits `capacity`.
    /// Even the first round is a full one: its first step is served as
    /// soon as that step's runs are in, which they are first (step_ready).
    /// Rounds that ramped up from one step (1, 2, 4, ...) were needed while
    /// a round was served only once all of it was in; kept with per-step
    /// serving they made the first batch come sooner (0.16–0.21 s against
    /// 0.18–0.42 s at eight one-rank nodes) but lowered the throughput
    /// there (docs/PERFORMANCE.md).
    fn steps_that_fit(&self, first: u64, capacity: u64) -> Result<PlannedRound> {
        let left = self
            .options
            .step_limit
            .map_or(u64::MAX, |l| l.saturating_sub(first));
        let mut k = (self.options.prefetch.max(1) as u64).min(left).max(1);
        loop {
            let round = self.plan_round(first, k);
            let len = round.plan.buffer_len;
            let per_reader_ok =
                len / self.options.readers_per_node.max(1) as u64 <= i32::MAX as u64 / 2;
            if len <= capacity && per_reader_ok {
                return Ok(round);
            }
            if k == 1 {
                return Err(Error::ResourceLimit(format!(
                    "the shared window ({} bytes{}) is too small for one batch of every rank on the node ({} bytes); raise window_bytes",
                    held(&self.parts).memory.data_len(),
                    if self.options.overlap { ", half per round with overlap" } else { "" },
                    len
                )));
            }
            k = k.div_ceil(2);
        }
    }

    /// Makes the round starting at step `first` the one served: the one
    /// read ahead, or one started now; with overlap on, the read after it
    /// starts too, into the other half of the window, while the ranks work
    /// on this one.
    fn load_round(&mut self, first: u64) -> Result<()> {
        // Every step of the round before was served, so its reads are
        // complete; this joins the thread that ran them (it counted them
        // itself, see ReadTally).
        let retired = match self.round.take() {
            Some(mut done) => self.complete_read(&mut done),
            None => Ok(()),
        };
        let mut current = match self.pending.take() {
            Some(r) if r.first_step == first => r,
            _ => self.start_round(first)?,
        };
        if let Err(e) = retired {
            current.error.get_or_insert(e);
        }
        let next = current.first_step + current.steps;
        if self.options.collective {
            // Collective reads keep their order: two collective calls in
            // flight on one file from two threads would not match across
            // ranks. This round's read completes before the next starts.
            if let Err(e) = self.complete_read(&mut current) {
                current.error.get_or_insert(e);
            }
        }
        let first_round = self.counters.rounds == 0;
        self.counters.rounds += 1;
        self.round = Some(current);
        // The next read is queued before this round's steps are waited
        // for, to start as soon as this round's reads are done:
        // a node whose reads are done would otherwise leave its storage
        // idle while the slowest node catches up (up to a fifth of the run
        // at eight one-rank nodes; docs/PERFORMANCE.md). Its half of the
        // window is free: every rank has left the round before
        // (start_round agrees first). The job's first round waits alone
        // for its first step (advance starts the next read after it).
        if self.reads_ahead_to(next) && (self.options.collective || !first_round) {
            self.pending = Some(self.start_round(next)?);
        }
        Ok(())
    }

    /// Waits for this reader's read of `round` if it runs on a thread (the
    /// read thread counted it).
    fn complete_read(&mut self, round: &mut Round) -> Result<()> {
        let Some(read) = round.read.take() else {
            return Ok(());
        };
        let io_start = Instant::now();
        let done = read.wait();
        self.counters.io_seconds += io_start.elapsed().as_secs_f64();
        done.map(|_| ())
    }

    /// Which area round number `n` uses, the bytes it may use, and where
    /// it starts: with overlap the window is two halves used in turn.
    fn round_area(&self, n: u64) -> (usize, u64, u64) {
        let len = held(&self.parts).memory.data_len() as u64;
        if self.options.overlap {
            // Halves start at a whole granule, as direct reads need and
            // the kernel's copy into the window prefers.
            let half = len / 2 / self.plan_granule * self.plan_granule;
            let area = n % 2;
            (area as usize, half, area * half)
        } else {
            (0, len, 0)
        }
    }

    /// Agrees on the round's length, plans it, and starts this reader's
    /// reads (collective over all ranks). A failure to start them is kept
    /// for the round's first step's agreement (`wait_for_step`), and shown
    /// in this reader's progress word so no rank waits for it.
    fn start_round(&mut self, first: u64) -> Result<Round> {
        let waited = Instant::now();
        let (area, capacity, base) = self.round_area(self.rounds_started);
        // Masters find how many steps fit; the smallest wins everywhere so
        // rounds (and collective reads) line up across nodes.
        let fit = if held(&self.parts).topology.node.rank() == 0 {
            agree::local(|| self.steps_that_fit(first, capacity)).map(Some)
        } else {
            Ok(None)
        };
        let local_k = fit
            .as_ref()
            .ok()
            .and_then(|r| r.as_ref())
            .map_or(i64::MAX, |r| r.steps as i64);
        if !self.options.collective {
            // With independent reads the ranks meet only here and at the
            // job's last step (serve_from_own_node).
            self.counters.step_agreements += 1;
        }
        let (fitted, k) = self.meet(fit, local_k, true)?;
        let k = k.max(1) as u64;
        self.rounds_started += 1;
        let tag = self.rounds_started as u32;
        // A master already planned this round unless another node needed
        // a shorter one.
        let PlannedRound {
            steps: _,
            owners,
            plan,
        } = match fitted {
            Some(round) if round.steps == k => round,
            _ => self.plan_round(first, k),
        };
        self.counters.wait_seconds += waited.elapsed().as_secs_f64();

        let io_start = Instant::now();
        let readers = self.node_readers();
        let members = held(&self.parts).topology.members.len();
        let span_steps: Vec<usize> = owners.iter().map(|o| o.step).collect();
        let ReadSchedule {
            groups,
            mut order,
            needs,
        } = ReadSchedule::new(&plan, &span_steps, k as usize, readers);
        let mut placements = vec![vec![Vec::new(); members]; k as usize];
        for (o, p) in owners.iter().zip(&plan.placements) {
            placements[o.step][o.member].push((base + p.buf_offset, p.len));
        }
        let mut round = Round {
            first_step: first,
            steps: k,
            tag,
            area,
            placements,
            needs,
            agreed_end: first,
            checked_end: first,
            read: None,
            error: None,
        };
        let me = held(&self.parts).topology.node.rank();
        if me < readers && held(&self.parts).topology.readers.is_some() {
            let mine = MyReads {
                runs: plan.runs[groups[me].clone()].to_vec(),
                order: std::mem::take(&mut order[me]),
                base,
            };
            if let Err(e) = agree::local(|| self.start_my_reads(&mut round, mine)) {
                self.progress(area, me, tag).fail();
                round.error = Some(e);
            }
        }
        self.counters.io_seconds += io_start.elapsed().as_secs_f64();
        Ok(round)
    }

    /// Reader `reader`'s progress word for window area `area`: the window
    /// holds one set of one word per reader for each area.
    fn progress_word(&self, area: usize, reader: usize) -> &AtomicU64 {
        let readers = self.node_readers();
        held(&self.parts)
            .memory
            .progress_word(area * readers + reader)
    }

    /// Every reader's progress word for the area `round` uses.
    fn progress_words_of(&self, round: &Round) -> Vec<&AtomicU64> {
        (0..self.node_readers())
            .map(|g| self.progress_word(round.area, g))
            .collect()
    }

    /// This reader's progress word for the round of `tag` in `area`, as
    /// its read threads publish to it.
    fn progress(&self, area: usize, reader: usize, tag: u32) -> Progress {
        let word = self.progress_word(area, reader);
        // SAFETY: the word lies in the node's window, which the engine
        // keeps until every read publishing to it has been joined (drop
        // takes the rounds, whose reads join, before giving it back).
        unsafe { Progress::new(word, tag) }
    }

    /// Starts this reader's reads of `round`: `mine.runs` (its group of the
    /// plan, in file order, packed back to back) in `mine.order`.
    fn start_my_reads(&mut self, round: &mut Round, mine: MyReads) -> Result<()> {
        let parts = held(&self.parts);
        let (Some(readers), Some(file)) = (&parts.topology.readers, &self.file) else {
            return Err(Error::Internal("a reader without its data file".into()));
        };
        let progress = self.progress(round.area, parts.topology.node.rank(), round.tag);
        let MyReads { runs, order, base } = mine;
        let (lo, hi) = match (runs.first(), runs.last()) {
            (Some(a), Some(b)) => (base + a.buf_offset, base + b.buf_offset + b.len),
            _ => (base, base),
        };
        if hi as usize > parts.memory.data_len() {
            return Err(Error::Internal("a round's reads overrun the window".into()));
        }
        // The range lies inside this round's area of the window (the plan
        // fits its capacity, checked above); each reader writes only its
        // own range, and no rank reads a byte of it before the reader's
        // progress word says the run holding it is complete.
        let buf = parts.memory.data_ptr().wrapping_add(lo as usize);
        let len = (hi - lo) as usize;
        // SAFETY: see above; the range stays untouched by anyone else until
        // the read is complete (joined, waited for, or done here).
        let dest = unsafe { WindowRange::new(buf, len) };
        let streams = self.options.read_streams.unwrap_or_else(|| {
            (MACHINE_READ_STREAMS / held(&self.parts).topology.machine_readers).max(1)
        });
        // Staggering: readers take turns in groups of `stagger`, everyone
        // taking part in every phase so collective calls always match.
        // Staggered phases run one after another; without staggering the
        // single read is left to complete while the ranks work.
        let group = self.options.stagger.unwrap_or(readers.size()).max(1);
        let phases = readers.size().div_ceil(group);
        let my_phase = readers.rank() / group;
        let own = matches!(**file, DataFile::Own(_));
        let bytes = len as u64;
        if phases == 1 && self.options.overlap {
            let file = Arc::clone(file);
            let tally = Arc::clone(&self.tally);
            let in_flight = BackgroundRead::start();
            let finished = Arc::new(ReadFinished::default());
            let before = self.previous_read.replace(Arc::clone(&finished));
            let read = move || {
                let _in_flight = in_flight;
                let _finished = FinishOnDrop(finished);
                if let Some(before) = before {
                    before.wait();
                }
                read_and_publish(&file, &runs, &order, dest, streams, progress, &tally, bytes)
            };
            round.read = Some(if own || self.threaded_reads {
                InFlight::Thread(Some(std::thread::spawn(read)))
            } else {
                // A collective read without MPI_THREAD_MULTIPLE: read now.
                InFlight::Done(Some(read()))
            });
            return Ok(());
        }
        let mut result = Ok(());
        for phase in 0..phases {
            let mine = phase == my_phase;
            // Collective reads take part in every phase, reading nothing
            // in the others' phases.
            let done = if mine {
                read_and_publish(
                    file,
                    &runs,
                    &order,
                    dest,
                    streams,
                    progress,
                    &self.tally,
                    bytes,
                )
            } else if !own {
                // SAFETY: an empty range.
                let nothing = unsafe { WindowRange::new(buf, 0) };
                file.read_runs(&[], &[], nothing, streams, &|_| {})
            } else {
                Ok(RunsRead::default())
            };
            match done {
                Ok(_) => {}
                Err(e) if result.is_ok() => result = Err(e),
                Err(_) => {}
            }
            if own && phases > 1 {
                readers.barrier()?;
            }
        }
        result
    }

    /// Checks the overflow page headers in front of `records`' values (the
    /// index cannot: it does not read overflow pages).
    fn check_overflow_headers(&self, records: &[BatchRecord]) -> Result<()> {
        let memory = &held(&self.parts).memory;
        let entries = memory.entries();
        for record in records {
            let entry = &entries[record.ordinal as usize];
            if !entry.is_overflow() {
                continue;
            }
            let start = record.value.0 - PAGEHDRSZ;
            // SAFETY: the step's bytes are all in (checked before this is
            // called) and nobody writes them during the step.
            let header = unsafe { memory.data_range(start, PAGEHDRSZ) };
            if let Some((pgno, reason)) =
                overflow_header_problem(entry, header, self.database.page_size)
            {
                let path = match &self.file {
                    Some(f) => f.path().to_owned(),
                    None => self.path.clone(),
                };
                return Err(Error::Corrupt {
                    path,
                    pgno,
                    offset: pgno * self.database.page_size as u64,
                    reason,
                });
            }
        }
        Ok(())
    }
}

/// What a reader reads of a round.
struct MyReads {
    runs: Vec<ReadRun>,
    order: Vec<usize>,
    /// Window offset of the round's area.
    base: u64,
}

/// This rank's batch as placed: the bytes of its values, and whether the
/// epoch limit left records out.
struct PlacedBatch {
    cut: bool,
    bytes: u64,
}

/// Progress words the window holds: one per reader (at most one per node
/// rank) for each of the two areas.
fn progress_words(node_ranks: usize) -> usize {
    2 * node_ranks
}

/// Reads `runs` in `order` and publishes the progress, ending with every
/// run complete or with the failure (also when the read unwinds), so that
/// no rank waits for a read that stopped. The read is counted in `tally`
/// before its last run is published.
#[allow(clippy::too_many_arguments)]
fn read_and_publish(
    file: &DataFile,
    runs: &[ReadRun],
    order: &[usize],
    dest: WindowRange,
    streams: usize,
    progress: Progress,
    tally: &ReadTally,
    bytes: u64,
) -> Result<RunsRead> {
    struct FailUnlessDone(Progress, bool);
    impl Drop for FailUnlessDone {
        fn drop(&mut self) {
            if !self.1 {
                self.0.fail();
            }
        }
    }
    let mut guard = FailUnlessDone(progress, false);
    let all = runs.len();
    let read = file.read_runs(runs, order, dest, streams, &move |n| {
        if n < all {
            progress.complete(n)
        }
    })?;
    tally.add(bytes, read);
    progress.complete(all);
    guard.1 = true;
    Ok(read)
}

/// Rank `rank`'s records at step `step` that the job reads: all of them
/// but those at or past the epoch limit. Reading (`round_spans`) and
/// delivering (`advance`) both go through here, so a batch's placements
/// line up with its records. Returns whether the limit left any out.
fn for_each_wanted_slot(
    schedule: &JobSchedule,
    epoch_limit: Option<u64>,
    rank: u64,
    step: u64,
    mut f: impl FnMut(Slot),
) -> bool {
    let limit = epoch_limit.unwrap_or(u64::MAX);
    let mut left_out = false;
    schedule.for_each_slot(rank, step, |slot| {
        if slot.epoch < limit {
            f(slot)
        } else {
            left_out = true;
        }
    });
    left_out
}

/// Steps per round by default. Longer rounds mean fewer agreements and
/// longer runs: with a shuffled order a 4-step round cut the chunks into
/// 1 MiB requests, 16 steps (as many as half the default window holds of
/// 64 image records per rank) into 1.4 MiB ones, and shuffled reading went
/// from 0.75 to 0.83 of the storage limit (docs/PERFORMANCE.md, issue 5).
pub const DEFAULT_PREFETCH: usize = 16;

/// Read streams per machine by default, shared among the readers on it.
/// One reader with two streams delivered about 1.1× one stream on the
/// local virtio disk here, and four no more than two. Where several
/// readers share a machine (virtual nodes), one stream each did better
/// once steps were served as their runs came in: at four and eight
/// one-rank nodes 0.95, 0.94 and 1.08, 1.01 of the storage limit against
/// 1.03, 0.70 and 0.97, 0.72 with two (docs/PERFORMANCE.md).
pub const MACHINE_READ_STREAMS: usize = 2;

/// ROMIO hints the engine sets unless the caller sets the same key.
///
/// Two-phase collective buffering makes each aggregator read one contiguous
/// file domain covering every reader's extents, holes included. Nodes'
/// extents interleave as soon as the order is shuffled, and then it read
/// most of the file per node: 0.28x the unshuffled rate on this project's
/// test machine, against 1.0-1.3x with both switches off (see
/// docs/PERFORMANCE.md). Our runs are already coalesced to about 4 MiB, so
/// data sieving has nothing to add either.
pub const DEFAULT_HINTS: [(&str, &str); 2] =
    [("romio_cb_read", "disable"), ("romio_ds_read", "disable")];

fn effective_hints(user: &[(String, String)]) -> Vec<(String, String)> {
    let mut hints: Vec<(String, String)> = DEFAULT_HINTS
        .iter()
        .filter(|(k, _)| !user.iter().any(|(u, _)| u == k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    hints.extend(user.iter().cloned());
    hints
}

/// The shared window to allocate: `window_bytes`, or less when even the
/// largest possible rounds need less (creating and mapping a large shared
/// segment costs time at open). A round holds at most `prefetch` steps of
/// every rank on the node, each record taking at most its span plus one
/// bridged gap; with overlap two rounds are held at once.
fn window_size(o: &EngineOptions, node_ranks: usize, largest_span: u64) -> usize {
    let per_record = largest_span.saturating_add(o.coalesce.max_gap);
    let rounds = if o.overlap { 2 } else { 1 };
    let need = per_record
        .saturating_mul(o.batch as u64)
        .saturating_mul(node_ranks as u64)
        .saturating_mul(o.prefetch as u64)
        .saturating_mul(rounds);
    o.window_bytes.min(need.max(1 << 20) as usize)
}

/// The schedule and step to start from: a fresh job's, or a validated
/// cursor's.
fn resume_point(
    options: &EngineOptions,
    base: Schedule,
    shuffle: Option<Shuffle>,
    database: DatabaseIdentity,
    rank: usize,
) -> Result<(JobSchedule, u64)> {
    match (&options.resume, &options.resume_job) {
        (Some(_), Some(_)) => Err(Error::InvalidArgument(
            "resume from a rank cursor or from a job cursor, not both".into(),
        )),
        (Some(c), None) => resume::from_rank_cursor(c, base, shuffle, database, rank as u64),
        (None, Some(job)) => resume::from_job_cursor(
            job,
            base,
            shuffle,
            database,
            rank as u64,
            options.repartition,
        ),
        (None, None) => Ok((JobSchedule::plain(base), 0)),
    }
}

fn check_options(o: &EngineOptions) -> Result<()> {
    let bad = |what: &str| Err(Error::InvalidArgument(what.to_owned()));
    if o.batch == 0 {
        return bad("batch size must be at least 1");
    }
    if o.readers_per_node == 0 {
        return bad("readers_per_node must be at least 1");
    }
    if o.ranks_per_node == Some(0) {
        return bad("ranks_per_node must be at least 1");
    }
    if o.stagger == Some(0) {
        return bad("stagger must be at least 1 reader at a time");
    }
    if o.prefetch == 0 {
        return bad("prefetch must be at least 1 step");
    }
    if o.read_streams == Some(0) {
        return bad("read_streams must be at least 1");
    }
    if o.collective && o.direct_io == DirectIo::Always {
        return bad("direct_io=always applies to independent reads; collective reads leave the page cache to MPI-IO");
    }
    if o.window_bytes == 0 {
        return bad("window_bytes must be positive");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[test]
    fn a_round_read_waits_for_the_one_before_however_that_one_ends() {
        for unwinds in [false, true] {
            let first = Arc::new(ReadFinished::default());
            let first_done = Arc::new(AtomicBool::new(false));
            let earlier = {
                let (finished, done) = (Arc::clone(&first), Arc::clone(&first_done));
                std::thread::spawn(move || {
                    let _finished = FinishOnDrop(finished);
                    std::thread::sleep(Duration::from_millis(50));
                    done.store(true, Ordering::SeqCst);
                    if unwinds {
                        panic!("a read thread that unwinds");
                    }
                })
            };
            let later = std::thread::spawn(move || {
                first.wait();
                first_done.load(Ordering::SeqCst)
            });
            assert!(
                later.join().unwrap(),
                "the later read started before the earlier one ended (unwinds: {unwinds})"
            );
            assert_eq!(earlier.join().is_err(), unwinds);
        }
    }
}
