"""The executor's own worker threads.

NumPy's kernels run on one core, except BLAS; and OpenBLAS's worker threads busy-wait for a
while after every call, so the core a matmul used is not free for the elementwise work that
follows it. While a plan runs (a *session*) the executor therefore takes the cores over:
BLAS is set to one thread, and large matmuls and elementwise steps are split into one part
per worker (NumPy releases the GIL inside its kernels). Outside a session nothing changes.

``REMAT_NUM_THREADS`` (or :func:`set_num_threads`) sets the number of workers; with one, or
when NumPy's BLAS is not an OpenBLAS whose thread count can be set, everything runs serially.
"""

import contextlib
import ctypes
import glob
import importlib.util
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from remat.runtime import allocator, denormals

# Below these sizes a step runs whole on the calling thread: handing a part to a worker and
# waiting for it costs 20 us on an idle core and 75-90 us on a busy or virtual one (measured
# on two cores), and elementwise work is bound by memory: an add or tanh of 2^19 floats (and
# a fused run of that size) took longer on two workers than on one; from 2^20 two win.
MIN_SPLIT_ELEMENTS = 1 << 20  # elements of an elementwise step's (or fused run's) output
MIN_SPLIT_FLOPS = 1 << 23  # m*n*k of a matmul
CHUNK_ELEMENTS = 1 << 15  # pieces of a non-ufunc elementwise impl: its temporaries stay in cache


def _openblas_paths():
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip()
                if "openblas" in os.path.basename(path).lower() and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    # NumPy's OpenBLAS, and SciPy's (which SciPy's LAPACK kernels and numba's np.dot call)
    for package in ("numpy", "scipy"):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            continue
        here = os.path.dirname(spec.origin)
        for pattern in (f"../{package}.libs/*openblas*", ".dylibs/*openblas*"):
            paths += sorted(glob.glob(os.path.join(here, pattern)))
    return list(dict.fromkeys(os.path.realpath(p) for p in paths))


def _thread_setters(path):
    """(get, set) for the thread count of the OpenBLAS at ``path``, or None."""
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    for prefix in ("scipy_openblas", "openblas"):
        for suffix in ("64_", "_64", ""):
            get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
            set_ = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
            if get is not None and set_ is not None:
                get.restype, set_.restype, set_.argtypes = ctypes.c_int, None, [ctypes.c_int]
                return get, set_
    return None


class _BlasThreads:
    """The thread counts of every OpenBLAS in the process, got and set together (NumPy's
    first: its count is the one reported)."""

    def __init__(self, setters):
        self.setters = setters

    def get(self):
        return [get() for get, _ in self.setters]

    def set(self, counts):
        counts = counts if isinstance(counts, list) else [counts] * len(self.setters)
        for (_, set_), n in zip(self.setters, counts):
            set_(n)


def find_blas_threads():
    """The thread counts of the OpenBLAS libraries NumPy and SciPy use, or None."""
    setters = [s for s in map(_thread_setters, _openblas_paths()) if s is not None]
    return _BlasThreads(setters) if setters else None


def _default_threads():
    env = os.environ.get("REMAT_NUM_THREADS")
    if env:
        return max(1, int(env))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.requested = _default_threads()
        self.blas = ...  # found lazily: _BlasThreads, or None
        self.pool = None
        self.depth = 0  # nesting of open sessions (plans run plans: scan bodies, callbacks)
        self.threads = 0  # how many threads have a session open
        self.saved_blas_threads = None
        self.blas_count = None  # BLAS's thread count while a session is open
        self.workers = 1  # while a session is open: how many parts work is split into


_state = _State()


def _after_fork():
    """A forked child has none of the parent's threads: it starts afresh (and serially
    until its first session, whatever the parent was doing)."""
    global _state
    _state = _State()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def workers():
    """How many parts a step is split into now (1 outside a session)."""
    return _state.workers


def num_threads():
    """How many workers the executor splits large steps across."""
    return _state.requested


def set_num_threads(n):
    """Set the executor's worker count (1: run every step serially, as NumPy would)."""
    n = int(n)
    if n < 1:
        raise ValueError(f"set_num_threads needs a positive count, got {n}")
    with _state.lock:
        if _state.depth:
            raise RuntimeError("set_num_threads cannot be called while a plan is running")
        _state.requested = n
        if _state.pool is not None:
            _state.pool.shutdown()
            _state.pool = None


def _enter(outermost):
    s = _state
    with s.lock:
        s.depth += 1
        s.threads += outermost
        if s.depth > 1:
            return
        if s.blas is ...:
            s.blas = find_blas_threads()
            allocator.tune()
        s.workers = s.requested if s.blas is not None else 1
        if s.workers > 1:
            s.saved_blas_threads = s.blas.get()
            s.blas.set(1)
            s.blas_count = 1
            if s.pool is None:
                s.pool = ThreadPoolExecutor(s.workers - 1, thread_name_prefix="remat-exec",
                                            initializer=denormals.flush)


def _exit(outermost):
    s = _state
    with s.lock:
        if s.depth == 0:  # a session opened before a fork, closing in the child
            return
        s.depth -= 1
        s.threads -= outermost
        if s.depth == 0 and s.workers > 1:
            s.blas.set(s.saved_blas_threads)
            s.workers = 1


_thread = threading.local()  # per thread: how deep in sessions, the modes it had before


@contextlib.contextmanager
def session():
    """Open while a plan runs: BLAS single-threaded, large steps split across the workers,
    and subnormals flushed to zero on this thread (``denormals``)."""
    depth = getattr(_thread, "depth", 0)
    if depth == 0:
        _thread.saved_fenv = denormals.flush()
    _thread.depth = depth + 1
    _enter(depth == 0)
    try:
        yield
    finally:
        _exit(depth == 0)
        _thread.depth = depth
        if depth == 0:
            denormals.restore(_thread.saved_fenv)


@contextlib.contextmanager
def _blas_count(counts):
    """BLAS runs with ``counts`` threads inside (then with the count it had before)."""
    s = _state
    before = s.blas_count
    s.blas.set(counts)
    s.blas_count = counts
    try:
        yield
    finally:
        s.blas.set(before)
        s.blas_count = before


def blas_threads():
    """For kernels the executor does not split (LAPACK decompositions): BLAS gets its own
    threads back for the duration."""
    s = _state
    if s.depth == 0 or s.workers == 1:
        return contextlib.nullcontext()
    return _blas_count(s.saved_blas_threads)


def lent_blas():
    """For a matrix product run whole, not cut into one block per worker: BLAS gets the
    workers' threads for the duration, while no other thread runs a plan (the count is
    process-wide)."""
    s = _state
    if s.depth == 0 or s.workers == 1 or s.threads != 1:
        return contextlib.nullcontext()
    return _blas_count(s.workers)


def run_parts(fn, parts):
    """fn(*part) for every part: all but the last on the pool, the last on this thread;
    an error is raised once every part has stopped (none still writes into a buffer)."""
    pool = _state.pool
    if pool is None or len(parts) == 1:
        for p in parts:
            fn(*p)
        return
    futures = [pool.submit(_quietly, fn, p) for p in parts[:-1]]
    try:
        fn(*parts[-1])
    finally:
        errors = [f.exception() for f in futures]
    for e in errors:
        if e is not None:
            raise e


def _quietly(fn, part):
    """A part on a worker thread: floating-point errors ignored there as on the thread that
    runs the plan (a worker does not inherit that thread's NumPy error state)."""
    with np.errstate(all="ignore"):
        fn(*part)


def bounds(n, parts):
    """``parts`` near-equal (start, stop) ranges covering range(n)."""
    return [(i * n // parts, (i + 1) * n // parts) for i in range(parts)]


def _worth_splitting(ins, shape):
    """Large enough to split, with every array input of the output's shape."""
    return (_state.workers > 1 and math.prod(shape) >= MIN_SPLIT_ELEMENTS
            and all(np.shape(x) == shape for x in ins if np.ndim(x)))


def _parts(ins, out):
    """[(inputs, output)] per worker, cutting ``out`` and its equal-shaped inputs along one
    axis: axis 0, or the flattened buffers when axis 0 is too short and all are C-ordered;
    the whole as one part when neither is possible."""
    workers = _state.workers
    if out.shape[0] < workers:  # e.g. (1, n)
        if not all(x.flags.c_contiguous for x in ins if np.ndim(x)) or \
                not out.flags.c_contiguous:
            return [(ins, out)]
        ins = [x.reshape(-1) if np.ndim(x) else x for x in ins]
        out = out.reshape(-1)
    return [([x[lo:hi] if np.ndim(x) else x for x in ins], out[lo:hi])
            for lo, hi in bounds(out.shape[0], workers)]


def ufunc_into(ufunc, ins, out):
    """``ufunc(*ins, out=out)``, split across the workers when large. ``out`` may be one of
    the inputs (an in-place update): each part reads and writes only its own rows."""
    if _worth_splitting(ins, out.shape):
        run_parts(lambda xs, o: ufunc(*xs, out=o), _parts(ins, out))
    else:
        ufunc(*ins, out=out)
    return out


def elementwise(impl, ufunc, ins, params, shape, dtype):
    """A new array of ``impl(*ins, **params)`` for an elementwise primitive, split across
    the workers (``ufunc``, when the impl is one, writes each part in place; any other impl
    runs on cache-sized pieces); None when too small to be worth it."""
    if not _worth_splitting(ins, shape):
        return None
    out = np.empty(shape, dtype)
    if ufunc is not None:
        def fill(xs, o):
            ufunc(*xs, out=o, casting="unsafe")
    else:
        def fill(xs, o):
            step = max(1, CHUNK_ELEMENTS // max(1, o[0].size))
            for lo in range(0, o.shape[0], step):
                o[lo:lo + step] = impl(*[x[lo:lo + step] if np.ndim(x) else x for x in xs],
                                       **params)

    run_parts(fill, _parts(ins, out))
    return out


def matmul(a, b, out=None):
    """``np.matmul(a, b, out=out)`` for operands of equal rank (and equal batch shape);
    inside a session a large one runs on as many threads as there are workers: a matrix
    product on BLAS's, a batch of them cut into one block of the batch (or rows, or columns)
    per worker."""
    workers = _state.workers
    if workers == 1 or a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2] or a.dtype == object:
        return np.matmul(a, b, out=out)
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = a.shape[:-2]
    if math.prod(batch) * m * n * k < MIN_SPLIT_FLOPS:
        return np.matmul(a, b, out=out)
    if not batch and _state.threads == 1:
        # a matrix product: BLAS's own threads beat one block per worker (1.3-2x measured
        # from 128x784 @ 784x512 up)
        with lent_blas():
            return np.matmul(a, b, out=out)
    if out is None:
        out = np.empty(batch + (m, n), np.result_type(a.dtype, b.dtype))
    if batch and batch[0] >= workers:
        cuts = [(a[lo:hi], b[lo:hi], out[lo:hi]) for lo, hi in bounds(batch[0], workers)]
    elif m >= workers * 8:
        cuts = [(a[..., lo:hi, :], b, out[..., lo:hi, :]) for lo, hi in bounds(m, workers)]
    elif n >= workers * 8:
        cuts = [(a, b[..., lo:hi], out[..., lo:hi]) for lo, hi in bounds(n, workers)]
    else:
        return np.matmul(a, b, out=out)
    run_parts(lambda x, y, o: np.matmul(x, y, out=o), cuts)
    return out
