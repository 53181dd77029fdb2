//! Support for lmdbio's benchmarks: cached benchmark databases written by
//! the system liblmdb (the testkit's way), dropping a file from the page
//! cache, and per-process resource counters.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use lmdb::{Environment, EnvironmentFlags};
use lmdbio_testkit as kit;

/// `target/` of the workspace (or `CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("benches/ lives in the workspace")
            .join("target"),
    }
}

/// Where benchmark databases are cached between runs.
pub fn bench_data_dir() -> PathBuf {
    target_dir().join("bench-data")
}

/// Where benchmark results are written.
pub fn results_dir() -> PathBuf {
    target_dir().join("bench-results")
}

/// The Caffe plugin `cargo bench` built beside this benchmark, or `None`
/// (after saying why) when Caffe or its tool `tool` is not installed.
/// Setting `LMDBIO_REQUIRE_CAFFE` turns the skip into a failure.
pub fn caffe_plugin_or_skip(bench: &str, tool: &str) -> Option<PathBuf> {
    let caffe_ready = Path::new("/usr/bin/caffe").exists()
        && Path::new("/usr/bin").join(tool).exists()
        && Path::new("/usr/include/caffe/caffe.hpp").exists();
    if !caffe_ready {
        assert!(
            std::env::var_os("LMDBIO_REQUIRE_CAFFE").is_none(),
            "LMDBIO_REQUIRE_CAFFE is set but Caffe is not installed"
        );
        println!("{bench}: SKIPPED (Caffe is not installed; run scripts/setup.sh)");
        return None;
    }
    // The plugin is a dependency of this crate, so `cargo bench` builds it
    // into deps/ beside the benchmark's executable.
    let exe = std::env::current_exe().unwrap();
    let plugin = exe.parent().unwrap().join("libcaffe_lmdbio.so");
    assert!(plugin.exists(), "no {}", plugin.display());
    Some(plugin)
}

/// The 1-minute load average: how busy the (shared) machine was.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// Reads a number from the environment, or `default` if unset.
pub fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .replace('_', "")
            .parse()
            .unwrap_or_else(|e| panic!("{name}={v:?} is not a number: {e}")),
        Err(_) => default,
    }
}

/// A database written Caffe-style: ascending `convert_imageset` keys
/// (`kit::caffe_key`), seeded random values of one size, one commit per
/// `commit_every` records, through the system liblmdb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbSpec {
    pub label: &'static str,
    pub records: usize,
    pub value_len: usize,
    pub commit_every: usize,
    pub seed: u64,
}

impl DbSpec {
    /// Cache directory name: every parameter that shapes the file.
    pub fn dir_name(&self) -> String {
        format!(
            "{}-n{}-v{}-c{}-s{}",
            self.label, self.records, self.value_len, self.commit_every, self.seed
        )
    }

    /// A map large enough for the records, their overflow pages and the
    /// tree, rounded up to 1 MiB.
    fn map_size(&self) -> usize {
        let per_record = self.value_len + 2 * 4096 + 64;
        let bytes = self.records * per_record / 10 * 11 + (64 << 20);
        (bytes + (1 << 20) - 1) & !((1 << 20) - 1)
    }
}

/// Returns the directory of the database `spec`, writing it first unless a
/// complete copy is cached. Writing goes to a temporary directory renamed
/// into place at the end, so an interrupted run never leaves a partial
/// database behind. The second value is the seconds spent writing (0 when
/// reused).
pub fn ensure_db(spec: &DbSpec) -> (PathBuf, f64) {
    let root = bench_data_dir();
    std::fs::create_dir_all(&root).expect("create bench-data dir");
    let dir = root.join(spec.dir_name());
    if dir.join("data.mdb").is_file() && is_complete(&dir, spec) {
        return (dir, 0.0);
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("remove stale bench database");
    }
    let tmp = root.join(format!("{}.tmp-{}", spec.dir_name(), std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).expect("remove temp dir");
    }
    std::fs::create_dir_all(&tmp).expect("create temp dir");
    let start = Instant::now();
    {
        let env = Environment::new()
            .set_map_size(spec.map_size())
            .open(&tmp)
            .expect("open lmdb environment for writing");
        let db = env.open_db(None).expect("main db");
        let mut rng = kit::Rng::new(spec.seed);
        let mut i = 0;
        // One commit's worth of records in memory at a time.
        while i < spec.records {
            let end = (i + spec.commit_every).min(spec.records);
            let chunk: kit::Records = (i..end)
                .map(|n| (kit::caffe_key(n), rng.bytes(spec.value_len)))
                .collect();
            kit::put_all(&env, db, &chunk, spec.commit_every);
            i = end;
        }
        env.sync(true).expect("sync");
    }
    let secs = start.elapsed().as_secs_f64();
    std::fs::rename(&tmp, &dir).expect("move bench database into place");
    assert!(
        is_complete(&dir, spec),
        "freshly written database is incomplete"
    );
    (dir, secs)
}

fn is_complete(dir: &Path, spec: &DbSpec) -> bool {
    let Ok(env) = Environment::new()
        .set_flags(EnvironmentFlags::READ_ONLY)
        .open(dir)
    else {
        return false;
    };
    env.stat().map(|s| s.entries()).ok() == Some(spec.records)
}

/// Reads a whole file into the page cache (and throws it away).
pub fn read_whole_file(path: &Path) -> u64 {
    use std::os::unix::fs::FileExt;
    let f = File::open(path).expect("open for warming");
    let len = f.metadata().expect("stat").len();
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < len {
        let n = f.read_at(&mut buf, off).expect("read for warming");
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    off
}

/// How a cold run's cache was emptied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheDrop {
    /// `fsync` then `posix_fadvise(POSIX_FADV_DONTNEED)` on the data file
    /// succeeded.
    pub fadvise: bool,
    /// `sync` then `echo 3 > /proc/sys/vm/drop_caches` succeeded.
    pub drop_caches: bool,
}

/// Drops a file's pages from the page cache: always with `posix_fadvise`
/// (after an `fsync`, so no page is dirty), and with the global
/// `drop_caches` too when `try_drop_caches` is set and permitted.
pub struct CacheDropper {
    try_drop_caches: bool,
    /// Why `drop_caches` is not used, once it failed.
    pub drop_caches_error: Option<String>,
}

impl CacheDropper {
    pub fn new(try_drop_caches: bool) -> CacheDropper {
        CacheDropper {
            try_drop_caches,
            drop_caches_error: if try_drop_caches {
                None
            } else {
                Some("disabled (LMDBIO_BENCH_DROP_CACHES=0)".into())
            },
        }
    }

    /// Drops `data` from the cache; `drop_caches` as well if permitted.
    pub fn drop_file(&mut self, data: &Path) -> CacheDrop {
        let fadvise = fadvise_dontneed(data);
        let mut drop_caches = false;
        if self.try_drop_caches && self.drop_caches_error.is_none() {
            // SAFETY: sync(2) takes no arguments and cannot fail.
            unsafe { libc::sync() };
            match std::fs::write("/proc/sys/vm/drop_caches", "3\n") {
                Ok(()) => drop_caches = true,
                Err(e) => self.drop_caches_error = Some(e.to_string()),
            }
        }
        CacheDrop {
            fadvise,
            drop_caches,
        }
    }

    /// Only `fsync` + `posix_fadvise(DONTNEED)` on `data`.
    pub fn fadvise_only(&self, data: &Path) -> bool {
        fadvise_dontneed(data)
    }
}

fn fadvise_dontneed(path: &Path) -> bool {
    let Ok(f) = File::open(path) else {
        return false;
    };
    if f.sync_all().is_err() {
        return false;
    }
    // SAFETY: a valid open descriptor; offset 0 and length 0 mean the whole
    // file.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    rc == 0
}

/// Resource counters of this process (all its threads, living and ended).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub major_faults: i64,
    pub minor_faults: i64,
    /// `read_bytes` of `/proc/self/io`: bytes this process caused to be
    /// fetched from the storage layer (page faults and readahead included).
    pub read_bytes: Option<u64>,
}

impl Usage {
    pub fn now() -> Usage {
        // SAFETY: getrusage fills the zeroed struct we pass.
        let ru = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut ru);
            ru
        };
        Usage {
            major_faults: ru.ru_majflt,
            minor_faults: ru.ru_minflt,
            read_bytes: proc_io_read_bytes(),
        }
    }

    pub fn since(self, earlier: Usage) -> Usage {
        Usage {
            major_faults: self.major_faults - earlier.major_faults,
            minor_faults: self.minor_faults - earlier.minor_faults,
            read_bytes: match (self.read_bytes, earlier.read_bytes) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                _ => None,
            },
        }
    }
}

fn proc_io_read_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/io").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Output of a command, or why there is none (for the machine description).
pub fn command_output(cmd: &str, args: &[&str]) -> String {
    match std::process::Command::new(cmd).args(args).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        Ok(o) => format!(
            "({cmd} failed: {})",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("({cmd} unavailable: {e})"),
    }
}

/// `read_ahead_kb` of the block device holding `path`, if it can be found.
pub fn read_ahead_kb(path: &Path) -> Option<String> {
    let source = command_output(
        "findmnt",
        &["-n", "-o", "SOURCE", "-T", &path.to_string_lossy()],
    );
    let name = Path::new(source.trim())
        .file_name()?
        .to_string_lossy()
        .into_owned();
    let dev = Path::new("/sys/class/block").join(name);
    [
        dev.join("queue/read_ahead_kb"),
        dev.join("../queue/read_ahead_kb"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .map(|s| s.trim().to_owned())
}

/// Median and minimum of samples.
pub fn median_min(samples: &[f64]) -> (f64, f64) {
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (median, s[0])
}
