"""float16 and bfloat16 elementwise math gives the same bits on every x86-64 machine, as XLA
computes it on CPU: each transcendental function (and rsqrt) in float32, rounded once.

NumPy's own float16 loops of these functions take CPU-specific paths (AVX-512 and AVX512-FP16
kernels where the CPU has them, a scalar float32 loop elsewhere), so remat computes float16 in
float32 itself; ml_dtypes' bfloat16 loops already compute in float32.
"""

import warnings

import ml_dtypes
import numpy as np
import pytest

import remat
from remat import lax

F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)

# primitive -> the NumPy function it computes
UNARY = {
    "exp": (lax.exp, np.exp), "exp2": (lax.exp2, np.exp2), "log": (lax.log, np.log),
    "log1p": (lax.log1p, np.log1p), "expm1": (lax.expm1, np.expm1), "tanh": (lax.tanh, np.tanh),
    "sin": (lax.sin, np.sin), "cos": (lax.cos, np.cos), "tan": (lax.tan, np.tan),
    "asin": (lax.asin, np.arcsin), "acos": (lax.acos, np.arccos), "atan": (lax.atan, np.arctan),
    "sinh": (lax.sinh, np.sinh), "cosh": (lax.cosh, np.cosh), "asinh": (lax.asinh, np.arcsinh),
    "acosh": (lax.acosh, np.arccosh), "atanh": (lax.atanh, np.arctanh),
    "cbrt": (lax.cbrt, np.cbrt), "rsqrt": (lax.rsqrt, lambda x: 1 / np.sqrt(x)),
    "sqrt": (lax.sqrt, np.sqrt),
}
# those JAX lowers to one XLA operation, which XLA's CPU backend computes in float32 for
# float16 (the others it expands into float16 operations, each rounded)
ONE_XLA_OP = ("exp", "log", "log1p", "tanh", "sin", "cos", "tan", "atan", "cbrt", "rsqrt",
              "sqrt")


def _all_finite(dtype):
    """Every finite value of a 16-bit float type."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = bits.view(dtype)
    return x[np.isfinite(x.astype(np.float32))]


def _same(a, b):
    """Bit for bit, any NaN matching any NaN."""
    a, b = np.asarray(a), np.asarray(b)
    nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
    return (a.view(np.uint16) == b.view(np.uint16)) | nan


def _float32_rounded_once(prim, fn, dtype):
    """Every finite value of ``dtype``: ``prim``'s result eager and under jit (where the
    executor calls the primitive's ufunc in place, fused with its neighbours and split across
    its workers), and ``fn`` computed in float32 and rounded once to ``dtype``."""
    x = _all_finite(dtype)
    one = dtype.type(1)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = fn(x.astype(np.float32)).astype(dtype)
        return prim(x), remat.jit(lambda v: prim(v * one) * one)(x), want


@pytest.mark.parametrize("name", sorted(UNARY))
def test_float16_rounds_its_float32_value_once(name):
    got, jitted, want = _float32_rounded_once(*UNARY[name], F16)
    assert np.asarray(got).dtype == F16
    assert _same(got, want).all()
    assert _same(jitted, want).all()


def test_bfloat16_rsqrt_rounds_once():
    """(ml_dtypes' own loops compute bfloat16's transcendental functions in float32.) Plans
    read subnormal operands as zeros, as XLA does: those are left out under jit."""
    got, jitted, want = _float32_rounded_once(*UNARY["rsqrt"], BF16)
    assert _same(got, want).all()
    normal = np.abs(_all_finite(BF16).astype(np.float32)) >= np.finfo(np.float32).tiny
    assert _same(jitted, want)[normal].all()


def test_logistic_rounds_each_step_of_xla_expansion():
    """``1 / (1 + exp(-x))`` in float16 operations, the exp computed in float32, as XLA expands
    and computes it."""
    x = _all_finite(F16)
    with np.errstate(all="ignore"):
        t = np.exp((-x).astype(np.float32)).astype(F16)
        want = np.float16(1) / (t + np.float16(1))
    assert _same(lax.logistic(x), want).all()
    assert _same(remat.jit(lax.logistic)(x), want).all()


@pytest.mark.parametrize("name", ONE_XLA_OP)
def test_matches_jax_to_the_rounding_of_its_float32_kernels(name):
    """JAX's float16 value is XLA's float32 kernel rounded once, remat's NumPy's: they agree
    but where the two float32 values, each within a few float32 ulps, straddle a float16
    rounding boundary (how many such values there are depends on the CPU's NumPy kernels:
    AVX-512 ones differ from AVX2 ones): then by one ulp, the exact value within a few float32
    ulps of the midpoint between the two."""
    jax = pytest.importorskip("jax")
    prim, fn = UNARY[name]
    jfn = {"atan": jax.numpy.arctan, "rsqrt": jax.lax.rsqrt}.get(name) or \
        getattr(jax.numpy, name)
    x = _all_finite(F16)
    with np.errstate(all="ignore"):
        got, want = np.asarray(prim(x)), np.asarray(jax.jit(jfn)(x))
        differ = ~_same(got, want)
        exact = fn(x[differ].astype(np.float64))
    assert differ.sum() <= len(x) >> 8, x[differ]
    ulps = np.abs(got[differ].view(np.int16).astype(np.int32)
                  - want[differ].view(np.int16).astype(np.int32))
    assert (ulps <= 1).all() and (np.sign(got[differ]) == np.sign(want[differ])).all()
    midpoint = (got[differ].astype(np.float64) + want[differ].astype(np.float64)) / 2
    float32_ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert (np.abs(exact - midpoint) <= 4 * float32_ulp).all(), x[differ]
