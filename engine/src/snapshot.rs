//! Keeping the job's snapshot, or detecting that it changed.
//!
//! Where it can, each reader holds a slot in liblmdb's reader table
//! (`crate::reader_slot`) at or before the snapshot it reads, so liblmdb's
//! writers on this machine keep the snapshot's pages for the job's life
//! (see docs/design/reader-slot.md). Where it cannot (no lock file or a
//! read-only one, another lock format, a network file system), or once
//! the slot is gone, the job detects a change instead:
//!
//! Without a slot liblmdb's writers do not know the job reads snapshot S
//! and may reuse its pages. They cannot do so at once: a page of S is
//! freed by the commit that replaces it (S+1 at the earliest) and reused
//! only by a later transaction, whose writes begin after S+1's meta page
//! is written. So as long as the meta pages show no transaction past S+1,
//! no page of S has been rewritten. Each reader checks that after its
//! reads and before it publishes them, and fails the round (every rank
//! learns it at the round's agreement) once a second commit has happened
//! and no intact slot covers the snapshot: nothing read after a page could
//! have been reused is ever delivered. This holds where a write to the
//! file is seen by a later read on the reader's machine (a local file
//! system); writers on another machine of a network file system are
//! beyond what LMDB itself supports.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use lmdbio_core::error::{Error, Result};

use crate::reader_slot::ReaderSlot;

/// Offset of `mm_txnid` in a meta page.
const MM_TXNID: u64 = 144;

pub(crate) struct SnapshotCheck {
    file: File,
    path: PathBuf,
    page_size: u64,
    txnid: u64,
    /// The slot held for the snapshot, or why there is none.
    slot: std::result::Result<ReaderSlot, String>,
}

/// Whether a reader's snapshot is kept or only checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotGuard {
    /// This rank reads nothing from the file.
    NotReader,
    /// A slot in liblmdb's reader table keeps the snapshot's pages from
    /// liblmdb writers on this machine.
    ReaderSlot,
    /// No slot (the reason given): a change of the database is detected
    /// and fails the job.
    DetectionOnly(String),
}

impl SnapshotCheck {
    /// A check of the data file at `path` against snapshot `txnid`, on a
    /// descriptor of its own (its reads are not the job's reads).
    /// `slot`, taken before the snapshot was chosen, keeps it if it holds
    /// a transaction at or before `txnid`.
    pub(crate) fn open(
        path: &Path,
        page_size: u32,
        txnid: u64,
        slot: std::result::Result<ReaderSlot, String>,
    ) -> Result<SnapshotCheck> {
        let file = lmdbio_core::source::open_regular(path, 0).map_err(|e| Error::NotFound {
            path: path.to_owned(),
            reason: format!("cannot open for reading: {e}"),
        })?;
        let slot = slot.and_then(|slot| {
            if slot.txnid() <= txnid {
                Ok(slot)
            } else {
                Err(format!(
                    "the reader slot holds transaction {} but the snapshot read is the older {txnid} (the data file was replaced)",
                    slot.txnid()
                ))
            }
        });
        Ok(SnapshotCheck {
            file,
            path: path.to_owned(),
            page_size: u64::from(page_size),
            txnid,
            slot,
        })
    }

    /// The latest transaction the meta pages record.
    fn last_committed(&self) -> Result<u64> {
        let mut last = 0;
        for at in [MM_TXNID, self.page_size + MM_TXNID] {
            let mut b = [0u8; 8];
            self.file.read_exact_at(&mut b, at).map_err(|e| Error::Io {
                path: self.path.clone(),
                offset: at,
                len: 8,
                source: e,
            })?;
            last = last.max(u64::from_le_bytes(b));
        }
        Ok(last)
    }

    /// Whether the snapshot is kept or only checked.
    pub(crate) fn guard(&self) -> SnapshotGuard {
        match &self.slot {
            Ok(_) => SnapshotGuard::ReaderSlot,
            Err(why) => SnapshotGuard::DetectionOnly(why.clone()),
        }
    }

    /// Fails once a writer may have reused a page of the snapshot.
    pub(crate) fn check(&self) -> Result<()> {
        let last = self.last_committed()?;
        if last < self.txnid.saturating_add(2) {
            return Ok(());
        }
        // Writers that use the lock file record each commit there right
        // after its meta page; a data file further ahead was written by
        // one that sees no slot (MDB_NOLOCK).
        let why = match &self.slot {
            Ok(slot) if !slot.intact() => {
                "the reader slot lmdbio held in the lock file was cleared or the lock file replaced"
                    .to_owned()
            }
            Ok(slot) if last > slot.lock_file_txnid().saturating_add(1) => {
                "it was written without the lock file (MDB_NOLOCK)".to_owned()
            }
            Ok(_) => return Ok(()),
            Err(refused) => format!("lmdbio holds no reader slot for it: {refused}"),
        };
        Err(Error::InvalidArgument(format!(
            "{}: the database changed during the job: it was opened at transaction {}, and transaction {last} has committed since, so a writer may have reused pages the job reads ({why}; see docs/reliability.md); nothing read after that was delivered",
            self.path.display(),
            self.txnid
        )))
    }
}
