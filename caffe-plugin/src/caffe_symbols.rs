//! The two `caffe::db::GetDB` overloads, exported under their C++ (Itanium
//! ABI) names as listed by `nm -D libcaffe.so`. Rust's cdylib exports only
//! symbols defined in Rust, so these forward to `extern "C"` functions of
//! `cpp/lmdbio_db.cpp`. Preloaded, they win over libcaffe's definitions,
//! which libcaffe's own Data layer calls through the PLT.
//!
//! ABI: `DataParameter_DB` is an `enum : int`; `const std::string&` is a
//! pointer; `DB*` is a pointer. "C-unwind" lets a C++ exception pass through
//! to Caffe as it would from the real function.

use std::ffi::{c_int, c_void};

extern "C-unwind" {
    fn lmdbio_caffe_get_db_by_backend(backend: c_int) -> *mut c_void;
    fn lmdbio_caffe_get_db_by_name(name: *const c_void) -> *mut c_void;
}

/// `caffe::db::GetDB(caffe::DataParameter_DB)`
#[export_name = "_ZN5caffe2db5GetDBENS_16DataParameter_DBE"]
pub extern "C-unwind" fn get_db_by_backend(backend: c_int) -> *mut c_void {
    // SAFETY: same signature as the C++ function it forwards to.
    unsafe { lmdbio_caffe_get_db_by_backend(backend) }
}

/// `caffe::db::GetDB(const std::string&)`
#[export_name = "_ZN5caffe2db5GetDBERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"]
pub extern "C-unwind" fn get_db_by_name(name: *const c_void) -> *mut c_void {
    // SAFETY: `name` is the `const std::string&` Caffe passed; forwarded as is.
    unsafe { lmdbio_caffe_get_db_by_name(name) }
}
