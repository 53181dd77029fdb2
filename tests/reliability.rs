//! What an outside probe broke (issue 28), each case run as the user or
//! the attacker ran it: damaged meta pages against `mdb_dump`, special
//! files where data files belong, `convert` asked to overwrite its own
//! input, killed, or run out of disk.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lmdbio_testkit as kit;
use lmdbio_testkit::images::write_class_folders;
use lmdbio_testkit::TempDir;

/// Runs `lmdbio ARGS` under `timeout`: a case that blocks fails the test
/// instead of hanging it.
fn lmdbio(args: &[&dyn AsRef<std::ffi::OsStr>], limit_s: u32) -> (Output, Duration) {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "2", &limit_s.to_string()])
        .arg(env!("CARGO_BIN_EXE_lmdbio"));
    for a in args {
        cmd.arg(a);
    }
    let started = Instant::now();
    let out = cmd.output().expect("run lmdbio");
    let took = started.elapsed();
    assert_ne!(out.status.code(), Some(124), "lmdbio {:?} blocked", cmd);
    (out, took)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(ok.success(), "mkfifo {}", path.display());
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

const MM_TXNID: usize = 144;

// ---------------------------------------------------------------------------
// Item 7: the meta page is chosen as liblmdb chooses it.

#[test]
fn damaged_txnid_of_the_wrong_slot_parity_is_not_chosen() {
    // One commit: txnid 1 in meta page 1, page 0 still the empty txnid 0.
    let fx = kit::caffe_style(300, 100, 7);
    let bytes = kit::read_file(&fx.data_file());
    let psize = 4096;
    assert_eq!(
        (get_u64(&bytes, MM_TXNID), get_u64(&bytes, psize + MM_TXNID)),
        (0, 1)
    );
    for (slot, damaged) in [(0usize, 3u64), (0, 0x0100_0001), (1, 0x0100_0000)] {
        let mut b = bytes.clone();
        // A larger txnid whose parity says it was never written there.
        put_u64(&mut b, slot * psize + MM_TXNID, damaged);
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("data.mdb"), &b).unwrap();
        let copy = kit::Fixture {
            dir,
            path: PathBuf::new(),
            nosubdir: false,
            subdb: None,
            name: "damaged-meta",
        };
        let copy = kit::Fixture {
            path: copy.dir.path().to_owned(),
            ..copy
        };
        let theirs = copy.mdb_dump(&[]);
        let (ours, _) = lmdbio(&[&"dump", &copy.path], 30);
        assert!(ours.status.success(), "{}", stderr(&ours));
        let lines = theirs.iter().filter(|&&c| c == b'\n').count();
        // An odd txnid in page 0 sends liblmdb to page 1 (300 records); an
        // even one in page 1 sends it to page 0 (the empty first snapshot).
        let expected_records = if damaged & 1 == 1 { 300 } else { 0 };
        assert_eq!(
            lines,
            8 + 2 * expected_records,
            "slot {slot}, txnid {damaged:#x}"
        );
        assert!(
            ours.stdout == theirs,
            "slot {slot}, txnid {damaged:#x}: lmdbio dump differs from mdb_dump"
        );
    }
}

// ---------------------------------------------------------------------------
// Item 6: only regular files are opened as data files, and at once.

#[test]
fn fifos_and_devices_as_data_files_are_refused_at_once() {
    let dir = TempDir::new().unwrap();
    let as_dir = dir.path().join("db");
    std::fs::create_dir(&as_dir).unwrap();
    mkfifo(&as_dir.join("data.mdb"));
    let fifo = dir.path().join("fifo.mdb");
    mkfifo(&fifo);
    let zero = PathBuf::from("/dev/zero");
    for path in [&as_dir, &fifo, &zero] {
        for cmd in [
            vec!["dump"],
            vec!["inspect"],
            vec!["bench", "--method", "lmdbio"],
        ] {
            let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = cmd
                .iter()
                .map(|s| s as &dyn AsRef<std::ffi::OsStr>)
                .collect();
            args.push(path);
            let (out, took) = lmdbio(&args, 20);
            let err = stderr(&out);
            assert!(!out.status.success(), "{cmd:?} {}: {err}", path.display());
            assert!(
                err.contains("not a regular file"),
                "{cmd:?} {}: {err}",
                path.display()
            );
            assert!(took < Duration::from_secs(10), "{cmd:?} took {took:?}");
        }
    }
}

// ---------------------------------------------------------------------------
// Items 2 and 9: convert never destroys input and leaves no partial.

struct ImageSet {
    dir: TempDir,
    root: PathBuf,
    list: PathBuf,
}

fn image_set(images: usize) -> ImageSet {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("imgs");
    let lines = write_class_folders(&root, 2, images / 2, 16, "png", 3);
    let list = dir.path().join("list.txt");
    let text: String = lines.iter().map(|(p, l)| format!("{p} {l}\n")).collect();
    std::fs::write(&list, text).unwrap();
    ImageSet { dir, root, list }
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap_or_default();
                out.push((p, bytes));
            }
        }
    }
    out.sort();
    out
}

fn partials(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("lmdbio-partial"))
        .collect()
}

#[test]
fn convert_refuses_an_out_that_is_holds_or_sits_in_an_input() {
    let set = image_set(8);
    let before = snapshot(set.dir.path());
    let inside = set.root.join("class_000").join("db");
    let parent = set.dir.path().to_owned();
    let cases: Vec<(&str, Vec<&dyn AsRef<std::ffi::OsStr>>)> = vec![
        ("OUT is ROOT", vec![&set.root, &set.list, &set.root]),
        ("OUT holds ROOT", vec![&set.root, &set.list, &parent]),
        ("OUT in ROOT", vec![&set.root, &set.list, &inside]),
        ("OUT is LIST", vec![&set.root, &set.list, &set.list]),
        (
            "folders: OUT is ROOT",
            vec![&"--folders", &set.root, &set.root],
        ),
        (
            "folders: OUT holds ROOT",
            vec![&"--folders", &set.root, &parent],
        ),
    ];
    for (what, paths) in cases {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"convert", &"--overwrite"];
        args.extend(paths);
        let (out, _) = lmdbio(&args, 60);
        let err = stderr(&out);
        assert!(!out.status.success(), "{what}: {err}");
        assert!(err.contains("would destroy the input"), "{what}: {err}");
    }
    // A relative spelling of the same directory is the same directory.
    let rel = set.root.join("..").join("imgs");
    let (out, _) = lmdbio(
        &[&"convert", &"--overwrite", &set.root, &set.list, &rel],
        60,
    );
    assert!(!out.status.success(), "{}", stderr(&out));
    assert_eq!(snapshot(set.dir.path()), before, "an input changed");
    // A directory holding files convert does not write is not replaced.
    let other = set.dir.path().join("notes");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("thesis.tex"), "x").unwrap();
    let (out, _) = lmdbio(
        &[&"convert", &"--overwrite", &set.root, &set.list, &other],
        60,
    );
    assert!(!out.status.success() && stderr(&out).contains("thesis.tex"));
    assert!(other.join("thesis.tex").exists());
}

#[test]
fn convert_refuses_fifos_and_devices_at_once() {
    let set = image_set(4);
    mkfifo(&set.root.join("class_000").join("pipe.png"));
    std::os::unix::fs::symlink("/dev/zero", set.root.join("zero.png")).unwrap();
    let list = set.dir.path().join("special.txt");
    let good = std::fs::read_to_string(&set.list).unwrap();
    std::fs::write(&list, format!("{good}class_000/pipe.png 0\nzero.png 1\n")).unwrap();
    let out_db = set.dir.path().join("db");
    let (out, took) = lmdbio(&[&"convert", &set.root, &list, &out_db], 30);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(took < Duration::from_secs(20));
    assert_eq!(err.matches("not a regular file").count(), 2, "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("(2 skipped)"));
    // The class-folder walk finds the FIFO too and skips it the same way.
    let (out, _) = lmdbio(
        &[
            &"convert",
            &"--folders",
            &set.root,
            &set.dir.path().join("f"),
        ],
        30,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not a regular file"),
        "{}",
        stderr(&out)
    );
    // A FIFO as the list itself.
    let fifo_list = set.dir.path().join("fifo.txt");
    mkfifo(&fifo_list);
    let (out, _) = lmdbio(
        &[&"convert", &set.root, &fifo_list, &set.dir.path().join("g")],
        30,
    );
    assert!(!out.status.success() && stderr(&out).contains("not a regular file"));
    assert!(partials(set.dir.path()).is_empty());
}

fn spawn_convert(set: &ImageSet, list: &Path, out: &Path, extra: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_lmdbio"))
        .arg("convert")
        .args(extra)
        .args([&set.root, list, out])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A list naming the first image `n` times: a long run from small inputs.
fn long_list(set: &ImageSet, n: usize) -> PathBuf {
    let first = std::fs::read_to_string(&set.list).unwrap();
    let first = first.lines().next().unwrap().to_owned();
    let list = set.dir.path().join("long.txt");
    let mut text = String::with_capacity((first.len() + 1) * n);
    for _ in 0..n {
        text.push_str(&first);
        text.push('\n');
    }
    std::fs::write(&list, text).unwrap();
    list
}

fn wait_for_partial(dir: &Path) {
    let started = Instant::now();
    while partials(dir).is_empty() && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(!partials(dir).is_empty(), "no partial database appeared");
}

#[test]
fn convert_killed_at_any_time_leaves_old_out_and_no_partial_after_a_rerun() {
    let set = image_set(4);
    let out_db = set.dir.path().join("db");
    let (first, _) = lmdbio(&[&"convert", &set.root, &set.list, &out_db], 60);
    assert!(first.status.success(), "{}", stderr(&first));
    let old = snapshot(&out_db);
    let list = long_list(&set, 200_000);
    let inputs = snapshot(&set.root);
    // SIGTERM: stops, removes its partial, OUT is the old database.
    for signal in ["-TERM", "-INT"] {
        let child = spawn_convert(&set, &list, &out_db, &["--overwrite", "--threads", "1"]);
        wait_for_partial(set.dir.path());
        let pid = child.id().to_string();
        assert!(Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap()
            .success());
        let started = Instant::now();
        let result = child.wait_with_output().unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(!result.status.success(), "finished before {signal}");
        assert!(
            stderr(&result).contains("interrupted"),
            "{}",
            stderr(&result)
        );
        assert!(
            partials(set.dir.path()).is_empty(),
            "{signal} left a partial"
        );
        assert_eq!(snapshot(&out_db), old, "{signal} changed OUT");
    }
    // kill -9 leaves a partial nothing could remove; the next run does.
    let mut child = spawn_convert(&set, &list, &out_db, &["--overwrite", "--threads", "1"]);
    wait_for_partial(set.dir.path());
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(partials(set.dir.path()).len(), 1);
    assert_eq!(snapshot(&out_db), old, "kill -9 changed OUT");
    let (again, _) = lmdbio(
        &[&"convert", &"--overwrite", &set.root, &set.list, &out_db],
        60,
    );
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("which is gone"),
        "{}",
        stderr(&again)
    );
    assert!(partials(set.dir.path()).is_empty(), "stale partial left");
    assert_eq!(snapshot(&set.root), inputs, "an input changed");
}

#[test]
fn convert_reports_a_full_disk_as_no_space() {
    let set = image_set(4);
    let small = set.dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1M", "tmpfs"])
        .arg(&small)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !mounted {
        eprintln!("SKIPPED: mounting a 1 MiB tmpfs needs root");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&small);
    // 4,000 records of 16x16 colour pixels: about 3.5 MB, more than fits.
    let list = long_list(&set, 4000);
    let (out, _) = lmdbio(&[&"convert", &set.root, &list, &small.join("db")], 60);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.to_lowercase().contains("no space left on device"),
        "{err}"
    );
    assert!(partials(&small).is_empty(), "partial left on the full disk");
}

#[test]
fn a_huge_list_line_is_not_echoed_whole() {
    let set = image_set(2);
    let list = set.dir.path().join("huge.txt");
    let mut line = "x".repeat(50 << 20);
    line.push('\n');
    std::fs::write(&list, line).unwrap();
    let (out, _) = lmdbio(
        &[&"convert", &set.root, &list, &set.dir.path().join("db")],
        60,
    );
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("no label") && err.contains("bytes in all"),
        "{}",
        &err[..err.len().min(500)]
    );
    assert!(err.len() < 2000, "{} bytes of message", err.len());
}

// ---------------------------------------------------------------------------
// Item 8: shared-node hygiene.

#[test]
fn cold_bench_evicts_its_own_file_only() {
    let fx = kit::caffe_style(300, 3000, 5);
    let dir = TempDir::new().unwrap();
    let bystander = dir.path().join("someone-elses-file");
    let len = 8u64 << 20;
    std::fs::write(&bystander, vec![7u8; len as usize]).unwrap();
    let file = std::fs::File::open(&bystander).unwrap();
    // Clean pages are what a machine-wide drop would take.
    file.sync_all().unwrap();
    let cached = || lmdbio::page_cache::cached_bytes(&file, 0, len).unwrap();
    // Another process on this shared machine may drop every cache at any
    // moment; only eviction in each of three tries counts against us.
    let mut seen = Vec::new();
    for _ in 0..3 {
        std::fs::read(&bystander).unwrap();
        let before = cached();
        assert!(before >= len * 9 / 10, "only {before} bytes cached");
        let (out, _) = lmdbio(&[&"bench", &"--cold", &"--method", &"lmdbio", &fx.path], 60);
        assert!(out.status.success(), "{}", stderr(&out));
        let after = cached();
        if after >= before * 9 / 10 {
            return;
        }
        seen.push((before, after));
    }
    panic!("bench --cold evicted another file: {seen:?} (bytes cached before -> after)");
}

#[test]
fn a_launcher_of_another_mpi_is_refused() {
    // This build links MPICH; Open MPI's mpiexec starts two processes that
    // each see a world of one.
    let fx = kit::caffe_style(50, 100, 9);
    let out = Command::new("timeout")
        .args([
            "-k",
            "5",
            "60",
            "mpiexec.openmpi",
            "--oversubscribe",
            // The second process reports too after the first fails.
            "--mca",
            "orte_abort_on_non_zero_status",
            "0",
            "-n",
            "2",
        ])
        .arg(env!("CARGO_BIN_EXE_lmdbio"))
        .args(["bench", "--method", "lmdbio"])
        .arg(&fx.path)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("run mpiexec.openmpi");
    // (With the abort on a failed process off, Open MPI's mpiexec exits 0.)
    let err = stderr(&out);
    assert_eq!(
        err.matches("MPI sees a world of 1").count(),
        2,
        "both processes should refuse: {err}"
    );
}

// ---------------------------------------------------------------------------
// Item 5: C ABI options bounded; cursors carry the database's identity.

/// This build's `liblmdbio.so`, built on demand into the same target.
#[test]
fn absurd_c_options_are_refused_without_allocating_and_foreign_cursors_too() {
    let db = kit::caffe_style(300, 100, 11);
    // The same entry count, txnid (one commit) and page size, other keys.
    let (other, env) = kit::new_fixture("other", kit::EnvSpec::default());
    let main = env.open_db(None).unwrap();
    let mut rng = kit::Rng::new(12);
    let records: kit::Records = (0..300)
        .map(|i| (format!("{i:08}_other/{i}.png").into_bytes(), rng.bytes(100)))
        .collect();
    kit::put_all(&env, main, &records, 1000);
    drop(env);
    let work = TempDir::new().unwrap();
    let exe = kit::c_programs::compile_c("absurd_options", work.path());
    // 1 GiB of address space per process: a batch of 1e8 records (1.6 GB
    // of bookkeeping) could not even be attempted.
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--as={}", 1u64 << 30))
        .args(["timeout", "-k", "5", "60", "mpiexec.mpich", "-n", "2"])
        .arg(&exe)
        .arg(&db.path)
        .arg(&other.path);
    let out = cmd.output().expect("run prlimit");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("batch 1e8: resource limit"), "{text}");
    assert!(text.contains("cursor of another database"), "{text}");
}

// ---------------------------------------------------------------------------
// Item 3: ranks that disagree fail together, naming the difference.

/// `mpiexec.mpich` running one `lmdbio bench` per argument list (MPMD).
fn mpmd_bench(per_rank: &[Vec<String>]) -> (Output, Duration) {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", "60", "mpiexec.mpich"]);
    for (i, args) in per_rank.iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        cmd.args(["-n", "1"])
            .arg(env!("CARGO_BIN_EXE_lmdbio"))
            .args(["bench", "--method", "lmdbio"])
            .args(args);
    }
    let started = Instant::now();
    let out = cmd.output().expect("run mpiexec.mpich");
    let took = started.elapsed();
    assert_ne!(out.status.code(), Some(124), "{cmd:?} hung");
    (out, took)
}

#[test]
fn ranks_that_disagree_all_fail_naming_the_difference() {
    let a = kit::caffe_style(200, 500, 21);
    let b = kit::caffe_style(200, 500, 22);
    let named = kit::named_databases(23);
    let p = |f: &kit::Fixture| f.path.to_str().unwrap().to_owned();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let cases: Vec<(&str, Vec<Vec<String>>)> = vec![
        (
            "the data file",
            vec![s(&[&p(&a)]), s(&[&p(&a)]), s(&[&p(&b)])],
        ),
        (
            "the batch size",
            vec![s(&["--batch", "4", &p(&a)]), s(&["--batch", "8", &p(&a)])],
        ),
        (
            "ranks per node",
            vec![
                s(&["--ranks-per-node", "1", &p(&a)]),
                s(&["--ranks-per-node", "2", &p(&a)]),
            ],
        ),
        (
            "the window size",
            vec![s(&["--window", "8388608", &p(&a)]), s(&[&p(&a)])],
        ),
        (
            "the shuffle",
            vec![
                s(&["--shuffle", "1", &p(&a)]),
                s(&["--shuffle", "2", &p(&a)]),
            ],
        ),
        (
            "the tail policy",
            vec![s(&["--tail", "short", &p(&a)]), s(&[&p(&a)])],
        ),
        (
            "the named database",
            vec![
                s(&["-s", "train", &p(&named)]),
                s(&["-s", "val", &p(&named)]),
            ],
        ),
        (
            "the timeout",
            vec![s(&["--timeout", "5", &p(&a)]), s(&[&p(&a)])],
        ),
    ];
    for (what, per_rank) in cases {
        let (out, took) = mpmd_bench(&per_rank);
        let err = stderr(&out);
        assert!(!out.status.success(), "{what}: {err}");
        assert_eq!(
            err.matches(&format!("the ranks disagree on {what}"))
                .count(),
            per_rank.len(),
            "{what}: every rank should fail naming it: {err}"
        );
        assert!(took < Duration::from_secs(20), "{what}: took {took:?}");
    }
}

// ---------------------------------------------------------------------------
// Item 4: a stopped rank makes the others fail within the timeout.

#[test]
fn a_stopped_rank_makes_the_others_fail_within_the_timeout() {
    let fx = kit::caffe_style(2000, 2000, 31);
    let work = TempDir::new().unwrap();
    for stopped in [1usize, 0] {
        // Rank 0's output goes to a file, to see when the job has started
        // (a rank stopped inside MPI_Init stops MPI's start-up, not ours).
        let log = work.path().join(format!("stdout-{stopped}"));
        let child = Command::new("mpiexec.mpich")
            .args(["-n", "3"])
            .arg(env!("CARGO_BIN_EXE_lmdbio"))
            .args([
                "bench", "--method", "lmdbio", "--batch", "4", "--epochs", "1000",
            ])
            .args(["--compute-ms", "2", "--timeout", "5"])
            .arg(&fx.path)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !std::fs::read_to_string(&log).unwrap().contains("set-up") {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the job did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let pid = loop {
            if let Some(pid) = kit::rank_pid(child.id(), stopped) {
                break pid;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no rank {stopped}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_millis(1000));
        assert!(Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap()
            .success());
        let stopped_at = Instant::now();
        // The others fail; then the launcher ends the job.
        let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
        while !waiter.is_finished() && stopped_at.elapsed() < Duration::from_secs(40) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        let out = waiter.join().unwrap();
        let took = stopped_at.elapsed();
        let err = stderr(&out);
        assert!(!out.status.success(), "rank {stopped} stopped: {err}");
        assert!(
            took < Duration::from_secs(30),
            "rank {stopped} stopped: took {took:?}: {err}"
        );
        assert!(
            err.contains("timed out after"),
            "rank {stopped} stopped: {err}"
        );
        assert!(
            err.contains(&format!("rank {stopped} did not arrive"))
                || err.contains(&format!("node rank {stopped}, a reader")),
            "rank {stopped} stopped: {err}"
        );
    }
}

// ---------------------------------------------------------------------------
// Item 1: a database written while a job reads it.

/// Whether a process other than this one holds `path` open.
fn someone_has_open(path: &Path) -> bool {
    let me = std::process::id().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        let name = p.file_name();
        name != me.as_str()
            && std::fs::read_dir(p.path().join("fd")).is_ok_and(|fds| {
                fds.flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == path))
            })
    })
}

#[test]
fn a_concurrent_writer_never_makes_the_job_deliver_a_wrong_record() {
    use lmdb::{Transaction, WriteFlags};
    use sha2::{Digest, Sha256};
    let mut wrong_total = 0usize;
    let mut outcomes = Vec::new();
    let mut other_failures = Vec::new();
    for trial in 0..3u64 {
        let fx = kit::caffe_style(1500, 2500, 40 + trial);
        let snapshot: std::collections::HashMap<String, String> = fx
            .oracle()
            .into_iter()
            .map(|(k, v)| {
                let h: String = Sha256::digest(&v)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                let kh: String = k.iter().map(|b| format!("{b:02x}")).collect();
                (kh, format!("{} {h}", v.len()))
            })
            .collect();
        let trace = TempDir::new().unwrap();
        let log = trace.path().join("stdout");
        let mut job = Command::new("timeout")
            .args(["-k", "5", "120", "mpiexec.mpich", "-n", "4"])
            .arg(env!("CARGO_BIN_EXE_lmdbio"))
            .args([
                "bench", "--method", "lmdbio", "--batch", "8", "--epochs", "40",
            ])
            .args(["--window", "4194304", "--prefetch", "2", "--trace"])
            .arg(trace.path())
            .arg(&fx.path)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Nothing is written until the job has its snapshot (the one
        // read above): a process holds the data file open, and the tree
        // scan right after has had time to end.
        let data = std::fs::canonicalize(fx.data_file()).unwrap();
        let opened = Instant::now();
        while !someone_has_open(&data) && opened.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(300));
        // Overwrites and delete + reinsert, in many small transactions,
        // while the job reads: pages of the job's snapshot get reused.
        let env = lmdb::Environment::new()
            .set_map_size(1 << 30)
            .open(&fx.path)
            .unwrap();
        let db = env.open_db(None).unwrap();
        let mut rng = kit::Rng::new(trial);
        let started = Instant::now();
        while job.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(60) {
            let mut txn = env.begin_rw_txn().unwrap();
            for _ in 0..20 {
                let i = rng.below(1500) as usize;
                let key = kit::caffe_key(i);
                if rng.below(2) == 0 {
                    let _ = txn.del(db, &key, None);
                }
                let len = 1500 + rng.below(3000) as usize;
                txn.put(db, &key, &rng.bytes(len), WriteFlags::empty())
                    .unwrap();
            }
            txn.commit().unwrap();
        }
        let out = job.wait_with_output().unwrap();
        let err = stderr(&out);
        let mut wrong = 0;
        let mut records = 0;
        for entry in std::fs::read_dir(trace.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "tsv") {
                continue;
            }
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                // EPOCH KEYHEX LEN SHA256
                let f: Vec<&str> = line.split(' ').collect();
                let (key, rest) = (
                    f[f.len() - 3],
                    format!("{} {}", f[f.len() - 2], f[f.len() - 1]),
                );
                records += 1;
                if snapshot.get(key) != Some(&rest) {
                    wrong += 1;
                }
            }
        }
        let detected = err.contains("the database changed during the job");
        if !out.status.success() && !detected {
            other_failures.push(format!("trial {trial}: {err}"));
        }
        outcomes.push((records, wrong, detected));
        wrong_total += wrong;
    }
    eprintln!("trials (records traced, wrong, change detected): {outcomes:?}");
    assert_eq!(wrong_total, 0, "wrong records delivered: {outcomes:?}");
    assert!(other_failures.is_empty(), "{other_failures:?}");
}
