"""Every elementwise primitive, from one table: values against NumPy/SciPy in each accepted
dtype, dtypes and weak types against JAX, rank-0 broadcasting, abstract-eval errors,
derivatives by finite differences (and analytic answers at ties and flat points), vmap
against a Python loop for leading, inner and trailing batch axes, and jit (with the primitive
printed under its JAX name)."""

import functools
import itertools
import re
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest

import remat
from remat import lax
from remat.config import config
from remat.lax import elementwise
from remat.test_util import check_grads

SEED = 0
SHAPE = (3, 4)
DTYPES = ["float32", "float64", "complex64", "int32", "uint8", "bool"]
_KIND = {"float32": "f", "float64": "f", "complex64": "c", "int32": "i", "uint8": "u",
         "bool": "b"}


def _jax_lax():
    return pytest.importorskip("jax").lax


def _jax_shape(op, args):
    """JAX's abstract result of the op (no compilation: this is JAX's abstract evaluation)."""
    jax = pytest.importorskip("jax")
    return jax.eval_shape(lambda *xs: op.call(jax.lax, *xs), *args)


def _scipy_special():
    return pytest.importorskip("scipy.special")


# --- operand domains -------------------------------------------------------------------------

_FLOAT_DOMAINS = {
    "real": lambda r, s: r.standard_normal(s),
    "small": lambda r, s: r.uniform(-2.0, 2.0, s),
    "pos": lambda r, s: r.uniform(0.5, 3.0, s),
    "gt1": lambda r, s: r.uniform(1.2, 3.0, s),
    "unit": lambda r, s: r.uniform(-0.9, 0.9, s),
    "nonzero": lambda r, s: r.choice([-1.0, 1.0], s) * r.uniform(0.5, 2.0, s),
    # away from integers and from halves: floor/ceil/round are flat there
    "frac": lambda r, s: r.integers(-3, 4, s) + r.choice([0.15, 0.35, 0.65, 0.85], s),
    "lo": lambda r, s: r.uniform(-1.5, -0.5, s),
    "hi": lambda r, s: r.uniform(0.5, 1.5, s),
    "m1": lambda r, s: np.ones(s),
    "m2": lambda r, s: np.full(s, 2.0),
}
_INT_DOMAINS = {"real": (-5, 6), "small": (-3, 4), "pos": (1, 6), "nonzero": (1, 6),
                "frac": (-5, 6), "unit": (0, 1), "gt1": (2, 4), "m1": (1, 2), "m2": (2, 3),
                "lo": (-2, 1), "hi": (1, 4)}
_SCALARS = {"real": 0.7, "small": -1.25, "pos": 1.5, "gt1": 1.5, "unit": 0.5, "nonzero": -1.25,
            "frac": 1.35, "m1": 1.0, "m2": 2.0, "lo": -1.0, "hi": 1.0}


def sample(domain, shape, dtype, rng):
    """Operands inside an op's domain, in ``dtype``."""
    dtype = np.dtype(dtype)
    if domain == "bool" or dtype == np.bool_:
        return rng.random(shape) < 0.5
    if domain == "which3":
        return rng.integers(0, 3, shape).astype(np.int32)
    if dtype.kind in "iu":
        lo, hi = _INT_DOMAINS[domain]
        x = rng.integers(max(lo, 0) if dtype.kind == "u" else lo, hi, shape)
        if domain == "nonzero" and dtype.kind == "i":
            x = x * rng.choice([-1, 1], shape)
        return x.astype(dtype)
    x = _FLOAT_DOMAINS[domain](rng, shape)
    if dtype.kind == "c":
        x = x + 0.25j * rng.uniform(-1, 1, shape)
    return np.asarray(x).astype(dtype)


# --- the table -------------------------------------------------------------------------------


class Op(NamedTuple):
    prim: object
    call: Callable            # call(L, *operands) with L = remat.lax or jax.lax
    ref: Callable             # NumPy/SciPy reference on the operands
    kinds: str                # accepted dtype kinds of the operands: f c i u b
    domains: tuple            # per operand
    grad: str = "smooth"      # "smooth" | "zero" (flat) | "none" (boolean/integer results)
    out: str = "same"         # result dtype: "same" | "bool" | "real"
    fixed: tuple = ()         # operand positions with a fixed dtype/domain (select_n which)
    rank0: tuple | None = None  # positions that may be rank 0 against arrays (None: all)


def _u(prim, ref, kinds="fc", domain="real", fn=None, **kw):
    return Op(prim, lambda L, x, _n=fn or prim.name: getattr(L, _n)(x), ref, kinds, (domain,),
              **kw)


def _b(prim, ref, kinds="fc", domains=("real", "real"), fn=None, **kw):
    fn = fn or prim.name
    return Op(prim, lambda L, x, y: getattr(L, fn)(x, y), ref, kinds, domains, **kw)


def _sp(name):
    return lambda *xs: getattr(_scipy_special(), name)(*xs)


def _round_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _int_aware_div(x, y):
    if x.dtype.kind in "iu":
        return np.trunc(x.astype(np.float64) / y).astype(x.dtype)
    return x / y


def _logistic(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)))


E = elementwise
OPS = {
    "neg": _u(E.neg_p, np.negative, "fciu"),
    "sign": _u(E.sign_p, np.sign, "fciu", domain="nonzero", grad="zero"),
    "floor": _u(E.floor_p, np.floor, "f", domain="frac", grad="zero"),
    "ceil": _u(E.ceil_p, np.ceil, "f", domain="frac", grad="zero"),
    "round_away": Op(E.round_p, lambda L, x: L.round(x, 0), _round_away, "f", ("frac",),
                     grad="zero"),
    "round_even": Op(E.round_p, lambda L, x: L.round(x, 1), np.round, "f", ("frac",),
                     grad="zero"),
    "is_finite": _u(E.is_finite_p, np.isfinite, "f", grad="none", out="bool"),
    "exp": _u(E.exp_p, np.exp, domain="small"),
    "exp2": _u(E.exp2_p, np.exp2, domain="small"),
    "log": _u(E.log_p, np.log, domain="pos"),
    "log1p": _u(E.log1p_p, np.log1p, domain="pos"),
    "expm1": _u(E.expm1_p, np.expm1, domain="small"),
    "tanh": _u(E.tanh_p, np.tanh),
    "logistic": _u(E.logistic_p, _logistic, domain="small"),
    "sin": _u(E.sin_p, np.sin),
    "cos": _u(E.cos_p, np.cos),
    "tan": _u(E.tan_p, np.tan, domain="unit"),
    "asin": _u(E.asin_p, np.arcsin, domain="unit"),
    "acos": _u(E.acos_p, np.arccos, domain="unit"),
    "atan": _u(E.atan_p, np.arctan),
    "sinh": _u(E.sinh_p, np.sinh, domain="small"),
    "cosh": _u(E.cosh_p, np.cosh, domain="small"),
    "asinh": _u(E.asinh_p, np.arcsinh),
    "acosh": _u(E.acosh_p, np.arccosh, domain="gt1"),
    "atanh": _u(E.atanh_p, np.arctanh, domain="unit"),
    "sqrt": _u(E.sqrt_p, np.sqrt, domain="pos"),
    "rsqrt": _u(E.rsqrt_p, lambda x: 1 / np.sqrt(x), domain="pos"),
    "cbrt": _u(E.cbrt_p, np.cbrt, "f", domain="nonzero"),
    "abs": _u(E.abs_p, np.abs, "fci", domain="nonzero", out="real"),
    "erf": _u(E.erf_p, _sp("erf"), "f"),
    "erfc": _u(E.erfc_p, _sp("erfc"), "f"),
    "erf_inv": _u(E.erf_inv_p, _sp("erfinv"), "f", domain="unit"),
    "lgamma": _u(E.lgamma_p, _sp("gammaln"), "f", domain="pos"),
    "digamma": _u(E.digamma_p, _sp("psi"), "f", domain="pos"),
    "square": _u(E.square_p, np.square, "fciu"),
    "bitwise_not": _u(E.not_p, np.invert, "iub", grad="none", fn="bitwise_not"),
    **{f"integer_pow_{y}": Op(E.integer_pow_p, lambda L, x, _y=y: L.integer_pow(x, _y),
                              lambda x, _y=y: np.power(x, _y) if _y >= 0 else 1 / x ** -_y,
                              "fciu" if y >= 0 else "fc", ("nonzero" if y < 0 else "small",))
       for y in (0, 1, 2, 3, 5, -1, -2)},
    "add": _b(E.add_p, np.add, "fciu"),
    "sub": _b(E.sub_p, np.subtract, "fciu"),
    "mul": _b(E.mul_p, np.multiply, "fciu"),
    "div": _b(E.div_p, _int_aware_div, "fciu", domains=("real", "nonzero")),
    "rem": _b(E.rem_p, np.fmod, "fiu", domains=("real", "nonzero")),
    "pow": _b(E.pow_p, np.power, "fc", domains=("pos", "real")),
    "max": _b(E.max_p, np.maximum, "fciub"),
    "min": _b(E.min_p, np.minimum, "fciub"),
    "atan2": _b(E.atan2_p, np.arctan2, "f", domains=("real", "nonzero")),
    "bitwise_and": _b(E.and_p, np.bitwise_and, "iub", grad="none", fn="bitwise_and"),
    "bitwise_or": _b(E.or_p, np.bitwise_or, "iub", grad="none", fn="bitwise_or"),
    "bitwise_xor": _b(E.xor_p, np.bitwise_xor, "iub", grad="none", fn="bitwise_xor"),
    "nextafter": _b(E.nextafter_p, np.nextafter, "f", grad="none"),
    "polygamma_1": _b(E.polygamma_p, _sp("polygamma"), "f", domains=("m1", "pos")),
    "polygamma_2": _b(E.polygamma_p, _sp("polygamma"), "f", domains=("m2", "pos")),
    **{n: _b(p, f, "fciub" if n in ("eq", "ne") else "fiub", grad="none", out="bool")
       for n, p, f in (("eq", E.eq_p, np.equal), ("ne", E.ne_p, np.not_equal),
                       ("lt", E.lt_p, np.less), ("le", E.le_p, np.less_equal),
                       ("gt", E.gt_p, np.greater), ("ge", E.ge_p, np.greater_equal))},
    "select_n_bool": Op(E.select_n_p, lambda L, w, a, b: L.select_n(w, a, b),
                        lambda w, a, b: np.where(w, b, a), "fciub", ("bool", "real", "real"),
                        fixed=(0,), rank0=(0,)),
    "select_n_int": Op(E.select_n_p, lambda L, w, a, b, c: L.select_n(w, a, b, c),
                       lambda w, *cs: np.choose(w, cs), "fciub",
                       ("which3", "real", "real", "real"), fixed=(0,), rank0=(0,)),
    "select": Op(E.select_n_p, lambda L, p, a, b: L.select(p, a, b),
                 lambda p, a, b: np.where(p, a, b), "fciub", ("bool", "real", "real"),
                 fixed=(0,), rank0=(0,)),
    "clamp": Op(E.clamp_p, lambda L, lo, x, hi: L.clamp(lo, x, hi),
                lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi), "fciub",
                ("lo", "real", "hi"), rank0=(0, 2)),
    "convert_f32": Op(E.convert_element_type_p,
                      lambda L, x: L.convert_element_type(x, np.float32),
                      lambda x: np.real(x).astype(np.float32), "fciub", ("real",),
                      out="float32"),
    "convert_i32": Op(E.convert_element_type_p,
                      lambda L, x: L.convert_element_type(x, np.int32),
                      lambda x: np.trunc(np.real(x)).astype(np.int32), "fciub", ("real",),
                      grad="none",
                      out="int32"),
    "convert_bool": Op(E.convert_element_type_p,
                       lambda L, x: L.convert_element_type(x, np.bool_),
                       lambda x: x != 0, "fciub", ("real",), grad="none", out="bool"),
}
NAMES = sorted(OPS)


def _operands(op, dtype, shape=SHAPE, seed=SEED):
    rng = np.random.default_rng(seed)
    out = []
    for i, d in enumerate(op.domains):
        if i in op.fixed:
            out.append(sample(d, shape, np.bool_ if d == "bool" else np.int32, rng))
        else:
            out.append(sample(d, shape, dtype, rng))
    return out


def _out_dtype(op, dtype):
    dtype = np.dtype(dtype)
    if op.out == "bool":
        return np.dtype(np.bool_)
    if op.out == "real":
        return np.dtype(np.float32) if dtype.kind == "c" else dtype
    if op.out != "same":
        return np.dtype(op.out)
    return dtype


def _tol(dtype):
    return {"float64": 1e-12, "complex64": 1e-5}.get(np.dtype(dtype).name, 1e-6)


def _x64(dtype):
    return config.override("jax_enable_x64", np.dtype(dtype).itemsize == 8)


def _run(name, L=None):
    op = OPS[name]
    return lambda *xs: op.call(L or lax, *xs)


# --- the table covers the module --------------------------------------------------------------


def test_every_primitive_is_in_the_table():
    prims = {getattr(elementwise, n) for n in elementwise.__all__ if n.endswith("_p")}
    missing = sorted(p.name for p in prims - {op.prim for op in OPS.values()})
    assert not missing, f"primitives without a table entry: {missing}"
    for n in elementwise.__all__:
        assert hasattr(elementwise, n), n


def test_primitive_names_are_jaxs():
    jlax = _jax_lax()
    for n in elementwise.__all__:
        if n.endswith("_p"):
            assert getattr(elementwise, n).name == getattr(jlax, n).name, n


# --- impl against NumPy ------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@pytest.mark.parametrize("name,dtype", [(n, d) for n in NAMES for d in DTYPES
                                        if _KIND[d] in OPS[n].kinds])
def test_values_against_numpy(name, dtype):
    op = OPS[name]
    with _x64(dtype):
        args = _operands(op, dtype)
        out = _run(name)(*args)
        with np.errstate(all="ignore"):
            expected = np.asarray(op.ref(*args))
        assert out.shape == SHAPE
        assert out.dtype == _out_dtype(op, dtype), (out.dtype, _out_dtype(op, dtype))
        assert not out.aval.weak_type
        if expected.dtype.kind in "fc":
            tol = _tol(dtype)
            np.testing.assert_allclose(np.asarray(out), expected, rtol=tol, atol=tol)
        else:
            np.testing.assert_array_equal(np.asarray(out), expected.astype(out.dtype))


# JAX accepts these, remat does not: NumPy has no complex arctan2 (XLA has).
JAX_ONLY = {("atan2", "complex64")}


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_dtype_classes(name, dtype):
    """Accepted dtypes match JAX's; a rejected one is a TypeError naming the op and dtype."""
    op = OPS[name]
    with _x64(dtype):
        args = _operands(op, dtype)
        accepted = _KIND[dtype] in op.kinds
        if not accepted:
            with pytest.raises(TypeError, match=rf"{op.prim.name}\b.*{np.dtype(dtype).name}"):
                _run(name)(*args)
        try:
            _jax_shape(op, args)
            jax_accepts = True
        except TypeError:
            jax_accepts = False
        if (name, dtype) in JAX_ONLY:
            assert jax_accepts and not accepted
        else:
            assert accepted == jax_accepts, f"JAX {'accepts' if jax_accepts else 'rejects'} it"


def test_special_values():
    """Edge values where NumPy's own answer differs from JAX's, or rounding is subtle."""
    f = np.float32
    np.testing.assert_array_equal(lax.round(f([0.5, 1.5, 2.5, -0.5, -2.5])), [1, 2, 3, -1, -3])
    np.testing.assert_array_equal(lax.round(f([0.5, 1.5, 2.5, -0.5, -2.5]), 1),
                                  [0, 2, 2, -0, -2])
    assert np.signbit(np.asarray(lax.sign(f(-0.0))))
    assert not np.signbit(np.asarray(lax.sign(f(0.0))))
    assert np.isnan(lax.sign(f(np.nan)))
    # as JAX: 1 / (1 + exp(-x)), whose exp(100) overflows (the result is subnormal anyway)
    np.testing.assert_array_equal(lax.logistic(f([-1000, -100, -87, 0, 100, 1000])),
                                  [0, 0, f(1) / (1 + np.exp(f(87))), 0.5, 1, 1])
    # (float16's exp in float32, rounded once: NumPy's own float16 exp is CPU-specific)
    e10 = np.exp(np.float32(10)).astype(np.float16)
    np.testing.assert_array_equal(lax.logistic(np.float16([-12, -10])),
                                  [0, np.float16(1) / (1 + e10)])
    np.testing.assert_array_equal(lax.is_finite(f([1, np.inf, -np.inf, np.nan])),
                                  [True, False, False, False])
    np.testing.assert_array_equal(lax.nextafter(f([0, 1]), f([1, 0])),
                                  [np.nextafter(f(0), f(1)), np.nextafter(f(1), f(0))])
    np.testing.assert_array_equal(lax.integer_pow(np.int32([2, -3]), 0), [1, 1])
    np.testing.assert_array_equal(lax.integer_pow(f([0, 2]), -1), [np.inf, 0.5])
    np.testing.assert_array_equal(lax.pow(f(0), f(0)), 1)
    np.testing.assert_array_equal(lax.pow(f([2, 2]), np.int32([3, -1])), [8, 0.5])
    assert lax.pow(f([2, 2]), np.int32([3, -1])).dtype == np.float32


def test_round_is_exact_near_halves_and_for_large_values():
    """|x| + 0.5 rounds up 0.49999997 and the odd integers beyond 2**23; JAX does not."""
    below_half = np.nextafter(np.float32(0.5), np.float32(0))
    x = np.float32([below_half, -below_half, 2**23 + 1, -(2**23 + 1), 2**24 - 1, 0.5, -0.5,
                    np.inf, -np.inf, np.nan, -0.2])
    away = np.asarray(lax.round(x))
    np.testing.assert_array_equal(away, [0, -0, 2**23 + 1, -(2**23 + 1), 2**24 - 1, 1, -1,
                                         np.inf, -np.inf, np.nan, -0])
    assert list(np.signbit(away[[1, 10]])) == [True, True]
    np.testing.assert_array_equal(lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
                                  np.round(x))
    with config.override("jax_enable_x64", True):
        big = np.float64([2.0**52 + 1, 0.49999999999999994, 2.5])
        np.testing.assert_array_equal(lax.round(big), [2.0**52 + 1, 0, 3])
    jax = pytest.importorskip("jax")
    np.testing.assert_array_equal(lax.round(x), jax.lax.round(x))
    np.testing.assert_array_equal(lax.round(x, 1), jax.lax.round(x, 1))


def test_integer_division_semantics():
    """Division rounds toward zero; by zero: all ones (div) and x (rem), as JAX on CPU/GPU."""
    x = np.int8([7, -7, 7, -7, -128, -128, 5, -5])
    y = np.int8([2, 2, -2, -2, -1, 0, 0, 0])
    np.testing.assert_array_equal(lax.div(x, y), [3, -3, -3, 3, -128, -1, -1, -1])
    np.testing.assert_array_equal(lax.rem(x, y), [1, -1, 1, -1, 0, -128, 5, -5])
    u = np.uint8([200, 5, 0])
    np.testing.assert_array_equal(lax.div(u, np.uint8([3, 0, 0])), [66, 255, 255])
    np.testing.assert_array_equal(lax.rem(u, np.uint8([3, 0, 0])), [2, 5, 0])
    np.testing.assert_array_equal(lax.rem(np.float32([5.5, -5.5]), np.float32(2)), [1.5, -1.5])
    jlax = _jax_lax()
    for a, b in ((x, y), (u, np.uint8([3, 0, 0]))):
        np.testing.assert_array_equal(lax.div(a, b), jlax.div(a, b))
        np.testing.assert_array_equal(lax.rem(a, b), jlax.rem(a, b))


def test_convert_element_type_saturates_like_jax():
    v = np.float32([1e10, -1e10, np.nan, np.inf, -np.inf, -3.7, 300.5, 127.9, -128.9, 255.5,
                    -0.5])
    jlax = _jax_lax()
    for dtype in (np.int8, np.uint8, np.int16, np.int32, np.uint32):
        out = lax.convert_element_type(v, dtype)
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, jlax.convert_element_type(v, dtype), err_msg=str(dtype))
    np.testing.assert_array_equal(lax.convert_element_type(v, np.int32)[:5],
                                  [2**31 - 1, -2**31, 0, 2**31 - 1, -2**31])
    with config.override("jax_enable_x64", True):
        big = np.float64([1e300, -1e300, 3e9])
        np.testing.assert_array_equal(lax.convert_element_type(big, np.int64),
                                      [2**63 - 1, -2**63, 3_000_000_000])
        np.testing.assert_array_equal(lax.convert_element_type(big, np.float32),
                                      np.float32([np.inf, -np.inf, 3e9]))
    np.testing.assert_array_equal(lax.convert_element_type(np.int32([300, -1]), np.uint8),
                                  [44, 255])
    np.testing.assert_array_equal(lax.convert_element_type(np.float32([2, 0, np.nan]), bool),
                                  [True, False, True])
    with pytest.warns(np.exceptions.ComplexWarning):
        out = lax.convert_element_type(np.complex64([1.5 + 2j]), np.int32)
    np.testing.assert_array_equal(out, [1])


def test_convert_element_type_weak_type_param():
    x = np.float32([1.5])
    out = lax.convert_element_type(x, np.int32, weak_type=True)
    assert out.dtype == np.int32 and out.aval.weak_type
    jaxpr = remat.make_jaxpr(lambda x: lax.convert_element_type(x, np.float32, True))(
        np.int32([1]))
    assert "convert_element_type[new_dtype=float32 weak_type=True]" in str(jaxpr)
    assert jaxpr.out_avals[0].weak_type
    with config.override("jax_enable_x64", False):
        assert lax.convert_element_type(x, np.float64).dtype == np.float32


# --- dtypes and weak types against JAX ---------------------------------------------------------


def _scalar_args(op, kind):
    """Python scalars in the op's domains (the predicate of select_n stays an array)."""
    out = []
    for i, d in enumerate(op.domains):
        if i in op.fixed:
            out.append(np.asarray(d == "which3" and 1 or True))
        elif kind == "int":
            out.append(int(np.ceil(abs(_SCALARS[d]))) * (-1 if d in ("real", "small", "nonzero",
                                                                      "frac") else 1))
        elif kind == "bool":
            out.append(True)
        else:
            out.append(_SCALARS[d])
    return out


def assert_same_result(ours, theirs, weak=True):
    """Same dtype, weak type and shape as JAX's result (an array or a ShapeDtypeStruct)."""
    assert ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
    if weak:
        assert ours.aval.weak_type == theirs.weak_type, (ours.aval.weak_type, theirs.weak_type)
    assert ours.shape == theirs.shape


@pytest.mark.parametrize("name", NAMES)
def test_weak_types_match_jax(name):
    """Python-scalar operands are weak; mixing them with arrays gives the array's dtype."""
    op = OPS[name]
    for kind in ("float", "int", "bool"):
        k = {"float": "f", "int": "i", "bool": "b"}[kind]
        if k not in op.kinds and not (kind == "int" and name == "pow"):
            continue
        args = _scalar_args(op, kind)
        try:
            theirs = _jax_shape(op, args)
        except TypeError:  # then so do we
            with pytest.raises(TypeError, match=op.prim.name):
                op.call(lax, *args)
            continue
        # Python bools: see test_python_bool_scalars_are_strong
        assert_same_result(op.call(lax, *args), theirs, weak=kind != "bool")
    if "f" not in op.kinds or name.startswith("select") or name == "clamp":
        return  # select_n and clamp: see test_weak_operand_of_select_and_clamp
    # one strong operand (rank 0 or an array), the others Python scalars, in each position
    arrays = _operands(op, np.float32)
    scalars = _scalar_args(op, "float")
    for i in range(len(op.domains)):
        if i in op.fixed:
            continue
        for strong in (arrays[i], arrays[i][0, 0]):
            args = [strong if j == i else s for j, s in enumerate(scalars)]
            assert_same_result(op.call(lax, *args), _jax_shape(op, args))


def test_python_bool_scalars_are_strong():
    jlax = _jax_lax()
    for f in (lambda L: L.bitwise_not(True), lambda L: L.bitwise_and(True, False),
              lambda L: L.eq(True, False), lambda L: L.max(True, False)):
        assert f(jlax).weak_type is False
        assert f(lax).aval.weak_type is False


def test_weak_operand_of_select_and_clamp():
    jlax = _jax_lax()
    x = np.float32([0.2, 1.7, -3])
    assert_same_result(lax.clamp(0.0, x, 1.0), jlax.clamp(0.0, x, 1.0))
    assert_same_result(lax.clamp(0.0, 2.5, 1.0), jlax.clamp(0.0, 2.5, 1.0))
    assert_same_result(lax.select(True, 1.0, 2.0), jlax.select(True, 1.0, 2.0))
    w = np.asarray(1, np.int32)
    assert_same_result(lax.select_n(w, 1.0, 2.0, 3.0), jlax.select_n(w, 1.0, 2.0, 3.0))


# --- rank-0 broadcasting -----------------------------------------------------------------------

NARY = [n for n in NAMES if len(OPS[n].domains) > 1]


def _rank0_positions(op):
    return range(len(op.domains)) if op.rank0 is None else op.rank0


@pytest.mark.parametrize("name", NARY)
def test_rank0_operands_broadcast(name):
    """A rank-0 operand (strong array or Python scalar) broadcasts against the others."""
    op = OPS[name]
    dtype = np.float32 if "f" in op.kinds else np.int32
    args = _operands(op, dtype)
    for i in _rank0_positions(op):
        rank0 = args[i][1, 2]
        mixed = [rank0 if j == i else a for j, a in enumerate(args)]
        out = op.call(lax, *mixed)
        assert out.shape == SHAPE and out.dtype == _out_dtype(op, dtype)
        with np.errstate(all="ignore"):
            expected = np.broadcast_to(op.ref(*mixed), SHAPE)
        np.testing.assert_allclose(np.asarray(out, np.float64),
                                   np.asarray(expected, np.float64), rtol=1e-6, atol=1e-6)
        if i not in op.fixed:  # and as a Python scalar (weak) operand
            py = [rank0.item() if j == i else a for j, a in enumerate(args)]
            out = op.call(lax, *py)
            assert out.shape == SHAPE and out.dtype == _out_dtype(op, dtype)
            assert not out.aval.weak_type
            np.testing.assert_allclose(np.asarray(out, np.float64),
                                       np.asarray(expected, np.float64), rtol=1e-6, atol=1e-6)
    all0 = [a[0, 1] for a in args]
    out = op.call(lax, *all0)
    assert out.shape == () and not out.aval.weak_type


def test_rank0_broadcasting_examples():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(lax.mul(x, 2.0), x * 2)
    np.testing.assert_array_equal(lax.add(np.float32(1.5), x), x + 1.5)
    np.testing.assert_array_equal(lax.sub(np.asarray(1, np.float32), x), 1 - x)
    assert str(remat.make_jaxpr(lambda x: lax.mul(x, 2.0))(x)).count("mul a 2.0:f32[]") == 1
    jaxpr = remat.make_jaxpr(lambda s, x: lax.add(s, x))(np.float32(1), x)
    assert "add a b" in str(jaxpr) and jaxpr.out_avals[0].shape == (2, 3)


# --- abstract-eval errors ----------------------------------------------------------------------


@pytest.mark.parametrize("name", NARY)
def test_mismatched_dtypes_and_shapes(name):
    op = OPS[name]
    free = [i for i in range(len(op.domains)) if i not in op.fixed]
    a, b = ("float32", "float64") if "f" in op.kinds else ("int32", "uint8")
    with config.override("jax_enable_x64", True):
        args = _operands(op, a)
        args[free[-1]] = _operands(op, b)[free[-1]]
        with pytest.raises(TypeError, match=rf"{op.prim.name}.*same dtypes.*{a}.*{b}|"
                                            rf"{op.prim.name}.*same dtypes.*{b}.*{a}"):
            op.call(lax, *args)
    args = _operands(op, a)
    args[free[-1]] = _operands(op, a, shape=(3, 5))[free[-1]]
    with pytest.raises(TypeError, match=rf"{op.prim.name}.*(\(3, 4\).*\(3, 5\)|"
                                        rf"\(3, 5\).*\(3, 4\))"):
        op.call(lax, *args)
    args = _operands(op, a)
    args[free[0]] = args[free[0]][0]  # rank 1 against rank 2: no implicit broadcasting
    with pytest.raises(TypeError, match=rf"{op.prim.name}.*\(4,\)"):
        op.call(lax, *args)


def test_parameter_errors():
    x = np.float32([1, 2])
    with pytest.raises(TypeError, match="integer_pow.*negative exponent -2.*int32"):
        lax.integer_pow(np.int32([1, 2]), -2)
    with pytest.raises(TypeError, match="select_n which must be boolean or integer.*float32"):
        lax.select_n(x, x, x)
    with pytest.raises(TypeError, match="select_n with a boolean which takes at most 2 cases"):
        lax.select_n(np.bool_([True, False]), x, x, x)
    with pytest.raises(TypeError, match="select_n must have at least one case"):
        lax.select_n(np.bool_(True))
    with pytest.raises(TypeError, match=r"select_n cases must have the same shapes.*\(2,\).*"
                                        r"\(3,\)"):
        lax.select_n(np.bool_(True), x, np.float32([1, 2, 3]))
    with pytest.raises(TypeError, match=r"select_n which must be scalar or have the same shape.*"
                                        r"\(3,\).*\(2,\)"):
        lax.select_n(np.bool_([True, False, True]), x, x)
    with pytest.raises(TypeError, match="select_n requires arguments to have the same dtypes"):
        lax.select_n(np.bool_(True), x, np.int32([1, 2]))
    with pytest.raises(TypeError, match=r"clamp requires min to be a scalar.*\(2,\).*\(3,\)"):
        lax.clamp(np.float32([0, 0, 0]), x, np.float32(1))
    with pytest.raises(TypeError, match=r"clamp requires max to be a scalar.*\(2,\).*\(3,\)"):
        lax.clamp(np.float32(0), x, np.float32([0, 0, 0]))
    with pytest.raises(TypeError, match="clamp requires arguments to have the same dtypes"):
        lax.clamp(np.int32(0), x, np.float32(1))
    with pytest.raises(TypeError, match="pow.*same dtypes"):
        with config.override("jax_enable_x64", True):
            lax.pow(x, np.float64([1, 2]))
    with pytest.raises(TypeError, match="pow does not accept dtype int32"):
        lax.pow(np.int32([1]), np.int32([1]))
    assert str(lax.convert_element_type(x, "bfloat16").dtype) == "bfloat16"  # ml_dtypes
    with pytest.raises(TypeError, match="integer_pow requires an integer exponent, got 2.5"):
        lax.integer_pow(x, 2.5)
    np.testing.assert_array_equal(lax.integer_pow(x, np.int32(2)), [1, 4])
    with pytest.raises(ValueError, match="2 is not a valid RoundingMethod"):
        lax.round(x, 2)


def test_errors_raise_under_tracing_too():
    """Abstract evaluation runs when staging, before anything is computed."""
    with pytest.raises(TypeError, match=r"sin does not accept dtype int32"):
        remat.make_jaxpr(lax.sin)(np.int32([1]))
    with pytest.raises(TypeError, match=r"add got incompatible shapes.*\(2,\).*\(3,\)"):
        remat.jit(lax.add)(np.float32([1, 2]), np.float32([1, 2, 3]))


# --- derivatives -------------------------------------------------------------------------------

SMOOTH = [n for n in NAMES if OPS[n].grad == "smooth"]


def _diff_fun(op, args):
    """The op as a function of its differentiable operands (the rest closed over)."""
    fixed = {i: a for i, a in enumerate(args) if i in op.fixed or op.domains[i] in ("m1", "m2")}
    free = [a for i, a in enumerate(args) if i not in fixed]

    def f(*xs):
        it = iter(xs)
        dtype = remat.core.get_aval(xs[0]).dtype  # float64 while finite differences run
        return op.call(lax, *[next(it) if i not in fixed else fixed[i] if i in op.fixed
                              else lax.convert_element_type(fixed[i], dtype)
                              for i in range(len(args))])

    return f, free


@pytest.mark.parametrize("name", SMOOTH)
def test_grads(name):
    op = OPS[name]
    f, free = _diff_fun(op, _operands(op, np.float32, shape=(2, 3), seed=1))
    check_grads(f, free, order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("name", ["exp", "tan", "atanh", "lgamma", "digamma", "erf_inv",
                                  "pow", "div", "atan2", "polygamma_2", "integer_pow_-2",
                                  "logistic", "rsqrt", "cbrt"])
def test_grads_float64(name, x64):
    op = OPS[name]
    f, free = _diff_fun(op, _operands(op, np.float64, shape=(2, 3), seed=2))
    check_grads(f, free, order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("y", [0, 1, 2, 3, -2])
def test_integer_pow_derivatives_exact(y):
    x = np.float32([0.5, -1.5, 2.0])
    t = np.float32([1.0, 2.0, -1.0])
    _, dt = remat.jvp(lambda x: lax.integer_pow(x, y), (x,), (t,))
    np.testing.assert_allclose(dt, y * x ** (y - 1) * t if y else 0 * t, rtol=1e-6)
    g = remat.grad(lambda x: lax.reduce_sum(lax.integer_pow(x, y), (0,)))(x)
    np.testing.assert_allclose(g, y * x ** (y - 1) if y else 0 * x, rtol=1e-6)
    gg = remat.grad(lambda s: remat.grad(lambda s: lax.integer_pow(s, y))(s))(np.float32(1.5))
    np.testing.assert_allclose(gg, y * (y - 1) * 1.5 ** (y - 2) if y > 1 or y < 0 else 0,
                               rtol=1e-6)


# pow's JVP computes y * x ** (y - 1) = 0 * inf on the branch that select drops; NumPy warns
@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply:RuntimeWarning")
def test_pow_derivatives_in_both_operands():
    x, y = np.float32([0.5, 2.0, 3.0]), np.float32([1.5, -0.5, 2.0])
    gx, gy = remat.grad(lambda x, y: lax.reduce_sum(lax.pow(x, y), (0,)), (0, 1))(x, y)
    np.testing.assert_allclose(gx, y * x ** (y - 1), rtol=1e-6)
    np.testing.assert_allclose(gy, np.log(x) * x ** y, rtol=1e-6)
    # integer exponent: only the base is differentiable
    n = np.int32([2, 3, -1])
    check_grads(lambda x: lax.pow(x, n), (x,), order=2, modes=("fwd", "rev"))
    # x = 0: d/dy is 0 (JAX's convention), d/dx of x**0 is 0
    g0 = remat.grad(lambda x, y: lax.pow(x, y), (0, 1))(np.float32(0), np.float32(2))
    np.testing.assert_array_equal(g0, [0, 0])
    np.testing.assert_array_equal(remat.grad(lambda x: lax.pow(x, np.float32(0)))(
        np.float32(0)), 0)


@pytest.mark.parametrize("fn", ["max", "min"])
def test_max_min_derivatives_at_ties_are_balanced(fn):
    jax = pytest.importorskip("jax")
    x = np.float32([1.0, 2.0, 3.0])
    y = np.float32([1.0, 0.0, 5.0])  # tie, x wins, y wins

    def f(L):
        return lambda x, y: getattr(L, fn)(x, y)

    ours = remat.vjp(f(lax), x, y)[1](np.float32([1, 1, 1]))
    theirs = jax.vjp(f(jax.lax), x, y)[1](np.float32([1, 1, 1]))
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ours[0][0], 0.5)
    tx, ty = np.float32([1, 1, 1]), np.float32([3, 3, 3])
    _, t_ours = remat.jvp(f(lax), (x, y), (tx, ty))
    _, t_theirs = jax.jvp(f(jax.lax), (x, y), (tx, ty))
    np.testing.assert_array_equal(t_ours, t_theirs)
    # a rank-0 operand tied with some elements
    s = np.float32(2.0)
    g = remat.grad(lambda s: lax.reduce_sum(getattr(lax, fn)(s, x), (0,)))(s)
    gj = jax.grad(lambda s: getattr(jax.lax, fn)(s, x).sum())(s)
    np.testing.assert_array_equal(g, gj)


def test_clamp_derivatives_match_jax():
    jax = pytest.importorskip("jax")
    lo, hi = np.float32(0.0), np.float32(1.0)
    x = np.float32([-0.5, 0.0, 0.25, 1.0, 1.5])
    ones = np.ones(5, np.float32)
    ours = remat.vjp(lambda a, b, c: lax.clamp(a, b, c), lo, x, hi)[1](ones)
    np.testing.assert_array_equal(ours[1], [0, 0, 1, 0, 0])
    np.testing.assert_array_equal(ours[0], 1)  # x < lo once; a tie gives nothing to lo
    np.testing.assert_array_equal(ours[2], 1)  # x > hi once
    # JAX's own clamp VJP fails for scalar bounds, so compare with full-shape bounds
    lo, hi = np.zeros(5, np.float32), ones
    ours = remat.vjp(lambda a, b, c: lax.clamp(a, b, c), lo, x, hi)[1](ones)
    theirs = jax.vjp(lambda a, b, c: jax.lax.clamp(a, b, c), lo, x, hi)[1](ones)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)
    check_grads(lambda lo, x, hi: lax.clamp(lo, x, hi),
                (np.float32([0.5, -2, 0.1]), np.float32([0.2, 0.3, 0.4]),
                 np.float32([0.9, 0.25, 2])), order=2, modes=("fwd", "rev"))


def test_select_n_derivatives():
    w = np.int32([0, 2, 1, 2])
    cases = [np.float32([1, 2, 3, 4]) * k for k in (1, -1, 3)]
    f = lambda a, b, c: lax.select_n(w, a, b, c)  # noqa: E731
    check_grads(f, cases, order=2, modes=("fwd", "rev"))
    cts = remat.vjp(f, *cases)[1](np.float32([1, 1, 1, 1]))
    np.testing.assert_array_equal(np.stack(cts), [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 1]])
    # a scalar predicate and an undifferentiated case
    g = remat.grad(lambda a: lax.reduce_sum(lax.select(np.bool_(True), a, cases[1]), (0,)))(
        cases[0])
    np.testing.assert_array_equal(g, [1, 1, 1, 1])


def test_convert_element_type_derivatives(x64):
    x32 = np.float32([0.5, -1.25])
    check_grads(lambda x: lax.convert_element_type(x, np.float64), (x32,), order=2,
                modes=("fwd", "rev"))
    check_grads(lambda x: lax.convert_element_type(x, np.float32), (x32.astype(np.float64),),
                order=2, modes=("fwd", "rev"))
    g = remat.grad(lambda x: lax.reduce_sum(lax.convert_element_type(x, np.float64), (0,)))(x32)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, [1, 1])
    # through an integer: zero
    g = remat.grad(lambda x: lax.reduce_sum(lax.convert_element_type(
        lax.convert_element_type(x, np.int32), np.float32), (0,)))(x32)
    np.testing.assert_array_equal(g, [0, 0])


@pytest.mark.parametrize("name", [n for n in NAMES if OPS[n].grad == "zero"])
def test_flat_ops_have_zero_derivatives(name):
    op = OPS[name]
    x = _operands(op, np.float32)[0]
    _, t = remat.jvp(_run(name), (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(t, np.zeros_like(x))
    g = remat.grad(lambda x: lax.reduce_sum(_run(name)(x), (0, 1)))(x)
    np.testing.assert_array_equal(g, np.zeros_like(x))
    check_grads(_run(name), (x,), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("name", [n for n in NAMES if OPS[n].grad == "none"])
def test_non_differentiable_results_have_zero_tangents(name):
    op = OPS[name]
    args = _operands(op, np.float32 if "f" in op.kinds else np.int32)
    tangents = [np.ones_like(a) if a.dtype.kind == "f" else
                np.zeros(a.shape, remat.dtypes.float0) for a in args]
    out, t = remat.jvp(_run(name), tuple(args), tuple(tangents))
    t = np.asarray(t)
    assert t.dtype == remat.dtypes.float0 or not t.any()
    if out.dtype.kind == "f":
        assert t.dtype == out.dtype


def test_logistic_at_extremes_has_no_nans():
    x = np.float32([-1000, -100, -20, 0, 20, 100, 1000])
    g = remat.vjp(lax.logistic, x)[1](np.ones_like(x))[0]
    with np.errstate(over="ignore"):
        s = 1 / (1 + np.exp(-x.astype(np.float64)))
    # s (1 - s) as JAX computes it: 0 where s rounds to 1 in float32, accurate for x < 0
    # down to the smallest normal float32 (below it, 0: exp(-x) overflows, as in JAX)
    want = s * (1 - s.astype(np.float32))
    want[want < np.finfo(np.float32).tiny] = 0
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=0)
    for x0 in (-1000.0, -100.0, 100.0, 1000.0):
        h = remat.grad(lambda x: remat.grad(lax.logistic)(x))(np.float32(x0))
        assert np.isfinite(h) and abs(h) < 1e-30


# --- vmap --------------------------------------------------------------------------------------

B = 2


def _batched(op, dtype, seed=SEED):
    """B examples of the op's operands (per-example shape SHAPE)."""
    ex = [_operands(op, dtype, seed=seed + b) for b in range(B)]
    return [np.stack([e[i] for e in ex]) for i in range(len(op.domains))]


def _loop(f, args, in_axes):
    """The reference: f on each example, stacked."""
    outs = []
    for b in range(B):
        ex = [a if ax is None else np.take(a, b, axis=ax) for a, ax in zip(args, in_axes)]
        outs.append(np.asarray(f(*ex)))
    return np.stack(outs)


def _check_vmap(f, args, in_axes):
    expected = _loop(f, args, in_axes)
    out = remat.vmap(f, in_axes=tuple(in_axes))(*args)
    assert out.shape == expected.shape and out.dtype == expected.dtype, (out.shape,
                                                                        expected.shape)
    if expected.dtype.kind in "fc":
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(np.asarray(out), expected)


def _vmap_dtype(op):
    return np.float32 if "f" in op.kinds else np.int32


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("name", NAMES)
def test_vmap_all_batched(name, axis):
    op = OPS[name]
    args = [np.moveaxis(a, 0, axis) for a in _batched(op, _vmap_dtype(op))]
    _check_vmap(_run(name), args, [axis] * len(args))


@pytest.mark.parametrize("name", NARY)
def test_vmap_mixed(name):
    """Every batched/unbatched pattern, different batch axes per operand, and a batched
    rank-0 operand against unbatched arrays."""
    op = OPS[name]
    f = _run(name)
    batched = _batched(op, _vmap_dtype(op))
    single = _operands(op, _vmap_dtype(op), seed=7)
    n = len(op.domains)
    for pattern in itertools.product([False, True], repeat=n):
        if not any(pattern):
            continue
        args = [b if p else s for b, p, s in zip(batched, pattern, single)]
        _check_vmap(f, args, [0 if p else None for p in pattern])
    axes = [(1, -1, 0, 2)[i] for i in range(n)]
    _check_vmap(f, [np.moveaxis(b, 0, ax) for b, ax in zip(batched, axes)], axes)
    for i in _rank0_positions(op):  # operand i: a batch of rank-0 values; the others unbatched
        args = [batched[j][:, 1, 2] if j == i else single[j] for j in range(n)]
        _check_vmap(f, args, [0 if j == i else None for j in range(n)])
        # and the batched rank-0 operand against batched arrays
        args = [batched[j][:, 1, 2] if j == i else batched[j] for j in range(n)]
        _check_vmap(f, args, [0] * n)


def test_vmap_select_n_batched_scalar_predicate():
    rng = np.random.default_rng(3)
    p = np.bool_([True, False, True])
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32)
    ab, bb = rng.standard_normal((2, 3, 3, 4)).astype(np.float32)
    w = np.int32([2, 0, 1])
    c = rng.standard_normal((3, 4)).astype(np.float32)
    for f, args, axes in [
        (lax.select, (p, a, b), (0, None, None)),
        (lax.select, (p, ab, b), (0, 0, None)),
        (lax.select, (p, np.moveaxis(ab, 0, 2), bb), (0, 2, 0)),
        (lambda w, x, y, z: lax.select_n(w, x, y, z), (w, a, b, c), (0, None, None, None)),
        (lambda w, x, y, z: lax.select_n(w, x, y, z), (w, ab, b, np.moveaxis(bb, 0, 1)),
         (0, 0, None, 1)),
        # an unbatched scalar predicate, batched cases
        (lax.select, (np.bool_(True), ab, bb), (None, 0, 0)),
        # an unbatched array predicate, batched cases
        (lax.select, (a > 0, ab, b), (None, 0, None)),
    ]:
        global B
        old, B = B, 3
        try:
            _check_vmap(f, list(args), list(axes))
        finally:
            B = old


@pytest.mark.parametrize("name", ["add", "mul", "sin", "select_n_bool", "clamp", "integer_pow_3",
                                  "convert_f32", "pow", "max"])
def test_nested_vmap(name):
    op = OPS[name]
    f = _run(name)
    n = len(op.domains)
    # operands (3, 4, 2): the outer batch on axis 0, the inner one on axis 1 of what is left
    ex = [[_operands(op, np.float32, shape=(4,), seed=10 * i + j) for j in range(2)]
          for i in range(3)]
    args = [np.stack([np.stack([ex[i][j][k] for j in range(2)], axis=1) for i in range(3)])
            for k in range(n)]
    out = remat.vmap(remat.vmap(f, in_axes=1), in_axes=0)(*args)
    expected = np.stack([np.stack([np.asarray(f(*[a[i, :, j] for a in args]))
                                   for j in range(2)]) for i in range(3)])
    assert out.shape == expected.shape == (3, 2, 4)
    np.testing.assert_allclose(np.asarray(out, np.float64), expected.astype(np.float64),
                               rtol=1e-6)
    if n == 1:
        return
    # the first operand batched by both (outer axis 1, inner axis 0), the others by neither
    x = np.stack([np.stack([ex[i][j][0] for i in range(3)]) for j in range(2)])  # (2, 3, 4)
    rest = _operands(op, np.float32, shape=(4,), seed=99)[1:]
    none = (None,) * (n - 1)
    out = remat.vmap(remat.vmap(f, in_axes=(0,) + none), in_axes=(1,) + none)(x, *rest)
    expected = np.stack([np.stack([np.asarray(f(x[j, i], *rest)) for j in range(2)])
                         for i in range(3)])
    assert out.shape == expected.shape == (3, 2, 4)
    np.testing.assert_allclose(np.asarray(out, np.float64), expected.astype(np.float64),
                               rtol=1e-6)


# --- jit ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_jit_matches_eager_and_stages_the_primitive(name):
    op = OPS[name]
    f = _run(name)
    args = _operands(op, _vmap_dtype(op))
    eager = np.asarray(f(*args))
    out = remat.jit(f)(*args)
    assert out.dtype == eager.dtype and out.shape == eager.shape
    np.testing.assert_array_equal(np.asarray(out), eager)
    text = str(remat.make_jaxpr(remat.jit(f))(*args))
    assert re.search(rf"= {re.escape(op.prim.name)}[\[ ]", text), text
    assert "jit[" in text
    # on intermediates (which the executor may overwrite in place) and reused afterwards
    g = lambda *xs: [f(*[lax.copy(x) for x in xs]), *xs]  # noqa: E731
    out = remat.jit(g)(*args)
    np.testing.assert_array_equal(np.asarray(out[0]), eager)
    for a, b in zip(out[1:], args):
        np.testing.assert_array_equal(np.asarray(a), b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int8,
                                   np.uint64, np.bool_])
def test_select_n_of_large_operands_is_bitwise_where(dtype, x64):
    """Large selects run branch-free on the bits: every value (nan, inf, -0.0) must come
    through exactly, under jit and eagerly."""
    rng = np.random.default_rng(1)
    which = rng.random((64, 40)) > 0.5
    a = (rng.standard_normal((64, 40)) * 100).astype(dtype)
    b = (rng.standard_normal((40, 64)) * 100).astype(dtype).T  # a strided operand
    if np.dtype(dtype).kind == "f":
        a[0, 0], a[1, 1], b[0, 1] = np.nan, np.inf, -0.0
    want = np.where(which, a, b)
    for fn in (lax.select, remat.jit(lax.select)):
        got = np.asarray(fn(which, a, b))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.float64, np.uint64])
def test_select_n_between_broadcast_constants_is_bitwise_where(dtype, x64):
    """A gradient's select between broadcast constants (a relu's 1 / 0.5 / 0) reads each
    constant once as a scalar, and a false case of zero bits is one pass (``which * t``):
    the result must still be ``where`` bit for bit, with a constant on either side or both,
    and a negative zero (not zero bits) kept."""
    rng = np.random.default_rng(2)
    which = rng.random((64, 40)) > 0.5
    full = (rng.standard_normal((64, 40)) * 100).astype(dtype)
    if np.dtype(dtype).kind == "f":
        full[0, :3] = np.nan, np.inf, -0.0
    constants = [np.array(0, dtype), np.array(1, dtype),
                 np.array(-0.0 if np.dtype(dtype).kind == "f" else 3, dtype)]

    @functools.partial(remat.jit, static_argnums=(2, 3))
    def select(w, x, true_index, false_index):
        pick = lambda i: x if i is None else lax.broadcast_in_dim(  # noqa: E731
            constants[i], w.shape, ())
        return lax.select(w, pick(true_index), pick(false_index))

    for t in (None, 0, 1, 2):
        for f in (None, 0, 1, 2):
            value = lambda i: full if i is None else constants[i]  # noqa: E731
            want = np.where(which, value(t), value(f)).astype(dtype)
            got = np.asarray(select(which, full, t, f))
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8),
                                          err_msg=f"true {t}, false {f}")
