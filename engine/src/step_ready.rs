//! Steps served as soon as their own bytes are in.
//!
//! A round's reads take tens to hundreds of milliseconds; waiting for all
//! of them before the first of its steps left the ranks idle while the
//! reads ran, and after the job's last read the ranks still had the whole
//! last round to work through with the storage idle. Instead each reader
//! reads its runs in the order the round's steps need them and publishes,
//! in a word of the node's shared memory, how far it has got; a rank waits
//! only until the runs of its next step are in.
//!
//! A progress word holds the round's tag (high 32 bits), whether the read
//! failed (bit 31), the tag's low four bits again (bits 27-30), and how
//! many of the reader's runs, in its read order, are complete (low 27
//! bits). It only grows while a round is read
//! (`fetch_max`): a newer round's tag is larger, and a failure keeps the
//! count reached before it, so every rank reaches the same verdict on a
//! step: ready if the count reached what the step needs, failed if the read
//! failed before that.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lmdbio_core::plan::{ReadPlan, ReadRun};

const FAILED: u64 = 1 << 31;
/// Where the tag's low four bits sit in the low half.
const TAG_LOW: u32 = 27;
const COUNT: u64 = (1 << TAG_LOW) - 1;

/// The tag's low bits are in the low half too, the half a waiting rank sleeps
/// on (a futex is 32 bits), so that every publication changes that half: a new
/// round's, whose count may equal the one the rank saw in the round before,
/// included. A publication that left the half as it was between a rank's check
/// and its sleep would go unnoticed until the next one; with the tag there,
/// none does, and waiting ranks need no timer to cover it (see
/// docs/design/progress-futex.md). Four bits are plenty: a word serves every
/// round, or every other one where the window's two areas take turns, so a
/// waiting rank sees a tag at most two below the one it waits for. The count
/// keeps 27 bits, 134 million runs per reader and round, more than a plan could
/// hold in memory.
fn word(tag: u32, failed: bool, count: usize) -> u64 {
    (u64::from(tag) << 32)
        | if failed { FAILED } else { 0 }
        | (u64::from(tag) & 0xf) << TAG_LOW
        | (count as u64).min(COUNT)
}

/// How a round's runs are read and what each step waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ReadSchedule {
    /// Each reader's runs: a contiguous range of the plan's runs of about
    /// equal bytes.
    pub groups: Vec<Range<usize>>,
    /// Each reader's runs in the order it reads them, as indices into its
    /// group: by the first step that needs them, then by file offset.
    pub order: Vec<Vec<usize>>,
    /// For each reader and step of the round: how many runs of its read
    /// order must be complete before the step's records are all in.
    pub needs: Vec<Vec<usize>>,
}

impl ReadSchedule {
    /// The schedule for `plan`, whose span `i` belongs to step
    /// `span_steps[i]` of a round of `steps` steps, read by `readers`
    /// readers.
    pub fn new(
        plan: &ReadPlan,
        span_steps: &[usize],
        steps: usize,
        readers: usize,
    ) -> ReadSchedule {
        let readers = readers.max(1);
        let groups = reader_groups(plan, readers);
        // The first step that needs each run.
        let mut first_need = vec![usize::MAX; plan.runs.len()];
        // The runs each span lies in, worked out in each pass rather than
        // kept: a list per round cost more in fresh memory than the work.
        let span_runs = || {
            let mut near = 0;
            plan.placements.iter().map(move |p| {
                let first = run_holding(&plan.runs, p.buf_offset, near);
                near = run_holding(&plan.runs, p.buf_offset + p.len.max(1) - 1, first);
                first..near + 1
            })
        };
        for (runs, &step) in span_runs().zip(span_steps) {
            for r in runs {
                first_need[r] = first_need[r].min(step);
            }
        }
        let mut order = Vec::with_capacity(readers);
        // Position of each run in its reader's order.
        let mut position = vec![0usize; plan.runs.len()];
        for group in &groups {
            let mut mine: Vec<usize> = (0..group.len()).collect();
            mine.sort_by_key(|&i| (first_need[group.start + i], i));
            for (at, &i) in mine.iter().enumerate() {
                position[group.start + i] = at;
            }
            order.push(mine);
        }
        let group_of = |run: usize| groups.partition_point(|g| g.end <= run);
        let mut needs = vec![vec![0usize; steps]; readers];
        for (runs, &step) in span_runs().zip(span_steps) {
            for r in runs {
                let need = &mut needs[group_of(r)][step];
                *need = (*need).max(position[r] + 1);
            }
        }
        ReadSchedule {
            groups,
            order,
            needs,
        }
    }
}

/// The run of `runs` (packed back to back in the buffer) holding byte
/// `buf_offset` of it (the last run for bytes past the end). Tries run
/// `near` first: a round's spans mostly follow one another in the
/// buffer, and a search per span cost more than the rest of the
/// schedule.
pub(super) fn run_holding(runs: &[ReadRun], buf_offset: u64, near: usize) -> usize {
    match runs.get(near) {
        Some(r) if r.buf_offset <= buf_offset && buf_offset - r.buf_offset < r.len => near,
        _ => runs
            .partition_point(|r| r.buf_offset <= buf_offset)
            .saturating_sub(1),
    }
}

/// The node's runs split into `readers` contiguous groups of about equal
/// bytes.
fn reader_groups(plan: &ReadPlan, readers: usize) -> Vec<Range<usize>> {
    let total = plan.buffer_len.max(1);
    let group = |buf_offset: u64| (buf_offset * readers as u64 / total) as usize;
    (0..readers)
        .map(|g| {
            let lo = plan.runs.partition_point(|r| group(r.buf_offset) < g);
            let hi = plan.runs.partition_point(|r| group(r.buf_offset) <= g);
            lo..hi
        })
        .collect()
}

/// A reader's progress word for one round, as its read threads publish it.
#[derive(Clone, Copy)]
pub(super) struct Progress {
    word: *const AtomicU64,
    tag: u32,
}

// SAFETY: the word is an atomic, made to be shared between threads; `new`'s
// caller vouches that it outlives every copy.
unsafe impl Send for Progress {}
// SAFETY: as for Send: every access to the word is atomic.
unsafe impl Sync for Progress {}

impl Progress {
    /// # Safety
    /// `word` must outlive every copy of the result (the read threads that
    /// publish to it are joined before the window is given back).
    pub unsafe fn new(word: &AtomicU64, tag: u32) -> Progress {
        Progress { word, tag }
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: alive, as `new`'s caller vouched.
        unsafe { &*self.word }
    }

    /// The first `count` runs of the read order are complete. Release:
    /// their bytes are visible to whoever sees the count.
    pub fn complete(&self, count: usize) {
        self.word()
            .fetch_max(word(self.tag, false, count), Ordering::Release);
        futex::wake_all(self.word());
    }

    /// The read failed; waiting ranks stop waiting for runs past the count
    /// already published.
    pub fn fail(&self) {
        let reached = self.word().load(Ordering::Acquire);
        let count = if reached >> 32 == u64::from(self.tag) {
            (reached & COUNT) as usize
        } else {
            0
        };
        self.word()
            .fetch_max(word(self.tag, true, count), Ordering::Release);
        futex::wake_all(self.word());
    }
}

/// What a wait for a step's runs found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StepReads {
    /// Every run the step needs is in.
    Ready,
    /// A reader of the node failed before reading them all: the one in
    /// the list.
    Failed { reader: usize },
    /// The reader in the list published nothing new within the timeout.
    TimedOut { reader: usize },
}

/// Whether progress word `w` shows `need` runs of round `tag` complete.
fn reached(w: u64, tag: u32, need: usize) -> bool {
    need == 0 || (w >> 32 == u64::from(tag) && (w & COUNT) as usize >= need)
}

/// Whether every reader's word shows `needs` runs of round `tag` complete
/// now, without waiting.
pub(super) fn step_is_in(words: &[&AtomicU64], tag: u32, needs: &[usize]) -> bool {
    words
        .iter()
        .zip(needs)
        .all(|(word, &need)| reached(word.load(Ordering::Acquire), tag, need))
}

/// Waits until reader `g`'s word shows `needs[g]` runs of round `tag`
/// complete, for every reader, or one of them failed first. Sleeps on the
/// word (a futex: readers wake its waiters whenever they publish), so a
/// waiting rank takes no CPU and wakes as soon as its step is in. Every
/// publication changes the half slept on (see `word`); the sleep is still
/// bounded, as a safety net, not a schedule.
pub(super) fn wait_for_step(words: &[&AtomicU64], tag: u32, needs: &[usize]) -> StepReads {
    let started = std::time::Instant::now();
    let mut reader = 0;
    while reader < words.len() {
        let w = words[reader].load(Ordering::Acquire);
        if reached(w, tag, needs[reader]) {
            reader += 1;
            continue;
        }
        if w >> 32 == u64::from(tag) && w & FAILED != 0 {
            return StepReads::Failed { reader };
        }
        if crate::mpi_raw::deadline::expired(started) {
            crate::mpi_raw::deadline::give_up();
            return StepReads::TimedOut { reader };
        }
        futex::wait(words[reader], w as u32, Duration::from_millis(50));
    }
    StepReads::Ready
}

/// Sleeping on a progress word until it changes. Linux futexes on the
/// word's low half, without the process-private flag: the word may lie in
/// memory shared between the node's processes.
mod futex {
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    /// The word's low 32 bits, where the count and the failure bit live.
    fn low_half(word: &AtomicU64) -> *const u32 {
        let at = word as *const AtomicU64 as *const u32;
        if cfg!(target_endian = "little") {
            at
        } else {
            at.wrapping_add(1)
        }
    }

    /// Sleeps while the low half reads `expected`, at most `timeout`.
    pub fn wait(word: &AtomicU64, expected: u32, timeout: Duration) {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: the address is 4-byte aligned inside a live atomic; the
        // kernel only reads it. Any outcome (woken, timed out, value
        // changed, interrupted) returns to the caller's check.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                low_half(word),
                libc::FUTEX_WAIT,
                expected,
                &ts as *const libc::timespec,
            );
        }
    }

    /// Wakes every rank sleeping on the word.
    pub fn wake_all(word: &AtomicU64) {
        // SAFETY: as for wait; waking has no memory effects.
        unsafe {
            libc::syscall(libc::SYS_futex, low_half(word), libc::FUTEX_WAKE, i32::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lmdbio_core::plan::{CoalesceOptions, ReadPlan};

    fn plan(spans: &[(u64, u64)], target: u64) -> ReadPlan {
        ReadPlan::for_spans(spans, CoalesceOptions { target, max_gap: 0 })
    }

    #[test]
    fn runs_are_read_in_step_order_and_each_step_waits_for_its_own() {
        // Two members of a node, contiguous in the file, three steps of two
        // 10-byte records each: member 0 owns bytes 0..60, member 1
        // 60..120; the buffer holds them in file order, so in step order
        // member 1's first step comes after all of member 0's.
        let mut spans = Vec::new();
        let mut steps = Vec::new();
        for step in 0..3u64 {
            for member in 0..2u64 {
                for r in 0..2u64 {
                    spans.push((member * 60 + step * 20 + r * 10, 10));
                    steps.push(step as usize);
                }
            }
        }
        let p = plan(&spans, 20);
        assert_eq!(p.runs.len(), 6);
        let one = ReadSchedule::new(&p, &steps, 3, 1);
        assert_eq!(one.groups, vec![0..6]);
        // Member 0's step 0, member 1's step 0, then step 1 of each...
        assert_eq!(one.order, vec![vec![0, 3, 1, 4, 2, 5]]);
        assert_eq!(one.needs, vec![vec![2, 4, 6]]);
        // Two readers: one per member's half of the bytes.
        let two = ReadSchedule::new(&p, &steps, 3, 2);
        assert_eq!(two.groups, vec![0..3, 3..6]);
        assert_eq!(two.order, vec![vec![0, 1, 2], vec![0, 1, 2]]);
        assert_eq!(two.needs, vec![vec![1, 2, 3], vec![1, 2, 3]]);
    }

    #[test]
    fn a_run_shared_by_steps_is_read_for_the_first_of_them() {
        // Small records coalesce across steps: one run for steps 0 and 1,
        // one for step 2.
        let spans = [(0, 10), (10, 10), (20, 10)];
        let p = plan(&spans, 20);
        assert_eq!(p.runs.len(), 2);
        let s = ReadSchedule::new(&p, &[0, 1, 2], 3, 1);
        assert_eq!(s.order, vec![vec![0, 1]]);
        assert_eq!(s.needs, vec![vec![1, 1, 2]]);
        // A step with no records needs nothing; a reader without runs is
        // never waited for. Three readers: the first and last take a run
        // each (by bytes: 20 and 10 of 30).
        let s = ReadSchedule::new(&p, &[0, 0, 2], 4, 3);
        assert_eq!(s.groups, vec![0..1, 1..1, 1..2]);
        assert_eq!(
            s.needs,
            vec![vec![1, 0, 0, 0], vec![0; 4], vec![0, 0, 1, 0]]
        );
    }

    #[test]
    fn every_span_is_covered_by_the_runs_its_step_waits_for() {
        // Random spans, steps and reader counts: the runs a step waits for
        // (the first `need` of each reader's order) hold all its spans.
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..200 {
            let count = 1 + next(40) as usize;
            let steps = 1 + next(6) as usize;
            let spans: Vec<(u64, u64)> = (0..count).map(|_| (next(2000), 1 + next(300))).collect();
            let span_steps: Vec<usize> = (0..count).map(|_| next(steps as u64) as usize).collect();
            let p = plan(&spans, 1 + next(600));
            let readers = 1 + next(4) as usize;
            let s = ReadSchedule::new(&p, &span_steps, steps, readers);
            for (i, pl) in p.placements.iter().enumerate() {
                let covered = |byte: u64| {
                    s.groups.iter().enumerate().any(|(g, group)| {
                        s.order[g][..s.needs[g][span_steps[i]]].iter().any(|&k| {
                            let r = p.runs[group.start + k];
                            r.buf_offset <= byte && byte < r.buf_offset + r.len
                        })
                    })
                };
                assert!(covered(pl.buf_offset) && covered(pl.buf_offset + pl.len - 1));
            }
        }
    }

    #[test]
    fn a_wait_ends_when_the_counts_arrive_or_a_reader_fails() {
        let words = [AtomicU64::new(0), AtomicU64::new(0)];
        // SAFETY: every copy is used within this test, while words lives.
        let at = |i: usize, tag: u32| unsafe { Progress::new(&words[i], tag) };
        let refs = [&words[0], &words[1]];
        // Counts of an older round do not count.
        at(0, 6).complete(9);
        at(1, 7).complete(1);
        assert!(!step_is_in(&refs, 7, &[2, 1]));
        assert!(step_is_in(&refs, 7, &[0, 1]));
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(5));
                at(0, 7).complete(2);
            });
            assert_eq!(wait_for_step(&refs, 7, &[2, 1]), StepReads::Ready);
        });
        // A failure after the count a step needs leaves that step ready
        // and fails the next one, on every rank alike.
        at(1, 7).fail();
        assert_eq!(wait_for_step(&refs, 7, &[2, 1]), StepReads::Ready);
        assert!(step_is_in(&refs, 7, &[2, 1]));
        assert!(!step_is_in(&refs, 7, &[2, 2]));
        assert_eq!(
            wait_for_step(&refs, 7, &[2, 2]),
            StepReads::Failed { reader: 1 }
        );
        // A later success cannot hide the failure.
        at(1, 7).complete(5);
        assert!(!step_is_in(&refs, 7, &[0, 2]));
        assert_eq!(
            wait_for_step(&refs, 7, &[0, 2]),
            StepReads::Failed { reader: 1 }
        );
        // The next round's first word replaces it.
        at(1, 8).complete(0);
        assert_eq!(words[1].load(Ordering::Relaxed), word(8, false, 0));
    }

    #[test]
    fn every_publication_changes_the_half_a_waiting_rank_sleeps_on() {
        let low = |w: u64| w as u32;
        for tag in [1u32, 7, 15, 16, 70_000] {
            for count in [0usize, 1, 9, COUNT as usize] {
                let seen = word(tag, false, count);
                assert_ne!(low(seen), low(word(tag + 1, false, count)));
                assert_ne!(low(seen), low(word(tag + 2, false, count)));
                assert_ne!(low(seen), low(word(tag, true, count)));
                if count < COUNT as usize {
                    assert_ne!(low(seen), low(word(tag, false, count + 1)));
                }
            }
        }
        // The case that needed a timer: a rank checks round 6's word, the
        // next round publishes the same count, then the rank sleeps.
        let w = AtomicU64::new(word(6, false, 2));
        let seen = w.load(Ordering::Acquire);
        // SAFETY: used within this test, while w lives.
        unsafe { Progress::new(&w, 7) }.complete(2);
        let start = std::time::Instant::now();
        futex::wait(&w, seen as u32, Duration::from_secs(5));
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
