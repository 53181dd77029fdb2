//! Key order checked while parsing, so that an index needs no keys kept
//! to be checked: each key against the one before it in a run of leaves,
//! and each run's first key against the previous run's last (see
//! docs/design/saved-index.md, "Index memory per record").

use crate::format::KeyOrder;

/// The keys of one run of records seen so far, in the order given: the
/// first and the last, and whether each was above the one before.
#[derive(Debug, Clone, Default)]
pub struct OrderCheck {
    first: Option<Vec<u8>>,
    last: Vec<u8>,
}

impl OrderCheck {
    /// Takes the next key; false (and nothing recorded) when it is not
    /// strictly above the previous one.
    pub fn next(&mut self, order: KeyOrder, key: &[u8]) -> bool {
        match self.first {
            None => self.first = Some(key.to_vec()),
            Some(_) if !order.compare(&self.last, key).is_lt() => return false,
            Some(_) => {}
        }
        self.last.clear();
        self.last.extend_from_slice(key);
        true
    }

    /// Takes `key` as the last, known to be above the previous one (the
    /// caller compared them where they lie). Only after [`Self::next`]
    /// took the run's first key.
    pub(crate) fn set_last(&mut self, key: &[u8]) {
        self.last.clear();
        self.last.extend_from_slice(key);
    }

    /// The run's first and last keys, if it has any.
    pub fn ends(&self) -> Option<(&[u8], &[u8])> {
        self.first.as_deref().map(|f| (f, &self.last[..]))
    }

    /// Makes this the run of its keys followed by `next`'s, leaving the
    /// seam between them unchecked (see [`first_bad_seam`]).
    pub fn append(&mut self, next: &OrderCheck) {
        if let Some((first, last)) = next.ends() {
            if self.first.is_none() {
                self.first = Some(first.to_vec());
            }
            self.last.clear();
            self.last.extend_from_slice(last);
        }
    }
}

/// The first seam out of order between runs in key order, given as their
/// `(first, last)` keys (`None` for an empty run): the index of the run
/// whose first key is not above the last key of the nearest non-empty run
/// before it.
pub fn first_bad_seam(order: KeyOrder, runs: &[Option<(&[u8], &[u8])>]) -> Option<usize> {
    let mut last: Option<&[u8]> = None;
    for (i, run) in runs.iter().enumerate() {
        let Some((first, end)) = run else { continue };
        if last.is_some_and(|l| !order.compare(l, first).is_lt()) {
            return Some(i);
        }
        last = Some(end);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: KeyOrder = KeyOrder::Bytes;

    fn run(keys: &[&[u8]]) -> Result<OrderCheck, usize> {
        let mut c = OrderCheck::default();
        for (i, k) in keys.iter().enumerate() {
            if !c.next(BYTES, k) {
                return Err(i);
            }
        }
        Ok(c)
    }

    #[test]
    fn keys_must_rise_strictly_within_a_run() {
        assert!(run(&[b"a", b"ab", b"b"]).is_ok());
        assert_eq!(run(&[b"a", b"b", b"b"]).err(), Some(2));
        assert_eq!(run(&[b"b", b"a"]).err(), Some(1));
        assert_eq!(run(&[b"ab", b"a"]).err(), Some(1));
        // The empty key sorts first; it may open a run, never follow.
        assert!(run(&[b"", b"\0"]).is_ok());
        assert_eq!(run(&[b"a", b""]).err(), Some(1));
        let mut c = run(&[b"k1", b"k2", b"k3"]).unwrap();
        assert_eq!(c.ends(), Some((&b"k1"[..], &b"k3"[..])));
        assert_eq!(OrderCheck::default().ends(), None);
        c.append(&OrderCheck::default());
        c.append(&run(&[b"k5", b"k7"]).unwrap());
        assert_eq!(c.ends(), Some((&b"k1"[..], &b"k7"[..])));
        let mut empty = OrderCheck::default();
        empty.append(&c);
        assert_eq!(empty.ends(), c.ends());
    }

    #[test]
    fn a_refused_key_leaves_the_run_as_it_was() {
        let mut c = run(&[b"m"]).unwrap();
        assert!(!c.next(BYTES, b"a"));
        assert!(c.next(BYTES, b"n"));
        assert_eq!(c.ends(), Some((&b"m"[..], &b"n"[..])));
    }

    #[test]
    fn the_order_is_the_trees() {
        let reverse = KeyOrder::ReverseBytes;
        let mut c = OrderCheck::default();
        // Compared from the last byte: "ba" < "ab".
        assert!(c.next(reverse, b"ba") && c.next(reverse, b"ab"));
        assert_eq!(run(&[b"ba", b"ab"]).err(), Some(1));
    }

    #[test]
    fn seams_between_runs_are_checked_skipping_empty_runs() {
        let runs = [
            Some((&b"a"[..], &b"c"[..])),
            None,
            Some((&b"d"[..], &b"f"[..])),
            Some((&b"g"[..], &b"g"[..])),
        ];
        assert_eq!(first_bad_seam(BYTES, &runs), None);
        let mut overlap = runs;
        overlap[2] = Some((&b"c"[..], &b"f"[..]));
        assert_eq!(first_bad_seam(BYTES, &overlap), Some(2));
        // Across the empty run: "b" is below "c".
        overlap[2] = Some((&b"b"[..], &b"f"[..]));
        assert_eq!(first_bad_seam(BYTES, &overlap), Some(2));
        let mut last = runs;
        last[3] = Some((&b"f"[..], &b"z"[..]));
        assert_eq!(first_bad_seam(BYTES, &last), Some(3));
        assert_eq!(first_bad_seam(BYTES, &[None, None]), None);
    }
}
