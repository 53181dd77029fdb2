"""lmdbio.torch with real PyTorch: batches, DataLoader, training equal to a
plain py-lmdb Dataset, and torch.distributed under mpiexec."""

import os
import socket

import lmdb
import numpy as np
import pytest
import torch
from mpi4py import MPI
from torch import nn
from torch.utils.data import DataLoader

import lmdbio
from lmdbio.torch import CaffeDataset, RawDataset
from conftest import COMM, all_ranks_agree, on_every_rank
from pylmdb_reference import PlainLmdbDataset, all_keys, parse_datum

# Ranks share the machine's cores; one thread each keeps them from
# fighting over them.
torch.set_num_threads(1)


def test_caffe_dataset_yields_decoded_batches_in_key_order(mnist_db):
    ds = CaffeDataset(mnist_db, 32, epochs=1, decode_threads=3)
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    images, labels = [], []
    for x, y in loader:
        assert x.dtype == torch.uint8 and x.shape[1:] == (1, 28, 28) and x.shape[0] <= 32
        assert y.dtype == torch.int64 and y.shape == (x.shape[0],)
        images.append(x)
        labels.append(y)
    mine = (torch.cat(images).numpy(), torch.cat(labels).numpy())
    parts = on_every_rank(mine)
    got_images = np.concatenate([p[0] for p in parts])
    got_labels = np.concatenate([p[1] for p in parts])
    # Contiguous partition, key order: rank after rank is the database.
    env = lmdb.open(mnist_db, readonly=True, lock=False)
    with env.begin() as txn:
        ref = [parse_datum(v) for _, v in txn.cursor()]
    env.close()
    assert all_ranks_agree(np.array_equal(got_images, np.stack([r[0] for r in ref])))
    assert all_ranks_agree(got_labels.tolist() == [r[1] for r in ref])
    ds.close()


def test_each_iteration_is_one_epoch(mnist_db):
    ds = CaffeDataset(mnist_db, 50, epochs=3, shuffle=True, seed=4)
    sizes = [sum(len(y) for _, y in ds) for _ in range(4)]
    totals = [sum(s) for s in zip(*on_every_rank(sizes))]
    assert all_ranks_agree(totals == [640, 640, 640, 0])
    ds.close()


def test_raw_dataset_and_transform(mnist_db):
    keys = all_keys(mnist_db)
    raw = RawDataset(mnist_db, 64, epochs=1, comm=MPI.COMM_SELF)
    got = [k for ks, _ in raw for k in ks]
    assert got == keys
    raw.close()
    ds = CaffeDataset(mnist_db, 64, epochs=1, comm=MPI.COMM_SELF,
                      transform=lambda t: t.float().mean(dim=0, keepdim=True) / 255)
    x, y = next(iter(ds))
    assert x.dtype == torch.float32 and x.shape == (64, 1, 28, 28)
    ds.close()


def test_worker_processes_are_refused(mnist_db):
    ds = CaffeDataset(mnist_db, 16, epochs=1, comm=MPI.COMM_SELF)
    with pytest.raises(Exception, match="num_workers=0"):
        next(iter(DataLoader(ds, batch_size=None, num_workers=1)))


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def train(batches, wrap=lambda m: m):
    torch.manual_seed(0)
    model = wrap(SmallNet())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x.float() / 255), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def lmdbio_batches(ds, epochs):
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    for _ in range(epochs):
        yield from loader


def plain_batches(path, keys, batch, epochs):
    loader = DataLoader(PlainLmdbDataset(path, keys), batch_size=batch, shuffle=False,
                        num_workers=0)
    for _ in range(epochs):
        for x, y in loader:
            yield x, y.to(torch.int64)


@pytest.mark.skipif(COMM.size != 1, reason="one process trains; others would wait")
def test_training_losses_equal_a_plain_lmdb_dataset(mnist_db):
    """128 iterations of a small CNN: identical losses, and it learns."""
    keys = all_keys(mnist_db)
    ds = CaffeDataset(mnist_db, 20, epochs=4)
    ours = train(lmdbio_batches(ds, 4))
    ds.close()
    theirs = train(plain_batches(mnist_db, keys, 20, 4))
    assert len(ours) == 128
    assert ours == theirs
    assert np.mean(ours[-10:]) < 0.5 * np.mean(ours[:10])


@pytest.mark.skipif(COMM.size != 2, reason="data-parallel training on two ranks")
def test_distributed_data_parallel_under_mpiexec(mnist_db):
    """DDP over gloo with torch ranks from MPI: each rank's losses equal
    those of DDP fed the same rank's records by py-lmdb."""
    import torch.distributed as dist

    port = COMM.bcast(_free_port())
    os.environ["MASTER_PORT"] = str(port)
    rank, size = lmdbio.torch.init_process_group("gloo")
    try:
        assert (rank, size) == (COMM.rank, COMM.size) == (dist.get_rank(), dist.get_world_size())
        with lmdbio.Reader(mnist_db, 16, epochs=1) as r:
            my_keys = [bytes(k) for b in r for k, _ in b]
        ddp = lambda m: nn.parallel.DistributedDataParallel(m)
        ds = CaffeDataset(mnist_db, 16, epochs=3)
        ours = train(lmdbio_batches(ds, 3), ddp)
        ds.close()
        theirs = train(plain_batches(mnist_db, my_keys, 16, 3), ddp)
        assert len(ours) == 60
        assert all_ranks_agree(ours == theirs)
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dataset_state_dict_resumes(mnist_db):
    ds = CaffeDataset(mnist_db, 24, epochs=2, shuffle=True, seed=1)
    whole = [y.tolist() for _ in range(2) for _, y in ds]
    ds.close()
    ds = CaffeDataset(mnist_db, 24, epochs=2, shuffle=True, seed=1)
    it = iter(ds)
    head = [next(it)[1].tolist() for _ in range(5)]
    state = ds.state_dict()
    ds.close()
    ds = CaffeDataset(mnist_db, 24, epochs=2, shuffle=True, seed=1, state=state)
    tail = [y.tolist() for _ in range(2) for _, y in ds]
    ds.close()
    assert all_ranks_agree(head + tail == whole)
