"""Order statistics: ``quantile percentile nanquantile nanpercentile nanmedian`` with
NumPy's interpolation methods (linear, lower, higher, nearest, midpoint) and the weighted
``inverted_cdf``.

The reduced axes are moved to the end and merged, the values sorted along it, and each
quantile read by ``take_along_axis`` at the positions ``q * (count - 1)``; the NaN-ignoring
variants count only the non-NaN values, which the sort puts last.
"""

import math

import numpy as np

from remat import dtypes, lax
from remat.numpy.selection import take_along_axis
from remat.numpy.util import (
    _arr,
    _canonicalize_axis,
    _check_arraylike,
    _convert,
    _dtype,
    _shape,
    _to_inexact_dtype,
)

__all__ = ["nanmedian", "nanpercentile", "nanquantile", "percentile", "quantile"]

_METHODS = ("linear", "lower", "higher", "midpoint", "nearest", "inverted_cdf")


def _merge_reduced_axes(x, axis):
    """``x`` with the reduced axes merged into one last axis, and the shape keepdims gives."""
    nd = x.ndim
    if axis is None:
        axes = tuple(range(nd))
    else:
        axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
        axes = tuple(_canonicalize_axis(a, nd) for a in axes)
        if len(set(axes)) != len(axes):
            raise ValueError("repeated axis")
    kept = tuple(i for i in range(nd) if i not in axes)
    s = _shape(x)
    merged = lax.reshape(lax.transpose(x, kept + tuple(sorted(axes))),
                         tuple(s[i] for i in kept) + (math.prod(s[i] for i in axes),))
    keep_shape = tuple(1 if i in axes else s[i] for i in range(nd))
    return merged, keep_shape


def _quantile(name, a, q, axis, method, keepdims, ignore_nan, weights):
    if method not in _METHODS:
        raise ValueError("method can only be 'linear', 'lower', 'higher', 'midpoint', "
                         "'nearest' or 'inverted_cdf'")
    _check_arraylike(name, a, q)
    a, q = _arr(a), _arr(q)
    d = _to_inexact_dtype(_dtype(a))
    if dtypes.kind(d) == "c":
        raise ValueError("quantile does not support complex input, as the operation is "
                         "poorly defined.")
    if q.ndim > 1:
        raise ValueError(f"q must be have rank <= 1, got shape {_shape(q)}")
    if weights is not None:
        _check_arraylike(name, weights)
        weights = _arr(weights)
        if dtypes.kind(_dtype(weights)) == "c":
            raise ValueError("Weights cannot be complex types.")
        if method != "inverted_cdf":
            raise NotImplementedError(f"{method} doesn't support weights. Only method "
                                      f"'inverted_cdf' supports weights.")
        d = _to_inexact_dtype(dtypes.result_type_of([(d, False), (_dtype(weights), False)])[0])
        weights = _broadcast_weights(_convert(weights, d), _shape(a), axis)
    x = _convert(a, d)
    # positions are computed in q's precision (at least float32), values cast back to d
    qd = _to_inexact_dtype(dtypes.result_type_of([(_dtype(q), q.aval.weak_type), (d, False)])[0])
    if qd.itemsize < 4:
        qd = dtypes.float32
    q = _convert(q, qd)
    x, keep_shape = _merge_reduced_axes(x, axis)
    if weights is not None:
        weights = _merge_reduced_axes(weights, axis)[0]
    n = _shape(x)[-1]
    if n == 0:
        raise ValueError(f"{name} of an empty axis is undefined")
    last = x.ndim - 1
    is_nan = lax.ne(x, x)
    if not ignore_nan:  # any NaN makes the whole slice NaN
        any_nan = lax.broadcast_in_dim(lax.reduce_or(is_nan, (last,)), _shape(x),
                                       tuple(range(last)))
        x = lax.select(any_nan, lax.full_like(x, np.nan), x)
    if weights is None:
        x = lax.sort(x, dimension=last)
    else:
        x, weights = lax.sort((x, weights), dimension=last, num_keys=1)
    sorted_nan = lax.ne(x, x)
    if ignore_nan:
        counts = lax.reduce_sum(_convert(lax.bitwise_not(sorted_nan), qd), (last,))
    else:
        counts = lax.full(_shape(x)[:-1], n, qd)
    lead = _shape(x)[:-1]
    m = _shape(q)[0] if q.ndim else 1
    # q along a new last axis, against every kept position
    qb = lax.broadcast_in_dim(lax.reshape(q, (m,)), lead + (m,), (len(lead),))
    cb = lax.broadcast_in_dim(counts, lead + (m,), tuple(range(len(lead))))
    one = lax.full((), 1, qd)
    if method == "inverted_cdf":
        out = _inverted_cdf(x, weights, sorted_nan, qb, cb, ignore_nan, qd)
    else:
        pos = lax.mul(qb, lax.sub(cb, one))
        low, high = lax.floor(pos), lax.ceil(pos)
        high_weight = lax.sub(pos, low)
        top = lax.max(lax.sub(cb, one), lax.full((), 0, qd))
        zero = lax.full((), 0, qd)

        def read(i):
            i = lax.clamp(zero, lax.min(i, top), lax.full((), n - 1, qd))
            return _convert(take_along_axis(x, _convert(i, dtypes.int32), axis=-1), qd)

        lo, hi = read(low), read(high)
        if method == "linear":
            out = lax.add(lax.mul(lo, lax.sub(one, high_weight)), lax.mul(hi, high_weight))
        elif method == "lower":
            out = lo
        elif method == "higher":
            out = hi
        elif method == "nearest":
            out = lax.select(lax.le(high_weight, lax.full((), 0.5, qd)), lo, hi)
        else:
            out = lax.mul(lax.add(lo, hi), lax.full((), 0.5, qd))
    # (kept..., m) -> (m, kept...), keepdims reinserting the reduced axes as ones
    out = lax.transpose(out, (len(lead),) + tuple(range(len(lead))))
    if keepdims:
        out = lax.reshape(out, (m,) + keep_shape)
    if not q.ndim:
        out = lax.reshape(out, _shape(out)[1:])
    return _convert(out, d)


def _broadcast_weights(weights, shape, axis):
    if _shape(weights) == shape:
        return weights
    if axis is None:
        raise ValueError("Weights shape must match 'a' shape when axis is None.")
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    axes = tuple(_canonicalize_axis(ax, len(shape)) for ax in axes)
    if _shape(weights) != tuple(shape[ax] for ax in axes):
        raise ValueError(f"Weights shape {_shape(weights)} must match reduction axes "
                         f"{tuple(shape[ax] for ax in axes)}")
    return lax.broadcast_in_dim(weights, shape, axes)


def _inverted_cdf(x, weights, sorted_nan, qb, cb, ignore_nan, qd):
    """The first sorted value whose cumulative weight reaches ``q`` times the total (NaN
    where a weight is negative or NaN, or where NaN data is not ignored)."""
    last = x.ndim - 1
    lead = _shape(x)[:-1]
    n = _shape(x)[-1]
    if weights is None:
        weights = lax.full_like(x, 1)
    weights = _convert(weights, qd)
    zero = lax.full((), 0, qd)
    bad = lax.bitwise_or(lax.lt(weights, zero), lax.ne(weights, weights))
    clean = lax.select(lax.bitwise_or(bad, sorted_nan), lax.full_like(weights, 0), weights)
    cum = lax.cumsum(clean, last)
    total = lax.reshape(lax.slice_in_dim(cum, n - 1, n, axis=last), lead)
    m = _shape(qb)[-1]
    target = lax.mul(qb, lax.broadcast_in_dim(total, lead + (m,), tuple(range(len(lead)))))
    cum_b = lax.broadcast_in_dim(cum, lead + (m, n), tuple(range(len(lead))) + (len(lead) + 1,))
    target_b = lax.broadcast_in_dim(target, lead + (m, n), tuple(range(len(lead) + 1)))
    idx = lax.reduce_sum(_convert(lax.lt(cum_b, target_b), dtypes.int32), (len(lead) + 1,))
    limit = _convert(lax.sub(cb, lax.full((), 1, qd)), dtypes.int32)
    idx = lax.max(lax.full((), 0, dtypes.int32), lax.min(idx, limit))
    out = _convert(take_along_axis(x, idx, axis=-1), qd)
    any_bad = lax.reduce_or(bad, (last,))
    if ignore_nan:
        force_nan = lax.bitwise_or(any_bad, lax.eq(lax.reduce_max(cb, (len(lead),)), zero))
    else:
        force_nan = lax.bitwise_or(any_bad, lax.reduce_or(sorted_nan, (last,)))
    force_nan = lax.broadcast_in_dim(force_nan, _shape(out), tuple(range(len(lead))))
    return lax.select(force_nan, lax.full_like(out, np.nan), out)


def _check_supported(name, out, overwrite_input):
    if overwrite_input or out is not None:
        raise ValueError(f"jax.numpy.{name} does not support overwrite_input=True or "
                         f"out != None")


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, weights=None):
    """The ``q``-th quantiles (``q`` in [0, 1], a scalar or 1-D, as the leading result
    axis) of ``a`` over ``axis``; NaN where a slice holds a NaN."""
    _check_supported("quantile", out, overwrite_input)
    return _quantile("quantile", a, q, axis, method, keepdims, False, weights)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=False, *, weights=None):
    """``quantile`` ignoring NaNs (NaN only for all-NaN slices)."""
    _check_supported("nanquantile", out, overwrite_input)
    return _quantile("nanquantile", a, q, axis, method, keepdims, True, weights)


def _percent(q):
    q = _arr(q)
    d = _to_inexact_dtype(_dtype(q))
    return lax.div(_convert(q, d, q.aval.weak_type), lax.full((), 100, d))


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None):
    """``quantile`` with ``q`` in percent."""
    _check_arraylike("percentile", a, q)
    return quantile(a, _percent(q), axis=axis, out=out, overwrite_input=overwrite_input,
                    method=method, keepdims=keepdims, weights=weights)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                  keepdims=False, *, weights=None):
    """``nanquantile`` with ``q`` in percent."""
    _check_arraylike("nanpercentile", a, q)
    return nanquantile(a, _percent(q), axis=axis, out=out, overwrite_input=overwrite_input,
                       method=method, keepdims=keepdims, weights=weights)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median ignoring NaNs (the midpoint of the two middle values for an even count)."""
    return nanquantile(a, 0.5, axis=axis, out=out, overwrite_input=overwrite_input,
                       keepdims=keepdims, method="midpoint")
