"""Elementwise arithmetic and transcendental functions with NumPy broadcasting and JAX
type promotion (integers compute in floating point where NumPy's ufunc would). Hot binary
operators skip the promotion machinery when their operands already agree.

Also the floating-point decompositions ``frexp ldexp modf spacing`` (exact, composed from
powers of two since remat.lax has no bitcast), ``gcd lcm`` (Euclid in a ``while_loop``),
``i0`` (Cephes' Chebyshev series), and the complex parts ``real imag conj angle``.
"""

import builtins

import numpy as np

from remat import dtypes, lax
from remat.array import Array
from remat.core import Tracer
from remat.numpy.logic import isnan, isneginf, isposinf, signbit, where
from remat.numpy.util import (
    _arr,
    _bcast_like,
    _bcast_pair,
    _broadcast_to_shape,
    _check_arraylike,
    _const,
    _convert,
    _dtype,
    _dtype_and_weak,
    _inexact_arg,
    _lax_const,
    _named,
    _one_arg,
    _operands_without_promotion,
    _promote_args,
    _promote_args_inexact,
    _promote_args_numeric,
    _promote_dtypes_numeric,
    _promote_shapes,
    _scalar_like,
    _scalar_operand_fits,
    _shape,
    _static_int,
    _weak,
    broadcast_shapes,
)

__all__ = [
    "abs", "absolute", "acos", "acosh", "add", "angle", "arccos", "arccosh", "arcsin",
    "arcsinh", "arctan", "arctan2", "arctanh", "around", "asin", "asinh", "atan", "atan2",
    "atanh", "cbrt", "ceil", "clip", "conj", "conjugate", "copysign", "cos", "cosh", "deg2rad",
    "degrees", "divide", "divmod", "exp", "exp2", "expm1", "fabs", "fix", "float_power",
    "floor", "floor_divide", "fmax", "fmin", "fmod", "frexp", "gcd", "heaviside", "hypot", "i0",
    "imag", "iscomplex", "isreal", "lcm", "ldexp", "log", "log10", "log1p", "log2", "logaddexp",
    "logaddexp2", "maximum", "minimum", "mod", "modf", "multiply", "nan_to_num", "negative",
    "nextafter", "positive", "pow", "power", "rad2deg", "radians", "real", "reciprocal",
    "remainder", "rint", "round", "sign", "sin", "sinc", "sinh", "spacing", "sqrt", "square",
    "subtract", "tan", "tanh", "true_divide", "trunc",
]


def _unary_inexact(name, lax_fn, doc):
    def fn(x, /):
        return lax_fn(_inexact_arg(name, x))

    return _named(fn, name, doc)


sqrt = _unary_inexact("sqrt", lax.sqrt, "Square root (ints compute in float).")
cbrt = _unary_inexact("cbrt", lax.cbrt, "Cube root.")
exp = _unary_inexact("exp", lax.exp, "Exponential.")
exp2 = _unary_inexact("exp2", lax.exp2, "``2 ** x``.")
expm1 = _unary_inexact("expm1", lax.expm1, "``exp(x) - 1``, accurate near 0.")
log = _unary_inexact("log", lax.log, "Natural logarithm.")
log1p = _unary_inexact("log1p", lax.log1p, "``log(1 + x)``, accurate near 0.")
sin = _unary_inexact("sin", lax.sin, "Sine.")
cos = _unary_inexact("cos", lax.cos, "Cosine.")
tan = _unary_inexact("tan", lax.tan, "Tangent.")
arcsin = _unary_inexact("arcsin", lax.asin, "Inverse sine.")
arccos = _unary_inexact("arccos", lax.acos, "Inverse cosine.")
arctan = _unary_inexact("arctan", lax.atan, "Inverse tangent.")
sinh = _unary_inexact("sinh", lax.sinh, "Hyperbolic sine.")
cosh = _unary_inexact("cosh", lax.cosh, "Hyperbolic cosine.")
tanh = _unary_inexact("tanh", lax.tanh, "Hyperbolic tangent.")
arcsinh = _unary_inexact("arcsinh", lax.asinh, "Inverse hyperbolic sine.")
arccosh = _unary_inexact("arccosh", lax.acosh, "Inverse hyperbolic cosine.")
arctanh = _unary_inexact("arctanh", lax.atanh, "Inverse hyperbolic tangent.")
asin, acos, atan = arcsin, arccos, arctan
asinh, acosh, atanh = arcsinh, arccosh, arctanh


def _log_base(x, base):
    """``log(x) / log(base)``; a complex ``log(x)`` has each part divided by the real
    ``log(base)`` (a complex division would turn ``log(0) = -inf + 0j`` into ``-inf + nanj``)."""
    if dtypes.kind(_dtype(x)) == "c":
        out = lax.log(x)
        re, im = lax.real(out), lax.imag(out)
        denom = lax.log(_const(re, base))
        return lax.complex(lax.div(re, denom), lax.div(im, denom))
    return lax.div(lax.log(x), lax.log(_const(x, base)))


def log2(x, /):
    """Base-2 logarithm."""
    return _log_base(_inexact_arg("log2", x), 2)


def log10(x, /):
    """Base-10 logarithm."""
    return _log_base(_inexact_arg("log10", x), 10)


def deg2rad(x, /):
    """Degrees to radians."""
    x = _inexact_arg("deg2rad", x)
    return lax.mul(x, _lax_const(x, np.pi / 180))


def rad2deg(x, /):
    """Radians to degrees."""
    x = _inexact_arg("rad2deg", x)
    return lax.mul(x, _lax_const(x, 180 / np.pi))


radians, degrees = deg2rad, rad2deg


def reciprocal(x, /):
    """``1 / x`` (ints compute in float)."""
    x = _inexact_arg("reciprocal", x)
    return lax.integer_pow(x, -1)


def negative(x, /):
    """``-x`` (booleans are not negatable, as in NumPy)."""
    x = _one_arg("negative", x)
    if _dtype(x) == dtypes.bool_:
        raise TypeError("The numpy boolean negative, the `-` operator, is not supported, use "
                        "the `~` operator or the logical_not function instead.")
    return lax.neg(x)


def positive(x, /):
    """``+x``."""
    return _one_arg("positive", x)


def absolute(x, /):
    """Absolute value (the magnitude for complex numbers)."""
    x = _one_arg("absolute", x)
    if _dtype(x) == dtypes.bool_ or dtypes.kind(_dtype(x)) == "u":
        return x
    return lax.abs(x)


abs = absolute  # noqa: A001


def fabs(x, /):
    """Absolute value in floating point."""
    return lax.abs(_inexact_arg("fabs", x))


def sign(x, /):
    """-1, 0 or 1 by the sign of ``x`` (NaN stays NaN)."""
    x = _one_arg("sign", x)
    if _dtype(x) == dtypes.bool_:
        raise TypeError("sign does not accept dtype bool. Accepted dtypes are subtypes of "
                        "integer, floating, complexfloating.")
    if dtypes.kind(_dtype(x)) == "u":
        return _convert(lax.ne(x, _scalar_like(x, 0)), _dtype(x), _weak(x))
    return lax.sign(x)


def _int_identity_or(name, lax_fn):
    def fn(x, /):
        x = _one_arg(name, x)
        if not dtypes.is_inexact(_dtype(x)):
            return x
        return lax_fn(x)

    return _named(fn, name)


floor = _int_identity_or("floor", lax.floor)
floor.__doc__ = "Largest integer not above ``x`` (integers are returned as they are)."
ceil = _int_identity_or("ceil", lax.ceil)
ceil.__doc__ = "Smallest integer not below ``x`` (integers are returned as they are)."


def rint(x, /):
    """Round to the nearest integer, halves to even (integers compute in float; complex
    values round each part)."""
    x = _one_arg("rint", x)
    if not dtypes.is_inexact(_dtype(x)):
        return _convert(x, dtypes.default_float_dtype())
    if dtypes.kind(_dtype(x)) == "c":
        return lax.complex(lax.round(lax.real(x), 1), lax.round(lax.imag(x), 1))
    return lax.round(x, 1)


def trunc(x, /):
    """Round towards zero."""
    x = _one_arg("trunc", x)
    if not dtypes.is_inexact(_dtype(x)):
        return x
    return lax.select(lax.lt(x, _scalar_like(x, 0)), lax.ceil(x), lax.floor(x))


def fix(x, out=None):
    """Round towards zero."""
    return trunc(x)


def round(a, decimals=0, out=None):
    """Round to ``decimals`` decimals, halves to even (as NumPy; complex values round each
    part)."""
    a = _one_arg("round", a)
    decimals = _static_int(decimals, "decimals")
    d = _dtype(a)
    if dtypes.kind(d) == "c":
        return lax.complex(round(lax.real(a), decimals), round(lax.imag(a), decimals))
    if d == dtypes.bool_:
        raise ValueError(f"data type {d.type} not inexact")
    if not dtypes.is_inexact(d):
        if decimals >= 0:
            return a
        factor = _scalar_like(a, 10 ** -decimals)
        fa = _convert(a, dtypes.default_float_dtype())
        fac = lax.convert_element_type(factor, _dtype(fa))
        return _convert(lax.mul(lax.round(lax.div(fa, fac), 1), fac), d, _weak(a))
    if decimals == 0:
        return lax.round(a, 1)
    factor = _scalar_like(a, 10.0 ** decimals)
    return lax.div(lax.round(lax.mul(a, factor), 1), factor)


around = round


def square(x, /):
    """``x * x``."""
    x = _one_arg("square", x)
    if _dtype(x) == dtypes.bool_:
        x = _convert(x, dtypes.int32, _weak(x))
    return lax.square(x)


def _binary(name, promote, lax_fn, doc, bool_fn=None):
    inexact = promote is _promote_args_inexact

    def fn(x1, x2, /):
        ready = _operands_without_promotion(x1, x2, inexact)
        if ready is not None:
            return lax_fn(*ready)
        x1, x2 = promote(name, x1, x2)
        if bool_fn is not None and _dtype(x1) == dtypes.bool_:
            return bool_fn(x1, x2)
        return lax_fn(x1, x2)

    return _named(fn, name, doc)


add = _binary("add", _promote_args, lax.add, "Elementwise ``x1 + x2`` (NumPy broadcasting).",
              lax.bitwise_or)
multiply = _binary("multiply", _promote_args, lax.mul, "Elementwise ``x1 * x2``.",
                   lax.bitwise_and)
arctan2 = _binary("arctan2", _promote_args_inexact, lax.atan2,
                  "Angle of the point ``(x2, x1)``, elementwise.")
atan2 = arctan2
nextafter = _binary("nextafter", _promote_args_inexact, lax.nextafter,
                    "Next representable value after ``x1`` towards ``x2``.")


def subtract(x1, x2, /):
    """Elementwise ``x1 - x2``."""
    ready = _operands_without_promotion(x1, x2)
    if ready is not None:
        return lax.sub(*ready)
    x1, x2 = _promote_args("subtract", x1, x2)
    if _dtype(x1) == dtypes.bool_:
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the "
                        "bitwise_xor, the `^` operator, or the logical_xor function instead.")
    return lax.sub(x1, x2)


def true_divide(x1, x2, /):
    """Elementwise ``x1 / x2``; integers divide in floating point."""
    ready = _operands_without_promotion(x1, x2, inexact=True)
    if ready is not None:
        return lax.div(*ready)
    x1, x2 = _promote_args_inexact("true_divide", x1, x2)
    return lax.div(x1, x2)


divide = true_divide


def floor_divide(x1, x2, /):
    """Elementwise ``x1 // x2`` with Python's rounding towards minus infinity."""
    x1, x2 = _promote_args_numeric("floor_divide", x1, x2)
    d = _dtype(x1)
    if dtypes.kind(d) == "u":
        return lax.div(x1, x2)
    if dtypes.kind(d) == "i":
        # As JAX: by signs, so that x // 0 is XLA's quotient (-1) adjusted down (-2 for x > 0)
        q = lax.div(x1, x2)
        zero = _scalar_like(x1, 0)
        r = lax.rem(x1, x2)
        fix_down = lax.bitwise_and(lax.ne(r, zero), lax.ne(lax.sign(x1), lax.sign(x2)))
        return lax.select(fix_down, lax.sub(q, _scalar_like(q, 1)), q)
    return _float_divmod(x1, x2)[0]


def _float_divmod(x1, x2):
    mod = lax.rem(x1, x2)
    div = lax.div(lax.sub(x1, mod), x2)
    zero = _scalar_like(mod, 0)
    fix_sign = lax.bitwise_and(lax.ne(mod, zero), lax.ne(lax.lt(x2, zero), lax.lt(mod, zero)))
    mod = lax.select(fix_sign, lax.add(mod, _bcast_like(x2, mod)), mod)
    div = lax.select(fix_sign, lax.sub(div, _scalar_like(div, 1)), div)
    return lax.round(div, 1), mod


def remainder(x1, x2, /):
    """Elementwise remainder with the sign of the divisor (Python's ``%``)."""
    x1, x2 = _promote_args_numeric("remainder", x1, x2)
    x2 = _nonzero_integer_divisor(x2)
    if dtypes.kind(_dtype(x1)) == "u":
        return lax.rem(x1, x2)
    r = lax.rem(x1, x2)
    zero = _scalar_like(r, 0)
    fix_sign = lax.bitwise_and(lax.ne(r, zero), lax.ne(lax.lt(r, zero), lax.lt(x2, zero)))
    return lax.select(fix_sign, lax.add(r, _bcast_like(x2, r)), r)


mod = remainder


def fmod(x1, x2, /):
    """Elementwise remainder with the sign of the dividend (C's ``fmod``)."""
    x1, x2 = _promote_args_numeric("fmod", x1, x2)
    return lax.rem(x1, _nonzero_integer_divisor(x2))


def _nonzero_integer_divisor(x2):
    """An integer divisor with its zeros replaced by ones: as JAX, ``x % 0`` is 0."""
    if dtypes.kind(_dtype(x2)) not in "iu":
        return x2
    one = lax.full_like(x2, 1)
    return lax.select(lax.eq(x2, lax.full_like(x2, 0)), one, x2)


def divmod(x1, x2, /):  # noqa: A001
    """``(floor_divide(x1, x2), remainder(x1, x2))``."""
    return floor_divide(x1, x2), remainder(x1, x2)


def _static_int_exponent(x2):
    """The Python int of a static integer exponent, or None."""
    if isinstance(x2, Tracer):
        return None
    if isinstance(x2, builtins.bool):
        return None
    if isinstance(x2, int):
        return x2
    if isinstance(x2, (Array, np.ndarray, np.generic)) and np.ndim(x2) == 0 and \
            dtypes.kind(np.asarray(x2).dtype) in "iu":
        return int(np.asarray(x2))
    return None


def power(x1, x2, /):
    """Elementwise ``x1 ** x2``; a static integer exponent uses repeated multiplication."""
    _check_arraylike("power", x1, x2)
    y = _static_int_exponent(x2)
    if y is not None:
        x1 = _promote_dtypes_numeric(x1)[0]
        return lax.integer_pow(x1, y)
    (d1, w1), (d2, w2) = _dtype_and_weak(x1), _dtype_and_weak(x2)
    if dtypes.is_inexact(d1) and dtypes.is_integer(d2):
        # a floating base keeps its dtype under an integer exponent (as JAX)
        return lax.pow(*_promote_shapes("power", _convert(x1, d1, w1), _convert(x2, d2, w2)))
    x1, x2 = _promote_args_numeric("power", x1, x2)
    if dtypes.is_integer(_dtype(x1)):
        return _integer_power(x1, x2)
    return lax.pow(x1, x2)


pow = power  # noqa: A001


def _integer_power(x1, x2):
    """Integer ``x1 ** x2`` for traced exponents: binary exponentiation over every bit of the
    exponent (exact, wrapping like NumPy); negative exponents give ``1 // x1 ** -x2``
    (1 and -1 keep their magnitude, other bases give 0)."""
    s = broadcast_shapes(_shape(x1), _shape(x2))
    x1, x2 = _broadcast_to_shape(x1, s), _broadcast_to_shape(x2, s)
    d = _dtype(x1)
    zero, two = _const(x2, 0), _const(x2, 2)
    negative_exp = lax.lt(x2, zero)
    e_ = lax.select(negative_exp, lax.neg(x2), x2) if dtypes.kind(_dtype(x2)) == "i" else x2
    acc = lax.full(s, 1, d)
    base = x1
    for _ in range(8 * _dtype(x2).itemsize):
        odd = lax.ne(lax.rem(e_, two), zero)
        acc = lax.select(odd, lax.mul(acc, base), acc)
        base = lax.mul(base, base)
        e_ = lax.div(e_, two)
    if dtypes.kind(_dtype(x2)) == "i":
        unit = lax.eq(lax.abs(x1) if dtypes.kind(d) == "i" else x1, lax.full((), 1, d))
        acc = lax.select(negative_exp, lax.select(unit, acc, lax.full(s, 0, d)), acc)
    return _convert(acc, d, _weak(x1))


def float_power(x1, x2, /):
    """``x1 ** x2`` computed in floating point."""
    x1, x2 = _promote_args_inexact("float_power", x1, x2)
    return lax.pow(x1, x2)


def maximum(x1, x2, /):
    """Elementwise maximum (NaN propagates)."""
    if _scalar_operand_fits(x1, x2):
        return lax.max(x1, x2)
    x1, x2 = _promote_args("maximum", x1, x2)
    return lax.max(x1, x2)


def minimum(x1, x2, /):
    """Elementwise minimum (NaN propagates)."""
    if _scalar_operand_fits(x1, x2):
        return lax.min(x1, x2)
    x1, x2 = _promote_args("minimum", x1, x2)
    return lax.min(x1, x2)


def fmax(x1, x2):
    """Elementwise maximum ignoring NaNs."""
    x1, x2 = _promote_args("fmax", x1, x2)
    x1, x2 = _bcast_pair(x1, x2)
    return where(isnan(x1), x2, where(isnan(x2), x1, lax.max(x1, x2)))


def fmin(x1, x2):
    """Elementwise minimum ignoring NaNs."""
    x1, x2 = _promote_args("fmin", x1, x2)
    x1, x2 = _bcast_pair(x1, x2)
    return where(isnan(x1), x2, where(isnan(x2), x1, lax.min(x1, x2)))


def hypot(x1, x2, /):
    """``sqrt(x1**2 + x2**2)`` without overflow or underflow in the squares."""
    x1, x2 = _promote_args_inexact("hypot", x1, x2)
    if dtypes.kind(_dtype(x1)) == "c":
        raise ValueError("jnp.hypot is not well defined for complex-valued inputs. Please "
                         "convert to real values first, such as by using abs(x)")
    x1, x2 = _bcast_pair(lax.abs(x1), lax.abs(x2))
    big, small = lax.max(x1, x2), lax.min(x1, x2)
    zero = _scalar_like(big, 0)
    is_zero = lax.eq(big, zero)
    safe_big = lax.select(is_zero, lax.full_like(big, 1), big)
    ratio = lax.div(small, safe_big)
    r = lax.mul(safe_big, lax.sqrt(lax.add(_scalar_like(ratio, 1), lax.square(ratio))))
    r = lax.select(is_zero, lax.full_like(r, 0), r)
    return where(lax.eq(big, _const(big, np.inf)), _lax_const(big, np.inf), r)


def logaddexp(x1, x2, /):
    """``log(exp(x1) + exp(x2))`` without overflow."""
    x1, x2 = _promote_args_inexact("logaddexp", x1, x2)
    x1, x2 = _bcast_pair(x1, x2)
    amax = lax.max(x1, x2)
    if dtypes.kind(_dtype(x1)) == "c":
        return _complex_logaddexp(x1, x2, amax, lax.exp, 1.0)
    delta = lax.sub(x1, x2)
    nan_delta = lax.ne(delta, delta)
    safe_delta = lax.select(nan_delta, lax.full_like(delta, 0), delta)
    out = lax.add(amax, lax.log1p(lax.exp(lax.neg(lax.abs(safe_delta)))))
    return lax.select(nan_delta, lax.add(x1, x2), out)


def logaddexp2(x1, x2, /):
    """``log2(2**x1 + 2**x2)`` without overflow."""
    x1, x2 = _promote_args_inexact("logaddexp2", x1, x2)
    x1, x2 = _bcast_pair(x1, x2)
    amax = lax.max(x1, x2)
    if dtypes.kind(_dtype(x1)) == "c":
        return _complex_logaddexp(x1, x2, amax, lax.exp2, 1 / np.log(2))
    delta = lax.sub(x1, x2)
    nan_delta = lax.ne(delta, delta)
    safe_delta = lax.select(nan_delta, lax.full_like(delta, 0), delta)
    tail = lax.log1p(lax.exp2(lax.neg(lax.abs(safe_delta))))
    out = lax.add(amax, lax.mul(_lax_const(amax, 1 / np.log(2)), tail))
    return lax.select(nan_delta, lax.add(x1, x2), out)


def _complex_logaddexp(x1, x2, amax, exp_fn, scale):
    """``amax + scale log1p(exp_fn(x1 + x2 - 2 amax))`` (``amax`` the lexicographic maximum),
    its imaginary part wrapped into ``[-pi scale, pi scale]``, as JAX computes it."""
    delta = lax.sub(lax.add(x1, x2), lax.mul(amax, _lax_const(amax, 2)))
    out = lax.add(amax, lax.mul(_lax_const(amax, scale), lax.log1p(exp_fn(delta))))
    im = lax.imag(out)
    half = _lax_const(im, np.pi * scale)
    wrapped = lax.rem(lax.add(im, half), lax.mul(half, _lax_const(im, 2)))
    wrapped = lax.select(lax.lt(wrapped, _lax_const(im, 0)),
                         lax.add(wrapped, lax.mul(half, _lax_const(im, 2))), wrapped)
    return lax.complex(lax.real(out), lax.sub(wrapped, half))


def copysign(x1, x2, /):
    """The magnitude of ``x1`` with the sign of ``x2``."""
    x1, x2 = _promote_args_inexact("copysign", x1, x2)
    x1, x2 = _bcast_pair(x1, x2)
    return where(signbit(x2), lax.neg(lax.abs(x1)), lax.abs(x1))


def heaviside(x1, x2, /):
    """0 where ``x1 < 0``, ``x2`` where ``x1 == 0``, 1 where ``x1 > 0``."""
    x1, x2 = _promote_args_inexact("heaviside", x1, x2)
    zero = _lax_const(x1, 0)
    return where(lax.lt(x1, zero), zero, where(lax.gt(x1, zero), _lax_const(x1, 1), x2))


def clip(arr=None, /, min=None, max=None, *, a=None, a_min=None, a_max=None):  # noqa: A002
    """``arr`` limited to ``[min, max]`` (either bound may be None)."""
    if arr is None:
        arr = a
    if min is None:
        min = a_min  # noqa: A001
    if max is None:
        max = a_max  # noqa: A001
    _check_arraylike("clip", arr)
    if any(v is not None and dtypes.kind(_dtype_and_weak(v)[0]) == "c" for v in (arr, min, max)):
        raise ValueError("Clip received a complex value either through the input or the "
                         "min/max keywords. Complex values have no ordering and cannot be "
                         "clipped. Please convert to a real value or array by taking the real "
                         "or imaginary components via jax.numpy.real/imag respectively.")
    if min is not None:
        arr = maximum(min, arr)
    if max is not None:
        arr = minimum(max, arr)
    return _arr(arr)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """``x`` with NaN, +inf and -inf replaced by finite numbers."""
    _check_arraylike("nan_to_num", x)
    x = _arr(x)
    d = _dtype(x)
    if not dtypes.is_inexact(d):
        return x
    info = dtypes.finfo(d)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    x = _convert(x, d)
    out = where(isnan(x), _convert(_arr(nan), d), x)
    out = where(isposinf(out), _convert(_arr(posinf), d), out)
    return where(isneginf(out), _convert(_arr(neginf), d), out)


def conjugate(x, /):
    """Complex conjugate (the identity on real values)."""
    x = _one_arg("conjugate", x)
    return lax.conj(x) if dtypes.kind(_dtype(x)) == "c" else x


conj = conjugate


def real(val, /):
    """The real part (the identity on real values)."""
    val = _one_arg("real", val)
    return lax.real(val) if dtypes.kind(_dtype(val)) == "c" else val


def imag(val, /):
    """The imaginary part (zeros for real values)."""
    val = _one_arg("imag", val)
    return lax.imag(val) if dtypes.kind(_dtype(val)) == "c" else lax.full_like(val, 0)


def sinc(x, /):
    """``sin(pi x) / (pi x)``, 1 at 0."""
    x = _inexact_arg("sinc", x)
    zero = lax.eq(x, _lax_const(x, 0))
    safe = lax.select(zero, lax.full_like(x, 1), x)
    pix = lax.mul(safe, _lax_const(x, np.pi))
    return lax.select(zero, lax.full_like(x, 1), lax.div(lax.sin(pix), pix))


def iscomplex(x):
    """Whether each element has a nonzero imaginary part (all False for real arrays)."""
    i = imag(x)
    return lax.ne(i, _lax_const(i, 0))


def isreal(x):
    """Whether each element has a zero imaginary part (all True for real arrays)."""
    i = imag(x)
    return lax.eq(i, _lax_const(i, 0))


def angle(z, deg=False):
    """The argument of ``z``: ``atan2(imag, real)``, so 0 or pi for real values (pi for
    negative ones and -0.0); integers and real scalars compute in the default float."""
    _check_arraylike("angle", z)
    z = _arr(z)
    re, im = real(z), imag(z)
    d = _dtype(re)
    if not dtypes.is_inexact(d) or (dtypes.kind(_dtype(z)) != "c" and z.ndim == 0):
        d = dtypes.default_float_dtype()
        re, im = _convert(re, d), _convert(im, d)
    out = lax.atan2(im, re)
    return rad2deg(out) if deg else out


def modf(x, /, out=None):
    """The fractional and integral parts of ``x`` (both with its sign)."""
    x = _inexact_arg("modf", x)
    whole = lax.select(lax.ge(x, _lax_const(x, 0)), lax.floor(x), lax.ceil(x))
    return lax.sub(x, whole), whole


def _real_floating(name, x):
    x = _inexact_arg(name, x)
    if dtypes.kind(_dtype(x)) == "c":
        raise TypeError(f"{name} does not support complex-valued inputs")
    return x


def _times_power_of_two(x, e):
    """``x * 2**e`` for an integer-valued float ``e``, as two exact power-of-two factors so
    that neither overflows; ``e`` is first clamped to the span over which scaling any value
    of the dtype (subnormals included) can still change between zero, finite and inf."""
    info = dtypes.finfo(_dtype(x))
    span = int(info.maxexp) + int(info.nmant) + 2
    e = lax.clamp(_lax_const(e, -span), e, _lax_const(e, span))
    half = lax.floor(lax.mul(e, _lax_const(e, 0.5)))
    return lax.mul(lax.mul(x, lax.exp2(half)), lax.exp2(lax.sub(e, half)))


def _compute_dtype(d):
    """float16 (whose powers of two run out early) scales in float32."""
    return dtypes.float32 if np.dtype(d).itemsize < 4 else np.dtype(d)


def frexp(x, /):
    """``(mantissa, exponent)`` with ``x == mantissa * 2**exponent`` and ``0.5 <= |mantissa|
    < 1`` (zeros, infinities and NaN keep ``x`` with exponent 0); the exponent is int32."""
    _check_arraylike("frexp", x)
    x = _real_floating("frexp", x)
    d, weak = _dtype(x), _weak(x)
    xc = _convert(x, _compute_dtype(d))
    a = lax.abs(xc)
    regular = lax.bitwise_and(lax.is_finite(xc), lax.ne(xc, _lax_const(xc, 0)))
    safe = lax.select(regular, a, lax.full_like(a, 1))
    e = lax.add(lax.floor(_log2(safe)), _lax_const(safe, 1))
    m = _times_power_of_two(safe, lax.neg(e))
    # log2 may round across a power of two: one correction step puts m in [0.5, 1)
    too_big = lax.ge(m, _lax_const(m, 1))
    too_small = lax.lt(m, _lax_const(m, 0.5))
    m = lax.select(too_big, lax.mul(m, _lax_const(m, 0.5)),
                   lax.select(too_small, lax.mul(m, _lax_const(m, 2)), m))
    e = lax.select(too_big, lax.add(e, _lax_const(e, 1)),
                   lax.select(too_small, lax.sub(e, _lax_const(e, 1)), e))
    mantissa = lax.select(regular, lax.select(lax.lt(xc, _lax_const(xc, 0)), lax.neg(m), m),
                          xc)
    exponent = lax.select(regular, e, lax.full_like(e, 0))
    return _convert(mantissa, d, weak), _convert(exponent, dtypes.int32)


def _log2(x):
    return lax.div(lax.log(x), _lax_const(x, np.log(2)))


def ldexp(x1, x2, /):
    """``x1 * 2**x2`` for an integer ``x2``, exact wherever the result is representable
    (the mantissa and exponent of ``x1`` are split off first, so no step overflows)."""
    _check_arraylike("ldexp", x1, x2)
    (d1, _), (d2, _) = _dtype_and_weak(x1), _dtype_and_weak(x2)
    if dtypes.kind(d1) == "c" or dtypes.kind(d2) in "fc":
        raise ValueError(f"ldexp not supported for input types {(d1, d2)}")
    x1 = _inexact_arg("ldexp", x1)
    x1, x2 = _promote_shapes("ldexp", x1, _arr(x2))
    d, weak = _dtype(x1), _weak(x1)
    cd = _compute_dtype(d)
    m, e = frexp(_convert(x1, cd))
    total = lax.add(_convert(e, cd), _convert(x2, cd))
    out = _times_power_of_two(m, total)
    x1c = _convert(x1, cd)
    keep = lax.bitwise_or(lax.bitwise_not(lax.is_finite(x1c)), lax.eq(x1c, _lax_const(x1c, 0)))
    out = lax.select(_bcast_like(keep, out), _bcast_like(x1c, out), out)
    return _convert(out, d, weak)


def spacing(x, /):
    """The distance from ``x`` to the next representable value away from zero (negative for
    negative ``x``; the smallest subnormal at zero), as ``np.spacing``."""
    (x,) = _promote_args_inexact("spacing", x)
    if dtypes.kind(_dtype(x)) == "c":
        raise ValueError("jnp.spacing is not defined for complex inputs.")
    if _dtype(x) == dtypes.float16:  # as JAX: towards +inf, whatever the sign
        return lax.sub(lax.nextafter(x, lax.full_like(x, np.inf)), x)
    d = _dtype(x)
    info = dtypes.finfo(d)
    far = np.inf if dtypes.supports_inf(d) else info.max  # float8_e4m3fn has no infinity
    toward = lax.select(signbit(x), lax.full_like(x, -far), lax.full_like(x, far))
    out = lax.sub(lax.nextafter(x, toward), x)
    tiny = info.smallest_subnormal
    smallest = lax.select(signbit(x), lax.full_like(x, -tiny), lax.full_like(x, tiny))
    out = lax.select(lax.eq(out, _lax_const(out, 0)), smallest, out)
    if far is np.inf:
        return out
    # beyond the largest value there is only NaN (NumPy's spacing on ml_dtypes says so too)
    return lax.select(lax.eq(lax.abs(x), lax.full_like(x, far)), lax.full_like(x, np.nan), out)


def _integer_pair(name, x1, x2):
    _check_arraylike(name, x1, x2)
    x1, x2 = _promote_args(name, x1, x2)
    if not dtypes.is_integer(_dtype(x1)):
        raise ValueError(f"Arguments to jax.numpy.{name} must be integers.")
    return _bcast_pair(x1, x2)


def _abs_int(x):
    return x if dtypes.kind(_dtype(x)) == "u" else lax.abs(x)


def gcd(x1, x2):
    """Greatest common divisor of ``|x1|`` and ``|x2|`` elementwise (Euclid's algorithm in a
    ``while_loop`` until every pair is done)."""
    x1, x2 = _integer_pair("gcd", x1, x2)
    zero = _lax_const(x1, 0)

    def not_done(carry):
        return lax.reduce_or(lax.ne(carry[1], zero), tuple(range(x1.ndim)))

    def step(carry):
        a, b = carry
        nonzero = lax.ne(b, zero)
        a, b = (lax.select(nonzero, b, a),
                lax.select(nonzero, lax.rem(a, lax.select(nonzero, b, lax.full_like(b, 1))),
                           lax.full_like(b, 0)))
        return lax.max(a, b), lax.min(a, b)

    a, b = _abs_int(x1), _abs_int(x2)
    return lax.while_loop(not_done, step, (lax.max(a, b), lax.min(a, b)))[0]


def lcm(x1, x2):
    """Least common multiple of ``|x1|`` and ``|x2|`` elementwise (0 when either is 0)."""
    x1, x2 = _integer_pair("lcm", x1, x2)
    x1, x2 = _abs_int(x1), _abs_int(x2)
    d = gcd(x1, x2)
    is_zero = lax.eq(d, _lax_const(d, 0))
    safe = lax.select(is_zero, lax.full_like(d, 1), d)
    return lax.select(is_zero, lax.full_like(d, 0), lax.mul(x1, lax.div(x2, safe)))


# Cephes' Chebyshev coefficients of exp(-x) I0(x), on [0, 8] and (8, inf) (as NumPy's i0).
_I0E_SMALL = (
    -4.4153416464793395e-18, 3.3307945188222384e-17, -2.431279846547955e-16,
    1.715391285555133e-15, -1.1685332877993451e-14, 7.676185498604936e-14,
    -4.856446783111929e-13, 2.95505266312964e-12, -1.726826291441556e-11,
    9.675809035373237e-11, -5.189795601635263e-10, 2.6598237246823866e-09,
    -1.300025009986248e-08, 6.046995022541919e-08, -2.670793853940612e-07,
    1.1173875391201037e-06, -4.4167383584587505e-06, 1.6448448070728896e-05,
    -5.754195010082104e-05, 0.00018850288509584165, -0.0005763755745385824,
    0.0016394756169413357, -0.004324309995050576, 0.010546460394594998,
    -0.02373741480589947, 0.04930528423967071, -0.09490109704804764, 0.17162090152220877,
    -0.3046826723431984, 0.6767952744094761,
)

_I0E_LARGE = (
    -7.233180487874754e-18, -4.830504485944182e-18, 4.46562142029676e-17,
    3.461222867697461e-17, -2.8276239805165836e-16, -3.425485619677219e-16,
    1.7725601330565263e-15, 3.8116806693526224e-15, -9.554846698828307e-15,
    -4.150569347287222e-14, 1.54008621752141e-14, 3.8527783827421426e-13,
    7.180124451383666e-13, -1.7941785315068062e-12, -1.3215811840447713e-11,
    -3.1499165279632416e-11, 1.1889147107846439e-11, 4.94060238822497e-10,
    3.3962320257083865e-09, 2.266668990498178e-08, 2.0489185894690638e-07,
    2.8913705208347567e-06, 6.889758346916825e-05, 0.0033691164782556943, 0.8044904110141088,
)


def _chebyshev(t, coeffs):
    """Clenshaw's sum of the Chebyshev series ``coeffs`` at ``t`` (Cephes' ``chbevl``)."""
    b0, b1, b2 = _lax_const(t, coeffs[0]), _lax_const(t, 0), _lax_const(t, 0)
    for c in coeffs[1:]:
        b2, b1 = b1, b0
        b0 = lax.add(lax.sub(lax.mul(t, b1), b2), _lax_const(t, c))
    return lax.mul(lax.sub(b0, b2), _lax_const(t, 0.5))


def i0(x):
    """The modified Bessel function of the first kind, order 0: ``exp(|x|)`` times Cephes'
    Chebyshev approximation of ``exp(-|x|) I0(|x|)``; differentiable (0 slope at 0)."""
    (x,) = _promote_args_inexact("i0", x)
    if dtypes.kind(_dtype(x)) != "f":
        raise ValueError(f"Unsupported input type to jax.numpy.i0: {_dtype(x)}")
    a = lax.mul(x, lax.sign(x))  # |x| with slope 0 at 0 (lax.abs has slope 1 there, as JAX)
    eight = _lax_const(a, 8)
    small = lax.le(a, eight)
    a_small = lax.select(small, a, lax.full_like(a, 0))
    a_large = lax.select(small, lax.full_like(a, 16), a)
    near = _chebyshev(lax.sub(lax.mul(a_small, _lax_const(a, 0.5)), _lax_const(a, 2)),
                      _I0E_SMALL)
    far = lax.div(_chebyshev(lax.sub(lax.div(_lax_const(a, 32), a_large), _lax_const(a, 2)),
                             _I0E_LARGE), lax.sqrt(a_large))
    return lax.mul(lax.exp(a), lax.select(small, near, far))
