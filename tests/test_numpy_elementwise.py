"""remat.numpy elementwise functions: values against NumPy, result dtypes and weak types
against JAX's rules (and against jax.numpy itself, through ``jax.eval_shape``, when JAX is
installed), broadcasting, and the integer semantics of division, remainder and power."""

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.errors import ConcretizationTypeError

RNG = np.random.default_rng(0)


def _data(dtype, shape=(2, 3), domain="any"):
    x = RNG.normal(size=shape) * 2
    if domain == "pos":
        x = np.abs(x) + 0.5
    elif domain == "unit":
        x = np.tanh(x) * 0.9
    elif domain == "ge1":
        x = np.abs(x) + 1.1
    if np.dtype(dtype) == np.bool_:
        return x > 0
    if np.dtype(dtype).kind in "iu" and domain == "unit":
        return np.zeros(shape, dtype)
    if np.dtype(dtype).kind in "iu":
        x = np.abs(x) + 1 if np.dtype(dtype).kind == "u" or domain != "any" else x
        return np.round(x).astype(dtype)
    return x.astype(dtype)


def _weak(x):
    """A weakly typed Array holding ``x`` (as produced by ``jnp.full(shape, 1.5)``)."""
    return lax.convert_element_type(np.asarray(x), np.asarray(x).dtype, weak_type=True)


def _close(out, expected, dtype):
    tol = {np.dtype("float16"): 2e-3}.get(np.dtype(dtype), 1e-5)
    np.testing.assert_allclose(np.asarray(out, np.float64), np.asarray(expected, np.float64),
                               rtol=tol, atol=tol, equal_nan=True)


# name: (numpy function, domain, result kind) with kinds "inexact" (integers compute in
# float32), "same" (the input dtype), "bool"
UNARY = {
    "sqrt": (np.sqrt, "pos", "inexact"), "cbrt": (np.cbrt, "any", "inexact"),
    "exp": (np.exp, "any", "inexact"), "exp2": (np.exp2, "any", "inexact"),
    "expm1": (np.expm1, "any", "inexact"), "log": (np.log, "pos", "inexact"),
    "log1p": (np.log1p, "pos", "inexact"), "log2": (np.log2, "pos", "inexact"),
    "log10": (np.log10, "pos", "inexact"), "sin": (np.sin, "any", "inexact"),
    "cos": (np.cos, "any", "inexact"), "tan": (np.tan, "unit", "inexact"),
    "arcsin": (np.arcsin, "unit", "inexact"), "arccos": (np.arccos, "unit", "inexact"),
    "arctan": (np.arctan, "any", "inexact"), "sinh": (np.sinh, "any", "inexact"),
    "cosh": (np.cosh, "any", "inexact"), "tanh": (np.tanh, "any", "inexact"),
    "arcsinh": (np.arcsinh, "any", "inexact"), "arccosh": (np.arccosh, "ge1", "inexact"),
    "arctanh": (np.arctanh, "unit", "inexact"), "deg2rad": (np.deg2rad, "any", "inexact"),
    "rad2deg": (np.rad2deg, "any", "inexact"), "reciprocal": (np.reciprocal, "pos", "inexact"),
    "rint": (np.rint, "any", "inexact"), "sinc": (np.sinc, "any", "inexact"),
    "fabs": (np.fabs, "any", "inexact"),
    "negative": (np.negative, "any", "same"), "positive": (np.positive, "any", "same"),
    "abs": (np.abs, "any", "same"), "absolute": (np.absolute, "any", "same"),
    "sign": (np.sign, "any", "same"), "floor": (np.floor, "any", "same"),
    "ceil": (np.ceil, "any", "same"), "trunc": (np.trunc, "any", "same"),
    "round": (np.round, "any", "same"), "around": (np.round, "any", "same"),
    "square": (np.square, "any", "same"),
    "isfinite": (np.isfinite, "any", "bool"), "isinf": (np.isinf, "any", "bool"),
    "isnan": (np.isnan, "any", "bool"), "signbit": (np.signbit, "any", "bool"),
    "logical_not": (np.logical_not, "any", "bool"),
}
NUMERIC_DTYPES = ["float32", "float16", "int32", "int8", "uint8"]


def _expected_dtype(kind, dtype):
    dtype = np.dtype(dtype)
    if kind == "bool":
        return np.dtype(bool)
    if kind == "inexact" and dtype.kind not in "fc":
        return np.dtype("float32")
    return dtype


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_values_and_dtypes(name, dtype):
    np_fn, domain, kind = UNARY[name]
    if name in ("negative", "sign") and dtype == "uint8":
        pytest.skip("NumPy wraps unsigned negation differently")
    x = _data(dtype, (2, 3), domain)
    out = getattr(jnp, name)(x)
    assert out.dtype == _expected_dtype(kind, dtype)
    assert out.shape == x.shape and not out.weak_type
    expected = np_fn(x.astype(out.dtype) if kind == "inexact" else x)
    _close(out, expected, out.dtype)


@pytest.mark.parametrize("name", ["negative", "positive", "abs", "floor", "ceil", "trunc",
                                  "isfinite", "isnan", "logical_not", "square", "signbit"])
def test_unary_on_booleans(name):
    x = np.array([True, False, True])
    if name == "negative":
        with pytest.raises(TypeError, match="boolean negative"):
            jnp.negative(x)
        return
    out = getattr(jnp, name)(x)
    expected = x if name == "positive" else getattr(np, name)(x)
    assert out.dtype == (np.int32 if name == "square" else expected.dtype)
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_unary_special_values():
    x = np.array([-np.inf, -2.5, -0.0, 0.0, 0.5, 1.5, 2.5, np.inf, np.nan], np.float32)
    for name in ["isfinite", "isinf", "isnan", "signbit", "isposinf", "isneginf", "round",
                 "rint", "trunc", "floor", "ceil", "sign", "abs"]:
        np_fn = getattr(np, name)
        np.testing.assert_array_equal(np.asarray(getattr(jnp, name)(x)), np_fn(x),
                                      err_msg=name)
    # round halves to even, like NumPy (and unlike lax.round's default)
    np.testing.assert_array_equal(np.asarray(jnp.round(np.array([0.5, 1.5, -2.5]))),
                                  [0.0, 2.0, -2.0])
    np.testing.assert_allclose(np.asarray(jnp.round(np.array([1.2345, -7.891]), 2)),
                               [1.23, -7.89], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(jnp.round(np.array([1234, -5678]), -2)),
                                  [1200, -5700])


BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "true_divide": np.true_divide, "floor_divide": np.floor_divide,
    "remainder": np.remainder, "mod": np.mod, "fmod": np.fmod, "power": np.power,
    "float_power": np.float_power, "maximum": np.maximum, "minimum": np.minimum,
    "fmax": np.fmax, "fmin": np.fmin, "arctan2": np.arctan2, "hypot": np.hypot,
    "logaddexp": np.logaddexp, "logaddexp2": np.logaddexp2, "copysign": np.copysign,
    "heaviside": np.heaviside, "nextafter": np.nextafter, "equal": np.equal,
    "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}
INEXACT_BINARY = {"divide", "true_divide", "float_power", "arctan2", "hypot", "logaddexp",
                  "logaddexp2", "copysign", "heaviside", "nextafter"}
BOOL_BINARY = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
               "logical_and", "logical_or", "logical_xor"}
BITWISE = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
           "bitwise_xor": np.bitwise_xor}


@pytest.mark.parametrize("shapes", [((2, 3), (3,)), ((4, 1), (1, 5)), ((), (2, 3))])
@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_values_and_dtypes(name, dtype, shapes):
    if dtype != "float32" and name in ("nextafter",):
        pytest.skip("float32 only")
    x = _data(dtype, shapes[0], "pos" if name in ("float_power", "power") else "any")
    y = _data(dtype, shapes[1], "pos")
    if name == "power" and dtype == "int32":
        y = np.minimum(y, 4)
    out = getattr(jnp, name)(x, y)
    if name in BOOL_BINARY:
        want = np.dtype(bool)
    elif name in INEXACT_BINARY and np.dtype(dtype).kind == "i":
        want = np.dtype("float32")
    else:
        want = np.dtype(dtype)
    assert out.dtype == want and not out.weak_type
    expected = BINARY[name](x.astype(want) if want.kind == "f" else x,
                            y.astype(want) if want.kind == "f" else y)
    assert out.shape == expected.shape
    _close(out, expected, want)


@pytest.mark.parametrize("name", sorted(BITWISE))
@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_bitwise(name, dtype):
    x, y = _data(dtype, (3, 4)), _data(dtype, (4,))
    out = getattr(jnp, name)(x, y)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(out), BITWISE[name](x, y))
    np.testing.assert_array_equal(np.asarray(jnp.invert(x)), np.invert(x))
    with pytest.raises(TypeError, match="integer or boolean"):
        getattr(jnp, name)(np.ones(3, np.float32), 1)


def test_promotion_rules_without_jax():
    """The cases the design names, checked against JAX's documented answers."""
    cases = [
        (lambda: jnp.ones(3, "float16") + 1.0, np.float16, False),
        (lambda: jnp.add(np.ones(3, np.int32), 1.0), np.float32, True),
        (lambda: jnp.add(np.ones(3, np.int8), 3), np.int8, False),
        (lambda: jnp.add(np.ones(3, np.uint8), np.ones(3, np.int8)), np.int16, False),
        (lambda: jnp.add(2, 3.0), np.float32, True),
        (lambda: jnp.multiply(2, 3), np.int32, True),
        (lambda: jnp.true_divide(np.ones(3, np.int32), np.ones(3, np.int32)), np.float32, False),
        (lambda: jnp.true_divide(1, 2), np.float32, True),
        (lambda: jnp.sin(1), np.float32, True),
        (lambda: jnp.sin(np.ones(2, np.int8)), np.float32, False),
        (lambda: jnp.add(np.ones(2, np.float16), np.ones(2, np.float32)), np.float32, False),
        (lambda: jnp.add(True, True), np.bool_, False),
        (lambda: jnp.add(True, 1), np.int32, True),
        (lambda: jnp.maximum(1, 2.0), np.float32, True),
        (lambda: jnp.equal(1.0, 2.0), np.bool_, True),
        (lambda: jnp.equal(np.ones(2), 2.0), np.bool_, False),
        (lambda: jnp.where(True, 1, 2.0), np.float32, True),
        (lambda: jnp.clip(np.ones(3, np.int32), 0.5, 2), np.float32, True),
        (lambda: jnp.power(np.ones(3, np.int32), 2), np.int32, False),
        (lambda: jnp.power(2, 2.0), np.float32, True),
        (lambda: jnp.square(2), np.int32, True),
        (lambda: jnp.log2(2.0), np.float32, False),
        (lambda: jnp.positive(True), np.bool_, False),
    ]
    for i, (f, dtype, weak) in enumerate(cases):
        out = f()
        assert (out.dtype, out.weak_type) == (np.dtype(dtype), weak), i


def test_x64_promotion(x64):
    assert jnp.sin(np.ones(2, np.int64)).dtype == np.float64
    assert jnp.sin(np.ones(2, np.int32)).dtype == np.float32
    assert jnp.add(np.ones(2, np.int32), 1).dtype == np.int32
    out = jnp.add(1, 2.5)
    assert (out.dtype, out.weak_type) == (np.float64, True)
    assert jnp.true_divide(np.ones(2, np.int64), 2).dtype == np.float64
    assert jnp.square(np.ones(2, bool)).dtype == np.int32
    assert jnp.rint(np.ones(2, np.int8)).dtype == np.float64


# --- against jax.numpy: result dtype, weak type and shape ------------------------------------

ARG_KINDS = ["f32", "f16", "i32", "i8", "u8", "bool", "py_int", "py_float", "py_bool",
             "weak_f32", "np_f16_scalar", "np_i32_scalar"]


def _arg(kind, jax):
    """(remat argument, jax.eval_shape argument) for an argument kind."""
    if kind == "py_int":
        return 3, 3
    if kind == "py_float":
        return 2.5, 2.5
    if kind == "py_bool":
        return True, True
    if kind == "np_f16_scalar":
        return np.float16(1.5), np.float16(1.5)
    if kind == "np_i32_scalar":
        return np.int32(2), np.int32(2)
    if kind == "weak_f32":
        x = np.full((2, 3), 1.5, np.float32)
        return _weak(x), jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=True)
    dtype = {"f32": "float32", "f16": "float16", "i32": "int32", "i8": "int8", "u8": "uint8",
             "bool": "bool"}[kind]
    x = _data(dtype, (2, 3), "pos")
    return jnp.asarray(x), jax.ShapeDtypeStruct(x.shape, x.dtype)


def _jax_signature(jax, fn, *args, **kwargs):
    """jax.numpy's result signature: arrays are abstract, scalars stay concrete Python/NumPy
    scalars (as in an eager call)."""
    is_abstract = [isinstance(a, jax.ShapeDtypeStruct) for a in args]

    def call(*abstract):
        it = iter(abstract)
        return fn(*[next(it) if abstr else a for a, abstr in zip(args, is_abstract)], **kwargs)

    try:
        out = jax.eval_shape(call, *[a for a, abstr in zip(args, is_abstract) if abstr])
    except Exception as e:  # noqa: BLE001 - any rejection counts
        return type(e)
    return out.shape, np.dtype(out.dtype), out.weak_type


def _remat_signature(fn, *args, **kwargs):
    try:
        out = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        return type(e)
    return out.shape, out.dtype, out.weak_type


def assert_matches_jax(name, kinds, **kwargs):
    jax = pytest.importorskip("jax")
    mismatches = []
    for combo in kinds:
        pairs = [_arg(k, jax) for k in combo]
        ours = _remat_signature(getattr(jnp, name), *[p[0] for p in pairs], **kwargs)
        theirs = _jax_signature(jax, getattr(jax.numpy, name), *[p[1] for p in pairs],
                                **kwargs)
        if isinstance(theirs, type) and isinstance(ours, type):
            continue  # both reject the input
        if ours != theirs:
            mismatches.append((combo, ours, theirs))
    assert not mismatches, f"{name}: (args, remat, jax): {mismatches}"


UNARY_JAX = sorted(set(UNARY) - {"around"} | {"isposinf", "isneginf", "invert",
                                              "nan_to_num", "conjugate", "real", "imag"})


@pytest.mark.parametrize("name", UNARY_JAX)
def test_unary_signature_matches_jax(name):
    kinds = [(k,) for k in ARG_KINDS]
    if name in ("round", "sign"):  # JAX rejects booleans (so do we), checked separately
        kinds = [k for k in kinds if "bool" not in k[0]]
    assert_matches_jax(name, kinds)


BINARY_KINDS = [
    ("f32", "f32"), ("f32", "py_int"), ("f32", "py_float"), ("i32", "py_float"),
    ("i32", "py_int"), ("i8", "py_int"), ("u8", "i8"), ("f16", "py_float"), ("f16", "f32"),
    ("py_int", "py_int"), ("py_int", "py_float"), ("py_float", "py_float"),
    ("py_bool", "py_int"), ("py_bool", "py_bool"), ("bool", "bool"), ("bool", "py_int"),
    ("weak_f32", "py_float"), ("weak_f32", "py_int"), ("weak_f32", "f16"),
    ("weak_f32", "i32"), ("py_int", "weak_f32"), ("i8", "np_i32_scalar"),
    ("f32", "np_f16_scalar"), ("py_float", "np_i32_scalar"), ("u8", "py_int"),
    ("py_float", "i32"), ("py_int", "bool"), ("i32", "i8"),
]


@pytest.mark.parametrize("name", sorted(set(BINARY) | set(BITWISE) | {"isclose"}))
def test_binary_signature_matches_jax(name):
    kinds = BINARY_KINDS
    if name in ("floor_divide", "remainder", "mod", "fmod", "power"):
        kinds = [k for k in kinds if "bool" not in "".join(k)]
    if name in BITWISE:  # floats are rejected by both (checked in test_bitwise)
        kinds = [k for k in kinds if not any(a in ("f32", "f16", "py_float", "weak_f32",
                                                   "np_f16_scalar") for a in k)]
    assert_matches_jax(name, kinds)


def test_where_and_clip_signatures_match_jax():
    combos = [("bool", a, b) for a in ARG_KINDS for b in ARG_KINDS][::3]
    assert_matches_jax("where", combos)
    assert_matches_jax("clip", [(a, b, c) for a in ARG_KINDS for b, c in
                               [("py_int", "py_float"), ("f32", "py_int"), ("i8", "u8")]])


# --- integer semantics -----------------------------------------------------------------------


def test_floor_divide_and_remainder_follow_python():
    a = np.array([7, -7, 7, -7, 0, 5, -5, 6], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5, 3, -4], np.int32)
    np.testing.assert_array_equal(np.asarray(jnp.floor_divide(a, b)), a // b)
    np.testing.assert_array_equal(np.asarray(jnp.remainder(a, b)), a % b)
    np.testing.assert_array_equal(np.asarray(jnp.fmod(a, b)), np.fmod(a, b))
    q, r = jnp.divmod(a, b)
    np.testing.assert_array_equal(np.asarray(q), a // b)
    np.testing.assert_array_equal(np.asarray(r), a % b)
    af, bf = a.astype(np.float32) + 0.5, b.astype(np.float32)
    np.testing.assert_allclose(np.asarray(jnp.floor_divide(af, bf)), af // bf)
    np.testing.assert_allclose(np.asarray(jnp.remainder(af, bf)), af % bf, rtol=1e-6)
    u = np.array([7, 9, 200], np.uint8)
    np.testing.assert_array_equal(np.asarray(jnp.floor_divide(u, np.uint8(4))), u // 4)
    np.testing.assert_array_equal(np.asarray(jnp.remainder(u, np.uint8(7))), u % 7)


def test_power_integer_exponents():
    x = np.array([-3, -1, 0, 1, 2, 5], np.int32)
    for e in [0, 1, 2, 3, 7]:
        np.testing.assert_array_equal(np.asarray(jnp.power(x, e)), x ** e)
    # traced (non-static) integer exponents: exact binary exponentiation
    e = np.array([0, 3, 2, 9, 13, 4], np.int32)
    np.testing.assert_array_equal(np.asarray(remat.jit(jnp.power)(x, e)), x ** e)
    np.testing.assert_array_equal(np.asarray(jnp.power(np.int32(3), np.array([19, 20]))),
                                  np.int32(3) ** np.array([19, 20], np.int32))
    neg = jnp.power(np.array([1, -1, -1, 2, 3], np.int32), np.array([-2, -3, -2, -1, -2]))
    np.testing.assert_array_equal(np.asarray(neg), [1, -1, 1, 0, 0])
    # a static integer exponent stages integer_pow; a float base keeps its dtype
    assert "integer_pow[y=3]" in str(remat.make_jaxpr(lambda v: jnp.power(v, 3))(1.0))
    assert "integer_pow[y=2]" in str(remat.make_jaxpr(lambda v: v ** 2)(np.ones(2)))
    out = jnp.power(np.ones(3, np.float16), np.array([1, 2, 3], np.int32))
    assert out.dtype == np.float16
    np.testing.assert_allclose(np.asarray(jnp.power(np.float32(2.0), np.arange(4))),
                               [1, 2, 4, 8])


def test_boolean_arithmetic():
    a, b = np.array([True, False, True]), np.array([True, True, False])
    np.testing.assert_array_equal(np.asarray(jnp.add(a, b)), a + b)
    np.testing.assert_array_equal(np.asarray(jnp.multiply(a, b)), a * b)
    assert jnp.add(a, b).dtype == np.bool_
    with pytest.raises(TypeError, match="boolean subtract"):
        jnp.subtract(a, b)
    with pytest.raises(TypeError, match="sign does not accept dtype bool"):
        jnp.sign(a)


# --- broadcasting and argument errors --------------------------------------------------------


def test_broadcasting_errors():
    with pytest.raises(ValueError, match=r"Incompatible shapes for broadcasting: "
                                         r"shapes=\[\(2, 3\), \(4,\)\]"):
        jnp.add(np.ones((2, 3)), np.ones(4))
    with pytest.raises(TypeError, match="add requires ndarray or scalar arguments, got "
                                        "<class 'list'> at position 0"):
        jnp.add([1, 2], 1)
    with pytest.raises(TypeError, match="position 1"):
        jnp.multiply(1, (2,))
    out = jnp.multiply(np.ones((3, 1, 2)), np.ones((4, 1)))
    assert out.shape == (3, 4, 2)


@pytest.mark.parametrize("shapes", [((2, 3), (3,)), ((3, 1, 2), (4, 1)), ((1,), (2, 3)),
                                    ((2, 1), (1, 3)), ((), (2, 2)), ((4,), (4,))])
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "true_divide", "maximum"])
def test_arrays_of_one_type_broadcast_as_numpy(op, shapes):
    # (two remat arrays of one dtype and weak type take the path without promotion)
    s1, s2 = shapes
    a, b = np.arange(1.0, 1 + np.prod(s1)).reshape(s1), np.arange(2.0, 2 + np.prod(s2)).reshape(s2)
    for dtype, weak in ((np.float32, False), (np.int32, False), (np.float32, True)):
        if op == "true_divide" and dtype == np.int32:
            continue
        x = lax.convert_element_type(a.astype(dtype), dtype, weak_type=weak)
        y = lax.convert_element_type(b.astype(dtype), dtype, weak_type=weak)
        out = getattr(jnp, op)(x, y)
        np.testing.assert_array_equal(np.asarray(out), getattr(np, op)(a, b).astype(dtype))
        assert out.dtype == dtype and out.aval.weak_type == weak
    x, y = jnp.asarray(a, np.float32), jnp.asarray(b, np.float32)
    shape = np.broadcast_shapes(s1, s2)
    grads = remat.grad(lambda x, y: jnp.sum(getattr(jnp, op)(x, y) ** 2), (0, 1))(x, y)
    want = remat.grad(lambda x, y: jnp.sum(getattr(jnp, op)(
        jnp.broadcast_to(x, shape), jnp.broadcast_to(y, shape)) ** 2), (0, 1))(x, y)
    for g, w, s in zip(grads, want, shapes):
        assert g.shape == s
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)
    with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
        getattr(jnp, op)(jnp.ones((2, 3)), jnp.ones(4))


def test_scalars_stay_rank0_operands():
    jaxpr = str(remat.make_jaxpr(lambda x: jnp.add(jnp.multiply(x, 2.0), 1))(np.ones((3, 4),
                                                                                np.float32)))
    assert "mul a 2.0:f32[]" in jaxpr and "add b 1.0:f32[]" in jaxpr
    assert "broadcast_in_dim" not in jaxpr


# --- functions with special cases ------------------------------------------------------------


def test_where():
    c = np.array([[True, False, True]])
    out = jnp.where(c, np.arange(3.0), np.full((2, 1), -1.0))
    np.testing.assert_array_equal(np.asarray(out), np.where(c, np.arange(3.0),
                                                            np.full((2, 1), -1.0)))
    assert out.dtype == np.float32
    assert jnp.where(c, 1, 2).dtype == np.int32
    np.testing.assert_array_equal(np.asarray(jnp.where(np.arange(4) - 1, 5, 7)), [5, 7, 5, 5])
    idx = jnp.where(np.array([[0, 1], [1, 0]]))
    assert [np.asarray(i).tolist() for i in idx] == [[0, 1], [1, 0]]
    with pytest.raises(ValueError, match="Either both or neither"):
        jnp.where(c, 1)
    with pytest.raises(ConcretizationTypeError, match="size argument of jnp.nonzero"):
        remat.jit(lambda x: jnp.where(x > 0))(np.ones(3))


def test_select_clip_nan_to_num():
    x = np.linspace(-2, 2, 9).astype(np.float32)
    out = jnp.select([x < -1, x > 1], [x * 10, x * 100], default=-7.0)
    np.testing.assert_allclose(np.asarray(out), np.select([x < -1, x > 1], [x * 10, x * 100],
                                                          -7.0))
    np.testing.assert_allclose(np.asarray(jnp.clip(x, -1, 0.5)), np.clip(x, -1, 0.5))
    np.testing.assert_allclose(np.asarray(jnp.clip(x, max=0.25)), np.minimum(x, 0.25))
    np.testing.assert_allclose(np.asarray(jnp.clip(x, a_min=0.0)), np.maximum(x, 0.0))
    y = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.nan_to_num(y)), np.nan_to_num(y))
    np.testing.assert_array_equal(np.asarray(jnp.nan_to_num(y, nan=1.0, posinf=2.0,
                                                            neginf=-2.0)),
                                  [1.0, 2.0, -2.0, 1.0])
    ints = np.array([1, 2])
    assert jnp.nan_to_num(ints).dtype == np.int32


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's own overflow in np.hypot
def test_isclose_and_friends():
    a = np.array([1.0, np.inf, -np.inf, np.nan, 1.0, 0.0], np.float32)
    b = np.array([1.0 + 1e-7, np.inf, np.inf, np.nan, 1.1, 1e-9], np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.isclose(a, b)), np.isclose(a, b))
    np.testing.assert_array_equal(np.asarray(jnp.isclose(a, b, equal_nan=True)),
                                  np.isclose(a, b, equal_nan=True))
    np.testing.assert_array_equal(np.asarray(jnp.isclose(a, b, rtol=0.2)),
                                  np.isclose(a, b, rtol=0.2))
    assert jnp.isclose(np.array([1, 2]), np.array([1, 3])).tolist() == [True, False]
    big = np.float32(3e38)
    np.testing.assert_allclose(np.asarray(jnp.hypot(big, big)), np.hypot(big, big), rtol=1e-6)
    assert float(jnp.hypot(0.0, 0.0)) == 0.0
    assert float(jnp.logaddexp(-np.inf, -np.inf)) == -np.inf
    np.testing.assert_allclose(float(jnp.logaddexp(100.0, 100.0)), 100 + np.log(2), rtol=1e-6)
    assert np.asarray(jnp.fmax(np.nan, 1.0)) == 1.0 and np.isnan(np.asarray(jnp.maximum(np.nan,
                                                                                      1.0)))
    np.testing.assert_array_equal(np.asarray(jnp.signbit(np.array([-0.0, 0.0, -1.0]))),
                                  [True, False, True])
    np.testing.assert_array_equal(np.asarray(jnp.copysign(np.array([1.0, 2.0]),
                                                          np.array([-0.0, 3.0]))),
                                  [-1.0, 2.0])


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_python_scalars(name):
    """Arrays with Python scalars on either side (the operators' hot path)."""
    for dtype in ("float32", "int32"):
        x = jnp.asarray(_data(dtype, (2, 3), "pos"))
        for scalar in (2, 1.5):
            if name == "nextafter" and dtype == "int32":
                continue
            for args in ((x, scalar), (scalar, x)):
                out = getattr(jnp, name)(*args)
                np_args = [np.asarray(a, np.float64) for a in args]
                with np.errstate(all="ignore"):
                    expected = BINARY[name](*np_args)
                if name == "nextafter":
                    expected = BINARY[name](*[np.asarray(a, np.float32) for a in args])
                _close(out, expected, out.dtype if out.dtype != np.bool_ else np.float32)


@pytest.mark.parametrize("name", ["floor_divide", "remainder", "fmod", "divmod"])
@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8", "uint32"])
def test_integer_division_by_zero_and_overflow_matches_jax(name, dtype):
    """XLA's integer division by zero (and of the minimum by -1) has defined results; jnp's
    floor_divide/remainder/fmod/divmod build on them as JAX does (``3 // 0 == -2``,
    ``x % 0 == 0``)."""
    jax = pytest.importorskip("jax")
    info = np.iinfo(dtype)
    vals = sorted({0, 1, 3, 7, int(info.max), int(info.min)} |
                  ({-1, -3, -7} if info.min < 0 else set()))
    x = np.array([a for a in vals for _ in vals], dtype)
    y = np.array([b for _ in vals for b in vals], dtype)
    ours = getattr(jnp, name)(jnp.asarray(x), jnp.asarray(y))
    theirs = getattr(jax.numpy, name)(x, y)
    for a, b in zip(ours if name == "divmod" else [ours],
                    theirs if name == "divmod" else [theirs]):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
