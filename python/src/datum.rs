//! Caffe's `Datum` message (proto2), parsed, and its image decoded the way
//! Caffe's data layers see it: planar C×H×W uint8 with colour in BGR
//! order. Raw Datums hold those planes as they are; encoded ones hold an
//! image file, decoded here as OpenCV's `imdecode(..., IMREAD_UNCHANGED)`
//! does in Caffe's `DecodeDatumToCVMatNative` (grey stays one channel,
//! colour becomes BGR, alpha BGRA). Float Datums carry `float_data`.
//!
//! Field numbers: channels=1, height=2, width=3, data=4, label=5,
//! float_data=6 (unpacked or packed), encoded=7. The writer of the same
//! message is tools' `convert::datum`.

use lmdbio::{Error, Result};

/// A parsed Datum, borrowing its bytes.
#[derive(Debug, Default)]
pub struct Datum<'a> {
    pub channels: u32,
    pub height: u32,
    pub width: u32,
    pub data: &'a [u8],
    pub label: i32,
    pub float_data: Vec<f32>,
    pub encoded: bool,
}

/// A decoded image or float array: shape and planar contents.
pub enum Pixels {
    U8(Vec<u8>),
    F32(Vec<f32>),
}

pub struct Decoded {
    pub shape: [usize; 3],
    pub pixels: Pixels,
    pub label: i32,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::InvalidArgument(format!("not a Caffe Datum: {}", reason.into()))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&b) = self.bytes.get(self.at) else {
                return Err(bad("a varint runs past the end"));
            };
            self.at += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(bad("a varint is longer than ten bytes"))
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(len)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| bad("a field runs past the end"))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
}

const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

fn dim(v: u64, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| bad(format!("{what} {v} is out of range")))
}

pub fn parse(bytes: &[u8]) -> Result<Datum<'_>> {
    let mut r = Reader { bytes, at: 0 };
    let mut d = Datum::default();
    while r.at < bytes.len() {
        let tag = r.varint()?;
        let (field, wire) = (tag >> 3, tag & 7);
        match (field, wire) {
            (1, VARINT) => d.channels = dim(r.varint()?, "channels")?,
            (2, VARINT) => d.height = dim(r.varint()?, "height")?,
            (3, VARINT) => d.width = dim(r.varint()?, "width")?,
            (4, LEN) => {
                let len = r.varint()? as usize;
                d.data = r.take(len)?;
            }
            // int32 values are sign-extended to 64 bits on the wire.
            (5, VARINT) => d.label = r.varint()? as i64 as i32,
            (6, FIXED32) => {
                let b = r.take(4)?;
                d.float_data
                    .push(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            }
            (6, LEN) => {
                let len = r.varint()? as usize;
                let packed = r.take(len)?;
                if packed.len() % 4 != 0 {
                    return Err(bad("packed float_data is not whole floats"));
                }
                d.float_data.extend(
                    packed
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                );
            }
            (7, VARINT) => d.encoded = r.varint()? != 0,
            (0, _) => return Err(bad("field number 0")),
            (_, VARINT) => {
                r.varint()?;
            }
            (_, FIXED64) => {
                r.take(8)?;
            }
            (_, LEN) => {
                let len = r.varint()? as usize;
                r.take(len)?;
            }
            (_, FIXED32) => {
                r.take(4)?;
            }
            (f, w) => return Err(bad(format!("field {f} has wire type {w}"))),
        }
    }
    Ok(d)
}

/// Decodes a Datum's image (or float array) into planar C×H×W.
pub fn decode(bytes: &[u8]) -> Result<Decoded> {
    let d = parse(bytes)?;
    if d.encoded {
        let (shape, planes) = decode_image(d.data)?;
        return Ok(Decoded {
            shape,
            pixels: Pixels::U8(planes),
            label: d.label,
        });
    }
    let shape = [d.channels as usize, d.height as usize, d.width as usize];
    let count = shape.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
    let Some(count) = count else {
        return Err(bad("its shape overflows"));
    };
    if !d.data.is_empty() {
        if d.data.len() != count {
            return Err(bad(format!(
                "data holds {} bytes but its shape {}x{}x{} needs {count}",
                d.data.len(),
                shape[0],
                shape[1],
                shape[2]
            )));
        }
        return Ok(Decoded {
            shape,
            pixels: Pixels::U8(d.data.to_vec()),
            label: d.label,
        });
    }
    if d.float_data.len() != count {
        return Err(bad(format!(
            "float_data holds {} values but its shape {}x{}x{} needs {count}",
            d.float_data.len(),
            shape[0],
            shape[1],
            shape[2]
        )));
    }
    Ok(Decoded {
        shape,
        pixels: Pixels::F32(d.float_data),
        label: d.label,
    })
}

/// An image file decoded as OpenCV's IMREAD_UNCHANGED gives it to Caffe,
/// as planes (8-bit images only).
pub fn decode_image(file: &[u8]) -> Result<([usize; 3], Vec<u8>)> {
    use image::DynamicImage as D;
    let img = image::load_from_memory(file)
        .map_err(|e| bad(format!("its encoded image does not decode: {e}")))?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    // Source channel for each output plane, in OpenCV's order.
    let (interleaved, order): (Vec<u8>, &[usize]) = match img {
        D::ImageLuma8(i) => (i.into_raw(), &[0]),
        D::ImageRgb8(i) => (i.into_raw(), &[2, 1, 0]),
        D::ImageRgba8(i) => (i.into_raw(), &[2, 1, 0, 3]),
        // Grey with alpha comes out of OpenCV as BGRA.
        D::ImageLumaA8(i) => (i.into_raw(), &[0, 0, 0, 1]),
        other => {
            return Err(Error::InvalidArgument(format!(
                "encoded image of {:?} pixels: only 8-bit images decode",
                other.color()
            )))
        }
    };
    let src_channels = match order.len() {
        1 => 1,
        3 => 3,
        _ if order == [0, 0, 0, 1] => 2,
        _ => 4,
    };
    let mut planes = Vec::with_capacity(w * h * order.len());
    for &c in order {
        planes.extend(interleaved.chunks_exact(src_channels).map(|px| px[c]));
    }
    Ok(([order.len(), h, w], planes))
}
