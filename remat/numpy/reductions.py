"""Reductions and cumulative ops of ``remat.numpy``: ``sum mean var std max min prod argmax
argmin all any cumsum cumprod nansum nanmean count_nonzero average median ptp`` and friends,
with NumPy's ``axis``/``keepdims``/``dtype``/``where``/``initial`` arguments and JAX's result
dtypes (integer sums accumulate in the default integer, means of integers are floating point,
float16 and bfloat16 accumulate in float32).
"""

import builtins
import math

import numpy as np

from remat import core, dtypes, lax
from remat.numpy.logic import equal, isclose, isnan, where
from remat.numpy.selection import diagonal
from remat.numpy.shapes import broadcast_to, ravel
from remat.numpy.util import (
    _arr,
    _canon,
    _canonicalize_axis,
    _check_arraylike,
    _convert,
    _dtype,
    _full,
    _promote_dtypes,
    _promote_dtypes_inexact,
    _shape,
    _to_inexact_dtype,
    broadcast_shapes,
)


def _reduction_axes(axis, nd):
    if axis is None:
        return tuple(range(nd))
    if isinstance(axis, (int, np.integer)):
        return (_canonicalize_axis(axis, nd),)
    axes = tuple(axis) if type(axis) in (tuple, list) else \
        (axis,) if np.ndim(axis) == 0 else tuple(axis)
    out = tuple(_canonicalize_axis(a, nd) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(f"duplicate value in 'axis': {axis}")
    return tuple(sorted(out))


def _keep(x, axes, nd, keepdims):
    """Reinsert the reduced axes as size-1 axes when ``keepdims``."""
    if not keepdims:
        return x
    shape = list(_shape(x))
    for a in axes:
        shape.insert(a, 1)
    return lax.reshape(x, tuple(shape))


def _upcast_f16(d):
    """float16 and bfloat16 accumulate in float32 (as JAX; the float8s do not)."""
    return dtypes.float32 if np.dtype(d) in (dtypes.float16, dtypes.bfloat16) else np.dtype(d)


def _promote_integer_dtype(d):
    """Sums and products of small integers accumulate in the default integer (as JAX)."""
    d = np.dtype(d)
    default = dtypes.default_int_dtype()
    if d == dtypes.bool_:
        return default
    if dtypes.kind(d) == "i" and d.itemsize < default.itemsize:
        return default
    if dtypes.kind(d) == "u" and d.itemsize < default.itemsize:
        return dtypes.canonicalize_dtype(np.dtype(f"uint{default.itemsize * 8}"))
    return d


def _where_mask(where_, shape_):
    mask = _arr(where_)
    if _dtype(mask) != dtypes.bool_:
        mask = _convert(mask, dtypes.bool_)
    return broadcast_to(mask, shape_)


def _reduce(name, a, axis, dtype, keepdims, initial, where_, *, op, combine, identity,
            promote_integers=False, upcast=True, bool_op=None):
    """The shared machinery of the monoid reductions (sum, prod, max, min, all, any)."""
    _check_arraylike(name, a)
    a = _arr(a)
    nd = a.ndim
    axes = _reduction_axes(axis, nd)
    d_in = _dtype(a)
    if dtype is not None:
        result_dtype = _canon(dtype)
    elif promote_integers:
        result_dtype = _promote_integer_dtype(d_in)
    else:
        result_dtype = d_in
    compute = _upcast_f16(result_dtype) if upcast else result_dtype
    if bool_op is not None and compute == dtypes.bool_:
        op, combine = bool_op
    x = _convert(a, compute)
    if where_ is not None:
        if identity is None and initial is None:
            raise ValueError(f"reduction operation {name} does not have an identity, so to "
                             f"use a where mask one has to specify 'initial'")
        fill = identity(compute) if identity is not None else initial
        x = lax.select(_where_mask(where_, _shape(x)), x,
                       _full(_shape(x), fill, compute))
    if identity is None and initial is None and \
            builtins.any(_shape(a)[i] == 0 for i in axes):
        raise ValueError(f"zero-size array to reduction operation {name} which has no "
                         f"identity")
    out = op(x, axes) if axes else x
    if initial is not None:
        init = lax.convert_element_type(core.concrete_or_error(
            initial, "The initial argument must be static.") if not hasattr(initial, "aval")
            else initial, compute)
        out = combine(out, init)
    out = _convert(out, result_dtype, False)
    return _keep(out, axes, nd, keepdims)


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,
        promote_integers=True):
    """Sum over ``axis`` (all axes by default); small integers and booleans sum in the
    default integer."""
    return _reduce("sum", a, axis, dtype, keepdims, initial, where, op=lax.reduce_sum,
                   combine=lax.add, identity=lambda d: 0, promote_integers=promote_integers,
                   bool_op=(lax.reduce_or, lax.bitwise_or))


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,
         promote_integers=True):
    """Product over ``axis``."""
    return _reduce("prod", a, axis, dtype, keepdims, initial, where, op=lax.reduce_prod,
                   combine=lax.mul, identity=lambda d: 1, promote_integers=promote_integers,
                   bool_op=(lax.reduce_and, lax.bitwise_and))


product = prod


def max(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Maximum over ``axis`` (NaN propagates; empty reductions need ``initial``)."""
    return _reduce("max", a, axis, None, keepdims, initial, where, op=lax.reduce_max,
                   combine=lax.max, identity=None, upcast=False)


def min(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Minimum over ``axis`` (NaN propagates; empty reductions need ``initial``)."""
    return _reduce("min", a, axis, None, keepdims, initial, where, op=lax.reduce_min,
                   combine=lax.min, identity=None, upcast=False)


amax, amin = max, min


def all(a, axis=None, out=None, keepdims=False, *, where=None):
    """Whether every element along ``axis`` is truthy."""
    a = _truth(a, "all")
    return _reduce("all", a, axis, None, keepdims, None, where, op=lax.reduce_and,
                   combine=lax.bitwise_and, identity=lambda d: True, upcast=False)


def any(a, axis=None, out=None, keepdims=False, *, where=None):
    """Whether some element along ``axis`` is truthy."""
    a = _truth(a, "any")
    return _reduce("any", a, axis, None, keepdims, None, where, op=lax.reduce_or,
                   combine=lax.bitwise_or, identity=lambda d: False, upcast=False)


def _truth(a, name):
    _check_arraylike(name, a)
    a = _arr(a)
    if _dtype(a) == dtypes.bool_:
        return a
    return lax.ne(a, lax.full((), 0, _dtype(a)))


def _count(a, axes, where_, keepdims, dtype):
    """The number of elements each reduction sees (static unless masked)."""
    if where_ is None:
        return _convert(math.prod(_shape(a)[i] for i in axes), dtype)
    mask = _where_mask(where_, _shape(a))
    return _keep(lax.reduce_sum(_convert(mask, dtype), axes), axes, len(_shape(a)),
                 keepdims) if axes else _convert(mask, dtype)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """Arithmetic mean over ``axis``; integers average in floating point."""
    _check_arraylike("mean", a)
    a = _arr(a)
    axes = _reduction_axes(axis, a.ndim)
    result_dtype = _canon(dtype) if dtype is not None else _to_inexact_dtype(_dtype(a))
    compute = _upcast_f16(_to_inexact_dtype(result_dtype))
    total = sum(a, axis=axes, dtype=compute, keepdims=keepdims, where=where)
    count = _count(a, axes, where, keepdims, compute)
    return _convert(lax.div(total, count), result_dtype, False)


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
        correction=None):
    """Variance over ``axis`` with ``ddof`` (or ``correction``) delta degrees of freedom."""
    _check_arraylike("var", a)
    if correction is not None:
        if ddof:
            raise ValueError("ddof and correction can't be provided simultaneously.")
        ddof = correction
    a = _arr(a)
    axes = _reduction_axes(axis, a.ndim)
    result_dtype = _canon(dtype) if dtype is not None else _to_inexact_dtype(_dtype(a))
    if dtypes.kind(_dtype(a)) == "c" and dtypes.kind(result_dtype) != "c":
        raise ValueError("jax.numpy.var does not yet support real dtype parameters when "
                         "computing the variance of an array of complex values.")
    compute = _upcast_f16(_to_inexact_dtype(result_dtype))
    x = _convert(a, compute)
    centered = lax.sub(x, broadcast_to(mean(x, axis=axes, keepdims=True, where=where),
                                       _shape(x)))
    if dtypes.kind(compute) == "c":  # |x - mean|^2, real: the variance of complex values is real
        sq = lax.real(lax.mul(centered, lax.conj(centered)))
        compute = _dtype(sq)
        result_dtype = compute if dtype is None else result_dtype
    else:
        sq = lax.square(centered)
    total = sum(sq, axis=axes, keepdims=keepdims, where=where)
    count = _count(a, axes, where, keepdims, compute)
    ddof_ = ddof if hasattr(ddof, "aval") else lax.full((), ddof, compute)
    return _convert(lax.div(total, lax.sub(count, _convert(ddof_, compute))), result_dtype)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None,
        correction=None):
    """Standard deviation: the square root of ``var``."""
    v = var(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims, where=where,
            correction=correction)
    return lax.sqrt(v)


def ptp(a, axis=None, out=None, keepdims=False):
    """Range (maximum minus minimum) over ``axis``."""
    return lax.sub(max(a, axis=axis, keepdims=keepdims), min(a, axis=axis, keepdims=keepdims))


def _argminmax(name, lax_fn, a, axis, keepdims):
    _check_arraylike(name, a)
    a = _arr(a)
    if axis is None:
        nd = a.ndim
        flat = ravel(a)
        if _shape(flat)[0] == 0:
            raise ValueError(f"attempt to get {name} of an empty sequence")
        out = lax_fn(flat, 0, dtypes.default_int_dtype())
        return lax.reshape(out, (1,) * nd) if keepdims else out
    ax = _canonicalize_axis(axis, a.ndim)
    if _shape(a)[ax] == 0:
        raise ValueError(f"attempt to get {name} of an empty sequence")
    if _dtype(a) == dtypes.bool_:
        a = _convert(a, dtypes.int32)
    out = lax_fn(a, ax, dtypes.default_int_dtype())
    return _keep(out, (ax,), a.ndim, keepdims)


def argmax(a, axis=None, out=None, keepdims=None):
    """Index of the first maximum along ``axis`` (of the flattened array by default)."""
    if axis is None and _dtype(_arr(a)) == dtypes.bool_:
        a = _convert(_arr(a), dtypes.int32)
    return _argminmax("argmax", lax.argmax, a, axis, keepdims)


def argmin(a, axis=None, out=None, keepdims=None):
    """Index of the first minimum along ``axis`` (of the flattened array by default)."""
    if axis is None and _dtype(_arr(a)) == dtypes.bool_:
        a = _convert(_arr(a), dtypes.int32)
    return _argminmax("argmin", lax.argmin, a, axis, keepdims)


def _cumulative(name, lax_fn, a, axis, dtype, promote_bool_only, reverse=False):
    _check_arraylike(name, a)
    a = _arr(a)
    if axis is None:
        a = ravel(a)
        axis = 0
    axis = _canonicalize_axis(axis, a.ndim)
    if dtype is not None:
        d = _canon(dtype)
    elif promote_bool_only:
        d = dtypes.default_int_dtype() if _dtype(a) == dtypes.bool_ else _dtype(a)
    else:
        d = _promote_integer_dtype(_dtype(a))
    x = _convert(a, d)
    if _shape(x)[axis] == 0:
        return x
    return lax_fn(x, axis, reverse)


def cumsum(a, axis=None, dtype=None, out=None):
    """Running sum along ``axis`` (the flattened array by default)."""
    return _cumulative("cumsum", lax.cumsum, a, axis, dtype, True)


def cumprod(a, axis=None, dtype=None, out=None):
    """Running product along ``axis``."""
    return _cumulative("cumprod", lax.cumprod, a, axis, dtype, True)


cumproduct = cumprod


def _array_api_cumulative(name, running, identity, x, axis, dtype, include_initial):
    """The array-API ``cumulative_*``: ``running`` along ``axis`` (required above 1-D),
    with ``identity`` prepended when ``include_initial``."""
    x = _arr(x)
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"axis must be specified for {name} of arrays of "
                             f"dimension greater than 1")
        axis = 0
    out = running(x, axis=axis, dtype=dtype)
    if include_initial:
        axis = _canonicalize_axis(axis, x.ndim)
        first = _shape(out)[:axis] + (1,) + _shape(out)[axis + 1:]
        out = lax.concatenate([lax.full(first, identity, _dtype(out)), out], axis)
    return out


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """The array-API running sum (``include_initial`` prepends a zero)."""
    return _array_api_cumulative("cumulative_sum", cumsum, 0, x, axis, dtype, include_initial)


def nancumsum(a, axis=None, dtype=None, out=None):
    """Running sum treating NaNs as zero."""
    a = _arr(a)
    return cumsum(where(isnan(a), lax.full((), 0, _dtype(a)), a), axis, dtype)


def nancumprod(a, axis=None, dtype=None, out=None):
    """Running product treating NaNs as one."""
    a = _arr(a)
    return cumprod(where(isnan(a), lax.full((), 1, _dtype(a)), a), axis, dtype)


def _nan_replaced(a, value):
    a = _arr(a)
    if not dtypes.is_inexact(_dtype(a)):
        return a
    return where(isnan(a), lax.full((), value, _dtype(a)), a)


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """Sum treating NaNs as zero."""
    return sum(_nan_replaced(a, 0), axis=axis, dtype=dtype, keepdims=keepdims,
               initial=initial, where=where)


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """Product treating NaNs as one."""
    return prod(_nan_replaced(a, 1), axis=axis, dtype=dtype, keepdims=keepdims,
                initial=initial, where=where)


def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Maximum ignoring NaNs (NaN where a slice is all NaN)."""
    a = _arr(a)
    if not dtypes.is_inexact(_dtype(a)):
        return max(a, axis=axis, keepdims=keepdims, initial=initial, where=where)
    out = max(_nan_replaced(a, -np.inf), axis=axis, keepdims=keepdims, initial=initial,
              where=where)
    all_nan = all(isnan(a), axis=axis, keepdims=keepdims)
    return _where_nan(all_nan, out)


def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Minimum ignoring NaNs (NaN where a slice is all NaN)."""
    a = _arr(a)
    if not dtypes.is_inexact(_dtype(a)):
        return min(a, axis=axis, keepdims=keepdims, initial=initial, where=where)
    out = min(_nan_replaced(a, np.inf), axis=axis, keepdims=keepdims, initial=initial,
              where=where)
    all_nan = all(isnan(a), axis=axis, keepdims=keepdims)
    return _where_nan(all_nan, out)


def _where_nan(mask, out):
    return lax.select(broadcast_to(mask, _shape(out)) if _shape(mask) != _shape(out) else mask,
                      lax.full(_shape(out), np.nan, _dtype(out)), out)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """Mean of the non-NaN elements."""
    _check_arraylike("nanmean", a)
    a = _arr(a)
    if not dtypes.is_inexact(_dtype(a)):
        return mean(a, axis=axis, dtype=dtype, keepdims=keepdims, where=where)
    result_dtype = _canon(dtype) if dtype is not None else _dtype(a)
    compute = _upcast_f16(result_dtype)
    valid = lax.bitwise_not(isnan(a))
    if where is not None:
        valid = lax.bitwise_and(valid, _where_mask(where, _shape(a)))
    total = sum(_nan_replaced(a, 0), axis=axis, dtype=compute, keepdims=keepdims,
                where=valid)
    count = sum(valid, axis=axis, dtype=compute, keepdims=keepdims)
    return _convert(lax.div(total, count), result_dtype)


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None):
    """Variance of the non-NaN elements."""
    a = _arr(a)
    valid = lax.bitwise_not(isnan(a))
    if where is not None:
        valid = lax.bitwise_and(valid, _where_mask(where, _shape(a)))
    return var(_nan_replaced(a, 0), axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims,
               where=valid)


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None):
    """Standard deviation of the non-NaN elements."""
    return lax.sqrt(nanvar(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims,
                           where=where))


def count_nonzero(a, axis=None, keepdims=False):
    """Number of nonzero elements along ``axis``."""
    _check_arraylike("count_nonzero", a)
    return sum(_truth(a, "count_nonzero"), axis=axis, keepdims=keepdims,
               dtype=dtypes.default_int_dtype())


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """Weighted mean along ``axis`` (``returned`` also gives the sum of the weights)."""
    _check_arraylike("average", a)
    a = _arr(a)
    if weights is None:
        avg = mean(a, axis=axis, keepdims=keepdims)
        if returned:
            axes = _reduction_axes(axis, a.ndim)
            n = math.prod(_shape(a)[i] for i in axes)
            return avg, lax.full(_shape(avg), n, _dtype(avg))
        return avg
    w = _arr(weights)
    a, w = _promote_dtypes_inexact(a, w)
    if _shape(a) != _shape(w):
        if axis is None:
            raise ValueError("Axis must be specified when shapes of a and weights differ.")
        if w.ndim != 1:
            raise ValueError("1D weights expected when shapes of a and weights differ.")
        ax = _canonicalize_axis(axis, a.ndim)
        if _shape(w)[0] != _shape(a)[ax]:
            raise ValueError("Length of weights not compatible with specified axis.")
        w = lax.broadcast_in_dim(w, _shape(a), (ax,))
    wsum = sum(w, axis=axis, keepdims=keepdims)
    avg = lax.div(sum(lax.mul(a, w), axis=axis, keepdims=keepdims), wsum)
    if returned:
        return avg, wsum
    return avg


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """Median along ``axis``: the middle of the sorted values (the mean of the two middle
    ones for an even count; NaN if any value is NaN)."""
    _check_arraylike("median", a)
    a = _arr(a)
    d = _to_inexact_dtype(_dtype(a))
    if dtypes.kind(d) == "c":  # as JAX's median, which is a quantile
        raise ValueError("quantile does not support complex input, as the operation is "
                         "poorly defined.")
    x = _convert(a, d)
    nd = x.ndim
    axes = _reduction_axes(axis, nd)
    if len(axes) > 1 or axis is None:
        # move the reduced axes to the end and merge them into one
        kept = [i for i in range(nd) if i not in axes]
        x = lax.transpose(x, tuple(kept) + axes)
        x = lax.reshape(x, tuple(_shape(x)[:len(kept)])
                        + (math.prod(_shape(a)[i] for i in axes),))
        ax = len(kept)
    else:
        ax = axes[0]
    n = _shape(x)[ax]
    if n == 0:
        raise ValueError("median of an empty axis is undefined")
    s = lax.sort(x, dimension=ax)
    lo, hi = (n - 1) // 2, n // 2

    def pick(i):
        starts = [0] * s.ndim
        limits = list(_shape(s))
        starts[ax], limits[ax] = i, i + 1
        return lax.squeeze(lax.slice(s, starts, limits), (ax,))

    out = pick(lo) if lo == hi else lax.div(lax.add(pick(lo), pick(hi)),
                                            lax.full((), 2, d))
    has_nan = any(isnan(x), axis=ax)
    out = lax.select(has_nan, lax.full(_shape(out), np.nan, d), out)
    return _keep(out, axes, nd, keepdims)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether all elements of ``a`` and ``b`` are close (see ``isclose``)."""
    return all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a1, a2, equal_nan=False):
    """Whether ``a1`` and ``a2`` have the same shape and elements."""
    try:
        a1, a2 = _arr(a1), _arr(a2)
    except TypeError:
        return False
    if _shape(a1) != _shape(a2):
        return _convert(lax.full((), False, dtypes.bool_), dtypes.bool_)
    a1, a2 = _promote_dtypes(a1, a2)
    eq = lax.eq(a1, a2)
    if equal_nan and dtypes.is_inexact(_dtype(a1)):
        eq = lax.bitwise_or(eq, lax.bitwise_and(lax.ne(a1, a1), lax.ne(a2, a2)))
    return all(eq)


def array_equiv(a1, a2):
    """Whether ``a1`` and ``a2`` are equal after broadcasting."""
    a1, a2 = _arr(a1), _arr(a2)
    try:
        broadcast_shapes(_shape(a1), _shape(a2))
    except ValueError:
        return lax.full((), False, dtypes.bool_)
    return all(equal(a1, a2))


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """The array-API running product (``include_initial`` prepends a one)."""
    return _array_api_cumulative("cumulative_prod", cumprod, 1, x, axis, dtype, include_initial)


def nanargmax(a, axis=None, out=None, keepdims=None):
    """``argmax`` ignoring NaNs (ValueError-free: an all-NaN slice gives -1)."""
    a = _arr(a)
    if not dtypes.is_inexact(_dtype(a)):
        return argmax(a, axis=axis, keepdims=keepdims)
    nan_mask = isnan(a)
    out = argmax(where(nan_mask, -np.inf, a), axis=axis, keepdims=keepdims)
    return where(all(nan_mask, axis=axis, keepdims=keepdims), -1, out)


def nanargmin(a, axis=None, out=None, keepdims=None):
    """``argmin`` ignoring NaNs (an all-NaN slice gives -1)."""
    a = _arr(a)
    if not dtypes.is_inexact(_dtype(a)):
        return argmin(a, axis=axis, keepdims=keepdims)
    nan_mask = isnan(a)
    out = argmin(where(nan_mask, np.inf, a), axis=axis, keepdims=keepdims)
    return where(all(nan_mask, axis=axis, keepdims=keepdims), -1, out)


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """Sum along a diagonal."""
    return sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


__all__ = [n for n, v in list(globals().items())
           if not n.startswith("_") and callable(v) and getattr(v, "__module__", "") == __name__]
