"""``import remat`` loads no module most programs never use (issue 34.1): numba, and SciPy's
special functions, solvers, LAPACK wrappers and FFTs are imported at their first use."""

import subprocess
import sys

HEAVY = ["numba", "llvmlite", "scipy.special", "scipy.optimize", "scipy.linalg", "scipy.fft",
         "remat.scipy.special", "remat.scipy.linalg", "remat.experimental.checkify"]


def _loaded_after(code):
    out = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True).stdout.split()
    return [m for m in HEAVY if m in out]


def test_import_remat_loads_none_of_the_heavy_modules():
    assert _loaded_after("import remat") == []


def test_each_is_imported_at_its_first_use():
    code = """
import remat, remat.numpy as jnp
from remat import lax
assert abs(float(remat.scipy.special.erf(0.5)) - 0.5204998778) < 1e-7
assert float(jnp.linalg.solve(jnp.eye(2) * 2.0, jnp.ones(2))[0]) == 0.5
assert abs(float(jnp.fft.fft(jnp.ones(4))[0].real) - 4.0) < 1e-6
assert float(lax.erf_inv(0.0)) == 0.0
from remat.experimental import checkify
assert callable(checkify.checkify)
"""
    assert set(_loaded_after(code)) >= {"scipy.special", "scipy.linalg", "scipy.fft",
                                        "remat.scipy.special", "remat.experimental.checkify"}
