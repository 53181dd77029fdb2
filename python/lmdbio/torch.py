"""PyTorch datasets over an :class:`lmdbio.Reader`.

``CaffeDataset(path, batch_size)`` is an ``IterableDataset`` yielding ready
batches ``(uint8 N×C×H×W tensor, int64 N tensor)`` decoded from Caffe
Datums on a pool of threads that release the GIL; ``RawDataset`` yields
``(keys, values)`` lists of bytes for other record formats. Use them with
``DataLoader(dataset, batch_size=None, num_workers=0)``: the reader already
reads ahead on its own threads and shares one read per node among the
node's ranks, so worker processes have nothing to add (a DataLoader with
worker processes is refused: each would read the rank's share again).

Iterating a dataset gives one epoch (key order by default); the next
iteration gives the next epoch. ``state_dict()`` / ``load_state_dict()``
save and restore the position (collective over the reader's ranks).
"""

import os

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from . import _lmdbio, caffe
from ._reader import Reader

__all__ = ["CaffeDataset", "RawDataset", "init_process_group"]


class _ReaderDataset(IterableDataset):
    def __init__(self, path, batch_size, reader_options):
        super().__init__()
        self._path = path
        self._batch_size = batch_size
        self._reader_options = reader_options
        self._reader = None
        self._state = reader_options.pop("state", None)
        self._repartition = reader_options.pop("repartition", False)

    @property
    def reader(self):
        """The dataset's :class:`lmdbio.Reader` (opened on first use; collective)."""
        if self._reader is None:
            self._reader = Reader(self._path, self._batch_size, state=self._state,
                                  repartition=self._repartition, **self._reader_options)
        return self._reader

    def _batches(self):
        """The batches of the reader's current epoch."""
        info = get_worker_info()
        if info is not None:
            raise RuntimeError(
                "lmdbio datasets read in the main process: use "
                "DataLoader(dataset, batch_size=None, num_workers=0). The reader "
                "already reads ahead on its own threads and decodes on a thread "
                "pool (decode_threads); a worker process would read this rank's "
                "share once more, and records would repeat.")
        reader = self.reader
        step = reader.step
        limit = reader.step_limit
        if limit is not None and step >= limit:
            return
        epochs = 1
        while reader.steps_for_epochs(epochs) <= step:
            epochs += 1
        end = reader.steps_for_epochs(epochs)
        if limit is not None:
            end = min(end, limit)
        while reader.step < end:
            batch = reader.next_batch()
            if batch is None:
                return
            if len(batch):
                yield batch

    def state_dict(self):
        """The reader's position (see :meth:`lmdbio.Reader.state_dict`)."""
        return self.reader.state_dict()

    def load_state_dict(self, state, repartition=False):
        """Continues from ``state``; collective."""
        if self._reader is None:
            self._state, self._repartition = state, repartition
        else:
            self._reader.load_state_dict(state, repartition)

    def close(self):
        if self._reader is not None:
            self._reader.close()


class CaffeDataset(_ReaderDataset):
    """Batches of decoded Caffe Datums: ``(images, labels)``.

    ``images`` is a ``uint8`` N×C×H×W tensor (``float32`` for
    ``float_data`` Datums), ``labels`` an ``int64`` N tensor. With
    ``transform``, each image (a C×H×W tensor) is passed through it and
    the results are stacked. ``decode_threads``: threads decoding a batch
    (default: the machine's cores, at most 8). Other keyword arguments go
    to :class:`lmdbio.Reader` (``comm``, ``epochs``, ``shuffle``, ``seed``,
    ``partition``, ``state``, ...). Records come in key order unless
    ``shuffle=True``.
    """

    def __init__(self, path, batch_size, *, transform=None, decode_threads=None,
                 **reader_options):
        super().__init__(path, batch_size, reader_options)
        self.transform = transform
        self.decode_threads = decode_threads or min(8, os.cpu_count() or 1)

    def __iter__(self):
        for batch in self._batches():
            yield self._decode(batch)

    def _decode(self, batch):
        if self.transform is None:
            images, labels = caffe.decode_batch(batch, self.decode_threads)
            return torch.from_numpy(images), torch.from_numpy(labels)
        images, labels = [], []
        for _, value in batch:
            array, label = caffe.decode_datum(value)
            images.append(self.transform(torch.from_numpy(array)))
            labels.append(label)
        return torch.stack(images), torch.tensor(labels, dtype=torch.int64)


class RawDataset(_ReaderDataset):
    """Batches of raw records: ``(keys, values)``, lists of ``bytes``
    (copies, so they outlive the batch), for record formats of your own.
    Keyword arguments go to :class:`lmdbio.Reader`."""

    def __init__(self, path, batch_size, **reader_options):
        super().__init__(path, batch_size, reader_options)

    def __iter__(self):
        for batch in self._batches():
            keys, values = [], []
            for k, v in batch:
                keys.append(bytes(k))
                values.append(bytes(v))
            yield keys, values


def init_process_group(backend="gloo", **kwargs):
    """``torch.distributed.init_process_group`` with rank and world size
    from MPI (``MPI_COMM_WORLD``), for jobs launched by ``mpiexec``: torch's
    ranks then match lmdbio's. ``MASTER_ADDR`` (default 127.0.0.1, one
    machine) and ``MASTER_PORT`` (default 29500) come from the environment."""
    from . import _mpi

    _mpi.ensure_mpi()
    rank, size = _lmdbio.comm_rank_size()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    torch.distributed.init_process_group(backend, rank=rank, world_size=size, **kwargs)
    return rank, size
