//! The key orders liblmdb can give a tree, so that the index can check that
//! records arrive strictly ascending (a cheap, strong corruption check).

use std::cmp::Ordering;

use super::db_flags;

/// How a tree's keys are ordered, from its `md_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOrder {
    /// `mdb_cmp_memn`: bytewise, a shorter key first when one is a prefix.
    Bytes,
    /// `mdb_cmp_memnr` (`MDB_REVERSEKEY`): bytewise from the last byte.
    ReverseBytes,
    /// `mdb_cmp_cint` (`MDB_INTEGERKEY`): native unsigned integers, which on
    /// a little-endian machine is bytewise from the last byte for keys of
    /// one size.
    Integer,
}

impl KeyOrder {
    /// The order of a tree with these `md_flags` (`MDB_REVERSEKEY` wins
    /// over `MDB_INTEGERKEY`, as in `mdb_default_cmp`).
    pub fn for_flags(md_flags: u16) -> KeyOrder {
        if md_flags & db_flags::MDB_REVERSEKEY != 0 {
            KeyOrder::ReverseBytes
        } else if md_flags & db_flags::MDB_INTEGERKEY != 0 {
            KeyOrder::Integer
        } else {
            KeyOrder::Bytes
        }
    }

    /// Compares two keys as liblmdb would; integer keys of different
    /// sizes order by size first.
    pub fn compare(self, a: &[u8], b: &[u8]) -> Ordering {
        match self {
            KeyOrder::Bytes => a.cmp(b),
            KeyOrder::ReverseBytes => a.iter().rev().cmp(b.iter().rev()),
            KeyOrder::Integer => a
                .len()
                .cmp(&b.len())
                .then_with(|| a.iter().rev().cmp(b.iter().rev())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_match_liblmdb_comparators() {
        assert_eq!(KeyOrder::Bytes.compare(b"ab", b"abc"), Ordering::Less);
        assert_eq!(KeyOrder::Bytes.compare(b"b", b"abc"), Ordering::Greater);
        assert_eq!(KeyOrder::ReverseBytes.compare(b"za", b"ab"), Ordering::Less);
        assert_eq!(KeyOrder::ReverseBytes.compare(b"b", b"ab"), Ordering::Less);
        let k = |v: u32| v.to_le_bytes();
        assert_eq!(KeyOrder::Integer.compare(&k(255), &k(256)), Ordering::Less);
        assert_eq!(
            KeyOrder::Integer.compare(&k(70000), &k(3)),
            Ordering::Greater
        );
    }
}
