//! Turning each rank's measurements into one row per method, and the table.

use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use serde::Serialize;

use super::sys::ProcessCounters;

/// What one rank measured of one epoch of a method's run.
#[derive(Debug, Clone, Copy, Default)]
pub struct EpochMeasurement {
    pub epoch: u64,
    pub delivered_bytes: u64,
    /// This rank's wall time on the epoch (see `EpochCounters::seconds`).
    pub seconds: f64,
    /// Bytes read from the database file for the epoch.
    pub db_bytes_read: u64,
    /// Bytes read from the node's stage for the epoch.
    pub stage_bytes_read: u64,
    /// Bytes received from other nodes for the epoch.
    pub remote_bytes_received: u64,
}

/// What one rank measured for one method.
#[derive(Debug, Clone, Default)]
pub struct Measurement {
    pub records_in_db: u64,
    pub delivered_bytes: u64,
    pub records: u64,
    pub first_s: f64,
    /// Opening the engine (lmdbio only; 0 elsewhere): part of `first_s`.
    pub open_s: f64,
    pub seconds: f64,
    /// Bytes this rank read from the file (the engine's count, the raw
    /// reader's, or what the kernel fetched for an mmap reader).
    pub bytes_read: u64,
    /// Read requests (mmap readers: major page faults).
    pub read_requests: u64,
    pub file_opens: u64,
    /// Of `read_requests`, those that read the tree for the index
    /// (lmdbio only).
    pub index_read_requests: u64,
    /// 1 on a node's first rank that loaded a saved index (lmdbio only).
    pub index_loaded: u64,
    /// Seconds opening spent on the index (lmdbio only).
    pub index_s: f64,
    /// Of `read_requests`, those read around the page cache (lmdbio only).
    pub direct_read_requests: u64,
    /// Collective read rounds (lmdbio only): each may end a coalesced run.
    pub rounds: u64,
    /// Steps that needed an agreement of their own (lmdbio only; see
    /// `Counters::step_agreements`).
    pub step_agreements: u64,
    /// MPI set-up the engine's open had to make (lmdbio only; see
    /// `Counters::setup_made`).
    pub setup_made: u64,
    /// Reader slots held in `lock.mdb` for the snapshot (lmdbio only; see
    /// `Counters::reader_slots`).
    pub reader_slots: u64,
    /// Seconds the engine waited for its node's reads, and in agreements
    /// with other ranks (lmdbio only: `Counters::io_seconds`,
    /// `wait_seconds`).
    pub read_wait_s: f64,
    pub agreement_wait_s: f64,
    /// The run by epoch, sorted by epoch (a method that reads the file
    /// once, as `raw` does, has one).
    pub per_epoch: Vec<EpochMeasurement>,
    /// Bytes read from the node's stage instead of the file, and the
    /// stage's warnings (lmdbio with `--stage` only).
    pub stage_bytes_read: u64,
    pub stage_warnings: u64,
}

/// The job's shape, for per-node figures.
pub struct Context<'w> {
    pub world: &'w SimpleCommunicator,
    pub node: SimpleCommunicator,
    pub nodes: usize,
}

impl<'w> Context<'w> {
    /// Nodes by shared memory, or `ranks_per_node` consecutive ranks.
    pub fn new(world: &'w SimpleCommunicator, ranks_per_node: Option<usize>) -> Context<'w> {
        let shared = world.split_shared(world.rank());
        let node = match ranks_per_node {
            Some(k) => shared
                .split_by_color(mpi::topology::Color::with_value(
                    shared.rank() / k.max(1) as i32,
                ))
                .expect("every rank has a colour"),
            None => shared,
        };
        let leader = i32::from(node.rank() == 0);
        let mut nodes = 0i32;
        world.all_reduce_into(&leader, &mut nodes, SystemOperation::sum());
        Context {
            world,
            node,
            nodes: nodes as usize,
        }
    }

    pub fn is_node_leader(&self) -> bool {
        self.node.rank() == 0
    }

    /// 0-based index of this rank's node, nodes ordered by their first
    /// world rank. Collective.
    pub fn node_index(&self) -> usize {
        let leader = i32::from(self.is_node_leader());
        let mut before = 0i32;
        self.world
            .exclusive_scan_into(&leader, &mut before, SystemOperation::sum());
        if self.world.rank() == 0 {
            before = 0; // MPI leaves rank 0's exclusive scan undefined
        }
        self.node.process_at_rank(0).broadcast_into(&mut before);
        before as usize
    }

    fn sum(&self, v: f64) -> f64 {
        let mut out = 0.0;
        self.world
            .all_reduce_into(&v, &mut out, SystemOperation::sum());
        out
    }

    pub fn max(&self, v: f64) -> f64 {
        let mut out = 0.0;
        self.world
            .all_reduce_into(&v, &mut out, SystemOperation::max());
        out
    }

    fn sum_all(&self, v: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; v.len()];
        self.world
            .all_reduce_into(v, &mut out[..], SystemOperation::sum());
        out
    }

    fn max_all(&self, v: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; v.len()];
        self.world
            .all_reduce_into(v, &mut out[..], SystemOperation::max());
        out
    }

    /// Collective: one row per epoch from the first to the last that any
    /// rank measured. Bytes are summed over the ranks and given per node;
    /// an epoch's time is its slowest rank's.
    fn per_epoch(&self, mine: &[EpochMeasurement]) -> Vec<EpochRow> {
        let first = -self.max(-(mine.first().map_or(f64::MAX, |e| e.epoch as f64)));
        let end = self.max(mine.last().map_or(0.0, |e| e.epoch as f64 + 1.0));
        if end <= first {
            return Vec::new();
        }
        let (first, end) = (first as u64, end as u64);
        let n = (end - first) as usize;
        let mut fields = vec![0.0; 5 * n];
        let mut seconds = vec![0.0; n];
        for e in mine {
            let i = (e.epoch - first) as usize;
            seconds[i] = e.seconds;
            for (k, v) in [
                e.delivered_bytes,
                e.db_bytes_read,
                e.stage_bytes_read,
                e.remote_bytes_received,
            ]
            .into_iter()
            .enumerate()
            {
                fields[k * n + i] = v as f64;
            }
        }
        let sums = self.sum_all(&fields);
        let seconds = self.max_all(&seconds);
        let nodes = self.nodes.max(1) as f64;
        (0..n)
            .map(|i| EpochRow {
                epoch: first + i as u64,
                mb_per_s: sums[i] / 1e6 / seconds[i].max(1e-9),
                seconds: seconds[i],
                bytes_delivered: sums[i] as u64,
                db_bytes_read_per_node: sums[n + i] / nodes,
                stage_bytes_read_per_node: sums[2 * n + i] / nodes,
                remote_bytes_received_per_node: sums[3 * n + i] / nodes,
            })
            .collect()
    }

    /// Collective: the row for one method (complete on rank 0).
    pub fn summarise(
        &self,
        method: &'static str,
        epochs: u64,
        m: &Measurement,
        process: ProcessCounters,
        cache: Option<String>,
    ) -> Run {
        let seconds = self.max(m.seconds);
        let bytes = self.sum(m.delivered_bytes as f64);
        let nodes = self.nodes.max(1) as f64;
        let mb_per_s = bytes / 1e6 / seconds.max(1e-9);
        Run {
            method,
            ranks: self.world.size() as usize,
            ranks_per_node: self.node.size() as usize,
            nodes: self.nodes,
            records: m.records_in_db,
            epochs,
            mb_per_s,
            records_per_s: self.sum(m.records as f64) / seconds.max(1e-9),
            time_to_first_batch_s: self.max(m.first_s),
            open_s: Some(self.max(m.open_s)).filter(|&s| s > 0.0),
            index_s: Some(self.max(m.index_s)).filter(|&s| s > 0.0),
            seconds,
            bytes_delivered: bytes as u64,
            bytes_read_per_node: self.sum(m.bytes_read as f64) / nodes,
            read_requests_per_node: self.sum(m.read_requests as f64) / nodes,
            file_opens_per_node: self.sum(m.file_opens as f64) / nodes,
            reading_ranks_per_node: self.sum(f64::from(u8::from(m.read_requests > 0))) / nodes,
            index_read_requests_per_node: self.sum(m.index_read_requests as f64) / nodes,
            index_loaded_nodes: self.sum(m.index_loaded as f64) as u64,
            direct_read_requests_per_node: self.sum(m.direct_read_requests as f64) / nodes,
            rounds: self.max(m.rounds as f64) as u64,
            step_agreements: self.max(m.step_agreements as f64) as u64,
            setup_made: self.max(m.setup_made as f64) as u64,
            reader_slots_per_node: self.sum(m.reader_slots as f64) / nodes,
            prepare_s: None,
            stage_bytes_read_per_node: self.sum(m.stage_bytes_read as f64) / nodes,
            stage_warnings: self.sum(m.stage_warnings as f64) as u64,
            read_wait_s_per_rank: self.max(m.read_wait_s),
            agreement_wait_s_per_rank: self.max(m.agreement_wait_s),
            storage_read_bytes_per_node: self.sum(process.storage_read_bytes as f64) / nodes,
            cpu_s_per_node: self.sum(process.cpu_s) / nodes,
            major_faults_per_rank: self.max(process.major_faults as f64),
            minor_faults_per_rank: self.max(process.minor_faults as f64),
            peak_rss_mib_per_rank: self.max(process.peak_rss_kib as f64) / 1024.0,
            cache_drop: cache,
            ratio_to_raw: None,
            ratio_to_lmdb_skip: None,
            repeats: 1,
            mb_per_s_min: mb_per_s,
            mb_per_s_max: mb_per_s,
            per_epoch: self.per_epoch(&m.per_epoch),
        }
    }
}

/// One epoch of a method's run (`runs[].per_epoch[]` in the JSON).
#[derive(Debug, Clone, Default, Serialize)]
pub struct EpochRow {
    pub epoch: u64,
    /// The epoch's bytes delivered over its time.
    pub mb_per_s: f64,
    pub seconds: f64,
    pub bytes_delivered: u64,
    /// Bytes read from the database file for the epoch.
    pub db_bytes_read_per_node: f64,
    /// Bytes read from the node's stage for the epoch.
    pub stage_bytes_read_per_node: f64,
    /// Bytes received from other nodes for the epoch.
    pub remote_bytes_received_per_node: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Run {
    pub method: &'static str,
    pub ranks: usize,
    pub ranks_per_node: usize,
    pub nodes: usize,
    pub records: u64,
    pub epochs: u64,
    pub mb_per_s: f64,
    pub records_per_s: f64,
    pub time_to_first_batch_s: f64,
    /// The slowest rank's `Engine::open` (lmdbio only): file, index and
    /// start point; the rest of the time to the first batch is its read.
    pub open_s: Option<f64>,
    /// Of `open_s`, the slowest rank's time on the index: the scan or
    /// loading a saved index, and publishing it.
    pub index_s: Option<f64>,
    pub seconds: f64,
    pub bytes_delivered: u64,
    pub bytes_read_per_node: f64,
    pub read_requests_per_node: f64,
    pub file_opens_per_node: f64,
    /// Ranks per node that issued any file read.
    pub reading_ranks_per_node: f64,
    pub index_read_requests_per_node: f64,
    /// Nodes that loaded a saved index instead of scanning the tree.
    pub index_loaded_nodes: u64,
    /// Value reads that went around the page cache (direct I/O).
    pub direct_read_requests_per_node: f64,
    pub rounds: u64,
    /// Steps that needed an agreement of their own (most of any rank).
    pub step_agreements: u64,
    /// Blocking MPI set-up the engine's open made (node communicators,
    /// shared window): 0 when kept from an earlier open or `prepare`.
    pub setup_made: u64,
    /// Reader slots the node's readers held in `lock.mdb` for the
    /// snapshot: 0 where a change of the database is only detected (see
    /// docs/reliability.md).
    pub reader_slots_per_node: f64,
    /// The untimed `prepare` before this run, if any: the node set-up
    /// before the first run, the window's memory mapped again before later
    /// ones (the runs of other methods give it back).
    pub prepare_s: Option<f64>,
    /// The longest any rank's engine waited for its node's reads, and in
    /// agreements with other ranks (a rank that does not read waits there
    /// for its node's reader, and a node that finished early for the
    /// slowest).
    pub read_wait_s_per_rank: f64,
    pub agreement_wait_s_per_rank: f64,
    /// Value bytes read from the node's stage instead of the file (see
    /// `--stage`), and the stage's warnings over all nodes.
    pub stage_bytes_read_per_node: f64,
    pub stage_warnings: u64,
    /// What the kernel read from storage for the node's ranks.
    pub storage_read_bytes_per_node: f64,
    /// CPU time (user and system, every thread) the node's ranks used from
    /// before the run's open to after its last batch.
    pub cpu_s_per_node: f64,
    pub major_faults_per_rank: f64,
    pub minor_faults_per_rank: f64,
    /// Largest peak RSS of any rank during this method (the kernel's
    /// high-water mark is reset before each method).
    pub peak_rss_mib_per_rank: f64,
    /// How the page cache was dropped before the run (`--cold`).
    pub cache_drop: Option<String>,
    pub ratio_to_raw: Option<f64>,
    pub ratio_to_lmdb_skip: Option<f64>,
    /// Runs of this method in the invocation (`--repeat`), and the range
    /// of their throughput; the row itself is the median run.
    pub repeats: usize,
    pub mb_per_s_min: f64,
    pub mb_per_s_max: f64,
    /// The run by epoch.
    pub per_epoch: Vec<EpochRow>,
}

/// One row per method, in `methods` order: the run with the median
/// throughput (the lower middle one for an even count), so every field of
/// the row comes from one real run.
pub fn medians(runs: &[Run], methods: &[super::Method]) -> Vec<Run> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for m in methods {
        let name = m.name();
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        let mut mine: Vec<&Run> = runs.iter().filter(|r| r.method == name).collect();
        if mine.is_empty() {
            continue;
        }
        mine.sort_by(|a, b| a.mb_per_s.total_cmp(&b.mb_per_s));
        let mut row = mine[median_index(mine.len())].clone();
        row.repeats = mine.len();
        row.mb_per_s_min = mine[0].mb_per_s;
        row.mb_per_s_max = mine[mine.len() - 1].mb_per_s;
        out.push(row);
    }
    out
}

/// The median's place in `n` sorted values: the lower middle one for an
/// even count, as for the rows.
fn median_index(n: usize) -> usize {
    n.saturating_sub(1) / 2
}

/// The storage limit of an invocation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StorageLimit {
    pub mb_per_s: f64,
    /// `raw` and `raw-node` ran with one rank per node and their runs were
    /// taken as one sample.
    pub pooled: bool,
}

/// The storage limit of an invocation: the better of the raw variants'
/// medians (`rows`, one per method, from [`medians`]).
///
/// With one rank per node, `raw` and `raw-node` make the same reads (every
/// rank is its node's one reader), so their `runs` are one sample of one
/// figure and are pooled into one median. Taking the better of two medians
/// of the same thing would pick whichever the noise favoured: over the 52
/// one-rank-per-node points kept under docs/bench/ by the eighth round,
/// the better median stood 7.7% above the pooled one on average, which
/// charged every other method's ratio with the noise.
fn storage_limit(rows: &[Run], runs: &[Run]) -> Option<StorageLimit> {
    // The shared file system's limit: raw-stage reads the stage's device.
    let is_raw = |r: &&Run| r.method == "raw" || r.method == "raw-node";
    let variants: Vec<&Run> = rows.iter().filter(is_raw).collect();
    let better = variants.iter().map(|r| r.mb_per_s).reduce(f64::max)?;
    let pooled = variants.len() > 1 && variants.iter().all(|r| r.nodes == r.ranks);
    if !pooled {
        return Some(StorageLimit {
            mb_per_s: better,
            pooled,
        });
    }
    let mut all: Vec<f64> = runs.iter().filter(is_raw).map(|r| r.mb_per_s).collect();
    all.sort_by(f64::total_cmp);
    Some(StorageLimit {
        mb_per_s: all[median_index(all.len())],
        pooled,
    })
}

/// Ratios to the storage limit (see [`storage_limit`]) and to lmdb-skip's
/// median, both measured in the same invocation, for the median rows and
/// for every single run. Returns the limit.
pub fn add_ratios(rows: &mut [Run], runs: &mut [Run]) -> Option<StorageLimit> {
    let limit = storage_limit(rows, runs);
    let skip = rows
        .iter()
        .find(|r| r.method == "lmdb-skip")
        .map(|r| r.mb_per_s);
    for r in rows.iter_mut().chain(runs.iter_mut()) {
        r.ratio_to_raw = limit.map(|x| r.mb_per_s / x.mb_per_s);
        r.ratio_to_lmdb_skip = skip.map(|x| r.mb_per_s / x);
    }
    limit
}

pub fn print_table(runs: &[Run], storage_limit: Option<StorageLimit>) {
    let mib = |b: f64| b / (1 << 20) as f64;
    let ratio = |r: Option<f64>| r.map_or("-".to_string(), |v| format!("{v:.2}"));
    println!(
        "{:<10} {:>5} {:>5} {:>8} {:>9} {:>8} {:>10} {:>8} {:>5} {:>8} {:>7} {:>6} {:>6}",
        "method",
        "ranks",
        "/node",
        "MB/s",
        "rec/s",
        "first(s)",
        "read/node",
        "req/node",
        "opens",
        "majflt",
        "rss MiB",
        "/raw",
        "/skip"
    );
    for r in runs {
        println!(
            "{:<10} {:>5} {:>5} {:>8.1} {:>9.0} {:>8.3} {:>7.1}MiB {:>8.0} {:>5.0} {:>8.0} {:>7.1} {:>6} {:>6}",
            r.method,
            r.ranks,
            r.ranks_per_node,
            r.mb_per_s,
            r.records_per_s,
            r.time_to_first_batch_s,
            mib(r.bytes_read_per_node),
            r.read_requests_per_node,
            r.file_opens_per_node,
            r.major_faults_per_rank,
            r.peak_rss_mib_per_rank,
            ratio(r.ratio_to_raw),
            ratio(r.ratio_to_lmdb_skip)
        );
    }
    if runs.iter().any(|r| r.repeats > 1) {
        println!("medians of repeated runs; MB/s ranges:");
        for r in runs {
            println!(
                "  {:<10} {:>8.1} .. {:<8.1} ({} runs)",
                r.method, r.mb_per_s_min, r.mb_per_s_max, r.repeats
            );
        }
    }
    if runs.iter().any(|r| r.per_epoch.len() > 1) {
        println!("per epoch: MB/s, and MiB per node read from the database file, read from the stage, received from other nodes:");
        for r in runs.iter().filter(|r| r.per_epoch.len() > 1) {
            for e in &r.per_epoch {
                println!(
                    "  {:<10} epoch {:>3} {:>8.1} MB/s {:>9.1} db {:>9.1} stage {:>9.1} remote",
                    r.method,
                    e.epoch,
                    e.mb_per_s,
                    mib(e.db_bytes_read_per_node),
                    mib(e.stage_bytes_read_per_node),
                    mib(e.remote_bytes_received_per_node)
                );
            }
        }
    }
    if let Some(limit) = storage_limit {
        println!(
            "storage limit (/raw): {:.1} MB/s, {}",
            limit.mb_per_s,
            if limit.pooled {
                "the median of raw and raw-node together (the same reads at one rank per node)"
            } else {
                "the better raw variant's median"
            }
        );
    }
    if let Some(stage) = runs.iter().find(|r| r.method == "raw-stage") {
        println!(
            "stage limit (raw-stage): {:.1} MB/s, the stage directory's device",
            stage.mb_per_s
        );
    }
    if let Some(c) = runs.first().and_then(|r| r.cache_drop.as_ref()) {
        println!("cold runs: {c} before each method");
    }
}

#[cfg(test)]
mod tests {
    use super::super::Method;
    use super::{add_ratios, medians, storage_limit, Run, StorageLimit};

    /// The limit of an invocation of `all`, its rows made as the bench
    /// makes them.
    fn limit_of(all: &[Run]) -> Option<StorageLimit> {
        storage_limit(&medians(all, &[Method::Raw, Method::RawNode]), all)
    }

    fn limit(mb_per_s: f64, pooled: bool) -> Option<StorageLimit> {
        Some(StorageLimit { mb_per_s, pooled })
    }

    fn run(method: &'static str, ranks: usize, nodes: usize, mb_per_s: f64) -> Run {
        Run {
            method,
            ranks,
            nodes,
            ranks_per_node: ranks / nodes,
            mb_per_s,
            ..Run::default()
        }
    }

    fn runs(ranks: usize, nodes: usize, raw: &[f64], raw_node: &[f64]) -> Vec<Run> {
        let mut out: Vec<Run> = raw.iter().map(|&v| run("raw", ranks, nodes, v)).collect();
        out.extend(raw_node.iter().map(|&v| run("raw-node", ranks, nodes, v)));
        out
    }

    #[test]
    fn one_rank_per_node_pools_both_raw_variants_into_one_median() {
        // The better of the two medians would be 140.
        let all = runs(4, 4, &[100.0, 120.0, 110.0], &[150.0, 130.0, 140.0]);
        assert_eq!(limit_of(&all), limit(120.0, true));
    }

    #[test]
    fn several_ranks_per_node_take_the_better_variant() {
        let all = runs(4, 2, &[100.0, 120.0, 110.0], &[150.0, 130.0, 140.0]);
        assert_eq!(limit_of(&all), limit(140.0, false));
        let all = runs(4, 2, &[300.0, 320.0, 310.0], &[150.0, 130.0, 140.0]);
        assert_eq!(limit_of(&all), limit(310.0, false));
        let only_raw = runs(2, 1, &[90.0, 80.0], &[]);
        assert_eq!(limit_of(&only_raw), limit(80.0, false));
    }

    #[test]
    fn without_raw_runs_there_is_no_limit_and_no_ratio() {
        let mut all = vec![run("lmdbio", 2, 2, 100.0), run("lmdb-skip", 2, 2, 50.0)];
        assert_eq!(limit_of(&all), None);
        let mut rows = all.clone();
        assert_eq!(add_ratios(&mut rows, &mut all), None);
        assert!(rows.iter().chain(&all).all(|r| r.ratio_to_raw.is_none()));
        assert_eq!(rows[0].ratio_to_lmdb_skip, Some(2.0));
    }

    #[test]
    fn every_run_is_measured_against_the_invocation_limit() {
        let mut all = runs(2, 2, &[100.0, 200.0, 300.0], &[]);
        all.push(run("lmdbio", 2, 2, 150.0));
        all.push(run("lmdbio", 2, 2, 250.0));
        let mut rows = vec![all[1].clone(), all[3].clone()];
        assert_eq!(add_ratios(&mut rows, &mut all), limit(200.0, false));
        assert_eq!(rows[1].ratio_to_raw, Some(0.75));
        assert_eq!(all[4].ratio_to_raw, Some(1.25));
        assert_eq!(all[0].ratio_to_raw, Some(0.5));
    }
}
