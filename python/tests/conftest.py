"""Shared fixtures: databases written by liblmdb (py-lmdb) and Caffe's own
tools, made once per run by rank 0 and shared with every rank of the job.

The suite runs under real ``mpiexec`` (scripts/test-python.sh): every rank
runs every test, so each test makes the same collective calls on every
rank, and results are gathered so that every rank asserts the same thing.
"""

import os
import random
import shutil
import subprocess
import tempfile

import lmdb
import pytest
from mpi4py import MPI

COMM = MPI.COMM_WORLD


def on_every_rank(value):
    """Every rank's `value`, in rank order, on every rank."""
    return COMM.allgather(value)


def all_ranks_agree(ok):
    """Whether `ok` holds on every rank (so that all ranks fail together)."""
    return all(COMM.allgather(bool(ok)))


def _write(path, records, *, subdb=None, dupsort=False, order=None, map_size=1 << 30):
    env = lmdb.open(path, map_size=map_size, max_dbs=4, subdir=True)
    db = env.open_db(subdb.encode(), dupsort=dupsort) if (subdb or dupsort) else None
    keys = list(records)
    if order is not None:
        keys = order(keys)
    with env.begin(write=True) as txn:
        for k in keys:
            txn.put(k, records[k], db=db)
    env.close()


def _layouts(root):
    """name -> (path, subdb, {key: value}) for the layouts the reader is
    tested on."""
    rng = random.Random(1234)
    out = {}
    # Many small records: a tree of several levels, values on leaf pages.
    small = {b"%08d" % i: rng.randbytes(rng.randrange(0, 200)) for i in range(3000)}
    out["small"] = small
    # Values larger than a page: overflow pages.
    large = {b"%06d" % i: rng.randbytes(rng.randrange(3000, 20000)) for i in range(300)}
    out["overflow"] = large
    # Mixed sizes written in random key order (pages out of key order), with
    # deletions (free pages between live ones).
    mixed = {rng.randbytes(rng.randrange(1, 40)): rng.randbytes(rng.choice([5, 500, 5000, 50000]))
             for _ in range(700)}
    out["mixed_random_order"] = mixed
    paths = {}
    for name, recs in out.items():
        path = os.path.join(root, name)
        order = (lambda ks: rng.sample(ks, len(ks))) if name == "mixed_random_order" else None
        _write(path, recs, order=order)
        paths[name] = (path, None, recs)
    # Deletions after the bulk load leave free pages.
    path = os.path.join(root, "mixed_random_order")
    env = lmdb.open(path, map_size=1 << 30)
    with env.begin(write=True) as txn:
        for k in sorted(mixed)[::7]:
            txn.delete(k)
            del mixed[k]
    env.close()
    # A named database next to the main one.
    named = {b"n%05d" % i: rng.randbytes(rng.randrange(10, 3000)) for i in range(500)}
    path = os.path.join(root, "named")
    _write(path, named, subdb="train")
    paths["named"] = (path, "train", named)
    return paths


@pytest.fixture(scope="session")
def workdir():
    root = tempfile.mkdtemp(prefix="lmdbio-pytest-") if COMM.rank == 0 else None
    root = COMM.bcast(root)
    yield root
    COMM.barrier()
    if COMM.rank == 0:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def layouts(workdir):
    made = None
    if COMM.rank == 0:
        os.makedirs(os.path.join(workdir, "layouts"))
        made = _layouts(os.path.join(workdir, "layouts"))
    made = COMM.bcast(made)
    return made


def pytest_configure(config):
    # Only rank 0 reports at length; every rank still runs and asserts.
    if COMM.rank != 0:
        config.option.verbose = -1


@pytest.fixture(scope="session")
def mnist_db(workdir):
    """A Caffe MNIST-style database from Caffe's own convert_mnist_data:
    class c is a noisy bar whose position depends on c."""
    path = os.path.join(workdir, "mnist_lmdb")
    if COMM.rank == 0:
        write_mnist(workdir, path, 640, seed=5)
    COMM.barrier()
    return path


def write_mnist(workdir, path, n, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    images = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
    for i, c in enumerate(labels):
        images[i, 2 + 2 * c: 6 + 2 * c, 4:24] += 150
    img = os.path.join(workdir, "mnist-images.idx3")
    lab = os.path.join(workdir, "mnist-labels.idx1")
    with open(img, "wb") as f:
        f.write(np.array([0x803, n, 28, 28], dtype=">u4").tobytes())
        f.write(images.tobytes())
    with open(lab, "wb") as f:
        f.write(np.array([0x801, n], dtype=">u4").tobytes())
        f.write(labels.tobytes())
    subprocess.run(["convert_mnist_data", img, lab, path], check=True,
                   capture_output=True)
