//! The schedule of a job, and re-partitioning: continuing an interrupted
//! job on a different number of ranks.
//!
//! A job's schedule is a [`Remainder`] (positions of earlier epochs that an
//! interrupted job left undelivered; empty for a fresh job) followed by
//! normal epochs of the plain [`Schedule`], numbered from
//! [`Remainder::next_epoch`] on. Like the plain schedule it is a pure
//! function of its inputs, so every rank can still plan every other rank's
//! reads.
//!
//! * The remainder is one list of positions in (epoch, position) order. New
//!   rank q takes the q-th contiguous block of it (see
//!   [`crate::schedule::contiguous_block`]) whatever the partition mode, so
//!   each rank reads contiguous runs of positions and reads stay coalesced.
//! * `Tail::Short`: the remainder takes the same number of steps on every
//!   rank (its last batch may be short or empty), then normal epochs start
//!   on a batch boundary. `Tail::Wrap`: a rank's records are its remainder
//!   block followed by its normal stream, cut into full batches, so the
//!   batch that finishes the remainder continues into the first normal
//!   epoch.
//!
//! "Delivered" means handed to the caller by `next_batch`: a rank whose
//! cursor says step k has delivered exactly the records of its steps
//! `0..k`, whatever the engine had read ahead. [`JobSchedule::rest_after`]
//! turns every rank's step into the new remainder: every position of every
//! epoch that some rank has started but that nobody has delivered yet. When
//! ranks stopped in different epochs (a `Tail::Wrap` rank may already have
//! wrapped into the next epoch), the positions of that next epoch they
//! delivered are not in the remainder, so no record is delivered twice in
//! one epoch; normal epochs resume after the last epoch anyone started.
//! A job that was itself re-partitioned is moved the same way: its job
//! cursor carries the remainder it started with.

use crate::cursor::{Cursor, DatabaseIdentity, JobCursor};
use crate::error::{Error, Result};
use crate::order::Shuffle;
use crate::schedule::{contiguous_block, Schedule, Slot, Tail};

/// Consecutive positions `start..start + len` of epoch `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PositionRun {
    /// The epoch the positions belong to.
    pub epoch: u64,
    /// First position of the run in that epoch's order.
    pub start: u64,
    /// Number of positions (at least 1 in a [`Remainder`]).
    pub len: u64,
}

/// What an interrupted job left: runs of undelivered positions in
/// (epoch, position) order, and the epoch normal epochs continue with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Remainder {
    /// Undelivered positions, in (epoch, position) order, adjacent runs
    /// merged.
    pub runs: Vec<PositionRun>,
    /// The first epoch the resumed job reads in full after the runs.
    pub next_epoch: u64,
}

impl Remainder {
    /// A fresh job: nothing left over, normal epochs from epoch 0.
    pub fn is_none(&self) -> bool {
        self.runs.is_empty() && self.next_epoch == 0
    }

    /// Number of undelivered positions in all runs.
    pub fn records(&self) -> u64 {
        self.runs.iter().map(|r| r.len).sum()
    }

    /// Appends one position, merging with the last run when adjacent.
    fn push(&mut self, epoch: u64, position: u64, len: u64) {
        if len == 0 {
            return;
        }
        match self.runs.last_mut() {
            Some(last) if last.epoch == epoch && last.start + last.len == position => {
                last.len += len;
            }
            _ => self.runs.push(PositionRun {
                epoch,
                start: position,
                len,
            }),
        }
    }
}

/// A job's schedule: its remainder split among its ranks, then normal
/// epochs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSchedule {
    base: Schedule,
    remainder: Remainder,
    /// Index (in the remainder list) where each run starts.
    run_starts: Vec<u64>,
    remainder_len: u64,
}

impl JobSchedule {
    /// A fresh job.
    pub fn plain(base: Schedule) -> JobSchedule {
        JobSchedule::new(base, Remainder::default())
    }

    /// A resumed job: `remainder`'s positions dealt to the ranks first
    /// (contiguous blocks, in batches of `base.batch`), then normal epochs
    /// from `remainder.next_epoch` as `base` schedules them.
    pub fn new(base: Schedule, remainder: Remainder) -> JobSchedule {
        let run_starts = remainder
            .runs
            .iter()
            .scan(0u64, |at, r| {
                let s = *at;
                *at += r.len;
                Some(s)
            })
            .collect();
        let remainder_len = remainder.records();
        JobSchedule {
            base,
            remainder,
            run_starts,
            remainder_len,
        }
    }

    /// The plain schedule normal epochs follow.
    pub fn base(&self) -> &Schedule {
        &self.base
    }

    /// The positions dealt out before normal epochs.
    pub fn remainder(&self) -> &Remainder {
        &self.remainder
    }

    /// The job's rank count.
    pub fn ranks(&self) -> u64 {
        self.base.ranks
    }

    /// Records per normal epoch.
    pub fn records(&self) -> u64 {
        self.base.records
    }

    /// Rank `rank`'s block of the remainder list: `(first index, count)`.
    pub fn remainder_share(&self, rank: u64) -> (u64, u64) {
        contiguous_block(self.remainder_len, self.base.ranks, rank)
    }

    /// Steps the remainder takes under `Tail::Short` (the same on every
    /// rank: rank 0's block is the largest).
    pub fn remainder_steps(&self) -> u64 {
        self.remainder_share(0).1.div_ceil(self.base.batch)
    }

    /// The slot at index `i` of the remainder list.
    fn remainder_slot(&self, i: u64) -> Slot {
        let run = self.run_starts.partition_point(|&s| s <= i) - 1;
        let r = self.remainder.runs[run];
        Slot {
            epoch: r.epoch,
            position: r.start + (i - self.run_starts[run]),
        }
    }

    /// Steps every rank takes so that every record of epochs `0..epochs`
    /// reaches its rank: the first step at which no rank has a record of
    /// those epochs left (the same on every rank, as steps are collective).
    pub fn steps_for_epochs(&self, epochs: u64) -> u64 {
        if self.records() == 0 {
            // One empty batch per epoch, so a job still steps through them.
            return epochs;
        }
        let next = self.remainder.next_epoch;
        match self.base.tail {
            // Every rank has the same batch count per epoch: the remainder
            // takes `remainder_steps`, then each normal epoch as many as
            // rank 0's (the largest) share.
            Tail::Short if epochs > next => {
                self.remainder_steps() + (epochs - next) * self.base.batches_per_epoch()
            }
            // Only remainder records are wanted, and they come within its
            // steps (ranks with a smaller share see empty batches there).
            Tail::Short => self.first_step_past(epochs, self.remainder_steps()),
            // Batches are full; an empty one means a rank with no records.
            Tail::Wrap => self.first_step_past(epochs, u64::MAX),
        }
    }

    /// The first step, at most `bound`, from which no rank has a record of
    /// an epoch before `epochs`. A rank's records never go back an epoch,
    /// so each rank's step is found by doubling, then bisecting.
    fn first_step_past(&self, epochs: u64, bound: u64) -> u64 {
        let done = |rank: u64, t: u64| {
            let mut first = None;
            if t < bound {
                self.for_each_slot(rank, t, |s| {
                    first.get_or_insert(s.epoch);
                });
            }
            first.is_none_or(|e| e >= epochs)
        };
        (0..self.ranks())
            .map(|rank| {
                let (mut lo, mut hi) = (0u64, 1u64);
                while !done(rank, hi) {
                    hi = hi.saturating_mul(2);
                }
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if done(rank, mid) {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                lo
            })
            .max()
            .unwrap_or(0)
    }

    /// The records rank `rank` receives at step `step`, in delivery order.
    /// The slots rank `rank` receives at step `step`, in delivery order:
    /// remainder positions while its share lasts, then normal epochs.
    pub fn batch_slots(&self, rank: u64, step: u64) -> Vec<Slot> {
        let mut out = Vec::with_capacity(self.base.batch as usize);
        self.for_each_slot(rank, step, |s| out.push(s));
        out
    }

    /// Calls `f` on each slot of [`JobSchedule::batch_slots`] in order,
    /// without allocating.
    pub fn for_each_slot(&self, rank: u64, step: u64, mut f: impl FnMut(Slot)) {
        let b = self.base.batch;
        let (first, count) = self.remainder_share(rank);
        let shift = self.remainder.next_epoch;
        match self.base.tail {
            Tail::Short => {
                let steps = self.remainder_steps();
                if step < steps {
                    for k in (step * b).min(count)..((step + 1) * b).min(count) {
                        f(self.remainder_slot(first + k));
                    }
                } else {
                    self.base.for_each_slot(rank, step - steps, |s| {
                        f(Slot {
                            epoch: s.epoch + shift,
                            ..s
                        })
                    });
                }
            }
            Tail::Wrap => {
                // The rank's records: its remainder block, then its normal
                // stream (full batches of the plain schedule).
                let (lo, hi) = (step * b, (step + 1) * b);
                for k in lo.min(count)..hi.min(count) {
                    f(self.remainder_slot(first + k));
                }
                if hi > count {
                    let (j0, j1) = (lo.saturating_sub(count), hi - count);
                    for t in j0 / b..=(j1 - 1) / b {
                        let mut at = t * b;
                        self.base.for_each_slot(rank, t, |s| {
                            if (j0..j1).contains(&at) {
                                f(Slot {
                                    epoch: s.epoch + shift,
                                    ..s
                                });
                            }
                            at += 1;
                        });
                    }
                }
            }
        }
    }

    /// What is left when every rank `r` has delivered the batches of its
    /// steps `0..steps[r]`: every position of every epoch somebody started
    /// that nobody delivered, and the epoch to continue with.
    pub fn rest_after(&self, steps: &[u64]) -> Remainder {
        assert_eq!(steps.len() as u64, self.base.ranks, "one step per rank");
        let (base, b) = (&self.base, self.base.batch);
        let mut rest = Remainder::default();

        // This job's own remainder: rank q delivered the first records of
        // its block (its blocks follow each other in list order).
        for (q, &step) in steps.iter().enumerate() {
            let (first, count) = self.remainder_share(q as u64);
            let taken = match base.tail {
                Tail::Wrap => step.saturating_mul(b),
                Tail::Short => step.min(self.remainder_steps()) * b,
            }
            .min(count);
            self.push_remainder_indices(first + taken, first + count, &mut rest);
        }

        // Normal epochs: how far each rank got in its plain stream.
        let progress: Vec<u64> = steps
            .iter()
            .enumerate()
            .map(|(q, &step)| match base.tail {
                Tail::Wrap => step
                    .saturating_mul(b)
                    .saturating_sub(self.remainder_share(q as u64).1),
                Tail::Short => step.saturating_sub(self.remainder_steps()),
            })
            .collect();
        let delivered = |epoch: u64, position: u64| {
            let (rank, step, index) = base.locate(epoch, position);
            match base.tail {
                Tail::Wrap => step * b + index < progress[rank as usize],
                Tail::Short => step < progress[rank as usize],
            }
        };
        // The epochs of each rank's next and last delivered records.
        let (mut next, mut last) = (None::<u64>, None::<u64>);
        for (q, &done) in progress.iter().enumerate() {
            let q = q as u64;
            let (next_q, last_q) = match base.tail {
                Tail::Wrap => {
                    let at = |k: u64| base.batch_slots(q, k / b).get((k % b) as usize).copied();
                    (
                        at(done).map(|s| s.epoch),
                        done.checked_sub(1).and_then(at).map(|s| s.epoch),
                    )
                }
                Tail::Short => match base.batches_per_epoch() {
                    0 => (None, None),
                    per => (Some(done / per), done.checked_sub(1).map(|d| d / per)),
                },
            };
            if let Some(e) = next_q {
                next = Some(next.map_or(e, |n| n.min(e)));
            }
            if let Some(e) = last_q {
                last = Some(last.map_or(e, |l| l.max(e)));
            }
        }
        let Some(next) = next else {
            rest.next_epoch = self.remainder.next_epoch;
            return rest;
        };
        if let Some(last) = last {
            for epoch in next..=last {
                for position in 0..base.records {
                    if !delivered(epoch, position) {
                        rest.push(epoch + self.remainder.next_epoch, position, 1);
                    }
                }
            }
        }
        rest.next_epoch = self.remainder.next_epoch + last.map_or(next, |l| next.max(l + 1));
        rest
    }

    /// Appends remainder list indices `lo..hi` to `out` as position runs.
    fn push_remainder_indices(&self, lo: u64, hi: u64, out: &mut Remainder) {
        let mut i = lo;
        while i < hi {
            let run = self.run_starts.partition_point(|&s| s <= i) - 1;
            let r = self.remainder.runs[run];
            let offset = i - self.run_starts[run];
            let len = (r.len - offset).min(hi - i);
            out.push(r.epoch, r.start + offset, len);
            i += len;
        }
    }
}

fn refuse<T>(what: String) -> Result<T> {
    Err(Error::InvalidArgument(format!(
        "the cursor cannot resume this job: {what}"
    )))
}

/// Refuses a cursor taken on another database or with other order options.
fn check_order(
    c: &Cursor,
    base: &Schedule,
    shuffle: Option<Shuffle>,
    database: DatabaseIdentity,
) -> Result<()> {
    c.check_database(database)?;
    if (c.batch, c.partition, c.tail) != (base.batch, base.partition, base.tail) {
        return refuse(format!(
            "it was taken with batch {} {:?} {:?}, this job uses batch {} {:?} {:?}",
            c.batch, c.partition, c.tail, base.batch, base.partition, base.tail
        ));
    }
    if c.shuffle != shuffle {
        return refuse(format!(
            "it was taken with shuffle {:?}, this job uses {:?}",
            c.shuffle, shuffle
        ));
    }
    Ok(())
}

/// Where rank `rank` of a job with plain schedule `base` continues from its
/// own cursor: the same schedule, at the cursor's step (exact resume; the
/// rank count must be the same).
pub fn from_rank_cursor(
    c: &Cursor,
    base: Schedule,
    shuffle: Option<Shuffle>,
    database: DatabaseIdentity,
    rank: u64,
) -> Result<(JobSchedule, u64)> {
    check_order(c, &base, shuffle, database)?;
    if c.after_repartition {
        return refuse(
            "it was taken in a job that was itself re-partitioned; resume from that job's job cursor".into(),
        );
    }
    if c.ranks as u64 != base.ranks {
        return refuse(format!(
            "it was taken on {} ranks and this job has {}; re-partitioning needs every rank's cursor (a job cursor)",
            c.ranks, base.ranks
        ));
    }
    if c.rank as u64 != rank {
        return refuse(format!(
            "it belongs to rank {} and was given to rank {rank}",
            c.rank
        ));
    }
    Ok((JobSchedule::plain(base), c.step))
}

/// Where rank `rank` of a job with plain schedule `base` continues from a
/// job cursor. On the job's rank count it resumes exactly (same schedule,
/// each rank at its own step). On another rank count, and only when
/// `repartition` is set, the records nobody was handed yet are split among
/// the new ranks (see [`JobSchedule::rest_after`]) and the job starts at
/// step 0 of that schedule.
pub fn from_job_cursor(
    job: &JobCursor,
    base: Schedule,
    shuffle: Option<Shuffle>,
    database: DatabaseIdentity,
    rank: u64,
    repartition: bool,
) -> Result<(JobSchedule, u64)> {
    let first = &job.cursors[0];
    check_order(first, &base, shuffle, database)?;
    let old = JobSchedule::new(
        Schedule::new(
            base.records,
            job.ranks() as u64,
            base.batch,
            base.partition,
            base.tail,
        ),
        job.remainder.clone(),
    );
    if job.ranks() as u64 == base.ranks {
        return Ok((old, job.cursors[rank as usize].step));
    }
    if !repartition {
        return refuse(format!(
            "it was taken on {} ranks and this job has {}; ask for re-partitioning to split the rest of the epoch among them",
            job.ranks(),
            base.ranks
        ));
    }
    let steps: Vec<u64> = job.cursors.iter().map(|c| c.step).collect();
    Ok((JobSchedule::new(base, old.rest_after(&steps)), 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Partition;
    use std::collections::HashMap;

    const MODES: [Partition; 3] = [
        Partition::Contiguous,
        Partition::RoundRobinBatches,
        Partition::Strided,
    ];

    /// Counts (epoch, position) deliveries of ranks `r` over steps
    /// `from[r]..to[r]`.
    fn deliver(s: &JobSchedule, from: &[u64], to: &[u64], seen: &mut HashMap<Slot, u32>) {
        for r in 0..s.ranks() {
            for t in from[r as usize]..to[r as usize] {
                for slot in s.batch_slots(r, t) {
                    assert!(slot.position < s.records());
                    *seen.entry(slot).or_default() += 1;
                }
            }
        }
    }

    /// A job stopped after `stop` steps on `p` ranks, re-partitioned onto
    /// `q` ranks, stopped again after `stop2` steps and re-partitioned
    /// onto `r` ranks: every position of the first `epochs` epochs is
    /// delivered exactly once across the three jobs.
    fn check_chain(n: u64, b: u64, mode: Partition, tail: Tail, ranks: [u64; 3], stops: [u64; 2]) {
        let epochs = 3;
        let plain = |p| Schedule::new(n, p, b, mode, tail);
        let mut seen = HashMap::new();
        let mut job = JobSchedule::plain(plain(ranks[0]));
        for (k, &stop) in stops.iter().enumerate() {
            let steps = vec![stop; job.ranks() as usize];
            deliver(&job, &vec![0; steps.len()], &steps, &mut seen);
            let rest = job.rest_after(&steps);
            // Runs are sorted, disjoint and before the next epoch.
            for w in rest.runs.windows(2) {
                assert!((w[0].epoch, w[0].start + w[0].len) <= (w[1].epoch, w[1].start));
            }
            assert!(rest
                .runs
                .iter()
                .all(|r| r.epoch < rest.next_epoch && r.len > 0));
            job = JobSchedule::new(plain(ranks[k + 1]), rest);
        }
        let steps = 3 * (n.div_ceil(b) + 2) * (epochs + 1);
        let last = vec![steps; job.ranks() as usize];
        deliver(&job, &vec![0; last.len()], &last, &mut seen);
        for e in 0..epochs {
            for pos in 0..n {
                let slot = Slot {
                    epoch: e,
                    position: pos,
                };
                let got = seen.get(&slot).copied().unwrap_or(0);
                assert_eq!(
                    got, 1,
                    "n={n} b={b} {mode:?} {tail:?} ranks {ranks:?} stops {stops:?}: {slot:?} delivered {got} times"
                );
            }
        }
        assert!(seen.values().all(|&c| c == 1), "a repeat within an epoch");
    }

    #[test]
    fn repartitioned_jobs_deliver_every_record_once_per_epoch() {
        for n in [1u64, 2, 7, 13, 50, 97] {
            for b in [1u64, 3, 4, 10] {
                for mode in MODES {
                    for tail in [Tail::Wrap, Tail::Short] {
                        for ranks in [[3, 2, 4], [2, 4, 1], [1, 3, 3], [4, 4, 2], [8, 3, 5]] {
                            for stops in [[0, 0], [1, 2], [3, 1], [5, 7], [13, 4]] {
                                check_chain(n, b, mode, tail, ranks, stops);
                            }
                        }
                    }
                }
            }
        }
    }

    /// `steps_for_epochs(e)` is the shortest job that delivers every
    /// record of epochs `0..e`: all of them arrive in its steps, and its
    /// last step still delivers one of them.
    fn check_steps_for_epochs(job: &JobSchedule, epochs: u64) {
        let t = job.steps_for_epochs(epochs);
        let wanted = |slot: &Slot| slot.epoch < epochs;
        let mut seen = HashMap::new();
        deliver(
            job,
            &vec![0; job.ranks() as usize],
            &vec![t; job.ranks() as usize],
            &mut seen,
        );
        // The remainder's runs, then every position of each normal epoch.
        let runs = job
            .remainder()
            .runs
            .iter()
            .map(|r| (r.epoch, r.start..r.start + r.len));
        let normal = (job.remainder().next_epoch..epochs).map(|e| (e, 0..job.records()));
        for (epoch, positions) in runs.chain(normal).filter(|(e, _)| *e < epochs) {
            for position in positions {
                let slot = Slot { epoch, position };
                assert_eq!(seen.get(&slot), Some(&1), "{slot:?} within {t} steps");
            }
        }
        if t > 0 && job.records() > 0 {
            let last = (0..job.ranks()).flat_map(|r| job.batch_slots(r, t - 1));
            assert!(
                last.into_iter().any(|s| wanted(&s)),
                "step {} is needed",
                t - 1
            );
        }
    }

    #[test]
    fn steps_for_epochs_is_the_shortest_job_that_delivers_them() {
        for n in [0u64, 1, 7, 13, 50] {
            for b in [1u64, 3, 10] {
                for mode in MODES {
                    for tail in [Tail::Wrap, Tail::Short] {
                        for p in [1u64, 2, 3, 8] {
                            let plain = JobSchedule::plain(Schedule::new(n, p, b, mode, tail));
                            for epochs in [1, 2, 3] {
                                check_steps_for_epochs(&plain, epochs);
                            }
                            // A re-partitioned job: epoch 0's rest, then normal epochs.
                            let stopped = vec![1; p as usize];
                            let rest = plain.rest_after(&stopped);
                            let job = JobSchedule::new(Schedule::new(n, 3, b, mode, tail), rest);
                            for epochs in [1, 2] {
                                check_steps_for_epochs(&job, epochs);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn each_new_rank_reads_contiguous_runs_of_the_rest() {
        // 100 records on 3 ranks, contiguous blocks 34/33/33, stopped after
        // 2 batches of 10: ranks delivered 0..20, 34..54, 67..87.
        let old = JobSchedule::plain(Schedule::new(
            100,
            3,
            10,
            Partition::Contiguous,
            Tail::Short,
        ));
        let rest = old.rest_after(&[2, 2, 2]);
        let runs: Vec<(u64, u64)> = rest.runs.iter().map(|r| (r.start, r.len)).collect();
        assert_eq!(runs, vec![(20, 14), (54, 13), (87, 13)]);
        assert_eq!(rest.next_epoch, 1);
        // Two new ranks split the 40 left: 20 each, in position order.
        let new = JobSchedule::new(
            Schedule::new(100, 2, 10, Partition::Contiguous, Tail::Short),
            rest,
        );
        let r1: Vec<u64> = (0..2)
            .flat_map(|t| new.batch_slots(1, t))
            .map(|s| s.position)
            .collect();
        assert_eq!(r1, (60..67).chain(87..100).collect::<Vec<_>>());
        // Then epoch 1 starts on every rank, normally.
        assert_eq!(new.remainder_steps(), 2);
        assert_eq!(
            new.batch_slots(0, 2)[0],
            Slot {
                epoch: 1,
                position: 0
            }
        );
    }

    #[test]
    fn wrapped_ranks_do_not_repeat_the_next_epoch() {
        // Strided, wrap: 10 records on 3 ranks, batch 4; after 1 step the
        // ranks have delivered stream 0..12, i.e. all of epoch 0 and
        // positions 0 and 1 of epoch 1.
        let old = JobSchedule::plain(Schedule::new(10, 3, 4, Partition::Strided, Tail::Wrap));
        let rest = old.rest_after(&[1, 1, 1]);
        assert_eq!(
            rest.runs,
            vec![PositionRun {
                epoch: 1,
                start: 2,
                len: 8
            }]
        );
        assert_eq!(rest.next_epoch, 2);
        // At an epoch boundary nothing is left and normal epochs continue.
        let short = JobSchedule::plain(Schedule::new(10, 2, 5, Partition::Contiguous, Tail::Short));
        assert_eq!(
            short.rest_after(&[1, 1]),
            Remainder {
                runs: vec![],
                next_epoch: 1
            }
        );
        assert_eq!(
            short.rest_after(&[0, 0]),
            Remainder {
                runs: vec![],
                next_epoch: 0
            }
        );
    }

    fn job_cursor(ranks: u32, step: u64, database: DatabaseIdentity) -> JobCursor {
        let cursors = (0..ranks)
            .map(|rank| Cursor {
                rank,
                ranks,
                partition: Partition::Strided,
                tail: Tail::Wrap,
                batch: 4,
                shuffle: None,
                step,
                epoch: 0,
                position: 0,
                database,
                after_repartition: false,
            })
            .collect();
        JobCursor::new(Remainder::default(), cursors).unwrap()
    }

    #[test]
    fn job_cursors_resume_exactly_or_repartition_only_when_asked() {
        let db = DatabaseIdentity {
            entries: 50,
            txnid: 3,
            page_size: 4096,
            digest: 0x5eed,
        };
        let base = |p| Schedule::new(50, p, 4, Partition::Strided, Tail::Wrap);
        let job = job_cursor(3, 2, db);
        // Same rank count: the same schedule, each rank at its step.
        let (same, step) = from_job_cursor(&job, base(3), None, db, 1, false).unwrap();
        assert_eq!((same, step), (JobSchedule::plain(base(3)), 2));
        // Another rank count: refused unless asked, then the rest of
        // epoch 0 (24 of 50 delivered) from step 0.
        let e = from_job_cursor(&job, base(2), None, db, 0, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("taken on 3 ranks") && e.contains("re-partition"),
            "{e}"
        );
        let (moved, step) = from_job_cursor(&job, base(2), None, db, 0, true).unwrap();
        assert_eq!(step, 0);
        assert_eq!(moved.remainder().records(), 26);
        assert_eq!(moved.remainder().next_epoch, 1);
        // Another database or another order: refused.
        let other = DatabaseIdentity { txnid: 4, ..db };
        let e = from_job_cursor(&job, base(2), None, other, 0, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("another database"), "{e}");
        let shuffled = Some(Shuffle {
            seed: 1,
            chunk: 5,
            window_chunks: 2,
            mode: crate::order::ShuffleMode::Chunked,
        });
        let e = from_job_cursor(&job, base(2), shuffled, db, 0, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("shuffle"), "{e}");
        let contiguous = Schedule::new(50, 2, 4, Partition::Contiguous, Tail::Wrap);
        assert!(from_job_cursor(&job, contiguous, None, db, 0, true).is_err());
        // A rank cursor of a re-partitioned job cannot resume on its own.
        let mut c = job.cursors[0];
        c.after_repartition = true;
        let e = from_rank_cursor(&c, base(3), None, db, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("job cursor"), "{e}");
    }

    /// A cursor of one shuffle mode resumes only a job of that mode, with
    /// the same seed and sizes: each mode is another order.
    #[test]
    fn a_cursor_resumes_only_its_own_shuffle_mode() {
        use crate::order::ShuffleMode;
        let db = DatabaseIdentity {
            entries: 50,
            txnid: 3,
            page_size: 4096,
            digest: 0x5eed,
        };
        let base = Schedule::new(50, 3, 4, Partition::Strided, Tail::Wrap);
        let shuffle = |mode| {
            Some(
                Shuffle {
                    seed: 1,
                    chunk: 5,
                    window_chunks: 2,
                    mode,
                }
                .normalized(),
            )
        };
        for taken in ShuffleMode::ALL {
            let mut c = job_cursor(3, 20, db).cursors[1];
            c.shuffle = shuffle(taken);
            c.epoch = 1;
            for job in ShuffleMode::ALL {
                let resumed = from_rank_cursor(&c, base, shuffle(job), db, 1);
                assert_eq!(resumed.is_ok(), taken == job, "{taken:?} in a {job:?} job");
            }
        }
    }
}
