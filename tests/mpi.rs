//! The engine under real `mpiexec`: what all ranks receive in an epoch is
//! liblmdb's records, each exactly once, for many rank counts, node shapes,
//! layouts and read modes; and failures reach every rank without hangs.
//!
//! `LMDBIO_MPIEXEC` picks the launcher (default `mpiexec.mpich`; for Open
//! MPI: `mpiexec.openmpi --oversubscribe`) and `LMDBIO_BIN` the binary built
//! against the same MPI (default: this build's `lmdbio`).

use std::path::{Path, PathBuf};
use std::process::Output;

use lmdbio_testkit::{self as kit, oracle_lines};

/// Runs `lmdbio bench ARGS` on `n` ranks; fails the test on a hang.
fn mpiexec(n: usize, args: &[&str]) -> Output {
    let mut cmd = kit::mpiexec(n, &kit::lmdbio_binary(env!("CARGO_BIN_EXE_lmdbio")));
    cmd.arg("bench").args(args);
    kit::run_bounded(cmd)
}

/// Runs `lmdbio bench ARGS --json FILE` on `n` ranks, requires success and
/// returns the JSON document.
fn bench_json(n: usize, args: &[&str]) -> serde_json::Value {
    let json_dir = kit::TempDir::new().unwrap();
    let json = json_dir.path().join("run.json");
    let mut all = vec!["--json", json.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = mpiexec(n, &all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

/// Held by every test that drops the page cache (`--cold`) or depends on
/// what it holds, since the tests of this file run at once. (Other
/// processes on the machine are not held off: see the direct-reads test.)
fn page_cache_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The median row of `method` in a bench JSON document.
fn method_run<'d>(doc: &'d serde_json::Value, method: &str) -> &'d serde_json::Value {
    doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["method"] == method)
        .unwrap()
}

/// Every rank's trace lines, concatenated and sorted.
fn traced_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        lines.extend(text.lines().map(str::to_owned));
    }
    lines.sort();
    lines
}

fn run_and_trace(fx: &kit::Fixture, n: usize, extra: &[&str]) -> Vec<String> {
    run_and_trace_at(&fx.path, fx.subdb.as_deref(), n, extra)
}

/// Runs the bench with `--trace` on the database at `path` and returns
/// every rank's trace lines, sorted.
fn run_and_trace_at(path: &Path, subdb: Option<&str>, n: usize, extra: &[&str]) -> Vec<String> {
    let trace = kit::TempDir::new().unwrap();
    let mut args: Vec<String> = vec!["--trace".into(), trace.path().display().to_string()];
    if let Some(s) = subdb {
        args.push("-s".into());
        args.push(s.to_owned());
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push(path.display().to_string());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = mpiexec(n, &argv);
    assert!(
        out.status.success(),
        "{}: mpiexec -n {n} {extra:?} failed:\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    traced_lines(trace.path())
}

fn layouts() -> Vec<kit::Fixture> {
    vec![
        kit::caffe_style(1000, 3000, 61),
        kit::inline_only(5000, 62),
        kit::churned(63),
        kit::random_order(700, 64),
        kit::named_databases(65),
    ]
}

#[test]
fn every_record_once_per_epoch_for_ranks_and_node_shapes() {
    let shapes = [
        (1, 1),
        (2, 1),
        (2, 2),
        (3, 1),
        (3, 2),
        (4, 2),
        (4, 4),
        (8, 2),
        (8, 4),
    ];
    for fx in layouts() {
        let oracle = oracle_lines(&fx);
        for (n, per_node) in shapes {
            // Batch 7: record counts are never a multiple of P × batch.
            let k = per_node.to_string();
            let got = run_and_trace(
                &fx,
                n,
                &[
                    "--batch",
                    "7",
                    "--ranks-per-node",
                    &k,
                    "--window",
                    "4000000",
                ],
            );
            assert!(
                got == oracle,
                "{}: -n {n} with {per_node} ranks per node differs from liblmdb",
                fx.name
            );
        }
    }
}

/// Each variant's arguments, on 5 ranks in nodes of 2 with batch 5 and a
/// small window, deliver liblmdb's records.
fn assert_variants_deliver(fx: &kit::Fixture, oracle: &[String], variants: &[&[&str]]) {
    for v in variants {
        let mut args = vec![
            "--batch",
            "5",
            "--ranks-per-node",
            "2",
            "--window",
            "2000000",
        ];
        args.extend_from_slice(v);
        let got = run_and_trace(fx, 5, &args);
        assert!(got == oracle, "{v:?} differs from liblmdb");
    }
}

#[test]
fn read_modes_and_partitions_deliver_the_same_records() {
    let fx = kit::caffe_style(900, 5000, 66);
    let oracle = oracle_lines(&fx);
    let variants: [&[&str]; 13] = [
        &["--partition", "round-robin"],
        &["--partition", "strided"],
        &["--tail", "short", "--partition", "strided"],
        &["--tail", "short", "--partition", "round-robin"],
        &["--collective"],
        &["--readers-per-node", "2", "--stagger", "1"],
        &["--collective", "--readers-per-node", "2", "--stagger", "1"],
        &["--collective", "--stagger", "3"],
        &[
            "--independent",
            "--stagger",
            "2",
            "--prefetch",
            "1",
            "--coalesce",
            "65536",
        ],
        // Many scattered stretches per reader: collective reads through a
        // file view of runs.
        &["--collective", "--partition", "strided", "--max-gap", "0"],
        &["--collective", "--no-overlap", "--partition", "round-robin"],
        &["--no-overlap", "--read-streams", "3"],
        &[
            "--read-streams",
            "5",
            "--coalesce",
            "16384",
            "--max-gap",
            "0",
        ],
    ];
    assert_variants_deliver(&fx, &oracle, &variants);
}

#[test]
fn several_epochs_each_deliver_every_record_once() {
    let fx = kit::inline_only(1003, 67);
    let oracle = oracle_lines(&fx);
    for tail in ["wrap", "short"] {
        let got = run_and_trace(&fx, 3, &["--epochs", "3", "--batch", "10", "--tail", tail]);
        for epoch in 0..3 {
            let prefix = format!("{epoch} ");
            let mut lines: Vec<String> = got
                .iter()
                .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
                .collect();
            lines.sort();
            assert!(
                lines == oracle,
                "tail {tail}: epoch {epoch} differs from liblmdb"
            );
        }
        assert_eq!(got.len(), 3 * oracle.len());
    }
}

#[test]
fn empty_database_reads_nothing_and_ends() {
    let fx = kit::empty();
    let got = run_and_trace(&fx, 3, &["--batch", "4"]);
    assert!(got.is_empty());
}

/// Direct reads (around the page cache, runs widened to whole pages)
/// deliver liblmdb's records in every read shape; `auto` reads directly
/// only what the page cache does not hold; and where direct reads are
/// impossible, asking for them fails clearly on every rank.
#[test]
fn direct_reads_deliver_the_same_records_and_follow_the_page_cache() {
    let _cache = page_cache_lock();
    let fx = kit::caffe_style(900, 5000, 92);
    let path = fx.path.to_str().unwrap();
    let data = std::fs::File::open(fx.data_file()).unwrap();
    // Clean pages, so that --cold can drop them.
    data.sync_all().unwrap();
    let both = mpiexec(2, &["--direct-io", "always", "--collective", path]);
    assert_every_rank_fails(&both, 2, "direct_io=always applies to independent reads");
    let oracle = oracle_lines(&fx);
    // A file system without direct reads (tmpfs: /dev/shm where there is
    // one, else the fixture's own): `always` is refused on every rank,
    // `auto` reads through the cache.
    let shm = kit::TempDir::new_in("/dev/shm").ok();
    let copy = shm.as_ref().map(|d| {
        let copy = d.path().join("data.mdb");
        std::fs::copy(fx.data_file(), &copy).unwrap();
        copy
    });
    for file in copy.iter().chain(std::iter::once(&fx.data_file())) {
        let opened = std::fs::File::open(file).unwrap();
        if lmdbio::page_cache::direct_alignment(&opened).is_some() {
            continue;
        }
        let dir = file.parent().unwrap();
        let out = mpiexec(2, &["--direct-io", "always", dir.to_str().unwrap()]);
        assert_every_rank_fails(&out, 2, "does not support direct reads");
        let got = run_and_trace_at(dir, None, 3, &["--direct-io", "auto", "--cold"]);
        assert!(got == oracle, "auto without direct I/O");
    }
    if lmdbio::page_cache::direct_alignment(&data).is_none() {
        return;
    }
    let variants: [&[&str]; 4] = [
        &["--direct-io", "always"],
        // Many small runs, each widened to its pages, split between two
        // readers.
        &[
            "--direct-io",
            "always",
            "--partition",
            "strided",
            "--max-gap",
            "0",
            "--readers-per-node",
            "2",
        ],
        &[
            "--direct-io",
            "always",
            "--no-overlap",
            "--read-streams",
            "3",
            "--coalesce",
            "16384",
        ],
        &["--direct-io", "never", "--partition", "round-robin"],
    ];
    assert_variants_deliver(&fx, &oracle, &variants);

    // (direct requests, value requests) per node of one run, with k ranks
    // per node: a one-rank node's window is private memory in MPICH, which
    // the bench's prepare asks for in huge pages when direct reads are
    // wanted; a window in small pages is filled through staging buffers in
    // huge pages. Either way direct reads need huge pages.
    let counts = |k: &str, extra: &[&str]| {
        let mut args = vec!["--ranks-per-node", k, "--batch", "6"];
        args.extend_from_slice(extra);
        args.push(path);
        let doc = bench_json(4, &args);
        let run = &doc["runs"][0];
        let f = |k: &str| run[k].as_f64().unwrap();
        (
            f("direct_read_requests_per_node"),
            f("read_requests_per_node") - f("index_read_requests_per_node"),
        )
    };
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let huge_pages = thp.contains("[always]") || thp.contains("[madvise]");
    let cachestat = lmdbio::page_cache::cached_bytes(&data, 0, 4096).is_some();
    let (direct, values) = counts("2", &["--direct-io", "always"]);
    assert!(
        values > 0.0 && direct == values,
        "always: {direct} of {values}"
    );
    for k in ["1", "2"] {
        let (direct, _) = counts(k, &["--direct-io", "never", "--cold"]);
        assert_eq!(direct, 0.0, "never, {k} per node");
    }
    // What auto reads directly depends on two things of the whole
    // machine's, which other jobs on it change: what the page cache holds
    // (another job's drop_caches, as benches/index_build.rs does, or
    // memory pressure empties it) and whether the kernel finds huge pages
    // (fragmented memory). A run is repeated, a few times at most, only
    // where that state has been shown to differ from what the check wants.
    const TRIES: usize = 3;
    let file_len = data.metadata().unwrap().len();
    // Direct reads leave cached pages in the cache, so a file still whole
    // in it after a run was whole during it.
    let whole_in_cache =
        || lmdbio::page_cache::cached_bytes(&data, 0, file_len).is_some_and(|c| c >= file_len);
    // Auto (the default): a file the cache holds is read through it ...
    for extra in [&["--direct-io", "auto"][..], &[]] {
        for tried in 1.. {
            std::fs::read(fx.data_file()).unwrap();
            let (direct, values) = counts("1", extra);
            assert!(values > 0.0, "{extra:?}, cached: no value reads");
            if direct == 0.0 {
                break;
            }
            assert!(
                tried < TRIES && !whole_in_cache(),
                "{extra:?}, cached: {direct} of {values} read directly (try {tried})"
            );
            eprintln!("{extra:?}: the file left the page cache during the run; again");
        }
    }
    // ... and one it does not hold, around it, where the kernel can say
    // and gives huge pages, whether the window is shared or not.
    let huge_pages_now =
        || lmdbio::huge_pages::StagingBuffer::new(lmdbio::huge_pages::HUGE_PAGE).is_some();
    for k in ["1", "2"] {
        for extra in [&["--direct-io", "auto", "--cold"][..], &["--cold"]] {
            for tried in 1.. {
                let (direct, values) = counts(k, extra);
                if !cachestat {
                    assert_eq!(direct, 0.0, "{extra:?}, {k} per node, no cachestat");
                }
                if !cachestat || !huge_pages || direct > 0.0 {
                    break;
                }
                assert!(
                    tried < TRIES && !huge_pages_now(),
                    "{extra:?}, {k} per node: {direct} of {values} (try {tried})"
                );
                eprintln!("{extra:?}, {k} per node: the kernel gives no huge pages now; again");
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }
}

fn bytes_read_per_node(fx: &kit::Fixture, extra: &[&str]) -> f64 {
    let mut args = vec!["--ranks-per-node", "2", "--batch", "8"];
    args.extend_from_slice(extra);
    args.push(fx.path.to_str().unwrap());
    let doc = bench_json(4, &args);
    let run = &doc["runs"][0];
    assert_eq!(run["file_opens_per_node"].as_f64(), Some(1.0));
    run["bytes_read_per_node"].as_f64().unwrap()
}

#[test]
fn only_readers_open_the_file_and_each_byte_is_read_once() {
    let fx = kit::overflow_only(120, 68);
    let file_len = std::fs::metadata(fx.data_file()).unwrap().len() as f64;
    // Two nodes split the values; with the index pages each reads about
    // half the file, never a byte twice. Under the wrap tail each rank's
    // last batch (30 records in batches of 8) would run on into the next
    // epoch: the bench asks for one epoch, and the engine reads nothing of
    // the next. Reading ahead stops at the last step the run takes.
    for tail in ["short", "wrap"] {
        for overlap in [&["--no-overlap"][..], &[]] {
            let mut extra = vec!["--tail", tail];
            extra.extend_from_slice(overlap);
            let per_node = bytes_read_per_node(&fx, &extra);
            assert!(
                per_node * 2.0 <= file_len * 1.01,
                "read {per_node} per node of a {file_len}-byte file ({extra:?})"
            );
            assert!(
                per_node * 2.0 >= file_len * 0.9,
                "read only {per_node} per node of a {file_len}-byte file ({extra:?})"
            );
        }
    }
}

/// Inline values served from the leaf pages the scan kept, from some of
/// them (a budget of a few pages), or from none: liblmdb's records, on
/// inline-only, overflow-only and mixed databases (random insertion order,
/// deletions and updates, named databases), at one to four ranks, shuffled
/// over several epochs too (docs/design/inline-records.md).
#[test]
fn inline_values_from_kept_pages_or_reads_deliver_liblmdb_records() {
    let fixtures = [
        kit::inline_only(4000, 91),
        kit::overflow_only(40, 92),
        kit::random_order(600, 93),
        kit::churned(94),
        kit::named_databases(95),
    ];
    // Kept pages at every shape are in every_record_once_per_epoch_*.
    let (all, few, none) = ("1073741824", "16384", "0");
    // With `prepare` (the bench's default) masters read the kept pages
    // straight into the window; without, the first open holds them in
    // private memory until it makes the window.
    let (window, later) = ("--prepare", "--no-prepare");
    let runs = [
        (1, 1, few, window),
        (2, 1, none, window),
        (2, 1, few, window),
        (3, 1, all, window),
        (4, 2, few, window),
        (4, 2, all, window),
        (2, 1, all, later),
        (4, 2, few, later),
    ];
    for fx in &fixtures {
        let oracle = oracle_lines(fx);
        for (n, per_node, budget, setup) in runs {
            let k = per_node.to_string();
            let mut args = vec![
                "--batch",
                "7",
                "--ranks-per-node",
                &k,
                "--inline-pages",
                budget,
                // Kept pages come from a scan (a saved index skips it).
                "--no-saved-index",
            ];
            if setup == later {
                args.push(later);
            }
            let got = run_and_trace(fx, n, &args);
            assert!(
                got == oracle,
                "{}: -n {n}, {per_node} per node, inline pages {budget} {setup}: differs from liblmdb",
                fx.name
            );
        }
        let got = run_and_trace(
            fx,
            3,
            &[
                "--epochs",
                "2",
                "--shuffle",
                "5",
                "--batch",
                "9",
                "--tail",
                "short",
            ],
        );
        let mut twice: Vec<String> = oracle.iter().chain(&oracle).cloned().collect();
        twice.sort();
        let mut got: Vec<String> = got
            .iter()
            .map(|l| l.split_once(' ').unwrap().1.to_owned())
            .collect();
        got.sort();
        assert!(got == twice, "{}: shuffled epochs differ", fx.name);
    }
}

/// A node reads its share of the leaf pages once: the scan's reads are the
/// values' (the branch pages and a page where shares meet aside), where
/// reading the values again read about twice as much.
#[test]
fn inline_records_are_read_once_per_node() {
    let fx = kit::inline_only(20_000, 96);
    let stat = fx.mdb_stat();
    let psize = lmdbio::Database::open(&fx.path).unwrap().page_size() as f64;
    let leaves = kit::stat_field(&stat, "Leaf pages") as f64 * psize;
    let branches = kit::stat_field(&stat, "Branch pages") as f64 * psize;
    for (n, per_node) in [(2, 1), (4, 2), (3, 1)] {
        let nodes = (n / per_node) as f64;
        let share = leaves / nodes;
        let k = per_node.to_string();
        let read = |budget: &str| {
            let args = [
                "--ranks-per-node",
                &k,
                "--batch",
                "8",
                "--inline-pages",
                budget,
                // What a scan reads (a saved index skips it).
                "--no-saved-index",
                fx.path.to_str().unwrap(),
            ];
            let doc = bench_json(n, &args);
            doc["runs"][0]["bytes_read_per_node"].as_f64().unwrap()
        };
        let kept = read("1073741824");
        assert!(
            kept <= 1.05 * share + branches + 2.0 * psize,
            "-n {n}, {per_node} per node: read {kept} per node for a share of {share}"
        );
        let again = read("0");
        assert!(
            again >= 1.8 * share,
            "-n {n}, {per_node} per node: without kept pages read only {again} for {share}"
        );
    }
}

/// `--raw-buffer` spreads raw's reads over a larger buffer without
/// changing what is read: every byte of the file, once, in 4 MiB requests.
#[test]
fn raw_reads_the_same_bytes_whatever_buffer_it_reads_into() {
    let fx = kit::overflow_only(120, 91);
    let file_len = std::fs::metadata(fx.path.join("data.mdb")).unwrap().len() as f64;
    let run = |buffer: &str| {
        let doc = bench_json(
            2,
            &[
                "--raw-buffer",
                buffer,
                "--method",
                "raw",
                fx.path.to_str().unwrap(),
            ],
        );
        let raw = method_run(&doc, "raw").clone();
        (doc["raw_buffer_bytes"].as_u64(), raw)
    };
    let (small_len, small) = run("4194304");
    let (large_len, large) = run("12582912");
    assert_eq!((small_len, large_len), (Some(4 << 20), Some(12 << 20)));
    for r in [&small, &large] {
        assert_eq!(r["bytes_delivered"].as_f64(), Some(file_len));
    }
    assert_eq!(
        small["read_requests_per_node"].as_f64(),
        large["read_requests_per_node"].as_f64()
    );
}

/// Issue 5's I/O shape: per node one file open and one reading rank, and
/// requests no more than the coalescing target allows (each round and each
/// index read may end a run early), fewer where runs are adjacent.
#[test]
fn one_rank_per_node_reads_and_requests_follow_the_coalescing_target() {
    let fx = kit::overflow_only(120, 91);
    let target: u64 = 1 << 20;
    let target_arg = target.to_string();
    let doc = bench_json(
        4,
        &[
            "--ranks-per-node",
            "2",
            "--batch",
            "6",
            "--coalesce",
            &target_arg,
            "--method",
            "lmdbio",
            "--method",
            "lmdbio-collective",
            "--method",
            "raw",
            fx.path.to_str().unwrap(),
        ],
    );
    // The raw baseline's every-rank variant has both ranks of a node read.
    assert_eq!(
        method_run(&doc, "raw")["reading_ranks_per_node"].as_f64(),
        Some(2.0)
    );
    for method in ["lmdbio", "lmdbio-collective"] {
        let run = method_run(&doc, method);
        let f = |k: &str| run[k].as_f64().unwrap();
        assert_eq!(f("file_opens_per_node"), 1.0, "{method}");
        assert_eq!(
            f("reading_ranks_per_node"),
            1.0,
            "{method}: only the node's reader reads"
        );
        let bound = f("bytes_read_per_node") / target as f64
            + f("rounds")
            + f("index_read_requests_per_node");
        let requests = f("read_requests_per_node");
        assert!(
            requests <= bound.ceil(),
            "{method}: {requests} requests per node, more than the coalescing bound {bound:.1}"
        );
    }
    // Collective reads take adjacent runs in one request: per round, one
    // for each of the node's two ranks' contiguous blocks (a block may
    // wrap to the file's start once, at the end of the epoch).
    let collective = method_run(&doc, "lmdbio-collective");
    let f = |k: &str| collective[k].as_f64().unwrap();
    let stretches = 2.0 * f("rounds") + 2.0 + f("index_read_requests_per_node");
    let requests = f("read_requests_per_node");
    assert!(
        requests <= stretches,
        "{requests} requests per node, more than one per block per round ({stretches})"
    );
    // A collective round is read whole before its first step, so that
    // step's agreement covers every step of the round.
    assert_eq!(
        f("step_agreements"),
        f("rounds"),
        "one agreement per collective round"
    );
}

fn assert_every_rank_fails(out: &Output, n: usize, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure; stderr: {stderr}");
    // Ranks' lines may interleave: count the message, not lines. Open MPI's
    // launcher stops the other ranks as soon as one exits with an error, so
    // there only the first report is sure to be seen; that no rank hung is
    // checked by the time limit either way.
    let reports = stderr.matches(needle).count();
    let launcher = std::env::var("LMDBIO_MPIEXEC").unwrap_or_default();
    if launcher.contains("openmpi") {
        assert!(
            reports >= 1,
            "no rank reported {needle:?}; stderr:\n{stderr}"
        );
    } else {
        assert_eq!(
            reports, n,
            "every rank should report {needle:?}; stderr:\n{stderr}"
        );
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn missing_database_fails_on_every_rank() {
    let out = mpiexec(3, &["--ranks-per-node", "1", "/nonexistent/lmdbio/db"]);
    assert_every_rank_fails(&out, 3, "/nonexistent/lmdbio/db");
}

#[test]
fn corrupt_leaf_seen_by_one_master_fails_every_rank() {
    let fx = kit::inline_only(20_000, 69);
    let data = fx.data_file();
    let mut bytes = kit::read_file(&data);
    // The last leaf in key order: parsed by the last master only.
    let db = lmdbio::Database::open(&fx.path).unwrap();
    let tree = db.main_tree().unwrap();
    let pages = lmdbio::index::walk_tree(&db, &tree, 64).unwrap();
    let leaf = *pages.leaves.last().unwrap();
    let at = (leaf * 4096) as usize;
    bytes[at + 12] = 0xff; // mp_lower
    std::fs::write(&data, &bytes).unwrap();
    let out = mpiexec(4, &["--ranks-per-node", "1", fx.path.to_str().unwrap()]);
    assert_every_rank_fails(&out, 4, &format!("page {leaf}"));
}

#[test]
fn a_damaged_value_met_mid_job_fails_every_rank() {
    // Ranks serve their steps as their own node's bytes come in and meet
    // the other nodes only where rounds start and at the job's end. The
    // rank whose record is damaged must still take every rank down with
    // it, whether the damage falls inside a round or in the last one, and
    // whether its node-mate (two ranks per node) has nothing wrong.
    for (n, per_node) in [(4usize, 1usize), (4, 2), (2, 1)] {
        let fx = kit::overflow_only(96, 71 + n as u64 * 10 + per_node as u64);
        let data = fx.data_file();
        let clean = kit::read_file(&data);
        let db = lmdbio::Database::open(&fx.path).unwrap();
        let tree = db.main_tree().unwrap();
        let index = db.build_index(&tree, &Default::default()).unwrap();
        let (first, count) = lmdbio::schedule::contiguous_block(index.len() as u64, n as u64, 1);
        for victim in [first + count / 2 + 1, first + count - 1] {
            let (offset, _) = index.entries[victim as usize].span();
            let mut bytes = clean.clone();
            // The overflow header's page number, which the reader checks.
            bytes[offset as usize] ^= 0x5a;
            std::fs::write(&data, &bytes).unwrap();
            let k_arg = per_node.to_string();
            let out = mpiexec(
                n,
                &[
                    "--ranks-per-node",
                    &k_arg,
                    "--batch",
                    "2",
                    "--prefetch",
                    "3",
                    fx.path.to_str().unwrap(),
                ],
            );
            let page = offset / u64::from(index.page_size);
            assert_every_rank_fails(&out, n, &format!("page {page}"));
        }
    }
}

#[test]
fn window_too_small_for_one_batch_fails_every_rank() {
    let fx = kit::overflow_only(40, 70);
    let out = mpiexec(
        4,
        &[
            "--ranks-per-node",
            "2",
            "--batch",
            "4",
            "--window",
            "100000",
            fx.path.to_str().unwrap(),
        ],
    );
    assert_every_rank_fails(&out, 4, "too small for one batch");
}

/// Each rank's trace file, in rank order.
fn traces_by_rank(dir: &Path, n: usize) -> Vec<String> {
    (0..n)
        .map(|r| std::fs::read_to_string(dir.join(format!("rank-{r}.tsv"))).unwrap())
        .collect()
}

/// Requires that each of `n` ranks traced in the `parts` of a stopped and
/// resumed job, one after another, exactly what it traced in `whole`, the
/// job run without a stop.
fn assert_resumed_as_whole(whole: &Path, parts: &[&Path], n: usize, what: &str) {
    let whole = traces_by_rank(whole, n);
    let parts: Vec<Vec<String>> = parts.iter().map(|p| traces_by_rank(p, n)).collect();
    for r in 0..n {
        assert!(parts.iter().all(|p| !p[r].is_empty()), "{what}: rank {r}");
        let joined: String = parts.iter().map(|p| p[r].as_str()).collect();
        assert!(joined == whole[r], "{what}: rank {r} resumed differently");
    }
}

fn bench_into(fx: &kit::Fixture, n: usize, trace: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["--trace", trace.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push(fx.path.to_str().unwrap());
    mpiexec(n, &args)
}

#[test]
fn interrupted_and_resumed_run_equals_an_uninterrupted_one() {
    let fx = kit::caffe_style(600, 4000, 73);
    let dirs: Vec<kit::TempDir> = (0..3).map(|_| kit::TempDir::new().unwrap()).collect();
    let cursor = dirs[0].path().join("cursor.bin");
    let cursor = cursor.to_str().unwrap();
    for (shuffle, partition) in [
        (None, "contiguous"),
        (Some("11"), "strided"),
        (Some("12"), "round-robin"),
    ] {
        let mut common = vec![
            "--batch",
            "7",
            "--epochs",
            "3",
            "--ranks-per-node",
            "2",
            "--partition",
            partition,
        ];
        if let Some(seed) = shuffle {
            common.extend_from_slice(&["--shuffle", seed, "--shuffle-chunk", "25"]);
        }
        let whole = dirs[0].path().join(format!("whole-{partition}"));
        let first = dirs[1].path().join(format!("first-{partition}"));
        let rest = dirs[2].path().join(format!("rest-{partition}"));
        assert!(bench_into(&fx, 3, &whole, &common).status.success());
        let mut stop = common.clone();
        stop.extend_from_slice(&["--stop-after", "37", "--save-cursor", cursor]);
        let out = bench_into(&fx, 3, &first, &stop);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut resume = common.clone();
        resume.extend_from_slice(&["--resume", cursor]);
        let out = bench_into(&fx, 3, &rest, &resume);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_resumed_as_whole(&whole, &[&first, &rest], 3, partition);
    }
}

#[test]
fn shuffled_epochs_are_permutations_that_differ_and_repeat_with_the_seed() {
    let fx = kit::inline_only(3000, 74);
    let oracle = oracle_lines(&fx);
    let runs: Vec<Vec<String>> = (0..2)
        .map(|_| {
            let dir = kit::TempDir::new().unwrap();
            let out = bench_into(
                &fx,
                4,
                dir.path(),
                &[
                    "--batch",
                    "16",
                    "--epochs",
                    "2",
                    "--shuffle",
                    "99",
                    "--shuffle-chunk",
                    "40",
                    "--tail",
                    "short",
                ],
            );
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            traces_by_rank(dir.path(), 4)
        })
        .collect();
    assert_eq!(
        runs[0], runs[1],
        "the same seed must give the same order on every rank"
    );
    let lines: Vec<&str> = runs[0].iter().flat_map(|t| t.lines()).collect();
    let epoch = |e: &str| -> Vec<String> {
        lines
            .iter()
            .filter_map(|l| l.strip_prefix(e).map(str::to_owned))
            .collect()
    };
    let (e0, e1) = (epoch("0 "), epoch("1 "));
    for e in [&e0, &e1] {
        let mut sorted = e.clone();
        sorted.sort();
        assert!(
            sorted == oracle,
            "a shuffled epoch is not a permutation of the database"
        );
    }
    assert_ne!(e0, e1, "epochs should be shuffled differently");
    let key_order: Vec<String> = oracle.clone();
    assert_ne!(e0, key_order, "epoch 0 was not shuffled");
}

#[test]
fn no_cursor_after_a_batch_the_epoch_limit_cut_short() {
    let fx = kit::inline_only(100, 74);
    let dir = kit::TempDir::new().unwrap();
    let cursor = dir.path().join("cursor.bin");
    let cursor = cursor.to_str().unwrap();
    // 100 records on 3 ranks in batches of 7: shares of 34, 33, 33 take 5
    // steps, and every rank's fifth batch reaches into epoch 1, which one
    // epoch leaves out; a cursor after it would skip those records.
    let args = |tail| {
        vec![
            "--batch",
            "7",
            "--tail",
            tail,
            "--save-cursor",
            cursor,
            fx.path.to_str().unwrap(),
        ]
    };
    let out = mpiexec(3, &args("wrap"));
    assert_every_rank_fails(&out, 3, "cut a batch short");
    assert!(!Path::new(cursor).exists());
    // Under the short tail each epoch ends with its own batch.
    let out = mpiexec(3, &args("short"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = lmdbio::cursor::JobCursor::decode(&std::fs::read(cursor).unwrap()).unwrap();
    assert_eq!(job.ranks(), 3);
}

#[test]
fn cursors_from_another_database_or_rank_count_are_refused() {
    let a = kit::caffe_style(200, 3000, 75);
    let b = kit::caffe_style(201, 3000, 76);
    let dir = kit::TempDir::new().unwrap();
    let cursor = dir.path().join("c.bin");
    let cursor = cursor.to_str().unwrap();
    let out = bench_into(
        &a,
        2,
        &dir.path().join("t"),
        &["--batch", "4", "--stop-after", "3", "--save-cursor", cursor],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = bench_into(
        &b,
        2,
        &dir.path().join("u"),
        &["--batch", "4", "--resume", cursor],
    );
    assert_every_rank_fails(&out, 2, "another database");
    let out = bench_into(
        &a,
        2,
        &dir.path().join("v"),
        &["--batch", "5", "--resume", cursor],
    );
    assert_every_rank_fails(&out, 2, "batch 4");
    let out = mpiexec(
        3,
        &["--batch", "4", "--resume", cursor, a.path.to_str().unwrap()],
    );
    assert_every_rank_fails(&out, 3, "taken on 2 ranks and this job has 3");
    // A job cursor missing a rank's cursor is refused before anything runs.
    let bytes = std::fs::read(cursor).unwrap();
    let cut = dir.path().join("cut.bin");
    std::fs::write(&cut, &bytes[..bytes.len() - 112]).unwrap();
    let out = mpiexec(
        3,
        &[
            "--batch",
            "4",
            "--resume",
            cut.to_str().unwrap(),
            "--repartition",
            a.path.to_str().unwrap(),
        ],
    );
    assert_every_rank_fails(&out, 3, "incomplete job cursor");
}

/// Lines of epoch `epoch` in every rank's trace under each of `dirs`,
/// without the epoch prefix, sorted.
fn epoch_lines(dirs: &[PathBuf], epoch: u64) -> Vec<String> {
    let prefix = format!("{epoch} ");
    let mut lines: Vec<String> = dirs
        .iter()
        .flat_map(|d| traced_lines(d))
        .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
        .collect();
    lines.sort();
    lines
}

fn bench_ok(fx: &kit::Fixture, n: usize, trace: &Path, extra: &[&str]) {
    let out = bench_into(fx, n, trace, extra);
    assert!(
        out.status.success(),
        "-n {n} {extra:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (partition, tail, shuffled, rank counts of three runs, batches after
/// which the first two stop).
type Handoffs = (
    &'static str,
    &'static str,
    bool,
    [usize; 3],
    [&'static str; 2],
);

#[test]
fn resumed_on_other_rank_counts_the_rest_of_the_epoch_is_delivered_once() {
    let fx = kit::caffe_style(600, 4000, 78);
    let oracle = oracle_lines(&fx);
    let dir = kit::TempDir::new().unwrap();
    // Stops land mid-epoch; 2 ranks x 45 batches
    // of 7 strided wrap into epoch 1 (630 > 600), so some next-epoch
    // records were delivered before the job moved.
    let cases: [Handoffs; 6] = [
        ("contiguous", "wrap", false, [3, 2, 4], ["11", "30"]),
        ("strided", "wrap", true, [2, 4, 3], ["45", "5"]),
        ("round-robin", "short", true, [4, 3, 2], ["6", "10"]),
        ("contiguous", "short", true, [2, 4, 1], ["20", "3"]),
        ("round-robin", "wrap", false, [3, 4, 2], ["9", "12"]),
        ("strided", "short", false, [4, 2, 3], ["7", "25"]),
    ];
    for (k, (partition, tail, shuffle, ranks, stops)) in cases.into_iter().enumerate() {
        let mut common = vec![
            "--batch",
            "7",
            "--epochs",
            "3",
            "--ranks-per-node",
            "2",
            "--partition",
            partition,
            "--tail",
            tail,
        ];
        if shuffle {
            common.extend_from_slice(&["--shuffle", "5", "--shuffle-chunk", "25"]);
        }
        let cursors: Vec<String> = (0..2)
            .map(|i| dir.path().join(format!("c{k}-{i}")).display().to_string())
            .collect();
        let traces: Vec<PathBuf> = (0..3)
            .map(|i| dir.path().join(format!("t{k}-{i}")))
            .collect();
        for run in 0..3 {
            let mut args = common.clone();
            if run > 0 {
                args.extend_from_slice(&["--resume", &cursors[run - 1], "--repartition"]);
            }
            if run < 2 {
                args.extend_from_slice(&[
                    "--stop-after",
                    stops[run],
                    "--save-cursor",
                    &cursors[run],
                ]);
            }
            bench_ok(&fx, ranks[run], &traces[run], &args);
        }
        for epoch in 0..3 {
            assert!(
                epoch_lines(&traces, epoch) == oracle,
                "{partition} {tail} shuffle={shuffle} ranks {ranks:?}: epoch {epoch} is not every record once"
            );
        }
        // Each run stopped inside an epoch the next run finished.
        for pair in traces.windows(2) {
            assert!(
                (0..3).any(|e| {
                    !epoch_lines(&pair[..1], e).is_empty() && !epoch_lines(&pair[1..], e).is_empty()
                }),
                "{partition} {tail}: a run stopped on an epoch boundary"
            );
        }
    }
}

#[test]
fn a_repartitioned_job_resumes_exactly_on_its_own_rank_count() {
    let fx = kit::caffe_style(500, 4000, 79);
    let dir = kit::TempDir::new().unwrap();
    let path = |name: &str| dir.path().join(name);
    let first = path("first.bin").display().to_string();
    let second = path("second.bin").display().to_string();
    let common = [
        "--batch",
        "6",
        "--epochs",
        "2",
        "--shuffle",
        "3",
        "--shuffle-chunk",
        "20",
        "--partition",
        "strided",
    ];
    fn with<'a>(common: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [common, extra].concat()
    }
    bench_ok(
        &fx,
        3,
        &path("t0"),
        &with(&common, &["--stop-after", "9", "--save-cursor", &first]),
    );
    // The whole rest on 2 ranks, against the same rest in two pieces.
    bench_ok(
        &fx,
        2,
        &path("whole"),
        &with(&common, &["--resume", &first, "--repartition"]),
    );
    bench_ok(
        &fx,
        2,
        &path("a"),
        &with(
            &common,
            &[
                "--resume",
                &first,
                "--repartition",
                "--stop-after",
                "8",
                "--save-cursor",
                &second,
            ],
        ),
    );
    bench_ok(&fx, 2, &path("b"), &with(&common, &["--resume", &second]));
    assert_resumed_as_whole(
        &path("whole"),
        &[&path("a"), &path("b")],
        2,
        "repartitioned",
    );
    // A re-partitioned job's rank cursors need its job cursor: a bare rank
    // cursor of it names the remainder it cannot describe.
    let bytes = std::fs::read(&second).unwrap();
    assert_eq!(&bytes[..8], b"LMDBIOJ\0");
}

#[test]
fn every_method_delivers_the_database_and_reports_the_required_fields() {
    let _cache = page_cache_lock();
    let fx = kit::caffe_style(500, 6000, 77);
    let oracle = oracle_lines(&fx);
    let dir = kit::TempDir::new().unwrap();
    let trace = dir.path().join("trace");
    let doc = bench_json(
        4,
        &[
            "--ranks-per-node",
            "2",
            "--batch",
            "9",
            "--cold",
            "--method",
            "raw",
            "--method",
            "raw-node",
            "--method",
            "lmdb-skip",
            "--method",
            "lmdb-walk",
            "--method",
            "lmdbio",
            "--method",
            "lmdbio-collective",
            "--trace",
            trace.to_str().unwrap(),
            fx.path.to_str().unwrap(),
        ],
    );
    for method in ["lmdb-skip", "lmdb-walk", "lmdbio", "lmdbio-collective"] {
        assert!(
            traced_lines(&trace.join(method)) == oracle,
            "{method} differs from liblmdb"
        );
    }
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6);
    for run in runs {
        for key in [
            "method",
            "ranks",
            "ranks_per_node",
            "mb_per_s",
            "records_per_s",
            "time_to_first_batch_s",
            "bytes_read_per_node",
            "read_requests_per_node",
            "file_opens_per_node",
            "ratio_to_raw",
            "ratio_to_lmdb_skip",
            "major_faults_per_rank",
            "peak_rss_mib_per_rank",
        ] {
            assert!(!run[key].is_null(), "{} lacks {key}", run["method"]);
        }
        assert_eq!(run["ranks"].as_u64(), Some(4));
    }
    // Two ranks per node: the two raw variants make different reads, and
    // the limit every ratio uses is the better one's median.
    let limit = doc["storage_limit_mb_per_s"].as_f64().unwrap();
    let mb_per_s = |m: &str| method_run(&doc, m)["mb_per_s"].as_f64().unwrap();
    assert_eq!(limit, mb_per_s("raw").max(mb_per_s("raw-node")));
    assert_eq!(doc["storage_limit_pooled"].as_bool(), Some(false));
    for run in runs {
        let expected = run["mb_per_s"].as_f64().unwrap() / limit;
        assert!((run["ratio_to_raw"].as_f64().unwrap() - expected).abs() < 1e-9);
    }
    let opens = |m: &str| method_run(&doc, m)["file_opens_per_node"].as_f64().unwrap();
    assert_eq!(opens("lmdbio"), 1.0);
    // The engine's time in reads and agreements is reported, and it is
    // not nothing: every round's read is started and completed.
    let engine = method_run(&doc, "lmdbio");
    assert!(engine["read_wait_s_per_rank"].as_f64().unwrap() > 0.0);
    assert!(engine["agreement_wait_s_per_rank"].as_f64().unwrap() >= 0.0);
    assert_eq!(
        method_run(&doc, "raw")["read_wait_s_per_rank"].as_f64(),
        Some(0.0)
    );
    assert_eq!(opens("lmdb-skip"), 2.0);
    assert_eq!(opens("raw-node"), 1.0);
}

/// Epoch `epoch` of the job traced in `dir` on `n` ranks, in the order of
/// its positions: each rank's lines of it in turn (contiguous partition).
fn epoch_in_order(dir: &Path, n: usize, epoch: u64) -> Vec<String> {
    let prefix = format!("{epoch} ");
    traces_by_rank(dir, n)
        .iter()
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The global shuffle: each epoch one permutation of every record over all
/// ranks, the same on any rank count (it depends on the seed and the epoch
/// alone), and a job resumes from a cursor exactly, on its own rank count
/// or another.
#[test]
fn global_shuffle_is_one_permutation_over_all_ranks_and_resumes_exactly() {
    let fx = kit::caffe_style(600, 4000, 82);
    let oracle = oracle_lines(&fx);
    let dir = kit::TempDir::new().unwrap();
    let path = |name: &str| dir.path().join(name);
    let common = [
        "--batch",
        "7",
        "--epochs",
        "2",
        "--shuffle",
        "9",
        "--shuffle-mode",
        "global",
        "--tail",
        "short",
        "--ranks-per-node",
        "2",
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        common.iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let run = |n: usize, name: &str, extra: &[&str]| {
        let args = with(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        bench_ok(&fx, n, &path(name), &args);
    };
    let mut orders = Vec::new();
    for n in 1..=4 {
        run(n, &format!("whole-{n}"), &[]);
        let epochs: Vec<Vec<String>> = (0..2)
            .map(|e| epoch_in_order(&path(&format!("whole-{n}")), n, e))
            .collect();
        for (e, order) in epochs.iter().enumerate() {
            let mut sorted = order.clone();
            sorted.sort();
            assert!(
                sorted == oracle,
                "-n {n}: epoch {e} is not every record once"
            );
        }
        orders.push(epochs);
    }
    for (i, o) in orders.iter().enumerate() {
        assert!(
            o == &orders[0],
            "-n {} ordered the epochs differently",
            i + 1
        );
    }
    let (e0, e1) = (&orders[0][0], &orders[0][1]);
    assert_ne!(e0, e1, "two epochs in the same order");
    assert_ne!(e0, &oracle, "epoch 0 in key order");
    // The chunked order of the same seed is another one.
    let chunked: Vec<&str> = common
        .iter()
        .map(|&a| if a == "global" { "chunked" } else { a })
        .collect();
    bench_ok(&fx, 2, &path("chunked"), &chunked);
    assert_ne!(&epoch_in_order(&path("chunked"), 2, 0), e0);

    // Stopped mid-epoch and resumed on the same rank count: exactly the
    // uninterrupted run.
    let cursor = path("cursor.bin").display().to_string();
    run(
        3,
        "first",
        &["--stop-after", "11", "--save-cursor", &cursor],
    );
    run(3, "rest", &["--resume", &cursor]);
    assert_resumed_as_whole(
        &path("whole-3"),
        &[&path("first"), &path("rest")],
        3,
        "global",
    );
    // A cursor of the global order does not resume the chunked one.
    let mut wrong = chunked.clone();
    wrong.extend_from_slice(&["--resume", &cursor]);
    assert_every_rank_fails(&bench_into(&fx, 3, &path("wrong"), &wrong), 3, "shuffle");
    // Resumed on 2 ranks: the rest of epoch 0 once, then epoch 1 in the
    // global order.
    run(2, "moved", &["--resume", &cursor, "--repartition"]);
    let dirs = [path("first"), path("moved")];
    assert!(epoch_lines(&dirs, 0) == oracle, "epoch 0 across the move");
    assert!(
        &epoch_in_order(&path("moved"), 2, 1) == e1,
        "epoch 1 after the move is not the global order"
    );
}

/// `raw-stage` reads each node's part of the file's size from a file it
/// writes under the stage directory, counts it as stage bytes, and leaves
/// nothing behind; without `--stage` every rank fails.
#[test]
fn raw_stage_reads_a_nodes_part_from_the_stage_and_removes_it() {
    let fx = kit::caffe_style(300, 4000, 83);
    let stage = kit::TempDir::new().unwrap();
    let db = fx.path.to_str().unwrap();
    let doc = bench_json(
        4,
        &[
            "--ranks-per-node",
            "2",
            "--method",
            "raw-stage,raw-node",
            "--stage",
            stage.path().to_str().unwrap(),
            db,
        ],
    );
    let len = std::fs::metadata(fx.path.join("data.mdb")).unwrap().len() as f64;
    let run = method_run(&doc, "raw-stage");
    assert_eq!(run["bytes_read_per_node"].as_f64(), Some(len / 2.0));
    assert_eq!(run["reading_ranks_per_node"].as_f64(), Some(1.0));
    let epoch = &run["per_epoch"][0];
    assert_eq!(epoch["stage_bytes_read_per_node"].as_f64(), Some(len / 2.0));
    assert_eq!(epoch["db_bytes_read_per_node"].as_f64(), Some(0.0));
    assert!(doc["stage_limit_mb_per_s"].as_f64().unwrap() > 0.0);
    // The shared file system's limit is raw-node's alone.
    assert_eq!(
        doc["storage_limit_mb_per_s"].as_f64(),
        method_run(&doc, "raw-node")["mb_per_s"].as_f64()
    );
    let left: Vec<_> = std::fs::read_dir(stage.path()).unwrap().collect();
    assert!(left.is_empty(), "left in the stage: {left:?}");
    let out = mpiexec(2, &["--method", "raw-stage", db]);
    assert_every_rank_fails(&out, 2, "needs --stage");
}

/// `runs[].per_epoch[]`: a row for every epoch, each with the keys outside
/// checks read, the database bytes adding up to the run's bytes read.
#[test]
fn per_epoch_rows_cover_every_epoch_and_add_up_to_the_run() {
    let fx = kit::caffe_style(600, 4000, 81);
    let cases: [(usize, &[&str]); 2] = [
        (2, &["--ranks-per-node", "1"]),
        (4, &["--ranks-per-node", "2", "--shuffle", "3"]),
    ];
    for (n, extra) in cases {
        let mut args = vec![
            "--epochs",
            "3",
            "--batch",
            "7",
            "--method",
            "lmdbio",
            "--method",
            "lmdb-skip",
            "--method",
            "raw",
        ];
        args.extend_from_slice(extra);
        args.push(fx.path.to_str().unwrap());
        let doc = bench_json(n, &args);
        let f = |v: &serde_json::Value, k: &str| {
            v[k].as_f64()
                .unwrap_or_else(|| panic!("{k} missing in {v}"))
        };
        for (method, epochs) in [("lmdbio", 3), ("lmdb-skip", 3), ("raw", 1)] {
            let run = method_run(&doc, method);
            let rows = run["per_epoch"].as_array().unwrap();
            let listed: Vec<u64> = rows.iter().map(|r| r["epoch"].as_u64().unwrap()).collect();
            assert_eq!(listed, (0..epochs).collect::<Vec<_>>(), "{method} -n {n}");
            for r in rows {
                assert!(f(r, "mb_per_s") > 0.0, "{method}: {r}");
                assert_eq!(f(r, "stage_bytes_read_per_node"), 0.0);
                assert_eq!(f(r, "remote_bytes_received_per_node"), 0.0);
            }
            if method != "lmdbio" {
                continue;
            }
            let db: f64 = rows.iter().map(|r| f(r, "db_bytes_read_per_node")).sum();
            let total = f(run, "bytes_read_per_node");
            assert!(
                (db - total).abs() < 1e-6 * total,
                "-n {n}: epochs read {db} bytes per node, the run {total}"
            );
            let delivered: u64 = rows
                .iter()
                .map(|r| r["bytes_delivered"].as_u64().unwrap())
                .sum();
            assert_eq!(delivered, run["bytes_delivered"].as_u64().unwrap());
            // Every value is read in rounds (no value fits a leaf page), so
            // every epoch reads at least what it delivers, per node.
            let nodes = f(run, "nodes");
            for r in rows {
                assert!(
                    f(r, "db_bytes_read_per_node") * nodes
                        >= r["bytes_delivered"].as_u64().unwrap() as f64,
                    "-n {n}: {r}"
                );
            }
        }
    }
}

/// The node communicators and the shared window are made once per process
/// (before the timed runs by `prepare`, or by the first open) and kept
/// between engines with the window's memory, which `prepare` maps ahead
/// and `release_memory` (called by the bench before other methods' runs)
/// gives back to the system.
#[test]
fn node_setup_and_window_memory_are_kept_between_engines() {
    let fx = kit::overflow_only(300, 93);
    let runs_of = |extra: &[&str]| -> (serde_json::Value, Vec<serde_json::Value>) {
        let mut args = vec![
            "--method",
            "lmdbio",
            "--method",
            "raw",
            "--method",
            "lmdbio-shuffled",
            "--repeat",
            "2",
        ];
        args.extend_from_slice(extra);
        args.push(fx.path.to_str().unwrap());
        let doc = bench_json(2, &args);
        let all = doc["all_runs"].as_array().unwrap().clone();
        (doc, all)
    };
    let made = |r: &serde_json::Value| r["setup_made"].as_u64().unwrap();
    let is_engine = |r: &&serde_json::Value| r["method"] != "raw";
    let faults = |r: &serde_json::Value| r["minor_faults_per_rank"].as_f64().unwrap();
    // The values take 59 MB of window here: 14,400 pages (300 of 48). A
    // run reads them in two rounds, one step and then two, into the two
    // halves of the window, so each lands in a page no earlier round used.
    let window_pages = 14_400.0;
    let fresh_pages = 0.95 * window_pages;

    // Left to the first open: it makes communicators and window, no later
    // open makes either.
    let (doc, all) = runs_of(&["--no-prepare"]);
    assert!(doc["lmdbio_prepare_s"].is_null());
    let engine: Vec<u64> = all.iter().filter(is_engine).map(made).collect();
    assert_eq!(engine, vec![2, 0, 0, 0], "set-up made per engine run");
    // The first open touches the window's pages one by one.
    let first = all.iter().find(is_engine).unwrap();
    assert!(
        faults(first) > fresh_pages,
        "first open: {} faults",
        faults(first)
    );

    // Prepared: no open makes anything. Both node shapes: a window shared
    // by two ranks, and one rank's own (which MPICH makes private memory,
    // released another way).
    for shape in [&[][..], &["--ranks-per-node", "1"][..]] {
        let (doc, all) = runs_of(shape);
        assert!(doc["lmdbio_prepare_s"].as_f64().unwrap() > 0.0);
        assert!(all.iter().filter(is_engine).all(|r| made(r) == 0));
        // Every engine run found the window mapped (prepared before it).
        for run in all.iter().filter(is_engine) {
            assert!(
                faults(run) < window_pages / 4.0,
                "{shape:?}: a prepared {} run faulted {} pages",
                run["method"],
                faults(run)
            );
            assert!(run["prepare_s"].as_f64().unwrap() > 0.0);
        }

        // The window held the values (59 MB, half per rank on one-rank
        // nodes); a raw run right after an engine run peaks far below, so
        // the window's pages were given back before it.
        for pair in all.windows(2) {
            if pair[0]["method"] == "raw" || pair[1]["method"] != "raw" {
                continue;
            }
            let peak = |r: &serde_json::Value| r["peak_rss_mib_per_rank"].as_f64().unwrap();
            assert!(
                peak(&pair[1]) + 20.0 < peak(&pair[0]),
                "{shape:?}: raw peaked at {:.0} MiB after an engine run that peaked at {:.0} MiB",
                peak(&pair[1]),
                peak(&pair[0])
            );
        }
    }
}
