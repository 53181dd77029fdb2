//! Which records a node's ranks may ever be given, for loading a saved
//! index: a master decodes the parts holding them, not the whole index,
//! where the schedule bounds them (see docs/design/saved-index.md).
//!
//! Every use of the node's index looks up the records of the node's own
//! ranks' slots (`entries[order.ordinal(epoch, position)]`). Without a
//! shuffle the ordinal is the position, and a contiguous partition of a
//! fresh job gives each rank the same block of positions in every epoch,
//! so a node's records are its members' blocks. Any other order
//! (a shuffle, interleaved partitions, a resumed job's remainder) may give
//! a rank any record: the node decodes all of them.

use std::ops::Range;

use crate::options::EngineOptions;
use lmdbio_core::schedule::{contiguous_block, contiguous_owner, Partition};

/// The records a node needs, as its options and members bound them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeShare {
    /// World ranks of the job, and of the node's members; `None` when the
    /// node may need any record.
    blocks_of: Option<(u64, Vec<u64>)>,
    /// Threads this node's master decodes on.
    threads: usize,
}

impl Default for NodeShare {
    /// Every record, on one thread per core.
    fn default() -> NodeShare {
        NodeShare {
            blocks_of: None,
            threads: cores(),
        }
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl NodeShare {
    /// The share of the node whose members are the world ranks `members`
    /// of a job of `ranks` ranks opened with `options`, where
    /// `masters_here` masters share this machine's cores: each decodes on
    /// its part of them (at least one thread).
    pub(crate) fn of(
        options: &EngineOptions,
        ranks: u64,
        members: &[u64],
        masters_here: usize,
    ) -> NodeShare {
        let bounded = options.shuffle_seed.is_none()
            && options.partition == Partition::Contiguous
            && options.resume.is_none()
            && options.resume_job.is_none();
        NodeShare {
            blocks_of: bounded.then(|| (ranks, members.to_vec())),
            threads: (cores() / masters_here.max(1)).max(1),
        }
    }

    /// Whether the node's records are bounded (else it needs all).
    pub(crate) fn bounded(&self) -> bool {
        self.blocks_of.is_some()
    }

    /// Threads to decode on.
    pub(crate) fn threads(&self) -> usize {
        self.threads
    }

    /// Whether the node may need any of `part`, records of a database of
    /// `records`.
    pub(crate) fn wants(&self, records: u64, part: &Range<u64>) -> bool {
        let Some((ranks, members)) = &self.blocks_of else {
            return true;
        };
        members.iter().any(|&m| {
            let (first, count) = contiguous_block(records, *ranks, m);
            count > 0 && first < part.end && part.start < first + count
        })
    }

    /// Whether this node answers for the part starting at record `first`
    /// when the parts decoded on every node are added up: the node of the
    /// rank whose block holds it (which wants the part), so each part is
    /// counted once. Only for a bounded share.
    pub(crate) fn counts(&self, records: u64, first: u64) -> bool {
        self.blocks_of.as_ref().is_some_and(|(ranks, members)| {
            first < records && members.contains(&contiguous_owner(records, *ranks, first))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lmdbio_core::order::EpochOrder;
    use lmdbio_core::resume::JobSchedule;
    use lmdbio_core::schedule::{Schedule, Tail};

    /// Every record any member's slots name over three epochs lies in a
    /// part the node wants, and every part is counted by one node only.
    #[test]
    fn a_bounded_share_holds_every_record_its_ranks_are_given() {
        let part_len = 7u64;
        for (records, ranks, k) in [
            (100u64, 4u64, 1u64),
            (100, 4, 2),
            (10, 4, 3),
            (3, 5, 2),
            (64, 2, 1),
        ] {
            for tail in [Tail::Wrap, Tail::Short] {
                for batch in [1u64, 3, 16] {
                    let options = EngineOptions::default();
                    let schedule = JobSchedule::plain(Schedule::new(
                        records,
                        ranks,
                        batch,
                        options.partition,
                        tail,
                    ));
                    let order = EpochOrder::new(records, None);
                    let parts: Vec<Range<u64>> = (0..records.div_ceil(part_len))
                        .map(|i| i * part_len..((i + 1) * part_len).min(records))
                        .collect();
                    let mut counted = vec![0; parts.len()];
                    for node in 0..ranks.div_ceil(k) {
                        let members: Vec<u64> = (node * k..((node + 1) * k).min(ranks)).collect();
                        let share = NodeShare::of(&options, ranks, &members, 2);
                        assert!(share.bounded());
                        let steps = schedule.steps_for_epochs(3);
                        for &m in &members {
                            for step in 0..steps {
                                schedule.for_each_slot(m, step, |slot| {
                                    let r = order.ordinal(slot.epoch, slot.position);
                                    let p = &parts[(r / part_len) as usize];
                                    assert!(
                                        share.wants(records, p),
                                        "record {r} of rank {m}: {records} records, {ranks} ranks, {k} per node"
                                    );
                                });
                            }
                        }
                        for (i, p) in parts.iter().enumerate() {
                            if share.counts(records, p.start) {
                                assert!(share.wants(records, p));
                                counted[i] += 1;
                            }
                        }
                    }
                    assert!(counted.iter().all(|&c| c == 1), "{counted:?}");
                }
            }
        }
    }

    #[test]
    fn other_orders_want_every_record() {
        let base = EngineOptions::default();
        let cases = [
            EngineOptions {
                shuffle_seed: Some(1),
                ..base.clone()
            },
            EngineOptions {
                partition: Partition::Strided,
                ..base.clone()
            },
            EngineOptions {
                partition: Partition::RoundRobinBatches,
                ..base.clone()
            },
        ];
        for options in cases {
            let share = NodeShare::of(&options, 4, &[3], 1);
            assert!(!share.bounded());
            assert!(share.wants(100, &(0..7)));
            assert!(!share.counts(100, 0));
        }
        let mine = NodeShare::of(&base, 4, &[3], 1);
        assert!(mine.bounded() && !mine.wants(100, &(0..7)) && mine.wants(100, &(70..77)));
        // Masters sharing a machine's cores split them, one thread at least.
        assert_eq!(NodeShare::of(&base, 4, &[3], 1).threads(), cores());
        assert_eq!(NodeShare::of(&base, 4, &[3], 4 * cores()).threads(), 1);
    }
}
