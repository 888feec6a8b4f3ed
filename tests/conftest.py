import os
import sys
from pathlib import Path

import numpy as np
import pytest

from remat.config import config

# The JAX oracle compiles an XLA program for every operation it runs on a new type: most of the
# suite's time. JAX keeps them on disk, shared by the workers and later runs (set before any
# test module imports JAX; a run's own settings win). Unbounded: a bound makes JAX rescan the
# directory at every write, which slowed the suite by half; a run adds about 70 MB.
_JAX_CACHE = Path(os.environ.get("REMAT_CACHE_DIR", Path.home() / ".cache" / "remat")) / "jax"
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(_JAX_CACHE))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


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
if "REMAT_NATIVE_LOOPS" not in os.environ:
    config.update("remat_native_loops", False)


@pytest.fixture
def native_loops():
    """The native loop tier on, compiling every loop at its first run (skips without numba)."""
    pytest.importorskip("numba")
    from remat.exec import native

    with config.override("remat_native_loops", True), native.eager():
        yield native


@pytest.fixture
def new_loops():
    """``new_loops(run)``: the loop states (``remat.exec.native.Loop``) that ``run()`` made;
    other tests' loops may still be alive."""
    from remat.exec import native

    def loops():
        return {id(loop): loop for t in native._loops.values() for loop in t.values()}

    def made(run):
        before = loops()  # (held: a loop freed meanwhile could lend a new one its id)
        run()
        return [loop for key, loop in loops().items() if key not in before]
    return made


@pytest.fixture(autouse=True, scope="module")
def _release_jax_caches():
    """JAX's compiled programs (the oracle's) stay cached for the life of the process: a worker
    grew by a gigabyte over the special functions' tests alone. Let them go after every module."""
    yield
    jax = sys.modules.get("jax")
    if jax is not None:
        jax.clear_caches()
