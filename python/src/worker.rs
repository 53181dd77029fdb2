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

use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use lmdbio::engine::{Engine, EngineOptions};
use lmdbio::{Error, Result};
use pyo3::prelude::*;

use crate::driver::{
    answer, guarded, internal, reader_closed, BatchData, Drive, OpenInfo, Reply, Request,
};
use crate::errors::to_py;
use crate::mpi::CommHandle;

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
            .map_err(|e| to_py(Error::Internal(format!("no engine thread: {e}"))))?;
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

    fn collect(&mut self, py: Python<'_>) -> PyResult<Reply> {
        self.collect_result(py)?.map_err(to_py)
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

impl Drive for Worker {
    fn ask(&mut self, py: Python<'_>, request: Request) -> PyResult<Reply> {
        let kind = match request {
            Request::Next => Kind::Next,
            _ => Kind::Other,
        };
        // Replies of interrupted requests come first.
        while !self.in_flight.is_empty() {
            let was = self.in_flight[0];
            let reply = self.collect_result(py)?;
            if was == Kind::Next {
                if kind == Kind::Next {
                    return reply.map_err(to_py);
                }
                self.stashed = Some(reply);
            }
        }
        let Some(requests) = &self.requests else {
            return Err(reader_closed());
        };
        if requests.send(request).is_err() {
            return Err(internal("the engine thread is gone"));
        }
        self.in_flight.push(kind);
        self.collect(py)
    }

    fn next(&mut self, py: Python<'_>) -> PyResult<BatchData> {
        match self.stashed.take() {
            Some(r) => r.map_err(to_py)?,
            None => self.ask(py, Request::Next)?,
        }
        .into_batch()
    }

    fn holds_batch(&self) -> bool {
        self.stashed.is_some()
    }

    /// Closes the engine (collective) and joins the thread.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
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

    fn is_open(&self) -> bool {
        self.requests.is_some()
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
