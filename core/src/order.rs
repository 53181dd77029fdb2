//! The order of an epoch: which record sits at each position.
//!
//! Without a seed, position p is record p (key order). With a seed, epoch e
//! is a permutation computed identically on every rank from (seed, e)
//! alone, in one of three modes ([`ShuffleMode`]).
//!
//! Global: a uniform-looking permutation of every record, one keyed
//! bijection of `0..records` per epoch evaluated position by position in
//! O(1) memory ([`permutation`]; see docs/design/global-shuffle.md).
//!
//! Chunked (the default unstaged): contiguous chunks of `chunk` records are permuted, then each window of
//! `window_chunks` consecutive chunks of that sequence is interleaved: its
//! chunks are dealt one record each per layer, and every layer is shuffled.
//! A batch therefore mixes records of every chunk in its window, while the
//! records read together come from short contiguous pieces of those chunks,
//! so reads stay large. Every record can land anywhere in the epoch.
//! Any epoch can be recomputed after a restore; nothing is communicated.
//!
//! Global after the first (the default staged): epoch 0 is the chunked
//! order, every later epoch the global one, so the epoch that reads the
//! database file (and fills a stage) keeps its large reads.

use std::cell::{Cell, RefCell};

pub mod permutation;

use permutation::KeyedPermutation;

/// How an epoch's records are shuffled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ShuffleMode {
    /// Chunks of records permuted, then interleaved within windows of
    /// chunks: a batch mixes a window's chunks, and reads stay large.
    #[default]
    Chunked,
    /// Every epoch a uniform-looking permutation of all records: a batch
    /// has the class mix of a random sample, and every record is a read
    /// of its own unless it is served from memory or a stage.
    Global,
    /// Epoch 0 exactly the chunked order, every later epoch exactly the
    /// global one: for a stage, whose first epoch reads the database file
    /// (where large reads matter) and whose later epochs are served from
    /// node-local storage (see docs/design/global-shuffle.md).
    GlobalAfterFirst,
}

impl ShuffleMode {
    /// Every mode.
    pub const ALL: [ShuffleMode; 3] = [
        ShuffleMode::Chunked,
        ShuffleMode::Global,
        ShuffleMode::GlobalAfterFirst,
    ];

    /// The mode's name in options and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ShuffleMode::Chunked => "chunked",
            ShuffleMode::Global => "global",
            ShuffleMode::GlobalAfterFirst => "global-after-first",
        }
    }

    /// The mode named `name` (as [`ShuffleMode::name`] spells it).
    pub fn from_name(name: &str) -> Option<ShuffleMode> {
        ShuffleMode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether epoch `epoch` is a global permutation (else chunked).
    pub fn is_global_in(self, epoch: u64) -> bool {
        match self {
            ShuffleMode::Chunked => false,
            ShuffleMode::Global => true,
            ShuffleMode::GlobalAfterFirst => epoch > 0,
        }
    }
}

/// Shuffle parameters; part of a cursor, so a restored job reproduces them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shuffle {
    /// The seed every rank derives each epoch's permutation from.
    pub seed: u64,
    /// Records per chunk of the chunked epochs (at least 1; 0 in global
    /// mode, which has none).
    pub chunk: u64,
    /// Chunks per shuffling window (at least 1; 0 in global mode).
    pub window_chunks: u64,
    /// Chunked, global, or chunked in epoch 0 and global after it.
    pub mode: ShuffleMode,
}

impl Shuffle {
    /// A chunked shuffle with chunks of about 4 MiB of values, sixteen
    /// chunks per window.
    pub fn with_default_sizes(seed: u64, records: u64, value_bytes: u64) -> Shuffle {
        let mean = value_bytes.checked_div(records).unwrap_or(1).max(1);
        Shuffle {
            seed,
            chunk: ((4u64 << 20) / mean).max(1),
            window_chunks: 16,
            mode: ShuffleMode::Chunked,
        }
    }

    /// The shuffle as an order uses it: chunk and window sizes of 0 taken
    /// as 1 in the modes with chunked epochs, both 0 in global mode (which
    /// has no chunks), so that two descriptions of one order compare equal.
    pub fn normalized(self) -> Shuffle {
        match self.mode {
            ShuffleMode::Chunked | ShuffleMode::GlobalAfterFirst => Shuffle {
                chunk: self.chunk.max(1),
                window_chunks: self.window_chunks.max(1),
                ..self
            },
            ShuffleMode::Global => Shuffle {
                chunk: 0,
                window_chunks: 0,
                ..self
            },
        }
    }
}

/// Maps (epoch, position) to a record ordinal.
pub struct EpochOrder {
    records: u64,
    shuffle: Option<Shuffle>,
    cache: RefCell<Cache>,
    /// Global epochs: the last one's permutation.
    global: Cell<Option<(u64, KeyedPermutation)>>,
}

#[derive(Default)]
struct Cache {
    /// (epoch, chunk permutation)
    chunks: Option<(u64, Vec<u64>)>,
    /// ((epoch, window), in-window permutation)
    windows: Vec<((u64, u64), Vec<u32>)>,
}

const CACHED_WINDOWS: usize = 8;

impl EpochOrder {
    /// The order of epochs of `records` records: key order without a
    /// shuffle; the shuffle as [`Shuffle::normalized`] makes it.
    pub fn new(records: u64, shuffle: Option<Shuffle>) -> EpochOrder {
        let shuffle = shuffle.map(Shuffle::normalized);
        EpochOrder {
            records,
            shuffle,
            cache: RefCell::default(),
            global: Cell::new(None),
        }
    }

    /// The shuffle in use (sizes as adjusted by [`EpochOrder::new`]).
    pub fn shuffle(&self) -> Option<Shuffle> {
        self.shuffle
    }

    /// The record at `position` of `epoch`.
    #[inline]
    pub fn ordinal(&self, epoch: u64, position: u64) -> u64 {
        // Inline for the unshuffled order, asked once per record served.
        match self.shuffle {
            None => position,
            Some(s) => self.shuffled(s, epoch, position),
        }
    }

    fn shuffled(&self, s: Shuffle, epoch: u64, position: u64) -> u64 {
        if s.mode.is_global_in(epoch) {
            return self.global(epoch).apply(position);
        }
        let n = self.records;
        let chunks = n.div_ceil(s.chunk);
        let last_len = n - (chunks - 1) * s.chunk;
        let mut cache = self.cache.borrow_mut();
        if cache.chunks.as_ref().is_none_or(|(e, _)| *e != epoch) {
            let mut perm: Vec<u64> = (0..chunks).collect();
            shuffle_in_place(&mut perm, &mut SplitMix::new(mix3(s.seed, epoch, u64::MAX)));
            cache.chunks = Some((epoch, perm));
            cache.windows.clear();
        }
        let Cache {
            chunks: Some((_, perm)),
            windows,
        } = &mut *cache
        else {
            unreachable!("chunk permutation computed above")
        };
        // Where the short last chunk sits in the permuted sequence shifts
        // every later chunk's start.
        let short_at = perm.iter().position(|&c| c == chunks - 1).unwrap_or(0) as u64;
        let start_of = |i: u64| i * s.chunk - if i > short_at { s.chunk - last_len } else { 0 };
        let index_of = |q: u64| {
            let short_start = short_at * s.chunk;
            if q < short_start {
                q / s.chunk
            } else if q < short_start + last_len {
                short_at
            } else {
                short_at + 1 + (q - short_start - last_len) / s.chunk
            }
        };
        let window = index_of(position) / s.window_chunks;
        let first = window * s.window_chunks;
        let end = ((window + 1) * s.window_chunks).min(chunks);
        let (w_start, w_end) = (
            start_of(first),
            if end == chunks { n } else { start_of(end) },
        );
        let inner = match windows.iter().position(|(k, _)| *k == (epoch, window)) {
            Some(i) => &windows[i].1,
            None => {
                let lens: Vec<u64> = (first..end)
                    .map(|i| {
                        if i + 1 == end {
                            w_end - w_start - (start_of(i) - w_start)
                        } else {
                            start_of(i + 1) - start_of(i)
                        }
                    })
                    .collect();
                let p = interleave(&lens, &mut SplitMix::new(mix3(s.seed, epoch, window)));
                if windows.len() == CACHED_WINDOWS {
                    windows.remove(0);
                }
                windows.push(((epoch, window), p));
                &windows.last().expect("just pushed").1
            }
        };
        let q = w_start + inner[(position - w_start) as usize] as u64;
        let i = index_of(q);
        perm[i as usize] * s.chunk + (q - start_of(i))
    }
}

impl EpochOrder {
    /// Epoch `epoch`'s global permutation: keyed by the seed and the epoch
    /// alone (not the mode), so every rank (and a restored job) computes
    /// it, and a global epoch is the same in both modes that have one.
    fn global(&self, epoch: u64) -> KeyedPermutation {
        if let Some((e, p)) = self.global.get() {
            if e == epoch {
                return p;
            }
        }
        let seed = self.shuffle.map_or(0, |s| s.seed);
        let p = KeyedPermutation::new(self.records, mix3(seed, epoch, GLOBAL_DOMAIN));
        self.global.set(Some((epoch, p)));
        p
    }
}

/// Keeps the global mode's keys apart from the chunked mode's (which mix
/// the epoch with a window number or `u64::MAX`).
const GLOBAL_DOMAIN: u64 = 0x676c_6f62_616c_0000;

/// The in-window order: the window's chunks (of `lens` records, laid out
/// back to back) are dealt in layers, one record of each chunk per layer,
/// and small groups of layers are shuffled. Consecutive positions thus mix records of
/// every chunk in the window, while the positions a reader fetches together
/// map to a short contiguous piece of each chunk, so reads stay large.
fn interleave(lens: &[u64], rng: &mut SplitMix) -> Vec<u32> {
    let starts: Vec<u64> = lens
        .iter()
        .scan(0u64, |at, &l| {
            let s = *at;
            *at += l;
            Some(s)
        })
        .collect();
    let total: u64 = lens.iter().sum();
    let mut out = Vec::with_capacity(total as usize);
    let deepest = lens.iter().copied().max().unwrap_or(0);
    // Shuffle groups of layers holding about MIX_GROUP records, so a window
    // of few chunks still mixes well; a group spans few layers, so what a
    // reader fetches together stays a contiguous piece of each chunk.
    let layers_per_group = MIX_GROUP.div_ceil(lens.len().max(1) as u64).max(1);
    let mut group_start = 0;
    for depth in 0..deepest {
        for (j, &l) in lens.iter().enumerate() {
            if depth < l {
                out.push((starts[j] + depth) as u32);
            }
        }
        if (depth + 1) % layers_per_group == 0 || depth + 1 == deepest {
            shuffle_in_place(&mut out[group_start..], rng);
            group_start = out.len();
        }
    }
    out
}

/// Records shuffled together inside a window (see `interleave`).
const MIX_GROUP: u64 = 64;

/// SplitMix64: tiny, fast, and the same on every platform.
struct SplitMix(u64);

impl SplitMix {
    fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by rejection so there is no modulo bias.
    fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next();
            if x < zone {
                return x % n;
            }
        }
    }
}

fn mix3(a: u64, b: u64, c: u64) -> u64 {
    let mut m = SplitMix::new(a);
    let x = m.next() ^ b;
    let mut m = SplitMix::new(x);
    let y = m.next() ^ c;
    SplitMix::new(y).next()
}

fn shuffle_in_place<T>(items: &mut [T], rng: &mut SplitMix) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(order: &EpochOrder, e: u64) -> Vec<u64> {
        (0..order.records).map(|p| order.ordinal(e, p)).collect()
    }

    #[test]
    fn every_epoch_is_a_permutation_and_epochs_differ() {
        for (n, chunk, window) in [
            (1, 1, 1),
            (10, 3, 2),
            (1000, 37, 4),
            (1000, 1000, 4),
            (997, 10, 1),
        ] {
            let order = EpochOrder::new(
                n,
                Some(Shuffle {
                    seed: 7,
                    chunk,
                    window_chunks: window,
                    mode: ShuffleMode::Chunked,
                }),
            );
            let e0 = epoch(&order, 0);
            let mut sorted = e0.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n={n} chunk={chunk}");
            if n >= 100 {
                assert_ne!(e0, epoch(&order, 1), "epochs 0 and 1 should differ");
            }
            // Recomputable: a fresh order (another rank, a restored job)
            // gives the same epoch, also when asked out of order.
            let other = EpochOrder::new(
                n,
                Some(Shuffle {
                    seed: 7,
                    chunk,
                    window_chunks: window,
                    mode: ShuffleMode::Chunked,
                }),
            );
            let backwards: Vec<u64> = (0..n).rev().map(|p| other.ordinal(0, p)).collect();
            assert_eq!(backwards.into_iter().rev().collect::<Vec<_>>(), e0);
        }
    }

    #[test]
    fn without_a_seed_the_order_is_key_order() {
        let order = EpochOrder::new(50, None);
        assert_eq!(epoch(&order, 3), (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn windows_keep_neighbouring_positions_within_a_few_chunks() {
        let (chunk, window) = (50u64, 4u64);
        let order = EpochOrder::new(
            10_000,
            Some(Shuffle {
                seed: 1,
                chunk,
                window_chunks: window,
                mode: ShuffleMode::Chunked,
            }),
        );
        let e = epoch(&order, 0);
        // Positions of one window come from exactly `window` chunks.
        for w in e.chunks((chunk * window) as usize) {
            let mut ids: Vec<u64> = w.iter().map(|r| r / chunk).collect();
            ids.sort_unstable();
            ids.dedup();
            assert!(ids.len() <= window as usize);
        }
    }

    fn global(seed: u64, n: u64) -> EpochOrder {
        EpochOrder::new(
            n,
            Some(Shuffle {
                seed,
                chunk: 99,
                window_chunks: 7,
                mode: ShuffleMode::Global,
            }),
        )
    }

    #[test]
    fn global_epochs_are_permutations_for_many_sizes() {
        let mut sizes = vec![1, 2, 3, 5, 7, 97, 1000, 1009, 7919];
        for k in [2u32, 5, 8, 12] {
            sizes.extend([(1u64 << k) - 1, 1 << k, (1 << k) + 1]);
        }
        for n in sizes {
            let order = global(3, n);
            for e in 0..3 {
                let mut image = epoch(&order, e);
                image.sort_unstable();
                assert!(image.iter().copied().eq(0..n), "n={n} epoch {e}");
            }
        }
    }

    #[test]
    fn global_epochs_differ_by_epoch_and_seed_and_repeat_with_both() {
        let n = 1000;
        let a = global(3, n);
        let (e0, e1) = (epoch(&a, 0), epoch(&a, 1));
        assert_ne!(e0, e1);
        assert_ne!(e0, epoch(&global(4, n), 0));
        assert_ne!(e0, (0..n).collect::<Vec<_>>());
        // Another rank, or a restored job, asking in any order.
        let b = global(3, n);
        assert_eq!(b.ordinal(1, 500), e1[500]);
        assert_eq!(b.ordinal(0, 999), e0[999]);
        assert_eq!(b.ordinal(1, 0), e1[0]);
        // No chunks: the sizes given are dropped from the description.
        let s = a.shuffle().unwrap();
        assert_eq!((s.chunk, s.window_chunks), (0, 0));
        // The chunked order of the same seed is another order.
        let chunked = EpochOrder::new(n, Some(Shuffle::with_default_sizes(3, n, n)));
        assert_ne!(epoch(&chunked, 0), e0);
    }

    /// Over many epochs, record r lands at position p about equally often
    /// for every (r, p): a chi-square statistic over the n x n table, far
    /// below what a biased order gives (its mean is (n-1)^2).
    #[test]
    fn global_positions_are_uniform() {
        for n in [5u64, 8, 12] {
            let order = global(11, n);
            let epochs = 400 * n;
            let mut count = vec![0u64; (n * n) as usize];
            for e in 0..epochs {
                for p in 0..n {
                    count[(order.ordinal(e, p) * n + p) as usize] += 1;
                }
            }
            let expected = epochs as f64 / n as f64;
            let chi2: f64 = count
                .iter()
                .map(|&c| (c as f64 - expected).powi(2) / expected)
                .sum();
            let dof = ((n - 1) * (n - 1)) as f64;
            // Mean dof, standard deviation sqrt(2 dof): six of them above.
            assert!(
                chi2 < dof + 6.0 * (2.0 * dof).sqrt(),
                "n={n}: chi-square {chi2:.1} for {dof} degrees of freedom"
            );
            // And the identity is not favoured.
            let fixed: u64 = (0..n).map(|p| count[(p * n + p) as usize]).sum();
            assert!(
                (fixed as f64) < 1.2 * epochs as f64,
                "n={n}: {fixed} fixed points"
            );
        }
    }

    /// Classes stored in runs of 64 records (as a class-sorted database):
    /// a global batch of 64 holds as many classes as a random sample's
    /// (100 (1 - 0.99^64) = 47.4 of 100 on average), a chunked one far
    /// fewer.
    #[test]
    fn global_batches_have_a_random_samples_class_mix() {
        let (classes, per_class, batch) = (100u64, 64u64, 64u64);
        let n = classes * per_class;
        let mean_classes = |order: &EpochOrder| {
            let e = epoch(order, 0);
            let batches = e.chunks(batch as usize);
            let k = batches.len() as f64;
            batches
                .map(|b| {
                    let mut c: Vec<u64> = b.iter().map(|r| r / per_class).collect();
                    c.sort_unstable();
                    c.dedup();
                    c.len() as f64
                })
                .sum::<f64>()
                / k
        };
        let g = mean_classes(&global(5, n));
        assert!(
            (46.0..49.0).contains(&g),
            "global: {g:.1} classes per batch"
        );
        let chunked = EpochOrder::new(
            n,
            Some(Shuffle {
                seed: 5,
                chunk: 64,
                window_chunks: 16,
                mode: ShuffleMode::Chunked,
            }),
        );
        let c = mean_classes(&chunked);
        assert!(c < 0.5 * g, "chunked: {c:.1} classes per batch");
    }

    fn with_mode(mode: ShuffleMode, n: u64) -> EpochOrder {
        EpochOrder::new(
            n,
            Some(Shuffle {
                mode,
                ..Shuffle::with_default_sizes(13, n, 40 * n)
            }),
        )
    }

    /// Epoch 0 is the chunked order of the same seed and sizes, every
    /// later epoch the global one of the same seed: exactly, position by
    /// position, also when asked out of order or by a fresh order.
    #[test]
    fn global_after_first_is_chunked_in_epoch_0_and_global_after() {
        for n in [1u64, 7, 1000, 4099] {
            let mixed = with_mode(ShuffleMode::GlobalAfterFirst, n);
            let chunked = with_mode(ShuffleMode::Chunked, n);
            let global = with_mode(ShuffleMode::Global, n);
            assert_eq!(epoch(&mixed, 0), epoch(&chunked, 0), "n={n}");
            for e in 1..4 {
                assert_eq!(epoch(&mixed, e), epoch(&global, e), "n={n} epoch {e}");
            }
            if n >= 1000 {
                assert_ne!(epoch(&mixed, 0), epoch(&global, 0));
                assert_ne!(epoch(&mixed, 1), epoch(&chunked, 1));
            }
            let fresh = with_mode(ShuffleMode::GlobalAfterFirst, n);
            assert_eq!(fresh.ordinal(2, n - 1), global.ordinal(2, n - 1));
            assert_eq!(fresh.ordinal(0, n / 2), chunked.ordinal(0, n / 2));
            assert_eq!(fresh.ordinal(1, 0), global.ordinal(1, 0));
        }
    }

    /// The mode keeps the chunked sizes (epoch 0 uses them), with 0 taken
    /// as 1, so two descriptions of one order compare equal; and it is
    /// another order than either mode's.
    #[test]
    fn global_after_first_normalizes_like_chunked() {
        let s = Shuffle {
            seed: 3,
            chunk: 0,
            window_chunks: 0,
            mode: ShuffleMode::GlobalAfterFirst,
        };
        let n = s.normalized();
        assert_eq!((n.chunk, n.window_chunks), (1, 1));
        assert_eq!(
            n,
            Shuffle {
                chunk: 1,
                window_chunks: 1,
                ..s
            }
            .normalized()
        );
        assert_eq!(n.normalized(), n);
        let sized = Shuffle {
            chunk: 21,
            window_chunks: 4,
            ..s
        };
        assert_eq!(sized.normalized(), sized);
        for other in [ShuffleMode::Chunked, ShuffleMode::Global] {
            assert_ne!(
                Shuffle {
                    mode: other,
                    ..sized
                }
                .normalized(),
                sized
            );
        }
    }

    #[test]
    fn modes_are_named_and_parsed_by_one_table() {
        for m in ShuffleMode::ALL {
            assert_eq!(ShuffleMode::from_name(m.name()), Some(m));
        }
        assert_eq!(
            ShuffleMode::from_name("global-after-first"),
            Some(ShuffleMode::GlobalAfterFirst)
        );
        assert_eq!(ShuffleMode::from_name("Global"), None);
        assert_eq!(ShuffleMode::from_name(""), None);
    }
}
