"""Elementwise primitives: unary math, binary arithmetic and comparisons, select_n, clamp,
convert_element_type — each with its impl, abstract eval, JVP, transpose and batching rules.

Operands of an elementwise primitive have equal shapes and dtypes, except that rank-0
operands broadcast against the others (so ``x * 2.0`` stages as ``mul a 2.0:f32[]``).
"""

import enum
import operator
import warnings

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, array_ops, batching
from remat.lax import rule_ops, special
from remat.lax.standard import (
    ANY,
    FLOAT,
    INEXACT,
    INT_OR_BOOL,
    NUMBER,
    REAL,
    as_operands,
    broadcasting_shape,
    check_dtype,
    check_same_dtypes,
    nary_abstract_eval,
    standard_primitive,
)
from remat.runtime import registry

__all__ = [
    "abs",
    "abs_p",
    "acos",
    "acos_p",
    "acosh",
    "acosh_p",
    "add",
    "add_p",
    "and_p",
    "asin",
    "asin_p",
    "asinh",
    "asinh_p",
    "atan",
    "atan2",
    "atan2_p",
    "atan_p",
    "atanh",
    "atanh_p",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "cbrt",
    "cbrt_p",
    "ceil",
    "ceil_p",
    "clamp",
    "clamp_p",
    "convert_element_type",
    "convert_element_type_p",
    "cos",
    "cos_p",
    "cosh",
    "cosh_p",
    "digamma",
    "digamma_p",
    "div",
    "div_p",
    "eq",
    "eq_p",
    "erf",
    "erf_inv",
    "erf_inv_p",
    "erf_p",
    "erfc",
    "erfc_p",
    "exp",
    "exp2",
    "exp2_p",
    "exp_p",
    "expm1",
    "expm1_p",
    "floor",
    "floor_p",
    "ge",
    "ge_p",
    "gt",
    "gt_p",
    "integer_pow",
    "integer_pow_p",
    "is_finite",
    "is_finite_p",
    "le",
    "le_p",
    "lgamma",
    "lgamma_p",
    "log",
    "log1p",
    "log1p_p",
    "log_p",
    "logistic",
    "logistic_p",
    "lt",
    "lt_p",
    "max",
    "max_p",
    "min",
    "min_p",
    "mul",
    "mul_p",
    "ne",
    "ne_p",
    "neg",
    "neg_p",
    "nextafter",
    "nextafter_p",
    "not_p",
    "or_p",
    "polygamma",
    "polygamma_p",
    "pow",
    "reciprocal",
    "pow_p",
    "rem",
    "rem_p",
    "RoundingMethod",
    "round",
    "round_p",
    "rsqrt",
    "rsqrt_p",
    "select",
    "select_n",
    "select_n_p",
    "sign",
    "sign_p",
    "sin",
    "sin_p",
    "sinh",
    "sinh_p",
    "sqrt",
    "sqrt_p",
    "square",
    "square_p",
    "sub",
    "sub_p",
    "tan",
    "tan_p",
    "tanh",
    "tanh_p",
    "xor_p",
]

_all = []


_FLOAT16 = np.dtype(np.float16)


def _float16_in_float32(ufunc):
    """``ufunc`` (unary) computing float16 in float32 and rounding once, as XLA's CPU backend
    does. NumPy's own float16 loops of these functions take CPU-specific paths (AVX-512 and
    AVX512-FP16 kernels where the CPU has them, a float32 loop elsewhere), which round
    differently from machine to machine. Called as a ufunc is by the executor (``out=``,
    ``casting=``; ``resolve_dtypes``), so it still runs in place."""

    def call(x, out=None, casting="same_kind"):
        if getattr(x, "dtype", None) is not _FLOAT16:
            return ufunc(x, out=out, casting=casting)
        y = ufunc(x, out=out, casting=casting, dtype=np.float32)
        return y if out is not None else y.astype(_FLOAT16)

    call.ufunc, call.nout, call.resolve_dtypes = ufunc, ufunc.nout, ufunc.resolve_dtypes
    call.__name__ = call.__qualname__ = ufunc.__name__
    return call


def _register_elementwise(prim, impl):
    """The executor may split large steps of an elementwise primitive across its workers;
    a ufunc impl may also write into a dying input's buffer."""
    ufunc = impl if isinstance(impl, np.ufunc) or hasattr(impl, "ufunc") else None
    registry.elementwise_impls[prim] = (prim.impl, ufunc)
    registry.scalar_broadcasting.add(prim)


def _unop(name, impl, accepted):
    prim = standard_primitive(name, impl,
                              nary_abstract_eval(name, accepted))
    batching.defvectorized(prim)
    _register_elementwise(prim, impl)
    return prim


def _nextafter(x, y):
    """``np.nextafter``, which in float16 returns ``x`` where ``x == y`` (so -0.0 towards
    0.0 stays -0.0); C, XLA and JAX return ``y`` there."""
    out = np.nextafter(x, y)
    return np.where(x == y, y, out) if out.dtype == np.float16 else out


def _binop(name, impl, accepted, result_dtype=None):
    prim = standard_primitive(name, impl,
                              nary_abstract_eval(name, accepted, result_dtype))
    batching.broadcast_batcher(prim)
    _register_elementwise(prim, impl)
    return prim


def _bcast(t, aval):
    """Broadcast a rank-0 tangent contribution to the output's shape."""
    if core.get_aval(t).shape == aval.shape:
        return t
    return rule_ops.broadcast_in_dim(t, aval.shape, ())


def _unbroadcast(aval, ct):
    """The cotangent of a rank-0 operand that was broadcast against larger operands."""
    if core.get_aval(ct).shape == aval.shape:
        return ct
    return rule_ops.reduce_sum(ct, tuple(range(core.get_aval(ct).ndim)))


def _defjvp_broadcasting(prim, *rules):
    """``ad.defjvp`` for n-ary ops whose rank-0 operands broadcast."""

    def wrap(rule):
        if rule is None:
            return None

        def broadcast_rule(g, *primals, **params):
            out_shape = broadcasting_shape(prim.name, [core.get_aval(p) for p in primals])
            t = rule(g, *primals, **params)
            aval = core.get_aval(t)
            if aval.shape != out_shape:
                return rule_ops.broadcast_in_dim(t, out_shape, ())
            # (the user's tangent passed through, add's: an Array, as JAX's jnp makes it when
            # it converts the operand: jvp(lambda x: x + 1, (1.0,), (1.0,)))
            return core.array_of_value(t)

        return broadcast_rule

    ad.defjvp(prim, *(wrap(r) for r in rules))


# --- unary -----------------------------------------------------------------------------------

neg_p = _unop("neg", np.negative, NUMBER)


def _sign_impl(x):
    # np.sign(-0.0) is +0.0; JAX keeps the sign of a zero
    return np.where(x == 0, x, np.sign(x)) if dtypes.kind(x.dtype) == "f" else np.sign(x)


sign_p = _unop("sign", _sign_impl, NUMBER)
floor_p = _unop("floor", np.floor, FLOAT)
ceil_p = _unop("ceil", np.ceil, FLOAT)
is_finite_p = standard_primitive(
    "is_finite", np.isfinite, lambda x: (check_dtype("is_finite", x, FLOAT),
                                         ShapedArray(x.shape, dtypes.bool_, x.weak_type))[1])
batching.defvectorized(is_finite_p)
_exp, _sin, _cos, _tan, _tanh = map(_float16_in_float32, (np.exp, np.sin, np.cos, np.tan, np.tanh))
exp_p = _unop("exp", _exp, INEXACT)
exp2_p = _unop("exp2", _float16_in_float32(np.exp2), INEXACT)
log_p = _unop("log", _float16_in_float32(np.log), INEXACT)
log1p_p = _unop("log1p", _float16_in_float32(np.log1p), INEXACT)
expm1_p = _unop("expm1", _float16_in_float32(np.expm1), INEXACT)
tanh_p = _unop("tanh", _tanh, INEXACT)


def _logistic_impl(x):
    """``1 / (1 + exp(-x))``, as XLA expands it, in one buffer: four passes. Where ``exp(-x)``
    overflows the result is below the smallest normal float of every real type (flushed to
    zero inside plans anyway), so nothing representable is lost."""
    t = np.negative(x)
    if type(t) is not np.ndarray or dtypes.kind(x.dtype) == "c":
        return 1 / (1 + _exp(t))
    _exp(t, out=t)
    t += 1
    return np.reciprocal(t, out=t)


logistic_p = _unop("logistic", _logistic_impl, INEXACT)
sin_p = _unop("sin", _sin, INEXACT)
cos_p = _unop("cos", _cos, INEXACT)
tan_p = _unop("tan", _tan, INEXACT)
asin_p = _unop("asin", _float16_in_float32(np.arcsin), INEXACT)
acos_p = _unop("acos", _float16_in_float32(np.arccos), INEXACT)
atan_p = _unop("atan", _float16_in_float32(np.arctan), INEXACT)
sinh_p = _unop("sinh", _float16_in_float32(np.sinh), INEXACT)
cosh_p = _unop("cosh", _float16_in_float32(np.cosh), INEXACT)
asinh_p = _unop("asinh", _float16_in_float32(np.arcsinh), INEXACT)
acosh_p = _unop("acosh", _float16_in_float32(np.arccosh), INEXACT)
atanh_p = _unop("atanh", _float16_in_float32(np.arctanh), INEXACT)
sqrt_p = _unop("sqrt", np.sqrt, INEXACT)  # (correctly rounded in every dtype)


def _rsqrt_impl(x):
    """``1 / sqrt(x)``; the narrow floats (float16, bfloat16, float8) in float32, rounded
    once, as XLA computes its rsqrt."""
    if x.dtype.itemsize < 4 and dtypes.kind(x.dtype) == "f":
        return np.reciprocal(np.sqrt(x.astype(np.float32))).astype(x.dtype)
    return np.reciprocal(np.sqrt(x))


rsqrt_p = _unop("rsqrt", _rsqrt_impl, INEXACT)
cbrt_p = _unop("cbrt", _float16_in_float32(np.cbrt), FLOAT)
abs_p = standard_primitive(  # no unsigned integers, as in JAX (jnp.abs returns them as they are)
    "abs", np.abs,
    lambda x: (check_dtype("abs", x, ("signedinteger", "floating", "complexfloating")),
               x.update(dtype=dtypes.finfo(x.dtype).dtype if dtypes.kind(x.dtype) == "c"
                        else x.dtype))[1])
batching.defvectorized(abs_p)
erf_p = _unop("erf", special.erf, FLOAT)
erfc_p = _unop("erfc", special.erfc, FLOAT)
erf_inv_p = _unop("erf_inv", special.erf_inv, FLOAT)
lgamma_p = _unop("lgamma", special.lgamma, FLOAT)
digamma_p = _unop("digamma", special.digamma, FLOAT)
square_p = _unop("square", np.square, NUMBER)
not_p = _unop("not", np.invert, INT_OR_BOOL)


def _round_impl(x, rounding_method=0):
    if rounding_method == 0:  # away from zero: only exact halves move (|x| + 0.5 would round
        t = np.trunc(x)       # up 0.49999997 and the odd integers beyond 2**23)
        with np.errstate(invalid="ignore"):
            return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)
    return np.round(x)


round_p = standard_primitive("round", _round_impl,
                             lambda x, rounding_method: nary_abstract_eval("round", FLOAT)(x))
batching.defvectorized(round_p)


def _integer_pow_impl(x, y):
    """Repeated squaring with multiplications: much faster than ``np.power`` for floats."""
    n = -y if y < 0 else y  # (the builtin abs is shadowed by lax.abs here)
    if n == 0:
        return np.ones_like(x)
    acc, base = None, x
    while n:
        if n & 1:
            acc = base if acc is None else acc * base
        n >>= 1
        if n:
            base = base * base
    if acc is x:
        acc = np.array(x)
    return np.reciprocal(acc) if y < 0 else acc


def _integer_pow_abstract_eval(x, y):
    check_dtype("integer_pow", x, NUMBER)
    if y < 0 and dtypes.kind(x.dtype) in "iu":
        raise TypeError(f"integer_pow got a negative exponent {y} for integer dtype "
                        f"{x.dtype.name}")
    return x


integer_pow_p = standard_primitive("integer_pow", _integer_pow_impl,
                                   _integer_pow_abstract_eval)
_register_elementwise(integer_pow_p, _integer_pow_impl)
batching.defvectorized(integer_pow_p)

polygamma_p = _binop("polygamma", special.polygamma, FLOAT)


def _abs_jvp(g, ans, x):
    """``g`` or ``-g`` by the sign of a real ``x`` (``g`` at 0, as JAX); for a complex ``x``
    the real part of ``g conj(x) / |x|`` (0 at 0)."""
    if dtypes.kind(core.get_aval(x).dtype) != "c":
        return select(ge(x, rule_ops.full_like(x, 0)), g, neg(g))
    mag = convert_element_type_p.bind(ans, new_dtype=core.get_aval(x).dtype,
                                      weak_type=core.get_aval(x).weak_type)
    safe = select(eq(mag, rule_ops.full_like(mag, 0)), rule_ops.full_like(mag, 1), mag)
    return rule_ops.real(mul(g, div(rule_ops.conj(x), safe)))


def _acosh_jvp(g, x):
    """``g / sqrt(x^2 - 1)`` for real ``x`` (as JAX); for complex ``x`` the derivative of the
    principal branch, ``g / (sqrt(x - 1) sqrt(x + 1))`` (``1 / sqrt(x^2 - 1)``, JAX's rule,
    has the wrong sign where ``Re(x) < 0``)."""
    if dtypes.kind(core.get_aval(x).dtype) == "c":
        return mul(g, mul(rsqrt(sub(x, 1.0)), rsqrt(add(x, 1.0))))
    return mul(g, rsqrt(mul(sub(x, 1.0), add(x, 1.0))))


def _unary_jvps():
    ad.deflinear(neg_p, lambda ct: [neg(ct)])
    for p in (sign_p, floor_p, ceil_p, round_p, is_finite_p, not_p):
        ad.defjvp_zero(p)
    ad.defjvp2(exp_p, lambda g, ans, x: mul(g, ans))
    ad.defjvp2(exp2_p, lambda g, ans, x: mul(g, mul(ans, float(np.log(2.0)))))
    ad.defjvp(log_p, lambda g, x: div(g, x))
    ad.defjvp(log1p_p, lambda g, x: div(g, add(x, 1.0)))
    ad.defjvp2(expm1_p, lambda g, ans, x: mul(g, add(ans, 1.0)))
    ad.defjvp2(tanh_p, lambda g, ans, x: mul(g, sub(1.0, square(ans))))
    ad.defjvp2(logistic_p, lambda g, ans, x: mul(g, mul(ans, sub(1.0, ans))))
    ad.defjvp(sin_p, lambda g, x: mul(g, cos(x)))
    ad.defjvp(cos_p, lambda g, x: neg(mul(g, sin(x))))
    ad.defjvp2(tan_p, lambda g, ans, x: mul(g, add(1.0, square(ans))))
    ad.defjvp(asin_p, lambda g, x: mul(g, rsqrt(sub(1.0, square(x)))))
    ad.defjvp(acos_p, lambda g, x: neg(mul(g, rsqrt(sub(1.0, square(x))))))
    ad.defjvp(atan_p, lambda g, x: div(g, add(1.0, square(x))))
    ad.defjvp(sinh_p, lambda g, x: mul(g, cosh(x)))
    ad.defjvp(cosh_p, lambda g, x: mul(g, sinh(x)))
    ad.defjvp(asinh_p, lambda g, x: mul(g, rsqrt(add(square(x), 1.0))))
    ad.defjvp(acosh_p, _acosh_jvp)
    ad.defjvp(atanh_p, lambda g, x: div(g, sub(1.0, square(x))))
    ad.defjvp2(sqrt_p, lambda g, ans, x: div(g, mul(ans, 2.0)))
    ad.defjvp2(rsqrt_p, lambda g, ans, x: mul(g, mul(div(ans, x), -0.5)))
    ad.defjvp2(cbrt_p, lambda g, ans, x: mul(g, div(ans, mul(x, 3.0))))
    ad.defjvp2(abs_p, _abs_jvp)
    ad.defjvp(erf_p, lambda g, x: mul(g, mul(2.0 / np.sqrt(np.pi),
                                             exp(neg(square(x))))))
    ad.defjvp(erfc_p, lambda g, x: mul(g, mul(-2.0 / np.sqrt(np.pi),
                                              exp(neg(square(x))))))
    ad.defjvp2(erf_inv_p, lambda g, ans, x: mul(g, mul(np.sqrt(np.pi) / 2.0,
                                                       exp(square(ans)))))
    ad.defjvp(lgamma_p, lambda g, x: mul(g, digamma(x)))
    ad.defjvp(digamma_p, lambda g, x: mul(g, polygamma(rule_ops.full_like(x, 1), x)))
    ad.defjvp(square_p, lambda g, x: mul(g, mul(x, 2.0)))
    _defjvp_broadcasting(polygamma_p, None,
                         lambda g, m, x: mul(g, polygamma(add(m, 1.0), x)))

    def integer_pow_jvp(primals, tangents, y):
        (x,), (g,) = primals, tangents
        if y in (0, 1) or y < 0:
            out = integer_pow_p.bind(x, y=y)
            if y == 0:
                return out, rule_ops.full_like(g, 0)
            if y == 1:
                return out, g
            return out, mul(g, mul(float(y), div(out, x)))
        # x**(y-1) serves both the primal (times x) and the tangent: one pass fewer
        below = x if y == 2 else integer_pow_p.bind(x, y=y - 1)
        return mul(below, x), mul(g, mul(float(y), below))

    ad.primitive_jvps[integer_pow_p] = integer_pow_jvp


# --- binary ----------------------------------------------------------------------------------


def _int_div(x, y):
    """Integer division rounds toward zero; ``x / 0`` is all ones (-1, or the unsigned
    maximum), as XLA computes it in JAX."""
    if dtypes.kind(x.dtype) == "u":
        zero = y == 0
        return np.where(zero, ~np.zeros((), x.dtype), x // np.where(zero, 1, y)).astype(x.dtype)
    if dtypes.kind(x.dtype) == "i":
        q = np.floor_divide(x, np.where(y == 0, 1, y))
        fix = (np.remainder(x, np.where(y == 0, 1, y)) != 0) & ((x < 0) != (y < 0))
        return np.where(y == 0, ~np.zeros((), x.dtype), q + fix.astype(q.dtype)).astype(x.dtype)
    return np.true_divide(x, y)


def _rem_impl(x, y):
    """C's fmod; for integers ``x % 0`` is ``x``, as XLA computes it in JAX."""
    if dtypes.kind(x.dtype) in "iu":
        return np.where(y == 0, x, np.fmod(x, np.where(y == 0, 1, y))).astype(x.dtype)
    return np.fmod(x, y)


def _pow_abstract_eval(x, y):
    check_dtype("pow", x, INEXACT)
    if dtypes.kind(y.dtype) not in "iu":
        check_same_dtypes("pow", [x, y])
    return ShapedArray(broadcasting_shape("pow", [x, y]), x.dtype, x.weak_type and y.weak_type)


add_p = _binop("add", np.add, NUMBER)
sub_p = _binop("sub", np.subtract, NUMBER)
mul_p = _binop("mul", np.multiply, NUMBER)  # no booleans, as in JAX
div_p = _binop("div", _int_div, NUMBER)
rem_p = _binop("rem", _rem_impl, REAL)
pow_p = standard_primitive("pow", np.power, _pow_abstract_eval)
batching.broadcast_batcher(pow_p)
max_p = _binop("max", np.maximum, ANY)
min_p = _binop("min", np.minimum, ANY)
atan2_p = _binop("atan2", np.arctan2, FLOAT)
and_p = _binop("and", np.bitwise_and, INT_OR_BOOL)
or_p = _binop("or", np.bitwise_or, INT_OR_BOOL)
xor_p = _binop("xor", np.bitwise_xor, INT_OR_BOOL)
nextafter_p = _binop("nextafter", _nextafter, FLOAT)
def _comparison_of_keys_too(name, ufunc):
    """``eq``/``ne``: ``ufunc`` (``np.equal``/``np.not_equal``) on numbers; on the records
    of typed keys, which have no ufunc loop, equality of their whole key data, as JAX's
    ``eq``/``ne`` of keys. The executor runs the ufunc itself (in place, split, fused) only
    where the operands are numbers (``exec.plan``)."""

    def impl(x, y):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype.names is None:
            return ufunc(x, y)
        same = np.asarray(x == y)  # NumPy's record comparison: every field equal
        return same if ufunc is np.equal else ~same

    prim = standard_primitive(name, impl, nary_abstract_eval(name, ANY + ("extended",),
                                                              dtypes.bool_))
    batching.broadcast_batcher(prim)
    registry.elementwise_impls[prim] = (impl, ufunc)
    registry.scalar_broadcasting.add(prim)
    return prim


eq_p = _comparison_of_keys_too("eq", np.equal)
ne_p = _comparison_of_keys_too("ne", np.not_equal)
lt_p = _binop("lt", np.less, REAL + ("bool",), dtypes.bool_)
le_p = _binop("le", np.less_equal, REAL + ("bool",), dtypes.bool_)
gt_p = _binop("gt", np.greater, REAL + ("bool",), dtypes.bool_)
ge_p = _binop("ge", np.greater_equal, REAL + ("bool",), dtypes.bool_)


def _balanced_eq(x, z, y):
    """1 where x is the max/min z alone, 0.5 where x and y tie, 0 elsewhere."""
    one = rule_ops.full_like(z, 1)
    half = rule_ops.full_like(z, 0.5)
    zero = rule_ops.full_like(z, 0)
    return select(eq(x, z), select(eq(y, z), half, one), zero)


def _binary_rules():
    for p in (and_p, or_p, xor_p, nextafter_p, eq_p, ne_p, lt_p, le_p, gt_p, ge_p):
        ad.defjvp_zero(p)
    _defjvp_broadcasting(add_p, lambda g, x, y: g, lambda g, x, y: g)
    _defjvp_broadcasting(sub_p, lambda g, x, y: g, lambda g, x, y: neg(g))
    _defjvp_broadcasting(mul_p, lambda g, x, y: mul(g, y), lambda g, x, y: mul(x, g))
    _defjvp_broadcasting(div_p, lambda g, x, y: div(g, y),
                         lambda g, x, y: mul(neg(g), div(x, square(y))))
    _defjvp_broadcasting(
        rem_p, lambda g, x, y: g,
        lambda g, x, y: mul(neg(g), mul(sign(div(x, y)), floor(abs(div(x, y))))))
    _defjvp_broadcasting(max_p, lambda g, x, y: mul(g, _balanced_eq(x, max(x, y), y)),
                         lambda g, x, y: mul(g, _balanced_eq(y, max(x, y), x)))
    _defjvp_broadcasting(min_p, lambda g, x, y: mul(g, _balanced_eq(x, min(x, y), y)),
                         lambda g, x, y: mul(g, _balanced_eq(y, min(x, y), x)))
    _defjvp_broadcasting(
        atan2_p, lambda g, x, y: mul(g, div(y, add(square(x), square(y)))),
        lambda g, x, y: mul(g, div(neg(x), add(square(x), square(y)))))

    def pow_jvp_x(g, x, y):
        y_f = y if core.get_aval(y).dtype == core.get_aval(x).dtype else \
            convert_element_type(y, core.get_aval(x).dtype)
        jac = select(eq(y_f, 0.0), rule_ops.full_like(mul(x, y_f), 0),
                         mul(y_f, pow(x, sub(y_f, 1.0))))
        return mul(g, jac)

    def pow_jvp_y(g, x, y):
        ans = pow(x, y)
        log_x = select(eq(x, 0.0), rule_ops.full_like(x, 0), log(x))
        return mul(g, mul(log_x, ans))

    _defjvp_broadcasting(pow_p, pow_jvp_x, pow_jvp_y)

    def add_transpose(ct, x, y):
        return [_unbroadcast(x.aval, ct) if ad.is_undefined_primal(x) else None,
                _unbroadcast(y.aval, ct) if ad.is_undefined_primal(y) else None]

    def sub_transpose(ct, x, y):
        return [_unbroadcast(x.aval, ct) if ad.is_undefined_primal(x) else None,
                _unbroadcast(y.aval, neg(ct)) if ad.is_undefined_primal(y) else None]

    def mul_transpose(ct, x, y):
        if ad.is_undefined_primal(x):
            return [_unbroadcast(x.aval, mul(ct, y)), None]
        return [None, _unbroadcast(y.aval, mul(x, ct))]

    def div_transpose(ct, x, y):
        assert ad.is_undefined_primal(x) and not ad.is_undefined_primal(y)
        return [_unbroadcast(x.aval, div(ct, y)), None]

    ad.primitive_transposes[add_p] = add_transpose
    ad.primitive_transposes[sub_p] = sub_transpose
    ad.primitive_transposes[mul_p] = mul_transpose
    ad.primitive_transposes[div_p] = div_transpose


# --- select_n, clamp, convert_element_type ---------------------------------------------------


def _select_n_abstract_eval(which, *cases):
    if not cases:
        raise TypeError("select_n must have at least one case")
    if which.dtype != dtypes.bool_ and dtypes.kind(which.dtype) not in "iu":
        raise TypeError(f"select_n which must be boolean or integer, got {which.dtype.name}")
    if which.dtype == dtypes.bool_ and len(cases) > 2:
        raise TypeError("select_n with a boolean which takes at most 2 cases")
    check_same_dtypes("select_n", cases)
    if len({c.shape for c in cases}) > 1:
        raise TypeError(f"select_n cases must have the same shapes, got "
                        f"{[c.shape for c in cases]}")
    if which.shape and which.shape != cases[0].shape:
        raise TypeError(f"select_n which must be scalar or have the same shape as cases, got "
                        f"which shape {which.shape} but case shape {cases[0].shape}")
    return cases[0].update(weak_type=all(c.weak_type for c in cases))


_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # by itemsize


def _select_n_impl(which, *cases):
    if len(cases) == 1:
        return cases[0]
    if which.dtype == np.bool_ and len(cases) == 2:
        false_case, true_case = cases
        if which.size >= 1024 and all(c.shape in (which.shape, ()) for c in cases) \
                and true_case.dtype == false_case.dtype and true_case.dtype.itemsize in _BITS:
            return _select_bits(which, false_case, true_case)
        return np.where(which, true_case, false_case)
    return np.choose(which, cases)


def _select_bits(which, false_case, true_case):
    """``where(which, true_case, false_case)`` on the bits: ``(which * (t ^ f)) ^ f``, a bool
    times an unsigned integer being all of its bits or none. Exact for every value (nan, inf,
    -0.0), and on a mask of random signs several times faster than ``np.where``, whose
    per-element branch the CPU mispredicts (a relu's gradient). A constant case is read once
    as a scalar, and a zero false case (the relu's) leaves one pass: ``which * t``."""
    bits = _BITS[true_case.dtype.itemsize]
    f = _bits_of(false_case, bits)
    t = _bits_of(true_case, bits)
    if f.ndim == 0 and not f:
        return np.multiply(which, t, dtype=bits).view(true_case.dtype)
    out = np.multiply(which, np.bitwise_xor(t, f), dtype=bits)
    out ^= f
    return out.view(true_case.dtype)


def _bits_of(case, bits):
    """A case's bits; a broadcast single value (a constant of a gradient) as that one scalar,
    which halves the passes' cost against reading it through zero strides."""
    if case.ndim and not any(case.strides):
        return case[(0,) * case.ndim].view(bits)
    return case.view(bits)


select_n_p = standard_primitive("select_n", _select_n_impl, _select_n_abstract_eval)
registry.scalar_broadcasting.add(select_n_p)
registry.select_primitive = select_n_p


def _select_n_batch(vals, dims):
    which, cases = vals[0], vals[1:]
    wdim, cdims = dims[0], dims[1:]
    size = batching.axis_size_of(vals, dims)
    if wdim is batching.not_mapped and not core.get_aval(which).shape:
        cases = [batching.bdim_at_front(c, d, size) for c, d in zip(cases, cdims)]
        return select_n_p.bind(which, *cases), 0
    case_shape = core.get_aval(vals[1]).shape
    case_shape = case_shape if cdims[0] is batching.not_mapped else \
        case_shape[:cdims[0]] + case_shape[cdims[0] + 1:]
    which = batching.bdim_at_front(which, wdim, size)
    if core.get_aval(which).ndim - 1 < len(case_shape):
        which = rule_ops.broadcast_in_dim(which, (size,) + case_shape, (0,))
    cases = [batching.bdim_at_front(c, d, size) for c, d in zip(cases, cdims)]
    return select_n_p.bind(which, *cases), 0


batching.primitive_batchers[select_n_p] = _select_n_batch


def _select_n_jvp(primals, tangents):
    which, cases = primals[0], primals[1:]
    out = select_n_p.bind(which, *cases)
    case_tangents = tangents[1:]
    if all(type(t) is ad.Zero for t in case_tangents):
        return out, ad.Zero.from_primal_value(out)
    return out, select_n_p.bind(which, *[ad.instantiate_zeros(t) for t in case_tangents])


def _select_n_transpose(ct, which, *cases):
    assert not ad.is_undefined_primal(which)
    zeros = rule_ops.full_like(ct, 0)
    out = [None]
    for i, c in enumerate(cases):
        if ad.is_undefined_primal(c):
            branches = [zeros] * len(cases)
            branches[i] = ct
            out.append(select_n_p.bind(which, *branches))
        else:
            out.append(None)
    return out


ad.primitive_jvps[select_n_p] = _select_n_jvp
ad.primitive_transposes[select_n_p] = _select_n_transpose


def _clamp_abstract_eval(lo, x, hi):
    check_same_dtypes("clamp", [lo, x, hi])
    for name, b in (("min", lo), ("max", hi)):
        if b.shape and b.shape != x.shape:
            raise TypeError(f"clamp requires {name} to be a scalar or have the operand's shape "
                            f"{x.shape}, got {b.shape}")
    return x


clamp_p = standard_primitive("clamp", lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi),
                             _clamp_abstract_eval)
batching.broadcast_batcher(clamp_p)


def _clamp_rules():
    sel = select

    def zeros(x, v):
        return rule_ops.full_like(x, v)

    def d_lo(g, lo, x, hi):
        if not core.get_aval(g).shape:
            g = rule_ops.broadcast_in_dim(g, core.get_aval(x).shape, ())
        return sel(bitwise_and(gt(lo, x), lt(lo, hi)), g, zeros(x, 0))

    def d_x(g, lo, x, hi):
        return sel(bitwise_and(gt(x, lo), lt(x, hi)), g, zeros(x, 0))

    def d_hi(g, lo, x, hi):
        if not core.get_aval(g).shape:
            g = rule_ops.broadcast_in_dim(g, core.get_aval(x).shape, ())
        return sel(lt(hi, x), g, zeros(x, 0))

    ad.defjvp(clamp_p, d_lo, d_x, d_hi)


def _convert_impl(x, new_dtype, weak_type):
    new_dtype = np.dtype(new_dtype)
    if dtypes.kind(x.dtype) == "c" and dtypes.kind(new_dtype) != "c":
        x = x.real  # the real part (the lax function warns about the discarded imaginary part)
    if dtypes.kind(new_dtype) in "iu" and dtypes.kind(x.dtype) == "f":
        # JAX saturates and maps NaN to 0; NumPy's out-of-range casts are undefined
        info = dtypes.iinfo(new_dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            t = np.trunc(x)
            hi, lo = t >= float(info.max), t <= float(info.min)
            out = np.where(hi | lo | np.isnan(t), 0, t).astype(new_dtype)
        return np.where(hi, new_dtype.type(info.max),
                        np.where(lo, new_dtype.type(info.min), out))
    with np.errstate(over="ignore"):
        return x.astype(new_dtype)


def _convert_abstract_eval(x, new_dtype, weak_type):
    return ShapedArray(x.shape, new_dtype, weak_type)


convert_element_type_p = standard_primitive("convert_element_type", _convert_impl,
                                            _convert_abstract_eval)
batching.defvectorized(convert_element_type_p)


def _convert_jvp(primals, tangents, new_dtype, weak_type):
    (x,), (t,) = primals, tangents
    out = convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=weak_type)
    if type(t) is ad.Zero or not dtypes.is_inexact(new_dtype) or \
            not dtypes.is_inexact(core.get_aval(x).dtype):
        return out, ad.Zero.from_primal_value(out)
    return out, convert_element_type_p.bind(t, new_dtype=new_dtype, weak_type=weak_type)


def _convert_transpose(ct, x, new_dtype, weak_type):
    aval = x.aval
    return [convert_element_type_p.bind(ct, new_dtype=aval.dtype, weak_type=aval.weak_type)]


ad.primitive_jvps[convert_element_type_p] = _convert_jvp
ad.primitive_transposes[convert_element_type_p] = _convert_transpose


# --- the lax functions -----------------------------------------------------------------------


def _unary_fn(prim):
    def fn(x):
        return prim.bind(x)

    fn.__name__ = prim.name
    fn.__doc__ = f"Elementwise ``{prim.name}``."
    return fn


def _binary_fn(prim):
    def fn(x, y):
        x, y = as_operands(prim.name, x, y)
        return prim.bind(x, y)

    fn.__name__ = prim.name
    fn.__doc__ = f"Elementwise ``{prim.name}`` (operands of one dtype; rank-0 broadcasts)."
    return fn


neg, sign, floor, ceil, is_finite = map(_unary_fn, (neg_p, sign_p, floor_p, ceil_p, is_finite_p))
exp, exp2, log, log1p, expm1 = map(_unary_fn, (exp_p, exp2_p, log_p, log1p_p, expm1_p))
tanh, logistic, sin, cos, tan = map(_unary_fn, (tanh_p, logistic_p, sin_p, cos_p, tan_p))
asin, acos, atan, sinh, cosh = map(_unary_fn, (asin_p, acos_p, atan_p, sinh_p, cosh_p))
asinh, acosh, atanh, sqrt, rsqrt = map(_unary_fn, (asinh_p, acosh_p, atanh_p, sqrt_p, rsqrt_p))
cbrt, abs, erf, erfc, erf_inv = map(_unary_fn, (cbrt_p, abs_p, erf_p, erfc_p, erf_inv_p))
lgamma, digamma, square, bitwise_not = map(_unary_fn, (lgamma_p, digamma_p, square_p, not_p))
add, sub, mul, div, rem = map(_binary_fn, (add_p, sub_p, mul_p, div_p, rem_p))
array_ops.add = add
pow, max, min, atan2, nextafter = map(_binary_fn, (pow_p, max_p, min_p, atan2_p, nextafter_p))
bitwise_and, bitwise_or, bitwise_xor = map(_binary_fn, (and_p, or_p, xor_p))
eq, ne, lt, le, gt, ge = map(_binary_fn, (eq_p, ne_p, lt_p, le_p, gt_p, ge_p))
polygamma = _binary_fn(polygamma_p)


class RoundingMethod(enum.IntEnum):
    """How ``round`` breaks ties (as ``jax.lax.RoundingMethod``)."""

    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


def round(x, rounding_method=RoundingMethod.AWAY_FROM_ZERO):
    """Round to the nearest integer: 0 = away from zero, 1 = to nearest even."""
    return round_p.bind(x, rounding_method=int(RoundingMethod(rounding_method)))


def integer_pow(x, y):
    """``x ** y`` for a static Python integer ``y``."""
    try:
        y = operator.index(y)
    except TypeError:  # int(2.5) would silently compute x ** 2
        raise TypeError(f"integer_pow requires an integer exponent, got {y!r}") from None
    return integer_pow_p.bind(x, y=y)


def reciprocal(x):
    """``1 / x``, staged as ``integer_pow`` with exponent -1 (as JAX's)."""
    return integer_pow(x, -1)


def select_n(which, *cases):
    """``cases[which]`` elementwise; ``which`` is boolean (2 cases) or integer."""
    return select_n_p.bind(which, *cases)


def select(pred, on_true, on_false):
    """``on_true`` where ``pred`` else ``on_false``."""
    return select_n_p.bind(pred, on_false, on_true)


def clamp(min, x, max):
    """``x`` clipped to ``[min, max]``."""
    min, x, max = as_operands("clamp", min, x, max)
    return clamp_p.bind(min, x, max)


def convert_element_type(operand, new_dtype, weak_type=False):
    """``operand`` cast to ``new_dtype``; concrete operands are converted eagerly. A complex
    operand cast to a real dtype keeps its real part, with JAX's ComplexWarning."""
    new_dtype = dtypes.canonicalize_dtype(new_dtype)
    # a Python scalar's own dtype is not asked for: 2**31 is a valid uint32 but no int32
    operand_is_complex = (type(operand) is complex if dtypes.is_python_scalar(operand)
                          else dtypes.kind(core.get_aval(operand).dtype) == "c")
    if dtypes.kind(new_dtype) != "c" and operand_is_complex:
        warnings.warn("Casting complex values to real discards the imaginary part",
                      np.exceptions.ComplexWarning, stacklevel=2)
    if not isinstance(operand, core.Tracer) and not hasattr(operand, "_buf"):
        # Python scalars and NumPy constants are converted now, not staged (as in JAX);
        # a Python int is taken at full width (2**32 - 1 fits a uint32, not an int32)
        value = np.asarray(operand) if dtypes.is_python_scalar(operand) else \
            np.asarray(operand, core.get_aval(operand).dtype)
        buf = _convert_impl(value, new_dtype, weak_type)
        return core.make_array(np.asarray(buf), ShapedArray(buf.shape, new_dtype, weak_type))
    return convert_element_type_p.bind(operand, new_dtype=new_dtype, weak_type=bool(weak_type))


_unary_jvps()
_binary_rules()
_clamp_rules()
