//! The exchange between node readers (see docs/design/node-stage.md):
//! the runs of a round that lie in a block another node has staged and
//! this one has not come from that node's reader over MPI, not from the
//! database file.
//!
//! Each round the readers gather, on the engine's thread, every node's
//! staged blocks (a bitmap) and what each asks of each other; a reader
//! asks a peer only for whole runs in blocks the peer reported staged at
//! the round before, and a peer answers every request, with the bytes or
//! with "not staged", so no reader waits for bytes that will not come.
//! The round's read thread then receives each peer's runs as one message
//! straight into their places in the window, serves the peers' requests
//! from its stage, and reads the rest (and whatever a peer could not
//! give) from its own stage or the database file.

use std::ops::Range;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::data_file::{DataFile, RunsDone, RunsRead, WindowRange};
use crate::mpi_raw::{Comm, PeerComm, ReduceOp, ThreadLevel, Transfers};
use crate::node_stage::{NodeStage, BLOCK};
use lmdbio_core::error::{Error, Result};
use lmdbio_core::plan::{ReadPlan, ReadRun};

/// Set to `off` to read every run a node does not hold from the database
/// file, as without the exchange (every reader must see the same value).
pub(crate) const SWITCH_VARIABLE: &str = "LMDBIO_STAGE_EXCHANGE";

/// Bytes of one request: the file offset and the length.
const REQUEST_BYTES: usize = 16;

/// Set in a request's length: bytes for the asker's stage (see
/// [`NodeStage::fill_from_peers`]), not a run of its round.
const FILL: u64 = 1 << 63;

/// What a reader asks its peers per round for its stage: about what the
/// round reads, within these bounds.
const FILL_MIN: u64 = 16 << 20;
const FILL_MAX: u64 = 64 << 20;

/// A node reader's side of the exchange, kept by the engine.
pub(crate) struct Exchange {
    /// For the rounds' agreements, on the engine's thread.
    plans: Comm,
    /// For the rounds' transfers, on their read threads.
    data: Arc<PeerComm>,
    /// Per node: the blocks it reported staged, 64 to a word.
    staged: Vec<Vec<u64>>,
    /// Every node has a stage: they fill each other's (a node's blocks
    /// whose home has none come from the file).
    pub(crate) fills: bool,
}

/// What a reader sends and receives in one round.
pub(crate) struct RoundExchange {
    data: Arc<PeerComm>,
    tag: i32,
    /// Per peer that sends this reader something: what it asked.
    receive: Vec<Asked>,
    /// Per peer that asks this reader for something: the peer, and the
    /// runs and fills it asked (file offset and length each).
    serve: Vec<(usize, Pieces, Pieces)>,
}

type Pieces = Vec<(u64, u64)>;

/// What a reader asks of one peer in a round. The peer sends the runs as
/// one message (tag), the fills as another (tag + 2), and one byte per
/// run, then per fill, saying whether it held them (tag + 1).
struct Asked {
    peer: usize,
    /// The runs, by index into the reader's runs of the round.
    runs: Vec<usize>,
    /// Holes of this node's stage, as file offset and length.
    fills: Pieces,
}

fn total(pieces: &[(u64, u64)]) -> usize {
    pieces.iter().map(|p| p.1 as usize).sum()
}

/// Bytes of one message at most: what a peer asked goes as several
/// messages, each sent as soon as it is read from the stage, so the
/// transfer of one overlaps the reading of the next.
const MESSAGE: usize = 8 << 20;

/// `pieces` cut into messages (at least one piece each, at most
/// [`MESSAGE`] bytes unless one piece is longer): each message's pieces
/// and its bytes in the pieces packed back to back. Sender and receiver
/// cut the same list the same way.
fn messages(pieces: &[(u64, u64)]) -> Vec<(Range<usize>, Range<usize>)> {
    let mut out = Vec::new();
    let (mut first, mut from, mut at) = (0, 0, 0);
    for (i, &(_, len)) in pieces.iter().enumerate() {
        if i > first && at + len as usize - from > MESSAGE {
            out.push((first..i, from..at));
            (first, from) = (i, at);
        }
        at += len as usize;
    }
    if pieces.len() > first {
        out.push((first..pieces.len(), from..at));
    }
    out
}

impl RoundExchange {
    /// Takes part in the round's transfers without reading anything:
    /// receives what the peers send into scratch memory and answers every
    /// request "not staged", so that no peer waits for a reader whose round
    /// could not start. `runs` are the reader's runs of the round.
    pub(crate) fn settle(&self, runs: &[ReadRun]) {
        let asked: Vec<[Pieces; 2]> = self
            .receive
            .iter()
            .map(|a| {
                let lens = a
                    .runs
                    .iter()
                    .map(|&i| (0, runs.get(i).map_or(0, |r| r.len)));
                [lens.collect(), a.fills.clone()]
            })
            .collect();
        let mut scratch: Vec<[Vec<u8>; 3]> = asked
            .iter()
            .map(|[r, f]| {
                [
                    vec![0u8; total(r)],
                    vec![0u8; r.len() + f.len()],
                    vec![0u8; total(f)],
                ]
            })
            .collect();
        let mut transfers = Transfers::new(self.data.comm());
        let mut posted = Ok(());
        let receives = self.receive.iter().zip(&asked).zip(&mut scratch);
        for ((a, [r, f]), [bytes, answer, fills]) in receives {
            // SAFETY: `scratch` outlives the transfers, waited for below
            // (or on drop) before it goes, and is not touched meanwhile.
            posted = posted.and_then(|()| unsafe {
                for (_, at) in messages(r) {
                    transfers.receive(a.peer, self.tag, &mut bytes[at])?;
                }
                for (_, at) in messages(f) {
                    transfers.receive(a.peer, self.tag + 2, &mut fills[at])?;
                }
                transfers.receive(a.peer, self.tag + 1, answer)
            });
        }
        for (peer, runs, fills) in &self.serve {
            posted = posted.and_then(|()| {
                for (pieces, tag) in [(runs, self.tag), (fills, self.tag + 2)] {
                    for (_, at) in messages(pieces) {
                        transfers.send(*peer, tag, vec![0; at.len()])?;
                    }
                }
                transfers.send(*peer, self.tag + 1, vec![0; runs.len() + fills.len()])
            });
        }
        let _ = posted.and_then(|()| transfers.wait());
    }

    /// The runs (by index) this reader asks of peers, sorted.
    pub(crate) fn asked(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self
            .receive
            .iter()
            .flat_map(|a| a.runs.iter().copied())
            .collect();
        all.sort_unstable();
        all
    }
}

/// The blocks of a file of `len` bytes.
fn blocks(len: u64) -> u64 {
    len.div_ceil(BLOCK)
}

fn has(bits: &[u64], b: u64) -> bool {
    bits.get((b / 64) as usize)
        .is_some_and(|w| w >> (b % 64) & 1 == 1)
}

/// `plan` with every run that crosses a block boundary cut there, so that
/// each run lies in one block and so on one holder.
pub(crate) fn split_at_blocks(mut plan: ReadPlan) -> ReadPlan {
    let mut runs = Vec::with_capacity(plan.runs.len());
    for run in &plan.runs {
        let mut done = 0;
        while done < run.len {
            let at = run.file_offset + done;
            let n = (run.len - done).min(BLOCK - at % BLOCK);
            runs.push(ReadRun {
                file_offset: at,
                len: n,
                buf_offset: run.buf_offset + done,
            });
            done += n;
        }
    }
    plan.runs = runs;
    plan
}

impl Exchange {
    /// Sets up the exchange among the node readers `readers` (collective
    /// over them); `None` on every reader when any of them cannot take
    /// part: MPI without `MPI_THREAD_MULTIPLE` (the transfers run on the
    /// read threads), staggered reads (a reader waiting for its turn
    /// would leave its peers waiting), or the exchange switched off.
    pub(crate) fn open(
        readers: &Comm,
        stage: Option<&NodeStage>,
        file_len: u64,
        staggered: bool,
    ) -> Result<Option<Exchange>> {
        if readers.size() < 2 {
            return Ok(None);
        }
        let switched_off = std::env::var(SWITCH_VARIABLE).is_ok_and(|v| v.trim() == "off");
        let able = ThreadLevel::current() == ThreadLevel::Multiple && !staggered && !switched_off;
        let mut all_able = [i64::from(able), i64::from(stage.is_some())];
        readers.allreduce_i64(&mut all_able, ReduceOp::Min)?;
        if all_able[0] == 0 {
            return Ok(None);
        }

        let plans = Comm::dup(readers.raw())?;
        let data = PeerComm::new(Comm::dup(readers.raw())?)
            .ok_or_else(|| Error::Internal("MPI lost MPI_THREAD_MULTIPLE".into()))?;
        let data = Arc::new(data);
        let words = blocks(file_len).div_ceil(64) as usize;
        let mut exchange = Exchange {
            staged: vec![vec![0; words]; plans.size()],
            plans,
            data,
            fills: all_able[1] == 1,
        };
        let at_open = stage.map_or(Vec::new(), |s| s.blocks_at_open().to_vec());
        let mine: Vec<i64> = exchange
            .bits(&at_open)
            .into_iter()
            .map(|w| w as i64)
            .collect();
        let all = exchange.plans.allgather_i64(&mine)?;
        exchange.set_staged(&all, 0, words);
        Ok(Some(exchange))
    }

    fn words(&self) -> usize {
        self.staged.first().map_or(0, Vec::len)
    }

    /// `blocks` as bit words.
    fn bits(&self, blocks: &[u64]) -> Vec<u64> {
        let mut bits = vec![0u64; self.words()];
        for &b in blocks {
            if let Some(w) = bits.get_mut((b / 64) as usize) {
                *w |= 1 << (b % 64);
            }
        }
        bits
    }

    /// Takes every node's bit words from `all` (rank-major, `stride`
    /// words per rank, the bits at `skip`).
    fn set_staged(&mut self, all: &[i64], skip: usize, stride: usize) {
        let words = self.words();
        for (r, bits) in self.staged.iter_mut().enumerate() {
            let at = r * stride + skip;
            if let Some(got) = all.get(at..at + words) {
                *bits = got.iter().map(|&w| w as u64).collect();
            }
        }
    }

    /// Agrees on this round's transfers (collective over the readers,
    /// every round, in round order): which of `runs` (this reader's runs
    /// of the round) and which holes of its stage it asks of which peer,
    /// and what each peer asks of it.
    pub(crate) fn plan_round(
        &mut self,
        runs: &[ReadRun],
        stage: Option<&NodeStage>,
        round: u32,
    ) -> Result<RoundExchange> {
        let nodes = self.plans.size();
        let me = self.plans.rank();
        let mut asks: Vec<Vec<usize>> = vec![Vec::new(); nodes];
        for (i, run) in runs.iter().enumerate() {
            let b = run.file_offset / BLOCK;
            let one_block = run.len > 0 && (run.file_offset + run.len - 1) / BLOCK == b;
            if !one_block || stage.is_some_and(|s| s.holds(run.file_offset, run.len)) {
                continue;
            }
            if let Some(h) = self.holder(b) {
                asks[h].push(i);
            }
        }
        let mut fills: Vec<Pieces> = vec![Vec::new(); nodes];
        let reading: u64 = runs.iter().map(|r| r.len).sum();
        let budget = reading.clamp(FILL_MIN, FILL_MAX);
        for (at, len) in stage.map_or(Vec::new(), |s| s.holes_for_peers(budget)) {
            if let Some(h) = self.holder(at / BLOCK) {
                fills[h].push((at, len));
            }
        }
        let words = self.words();
        let stride = nodes + words;
        let mut counts: Vec<i64> = asks
            .iter()
            .zip(&fills)
            .map(|(a, f)| (a.len() + f.len()) as i64)
            .collect();
        let now = stage.map_or(Vec::new(), NodeStage::staged_blocks);
        counts.extend(self.bits(&now).into_iter().map(|w| w as i64));
        let all = self.plans.allgather_i64(&counts)?;
        let mut mine = Vec::new();
        for (a, f) in asks.iter().zip(&fills) {
            let asked = a.iter().map(|&i| (runs[i].file_offset, runs[i].len));
            for (at, len) in asked.chain(f.iter().map(|&(at, len)| (at, len | FILL))) {
                mine.extend_from_slice(&at.to_le_bytes());
                mine.extend_from_slice(&len.to_le_bytes());
            }
        }
        let asked = |r: usize, h: usize| all[r * stride + h].max(0) as usize;
        let sizes: Vec<u64> = (0..nodes)
            .map(|r| (0..nodes).map(|h| asked(r, h)).sum::<usize>() as u64 * REQUEST_BYTES as u64)
            .collect();
        let mut requests = vec![0u8; sizes.iter().sum::<u64>() as usize];
        self.plans
            .allgatherv_bytes(&mut [(&mine, &sizes, &mut requests)])?;
        let mut serve = Vec::new();
        let mut from = 0usize;
        for (r, &size) in sizes.iter().enumerate() {
            let before: usize = (0..me).map(|h| asked(r, h)).sum();
            let n = asked(r, me);
            if r != me && n > 0 {
                let at = from + before * REQUEST_BYTES;
                let (mut runs, mut fills) = (Vec::new(), Vec::new());
                for c in requests[at..at + n * REQUEST_BYTES].chunks_exact(REQUEST_BYTES) {
                    let word =
                        |k: usize| u64::from_le_bytes(c[k..k + 8].try_into().unwrap_or_default());
                    match word(8) {
                        len if len & FILL != 0 => fills.push((word(0), len & !FILL)),
                        len => runs.push((word(0), len)),
                    }
                }
                serve.push((r, runs, fills));
            }
            from += size as usize;
        }
        self.set_staged(&all, nodes, stride);
        Ok(RoundExchange {
            data: Arc::clone(&self.data),
            // Below the tags of the timeout's roll call.
            tag: (round % 4096) as i32 * 4,
            receive: asks
                .into_iter()
                .zip(fills)
                .enumerate()
                .filter(|(_, (a, f))| !a.is_empty() || !f.is_empty())
                .map(|(peer, (runs, fills))| Asked { peer, runs, fills })
                .collect(),
            serve,
        })
    }

    /// The node to ask for block `b`: its home (`b mod nodes`) if that
    /// reported it staged, else the next node after it that did; never
    /// this one.
    fn holder(&self, b: u64) -> Option<usize> {
        let nodes = self.plans.size();
        let me = self.plans.rank();
        (0..nodes)
            .map(|d| (b as usize + d) % nodes)
            .find(|&h| h != me && has(&self.staged[h], b))
    }
}

/// What [`read_runs`] did.
pub(crate) struct Exchanged {
    pub(crate) read: RunsRead,
    /// Per run, whether it came from a peer (empty without an exchange).
    pub(crate) remote: Vec<bool>,
    /// Bytes peers sent for this node's stage.
    pub(crate) filled: u64,
}

/// Reads `runs` as [`DataFile::read_runs`] does, but receives the runs
/// and stage fills `exchange` asks of peers from them and serves what
/// peers ask of this reader, meanwhile.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_runs(
    file: &DataFile,
    runs: &[ReadRun],
    order: &[usize],
    dest: WindowRange,
    streams: usize,
    progress: &RunsDone<'_>,
    staged: &[AtomicBool],
    exchange: Option<&RoundExchange>,
) -> Result<Exchanged> {
    let Some(ex) = exchange.filter(|x| !x.receive.is_empty() || !x.serve.is_empty()) else {
        return file
            .read_runs(runs, order, dest, streams, progress, staged)
            .map(|read| Exchanged {
                read,
                remote: Vec::new(),
                filled: 0,
            });
    };
    let comm = ex.data.comm();
    let mut remote = vec![false; runs.len()];
    let base = runs.first().map_or(0, |r| r.buf_offset);
    let mut places = Vec::with_capacity(ex.receive.len());
    for a in &ex.receive {
        let mut pieces = Vec::with_capacity(a.runs.len());
        for &i in &a.runs {
            let fits = runs.get(i).and_then(|run| {
                let at = run.buf_offset.checked_sub(base)?;
                (at + run.len <= dest.len as u64).then_some((at, run.len))
            });
            let Some(piece) = fits else {
                ex.settle(runs);
                return Err(Error::Internal(
                    "an exchange names a run outside the round".into(),
                ));
            };
            pieces.push(piece);
            remote[i] = true;
        }
        places.push(pieces);
    }
    let mut receiving = Transfers::new(comm);
    let mut answers: Vec<Vec<u8>> = ex
        .receive
        .iter()
        .map(|a| vec![0; a.runs.len() + a.fills.len()])
        .collect();
    let mut fill_bytes: Vec<Vec<u8>> = ex
        .receive
        .iter()
        .map(|a| vec![0; total(&a.fills)])
        .collect();
    let receives = ex
        .receive
        .iter()
        .zip(&places)
        .zip(answers.iter_mut().zip(&mut fill_bytes));
    for ((a, pieces), (answer, fills)) in receives {
        // SAFETY: every piece lies in `dest` (checked above), which no one
        // else touches until this read is published, after the transfers
        // complete (waited for below, or on drop); `answer` and `fills`
        // outlive them.
        unsafe {
            for (m, _) in messages(pieces) {
                receiving.receive_scattered(a.peer, ex.tag, dest.ptr, &pieces[m])?;
            }
            for (_, at) in messages(&a.fills) {
                receiving.receive(a.peer, ex.tag + 2, &mut fills[at])?;
            }
            receiving.receive(a.peer, ex.tag + 1, answer)?;
        }
    }
    let local: Vec<usize> = order.iter().copied().filter(|&i| !remote[i]).collect();
    let local_at: Vec<usize> = (0..order.len()).filter(|&p| !remote[order[p]]).collect();
    let first_remote = order.iter().position(|&i| remote[i]).unwrap_or(order.len());
    let stage = file.stage();
    let (read, served) = std::thread::scope(|scope| {
        let server = scope.spawn(|| serve(&ex.data, ex, stage));
        let head = |n: usize| local_at.get(n).copied().unwrap_or(order.len());
        let read = file.read_runs(
            runs,
            &local,
            dest,
            streams,
            &|n| progress(head(n).min(first_remote)),
            staged,
        );
        let served = server
            .join()
            .unwrap_or_else(|_| Err(Error::Internal("the exchange's server panicked".into())));
        (read, served)
    });
    let received = receiving.wait();
    let sent = served.and_then(Transfers::wait);
    let mut read = read?;
    received?;
    sent?;
    // What a peer could not give (its stage lost it) comes from here.
    let mut missing = Vec::new();
    let mut filled = 0;
    for ((a, answer), fills) in ex.receive.iter().zip(&answers).zip(&fill_bytes) {
        let (for_runs, for_fills) = answer.split_at(a.runs.len());
        for (&i, &ok) in a.runs.iter().zip(for_runs) {
            if ok != 1 {
                remote[i] = false;
                missing.push(i);
            }
        }
        let mut at = 0usize;
        for (&(offset, len), &ok) in a.fills.iter().zip(for_fills) {
            let bytes = &fills[at..at + len as usize];
            at += len as usize;
            if let (1, Some(stage)) = (ok, stage) {
                stage.take_received(offset, bytes.to_vec());
                filled += len;
            }
        }
    }
    if !missing.is_empty() {
        let more = file.read_runs(runs, &missing, dest, streams, &|_| {}, staged)?;
        read.requests += more.requests;
        read.direct_requests += more.direct_requests;
        read.staged_requests += more.staged_requests;
    }
    Ok(Exchanged {
        read,
        remote,
        filled,
    })
}

/// Sends each peer what it asked for, from this node's stage, with one
/// byte per run and per fill saying whether it held the bytes sent.
fn serve<'c>(
    peers: &'c PeerComm,
    ex: &RoundExchange,
    stage: Option<&NodeStage>,
) -> Result<Transfers<'c>> {
    let mut sending = Transfers::new(peers.comm());
    for (peer, runs, fills) in &ex.serve {
        let mut answer = Vec::with_capacity(runs.len() + fills.len());
        for (pieces, tag) in [(runs, ex.tag), (fills, ex.tag + 2)] {
            for (m, at) in messages(pieces) {
                let mut bytes = vec![0u8; at.len()];
                let mut place = bytes.as_mut_slice();
                for &(offset, len) in &pieces[m] {
                    let (here, rest) = place.split_at_mut(len as usize);
                    answer.push(u8::from(stage.is_some_and(|s| s.read_into(here, offset))));
                    place = rest;
                }
                sending.send(*peer, tag, bytes)?;
            }
        }
        sending.send(*peer, ex.tag + 1, answer)?;
    }
    Ok(sending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_cut_at_block_boundaries_and_stay_packed() {
        let plan = ReadPlan {
            runs: vec![
                ReadRun {
                    file_offset: BLOCK - 10,
                    len: 2 * BLOCK + 20,
                    buf_offset: 0,
                },
                ReadRun {
                    file_offset: 5 * BLOCK,
                    len: 7,
                    buf_offset: 2 * BLOCK + 20,
                },
            ],
            placements: Vec::new(),
            buffer_len: 2 * BLOCK + 27,
        };
        let split = split_at_blocks(plan);
        let cut: Vec<(u64, u64, u64)> = split
            .runs
            .iter()
            .map(|r| (r.file_offset, r.len, r.buf_offset))
            .collect();
        assert_eq!(
            cut,
            vec![
                (BLOCK - 10, 10, 0),
                (BLOCK, BLOCK, 10),
                (2 * BLOCK, BLOCK, BLOCK + 10),
                (3 * BLOCK, 10, 2 * BLOCK + 10),
                (5 * BLOCK, 7, 2 * BLOCK + 20),
            ]
        );
        assert_eq!(split.buffer_len, 2 * BLOCK + 27);
    }

    #[test]
    fn messages_hold_whole_pieces_and_cover_them_in_order() {
        let m = MESSAGE as u64;
        let pieces = [(0, m / 2), (9, m / 2), (5, 1), (7, 2 * m), (1, 3)];
        assert_eq!(
            messages(&pieces),
            vec![
                (0..2, 0..MESSAGE),
                (2..3, MESSAGE..MESSAGE + 1),
                (3..4, MESSAGE + 1..3 * MESSAGE + 1),
                (4..5, 3 * MESSAGE + 1..3 * MESSAGE + 4),
            ]
        );
        assert!(messages(&[]).is_empty());
    }

    #[test]
    fn block_bits_read_back() {
        let bits = [0b101u64, 1 << 3];
        assert!(has(&bits, 0) && !has(&bits, 1) && has(&bits, 2));
        assert!(has(&bits, 67) && !has(&bits, 66) && !has(&bits, 200));
    }
}
