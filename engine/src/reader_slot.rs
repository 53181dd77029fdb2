//! A reader slot in liblmdb's lock file, held for the job's snapshot so
//! that liblmdb's writers on this machine keep its pages (see
//! docs/design/reader-slot.md).
//!
//! The lock file layout, locks and slot protocol are those of liblmdb
//! 0.9 on Linux (robust process-shared pthread mutexes, lock format
//! version 1 with pid locks). Anything else is refused with a reason, and
//! the job then only detects a change (`crate::snapshot`).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::lock_file::{self, Kind, Locked, Mapping};

const CACHELINE: usize = 64;
const MUTEX: usize = std::mem::size_of::<libc::pthread_mutex_t>();

const fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

// MDB_txninfo: {magic u32, format u32, reader mutex, txnid u64,
// numreaders u32} padded to cache lines, then the writer mutex padded to
// cache lines, then the MDB_reader slots of one cache line each.
const MAGIC_AT: usize = 0;
const FORMAT_AT: usize = 4;
const RMUTEX_AT: usize = 8;
const TXNID_AT: usize = round_up(RMUTEX_AT + MUTEX, 8);
const NUMREADERS_AT: usize = TXNID_AT + 8;
const WMUTEX_AT: usize = round_up(round_up(NUMREADERS_AT + 4, 8), CACHELINE);
const READERS_AT: usize = WMUTEX_AT + round_up(MUTEX, CACHELINE);
const READER: usize = CACHELINE;
/// `sizeof(MDB_txninfo)`: the header and one slot.
const TXNINFO: usize = READERS_AT + READER;
// MDB_reader: {txnid u64, pid pid_t, tid pthread_t}.
const SLOT_TXNID: usize = 0;
const SLOT_PID: usize = 8;
const SLOT_TID: usize = 16;

const MDB_MAGIC: u32 = 0xBEEF_C0DE;
/// `MDB_LOCK_FORMAT`: lock version 1, plus the flag that readers take a
/// pid lock in the lock file.
const MDB_LOCK_FORMAT: u32 = 1 + (1 << 16);
/// liblmdb's default table size, used when this process sets the lock
/// file up.
const DEFAULT_READERS: usize = 126;
/// glibc's mutex kind bits: robust and process-shared.
const KIND_ROBUST: u32 = 16;
const KIND_PSHARED: u32 = 128;
/// Offset of `__kind` in glibc's 64-bit `pthread_mutex_t`.
const KIND_AT: usize = 16;

/// How long a lock-file step may wait on another process (liblmdb waits
/// without end; a job would rather only detect).
const WAIT: Duration = Duration::from_secs(5);

/// File systems where other machines may share the lock file: its
/// mutexes and mapping are machine-local, and LMDB itself does not
/// support them.
const NETWORK_FILE_SYSTEMS: &[(u64, &str)] = &[
    (0x6969, "NFS"),
    (0x517b, "SMB"),
    (0xff53_4d42, "CIFS"),
    (0xfe53_4d42, "SMB2"),
    (0x0bd0_0bd0, "Lustre"),
    (0x4750_4653, "GPFS"),
    (0x00c3_6400, "Ceph"),
    (0x1983_0326, "BeeGFS"),
    (0x5346_414f, "AFS"),
    (0x0102_1997, "9P"),
    (0x7461_636f, "OCFS2"),
    (0x0116_1970, "GFS2"),
    (0x6573_5546, "FUSE"),
    (0xaad7_aaea, "PanFS"),
];

/// The lock file that goes with the data file `data`: `lock.mdb` beside
/// `data.mdb`, else liblmdb's `MDB_NOSUBDIR` name (`<data>-lock`).
pub(crate) fn lock_file_path(data: &Path) -> PathBuf {
    let mut beside = data.as_os_str().to_owned();
    beside.push("-lock");
    let beside = PathBuf::from(beside);
    if data.file_name().is_some_and(|n| n == "data.mdb") && !beside.exists() {
        data.with_file_name("lock.mdb")
    } else {
        beside
    }
}

/// A slot of liblmdb's reader table held by this process: from `take`
/// until dropped, liblmdb writers that use the lock file do not reuse
/// pages of any snapshot at or after `txnid`.
pub(crate) struct ReaderSlot {
    path: PathBuf,
    identity: (u64, u64),
    map: Mapping,
    index: usize,
    pid: u32,
    txnid: u64,
    /// Held for its record locks, which go when it closes (last).
    file: File,
}

impl ReaderSlot {
    /// Takes a slot for the database whose data file is `data`, at the
    /// last transaction the lock file records; `last_committed` reads the
    /// data file's meta pages. `Err` says why no slot is held.
    pub(crate) fn take(
        data: &Path,
        last_committed: impl Fn() -> Result<u64, String>,
    ) -> Result<ReaderSlot, String> {
        let path = lock_file_path(data);
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!(
                    "no lock file {} (a copy without one, or a database used with MDB_NOLOCK)",
                    path.display()
                ))
            }
            Err(e) => {
                return Err(format!(
                    "cannot open the lock file {} for writing: {e}",
                    path.display()
                ))
            }
        };
        let meta = file
            .metadata()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if !meta.is_file() {
            return Err(format!("{} is not a regular file", path.display()));
        }
        let fs = lock_file::file_system_type(&file).map_err(|e| format!("statfs: {e}"))?;
        if let Some((_, name)) = NETWORK_FILE_SYSTEMS.iter().find(|(t, _)| *t == fs) {
            return Err(format!(
                "the lock file is on {name}, which other machines may share: its reader table only covers this machine, and LMDB does not support that"
            ));
        }
        let exclusive = take_environment_lock(&file)?;
        let map = if exclusive {
            let map = set_up(&file, &path, &last_committed)?;
            // Shared from here on, as liblmdb's `mdb_env_share_locks`.
            lock_file::ofd_lock(&file, Kind::Shared, 0)
                .map_err(|e| format!("downgrading the lock file lock: {e}"))?;
            map
        } else {
            let len = file
                .metadata()
                .map_err(|e| format!("{}: {e}", path.display()))?
                .len() as usize;
            if len < TXNINFO {
                return Err(format!("the lock file is {len} bytes, too short"));
            }
            Mapping::new(&file, len).map_err(|e| format!("mapping the lock file: {e}"))?
        };
        check_format(&map)?;
        let pid = std::process::id();
        // liblmdb's liveness lock: `mdb_reader_check` clears slots whose
        // pid byte nobody locks.
        match lock_file::process_lock(&file, Kind::Exclusive, u64::from(pid)) {
            Ok(true) => {}
            Ok(false) => return Err("another process holds this process's pid lock".into()),
            Err(e) => return Err(format!("pid lock: {e}")),
        }
        let index = claim(&map, &file, pid)?;
        // As `mdb_txn_renew0`: the slot's txnid is the lock file's last
        // transaction, read again until it did not move meanwhile. Atomics
        // are sequentially consistent, so a writer that starts after this
        // sees the slot.
        let slot = READERS_AT + index * READER;
        let txnid = loop {
            let t = map.load_u64(TXNID_AT);
            map.store_u64(slot + SLOT_TXNID, t);
            if map.load_u64(TXNID_AT) == t {
                break t;
            }
        };
        let held = ReaderSlot {
            path,
            identity: (meta.dev(), meta.ino()),
            map,
            index,
            pid,
            txnid,
            file,
        };
        // liblmdb writers record each commit here right after its meta
        // page; more than one commit past it was made without the lock
        // file, by a writer that sees no slot.
        let last = last_committed()?;
        if last > txnid.saturating_add(1) {
            return Err(format!(
                "the data file is at transaction {last} but its lock file at {txnid}: the database is written without the lock file (MDB_NOLOCK) or the lock file is stale"
            ));
        }
        Ok(held)
    }

    /// The lock file still covers the mapping: a file cut short under it
    /// (nothing liblmdb does while an environment is open) would make a
    /// touch of the mapping past its end a SIGBUS.
    fn mapped_whole(&self) -> bool {
        self.file
            .metadata()
            .is_ok_and(|m| m.len() >= self.map.len() as u64)
    }

    /// The transaction held: no snapshot at or after it loses pages.
    pub(crate) fn txnid(&self) -> u64 {
        self.txnid
    }

    /// The last transaction liblmdb writers recorded in the lock file.
    pub(crate) fn lock_file_txnid(&self) -> u64 {
        self.map.load_u64(TXNID_AT)
    }

    /// The slot is still ours and writers still scan it: the lock file at
    /// its path is the one held, and the slot is in the used part of the
    /// table with our pid and txnid (`mdb_reader_check` or a liblmdb
    /// environment closed in this process clears it).
    pub(crate) fn intact(&self) -> bool {
        let slot = READERS_AT + self.index * READER;
        let same_file =
            std::fs::metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.identity);
        same_file
            && self.map.load_u32(MAGIC_AT) == MDB_MAGIC
            && (self.map.load_u32(NUMREADERS_AT) as usize) > self.index
            && self.map.load_u32(slot + SLOT_PID) == self.pid
            && self.map.load_u64(slot + SLOT_TXNID) == self.txnid
    }
}

impl Drop for ReaderSlot {
    fn drop(&mut self) {
        // As liblmdb ends a read transaction and closes its environment:
        // no transaction, then no owner. The locks go with the file.
        let slot = READERS_AT + self.index * READER;
        if self.mapped_whole() && self.map.load_u32(slot + SLOT_PID) == self.pid {
            self.map.store_u64(slot + SLOT_TXNID, u64::MAX);
            self.map.store_u32(slot + SLOT_PID, 0);
        }
    }
}

/// The lock liblmdb's `mdb_env_open` takes on byte 0: exclusive when no
/// environment is open (`true`: this process must set the file up), else
/// shared. Held by this open of the file, so that liblmdb in this process
/// does not take the file for unused and reset it.
fn take_environment_lock(file: &File) -> Result<bool, String> {
    let lock_error = |e: std::io::Error| format!("locking the lock file: {e}");
    if lock_file::ofd_lock(file, Kind::Exclusive, 0).map_err(lock_error)? {
        return Ok(true);
    }
    // Someone holds it: shared once a process setting it up is done. A
    // set-up takes well under a millisecond, and every node's reader of a
    // job opens at once, so the wait starts short: a fixed 10 ms was the
    // slowest part of opening a saved index at two nodes.
    let started = Instant::now();
    let mut pause = Duration::from_micros(100);
    while !lock_file::ofd_lock(file, Kind::Shared, 0).map_err(lock_error)? {
        if started.elapsed() > WAIT {
            return Err("the lock file stayed locked for set-up by another process".into());
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
    Ok(false)
}

/// Sets the lock file up as liblmdb does when it is its only user: a
/// table of the default size if shorter, fresh mutexes, no readers, and
/// the data file's last transaction. A lock file of another format is
/// left alone (another build of LMDB may use it).
fn set_up(
    file: &File,
    path: &Path,
    last_committed: &impl Fn() -> Result<u64, String>,
) -> Result<Mapping, String> {
    let mut head = [0u8; 8];
    let have = file.read_at(&mut head, 0).unwrap_or(0);
    let magic = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let format = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if have == 8 && magic != 0 && (magic, format) != (MDB_MAGIC, MDB_LOCK_FORMAT) {
        return Err(format!(
            "the lock file has magic {magic:#x} and format {format:#x}, not liblmdb 0.9's {MDB_MAGIC:#x} and {MDB_LOCK_FORMAT:#x}"
        ));
    }
    let last = last_committed()?;
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let want = (DEFAULT_READERS - 1) * READER + TXNINFO;
    let mut len = file.metadata().map_err(io)?.len() as usize;
    if len < want {
        file.set_len(want as u64).map_err(io)?;
        len = want;
    }
    let map = Mapping::new(file, len).map_err(|e| format!("mapping the lock file: {e}"))?;
    map.init_mutex(RMUTEX_AT)
        .and_then(|()| map.init_mutex(WMUTEX_AT))
        .map_err(|e| format!("making the lock file's mutexes: {e}"))?;
    map.store_u32(MAGIC_AT, MDB_MAGIC);
    map.store_u32(FORMAT_AT, MDB_LOCK_FORMAT);
    map.store_u32(NUMREADERS_AT, 0);
    map.store_u64(TXNID_AT, last);
    Ok(map)
}

/// Refuses a lock file this module does not know how to share.
fn check_format(map: &Mapping) -> Result<(), String> {
    let (magic, format) = (map.load_u32(MAGIC_AT), map.load_u32(FORMAT_AT));
    if (magic, format) != (MDB_MAGIC, MDB_LOCK_FORMAT) {
        return Err(format!(
            "the lock file has magic {magic:#x} and format {format:#x}, not liblmdb 0.9's {MDB_MAGIC:#x} and {MDB_LOCK_FORMAT:#x}"
        ));
    }
    if cfg!(all(target_env = "gnu", target_pointer_width = "64")) {
        let kind = map.load_u32(RMUTEX_AT + KIND_AT);
        if kind & (KIND_ROBUST | KIND_PSHARED) != KIND_ROBUST | KIND_PSHARED {
            return Err(format!(
                "the lock file's reader mutex is not a robust process-shared pthread mutex (kind {kind:#x}): another lock type"
            ));
        }
    }
    Ok(())
}

/// Claims a free slot under the reader mutex, as `mdb_txn_renew0` does:
/// reset, publish in the count, then give it our pid.
fn claim(map: &Mapping, file: &File, pid: u32) -> Result<usize, String> {
    let max_readers = (map.len() - TXNINFO) / READER + 1;
    match map.lock_mutex(RMUTEX_AT, WAIT) {
        Ok(Locked::Clean) => {}
        Ok(Locked::OwnerDied) => {
            // As liblmdb's `mdb_mutex_failed`: clear the slots of dead
            // processes, then mark the mutex consistent.
            clear_stale(map, file, pid);
            if let Err(e) = map.mutex_consistent(RMUTEX_AT) {
                map.unlock_mutex(RMUTEX_AT);
                return Err(format!("repairing the reader mutex: {e}"));
            }
        }
        Err(e) => return Err(format!("locking the reader table: {e}")),
    }
    let used = map.load_u32(NUMREADERS_AT) as usize;
    let free = (0..used.min(max_readers)).find(|&i| map.load_u32(slot_pid(i)) == 0);
    let index = match free {
        Some(i) => i,
        None if used < max_readers => used,
        None => {
            map.unlock_mutex(RMUTEX_AT);
            return Err(format!("the reader table is full ({max_readers} slots)"));
        }
    };
    let slot = READERS_AT + index * READER;
    map.store_u32(slot + SLOT_PID, 0);
    map.store_u64(slot + SLOT_TXNID, u64::MAX);
    map.store_u64(slot + SLOT_TID, lock_file::thread_id());
    if index == used {
        map.store_u32(NUMREADERS_AT, (used + 1) as u32);
    }
    map.store_u32(slot + SLOT_PID, pid);
    map.unlock_mutex(RMUTEX_AT);
    Ok(index)
}

fn slot_pid(i: usize) -> usize {
    READERS_AT + i * READER + SLOT_PID
}

/// `mdb_reader_check0` with the reader mutex held: frees the slots of
/// processes no longer alive (nobody locks their pid byte).
fn clear_stale(map: &Mapping, file: &File, own: u32) {
    let used = (map.load_u32(NUMREADERS_AT) as usize).min((map.len() - TXNINFO) / READER + 1);
    for i in 0..used {
        let pid = map.load_u32(slot_pid(i));
        if pid != 0
            && pid != own
            && matches!(lock_file::someone_locks(file, u64::from(pid)), Ok(false))
        {
            map.store_u32(slot_pid(i), 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_liblmdbs_on_glibc_x86_64() {
        if cfg!(all(target_env = "gnu", target_arch = "x86_64")) {
            assert_eq!(
                (TXNID_AT, NUMREADERS_AT, WMUTEX_AT, READERS_AT, TXNINFO),
                (48, 56, 64, 128, 192)
            );
            // 126 readers plus the mutexes fill 8 KiB, as liblmdb's
            // comment on DEFAULT_READERS says.
            assert_eq!((DEFAULT_READERS - 1) * READER + TXNINFO, 8192);
        }
    }

    #[test]
    fn the_lock_file_sits_beside_the_data_file() {
        let dir = std::env::temp_dir();
        assert_eq!(lock_file_path(&dir.join("data.mdb")), dir.join("lock.mdb"));
        assert_eq!(lock_file_path(&dir.join("images")), dir.join("images-lock"));
    }
}
