//! `lmdbio inspect`: what `mdb_stat` says, plus the layout facts that decide
//! how fast the database can be read.

use std::path::PathBuf;

use lmdbio::{Database, IndexOptions, Layout};
use serde::Serialize;

use crate::CommandError;

#[derive(clap::Args)]
pub struct Args {
    /// Inspect the named database instead of the main one.
    #[arg(short = 's', value_name = "NAME")]
    subdb: Option<String>,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Database directory or data file.
    db: PathBuf,
}

#[derive(Serialize)]
struct Report {
    path: String,
    database: Option<String>,
    page_size: u32,
    depth: u16,
    branch_pages: u64,
    leaf_pages: u64,
    overflow_pages: u64,
    entries: u64,
    txnid: u64,
    last_pgno: u64,
    map_size: u64,
    file_bytes: u64,
    tree_page_bytes: u64,
    value_bytes: u64,
    inline_values: u64,
    overflow_values: u64,
    overflow_sequential_fraction: f64,
    overflow_backward_jumps: u64,
    full_pass_read_requests: u64,
    full_pass_read_bytes: u64,
    pages_read_for_index: u64,
    index_read_requests: u64,
    named_databases: Vec<String>,
}

pub fn run(args: &Args) -> Result<(), CommandError> {
    let db = Database::open(&args.db)?;
    let tree = db.tree(args.subdb.as_deref())?;
    let index = db.build_index(&tree, &IndexOptions::default())?;
    let layout = Layout::of(&index, db.file_len());
    let named_databases = index
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.flags & lmdbio::RecordEntry::SUBDATABASE != 0)
        .map(|(i, _)| String::from_utf8_lossy(index.key(i)).into_owned())
        .collect();
    let report = Report {
        path: db.path().display().to_string(),
        database: tree.name.clone(),
        page_size: db.page_size(),
        depth: tree.db.md_depth,
        branch_pages: tree.db.md_branch_pages,
        leaf_pages: tree.db.md_leaf_pages,
        overflow_pages: tree.db.md_overflow_pages,
        entries: tree.db.md_entries,
        txnid: db.meta().mm_txnid,
        last_pgno: db.meta().mm_last_pg,
        map_size: db.map_size(),
        file_bytes: layout.file_bytes,
        tree_page_bytes: layout.tree_page_bytes,
        value_bytes: layout.value_bytes,
        inline_values: layout.inline_values,
        overflow_values: layout.overflow_values,
        overflow_sequential_fraction: layout.overflow_sequential_fraction,
        overflow_backward_jumps: layout.overflow_backward_jumps,
        full_pass_read_requests: layout.full_pass_requests,
        full_pass_read_bytes: layout.full_pass_bytes,
        // The two meta pages, MAIN's pages on the way to a named database,
        // then the tree itself.
        pages_read_for_index: 2 + tree.lookup_pages + index.stats.pages_read,
        index_read_requests: index.stats.io.read_requests,
        named_databases,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(std::io::Error::other)?
        );
    } else {
        print_text(&report);
    }
    Ok(())
}

fn print_text(r: &Report) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let pct = |part: u64| {
        if r.file_bytes == 0 {
            0.0
        } else {
            100.0 * part as f64 / r.file_bytes as f64
        }
    };
    println!(
        "{}{}",
        r.path,
        r.database
            .as_ref()
            .map(|n| format!(" (database {n:?})"))
            .unwrap_or_default()
    );
    println!("  Page size: {}", r.page_size);
    println!("  Tree depth: {}", r.depth);
    println!("  Branch pages: {}", r.branch_pages);
    println!("  Leaf pages: {}", r.leaf_pages);
    println!("  Overflow pages: {}", r.overflow_pages);
    println!("  Entries: {}", r.entries);
    println!(
        "  Last txnid: {}, last page: {}, map size: {}",
        r.txnid, r.last_pgno, r.map_size
    );
    println!("Layout");
    println!("  File: {:.1} MiB", mib(r.file_bytes));
    println!(
        "  Tree pages: {:.1} MiB ({:.2}% of the file)",
        mib(r.tree_page_bytes),
        pct(r.tree_page_bytes)
    );
    println!(
        "  Values: {:.1} MiB ({:.2}% of the file)",
        mib(r.value_bytes),
        pct(r.value_bytes)
    );
    println!(
        "  Inline values: {}, overflow values: {}",
        r.inline_values, r.overflow_values
    );
    println!(
        "  Overflow runs in key order: {:.1}% sequential, {} backward jumps",
        100.0 * r.overflow_sequential_fraction,
        r.overflow_backward_jumps
    );
    println!(
        "  One pass in key order: {} read requests, {:.1} MiB read (4 MiB coalescing)",
        r.full_pass_read_requests,
        mib(r.full_pass_read_bytes)
    );
    println!(
        "  Index build: {} pages read in {} requests",
        r.pages_read_for_index, r.index_read_requests
    );
    if !r.named_databases.is_empty() {
        println!("  Named databases: {}", r.named_databases.join(", "));
    }
}
