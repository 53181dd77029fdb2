//! The node stage under real `mpiexec` (virtual nodes, each with its own
//! stage directory): staged epochs deliver liblmdb's records exactly, a
//! kept stage is reused by the next job instead of the database file, and
//! a damaged, foreign, full or unwritable stage falls back to the file with
//! one warning and the right bytes. Blocks held by other nodes arrive from
//! them over MPI (the exchange, compared with `LMDBIO_STAGE_EXCHANGE=off`),
//! and replicated stages fill each other instead of each reading the file.

use std::path::{Path, PathBuf};
use std::process::Output;

use lmdbio_testkit::{self as kit, oracle_lines};

/// A database of values larger than a page (read in rounds, not served
/// from kept leaf pages): about 18 MB, five 4 MiB blocks.
fn database(seed: u64) -> kit::Fixture {
    kit::caffe_style(600, 30_000, seed)
}

/// What one bench run gave: its output, its JSON row and every rank's
/// trace lines.
struct Ran {
    out: Output,
    row: serde_json::Value,
    lines: Vec<String>,
}

impl Ran {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    fn f(&self, key: &str) -> f64 {
        self.row[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} in {}", self.row))
    }

    /// The records of epoch `e`, rank by rank in delivery order.
    fn in_order(&self, e: u64) -> Vec<&str> {
        let prefix = format!("{e} ");
        self.lines
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix))
            .collect()
    }

    /// The sorted records of epoch `e`.
    fn epoch(&self, e: u64) -> Vec<String> {
        let prefix = format!("{e} ");
        let mut lines: Vec<String> = self
            .lines
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
            .collect();
        lines.sort();
        lines
    }
}

/// `lmdbio bench` on `n` ranks, `k` per node, with `--trace` and `--json`;
/// requires success.
fn bench(db: &Path, n: usize, k: usize, extra: &[&str]) -> Ran {
    bench_with(db, n, k, extra, &[])
}

/// [`bench`] with `env` set for every rank.
fn bench_with(db: &Path, n: usize, k: usize, extra: &[&str], env: &[(&str, &str)]) -> Ran {
    let scratch = kit::TempDir::new().unwrap();
    let trace = scratch.path().join("trace");
    let json = scratch.path().join("run.json");
    let k = k.to_string();
    let mut cmd = kit::mpiexec(n, &kit::lmdbio_binary(env!("CARGO_BIN_EXE_lmdbio")));
    cmd.envs(env.iter().copied());
    cmd.arg("bench")
        .args(["--trace", trace.to_str().unwrap()])
        .args(["--json", json.to_str().unwrap()])
        .args([
            "--ranks-per-node",
            &k,
            "--batch",
            "7",
            "--window",
            "4000000",
        ])
        .args(extra)
        .arg(db);
    let out = kit::run_bounded(cmd);
    assert!(
        out.status.success(),
        "bench -n {n} {extra:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let row = doc["runs"][0].clone();
    // Rank by rank in file-name order, each rank's lines in delivery
    // order, so two runs' `lines` compare their orders.
    let mut files: Vec<PathBuf> = std::fs::read_dir(&trace)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut lines = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        lines.extend(text.lines().map(str::to_owned));
    }
    Ran { out, row, lines }
}

fn assert_epochs_exact(ran: &Ran, oracle: &[String], epochs: u64, what: &str) {
    for e in 0..epochs {
        assert!(
            ran.epoch(e) == oracle,
            "{what}: epoch {e} differs from liblmdb"
        );
    }
    assert_eq!(
        ran.lines.len() as u64,
        epochs * oracle.len() as u64,
        "{what}"
    );
}

/// The extents a node's manifest lists, as (offset, length).
fn manifest_extents(node_dir: &Path) -> Vec<(u64, u64)> {
    std::fs::read_to_string(node_dir.join("manifest"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0] == "extent").then(|| (f[1].parse().unwrap(), f[2].parse().unwrap()))
        })
        .collect()
}

fn stage_args<'a>(dir: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--epochs", "3", "--stage", dir];
    args.extend_from_slice(more);
    args
}

#[test]
fn staged_epochs_are_exact_and_a_kept_stage_serves_the_next_job() {
    let fx = database(301);
    let oracle = oracle_lines(&fx);
    let file_len = std::fs::metadata(fx.data_file()).unwrap().len() as f64;
    for (n, k) in [(1usize, 1usize), (2, 1), (2, 2), (3, 1), (4, 1), (4, 2)] {
        let what = format!("-n {n}, {k} per node");
        let stage = kit::TempDir::new().unwrap();
        let dir = stage.path().to_str().unwrap();
        let nodes = n.div_ceil(k);
        let first = bench(&fx.path, n, k, &stage_args(dir, &["--keep-stage"]));
        assert_epochs_exact(&first, &oracle, 3, &what);
        assert_eq!(first.f("stage_warnings"), 0.0, "{what}: {}", first.stderr());
        for node in 0..nodes {
            // Kept complete: the whole file, in extents that do not overlap.
            let extents = manifest_extents(&stage.path().join(format!("node-{node}")));
            let mut end = 0;
            for &(at, len) in &extents {
                assert!(at >= end, "{what}: overlapping extents");
                end = at + len;
            }
            let staged: u64 = extents.iter().map(|e| e.1).sum();
            assert_eq!(staged as f64, file_len, "{what}: node {node} not complete");
        }
        // The next job reads its values from the stage only: the file is
        // read for the tree scan, a small part of it.
        let again = bench(&fx.path, n, k, &stage_args(dir, &[]));
        assert_epochs_exact(&again, &oracle, 3, &what);
        assert!(
            again.f("bytes_read_per_node") < 0.1 * file_len,
            "{what}: a warm stage still read {} bytes of the file per node",
            again.f("bytes_read_per_node")
        );
        // Per epoch: after the first (which scans the tree), not a byte of
        // the file; every epoch's values from the stage.
        let rows = again.row["per_epoch"].as_array().unwrap();
        assert_eq!(rows.len(), 3, "{what}");
        for r in rows {
            let db = r["db_bytes_read_per_node"].as_f64().unwrap();
            let staged = r["stage_bytes_read_per_node"].as_f64().unwrap();
            let delivered = r["bytes_delivered"].as_f64().unwrap();
            if r["epoch"] != 0 {
                assert_eq!(db, 0.0, "{what}: {r}");
            }
            assert!(staged * nodes as f64 >= delivered, "{what}: {r}");
            assert_eq!(r["remote_bytes_received_per_node"].as_f64(), Some(0.0));
        }
        let delivered = again.f("bytes_delivered") / nodes as f64;
        assert!(
            again.f("stage_bytes_read_per_node") >= delivered,
            "{what}: {} bytes per node from the stage for {delivered} delivered",
            again.f("stage_bytes_read_per_node")
        );
        // Not kept this time: removed.
        for node in 0..nodes {
            assert!(
                !stage.path().join(format!("node-{node}")).exists(),
                "{what}"
            );
        }
    }
}

#[test]
fn a_damaged_staged_extent_is_read_from_the_file_instead() {
    let fx = database(302);
    let oracle = oracle_lines(&fx);
    let stage = kit::TempDir::new().unwrap();
    let dir = stage.path().to_str().unwrap();
    let first = bench(&fx.path, 2, 1, &stage_args(dir, &["--keep-stage"]));
    assert_epochs_exact(&first, &oracle, 3, "first job");
    // Flip one byte in the middle of every extent of node 0's stage.
    let node0 = stage.path().join("node-0");
    let data = node0.join("data.stage");
    let mut bytes = std::fs::read(&data).unwrap();
    for (at, len) in manifest_extents(&node0) {
        bytes[(at + len / 2) as usize] ^= 0x5a;
    }
    std::fs::write(&data, bytes).unwrap();
    let again = bench(&fx.path, 2, 1, &stage_args(dir, &["--keep-stage"]));
    assert_epochs_exact(&again, &oracle, 3, "damaged stage");
    assert!(again.f("stage_warnings") >= 1.0);
    let warnings = again.stderr().matches("fail their checksum").count();
    assert_eq!(warnings, 1, "one warning per node: {}", again.stderr());
    // The damaged extents were staged afresh for the job after.
    let third = bench(&fx.path, 2, 1, &stage_args(dir, &[]));
    assert_epochs_exact(&third, &oracle, 3, "restaged");
    assert_eq!(third.f("stage_warnings"), 0.0, "{}", third.stderr());
}

#[test]
fn a_stage_of_another_database_is_refused_and_replaced() {
    let (a, b) = (database(303), database(304));
    let stage = kit::TempDir::new().unwrap();
    let dir = stage.path().to_str().unwrap();
    bench(&a.path, 2, 1, &stage_args(dir, &["--keep-stage"]));
    let other = bench(&b.path, 2, 1, &stage_args(dir, &["--keep-stage"]));
    assert_epochs_exact(&other, &oracle_lines(&b), 3, "another database");
    assert!(
        other.stderr().contains("holds another database"),
        "{}",
        other.stderr()
    );
    // Restaged for b: its next job reads the stage without complaint.
    let again = bench(&b.path, 2, 1, &stage_args(dir, &[]));
    assert_epochs_exact(&again, &oracle_lines(&b), 3, "restaged");
    assert_eq!(again.f("stage_warnings"), 0.0, "{}", again.stderr());
    assert!(again.f("stage_bytes_read_per_node") > 0.0);
}

#[test]
fn an_unusable_stage_directory_warns_and_reads_the_file() {
    let fx = database(305);
    let oracle = oracle_lines(&fx);
    let scratch = kit::TempDir::new().unwrap();
    // A directory under a regular file cannot be made, even by root.
    let file = scratch.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let dir = file.join("stage");
    let ran = bench(&fx.path, 4, 2, &stage_args(dir.to_str().unwrap(), &[]));
    assert_epochs_exact(&ran, &oracle, 3, "unwritable stage");
    assert_eq!(ran.stderr().matches("cannot make the directory").count(), 2);
    assert_eq!(ran.f("stage_bytes_read_per_node"), 0.0);
}

#[test]
fn a_full_stage_file_system_warns_and_reads_the_file() {
    let fx = database(306);
    let oracle = oracle_lines(&fx);
    let scratch = kit::TempDir::new().unwrap();
    let small = scratch.path().join("small");
    std::fs::create_dir(&small).unwrap();
    // A 2 MiB file system for an 18 MB database; only root may mount one.
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(&small)
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounted {
        eprintln!("skipped: cannot mount a small tmpfs here (not root)");
        return;
    }
    struct Unmount<'p>(&'p Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&small);
    let ran = bench(&fx.path, 2, 1, &stage_args(small.to_str().unwrap(), &[]));
    assert_epochs_exact(&ran, &oracle, 3, "full stage");
    assert!(ran.stderr().contains("No space left"), "{}", ran.stderr());
}

#[test]
fn a_budget_smaller_than_the_database_partitions_it_and_stays_exact() {
    let fx = database(307);
    let oracle = oracle_lines(&fx);
    let stage = kit::TempDir::new().unwrap();
    let dir = stage.path().to_str().unwrap();
    let budget = (8u64 << 20).to_string();
    let keep = stage_args(dir, &["--stage-budget", &budget, "--keep-stage"]);
    let first = bench(&fx.path, 4, 2, &keep);
    assert_epochs_exact(&first, &oracle, 3, "partitioned");
    // Five blocks over two nodes: node 0 holds blocks 0 and 2 (its budget
    // allows two), node 1 blocks 1 and 3; block 4 is read from the file.
    let block = 4u64 << 20;
    for (node, blocks) in [(0u64, [0u64, 2]), (1, [1, 3])] {
        let extents = manifest_extents(&stage.path().join(format!("node-{node}")));
        let staged: u64 = extents.iter().map(|e| e.1).sum();
        assert_eq!(staged, 2 * block, "node {node}");
        for (at, len) in extents {
            assert!(blocks.contains(&(at / block)) && (at + len - 1) / block == at / block);
        }
    }
    let again = bench(
        &fx.path,
        4,
        2,
        &stage_args(dir, &["--stage-budget", &budget]),
    );
    assert_epochs_exact(&again, &oracle, 3, "partitioned, warm");
    assert!(again.f("stage_bytes_read_per_node") > 0.0);
    assert!(again.f("bytes_read_per_node") > 0.0);
}

#[test]
fn a_job_resumed_with_a_warm_or_a_cold_stage_continues_exactly() {
    let fx = database(308);
    let scratch = kit::TempDir::new().unwrap();
    let cursor = scratch.path().join("cursor.bin");
    let cursor = cursor.to_str().unwrap();
    let common = ["--shuffle", "5", "--shuffle-chunk", "40"];
    let mut plain = vec!["--epochs", "3"];
    plain.extend_from_slice(&common);
    let whole = bench(&fx.path, 3, 1, &plain);
    for warm in [true, false] {
        let stage = kit::TempDir::new().unwrap();
        let dir = stage.path().to_str().unwrap();
        let mut stop = stage_args(dir, &["--keep-stage", "--stop-after", "50"]);
        stop.extend_from_slice(&common);
        stop.extend_from_slice(&["--save-cursor", cursor]);
        let first = bench(&fx.path, 3, 1, &stop);
        // The staged default mode (shuffle byte 3), stopped in epoch 1:
        // the first of its global epochs, with epoch 0 chunked before it.
        let saved = lmdbio::cursor::JobCursor::decode(&std::fs::read(cursor).unwrap()).unwrap();
        for c in &saved.cursors {
            assert_eq!(c.epoch, 1, "warm {warm}: {c:?}");
            assert_eq!(
                c.shuffle.map(|s| s.mode),
                Some(lmdbio::order::ShuffleMode::GlobalAfterFirst)
            );
            assert_eq!(c.encode()[22], 3);
        }
        let rest_dir = if warm {
            dir.to_owned()
        } else {
            scratch.path().join("cold").to_str().unwrap().to_owned()
        };
        let mut resume = stage_args(&rest_dir, &["--resume", cursor]);
        resume.extend_from_slice(&common);
        let rest = bench(&fx.path, 3, 1, &resume);
        let mut joined: Vec<String> = first.lines.iter().chain(&rest.lines).cloned().collect();
        joined.sort();
        let mut want = whole.lines.clone();
        want.sort();
        assert!(joined == want, "warm {warm}: the resumed job differs");
        if warm {
            assert!(rest.f("stage_bytes_read_per_node") > 0.0);
        }
    }
}

#[test]
fn globally_shuffled_epochs_from_a_stage_are_exact() {
    let fx = database(309);
    let oracle = oracle_lines(&fx);
    let stage = kit::TempDir::new().unwrap();
    let dir = stage.path().to_str().unwrap();
    let global = ["--shuffle", "9", "--shuffle-mode", "global"];
    let mut first = stage_args(dir, &["--keep-stage"]);
    first.extend_from_slice(&global);
    let cold = bench(&fx.path, 4, 2, &first);
    assert_epochs_exact(&cold, &oracle, 3, "global, first job");
    let mut again = stage_args(dir, &[]);
    again.extend_from_slice(&global);
    let warm = bench(&fx.path, 4, 2, &again);
    assert_epochs_exact(&warm, &oracle, 3, "global, kept stage");
    assert!(warm.f("stage_bytes_read_per_node") > 0.0);
    assert_eq!(warm.f("stage_warnings"), 0.0, "{}", warm.stderr());
}

/// Without a mode, a staged shuffle reads its first epoch (the one that
/// reads the database file and fills the stage) in the chunked order and
/// later ones in the global order: each epoch exactly, rank by rank and
/// in delivery order, what the explicit mode gives.
#[test]
fn a_staged_shuffle_without_a_mode_is_chunked_first_and_global_after() {
    let fx = database(311);
    let oracle = oracle_lines(&fx);
    let stage = kit::TempDir::new().unwrap();
    let dir = stage.path().to_str().unwrap();
    let run = |mode: &[&'static str]| {
        let mut args = stage_args(dir, &["--shuffle", "9"]);
        args.extend_from_slice(mode);
        bench(&fx.path, 4, 2, &args)
    };
    let default = run(&[]);
    assert_epochs_exact(&default, &oracle, 3, "staged, no mode");
    let global = run(&["--shuffle-mode", "global"]);
    let chunked = run(&["--shuffle-mode", "chunked"]);
    assert!(
        default.in_order(0) == chunked.in_order(0),
        "a staged shuffle without a mode is not chunked in epoch 0"
    );
    for e in 1..3 {
        assert!(
            default.in_order(e) == global.in_order(e),
            "a staged shuffle without a mode is not global in epoch {e}"
        );
        assert!(
            chunked.in_order(e) != global.in_order(e),
            "the chunked and global orders coincide in epoch {e}: the test shows nothing"
        );
    }
    assert!(chunked.in_order(0) != global.in_order(0));
}

/// The stage budget that gives each of `nodes` nodes its share of the
/// test database's five blocks: partitioned, every block on one node.
fn share_of_blocks(nodes: usize) -> String {
    (5usize.div_ceil(nodes) as u64 * (4 << 20)).to_string()
}

/// Reads every run a node does not hold from the database file.
const NO_EXCHANGE: (&str, &str) = ("LMDBIO_STAGE_EXCHANGE", "off");

/// A per-epoch column of a bench row.
fn per_epoch(ran: &Ran, key: &str) -> Vec<f64> {
    ran.row["per_epoch"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[key].as_f64().unwrap())
        .collect()
}

/// `key` of every epoch of `ran`, summed.
fn total(ran: &Ran, key: &str) -> f64 {
    per_epoch(ran, key).iter().sum()
}

#[test]
fn a_partitioned_stage_serves_other_nodes_blocks_over_mpi() {
    let fx = database(312);
    let oracle = oracle_lines(&fx);
    let file_len = std::fs::metadata(fx.data_file()).unwrap().len();
    for (n, k) in [(2usize, 1usize), (4, 2), (4, 1)] {
        let what = format!("-n {n}, {k} per node");
        let nodes = n.div_ceil(k);
        let budget = share_of_blocks(nodes);
        let stage = kit::TempDir::new().unwrap();
        let dir = stage.path().to_str().unwrap();
        let keep = stage_args(dir, &["--stage-budget", &budget, "--keep-stage"]);
        let first = bench(&fx.path, n, k, &keep);
        assert_epochs_exact(&first, &oracle, 3, &what);
        let mut staged = 0;
        for node in 0..nodes {
            let node_staged: u64 = manifest_extents(&stage.path().join(format!("node-{node}")))
                .iter()
                .map(|e| e.1)
                .sum();
            assert!(node_staged < file_len, "{what}: node {node} holds it all");
            staged += node_staged;
        }
        assert_eq!(staged, file_len, "{what}: every block on exactly one node");
        // The same stage without the exchange: what each node reads of the
        // file after the first epoch is what it would receive.
        let alone = bench_with(&fx.path, n, k, &keep, &[NO_EXCHANGE]);
        assert_epochs_exact(&alone, &oracle, 3, &what);
        let warm = bench(
            &fx.path,
            n,
            k,
            &stage_args(dir, &["--stage-budget", &budget]),
        );
        assert_epochs_exact(&warm, &oracle, 3, &what);
        assert_eq!(warm.f("stage_warnings"), 0.0, "{what}: {}", warm.stderr());
        let (db, remote) = (
            per_epoch(&warm, "db_bytes_read_per_node"),
            per_epoch(&warm, "remote_bytes_received_per_node"),
        );
        let (stage_read, alone_db, alone_stage) = (
            per_epoch(&warm, "stage_bytes_read_per_node"),
            per_epoch(&alone, "db_bytes_read_per_node"),
            per_epoch(&alone, "stage_bytes_read_per_node"),
        );
        for e in 0..3 {
            assert!(remote[e] > 0.0, "{what}: epoch {e} received nothing");
            assert_eq!(stage_read[e], alone_stage[e], "{what}: epoch {e}");
            if e > 0 {
                assert_eq!(db[e], 0.0, "{what}: epoch {e} read the file");
                assert_eq!(
                    remote[e], alone_db[e],
                    "{what}: epoch {e} received other than the runs of other nodes' blocks"
                );
            }
        }
        // Epoch 0 reads the tree from the file, and only that.
        assert!(db[0] < alone_db[0], "{what}");
    }
}

#[test]
fn a_damaged_holder_answers_and_its_runs_come_from_the_file() {
    let fx = database(313);
    let oracle = oracle_lines(&fx);
    let stage = kit::TempDir::new().unwrap();
    let dir = stage.path().to_str().unwrap();
    let budget = share_of_blocks(2);
    let keep = stage_args(dir, &["--stage-budget", &budget, "--keep-stage"]);
    let first = bench(&fx.path, 2, 1, &keep);
    assert_epochs_exact(&first, &oracle, 3, "first job");
    let node0 = stage.path().join("node-0");
    let data = node0.join("data.stage");
    let mut bytes = std::fs::read(&data).unwrap();
    for (at, len) in manifest_extents(&node0) {
        bytes[(at + len / 2) as usize] ^= 0x5a;
    }
    std::fs::write(&data, bytes).unwrap();
    let again = bench(
        &fx.path,
        2,
        1,
        &stage_args(dir, &["--stage-budget", &budget]),
    );
    assert_epochs_exact(&again, &oracle, 3, "damaged holder");
    assert!(
        again.stderr().contains("fail their checksum"),
        "{}",
        again.stderr()
    );
    // Node 1 is sound: node 0 still receives its blocks.
    let remote = per_epoch(&again, "remote_bytes_received_per_node");
    assert!(remote.iter().all(|&r| r > 0.0), "{remote:?}");
}

#[test]
fn a_node_without_a_stage_receives_the_blocks_of_the_others() {
    let fx = database(314);
    let oracle = oracle_lines(&fx);
    let stage = kit::TempDir::new().unwrap();
    let dir = stage.path().to_str().unwrap();
    // Node 0's directory cannot be made: a regular file is in its place.
    std::fs::write(stage.path().join("node-0"), b"not a directory").unwrap();
    let budget = share_of_blocks(2);
    let keep = stage_args(dir, &["--stage-budget", &budget, "--keep-stage"]);
    let first = bench(&fx.path, 4, 2, &keep);
    assert_epochs_exact(&first, &oracle, 3, "first job");
    let again = bench(&fx.path, 4, 2, &keep);
    assert_epochs_exact(&again, &oracle, 3, "one node without a stage");
    assert_eq!(
        again.stderr().matches("cannot make the directory").count(),
        1
    );
    let remote = per_epoch(&again, "remote_bytes_received_per_node");
    assert!(remote.iter().all(|&r| r > 0.0), "{remote:?}");
}

#[test]
fn a_cursor_taken_while_nodes_exchange_resumes_exactly() {
    let fx = database(315);
    let scratch = kit::TempDir::new().unwrap();
    let cursor = scratch.path().join("cursor.bin");
    let cursor = cursor.to_str().unwrap();
    let common = ["--shuffle", "5", "--shuffle-mode", "global"];
    let mut plain = vec!["--epochs", "3"];
    plain.extend_from_slice(&common);
    let whole = bench(&fx.path, 2, 1, &plain);
    let stage = kit::TempDir::new().unwrap();
    let dir = stage.path().to_str().unwrap();
    let budget = share_of_blocks(2);
    let mut warm_up = stage_args(dir, &["--stage-budget", &budget, "--keep-stage"]);
    warm_up.extend_from_slice(&common);
    bench(&fx.path, 2, 1, &warm_up);
    // Stopped in the second epoch (43 steps an epoch), resumed after it.
    let mut stop = warm_up.clone();
    stop.extend_from_slice(&["--stop-after", "60", "--save-cursor", cursor]);
    let head = bench(&fx.path, 2, 1, &stop);
    let mut resume = stage_args(dir, &["--stage-budget", &budget, "--resume", cursor]);
    resume.extend_from_slice(&common);
    let rest = bench(&fx.path, 2, 1, &resume);
    let mut joined: Vec<String> = head.lines.iter().chain(&rest.lines).cloned().collect();
    joined.sort();
    let mut want = whole.lines.clone();
    want.sort();
    assert!(joined == want, "the resumed job differs");
    for ran in [&head, &rest] {
        assert!(
            total(ran, "remote_bytes_received_per_node") > 0.0,
            "nothing received"
        );
    }
}

#[test]
fn a_replicated_stage_reads_the_file_about_once_per_job_not_once_per_node() {
    let fx = database(316);
    let oracle = oracle_lines(&fx);
    let file_len = std::fs::metadata(fx.data_file()).unwrap().len() as f64;
    for (n, k) in [(4usize, 1usize), (4, 2)] {
        let what = format!("-n {n}, {k} per node");
        let nodes = n.div_ceil(k) as f64;
        let stage = kit::TempDir::new().unwrap();
        let dir = stage.path().to_str().unwrap();
        let shared = bench(&fx.path, n, k, &stage_args(dir, &[]));
        assert_epochs_exact(&shared, &oracle, 3, &what);
        let alone = bench_with(&fx.path, n, k, &stage_args(dir, &[]), &[NO_EXCHANGE]);
        assert_epochs_exact(&alone, &oracle, 3, &what);
        // Read from the file by the whole job: each node's share of the
        // first epoch, and at most the rest of the blocks it is home to
        // (the others come from their homes); alone, every node fills its
        // stage from the file, as far as its filler gets.
        let job = |r: &Ran| nodes * total(r, "db_bytes_read_per_node");
        // Slack for runs read from the file while a home block was not whole
        // yet (a loaded machine), and for epoch 2 reading what no stage
        // holds yet, as the filler waits for it (docs/design/node-stage.md).
        let bound = (1.0 + (nodes - 1.0) / (nodes * nodes) + 0.45) * file_len;
        assert!(
            job(&shared) <= bound,
            "{what}: the job read {} bytes of a {file_len}-byte file ({} without the exchange)",
            job(&shared),
            job(&alone)
        );
        assert!(
            total(&shared, "remote_bytes_received_per_node") > 0.0,
            "{what}"
        );
    }
}

#[test]
fn epoch_one_reads_only_the_nodes_share_and_nostage_ignores_a_stage() {
    let fx = database(309);
    let oracle = oracle_lines(&fx);
    let file_len = std::fs::metadata(fx.data_file()).unwrap().len() as f64;
    let stage = kit::TempDir::new().unwrap();
    let dir = stage.path().to_str().unwrap();
    // One epoch on two nodes: the filler waits for the second epoch, so
    // each node reads its half (and the tree), not the other half too.
    let one = bench(
        &fx.path,
        2,
        1,
        &["--epochs", "1", "--stage", dir, "--keep-stage"],
    );
    // One epoch's trace lines carry no epoch prefix.
    let mut lines = one.lines.clone();
    lines.sort();
    assert!(lines == oracle, "one epoch differs from liblmdb");
    let rows = one.row["per_epoch"].as_array().unwrap();
    let db = rows[0]["db_bytes_read_per_node"].as_f64().unwrap();
    assert!(
        db < 0.6 * file_len,
        "epoch 1 read {db} bytes per node of a {file_len}-byte file"
    );
    // Kept complete (the filler ran at the end), yet lmdbio-nostage reads
    // the file and not the stage.
    let plain = bench(
        &fx.path,
        2,
        1,
        &[
            "--epochs",
            "2",
            "--stage",
            dir,
            "--method",
            "lmdbio-nostage",
        ],
    );
    assert_epochs_exact(&plain, &oracle, 2, "lmdbio-nostage");
    assert_eq!(plain.f("stage_bytes_read_per_node"), 0.0);
    assert!(plain.f("bytes_read_per_node") >= 0.9 * file_len);
    let staged = bench(&fx.path, 2, 1, &["--epochs", "2", "--stage", dir]);
    assert_epochs_exact(&staged, &oracle, 2, "lmdbio from the kept stage");
    assert!(staged.f("stage_bytes_read_per_node") > 0.0);
}

/// The reader of one node stops (SIGSTOP) or dies (SIGKILL) while the
/// nodes exchange blocks every round: the other node's reader, waiting
/// for its transfers or the round's agreement, fails within the timeout
/// naming it (or the launcher ends the job on the death), never a hang.
#[test]
fn a_peer_stopped_or_killed_while_nodes_exchange_ends_the_job() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let fx = database(317);
    let stage = kit::TempDir::new().unwrap();
    let dir = stage.path().to_str().unwrap();
    let budget = share_of_blocks(2);
    let keep = stage_args(dir, &["--stage-budget", &budget, "--keep-stage"]);
    // Kept and partitioned: from the next job's first round on, each node
    // asks the other for the runs of the other's blocks.
    let warm_up = bench(&fx.path, 2, 1, &keep);
    assert!(per_epoch(&warm_up, "remote_bytes_received_per_node")[2] > 0.0);
    // One rank a node, and two: there the stopped reader's node mate
    // waits for it too, and the readers' ranks are not the world's.
    let cases = [(2usize, 1usize, 1usize), (4, 2, 2)];
    for ((n, k, victim), signal) in cases.into_iter().flat_map(|c| [(c, "STOP"), (c, "KILL")]) {
        let what = format!("-n {n}, {k} per node, SIG{signal} to rank {victim}");
        let scratch = kit::TempDir::new().unwrap();
        let log = scratch.path().join("stdout");
        let mut cmd = kit::mpiexec(n, &kit::lmdbio_binary(env!("CARGO_BIN_EXE_lmdbio")));
        cmd.env("LMDBIO_TIMEOUT", "3")
            .arg("bench")
            .args(["--ranks-per-node", &k.to_string(), "--batch", "7"])
            .args(["--window", "4000000", "--epochs", "100000"])
            .args(["--stage", dir, "--stage-budget", &budget, "--keep-stage"])
            .arg(&fx.path)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::piped());
        let child = cmd.spawn().unwrap();
        let root = child.id();
        let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
        let started = Instant::now();
        let limit = Duration::from_secs(kit::load_scaled(60));
        // Rank 0 reports the set-up before its run; a second later both
        // readers are well into the exchanging rounds.
        while !std::fs::read_to_string(&log).unwrap().contains("set-up") {
            assert!(!waiter.is_finished(), "{what}: the job ended early");
            assert!(started.elapsed() < limit, "{what}: the job did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let pid = kit::rank_pid(root, victim).expect("the rank's pid");
        std::thread::sleep(Duration::from_millis(1000));
        assert!(!waiter.is_finished(), "{what}: the job ended early");
        assert!(std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap()
            .success());
        let signalled = Instant::now();
        let out = waiter.join().unwrap();
        let took = signalled.elapsed();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        let err = String::from_utf8_lossy(&out.stderr).into_owned()
            + &std::fs::read_to_string(&log).unwrap();
        eprintln!(
            "{what}: the job ended {:.1} s after ({}); last lines:\n{}",
            took.as_secs_f64(),
            out.status,
            err.lines().rev().take(6).collect::<Vec<_>>().join("\n")
        );
        assert_ne!(out.status.code(), Some(124), "{what}: hung:\n{err}");
        assert!(!out.status.success(), "{what}: {err}");
        // The timeout (3 s), the roll call's grace (1 s) and the
        // launcher's teardown, with room for a loaded machine.
        assert!(took < Duration::from_secs(30), "{what}: took {took:?}");
        // Readers name the rank of the readers' communicator, node mates
        // their node's reader.
        let timed_out = err.contains("timed out after")
            && (err.contains("did not arrive") || err.contains("a reader, did not deliver"));
        let launcher = err.contains("SIGNAL: 9") || err.contains("signal 9");
        match signal {
            "STOP" => assert!(timed_out, "{what}: {err}"),
            _ => assert!(timed_out || launcher, "{what}: {err}"),
        }
    }
}
