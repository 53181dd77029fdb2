//! Portable cursors: a rank's position in the job as a small plain value
//! with a stable byte encoding, to store in a training checkpoint, send to
//! another rank, and restore.
//!
//! A cursor names the rank's next step and everything that shapes the
//! order (partition, batch, tail, rank count, shuffle), plus the identity
//! of the database it was taken on, so a cursor from another database or
//! another order is refused instead of silently misplacing the job.
//!
//! "Delivered" means handed to the caller by `next_batch`: a cursor taken
//! after k batches resumes with batch k+1, whatever the engine had already
//! read ahead.
//!
//! A [`JobCursor`] gathers every rank's cursor of one job: it is what
//! resuming on another rank count needs (see [`crate::resume`]).

use crate::error::{Error, Result};
use crate::order::{Shuffle, ShuffleMode};
use crate::resume::{PositionRun, Remainder};
use crate::schedule::{Partition, Tail};

/// The first 8 bytes of an encoded rank cursor.
pub const CURSOR_MAGIC: [u8; 8] = *b"LMDBIOC\0";
/// The encoding's version, after the magic; bumped on any layout change.
pub const CURSOR_VERSION: u32 = 2;
/// Length in bytes of an encoded rank cursor (`LMDBIO_CURSOR_BYTES` in
/// `include/lmdbio.h`).
pub const CURSOR_BYTES: usize = 112;

/// The database a cursor belongs to: cheap to compare, and changed by any
/// write to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatabaseIdentity {
    /// Records in the database read (its `md_entries`).
    pub entries: u64,
    /// The current meta page's `mm_txnid`: the last write transaction.
    pub txnid: u64,
    /// The file's page size in bytes.
    pub page_size: u32,
    /// [`crate::Database::identity_digest`]: the current meta page and its trees, the
    /// tree read and the file's length, so that another database with the
    /// same entry count, txnid and page size is still told apart.
    pub digest: u64,
}

/// One rank's position in a job: its next step, and everything that
/// decides which records that step holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The rank this cursor belongs to.
    pub rank: u32,
    /// The job's rank count.
    pub ranks: u32,
    /// How the epoch is divided among the ranks.
    pub partition: Partition,
    /// What happens at the end of a rank's share of an epoch.
    pub tail: Tail,
    /// Records per batch.
    pub batch: u64,
    /// The per-epoch shuffle, or `None` for key order.
    pub shuffle: Option<Shuffle>,
    /// The rank's next step (batches delivered so far).
    pub step: u64,
    /// Epoch (from 0) of the next record.
    pub epoch: u64,
    /// Position of the next record in that epoch's order (from 0).
    pub position: u64,
    /// The database the cursor was taken on.
    pub database: DatabaseIdentity,
    /// The job was itself resumed from a job cursor with re-partitioning
    /// (its schedule starts with a remainder): `step` counts from that
    /// job's start, so only its [`JobCursor`] can resume it.
    pub after_repartition: bool,
}

impl Cursor {
    /// The stable little-endian encoding (`CURSOR_BYTES` bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(CURSOR_BYTES);
        b.extend_from_slice(&CURSOR_MAGIC);
        b.extend_from_slice(&CURSOR_VERSION.to_le_bytes());
        b.extend_from_slice(&self.rank.to_le_bytes());
        b.extend_from_slice(&self.ranks.to_le_bytes());
        b.push(match self.partition {
            Partition::Contiguous => 0,
            Partition::RoundRobinBatches => 1,
            Partition::Strided => 2,
        });
        b.push(match self.tail {
            Tail::Wrap => 0,
            Tail::Short => 1,
        });
        // The shuffle byte: 0 none, 1 chunked (as in every version 2
        // cursor), 2 global, 3 global after the first epoch; version 2
        // readers before a mode refuse its cursors by this byte.
        b.push(match self.shuffle.map(|s| s.mode) {
            None => 0,
            Some(ShuffleMode::Chunked) => 1,
            Some(ShuffleMode::Global) => 2,
            Some(ShuffleMode::GlobalAfterFirst) => 3,
        });
        b.push(u8::from(self.after_repartition));
        let s = self.shuffle.unwrap_or(Shuffle {
            seed: 0,
            chunk: 0,
            window_chunks: 0,
            mode: ShuffleMode::Chunked,
        });
        for v in [
            self.batch,
            s.seed,
            s.chunk,
            s.window_chunks,
            self.step,
            self.epoch,
            self.position,
            self.database.entries,
            self.database.txnid,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.database.page_size.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&self.database.digest.to_le_bytes());
        debug_assert_eq!(b.len(), CURSOR_BYTES);
        b
    }

    /// Reads an encoding made by [`Cursor::encode`]; an `InvalidArgument`
    /// error for anything else (wrong magic, version or length, bad
    /// field values).
    pub fn decode(b: &[u8]) -> Result<Cursor> {
        let bad = |why: &str| Error::InvalidArgument(format!("not an lmdbio cursor: {why}"));
        if b.len() < 12 || b[..8] != CURSOR_MAGIC {
            return Err(bad("wrong magic"));
        }
        let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        if version != CURSOR_VERSION {
            return Err(Error::InvalidArgument(format!(
                "cursor format version {version} is not supported (this lmdbio reads version {CURSOR_VERSION})"
            )));
        }
        if b.len() != CURSOR_BYTES {
            return Err(bad(&format!("{} bytes, expected {CURSOR_BYTES}", b.len())));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let partition = match b[20] {
            0 => Partition::Contiguous,
            1 => Partition::RoundRobinBatches,
            2 => Partition::Strided,
            x => return Err(bad(&format!("partition code {x}"))),
        };
        let tail = match b[21] {
            0 => Tail::Wrap,
            1 => Tail::Short,
            x => return Err(bad(&format!("tail code {x}"))),
        };
        let shuffled = |mode| {
            Some(Shuffle {
                seed: u64_at(32),
                chunk: u64_at(40),
                window_chunks: u64_at(48),
                mode,
            })
        };
        let shuffle = match b[22] {
            0 => None,
            1 => shuffled(ShuffleMode::Chunked),
            2 => shuffled(ShuffleMode::Global),
            3 => shuffled(ShuffleMode::GlobalAfterFirst),
            x => return Err(bad(&format!("shuffle flag {x}"))),
        };
        let after_repartition = match b[23] {
            0 => false,
            1 => true,
            x => return Err(bad(&format!("re-partition flag {x}"))),
        };
        Ok(Cursor {
            rank: u32_at(12),
            ranks: u32_at(16),
            partition,
            tail,
            batch: u64_at(24),
            shuffle,
            step: u64_at(56),
            epoch: u64_at(64),
            position: u64_at(72),
            database: DatabaseIdentity {
                entries: u64_at(80),
                txnid: u64_at(88),
                page_size: u32_at(96),
                digest: u64_at(104),
            },
            after_repartition,
        })
    }

    /// Refuses a cursor taken on another database.
    pub fn check_database(&self, db: DatabaseIdentity) -> Result<()> {
        if self.database != db {
            return Err(Error::InvalidArgument(format!(
                "the cursor was taken on another database ({} entries, txnid {}, page size {}, digest {:016x}); this one has {} entries, txnid {}, page size {}, digest {:016x}",
                self.database.entries,
                self.database.txnid,
                self.database.page_size,
                self.database.digest,
                db.entries,
                db.txnid,
                db.page_size,
                db.digest
            )));
        }
        Ok(())
    }
}

/// The first 8 bytes of an encoded [`JobCursor`].
pub const JOB_CURSOR_MAGIC: [u8; 8] = *b"LMDBIOJ\0";
/// The job cursor encoding's version, after the magic.
pub const JOB_CURSOR_VERSION: u32 = 1;
const JOB_HEADER_BYTES: usize = 32;
const RUN_BYTES: usize = 24;

/// A whole job's position: every rank's cursor, in rank order, and the
/// remainder the job started with (empty unless it was itself resumed with
/// re-partitioning). This is what re-partitioning needs: which records of
/// the current epoch nobody has been handed yet.
///
/// Encoding (little-endian): magic `LMDBIOJ\0`, version (u32), rank count
/// P (u32), the remainder's next epoch (u64), its run count R (u64); R runs
/// of (epoch, first position, length) as u64s; then the P rank cursors of
/// `CURSOR_BYTES` each. `decode` also reads the bare concatenation of P
/// rank cursors that `lmdbio bench --save-cursor` wrote before job cursors
/// existed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCursor {
    /// The records the job started with before its own schedule (empty
    /// unless it was resumed with re-partitioning).
    pub remainder: Remainder,
    /// Every rank's cursor, in rank order.
    pub cursors: Vec<Cursor>,
}

impl JobCursor {
    /// Checks that the cursors form one complete job.
    pub fn new(remainder: Remainder, cursors: Vec<Cursor>) -> Result<JobCursor> {
        let job = JobCursor { remainder, cursors };
        job.validate()?;
        Ok(job)
    }

    /// The job's rank count.
    pub fn ranks(&self) -> usize {
        self.cursors.len()
    }

    /// Bytes of the encoding of a job of `ranks` ranks whose remainder has
    /// `runs` runs.
    pub fn encoded_len(ranks: usize, runs: usize) -> usize {
        JOB_HEADER_BYTES + runs * RUN_BYTES + ranks * CURSOR_BYTES
    }

    /// The stable little-endian encoding described above.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(Self::encoded_len(
            self.cursors.len(),
            self.remainder.runs.len(),
        ));
        b.extend_from_slice(&JOB_CURSOR_MAGIC);
        b.extend_from_slice(&JOB_CURSOR_VERSION.to_le_bytes());
        b.extend_from_slice(&(self.cursors.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.remainder.next_epoch.to_le_bytes());
        b.extend_from_slice(&(self.remainder.runs.len() as u64).to_le_bytes());
        for r in &self.remainder.runs {
            for v in [r.epoch, r.start, r.len] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        for c in &self.cursors {
            b.extend_from_slice(&c.encode());
        }
        b
    }

    /// Reads a job cursor encoding, or the older bare concatenation of rank
    /// cursors; checks that the cursors form one complete job.
    pub fn decode(b: &[u8]) -> Result<JobCursor> {
        let bad = |why: String| Error::InvalidArgument(format!("not an lmdbio job cursor: {why}"));
        if b.len() >= 8 && b[..8] == CURSOR_MAGIC {
            // Rank cursors back to back, as written before job cursors.
            if b.len() % CURSOR_BYTES != 0 {
                return Err(bad(format!(
                    "{} bytes of rank cursors is not a multiple of {CURSOR_BYTES}",
                    b.len()
                )));
            }
            let cursors = b
                .chunks(CURSOR_BYTES)
                .map(Cursor::decode)
                .collect::<Result<Vec<_>>>()?;
            return JobCursor::new(Remainder::default(), cursors);
        }
        if b.len() < JOB_HEADER_BYTES || b[..8] != JOB_CURSOR_MAGIC {
            return Err(bad("wrong magic".into()));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
        let version = u32_at(8);
        if version != JOB_CURSOR_VERSION {
            return Err(Error::InvalidArgument(format!(
                "job cursor format version {version} is not supported (this lmdbio reads version {JOB_CURSOR_VERSION})"
            )));
        }
        let ranks = u32_at(12) as usize;
        let next_epoch = u64_at(16);
        let runs = u64_at(24);
        let runs_end = (runs as u128) * RUN_BYTES as u128 + JOB_HEADER_BYTES as u128;
        if runs_end > b.len() as u128 {
            return Err(bad(format!(
                "{runs} remainder runs do not fit in {} bytes",
                b.len()
            )));
        }
        let runs_end = runs_end as usize;
        let held = (b.len() - runs_end) / CURSOR_BYTES;
        if (b.len() - runs_end) % CURSOR_BYTES != 0 {
            return Err(bad(format!(
                "{} bytes after the remainder is not a whole number of {CURSOR_BYTES}-byte rank cursors",
                b.len() - runs_end
            )));
        }
        if held != ranks {
            return Err(Error::InvalidArgument(format!(
                "incomplete job cursor: the job had {ranks} ranks but it holds {held} rank cursors"
            )));
        }
        let remainder = Remainder {
            runs: (0..runs as usize)
                .map(|i| {
                    let at = JOB_HEADER_BYTES + i * RUN_BYTES;
                    PositionRun {
                        epoch: u64_at(at),
                        start: u64_at(at + 8),
                        len: u64_at(at + 16),
                    }
                })
                .collect(),
            next_epoch,
        };
        let cursors = b[runs_end..]
            .chunks(CURSOR_BYTES)
            .map(Cursor::decode)
            .collect::<Result<Vec<_>>>()?;
        JobCursor::new(remainder, cursors)
    }

    fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(Error::InvalidArgument(format!("invalid job cursor: {why}")));
        let Some(first) = self.cursors.first() else {
            return bad("it holds no rank cursors".into());
        };
        let n = self.cursors.len();
        for (i, c) in self.cursors.iter().enumerate() {
            if c.ranks as usize != n {
                return Err(Error::InvalidArgument(format!(
                    "incomplete job cursor: it holds {n} rank cursors but rank {}'s cursor says the job had {} ranks",
                    c.rank, c.ranks
                )));
            }
            if c.rank as usize != i {
                return Err(Error::InvalidArgument(format!(
                    "incomplete job cursor: entry {i} is rank {}'s cursor (each rank's cursor must appear once, in rank order)",
                    c.rank
                )));
            }
            let shape = |c: &Cursor| {
                (
                    c.partition,
                    c.tail,
                    c.batch,
                    c.shuffle,
                    c.database,
                    c.after_repartition,
                )
            };
            if shape(c) != shape(first) {
                return bad(format!(
                    "rank {i}'s cursor belongs to another job (order options or database differ from rank 0's)"
                ));
            }
        }
        if first.after_repartition == self.remainder.is_none() {
            return bad(
                "the rank cursors and the remainder disagree on whether the job was re-partitioned"
                    .into(),
            );
        }
        let entries = first.database.entries;
        let mut prev: Option<&PositionRun> = None;
        for r in &self.remainder.runs {
            let in_order = prev.is_none_or(|p| (p.epoch, p.start + p.len) <= (r.epoch, r.start));
            if r.len == 0
                || r.epoch >= self.remainder.next_epoch
                || r.start.checked_add(r.len).is_none_or(|end| end > entries)
                || !in_order
            {
                return bad(format!(
                    "remainder run {r:?} is empty, out of order, past the database's {entries} records or not before epoch {}",
                    self.remainder.next_epoch
                ));
            }
            prev = Some(r);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Cursor {
        Cursor {
            rank: 3,
            ranks: 8,
            partition: Partition::Strided,
            tail: Tail::Short,
            batch: 64,
            shuffle: Some(Shuffle {
                seed: 42,
                chunk: 21,
                window_chunks: 4,
                mode: ShuffleMode::Chunked,
            }),
            step: 1234,
            epoch: 5,
            position: 999,
            database: DatabaseIdentity {
                entries: 10_000,
                txnid: 17,
                page_size: 4096,
                digest: 0xfeed_f00d,
            },
            after_repartition: false,
        }
    }

    #[test]
    fn encoding_round_trips_and_is_stable() {
        let c = sample();
        let bytes = c.encode();
        assert_eq!(bytes.len(), CURSOR_BYTES);
        assert_eq!(Cursor::decode(&bytes).unwrap(), c);
        // Field offsets are part of the format: spot-check two.
        assert_eq!(&bytes[56..64], &1234u64.to_le_bytes());
        assert_eq!(&bytes[96..100], &4096u32.to_le_bytes());
        assert_eq!(&bytes[104..112], &0xfeed_f00du64.to_le_bytes());
        let plain = Cursor { shuffle: None, ..c };
        assert_eq!(Cursor::decode(&plain.encode()).unwrap(), plain);
    }

    /// A chunked cursor is byte for byte what version 2 always wrote, so
    /// saved cursors still load; a global one differs only in the shuffle
    /// byte, and round-trips.
    #[test]
    fn the_shuffle_mode_is_one_byte_of_version_2() {
        let chunked = sample();
        let bytes = chunked.encode();
        assert_eq!(&bytes[8..12], &2u32.to_le_bytes());
        assert_eq!(bytes[22], 1);
        assert_eq!(&bytes[32..40], &42u64.to_le_bytes());
        let global = Cursor {
            shuffle: Some(Shuffle {
                chunk: 0,
                window_chunks: 0,
                mode: ShuffleMode::Global,
                ..chunked.shuffle.unwrap()
            }),
            ..chunked
        };
        let g = global.encode();
        assert_eq!(g.len(), CURSOR_BYTES);
        assert_eq!(g[22], 2);
        assert_eq!(Cursor::decode(&g).unwrap(), global);
        // Global after the first epoch keeps the chunked sizes: byte 3,
        // and otherwise the chunked cursor's bytes.
        let after_first = Cursor {
            shuffle: Some(Shuffle {
                mode: ShuffleMode::GlobalAfterFirst,
                ..chunked.shuffle.unwrap()
            }),
            ..chunked
        };
        let a = after_first.encode();
        assert_eq!(a[22], 3);
        assert_eq!(a[..22], bytes[..22]);
        assert_eq!(a[23..], bytes[23..]);
        assert_eq!(Cursor::decode(&a).unwrap(), after_first);
        assert_ne!(Cursor::decode(&a).unwrap(), chunked);
        let mut bad = g.clone();
        bad[22] = 4;
        assert!(Cursor::decode(&bad).is_err());
    }

    #[test]
    fn refuses_other_versions_databases_and_garbage() {
        let mut bytes = sample().encode();
        bytes[8] = 1;
        let e = Cursor::decode(&bytes).unwrap_err().to_string();
        assert!(e.contains("version 1"), "{e}");
        assert!(Cursor::decode(b"hello").is_err());
        let c = sample();
        let other = DatabaseIdentity {
            txnid: 18,
            ..c.database
        };
        assert!(c
            .check_database(other)
            .unwrap_err()
            .to_string()
            .contains("txnid 17"));
        assert!(c.check_database(c.database).is_ok());
        // Same entries, txnid and page size: the digest still tells.
        let lookalike = DatabaseIdentity {
            digest: 0xfeed_f00e,
            ..c.database
        };
        let e = c.check_database(lookalike).unwrap_err().to_string();
        assert!(e.contains("another database"), "{e}");
    }

    fn job(ranks: u32) -> JobCursor {
        let cursors = (0..ranks)
            .map(|rank| Cursor {
                rank,
                ranks,
                ..sample()
            })
            .collect();
        JobCursor::new(Remainder::default(), cursors).unwrap()
    }

    #[test]
    fn job_cursors_round_trip_and_read_bare_rank_cursors() {
        let plain = job(3);
        assert_eq!(JobCursor::decode(&plain.encode()).unwrap(), plain);
        let bare: Vec<u8> = plain.cursors.iter().flat_map(Cursor::encode).collect();
        assert_eq!(JobCursor::decode(&bare).unwrap(), plain);
        let mut resumed = job(2);
        for c in &mut resumed.cursors {
            c.after_repartition = true;
        }
        resumed.remainder = Remainder {
            runs: vec![
                PositionRun {
                    epoch: 4,
                    start: 10,
                    len: 5,
                },
                PositionRun {
                    epoch: 5,
                    start: 0,
                    len: 3,
                },
            ],
            next_epoch: 6,
        };
        let bytes = resumed.encode();
        assert_eq!(bytes.len(), JobCursor::encoded_len(2, 2));
        assert_eq!(&bytes[..8], b"LMDBIOJ\0");
        assert_eq!(&bytes[32..40], &4u64.to_le_bytes());
        assert_eq!(JobCursor::decode(&bytes).unwrap(), resumed);
    }

    #[test]
    fn refuses_incomplete_mixed_and_other_version_job_cursors() {
        let bytes = job(3).encode();
        let e = JobCursor::decode(&bytes[..bytes.len() - CURSOR_BYTES])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("incomplete job cursor") && e.contains("3 ranks"),
            "{e}"
        );
        let mut v2 = bytes.clone();
        v2[8] = 2;
        let e = JobCursor::decode(&v2).unwrap_err().to_string();
        assert!(e.contains("version 2"), "{e}");
        let mut mixed = job(2);
        mixed.cursors[1].batch = 65;
        let e = JobCursor::decode(&mixed.encode()).unwrap_err().to_string();
        assert!(e.contains("another job"), "{e}");
        let mut twice = job(2);
        twice.cursors[1].rank = 0;
        let e = JobCursor::decode(&twice.encode()).unwrap_err().to_string();
        assert!(e.contains("entry 1 is rank 0"), "{e}");
        let mut past = job(1);
        past.cursors[0].after_repartition = true;
        past.remainder = Remainder {
            runs: vec![PositionRun {
                epoch: 0,
                start: 9_999,
                len: 2,
            }],
            next_epoch: 1,
        };
        let e = JobCursor::decode(&past.encode()).unwrap_err().to_string();
        assert!(e.contains("past the database"), "{e}");
        assert!(JobCursor::decode(b"LMDBIOJ").is_err());
    }
}
