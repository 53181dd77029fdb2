//! Saved indexes under real `mpiexec`: jobs that load one deliver exactly
//! liblmdb's records, as jobs that scan do; a saved index of another
//! database state, a damaged one and another database's are refused and
//! rebuilt; a directory that cannot be written falls back to the cache
//! directory, or to saving nothing, without an error
//! (docs/design/saved-index.md).

use std::path::{Path, PathBuf};
use std::process::Command;

use lmdbio_testkit::{self as kit, oracle_lines};

/// What one run delivered (every rank's trace lines, sorted) and how many
/// nodes loaded a saved index.
struct Ran {
    lines: Vec<String>,
    loaded_nodes: u64,
}

/// Runs `lmdbio bench` on `n` ranks, `per_node` to a node, with `extra`,
/// with no cache directory from the environment unless `extra` names one.
fn run(fx: &kit::Fixture, n: usize, per_node: usize, extra: &[&str]) -> Ran {
    let out_dir = kit::TempDir::new().unwrap();
    let trace = out_dir.path().join("trace");
    let json = out_dir.path().join("run.json");
    let mut cmd: Command = kit::mpiexec(n, &kit::lmdbio_binary(env!("CARGO_BIN_EXE_lmdbio")));
    cmd.env_remove("LMDBIO_INDEX_CACHE")
        .env_remove("XDG_CACHE_HOME")
        .arg("bench")
        .args(["--batch", "7", "--ranks-per-node", &per_node.to_string()])
        .arg("--trace")
        .arg(&trace)
        .arg("--json")
        .arg(&json)
        .args(extra);
    if let Some(s) = &fx.subdb {
        cmd.args(["-s", s]);
    }
    cmd.arg(&fx.path);
    let out = kit::run_bounded(cmd);
    assert!(
        out.status.success(),
        "{}: -n {n} {extra:?} failed:\n{}",
        fx.name,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(&trace).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        lines.extend(text.lines().map(str::to_owned));
    }
    lines.sort();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    Ran {
        lines,
        loaded_nodes: doc["runs"][0]["index_loaded_nodes"].as_u64().unwrap(),
    }
}

/// The saved index beside the fixture's data file.
fn beside(fx: &kit::Fixture) -> PathBuf {
    let tree = match &fx.subdb {
        None => String::new(),
        Some(name) => format!(
            ".{:016x}",
            lmdbio::index::saved::name_hash(Some(name.as_str()))
        ),
    };
    let data = fx.data_file();
    let name = data.file_name().unwrap().to_string_lossy().into_owned();
    data.with_file_name(format!("{name}{tree}.lmdbio-index"))
}

/// Runs and requires liblmdb's records, with `loaded` nodes (of
/// `n / per_node`) having loaded a saved index.
fn expect(fx: &kit::Fixture, oracle: &[String], (n, per_node): (usize, usize), loaded: bool) {
    expect_with(fx, oracle, (n, per_node), loaded, &[]);
}

fn expect_with(
    fx: &kit::Fixture,
    oracle: &[String],
    (n, per_node): (usize, usize),
    loaded: bool,
    extra: &[&str],
) {
    let ran = run(fx, n, per_node, extra);
    assert!(
        ran.lines == oracle,
        "{}: -n {n}, {per_node} per node, {extra:?}: differs from liblmdb",
        fx.name
    );
    let nodes = if loaded { (n / per_node) as u64 } else { 0 };
    assert_eq!(
        ran.loaded_nodes, nodes,
        "{}: -n {n}, {per_node} per node, {extra:?}: nodes that loaded a saved index",
        fx.name
    );
}

#[test]
fn jobs_with_and_without_a_saved_index_deliver_liblmdb_records() {
    let fixtures = [
        kit::inline_only(3000, 121),
        kit::overflow_only(40, 122),
        kit::random_order(600, 123),
        kit::churned(124),
        kit::named_databases(125),
    ];
    for fx in &fixtures {
        let oracle = oracle_lines(fx);
        expect_with(fx, &oracle, (2, 1), false, &["--no-saved-index"]);
        assert!(!beside(fx).exists(), "{}: saved with saving off", fx.name);
        // The first job scans and saves; every later one loads.
        expect(fx, &oracle, (1, 1), false);
        assert!(beside(fx).exists(), "{}: nothing saved", fx.name);
        for shape in [(1, 1), (2, 1), (3, 1), (4, 2)] {
            expect(fx, &oracle, shape, true);
        }
        expect_with(fx, &oracle, (2, 1), false, &["--no-saved-index"]);
    }
}

#[test]
fn saved_indexes_of_another_state_damaged_or_of_another_database_are_rebuilt() {
    let fx = kit::random_order(500, 131);
    let mut oracle = oracle_lines(&fx);
    expect(&fx, &oracle, (2, 1), false);
    expect(&fx, &oracle, (2, 1), true);
    let saved = beside(&fx);

    // A liblmdb write: another txnid, another tree.
    {
        let env = lmdb::Environment::new().open(&fx.path).unwrap();
        let db = env.open_db(None).unwrap();
        kit::put_all(&env, db, &[(b"zz-added".to_vec(), vec![7u8; 900])], 1);
    }
    oracle = oracle_lines(&fx);
    expect(&fx, &oracle, (2, 1), false);
    expect(&fx, &oracle, (3, 1), true);

    // Cut short, or damaged in its entries or keys.
    let whole = std::fs::read(&saved).unwrap();
    let damages: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", whole[..whole.len() / 2].to_vec()),
        ("header only", whole[..192].to_vec()),
        ("empty", Vec::new()),
        ("entry bit flipped", {
            let mut d = whole.clone();
            d[200 + 3 * 100] ^= 4;
            d
        }),
        // One chunk of records: a 24-byte restart table ends the file.
        ("key bit flipped", {
            let mut d = whole.clone();
            let in_keys = d.len() - 24 - 3;
            d[in_keys] ^= 1;
            d
        }),
        ("restart table bit flipped", {
            let mut d = whole.clone();
            let last = d.len() - 3;
            d[last] ^= 1;
            d
        }),
    ];
    for (what, bytes) in damages {
        std::fs::write(&saved, bytes).unwrap();
        let ran = run(&fx, 2, 1, &[]);
        assert!(ran.lines == oracle, "{what}: differs from liblmdb");
        assert_eq!(ran.loaded_nodes, 0, "{what}: loaded");
        assert_eq!(
            std::fs::read(&saved).unwrap(),
            whole,
            "{what}: not rewritten"
        );
    }

    // Another database of as many records (500 and the one added),
    // written alike.
    let other = kit::random_order(501, 132);
    expect(&other, &oracle_lines(&other), (1, 1), false);
    std::fs::copy(beside(&other), &saved).unwrap();
    expect(&fx, &oracle, (2, 1), false);
    expect(&fx, &oracle, (2, 1), true);
}

/// Makes `dir` unwritable, also for root (immutable where root can set
/// it); returns false if it stays writable.
fn make_read_only(dir: &Path) -> bool {
    let mut perms = std::fs::metadata(dir).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o555);
    std::fs::set_permissions(dir, perms).unwrap();
    let _ = Command::new("chattr").arg("+i").arg(dir).status();
    let probe = dir.join("probe");
    let writable = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    !writable
}

fn make_writable(dir: &Path) {
    let _ = Command::new("chattr").arg("-i").arg(dir).status();
    let mut perms = std::fs::metadata(dir).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(dir, perms).unwrap();
}

#[test]
fn a_read_only_directory_saves_in_the_cache_or_nowhere_without_error() {
    let fx = kit::inline_only(2000, 141);
    let oracle = oracle_lines(&fx);
    let dir = fx.data_file().parent().unwrap().to_owned();
    if !make_read_only(&dir) {
        // Fall back to a directory where the saved index would go, which
        // no file can be renamed over.
        make_writable(&dir);
        std::fs::create_dir(beside(&fx)).unwrap();
        std::fs::write(beside(&fx).join("x"), b"").unwrap();
    }
    let cache = kit::TempDir::new().unwrap();
    let cache_arg = cache.path().join("lmdbio");
    let cache_arg = cache_arg.to_str().unwrap();
    let result = std::panic::catch_unwind(|| {
        // No cache directory: nothing saved, nothing refused.
        expect(&fx, &oracle, (2, 1), false);
        expect(&fx, &oracle, (2, 1), false);
        // A cache directory, made when first needed.
        let with_cache = ["--index-cache", cache_arg];
        expect_with(&fx, &oracle, (2, 1), false, &with_cache);
        let saved: Vec<_> = std::fs::read_dir(cache_arg).unwrap().collect();
        assert_eq!(saved.len(), 1, "saved indexes in the cache: {saved:?}");
        expect_with(&fx, &oracle, (2, 1), true, &with_cache);
        expect_with(&fx, &oracle, (4, 2), true, &with_cache);
    });
    make_writable(&dir);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
