//! The stage's manifest: the database it holds parts of, and each staged
//! extent with its checksum. Replaced whole (written aside, then renamed),
//! so a job stopped at any point leaves the previous one or the new one.

use std::io::Write;
use std::path::Path;

use super::extents::{Check, Extent, Extents};

const MAGIC: &str = "lmdbio node stage 1";

/// What the stage must match to be reused: the database file (inode,
/// modification time, length) and the database's identity (entries, last
/// transaction, page size, and the digest of its meta page and trees).
/// The file's own marks matter: two databases written the same way hold
/// the same trees and differ only in their values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) inode: u64,
    /// Nanoseconds since the epoch.
    pub(crate) modified: i128,
    pub(crate) file_len: u64,
    pub(crate) entries: u64,
    pub(crate) txnid: u64,
    pub(crate) page_size: u32,
    pub(crate) digest: u64,
}

impl Identity {
    fn line(&self) -> String {
        format!(
            "identity {} {} {} {} {} {} {:016x}",
            self.inode,
            self.modified,
            self.file_len,
            self.entries,
            self.txnid,
            self.page_size,
            self.digest
        )
    }
}

pub(crate) fn encode(identity: &Identity, extents: &Extents) -> String {
    let mut text = format!("{MAGIC}\n{}\n", identity.line());
    for (start, e) in &extents.map {
        text.push_str(&format!("extent {start} {} {:08x}\n", e.len, e.crc));
    }
    text
}

/// Why a manifest was not taken.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// None there: a fresh stage, nothing to say.
    Missing,
    /// Another database's, or unreadable: said once, then started afresh.
    Other(String),
}

/// The extents of the manifest at `path` if it describes `identity`'s
/// database, all to be checked on first use.
pub(crate) fn read(path: &Path, identity: &Identity) -> Result<Extents, Refused> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Refused::Missing),
        Err(e) => return Err(Refused::Other(format!("its manifest is unreadable ({e})"))),
    };
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(Refused::Other("its manifest is not one of lmdbio's".into()));
    }
    if lines.next() != Some(identity.line().as_str()) {
        return Err(Refused::Other(
            "it holds another database (or another version of this one)".into(),
        ));
    }
    let mut extents = Extents::default();
    let mut end = 0;
    for line in lines {
        let bad = || Refused::Other(format!("its manifest has a bad line ({line:?})"));
        let f: Vec<&str> = line.split(' ').collect();
        let [kind, start, len, crc] = f.as_slice() else {
            return Err(bad());
        };
        let start: u64 = start.parse().map_err(|_| bad())?;
        let len: u64 = len.parse().map_err(|_| bad())?;
        let crc = u32::from_str_radix(crc, 16).map_err(|_| bad())?;
        let past = start.checked_add(len).ok_or_else(bad)?;
        if *kind != "extent" || start < end || len == 0 || past > identity.file_len {
            return Err(bad());
        }
        end = past;
        extents.map.insert(
            start,
            Extent {
                len,
                crc,
                check: Check::Unchecked,
            },
        );
    }
    Ok(extents)
}

/// Replaces the manifest at `path` with `text`.
pub(crate) fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let aside = path.with_extension("new");
    let mut f = std::fs::File::create(&aside)?;
    f.write_all(text.as_bytes())?;
    f.sync_data()?;
    std::fs::rename(&aside, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_reads_back_only_for_its_own_database() {
        let dir = std::env::temp_dir().join(format!("lmdbio-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("manifest");
        let id = Identity {
            inode: 12,
            modified: 1_700_000_000_123_456_789,
            file_len: 1 << 30,
            entries: 10,
            txnid: 7,
            page_size: 4096,
            digest: 0xdead_beef,
        };
        let mut x = Extents::default();
        for (s, l) in [(0u64, 4096u64), (8192, 100)] {
            x.map.insert(
                s,
                Extent {
                    len: l,
                    crc: s as u32 + 1,
                    check: Check::Good,
                },
            );
        }
        assert_eq!(read(&path, &id).err(), Some(Refused::Missing));
        write(&path, &encode(&id, &x)).unwrap();
        let back = read(&path, &id).unwrap();
        assert_eq!(back.map.len(), 2);
        assert_eq!(back.map[&8192].crc, 8193);
        assert_eq!(back.map[&8192].check, Check::Unchecked);
        for other in [
            Identity { txnid: 8, ..id },
            Identity { inode: 13, ..id },
            Identity {
                modified: id.modified + 1,
                ..id
            },
        ] {
            assert!(matches!(read(&path, &other), Err(Refused::Other(_))));
        }
        std::fs::write(&path, "lmdbio node stage 1\nidentity x\n").unwrap();
        assert!(matches!(read(&path, &id), Err(Refused::Other(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
