"""Live-bytes accounting of every buffer remat holds.

Arrays (and, under ``jit``, the executor's buffers) register the NumPy buffer they hold and
release it when they die. A buffer is counted once however many views of it are held: the
count is keyed by the ndarray that owns the memory, and lasts while any holder of any of its
views lives. ``live_bytes()`` and the high-water mark ``peak_bytes()`` are therefore exact
for everything remat allocates.
"""

import contextlib
import math
import os
import tempfile
import threading

import numpy as np

from remat import source_info
from remat.errors import OutOfMemoryError
from remat.runtime import collection

_owners = {}  # id(owning ndarray) -> [number of holders, nbytes, is_host, the ndarray]
_live = 0
_peak = 0
_host = 0  # bytes of offloaded buffers (memory-mapped files), outside the working set
# Calls run concurrently from the user's threads and share input buffers: every update of the
# counts holds this lock (an update lost to a race would leave a holder count wrong for good,
# and a later buffer given the same id would then go uncounted).
_lock = threading.Lock()


def owner(buf):
    """The ndarray owning the memory ``buf`` views (``buf`` itself when it owns it)."""
    base = buf
    while isinstance(base.base, np.ndarray):
        base = base.base
    return base


def track(buf):
    """Count ``buf`` (an ndarray) as held by one more holder. Memory-mapped buffers (offloaded
    residuals) count as host bytes, not live working memory."""
    global _live, _peak, _host
    base = buf if buf.base is None else owner(buf)
    with _lock:
        entry = _owners.get(id(base))
        if entry is None:
            nbytes = base.nbytes
            is_host = isinstance(base, np.memmap)
            # (holding the owner keeps its id from being reused while the entry stands)
            _owners[id(base)] = [1, nbytes, is_host, base]
            if is_host:
                _host += nbytes
            else:
                _live += nbytes
                if _live > _peak:
                    _peak = _live
        else:
            entry[0] += 1


def untrack(buf):
    """One holder of ``buf`` let go of it; the bytes are freed when the last one does."""
    global _live, _host
    key = id(buf if buf.base is None else owner(buf))
    with _lock:
        entry = _owners[key]
        entry[0] -= 1
        if entry[0] == 0:
            del _owners[key]
            if entry[2]:
                _host -= entry[1]
            else:
                _live -= entry[1]


def holders(buf):
    """How many holders the memory of ``buf`` has (0 when untracked)."""
    entry = _owners.get(id(buf if buf.base is None else owner(buf)))
    return 0 if entry is None else entry[0]


@contextlib.contextmanager
def held(nbytes):
    """``nbytes`` counted live inside: work whose buffers remat does not hold one by one (a
    native loop's iteration), accounted once at its modelled peak."""
    global _live, _peak
    with _lock:
        _live += nbytes
        _peak = max(_peak, _live)
    try:
        yield
    finally:
        with _lock:
            _live -= nbytes


def live_bytes():
    """Bytes of all buffers currently held by remat arrays and executor buffers."""
    return _live


def host_bytes():
    """Bytes of residuals offloaded out of working memory (to memory-mapped files)."""
    return _host


def peak_bytes():
    """The highest ``live_bytes()`` since the last ``reset_peak()``."""
    return _peak


def reset_peak():
    """Restart the high-water mark from the current live bytes; returns that value."""
    global _peak
    with _lock:
        _peak = _live
        return _peak


def peak_memory(f, *args, **kwargs):
    """Run ``f(*args, **kwargs)`` once; the peak live bytes above the starting point.

    The result is also kept alive until the measurement ends, so its bytes count.
    """
    with collection.paused():  # (garbage from before, collected during it, would hide
        # as many of the call's own bytes; a full collection first costs 0.4 s on a large heap)
        start = reset_peak()
        out = f(*args, **kwargs)
        peak = _peak - start
        del out
    return peak


# --- allocation limit ------------------------------------------------------------------------


def _machine_bytes():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): no limit known
        return None


machine_bytes = _machine_bytes()


def check_fits(shape, dtype):
    """Broadcasts are lazy NumPy views, so one far larger than memory would only fail (or
    thrash) wherever it is first materialized. Fail where it is created instead, as JAX's
    allocation does: OutOfMemoryError when ``shape``/``dtype`` exceeds the machine's RAM."""
    if machine_bytes is None:
        return
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if nbytes > machine_bytes:
        raise OutOfMemoryError(
            f"RESOURCE_EXHAUSTED: Out of memory allocating {nbytes} bytes for an array of "
            f"shape {tuple(shape)} and dtype {np.dtype(dtype).name} (this machine has "
            f"{machine_bytes} bytes of memory).")


# --- timelines -------------------------------------------------------------------------------

_recorder = None  # a list of (event, live bytes) while memory_timeline records


def record_step(primitive, info=None):
    """Called after each primitive executes while a timeline is being recorded."""
    if info is None:
        info = source_info.current()
    _recorder.append((f"{primitive.name} at {source_info.summarize(info)}", _live))


def memory_timeline(f, *args, **kwargs):
    """Run ``f`` once and return ``[(event, live bytes)]``: a sample after every primitive
    executed (eagerly or by the jit executor), labelled with the primitive and the user's
    source line, in bytes above the starting point."""
    global _recorder
    if _recorder is not None:
        raise RuntimeError("memory_timeline calls cannot be nested")
    start = _live
    _recorder = [("start", start)]
    try:
        with collection.paused():
            out = f(*args, **kwargs)
            _recorder.append(("end (outputs alive)", _live))
            del out
    finally:
        samples, _recorder = _recorder, None
    return [(event, live - start) for event, live in samples]


# --- host memory -----------------------------------------------------------------------------


def host_empty(shape, dtype):
    """An uninitialized array in host memory (a memory-mapped, already unlinked file)."""
    if int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize == 0:
        return np.empty(shape, dtype)
    with tempfile.TemporaryFile() as f:  # unlinked at once; the mapping keeps the data
        return np.memmap(f, dtype=dtype, mode="w+", shape=tuple(shape))
