//! Caffe databases written by Caffe's own tools, for the tests and the
//! benchmarks that train or time stock Caffe.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Rng;

/// Runs one of Caffe's tools and fails with its stderr if it fails.
pub fn run_caffe_tool(cmd: &mut Command) {
    let what = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `n` MNIST-like 28x28 digits (a bar per class: rows for classes 0-4,
/// columns for 5-9) written by Caffe's `convert_mnist_data` into
/// `dir/name`. The bar's brightness is `on` over a background of 40, with
/// uniform pixel noise of width `noise`; the idx files it was made from
/// are left beside it as `name.images.idx` and `name.labels.idx`.
pub fn digits_lmdb(dir: &Path, name: &str, n: usize, seed: u64, on: i64, noise: u64) -> PathBuf {
    let mut rng = Rng::new(seed);
    let mut images = Vec::with_capacity(16 + n * 784);
    for word in [0x803u32, n as u32, 28, 28] {
        images.extend_from_slice(&word.to_be_bytes());
    }
    let mut labels = Vec::with_capacity(8 + n);
    for word in [0x801u32, n as u32] {
        labels.extend_from_slice(&word.to_be_bytes());
    }
    for _ in 0..n {
        let class = rng.below(10) as usize;
        labels.push(class as u8);
        for y in 0..28 {
            for x in 0..28 {
                let lit = if class < 5 {
                    y / 5 == class
                } else {
                    x / 5 == class - 5
                };
                let base: i64 = if lit { on } else { 40 };
                let noisy = base + rng.below(noise) as i64 - (noise / 2) as i64;
                images.push(noisy.clamp(0, 255) as u8);
            }
        }
    }
    let (img, lab) = (
        dir.join(format!("{name}.images.idx")),
        dir.join(format!("{name}.labels.idx")),
    );
    std::fs::write(&img, images).unwrap();
    std::fs::write(&lab, labels).unwrap();
    let db = dir.join(name);
    run_caffe_tool(
        Command::new("convert_mnist_data")
            .arg(&img)
            .arg(&lab)
            .arg(&db),
    );
    db
}
