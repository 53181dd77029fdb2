//! The bounded pipeline: reader threads load files, decoder threads turn
//! them into Datums, and the calling thread receives results in list order
//! (one ordered writer). The caller hands out work only up to `WINDOW`
//! entries ahead of the next one it needs, so memory stays bounded
//! however slow one image is.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;

use crossbeam_channel::{bounded, unbounded, RecvTimeoutError};

use super::entries::Entry;
use super::record::{self, Record, RecordOptions};
use super::ConvertError;

/// Reader threads: enough to keep a few reads in flight on cold storage.
const READERS: usize = 2;

/// How often a wait for the next record looks for a signal.
const INTERRUPT_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// What the ordered consumer does with each entry's result.
pub type Sink<'a> = dyn FnMut(&Entry, Result<Record, String>) -> Result<(), ConvertError> + 'a;

pub fn run(
    root: &Path,
    entries: &[Entry],
    opts: &RecordOptions,
    decoders: usize,
    sink: &mut Sink<'_>,
) -> Result<(), ConvertError> {
    let decoders = decoders.max(1);
    let window = (decoders * 16).max(64);
    let (job_tx, job_rx) = unbounded::<usize>();
    let (file_tx, file_rx) = bounded::<(usize, Result<Vec<u8>, String>)>(decoders * 4);
    let (done_tx, done_rx) = unbounded::<(usize, Result<Record, String>)>();
    std::thread::scope(|scope| {
        for _ in 0..READERS {
            let (job_rx, file_tx) = (job_rx.clone(), file_tx.clone());
            scope.spawn(move || {
                for i in job_rx {
                    // convert_imageset concatenates ROOT and the path, so a
                    // leading '/' still means "under ROOT".
                    let rel = entries[i].rel_path.trim_start_matches('/');
                    let path = root.join(rel);
                    let bytes =
                        super::guard::read_input(&path).map_err(|e| format!("reading: {e}"));
                    if file_tx.send((i, bytes)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(file_tx);
        for _ in 0..decoders {
            let (file_rx, done_tx) = (file_rx.clone(), done_tx.clone());
            scope.spawn(move || {
                for (i, bytes) in file_rx {
                    let e = &entries[i];
                    // A decoder that panics on a hostile file must not take
                    // its record with it: the writer would wait for it forever.
                    let result = bytes.and_then(|b| {
                        std::panic::catch_unwind(AssertUnwindSafe(|| {
                            record::build(&e.rel_path, &b, e.label, opts)
                        }))
                        .unwrap_or_else(|_| Err("the decoder panicked".into()))
                    });
                    if done_tx.send((i, result)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(done_tx);

        let mut issued = 0;
        while issued < entries.len().min(window) {
            job_tx.send(issued).expect("readers outlive the job queue");
            issued += 1;
        }
        let mut pending: HashMap<usize, Result<Record, String>> = HashMap::new();
        let mut next = 0;
        let result = (|| {
            while next < entries.len() {
                let Some(result) = pending.remove(&next) else {
                    // A slow read or decode must not outlast a signal.
                    let (i, result) = match done_rx.recv_timeout(INTERRUPT_POLL) {
                        Ok(got) => got,
                        Err(RecvTimeoutError::Timeout) if super::interrupt::requested() => {
                            return Err(ConvertError::Interrupted)
                        }
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => {
                            return Err(ConvertError::Output("a decoder thread died".into()))
                        }
                    };
                    pending.insert(i, result);
                    continue;
                };
                sink(&entries[next], result)?;
                next += 1;
                if issued < entries.len() {
                    job_tx.send(issued).expect("readers outlive the job queue");
                    issued += 1;
                }
            }
            Ok(())
        })();
        // Closing the queue lets every thread run dry and end.
        drop(job_tx);
        result
    })
}
