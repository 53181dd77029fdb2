//! `libcaffe_lmdbio.so`: stock Caffe 1.0 reads LMDB through lmdbio, loaded
//! with `LD_PRELOAD` (no rebuild of Caffe).
//!
//! The library has a Rust half and a C++ half (`cpp/`, compiled by
//! `build.rs` against Caffe's headers):
//!
//! - [`partition_reader`]: one rank's share of a database, record by record,
//!   read with lmdbio's parser and coalesced positioned reads. It backs the
//!   zero-change mode, where Caffe's stock `Data` layer drives a cursor from
//!   its own prefetch thread at times no other rank can predict, so nothing
//!   in it is collective.
//! - [`reader_ffi`]: the C functions the C++ cursor calls.
//! - `caffe_symbols`: the two `caffe::db::GetDB` overloads, exported under
//!   their C++ names so they take precedence over libcaffe's.
//! - `cpp/lmdbio_db.cpp`: the `caffe::db::DB` and `Cursor` returned for
//!   LMDB sources (everything else goes to libcaffe's `GetDB`).
//! - `cpp/lmdbio_data_layer.cpp`: the `LMDBIOData` layer, which reads
//!   batches from the collective engine of `include/lmdbio.h` (one reader
//!   per node, zero-copy from the node's shared window) and decodes and
//!   transforms them on a pool of worker threads.
//! - `cpp/mpi_session.cpp`: initialises MPI when launched by mpiexec (or
//!   when the layer needs it) and finalises it at exit.

pub mod partition_reader;
pub mod reader_ffi;

#[cfg(not(caffe_plugin_skipped))]
mod caffe_symbols;

/// Whether `build.rs` compiled the C++ half (false when Caffe's headers are
/// missing).
pub const CAFFE_PLUGIN_BUILT: bool = cfg!(not(caffe_plugin_skipped));
