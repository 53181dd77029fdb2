//! Parsing leaf pages while keeping those that hold inline values: on a
//! database of small records those pages are the data, and whoever serves
//! the values from them need not read them again (see
//! docs/design/inline-records.md).
//!
//! Given an area of its own (the node's window), the scan reads each chunk
//! of leaf pages straight into it and parses them there: the kept pages
//! are already in their final place, and no private copy is made and
//! touched.

use super::pipeline::{parse_pipelined, Keeping};
use super::{
    consecutive_runs, parse_leaf_batch_into, read_spanning_into, spanned_slots, IndexOptions,
    IndexPart, PageBatch, Pages, PagesIn, RecordEntry, MAX_PAGES_PER_READ,
};
use crate::database::{Database, Tree};
use crate::error::Result;
use crate::source::ReadAt;

/// Leaf pages kept from a scan: those placed in the caller's area (slot
/// `i` holds `placed()[i]`) and those held in private memory (where no
/// area was given), in the order they were kept.
#[derive(Default)]
pub struct KeptLeaves {
    batches: Vec<PageBatch>,
    placed: Vec<u64>,
    /// `(page number, batch holding it)`, in key order.
    held: Vec<(u64, usize)>,
    page_size: usize,
}

impl KeptLeaves {
    /// Pages kept.
    pub fn len(&self) -> usize {
        self.placed.len() + self.held.len()
    }

    /// No page was kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pages in the area's slots `0..placed().len()`, by slot.
    pub fn placed(&self) -> &[u64] {
        &self.placed
    }

    /// The pages kept in private memory: `(page number, bytes)`. They go
    /// in the slots after the placed ones, in this order.
    pub fn held(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.held
            .iter()
            .map(|&(pgno, b)| (pgno, self.batches[b].page(pgno)))
    }

    /// Bytes of each kept page (the file's page size).
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Copies the placed pages out of `area` (the area they were placed
    /// in) into private memory, for when that area goes away before the
    /// pages are published; they then come first among the held ones.
    pub fn hold_placed(&mut self, area: &[u8]) {
        if self.placed.is_empty() {
            return;
        }
        let psize = self.page_size;
        let batch = PageBatch::from_pages(
            psize,
            self.placed
                .iter()
                .enumerate()
                .map(|(slot, &pgno)| (pgno, &area[slot * psize..(slot + 1) * psize])),
        );
        // Every held page's batch index moves up by one.
        for h in &mut self.held {
            h.1 += 1;
        }
        self.batches.insert(0, batch);
        let mut held: Vec<(u64, usize)> = self.placed.drain(..).map(|p| (p, 0)).collect();
        held.append(&mut self.held);
        self.held = held;
    }
}

/// Like [`super::parse_leaves`], keeping (in key order, up to `budget`
/// bytes) the leaf pages that hold at least one inline value, reading
/// `options.chunk_pages` leaves at a time.
///
/// With more than one of `options.threads` and an area (or nothing to
/// keep), this thread reads each chunk while workers parse the ones before
/// and copy their kept pages into the area's next slots (see
/// `pipeline`). On one thread, each chunk is read into the area's next
/// free slots (through the small gaps between its runs, see
/// [`super::read_spanning_into`]) and parsed in place, and the pages not
/// kept (and the gaps) are squeezed out; a chunk that does not fit is read
/// into one reused buffer and its kept pages copied. With an empty `area`,
/// the kept pages are held in the batches they were read into. Keys are
/// held in the part only if `keys`; their order is checked either way,
/// across chunks too (see [`super::OrderCheck`]).
pub fn parse_leaves_keeping<R: ReadAt>(
    db: &Database<R>,
    tree: &Tree,
    leaves: &[u64],
    options: &IndexOptions,
    budget: u64,
    area: &mut [u8],
    keys: bool,
) -> Result<(IndexPart, KeptLeaves)> {
    let psize = db.page_size() as usize;
    let mut part = IndexPart::default();
    let mut kept = KeptLeaves {
        page_size: psize,
        ..Default::default()
    };
    let slots = area.len() / psize;
    let mut room = usize::try_from(budget / psize as u64).unwrap_or(usize::MAX);
    if slots > 0 {
        room = room.min(slots);
    }
    let chunk_pages = options.chunk_pages.clamp(1, 1 << 20);
    let workers = match options.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    if workers > 1 && leaves.len() > chunk_pages && (slots > 0 || room == 0) {
        let keeping = Keeping { area, room, keys };
        let (part, placed) = parse_pipelined(db, tree, leaves, (chunk_pages, workers), keeping)?;
        kept.placed = placed;
        return Ok((part, kept));
    }
    let mut scratch = Vec::new();
    let mut sorted = Vec::new();
    let mut at = Vec::new();
    let mut chunks = leaves.chunks(chunk_pages).peekable();
    let mut done = 0;
    while let Some(pgnos) = chunks.next() {
        sorted.clear();
        sorted.extend_from_slice(pgnos);
        sorted.sort_unstable();
        let span = spanned_slots(&sorted);
        let bytes = span * psize;
        let next = kept.placed.len();
        let before = part.entries.len();
        // Read, then (while the storage fetches the next chunk) parse.
        let following = chunks.peek().copied();
        let read = |dest: &mut [u8], at: &mut Vec<usize>| -> Result<()> {
            read_spanning_into(db.source(), psize as u32, &sorted, dest, at)?;
            if let Some(following) = following {
                advise(db.source(), psize as u64, following);
            }
            Ok(())
        };
        if slots > 0 && room > 0 && next + span <= slots {
            let dest = &mut area[next * psize..next * psize + bytes];
            read(dest, &mut at)?;
            let in_place = PagesIn {
                pgnos: &sorted,
                slots: Some(&at),
                bytes: dest,
                psize,
            };
            parse_leaf_batch_into(db, tree, pgnos, &in_place, (&mut part, keys))?;
            let mut keep = inline_pages(&part.entries[before..], psize as u64, room);
            room -= keep.len();
            keep.sort_unstable();
            // `keep` is a sorted subset of `sorted`, whose slots ascend
            // from 0: the k-th kept page sits at slot k or later, so moving
            // them down in order never overwrites one still to move.
            for (k, pgno) in keep.into_iter().enumerate() {
                let from = at[sorted.partition_point(|&p| p < pgno)];
                if from != k {
                    let from = (next + from) * psize;
                    area.copy_within(from..from + psize, (next + k) * psize);
                }
                kept.placed.push(pgno);
            }
        } else if slots > 0 || room == 0 {
            if scratch.len() < bytes {
                scratch.resize(bytes, 0);
            }
            read(&mut scratch[..bytes], &mut at)?;
            let pages = PagesIn {
                pgnos: &sorted,
                slots: Some(&at),
                bytes: &scratch[..bytes],
                psize,
            };
            parse_leaf_batch_into(db, tree, pgnos, &pages, (&mut part, keys))?;
            let keep = inline_pages(&part.entries[before..], psize as u64, room);
            room -= keep.len();
            for pgno in keep {
                let slot = kept.placed.len();
                area[slot * psize..(slot + 1) * psize].copy_from_slice(pages.page(pgno));
                kept.placed.push(pgno);
            }
        } else {
            let batch = PageBatch::read(db.source(), psize as u32, &sorted)?;
            if let Some(following) = following {
                advise(db.source(), psize as u64, following);
            }
            parse_leaf_batch_into(db, tree, pgnos, &batch, (&mut part, keys))?;
            let keep = inline_pages(&part.entries[before..], psize as u64, room);
            room -= keep.len();
            if !keep.is_empty() {
                let b = kept.batches.len();
                kept.held.extend(keep.into_iter().map(|p| (p, b)));
                kept.batches.push(batch);
            }
        }
        done += pgnos.len();
        if done == pgnos.len() {
            reserve_like(&mut part, done, leaves.len());
        }
    }
    Ok((part, kept))
}

/// Makes room in `part` (parsed from the first `done` of `total` pages)
/// for all of them at the density seen so far, plus a little: growing it
/// by doubling copies it and faults fresh memory in each time.
pub(super) fn reserve_like(part: &mut IndexPart, done: usize, total: usize) {
    let scale = |n: usize| (n / done.max(1)).saturating_mul(total).saturating_add(n) / 16 * 17;
    part.entries
        .reserve(scale(part.entries.len()).saturating_sub(part.entries.len()));
    part.keys
        .reserve(scale(part.keys.len()).saturating_sub(part.keys.len()));
}

/// Tells `source` that `pgnos` will be read next.
pub(super) fn advise<R: ReadAt + ?Sized>(source: &R, psize: u64, pgnos: &[u64]) {
    let mut sorted = pgnos.to_vec();
    sorted.sort_unstable();
    let ranges: Vec<(u64, u64)> = consecutive_runs(&sorted, MAX_PAGES_PER_READ)
        .map(|r| (sorted[r.start] * psize, r.len() as u64 * psize))
        .collect();
    source.will_need(&ranges);
}

/// The first `room` pages (in key order) holding an inline value among
/// `entries` (in key order).
pub(super) fn inline_pages(entries: &[RecordEntry], psize: u64, room: usize) -> Vec<u64> {
    let mut pages: Vec<u64> = Vec::new();
    for pgno in entries.iter().filter_map(|e| e.inline_page(psize)) {
        if pages.last() != Some(&pgno) {
            if pages.len() == room {
                break;
            }
            pages.push(pgno);
        }
    }
    pages
}
