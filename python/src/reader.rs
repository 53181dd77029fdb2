//! `_lmdbio._Engine`: the engine behind `lmdbio.Reader`, on its thread (see
//! `worker`) or the caller's (`inline`), handing out batches.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

use lmdbio::engine::Counters;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::batch::{Batch, Generation};
use crate::driver::{Drive, OpenInfo};
use crate::errors::to_py;
use crate::inline::Inline;
use crate::mpi::{self, CommHandle};
use crate::options::PyOptions;
use crate::worker::Worker;

#[pyclass(module = "lmdbio._lmdbio")]
pub struct Engine {
    /// Who drives the engine: a thread of its own (`Worker`, the default:
    /// Ctrl-C interrupts a wait for another rank) or the caller's thread
    /// (`Inline`: no hand-over per batch).
    worker: Box<dyn Drive>,
    info: OpenInfo,
    generation: Generation,
    step: u64,
    /// Time `next` took beyond the engine's own: the binding's cost (the
    /// `binding_seconds` counter).
    binding_seconds: f64,
}

#[pymethods]
impl Engine {
    /// Opens the engine; collective over the communicator (`comm`: an MPI
    /// handle as an int, or None for MPI_COMM_WORLD). MPI must be
    /// initialised (see `init_mpi`). `options`: see `PyOptions`.
    #[new]
    #[pyo3(signature = (path, batch_size, comm=None, *, interruptible=true, **options))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        batch_size: usize,
        comm: Option<i128>,
        interruptible: bool,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Engine> {
        let options = PyOptions::from_keywords(batch_size, options)?;
        // Bad options fail on every rank alike, before any collective call.
        let options = options.engine_options().map_err(to_py)?;
        let comm: CommHandle = mpi::comm_from(comm);
        let (worker, info): (Box<dyn Drive>, _) = if interruptible {
            let (w, info) = Worker::open(py, comm, path, options)?;
            (Box::new(w), info)
        } else {
            let (w, info) = Inline::open(py, comm, path, options)?;
            (Box::new(w), info)
        };
        Ok(Engine {
            worker,
            step: info.step,
            info,
            generation: Generation::default(),
            binding_seconds: 0.0,
        })
    }

    /// The next batch, or None past the step limit (the last epoch asked
    /// for). Collective: every rank calls it once per step. Batches handed
    /// out before become invalid.
    fn next(&mut self, py: Python<'_>) -> PyResult<Option<Batch>> {
        if self.info.step_limit.is_some_and(|l| self.step >= l) {
            return Ok(None);
        }
        let started = Instant::now();
        self.generation.fetch_add(1, Ordering::AcqRel);
        let data = self.worker.next(py)?;
        self.step = data.step + 1;
        let engine_seconds = data.engine_seconds;
        let batch = Batch::new(data, &self.generation);
        self.binding_seconds += (started.elapsed().as_secs_f64() - engine_seconds).max(0.0);
        Ok(Some(batch))
    }

    /// This rank's cursor (local).
    fn cursor<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.worker.cursor(py, false)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The job cursor (collective: gathers every rank's cursor).
    fn job_cursor<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.worker.cursor(py, true)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// This rank's counters, or (collective) the node's sums.
    #[pyo3(signature = (node=false))]
    fn counters(&mut self, py: Python<'_>, node: bool) -> PyResult<HashMap<&'static str, f64>> {
        let mut c = counters_dict(self.worker.counters(py, node)?);
        if !node {
            c.insert("binding_seconds", self.binding_seconds);
        }
        Ok(c)
    }

    /// The first step after the job's first `epochs` epochs.
    fn steps_for_epochs(&mut self, py: Python<'_>, epochs: u64) -> PyResult<u64> {
        self.worker.steps_for_epochs(py, epochs)
    }

    /// Closes the engine: collective.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.worker.close(py)
    }

    #[getter]
    fn closed(&self) -> bool {
        !self.worker.is_open()
    }
    #[getter]
    fn rank(&self) -> usize {
        self.info.rank
    }
    #[getter]
    fn ranks(&self) -> usize {
        self.info.ranks
    }
    #[getter]
    fn node_rank(&self) -> usize {
        self.info.node_rank
    }
    #[getter]
    fn node_size(&self) -> usize {
        self.info.node_size
    }
    #[getter]
    fn records(&self) -> u64 {
        self.info.records
    }
    #[getter]
    fn step(&self) -> u64 {
        self.step
    }
    #[getter]
    fn step_limit(&self) -> Option<u64> {
        self.info.step_limit
    }
}

pub fn counters_dict(c: Counters) -> HashMap<&'static str, f64> {
    HashMap::from([
        ("bytes_read", c.bytes_read as f64),
        ("read_requests", c.read_requests as f64),
        ("file_opens", c.file_opens as f64),
        ("index_bytes_read", c.index_bytes_read as f64),
        ("bytes_delivered", c.bytes_delivered as f64),
        ("records_delivered", c.records_delivered as f64),
        ("rounds", c.rounds as f64),
        ("io_seconds", c.io_seconds),
        ("wait_seconds", c.wait_seconds),
        ("direct_read_requests", c.direct_read_requests as f64),
        ("step_agreements", c.step_agreements as f64),
        ("setup_made", c.setup_made as f64),
        ("reader_slots", c.reader_slots as f64),
        ("index_loaded", c.index_loaded as f64),
        ("index_seconds", c.index_seconds),
        ("stage_bytes_read", c.stage_bytes_read as f64),
        ("stage_bytes_written", c.stage_bytes_written as f64),
        ("stage_warnings", c.stage_warnings as f64),
    ])
}
