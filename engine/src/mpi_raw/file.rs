//! MPI-IO: the data file opened by the readers together, for collective
//! reads (and the index read through the same handle).

use std::ffi::{c_int, c_void, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mpi::ffi;

use std::sync::atomic::Ordering;

use super::{check, Comm, ReduceOp};
use lmdbio_core::error::{Error, Result};
use lmdbio_core::plan::ReadRun;
use lmdbio_core::source::{IoCounters, IoSnapshot, ReadAt};

/// Largest block one datatype entry or count may describe (an `int`).
const MAX_BLOCK: u64 = 1 << 30;

/// Collective reads of at most this many stretches per reader are issued
/// one call per stretch without a file view (see `read_collectively`).
const MAX_STRETCHES: i64 = 8;

/// Runs merged where each starts at the previous one's end: `(file offset,
/// buffer offset, length)` of each contiguous stretch.
fn stretches(runs: &[ReadRun]) -> Vec<(u64, usize, usize)> {
    let mut out: Vec<(u64, usize, usize)> = Vec::new();
    let mut at = 0usize;
    for r in runs {
        match out.last_mut() {
            Some(last) if last.0 + last.2 as u64 == r.file_offset => last.2 += r.len as usize,
            _ => out.push((r.file_offset, at, r.len as usize)),
        }
        at += r.len as usize;
    }
    out
}

/// An open MPI file, closed on drop.
pub struct MpiFile {
    raw: ffi::MPI_File,
    path: PathBuf,
    len: u64,
    /// The readers, for agreeing on the shape of each collective read.
    readers: Comm,
    /// A view of runs is set (the last collective read needed one); the
    /// same on every reader, as the choice is agreed.
    run_view: std::sync::atomic::AtomicBool,
}

// SAFETY: an MPI_File handle is an opaque token valid in every thread of
// the process; MPI itself decides which threads may call it, and the engine
// only calls it from the thread that drives the engine (see MpiFileSource).
unsafe impl Send for MpiFile {}
// SAFETY: as for Send: the handle is a token, and the calls on it are
// made from one thread at a time.
unsafe impl Sync for MpiFile {}

impl MpiFile {
    /// `MPI_File_open` read-only, collective over `readers` (which the file
    /// keeps for agreeing on collective reads), with ROMIO hints.
    pub fn open(readers: Comm, path: &Path, hints: &[(String, String)]) -> Result<MpiFile> {
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            Error::InvalidArgument(format!("{}: path contains a NUL byte", path.display()))
        })?;
        let info = Info::new(hints)?;
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut raw = unsafe { ffi::RSMPI_FILE_NULL };
        // SAFETY: valid communicator, NUL-terminated path, info handle and
        // out pointer.
        let rc = unsafe {
            ffi::MPI_File_open(
                readers.raw(),
                c_path.as_ptr(),
                ffi::MPI_MODE_RDONLY as c_int,
                info.raw,
                &mut raw,
            )
        };
        if rc != 0 {
            return Err(Error::NotFound {
                path: path.to_owned(),
                reason: format!("MPI_File_open failed: {}", super::error_string(rc)),
            });
        }
        let mut file = MpiFile {
            raw,
            path: path.to_owned(),
            len: 0,
            readers,
            run_view: std::sync::atomic::AtomicBool::new(false),
        };
        check(
            // SAFETY: raw is the file just opened; errors on it must return.
            unsafe { ffi::MPI_File_set_errhandler(raw, ffi::RSMPI_ERRORS_RETURN) },
            "MPI_File_set_errhandler",
        )?;
        let mut size: ffi::MPI_Offset = 0;
        check(
            // SAFETY: valid file and out pointer.
            unsafe { ffi::MPI_File_get_size(raw, &mut size) },
            "MPI_File_get_size",
        )?;
        file.len = size as u64;
        Ok(file)
    }

    /// The file's size in bytes when opened (`MPI_File_get_size`).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// The file has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The path the file was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn truncated(&self, offset: u64, len: u64) -> Error {
        Error::Truncated {
            path: self.path.clone(),
            what: format!("a read of {len} bytes at offset {offset}"),
            needed_end: offset.saturating_add(len),
            file_len: self.len,
        }
    }

    /// Independent read of `buf.len()` bytes at `offset`.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if offset.saturating_add(buf.len() as u64) > self.len {
            return Err(self.truncated(offset, buf.len() as u64));
        }
        for (i, chunk) in buf.chunks_mut(MAX_BLOCK as usize).enumerate() {
            let at = offset + i as u64 * MAX_BLOCK;
            let mut status = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
            check(
                // SAFETY: chunk is a valid writable buffer of chunk.len() (< 2^31)
                // bytes; status is a valid out location.
                unsafe {
                    ffi::MPI_File_read_at(
                        self.raw,
                        at as ffi::MPI_Offset,
                        chunk.as_mut_ptr() as *mut c_void,
                        chunk.len() as c_int,
                        ffi::RSMPI_UINT8_T,
                        status.as_mut_ptr(),
                    )
                },
                "MPI_File_read_at",
            )?;
            self.check_count(&status, chunk.len(), at)?;
        }
        Ok(())
    }

    fn check_count(
        &self,
        status: &std::mem::MaybeUninit<ffi::MPI_Status>,
        expected: usize,
        at: u64,
    ) -> Result<()> {
        check_count(status, expected).map_err(|_| self.truncated(at, expected as u64))
    }
}

impl MpiFile {
    /// Reads `runs` (sorted, non-overlapping) into `buf`, packed back to
    /// back, with `MPI_File_read_at_all` (collective: every rank of the
    /// file's communicator calls this the same number of times, an empty
    /// `runs` included). Returns the number of file requests made.
    ///
    /// Blocking: ROMIO does not progress a non-blocking collective read in the
    /// background (it cost what a blocking one costs; the engine overlaps reads
    /// on a helper thread instead, see docs/design/independent-reads.md), and
    /// Open MPI 4.1's ROMIO component jumps to a null function pointer in
    /// `MPI_File_iread_at_all` (seen with `--mca io romio321`).
    ///
    /// # Safety
    /// `buf` must be valid for `len` bytes and neither read nor written by
    /// anyone else until this returns.
    pub unsafe fn read_runs_collectively(
        &self,
        runs: &[ReadRun],
        buf: *mut u8,
        len: usize,
    ) -> Result<u64> {
        let total: u64 = runs.iter().map(|r| r.len).sum();
        if total != len as u64 {
            return Err(Error::InvalidArgument(
                "read buffer does not match its runs".into(),
            ));
        }
        let mut reads = CompletedReads {
            path: self.path.clone(),
            file_len: self.len,
            outcomes: Vec::new(),
            file_requests: runs.len() as u64,
        };
        // A run past the end is reported after taking part in the
        // collective calls, reading nothing.
        let past_end = runs
            .iter()
            .find(|r| r.file_offset + r.len > self.len)
            .map(|r| self.truncated(r.file_offset, r.len));
        // (No runs means len is 0 too: checked against their total above.)
        let (runs, len) = match past_end {
            Some(_) => (&[][..], 0),
            None => (runs, len),
        };
        // SAFETY: forwarded from the caller.
        unsafe { self.read_collectively(runs, buf, len, &mut reads) }?;
        match past_end {
            Some(e) => Err(e),
            None => reads.result(),
        }
    }

    /// The calls of [`MpiFile::read_runs_collectively`]: reads `runs`
    /// (packed into `len` bytes at `buf`) before returning, recording each
    /// completed call in `reads`.
    ///
    /// # Safety
    /// As for `read_runs_collectively`.
    unsafe fn read_collectively(
        &self,
        runs: &[ReadRun],
        buf: *mut u8,
        len: usize,
        reads: &mut CompletedReads,
    ) -> Result<()> {
        if len as u64 > i32::MAX as u64 {
            return Err(Error::ResourceLimit(format!(
                "one collective read of {len} bytes exceeds an int count; lower the window size"
            )));
        }
        // Adjacent runs (the plan makes runs split at the target adjacent)
        // form stretches, each one contiguous request. With few stretches
        // every reader reads its own at explicit offsets through the plain
        // byte view; setting a view of runs instead is a blocking
        // collective with a reduction and a barrier in ROMIO, which took a
        // third of the readers' time at 8 readers on 2 cores (MPICH spins
        // while it waits). The number of calls, and so whether a view is
        // needed, is agreed among the readers.
        let stretches = stretches(runs);
        let mut most = [stretches.len() as i64];
        self.readers.allreduce_i64(&mut most, ReduceOp::Max)?;
        if most[0] <= MAX_STRETCHES {
            if self.run_view.swap(false, Ordering::SeqCst) {
                self.set_view(&[])?;
            }
            for i in 0..most[0] as usize {
                let (at, buf_at, n) = stretches.get(i).copied().unwrap_or((0, 0, 0));
                // SAFETY: a stretch lies inside buf (runs sum to len).
                let status = unsafe { self.read_at_all(at, buf.add(buf_at), n) }?;
                reads.completed(n, at, &status);
            }
            reads.file_requests = stretches.len() as u64;
            return Ok(());
        }
        self.run_view.store(true, Ordering::SeqCst);
        self.set_view(runs)?;
        // SAFETY: the caller keeps buf valid and untouched until we return;
        // the view maps exactly len file bytes.
        let status = unsafe { self.read_at_all(0, buf, len) }?;
        reads.completed(len, runs.first().map_or(0, |r| r.file_offset), &status);
        Ok(())
    }

    /// `MPI_File_read_at_all` of `len` bytes at `offset` (in the current
    /// view) into `buf`.
    ///
    /// # Safety
    /// `buf` must be valid for `len` bytes and untouched by anyone else
    /// until this returns.
    unsafe fn read_at_all(
        &self,
        offset: u64,
        buf: *mut u8,
        len: usize,
    ) -> Result<std::mem::MaybeUninit<ffi::MPI_Status>> {
        let mut status = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
        check(
            // SAFETY: forwarded from the caller; len fits an int (checked by
            // read_collectively).
            unsafe {
                ffi::MPI_File_read_at_all(
                    self.raw,
                    offset as ffi::MPI_Offset,
                    buf as *mut c_void,
                    len as c_int,
                    ffi::RSMPI_UINT8_T,
                    status.as_mut_ptr(),
                )
            },
            "MPI_File_read_at_all",
        )?;
        Ok(status)
    }

    /// Sets a file view made of `runs` (or plain bytes when empty).
    fn set_view(&self, runs: &[ReadRun]) -> Result<()> {
        let mut lens: Vec<c_int> = Vec::new();
        let mut displs: Vec<ffi::MPI_Aint> = Vec::new();
        for r in runs {
            let mut off = 0;
            while off < r.len {
                let n = (r.len - off).min(MAX_BLOCK);
                lens.push(n as c_int);
                displs.push((r.file_offset + off) as ffi::MPI_Aint);
                off += n;
            }
        }
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let byte = unsafe { ffi::RSMPI_UINT8_T };
        let filetype = if lens.is_empty() {
            None
        } else {
            Some(Datatype::hindexed(&lens, &displs)?)
        };
        // SAFETY: valid file; etype/filetype are committed datatypes (or the
        // byte type); the datarep string is NUL-terminated. MPI keeps its
        // own reference to the filetype, so ours may be freed after.
        check(
            unsafe {
                ffi::MPI_File_set_view(
                    self.raw,
                    0,
                    byte,
                    filetype.as_ref().map_or(byte, |t| t.raw),
                    c"native".as_ptr(),
                    ffi::RSMPI_INFO_NULL,
                )
            },
            "MPI_File_set_view",
        )
    }
}

/// The outcomes of one [`MpiFile::read_runs_collectively`]'s calls.
struct CompletedReads {
    path: PathBuf,
    file_len: u64,
    outcomes: Vec<Result<()>>,
    /// File requests made: the runs, or without a view of runs, the
    /// stretches of adjacent runs.
    file_requests: u64,
}

impl CompletedReads {
    /// Records a read of `bytes` at `at` that completed with `status`.
    fn completed(
        &mut self,
        bytes: usize,
        at: u64,
        status: &std::mem::MaybeUninit<ffi::MPI_Status>,
    ) {
        if bytes == 0 {
            // A reader with nothing to read in a collective call cannot
            // come up short; Open MPI's ROMIO reports a count of 1 for it.
            return;
        }
        let outcome = check_count(status, bytes).map_err(|got| Error::Truncated {
            path: self.path.clone(),
            what: format!("a read of {bytes} bytes at offset {at} (got {got})"),
            needed_end: at + bytes as u64,
            file_len: self.file_len,
        });
        self.outcomes.push(outcome);
    }

    /// The first failure, or the number of file requests.
    fn result(self) -> Result<u64> {
        let requests = self.file_requests;
        self.outcomes.into_iter().collect::<Result<Vec<()>>>()?;
        Ok(requests)
    }
}

impl Drop for MpiFile {
    fn drop(&mut self) {
        if super::is_initialized() {
            // SAFETY: we own the handle and close it once. MPI_File_close is
            // collective; the engine drops files on all readers together.
            unsafe { ffi::MPI_File_close(&mut self.raw) };
        }
    }
}

/// Checks a completed read delivered `expected` bytes; `Err(got)` if not
/// (an MPI failure to report the count counts as 0).
fn check_count(
    status: &std::mem::MaybeUninit<ffi::MPI_Status>,
    expected: usize,
) -> Result<(), i64> {
    let mut got: c_int = 0;
    // SAFETY: the status was filled by the completed read.
    let rc = unsafe { ffi::MPI_Get_count(status.as_ptr(), ffi::RSMPI_UINT8_T, &mut got) };
    if rc != 0 || got as usize != expected {
        return Err(got as i64);
    }
    Ok(())
}

/// An `MPI_Info` built from key/value hints, freed on drop.
struct Info {
    raw: ffi::MPI_Info,
}

impl Info {
    fn new(hints: &[(String, String)]) -> Result<Info> {
        if hints.is_empty() {
            return Ok(Info {
                // SAFETY: reads a handle constant of the MPI shim (plain data).
                raw: unsafe { ffi::RSMPI_INFO_NULL },
            });
        }
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut raw = unsafe { ffi::RSMPI_INFO_NULL };
        // SAFETY: out pointer is valid.
        check(unsafe { ffi::MPI_Info_create(&mut raw) }, "MPI_Info_create")?;
        let info = Info { raw };
        for (k, v) in hints {
            let (k, v) = (
                CString::new(k.as_str())
                    .map_err(|_| Error::InvalidArgument("hint key has a NUL".into()))?,
                CString::new(v.as_str())
                    .map_err(|_| Error::InvalidArgument("hint value has a NUL".into()))?,
            );
            check(
                // SAFETY: valid info handle and NUL-terminated strings.
                unsafe { ffi::MPI_Info_set(info.raw, k.as_ptr(), v.as_ptr()) },
                "MPI_Info_set",
            )?;
        }
        Ok(info)
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        if self.raw != unsafe { ffi::RSMPI_INFO_NULL } {
            // SAFETY: we created this info object and free it once.
            unsafe { ffi::MPI_Info_free(&mut self.raw) };
        }
    }
}

/// A committed derived datatype, freed on drop.
struct Datatype {
    raw: ffi::MPI_Datatype,
}

impl Datatype {
    fn hindexed(lens: &[c_int], displs: &[ffi::MPI_Aint]) -> Result<Datatype> {
        // SAFETY: reads a handle constant of the MPI shim (plain data).
        let mut raw = unsafe { ffi::RSMPI_DATATYPE_NULL };
        check(
            // SAFETY: lens and displs have the same length; out pointer valid.
            unsafe {
                ffi::MPI_Type_create_hindexed(
                    lens.len() as c_int,
                    lens.as_ptr(),
                    displs.as_ptr(),
                    ffi::RSMPI_UINT8_T,
                    &mut raw,
                )
            },
            "MPI_Type_create_hindexed",
        )?;
        let mut t = Datatype { raw };
        check(
            // SAFETY: commit the type we just created.
            unsafe { ffi::MPI_Type_commit(&mut t.raw) },
            "MPI_Type_commit",
        )?;
        Ok(t)
    }
}

impl Drop for Datatype {
    fn drop(&mut self) {
        // SAFETY: we own the type and free it once.
        unsafe { ffi::MPI_Type_free(&mut self.raw) };
    }
}

/// [`ReadAt`] over an [`MpiFile`] with independent reads, so the index
/// builder runs unchanged on MPI-IO. Calls are serialised by a lock; the
/// engine builds indexes with one thread per process.
pub struct MpiFileSource<'f> {
    file: &'f MpiFile,
    lock: Mutex<()>,
    counters: IoCounters,
}

impl<'f> MpiFileSource<'f> {
    /// A source reading `file`, counting from zero.
    pub fn new(file: &'f MpiFile) -> MpiFileSource<'f> {
        MpiFileSource {
            file,
            lock: Mutex::new(()),
            counters: IoCounters::default(),
        }
    }
}

impl ReadAt for MpiFileSource<'_> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.counters.record(buf.len());
        self.file.read_at(buf, offset)
    }

    fn len(&self) -> u64 {
        self.file.len()
    }

    fn path(&self) -> &Path {
        self.file.path()
    }

    fn counters(&self) -> IoSnapshot {
        self.counters.snapshot()
    }
}
