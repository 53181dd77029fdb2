//! One rank's share of a database, read record by record in key order,
//! wrapping like liblmdb's cursor: after the last record of the share the
//! reader is no longer valid until `seek_to_first`.
//!
//! Two splits (see [`Split`]): a contiguous block per rank, or Caffe's
//! stride, where the ranks' n-th batches together are the n-th batch of one
//! process with a batch P times larger (data-parallel training, see
//! `cpp/data_parallel.cpp`).
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

/// How the records are split between ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Rank r reads a contiguous block (the engine's contiguous partition)
    /// and walks it again after each wrap.
    Contiguous,
    /// The records form one endless stream, epoch after epoch; its t-th
    /// record goes to rank t mod P. A wrap continues the stream into the
    /// next epoch, so when N is not a multiple of P a rank's share changes
    /// from epoch to epoch; the ranks' k-th records together are always the
    /// stream's k-th run of P records.
    Strided,
}

pub struct PartitionReader {
    db: Database,
    index: RecordIndex,
    rank: usize,
    ranks: usize,
    split: Split,
    /// Epochs of the stream begun before the current one (strided only).
    epoch: usize,
    /// The current epoch's share: records `first, first + stride, ...`.
    first: usize,
    count: usize,
    stride: usize,
    /// Position within the share; `count` means past the end.
    pos: usize,
    /// Position of `chunk`'s first value within the share.
    chunk_start: usize,
    chunk: Option<ValueBatch>,
}

impl PartitionReader {
    /// Opens `path` and selects rank `rank`'s share of `ranks`.
    pub fn open(path: &Path, rank: u64, ranks: u64, split: Split) -> Result<PartitionReader> {
        if ranks == 0 || rank >= ranks {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} of {ranks} ranks"
            )));
        }
        let db = Database::open(path)?;
        let tree = db.main_tree()?;
        let index = db.build_index(&tree, &IndexOptions::default())?;
        if (index.len() as u64) < ranks {
            return Err(Error::InvalidArgument(format!(
                "{}: {} records cannot give each of {ranks} ranks one",
                path.display(),
                index.len()
            )));
        }
        let mut reader = PartitionReader {
            db,
            index,
            rank: rank as usize,
            ranks: ranks as usize,
            split,
            epoch: 0,
            first: 0,
            count: 0,
            stride: 1,
            pos: 0,
            chunk_start: 0,
            chunk: None,
        };
        reader.select_epoch(0);
        Ok(reader)
    }

    /// Sets the share for epoch `epoch` of the stream.
    fn select_epoch(&mut self, epoch: usize) {
        let (n, p, r) = (self.index.len(), self.ranks, self.rank);
        self.epoch = epoch;
        match self.split {
            Split::Contiguous => {
                let (first, count) = contiguous_block(n as u64, p as u64, r as u64);
                (self.first, self.count, self.stride) = (first as usize, count as usize, 1);
            }
            Split::Strided => {
                // The first stream index t >= epoch * n with t = r (mod p);
                // n >= p (checked at open), so every epoch gives a record.
                let start = (epoch as u128 * n as u128 % p as u128) as usize;
                let first = (r + p - start) % p;
                (self.first, self.count, self.stride) = (first, (n - first).div_ceil(p), p);
            }
        }
    }

    /// Records in the whole database.
    pub fn records(&self) -> usize {
        self.index.len()
    }

    /// `(first ordinal, records, stride)` of this rank's share of the
    /// current epoch.
    pub fn share(&self) -> (usize, usize, usize) {
        (self.first, self.count, self.stride)
    }

    pub fn valid(&self) -> bool {
        self.pos < self.count
    }

    /// On a valid reader: back to the share's first record (epoch 0). Past
    /// the end: the next epoch's first record (the same share again when
    /// contiguous; where the stream goes on when strided).
    pub fn seek_to_first(&mut self) {
        let epoch = if self.valid() { 0 } else { self.epoch + 1 };
        if self.split == Split::Strided && epoch != self.epoch {
            self.chunk = None;
        }
        self.select_epoch(epoch);
        self.pos = 0;
    }

    pub fn next(&mut self) {
        if self.pos < self.count {
            self.pos += 1;
        }
    }

    /// Ordinal (position in key order) of the current record.
    pub fn ordinal(&self) -> Option<usize> {
        self.valid().then(|| self.first + self.pos * self.stride)
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
        let mut bytes = 0u64;
        let mut ordinals = Vec::new();
        for k in self.pos..self.count {
            if !ordinals.is_empty() && (bytes >= CHUNK_BYTES || ordinals.len() >= CHUNK_RECORDS) {
                break;
            }
            let i = self.first + k * self.stride;
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
                    let mut reader =
                        PartitionReader::open(&fx.path, rank, ranks, Split::Contiguous).unwrap();
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
        let err = PartitionReader::open(&fx.path, 3, 4, Split::Strided)
            .err()
            .unwrap();
        assert!(err.to_string().contains("3 records"), "{err}");
        let err = PartitionReader::open("/nonexistent/lmdb".as_ref(), 0, 1, Split::Contiguous)
            .err()
            .unwrap();
        assert!(err.to_string().contains("/nonexistent/lmdb"), "{err}");
    }

    #[test]
    fn strided_ranks_together_read_one_process_stream_across_epochs() {
        // 103 records: not a multiple of 2, 3 or 4, so shares change from
        // epoch to epoch; three epochs and more than one chunk per share.
        let fx = kit::caffe_style(103, 70_000, 9);
        let oracle = fx.oracle();
        let n = oracle.len();
        for ranks in [1usize, 2, 3, 4] {
            let mut readers: Vec<PartitionReader> = (0..ranks)
                .map(|r| {
                    PartitionReader::open(&fx.path, r as u64, ranks as u64, Split::Strided).unwrap()
                })
                .collect();
            // Like Caffe's Data layer: take a record, advance, seek to first
            // when the cursor is past the end.
            let per_rank = 3 * n / ranks + 5;
            let mut taken: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![Vec::new(); ranks];
            for (r, reader) in readers.iter_mut().enumerate() {
                for _ in 0..per_rank {
                    if !reader.valid() {
                        reader.seek_to_first();
                    }
                    let key = reader.key().unwrap().to_vec();
                    let value = reader.value().unwrap().unwrap().to_vec();
                    taken[r].push((key, value));
                    reader.next();
                }
            }
            for k in 0..per_rank {
                for (r, records) in taken.iter().enumerate() {
                    assert_eq!(
                        records[k],
                        oracle[(k * ranks + r) % n],
                        "record {k} of rank {r} of {ranks}"
                    );
                }
            }
        }
    }
}
