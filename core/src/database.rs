//! Opening a data file: choosing the current meta page and the tree to read.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::meta::{MetaProblem, META_PAGE_PREFIX};
use crate::format::{db_flags, KeyOrder, MdbDb, MdbMeta, MAX_PAGESIZE, MIN_PAGESIZE};
use crate::index::{self, IndexOptions, RecordIndex};
use crate::source::{FileSource, ReadAt};

/// An LMDB data file opened for reading with positioned reads.
pub struct Database<R: ReadAt = FileSource> {
    source: R,
    meta: MdbMeta,
    /// Pages that may be referenced: `min(mm_last_pg + 1, whole pages in
    /// the file)`. Anything at or past this is corrupt or truncated.
    page_limit: u64,
}

/// One B+tree of the file: MAIN, or a named database stored in MAIN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// `None` for MAIN.
    pub name: Option<String>,
    /// The tree's descriptor: from the current meta page for MAIN, from
    /// its node in MAIN for a named database.
    pub db: MdbDb,
    /// Pages of MAIN read to find a named database (0 for MAIN).
    pub lookup_pages: u64,
}

impl Tree {
    /// How the tree's keys are ordered (from `md_flags`).
    pub fn key_order(&self) -> KeyOrder {
        KeyOrder::for_flags(self.db.md_flags)
    }
}

/// Resolves what users pass: a directory holding `data.mdb` (LMDB's default
/// layout) or the data file itself (`MDB_NOSUBDIR`).
pub fn data_file_path(path: &Path) -> Result<PathBuf> {
    let meta = std::fs::metadata(path).map_err(|e| Error::NotFound {
        path: path.to_owned(),
        reason: format!("{e}"),
    })?;
    if meta.is_dir() {
        let data = path.join("data.mdb");
        match std::fs::metadata(&data) {
            Ok(m) if m.is_file() => {}
            Ok(_) => {
                return Err(Error::NotFound {
                    path: data,
                    reason: "not a regular file (FIFOs, devices and sockets are refused)".into(),
                })
            }
            Err(_) => {
                return Err(Error::NotFound {
                    path: path.to_owned(),
                    reason: "directory holds no data.mdb".into(),
                })
            }
        }
        Ok(data)
    } else if !meta.is_file() {
        // A FIFO or device would block the open or read without end;
        // `stat` tells without opening it.
        Err(Error::NotFound {
            path: path.to_owned(),
            reason: "not a regular file (FIFOs, devices and sockets are refused)".into(),
        })
    } else {
        Ok(path.to_owned())
    }
}

impl Database<FileSource> {
    /// Opens a database directory or data file. Reads only the two meta
    /// pages; needs neither `lock.mdb` nor write permission.
    pub fn open(path: &Path) -> Result<Database<FileSource>> {
        let file = data_file_path(path)?;
        Database::from_source(FileSource::open(&file)?)
    }
}

impl<R: ReadAt> Database<R> {
    /// Opens the database held by `source`: reads and checks both meta
    /// pages and keeps the current one.
    pub fn from_source(source: R) -> Result<Database<R>> {
        let meta = pick_meta(&source)?;
        let psize = meta.page_size() as u64;
        let page_limit = (meta.mm_last_pg.saturating_add(1)).min(source.len() / psize);
        Ok(Database {
            source,
            meta,
            page_limit,
        })
    }

    /// The source the database reads from.
    pub fn source(&self) -> &R {
        &self.source
    }

    /// The data file's path (or a [`MemSource`](crate::MemSource)'s name).
    pub fn path(&self) -> &Path {
        self.source.path()
    }

    /// Length of the data file in bytes.
    pub fn file_len(&self) -> u64 {
        self.source.len()
    }

    /// The meta page liblmdb would use: the valid one with the larger txnid.
    pub fn meta(&self) -> &MdbMeta {
        &self.meta
    }

    /// The page size in bytes (the meta page's `mm_psize`).
    pub fn page_size(&self) -> u32 {
        self.meta.page_size()
    }

    /// Pages that may be referenced: `min(mm_last_pg + 1, whole pages in
    /// the file)`; a page number at or past it is corrupt or truncated.
    pub fn page_limit(&self) -> u64 {
        self.page_limit
    }

    /// The map size `mdb_env_info` reports for a reader that set none: the
    /// recorded one, raised to cover every committed page.
    pub fn map_size(&self) -> u64 {
        let committed = self
            .meta
            .mm_last_pg
            .saturating_add(1)
            .saturating_mul(self.page_size() as u64);
        self.meta.mm_mapsize.max(committed)
    }

    /// A digest of what identifies this snapshot of this database for
    /// `tree`: the current meta page's txnid, last page and both tree
    /// descriptors, the tree read, the page size, the file's length and
    /// the bytes of the tree's root page (FNV-1a 64 over all of them). Two
    /// databases that agree on entry count, txnid and page size still
    /// differ here unless their trees are shaped alike in files of one
    /// length and their root pages, which hold the keys that divide the
    /// records, are the same bytes. A root page that cannot be read
    /// counts as empty: the scan that follows reports the failure.
    pub fn identity_digest(&self, tree: &Tree) -> u64 {
        let m = &self.meta;
        let db_words = |d: &MdbDb| {
            [
                u64::from(d.md_pad),
                u64::from(d.md_flags),
                u64::from(d.md_depth),
                d.md_branch_pages,
                d.md_leaf_pages,
                d.md_overflow_pages,
                d.md_entries,
                d.md_root,
            ]
        };
        let mut words = vec![m.mm_txnid, m.mm_last_pg, self.source.len()];
        words.extend(db_words(&m.free_db));
        words.extend(db_words(&m.main_db));
        words.extend(db_words(&tree.db));
        let mut root = Vec::new();
        if !tree.db.is_empty_tree() && tree.db.md_root < self.page_limit {
            root = vec![0u8; self.page_size() as usize];
            let at = tree.db.md_root.saturating_mul(self.page_size() as u64);
            if self.source.read_exact_at(&mut root, at).is_err() {
                root.clear();
            }
        }
        words
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .chain(root)
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            })
    }

    /// The unnamed main database.
    pub fn main_tree(&self) -> Result<Tree> {
        let tree = Tree {
            name: None,
            db: self.meta.main_db,
            lookup_pages: 0,
        };
        self.check_supported(&tree)?;
        Ok(tree)
    }

    /// A named database, found by descending MAIN (reads `depth` pages).
    pub fn named_tree(&self, name: &str) -> Result<Tree> {
        let main = Tree {
            name: None,
            db: self.meta.main_db,
            lookup_pages: 0,
        };
        let not_found = |detail: &str| Error::NoSuchDatabase {
            path: self.path().to_owned(),
            name: name.to_owned(),
            detail: detail.to_owned(),
        };
        let (found, lookup_pages) = index::lookup(self, &main, name.as_bytes())?;
        let node = found.ok_or_else(|| not_found(""))?;
        if !node.is_subdatabase {
            return Err(not_found("MAIN holds that key as a plain record"));
        }
        let db =
            MdbDb::parse(&node.value).ok_or_else(|| not_found("its descriptor is not 48 bytes"))?;
        let tree = Tree {
            name: Some(name.to_owned()),
            db,
            lookup_pages,
        };
        self.check_supported(&tree)?;
        Ok(tree)
    }

    /// `Some(name)` selects a named database, `None` MAIN.
    pub fn tree(&self, name: Option<&str>) -> Result<Tree> {
        match name {
            Some(n) => self.named_tree(n),
            None => self.main_tree(),
        }
    }

    /// Builds the exact record index of `tree`.
    pub fn build_index(&self, tree: &Tree, options: &IndexOptions) -> Result<RecordIndex> {
        index::build(self, tree, options)
    }

    fn check_supported(&self, tree: &Tree) -> Result<()> {
        let flags = tree.db.md_flags;
        let unsupported = |feature: &'static str| Error::Unsupported {
            path: self.path().to_owned(),
            feature,
            detail: match &tree.name {
                Some(n) => format!("database {n:?}, md_flags {flags:#06x}"),
                None => format!("main database, md_flags {flags:#06x}"),
            },
        };
        if flags & db_flags::MDB_DUPSORT != 0 {
            return Err(unsupported("duplicate keys (MDB_DUPSORT)"));
        }
        if flags & (db_flags::MDB_DUPFIXED | db_flags::MDB_INTEGERDUP | db_flags::MDB_REVERSEDUP)
            != 0
        {
            return Err(unsupported(
                "duplicate-value flags (MDB_DUPFIXED/MDB_INTEGERDUP/MDB_REVERSEDUP)",
            ));
        }
        Ok(())
    }

    /// Turns a page-level problem into an error that names the page.
    pub(crate) fn corrupt(&self, pgno: u64, reason: impl std::fmt::Display) -> Error {
        Error::Corrupt {
            path: self.path().to_owned(),
            pgno,
            offset: pgno.saturating_mul(self.page_size() as u64),
            reason: reason.to_string(),
        }
    }
}

/// The meta page a liblmdb reader uses: the larger txnid of the two is the
/// last committed transaction, and a commit writes its meta page to slot
/// `txnid & 1`, so that slot is read (`mdb_txn_renew0` reads
/// `me_metas[txnid & 1]`). A txnid damaged to a larger value of the wrong
/// parity for its slot therefore sends the reader to the other page, as it
/// sends liblmdb; a fresh file (both txnids 0) reads page 0.
pub(crate) fn current_meta(meta0: MdbMeta, meta1: MdbMeta) -> MdbMeta {
    let last = meta0.mm_txnid.max(meta1.mm_txnid);
    if last & 1 == 1 {
        meta1
    } else {
        meta0
    }
}

/// Reads both meta pages the way `mdb_env_read_header` does: page 0 gives
/// the page size that locates page 1, both must be valid (meta flag, magic,
/// version), and [`current_meta`] chooses between them.
fn pick_meta<R: ReadAt>(source: &R) -> Result<MdbMeta> {
    let not_lmdb = |page: u32, p: MetaProblem| Error::NotLmdb {
        path: source.path().to_owned(),
        reason: format!("meta page {page}: {p}"),
    };
    let mut buf = [0u8; META_PAGE_PREFIX];
    if source.len() < META_PAGE_PREFIX as u64 {
        return Err(not_lmdb(0, MetaProblem::TooShort));
    }
    source.read_exact_at(&mut buf, 0)?;
    let meta0 = MdbMeta::parse(&buf).map_err(|p| not_lmdb(0, p))?;
    let psize = meta0.page_size();
    if !psize.is_power_of_two() || !(MIN_PAGESIZE..=MAX_PAGESIZE).contains(&psize) {
        return Err(Error::NotLmdb {
            path: source.path().to_owned(),
            reason: format!("meta page 0 records an impossible page size {psize}"),
        });
    }
    source.read_exact_at(&mut buf, psize as u64)?;
    let meta1 = MdbMeta::parse(&buf).map_err(|p| not_lmdb(1, p))?;
    let meta = current_meta(meta0, meta1);
    if meta.page_size() != psize {
        return Err(Error::Corrupt {
            path: source.path().to_owned(),
            pgno: 1,
            offset: psize as u64,
            reason: format!(
                "meta pages disagree on the page size ({psize} and {})",
                meta.page_size()
            ),
        });
    }
    if meta.mm_last_pg < 1 {
        return Err(Error::Corrupt {
            path: source.path().to_owned(),
            pgno: 0,
            offset: 0,
            reason: format!(
                "last page number {} leaves no room for the meta pages",
                meta.mm_last_pg
            ),
        });
    }
    Ok(meta)
}
