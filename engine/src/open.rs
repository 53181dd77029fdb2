//! Opening an engine (the file on the readers, the index in node memory,
//! the starting point) and giving its node parts back on drop.

use std::cell::Cell;
use std::path::Path;
use std::sync::Arc;

use crate::agree::{self, agree_ok, agree_resource};
use crate::counters::Counters;
use crate::data_file::DataFile;
use crate::mpi_raw::{Comm, RawComm, ThreadLevel};
use crate::node_memory::{self, NodeMemory};
use crate::node_share::NodeShare;
use crate::options::{check_options, window_size, EngineOptions};
use crate::round::progress_words;
use crate::topology::{self, NodeTopology};
use crate::{index_build, inline_pages};
use crate::{Engine, NodeParts};
use lmdbio_core::cursor::DatabaseIdentity;
use lmdbio_core::database::data_file_path;
use lmdbio_core::error::{Error, Result};
use lmdbio_core::order::{EpochOrder, Shuffle};
use lmdbio_core::resume::{self, JobSchedule};
use lmdbio_core::schedule::Schedule;

/// What opening produced besides the topology.
pub(crate) struct Opened {
    pub(crate) window_made: bool,
    pub(crate) file: Option<Arc<DataFile>>,
    pub(crate) memory: NodeMemory,
    pub(crate) database: DatabaseIdentity,
    pub(crate) index_io: lmdbio_core::source::IoSnapshot,
    pub(crate) index_loaded: bool,
    pub(crate) index_seconds: f64,
    pub(crate) schedule: JobSchedule,
    pub(crate) order: EpochOrder,
    pub(crate) step: u64,
    pub(crate) plan_granule: u64,
    pub(crate) round_steps: usize,
    pub(crate) snapshot: Option<Arc<crate::snapshot::SnapshotCheck>>,
}

/// The schedule, epoch order and step to start from, on this rank (the
/// ranks agree on it when the index is published).
pub(crate) fn start_point(
    world: &Comm,
    options: &EngineOptions,
    records: u64,
    value_bytes: u64,
    database: DatabaseIdentity,
) -> Result<(JobSchedule, EpochOrder, u64)> {
    crate::limits::check_against_database(options, records)?;
    job_start(
        options,
        world.size() as u64,
        world.rank(),
        records,
        value_bytes,
        database,
    )
}

/// The schedule, epoch order and step to start from of rank `rank` of a
/// job of `ranks` ranks over a database of `records` records holding
/// `value_bytes` bytes of values: worked out by each rank alone, the same
/// on all, so also by readers without MPI (the Python reader under
/// `torchrun`).
pub fn job_start(
    options: &EngineOptions,
    ranks: u64,
    rank: usize,
    records: u64,
    value_bytes: u64,
    database: DatabaseIdentity,
) -> Result<(JobSchedule, EpochOrder, u64)> {
    let schedule = Schedule::new(
        records,
        ranks,
        options.batch as u64,
        options.partition,
        options.tail,
    );
    let shuffle = options.shuffle_seed.map(|seed| {
        let sized = Shuffle::with_default_sizes(seed, records, value_bytes);
        Shuffle {
            chunk: options.shuffle_chunk.unwrap_or(sized.chunk),
            window_chunks: options.shuffle_window_chunks,
            mode: options.shuffle_mode_in_use(),
            ..sized
        }
        .normalized()
    });
    let (schedule, step) = resume_point(options, schedule, shuffle, database, rank)?;
    Ok((schedule, EpochOrder::new(records, shuffle), step))
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Reads into the window finish before it is given back.
        self.pending = None;
        // A job's saved index is whole before its process may end.
        crate::saved_index::finish_writes();
        self.round = None;
        // The stage's writer stops reading the window before it goes.
        if let Some(stage) = self.file.as_deref().and_then(DataFile::stage) {
            stage.reclaim_all();
        }
        if self.parts.is_none() {
            return;
        }
        if !crate::mpi_raw::is_initialized() {
            // MPI is gone (the engine outlived MPI_Finalize): no MPI call
            // may be made, and the handles died with it.
            std::mem::forget(self.parts.take());
            return;
        }
        // A rank that failed a step may be waiting for this one at a world
        // agreement: this rank learns nothing it could still act on, but
        // must not leave it waiting.
        let _ = self.settle_agreement();
        let Some(NodeParts {
            mut topology,
            memory,
        }) = self.parts.take()
        else {
            return;
        };
        let window = memory.into_window();
        // The node's ranks may still be reading their last batch: the
        // window is kept (memory and all, see topology) once all of them
        // are done with it, so that `release_memory` may free it at any
        // time. If the barrier fails the node is in trouble; keep nothing.
        if topology.node.barrier().is_ok() {
            topology.window = Some(window);
            topology::give_back(topology);
        } else {
            std::mem::forget(window);
            std::mem::forget(topology);
        }
    }
}

/// A reader slot for the database at `path`, or why there is none.
fn take_reader_slot(path: &Path) -> std::result::Result<crate::reader_slot::ReaderSlot, String> {
    let data = data_file_path(path).map_err(|e| e.to_string())?;
    crate::reader_slot::ReaderSlot::take(&data, || {
        lmdbio_core::database::Database::open(&data)
            .map(|d| d.meta().mm_txnid)
            .map_err(|e| format!("reading the meta pages: {e}"))
    })
}

/// Gives this node's reader its stage (see [`EngineOptions::stage`]); a
/// stage that cannot be used is said once and left out.
fn attach_stage(
    file: &DataFile,
    dir: &Path,
    readers: &Comm,
    options: &EngineOptions,
    database: DatabaseIdentity,
    tally: &Arc<crate::counters::ReadTally>,
) {
    let spec = crate::node_stage::StageSpec {
        dir,
        node: readers.rank() as u64,
        nodes: readers.size() as u64,
        budget: options.stage_budget,
        keep: options.keep_stage,
    };
    let path = file.path().to_owned();
    let marks = std::fs::metadata(&path).map(|m| {
        use std::os::unix::fs::MetadataExt;
        (
            m.ino(),
            i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        )
    });
    let Ok((inode, modified)) = marks else {
        // The reader has the file open: it was there a moment ago. Staging
        // without its marks could serve another file's bytes; do without.
        return;
    };
    let identity = crate::node_stage::Identity {
        inode,
        modified,
        file_len: file.len(),
        entries: database.entries,
        txnid: database.txnid,
        page_size: database.page_size,
        digest: database.digest,
    };
    if let Some(stage) =
        crate::node_stage::NodeStage::open(spec, identity, &path, Arc::clone(tally))
    {
        file.attach_stage(stage);
    }
}

/// The schedule and step to start from: a fresh job's, or a validated
/// cursor's.
pub(crate) fn resume_point(
    options: &EngineOptions,
    base: Schedule,
    shuffle: Option<Shuffle>,
    database: DatabaseIdentity,
    rank: usize,
) -> Result<(JobSchedule, u64)> {
    match (&options.resume, &options.resume_job) {
        (Some(_), Some(_)) => Err(Error::InvalidArgument(
            "resume from a rank cursor or from a job cursor, not both".into(),
        )),
        (Some(c), None) => resume::from_rank_cursor(c, base, shuffle, database, rank as u64),
        (None, Some(job)) => resume::from_job_cursor(
            job,
            base,
            shuffle,
            database,
            rank as u64,
            options.repartition,
        ),
        (None, None) => Ok((JobSchedule::plain(base), 0)),
    }
}

impl Engine {
    /// Opens `path` (database directory or data file) on every rank of
    /// `comm`. Collective; any rank's failure fails every rank.
    pub fn open(comm: RawComm, path: &Path, mut options: EngineOptions) -> Result<Engine> {
        let started = std::time::Instant::now();
        let caller = Comm::caller(comm)?;
        let same = crate::same_inputs::Inputs::of(Some(path), &options);
        let (mut topology, topology_made) = topology::take(
            &caller,
            &options,
            check_options(&options).and_then(|()| crate::launcher::world_check()),
            &same,
        )?;
        let opened = match Engine::open_with(&mut topology, path, &options) {
            Ok(opened) => opened,
            Err(e) => {
                // Every rank failed at the same agreement, before anyone
                // read the window.
                topology::give_back(topology);
                return Err(e);
            }
        };
        let threaded_reads = options.overlap
            && options.collective
            && ThreadLevel::current() == ThreadLevel::Multiple;
        let io = opened.index_io;
        let tally: Arc<crate::counters::ReadTally> = Arc::default();
        if let (Some(dir), Some(file), Some(readers)) =
            (&options.stage, &opened.file, &topology.readers)
        {
            attach_stage(file, dir, readers, &options, opened.database, &tally);
        }
        let exchange = match (&options.stage, &opened.file, &topology.readers) {
            (Some(_), Some(file), Some(readers)) => {
                let staggered = options.stagger.is_some_and(|g| g < readers.size());
                crate::exchange::Exchange::open(readers, file.stage(), file.len(), staggered)
                    .unwrap_or_else(|e| {
                        eprintln!("lmdbio: warning: no exchange between node readers: {e}");
                        None
                    })
            }
            _ => None,
        };
        if let Some(stage) = opened.file.as_deref().and_then(DataFile::stage) {
            stage.fill_from_peers(exchange.as_ref().is_some_and(|x| x.fills));
        }
        if let Some(epochs) = options.epoch_limit {
            let steps = opened.schedule.steps_for_epochs(epochs);
            options.step_limit = Some(options.step_limit.map_or(steps, |s| s.min(steps)));
        }
        let first_epoch = opened
            .schedule
            .batch_slots(topology.world().rank() as u64, opened.step)
            .first()
            .map_or(0, |s| s.epoch);
        Ok(Engine {
            pending: None,
            delivered_by_epoch: Vec::new(),
            step_clock: started,
            first_epoch,
            threaded_reads,
            counters: Counters {
                file_opens: opened.file.as_ref().map_or(0, |f| f.opens()),
                index_bytes_read: io.bytes_read,
                index_read_requests: io.read_requests,
                index_loaded: u64::from(opened.index_loaded),
                index_seconds: opened.index_seconds,
                bytes_read: io.bytes_read,
                read_requests: io.read_requests,
                setup_made: u64::from(topology_made) + u64::from(opened.window_made),
                reader_slots: opened.snapshot.as_ref().map_or(0, |s| {
                    u64::from(s.guard() == crate::snapshot::SnapshotGuard::ReaderSlot)
                }),
                ..Default::default()
            },
            file: opened.file,
            parts: Some(NodeParts {
                topology,
                memory: opened.memory,
            }),
            schedule: opened.schedule,
            order: opened.order,
            database: opened.database,
            path: path.to_owned(),
            options,
            step: opened.step,
            round: None,
            batch: Vec::new(),
            last_epoch: 0,
            cut_by_epoch_limit: false,
            tally,
            previous_read: None,
            rounds_started: 0,
            plan_granule: opened.plan_granule,
            round_steps: opened.round_steps,
            failed: None,
            owes_agreement: Cell::new(false),
            spare_lists: Cell::default(),
            snapshot: opened.snapshot,
            exchange,
        })
    }

    /// The collective steps of opening on a taken topology: the file on the
    /// readers, the index in the node's memory, and the starting point. On
    /// failure the window is back in `topology`.
    ///
    /// Two agreements over the world with independent reads (the file and
    /// the tree scanned; the index published with the starting point), and
    /// a third when the window has to be made: each one before the first
    /// value is read delays every rank where ranks outnumber cores (see
    /// docs/design/agreement.md).
    pub(crate) fn open_with(
        topology: &mut NodeTopology,
        path: &Path,
        options: &EngineOptions,
    ) -> Result<Opened> {
        // Before anything of the snapshot is read (see
        // docs/design/reader-slot.md).
        let mut slot = topology.readers.as_ref().map(|_| take_reader_slot(path));
        let (file, opened) = match Engine::open_file(topology, path, options) {
            Ok(file) => (file.map(Arc::new), Ok(())),
            Err(e) => (None, Err(e)),
        };
        // Only masters look for a saved index (no file system calls on the
        // other ranks).
        let place = topology
            .masters
            .as_ref()
            .and_then(|_| crate::saved_index::Place::of(path, options))
            .map(|p| {
                let masters_here = topology.machine_readers.div_ceil(options.readers_per_node);
                let ranks = topology.world().size() as u64;
                p.for_node(NodeShare::of(
                    options,
                    ranks,
                    &topology.members,
                    masters_here,
                ))
            });
        let scan_started = std::time::Instant::now();
        let budget = inline_pages::scan_budget(
            options.inline_pages_bytes,
            options.window_bytes,
            topology.window.as_ref().map_or(0, |w| w.len()),
        );
        let words = progress_words(topology.node.size());
        let is_master = topology.masters.is_some();
        // Masters read the leaf pages they keep straight into the window,
        // where they are served from (docs/design/inline-records.md).
        let mut window = topology.window.take();
        let scanned = index_build::scan(
            topology.world(),
            topology.masters.as_ref(),
            opened.map(|()| file.as_deref()),
            options.subdb.as_deref(),
            budget,
            // SAFETY: on the node's first rank, while no engine holds the
            // window and the node's other ranks wait in the scan's
            // agreement; the slice ends with the scan.
            unsafe { inline_pages::scan_area(window.as_mut().filter(|_| is_master), words) },
            (
                place.as_ref(),
                options.keys,
                scan_cores(topology.machine_readers),
            ),
        );
        topology.window = window;
        let mut scanned = scanned?;
        let scan_seconds = scan_started.elapsed().as_secs_f64();
        // A record's run may take up to a granule more on each side.
        let plan_granule = scanned.plan_granule;
        let widest = match plan_granule {
            1 => scanned.largest_span,
            g => scanned.largest_span.saturating_add(2 * g),
        };
        let (records, key_bytes) = (scanned.records, scanned.key_bytes);
        let round_steps = inline_pages::round_steps(
            options.prefetch,
            options.batch,
            topology.node.size(),
            (records as u64, scanned.value_bytes),
            (scanned.page_size, options.inline_pages_bytes),
        );
        let data_len = window_size(options, topology.node.size(), widest, round_steps);
        let kept = inline_pages::space(scanned.kept_pages, scanned.page_size);
        let (_, need) = node_memory::layout(words, records, key_bytes, data_len, kept)?;
        let have = topology.window.as_ref().map_or(0, |w| w.len());
        let data_len = inline_pages::fit_values(data_len, need, have, kept);
        let (_, need) = node_memory::layout(words, records, key_bytes, data_len, kept)?;
        if need > have {
            // The window is made anew: the pages the scan placed in the old
            // one go to private memory first.
            // SAFETY: as for the scan: the node's first rank (the only one
            // holding the window here), the others waiting to make the new.
            scanned.hold_placed(unsafe {
                inline_pages::scan_area(topology.window.as_mut().filter(|_| is_master), words)
            });
        }
        let window_made = topology.ensure_window(need)?;
        let Some(window) = topology.window.take() else {
            return Err(Error::Internal("no node window after making one".into()));
        };
        // The window is large enough (ensured above), so this cannot fail
        // on one rank only.
        let mut memory = NodeMemory::new(window, words, records, key_bytes, data_len, kept)?;
        if let Some(file) = file.as_deref() {
            // Direct reads land in the window only where prepare got it
            // huge pages, else in staging buffers (see
            // set_window_in_huge_pages).
            file.set_window_in_huge_pages(memory.in_huge_pages());
        }
        if topology.node.rank() == 0 {
            // Published with the index below, before any rank waits on them.
            memory.reset_progress();
        }
        let database = DatabaseIdentity {
            entries: records as u64,
            txnid: scanned.txnid,
            page_size: scanned.page_size,
            digest: scanned.digest,
        };
        let world = topology.world();
        let snapshot = match &file {
            Some(_) => data_file_path(path)
                .and_then(|p| {
                    let slot = slot
                        .take()
                        .unwrap_or_else(|| Err("this rank reads nothing".into()));
                    crate::snapshot::SnapshotCheck::open(&p, scanned.page_size, scanned.txnid, slot)
                })
                .map(|s| Some(Arc::new(s))),
            None => Ok(None),
        };
        let start = snapshot.and_then(|snapshot| {
            agree::local(|| {
                start_point(
                    world,
                    options,
                    records as u64,
                    scanned.value_bytes,
                    database,
                )
            })
            .map(|(schedule, order, step)| (schedule, order, step, snapshot))
        });
        let masters = topology.masters.as_ref();
        let index_loaded = scanned.loaded;
        let publish_started = std::time::Instant::now();
        let published = index_build::publish(world, masters, &mut memory, scanned, start);
        let index_seconds = scan_seconds + publish_started.elapsed().as_secs_f64();
        match published {
            Ok((index_io, (schedule, order, step, snapshot))) => Ok(Opened {
                window_made,
                file,
                memory,
                database,
                index_io,
                index_loaded,
                index_seconds,
                schedule,
                order,
                step,
                plan_granule,
                round_steps,
                snapshot,
            }),
            Err(e) => {
                topology.window = Some(memory.into_window());
                Err(e)
            }
        }
    }

    /// Opens the data file on the readers (`None` elsewhere).
    ///
    /// Independent reads open a file of the reader's own, a step of its
    /// own whose failure the tree scan's agreement carries to every rank.
    /// Collective reads agree on the path first, so that no reader enters
    /// `MPI_File_open` alone, and then on the file.
    pub(crate) fn open_file(
        topology: &NodeTopology,
        path: &Path,
        options: &EngineOptions,
    ) -> Result<Option<DataFile>> {
        if !options.collective {
            return match &topology.readers {
                Some(readers) => {
                    agree::local(|| DataFile::open(readers, &data_file_path(path)?, options))
                        .map(Some)
                }
                None => Ok(None),
            };
        }
        let world = topology.world();
        let resolved = match &topology.readers {
            Some(_) => data_file_path(path).map(Some),
            None => Ok(None),
        };
        let resolved = agree_ok(world, resolved)?;
        let file = match (&topology.readers, resolved) {
            (Some(r), Some(p)) => Some(DataFile::open(r, &p, options)),
            _ => None,
        };
        agree_resource(world, file.transpose())
    }
}

/// Cores a master may parse the scan's leaves on: the machine's, shared
/// by the readers on it (the other ranks wait during the scan).
fn scan_cores(machine_readers: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores / machine_readers.max(1)
}
