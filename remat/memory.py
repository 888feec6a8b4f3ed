"""Live-bytes accounting of every buffer remat holds.

Arrays (and, under ``jit``, the executor's buffers) register the NumPy buffer they hold and
release it when they die. A buffer is counted once however many views of it are held: the
count is keyed by the ndarray that owns the memory, and lasts while any holder of any of its
views lives. ``live_bytes()`` and the high-water mark ``peak_bytes()`` are therefore exact
for everything remat allocates.
"""

import numpy as np

_owners = {}  # id(owning ndarray) -> [number of holders, nbytes, is_host]
_live = 0
_peak = 0
_host = 0  # bytes of offloaded buffers (memory-mapped files), outside the working set


def _owner(buf):
    base = buf
    while isinstance(base.base, np.ndarray):
        base = base.base
    return base


def track(buf):
    """Count ``buf`` (an ndarray) as held by one more holder. Memory-mapped buffers (offloaded
    residuals) count as host bytes, not live working memory."""
    global _live, _peak, _host
    owner = _owner(buf)
    entry = _owners.get(id(owner))
    if entry is None:
        nbytes = owner.nbytes
        is_host = isinstance(owner, np.memmap)
        _owners[id(owner)] = [1, nbytes, is_host]
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
    key = id(_owner(buf))
    entry = _owners[key]
    entry[0] -= 1
    if entry[0] == 0:
        del _owners[key]
        if entry[2]:
            _host -= entry[1]
        else:
            _live -= entry[1]


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
    _peak = _live
    return _peak


def peak_memory(f, *args, **kwargs):
    """Run ``f(*args, **kwargs)`` once; the peak live bytes above the starting point.

    The result is also kept alive until the measurement ends, so its bytes count.
    """
    start = reset_peak()
    out = f(*args, **kwargs)
    peak = _peak - start
    del out
    return peak
