"""lmdbio.caffe.decode_datum against Caffe's own decoding: databases made
by Caffe's `convert_imageset` from the same images, raw (decoded by
OpenCV when written) and PNG- or JPEG-encoded."""

import os
import struct
import subprocess

import lmdb
import numpy as np
import pytest

import lmdbio
from lmdbio.caffe import decode_datum, decode_many
from conftest import COMM, all_ranks_agree


def _images(workdir, n):
    """n PPM (colour) images of varied sizes, their list file and pixels."""
    rng = np.random.default_rng(21)
    folder = os.path.join(workdir, "images")
    os.makedirs(folder, exist_ok=True)
    lines, pixels = [], {}
    for i in range(n):
        h, w = int(rng.integers(5, 40)), int(rng.integers(5, 40))
        # Smooth ramps, a different one per channel, with a little noise:
        # JPEG keeps them close, and a channel swap shows.
        y, x = np.mgrid[0:h, 0:w]
        ramps = [rng.uniform(-6, 6) * x + rng.uniform(-6, 6) * y + rng.uniform(60, 190)
                 for _ in range(3)]
        noise = rng.integers(-4, 5, (h, w, 3))
        rgb = np.clip(np.stack(ramps, axis=-1) + noise, 0, 255).astype(np.uint8)
        name = f"img_{i:04d}.ppm"
        with open(os.path.join(folder, name), "wb") as f:
            f.write(b"P6\n%d %d\n255\n" % (w, h) + rgb.tobytes())
        lines.append(f"{name} {i % 7}\n")
        pixels[name] = rgb
    with open(os.path.join(workdir, "list.txt"), "w") as f:
        f.writelines(lines)
    return folder + "/", os.path.join(workdir, "list.txt"), pixels


def _convert(workdir, folder, listfile, name, *args):
    db = os.path.join(workdir, name)
    subprocess.run(["convert_imageset", *args, folder, listfile, db], check=True,
                   capture_output=True)
    return db


def _records(db):
    env = lmdb.open(db, readonly=True, lock=False)
    with env.begin() as txn:
        out = [(bytes(k), bytes(v)) for k, v in txn.cursor()]
    env.close()
    return out


@pytest.fixture(scope="module")
def caffe_dbs(workdir):
    out = None
    if COMM.rank == 0:
        d = os.path.join(workdir, "caffe")
        os.makedirs(d)
        folder, listfile, pixels = _images(d, 40)
        out = dict(
            pixels=pixels,
            raw=_convert(d, folder, listfile, "raw"),
            png=_convert(d, folder, listfile, "png", "--encoded", "--encode_type=png"),
            jpg=_convert(d, folder, listfile, "jpg", "--encoded", "--encode_type=jpg"),
            gray=_convert(d, folder, listfile, "gray", "--gray"),
            gray_png=_convert(d, folder, listfile, "gray_png", "--gray", "--encoded",
                              "--encode_type=png"),
        )
    return COMM.bcast(out)


def test_raw_datums_are_the_images_in_bgr_planes(caffe_dbs):
    ok = True
    for key, value in _records(caffe_dbs["raw"]):
        array, label = decode_datum(value)
        name = key.decode().split("_", 1)[1]
        rgb = caffe_dbs["pixels"][name]
        bgr_planes = rgb[:, :, ::-1].transpose(2, 0, 1)
        ok &= array.dtype == np.uint8 and np.array_equal(array, bgr_planes)
        ok &= label == int(name[4:8]) % 7
    assert all_ranks_agree(ok)


@pytest.mark.parametrize("raw, encoded", [("raw", "png"), ("gray", "gray_png")])
def test_png_datums_decode_as_caffe_does(caffe_dbs, raw, encoded):
    """Byte-identical to the planes Caffe's OpenCV decoding wrote."""
    raws, pngs = _records(caffe_dbs[raw]), _records(caffe_dbs[encoded])
    assert [k for k, _ in raws] == [k for k, _ in pngs]
    ok = True
    for (_, r), (_, p) in zip(raws, pngs):
        (a, la), (b, lb) = decode_datum(r), decode_datum(p)
        ok &= a.shape == b.shape and np.array_equal(a, b) and la == lb
        ok &= a.shape[0] == (1 if raw == "gray" else 3)
    assert all_ranks_agree(ok)


def test_jpeg_datums_decode_close_to_caffe(caffe_dbs):
    """JPEG decoders may differ in rounding: same shape, close pixels."""
    ok = True
    for (_, r), (_, j) in zip(_records(caffe_dbs["raw"]), _records(caffe_dbs["jpg"])):
        (a, la), (b, lb) = decode_datum(r), decode_datum(j)
        ok &= a.shape == b.shape and la == lb
        error = np.abs(a.astype(int) - b.astype(int)).mean()
        swapped = np.abs(a.astype(int) - b[::-1].astype(int)).mean()
        ok &= error < 6 and swapped > 2 * error
    assert all_ranks_agree(ok)


def _varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def test_float_datums_give_float32():
    values = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    datum = b"\x08\x02\x10\x03\x18\x04" + b"\x28" + _varint(5)
    datum += b"".join(b"\x35" + struct.pack("<f", v) for v in values.ravel())
    array, label = decode_datum(datum)
    assert array.dtype == np.float32 and label == 5
    assert np.array_equal(array, values)
    # Negative labels are sign-extended varints.
    array, label = decode_datum(b"\x08\x01\x10\x01\x18\x01\x22\x01\x07\x28" + _varint(2**64 - 3))
    assert label == -3 and array.tolist() == [[[7]]]


def test_garbage_is_refused_clearly():
    with pytest.raises(lmdbio.InvalidArgument, match="Datum"):
        decode_datum(b"\x08\x03\x10\x02\x18\x02\x22\x05abc")
    with pytest.raises(lmdbio.InvalidArgument, match="decode"):
        decode_datum(b"\x22\x04\x89PNG\x38\x01")


def test_batches_decode_on_threads(caffe_dbs):
    """decode_many on 4 threads stacks the same arrays decode_datum gives."""
    values = [v for _, v in _records(caffe_dbs["png"])]
    same = [v for v in values if decode_datum(v)[0].shape == decode_datum(values[0])[0].shape]
    images, labels = decode_many(same, threads=4)
    assert images.shape[0] == len(same) and labels.dtype == np.int64
    for i, v in enumerate(same):
        assert np.array_equal(images[i], decode_datum(v)[0])
    with pytest.raises(lmdbio.InvalidArgument, match="one shape"):
        decode_many(values, threads=2)
