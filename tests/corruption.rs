//! Damaged files: every targeted corruption of a valid liblmdb-written file
//! yields its typed error naming the damaged page, and random damage never
//! panics or hangs.
//!
//! Each test takes the bytes of a fixture's data file, damages them in
//! memory and reads them through `MemSource`, the code path real files take.
//! Pages are located by parsing the intact file here with the public format
//! API, independently of the index code under test.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use lmdbio::format::{page_flags, LeafValue, MdbMeta, PageHeader, TreePage};
use lmdbio::values::read_values;
use lmdbio::{CoalesceOptions, Database, Error, ErrorKind, IndexOptions, Layout, MemSource};
use lmdbio_testkit as kit;

/// Longest any single open + index + read may take before we call it a hang.
const WATCHDOG: Duration = Duration::from_secs(20);

// Offsets inside a meta page (page header, then `MDB_meta`).
const MP_FLAGS: usize = 10;
const MM_MAGIC: usize = 16;
const MM_VERSION: usize = 20;
const MAIN_DB: usize = 88;
const MD_DEPTH: usize = MAIN_DB + 6;
const MD_ENTRIES: usize = MAIN_DB + 32;
const MM_LAST_PG: usize = 136;
/// Bytes of a meta page holding the header and `MDB_meta`.
const META_END: usize = 152;

// ---------------------------------------------------------------------------
// Fixtures, built once per test binary and shared as bytes.

/// A database file and where its pages are, found by walking it here.
struct Image {
    name: &'static str,
    bytes: Vec<u8>,
    map: Map,
}

fn image(name: &'static str, fx: kit::Fixture) -> Image {
    let bytes = kit::read_file(&fx.data_file());
    let map = Map::of(&bytes);
    Image { name, bytes, map }
}

/// Bulk load with ascending keys and 3000-byte values: one overflow page per
/// value, a two-level tree.
fn caffe() -> &'static Image {
    static F: OnceLock<Image> = OnceLock::new();
    F.get_or_init(|| image("caffe", kit::caffe_style(400, 3000, 101)))
}

/// Ascending keys with 100-byte values: every value inline in its leaf.
fn caffe_inline() -> &'static Image {
    static F: OnceLock<Image> = OnceLock::new();
    F.get_or_init(|| image("caffe-inline", kit::caffe_style(400, 100, 102)))
}

/// Random insertion order, mixed inline and overflow values.
fn random() -> &'static Image {
    static F: OnceLock<Image> = OnceLock::new();
    F.get_or_init(|| image("random", kit::random_order(40, 103)))
}

/// Image-sized values: 49-page overflow runs.
fn overflow() -> &'static Image {
    static F: OnceLock<Image> = OnceLock::new();
    F.get_or_init(|| image("overflow", kit::overflow_only(40, 104)))
}

/// A four-level tree that stays small (about 2 MB): 400-byte keys leave
/// room for only a few nodes per page.
fn deep() -> &'static Image {
    static F: OnceLock<Image> = OnceLock::new();
    F.get_or_init(|| {
        let (fx, env) = kit::new_fixture("deep-small", kit::EnvSpec::default());
        let db = env.open_db(None).expect("main db");
        let mut rng = kit::Rng::new(105);
        let records: kit::Records = (0..3000)
            .map(|i| {
                let mut k = format!("{i:07}").into_bytes();
                k.resize(400, b'k');
                (k, rng.bytes(8))
            })
            .collect();
        kit::put_all(&env, db, &records, 1000);
        drop(env);
        image("deep", fx)
    })
}

// ---------------------------------------------------------------------------
// Locating pages in an intact file.

/// One tree page found by the walk.
#[derive(Debug, Clone)]
struct TreePageInfo {
    pgno: u64,
    is_leaf: bool,
    /// Page-relative offsets of each node's 8-byte header, in key order.
    nodes: Vec<usize>,
    /// For branch pages, each node's child page number.
    children: Vec<u64>,
}

/// Where everything is in an intact file.
struct Map {
    psize: usize,
    /// 0 or 1: the meta page liblmdb uses (larger txnid, page 0 on a tie).
    current_meta: usize,
    meta: MdbMeta,
    /// Tree pages level by level from the root, each level in key order.
    levels: Vec<Vec<TreePageInfo>>,
    /// Overflow runs in key order: (leaf page, node index, first page, pages).
    runs: Vec<(u64, usize, u64, u64)>,
}

impl Map {
    fn of(bytes: &[u8]) -> Map {
        let m0 = MdbMeta::parse(bytes).expect("meta page 0");
        let psize = m0.page_size() as usize;
        let m1 = MdbMeta::parse(&bytes[psize..]).expect("meta page 1");
        let (current_meta, meta) = if m1.mm_txnid > m0.mm_txnid {
            (1, m1)
        } else {
            (0, m0)
        };
        let mut map = Map {
            psize,
            current_meta,
            meta,
            levels: Vec::new(),
            runs: Vec::new(),
        };
        let db = meta.main_db;
        if db.is_empty_tree() {
            return map;
        }
        let mut level = vec![db.md_root];
        for _ in 0..db.md_depth {
            let mut infos = Vec::new();
            let mut next = Vec::new();
            for &pgno in &level {
                let page = TreePage::parse(pgno, map.page(bytes, pgno)).expect("intact page");
                let ptr = |i: usize| {
                    let at = 16 + 2 * i;
                    u16::from_le_bytes([map.page(bytes, pgno)[at], map.page(bytes, pgno)[at + 1]])
                        as usize
                };
                let mut info = TreePageInfo {
                    pgno,
                    is_leaf: page.is_leaf(),
                    nodes: (0..page.len()).map(ptr).collect(),
                    children: Vec::new(),
                };
                for i in 0..page.len() {
                    if page.is_leaf() {
                        let node = page.leaf_node(i).expect("intact leaf node");
                        if let LeafValue::Overflow { pgno: first, size } = node.value {
                            let count = lmdbio::format::overflow_pages(size as u64, psize as u32);
                            map.runs.push((pgno, i, first, count));
                        }
                    } else {
                        let child = page.branch_node(i).expect("intact branch node").child;
                        info.children.push(child);
                        next.push(child);
                    }
                }
                infos.push(info);
            }
            map.levels.push(infos);
            level = next;
        }
        map
    }

    fn page<'a>(&self, bytes: &'a [u8], pgno: u64) -> &'a [u8] {
        let at = pgno as usize * self.psize;
        &bytes[at..at + self.psize]
    }

    fn offset(&self, pgno: u64) -> usize {
        pgno as usize * self.psize
    }

    fn meta_offset(&self) -> usize {
        self.current_meta * self.psize
    }

    fn leaves(&self) -> &[TreePageInfo] {
        self.levels.last().expect("a non-empty tree")
    }

    /// A leaf from the middle of the key range, so damage there is neither
    /// the first nor the last thing the index sees.
    fn middle_leaf(&self) -> &TreePageInfo {
        let leaves = self.leaves();
        &leaves[leaves.len() / 2]
    }

    fn root(&self) -> &TreePageInfo {
        &self.levels[0][0]
    }

    fn tree_pages(&self) -> impl Iterator<Item = &TreePageInfo> {
        self.levels.iter().flatten()
    }

    fn max_tree_page(&self) -> u64 {
        self.tree_pages().map(|p| p.pgno).max().unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------
// Running lmdbio on bytes.

/// Everything a reader does with a file: open, choose MAIN, index it, read
/// every value (in one round and in small rounds), and compute the layout
/// and map size the tools print. Returns the record count.
fn read_everything(bytes: Vec<u8>, options: &IndexOptions) -> lmdbio::Result<usize> {
    let db = Database::from_source(MemSource::new(bytes, "damaged.mdb"))?;
    let _ = db.map_size();
    let tree = db.main_tree()?;
    let index = db.build_index(&tree, options)?;
    let _ = Layout::of(&index, db.file_len());
    let all: Vec<usize> = (0..index.len()).collect();
    let batch = read_values(&db, &index, &all, CoalesceOptions::default())?;
    for i in 0..batch.len() {
        assert_eq!(batch.value(i).len(), index.entries[i].value_len as usize);
    }
    Ok(index.len())
}

/// Runs `f` on its own thread and fails the test if it has not finished
/// within `WATCHDOG`: damage must give an error, never a hang.
fn within_watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(format!("watchdog: {what}"))
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn");
    match rx.recv_timeout(WATCHDOG) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the thread sends before it ends"),
        },
        Err(RecvTimeoutError::Timeout) => {
            panic!("{what}: no result after {WATCHDOG:?}: lmdbio hangs on this damage")
        }
    }
}

/// Page numbers a message mentions as "page N".
fn pages_named(msg: &str) -> Vec<u64> {
    msg.match_indices("page ")
        .filter_map(|(at, m)| {
            let digits: String = msg[at + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            digits.parse().ok()
        })
        .collect()
}

/// Reads the damaged `bytes` and checks the error: its kind, and when
/// `page` is given that the message names it (and, for `Corrupt`, that the
/// error's own page number is it).
fn expect_error(what: &str, bytes: Vec<u8>, kind: ErrorKind, page: Option<u64>) -> Error {
    let label = what.to_owned();
    let result = within_watchdog(what, move || {
        read_everything(
            bytes,
            &IndexOptions {
                threads: 2,
                chunk_pages: 4,
            },
        )
    });
    let err = match result {
        Ok(n) => panic!("{label}: read {n} records from a damaged file without an error"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert_eq!(err.kind(), kind, "{label}: wrong kind of error: {msg}");
    if let Some(p) = page {
        assert!(
            pages_named(&msg).contains(&p),
            "{label}: error does not name page {p}: {msg}"
        );
        if let Error::Corrupt { pgno, offset, .. } = &err {
            assert_eq!(*pgno, p, "{label}: {msg}");
            // Every fixture here has 4 KiB pages.
            assert_eq!(*offset, p.saturating_mul(4096), "{label}: {msg}");
        }
    }
    err
}

/// A named damage and a phrase the resulting error must contain.
type Damage = (&'static str, Box<dyn Fn(&mut [u8])>, &'static str);

fn put_u16(bytes: &mut [u8], at: usize, v: u16) {
    bytes[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

/// Points branch node `node` of page `branch` at `child` (the page number
/// is spread over the node's lo, hi and flags fields).
fn set_child(bytes: &mut [u8], map: &Map, branch: &TreePageInfo, node: usize, child: u64) {
    let at = map.offset(branch.pgno) + branch.nodes[node];
    put_u16(bytes, at, child as u16);
    put_u16(bytes, at + 2, (child >> 16) as u16);
    put_u16(bytes, at + 4, (child >> 32) as u16);
}

#[test]
fn intact_fixtures_read_cleanly() {
    for img in [caffe(), caffe_inline(), random(), overflow(), deep()] {
        let n = read_everything(img.bytes.clone(), &IndexOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", img.name));
        assert_eq!(n as u64, img.map.meta.main_db.md_entries, "{}", img.name);
        eprintln!(
            "{}: {} bytes, {n} records, depth {}, {} tree pages, {} overflow runs",
            img.name,
            img.bytes.len(),
            img.map.levels.len(),
            img.map.tree_pages().count(),
            img.map.runs.len()
        );
    }
    assert_eq!(caffe().map.levels.len(), 2);
    assert_eq!(
        deep().map.levels.len(),
        4,
        "the deep fixture must be 4 levels"
    );
    assert!(!overflow().map.runs.is_empty());
    for img in [caffe(), caffe_inline(), random(), overflow(), deep()] {
        assert_eq!(img.map.psize, 4096, "{}", img.name);
        assert!(img.map.leaves().iter().all(|p| p.is_leaf), "{}", img.name);
        let depth = img.map.levels.len();
        assert!(img.map.levels[..depth - 1]
            .iter()
            .flatten()
            .all(|p| !p.is_leaf));
    }
    assert!(caffe_inline().map.runs.is_empty());
}

// ---------------------------------------------------------------------------
// Truncation.

#[test]
fn truncated_before_meta_page_1() {
    let img = caffe();
    let psize = img.map.psize;
    for cut in [psize, psize + 1, psize + 100, 1000] {
        let bytes = img.bytes[..cut].to_vec();
        let err = expect_error(&format!("cut at {cut}"), bytes, ErrorKind::Truncated, None);
        assert!(
            err.to_string().contains(&format!("offset {psize}")),
            "the error should say where meta page 1 starts: {err}"
        );
    }
    // Too short for even meta page 0's header: not an LMDB file at all.
    let err = expect_error(
        "cut at 100",
        img.bytes[..100].to_vec(),
        ErrorKind::NotLmdb,
        None,
    );
    assert!(err.to_string().contains("meta page 0"), "{err}");
    expect_error("empty file", Vec::new(), ErrorKind::NotLmdb, None);
}

/// The tree page the index meets first (level by level, key order within a
/// level) among those at or past page `limit`.
fn first_tree_page_from(map: &Map, limit: u64) -> Option<u64> {
    map.tree_pages().map(|p| p.pgno).find(|&p| p >= limit)
}

#[test]
fn truncated_in_the_middle_of_tree_pages() {
    for img in [caffe(), deep(), random()] {
        let map = &img.map;
        let mut cuts = vec![map.root().pgno, map.middle_leaf().pgno, map.max_tree_page()];
        if let Some(b) = map.levels.get(1).and_then(|l| l.last()) {
            cuts.push(b.pgno);
        }
        for cut_page in cuts {
            // Cut halfway through the page: it and everything after it are
            // gone.
            let cut = map.offset(cut_page) + map.psize / 2;
            let expected = first_tree_page_from(map, cut_page).expect("a tree page past the cut");
            let what = format!("{}: cut inside page {cut_page}", img.name);
            let err = expect_error(
                &what,
                img.bytes[..cut].to_vec(),
                ErrorKind::Truncated,
                Some(expected),
            );
            assert!(
                err.to_string().contains(&format!("has {cut} bytes")),
                "{err}"
            );
        }
    }
}

/// What a file cut to `cut_page` whole pages must report: the first tree
/// page the index meets past the cut, else the first overflow run in key
/// order that reaches past it.
fn expected_truncation(map: &Map, cut_page: u64) -> Option<u64> {
    first_tree_page_from(map, cut_page)
        .or_else(|| map.runs.iter().find(|r| r.2 + r.3 > cut_page).map(|r| r.2))
}

#[test]
fn truncated_in_the_middle_of_an_overflow_run() {
    let img = overflow();
    let map = &img.map;
    // The lowest run lying past every tree page: cutting in its middle
    // keeps the whole tree.
    let &(_, _, first, count) = map
        .runs
        .iter()
        .filter(|r| r.2 > map.max_tree_page())
        .min_by_key(|r| r.2)
        .expect("an overflow run past every tree page");
    assert!(count > 2);
    let last_run = map.runs.iter().max_by_key(|r| r.2).unwrap();
    let file_pages = (img.bytes.len() / map.psize) as u64;
    let cuts = [
        ("middle of a run", first + count / 2, 100),
        ("one page into a run", first + 1, 0),
        (
            "last page of the last run",
            last_run.2 + last_run.3 - 1,
            map.psize / 2,
        ),
        ("one byte short", file_pages - 1, map.psize - 1),
    ];
    for (what, cut_page, extra) in cuts {
        let cut = map.offset(cut_page) + extra;
        let expected = expected_truncation(map, cut_page).expect("something past the cut");
        let run = map
            .runs
            .iter()
            .find(|r| r.2 == expected)
            .expect("a run, not a tree page");
        let err = expect_error(
            what,
            img.bytes[..cut].to_vec(),
            ErrorKind::Truncated,
            Some(expected),
        );
        let msg = err.to_string();
        assert!(msg.contains("overflow run"), "{what}: {msg}");
        assert!(
            msg.contains(&format!("from leaf page {}", run.0)),
            "{what}: {msg}"
        );
    }
}

// ---------------------------------------------------------------------------
// Files that are not LMDB.

#[test]
fn wrong_magic_version_or_meta_flag_is_not_lmdb() {
    let img = caffe();
    let psize = img.map.psize;
    for meta_page in [0usize, 1] {
        let base = meta_page * psize;
        let damages: [Damage; 4] = [
            (
                "magic",
                Box::new(move |b: &mut [u8]| b[base + MM_MAGIC] ^= 0x01),
                "magic",
            ),
            (
                "magic byte-swapped",
                Box::new(move |b: &mut [u8]| put_u32(b, base + MM_MAGIC, 0xDEC0_EFBE)),
                "magic",
            ),
            (
                "version",
                Box::new(move |b: &mut [u8]| put_u32(b, base + MM_VERSION, 2)),
                "version 2",
            ),
            (
                "meta flag",
                Box::new(move |b: &mut [u8]| {
                    let f = get_u16(b, base + MP_FLAGS) & !page_flags::P_META;
                    put_u16(b, base + MP_FLAGS, f)
                }),
                "P_META",
            ),
        ];
        for (what, damage, says) in damages {
            let mut bytes = img.bytes.clone();
            damage(&mut bytes);
            let what = format!("meta page {meta_page}: {what}");
            let err = expect_error(&what, bytes, ErrorKind::NotLmdb, None);
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("meta page {meta_page}")),
                "{what}: {msg}"
            );
            assert!(msg.contains(says), "{what}: {msg}");
        }
    }
    // Something that is not a database at all.
    let text = b"not a database\n".repeat(1000);
    expect_error("text file", text, ErrorKind::NotLmdb, None);
}

// ---------------------------------------------------------------------------
// Damaged branch and leaf pages.

#[test]
fn damaged_leaf_header_names_the_leaf() {
    for img in [caffe(), caffe_inline()] {
        let map = &img.map;
        let leaf = map.middle_leaf().clone();
        let at = map.offset(leaf.pgno);
        let lower = get_u16(&img.bytes, at + 12);
        let upper = get_u16(&img.bytes, at + 14);
        let psize = map.psize as u16;
        let damages: Vec<Damage> = vec![
            (
                "mp_lower odd",
                Box::new(move |b: &mut [u8]| put_u16(b, at + 12, lower + 1)),
                "mp_lower",
            ),
            (
                "mp_lower above mp_upper",
                Box::new(move |b: &mut [u8]| put_u16(b, at + 12, upper + 2)),
                "mp_lower",
            ),
            (
                "mp_lower inside the header",
                Box::new(move |b: &mut [u8]| put_u16(b, at + 12, 8)),
                "mp_lower",
            ),
            (
                "no nodes",
                Box::new(move |b: &mut [u8]| put_u16(b, at + 12, 16)),
                "no nodes",
            ),
            (
                "mp_upper past the page",
                Box::new(move |b: &mut [u8]| put_u16(b, at + 14, psize + 2)),
                "mp_upper",
            ),
            (
                "mp_upper high byte",
                Box::new(move |b: &mut [u8]| b[at + 15] ^= 0x80),
                "mp_upper",
            ),
            (
                "mp_pgno",
                Box::new(move |b: &mut [u8]| b[at] ^= 0x01),
                "page header says",
            ),
            (
                "mp_pgno high byte",
                Box::new(move |b: &mut [u8]| b[at + 7] = 0xff),
                "page header says",
            ),
            (
                "flags: branch",
                Box::new(move |b: &mut [u8]| put_u16(b, at + 10, page_flags::P_BRANCH)),
                "found a branch page",
            ),
            (
                "flags: overflow",
                Box::new(move |b: &mut [u8]| put_u16(b, at + 10, page_flags::P_OVERFLOW)),
                "expected a branch or leaf",
            ),
            (
                "flags: meta",
                Box::new(move |b: &mut [u8]| put_u16(b, at + 10, page_flags::P_META)),
                "expected a branch or leaf",
            ),
            (
                "flags: none",
                Box::new(move |b: &mut [u8]| put_u16(b, at + 10, 0)),
                "expected a branch or leaf",
            ),
            (
                "flags: leaf2",
                Box::new(move |b: &mut [u8]| {
                    put_u16(b, at + 10, page_flags::P_LEAF | page_flags::P_LEAF2)
                }),
                "LEAF2",
            ),
            (
                "flags: subpage",
                Box::new(move |b: &mut [u8]| {
                    put_u16(b, at + 10, page_flags::P_LEAF | page_flags::P_SUBP)
                }),
                "sub-page",
            ),
        ];
        for (what, damage, says) in damages {
            let mut bytes = img.bytes.clone();
            damage(&mut bytes);
            let what = format!("{}: leaf {}: {what}", img.name, leaf.pgno);
            let err = expect_error(&what, bytes, ErrorKind::Corrupt, Some(leaf.pgno));
            assert!(err.to_string().contains(says), "{what}: {err}");
        }
    }
}

#[test]
fn damaged_branch_header_names_the_branch() {
    let img = deep();
    let map = &img.map;
    let branch = map.levels[2][map.levels[2].len() / 2].clone();
    let at = map.offset(branch.pgno);
    let cases: [(&str, usize, u16, &str); 3] = [
        (
            "flags: leaf",
            at + 10,
            page_flags::P_LEAF,
            "found a leaf page at level 3",
        ),
        (
            "mp_lower odd",
            at + 12,
            get_u16(&img.bytes, at + 12) + 1,
            "mp_lower",
        ),
        ("mp_pgno", at, branch.pgno as u16 ^ 0x10, "page header says"),
    ];
    for (what, field, value, says) in cases {
        let mut bytes = img.bytes.clone();
        put_u16(&mut bytes, field, value);
        let what = format!("branch {}: {what}", branch.pgno);
        let err = expect_error(&what, bytes, ErrorKind::Corrupt, Some(branch.pgno));
        assert!(err.to_string().contains(says), "{what}: {err}");
    }
}

#[test]
fn damaged_node_pointer_names_the_page() {
    for img in [caffe(), caffe_inline(), deep()] {
        let map = &img.map;
        let leaf = map.middle_leaf().clone();
        let at = map.offset(leaf.pgno);
        let upper = get_u16(&img.bytes, at + 14);
        let n = leaf.nodes.len();
        let psize = map.psize as u16;
        let ptr = |i: usize| at + 16 + 2 * i;
        let cases: Vec<(&str, usize, u16, &str)> = vec![
            ("into the header", ptr(0), 4, "outside the node area"),
            (
                "into the pointer array",
                ptr(n - 1),
                16,
                "outside the node area",
            ),
            (
                "just below mp_upper",
                ptr(n / 2),
                upper - 2,
                "outside the node area",
            ),
            (
                "past the page end",
                ptr(1),
                psize - 4,
                "outside the node area",
            ),
            ("far past the page", ptr(0), 0xfff0, "outside the node area"),
            // A pointer to another node: a valid node, out of key order.
            (
                "to the next node",
                ptr(0),
                leaf.nodes[1] as u16,
                "out of order",
            ),
            (
                "to the previous node",
                ptr(n - 1),
                leaf.nodes[n - 2] as u16,
                "out of order",
            ),
        ];
        for (what, field, value, says) in cases {
            let mut bytes = img.bytes.clone();
            put_u16(&mut bytes, field, value);
            let what = format!("{}: leaf {}: pointer {what}", img.name, leaf.pgno);
            let err = expect_error(&what, bytes, ErrorKind::Corrupt, Some(leaf.pgno));
            assert!(err.to_string().contains(says), "{what}: {err}");
        }
    }
}

#[test]
fn damaged_key_size_names_the_page() {
    for img in [caffe(), caffe_inline(), deep()] {
        let map = &img.map;
        let psize = map.psize as u16;
        // A leaf node and, for good measure, a branch node (the root's).
        let leaf = map.middle_leaf().clone();
        let root = map.root().clone();
        for page in [&leaf, &root] {
            // Node 1 in both: node 0 of a branch has an empty key.
            let ksize_at = map.offset(page.pgno) + page.nodes[1] + 6;
            let cases: [(&str, u16, &str); 3] = [
                ("past the page", psize, "runs past the page end"),
                (
                    "one byte past the page",
                    psize - page.nodes[1] as u16 - 7,
                    "runs past the page end",
                ),
                (
                    "beyond any build's limit",
                    0xffff,
                    "exceeds what liblmdb writes",
                ),
            ];
            for (what, ksize, says) in cases {
                let mut bytes = img.bytes.clone();
                put_u16(&mut bytes, ksize_at, ksize);
                let what = format!("{}: page {}: key size {what}", img.name, page.pgno);
                let err = expect_error(&what, bytes, ErrorKind::Corrupt, Some(page.pgno));
                assert!(err.to_string().contains(says), "{what}: {err}");
            }
        }
    }
}

#[test]
fn damaged_data_size_names_the_leaf() {
    // Inline values: a size past the page end.
    let img = caffe_inline();
    let map = &img.map;
    let leaf = map.middle_leaf().clone();
    let node_at = map.offset(leaf.pgno) + leaf.nodes[leaf.nodes.len() / 2];
    for (what, hi_lo) in [
        ("high half", (1u16, None)),
        ("low half", (0, Some(0xfff0u16))),
    ] {
        let mut bytes = img.bytes.clone();
        let (hi, lo) = hi_lo;
        put_u16(&mut bytes, node_at + 2, hi);
        if let Some(lo) = lo {
            put_u16(&mut bytes, node_at, lo);
        }
        let what = format!("inline value size, {what}");
        let err = expect_error(&what, bytes, ErrorKind::Corrupt, Some(leaf.pgno));
        assert!(
            err.to_string().contains("runs past the page end"),
            "{what}: {err}"
        );
    }

    // An overflow value grown far past the last page: the leaf is named.
    let img = caffe();
    let map = &img.map;
    let &(leaf, node, _, _) = &map.runs[map.runs.len() / 2];
    let info = map.leaves().iter().find(|l| l.pgno == leaf).unwrap();
    let mut bytes = img.bytes.clone();
    put_u16(&mut bytes, map.offset(leaf) + info.nodes[node] + 2, 0x7fff);
    let err = expect_error("overflow value size", bytes, ErrorKind::Corrupt, Some(leaf));
    assert!(
        err.to_string()
            .contains(&format!("node {node}: overflow run")),
        "{err}"
    );

    // An overflow page number moved onto a meta page or past the last page.
    let data_at = map.offset(leaf)
        + info.nodes[node]
        + 8
        + get_u16(&img.bytes, map.offset(leaf) + info.nodes[node] + 6) as usize;
    for first in [0u64, 1, map.meta.mm_last_pg + 1, u64::MAX - 1] {
        let mut bytes = img.bytes.clone();
        put_u64(&mut bytes, data_at, first);
        let what = format!("overflow page number {first}");
        let err = expect_error(&what, bytes, ErrorKind::Corrupt, Some(leaf));
        assert!(err.to_string().contains("lies outside"), "{what}: {err}");
    }
}

#[test]
fn branch_child_redirected_to_an_ancestor_is_a_cycle() {
    // Two levels: a child of the root pointed back at the root.
    let img = caffe();
    let map = &img.map;
    let root = map.root().clone();
    let mut bytes = img.bytes.clone();
    set_child(&mut bytes, map, &root, 1, root.pgno);
    let err = expect_error(
        "root child -> root",
        bytes,
        ErrorKind::Corrupt,
        Some(root.pgno),
    );
    assert!(err.to_string().contains("referenced twice"), "{err}");

    // Four levels: a level-3 branch pointed at the root and at its own
    // parent.
    let img = deep();
    let map = &img.map;
    let root = map.root().clone();
    let parent = map.levels[1][map.levels[1].len() / 2].clone();
    let branch = map.levels[2]
        .iter()
        .find(|b| parent.children.contains(&b.pgno))
        .unwrap()
        .clone();
    for (what, target) in [
        ("root", root.pgno),
        ("parent", parent.pgno),
        ("itself", branch.pgno),
    ] {
        let mut bytes = img.bytes.clone();
        set_child(&mut bytes, map, &branch, branch.nodes.len() - 1, target);
        let what = format!("level-3 child -> {what}");
        let err = expect_error(&what, bytes, ErrorKind::Corrupt, Some(target));
        assert!(
            err.to_string().contains("referenced twice"),
            "{what}: {err}"
        );
    }
}

#[test]
fn branch_child_redirected_to_a_sibling_subtree_is_a_page_reached_twice() {
    // The same child twice in one branch page.
    let img = caffe();
    let map = &img.map;
    let root = map.root().clone();
    let mut bytes = img.bytes.clone();
    set_child(&mut bytes, map, &root, 0, root.children[1]);
    let err = expect_error(
        "root child 0 -> child 1",
        bytes,
        ErrorKind::Corrupt,
        Some(root.children[1]),
    );
    assert!(err.to_string().contains("referenced twice"), "{err}");

    // Four levels: the root's first child pointed at a level-3 page under
    // the root's second child, so that page is reached at level 2 and again
    // at level 3 through its real parent.
    let img = deep();
    let map = &img.map;
    let root = map.root().clone();
    let second = map.levels[1]
        .iter()
        .find(|b| b.pgno == root.children[1])
        .unwrap();
    let grandchild = second.children[0];
    let mut bytes = img.bytes.clone();
    set_child(&mut bytes, map, &root, 0, grandchild);
    let err = expect_error(
        "root child 0 -> grandchild",
        bytes,
        ErrorKind::Corrupt,
        Some(grandchild),
    );
    assert!(err.to_string().contains("referenced twice"), "{err}");

    // A leaf of another subtree, pointed at from a level-3 branch.
    let leaves_of_first: Vec<u64> = map.levels[2][0].children.clone();
    let last_branch = map.levels[2].last().unwrap().clone();
    let mut bytes = img.bytes.clone();
    set_child(&mut bytes, map, &last_branch, 0, leaves_of_first[0]);
    let err = expect_error(
        "level-3 child -> leaf of first subtree",
        bytes,
        ErrorKind::Corrupt,
        Some(leaves_of_first[0]),
    );
    assert!(err.to_string().contains("referenced twice"), "{err}");
}

#[test]
fn branch_child_past_the_last_page_or_on_a_meta_page() {
    for img in [caffe(), deep()] {
        let map = &img.map;
        let last = map.meta.mm_last_pg;
        let branch = map.levels[map.levels.len() - 2].last().unwrap().clone();
        let cases: [(u64, &str); 5] = [
            (last + 1, "beyond the last page"),
            (last + 1000, "beyond the last page"),
            ((1 << 48) - 1, "beyond the last page"),
            (0, "meta page 0"),
            (1, "meta page 1"),
        ];
        for (target, says) in cases {
            let mut bytes = img.bytes.clone();
            set_child(&mut bytes, map, &branch, branch.nodes.len() / 2, target);
            let what = format!("{}: child of {} -> {target}", img.name, branch.pgno);
            let err = expect_error(&what, bytes, ErrorKind::Corrupt, Some(target));
            assert!(err.to_string().contains(says), "{what}: {err}");
        }
        // Within a raised mm_last_pg but past the end of the file.
        let mut bytes = img.bytes.clone();
        put_u64(&mut bytes, map.meta_offset() + MM_LAST_PG, last + 10);
        set_child(&mut bytes, map, &branch, 0, last + 5);
        expect_error(
            "child past the file end",
            bytes,
            ErrorKind::Truncated,
            Some(last + 5),
        );
    }
}

// ---------------------------------------------------------------------------
// Damaged meta fields.

#[test]
fn meta_depth_off_by_one_is_corrupt() {
    for img in [caffe(), deep()] {
        let map = &img.map;
        let depth = map.meta.main_db.md_depth;
        let at = map.meta_offset() + MD_DEPTH;
        // One deeper: the real leaves turn up where branches were expected.
        let first_leaf = map.leaves()[0].pgno;
        let mut bytes = img.bytes.clone();
        put_u16(&mut bytes, at, depth + 1);
        let what = format!("{}: depth {} -> {}", img.name, depth, depth + 1);
        let err = expect_error(&what, bytes, ErrorKind::Corrupt, Some(first_leaf));
        assert!(
            err.to_string().contains(&format!(
                "found a leaf page at level {depth} of a tree the meta says is {} deep",
                depth + 1
            )),
            "{what}: {err}"
        );
        // One shallower: branches turn up where leaves were expected.
        let first_lowest_branch = map.levels[map.levels.len() - 2][0].pgno;
        let mut bytes = img.bytes.clone();
        put_u16(&mut bytes, at, depth - 1);
        let what = format!("{}: depth {} -> {}", img.name, depth, depth - 1);
        let err = expect_error(&what, bytes, ErrorKind::Corrupt, Some(first_lowest_branch));
        assert!(
            err.to_string().contains("found a branch page"),
            "{what}: {err}"
        );
    }
    // Depth 0 with a root, and a depth no tree can have.
    let img = caffe();
    let root = img.map.root().pgno;
    for depth in [0u16, 65] {
        let mut bytes = img.bytes.clone();
        put_u16(&mut bytes, img.map.meta_offset() + MD_DEPTH, depth);
        let err = expect_error(
            &format!("depth {depth}"),
            bytes,
            ErrorKind::Corrupt,
            Some(root),
        );
        assert!(err.to_string().contains("impossible tree depth"), "{err}");
    }
}

#[test]
fn meta_entries_changed_is_corrupt() {
    for img in [caffe(), random(), deep()] {
        let map = &img.map;
        let entries = map.meta.main_db.md_entries;
        let root = map.root().pgno;
        for wrong in [entries + 1, entries - 1, 0, u64::MAX] {
            let mut bytes = img.bytes.clone();
            put_u64(&mut bytes, map.meta_offset() + MD_ENTRIES, wrong);
            let what = format!("{}: md_entries {entries} -> {wrong}", img.name);
            let err = expect_error(&what, bytes, ErrorKind::Corrupt, Some(root));
            assert!(
                err.to_string()
                    .contains(&format!("records {wrong} entries")),
                "{what}: {err}"
            );
        }
    }
}

#[test]
fn damage_to_the_older_meta_page_is_ignored_where_liblmdb_ignores_it() {
    // liblmdb reads only the current meta's tree: a wrong depth or count in
    // the other (valid) meta page does not matter.
    let img = caffe();
    let map = &img.map;
    let older = (1 - map.current_meta) * map.psize;
    let mut bytes = img.bytes.clone();
    put_u16(&mut bytes, older + MD_DEPTH, 9);
    put_u64(&mut bytes, older + MD_ENTRIES, 12345);
    let n = read_everything(bytes, &IndexOptions::default()).expect("older meta is not read");
    assert_eq!(n as u64, map.meta.main_db.md_entries);
}

// ---------------------------------------------------------------------------
// Overflow pages.

#[test]
fn damaged_overflow_header_fails_when_the_value_is_read() {
    for img in [caffe(), overflow(), random()] {
        let map = &img.map;
        let &(_, _, first, count) = &map.runs[map.runs.len() / 2];
        let at = map.offset(first);
        let intact = PageHeader::parse(&img.bytes[at..]).unwrap();
        assert_eq!(intact.mp_flags, page_flags::P_OVERFLOW);
        assert_eq!(intact.mp_pages() as u64, count);
        let cases: Vec<(&str, usize, u16)> = vec![
            ("mp_pgno", at, (first as u16) ^ 0x04),
            ("flags: leaf", at + 10, page_flags::P_LEAF),
            ("flags: none", at + 10, 0),
            ("mp_pages too small", at + 12, count as u16 - 1),
            ("mp_pages zero", at + 12, 0),
        ];
        for (what, field, value) in cases {
            let mut bytes = img.bytes.clone();
            put_u16(&mut bytes, field, value);
            let what = format!("{}: overflow page {first}: {what}", img.name);
            // The index does not read overflow pages: it succeeds.
            let db = Database::from_source(MemSource::new(bytes.clone(), "damaged.mdb")).unwrap();
            let index = db
                .build_index(&db.main_tree().unwrap(), &IndexOptions::default())
                .unwrap_or_else(|e| panic!("{what}: index: {e}"));
            // Values elsewhere still read.
            let others: Vec<usize> = (0..index.len())
                .filter(|&i| index.entries[i].value_offset != (first * map.psize as u64 + 16))
                .collect();
            assert_eq!(others.len() + 1, index.len(), "{what}");
            read_values(&db, &index, &others, CoalesceOptions::default())
                .unwrap_or_else(|e| panic!("{what}: other values: {e}"));
            let err = expect_error(&what, bytes, ErrorKind::Corrupt, Some(first));
            assert!(
                err.to_string().contains("bad overflow page header"),
                "{what}: {err}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Regressions: arithmetic on damaged page numbers.

#[test]
fn huge_last_page_number_does_not_overflow() {
    // mm_last_pg = u64::MAX: opening, the map size and reading still work,
    // since every page referenced exists.
    let img = caffe();
    let map = &img.map;
    let mut bytes = img.bytes.clone();
    put_u64(&mut bytes, map.meta_offset() + MM_LAST_PG, u64::MAX);
    let n = within_watchdog("last page u64::MAX", move || {
        read_everything(bytes, &IndexOptions::default())
    })
    .expect("reads");
    assert_eq!(n as u64, map.meta.main_db.md_entries);

    // With a huge last page, an overflow page number far past the file end
    // is a truncation, reported without overflowing the byte offset.
    let &(leaf, node, _, _) = &map.runs[0];
    let info = map.leaves().iter().find(|l| l.pgno == leaf).unwrap();
    let node_at = map.offset(leaf) + info.nodes[node];
    let data_at = node_at + 8 + get_u16(&img.bytes, node_at + 6) as usize;
    for (last, first) in [(u64::MAX, 1u64 << 60), (u64::MAX - 1, u64::MAX - 10)] {
        let mut bytes = img.bytes.clone();
        put_u64(&mut bytes, map.meta_offset() + MM_LAST_PG, last);
        put_u64(&mut bytes, data_at, first);
        let err = expect_error(
            &format!("last page {last}, overflow at {first}"),
            bytes,
            ErrorKind::Truncated,
            Some(first),
        );
        assert!(err.to_string().contains("overflow run"), "{err}");
    }

    // And a branch child far past the file end.
    let root = map.root().clone();
    let mut bytes = img.bytes.clone();
    put_u64(&mut bytes, map.meta_offset() + MM_LAST_PG, u64::MAX);
    set_child(&mut bytes, map, &root, 0, (1 << 48) - 1);
    expect_error(
        "child past the file end",
        bytes,
        ErrorKind::Truncated,
        Some((1 << 48) - 1),
    );

    // And a root far past the file end (the root is a full 64-bit field).
    for root in [1u64 << 60, u64::MAX - 1] {
        let mut bytes = img.bytes.clone();
        put_u64(&mut bytes, map.meta_offset() + MM_LAST_PG, u64::MAX);
        put_u64(&mut bytes, map.meta_offset() + MAIN_DB + 40, root);
        let err = expect_error(
            &format!("root {root}"),
            bytes,
            ErrorKind::Truncated,
            Some(root),
        );
        assert!(
            err.to_string()
                .contains(&format!("needs bytes up to offset {}", u64::MAX)),
            "{err}"
        );
    }
}

// ---------------------------------------------------------------------------
// Random damage.

/// Offsets worth damaging in an intact file: the meta fields, the page
/// headers, pointer arrays and node headers of tree pages, and overflow
/// headers.
struct Targets {
    meta: Vec<usize>,
    tree_structure: Vec<usize>,
    tree_pages: Vec<u64>,
    overflow_headers: Vec<usize>,
}

impl Targets {
    fn of(map: &Map) -> Targets {
        let meta = (0..2)
            .flat_map(|p| (0..META_END).map(move |o| p * map.psize + o))
            .collect();
        let mut tree_structure = Vec::new();
        for page in map.tree_pages() {
            let base = map.offset(page.pgno);
            tree_structure.extend(base..base + 16 + 2 * page.nodes.len());
            for &n in &page.nodes {
                tree_structure.extend(base + n..base + n + 8);
            }
        }
        let overflow_headers = map
            .runs
            .iter()
            .flat_map(|r| {
                let base = map.offset(r.2);
                base..base + 16
            })
            .collect();
        Targets {
            meta,
            tree_structure,
            tree_pages: map.tree_pages().map(|p| p.pgno).collect(),
            overflow_headers,
        }
    }
}

fn pick<T: Copy>(rng: &mut kit::Rng, items: &[T]) -> Option<T> {
    if items.is_empty() {
        None
    } else {
        Some(items[rng.below(items.len() as u64) as usize])
    }
}

/// The damaged file for `seed`: deterministic, so a failing seed replays.
fn damage(img: &Image, targets: &Targets, seed: u64) -> Vec<u8> {
    let mut rng = kit::Rng::new(seed);
    let mut bytes = img.bytes.clone();
    let len = bytes.len() as u64;
    if rng.below(10) == 0 {
        // Truncate: often near structure, sometimes anywhere.
        let cut = match rng.below(3) {
            0 => rng.below(4 * img.map.psize as u64),
            1 => {
                let p = pick(&mut rng, &targets.tree_pages).unwrap_or(2);
                img.map.offset(p) as u64 + rng.below(img.map.psize as u64)
            }
            _ => rng.below(len),
        };
        bytes.truncate(cut as usize);
        return bytes;
    }
    let flips = 1 + rng.below(4);
    for _ in 0..flips {
        let r = rng.below(100);
        let at = if r < 25 {
            pick(&mut rng, &targets.meta)
        } else if r < 65 {
            pick(&mut rng, &targets.tree_structure)
        } else if r < 80 {
            pick(&mut rng, &targets.tree_pages)
                .map(|p| img.map.offset(p) + rng.below(img.map.psize as u64) as usize)
        } else if r < 90 {
            pick(&mut rng, &targets.overflow_headers)
        } else {
            None
        }
        .unwrap_or_else(|| rng.below(len) as usize);
        bytes[at] = match rng.below(5) {
            0 => bytes[at] ^ (1 << rng.below(8)),
            1 => bytes[at].wrapping_add(1),
            2 => bytes[at].wrapping_sub(1),
            3 => 0xff,
            _ => (1 + rng.below(255) as u8) ^ bytes[at],
        };
    }
    bytes
}

/// Outcomes of the random runs, for the summary line.
#[derive(Default, Debug)]
struct Tally {
    ok: u64,
    errors: std::collections::BTreeMap<String, u64>,
}

fn random_damage_never_panics(img: &'static Image, iterations: u64, base_seed: u64) {
    let started = Instant::now();
    let current = Arc::new(AtomicU64::new(u64::MAX));
    let seen = current.clone();
    let name = img.name;
    let tally = within_watchdog_seeded(name, current, move || {
        let targets = Targets::of(&img.map);
        let mut tally = Tally::default();
        for i in 0..iterations {
            let seed = base_seed.wrapping_mul(1_000_003).wrapping_add(i);
            seen.store(seed, Ordering::Relaxed);
            let bytes = damage(img, &targets, seed);
            let options = match seed % 3 {
                0 => IndexOptions::default(),
                1 => IndexOptions {
                    threads: 1,
                    chunk_pages: 3,
                },
                _ => IndexOptions {
                    threads: 2,
                    chunk_pages: 5,
                },
            };
            match catch_unwind(AssertUnwindSafe(|| read_everything(bytes, &options))) {
                Ok(Ok(_)) => tally.ok += 1,
                Ok(Err(e)) => {
                    assert!(
                        !e.to_string().is_empty(),
                        "{name}: seed {seed}: error with an empty message ({e:?})"
                    );
                    *tally.errors.entry(format!("{:?}", e.kind())).or_default() += 1;
                }
                Err(panic) => {
                    let msg = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    panic!("{name}: lmdbio panicked on damage seed {seed}: {msg}");
                }
            }
        }
        tally
    });
    let errors: u64 = tally.errors.values().sum();
    eprintln!(
        "{name}: {iterations} damaged files in {:?}: {} read cleanly, errors {:?}",
        started.elapsed(),
        tally.ok,
        tally.errors
    );
    // The damage lands on structure often enough to matter.
    assert!(errors * 4 > iterations, "{name}: too few errors: {tally:?}");
}

/// `within_watchdog`, naming the seed being tried when time runs out.
fn within_watchdog_seeded<T: Send + 'static>(
    what: &str,
    seed: Arc<AtomicU64>,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    // The whole run gets a longer budget than one read; a single hanging
    // seed still trips it.
    match rx.recv_timeout(WATCHDOG * 3) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the thread sends before it ends"),
        },
        Err(RecvTimeoutError::Timeout) => panic!(
            "{what}: random damage still running after {:?}, at seed {}",
            WATCHDOG * 3,
            seed.load(Ordering::Relaxed)
        ),
    }
}

#[test]
fn random_damage_caffe() {
    random_damage_never_panics(caffe(), 2000, 1);
}

#[test]
fn random_damage_random_order() {
    random_damage_never_panics(random(), 2000, 2);
}

#[test]
fn random_damage_deep_tree() {
    random_damage_never_panics(deep(), 2000, 3);
}
