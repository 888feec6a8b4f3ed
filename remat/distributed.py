"""Multi-process runs over MPI, with JAX's ``jax.distributed`` API: ``initialize``,
``shutdown``, ``is_initialized``, and this process's place (``process_index``,
``process_count``).

Each process runs the same program (launched as ``mpiexec -n 2 python prog.py``); the
process collectives of ``remat.lax.process_collectives`` lower to MPI calls on the arrays'
NumPy buffers (``mpi4py``). MPI is the engine: ``initialize()`` with no arguments takes the
rank and the number of processes from ``MPI.COMM_WORLD``, so the same command scales past
one machine under a cluster's MPI launcher (``srun``, ``mpiexec -hosts``).

Before every buffer collective the processes exchange a small header (operation, shape,
dtype) and compare it, so a program whose ranks disagree fails on every rank with a
``ValueError`` naming what each rank had, instead of hanging or corrupting memory.
"""

import operator
import time

import numpy as np

__all__ = ["initialize", "is_initialized", "process_count", "process_index", "shutdown"]

INSTALL_HINT = 'pip install "remat[distributed]"'

# The dtypes MPI reduces natively (mpi4py maps them from NumPy's type codes); others
# (float16, bfloat16, the float8 types) are reduced in float32 and rounded back, as XLA on
# CPU computes them.
_MPI_REDUCIBLE = {np.dtype(t) for t in ("int8", "int16", "int32", "int64", "uint8", "uint16",
                                        "uint32", "uint64", "float32", "float64",
                                        "complex64", "complex128")}


class _State:
    """The process group of this process, while initialized."""

    def __init__(self):
        self.mpi = None  # the mpi4py.MPI module
        self.comm = None  # a private duplicate of COMM_WORLD
        self.process_id = 0
        self.num_processes = 1
        self.local_device_ids = None
        self.coordinator_address = None
        # collective accounting, read by benchmarks: calls, seconds inside MPI, bytes sent
        self.calls = 0
        self.seconds = 0.0
        self.bytes = 0


_state = _State()


def _import_mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(
            f"remat.distributed needs mpi4py and an MPI library: {INSTALL_HINT} (or "
            f"pip install mpi4py mpich), then launch with mpiexec -n N python ...") from e
    return MPI


def _check_process_arg(name, value, positive):
    if value is None:
        return None
    try:
        index = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        index = None
    if index is None or index < (1 if positive else 0):
        kind = "positive" if positive else "nonnegative"
        raise TypeError(f"{name} must be a {kind} int. Got {name}={value!r} of type "
                        f"{type(value)}.") from None
    return index


def initialize(coordinator_address=None, num_processes=None, process_id=None,
               local_device_ids=None, cluster_detection_method=None,
               initialization_timeout=300, heartbeat_timeout_seconds=100,
               shutdown_timeout_seconds=300, coordinator_bind_address=None,
               slice_index=None, partition_index=None):
    """Join this process to the MPI job it was launched in (``mpiexec -n N``).

    With no arguments everything comes from MPI (``COMM_WORLD``'s rank and size). Given
    arguments are checked against MPI, since MPI's launcher, not a coordinator, connects the
    processes: a ``num_processes`` or ``process_id`` that contradicts it raises
    ``ValueError``. ``coordinator_address`` is recorded but unused (MPI needs none);
    ``cluster_detection_method`` may be ``None`` or ``'mpi4py'``. Calling it twice raises
    ``RuntimeError`` as JAX's does; ``shutdown()`` allows a new ``initialize()``.
    """
    del initialization_timeout, heartbeat_timeout_seconds, shutdown_timeout_seconds
    del coordinator_bind_address, slice_index, partition_index
    if _state.comm is not None:
        raise RuntimeError("distributed.initialize should only be called once.")
    process_id = _check_process_arg("process_id", process_id, positive=False)
    num_processes = _check_process_arg("num_processes", num_processes, positive=True)
    if process_id is not None and num_processes is not None and process_id >= num_processes:
        raise ValueError("process_id and num_processes must be nonnegative, with process_id < "
                         f"num_processes. Got process_id={process_id}, "
                         f"num_processes={num_processes}.")
    if cluster_detection_method not in (None, "mpi4py"):
        raise ValueError(f"cluster_detection_method must be None or 'mpi4py' (remat's processes "
                         f"are MPI's ranks), got {cluster_detection_method!r}")
    if coordinator_address is not None and not isinstance(coordinator_address, str):
        raise TypeError(f"coordinator_address must be a str 'host:port', got "
                        f"{coordinator_address!r}")
    if local_device_ids is not None:
        ids = [local_device_ids] if isinstance(local_device_ids, int) else list(local_device_ids)
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise TypeError(f"local_device_ids must be a nonnegative int or a sequence of them, "
                            f"got {local_device_ids!r}")
        local_device_ids = tuple(ids)
    mpi = _import_mpi()
    world = mpi.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    if num_processes is not None and num_processes != size:
        raise ValueError(f"num_processes={num_processes} contradicts MPI, which runs {size} "
                         f"process(es) (launch with mpiexec -n {num_processes})")
    if process_id is not None and process_id != rank:
        raise ValueError(f"process_id={process_id} contradicts MPI, which gave this process "
                         f"rank {rank}")
    _state.mpi = mpi
    _state.comm = world.Dup()  # a private communicator: user MPI traffic never interleaves
    _state.process_id, _state.num_processes = rank, size
    _state.local_device_ids = local_device_ids
    _state.coordinator_address = coordinator_address


def shutdown():
    """Leave the process group (a no-op when not initialized). MPI itself stays up, so
    ``initialize()`` may be called again."""
    comm = _state.comm
    if comm is None:
        return
    comm.Barrier()
    comm.Free()
    _state.comm = None
    _state.process_id, _state.num_processes = 0, 1
    _state.local_device_ids = _state.coordinator_address = None


def is_initialized():
    """Whether ``initialize()`` has been called (and not ``shutdown()``)."""
    return _state.comm is not None


def process_index():
    """This process's rank (0 when not initialized)."""
    return _state.process_id


def process_count():
    """The number of processes in the job (1 when not initialized)."""
    return _state.num_processes


def local_device_ids():
    """The ``local_device_ids`` given to ``initialize()`` (``None`` when not given)."""
    return _state.local_device_ids


# --- the engine: collectives on NumPy buffers ------------------------------------------------


def collective_stats():
    """``{'calls', 'seconds', 'bytes'}``: process collectives run since the last
    :func:`reset_collective_stats`, the wall time spent in them (headers and MPI calls,
    including waiting for slower ranks) and the bytes each rank contributed."""
    return {"calls": _state.calls, "seconds": _state.seconds, "bytes": _state.bytes}


def reset_collective_stats():
    _state.calls, _state.seconds, _state.bytes = 0, 0.0, 0


def _agree(what, buf, extra=""):
    """Exchange ``(what, shape, dtype, extra)`` with every rank; raise the same ValueError on
    all of them when they differ (MPI would hang or read past a buffer)."""
    header = (what, tuple(buf.shape), buf.dtype.str, extra)
    headers = _state.comm.allgather(header)
    if any(h != header for h in headers):
        def describe(h):
            shape = ",".join(map(str, h[1]))
            return f"{np.dtype(h[2]).name}[{shape}] in {h[0]}" + (f"({h[3]})" if h[3] else "")
        ranks = "; ".join(f"rank {r} has {describe(h)}" for r, h in enumerate(headers))
        raise ValueError(f"{what}: the processes' operands differ ({ranks}); every process "
                         f"must run the same collectives on arrays of the same shape and dtype")


def _run(what, buf, collective, extra=""):
    """``collective(buf)`` across the processes, timed and counted; a fresh buffer."""
    start = time.perf_counter()
    buf = np.asarray(buf, order="C")  # (np.ascontiguousarray would make a scalar 1-d)
    _agree(what, buf, extra)
    out = collective(buf)
    _state.calls += 1
    _state.bytes += buf.nbytes
    _state.seconds += time.perf_counter() - start
    return out


def _raw(buf):
    """A byte view for pure data movement (any dtype, bfloat16 and bool included)."""
    return buf.reshape(-1).view(np.uint8)


def allreduce(buf, op):
    """Elementwise ``op`` ('sum', 'max', 'min') of ``buf`` over the processes."""
    if _state.comm is None:
        return np.array(buf)
    mpi = _state.mpi
    mpi_op = {"sum": mpi.SUM, "max": mpi.MAX, "min": mpi.MIN}[op]

    def reduce(b):
        dtype = b.dtype
        if dtype == np.bool_:
            work = b.view(np.uint8)
        elif dtype in _MPI_REDUCIBLE:
            work = b
        else:
            work = b.astype(np.float32)
        out = np.empty_like(work)
        _state.comm.Allreduce(work, out, op=mpi_op)
        return out.view(np.bool_) if dtype == np.bool_ else out.astype(dtype, copy=False)

    return _run("process_allreduce", buf, reduce, op)


def allgather(buf):
    """``(process_count, *buf.shape)``: every process's ``buf``, in rank order."""
    if _state.comm is None:
        return np.array(buf)[None]

    def gather(b):
        out = np.empty((_state.num_processes,) + b.shape, b.dtype)
        _state.comm.Allgather(_raw(b), _raw(out))
        return out

    return _run("process_allgather", buf, gather)


def reduce_scatter(buf):
    """``buf`` of shape ``(process_count, *s)``: on rank ``i``, the sum over the processes of
    their chunk ``i`` (MPI ``Reduce_scatter_block``)."""
    if _state.comm is None:
        return np.array(buf[0])
    mpi = _state.mpi

    def scatter(b):
        dtype = b.dtype
        work = b if dtype in _MPI_REDUCIBLE else b.astype(np.float32)
        out = np.empty(work.shape[1:], work.dtype)
        _state.comm.Reduce_scatter_block(work, out, op=mpi.SUM)
        return out.astype(dtype, copy=False)

    return _run("process_reduce_scatter", buf, scatter)


def alltoall(buf):
    """``buf`` of shape ``(process_count, *s)``: chunk ``i`` goes to rank ``i``; chunk ``j``
    of the result came from rank ``j``."""
    if _state.comm is None:
        return np.array(buf)

    def exchange(b):
        out = np.empty_like(b)
        _state.comm.Alltoall(_raw(b), _raw(out))
        return out

    return _run("process_alltoall", buf, exchange)
