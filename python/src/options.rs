//! The engine's options under Python names (see `lmdbio.Reader`).

use std::collections::HashMap;
use std::path::PathBuf;

use lmdbio::cursor::JobCursor;
use lmdbio::engine::{DirectIo, EngineOptions};
use lmdbio::order::ShuffleMode;
use lmdbio::schedule::{Partition, Tail};
use lmdbio::{Error, Result};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Options as the Python layer hands them over; `None` is the default.
#[derive(Default)]
pub struct PyOptions {
    pub batch_size: usize,
    pub epochs: Option<u64>,
    pub shuffle_seed: Option<u64>,
    pub shuffle_chunk: Option<u64>,
    pub partition: Option<String>,
    pub tail: Option<String>,
    pub ranks_per_node: Option<usize>,
    pub readers_per_node: Option<usize>,
    pub subdb: Option<String>,
    pub window_bytes: Option<usize>,
    pub prefetch: Option<usize>,
    pub collective: Option<bool>,
    pub read_streams: Option<usize>,
    pub direct_io: Option<String>,
    pub overlap: Option<bool>,
    pub hints: Vec<(String, String)>,
    pub job_cursor: Option<Vec<u8>>,
    pub repartition: bool,
    pub shuffle_mode: Option<String>,
    pub stage: Option<PathBuf>,
    pub stage_budget: Option<u64>,
    pub keep_stage: Option<bool>,
    pub saved_index: Option<bool>,
    pub index_cache: Option<PathBuf>,
}

fn positive(v: usize, what: &str) -> Result<usize> {
    if v == 0 {
        return Err(Error::InvalidArgument(format!("{what} must be at least 1")));
    }
    Ok(v)
}

pub fn partition(name: &str) -> Result<Partition> {
    match name {
        "contiguous" => Ok(Partition::Contiguous),
        "round_robin" | "round-robin" => Ok(Partition::RoundRobinBatches),
        "strided" => Ok(Partition::Strided),
        _ => Err(Error::InvalidArgument(format!(
            "unknown partition {name:?} (contiguous, round_robin or strided)"
        ))),
    }
}

pub fn tail(name: &str) -> Result<Tail> {
    match name {
        "short" => Ok(Tail::Short),
        "wrap" => Ok(Tail::Wrap),
        _ => Err(Error::InvalidArgument(format!(
            "unknown tail {name:?} (short or wrap)"
        ))),
    }
}

fn direct_io(name: &str) -> Result<DirectIo> {
    match name {
        "auto" => Ok(DirectIo::Auto),
        "never" => Ok(DirectIo::Never),
        "always" => Ok(DirectIo::Always),
        _ => Err(Error::InvalidArgument(format!(
            "unknown direct_io {name:?} (auto, never or always)"
        ))),
    }
}

pub fn shuffle_mode(name: &str) -> Result<ShuffleMode> {
    ShuffleMode::from_name(name).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "unknown shuffle_mode {name:?} (chunked, global or global-after-first)"
        ))
    })
}

/// `value` as the option `name` wants it; a Python `TypeError` naming the
/// option if it is not.
fn typed<'py, T: FromPyObject<'py>>(name: &str, value: &Bound<'py, PyAny>) -> PyResult<T> {
    value
        .extract()
        .map_err(|e| PyTypeError::new_err(format!("argument '{name}': {e}")))
}

impl PyOptions {
    /// The options `_Engine`, `_LocalEngine` and `prepare` take as
    /// keywords, under `lmdbio.Reader`'s names; checked by type here and
    /// by value in [`PyOptions::engine_options`]. `_LocalEngine` has no
    /// node and uses what it needs.
    pub fn from_keywords(
        batch_size: usize,
        keywords: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyOptions> {
        let mut o = PyOptions {
            batch_size,
            ..PyOptions::default()
        };
        let Some(keywords) = keywords else {
            return Ok(o);
        };
        for (key, value) in keywords.iter() {
            let name: String = key.extract()?;
            if value.is_none() {
                continue;
            }
            let v = &value;
            match name.as_str() {
                "epochs" => o.epochs = Some(typed(&name, v)?),
                "shuffle_seed" => o.shuffle_seed = Some(typed(&name, v)?),
                "shuffle_chunk" => o.shuffle_chunk = Some(typed(&name, v)?),
                "partition" => o.partition = Some(typed(&name, v)?),
                "tail" => o.tail = Some(typed(&name, v)?),
                "ranks_per_node" => o.ranks_per_node = Some(typed(&name, v)?),
                "readers_per_node" => o.readers_per_node = Some(typed(&name, v)?),
                "subdb" => o.subdb = Some(typed(&name, v)?),
                "window_bytes" => o.window_bytes = Some(typed(&name, v)?),
                "prefetch" => o.prefetch = Some(typed(&name, v)?),
                "collective" => o.collective = Some(typed(&name, v)?),
                "read_streams" => o.read_streams = Some(typed(&name, v)?),
                "direct_io" => o.direct_io = Some(typed(&name, v)?),
                "overlap" => o.overlap = Some(typed(&name, v)?),
                "hints" => {
                    let hints: HashMap<String, String> = typed(&name, v)?;
                    o.hints = hints.into_iter().collect();
                }
                "job_cursor" => o.job_cursor = Some(typed(&name, v)?),
                "repartition" => o.repartition = typed(&name, v)?,
                "shuffle_mode" => o.shuffle_mode = Some(typed(&name, v)?),
                "stage" => o.stage = Some(typed(&name, v)?),
                "stage_budget" => o.stage_budget = Some(typed(&name, v)?),
                "keep_stage" => o.keep_stage = Some(typed(&name, v)?),
                "saved_index" => o.saved_index = Some(typed(&name, v)?),
                "index_cache" => o.index_cache = Some(typed(&name, v)?),
                _ => {
                    return Err(PyTypeError::new_err(format!(
                        "unexpected keyword argument '{name}'"
                    )))
                }
            }
        }
        Ok(o)
    }

    pub fn engine_options(&self) -> Result<EngineOptions> {
        let mut o = EngineOptions {
            batch: positive(self.batch_size, "batch_size")?,
            partition: partition(self.partition.as_deref().unwrap_or("contiguous"))?,
            tail: tail(self.tail.as_deref().unwrap_or("short"))?,
            ranks_per_node: self.ranks_per_node.filter(|&k| k > 0),
            subdb: self.subdb.clone(),
            epoch_limit: self.epochs,
            shuffle_seed: self.shuffle_seed,
            shuffle_chunk: self.shuffle_chunk.filter(|&c| c > 0),
            hints: self.hints.clone(),
            ..EngineOptions::default()
        };
        if let Some(n) = self.readers_per_node {
            o.readers_per_node = positive(n, "readers_per_node")?;
        }
        if let Some(b) = self.window_bytes {
            o.window_bytes = positive(b, "window_bytes")?;
        }
        if let Some(p) = self.prefetch {
            o.prefetch = positive(p, "prefetch")?;
        }
        if let Some(c) = self.collective {
            o.collective = c;
        }
        if let Some(s) = self.read_streams {
            o.read_streams = Some(positive(s, "read_streams")?);
        }
        if let Some(d) = &self.direct_io {
            o.direct_io = direct_io(d)?;
        }
        if let Some(v) = self.overlap {
            o.overlap = v;
        }
        if let Some(m) = &self.shuffle_mode {
            o.shuffle_mode = Some(shuffle_mode(m)?);
        }
        o.stage = self.stage.clone();
        if let Some(b) = self.stage_budget {
            o.stage_budget = b;
        }
        if let Some(k) = self.keep_stage {
            o.keep_stage = k;
        }
        if let Some(s) = self.saved_index {
            o.saved_index = s;
        }
        o.index_cache = self.index_cache.clone();
        if let Some(bytes) = &self.job_cursor {
            o.resume_job = Some(JobCursor::decode(bytes)?);
            o.repartition = self.repartition;
        }
        Ok(o)
    }
}
