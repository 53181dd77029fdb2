//! Sample images for `lmdbio convert`: seeded pictures (gradients, a disc,
//! a little noise: something JPEG has to work at) written as PNG, JPEG,
//! BMP or PPM by the file name's extension.

use std::path::Path;

use crate::Rng;

/// RGB bytes, row-major, of a seeded `width`×`height` picture.
pub fn sample_rgb(seed: u64, width: u32, height: u32) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let base = [rng.below(256), rng.below(256), rng.below(256)];
    let (cx, cy) = (
        rng.below(width as u64) as i64,
        rng.below(height as u64) as i64,
    );
    let radius = (width.min(height) as i64 / 4).max(1);
    let mut out = Vec::with_capacity((width * height * 3) as usize);
    for y in 0..height as i64 {
        for x in 0..width as i64 {
            let inside = (x - cx).pow(2) + (y - cy).pow(2) < radius * radius;
            for (c, b) in base.iter().enumerate() {
                let gradient =
                    (x * 255 / width as i64 + y * (c as i64 + 1) * 60 / height as i64) as u64;
                let mut v = (b + gradient) % 256;
                if inside {
                    v = 255 - v;
                }
                let noise = rng.below(9) as i64 - 4;
                out.push((v as i64 + noise).clamp(0, 255) as u8);
            }
        }
    }
    out
}

/// Writes RGB (or, with one channel, grey) bytes; the extension picks the
/// format (png, jpg, bmp, ppm/pgm).
pub fn write_image(path: &Path, pixels: &[u8], width: u32, height: u32, channels: u8) {
    try_write_image(path, pixels, width, height, channels).unwrap_or_else(|e| panic!("{e}"));
}

fn try_write_image(
    path: &Path,
    pixels: &[u8],
    width: u32,
    height: u32,
    channels: u8,
) -> Result<(), String> {
    let color = if channels == 1 {
        image::ExtendedColorType::L8
    } else {
        image::ExtendedColorType::Rgb8
    };
    image::save_buffer(path, pixels, width, height, color)
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

/// ROOT/class_K/img_NNNNN.EXT for `classes` × `per_class` images of
/// `side`×`side`; returns the `convert_imageset` list lines (path, label).
pub fn write_class_folders(
    root: &Path,
    classes: usize,
    per_class: usize,
    side: u32,
    ext: &str,
    seed: u64,
) -> Vec<(String, i32)> {
    try_write_class_folders(root, classes, per_class, side, ext, seed)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// [`write_class_folders`], reporting the first failure instead of
/// panicking.
pub fn try_write_class_folders(
    root: &Path,
    classes: usize,
    per_class: usize,
    side: u32,
    ext: &str,
    seed: u64,
) -> Result<Vec<(String, i32)>, String> {
    let mut list = Vec::new();
    for class in 0..classes {
        let dir = root.join(format!("class_{class:03}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for i in 0..per_class {
            let rel = format!("class_{class:03}/img_{i:05}.{ext}");
            let seed = seed ^ ((class as u64) << 32 | i as u64);
            try_write_image(
                &root.join(&rel),
                &sample_rgb(seed, side, side),
                side,
                side,
                3,
            )?;
            list.push((rel, class as i32));
        }
    }
    Ok(list)
}

/// The sample folder of `lmdbio sample-images` (and the test kit's
/// `lmdbio-sample-images`): class folders of seeded pictures plus
/// ROOT/list.txt, their `convert_imageset` list. Returns the image count.
pub fn write_sample_folder(
    root: &Path,
    classes: usize,
    per_class: usize,
    side: u32,
    ext: &str,
) -> Result<usize, String> {
    let list = try_write_class_folders(root, classes, per_class, side, ext, 0x5eed)?;
    let text: String = list.iter().map(|(p, l)| format!("{p} {l}\n")).collect();
    let path = root.join("list.txt");
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(list.len())
}
