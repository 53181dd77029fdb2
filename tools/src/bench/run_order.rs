//! The order of method runs across repetitions. On a shared or virtual
//! machine a run inherits state from the one before it: the host's page
//! cache (which `--cold` cannot drop from inside a guest), the disk's, the
//! CPU's. A method that always follows the same one inherits the same state
//! every time (plain rotation does that), so the repetitions follow a
//! Williams design: over a full cycle of rows every method directly follows
//! every other method equally often, and each method takes each position
//! equally often.

/// Rows in one full cycle of the design for `n` methods.
fn cycle_rows(n: usize) -> usize {
    if n.is_multiple_of(2) {
        n
    } else {
        2 * n
    }
}

/// The order of `n` methods in repetition `rep`: row `rep` of the design,
/// cycling after `n` rows (even `n`) or `2n` rows (odd `n`).
pub fn run_order(n: usize, rep: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    // First row 0, 1, n-1, 2, n-2, ...; row r adds r to every entry.
    let first: Vec<usize> = (0..n)
        .map(|j| {
            if j % 2 == 1 {
                j.div_ceil(2)
            } else {
                (n - j / 2) % n
            }
        })
        .collect();
    let r = rep % cycle_rows(n);
    let mut row: Vec<usize> = first.iter().map(|&x| (x + r) % n).collect();
    // For odd n the second half of the cycle runs the first half's rows
    // backwards, which supplies the successor pairs the first half lacks.
    if r >= n {
        row.reverse();
    }
    row
}

#[cfg(test)]
mod tests {
    use super::{cycle_rows, run_order};

    /// How often `b` directly follows `a` within the rows of a full cycle.
    fn successions(n: usize) -> Vec<Vec<usize>> {
        let rows = cycle_rows(n);
        let mut count = vec![vec![0; n]; n];
        for rep in 0..rows {
            let row = run_order(n, rep);
            for w in row.windows(2) {
                count[w[0]][w[1]] += 1;
            }
        }
        count
    }

    #[test]
    fn every_row_runs_every_method_once() {
        for n in 1..9 {
            for rep in 0..2 * n {
                let mut row = run_order(n, rep);
                row.sort_unstable();
                assert_eq!(row, (0..n).collect::<Vec<_>>(), "n={n} rep={rep}");
            }
        }
    }

    #[test]
    fn every_method_follows_every_other_equally_often() {
        for n in 2..9 {
            let per_pair = cycle_rows(n) / n;
            let count = successions(n);
            for (a, row) in count.iter().enumerate() {
                for (b, &c) in row.iter().enumerate() {
                    let want = if a == b { 0 } else { per_pair };
                    assert_eq!(c, want, "n={n}: {b} after {a}");
                }
            }
        }
    }

    #[test]
    fn plain_rotation_would_fail_the_balance_check() {
        // The property above is not vacuous: rotating one list makes each
        // method follow the same one in every row.
        let n = 6;
        let mut count = vec![vec![0; n]; n];
        for rep in 0..n {
            let row: Vec<usize> = (0..n).map(|i| (i + rep) % n).collect();
            for w in row.windows(2) {
                count[w[0]][w[1]] += 1;
            }
        }
        assert_eq!(count[0][1], n - 1);
    }

    #[test]
    fn each_method_takes_each_position_equally_often() {
        for n in 2..9 {
            let rows = cycle_rows(n);
            let mut at = vec![vec![0; n]; n];
            for rep in 0..rows {
                for (pos, &m) in run_order(n, rep).iter().enumerate() {
                    at[m][pos] += 1;
                }
            }
            for (m, positions) in at.iter().enumerate() {
                assert!(
                    positions.iter().all(|&c| c == rows / n),
                    "n={n}: method {m} at {positions:?}"
                );
            }
        }
    }
}
