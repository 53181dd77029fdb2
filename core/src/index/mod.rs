//! The exact record index: every record of a tree in key order, with its key
//! and the file extent of its value.
//!
//! Built by walking the tree level by level. Each level's pages are read in
//! page-number order with one request per run of consecutive pages, so the
//! index costs exactly the branch and leaf pages, each read once. Leaf
//! pages, the bulk of that, are parsed in parallel chunks. Overflow pages are
//! never read here: a leaf node already says where its value lives and how
//! long it is.

mod kept;
mod order_check;
mod pages;
mod pipeline;
pub mod saved;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::database::{Database, Tree};
use crate::error::{Error, Result};
use crate::format::{overflow_pages, LeafValue, TreePage, PAGEHDRSZ};
use crate::source::{IoSnapshot, ReadAt};

pub use kept::{parse_leaves_keeping, KeptLeaves};
pub use order_check::{first_bad_seam, OrderCheck};
pub use pages::consecutive_runs;
pub use pages::{
    read_sorted_into, read_spanning_into, spanned_slots, PageBatch, PageBitmap, Pages, PagesIn,
    MAX_PAGES_PER_READ, SPANNED_GAP,
};

/// Where one record lives. 24 bytes, so an index of 10 M records is 240 MB
/// plus the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct RecordEntry {
    /// Start of the key in [`RecordIndex::keys`].
    pub key_start: u64,
    /// File offset of the first value byte.
    pub value_offset: u64,
    /// Value length in bytes (LMDB values are under 4 GiB).
    pub value_len: u32,
    /// Key length in bytes (at most `MDB_MAXKEYSIZE` in practice).
    pub key_len: u16,
    /// [`RecordEntry::OVERFLOW`] and [`RecordEntry::SUBDATABASE`] bits.
    pub flags: u16,
}

impl RecordEntry {
    /// The value sits in an overflow run whose 16-byte page header comes
    /// right before `value_offset`.
    pub const OVERFLOW: u16 = 1;
    /// The record is a named database's descriptor (only in MAIN).
    pub const SUBDATABASE: u16 = 2;

    /// The value is in an overflow run (`F_BIGDATA`), not inline in its
    /// leaf page.
    pub fn is_overflow(&self) -> bool {
        self.flags & Self::OVERFLOW != 0
    }

    /// The leaf page an inline value lies in (`None` for an overflow
    /// value). Not `value_offset / page_size`: a zero-length value may
    /// start at its page's very end, the next page's first byte, and a
    /// value never starts at its page's first byte (the header is there).
    pub fn inline_page(&self, page_size: u64) -> Option<u64> {
        match self.is_overflow() || page_size == 0 {
            true => None,
            false => Some(self.value_offset.saturating_sub(1) / page_size),
        }
    }

    /// The bytes to read to get this value, including the overflow page
    /// header so the reader can check it: `(file offset, length)`.
    pub fn span(&self) -> (u64, u64) {
        if self.is_overflow() {
            (
                self.value_offset - PAGEHDRSZ as u64,
                self.value_len as u64 + PAGEHDRSZ as u64,
            )
        } else {
            (self.value_offset, self.value_len as u64)
        }
    }
}

/// Every record of one tree, in key order.
#[derive(Debug, Clone, Default)]
pub struct RecordIndex {
    /// Every key, back to back in key order; [`RecordEntry::key_start`]
    /// and `key_len` slice it.
    pub keys: Vec<u8>,
    /// One entry per record, in key order: entry `i` is ordinal `i`.
    pub entries: Vec<RecordEntry>,
    /// The file's page size in bytes.
    pub page_size: u32,
    /// What building the index read and found.
    pub stats: IndexStats,
}

/// What building the index cost and found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Branch pages in the tree (checked against `md_branch_pages`).
    pub branch_pages: u64,
    /// Leaf pages in the tree (checked against `md_leaf_pages`).
    pub leaf_pages: u64,
    /// Overflow pages the values need (`OVPAGES` of each size); at most the
    /// recorded `md_overflow_pages`, see `check_counts`.
    pub overflow_pages: u64,
    /// Tree pages read to build this index (not counting the meta pages
    /// or, for a named database, the MAIN pages read to find it: see
    /// [`crate::Tree::lookup_pages`]).
    pub pages_read: u64,
    /// The source's read counters over the build (requests, bytes).
    pub io: IoSnapshot,
}

impl RecordIndex {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The tree holds no records.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The key of record `i` (an ordinal, in key order). Panics if `i` is
    /// not below [`RecordIndex::len`].
    pub fn key(&self, i: usize) -> &[u8] {
        let e = &self.entries[i];
        &self.keys[e.key_start as usize..e.key_start as usize + e.key_len as usize]
    }

    /// Sum of all value lengths in bytes (without overflow page headers).
    pub fn value_bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.value_len as u64).sum()
    }
}
/// How to build a [`RecordIndex`]: parsing threads and read sizes.

#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// Threads parsing leaf pages; 0 means one per available core.
    pub threads: usize,
    /// Leaf pages per unit of parallel work (and per read buffer).
    pub chunk_pages: usize,
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            threads: 0,
            chunk_pages: 2048,
        }
    }
}

/// The result of descending the tree to one key.
pub(crate) struct FoundNode {
    pub is_subdatabase: bool,
    pub value: Vec<u8>,
}

/// Finds `key` by descending `tree` (reads one page per level), as
/// `mdb_dbi_open` does to find a named database.
pub(crate) fn lookup<R: ReadAt>(
    db: &Database<R>,
    tree: &Tree,
    key: &[u8],
) -> Result<(Option<FoundNode>, u64)> {
    if tree.db.is_empty_tree() {
        return Ok((None, 0));
    }
    let order = tree.key_order();
    let mut pgno = tree.db.md_root;
    let mut seen = Vec::new();
    for level in 1..=tree.db.md_depth {
        check_child(db, pgno, "root or child page")?;
        if seen.contains(&pgno) {
            return Err(db.corrupt(pgno, "page reached twice while descending the tree"));
        }
        seen.push(pgno);
        let batch = PageBatch::read(db.source(), db.page_size(), &[pgno])?;
        let page = TreePage::parse(pgno, batch.page(pgno)).map_err(|p| db.corrupt(pgno, p))?;
        let at_leaf_level = level == tree.db.md_depth;
        expect_kind(db, &page, pgno, level, tree.db.md_depth)?;
        if at_leaf_level {
            for i in 0..page.len() {
                let node = page.leaf_node(i).map_err(|p| db.corrupt(pgno, p))?;
                if order.compare(node.key, key).is_eq() {
                    let value = match node.value {
                        LeafValue::Inline { offset, size } => {
                            page.bytes()[offset as usize..(offset + size) as usize].to_vec()
                        }
                        LeafValue::Overflow { .. } => Vec::new(),
                    };
                    let found = FoundNode {
                        is_subdatabase: node.is_subdatabase,
                        value,
                    };
                    return Ok((Some(found), level as u64));
                }
            }
            return Ok((None, level as u64));
        }
        // The last node whose key is <= the one sought; node 0 stands for
        // everything below node 1.
        let mut child = page.branch_node(0).map_err(|p| db.corrupt(pgno, p))?.child;
        for i in 1..page.len() {
            let node = page.branch_node(i).map_err(|p| db.corrupt(pgno, p))?;
            if order.compare(node.key, key).is_gt() {
                break;
            }
            child = node.child;
        }
        pgno = child;
    }
    Err(db.corrupt(tree.db.md_root, "tree depth is 0 but the root is set"))
}

fn check_child<R: ReadAt>(db: &Database<R>, pgno: u64, what: &str) -> Result<()> {
    if pgno < 2 {
        return Err(db.corrupt(pgno, format!("{what} points at meta page {pgno}")));
    }
    if pgno > db.meta().mm_last_pg {
        return Err(db.corrupt(
            pgno,
            format!(
                "{what} {pgno} lies beyond the last page {}",
                db.meta().mm_last_pg
            ),
        ));
    }
    if pgno >= db.page_limit() {
        let psize = db.page_size() as u64;
        return Err(Error::Truncated {
            path: db.path().to_owned(),
            what: format!("page {pgno}"),
            needed_end: pgno.saturating_add(1).saturating_mul(psize),
            file_len: db.source().len(),
        });
    }
    Ok(())
}

fn expect_kind<R: ReadAt>(
    db: &Database<R>,
    page: &TreePage,
    pgno: u64,
    level: u16,
    depth: u16,
) -> Result<()> {
    let want_leaf = level == depth;
    if page.is_leaf() != want_leaf {
        return Err(db.corrupt(
            pgno,
            format!(
                "found a {} page at level {level} of a tree the meta says is {depth} deep",
                if page.is_leaf() { "leaf" } else { "branch" }
            ),
        ));
    }
    Ok(())
}

/// Builds the index of `tree` in this process. See the module
/// documentation; the MPI engine runs the same phases spread over nodes.
pub(crate) fn build<R: ReadAt>(
    db: &Database<R>,
    tree: &Tree,
    options: &IndexOptions,
) -> Result<RecordIndex> {
    let io_start = db.source().counters();
    let pages = walk_tree(db, tree, options.chunk_pages)?;
    let part = parse_leaves(db, tree, &pages.leaves, options)?;
    let overflow_pages = check_index(db, tree, &pages, &part.entries, Some(&part.keys))?;
    let io = db.source().counters().since(io_start);
    Ok(RecordIndex {
        keys: part.keys,
        entries: part.entries,
        page_size: db.page_size(),
        stats: IndexStats {
            branch_pages: pages.branches.len() as u64,
            leaf_pages: pages.leaves.len() as u64,
            overflow_pages,
            pages_read: io.bytes_read / db.page_size() as u64,
            io,
        },
    })
}

/// The page numbers of a tree's branch pages and, in key order, its leaf
/// pages: everything the upper levels say, before any leaf is read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreePages {
    /// Branch page numbers, level by level from the root, each level in
    /// key order.
    pub branches: Vec<u64>,
    /// Leaf page numbers in key order.
    pub leaves: Vec<u64>,
}

/// Reads the branch levels of `tree` (each level in page-number order,
/// coalesced, `chunk_pages` at a time) and lists its leaves in key order.
/// Refuses a page reached twice, a child outside the file, and levels that
/// disagree with the recorded depth.
pub fn walk_tree<R: ReadAt>(
    db: &Database<R>,
    tree: &Tree,
    chunk_pages: usize,
) -> Result<TreePages> {
    let d = &tree.db;
    let mut pages = TreePages::default();
    if d.is_empty_tree() {
        if d.md_entries != 0 || d.md_depth != 0 {
            return Err(db.corrupt(
                0,
                format!(
                    "empty tree (no root) claims {} entries and depth {}",
                    d.md_entries, d.md_depth
                ),
            ));
        }
        return Ok(pages);
    }
    if d.md_depth == 0 || d.md_depth > 64 {
        return Err(db.corrupt(d.md_root, format!("impossible tree depth {}", d.md_depth)));
    }
    let mut seen = PageBitmap::new(db.page_limit());
    let mut level: Vec<u64> = vec![d.md_root];
    for depth in 1..d.md_depth {
        claim_pages(db, &mut seen, &level)?;
        let mut next = Vec::new();
        for chunk in level.chunks(chunk_pages.max(1)) {
            let batch = PageBatch::read(db.source(), db.page_size(), chunk)?;
            for &pgno in chunk {
                let page =
                    TreePage::parse(pgno, batch.page(pgno)).map_err(|p| db.corrupt(pgno, p))?;
                expect_kind(db, &page, pgno, depth, d.md_depth)?;
                for i in 0..page.len() {
                    next.push(page.branch_node(i).map_err(|p| db.corrupt(pgno, p))?.child);
                }
            }
        }
        pages.branches.extend_from_slice(&level);
        level = next;
    }
    claim_pages(db, &mut seen, &level)?;
    pages.leaves = level;
    Ok(pages)
}

/// Records of a run of leaf pages, in key order; `key_start` is relative
/// to the part's first key (whether or not the keys are held).
#[derive(Debug, Clone, Default)]
pub struct IndexPart {
    /// The part's keys, back to back; empty when parsed without keys.
    pub keys: Vec<u8>,
    /// The part's records in key order, keys relative to `keys`.
    pub entries: Vec<RecordEntry>,
    /// Bytes the part's keys take, held in `keys` or not.
    pub key_bytes: u64,
    /// The part's first and last keys, and their order checked as parsed.
    pub order: OrderCheck,
}

impl IndexPart {
    /// Appends `other` (parsed with keys), rebasing its key offsets. The
    /// seam between the two is left to [`check_index`].
    pub fn append(&mut self, other: &IndexPart) {
        let base = self.key_bytes;
        self.key_bytes += other.key_bytes;
        self.order.append(&other.order);
        self.keys.extend_from_slice(&other.keys);
        self.entries
            .extend(other.entries.iter().map(|e| RecordEntry {
                key_start: e.key_start + base,
                ..*e
            }));
    }
}

/// The last check of a whole index, however it was assembled: keys strictly
/// ascending (also across the seams between separately parsed parts) when
/// `keys` are given (else the caller checked their order as they were
/// parsed, see [`OrderCheck`]), overflow runs overlapping no tree page and
/// no other run, and counts matching the tree descriptor. Returns the
/// overflow pages the values need.
pub fn check_index<R: ReadAt>(
    db: &Database<R>,
    tree: &Tree,
    pages: &TreePages,
    entries: &[RecordEntry],
    keys: Option<&[u8]>,
) -> Result<u64> {
    if let Some(keys) = keys {
        check_key_order(db, tree.key_order(), entries, keys)?;
    }
    let mut seen = PageBitmap::new(db.page_limit());
    claim_pages(db, &mut seen, &pages.branches)?;
    claim_pages(db, &mut seen, &pages.leaves)?;
    let overflow_pages = claim_overflow_runs(db, &mut seen, entries)?;
    check_counts(db, tree, pages, entries.len() as u64, overflow_pages)?;
    Ok(overflow_pages)
}

/// Keys strictly ascending over a whole index whose keys are `keys`.
fn check_key_order<R: ReadAt>(
    db: &Database<R>,
    order: crate::format::KeyOrder,
    entries: &[RecordEntry],
    keys: &[u8],
) -> Result<()> {
    let psize = db.page_size() as u64;
    let key =
        |e: &RecordEntry| keys.get(e.key_start as usize..(e.key_start + e.key_len as u64) as usize);
    for (i, pair) in entries.windows(2).enumerate() {
        let (Some(a), Some(b)) = (key(&pair[0]), key(&pair[1])) else {
            return Err(db.corrupt(
                0,
                format!("record {} has a key outside the key store", i + 1),
            ));
        };
        if !order.compare(a, b).is_lt() {
            let pgno =
                (pair[1].value_offset - PAGEHDRSZ as u64 * pair[1].is_overflow() as u64) / psize;
            return Err(db.corrupt(
                pgno,
                format!("records {i} and {} are out of key order", i + 1),
            ));
        }
    }
    Ok(())
}

/// Marks tree pages as used; a page reached twice means a cycle or shared
/// subtree, which liblmdb never writes.
fn claim_pages<R: ReadAt>(db: &Database<R>, seen: &mut PageBitmap, pgnos: &[u64]) -> Result<()> {
    for &p in pgnos {
        check_child(db, p, "tree page")?;
        if !seen.insert(p) {
            return Err(db.corrupt(
                p,
                "page is referenced twice in the tree (a cycle or shared subtree)",
            ));
        }
    }
    Ok(())
}

/// Checks every overflow run lies inside the file and overlaps no tree page
/// and no other run; returns the total overflow pages.
fn claim_overflow_runs<R: ReadAt>(
    db: &Database<R>,
    seen: &mut PageBitmap,
    entries: &[RecordEntry],
) -> Result<u64> {
    let psize = db.page_size() as u64;
    let mut total = 0u64;
    for e in entries.iter().filter(|e| e.is_overflow()) {
        let first = (e.value_offset - PAGEHDRSZ as u64) / psize;
        let count = overflow_pages(e.value_len as u64, psize as u32);
        if first.saturating_add(count) > db.page_limit() {
            return Err(db.corrupt(
                first,
                format!("overflow run of {count} pages runs past the file"),
            ));
        }
        if let Some(p) = seen.insert_run(first, count) {
            return Err(db.corrupt(
                first,
                format!("overflow run of {count} pages overlaps page {p}, already in use"),
            ));
        }
        total += count;
    }
    Ok(total)
}

fn check_counts<R: ReadAt>(
    db: &Database<R>,
    tree: &Tree,
    pages: &TreePages,
    entries: u64,
    overflow_pages: u64,
) -> Result<()> {
    let d = &tree.db;
    let exact = [
        ("entries", d.md_entries, entries),
        (
            "branch pages",
            d.md_branch_pages,
            pages.branches.len() as u64,
        ),
        ("leaf pages", d.md_leaf_pages, pages.leaves.len() as u64),
    ];
    for (what, recorded, walked) in exact {
        if recorded != walked {
            return Err(db.corrupt(
                d.md_root,
                format!(
                    "the tree descriptor records {recorded} {what} but the tree holds {walked}"
                ),
            ));
        }
    }
    // A value overwritten in place by a shorter one keeps its whole run
    // (mdb_cursor_put reuses a dirty overflow run that is large enough), so
    // the runs implied by value sizes may total less than recorded, never more.
    if overflow_pages > d.md_overflow_pages {
        return Err(db.corrupt(
            d.md_root,
            format!(
                "values need {} overflow pages but the tree descriptor records only {}",
                overflow_pages, d.md_overflow_pages
            ),
        ));
    }
    Ok(())
}

/// Parses `leaves` (in key order) into one part, `options.threads` chunks
/// at a time. Reads each leaf once, coalesced within a chunk.
pub fn parse_leaves<R: ReadAt>(
    db: &Database<R>,
    tree: &Tree,
    leaves: &[u64],
    options: &IndexOptions,
) -> Result<IndexPart> {
    let chunk_pages = options.chunk_pages.clamp(1, 1 << 20);
    let work: Vec<&[u64]> = leaves.chunks(chunk_pages).collect();
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(work.len())
    .max(1);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<IndexPart>>>> =
        Mutex::new((0..work.len()).map(|_| None).collect());
    let run = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(pgnos) = work.get(i) else { break };
        let parsed = parse_leaf_chunk(db, tree, pgnos);
        let failed = parsed.is_err();
        results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(parsed);
        if failed {
            // Stop handing out work; other threads finish their chunk.
            next.store(work.len(), Ordering::Relaxed);
        }
    };
    if threads == 1 {
        run();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(run);
            }
        });
    }
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut part = IndexPart::default();
    part.entries.reserve_exact(
        results
            .iter()
            .map(|r| {
                r.as_ref()
                    .and_then(|r| r.as_ref().ok())
                    .map_or(0, |c| c.entries.len())
            })
            .sum(),
    );
    // The first error in key order wins, so the message does not depend on
    // thread timing more than it must.
    for r in results {
        match r {
            Some(Ok(c)) => part.append(&c),
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    Ok(part)
}

fn parse_leaf_chunk<R: ReadAt>(db: &Database<R>, tree: &Tree, pgnos: &[u64]) -> Result<IndexPart> {
    let batch = PageBatch::read(db.source(), db.page_size(), pgnos)?;
    parse_leaf_batch(db, tree, pgnos, &batch)
}

/// Parses `pgnos` (leaf pages in key order), all of them in `batch`.
fn parse_leaf_batch<R: ReadAt>(
    db: &Database<R>,
    tree: &Tree,
    pgnos: &[u64],
    batch: &dyn Pages,
) -> Result<IndexPart> {
    let mut part = IndexPart::default();
    parse_leaf_batch_into(db, tree, pgnos, batch, (&mut part, true))?;
    Ok(part)
}

/// Parses `pgnos` (leaf pages in key order), all of them in `batch`, onto
/// the end of `out`, holding the keys in `out.keys` only if `keys`. Each
/// key is checked against the one before it in `out` (`out.order`), so a
/// part parsed chunk by chunk is checked whole; the seams between parts
/// are the caller's (see [`first_bad_seam`]). On failure `out` may hold
/// some of the chunk's records.
pub(crate) fn parse_leaf_batch_into<R: ReadAt>(
    db: &Database<R>,
    tree: &Tree,
    pgnos: &[u64],
    batch: &dyn Pages,
    (out, keys): (&mut IndexPart, bool),
) -> Result<()> {
    let psize = db.page_size();
    let order = tree.key_order();
    let chunk = out;
    // Within the batch each key is checked against the one before it where
    // it lies; `chunk.order` sees the batch's first and last keys only, so
    // no key is copied but those.
    let mut prev: Option<&[u8]> = None;
    let result = (|| {
        for &pgno in pgnos {
            let page = TreePage::parse(pgno, batch.page(pgno)).map_err(|p| db.corrupt(pgno, p))?;
            expect_kind(db, &page, pgno, tree.db.md_depth, tree.db.md_depth)?;
            let page_offset = pgno * psize as u64;
            for i in 0..page.len() {
                let node = page.leaf_node(i).map_err(|p| db.corrupt(pgno, p))?;
                if node.is_subdatabase && tree.name.is_some() {
                    return Err(db.corrupt(
                        pgno,
                        format!("node {i}: a sub-database inside a named database"),
                    ));
                }
                let ascending = match prev {
                    Some(p) => order.compare(p, node.key).is_lt(),
                    None => chunk.order.next(order, node.key),
                };
                if !ascending {
                    return Err(db.corrupt(pgno, format!("node {i}: keys out of order")));
                }
                prev = Some(node.key);
                let key_start = chunk.key_bytes;
                chunk.key_bytes += node.key.len() as u64;
                if keys {
                    chunk.keys.extend_from_slice(node.key);
                }
                let (value_offset, value_len, mut flags) = match node.value {
                    LeafValue::Inline { offset, size } => (page_offset + offset as u64, size, 0),
                    LeafValue::Overflow { pgno: first, size } => {
                        check_overflow(db, pgno, i, first, size)?;
                        (
                            first * psize as u64 + PAGEHDRSZ as u64,
                            size,
                            RecordEntry::OVERFLOW,
                        )
                    }
                };
                if node.is_subdatabase {
                    flags |= RecordEntry::SUBDATABASE;
                }
                chunk.entries.push(RecordEntry {
                    key_start,
                    value_offset,
                    value_len,
                    key_len: node.key.len() as u16,
                    flags,
                });
            }
        }
        Ok(())
    })();
    if let Some(last) = prev {
        chunk.order.set_last(last);
    }
    result
}

fn check_overflow<R: ReadAt>(
    db: &Database<R>,
    leaf: u64,
    node: usize,
    first: u64,
    size: u32,
) -> Result<()> {
    let psize = db.page_size();
    let count = overflow_pages(size as u64, psize);
    let end = first.saturating_add(count);
    if first < 2 || end > db.meta().mm_last_pg.saturating_add(1) {
        return Err(db.corrupt(
            leaf,
            format!(
                "node {node}: overflow run of {count} pages at page {first} lies outside pages 2..={}",
                db.meta().mm_last_pg
            ),
        ));
    }
    if end > db.page_limit() {
        return Err(Error::Truncated {
            path: db.path().to_owned(),
            what: format!("overflow run at page {first} ({count} pages, from leaf page {leaf})"),
            needed_end: end.saturating_mul(psize as u64),
            file_len: db.source().len(),
        });
    }
    Ok(())
}
