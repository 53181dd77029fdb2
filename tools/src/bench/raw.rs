//! The storage limit: the data file split into equal contiguous parts, each
//! read with large sequential `pread`s and touching nothing else.

use std::os::unix::fs::FileExt;
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
        Readers::OnePerNode => (ctx.node_index(), ctx.nodes),
    };
    let reads = matches!(readers, Readers::EveryRank) || ctx.is_node_leader();
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
    if reads {
        let file = std::fs::File::open(&path)?;
        let len = file.metadata()?.len();
        let (lo, hi) = (
            len * part as u64 / parts as u64,
            len * (part as u64 + 1) / parts as u64,
        );
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
    }
    m.seconds = start.elapsed().as_secs_f64();
    // Read once whatever --epochs says: one epoch.
    m.per_epoch = vec![EpochMeasurement {
        epoch: 0,
        delivered_bytes: m.delivered_bytes,
        seconds: m.seconds,
        db_bytes_read: m.bytes_read,
        ..Default::default()
    }];
    Ok(m)
}
