"""The C library's allocator tuned for how the executor allocates: arrays of the same large
sizes freed and allocated again at every call (a scan's stacked residuals, a convolution's
patches: megabytes to hundreds of megabytes each).

glibc hands out a block above its mmap threshold as fresh pages, and gives freed memory at the
top of its heap back to the kernel once more than its trim threshold is free there (both
adjust themselves, to at most 32 MiB and 64 MiB). So every block of a call was faulted in
afresh at the next: a GRU's nine 16 MiB residual stacks, 5,500 page faults a call (20 ms of
its 270), and a small CNN's convolution temporaries (75 MiB of patches among them), 57,600
faults a call (its step took 450 ms, and 245 ms with the thresholds below). On its first run
remat sets the thresholds once for the process: blocks up to 256 MiB come from the heap, and
up to 256 MiB of freed memory stays there for reuse (remat's memory accounting counts live
buffers, not the process's resident memory, and is unchanged). A C library that refuses a
threshold that high gets glibc's own maximum, 32 MiB.

NumPy asks the kernel for transparent huge pages for every array of 4 MiB or more
(``madvise(MADV_HUGEPAGE)``). Where the kernel's THP defrag mode is ``madvise`` (common), each
such first touch may stall in memory compaction: a GRU's first call spent 160-300 ms of system
time faulting its 144 MiB of residual stacks in as huge pages, 45 ms as small ones, and warm
calls (which reuse the heap's memory) ran the same either way. So remat turns NumPy's advice
off too, unless the user chose it with NumPy's own ``NUMPY_MADVISE_HUGEPAGE``.

``REMAT_MALLOC_TUNING=0`` leaves both as they are; on other C libraries nothing changes.
"""

import ctypes
import ctypes.util
import os
import platform

import numpy as np

MMAP_THRESHOLD = 256 << 20  # blocks from the heap up to this size
FALLBACK_MMAP_THRESHOLD = 32 << 20  # glibc's own maximum, where it refuses the one above
TRIM_THRESHOLD = 256 << 20  # freed memory kept at the top of the heap up to this much

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_tuned = None  # whether they were set, once tried


def tune():
    """Set the thresholds (tried once per process); whether they are set."""
    global _tuned
    if _tuned is None:
        _tuned = _set_thresholds()
    return _tuned


def _set_thresholds():
    if os.environ.get("REMAT_MALLOC_TUNING", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if "NUMPY_MADVISE_HUGEPAGE" not in os.environ:
        _set_numpy_hugepages(False)
    mmap_set = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) or \
        mallopt(_M_MMAP_THRESHOLD, FALLBACK_MMAP_THRESHOLD)
    return bool(mmap_set) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def _set_numpy_hugepages(enabled):
    """NumPy's huge-page advice for its large arrays (``NUMPY_MADVISE_HUGEPAGE`` at runtime);
    whether it was on before (None where this NumPy has no such switch)."""
    setter = getattr(getattr(getattr(np, "_core", None), "multiarray", None),
                     "_set_madvise_hugepage", None)
    return None if setter is None else setter(enabled)
