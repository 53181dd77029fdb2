//! `convert_imageset` list files: `relative/path label` per line.
//!
//! The label is what follows the last space (so paths may hold spaces), as
//! in `convert_imageset`. Where it would silently take `atoi` of garbage as
//! label 0 we refuse the file and name the line instead.

use std::path::Path;

use super::entries::Entry;
use super::ConvertError;

pub fn read(path: &Path) -> Result<Vec<Entry>, ConvertError> {
    let text = super::guard::read_input(path).map_err(|e| ConvertError::input(path, e))?;
    let text = String::from_utf8(text).map_err(|e| {
        ConvertError::Input(format!(
            "{}: not UTF-8 text (byte {})",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })?;
    let entries = parse(&text).map_err(|(line, why)| {
        ConvertError::Input(format!("{}:{}: {why}", path.display(), line + 1))
    })?;
    if entries.is_empty() {
        return Err(ConvertError::Input(format!(
            "{}: the list has no entries",
            path.display()
        )));
    }
    Ok(entries)
}

/// Parses list text; on error gives the zero-based line and the reason.
/// An empty line still takes a line number (as `std::getline` gives it to
/// `convert_imageset`) and becomes an entry that fails to read.
pub fn parse(text: &str) -> Result<Vec<Entry>, (usize, String)> {
    let mut entries = Vec::new();
    for (line, raw) in text.lines().enumerate() {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if raw.is_empty() {
            entries.push(Entry {
                line,
                rel_path: String::new(),
                label: 0,
            });
            continue;
        }
        let Some((rel_path, label)) = raw.rsplit_once(' ') else {
            return Err((
                line,
                format!(
                    "no label: expected `PATH LABEL`, got {:?}",
                    super::guard::clip(raw)
                ),
            ));
        };
        let label = label.parse::<i32>().map_err(|_| {
            (
                line,
                format!(
                    "bad label {:?}: expected an integer after the last space",
                    super::guard::clip(label)
                ),
            )
        })?;
        entries.push(Entry {
            line,
            rel_path: rel_path.to_owned(),
            label,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_space_splits_path_and_label() {
        let e = parse("a b/c.png 3\r\n\nx.jpg -2\n").unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!((e[0].rel_path.as_str(), e[0].label), ("a b/c.png", 3));
        assert_eq!((e[1].line, e[1].rel_path.as_str()), (1, ""));
        assert_eq!((e[2].line, e[2].label), (2, -2));
        assert_eq!(e[2].key(), b"00000002_x.jpg");
    }

    #[test]
    fn bad_labels_name_the_line() {
        assert_eq!(parse("a.png 1\nb.png x\n").unwrap_err().0, 1);
        assert_eq!(parse("nolabel\n").unwrap_err().0, 0);
    }
}
