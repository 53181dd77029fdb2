//! Reading record values in one process: plan, read the runs, check overflow
//! headers, hand out slices of the buffer. The MPI engine does the same with
//! collective reads into shared memory.

use crate::database::Database;
use crate::error::Result;
use crate::format::{overflow_pages, page_flags, PageHeader, PAGEHDRSZ};
use crate::index::{RecordEntry, RecordIndex};
use crate::plan::{CoalesceOptions, ReadPlan};
use crate::source::ReadAt;

/// The values of some records, read in one round. Values are slices of one
/// buffer: no per-record copies.
pub struct ValueBatch {
    buffer: Vec<u8>,
    /// `(start, len)` of each requested record's value in `buffer`.
    values: Vec<(usize, usize)>,
    /// Positioned reads the batch took (after coalescing).
    pub read_requests: usize,
}

impl ValueBatch {
    /// Number of records requested.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// No records were requested.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Value of the `i`-th requested record.
    pub fn value(&self, i: usize) -> &[u8] {
        let (start, len) = self.values[i];
        &self.buffer[start..start + len]
    }
}

/// Reads the values of `ordinals` with coalesced positioned reads.
pub fn read_values<R: ReadAt>(
    db: &Database<R>,
    index: &RecordIndex,
    ordinals: &[usize],
    options: CoalesceOptions,
) -> Result<ValueBatch> {
    let plan = ReadPlan::for_records(&index.entries, ordinals, options);
    let mut buffer = vec![0u8; plan.buffer_len as usize];
    for run in &plan.runs {
        let at = run.buf_offset as usize;
        db.source()
            .read_exact_at(&mut buffer[at..at + run.len as usize], run.file_offset)?;
    }
    let mut values = Vec::with_capacity(ordinals.len());
    for (&i, place) in ordinals.iter().zip(&plan.placements) {
        let entry = &index.entries[i];
        let start = place.buf_offset as usize;
        let value_start = if entry.is_overflow() {
            check_overflow_header(db, entry, &buffer[start..start + PAGEHDRSZ])?;
            start + PAGEHDRSZ
        } else {
            start
        };
        values.push((value_start, entry.value_len as usize));
    }
    Ok(ValueBatch {
        buffer,
        values,
        read_requests: plan.runs.len(),
    })
}

/// An overflow run must start with a header naming itself, flagged
/// P_OVERFLOW, long enough for the value. Checking it costs nothing extra:
/// the header is read together with the value.
pub fn check_overflow_header<R: ReadAt>(
    db: &Database<R>,
    entry: &RecordEntry,
    header: &[u8],
) -> Result<()> {
    match overflow_header_problem(entry, header, db.page_size()) {
        None => Ok(()),
        Some((pgno, reason)) => Err(db.corrupt(pgno, reason)),
    }
}

/// What is wrong with an overflow run's header, if anything: `(page, why)`.
pub fn overflow_header_problem(
    entry: &RecordEntry,
    header: &[u8],
    psize: u32,
) -> Option<(u64, String)> {
    let pgno = (entry.value_offset - PAGEHDRSZ as u64) / psize as u64;
    let Some(h) = PageHeader::parse(header) else {
        return Some((pgno, "overflow header cut short".into()));
    };
    let needed = overflow_pages(entry.value_len as u64, psize);
    if h.mp_pgno != pgno
        || h.kind_flags() != page_flags::P_OVERFLOW
        || (h.mp_pages() as u64) < needed
    {
        return Some((
            pgno,
            format!(
                "bad overflow page header (mp_pgno {}, flags {:#06x}, mp_pages {}) for a {}-byte value needing {needed} pages",
                h.mp_pgno,
                h.mp_flags,
                h.mp_pages(),
                entry.value_len
            ),
        ));
    }
    None
}
