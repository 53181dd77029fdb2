//! The data file's reads against real files: every read shape, direct
//! and staged reads, the tree's descriptor and the page cache.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use super::own_file::*;
use super::staging::*;
use super::streams::*;
use super::tree_source::*;
use super::{DataFile, DirectIo};
use lmdbio_core::error::Error;
use lmdbio_core::huge_pages::{StagingBuffer, HUGE_PAGE};
use lmdbio_core::index::TreePages;
use lmdbio_core::page_cache::DirectAlignment;
use lmdbio_core::plan::ReadRun;
use lmdbio_core::source::{FileSource, ReadAt};

const IN_PLACE: Landing = Landing::InPlace;

/// A scratch file of `len` bytes whose byte at offset i is `i * 7 % 251`.
fn scratch_file(name: &str, len: usize) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("lmdbio-{}-{name}", std::process::id()));
    let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&path, bytes).unwrap();
    path
}

/// [`scratch_file`] of `pages` pages, synced and out of the page
/// cache, opened; `None` (the file removed) where the kernel cannot
/// say what it caches or this file system keeps its pages.
fn cold_scratch_file(name: &str, pages: u64) -> Option<(std::path::PathBuf, FileSource)> {
    let path = scratch_file(name, (pages * 4096) as usize);
    std::fs::File::open(&path).unwrap().sync_all().unwrap();
    let file = FileSource::open(&path).unwrap();
    file.forget_cached(0, 0);
    if file.cached_bytes(0, pages * 4096) == Some(0) {
        return Some((path, file));
    }
    std::fs::remove_file(path).unwrap();
    None
}

fn runs(spans: &[(u64, u64)]) -> Vec<ReadRun> {
    let mut at = 0;
    spans
        .iter()
        .map(|&(file_offset, len)| {
            let r = ReadRun {
                file_offset,
                len,
                buf_offset: at,
            };
            at += len;
            r
        })
        .collect()
}

fn in_file_order(runs: &[ReadRun]) -> Vec<usize> {
    (0..runs.len()).collect()
}

#[test]
fn every_stream_count_lands_each_run_where_the_plan_puts_it() {
    let path = scratch_file("streams", 100_000);
    let file = FileSource::open(&path).unwrap();
    let spans = [
        (0, 10),
        (50_000, 4096),
        (10, 7),
        (99_000, 1000),
        (20_000, 1),
    ];
    let runs = runs(&spans);
    let total: usize = spans.iter().map(|s| s.1 as usize).sum();
    let orders = [in_file_order(&runs), vec![3, 0, 4, 1, 2]];
    for (streams, order) in (1..7).flat_map(|s| orders.iter().map(move |o| (s, o))) {
        let mut buf = vec![0u8; total];
        // SAFETY: buf is ours and outlives the call.
        let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
        // What progress hears only grows, one run at a time at most per
        // call, and ends with every run.
        let heard = Mutex::new(vec![0usize]);
        let progress = |n: usize| heard.lock().unwrap().push(n);
        read_on_streams(
            &file,
            &runs,
            order,
            dest,
            streams,
            &Landing::InPlace,
            &progress,
        )
        .unwrap();
        let heard = heard.into_inner().unwrap();
        assert!(heard.windows(2).all(|w| w[0] <= w[1]), "{heard:?}");
        assert_eq!(heard.len(), runs.len() + 1);
        assert_eq!(heard.last(), Some(&runs.len()));
        if streams == 1 {
            assert_eq!(heard, (0..=runs.len()).collect::<Vec<_>>());
        }
        let mut at = 0;
        for &(offset, len) in &spans {
            for i in 0..len as usize {
                assert_eq!(
                    buf[at + i],
                    ((offset as usize + i) * 7 % 251) as u8,
                    "streams {streams}: byte {i} of the run at {offset}"
                );
            }
            at += len as usize;
        }
    }
    std::fs::remove_file(path).unwrap();
}

/// A reader's file whose window is in huge pages.
fn own(path: &std::path::Path, mode: DirectIo) -> OwnFile {
    own_staging(path, mode, true, Staging::MAX_LEN)
}

fn own_staging(
    path: &std::path::Path,
    mode: DirectIo,
    window_huge: bool,
    staging_max: usize,
) -> OwnFile {
    let source = FileSource::open(path).unwrap();
    let direct = (mode != DirectIo::Never)
        .then(|| source.direct_alignment())
        .flatten();
    let served_remotely = !source.on_local_file_system();
    OwnFile {
        served_remotely,
        source,
        mode,
        direct,
        direct_refused: AtomicBool::new(false),
        window_huge: AtomicBool::new(window_huge),
        staging: Staging::new(staging_max),
        descriptor: DescriptorMode::default(),
        tree: OnceLock::new(),
        stage: OnceLock::new(),
    }
}

#[test]
fn the_tree_is_scanned_around_the_caches_where_the_reader_cannot_do_so_itself() {
    const PAGE: u64 = 4096;
    let Some((path, plain)) = cold_scratch_file("tree-around", 64) else {
        return; // the kernel cannot say, or this file system keeps its pages
    };
    let cached = |pgno: u64| plain.cached_bytes(pgno * PAGE, PAGE);
    // As on a FUSE or network file system: served by another machine,
    // and no direct-I/O alignment reported.
    let like_fuse = |mode| {
        let mut f = own(&path, mode);
        f.direct = None;
        f.served_remotely = true;
        DataFile::Own(f)
    };
    if FileSource::open_around_cache(&path).is_err() {
        std::fs::remove_file(path).unwrap();
        return; // this file system takes no direct reads
    }
    let file = like_fuse(DirectIo::Auto);
    let DataSource::Own(tree) = file.source() else {
        unreachable!()
    };
    assert!(tree.reads_around_cache());
    assert_eq!(file.opens(), 2);
    let pages = TreePages {
        branches: vec![3],
        leaves: vec![10, 11, 40],
    };
    for pgno in [3, 10, 11, 40] {
        let mut page = vec![0u8; PAGE as usize];
        tree.read_exact_at(&mut page, pgno * PAGE).unwrap();
        let first = (pgno * PAGE) as usize;
        assert!(
            (0..PAGE as usize).all(|i| page[i] == ((first + i) * 7 % 251) as u8),
            "page {pgno}"
        );
        assert_eq!(
            cached(pgno),
            Some(0),
            "tree page {pgno} went into the cache"
        );
    }
    // Advice would bring them in; it is not given.
    file.source().will_need(&[(10 * PAGE, 2 * PAGE)]);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(
        cached(10),
        Some(0),
        "advice read a tree page into the cache"
    );
    // There is nothing to drop, and the second descriptor is kept.
    file.source().forget_tree_pages(&pages, PAGE);
    assert_eq!(file.opens(), 2);

    // Not where direct reads are ruled out, nor on a local file system
    // (whatever it reports of direct reads).
    let local = |direct| {
        let mut f = own(&path, DirectIo::Auto);
        f.direct = direct;
        f.served_remotely = false;
        DataFile::Own(f)
    };
    let alignment = Some(DirectAlignment {
        offset: 512,
        memory: 512,
    });
    for file in [like_fuse(DirectIo::Never), local(None), local(alignment)] {
        let DataSource::Own(tree) = file.source() else {
            unreachable!()
        };
        assert!(!tree.reads_around_cache());
        assert_eq!(file.opens(), 1);
    }
    // Nor where the cache holds most of the file: its pages are read
    // from there.
    let mut whole = vec![0u8; 64 * PAGE as usize];
    plain.read_exact_at(&mut whole, 0).unwrap();
    let file = like_fuse(DirectIo::Auto);
    let DataSource::Own(tree) = file.source() else {
        unreachable!()
    };
    assert!(!tree.reads_around_cache());
    assert_eq!(file.opens(), 1);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn tree_pages_leave_the_cache_unless_the_cache_holds_most_of_the_file() {
    const PAGE: u64 = 4096;
    let Some((path, file)) = cold_scratch_file("forget-tree", 64) else {
        return; // the kernel cannot say, or this file system keeps its pages
    };
    let cached = |pgno: u64| file.cached_bytes(pgno * PAGE, PAGE);
    let read_page = |pgno: u64| {
        let mut page = vec![0u8; PAGE as usize];
        file.read_exact_at(&mut page, pgno * PAGE).unwrap();
    };
    let tree = TreePages {
        branches: vec![3],
        leaves: vec![10, 11, 40],
    };
    // A cold file with its tree read: the tree's pages go.
    for pgno in [3, 10, 11, 40] {
        read_page(pgno);
    }
    assert_eq!(cached(10), Some(PAGE), "a page just read is cached");
    DataSource::Own(&file).forget_tree_pages(&tree, PAGE);
    for pgno in [3, 10, 11, 40] {
        assert_eq!(cached(pgno), Some(0), "tree page {pgno} is still cached");
    }
    // A file the cache holds: nothing goes.
    for pgno in 0..64 {
        read_page(pgno);
    }
    DataSource::Own(&file).forget_tree_pages(&tree, PAGE);
    assert_eq!(file.cached_bytes(0, 64 * PAGE), Some(64 * PAGE));
    std::fs::remove_file(path).unwrap();
}

#[test]
fn rounds_are_planned_in_whole_pages_whenever_the_file_is_whole_pages() {
    let whole = scratch_file("granule-whole", 4 * 4096);
    let ragged = scratch_file("granule-ragged", 4 * 4096 + 100);
    for mode in [DirectIo::Never, DirectIo::Auto] {
        let file = DataFile::Own(own(&whole, mode));
        assert_eq!(file.plan_granule(4096).unwrap(), 4096, "{mode:?}");
        // A page size the file is not made of, or no page size at all.
        assert_eq!(file.plan_granule(3 * 4096).unwrap(), 1, "{mode:?}");
        assert_eq!(file.plan_granule(0).unwrap(), 1, "{mode:?}");
        let file = DataFile::Own(own(&ragged, mode));
        assert_eq!(file.plan_granule(4096).unwrap(), 1, "{mode:?}");
    }
    // Required direct reads of a file they cannot serve are refused.
    let always = own(&ragged, DirectIo::Always);
    if always.direct.is_some() {
        let e = DataFile::Own(always).plan_granule(4096).unwrap_err();
        assert!(e.to_string().contains("direct I/O was asked for"), "{e}");
    }
    std::fs::remove_file(whole).unwrap();
    std::fs::remove_file(ragged).unwrap();
}

#[test]
fn a_read_in_the_other_mode_waits_for_the_reads_in_progress() {
    let path = scratch_file("modes", 1 << 16);
    let file = own(&path, DirectIo::Always);
    if file.direct.is_none() {
        std::fs::remove_file(path).unwrap();
        return; // no direct reads on this file system
    }
    let first = file.descriptor.enter(&file.source, true).unwrap();
    assert!(file.source.is_direct().unwrap());
    let cached = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let _held = file.descriptor.enter(&file.source, false).unwrap();
            assert!(!file.source.is_direct().unwrap());
            cached.store(true, Ordering::SeqCst);
        });
        // Another direct read joins the one in progress ...
        let second = file.descriptor.enter(&file.source, true).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        // ... while the cached one waits for both.
        assert!(!cached.load(Ordering::SeqCst));
        assert!(file.source.is_direct().unwrap());
        drop(second);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!cached.load(Ordering::SeqCst));
        assert!(file.source.is_direct().unwrap());
        drop(first);
    });
    assert!(cached.load(Ordering::SeqCst));
    assert!(!file.source.is_direct().unwrap());
    std::fs::remove_file(path).unwrap();
}

#[test]
fn direct_rounds_deliver_the_same_bytes_and_auto_follows_the_page_cache() {
    let path = scratch_file("direct", 1 << 20);
    std::fs::File::open(&path).unwrap().sync_all().unwrap();
    let always = own(&path, DirectIo::Always);
    if always.direct.is_none() {
        std::fs::remove_file(path).unwrap();
        return; // checked by the MPI tests: refused at open
    }
    // Whole pages, out of file order, as an aligned plan makes them.
    let spans = [(8192, 4096), (0, 4096), (65536, 12288), (1 << 19, 4096)];
    let runs = runs(&spans);
    let total: usize = spans.iter().map(|s| s.1 as usize).sum();
    let mut storage = vec![0u8; total + 4096];
    let skip = storage.as_ptr().align_offset(4096);
    let check = |buf: &[u8]| {
        let mut at = 0;
        for &(offset, len) in &spans {
            for i in 0..len as usize {
                assert_eq!(buf[at + i], ((offset as usize + i) * 7 % 251) as u8);
            }
            at += len as usize;
        }
    };
    let read = |file: &OwnFile, storage: &mut Vec<u8>| {
        storage.fill(0);
        let buf = &mut storage[skip..skip + total];
        // SAFETY: buf is ours and outlives the call.
        let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
        let done = file
            .read_runs(&runs, &in_file_order(&runs), dest, 2, &|_| {})
            .unwrap();
        check(&storage[skip..skip + total]);
        done
    };
    assert_eq!(read(&always, &mut storage).direct_requests, 4);
    let never = own(&path, DirectIo::Never);
    assert_eq!(read(&never, &mut storage).direct_requests, 0);
    // Never left the pages cached: auto reads through the cache ...
    let auto = own(&path, DirectIo::Auto);
    assert_eq!(read(&auto, &mut storage).direct_requests, 0);
    // ... until they are dropped (where the kernel can say).
    auto.source.forget_cached(0, 0);
    let expect = if auto.source.cached_bytes(0, 4096).is_some() {
        4
    } else {
        0
    };
    assert_eq!(read(&auto, &mut storage).direct_requests, expect);
    // An unaligned destination: both read through staging buffers
    // where the system gives huge pages; else auto falls back to the
    // cache and always refuses.
    let staging = StagingBuffer::new(HUGE_PAGE).is_some();
    auto.source.forget_cached(0, 0);
    let order = in_file_order(&runs);
    for file in [&auto, &always] {
        storage.fill(0);
        let buf = &mut storage[skip + 1..skip + 1 + total];
        // SAFETY: buf is ours and outlives the call.
        let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
        let read = file.read_runs(&runs, &order, dest, 2, &|_| {});
        match (staging, file.mode) {
            (true, mode) => {
                let read = read.unwrap();
                let want = if mode == DirectIo::Always { 4 } else { expect };
                assert_eq!(read.staged_requests, want, "{mode:?}");
                check(&storage[skip + 1..skip + 1 + total]);
            }
            (false, DirectIo::Auto) => assert_eq!(read.unwrap().direct_requests, 0),
            (false, _) => assert!(matches!(read, Err(Error::Internal(_)))),
        }
    }
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_window_in_small_pages_is_filled_through_staging_buffers_in_pieces() {
    const MIB: u64 = 1 << 20;
    let path = scratch_file("staged", 7 * MIB as usize);
    std::fs::File::open(&path).unwrap().sync_all().unwrap();
    // Buffers of one huge page: the 5 MiB run is read in three pieces.
    let file = own_staging(&path, DirectIo::Always, false, HUGE_PAGE);
    if file.direct.is_none() || StagingBuffer::new(HUGE_PAGE).is_none() {
        std::fs::remove_file(path).unwrap();
        return; // no direct reads here, or no huge pages to stage in
    }
    let spans = [(MIB, 5 * MIB), (0, 4096), (6 * MIB, 8192)];
    let runs = runs(&spans);
    let total: usize = spans.iter().map(|s| s.1 as usize).sum();
    for streams in [1, 3] {
        let mut buf = vec![0u8; total];
        // SAFETY: buf is ours and outlives the call.
        let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
        let read = file
            .read_runs(&runs, &[1, 0, 2], dest, streams, &|_| {})
            .unwrap();
        // 5 MiB in pieces of 2 MiB, and the two short runs.
        assert_eq!(
            (read.requests, read.direct_requests, read.staged_requests),
            (5, 5, 5)
        );
        let mut at = 0;
        for &(offset, len) in &spans {
            let want = (0..len as usize).map(|i| ((offset as usize + i) * 7 % 251) as u8);
            assert!(
                buf[at..at + len as usize].iter().copied().eq(want),
                "streams {streams}: the run at {offset}"
            );
            at += len as usize;
        }
        // The streams' buffers are kept for the next round.
        let idle = file.staging.idle.lock().unwrap();
        assert_eq!(idle.len(), streams);
        assert!(idle.iter().all(|b| b.len() == HUGE_PAGE));
    }
    // Where the system gives no huge pages, always reads straight into
    // the window as it is (aligned) or refuses (not), and auto reads
    // through the cache.
    let mut storage = vec![0u8; total + 4096 + 1];
    let skip = storage.as_ptr().align_offset(4096);
    for (shift, mode) in [
        (0, DirectIo::Always),
        (1, DirectIo::Always),
        (0, DirectIo::Auto),
    ] {
        let file = own_staging(&path, mode, false, HUGE_PAGE);
        file.staging.refused.store(true, Ordering::Relaxed);
        file.source.forget_cached(0, 0);
        let buf = &mut storage[skip + shift..skip + shift + total];
        // SAFETY: buf is ours and outlives the call.
        let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
        let read = file.read_runs(&runs, &[0, 1, 2], dest, 2, &|_| {});
        match (mode, shift) {
            (DirectIo::Always, 0) => {
                let read = read.unwrap();
                assert_eq!((read.direct_requests, read.staged_requests), (3, 0));
            }
            (DirectIo::Always, _) => assert!(matches!(read, Err(Error::Internal(_)))),
            _ => assert_eq!(read.unwrap().direct_requests, 0, "auto without huge pages"),
        }
    }
    // The window in huge pages: straight into it, no staging.
    file.set_window_in_huge_pages(true);
    let mut storage = vec![0u8; total + 4096];
    let skip = storage.as_ptr().align_offset(4096);
    let buf = &mut storage[skip..skip + total];
    // SAFETY: buf is ours and outlives the call.
    let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
    let read = file.read_runs(&runs, &[0, 1, 2], dest, 2, &|_| {}).unwrap();
    assert_eq!((read.direct_requests, read.staged_requests), (3, 0));
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_run_past_the_end_fails_as_truncated_and_a_mismatched_buffer_is_refused() {
    let path = scratch_file("short", 1000);
    let file = FileSource::open(&path).unwrap();
    let runs = runs(&[(0, 100), (950, 100)]);
    let mut buf = vec![0u8; 200];
    // SAFETY: buf is ours and outlives the calls.
    let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
    // The run past the end is read first: nothing is reported complete.
    let heard = Mutex::new(Vec::new());
    let progress = |n: usize| heard.lock().unwrap().push(n);
    let err = read_on_streams(&file, &runs, &[1, 0], dest, 1, &IN_PLACE, &progress).unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err}");
    assert!(heard.lock().unwrap().is_empty());
    let err = read_on_streams(&file, &runs, &[0, 1], dest, 2, &IN_PLACE, &|_| {}).unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err}");
    // SAFETY: as above, a shorter view of the same buffer.
    let short = unsafe { WindowRange::new(buf.as_mut_ptr(), 150) };
    assert!(read_on_streams(&file, &runs, &[0, 1], short, 2, &IN_PLACE, &|_| {}).is_err());
    // An order that is not one of the runs.
    assert!(read_on_streams(&file, &runs, &[0, 0], dest, 2, &IN_PLACE, &|_| {}).is_err());
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_partial_order_reads_only_the_runs_it_names() {
    // What a read through the cache does after direct reads were
    // refused part way: the runs already in are not written again.
    let path = scratch_file("partial", 10_000);
    let file = FileSource::open(&path).unwrap();
    let runs = runs(&[(0, 100), (5000, 100), (9000, 100)]);
    let mut buf = vec![0u8; 300];
    // SAFETY: buf is ours and outlives the call.
    let dest = unsafe { WindowRange::new(buf.as_mut_ptr(), buf.len()) };
    let heard = Mutex::new(Vec::new());
    let progress = |n: usize| heard.lock().unwrap().push(n);
    read_on_streams(&file, &runs, &[2, 1], dest, 2, &IN_PLACE, &progress).unwrap();
    assert!(buf[..100].iter().all(|&b| b == 0));
    for (at, offset) in [(100, 5000), (200, 9000)] {
        for i in 0..100 {
            assert_eq!(buf[at + i], ((offset + i) * 7 % 251) as u8);
        }
    }
    assert_eq!(heard.into_inner().unwrap().last(), Some(&2));
    std::fs::remove_file(path).unwrap();
}
