//! `lmdbio dump`: byte-for-byte the output of `mdb_dump` (lmdb-utils 0.9).

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use lmdbio::format::db_flags::DUMP_NAMES;
use lmdbio::values::read_values;
use lmdbio::{CoalesceOptions, Database, IndexOptions};

use crate::CommandError;

#[derive(clap::Args)]
pub struct Args {
    /// Dump the named database instead of the main one.
    #[arg(short = 's', value_name = "NAME")]
    subdb: Option<String>,
    /// Printable characters as-is, others as \\xx (mdb_dump -p).
    #[arg(short = 'p')]
    print: bool,
    /// Accepted for mdb_dump compatibility: a file path is always read as
    /// the data file itself.
    #[arg(short = 'n')]
    _nosubdir: bool,
    /// Database directory or data file.
    db: PathBuf,
}

/// Values read per request round: large enough for big sequential reads,
/// small enough to keep memory flat on huge databases.
const ROUND_BYTES: u64 = 32 << 20;

pub fn run(args: &Args) -> Result<(), CommandError> {
    let db = Database::open(&args.db)?;
    let tree = db.tree(args.subdb.as_deref())?;
    let index = db.build_index(&tree, &IndexOptions::default())?;
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 20, stdout.lock());
    let result = (|| -> Result<(), CommandError> {
        write_header(&mut out, &db, args, tree.db.md_flags)?;
        let mut start = 0;
        while start < index.len() {
            let mut end = start;
            let mut bytes = 0u64;
            while end < index.len() && (end == start || bytes < ROUND_BYTES) {
                bytes += index.entries[end].value_len as u64;
                end += 1;
            }
            let ordinals: Vec<usize> = (start..end).collect();
            let batch = read_values(&db, &index, &ordinals, CoalesceOptions::default())?;
            for (n, &i) in ordinals.iter().enumerate() {
                write_item(&mut out, index.key(i), args.print)?;
                write_item(&mut out, batch.value(n), args.print)?;
            }
            start = end;
        }
        out.write_all(b"DATA=END\n")?;
        out.flush()?;
        Ok(())
    })();
    match result {
        Err(CommandError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

fn write_header<W: Write, R: lmdbio::ReadAt>(
    out: &mut W,
    db: &Database<R>,
    args: &Args,
    md_flags: u16,
) -> io::Result<()> {
    writeln!(out, "VERSION=3")?;
    writeln!(
        out,
        "format={}",
        if args.print { "print" } else { "bytevalue" }
    )?;
    if let Some(name) = &args.subdb {
        writeln!(out, "database={name}")?;
    }
    writeln!(out, "type=btree")?;
    writeln!(out, "mapsize={}", db.map_size())?;
    if db.meta().mm_address != 0 {
        writeln!(out, "mapaddr={:#x}", db.meta().mm_address)?;
    }
    // mdb_dump reports the reader table size of its own fresh environment.
    writeln!(out, "maxreaders=126")?;
    for (bit, name) in DUMP_NAMES {
        if md_flags & bit != 0 {
            writeln!(out, "{name}=1")?;
        }
    }
    writeln!(out, "db_pagesize={}", db.page_size())?;
    writeln!(out, "HEADER=END")
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// One data line: a space, the bytes encoded, a newline.
fn write_item<W: Write>(out: &mut W, bytes: &[u8], print: bool) -> io::Result<()> {
    let mut line = Vec::with_capacity(2 + bytes.len() * if print { 1 } else { 2 });
    line.push(b' ');
    for &b in bytes {
        if !print {
            line.extend_from_slice(&[HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        } else if (0x20..0x7f).contains(&b) {
            // mdb_dump 0.9.24 does not escape a printable backslash.
            line.push(b);
        } else {
            line.extend_from_slice(&[b'\\', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        }
    }
    line.push(b'\n');
    out.write_all(&line)
}
