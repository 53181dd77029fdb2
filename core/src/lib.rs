//! lmdbio-core: reads stock LMDB files without liblmdb, without mmap and
//! without MPI. The MPI engine (`lmdbio-engine`) and the C ABI (`lmdbio`)
//! are built on it; anyone who only wants to read LMDB needs only this
//! crate.
//!
//! # The data path
//!
//! Read the modules in this order; each has one job.
//!
//! 1. [`source`]: positioned reads (`pread` here, MPI-IO in the engine). No
//!    mmap, no liblmdb, no lock file. [`page_cache`] lets the engine read
//!    around the kernel's page cache (direct I/O) where asked to, into
//!    memory in huge pages ([`huge_pages`]).
//! 2. [`format`](mod@format): LMDB's on-disk structures (meta, branch, leaf
//!    and overflow pages), parsed from byte buffers with every offset
//!    bounds-checked.
//! 3. [`database`]: opens a file, picks the current meta page, selects MAIN
//!    or a named database, refuses what we do not read (duplicate keys).
//! 4. [`index`]: walks the tree level by level, reading each branch and
//!    leaf page exactly once with coalesced requests, and records every
//!    record's key and value extent in key order. Positions are plain
//!    ordinals into this index.
//! 5. [`plan`]: turns a set of ordinals into few large file requests.
//! 6. [`values`]: executes a plan with positioned reads and hands out
//!    zero-copy slices of the batch's buffer.
//!
//! [`layout`] reports how sequential a file is for reading.
//!
//! What the engine needs to agree on without messages is here too, as pure
//! functions:
//!
//! 7. [`schedule`]: which positions each rank gets at each step (so every
//!    rank can plan every other rank's reads), and [`order`]: which record
//!    sits at each position of an epoch (key order, or a per-epoch chunked
//!    shuffle).
//! 8. [`cursor`]: a rank's (and a job's) position as a small portable
//!    value; [`resume`]: a resumed job's schedule, and re-partitioning onto
//!    another rank count.
//!
//! [`error`] holds the one error type every layer returns.
//!
//! ```no_run
//! use lmdbio_core::{Database, IndexOptions, CoalesceOptions};
//! # fn main() -> lmdbio_core::Result<()> {
//! let db = Database::open("train_lmdb".as_ref())?;
//! let tree = db.main_tree()?;
//! let index = db.build_index(&tree, &IndexOptions::default())?;
//! let first_batch: Vec<usize> = (0..index.len().min(64)).collect();
//! let batch = lmdbio_core::values::read_values(&db, &index, &first_batch, CoalesceOptions::default())?;
//! for (n, &i) in first_batch.iter().enumerate() {
//!     println!("{:?}: {} bytes", index.key(i), batch.value(n).len());
//! }
//! # Ok(()) }
//! ```

// Every public item says what it is: users read these docs, not the code.
#![deny(missing_docs)]

pub mod cursor;
pub mod database;
pub mod error;
pub mod format;
pub mod huge_pages;
pub mod index;
pub mod layout;
pub mod order;
pub mod page_cache;
pub mod plan;
pub mod resume;
pub mod schedule;
pub mod source;
pub mod values;

pub use database::{data_file_path, Database, Tree};
pub use error::{Error, ErrorKind, Result};
pub use index::{IndexOptions, RecordEntry, RecordIndex};
pub use layout::Layout;
pub use plan::CoalesceOptions;
pub use source::{FileSource, MemSource, ReadAt};
