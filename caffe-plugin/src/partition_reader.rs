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

#[cfg(test)]
mod tests {
    use super::*;
    use lmdbio_testkit as kit;

    /// Walks a reader from the first record to the end of its share.
    fn walk(reader: &mut PartitionReader) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        reader.seek_to_first();
        while reader.valid() {
            let key = reader.key().unwrap().to_vec();
            let value = reader.value().unwrap().unwrap().to_vec();
            out.push((key, value));
            reader.next();
        }
        out
    }

    #[test]
    fn shares_concatenate_to_what_liblmdb_reads_and_wrap_like_it() {
        // Values around the inline/overflow boundary and more than one
        // read-ahead chunk per share.
        for fx in [kit::caffe_style(3000, 3000, 5), kit::inline_only(5000, 6)] {
            let oracle = fx.oracle();
            for ranks in [1u64, 3, 4] {
                let mut all = Vec::new();
                for rank in 0..ranks {
                    let mut reader = PartitionReader::open(&fx.path, rank, ranks).unwrap();
                    let first_pass = walk(&mut reader);
                    assert_eq!(reader.value().unwrap(), None, "past the end");
                    // Walking again after seek_to_first gives the same share.
                    assert_eq!(walk(&mut reader), first_pass);
                    all.extend(first_pass);
                }
                assert_eq!(all, oracle, "{} on {ranks} ranks", fx.name);
            }
        }
    }

    #[test]
    fn more_ranks_than_records_and_bad_paths_are_refused() {
        let fx = kit::caffe_style(3, 100, 7);
        let err = PartitionReader::open(&fx.path, 3, 4).err().unwrap();
        assert!(err.to_string().contains("3 records"), "{err}");
        let err = PartitionReader::open("/nonexistent/lmdb".as_ref(), 0, 1)
            .err()
            .unwrap();
        assert!(err.to_string().contains("/nonexistent/lmdb"), "{err}");
    }
}
