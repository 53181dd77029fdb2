//! A step's records as the engine hands them out: borrowed from the
//! node's shared window.

use crate::{held, Engine};

/// One record of a batch: where its key and value are, which record it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRecord {
    /// The record's ordinal: its place in key order, an index into the
    /// record index.
    pub ordinal: u64,
    /// The epoch the record is delivered in (from 0).
    pub epoch: u64,
    pub(crate) key: (usize, usize),
    pub(crate) value: (usize, usize),
}

/// The records of one step, borrowed from the node's shared memory until
/// the next call to [`Engine::next_batch`].
pub struct Batch<'e> {
    pub(crate) engine: &'e Engine,
    /// This rank's step the batch belongs to (0 for the first batch).
    pub step: u64,
}

impl<'e> Batch<'e> {
    /// Records in the batch: the batch size, or fewer at an epoch's end
    /// (under [`Tail::Short`](lmdbio_core::schedule::Tail::Short), or at
    /// [`EngineOptions::epoch_limit`](crate::EngineOptions::epoch_limit)).
    pub fn len(&self) -> usize {
        self.engine.batch.len()
    }

    /// No records (a short tail batch can be empty).
    pub fn is_empty(&self) -> bool {
        self.engine.batch.is_empty()
    }

    /// The batch's records in delivery order.
    pub fn records(&self) -> &'e [BatchRecord] {
        &self.engine.batch
    }

    /// Key of the batch's `i`-th record, in the node's shared memory;
    /// empty where the node holds no keys (`EngineOptions::keys`).
    /// Panics if `i` is not below [`Batch::len`].
    pub fn key(&self, i: usize) -> &'e [u8] {
        let (at, len) = self.engine.batch[i].key;
        let keys = held(&self.engine.parts).memory.keys();
        keys.get(at..at + len).unwrap_or_default()
    }

    /// Value of the batch's `i`-th record, in the node's shared window (no
    /// copy). Panics if `i` is not below [`Batch::len`].
    pub fn value(&self, i: usize) -> &'e [u8] {
        let (at, len) = self.engine.batch[i].value;
        // SAFETY: this step's bytes were all read (the readers' progress
        // words said so) and agreed on, and nobody writes them before the
        // round's area is read into again, which takes a collective step
        // that needs `&mut Engine` and so ends this borrow. Other parts of
        // the area may be written meanwhile.
        unsafe { held(&self.engine.parts).memory.data_range(at, len) }
    }

    /// Epoch of the batch's first record (ranks' epochs can differ by one
    /// when shares differ in size).
    pub fn epoch(&self) -> u64 {
        self.engine
            .batch
            .first()
            .map_or(self.engine.last_epoch, |r| r.epoch)
    }
}
