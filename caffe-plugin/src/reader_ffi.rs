//! The C functions behind the zero-change cursor (`cpp/partition_reader.h`):
//! a [`PartitionReader`] behind an opaque pointer. Every function runs inside
//! lmdbio's panic boundary ([`lmdbio::c_boundary`]); failures return nonzero
//! and leave a message for `lmdbio_caffe_last_error` on the calling thread.

// C names and contracts, documented in cpp/partition_reader.h.
#![allow(non_camel_case_types, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::Path;

use lmdbio::c_boundary::last_error;

use crate::partition_reader::{PartitionReader, Split};

/// The error of asking for the current record with none left.
const PAST_END: &str = "the cursor is past the end of its share";

pub type lmdbio_caffe_reader = PartitionReader;

/// Runs `body` behind lmdbio's boundary: failures return 1.
fn guard(body: impl FnOnce() -> Result<(), String>) -> c_int {
    lmdbio::c_boundary::guard(body)
}

/// # Safety
/// `reader` must be NULL or a pointer from `lmdbio_caffe_reader_open` not
/// yet freed, used by one thread at a time.
unsafe fn reader<'a>(reader: *mut lmdbio_caffe_reader) -> Result<&'a mut PartitionReader, String> {
    // SAFETY: the caller passes a live reader (see above).
    unsafe { reader.as_mut() }.ok_or_else(|| "reader is NULL".to_string())
}

/// Message of this thread's last failure.
#[no_mangle]
pub extern "C" fn lmdbio_caffe_last_error() -> *const c_char {
    last_error()
}

#[no_mangle]
pub unsafe extern "C" fn lmdbio_caffe_reader_open(
    path: *const c_char,
    rank: u64,
    ranks: u64,
    strided: c_int,
    out: *mut *mut lmdbio_caffe_reader,
) -> c_int {
    guard(|| {
        if path.is_null() || out.is_null() {
            return Err("path or out is NULL".into());
        }
        // SAFETY: the caller passes a NUL-terminated string.
        let path = unsafe { CStr::from_ptr(path) }
            .to_str()
            .map_err(|_| "path is not UTF-8".to_string())?;
        let split = if strided != 0 {
            Split::Strided
        } else {
            Split::Contiguous
        };
        let opened = PartitionReader::open(Path::new(path), rank, ranks, split)
            .map_err(|e| e.to_string())?;
        // SAFETY: out is non-NULL and points to writable storage.
        unsafe { *out = Box::into_raw(Box::new(opened)) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn lmdbio_caffe_reader_free(reader: *mut lmdbio_caffe_reader) {
    if !reader.is_null() {
        // SAFETY: the pointer came from Box::into_raw in _open and is freed once.
        drop(unsafe { Box::from_raw(reader) });
    }
}

/// Writes records in the database and the first ordinal, size and stride
/// of the share of the current epoch.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_caffe_reader_share(
    r: *mut lmdbio_caffe_reader,
    out_records: *mut u64,
    out_first: *mut u64,
    out_count: *mut u64,
    out_stride: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: see `reader`.
        let r = unsafe { reader(r) }?;
        let (first, count, stride) = r.share();
        for (p, v) in [
            (out_records, r.records()),
            (out_first, first),
            (out_count, count),
            (out_stride, stride),
        ] {
            if !p.is_null() {
                // SAFETY: non-NULL out pointers point to writable u64s.
                unsafe { *p = v as u64 };
            }
        }
        Ok(())
    })
}

/// 1 when positioned on a record of the share, 0 past its end or on error.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_caffe_reader_valid(r: *mut lmdbio_caffe_reader) -> c_int {
    // SAFETY: see `reader`.
    match unsafe { reader(r) } {
        Ok(r) => c_int::from(r.valid()),
        Err(_) => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn lmdbio_caffe_reader_seek_to_first(r: *mut lmdbio_caffe_reader) -> c_int {
    guard(|| {
        // SAFETY: see `reader`.
        unsafe { reader(r) }?.seek_to_first();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn lmdbio_caffe_reader_next(r: *mut lmdbio_caffe_reader) -> c_int {
    guard(|| {
        // SAFETY: see `reader`.
        unsafe { reader(r) }?.next();
        Ok(())
    })
}

/// Ordinal (position in key order) of the current record.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_caffe_reader_ordinal(
    r: *mut lmdbio_caffe_reader,
    out: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: see `reader`.
        let r = unsafe { reader(r) }?;
        let ordinal = r.ordinal().ok_or(PAST_END)?;
        if out.is_null() {
            return Err("out is NULL".into());
        }
        // SAFETY: non-NULL and writable per the header.
        unsafe { *out = ordinal as u64 };
        Ok(())
    })
}

/// The current key; valid until the reader moves or is freed.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_caffe_reader_key(
    r: *mut lmdbio_caffe_reader,
    out: *mut *const c_void,
    out_len: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: see `reader`.
        let r = unsafe { reader(r) }?;
        let key = r.key().ok_or(PAST_END)?;
        // SAFETY: out pointers are non-NULL per the header.
        unsafe { write_slice(key, out, out_len) }
    })
}

/// The current value (read from the file if its chunk is not in memory);
/// valid until the reader moves or is freed.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_caffe_reader_value(
    r: *mut lmdbio_caffe_reader,
    out: *mut *const c_void,
    out_len: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: see `reader`.
        let r = unsafe { reader(r) }?;
        let value = r.value().map_err(|e| e.to_string())?.ok_or(PAST_END)?;
        // SAFETY: out pointers are non-NULL per the header.
        unsafe { write_slice(value, out, out_len) }
    })
}

/// # Safety
/// `out` and `out_len` must be NULL or writable.
unsafe fn write_slice(
    bytes: &[u8],
    out: *mut *const c_void,
    out_len: *mut usize,
) -> Result<(), String> {
    if out.is_null() || out_len.is_null() {
        return Err("out pointer is NULL".into());
    }
    // SAFETY: both checked non-NULL; the caller guarantees they are writable.
    unsafe {
        *out = bytes.as_ptr().cast();
        *out_len = bytes.len();
    }
    Ok(())
}
