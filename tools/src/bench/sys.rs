//! Process counters and page-cache control for the benchmark.

use std::path::Path;

use mpi::traits::*;

use super::report::Context;
use crate::CommandError;

/// Counters of this process that the kernel keeps.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessCounters {
    pub major_faults: u64,
    pub minor_faults: u64,
    /// Peak resident set so far (KiB); never goes down.
    pub peak_rss_kib: u64,
    /// Bytes this process caused to be read from storage (`/proc/self/io`).
    pub storage_read_bytes: u64,
    /// User plus system CPU time of all the process's threads (seconds).
    pub cpu_s: f64,
}

impl ProcessCounters {
    pub fn now() -> ProcessCounters {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage fills the struct it is given.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
        // SAFETY: zero-initialised and filled above.
        let usage = unsafe { usage.assume_init() };
        let storage_read_bytes = std::fs::read_to_string("/proc/self/io")
            .ok()
            .and_then(|io| {
                io.lines()
                    .find_map(|l| l.strip_prefix("read_bytes:").map(|v| v.trim().parse().ok()))
                    .flatten()
            })
            .unwrap_or(0);
        ProcessCounters {
            major_faults: usage.ru_majflt as u64,
            minor_faults: usage.ru_minflt as u64,
            peak_rss_kib: peak_rss_since_reset().unwrap_or(usage.ru_maxrss as u64),
            storage_read_bytes,
            cpu_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        }
    }

    /// Deltas since `before` (the peak is kept as is).
    pub fn since(self, before: ProcessCounters) -> ProcessCounters {
        ProcessCounters {
            major_faults: self.major_faults - before.major_faults,
            minor_faults: self.minor_faults - before.minor_faults,
            peak_rss_kib: self.peak_rss_kib,
            storage_read_bytes: self
                .storage_read_bytes
                .saturating_sub(before.storage_read_bytes),
            cpu_s: self.cpu_s - before.cpu_s,
        }
    }
}

fn seconds(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// Starts a new peak-RSS measurement for this process (Linux: writing 5
/// to `/proc/self/clear_refs` resets `VmHWM`), so each method's peak is its
/// own and not the largest of every method run before it in the process.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// `VmHWM` of `/proc/self/status` in KiB: the peak since the last reset.
fn peak_rss_since_reset() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Drops the data file (and the files in `also` that exist) from the page
/// cache: `posix_fadvise(DONTNEED)` on
/// every node, and, only if `drop_all` asks for it, the whole machine's
/// cache through `/proc/sys/vm/drop_caches` when permitted: on a node
/// others share, that empties their caches too. Collective; returns what
/// was used.
pub fn drop_cache(
    db: &Path,
    also: &[std::path::PathBuf],
    ctx: &Context,
    drop_all: bool,
) -> Result<String, CommandError> {
    let data = lmdbio::data_file_path(db)?;
    let mut used = String::from("posix_fadvise(DONTNEED)");
    if ctx.is_node_leader() {
        let file = lmdbio::source::open_regular(&data, 0)?;
        // Both best effort, as the drop below: only clean pages can go.
        let _ = file.sync_data();
        let _ = lmdbio::page_cache::forget(&file, 0, 0);
        for path in also {
            if let Ok(file) = std::fs::File::open(path) {
                let _ = file.sync_data();
                let _ = lmdbio::page_cache::forget(&file, 0, 0);
            }
        }
    }
    let mut dropped = 0i32;
    if ctx.world.rank() == 0 && drop_all {
        // SAFETY: sync has no arguments and cannot fail.
        unsafe { libc::sync() };
        if std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok() {
            dropped = 1;
        }
    }
    ctx.world.process_at_rank(0).broadcast_into(&mut dropped);
    if dropped == 1 {
        used.push_str(" + drop_caches");
    }
    ctx.world.barrier();
    Ok(used)
}

/// Whether the kernel hands memory the guest frees back to its hypervisor
/// (virtio-balloon free page reporting), as the benchmark reports it.
///
/// Why it matters: a cold run fills the page cache with memory the cache
/// drop before it has just freed. Where reporting has handed that memory
/// back in the meantime, the hypervisor must back it again page by page as
/// the reads land, and the run reads at about half speed. On the project's
/// test machine that struck about one cold run in three, whichever method
/// it was (docs/PERFORMANCE.md, twelfth round); `scripts/bench-sweep.sh`
/// suspends reporting while it runs.
pub struct PageReporting {
    /// `page_reporting_order`: free blocks of this order and above are
    /// reported.
    pub order: u32,
    /// Whether any block can reach that order.
    pub active: bool,
}

impl PageReporting {
    /// The kernel's setting; `None` where it has no reporting.
    pub fn read() -> Option<PageReporting> {
        let order: u32 =
            std::fs::read_to_string("/sys/module/page_reporting/parameters/page_reporting_order")
                .ok()?
                .trim()
                .parse()
                .ok()?;
        // /proc/buddyinfo has one column per page order after "Node N, zone Z".
        let orders = std::fs::read_to_string("/proc/buddyinfo")
            .ok()
            .and_then(|b| b.lines().next().map(|l| l.split_whitespace().count()))
            .map(|fields| fields.saturating_sub(4) as u32);
        Some(PageReporting {
            order,
            active: orders.is_none_or(|n| order < n),
        })
    }
}

impl std::fmt::Display for PageReporting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = if self.active { "on" } else { "suspended" };
        write!(f, "{state} (page_reporting_order {})", self.order)
    }
}
