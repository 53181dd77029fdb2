//! The C ABI from C: the programs in `tests/c/` are compiled with the
//! system `mpicc` against `include/lmdbio.h` and the cdylib, and run under
//! mpiexec against a manifest made from liblmdb's records.

use std::path::{Path, PathBuf};
use std::process::Command;

use lmdbio_testkit as kit;
use lmdbio_testkit::c_programs::{compile_c, library_dir};

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// liblmdb's records as the C programs' manifest: key hex, value length,
/// FNV-1a 64 of the value.
fn write_manifest(fx: &kit::Fixture, work: &Path) -> PathBuf {
    let manifest = work.join(format!("{}.manifest", fx.name));
    let text: String = fx
        .oracle()
        .iter()
        .map(|(k, v)| {
            let key: String = k.iter().map(|b| format!("{b:02x}")).collect();
            format!("{key} {} {:x}\n", v.len(), fnv1a(v))
        })
        .collect();
    std::fs::write(&manifest, text).unwrap();
    manifest
}

/// Runs a compiled C test program on `n` ranks against `fx` and its
/// manifest; it must exit cleanly and print its "OK" line.
fn assert_c_program_passes(exe: &Path, fx: &kit::Fixture, manifest: &Path, n: usize) {
    assert_c_program_passes_with(exe, fx, manifest, n, &[]);
}

/// [`assert_c_program_passes`] with `more` arguments after the manifest,
/// which the program's OK line repeats.
fn assert_c_program_passes_with(
    exe: &Path,
    fx: &kit::Fixture,
    manifest: &Path,
    n: usize,
    more: &[&str],
) {
    let mut cmd = kit::mpiexec(n, exe);
    cmd.arg(&fx.path).arg(manifest).args(more);
    let out = kit::run_bounded(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("OK ") && more.iter().all(|a| stdout.contains(a)),
        "{} on {n} ranks:\n{stdout}\n{}",
        fx.name,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Kept leaf pages read into a window too small for them and the index
/// (`tests/c/kept_window_grows.c`): the window is made anew and every
/// record still delivered once, as liblmdb has it.
#[test]
fn c_program_reads_kept_pages_into_a_window_that_must_grow() {
    let work = kit::TempDir::new().unwrap();
    let exe = compile_c("kept_window_grows", work.path());
    for fx in [kit::inline_only(20_000, 73), kit::random_order(3000, 74)] {
        let manifest = write_manifest(&fx, work.path());
        for n in [1, 2, 4] {
            assert_c_program_passes(&exe, &fx, &manifest, n);
        }
    }
}

#[test]
fn c_program_reads_two_epochs_and_checks_every_record() {
    let work = kit::TempDir::new().unwrap();
    let exe = compile_c("read_two_epochs", work.path());
    for fx in [kit::caffe_style(777, 3000, 71), kit::churned(72)] {
        let manifest = write_manifest(&fx, work.path());
        for n in [1, 3, 4] {
            assert_c_program_passes(&exe, &fx, &manifest, n);
        }
    }
}

/// The same program through a node stage set with
/// `lmdbio_options_set_stage`: every record of both epochs as liblmdb has
/// it, and the stage removed when the engine is closed.
#[test]
fn c_program_reads_two_epochs_through_a_node_stage() {
    let work = kit::TempDir::new().unwrap();
    let exe = compile_c("read_two_epochs", work.path());
    let fx = kit::caffe_style(300, 30_000, 79);
    let manifest = write_manifest(&fx, work.path());
    let stage = work.path().join("stage");
    for n in [1, 2] {
        let mut cmd = kit::mpiexec(n, &exe);
        cmd.env("LMDBIO_TEST_STAGE", &stage)
            .arg(&fx.path)
            .arg(&manifest);
        let out = kit::run_bounded(cmd);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("OK "),
            "{n} ranks:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!stage.join("node-0").exists(), "the stage was left behind");
    }
    // The option reaches the engine: a stage that cannot be made is said.
    let file = work.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let mut cmd = kit::mpiexec(1, &exe);
    cmd.env("LMDBIO_TEST_STAGE", file.join("stage"))
        .arg(&fx.path)
        .arg(&manifest);
    let out = kit::run_bounded(cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains("cannot make the directory"),
        "{stderr}"
    );
}

#[test]
fn c_program_resumes_a_job_on_fewer_ranks_by_repartitioning() {
    let work = kit::TempDir::new().unwrap();
    let exe = compile_c("repartition", work.path());
    let fx = kit::caffe_style(777, 3000, 80);
    let manifest = write_manifest(&fx, work.path());
    for n in [2, 4] {
        assert_c_program_passes(&exe, &fx, &manifest, n);
    }
    // Re-partitioned in the chunked epoch 0, then on into the global
    // epoch 1.
    assert_c_program_passes_with(&exe, &fx, &manifest, 3, &["global-after-first"]);
}

/// A database damaged while it is read (`tests/c/damaged_mid_job.c`):
/// every rank fails with the same code, after correct records only: from
/// the same call with collective reads, and with independent reads the
/// rank that meets the damage first, the others where the ranks next meet
/// (the next round's start, at most a round's two steps later). The file
/// is cut after every rank's first step, after its second (while the read
/// ahead may run), before the first, and as soon as rank 0 has its first
/// step, while other nodes may still read theirs (see
/// docs/design/inline-records.md, "First batch").
#[test]
fn a_database_damaged_mid_job_fails_every_rank() {
    let work = kit::TempDir::new().unwrap();
    let exe = compile_c("damaged_mid_job", work.path());
    let fx = kit::caffe_style(400, 3000, 90);
    let manifest = write_manifest(&fx, work.path());
    let data = lmdbio::data_file_path(&fx.path).unwrap();
    let db = lmdbio::Database::open(&data).unwrap();
    let index = db
        .build_index(&db.main_tree().unwrap(), &lmdbio::IndexOptions::default())
        .unwrap();
    assert_eq!(index.len(), 400);
    // Four ranks, batches of 4, contiguous shares of 100: record 125 is
    // rank 1's at step 6, read well after the damage at step 0 (rounds of
    // at most two steps, one read ahead).
    let target = &index.entries[100 + 6 * 4 + 1];
    assert!(target.is_overflow());
    let header = target.value_offset - 16;
    // Ranks per node, readers per node, collective reads.
    let shapes = [(1, 1, 0), (2, 1, 0), (2, 2, 0), (2, 1, 1)];
    let modes = [
        ("damage", &shapes[..]),
        ("truncate", &shapes[..]),
        ("truncate-late", &shapes[..1]),
        ("truncate-first", &shapes[..2]),
        ("truncate-racing", &shapes[..2]),
    ];
    for (mode, shapes) in modes {
        for &(k, readers, collective) in shapes {
            let what =
                format!("{mode}, {k} ranks per node, {readers} readers, collective {collective}");
            let dir = work
                .path()
                .join(format!("{mode}-{k}-{readers}-{collective}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::copy(&data, dir.join("data.mdb")).unwrap();
            let mut cmd = kit::mpiexec(4, &exe);
            cmd.arg(&dir)
                .arg(&manifest)
                .arg(mode)
                .arg(header.to_string());
            cmd.args([k, readers, collective].map(|v| v.to_string()));
            let out = kit::run_bounded(cmd);
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{what}:\n{stdout}\n{stderr}");
            let line = stdout
                .lines()
                .find_map(|l| l.strip_prefix("FAILED_AT "))
                .unwrap_or_else(|| panic!("{what}: no result line:\n{stdout}\n{stderr}"));
            let fields: Vec<i64> = line.split(' ').map(|f| f.parse().unwrap()).collect();
            let [step, last, code] = fields[..] else {
                panic!("{what}: {line}");
            };
            if collective == 1 {
                assert_eq!(step, last, "{what}: collective reads fail on one step");
            } else {
                // The first step's round starts where the others meet it.
                assert!(last <= step + 2, "{what}: steps {step}..{last}");
            }
            if mode == "damage" {
                // Seen when the record's value arrives, on its rank, and
                // agreed by all: LMDBIO_ERR_CORRUPT naming the page.
                assert_eq!((step, code), (6, 5), "{what}:\n{stderr}");
                let pgno = header / u64::from(db.page_size());
                assert!(
                    stderr.contains(&format!("corrupt database at page {pgno}")),
                    "{what}:\n{stderr}"
                );
            } else {
                // The nodes whose reads reach past the cut fail; the
                // earliest of their steps fails everywhere:
                // LMDBIO_ERR_TRUNCATED. Steps handed out before the cut
                // were whole.
                let first_failing = match mode {
                    "truncate-late" => 2..=6,
                    // Nodes whose first reads start after the cut fail
                    // step 0; the others serve it and fail where the
                    // second round starts.
                    "truncate-first" => 0..=0,
                    "truncate-racing" => 0..=6,
                    _ => 1..=6,
                };
                assert!(
                    first_failing.contains(&step),
                    "{what}: step {step}:\n{stderr}"
                );
                assert_eq!(code, 3, "{what}:\n{stderr}");
            }
        }
    }
}

/// The library names its ABI: programs linked against it need
/// `liblmdbio.so.0`, whatever the file is called.
#[test]
fn the_library_has_its_soname() {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(library_dir().join("liblmdbio.so"))
        .output()
        .expect("run readelf");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Library soname: [liblmdbio.so.0]"),
        "readelf -d liblmdbio.so:\n{text}"
    );
}
