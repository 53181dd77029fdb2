//! Layout facts that decide reading speed, computed from the index alone
//! (no extra reads): how much of the file is tree versus values, and how
//! sequential the values are in key order.

use crate::index::RecordIndex;
use crate::plan::{CoalesceOptions, ReadPlan};

/// How a database's file is laid out for reading (what `lmdbio inspect`
/// prints).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Layout {
    /// The file's length in bytes.
    pub file_bytes: u64,
    /// Bytes of the tree's branch and leaf pages.
    pub tree_page_bytes: u64,
    /// Bytes of all values (without overflow page headers).
    pub value_bytes: u64,
    /// Records whose value lies inline in its leaf page.
    pub inline_values: u64,
    /// Records whose value lies in an overflow run.
    pub overflow_values: u64,
    /// Of the consecutive pairs (in key order) of overflow values, the
    /// fraction whose second run starts at or just after (within one page)
    /// the end of the first.
    pub overflow_sequential_fraction: f64,
    /// Consecutive overflow pairs whose second run lies before the first.
    pub overflow_backward_jumps: u64,
    /// Requests and bytes to read every value once in key order with the
    /// default coalescing.
    pub full_pass_requests: u64,
    /// Bytes those requests read (values plus the gaps coalescing reads
    /// through).
    pub full_pass_bytes: u64,
}

impl Layout {
    /// The layout of `index`'s tree in a file of `file_bytes` bytes.
    pub fn of(index: &RecordIndex, file_bytes: u64) -> Layout {
        let psize = index.page_size as u64;
        let mut layout = Layout {
            file_bytes,
            tree_page_bytes: (index.stats.branch_pages + index.stats.leaf_pages) * psize,
            value_bytes: index.value_bytes(),
            ..Default::default()
        };
        let mut pairs = 0u64;
        let mut sequential = 0u64;
        let mut prev_end: Option<(u64, u64)> = None; // (start, end) of last overflow span
        for e in &index.entries {
            if !e.is_overflow() {
                layout.inline_values += 1;
                continue;
            }
            layout.overflow_values += 1;
            let (start, len) = e.span();
            if let Some((p_start, p_end)) = prev_end {
                pairs += 1;
                let page_end = p_end.div_ceil(psize) * psize;
                if start >= p_end && start <= page_end + psize {
                    sequential += 1;
                } else if start < p_start {
                    layout.overflow_backward_jumps += 1;
                }
            }
            prev_end = Some((start, start + len));
        }
        layout.overflow_sequential_fraction = if pairs == 0 {
            1.0
        } else {
            sequential as f64 / pairs as f64
        };
        let all: Vec<usize> = (0..index.len()).collect();
        let plan = ReadPlan::for_records(&index.entries, &all, CoalesceOptions::default());
        layout.full_pass_requests = plan.runs.len() as u64;
        layout.full_pass_bytes = plan.buffer_len;
        layout
    }
}
