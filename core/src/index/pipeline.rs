//! The index scan's leaf pages read on one thread and parsed on others:
//! while chunk `i + 1` is read (and the one after announced to the
//! storage), workers parse chunk `i` and earlier ones. Each chunk is
//! parsed on its own, then takes its turn in key order: its first key is
//! checked against the last key of the chunks before it (the seam), and
//! its kept pages take the area's next slots, which it fills outside the
//! turn. The reading thread appends the chunks' records to the part in
//! key order between its reads. The results, and the first error in key
//! order, are the one-thread loop's (see docs/design/inline-records.md,
//! "Parsed beside the reads").

use std::sync::mpsc;
use std::sync::{Condvar, Mutex, MutexGuard};

use super::kept::{advise, inline_pages, reserve_like};
use super::{parse_leaf_batch_into, read_spanning_into, spanned_slots, IndexPart, Pages, PagesIn};
use crate::database::{Database, Tree};
use crate::error::{Error, Result};
use crate::format::TreePage;
use crate::source::ReadAt;

/// Where the kept pages go: `area` (slots of the page size), at most
/// `room` of them; keys are held in the part only if `keys`.
pub(super) struct Keeping<'a> {
    pub area: &'a mut [u8],
    pub room: usize,
    pub keys: bool,
}

/// One chunk read: its pages in key order (`leaves[range]`), sorted, the
/// slot of each in `bytes`.
struct Job {
    index: usize,
    range: std::ops::Range<usize>,
    sorted: Vec<u64>,
    slots: Vec<usize>,
    bytes: Vec<u8>,
}

/// What the chunks' turns decide, in key order.
struct Turns<'a> {
    /// The chunk whose turn it is.
    next: usize,
    /// The first error in key order; no turn is taken after it.
    failed: Option<Error>,
    /// The last key of the chunks before `next`, for the seam's check.
    last: Option<Vec<u8>>,
    placed: Vec<u64>,
    room: usize,
    /// The area's slots not yet handed to a chunk.
    rest: &'a mut [u8],
}

/// What the workers share.
struct Shared<'s, 'a, R: ReadAt> {
    db: &'s Database<R>,
    tree: &'s Tree,
    leaves: &'s [u64],
    keys: bool,
    jobs: Mutex<mpsc::Receiver<Job>>,
    free: mpsc::Sender<Vec<u8>>,
    turns: Mutex<Turns<'a>>,
    turned: Condvar,
}

/// Parses `leaves` (in key order) in chunks of `chunk_pages`, reading on
/// this thread and parsing on `workers` others; keeps, in `keeping.area`'s
/// slots from the first, the first `keeping.room` pages in key order that
/// hold an inline value. Returns the part and the kept pages by slot.
pub(super) fn parse_pipelined<R: ReadAt>(
    db: &Database<R>,
    tree: &Tree,
    leaves: &[u64],
    (chunk_pages, workers): (usize, usize),
    keeping: Keeping<'_>,
) -> Result<(IndexPart, Vec<u64>)> {
    let psize = db.page_size() as usize;
    let room = keeping.room.min(keeping.area.len() / psize);
    let (job_tx, job_rx) = mpsc::channel::<Job>();
    let (free_tx, free_rx) = mpsc::channel::<Vec<u8>>();
    let (done_tx, done_rx) = mpsc::channel::<(usize, IndexPart)>();
    // One buffer per worker, one being read into and one read ahead.
    for _ in 0..workers + 2 {
        let _ = free_tx.send(Vec::new());
    }
    let shared = Shared {
        db,
        tree,
        leaves,
        keys: keeping.keys,
        jobs: Mutex::new(job_rx),
        free: free_tx,
        turns: Mutex::new(Turns {
            next: 0,
            failed: None,
            last: None,
            placed: Vec::new(),
            room,
            rest: keeping.area,
        }),
        turned: Condvar::new(),
    };
    let chunks = leaves.len().div_ceil(chunk_pages);
    // Chunks parsed and placed, appended to `part` in key order by this
    // thread between its reads.
    let mut part = IndexPart::default();
    let mut pending: Vec<Option<IndexPart>> = (0..chunks).map(|_| None).collect();
    let mut appended = 0;
    let mut append = |(index, chunk): (usize, IndexPart), part: &mut IndexPart| {
        pending[index] = Some(chunk);
        while let Some(chunk) = pending.get_mut(appended).and_then(Option::take) {
            part.append(&chunk);
            appended += 1;
            if appended == 1 {
                let done = chunk_pages.min(leaves.len());
                reserve_like(part, done, leaves.len());
            }
        }
    };
    let mut read_failed = None;
    std::thread::scope(|s| {
        for _ in 0..workers {
            let (shared, done) = (&shared, done_tx.clone());
            s.spawn(move || work(shared, done));
        }
        drop(done_tx);
        for index in 0..chunks {
            if lock(&shared.turns).failed.is_some() {
                break;
            }
            let Ok(mut bytes) = free_rx.recv() else { break };
            let range = index * chunk_pages..((index + 1) * chunk_pages).min(leaves.len());
            let mut sorted = leaves[range.clone()].to_vec();
            sorted.sort_unstable();
            let span = spanned_slots(&sorted) * psize;
            if bytes.len() < span {
                bytes.resize(span, 0);
            }
            let mut slots = Vec::new();
            if let Err(e) =
                read_spanning_into(db.source(), psize as u32, &sorted, &mut bytes, &mut slots)
            {
                read_failed = Some(e);
                break;
            }
            if index + 1 < chunks {
                let following = range.end..((index + 2) * chunk_pages).min(leaves.len());
                advise(db.source(), psize as u64, &leaves[following]);
            }
            let job = Job {
                index,
                range,
                sorted,
                slots,
                bytes,
            };
            if job_tx.send(job).is_err() {
                break;
            }
            while let Ok(done) = done_rx.try_recv() {
                append(done, &mut part);
            }
        }
        drop(job_tx);
        for done in done_rx.iter() {
            append(done, &mut part);
        }
    });
    let turns = shared.turns.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = turns.failed {
        return Err(e);
    }
    if let Some(e) = read_failed {
        return Err(e);
    }
    Ok((part, turns.placed))
}

/// A worker: parses, places and hands on chunks until there are no more.
fn work<R: ReadAt>(shared: &Shared<R>, done: mpsc::Sender<(usize, IndexPart)>) {
    loop {
        let job = match lock(&shared.jobs).recv() {
            Ok(job) => job,
            Err(_) => break,
        };
        let index = job.index;
        let (bytes, chunk) = parse_and_place(shared, job);
        let _ = shared.free.send(bytes);
        if let Some(chunk) = chunk {
            let _ = done.send((index, chunk));
        }
    }
}

/// Parses one chunk, takes its turn and copies its kept pages to their
/// slots. Returns the chunk's buffer for the next read, and the chunk's
/// part if its turn found nothing wrong.
fn parse_and_place<R: ReadAt>(shared: &Shared<R>, job: Job) -> (Vec<u8>, Option<IndexPart>) {
    let db = shared.db;
    let psize = db.page_size() as usize;
    let pages = PagesIn {
        pgnos: &job.sorted,
        slots: Some(&job.slots),
        bytes: &job.bytes,
        psize,
    };
    let pgnos = &shared.leaves[job.range.clone()];
    let mut chunk = IndexPart::default();
    let parsed = parse_leaf_batch_into(db, shared.tree, pgnos, &pages, (&mut chunk, shared.keys));
    // Every page holding an inline value: how many fit is known in the
    // turn.
    let inline = inline_pages(&chunk.entries, psize as u64, usize::MAX);
    let mut t = lock(&shared.turns);
    while t.next != job.index && t.failed.is_none() {
        t = shared.turned.wait(t).unwrap_or_else(|e| e.into_inner());
    }
    if t.failed.is_some() {
        return (job.bytes, None);
    }
    let order = shared.tree.key_order();
    let seam = match (&t.last, chunk.order.ends()) {
        (Some(last), Some((first, _))) if !order.compare(last, first).is_lt() => {
            Err(db.corrupt(first_key_page(pgnos, &pages), "node 0: keys out of order"))
        }
        _ => Ok(()),
    };
    if let Err(e) = seam.and(parsed) {
        t.failed = Some(e);
        shared.turned.notify_all();
        return (job.bytes, None);
    }
    if let Some((_, last)) = chunk.order.ends() {
        let kept = t.last.get_or_insert_with(Vec::new);
        kept.clear();
        kept.extend_from_slice(last);
    }
    let keep = &inline[..inline.len().min(t.room)];
    t.room -= keep.len();
    let rest = std::mem::take(&mut t.rest);
    let (mine, rest) = rest.split_at_mut(keep.len() * psize);
    t.rest = rest;
    t.placed.extend_from_slice(keep);
    t.next += 1;
    shared.turned.notify_all();
    drop(t);
    for (k, &pgno) in keep.iter().enumerate() {
        mine[k * psize..(k + 1) * psize].copy_from_slice(pages.page(pgno));
    }
    (job.bytes, Some(chunk))
}

/// The page of a chunk's first key: the first of its pages (in key order)
/// that holds a node. LMDB keeps no empty leaf but an empty tree's root.
fn first_key_page(pgnos: &[u64], pages: &PagesIn) -> u64 {
    pgnos
        .iter()
        .copied()
        .find(|&p| TreePage::parse(p, pages.page(p)).is_ok_and(|page| !page.is_empty()))
        .unwrap_or(pgnos.first().copied().unwrap_or(0))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
