//! Branch and leaf pages and their nodes.
//!
//! Every offset read from the page is checked against the page's bounds
//! before use: a damaged page yields a [`PageProblem`] naming the node and
//! field, never a panic or a read outside the buffer.

use super::{le_u16, le_u64, node_flags, page_flags, NODESIZE, PAGEHDRSZ};

/// The 16-byte header at the start of every page (`MDB_page`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeader {
    /// `mp_pgno`: the page's own number (its file offset divided by the
    /// page size); checked against the number we read it as.
    pub mp_pgno: u64,
    /// `mp_pad`: key size on LEAF2 pages, unused otherwise.
    pub mp_pad: u16,
    /// `mp_flags`: `P_BRANCH`, `P_LEAF`, `P_OVERFLOW`, `P_META`, ... (see
    /// [`page_flags`]).
    pub mp_flags: u16,
    /// `mp_lower`: end of the node pointer array, in bytes from the page
    /// start (so `(mp_lower - PAGEHDRSZ) / 2` nodes).
    pub mp_lower: u16,
    /// `mp_upper`: start of the node area, in bytes from the page start.
    pub mp_upper: u16,
}

impl PageHeader {
    /// Reads the header from the first 16 bytes of `page`; `None` if
    /// shorter. Checks nothing else.
    pub fn parse(page: &[u8]) -> Option<PageHeader> {
        Some(PageHeader {
            mp_pgno: le_u64(page, 0)?,
            mp_pad: le_u16(page, 8)?,
            mp_flags: le_u16(page, 10)?,
            mp_lower: le_u16(page, 12)?,
            mp_upper: le_u16(page, 14)?,
        })
    }

    /// Page count of an overflow run; shares bytes with lower/upper.
    pub fn mp_pages(&self) -> u32 {
        self.mp_lower as u32 | (self.mp_upper as u32) << 16
    }

    /// The flags that say what the page is, without runtime-only bits.
    pub fn kind_flags(&self) -> u16 {
        self.mp_flags & !page_flags::RUNTIME_ONLY
    }
}

/// What is wrong with a page, in the page's own terms. The caller adds the
/// page number and file offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageProblem {
    /// The header's `mp_pgno` is not the page number we read.
    WrongPgno {
        /// The `mp_pgno` the header holds.
        found: u64,
    },
    /// Neither `P_BRANCH` nor `P_LEAF` where the tree needs one.
    NotATreePage {
        /// The header's `mp_flags`.
        mp_flags: u16,
    },
    /// A `P_LEAF2` page (fixed-size duplicates, `MDB_DUPFIXED`): not read.
    Leaf2,
    /// `P_SUBP` set on a page read from the file (sub-pages only live
    /// inside a node).
    SubPage,
    /// `mp_lower`/`mp_upper` do not bound a node area inside the page.
    BadBounds {
        /// The header's `mp_lower`.
        mp_lower: u16,
        /// The header's `mp_upper`.
        mp_upper: u16,
    },
    /// A node pointer points outside the node area.
    NodeOutOfPage {
        /// The node's position in the page (0-based).
        index: usize,
        /// The pointer's byte offset from the page start.
        offset: u16,
    },
    /// A node's key runs past the page end.
    KeyOutOfPage {
        /// The node's position in the page (0-based).
        index: usize,
        /// `mn_ksize`: the key's length in bytes.
        ksize: u16,
    },
    /// A key longer than any liblmdb build writes (a damaged size).
    KeyTooLong {
        /// The node's position in the page (0-based).
        index: usize,
        /// `mn_ksize`: the key's length in bytes.
        ksize: u16,
    },
    /// An inline value runs past the page end.
    DataOutOfPage {
        /// The node's position in the page (0-based).
        index: usize,
        /// The value's length in bytes (`mn_lo | mn_hi << 16`).
        dsize: u32,
    },
    /// `mn_flags` holds bits liblmdb does not define.
    BadNodeFlags {
        /// The node's position in the page (0-based).
        index: usize,
        /// The node's `mn_flags`.
        flags: u16,
    },
    /// `F_DUPDATA`: the key has duplicate values (`MDB_DUPSORT`): not read.
    DuplicateData {
        /// The node's position in the page (0-based).
        index: usize,
    },
    /// `F_SUBDATA` on a value that is not a 48-byte `MDB_db`.
    BadSubData {
        /// The node's position in the page (0-based).
        index: usize,
        /// The value's length in bytes.
        dsize: u32,
    },
    /// A branch or leaf page with no nodes.
    Empty,
}

impl std::fmt::Display for PageProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use PageProblem::*;
        match self {
            WrongPgno { found } => write!(f, "page header says it is page {found}"),
            NotATreePage { mp_flags } => write!(
                f,
                "expected a branch or leaf page, found flags {mp_flags:#06x}"
            ),
            Leaf2 => write!(f, "LEAF2 page (fixed-size duplicates)"),
            SubPage => write!(f, "sub-page flag on a top-level page"),
            BadBounds { mp_lower, mp_upper } => {
                write!(
                    f,
                    "bad free-space bounds mp_lower={mp_lower} mp_upper={mp_upper}"
                )
            }
            NodeOutOfPage { index, offset } => {
                write!(f, "node {index} offset {offset} lies outside the node area")
            }
            KeyOutOfPage { index, ksize } => {
                write!(
                    f,
                    "node {index} key of {ksize} bytes runs past the page end"
                )
            }
            KeyTooLong { index, ksize } => {
                write!(
                    f,
                    "node {index} key of {ksize} bytes exceeds what liblmdb writes"
                )
            }
            DataOutOfPage { index, dsize } => {
                write!(
                    f,
                    "node {index} value of {dsize} bytes runs past the page end"
                )
            }
            BadNodeFlags { index, flags } => {
                write!(f, "node {index} has unknown flags {flags:#06x}")
            }
            DuplicateData { index } => write!(f, "node {index} holds duplicate values (F_DUPDATA)"),
            BadSubData { index, dsize } => write!(
                f,
                "node {index} marks a sub-database but its value is {dsize} bytes, not 48"
            ),
            Empty => write!(f, "page has no nodes"),
        }
    }
}

/// A validated branch or leaf page borrowed from a read buffer.
#[derive(Debug, Clone, Copy)]
pub struct TreePage<'a> {
    bytes: &'a [u8],
    header: PageHeader,
    nkeys: usize,
}

/// The largest key liblmdb 0.9 can store at all: it caps keys at
/// `MDB_MAXKEYSIZE` (511) unless rebuilt, and never beyond what half a
/// 64 KiB page holds. We accept up to the page's bounds but refuse sizes no
/// build can write, so a flipped size byte is caught here.
const ABSOLUTE_MAX_KEY: u16 = 0x7fff;

impl<'a> TreePage<'a> {
    /// Validates the header and node pointer array of `bytes` (exactly one
    /// page) as page `pgno`.
    pub fn parse(pgno: u64, bytes: &'a [u8]) -> Result<TreePage<'a>, PageProblem> {
        let header = PageHeader::parse(bytes).ok_or(PageProblem::BadBounds {
            mp_lower: 0,
            mp_upper: 0,
        })?;
        if header.mp_pgno != pgno {
            return Err(PageProblem::WrongPgno {
                found: header.mp_pgno,
            });
        }
        let kind = header.kind_flags();
        if kind & page_flags::P_LEAF2 != 0 {
            return Err(PageProblem::Leaf2);
        }
        if kind & page_flags::P_SUBP != 0 {
            return Err(PageProblem::SubPage);
        }
        if kind != page_flags::P_BRANCH && kind != page_flags::P_LEAF {
            return Err(PageProblem::NotATreePage {
                mp_flags: header.mp_flags,
            });
        }
        let (lower, upper) = (header.mp_lower as usize, header.mp_upper as usize);
        if lower < PAGEHDRSZ || lower > upper || upper > bytes.len() || (lower - PAGEHDRSZ) % 2 != 0
        {
            return Err(PageProblem::BadBounds {
                mp_lower: header.mp_lower,
                mp_upper: header.mp_upper,
            });
        }
        let nkeys = (lower - PAGEHDRSZ) / 2;
        if nkeys == 0 {
            return Err(PageProblem::Empty);
        }
        let page = TreePage {
            bytes,
            header,
            nkeys,
        };
        for i in 0..nkeys {
            page.node_start(i)?;
        }
        Ok(page)
    }

    /// The page's parsed header.
    pub fn header(&self) -> &PageHeader {
        &self.header
    }

    /// A leaf page (`P_LEAF`): its nodes hold keys and values.
    pub fn is_leaf(&self) -> bool {
        self.header.kind_flags() == page_flags::P_LEAF
    }

    /// A branch page (`P_BRANCH`): its nodes hold keys and child pages.
    pub fn is_branch(&self) -> bool {
        self.header.kind_flags() == page_flags::P_BRANCH
    }

    /// Number of nodes (`NUMKEYS`: `(mp_lower - PAGEHDRSZ) / 2`).
    pub fn len(&self) -> usize {
        self.nkeys
    }

    /// No nodes; [`TreePage::parse`] refuses such pages, so always false
    /// for a parsed one.
    pub fn is_empty(&self) -> bool {
        self.nkeys == 0
    }

    /// Offset of node `i`, checked to leave room for its header inside the
    /// node area (nodes live between `mp_upper` and the page end).
    fn node_start(&self, i: usize) -> Result<usize, PageProblem> {
        let at = le_u16(self.bytes, PAGEHDRSZ + 2 * i).ok_or(PageProblem::NodeOutOfPage {
            index: i,
            offset: 0,
        })?;
        let start = at as usize;
        if start < self.header.mp_upper as usize || start + NODESIZE > self.bytes.len() {
            return Err(PageProblem::NodeOutOfPage {
                index: i,
                offset: at,
            });
        }
        Ok(start)
    }

    /// Header fields and key of node `i`: (lo, hi, flags, key, data start).
    fn raw_node(&self, i: usize) -> Result<(u16, u16, u16, &'a [u8], usize), PageProblem> {
        let start = self.node_start(i)?;
        let b = self.bytes;
        // Unwraps are bounds-proved: node_start left room for the header.
        let lo = le_u16(b, start).unwrap_or(0);
        let hi = le_u16(b, start + 2).unwrap_or(0);
        let flags = le_u16(b, start + 4).unwrap_or(0);
        let ksize = le_u16(b, start + 6).unwrap_or(0);
        if ksize > ABSOLUTE_MAX_KEY {
            return Err(PageProblem::KeyTooLong { index: i, ksize });
        }
        let key_start = start + NODESIZE;
        let key_end = key_start + ksize as usize;
        let key = b
            .get(key_start..key_end)
            .ok_or(PageProblem::KeyOutOfPage { index: i, ksize })?;
        Ok((lo, hi, flags, key, key_end))
    }

    /// Node `i` of a branch page.
    pub fn branch_node(&self, i: usize) -> Result<BranchNode<'a>, PageProblem> {
        let (lo, hi, flags, key, _) = self.raw_node(i)?;
        Ok(BranchNode {
            key,
            child: lo as u64 | (hi as u64) << 16 | (flags as u64) << 32,
        })
    }

    /// Node `i` of a leaf page; `data_offset` of inline values is relative
    /// to the page start.
    pub fn leaf_node(&self, i: usize) -> Result<LeafNode<'a>, PageProblem> {
        let (lo, hi, flags, key, data_start) = self.raw_node(i)?;
        let dsize = lo as u32 | (hi as u32) << 16;
        if flags & node_flags::F_DUPDATA != 0 {
            return Err(PageProblem::DuplicateData { index: i });
        }
        if flags & !(node_flags::F_BIGDATA | node_flags::F_SUBDATA) != 0
            || flags == node_flags::F_BIGDATA | node_flags::F_SUBDATA
        {
            return Err(PageProblem::BadNodeFlags { index: i, flags });
        }
        let value = if flags & node_flags::F_BIGDATA != 0 {
            let pgno = le_u64(self.bytes, data_start)
                .ok_or(PageProblem::DataOutOfPage { index: i, dsize: 8 })?;
            LeafValue::Overflow { pgno, size: dsize }
        } else {
            let end = data_start as u64 + dsize as u64;
            if end > self.bytes.len() as u64 {
                return Err(PageProblem::DataOutOfPage { index: i, dsize });
            }
            if flags & node_flags::F_SUBDATA != 0 && dsize as usize != super::meta::MDB_DB_SIZE {
                return Err(PageProblem::BadSubData { index: i, dsize });
            }
            LeafValue::Inline {
                offset: data_start as u32,
                size: dsize,
            }
        };
        Ok(LeafNode {
            key,
            value,
            is_subdatabase: flags & node_flags::F_SUBDATA != 0,
        })
    }

    /// Bytes of the page, for slicing inline values.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// A node of a branch page: the child page holds the keys from `key` up to
/// the next node's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BranchNode<'a> {
    /// The separator key, borrowed from the page (empty for node 0, whose
    /// key liblmdb leaves implicit).
    pub key: &'a [u8],
    /// The child's page number (`NODEPGNO`: `mn_lo | mn_hi << 16 |
    /// mn_flags << 32`).
    pub child: u64,
}

/// Where a leaf node's value lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafValue {
    /// Value bytes inside the leaf page at `offset`.
    Inline {
        /// Byte offset of the value from the page start.
        offset: u32,
        /// Value length in bytes.
        size: u32,
    },
    /// Value in an overflow run starting at page `pgno`, after its header.
    Overflow {
        /// First page of the run (`F_BIGDATA`: the node's data is this
        /// page number).
        pgno: u64,
        /// Value length in bytes.
        size: u32,
    },
}

impl LeafValue {
    /// Value length in bytes, wherever it lies.
    pub fn size(&self) -> u32 {
        match *self {
            LeafValue::Inline { size, .. } | LeafValue::Overflow { size, .. } => size,
        }
    }
}

/// A node of a leaf page: one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafNode<'a> {
    /// The record's key, borrowed from the page.
    pub key: &'a [u8],
    /// Where the record's value lies.
    pub value: LeafValue,
    /// The node is a named database in MAIN (`F_SUBDATA`); its value is
    /// that database's `MDB_db`.
    pub is_subdatabase: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a leaf page holding `(key, value)` pairs inline, laid out as
    /// liblmdb does: pointers ascending from the header, nodes packed down
    /// from the page end.
    fn leaf(pgno: u64, pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut p = vec![0u8; 4096];
        p[0..8].copy_from_slice(&pgno.to_le_bytes());
        p[10..12].copy_from_slice(&page_flags::P_LEAF.to_le_bytes());
        let mut upper = 4096usize;
        for (i, (k, v)) in pairs.iter().enumerate() {
            let size = (NODESIZE + k.len() + v.len() + 1) & !1;
            upper -= size;
            let n = &mut p[upper..upper + size];
            n[0..2].copy_from_slice(&(v.len() as u16).to_le_bytes());
            n[6..8].copy_from_slice(&(k.len() as u16).to_le_bytes());
            n[8..8 + k.len()].copy_from_slice(k);
            n[8 + k.len()..8 + k.len() + v.len()].copy_from_slice(v);
            p[16 + 2 * i..18 + 2 * i].copy_from_slice(&(upper as u16).to_le_bytes());
        }
        let lower = 16 + 2 * pairs.len();
        p[12..14].copy_from_slice(&(lower as u16).to_le_bytes());
        p[14..16].copy_from_slice(&(upper as u16).to_le_bytes());
        p
    }

    #[test]
    fn reads_inline_leaf_nodes() {
        let p = leaf(5, &[(b"a", b"one"), (b"bb", b"two!")]);
        let page = TreePage::parse(5, &p).unwrap();
        assert!(page.is_leaf());
        assert_eq!(page.len(), 2);
        let n = page.leaf_node(1).unwrap();
        assert_eq!(n.key, b"bb");
        let LeafValue::Inline { offset, size } = n.value else {
            panic!("expected inline value")
        };
        assert_eq!(&p[offset as usize..(offset + size) as usize], b"two!");
    }

    #[test]
    fn refuses_damaged_pages() {
        let p = leaf(5, &[(b"a", b"one")]);
        assert_eq!(
            TreePage::parse(6, &p).unwrap_err(),
            PageProblem::WrongPgno { found: 5 }
        );

        let mut bad = p.clone();
        bad[16] = 0x10; // node pointer into the header area
        bad[17] = 0;
        assert!(matches!(
            TreePage::parse(5, &bad).unwrap_err(),
            PageProblem::NodeOutOfPage { index: 0, .. }
        ));

        let mut bad = p.clone();
        let node = u16::from_le_bytes([p[16], p[17]]) as usize;
        bad[node + 2] = 0xff; // value size far past the page
        let page = TreePage::parse(5, &bad).unwrap();
        assert!(matches!(
            page.leaf_node(0).unwrap_err(),
            PageProblem::DataOutOfPage { index: 0, .. }
        ));

        let mut bad = p.clone();
        bad[node + 4] = node_flags::F_DUPDATA as u8;
        let page = TreePage::parse(5, &bad).unwrap();
        assert_eq!(
            page.leaf_node(0).unwrap_err(),
            PageProblem::DuplicateData { index: 0 }
        );

        let mut bad = p;
        bad[12] = 17; // odd mp_lower
        assert!(matches!(
            TreePage::parse(5, &bad).unwrap_err(),
            PageProblem::BadBounds { .. }
        ));
    }
}
