"""Python's cyclic garbage collector, paused around work that allocates many objects at once.

Tracing a function and building its plan allocate thousands of small objects (equations,
variables, avals); the collector's generations fill and it runs, once in a while a full
collection over every object the process holds (all its imported modules'): a fifth of a
48-block model's first jitted call. The pause is bounded by the work it covers, and garbage
cycles made inside are collected at the next collection after it.
"""

import contextlib
import gc
import threading

_lock = threading.Lock()
_depth = [0, False]  # pauses open (in any thread), whether the collector was on at the first


@contextlib.contextmanager
def paused():
    """No automatic collection inside (reentrant, and across threads: the collector comes back
    on when the last pause ends, if it was on when the first began)."""
    with _lock:
        if _depth[0] == 0:
            _depth[1] = gc.isenabled()
            gc.disable()
        _depth[0] += 1
    try:
        yield
    finally:
        with _lock:
            _depth[0] -= 1
            if _depth[0] == 0 and _depth[1]:
                gc.enable()
