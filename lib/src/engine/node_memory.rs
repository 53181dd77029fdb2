//! The node's shared memory: one window holding the record index (one
//! copy per node, written by the node's first rank, read in place by every
//! rank) followed by the value area that rounds are read into.
//!
//! Layout: `records` entries (24 bytes each), the keys, padding to a page,
//! then `data_len` bytes of values.

use crate::error::{Error, Result};
use crate::index::RecordEntry;
use crate::mpi_raw::SharedWindow;

const ENTRY: usize = std::mem::size_of::<RecordEntry>();
const PAGE: usize = 4096;

/// Bytes of window an index of `records` entries and `key_bytes` of keys
/// followed by `data_len` bytes of values needs, and where the values start.
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
    let total = data_offset.checked_add(data_len).ok_or_else(overflow)?;
    Ok((data_offset, total))
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
        let (data_offset, total) = layout(records, key_bytes, data_len)?;
        if window.len() < total {
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
        assert_eq!(layout(0, 0, 10).unwrap(), (0, 10));
        assert_eq!(layout(1, 1, 10).unwrap(), (4096, 4106));
        assert_eq!(layout(170, 16, 0).unwrap(), (4096, 4096));
        assert_eq!(layout(171, 0, 1).unwrap(), (8192, 8193));
        assert!(layout(usize::MAX / 8, 0, 0).is_err());
    }
}
