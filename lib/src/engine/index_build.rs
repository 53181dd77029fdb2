//! Building the record index across nodes: the first rank of each node (a
//! "master") takes part; the tree's upper levels are read once by master 0
//! and broadcast, the leaf pages are split among the masters, and the parts
//! are gathered into every node's shared index.

use super::agree::{agree_ok, local};
use super::data_file::{DataFile, DataSource};
use super::node_memory::{entries_as_bytes, NodeMemory};
use crate::database::{Database, Tree};
use crate::error::{Error, Result};
use crate::index::{check_index, parse_leaves, walk_tree, IndexOptions, IndexPart, TreePages};
use crate::mpi_raw::Comm;
use crate::source::{IoSnapshot, ReadAt};

/// The tree scanned, before the node's shared index exists.
pub(crate) struct ScannedIndex<'f> {
    /// On masters: the database and this master's part of the index.
    state: Option<MasterState<'f>>,
    /// Entries and key bytes of each master's part (on masters).
    counts: Vec<(u64, u64)>,
    pub records: usize,
    pub key_bytes: usize,
    pub page_size: u32,
    /// Transaction id of the meta page read (identifies the snapshot).
    pub txnid: u64,
    /// The longest span a record's value covers in the file.
    pub largest_span: u64,
    /// Granule to plan reads in (bytes; see `DataFile::plan_granule`):
    /// the largest any master's reader asked for, so every node plans
    /// alike.
    pub plan_granule: u64,
}

/// What a master holds after opening the tree: the database, the tree,
/// (on master 0 only) its pages, and its reader's plan granule.
type OpenedTree<'f> = (Database<DataSource<'f>>, Tree, Option<TreePages>, u64);

struct MasterState<'f> {
    db: Database<DataSource<'f>>,
    tree: Tree,
    pages: TreePages,
    part: IndexPart,
    /// See `ScannedIndex::plan_granule`.
    granule: u64,
}

/// Reads the tree and sizes the index. Collective over `world`. `masters`
/// and `file` are present on masters (every master is a reader).
pub(crate) fn scan<'f>(
    world: &Comm,
    masters: Option<&Comm>,
    file: Option<&'f DataFile>,
    subdb: Option<&str>,
) -> Result<ScannedIndex<'f>> {
    // Phase 1: open the tree and read its upper levels once.
    let opened = agree_ok(world, local(|| open_tree(masters, file, subdb)))?;
    // Phase 2: share the page lists and parse this master's leaves.
    let state = agree_ok(world, local(|| parse_share(masters, opened)))?;

    // Phase 3: sizes to everyone.
    let mut sizes = [0i64; 6];
    let mut counts = Vec::new();
    if let (Some(m), Some(state)) = (masters, &state) {
        let largest = state
            .part
            .entries
            .iter()
            .map(|e| e.span().1)
            .max()
            .unwrap_or(0);
        let all = m.allgather_i64(&[
            state.part.entries.len() as i64,
            state.part.keys.len() as i64,
            largest as i64,
            state.granule as i64,
        ])?;
        counts = all
            .chunks(4)
            .map(|c| (c[0] as u64, c[1] as u64))
            .collect::<Vec<_>>();
        sizes = [
            counts.iter().map(|c| c.0).sum::<u64>() as i64,
            counts.iter().map(|c| c.1).sum::<u64>() as i64,
            state.db.page_size() as i64,
            state.db.meta().mm_txnid as i64,
            all.chunks(4).map(|c| c[2]).max().unwrap_or(0),
            all.chunks(4).map(|c| c[3]).max().unwrap_or(1),
        ];
    }
    // World rank 0 is node rank 0 of its node, hence a master.
    world.bcast_i64(0, &mut sizes)?;
    Ok(ScannedIndex {
        state,
        counts,
        records: sizes[0] as usize,
        key_bytes: sizes[1] as usize,
        page_size: sizes[2] as u32,
        txnid: sizes[3] as u64,
        largest_span: sizes[4] as u64,
        plan_granule: (sizes[5] as u64).max(1),
    })
}

/// Gathers the masters' parts into the node's shared index (laid out in
/// `memory` for `scanned`'s sizes) and publishes it. Collective over
/// `world`; returns the reads this rank made for the index.
pub(crate) fn publish(
    world: &Comm,
    masters: Option<&Comm>,
    memory: &mut NodeMemory,
    scanned: ScannedIndex,
) -> Result<IoSnapshot> {
    let mut io = IoSnapshot::default();
    let gathered = match (masters, scanned.state) {
        (Some(m), Some(state)) => {
            io = state.db.source().counters();
            local(|| gather_into(m, memory, &scanned.counts, state))
        }
        _ => Ok(()),
    };
    let published = gathered.and_then(|()| memory.sync());
    agree_ok(world, published)?;
    memory.sync()?;
    Ok(io)
}

fn open_tree<'f>(
    masters: Option<&Comm>,
    file: Option<&'f DataFile>,
    subdb: Option<&str>,
) -> Result<Option<OpenedTree<'f>>> {
    let (Some(m), Some(file)) = (masters, file) else {
        return Ok(None);
    };
    let db = Database::from_source(file.source())?;
    // Fails here, agreed by every rank, for a file that direct reads were
    // required for but cannot serve.
    let granule = file.plan_granule(db.page_size() as u64)?;
    let tree = db.tree(subdb)?;
    let pages = if m.rank() == 0 {
        Some(walk_tree(&db, &tree, IndexOptions::default().chunk_pages)?)
    } else {
        None
    };
    Ok(Some((db, tree, pages, granule)))
}

fn parse_share<'f>(
    masters: Option<&Comm>,
    opened: Option<OpenedTree<'f>>,
) -> Result<Option<MasterState<'f>>> {
    let (Some(m), Some((db, tree, pages, granule))) = (masters, opened) else {
        return Ok(None);
    };
    let mut bytes = pages.as_ref().map(encode_pages).unwrap_or_default();
    m.bcast_bytes(0, &mut bytes)?;
    let pages = decode_pages(&bytes)?;
    let n = pages.leaves.len();
    let (lo, hi) = (n * m.rank() / m.size(), n * (m.rank() + 1) / m.size());
    // One thread: MPI may only be called from the thread driving us.
    let options = IndexOptions {
        threads: 1,
        ..Default::default()
    };
    let part = parse_leaves(&db, &tree, &pages.leaves[lo..hi], &options)?;
    Ok(Some(MasterState {
        db,
        tree,
        pages,
        part,
        granule,
    }))
}

/// Gathers every master's part into this node's shared index and checks
/// the whole.
fn gather_into(
    masters: &Comm,
    index: &mut NodeMemory,
    counts: &[(u64, u64)],
    mut state: MasterState,
) -> Result<()> {
    let key_base: u64 = counts[..masters.rank()].iter().map(|c| c.1).sum();
    for e in &mut state.part.entries {
        e.key_start += key_base;
    }
    let entry_counts: Vec<u64> = counts.iter().map(|c| c.0 * 24).collect();
    let key_counts: Vec<u64> = counts.iter().map(|c| c.1).collect();
    {
        // SAFETY: we are the node's first rank and the index is not yet
        // published (the other ranks wait in the agreement that follows).
        let (entries, keys) = unsafe { index.index_regions_mut() };
        if masters.size() == 1 {
            entries.copy_from_slice(entries_as_bytes(&state.part.entries));
            keys.copy_from_slice(&state.part.keys);
        } else {
            masters.allgatherv_bytes(
                entries_as_bytes(&state.part.entries),
                &entry_counts,
                entries,
            )?;
            masters.allgatherv_bytes(&state.part.keys, &key_counts, keys)?;
        }
    }
    check_index(
        &state.db,
        &state.tree,
        &state.pages,
        index.entries(),
        index.keys(),
    )?;
    // Every master has parsed its leaves (the gathers above completed).
    state
        .db
        .source()
        .forget_tree_pages(&state.pages, u64::from(state.db.page_size()));
    Ok(())
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
