"""Array edits that change the number of elements: ``repeat append insert delete
resize trim_zeros``.
"""

import builtins
import math

import numpy as np

from remat import core, dtypes, lax
from remat.core import Tracer
from remat.numpy.selection import take
from remat.numpy.shapes import broadcast_to, concatenate, moveaxis, ravel, tile
from remat.numpy.util import (
    _arr,
    _canonicalize_axes,
    _canonicalize_axis,
    _check_arraylike,
    _convert,
    _dtype,
    _shape,
    _slice_axis,
    _static_int,
    _take_static,
    _weak,
    array,
    broadcast_shapes,
)

_max = builtins.max
_sum = builtins.sum
_any = builtins.any

__all__ = ["append", "delete", "insert", "repeat", "resize", "trim_zeros"]


def repeat(a, repeats, axis=None, *, total_repeat_length=None):
    """Repeat each element ``repeats`` times (a scalar or one count per element; traced counts
    need a static ``total_repeat_length``)."""
    _check_arraylike("repeat", a)
    a = _arr(a)
    if axis is None:
        a = ravel(a)
        axis = 0
    axis = _canonicalize_axis(axis, a.ndim)
    s = _shape(a)
    n = s[axis]
    if isinstance(repeats, Tracer) and repeats.concrete_value() is None:
        if total_repeat_length is None:
            raise core.ConcretizationTypeError(
                repeats, "jnp.repeat with a traced repeats argument requires the static "
                "total_repeat_length argument.")
        return _repeat_traced(a, repeats, axis, total_repeat_length)
    reps = np.asarray(core.concrete_or_error(repeats, "repeats must be static"))
    if reps.ndim == 0 or reps.size == 1:
        r = int(reps.reshape(()))
        if r < 0:
            raise ValueError("repeats may not contain negative values.")
        out = lax.broadcast_in_dim(a, s[:axis + 1] + (r,) + s[axis + 1:],
                                   tuple(i if i <= axis else i + 1 for i in range(len(s))))
        out = lax.reshape(out, s[:axis] + (n * r,) + s[axis + 1:])
    else:
        if reps.shape != (n,):
            raise ValueError(f"repeats has shape {reps.shape} but the axis has length {n}")
        if (reps < 0).any():
            raise ValueError("repeats may not contain negative values.")
        idx = np.repeat(np.arange(n), reps)
        out = _take_static(a, idx, axis)
    if total_repeat_length is not None:
        out = _fit_length(out, axis, total_repeat_length)
    return out


def _fit_length(x, axis, length):
    n = _shape(x)[axis]
    if n >= length:
        return _slice_axis(x, axis, 0, length)
    last = _slice_axis(x, axis, n - 1, n) if n else lax.full(
        _shape(x)[:axis] + (1,) + _shape(x)[axis + 1:], 0, _dtype(x))
    reps = [1] * x.ndim
    reps[axis] = length - n
    return lax.concatenate([x, tile(last, reps)], axis)


def _repeat_traced(a, repeats, axis, total):
    """Repeat with traced counts: output slot j takes element ``#{i: cumsum(r)[i] <= j}``."""
    n = _shape(a)[axis]
    reps = _convert(broadcast_to(repeats, (n,)), dtypes.int32)
    ends = lax.cumsum(reps, 0)
    slots = lax.broadcasted_iota(dtypes.int32, (n, total), 1)
    past = lax.le(lax.broadcast_in_dim(ends, (n, total), (0,)), slots)
    idx = lax.reduce_sum(_convert(past, dtypes.int32), (0,))
    idx = lax.min(idx, lax.full((), _max(n - 1, 0), dtypes.int32))
    return take(a, idx, axis=axis)


def append(arr, values, axis=None):
    """``values`` appended to ``arr`` (both flattened when ``axis`` is None)."""
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], 0)
    return concatenate([arr, values], axis)


def insert(arr, obj, values, axis=None):
    """``values`` inserted before the positions ``obj`` (an int, a slice or a 1-D integer
    array, which may be traced) along ``axis`` (the flattened array by default). The result
    is one gather from ``arr`` and ``values`` joined, ordered by a stable sort of where each
    element lands."""
    _check_arraylike("insert", arr, values)
    a = _arr(arr)
    if axis is None:
        a = ravel(a)
        axis = 0
    axis = _canonicalize_axis(core.concrete_or_error(axis, "axis argument of jnp.insert()"),
                              a.ndim)
    n = _shape(a)[axis]
    if isinstance(obj, slice):
        indices = _arr(np.arange(*obj.indices(n), dtype=np.int32))
    else:
        _check_arraylike("insert", obj)
        indices = _arr(obj)
    if indices.ndim > 1:
        raise ValueError(f"jnp.insert(): obj must be a slice, a one-dimensional array, or a "
                         f"scalar; got {obj}")
    if not dtypes.is_integer(_dtype(indices)):
        if _shape(indices) == (0,) and not hasattr(obj, "aval"):
            indices = _convert(indices, dtypes.int32)
        else:
            raise ValueError(f"jnp.insert(): index array must be integer typed; got {obj}")
    values = array(values, dtype=_dtype(a), ndmin=a.ndim)
    if math.prod(_shape(indices)) == 1:
        scalar_index = indices.ndim == 0
        index = lax.reshape(indices, ())
        if scalar_index:
            values = moveaxis(values, 0, axis)
        indices = lax.broadcast_in_dim(index, (_shape(values)[axis],), ())
    n_insert = broadcast_shapes(_shape(indices), (_shape(values)[axis],))[0]
    values = broadcast_to(values, _shape(a)[:axis] + (n_insert,) + _shape(a)[axis + 1:])
    d = _dtype(indices)
    indices = lax.select(lax.lt(indices, lax.full((), 0, d)),
                         lax.add(indices, lax.full((), n, d)), indices)
    indices = lax.clamp(lax.full((), 0, d), indices, lax.full((), n, d))
    indices = broadcast_to(_convert(indices, dtypes.int32), (n_insert,))
    # every element lands by its key: original element i at 2i + 1, an inserted value just
    # before position p at 2p (ties between inserted values keep their order: stable sort)
    two = lax.full((), 2, dtypes.int32)
    keys = lax.concatenate([lax.add(lax.mul(lax.iota(dtypes.int32, n), two),
                                    lax.full((), 1, dtypes.int32)),
                            lax.mul(indices, two)], 0)
    order = lax.sort((keys, lax.iota(dtypes.int32, n + n_insert)), dimension=0,
                     num_keys=1)[1]
    joined = lax.concatenate([a, _convert(values, _dtype(a), _weak(a))], axis)
    return take(joined, order, axis=axis, mode="clip")


def delete(arr, obj, axis=None, *, assume_unique_indices=False):
    """``arr`` without the entries ``obj`` (an int, a slice, integer indices or a boolean
    mask) along ``axis`` (the flattened array by default). Index arrays must be concrete
    unless ``assume_unique_indices`` promises they have no duplicates."""
    _check_arraylike("delete", arr)
    a = _arr(arr)
    if axis is None:
        a = ravel(a)
        axis = 0
    axis = _canonicalize_axis(axis, a.ndim)
    n = _shape(a)[axis]
    if isinstance(obj, slice):
        keep = np.ones(n, dtype=bool)
        keep[obj] = False
        return _take_static(a, np.flatnonzero(keep), axis)
    if not hasattr(obj, "aval") and np.ndim(obj) == 0 and \
            dtypes.kind(np.asarray(obj).dtype) in "iu":
        i = _canonicalize_axis(int(obj), n)
        return concatenate([_slice_axis(a, axis, 0, i), _slice_axis(a, axis, i + 1, n)], axis)
    _check_arraylike("delete", obj)
    obj_arr = _arr(obj)
    if dtypes.is_integer(_dtype(obj_arr)) and assume_unique_indices:
        return _delete_unique(a, ravel(obj_arr), axis)
    concrete = np.asarray(core.concrete_or_error(obj, "'obj' array argument of jnp.delete()"))
    if dtypes.kind(concrete.dtype) in "iu":
        keep = np.ones(n, dtype=bool)
        keep[concrete] = False
    elif concrete.dtype == np.bool_:
        if concrete.shape != (n,):
            raise ValueError("np.delete(arr, obj): for boolean indices, obj must be "
                             "one-dimensional with length matching specified axis.")
        keep = ~concrete
    else:
        raise ValueError(f"np.delete(arr, obj): got obj.dtype={concrete.dtype}; must be "
                         f"integer or bool.")
    return _take_static(a, np.flatnonzero(keep), axis)


def _delete_unique(a, obj, axis):
    """``delete`` of distinct (possibly traced) indices: the k-th kept element is the
    smallest i whose count of deleted indices at or below it is i - k."""
    n = _shape(a)[axis]
    m = _shape(obj)[0]
    d = dtypes.int32
    obj = _convert(obj, d)
    obj = lax.select(lax.lt(obj, lax.full((), 0, d)), lax.add(obj, lax.full((), n, d)), obj)
    obj = lax.clamp(lax.full((), 0, d), obj, lax.full((), n, d))
    obj = lax.sub(lax.sort(obj, dimension=0), lax.iota(d, m))
    kept = lax.iota(d, n - m)
    below = lax.ge(lax.broadcast_in_dim(kept, (m, n - m), (1,)),
                   lax.broadcast_in_dim(obj, (m, n - m), (0,)))
    kept = lax.add(kept, lax.reduce_sum(_convert(below, d), (0,)))
    return take(a, kept, axis=axis, mode="clip")


def resize(a, new_shape):
    """``a`` flattened, repeated cyclically and cut to ``new_shape``."""
    _check_arraylike("resize", a)
    new_shape = (new_shape,) if np.ndim(new_shape) == 0 else tuple(new_shape)
    new_shape = tuple(_static_int(d, "new_shape") for d in new_shape)
    if _any(d < 0 for d in new_shape):
        raise ValueError("all elements of `new_shape` must be non-negative")
    flat = ravel(a)
    n, new_size = _shape(flat)[0], math.prod(new_shape)
    if n == 0 or new_size == 0:
        return lax.full(new_shape, 0, _dtype(flat))
    flat = _slice_axis(tile(flat, -(-new_size // n)), 0, 0, new_size)
    return lax.reshape(flat, new_shape)


def trim_zeros(filt, trim="fb", axis=None):
    """``filt`` without its leading ('f') and/or trailing ('b') zeros along ``axis`` (all
    axes by default: the bounding box of the nonzeros). Needs a concrete ``filt``: the
    result's shape depends on its values."""
    _check_arraylike("trim_zeros", filt)
    filt = _arr(filt)
    value = np.asarray(core.concrete_or_error(
        filt, "Error arose in the `filt` argument of trim_zeros()"))
    axes = range(filt.ndim) if axis is None else _canonicalize_axes(axis, filt.ndim)
    trim = trim.lower()
    if "f" not in trim and "b" not in trim:
        return filt
    for ax in axes:
        other = tuple(i for i in range(filt.ndim) if i != ax)
        nonzero = np.flatnonzero(value.any(axis=other) if other else value)
        if not nonzero.size:
            start = stop = 0
        else:
            start = int(nonzero[0]) if "f" in trim else 0
            stop = int(nonzero[-1]) + 1 if "b" in trim else _shape(filt)[ax]
        filt = _slice_axis(filt, ax, start, stop)
    return filt
