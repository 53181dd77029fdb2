//! Caffe functions exported under their C++ (Itanium ABI) names as listed
//! by `nm -D libcaffe.so`: the two `caffe::db::GetDB` overloads
//! (`cpp/lmdbio_db.cpp`) and the solver and net members that data-parallel
//! training hooks (`cpp/data_parallel.cpp`). Rust's cdylib exports only
//! symbols defined in Rust, so these forward to `extern "C"` functions of
//! the C++ half. Preloaded, they win over libcaffe's definitions, which
//! libcaffe calls through its PLT (it is not linked with `-Bsymbolic`).
//!
//! ABI: `DataParameter_DB` is an `enum : int`; `const std::string&` is a
//! pointer; `DB*` is a pointer; a non-virtual member function takes `this`
//! as its first argument and a returned reference is a pointer. "C-unwind"
//! lets a C++ exception pass through to Caffe as it would from the real
//! function.

use std::ffi::{c_int, c_void};

extern "C-unwind" {
    fn lmdbio_caffe_get_db_by_backend(backend: c_int) -> *mut c_void;
    fn lmdbio_caffe_get_db_by_name(name: *const c_void) -> *mut c_void;
    fn lmdbio_caffe_solver_step(solver: *mut c_void, iters: c_int);
    fn lmdbio_caffe_net_forward(net: *mut c_void, loss: *mut f32) -> *const c_void;
    fn lmdbio_caffe_solver_snapshot(solver: *mut c_void);
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

/// `caffe::Solver<float>::Step(int)`
#[export_name = "_ZN5caffe6SolverIfE4StepEi"]
pub extern "C-unwind" fn solver_step(solver: *mut c_void, iters: c_int) {
    // SAFETY: same signature as the C++ function it forwards to.
    unsafe { lmdbio_caffe_solver_step(solver, iters) }
}

/// `caffe::Net<float>::Forward(float*)`
#[export_name = "_ZN5caffe3NetIfE7ForwardEPf"]
pub extern "C-unwind" fn net_forward(net: *mut c_void, loss: *mut f32) -> *const c_void {
    // SAFETY: same signature as the C++ function it forwards to.
    unsafe { lmdbio_caffe_net_forward(net, loss) }
}

/// `caffe::Solver<float>::Snapshot()`
#[export_name = "_ZN5caffe6SolverIfE8SnapshotEv"]
pub extern "C-unwind" fn solver_snapshot(solver: *mut c_void) {
    // SAFETY: same signature as the C++ function it forwards to.
    unsafe { lmdbio_caffe_solver_snapshot(solver) }
}
