//! The `lmdbio` command, run as a user runs it, against lmdb-utils.

use std::process::{Command, Output};

use lmdbio_testkit as kit;

fn lmdbio(args: &[&str], fx: &kit::Fixture) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lmdbio"));
    cmd.args(args);
    if let Some(s) = &fx.subdb {
        cmd.arg("-s").arg(s);
    }
    cmd.arg(&fx.path).output().expect("run lmdbio")
}

fn run_ok(args: &[&str], fx: &kit::Fixture) -> Vec<u8> {
    let out = lmdbio(args, fx);
    assert!(
        out.status.success(),
        "lmdbio {args:?} failed on {}: {}",
        fx.name,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn dump_is_byte_identical_to_mdb_dump() {
    for fx in kit::all_layouts() {
        let ours = run_ok(&["dump"], &fx);
        let theirs = fx.mdb_dump(&[]);
        assert!(
            ours == theirs,
            "{}: lmdbio dump differs from mdb_dump",
            fx.name
        );
        let ours = run_ok(&["dump", "-p"], &fx);
        let theirs = fx.mdb_dump(&["-p"]);
        assert!(
            ours == theirs,
            "{}: lmdbio dump -p differs from mdb_dump -p",
            fx.name
        );
    }
}

#[test]
fn inspect_json_agrees_with_mdb_stat() {
    for fx in kit::all_layouts() {
        let json: serde_json::Value =
            serde_json::from_slice(&run_ok(&["inspect", "--json"], &fx)).unwrap();
        let stat = fx.mdb_stat();
        for (key, label) in [
            ("depth", "Tree depth"),
            ("branch_pages", "Branch pages"),
            ("leaf_pages", "Leaf pages"),
            ("overflow_pages", "Overflow pages"),
            ("entries", "Entries"),
        ] {
            assert_eq!(
                json[key].as_u64(),
                Some(kit::stat_field(&stat, label)),
                "{}: {key}",
                fx.name
            );
        }
        assert_eq!(json["page_size"].as_u64(), Some(4096), "{}", fx.name);
        // Meta pages + MAIN's pages on the way to a named database + every
        // branch and leaf page once.
        let lookup = if fx.subdb.is_some() {
            let main = kit::Fixture {
                subdb: None,
                dir: kit::TempDir::new().unwrap(),
                path: fx.path.clone(),
                nosubdir: fx.nosubdir,
                name: fx.name,
            };
            kit::stat_field(&main.mdb_stat(), "Tree depth")
        } else {
            0
        };
        let tree_pages =
            json["branch_pages"].as_u64().unwrap() + json["leaf_pages"].as_u64().unwrap();
        assert_eq!(
            json["pages_read_for_index"].as_u64(),
            Some(2 + lookup + tree_pages),
            "{}",
            fx.name
        );
    }
}

#[test]
fn inspect_shows_a_bulk_load_is_sequential() {
    let fx = kit::overflow_only(200, 41);
    let json: serde_json::Value =
        serde_json::from_slice(&run_ok(&["inspect", "--json"], &fx)).unwrap();
    let seq = json["overflow_sequential_fraction"].as_f64().unwrap();
    assert!(seq > 0.9, "bulk load only {seq} sequential");
    let text = String::from_utf8(run_ok(&["inspect"], &fx)).unwrap();
    assert!(text.contains("Entries: 200"), "{text}");
}

fn assert_fails_with(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code; stderr: {stderr}");
    assert!(stderr.contains(needle), "stderr lacks {needle:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn errors_go_to_stderr_with_exit_code_1() {
    let missing = Command::new(env!("CARGO_BIN_EXE_lmdbio"))
        .args(["dump", "/nonexistent/db"])
        .output()
        .unwrap();
    assert_fails_with(&missing, "/nonexistent/db");

    let fx = kit::caffe_style(50, 3000, 42);
    let data = fx.data_file();
    let mut bytes = kit::read_file(&data);
    bytes[16] ^= 0xff; // meta page 0 magic
    std::fs::write(&data, &bytes).unwrap();
    assert_fails_with(&lmdbio(&["inspect"], &fx), "not an LMDB data file");

    let fx = kit::caffe_style(50, 3000, 43);
    let data = fx.data_file();
    let len = std::fs::metadata(&data).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
    file.set_len(len / 2).unwrap();
    assert_fails_with(&lmdbio(&["dump"], &fx), "truncated");

    let fx = kit::named_databases(44);
    let nope = kit::Fixture {
        subdb: Some("nope".into()),
        ..fx
    };
    assert_fails_with(&lmdbio(&["dump"], &nope), "no named database \"nope\"");
}

#[test]
fn dump_into_a_closed_pipe_ends_quietly() {
    let fx = kit::inline_only(20_000, 45);
    let mut child = Command::new(env!("CARGO_BIN_EXE_lmdbio"))
        .arg("dump")
        .arg(&fx.path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() || out.status.code() == Some(1),
        "{:?}",
        out.status
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

/// `lmdbio sample-images` is the test kit's generator behind the installed
/// command: `--help` is ordinary output, and the folder holds the kit's
/// own pictures plus the list file `lmdbio convert` takes.
#[test]
fn sample_images_writes_the_kits_folder_and_its_list() {
    let exe = env!("CARGO_BIN_EXE_lmdbio");
    let help = Command::new(exe)
        .args(["sample-images", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success(), "--help exit {:?}", help.status);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Usage: lmdbio sample-images") && help.stderr.is_empty(),
        "{text}"
    );

    let work = kit::TempDir::new().unwrap();
    let ours = work.path().join("ours");
    let out = Command::new(exe)
        .arg("sample-images")
        .arg(&ours)
        .args(["2", "3", "16", "bmp"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kits = work.path().join("kits");
    let list = kit::images::write_class_folders(&kits, 2, 3, 16, "bmp", 0x5eed);
    assert_eq!(list.len(), 6);
    let lines: String = list.iter().map(|(p, l)| format!("{p} {l}\n")).collect();
    assert_eq!(
        std::fs::read_to_string(ours.join("list.txt")).unwrap(),
        lines
    );
    for (path, _) in &list {
        assert_eq!(
            std::fs::read(ours.join(path)).unwrap(),
            std::fs::read(kits.join(path)).unwrap(),
            "{path}"
        );
    }

    let bad = Command::new(exe)
        .args(["sample-images", "/proc/lmdbio-no", "1", "1"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("/proc/lmdbio-no"));
}
