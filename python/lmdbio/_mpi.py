"""Which communicator a reader uses, and MPI's life in this process.

A reader given an mpi4py communicator uses it (any communicator). Without
one it uses MPI_COMM_WORLD, initialising MPI (MPI_THREAD_MULTIPLE) if
nobody has, and finalising it at exit after closing every open reader.
"""

import atexit
import os
import sys
import weakref

from . import _lmdbio

_open_readers = weakref.WeakSet()
_finalize_registered = False


def _close_all_then_finalize():
    for reader in list(_open_readers):
        try:
            reader.close()
        except Exception:
            pass
    _lmdbio.finalize_mpi()


def ensure_mpi():
    """Initialises MPI unless mpi4py or anyone else has."""
    global _finalize_registered
    if "mpi4py.MPI" in sys.modules:
        # Importing mpi4py.MPI initialises MPI (unless told not to).
        mpi = sys.modules["mpi4py.MPI"]
        if not mpi.Is_initialized():
            mpi.Init_thread(mpi.THREAD_MULTIPLE)
        return
    if _lmdbio.init_mpi() and not _finalize_registered:
        atexit.register(_close_all_then_finalize)
        _finalize_registered = True


_LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                       "MV2_COMM_WORLD_SIZE", "SLURM_PMIXP_ABORT_AGENT_PORT")


def torchrun_world():
    """(rank, world size) when launched by torchrun (RANK and WORLD_SIZE
    set) and not by an MPI launcher; None otherwise."""
    env = os.environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    if any(v in env for v in _LAUNCHER_VARIABLES):
        return None
    try:
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    except ValueError:
        return None


def register(reader):
    _open_readers.add(reader)


def _family(version):
    for name in ("MPICH", "Open MPI", "Intel(R) MPI", "MVAPICH"):
        if name in version:
            return name
    return version.split("\n", 1)[0]


def handle_of(comm):
    """The MPI handle (an int) of an mpi4py communicator."""
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - comm came from somewhere
        raise _lmdbio.InvalidArgument(f"comm must be an mpi4py communicator ({e})") from None
    if not isinstance(comm, MPI.Comm):
        raise _lmdbio.InvalidArgument(
            f"comm must be an mpi4py communicator, not {type(comm).__name__}"
        )
    if comm == MPI.COMM_NULL:
        raise _lmdbio.InvalidArgument("comm is MPI.COMM_NULL")
    ours, theirs = _lmdbio.mpi_library_version(), MPI.Get_library_version()
    if _family(ours) != _family(theirs):
        raise _lmdbio.InvalidArgument(
            "mpi4py is built against another MPI than lmdbio "
            f"(mpi4py: {_family(theirs)}, lmdbio: {_family(ours)}); build mpi4py "
            "against lmdbio's MPI, e.g. MPICC=mpicc.mpich pip install --no-binary mpi4py mpi4py"
        )
    handle = getattr(comm, "handle", None)
    if handle is None:
        handle = MPI._handleof(comm)
    return int(handle)
