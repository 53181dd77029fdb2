//! Reading values in rounds: which records a round covers, its read plan,
//! where it lands in the window, and starting this reader's part of it
//! (see docs/design/read-rounds.md).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use crate::background::{
    read_and_publish, BackgroundRead, FinishOnDrop, InFlight, Publish, ReadFinished,
};
use crate::counters::BytesByEpoch;
use crate::data_file::{DataFile, RunsRead, WindowRange};
use crate::options::MACHINE_READ_STREAMS;
use crate::round_planner::{Area, RoundPlanner};
use crate::step_ready::{Progress, ReadSchedule};
use crate::{agree, inline_pages};
use crate::{held, Engine};
use lmdbio_core::error::{Error, Result};
use lmdbio_core::plan::{ReadPlan, ReadRun};
use lmdbio_core::resume::JobSchedule;
use lmdbio_core::schedule::Slot;

/// Whose a planned span is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpanOwner {
    /// Step offset within the round.
    pub(crate) step: u32,
    /// Node member (node rank).
    pub(crate) member: u32,
    /// The epoch of the record (reads are counted by epoch).
    pub(crate) epoch: u64,
}

/// A round's records and read plan.
pub(crate) struct PlannedRound {
    pub(crate) steps: u64,
    /// Every record of the round, in schedule order.
    pub(crate) owners: Vec<SpanOwner>,
    /// Per record: where its value lies if it is served from a kept leaf
    /// page (see `inline_pages`); the others are the plan's spans, in
    /// order. Empty where the node keeps no page (see `kept_at`).
    pub(crate) kept: Vec<Option<(u64, u64)>>,
    pub(crate) plan: ReadPlan,
}

/// Record `i`'s place in a kept page, from a round's `kept` list (empty
/// where no page is kept: a list of nothing but `None` per record was
/// memory to fill and read for every round of a saved index).
fn kept_at(kept: &[Option<(u64, u64)>], i: usize) -> Option<(u64, u64)> {
    kept.get(i).copied().flatten()
}

/// The lists planning a round fills: the spans to read, who owns each
/// record, where the kept ones lie (see `Engine::round_spans`), and the
/// plan. The engine keeps the last round's for the next to refill: lists
/// made anew for every round of small records faulted in fresh memory
/// each time, which cost more than filling them.
#[derive(Default)]
pub(crate) struct RoundLists {
    spans: Vec<(u64, u64)>,
    owners: Vec<SpanOwner>,
    kept: Vec<Option<(u64, u64)>>,
    plan: ReadPlan,
    /// A retired round's placements (see `Round::placements`).
    placements: Vec<(u64, u64)>,
}

/// A round: its records placed in the window and its reads started (or
/// done). Its steps are served as their own bytes come in (see
/// [`step_ready`]).
pub(crate) struct Round {
    pub(crate) first_step: u64,
    pub(crate) steps: u64,
    /// Names the round in the readers' progress words (never 0, the value
    /// the words start from).
    pub(crate) tag: u32,
    /// Which of the window's areas (and progress words) it uses.
    pub(crate) area: usize,
    /// Window offset and length of each record's span, in schedule order
    /// (by step offset, then node member): one list for the round, cut by
    /// `place_starts`, rather than one allocation per step and member.
    pub(crate) placements: Vec<(u64, u64)>,
    /// Where each (step offset, node member)'s placements start, in that
    /// order, and the end of the last.
    pub(crate) place_starts: Vec<usize>,
    /// Node members, the stride of `place_starts`.
    pub(crate) members: usize,
    /// For each of the node's readers and each step: how many of the
    /// reader's runs must be in before the step is served.
    pub(crate) needs: Vec<Vec<usize>>,
    /// Steps before this one are agreed served (all their bytes in on
    /// every node); they need no agreement of their own.
    pub(crate) agreed_end: u64,
    /// Steps before this one have had this rank's overflow headers
    /// checked.
    pub(crate) checked_end: u64,
    /// This reader's read, while it runs on a helper thread.
    pub(crate) read: Option<InFlight>,
    /// A failure of this rank's part of the round, reported at the next
    /// step's agreement.
    pub(crate) error: Option<Error>,
}

impl Round {
    /// Node member `member`'s placements at step `t` of this round.
    pub(crate) fn places(&self, t: u64, member: usize) -> &[(u64, u64)] {
        let at = (t - self.first_step) as usize * self.members + member;
        &self.placements[self.place_starts[at]..self.place_starts[at + 1]]
    }

    /// How many runs each reader must have complete before step `t` (of
    /// this round) is served.
    pub(crate) fn needs_of(&self, t: u64) -> Vec<usize> {
        let offset = (t - self.first_step) as usize;
        self.needs.iter().map(|n| n[offset]).collect()
    }
}

/// What a reader reads of a round.
pub(crate) struct MyReads {
    pub(crate) runs: Vec<ReadRun>,
    pub(crate) order: Vec<usize>,
    /// Window offset of the round's area.
    pub(crate) base: u64,
    /// The epoch each run counts for (see `run_epochs`).
    pub(crate) epochs: Vec<u64>,
    /// The runs other nodes send and those they ask for.
    pub(crate) exchange: Option<crate::exchange::RoundExchange>,
}

/// The epoch each of `plan.runs[mine]` counts for: the earliest among the
/// records it holds. `span_epochs` gives each of the plan's spans' epoch,
/// in the plan's order.
fn run_epochs(plan: &ReadPlan, span_epochs: &[u64], mine: std::ops::Range<usize>) -> Vec<u64> {
    let runs = &plan.runs[mine];
    let mut epoch_of = vec![u64::MAX; runs.len()];
    let mut near = 0;
    for (p, &epoch) in plan.placements.iter().zip(span_epochs) {
        // The run found for the span before first: spans mostly follow
        // one another in the buffer.
        let holds =
            |r: &ReadRun| r.buf_offset <= p.buf_offset && p.buf_offset - r.buf_offset < r.len;
        let k = if runs.get(near).is_some_and(holds) {
            near
        } else {
            runs.partition_point(|r| r.buf_offset + r.len <= p.buf_offset)
        };
        near = k;
        if let Some(e) = epoch_of
            .get_mut(k)
            .filter(|_| runs[k].buf_offset <= p.buf_offset)
        {
            *e = (*e).min(epoch);
        }
    }
    // Every run holds a span; a run without one would count for the epoch
    // before it.
    let mut before = 0;
    for e in &mut epoch_of {
        if *e == u64::MAX {
            *e = before;
        }
        before = *e;
    }
    epoch_of
}

/// The bytes of `runs` by epoch (`epochs[i]` is run `i`'s), of the runs
/// `take` selects.
pub(crate) fn run_bytes_by_epoch(
    runs: &[ReadRun],
    epochs: &[u64],
    take: impl Fn(usize) -> bool,
) -> BytesByEpoch {
    let mut out: BytesByEpoch = Vec::new();
    for (i, (r, &e)) in runs.iter().zip(epochs).enumerate() {
        if !take(i) {
            continue;
        }
        match out.iter_mut().find(|(x, _)| *x == e) {
            Some((_, b)) => *b += r.len,
            None => out.push((e, r.len)),
        }
    }
    out
}

/// Progress words the window holds: one per reader (at most one per node
/// rank) for each of the two areas.
pub(crate) fn progress_words(node_ranks: usize) -> usize {
    2 * node_ranks
}

/// Rank `rank`'s records at step `step` that the job reads: all of them
/// but those at or past the epoch limit. Reading (`round_spans`) and
/// delivering (`advance`) both go through here, so a batch's placements
/// line up with its records. Returns whether the limit left any out.
pub(crate) fn for_each_wanted_slot(
    schedule: &JobSchedule,
    epoch_limit: Option<u64>,
    rank: u64,
    step: u64,
    mut f: impl FnMut(Slot),
) -> bool {
    let limit = epoch_limit.unwrap_or(u64::MAX);
    let mut left_out = false;
    schedule.for_each_slot(rank, step, |slot| {
        if slot.epoch < limit {
            f(slot)
        } else {
            left_out = true;
        }
    });
    left_out
}

impl Engine {
    /// Readers per node (the first node ranks).
    pub(crate) fn node_readers(&self) -> usize {
        self.options
            .readers_per_node
            .min(held(&self.parts).topology.node.size())
            .max(1)
    }

    /// The round arithmetic under the current options (the step limit may
    /// change after opening).
    pub(crate) fn round_planner(&self) -> RoundPlanner {
        RoundPlanner {
            window_len: held(&self.parts).memory.data_len() as u64,
            start: held(&self.parts).memory.rounds_start() as u64,
            overlap: self.options.overlap,
            granule: self.plan_granule,
            prefetch: self.round_steps as u64,
            first_round: self.options.prefetch as u64,
            rounds_before: self.rounds_started,
            step_limit: self.options.step_limit,
            readers_per_node: self.options.readers_per_node as u64,
        }
    }

    /// Whether the round starting at step `next` is read ahead.
    pub(crate) fn reads_ahead_to(&self, next: u64) -> bool {
        self.round_planner().reads_ahead_to(next)
    }

    /// Every node member's records for steps `[first, first+k)`, written
    /// over `lists`: who owns each (`(step offset, member)`), where each
    /// lies if it is served from a kept leaf page, and the spans of the
    /// others, to read.
    pub(crate) fn round_spans(&self, first: u64, k: u64, lists: &mut RoundLists) {
        let memory = &held(&self.parts).memory;
        let entries = memory.entries();
        let RoundLists {
            spans,
            owners,
            kept,
            ..
        } = lists;
        spans.clear();
        owners.clear();
        kept.clear();
        // At most a full batch per step and member: sized once, these
        // lists are not copied as they grow (a hint, bounded for batches
        // of absurd sizes).
        let most = (k as usize)
            .saturating_mul(held(&self.parts).topology.members.len())
            .saturating_mul(self.schedule.base().batch as usize)
            .min(1 << 24);
        spans.reserve(most);
        owners.reserve(most);
        kept.reserve(most);
        let mut lookup = inline_pages::KeptLookup::new(memory);
        let keeps = lookup.keeps_pages();
        for s in 0..k {
            for (m, &rank) in held(&self.parts).topology.members.iter().enumerate() {
                for_each_wanted_slot(
                    &self.schedule,
                    self.options.epoch_limit,
                    rank,
                    first + s,
                    |slot| {
                        let ordinal = self.order.ordinal(slot.epoch, slot.position) as usize;
                        let in_page = lookup.value(&entries[ordinal]);
                        if in_page.is_none() {
                            spans.push(entries[ordinal].span());
                        }
                        if keeps {
                            kept.push(in_page);
                        }
                        owners.push(SpanOwner {
                            step: s as u32,
                            member: m as u32,
                            epoch: slot.epoch,
                        });
                    },
                );
            }
        }
    }

    /// Spans and plan of the round of `k` steps starting at `first`.
    pub(crate) fn plan_round(&self, first: u64, k: u64) -> PlannedRound {
        let mut lists = self.spare_lists.take();
        self.round_spans(first, k, &mut lists);
        let mut plan = std::mem::take(&mut lists.plan);
        plan.replan_aligned(&lists.spans, self.options.coalesce, self.plan_granule);
        let owners = std::mem::take(&mut lists.owners);
        let kept = std::mem::take(&mut lists.kept);
        self.spare_lists.set(lists);
        if self.options.stage.is_some() {
            // A run in one block comes from one node (see `exchange`).
            plan = crate::exchange::split_at_blocks(plan);
        }
        PlannedRound {
            steps: k,
            owners,
            kept,
            plan,
        }
    }

    /// The longest round (up to `prefetch` steps) that fits `capacity`
    /// (see [`RoundPlanner::longest_fitting`]).
    pub(crate) fn steps_that_fit(&self, first: u64, capacity: u64) -> Result<PlannedRound> {
        self.round_planner()
            .longest_fitting(first, capacity, |k| self.plan_round(first, k), |round| round.plan.buffer_len)
            .map_err(|len| {
                Error::ResourceLimit(format!(
                    "the shared window ({} bytes{}) is too small for one batch of every rank on the node ({} bytes); raise window_bytes",
                    held(&self.parts).memory.data_len(),
                    if self.options.overlap { ", half per round with overlap" } else { "" },
                    len
                ))
            })
    }

    /// Makes the round starting at step `first` the one served: the one
    /// read ahead, or one started now; with overlap on, the read after it
    /// starts too, into the other half of the window, while the ranks work
    /// on this one.
    pub(crate) fn load_round(&mut self, first: u64) -> Result<()> {
        // Every step of the round before was served, so its reads are
        // complete; this joins the thread that ran them (it counted them
        // itself, see ReadTally).
        let retired = match self.round.take() {
            Some(mut done) => {
                let read = self.complete_read(&mut done);
                self.spare_lists.get_mut().placements = done.placements;
                read
            }
            None => Ok(()),
        };
        let mut current = match self.pending.take() {
            Some(r) if r.first_step == first => r,
            _ => self.start_round(first)?,
        };
        if let Err(e) = retired {
            current.error.get_or_insert(e);
        }
        let next = current.first_step + current.steps;
        if self.options.collective {
            // Collective reads keep their order: two collective calls in
            // flight on one file from two threads would not match across
            // ranks. This round's read completes before the next starts.
            if let Err(e) = self.complete_read(&mut current) {
                current.error.get_or_insert(e);
            }
        }
        let first_round = self.counters.rounds == 0;
        self.counters.rounds += 1;
        self.round = Some(current);
        // The next read is queued before this round's steps are waited
        // for, to start as soon as this round's reads are done:
        // a node whose reads are done would otherwise leave its storage
        // idle while the slowest node catches up (see
        // docs/design/read-rounds.md). Its half of the
        // window is free: every rank has left the round before
        // (start_round agrees first). The job's first round waits alone
        // for its first step (advance starts the next read after it).
        if self.reads_ahead_to(next) && (self.options.collective || !first_round) {
            self.pending = Some(self.start_round(next)?);
        }
        Ok(())
    }

    /// Waits for this reader's read of `round` if it runs on a thread (the
    /// read thread counted it).
    pub(crate) fn complete_read(&mut self, round: &mut Round) -> Result<()> {
        let Some(read) = round.read.take() else {
            return Ok(());
        };
        let io_start = Instant::now();
        let done = read.wait();
        self.counters.io_seconds += io_start.elapsed().as_secs_f64();
        done.map(|_| ())
    }

    /// Agrees on the round's length, plans it, and starts this reader's
    /// reads (collective over all ranks). A failure to start them is kept
    /// for the round's first step's agreement (`wait_for_step`), and shown
    /// in this reader's progress word so no rank waits for it.
    pub(crate) fn start_round(&mut self, first: u64) -> Result<Round> {
        let waited = Instant::now();
        let Area {
            index: area,
            capacity,
            base,
        } = self.round_planner().area(self.rounds_started);
        // Masters find how many steps fit; the smallest wins everywhere so
        // rounds (and collective reads) line up across nodes.
        let fit = if held(&self.parts).topology.node.rank() == 0 {
            agree::local(|| self.steps_that_fit(first, capacity)).map(Some)
        } else {
            Ok(None)
        };
        let local_k = fit
            .as_ref()
            .ok()
            .and_then(|r| r.as_ref())
            .map_or(i64::MAX, |r| r.steps as i64);
        if !self.options.collective {
            // With independent reads the ranks meet only here and at the
            // job's last step (serve_from_own_node).
            self.counters.step_agreements += 1;
        }
        let (fitted, k) = self.meet(fit, local_k, true)?;
        let k = k.max(1) as u64;
        self.rounds_started += 1;
        let tag = self.rounds_started as u32;
        // A master already planned this round unless another node needed
        // a shorter one.
        let PlannedRound {
            steps: _,
            owners,
            kept,
            plan,
        } = match fitted {
            Some(round) if round.steps == k => round,
            _ => self.plan_round(first, k),
        };
        self.counters.wait_seconds += waited.elapsed().as_secs_f64();

        let io_start = Instant::now();
        let readers = self.node_readers();
        let members = held(&self.parts).topology.members.len();
        let read_owners = || {
            (owners.iter().enumerate())
                .filter(|&(i, _)| kept_at(&kept, i).is_none())
                .map(|(_, o)| o)
        };
        let span_steps: Vec<usize> = read_owners().map(|o| o.step as usize).collect();
        let ReadSchedule {
            groups,
            mut order,
            needs,
        } = ReadSchedule::new(&plan, &span_steps, k as usize, readers);
        let mut placements = std::mem::take(&mut self.spare_lists.get_mut().placements);
        placements.clear();
        placements.reserve(owners.len());
        let mut place_starts = vec![0; k as usize * members + 1];
        let mut planned = plan.placements.iter();
        for (i, o) in owners.iter().enumerate() {
            let in_page = kept_at(&kept, i);
            let place = match (in_page, in_page.is_none().then(|| planned.next())) {
                (Some(at), _) => at,
                (None, Some(Some(p))) => (base + p.buf_offset, p.len),
                _ => return Err(Error::Internal("a round's plan lacks a record".into())),
            };
            placements.push(place);
            place_starts[o.step as usize * members + o.member as usize + 1] += 1;
        }
        let mut sum = 0;
        for start in &mut place_starts {
            sum += *start;
            *start = sum;
        }
        let mut round = Round {
            first_step: first,
            steps: k,
            tag,
            area,
            placements,
            place_starts,
            members,
            needs,
            agreed_end: first,
            checked_end: first,
            read: None,
            error: None,
        };
        let me = held(&self.parts).topology.node.rank();
        if me < readers && held(&self.parts).topology.readers.is_some() {
            let span_epochs: Vec<u64> = read_owners().map(|o| o.epoch).collect();
            let runs = plan.runs[groups[me].clone()].to_vec();
            // Every reader takes part in every round's exchange, whatever
            // else fails: its peers wait for its answer.
            let stage = self.file.as_deref().and_then(DataFile::stage);
            let exchange = match self.exchange.as_mut() {
                Some(x) => agree::local(|| x.plan_round(&runs, stage, tag)).map(Some),
                None => Ok(None),
            };
            let started = exchange.and_then(|exchange| {
                let mine = MyReads {
                    runs,
                    order: std::mem::take(&mut order[me]),
                    base,
                    epochs: run_epochs(&plan, &span_epochs, groups[me].clone()),
                    exchange,
                };
                agree::local(|| self.start_my_reads(&mut round, mine))
            });
            if let Err(e) = started {
                self.progress(area, me, tag).fail();
                round.error = Some(e);
            }
        }
        let spare = self.spare_lists.get_mut();
        (spare.owners, spare.kept, spare.plan) = (owners, kept, plan);
        self.counters.io_seconds += io_start.elapsed().as_secs_f64();
        Ok(round)
    }

    /// Reader `reader`'s progress word for window area `area`: the window
    /// holds one set of one word per reader for each area.
    pub(crate) fn progress_word(&self, area: usize, reader: usize) -> &AtomicU64 {
        let readers = self.node_readers();
        held(&self.parts)
            .memory
            .progress_word(area * readers + reader)
    }

    /// Every reader's progress word for the area `round` uses.
    pub(crate) fn progress_words_of(&self, round: &Round) -> Vec<&AtomicU64> {
        (0..self.node_readers())
            .map(|g| self.progress_word(round.area, g))
            .collect()
    }

    /// This reader's progress word for the round of `tag` in `area`, as
    /// its read threads publish to it.
    pub(crate) fn progress(&self, area: usize, reader: usize, tag: u32) -> Progress {
        let word = self.progress_word(area, reader);
        // SAFETY: the word lies in the node's window, which the engine
        // keeps until every read publishing to it has been joined (drop
        // takes the rounds, whose reads join, before giving it back).
        unsafe { Progress::new(word, tag) }
    }

    /// Starts this reader's reads of `round`: `mine.runs` (its group of the
    /// plan, in file order, packed back to back) in `mine.order`.
    pub(crate) fn start_my_reads(&mut self, round: &mut Round, mine: MyReads) -> Result<()> {
        let parts = held(&self.parts);
        let MyReads {
            runs,
            order,
            base,
            epochs,
            exchange,
        } = mine;
        // The peers wait for this reader's part of the exchange: it is
        // settled, without reading, if the round cannot be read.
        let fail = |why: &str| {
            if let Some(x) = &exchange {
                x.settle(&runs);
            }
            Err(Error::Internal(why.into()))
        };
        let (Some(readers), Some(file)) = (&parts.topology.readers, &self.file) else {
            return fail("a reader without its data file");
        };
        let progress = self.progress(round.area, parts.topology.node.rank(), round.tag);
        let (lo, hi) = match (runs.first(), runs.last()) {
            (Some(a), Some(b)) => (base + a.buf_offset, base + b.buf_offset + b.len),
            _ => (base, base),
        };
        if hi as usize > parts.memory.rounds_start() + parts.memory.data_len() {
            return fail("a round's reads overrun the window");
        }
        // The range lies inside this round's area of the window (the plan
        // fits its capacity, checked above); each reader writes only its
        // own range, and no rank reads a byte of it before the reader's
        // progress word says the run holding it is complete.
        let buf = parts.memory.rounds_ptr(lo as usize);
        let len = (hi - lo) as usize;
        // SAFETY: see above; the range stays untouched by anyone else until
        // the read is complete (joined, waited for, or done here).
        let dest = unsafe { WindowRange::new(buf, len) };
        let streams = self.options.read_streams.unwrap_or_else(|| {
            (MACHINE_READ_STREAMS / held(&self.parts).topology.machine_readers).max(1)
        });
        // Staggering: readers take turns in groups of `stagger`, everyone
        // taking part in every phase so collective calls always match.
        // Staggered phases run one after another; without staggering the
        // single read is left to complete while the ranks work.
        let group = self.options.stagger.unwrap_or(readers.size()).max(1);
        let phases = readers.size().div_ceil(group);
        let my_phase = readers.rank() / group;
        let own = matches!(**file, DataFile::Own(_));
        if phases == 1 && self.options.overlap {
            let file = Arc::clone(file);
            let tally = Arc::clone(&self.tally);
            let snapshot = self.snapshot.clone();
            let in_flight = BackgroundRead::start();
            let finished = Arc::new(ReadFinished::default());
            let before = self.previous_read.replace(Arc::clone(&finished));
            let read = move || {
                let _in_flight = in_flight;
                let _finished = FinishOnDrop(finished);
                if let Some(before) = before {
                    before.wait();
                }
                let publish = Publish {
                    progress,
                    tally: &tally,
                    snapshot: snapshot.as_deref(),
                };
                let exchange = exchange.as_ref();
                read_and_publish(
                    &file, &runs, &order, dest, streams, publish, &epochs, exchange,
                )
            };
            round.read = Some(if own || self.threaded_reads {
                InFlight::Thread(Some(std::thread::spawn(read)))
            } else {
                // A collective read without MPI_THREAD_MULTIPLE: read now.
                InFlight::Done(Some(read()))
            });
            return Ok(());
        }
        let mut result = Ok(());
        for phase in 0..phases {
            let mine = phase == my_phase;
            // Collective reads take part in every phase, reading nothing
            // in the others' phases.
            let done = if mine {
                let publish = Publish {
                    progress,
                    tally: &self.tally,
                    snapshot: self.snapshot.as_deref(),
                };
                let exchange = exchange.as_ref();
                read_and_publish(
                    file, &runs, &order, dest, streams, publish, &epochs, exchange,
                )
            } else if !own {
                // SAFETY: an empty range.
                let nothing = unsafe { WindowRange::new(buf, 0) };
                file.read_runs(&[], &[], nothing, streams, &|_| {}, &[])
            } else {
                Ok(RunsRead::default())
            };
            match done {
                Ok(_) => {}
                Err(e) if result.is_ok() => result = Err(e),
                Err(_) => {}
            }
            if own && phases > 1 {
                readers.barrier()?;
            }
        }
        result
    }
}
