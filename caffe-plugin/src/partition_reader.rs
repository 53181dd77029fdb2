//! One rank's contiguous share of a database, read record by record in key
//! order, wrapping like liblmdb's cursor: after the last record of the share
//! the reader is no longer valid until `seek_to_first`.
//!
//! Values are read ahead in chunks of about [`CHUNK_BYTES`] with lmdbio's
//! coalesced positioned reads, so a cursor that Caffe advances one record at
//! a time still issues few large requests.

use std::path::Path;

use lmdbio::schedule::contiguous_block;
use lmdbio::values::{read_values, ValueBatch};
use lmdbio::{CoalesceOptions, Database, Error, IndexOptions, RecordIndex, Result};

/// Bytes of values read per request round.
pub const CHUNK_BYTES: u64 = 4 << 20;
/// Records per round at most (small values).
pub const CHUNK_RECORDS: usize = 4096;

pub struct PartitionReader {
    db: Database,
    index: RecordIndex,
    /// Ordinal of the share's first record.
    first: usize,
    /// Records in the share.
    count: usize,
    /// Position within the share; `count` means past the end.
    pos: usize,
    /// Position of `chunk`'s first value within the share.
    chunk_start: usize,
    chunk: Option<ValueBatch>,
}

impl PartitionReader {
    /// Opens `path` and selects rank `rank`'s block of `ranks` (the same
    /// split as the engine's contiguous partition).
    pub fn open(path: &Path, rank: u64, ranks: u64) -> Result<PartitionReader> {
        if ranks == 0 || rank >= ranks {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} of {ranks} ranks"
            )));
        }
        let db = Database::open(path)?;
        let tree = db.main_tree()?;
        let index = db.build_index(&tree, &IndexOptions::default())?;
        let (first, count) = contiguous_block(index.len() as u64, ranks, rank);
        if count == 0 {
            return Err(Error::InvalidArgument(format!(
                "{}: {} records cannot give each of {ranks} ranks one",
                path.display(),
                index.len()
            )));
        }
        Ok(PartitionReader {
            db,
            index,
            first: first as usize,
            count: count as usize,
            pos: 0,
            chunk_start: 0,
            chunk: None,
        })
    }

    /// Records in the whole database.
    pub fn records(&self) -> usize {
        self.index.len()
    }

    /// `(first ordinal, records)` of this rank's share.
    pub fn share(&self) -> (usize, usize) {
        (self.first, self.count)
    }

    pub fn valid(&self) -> bool {
        self.pos < self.count
    }

    pub fn seek_to_first(&mut self) {
        self.pos = 0;
    }

    pub fn next(&mut self) {
        if self.pos < self.count {
            self.pos += 1;
        }
    }

    /// Ordinal (position in key order) of the current record.
    pub fn ordinal(&self) -> Option<usize> {
        self.valid().then(|| self.first + self.pos)
    }

    pub fn key(&self) -> Option<&[u8]> {
        self.ordinal().map(|i| self.index.key(i))
    }

    /// The current record's value, reading the chunk that holds it if needed.
    pub fn value(&mut self) -> Result<Option<&[u8]>> {
        if !self.valid() {
            return Ok(None);
        }
        let in_chunk = self
            .chunk
            .as_ref()
            .is_some_and(|c| (self.chunk_start..self.chunk_start + c.len()).contains(&self.pos));
        if !in_chunk {
            self.chunk = None;
            let ordinals = self.chunk_ordinals();
            self.chunk = Some(read_values(
                &self.db,
                &self.index,
                &ordinals,
                CoalesceOptions::default(),
            )?);
            self.chunk_start = self.pos;
        }
        let chunk = self.chunk.as_ref().expect("chunk just read");
        Ok(Some(chunk.value(self.pos - self.chunk_start)))
    }

    /// Ordinals from the current position up to about `CHUNK_BYTES` of
    /// values (at least one record), within the share.
    fn chunk_ordinals(&self) -> Vec<usize> {
        let end = self.first + self.count;
        let mut bytes = 0u64;
        let mut ordinals = Vec::new();
        for i in self.first + self.pos..end {
            if !ordinals.is_empty() && (bytes >= CHUNK_BYTES || ordinals.len() >= CHUNK_RECORDS) {
                break;
            }
            bytes += self.index.entries[i].value_len as u64;
            ordinals.push(i);
        }
        ordinals
    }
}
