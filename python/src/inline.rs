//! The engine driven on the caller's thread, with the GIL released during
//! each call: no hand-over to another thread and back per batch (see
//! docs/design/python-reader.md). A signal that arrives during a call is
//! acted on when the call returns; a batch fetched by a call that then
//! raises `KeyboardInterrupt` is delivered by the next `next`.

use std::path::PathBuf;

use lmdbio::engine::{Engine, EngineOptions};
use pyo3::prelude::*;

use crate::driver::{answer, guarded, reader_closed, BatchData, Drive, OpenInfo, Reply, Request};
use crate::errors::to_py;
use crate::mpi::CommHandle;

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
}

impl Drive for Inline {
    fn ask(&mut self, py: Python<'_>, request: Request) -> PyResult<Reply> {
        let Some(engine) = self.engine.as_mut() else {
            return Err(reader_closed());
        };
        py.allow_threads(|| guarded(|| answer(&mut engine.0, request)))
            .map_err(to_py)
    }

    fn next(&mut self, py: Python<'_>) -> PyResult<BatchData> {
        if let Some(b) = self.stashed.take() {
            return Ok(b);
        }
        let b = self.ask(py, Request::Next)?.into_batch()?;
        if let Err(e) = py.check_signals() {
            self.stashed = Some(b);
            return Err(e);
        }
        Ok(b)
    }

    fn holds_batch(&self) -> bool {
        self.stashed.is_some()
    }

    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
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

    fn is_open(&self) -> bool {
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
