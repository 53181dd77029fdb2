//! The Caffe plugin with the real Caffe 1.0 binary (Debian 11's `caffe`):
//! databases written by Caffe's own `convert_mnist_data` and
//! `convert_imageset`, training runs of a small LeNet-style net with the
//! stock Data layer and with `libcaffe_lmdbio.so` preloaded in both modes,
//! under real mpiexec.
//!
//! Without Caffe (or its headers, so the plugin was not built) the tests say
//! so and pass, unless `LMDBIO_REQUIRE_CAFFE` is set (as in
//! `scripts/test.sh`), when they fail.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lmdbio_testkit as kit;

/// Limit of a `caffe train` run; see [`kit::load_scaled`].
const TIMEOUT_SECONDS: u64 = 120;

/// The preloadable library of this build, or `None` (with a message) when
/// Caffe or the plugin is missing and that is allowed.
fn plugin() -> Option<PathBuf> {
    let required = std::env::var("LMDBIO_REQUIRE_CAFFE").is_ok_and(|v| !v.is_empty() && v != "0");
    // The condition under which caffe-plugin/build.rs builds the C++ half.
    let headers = std::env::var("CAFFE_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let missing = if !Path::new(&headers).join("caffe/caffe.hpp").exists() {
        Some(format!(
            "the plugin was not built (no {headers}/caffe/caffe.hpp)"
        ))
    } else if !Path::new("/usr/bin/caffe").exists() {
        Some("/usr/bin/caffe is not installed".to_string())
    } else {
        None
    };
    if let Some(why) = missing {
        assert!(!required, "LMDBIO_REQUIRE_CAFFE is set but {why}");
        eprintln!("SKIPPED: {why}; run scripts/setup.sh");
        return None;
    }
    // Cargo builds the crate (cdylib + rlib) before its tests, into deps/
    // beside this test binary.
    let exe = std::env::current_exe().unwrap();
    let so = exe.parent().unwrap().join("libcaffe_lmdbio.so");
    assert!(so.exists(), "no {}", so.display());
    Some(so)
}

/// How the engine of a test run reads.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Reads {
    Own,
    Collective,
    Direct,
}

/// How Caffe reads its data in a run.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    /// No plugin.
    Stock,
    /// Preloaded, prototxt unchanged (`type: "Data"`).
    ZeroChange,
    /// Preloaded, `type: "LMDBIOData"`.
    Layer,
}

impl Mode {
    fn layer_type(self) -> &'static str {
        match self {
            Mode::Stock | Mode::ZeroChange => "Data",
            Mode::Layer => "LMDBIOData",
        }
    }
}

/// Synthetic 28x28 digits in IDX files, turned into an LMDB by Caffe's own
/// `convert_mnist_data` (keys `%08d`). Class `c` is a noisy bar whose
/// position depends on `c`, so a tiny net learns it within a few dozen
/// iterations.
fn mnist_lmdb(dir: &Path, n: usize, seed: u64) -> PathBuf {
    kit::caffe_data::digits_lmdb(dir, "mnist_lmdb", n, seed, 150, 120)
}

/// `n` 32x32 colour images (binary PPM) of 10 classes, stored PNG-encoded
/// by Caffe's own `convert_imageset --encoded`, with `preload` preloaded
/// if given (writes must go to libcaffe's own LMDB code).
fn encoded_image_lmdb(dir: &Path, n: usize, seed: u64, preload: Option<&Path>) -> PathBuf {
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    let mut rng = kit::Rng::new(seed);
    let mut list = String::new();
    for i in 0..n {
        let class = rng.below(10) as usize;
        let (cx, cy) = (4 + (class % 5) * 5, if class < 5 { 6 } else { 20 });
        let mut ppm = b"P6\n32 32\n255\n".to_vec();
        for y in 0..32 {
            for x in 0..32 {
                let inside = (cx..cx + 8).contains(&x) && (cy..cy + 8).contains(&y);
                for channel in 0..3 {
                    let base: i64 = if inside {
                        120 + 40 * ((class + channel) % 3) as i64
                    } else {
                        50
                    };
                    let noisy = base + rng.below(60) as i64 - 30;
                    ppm.push(noisy.clamp(0, 255) as u8);
                }
            }
        }
        let name = format!("img_{i:05}.ppm");
        std::fs::write(images.join(&name), ppm).unwrap();
        writeln!(list, "{name} {class}").unwrap();
    }
    std::fs::write(dir.join("list.txt"), list).unwrap();
    let db = dir.join("encoded_lmdb");
    let mut cmd = Command::new("convert_imageset");
    if let Some(plugin) = preload {
        cmd.env("LD_PRELOAD", plugin);
    }
    kit::caffe_data::run_caffe_tool(
        cmd.args(["--encoded", "--encode_type=png"])
            .arg(format!("{}/", images.display()))
            .arg(dir.join("list.txt"))
            .arg(&db),
    );
    db
}

struct NetSpec<'a> {
    db: &'a Path,
    transform: &'a str,
    train_batch: usize,
    /// TEST-phase data layer batch and iterations per test, if any.
    test: Option<(usize, usize)>,
    max_iter: usize,
}

/// Writes net and solver prototxt for `mode`; returns the solver's path.
fn write_solver(dir: &Path, name: &str, mode: Mode, spec: &NetSpec) -> PathBuf {
    let data_layer = |layer: &str, phase: &str, batch: usize| {
        format!(
            "layer {{ name: \"{layer}\" type: \"{}\" top: \"data\" top: \"label\" include {{ phase: {phase} }}\n  transform_param {{ {} }}\n  data_param {{ source: \"{}\" batch_size: {batch} backend: LMDB }} }}\n",
            mode.layer_type(),
            spec.transform,
            spec.db.display()
        )
    };
    let mut net = format!("name: \"{name}\"\n");
    net += &data_layer("data", "TRAIN", spec.train_batch);
    if let Some((batch, _)) = spec.test {
        net += &data_layer("test_data", "TEST", batch);
    }
    net += LENET_LAYERS;
    let net_path = dir.join(format!("{name}.prototxt"));
    std::fs::write(&net_path, net).unwrap();
    let mut solver = format!(
        "net: \"{}\"\nbase_lr: 0.02\nmomentum: 0.9\nlr_policy: \"fixed\"\ndisplay: 1\nmax_iter: {}\nrandom_seed: 1234\nsolver_mode: CPU\n",
        net_path.display(),
        spec.max_iter
    );
    if let Some((_, iters)) = spec.test {
        write!(solver, "test_iter: {iters}\ntest_interval: 10\n").unwrap();
    }
    let solver_path = dir.join(format!("{name}_solver.prototxt"));
    std::fs::write(&solver_path, solver).unwrap();
    solver_path
}

/// The layers after the data layers of every net of these tests.
const LENET_LAYERS: &str = r#"layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 8 kernel_size: 5 stride: 1 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "relu1" type: "ReLU" bottom: "pool1" top: "pool1" }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1"
  inner_product_param { num_output: 32 weight_filler { type: "xavier" } } }
layer { name: "relu2" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"#;

/// `caffe train` in one process (no launcher), bounded in time.
fn train(plugin: &Path, mode: Mode, solver: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("timeout");
    let limit = kit::load_scaled(TIMEOUT_SECONDS).to_string();
    cmd.args(["-k", "5", &limit, "caffe", "train"])
        .arg(format!("--solver={}", solver.display()));
    if mode != Mode::Stock {
        cmd.env("LD_PRELOAD", plugin);
    }
    cmd.env("GLOG_log_dir", glog_dir_of(solver));
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run caffe");
    assert_ne!(out.status.code(), Some(124), "caffe hung: {cmd:?}");
    out
}

/// `caffe train` under `mpiexec -n ranks` with the plugin preloaded into
/// caffe only (not into the launcher).
fn train_mpi(plugin: &Path, ranks: usize, solver: &Path, env: &[(&str, &str)]) -> Output {
    // Several processes share the cores: more time than one.
    let mut cmd = kit::mpiexec_within(ranks, Path::new("env"), TIMEOUT_SECONDS + 30);
    cmd.arg(format!("LD_PRELOAD={}", plugin.display()));
    cmd.arg(format!("GLOG_log_dir={}", glog_dir_of(solver).display()));
    for (k, v) in env {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.args(["caffe", "train"])
        .arg(format!("--solver={}", solver.display()));
    kit::run_bounded(cmd)
}

/// Caffe's glog files go beside the solver, in the test's own temporary
/// directory, not by the thousand into /tmp (a later `GLOG_log_dir` in
/// `env` wins).
fn glog_dir_of(solver: &Path) -> &Path {
    solver.parent().unwrap_or(Path::new("."))
}

fn log_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_trained(out: &Output, what: &str) -> String {
    let log = log_of(out);
    assert!(
        out.status.success() && log.contains("Optimization Done."),
        "{what} failed ({}):\n{log}",
        out.status
    );
    log
}

/// The loss values Caffe printed, in order: per-iteration training losses
/// ("Iteration N (...), loss = X" and the final "Iteration N, loss = X")
/// and test-net outputs. Compared as printed text, so equality is exact.
fn printed_losses(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| {
            let tail = line.split_once("] ")?.1;
            let is_loss = (tail.starts_with("Iteration ") && tail.contains("loss = "))
                || tail.starts_with("    Test net output");
            is_loss.then(|| {
                // Drop the timing part, which differs between runs.
                let iteration = tail.split([' ', ',']).nth(1).unwrap_or("");
                let value = tail.rsplit_once("loss = ").map_or(tail, |(_, v)| v);
                format!("{} {iteration} {value}", &tail[..4])
            })
        })
        .collect()
}

fn training_losses(log: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.contains("] Iteration ") && l.contains("), loss = "))
        .filter_map(|l| l.rsplit_once("loss = ")?.1.trim().parse().ok())
        .collect()
}

#[test]
fn both_modes_print_the_stock_losses_iteration_by_iteration() {
    let Some(plugin) = plugin() else { return };
    let work = kit::TempDir::new().unwrap();
    let db = mnist_lmdb(work.path(), 500, 11);
    // 500 records in batches of 64: the TRAIN cursor wraps at iteration 7,
    // and the TEST layer (batch 50, 3 per test) runs alongside.
    let spec = NetSpec {
        db: &db,
        transform: "scale: 0.00390625",
        train_batch: 64,
        test: Some((50, 3)),
        max_iter: 30,
    };
    let mut logs = Vec::new();
    for (mode, env) in [
        (Mode::Stock, &[][..]),
        (Mode::ZeroChange, &[][..]),
        (Mode::Layer, &[("LMDBIO_CAFFE_THREADS", "3")][..]),
        (Mode::Layer, &[("LMDBIO_CAFFE_THREADS", "1")][..]),
        (Mode::ZeroChange, &[("LMDBIO_CAFFE_DISABLE", "1")][..]),
    ] {
        let solver = write_solver(work.path(), &format!("lenet_{}", logs.len()), mode, &spec);
        let log = assert_trained(
            &train(&plugin, mode, &solver, env),
            &format!("{mode:?} {env:?}"),
        );
        logs.push((mode, env, log));
    }
    let stock = printed_losses(&logs[0].2);
    // 31 training lines (iterations 0..=30) and 4 tests of one output.
    assert_eq!(stock.len(), 31 + 4, "unexpected stock log:\n{}", logs[0].2);
    // The comparison below is of real values ("Iter 7 2.0714", and for a
    // test output its value and weighted value), not of empty strings.
    let distinct: HashSet<&String> = stock.iter().collect();
    assert!(distinct.len() > 30, "{stock:?}");
    let losses = training_losses(&logs[0].2);
    assert!(
        losses[losses.len() - 1] < 0.8 * losses[0],
        "the stock run did not learn: {losses:?}"
    );
    for (mode, env, log) in &logs[1..] {
        assert_eq!(
            printed_losses(log),
            stock,
            "{mode:?} {env:?} differs from stock"
        );
    }
    // Each run really went where it should.
    assert!(!logs[0].2.contains("lmdbio"));
    assert!(logs[1].2.contains("lmdbio: reading") && !logs[1].2.contains("LMDBIOData"));
    assert!(logs[1]
        .2
        .contains("Restarting data prefetching from start."));
    assert!(logs[2].2.contains("3 worker thread(s)"));
    assert!(logs[3].2.contains("1 worker thread(s)"));
    assert!(!logs[4].2.contains("lmdbio: reading"));
}

#[test]
fn random_crop_and_mirror_on_encoded_images_train() {
    let Some(plugin) = plugin() else { return };
    let work = kit::TempDir::new().unwrap();
    let db = encoded_image_lmdb(work.path(), 300, 12, None);
    let spec = NetSpec {
        db: &db,
        transform: "scale: 0.00390625 mirror: true crop_size: 28",
        train_batch: 32,
        test: None,
        max_iter: 40,
    };
    for mode in [Mode::ZeroChange, Mode::Layer] {
        let solver = write_solver(work.path(), &format!("{mode:?}"), mode, &spec);
        let log = assert_trained(&train(&plugin, mode, &solver, &[]), &format!("{mode:?}"));
        let losses = training_losses(&log);
        assert_eq!(losses.len(), 40, "{mode:?}:\n{log}");
        let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
        let (first, last) = (mean(&losses[..5]), mean(&losses[35..]));
        eprintln!(
            "{mode:?}: mean loss of the first 5 iterations {first:.3}, of the last 5 {last:.3}"
        );
        assert!(
            last < 0.7 * first,
            "{mode:?}: loss did not decrease ({first} -> {last}): {losses:?}"
        );
    }
}

/// A database of `caffe.Datum`s carrying `float_data` (1x8x8), written by
/// liblmdb with `%08d` keys. The Datum wire format is encoded here: fields
/// channels=1, height=2, width=3, label=5 (varints) and float_data=6
/// (unpacked fixed32, as proto2 writes a repeated float).
fn float_data_lmdb(dir: &Path, n: usize, seed: u64) -> PathBuf {
    use lmdb::{Environment, Transaction, WriteFlags};
    let db_path = dir.join("float_lmdb");
    std::fs::create_dir_all(&db_path).unwrap();
    let env = Environment::new()
        .set_map_size(64 << 20)
        .open(&db_path)
        .unwrap();
    let db = env.open_db(None).unwrap();
    let mut txn = env.begin_rw_txn().unwrap();
    let mut rng = kit::Rng::new(seed);
    for i in 0..n {
        let class = rng.below(10) as usize;
        let mut datum = vec![0x08, 1, 0x10, 8, 0x18, 8, 0x28, class as u8];
        for p in 0..64 {
            let on = if class < 5 {
                p / 8 == class
            } else {
                p % 8 == class - 3
            };
            let v = if on { 1.0f32 } else { 0.0 } + (rng.below(1000) as f32 / 1000.0 - 0.5);
            datum.push(0x35);
            datum.extend_from_slice(&v.to_le_bytes());
        }
        txn.put(db, &format!("{i:08}"), &datum, WriteFlags::empty())
            .unwrap();
    }
    txn.commit().unwrap();
    db_path
}

#[test]
fn encoded_and_float_data_records_give_the_stock_losses() {
    let Some(plugin) = plugin() else { return };
    let work = kit::TempDir::new().unwrap();
    // Written by convert_imageset with the plugin preloaded.
    let encoded = encoded_image_lmdb(work.path(), 120, 15, Some(&plugin));
    let floats = float_data_lmdb(work.path(), 150, 16);
    for (db, transform) in [(&encoded, "scale: 0.00390625"), (&floats, "scale: 1")] {
        let spec = NetSpec {
            db,
            transform,
            train_batch: 16,
            test: None,
            max_iter: 12,
        };
        let mut stock = None;
        for (mode, threads) in [
            (Mode::Stock, "1"),
            (Mode::ZeroChange, "1"),
            (Mode::Layer, "3"),
        ] {
            let name = format!("{}_{mode:?}", db.file_name().unwrap().to_str().unwrap());
            let solver = write_solver(work.path(), &name, mode, &spec);
            let out = train(&plugin, mode, &solver, &[("LMDBIO_CAFFE_THREADS", threads)]);
            let losses = printed_losses(&assert_trained(&out, &name));
            assert_eq!(losses.len(), 13, "{name}");
            match &stock {
                None => stock = Some(losses),
                Some(expected) => assert_eq!(&losses, expected, "{name} differs from stock"),
            }
        }
    }
}

/// Keys (hex) logged per rank by `LMDBIO_CAFFE_KEY_LOG`.
fn logged_keys(dir: &Path, ranks: usize) -> Vec<BTreeSet<String>> {
    (0..ranks)
        .map(|r| {
            let text = std::fs::read_to_string(dir.join(format!("rank-{r}.keys")))
                .unwrap_or_else(|e| panic!("rank {r} logged no keys: {e}"));
            text.lines().map(str::to_owned).collect()
        })
        .collect()
}

#[test]
fn ranks_read_disjoint_shares_that_cover_the_database() {
    let Some(plugin) = plugin() else { return };
    let work = kit::TempDir::new().unwrap();
    let records = 240;
    let db = mnist_lmdb(work.path(), records, 13);
    let all: BTreeSet<String> = (0..records)
        .map(|i| {
            format!("{i:08}")
                .bytes()
                .map(|b| format!("{b:02x}"))
                .collect()
        })
        .collect();
    // Batch 16 for 10 iterations (plus prefetch) covers every share of 240
    // records on up to 4 ranks at least once.
    let spec = NetSpec {
        db: &db,
        transform: "scale: 0.00390625",
        train_batch: 16,
        test: Some((8, 2)),
        max_iter: 10,
    };
    // Direct reads where the file system allows them (else through the
    // page cache, which the engine's own tests cover).
    let direct = {
        let data = std::fs::File::open(db.join("data.mdb")).unwrap();
        lmdbio::page_cache::direct_alignment(&data).is_some()
    };
    // (mode, ranks, ranks per virtual node: 2 makes two nodes of 2 on 4
    // ranks, each with its own reader and shared window; how the engine
    // reads: its own reads, collective MPI-IO, or its own reads around
    // the page cache)
    for (mode, ranks, per_node, reads) in [
        (Mode::Layer, 2, "0", Reads::Own),
        (Mode::Layer, 4, "0", Reads::Own),
        (Mode::Layer, 4, "2", Reads::Own),
        (Mode::Layer, 4, "2", Reads::Collective),
        (Mode::Layer, 2, "0", Reads::Direct),
        (Mode::ZeroChange, 2, "0", Reads::Own),
    ] {
        if reads == Reads::Direct && !direct {
            continue;
        }
        let run = format!("{mode:?}_{ranks}_{per_node}_{reads:?}");
        let solver = write_solver(work.path(), &run, mode, &spec);
        let keys = work.path().join(format!("keys_{run}"));
        std::fs::create_dir_all(&keys).unwrap();
        // Every rank logs (data-parallel training logs from rank 0 only).
        let mut env = vec![
            ("LMDBIO_CAFFE_KEY_LOG", keys.to_str().unwrap()),
            ("LMDBIO_CAFFE_LOG_ALL_RANKS", "1"),
        ];
        if per_node != "0" {
            env.push(("LMDBIO_CAFFE_RANKS_PER_NODE", per_node));
        }
        match reads {
            Reads::Own => {}
            Reads::Collective => env.push(("LMDBIO_CAFFE_COLLECTIVE", "1")),
            // Without kept leaf pages, so that the inline values are
            // read (directly) rather than served from the scan's pages.
            Reads::Direct => env.extend([
                ("LMDBIO_CAFFE_DIRECT_IO", "always"),
                ("LMDBIO_CAFFE_INLINE_PAGES", "0"),
            ]),
        }
        let out = train_mpi(&plugin, ranks, &solver, &env);
        let log = assert_trained(&out, &format!("{mode:?} on {ranks} ranks"));
        assert_eq!(
            log.matches("Optimization Done.").count(),
            2 * ranks,
            "every rank must finish:\n{log}"
        );
        if mode == Mode::Layer {
            // The TRAIN layer has the engine: one reader per (virtual) node
            // opens the file. The TEST layer reads its share per rank (one
            // engine per process; see cpp/lmdbio_data_layer.hpp).
            let nodes = if per_node == "0" { 1 } else { ranks / 2 };
            assert_eq!(
                log.matches("(1 file opens, ").count(),
                nodes,
                "{run}: file opens:\n{log}"
            );
            assert_eq!(log.matches("(0 file opens, ").count(), ranks - nodes);
            let direct_reads = log.matches("(1 file opens, 0 direct)").count();
            if reads == Reads::Direct {
                assert_eq!(
                    direct_reads, 0,
                    "{run}: the reader read through the cache:\n{log}"
                );
            } else {
                assert_eq!(direct_reads, nodes, "{run}: direct reads:\n{log}");
            }
            assert_eq!(log.matches("per-rank reader").count(), ranks, "{run}");
        }
        let shares = logged_keys(&keys, ranks);
        let mut seen = HashSet::new();
        for (rank, share) in shares.iter().enumerate() {
            assert_eq!(
                share.len(),
                records / ranks,
                "{mode:?}: rank {rank} of {ranks} read {} distinct records",
                share.len()
            );
            for key in share {
                assert!(
                    seen.insert(key.clone()),
                    "{mode:?}: key {key} read by two ranks"
                );
            }
        }
        let union: BTreeSet<String> = seen.into_iter().collect();
        assert_eq!(
            union, all,
            "{mode:?} on {ranks} ranks: shares do not cover the database"
        );
    }
}

#[test]
fn shuffled_epochs_are_permutations_of_the_database() {
    let Some(plugin) = plugin() else { return };
    let work = kit::TempDir::new().unwrap();
    let records = 240;
    let db = mnist_lmdb(work.path(), records, 17);
    // 14 iterations of 16 plus the prefetched batches: more than one epoch.
    let spec = NetSpec {
        db: &db,
        transform: "scale: 0.00390625",
        train_batch: 16,
        test: None,
        max_iter: 14,
    };
    let mut firsts = Vec::new();
    // The chunked shuffle (the default) and the global one.
    for mode in ["", "global"] {
        let name = format!("shuffled{mode}");
        let solver = write_solver(work.path(), &name, Mode::Layer, &spec);
        let keys = work.path().join(format!("keys{mode}"));
        std::fs::create_dir_all(&keys).unwrap();
        let out = train(
            &plugin,
            Mode::Layer,
            &solver,
            &[
                ("LMDBIO_CAFFE_KEY_LOG", keys.to_str().unwrap()),
                ("LMDBIO_CAFFE_SHUFFLE_SEED", "7"),
                ("LMDBIO_CAFFE_SHUFFLE_MODE", mode),
            ],
        );
        assert_trained(&out, &name);
        let text = std::fs::read_to_string(keys.join("rank-0.keys")).unwrap();
        let delivered: Vec<String> = text.lines().map(str::to_owned).collect();
        assert!(delivered.len() > records, "{} keys", delivered.len());
        let epoch0 = delivered[..records].to_vec();
        let distinct: BTreeSet<&String> = epoch0.iter().collect();
        assert_eq!(distinct.len(), records, "{name}: epoch 0 repeats a record");
        let mut sorted = epoch0.clone();
        sorted.sort_unstable();
        assert_ne!(
            epoch0, sorted,
            "{name}: epoch 0 is in key order: not shuffled"
        );
        firsts.push(epoch0);
    }
    assert_ne!(
        firsts[0], firsts[1],
        "the global shuffle gave the chunked order"
    );
}

/// The glog fatal entry in `line` (`F` and the date, `F1124 08:01:56...`),
/// from its start to the end of the line. Two ranks write to one pipe, so
/// an entry may start in the middle of another rank's line.
fn glog_fatal(line: &str) -> Option<&str> {
    line.match_indices('F')
        .map(|(at, _)| &line[at..])
        .find(|rest| {
            let b = rest.as_bytes();
            b.len() > 6 && b[1..5].iter().all(u8::is_ascii_digit) && b[5] == b' '
        })
}

#[test]
fn a_fatal_entry_is_found_inside_another_ranks_line() {
    let line = "I1124 08:02:04.397213 28064 net.cpp:202] data doesF1124 08:02:04.395923 28076 lmdbio_data_layer.cpp:285] LMDBIOData: bad";
    assert_eq!(
        glog_fatal(line),
        Some("F1124 08:02:04.395923 28076 lmdbio_data_layer.cpp:285] LMDBIOData: bad")
    );
    assert_eq!(glog_fatal("I1124 08:02:04 Found nothing Fatal here"), None);
}

/// The text of every glog file in `dir`.
fn glog_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
        .collect()
}

#[test]
fn damaged_databases_end_the_run_with_a_message() {
    let Some(plugin) = plugin() else { return };
    let work = kit::TempDir::new().unwrap();
    let good = mnist_lmdb(work.path(), 300, 14);

    // Tree pages overwritten: the index build finds them.
    let damaged = work.path().join("damaged_lmdb");
    std::fs::create_dir_all(&damaged).unwrap();
    let mut bytes = std::fs::read(good.join("data.mdb")).unwrap();
    let page = 4096;
    let pages = bytes.len() / page;
    for b in &mut bytes[(pages / 2) * page..(pages / 2 + 3) * page] {
        *b = 0xAB;
    }
    std::fs::write(damaged.join("data.mdb"), &bytes).unwrap();

    // A record that is not a Datum, written by liblmdb among good ones; on
    // two ranks (data-parallel: odd records) it is in rank 1's share only,
    // so rank 0 is left waiting in a collective step (the engine's or the
    // gradient allreduce) when rank 1 stops.
    let bad_record = work.path().join("bad_record_lmdb");
    copy_with_bad_record(&good, &bad_record, 171);

    // A valid LMDB layout lmdbio refuses: duplicate keys (MDB_DUPSORT).
    let dupsort = work.path().join("dupsort_lmdb");
    write_dupsort(&dupsort);

    let missing = work.path().join("no_such_lmdb");
    let cases: [(&Path, Mode, usize, &str); 9] = [
        (&damaged, Mode::ZeroChange, 1, "corrupt"),
        (&damaged, Mode::ZeroChange, 2, "corrupt"),
        (&damaged, Mode::Layer, 1, "corrupt"),
        (&damaged, Mode::Layer, 2, "corrupt"),
        (&missing, Mode::ZeroChange, 1, "no_such_lmdb"),
        (&missing, Mode::Layer, 2, "no_such_lmdb"),
        (&dupsort, Mode::ZeroChange, 1, "unsupported"),
        (&bad_record, Mode::Layer, 1, "is not a caffe.Datum"),
        (&bad_record, Mode::Layer, 2, "is not a caffe.Datum"),
    ];
    for (i, (db, mode, ranks, expect)) in cases.into_iter().enumerate() {
        let spec = NetSpec {
            db,
            transform: "scale: 0.00390625",
            train_batch: 16,
            test: None,
            // Far enough for one process to reach record 171.
            max_iter: 12,
        };
        let solver = write_solver(work.path(), &format!("bad_{i}"), mode, &spec);
        // Each process's own glog files, beside what reaches stderr: a
        // rank's last lines go through the launcher, which may drop them
        // when another rank's MPI_Abort ends the job first; glog writes the
        // FATAL entry to its file before the failure function runs.
        let glog_dir = work.path().join(format!("glog_{i}"));
        std::fs::create_dir_all(&glog_dir).unwrap();
        let env = [("GLOG_log_dir", glog_dir.to_str().unwrap())];
        let out = train_on(&plugin, ranks, &solver, &env);
        let log = log_of(&out);
        let what = format!("{mode:?} on {ranks} rank(s) reading {}", db.display());
        assert!(!out.status.success(), "{what} succeeded:\n{log}");
        let texts: Vec<String> = std::iter::once(log.clone())
            .chain(glog_files(&glog_dir))
            .collect();
        let fatal = texts
            .iter()
            .flat_map(|text| text.lines())
            .find_map(|l| glog_fatal(l).filter(|f| f.contains(expect)))
            .unwrap_or_else(|| panic!("{what}: no fatal log line with {expect:?}:\n{log}"));
        eprintln!("{what}: {fatal}");
        assert!(
            fatal.contains(&db.display().to_string()),
            "{what}: the message does not name the database: {fatal}"
        );
        assert!(
            !log.contains("Segmentation fault"),
            "{what}: crashed:\n{log}"
        );
        if ranks > 1 && db == bad_record.as_path() {
            // Only rank 1 failed; the plugin's glog failure function ended
            // the job instead of leaving rank 0 waiting. It logs so before
            // its MPI_Abort, the only one in the plugin.
            assert!(
                texts
                    .iter()
                    .any(|t| t.contains("libcaffe_lmdbio: rank 1 failed")),
                "{what}: rank 1 did not end the job:\n{log}"
            );
        }
    }
}

/// Copies every record of `from` into a new database, replacing record
/// `bad`'s value with bytes that are not a protobuf message.
fn copy_with_bad_record(from: &Path, to: &Path, bad: usize) {
    use lmdb::{Cursor, Environment, EnvironmentFlags, Transaction, WriteFlags};
    let source = Environment::new()
        .set_flags(EnvironmentFlags::READ_ONLY)
        .open(from)
        .unwrap();
    let records: Vec<(Vec<u8>, Vec<u8>)> = {
        let db = source.open_db(None).unwrap();
        let txn = source.begin_ro_txn().unwrap();
        let mut cursor = txn.open_ro_cursor(db).unwrap();
        cursor
            .iter_start()
            .map(|r| r.unwrap())
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect()
    };
    std::fs::create_dir_all(to).unwrap();
    let target = Environment::new().set_map_size(64 << 20).open(to).unwrap();
    let db = target.open_db(None).unwrap();
    let mut txn = target.begin_rw_txn().unwrap();
    for (i, (k, v)) in records.iter().enumerate() {
        let value: &[u8] = if i == bad {
            &[0xff, 0xff, 0xff, 0xff]
        } else {
            v
        };
        txn.put(db, k, &value, WriteFlags::empty()).unwrap();
    }
    txn.commit().unwrap();
}

/// A database with duplicate keys (`MDB_DUPSORT`), written by liblmdb.
fn write_dupsort(path: &Path) {
    use lmdb::{DatabaseFlags, Environment, Transaction, WriteFlags};
    std::fs::create_dir_all(path).unwrap();
    let env = Environment::new()
        .set_map_size(16 << 20)
        .open(path)
        .unwrap();
    let db = env.create_db(None, DatabaseFlags::DUP_SORT).unwrap();
    let mut txn = env.begin_rw_txn().unwrap();
    for i in 0..50u32 {
        for d in 0..3u32 {
            txn.put(
                db,
                &format!("{i:08}"),
                &d.to_be_bytes(),
                WriteFlags::empty(),
            )
            .unwrap();
        }
    }
    txn.commit().unwrap();
}

// Data-parallel training (caffe-plugin/cpp/data_parallel.cpp): under
// mpiexec the ranks train one model.

/// A data-parallel run of the LeNet above: `train` with `batch` records
/// per rank, tested on all of `test` (an Accuracy output) every
/// `test_interval` iterations by `ranks` ranks together.
struct ParallelRun<'a> {
    train: &'a Path,
    test: &'a Path,
    test_records: usize,
    ranks: usize,
    /// The global batch: `global_batch / ranks` records per rank.
    global_batch: usize,
    max_iter: usize,
    test_interval: usize,
    seed: bool,
    layer: &'a str,
}

/// Writes the net and solver of `run` (snapshots to `dir/name...`).
fn write_parallel_solver(dir: &Path, name: &str, run: &ParallelRun) -> PathBuf {
    let data = |layer: &str, phase: &str, source: &Path, batch: usize| {
        format!(
            "layer {{ name: \"{layer}\" type: \"{}\" top: \"data\" top: \"label\" include {{ phase: {phase} }}\n  transform_param {{ scale: 0.00390625 }}\n  data_param {{ source: \"{}\" batch_size: {batch} backend: LMDB }} }}\n",
            run.layer,
            source.display()
        )
    };
    let test_batch = 100 / run.ranks;
    let mut net = format!("name: \"{name}\"\n");
    net += &data("data", "TRAIN", run.train, run.global_batch / run.ranks);
    net += &data("test_data", "TEST", run.test, test_batch);
    net += LENET_LAYERS;
    net += "layer { name: \"accuracy\" type: \"Accuracy\" bottom: \"ip2\" bottom: \"label\" top: \"accuracy\" include { phase: TEST } }\n";
    let net_path = dir.join(format!("{name}.prototxt"));
    std::fs::write(&net_path, net).unwrap();
    let mut solver = format!(
        "net: \"{}\"\nbase_lr: 0.01\nmomentum: 0.9\nlr_policy: \"fixed\"\ndisplay: 1\nmax_iter: {}\ntest_iter: {}\ntest_interval: {}\nsnapshot_prefix: \"{}\"\nsolver_mode: CPU\n",
        net_path.display(),
        run.max_iter,
        run.test_records / (test_batch * run.ranks),
        run.test_interval,
        dir.join(name).display()
    );
    if run.seed {
        solver += "random_seed: 1234\n";
    }
    let path = dir.join(format!("{name}_solver.prototxt"));
    std::fs::write(&path, solver).unwrap();
    path
}

/// `caffe train` of `solver` on `ranks` ranks (one process without a
/// launcher when 1), with the plugin preloaded.
fn train_on(plugin: &Path, ranks: usize, solver: &Path, env: &[(&str, &str)]) -> Output {
    if ranks == 1 {
        train(plugin, Mode::ZeroChange, solver, env)
    } else {
        train_mpi(plugin, ranks, solver, env)
    }
}

/// The test accuracies Caffe printed, in order.
fn test_accuracies(log: &str) -> Vec<f64> {
    log.lines()
        .filter_map(|l| l.split_once("Test net output #0: accuracy = "))
        .filter_map(|(_, v)| v.trim().parse().ok())
        .collect()
}

fn assert_close(what: &str, ours: &[f64], reference: &[f64], relative: f64) {
    assert!(ours.len() >= reference.len(), "{what}: {ours:?}");
    for (i, (a, b)) in ours.iter().zip(reference).enumerate() {
        assert!(
            (a - b).abs() <= relative * b.abs(),
            "{what}: value {i} is {a}, one process printed {b}"
        );
    }
}

#[test]
fn ranks_train_one_model_like_one_process_with_the_global_batch() {
    let Some(plugin) = plugin() else { return };
    let work = kit::TempDir::new().unwrap();
    // Dim bars in strong noise: the net is still learning (test accuracy
    // about 0.7) after 500 iterations, so a different optimisation shows.
    // 1999 records: no per-rank share is the same from epoch to epoch.
    let train_db = kit::caffe_data::digits_lmdb(work.path(), "train_lmdb", 1999, 21, 70, 400);
    let test_db = kit::caffe_data::digits_lmdb(work.path(), "test_lmdb", 1000, 22, 70, 400);
    let run = |ranks: usize, max_iter: usize, layer: &str, env: &[(&str, &str)]| {
        let spec = ParallelRun {
            train: &train_db,
            test: &test_db,
            test_records: 1000,
            ranks,
            global_batch: 64,
            max_iter,
            test_interval: 100,
            seed: true,
            layer,
        };
        let name = format!("lenet_{ranks}_{layer}_{max_iter}");
        let solver = write_parallel_solver(work.path(), &name, &spec);
        let mut env = env.to_vec();
        env.push(("LMDBIO_CAFFE_SNAPSHOT_ALL_RANKS", "1"));
        let log = assert_trained(
            &train_on(&plugin, ranks, &solver, &env),
            &format!("{ranks} rank(s)"),
        );
        let prefix = work.path().join(&name);
        let model = |suffix: &str| {
            kit::read_file(&PathBuf::from(format!(
                "{}{suffix}_iter_{max_iter}.caffemodel",
                prefix.display()
            )))
        };
        // Every rank ends with the same parameters, byte for byte.
        let rank0 = model("");
        for r in 1..ranks {
            assert!(
                model(&format!("_rank{r}")) == rank0,
                "{ranks} ranks: rank {r}'s parameters differ from rank 0's"
            );
        }
        log
    };

    let one_log = run(1, 500, "Data", &[]);
    let one_losses = training_losses(&one_log);
    let one_accuracy = test_accuracies(&one_log);
    assert_eq!(one_losses.len(), 500, "{one_log}");
    // Tests at 0, 100, ..., 500.
    assert_eq!(one_accuracy.len(), 6, "{one_log}");
    assert!(
        one_accuracy[5] > 0.4 && one_accuracy[5] < 0.95,
        "the task is too easy or too hard to compare: {one_accuracy:?}"
    );

    // (ranks, iterations, data layer, environment): the zero-change mode
    // with the gradients averaged per layer (the default) and in one
    // allreduce, and the LMDBIOData layer (the engine's strided partition).
    for (ranks, max_iter, layer, env) in [
        (2, 500, "Data", &[][..]),
        (4, 200, "Data", &[][..]),
        (2, 100, "Data", &[("LMDBIO_CAFFE_ALLREDUCE", "fused")][..]),
        (4, 100, "LMDBIOData", &[][..]),
    ] {
        let log = run(ranks, max_iter, layer, env);
        let what = format!("{ranks} ranks, {layer} {env:?}");
        assert_eq!(
            log.matches("Starting Optimization").count(),
            1,
            "{what}: ranks other than 0 logged:\n{log}"
        );
        let losses = training_losses(&log);
        assert_eq!(losses.len(), max_iter, "{what}:\n{log}");
        assert_close(
            &format!("{what}: loss"),
            &losses[..50],
            &one_losses[..50],
            1e-3,
        );
        let accuracy = test_accuracies(&log);
        let tests = max_iter / 100 + 1;
        assert_eq!(accuracy.len(), tests, "{what}:\n{log}");
        let last = tests - 1;
        eprintln!(
            "{what}: loss at iteration {} {:.5} (one process {:.5}); test accuracy at {max_iter} {} (one process {})",
            max_iter - 1,
            losses[max_iter - 1],
            one_losses[max_iter - 1],
            accuracy[last],
            one_accuracy[last]
        );
        assert!(
            (accuracy[last] - one_accuracy[last]).abs() <= 0.005,
            "{what}: test accuracy {accuracy:?}, one process {one_accuracy:?}"
        );
    }
}

#[test]
fn unseeded_ranks_start_from_rank_0s_weights_and_only_rank_0_snapshots() {
    let Some(plugin) = plugin() else { return };
    let work = kit::TempDir::new().unwrap();
    let db = mnist_lmdb(work.path(), 300, 23);
    let spec = |ranks: usize, max_iter: usize| ParallelRun {
        train: &db,
        test: &db,
        test_records: 200,
        ranks,
        global_batch: 32,
        max_iter,
        test_interval: 100,
        seed: false,
        layer: "Data",
    };
    // max_iter 0: Caffe snapshots the weights it starts from.
    let initial = |name: &str, suffix: &str| {
        kit::read_file(
            &work
                .path()
                .join(format!("{name}{suffix}_iter_0.caffemodel")),
        )
    };

    // Without a seed, two single-process runs start from different weights.
    let solver = write_parallel_solver(work.path(), "unseeded_1", &spec(1, 0));
    assert_trained(&train_on(&plugin, 1, &solver, &[]), "one process");
    let first = initial("unseeded_1", "");
    assert_trained(&train_on(&plugin, 1, &solver, &[]), "one process again");
    assert!(
        initial("unseeded_1", "") != first,
        "unseeded runs started from the same weights: the comparison below proves nothing"
    );

    // Ranks do not: rank 0's weights reach every rank before training.
    for ranks in [2, 4] {
        let name = format!("unseeded_{ranks}");
        let solver = write_parallel_solver(work.path(), &name, &spec(ranks, 0));
        let out = train_on(
            &plugin,
            ranks,
            &solver,
            &[("LMDBIO_CAFFE_SNAPSHOT_ALL_RANKS", "1")],
        );
        let log = assert_trained(&out, &name);
        assert!(log.contains("rank 0's parameters broadcast"), "{log}");
        let rank0 = initial(&name, "");
        for r in 1..ranks {
            assert!(
                initial(&name, &format!("_rank{r}")) == rank0,
                "{ranks} unseeded ranks: rank {r} started from other weights than rank 0"
            );
        }
    }

    // By default only rank 0 writes snapshots and logs.
    let solver = write_parallel_solver(work.path(), "rank0_only", &spec(2, 5));
    let log = assert_trained(&train_on(&plugin, 2, &solver, &[]), "rank0_only");
    assert_eq!(log.matches("Starting Optimization").count(), 1, "{log}");
    assert!(work.path().join("rank0_only_iter_5.caffemodel").exists());
    assert!(!work
        .path()
        .join("rank0_only_rank1_iter_5.caffemodel")
        .exists());

    // LMDBIO_CAFFE_ALLREDUCE=0: one model per rank, each on a contiguous
    // block, every rank logging.
    let solver = write_parallel_solver(work.path(), "separate", &spec(2, 5));
    let out = train_on(&plugin, 2, &solver, &[("LMDBIO_CAFFE_ALLREDUCE", "0")]);
    let log = assert_trained(&out, "LMDBIO_CAFFE_ALLREDUCE=0");
    assert_eq!(log.matches("Starting Optimization").count(), 2, "{log}");
    assert!(!log.contains("data-parallel"), "{log}");
    assert!(log.contains("records 150..300 of 300"), "{log}");
}

#[test]
fn a_killed_rank_ends_every_rank_with_a_message() {
    let Some(plugin) = plugin() else { return };
    let work = kit::TempDir::new().unwrap();
    let db = mnist_lmdb(work.path(), 300, 24);
    let spec = ParallelRun {
        train: &db,
        test: &db,
        test_records: 200,
        ranks: 2,
        global_batch: 32,
        max_iter: 1_000_000,
        test_interval: 1_000_000,
        seed: true,
        layer: "Data",
    };
    let solver = write_parallel_solver(work.path(), "killed", &spec);
    let log_path = work.path().join("mpiexec.log");
    // Each rank writes its pid (the shell execs caffe, so it is caffe's).
    let script = r#"echo $$ > "$0/rank-${PMI_RANK:-$OMPI_COMM_WORLD_RANK}.pid"; exec env LD_PRELOAD="$1" caffe train --solver="$2""#;
    let mut cmd = kit::mpiexec_within(2, Path::new("sh"), 120);
    cmd.args(["-c", script])
        .arg(work.path())
        .arg(&plugin)
        .arg(&solver)
        .stdout(std::fs::File::create(work.path().join("mpiexec.out")).unwrap())
        .stderr(std::fs::File::create(&log_path).unwrap());
    let mut job = cmd.spawn().expect("start mpiexec");
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let started = std::time::Instant::now();
    while !read_log().contains("] Iteration 20 ") {
        assert!(
            job.try_wait().unwrap().is_none(),
            "training ended early:\n{}",
            read_log()
        );
        assert!(
            started.elapsed().as_secs() < 90,
            "no iteration 20 in 90 s:\n{}",
            read_log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let pid = |rank: usize| {
        std::fs::read_to_string(work.path().join(format!("rank-{rank}.pid")))
            .unwrap()
            .trim()
            .to_string()
    };
    let (survivor, victim) = (pid(0), pid(1));
    let killed = std::time::Instant::now();
    assert!(Command::new("kill")
        .args(["-9", &victim])
        .status()
        .unwrap()
        .success());
    let status = loop {
        if let Some(status) = job.try_wait().unwrap() {
            break status;
        }
        if killed.elapsed().as_secs() > 30 {
            let _ = job.kill();
            let _ = Command::new("kill").args(["-9", &survivor]).status();
            panic!(
                "the job still runs 30 s after rank 1 was killed:\n{}",
                read_log()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // Launchers write their verdicts to either stream.
    let log = read_log() + &std::fs::read_to_string(work.path().join("mpiexec.out")).unwrap();
    eprintln!(
        "the job ended {:.1} s after rank 1 was killed ({status}); its last lines:\n{}",
        killed.elapsed().as_secs_f64(),
        log.lines().rev().take(12).collect::<Vec<_>>().join("\n")
    );
    assert!(!status.success());
    assert_ne!(status.code(), Some(124), "timeout ended the job, not MPI");
    // The launcher names the dead process (MPICH: "BAD TERMINATION ...
    // KILLED BY SIGNAL: 9"; Open MPI: "... exited on signal 9 (Killed)").
    assert!(
        log.contains("SIGNAL: 9") || log.contains("signal 9"),
        "no message about the killed rank:\n{log}"
    );
    // Rank 0 is gone too (not left blocked in an allreduce).
    let gone = std::time::Instant::now();
    while Path::new(&format!("/proc/{survivor}")).exists()
        && !std::fs::read_to_string(format!("/proc/{survivor}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
    {
        assert!(gone.elapsed().as_secs() < 10, "rank 0 still runs");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
