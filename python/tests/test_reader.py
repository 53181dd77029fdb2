"""lmdbio.Reader under real mpiexec, against liblmdb-written databases."""

import hashlib
import json
import os
import pickle
import shutil
import signal
import threading
import time

import lmdb
import numpy as np
import pytest
from mpi4py import MPI

import lmdbio
from conftest import COMM, all_ranks_agree, on_every_rank

PARTITIONS = ["contiguous", "round_robin", "strided"]
LAYOUTS = ["small", "overflow", "mixed_random_order", "named"]


def read_epochs(reader, steps=None):
    """[(epoch, key, sha256(value))] of every record this rank is handed."""
    got = []
    n = 0
    while steps is None or n < steps:
        batch = reader.next_batch()
        if batch is None:
            break
        n += 1
        for k, v in batch:
            got.append((batch.epoch, bytes(k), hashlib.sha256(v).hexdigest()))
    return got


def expected(records):
    return sorted((k, hashlib.sha256(v).hexdigest()) for k, v in records.items())


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("partition", PARTITIONS)
def test_every_record_once_per_epoch(layouts, layout, partition):
    path, subdb, records = layouts[layout]
    batch = 7 + COMM.size  # not a divisor of the record counts
    with lmdbio.Reader(path, batch, epochs=2, partition=partition, subdb=subdb) as r:
        assert r.records == len(records)
        mine = read_epochs(r)
    everyone = [x for part in on_every_rank(mine) for x in part]
    for epoch in (0, 1):
        got = sorted((k, h) for e, k, h in everyone if e == epoch)
        assert all_ranks_agree(got == expected(records)), f"epoch {epoch}"


@pytest.mark.parametrize("tail", ["short", "wrap"])
def test_batches_are_batch_size(layouts, tail):
    path, _, records = layouts["small"]
    with lmdbio.Reader(path, 50, epochs=1, tail=tail) as r:
        sizes = [len(b) for b in r]
    assert all(s <= 50 for s in sizes)
    assert sum(on_every_rank(sum(sizes))) == len(records)


def test_shuffled_epochs_are_permutations_and_repeat(layouts):
    path, _, records = layouts["small"]

    def run(seed):
        with lmdbio.Reader(path, 32, epochs=3, shuffle=True, seed=seed,
                           partition="round_robin") as r:
            return read_epochs(r)

    first, again, other = run(11), run(11), run(12)
    assert all_ranks_agree(first == again)
    everyone = [x for part in on_every_rank(first) for x in part]
    orders = []
    for epoch in range(3):
        got = [(k, h) for e, k, h in everyone if e == epoch]
        assert all_ranks_agree(sorted(got) == expected(records))
        orders.append([k for k, _ in got])
    assert all_ranks_agree(orders[0] != orders[1] and orders[0] != sorted(orders[0]))
    assert all_ranks_agree([k for _, k, _ in first] != [k for _, k, _ in other])


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("partition", ["contiguous", "strided"])
def test_stop_state_resume_equals_uninterrupted(layouts, shuffle, partition):
    path, _, _ = layouts["small"]
    opts = dict(epochs=2, shuffle=shuffle, seed=3, partition=partition)
    with lmdbio.Reader(path, 40, **opts) as r:
        whole = read_epochs(r)
        limit = r.step_limit
    # At the start, early, in the second epoch.
    for stop in (0, 5, limit * 2 // 3):
        with lmdbio.Reader(path, 40, **opts) as r:
            head = read_epochs(r, steps=stop)
            state = r.state_dict()
        # The state survives JSON and pickle.
        state = pickle.loads(pickle.dumps(json.loads(json.dumps(state))))
        assert state["step"] == stop
        with lmdbio.Reader(path, 40, state=state, **opts) as r:
            tail = read_epochs(r)
        assert all_ranks_agree(head + tail == whole), f"stop at {stop}"


def test_load_state_dict_resumes(layouts):
    path, _, _ = layouts["overflow"]
    with lmdbio.Reader(path, 8, epochs=1) as r:
        whole = read_epochs(r)
    r = lmdbio.Reader(path, 8, epochs=1)
    head = read_epochs(r, steps=3)
    state = r.state_dict()
    more = read_epochs(r, steps=2)
    r.load_state_dict(state)
    tail = read_epochs(r)
    r.close()
    assert all_ranks_agree(head + tail == whole and tail[: len(more)] == more)


@pytest.mark.skipif(COMM.size < 2, reason="re-partitioning needs two rank counts")
@pytest.mark.parametrize("shuffle", [False, True])
def test_repartition_completes_the_epoch_once(layouts, shuffle):
    """A job on all P ranks stops mid-epoch; a job on P-1 of them (any
    communicator) resumes it with repartition; and the other way round.
    Every record of the epoch is read exactly once across both."""
    path, _, records = layouts["small"]
    opts = dict(epochs=1, shuffle=shuffle, seed=9, partition="contiguous")
    small = COMM.Split(0 if COMM.rank < COMM.size - 1 else MPI.UNDEFINED, COMM.rank)
    for first, second in ((COMM, small), (small, COMM)):
        head, state = [], None
        if first != MPI.COMM_NULL:
            with lmdbio.Reader(path, 16, comm=first, **opts) as r:
                head = read_epochs(r, steps=20)
                state = r.state_dict()
        state = COMM.bcast(state, root=0)
        tail = []
        if second != MPI.COMM_NULL:
            if state["ranks"] != second.size:
                with pytest.raises(lmdbio.Error):
                    lmdbio.Reader(path, 16, comm=second, state=state, **opts)
            with lmdbio.Reader(path, 16, comm=second, state=state, repartition=True,
                               **opts) as r:
                tail = read_epochs(r)
        everyone = [x for part in on_every_rank(head + tail) for x in part]
        got = sorted((k, h) for _, k, h in everyone)
        assert all_ranks_agree(got == expected(records))
    if small != MPI.COMM_NULL:
        small.Free()


def test_any_communicator(layouts):
    """Two groups of ranks each read the whole database on their own."""
    path, _, records = layouts["named"][0], "train", layouts["named"][2]
    group = COMM.Split(COMM.rank % 2, COMM.rank)
    with lmdbio.Reader(path, 10, comm=group, epochs=1, subdb="train") as r:
        assert r.ranks == group.size and r.rank == group.rank
        mine = read_epochs(r)
    mates = group.allgather(mine)
    got = sorted((k, h) for part in mates for _, k, h in part)
    assert all_ranks_agree(got == expected(records))
    group.Free()


def test_buffers_are_zero_copy_views(layouts):
    path, _, records = layouts["overflow"]
    r = lmdbio.Reader(path, 4)
    batch = next(r)
    assert len(batch) == 4 and batch.epoch == 0
    k, v = batch[0]
    value = records[bytes(k)]
    assert bytes(v) == value and len(v) == len(value)
    assert memoryview(v).readonly and memoryview(v).tobytes() == value
    assert hashlib.sha256(v).digest() == hashlib.sha256(value).digest()
    assert np.array_equal(np.frombuffer(v, dtype=np.uint8), np.frombuffer(value, np.uint8))
    assert [bytes(x) for x in batch.keys()] == [bytes(x) for x, _ in batch]
    next(r)
    with pytest.raises(BufferError):
        bytes(v)
    r.close()


def test_bad_path_raises_on_every_rank(workdir):
    with pytest.raises(lmdbio.NotFound) as e:
        lmdbio.Reader(os.path.join(workdir, "no-such-db"), 4)
    assert e.value.kind == "not_found" and "no-such-db" in str(e.value)


def _damaged_copy(workdir, layouts, name, damage):
    path = os.path.join(workdir, name)
    if COMM.rank == 0:
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(layouts["small"][0], path)
        damage(os.path.join(path, "data.mdb"))
    COMM.barrier()
    return path


@pytest.mark.parametrize("interruptible", [True, False])
def test_damaged_files_raise_on_every_rank(workdir, layouts, interruptible):
    def truncate(f):
        size = os.path.getsize(f)
        with open(f, "r+b") as fh:
            fh.truncate(size // 2)

    def scribble(f):
        # Overwrite every page past the meta pages with garbage.
        with open(f, "r+b") as fh:
            fh.seek(2 * 4096)
            fh.write(b"\xa5" * (os.path.getsize(f) - 2 * 4096))

    def not_lmdb(f):
        with open(f, "r+b") as fh:
            fh.write(b"\0" * (2 * 4096))

    for name, damage in [("truncated", truncate), ("scribbled", scribble), ("zeroed", not_lmdb)]:
        path = _damaged_copy(workdir, layouts, name, damage)
        with pytest.raises(lmdbio.Error) as e:
            with lmdbio.Reader(path, 16, epochs=1, interruptible=interruptible) as r:
                for _ in r:
                    pass
        assert e.value.kind in ("truncated", "corrupt", "not_lmdb"), str(e.value)
        assert path in str(e.value) or "rank" in str(e.value)
        kinds = on_every_rank(e.value.kind)
        assert all_ranks_agree(len(kinds) == COMM.size)


def test_dupsort_refused_on_every_rank(workdir):
    path = os.path.join(workdir, "dupsort")
    if COMM.rank == 0:
        env = lmdb.open(path, max_dbs=2)
        db = env.open_db(b"dups", dupsort=True)
        with env.begin(write=True) as txn:
            for i in range(50):
                txn.put(b"k%d" % (i % 5), b"v%d" % i, db=db)
        env.close()
    COMM.barrier()
    with pytest.raises(lmdbio.Unsupported) as e:
        lmdbio.Reader(path, 4, subdb="dups")
    assert e.value.kind == "unsupported"
    with pytest.raises(lmdbio.NoSuchDatabase):
        lmdbio.Reader(path, 4, subdb="nope")


def test_bad_options_raise_clearly(layouts):
    path = layouts["small"][0]
    with pytest.raises(lmdbio.InvalidArgument, match="partition"):
        lmdbio.Reader(path, 4, partition="diagonal")
    with pytest.raises(lmdbio.InvalidArgument, match="batch_size"):
        lmdbio.Reader(path, 0)
    with pytest.raises(lmdbio.InvalidArgument, match="state"):
        lmdbio.Reader(path, 4, state={"nothing": 1})


def test_state_of_another_database_is_refused(layouts):
    with lmdbio.Reader(layouts["small"][0], 8) as r:
        next(r)
        state = r.state_dict()
    with pytest.raises(lmdbio.Error):
        lmdbio.Reader(layouts["overflow"][0], 8, state=state)


def interrupt_a_wait(layout, signal_after, late_by, **options):
    """Rank 0 reads one epoch of `layout` while the other ranks start
    `late_by` seconds late, and gets SIGINT `signal_after` seconds into its
    wait for them; every rank then reads the rest. Requires the interrupt
    to raise KeyboardInterrupt on rank 0 and every record to come once:
    the batch rank 0 was waiting for when the interrupt came is delivered
    by its next step. Returns the seconds rank 0 took to be interrupted
    (None on the others)."""
    path, _, records = layout
    with lmdbio.Reader(path, 16, epochs=1, **options) as r:
        seen = [bytes(k) for k, _ in next(r)]
        interrupted_after = None
        if COMM.rank == 0:
            timer = threading.Timer(signal_after, os.kill, (os.getpid(), signal.SIGINT))
            started = time.monotonic()
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                # Every step until one needs the late ranks.
                for _ in range(10_000):
                    seen += [bytes(k) for k, _ in next(r)]
            interrupted_after = time.monotonic() - started
        else:
            time.sleep(late_by)
        seen += [k for _, k, _ in read_epochs(r)]
    everyone = sorted(k for part in on_every_rank(seen) for k in part)
    assert all_ranks_agree(everyone == sorted(records))
    return interrupted_after


@pytest.mark.skipif(COMM.size < 2, reason="needs a rank to wait for")
def test_ctrl_c_interrupts_a_wait_promptly(layouts):
    """Rank 0 waits for a late rank; SIGINT raises KeyboardInterrupt within
    a fraction of a second, and the batch it was waiting for comes next."""
    after = interrupt_a_wait(layouts["small"], 0.3, 3, partition="contiguous")
    assert after is None or after < 1.5


@pytest.mark.parametrize("partition", PARTITIONS)
def test_on_the_callers_thread_every_record_once_and_resume(layouts, partition):
    """interruptible=False drives the engine on the calling thread: the
    same records in the same order, the same state, across epochs."""
    path, _, records = layouts["mixed_random_order"]
    opts = dict(epochs=2, partition=partition, shuffle=True, seed=5)
    with lmdbio.Reader(path, 9, **opts) as r:
        whole = read_epochs(r)
    with lmdbio.Reader(path, 9, interruptible=False, **opts) as r:
        head = read_epochs(r, steps=4)
        state = r.state_dict()
        rest = read_epochs(r)
        spent = r.counters()["binding_seconds"]
    with lmdbio.Reader(path, 9, state=state, interruptible=False, **opts) as r:
        resumed = read_epochs(r)
    assert all_ranks_agree(head + rest == whole and resumed == rest)
    assert all_ranks_agree(0 <= spent < 5)
    everyone = [x for part in on_every_rank(whole) for x in part]
    for epoch in (0, 1):
        got = sorted((k, h) for e, k, h in everyone if e == epoch)
        assert all_ranks_agree(got == expected(records))


@pytest.mark.skipif(COMM.size < 2, reason="needs a rank to wait for")
def test_ctrl_c_on_the_callers_thread_acts_after_the_step(layouts):
    """interruptible=False: SIGINT during a wait for a late rank raises
    KeyboardInterrupt once the step completes, and that step's batch comes
    next: nothing lost or repeated."""
    after = interrupt_a_wait(layouts["small"], 0.2, 1, interruptible=False)
    assert after is None or 0.5 < after < 30


def test_prepare_makes_the_window_ahead(layouts):
    """After lmdbio.prepare (which a Reader's first open calls) an open
    with the same options makes nothing: no communicator, no window."""
    path = layouts["small"][0]
    lmdbio.prepare(batch_size=8, window_bytes=3 << 20)
    with lmdbio.Reader(path, 8, epochs=1, window_bytes=3 << 20) as r:
        made = r.counters()["setup_made"]
        n = sum(len(b) for b in r)
    assert all_ranks_agree(made == 0)
    assert sum(on_every_rank(n)) == len(layouts["small"][2])


def test_plain_process_is_a_world_of_one(layouts, tmp_path):
    """`python script.py` without mpiexec reads the whole database."""
    if COMM.rank != 0:
        COMM.barrier()
        return
    import subprocess
    import sys

    path, _, records = layouts["small"]
    script = (
        "import lmdbio\n"
        f"r = lmdbio.Reader({path!r}, 100, epochs=1)\n"
        "print(r.ranks, sum(len(b) for b in r))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA", "MPI"))}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=120)
    COMM.barrier()
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", str(len(records))]


@pytest.mark.skipif(COMM.size < 2, reason="needs a rank that does not fail")
def test_one_ranks_failure_raises_on_every_rank(workdir, layouts):
    """Only the last rank's path is bad (every rank reads for itself, in a
    node of its own): the ranks' inputs are checked to agree at open, so
    every rank raises the same error naming the rank without the file, and
    none hangs."""
    path = layouts["small"][0]
    if COMM.rank == COMM.size - 1:
        path = os.path.join(workdir, "missing-on-one-rank")
    with pytest.raises(lmdbio.Error) as e:
        lmdbio.Reader(path, 8, ranks_per_node=1)
    assert e.value.kind == "invalid_argument", str(e.value)
    message = str(e.value)
    assert "disagree on the data file" in message, message
    assert f"rank {COMM.size - 1} has no readable data file" in message, message


def test_global_shuffle_from_a_kept_stage_is_exact(workdir, layouts):
    path, _, records = layouts["small"]
    stage = os.path.join(workdir, "stage-global")  # one folder for every rank
    opts = dict(epochs=2, seed=5, partition="round_robin", stage=stage)

    def run(**more):
        with lmdbio.Reader(path, 32, **opts, **more) as r:
            got = read_epochs(r)
            staged = sum(on_every_rank(r.counters()["stage_bytes_read"]))
        everyone = [x for part in on_every_rank(got) for x in part]
        for epoch in (0, 1):
            assert all_ranks_agree(
                sorted((k, h) for e, k, h in everyone if e == epoch) == expected(records)), epoch
        return [k for _, k, _ in everyone], staged

    chunked, _ = run(shuffle_mode="chunked")
    # Kept: the reader completes the stage on close, so the next job reads
    # its epochs from it whatever the writer had done by then.
    first, _ = run(shuffle_mode="global", keep_stage=True)
    again, staged = run(shuffle_mode="global")
    assert all_ranks_agree(first == again and first != chunked)
    assert all_ranks_agree(staged > 0)


def test_bad_shuffle_mode_raises(layouts):
    path = layouts["small"][0]
    with pytest.raises(lmdbio.InvalidArgument, match="global-after-first"):
        lmdbio.Reader(path, 4, shuffle_mode="sideways")
    with pytest.raises(lmdbio.InvalidArgument, match="shuffle_mode"):
        lmdbio.Reader(path, 4, shuffle=False, shuffle_mode="global")
