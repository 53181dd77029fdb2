//! How the engine reads: the options, their defaults and their checks,
//! and what follows from them (the MPI-IO hints, the window's size).

use crate::data_file::DirectIo;
use lmdbio_core::cursor::{Cursor, JobCursor};
use lmdbio_core::error::{Error, Result};
use lmdbio_core::order::ShuffleMode;
use lmdbio_core::plan::CoalesceOptions;
use lmdbio_core::schedule::{Partition, Tail};

/// How the engine reads. Defaults suit a bulk-loaded image database.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Named database to read (`None`: the main one).
    pub subdb: Option<String>,
    /// Records per batch per rank.
    pub batch: usize,
    /// How each epoch is divided among the ranks.
    pub partition: Partition,
    /// What a rank's last batch of an epoch does.
    pub tail: Tail,
    /// Group K consecutive ranks into a virtual node instead of grouping by
    /// shared memory (to exercise multi-node behaviour on one machine).
    pub ranks_per_node: Option<usize>,
    /// Ranks per node that open the file and read (at least 1).
    pub readers_per_node: usize,
    /// How close value spans must lie to be read in one request.
    pub coalesce: CoalesceOptions,
    /// Bytes of node-shared memory for values. Every round must fit: a round
    /// holds the values of `prefetch` steps (fewer if they do not fit, but
    /// at least one) of every rank on the node.
    pub window_bytes: usize,
    /// Steps read ahead in one round, at most: a round also has to fit half
    /// the window (all of it without overlap), which bounds it first for
    /// large records. Rounds of small records take more steps, up to 16 MiB
    /// of values (see docs/design/inline-records.md).
    pub prefetch: usize,
    /// Bytes of node-shared memory for the leaf pages the index scan read
    /// that hold inline values (at most half the window): values in them
    /// are served from there, never read again (see
    /// docs/design/inline-records.md). 0: every value is read in rounds.
    pub inline_pages_bytes: u64,
    /// At most this many readers read at once (staggering); `None`: all.
    pub stagger: Option<usize>,
    /// Collective reads: the readers open the file together and read with
    /// `MPI_File_read_at_all`, so MPI-IO may aggregate across nodes (with
    /// hints that enable collective buffering). Default: independent reads,
    /// each reader on a file of its own read on `read_streams` threads,
    /// which skips the collective open and every wait on other readers;
    /// lmdbio's runs are already large and contiguous, which is when
    /// aggregation has nothing to add (see docs/design/independent-reads.md).
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
    /// How the epochs are shuffled (with `shuffle_seed`; an error without
    /// one). `None`: the default, see [`EngineOptions::shuffle_mode_in_use`].
    pub shuffle_mode: Option<ShuffleMode>,
    /// Continue from this rank's cursor, taken by a job with the same rank
    /// count, order options and database.
    pub resume: Option<Cursor>,
    /// Continue from a job cursor ([`Engine::job_cursor`](crate::Engine::job_cursor)) taken with the
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
    /// any rank ([`Engine::step_limit`](crate::Engine::step_limit)). Under `Tail::Wrap` a job of
    /// whole epochs otherwise reads up to a batch per rank of the next
    /// epoch; on many ranks that is a large part of an epoch. Epochs count
    /// from the job's first, as in [`BatchRecord::epoch`](crate::BatchRecord::epoch). `None`: unbounded.
    pub epoch_limit: Option<u64>,
    /// Read the next round into the other half of the window while the
    /// ranks work on the current one, on helper threads (collective reads
    /// only under `MPI_THREAD_MULTIPLE`; without it they are read when the
    /// round starts). A reader's reads of the next round start once its
    /// reads of the current one are done.
    pub overlap: bool,
    /// How long a rank waits for the others before failing with an error
    /// naming the ranks that did not arrive. `None`: `LMDBIO_TIMEOUT`
    /// (seconds) if set, else 30 minutes (see `engine::timeout`).
    pub timeout: Option<std::time::Duration>,
    /// Load the index from a saved index of this very database state
    /// instead of scanning the tree, and save the index a scan built for
    /// later jobs: beside the data file, or in `index_cache` when its
    /// directory is not writable (see docs/design/saved-index.md).
    pub saved_index: bool,
    /// Directory for saved indexes of databases whose directory is not
    /// writable. `None`: `LMDBIO_INDEX_CACHE`, else `$XDG_CACHE_HOME/lmdbio`,
    /// else none (the index is then not saved).
    pub index_cache: Option<std::path::PathBuf>,
    /// Hold every key in the node's memory for [`Batch::key`](crate::Batch::key).
    /// `false` (a front end that uses values only): a node holds no keys,
    /// 24 bytes per record instead of 24 and the key, and `Batch::key`
    /// gives empty keys; a scan checks their order as it parses and saves
    /// an index without keys (see docs/design/saved-index.md).
    pub keys: bool,
    /// A node-local directory (NVMe scratch, `$SLURM_TMPDIR`, `/dev/shm`)
    /// where each node's reader keeps the parts of the database it holds,
    /// in `DIR/node-N`: written while the first epoch reads the shared
    /// file system, read instead of it afterwards (see
    /// docs/design/node-stage.md). Independent reads with one reader per
    /// node only. `None`: every epoch reads the shared file system.
    pub stage: Option<std::path::PathBuf>,
    /// Bytes each node's stage may hold: the whole database on every node
    /// when it fits, else each node holds its share of 4 MiB blocks (block
    /// `b` on node `b mod nodes`) up to this budget.
    pub stage_budget: u64,
    /// Leave the stage in place when the engine is dropped (after
    /// completing it), for a later job on the same database to reuse.
    pub keep_stage: bool,
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
            inline_pages_bytes: DEFAULT_INLINE_PAGES_BYTES,
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
            shuffle_mode: None,
            resume: None,
            resume_job: None,
            repartition: false,
            timeout: None,
            saved_index: true,
            index_cache: None,
            keys: true,
            stage: None,
            stage_budget: u64::MAX,
            keep_stage: false,
        }
    }
}

impl EngineOptions {
    /// The shuffle mode of a shuffled job: the one asked for; else, with a
    /// node stage, chunked in the first epoch and global after it, since
    /// only the first epoch reads the database file (and fills the stage),
    /// and later epochs read records from the local stage; else the
    /// chunked shuffle, whose reads stay large when every epoch is read
    /// from the database file (a global shuffle reads each record on its
    /// own there; see docs/design/global-shuffle.md and
    /// docs/design/node-stage.md).
    pub fn shuffle_mode_in_use(&self) -> ShuffleMode {
        match (self.shuffle_mode, &self.stage) {
            (Some(mode), _) => mode,
            (None, Some(_)) => ShuffleMode::GlobalAfterFirst,
            (None, None) => ShuffleMode::default(),
        }
    }
}

/// Steps per round by default. Longer rounds mean fewer agreements and
/// longer runs, which matters most for a shuffled order; 16 steps of 64
/// image records per rank fill half the default window (see
/// docs/design/coalescing.md).
pub const DEFAULT_PREFETCH: usize = 16;

/// Default [`EngineOptions::inline_pages_bytes`]: the leaf pages of a
/// node's share of a database of some gigabytes of small records (capped
/// at half the window, see `inline_pages::scan_budget`).
pub const DEFAULT_INLINE_PAGES_BYTES: u64 = 1 << 30;

/// Read streams per machine by default, shared among the readers on it: a
/// lone reader does better on two than one, and readers sharing a machine
/// do better on one each (see docs/design/read-rounds.md).
pub const MACHINE_READ_STREAMS: usize = 2;

/// ROMIO hints the engine sets unless the caller sets the same key.
///
/// Two-phase collective buffering makes each aggregator read one contiguous
/// file domain covering every reader's extents, holes included. Nodes' extents
/// interleave as soon as the order is shuffled, and then it read most of the
/// file per node, far slower than with both switches off (see
/// docs/design/independent-reads.md). Our runs are already coalesced to about 4
/// MiB, so data sieving has nothing to add either.
pub const DEFAULT_HINTS: [(&str, &str); 2] =
    [("romio_cb_read", "disable"), ("romio_ds_read", "disable")];

pub(crate) fn effective_hints(user: &[(String, String)]) -> Vec<(String, String)> {
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
pub(crate) fn window_size(
    o: &EngineOptions,
    node_ranks: usize,
    largest_span: u64,
    steps: usize,
) -> usize {
    let per_record = largest_span.saturating_add(o.coalesce.max_gap);
    let rounds = if o.overlap { 2 } else { 1 };
    let need = per_record
        .saturating_mul(o.batch as u64)
        .saturating_mul(node_ranks as u64)
        .saturating_mul(steps as u64)
        .saturating_mul(rounds);
    o.window_bytes.min(need.max(1 << 20) as usize)
}

pub(crate) fn check_options(o: &EngineOptions) -> Result<()> {
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
    if o.stage.is_some() && (o.collective || o.readers_per_node != 1) {
        return bad("a node stage needs independent reads with one reader per node");
    }
    if o.window_bytes == 0 {
        return bad("window_bytes must be positive");
    }
    if o.shuffle_mode.is_some() && o.shuffle_seed.is_none() {
        return bad("a shuffle mode was given without a shuffle seed");
    }
    crate::limits::check_static(o)?;
    crate::timeout::apply(o)
}
