//! The output appears complete or not at all: the database is written
//! under a hidden temporary name beside OUT and renamed onto OUT at the
//! end. Dropping an uncommitted `Staging` (error, interrupt) removes it.

use std::path::{Path, PathBuf};

use super::ConvertError;

pub struct Staging {
    out: PathBuf,
    temp: PathBuf,
    overwrite: bool,
    committed: bool,
}

impl Staging {
    /// Refuses an existing OUT unless `overwrite`, and creates the
    /// temporary directory.
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
        let temp = parent.join(format!(
            ".{}.lmdbio-partial-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
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

    /// Moves the finished database onto OUT.
    pub fn commit(mut self) -> Result<(), ConvertError> {
        check_out(&self.out, self.overwrite)?;
        if self.out.exists() {
            let removed = if self.out.is_dir() {
                std::fs::remove_dir_all(&self.out)
            } else {
                std::fs::remove_file(&self.out)
            };
            removed.map_err(|e| ConvertError::output(&self.out, e))?;
        }
        std::fs::rename(&self.temp, &self.out).map_err(|e| ConvertError::output(&self.out, e))?;
        self.committed = true;
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

fn check_out(out: &Path, overwrite: bool) -> Result<(), ConvertError> {
    if out.exists() && !overwrite {
        return Err(ConvertError::Output(format!(
            "{}: already exists (use --overwrite to replace it)",
            out.display()
        )));
    }
    Ok(())
}
