//! Records into a new LMDB through the system liblmdb (the library Caffe
//! links), in key order: with ascending keys every put is an append
//! (`MDB_APPEND`), so leaves fill completely and overflow runs follow
//! each other in key order, one transaction per `commit_every` records.
//!
//! Commits do not wait for the disk (`MDB_NOSYNC`): the database is only
//! a temporary until it is complete, so intermediate durability buys
//! nothing, and the kernel writes pages back while decoding goes on. One
//! `mdb_env_sync` at the end makes it durable before it is renamed.

use std::path::Path;

use lmdb::{Database, Environment, EnvironmentFlags, RwTransaction, Transaction, WriteFlags};

use super::ConvertError;

/// Address space reserved for the map (not disk space): the 1 TiB that
/// `convert_imageset` reserved before Caffe learned to grow its map.
const MAP_SIZE: usize = 1 << 40;

pub struct LmdbWriter<'env> {
    env: &'env Environment,
    db: Database,
    txn: Option<RwTransaction<'env>>,
    in_txn: usize,
    commit_every: usize,
    last_key: Vec<u8>,
    pub written: usize,
}

pub fn open_env(dir: &Path) -> Result<Environment, ConvertError> {
    Environment::new()
        .set_map_size(MAP_SIZE)
        .set_flags(EnvironmentFlags::NO_SYNC)
        .open(dir)
        .map_err(|e| ConvertError::Output(format!("{}: opening LMDB: {e}", dir.display())))
}

/// Everything committed so far, on disk.
pub fn sync(env: &Environment) -> Result<(), ConvertError> {
    env.sync(true)
        .map_err(|e| ConvertError::Output(format!("syncing LMDB: {e}")))
}

impl<'env> LmdbWriter<'env> {
    pub fn new(env: &'env Environment, commit_every: usize) -> Result<Self, ConvertError> {
        let db = env.open_db(None).map_err(lmdb_error)?;
        Ok(LmdbWriter {
            env,
            db,
            txn: None,
            in_txn: 0,
            commit_every: commit_every.max(1),
            last_key: Vec::new(),
            written: 0,
        })
    }

    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), ConvertError> {
        if self.txn.is_none() {
            self.txn = Some(self.env.begin_rw_txn().map_err(lmdb_error)?);
        }
        let txn = self.txn.as_mut().expect("transaction just begun");
        // Keys past 99,999,999 lines get a ninth digit and stop sorting
        // after their predecessors; those go in with an ordinary put.
        let flags = if self.written == 0 || key > self.last_key.as_slice() {
            WriteFlags::APPEND
        } else {
            WriteFlags::empty()
        };
        txn.put(self.db, &key, &value, flags).map_err(lmdb_error)?;
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.written += 1;
        self.in_txn += 1;
        if self.in_txn >= self.commit_every {
            self.commit()?;
        }
        Ok(())
    }

    pub fn commit(&mut self) -> Result<(), ConvertError> {
        if let Some(txn) = self.txn.take() {
            txn.commit().map_err(lmdb_error)?;
        }
        self.in_txn = 0;
        Ok(())
    }
}

fn lmdb_error(e: lmdb::Error) -> ConvertError {
    ConvertError::Output(format!("writing LMDB: {e}"))
}

/// Below this many free bytes a failed write is taken as a full disk.
const NEARLY_FULL: u64 = 1 << 20;

/// Names a full file system as such: liblmdb reports a short write as
/// `EIO` ("Input/output error"), which is what a full disk gives it.
pub fn explain_full(dir: &Path, e: ConvertError) -> ConvertError {
    match (e, free_bytes(dir)) {
        (ConvertError::Output(text), Some(free)) if free < NEARLY_FULL => {
            ConvertError::Output(format!(
                "{text}: no space left on device ({free} bytes free under {})",
                dir.display()
            ))
        }
        (e, _) => e,
    }
}

fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is NUL-terminated and `st` is writable memory of the
    // size statvfs fills; it is read only after a successful call.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}
