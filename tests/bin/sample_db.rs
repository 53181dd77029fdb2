//! Writes a sample Caffe-style training LMDB with the system liblmdb:
//! convert_imageset keys, raw `Datum` values (C×H×W uint8 pixels and a
//! label), one commit per 1000 records. Used by `scripts/demo.sh` until
//! `lmdbio convert` builds the sample from an image folder.
//!
//! usage: `lmdbio-sample-db OUT RECORDS [SIDE] [CHANNELS]`

use std::process::ExitCode;

use lmdb::{Environment, Transaction, WriteFlags};
use lmdbio_testkit::{caffe_key, Rng};

/// Serializes a raw Datum (proto2): channels=1, height=2, width=3, data=4,
/// label=5.
fn datum(channels: u32, side: u32, pixels: &[u8], label: u32) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    let mut out = Vec::with_capacity(pixels.len() + 32);
    for (tag, v) in [(0x08, channels), (0x10, side), (0x18, side)] {
        out.push(tag);
        varint(&mut out, v as u64);
    }
    out.push(0x22);
    varint(&mut out, pixels.len() as u64);
    out.extend_from_slice(pixels);
    out.push(0x28);
    varint(&mut out, label as u64);
    out
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let usage = || {
        eprintln!("usage: lmdbio-sample-db OUT RECORDS [SIDE=64] [CHANNELS=3]");
        ExitCode::from(2)
    };
    let (Some(out), Some(Ok(records))) = (args.get(1), args.get(2).map(|s| s.parse::<usize>()))
    else {
        return usage();
    };
    let side: u32 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
    let channels: u32 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(3);
    let pixels = (channels * side * side) as usize;
    if let Err(e) = std::fs::create_dir_all(out) {
        eprintln!("lmdbio-sample-db: {out}: {e}");
        return ExitCode::FAILURE;
    }
    let map_size = (records * (pixels + 4096) * 2).max(1 << 24);
    let result = (|| -> Result<(), lmdb::Error> {
        let env = Environment::new()
            .set_map_size(map_size)
            .open(out.as_ref())?;
        let db = env.open_db(None)?;
        let mut rng = Rng::new(records as u64);
        for start in (0..records).step_by(1000) {
            let mut txn = env.begin_rw_txn()?;
            for i in start..(start + 1000).min(records) {
                let value = datum(channels, side, &rng.bytes(pixels), (i % 10) as u32);
                txn.put(db, &caffe_key(i), &value, WriteFlags::empty())?;
            }
            txn.commit()?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lmdbio-sample-db: {out}: {e}");
            ExitCode::FAILURE
        }
    }
}
