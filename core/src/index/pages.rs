//! Reading sets of tree pages with as few requests as possible, and the
//! page bitmap that stops any page being used twice.

use crate::error::Result;
use crate::source::ReadAt;

/// Most pages one coalesced read may span: bounds the buffer of a read and
/// keeps requests in the size range parallel file systems like.
pub const MAX_PAGES_PER_READ: usize = 1024;

/// A batch of pages held in memory, addressed by page number.
pub struct PageBatch {
    /// Sorted, unique.
    pgnos: Vec<u64>,
    bytes: Vec<u8>,
    psize: usize,
}

impl PageBatch {
    /// Reads `pgnos` (any order, no duplicates) with one request per run of
    /// consecutive page numbers (capped at `MAX_PAGES_PER_READ`).
    pub fn read<R: ReadAt + ?Sized>(source: &R, psize: u32, pgnos: &[u64]) -> Result<PageBatch> {
        let mut sorted = pgnos.to_vec();
        sorted.sort_unstable();
        let mut bytes = vec![0u8; sorted.len() * psize as usize];
        read_sorted_into(source, psize, &sorted, &mut bytes)?;
        Ok(PageBatch {
            pgnos: sorted,
            bytes,
            psize: psize as usize,
        })
    }

    /// A batch of pages already in memory: `(page number, bytes)`, any
    /// order, no duplicates, each `psize` bytes.
    pub fn from_pages<'a>(psize: usize, pages: impl IntoIterator<Item = (u64, &'a [u8])>) -> Self {
        let mut pages: Vec<(u64, &[u8])> = pages.into_iter().collect();
        pages.sort_unstable_by_key(|p| p.0);
        let mut bytes = Vec::with_capacity(pages.len() * psize);
        for (_, b) in &pages {
            bytes.extend_from_slice(&b[..psize]);
        }
        PageBatch {
            pgnos: pages.iter().map(|p| p.0).collect(),
            bytes,
            psize,
        }
    }

    /// The bytes of page `pgno`, which must be in the batch.
    pub fn page(&self, pgno: u64) -> &[u8] {
        Pages::page(self, pgno)
    }
}

/// Pages addressed by page number, wherever their bytes are.
pub trait Pages {
    /// The bytes of page `pgno`, which must be among them.
    fn page(&self, pgno: u64) -> &[u8];
}

impl Pages for PageBatch {
    fn page(&self, pgno: u64) -> &[u8] {
        PagesIn {
            pgnos: &self.pgnos,
            bytes: &self.bytes,
            psize: self.psize,
        }
        .at(pgno)
    }
}

/// Pages read into memory the caller owns (see [`read_sorted_into`]):
/// page `pgnos[i]` is `bytes[i * psize..][..psize]`.
pub struct PagesIn<'a> {
    /// Sorted, unique.
    pub pgnos: &'a [u64],
    /// The pages, in the order of `pgnos`.
    pub bytes: &'a [u8],
    /// Bytes per page.
    pub psize: usize,
}

impl<'a> PagesIn<'a> {
    fn at(&self, pgno: u64) -> &'a [u8] {
        let i = self
            .pgnos
            .binary_search(&pgno)
            .expect("page requested from a batch that did not read it");
        &self.bytes[i * self.psize..(i + 1) * self.psize]
    }
}

impl Pages for PagesIn<'_> {
    fn page(&self, pgno: u64) -> &[u8] {
        self.at(pgno)
    }
}

/// Reads `sorted` (ascending, unique) into `dest` (`psize` bytes per page,
/// in that order) with one request per run of consecutive page numbers
/// (capped at `MAX_PAGES_PER_READ`).
pub fn read_sorted_into<R: ReadAt + ?Sized>(
    source: &R,
    psize: u32,
    sorted: &[u64],
    dest: &mut [u8],
) -> Result<()> {
    let psize = psize as usize;
    let runs: Vec<_> = consecutive_runs(sorted, MAX_PAGES_PER_READ).collect();
    if runs.len() > 1 {
        // The reads below go one after another; told of them all first,
        // the storage can fetch them together (on a network file system
        // each is a round trip of its own).
        let ranges: Vec<(u64, u64)> = runs
            .iter()
            .map(|r| (sorted[r.start] * psize as u64, (r.len() * psize) as u64))
            .collect();
        source.will_need(&ranges);
    }
    for run in runs {
        source.read_exact_at(
            &mut dest[run.start * psize..run.end * psize],
            sorted[run.start] * psize as u64,
        )?;
    }
    Ok(())
}

/// The runs of consecutive page numbers in `sorted` (ascending, unique),
/// each at most `max_pages` long, as ranges of positions in `sorted`.
pub fn consecutive_runs(
    sorted: &[u64],
    max_pages: usize,
) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        if i >= sorted.len() {
            return None;
        }
        let start = i;
        i += 1;
        while i < sorted.len() && sorted[i] == sorted[i - 1] + 1 && i - start < max_pages {
            i += 1;
        }
        Some(start..i)
    })
}

/// One bit per page below a limit.
pub struct PageBitmap {
    words: Vec<u64>,
}

impl PageBitmap {
    /// A bitmap of pages `0..pages`, none marked.
    pub fn new(pages: u64) -> PageBitmap {
        PageBitmap {
            words: vec![0; pages.div_ceil(64) as usize],
        }
    }

    /// Marks `pgno`; returns false if it was already marked.
    pub fn insert(&mut self, pgno: u64) -> bool {
        let (w, b) = ((pgno / 64) as usize, pgno % 64);
        let was = self.words[w] >> b & 1 == 1;
        self.words[w] |= 1 << b;
        !was
    }

    /// Marks `[first, first + count)`; returns the first page already
    /// marked, if any (then nothing is guaranteed about the rest). Works a
    /// word at a time: overflow runs cover most pages of an image database.
    pub fn insert_run(&mut self, first: u64, count: u64) -> Option<u64> {
        let end = first + count;
        let mut p = first;
        while p < end {
            let (w, b) = ((p / 64) as usize, p % 64);
            let n = (64 - b).min(end - p);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << b
            };
            let clash = self.words[w] & mask;
            if clash != 0 {
                return Some(w as u64 * 64 + clash.trailing_zeros() as u64);
            }
            self.words[w] |= mask;
            p += n;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::MemSource;

    #[test]
    fn consecutive_runs_split_at_gaps_and_at_the_cap() {
        let runs: Vec<_> = consecutive_runs(&[1, 2, 3, 5, 6, 9], 2).collect();
        assert_eq!(runs, vec![0..2, 2..3, 3..5, 5..6]);
        let runs: Vec<_> = consecutive_runs(&[1, 2, 3, 5, 6, 9], usize::MAX).collect();
        assert_eq!(runs, vec![0..3, 3..5, 5..6]);
        assert_eq!(consecutive_runs(&[], 4).count(), 0);
    }

    #[test]
    fn coalesces_consecutive_pages_into_one_read() {
        let psize = 512u32;
        let mut file = vec![0u8; 20 * psize as usize];
        for p in 0..20 {
            file[p * 512] = p as u8;
        }
        let src = MemSource::new(file, "mem");
        let batch = PageBatch::read(&src, psize, &[9, 3, 4, 5, 12, 10]).unwrap();
        assert_eq!(src.counters().read_requests, 3); // 3-5, 9-10, 12
        assert_eq!(src.counters().bytes_read, 6 * 512);
        for p in [3u64, 4, 5, 9, 10, 12] {
            assert_eq!(batch.page(p)[0], p as u8);
        }
    }

    /// A source that logs the advice it was given and the reads it served,
    /// in order: `(true, offset, len)` for advice, `(false, ..)` for reads.
    struct Advised {
        inner: MemSource,
        log: std::sync::Mutex<Vec<(bool, u64, u64)>>,
    }

    impl ReadAt for Advised {
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
            self.log
                .lock()
                .unwrap()
                .push((false, offset, buf.len() as u64));
            self.inner.read_exact_at(buf, offset)
        }
        fn len(&self) -> u64 {
            self.inner.len()
        }
        fn path(&self) -> &std::path::Path {
            self.inner.path()
        }
        fn counters(&self) -> crate::source::IoSnapshot {
            self.inner.counters()
        }
        fn will_need(&self, ranges: &[(u64, u64)]) {
            let mut log = self.log.lock().unwrap();
            log.extend(ranges.iter().map(|&(o, l)| (true, o, l)));
        }
    }

    #[test]
    fn scattered_pages_are_announced_before_any_is_read_and_one_run_is_not() {
        let psize = 512u32;
        let src = Advised {
            inner: MemSource::new(vec![7u8; 20 * psize as usize], "mem"),
            log: Default::default(),
        };
        PageBatch::read(&src, psize, &[9, 3, 4, 12]).unwrap();
        let runs = [(3 * 512, 2 * 512), (9 * 512, 512), (12 * 512, 512)];
        let expected: Vec<_> = runs
            .iter()
            .map(|&(o, l)| (true, o, l))
            .chain(runs.iter().map(|&(o, l)| (false, o, l)))
            .collect();
        assert_eq!(*src.log.lock().unwrap(), expected);
        src.log.lock().unwrap().clear();
        PageBatch::read(&src, psize, &[5, 6, 7]).unwrap();
        assert_eq!(*src.log.lock().unwrap(), vec![(false, 5 * 512, 3 * 512)]);
    }

    #[test]
    fn bitmap_reports_reuse() {
        let mut m = PageBitmap::new(130);
        assert!(m.insert(129));
        assert!(!m.insert(129));
        assert_eq!(m.insert_run(10, 5), None);
        assert_eq!(m.insert_run(12, 5), Some(12));
        assert_eq!(m.insert_run(20, 100), None);
        assert_eq!(m.insert_run(119, 1), Some(119));
        assert_eq!(m.insert_run(0, 10), None);
        assert_eq!(m.insert_run(5, 64), Some(5));
    }
}
