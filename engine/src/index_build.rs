//! Building the record index across nodes: the first rank of each node (a
//! "master") takes part; the tree's upper levels are read once by master 0
//! and broadcast, the leaf pages are split among the masters, and the parts
//! are gathered into every node's shared index.

use super::agree::{agree, agree_ok, local};
use super::data_file::{DataFile, DataSource};
use super::inline_pages;
use super::node_memory::{entries_as_bytes, NodeMemory};
use super::saved_index::{self, Decoded, Place};
use crate::mpi_raw::Comm;
use lmdbio_core::database::{Database, Tree};
use lmdbio_core::error::{Error, Result};
use lmdbio_core::index::saved::{SavedIdentity, SavedIndex};
use lmdbio_core::index::{
    check_index, first_bad_seam, parse_leaves_keeping, walk_tree, IndexOptions, IndexPart,
    KeptLeaves, TreePages, MAX_PAGES_PER_READ,
};
use lmdbio_core::source::{IoSnapshot, ReadAt};

/// The tree scanned, before the node's shared index exists.
pub(crate) struct ScannedIndex<'f> {
    /// On masters: the database and this master's part of the index.
    state: Option<MasterState<'f>>,
    /// What each master's part holds (on masters).
    counts: Vec<PartCount>,
    pub records: usize,
    pub key_bytes: usize,
    /// Bytes of every record's value together.
    pub value_bytes: u64,
    pub page_size: u32,
    /// Transaction id of the meta page read (identifies the snapshot).
    pub txnid: u64,
    /// `Database::identity_digest` of the tree read.
    pub digest: u64,
    /// The longest span a record's value covers in the file.
    pub largest_span: u64,
    /// Granule to plan reads in (bytes; see `DataFile::plan_granule`):
    /// the largest any master's reader asked for, so every node plans
    /// alike.
    pub plan_granule: u64,
    /// The most leaf pages any master kept to serve inline values from:
    /// every node makes room for as many (see `inline_pages`).
    pub kept_pages: usize,
    /// On masters: the index was loaded from a saved index.
    pub loaded: bool,
}

/// What one master's part of a scan holds, as the gather needs it.
#[derive(Clone, Copy, Default)]
struct PartCount {
    entries: u64,
    /// Bytes of keys the part holds (none when the front end asked for
    /// none).
    held_keys: u64,
    /// Bytes its keys take, held or not: where its keys start counts them.
    key_bytes: u64,
    /// Lengths of its first and last keys (for the seams' check).
    ends: (u64, u64),
}

/// What a master holds after opening the tree: the database, the tree,
/// (on master 0 only) its pages, and its reader's plan granule.
type OpenedTree<'f> = (Database<DataSource<'f>>, Tree, Option<TreePages>, u64);

struct MasterState<'f> {
    db: Database<DataSource<'f>>,
    tree: Tree,
    pages: TreePages,
    part: IndexPart,
    kept: KeptLeaves,
    /// See `ScannedIndex::plan_granule`.
    granule: u64,
    /// The saved index every master loaded instead of scanning (`part`
    /// is then empty), and where it was decoded.
    saved: Option<SavedIndex>,
    decoded: Option<Decoded>,
    /// Where master 0 saves the index it gathers, and the database state
    /// it belongs to (none if loaded).
    save_to: Option<(Place, SavedIdentity)>,
}

/// What the masters tell every rank about the whole index, agreed in one
/// reduction (MIN; ranks that are not masters pass `i64::MAX`, and every
/// master passes the same values).
#[derive(Clone, Copy)]
enum Agreed {
    Records,
    KeyBytes,
    PageSize,
    Txnid,
    LargestSpan,
    PlanGranule,
    ValueBytes,
    KeptPages,
    Digest,
}
const SIZES: usize = 9;

/// A master's scan, before the world agrees on it: its state, the entries
/// and key bytes of every master's part, and the sizes. `None` when this
/// master did its part but another master failed: that master's error is
/// the one the agreement carries.
type MasterScan<'f> = Option<(MasterState<'f>, Vec<PartCount>, [i64; SIZES])>;

/// Reads the tree and sizes the index, ending in one agreement over
/// `world`. `masters` is present on masters (every master is a reader);
/// `file` is the reader's file, or why it could not be opened; `area` the
/// node's window from the index's place on where a master has one (see
/// `inline_pages::scan_area`); the node holds keys only if `keys`.
///
/// One agreement, not one per phase: each agreement over the world before the
/// first value is read delays every rank (see docs/design/agreement.md). The
/// masters' own collective calls carry a failure among them instead: master 0's
/// page list says whether it has one, and the sizes they gather say who parsed
/// its part.
pub(crate) fn scan<'f>(
    world: &Comm,
    masters: Option<&Comm>,
    file: Result<Option<&'f DataFile>>,
    subdb: Option<&str>,
    keep_budget: u64,
    area: &mut [u8],
    (saved, keys, cores): (Option<&Place>, bool, usize),
) -> Result<ScannedIndex<'f>> {
    let local = match masters {
        Some(m) => master_scan(m, file, subdb, keep_budget, area, (saved, keys, cores)),
        None => file.map(|_| None),
    };
    let mut sizes = [i64::MAX; SIZES];
    if let Ok(Some((_, _, mine))) = &local {
        sizes = *mine;
    }
    let found = agree(world, local, &mut sizes)?;
    let (state, counts) = match (masters, found) {
        (Some(_), Some((state, counts, _))) => (Some(state), counts),
        (None, _) => (None, Vec::new()),
        (Some(_), None) => {
            return Err(Error::Internal(
                "a master failed the scan, yet the ranks agreed it succeeded".into(),
            ))
        }
    };
    let size = |s: Agreed| sizes[s as usize] as u64;
    let loaded = state.as_ref().is_some_and(|s| s.saved.is_some());
    Ok(ScannedIndex {
        loaded,
        state,
        counts,
        records: size(Agreed::Records) as usize,
        key_bytes: size(Agreed::KeyBytes) as usize,
        value_bytes: size(Agreed::ValueBytes),
        page_size: size(Agreed::PageSize) as u32,
        txnid: size(Agreed::Txnid),
        digest: size(Agreed::Digest),
        largest_span: size(Agreed::LargestSpan),
        plan_granule: size(Agreed::PlanGranule).max(1),
        kept_pages: size(Agreed::KeptPages) as usize,
    })
}

impl ScannedIndex<'_> {
    /// Copies the leaf pages the scan read into the window, or the saved
    /// index decoded there (`area`, as given to [`scan`]), out to private
    /// memory: the window is about to be made anew.
    pub(crate) fn hold_placed(&mut self, area: &mut [u8]) {
        let Some(state) = &mut self.state else {
            return;
        };
        state
            .kept
            .hold_placed(inline_pages::keep_area(area, u64::MAX));
        if matches!(state.decoded, Some(Decoded::InPlace)) {
            let len = self.records * 24 + self.key_bytes;
            state.decoded = Some(Decoded::Held(area[..len].to_vec()));
        }
    }
}

/// What each master tells the others about its part (all zero from a
/// master that has none).
#[derive(Default)]
struct PartSizes {
    parsed: bool,
    entries: u64,
    key_bytes: u64,
    value_bytes: u64,
    /// The longest span one of its records' values covers.
    largest_span: u64,
    granule: u64,
    page_size: u64,
    txnid: u64,
    kept_pages: u64,
    digest: u64,
    /// Bytes its keys take, held or not.
    all_key_bytes: u64,
    first_key_len: u64,
    last_key_len: u64,
}

impl PartSizes {
    const WORDS: usize = 13;

    fn of(state: &MasterState) -> PartSizes {
        let entries = &state.part.entries;
        // One pass over the part: it may hold millions of entries.
        let (value_bytes, largest_span) = entries.iter().fold((0, 0), |(bytes, largest), e| {
            (bytes + u64::from(e.value_len), largest.max(e.span().1))
        });
        PartSizes {
            parsed: true,
            entries: entries.len() as u64,
            key_bytes: state.part.keys.len() as u64,
            value_bytes,
            largest_span,
            granule: state.granule,
            page_size: u64::from(state.db.page_size()),
            txnid: state.db.meta().mm_txnid,
            kept_pages: state.kept.len() as u64,
            digest: state.db.identity_digest(&state.tree),
            all_key_bytes: state.part.key_bytes,
            first_key_len: state.part.order.ends().map_or(0, |e| e.0.len() as u64),
            last_key_len: state.part.order.ends().map_or(0, |e| e.1.len() as u64),
        }
    }

    fn count(&self) -> PartCount {
        PartCount {
            entries: self.entries,
            held_keys: self.key_bytes,
            key_bytes: self.all_key_bytes,
            ends: (self.first_key_len, self.last_key_len),
        }
    }

    fn words(&self) -> [i64; Self::WORDS] {
        [
            i64::from(self.parsed),
            self.entries as i64,
            self.key_bytes as i64,
            self.value_bytes as i64,
            self.largest_span as i64,
            self.granule as i64,
            self.page_size as i64,
            self.txnid as i64,
            self.kept_pages as i64,
            self.digest as i64,
            self.all_key_bytes as i64,
            self.first_key_len as i64,
            self.last_key_len as i64,
        ]
    }

    fn from(w: &[i64]) -> PartSizes {
        PartSizes {
            parsed: w[0] != 0,
            entries: w[1] as u64,
            key_bytes: w[2] as u64,
            value_bytes: w[3] as u64,
            largest_span: w[4] as u64,
            granule: w[5] as u64,
            page_size: w[6] as u64,
            txnid: w[7] as u64,
            kept_pages: w[8] as u64,
            digest: w[9] as u64,
            all_key_bytes: w[10] as u64,
            first_key_len: w[11] as u64,
            last_key_len: w[12] as u64,
        }
    }
}

/// A master's part of the scan. Every master makes the same collective
/// calls among the masters whatever fails locally, so none is left waiting.
fn master_scan<'f>(
    masters: &Comm,
    file: Result<Option<&'f DataFile>>,
    subdb: Option<&str>,
    keep_budget: u64,
    area: &mut [u8],
    (saved, keys, cores): (Option<&Place>, bool, usize),
) -> Result<MasterScan<'f>> {
    let loadable = file.as_ref().ok().copied().flatten();
    let found = saved_index::load_on_masters(masters, loadable, subdb, saved, (keys, area))?;
    if let Some(loaded) = found {
        return Ok(Some(from_saved(loaded, keys)));
    }
    let keep_area = inline_pages::keep_area(area, keep_budget);
    // Before the meta pages are read (see saved_index::mtime_ns).
    let mtime = match (&file, saved) {
        (Ok(Some(f)), Some(_)) if masters.rank() == 0 => saved_index::mtime_ns(f.path()),
        _ => 0,
    };
    let opened = file.and_then(|f| local(|| open_tree(masters, f, subdb)));
    // Master 0's page list, or nothing if it has none to share: an empty
    // tree still encodes its branch count. The calls among the masters
    // report failures rather than return early, so no master is left in
    // the next one alone.
    let mut bytes = match &opened {
        Ok((_, _, Some(pages), _)) => encode_pages(pages),
        _ => Vec::new(),
    };
    let shared = masters.bcast_bytes(0, &mut bytes);
    let parsed = shared.and(opened).and_then(|(db, tree, _, granule)| {
        if bytes.is_empty() {
            return Ok(None);
        }
        let save_to = saved
            .filter(|_| masters.rank() == 0)
            .map(|p| (p.clone(), saved_index::identity(&db, &tree, mtime)));
        let keeping = (keep_budget, keep_area, keys);
        local(|| parse_part(masters, (db, tree, granule), &bytes, keeping, cores)).map(
            |mut state| {
                state.save_to = save_to;
                Some(state)
            },
        )
    });
    let mine = match &parsed {
        Ok(Some(state)) => PartSizes::of(state).words(),
        _ => PartSizes::default().words(),
    };
    let all = masters.allgather_i64(&mine);
    let Some(state) = parsed? else {
        return Ok(None);
    };
    let all = all?;
    let parts: Vec<PartSizes> = all.chunks(PartSizes::WORDS).map(PartSizes::from).collect();
    if parts.iter().any(|p| !p.parsed) {
        return Ok(None);
    }
    // Each master read the meta pages itself: a writer that committed in
    // between would have them index different snapshots.
    let lowest = parts.iter().map(|p| p.txnid).min().unwrap_or(0);
    let highest = parts.iter().map(|p| p.txnid).max().unwrap_or(0);
    if lowest != highest
        || parts
            .iter()
            .any(|p| p.page_size != parts[0].page_size || p.digest != parts[0].digest)
    {
        return Err(Error::InvalidArgument(format!(
            "{}: the database changed while it was opened (its nodes read transactions {lowest} to {highest}); open it again",
            state.db.source().path().display()
        )));
    }
    let counts: Vec<PartCount> = parts.iter().map(PartSizes::count).collect();
    let mut sizes = [0i64; SIZES];
    let mut set = |s: Agreed, v: u64| sizes[s as usize] = v as i64;
    set(Agreed::Records, parts.iter().map(|p| p.entries).sum());
    set(Agreed::KeyBytes, parts.iter().map(|p| p.key_bytes).sum());
    set(
        Agreed::ValueBytes,
        parts.iter().map(|p| p.value_bytes).sum(),
    );
    set(
        Agreed::LargestSpan,
        parts.iter().map(|p| p.largest_span).max().unwrap_or(0),
    );
    set(
        Agreed::PlanGranule,
        parts.iter().map(|p| p.granule).max().unwrap_or(1),
    );
    set(
        Agreed::KeptPages,
        parts.iter().map(|p| p.kept_pages).max().unwrap_or(0),
    );
    set(Agreed::PageSize, parts[0].page_size);
    set(Agreed::Txnid, lowest);
    set(Agreed::Digest, parts[0].digest);
    Ok(Some((state, counts, sizes)))
}

/// Gathers the masters' parts into the node's shared index (laid out in
/// `memory` for `scanned`'s sizes) and publishes it, in one agreement over
/// `world` that also carries `also` (this rank's own result of a step
/// that ends at the same agreement). Returns the reads this rank made for
/// the index, and `also`'s value.
pub(crate) fn publish<T>(
    world: &Comm,
    masters: Option<&Comm>,
    memory: &mut NodeMemory,
    scanned: ScannedIndex,
    also: Result<T>,
) -> Result<(IoSnapshot, T)> {
    let mut io = IoSnapshot::default();
    let gathered = match (masters, scanned.state) {
        (Some(m), Some(state)) => {
            io = state.db.source().counters();
            local(|| gather_into(m, memory, &scanned.counts, state))
        }
        _ => Ok(()),
    };
    let published = gathered.and_then(|()| memory.sync()).and(also);
    let value = agree_ok(world, published)?;
    memory.sync()?;
    Ok((io, value))
}

fn open_tree<'f>(
    masters: &Comm,
    file: Option<&'f DataFile>,
    subdb: Option<&str>,
) -> Result<OpenedTree<'f>> {
    let file =
        file.ok_or_else(|| Error::Internal("a node's first rank has no file open".into()))?;
    let db = Database::from_source(file.source())?;
    // Fails here, agreed by every rank, for a file that direct reads were
    // required for but cannot serve.
    let granule = file.plan_granule(db.page_size() as u64)?;
    let tree = db.tree(subdb)?;
    let pages = if masters.rank() == 0 {
        Some(walk_tree(&db, &tree, IndexOptions::default().chunk_pages)?)
    } else {
        None
    };
    Ok((db, tree, pages, granule))
}

/// Fewest cores of its own (the machine's over the readers on it) a
/// master parses the scan's leaves with workers on: on two cores the
/// workers' copy of the kept pages cost more than the overlap gained.
const PARSE_WORKERS_FROM: usize = 4;

/// Parses this master's share of the leaves in master 0's page list.
fn parse_part<'f>(
    masters: &Comm,
    (db, tree, granule): (Database<DataSource<'f>>, Tree, u64),
    page_list: &[u8],
    (keep_budget, keep_area, keys): (u64, &mut [u8], bool),
    cores: usize,
) -> Result<MasterState<'f>> {
    let pages = decode_pages(page_list)?;
    let n = pages.leaves.len();
    let (lo, hi) = (
        n * masters.rank() / masters.size(),
        n * (masters.rank() + 1) / masters.size(),
    );
    // With `PARSE_WORKERS_FROM` cores or more to itself, this thread reads
    // and parse workers (one per core) parse, calling no MPI; with fewer,
    // this thread reads and parses (see docs/design/inline-records.md,
    // "Parsed beside the reads").
    let threads = if cores >= PARSE_WORKERS_FROM {
        cores
    } else {
        1
    };
    let options = IndexOptions {
        threads,
        chunk_pages: MAX_PAGES_PER_READ,
    };
    let (part, kept) = parse_leaves_keeping(
        &db,
        &tree,
        &pages.leaves[lo..hi],
        &options,
        keep_budget,
        keep_area,
        keys,
    )?;
    Ok(MasterState {
        db,
        tree,
        pages,
        part,
        kept,
        granule,
        saved: None,
        decoded: None,
        save_to: None,
    })
}

/// A master's scan result from a saved index every master loaded: the
/// sizes of the whole index (without keys unless `keys`), which this
/// master decodes into its node's memory when the index is published.
fn from_saved(
    loaded: saved_index::Loaded,
    keys: bool,
) -> (MasterState, Vec<PartCount>, [i64; SIZES]) {
    let summary = loaded.index.summary();
    let page_size = u64::from(loaded.db.page_size());
    let txnid = loaded.db.meta().mm_txnid;
    let digest = loaded.db.identity_digest(&loaded.tree);
    let mut sizes = [0i64; SIZES];
    let mut set = |s: Agreed, v: u64| sizes[s as usize] = v as i64;
    set(Agreed::Records, summary.records);
    set(Agreed::KeyBytes, if keys { summary.key_bytes } else { 0 });
    set(Agreed::ValueBytes, summary.value_bytes);
    set(Agreed::LargestSpan, summary.largest_span);
    set(Agreed::PlanGranule, loaded.granule.max(1));
    set(Agreed::KeptPages, 0);
    set(Agreed::PageSize, page_size);
    set(Agreed::Txnid, txnid);
    set(Agreed::Digest, digest);
    let state = MasterState {
        db: loaded.db,
        tree: loaded.tree,
        pages: TreePages::default(),
        part: IndexPart::default(),
        kept: KeptLeaves::default(),
        granule: loaded.granule,
        saved: Some(loaded.index),
        decoded: Some(loaded.decoded),
        save_to: None,
    };
    (state, Vec::new(), sizes)
}

/// Gathers every master's part into this node's shared index and checks
/// the whole: each part's keys were checked in order as they were parsed,
/// the seams between parts are checked here with the parts' first and
/// last keys, gathered with the parts.
fn gather_into(
    masters: &Comm,
    index: &mut NodeMemory,
    counts: &[PartCount],
    mut state: MasterState,
) -> Result<()> {
    if let Some(decoded) = state.decoded.take() {
        if let Decoded::Held(bytes) = decoded {
            // SAFETY: as below; every master loaded the whole index itself.
            let (entries, keys) = unsafe { index.index_regions_mut() };
            let (e, k) = bytes.split_at(entries.len().min(bytes.len()));
            if e.len() != entries.len() || k.len() != keys.len() {
                return Err(Error::Internal(format!(
                    "a saved index of {} bytes decoded for {} of index",
                    bytes.len(),
                    entries.len() + keys.len()
                )));
            }
            entries.copy_from_slice(e);
            keys.copy_from_slice(k);
        }
        return inline_pages::publish_kept(index, &state.kept);
    }
    let rank = masters.rank();
    let key_base: u64 = counts[..rank].iter().map(|c| c.key_bytes).sum();
    for e in &mut state.part.entries {
        e.key_start += key_base;
    }
    let entry_counts: Vec<u64> = counts.iter().map(|c| c.entries * 24).collect();
    let key_counts: Vec<u64> = counts.iter().map(|c| c.held_keys).collect();
    let end_counts: Vec<u64> = counts.iter().map(|c| c.ends.0 + c.ends.1).collect();
    let mine: Vec<u8> = match state.part.order.ends() {
        Some((first, last)) => [first, last].concat(),
        None => Vec::new(),
    };
    let mut ends = vec![0u8; end_counts.iter().sum::<u64>() as usize];
    {
        // SAFETY: we are the node's first rank and the index is not yet
        // published (the other ranks wait in the agreement that follows).
        let (entries, keys) = unsafe { index.index_regions_mut() };
        if masters.size() == 1 {
            entries.copy_from_slice(entries_as_bytes(&state.part.entries));
            keys.copy_from_slice(&state.part.keys);
        } else {
            masters.allgatherv_bytes(&mut [
                (
                    entries_as_bytes(&state.part.entries),
                    &entry_counts,
                    entries,
                ),
                (&state.part.keys, &key_counts, keys),
                (&mine, &end_counts, &mut ends),
            ])?;
        }
    }
    check_seams(&state, counts, &ends)?;
    check_index(&state.db, &state.tree, &state.pages, index.entries(), None)?;
    inline_pages::publish_kept(index, &state.kept)?;
    if let Some((place, identity)) = &state.save_to {
        let keys = Some(index.keys()).filter(|_| counts.iter().all(|c| c.held_keys == c.key_bytes));
        saved_index::save_in_background(place, *identity, index.entries(), keys);
    }
    // Every master has parsed its leaves (the gathers above completed).
    state
        .db
        .source()
        .forget_tree_pages(&state.pages, u64::from(state.db.page_size()));
    Ok(())
}

/// The masters' parts follow one another in key order: `ends` holds each
/// part's first and last keys back to back, as `counts` gives their
/// lengths (empty with one master: its part was checked whole).
fn check_seams(state: &MasterState, counts: &[PartCount], ends: &[u8]) -> Result<()> {
    let mut at = 0usize;
    let mut runs = Vec::with_capacity(counts.len());
    for c in counts {
        let (f, l) = (c.ends.0 as usize, c.ends.1 as usize);
        match (c.entries, ends.get(at..at + f + l)) {
            (0, _) => runs.push(None),
            (_, Some(both)) => runs.push(Some(both.split_at(f))),
            (_, None) => runs.push(None),
        }
        at += f + l;
    }
    let Some(i) = first_bad_seam(state.tree.key_order(), &runs) else {
        return Ok(());
    };
    let record: u64 = counts[..i].iter().map(|c| c.entries).sum();
    let leaves = &state.pages.leaves;
    let pgno = leaves
        .get(leaves.len() * i / counts.len())
        .copied()
        .unwrap_or(0);
    let psize = u64::from(state.db.page_size());
    Err(Error::Corrupt {
        path: state.db.source().path().to_owned(),
        pgno,
        offset: pgno.saturating_mul(psize),
        reason: format!(
            "records {} and {record} are out of key order (where two nodes' shares of the leaves meet)",
            record.saturating_sub(1)
        ),
    })
}

fn encode_pages(p: &TreePages) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 8 * (p.branches.len() + p.leaves.len()));
    out.extend_from_slice(&(p.branches.len() as u64).to_le_bytes());
    for &x in p.branches.iter().chain(&p.leaves) {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

fn decode_pages(b: &[u8]) -> Result<TreePages> {
    let bad = || Error::InvalidArgument("malformed page list from master 0".into());
    let words: Vec<u64> = b
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect();
    let (&nb, rest) = words.split_first().ok_or_else(bad)?;
    if nb as usize > rest.len() {
        return Err(bad());
    }
    Ok(TreePages {
        branches: rest[..nb as usize].to_vec(),
        leaves: rest[nb as usize..].to_vec(),
    })
}
