//! The saved index in the engine: where it lives, loading it on every
//! node's first rank instead of scanning the tree, and writing it, off the
//! job's path, after a scan. The format is `lmdbio_core::index::saved`;
//! see docs/design/saved-index.md.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;

use crate::data_file::{DataFile, DataSource};
use crate::mpi_raw::Comm;
use crate::node_share::NodeShare;
use crate::options::EngineOptions;
use lmdbio_core::database::{data_file_path, Database, Tree};
use lmdbio_core::error::Result;
use lmdbio_core::index::saved::{self, SavedIdentity, SavedIndex, Summary};
use lmdbio_core::index::RecordEntry;

const ENTRY: usize = std::mem::size_of::<RecordEntry>();

/// Environment variable naming the cache directory for saved indexes of
/// databases whose own directory is not writable.
pub const CACHE_VARIABLE: &str = "LMDBIO_INDEX_CACHE";

/// Suffix of a saved index's file name.
pub const SUFFIX: &str = "lmdbio-index";

/// Where a database's saved index may be: beside the data file, then in
/// the cache directory. Loading tries each in turn; saving writes the
/// first that takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    candidates: Vec<PathBuf>,
    /// What of the index a loading node decodes.
    share: NodeShare,
}

impl Place {
    /// The places for the database at `path` (directory or data file) and
    /// the tree `options.subdb`; `None` exactly when saved indexes are off
    /// (the same on every rank: the masters look for one together), none
    /// to try when the path does not resolve (opening reports that).
    pub fn of(path: &Path, options: &EngineOptions) -> Option<Place> {
        if !options.saved_index {
            return None;
        }
        let Ok(data) = data_file_path(path) else {
            return Some(Place {
                candidates: Vec::new(),
                share: NodeShare::default(),
            });
        };
        let tree = match &options.subdb {
            None => String::new(),
            Some(name) => format!(".{:016x}", saved::name_hash(Some(name))),
        };
        let file_name = data
            .file_name()
            .map_or_else(|| "data".into(), |n| n.to_string_lossy().into_owned());
        let mut candidates = vec![data.with_file_name(format!("{file_name}{tree}.{SUFFIX}"))];
        if let Some(dir) = cache_dir(options) {
            let full = std::fs::canonicalize(&data).unwrap_or(data.clone());
            let id = saved::checksum(full.as_os_str().as_encoded_bytes());
            candidates.push(dir.join(format!("{id:016x}-{file_name}{tree}.{SUFFIX}")));
        }
        Some(Place {
            candidates,
            share: NodeShare::default(),
        })
    }

    /// The same places, for a node that decodes only `share` of an index
    /// it loads.
    pub(crate) fn for_node(self, share: NodeShare) -> Place {
        Place { share, ..self }
    }

    /// The files tried, in order.
    pub fn candidates(&self) -> &[PathBuf] {
        &self.candidates
    }
}

/// The cache directory: the option, else `$LMDBIO_INDEX_CACHE`, else
/// `$XDG_CACHE_HOME/lmdbio`, else none (no home-directory default: on a
/// cluster it is often a small shared quota).
fn cache_dir(options: &EngineOptions) -> Option<PathBuf> {
    let nonempty = |v: std::ffi::OsString| (!v.is_empty()).then(|| PathBuf::from(v));
    options
        .index_cache
        .clone()
        .or_else(|| std::env::var_os(CACHE_VARIABLE).and_then(nonempty))
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .and_then(nonempty)
                .map(|d| d.join("lmdbio"))
        })
}

/// The data file's modification time in nanoseconds (0 if unknown).
/// Taken before the meta pages are read: a write after it then changes
/// the time a later job sees, so the index built is never tied to a state
/// it may not have read (see docs/design/saved-index.md).
pub(crate) fn mtime_ns(data_file: &Path) -> u64 {
    std::fs::metadata(data_file)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The identity of `tree` in `db`, whose data file was last modified at
/// `mtime_ns` (see [`mtime_ns`]).
pub(crate) fn identity<R: lmdbio_core::source::ReadAt>(
    db: &Database<R>,
    tree: &Tree,
    mtime_ns: u64,
) -> SavedIdentity {
    SavedIdentity {
        file_mtime_ns: mtime_ns,
        ..SavedIdentity::of(db, tree)
    }
}

/// A saved index every master loaded.
pub(crate) struct Loaded<'f> {
    pub db: Database<DataSource<'f>>,
    pub tree: Tree,
    pub index: SavedIndex,
    /// Where the decoded index is (see [`Decoded`]).
    pub decoded: Decoded,
    /// The largest plan granule of any master (see `ScannedIndex`).
    pub granule: u64,
}

/// Where a master decoded the saved index: in the node's window, at the
/// index's place when no leaf page is kept, or (without a window that
/// holds it) in private memory: the entries, then the keys if asked for.
pub(crate) enum Decoded {
    InPlace,
    Held(Vec<u8>),
}

/// What a master found, for the others: loaded, how many entries and
/// key bytes, the state's txnid and digest, the header's value bytes and
/// largest span, whether it decoded a bounded share, its plan granule,
/// and the records, value bytes and largest span of the parts it counts
/// (see [`NodeShare::counts`]).
const WORDS: usize = 12;

/// On the masters: each loads the saved index of the tree it opened, with
/// the keys if `keys`, and decodes it (or its node's share of it, see
/// [`NodeShare`]) into `area` (the node's window from the index's place
/// on, empty without a window) when it fits. `Some` when every master
/// loaded one of the same database state and the parts decoded add up to
/// its header's sizes, else `None` on every master (the caller scans). A
/// collective call among the masters unless `place` is `None`, which it
/// is on every rank alike.
pub(crate) fn load_on_masters<'f>(
    masters: &Comm,
    file: Option<&'f DataFile>,
    subdb: Option<&str>,
    place: Option<&Place>,
    (keys, area): (bool, &mut [u8]),
) -> Result<Option<Loaded<'f>>> {
    let Some(place) = place else {
        return Ok(None);
    };
    let mine = file.and_then(|f| load_here(f, subdb, place, keys, area));
    let words = match &mine {
        Some((l, counted)) => {
            let s = l.index.summary();
            [
                1,
                s.records as i64,
                s.key_bytes as i64,
                l.db.meta().mm_txnid as i64,
                l.db.identity_digest(&l.tree) as i64,
                s.value_bytes as i64,
                s.largest_span as i64,
                i64::from(place.share.bounded()),
                l.granule as i64,
                counted.records as i64,
                counted.value_bytes as i64,
                counted.largest_span as i64,
            ]
        }
        None => [0; WORDS],
    };
    let all = masters.allgather_i64(&words)?;
    let same = all
        .chunks(WORDS)
        .all(|w| w[0] == 1 && w[1..8] == words[1..8]);
    // A bounded share's parts were decoded on the nodes wanting them: the
    // index is whole when the parts counted add up to the header's sizes
    // (each master decoding everything checked that itself).
    let counted = all.chunks(WORDS).fold(Summary::default(), |a, w| {
        a.and(Summary {
            records: w[9] as u64,
            key_bytes: 0,
            value_bytes: w[10] as u64,
            largest_span: w[11] as u64,
        })
    });
    let whole = words[7] == 0
        || mine
            .as_ref()
            .is_some_and(|(l, _)| l.index.check_totals(counted).is_ok());
    let granule = all.chunks(WORDS).map(|w| w[8]).max().unwrap_or(1);
    Ok(mine.filter(|_| same && whole).map(|(l, _)| Loaded {
        granule: granule as u64,
        ..l
    }))
}

/// Loads and decodes the saved index on one master: what it loaded, and
/// the sizes of the parts it counts (see [`NodeShare::counts`]).
fn load_here<'f>(
    file: &'f DataFile,
    subdb: Option<&str>,
    place: &Place,
    keys: bool,
    area: &mut [u8],
) -> Option<(Loaded<'f>, Summary)> {
    // The saved index's whole file is asked for at once, while the meta
    // and root pages are read: read cold, its header and then its body
    // came in one readahead window after another.
    for path in &place.candidates {
        if let Ok(f) = std::fs::File::open(path) {
            let _ = lmdbio_core::page_cache::will_need(&f, 0, 0);
        }
    }
    let mtime = mtime_ns(file.path());
    let db = Database::from_source(file.source()).ok()?;
    let granule = file.plan_granule(u64::from(db.page_size())).ok()?;
    let tree = db.tree(subdb).ok()?;
    let id = identity(&db, &tree, mtime);
    let (index, decoded, counted) = place.candidates.iter().find_map(|path| {
        // The header, then (without keys) only what comes before the keys.
        let index = SavedIndex::read(path, &id, keys).ok()?;
        let (decoded, counted) = decode(&index, keys, area, id.file_len, &place.share)?;
        Some((index, decoded, counted))
    })?;
    let loaded = Loaded {
        db,
        tree,
        index,
        decoded,
        granule,
    };
    Some((loaded, counted))
}

/// Decodes `share` of `index` (checking each part decoded, and with every
/// part the header's sizes) into `area` when it fits, else into private
/// memory; `None` if it is refused. Also returns the sizes of the parts
/// this node counts for a bounded share.
fn decode(
    index: &SavedIndex,
    keys: bool,
    area: &mut [u8],
    file_len: u64,
    share: &NodeShare,
) -> Option<(Decoded, Summary)> {
    let s = index.summary();
    let entry_bytes = usize::try_from(s.records).ok()?.checked_mul(ENTRY)?;
    let key_bytes = if keys {
        usize::try_from(s.key_bytes).ok()?
    } else {
        0
    };
    let len = entry_bytes.checked_add(key_bytes)?;
    let mut held = Vec::new();
    let (decoded, out) = match area.get_mut(..len) {
        Some(out) => (Decoded::InPlace, out),
        None => {
            held = vec![0u8; len];
            (Decoded::Held(Vec::new()), &mut held[..])
        }
    };
    let (entries, key_area) = out.split_at_mut(entry_bytes);
    let key_area = Some(key_area).filter(|_| keys);
    let records = s.records;
    let wanted: Vec<bool> = index.parts().map(|p| share.wants(records, &p)).collect();
    let parts = index
        .decode_parts_into(entries, key_area, file_len, &wanted, share.threads())
        .ok()?;
    let mut counted = Summary::default();
    for (part, found) in index.parts().zip(&parts) {
        let counts = if share.bounded() {
            share.counts(records, part.start)
        } else {
            true
        };
        match (counts, found) {
            (false, _) => {}
            (true, Some(found)) => counted = counted.and(*found),
            // A part counted here that was not decoded: never served.
            (true, None) => return None,
        }
    }
    if !share.bounded() {
        index.check_totals(counted).ok()?;
    }
    let decoded = match decoded {
        Decoded::InPlace => Decoded::InPlace,
        Decoded::Held(_) => Decoded::Held(held),
    };
    Some((decoded, counted))
}

/// Writers still running, joined when an engine is dropped so a job's
/// saved index is complete before the process may exit.
static WRITERS: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

/// Writes the index (`entries`, and `keys` where the node holds them) of
/// the database state `identity` to the first of `place`'s files that
/// takes it, on a thread of its own:
/// a temporary file renamed over the saved index, so a reader sees the old
/// file or the new one, whole. A directory that cannot be written is
/// skipped without error; the job never waits for this but at drop.
pub(crate) fn save_in_background(
    place: &Place,
    identity: SavedIdentity,
    entries: &[RecordEntry],
    keys: Option<&[u8]>,
) {
    let (entries, keys, place) = (entries.to_vec(), keys.map(<[u8]>::to_vec), place.clone());
    let writer = std::thread::Builder::new()
        .name("lmdbio-save-index".into())
        .spawn(move || {
            for path in &place.candidates {
                if write_atomically(path, &identity, &entries, keys.as_deref()).is_ok() {
                    return;
                }
            }
        });
    if let Ok(handle) = writer {
        WRITERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handle);
    }
}

fn write_atomically(
    path: &Path,
    identity: &SavedIdentity,
    entries: &[RecordEntry],
    keys: Option<&[u8]>,
) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    remove_stale_temps(path);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".tmp{}", std::process::id()));
    let temp = PathBuf::from(name);
    let written = (|| {
        let mut out = std::io::BufWriter::with_capacity(4 << 20, std::fs::File::create(&temp)?);
        saved::write(&mut out, identity, entries, keys)?;
        std::io::Write::flush(&mut out)?;
        out.get_ref().sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// Removes `path.tmp<pid>` files left by writers that died before their
/// rename (killed jobs), so a directory beside a database does not fill
/// with partial indexes. A temp file of a live process is its writer's.
fn remove_stale_temps(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!("{}.tmp", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let gone = pid.parse::<u32>().is_ok_and(|pid| {
            pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists()
        });
        if gone {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Waits for every saved index this process is writing.
pub(crate) fn finish_writes() {
    let writers = std::mem::take(&mut *WRITERS.lock().unwrap_or_else(|e| e.into_inner()));
    for w in writers {
        let _ = w.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_files_of_dead_writers_are_removed_and_live_ones_kept() {
        let dir = std::env::temp_dir().join(format!("lmdbio-stale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let index = dir.join("data.mdb.lmdbio-index");
        // Above Linux's largest pid (2^22): no such process.
        let dead = dir.join("data.mdb.lmdbio-index.tmp4194305");
        let live = dir.join("data.mdb.lmdbio-index.tmp1");
        let other = dir.join("other.lmdbio-index.tmp4194305");
        for f in [&dead, &live, &other] {
            std::fs::write(f, b"partial").unwrap();
        }
        remove_stale_temps(&index);
        assert!(!dead.exists(), "a dead writer's temp file stays");
        assert!(live.exists(), "a live process's temp file was removed");
        assert!(other.exists(), "another index's temp file was removed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_saved_index_sits_beside_the_data_file_then_in_the_cache() {
        let dir = std::env::temp_dir().join(format!("lmdbio-place-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("data.mdb"), b"x").unwrap();
        let options = EngineOptions {
            index_cache: Some("/cache".into()),
            ..Default::default()
        };
        let main = Place::of(&dir, &options).unwrap();
        assert_eq!(main.candidates[0], dir.join("data.mdb.lmdbio-index"));
        assert!(main.candidates[1].starts_with("/cache"));
        let named = Place::of(
            &dir,
            &EngineOptions {
                subdb: Some("train".into()),
                ..options.clone()
            },
        )
        .unwrap();
        assert_ne!(named.candidates[0], main.candidates[0]);
        assert_ne!(named.candidates[1], main.candidates[1]);
        let off = EngineOptions {
            saved_index: false,
            ..options
        };
        assert_eq!(Place::of(&dir, &off), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
