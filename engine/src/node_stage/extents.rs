//! Which byte ranges of the database a node's stage holds (extents, each
//! with its checksum and whether this job has checked it), and which
//! blocks of the database the node is to hold (placement).

use std::collections::BTreeMap;

/// The unit of placement: the database file in aligned blocks of this
/// many bytes.
pub(crate) const BLOCK: u64 = 4 << 20;

/// Where an extent stands in this job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Listed by an earlier job's manifest: checked on first use.
    Unchecked,
    /// Written by this job, or checked.
    Good,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) len: u64,
    pub(crate) crc: u32,
    pub(crate) check: Check,
}

/// Staged extents by start offset (the same offsets as in the database
/// file); they never overlap.
#[derive(Default)]
pub(crate) struct Extents {
    pub(crate) map: BTreeMap<u64, Extent>,
}

impl Extents {
    /// The extents that together cover `[at, at + len)` with no hole, as `(start, extent)`; `None` if any byte is not staged.
    pub(crate) fn covering(&self, at: u64, len: u64) -> Option<Vec<(u64, Extent)>> {
        let end = at.checked_add(len)?;
        let mut pos = at;
        let mut found = Vec::new();
        let first = self.map.range(..=at).next_back().map_or(at, |(&s, _)| s);
        for (&s, &e) in self.map.range(first..end) {
            if s + e.len <= pos {
                continue;
            }
            if s > pos {
                return None;
            }
            found.push((s, e));
            pos = s + e.len;
            if pos >= end {
                return Some(found);
            }
        }
        (pos >= end).then_some(found)
    }

    /// The parts of `[at, at + len)` no extent holds.
    pub(crate) fn holes(&self, at: u64, len: u64) -> Vec<(u64, u64)> {
        let end = at + len;
        let mut pos = at;
        let mut holes = Vec::new();
        let first = self.map.range(..=at).next_back().map_or(at, |(&s, _)| s);
        for (&s, e) in self.map.range(first..end) {
            if s > pos {
                holes.push((pos, s - pos));
            }
            pos = pos.max(s + e.len);
            if pos >= end {
                break;
            }
        }
        if pos < end {
            holes.push((pos, end - pos));
        }
        holes
    }

    /// Marks the extent at `start` checked, or drops it if it failed (its
    /// bytes are then a hole, staged again).
    pub(crate) fn set_checked(&mut self, start: u64, good: bool) {
        if !good {
            self.map.remove(&start);
        } else if let Some(e) = self.map.get_mut(&start) {
            e.check = Check::Good;
        }
    }

    /// The first extent at or after `from` that no one has checked yet.
    pub(crate) fn next_unchecked(&self, from: u64) -> Option<(u64, Extent)> {
        self.map
            .range(from..)
            .find(|(_, e)| e.check == Check::Unchecked)
            .map(|(&s, &e)| (s, e))
    }
}

/// Which blocks a node holds: every block when the budget covers the
/// whole file (replicated), else block `b` on node `b mod nodes`, the
/// node's first `budget / BLOCK` of them (partitioned). A function of the
/// file's length, the node count and the budget only, so every node knows
/// every node's blocks with no message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) file_len: u64,
    pub(crate) node: u64,
    pub(crate) nodes: u64,
    pub(crate) budget: u64,
}

impl Placement {
    pub(crate) fn blocks(&self) -> u64 {
        self.file_len.div_ceil(BLOCK)
    }

    pub(crate) fn replicated(&self) -> bool {
        self.budget >= self.blocks() * BLOCK
    }

    /// Whether `node` holds block `b`.
    pub(crate) fn holds(&self, node: u64, b: u64) -> bool {
        if b >= self.blocks() {
            return false;
        }
        if self.replicated() {
            return true;
        }
        b % self.nodes == node && b / self.nodes < self.budget / BLOCK
    }

    /// The parts of `[at, at + len)` this node holds, split at block
    /// boundaries.
    pub(crate) fn held_pieces(&self, at: u64, len: u64) -> Vec<(u64, u64)> {
        let end = (at + len).min(self.file_len);
        let mut pieces = Vec::new();
        let mut pos = at;
        while pos < end {
            let b = pos / BLOCK;
            let block_end = ((b + 1) * BLOCK).min(end);
            if self.holds(self.node, b) {
                pieces.push((pos, block_end - pos));
            }
            pos = block_end;
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good(len: u64) -> Extent {
        Extent {
            len,
            crc: 0,
            check: Check::Good,
        }
    }

    #[test]
    fn covering_needs_every_byte_and_no_bad_extent() {
        let mut x = Extents::default();
        x.map.insert(100, good(50));
        x.map.insert(150, good(50));
        x.map.insert(300, good(10));
        assert_eq!(x.covering(120, 60).map(|v| v.len()), Some(2));
        assert_eq!(x.covering(100, 100).map(|v| v.len()), Some(2));
        assert!(x.covering(90, 20).is_none());
        assert!(x.covering(190, 20).is_none());
        assert!(x.covering(301, 5).is_some());
        assert_eq!(x.holes(0, 400), vec![(0, 100), (200, 100), (310, 90)]);
        assert_eq!(x.holes(120, 60), vec![]);
        assert_eq!(x.holes(305, 10), vec![(310, 5)]);
        x.set_checked(150, false);
        assert!(x.covering(120, 60).is_none());
        assert!(x.covering(120, 20).is_some());
        assert_eq!(x.holes(120, 60), vec![(150, 30)]);
    }

    #[test]
    fn every_block_is_held_by_some_node_and_the_budget_holds() {
        for nodes in 1..5 {
            for budget in [0, BLOCK, 3 * BLOCK, 100 * BLOCK] {
                let file_len = 10 * BLOCK + 17;
                let p = |node| Placement {
                    file_len,
                    node,
                    nodes,
                    budget,
                };
                for node in 0..nodes {
                    let held = (0..p(node).blocks())
                        .filter(|&b| p(node).holds(node, b))
                        .count() as u64;
                    assert!(held * BLOCK <= budget);
                }
                if budget >= 100 * BLOCK {
                    assert!(p(0).replicated());
                }
                if budget * nodes >= 11 * BLOCK {
                    for b in 0..11 {
                        assert!((0..nodes).any(|n| p(n).holds(n, b)), "{nodes} {budget} {b}");
                    }
                }
            }
        }
        let p = Placement {
            file_len: 3 * BLOCK,
            node: 1,
            nodes: 2,
            budget: BLOCK,
        };
        assert_eq!(p.held_pieces(0, 3 * BLOCK), vec![(BLOCK, BLOCK)]);
        assert_eq!(p.held_pieces(BLOCK - 5, 10), vec![(BLOCK, 5)]);
    }
}
