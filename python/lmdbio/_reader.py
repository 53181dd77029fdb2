"""lmdbio.Reader: the engine from Python."""

import os

from . import _lmdbio, _mpi

STATE_FORMAT = "lmdbio.job_cursor"
STATE_VERSION = 1

# The options prepare() was called with on MPI_COMM_WORLD in this process
# (see Reader._open).
_prepared = set()


def prepare(comm=None, *, batch_size=64, ranks_per_node=None, readers_per_node=None,
            window_bytes=None, direct_io=None):
    """Makes the node's communicators and shared window and maps the
    window's memory ahead, as a job does once at start-up (the C ABI's
    ``lmdbio_prepare``): the first reader then neither makes nor faults
    anything, and direct reads land in the window's 2 MiB pages. A
    :class:`Reader` on MPI_COMM_WORLD calls it on its first open in the
    process with its own options; call it yourself to keep that time out of
    the first epoch, or for readers on other communicators. Collective over
    ``comm`` (default MPI_COMM_WORLD)."""
    if comm is None and _mpi.torchrun_world() is not None:
        return  # no node window without MPI
    _mpi.ensure_mpi()
    handle = None if comm is None else _mpi.handle_of(comm)
    _lmdbio.prepare(handle, batch_size=int(batch_size), ranks_per_node=ranks_per_node,
                    readers_per_node=readers_per_node, window_bytes=window_bytes,
                    direct_io=direct_io)
    if handle is None:
        _prepared.add((ranks_per_node, readers_per_node, window_bytes, direct_io))


class Reader:
    """Reads an LMDB database in batches, on every rank of an MPI job.

    ``Reader(path, batch_size)`` opens the database (a directory holding
    ``data.mdb``, or the data file) on every rank of the communicator;
    iterating it yields :class:`lmdbio.Batch` objects, one per step, until
    ``epochs`` epochs are read (``None``: forever). A batch iterates as
    ``(key, value)`` pairs of zero-copy :class:`lmdbio.Buffer` objects into
    the node's shared memory (``bytes(v)``, ``memoryview(v)``,
    ``hashlib.sha256(v)`` and ``numpy.frombuffer(v, ...)`` work), valid
    until the next batch is asked for; ``batch.epoch`` and ``len(batch)``.

    Opening, each step and closing are collective: every rank of the
    communicator makes the same calls. A failure on any rank raises an
    :class:`lmdbio.Error` on every rank. The GIL is released while the
    engine reads and waits, and Ctrl-C raises ``KeyboardInterrupt`` while it
    waits (a batch it was fetching is delivered by the next step).

    Arguments:
      path: the database directory or its data file.
      batch_size: records per batch per rank.
      comm: an mpi4py communicator (any); default MPI_COMM_WORLD, with MPI
        initialised by lmdbio if nobody has (a plain ``python train.py`` is
        a world of one).
      epochs: stop after this many epochs (counted from the job's first,
        also when resuming); ``None``: never stop.
      shuffle: shuffle every epoch (chunked, or with a stage chunked in
        the first epoch and global after it; see docs/python.md); ``seed`` makes it repeatable, ``shuffle_chunk``
        sets records per chunk.
      shuffle_mode: ``"chunked"`` (the default when shuffling without a
        stage), ``"global"`` (every epoch a permutation of all records:
        each record is a read of its own unless served from a stage) or
        ``"global-after-first"`` (the default with a stage: the first
        epoch, which fills it, chunked, later ones global); giving one
        shuffles, so ``shuffle=False`` with it is an error.
      partition: how an epoch is split among ranks: ``"contiguous"``
        (default), ``"round_robin"`` (batches dealt in turn) or
        ``"strided"`` (record i to rank i mod P, as Caffe does).
      tail: ``"short"`` (default): each epoch ends with a short, possibly
        empty, batch on every rank; ``"wrap"``: batches are always full and
        the last one of an epoch runs into the next (Caffe's behaviour).
      ranks_per_node: group this many consecutive ranks into a node instead
        of the machine's ranks (to emulate several nodes on one machine).
      readers_per_node: ranks per node that open the file (default 1).
      subdb: a named database to read instead of the main one.
      state: a dict from :meth:`state_dict` to resume from, exactly.
      repartition: allow ``state`` from a job with another rank count: the
        records of its current epoch not yet handed out are split among
        this job's ranks, then normal epochs follow.
      window_bytes, prefetch, collective, read_streams, direct_io
        (``"auto"``, ``"never"``, ``"always"``), overlap, hints: the
        engine's read options (see docs/python.md).
      stage: a node-local directory (NVMe scratch, ``$SLURM_TMPDIR``,
        ``/dev/shm``) where each node keeps what it read in the first epoch
        and reads it from there in later epochs (one reader per node,
        independent reads); ``None`` (default): every epoch reads ``path``.
      stage_budget: bytes a node's stage may hold (default: unlimited).
      keep_stage: leave the stage in place on close for a later job.
      saved_index: load the index from a saved one of this very database
        state instead of scanning, and save a scanned one (default
        ``True``); index_cache: directory for saved indexes when the
        database's own is not writable.
      interruptible: ``True`` (default): the engine runs on a thread of its
        own and Ctrl-C interrupts a wait for another rank at once;
        ``False``: it runs on the calling thread (the GIL released), which
        spares a hand-over between threads per batch, and Ctrl-C takes
        effect when the step completes.

    Under ``torchrun`` without ``mpiexec`` (``RANK``/``WORLD_SIZE`` set, an
    MPI world of one) each process reads its own share of a ``WORLD_SIZE``
    job; see :mod:`lmdbio` for what that mode gives up.
    """

    def __init__(self, path, batch_size, *, comm=None, epochs=None, shuffle=None,
                 seed=0, shuffle_chunk=None, partition="contiguous", tail="short",
                 ranks_per_node=None, readers_per_node=None, subdb=None, state=None,
                 repartition=False, window_bytes=None, prefetch=None, collective=None,
                 read_streams=None, direct_io=None, overlap=None, hints=None,
                 interruptible=True, shuffle_mode=None, stage=None, stage_budget=None,
                 keep_stage=None, saved_index=None, index_cache=None):
        self._torchrun = _mpi.torchrun_world() if comm is None else None
        if self._torchrun is None:
            _mpi.ensure_mpi()
        handle = None if comm is None else _mpi.handle_of(comm)
        if shuffle_mode is not None and shuffle is not None and not shuffle:
            raise _lmdbio.InvalidArgument("shuffle_mode was given with shuffle=False")
        shuffled = bool(shuffle) or shuffle_mode is not None
        self._options = dict(
            epochs=epochs, shuffle_seed=int(seed) if shuffled else None,
            shuffle_mode=shuffle_mode,
            shuffle_chunk=shuffle_chunk, partition=partition, tail=tail,
            ranks_per_node=ranks_per_node, readers_per_node=readers_per_node,
            subdb=subdb, window_bytes=window_bytes, prefetch=prefetch,
            collective=collective, read_streams=read_streams, direct_io=direct_io,
            overlap=overlap, hints=dict(hints) if hints else None,
            stage=None if stage is None else os.fspath(stage), stage_budget=stage_budget,
            keep_stage=keep_stage, saved_index=saved_index,
            index_cache=None if index_cache is None else os.fspath(index_cache),
        )
        self._path = os.fspath(path)
        self._batch_size = int(batch_size)
        self._handle = handle
        self._interruptible = bool(interruptible)
        self._engine = None
        self._open(state, repartition)

    def _open(self, state, repartition):
        job_cursor = None if state is None else _job_cursor_of(state)
        if self._torchrun is not None:
            rank, ranks = self._torchrun
            # Options of the node (window, readers, stage) have no use here.
            self._engine = _lmdbio._LocalEngine(
                self._path, self._batch_size, rank, ranks, job_cursor=job_cursor,
                repartition=bool(repartition), **self._options)
            return
        o = self._options
        key = (o["ranks_per_node"], o["readers_per_node"], o["window_bytes"], o["direct_io"])
        if self._handle is None and key not in _prepared:
            # Every rank of the world opens its first reader with these
            # options at the same call. (Not on other communicators: their
            # handles are reused once freed, and ranks outside one would
            # not agree on which were prepared.)
            _lmdbio.prepare(None, batch_size=self._batch_size, ranks_per_node=key[0],
                            readers_per_node=key[1], window_bytes=key[2], direct_io=key[3])
            _prepared.add(key)
        self._engine = _lmdbio._Engine(
            self._path, self._batch_size, self._handle, job_cursor=job_cursor,
            repartition=bool(repartition), interruptible=self._interruptible,
            **self._options)
        _mpi.register(self)

    # Iteration -----------------------------------------------------------

    def __iter__(self):
        return self

    def __next__(self):
        batch = self._live().next()
        if batch is None:
            raise StopIteration
        return batch

    def next_batch(self):
        """The next batch, or ``None`` once ``epochs`` epochs are read."""
        return self._live().next()

    # Position ------------------------------------------------------------

    def state_dict(self):
        """The job's position as a plain dict (picklable, JSON-able).

        Collective: every rank calls it at the same step; every rank gets
        the same dict (all ranks' cursors), so any rank may save it.
        ``Reader(..., state=d)`` or :meth:`load_state_dict` resumes from it
        exactly; with ``repartition=True`` also on another rank count.
        """
        engine = self._live()
        if self._torchrun is None:
            job_cursor = engine.job_cursor()
        else:
            job_cursor = engine.job_cursor_from(_gather_without_mpi(engine.cursor()))
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "job_cursor": job_cursor.hex(),
            "ranks": engine.ranks,
            "step": engine.step,
            "records": engine.records,
        }

    def load_state_dict(self, state, repartition=False):
        """Continues from ``state`` (see :meth:`state_dict`): closes and
        reopens the engine there. Collective."""
        self.close()
        self._open(state, repartition)

    # Information -----------------------------------------------------------

    @property
    def rank(self):
        """This rank in the reader's communicator."""
        return self._live().rank

    @property
    def ranks(self):
        """Ranks in the reader's communicator."""
        return self._live().ranks

    @property
    def node_rank(self):
        return self._live().node_rank

    @property
    def node_size(self):
        return self._live().node_size

    @property
    def records(self):
        """Records in the database."""
        return self._live().records

    @property
    def step(self):
        """The next step (batches delivered so far, counted from the job's start)."""
        return self._live().step

    @property
    def step_limit(self):
        """The step at which iteration ends (``None``: never)."""
        return self._live().step_limit

    def steps_for_epochs(self, epochs):
        """The step at which the job's first ``epochs`` epochs are done on every rank."""
        return self._live().steps_for_epochs(int(epochs))

    def counters(self, node=False):
        """This rank's I/O counters (dict); ``node=True``: the node's sums (collective).

        ``binding_seconds`` (this rank's only): time spent in
        :meth:`next_batch` beyond the engine's own, i.e. what the Python
        binding costs."""
        return self._live().counters(node)

    # Life ----------------------------------------------------------------

    def close(self):
        """Closes the reader (collective). Batches become invalid."""
        if self._engine is not None and not self._engine.closed:
            self._engine.close()

    @property
    def closed(self):
        return self._engine is None or self._engine.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _live(self):
        if self.closed:
            raise _lmdbio.InvalidArgument("the reader is closed")
        return self._engine

    def __repr__(self):
        if self.closed:
            return f"<lmdbio.Reader {self._path!r} closed>"
        e = self._engine
        return (f"<lmdbio.Reader {self._path!r} batch_size={self._batch_size} "
                f"rank={e.rank}/{e.ranks} step={e.step}>")


def _gather_without_mpi(mine):
    """Every rank's cursor under torchrun, through torch.distributed."""
    ranks = int(os.environ["WORLD_SIZE"])
    if ranks == 1:
        return [mine]
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise _lmdbio.InvalidArgument(
            "under torchrun without MPI, state_dict() gathers every rank's "
            "position through torch.distributed: call "
            "torch.distributed.init_process_group() first")
    cursors = [None] * dist.get_world_size()
    dist.all_gather_object(cursors, bytes(mine))
    return cursors


def _job_cursor_of(state):
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise _lmdbio.InvalidArgument(
            "state is not an lmdbio Reader.state_dict() (no 'format': "
            f"{STATE_FORMAT!r})")
    if state.get("version") != STATE_VERSION:
        raise _lmdbio.InvalidArgument(
            f"state version {state.get('version')!r} is not {STATE_VERSION}")
    try:
        return bytes.fromhex(state["job_cursor"])
    except (KeyError, TypeError, ValueError):
        raise _lmdbio.InvalidArgument("state has no valid 'job_cursor'") from None
