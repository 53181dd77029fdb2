//! Meta pages (pages 0 and 1) and the `MDB_db` tree descriptor.

use super::{le_u16, le_u32, le_u64, page_flags, PAGEHDRSZ};

/// Size of an `MDB_db` record on disk.
pub const MDB_DB_SIZE: usize = 48;

/// A tree descriptor (`MDB_db`): stored twice in each meta page (FREE and
/// MAIN) and as the value of every named database's node in MAIN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MdbDb {
    /// For FREE_DBI in a meta page this is the page size (`mm_psize`).
    pub md_pad: u32,
    /// `md_flags`: the database's `MDB_*` open flags (`MDB_DUPSORT`,
    /// `MDB_INTEGERKEY`, ...) as persisted.
    pub md_flags: u16,
    /// `md_depth`: levels of the tree (1 = the root is a leaf; 0 = empty).
    pub md_depth: u16,
    /// `md_branch_pages`: number of branch pages in the tree.
    pub md_branch_pages: u64,
    /// `md_leaf_pages`: number of leaf pages in the tree.
    pub md_leaf_pages: u64,
    /// `md_overflow_pages`: number of overflow pages (all runs together).
    pub md_overflow_pages: u64,
    /// `md_entries`: number of records (key/value pairs).
    pub md_entries: u64,
    /// `md_root`: page number of the root, `P_INVALID` for an empty tree.
    pub md_root: u64,
}

impl MdbDb {
    /// Reads a descriptor from exactly `MDB_DB_SIZE` bytes.
    pub fn parse(b: &[u8]) -> Option<MdbDb> {
        if b.len() != MDB_DB_SIZE {
            return None;
        }
        Some(MdbDb {
            md_pad: le_u32(b, 0)?,
            md_flags: le_u16(b, 4)?,
            md_depth: le_u16(b, 6)?,
            md_branch_pages: le_u64(b, 8)?,
            md_leaf_pages: le_u64(b, 16)?,
            md_overflow_pages: le_u64(b, 24)?,
            md_entries: le_u64(b, 32)?,
            md_root: le_u64(b, 40)?,
        })
    }

    /// The tree has no pages (`md_root == P_INVALID`).
    pub fn is_empty_tree(&self) -> bool {
        self.md_root == super::P_INVALID
    }
}

/// The contents of one meta page (`MDB_meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MdbMeta {
    /// `mm_magic`: `MDB_MAGIC` (`0xBEEFC0DE`) in any LMDB file.
    pub mm_magic: u32,
    /// `mm_version`: the data format version (`MDB_DATA_VERSION`, 1).
    pub mm_version: u32,
    /// `mm_address`: the fixed map address if created with `MDB_FIXEDMAP`,
    /// else 0. Ignored (we do not map the file).
    pub mm_address: u64,
    /// `mm_mapsize`: the environment's map size in bytes when written.
    pub mm_mapsize: u64,
    /// `mm_dbs[FREE_DBI]`: the free-page tree; its `md_pad` holds the page
    /// size.
    pub free_db: MdbDb,
    /// `mm_dbs[MAIN_DBI]`: the main tree (records, or named databases).
    pub main_db: MdbDb,
    /// `mm_last_pg`: the last page number in use; the file holds at least
    /// `mm_last_pg + 1` pages.
    pub mm_last_pg: u64,
    /// `mm_txnid`: the transaction that wrote this meta page; the higher
    /// of the two meta pages is the current one.
    pub mm_txnid: u64,
}

/// Why a meta page could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaProblem {
    /// Shorter than a page header plus `MDB_meta`.
    TooShort,
    /// `P_META` not set in the page header.
    NotMetaPage {
        /// The header's `mp_flags`.
        mp_flags: u16,
    },
    /// `mm_magic` is not `MDB_MAGIC`.
    BadMagic {
        /// The `mm_magic` found.
        found: u32,
    },
    /// `mm_version` is not a format version we read.
    BadVersion {
        /// The `mm_version` found.
        found: u32,
    },
}

impl std::fmt::Display for MetaProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetaProblem::TooShort => write!(f, "file too short to hold a meta page"),
            MetaProblem::NotMetaPage { mp_flags } => {
                write!(f, "page flags {mp_flags:#06x} lack P_META")
            }
            MetaProblem::BadMagic { found } => {
                write!(
                    f,
                    "magic {found:#010x}, expected {:#010x}",
                    super::MDB_MAGIC
                )
            }
            MetaProblem::BadVersion { found } => write!(
                f,
                "data format version {found}, expected {}",
                super::MDB_DATA_VERSION
            ),
        }
    }
}

/// Bytes of a meta page that hold the header and `MDB_meta`.
pub const META_PAGE_PREFIX: usize = PAGEHDRSZ + 136;

impl MdbMeta {
    /// Parses the start of a meta page (at least `META_PAGE_PREFIX` bytes).
    pub fn parse(page: &[u8]) -> Result<MdbMeta, MetaProblem> {
        if page.len() < META_PAGE_PREFIX {
            return Err(MetaProblem::TooShort);
        }
        let mp_flags = le_u16(page, 10).ok_or(MetaProblem::TooShort)?;
        if mp_flags & page_flags::P_META == 0 {
            return Err(MetaProblem::NotMetaPage { mp_flags });
        }
        let m = &page[PAGEHDRSZ..META_PAGE_PREFIX];
        let mm_magic = le_u32(m, 0).ok_or(MetaProblem::TooShort)?;
        if mm_magic != super::MDB_MAGIC {
            return Err(MetaProblem::BadMagic { found: mm_magic });
        }
        let mm_version = le_u32(m, 4).ok_or(MetaProblem::TooShort)?;
        if mm_version != super::MDB_DATA_VERSION {
            return Err(MetaProblem::BadVersion { found: mm_version });
        }
        let db = |at: usize| MdbDb::parse(&m[at..at + MDB_DB_SIZE]).ok_or(MetaProblem::TooShort);
        Ok(MdbMeta {
            mm_magic,
            mm_version,
            mm_address: le_u64(m, 8).ok_or(MetaProblem::TooShort)?,
            mm_mapsize: le_u64(m, 16).ok_or(MetaProblem::TooShort)?,
            free_db: db(24)?,
            main_db: db(72)?,
            mm_last_pg: le_u64(m, 120).ok_or(MetaProblem::TooShort)?,
            mm_txnid: le_u64(m, 128).ok_or(MetaProblem::TooShort)?,
        })
    }

    /// Page size recorded when the file was created (`mm_psize`).
    pub fn page_size(&self) -> u32 {
        self.free_db.md_pad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta_page(txnid: u64) -> Vec<u8> {
        let mut p = vec![0u8; 4096];
        p[10..12].copy_from_slice(&page_flags::P_META.to_le_bytes());
        p[16..20].copy_from_slice(&super::super::MDB_MAGIC.to_le_bytes());
        p[20..24].copy_from_slice(&1u32.to_le_bytes());
        p[40..44].copy_from_slice(&4096u32.to_le_bytes());
        p[88 + 40..88 + 48].copy_from_slice(&u64::MAX.to_le_bytes());
        p[136..144].copy_from_slice(&7u64.to_le_bytes());
        p[144..152].copy_from_slice(&txnid.to_le_bytes());
        p
    }

    #[test]
    fn parses_fields_at_their_offsets() {
        let m = MdbMeta::parse(&meta_page(42)).unwrap();
        assert_eq!(m.page_size(), 4096);
        assert_eq!(m.mm_txnid, 42);
        assert_eq!(m.mm_last_pg, 7);
        assert!(m.main_db.is_empty_tree());
    }

    #[test]
    fn rejects_foreign_pages() {
        let mut p = meta_page(1);
        p[16] ^= 1;
        assert!(matches!(
            MdbMeta::parse(&p),
            Err(MetaProblem::BadMagic { .. })
        ));
        let mut p = meta_page(1);
        p[20] = 2;
        assert_eq!(
            MdbMeta::parse(&p),
            Err(MetaProblem::BadVersion { found: 2 })
        );
        let mut p = meta_page(1);
        p[10] = 0;
        assert!(matches!(
            MdbMeta::parse(&p),
            Err(MetaProblem::NotMetaPage { .. })
        ));
        assert_eq!(MdbMeta::parse(&p[..100]), Err(MetaProblem::TooShort));
    }
}
