//! Detecting a database that changed under the job.
//!
//! lmdbio holds no reader slot in `lock.mdb`, so liblmdb's writers do not
//! know the job reads snapshot S and may reuse its pages. They cannot do
//! so at once: a page of S is freed by the commit that replaces it (S+1
//! at the earliest) and reused only by a later transaction, whose writes
//! begin after S+1's meta page is written. So as long as the meta pages
//! show no transaction past S+1, no page of S has been rewritten. Each
//! reader checks that after its reads and before it publishes them, and
//! fails the round (every rank learns it at the round's agreement) once a
//! second commit has happened: nothing read after a page could have been
//! reused is ever delivered. This holds where a write to the file is seen
//! by a later read on the reader's machine (a local file system); writers
//! on another machine of a network file system are beyond what LMDB
//! itself supports.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use lmdbio_core::error::{Error, Result};

/// Offset of `mm_txnid` in a meta page.
const MM_TXNID: u64 = 144;

pub(crate) struct SnapshotCheck {
    file: File,
    path: PathBuf,
    page_size: u64,
    txnid: u64,
}

impl SnapshotCheck {
    /// A check of the data file at `path` against snapshot `txnid`, on a
    /// descriptor of its own (its reads are not the job's reads).
    pub(crate) fn open(path: &Path, page_size: u32, txnid: u64) -> Result<SnapshotCheck> {
        let file = lmdbio_core::source::open_regular(path, 0).map_err(|e| Error::NotFound {
            path: path.to_owned(),
            reason: format!("cannot open for reading: {e}"),
        })?;
        Ok(SnapshotCheck {
            file,
            path: path.to_owned(),
            page_size: u64::from(page_size),
            txnid,
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

    /// Fails once a writer may have reused a page of the snapshot.
    pub(crate) fn check(&self) -> Result<()> {
        let last = self.last_committed()?;
        if last >= self.txnid.saturating_add(2) {
            return Err(Error::InvalidArgument(format!(
                "{}: the database changed during the job: it was opened at transaction {}, and transaction {last} has committed since, so a writer may have reused pages the job reads (lmdbio holds no reader slot; see docs/reliability.md); nothing read after that was delivered",
                self.path.display(),
                self.txnid
            )));
        }
        Ok(())
    }
}
