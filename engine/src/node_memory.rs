//! The node's shared memory: one window holding the record index (one
//! copy per node, written by the node's first rank, read in place by every
//! rank) followed by the value area that rounds are read into.
//!
//! Layout: the readers' progress words (8 bytes each, see
//! [`super::step_ready`]); when leaf pages are kept, padding to a page of
//! memory and the kept leaf pages (padded to 2 MiB); `records` entries (24
//! bytes each), the keys, the table of kept leaf pages (see
//! [`KeptSpace`]), padding to a page of memory, then `data_len` bytes of
//! values read in rounds. Pages of memory, not just of the window: direct
//! reads land there, and they need aligned memory; a window of a one-rank
//! node may be plain heap memory that starts anywhere. The kept pages
//! come first because their place ([`kept_area_offset`]) does not depend
//! on the index's size: the index scan reads them straight into it before
//! the index is sized (see docs/design/inline-records.md), and it is the
//! part of the window [`super::prepare`] mapped ahead.
//!
//! The value area, as offsets given to [`NodeMemory::data_range`], is the
//! kept pages (`0..rounds_start()`) followed by the rounds' bytes.

use std::sync::atomic::AtomicU64;

use crate::mpi_raw::SharedWindow;
use lmdbio_core::error::{Error, Result};
use lmdbio_core::index::RecordEntry;

const ENTRY: usize = std::mem::size_of::<RecordEntry>();
const PAGE: usize = 4096;
const WORD: usize = std::mem::size_of::<AtomicU64>();

/// Room for leaf pages kept from the index scan to serve inline values
/// from (docs/design/inline-records.md): a table (a count, then one
/// `(page number, slot)` pair per page, sorted by page number) and the
/// pages, each in its slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeptSpace {
    pub pages: usize,
    pub page_size: usize,
}

impl KeptSpace {
    fn table_bytes(&self) -> Option<usize> {
        match self.pages {
            0 => Some(0),
            n => n.checked_mul(2 * WORD)?.checked_add(WORD),
        }
    }

    /// Bytes of the pages' area (a whole number of 2 MiB).
    fn page_bytes(&self) -> Option<usize> {
        self.pages
            .checked_mul(self.page_size)?
            .checked_next_multiple_of(2 << 20)
    }
}

/// Bytes of window that `words` progress words, `kept` pages, an index of
/// `records` entries and `key_bytes` of keys followed by `data_len` bytes
/// of values need, and the earliest offset the values can start at with
/// the kept pages placed as early as they can be (they and the values
/// start at page boundaries of memory: see [`value_area_offset`]; the size
/// has room for both).
pub fn layout(
    words: usize,
    records: usize,
    key_bytes: usize,
    data_len: usize,
    kept: KeptSpace,
) -> Result<(usize, usize)> {
    let overflow = || Error::ResourceLimit("the index and value area overflow".into());
    let index_at = match kept.pages {
        0 => words.checked_mul(WORD),
        _ => words
            .checked_mul(WORD)
            .and_then(|n| n.checked_next_multiple_of(PAGE))
            .and_then(|n| n.checked_add(kept.page_bytes()?)),
    };
    let index = index_at
        .and_then(|n| n.checked_add(records.checked_mul(ENTRY)?))
        .and_then(|n| n.checked_add(key_bytes))
        .and_then(|n| n.checked_next_multiple_of(WORD))
        .and_then(|n| n.checked_add(kept.table_bytes()?))
        .ok_or_else(overflow)?;
    let data_offset = index
        .div_ceil(PAGE)
        .checked_mul(PAGE)
        .ok_or_else(overflow)?;
    let slack = if kept.pages == 0 { PAGE } else { 2 * PAGE };
    let total = data_offset
        .checked_add(slack)
        .and_then(|n| n.checked_add(data_len))
        .ok_or_else(overflow)?;
    Ok((data_offset, total))
}

/// Where in a window starting at address `base` the values start: the
/// first page boundary of memory at or after `earliest`. Every rank gets
/// the same offset, since a shared mapping starts on a page and so a
/// byte's place within its page is the same in every process.
fn value_area_offset(base: usize, earliest: usize) -> usize {
    earliest + (PAGE - (base + earliest) % PAGE) % PAGE
}

/// Where the kept leaf pages start in a window at address `base` laid out
/// with `words` progress words, whatever the index's size: the node's
/// first rank reads them there during the index scan.
pub fn kept_area_offset(base: usize, words: usize) -> usize {
    value_area_offset(base, words * WORD)
}

/// Where the index starts in a window with `words` progress words when
/// no leaf page is kept: a saved index is decoded there before the
/// window's layout is known.
pub fn index_offset_unkept(words: usize) -> usize {
    words * WORD
}

pub struct NodeMemory {
    window: SharedWindow,
    words: usize,
    records: usize,
    key_bytes: usize,
    /// Window offset of the entries (after the kept pages).
    index_offset: usize,
    data_offset: usize,
    data_len: usize,
    kept: KeptSpace,
    /// Window offset of the kept pages.
    kept_offset: usize,
    /// Bytes of the kept pages' area, at the start of the value area.
    kept_len: usize,
}

impl NodeMemory {
    /// Lays the index and the value area out in `window` (any window at
    /// least [`layout`]'s size).
    pub fn new(
        window: SharedWindow,
        words: usize,
        records: usize,
        key_bytes: usize,
        data_len: usize,
        kept: KeptSpace,
    ) -> Result<NodeMemory> {
        let (_, total) = layout(words, records, key_bytes, data_len, kept)?;
        let base = window.as_ptr() as usize;
        let (kept_offset, kept_len, index_offset) = match kept.pages {
            0 => (0, 0, index_offset_unkept(words)),
            _ => {
                let at = kept_area_offset(base, words);
                let len = kept.page_bytes().unwrap_or(usize::MAX);
                (at, len, at.saturating_add(len))
            }
        };
        let index_end = (index_offset + records * ENTRY + key_bytes).next_multiple_of(WORD)
            + kept.table_bytes().unwrap_or(usize::MAX);
        let data_offset = value_area_offset(base, index_end);
        if window.len() < total || data_offset.saturating_add(data_len) > window.len() {
            return Err(Error::Internal(format!(
                "a {}-byte window cannot hold {total} bytes of index and values",
                window.len()
            )));
        }
        if base % std::mem::align_of::<RecordEntry>() != 0 {
            return Err(Error::ResourceLimit(
                "shared window is not 8-byte aligned".into(),
            ));
        }
        Ok(NodeMemory {
            window,
            words,
            records,
            key_bytes,
            index_offset,
            data_offset,
            data_len,
            kept,
            kept_offset,
            kept_len,
        })
    }

    /// The window, for keeping after the engine (see `topology`).
    pub fn into_window(self) -> SharedWindow {
        self.window
    }

    /// Records in the index.
    pub fn len(&self) -> usize {
        self.records
    }

    /// The entries and key regions, writable, for the node's first rank
    /// while it fills them.
    ///
    /// # Safety
    /// Only the node's first rank may call this, and only before the index
    /// is published (synced and agreed); no other rank reads it meanwhile.
    pub unsafe fn index_regions_mut(&mut self) -> (&mut [u8], &mut [u8]) {
        // SAFETY: forwarded to the caller's contract.
        let bytes = unsafe { &mut self.window.bytes_mut()[self.index_offset..] };
        let (entries, rest) = bytes.split_at_mut(self.records * ENTRY);
        (entries, &mut rest[..self.key_bytes])
    }

    pub fn entries(&self) -> &[RecordEntry] {
        // SAFETY: the window holds `records` entries from offset 0, checked
        // 8-byte aligned in new; RecordEntry is repr(C) integers with no
        // padding, so every bit pattern is a valid value; after publication
        // nobody writes the index, so shared reads are sound.
        unsafe {
            std::slice::from_raw_parts(
                self.window.as_ptr().add(self.index_offset) as *const RecordEntry,
                self.records,
            )
        }
    }

    pub fn keys(&self) -> &[u8] {
        let at = self.index_offset + self.records * ENTRY;
        // SAFETY: the key region follows the entries inside the window and
        // is read-only after publication.
        unsafe { &self.window.bytes()[at..at + self.key_bytes] }
    }

    /// Offset of the kept pages' table (8-byte aligned, after the keys).
    fn kept_table_offset(&self) -> usize {
        (self.index_offset + self.records * ENTRY + self.key_bytes).next_multiple_of(WORD)
    }

    /// The room for kept pages this memory was laid out with.
    pub fn kept_space(&self) -> KeptSpace {
        self.kept
    }

    /// The kept pages' table (as words) and the pages' area, writable,
    /// for the node's first rank while it fills them.
    ///
    /// # Safety
    /// As for [`NodeMemory::index_regions_mut`].
    pub unsafe fn kept_regions_mut(&mut self) -> (&mut [u64], &mut [u8]) {
        let table_at = self.kept_table_offset();
        let words = 1 + 2 * self.kept.pages;
        let pages_at = self.kept_offset;
        let pages_len = self.kept.pages * self.kept.page_size;
        // SAFETY: forwarded to the caller's contract; both regions lie in
        // the window (layout) and do not overlap (the pages end before the
        // index starts, and the table follows the keys).
        unsafe {
            let base = self.window.bytes_mut().as_mut_ptr();
            (
                std::slice::from_raw_parts_mut(base.add(table_at) as *mut u64, words),
                std::slice::from_raw_parts_mut(base.add(pages_at), pages_len),
            )
        }
    }

    /// The kept pages' table as published: `(page number, slot)` pairs
    /// sorted by page number.
    fn kept_table(&self) -> &[u64] {
        if self.kept.pages == 0 {
            return &[];
        }
        // SAFETY: the table lies in the window at an 8-byte aligned offset
        // (layout; the window is 8-byte aligned, checked in new) and is
        // read-only after publication; the count is clamped to the room.
        unsafe {
            let at = self.window.as_ptr().add(self.kept_table_offset()) as *const u64;
            let count = (*at as usize).min(self.kept.pages);
            std::slice::from_raw_parts(at.add(1), 2 * count)
        }
    }

    /// Where leaf page `pgno` lies in the value area (see
    /// [`NodeMemory::data_range`]) if it is kept.
    pub fn kept_page(&self, pgno: u64) -> Option<usize> {
        let table = self.kept_table();
        let n = table.len() / 2;
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match table[2 * mid].cmp(&pgno) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    let slot = table[2 * mid + 1] as usize;
                    return Some(slot * self.kept.page_size);
                }
            }
        }
        None
    }

    /// Progress word `i` (of the `words` given to `new`), shared by the
    /// node's ranks.
    pub fn progress_word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.words, "progress word {i} of {}", self.words);
        // SAFETY: the words lie at the start of the window (8-byte aligned,
        // checked in new), inside it (layout), and are only ever accessed
        // as atomics, which are address-free and so work across the
        // processes that map the window.
        unsafe { &*(self.window.as_ptr() as *const AtomicU64).add(i) }
    }

    /// Zeroes every progress word: the node's first rank does this at open,
    /// before the agreement that publishes the index, so no word left by
    /// an earlier engine on the same window is taken for this one's.
    pub fn reset_progress(&self) {
        for i in 0..self.words {
            self.progress_word(i)
                .store(0, std::sync::atomic::Ordering::Release);
        }
    }

    /// Bytes of the value area that rounds are read into.
    pub fn data_len(&self) -> usize {
        self.data_len
    }

    /// Where in the value area rounds start: after the kept pages.
    pub fn rounds_start(&self) -> usize {
        self.kept_len
    }

    /// See [`SharedWindow::in_huge_pages`].
    pub fn in_huge_pages(&self) -> bool {
        self.window.in_huge_pages()
    }

    /// Where byte `at` of the value area is, for readers that write a
    /// range of the rounds' part (`at` at least [`NodeMemory::rounds_start`])
    /// they alone own until the round is published.
    pub fn rounds_ptr(&self, at: usize) -> *mut u8 {
        let into = at.wrapping_sub(self.kept_len);
        self.window
            .as_ptr()
            .wrapping_add(self.data_offset)
            .wrapping_add(into) as *mut u8
    }

    /// Bytes `[at, at + len)` of the value area, read-only (other parts of
    /// the area may be written meanwhile). The kept leaf pages are its
    /// first bytes (see [`NodeMemory::rounds_start`]); a range lies in them
    /// or in the rounds' part, not across.
    ///
    /// # Safety
    /// No rank may be writing these bytes (the engine's steps ensure it).
    pub unsafe fn data_range(&self, at: usize, len: usize) -> &[u8] {
        let served = self.kept_len + self.data_len;
        let end = at.checked_add(len);
        assert!(
            end.is_some_and(|end| end <= served && (at >= self.kept_len || end <= self.kept_len)),
            "bytes {at}+{len} outside a value area of {}+{}",
            self.kept_len,
            self.data_len
        );
        let offset = match at.checked_sub(self.kept_len) {
            Some(into) => self.data_offset + into,
            None => self.kept_offset + at,
        };
        // SAFETY: inside the kept pages or the rounds' part (checked
        // above), which lie inside the window (checked in new); the caller
        // vouches that nobody writes these bytes while they are borrowed.
        unsafe { std::slice::from_raw_parts(self.window.as_ptr().add(offset), len) }
    }

    /// See [`SharedWindow::sync`].
    pub fn sync(&self) -> Result<()> {
        self.window.sync()
    }
}

/// The bytes of a slice of entries, for sending them over MPI.
pub fn entries_as_bytes(entries: &[RecordEntry]) -> &[u8] {
    // SAFETY: RecordEntry is repr(C) with no padding (8+8+4+2+2 bytes), so
    // its memory is exactly `len * 24` initialised bytes.
    unsafe {
        std::slice::from_raw_parts(
            entries.as_ptr() as *const u8,
            std::mem::size_of_val(entries),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_entry_has_no_padding() {
        assert_eq!(ENTRY, 24);
    }

    #[test]
    fn values_start_on_a_page_after_the_index() {
        // A page of room for placing the values on a page of memory.
        assert_eq!(
            layout(0, 0, 0, 10, KeptSpace::default()).unwrap(),
            (0, 4106)
        );
        assert_eq!(
            layout(0, 1, 1, 10, KeptSpace::default()).unwrap(),
            (4096, 8202)
        );
        assert_eq!(
            layout(0, 170, 16, 0, KeptSpace::default()).unwrap(),
            (4096, 8192)
        );
        assert_eq!(
            layout(0, 171, 0, 1, KeptSpace::default()).unwrap(),
            (8192, 12289)
        );
        // Progress words come first: 2 words + 170 entries + 1 key byte
        // need 4097 bytes.
        assert_eq!(
            layout(2, 170, 0, 0, KeptSpace::default()).unwrap(),
            (4096, 8192)
        );
        assert_eq!(
            layout(2, 170, 1, 0, KeptSpace::default()).unwrap(),
            (8192, 12288)
        );
        assert!(layout(0, usize::MAX / 8, 0, 0, KeptSpace::default()).is_err());
        assert!(layout(usize::MAX / 4, 0, 0, 0, KeptSpace::default()).is_err());
        // Kept pages: first, on a page, padded to 2 MiB (a page of room
        // to place them on a page of memory); a count and a pair per page
        // after the keys (8-byte aligned).
        let kept = KeptSpace {
            pages: 3,
            page_size: 4096,
        };
        assert_eq!(
            layout(0, 1, 1, 10, kept).unwrap(),
            ((2 << 20) + 4096, (2 << 20) + 12298)
        );
        assert_eq!(
            layout(0, 170, 0, 0, kept).unwrap(),
            ((2 << 20) + 8192, (2 << 20) + 16384)
        );
        assert!(layout(
            0,
            0,
            0,
            0,
            KeptSpace {
                pages: usize::MAX / 8,
                page_size: 1
            }
        )
        .is_err());
    }

    #[test]
    fn values_start_on_a_page_of_memory_within_the_room_left() {
        for base in [0usize, 16, 4080, 4096, 1 << 30, (1 << 30) + 48] {
            for earliest in [0usize, 4096, 8192] {
                let at = value_area_offset(base, earliest);
                assert_eq!((base + at) % PAGE, 0, "base {base} earliest {earliest}");
                assert!(at >= earliest && at < earliest + PAGE);
            }
        }
    }
}
