//! The reader slot lmdbio holds in `lock.mdb` for a job's snapshot
//! (issue 28, item 1; docs/design/reader-slot.md), against the real
//! liblmdb: its writers keep the snapshot's pages while a 4-rank job reads
//! it, `mdb_stat` shows the slot and its stale-reader check keeps it, the
//! slot is free once the job ends or is killed, and without a usable lock
//! file the job detects a change instead.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use lmdb::{Transaction, WriteFlags};
use lmdbio_testkit::TempDir;
use lmdbio_testkit::{self as kit, hex};
use sha2::{Digest, Sha256};

const RECORDS: usize = 1500;
const VALUE: usize = 2500;
/// Epochs of a job that must see writers' commits: detection needs two of
/// them, so the job has to outlive the test's own set-up (a liblmdb open,
/// `mdb_stat`) on a loaded machine; a job that detects the change ends
/// at once, so only a broken detection pays for the length.
const UNTIL_DETECTED: u32 = 400;

/// `mdb_dump DIR` as key hex -> "LEN SHA256", the form `bench --trace`
/// writes.
fn dump(dir: &Path) -> HashMap<String, String> {
    let out = Command::new("mdb_dump").arg(dir).output().unwrap();
    assert!(out.status.success(), "mdb_dump: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let body = text.split("HEADER=END\n").nth(1).unwrap();
    let lines: Vec<&str> = body
        .lines()
        .take_while(|l| *l != "DATA=END")
        .map(str::trim)
        .collect();
    lines
        .chunks(2)
        .map(|kv| {
            let v: Vec<u8> = (0..kv[1].len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&kv[1][i..i + 2], 16).unwrap())
                .collect();
            (
                kv[0].to_owned(),
                format!("{} {}", v.len(), hex(&Sha256::digest(&v))),
            )
        })
        .collect()
}

/// The rows of `mdb_stat -r[r] DIR`: (pid, txnid), and the stderr/stdout.
fn reader_table(dir: &Path, check: bool) -> (Vec<(u32, u64)>, String) {
    let out = Command::new("mdb_stat")
        .arg(if check { "-rr" } else { "-r" })
        .arg(dir)
        .output()
        .unwrap();
    // (mdb_stat exits 1 after printing only the reader table.)
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("Reader Table Status"), "mdb_stat: {out:?}");
    let mut rows = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [pid, _thread, txnid] = f[..] {
            if let (Ok(p), Ok(t)) = (pid.parse(), txnid.parse()) {
                rows.push((p, t));
            }
        }
    }
    // -rr prints the table again after the check; keep one copy.
    rows.dedup();
    (rows, text)
}

fn last_txnid(dir: &Path) -> u64 {
    let out = Command::new("mdb_stat")
        .arg("-e")
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Last transaction ID: "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("mdb_stat -e: {text}"))
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// `mpiexec -n 4 lmdbio bench` over `db` for `epochs`, tracing into
/// `trace`.
fn start_job(db: &Path, trace: &Path, epochs: u32) -> Child {
    std::fs::create_dir_all(trace).unwrap();
    Command::new("timeout")
        .args(["-k", "5", "120", "mpiexec.mpich", "-n", "4"])
        .arg(env!("CARGO_BIN_EXE_lmdbio"))
        .args(["bench", "--method", "lmdbio", "--batch", "8"])
        .args(["--epochs", &epochs.to_string()])
        .args(["--window", "4194304", "--prefetch", "2", "--trace"])
        .arg(trace.join("records"))
        .arg("--json")
        .arg(trace.join("bench.json"))
        .arg(db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The job's slot as `mdb_stat -r` shows it, once the job has taken it:
/// (pid, txnid) of a live `lmdbio` process.
fn wait_for_slot(db: &Path, job: &mut Child) -> (u32, u64) {
    let started = Instant::now();
    loop {
        let (rows, _) = reader_table(db, false);
        if let Some(&row) = rows.iter().find(|r| comm(r.0) == "lmdbio") {
            return row;
        }
        assert!(
            job.try_wait().unwrap().is_none(),
            "the job ended without a slot"
        );
        assert!(started.elapsed() < Duration::from_secs(60), "no slot");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a process other than this one holds `path` open.
fn someone_has_open(path: &Path) -> bool {
    let me = std::process::id().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        p.file_name() != me.as_str()
            && std::fs::read_dir(p.path().join("fd")).is_ok_and(|fds| {
                fds.flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == path))
            })
    })
}

/// `runs[0].reader_slots_per_node` of `bench --json`.
fn reader_slots_reported(json: &Path) -> f64 {
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    doc["runs"][0]["reader_slots_per_node"].as_f64().unwrap()
}

/// Records the job traced: (records, wrong against `snapshot`).
fn traced(trace: &Path, snapshot: &HashMap<String, String>) -> (usize, usize) {
    let (mut records, mut wrong) = (0, 0);
    for entry in std::fs::read_dir(trace.join("records")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "tsv") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            // EPOCH KEYHEX LEN SHA256
            let f: Vec<&str> = line.split(' ').collect();
            let n = f.len();
            records += 1;
            if snapshot.get(f[n - 3]) != Some(&format!("{} {}", f[n - 2], f[n - 1])) {
                wrong += 1;
            }
        }
    }
    (records, wrong)
}

/// One write transaction of `count` keys: overwrites, or delete and
/// reinsert, with values of `len` bytes (random sizes around it unless
/// `fixed`).
fn write_txn(env: &lmdb::Environment, rng: &mut kit::Rng, count: usize, fixed: bool) {
    let db = env.open_db(None).unwrap();
    let mut txn = env.begin_rw_txn().unwrap();
    for _ in 0..count {
        let key = kit::caffe_key(rng.below(RECORDS as u64) as usize);
        if !fixed && rng.below(2) == 0 {
            let _ = txn.del(db, &key, None);
        }
        let len = if fixed {
            VALUE
        } else {
            1500 + rng.below(3000) as usize
        };
        txn.put(db, &key, &rng.bytes(len), WriteFlags::empty())
            .unwrap();
    }
    txn.commit().unwrap();
}

/// Commits write transactions (as `write_txn`) until the job ends, for
/// at most a minute; returns the job's output and how many commits ran
/// while it did.
fn write_until_it_ends(env: &lmdb::Environment, rng: &mut kit::Rng, job: Child) -> (Output, usize) {
    let (mut job, started, mut commits) = (job, Instant::now(), 0);
    while job.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(60) {
        write_txn(env, rng, 20, false);
        commits += 1;
    }
    (job.wait_with_output().unwrap(), commits)
}

/// Requires that a job whose database changed under it failed saying so
/// (and `says`), having delivered only `snapshot`'s records before.
fn assert_change_detected(
    out: &Output,
    trace: &Path,
    snapshot: &HashMap<String, String>,
    how: &str,
    says: &[&str],
) {
    let err = stderr(out);
    assert!(!out.status.success(), "{how}: the change went unnoticed");
    assert!(
        err.contains("the database changed during the job") && says.iter().all(|s| err.contains(s)),
        "{how}: {err}"
    );
    let (records, wrong) = traced(trace, snapshot);
    assert_eq!(wrong, 0, "{how}: {wrong} of {records} records wrong");
}

fn writer(dir: &Path) -> lmdb::Environment {
    lmdb::Environment::new()
        .set_map_size(1 << 30)
        .open(dir)
        .unwrap()
}

/// After a warm-up, 200 transactions of same-size overwrites grow the
/// file by less than two transactions write (about 20 pages each): freed
/// pages are reused. A held slot would make every one of them grow it.
fn assert_reuses_pages(env: &lmdb::Environment, rng: &mut kit::Rng, data: &Path) {
    for _ in 0..30 {
        write_txn(env, rng, 20, true);
    }
    let settled = size(data);
    for _ in 0..200 {
        write_txn(env, rng, 20, true);
    }
    let grown = size(data) - settled;
    assert!(
        grown < 2 * 20 * 4096,
        "pages not reused: grew {grown} bytes"
    );
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn liblmdb_writers_keep_the_jobs_snapshot_and_reuse_its_pages_after() {
    let fx = kit::caffe_style(RECORDS, VALUE, 7);
    let snapshot = dump(&fx.path);
    let snapshot_txnid = last_txnid(&fx.path);
    let trace = TempDir::new().unwrap();
    let mut job = start_job(&fx.path, trace.path(), 25);

    // liblmdb sees the slot, at the snapshot's transaction, held by a
    // live lmdbio rank; its stale-reader check leaves it.
    let (_, txnid) = wait_for_slot(&fx.path, &mut job);
    let (rows, _) = reader_table(&fx.path, false);
    assert_eq!(rows.len(), 1, "one reader per node: {rows:?}");
    assert_eq!(txnid, snapshot_txnid);
    let (after_check, text) = reader_table(&fx.path, true);
    assert!(text.contains("0 stale readers cleared"), "{text}");
    assert_eq!(after_check, rows, "mdb_stat -rr cleared our slot");

    // Overwrites and delete + reinsert in many transactions while the job
    // reads: without the slot these reuse the snapshot's pages.
    let env = writer(&fx.path);
    let mut rng = kit::Rng::new(7);
    let grown_from = size(&fx.data_file());
    let (out, commits) = write_until_it_ends(&env, &mut rng, job);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(commits >= 10, "only {commits} commits during the job");
    assert!(
        last_txnid(&fx.path) >= snapshot_txnid + 3,
        "too few commits to reuse pages"
    );
    // The writer kept the snapshot's pages: the file grew instead.
    assert!(size(&fx.data_file()) > grown_from);
    assert_eq!(reader_slots_reported(&trace.path().join("bench.json")), 1.0);
    let (records, wrong) = traced(trace.path(), &snapshot);
    assert!(records >= 25 * RECORDS, "{records} records traced");
    assert_eq!(wrong, 0, "{wrong} of {records} records not the snapshot's");

    // Ended: the slot is free and writers reuse pages again; same-size
    // overwrites then leave the file as it is.
    let (rows, _) = reader_table(&fx.path, false);
    assert!(rows.is_empty(), "a reader left behind: {rows:?}");
    assert_reuses_pages(&env, &mut rng, &fx.data_file());
}

#[test]
fn a_killed_jobs_slot_is_cleared_by_liblmdbs_stale_reader_check() {
    let fx = kit::caffe_style(RECORDS, VALUE, 8);
    let trace = TempDir::new().unwrap();
    // A writer's environment stays open throughout, so that liblmdb never
    // resets the lock file: the slot goes only by the reader check.
    let env = writer(&fx.path);
    let mut job = start_job(&fx.path, trace.path(), 400);
    let (pid, _) = wait_for_slot(&fx.path, &mut job);
    let (rows, _) = reader_table(&fx.path, false);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = job.wait_with_output().unwrap();
    assert!(!out.status.success(), "the job survived its rank 0");
    let started = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && started.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The dead rank's slot is still in the table; its pid lock died with
    // it, so liblmdb's check clears it.
    let (rows, _) = reader_table(&fx.path, false);
    assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), vec![pid]);
    let (_, text) = reader_table(&fx.path, true);
    assert!(text.contains("1 stale readers cleared"), "{text}");
    assert!(reader_table(&fx.path, false).0.is_empty());
    let mut rng = kit::Rng::new(8);
    assert_reuses_pages(&env, &mut rng, &fx.data_file());
}

/// Makes the lock file unusable for a slot, in one of the ways lmdbio
/// must refuse; returns the words the refusal names.
fn spoil_lock_file(dir: &Path, how: &str) -> &'static str {
    let lock = dir.join("lock.mdb");
    match how {
        "absent" => {
            std::fs::remove_file(&lock).unwrap();
            "no lock file"
        }
        "another format" => {
            let mut bytes = std::fs::read(&lock).unwrap();
            bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
            std::fs::write(&lock, bytes).unwrap();
            "format 0x2"
        }
        _ => unreachable!(),
    }
}

#[test]
fn without_a_usable_lock_file_a_writer_is_detected_and_nothing_wrong_delivered() {
    for (i, how) in ["absent", "another format"].into_iter().enumerate() {
        let fx = kit::caffe_style(RECORDS, VALUE, 20 + i as u64);
        let snapshot = dump(&fx.path);
        let says = spoil_lock_file(&fx.path, how);
        let trace = TempDir::new().unwrap();
        let job = start_job(&fx.path, trace.path(), UNTIL_DETECTED);
        // Its slot refused at open, before the data file is opened; then
        // liblmdb makes (or resets) the lock file, without the job in it.
        let data = std::fs::canonicalize(fx.data_file()).unwrap();
        let started = Instant::now();
        while !someone_has_open(&data) {
            assert!(started.elapsed() < Duration::from_secs(60), "no open");
            std::thread::sleep(Duration::from_millis(5));
        }
        let env = writer(&fx.path);
        assert!(!reader_table(&fx.path, false)
            .0
            .iter()
            .any(|r| comm(r.0) == "lmdbio"));
        let mut rng = kit::Rng::new(20 + i as u64);
        let (out, _) = write_until_it_ends(&env, &mut rng, job);
        let says = ["lmdbio holds no reader slot", says];
        assert_change_detected(&out, trace.path(), &snapshot, how, &says);
    }
}

/// Claims a slot and locks the reader mutex as a liblmdb reader would,
/// then dies holding it (ctypes on the mapped lock file).
const DIE_HOLDING_THE_READER_MUTEX: &str = r#"
import ctypes, mmap, os, struct, sys
libc = ctypes.CDLL(None)
f = open(sys.argv[1], "r+b")
mm = mmap.mmap(f.fileno(), 0)
n = struct.unpack_from("<I", mm, 56)[0]
struct.pack_into("<QiQ", mm, 128 + 64 * n, 1, os.getpid(), 0)
struct.pack_into("<I", mm, 56, n + 1)
mutex = ctypes.addressof(ctypes.c_char.from_buffer(mm, 8))
assert libc.pthread_mutex_lock(ctypes.c_void_p(mutex)) == 0
print(os.getpid(), flush=True)
os._exit(0)
"#;

#[test]
fn a_reader_mutex_whose_owner_died_is_repaired_and_its_stale_slot_cleared() {
    if !cfg!(all(target_env = "gnu", target_arch = "x86_64")) {
        return; // the script writes x86-64 glibc offsets
    }
    let fx = kit::caffe_style(RECORDS, VALUE, 9);
    // A live environment, so the lock file is not set up afresh.
    let env = writer(&fx.path);
    let out = Command::new("python3")
        .arg("-c")
        .arg(DIE_HOLDING_THE_READER_MUTEX)
        .arg(fx.path.join("lock.mdb"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let dead: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert_eq!(reader_table(&fx.path, false).0, vec![(dead, 1)]);
    let trace = TempDir::new().unwrap();
    let mut job = start_job(&fx.path, trace.path(), 20);
    wait_for_slot(&fx.path, &mut job);
    let (rows, _) = reader_table(&fx.path, false);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_ne!(rows[0].0, dead, "the dead reader's slot stayed");
    assert_eq!(comm(rows[0].0), "lmdbio");
    // liblmdb takes the mutex again without trouble.
    let txn = env.begin_ro_txn().unwrap();
    drop(txn);
    let out = job.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(reader_slots_reported(&trace.path().join("bench.json")), 1.0);
}

/// Frees the slot of `pid` behind its holder's back, as `mdb_env_close`
/// of a liblmdb environment in the holder's own process would.
const CLEAR_SLOT_OF: &str = r#"
import mmap, struct, sys
f = open(sys.argv[1], "r+b")
mm = mmap.mmap(f.fileno(), 0)
n = struct.unpack_from("<I", mm, 56)[0]
hits = [i for i in range(n) if struct.unpack_from("<i", mm, 136 + 64 * i)[0] == int(sys.argv[2])]
assert len(hits) == 1, hits
struct.pack_into("<i", mm, 136 + 64 * hits[0], 0)
"#;

#[test]
fn a_slot_taken_away_or_a_writer_without_the_lock_file_is_detected() {
    if !cfg!(all(target_env = "gnu", target_arch = "x86_64")) {
        return; // the script writes x86-64 glibc offsets
    }
    for (i, how) in ["slot cleared", "MDB_NOLOCK writer"]
        .into_iter()
        .enumerate()
    {
        let fx = kit::caffe_style(RECORDS, VALUE, 30 + i as u64);
        let snapshot = dump(&fx.path);
        let trace = TempDir::new().unwrap();
        let mut job = start_job(&fx.path, trace.path(), UNTIL_DETECTED);
        let (pid, _) = wait_for_slot(&fx.path, &mut job);
        let mut flags = lmdb::EnvironmentFlags::empty();
        let says = if how == "slot cleared" {
            let out = Command::new("python3")
                .arg("-c")
                .arg(CLEAR_SLOT_OF)
                .arg(fx.path.join("lock.mdb"))
                .arg(pid.to_string())
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            "slot lmdbio held in the lock file was cleared"
        } else {
            flags |= lmdb::EnvironmentFlags::NO_LOCK;
            "written without the lock file"
        };
        let env = lmdb::Environment::new()
            .set_flags(flags)
            .set_map_size(1 << 30)
            .open(&fx.path)
            .unwrap();
        let mut rng = kit::Rng::new(30 + i as u64);
        let (out, _) = write_until_it_ends(&env, &mut rng, job);
        assert_change_detected(&out, trace.path(), &snapshot, how, &[says]);
    }
}
