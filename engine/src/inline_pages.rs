//! Inline values served from the leaf pages the index scan read.
//!
//! On a database of small records the leaf pages are the data: the scan
//! reads them all to build the index, and reading them again for the
//! values read the file twice, in smaller pieces. Each node's first rank
//! keeps the leaf pages of its share of the scan that hold inline values
//! (up to [`crate::EngineOptions::inline_pages_bytes`]) in the node's
//! window, and a record whose value lies in a kept page is served from
//! there with no read; the rest (overflow values, records in pages another
//! node scanned or beyond the budget) are planned and read as before. See
//! docs/design/inline-records.md.

use super::node_memory::{index_offset_unkept, KeptSpace, NodeMemory};
use crate::mpi_raw::SharedWindow;
use lmdbio_core::error::{Error, Result};
use lmdbio_core::index::{KeptLeaves, RecordEntry};

/// Publishes `kept` in the node's window: its table, sorted by page
/// number, and the pages held in private memory copied into the slots
/// after the ones the scan placed there (see
/// [`lmdbio_core::index::parse_leaves_keeping`]). Only on the node's first
/// rank, before the index is published.
pub(crate) fn publish_kept(memory: &mut NodeMemory, kept: &KeptLeaves) -> Result<()> {
    let space = memory.kept_space();
    if kept.is_empty() {
        if space.pages > 0 {
            // SAFETY: as for the index: the node's first rank, before
            // publication (the caller's contract).
            let (table, _) = unsafe { memory.kept_regions_mut() };
            table[0] = 0;
        }
        return Ok(());
    }
    if kept.len() > space.pages || kept.page_size() != space.page_size {
        return Err(Error::Internal(format!(
            "{} kept pages of {} bytes in room for {} of {}",
            kept.len(),
            kept.page_size(),
            space.pages,
            space.page_size
        )));
    }
    let placed = kept.placed().len();
    let mut order: Vec<(u64, u64)> = kept
        .placed()
        .iter()
        .copied()
        .chain(kept.held().map(|(pgno, _)| pgno))
        .enumerate()
        .map(|(slot, pgno)| (pgno, slot as u64))
        .collect();
    order.sort_unstable();
    // SAFETY: gather_into runs on the node's first rank before the index
    // is published (the other ranks wait in the agreement that follows).
    let (table, pages) = unsafe { memory.kept_regions_mut() };
    table[0] = order.len() as u64;
    for (i, (pgno, slot)) in order.into_iter().enumerate() {
        table[1 + 2 * i] = pgno;
        table[2 + 2 * i] = slot;
    }
    let psize = space.page_size;
    for (i, (_, bytes)) in kept.held().enumerate() {
        let slot = placed + i;
        pages[slot * psize..(slot + 1) * psize].copy_from_slice(bytes);
    }
    Ok(())
}

/// What of `window` a master may write during the scan: from where the
/// index lies when no leaf page is kept (a saved index is decoded there,
/// see `saved_index`) to the window's end; the kept pages' place lies in
/// it ([`keep_area`]). Empty when there is no window yet (the scan then
/// holds its pages, or the saved index, in private memory until the
/// window is made).
///
/// # Safety
/// Only the node's first rank may call this, while no engine uses the
/// window and the node's other ranks wait (as they do during the scan);
/// the slice must be dropped before the window is.
pub(crate) unsafe fn scan_area(window: Option<&mut SharedWindow>, words: usize) -> &mut [u8] {
    let Some(window) = window else {
        return &mut [];
    };
    let at = index_offset_unkept(words);
    // SAFETY: forwarded to the caller's contract.
    let bytes = unsafe { window.bytes_mut() };
    match bytes.get_mut(at..) {
        Some(area) => area,
        None => &mut [],
    }
}

/// The kept pages' place in `area` (a [`scan_area`]; see
/// [`kept_area_offset`](crate::node_memory::kept_area_offset): the first
/// page boundary of memory in it), at most
/// `budget` bytes or to its end.
pub(crate) fn keep_area(area: &mut [u8], budget: u64) -> &mut [u8] {
    let page = 4096;
    let skip = (page - area.as_ptr() as usize % page) % page;
    let room = area
        .len()
        .saturating_sub(skip)
        .min(usize::try_from(budget).unwrap_or(usize::MAX));
    match area.get_mut(skip..skip + room) {
        Some(keep) => keep,
        None => &mut [],
    }
}

/// Bytes of leaf pages a master keeps: `option`, but at most half of the
/// window the node has (`have`) or `prepare` makes. Kept pages beyond the
/// window's room made it anew at open, and its fresh memory cost more to
/// fault in than reading the pages again (see
/// docs/design/inline-records.md).
pub(crate) fn scan_budget(option: u64, window_bytes: usize, have: usize) -> u64 {
    let window = have.max(window_bytes.saturating_add(super::topology::INDEX_ALLOWANCE));
    option.min(window as u64 / 2)
}

/// The room a node makes for `pages` kept pages of `page_size` bytes.
pub(crate) fn space(pages: usize, page_size: u32) -> KeptSpace {
    KeptSpace {
        pages,
        page_size: page_size as usize,
    }
}

/// Finds values in the kept pages, remembering the last page looked up:
/// a round's records come mostly in key order, many to a page, and a
/// search of the table per record was a visible part of serving them.
pub(crate) struct KeptLookup<'m> {
    memory: &'m NodeMemory,
    psize: u64,
    last: Option<(u64, Option<usize>)>,
}

impl<'m> KeptLookup<'m> {
    pub(crate) fn new(memory: &'m NodeMemory) -> Self {
        let kept = memory.kept_space();
        KeptLookup {
            memory,
            // No page kept (a saved index): a page size of 0 finds none
            // without working out each record's page.
            psize: if kept.pages == 0 {
                0
            } else {
                kept.page_size as u64
            },
            last: None,
        }
    }

    /// Whether the node keeps any page (else [`KeptLookup::value`] finds
    /// none).
    pub(crate) fn keeps_pages(&self) -> bool {
        self.psize != 0
    }

    /// Where `entry`'s value lies in the value area, if it is served from
    /// a kept page: `(offset, length)`.
    pub(crate) fn value(&mut self, entry: &RecordEntry) -> Option<(u64, u64)> {
        let pgno = entry.inline_page(self.psize)?;
        let page = match self.last {
            Some((p, found)) if p == pgno => found,
            _ => {
                let found = self.memory.kept_page(pgno);
                self.last = Some((pgno, found));
                found
            }
        }?;
        Some((
            page as u64 + (entry.value_offset - pgno * self.psize),
            u64::from(entry.value_len),
        ))
    }
}

/// The value area to lay out: `data_len`, or less when that lets a
/// window of `have` bytes (needing `need` with `data_len`) hold the kept
/// pages as well, and the area left still takes [`ROUND_VALUE_BYTES`]
/// (or `data_len` if less). Making a window anew at open, and faulting in
/// its fresh memory, cost more than the kept pages saved (see
/// docs/design/inline-records.md); most records are served from the kept
/// pages, and rounds of the others are cut to the area left.
pub(crate) fn fit_values(data_len: usize, need: usize, have: usize, kept: KeptSpace) -> usize {
    if kept.pages == 0 || need <= have {
        return data_len;
    }
    let short = need - have;
    let floor = data_len.min(ROUND_VALUE_BYTES as usize);
    match data_len.checked_sub(short) {
        Some(left) if left >= floor => left,
        _ => data_len,
    }
}

/// Bytes of values a round should hold at least: rounds of a fixed number
/// of steps hold almost nothing when records are small, and each round
/// costs an agreement and a plan.
pub const ROUND_VALUE_BYTES: u64 = 16 << 20;

/// Steps per round: `prefetch`, or more where values are small enough to
/// sit in leaf pages (the average at most half a page) and pages are kept
/// (`inline_pages_bytes` > 0), and that many steps of every rank on the
/// node hold less than [`ROUND_VALUE_BYTES`] of values of the average size
/// (counted as at least [`SMALLEST_RECORD`] bytes, which bounds the
/// records a round plans). Overflow values keep `prefetch` as asked: their
/// rounds are real reads, and `prefetch` bounds how far a job reads ahead.
/// Every input is the same on every rank, so every rank plans the same
/// rounds.
pub(crate) fn round_steps(
    prefetch: usize,
    batch: usize,
    node_ranks: usize,
    (records, value_bytes): (u64, u64),
    (page_size, inline_pages_bytes): (u32, u64),
) -> usize {
    let average = value_bytes / records.max(1);
    if inline_pages_bytes == 0 || average > u64::from(page_size) / 2 {
        return prefetch;
    }
    let per_step = average
        .max(SMALLEST_RECORD)
        .saturating_mul(batch as u64)
        .saturating_mul(node_ranks as u64);
    let wanted = ROUND_VALUE_BYTES.div_ceil(per_step.max(1));
    prefetch.max(wanted as usize)
}

/// See [`round_steps`].
const SMALLEST_RECORD: u64 = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_of_small_records_take_more_steps_and_large_ones_prefetch() {
        // 100-byte values, batch 64, one rank: 16 MiB in 2622 steps.
        let kept = (4096, 1 << 30);
        assert_eq!(round_steps(16, 64, 1, (1000, 100_000), kept), 2622);
        // Pages not kept: the rounds are reads, prefetch bounds them.
        assert_eq!(round_steps(16, 64, 1, (1000, 100_000), (4096, 0)), 16);
        // 3000-byte values live in overflow pages: prefetch as asked.
        assert_eq!(round_steps(2, 4, 4, (400, 1_200_000), kept), 2);
        // 100 kB values: prefetch.
        assert_eq!(round_steps(16, 64, 1, (10, 1_000_000), kept), 16);
        // An empty database or zero-length values stay bounded.
        assert_eq!(round_steps(16, 64, 2, (0, 0), kept), 8192);
    }

    #[test]
    fn masters_keep_at_most_half_the_window() {
        let mib = 1 << 20;
        assert_eq!(scan_budget(1 << 30, 256 * mib, 0), 160 * mib as u64);
        assert_eq!(
            scan_budget(1 << 30, 256 * mib, 1024 * mib),
            512 * mib as u64
        );
        assert_eq!(scan_budget(0, 256 * mib, 1024 * mib), 0);
    }

    #[test]
    fn the_value_area_shrinks_to_fit_a_window_only_while_a_round_fits() {
        let kept = space(10, 4096);
        let mib = 1 << 20;
        // Fits already, or nothing kept: unchanged.
        assert_eq!(fit_values(256 * mib, 300 * mib, 320 * mib, kept), 256 * mib);
        assert_eq!(
            fit_values(256 * mib, 400 * mib, 320 * mib, space(0, 4096)),
            256 * mib
        );
        // 80 MiB short: the area gives them up.
        assert_eq!(fit_values(256 * mib, 400 * mib, 320 * mib, kept), 176 * mib);
        // Not below a round's worth: the window is made anew instead.
        assert_eq!(fit_values(20 * mib, 400 * mib, 320 * mib, kept), 20 * mib);
        assert_eq!(fit_values(8 * mib, 9 * mib, 8 * mib, kept), 8 * mib);
    }
}
