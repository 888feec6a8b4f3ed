"""Array-structure primitives — ``split``, ``tile``, ``stack`` and ``unstack`` (each with its
impl, abstract eval, transpose and batching rules: all are linear) — and the helpers written on
the shape primitives: ``collapse``, ``broadcast_to_rank``, ``broadcast_like``,
``broadcast_shapes``, ``empty``, ``dtype`` and ``shape_as_value``."""

import math
import operator

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.elementwise import convert_element_type
from remat.lax.reductions import reduce_sum
from remat.lax.shape import broadcast, broadcast_in_dim, concatenate, full, reshape
from remat.lax.standard import canonical_shape, check_same_dtypes, standard_primitive

__all__ = [
    "broadcast_like",
    "broadcast_shapes",
    "broadcast_to_rank",
    "collapse",
    "dtype",
    "empty",
    "shape_as_value",
    "split",
    "split_p",
    "stack",
    "stack_p",
    "tile",
    "tile_p",
    "unstack",
    "unstack_p",
]


def _canonical_axis(axis, ndim):
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim


def _instantiate(cts):
    return [ad.instantiate_zeros(c) for c in cts]


# --- split -----------------------------------------------------------------------------------


def _split_abstract_eval(x, *, sizes, axis):
    if any(s < 0 for s in sizes):
        raise ValueError(f"Sizes passed to split must be nonnegative, got {list(sizes)}")
    if not 0 <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {x.ndim}")
    if x.shape[axis] != sum(sizes):
        raise ValueError(f"Sum of sizes {sum(sizes)} must be equal to dimension {axis} of the "
                         f"operand shape {list(x.shape)}")
    return [ShapedArray(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.dtype, x.weak_type)
            for s in sizes]


def _split_impl(x, *, sizes, axis):
    return np.split(x, np.cumsum(sizes[:-1], dtype=np.int64), axis=axis) if sizes else []


split_p = standard_primitive("split", _split_impl, _split_abstract_eval,
                             multiple_results=True)


def _split_transpose(cts, x, *, sizes, axis):
    if all(type(c) is ad.Zero for c in cts):
        return [None]
    return [concatenate(_instantiate(cts), axis)]


def _split_batch(vals, dims, *, sizes, axis):
    (x,), (d,) = vals, dims
    return split_p.bind(x, sizes=sizes, axis=axis + (axis >= d)), [d] * len(sizes)


ad.deflinear2(split_p, _split_transpose)
batching.primitive_batchers[split_p] = _split_batch


def split(operand, sizes, axis=0):
    """``operand`` cut along ``axis`` into consecutive pieces of the given ``sizes``."""
    sizes = tuple(operator.index(s) for s in sizes)
    axis = _canonical_axis(axis, core.get_aval(operand).ndim)
    return split_p.bind(operand, sizes=sizes, axis=axis)


# --- tile ------------------------------------------------------------------------------------


def _tile_abstract_eval(x, *, reps):
    if x.ndim != len(reps):
        raise TypeError(f"reps length must be equal to the ndim of x, got len(reps)="
                        f"{len(reps)} and x.ndim={x.ndim}.")
    if any(r < 0 for r in reps):
        raise TypeError(f"tile reps must be nonnegative, got {reps}")
    return ShapedArray(tuple(d * r for d, r in zip(x.shape, reps)), x.dtype, x.weak_type)


tile_p = standard_primitive("tile", lambda x, *, reps: np.tile(x, reps), _tile_abstract_eval)


def _tile_transpose(ct, x, *, reps):
    shape = x.aval.shape
    pairs = tuple(k for pair in zip(reps, shape) for k in pair)
    return [reduce_sum(reshape(ct, pairs), tuple(range(0, 2 * len(shape), 2)))]


def _tile_batch(vals, dims, *, reps):
    (x,), (d,) = vals, dims
    return tile_p.bind(x, reps=reps[:d] + (1,) + reps[d:]), d


ad.deflinear2(tile_p, _tile_transpose)
batching.primitive_batchers[tile_p] = _tile_batch


def tile(operand, reps):
    """``operand`` repeated ``reps[i]`` times along each dimension ``i``."""
    return tile_p.bind(operand, reps=tuple(operator.index(r) for r in reps))


# --- stack / unstack -------------------------------------------------------------------------


def _stack_abstract_eval(*xs, axis):
    if not xs:
        raise ValueError("stack expects at least one operand, got 0.")
    if len({x.ndim for x in xs}) != 1:
        raise ValueError(f"Cannot stack arrays with different numbers of dimensions: got "
                         f"{', '.join(str(x.shape) for x in xs)}.")
    if len({x.shape for x in xs}) != 1:
        raise ValueError(f"All input arrays must have the same shape. Got "
                         f"{', '.join(str(x.shape) for x in xs)}.")
    check_same_dtypes("stack", xs)
    if not 0 <= axis <= xs[0].ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension "
                         f"{xs[0].ndim + 1}")
    shape = list(xs[0].shape)
    shape.insert(axis, len(xs))
    return ShapedArray(shape, xs[0].dtype, all(x.weak_type for x in xs))


stack_p = standard_primitive("stack", lambda *xs, axis: np.stack(xs, axis=axis),
                             _stack_abstract_eval)


def _unstack_abstract_eval(x, *, axis):
    if not x.shape:
        raise ValueError(f"unstack requires arrays with rank > 0, however a scalar array of "
                         f"shape {x.shape} was passed.")
    if not 0 <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {x.ndim}")
    shape = x.shape[:axis] + x.shape[axis + 1:]
    return [ShapedArray(shape, x.dtype, x.weak_type)] * x.shape[axis]


unstack_p = standard_primitive(
    "unstack", lambda x, *, axis: list(np.moveaxis(x, axis, 0)), _unstack_abstract_eval,
    multiple_results=True)


def _stack_transpose(ct, *xs, axis):
    return unstack_p.bind(ct, axis=axis)


def _unstack_transpose(cts, x, *, axis):
    if all(type(c) is ad.Zero for c in cts):
        return [None]
    return [stack_p.bind(*_instantiate(cts), axis=axis)]


def _stack_batch(vals, dims, *, axis):
    d = dims[0]
    if d is not batching.not_mapped and all(e == d for e in dims):
        if axis <= d:
            return stack_p.bind(*vals, axis=axis), d + 1
        return stack_p.bind(*vals, axis=axis + 1), d
    size = batching.axis_size_of(vals, dims)
    xs = [batching.bdim_at_front(x, e, size) for x, e in zip(vals, dims)]
    return stack_p.bind(*xs, axis=axis + 1), 0


def _unstack_batch(vals, dims, *, axis):
    (x,), (d,) = vals, dims
    if axis < d:
        outs = unstack_p.bind(x, axis=axis)
        return outs, [d - 1] * len(outs)
    outs = unstack_p.bind(x, axis=axis + 1)
    return outs, [d] * len(outs)


ad.deflinear2(stack_p, _stack_transpose)
ad.deflinear2(unstack_p, _unstack_transpose)
batching.primitive_batchers[stack_p] = _stack_batch
batching.primitive_batchers[unstack_p] = _unstack_batch


def stack(operands, axis=0):
    """Join arrays of one shape along a new ``axis``."""
    operands = list(operands)
    if not operands:
        raise ValueError("stack expects at least one operand, got 0.")
    axis = _canonical_axis(axis, core.get_aval(operands[0]).ndim + 1)
    return stack_p.bind(*operands, axis=axis)


def unstack(x, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple of arrays."""
    axis = _canonical_axis(axis, core.get_aval(x).ndim) if core.get_aval(x).ndim else axis
    return tuple(unstack_p.bind(x, axis=axis))


# --- helpers on the shape primitives ---------------------------------------------------------


def collapse(operand, start_dimension, stop_dimension=None):
    """``operand`` with dims ``[start_dimension, stop_dimension)`` merged into one
    (row-major)."""
    shape = core.get_aval(operand).shape
    lo, hi, _ = slice(start_dimension, stop_dimension).indices(len(shape))
    if hi < lo:
        raise ValueError(f"Invalid dimension range passed to collapse: {shape}"
                         f"[{start_dimension}:{stop_dimension}]")
    return reshape(operand, shape[:lo] + (math.prod(shape[lo:hi]),) + shape[hi:])


def broadcast_to_rank(x, rank):
    """``x`` with leading size-1 dims added up to ``rank``."""
    aval = core.get_aval(x)
    if aval.ndim == rank and not hasattr(x, "aval"):  # a NumPy or Python value: as an array
        return convert_element_type(x, aval.dtype, aval.weak_type)
    return broadcast(x, (1,) * (rank - aval.ndim))


def broadcast_shapes(*shapes):
    """The NumPy broadcast of ``shapes`` (ValueError when they do not broadcast)."""
    shapes = [tuple(canonical_shape(s, "broadcast_shapes shape")) for s in shapes]
    if not shapes:
        return ()
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + s for s in shapes]
    out = []
    for sizes in zip(*padded):
        big = {d for d in sizes if d != 1}
        if len(big) > 1:
            raise ValueError(f"Incompatible shapes for broadcasting: shapes={shapes}")
        out.append(big.pop() if big else 1)
    return tuple(out)


def broadcast_like(arr, like_arr):
    """``arr`` broadcast (NumPy-style, trailing dims aligned) to the shape of ``like_arr``."""
    shape = core.get_aval(like_arr).shape
    aval = core.get_aval(arr)
    out = broadcast_shapes(aval.shape, shape)
    if out != shape:
        raise ValueError(f"Incompatible shapes for broadcasting: {aval.shape} cannot be "
                         f"broadcast to {shape}")
    lead = len(shape) - aval.ndim
    kept = tuple(i for i, d in enumerate(aval.shape) if d == shape[lead + i])
    squeezed = reshape(arr, tuple(aval.shape[i] for i in kept)) \
        if len(kept) != aval.ndim else arr
    return broadcast_in_dim(squeezed, shape, tuple(lead + i for i in kept))


def empty(shape, dtype, *, out_sharding=None):
    """An array of ``shape`` and ``dtype`` whose values are unspecified (zeros here)."""
    shape = canonical_shape(shape if isinstance(shape, (tuple, list)) else (shape,),
                            "empty shape")
    return full(shape, 0, dtype)


_SCALAR_TYPES = {bool: np.bool_, int: np.int64, float: np.float64, complex: np.complex128}


def dtype(x):
    """The dtype of a value or type: Python scalars and types take the default (canonical)
    dtypes; arrays keep theirs."""
    if x is None:
        raise ValueError(f"Invalid argument to dtype: {x}.")
    if isinstance(x, type) and x in _SCALAR_TYPES:
        return dtypes.canonicalize_dtype(_SCALAR_TYPES[x])
    if type(x) in _SCALAR_TYPES:
        return dtypes.python_scalar_dtype(x)
    aval = getattr(x, "aval", None)
    if aval is not None:
        return aval.dtype
    if hasattr(x, "dtype") and not isinstance(x, type):
        return dtypes.canonicalize_dtype(x.dtype)
    try:
        return dtypes.canonicalize_dtype(np.dtype(x))
    except TypeError:
        raise TypeError(f"Cannot determine dtype of {x}") from None


def shape_as_value(shape):
    """``shape`` as an integer array (int32, or int64 where a dimension needs it)."""
    shape = canonical_shape(shape, "shape_as_value shape")
    big = any(d > np.iinfo(np.int32).max for d in shape)
    dtype = dtypes.canonicalize_dtype(np.int64 if big else np.int32)
    return convert_element_type(np.asarray(shape, dtype).reshape(len(shape)), dtype)
