"""PyTorch input loops over a Caffe LMDB, cold, under mpiexec: one epoch per
method, every rank reading its contiguous share, the data file dropped from
the page cache before each method. Prints one JSON line per method (rank 0).

    mpiexec -n P python benches/python_input.py DB [--batch 64] [--workers 2]

Methods:
  reader  lmdbio.Reader, touching every value (len) in Python
  reader-inline  the same with interruptible=False (the engine on the
          caller's thread)
  torch   lmdbio.torch.CaffeDataset: batches decoded to uint8 N×C×H×W tensors
  pylmdb  a py-lmdb Dataset (txn.get per sample, Datum parsed with numpy)
          through DataLoader(batch_size=B, num_workers=W): how PyTorch users
          read LMDB today
  dali    NVIDIA DALI's CPU pipeline, fn.readers.caffe (if installed)
"""

import argparse
import json
import os
import sys
import time

from mpi4py import MPI

import lmdbio

# The py-lmdb baseline is the tests' reference reader (imported by the
# methods that use it: py-lmdb need not be installed for the others).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))

COMM = MPI.COMM_WORLD


def evict(db, everything=False):
    """Drops the data file from the page cache (rank 0, then everyone
    waits); with `everything`, the whole machine's page cache (a GlusterFS
    brick's cache is out of the per-file drop's reach)."""
    COMM.barrier()
    if COMM.rank == 0:
        path = os.path.join(db, "data.mdb") if os.path.isdir(db) else db
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        if everything:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
    COMM.barrier()


def my_keys(db):
    from pylmdb_reference import all_keys

    keys = all_keys(db)
    n, p, r = len(keys), COMM.size, COMM.rank
    start = r * (n // p) + min(r, n % p)
    return keys[start: start + n // p + (r < n % p)]


def run_reader(args, interruptible=True):
    records = nbytes = 0
    with lmdbio.Reader(args.db, args.batch, epochs=1, interruptible=interruptible) as r:
        for batch in r:
            for _, v in batch:
                nbytes += len(v)
            records += len(batch)
        binding = r.counters()["binding_seconds"]
    return records, nbytes, binding


def run_torch(args):
    import lmdbio.torch
    from torch.utils.data import DataLoader

    records = nbytes = 0
    ds = lmdbio.torch.CaffeDataset(args.db, args.batch, epochs=1,
                                   decode_threads=args.decode_threads)
    for x, y in DataLoader(ds, batch_size=None, num_workers=0):
        records += len(y)
        nbytes += x.numel()
    ds.close()
    return records, nbytes


def run_pylmdb(args, keys):
    from pylmdb_reference import PlainLmdbDataset
    from torch.utils.data import DataLoader

    records = nbytes = 0
    loader = DataLoader(PlainLmdbDataset(args.db, keys), batch_size=args.batch, shuffle=False,
                        num_workers=args.workers)
    for x, y in loader:
        records += len(y)
        nbytes += x.numel()
    return records, nbytes


def run_dali(args):
    """DALI's CPU pipeline: fn.readers.caffe, this rank's shard (the raw
    Datums' pixels come out as they are: nothing to decode)."""
    from nvidia.dali import fn, pipeline_def

    @pipeline_def(batch_size=args.batch, num_threads=args.decode_threads, device_id=None)
    def pipe():
        images, labels = fn.readers.caffe(path=args.db, shard_id=COMM.rank,
                                          num_shards=COMM.size, random_shuffle=False,
                                          name="reader")
        return images, labels

    p = pipe()
    p.build()
    total = p.epoch_size("reader")
    shard = total * (COMM.rank + 1) // COMM.size - total * COMM.rank // COMM.size
    records = nbytes = 0
    while records < shard:
        images, labels = p.run()
        take = min(len(labels), shard - records)
        records += take
        nbytes += sum(images.at(i).nbytes for i in range(take))
    return records, nbytes


def main():
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--decode-threads", type=int, default=2)
    p.add_argument("--methods", default="reader,torch,pylmdb")
    p.add_argument("--label", default="")
    p.add_argument("--drop-all-caches", action="store_true")
    args = p.parse_args()
    methods = args.methods.split(",")
    if {"torch", "pylmdb"} & set(methods):
        import torch

        torch.set_num_threads(1)
    keys = my_keys(args.db) if "pylmdb" in methods else None
    # As a job does once at start-up (and `lmdbio bench` before timing):
    # make the node's communicators and shared window, mapped ahead.
    lmdbio.prepare(batch_size=args.batch)
    for method in methods:
        evict(args.db, args.drop_all_caches)
        start = time.perf_counter()
        binding = None
        if method == "reader":
            records, nbytes, binding = run_reader(args)
        elif method == "reader-inline":
            records, nbytes, binding = run_reader(args, interruptible=False)
        elif method == "torch":
            records, nbytes = run_torch(args)
        elif method == "pylmdb":
            records, nbytes = run_pylmdb(args, keys)
        elif method == "dali":
            records, nbytes = run_dali(args)
        else:
            raise SystemExit(f"unknown method {method}")
        elapsed = COMM.allreduce(time.perf_counter() - start, op=MPI.MAX)
        records = COMM.allreduce(records)
        nbytes = COMM.allreduce(nbytes)
        if binding is not None:
            # The binding's own time on its slowest rank.
            binding = COMM.allreduce(binding, op=MPI.MAX)
        if COMM.rank == 0:
            print(json.dumps(dict(method=method, ranks=COMM.size, records=records,
                                  bytes=nbytes, seconds=round(elapsed, 3),
                                  records_per_s=round(records / elapsed, 1),
                                  binding_seconds=binding, label=args.label)), flush=True)


if __name__ == "__main__":
    main()
