//! Index build: lmdbio's level-by-level tree walk against liblmdb's cursor
//! walk over the same keys, cold and warm, on a bulk-loaded image-sized
//! database and on a small-record one.
//!
//! `cargo bench -p lmdbio-benches --bench index_build`
//!
//! Environment:
//! - `LMDBIO_BENCH_RECORDS`: image records (default 7,700, about 1.5 GB).
//! - `LMDBIO_BENCH_SMALL_RECORDS`: 100-byte records (default 500,000, or
//!   scaled down with `LMDBIO_BENCH_RECORDS` when that is below default).
//! - `LMDBIO_BENCH_REPS`: repetitions of every method and cache state (9).
//! - `LMDBIO_BENCH_DROP_CACHES=0`: cold runs use only `posix_fadvise`.
//!
//! Databases are cached under `target/bench-data/`, results written to
//! `target/bench-results/index_build.json`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Instant;

use lmdb::{Cursor, Environment, EnvironmentFlags, Transaction};
use lmdbio::source::IoSnapshot;
use lmdbio::{Database, IndexOptions, ReadAt};
use lmdbio_benches::{
    bench_data_dir, command_output, ensure_db, env_usize, median_min, read_whole_file, results_dir,
    CacheDrop, CacheDropper, DbSpec, Usage,
};
use serde_json::{json, Value};

/// A 256x256x3 raw Caffe Datum (pixels plus the protobuf framing).
const IMAGE_VALUE_LEN: usize = 196_628;
/// About 1.5 GB of image records.
const DEFAULT_RECORDS: usize = 7_700;
const SMALL_VALUE_LEN: usize = 100;
const DEFAULT_SMALL_RECORDS: usize = 500_000;
const CAFFE_COMMIT: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    /// `Database::open` + `build_index`, default options.
    Lmdbio,
    /// The same with `threads: 1`.
    LmdbioOneThread,
    /// liblmdb cursor walk touching each key and each value's length.
    LiblmdbKeys,
    /// The same with `MDB_NORDAHEAD` (liblmdb's `MADV_RANDOM` on its map):
    /// not what Caffe does, shown for what read-around costs.
    LiblmdbKeysNoReadahead,
    /// liblmdb cursor walk touching every value byte as well.
    LiblmdbValues,
}

const METHODS: [Method; 5] = [
    Method::Lmdbio,
    Method::LmdbioOneThread,
    Method::LiblmdbKeys,
    Method::LiblmdbKeysNoReadahead,
    Method::LiblmdbValues,
];

impl Method {
    fn id(self) -> &'static str {
        match self {
            Method::Lmdbio => "lmdbio_index",
            Method::LmdbioOneThread => "lmdbio_index_threads1",
            Method::LiblmdbKeys => "liblmdb_walk_keys",
            Method::LiblmdbKeysNoReadahead => "liblmdb_walk_keys_nordahead",
            Method::LiblmdbValues => "liblmdb_walk_values",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Method::Lmdbio => "lmdbio index (default)",
            Method::LmdbioOneThread => "lmdbio index (threads 1)",
            Method::LiblmdbKeys => "liblmdb walk: keys+lens",
            Method::LiblmdbKeysNoReadahead => "  same, MDB_NORDAHEAD",
            Method::LiblmdbValues => "liblmdb walk: all bytes",
        }
    }

    fn is_lmdbio(self) -> bool {
        matches!(self, Method::Lmdbio | Method::LmdbioOneThread)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cache {
    Cold,
    Warm,
}

impl Cache {
    fn id(self) -> &'static str {
        match self {
            Cache::Cold => "cold",
            Cache::Warm => "warm",
        }
    }
}

/// What a walk found, to check every method saw the same records.
#[derive(Debug, Default, PartialEq, Eq)]
struct Walked {
    keys: Vec<u8>,
    key_lens: Vec<u16>,
    value_lens: Vec<u32>,
}

/// Tree shape the index found (lmdbio runs only).
#[derive(Debug, Clone, Copy, Default)]
struct TreeShape {
    page_size: u32,
    branch_pages: u64,
    leaf_pages: u64,
    overflow_pages: u64,
    /// Tree pages read to build the index (`index.stats.pages_read`).
    pages_read_for_index: u64,
    index_io: IoSnapshot,
    /// Everything the source served, the two meta-page reads of `open`
    /// included.
    total_io: IoSnapshot,
}

#[derive(Debug, Clone)]
struct Sample {
    wall_s: f64,
    usage: Usage,
    shape: Option<TreeShape>,
    drop: Option<CacheDrop>,
}

fn run_lmdbio(dir: &Path, threads: usize) -> (Sample, Walked) {
    let options = IndexOptions {
        threads,
        ..IndexOptions::default()
    };
    let u0 = Usage::now();
    let t0 = Instant::now();
    let db = Database::open(dir).expect("lmdbio open");
    let tree = db.main_tree().expect("main tree");
    let index = db.build_index(&tree, &options).expect("build index");
    let wall_s = t0.elapsed().as_secs_f64();
    let usage = Usage::now().since(u0);
    let s = &index.stats;
    let shape = TreeShape {
        page_size: index.page_size,
        branch_pages: s.branch_pages,
        leaf_pages: s.leaf_pages,
        overflow_pages: s.overflow_pages,
        pages_read_for_index: s.pages_read,
        index_io: s.io,
        total_io: db.source().counters(),
    };
    let walked = Walked {
        keys: index.keys.clone(),
        key_lens: index.entries.iter().map(|e| e.key_len).collect(),
        value_lens: index.entries.iter().map(|e| e.value_len).collect(),
    };
    drop(index);
    (
        Sample {
            wall_s,
            usage,
            shape: Some(shape),
            drop: None,
        },
        walked,
    )
}

/// Every byte of a value, as a reader that uses the record would.
fn touch(v: &[u8]) -> u64 {
    let mut words = v.chunks_exact(8);
    let mut sum = 0u64;
    for w in &mut words {
        sum = sum.wrapping_add(u64::from_le_bytes(w.try_into().unwrap()));
    }
    for &b in words.remainder() {
        sum = sum.wrapping_add(b as u64);
    }
    sum
}

/// liblmdb's cursor walk, collecting what the index collects: every key and
/// every value's length (and with `all_bytes`, reading every value byte).
fn run_liblmdb(dir: &Path, all_bytes: bool, readahead: bool) -> (Sample, Walked) {
    let mut flags = EnvironmentFlags::READ_ONLY;
    if !readahead {
        flags |= EnvironmentFlags::NO_READAHEAD;
    }
    let u0 = Usage::now();
    let t0 = Instant::now();
    let env = Environment::new()
        .set_flags(flags)
        .open(dir)
        .expect("liblmdb open");
    let db = env.open_db(None).expect("liblmdb main db");
    let entries = env.stat().expect("mdb_env_stat").entries();
    let txn = env.begin_ro_txn().expect("ro txn");
    let mut walked = Walked {
        keys: Vec::new(),
        key_lens: Vec::with_capacity(entries),
        value_lens: Vec::with_capacity(entries),
    };
    let mut sum = 0u64;
    {
        let mut cursor = txn.open_ro_cursor(db).expect("cursor");
        for item in cursor.iter_start() {
            let (k, v) = item.expect("cursor walk");
            walked.keys.extend_from_slice(k);
            walked.key_lens.push(k.len() as u16);
            walked.value_lens.push(v.len() as u32);
            if all_bytes {
                sum = sum.wrapping_add(touch(v));
            }
        }
    }
    black_box(sum);
    let wall_s = t0.elapsed().as_secs_f64();
    let usage = Usage::now().since(u0);
    drop(txn);
    drop(env);
    (
        Sample {
            wall_s,
            usage,
            shape: None,
            drop: None,
        },
        walked,
    )
}

fn run(method: Method, dir: &Path) -> (Sample, Walked) {
    match method {
        Method::Lmdbio => run_lmdbio(dir, 0),
        Method::LmdbioOneThread => run_lmdbio(dir, 1),
        Method::LiblmdbKeys => run_liblmdb(dir, false, true),
        Method::LiblmdbKeysNoReadahead => run_liblmdb(dir, false, false),
        Method::LiblmdbValues => run_liblmdb(dir, true, true),
    }
}

struct BenchDb {
    spec: DbSpec,
    dir: PathBuf,
    data: PathBuf,
    file_len: u64,
    write_secs: f64,
    /// liblmdb's own `mdb_env_stat` of MAIN.
    lmdb_depth: u32,
    lmdb_branch: u64,
    lmdb_leaf: u64,
    lmdb_overflow: u64,
    lmdb_entries: u64,
}

fn prepare(spec: DbSpec) -> BenchDb {
    let (dir, write_secs) = ensure_db(&spec);
    let data = dir.join("data.mdb");
    let file_len = std::fs::metadata(&data).expect("stat data.mdb").len();
    let env = Environment::new()
        .set_flags(EnvironmentFlags::READ_ONLY)
        .open(&dir)
        .expect("liblmdb open");
    let st = env.stat().expect("mdb_env_stat");
    BenchDb {
        spec,
        dir,
        data,
        file_len,
        write_secs,
        lmdb_depth: st.depth(),
        lmdb_branch: st.branch_pages() as u64,
        lmdb_leaf: st.leaf_pages() as u64,
        lmdb_overflow: st.overflow_pages() as u64,
        lmdb_entries: st.entries() as u64,
    }
}

/// Asserts lmdbio read exactly the tree pages liblmdb counts, plus the meta
/// pages at open.
fn check_pages(db: &BenchDb, shape: &TreeShape) {
    let tree = shape.branch_pages + shape.leaf_pages;
    let psize = shape.page_size as u64;
    assert_eq!(
        (shape.branch_pages, shape.leaf_pages),
        (db.lmdb_branch, db.lmdb_leaf),
        "{}: lmdbio's page counts differ from mdb_env_stat",
        db.spec.label
    );
    assert_eq!(
        shape.pages_read_for_index, tree,
        "{}: lmdbio read {} pages for the index, the tree has {} branch + {} leaf",
        db.spec.label, shape.pages_read_for_index, shape.branch_pages, shape.leaf_pages
    );
    assert_eq!(
        shape.index_io.bytes_read,
        tree * psize,
        "{}: index bytes are not whole tree pages",
        db.spec.label
    );
    let open = shape.total_io.since(shape.index_io);
    assert_eq!(
        open.read_requests, 2,
        "{}: open should read the two meta pages",
        db.spec.label
    );
    assert!(open.bytes_read <= 2 * psize);
}

fn drain_and_prime(
    dropper: &mut CacheDropper,
    db: &BenchDb,
    primer: &Path,
    method: Method,
) -> CacheDrop {
    let dropped = dropper.drop_file(&db.data);
    if dropped.drop_caches {
        // drop_caches emptied everything, code and libraries included: fault
        // them back in on a different small database, and bring back the
        // data file's inode and liblmdb's lock file, so the timed run pays
        // only for the data file's pages.
        black_box(run(method, primer));
        let _ = std::fs::metadata(&db.data);
        let _ = std::fs::read(db.dir.join("lock.mdb"));
        dropper.fadvise_only(&db.data);
    }
    dropped
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

fn human(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
    } else if b >= 1 << 20 {
        format!("{:.1} MiB", mib(b))
    } else if b >= 1 << 10 {
        format!("{:.0} KiB", b as f64 / 1024.0)
    } else {
        format!("{b} B")
    }
}

fn median_u64(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    if s.is_empty() {
        0
    } else {
        s[(s.len() - 1) / 2]
    }
}

/// Summary of one method in one cache state.
struct Summary {
    median_s: f64,
    min_s: f64,
    read_bytes: Option<u64>,
    major: u64,
    minor: u64,
}

fn summarize(samples: &[Sample]) -> Summary {
    let walls: Vec<f64> = samples.iter().map(|s| s.wall_s).collect();
    let (median_s, min_s) = median_min(&walls);
    let rb: Option<Vec<u64>> = samples.iter().map(|s| s.usage.read_bytes).collect();
    Summary {
        median_s,
        min_s,
        read_bytes: rb.map(|v| median_u64(&v)),
        major: median_u64(
            &samples
                .iter()
                .map(|s| s.usage.major_faults.max(0) as u64)
                .collect::<Vec<_>>(),
        ),
        minor: median_u64(
            &samples
                .iter()
                .map(|s| s.usage.minor_faults.max(0) as u64)
                .collect::<Vec<_>>(),
        ),
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0 && a.is_finite() && b.is_finite()).then(|| a / b)
}

fn fmt_ratio(r: Option<f64>) -> String {
    match r {
        Some(r) if r >= 0.01 => format!("{r:.3}"),
        Some(r) => format!("{r:.2e}"),
        None => "n/a".into(),
    }
}

fn machine() -> Value {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_total = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .unwrap_or("MemTotal: unknown")
        .trim()
        .to_owned();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let data_dir = bench_data_dir();
    let data_dir = data_dir.to_string_lossy().into_owned();
    json!({
        "available_parallelism": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "nproc": command_output("nproc", &[]),
        "cpu": cpu,
        "mem_total": mem_total,
        "kernel": command_output("uname", &["-srm"]),
        "findmnt": command_output("findmnt", &["-T", &data_dir]),
        "read_ahead_kb": lmdbio_benches::read_ahead_kb(Path::new(&data_dir)),
        "df": command_output("df", &["-h", &data_dir]),
    })
}

fn main() {
    let started = Instant::now();
    let records = lmdbio_benches::env_usize("LMDBIO_BENCH_RECORDS", DEFAULT_RECORDS).max(1);
    let small_default = if records < DEFAULT_RECORDS {
        (records * DEFAULT_SMALL_RECORDS / DEFAULT_RECORDS).clamp(1000, DEFAULT_SMALL_RECORDS)
    } else {
        DEFAULT_SMALL_RECORDS
    };
    let small_records = env_usize("LMDBIO_BENCH_SMALL_RECORDS", small_default).max(1);
    let reps = env_usize("LMDBIO_BENCH_REPS", 9).max(1);
    let try_drop_caches = env_usize("LMDBIO_BENCH_DROP_CACHES", 1) != 0;

    // The data directory must exist for findmnt to describe its file system.
    std::fs::create_dir_all(bench_data_dir()).expect("create bench-data dir");
    let machine = machine();
    println!("index_build benchmark");
    println!(
        "  machine: {} cpus ({}), {}, kernel {}",
        machine["available_parallelism"],
        machine["cpu"].as_str().unwrap_or("?"),
        machine["mem_total"].as_str().unwrap_or("?"),
        machine["kernel"].as_str().unwrap_or("?")
    );
    println!(
        "  data file system (read_ahead_kb {}):\n    {}",
        machine["read_ahead_kb"].as_str().unwrap_or("unknown"),
        machine["findmnt"]
            .as_str()
            .unwrap_or("?")
            .replace('\n', "\n    ")
    );
    println!(
        "  records: {records} image ({IMAGE_VALUE_LEN} B), {small_records} small ({SMALL_VALUE_LEN} B); {reps} repetitions per method and cache state"
    );

    let specs = [
        DbSpec {
            label: "image",
            records,
            value_len: IMAGE_VALUE_LEN,
            commit_every: CAFFE_COMMIT,
            seed: 1,
        },
        DbSpec {
            label: "small",
            records: small_records,
            value_len: SMALL_VALUE_LEN,
            commit_every: CAFFE_COMMIT,
            seed: 2,
        },
    ];
    let primer_spec = DbSpec {
        label: "primer",
        records: 300,
        value_len: 5000,
        commit_every: CAFFE_COMMIT,
        seed: 3,
    };
    let (primer, _) = ensure_db(&primer_spec);
    let dbs: Vec<BenchDb> = specs
        .into_iter()
        .map(|spec| {
            let db = prepare(spec);
            if db.write_secs > 0.0 {
                println!(
                    "  wrote {} ({}) in {:.1} s",
                    db.dir.display(),
                    human(db.file_len),
                    db.write_secs
                );
            } else {
                println!("  reusing {} ({})", db.dir.display(), human(db.file_len));
            }
            db
        })
        .collect();

    let mut dropper = CacheDropper::new(try_drop_caches);
    let mut io_available = true;
    let mut db_results = Vec::new();
    let mut table_rows: Vec<String> = Vec::new();
    let mut ratio_rows: Vec<String> = Vec::new();
    let mut page_rows: Vec<String> = Vec::new();
    let mut drop_used = (false, false);

    for db in &dbs {
        let mut reference: Option<Walked> = None;
        let mut check = |method: Method, walked: Walked| match &reference {
            None => reference = Some(walked),
            Some(r) => assert!(
                *r == walked,
                "{}: {} saw different records than the first run",
                db.spec.label,
                method.label()
            ),
        };
        let mut cache_results = Vec::new();
        let mut db_shape: Option<TreeShape> = None;
        for cache in [Cache::Cold, Cache::Warm] {
            let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); METHODS.len()];
            if cache == Cache::Warm {
                read_whole_file(&db.data);
                // One untimed pass so no method is the first after warming.
                for &m in &METHODS {
                    black_box(run(m, &db.dir));
                }
            }
            for rep in 0..reps {
                // Rotate the order each repetition so no method always runs
                // right after the same other one.
                for k in 0..METHODS.len() {
                    let mi = (rep + k) % METHODS.len();
                    let method = METHODS[mi];
                    let dropped = match cache {
                        Cache::Cold => Some(drain_and_prime(&mut dropper, db, &primer, method)),
                        Cache::Warm => None,
                    };
                    let (mut sample, walked) = run(method, &db.dir);
                    sample.drop = dropped;
                    if let Some(d) = dropped {
                        assert!(
                            d.fadvise,
                            "posix_fadvise(DONTNEED) failed on {}",
                            db.data.display()
                        );
                        drop_used.0 |= d.fadvise;
                        drop_used.1 |= d.drop_caches;
                    }
                    io_available &= sample.usage.read_bytes.is_some();
                    if let Some(shape) = &sample.shape {
                        check_pages(db, shape);
                        db_shape = Some(*shape);
                    }
                    check(method, walked);
                    samples[mi].push(sample);
                }
            }
            let summaries: Vec<Summary> = samples.iter().map(|s| summarize(s)).collect();
            let shape = samples[0][0].shape.expect("lmdbio sample has a shape");
            let mut method_json = Vec::new();
            for (mi, &method) in METHODS.iter().enumerate() {
                let s = &summaries[mi];
                let (req_bytes, reqs, pages) = if method.is_lmdbio() {
                    let sh = samples[mi][0].shape.unwrap();
                    (
                        human(sh.total_io.bytes_read),
                        sh.total_io.read_requests.to_string(),
                        format!("{}+2", sh.pages_read_for_index),
                    )
                } else {
                    ("-".into(), "-".into(), "-".into())
                };
                table_rows.push(format!(
                    "| {:<5} | {:<5} | {:<24} | {:>10.3} | {:>10.3} | {:>10} | {:>6} | {:>8} | {:>10} | {:>7} | {:>7} |",
                    db.spec.label,
                    cache.id(),
                    method.label(),
                    s.median_s * 1e3,
                    s.min_s * 1e3,
                    req_bytes,
                    reqs,
                    pages,
                    s.read_bytes.map_or("n/a".into(), human),
                    s.major,
                    s.minor
                ));
                method_json.push(json!({
                    "method": method.id(),
                    "label": method.label(),
                    "wall_ms_median": s.median_s * 1e3,
                    "wall_ms_min": s.min_s * 1e3,
                    "device_read_bytes_median": s.read_bytes,
                    "major_faults_median": s.major,
                    "minor_faults_median": s.minor,
                    "lmdbio_io": samples[mi][0].shape.map(|sh| json!({
                        "bytes_read": sh.total_io.bytes_read,
                        "read_requests": sh.total_io.read_requests,
                        "index_bytes_read": sh.index_io.bytes_read,
                        "index_read_requests": sh.index_io.read_requests,
                        "pages_read_for_index": sh.pages_read_for_index,
                        "meta_pages_read_at_open": 2,
                    })),
                    "samples": samples[mi].iter().map(|x| json!({
                        "wall_ms": x.wall_s * 1e3,
                        "device_read_bytes": x.usage.read_bytes,
                        "major_faults": x.usage.major_faults,
                        "minor_faults": x.usage.minor_faults,
                        "fadvise": x.drop.map(|d| d.fadvise),
                        "drop_caches": x.drop.map(|d| d.drop_caches),
                    })).collect::<Vec<_>>(),
                }));
            }
            let by = |m: Method| &summaries[METHODS.iter().position(|&x| x == m).unwrap()];
            let (lm, lm1) = (by(Method::Lmdbio), by(Method::LmdbioOneThread));
            let (keys, nora, values) = (
                by(Method::LiblmdbKeys),
                by(Method::LiblmdbKeysNoReadahead),
                by(Method::LiblmdbValues),
            );
            let rb = |s: &Summary| s.read_bytes.map(|b| b as f64).unwrap_or(f64::NAN);
            let req_over_file = ratio(shape.total_io.bytes_read as f64, db.file_len as f64);
            let ratios = json!({
                "time_lmdbio_over_liblmdb_keys": ratio(lm.median_s, keys.median_s),
                "time_lmdbio_threads1_over_liblmdb_keys": ratio(lm1.median_s, keys.median_s),
                "time_lmdbio_over_liblmdb_keys_nordahead": ratio(lm.median_s, nora.median_s),
                "time_lmdbio_over_liblmdb_values": ratio(lm.median_s, values.median_s),
                "device_bytes_lmdbio_over_liblmdb_keys": ratio(rb(lm), rb(keys)),
                "device_bytes_lmdbio_over_liblmdb_keys_nordahead": ratio(rb(lm), rb(nora)),
                "device_bytes_lmdbio_over_liblmdb_values": ratio(rb(lm), rb(values)),
                "lmdbio_requested_bytes_over_file": req_over_file,
            });
            ratio_rows.push(format!(
                "| {:<5} | {:<5} | {:>12} | {:>12} | {:>12} | {:>12} | {:>11} | {:>11} | {:>11} | {:>8} |",
                db.spec.label,
                cache.id(),
                fmt_ratio(ratio(lm.median_s, keys.median_s)),
                fmt_ratio(ratio(lm1.median_s, keys.median_s)),
                fmt_ratio(ratio(lm.median_s, nora.median_s)),
                fmt_ratio(ratio(lm.median_s, values.median_s)),
                fmt_ratio(ratio(rb(lm), rb(keys))),
                fmt_ratio(ratio(rb(lm), rb(nora))),
                fmt_ratio(ratio(rb(lm), rb(values))),
                fmt_ratio(req_over_file),
            ));
            cache_results.push(json!({
                "cache": cache.id(),
                "methods": method_json,
                "ratios": ratios,
            }));
        }
        // Every lmdbio run passed check_pages; report the last.
        let shape = db_shape.expect("lmdbio ran");
        page_rows.push(format!(
            "  {}: lmdbio read {} tree pages for the index (+2 meta pages at open) == {} branch + {} leaf (+2): ok; overflow pages not read: {}; file {} ({} pages), lmdbio read {} in {} requests",
            db.spec.label,
            shape.pages_read_for_index,
            shape.branch_pages,
            shape.leaf_pages,
            shape.overflow_pages,
            human(db.file_len),
            db.file_len / shape.page_size as u64,
            human(shape.total_io.bytes_read),
            shape.total_io.read_requests,
        ));
        db_results.push(json!({
            "label": db.spec.label,
            "path": db.dir,
            "records": db.spec.records,
            "value_len": db.spec.value_len,
            "commit_every": db.spec.commit_every,
            "seed": db.spec.seed,
            "file_bytes": db.file_len,
            "write_seconds": db.write_secs,
            "page_size": shape.page_size,
            "mdb_env_stat": {
                "depth": db.lmdb_depth,
                "branch_pages": db.lmdb_branch,
                "leaf_pages": db.lmdb_leaf,
                "overflow_pages": db.lmdb_overflow,
                "entries": db.lmdb_entries,
            },
            "pages_read_for_index": shape.pages_read_for_index,
            "pages_read_check": format!(
                "{} == {} branch + {} leaf (+2 meta)",
                shape.pages_read_for_index, shape.branch_pages, shape.leaf_pages
            ),
            "pages_read_equals_branch_plus_leaf": shape.pages_read_for_index == shape.branch_pages + shape.leaf_pages,
            "results": cache_results,
        }));
    }

    let cache_method = match drop_used {
        (true, true) => "fsync + posix_fadvise(POSIX_FADV_DONTNEED) on data.mdb, then sync + echo 3 > /proc/sys/vm/drop_caches (code re-faulted on a primer database, data.mdb fadvised again)".to_string(),
        (true, false) => format!(
            "fsync + posix_fadvise(POSIX_FADV_DONTNEED) on data.mdb only (drop_caches: {})",
            dropper.drop_caches_error.as_deref().unwrap_or("not used")
        ),
        _ => "none".to_string(),
    };

    println!();
    println!("cold-cache method: {cache_method}");
    if !io_available {
        println!("/proc/self/io is not available: device read bytes are n/a");
    }
    println!();
    println!("| db    | cache | method                   |  median ms |     min ms | lmdbio req |  reqs |    pages | dev. read  |  majflt |  minflt |");
    println!("|-------|-------|--------------------------|-----------:|-----------:|-----------:|------:|---------:|-----------:|--------:|--------:|");
    for r in &table_rows {
        println!("{r}");
    }
    println!();
    println!("lmdbio req = bytes lmdbio asked of the file (index + the two meta-page reads at open); pages = tree pages read + 2 meta pages;");
    println!("dev. read = read_bytes from /proc/self/io (bytes fetched from storage, readahead included); faults from getrusage; medians of {reps} runs.");
    println!();
    println!("ratios (medians, same run):");
    println!("(lm = lmdbio default, t1 = lmdbio threads 1, keys = liblmdb keys+lens, nora = the same with MDB_NORDAHEAD,");
    println!(" vals = liblmdb all bytes; time = median wall time, dev = median device read bytes, req/file = lmdbio bytes / file size)");
    println!("| db    | cache | time lm/keys | time t1/keys | time lm/nora | time lm/vals | dev lm/keys | dev lm/nora | dev lm/vals | req/file |");
    println!("|-------|-------|-------------:|-------------:|-------------:|-------------:|------------:|------------:|------------:|---------:|");
    for r in &ratio_rows {
        println!("{r}");
    }
    println!();
    for r in &page_rows {
        println!("{r}");
    }

    let out = json!({
        "benchmark": "index_build",
        "command": "cargo bench -p lmdbio-benches --bench index_build",
        "parameters": {
            "image_records": records,
            "image_value_len": IMAGE_VALUE_LEN,
            "small_records": small_records,
            "small_value_len": SMALL_VALUE_LEN,
            "commit_every": CAFFE_COMMIT,
            "repetitions": reps,
        },
        "machine": machine,
        "cold_cache_method": cache_method,
        "fadvise_used": drop_used.0,
        "drop_caches_used": drop_used.1,
        "proc_self_io_available": io_available,
        "databases": db_results,
        "total_seconds": started.elapsed().as_secs_f64(),
    });
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("create bench-results dir");
    let path = dir.join("index_build.json");
    std::fs::write(&path, serde_json::to_string_pretty(&out).unwrap()).expect("write results");
    println!();
    println!(
        "wrote {} ({:.1} s in all)",
        path.display(),
        started.elapsed().as_secs_f64()
    );
}
