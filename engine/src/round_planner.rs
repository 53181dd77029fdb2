//! The arithmetic of rounds, apart from MPI and the window's memory: how
//! many steps a round takes, and which part of the window it is read into
//! (see docs/design/read-rounds.md). The engine builds a [`RoundPlanner`]
//! from its options whenever it plans a round, so a step limit set after
//! opening applies from the next round on.

/// What round planning depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoundPlanner {
    /// Bytes of the window's data area that rounds are read into.
    pub(crate) window_len: u64,
    /// Where in the data area that part starts (after the kept leaf
    /// pages: a whole number of huge pages, see `node_memory`).
    pub(crate) start: u64,
    /// Whether the next round is read while the ranks work on this one:
    /// the window is then two halves used in turn.
    pub(crate) overlap: bool,
    /// Runs are planned in whole granules of this many bytes (1 or the
    /// page size); an area starts at a whole granule.
    pub(crate) granule: u64,
    /// Steps a round takes at most.
    pub(crate) prefetch: u64,
    /// Steps the job's first round takes at most (see
    /// docs/design/inline-records.md, "First batch").
    pub(crate) first_round: u64,
    /// Rounds the job started before the one being planned.
    pub(crate) rounds_before: u64,
    /// The job takes no step at or past this one.
    pub(crate) step_limit: Option<u64>,
    /// Readers per node, among which a round's bytes are split.
    pub(crate) readers_per_node: u64,
}

/// Where a round goes in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Area {
    /// Which area (and which set of progress words): 0, or 1 for the
    /// second half with overlap.
    pub(crate) index: usize,
    /// Bytes the round may take.
    pub(crate) capacity: u64,
    /// Window offset of the area.
    pub(crate) base: u64,
}

impl RoundPlanner {
    /// The area round number `n` (counted from 0) is read into: with
    /// overlap the halves in turn, each starting at a whole granule, as
    /// direct reads need and the kernel's copy into the window prefers.
    pub(crate) fn area(&self, n: u64) -> Area {
        if self.overlap {
            let half = self.window_len / 2 / self.granule * self.granule;
            let index = n % 2;
            Area {
                index: index as usize,
                capacity: half,
                base: self.start + index * half,
            }
        } else {
            Area {
                index: 0,
                capacity: self.window_len,
                base: self.start,
            }
        }
    }

    /// Whether the round starting at step `next` is read ahead (while the
    /// ranks work on the one before).
    pub(crate) fn reads_ahead_to(&self, next: u64) -> bool {
        self.overlap && self.step_limit.is_none_or(|limit| next < limit)
    }

    /// Steps the round being planned takes at most: `first_round` for the
    /// job's first, `prefetch` after. A round is planned whole before any
    /// of it is read, and its first step waits for its first run: a full
    /// first round of small records (thousands of steps) made the first
    /// batch wait for both (see docs/design/inline-records.md, "First
    /// batch").
    pub(crate) fn round_cap(&self) -> u64 {
        let full = self.prefetch.max(1);
        match self.rounds_before {
            0 => self.first_round.clamp(1, full),
            _ => full,
        }
    }

    /// The longest round starting at step `first` whose plan fits
    /// `capacity`: [`Self::round_cap`] steps (fewer before the step limit,
    /// at least one), halved until `plan(k)`'s length (`len`) fits and
    /// each reader's share stays a count MPI can take. Its first step is
    /// served as soon as that step's runs are in, which they are first
    /// (see docs/design/read-rounds.md). `Err` holds the length of the
    /// one-step plan that does not fit.
    pub(crate) fn longest_fitting<R>(
        &self,
        first: u64,
        capacity: u64,
        mut plan: impl FnMut(u64) -> R,
        len: impl Fn(&R) -> u64,
    ) -> Result<R, u64> {
        let left = self
            .step_limit
            .map_or(u64::MAX, |l| l.saturating_sub(first));
        let mut k = self.round_cap().min(left).max(1);
        loop {
            let round = plan(k);
            let bytes = len(&round);
            let per_reader_ok = bytes / self.readers_per_node.max(1) <= i32::MAX as u64 / 2;
            if bytes <= capacity && per_reader_ok {
                return Ok(round);
            }
            if k == 1 {
                return Err(bytes);
            }
            k = k.div_ceil(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planner() -> RoundPlanner {
        RoundPlanner {
            window_len: 10_000,
            start: 0,
            overlap: true,
            granule: 1,
            prefetch: 16,
            first_round: 16,
            rounds_before: 0,
            step_limit: None,
            readers_per_node: 1,
        }
    }

    /// The step counts tried for a round of `step_bytes` per step, and the
    /// one chosen (or the one-step length that did not fit).
    fn tries(
        p: &RoundPlanner,
        first: u64,
        capacity: u64,
        step_bytes: u64,
    ) -> (Vec<u64>, Result<u64, u64>) {
        let mut tried = Vec::new();
        let chosen = p.longest_fitting(
            first,
            capacity,
            |k| {
                tried.push(k);
                k
            },
            |&k| k * step_bytes,
        );
        (tried, chosen)
    }

    #[test]
    fn with_overlap_rounds_alternate_between_halves_that_start_at_a_whole_granule() {
        let p = RoundPlanner {
            granule: 4096,
            ..planner()
        };
        let half = 4096;
        assert_eq!(
            p.area(0),
            Area {
                index: 0,
                capacity: half,
                base: 0
            }
        );
        assert_eq!(
            p.area(1),
            Area {
                index: 1,
                capacity: half,
                base: half
            }
        );
        assert_eq!(p.area(2), p.area(0));
        assert_eq!(p.area(7), p.area(1));
        let bytewise = planner();
        assert_eq!(
            bytewise.area(1),
            Area {
                index: 1,
                capacity: 5_000,
                base: 5_000
            }
        );
    }

    #[test]
    fn without_overlap_every_round_takes_the_whole_window() {
        let p = RoundPlanner {
            overlap: false,
            granule: 4096,
            ..planner()
        };
        for n in 0..4 {
            assert_eq!(
                p.area(n),
                Area {
                    index: 0,
                    capacity: 10_000,
                    base: 0
                }
            );
        }
    }

    #[test]
    fn a_round_is_halved_until_it_fits() {
        assert_eq!(tries(&planner(), 0, 450, 100), (vec![16, 8, 4], Ok(4)));
        assert_eq!(tries(&planner(), 0, 1_600, 100), (vec![16], Ok(16)));
        let odd = RoundPlanner {
            prefetch: 5,
            ..planner()
        };
        assert_eq!(tries(&odd, 0, 100, 100), (vec![5, 3, 2, 1], Ok(1)));
    }

    #[test]
    fn the_jobs_first_round_is_short_and_the_others_full() {
        let p = RoundPlanner {
            prefetch: 2_622,
            first_round: 16,
            ..planner()
        };
        let caps: Vec<u64> = [0, 1, 2, u64::MAX]
            .into_iter()
            .map(|n| {
                RoundPlanner {
                    rounds_before: n,
                    ..p
                }
                .round_cap()
            })
            .collect();
        assert_eq!(caps, [16, 2_622, 2_622, 2_622]);
        assert_eq!(tries(&p, 0, u64::MAX, 1), (vec![16], Ok(16)));
        let second = RoundPlanner {
            rounds_before: 1,
            ..p
        };
        assert_eq!(tries(&second, 16, u64::MAX, 1), (vec![2_622], Ok(2_622)));
        let same = RoundPlanner {
            first_round: 64,
            prefetch: 16,
            ..planner()
        };
        assert_eq!(same.round_cap(), 16);
    }

    #[test]
    fn a_step_that_does_not_fit_alone_is_an_error_with_its_length() {
        assert_eq!(
            tries(&planner(), 0, 450, 500),
            (vec![16, 8, 4, 2, 1], Err(500))
        );
    }

    #[test]
    fn rounds_end_at_the_step_limit_and_take_one_step_past_it() {
        let p = RoundPlanner {
            step_limit: Some(13),
            ..planner()
        };
        assert_eq!(tries(&p, 10, u64::MAX, 1), (vec![3], Ok(3)));
        assert_eq!(tries(&p, 13, u64::MAX, 1), (vec![1], Ok(1)));
        assert_eq!(tries(&p, 20, u64::MAX, 1), (vec![1], Ok(1)));
    }

    #[test]
    fn each_readers_share_stays_a_count_mpi_can_take() {
        let big = i32::MAX as u64; // twice what one reader may read
        let one = RoundPlanner {
            prefetch: 1,
            ..planner()
        };
        assert_eq!(tries(&one, 0, u64::MAX, big).1, Err(big));
        let two = RoundPlanner {
            readers_per_node: 2,
            ..one
        };
        assert_eq!(tries(&two, 0, u64::MAX, big).1, Ok(1));
    }

    #[test]
    fn rounds_are_read_ahead_with_overlap_up_to_the_step_limit() {
        assert!(planner().reads_ahead_to(1_000));
        let limited = RoundPlanner {
            step_limit: Some(5),
            ..planner()
        };
        assert!(limited.reads_ahead_to(4));
        assert!(!limited.reads_ahead_to(5));
        let serial = RoundPlanner {
            overlap: false,
            ..planner()
        };
        assert!(!serial.reads_ahead_to(0));
    }
}
