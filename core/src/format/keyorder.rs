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
            KeyOrder::Bytes => bytewise(a, b),
            KeyOrder::ReverseBytes => a.iter().rev().cmp(b.iter().rev()),
            KeyOrder::Integer => a
                .len()
                .cmp(&b.len())
                .then_with(|| a.iter().rev().cmp(b.iter().rev())),
        }
    }
}

/// `a.cmp(b)` on bytes, eight at a time: the index scan compares every
/// key with the one before it, and most keys are a few words long, where
/// a call to `memcmp` per pair was a visible part of the scan's CPU.
fn bytewise(a: &[u8], b: &[u8]) -> Ordering {
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    for (p, q) in (&mut x).zip(&mut y) {
        let (p, q) = (word(p), word(q));
        if p != q {
            return p.cmp(&q);
        }
    }
    let n = a.len().min(b.len()) / 8 * 8;
    for (p, q) in a[n..].iter().zip(&b[n..]) {
        if p != q {
            return p.cmp(q);
        }
    }
    a.len().cmp(&b.len())
}

/// Eight bytes as a number ordered as the bytes are.
fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    u64::from_be_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_match_liblmdb_comparators() {
        assert_eq!(KeyOrder::Bytes.compare(b"ab", b"abc"), Ordering::Less);
        assert_eq!(KeyOrder::Bytes.compare(b"b", b"abc"), Ordering::Greater);
        // Bytewise over every split of words and tails: as slices compare.
        let keys: Vec<Vec<u8>> = (0..40u32)
            .map(|i| {
                let len = (i * 7 % 19) as usize;
                (0..len)
                    .map(|j| (i as usize * 31 + j * 17) as u8 % 3)
                    .collect()
            })
            .chain([vec![], vec![0; 8], vec![0; 9], vec![255; 16], vec![1; 17]])
            .collect();
        for a in &keys {
            for b in &keys {
                assert_eq!(KeyOrder::Bytes.compare(a, b), a.cmp(b), "{a:?} {b:?}");
            }
        }
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
