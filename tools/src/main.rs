//! The `lmdbio` command. Each subcommand is a thin layer over the library.

mod bench;
mod convert;
mod dump;
mod inspect;
mod sample_images;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "lmdbio",
    version,
    about = "Scalable reads of LMDB training data"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Page counts, entries and the layout facts that decide read speed.
    Inspect(inspect::Args),
    /// Print a database exactly as `mdb_dump` does.
    Dump(dump::Args),
    /// Read a database on every rank of an mpiexec job and report speed.
    Bench(Box<bench::Args>),
    /// Image folders, convert_imageset lists or HDF5 into a Caffe LMDB.
    Convert(Box<convert::Args>),
    /// Write a folder of seeded sample images (and its list file) to convert.
    SampleImages(sample_images::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(&args),
        Command::Dump(args) => dump::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Convert(args) => convert::run(&args).map_err(CommandError::from),
        Command::SampleImages(args) => sample_images::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One write: stderr is unbuffered, so `eprintln!` would write
            // each piece of the message separately, and under mpiexec the
            // ranks' pieces interleave mid-message (a test counting every
            // rank's report once saw "page " and "1816" split apart).
            let line = format!("lmdbio: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
            ExitCode::FAILURE
        }
    }
}

/// Errors the command reports: the library's, or output failing (a closed
/// pipe ends the command quietly, as it does for `mdb_dump | head`).
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("{0}")]
    Lmdbio(#[from] lmdbio::Error),
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
    #[error("{0}")]
    Usage(String),
    #[error("convert: {0}")]
    Convert(#[from] convert::ConvertError),
}
