//! What convert must never do to its inputs: write over them, or read
//! something that is not a plain file. OUT is replaced as a whole, so an
//! OUT that is, holds or sits inside ROOT or an input file would take the
//! inputs with it; a FIFO or device would block a read or never end.

use std::fs::File;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use super::ConvertError;

/// Longest piece of user input (a list line, a path) echoed in a message.
const ECHO_LIMIT: usize = 200;

/// `text`, cut to a length a terminal can show, saying how much was cut.
pub fn clip(text: &str) -> String {
    if text.len() <= ECHO_LIMIT {
        return text.to_owned();
    }
    let mut end = ECHO_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes in all)", &text[..end], text.len())
}

/// The absolute, symlink-free form of `path`; for a path that does not
/// exist yet, its nearest existing ancestor's form with the rest joined.
fn resolved(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let absolute = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut rest = Vec::new();
    let mut at = absolute.as_path();
    loop {
        if let Ok(p) = at.canonicalize() {
            let mut out = p;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return lexically_normal(&out);
        }
        match (at.file_name(), at.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_owned());
                at = parent;
            }
            _ => return lexically_normal(&absolute),
        }
    }
}

fn lexically_normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Refuses an OUT that equals, lies inside or contains any input.
pub fn check_out_apart(out: &Path, inputs: &[(&str, &Path)]) -> Result<(), ConvertError> {
    let out_r = resolved(out);
    for (what, input) in inputs {
        let in_r = resolved(input);
        let relation = if out_r == in_r {
            "is"
        } else if out_r.starts_with(&in_r) {
            "is inside"
        } else if in_r.starts_with(&out_r) {
            "contains"
        } else {
            continue;
        };
        return Err(ConvertError::Usage(format!(
            "OUT {} {relation} {what} {} ({}): OUT is replaced as a whole, which would destroy the input",
            out.display(),
            input.display(),
            in_r.display()
        )));
    }
    Ok(())
}

/// Opens `path` for reading only if it is a regular file, never blocking
/// (see `lmdbio::source::open_regular`).
pub fn open_input(path: &Path) -> std::io::Result<File> {
    lmdbio::source::open_regular(path, 0)
}

/// The whole of a regular file; FIFOs and devices are refused at once.
pub fn read_input(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = open_input(path)?;
    let len = file.metadata()?.len();
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_related_to_an_input_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("images");
        std::fs::create_dir(&root).unwrap();
        let list = dir.path().join("list.txt");
        std::fs::write(&list, "a.png 0\n").unwrap();
        let inputs = [("ROOT", root.as_path()), ("LIST", list.as_path())];
        for bad in [
            root.clone(),
            root.join("db"),
            dir.path().to_owned(),
            root.join("sub/../.."),
            list.clone(),
        ] {
            assert!(check_out_apart(&bad, &inputs).is_err(), "{}", bad.display());
        }
        assert!(check_out_apart(&dir.path().join("db"), &inputs).is_ok());
        assert!(check_out_apart(&dir.path().join("images-db"), &inputs).is_ok());
    }

    #[test]
    fn long_input_is_clipped() {
        let long = "é".repeat(1000);
        let c = clip(&long);
        assert!(c.len() < 300 && c.ends_with("(2000 bytes in all)"), "{c}");
        assert_eq!(clip("short"), "short");
    }
}
