//! The storage limits: the data file split into equal contiguous parts,
//! each read with large sequential `pread`s and touching nothing else; and
//! the same reads of a file of a node's part written to the node's stage
//! directory, for the node-local storage's limit.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use mpi::traits::*;

use super::progress::Progress;
use super::report::{Context, EpochMeasurement, Measurement};
use super::{touch, Args};
use crate::CommandError;

/// Bytes per `pread`.
const REQUEST: usize = 4 << 20;

#[derive(Clone, Copy)]
pub enum Readers {
    EveryRank,
    OnePerNode,
    /// One per node, reading a file in its stage directory.
    Stage,
}

pub fn run(
    args: &Args,
    ctx: &Context,
    readers: Readers,
    progress: &mut Progress,
) -> Result<Measurement, CommandError> {
    let path = lmdbio::data_file_path(&args.db)?;
    let (part, parts) = match readers {
        Readers::EveryRank => (ctx.world.rank() as usize, ctx.world.size() as usize),
        Readers::OnePerNode | Readers::Stage => (ctx.node_index(), ctx.nodes),
    };
    let reads = matches!(readers, Readers::EveryRank) || ctx.is_node_leader();
    let len = std::fs::metadata(&path)?.len();
    let (lo, hi) = (
        len * part as u64 / parts as u64,
        len * (part as u64 + 1) / parts as u64,
    );
    // The stage's file holds the node's part, written (and with --cold
    // dropped from the page cache) before the clock starts.
    let staged = match readers {
        Readers::Stage => {
            // Every rank has the same arguments: all fail here or none.
            let dir = args.stage.as_deref().ok_or_else(|| {
                CommandError::Usage("the raw-stage method needs --stage DIR".into())
            })?;
            let made = if reads {
                write_stage_file(dir, part, hi - lo, args.cold).map(Some)
            } else {
                Ok(None)
            };
            agree(ctx, made)?
        }
        _ => None,
    };
    let mut m = Measurement::default();
    // Written before the clock starts, as lmdbio's window is mapped before
    // its runs (see --raw-buffer).
    let slots = (args.raw_buffer / REQUEST).max(1);
    let mut buf = if reads {
        vec![1u8; slots * REQUEST]
    } else {
        Vec::new()
    };
    ctx.world.barrier();
    let start = Instant::now();
    let read = if reads {
        let (file, at) = match &staged {
            Some(p) => (File::open(p)?, 0),
            None => (File::open(&path)?, lo),
        };
        read_range(
            &file,
            at,
            at + hi - lo,
            &mut buf,
            slots,
            &mut m,
            progress,
            start,
        )
    } else {
        Ok(())
    };
    m.seconds = start.elapsed().as_secs_f64();
    if let Some(p) = &staged {
        let _ = std::fs::remove_file(p);
        // The node's directory too, unless a stage is kept there.
        if let Some(dir) = p.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
    read?;
    // Read once whatever --epochs says: one epoch.
    m.per_epoch = vec![EpochMeasurement {
        epoch: 0,
        delivered_bytes: m.delivered_bytes,
        seconds: m.seconds,
        db_bytes_read: if staged.is_some() { 0 } else { m.bytes_read },
        stage_bytes_read: if staged.is_some() { m.bytes_read } else { 0 },
        ..Default::default()
    }];
    Ok(m)
}

/// Reads `[lo, hi)` of `file` in `REQUEST`s into `buf`'s slots in turn.
#[allow(clippy::too_many_arguments)]
fn read_range(
    file: &File,
    lo: u64,
    hi: u64,
    buf: &mut [u8],
    slots: usize,
    m: &mut Measurement,
    progress: &mut Progress,
    start: Instant,
) -> Result<(), CommandError> {
    let mut slot = 0;
    let mut checksum = 0u64;
    let mut at = lo;
    while at < hi {
        progress.update(at - lo, hi - lo, at - lo);
        let n = REQUEST.min((hi - at) as usize);
        let dest = &mut buf[slot * REQUEST..][..n];
        slot = (slot + 1) % slots;
        file.read_exact_at(dest, at)?;
        checksum = touch(checksum, dest);
        m.read_requests += 1;
        at += n as u64;
        if m.first_s == 0.0 {
            m.first_s = start.elapsed().as_secs_f64();
        }
    }
    std::hint::black_box(checksum);
    m.file_opens = 1;
    m.bytes_read = hi - lo;
    m.delivered_bytes = hi - lo;
    Ok(())
}

/// Writes `len` bytes that do not compress into a new file in node
/// `node`'s directory of the stage (`DIR/node-N`, as the stage keeps it),
/// synced, and with `cold` dropped from the page cache. Returns its path.
fn write_stage_file(
    dir: &Path,
    node: usize,
    len: u64,
    cold: bool,
) -> Result<PathBuf, CommandError> {
    let dir = dir.join(format!("node-{node}"));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("raw-stage-{}.tmp", std::process::id()));
    let written = (|| -> std::io::Result<()> {
        let mut file = File::create(&path)?;
        let mut block = vec![0u8; REQUEST];
        let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ node as u64;
        let mut left = len;
        while left > 0 {
            for w in block.chunks_exact_mut(8) {
                // xorshift64: cheap bytes no file system compresses.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                w.copy_from_slice(&state.to_le_bytes());
            }
            let n = (REQUEST as u64).min(left) as usize;
            file.write_all(&block[..n])?;
            left -= n as u64;
        }
        file.sync_all()?;
        if cold {
            lmdbio::page_cache::forget(&file, 0, 0)?;
        }
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&path);
        return Err(CommandError::Usage(format!(
            "cannot write {} bytes to the stage {}: {e}",
            len,
            path.display()
        )));
    }
    Ok(path)
}

/// Every rank learns whether every node's leader made its stage file; a
/// failure anywhere fails every rank with its message (this rank's, or a
/// generic one naming no path).
fn agree<T>(ctx: &Context, mine: Result<T, CommandError>) -> Result<T, CommandError> {
    let ok = i32::from(mine.is_ok());
    let mut all = 0i32;
    ctx.world
        .all_reduce_into(&ok, &mut all, mpi::collective::SystemOperation::min());
    match mine {
        Err(e) => Err(e),
        Ok(_) if all == 0 => Err(CommandError::Usage(
            "another node could not write its raw-stage file".into(),
        )),
        Ok(v) => Ok(v),
    }
}
