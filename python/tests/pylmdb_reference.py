"""How PyTorch users read a Caffe LMDB today, without lmdbio: py-lmdb,
``txn.get`` per sample, the Datum parsed in plain Python and numpy. The
tests check lmdbio against it (test_torch.py); benches/python_input.py
times it as the baseline. Torch is imported only where a sample becomes a
tensor, so the module loads without it."""

import lmdb
import numpy as np


def parse_datum(buf):
    """A raw uint8 Datum (bytes or memoryview) -> (C×H×W array, label)."""
    fields, at, n = {}, 0, len(buf)
    while at < n:
        tag, at = _varint(buf, at)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            fields[field], at = _varint(buf, at)
        elif wire == 2:
            size, at = _varint(buf, at)
            fields[field] = buf[at: at + size]
            at += size
        else:
            raise ValueError(f"wire type {wire}")
    shape = (fields[1], fields[2], fields[3])
    label = fields.get(5, 0)
    label = label - (1 << 64) if label >= 1 << 63 else label
    return np.frombuffer(fields[4], np.uint8).reshape(shape), label


def _varint(buf, at):
    value = shift = 0
    while True:
        b = buf[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, at


class PlainLmdbDataset:
    """A map-style torch Dataset (duck-typed, as DataLoader takes it) over
    `keys` of the LMDB at `path`, the environment opened lazily in each
    worker."""

    def __init__(self, path, keys):
        self.path, self.keys, self.env = path, keys, None

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        import torch

        if self.env is None:
            self.env = lmdb.open(self.path, readonly=True, lock=False, readahead=False,
                                 max_readers=512)
        with self.env.begin(buffers=True) as txn:
            image, label = parse_datum(txn.get(self.keys[i]))
            # A copy: the buffer is the transaction's.
            return torch.from_numpy(image.copy()), label


def all_keys(path):
    """Every key of the LMDB at `path`, in order."""
    env = lmdb.open(path, readonly=True, lock=False)
    with env.begin() as txn:
        keys = list(txn.cursor().iternext(values=False))
    env.close()
    return keys
