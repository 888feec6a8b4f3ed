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
_NEVER = 1 << 30  # a full-collection threshold no run of work reaches


def _shared(name, doc, change, restore):
    """A reentrant context manager ``name``, shared across threads: ``change()`` as the first
    block opens (its return value kept), ``restore(kept)`` as the last one closes."""
    state = [0, None]  # blocks open, what ``change`` returned

    def block():
        with _lock:
            if state[0] == 0:
                state[1] = change()
            state[0] += 1
        try:
            yield
        finally:
            with _lock:
                state[0] -= 1
                if state[0] == 0:
                    restore(state[1])
    block.__name__ = block.__qualname__ = name
    block.__doc__ = doc
    return contextlib.contextmanager(block)


def _disable():
    enabled = gc.isenabled()
    gc.disable()
    return enabled


def _defer_full_collections():
    thresholds = gc.get_threshold()
    gc.set_threshold(*thresholds[:2], _NEVER)
    return thresholds


paused = _shared("paused", "No automatic collection inside.", _disable,
                 lambda enabled: gc.enable() if enabled else None)
young_only = _shared("young_only", "No full collection inside (the youngest two generations "
                     "are collected).", _defer_full_collections,
                     lambda thresholds: gc.set_threshold(*thresholds))
