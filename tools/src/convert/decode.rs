//! Image files to pixels the way Caffe's `ReadImageToCVMat` gets them from
//! OpenCV's `imread`: colour mode gives 3-channel BGR (grey files
//! replicated, alpha dropped), `--gray` gives one channel. The format is
//! taken from the file's signature, not its name, as `imread` does.
//!
//! Colour to grey is where OpenCV's decoders differ from each other, so it
//! is done per format: libpng's `png_set_rgb_to_gray(0.299, 0.587)` for PNG
//! and OpenCV's own 14-bit fixed-point formula for BMP and PNM; grey JPEG
//! output is the coded luma, as libjpeg gives it. JPEG decoding itself
//! differs between decoders within a few levels (see
//! docs/PERFORMANCE.md, "Convert (issue 7)"). 16-bit samples keep their
//! high byte, as `png_set_strip_16` does.

use image::{DynamicImage, ImageFormat};

/// Interleaved pixels (row-major, channel-last), like a `cv::Mat`.
pub struct Pixels {
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub data: Vec<u8>,
}

impl Pixels {
    /// `CVMatToDatum`'s layout: planar C×H×W.
    pub fn to_planar(&self) -> Vec<u8> {
        if self.channels == 1 {
            return self.data.clone();
        }
        let plane = self.height * self.width;
        let mut out = vec![0u8; plane * self.channels];
        for (i, px) in self.data.chunks_exact(self.channels).enumerate() {
            for (c, &v) in px.iter().enumerate() {
                out[c * plane + i] = v;
            }
        }
        out
    }
}

/// Decodes file bytes; the error is the decoder's reason.
pub fn decode(bytes: &[u8], gray: bool) -> Result<Pixels, String> {
    let format = image::guess_format(bytes).map_err(|_| "not a known image format".to_string())?;
    if !matches!(
        format,
        ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::Bmp | ImageFormat::Pnm
    ) {
        return Err(format!("{format:?} images are not supported"));
    }
    if gray && format == ImageFormat::Jpeg {
        return jpeg_luma(bytes);
    }
    let image = image::load_from_memory_with_format(bytes, format).map_err(|e| e.to_string())?;
    let (width, height) = (image.width() as usize, image.height() as usize);
    let rgb = rgb8(image);
    let data = if gray {
        let to_gray = match format {
            ImageFormat::Png => libpng_gray,
            _ => opencv_gray,
        };
        rgb.chunks_exact(3)
            .map(|p| to_gray(p[0], p[1], p[2]))
            .collect()
    } else if format == ImageFormat::Pnm {
        // Debian 11's OpenCV 4.5.1 (what Caffe's convert_imageset links)
        // returns colour PPM pixels in file (RGB) order; we store what it
        // stores.
        rgb
    } else {
        let mut bgr = rgb;
        for p in bgr.chunks_exact_mut(3) {
            p.swap(0, 2);
        }
        bgr
    };
    Ok(Pixels {
        channels: if gray { 1 } else { 3 },
        height,
        width,
        data,
    })
}

/// libjpeg's grey output: the luma channel as coded, with no colour
/// round trip (zune-jpeg's YCbCr → Luma does the same).
fn jpeg_luma(bytes: &[u8]) -> Result<Pixels, String> {
    use zune_core::bytestream::ZCursor;
    use zune_core::colorspace::ColorSpace;
    use zune_core::options::DecoderOptions;
    let options = DecoderOptions::default().jpeg_set_out_colorspace(ColorSpace::Luma);
    let mut decoder = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    let data = decoder.decode().map_err(|e| format!("{e:?}"))?;
    let info = decoder.info().ok_or("JPEG headers missing")?;
    let (width, height) = (info.width as usize, info.height as usize);
    if data.len() != width * height {
        return Err(format!(
            "JPEG decoded to {} bytes for {width}x{height} grey",
            data.len()
        ));
    }
    Ok(Pixels {
        channels: 1,
        height,
        width,
        data,
    })
}

/// RGB bytes, grey replicated, alpha dropped, 16-bit samples truncated to
/// their high byte.
fn rgb8(image: DynamicImage) -> Vec<u8> {
    fn from_gray<T: Copy>(src: &[T], stride: usize, to8: impl Fn(T) -> u8) -> Vec<u8> {
        src.chunks_exact(stride)
            .flat_map(|p| {
                let v = to8(p[0]);
                [v, v, v]
            })
            .collect()
    }
    fn from_rgb<T: Copy>(src: &[T], stride: usize, to8: impl Fn(T) -> u8) -> Vec<u8> {
        src.chunks_exact(stride)
            .flat_map(|p| [to8(p[0]), to8(p[1]), to8(p[2])])
            .collect()
    }
    let high = |v: u16| (v >> 8) as u8;
    match image {
        DynamicImage::ImageRgb8(i) => i.into_raw(),
        DynamicImage::ImageLuma8(i) => from_gray(i.as_raw(), 1, |v| v),
        DynamicImage::ImageLumaA8(i) => from_gray(i.as_raw(), 2, |v| v),
        DynamicImage::ImageRgba8(i) => from_rgb(i.as_raw(), 4, |v| v),
        DynamicImage::ImageLuma16(i) => from_gray(i.as_raw(), 1, high),
        DynamicImage::ImageLumaA16(i) => from_gray(i.as_raw(), 2, high),
        DynamicImage::ImageRgb16(i) => from_rgb(i.as_raw(), 3, high),
        DynamicImage::ImageRgba16(i) => from_rgb(i.as_raw(), 4, high),
        other => other.to_rgb8().into_raw(),
    }
}

/// libpng's `png_do_rgb_to_gray` with the coefficients OpenCV asks for
/// (0.299, 0.587 as 15-bit fixed point: 9797, 19234, and blue the rest),
/// truncated, not rounded.
fn libpng_gray(r: u8, g: u8, b: u8) -> u8 {
    const RED: u32 = 29_900 * 32_768 / 100_000;
    const GREEN: u32 = 58_700 * 32_768 / 100_000;
    const BLUE: u32 = 32_768 - RED - GREEN;
    if r == g && r == b {
        return r;
    }
    ((RED * r as u32 + GREEN * g as u32 + BLUE * b as u32) >> 15) as u8
}

/// OpenCV's `icvCvt_BGR2Gray_8u_C3C1R` (0.299, 0.587, 0.114 in 14 bits).
fn opencv_gray(r: u8, g: u8, b: u8) -> u8 {
    ((4899 * r as u32 + 9617 * g as u32 + 1868 * b as u32 + 8192) >> 14) as u8
}
