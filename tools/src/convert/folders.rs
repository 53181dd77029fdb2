//! `--folders ROOT`: one sub-folder per class, the ImageNet layout. Class
//! folders sorted by name get labels 0..K-1; within a class, image files
//! (searched recursively) are taken in path order. The result is exactly
//! the list file one would write by hand for `convert_imageset`.

use std::path::Path;

use super::entries::Entry;
use super::ConvertError;

/// Extensions taken as images (case-insensitive); other files are ignored.
pub const IMAGE_EXTENSIONS: &[&str] = &[
    "jpg", "jpeg", "png", "bmp", "dib", "ppm", "pgm", "pbm", "pnm",
];

pub struct FolderList {
    pub entries: Vec<Entry>,
    /// Class names; the label of `classes[i]` is `i`.
    pub classes: Vec<String>,
}

pub fn scan(root: &Path) -> Result<FolderList, ConvertError> {
    let mut classes = Vec::new();
    for dirent in std::fs::read_dir(root).map_err(|e| ConvertError::input(root, e))? {
        let dirent = dirent.map_err(|e| ConvertError::input(root, e))?;
        let name = utf8_name(root, &dirent.file_name())?;
        if name.starts_with('.') {
            continue;
        }
        if dirent.path().is_dir() {
            classes.push(name);
        }
    }
    classes.sort();
    if classes.is_empty() {
        return Err(ConvertError::Input(format!(
            "{}: no class sub-folders (expected ROOT/CLASS/IMAGE files)",
            root.display()
        )));
    }
    let mut entries = Vec::new();
    for (label, class) in classes.iter().enumerate() {
        let label = i32::try_from(label)
            .map_err(|_| ConvertError::Input("more than 2^31 classes".into()))?;
        let mut files = Vec::new();
        collect_images(&root.join(class), class, &mut files)?;
        files.sort();
        entries.extend(files.into_iter().map(|rel_path| Entry {
            line: 0,
            rel_path,
            label,
        }));
    }
    super::entries::renumber(&mut entries);
    if entries.is_empty() {
        return Err(ConvertError::Input(format!(
            "{}: the class folders hold no image files ({})",
            root.display(),
            IMAGE_EXTENSIONS.join(", ")
        )));
    }
    Ok(FolderList { entries, classes })
}

fn collect_images(dir: &Path, rel: &str, out: &mut Vec<String>) -> Result<(), ConvertError> {
    for dirent in std::fs::read_dir(dir).map_err(|e| ConvertError::input(dir, e))? {
        if super::interrupt::requested() {
            return Err(ConvertError::Interrupted);
        }
        let dirent = dirent.map_err(|e| ConvertError::input(dir, e))?;
        let name = utf8_name(dir, &dirent.file_name())?;
        if name.starts_with('.') {
            continue;
        }
        let rel_child = format!("{rel}/{name}");
        let path = dirent.path();
        if path.is_dir() {
            collect_images(&path, &rel_child, out)?;
        } else if is_image_name(&name) {
            out.push(rel_child);
        }
    }
    Ok(())
}

fn is_image_name(name: &str) -> bool {
    name.rsplit_once('.').is_some_and(|(_, ext)| {
        IMAGE_EXTENSIONS
            .iter()
            .any(|known| known.eq_ignore_ascii_case(ext))
    })
}

/// Keys are text: a name that is not UTF-8 cannot become one faithfully.
fn utf8_name(dir: &Path, name: &std::ffi::OsStr) -> Result<String, ConvertError> {
    name.to_str().map(str::to_owned).ok_or_else(|| {
        ConvertError::Input(format!(
            "{}: file name {:?} is not UTF-8",
            dir.display(),
            name
        ))
    })
}

/// `label name` per line, the map written beside the database.
pub fn label_map_text(classes: &[String]) -> String {
    classes
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{i} {c}\n"))
        .collect()
}

/// The equivalent `convert_imageset` list file.
pub fn list_text(entries: &[Entry]) -> String {
    entries
        .iter()
        .map(|e| format!("{} {}\n", e.rel_path, e.label))
        .collect()
}
