//! A built index saved to a file, for later jobs to load in a few large
//! reads instead of scanning the tree (see docs/design/saved-index.md).
//!
//! The file is a fixed header, the entries, a restart table and (unless
//! saved without them) the keys, last, so a job that needs no keys reads
//! only what comes before them. Each entry is a varint packing the flags,
//! whether the key and value lengths repeat the previous entry's, and the
//! value offset's difference from where the previous entry's layout puts
//! it (liblmdb fills a leaf from its end, node after node), followed by
//! the lengths that do not repeat: one byte a record on a leaf written in
//! key order with values of one size. Each key is the length it shares
//! with the previous key and the rest. The header ties the file to one
//! state of one database (the file's length and modification time, the
//! current meta page and its txnid, the roots, the page size, the entry
//! count and the digest of [`Database::identity_digest`]); the table holds
//! a checksum of each part between restart points; a file whose header,
//! identity, length, checksums or encoding disagree is refused, never
//! served.

use std::io::Read;

use crate::database::{Database, Tree};
use crate::index::RecordEntry;
use crate::source::ReadAt;

/// First bytes of a saved index.
pub const MAGIC: [u8; 8] = *b"LMDBIOIX";
/// Format version: bumped whenever the layout or the meaning of a field
/// changes, so an older file is refused rather than misread.
pub const VERSION: u32 = 2;
/// Bytes of the header: 16 of magic, version and length, the identity's
/// words and eight more, room for more, and the header's own checksum
/// last.
pub const HEADER_LEN: usize = 192;
const ENTRY_LEN: usize = std::mem::size_of::<RecordEntry>();
const IDENTITY_WORDS: usize = 11;
/// After the identity: records, key bytes, encoded entry bytes, value
/// bytes, encoded key bytes, the restart table's checksum, flags
/// ([`HAS_KEYS`]) and the longest span of a value.
const COUNT_WORDS: usize = 8;
/// The file holds the keys.
const HAS_KEYS: u64 = 1;
/// Records between restart points: the first record after one is coded
/// on its own (its absolute value offset, a key sharing nothing), and the
/// table says where each starts and what its parts' checksums are, so
/// parts of the file are checked and decoded on threads of their own.
pub const RESTART: u64 = 1 << 15;
/// A table row: where the chunk's entries and keys start in their parts,
/// where its keys start in the key store, and its parts' checksums.
const TABLE_ENTRY: usize = 40;
const _: () = assert!(16 + (IDENTITY_WORDS + COUNT_WORDS) * 8 <= HEADER_LEN - 8);

/// What a saved index belongs to: one state of one tree of one data file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SavedIdentity {
    /// Length of the data file in bytes.
    pub file_len: u64,
    /// The current meta page's `mm_txnid`.
    pub txnid: u64,
    /// Which meta page is current (0 or 1).
    pub meta_page: u64,
    /// The current meta page's `mm_last_pg`.
    pub last_pg: u64,
    /// Root page of MAIN.
    pub main_root: u64,
    /// Root page of the tree indexed (MAIN's again for MAIN).
    pub tree_root: u64,
    /// The file's page size.
    pub page_size: u64,
    /// Records the tree descriptor counts.
    pub entries: u64,
    /// [`Database::identity_digest`] of the tree (descriptors and root
    /// page bytes).
    pub digest: u64,
    /// A hash of the tree's name (a distinct value for MAIN).
    pub name_hash: u64,
    /// The data file's modification time in nanoseconds, when the caller
    /// knows it (0 otherwise): a write that bypassed liblmdb (damage, a
    /// copy over it) leaves the txnid as it was, not the time.
    pub file_mtime_ns: u64,
}

impl SavedIdentity {
    /// The identity of `tree` in `db` as opened now.
    pub fn of<R: ReadAt>(db: &Database<R>, tree: &Tree) -> SavedIdentity {
        let m = db.meta();
        SavedIdentity {
            file_len: db.file_len(),
            txnid: m.mm_txnid,
            meta_page: m.mm_txnid & 1,
            last_pg: m.mm_last_pg,
            main_root: m.main_db.md_root,
            tree_root: tree.db.md_root,
            page_size: u64::from(db.page_size()),
            entries: tree.db.md_entries,
            digest: db.identity_digest(tree),
            name_hash: name_hash(tree.name.as_deref()),
            file_mtime_ns: 0,
        }
    }

    fn words(&self) -> [u64; IDENTITY_WORDS] {
        [
            self.file_len,
            self.txnid,
            self.meta_page,
            self.last_pg,
            self.main_root,
            self.tree_root,
            self.page_size,
            self.entries,
            self.digest,
            self.name_hash,
            self.file_mtime_ns,
        ]
    }

    fn from_words(w: &[u64]) -> SavedIdentity {
        SavedIdentity {
            file_len: w[0],
            txnid: w[1],
            meta_page: w[2],
            last_pg: w[3],
            main_root: w[4],
            tree_root: w[5],
            page_size: w[6],
            entries: w[7],
            digest: w[8],
            name_hash: w[9],
            file_mtime_ns: w[10],
        }
    }
}

/// A hash of a tree's name that tells MAIN (`None`) from every name.
pub fn name_hash(name: Option<&str>) -> u64 {
    match name {
        None => checksum(b"\0main"),
        Some(n) => checksum(&[b"\x01", n.as_bytes()].concat()),
    }
}

/// Why a saved index was not used. Not an error: the caller builds the
/// index instead (and may save it again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Shorter than its header, or not the length its header implies.
    Length {
        /// Bytes the header implies (or the header's own length).
        expected: u64,
        /// Bytes found.
        found: u64,
    },
    /// Not a saved index of this format (magic, version or header length).
    Format(String),
    /// The header's own checksum does not match: damaged.
    Header,
    /// Made from another database, or another state of this one.
    Identity(String),
    /// A part's checksum does not match: damaged.
    Checksum(&'static str),
    /// Entry `0` does not decode, or points outside the keys or the data
    /// file.
    Entry(u64),
    /// This machine is big-endian: the format is little-endian only.
    BigEndian,
    /// Saved without keys, and keys were asked for.
    NoKeys,
    /// The file could not be read.
    Io(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Length { expected, found } => {
                write!(f, "{found} bytes where {expected} were expected")
            }
            Refusal::Format(why) => write!(f, "not a saved index of this version: {why}"),
            Refusal::Header => write!(f, "header checksum mismatch"),
            Refusal::Identity(why) => write!(f, "made from another database state: {why}"),
            Refusal::Checksum(part) => write!(f, "{part} checksum mismatch"),
            Refusal::Entry(i) => write!(
                f,
                "entry {i} does not decode or points outside the keys or the file"
            ),
            Refusal::BigEndian => write!(f, "saved indexes are little-endian only"),
            Refusal::NoKeys => write!(f, "saved without keys"),
            Refusal::Io(why) => write!(f, "cannot be read: {why}"),
        }
    }
}

/// The sizes of a saved index, known once it is checked: what the node's
/// memory must hold and what the ranks agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Entries.
    pub records: u64,
    /// Bytes of every key together.
    pub key_bytes: u64,
    /// Bytes of every value together.
    pub value_bytes: u64,
    /// The longest span one value covers in the data file
    /// ([`RecordEntry::span`]).
    pub largest_span: u64,
}

impl Summary {
    /// The sizes of two sets of records together (their key bytes not
    /// counted: a decode counts no keys).
    pub fn and(self, other: Summary) -> Summary {
        Summary {
            records: self.records + other.records,
            key_bytes: 0,
            value_bytes: self.value_bytes + other.value_bytes,
            largest_span: self.largest_span.max(other.largest_span),
        }
    }
}

/// A saved index read, its header, identity, length and restart table
/// checked; its entries (and keys, if read) are checked as they are
/// decoded ([`SavedIndex::decode_into`]).
#[derive(Debug, Clone)]
pub struct SavedIndex {
    /// The file from its start, to the end of the keys when they were
    /// read, else to the end of the restart table.
    bytes: Vec<u8>,
    chunks: Vec<Chunk>,
    summary: Summary,
    keys_read: bool,
}

/// The records between two restart points: where their entries and keys
/// lie in the file, where their keys start in the key store, and the
/// checksums of their entries and keys.
#[derive(Debug, Clone)]
struct Chunk {
    first: u64,
    records: u64,
    entries: std::ops::Range<usize>,
    keys: std::ops::Range<usize>,
    key_start: u64,
    key_end: u64,
    entries_sum: u64,
    keys_sum: u64,
}

/// A header checked against a database state: the sizes it gives.
struct Header {
    summary: Summary,
    entries_len: u64,
    keys_len: u64,
    table_sum: u64,
    has_keys: bool,
}

impl Header {
    fn table_len(&self) -> u64 {
        self.summary.records.div_ceil(RESTART) * TABLE_ENTRY as u64
    }

    /// Bytes before the keys, and of the whole file.
    fn lengths(&self) -> (Option<u64>, Option<u64>) {
        let before = (HEADER_LEN as u64)
            .checked_add(self.entries_len)
            .and_then(|n| n.checked_add(self.table_len()));
        (before, before.and_then(|n| n.checked_add(self.keys_len)))
    }

    fn parse(h: &[u8], expected: &SavedIdentity) -> Result<Header, Refusal> {
        if cfg!(target_endian = "big") {
            return Err(Refusal::BigEndian);
        }
        let Some(h) = h.get(..HEADER_LEN) else {
            return Err(Refusal::Length {
                expected: HEADER_LEN as u64,
                found: h.len() as u64,
            });
        };
        if h[..8] != MAGIC {
            return Err(Refusal::Format("bad magic".into()));
        }
        let version = u32::from_le_bytes(h[8..12].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(h[12..16].try_into().unwrap_or_default());
        if version != VERSION || len as usize != HEADER_LEN {
            return Err(Refusal::Format(format!(
                "version {version} with a {len}-byte header (this build reads version {VERSION})"
            )));
        }
        let stored_sum = u64::from_le_bytes(h[HEADER_LEN - 8..].try_into().unwrap_or_default());
        if checksum(&h[..HEADER_LEN - 8]) != stored_sum {
            return Err(Refusal::Header);
        }
        let word =
            |i: usize| u64::from_le_bytes(h[16 + 8 * i..24 + 8 * i].try_into().unwrap_or_default());
        let words: Vec<u64> = (0..IDENTITY_WORDS).map(word).collect();
        let identity = SavedIdentity::from_words(&words);
        if identity != *expected {
            return Err(Refusal::Identity(identity_difference(&identity, expected)));
        }
        let count = |i: usize| word(IDENTITY_WORDS + i);
        let header = Header {
            summary: Summary {
                records: count(0),
                key_bytes: count(1),
                value_bytes: count(3),
                largest_span: count(7),
            },
            entries_len: count(2),
            keys_len: count(4),
            table_sum: count(5),
            has_keys: count(6) & HAS_KEYS != 0,
        };
        if header.summary.records != expected.entries {
            return Err(Refusal::Identity(format!(
                "{} entries for a tree of {}",
                header.summary.records, expected.entries
            )));
        }
        if count(6) & !HAS_KEYS != 0 || (!header.has_keys && header.keys_len != 0) {
            return Err(Refusal::Format(format!("flags {:#x}", count(6))));
        }
        Ok(header)
    }
}

impl SavedIndex {
    /// Reads the saved index at `path` for the database state `expected`:
    /// the keys only if `keys` (a file without them is then refused). The
    /// header first, then the rest in one read.
    pub fn read(
        path: &std::path::Path,
        expected: &SavedIdentity,
        keys: bool,
    ) -> Result<SavedIndex, Refusal> {
        let io = |e: std::io::Error| Refusal::Io(e.to_string());
        let mut file = std::fs::File::open(path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        let mut bytes = vec![0u8; HEADER_LEN.min(file_len as usize)];
        file.read_exact(&mut bytes).map_err(io)?;
        let header = Header::parse(&bytes, expected)?;
        let (before_keys, whole) = header.lengths();
        if whole != Some(file_len) {
            return Err(Refusal::Length {
                expected: whole.unwrap_or(u64::MAX),
                found: file_len,
            });
        }
        if keys && !header.has_keys {
            return Err(Refusal::NoKeys);
        }
        let want = if keys { whole } else { before_keys };
        let want = want.and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
        bytes.resize(want, 0);
        file.read_exact(&mut bytes[HEADER_LEN..]).map_err(io)?;
        SavedIndex::from_header(bytes, header, keys)
    }

    /// Checks the whole file `bytes` against `expected`, with its keys if
    /// `keys`.
    pub fn open(
        mut bytes: Vec<u8>,
        expected: &SavedIdentity,
        keys: bool,
    ) -> Result<SavedIndex, Refusal> {
        let header = Header::parse(&bytes, expected)?;
        let (before_keys, whole) = header.lengths();
        if whole != Some(bytes.len() as u64) {
            return Err(Refusal::Length {
                expected: whole.unwrap_or(u64::MAX),
                found: bytes.len() as u64,
            });
        }
        if keys && !header.has_keys {
            return Err(Refusal::NoKeys);
        }
        if !keys {
            bytes.truncate(before_keys.unwrap_or(0) as usize);
        }
        SavedIndex::from_header(bytes, header, keys)
    }

    /// `bytes` holds the file up to the keys' end if `keys`, else up to
    /// theirs start; the header was checked.
    fn from_header(bytes: Vec<u8>, header: Header, keys: bool) -> Result<SavedIndex, Refusal> {
        let entries_end = HEADER_LEN + header.entries_len as usize;
        let table_end = entries_end + header.table_len() as usize;
        let table = &bytes[entries_end..table_end];
        if checksum(table) != header.table_sum {
            return Err(Refusal::Checksum("restart table"));
        }
        let chunks = chunks(table, &header, table_end)?;
        Ok(SavedIndex {
            bytes,
            chunks,
            summary: header.summary,
            keys_read: keys,
        })
    }

    /// The index's sizes, as its header gives them ([`Self::decode_into`]
    /// checks them).
    pub fn summary(&self) -> Summary {
        self.summary
    }

    /// Decodes the entries into `entries` (the engine's layout,
    /// `records * 24` bytes) and, if given, the keys into `keys`
    /// (`key_bytes`), a part of the file per thread, checking each part's
    /// checksum, the encoding, the keys against the key store and every
    /// value against the data file (`file_len` bytes), and the header's
    /// sizes against what was decoded. Without keys the entries still say
    /// where each key would lie. On a refusal the areas hold garbage.
    pub fn decode_into(
        &self,
        entries: &mut [u8],
        keys: Option<&mut [u8]>,
        file_len: u64,
    ) -> Result<(), Refusal> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let every = vec![true; self.chunks.len()];
        let parts = self.decode_parts_into(entries, keys, file_len, &every, threads)?;
        self.check_totals(
            parts
                .into_iter()
                .flatten()
                .fold(Summary::default(), Summary::and),
        )
    }

    /// The records of each part between restart points, in order: the
    /// unit [`Self::decode_parts_into`] decodes and checks.
    pub fn parts(&self) -> impl ExactSizeIterator<Item = std::ops::Range<u64>> + '_ {
        self.chunks.iter().map(|c| c.first..c.first + c.records)
    }

    /// As [`Self::decode_into`], but only the parts `wanted` names (by
    /// their place in [`Self::parts`]), on up to `threads` threads: the
    /// other parts' places in `entries` and `keys` are left as they were.
    /// Returns the sizes of each part decoded (`None` for the others),
    /// whose sum over every part, wherever each was decoded, is for
    /// [`Self::check_totals`]: the header's sizes are not checked here.
    pub fn decode_parts_into(
        &self,
        entries: &mut [u8],
        keys: Option<&mut [u8]>,
        file_len: u64,
        wanted: &[bool],
        threads: usize,
    ) -> Result<Vec<Option<Summary>>, Refusal> {
        let s = self.summary;
        if entries.len() as u64 != s.records * ENTRY_LEN as u64
            || keys.as_ref().is_some_and(|k| k.len() as u64 != s.key_bytes)
            || wanted.len() != self.chunks.len()
        {
            return Err(Refusal::Length {
                expected: s.records * ENTRY_LEN as u64,
                found: entries.len() as u64,
            });
        }
        if keys.is_some() && !self.keys_read {
            return Err(Refusal::NoKeys);
        }
        let mut keys_left = keys;
        let mut work = Vec::with_capacity(self.chunks.len());
        for ((i, c), out) in self
            .chunks
            .iter()
            .enumerate()
            .zip(entries.chunks_mut(RESTART as usize * ENTRY_LEN))
        {
            let mine = match keys_left.take() {
                Some(k) => {
                    let (mine, rest) = k.split_at_mut((c.key_end - c.key_start) as usize);
                    keys_left = Some(rest);
                    Some(mine)
                }
                None => None,
            };
            if wanted[i] {
                work.push((i, c, out, mine));
            }
        }
        let decoded = in_parallel(work, threads, |(i, c, out, keys)| {
            self.decode_part(c, out, keys, file_len)
                .map(|found| (i, found))
        })?;
        let mut parts = vec![None; self.chunks.len()];
        for (i, found) in decoded {
            parts[i] = Some(found);
        }
        Ok(parts)
    }

    /// Refuses the index unless `found`, the sizes of every part decoded,
    /// are the header's.
    pub fn check_totals(&self, found: Summary) -> Result<(), Refusal> {
        let s = self.summary;
        if (found.records, found.value_bytes, found.largest_span)
            != (s.records, s.value_bytes, s.largest_span)
        {
            return Err(Refusal::Entry(s.records));
        }
        Ok(())
    }

    /// Decodes chunk `c` into `out` (its entries) and `keys` (its keys, if
    /// asked for), checking its checksums first.
    fn decode_part(
        &self,
        c: &Chunk,
        out: &mut [u8],
        mut keys: Option<&mut [u8]>,
        file_len: u64,
    ) -> Result<Summary, Refusal> {
        if checksum(&self.bytes[c.entries.clone()]) != c.entries_sum {
            return Err(Refusal::Checksum("entries"));
        }
        if keys.is_some() && checksum(&self.bytes[c.keys.clone()]) != c.keys_sum {
            return Err(Refusal::Checksum("keys"));
        }
        if keys.is_none() {
            return self.entries_only(c, file_len, out);
        }
        let mut out = out.chunks_exact_mut(ENTRY_LEN);
        let mut found = Summary::default();
        self.walk(c, file_len, |e, shared, suffix, prev| {
            found.records += 1;
            found.value_bytes += u64::from(e.value_len);
            found.largest_span = found.largest_span.max(e.span().1);
            if let Some(chunk) = out.next() {
                let mut b = [0u8; ENTRY_LEN];
                b[..8].copy_from_slice(&e.key_start.to_le_bytes());
                b[8..16].copy_from_slice(&e.value_offset.to_le_bytes());
                b[16..20].copy_from_slice(&e.value_len.to_le_bytes());
                b[20..22].copy_from_slice(&e.key_len.to_le_bytes());
                b[22..24].copy_from_slice(&e.flags.to_le_bytes());
                chunk.copy_from_slice(&b);
            }
            if let Some(k) = keys.as_deref_mut() {
                // The shared prefix is the previous key's first bytes
                // (walk checked it is that long); both relative to the
                // chunk's first key.
                let at = (e.key_start - c.key_start) as usize;
                k.copy_within(prev..prev + shared, at);
                k[at + shared..at + e.key_len as usize].copy_from_slice(suffix);
            }
        })?;
        Ok(found)
    }

    /// Decodes chunk `c`'s entries into `out` without keys, checking them
    /// as [`Self::walk`] does: the same decoding in one loop with no key
    /// to carry, which is most of a job's opening from a saved index.
    fn entries_only(&self, c: &Chunk, file_len: u64, out: &mut [u8]) -> Result<Summary, Refusal> {
        let mut src = &self.bytes[c.entries.clone()];
        let mut key_start = c.key_start;
        let mut prev = Previous::default();
        let (mut value_bytes, mut largest_span) = (0u64, 0u64);
        let mut out = out.chunks_exact_mut(ENTRY_LEN);
        for i in c.first..c.first + c.records {
            let mut next = || varint(&mut src).ok_or(Refusal::Entry(i));
            let packed = next()?;
            let key_len = match packed & SAME_KEY_LEN {
                0 => next()?,
                _ => prev.key_len,
            };
            let value_len = match packed & SAME_VALUE_LEN {
                0 => next()?,
                _ => prev.value_len,
            };
            let flags = packed & 3;
            let value_offset = prev
                .predict(flags as u16, key_len, value_len)
                .wrapping_add(unzigzag(packed >> 4));
            let end = value_offset.checked_add(value_len);
            if key_len > u64::from(u16::MAX)
                || value_len > u64::from(u32::MAX)
                || value_offset < crate::format::PAGEHDRSZ as u64
                || end.is_none_or(|end| end > file_len)
            {
                return Err(Refusal::Entry(i));
            }
            let overflow = flags & u64::from(RecordEntry::OVERFLOW);
            value_bytes += value_len;
            largest_span = largest_span.max(value_len + overflow * crate::format::PAGEHDRSZ as u64);
            let Some(dst) = out.next() else {
                return Err(Refusal::Entry(i));
            };
            let mut b = [0u8; ENTRY_LEN];
            b[..8].copy_from_slice(&key_start.to_le_bytes());
            b[8..16].copy_from_slice(&value_offset.to_le_bytes());
            b[16..24].copy_from_slice(&(value_len | key_len << 32 | flags << 48).to_le_bytes());
            dst.copy_from_slice(&b);
            key_start += key_len;
            prev = Previous {
                value_offset,
                key_len,
                value_len,
                inline: overflow == 0,
            };
        }
        if !src.is_empty() || key_start != c.key_end {
            return Err(Refusal::Entry(c.first + c.records));
        }
        Ok(Summary {
            records: c.records,
            key_bytes: 0,
            value_bytes,
            largest_span,
        })
    }

    /// Every entry of chunk `c` in order with its key's shared length,
    /// suffix and the previous key's start (relative to the chunk's first
    /// key), checking the encoding, the keys
    /// against the chunk's share of the key store and the value spans
    /// against a data file `file_len` long.
    fn walk(
        &self,
        c: &Chunk,
        file_len: u64,
        mut each: impl FnMut(&RecordEntry, usize, &[u8], usize),
    ) -> Result<(), Refusal> {
        let mut entries = Reader(&self.bytes[c.entries.clone()]);
        let mut key_bytes = Reader(&self.bytes[c.keys.clone()]);
        let mut key_start = c.key_start;
        let mut prev = Previous::default();
        let (mut prev_start, mut prev_key_len) = (0usize, 0usize);
        for i in c.first..c.first + c.records {
            let bad = || Refusal::Entry(i);
            let packed = entries.varint().ok_or_else(bad)?;
            let key_len = match packed & SAME_KEY_LEN {
                0 => entries.varint().ok_or_else(bad)?,
                _ => prev.key_len,
            };
            let value_len = match packed & SAME_VALUE_LEN {
                0 => entries.varint().ok_or_else(bad)?,
                _ => prev.value_len,
            };
            if key_len > u64::from(u16::MAX) || value_len > u64::from(u32::MAX) {
                return Err(bad());
            }
            let flags = (packed & 3) as u16;
            let value_offset = prev
                .predict(flags, key_len, value_len)
                .wrapping_add(unzigzag(packed >> 4));
            let e = RecordEntry {
                key_start,
                value_offset,
                value_len: value_len as u32,
                key_len: key_len as u16,
                flags,
            };
            let shared = key_bytes.varint().ok_or_else(bad)? as usize;
            if shared > prev_key_len || shared as u64 > key_len {
                return Err(bad());
            }
            let suffix = key_bytes.take(key_len as usize - shared).ok_or_else(bad)?;
            // A span ends where its value does (an overflow value's starts
            // at its page header, right before it). The keys' end is
            // checked once, after the chunk: key_start only grows.
            let inside = value_offset >= crate::format::PAGEHDRSZ as u64
                && value_offset
                    .checked_add(value_len)
                    .is_some_and(|end| end <= file_len);
            if !inside {
                return Err(bad());
            }
            each(&e, shared, suffix, prev_start);
            prev_start = (key_start - c.key_start) as usize;
            key_start += key_len;
            prev_key_len = key_len as usize;
            prev = Previous {
                value_offset,
                key_len,
                value_len,
                inline: flags & RecordEntry::OVERFLOW == 0,
            };
        }
        if !entries.0.is_empty() || !key_bytes.0.is_empty() || key_start != c.key_end {
            return Err(Refusal::Entry(c.first + c.records));
        }
        Ok(())
    }

    /// Decodes into new vectors (for tests and one-process callers), with
    /// the keys if they were read.
    pub fn to_index(&self, file_len: u64) -> Result<LoadedIndex, Refusal> {
        let s = self.summary;
        let mut bytes = vec![0u8; (s.records * ENTRY_LEN as u64) as usize];
        let mut keys = vec![
            0u8;
            if self.keys_read {
                s.key_bytes as usize
            } else {
                0
            }
        ];
        let keys_out = Some(&mut keys[..]).filter(|_| self.keys_read);
        self.decode_into(&mut bytes, keys_out, file_len)?;
        let entries = bytes
            .chunks_exact(ENTRY_LEN)
            .map(|b| {
                let u64_at =
                    |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
                RecordEntry {
                    key_start: u64_at(0),
                    value_offset: u64_at(8),
                    value_len: u32::from_le_bytes(b[16..20].try_into().unwrap_or_default()),
                    key_len: u16::from_le_bytes(b[20..22].try_into().unwrap_or_default()),
                    flags: u16::from_le_bytes(b[22..24].try_into().unwrap_or_default()),
                }
            })
            .collect();
        Ok(LoadedIndex { entries, keys })
    }
}

/// In an entry's packed word: its key length is the previous entry's.
const SAME_KEY_LEN: u64 = 4;
/// In an entry's packed word: its value length is the previous entry's.
const SAME_VALUE_LEN: u64 = 8;

/// What the coding of an entry refers to: the entry before it in its
/// chunk (all zero for a chunk's first).
#[derive(Default, Clone, Copy)]
struct Previous {
    value_offset: u64,
    key_len: u64,
    value_len: u64,
    inline: bool,
}

impl Previous {
    /// Where an entry of these flags and lengths would have its value if
    /// its node came right below the previous one in the same leaf, as
    /// liblmdb places the nodes it appends (a node is its 8-byte header,
    /// the key and the value, rounded up to an even size); after an
    /// overflow value or for one, the previous entry's value offset.
    fn predict(&self, flags: u16, key_len: u64, value_len: u64) -> u64 {
        if !self.inline || flags & RecordEntry::OVERFLOW != 0 {
            return self.value_offset;
        }
        let node = (8 + key_len + value_len + 1) & !1;
        self.value_offset
            .wrapping_sub(self.key_len)
            .wrapping_add(key_len)
            .wrapping_sub(node)
    }
}

/// The chunks the restart table describes: each chunk's entries and keys
/// lie in order inside their parts (the keys start at `table_end`), and
/// its keys in order in the key store.
fn chunks(table: &[u8], header: &Header, table_end: usize) -> Result<Vec<Chunk>, Refusal> {
    let (records, key_bytes) = (header.summary.records, header.summary.key_bytes);
    let rows: Vec<[u64; 5]> = table
        .chunks_exact(TABLE_ENTRY)
        .map(|r| {
            let w =
                |i: usize| u64::from_le_bytes(r[8 * i..8 * i + 8].try_into().unwrap_or_default());
            [w(0), w(1), w(2), w(3), w(4)]
        })
        .collect();
    let end = [header.entries_len, header.keys_len, key_bytes];
    let mut chunks = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let next = rows.get(i + 1).map_or(end, |r| [r[0], r[1], r[2]]);
        let in_order = (i > 0 || row[..3] == [0, 0, 0])
            && (0..3).all(|j| row[j] <= next[j] && next[j] <= end[j]);
        if !in_order {
            return Err(Refusal::Entry(i as u64 * RESTART));
        }
        let first = i as u64 * RESTART;
        chunks.push(Chunk {
            first,
            records: RESTART.min(records - first),
            entries: HEADER_LEN + row[0] as usize..HEADER_LEN + next[0] as usize,
            keys: table_end + row[1] as usize..table_end + next[1] as usize,
            key_start: row[2],
            key_end: next[2],
            entries_sum: row[3],
            keys_sum: row[4],
        });
    }
    Ok(chunks)
}

/// Runs `f` on every item, on up to `threads` threads, and returns its
/// results in order; the first failure in item order wins.
fn in_parallel<T: Send, R: Send>(
    items: Vec<T>,
    threads: usize,
    f: impl Fn(T) -> Result<R, Refusal> + Sync,
) -> Result<Vec<R>, Refusal> {
    let threads = threads.min(items.len());
    if threads <= 1 {
        return items.into_iter().map(f).collect();
    }
    let n = items.len();
    let work = std::sync::Mutex::new(items.into_iter().enumerate().collect::<Vec<_>>());
    let results = std::sync::Mutex::new((0..n).map(|_| None).collect::<Vec<_>>());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let next = work.lock().unwrap_or_else(|e| e.into_inner()).pop();
                let Some((i, item)) = next else { break };
                let r = f(item);
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.unwrap_or(Err(Refusal::Entry(u64::MAX))))
        .collect()
}

fn identity_difference(found: &SavedIdentity, expected: &SavedIdentity) -> String {
    const NAMES: [&str; IDENTITY_WORDS] = [
        "file length",
        "txnid",
        "meta page",
        "last page",
        "main root",
        "tree root",
        "page size",
        "entries",
        "digest",
        "tree name",
        "file modification time",
    ];
    let (f, e) = (found.words(), expected.words());
    NAMES
        .iter()
        .zip(f.iter().zip(e.iter()))
        .filter(|(_, (a, b))| a != b)
        .map(|(n, (a, b))| format!("{n} {a} (now {b})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A saved index read back into vectors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadedIndex {
    /// One per record, in key order.
    pub entries: Vec<RecordEntry>,
    /// Every key, back to back (empty when read without keys).
    pub keys: Vec<u8>,
}

/// Checks a whole saved index file (with its keys if `keys`) and decodes
/// it into vectors.
pub fn load(bytes: &[u8], expected: &SavedIdentity, keys: bool) -> Result<LoadedIndex, Refusal> {
    SavedIndex::open(bytes.to_vec(), expected, keys)?.to_index(expected.file_len)
}

/// Writes a whole saved index of `entries` belonging to `identity` to
/// `out`, with `keys` (an index as built: keys back to back in entry
/// order) or without any (the entries still give each key's length).
pub fn write<W: std::io::Write>(
    out: &mut W,
    identity: &SavedIdentity,
    entries: &[RecordEntry],
    keys: Option<&[u8]>,
) -> std::io::Result<()> {
    if cfg!(target_endian = "big") {
        return Err(std::io::Error::other(Refusal::BigEndian.to_string()));
    }
    let mut coded = Vec::with_capacity(entries.len() * 2);
    let mut coded_keys = Vec::with_capacity(if keys.is_some() { entries.len() * 3 } else { 0 });
    let mut rows: Vec<[u64; 3]> = Vec::new();
    let (mut prev, mut prev_key) = (Previous::default(), &[][..]);
    let (mut value_bytes, mut key_start, mut largest_span) = (0u64, 0u64, 0u64);
    for (i, e) in entries.iter().enumerate() {
        if i as u64 % RESTART == 0 {
            rows.push([coded.len() as u64, coded_keys.len() as u64, key_start]);
            prev = Previous::default();
            prev_key = &[];
        }
        if e.flags > 3 {
            return Err(std::io::Error::other("unknown entry flags"));
        }
        let (key_len, value_len) = (u64::from(e.key_len), u64::from(e.value_len));
        let residual = e
            .value_offset
            .wrapping_sub(prev.predict(e.flags, key_len, value_len));
        let mut packed = zigzag(residual) << 4 | u64::from(e.flags);
        if i as u64 % RESTART != 0 && key_len == prev.key_len {
            packed |= SAME_KEY_LEN;
        }
        if i as u64 % RESTART != 0 && value_len == prev.value_len {
            packed |= SAME_VALUE_LEN;
        }
        put_varint(&mut coded, packed);
        if packed & SAME_KEY_LEN == 0 {
            put_varint(&mut coded, key_len);
        }
        if packed & SAME_VALUE_LEN == 0 {
            put_varint(&mut coded, value_len);
        }
        prev = Previous {
            value_offset: e.value_offset,
            key_len,
            value_len,
            inline: !e.is_overflow(),
        };
        if let Some(keys) = keys {
            let key = keys
                .get(e.key_start as usize..e.key_start as usize + e.key_len as usize)
                .ok_or_else(|| std::io::Error::other("an entry's key lies outside the keys"))?;
            let shared = prev_key.iter().zip(key).take_while(|(a, b)| a == b).count();
            put_varint(&mut coded_keys, shared as u64);
            coded_keys.extend_from_slice(&key[shared..]);
            prev_key = key;
        }
        key_start += key_len;
        value_bytes += value_len;
        largest_span = largest_span.max(e.span().1);
    }
    let mut table = Vec::with_capacity(rows.len() * TABLE_ENTRY);
    let ends = [coded.len() as u64, coded_keys.len() as u64];
    for (i, row) in rows.iter().enumerate() {
        let next = rows.get(i + 1).map_or(ends, |r| [r[0], r[1]]);
        let entries_sum = checksum(&coded[row[0] as usize..next[0] as usize]);
        let keys_sum = checksum(&coded_keys[row[1] as usize..next[1] as usize]);
        for w in [row[0], row[1], row[2], entries_sum, keys_sum] {
            table.extend_from_slice(&w.to_le_bytes());
        }
    }
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    let flags = if keys.is_some() { HAS_KEYS } else { 0 };
    let words = identity.words().into_iter().chain([
        entries.len() as u64,
        key_start,
        coded.len() as u64,
        value_bytes,
        coded_keys.len() as u64,
        checksum(&table),
        flags,
        largest_span,
    ]);
    for (i, w) in words.enumerate() {
        h[16 + 8 * i..24 + 8 * i].copy_from_slice(&w.to_le_bytes());
    }
    let sum = checksum(&h[..HEADER_LEN - 8]);
    h[HEADER_LEN - 8..].copy_from_slice(&sum.to_le_bytes());
    out.write_all(&h)?;
    out.write_all(&coded)?;
    out.write_all(&table)?;
    out.write_all(&coded_keys)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: u64) -> u64 {
    let v = v as i64;
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> u64 {
    (v >> 1) ^ (v & 1).wrapping_neg()
}

/// Reads a varint off the front of `src`.
#[inline(always)]
fn varint(src: &mut &[u8]) -> Option<u64> {
    let mut r = Reader(src);
    let v = r.varint();
    *src = r.0;
    v
}

/// Reads varints and byte runs off the front of a slice.
struct Reader<'b>(&'b [u8]);

impl<'b> Reader<'b> {
    fn varint(&mut self) -> Option<u64> {
        // Most varints here are one byte (lengths under 128).
        if let Some((&b, rest)) = self.0.split_first() {
            if b < 0x80 {
                self.0 = rest;
                return Some(u64::from(b));
            }
        }
        let mut v = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Some(v);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'b [u8]> {
        let (run, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(run)
    }
}

/// A 64-bit checksum, a word at a time. Each step is a bijection of the
/// state for a given word, so changing any one word (any bit flip)
/// always changes the result; the length is mixed in last, so appending
/// or cutting zero bytes does too.
pub fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mix = |h: u64, w: u64| {
        let h = (h ^ w).wrapping_mul(K);
        h ^ (h >> 29)
    };
    let mut h = 0x243f_6a88_85a3_08d3u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = mix(h, u64::from_le_bytes(w.try_into().unwrap_or_default()));
    }
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    h = mix(h, u64::from_le_bytes(tail));
    mix(h, bytes.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (SavedIdentity, Vec<RecordEntry>, Vec<u8>) {
        let id = SavedIdentity {
            file_len: 1 << 20,
            txnid: 7,
            meta_page: 1,
            last_pg: 255,
            main_root: 3,
            tree_root: 3,
            page_size: 4096,
            entries: 5,
            digest: 0xdead_beef,
            name_hash: name_hash(None),
            file_mtime_ns: 1_700_000_000_000_000_000,
        };
        let mut keys = Vec::new();
        let mut entries = Vec::new();
        for i in 0..5u64 {
            let key = format!("key{i:03}");
            entries.push(RecordEntry {
                key_start: keys.len() as u64,
                value_offset: 4096 * (2 + i) + 100,
                value_len: 50 + i as u32,
                key_len: key.len() as u16,
                flags: if i == 3 { RecordEntry::OVERFLOW } else { 0 },
            });
            keys.extend_from_slice(key.as_bytes());
        }
        (id, entries, keys)
    }

    fn load_all(bytes: &[u8], id: &SavedIdentity) -> Result<LoadedIndex, Refusal> {
        load(bytes, id, true)
    }

    fn file(id: &SavedIdentity, entries: &[RecordEntry], keys: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write(&mut out, id, entries, Some(keys)).unwrap();
        out
    }

    #[test]
    fn an_index_saved_loads_back_the_same() {
        let (id, entries, keys) = sample();
        let bytes = file(&id, &entries, &keys);
        assert!(bytes.len() < HEADER_LEN + 5 * 24 + keys.len());
        let back = load_all(&bytes, &id).unwrap();
        assert_eq!(back.entries, entries);
        assert_eq!(back.keys, keys);
        // An empty tree too.
        let empty = SavedIdentity { entries: 0, ..id };
        let back = load_all(&file(&empty, &[], &[]), &empty).unwrap();
        assert!(back.entries.is_empty() && back.keys.is_empty());
    }

    #[test]
    fn many_records_round_trip_in_a_few_bytes_each_and_without_keys() {
        let mut rng = 0x1234_5678u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let (mut entries, mut keys) = (Vec::new(), Vec::new());
        // Three chunks between restart points, decoded on threads.
        for i in 0..2 * RESTART + 1000 {
            let key = format!("{:08}_{}", i, "x".repeat((next() % 5) as usize));
            let page = 2 + i / 30;
            let overflow = next() % 7 == 0;
            entries.push(RecordEntry {
                key_start: keys.len() as u64,
                value_offset: if overflow {
                    (1 << 30) + i * 8192 + 16
                } else {
                    page * 4096 + 4000 - (i % 30) * 130
                },
                value_len: (next() % 120) as u32,
                key_len: key.len() as u16,
                flags: u16::from(overflow),
            });
            keys.extend_from_slice(key.as_bytes());
        }
        let id = SavedIdentity {
            entries: entries.len() as u64,
            file_len: 1 << 31,
            ..sample().0
        };
        let bytes = file(&id, &entries, &keys);
        assert!(bytes.len() < 10 * entries.len(), "{} bytes", bytes.len());
        let saved = SavedIndex::open(bytes.clone(), &id, true).unwrap();
        let s = saved.summary();
        assert_eq!(s.records, entries.len() as u64);
        assert_eq!(s.key_bytes, keys.len() as u64);
        let back = saved.to_index(id.file_len).unwrap();
        assert!(back.entries == entries && back.keys == keys);
        let mut raw = vec![0u8; entries.len() * 24];
        saved.decode_into(&mut raw, None, id.file_len).unwrap();
        assert_eq!(raw[24..32], back.entries[1].key_start.to_le_bytes());
        assert!(saved
            .decode_into(&mut raw[24..], None, id.file_len)
            .is_err());
        // A value past the data file's end.
        assert!(saved.decode_into(&mut raw, None, 1 << 30).is_err());
        // Read without its keys: the same entries, from the bytes before
        // the keys only.
        let keyless = SavedIndex::open(bytes.clone(), &id, false).unwrap();
        assert!(keyless.bytes.len() < bytes.len());
        let back = keyless.to_index(id.file_len).unwrap();
        assert!(back.entries == entries && back.keys.is_empty());
        // Saved without keys: smaller, the same entries, refused where
        // keys are asked for.
        let mut out = Vec::new();
        write(&mut out, &id, &entries, None).unwrap();
        assert_eq!(out.len(), keyless.bytes.len());
        assert_eq!(load(&out, &id, true).unwrap_err(), Refusal::NoKeys);
        let back = load(&out, &id, false).unwrap();
        assert!(back.entries == entries && back.keys.is_empty());
    }

    #[test]
    fn parts_decode_alone_and_add_up_to_the_whole() {
        let id = sample().0;
        let mut entries: Vec<RecordEntry> = (0..2 * RESTART + 7)
            .map(|i| RecordEntry {
                key_start: 8 * i,
                value_offset: 4096 * (2 + i / 30) + 16 + (i % 30) * 120,
                value_len: 100 + (i % 3) as u32,
                key_len: 8,
                flags: 0,
            })
            .collect();
        // The largest span in the last part only.
        entries.last_mut().unwrap().value_len = 4000;
        let keys: Vec<u8> = (0..entries.len())
            .flat_map(|i| format!("{i:08}").into_bytes())
            .collect();
        let id = SavedIdentity {
            entries: entries.len() as u64,
            file_len: 1 << 31,
            ..id
        };
        let bytes = file(&id, &entries, &keys);
        let whole = SavedIndex::open(bytes.clone(), &id, true).unwrap();
        let parts: Vec<_> = whole.parts().collect();
        assert_eq!(
            parts,
            [
                0..RESTART,
                RESTART..2 * RESTART,
                2 * RESTART..2 * RESTART + 7
            ]
        );
        let mut want = vec![0u8; entries.len() * 24];
        whole.decode_into(&mut want, None, id.file_len).unwrap();
        for threads in [1, 2, 3] {
            for keyed in [false, true] {
                let index = SavedIndex::open(bytes.clone(), &id, keyed).unwrap();
                let mut out = vec![0xa5u8; entries.len() * 24];
                let mut key_out = vec![0xa5u8; keys.len()];
                let key_area = Some(&mut key_out[..]).filter(|_| keyed);
                let wanted = [false, true, true];
                let found = index
                    .decode_parts_into(&mut out, key_area, id.file_len, &wanted, threads)
                    .unwrap();
                assert!(found[0].is_none());
                let (one, two) = (found[1].unwrap(), found[2].unwrap());
                assert_eq!((one.records, two.records), (RESTART, 7));
                assert_eq!(two.largest_span, 4000);
                // Parts not wanted are left as they were.
                let first = RESTART as usize * 24;
                assert!(out[..first].iter().all(|&b| b == 0xa5));
                assert_eq!(out[first..], want[first..]);
                if keyed {
                    let k = RESTART as usize * 8;
                    assert!(key_out[..k].iter().all(|&b| b == 0xa5));
                    assert_eq!(key_out[k..], keys[k..]);
                }
                // The parts' sizes add up to the header's only with every
                // part in.
                let some = one.and(two);
                assert_eq!(index.check_totals(some), Err(Refusal::Entry(id.entries)));
                let rest = index
                    .decode_parts_into(&mut out, None, id.file_len, &[true, false, false], threads)
                    .unwrap();
                assert!(index.check_totals(some.and(rest[0].unwrap())).is_ok());
            }
        }
        // Damage in a part decoded is refused; in a part left out, not seen.
        let mut damaged = bytes.clone();
        let last_entry_byte = whole.chunks[2].entries.end - 1;
        damaged[last_entry_byte] ^= 1;
        let index = SavedIndex::open(damaged, &id, false).unwrap();
        let mut out = vec![0u8; entries.len() * 24];
        assert_eq!(
            index.decode_parts_into(&mut out, None, id.file_len, &[false, false, true], 2),
            Err(Refusal::Checksum("entries"))
        );
        assert!(index
            .decode_parts_into(&mut out, None, id.file_len, &[true, true, false], 2)
            .is_ok());
        assert!(index.decode_into(&mut out, None, id.file_len).is_err());
        // A wrong number of wanted flags is refused, not guessed.
        assert!(index
            .decode_parts_into(&mut out, None, id.file_len, &[true], 2)
            .is_err());
    }

    #[test]
    fn leaves_written_in_key_order_take_about_a_byte_a_record_without_keys() {
        // liblmdb appends nodes from a leaf's end down: header, key, value,
        // each node rounded up to an even size.
        let (psize, key_len, value_len) = (4096u64, 8u64, 101u64);
        let per_page = (psize - 16) / (2 + 8 + key_len + value_len + 1);
        let (mut entries, mut keys) = (Vec::new(), Vec::new());
        for i in 0..100_000u64 {
            let (page, slot) = (2 + i / per_page, i % per_page);
            let node_end = psize - slot * ((8 + key_len + value_len + 1) & !1);
            let node = node_end - ((8 + key_len + value_len + 1) & !1);
            entries.push(RecordEntry {
                key_start: keys.len() as u64,
                value_offset: page * psize + node + 8 + key_len,
                value_len: value_len as u32,
                key_len: key_len as u16,
                flags: 0,
            });
            keys.extend_from_slice(format!("{i:08}").as_bytes());
        }
        let id = SavedIdentity {
            entries: entries.len() as u64,
            file_len: 1 << 31,
            ..sample().0
        };
        let mut out = Vec::new();
        write(&mut out, &id, &entries, None).unwrap();
        assert!(out.len() < entries.len() * 11 / 10, "{} bytes", out.len());
        assert_eq!(load(&out, &id, false).unwrap().entries, entries);
        let with_keys = file(&id, &entries, &keys);
        assert!(
            with_keys.len() < entries.len() * 4,
            "{} bytes",
            with_keys.len()
        );
        assert_eq!(load_all(&with_keys, &id).unwrap().keys, keys);
    }

    #[test]
    fn truncation_at_every_length_is_refused() {
        let (id, entries, keys) = sample();
        let bytes = file(&id, &entries, &keys);
        for cut in 0..bytes.len() {
            assert!(load_all(&bytes[..cut], &id).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(load_all(&longer, &id).is_err());
    }

    #[test]
    fn every_bit_flip_is_refused() {
        let (id, entries, keys) = sample();
        let bytes = file(&id, &entries, &keys);
        for byte in 0..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[byte] ^= 1 << bit;
                assert!(load_all(&damaged, &id).is_err(), "bit {bit} of byte {byte}");
            }
        }
        // Read without keys: every flip before the keys (one chunk: a
        // table row follows the entries).
        let entries_len = u64::from_le_bytes(bytes[120..128].try_into().unwrap()) as usize;
        for byte in 0..HEADER_LEN + entries_len + TABLE_ENTRY {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[byte] ^= 1 << bit;
                let loaded = load(&damaged, &id, false);
                assert!(loaded.is_err(), "without keys: bit {bit} of byte {byte}");
            }
        }
    }

    #[test]
    fn another_database_state_is_refused_naming_what_differs() {
        let (id, entries, keys) = sample();
        let bytes = file(&id, &entries, &keys);
        let others = [
            SavedIdentity { txnid: 8, ..id },
            SavedIdentity {
                file_len: id.file_len + 4096,
                ..id
            },
            SavedIdentity { meta_page: 0, ..id },
            SavedIdentity { last_pg: 256, ..id },
            SavedIdentity { main_root: 4, ..id },
            SavedIdentity { tree_root: 9, ..id },
            SavedIdentity {
                page_size: 8192,
                ..id
            },
            SavedIdentity { entries: 6, ..id },
            SavedIdentity { digest: 1, ..id },
            SavedIdentity {
                name_hash: name_hash(Some("a")),
                ..id
            },
            SavedIdentity {
                file_mtime_ns: 1,
                ..id
            },
        ];
        for other in others {
            match load_all(&bytes, &other) {
                Err(Refusal::Identity(why)) => assert!(why.contains("(now"), "{why}"),
                r => panic!("{other:?}: {r:?}"),
            }
        }
        assert_ne!(name_hash(Some("")), name_hash(None));
    }

    /// Recomputes the parts' and the header's checksums after `edit`
    /// changed the body (one chunk), as a file made by another program
    /// might be.
    fn resealed(bytes: &[u8], edit: impl FnOnce(&mut Vec<u8>, &mut Vec<u8>)) -> Vec<u8> {
        let word_at = |i: usize| 16 + 8 * (IDENTITY_WORDS + i);
        let word = |i: usize| {
            u64::from_le_bytes(bytes[word_at(i)..word_at(i) + 8].try_into().unwrap()) as usize
        };
        let entries_len = word(2);
        let table_end = HEADER_LEN + entries_len + TABLE_ENTRY;
        let mut coded = bytes[HEADER_LEN..HEADER_LEN + entries_len].to_vec();
        let mut coded_keys = bytes[table_end..].to_vec();
        edit(&mut coded, &mut coded_keys);
        let mut table = vec![0u8; 24];
        table.extend_from_slice(&checksum(&coded).to_le_bytes());
        table.extend_from_slice(&checksum(&coded_keys).to_le_bytes());
        let mut h = bytes[..HEADER_LEN].to_vec();
        let mut set =
            |i: usize, v: u64| h[word_at(i)..word_at(i) + 8].copy_from_slice(&v.to_le_bytes());
        set(2, coded.len() as u64);
        set(4, coded_keys.len() as u64);
        set(5, checksum(&table));
        let sum = checksum(&h[..HEADER_LEN - 8]);
        h[HEADER_LEN - 8..].copy_from_slice(&sum.to_le_bytes());
        [h, coded, table, coded_keys].concat()
    }

    #[test]
    fn entries_that_do_not_decode_or_point_outside_are_refused_even_with_good_sums() {
        let (id, mut entries, keys) = sample();
        entries[4].value_offset = id.file_len;
        assert_eq!(
            load_all(&file(&id, &entries, &keys), &id).unwrap_err(),
            Refusal::Entry(4)
        );
        // Read without keys too.
        let outside = file(&id, &entries, &keys);
        assert_eq!(load(&outside, &id, false).unwrap_err(), Refusal::Entry(4));
        let (id, entries, keys) = sample();
        let bytes = file(&id, &entries, &keys);
        assert!(load_all(&resealed(&bytes, |_, _| {}), &id).is_ok());
        // A varint cut short, a key sharing more than the previous one
        // has, bytes left over.
        let cut = resealed(&bytes, |e, _| {
            e.pop();
            e.push(0x80);
        });
        assert_eq!(load_all(&cut, &id).unwrap_err(), Refusal::Entry(4));
        assert_eq!(load(&cut, &id, false).unwrap_err(), Refusal::Entry(4));
        let left_over = resealed(&bytes, |e, _| e.push(0));
        assert_eq!(load(&left_over, &id, false).unwrap_err(), Refusal::Entry(5));
        let shares = resealed(&bytes, |_, k| k[0] = 3);
        assert_eq!(load_all(&shares, &id).unwrap_err(), Refusal::Entry(0));
        let extra = resealed(&bytes, |_, k| k.push(0));
        assert_eq!(load_all(&extra, &id).unwrap_err(), Refusal::Entry(5));
    }

    #[test]
    fn other_files_are_refused_as_another_format() {
        let (id, _, _) = sample();
        let mut junk = vec![0u8; 4096];
        assert!(matches!(load_all(&junk, &id), Err(Refusal::Format(_))));
        junk[..8].copy_from_slice(&MAGIC);
        junk[8] = 2;
        assert!(matches!(load_all(&junk, &id), Err(Refusal::Format(_))));
    }

    #[test]
    fn checksum_sees_length_and_every_word() {
        assert_ne!(checksum(&[]), checksum(&[0]));
        assert_ne!(checksum(&[0; 8]), checksum(&[0; 16]));
        assert_ne!(checksum(&[1, 2, 3]), checksum(&[1, 2, 4]));
    }
}
