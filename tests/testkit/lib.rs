//! Test fixtures: LMDB databases written by the system liblmdb (through
//! `lmdb-rkv`) in many layouts, and liblmdb itself as the oracle.
//!
//! Every layout is deterministic (seeded), so a failure reproduces.

use std::path::{Path, PathBuf};
use std::process::Command;

use lmdb::{Cursor, DatabaseFlags, Environment, EnvironmentFlags, Transaction, WriteFlags};
use sha2::{Digest, Sha256};

pub use tempfile::TempDir;

pub mod c_programs;
pub mod caffe_data;
pub mod images;

/// A small, fast, seeded generator (xorshift64*): tests need repeatable
/// randomness, not quality.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        v.truncate(len);
        v
    }
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// How a fixture database is opened: the directory or the data file.
pub struct Fixture {
    pub dir: TempDir,
    /// What to pass to lmdbio and `mdb_dump` (a directory, or with
    /// `nosubdir` the data file).
    pub path: PathBuf,
    pub nosubdir: bool,
    /// Named database the records live in, if any.
    pub subdb: Option<String>,
    pub name: &'static str,
}

/// A record set to write and, after writing, what liblmdb holds.
pub type Records = Vec<(Vec<u8>, Vec<u8>)>;

pub struct Writer {
    pub env: Environment,
    pub db: lmdb::Database,
}

/// Options for a fixture environment.
#[derive(Clone, Copy)]
pub struct EnvSpec {
    pub nosubdir: bool,
    pub writemap: bool,
    pub map_size: usize,
    pub max_dbs: u32,
}

impl Default for EnvSpec {
    fn default() -> Self {
        EnvSpec {
            nosubdir: false,
            writemap: false,
            map_size: 1 << 30,
            max_dbs: 8,
        }
    }
}

pub fn new_fixture(name: &'static str, spec: EnvSpec) -> (Fixture, Environment) {
    let dir = tempfile::Builder::new()
        .prefix(&format!("lmdbio-{name}-"))
        .tempdir()
        .expect("temp dir");
    let path = if spec.nosubdir {
        dir.path().join("data.mdb")
    } else {
        dir.path().to_owned()
    };
    let mut flags = EnvironmentFlags::empty();
    if spec.nosubdir {
        flags |= EnvironmentFlags::NO_SUB_DIR;
    }
    if spec.writemap {
        flags |= EnvironmentFlags::WRITE_MAP;
    }
    let env = Environment::new()
        .set_flags(flags)
        .set_map_size(spec.map_size)
        .set_max_dbs(spec.max_dbs)
        .open(&path)
        .expect("open lmdb environment");
    (
        Fixture {
            dir,
            path,
            nosubdir: spec.nosubdir,
            subdb: None,
            name,
        },
        env,
    )
}

/// Writes `records` in the given order, committing every `commit_every`.
pub fn put_all(
    env: &Environment,
    db: lmdb::Database,
    records: &[(Vec<u8>, Vec<u8>)],
    commit_every: usize,
) {
    for chunk in records.chunks(commit_every.max(1)) {
        let mut txn = env.begin_rw_txn().expect("rw txn");
        for (k, v) in chunk {
            txn.put(db, k, v, WriteFlags::empty()).expect("put");
        }
        txn.commit().expect("commit");
    }
}

/// The key convert_imageset writes: 8-digit line number, `_`, path.
pub fn caffe_key(i: usize) -> Vec<u8> {
    format!("{i:08}_class{}/img_{i}.JPEG", i % 10).into_bytes()
}

/// A Caffe-style training set: ascending keys, one commit per 1000 records.
pub fn caffe_style(n: usize, value_len: usize, seed: u64) -> Fixture {
    let (fx, env) = new_fixture("caffe", EnvSpec::default());
    let db = env.open_db(None).expect("main db");
    let mut rng = Rng::new(seed);
    let records: Records = (0..n)
        .map(|i| (caffe_key(i), rng.bytes(value_len)))
        .collect();
    put_all(&env, db, &records, 1000);
    fx
}

/// Every layout the reader must handle, by name. Each returns the fixture;
/// the oracle is whatever liblmdb reads back.
pub fn all_layouts() -> Vec<Fixture> {
    vec![
        caffe_style(2500, 3000, 1),
        random_order(3000, 2),
        churned(3),
        inline_only(20_000, 4),
        overflow_only(300, 5),
        empty(),
        single_record(),
        max_key_size(6),
        huge_values(7),
        named_databases(8),
        integer_keys(9),
        reverse_keys(10),
        shrunk_overflow_in_place(11),
        zero_length_values(),
        nosubdir_writemap(12),
        compacted_copy(13),
        deep_tree(14),
    ]
}

fn value_len_mixed(rng: &mut Rng) -> usize {
    match rng.below(4) {
        0 => rng.below(64) as usize,
        1 => 500 + rng.below(1500) as usize,
        2 => 2000 + rng.below(20_000) as usize,
        _ => 20_000 + rng.below(60_000) as usize,
    }
}

/// Keys inserted in random order, values of mixed sizes, commits of 100.
pub fn random_order(n: usize, seed: u64) -> Fixture {
    let (fx, env) = new_fixture("random", EnvSpec::default());
    let db = env.open_db(None).unwrap();
    let mut rng = Rng::new(seed);
    let mut records: Records = (0..n)
        .map(|_| {
            let klen = 1 + rng.below(40) as usize;
            let k = rng.bytes(klen);
            let vlen = value_len_mixed(&mut rng);
            (k, rng.bytes(vlen))
        })
        .collect();
    rng.shuffle(&mut records);
    put_all(&env, db, &records, 100);
    fx
}

/// Many commits of inserts, deletes and updates (growing and shrinking
/// values, inline and overflow) so freed pages are reused.
pub fn churned(seed: u64) -> Fixture {
    let (fx, env) = new_fixture("churn", EnvSpec::default());
    let db = env.open_db(None).unwrap();
    let mut rng = Rng::new(seed);
    let mut live: Vec<Vec<u8>> = Vec::new();
    for _round in 0..60 {
        let mut txn = env.begin_rw_txn().unwrap();
        for _ in 0..80 {
            let action = rng.below(10);
            if action < 5 || live.is_empty() {
                let k = format!("k{:06}", rng.below(5000)).into_bytes();
                let v = {
                    let l = value_len_mixed(&mut rng);
                    rng.bytes(l)
                };
                txn.put(db, &k, &v, WriteFlags::empty()).unwrap();
                live.push(k);
            } else if action < 8 {
                let i = rng.below(live.len() as u64) as usize;
                let k = live.swap_remove(i);
                match txn.del(db, &k, None) {
                    Ok(()) | Err(lmdb::Error::NotFound) => {}
                    Err(e) => panic!("del: {e}"),
                }
            } else {
                let i = rng.below(live.len() as u64) as usize;
                let l = value_len_mixed(&mut rng);
                let v = rng.bytes(l);
                txn.put(db, &live[i].clone(), &v, WriteFlags::empty())
                    .unwrap();
            }
        }
        txn.commit().unwrap();
    }
    fx
}

pub fn inline_only(n: usize, seed: u64) -> Fixture {
    let (fx, env) = new_fixture("inline", EnvSpec::default());
    let db = env.open_db(None).unwrap();
    let mut rng = Rng::new(seed);
    let records: Records = (0..n)
        .map(|i| {
            let l = rng.below(200) as usize;
            (format!("{i:08}").into_bytes(), rng.bytes(l))
        })
        .collect();
    put_all(&env, db, &records, 5000);
    fx
}

pub fn overflow_only(n: usize, seed: u64) -> Fixture {
    let (fx, env) = new_fixture("overflow", EnvSpec::default());
    let db = env.open_db(None).unwrap();
    let mut rng = Rng::new(seed);
    let records: Records = (0..n)
        .map(|i| {
            let l = 196_608 + 20 + rng.below(8) as usize;
            (caffe_key(i), rng.bytes(l))
        })
        .collect();
    put_all(&env, db, &records, 50);
    fx
}

pub fn empty() -> Fixture {
    let (fx, env) = new_fixture("empty", EnvSpec::default());
    let db = env.open_db(None).unwrap();
    // Commit a transaction that touches nothing, as a writer that opens and
    // closes without records would.
    put_all(&env, db, &[], 1);
    fx
}

pub fn single_record() -> Fixture {
    let (fx, env) = new_fixture("single", EnvSpec::default());
    let db = env.open_db(None).unwrap();
    put_all(&env, db, &[(b"only".to_vec(), b"record".to_vec())], 1);
    fx
}

pub fn max_key_size(seed: u64) -> Fixture {
    let (fx, env) = new_fixture("maxkey", EnvSpec::default());
    let db = env.open_db(None).unwrap();
    let mut rng = Rng::new(seed);
    let records: Records = (0..400)
        .map(|i| {
            let mut k = format!("{i:05}").into_bytes();
            k.resize(511, b'k');
            let l = if i % 3 == 0 { 5000 } else { 100 };
            (k, rng.bytes(l))
        })
        .collect();
    put_all(&env, db, &records, 100);
    fx
}

pub fn huge_values(seed: u64) -> Fixture {
    let (fx, env) = new_fixture("huge", EnvSpec::default());
    let db = env.open_db(None).unwrap();
    let mut rng = Rng::new(seed);
    let records: Records = (0..6)
        .map(|i| {
            (
                format!("big{i}").into_bytes(),
                rng.bytes((3 << 20) + 7919 * i),
            )
        })
        .collect();
    put_all(&env, db, &records, 2);
    fx
}

/// Two named databases plus plain records in MAIN; the fixture reads
/// "train".
pub fn named_databases(seed: u64) -> Fixture {
    let (mut fx, env) = new_fixture("named", EnvSpec::default());
    let mut rng = Rng::new(seed);
    let train = env
        .create_db(Some("train"), DatabaseFlags::empty())
        .unwrap();
    let val = env.create_db(Some("val"), DatabaseFlags::empty()).unwrap();
    let main = env.open_db(None).unwrap();
    let recs = |rng: &mut Rng, n: usize| -> Records {
        (0..n)
            .map(|i| {
                let l = value_len_mixed(rng);
                (caffe_key(i), rng.bytes(l))
            })
            .collect()
    };
    let train_recs = recs(&mut rng, 700);
    let val_recs = recs(&mut rng, 150);
    put_all(&env, train, &train_recs, 100);
    put_all(&env, val, &val_recs, 100);
    put_all(
        &env,
        main,
        &[(b"aaa-plain".to_vec(), b"in main".to_vec())],
        1,
    );
    fx.subdb = Some("train".into());
    fx
}

pub fn integer_keys(seed: u64) -> Fixture {
    let (mut fx, env) = new_fixture("intkey", EnvSpec::default());
    let db = env
        .create_db(Some("ints"), DatabaseFlags::INTEGER_KEY)
        .unwrap();
    let mut rng = Rng::new(seed);
    let mut records: Records = (0..3000u64)
        .map(|i| {
            let k = (i * 7919 % 100_003 + (i << 20)).to_le_bytes().to_vec();
            let l = value_len_mixed(&mut rng);
            (k, rng.bytes(l))
        })
        .collect();
    rng.shuffle(&mut records);
    put_all(&env, db, &records, 500);
    fx.subdb = Some("ints".into());
    fx
}

pub fn reverse_keys(seed: u64) -> Fixture {
    let (mut fx, env) = new_fixture("revkey", EnvSpec::default());
    let db = env
        .create_db(Some("rev"), DatabaseFlags::REVERSE_KEY)
        .unwrap();
    let mut rng = Rng::new(seed);
    let mut records: Records = (0..2000)
        .map(|i| {
            let l = 10 + rng.below(3000) as usize;
            (
                format!("{i}-{}", rng.below(1000)).into_bytes(),
                rng.bytes(l),
            )
        })
        .collect();
    rng.shuffle(&mut records);
    put_all(&env, db, &records, 250);
    fx.subdb = Some("rev".into());
    fx
}

/// A large value overwritten by a tiny one in the same transaction: liblmdb
/// keeps the dirty overflow run, so a few-byte value lives out of line in a
/// run longer than it needs.
pub fn shrunk_overflow_in_place(seed: u64) -> Fixture {
    let (fx, env) = new_fixture("shrunk", EnvSpec::default());
    let db = env.open_db(None).unwrap();
    let mut rng = Rng::new(seed);
    let mut txn = env.begin_rw_txn().unwrap();
    for i in 0..50 {
        let k = format!("key{i:03}").into_bytes();
        txn.put(db, &k, &rng.bytes(40_000), WriteFlags::empty())
            .unwrap();
        if i % 2 == 0 {
            let l = rng.below(30) as usize;
            txn.put(db, &k, &rng.bytes(l), WriteFlags::empty()).unwrap();
        }
    }
    txn.commit().unwrap();
    fx
}

pub fn zero_length_values() -> Fixture {
    let (fx, env) = new_fixture("zerolen", EnvSpec::default());
    let db = env.open_db(None).unwrap();
    let records: Records = (0..500)
        .map(|i| (format!("z{i:04}").into_bytes(), Vec::new()))
        .collect();
    put_all(&env, db, &records, 100);
    fx
}

/// Written through a writable map into a single file: the file is as long
/// as the map, and pages past the last one are holes.
pub fn nosubdir_writemap(seed: u64) -> Fixture {
    let spec = EnvSpec {
        nosubdir: true,
        writemap: true,
        map_size: 64 << 20,
        ..Default::default()
    };
    let (fx, env) = new_fixture("writemap", spec);
    let db = env.open_db(None).unwrap();
    let mut rng = Rng::new(seed);
    let records: Records = (0..800)
        .map(|i| {
            let l = value_len_mixed(&mut rng) / 4;
            (caffe_key(i), rng.bytes(l))
        })
        .collect();
    put_all(&env, db, &records, 64);
    fx
}

/// `mdb_copy -c`: a compacted copy with every page renumbered.
pub fn compacted_copy(seed: u64) -> Fixture {
    let source = churned(seed);
    let (fx, env) = new_fixture("compacted", EnvSpec::default());
    drop(env);
    std::fs::remove_file(fx.path.join("data.mdb")).unwrap();
    let status = Command::new("mdb_copy")
        .arg("-c")
        .arg(&source.path)
        .arg(&fx.path)
        .status()
        .expect("run mdb_copy (lmdb-utils)");
    assert!(status.success(), "mdb_copy -c failed");
    fx
}

/// Enough small records for a tree four levels deep and many leaf chunks.
pub fn deep_tree(seed: u64) -> Fixture {
    let (fx, env) = new_fixture("deep", EnvSpec::default());
    let db = env.open_db(None).unwrap();
    let mut rng = Rng::new(seed);
    let records: Records = (0..60_000)
        .map(|i| {
            let mut k = format!("{i:09}").into_bytes();
            k.extend_from_slice(&[b'x'; 300]);
            (k, rng.bytes(8))
        })
        .collect();
    put_all(&env, db, &records, 20_000);
    fx
}

impl Fixture {
    /// Everything liblmdb's cursor returns, in order.
    pub fn oracle(&self) -> Records {
        let mut flags = EnvironmentFlags::READ_ONLY;
        if self.nosubdir {
            flags |= EnvironmentFlags::NO_SUB_DIR;
        }
        let env = Environment::new()
            .set_flags(flags)
            .set_max_dbs(8)
            .open(&self.path)
            .expect("oracle open");
        let db = env.open_db(self.subdb.as_deref()).expect("oracle db");
        let txn = env.begin_ro_txn().unwrap();
        let mut cursor = txn.open_ro_cursor(db).unwrap();
        let records: Records = cursor
            .iter_start()
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .expect("oracle iterate");
        records
    }

    /// The data file itself.
    pub fn data_file(&self) -> PathBuf {
        if self.nosubdir {
            self.path.clone()
        } else {
            self.path.join("data.mdb")
        }
    }

    /// `mdb_dump` output for this fixture (the oracle for `lmdbio dump`).
    pub fn mdb_dump(&self, extra: &[&str]) -> Vec<u8> {
        mdb_tool("mdb_dump", self, extra)
    }

    /// `mdb_stat` output.
    pub fn mdb_stat(&self) -> String {
        String::from_utf8(mdb_tool("mdb_stat", self, &[])).unwrap()
    }
}

/// Lower-case hex of `bytes`, as `lmdbio bench --trace` writes keys and
/// value digests.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// liblmdb's records of `fx` as `lmdbio bench --trace` lines (key hex,
/// value length, value SHA-256 hex), sorted.
pub fn oracle_lines(fx: &Fixture) -> Vec<String> {
    let mut lines: Vec<String> = fx
        .oracle()
        .iter()
        .map(|(k, v)| format!("{} {} {}", hex(k), v.len(), hex(&Sha256::digest(v))))
        .collect();
    lines.sort();
    lines
}

/// The `lmdbio` command under test: `LMDBIO_BIN` when set (one built
/// against another MPI), else `built`. Cargo tells only the test crate
/// where it built the command, so callers pass
/// `env!("CARGO_BIN_EXE_lmdbio")`.
pub fn lmdbio_binary(built: &str) -> PathBuf {
    std::env::var_os("LMDBIO_BIN").map_or_else(|| PathBuf::from(built), PathBuf::from)
}

fn mdb_tool(tool: &str, fx: &Fixture, extra: &[&str]) -> Vec<u8> {
    let mut cmd = Command::new(tool);
    if fx.nosubdir {
        cmd.arg("-n");
    }
    if let Some(s) = &fx.subdb {
        cmd.arg("-s").arg(s);
    }
    cmd.args(extra).arg(&fx.path);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("run {tool} (lmdb-utils): {e}"));
    assert!(
        out.status.success(),
        "{tool} failed on {}: {}",
        fx.name,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Parses the number after `label:` in `mdb_stat` output.
pub fn stat_field(stat: &str, label: &str) -> u64 {
    stat.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(label)?
                .trim()
                .strip_prefix(':')
                .map(|v| v.trim().parse().ok())
        })
        .flatten()
        .unwrap_or_else(|| panic!("no {label:?} in mdb_stat output:\n{stat}"))
}

/// Bytes of a whole file.
pub fn read_file(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// `mpiexec -n N PROGRAM` under a 60-second limit (see [`load_scaled`]),
/// for the MPI named by `LMDBIO_MPIEXEC` (default `mpiexec.mpich`; Open
/// MPI: `mpiexec.openmpi --oversubscribe`). Add the program's arguments.
pub fn mpiexec(n: usize, program: &Path) -> Command {
    mpiexec_within(n, program, 60)
}

/// As [`mpiexec`], killed after `seconds` (scaled) instead of 60.
pub fn mpiexec_within(n: usize, program: &Path, seconds: u64) -> Command {
    let launcher = std::env::var("LMDBIO_MPIEXEC").unwrap_or_else(|_| "mpiexec.mpich".into());
    let mut words = launcher.split_whitespace();
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", &load_scaled(seconds).to_string()])
        .arg(words.next().unwrap_or("mpiexec.mpich"))
        .args(words);
    if launcher.contains("openmpi") {
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    cmd.arg("-n").arg(n.to_string()).arg(program);
    cmd
}

/// A time limit of `seconds` on an idle machine, stretched by how busy
/// this one is: the one-minute load average per core, between 1 and 5
/// times. A limit is there to catch a hang; on a machine shared with
/// other builds a healthy run of many ranks on two cores can take several
/// times as long, and a hang still ends within five limits.
pub fn load_scaled(seconds: u64) -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let load: f64 = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    (seconds as f64 * (load / cores).clamp(1.0, 5.0)).ceil() as u64
}

/// Runs a command built by [`mpiexec`]; a run that hit the time limit
/// (a hang) fails the test.
pub fn run_bounded(mut cmd: Command) -> std::process::Output {
    let out = cmd.output().expect("run mpiexec");
    assert_ne!(
        out.status.code(),
        Some(124),
        "{cmd:?} hung (killed at its time limit)"
    );
    out
}

/// Pid of the process of MPI rank `rank` (MPICH's `PMI_RANK`, Open MPI's
/// `OMPI_COMM_WORLD_RANK`) among the descendants of `root` (the launcher,
/// or the `timeout` around it).
pub fn rank_pid(root: u32, rank: usize) -> Option<u32> {
    let parent_of = |pid: u32| -> Option<u32> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse().ok())
    };
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let wanted = [
            format!("PMI_RANK={rank}"),
            format!("OMPI_COMM_WORLD_RANK={rank}"),
        ];
        if !env
            .split(|&b| b == 0)
            .any(|v| wanted.iter().any(|w| v == w.as_bytes()))
        {
            continue;
        }
        let mut at = pid;
        for _ in 0..4 {
            match parent_of(at) {
                Some(p) if p == root => return Some(pid),
                Some(p) if p > 1 => at = p,
                _ => break,
            }
        }
    }
    None
}
