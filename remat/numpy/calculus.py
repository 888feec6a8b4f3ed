"""Discrete calculus on samples: differences (``diff ediff1d gradient``), integration
(``trapezoid``), interpolation (``interp``) and phase unwrapping (``unwrap``).
"""

import builtins

import numpy as np

from remat import dtypes, lax
from remat.numpy import reductions
from remat.numpy.elementwise import (
    absolute,
    add,
    clip,
    divide,
    floor_divide,
    multiply,
    negative,
    remainder,
    subtract,
)
from remat.numpy.logic import equal, greater, less, logical_and, where
from remat.numpy.searching import searchsorted
from remat.numpy.selection import take
from remat.numpy.shapes import broadcast_to, concatenate, moveaxis, ravel, reshape
from remat.numpy.util import (
    _arr,
    _canonicalize_axis,
    _check_arraylike,
    _dtype,
    _promote_dtypes,
    _promote_dtypes_inexact,
    _shape,
    _slice_axis,
    _static_int,
    _with,
    asarray,
)

_max = builtins.max

__all__ = ["diff", "ediff1d", "gradient", "interp", "trapezoid", "unwrap"]


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """The ``n``-th discrete difference along ``axis``."""
    _check_arraylike("diff", a)
    a = _arr(a)
    n = _static_int(n, "n")
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n}")
    axis = _canonicalize_axis(axis, a.ndim)

    def edge(v):
        v = _arr(v)
        return broadcast_to(v, _with(_shape(a), axis, 1)) if v.ndim == 0 else v

    parts = ([edge(prepend)] if prepend is not None else []) + [a] + \
        ([edge(append)] if append is not None else [])
    if len(parts) > 1:
        a = concatenate(parts, axis)
    if a.ndim == 0 or n == 0:
        return a
    op = lax.bitwise_xor if _dtype(a) == dtypes.bool_ else lax.sub
    for _ in range(n):
        m = _shape(a)[axis]
        a = op(_slice_axis(a, axis, 1, _max(m, 1)), _slice_axis(a, axis, 0, _max(m - 1, 0)))
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    """Differences of consecutive elements of the flattened array."""
    out = diff(ravel(ary))
    parts = [ravel(asarray(to_begin))] if to_begin is not None else []
    parts.append(out)
    if to_end is not None:
        parts.append(ravel(asarray(to_end)))
    return concatenate(parts, 0) if len(parts) > 1 else out


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The integral of ``y`` by the trapezoidal rule (samples at ``x`` or spacing ``dx``)."""
    if x is None:
        y, = _promote_dtypes_inexact(_arr(y))  # (as JAX: integers integrate as floats)
        dx_ = _arr(dx)
    else:
        y, x = _promote_dtypes_inexact(_arr(y), _arr(x))
    axis = _canonicalize_axis(axis, y.ndim)
    y = moveaxis(y, axis, -1)
    if x is not None:
        dx_ = diff(x if x.ndim == 1 else moveaxis(x, axis, -1), axis=-1)
    mid = multiply(add(y[..., 1:], y[..., :-1]), 0.5)
    return reductions.sum(multiply(dx_, mid), axis=-1)


def _gradient_along(a, h, axis, edge_order):
    """NumPy's second-order central differences inside, one-sided differences of order
    ``edge_order`` at both ends, for a scalar spacing or 1-D coordinates ``h``."""
    n = _shape(a)[axis]

    def sl(x, start, stop):
        return _slice_axis(x, axis, start, stop)

    if np.ndim(h) == 0:
        inner = divide(multiply(subtract(sl(a, 2, n), sl(a, 0, n - 2)), 0.5), h)
        if edge_order == 1:
            first = divide(subtract(sl(a, 1, 2), sl(a, 0, 1)), h)
            last = divide(subtract(sl(a, n - 1, n), sl(a, n - 2, n - 1)), h)
        else:
            first = divide(add(add(multiply(sl(a, 0, 1), -1.5), multiply(sl(a, 1, 2), 2.0)),
                               multiply(sl(a, 2, 3), -0.5)), h)
            last = divide(add(add(multiply(sl(a, n - 3, n - 2), 0.5),
                                  multiply(sl(a, n - 2, n - 1), -2.0)),
                              multiply(sl(a, n - 1, n), 1.5)), h)
        return concatenate([first, inner, last], axis)
    if np.ndim(h) != 1:
        raise ValueError("Spacing arrays must be 1D arrays or scalars.")
    if _shape(h)[0] != n:
        raise ValueError("Spacing arrays must have the same length as the dimension along "
                         "which the gradient is calculated.")
    shape = [1] * a.ndim
    shape[axis] = n
    x = reshape(h, tuple(shape))
    dx = subtract(sl(x, 1, n), sl(x, 0, n - 1))
    dx1, dx2 = sl(dx, 0, n - 2), sl(dx, 1, n - 1)
    ca = divide(-dx2, multiply(dx1, add(dx1, dx2)))
    cb = divide(subtract(dx2, dx1), multiply(dx1, dx2))
    cc = divide(dx1, multiply(dx2, add(dx1, dx2)))
    inner = add(add(multiply(ca, sl(a, 0, n - 2)), multiply(cb, sl(a, 1, n - 1))),
                multiply(cc, sl(a, 2, n)))
    if edge_order == 1:
        first = divide(subtract(sl(a, 1, 2), sl(a, 0, 1)), sl(dx, 0, 1))
        last = divide(subtract(sl(a, n - 1, n), sl(a, n - 2, n - 1)), sl(dx, n - 2, n - 1))
    else:
        d1, d2 = sl(dx, 0, 1), sl(dx, 1, 2)
        first = add(add(multiply(divide(-add(multiply(d1, 2.0), d2), multiply(d1, add(d1, d2))),
                                 sl(a, 0, 1)),
                        multiply(divide(add(d1, d2), multiply(d1, d2)), sl(a, 1, 2))),
                    multiply(divide(-d1, multiply(d2, add(d1, d2))), sl(a, 2, 3)))
        d1, d2 = sl(dx, n - 3, n - 2), sl(dx, n - 2, n - 1)
        last = add(add(multiply(divide(d2, multiply(d1, add(d1, d2))), sl(a, n - 3, n - 2)),
                       multiply(divide(-add(d1, d2), multiply(d1, d2)), sl(a, n - 2, n - 1))),
                   multiply(divide(add(multiply(d2, 2.0), d1), multiply(d2, add(d1, d2))),
                            sl(a, n - 1, n)))
    return concatenate([first, inner, last], axis)


def gradient(f, *varargs, axis=None, edge_order=None):
    """The gradient of sampled ``f`` along each of ``axis`` (all axes by default): central
    differences inside, one-sided ones of order ``edge_order`` (1 or 2) at the edges; the
    spacing is 1, one scalar or 1-D coordinate array for all axes, or one per axis."""
    _check_arraylike("gradient", f, *varargs)
    a, *spacing = _promote_dtypes_inexact(*[_arr(v) for v in (f, *varargs)])
    edge_order = 1 if edge_order is None else _static_int(edge_order, "edge_order")
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    if axis is None:
        axes = tuple(range(a.ndim))
    else:
        axes = tuple(_canonicalize_axis(i, a.ndim)
                     for i in ((axis,) if np.ndim(axis) == 0 else axis))
    if not axes:
        return []
    if min(_shape(a)[i] for i in axes) < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at "
                         "least (edge_order + 1) elements are required.")
    if not spacing:
        dx = [1.0] * len(axes)
    elif len(spacing) == 1:
        dx = spacing * len(axes)
    elif len(spacing) == len(axes):
        dx = spacing
    else:
        raise TypeError(f"Invalid number of spacing arguments {len(spacing)} for "
                        f"axis={axis}")
    out = [_gradient_along(a, h, ax, edge_order) for ax, h in zip(axes, dx)]
    return out[0] if len(axes) == 1 else out


def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of the samples ``(xp, fp)`` (``xp`` increasing) at
    ``x``; ``left``/``right`` (a value or 'extrapolate') beyond the ends; ``period`` for
    periodic ``xp``."""
    _check_arraylike("interp", x, xp, fp)
    if np.shape(xp) != np.shape(fp) or np.ndim(xp) != 1:
        raise ValueError("xp and fp must be one-dimensional arrays of equal size")
    x, xp = _promote_dtypes_inexact(_arr(x), _arr(xp))
    (fp,) = _promote_dtypes_inexact(_arr(fp))
    if dtypes.kind(_dtype(x)) == "c":
        raise ValueError("jnp.interp: complex x values not supported.")
    extrapolate = []
    for name, value in (("left", left), ("right", right)):
        if isinstance(value, str) and value != "extrapolate":
            raise ValueError(f"the only valid string value of `{name}` is 'extrapolate', "
                             f"but got: {value!r}")
        extrapolate.append(isinstance(value, str))
    if period is not None:
        if np.ndim(period) != 0:
            raise ValueError(f"period must be a scalar; got {period}")
        period = absolute(period)
        x, xp = remainder(x, period), remainder(xp, period)
        xp, fp = lax.sort((xp, fp), dimension=0, num_keys=1)
        n = _shape(xp)[0]
        xp = concatenate([subtract(_slice_axis(xp, 0, n - 1, n), period), xp,
                          add(_slice_axis(xp, 0, 0, 1), period)])
        fp = concatenate([_slice_axis(fp, 0, n - 1, n), fp, _slice_axis(fp, 0, 0, 1)])
    n = _shape(xp)[0]
    i = clip(searchsorted(xp, x, side="right"), 1, n - 1)
    im1 = subtract(i, 1)
    f_lo, x_lo = take(fp, im1, mode="clip"), take(xp, im1, mode="clip")
    df = subtract(take(fp, i, mode="clip"), f_lo)
    dx = subtract(take(xp, i, mode="clip"), x_lo)
    delta = subtract(x, x_lo)
    tiny = np.spacing(dtypes.finfo(_dtype(xp)).eps)
    flat = lax.le(lax.abs(dx), lax.full((), tiny, _dtype(dx)))  # no NaN gradients there
    f = where(flat, f_lo, add(f_lo, multiply(divide(delta, where(flat, 1, dx)), df)))
    if period is None:
        def at(v, i):
            return lax.reshape(_slice_axis(v, 0, i, i + 1), ())

        if not extrapolate[0]:
            f = where(less(x, at(xp, 0)), at(fp, 0) if left is None else left, f)
        if not extrapolate[1]:
            f = where(greater(x, at(xp, n - 1)), at(fp, n - 1) if right is None else right, f)
    return f


def unwrap(p, discont=None, axis=-1, period=2 * np.pi):
    """``p`` with jumps larger than ``discont`` (default ``period / 2``) along ``axis``
    replaced by their equivalents modulo ``period``."""
    _check_arraylike("unwrap", p)
    p, period = _promote_dtypes(_arr(p), _arr(period))
    if dtypes.kind(_dtype(p)) == "c":
        raise ValueError("jnp.unwrap does not support complex inputs.")
    axis = _canonicalize_axis(axis, p.ndim)
    n = _shape(p)[axis]
    if n == 0:
        return p
    if discont is None:
        discont = divide(period, 2)
    interval = floor_divide(period, 2) if dtypes.is_integer(_dtype(p)) else \
        divide(period, 2)
    dd = diff(p, axis=axis)
    ddmod = subtract(remainder(add(dd, interval), period), interval)
    ddmod = where(logical_and(equal(ddmod, negative(interval)), greater(dd, 0)), interval,
                  ddmod)
    correction = where(less(absolute(dd), discont), 0, subtract(ddmod, dd))
    rest = add(_slice_axis(p, axis, 1, n), reductions.cumsum(correction, axis=axis))
    return concatenate([_slice_axis(p, axis, 0, 1), rest], axis)
