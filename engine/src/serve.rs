//! Serving steps: each step's records placed in the window, served once
//! its own bytes are in, with agreements that carry any rank's failure to
//! every rank (see docs/design/agreement.md).

use std::time::Instant;

use crate::agree::{self, agree};
use crate::background::InFlight;
use crate::batch::{Batch, BatchRecord};
use crate::round::for_each_wanted_slot;
use crate::step_ready::{self, StepReads};
use crate::{held, Engine};
use lmdbio_core::error::{Error, Result};
use lmdbio_core::format::PAGEHDRSZ;
use lmdbio_core::values::overflow_header_problem;

/// This rank's batch as placed: the bytes of its values, and whether the
/// epoch limit left records out.
pub(crate) struct PlacedBatch {
    pub(crate) cut: bool,
    pub(crate) bytes: u64,
}

impl Engine {
    /// This rank's next batch. Collective over the communicator: every rank
    /// calls it once per step. The previous batch's slices become invalid.
    pub fn next_batch(&mut self) -> Result<Batch<'_>> {
        if let Some(message) = &self.failed {
            return Err(Error::InvalidArgument(format!(
                "the engine failed earlier and cannot continue: {message}"
            )));
        }
        match self.advance() {
            Ok(()) => Ok(Batch {
                engine: self,
                step: self.step - 1,
            }),
            Err(e) => {
                self.failed = Some(e.to_string());
                Err(e)
            }
        }
    }

    pub(crate) fn advance(&mut self) -> Result<()> {
        let t = self.step;
        if self.options.step_limit.is_some_and(|limit| t >= limit) {
            return Err(Error::InvalidArgument(format!(
                "step {t} is past the step limit given at open"
            )));
        }
        let loaded = self
            .round
            .as_ref()
            .is_some_and(|r| t < r.first_step + r.steps);
        if !loaded {
            self.load_round(t)?;
        } else if self.pending.is_none() && !self.options.collective {
            // The job's first round starts the read after it only once its
            // first step was handed over, so that step neither shares the
            // storage nor waits for the next round's agreement and plan
            // (later rounds start the next read as they begin: load_round;
            // see docs/design/inline-records.md, "First batch").
            let next = self.round.as_ref().map_or(t, |r| r.first_step + r.steps);
            if self.reads_ahead_to(next) {
                self.pending = Some(self.start_round(next)?);
            }
        }
        let agreed = self.round.as_ref().is_some_and(|r| t < r.agreed_end);
        let delivered = if agreed {
            // Every rank saw this step's bytes in, and checked its own
            // headers, before the agreement that covered it.
            let delivered = self.place_batch(t);
            held(&self.parts).memory.sync()?;
            delivered
        } else if self.options.collective {
            self.agree_on_steps_from(t)?
        } else {
            self.serve_from_own_node(t)?
        };
        if let Some(first) = self.batch.first() {
            self.last_epoch = first.epoch;
        }
        self.cut_by_epoch_limit |= delivered.cut;
        self.counters.records_delivered += self.batch.len() as u64;
        self.counters.bytes_delivered += delivered.bytes;
        self.count_step_by_epoch();
        self.step += 1;
        if self.options.step_limit == Some(self.step) {
            // The job's last step: no round starts after it, so the ranks
            // meet here, and a failure anywhere in the last round reaches
            // every rank before any of them leaves.
            let waited = Instant::now();
            self.settle_agreement()?;
            self.counters.wait_seconds += waited.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// Adds the batch just placed to the per-epoch counts: its records and
    /// bytes, and the time since the step before, split between its
    /// epochs by records (all of it to the last epoch for an empty batch).
    fn count_step_by_epoch(&mut self) {
        let now = std::time::Instant::now();
        let seconds = now.duration_since(self.step_clock).as_secs_f64();
        self.step_clock = now;
        let list = &mut self.delivered_by_epoch;
        if self.batch.is_empty() {
            crate::counters::epoch_entry(list, self.last_epoch).seconds += seconds;
            return;
        }
        let share = seconds / self.batch.len() as f64;
        // A batch's records are of one epoch or two: one entry per run of
        // records of one epoch, not per record.
        let mut records = self.batch.iter().peekable();
        while let Some(first) = records.next() {
            let (mut n, mut bytes) = (1u64, first.value.1 as u64);
            while let Some(r) = records.next_if(|r| r.epoch == first.epoch) {
                n += 1;
                bytes += r.value.1 as u64;
            }
            let e = crate::counters::epoch_entry(list, first.epoch);
            e.records += n;
            e.bytes_delivered += bytes;
            e.seconds += share * n as f64;
        }
    }

    /// Independent reads: serves step `t` as soon as this node's bytes for
    /// it are in and this rank's overflow headers check out, without
    /// waiting for other nodes. Nodes meet at the next world agreement
    /// instead: the next round's start (`start_round`), the job's last
    /// step, or a collective call (job cursor, node counters, close).
    ///
    /// Why: an agreement per step made every rank wait for the slowest
    /// node at every step, polling MPI all the while, and with several
    /// nodes' ranks on few cores the polling slowed the readers' storage
    /// (see docs/design/agreement.md).
    ///
    /// A rank that cannot serve `t` (its node's read failed, or one of its
    /// records is damaged) joins that next agreement at once and waits
    /// there, so every rank learns of the failure when it arrives and none
    /// waits for a rank that gave up. Rounds still start with a world
    /// agreement, so a window area is reused only once every rank has left
    /// the round that used it.
    pub(crate) fn serve_from_own_node(&mut self, t: u64) -> Result<PlacedBatch> {
        let (reads_in, delivered) = self.wait_and_place(t);
        let served = reads_in.and_then(|in_here| {
            if in_here {
                agree::local(|| self.check_overflow_headers(&self.batch))?;
                held(&self.parts).memory.sync()?;
            }
            Ok(in_here)
        });
        let failure = match served {
            Ok(true) => {
                self.owes_agreement.set(true);
                return Ok(delivered);
            }
            // Another reader of the node failed: it reports why.
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        // Not served: the meeting fails on every rank.
        match self.meet(failure, i64::MAX, false) {
            Err(e) => Err(e),
            Ok(_) => Err(Error::Internal(format!(
                "step {t} was not served, yet the ranks agreed it was"
            ))),
        }
    }

    /// Joins the world agreement this rank owes, if it owes one.
    pub(crate) fn settle_agreement(&self) -> Result<()> {
        if self.owes_agreement.get() {
            self.meet(Ok(()), i64::MAX, true)?;
        }
        Ok(())
    }

    /// The world agreement the ranks meet at, wherever they meet (a
    /// round's start, the job's last step, a collective call, a step a
    /// rank could not serve, and with collective reads every step): every
    /// kind has this one shape, so a rank that failed a step meets the
    /// others at whichever they reach first.
    /// Returns `local`'s value and the smallest `value` (ranks with no say
    /// pass `i64::MAX`). `served` is false on a rank with nothing to serve
    /// because another reader of its node failed (that reader reports why).
    pub(crate) fn meet<T>(&self, local: Result<T>, value: i64, served: bool) -> Result<(T, i64)> {
        let mut mins = [value, i64::from(served)];
        self.owes_agreement.set(false);
        let agreed = agree(self.world(), local, &mut mins)?;
        if mins[1] == 0 {
            return Err(Error::Internal(
                "a node's reader failed and no rank reported why".into(),
            ));
        }
        Ok((agreed, mins[0]))
    }

    /// Collective reads (independent ones use `serve_from_own_node`): waits
    /// until step `t`'s bytes are in, places this rank's batch, and agrees
    /// with every rank on how far the steps are served: `t`, and the later
    /// steps of the round that every node already has in (their ranks'
    /// overflow headers checked), which then need no agreement of their
    /// own. A reduction costs each rank time where ranks outnumber cores
    /// (see docs/design/polite-wait.md), and a step already in everywhere
    /// has nothing to agree on.
    pub(crate) fn agree_on_steps_from(&mut self, t: u64) -> Result<PlacedBatch> {
        let (reads_in, delivered) = self.wait_and_place(t);
        // The step's values are checked only once they are in.
        let served_to = reads_in.and_then(|ready| {
            if !ready {
                return Ok(None);
            }
            let checked_end = self.round.as_ref().map_or(t, |r| r.checked_end);
            if t >= checked_end {
                agree::local(|| self.check_overflow_headers(&self.batch))?;
            }
            agree::local(|| Ok(Some(self.steps_in_after(t))))
        });
        let waited = Instant::now();
        // Every rank says whether its node's bytes for the step are in (a
        // rank whose node's reader failed has nothing to serve, and the
        // reader reports why in the same agreement) and up to which step
        // they are in with no wait.
        let (ready, end) = match served_to {
            Ok(Some(end)) => (true, end as i64),
            _ => (false, 0),
        };
        let published = served_to.and_then(|_| held(&self.parts).memory.sync());
        self.counters.step_agreements += 1;
        let ((), agreed_end) = self.meet(published, end, ready)?;
        held(&self.parts).memory.sync()?;
        self.counters.wait_seconds += waited.elapsed().as_secs_f64();
        if let Some(round) = self.round.as_mut() {
            round.agreed_end = (agreed_end as u64).max(t + 1);
        }
        Ok(delivered)
    }

    /// The end of the steps after `t` of the loaded round whose bytes are
    /// in on this node now and whose overflow headers in this rank's
    /// records check out. A step whose headers do not ends them: it fails
    /// at its own agreement, on every rank at once.
    pub(crate) fn steps_in_after(&mut self, t: u64) -> u64 {
        let round = self.round.as_ref().expect("round loaded before serving");
        let end = round.first_step + round.steps;
        let words = self.progress_words_of(round);
        let mut records = Vec::new();
        let mut s = t + 1;
        while s < end {
            if !step_ready::step_is_in(&words, round.tag, &round.needs_of(s)) {
                break;
            }
            if s >= round.checked_end {
                records.clear();
                self.own_records(s, &mut records);
                if self.check_overflow_headers(&records).is_err() {
                    break;
                }
            }
            s += 1;
        }
        let round = self.round.as_mut().expect("round loaded before serving");
        round.checked_end = round.checked_end.max(s);
        s
    }

    /// Waits until this node's bytes for step `t` are in (see
    /// `wait_for_step`; the wait counts as I/O time) and lays out this
    /// rank's batch.
    pub(crate) fn wait_and_place(&mut self, t: u64) -> (Result<bool>, PlacedBatch) {
        let io_start = Instant::now();
        let reads_in = self.wait_for_step(t);
        self.counters.io_seconds += io_start.elapsed().as_secs_f64();
        (reads_in, self.place_batch(t))
    }

    /// Lays out this rank's batch of step `t` of the loaded round (offsets
    /// only; no value byte is touched).
    pub(crate) fn place_batch(&mut self, t: u64) -> PlacedBatch {
        let mut batch = std::mem::take(&mut self.batch);
        let placed = self.own_records(t, &mut batch);
        self.batch = batch;
        placed
    }

    /// This rank's records of step `t` of the loaded round, with their
    /// places in the window, written over `batch`.
    pub(crate) fn own_records(&self, t: u64, batch: &mut Vec<BatchRecord>) -> PlacedBatch {
        let round = self.round.as_ref().expect("round loaded before placing");
        let me = held(&self.parts).topology.node.rank();
        let places = round.places(t, me);
        batch.clear();
        let entries = held(&self.parts).memory.entries();
        let mut n = 0;
        let mut bytes = 0u64;
        let world_rank = self.world().rank() as u64;
        let order = &self.order;
        let cut = for_each_wanted_slot(
            &self.schedule,
            self.options.epoch_limit,
            world_rank,
            t,
            |slot| {
                let ordinal = order.ordinal(slot.epoch, slot.position);
                let e = &entries[ordinal as usize];
                let (at, _) = places[n];
                let header = if e.is_overflow() { PAGEHDRSZ as u64 } else { 0 };
                batch.push(BatchRecord {
                    ordinal,
                    epoch: slot.epoch,
                    key: (e.key_start as usize, e.key_len as usize),
                    value: ((at + header) as usize, e.value_len as usize),
                });
                bytes += e.value_len as u64;
                n += 1;
            },
        );
        PlacedBatch { cut, bytes }
    }

    /// Waits until the node's bytes for step `t` of the loaded round are
    /// in: `Ok(true)`; `Ok(false)` when another reader of the node failed
    /// first (it reports why); this rank's own failure as `Err`.
    pub(crate) fn wait_for_step(&mut self, t: u64) -> Result<bool> {
        let me = held(&self.parts).topology.node.rank();
        if let Some(e) = self.round.as_mut().and_then(|r| r.error.take()) {
            return Err(e);
        }
        let round = self.round.as_ref().expect("round loaded before waiting");
        let words = self.progress_words_of(round);
        match step_ready::wait_for_step(&words, round.tag, &round.needs_of(t)) {
            StepReads::Ready => Ok(true),
            StepReads::Failed { reader } if reader == me => {
                let round = self.round.as_mut().expect("round loaded before waiting");
                let why = round.read.take().map(InFlight::wait);
                Err(match why {
                    Some(Err(e)) => e,
                    _ => Error::Internal("this reader's read failed without an error".into()),
                })
            }
            StepReads::Failed { .. } => Ok(false),
            StepReads::TimedOut { reader } => Err(crate::timeout::reader_missing(reader)),
        }
    }

    /// Checks the overflow page headers in front of `records`' values (the
    /// index cannot: it does not read overflow pages).
    pub(crate) fn check_overflow_headers(&self, records: &[BatchRecord]) -> Result<()> {
        let memory = &held(&self.parts).memory;
        let entries = memory.entries();
        for record in records {
            let entry = &entries[record.ordinal as usize];
            if !entry.is_overflow() {
                continue;
            }
            let start = record.value.0 - PAGEHDRSZ;
            // SAFETY: the step's bytes are all in (checked before this is
            // called) and nobody writes them during the step.
            let header = unsafe { memory.data_range(start, PAGEHDRSZ) };
            if let Some((pgno, reason)) =
                overflow_header_problem(entry, header, self.database.page_size)
            {
                let path = match &self.file {
                    Some(f) => f.path().to_owned(),
                    None => self.path.clone(),
                };
                return Err(Error::Corrupt {
                    path,
                    pgno,
                    offset: pgno * self.database.page_size as u64,
                    reason,
                });
            }
        }
        Ok(())
    }
}
