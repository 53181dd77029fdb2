//! LMDB's on-disk format (liblmdb 0.9.x, 64-bit little-endian builds).
//!
//! Plain structures named as in `mdb.c` (`mp_pgno`, `md_root`, ...) and the
//! bounds-checked code that reads them out of page-sized byte buffers. No
//! I/O happens here: callers hand in the bytes, which is what lets the fuzz
//! target reach every parser directly.

pub mod keyorder;
pub mod meta;
pub mod page;

pub use keyorder::KeyOrder;
pub use meta::{MdbDb, MdbMeta};
pub use page::{BranchNode, LeafNode, LeafValue, PageHeader, TreePage};

/// Size of the page header that starts every branch, leaf, overflow and meta
/// page (`PAGEHDRSZ`).
pub const PAGEHDRSZ: usize = 16;
/// Size of a node header inside a branch or leaf page (`NODESIZE`).
pub const NODESIZE: usize = 8;
/// Root page number of an empty tree (`P_INVALID`).
pub const P_INVALID: u64 = u64::MAX;
/// Largest key liblmdb 0.9 accepts by default (`MDB_MAXKEYSIZE`).
pub const MDB_MAXKEYSIZE: usize = 511;
/// Meta page magic (`MDB_MAGIC`), in `mm_magic` of both meta pages.
pub const MDB_MAGIC: u32 = 0xBEEF_C0DE;
/// Data format version (`MDB_DATA_VERSION`), in `mm_version`: the only one
/// liblmdb 0.9 writes.
pub const MDB_DATA_VERSION: u32 = 1;
/// Page sizes liblmdb can have written: the OS page size, at most
/// `MAX_PAGESIZE` (32 KiB). We also accept 64 KiB pages (some ARM and POWER
/// kernels) since the format does not change. This is the smallest.
pub const MIN_PAGESIZE: u32 = 512;
/// The largest page size we accept (see [`MIN_PAGESIZE`]).
pub const MAX_PAGESIZE: u32 = 65536;

/// Page flags (`mp_flags`).
pub mod page_flags {
    /// `P_BRANCH`: a branch page (keys and child page numbers).
    pub const P_BRANCH: u16 = 0x01;
    /// `P_LEAF`: a leaf page (keys and values).
    pub const P_LEAF: u16 = 0x02;
    /// `P_OVERFLOW`: the first page of an overflow run (one large value).
    pub const P_OVERFLOW: u16 = 0x04;
    /// `P_META`: one of the two meta pages (0 and 1).
    pub const P_META: u16 = 0x08;
    /// `P_DIRTY`: modified in a write transaction (runtime only).
    pub const P_DIRTY: u16 = 0x10;
    /// `P_LEAF2`: a leaf of fixed-size duplicates (`MDB_DUPFIXED`).
    pub const P_LEAF2: u16 = 0x20;
    /// `P_SUBP`: a sub-page embedded in a node (duplicates).
    pub const P_SUBP: u16 = 0x40;
    /// `P_LOOSE`: freed in the current write transaction (runtime only).
    pub const P_LOOSE: u16 = 0x4000;
    /// `P_KEEP`: kept from spilling (runtime only).
    pub const P_KEEP: u16 = 0x8000;
    /// Bits that only mean something while a write transaction holds the
    /// page in memory; a page may reach the disk with them set.
    pub const RUNTIME_ONLY: u16 = P_DIRTY | P_LOOSE | P_KEEP;
}

/// Leaf node flags (`mn_flags`).
pub mod node_flags {
    /// `F_BIGDATA`: the value is in an overflow run; the node's data is
    /// the run's first page number.
    pub const F_BIGDATA: u16 = 0x01;
    /// `F_SUBDATA`: the value is a named database's `MDB_db`.
    pub const F_SUBDATA: u16 = 0x02;
    /// `F_DUPDATA`: the value is a sub-page or sub-tree of duplicates.
    pub const F_DUPDATA: u16 = 0x04;
}

/// Database flags stored in `md_flags` (the persistent `mdb_dbi_open` flags).
pub mod db_flags {
    /// `MDB_REVERSEKEY`: keys compare as strings read backwards.
    pub const MDB_REVERSEKEY: u16 = 0x02;
    /// `MDB_DUPSORT`: a key may have several (sorted) values.
    pub const MDB_DUPSORT: u16 = 0x04;
    /// `MDB_INTEGERKEY`: keys are native unsigned integers (`u32` or
    /// `usize`), compared as numbers.
    pub const MDB_INTEGERKEY: u16 = 0x08;
    /// `MDB_DUPFIXED`: with `MDB_DUPSORT`, all values of a key have one size.
    pub const MDB_DUPFIXED: u16 = 0x10;
    /// `MDB_INTEGERDUP`: with `MDB_DUPSORT`, values are native integers.
    pub const MDB_INTEGERDUP: u16 = 0x20;
    /// `MDB_REVERSEDUP`: with `MDB_DUPSORT`, values compare backwards.
    pub const MDB_REVERSEDUP: u16 = 0x40;
    /// Names as `mdb_dump` prints them in its header, in its order.
    pub const DUMP_NAMES: [(u16, &str); 6] = [
        (MDB_REVERSEKEY, "reversekey"),
        (MDB_DUPSORT, "dupsort"),
        (MDB_INTEGERKEY, "integerkey"),
        (MDB_DUPFIXED, "dupfixed"),
        (MDB_INTEGERDUP, "integerdup"),
        (MDB_REVERSEDUP, "reversedup"),
    ];
}

/// Number of pages an overflow value of `size` bytes occupies (`OVPAGES`):
/// the header sits only on the first page.
pub fn overflow_pages(size: u64, psize: u32) -> u64 {
    (PAGEHDRSZ as u64 - 1 + size) / psize as u64 + 1
}

/// Little-endian field readers over a slice. They return `None` when the
/// field does not fit, so every caller must say what a short read means.
pub(crate) fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

pub(crate) fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

pub(crate) fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_page_count_matches_ovpages() {
        // A value that exactly fills one page after the header.
        assert_eq!(overflow_pages(4096 - 16, 4096), 1);
        assert_eq!(overflow_pages(4096 - 15, 4096), 2);
        assert_eq!(overflow_pages(196_608 + 20, 4096), 49);
    }

    #[test]
    fn field_readers_refuse_short_slices() {
        let b = [1u8, 2, 3];
        assert_eq!(le_u16(&b, 1), Some(0x0302));
        assert_eq!(le_u16(&b, 2), None);
        assert_eq!(le_u32(&b, 0), None);
        assert_eq!(le_u64(&b, usize::MAX), None);
    }
}
