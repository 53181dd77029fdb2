//! The `lmdbio` method: the engine, as a training job would drive it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use lmdbio::cursor::JobCursor;
use lmdbio::engine::{Engine, EngineOptions};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use sha2::{Digest, Sha256};

use super::progress::Progress;
use super::report::{EpochMeasurement, Measurement};
use super::{hex, touch, Args};
use crate::CommandError;

pub fn run(
    args: &Args,
    mut options: EngineOptions,
    world: &SimpleCommunicator,
    trace_dir: Option<&Path>,
    progress: &mut Progress,
) -> Result<Measurement, CommandError> {
    if let Some(path) = &args.resume {
        // Every rank reads the same file, so every rank reaches the same
        // verdict and none is left waiting in a collective call.
        let bytes = std::fs::read(path)?;
        let job = JobCursor::decode(&bytes)
            .map_err(|e| CommandError::Usage(format!("{}: {e}", path.display())))?;
        options.resume_job = Some(job);
        options.repartition = args.repartition;
    }
    let opened = Instant::now();
    let mut engine = Engine::open(world.as_raw(), &args.db, options)?;
    let open_s = opened.elapsed().as_secs_f64();
    // The engine works out the steps that deliver the epochs asked for
    // (options.epoch_limit) and reads nothing of later epochs.
    let total = engine.step_limit().ok_or_else(|| {
        lmdbio::Error::Internal("an engine opened with an epoch limit has no step limit".into())
    })?;
    let first_step = engine.step();
    let last = args.stop_after.map_or(total, |k| total.min(first_step + k));
    engine.set_step_limit(last);

    let mut trace = match trace_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            Some(BufWriter::new(File::create(
                dir.join(format!("rank-{}.tsv", engine.rank())),
            )?))
        }
        None => None,
    };
    let mut m = Measurement {
        records_in_db: engine.records(),
        open_s,
        ..Default::default()
    };
    let mut checksum = 0u64;
    let mut past_limit = 0u64;
    for step in first_step..last {
        progress.update(step - first_step, last - first_step, m.delivered_bytes);
        let batch = engine.next_batch()?;
        for (i, rec) in batch.records().iter().enumerate() {
            let value = batch.value(i);
            // Touch every byte so no method wins by not reading.
            checksum = touch(checksum, value);
            if rec.epoch >= args.epochs {
                // Counted and agreed on after the loop: returning here
                // would leave the other ranks in the next collective step.
                past_limit += 1;
                continue;
            }
            m.delivered_bytes += value.len() as u64;
            m.records += 1;
            if let Some(t) = trace.as_mut() {
                if args.epochs > 1 {
                    write!(t, "{} ", rec.epoch)?;
                }
                writeln!(
                    t,
                    "{} {} {}",
                    hex(batch.key(i)),
                    value.len(),
                    hex(&Sha256::digest(value))
                )?;
            }
        }
        if m.first_s == 0.0 {
            m.first_s = opened.elapsed().as_secs_f64();
        }
        if args.compute_ms > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(args.compute_ms / 1e3));
        }
    }
    // The job's data is delivered once every rank has touched its last
    // batch. The check below is the bench's own, a blocking collective that
    // took 20-80 ms at eight ranks on two cores (docs/PERFORMANCE.md), and
    // no other method has one inside its clock.
    m.seconds = opened.elapsed().as_secs_f64();
    let mut past_limit_anywhere = 0u64;
    world.all_reduce_into(
        &past_limit,
        &mut past_limit_anywhere,
        mpi::collective::SystemOperation::sum(),
    );
    if past_limit_anywhere > 0 {
        return Err(lmdbio::Error::Internal(format!(
            "{past_limit_anywhere} records of epochs past the limit {} were delivered",
            args.epochs
        ))
        .into());
    }
    if let Some(mut t) = trace {
        t.flush()?;
    }
    if let Some(path) = &args.save_cursor {
        // One file for the whole job, written by rank 0: every rank's
        // cursor and the remainder this run started with.
        let job = engine.job_cursor()?;
        if world.rank() == 0 {
            std::fs::write(path, job.encode())?;
        }
    }
    std::hint::black_box(checksum);
    let c = engine.counters();
    m.bytes_read = c.bytes_read;
    m.read_requests = c.read_requests;
    m.file_opens = c.file_opens;
    m.index_read_requests = c.index_read_requests;
    m.index_loaded = c.index_loaded;
    m.index_s = c.index_seconds;
    m.direct_read_requests = c.direct_read_requests;
    m.rounds = c.rounds;
    m.step_agreements = c.step_agreements;
    m.setup_made = c.setup_made;
    m.reader_slots = c.reader_slots;
    m.read_wait_s = c.io_seconds;
    m.agreement_wait_s = c.wait_seconds;
    m.per_epoch = engine
        .epoch_counters()
        .iter()
        .map(|e| EpochMeasurement {
            epoch: e.epoch,
            delivered_bytes: e.bytes_delivered,
            seconds: e.seconds,
            db_bytes_read: e.db_bytes_read,
            stage_bytes_read: e.stage_bytes_read,
            remote_bytes_received: e.remote_bytes_received,
        })
        .collect();
    m.stage_bytes_read = c.stage_bytes_read;
    m.stage_warnings = c.stage_warnings;
    Ok(m)
}
