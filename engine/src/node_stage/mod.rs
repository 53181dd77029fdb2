//! A node's stage: the parts of the database this node holds, copied to a
//! node-local directory while the first epoch reads the shared file
//! system, and read from there afterwards (see docs/design/node-stage.md).
//!
//! The stage file (`DIR/node-N/data.stage`) is sparse and holds staged
//! bytes at their offsets in the database file, so a run is read from it
//! with the same plan and another descriptor. The manifest beside it names
//! the database and lists the staged extents with their checksums. One
//! writer thread stages: the bytes of the reader's completed runs (copied
//! out of the window as each round's read ends, skipped when it falls
//! behind) first, then, from the second epoch on and at the lowest I/O
//! priority, the rest of the node's blocks from the database file. Anything wrong with the stage (another
//! database's, a failed checksum, a full or unwritable directory) is said
//! once and the shared file system is read instead.

mod crc32c;
mod extents;
mod manifest;
mod priority;

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::counters::ReadTally;
use crate::data_file::WindowRange;
use crc32c::crc32c;
pub(crate) use extents::BLOCK;
use extents::{Check, Extent, Extents, Placement};
use lmdbio_core::plan::ReadRun;
use lmdbio_core::source::{FileSource, ReadAt};
pub(crate) use manifest::Identity;
use manifest::Refused;

/// The writer stages completed runs from the window in pieces of at most
/// this many bytes: a read that needs the area back waits for one piece at
/// most (see `NodeStage::reclaim`).
const WINDOW_PIECE: u64 = 256 << 10;

/// The filler reads the database in pieces of at most this many bytes, so
/// that a serving read that starts meanwhile waits for little.
const FILL_PIECE: u64 = 1 << 20;

/// The manifest is rewritten after this many bytes staged, so that a job
/// stopped early leaves most of its work reusable.
const MANIFEST_EVERY: u64 = 256 << 20;

/// How the stage ends when the engine is dropped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Closing {
    Open,
    /// Stage what is queued and the rest of the node's blocks, then keep.
    Finish,
    /// Stop at once (the stage is removed).
    Stop,
}

/// Bytes of the database at `at`, still in the window at `src`.
struct Piece {
    at: u64,
    src: WindowRange,
}

impl Piece {
    fn overlaps(&self, other: WindowRange) -> bool {
        let (a, b) = (self.src.ptr as usize, other.ptr as usize);
        a < b + other.len && b < a + self.src.len
    }
}

struct Queue {
    pieces: VecDeque<Piece>,
    /// Bytes of the node's blocks other nodes sent (see
    /// [`NodeStage::take_received`]), staged after the window's pieces.
    received: VecDeque<(u64, Vec<u8>)>,
    /// The piece the writer is staging (not in `pieces`).
    busy: Option<WindowRange>,
    closing: Closing,
}

struct Shared {
    dir: PathBuf,
    data: File,
    manifest: PathBuf,
    identity: Identity,
    placement: Placement,
    extents: Mutex<Extents>,
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Signalled when the writer is done with a piece.
    released: Condvar,
    /// Cleared when a write fails: nothing more is staged in this job.
    writing: AtomicBool,
    /// Replicated with peers that stage too: the filler reads only the
    /// blocks this node is home to from the database file, and takes the
    /// others from their home nodes (see [`NodeStage::fill_from_peers`]).
    from_peers: AtomicBool,
    warned: AtomicBool,
    /// Serving reads of the database in progress: the filler waits for
    /// none to be (see `NodeStage::serving`).
    serving: AtomicUsize,
    /// The first epoch the job read (see [`NodeStage::serving`]).
    first_epoch: AtomicU64,
    /// The database file, for the filler's reads.
    db: FileSource,
    tally: Arc<ReadTally>,
}

/// Every stage whose writer may still be running, so that `MPI_Finalize`
/// can take the node windows back from the writers before the windows are
/// freed: an engine may outlive MPI ([`reclaim_every_window`]).
static OPEN_STAGES: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// Takes the window back from every stage's writer: queued pieces are
/// dropped and a piece being written finishes first. Runs when
/// `MPI_Finalize` starts, after the background reads (which offer pieces)
/// have ended, and before the kept windows are freed
/// (`topology::release_all`).
pub(crate) fn reclaim_every_window() {
    let mut open = lock(&OPEN_STAGES);
    open.retain(|stage| stage.strong_count() > 0);
    for stage in open.iter().filter_map(Weak::upgrade) {
        stage.reclaim_where(|_| true);
    }
}

/// A node reader's stage (see the module's documentation).
pub(crate) struct NodeStage {
    shared: Arc<Shared>,
    /// The blocks the stage held whole when opened, before the writer
    /// checked any of them (see [`NodeStage::blocks_at_open`]).
    at_open: Vec<u64>,
    keep: bool,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// Where and how much a node stages.
pub(crate) struct StageSpec<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) node: u64,
    pub(crate) nodes: u64,
    pub(crate) budget: u64,
    pub(crate) keep: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn warn_once(warned: &AtomicBool, tally: &ReadTally, dir: &Path, what: &str) {
    tally.stage_warnings.fetch_add(1, Ordering::Relaxed);
    if !warned.swap(true, Ordering::Relaxed) {
        let line = format!(
            "lmdbio: warning: node stage {}: {what}; reading the shared file system instead\n",
            dir.display()
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }
}

impl NodeStage {
    /// Opens (or starts) this node's stage for the database at `db_path`,
    /// reusing what an earlier job staged of the same database. `None`
    /// (after one warning) where the directory cannot be used.
    pub(crate) fn open(
        spec: StageSpec<'_>,
        identity: Identity,
        db_path: &Path,
        tally: Arc<ReadTally>,
    ) -> Option<NodeStage> {
        let dir = spec.dir.join(format!("node-{}", spec.node));
        let warned = AtomicBool::new(false);
        let fail = |what: String| {
            warn_once(&warned, &tally, &dir, &what);
            None
        };
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return fail(format!("cannot make the directory ({e})"));
        }
        let manifest_path = dir.join("manifest");
        let data_path = dir.join("data.stage");
        let data = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&data_path)
        {
            Ok(f) => f,
            Err(e) => return fail(format!("cannot open {} ({e})", data_path.display())),
        };
        let staged_len = data.metadata().map_or(0, |m| m.len());
        let extents = match manifest::read(&manifest_path, &identity) {
            Ok(x) if staged_len >= identity.file_len => Some(x),
            Ok(_) => {
                warn_once(
                    &warned,
                    &tally,
                    &dir,
                    "its stage file is short; staging afresh",
                );
                None
            }
            Err(Refused::Missing) => None,
            Err(Refused::Other(why)) => {
                warn_once(&warned, &tally, &dir, &format!("{why}; staging afresh"));
                None
            }
        };
        let extents = match extents {
            Some(x) => x,
            None => {
                let _ = std::fs::remove_file(&manifest_path);
                // Sparse: only staged bytes take space.
                if let Err(e) = data
                    .set_len(0)
                    .and_then(|()| data.set_len(identity.file_len))
                {
                    return fail(format!("cannot size {} ({e})", data_path.display()));
                }
                Extents::default()
            }
        };
        let db = match FileSource::open(db_path) {
            Ok(f) => f,
            Err(e) => return fail(format!("cannot open the database to stage it ({e})")),
        };
        let placement = Placement {
            file_len: identity.file_len,
            node: spec.node,
            nodes: spec.nodes.max(1),
            budget: spec.budget,
        };
        let shared = Arc::new(Shared {
            placement,
            dir,
            data,
            manifest: manifest_path,
            identity,
            extents: Mutex::new(extents),
            queue: Mutex::new(Queue {
                pieces: VecDeque::new(),
                received: VecDeque::new(),
                busy: None,
                closing: Closing::Open,
            }),
            wake: Condvar::new(),
            released: Condvar::new(),
            writing: AtomicBool::new(true),
            // Until told otherwise (`fill_from_peers`): the filler starts
            // at once, and what it reads of other nodes' blocks before the
            // exchange is set up would be read needlessly.
            from_peers: AtomicBool::new(placement.replicated() && placement.nodes > 1),
            warned,
            serving: AtomicUsize::new(0),
            first_epoch: AtomicU64::new(u64::MAX),
            db,
            tally,
        });
        let at_open = staged_blocks(&shared);
        {
            let mut open = lock(&OPEN_STAGES);
            open.retain(|stage| stage.strong_count() > 0);
            open.push(Arc::downgrade(&shared));
        }
        let for_writer = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("lmdbio-stage".into())
            .spawn(move || for_writer.write_loop());
        match writer {
            Ok(handle) => Some(NodeStage {
                shared,
                at_open,
                keep: spec.keep,
                writer: Mutex::new(Some(handle)),
            }),
            Err(e) => {
                shared.warn(&format!("cannot start its writer ({e})"));
                None
            }
        }
    }

    /// Reads `place.len()` bytes at database offset `at` from the stage if
    /// it holds every one of them, checking the extents an earlier job
    /// staged on their first use. `false`: read them from the database.
    pub(crate) fn read_into(&self, place: &mut [u8], at: u64) -> bool {
        let s = &self.shared;
        let Some(cover) = lock(&s.extents).covering(at, place.len() as u64) else {
            return false;
        };
        for (start, e) in cover {
            if e.check == Check::Unchecked && !s.check_extent(start, e) {
                return false;
            }
        }
        if let Err(e) = s.data.read_exact_at(place, at) {
            s.warn(&format!("a read of its stage file failed ({e})"));
            return false;
        }
        true
    }

    /// Whether the stage holds every byte of `[at, at + len)` (an
    /// extent an earlier job staged counts, checked when read).
    pub(crate) fn holds(&self, at: u64, len: u64) -> bool {
        lock(&self.shared.extents).covering(at, len).is_some()
    }

    /// The blocks the stage holds whole (see [`BLOCK`]).
    pub(crate) fn staged_blocks(&self) -> Vec<u64> {
        staged_blocks(&self.shared)
    }

    /// The blocks the stage held whole when opened: what the peers are
    /// told first, so that they ask for what an earlier job staged (and
    /// are answered, if it turns out damaged, that it is not there).
    pub(crate) fn blocks_at_open(&self) -> &[u64] {
        &self.at_open
    }

    /// Fills the node's blocks that another node is home to (block `b`'s
    /// home is node `b mod nodes`) from those nodes, not from the database
    /// file, so that a replicated stage costs the shared file system about
    /// one copy of the file per job, not one per node. Only where every
    /// node holds every block; says whether it applies.
    /// Until this says no, the stage assumes it will.
    pub(crate) fn fill_from_peers(&self, peers_fill: bool) -> bool {
        let p = &self.shared.placement;
        let applies = peers_fill && p.replicated() && p.nodes > 1;
        self.shared.from_peers.store(applies, Ordering::Relaxed);
        applies
    }

    /// Holes of the node's blocks it takes from their home nodes, up to
    /// `budget` bytes, each within one block; none while what was received
    /// before is not staged yet.
    pub(crate) fn holes_for_peers(&self, budget: u64) -> Vec<(u64, u64)> {
        let s = &self.shared;
        if !s.from_peers.load(Ordering::Relaxed)
            || !s.writing.load(Ordering::Relaxed)
            || !lock(&s.queue).received.is_empty()
        {
            return Vec::new();
        }
        let p = &s.placement;
        let extents = lock(&s.extents);
        let mut wanted = Vec::new();
        let mut total = 0;
        for b in (0..p.blocks()).filter(|b| b % p.nodes != p.node) {
            let at = b * BLOCK;
            for (h, n) in extents.holes(at, BLOCK.min(p.file_len - at)) {
                if total >= budget {
                    return wanted;
                }
                let n = n.min(budget - total);
                wanted.push((h, n));
                total += n;
            }
        }
        wanted
    }

    /// Stages `bytes` (the database's at `at`, sent by another node) as
    /// the writer can.
    pub(crate) fn take_received(&self, at: u64, bytes: Vec<u8>) {
        lock(&self.shared.queue).received.push_back((at, bytes));
        self.shared.wake.notify_one();
    }

    /// Queues the parts of `runs` (read into `dest`, packed in file order)
    /// this node holds and has not staged, for the writer to stage from the
    /// window as it can: nothing is copied here, and what it has not
    /// staged when the area is read into again is dropped
    /// ([`NodeStage::reclaim`]), left to the filler.
    pub(crate) fn offer(&self, runs: &[ReadRun], dest: WindowRange) {
        let s = &self.shared;
        if !s.writing.load(Ordering::Relaxed) {
            return;
        }
        let base = runs.first().map_or(0, |r| r.buf_offset);
        let mut wanted = Vec::new();
        {
            let extents = lock(&s.extents);
            for run in runs {
                for (at, len) in s.placement.held_pieces(run.file_offset, run.len) {
                    for (h, n) in extents.holes(at, len) {
                        wanted.push((h, n, run.buf_offset - base + (h - run.file_offset)));
                    }
                }
            }
        }
        if wanted.is_empty() {
            return;
        }
        let mut queue = lock(&s.queue);
        for (at, len, in_dest) in wanted {
            let mut done = 0;
            while done < len {
                let n = (len - done).min(WINDOW_PIECE);
                let Some(src) = dest.part(in_dest + done, n) else {
                    break;
                };
                queue.pieces.push_back(Piece { at: at + done, src });
                done += n;
            }
        }
        drop(queue);
        s.wake.notify_one();
    }

    /// Takes `dest` back from the writer before it is read into: queued
    /// pieces in it are dropped, and a piece being staged is waited for.
    pub(crate) fn reclaim(&self, dest: WindowRange) {
        self.reclaim_where(|r| Piece { at: 0, src: r }.overlaps(dest));
    }

    /// Takes the whole window back (the engine gives it up).
    pub(crate) fn reclaim_all(&self) {
        self.reclaim_where(|_| true);
    }

    fn reclaim_where(&self, taken: impl Fn(WindowRange) -> bool) {
        self.shared.reclaim_where(taken);
    }

    /// Held while the reader reads a round: the filler reads the database
    /// only between them. Its idle I/O priority is not enough, since most
    /// block-layer schedulers (`none`, `mq-deadline`) do not heed it, and a
    /// fill read beside a serving read slows the one the ranks wait for.
    /// `None` when the stage holds all of `runs`: a round read from the
    /// stage leaves the database to the filler. Only in the job's first
    /// epoch (`epoch` is the round's first): later, runs the stages lack
    /// are read from the file each epoch until the filler is done, and
    /// holding it back there kept it from ever catching up.
    pub(crate) fn serving(&self, runs: &[ReadRun], epoch: u64) -> Option<Serving<'_>> {
        let first = self.shared.first_epoch.fetch_min(epoch, Ordering::Relaxed);
        if epoch > first {
            return None;
        }
        let extents = lock(&self.shared.extents);
        if runs
            .iter()
            .all(|r| extents.covering(r.file_offset, r.len).is_some())
        {
            return None;
        }
        drop(extents);
        self.shared.serving.fetch_add(1, Ordering::SeqCst);
        Some(Serving(&self.shared))
    }

    fn close(&self) {
        let s = &self.shared;
        // A kept stage is completed from the database file: the peers are
        // gone.
        s.from_peers.store(false, Ordering::Relaxed);
        lock(&s.queue).closing = if self.keep {
            Closing::Finish
        } else {
            Closing::Stop
        };
        s.wake.notify_all();
        if let Some(handle) = lock(&self.writer).take() {
            let _ = handle.join();
        }
        if self.keep {
            s.save_manifest();
        } else {
            let _ = std::fs::remove_file(&s.manifest);
            let _ = std::fs::remove_file(s.dir.join("data.stage"));
            let _ = std::fs::remove_dir(&s.dir);
        }
    }
}

fn staged_blocks(s: &Shared) -> Vec<u64> {
    let p = &s.placement;
    let extents = lock(&s.extents);
    (0..p.blocks())
        .filter(|&b| {
            let at = b * BLOCK;
            extents.covering(at, BLOCK.min(p.file_len - at)).is_some()
        })
        .collect()
}

/// A serving read in progress (see [`NodeStage::serving`]).
pub(crate) struct Serving<'s>(&'s Shared);

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.0.serving.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for NodeStage {
    fn drop(&mut self) {
        self.close();
    }
}

impl Shared {
    /// Drops the queued pieces in the window `taken` covers and waits for
    /// the writer to leave the one it is writing, if covered.
    fn reclaim_where(&self, taken: impl Fn(WindowRange) -> bool) {
        let mut queue = lock(&self.queue);
        queue.pieces.retain(|p| !taken(p.src));
        while queue.busy.is_some_and(&taken) {
            queue = self
                .released
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn warn(&self, what: &str) {
        warn_once(&self.warned, &self.tally, &self.dir, what);
    }

    /// Checks an extent an earlier job staged against its checksum; a bad
    /// one is dropped, to be staged again.
    fn check_extent(&self, start: u64, e: Extent) -> bool {
        let mut bytes = vec![0u8; e.len as usize];
        let good = self.data.read_exact_at(&mut bytes, start).is_ok() && crc32c(&bytes) == e.crc;
        lock(&self.extents).set_checked(start, good);
        if !good {
            self.warn(&format!(
                "the staged bytes at {start} (+{}) fail their checksum",
                e.len
            ));
        }
        good
    }

    fn save_manifest(&self) {
        let text = manifest::encode(&self.identity, &lock(&self.extents));
        if let Err(e) = manifest::write(&self.manifest, &text) {
            self.warn(&format!("cannot write its manifest ({e})"));
        }
    }

    /// Stages `bytes` (the database's at `at`) where no extent holds them
    /// yet. Only the writer thread adds extents, so the holes found stay
    /// holes until written.
    fn stage(&self, at: u64, bytes: &[u8]) -> u64 {
        let holes = lock(&self.extents).holes(at, bytes.len() as u64);
        let mut written = 0;
        for (h, n) in holes {
            let piece = &bytes[(h - at) as usize..(h - at + n) as usize];
            if let Err(e) = self.data.write_all_at(piece, h) {
                self.writing.store(false, Ordering::Relaxed);
                self.warn(&format!("writing its stage file failed ({e})"));
                return written;
            }
            let extent = Extent {
                len: n,
                crc: crc32c(piece),
                check: Check::Good,
            };
            lock(&self.extents).map.insert(h, extent);
            written += n;
        }
        self.tally
            .stage_bytes_written
            .fetch_add(written, Ordering::Relaxed);
        written
    }

    /// The next piece of this node's blocks not staged yet, at or after
    /// block `*block` (advanced past blocks with nothing left).
    fn next_hole(&self, block: &mut u64) -> Option<(u64, u64)> {
        let p = &self.placement;
        while *block < p.blocks() {
            let at = *block * BLOCK;
            let len = BLOCK.min(p.file_len - at);
            let elsewhere = self.from_peers.load(Ordering::Relaxed) && *block % p.nodes != p.node;
            if p.holds(p.node, *block) && !elsewhere {
                if let Some(&(h, n)) = lock(&self.extents).holes(at, len).first() {
                    return Some((h, n.min(FILL_PIECE)));
                }
            }
            *block += 1;
        }
        None
    }

    /// Stages one piece of the node's blocks from the database file and
    /// says how many bytes; `None` when there is nothing left to fill or
    /// it failed.
    fn fill_one(&self, block: &mut u64, buf: &mut Vec<u8>) -> Option<u64> {
        let (at, len) = self.next_hole(block)?;
        buf.resize(len as usize, 0);
        if let Err(e) = self.db.read_exact_at(buf, at) {
            self.writing.store(false, Ordering::Relaxed);
            self.warn(&format!("reading the database to stage it failed ({e})"));
            return None;
        }
        self.tally.add_db_read(len);
        Some(self.stage(at, buf)).filter(|&n| n > 0)
    }

    /// Checks the next extent an earlier job staged that this job has not
    /// read yet, so a damaged one is staged again before it is needed;
    /// `None` when all are checked.
    fn check_one(&self, from: &mut u64) -> Option<u64> {
        let next = lock(&self.extents).next_unchecked(*from);
        let (start, e) = next?;
        *from = start + e.len;
        let _ = self.check_extent(start, e);
        Some(0)
    }

    /// Whether the filler waits: while a round read of the database is in
    /// progress, and through the job's first epoch, which the filler's
    /// reads of the shared file system slowed most (see
    /// docs/design/node-stage.md) and whose bytes the reader stages anyway.
    fn hold_fill(&self, closing: Closing) -> bool {
        self.serving.load(Ordering::SeqCst) > 0
            || (closing == Closing::Open
                && self.tally.current_epoch.load(Ordering::Relaxed)
                    <= self.first_epoch.load(Ordering::Relaxed))
    }

    fn write_loop(self: Arc<Self>) {
        priority::lower_this_thread();
        let mut block = 0u64;
        let mut checked_to = 0u64;
        let mut filling = true;
        let mut since_manifest = 0u64;
        let mut last_manifest = Instant::now();
        let mut buf = Vec::new();
        loop {
            let (next, received, closing) = {
                let mut q = lock(&self.queue);
                let stop = q.closing == Closing::Stop || !self.writing.load(Ordering::Relaxed);
                let next = if stop { None } else { q.pieces.pop_front() };
                q.busy = next.as_ref().map(|p| p.src);
                if stop {
                    q.pieces.clear();
                    q.received.clear();
                    drop(q);
                    self.released.notify_all();
                    break;
                }
                let received = match next {
                    None => q.received.pop_front(),
                    Some(_) => None,
                };
                (next, received, q.closing)
            };
            let staged = match (next, received) {
                (None, Some((at, bytes))) => self.stage(at, &bytes),
                (Some(piece), _) => {
                    // SAFETY: the piece is in the window, which the reader
                    // does not read into before reclaiming it (and waiting
                    // for `busy` to move on), nor gives up before
                    // `reclaim_all`; the ranks only read it meanwhile.
                    let bytes = unsafe { piece.src.as_shared() };
                    let n = self.stage(piece.at, bytes);
                    lock(&self.queue).busy = None;
                    self.released.notify_all();
                    n
                }
                (None, None) if filling && self.hold_fill(closing) => {
                    let q = lock(&self.queue);
                    if q.pieces.is_empty() && q.received.is_empty() && q.closing == Closing::Open {
                        let _ = self.wake.wait_timeout(q, Duration::from_millis(5));
                    }
                    0
                }
                (None, None) if filling => {
                    let done = self.fill_one(&mut block, &mut buf);
                    let done = done.or_else(|| self.check_one(&mut checked_to));
                    if done.is_none() {
                        // Extents found bad left holes: fill them, once.
                        block = 0;
                        filling = self.next_hole(&mut block).is_some();
                        if !filling {
                            self.save_manifest();
                        }
                    }
                    done.unwrap_or(0)
                }
                (None, None) if closing == Closing::Finish => {
                    // Kept complete: holes left by extents found bad after
                    // the fill ended are filled now.
                    block = 0;
                    filling = self.next_hole(&mut block).is_some();
                    if !filling {
                        break;
                    }
                    0
                }
                (None, None) => {
                    let q = lock(&self.queue);
                    if q.pieces.is_empty() && q.received.is_empty() && q.closing == Closing::Open {
                        let _ = self.wake.wait_timeout(q, Duration::from_secs(1));
                    }
                    0
                }
            };
            since_manifest += staged;
            if since_manifest >= MANIFEST_EVERY
                || (since_manifest > 0 && last_manifest.elapsed() > Duration::from_secs(5))
            {
                self.save_manifest();
                since_manifest = 0;
                last_manifest = Instant::now();
            }
        }
    }
}
