//! Parsing leaf pages while keeping those that hold inline values: on a
//! database of small records those pages are the data, and whoever serves
//! the values from them need not read them again (see
//! docs/design/inline-records.md).

use super::{parse_leaf_batch, IndexPart, PageBatch};
use crate::database::{Database, Tree};
use crate::error::Result;
use crate::source::ReadAt;

/// Leaf pages kept from a scan: the pages themselves, as read, and which
/// of them are kept, in the order they were kept (key order).
#[derive(Default)]
pub struct KeptLeaves {
    batches: Vec<PageBatch>,
    /// `(page number, batch holding it)`, in key order.
    kept: Vec<(u64, usize)>,
    page_size: usize,
}

impl KeptLeaves {
    /// Pages kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// No page was kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The kept pages in the order they were kept: `(page number, bytes)`.
    pub fn pages(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.kept
            .iter()
            .map(|&(pgno, b)| (pgno, self.batches[b].page(pgno)))
    }

    /// Bytes of each kept page (the file's page size).
    pub fn page_size(&self) -> usize {
        self.page_size
    }
}

/// Like [`super::parse_leaves`] on one thread, keeping (in key order, up
/// to `budget` bytes) the leaf pages that hold at least one inline value.
pub fn parse_leaves_keeping<R: ReadAt>(
    db: &Database<R>,
    tree: &Tree,
    leaves: &[u64],
    chunk_pages: usize,
    budget: u64,
) -> Result<(IndexPart, KeptLeaves)> {
    let psize = db.page_size() as u64;
    let mut part = IndexPart::default();
    let mut kept = KeptLeaves {
        page_size: psize as usize,
        ..Default::default()
    };
    let mut room = budget / psize;
    for pgnos in leaves.chunks(chunk_pages.clamp(1, 1 << 20)) {
        let batch = PageBatch::read(db.source(), db.page_size(), pgnos)?;
        let chunk = parse_leaf_batch(db, tree, pgnos, &batch)?;
        let before = kept.kept.len();
        let mut last = None;
        for e in chunk.entries.iter().filter(|e| !e.is_overflow()) {
            let pgno = e.value_offset / psize;
            if room == 0 {
                break;
            }
            if last != Some(pgno) {
                last = Some(pgno);
                kept.kept.push((pgno, kept.batches.len()));
                room -= 1;
            }
        }
        if kept.kept.len() > before {
            kept.batches.push(batch);
        }
        part.append(&IndexPart {
            keys: chunk.keys,
            entries: chunk.entries,
        });
    }
    Ok((part, kept))
}
