//! The input is one page. Every parser of the format must return a value or
//! a problem for it, and every node it accepts must lie inside the page.

#![no_main]

use libfuzzer_sys::fuzz_target;
use lmdbio_core::format::{LeafValue, MdbDb, MdbMeta, PageHeader, TreePage};

fuzz_target!(|data: &[u8]| {
    let _ = MdbMeta::parse(data);
    let Some(header) = PageHeader::parse(data) else {
        return;
    };
    let _ = header.mp_pages();
    // Take the page number from the page itself so the self-check passes
    // and the node parsers are reached.
    let Ok(page) = TreePage::parse(header.mp_pgno, data) else {
        return;
    };
    assert!(!page.is_empty());
    for i in 0..page.len() {
        if let Ok(node) = page.branch_node(i) {
            assert!(node.key.len() <= data.len());
        }
        if let Ok(node) = page.leaf_node(i) {
            match node.value {
                LeafValue::Inline { offset, size } => {
                    let value = &page.bytes()[offset as usize..offset as usize + size as usize];
                    if node.is_subdatabase {
                        assert!(MdbDb::parse(value).is_some());
                    }
                }
                LeafValue::Overflow { .. } => assert!(!node.is_subdatabase),
            }
        }
    }
});
