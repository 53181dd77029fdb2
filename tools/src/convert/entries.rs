//! The work list: which image goes under which key with which label.

/// One line of a `convert_imageset` list (given or generated). `line` is
/// the zero-based line number that becomes the key's 8-digit prefix, so
/// lines that fail keep their number and leave a gap.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub line: usize,
    pub rel_path: String,
    pub label: i32,
}

impl Entry {
    /// `convert_imageset`'s key: `format_int(line_id, 8) + "_" + path`.
    pub fn key(&self) -> Vec<u8> {
        format!("{:08}_{}", self.line, self.rel_path).into_bytes()
    }
}

/// Renumbers entries 0..n in their current order (after a shuffle the
/// line numbers follow the new order, as in `convert_imageset`).
pub fn renumber(entries: &mut [Entry]) {
    for (i, e) in entries.iter_mut().enumerate() {
        e.line = i;
    }
}

/// A Fisher–Yates shuffle driven by splitmix64, so a seed names one order
/// on every machine.
pub fn shuffle(entries: &mut [Entry], seed: u64) {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..entries.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        entries.swap(i, j);
    }
}
