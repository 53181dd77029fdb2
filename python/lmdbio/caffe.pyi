from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
from collections.abc import Buffer as _BufferLike

from . import Batch

def decode_datum(buf: _BufferLike) -> tuple[npt.NDArray[np.uint8] | npt.NDArray[np.float32], int]: ...
def decode_batch(batch: Batch, threads: int = 1) -> tuple[npt.NDArray[np.uint8] | npt.NDArray[np.float32], npt.NDArray[np.int64]]: ...
def decode_many(buffers: Iterable[_BufferLike], threads: int = 1) -> tuple[npt.NDArray[np.uint8] | npt.NDArray[np.float32], npt.NDArray[np.int64]]: ...
