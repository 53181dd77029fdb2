//! The input is a whole data file. Opening it, indexing MAIN (and any named
//! database MAIN lists) and reading every value must return `Ok` or an
//! error, never panic, hang or read out of bounds.

#![no_main]

use libfuzzer_sys::fuzz_target;
use lmdbio_core::values::read_values;
use lmdbio_core::{CoalesceOptions, Database, IndexOptions, Layout, MemSource, RecordEntry, Tree};

const OPTIONS: IndexOptions = IndexOptions {
    threads: 1,
    chunk_pages: 4,
};

fn read_tree(db: &Database<MemSource>, tree: &Tree) -> Option<Vec<Vec<u8>>> {
    let index = db.build_index(tree, &OPTIONS).ok()?;
    let _ = Layout::of(&index, db.file_len());
    let all: Vec<usize> = (0..index.len()).collect();
    let batch = read_values(db, &index, &all, CoalesceOptions::default()).ok()?;
    for (i, entry) in index.entries.iter().enumerate() {
        assert_eq!(batch.value(i).len(), entry.value_len as usize);
    }
    // Named databases MAIN lists, by name.
    Some(
        index
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.flags & RecordEntry::SUBDATABASE != 0)
            .map(|(i, _)| index.key(i).to_vec())
            .collect(),
    )
}

fuzz_target!(|data: &[u8]| {
    let Ok(db) = Database::from_source(MemSource::new(data.to_vec(), "fuzz.mdb")) else {
        return;
    };
    let _ = db.map_size();
    let Ok(main) = db.main_tree() else {
        return;
    };
    let Some(names) = read_tree(&db, &main) else {
        return;
    };
    for name in names.iter().take(4) {
        if let Ok(name) = std::str::from_utf8(name) {
            if let Ok(tree) = db.named_tree(name) {
                let _ = read_tree(&db, &tree);
            }
        }
    }
});
