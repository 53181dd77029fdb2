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
    /// Each rank's lines in the order it got them, by rank.
    ranks: Vec<Vec<String>>,
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
    let mut ranks = Vec::new();
    for rank in 0..n {
        let text = std::fs::read_to_string(trace.join(format!("rank-{rank}.tsv"))).unwrap();
        let mine: Vec<String> = text.lines().map(str::to_owned).collect();
        lines.extend(mine.iter().cloned());
        ranks.push(mine);
    }
    lines.sort();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    Ran {
        lines,
        ranks,
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

    // Cut short, or damaged in its entries, restart table or keys (the
    // header's word 13 gives the entries' length; one chunk of records:
    // a 40-byte restart table follows them, then the keys).
    let whole = std::fs::read(&saved).unwrap();
    let entries_len = u64::from_le_bytes(whole[120..128].try_into().unwrap()) as usize;
    let table = 192 + entries_len;
    let damages: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", whole[..whole.len() / 2].to_vec()),
        ("header only", whole[..192].to_vec()),
        ("empty", Vec::new()),
        ("entry bit flipped", {
            let mut d = whole.clone();
            d[192 + entries_len / 2] ^= 4;
            d
        }),
        ("key bit flipped", {
            let mut d = whole.clone();
            let in_keys = d.len() - 3;
            assert!(in_keys > table + 40);
            d[in_keys] ^= 1;
            d
        }),
        ("restart table bit flipped", {
            let mut d = whole.clone();
            d[table + 3] ^= 1;
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

/// Trace lines without their key (the first field).
fn values_only(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l.split_once(' ').map_or(l.as_str(), |(_, v)| v).to_owned())
        .collect()
}

/// Runs without keys (`extra` plus `--no-keys`) and requires each rank to
/// get the values `keyed` (a run with keys) got, in the same order, with
/// `loaded` nodes having loaded a saved index.
fn expect_keyless(
    fx: &kit::Fixture,
    keyed: &Ran,
    (n, per_node): (usize, usize),
    loaded: bool,
    extra: &[&str],
) {
    let ran = run(fx, n, per_node, &[extra, &["--no-keys"]].concat());
    for (rank, (got, want)) in ran.ranks.iter().zip(&keyed.ranks).enumerate() {
        assert!(
            got.iter().all(|l| l.starts_with(' ')),
            "{}: -n {n}: rank {rank} got keys it did not ask for",
            fx.name
        );
        assert!(
            values_only(got) == values_only(want),
            "{}: -n {n}, {per_node} per node, {extra:?}: rank {rank} differs without keys",
            fx.name
        );
    }
    let nodes = if loaded { (n / per_node) as u64 } else { 0 };
    assert_eq!(
        ran.loaded_nodes, nodes,
        "{}: -n {n}, {extra:?}: nodes that loaded a saved index without keys",
        fx.name
    );
}

/// Without keys a node holds none, scanning or loading: every rank gets
/// the records a job with keys gets (which are liblmdb's), in the same
/// order. A scan without keys saves an index without them, which a job
/// with keys refuses (it scans and saves one with keys), and which jobs
/// without keys load, as they load one with keys.
#[test]
fn jobs_without_keys_deliver_liblmdb_records_scanning_and_loading() {
    let fixtures = [
        kit::inline_only(3000, 151),
        kit::overflow_only(40, 152),
        kit::random_order(600, 153),
        kit::churned(154),
    ];
    let scan = ["--no-saved-index"];
    for fx in &fixtures {
        let oracle = oracle_lines(fx);
        let mut keyed = Vec::new();
        for shape in [(1, 1), (2, 1), (3, 1), (4, 2)] {
            let ran = run(fx, shape.0, shape.1, &scan);
            assert!(ran.lines == oracle, "{}: {shape:?}: differs", fx.name);
            expect_keyless(fx, &ran, shape, false, &scan);
            keyed.push(ran);
        }
        // The first saves an index without keys, the next loads it.
        expect_keyless(fx, &keyed[0], (1, 1), false, &[]);
        expect_keyless(fx, &keyed[2], (3, 1), true, &[]);
        expect(fx, &oracle, (2, 1), false);
        expect(fx, &oracle, (2, 1), true);
        expect_keyless(fx, &keyed[3], (4, 2), true, &[]);
    }
}

/// Swaps two of a depth-2 tree's leaves in its root page: the last leaf
/// of the first node's half with the first of the second's, so each half
/// is in key order and only the seam between them is not.
fn swap_leaves_at_the_middle(fx: &kit::Fixture) {
    let db = lmdbio::Database::open(&fx.path).unwrap();
    let tree = db.tree(None).unwrap();
    assert_eq!(tree.db.md_depth, 2, "{}: not a two-level tree", fx.name);
    let psize = db.page_size() as usize;
    let root = tree.db.md_root as usize * psize;
    drop(db);
    let path = fx.data_file();
    let mut bytes = std::fs::read(&path).unwrap();
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    // The node count from the page header's lower bound.
    let nodes = (u16_at(&bytes, root + 12) - 16) / 2;
    assert!(nodes >= 4, "{}: {nodes} leaves", fx.name);
    let node = |b: &[u8], i: usize| root + u16_at(b, root + 16 + 2 * i);
    let (a, b) = (node(&bytes, nodes / 2 - 1), node(&bytes, nodes / 2));
    // A branch node's child is its first 6 bytes (lo, hi, flags).
    let first: Vec<u8> = bytes[a..a + 6].to_vec();
    bytes.copy_within(b..b + 6, a);
    bytes[b..b + 6].copy_from_slice(&first);
    std::fs::write(&path, bytes).unwrap();
}

/// Keys out of order are refused with and without keys held, on one node
/// and at the seam between two nodes' shares of the leaves.
#[test]
fn keys_out_of_order_are_refused_with_or_without_keys() {
    let fx = kit::inline_only(3000, 161);
    swap_leaves_at_the_middle(&fx);
    for (n, extra) in [
        (1, &["--no-keys"][..]),
        (2, &["--no-keys"]),
        (3, &["--no-keys"]),
        (2, &[]),
    ] {
        let out_dir = kit::TempDir::new().unwrap();
        let mut cmd: Command = kit::mpiexec(n, &kit::lmdbio_binary(env!("CARGO_BIN_EXE_lmdbio")));
        cmd.args(["bench", "--batch", "7", "--ranks-per-node", "1"])
            .args(["--no-saved-index", "--trace"])
            .arg(out_dir.path().join("trace"))
            .args(extra)
            .arg(&fx.path);
        let out = kit::run_bounded(cmd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "-n {n} {extra:?}: served a tree out of order"
        );
        assert!(
            stderr.contains("out of order") || stderr.contains("out of key order"),
            "-n {n} {extra:?}: {stderr}"
        );
    }
}

/// `MDB_val`: a length and a pointer.
#[repr(C)]
struct MdbVal {
    size: usize,
    data: *const u8,
}

extern "C" {
    /// liblmdb's, linked in by the lmdb crate.
    fn mdb_set_compare(
        txn: *mut std::ffi::c_void,
        dbi: u32,
        cmp: extern "C" fn(*const MdbVal, *const MdbVal) -> std::ffi::c_int,
    ) -> std::ffi::c_int;
}

/// Bytewise, largest first: a key order the file does not record.
extern "C" fn descending(a: *const MdbVal, b: *const MdbVal) -> std::ffi::c_int {
    // SAFETY: liblmdb passes two valid MDB_vals whose data it holds for
    // the call.
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts((*a).data, (*a).size),
            std::slice::from_raw_parts((*b).data, (*b).size),
        )
    };
    b.cmp(a) as std::ffi::c_int
}

/// A database liblmdb wrote with a comparator of the application's
/// (`mdb_set_compare`), which the file does not record: its keys are out
/// of the order the tree's flags give, and lmdbio refuses it rather than
/// serve records in an order liblmdb's readers would not see.
#[test]
fn a_tree_written_with_a_custom_comparator_is_refused() {
    use lmdb::Transaction;
    let (fx, env) = kit::new_fixture("custom-compare", kit::EnvSpec::default());
    let db = env.open_db(None).unwrap();
    let mut txn = env.begin_rw_txn().unwrap();
    // SAFETY: a live write transaction and its database handle; the
    // comparator is a plain function that lives for the program.
    let rc = unsafe { mdb_set_compare(txn.txn() as *mut _, db.dbi(), descending) };
    assert_eq!(rc, 0);
    for i in 0..3000u32 {
        let key = format!("{i:08}");
        txn.put(db, &key, &[i as u8; 100], lmdb::WriteFlags::empty())
            .unwrap();
    }
    txn.commit().unwrap();
    drop(env);
    for n in [1, 2] {
        let mut cmd: Command = kit::mpiexec(n, &kit::lmdbio_binary(env!("CARGO_BIN_EXE_lmdbio")));
        cmd.args(["bench", "--ranks-per-node", "1", "--no-saved-index"])
            .arg(&fx.path);
        let out = kit::run_bounded(cmd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "-n {n}: served a tree out of order");
        assert!(stderr.contains("out of order"), "-n {n}: {stderr}");
    }
}

/// With the default order (contiguous blocks, no shuffle) each node
/// decodes only the parts of the saved index between restart points that
/// hold its ranks' records; jobs deliver liblmdb's records all the same,
/// shuffled or interleaved ones (which decode everything) too. Damage in
/// a part only the last node decodes, or a header whose value bytes the
/// parts do not add up to (every checksum good), is refused on every
/// node: all scan, none hangs.
#[test]
fn nodes_decode_their_share_and_any_share_refused_refuses_all() {
    let restart = lmdbio::index::saved::RESTART as usize;
    let fx = kit::inline_only(3 * restart + 500, 171);
    let oracle = oracle_lines(&fx);
    expect(&fx, &oracle, (1, 1), false);
    for shape in [(4, 1), (4, 2), (3, 1), (2, 1)] {
        expect(&fx, &oracle, shape, true);
    }
    for order in [&["--shuffle", "5"][..], &["--partition", "strided"]] {
        expect_with(&fx, &oracle, (4, 1), true, order);
    }
    let keyed = run(&fx, 4, 1, &[]);
    expect_keyless(&fx, &keyed, (4, 1), true, &[]);
    let sorted_values = |lines: &[String]| {
        let mut v = values_only(lines);
        v.sort();
        v
    };
    let values = sorted_values(&keyed.lines);

    let saved = beside(&fx);
    let whole = std::fs::read(&saved).unwrap();
    let word =
        |b: &[u8], i: usize| u64::from_le_bytes(b[16 + 8 * i..24 + 8 * i].try_into().unwrap());
    // Header words: 11 of identity, then records, key bytes, entries'
    // length, value bytes; its checksum in its last 8 bytes.
    assert_eq!(word(&whole, 11), (3 * restart + 500) as u64);
    let entries_len = word(&whole, 13) as usize;
    let mut last_part = whole.clone();
    // The entries' last byte is the last part's: only the fourth of four
    // one-rank nodes holds records there.
    last_part[192 + entries_len - 1] ^= 1;
    let mut sizes_off = whole.clone();
    let value_bytes = word(&whole, 14) + 1;
    sizes_off[16 + 8 * 14..24 + 8 * 14].copy_from_slice(&value_bytes.to_le_bytes());
    let sum = lmdbio::index::saved::checksum(&sizes_off[..184]);
    sizes_off[184..192].copy_from_slice(&sum.to_le_bytes());
    for (what, bytes) in [("last part damaged", last_part), ("sizes off", sizes_off)] {
        for shape in [(4, 1), (4, 2), (1, 1)] {
            std::fs::write(&saved, &bytes).unwrap();
            let ran = run(&fx, shape.0, shape.1, &["--no-keys"]);
            assert!(
                sorted_values(&ran.lines) == values,
                "{what}, {shape:?}: differs from liblmdb"
            );
            assert_eq!(ran.loaded_nodes, 0, "{what}, {shape:?}: loaded");
        }
    }
    std::fs::write(&saved, &whole).unwrap();
    expect(&fx, &oracle, (4, 1), true);
}
