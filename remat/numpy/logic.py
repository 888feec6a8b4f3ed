"""Comparisons, truth tests and selection by condition: ``equal less ... isnan isinf
signbit logical_* where select isclose``. Boolean results of weakly typed operands stay
weakly typed, as in JAX.
"""

import numpy as np

from remat import dtypes, lax
from remat.numpy.searching import nonzero
from remat.numpy.util import (
    _bcast_pair,
    _broadcast_to_shape,
    _check_arraylike,
    _const,
    _convert,
    _dtype,
    _named,
    _one_arg,
    _promote_args,
    _promote_dtypes,
    _scalar_like,
    _scalar_operand_fits,
    _shape,
    _to_bool,
    _weakly_bool,
    broadcast_shapes,
)

__all__ = [
    "equal", "greater", "greater_equal", "isclose", "isfinite", "isinf", "isnan", "isneginf",
    "isposinf", "less", "less_equal", "logical_and", "logical_not", "logical_or", "logical_xor",
    "not_equal", "select", "signbit", "where",
]


def _is_finite(x):
    """``lax.is_finite``; a complex value is finite where both its parts are."""
    if dtypes.kind(_dtype(x)) == "c":
        return lax.bitwise_and(lax.is_finite(lax.real(x)), lax.is_finite(lax.imag(x)))
    return lax.is_finite(x)


def isfinite(x, /):
    """Whether each element is finite (integers always are)."""
    x = _one_arg("isfinite", x)
    if not dtypes.is_inexact(_dtype(x)):
        return lax.full(_shape(x), True, dtypes.bool_)
    return _weakly_bool(_is_finite(x), x)


def isinf(x, /):
    """Whether each element is positive or negative infinity."""
    x = _one_arg("isinf", x)
    if not dtypes.is_inexact(_dtype(x)):
        return lax.full(_shape(x), False, dtypes.bool_)
    return lax.eq(lax.abs(x), _const(lax.abs(x), np.inf))


def isposinf(x, /):
    """Whether each element is +inf."""
    x = _one_arg("isposinf", x)
    if not dtypes.is_inexact(_dtype(x)):
        return lax.full(_shape(x), False, dtypes.bool_)
    return lax.eq(x, _const(x, np.inf))


def isneginf(x, /):
    """Whether each element is -inf."""
    x = _one_arg("isneginf", x)
    if not dtypes.is_inexact(_dtype(x)):
        return lax.full(_shape(x), False, dtypes.bool_)
    return lax.eq(x, _const(x, -np.inf))


def isnan(x, /):
    """Whether each element is NaN."""
    x = _one_arg("isnan", x)
    if not dtypes.is_inexact(_dtype(x)):
        return _weakly_bool(lax.full(_shape(x), False, dtypes.bool_), x)
    return _weakly_bool(lax.ne(x, x), x)


def signbit(x, /):
    """Whether the sign bit is set (``-0.0`` counts as negative)."""
    x = _one_arg("signbit", x)
    d = _dtype(x)
    if d == dtypes.bool_ or dtypes.kind(d) == "u":
        return lax.full(_shape(x), False, dtypes.bool_)
    x = _convert(x, d)
    zero = _scalar_like(x, 0)
    if dtypes.kind(d) in "i":
        return lax.lt(x, zero)
    bits = dtypes.itemsize_bits(d)
    if dtypes.kind(d) == "f" and bits in (8, 16, 32, 64):  # the sign bit itself, as JAX
        unsigned = np.dtype(f"uint{bits}")
        top = lax.shift_right_logical(lax.bitcast_convert_type(x, unsigned),
                                      lax.full((), bits - 1, unsigned))
        return lax.ne(top, lax.full((), 0, unsigned))
    # 4- and 6-bit floats: -0.0 is the zero whose reciprocal is negative
    neg_zero = lax.bitwise_and(lax.eq(x, zero), lax.lt(lax.div(_scalar_like(x, 1), x), zero))
    return lax.bitwise_or(lax.lt(x, zero), neg_zero)


def _comparison(name, lax_fn):
    def fn(x1, x2, /):
        if not _scalar_operand_fits(x1, x2):
            x1, x2 = _promote_args(name, x1, x2)
        return _weakly_bool(lax_fn(x1, x2), x1, x2)

    return _named(fn, name, f"Elementwise ``{name}`` comparison (a boolean array).")


equal = _comparison("equal", lax.eq)
not_equal = _comparison("not_equal", lax.ne)
less = _comparison("less", lax.lt)
less_equal = _comparison("less_equal", lax.le)
greater = _comparison("greater", lax.gt)
greater_equal = _comparison("greater_equal", lax.ge)


def _logical(name, lax_fn):
    def fn(x1, x2, /):
        x1, x2 = _promote_args(name, x1, x2)
        return lax_fn(_to_bool(x1), _to_bool(x2))

    return _named(fn, name, f"Elementwise ``{name}`` of the truth values of the operands.")


logical_and = _logical("logical_and", lax.bitwise_and)
logical_or = _logical("logical_or", lax.bitwise_or)
logical_xor = _logical("logical_xor", lax.bitwise_xor)


def logical_not(x, /):
    """Elementwise NOT of the truth value of ``x``."""
    return lax.bitwise_not(_to_bool(_one_arg("logical_not", x)))


def where(condition, x=None, y=None, /, *, size=None, fill_value=None):
    """``x`` where ``condition`` else ``y`` (broadcasting all three); with only ``condition``
    it is ``nonzero(condition)``, which needs a static ``size`` under transformations."""
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise ValueError("Either both or neither of the x and y arguments should be provided "
                         f"to jax.numpy.where, got {x} and {y}.")
    _check_arraylike("where", condition, x, y)
    condition = _to_bool(_one_arg("where", condition))
    x, y = _promote_dtypes(x, y)
    s = broadcast_shapes(_shape(condition), _shape(x), _shape(y))
    x, y = _broadcast_to_shape(x, s), _broadcast_to_shape(y, s)
    if _shape(condition):
        condition = _broadcast_to_shape(condition, s)
    return lax.select(condition, x, y)


def select(condlist, choicelist, default=0):
    """The element of the first ``choicelist`` entry whose condition holds, else
    ``default``."""
    if len(condlist) != len(choicelist):
        raise ValueError(f"condlist must have length equal to choicelist ({len(condlist)} "
                         f"vs {len(choicelist)})")
    if not condlist:
        raise ValueError("condlist must be non-empty")
    out = default
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        out = where(cond, choice, out)
    return out


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether ``|a - b| <= atol + rtol * |b|`` elementwise (equal infinities match)."""
    a, b = _promote_args("isclose", a, b)
    d = _dtype(a)
    if not dtypes.is_inexact(d):
        return _convert(lax.eq(*_bcast_pair(a, b)), dtypes.bool_)
    a, b = _convert(a, d), _convert(b, d)
    a, b = _bcast_pair(a, b)
    tol_d = dtypes.finfo(d).dtype if dtypes.kind(d) == "c" else d  # |a - b| of complex: real
    rtol_, atol_ = lax.convert_element_type(rtol, tol_d), lax.convert_element_type(atol, tol_d)
    close = lax.le(lax.abs(lax.sub(a, b)), lax.add(atol_, lax.mul(rtol_, lax.abs(b))))
    finite = lax.bitwise_and(_is_finite(a), _is_finite(b))
    both_inf = lax.eq(a, b)
    out = lax.select(finite, close, both_inf)
    if equal_nan:
        out = lax.bitwise_or(out, lax.bitwise_and(lax.ne(a, a), lax.ne(b, b)))
    return _convert(out, dtypes.bool_)
