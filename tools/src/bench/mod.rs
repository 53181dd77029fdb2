//! `mpiexec -n P lmdbio bench`: reads a database on P ranks with one or
//! more methods in one invocation (lmdbio's engine, liblmdb's cursor as
//! Caffe uses it, and the storage limit) and reports throughput, I/O counts
//! and (with `--trace`) every record each rank got.

mod engine_method;
mod lmdb_methods;
mod progress;
mod raw;
mod report;
mod run_order;
mod sys;

use std::path::PathBuf;

use lmdbio::engine::{DirectIo, EngineOptions};
use lmdbio::order::ShuffleMode;
use lmdbio::schedule::{Partition, Tail};
use lmdbio::CoalesceOptions;
use mpi::traits::*;

use crate::CommandError;
use progress::Progress;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// lmdbio's engine.
    Lmdbio,
    /// lmdbio's engine with every epoch shuffled (seed from --shuffle, else
    /// 1; --shuffle-mode, else global-after-first with --stage, chunked
    /// without): to compare with unshuffled reading in the same invocation.
    LmdbioShuffled,
    /// lmdbio's engine with every epoch globally shuffled (seed from
    /// --shuffle, else 1): a uniform permutation of all records.
    LmdbioGlobal,
    /// lmdbio's engine with collective reads (the readers open the file
    /// together and read with MPI_File_read_at_all): to compare with the
    /// default independent reads in the same invocation.
    LmdbioCollective,
    /// lmdbio's engine building its index by a scan, neither loading nor
    /// saving a saved index (as --no-saved-index): to compare opening with
    /// and without one in the same invocation.
    LmdbioScan,
    /// lmdbio's engine with its defaults and no stage even with --stage:
    /// to pair epochs with and without staging in one invocation.
    LmdbioNostage,
    /// liblmdb's mmap cursor, every rank scanning everything and keeping
    /// records i % P == rank (Caffe's multi-GPU Data layer).
    LmdbSkip,
    /// liblmdb's mmap cursor, every rank walking to its contiguous block
    /// and reading only that.
    LmdbWalk,
    /// The storage limit: the file in P equal parts, each read by one rank
    /// with large sequential preads.
    Raw,
    /// The same with one reader per node.
    RawNode,
    /// The node-local storage limit: one reader per node reads a file of
    /// its node's part written to the stage directory (`--stage DIR`, in
    /// `DIR/node-N`) before the clock starts, and removes it.
    RawStage,
}

impl Method {
    /// Whether the method runs lmdbio's engine.
    fn uses_engine(self) -> bool {
        matches!(
            self,
            Method::Lmdbio
                | Method::LmdbioShuffled
                | Method::LmdbioGlobal
                | Method::LmdbioCollective
                | Method::LmdbioScan
                | Method::LmdbioNostage
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Method::Lmdbio => "lmdbio",
            Method::LmdbioShuffled => "lmdbio-shuffled",
            Method::LmdbioGlobal => "lmdbio-global",
            Method::LmdbioCollective => "lmdbio-collective",
            Method::LmdbioScan => "lmdbio-scan",
            Method::LmdbioNostage => "lmdbio-nostage",
            Method::LmdbSkip => "lmdb-skip",
            Method::LmdbWalk => "lmdb-walk",
            Method::Raw => "raw",
            Method::RawNode => "raw-node",
            Method::RawStage => "raw-stage",
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Method to run (repeatable, or a comma-separated list; run one after
    /// another on the same data).
    #[arg(long = "method", alias = "methods", value_enum, value_delimiter = ',')]
    methods: Vec<Method>,
    /// Drop the data file from the page cache before each method
    /// (`posix_fadvise(DONTNEED)` on that file only, on every node).
    #[arg(long)]
    cold: bool,
    /// With --cold, also empty the whole machine's page cache
    /// (`/proc/sys/vm/drop_caches`, root only): every other user's cached
    /// files go too, so only on a machine of one's own. Needed where the
    /// per-file drop does not reach a server's cache (GlusterFS bricks).
    #[arg(long, requires = "cold")]
    drop_all_caches: bool,
    /// Lines on stderr (rank 0): every few seconds during a method, and as
    /// each method finishes.
    #[arg(long)]
    progress: bool,
    /// Named database instead of the main one.
    #[arg(short = 's', value_name = "NAME")]
    subdb: Option<String>,
    /// Run the whole list of methods N times, in an order that changes
    /// each time so every method follows every other equally often, and
    /// report each method's median run (every run is kept in the
    /// JSON): on a shared machine one run of each says little.
    #[arg(long, value_name = "N", default_value_t = 1)]
    repeat: usize,
    /// Epochs to read (every record of an epoch once across all ranks;
    /// lmdbio reads nothing of later epochs, see EngineOptions::epoch_limit).
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Records per batch per rank.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Group K consecutive ranks into a virtual node.
    #[arg(long, value_name = "K")]
    ranks_per_node: Option<usize>,
    #[arg(long, default_value_t = 1)]
    readers_per_node: usize,
    /// Coalescing target in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20)]
    coalesce: u64,
    /// Largest hole bridged when coalescing, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 10)]
    max_gap: u64,
    /// Memory the raw methods read into, their 4 MiB requests taking its
    /// slots in turn. The default, one request's worth, stays in the CPU's
    /// cache; a window's worth (lmdbio lands every step of a round in its
    /// shared window before anyone reads it) shows what writing a large
    /// destination costs the same reads on this machine.
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20)]
    raw_buffer: usize,
    /// At most G readers read at once.
    #[arg(long, value_name = "G")]
    stagger: Option<usize>,
    /// Collective MPI-IO: the readers open the file together and read with
    /// MPI_File_read_at_all, so MPI-IO may aggregate across nodes (with
    /// hints that enable collective buffering). Default: independent reads,
    /// each reader opening the file on its own and reading it with
    /// positioned reads on --read-streams threads.
    #[arg(long, conflicts_with = "independent")]
    collective: bool,
    /// Independent reads (the default; kept so scripts can say so).
    #[arg(long)]
    independent: bool,
    /// Threads each reader reads with (independent reads). Default: two
    /// per machine, shared among the readers on it (at least one each).
    #[arg(long, value_name = "N")]
    read_streams: Option<usize>,
    /// Independent reads around the page cache (direct I/O): `never` reads
    /// through the cache; `auto` (the default) reads a round directly when
    /// the file system supports it, the cache holds less than half of the
    /// round and the bytes can land in huge pages (the window's or a
    /// staging buffer's), and scans the tree around the caches through a
    /// second descriptor on FUSE and network file systems; `always`
    /// requires direct reads.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = DirectIoArg::Auto)]
    direct_io: DirectIoArg,
    /// Read each round synchronously instead of while the ranks work on the
    /// previous one.
    #[arg(long)]
    no_overlap: bool,
    /// Seconds a rank waits for the others before failing with an error
    /// naming the ranks that did not arrive (default: $LMDBIO_TIMEOUT,
    /// else 1800).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<String>,
    /// Leave lmdbio's set-up to the runs: the node communicators and the
    /// shared window to the first open, and mapping the window's memory to
    /// every lmdbio run that follows another method's (whose run gives the
    /// memory back), instead of doing both untimed before each lmdbio run
    /// as a job would once at start-up (`lmdbio_prepare`). Its time is
    /// reported either way.
    #[arg(long)]
    no_prepare: bool,
    /// Simulated work per batch (milliseconds), to measure how much reading
    /// overlaps with computing.
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    compute_ms: f64,
    /// Shuffle every epoch with this seed (chunks of ~4 MiB of values
    /// permuted, then interleaved within windows of 16 chunks).
    #[arg(long, value_name = "SEED")]
    shuffle: Option<u64>,
    /// Records per shuffled chunk (default: about 4 MiB of values).
    #[arg(long, value_name = "RECORDS")]
    shuffle_chunk: Option<u64>,
    /// Chunks per shuffling window.
    #[arg(long, value_name = "CHUNKS", default_value_t = 16)]
    shuffle_window: u64,
    /// How shuffled epochs are ordered: `chunked` (chunks of about 4 MiB
    /// permuted, then interleaved within windows: reads stay large),
    /// `global` (every epoch a uniform permutation of all records: each
    /// record is a read of its own) or `global-after-first` (the first
    /// epoch chunked, later ones global; the default with --stage).
    /// Without --shuffle, the seed is 1.
    #[arg(long, value_enum, value_name = "MODE")]
    shuffle_mode: Option<ShuffleModeArg>,
    /// Stop after this many batches per rank (then --save-cursor).
    #[arg(long, value_name = "BATCHES")]
    stop_after: Option<u64>,
    /// Write the job cursor (every rank's cursor, gathered; rank 0 writes)
    /// to FILE when the run ends.
    #[arg(long, value_name = "FILE")]
    save_cursor: Option<PathBuf>,
    /// Continue from the job cursor in FILE (written by --save-cursor).
    #[arg(long, value_name = "FILE")]
    resume: Option<PathBuf>,
    /// With --resume on another rank count: split the records of the
    /// current epoch nobody received yet among this run's ranks.
    #[arg(long, requires = "resume")]
    repartition: bool,
    /// Steps read ahead per round (fewer when the window cannot hold them).
    #[arg(long, value_name = "N", default_value_t = lmdbio::engine::DEFAULT_PREFETCH)]
    prefetch: usize,
    /// Shared window per node, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 256 << 20)]
    window: usize,
    /// Node-shared memory for leaf pages kept from the index scan to serve
    /// inline values from, in bytes (0: read every value in rounds).
    #[arg(long, value_name = "BYTES", default_value_t = lmdbio::engine::DEFAULT_INLINE_PAGES_BYTES)]
    inline_pages: u64,
    /// Neither load a saved index nor save one: scan the tree.
    #[arg(long)]
    no_saved_index: bool,
    /// Hold no keys in the nodes' memory even with --trace (its lines
    /// then start with an empty key).
    #[arg(long)]
    no_keys: bool,
    /// Directory for saved indexes of databases whose directory is not
    /// writable (default: $LMDBIO_INDEX_CACHE, else $XDG_CACHE_HOME/lmdbio).
    #[arg(long, value_name = "DIR")]
    index_cache: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = PartitionArg::Contiguous)]
    partition: PartitionArg,
    /// What the batch that reaches the end of an epoch does.
    #[arg(long, value_enum, default_value_t = TailArg::Wrap)]
    tail: TailArg,
    /// MPI-IO hint KEY=VALUE (repeatable).
    #[arg(long = "hint", value_name = "KEY=VALUE")]
    hints: Vec<String>,
    /// A node-local directory to stage the database in (`DIR/node-N` per
    /// node): the first epoch copies what it reads there, later epochs
    /// read it from there instead of the database file. Also where the
    /// raw-stage method reads.
    #[arg(long, value_name = "DIR")]
    stage: Option<PathBuf>,
    /// Bytes each node's stage may hold (default: no limit). Less than the
    /// database: each node holds its share of 4 MiB blocks.
    #[arg(long, value_name = "BYTES", requires = "stage")]
    stage_budget: Option<u64>,
    /// Leave the stage in place (complete) for a later run to reuse.
    #[arg(long, requires = "stage")]
    keep_stage: bool,
    /// Write DIR/rank-R.tsv: one line per record received.
    #[arg(long, value_name = "DIR")]
    trace: Option<PathBuf>,
    /// Write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Database directory or data file.
    db: PathBuf,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PartitionArg {
    Contiguous,
    RoundRobin,
    Strided,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum DirectIoArg {
    Auto,
    Always,
    Never,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ShuffleModeArg {
    Chunked,
    Global,
    GlobalAfterFirst,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum TailArg {
    Wrap,
    Short,
}

pub fn run(args: &Args) -> Result<(), CommandError> {
    // MPI_THREAD_MULTIPLE lets the engine overlap collective reads with
    // the ranks' work on a helper thread.
    let Some((universe, _level)) = mpi::initialize_with_threading(mpi::Threading::Multiple) else {
        return Err(CommandError::Usage("MPI was already initialised".into()));
    };
    let result = run_in(args, &universe);
    if let Err(e) = &result {
        if lmdbio::mpi_raw::deadline::gave_up() {
            // A rank did not arrive: MPI_Finalize (the universe's drop)
            // would wait for it for ever. Report and leave; the launcher
            // ends the job.
            let line = format!("lmdbio: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
            std::process::exit(1);
        }
    }
    drop(universe);
    result
}

fn run_in(args: &Args, universe: &mpi::environment::Universe) -> Result<(), CommandError> {
    let world = universe.world();
    let methods = if args.methods.is_empty() {
        vec![Method::Lmdbio]
    } else {
        args.methods.clone()
    };
    let ctx = report::Context::new(&world, args.ranks_per_node);
    let uses_engine = methods.iter().any(|m| m.uses_engine());
    // What a job does once at start-up, before the timed runs: the first
    // prepare makes the node communicators and the window and maps its
    // memory; later ones only map the memory again, which the runs of other
    // methods give back first so that their memory figures are their own.
    let prepare = || -> Result<f64, CommandError> {
        let started = std::time::Instant::now();
        lmdbio::engine::prepare(world.as_raw(), &engine_options(args)?)?;
        Ok(ctx.max(started.elapsed().as_secs_f64()))
    };
    let prepare_s = if uses_engine && !args.no_prepare {
        let seconds = prepare()?;
        if world.rank() == 0 {
            println!(
                "lmdbio set-up (node communicators, shared window and its memory): {seconds:.3} s \
                 before the timed runs (--no-prepare puts it in the first run)"
            );
        }
        Some(seconds)
    } else {
        None
    };
    let mut runs = Vec::new();
    let repeat = args.repeat.max(1);
    let total = methods.len() * repeat;
    for n in 0..total {
        // Each method follows every other equally often over the
        // repetitions (state carries over from run to run: run_order).
        let (rep, i) = (n / methods.len(), n % methods.len());
        let method = methods[run_order::run_order(methods.len(), rep)[i]];
        let prepared_s = if !method.uses_engine() {
            // A node's memory goes when its first rank releases it; the
            // barrier keeps the others from measuring before that.
            lmdbio::engine::release_memory();
            world.barrier();
            None
        } else if args.no_prepare {
            None
        } else if n == 0 {
            prepare_s
        } else {
            Some(prepare()?)
        };
        let cache = if args.cold {
            // A saved index is part of what opening reads.
            let saved = lmdbio::engine::saved_index::Place::of(&args.db, &engine_options(args)?);
            let also = saved.as_ref().map_or(&[][..], |p| p.candidates());
            Some(sys::drop_cache(&args.db, also, &ctx, args.drop_all_caches)?)
        } else {
            None
        };
        // Traces are written by the first repetition only.
        let trace_dir = args.trace.as_ref().filter(|_| rep == 0).map(|d| {
            if methods.len() > 1 {
                d.join(method.name())
            } else {
                d.clone()
            }
        });
        sys::reset_peak_rss();
        let before = sys::ProcessCounters::now();
        let mut progress = Progress::new(method.name(), args.progress, world.rank());
        let progress = &mut progress;
        let trace_dir = trace_dir.as_deref();
        let m = match method {
            Method::Lmdbio
            | Method::LmdbioShuffled
            | Method::LmdbioGlobal
            | Method::LmdbioCollective
            | Method::LmdbioScan
            | Method::LmdbioNostage => {
                let mut options = engine_options(args)?;
                match method {
                    Method::LmdbioShuffled => {
                        options.shuffle_seed = Some(args.shuffle.unwrap_or(1));
                    }
                    Method::LmdbioGlobal => {
                        options.shuffle_seed = Some(args.shuffle.unwrap_or(1));
                        options.shuffle_mode = Some(ShuffleMode::Global);
                    }
                    Method::LmdbioCollective => options.collective = true,
                    Method::LmdbioScan => options.saved_index = false,
                    Method::LmdbioNostage => options.stage = None,
                    _ => {}
                }
                engine_method::run(args, options, &world, trace_dir, progress)?
            }
            Method::LmdbSkip => {
                lmdb_methods::run(args, &world, trace_dir, lmdb_methods::Walk::Skip, progress)?
            }
            Method::LmdbWalk => lmdb_methods::run(
                args,
                &world,
                trace_dir,
                lmdb_methods::Walk::OwnBlock,
                progress,
            )?,
            Method::Raw => raw::run(args, &ctx, raw::Readers::EveryRank, progress)?,
            Method::RawNode => raw::run(args, &ctx, raw::Readers::OnePerNode, progress)?,
            Method::RawStage => raw::run(args, &ctx, raw::Readers::Stage, progress)?,
        };
        let process = sys::ProcessCounters::now().since(before);
        let mut run = ctx.summarise(method.name(), args.epochs, &m, process, cache);
        run.prepare_s = prepared_s;
        runs.push(run);
        if world.rank() == 0 && args.progress {
            eprintln!(
                "bench: {} of {} method runs done ({})",
                n + 1,
                total,
                method.name()
            );
        }
    }
    let mut medians = report::medians(&runs, &methods);
    let storage_limit = report::add_ratios(&mut medians, &mut runs);
    if world.rank() == 0 {
        report::print_table(&medians, storage_limit);
        let page_reporting = sys::PageReporting::read();
        if let Some(state) = &page_reporting {
            println!(
                "free page reporting: {state}{}",
                if state.active {
                    "; cold runs may slow down at random while the hypervisor backs memory again (scripts/bench-sweep.sh suspends it)"
                } else {
                    ""
                }
            );
        }
        if let Some(path) = &args.json {
            let doc = serde_json::json!({
                "repeat": repeat,
                "raw_buffer_bytes": args.raw_buffer,
                "lmdbio_prepare_s": prepare_s,
                "storage_limit_mb_per_s": storage_limit.map(|l| l.mb_per_s),
                "storage_limit_pooled": storage_limit.map(|l| l.pooled),
                "stage_limit_mb_per_s": medians
                    .iter()
                    .find(|r| r.method == "raw-stage")
                    .map(|r| r.mb_per_s),
                "free_page_reporting": page_reporting.as_ref().map(ToString::to_string),
                "runs": medians,
                "all_runs": runs,
            });
            std::fs::write(
                path,
                serde_json::to_vec_pretty(&doc).map_err(std::io::Error::other)?,
            )?;
        }
    }
    Ok(())
}

pub(crate) fn engine_options(args: &Args) -> Result<EngineOptions, CommandError> {
    let hints = args
        .hints
        .iter()
        .map(|h| {
            h.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| CommandError::Usage(format!("--hint {h:?} is not KEY=VALUE")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(EngineOptions {
        subdb: args.subdb.clone(),
        batch: args.batch,
        partition: match args.partition {
            PartitionArg::Contiguous => Partition::Contiguous,
            PartitionArg::RoundRobin => Partition::RoundRobinBatches,
            PartitionArg::Strided => Partition::Strided,
        },
        tail: match args.tail {
            TailArg::Wrap => Tail::Wrap,
            TailArg::Short => Tail::Short,
        },
        ranks_per_node: args.ranks_per_node,
        readers_per_node: args.readers_per_node,
        coalesce: CoalesceOptions {
            target: args.coalesce,
            max_gap: args.max_gap,
        },
        window_bytes: args.window,
        prefetch: args.prefetch,
        inline_pages_bytes: args.inline_pages,
        saved_index: !args.no_saved_index,
        // Only traces print keys.
        keys: args.trace.is_some() && !args.no_keys,
        index_cache: args.index_cache.clone(),
        stagger: args.stagger,
        collective: args.collective,
        read_streams: args.read_streams,
        direct_io: match args.direct_io {
            DirectIoArg::Auto => DirectIo::Auto,
            DirectIoArg::Always => DirectIo::Always,
            DirectIoArg::Never => DirectIo::Never,
        },
        hints,
        overlap: !args.no_overlap,
        step_limit: None,
        epoch_limit: Some(args.epochs),
        shuffle_seed: args.shuffle.or(args.shuffle_mode.map(|_| 1)),
        shuffle_chunk: args.shuffle_chunk,
        shuffle_window_chunks: args.shuffle_window,
        shuffle_mode: args.shuffle_mode.map(|m| match m {
            ShuffleModeArg::Chunked => ShuffleMode::Chunked,
            ShuffleModeArg::Global => ShuffleMode::Global,
            ShuffleModeArg::GlobalAfterFirst => ShuffleMode::GlobalAfterFirst,
        }),
        resume: None,
        resume_job: None,
        repartition: false,
        timeout: args
            .timeout
            .as_deref()
            .map(lmdbio::engine::timeout::parse_seconds)
            .transpose()?,
        stage: args.stage.clone(),
        stage_budget: args.stage_budget.unwrap_or(u64::MAX),
        keep_stage: args.keep_stage,
    })
}

/// Folds every byte of `bytes` into `h`, so no method wins by not reading
/// what it delivers. Eight bytes at a time: a byte-serial fold ran at about
/// 1.3 GB/s per core, slower than this machine's (host-cached) disk, and
/// made every method measure the checksum instead of the read.
pub(crate) fn touch(h: u64, bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut h = words.by_ref().fold(h, |h, w| {
        h.rotate_left(5) ^ u64::from_le_bytes(w.try_into().unwrap_or_default())
    });
    for &b in words.remainder() {
        h = h.rotate_left(5) ^ u64::from(b);
    }
    h
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}
