//! Read planning: turning "these records" into few, large file requests.
//!
//! Record values are scattered over the file (inline in leaf pages or in
//! overflow runs). A plan sorts the byte spans of the requested records by
//! file offset and merges neighbours into runs, bridging holes of at most
//! `max_gap` bytes; a run stops growing once it holds `target` bytes, and
//! the next run then starts where it ended (taking the small hole along),
//! so runs split by the target stay adjacent. A round of reads never
//! touches a byte twice and, where the spans are close together, issues at
//! most `bytes / target` requests (plus one per stretch broken by a larger
//! hole); the engine's collective reads take each stretch of adjacent runs
//! in one request. The plan
//! is pure arithmetic over the index; the same plan feeds `pread` and the
//! MPI-IO engine.

use crate::index::RecordEntry;

/// How close together value spans must lie to be read in one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoalesceOptions {
    /// Bytes at which a run stops taking neighbours: runs are at least
    /// this long where spans are close together, and at most this plus
    /// one span (and one hole). Requests of `pread` and independent MPI-IO
    /// are runs; collective reads join adjacent runs into one request.
    pub target: u64,
    /// Largest hole between two spans that is read (and thrown away) to save
    /// a request.
    pub max_gap: u64,
}

impl Default for CoalesceOptions {
    fn default() -> Self {
        CoalesceOptions {
            target: 4 << 20,
            max_gap: 64 << 10,
        }
    }
}

/// One contiguous file request, landing at `buf_offset` of the round's
/// buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRun {
    /// Byte offset in the file where the request starts.
    pub file_offset: u64,
    /// Bytes to read.
    pub len: u64,
    /// Byte offset in the buffer where they land.
    pub buf_offset: u64,
}

/// Where a requested record's span lands in the round's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Byte offset of the span in the buffer.
    pub buf_offset: u64,
    /// The span's length in bytes ([`RecordEntry::span`]: with the
    /// overflow page header, if any).
    pub len: u64,
}

/// The file requests that read a set of records' values, and where each
/// value lands in one buffer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadPlan {
    /// Sorted by file offset, non-overlapping, packed back to back in the
    /// buffer.
    pub runs: Vec<ReadRun>,
    /// One per requested record, in request order.
    pub placements: Vec<Placement>,
    /// Buffer size the plan needs: the sum of run lengths.
    pub buffer_len: u64,
}

impl ReadPlan {
    /// Plans the reads for `ordinals` (any order; repeats are read once).
    pub fn for_records(
        entries: &[RecordEntry],
        ordinals: &[usize],
        options: CoalesceOptions,
    ) -> ReadPlan {
        let spans: Vec<(u64, u64)> = ordinals.iter().map(|&i| entries[i].span()).collect();
        ReadPlan::for_spans(&spans, options)
    }

    /// Plans the reads for arbitrary `(file offset, length)` spans.
    pub fn for_spans(spans: &[(u64, u64)], options: CoalesceOptions) -> ReadPlan {
        ReadPlan::for_spans_aligned(spans, options, 1)
    }

    /// Like [`ReadPlan::for_spans`], with every run widened to whole
    /// `granule`s of the file (a power of two): runs start at a multiple
    /// of it, are whole multiples of it long, and so land at multiples of
    /// it in the buffer, which is what direct reads need. A span's bytes
    /// sit at the same place relative to its run either way.
    pub fn for_spans_aligned(
        spans: &[(u64, u64)],
        options: CoalesceOptions,
        granule: u64,
    ) -> ReadPlan {
        let mut plan = ReadPlan::default();
        plan.replan_aligned(spans, options, granule);
        plan
    }

    /// Makes this plan [`ReadPlan::for_spans_aligned`]'s for `spans`,
    /// reusing its lists' memory: a caller planning round after round
    /// would otherwise fault in fresh pages for every plan.
    pub fn replan_aligned(&mut self, spans: &[(u64, u64)], options: CoalesceOptions, granule: u64) {
        // A mask, not a division per span: the granule is a power of two.
        debug_assert!(granule.max(1).is_power_of_two(), "granule {granule}");
        let low = granule.max(1) - 1;
        let widen = |(offset, len): (u64, u64)| (offset & !low, (offset + len + low) & !low);
        let order = file_order(spans);
        let plan = self;
        plan.runs.clear();
        plan.placements.clear();
        plan.placements.resize(
            spans.len(),
            Placement {
                buf_offset: 0,
                len: 0,
            },
        );
        plan.buffer_len = 0;
        let mut current: Option<ReadRun> = None;
        for i in order {
            let (offset, len) = spans[i];
            let (start, end) = widen(spans[i]);
            let run = match current.as_mut() {
                Some(run) if fits(run, start, end, options) => {
                    run.len = run.len.max(end - run.file_offset);
                    run
                }
                _ => {
                    // A run that ended only because it reached the target
                    // hands its small hole to the next one, so the two are
                    // adjacent: a reader then takes a stretch of runs in
                    // one contiguous request (see MpiFile::read_runs_collectively).
                    let start = match current.take() {
                        Some(done) => {
                            let done_end = done.file_offset + done.len;
                            plan.buffer_len += done.len;
                            plan.runs.push(done);
                            // `fits` took every span starting inside the
                            // run, so start >= done_end here.
                            if start - done_end <= options.max_gap {
                                done_end
                            } else {
                                start
                            }
                        }
                        None => start,
                    };
                    current.insert(ReadRun {
                        file_offset: start,
                        len: end - start,
                        buf_offset: plan.buffer_len,
                    })
                }
            };
            plan.placements[i] = Placement {
                buf_offset: run.buf_offset + (offset - run.file_offset),
                len,
            };
        }
        if let Some(done) = current {
            plan.buffer_len += done.len;
            plan.runs.push(done);
        }
    }
}

/// The indices of `spans` by file offset (spans at one offset in any
/// order).
fn file_order(spans: &[(u64, u64)]) -> Vec<usize> {
    by_stretches(spans).unwrap_or_else(|| {
        let mut order: Vec<usize> = (0..spans.len()).collect();
        order.sort_unstable_by_key(|&i| spans[i].0);
        order
    })
}

/// [`file_order`] where it costs a fraction of sorting every span, else
/// `None`. A round's spans in key order are, but for the pages' order in
/// the file, stretches of falling offsets: LMDB lays a leaf page's values
/// out from the page's end, and a database written in several
/// transactions reuses freed pages, so its leaves are not in file order.
/// A stretch ends where offsets rise or leave a block of the smallest
/// page size, so a stretch is (part of) one page. When the stretches do
/// not overlap in the file, sorting them and taking each backwards puts
/// every span in order.
fn by_stretches(spans: &[(u64, u64)]) -> Option<Vec<usize>> {
    const BLOCK_BITS: u32 = 12;
    let at = |i: usize| spans[i].0;
    let falls_within_block =
        |i: usize| at(i) <= at(i - 1) && at(i) >> BLOCK_BITS == at(i - 1) >> BLOCK_BITS;
    // (lowest offset, first index, end) of each stretch.
    let mut stretches: Vec<(u64, usize, usize)> = Vec::new();
    let mut start = 0;
    while start < spans.len() {
        let mut end = start + 1;
        while end < spans.len() && falls_within_block(end) {
            end += 1;
        }
        stretches.push((at(end - 1), start, end));
        start = end;
    }
    stretches.sort_unstable_by_key(|&(low, _, _)| low);
    let mut order = Vec::with_capacity(spans.len());
    let mut high = 0u64;
    for &(low, start, end) in &stretches {
        if low < high {
            return None;
        }
        order.extend((start..end).rev());
        high = at(start);
    }
    Some(order)
}

fn fits(run: &ReadRun, start: u64, end: u64, options: CoalesceOptions) -> bool {
    let run_end = run.file_offset + run.len;
    // Bytes already in the run are never read twice, whatever the target:
    // a span that starts inside the run (overlapping spans, or neighbours
    // sharing a granule) extends it.
    if start < run_end || end <= run_end {
        return true;
    }
    // Filling up to (not capping at) the target keeps the request count at
    // bytes / target whatever the span size: with a cap, 196 KB images and
    // a 1 MiB target would make runs of five images, 6% more requests.
    start <= run_end.saturating_add(options.max_gap) && run.len < options.target
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTS: CoalesceOptions = CoalesceOptions {
        target: 100,
        max_gap: 5,
    };

    #[test]
    fn merges_neighbours_within_gap_and_target() {
        // Out of order on purpose: placements follow request order.
        let spans = [(40, 10), (0, 30), (33, 5), (200, 10), (90, 20)];
        let plan = ReadPlan::for_spans(&spans, OPTS);
        let run = |file_offset, len, buf_offset| ReadRun {
            file_offset,
            len,
            buf_offset,
        };
        assert_eq!(
            plan.runs,
            vec![run(0, 50, 0), run(90, 20, 50), run(200, 10, 70)]
        );
        assert_eq!(plan.buffer_len, 80);
        let at = |buf_offset, len| Placement { buf_offset, len };
        assert_eq!(plan.placements[0], at(40, 10));
        assert_eq!(plan.placements[2], at(33, 5));
        assert_eq!(plan.placements[4], at(50, 20));
    }

    #[test]
    fn repeated_spans_are_read_once() {
        let plan = ReadPlan::for_spans(&[(10, 50), (10, 50), (20, 5)], OPTS);
        assert_eq!(plan.runs.len(), 1);
        assert_eq!(plan.buffer_len, 50);
        assert_eq!(plan.placements[1].buf_offset, 0);
        assert_eq!(plan.placements[2].buf_offset, 10);
    }

    #[test]
    fn runs_stop_growing_once_they_reach_the_target() {
        let plan = ReadPlan::for_spans(&[(0, 60), (60, 60), (120, 300), (420, 10)], OPTS);
        let lens: Vec<u64> = plan.runs.iter().map(|r| r.len).collect();
        assert_eq!(lens, vec![120, 300, 10]);
        // Contiguous spans: requests never exceed bytes / target, rounded up.
        let spans: Vec<(u64, u64)> = (0..50).map(|i| (i * 37, 37)).collect();
        let plan = ReadPlan::for_spans(&spans, OPTS);
        assert!(plan.runs.len() as u64 <= (50 * 37u64).div_ceil(OPTS.target));
        assert!(plan.runs.iter().all(|r| r.len < OPTS.target + 37));
    }

    #[test]
    fn runs_split_at_the_target_stay_adjacent_across_small_holes() {
        // 40-byte values behind 4-byte headers (like overflow pages): runs
        // split at the target take the header hole with them, so each run
        // starts where the last ended; a larger hole still starts afresh.
        let mut spans: Vec<(u64, u64)> = (0..20).map(|i| (4 + i * 44, 40)).collect();
        spans.push((2000, 40));
        let plan = ReadPlan::for_spans(&spans, OPTS);
        assert!(plan.runs.len() > 3);
        let last = plan.runs.len() - 1;
        for pair in plan.runs[..last].windows(2) {
            assert_eq!(pair[0].file_offset + pair[0].len, pair[1].file_offset);
        }
        assert_eq!(plan.runs[last].file_offset, 2000);
        assert_every_span_in_place(&plan, &spans);
    }

    /// The plan as it was made before `file_order`: every span sorted.
    fn plan_by_sorting(spans: &[(u64, u64)], opts: CoalesceOptions, granule: u64) -> ReadPlan {
        let mut sorted: Vec<usize> = (0..spans.len()).collect();
        sorted.sort_by_key(|&i| spans[i].0);
        let in_order: Vec<(u64, u64)> = sorted.iter().map(|&i| spans[i]).collect();
        let plan = ReadPlan::for_spans_aligned(&in_order, opts, granule);
        let mut placements = plan.placements.clone();
        for (k, &i) in sorted.iter().enumerate() {
            placements[i] = plan.placements[k];
        }
        ReadPlan { placements, ..plan }
    }

    #[test]
    fn spans_in_leaf_page_order_are_ordered_without_a_sort_and_plan_as_sorted() {
        // Values of rising keys fall within each page (LMDB fills a leaf
        // page from its end) and rise from page to page.
        let page = 4096u64;
        let leaf = |pages: std::ops::Range<u64>, per_page: u64| -> Vec<(u64, u64)> {
            pages
                .flat_map(|p| (0..per_page).map(move |j| (p * page + page - (j + 1) * 120, 100)))
                .collect()
        };
        // Leaves out of file order, as a database written in several
        // transactions has them, and a round that starts and ends
        // mid-page, with a one-value page.
        let mut spans = leaf(3..10, 30);
        spans.extend(leaf(14..17, 30));
        spans.extend(leaf(11..13, 30));
        spans.extend(leaf(30..40, 30));
        spans.extend(leaf(20..22, 30));
        spans.drain(..7);
        spans.truncate(spans.len() - 11);
        spans.push((41 * page + 500, 100));
        spans.extend(leaf(42..45, 30));
        let order = by_stretches(&spans).expect("leaves need no sort");
        assert!(order.windows(2).all(|w| spans[w[0]].0 <= spans[w[1]].0));
        assert_eq!(order.len(), spans.len());
        let opts = CoalesceOptions {
            target: 16 << 10,
            max_gap: 1 << 10,
        };
        for granule in [1, 4096] {
            let plan = ReadPlan::for_spans_aligned(&spans, opts, granule);
            assert_eq!(plan, plan_by_sorting(&spans, opts, granule));
            assert!(plan.runs.len() > 2);
        }
    }

    #[test]
    fn spans_in_any_order_are_put_in_file_order_and_plan_as_before() {
        // Two ranks' blocks of a node, pages out of place and spans in
        // rising order take the stretches; stretches that overlap in the
        // file are sorted.
        let page = 4096u64;
        let desc = |p: u64| (0..20u64).map(move |j| (p * page + page - (j + 1) * 150, 120));
        let two_blocks: Vec<(u64, u64)> =
            (0..10).flat_map(|s| desc(s).chain(desc(100 + s))).collect();
        let swapped: Vec<(u64, u64)> = [5, 4, 6, 7].into_iter().flat_map(desc).collect();
        let rising: Vec<(u64, u64)> = (0..500).map(|i| (i * 130, 120)).collect();
        let interleaved_pages: Vec<(u64, u64)> =
            desc(3).zip(desc(4)).flat_map(|(a, b)| [a, b]).collect();
        // Two falling sets of spans in one page, taken in turn.
        let interleaved_in_page: Vec<(u64, u64)> = (0..10u64)
            .flat_map(|j| {
                let a = 3 * page + 3000 - j * 200;
                [(a, 100), (a + 150, 40)]
            })
            .collect();
        let overlapping = vec![(100, 50), (90, 50), (90, 10), (300, 5), (200, 200), (10, 5)];
        let opts = CoalesceOptions {
            target: 8 << 10,
            max_gap: 512,
        };
        let cases = [
            (two_blocks, true),
            (swapped, true),
            (rising, true),
            (interleaved_pages, true),
            (interleaved_in_page, false),
            (overlapping, false),
        ];
        for (spans, in_stretches) in cases {
            assert_eq!(by_stretches(&spans).is_some(), in_stretches);
            let order = file_order(&spans);
            let mut seen = order.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..spans.len()).collect::<Vec<_>>());
            assert!(order.windows(2).all(|w| spans[w[0]].0 <= spans[w[1]].0));
            for granule in [1, 512] {
                let plan = ReadPlan::for_spans_aligned(&spans, opts, granule);
                assert_eq!(plan, plan_by_sorting(&spans, opts, granule));
            }
        }
    }

    /// Every span lands, whole, in a run at the place its bytes have in
    /// the run's part of the file.
    fn assert_every_span_in_place(plan: &ReadPlan, spans: &[(u64, u64)]) {
        for (i, &(offset, len)) in spans.iter().enumerate() {
            let p = plan.placements[i];
            assert_eq!(p.len, len);
            let run = plan
                .runs
                .iter()
                .find(|r| p.buf_offset >= r.buf_offset && p.buf_offset < r.buf_offset + r.len)
                .unwrap();
            assert_eq!(run.file_offset + (p.buf_offset - run.buf_offset), offset);
            assert!(p.buf_offset + len <= run.buf_offset + run.len);
        }
    }

    #[test]
    fn aligned_runs_cover_whole_granules_once_and_keep_every_span_in_place() {
        // Values inline and on overflow pages: spans of every size, some
        // sharing a page, some far apart, requested out of order.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut spans: Vec<(u64, u64)> = (0..400)
            .map(|_| (next(4 << 20), 1 + next(20_000)))
            .collect();
        spans.push((4096 * 7, 4096)); // exactly one page
        spans.push((4096 * 7 + 100, 10)); // inside it
        let opts = CoalesceOptions {
            target: 256 << 10,
            max_gap: 8 << 10,
        };
        for granule in [1u64, 512, 4096] {
            let plan = ReadPlan::for_spans_aligned(&spans, opts, granule);
            let mut end = 0;
            for r in &plan.runs {
                assert_eq!(r.file_offset % granule, 0, "{r:?}");
                assert_eq!(r.len % granule, 0, "{r:?}");
                assert_eq!(r.buf_offset % granule, 0, "{r:?}");
                assert!(r.file_offset >= end, "runs overlap at {r:?}");
                end = r.file_offset + r.len;
            }
            assert_eq!(
                plan.buffer_len,
                plan.runs.iter().map(|r| r.len).sum::<u64>()
            );
            assert_every_span_in_place(&plan, &spans);
        }
    }
}
