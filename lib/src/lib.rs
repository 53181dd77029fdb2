//! lmdbio: deep-learning input I/O from stock LMDB files, built to scale on
//! MPI clusters.
//!
//! This crate is what users and the C ABI see. It is made of three crates:
//!
//! * `lmdbio-core` (`core/`): reading LMDB with no MPI: the parser, the
//!   record index, read plans, schedules, shuffles and cursors. Re-exported
//!   here under the same module names ([`database`], [`index`], ...).
//! * `lmdbio-engine` (`engine/`): the MPI read engine and the thin unsafe
//!   layer over MPI. Re-exported here as [`engine`] and [`mpi_raw`].
//! * `lmdbio` (`lib/`, this crate): the C ABI ([`ffi`], `include/lmdbio.h`),
//!   built as `liblmdbio.so` and `liblmdbio.a`, and the panic boundary it
//!   shares with the Caffe plugin ([`c_boundary`]).
//!
//! # The data path
//!
//! Read the modules in this order; each has one job.
//!
//! 1. [`source`]: positioned reads (`pread` here, MPI-IO in the engine). No
//!    mmap, no liblmdb, no lock file. [`page_cache`] lets the engine read
//!    around the kernel's page cache (direct I/O) where asked to, into
//!    memory in huge pages ([`huge_pages`]).
//! 2. [`format`](mod@format): LMDB's on-disk structures (meta, branch, leaf and overflow
//!    pages), parsed from byte buffers with every offset bounds-checked.
//! 3. [`database`]: opens a file, picks the current meta page, selects MAIN
//!    or a named database, refuses what we do not read (duplicate keys).
//! 4. [`index`]: walks the tree level by level, reading each branch and
//!    leaf page exactly once with coalesced requests, and records every
//!    record's key and value extent in key order. Positions are plain
//!    ordinals into this index.
//! 5. [`plan`]: turns a set of ordinals into few large file requests.
//! 6. [`values`]: executes a plan with positioned reads and hands out
//!    zero-copy slices of the round's buffer.
//!
//! [`layout`] reports how sequential a file is for reading.
//!
//! On many ranks the same pieces run inside [`engine`]:
//!
//! 7. [`schedule`]: which positions each rank gets at each step (a pure
//!    function, so every rank can plan every other rank's reads), and
//!    [`order`]: which record sits at each position of an epoch (key order,
//!    or a per-epoch chunked shuffle).
//! 8. [`mpi_raw`]: the thin unsafe layer over MPI (communicators, MPI-IO,
//!    shared windows), every return code checked.
//! 9. [`engine`]: nodes, readers, the index in node-shared memory, rounds of
//!    coalesced MPI-IO reads (independent by default, collective on request)
//!    into a shared window, each step served as soon as its own bytes are
//!    in (the readers publish their progress in the window), zero-copy
//!    batches, and agreements where rounds start (and at the job's end)
//!    that carry any rank's failure to every rank; between them each node
//!    serves its steps without waiting for the others.
//!    The node's communicators and window are made once and kept between
//!    engines, the window with its memory mapped ([`engine::topology`],
//!    [`engine::prepare`], [`engine::release_memory`]).
//! 10. [`cursor`]: a rank's (and a job's) position as a small portable
//!     value; [`resume`]: a resumed job's schedule, and re-partitioning onto
//!     another rank count.
//! 11. [`ffi`]: the C ABI of `include/lmdbio.h`.
//!
//! Steps 1 to 7 and 10 are `lmdbio-core`; 8 and 9 are `lmdbio-engine`; 11
//! is this crate.
//!
//! ```no_run
//! use lmdbio::{Database, IndexOptions, CoalesceOptions};
//! # fn main() -> lmdbio::Result<()> {
//! let db = Database::open("train_lmdb".as_ref())?;
//! let tree = db.main_tree()?;
//! let index = db.build_index(&tree, &IndexOptions::default())?;
//! let first_batch: Vec<usize> = (0..index.len().min(64)).collect();
//! let batch = lmdbio::values::read_values(&db, &index, &first_batch, CoalesceOptions::default())?;
//! for (n, &i) in first_batch.iter().enumerate() {
//!     println!("{:?}: {} bytes", index.key(i), batch.value(n).len());
//! }
//! # Ok(()) }
//! ```

// Every public item says what it is: users read these docs, not the code.
#![deny(missing_docs)]

pub mod c_boundary;
pub mod ffi;

pub use lmdbio_core::{
    cursor, database, error, format, huge_pages, index, layout, order, page_cache, plan, resume,
    schedule, source, values,
};
pub use lmdbio_engine as engine;
pub use lmdbio_engine::mpi_raw;

pub use lmdbio_core::{
    data_file_path, CoalesceOptions, Database, Error, ErrorKind, FileSource, IndexOptions, Layout,
    MemSource, ReadAt, RecordEntry, RecordIndex, Result, Tree,
};
