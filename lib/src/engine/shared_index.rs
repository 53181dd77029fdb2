//! The record index in node-shared memory: one copy per node, built by the
//! node's first rank, read in place by every rank of the node.
//!
//! Layout of the window: `records` entries (24 bytes each), then the keys.

use crate::error::{Error, Result};
use crate::index::RecordEntry;
use crate::mpi_raw::{Comm, SharedWindow};

pub struct SharedIndex {
    window: SharedWindow,
    records: usize,
    key_bytes: usize,
}

const ENTRY: usize = std::mem::size_of::<RecordEntry>();

impl SharedIndex {
    /// Collective over `node`: allocates room for `records` entries and
    /// `key_bytes` of keys on the node's first rank.
    pub fn allocate(node: &Comm, records: usize, key_bytes: usize) -> Result<SharedIndex> {
        let len = records
            .checked_mul(ENTRY)
            .and_then(|n| n.checked_add(key_bytes))
            .ok_or_else(|| Error::ResourceLimit("index size overflows".into()))?;
        let window = SharedWindow::allocate(node, len)?;
        if window.as_ptr() as usize % std::mem::align_of::<RecordEntry>() != 0 {
            return Err(Error::ResourceLimit(
                "shared window is not 8-byte aligned".into(),
            ));
        }
        Ok(SharedIndex {
            window,
            records,
            key_bytes,
        })
    }

    pub fn len(&self) -> usize {
        self.records
    }

    pub fn window(&self) -> &SharedWindow {
        &self.window
    }

    /// The entries and key regions, writable, for the node's first rank
    /// while it fills them.
    ///
    /// # Safety
    /// Only the node's first rank may call this, and only before the index
    /// is published (synced and agreed); no other rank reads it meanwhile.
    pub unsafe fn regions_mut(&mut self) -> (&mut [u8], &mut [u8]) {
        // SAFETY: forwarded to the caller's contract.
        let bytes = unsafe { self.window.bytes_mut() };
        let (entries, rest) = bytes.split_at_mut(self.records * ENTRY);
        (entries, &mut rest[..self.key_bytes])
    }

    pub fn entries(&self) -> &[RecordEntry] {
        // SAFETY: the window holds `records` entries from offset 0, checked
        // 8-byte aligned in allocate; RecordEntry is repr(C) integers with no
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
    #[test]
    fn record_entry_has_no_padding() {
        assert_eq!(super::ENTRY, 24);
    }
}
