//! `mpiexec -n P lmdbio bench`: reads a database on P ranks and reports
//! throughput, I/O counts and (with `--trace`) every record each rank got.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use lmdbio::cursor::{Cursor, CURSOR_BYTES};
use lmdbio::engine::{Engine, EngineOptions};
use lmdbio::schedule::{Partition, Schedule, Tail};
use lmdbio::CoalesceOptions;
use mpi::collective::SystemOperation;
use mpi::traits::*;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::CommandError;

#[derive(clap::Args)]
pub struct Args {
    /// Named database instead of the main one.
    #[arg(short = 's', value_name = "NAME")]
    subdb: Option<String>,
    /// Epochs to read (every record of an epoch once across all ranks).
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
    /// At most G readers read at once.
    #[arg(long, value_name = "G")]
    stagger: Option<usize>,
    /// Independent instead of collective MPI-IO.
    #[arg(long)]
    independent: bool,
    /// Read each round synchronously instead of while the ranks work on the
    /// previous one.
    #[arg(long)]
    no_overlap: bool,
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
    /// Stop after this many batches per rank (then --save-cursor).
    #[arg(long, value_name = "BATCHES")]
    stop_after: Option<u64>,
    /// Write every rank's cursor to FILE when the run ends.
    #[arg(long, value_name = "FILE")]
    save_cursor: Option<PathBuf>,
    /// Continue from the cursors in FILE (written by --save-cursor).
    #[arg(long, value_name = "FILE")]
    resume: Option<PathBuf>,
    /// Steps read ahead per round.
    #[arg(long, value_name = "N", default_value_t = 4)]
    prefetch: usize,
    /// Shared window per node, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 256 << 20)]
    window: usize,
    #[arg(long, value_enum, default_value_t = PartitionArg::Contiguous)]
    partition: PartitionArg,
    /// What the batch that reaches the end of an epoch does.
    #[arg(long, value_enum, default_value_t = TailArg::Wrap)]
    tail: TailArg,
    /// MPI-IO hint KEY=VALUE (repeatable).
    #[arg(long = "hint", value_name = "KEY=VALUE")]
    hints: Vec<String>,
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
enum TailArg {
    Wrap,
    Short,
}

#[derive(Serialize)]
struct Run {
    method: &'static str,
    ranks: usize,
    ranks_per_node: usize,
    nodes: usize,
    records: u64,
    epochs: u64,
    steps: u64,
    mb_per_s: f64,
    records_per_s: f64,
    time_to_first_batch_s: f64,
    seconds: f64,
    bytes_delivered: u64,
    bytes_read_per_node: f64,
    read_requests_per_node: f64,
    file_opens_per_node: f64,
    index_pages_bytes_per_node: f64,
}

pub fn run(args: &Args) -> Result<(), CommandError> {
    // MPI_THREAD_MULTIPLE lets the engine overlap collective reads with
    // the ranks' work on a helper thread.
    let Some((universe, _level)) = mpi::initialize_with_threading(mpi::Threading::Multiple) else {
        return Err(CommandError::Usage("MPI was already initialised".into()));
    };
    let world = universe.world();
    let mut options = engine_options(args)?;
    if let Some(path) = &args.resume {
        let bytes = std::fs::read(path)?;
        // Every rank reads the same file, so every rank reaches the same
        // verdict here and none is left waiting in a collective call.
        let saved = bytes.len() / CURSOR_BYTES;
        if saved != world.size() as usize {
            return Err(CommandError::Usage(format!(
                "{}: holds cursors of {saved} ranks, this job has {} (re-partitioning to another rank count is not supported yet)",
                path.display(),
                world.size()
            )));
        }
        let mine = bytes
            .chunks(CURSOR_BYTES)
            .nth(world.rank() as usize)
            .ok_or_else(|| {
                CommandError::Usage(format!(
                    "{}: no cursor for rank {}",
                    path.display(),
                    world.rank()
                ))
            })?;
        options.resume = Some(Cursor::decode(mine)?);
    }
    let opened = Instant::now();
    // The steps this run takes follow from the schedule (which needs the
    // record count); telling the engine keeps it from reading past them.
    let mut engine = Engine::open(world.as_raw(), &args.db, options)?;
    let total = steps_for_epochs(engine.schedule(), args.epochs);
    let first_step = engine.step();
    let steps = match args.stop_after {
        Some(k) => total.min(first_step + k),
        None => total,
    };
    engine.set_step_limit(steps);
    let steps = steps.saturating_sub(first_step);

    let mut trace = match &args.trace {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            Some(BufWriter::new(File::create(
                dir.join(format!("rank-{}.tsv", engine.rank())),
            )?))
        }
        None => None,
    };
    let mut checksum = 0u64;
    let mut first_batch = None;
    let mut delivered = 0u64;
    let mut records = 0u64;
    for _ in 0..steps {
        let batch = engine.next_batch()?;
        for (i, rec) in batch.records().iter().enumerate() {
            let value = batch.value(i);
            // Touch every byte so no method wins by not reading.
            checksum = value
                .iter()
                .fold(checksum, |h, &b| h.rotate_left(5) ^ b as u64);
            if rec.epoch >= args.epochs {
                continue;
            }
            delivered += value.len() as u64;
            records += 1;
            if let Some(t) = trace.as_mut() {
                if args.epochs > 1 {
                    write!(t, "{} ", rec.epoch)?;
                }
                writeln!(
                    t,
                    "{} {} {}",
                    hex(batch.key(i)),
                    value.len(),
                    hex(&Sha256::digest(value))
                )?;
            }
        }
        first_batch.get_or_insert_with(|| opened.elapsed().as_secs_f64());
        if args.compute_ms > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(args.compute_ms / 1e3));
        }
    }
    if let Some(mut t) = trace {
        t.flush()?;
    }
    if let Some(path) = &args.save_cursor {
        let mine = engine.cursor().encode();
        let mut all = vec![0u8; mine.len() * world.size() as usize];
        world.all_gather_into(&mine[..], &mut all[..]);
        if world.rank() == 0 {
            std::fs::write(path, &all)?;
        }
    }
    let elapsed = opened.elapsed().as_secs_f64();
    std::hint::black_box(checksum);

    let node = engine.node_counters()?;
    let is_master = engine.node_rank() == 0;
    let sum = |v: f64| {
        let mut out = 0.0;
        world.all_reduce_into(&v, &mut out, SystemOperation::sum());
        out
    };
    let max = |v: f64| {
        let mut out = 0.0;
        world.all_reduce_into(&v, &mut out, SystemOperation::max());
        out
    };
    let nodes = sum(if is_master { 1.0 } else { 0.0 });
    let master = |v: u64| if is_master { v as f64 } else { 0.0 };
    let total_bytes = sum(delivered as f64);
    let total_records = sum(records as f64);
    let seconds = max(elapsed);
    let run = Run {
        method: "lmdbio",
        ranks: engine.ranks(),
        ranks_per_node: engine.node_size(),
        nodes: nodes as usize,
        records: engine.records(),
        epochs: args.epochs,
        steps,
        mb_per_s: total_bytes / 1e6 / seconds,
        records_per_s: total_records / seconds,
        time_to_first_batch_s: max(first_batch.unwrap_or(0.0)),
        seconds,
        bytes_delivered: total_bytes as u64,
        bytes_read_per_node: sum(master(node.bytes_read)) / nodes,
        read_requests_per_node: sum(master(node.read_requests)) / nodes,
        file_opens_per_node: sum(master(node.file_opens)) / nodes,
        index_pages_bytes_per_node: sum(master(node.index_bytes_read)) / nodes,
    };
    if world.rank() == 0 {
        print_table(&run);
        if let Some(path) = &args.json {
            let doc = serde_json::json!({ "runs": [run] });
            std::fs::write(
                path,
                serde_json::to_vec_pretty(&doc).map_err(std::io::Error::other)?,
            )?;
        }
    }
    drop(engine);
    Ok(())
}

fn engine_options(args: &Args) -> Result<EngineOptions, CommandError> {
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
        stagger: args.stagger,
        collective: !args.independent,
        hints,
        overlap: !args.no_overlap,
        step_limit: None,
        shuffle_seed: args.shuffle,
        shuffle_chunk: args.shuffle_chunk,
        shuffle_window_chunks: args.shuffle_window,
        resume: None,
    })
}

/// Steps every rank must take so that every record of epochs `0..epochs`
/// reaches its rank (collective calls: all ranks take the same number).
fn steps_for_epochs(s: &Schedule, epochs: u64) -> u64 {
    if s.records == 0 {
        return epochs;
    }
    let done = |rank: u64, t: u64| {
        let slots = s.batch_slots(rank, t);
        slots.is_empty() && s.tail == Tail::Wrap || slots.first().is_some_and(|x| x.epoch >= epochs)
    };
    (0..s.ranks)
        .map(|rank| {
            // Slots never go back an epoch, so search for the first step
            // that starts at or past `epochs`.
            let (mut lo, mut hi) = (0u64, 1u64);
            while !done(rank, hi) {
                hi *= 2;
            }
            while lo < hi {
                let mid = (lo + hi) / 2;
                if done(rank, mid) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            lo
        })
        .max()
        .unwrap_or(0)
}

fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}

fn print_table(r: &Run) {
    let mib = |b: f64| b / (1 << 20) as f64;
    println!(
        "{:<8} {:>5} {:>5} {:>9} {:>11} {:>9} {:>12} {:>10} {:>6}",
        "method",
        "ranks",
        "/node",
        "MB/s",
        "records/s",
        "first(s)",
        "read/node",
        "req/node",
        "opens"
    );
    println!(
        "{:<8} {:>5} {:>5} {:>9.1} {:>11.0} {:>9.3} {:>9.1}MiB {:>10.0} {:>6.0}",
        r.method,
        r.ranks,
        r.ranks_per_node,
        r.mb_per_s,
        r.records_per_s,
        r.time_to_first_batch_s,
        mib(r.bytes_read_per_node),
        r.read_requests_per_node,
        r.file_opens_per_node
    );
}
