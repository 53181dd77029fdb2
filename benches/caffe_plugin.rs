//! Caffe's iterations per second with the stock Data layer against the
//! plugin's LMDBIOData layer (1, 2 and 4 worker threads) and the
//! zero-change mode, on a JPEG-encoded database written by Caffe's own
//! `convert_imageset --encoded`, for a net whose data layer dominates
//! (global pooling, one inner product, softmax loss).
//!
//! Each configuration runs `caffe time` (one process, CPU) several times,
//! interleaved; the median of "Average Forward-Backward" gives iterations
//! per second, reported as a ratio to the stock Data layer of the same run.
//!
//! cargo bench -p lmdbio-benches --bench caffe_plugin
//! (LMDBIO_BENCH_RECORDS, default 10000; LMDBIO_CAFFE_BENCH_ITERS, default
//! 60; LMDBIO_CAFFE_BENCH_REPEATS, default 3)

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use lmdbio_benches::{bench_data_dir, caffe_plugin_or_skip, env_usize, load_average, results_dir};
use lmdbio_testkit::Rng;

const SIDE: usize = 128;
const CROP: usize = 112;
const BATCH: usize = 64;
/// Distinct source images; the list repeats them to reach the record count
/// (every record is still its own JPEG in the database).
const DISTINCT_IMAGES: usize = 500;

struct Config {
    label: &'static str,
    layer: &'static str,
    preload: bool,
    threads: Option<usize>,
}

const CONFIGS: &[Config] = &[
    Config {
        label: "stock Data",
        layer: "Data",
        preload: false,
        threads: None,
    },
    Config {
        label: "zero-change (Data, preloaded)",
        layer: "Data",
        preload: true,
        threads: None,
    },
    Config {
        label: "LMDBIOData, 1 thread",
        layer: "LMDBIOData",
        preload: true,
        threads: Some(1),
    },
    Config {
        label: "LMDBIOData, 2 threads",
        layer: "LMDBIOData",
        preload: true,
        threads: Some(2),
    },
    Config {
        label: "LMDBIOData, 4 threads",
        layer: "LMDBIOData",
        preload: true,
        threads: Some(4),
    },
];

fn main() {
    let Some(plugin) = caffe_plugin_or_skip("caffe_plugin", "convert_imageset") else {
        return;
    };

    let records = env_usize("LMDBIO_BENCH_RECORDS", 10_000);
    // A small database is the smoke run of scripts/test.sh: keep it short.
    let full = records >= 10_000;
    let iterations = env_usize("LMDBIO_CAFFE_BENCH_ITERS", if full { 60 } else { 8 });
    let repeats = env_usize("LMDBIO_CAFFE_BENCH_REPEATS", if full { 3 } else { 1 });
    let db = jpeg_lmdb(records);
    let work = lmdbio_testkit::TempDir::new().unwrap();
    println!(
        "caffe_plugin: {records} JPEG records ({SIDE}x{SIDE}x3, crop {CROP}, mirror), batch {BATCH}, \
         `caffe time --iterations {iterations}`, {repeats} run(s) each, interleaved; database {}",
        db.display()
    );

    let load_before = load_average();
    let mut runs: Vec<Vec<Run>> = (0..CONFIGS.len()).map(|_| Vec::new()).collect();
    for _ in 0..repeats {
        for (c, config) in CONFIGS.iter().enumerate() {
            let model = work.path().join(format!("net_{c}.prototxt"));
            std::fs::write(&model, net(&db, config.layer)).unwrap();
            runs[c].push(caffe_time(&plugin, config, &model, iterations));
        }
    }
    let load_after = load_average();
    let summaries: Vec<Summary> = runs.iter().map(|r| Summary::of(r)).collect();
    let stock = &summaries[0];
    println!("load average (1 min) before {load_before}, after {load_after}");
    println!(
        "{:<32} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  all runs (ms/iter)",
        "data path", "best ms", "iter/s", "vs stock", "median ms", "vs stock", "CPU ms"
    );
    let mut rows = Vec::new();
    for (c, config) in CONFIGS.iter().enumerate() {
        let m = &summaries[c];
        let all: Vec<String> = runs[c].iter().map(|r| format!("{:.1}", r.ms)).collect();
        println!(
            "{:<32} {:>9.1} {:>9.2} {:>8.2}x {:>9.1} {:>8.2}x {:>9.1}  {}",
            config.label,
            m.best_ms,
            1000.0 / m.best_ms,
            stock.best_ms / m.best_ms,
            m.median_ms,
            stock.median_ms / m.median_ms,
            m.cpu_ms,
            all.join(" ")
        );
        rows.push(serde_json::json!({
            "config": config.label,
            "best_ms_per_iter": m.best_ms,
            "best_iter_per_s": 1000.0 / m.best_ms,
            "best_ratio_to_stock": stock.best_ms / m.best_ms,
            "median_ms_per_iter": m.median_ms,
            "median_ratio_to_stock": stock.median_ms / m.median_ms,
            "median_cpu_ms_per_iter": m.cpu_ms,
            "runs_ms_per_iter": runs[c].iter().map(|r| r.ms).collect::<Vec<_>>(),
            "runs_cpu_ms_per_iter": runs[c].iter().map(|r| r.cpu_ms).collect::<Vec<_>>(),
        }));
    }
    let json = serde_json::json!({
        "records": records,
        "iterations": iterations,
        "repeats": repeats,
        "batch": BATCH,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "configs": rows,
    });
    std::fs::create_dir_all(results_dir()).unwrap();
    let out = results_dir().join("caffe_plugin.json");
    std::fs::write(&out, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    println!("results: {}", out.display());
}

/// One `caffe time` run.
struct Run {
    /// "Average Forward-Backward": wall milliseconds per iteration.
    ms: f64,
    /// CPU time (user + system, all threads) of the whole process per
    /// iteration, set-up included.
    cpu_ms: f64,
}

struct Summary {
    best_ms: f64,
    median_ms: f64,
    cpu_ms: f64,
}

impl Summary {
    fn of(runs: &[Run]) -> Summary {
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        Summary {
            best_ms: runs.iter().map(|r| r.ms).fold(f64::INFINITY, f64::min),
            median_ms: median(runs.iter().map(|r| r.ms).collect()),
            cpu_ms: median(runs.iter().map(|r| r.cpu_ms).collect()),
        }
    }
}

/// CPU seconds used by terminated children so far.
fn children_cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Runs `caffe time` once.
fn caffe_time(plugin: &Path, config: &Config, model: &Path, iterations: usize) -> Run {
    let mut cmd = Command::new("caffe");
    cmd.arg("time")
        .arg(format!("--model={}", model.display()))
        .arg(format!("--iterations={iterations}"));
    if config.preload {
        cmd.env("LD_PRELOAD", plugin);
    }
    if let Some(t) = config.threads {
        cmd.env("LMDBIO_CAFFE_THREADS", t.to_string());
    }
    let cpu_before = children_cpu_seconds();
    let out = cmd.output().expect("run caffe time");
    let cpu = children_cpu_seconds() - cpu_before;
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{}: caffe time failed:\n{log}",
        config.label
    );
    let ms = log
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once("Average Forward-Backward: ")?;
            rest.trim_end_matches(" ms.").trim().parse().ok()
        })
        .unwrap_or_else(|| panic!("{}: no timing in:\n{log}", config.label));
    Run {
        ms,
        cpu_ms: cpu * 1000.0 / iterations as f64,
    }
}

fn net(db: &Path, layer: &str) -> String {
    format!(
        r#"name: "data_bound"
layer {{ name: "data" type: "{layer}" top: "data" top: "label"
  transform_param {{ scale: 0.00390625 mirror: true crop_size: {CROP} }}
  data_param {{ source: "{}" batch_size: {BATCH} backend: LMDB }} }}
layer {{ name: "pool" type: "Pooling" bottom: "data" top: "pool"
  pooling_param {{ pool: AVE global_pooling: true }} }}
layer {{ name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
  inner_product_param {{ num_output: 10 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }}
"#,
        db.display()
    )
}

/// The JPEG database, made once and cached under target/bench-data.
fn jpeg_lmdb(records: usize) -> PathBuf {
    let db = bench_data_dir().join(format!("caffe-jpeg-{records}-{SIDE}"));
    if db.join("data.mdb").exists() {
        return db;
    }
    let images = lmdbio_testkit::TempDir::new().unwrap();
    let mut rng = Rng::new(2026);
    for i in 0..DISTINCT_IMAGES.min(records) {
        std::fs::write(images.path().join(format!("{i}.ppm")), photo_like(&mut rng)).unwrap();
    }
    let mut list = String::new();
    for r in 0..records {
        writeln!(list, "{}.ppm {}", r % DISTINCT_IMAGES, r % 10).unwrap();
    }
    let list_path = images.path().join("list.txt");
    std::fs::write(&list_path, list).unwrap();
    std::fs::create_dir_all(bench_data_dir()).unwrap();
    let partial = db.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    lmdbio_testkit::caffe_data::run_caffe_tool(
        Command::new("convert_imageset")
            .args(["--encoded", "--encode_type=jpg"])
            .arg(format!("{}/", images.path().display()))
            .arg(&list_path)
            .arg(&partial),
    );
    std::fs::rename(&partial, &db).unwrap();
    db
}

/// A binary PPM with smooth gradients, blobs and mild noise: JPEG sizes and
/// decode costs like small photographs, not like white noise.
fn photo_like(rng: &mut Rng) -> Vec<u8> {
    let mut ppm = format!("P6\n{SIDE} {SIDE}\n255\n").into_bytes();
    let blobs: Vec<(f64, f64, f64, [f64; 3])> = (0..6)
        .map(|_| {
            (
                rng.below(SIDE as u64) as f64,
                rng.below(SIDE as u64) as f64,
                8.0 + rng.below(30) as f64,
                [
                    rng.below(256) as f64,
                    rng.below(256) as f64,
                    rng.below(256) as f64,
                ],
            )
        })
        .collect();
    for y in 0..SIDE {
        for x in 0..SIDE {
            for (ch, base) in [x, y, (x + y) / 2].into_iter().enumerate() {
                let mut v = base as f64 * 255.0 / SIDE as f64 * 0.5;
                for &(bx, by, r, colour) in &blobs {
                    let d2 = (x as f64 - bx).powi(2) + (y as f64 - by).powi(2);
                    v += colour[ch] * (-d2 / (r * r)).exp() * 0.6;
                }
                v += rng.below(16) as f64 - 8.0;
                ppm.push(v.clamp(0.0, 255.0) as u8);
            }
        }
    }
    ppm
}
