//! Bilinear resize in the fixed-point arithmetic of OpenCV's `cv::resize`
//! with `INTER_LINEAR` on 8-bit images (what `ReadImageToCVMat` calls):
//! 11-bit horizontal and vertical weights, pixel centres aligned
//! (`(d + 0.5) * scale - 0.5`), edges clamped, and the vertical pass
//! rounded as OpenCV's SIMD kernel rounds it. An exact 2× reduction in both
//! directions is a 2×2 box average, as OpenCV switches to `INTER_AREA`
//! there. How close this comes to OpenCV is measured in tests/convert.rs.

use super::decode::Pixels;

const COEF_BITS: u32 = 11;
const COEF_SCALE: f32 = (1 << COEF_BITS) as f32;

/// One axis: for each destination index, the first source index and the
/// two 11-bit weights.
struct Taps {
    first: Vec<i64>,
    weights: Vec<[i32; 2]>,
}

/// OpenCV clamps the position at the edges horizontally (weight 1 on the
/// edge pixel) but vertically keeps the fractional weights and clamps
/// only the row indices; the two round differently, so both are kept.
fn taps(src_len: usize, dst_len: usize, clamp_weights: bool) -> Taps {
    let scale = src_len as f64 / dst_len as f64;
    let mut first = Vec::with_capacity(dst_len);
    let mut weights = Vec::with_capacity(dst_len);
    for d in 0..dst_len {
        let f = ((d as f64 + 0.5) * scale - 0.5) as f32;
        let mut s = f.floor() as i64;
        let mut frac = f - s as f32;
        if clamp_weights && s < 0 {
            s = 0;
            frac = 0.0;
        }
        if clamp_weights && s >= src_len as i64 - 1 {
            s = src_len as i64 - 1;
            frac = 0.0;
        }
        first.push(s);
        let w0 = ((1.0 - frac) * COEF_SCALE).round_ties_even() as i32;
        let w1 = (frac * COEF_SCALE).round_ties_even() as i32;
        weights.push([w0, w1]);
    }
    Taps { first, weights }
}

pub fn resize(src: &Pixels, width: usize, height: usize) -> Pixels {
    if src.width == width && src.height == height {
        return Pixels {
            channels: src.channels,
            height,
            width,
            data: src.data.clone(),
        };
    }
    if src.width == 2 * width && src.height == 2 * height {
        return halve(src);
    }
    let cn = src.channels;
    let xt = taps(src.width, width, true);
    let yt = taps(src.height, height, false);
    let last_row = src.height as i64 - 1;
    let row_len = width * cn;
    let hresize = |y: usize| -> Vec<i32> {
        let srow = &src.data[y * src.width * cn..(y + 1) * src.width * cn];
        let mut out = Vec::with_capacity(row_len);
        for dx in 0..width {
            let sx = xt.first[dx] as usize;
            let [a0, a1] = xt.weights[dx];
            let sx1 = (sx + 1).min(src.width - 1);
            for k in 0..cn {
                out.push(srow[sx * cn + k] as i32 * a0 + srow[sx1 * cn + k] as i32 * a1);
            }
        }
        out
    };
    // Source rows needed are non-decreasing: keep the last two resized.
    let mut rows: [(usize, Vec<i32>); 2] = [(usize::MAX, Vec::new()), (usize::MAX, Vec::new())];
    let mut data = Vec::with_capacity(row_len * height);
    for dy in 0..height {
        let sy0 = yt.first[dy].clamp(0, last_row) as usize;
        let sy1 = (yt.first[dy] + 1).clamp(0, last_row) as usize;
        for (slot, y) in [sy0, sy1].into_iter().enumerate() {
            if rows[slot].0 != y {
                rows[slot] = match rows.iter().position(|r| r.0 == y) {
                    Some(other) => rows[other].clone(),
                    None => (y, hresize(y)),
                };
            }
        }
        let [b0, b1] = yt.weights[dy];
        let (r0, r1) = (&rows[0].1, &rows[1].1);
        for x in 0..row_len {
            // OpenCV's vector kernel: (((s0 >> 4) * b0) >> 16) + ... , then
            // (+2) >> 2, saturated.
            let t = (((r0[x] >> 4) * b0) >> 16) + (((r1[x] >> 4) * b1) >> 16);
            data.push(((t + 2) >> 2).clamp(0, 255) as u8);
        }
    }
    Pixels {
        channels: cn,
        height,
        width,
        data,
    }
}

/// 2×2 box average with rounding, OpenCV's fast `INTER_AREA` path.
fn halve(src: &Pixels) -> Pixels {
    let cn = src.channels;
    let (width, height) = (src.width / 2, src.height / 2);
    let stride = src.width * cn;
    let mut data = Vec::with_capacity(width * height * cn);
    for y in 0..height {
        let (r0, r1) = (
            &src.data[2 * y * stride..],
            &src.data[(2 * y + 1) * stride..],
        );
        for x in 0..width {
            for k in 0..cn {
                let (a, b) = (2 * x * cn + k, (2 * x + 1) * cn + k);
                let sum = r0[a] as u32 + r0[b] as u32 + r1[a] as u32 + r1[b] as u32;
                data.push(((sum + 2) >> 2) as u8);
            }
        }
    }
    Pixels {
        channels: cn,
        height,
        width,
        data,
    }
}
