//! `_lmdbio._LocalEngine`: the reader without MPI, for processes launched
//! by `torchrun` (each an MPI world of one, with its rank and the job's
//! size in `RANK` / `WORLD_SIZE`). Each process opens the file, builds the
//! index and reads its own share of the schedule a `WORLD_SIZE`-rank MPI
//! job would have, with the same partitions, order, cursors and job
//! cursors, so every record is read once per epoch by the job and a
//! checkpoint resumes under either launcher. What it gives up is the
//! engine's node: every process reads the tree and its values itself (no
//! one reader per node, no shared window), and a failure on one process
//! is not carried to the others.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use lmdbio::cursor::{Cursor, DatabaseIdentity, JobCursor};
use lmdbio::order::EpochOrder;
use lmdbio::resume::JobSchedule;
use lmdbio::values::{read_values, ValueBatch};
use lmdbio::{CoalesceOptions, Database, Error, FileSource, IndexOptions, RecordIndex, Result};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::batch::{Batch, Generation};
use crate::driver::{guarded, reader_closed, BatchData, RecordRef};
use crate::errors::to_py;
use crate::options::PyOptions;

/// A batch's bytes, kept alive by every buffer handed out from it.
pub struct Store {
    pub values: ValueBatch,
    pub keys: Vec<u8>,
}

struct Open {
    db: Database<FileSource>,
    index: RecordIndex,
    schedule: JobSchedule,
    order: EpochOrder,
    database: DatabaseIdentity,
    coalesce: CoalesceOptions,
    step_limit: Option<u64>,
    epoch_limit: Option<u64>,
    last_epoch: u64,
    cut: bool,
    records_delivered: u64,
    bytes_delivered: u64,
    read_requests: u64,
}

#[pyclass(module = "lmdbio._lmdbio")]
pub struct LocalEngine {
    /// A lock only to make the class shareable; Python calls it from one
    /// thread at a time.
    open: Mutex<Option<Open>>,
    rank: usize,
    ranks: usize,
    step: u64,
    generation: Generation,
}

fn open(path: PathBuf, rank: usize, ranks: usize, o: &PyOptions) -> Result<(Open, u64)> {
    let options = o.engine_options()?;
    if rank >= ranks {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} is not below the world size {ranks}"
        )));
    }
    let db = Database::open(&path)?;
    let tree = db.tree(options.subdb.as_deref())?;
    let index = db.build_index(&tree, &IndexOptions::default())?;
    let records = index.len() as u64;
    let database = DatabaseIdentity {
        entries: records,
        txnid: db.meta().mm_txnid,
        page_size: db.page_size(),
        digest: db.identity_digest(&tree),
    };
    let (schedule, order, step) = lmdbio::engine::job_start(
        &options,
        ranks as u64,
        rank,
        records,
        index.value_bytes(),
        database,
    )?;
    let step_limit = options
        .epoch_limit
        .map(|epochs| schedule.steps_for_epochs(epochs));
    Ok((
        Open {
            db,
            index,
            schedule,
            order,
            database,
            coalesce: options.coalesce,
            step_limit,
            epoch_limit: options.epoch_limit,
            last_epoch: 0,
            cut: false,
            records_delivered: 0,
            bytes_delivered: 0,
            read_requests: 0,
        },
        step,
    ))
}

impl LocalEngine {
    fn lock(&self) -> MutexGuard<'_, Option<Open>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read_step(o: &mut Open, rank: usize, step: u64) -> Result<(BatchData, Arc<Store>)> {
        let mut slots = o.schedule.batch_slots(rank as u64, step);
        if let Some(limit) = o.epoch_limit {
            let before = slots.len();
            slots.retain(|s| s.epoch < limit);
            o.cut |= slots.len() < before;
        }
        let ordinals: Vec<usize> = slots
            .iter()
            .map(|s| o.order.ordinal(s.epoch, s.position) as usize)
            .collect();
        let values = read_values(&o.db, &o.index, &ordinals, o.coalesce)?;
        let mut keys = Vec::new();
        let mut key_at = Vec::with_capacity(ordinals.len());
        for &i in &ordinals {
            let k = o.index.key(i);
            key_at.push((keys.len(), k.len()));
            keys.extend_from_slice(k);
        }
        o.read_requests += values.read_requests as u64;
        let store = Arc::new(Store { values, keys });
        let records: Vec<RecordRef> = slots
            .iter()
            .zip(&ordinals)
            .enumerate()
            .map(|(n, (s, &ordinal))| {
                let v = store.values.value(n);
                let (at, len) = key_at[n];
                RecordRef {
                    key: (store.keys[at..].as_ptr(), len),
                    value: (v.as_ptr(), v.len()),
                    ordinal: ordinal as u64,
                    epoch: s.epoch,
                }
            })
            .collect();
        o.records_delivered += records.len() as u64;
        o.bytes_delivered += records.iter().map(|r| r.value.1 as u64).sum::<u64>();
        let epoch = slots.first().map_or(o.last_epoch, |s| s.epoch);
        o.last_epoch = epoch;
        Ok((
            BatchData {
                records,
                step,
                epoch,
                // Read on the caller's thread: no hand-over to count.
                engine_seconds: 0.0,
            },
            store,
        ))
    }

    fn cursor_of(&self, o: &Open) -> Result<Cursor> {
        if o.cut {
            return Err(Error::InvalidArgument(format!(
                "no cursor after step {}: the epoch limit cut a batch short (use the short tail for jobs that stop at an epoch's end and resume)",
                self.step
            )));
        }
        let next = o.schedule.batch_slots(self.rank as u64, self.step);
        let (epoch, position) = next
            .first()
            .map_or((o.last_epoch, 0), |s| (s.epoch, s.position));
        let base = o.schedule.base();
        Ok(Cursor {
            rank: self.rank as u32,
            ranks: self.ranks as u32,
            partition: base.partition,
            tail: base.tail,
            batch: base.batch,
            shuffle: o.order.shuffle(),
            step: self.step,
            epoch,
            position,
            database: o.database,
            after_repartition: !o.schedule.remainder().is_none(),
        })
    }
}

#[pymethods]
impl LocalEngine {
    /// `options`: see `PyOptions` (those of the node are not used).
    #[new]
    #[pyo3(signature = (path, batch_size, rank, ranks, **options))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        batch_size: usize,
        rank: usize,
        ranks: usize,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<LocalEngine> {
        let options = PyOptions::from_keywords(batch_size, options)?;
        let (open, step) = py
            .allow_threads(|| guarded(|| open(path, rank, ranks, &options)))
            .map_err(to_py)?;
        Ok(LocalEngine {
            open: Mutex::new(Some(open)),
            rank,
            ranks,
            step,
            generation: Generation::default(),
        })
    }

    fn next(&mut self, py: Python<'_>) -> PyResult<Option<Batch>> {
        let (rank, step) = (self.rank, self.step);
        let mut guard = self.lock();
        let o = guard.as_mut().ok_or_else(reader_closed)?;
        if o.step_limit.is_some_and(|l| step >= l) {
            return Ok(None);
        }
        let (data, store) = py
            .allow_threads(|| guarded(|| LocalEngine::read_step(o, rank, step)))
            .map_err(to_py)?;
        drop(guard);
        self.step += 1;
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(Some(Batch::with_owner(data, &self.generation, store)))
    }

    /// This rank's cursor.
    fn cursor<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let guard = self.lock();
        let o = guard.as_ref().ok_or_else(reader_closed)?;
        let c = self.cursor_of(o).map_err(to_py)?;
        Ok(PyBytes::new(py, &c.encode()))
    }

    /// The job cursor made of every rank's cursor (in rank order).
    fn job_cursor_from<'py>(
        &mut self,
        py: Python<'py>,
        cursors: Vec<Vec<u8>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let remainder = match self.lock().as_ref() {
            Some(o) => o.schedule.remainder().clone(),
            None => return Err(reader_closed()),
        };
        let cursors = cursors
            .iter()
            .map(|b| Cursor::decode(b))
            .collect::<Result<Vec<_>>>()
            .map_err(to_py)?;
        let job = JobCursor::new(remainder, cursors).map_err(to_py)?;
        Ok(PyBytes::new(py, &job.encode()))
    }

    fn steps_for_epochs(&mut self, epochs: u64) -> PyResult<u64> {
        let guard = self.lock();
        let o = guard.as_ref().ok_or_else(reader_closed)?;
        Ok(o.schedule.steps_for_epochs(epochs))
    }

    #[pyo3(signature = (node=false))]
    fn counters(&mut self, node: bool) -> PyResult<HashMap<&'static str, f64>> {
        let _ = node;
        let guard = self.lock();
        let o = guard.as_ref().ok_or_else(reader_closed)?;
        Ok(HashMap::from([
            ("records_delivered", o.records_delivered as f64),
            ("bytes_delivered", o.bytes_delivered as f64),
            ("read_requests", o.read_requests as f64),
        ]))
    }

    fn close(&mut self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        *self.lock() = None;
    }

    #[getter]
    fn closed(&self) -> bool {
        self.lock().is_none()
    }
    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }
    #[getter]
    fn ranks(&self) -> usize {
        self.ranks
    }
    #[getter]
    fn node_rank(&self) -> usize {
        0
    }
    #[getter]
    fn node_size(&self) -> usize {
        1
    }
    #[getter]
    fn records(&self) -> u64 {
        self.lock().as_ref().map_or(0, |o| o.index.len() as u64)
    }
    #[getter]
    fn step(&self) -> u64 {
        self.step
    }
    #[getter]
    fn step_limit(&self) -> Option<u64> {
        self.lock().as_ref().and_then(|o| o.step_limit)
    }
}
