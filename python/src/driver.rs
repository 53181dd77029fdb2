//! What `_Engine` asks its engine and gets back, whoever drives it: on a
//! thread of its own (`worker`) or on the caller's (`inline`); see
//! docs/design/python-reader.md. A driver only carries a request to the
//! engine and its reply back; the typed calls on top are the same for both.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use lmdbio::engine::{Counters, Engine};
use lmdbio::{Error, Result};
use pyo3::prelude::*;

use crate::errors::to_py;

/// One record of a batch, pointing into the node's shared window.
#[derive(Clone, Copy)]
pub struct RecordRef {
    pub key: (*const u8, usize),
    pub value: (*const u8, usize),
    pub ordinal: u64,
    pub epoch: u64,
}

// SAFETY: the pointers refer to the node's shared window, mapped for the
// life of the process (the engine keeps it between engines); reading it
// from any thread is fine. Whether the bytes are still this batch's is
// checked by generation before any read (see `batch`).
unsafe impl Send for RecordRef {}
unsafe impl Sync for RecordRef {}

pub struct BatchData {
    pub records: Vec<RecordRef>,
    pub step: u64,
    pub epoch: u64,
    /// Time the engine took to deliver it (`next_batch` and this list).
    pub engine_seconds: f64,
}

/// What the engine reported once open.
#[derive(Clone, Copy, Debug)]
pub struct OpenInfo {
    pub rank: usize,
    pub ranks: usize,
    pub node_rank: usize,
    pub node_size: usize,
    pub records: u64,
    pub step: u64,
    pub step_limit: Option<u64>,
}

impl OpenInfo {
    pub fn of(engine: &Engine) -> OpenInfo {
        OpenInfo {
            rank: engine.rank(),
            ranks: engine.ranks(),
            node_rank: engine.node_rank(),
            node_size: engine.node_size(),
            records: engine.records(),
            step: engine.step(),
            step_limit: engine.step_limit(),
        }
    }
}

pub(crate) enum Request {
    Next,
    Cursor,
    JobCursor,
    Counters,
    NodeCounters,
    StepsForEpochs(u64),
}

pub enum Reply {
    Opened(OpenInfo),
    Batch(BatchData),
    Bytes(Vec<u8>),
    Counters(Counters),
    Count(u64),
    Closed,
}

impl Reply {
    pub fn into_batch(self) -> PyResult<BatchData> {
        match self {
            Reply::Batch(b) => Ok(b),
            _ => Err(internal("next answered with something else")),
        }
    }
}

/// How `_Engine` reaches its engine.
pub(crate) trait Drive: Send + Sync {
    /// Carries `request` to the engine and its reply back.
    fn ask(&mut self, py: Python<'_>, request: Request) -> PyResult<Reply>;

    /// The next batch. A batch fetched by a call that a signal handler's
    /// exception interrupts is kept for the next call; each driver keeps
    /// it its own way.
    fn next(&mut self, py: Python<'_>) -> PyResult<BatchData>;

    /// Whether such a kept batch waits for `next`.
    fn holds_batch(&self) -> bool;

    /// Closes the engine (collective).
    fn close(&mut self, py: Python<'_>) -> PyResult<()>;

    fn is_open(&self) -> bool;

    /// This rank's cursor, or (`job`, collective) the job cursor.
    fn cursor(&mut self, py: Python<'_>, job: bool) -> PyResult<Vec<u8>> {
        if self.holds_batch() {
            return Err(to_py(Error::InvalidArgument(
                "a batch fetched when an interrupt arrived was not taken yet: iterate once more before asking for the position".into(),
            )));
        }
        let request = if job {
            Request::JobCursor
        } else {
            Request::Cursor
        };
        match self.ask(py, request)? {
            Reply::Bytes(b) => Ok(b),
            _ => Err(internal("cursor answered with something else")),
        }
    }

    /// This rank's counters, or (`node`, collective) the node's sums.
    fn counters(&mut self, py: Python<'_>, node: bool) -> PyResult<Counters> {
        let request = if node {
            Request::NodeCounters
        } else {
            Request::Counters
        };
        match self.ask(py, request)? {
            Reply::Counters(c) => Ok(c),
            _ => Err(internal("counters answered with something else")),
        }
    }

    /// The first step after the job's first `epochs` epochs (epochs count
    /// from the job's first, as batches number them).
    fn steps_for_epochs(&mut self, py: Python<'_>, epochs: u64) -> PyResult<u64> {
        match self.ask(py, Request::StepsForEpochs(epochs))? {
            Reply::Count(n) => Ok(n),
            _ => Err(internal("steps_for_epochs answered with something else")),
        }
    }
}

pub(crate) fn internal(what: &str) -> PyErr {
    to_py(Error::Internal(what.into()))
}

pub(crate) fn reader_closed() -> PyErr {
    to_py(Error::InvalidArgument("the reader is closed".into()))
}

/// Runs `f`, turning a panic into an error: none crosses into Python.
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(Error::Internal("a panic was caught in the reader".into())))
}

/// The engine's answer to `request`, on whichever thread drives it.
pub(crate) fn answer(engine: &mut Engine, request: Request) -> Result<Reply> {
    Ok(match request {
        Request::Next => {
            let started = Instant::now();
            let batch = engine.next_batch()?;
            let records = batch
                .records()
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let (k, v) = (batch.key(i), batch.value(i));
                    RecordRef {
                        key: (k.as_ptr(), k.len()),
                        value: (v.as_ptr(), v.len()),
                        ordinal: r.ordinal,
                        epoch: r.epoch,
                    }
                })
                .collect();
            Reply::Batch(BatchData {
                records,
                step: batch.step,
                epoch: batch.epoch(),
                engine_seconds: started.elapsed().as_secs_f64(),
            })
        }
        Request::Cursor => Reply::Bytes(engine.cursor()?.encode()),
        Request::JobCursor => Reply::Bytes(engine.job_cursor()?.encode()),
        Request::Counters => Reply::Counters(engine.counters()),
        Request::NodeCounters => Reply::Counters(engine.node_counters()?),
        Request::StepsForEpochs(e) => Reply::Count(engine.schedule().steps_for_epochs(e)),
    })
}
