//! Python functions decoding Caffe Datums (see `datum`), one at a time or
//! a whole batch on a pool of threads with the GIL released.

use lmdbio::{Error, Result};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyByteArray;

use crate::batch::Batch;
use crate::datum::{self, Decoded, Pixels};
use crate::errors::to_py;

/// What Python gets: contents as bytes (uint8, or float32 little-endian),
/// the shape, the label(s), and whether the contents are float32.
type Out<'py, S, L> = (Bound<'py, PyByteArray>, S, L, bool);

/// A decoded batch: N×C×H×W contents, labels, and whether float32.
type BatchOut<'py> = Out<'py, (usize, usize, usize, usize), Vec<i32>>;

/// Stacked records: contents, shape, labels, whether float32.
struct Stacked {
    data: Vec<u8>,
    shape: [usize; 4],
    labels: Vec<i32>,
    is_float: bool,
}

impl Stacked {
    fn into_py(self, py: Python<'_>) -> BatchOut<'_> {
        let [n, c, h, w] = self.shape;
        (
            PyByteArray::new(py, &self.data),
            (n, c, h, w),
            self.labels,
            self.is_float,
        )
    }
}

fn bytes_of(p: &Pixels) -> &[u8] {
    match p {
        Pixels::U8(v) => v,
        // SAFETY: f32 has no padding and every byte pattern is a valid u8;
        // the slice covers exactly the vector's initialised elements.
        Pixels::F32(v) => unsafe {
            std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v.as_slice()))
        },
    }
}

/// `decode_datum(buf) -> (bytearray, (C, H, W), label, is_float)`.
#[pyfunction]
fn decode_datum<'py>(
    py: Python<'py>,
    buf: PyBuffer<u8>,
) -> PyResult<Out<'py, (usize, usize, usize), i32>> {
    let bytes = buffer_bytes(&buf)?;
    let d = py.allow_threads(|| datum::decode(bytes)).map_err(to_py)?;
    let out = PyByteArray::new(py, bytes_of(&d.pixels));
    let [c, h, w] = d.shape;
    Ok((out, (c, h, w), d.label, matches!(d.pixels, Pixels::F32(_))))
}

fn buffer_bytes(buf: &PyBuffer<u8>) -> PyResult<&[u8]> {
    if !buf.is_c_contiguous() {
        return Err(to_py(Error::InvalidArgument(
            "the Datum's buffer is not contiguous".into(),
        )));
    }
    if buf.len_bytes() == 0 {
        return Ok(&[]);
    }
    // SAFETY: the PyBuffer holds the exporter's view (and so its memory)
    // for as long as `buf` lives, which outlives the returned borrow; the
    // buffer is contiguous and len_bytes long.
    Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) })
}

/// Decodes `values` on up to `threads` threads, in order.
fn decode_all(values: &[&[u8]], threads: usize) -> Vec<Result<Decoded>> {
    let threads = threads.clamp(1, values.len().max(1));
    if threads == 1 {
        return values.iter().map(|v| datum::decode(v)).collect();
    }
    let per = values.len().div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = values
            .chunks(per)
            .map(|chunk| {
                s.spawn(move || chunk.iter().map(|v| datum::decode(v)).collect::<Vec<_>>())
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|h| {
                h.join().unwrap_or_else(|_| {
                    vec![Err(Error::Internal("a decode thread panicked".into()))]
                })
            })
            .collect()
    })
}

/// Stacks same-shaped decoded records into one N×C×H×W array.
fn stack(decoded: Vec<Result<Decoded>>) -> Result<Stacked> {
    let n = decoded.len();
    let mut data = Vec::new();
    let mut labels = Vec::with_capacity(n);
    let mut shape: Option<([usize; 3], bool)> = None;
    for (i, d) in decoded.into_iter().enumerate() {
        let d = d.map_err(|e| Error::InvalidArgument(format!("record {i} of the batch: {e}")))?;
        let is_float = matches!(d.pixels, Pixels::F32(_));
        match shape {
            None => {
                shape = Some((d.shape, is_float));
                data.reserve(bytes_of(&d.pixels).len() * n);
            }
            Some(s) if s != (d.shape, is_float) => {
                return Err(Error::InvalidArgument(format!(
                    "record {i} of the batch is {:?} ({}) where the first is {:?} ({}): records of one batch must have one shape (decode them one at a time with decode_datum, or give a transform)",
                    d.shape,
                    if is_float { "float" } else { "uint8" },
                    s.0,
                    if s.1 { "float" } else { "uint8" },
                )))
            }
            Some(_) => {}
        }
        data.extend_from_slice(bytes_of(&d.pixels));
        labels.push(d.label);
    }
    let (s, is_float) = shape.unwrap_or(([0, 0, 0], false));
    Ok(Stacked {
        data,
        shape: [n, s[0], s[1], s[2]],
        labels,
        is_float,
    })
}

/// `decode_batch(batch, threads) -> (bytearray, (N, C, H, W), labels,
/// is_float)`: every value of a reader's batch, decoded and stacked.
#[pyfunction]
fn decode_batch<'py>(
    py: Python<'py>,
    batch: &Bound<'py, Batch>,
    threads: usize,
) -> PyResult<BatchOut<'py>> {
    let batch = batch.get();
    batch.check()?;
    let values: Vec<&[u8]> = (0..batch.records.len())
        .map(|i| batch.value_bytes(i))
        .collect();
    let stacked = py
        .allow_threads(|| stack(decode_all(&values, threads)))
        .map_err(to_py)?;
    Ok(stacked.into_py(py))
}

/// `decode_many(buffers, threads)`: as `decode_batch`, for any buffers.
#[pyfunction]
fn decode_many<'py>(
    py: Python<'py>,
    buffers: Vec<PyBuffer<u8>>,
    threads: usize,
) -> PyResult<BatchOut<'py>> {
    let values = buffers
        .iter()
        .map(buffer_bytes)
        .collect::<PyResult<Vec<_>>>()?;
    let stacked = py
        .allow_threads(|| stack(decode_all(&values, threads)))
        .map_err(to_py)?;
    Ok(stacked.into_py(py))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_datum, m)?)?;
    m.add_function(wrap_pyfunction!(decode_batch, m)?)?;
    m.add_function(wrap_pyfunction!(decode_many, m)?)?;
    Ok(())
}
