//! How well lmdbio's shuffles (chunked and global) mix a class-sorted
//! database, against a full random permutation, measured on the order
//! alone (no I/O).
//!
//! The database is ImageNet-like: N records whose keys are sorted by class
//! (K classes of N/K contiguous records). For each batch of B consecutive
//! positions of epoch 0 we count the distinct classes; a perfect shuffle
//! gives about K(1 - (1 - 1/K)^B). We also report the mean absolute
//! distance (in records) between a record's key-order place and its place in
//! the epoch, as a fraction of what a full permutation gives (N/3).
//!
//! cargo bench -p lmdbio-benches --bench shuffle_quality

use lmdbio::order::{EpochOrder, Shuffle, ShuffleMode};
use lmdbio_testkit::Rng;

const N: u64 = 128_000;
const CLASSES: u64 = 1000;
const BATCH: u64 = 64;

fn measure(order: &[u64]) -> (f64, f64) {
    let class = |ordinal: u64| ordinal / (N / CLASSES);
    let mut distinct_sum = 0usize;
    let mut batches = 0usize;
    for batch in order.chunks(BATCH as usize) {
        let mut c: Vec<u64> = batch.iter().map(|&o| class(o)).collect();
        c.sort_unstable();
        c.dedup();
        distinct_sum += c.len();
        batches += 1;
    }
    let displacement: f64 = order
        .iter()
        .enumerate()
        .map(|(pos, &o)| (pos as f64 - o as f64).abs())
        .sum::<f64>()
        / N as f64;
    (
        distinct_sum as f64 / batches as f64,
        displacement / (N as f64 / 3.0),
    )
}

fn main() {
    let ideal = CLASSES as f64 * (1.0 - (1.0 - 1.0 / CLASSES as f64).powi(BATCH as i32));
    println!("shuffle quality: {N} records in {CLASSES} contiguous classes, batches of {BATCH}");
    println!(
        "{:<34} {:>22} {:>26}",
        "order", "classes per batch", "displacement / random"
    );
    let mut full: Vec<u64> = (0..N).collect();
    Rng::new(7).shuffle(&mut full);
    let (d, m) = measure(&full);
    println!(
        "{:<34} {:>10.1} (ideal {ideal:.1}) {:>26.2}",
        "full random permutation", d, m
    );
    let (d, m) = measure(&(0..N).collect::<Vec<_>>());
    println!("{:<34} {:>22.1} {:>26.2}", "no shuffle (key order)", d, m);
    for epoch in 0..2 {
        let order = EpochOrder::new(
            N,
            Some(Shuffle {
                seed: 7,
                chunk: 0,
                window_chunks: 0,
                mode: ShuffleMode::Global,
            }),
        );
        let (d, m) = measure(&(0..N).map(|p| order.ordinal(epoch, p)).collect::<Vec<_>>());
        println!(
            "{:<34} {:>22.1} {:>26.2}",
            format!("global shuffle, epoch {epoch}"),
            d,
            m
        );
    }
    // 21 records of a 196 KB image Datum are about 4 MiB.
    for (chunk, window) in [
        (21, 4),
        (21, 16),
        (21, 64),
        (42, 16),
        (84, 16),
        (5, 16),
        (1, 64),
    ] {
        let order = EpochOrder::new(
            N,
            Some(Shuffle {
                seed: 7,
                chunk,
                window_chunks: window,
                mode: ShuffleMode::Chunked,
            }),
        );
        let epoch: Vec<u64> = (0..N).map(|p| order.ordinal(0, p)).collect();
        let (d, m) = measure(&epoch);
        let mib = chunk as f64 * window as f64 * 196_628.0 / (1 << 20) as f64;
        println!(
            "{:<34} {:>22.1} {:>26.2}",
            format!("chunk {chunk}, window {window} chunks ({mib:.0} MiB)"),
            d,
            m
        );
    }
}
