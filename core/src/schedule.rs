//! Who gets which records, when: a pure function of (record count, rank
//! count, batch size, partition mode, tail policy) and (rank, step).
//!
//! Every rank of a node can compute every other rank's batches without
//! communication, which is how the node's reader plans one collective read
//! for all of them and how positions stay plain numbers that can be saved
//! and restored. A position within an epoch is mapped to a record ordinal
//! by the epoch's order (the identity here; shuffling replaces it without
//! touching this module's arithmetic).

/// How an epoch's positions are divided among the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Partition {
    /// Rank r reads a contiguous block of about N/P records (the first N % P
    /// ranks one more). Best locality: consecutive batches are neighbours
    /// in the file.
    Contiguous,
    /// The epoch is cut into batches of B consecutive records, dealt to the
    /// ranks in turn.
    RoundRobinBatches,
    /// Record i goes to rank i mod P: the order Caffe's multi-GPU Data layer
    /// produces (its skip counter runs on across epochs).
    Strided,
}

/// What a rank's last batch of an epoch does when its share does not
/// divide into whole batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tail {
    /// Batches are always full; the batch that reaches the end of a rank's
    /// share continues with the next epoch, as Caffe's Data layer does.
    Wrap,
    /// Each epoch ends with a short (possibly empty) batch; every rank has
    /// the same number of batches per epoch so collective steps line up.
    Short,
}

/// Rank `rank`'s block of `records` split over `ranks`: `(first, count)`,
/// the first `records % ranks` ranks taking one more.
pub fn contiguous_block(records: u64, ranks: u64, rank: u64) -> (u64, u64) {
    let (base, extra) = (records / ranks, records % ranks);
    (
        rank * base + rank.min(extra),
        base + u64::from(rank < extra),
    )
}

/// The rank whose contiguous block (see [`contiguous_block`]) holds
/// `position` (< `records`).
pub fn contiguous_owner(records: u64, ranks: u64, position: u64) -> u64 {
    let (base, extra) = (records / ranks, records % ranks);
    let long = extra * (base + 1);
    if position < long {
        position / (base + 1)
    } else {
        extra + (position - long) / base
    }
}

/// A job's schedule: which positions each rank's batch holds at each step.
/// A plain value; every rank builds the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// Records per epoch (N).
    pub records: u64,
    /// Ranks in the job (P, at least 1).
    pub ranks: u64,
    /// Records per batch (B, at least 1).
    pub batch: u64,
    /// How the epoch is divided among the ranks.
    pub partition: Partition,
    /// What the end of a rank's share does.
    pub tail: Tail,
}

/// One record of a batch: which epoch it belongs to and its position in
/// that epoch's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot {
    /// The epoch, from 0.
    pub epoch: u64,
    /// Position in the epoch's order (`0..records`), mapped to a record by
    /// [`crate::order`].
    pub position: u64,
}

impl Schedule {
    /// A schedule of `records` records over `ranks` ranks in batches of
    /// `batch`. Panics if `ranks` or `batch` is 0.
    pub fn new(records: u64, ranks: u64, batch: u64, partition: Partition, tail: Tail) -> Schedule {
        assert!(
            ranks > 0 && batch > 0,
            "schedule needs at least one rank and a batch size"
        );
        Schedule {
            records,
            ranks,
            batch,
            partition,
            tail,
        }
    }

    /// The positions rank `rank` owns in every epoch, for the modes whose
    /// share is fixed per epoch: `(first, count, stride)`.
    fn share(&self, rank: u64) -> (u64, u64, u64) {
        let (n, p) = (self.records, self.ranks);
        match self.partition {
            Partition::Contiguous => {
                let (first, count) = contiguous_block(n, p, rank);
                (first, count, 1)
            }
            Partition::Strided => {
                let count = if rank < n { (n - rank).div_ceil(p) } else { 0 };
                (rank, count, p)
            }
            Partition::RoundRobinBatches => unreachable!("round-robin shares are not fixed blocks"),
        }
    }

    /// Batches per epoch under `Tail::Short` (the same on every rank).
    pub fn batches_per_epoch(&self) -> u64 {
        match self.partition {
            Partition::Contiguous | Partition::Strided => self.share(0).1.div_ceil(self.batch),
            Partition::RoundRobinBatches => self.records.div_ceil(self.batch).div_ceil(self.ranks),
        }
    }

    /// Where position `position` (< `records`) of epoch `epoch` is
    /// delivered: `(rank, step, index in that step's batch)`. The inverse of
    /// [`Schedule::for_each_slot`]; under `Tail::Wrap` batches are full, so
    /// `step * batch + index` counts the records the rank received before it.
    pub fn locate(&self, epoch: u64, position: u64) -> (u64, u64, u64) {
        let (n, p, b) = (self.records, self.ranks, self.batch);
        match (self.partition, self.tail) {
            (Partition::Contiguous, Tail::Wrap) => {
                let rank = contiguous_owner(n, p, position);
                let (first, count) = contiguous_block(n, p, rank);
                let s = epoch * count + (position - first);
                (rank, s / b, s % b)
            }
            (Partition::RoundRobinBatches, Tail::Wrap) => {
                let stream = epoch * n + position;
                let global_batch = stream / b;
                (global_batch % p, global_batch / p, stream % b)
            }
            (Partition::Strided, Tail::Wrap) => {
                let stream = epoch * n + position;
                let k = stream / p;
                (stream % p, k / b, k % b)
            }
            (Partition::Contiguous, Tail::Short) => {
                let rank = contiguous_owner(n, p, position);
                let k = position - contiguous_block(n, p, rank).0;
                (rank, epoch * self.batches_per_epoch() + k / b, k % b)
            }
            (Partition::Strided, Tail::Short) => {
                let k = position / p;
                (
                    position % p,
                    epoch * self.batches_per_epoch() + k / b,
                    k % b,
                )
            }
            (Partition::RoundRobinBatches, Tail::Short) => {
                let global_batch = position / b;
                (
                    global_batch % p,
                    epoch * self.batches_per_epoch() + global_batch / p,
                    position % b,
                )
            }
        }
    }

    /// The records rank `rank` receives at step `step` (its `step`-th call
    /// for a batch), in delivery order.
    pub fn batch_slots(&self, rank: u64, step: u64) -> Vec<Slot> {
        let mut out = Vec::with_capacity(self.batch as usize);
        self.for_each_slot(rank, step, |s| out.push(s));
        out
    }

    /// Calls `f` on each slot of [`Schedule::batch_slots`] in order,
    /// without allocating.
    pub fn for_each_slot(&self, rank: u64, step: u64, mut f: impl FnMut(Slot)) {
        let (n, p, b) = (self.records, self.ranks, self.batch);
        if n == 0 {
            return;
        }
        let at = |stream: u64| Slot {
            epoch: stream / n,
            position: stream % n,
        };
        match (self.partition, self.tail) {
            (Partition::Contiguous, Tail::Wrap) => {
                let (first, count, _) = self.share(rank);
                if count == 0 {
                    return;
                }
                for k in 0..b {
                    let s = step * b + k;
                    f(Slot {
                        epoch: s / count,
                        position: first + s % count,
                    });
                }
            }
            (Partition::RoundRobinBatches, Tail::Wrap) => {
                let global_batch = step * p + rank;
                for k in 0..b {
                    f(at(global_batch * b + k));
                }
            }
            (Partition::Strided, Tail::Wrap) => {
                for k in 0..b {
                    f(at((step * b + k) * p + rank));
                }
            }
            (Partition::Contiguous | Partition::Strided, Tail::Short) => {
                let per_epoch = self.batches_per_epoch();
                let (epoch, j) = (step / per_epoch, step % per_epoch);
                let (first, count, stride) = self.share(rank);
                let lo = (j * b).min(count);
                let hi = ((j + 1) * b).min(count);
                for k in lo..hi {
                    f(Slot {
                        epoch,
                        position: first + k * stride,
                    });
                }
            }
            (Partition::RoundRobinBatches, Tail::Short) => {
                let per_epoch = self.batches_per_epoch();
                let (epoch, j) = (step / per_epoch, step % per_epoch);
                let global_batch = j * p + rank;
                let lo = (global_batch * b).min(n);
                let hi = ((global_batch + 1) * b).min(n);
                for position in lo..hi {
                    f(Slot { epoch, position });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODES: [Partition; 3] = [
        Partition::Contiguous,
        Partition::RoundRobinBatches,
        Partition::Strided,
    ];

    /// Every position of epoch `e` is delivered exactly once across ranks,
    /// for awkward sizes (N not divisible by P or B, N < P, N < B).
    #[test]
    fn each_epoch_is_delivered_exactly_once() {
        for n in [0u64, 1, 2, 5, 7, 13, 64, 97, 100] {
            for p in [1u64, 2, 3, 4, 8] {
                for b in [1u64, 3, 4, 10] {
                    for mode in MODES {
                        for tail in [Tail::Wrap, Tail::Short] {
                            check_exactly_once(Schedule::new(n, p, b, mode, tail));
                        }
                    }
                }
            }
        }
    }

    fn check_exactly_once(s: Schedule) {
        // Walk enough steps to finish three epochs on every rank.
        let steps = 3 * (s.records.div_ceil(s.batch) + 2);
        let mut seen = std::collections::HashMap::new();
        for r in 0..s.ranks {
            for t in 0..steps {
                let slots = s.batch_slots(r, t);
                if s.tail == Tail::Wrap && s.partition != Partition::Contiguous && s.records > 0 {
                    assert_eq!(
                        slots.len() as u64,
                        s.batch,
                        "{s:?} r{r} t{t}: wrap batches are full"
                    );
                }
                for slot in slots {
                    assert!(slot.position < s.records);
                    *seen.entry(slot).or_insert(0u32) += 1;
                }
            }
        }
        for e in 0..2 {
            for pos in 0..s.records {
                let n = seen
                    .get(&Slot {
                        epoch: e,
                        position: pos,
                    })
                    .copied()
                    .unwrap_or(0);
                assert_eq!(n, 1, "{s:?}: epoch {e} position {pos} delivered {n} times");
            }
        }
        assert!(
            seen.values().all(|&n| n == 1),
            "{s:?}: a record repeated within an epoch"
        );
    }

    /// `locate` inverts `for_each_slot` in every mode, awkward sizes included.
    #[test]
    fn locate_finds_where_each_slot_is_delivered() {
        for n in [1u64, 2, 5, 7, 13, 97] {
            for p in [1u64, 2, 3, 4, 8] {
                for b in [1u64, 3, 4, 10] {
                    for mode in MODES {
                        for tail in [Tail::Wrap, Tail::Short] {
                            let s = Schedule::new(n, p, b, mode, tail);
                            for r in 0..p {
                                for t in 0..3 * (n.div_ceil(b) + 2) {
                                    for (i, slot) in s.batch_slots(r, t).into_iter().enumerate() {
                                        assert_eq!(
                                            s.locate(slot.epoch, slot.position),
                                            (r, t, i as u64),
                                            "{s:?} {slot:?}"
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn strided_wrap_is_caffes_skip_order() {
        // Caffe: a running counter over the DB, wrapping; rank keeps
        // offset % P == rank.
        let (n, p, b) = (7u64, 3u64, 2u64);
        let s = Schedule::new(n, p, b, Partition::Strided, Tail::Wrap);
        for rank in 0..p {
            let caffe: Vec<u64> = (0..)
                .filter(|o| o % p == rank)
                .map(|o| o % n)
                .take(10)
                .collect();
            let ours: Vec<u64> = (0..5)
                .flat_map(|t| s.batch_slots(rank, t))
                .map(|x| x.position)
                .collect();
            assert_eq!(ours, caffe, "rank {rank}");
        }
    }

    #[test]
    fn contiguous_blocks_are_balanced_and_in_order() {
        let s = Schedule::new(10, 3, 2, Partition::Contiguous, Tail::Short);
        let r0: Vec<u64> = (0..2)
            .flat_map(|t| s.batch_slots(0, t))
            .map(|x| x.position)
            .collect();
        let r2: Vec<u64> = (0..2)
            .flat_map(|t| s.batch_slots(2, t))
            .map(|x| x.position)
            .collect();
        assert_eq!(r0, vec![0, 1, 2, 3]);
        assert_eq!(r2, vec![7, 8, 9]);
        assert_eq!(s.batches_per_epoch(), 2);
        // Step 2 starts epoch 1 on every rank, even the shorter ones.
        assert_eq!(
            s.batch_slots(2, 2)[0],
            Slot {
                epoch: 1,
                position: 7
            }
        );
    }

    #[test]
    fn single_rank_wrap_is_the_stock_data_layer_sequence() {
        let s = Schedule::new(5, 1, 3, Partition::Contiguous, Tail::Wrap);
        let got: Vec<(u64, u64)> = (0..3)
            .flat_map(|t| s.batch_slots(0, t))
            .map(|x| (x.epoch, x.position))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 0),
                (0, 1),
                (0, 2),
                (0, 3),
                (0, 4),
                (1, 0),
                (1, 1),
                (1, 2),
                (1, 3)
            ]
        );
    }
}
