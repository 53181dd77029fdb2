//! The baselines through liblmdb's mmap cursor (the system liblmdb, the one
//! Caffe links), read the way Caffe-like readers read.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use lmdb::{Cursor, Environment, EnvironmentFlags, Transaction};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use sha2::{Digest, Sha256};

use super::progress::Progress;
use super::report::{EpochMeasurement, Measurement};
use super::sys::ProcessCounters;
use super::{hex, touch, Args};
use crate::CommandError;

#[derive(Clone, Copy)]
pub enum Walk {
    /// Every rank scans everything and keeps records i % P == rank, the
    /// counter running on across epochs (Caffe's multi-GPU Data layer).
    Skip,
    /// Every rank steps the cursor to the start of its contiguous block and
    /// reads only the block.
    OwnBlock,
}

fn lmdb_error(e: lmdb::Error) -> CommandError {
    CommandError::Usage(format!("liblmdb: {e}"))
}

pub fn run(
    args: &Args,
    world: &SimpleCommunicator,
    trace_dir: Option<&Path>,
    walk: Walk,
    progress: &mut Progress,
) -> Result<Measurement, CommandError> {
    let (rank, ranks) = (world.rank() as u64, world.size() as u64);
    let before = ProcessCounters::now();
    let opened = Instant::now();
    let mut flags = EnvironmentFlags::READ_ONLY | EnvironmentFlags::NO_TLS;
    if !args.db.is_dir() {
        flags |= EnvironmentFlags::NO_SUB_DIR;
    }
    let env = Environment::new()
        .set_flags(flags)
        .set_max_dbs(16)
        .open(&args.db)
        .map_err(lmdb_error)?;
    let db = env.open_db(args.subdb.as_deref()).map_err(lmdb_error)?;
    let txn = env.begin_ro_txn().map_err(lmdb_error)?;
    let records = txn.stat(db).map_err(lmdb_error)?.entries() as u64;
    let mut trace = match trace_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            Some(BufWriter::new(File::create(
                dir.join(format!("rank-{rank}.tsv")),
            )?))
        }
        None => None,
    };
    let mut m = Measurement {
        records_in_db: records,
        file_opens: 1,
        ..Default::default()
    };
    // The contiguous block of the engine's default partition.
    let (first, count) = lmdbio::schedule::contiguous_block(records, ranks, rank);
    let mut checksum = 0u64;
    let mut epoch_start = (opened, before);
    for epoch in 0..args.epochs {
        let delivered_before = m.delivered_bytes;
        let mut cursor = txn.open_ro_cursor(db).map_err(lmdb_error)?;
        for (i, item) in cursor.iter_start().enumerate() {
            let i = i as u64;
            let keep = match walk {
                Walk::Skip => (epoch * records + i) % ranks == rank,
                Walk::OwnBlock => i >= first && i < first + count,
            };
            if !keep {
                if matches!(walk, Walk::OwnBlock) && i >= first + count {
                    break;
                }
                continue;
            }
            let (key, value) = item.map_err(lmdb_error)?;
            progress.update(
                epoch * records + i,
                args.epochs * records,
                m.delivered_bytes,
            );
            checksum = touch(checksum, value);
            m.delivered_bytes += value.len() as u64;
            m.records += 1;
            if m.first_s == 0.0 {
                m.first_s = opened.elapsed().as_secs_f64();
            }
            if let Some(t) = trace.as_mut() {
                if args.epochs > 1 {
                    write!(t, "{epoch} ")?;
                }
                writeln!(
                    t,
                    "{} {} {}",
                    hex(key),
                    value.len(),
                    hex(&Sha256::digest(value))
                )?;
            }
        }
        drop(cursor);
        let now = (Instant::now(), ProcessCounters::now());
        m.per_epoch.push(EpochMeasurement {
            epoch,
            delivered_bytes: m.delivered_bytes - delivered_before,
            seconds: now.0.duration_since(epoch_start.0).as_secs_f64(),
            db_bytes_read: now.1.since(epoch_start.1).storage_read_bytes,
            ..Default::default()
        });
        epoch_start = now;
    }
    if let Some(mut t) = trace {
        t.flush()?;
    }
    m.seconds = opened.elapsed().as_secs_f64();
    std::hint::black_box(checksum);
    let used = ProcessCounters::now().since(before);
    m.bytes_read = used.storage_read_bytes;
    m.read_requests = used.major_faults;
    Ok(m)
}
