"""Subnormals flush to zero while a plan runs, as under XLA on the CPU (they make float32
matmuls about a hundred times slower), and the caller's floating-point modes come back after."""

import numpy as np
import pytest

import remat
from remat.runtime import denormals, parallel

TINY = np.array([1e-40, -3e-42, 1.0], np.float32)  # two float32 subnormals and a normal

pytestmark = pytest.mark.skipif(denormals._fenv is None,
                                reason="no flush-to-zero control on this platform")


def test_jit_flushes_subnormals_like_jax():
    out = np.asarray(remat.jit(lambda x: x * 1.5)(TINY))
    np.testing.assert_array_equal(out, [0.0, 0.0, 1.5])
    try:
        import jax
    except ImportError:
        return
    np.testing.assert_array_equal(out, np.asarray(jax.jit(lambda x: x * 1.5)(TINY)))


def test_numpy_outside_remat_keeps_subnormals():
    remat.jit(lambda x: x * 1.5)(TINY)
    assert (TINY * np.float32(1.5))[0] != 0.0
    with parallel.session():
        assert (TINY * np.float32(1.5))[0] == 0.0
        with parallel.session():  # nested: still flushing
            assert (TINY * np.float32(1.5))[0] == 0.0
        assert (TINY * np.float32(1.5))[0] == 0.0
    assert (TINY * np.float32(1.5))[0] != 0.0


def test_worker_threads_flush_too():
    big = np.full(1 << 19, 1e-40, np.float32)
    out = np.empty_like(big)
    with parallel.session():
        parallel.ufunc_into(np.multiply, [big, np.float32(1.5)], out)
    assert not out.any()
