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
            slots: None,
            bytes: &self.bytes,
            psize: self.psize,
        }
        .at(pgno)
    }
}

/// Pages read into memory the caller owns (see [`read_sorted_into`] and
/// [`read_spanning_into`]): page `pgnos[i]` is in slot `slots[i]` (or `i`
/// without `slots`) of `bytes`, a slot being `psize` bytes.
pub struct PagesIn<'a> {
    /// Sorted, unique.
    pub pgnos: &'a [u64],
    /// Each page's slot, if not its position in `pgnos`.
    pub slots: Option<&'a [usize]>,
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
        let slot = self.slots.map_or(i, |s| s[i]);
        &self.bytes[slot * self.psize..(slot + 1) * self.psize]
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

/// Reads `sorted` (ascending, unique) into `dest` in fewer, larger
/// requests than [`read_sorted_into`]: runs of consecutive pages separated
/// by a gap of at most [`SPANNED_GAP`] pages are read as one, gap and all,
/// as long as the gaps read stay within 1/32 of the pages asked for (in a
/// bulk-loaded tree the leaves come in runs of a few hundred with a branch
/// page between; on a network file system each request is a round trip).
/// Fills `slots` with each page's slot in `dest` (`psize` bytes per slot)
/// and returns the slots used; `dest` must hold [`spanned_slots`] of them.
pub fn read_spanning_into<R: ReadAt + ?Sized>(
    source: &R,
    psize: u32,
    sorted: &[u64],
    dest: &mut [u8],
    slots: &mut Vec<usize>,
) -> Result<usize> {
    let psize = psize as usize;
    let spans = spanning_runs(sorted);
    slots.clear();
    let mut used = 0;
    let mut reads = Vec::with_capacity(spans.len());
    for r in &spans {
        let first = sorted[r.start];
        slots.extend(
            sorted[r.clone()]
                .iter()
                .map(|&p| used + (p - first) as usize),
        );
        let len = (sorted[r.end - 1] - first + 1) as usize;
        reads.push((used, first, len));
        used += len;
    }
    if reads.len() > 1 {
        let ranges: Vec<(u64, u64)> = reads
            .iter()
            .map(|&(_, first, len)| (first * psize as u64, (len * psize) as u64))
            .collect();
        source.will_need(&ranges);
    }
    for (at, first, len) in reads {
        source.read_exact_at(
            &mut dest[at * psize..(at + len) * psize],
            first * psize as u64,
        )?;
    }
    Ok(used)
}

/// Most pages of a gap [`read_spanning_into`] reads through.
pub const SPANNED_GAP: u64 = 4;

/// Slots [`read_spanning_into`] needs for `sorted`.
pub fn spanned_slots(sorted: &[u64]) -> usize {
    spanning_runs(sorted)
        .iter()
        .map(|r| (sorted[r.end - 1] - sorted[r.start] + 1) as usize)
        .sum()
}

/// The runs [`read_spanning_into`] reads, as ranges of positions in
/// `sorted`: each at most [`MAX_PAGES_PER_READ`] pages long, gaps and all.
fn spanning_runs(sorted: &[u64]) -> Vec<std::ops::Range<usize>> {
    let mut allowance = sorted.len() as u64 / 32;
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for run in consecutive_runs(sorted, MAX_PAGES_PER_READ) {
        if let Some(last) = out.last_mut() {
            let gap = sorted[run.start] - sorted[last.end - 1] - 1;
            let span = sorted[run.end - 1] - sorted[last.start] + 1;
            if gap > 0 && gap <= SPANNED_GAP.min(allowance) && span <= MAX_PAGES_PER_READ as u64 {
                allowance -= gap;
                last.end = run.end;
                continue;
            }
        }
        out.push(run);
    }
    out
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
    fn spanning_reads_cross_small_gaps_within_their_allowance() {
        let psize = 512u32;
        let mut file = vec![0u8; 300 * psize as usize];
        for p in 0..300 {
            file[p * 512] = p as u8;
        }
        let src = MemSource::new(file, "mem");
        // 128 pages with one-page gaps after 40 and 80, a 10-page gap
        // after 120: 4 gap pages allowed (128 / 32), 2 used.
        let pages: Vec<u64> = (0..40)
            .chain(41..81)
            .chain(82..122)
            .chain(132..140)
            .collect();
        assert_eq!(spanned_slots(&pages), 122 + 8);
        let mut dest = vec![0u8; 130 * 512];
        let mut slots = Vec::new();
        let used = read_spanning_into(&src, psize, &pages, &mut dest, &mut slots).unwrap();
        assert_eq!(used, 130);
        assert_eq!(src.counters().read_requests, 2);
        assert_eq!(src.counters().bytes_read, 130 * 512);
        let view = PagesIn {
            pgnos: &pages,
            slots: Some(&slots),
            bytes: &dest,
            psize: 512,
        };
        for &p in &pages {
            assert_eq!(view.page(p)[0], p as u8);
        }
        // Without the allowance (few pages), gaps are not read.
        let few = [1u64, 3, 5];
        assert_eq!(spanned_slots(&few), 3);
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
