//! Batches and zero-copy record buffers.
//!
//! A record's key and value are `Buffer`s: read-only buffer-protocol views
//! of the node's shared window, valid until the reader's next batch. Each
//! batch carries the reader's generation at delivery; a buffer asked for
//! its bytes after the reader moved on raises `BufferError` instead of
//! showing the next batch's bytes (views taken before stay as they are:
//! copy what must outlive the batch).

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::exceptions::{PyBufferError, PyIndexError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::driver::{BatchData, RecordRef};

/// The reader's current generation, shared with its batches.
pub type Generation = Arc<AtomicU64>;

/// Memory a batch's records live in when it is not the node's window
/// (see `local`): kept alive by the batch and every buffer from it.
pub type Owner = Option<Arc<dyn std::any::Any + Send + Sync>>;

/// A read-only view of one key or value in the node's shared memory.
/// Supports the buffer protocol: `bytes(v)`, `memoryview(v)`,
/// `hashlib.sha256(v)`, `numpy.frombuffer(v, ...)`. Valid until the
/// reader's next batch.
#[pyclass(module = "lmdbio", frozen)]
pub struct Buffer {
    ptr: *const u8,
    len: usize,
    generation: u64,
    current: Generation,
    _owner: Owner,
}

// SAFETY: see RecordRef: the memory stays mapped; validity is checked by
// generation before every access.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Buffer {
    fn check(&self) -> PyResult<()> {
        if self.current.load(Ordering::Acquire) != self.generation {
            return Err(PyBufferError::new_err(
                "this record's batch is gone: the reader has moved to the next batch (copy with bytes(v) to keep a record)",
            ));
        }
        Ok(())
    }

    /// The bytes, if still valid.
    pub fn bytes(&self) -> PyResult<&[u8]> {
        self.check()?;
        if self.len == 0 {
            return Ok(&[]);
        }
        // SAFETY: the batch is current (checked above), so ptr..ptr+len is
        // its record in the mapped window, unchanged until the next batch.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
    }
}

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.len
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, self.bytes()?))
    }

    fn __repr__(&self) -> String {
        format!("<lmdbio.Buffer of {} bytes>", self.len)
    }

    /// # Safety
    /// Called by Python with a valid `Py_buffer` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        this.check()?;
        if flags & pyo3::ffi::PyBUF_WRITABLE == pyo3::ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("lmdbio buffers are read-only"));
        }
        // SAFETY: view is Python's to fill; the memory is this record's,
        // read-only, kept valid as documented; PyBuffer_FillInfo takes a
        // reference to slf for the view's life.
        let rc = unsafe {
            pyo3::ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                this.ptr as *mut std::ffi::c_void,
                this.len as pyo3::ffi::Py_ssize_t,
                1,
                flags,
            )
        };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }
}

/// One step's records on this rank. Iterating yields `(key, value)` pairs
/// of `Buffer`s, valid until the reader's next batch.
#[pyclass(module = "lmdbio", frozen)]
pub struct Batch {
    pub records: Vec<RecordRef>,
    /// The step this batch was delivered at (counted from the job's start).
    #[pyo3(get)]
    pub step: u64,
    /// Epoch of the batch's first record.
    #[pyo3(get)]
    pub epoch: u64,
    generation: u64,
    current: Generation,
    owner: Owner,
}

impl Batch {
    pub fn new(data: BatchData, current: &Generation) -> Batch {
        Batch {
            records: data.records,
            step: data.step,
            epoch: data.epoch,
            generation: current.load(Ordering::Acquire),
            current: current.clone(),
            owner: None,
        }
    }

    /// A batch whose records live in `owner`'s memory.
    pub fn with_owner(
        data: BatchData,
        current: &Generation,
        owner: Arc<dyn std::any::Any + Send + Sync>,
    ) -> Batch {
        Batch {
            owner: Some(owner),
            ..Batch::new(data, current)
        }
    }

    fn buffer(&self, (ptr, len): (*const u8, usize)) -> Buffer {
        Buffer {
            ptr,
            len,
            generation: self.generation,
            current: self.current.clone(),
            _owner: self.owner.clone(),
        }
    }

    /// Whether the reader is still at this batch.
    pub fn is_current(&self) -> bool {
        self.current.load(Ordering::Acquire) == self.generation
    }

    pub fn check(&self) -> PyResult<()> {
        if !self.is_current() {
            return Err(PyBufferError::new_err(
                "this batch is gone: the reader has moved to the next batch",
            ));
        }
        Ok(())
    }

    /// Value bytes of record `i`, if the batch is current.
    pub fn value_bytes(&self, i: usize) -> &[u8] {
        let (ptr, len) = self.records[i].value;
        if len == 0 {
            return &[];
        }
        // SAFETY: callers check `is_current` first; see Buffer::bytes.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    fn pair<'py>(&self, py: Python<'py>, i: usize) -> PyResult<Bound<'py, PyTuple>> {
        let r = &self.records[i];
        let key = Bound::new(py, self.buffer(r.key))?;
        let value = Bound::new(py, self.buffer(r.value))?;
        PyTuple::new(py, [key.into_any(), value.into_any()])
    }
}

#[pymethods]
impl Batch {
    fn __len__(&self) -> usize {
        self.records.len()
    }

    fn __getitem__<'py>(&self, py: Python<'py>, i: isize) -> PyResult<Bound<'py, PyTuple>> {
        let n = self.records.len() as isize;
        let at = if i < 0 { i + n } else { i };
        if !(0..n).contains(&at) {
            return Err(PyIndexError::new_err("batch index out of range"));
        }
        self.pair(py, at as usize)
    }

    fn __iter__(slf: Py<Self>) -> BatchIter {
        BatchIter { batch: slf, at: 0 }
    }

    /// The records' keys, as `Buffer`s.
    fn keys(&self) -> Vec<Buffer> {
        self.records.iter().map(|r| self.buffer(r.key)).collect()
    }

    /// The records' values, as `Buffer`s.
    fn values(&self) -> Vec<Buffer> {
        self.records.iter().map(|r| self.buffer(r.value)).collect()
    }

    /// Each record's ordinal: its position in key order in the database.
    #[getter]
    fn ordinals(&self) -> Vec<u64> {
        self.records.iter().map(|r| r.ordinal).collect()
    }

    /// Each record's epoch.
    #[getter]
    fn epochs(&self) -> Vec<u64> {
        self.records.iter().map(|r| r.epoch).collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "<lmdbio.Batch step={} epoch={} records={}>",
            self.step,
            self.epoch,
            self.records.len()
        )
    }
}

#[pyclass(module = "lmdbio")]
pub struct BatchIter {
    batch: Py<Batch>,
    at: usize,
}

#[pymethods]
impl BatchIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let batch = self.batch.get();
        if self.at >= batch.records.len() {
            return Ok(None);
        }
        self.at += 1;
        batch.pair(py, self.at - 1).map(Some)
    }
}
