//! Records into a new LMDB through the system liblmdb (the library Caffe
//! links), in key order: with ascending keys every put is an append
//! (`MDB_APPEND`), so leaves fill completely and overflow runs follow
//! each other in key order, one transaction per `commit_every` records.

use std::path::Path;

use lmdb::{Database, Environment, RwTransaction, Transaction, WriteFlags};

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
        .open(dir)
        .map_err(|e| ConvertError::Output(format!("{}: opening LMDB: {e}", dir.display())))
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
