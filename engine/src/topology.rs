//! The job's node structure, kept between engines.
//!
//! An engine needs the node's communicator (`MPI_Comm_split_type(SHARED)`,
//! cut into virtual nodes on request), the readers' and the masters'
//! communicators and a node-shared window. Each is made by a blocking
//! collective call, and where ranks outnumber cores MPICH's blocking calls
//! spin, which can take longer than reading the database (see
//! docs/design/one-reader-per-node.md). They depend only on the
//! ranks and two options, so they are made once: an engine takes them at
//! open and gives them back when dropped.
//!
//! The window's memory stays mapped between engines too: a page touched
//! for the first time costs a fault on every rank of the node, and a
//! 256 MiB window is 65,536 of them (see
//! docs/design/one-reader-per-node.md). [`prepare`] makes
//! all of it ahead of the first open, maps the window on every rank, and
//! [`release_memory`] gives the memory back to the system while keeping
//! the rest.
//!
//! The world communicator the engine works on (a duplicate of the
//! caller's) is kept with them, for the same reason.
//!
//! Open and drop are collective, so every member of a job holds the same
//! kept topologies; open still agrees on the one it takes (by an id agreed
//! when it was made) and makes a new one if any rank disagrees.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use super::agree::{agree, agree_resource};
use super::EngineOptions;
use crate::mpi_raw::{self, Comm, RawComm, ReduceOp, SharedWindow};
use lmdbio_core::error::Result;

/// Window bytes set aside for the record index when a window is made
/// ahead of knowing the database (24 bytes per record plus its key: a
/// million records with 40-byte keys fit).
pub const INDEX_ALLOWANCE: usize = 64 << 20;

/// The communicators and shared window of one grouping of ranks into
/// nodes, kept between engines on the same ranks.
pub(crate) struct NodeTopology {
    /// A duplicate of the communicator the topology was made for: the
    /// world of the engines that hold it, and what later opens compare
    /// their communicator with (`MPI_Comm_compare`).
    ranks: Comm,
    ranks_per_node: Option<usize>,
    readers_per_node: usize,
    /// Same on every rank of the job.
    id: i64,
    /// The node's ranks (shared memory, or K consecutive ranks).
    pub node: Comm,
    /// On the node's first `readers_per_node` ranks.
    pub readers: Option<Comm>,
    /// On the node's first rank.
    pub masters: Option<Comm>,
    /// World ranks of the node's members, in node order.
    pub members: Vec<u64>,
    /// Readers on this machine (the shared-memory node): more than
    /// `readers_per_node` where virtual nodes share it.
    pub machine_readers: usize,
    /// The node-shared window while no engine uses it.
    pub window: Option<SharedWindow>,
}

static KEPT: Mutex<Vec<NodeTopology>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicI64 = AtomicI64::new(0);

impl NodeTopology {
    /// Made for the ranks of `ranks` with these node options.
    fn made_for(
        &self,
        ranks: &Comm,
        ranks_per_node: Option<usize>,
        readers_per_node: usize,
    ) -> bool {
        self.ranks_per_node == ranks_per_node
            && self.readers_per_node == readers_per_node
            && ranks.same_ranks_as(self.ranks.raw()).unwrap_or(false)
    }

    /// The engine's world communicator while it holds this topology: a
    /// duplicate of the caller's, made with the topology and kept with it.
    pub(crate) fn world(&self) -> &Comm {
        &self.ranks
    }

    /// Makes sure the window holds at least `len` bytes, making a new one
    /// if not (then returns true). Collective over the world.
    pub(crate) fn ensure_window(&mut self, len: usize) -> Result<bool> {
        // Every rank of a node holds the same window, so the node's ranks
        // all free it or none does.
        let fits = self.window.as_ref().is_some_and(|w| w.len() >= len);
        if !fits {
            self.window = None;
            let made = SharedWindow::allocate(&self.node, len);
            self.window = Some(agree_resource(&self.ranks, made)?);
        }
        Ok(!fits)
    }
}

/// Takes the kept topology for the ranks of `caller` (the caller's own
/// communicator) and these options, or makes one (then returns true).
/// `local` is this rank's verdict on the options, agreed in the same
/// reduction; on any rank's failure every rank returns it and keeps what
/// it had. Collective over `caller`.
///
/// With a topology kept this reduction is the only call an open makes on
/// the caller's communicator, and the engine works on the topology's
/// duplicate: a fresh duplicate per open was one more collective call,
/// and each one before the first read delays every rank where ranks
/// outnumber cores (see docs/design/agreement.md).
///
/// `same` is this rank's `same_inputs::Inputs`, checked in the same
/// reduction before anything is made from the options.
pub(crate) fn take(
    caller: &Comm,
    options: &EngineOptions,
    local: Result<()>,
    same: &super::same_inputs::Inputs,
) -> Result<(NodeTopology, bool)> {
    let local = local.and_then(|()| mpi_raw::call_at_finalize(release_all));
    let candidate = {
        let mut kept = KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        kept.iter()
            .position(|t| t.made_for(caller, options.ranks_per_node, options.readers_per_node))
            .map(|i| kept.remove(i))
    };
    let id = candidate.as_ref().map_or(-1, |t| t.id);
    let mut bounds = vec![id, -id];
    bounds.extend(same.words());
    let agreed = agree(caller, local, &mut bounds).and_then(|()| same.check(caller, &bounds[2..]));
    if let Err(e) = agreed {
        if let Some(t) = candidate {
            give_back(t);
        }
        return Err(e);
    }
    let (lowest, highest) = (bounds[0], -bounds[1]);
    match candidate {
        Some(t) if lowest == highest => Ok((t, false)),
        other => {
            // Some rank lacks it or holds another (only after a misuse such
            // as dropping an engine on some ranks): ours is leaked, as
            // freeing it is a collective the others may not enter, and a
            // new one is made.
            if let Some(t) = other {
                if let Some(w) = &t.window {
                    w.release_pages();
                }
                std::mem::forget(t);
            }
            make(caller, options).map(|t| (t, true))
        }
    }
}

/// Keeps `topology` for the next engine on the same ranks. If one is kept
/// already (two engines were open at once), this one is freed: the node's
/// ranks all do the same, as they all hold the same kept set.
pub(crate) fn give_back(topology: NodeTopology) {
    let surplus = {
        let mut kept = KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let twin = kept.iter().any(|t| {
            t.made_for(
                &topology.ranks,
                topology.ranks_per_node,
                topology.readers_per_node,
            )
        });
        if twin {
            Some(topology)
        } else {
            kept.push(topology);
            None
        }
    };
    drop(surplus);
}

/// Makes the topology and window an engine with `options` on `comm` will
/// take at open, and maps the window's first `window_bytes` on every rank
/// of each node (the values' area of an open with a small index; the rest
/// is mapped as it is first used), so the first open neither makes nor
/// faults anything. Where `options` want direct reads (`direct_io` other
/// than never), the window is asked for 2 MiB pages first, which direct
/// reads need to reach the device in large requests. Calling it again
/// after [`release_memory`] maps the memory again. Collective over `comm`.
pub fn prepare(comm: RawComm, options: &EngineOptions) -> Result<()> {
    let caller = Comm::caller(comm)?;
    let same = crate::same_inputs::Inputs::of(None, options);
    let (mut topology, _) = take(
        &caller,
        options,
        crate::options::check_options(options),
        &same,
    )?;
    let made = topology.ensure_window(options.window_bytes.saturating_add(INDEX_ALLOWANCE));
    if let (Ok(_), Some(window)) = (&made, &topology.window) {
        // Direct reads want the window in huge pages (see populate).
        let huge = options.direct_io != super::DirectIo::Never;
        window.populate(options.window_bytes, huge);
    }
    give_back(topology);
    made.map(|_| ())
}

/// Gives the memory of every kept window back to the system; the
/// communicators and windows themselves stay for the next open, which
/// maps pages again as it uses them (or [`prepare`] maps them ahead).
/// Local: a node's memory is released once its first rank calls it, and
/// no engine's memory is touched (an open engine's window is not kept).
pub fn release_memory() {
    let kept = KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for window in kept.iter().filter_map(|t| t.window.as_ref()) {
        window.release_pages();
    }
}

/// Frees every kept topology, oldest first (the order they were made in,
/// the same on every rank). Runs when MPI_Finalize starts, after any read
/// an open engine runs in the background has finished.
pub(crate) fn release_all() {
    crate::background::wait_for_background_reads();
    // A stage's writer may still be writing out pieces of a window.
    crate::node_stage::reclaim_every_window();
    let mut all = std::mem::take(&mut *KEPT.lock().unwrap_or_else(|p| p.into_inner()));
    all.sort_by_key(|t| t.id);
    drop(all);
}

fn make(caller: &Comm, options: &EngineOptions) -> Result<NodeTopology> {
    // Everything below, and every engine holding this topology, works on
    // this duplicate, so our traffic never mixes with the caller's.
    let world = Comm::dup(caller.raw())?;
    let shared = world.split_shared()?;
    let virtual_node = match options.ranks_per_node {
        Some(k) => {
            // Consecutive blocks of k ranks of the shared-memory node; made
            // among each block's ranks only.
            let first = shared.rank() / k * k;
            let block: Vec<usize> = (first..(first + k).min(shared.size())).collect();
            Some(shared.create_group(&block, 1)?)
        }
        None => None,
    };
    let is_reader = virtual_node.as_ref().unwrap_or(&shared).rank() < options.readers_per_node;
    let mut machine_readers = [i64::from(is_reader)];
    shared.allreduce_i64(&mut machine_readers, ReduceOp::Sum)?;
    let node = virtual_node.unwrap_or(shared);
    let is_master = node.rank() == 0;
    let roles = world.allgather_i64(&[i64::from(is_reader) | i64::from(is_master) << 1])?;
    let with_role =
        |bit: i64| -> Vec<usize> { (0..roles.len()).filter(|&r| roles[r] & bit != 0).collect() };
    let readers = if is_reader {
        Some(world.create_group(&with_role(1), 2)?)
    } else {
        None
    };
    // With one reader per node the masters are the readers: a duplicate
    // (non-blocking) instead of a second group.
    let masters = match (&readers, is_master) {
        (Some(r), true) if options.readers_per_node == 1 => Some(Comm::dup(r.raw())?),
        (_, true) => Some(world.create_group(&with_role(2), 3)?),
        _ => None,
    };
    let members = node
        .allgather_i64(&[world.rank() as i64])?
        .into_iter()
        .map(|r| r as u64)
        .collect();
    let mut id = [NEXT_ID.fetch_add(1, Ordering::SeqCst)];
    world.allreduce_i64(&mut id, ReduceOp::Max)?;
    NEXT_ID.fetch_max(id[0] + 1, Ordering::SeqCst);
    Ok(NodeTopology {
        ranks: world,
        ranks_per_node: options.ranks_per_node,
        readers_per_node: options.readers_per_node,
        id: id[0],
        node,
        readers,
        masters,
        members,
        machine_readers: machine_readers[0].max(1) as usize,
        window: None,
    })
}
