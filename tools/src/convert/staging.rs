//! The output appears complete or not at all: the database is written
//! under a hidden partial name beside OUT (`.OUT.lmdbio-partial-PID`) and
//! swapped onto OUT at the end. Dropping an uncommitted `Staging` (error,
//! interrupt) removes the partial; partials whose process is gone (a
//! kill -9, a crash, a power cut) are removed by the next run beside the
//! same OUT.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::ConvertError;

pub struct Staging {
    out: PathBuf,
    temp: PathBuf,
    overwrite: bool,
    committed: bool,
}

/// What a database directory written by convert holds; an OUT holding
/// anything else is not replaced, `--overwrite` or not.
const OUR_FILES: &[&str] = &["data.mdb", "lock.mdb", "labels.txt", "list.txt"];

const PARTIAL: &str = ".lmdbio-partial-";

impl Staging {
    /// Refuses an existing OUT unless `overwrite`, removes stale partials
    /// and creates this run's partial directory.
    pub fn create(out: &Path, overwrite: bool) -> Result<Staging, ConvertError> {
        check_out(out, overwrite)?;
        let name = out
            .file_name()
            .ok_or_else(|| ConvertError::Usage(format!("{}: not a file name", out.display())))?;
        let parent = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !parent.is_dir() {
            return Err(ConvertError::Output(format!(
                "{}: parent directory {} does not exist",
                out.display(),
                parent.display()
            )));
        }
        let prefix = format!(".{}{PARTIAL}", name.to_string_lossy());
        remove_stale_partials(&parent, &prefix);
        let temp = parent.join(format!("{prefix}{}", std::process::id()));
        if temp.exists() {
            std::fs::remove_dir_all(&temp).map_err(|e| ConvertError::output(&temp, e))?;
        }
        std::fs::create_dir(&temp).map_err(|e| ConvertError::output(&temp, e))?;
        Ok(Staging {
            out: out.to_path_buf(),
            temp,
            overwrite,
            committed: false,
        })
    }

    /// Where the database is being written.
    pub fn dir(&self) -> &Path {
        &self.temp
    }

    /// Moves the finished database onto OUT. An existing OUT is exchanged
    /// with the partial in one `renameat2(RENAME_EXCHANGE)`, so OUT is at
    /// every instant either the old database or the new one, and the old
    /// one, now under the partial name, is removed after.
    pub fn commit(mut self) -> Result<(), ConvertError> {
        check_out(&self.out, self.overwrite)?;
        let out_err = |e| ConvertError::output(&self.out, e);
        if std::fs::symlink_metadata(&self.out).is_ok() {
            match exchange(&self.temp, &self.out) {
                Ok(()) => {}
                // A file system without the exchange: move the old one
                // aside under a partial name (cleaned up as stale if we
                // die here), then rename the new one in.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    let aside = self.temp.with_extension("old");
                    std::fs::rename(&self.out, &aside).map_err(out_err)?;
                    std::fs::rename(&self.temp, &self.out).map_err(out_err)?;
                    std::fs::rename(&aside, &self.temp).map_err(out_err)?;
                }
                Err(e) => return Err(out_err(e)),
            }
            self.committed = true;
            remove_any(&self.temp).map_err(|e| ConvertError::output(&self.temp, e))?;
        } else {
            std::fs::rename(&self.temp, &self.out).map_err(out_err)?;
            self.committed = true;
        }
        // The rename is durable once the directory holding it is synced.
        if let Some(parent) = self.temp.parent() {
            std::fs::File::open(parent)
                .and_then(|dir| dir.sync_all())
                .map_err(|e| ConvertError::output(parent, e))?;
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.temp);
        }
    }
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path)?.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}

/// Atomically swaps two paths (both must exist).
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let a = CString::new(a.as_os_str().as_bytes())?;
    let b = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both are NUL-terminated strings that outlive the call;
    // renameat2 only reads them.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether process `pid` exists on this machine (`kill(pid, 0)`).
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 delivers nothing; it only checks the pid.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Removes `PREFIX<pid>` and `PREFIX<pid>.old` entries of `dir` whose
/// process is gone. Best effort: one that cannot be removed is left.
fn remove_stale_partials(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        let pid = rest.strip_suffix(".old").unwrap_or(rest);
        match pid.parse::<i32>() {
            Ok(pid) if pid > 0 && !alive(pid) => {
                let path = entry.path();
                if remove_any(&path).is_ok() {
                    eprintln!(
                        "lmdbio convert: removed {}, left by process {pid} which is gone",
                        path.display()
                    );
                }
            }
            _ => {}
        }
    }
}

fn check_out(out: &Path, overwrite: bool) -> Result<(), ConvertError> {
    let Ok(meta) = std::fs::symlink_metadata(out) else {
        return Ok(());
    };
    if !overwrite {
        return Err(ConvertError::Output(format!(
            "{}: already exists (use --overwrite to replace it)",
            out.display()
        )));
    }
    if !meta.is_dir() {
        return Err(ConvertError::Output(format!(
            "{}: exists and is not a directory; --overwrite replaces only a database directory",
            out.display()
        )));
    }
    let entries = std::fs::read_dir(out).map_err(|e| ConvertError::output(out, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| ConvertError::output(out, e))?;
        let name = entry.file_name();
        if !OUR_FILES
            .iter()
            .any(|ours| name.as_encoded_bytes() == ours.as_bytes())
        {
            return Err(ConvertError::Output(format!(
                "{}: holds {:?}, which convert does not write; --overwrite replaces only a database directory ({})",
                out.display(),
                name,
                OUR_FILES.join(", ")
            )));
        }
    }
    Ok(())
}
