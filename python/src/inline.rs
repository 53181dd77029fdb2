//! The engine driven on the caller's thread, with the GIL released during
//! each call: no hand-over to another thread and back per batch (see
//! docs/design/python-reader.md). A signal that arrives during a call is
//! acted on when the call returns; a batch fetched by a call that then
//! raises `KeyboardInterrupt` is delivered by the next `next`.

use std::path::PathBuf;

use lmdbio::engine::{Counters, Engine, EngineOptions};
use lmdbio::Error;
use pyo3::prelude::*;

use crate::errors::to_py;
use crate::mpi::CommHandle;
use crate::worker::{answer, guarded, BatchData, OpenInfo, Reply, Request};

/// The engine, moved into `allow_threads` closures.
struct Held(Box<Engine>);

// SAFETY: the engine is used by one thread at a time (calls take
// `&mut self` under the GIL's protection of the Python object); its MPI
// calls are allowed from any thread at the thread level the package
// initialises MPI with (see `mpi`), and its memory is the process's.
unsafe impl Send for Held {}
// SAFETY: `Inline` reaches the engine only through `&mut self`, so no two
// threads ever hold references to it at once.
unsafe impl Sync for Held {}

pub struct Inline {
    engine: Option<Held>,
    stashed: Option<BatchData>,
}

impl Inline {
    pub fn open(
        py: Python<'_>,
        comm: CommHandle,
        path: PathBuf,
        options: EngineOptions,
    ) -> PyResult<(Inline, OpenInfo)> {
        let engine = py
            .allow_threads(|| {
                guarded(|| Engine::open(comm.0, &path, options).map(|e| Held(Box::new(e))))
            })
            .map_err(to_py)?;
        let info = OpenInfo::of(&engine.0);
        Ok((
            Inline {
                engine: Some(engine),
                stashed: None,
            },
            info,
        ))
    }

    fn ask(&mut self, py: Python<'_>, request: Request) -> PyResult<Reply> {
        let Some(engine) = self.engine.as_mut() else {
            return Err(to_py(Error::InvalidArgument("the reader is closed".into())));
        };
        py.allow_threads(|| guarded(|| answer(&mut engine.0, request)))
            .map_err(to_py)
    }

    pub fn next(&mut self, py: Python<'_>) -> PyResult<BatchData> {
        if let Some(b) = self.stashed.take() {
            return Ok(b);
        }
        match self.ask(py, Request::Next)? {
            Reply::Batch(b) => {
                if let Err(e) = py.check_signals() {
                    self.stashed = Some(b);
                    return Err(e);
                }
                Ok(b)
            }
            _ => Err(internal("next answered with something else")),
        }
    }

    pub fn cursor(&mut self, py: Python<'_>, job: bool) -> PyResult<Vec<u8>> {
        if self.stashed.is_some() {
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

    pub fn counters(&mut self, py: Python<'_>, node: bool) -> PyResult<Counters> {
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

    pub fn steps_for_epochs(&mut self, py: Python<'_>, epochs: u64) -> PyResult<u64> {
        match self.ask(py, Request::StepsForEpochs(epochs))? {
            Reply::Count(n) => Ok(n),
            _ => Err(internal("steps_for_epochs answered with something else")),
        }
    }

    /// Closes the engine (collective).
    pub fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        self.stashed = None;
        if let Some(engine) = self.engine.take() {
            py.allow_threads(|| {
                guarded(|| {
                    drop(engine);
                    Ok(())
                })
            })
            .map_err(to_py)?;
        }
        Ok(())
    }

    pub fn is_open(&self) -> bool {
        self.engine.is_some()
    }
}

impl Drop for Inline {
    fn drop(&mut self) {
        // Closing is collective; a reader dropped without `close` closes
        // here, where every rank drops it.
        if let Some(engine) = self.engine.take() {
            let _ = guarded(|| {
                drop(engine);
                Ok(())
            });
        }
    }
}

fn internal(what: &str) -> PyErr {
    to_py(Error::Internal(what.into()))
}
