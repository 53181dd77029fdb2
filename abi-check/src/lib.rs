//! `include/lmdbio.h` checked against `lmdbio::ffi`. The build script reads
//! the header with bindgen and writes the checks: this crate does not
//! compile when a constant, a function's signature or a struct's layout
//! differs between the two (the error names the item). The tests add what
//! a compiler cannot see: the functions the shared library exports, the
//! error kinds' codes, and the C compiler's view of the layouts.

/// The header as bindgen reads it.
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs
)]
pub mod c {
    include!(concat!(env!("OUT_DIR"), "/c.rs"));
}

include!(concat!(env!("OUT_DIR"), "/checks.rs"));

/// The value of the header's constant `name`, if it defines one.
pub fn header_constant(name: &str) -> Option<i128> {
    HEADER_CONSTANTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, v)| v)
}
