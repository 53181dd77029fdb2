//! Caffe's `Datum` (proto2), serialized byte for byte as protobuf's
//! `SerializeToString` writes the messages Caffe's tools build: fields in
//! field-number order, only the fields those tools set, `float_data`
//! unpacked (proto2's default for a repeated scalar).
//!
//! Field numbers: channels=1, height=2, width=3, data=4, label=5,
//! float_data=6, encoded=7.

/// Pixels as `CVMatToDatum` stores them: planar C×H×W uint8, BGR for colour.
pub struct RawImage<'a> {
    pub channels: u32,
    pub height: u32,
    pub width: u32,
    pub planar: &'a [u8],
}

/// `CVMatToDatum` then `set_label`: channels, height, width, data, label,
/// and `encoded=false` (it sets the field explicitly, so it is serialized).
pub fn raw(image: &RawImage<'_>, label: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(image.planar.len() + 32);
    put_varint_field(&mut out, 1, image.channels as u64);
    put_varint_field(&mut out, 2, image.height as u64);
    put_varint_field(&mut out, 3, image.width as u64);
    put_bytes_field(&mut out, 4, image.planar);
    put_varint_field(&mut out, 5, label as i64 as u64);
    put_varint_field(&mut out, 7, 0);
    out
}

/// `ReadFileToDatum` (or the re-encode branch of `ReadImageToDatum`):
/// data = the image file's bytes, label, `encoded=true`; no dimensions.
pub fn encoded(file_bytes: &[u8], label: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(file_bytes.len() + 24);
    put_bytes_field(&mut out, 4, file_bytes);
    put_varint_field(&mut out, 5, label as i64 as u64);
    put_varint_field(&mut out, 7, 1);
    out
}

/// What Caffe's Python `array_to_datum` builds from a uint8 array:
/// channels, height, width, data, label.
pub fn uint8_array(shape: [u32; 3], planar: &[u8], label: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(planar.len() + 32);
    put_shape(&mut out, shape);
    put_bytes_field(&mut out, 4, planar);
    put_varint_field(&mut out, 5, label as i64 as u64);
    out
}

/// What `array_to_datum` builds from a float array: channels, height, width,
/// label, then one unpacked `float_data` field per value.
pub fn float_array(shape: [u32; 3], values: &[f32], label: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 5 + 32);
    put_shape(&mut out, shape);
    put_varint_field(&mut out, 5, label as i64 as u64);
    for v in values {
        out.push(tag(6, WIRE_FIXED32));
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

const WIRE_VARINT: u8 = 0;
const WIRE_LEN: u8 = 2;
const WIRE_FIXED32: u8 = 5;

fn tag(field: u8, wire: u8) -> u8 {
    (field << 3) | wire
}

fn put_shape(out: &mut Vec<u8>, [channels, height, width]: [u32; 3]) {
    put_varint_field(out, 1, channels as u64);
    put_varint_field(out, 2, height as u64);
    put_varint_field(out, 3, width as u64);
}

fn put_varint_field(out: &mut Vec<u8>, field: u8, value: u64) {
    out.push(tag(field, WIRE_VARINT));
    put_varint(out, value);
}

fn put_bytes_field(out: &mut Vec<u8>, field: u8, bytes: &[u8]) {
    out.push(tag(field, WIRE_LEN));
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Negative int32 values are sign-extended to 64 bits first, as protobuf
/// does, so they take ten bytes.
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_datum_layout() {
        let img = RawImage {
            channels: 3,
            height: 1,
            width: 200,
            planar: &[7; 600],
        };
        let bytes = raw(&img, 300);
        assert_eq!(&bytes[..8], &[0x08, 3, 0x10, 1, 0x18, 0xC8, 0x01, 0x22]);
        assert_eq!(&bytes[8..10], &[0xD8, 0x04]);
        assert_eq!(&bytes[610..], &[0x28, 0xAC, 0x02, 0x38, 0]);
    }

    #[test]
    fn negative_label_takes_ten_bytes() {
        let bytes = encoded(b"x", -1);
        assert_eq!(bytes[3], 0x28);
        assert_eq!(bytes.len(), 3 + 11 + 2);
        assert_eq!(
            &bytes[4..14],
            &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]
        );
    }
}
