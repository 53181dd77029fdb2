//! One list entry to one serialized Datum, following Caffe's
//! `ReadImageToDatum`: decode (always, so undecodable files are skipped
//! even with --encoded), resize, then either planar pixels or, with
//! --encoded, the file's own bytes when its extension names the wanted
//! encoding and nothing was resized, else the pixels re-encoded.

use std::io::Cursor;

use super::args::ReEncode;
use super::datum;
use super::decode::{self, Pixels};
use super::resize;

#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub gray: bool,
    pub resize: Option<(u32, u32)>,
    pub encoded: bool,
    pub encode_type: Option<ReEncode>,
}

pub struct Record {
    pub value: Vec<u8>,
    /// channels × height × width of the stored image, for --check-size.
    pub pixel_count: usize,
}

pub fn build(
    rel_path: &str,
    file_bytes: &[u8],
    label: i32,
    opts: &RecordOptions,
) -> Result<Record, String> {
    let mut pixels = decode::decode(file_bytes, opts.gray)?;
    if let Some((w, h)) = opts.resize {
        pixels = resize::resize(&pixels, w as usize, h as usize);
    }
    let pixel_count = pixels.channels * pixels.height * pixels.width;
    let value = if opts.encoded {
        let extension = extension(rel_path);
        let wanted = match opts.encode_type {
            Some(ReEncode::Jpg) => "jpg".to_string(),
            Some(ReEncode::Png) => "png".to_string(),
            None => extension.clone(),
        };
        let same_encoding = extension == wanted || (wanted == "jpg" && extension == "jpeg");
        if opts.resize.is_none() && same_encoding {
            datum::encoded(file_bytes, label)
        } else {
            datum::encoded(&re_encode(&pixels, &wanted)?, label)
        }
    } else {
        let planar = pixels.to_planar();
        datum::raw(
            &datum::RawImage {
                channels: pixels.channels as u32,
                height: pixels.height as u32,
                width: pixels.width as u32,
                planar: &planar,
            },
            label,
        )
    };
    Ok(Record { value, pixel_count })
}

/// Lower-case text after the last dot (the whole name if there is none),
/// as Caffe guesses the encoding.
fn extension(rel_path: &str) -> String {
    rel_path
        .rsplit_once('.')
        .map_or(rel_path, |(_, e)| e)
        .to_ascii_lowercase()
}

/// `cv::imencode`'s job with the `image` crate's encoders (JPEG at
/// OpenCV's default quality 95): the bytes are not OpenCV's, the pixels
/// decode to the same image (PNG) or within JPEG's loss.
fn re_encode(pixels: &Pixels, format: &str) -> Result<Vec<u8>, String> {
    let (kind, data) = if pixels.channels == 1 {
        (image::ExtendedColorType::L8, pixels.data.clone())
    } else {
        let mut rgb = pixels.data.clone();
        for p in rgb.chunks_exact_mut(3) {
            p.swap(0, 2);
        }
        (image::ExtendedColorType::Rgb8, rgb)
    };
    let (w, h) = (pixels.width as u32, pixels.height as u32);
    let mut out = Cursor::new(Vec::new());
    let result = match format {
        "jpg" | "jpeg" => image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 95)
            .encode(&data, w, h, kind),
        "png" => image::ImageEncoder::write_image(
            image::codecs::png::PngEncoder::new(&mut out),
            &data,
            w,
            h,
            kind,
        ),
        other => {
            return Err(format!(
                "cannot encode as {other:?} (use --encode-type jpg or png)"
            ))
        }
    };
    result.map_err(|e| format!("re-encoding as {format}: {e}"))?;
    Ok(out.into_inner())
}
