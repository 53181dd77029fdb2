//! Data-parallel `caffe train` with the plugin (caffe-plugin/cpp/data_parallel.cpp):
//! iterations per second and scaling efficiency at P = 1, 2 and 4 ranks of
//! Debian's stock `caffe` under `mpiexec`, and the time each iteration
//! spends averaging gradients against the rest (the compute).
//!
//! The net is Caffe's MNIST LeNet (conv 20, conv 50, inner products 500 and
//! 10: 431,080 parameters, 1.7 MB of gradients per iteration) on 28x28
//! digits written by Caffe's `convert_mnist_data`, in CPU mode, through the
//! zero-change mode (`type: "Data"`). Weak scaling: 64 records per rank, so
//! P ranks do P times the work per iteration and the efficiency is
//! it/s(P) / it/s(1); strong scaling: a global batch of 64 split over the
//! ranks, efficiency it/s(P) / (P it/s(1)). Every configuration runs
//! `repeats` times, interleaved; medians are reported.
//!
//! cargo bench -p lmdbio-benches --bench caffe_parallel
//! (LMDBIO_BENCH_RECORDS, default 10000; LMDBIO_CAFFE_BENCH_ITERS, default
//! 100; LMDBIO_CAFFE_BENCH_REPEATS, default 3; LMDBIO_MPIEXEC, default
//! mpiexec.mpich)

use std::path::{Path, PathBuf};
use std::process::Command;

use lmdbio_benches::{bench_data_dir, caffe_plugin_or_skip, env_usize, load_average, results_dir};

struct Config {
    label: &'static str,
    ranks: usize,
    batch_per_rank: usize,
    /// `LMDBIO_CAFFE_ALLREDUCE`.
    allreduce: &'static str,
}

const CONFIGS: &[Config] = &[
    Config {
        label: "P=1, batch 64",
        ranks: 1,
        batch_per_rank: 64,
        allreduce: "1",
    },
    Config {
        label: "P=2, 64/rank, per layer",
        ranks: 2,
        batch_per_rank: 64,
        allreduce: "layer",
    },
    Config {
        label: "P=2, 64/rank, fused",
        ranks: 2,
        batch_per_rank: 64,
        allreduce: "fused",
    },
    Config {
        label: "P=4, 64/rank, per layer",
        ranks: 4,
        batch_per_rank: 64,
        allreduce: "layer",
    },
    Config {
        label: "P=4, 64/rank, fused",
        ranks: 4,
        batch_per_rank: 64,
        allreduce: "fused",
    },
    Config {
        label: "P=2, 32/rank, per layer",
        ranks: 2,
        batch_per_rank: 32,
        allreduce: "layer",
    },
    Config {
        label: "P=4, 16/rank, per layer",
        ranks: 4,
        batch_per_rank: 16,
        allreduce: "layer",
    },
];

fn main() {
    let Some(plugin) = caffe_plugin_or_skip("caffe_parallel", "convert_mnist_data") else {
        return;
    };

    let records = env_usize("LMDBIO_BENCH_RECORDS", 10_000);
    // A small database is the smoke run of scripts/test.sh: keep it short.
    let full = records >= 10_000;
    let iterations = env_usize("LMDBIO_CAFFE_BENCH_ITERS", if full { 100 } else { 10 });
    let repeats = env_usize("LMDBIO_CAFFE_BENCH_REPEATS", if full { 3 } else { 1 });
    let db = digits_lmdb(records);
    let work = lmdbio_testkit::TempDir::new().unwrap();
    println!(
        "caffe_parallel: MNIST LeNet, {records} records, {iterations} iterations per run, {repeats} run(s) \
         each, interleaved, on {} CPUs shared by all ranks; database {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        db.display()
    );

    let load_before = load_average();
    let mut runs: Vec<Vec<Run>> = (0..CONFIGS.len()).map(|_| Vec::new()).collect();
    for _ in 0..repeats {
        for (c, config) in CONFIGS.iter().enumerate() {
            let solver = write_solver(work.path(), c, &db, config, iterations);
            runs[c].push(train(&plugin, config, &solver));
        }
    }
    let load_after = load_average();
    println!("load average (1 min) before {load_before}, after {load_after}");
    println!(
        "{:<26} {:>8} {:>8} {:>9} {:>10} {:>11} {:>10}  all runs (iter/s)",
        "configuration", "iter/s", "img/s", "eff.", "ms/iter", "allreduce", "loss avg"
    );
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let one = median(runs[0].iter().map(|r| r.iter_per_s).collect());
    let mut rows = Vec::new();
    for (c, config) in CONFIGS.iter().enumerate() {
        let rate = median(runs[c].iter().map(|r| r.iter_per_s).collect());
        let reduce = median(runs[c].iter().map(|r| r.allreduce_ms).collect());
        let averaging = median(runs[c].iter().map(|r| r.loss_ms).collect());
        let images = rate * (config.ranks * config.batch_per_rank) as f64;
        // Weak scaling (64 per rank): the same work per rank; strong: the
        // same global batch.
        let efficiency = if config.batch_per_rank == 64 {
            rate / one
        } else {
            rate / (one * config.ranks as f64)
        };
        let all: Vec<String> = runs[c]
            .iter()
            .map(|r| format!("{:.1}", r.iter_per_s))
            .collect();
        println!(
            "{:<26} {:>8.2} {:>8.0} {:>9.2} {:>10.1} {:>11.1} {:>10.2}  {}",
            config.label,
            rate,
            images,
            efficiency,
            1000.0 / rate,
            reduce,
            averaging,
            all.join(" ")
        );
        rows.push(serde_json::json!({
            "config": config.label,
            "ranks": config.ranks,
            "batch_per_rank": config.batch_per_rank,
            "allreduce": config.allreduce,
            "median_iter_per_s": rate,
            "median_images_per_s": images,
            "scaling_efficiency": efficiency,
            "median_allreduce_ms_per_iter": reduce,
            "median_loss_averaging_ms_per_iter": averaging,
            "runs_iter_per_s": runs[c].iter().map(|r| r.iter_per_s).collect::<Vec<_>>(),
        }));
    }
    let json = serde_json::json!({
        "records": records,
        "iterations": iterations,
        "repeats": repeats,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "configs": rows,
    });
    std::fs::create_dir_all(results_dir()).unwrap();
    let out = results_dir().join("caffe_parallel.json");
    std::fs::write(&out, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    println!("results: {}", out.display());
}

/// One training run, as rank 0 logged it.
struct Run {
    /// Iterations per second over every display interval but the first
    /// (which holds the start-up).
    iter_per_s: f64,
    /// Milliseconds per iteration in the gradient allreduce (started,
    /// progressed and waited for; a rank's wait for slower ranks
    /// included), and in averaging the loss; 0 on one rank.
    allreduce_ms: f64,
    loss_ms: f64,
}

fn train(plugin: &Path, config: &Config, solver: &Path) -> Run {
    let mut cmd = if config.ranks == 1 {
        Command::new("env")
    } else {
        let launcher = std::env::var("LMDBIO_MPIEXEC").unwrap_or_else(|_| "mpiexec.mpich".into());
        let mut words = launcher.split_whitespace();
        let mut cmd = Command::new(words.next().unwrap());
        cmd.args(words)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .arg("-n")
            .arg(config.ranks.to_string())
            .arg("env");
        cmd
    };
    cmd.arg(format!("LD_PRELOAD={}", plugin.display()))
        .arg(format!("LMDBIO_CAFFE_ALLREDUCE={}", config.allreduce))
        .args(["caffe", "train"])
        .arg(format!("--solver={}", solver.display()));
    let out = cmd.output().expect("run caffe train");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{}: caffe train failed:\n{log}",
        config.label
    );
    // "Iteration 20 (12.3 iter/s, 0.81s/10 iters), loss = ..."
    let intervals: Vec<(usize, f64)> = log
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once("] Iteration ")?;
            let (_, timing) = rest.split_once(", ")?;
            let (seconds, iters) = timing.split_once("s/")?;
            let iters = iters.split_once(" iters)")?.0.parse().ok()?;
            Some((iters, seconds.parse().ok()?))
        })
        .collect();
    assert!(
        intervals.len() >= 2,
        "{}: no timings in:\n{log}",
        config.label
    );
    let (iters, seconds) = intervals[1..]
        .iter()
        .fold((0, 0.0), |(n, s), &(i, t)| (n + i, s + t));
    // "lmdbio: data-parallel on 2 ranks: ... of which 1.2 ms in the
    // gradient allreduce (layer) and 0.3 ms averaging losses ..."
    let field = |after: &str| -> f64 {
        log.lines()
            .filter(|l| l.contains("lmdbio: data-parallel on"))
            .find_map(|l| {
                let (_, rest) = l.split_once(after)?;
                rest.split_whitespace().next()?.parse().ok()
            })
            .unwrap_or(0.0)
    };
    if config.ranks > 1 {
        assert!(
            log.contains("lmdbio: data-parallel on"),
            "{}: no data-parallel summary:\n{log}",
            config.label
        );
    }
    Run {
        iter_per_s: iters as f64 / seconds,
        allreduce_ms: field("ms per iteration, of which "),
        loss_ms: field(") and "),
    }
}

fn write_solver(dir: &Path, c: usize, db: &Path, config: &Config, iterations: usize) -> PathBuf {
    let net = format!(
        r#"name: "LeNet"
layer {{ name: "mnist" type: "Data" top: "data" top: "label" include {{ phase: TRAIN }}
  transform_param {{ scale: 0.00390625 }}
  data_param {{ source: "{}" batch_size: {} backend: LMDB }} }}
layer {{ name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param {{ num_output: 20 kernel_size: 5 stride: 1 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param {{ pool: MAX kernel_size: 2 stride: 2 }} }}
layer {{ name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param {{ num_output: 50 kernel_size: 5 stride: 1 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
  pooling_param {{ pool: MAX kernel_size: 2 stride: 2 }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  inner_product_param {{ num_output: 500 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param {{ num_output: 10 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }}
"#,
        db.display(),
        config.batch_per_rank
    );
    let net_path = dir.join(format!("lenet_{c}.prototxt"));
    std::fs::write(&net_path, net).unwrap();
    let display = (iterations / 5).max(1);
    let solver = format!(
        "net: \"{}\"\nbase_lr: 0.01\nmomentum: 0.9\nweight_decay: 0.0005\nlr_policy: \"fixed\"\n\
         display: {display}\nmax_iter: {iterations}\nsnapshot_after_train: false\nrandom_seed: 1\nsolver_mode: CPU\n",
        net_path.display()
    );
    let path = dir.join(format!("lenet_{c}_solver.prototxt"));
    std::fs::write(&path, solver).unwrap();
    path
}

/// MNIST-like digits (a noisy bar per class) written by Caffe's own
/// `convert_mnist_data`, made once and cached under target/bench-data.
fn digits_lmdb(records: usize) -> PathBuf {
    let db = bench_data_dir().join(format!("caffe-digits-{records}"));
    if db.join("data.mdb").exists() {
        return db;
    }
    let scratch = bench_data_dir().join(format!("caffe-digits-{records}.partial"));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let made = lmdbio_testkit::caffe_data::digits_lmdb(&scratch, "db", records, 2026, 120, 160);
    std::fs::rename(&made, &db).unwrap();
    let _ = std::fs::remove_dir_all(&scratch);
    db
}
