"""Python's cyclic garbage collector, held back around work that allocates many objects at once.

Tracing a function and building its plan allocate thousands of small objects (equations,
variables, avals); the collector's generations fill, and once in a while it runs a full
collection over every object the process holds (all its imported modules'): a fifth of a
48-block model's first jitted call. ``young_only`` defers the full collections while the work
runs (the young generations are still collected, so the garbage cycles it makes stay bounded);
``paused`` stops automatic collection altogether (a memory measurement, which garbage from
before, collected during it, would skew).

Both are reentrant and shared across threads: the setting comes back when the last one open
ends, as it was when the first began.
"""

import contextlib
import gc
import threading

_lock = threading.Lock()
_paused = [0, False]  # ``paused`` blocks open, whether the collector was on at the first
_young = [0, None]  # ``young_only`` blocks open, the thresholds at the first
_NEVER = 1 << 30  # a full-collection threshold no run of work reaches


@contextlib.contextmanager
def paused():
    """No automatic collection inside."""
    with _lock:
        if _paused[0] == 0:
            _paused[1] = gc.isenabled()
            gc.disable()
        _paused[0] += 1
    try:
        yield
    finally:
        with _lock:
            _paused[0] -= 1
            if _paused[0] == 0 and _paused[1]:
                gc.enable()


@contextlib.contextmanager
def young_only():
    """No full collection inside (the youngest two generations are collected as usual)."""
    with _lock:
        if _young[0] == 0:
            _young[1] = gc.get_threshold()
            gc.set_threshold(*_young[1][:2], _NEVER)
        _young[0] += 1
    try:
        yield
    finally:
        with _lock:
            _young[0] -= 1
            if _young[0] == 0:
                gc.set_threshold(*_young[1])
