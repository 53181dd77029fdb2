//! The node's shared memory: one window holding the record index (one
//! copy per node, written by the node's first rank, read in place by every
//! rank) followed by the value area that rounds are read into.
//!
//! Layout: `records` entries (24 bytes each), the keys, padding to a page
//! of memory (not just of the window: direct reads land there, and they
//! need aligned memory; a window of a one-rank node may be plain heap
//! memory that starts anywhere), then `data_len` bytes of values.

use crate::error::{Error, Result};
use crate::index::RecordEntry;
use crate::mpi_raw::SharedWindow;

const ENTRY: usize = std::mem::size_of::<RecordEntry>();
const PAGE: usize = 4096;

/// Bytes of window an index of `records` entries and `key_bytes` of keys
/// followed by `data_len` bytes of values needs, and the earliest offset
/// the values can start at (they start at the first page boundary of
/// memory from there: see [`value_area_offset`]; the size has room for
/// it).
pub fn layout(records: usize, key_bytes: usize, data_len: usize) -> Result<(usize, usize)> {
    let overflow = || Error::ResourceLimit("the index and value area overflow".into());
    let index = records
        .checked_mul(ENTRY)
        .and_then(|n| n.checked_add(key_bytes))
        .ok_or_else(overflow)?;
    let data_offset = index
        .div_ceil(PAGE)
        .checked_mul(PAGE)
        .ok_or_else(overflow)?;
    let total = data_offset
        .checked_add(PAGE)
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

pub struct NodeMemory {
    window: SharedWindow,
    records: usize,
    key_bytes: usize,
    data_offset: usize,
    data_len: usize,
}

impl NodeMemory {
    /// Lays the index and the value area out in `window` (any window at
    /// least [`layout`]'s size).
    pub fn new(
        window: SharedWindow,
        records: usize,
        key_bytes: usize,
        data_len: usize,
    ) -> Result<NodeMemory> {
        let (earliest, total) = layout(records, key_bytes, data_len)?;
        let data_offset = value_area_offset(window.as_ptr() as usize, earliest);
        if window.len() < total || data_offset + data_len > window.len() {
            return Err(Error::Internal(format!(
                "a {}-byte window cannot hold {total} bytes of index and values",
                window.len()
            )));
        }
        if window.as_ptr() as usize % std::mem::align_of::<RecordEntry>() != 0 {
            return Err(Error::ResourceLimit(
                "shared window is not 8-byte aligned".into(),
            ));
        }
        Ok(NodeMemory {
            window,
            records,
            key_bytes,
            data_offset,
            data_len,
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
        let bytes = unsafe { self.window.bytes_mut() };
        let (entries, rest) = bytes.split_at_mut(self.records * ENTRY);
        (entries, &mut rest[..self.key_bytes])
    }

    pub fn entries(&self) -> &[RecordEntry] {
        // SAFETY: the window holds `records` entries from offset 0, checked
        // 8-byte aligned in new; RecordEntry is repr(C) integers with no
        // padding, so every bit pattern is a valid value; after publication
        // nobody writes the index, so shared reads are sound.
        unsafe {
            std::slice::from_raw_parts(self.window.as_ptr() as *const RecordEntry, self.records)
        }
    }

    pub fn keys(&self) -> &[u8] {
        // SAFETY: the key region follows the entries inside the window and
        // is read-only after publication.
        unsafe { &self.window.bytes()[self.records * ENTRY..self.records * ENTRY + self.key_bytes] }
    }

    /// Bytes of the value area.
    pub fn data_len(&self) -> usize {
        self.data_len
    }

    /// Start of the value area, for readers that write a range of it they
    /// alone own until the round is published.
    pub fn data_ptr(&self) -> *mut u8 {
        self.window.as_ptr().wrapping_add(self.data_offset) as *mut u8
    }

    /// The value area, read-only.
    ///
    /// # Safety
    /// No rank may be writing the bytes read (the engine's steps ensure
    /// it).
    pub unsafe fn data(&self) -> &[u8] {
        // SAFETY: forwarded to the caller's contract; the area lies inside
        // the window (checked in new).
        unsafe { &self.window.bytes()[self.data_offset..self.data_offset + self.data_len] }
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
        assert_eq!(layout(0, 0, 10).unwrap(), (0, 4106));
        assert_eq!(layout(1, 1, 10).unwrap(), (4096, 8202));
        assert_eq!(layout(170, 16, 0).unwrap(), (4096, 8192));
        assert_eq!(layout(171, 0, 1).unwrap(), (8192, 12289));
        assert!(layout(usize::MAX / 8, 0, 0).is_err());
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
