"""Shape manipulation: reshaping, broadcasting, transposing, joining and splitting,
flipping and rolling. Each is one or a few lax shape primitives, so all of them transpose
into shape primitives too.
"""

import builtins
import math

import numpy as np

from remat import core, dtypes, lax
from remat.array import Array
from remat.core import Tracer
from remat.numpy.scalar_types import ndim
from remat.numpy.util import (
    _arr,
    _broadcast_to_shape,
    _canon,
    _canonicalize_axes,
    _canonicalize_axis,
    _check_arraylike,
    _convert,
    _promote_dtypes,
    _shape,
    _shape_arg,
    _slice_axis,
    _static_int,
    broadcast_shapes,
)
from remat.transforms.api import vmap
from remat.transforms.jit import jit

_max = builtins.max
_min = builtins.min
_any = builtins.any

__all__ = [
    "array_split", "atleast_1d", "atleast_2d", "atleast_3d", "broadcast_arrays",
    "block", "broadcast_shapes", "broadcast_to", "column_stack", "concat", "concatenate", "dsplit",
    "dstack", "expand_dims", "flip", "fliplr", "flipud", "hsplit", "hstack", "matrix_transpose",
    "moveaxis", "permute_dims", "ravel", "reshape", "roll", "rollaxis", "rot90", "row_stack",
    "split", "squeeze", "stack", "swapaxes", "tile", "transpose", "unstack", "vsplit", "vstack",
]


def _resolve_shape(newshape, size_, old_shape):
    newshape = _shape_arg(newshape, "reshape")
    neg = [i for i, d in enumerate(newshape) if d < 0]
    if _any(d < -1 for d in newshape):
        raise TypeError(f"cannot reshape array of shape {old_shape} into shape {newshape}: "
                        f"sizes must be nonnegative, or -1 for one unknown axis size")
    if len(neg) > 1:
        raise TypeError(f"can only specify one unknown axis size with a `-1` value, got "
                        f"{newshape}")
    if neg:
        known = math.prod(d for d in newshape if d >= 0)
        if known == 0 or size_ % known:
            raise TypeError(f"cannot reshape array of shape {old_shape} (size {size_}) into "
                            f"shape {newshape} because the product of specified axis sizes "
                            f"({known}) does not evenly divide {size_}")
        newshape = tuple(size_ // known if d < 0 else d for d in newshape)
    if math.prod(newshape) != size_:
        raise TypeError(f"cannot reshape array of shape {old_shape} (size {size_}) into shape "
                        f"{newshape} (size {math.prod(newshape)})")
    return newshape


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    """``a`` with a new shape (one entry may be -1); ``order='F'`` reads and writes in
    column-major order."""
    if shape is None:
        if newshape is None:
            raise TypeError("reshape() missing required argument 'shape'")
        shape = newshape
    _check_arraylike("reshape", a)
    a = _arr(a)
    old = _shape(a)
    new = _resolve_shape(shape, math.prod(old), old)
    if order in ("C", "A", None):
        return lax.reshape(a, new)
    if order == "F":
        rev_in = tuple(range(len(old)))[::-1]
        flat = lax.reshape(lax.transpose(a, rev_in), new[::-1])
        return lax.transpose(flat, tuple(range(len(new)))[::-1])
    raise ValueError(f"Unexpected value for 'order' argument: {order}.")


def ravel(a, order="C"):
    """``a`` flattened to one dimension."""
    return reshape(a, (-1,), order=order)


def squeeze(a, axis=None):
    """``a`` without its size-1 axes (all of them, or those in ``axis``)."""
    _check_arraylike("squeeze", a)
    a = _arr(a)
    s = _shape(a)
    if axis is None:
        axes = tuple(i for i, d in enumerate(s) if d == 1)
    else:
        axes = _canonicalize_axes(axis, len(s))
    return lax.squeeze(a, axes)


def expand_dims(a, axis):
    """``a`` with size-1 axes inserted at ``axis`` (positions in the result)."""
    _check_arraylike("expand_dims", a)
    a = _arr(a)
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    out_ndim = a.ndim + len(axes)
    axes = _canonicalize_axes(axes, out_ndim)
    return lax.expand_dims(a, axes)


def broadcast_to(array, shape):
    """``array`` broadcast to ``shape`` (NumPy rules; ValueError when it does not fit)."""
    _check_arraylike("broadcast_to", array)
    x = _arr(array)
    shape = _shape_arg(shape, "broadcast_to")
    s = _shape(x)
    if s == shape:
        return x
    lead = len(shape) - len(s)
    if lead < 0 or _any(d not in (1, t) for d, t in zip(s, shape[lead:])):
        raise ValueError(f"Incompatible shapes for broadcasting: {s} and requested shape "
                         f"{shape}")
    return lax.broadcast_in_dim(x, shape, tuple(range(lead, len(shape))))


def broadcast_arrays(*args):
    """``args`` broadcast to their common shape."""
    _check_arraylike("broadcast_arrays", *args)
    args = [_arr(x) for x in args]
    s = broadcast_shapes(*(_shape(x) for x in args))
    return [_broadcast_to_shape(x, s) for x in args]


def _is_array(arrays):
    """An array (not a sequence of them): ``concatenate`` and the stacks join its slices."""
    return isinstance(arrays, (np.ndarray, Array, Tracer))


def _as_array_list(arrays, name):
    arrays = list(arrays)
    _check_arraylike(name, *arrays)
    return arrays


def _concatenate_array(arr, axis, dtype):
    """``concatenate`` of one array's leading slices: a single reshape, as JAX stages it."""
    arr = _arr(arr) if dtype is None else _convert(_arr(arr), _canon(dtype))
    s = _shape(arr)
    if not s or s[0] == 0:
        raise ValueError("Need at least one array to concatenate.")
    if axis is None:
        return lax.reshape(arr, (math.prod(s),))
    if len(s) == 1:
        raise ValueError("Zero-dimensional arrays cannot be concatenated.")
    axis = _canonicalize_axis(axis, len(s) - 1)
    joined = s[1:axis + 1] + (s[0] * s[axis + 1],) + s[axis + 2:]
    return lax.reshape(arr, joined, (*range(1, axis + 1), 0, *range(axis + 1, len(s))))


def concatenate(arrays, axis=0, dtype=None):
    """Join ``arrays`` along an existing ``axis`` (``axis=None`` flattens them first)."""
    if _is_array(arrays):
        return _concatenate_array(arrays, axis, dtype)
    arrays = _as_array_list(arrays, "concatenate")
    if not arrays:
        raise ValueError("Need at least one array to concatenate.")
    if axis is None:
        return concatenate([ravel(a) for a in arrays], 0, dtype)
    arrays = [_arr(a) for a in arrays]
    if _any(_shape(a) == () for a in arrays):
        raise ValueError("Zero-dimensional arrays cannot be concatenated.")
    nd = len(_shape(arrays[0]))
    if _any(len(_shape(a)) != nd for a in arrays):
        raise TypeError("Cannot concatenate arrays with different numbers of dimensions: got "
                        + ", ".join(str(_shape(a)) for a in arrays) + ".")
    axis = _canonicalize_axis(axis, nd)
    if dtype is None:
        arrays = _promote_dtypes(*arrays)
    else:
        arrays = [_convert(a, _canon(dtype)) for a in arrays]
    for a in arrays[1:]:
        s0, s = _shape(arrays[0]), _shape(a)
        if s0[:axis] + s0[axis + 1:] != s[:axis] + s[axis + 1:]:
            raise TypeError(f"Cannot concatenate arrays with shapes that differ in dimensions "
                            f"other than the one being concatenated: concatenating along "
                            f"dimension {axis} for shapes "
                            + ", ".join(str(_shape(x)) for x in arrays) + ".")
    return lax.concatenate(arrays, axis)


concat = concatenate


def stack(arrays, axis=0, out=None, dtype=None):
    """Join ``arrays`` (all of one shape) along a new ``axis``: one ``stack`` primitive (an
    array's leading slices: a ``concatenate`` of it with an axis added, as in JAX)."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.stack is not supported.")
    if _is_array(arrays):
        if not _shape(arrays):
            raise TypeError("len() of unsized object")
        if not _shape(arrays)[0]:
            raise ValueError("Need at least one array to stack.")
        axis = _canonicalize_axis(axis, np.ndim(arrays))
        return concatenate(expand_dims(arrays, axis + 1), axis, dtype)
    arrays = _as_array_list(arrays, "stack")
    if not arrays:
        raise ValueError("Need at least one array to stack.")
    arrays = [_arr(a) for a in arrays]
    axis = _canonicalize_axis(axis, len(_shape(arrays[0])) + 1)
    if dtype is None:
        arrays = _promote_dtypes(*arrays)
    else:
        arrays = [_convert(a, _canon(dtype)) for a in arrays]
    return lax.stack(arrays, axis)  # its shape errors are JAX's


def _with_leading_axes(a, rank):
    """``a`` with size-1 axes put in front up to ``rank`` dimensions (a ``broadcast_in_dim``)."""
    a = _arr(a)
    return lax.expand_dims(a, tuple(range(rank - a.ndim))) if a.ndim < rank else a


def _atleast_3d(a):
    a = _arr(a)
    missing = {0: (0, 1, 2), 1: (0, 2), 2: (2,)}.get(a.ndim, ())
    return lax.expand_dims(a, missing) if missing else a


@jit
def atleast_1d(*arys):
    """Each argument with at least one dimension (staged under ``jit``, as in JAX)."""
    _check_arraylike("atleast_1d", *arys)
    out = [_with_leading_axes(a, 1) for a in arys]
    return out[0] if len(out) == 1 else out


@jit
def atleast_2d(*arys):
    """Each argument with at least two dimensions (1-D becomes a row; staged under ``jit``,
    as in JAX)."""
    _check_arraylike("atleast_2d", *arys)
    out = [_with_leading_axes(a, 2) for a in arys]
    return out[0] if len(out) == 1 else out


@jit
def atleast_3d(*arys):
    """Each argument with at least three dimensions (a vector ``v`` becomes ``v[None, :,
    None]``, a matrix ``m`` becomes ``m[:, :, None]``; staged under ``jit``, as in JAX)."""
    _check_arraylike("atleast_3d", *arys)
    out = [_atleast_3d(a) for a in arys]
    return out[0] if len(out) == 1 else out


def _at_least(name, tup, atleast):
    """``tup``'s arrays raised to ``atleast``'s rank (an array: each of its rows)."""
    if _is_array(tup):
        return vmap(atleast)(tup)
    _check_arraylike(name, *tup)
    return [atleast(a) for a in tup]


def hstack(tup, dtype=None):
    """Stack along the second axis (the first for 1-D arrays)."""
    arrs = _at_least("hstack", tup, atleast_1d)
    if _is_array(tup):
        first_ndim = arrs.ndim - 1
    else:
        first_ndim = arrs[0].ndim if arrs else 1
    return concatenate(arrs, 0 if first_ndim == 1 else 1, dtype)


def vstack(tup, dtype=None):
    """Stack along the first axis (1-D arrays become rows)."""
    return concatenate(_at_least("vstack", tup, atleast_2d), 0, dtype)


row_stack = vstack


def dstack(tup, dtype=None):
    """Stack along the third axis."""
    return concatenate(_at_least("dstack", tup, atleast_3d), 2, dtype)


def column_stack(tup):
    """Stack 1-D arrays as columns (2-D arrays as they are)."""
    if _is_array(tup):
        arrs = vmap(lambda x: atleast_2d(x).T)(tup) if np.ndim(tup) < 3 else tup
    else:
        _check_arraylike("column_stack", *tup)
        arrs = [atleast_2d(a).T if np.ndim(a) < 2 else a for a in map(_arr, tup)]
    return concatenate(arrs, 1)


def _split(name, ary, indices_or_sections, axis, even):
    _check_arraylike(name, ary)
    ary = _arr(ary)
    axis = _canonicalize_axis(axis, ary.ndim)
    n = _shape(ary)[axis]
    if np.ndim(indices_or_sections) == 0 and not isinstance(indices_or_sections, (list, tuple)):
        sections = _static_int(indices_or_sections, "indices_or_sections")
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        if even and n % sections:
            raise ValueError(f"array split does not result in an equal division: rest is "
                             f"{n % sections}")
        q, r = builtins.divmod(n, sections)
        bounds = [0]
        for i in range(sections):
            bounds.append(bounds[-1] + q + (1 if i < r else 0))
    else:
        idx = [_static_int(i, "indices_or_sections") for i in
               np.asarray(core.concrete_or_error(indices_or_sections,
                                                 f"{name} indices must be static")).ravel()]
        bounds = [0] + [_min(_max(i if i >= 0 else i + n, 0), n) for i in idx] + [n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        out.append(_slice_axis(ary, axis, lo, _max(lo, hi)))
    return out


def split(ary, indices_or_sections, axis=0):
    """Split into equal sections or at the given indices."""
    return _split("split", ary, indices_or_sections, axis, True)


def array_split(ary, indices_or_sections, axis=0):
    """Split into sections whose sizes differ by at most one."""
    return _split("array_split", ary, indices_or_sections, axis, False)


def hsplit(ary, indices_or_sections):
    """Split along the second axis (the first for 1-D arrays)."""
    return split(ary, indices_or_sections, 0 if ndim(ary) == 1 else 1)


def vsplit(ary, indices_or_sections):
    """Split along the first axis."""
    return split(ary, indices_or_sections, 0)


def dsplit(ary, indices_or_sections):
    """Split along the third axis."""
    return split(ary, indices_or_sections, 2)


def tile(A, reps):
    """``A`` repeated ``reps`` times along each axis."""
    _check_arraylike("tile", A)
    a = _arr(A)
    reps = (reps,) if np.ndim(reps) == 0 else tuple(reps)
    reps = tuple(_static_int(r, "reps") for r in reps)
    s = _shape(a)
    nd = _max(len(s), len(reps))
    s = (1,) * (nd - len(s)) + s
    reps = (1,) * (nd - len(reps)) + reps
    a = lax.reshape(a, s)
    interleaved = tuple(v for pair in zip(reps, s) for v in pair)
    b = lax.broadcast_in_dim(a, interleaved, tuple(range(1, 2 * nd, 2)))
    return lax.reshape(b, tuple(r * d for r, d in zip(reps, s)))


def flip(m, axis=None):
    """``m`` reversed along ``axis`` (all axes by default)."""
    _check_arraylike("flip", m)
    m = _arr(m)
    axes = tuple(range(m.ndim)) if axis is None else _canonicalize_axes(axis, m.ndim)
    return lax.rev(m, axes) if axes else m


def fliplr(m):
    """Reverse the second axis."""
    m = _arr(m)
    if m.ndim < 2:
        raise ValueError("fliplr requires an array of at least 2 dimensions")
    return flip(m, 1)


def flipud(m):
    """Reverse the first axis."""
    m = _arr(m)
    if m.ndim < 1:
        raise ValueError("flipud requires an array of at least 1 dimension")
    return flip(m, 0)


def roll(a, shift, axis=None):
    """Shift elements cyclically along ``axis`` (the flattened array by default)."""
    _check_arraylike("roll", a)
    a = _arr(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), _shape(a))
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    shifts = (shift,) if np.ndim(shift) == 0 else tuple(shift) if not hasattr(shift, "aval") \
        else [shift[i] for i in range(_shape(shift)[0])]
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(axes) == 1 and len(shifts) > 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        raise ValueError("shift and axis must have the same length")
    for sh, ax in zip(shifts, axes):
        ax = _canonicalize_axis(ax, a.ndim)
        n = _shape(a)[ax]
        if n == 0:
            continue
        if isinstance(sh, Tracer) and sh.concrete_value() is None:
            sh = _convert(sh, dtypes.int32)
            nn = lax.full((), n, dtypes.int32)
            start = lax.rem(lax.sub(nn, lax.rem(lax.add(lax.rem(sh, nn), nn), nn)), nn)
            doubled = lax.concatenate([a, a], ax)
            starts = [lax.full((), 0, dtypes.int32)] * a.ndim
            starts[ax] = start
            a = lax.dynamic_slice(doubled, starts, _shape(a))
        else:
            k = _static_int(sh, "shift") % n
            if k:
                a = lax.concatenate([_slice_axis(a, ax, n - k, n), _slice_axis(a, ax, 0, n - k)],
                                    ax)
    return a


def rot90(m, k=1, axes=(0, 1)):
    """Rotate by 90 degrees ``k`` times in the plane of ``axes``."""
    m = _arr(m)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    ax0, ax1 = (_canonicalize_axis(a, m.ndim) for a in axes)
    if ax0 == ax1:
        raise ValueError("Axes must be different.")
    k = _static_int(k, "k") % 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, ax0), ax1)
    perm = list(range(m.ndim))
    perm[ax0], perm[ax1] = perm[ax1], perm[ax0]
    if k == 1:
        return transpose(flip(m, ax1), perm)
    return flip(transpose(m, perm), ax1)


def transpose(a, axes=None):
    """Permute the axes (reverse them by default)."""
    _check_arraylike("transpose", a)
    a = _arr(a)
    if axes is None:
        axes = tuple(range(a.ndim))[::-1]
    else:  # a wrong count or a repeated axis: lax.transpose's TypeError, as in JAX
        axes = tuple(_canonicalize_axis(i, a.ndim) for i in axes)
    return lax.transpose(a, axes)


permute_dims = transpose


def matrix_transpose(x, /):
    """Swap the last two axes."""
    x = _arr(x)
    if x.ndim < 2:
        raise ValueError(f"x must be at least two-dimensional for matrix_transpose; got "
                         f"ndim={x.ndim}")
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return lax.transpose(x, tuple(perm))


def swapaxes(a, axis1, axis2):
    """Interchange two axes."""
    a = _arr(a)
    perm = list(range(a.ndim))
    i, j = _canonicalize_axis(axis1, a.ndim), _canonicalize_axis(axis2, a.ndim)
    perm[i], perm[j] = perm[j], perm[i]
    return lax.transpose(a, tuple(perm))


def moveaxis(a, source, destination):
    """Move axes ``source`` to positions ``destination`` (the others keep their order)."""
    a = _arr(a)
    src = _canonicalize_axes(source, a.ndim, "source")
    dst = _canonicalize_axes(destination, a.ndim, "destination")
    if len(src) != len(dst):
        raise ValueError(f"Inconsistent number of elements: {len(src)} vs {len(dst)}")
    perm = [i for i in range(a.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        perm.insert(d, s)
    return lax.transpose(a, tuple(perm))


def rollaxis(a, axis, start=0):
    """Move ``axis`` to just before ``start``."""
    a = _arr(a)
    axis = _canonicalize_axis(axis, a.ndim)
    start = _canonicalize_axis(start, a.ndim + 1)
    if start > axis:
        start -= 1
    return moveaxis(a, axis, start)


def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple (one ``unstack`` primitive)."""
    _check_arraylike("unstack", x)
    x = _arr(x)
    return tuple(lax.unstack(x, axis))


def _block(xs):
    """``block`` of a nested list: (the joined array, the list depth)."""
    if isinstance(xs, tuple):
        raise ValueError(f"jax.numpy.block does not allow tuples, got {xs}")
    if not isinstance(xs, list):
        _check_arraylike("block", xs)
        return _arr(xs), 1
    if not xs:
        raise ValueError("jax.numpy.block does not allow empty list arguments")
    parts = [_block(x) for x in xs]
    depth = parts[0][1]
    if _any(d != depth for _, d in parts):
        raise ValueError("Mismatched list depths in jax.numpy.block")
    rank = _max(depth, _max(p.ndim for p, _ in parts))
    arrays = [_with_leading_axes(p, rank) for p, _ in parts]
    return concatenate(arrays, axis=-depth), depth + 1


@jit
def block(arrays):
    """An array assembled from nested lists of blocks: the innermost lists join along the
    last axis, the next ones along the second-to-last, and so on (NumPy's ``block``; staged
    under ``jit``, as in JAX)."""
    return _block(arrays)[0]
