//! `lmdbio convert`: image folders, `convert_imageset` list files and HDF5
//! into LMDBs that stock Caffe reads unchanged.
//!
//! inputs (`list`, `folders`, `hdf5_input`) → `entries` → `pipeline`
//! (readers → decoders running `record`: `decode`, `resize`, `datum`) →
//! one ordered `writer` into a `staging` directory renamed onto OUT at the
//! end; `progress`, `interrupt` and `allocator` around it.

mod allocator;
mod args;
mod datum;
mod decode;
mod entries;
mod folders;
mod guard;
mod hdf5_input;
mod interrupt;
mod list;
mod pipeline;
mod progress;
mod record;
mod resize;
mod staging;
mod writer;

use std::path::{Path, PathBuf};
use std::time::Instant;

pub use args::Args;
use args::Source;
use entries::Entry;
use progress::Progress;
use record::RecordOptions;
use staging::Staging;
use writer::LmdbWriter;

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    Output(String),
    #[error("line {line} ({path}): {reason}")]
    Image {
        line: usize,
        path: String,
        reason: String,
    },
    #[error("interrupted: nothing was written")]
    Interrupted,
}

impl ConvertError {
    fn input(path: &Path, e: std::io::Error) -> ConvertError {
        ConvertError::Input(format!("{}: {e}", path.display()))
    }
    fn output(path: &Path, e: std::io::Error) -> ConvertError {
        ConvertError::Output(format!("{}: {e}", path.display()))
    }
}

pub fn run(args: &Args) -> Result<(), ConvertError> {
    let (source, out) = args.source_and_out()?;
    if args.commit_every == 0 {
        return Err(ConvertError::Usage(
            "--commit-every must be at least 1".into(),
        ));
    }
    let inputs: Vec<(&str, &Path)> = match &source {
        Source::Hdf5 { file } => vec![("the HDF5 file", file)],
        Source::List { root, list } => vec![("ROOT", root), ("the list file", list)],
        Source::Folders { root } => vec![("ROOT", root)],
    };
    guard::check_out_apart(&out, &inputs)?;
    interrupt::install();
    allocator::keep_buffers_in_heap();
    match source {
        Source::Hdf5 { file } => convert_hdf5(args, &file, &out),
        Source::List { root, list } => {
            let entries = list::read(&list)?;
            convert_images(args, &root, entries, &out, None)
        }
        Source::Folders { root } => {
            let found = folders::scan(&root)?;
            convert_images(args, &root, found.entries, &out, Some(&found.classes))
        }
    }
}

fn convert_images(
    args: &Args,
    root: &Path,
    mut entries: Vec<Entry>,
    out: &Path,
    classes: Option<&[String]>,
) -> Result<(), ConvertError> {
    if !root.is_dir() {
        return Err(ConvertError::Input(format!(
            "{}: ROOT is not a directory",
            root.display()
        )));
    }
    let opts = RecordOptions {
        gray: args.gray,
        resize: args.resize()?,
        encoded: args.encoded,
        encode_type: args.encode_type()?,
    };
    if opts.encode_type.is_some() && !opts.encoded {
        return Err(ConvertError::Usage("--encode-type needs --encoded".into()));
    }
    if args.shuffle {
        let seed = args.seed.unwrap_or_else(clock_seed);
        entries::shuffle(&mut entries, seed);
        entries::renumber(&mut entries);
        eprintln!("shuffled with --seed {seed}");
    }
    let staging = Staging::create(out, args.overwrite)?;
    let started = Instant::now();
    let env = writer::open_env(staging.dir())?;
    let mut writer = LmdbWriter::new(&env, args.commit_every)?;
    let mut progress = Progress::new(entries.len(), args.quiet);
    let mut skipped = 0usize;
    let mut first_size: Option<(usize, String)> = None;
    let mut sink = |entry: &Entry, result: Result<record::Record, String>| {
        if interrupt::requested() {
            return Err(ConvertError::Interrupted);
        }
        match result {
            Ok(record) => {
                if args.check_size {
                    match &first_size {
                        None => first_size = Some((record.pixel_count, entry.rel_path.clone())),
                        Some((size, first)) if *size != record.pixel_count => {
                            return Err(ConvertError::Image {
                                line: entry.line + 1,
                                path: guard::clip(&entry.rel_path),
                                reason: format!(
                                    "--check-size: {} pixel values, but {first} has {size}",
                                    record.pixel_count
                                ),
                            })
                        }
                        Some(_) => {}
                    }
                }
                writer.put(&entry.key(), &record.value)?;
            }
            Err(reason) => {
                let failure = ConvertError::Image {
                    line: entry.line + 1,
                    path: guard::clip(
                        &root
                            .join(entry.rel_path.trim_start_matches('/'))
                            .display()
                            .to_string(),
                    ),
                    reason,
                };
                if args.strict {
                    return Err(failure);
                }
                skipped += 1;
                progress.message(&format!("lmdbio convert: skipping {failure}"));
            }
        }
        progress.advance();
        Ok(())
    };
    let full = |e| writer::explain_full(staging.dir(), e);
    pipeline::run(root, &entries, &opts, args.threads(), &mut sink).map_err(full)?;
    writer.commit().map_err(full)?;
    writer::sync(&env).map_err(full)?;
    let written = writer.written;
    progress.finish();
    let rate = progress.rate();
    drop(writer);
    drop(env);
    if written == 0 {
        return Err(ConvertError::Input(format!(
            "none of the {} images could be converted; nothing was written",
            entries.len()
        )));
    }
    if let Some(classes) = classes {
        write_text(
            &staging.dir().join("labels.txt"),
            &folders::label_map_text(classes),
        )?;
        write_text(
            &staging.dir().join("list.txt"),
            &folders::list_text(&entries),
        )?;
    }
    staging.commit()?;
    println!(
        "wrote {written} records to {} ({skipped} skipped) in {:.2} s, {rate:.0} images/s",
        out.display(),
        started.elapsed().as_secs_f64()
    );
    if classes.is_some() {
        println!(
            "label map: {}, list: {}",
            out.join("labels.txt").display(),
            out.join("list.txt").display()
        );
    }
    Ok(())
}

fn convert_hdf5(args: &Args, file: &Path, out: &Path) -> Result<(), ConvertError> {
    let image_options = [
        ("--gray", args.gray),
        ("--encoded", args.encoded),
        ("--encode-type", args.encode_type.is_some()),
        ("--resize", args.resize()?.is_some()),
        ("--shuffle", args.shuffle),
        ("--check-size", args.check_size),
    ];
    if let Some((name, _)) = image_options.iter().find(|(_, set)| *set) {
        return Err(ConvertError::Usage(format!(
            "{name} applies to images, not to --hdf5 (rows are stored as they are)"
        )));
    }
    let source = hdf5_input::Hdf5Source::open(file)?;
    if source.len() == 0 {
        return Err(ConvertError::Input(format!("{}: no rows", file.display())));
    }
    let staging = Staging::create(out, args.overwrite)?;
    let started = Instant::now();
    let env = writer::open_env(staging.dir())?;
    let mut writer = LmdbWriter::new(&env, args.commit_every)?;
    let mut progress = Progress::new(source.len(), args.quiet);
    let written = source.for_each_record(|key, value| {
        if interrupt::requested() {
            return Err(ConvertError::Interrupted);
        }
        writer.put(key, value)?;
        progress.advance();
        Ok(())
    });
    let full = |e| writer::explain_full(staging.dir(), e);
    written.map_err(full)?;
    writer.commit().map_err(full)?;
    writer::sync(&env).map_err(full)?;
    let written = writer.written;
    progress.finish();
    drop(writer);
    drop(env);
    staging.commit()?;
    println!(
        "wrote {written} records to {} in {:.2} s",
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn write_text(path: &PathBuf, text: &str) -> Result<(), ConvertError> {
    std::fs::write(path, text).map_err(|e| ConvertError::output(path, e))
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
