//! Differential tests: what lmdbio reads from a file equals what liblmdb's
//! cursor returns, record by record, on every layout in the test kit.

use lmdbio::values::read_values;
use lmdbio::{CoalesceOptions, Database, ErrorKind, IndexOptions};
use lmdbio_testkit as kit;

/// Reads every record through lmdbio: the index in key order, values in
/// rounds of `round` records with the given coalescing.
fn read_all(
    fx: &kit::Fixture,
    options: &IndexOptions,
    coalesce: CoalesceOptions,
    round: usize,
) -> kit::Records {
    let db = Database::open(&fx.path).unwrap_or_else(|e| panic!("{}: open: {e}", fx.name));
    let tree = db
        .tree(fx.subdb.as_deref())
        .unwrap_or_else(|e| panic!("{}: tree: {e}", fx.name));
    let index = db
        .build_index(&tree, options)
        .unwrap_or_else(|e| panic!("{}: index: {e}", fx.name));
    let mut out = Vec::with_capacity(index.len());
    let all: Vec<usize> = (0..index.len()).collect();
    for ordinals in all.chunks(round.max(1)) {
        let batch = read_values(&db, &index, ordinals, coalesce)
            .unwrap_or_else(|e| panic!("{}: values: {e}", fx.name));
        for (n, &i) in ordinals.iter().enumerate() {
            out.push((index.key(i).to_vec(), batch.value(n).to_vec()));
        }
    }
    out
}

fn assert_same(fx: &kit::Fixture, ours: &kit::Records, oracle: &kit::Records) {
    assert_eq!(ours.len(), oracle.len(), "{}: record count", fx.name);
    for (i, (a, b)) in ours.iter().zip(oracle).enumerate() {
        assert!(a.0 == b.0, "{}: key of record {i} differs", fx.name);
        assert!(
            a.1 == b.1,
            "{}: value of record {i} differs ({} vs {} bytes)",
            fx.name,
            a.1.len(),
            b.1.len()
        );
    }
}

#[test]
fn every_layout_reads_exactly_what_liblmdb_reads() {
    for fx in kit::all_layouts() {
        let oracle = fx.oracle();
        // Default options, one thread with tiny chunks (many chunk seams),
        // and no coalescing at all: all must agree with liblmdb.
        let ours = read_all(
            &fx,
            &IndexOptions::default(),
            CoalesceOptions::default(),
            1000,
        );
        assert_same(&fx, &ours, &oracle);
        let serial = IndexOptions {
            threads: 1,
            chunk_pages: 3,
        };
        let exact = CoalesceOptions {
            target: 1,
            max_gap: 0,
        };
        let ours = read_all(&fx, &serial, exact, 7);
        assert_same(&fx, &ours, &oracle);
    }
}

#[test]
fn stats_match_mdb_stat_and_index_reads_only_tree_pages() {
    for fx in kit::all_layouts() {
        let db = Database::open(&fx.path).unwrap();
        let tree = db.tree(fx.subdb.as_deref()).unwrap();
        let index = db.build_index(&tree, &IndexOptions::default()).unwrap();
        let stat = fx.mdb_stat();
        assert_eq!(
            tree.db.md_depth as u64,
            kit::stat_field(&stat, "Tree depth"),
            "{}",
            fx.name
        );
        assert_eq!(
            index.stats.branch_pages,
            kit::stat_field(&stat, "Branch pages"),
            "{}",
            fx.name
        );
        assert_eq!(
            index.stats.leaf_pages,
            kit::stat_field(&stat, "Leaf pages"),
            "{}",
            fx.name
        );
        assert_eq!(
            tree.db.md_overflow_pages,
            kit::stat_field(&stat, "Overflow pages"),
            "{}",
            fx.name
        );
        assert_eq!(
            index.len() as u64,
            kit::stat_field(&stat, "Entries"),
            "{}",
            fx.name
        );
        // Each branch and leaf page exactly once, nothing else.
        assert_eq!(
            index.stats.pages_read,
            index.stats.branch_pages + index.stats.leaf_pages,
            "{}: pages read for the index",
            fx.name
        );
        assert_eq!(
            index.stats.io.bytes_read,
            index.stats.pages_read * db.page_size() as u64,
            "{}",
            fx.name
        );
    }
}

#[test]
fn bulk_loaded_index_coalesces_its_reads() {
    let fx = kit::inline_only(20_000, 21);
    let db = Database::open(&fx.path).unwrap();
    let index = db
        .build_index(&db.main_tree().unwrap(), &IndexOptions::default())
        .unwrap();
    // A bulk load of small records puts leaf pages mostly back to back, so
    // far fewer requests than pages.
    assert!(index.stats.leaf_pages > 100);
    assert!(
        index.stats.io.read_requests * 4 < index.stats.pages_read,
        "{} requests for {} pages",
        index.stats.io.read_requests,
        index.stats.pages_read
    );
}

#[test]
fn data_file_path_and_directory_are_equivalent() {
    let fx = kit::caffe_style(300, 2500, 31);
    let by_dir = Database::open(&fx.path).unwrap();
    let by_file = Database::open(&fx.data_file()).unwrap();
    assert_eq!(by_dir.meta(), by_file.meta());
}

#[test]
fn reading_needs_no_lock_file_and_no_write_permission() {
    let fx = kit::caffe_style(200, 3000, 32);
    let oracle = fx.oracle();
    std::fs::remove_file(fx.path.join("lock.mdb")).unwrap();
    let data = fx.data_file();
    let mut perms = std::fs::metadata(&data).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&data, perms).unwrap();
    let ours = read_all(
        &fx,
        &IndexOptions::default(),
        CoalesceOptions::default(),
        50,
    );
    assert_same(&fx, &ours, &oracle);
    assert!(
        !fx.path.join("lock.mdb").exists(),
        "lmdbio created a lock file"
    );
}

#[test]
fn duplicate_key_databases_are_refused_by_name() {
    let (mut fx, env) = kit::new_fixture("dupsort", kit::EnvSpec::default());
    let db = env
        .create_db(Some("dups"), lmdb::DatabaseFlags::DUP_SORT)
        .unwrap();
    let mut txn = lmdb::Environment::begin_rw_txn(&env).unwrap();
    for v in [b"a", b"b", b"c"] {
        lmdb::RwTransaction::put(&mut txn, db, b"k", v, lmdb::WriteFlags::empty()).unwrap();
    }
    lmdb::Transaction::commit(txn).unwrap();
    fx.subdb = Some("dups".into());
    let dbf = Database::open(&fx.path).unwrap();
    let err = dbf.tree(Some("dups")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.to_string().contains("MDB_DUPSORT"), "{err}");
}

#[test]
fn missing_names_and_paths_get_clear_errors() {
    let fx = kit::named_databases(33);
    let db = Database::open(&fx.path).unwrap();
    let err = db.tree(Some("nope")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoSuchDatabase);
    // A plain record in MAIN is not a database.
    let err = db.tree(Some("aaa-plain")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoSuchDatabase);
    assert!(err.to_string().contains("plain record"), "{err}");

    let err = Database::open("/nonexistent/lmdbio/db".as_ref())
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let empty_dir = kit::TempDir::new().unwrap();
    let err = Database::open(empty_dir.path()).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("data.mdb"), "{err}");
}

#[test]
fn main_database_with_named_databases_lists_their_descriptors() {
    let fx = kit::named_databases(34);
    let main = kit::Fixture { subdb: None, ..fx };
    let oracle = main.oracle();
    let ours = read_all(
        &main,
        &IndexOptions::default(),
        CoalesceOptions::default(),
        10,
    );
    assert_same(&main, &ours, &oracle);
    assert_eq!(ours.len(), 3); // aaa-plain, train, val
}

/// The index scan's kept leaf pages (docs/design/inline-records.md):
/// read straight into an area of the caller's (the node's window), into
/// one that holds only some of them, or held in private memory; and moved
/// out of the area when it goes away. Whatever the path, the index is the
/// one `build_index` makes, the kept pages are the first leaf pages in key
/// order that hold an inline value, up to the budget, and their bytes are
/// the file's.
#[test]
fn kept_leaf_pages_are_the_files_whether_read_in_place_or_held() {
    use lmdbio::index::{parse_leaves_keeping, walk_tree};
    let fixtures = [
        kit::inline_only(3000, 41),
        kit::overflow_only(30, 42),
        kit::random_order(500, 43),
        kit::churned(44),
        kit::named_databases(45),
    ];
    for fx in &fixtures {
        let db = Database::open(&fx.path).unwrap();
        let tree = db.tree(fx.subdb.as_deref()).unwrap();
        let whole = db.build_index(&tree, &IndexOptions::default()).unwrap();
        let file = kit::read_file(&fx.data_file());
        let psize = db.page_size() as usize;
        let page = |pgno: u64| &file[pgno as usize * psize..(pgno as usize + 1) * psize];
        let leaves = walk_tree(&db, &tree, 64).unwrap().leaves;
        // The leaf pages holding an inline value, in key order (a
        // zero-length value may start at its page's end).
        let mut inline: Vec<u64> = Vec::new();
        for e in whole.entries.iter().filter(|e| !e.is_overflow()) {
            let p = (e.value_offset - 1) / psize as u64;
            if inline.last() != Some(&p) {
                inline.push(p);
            }
        }
        let all = 1u64 << 40;
        let three = 3 * psize as u64;
        // (area in pages, budget, chunk): room for all, for a chunk or
        // two, for less than a chunk, a budget below the area, no area.
        // Chunks of 64 read through the gaps between runs of leaves. On
        // one thread, and read on one while three parse.
        let cases = [
            (inline.len() + 16, all, 5),
            (inline.len() + 16, all, 64),
            (70, all, 64),
            (9, all, 4),
            (3, all, 8),
            (inline.len() + 16, three, 2),
            (0, all, 6),
            (0, three, 6),
        ];
        for ((slots, budget, chunk), threads) in cases.into_iter().flat_map(|c| [(c, 1), (c, 3)]) {
            let options = IndexOptions {
                threads,
                chunk_pages: chunk,
            };
            let what = format!(
                "{}: {slots} slots, budget {budget}, chunk {chunk}, {threads} threads",
                fx.name
            );
            let mut area = vec![0u8; slots * psize];
            // Without keys: the same entries, every key's place counted.
            let (keyless, _) =
                parse_leaves_keeping(&db, &tree, &leaves, &options, budget, &mut area, false)
                    .unwrap();
            assert!(keyless.entries == whole.entries, "{what}: entries differ");
            assert!(keyless.keys.is_empty(), "{what}: keys held");
            assert_eq!(keyless.key_bytes, whole.keys.len() as u64, "{what}");
            let (part, mut kept) =
                parse_leaves_keeping(&db, &tree, &leaves, &options, budget, &mut area, true)
                    .unwrap();
            assert!(part.entries == whole.entries, "{what}: entries differ");
            assert!(part.keys == whole.keys, "{what}: keys differ");
            let ends = |i: usize| whole.key(i).to_vec();
            let want = (!whole.is_empty()).then(|| (ends(0), ends(whole.len() - 1)));
            let got = part.order.ends().map(|(f, l)| (f.to_vec(), l.to_vec()));
            assert_eq!(got, want, "{what}: first and last keys");
            let room = if slots > 0 { slots } else { usize::MAX };
            let expect = inline.len().min(room).min((budget / psize as u64) as usize);
            let check = |kept: &lmdbio::index::KeptLeaves, area: &[u8]| {
                let mut got: Vec<u64> = kept.placed().to_vec();
                for (slot, &pgno) in kept.placed().iter().enumerate() {
                    assert!(
                        &area[slot * psize..(slot + 1) * psize] == page(pgno),
                        "{what}: page {pgno} in slot {slot} differs from the file"
                    );
                }
                for (pgno, bytes) in kept.held() {
                    assert!(bytes == page(pgno), "{what}: held page {pgno} differs");
                    got.push(pgno);
                }
                got.sort_unstable();
                let mut want = inline[..expect].to_vec();
                want.sort_unstable();
                assert_eq!(got, want, "{what}: kept pages");
            };
            check(&kept, &area);
            if slots > 0 {
                assert_eq!(kept.placed().len(), expect, "{what}: placed");
            } else {
                assert_eq!(kept.placed().len(), 0, "{what}: placed without an area");
            }
            // The area goes (a window made anew): the pages move out.
            kept.hold_placed(&area);
            area.fill(0xa5);
            assert!(kept.placed().is_empty(), "{what}: placed after moving out");
            check(&kept, &area);
        }
    }
}

/// Leaves out of key order where two chunks meet are refused, however the
/// chunks were parsed: the seam between chunks parsed by different
/// workers is checked as the one inside a chunk is (each chunk's first
/// key against the last key before it), with or without keys or an area.
#[test]
fn keys_out_of_order_where_two_parsed_chunks_meet_are_refused() {
    use lmdbio::index::{parse_leaves_keeping, walk_tree};
    let fx = kit::inline_only(3000, 47);
    let db = Database::open(&fx.path).unwrap();
    let tree = db.tree(None).unwrap();
    let mut leaves = walk_tree(&db, &tree, 64).unwrap().leaves;
    let m = leaves.len() / 2 / 4 * 4;
    assert!(m >= 8, "{} leaves", leaves.len());
    // Each side of the seam at `m` is in key order; only the seam is not.
    leaves.swap(m - 1, m);
    let psize = db.page_size() as usize;
    for (chunk, threads) in [(1, 3), (2, 2), (4, 3), (m, 2), (4, 1), (m, 1)] {
        for (slots, keys) in [
            (leaves.len() + 8, false),
            (leaves.len() + 8, true),
            (0, true),
        ] {
            let options = IndexOptions {
                threads,
                chunk_pages: chunk,
            };
            let what = format!("chunk {chunk}, {threads} threads, {slots} slots, keys {keys}");
            let mut area = vec![0u8; slots * psize];
            let budget = if slots > 0 { 1 << 40 } else { 0 };
            let err = parse_leaves_keeping(&db, &tree, &leaves, &options, budget, &mut area, keys)
                .err()
                .unwrap_or_else(|| panic!("{what}: leaves out of order were parsed"));
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{what}: {err}");
            assert!(err.to_string().contains("out of order"), "{what}: {err}");
            match err {
                lmdbio::Error::Corrupt { pgno, .. } => {
                    assert_eq!(pgno, leaves[m], "{what}: {err}")
                }
                other => panic!("{what}: {other}"),
            }
        }
    }
}
