"""The C allocator's tuning: a call whose large stacked outputs are freed and allocated again
at every call gets the same memory back instead of faulting fresh pages in; the environment
variable turns it off."""

import os
import platform
import resource
import subprocess
import sys

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.runtime import allocator

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="tunes glibc's allocator only")


def _faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@glibc
def test_stacked_outputs_reuse_freed_memory_from_call_to_call():
    """Four 8 MiB residual stacks a call (2,048 pages each): with the thresholds glibc sets
    itself, the freed stacks went back to the kernel and every call faulted them in again."""
    xs = np.ones((512, 64, 64), np.float32)

    @remat.jit
    def f(xs):
        def body(c, x):
            return c + 1.0, (x * c, x + c, x - c, x * 2.0)
        return lax.scan(body, jnp.zeros((64, 64), jnp.float32), xs)

    for _ in range(2):  # (warm: the first calls trace and set the thresholds)
        remat.tree_util.tree_map(lambda a: a.block_until_ready(), f(xs))
    tuned = allocator.tune()
    before = _faults()
    for _ in range(3):
        out = f(xs)
        del out
    assert tuned and _faults() - before < 2048  # (untuned: about 3 x 4 x 2,048)


@glibc
def test_tuning_is_off_with_the_environment_variable():
    """The variable also leaves NumPy's huge-page advice as NumPy set it; remat's tuning turns
    it off, unless the user chose it with ``NUMPY_MADVISE_HUGEPAGE``."""
    code = ("import remat, remat.numpy as jnp\n"
            "from remat.runtime import allocator\n"
            "remat.jit(lambda x: x + 1)(jnp.ones(3))\n"
            "print(allocator._tuned, allocator._set_numpy_hugepages(False))\n")
    base = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    for extra, want in (({"REMAT_MALLOC_TUNING": "0", "NUMPY_MADVISE_HUGEPAGE": "1"},
                         ["False", "True"]),
                        ({"REMAT_MALLOC_TUNING": "1"}, ["True", "False"]),
                        ({"REMAT_MALLOC_TUNING": "1", "NUMPY_MADVISE_HUGEPAGE": "1"},
                         ["True", "True"])):
        out = subprocess.run([sys.executable, "-c", code], env={**base, **extra},
                             capture_output=True, text=True, check=True).stdout.split()
        assert out[-2:] == want, extra


@glibc
def test_temporaries_above_glibc_threshold_reuse_freed_memory():
    """A 64 MiB temporary a call (16,384 pages), above the 32 MiB that glibc's own threshold
    reaches: a block that size was mapped afresh at every call (a CNN's convolution patches,
    57,600 faults and 200 ms a call), and now comes back from the heap."""
    x = np.ones((4096, 4096), np.float32)

    @remat.jit
    def f(x):
        return jnp.sum(jnp.sin(x) * x)

    for _ in range(2):
        f(x).block_until_ready()
    tuned = allocator.tune()
    before = _faults()
    for _ in range(3):
        f(x).block_until_ready()
    assert tuned and _faults() - before < 4096  # (at glibc's thresholds: about 3 x 16,384)
