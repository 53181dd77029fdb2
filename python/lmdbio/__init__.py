"""lmdbio: reads stock LMDB training data for MPI and PyTorch jobs.

One reader per node reads the database with large coalesced requests
into node-shared memory; every rank gets zero-copy batches of its share of
each epoch, shuffled or in key order, resumable from a small portable
state, also on another rank count. See docs/python.md.

* :class:`Reader`: batches of ``(key, value)`` buffers.
* :func:`prepare`: the node's shared window made and mapped ahead.
* :mod:`lmdbio.caffe`: Caffe ``Datum`` decoding (``decode_datum``).
* :mod:`lmdbio.torch`: PyTorch datasets over a reader.
* :class:`Error` and its subclasses (``.kind``, ``.code``, ``.rank``).
"""

from ._lmdbio import (
    Batch,
    Buffer,
    Corrupt,
    Error,
    InternalError,
    InvalidArgument,
    MpiError,
    NoSuchDatabase,
    NotFound,
    NotLmdb,
    ReadError,
    ResourceLimit,
    Truncated,
    Unsupported,
)
from ._reader import Reader, prepare

__all__ = [
    "Reader", "prepare", "Batch", "Buffer", "Error", "NotFound", "ReadError", "Truncated",
    "NotLmdb", "Corrupt", "Unsupported", "NoSuchDatabase", "InvalidArgument",
    "ResourceLimit", "MpiError", "InternalError",
]
