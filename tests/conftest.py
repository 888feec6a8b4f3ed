import numpy as np
import pytest

from remat.config import config


@pytest.fixture
def x64():
    """Run a test with 64-bit types enabled."""
    with config.override("jax_enable_x64", True):
        yield


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# The native loop tier compiles hot loops with numba on a background thread: seconds of CPU
# per loop. The suite runs the Python tier unless REMAT_NATIVE_LOOPS is set for the run;
# test_native_loops (and the fuzzer's native check) turn it on where they test it.
if "REMAT_NATIVE_LOOPS" not in __import__("os").environ:
    config.update("remat_native_loops", False)


@pytest.fixture
def native_loops():
    """The native loop tier on, compiling every loop at its first run (skips without numba)."""
    pytest.importorskip("numba")
    from remat.exec import native

    with config.override("remat_native_loops", True), native.eager():
        yield native
