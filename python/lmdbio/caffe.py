"""Caffe ``Datum`` records, decoded in Rust.

``decode_datum(buf)`` gives what Caffe's data layers see: a planar
C×H×W ``uint8`` array (colour in BGR order, as OpenCV decodes) and the
label, for raw Datums (as ``convert_imageset`` writes them) and encoded ones
(JPEG, PNG: ``convert_imageset --encoded``); Datums holding ``float_data``
give ``float32``.
"""

import numpy as np

from . import _lmdbio

__all__ = ["decode_datum", "decode_batch", "decode_many"]


def _array(data, shape, is_float):
    dtype = np.dtype("<f4") if is_float else np.uint8
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def decode_datum(buf):
    """Decodes one serialized ``Datum`` (any bytes-like object).

    Returns ``(array, label)``: ``array`` is C×H×W ``uint8`` (``float32``
    for ``float_data`` Datums), writable and owned by the caller.
    Raises :class:`lmdbio.InvalidArgument` for bytes that are not a Datum
    or an image that does not decode.
    """
    data, shape, label, is_float = _lmdbio.decode_datum(buf)
    return _array(data, shape, is_float), label


def decode_batch(batch, threads=1):
    """Decodes every value of a :class:`lmdbio.Batch` on ``threads``
    threads (the GIL released) into one N×C×H×W array and an ``int64``
    label array. All records must have one shape."""
    data, shape, labels, is_float = _lmdbio.decode_batch(batch, int(threads))
    return _array(data, shape, is_float), np.asarray(labels, dtype=np.int64)


def decode_many(buffers, threads=1):
    """As :func:`decode_batch`, for any sequence of bytes-like Datums."""
    data, shape, labels, is_float = _lmdbio.decode_many(list(buffers), int(threads))
    return _array(data, shape, is_float), np.asarray(labels, dtype=np.int64)
