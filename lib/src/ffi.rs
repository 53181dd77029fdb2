//! The C ABI (`include/lmdbio.h`). Every function runs inside the panic
//! boundary of [`crate::c_boundary`], returns an `int` status (0 on success,
//! an `ErrorKind` code otherwise) and leaves a message for
//! `lmdbio_last_error` on its thread.
//! Outputs are written only on success.
//!
//! The pointer contracts of each function (what may be NULL, who owns what,
//! how long a batch stays valid) are documented in `include/lmdbio.h`.

// C names and C contracts, documented in the header.
#![allow(non_camel_case_types, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;

use crate::c_boundary::last_error;
use crate::cursor::{Cursor, JobCursor};
use crate::engine::{Counters, DirectIo, Engine, EngineOptions, EpochCounters};
use crate::error::{Error, ErrorKind, Result};
use crate::mpi_raw::RawComm;
use crate::order::ShuffleMode;
use crate::schedule::{Partition, Tail};

/// The header's `MPI_Comm`, as the MPI library in use declares it.
pub type MPI_Comm = RawComm;

/// Major version of the library (the crate's), as in the header.
pub const LMDBIO_VERSION_MAJOR: c_int = version_part(env!("CARGO_PKG_VERSION_MAJOR"));
/// Minor version of the library.
pub const LMDBIO_VERSION_MINOR: c_int = version_part(env!("CARGO_PKG_VERSION_MINOR"));
/// Patch version of the library.
pub const LMDBIO_VERSION_PATCH: c_int = version_part(env!("CARGO_PKG_VERSION_PATCH"));

/// A decimal part of the crate's version, at compile time.
const fn version_part(digits: &str) -> c_int {
    let digits = digits.as_bytes();
    let (mut value, mut i) = (0, 0);
    while i < digits.len() {
        value = value * 10 + (digits[i] - b'0') as c_int;
        i += 1;
    }
    value
}

// Status codes: ErrorKind's numbers.
/// Success.
pub const LMDBIO_OK: c_int = 0;
/// [`ErrorKind::NotFound`]: the path names no database.
pub const LMDBIO_ERR_NOT_FOUND: c_int = ErrorKind::NotFound as c_int;
/// [`ErrorKind::Io`]: the operating system failed a read.
pub const LMDBIO_ERR_IO: c_int = ErrorKind::Io as c_int;
/// [`ErrorKind::Truncated`]: the file ends before data it refers to.
pub const LMDBIO_ERR_TRUNCATED: c_int = ErrorKind::Truncated as c_int;
/// [`ErrorKind::NotLmdb`]: not an LMDB data file.
pub const LMDBIO_ERR_NOT_LMDB: c_int = ErrorKind::NotLmdb as c_int;
/// [`ErrorKind::Corrupt`]: damaged structure (the message names the page).
pub const LMDBIO_ERR_CORRUPT: c_int = ErrorKind::Corrupt as c_int;
/// [`ErrorKind::Unsupported`]: a valid LMDB feature lmdbio does not read.
pub const LMDBIO_ERR_UNSUPPORTED: c_int = ErrorKind::Unsupported as c_int;
/// [`ErrorKind::NoSuchDatabase`]: the named database is not in the file.
pub const LMDBIO_ERR_NO_SUCH_DATABASE: c_int = ErrorKind::NoSuchDatabase as c_int;
/// [`ErrorKind::InvalidArgument`]: bad option, NULL handle, failed engine.
pub const LMDBIO_ERR_INVALID_ARGUMENT: c_int = ErrorKind::InvalidArgument as c_int;
/// [`ErrorKind::ResourceLimit`]: e.g. a shared window too small for a batch.
pub const LMDBIO_ERR_RESOURCE_LIMIT: c_int = ErrorKind::ResourceLimit as c_int;
/// [`ErrorKind::Mpi`]: an MPI call failed.
pub const LMDBIO_ERR_MPI: c_int = ErrorKind::Mpi as c_int;
/// [`ErrorKind::Internal`]: a bug in lmdbio.
pub const LMDBIO_ERR_INTERNAL: c_int = ErrorKind::Internal as c_int;
/// `lmdbio_next_batch` after the job's last step: not an error, so it
/// stays clear of the error codes, which grow upwards.
pub const LMDBIO_END: c_int = -1;

/// [`Partition::Contiguous`]: rank r reads a contiguous block (default).
pub const LMDBIO_PARTITION_CONTIGUOUS: c_int = 0;
/// [`Partition::RoundRobinBatches`]: batches of B records dealt in turn.
pub const LMDBIO_PARTITION_ROUND_ROBIN: c_int = 1;
/// [`Partition::Strided`]: record i to rank i mod P (Caffe multi-GPU).
pub const LMDBIO_PARTITION_STRIDED: c_int = 2;
/// [`Tail::Wrap`]: full batches, the last continuing into the next epoch
/// (default).
pub const LMDBIO_TAIL_WRAP: c_int = 0;
/// [`Tail::Short`]: each epoch ends with a short batch.
pub const LMDBIO_TAIL_SHORT: c_int = 1;
/// [`DirectIo::Never`]: always read through the page cache.
pub const LMDBIO_DIRECT_IO_NEVER: c_int = 0;
/// [`DirectIo::Auto`]: read around the page cache where the file system
/// supports it (default).
pub const LMDBIO_DIRECT_IO_AUTO: c_int = 1;
/// [`DirectIo::Always`]: read every round around the page cache; opening
/// fails where the file system does not support it.
pub const LMDBIO_DIRECT_IO_ALWAYS: c_int = 2;

/// The default shuffle mode ([`EngineOptions::shuffle_mode_in_use`]).
pub const LMDBIO_SHUFFLE_DEFAULT: c_int = 0;
/// [`ShuffleMode::Chunked`]: chunks permuted and interleaved in windows.
pub const LMDBIO_SHUFFLE_CHUNKED: c_int = 1;
/// [`ShuffleMode::Global`]: a uniform permutation of all records per epoch.
pub const LMDBIO_SHUFFLE_GLOBAL: c_int = 2;
/// [`ShuffleMode::GlobalAfterFirst`]: the first epoch chunked, every later
/// one global.
pub const LMDBIO_SHUFFLE_GLOBAL_AFTER_FIRST: c_int = 3;

/// Bytes of an encoded rank cursor ([`crate::cursor::CURSOR_BYTES`]).
pub const LMDBIO_CURSOR_BYTES: usize = crate::cursor::CURSOR_BYTES;

/// Runs `body` behind the C boundary: failures return their kind's code.
fn guard(body: impl FnOnce() -> Result<()>) -> c_int {
    crate::c_boundary::guard(body)
}

fn null(what: &str) -> Error {
    Error::InvalidArgument(format!("{what} is NULL"))
}

/// # Safety
/// `p` must be NULL or valid for the call.
unsafe fn mut_ref<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: the caller passes a pointer from our own constructor.
    unsafe { p.as_mut() }.ok_or_else(|| null(what))
}

unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Error::InvalidArgument(format!("{what} is not UTF-8")))
}

/// Opaque options handle.
pub struct lmdbio_options(EngineOptions);

/// Opaque engine handle: the engine, the current batch's record table, and
/// whether a step failed (then the job has no end to report, only errors).
pub struct lmdbio_engine {
    engine: Engine,
    records: Vec<lmdbio_record>,
    failed: bool,
}

/// One record of a batch ([`BatchRecord`](crate::engine::BatchRecord)).
/// The pointers point into node-shared memory, valid until this rank's
/// next `lmdbio_next_batch` or `lmdbio_close`.
#[repr(C)]
pub struct lmdbio_record {
    /// The key's first byte.
    pub key: *const c_void,
    /// Key length in bytes.
    pub key_len: usize,
    /// The value's first byte.
    pub value: *const c_void,
    /// Value length in bytes.
    pub value_len: usize,
    /// Position in key order, from 0: the same on every rank.
    pub ordinal: u64,
    /// The epoch the record is delivered in, from 0.
    pub epoch: u64,
}

/// One step's batch ([`Batch`](crate::engine::Batch)).
#[repr(C)]
pub struct lmdbio_batch {
    /// `count` records, owned by the engine, valid as [`lmdbio_record`]'s
    /// pointers are.
    pub records: *const lmdbio_record,
    /// Number of records.
    pub count: usize,
    /// Batches this rank received before this one.
    pub step: u64,
    /// Epoch of the first record.
    pub epoch: u64,
}

/// A rank's (or a node's) [`Counters`], field for field.
#[repr(C)]
pub struct lmdbio_counters {
    /// Bytes read from the file: the index's tree pages and the values.
    pub bytes_read: u64,
    /// Read requests behind `bytes_read`.
    pub read_requests: u64,
    /// Times the data file was opened.
    pub file_opens: u64,
    /// Of `bytes_read`, the tree pages read to build the index.
    pub index_bytes_read: u64,
    /// Value bytes handed to the caller.
    pub bytes_delivered: u64,
    /// Records handed to the caller.
    pub records_delivered: u64,
    /// Read rounds started.
    pub rounds: u64,
    /// Wall seconds spent in reads.
    pub io_seconds: f64,
    /// Wall seconds spent waiting for other ranks.
    pub wait_seconds: f64,
    /// [`Counters::setup_made`]: MPI set-up the open made with blocking
    /// calls (0 to 2).
    pub setup_made: u64,
    /// Of `read_requests`, those read around the page cache.
    pub direct_read_requests: u64,
    /// [`Counters::step_agreements`]: agreements the steps were served
    /// under.
    pub step_agreements: u64,
}

impl From<Counters> for lmdbio_counters {
    fn from(c: Counters) -> Self {
        lmdbio_counters {
            bytes_read: c.bytes_read,
            read_requests: c.read_requests,
            file_opens: c.file_opens,
            index_bytes_read: c.index_bytes_read,
            bytes_delivered: c.bytes_delivered,
            records_delivered: c.records_delivered,
            rounds: c.rounds,
            io_seconds: c.io_seconds,
            wait_seconds: c.wait_seconds,
            setup_made: c.setup_made,
            direct_read_requests: c.direct_read_requests,
            step_agreements: c.step_agreements,
        }
    }
}

/// A counter's name and how to read it.
type CounterField = (&'static str, fn(&Counters) -> f64);

/// Every [`Counters`] field by its Rust name, for `lmdbio_counter_get`:
/// the way to C for counters [`lmdbio_counters`] (a fixed layout) has no
/// room for. A new counter is one line here.
const COUNTER_FIELDS: &[CounterField] = &[
    ("bytes_read", |c| c.bytes_read as f64),
    ("read_requests", |c| c.read_requests as f64),
    ("file_opens", |c| c.file_opens as f64),
    ("index_bytes_read", |c| c.index_bytes_read as f64),
    ("index_read_requests", |c| c.index_read_requests as f64),
    ("bytes_delivered", |c| c.bytes_delivered as f64),
    ("records_delivered", |c| c.records_delivered as f64),
    ("rounds", |c| c.rounds as f64),
    ("step_agreements", |c| c.step_agreements as f64),
    ("io_seconds", |c| c.io_seconds),
    ("wait_seconds", |c| c.wait_seconds),
    ("setup_made", |c| c.setup_made as f64),
    ("direct_read_requests", |c| c.direct_read_requests as f64),
    ("reader_slots", |c| c.reader_slots as f64),
    ("index_loaded", |c| c.index_loaded as f64),
    ("index_seconds", |c| c.index_seconds),
    ("stage_bytes_read", |c| c.stage_bytes_read as f64),
    ("stage_bytes_written", |c| c.stage_bytes_written as f64),
    ("stage_warnings", |c| c.stage_warnings as f64),
];

/// The counter `name` of `c`.
fn counter_by_name(c: &Counters, name: &str) -> Result<f64> {
    COUNTER_FIELDS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, field)| field(c))
        .ok_or_else(|| Error::InvalidArgument(format!("no counter named {name:?}")))
}

/// One epoch's [`EpochCounters`], field for field.
#[repr(C)]
pub struct lmdbio_epoch_counters {
    /// The epoch.
    pub epoch: u64,
    /// Bytes read from the database file for this epoch.
    pub db_bytes_read: u64,
    /// Bytes read from the node's stage for this epoch.
    pub stage_bytes_read: u64,
    /// Bytes received from other nodes for this epoch.
    pub remote_bytes_received: u64,
    /// Records of this epoch handed to the caller.
    pub records: u64,
    /// Value bytes of this epoch handed to the caller.
    pub bytes_delivered: u64,
    /// Wall seconds spent on the epoch.
    pub seconds: f64,
}

impl From<EpochCounters> for lmdbio_epoch_counters {
    fn from(e: EpochCounters) -> Self {
        lmdbio_epoch_counters {
            epoch: e.epoch,
            db_bytes_read: e.db_bytes_read,
            stage_bytes_read: e.stage_bytes_read,
            remote_bytes_received: e.remote_bytes_received,
            records: e.records,
            bytes_delivered: e.bytes_delivered,
            seconds: e.seconds,
        }
    }
}

/// The message of the last failed call on this thread ("" after success).
/// Valid until the next lmdbio call on this thread.
#[no_mangle]
pub extern "C" fn lmdbio_last_error() -> *const c_char {
    last_error()
}

/// Makes an options handle with the defaults into `*out`.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_options_new(out: *mut *mut lmdbio_options) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        let boxed = Box::into_raw(Box::new(lmdbio_options(EngineOptions::default())));
        // SAFETY: out checked non-NULL.
        unsafe { *out = boxed };
        Ok(())
    })
}

/// Frees an options handle; NULL is ignored.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_options_free(options: *mut lmdbio_options) {
    if !options.is_null() {
        // SAFETY: made by lmdbio_options_new, freed once by the caller.
        drop(unsafe { Box::from_raw(options) });
    }
}

/// Applies `set` to the options behind `options`, keeping them as they
/// were if it fails or leaves a size no job can use (engine::limits).
unsafe fn with_options(
    options: *mut lmdbio_options,
    set: impl FnOnce(&mut EngineOptions) -> Result<()>,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded from the caller.
        let o = unsafe { mut_ref(options, "options") }?;
        let mut changed = o.0.clone();
        set(&mut changed)?;
        crate::engine::limits::check_static(&changed)?;
        o.0 = changed;
        Ok(())
    })
}

fn positive(v: usize, what: &str) -> Result<usize> {
    if v == 0 {
        return Err(Error::InvalidArgument(format!("{what} must be at least 1")));
    }
    Ok(v)
}

/// Defines `lmdbio_options_set_*(options, value)`: `$body` updates the
/// options `$o` from `$arg`, or fails with `?`.
macro_rules! option_setter {
    ($(#[$doc:meta])* $name:ident, $arg:ident: $ty:ty, |$o:ident| $body:expr) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(options: *mut lmdbio_options, $arg: $ty) -> c_int {
            // SAFETY: the caller passes NULL or a live options handle, and
            // NULL or valid NUL-terminated strings / byte ranges as the header says.
            unsafe {
                with_options(options, |$o| {
                    $body;
                    Ok(())
                })
            }
        }
    };
}

option_setter!(
    /// Sets [`EngineOptions::batch`] (records per batch per rank, >= 1).
    lmdbio_options_set_batch_size, batch: usize, |o| o.batch = positive(batch, "batch size")?);
option_setter!(
    /// Sets [`EngineOptions::partition`] to an `LMDBIO_PARTITION_*` mode.
    lmdbio_options_set_partition, mode: c_int, |o| o.partition = partition_from(mode)?);
option_setter!(
    /// Sets [`EngineOptions::tail`] to an `LMDBIO_TAIL_*` policy.
    lmdbio_options_set_tail, tail: c_int, |o| o.tail = tail_from(tail)?);
option_setter!(
    /// Sets [`EngineOptions::ranks_per_node`]; 0 groups ranks by shared
    /// memory.
    lmdbio_options_set_ranks_per_node, k: usize, |o| o.ranks_per_node = (k > 0).then_some(k));
option_setter!(
    /// Sets [`EngineOptions::readers_per_node`] (>= 1).
    lmdbio_options_set_readers_per_node, n: usize, |o| o.readers_per_node =
    positive(n, "readers per node")?);
option_setter!(
    /// Sets [`EngineOptions::window_bytes`]: node-shared bytes for values.
    lmdbio_options_set_window_bytes, bytes: usize, |o| o.window_bytes =
    positive(bytes, "window size")?);
option_setter!(
    /// Sets [`EngineOptions::prefetch`]: steps read ahead per round, at
    /// most.
    lmdbio_options_set_prefetch, steps: usize, |o| o.prefetch = positive(steps, "prefetch")?);
option_setter!(
    /// Sets [`EngineOptions::inline_pages_bytes`]: node-shared bytes for
    /// the leaf pages holding inline values; 0 reads every value.
    lmdbio_options_set_inline_pages, bytes: u64, |o| o.inline_pages_bytes = bytes);
option_setter!(
    /// Sets [`EngineOptions::saved_index`]: nonzero (the default) loads a
    /// saved index of the database's state instead of scanning, and saves
    /// the index a scan built; 0 does neither.
    lmdbio_options_set_saved_index, on: c_int, |o| o.saved_index = on != 0);
option_setter!(
    /// Sets [`EngineOptions::keys`]: 0 when the caller never reads
    /// `lmdbio_record::key`, so a node that loads a saved index holds no
    /// keys (they come back empty).
    lmdbio_options_set_keys, keys: c_int, |o| o.keys = keys != 0);
option_setter!(
    /// Sets [`EngineOptions::stagger`]; 0 lets all readers read at once.
    lmdbio_options_set_stagger, readers_at_once: usize, |o| o.stagger =
    (readers_at_once > 0).then_some(readers_at_once));
option_setter!(
    /// Sets [`EngineOptions::collective`]: nonzero for collective MPI-IO.
    lmdbio_options_set_collective, collective: c_int, |o| o.collective = collective != 0);
option_setter!(
    /// Sets [`EngineOptions::read_streams`]: threads per reader (>= 1).
    lmdbio_options_set_read_streams, streams: usize, |o| o.read_streams =
    Some(positive(streams, "read streams")?));
option_setter!(
    /// Sets [`EngineOptions::direct_io`] to an `LMDBIO_DIRECT_IO_*` value.
    lmdbio_options_set_direct_io, when: c_int, |o| o.direct_io = direct_io_from(when)?);
option_setter!(
    /// Sets [`EngineOptions::shuffle_mode`] to an `LMDBIO_SHUFFLE_*` value.
    lmdbio_options_set_shuffle_mode, mode: c_int, |o| o.shuffle_mode = shuffle_mode_from(mode)?);
option_setter!(
    /// Sets [`EngineOptions::overlap`]: nonzero reads the next round while
    /// the current one is served.
    lmdbio_options_set_overlap, overlap: c_int, |o| o.overlap = overlap != 0);
option_setter!(
    /// Sets [`EngineOptions::timeout`]: seconds a rank waits for the
    /// others before failing.
    lmdbio_options_set_timeout, seconds: f64, |o| o.timeout = Some(
    crate::engine::timeout::parse_seconds(&seconds.to_string())?));
option_setter!(
    /// Sets [`EngineOptions::epoch_limit`]; `UINT64_MAX` for none.
    lmdbio_options_set_epoch_limit, epochs: u64, |o| o.epoch_limit =
    (epochs != u64::MAX).then_some(epochs));

fn partition_from(mode: c_int) -> Result<Partition> {
    match mode {
        LMDBIO_PARTITION_CONTIGUOUS => Ok(Partition::Contiguous),
        LMDBIO_PARTITION_ROUND_ROBIN => Ok(Partition::RoundRobinBatches),
        LMDBIO_PARTITION_STRIDED => Ok(Partition::Strided),
        _ => Err(Error::InvalidArgument(format!(
            "unknown partition mode {mode}"
        ))),
    }
}

fn direct_io_from(when: c_int) -> Result<DirectIo> {
    match when {
        LMDBIO_DIRECT_IO_NEVER => Ok(DirectIo::Never),
        LMDBIO_DIRECT_IO_AUTO => Ok(DirectIo::Auto),
        LMDBIO_DIRECT_IO_ALWAYS => Ok(DirectIo::Always),
        _ => Err(Error::InvalidArgument(format!(
            "unknown direct I/O setting {when}"
        ))),
    }
}

fn shuffle_mode_from(mode: c_int) -> Result<Option<ShuffleMode>> {
    match mode {
        LMDBIO_SHUFFLE_DEFAULT => Ok(None),
        LMDBIO_SHUFFLE_CHUNKED => Ok(Some(ShuffleMode::Chunked)),
        LMDBIO_SHUFFLE_GLOBAL => Ok(Some(ShuffleMode::Global)),
        LMDBIO_SHUFFLE_GLOBAL_AFTER_FIRST => Ok(Some(ShuffleMode::GlobalAfterFirst)),
        _ => Err(Error::InvalidArgument(format!(
            "unknown shuffle mode {mode}"
        ))),
    }
}

fn tail_from(tail: c_int) -> Result<Tail> {
    match tail {
        LMDBIO_TAIL_WRAP => Ok(Tail::Wrap),
        LMDBIO_TAIL_SHORT => Ok(Tail::Short),
        _ => Err(Error::InvalidArgument(format!(
            "unknown tail policy {tail}"
        ))),
    }
}

/// Sets [`EngineOptions::subdb`]: a named database, or NULL for MAIN.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_options_set_subdb(
    options: *mut lmdbio_options,
    name: *const c_char,
) -> c_int {
    // SAFETY: the caller passes NULL or a live options handle, and
    // NULL or valid NUL-terminated strings / byte ranges as the header says.
    unsafe {
        with_options(options, |o| {
            o.subdb = if name.is_null() {
                None
            } else {
                Some(c_str(name, "name")?.to_owned())
            };
            Ok(())
        })
    }
}

/// Sets [`EngineOptions::stage`], [`EngineOptions::stage_budget`] and
/// [`EngineOptions::keep_stage`]: a node-local directory (NULL: no stage),
/// the bytes each node's stage may hold (`UINT64_MAX`: no limit), and
/// whether to keep the stage when the engine is closed.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_options_set_stage(
    options: *mut lmdbio_options,
    dir: *const c_char,
    budget: u64,
    keep: c_int,
) -> c_int {
    // SAFETY: the caller passes NULL or a live options handle, and NULL or
    // a valid NUL-terminated string, as the header says.
    unsafe {
        with_options(options, |o| {
            o.stage = if dir.is_null() {
                None
            } else {
                Some(std::path::PathBuf::from(c_str(dir, "stage directory")?))
            };
            o.stage_budget = budget;
            o.keep_stage = keep != 0;
            Ok(())
        })
    }
}

/// Sets [`EngineOptions::coalesce`]: run target and largest gap, in bytes.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_options_set_coalesce(
    options: *mut lmdbio_options,
    target_bytes: u64,
    max_gap_bytes: u64,
) -> c_int {
    // SAFETY: the caller passes NULL or a live options handle, and
    // NULL or valid NUL-terminated strings / byte ranges as the header says.
    unsafe {
        with_options(options, |o| {
            o.coalesce.target = positive(target_bytes as usize, "coalescing target")? as u64;
            o.coalesce.max_gap = max_gap_bytes;
            Ok(())
        })
    }
}

/// Adds an MPI-IO hint (key, value) passed to `MPI_File_open`.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_options_set_hint(
    options: *mut lmdbio_options,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    // SAFETY: the caller passes NULL or a live options handle, and
    // NULL or valid NUL-terminated strings / byte ranges as the header says.
    unsafe {
        with_options(options, |o| {
            let (k, v) = (c_str(key, "key")?, c_str(value, "value")?);
            o.hints.push((k.to_owned(), v.to_owned()));
            Ok(())
        })
    }
}

/// Shuffles every epoch with `seed`; `chunk_records` 0 picks the default
/// chunk (about 4 MiB of values).
#[no_mangle]
pub unsafe extern "C" fn lmdbio_options_set_shuffle(
    options: *mut lmdbio_options,
    seed: u64,
    chunk_records: u64,
) -> c_int {
    // SAFETY: the caller passes NULL or a live options handle, and
    // NULL or valid NUL-terminated strings / byte ranges as the header says.
    unsafe {
        with_options(options, |o| {
            o.shuffle_seed = Some(seed);
            o.shuffle_chunk = (chunk_records > 0).then_some(chunk_records);
            Ok(())
        })
    }
}

/// Resumes from a rank cursor of `lmdbio_cursor_get` (bytes copied).
#[no_mangle]
pub unsafe extern "C" fn lmdbio_options_set_resume(
    options: *mut lmdbio_options,
    cursor: *const c_void,
    len: usize,
) -> c_int {
    // SAFETY: the caller passes NULL or a live options handle, and
    // NULL or valid NUL-terminated strings / byte ranges as the header says.
    unsafe {
        with_options(options, |o| {
            if cursor.is_null() {
                return Err(null("cursor"));
            }
            // SAFETY: the caller passes len readable bytes.
            let bytes = std::slice::from_raw_parts(cursor.cast::<u8>(), len);
            o.resume = Some(Cursor::decode(bytes)?);
            o.resume_job = None;
            Ok(())
        })
    }
}

/// Resumes from a job cursor of `lmdbio_job_cursor_get`, on the same rank
/// count or, with `repartition` nonzero, on another.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_options_set_resume_job(
    options: *mut lmdbio_options,
    job_cursor: *const c_void,
    len: usize,
    repartition: c_int,
) -> c_int {
    // SAFETY: the caller passes NULL or a live options handle, and
    // NULL or valid NUL-terminated strings / byte ranges as the header says.
    unsafe {
        with_options(options, |o| {
            if job_cursor.is_null() {
                return Err(null("job_cursor"));
            }
            // SAFETY: the caller passes len readable bytes.
            let bytes = std::slice::from_raw_parts(job_cursor.cast::<u8>(), len);
            o.resume_job = Some(JobCursor::decode(bytes)?);
            o.repartition = repartition != 0;
            o.resume = None;
            Ok(())
        })
    }
}

/// Writes this rank's cursor (local).
#[no_mangle]
pub unsafe extern "C" fn lmdbio_cursor_get(
    engine: *const lmdbio_engine,
    buf: *mut c_void,
    len: usize,
    out_len: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded from the caller.
        let e = unsafe { engine.as_ref() }.ok_or_else(|| null("engine"))?;
        let bytes = e.engine.cursor()?.encode();
        // SAFETY: forwarded from the caller.
        unsafe {
            copy_out(
                &bytes,
                buf.cast(),
                len,
                out_len,
                "the cursor",
                "LMDBIO_CURSOR_BYTES",
            )
        }
    })
}

/// Copies `bytes` into the caller's `buf` of `len` bytes and stores their
/// length in `*out_len` (if not NULL); refuses a NULL or short buffer,
/// naming `what` and where its size comes from.
///
/// # Safety
/// `buf` is NULL or holds `len` writable bytes; `out_len` is NULL or
/// writable.
unsafe fn copy_out(
    bytes: &[u8],
    buf: *mut u8,
    len: usize,
    out_len: *mut usize,
    what: &str,
    size_from: &str,
) -> Result<()> {
    if buf.is_null() || len < bytes.len() {
        return Err(Error::InvalidArgument(format!(
            "{what} needs {} bytes ({size_from})",
            bytes.len()
        )));
    }
    // SAFETY: buf holds at least len >= bytes.len() writable bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len()) };
    // SAFETY: NULL or writable, per the contract.
    if let Some(out) = unsafe { out_len.as_mut() } {
        *out = bytes.len();
    }
    Ok(())
}

/// The size of the job cursor (local; the same on every rank).
#[no_mangle]
pub unsafe extern "C" fn lmdbio_job_cursor_size(
    engine: *const lmdbio_engine,
    out: *mut usize,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        report(engine, out, |e| {
            Ok(JobCursor::encoded_len(
                e.ranks(),
                e.schedule().remainder().runs.len(),
            ))
        })
    }
}

/// Writes the job cursor (collective: gathers every rank's cursor).
#[no_mangle]
pub unsafe extern "C" fn lmdbio_job_cursor_get(
    engine: *const lmdbio_engine,
    buf: *mut c_void,
    len: usize,
    out_len: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded from the caller.
        let e = unsafe { engine.as_ref() }.ok_or_else(|| null("engine"))?;
        // Gather first, check the buffer after: a rank with a short buffer
        // must not leave the others waiting in the allgather.
        let bytes = e.engine.job_cursor()?.encode();
        // SAFETY: forwarded from the caller.
        unsafe {
            copy_out(
                &bytes,
                buf.cast(),
                len,
                out_len,
                "the job cursor",
                "lmdbio_job_cursor_size",
            )
        }
    })
}

/// The caller's options, or the defaults for NULL.
///
/// # Safety
/// `options` is NULL or made by `lmdbio_options_new` and not yet freed.
unsafe fn options_or_default(options: *const lmdbio_options) -> EngineOptions {
    // SAFETY: per the contract.
    unsafe { options.as_ref() }.map_or_else(EngineOptions::default, |o| o.0.clone())
}

/// Collective over `comm`.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_prepare(comm: MPI_Comm, options: *const lmdbio_options) -> c_int {
    guard(|| {
        // SAFETY: forwarded from the caller.
        let options = unsafe { options_or_default(options) };
        crate::engine::prepare(comm, &options)
    })
}

/// Local.
#[no_mangle]
pub extern "C" fn lmdbio_release_memory() -> c_int {
    guard(|| {
        crate::engine::release_memory();
        Ok(())
    })
}

/// Collective over `comm`.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_open(
    comm: MPI_Comm,
    path: *const c_char,
    options: *const lmdbio_options,
    out: *mut *mut lmdbio_engine,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: NULL or a path string from the caller.
        let path = PathBuf::from(unsafe { c_str(path, "path") }?);
        // SAFETY: forwarded from the caller.
        let options = unsafe { options_or_default(options) };
        let engine = Engine::open(comm, &path, options)?;
        let handle = Box::into_raw(Box::new(lmdbio_engine {
            engine,
            records: Vec::new(),
            failed: false,
        }));
        // SAFETY: out checked non-NULL.
        unsafe { *out = handle };
        Ok(())
    })
}

/// Collective over the engine's communicator. After the job's last step
/// (the step limit) returns `LMDBIO_END` with an empty batch: the limit is
/// the same on every rank and the last step was agreed on by all of them
/// (`Engine::next_batch`), so every rank ends at the same step without
/// meeting again.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_next_batch(
    engine: *mut lmdbio_engine,
    out: *mut lmdbio_batch,
) -> c_int {
    crate::c_boundary::guard_status(|| {
        // SAFETY: forwarded from the caller.
        let handle = unsafe { mut_ref(engine, "engine") }?;
        if out.is_null() {
            return Err(null("out"));
        }
        let lmdbio_engine {
            engine,
            records,
            failed,
        } = handle;
        let step = engine.step();
        if !*failed && engine.step_limit().is_some_and(|limit| step >= limit) {
            records.clear();
            let end = lmdbio_batch {
                records: records.as_ptr(),
                count: 0,
                step,
                epoch: 0,
            };
            // SAFETY: out checked non-NULL.
            unsafe { *out = end };
            return Ok(LMDBIO_END);
        }
        let batch = engine.next_batch().inspect_err(|_| *failed = true)?;
        records.clear();
        for (i, r) in batch.records().iter().enumerate() {
            let (key, value) = (batch.key(i), batch.value(i));
            records.push(lmdbio_record {
                key: key.as_ptr().cast(),
                key_len: key.len(),
                value: value.as_ptr().cast(),
                value_len: value.len(),
                ordinal: r.ordinal,
                epoch: r.epoch,
            });
        }
        let result = lmdbio_batch {
            records: records.as_ptr(),
            count: records.len(),
            step: batch.step,
            epoch: batch.epoch(),
        };
        // SAFETY: out checked non-NULL.
        unsafe { *out = result };
        Ok(LMDBIO_OK)
    })
}

/// Runs `read` on the engine behind `engine` and stores its result in
/// `*out`, for the calls that only report.
unsafe fn report<T>(
    engine: *const lmdbio_engine,
    out: *mut T,
    read: impl FnOnce(&Engine) -> Result<T>,
) -> c_int {
    guard(|| {
        // SAFETY: the caller passes NULL or a handle from lmdbio_open, and
        // NULL or a writable out pointer.
        let e = unsafe { engine.as_ref() }.ok_or_else(|| null("engine"))?;
        // SAFETY: as above, for the out pointer.
        let out = unsafe { out.as_mut() }.ok_or_else(|| null("out"))?;
        *out = read(&e.engine)?;
        Ok(())
    })
}

/// Writes the database's record count to `*out`. Local.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_record_count(engine: *const lmdbio_engine, out: *mut u64) -> c_int {
    // SAFETY: the caller passes NULL or a handle from lmdbio_open, and
    // NULL or a writable out pointer.
    unsafe { report(engine, out, |e| Ok(e.records())) }
}

/// Writes the step at which the engine stops to `*out` (`UINT64_MAX`
/// when unbounded). Local.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_step_limit(engine: *const lmdbio_engine, out: *mut u64) -> c_int {
    // SAFETY: the caller passes NULL or a handle from lmdbio_open, and
    // NULL or a writable out pointer.
    unsafe { report(engine, out, |e| Ok(e.step_limit().unwrap_or(u64::MAX))) }
}

/// Writes the rank, rank count, node rank and node size; any out pointer
/// may be NULL. Local.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_rank_info(
    engine: *const lmdbio_engine,
    rank: *mut c_int,
    ranks: *mut c_int,
    node_rank: *mut c_int,
    node_size: *mut c_int,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded from the caller; each out pointer may be NULL.
        let e = &unsafe { engine.as_ref() }
            .ok_or_else(|| null("engine"))?
            .engine;
        for (p, v) in [
            (rank, e.rank()),
            (ranks, e.ranks()),
            (node_rank, e.node_rank()),
            (node_size, e.node_size()),
        ] {
            // SAFETY: the caller passes NULL or a writable int for each.
            if let Some(p) = unsafe { p.as_mut() } {
                *p = v as c_int;
            }
        }
        Ok(())
    })
}

/// This rank's counters (local).
#[no_mangle]
pub unsafe extern "C" fn lmdbio_counters_get(
    engine: *const lmdbio_engine,
    out: *mut lmdbio_counters,
) -> c_int {
    // SAFETY: the caller passes NULL or a handle from lmdbio_open, and
    // NULL or a writable out pointer.
    unsafe { report(engine, out, |e| Ok(e.counters().into())) }
}

/// This rank's counter `name` (a [`Counters`] field's name) as a double
/// (local).
#[no_mangle]
pub unsafe extern "C" fn lmdbio_counter_get(
    engine: *const lmdbio_engine,
    name: *const c_char,
    value: *mut f64,
) -> c_int {
    // SAFETY: the caller passes NULL or a handle from lmdbio_open, NULL or
    // a NUL-terminated name, and NULL or a writable out pointer.
    unsafe {
        report(engine, value, |e| {
            counter_by_name(&e.counters(), c_str(name, "name")?)
        })
    }
}

/// This rank's counters for `epoch` (local); an epoch not counted (yet)
/// is an invalid argument.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_epoch_counters_get(
    engine: *const lmdbio_engine,
    epoch: u64,
    out: *mut lmdbio_epoch_counters,
) -> c_int {
    // SAFETY: the caller passes NULL or a handle from lmdbio_open, and
    // NULL or a writable out pointer.
    unsafe {
        report(engine, out, |e| {
            let epochs = e.epoch_counters();
            match epochs.iter().find(|c| c.epoch == epoch) {
                Some(c) => Ok((*c).into()),
                None => Err(Error::InvalidArgument(
                    match (epochs.first(), epochs.last()) {
                        (Some(a), Some(b)) => format!(
                            "epoch {epoch} is not counted on this rank (epochs {} to {} are)",
                            a.epoch, b.epoch
                        ),
                        _ => format!("epoch {epoch} is not counted: no epoch is yet on this rank"),
                    },
                )),
            }
        })
    }
}

/// The node's summed counters (collective: see Engine::node_counters).
#[no_mangle]
pub unsafe extern "C" fn lmdbio_node_counters(
    engine: *const lmdbio_engine,
    out: *mut lmdbio_counters,
) -> c_int {
    // SAFETY: the caller passes NULL or a handle from lmdbio_open, and
    // NULL or a writable out pointer.
    unsafe { report(engine, out, |e| Ok(e.node_counters()?.into())) }
}

/// Collective; NULL is accepted and ignored.
#[no_mangle]
pub unsafe extern "C" fn lmdbio_close(engine: *mut lmdbio_engine) -> c_int {
    guard(|| {
        if !engine.is_null() {
            // SAFETY: made by lmdbio_open, closed once by the caller.
            drop(unsafe { Box::from_raw(engine) });
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_has_a_name_and_unknown_names_are_refused() {
        // Counters' Debug output names every field, in declaration order.
        let debug = format!("{:?}", Counters::default());
        let fields: Vec<&str> = debug
            .split(['{', ','])
            .skip(1)
            .filter_map(|f| f.split(':').next())
            .map(str::trim)
            .collect();
        let named: Vec<&str> = COUNTER_FIELDS.iter().map(|(n, _)| *n).collect();
        let mut sorted = fields.clone();
        sorted.sort_unstable();
        let mut named_sorted = named.clone();
        named_sorted.sort_unstable();
        assert_eq!(
            sorted, named_sorted,
            "COUNTER_FIELDS must name every Counters field once"
        );

        let c = Counters {
            stage_bytes_read: 7,
            index_seconds: 0.5,
            ..Default::default()
        };
        assert_eq!(counter_by_name(&c, "stage_bytes_read").unwrap(), 7.0);
        assert_eq!(counter_by_name(&c, "index_seconds").unwrap(), 0.5);
        let e = counter_by_name(&c, "bytes_reed").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("bytes_reed"), "{e}");
    }
}
