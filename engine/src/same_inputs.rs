//! Every rank of a job must open the same file, the same named database
//! and the same options: ranks that disagree would read different files,
//! take overlapping shares, make node windows of different sizes or wait
//! in different collective calls. The values are folded into the first
//! reduction of `open` as (MIN, MAX) pairs, so agreeing ranks pay nothing
//! more; on a difference every rank learns the first field that differs
//! and the ranks and values involved, and fails with that.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::EngineOptions;
use crate::mpi_raw::Comm;
use lmdbio_core::database::data_file_path;
use lmdbio_core::error::{Error, Result};

/// This rank's inputs: for each field, its name, a 62-bit digest (so
/// that negating it cannot overflow) and how to show it.
pub(crate) struct Inputs {
    fields: Vec<(&'static str, i64, String)>,
}

fn digest(text: &str) -> i64 {
    let h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (h >> 2) as i64
}

/// What identifies the data file across ranks: its inode. Not the device
/// number, which a network file system assigns per client, so it differs
/// between nodes for the same file; not the length or modification time,
/// which a writer may change between two ranks' looks (a change the
/// snapshot check, `engine::snapshot`, deals with).
/// Returns what is compared and what is shown.
fn file_identity(path: &Path) -> (String, String) {
    let resolved = data_file_path(path);
    match resolved.as_ref().map(|p| (p, std::fs::metadata(p))) {
        Ok((p, Ok(m))) => (
            format!("inode {}", m.ino()),
            format!("{} (inode {})", p.display(), m.ino()),
        ),
        // Ranks that all fail to find it agree, and the open reports why.
        _ => ("none".into(), "no readable data file".into()),
    }
}

impl Inputs {
    /// `path` is `None` where no file is opened (`prepare`).
    pub(crate) fn of(path: Option<&Path>, o: &EngineOptions) -> Inputs {
        let (file, file_shown) = path.map_or_else(|| ("none".into(), "none".into()), file_identity);
        let shown = |v: &dyn std::fmt::Debug| format!("{v:?}");
        let mut fields: Vec<(&'static str, String)> = vec![
            ("the data file", file),
            ("the named database", shown(&o.subdb)),
            ("the batch size", shown(&o.batch)),
            ("the partition", shown(&o.partition)),
            ("the tail policy", shown(&o.tail)),
            ("ranks per node", shown(&o.ranks_per_node)),
            ("readers per node", shown(&o.readers_per_node)),
            ("the window size", shown(&o.window_bytes)),
            ("prefetch", shown(&o.prefetch)),
            ("stagger", shown(&o.stagger)),
            ("collective reads", shown(&o.collective)),
            ("read streams", shown(&o.read_streams)),
            ("direct I/O", shown(&o.direct_io)),
            ("coalescing", shown(&o.coalesce)),
            (
                "the shuffle",
                shown(&(
                    o.shuffle_seed,
                    o.shuffle_chunk,
                    o.shuffle_window_chunks,
                    o.shuffle_mode_in_use(),
                )),
            ),
            ("MPI-IO hints", shown(&o.hints)),
            (
                "the node stage",
                shown(&(&o.stage, o.stage_budget, o.keep_stage)),
            ),
            ("resuming", shown(&(o.resume.is_some(), o.repartition))),
            (
                "the job cursor",
                shown(&o.resume_job.as_ref().map(|j| digest(&format!("{j:?}")))),
            ),
            ("the step limit", shown(&o.step_limit)),
            ("the epoch limit", shown(&o.epoch_limit)),
            ("overlap", shown(&o.overlap)),
            ("the kept leaf pages", shown(&o.inline_pages_bytes)),
            // Whether the masters look for a saved index together; the
            // cache directory may be each node's own.
            ("the saved index and keys", shown(&(o.saved_index, o.keys))),
        ];
        fields.extend(super::timeout::agreed_field(o));
        let mut fields: Vec<(&'static str, i64, String)> = fields
            .into_iter()
            .map(|(name, text)| (name, digest(&text), text))
            .collect();
        fields[0].2 = file_shown;
        Inputs { fields }
    }

    /// The words to reduce with MIN: each digest and its negation.
    pub(crate) fn words(&self) -> Vec<i64> {
        self.fields.iter().flat_map(|&(_, d, _)| [d, -d]).collect()
    }

    /// Given the reduced words, fails on every rank if any field differs,
    /// naming the first one. Collective on a difference only (every rank
    /// sees the same reduced words, so all of them take the same branch).
    pub(crate) fn check(&self, comm: &Comm, reduced: &[i64]) -> Result<()> {
        let Some(i) = (0..self.fields.len()).find(|&i| reduced[2 * i] != -reduced[2 * i + 1])
        else {
            return Ok(());
        };
        let (name, mine, _) = &self.fields[i];
        let all = comm.allgather_i64(&[*mine])?;
        let other = all.iter().position(|v| *v != all[0]).unwrap_or(0);
        let mut first = self.fields[i].2.clone().into_bytes();
        comm.bcast_bytes(0, &mut first)?;
        let mut second = self.fields[i].2.clone().into_bytes();
        comm.bcast_bytes(other, &mut second)?;
        Err(Error::InvalidArgument(format!(
            "the ranks disagree on {name}: rank 0 has {}, rank {other} has {}; every rank must open the same database with the same options",
            String::from_utf8_lossy(&first),
            String::from_utf8_lossy(&second)
        )))
    }
}
