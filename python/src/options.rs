//! The engine's options under Python names (see `lmdbio.Reader`).

use lmdbio::cursor::JobCursor;
use lmdbio::engine::{DirectIo, EngineOptions};
use lmdbio::order::ShuffleMode;
use lmdbio::schedule::{Partition, Tail};
use lmdbio::{Error, Result};
use std::path::PathBuf;

/// Options as the Python layer hands them over (already type-checked).
#[derive(Default)]
pub struct PyOptions {
    pub batch_size: usize,
    pub epochs: Option<u64>,
    pub shuffle_seed: Option<u64>,
    pub shuffle_chunk: Option<u64>,
    pub partition: String,
    pub tail: String,
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
    match name {
        "chunked" => Ok(ShuffleMode::Chunked),
        "global" => Ok(ShuffleMode::Global),
        _ => Err(Error::InvalidArgument(format!(
            "unknown shuffle_mode {name:?} (chunked or global)"
        ))),
    }
}

impl PyOptions {
    pub fn engine_options(&self) -> Result<EngineOptions> {
        let mut o = EngineOptions {
            batch: positive(self.batch_size, "batch_size")?,
            partition: partition(&self.partition)?,
            tail: tail(&self.tail)?,
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
