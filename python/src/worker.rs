//! The engine on a thread of its own. Python's main thread only waits for
//! replies, with the GIL released, waking every few milliseconds to run
//! signal handlers: Ctrl-C raises `KeyboardInterrupt` while the engine
//! waits for reads or for other ranks, instead of after. The engine is
//! opened, driven and dropped on that thread (its MPI calls need
//! `MPI_THREAD_MULTIPLE` when the caller also uses MPI; see `mpi`).
//!
//! Requests are answered in order. A request whose wait was interrupted
//! stays in flight; the next request first collects its reply (a batch
//! fetched meanwhile is delivered by the next `next`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use lmdbio::engine::{Counters, Engine, EngineOptions};
use lmdbio::{Error, Result};
use pyo3::prelude::*;

use crate::mpi::CommHandle;

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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Open,
    Next,
    Other,
    Close,
}

pub struct Worker {
    requests: Option<Sender<Request>>,
    replies: Receiver<Result<Reply>>,
    thread: Option<JoinHandle<()>>,
    /// Requests sent whose replies were not collected (an interrupted wait).
    in_flight: Vec<Kind>,
    /// A batch fetched for an interrupted `next`, delivered by the next one.
    stashed: Option<Result<Reply>>,
}

const POLL: Duration = Duration::from_millis(20);

impl Worker {
    /// Starts the thread and opens the engine on it (collective over
    /// `comm`); waits for the result, running signal handlers meanwhile.
    pub fn open(
        py: Python<'_>,
        comm: CommHandle,
        path: PathBuf,
        options: EngineOptions,
    ) -> PyResult<(Worker, OpenInfo)> {
        let (requests, inbox) = unbounded();
        let (outbox, replies) = unbounded();
        let thread = std::thread::Builder::new()
            .name("lmdbio-engine".into())
            .spawn(move || serve(comm, path, options, inbox, outbox))
            .map_err(|e| crate::errors::to_py(Error::Internal(format!("no engine thread: {e}"))))?;
        let mut worker = Worker {
            requests: Some(requests),
            replies,
            thread: Some(thread),
            in_flight: vec![Kind::Open],
            stashed: None,
        };
        match worker.collect(py)? {
            Reply::Opened(info) => Ok((worker, info)),
            _ => Err(internal("open answered with something else")),
        }
    }

    pub fn next(&mut self, py: Python<'_>) -> PyResult<BatchData> {
        let reply = match self.stashed.take() {
            Some(r) => r.map_err(crate::errors::to_py)?,
            None => self.ask(py, Request::Next, Kind::Next)?,
        };
        match reply {
            Reply::Batch(b) => Ok(b),
            _ => Err(internal("next answered with something else")),
        }
    }

    pub fn cursor(&mut self, py: Python<'_>, job: bool) -> PyResult<Vec<u8>> {
        if self.stashed.is_some() {
            return Err(crate::errors::to_py(Error::InvalidArgument(
                "a batch fetched when an interrupt arrived was not taken yet: iterate once more before asking for the position".into(),
            )));
        }
        let request = if job {
            Request::JobCursor
        } else {
            Request::Cursor
        };
        match self.ask(py, request, Kind::Other)? {
            Reply::Bytes(b) => Ok(b),
            _ => Err(internal("cursor answered with something else")),
        }
    }

    pub fn counters(&mut self, py: Python<'_>, node: bool) -> PyResult<Counters> {
        let request = if node {
            Request::NodeCounters
        } else {
            Request::Counters
        };
        match self.ask(py, request, Kind::Other)? {
            Reply::Counters(c) => Ok(c),
            _ => Err(internal("counters answered with something else")),
        }
    }

    /// The first step after the job's first `epochs` epochs (epochs count
    /// from the job's first, as batches number them).
    pub fn steps_for_epochs(&mut self, py: Python<'_>, epochs: u64) -> PyResult<u64> {
        match self.ask(py, Request::StepsForEpochs(epochs), Kind::Other)? {
            Reply::Count(n) => Ok(n),
            _ => Err(internal("steps_for_epochs answered with something else")),
        }
    }

    /// Closes the engine (collective) and joins the thread.
    pub fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.requests.take().is_none() {
            return Ok(());
        }
        self.in_flight.push(Kind::Close);
        while !self.in_flight.is_empty() {
            // Errors of abandoned requests no longer matter.
            let _ = self.collect(py);
        }
        if let Some(t) = self.thread.take() {
            py.allow_threads(|| {
                let _ = t.join();
            });
        }
        Ok(())
    }

    pub fn is_open(&self) -> bool {
        self.requests.is_some()
    }

    fn ask(&mut self, py: Python<'_>, request: Request, kind: Kind) -> PyResult<Reply> {
        // Replies of interrupted requests come first.
        while !self.in_flight.is_empty() {
            let was = self.in_flight[0];
            let reply = self.collect_result(py)?;
            if was == Kind::Next {
                if kind == Kind::Next {
                    return reply.map_err(crate::errors::to_py);
                }
                self.stashed = Some(reply);
            }
        }
        let Some(requests) = &self.requests else {
            return Err(crate::errors::to_py(Error::InvalidArgument(
                "the reader is closed".into(),
            )));
        };
        if requests.send(request).is_err() {
            return Err(internal("the engine thread is gone"));
        }
        self.in_flight.push(kind);
        self.collect(py)
    }

    fn collect(&mut self, py: Python<'_>) -> PyResult<Reply> {
        self.collect_result(py)?.map_err(crate::errors::to_py)
    }

    /// Waits for the oldest in-flight reply; an exception from a signal
    /// handler leaves it in flight.
    fn collect_result(&mut self, py: Python<'_>) -> PyResult<Result<Reply>> {
        loop {
            let got = py.allow_threads(|| self.replies.recv_timeout(POLL));
            match got {
                Ok(reply) => {
                    self.in_flight.remove(0);
                    return Ok(reply);
                }
                Err(RecvTimeoutError::Timeout) => py.check_signals()?,
                Err(RecvTimeoutError::Disconnected) => {
                    self.in_flight.clear();
                    self.requests = None;
                    return Err(internal("the engine thread ended"));
                }
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing is collective; a reader dropped without `close` closes
        // here, where every rank drops it. Without the GIL nobody else
        // needs it while this thread waits.
        if self.requests.take().is_some() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

fn internal(what: &str) -> PyErr {
    crate::errors::to_py(Error::Internal(what.into()))
}

/// Runs `f`, turning a panic into an error: none crosses into Python.
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(Error::Internal(
            "a panic was caught in the engine thread".into(),
        ))
    })
}

fn serve(
    comm: CommHandle,
    path: PathBuf,
    options: EngineOptions,
    inbox: Receiver<Request>,
    outbox: Sender<Result<Reply>>,
) {
    let opened = guarded(|| Engine::open(comm.0, &path, options));
    let mut engine = match opened {
        Ok(e) => e,
        Err(e) => {
            let _ = outbox.send(Err(e));
            return;
        }
    };
    let info = OpenInfo::of(&engine);
    if outbox.send(Ok(Reply::Opened(info))).is_err() {
        return;
    }
    while let Ok(request) = inbox.recv() {
        let reply = guarded(|| answer(&mut engine, request));
        if outbox.send(reply).is_err() {
            break;
        }
    }
    // Collective: every rank's reader closes.
    let closed = guarded(|| {
        drop(engine);
        Ok(())
    });
    let _ = outbox.send(closed.map(|()| Reply::Closed));
}

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
