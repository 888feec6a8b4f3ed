"""Shared by the benchmarks: median timing, and running one table of workloads on remat and
(when installed) JAX side by side."""

import ctypes
import ctypes.util
import os
import statistics
import time


def tune_allocator():
    """Keep large freed NumPy buffers in glibc's heap (no munmap/mmap and page faults for
    every 32 MiB temporary): the same for every system measured in the process. remat's own,
    smaller setting (``remat.runtime.allocator``) is turned off so that it does not replace
    this one at remat's first run. Returns whether the setting took (it needs glibc)."""
    os.environ["REMAT_MALLOC_TUNING"] = "0"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 1 << 30)
                    and libc.mallopt(m_trim_threshold, 1 << 31))
    except (OSError, AttributeError):
        return False


def median_time(fn, repeat, number=1):
    """Median over ``repeat`` runs of the mean time of ``number`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def systems():
    """``{name: (transformations module, numpy module)}``: remat, and JAX on the CPU."""
    import remat
    import remat.numpy as rnp

    found = {"remat": (remat, rnp)}
    try:
        import jax
        import jax.numpy as jjnp

        jax.config.update("jax_platforms", "cpu")
        found["jax"] = (jax, jjnp)
    except ImportError:
        pass
    return found


def compare(make_workloads, repeat, label_width=52):
    """Time every workload ``{label: (fn, scale, number)}`` of ``make_workloads(lib, np)`` on
    each system, and print remat, JAX and their ratio per row."""
    found = systems()
    results = {}
    for name, (lib, np_mod) in found.items():
        for label, (fn, scale, number) in make_workloads(lib, np_mod).items():
            out = fn()  # warm up: traces and caches
            getattr(out, "block_until_ready", lambda: None)()
            results[(label, name)] = median_time(fn, repeat, number) * scale
    has_jax = "jax" in found
    header = f"{'workload':{label_width}s} {'remat':>10s}" + (
        f" {'jax':>10s} {'remat/jax':>10s}" if has_jax else "")
    print(header)
    print("-" * len(header))
    for label in dict.fromkeys(label for label, _ in results):
        ours = results[(label, "remat")]
        line = f"{label:{label_width}s} {ours:10.2f}"
        if has_jax:
            theirs = results[(label, "jax")]
            line += f" {theirs:10.2f} {ours / theirs:10.2f}"
        print(line)
    if not has_jax:
        print("(JAX not installed: remat only)")
    return results
