//! A keyed permutation of `0..n` computed one element at a time, in O(1)
//! memory: the global shuffle's order (see docs/design/global-shuffle.md).
//!
//! A value below `n` is taken as `bits` bits (the fewest that hold `n -
//! 1`), split into a high and a low part; each of `ROUNDS` rounds XORs one
//! part with a keyed hash of the other (an unbalanced Feistel network
//! without the swap), which is a bijection of `0..2^bits` whatever the
//! hash. Values that land at or past `n` are sent through again (cycle
//! walking) until they land below it: the walk stays on the value's own
//! cycle of the bijection, so the result is a bijection of `0..n`. As
//! `2^bits < 2n`, a value takes fewer than two passes on average.

/// Rounds of the network: four make a keyed Feistel network look random
/// to any test (Luby and Rackoff); two more cost little.
const ROUNDS: usize = 6;

/// The permutation of `0..n` drawn by one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedPermutation {
    n: u64,
    /// Bits in the low part.
    low_bits: u32,
    /// Bits in the high part (at most `low_bits`).
    high_bits: u32,
    keys: [u64; ROUNDS],
}

impl KeyedPermutation {
    /// The permutation of `0..n` keyed by `key` (any 64-bit value; the
    /// order derives one from the seed and the epoch).
    pub fn new(n: u64, key: u64) -> KeyedPermutation {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let high_bits = bits / 2;
        let mut keys = [0u64; ROUNDS];
        let mut state = key;
        for k in &mut keys {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            *k = finalize(state);
        }
        KeyedPermutation {
            n,
            low_bits: bits - high_bits,
            high_bits,
            keys,
        }
    }

    /// The image of `x` (below `n`).
    pub fn apply(&self, x: u64) -> u64 {
        debug_assert!(x < self.n, "{x} is outside 0..{}", self.n);
        let mut y = x;
        loop {
            y = self.network(y);
            if y < self.n {
                return y;
            }
        }
    }

    /// One pass of the network over `0..2^(low_bits + high_bits)`.
    fn network(&self, x: u64) -> u64 {
        let low_mask = mask(self.low_bits);
        let high_mask = mask(self.high_bits);
        let (mut high, mut low) = (x >> self.low_bits, x & low_mask);
        for (round, &key) in self.keys.iter().enumerate() {
            if round % 2 == 0 {
                low ^= finalize(high ^ key) & low_mask;
            } else {
                high ^= finalize(low ^ key) & high_mask;
            }
        }
        (high << self.low_bits) | low
    }
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// SplitMix64's output function: every input bit moves about half the
/// output bits.
fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(p: &KeyedPermutation, n: u64) -> Vec<u64> {
        (0..n).map(|x| p.apply(x)).collect()
    }

    #[test]
    fn is_a_bijection_for_many_sizes() {
        let mut sizes = vec![1, 2, 3, 4, 5, 7, 13, 97, 1000, 1021, 4093, 65_521];
        for k in [1u32, 2, 3, 4, 5, 8, 10, 11, 15, 16] {
            sizes.extend([(1u64 << k) - 1, 1 << k, (1 << k) + 1]);
        }
        for n in sizes {
            for key in [0, 1, 0xdead_beef] {
                let mut image = all(&KeyedPermutation::new(n, key), n);
                image.sort_unstable();
                assert!(
                    image.iter().copied().eq(0..n),
                    "n={n} key={key}: not a permutation"
                );
            }
        }
    }

    #[test]
    fn large_sizes_stay_in_range_and_keys_differ() {
        let n = 100_000_000_007u64;
        let (a, b) = (KeyedPermutation::new(n, 1), KeyedPermutation::new(n, 2));
        let xs = [0, 1, 2, n / 2, n - 1];
        assert!(xs.iter().all(|&x| a.apply(x) < n && b.apply(x) < n));
        assert_ne!(
            xs.map(|x| a.apply(x)),
            xs.map(|x| b.apply(x)),
            "two keys gave the same images"
        );
    }
}
