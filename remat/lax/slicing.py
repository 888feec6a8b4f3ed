"""Slicing primitives: slice, dynamic_slice, dynamic_update_slice, gather and the scatters —
with their impls, abstract evals, JVP, transpose and batching rules.

Gather and scatter follow XLA's semantics as JAX exposes them (the index vector is always the
last dimension of the indices). Their NumPy impls build one broadcast index grid per operand
dimension and apply it with a single advanced-indexing operation (or ``ufunc.at``), so no
Python loop runs over the indices.
"""

import builtins
import enum
import functools
import operator
from typing import NamedTuple

import numpy as np

from remat import core, dtypes, lax
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.standard import canonical_shape, standard_primitive

__all__ = [
    "GatherDimensionNumbers",
    "GatherScatterMode",
    "ScatterDimensionNumbers",
    "dynamic_index_in_dim",
    "dynamic_slice",
    "dynamic_slice_in_dim",
    "dynamic_slice_p",
    "dynamic_update_index_in_dim",
    "dynamic_update_slice",
    "dynamic_update_slice_in_dim",
    "dynamic_update_slice_p",
    "gather",
    "gather_p",
    "index_in_dim",
    "scatter",
    "scatter_add",
    "scatter_add_p",
    "scatter_max",
    "scatter_max_p",
    "scatter_min",
    "scatter_min_p",
    "scatter_mul",
    "scatter_mul_p",
    "scatter_p",
    "scatter_sub",
    "scatter_sub_p",
    "slice",
    "slice_in_dim",
    "slice_p",
]

_slice = builtins.slice  # this module defines lax.slice


def _zeros(shape, dtype):
    return lax.full(shape, 0, dtype)


# --- slice -----------------------------------------------------------------------------------


def _slice_abstract_eval(x, start_indices, limit_indices, strides):
    if x.ndim != len(start_indices):
        raise TypeError(f"slice start_indices must have length equal to the number of "
                        f"dimensions of the operand, got indices {start_indices} for operand "
                        f"shape {x.shape}.")
    if len(start_indices) != len(limit_indices):
        raise TypeError(f"slice limit_indices must have the same length as start_indices, got "
                        f"start_indices {start_indices} and limit_indices {limit_indices}.")
    if not all(map(operator.ge, x.shape, limit_indices)):
        raise TypeError(f"slice limit_indices must be less than or equal to operand shape, got "
                        f"limit_indices {limit_indices} for operand shape {x.shape}.")
    if not all(s >= 0 for s in start_indices):
        raise TypeError(f"slice start_indices must be greater than or equal to zero, got "
                        f"start_indices of {start_indices}.")
    if not all(map(operator.ge, limit_indices, start_indices)):
        raise TypeError(f"slice limit_indices must be greater than or equal to start_indices, "
                        f"got start_indices {start_indices} and limit_indices {limit_indices}.")
    diff = [lim - s for s, lim in zip(start_indices, limit_indices)]
    if strides is None:
        return ShapedArray(diff, x.dtype, x.weak_type)
    if len(strides) != x.ndim:
        raise TypeError(f"slice strides must have length equal to the number of dimensions of "
                        f"the operand, got strides {strides} for operand shape {x.shape}.")
    if not all(s > 0 for s in strides):
        raise TypeError(f"slice strides must be positive, got {strides}")
    shape = [0 if d == 0 else (d - 1) // s + 1 for d, s in zip(diff, strides)]
    return ShapedArray(shape, x.dtype, x.weak_type)


@functools.lru_cache(maxsize=4096)
def _slice_index(start_indices, limit_indices, strides):
    """The NumPy index of a slice, built once per distinct params (a loop body slices with
    the same params at every step)."""
    steps = strides if strides is not None else (None,) * len(start_indices)
    return tuple(_slice(s, lim, st) for s, lim, st in zip(start_indices, limit_indices, steps))


def _slice_impl(x, start_indices, limit_indices, strides):
    return x[_slice_index(start_indices, limit_indices, strides)]


slice_p = standard_primitive("slice", _slice_impl, _slice_abstract_eval)


def _slice_transpose(ct, x, limit_indices, start_indices, strides):
    shape = x.aval.shape
    ct_shape = core.get_aval(ct).shape
    if strides is None:
        config = [(s, n - lim, 0) for s, lim, n in zip(start_indices, limit_indices, shape)]
    else:
        # the last element actually read, plus one: the high padding starts after it
        real_limits = [s + (1 + (m - 1) * st if m else 0)
                       for s, m, st in zip(start_indices, ct_shape, strides)]
        config = [(s, n - lim, st - 1)
                  for s, lim, n, st in zip(start_indices, real_limits, shape, strides)]
    return [lax.pad(ct, lax.full((), 0, core.get_aval(ct).dtype), config)]


def _slice_batch(vals, dims, limit_indices, start_indices, strides):
    (x,), (d,) = vals, dims
    size = core.get_aval(x).shape[d]
    starts = list(start_indices)
    limits = list(limit_indices)
    starts.insert(d, 0)
    limits.insert(d, size)
    if strides is not None:
        strides = list(strides)
        strides.insert(d, 1)
    return slice(x, starts, limits, strides), d


ad.deflinear2(slice_p, _slice_transpose)
batching.primitive_batchers[slice_p] = _slice_batch


def _static_ints(xs, what):
    return tuple(int(core.concrete_or_error(i, f"The {what} argument of slice must be static."))
                 for i in xs)


def slice(operand, start_indices, limit_indices, strides=None):
    """``operand[start:limit:stride]`` in every dimension (static bounds)."""
    start_indices = _static_ints(start_indices, "start_indices")
    limit_indices = _static_ints(limit_indices, "limit_indices")
    strides = None if strides is None else _static_ints(strides, "strides")
    return slice_p.bind(operand, limit_indices=limit_indices, start_indices=start_indices,
                        strides=strides)


def slice_in_dim(operand, start_index, limit_index, stride=1, axis=0):
    """``operand[..., start_index:limit_index:stride]`` along ``axis`` (negative bounds count
    from the end)."""
    shape = core.get_aval(operand).shape
    axis = int(axis)
    starts = [0] * len(shape)
    limits = list(shape)
    strides = [1] * len(shape)
    size = shape[axis]
    start = 0 if start_index is None else int(start_index)
    limit = size if limit_index is None else int(limit_index)
    starts[axis] = start + size if start < 0 else start
    limits[axis] = limit + size if limit < 0 else limit
    strides[axis] = int(stride)
    return slice(operand, starts, limits, strides)


def index_in_dim(operand, index, axis=0, keepdims=True):
    """``operand[..., index]`` along ``axis`` (static index; negative counts from the end)."""
    index, axis = int(index), int(axis)
    size = core.get_aval(operand).shape[axis]
    wrapped = index + size if index < 0 else index
    if not 0 <= wrapped < size:
        raise IndexError(f"index {index} is out of bounds for axis {axis} with size {size}")
    result = slice_in_dim(operand, wrapped, wrapped + 1, 1, axis)
    return result if keepdims else lax.squeeze(result, (axis,))


# --- dynamic_slice ---------------------------------------------------------------------------


def _check_dynamic_indices(name, x, indices):
    if len(indices) != x.ndim:
        raise TypeError(f"{name} start_indices must have length equal to the rank of operand, "
                        f"got {len(indices)} indices for operand shape {x.shape}.")
    if any(i.ndim != 0 for i in indices):
        raise TypeError(f"start_indices arguments to {name} must be scalars, got indices "
                        f"{[i.str_short() for i in indices]}")
    if any(i.dtype != indices[0].dtype or not dtypes.is_integer(i.dtype) for i in indices):
        raise TypeError(f"index arguments to {name} must be integers of the same type, got: "
                        f"{', '.join(i.dtype.name for i in indices)}")


def _dynamic_slice_abstract_eval(x, *indices, slice_sizes):
    if len(slice_sizes) != x.ndim:
        raise TypeError(f"dynamic_slice slice_sizes must have length equal to the rank of "
                        f"operand, got slice_sizes {slice_sizes} for operand shape {x.shape}.")
    if not all(map(operator.ge, x.shape, slice_sizes)):
        raise TypeError(f"slice slice_sizes must be less than or equal to operand shape, got "
                        f"slice_sizes {slice_sizes} for operand shape {x.shape}.")
    if not all(s >= 0 for s in slice_sizes):
        raise TypeError(f"slice slice_sizes must be greater than or equal to zero, got "
                        f"slice_sizes of {slice_sizes}.")
    _check_dynamic_indices("dynamic_slice", x, indices)
    return ShapedArray(slice_sizes, x.dtype, x.weak_type)


def _clamped_starts(shape, indices, sizes):
    """XLA's rule: each start index is clamped into ``[0, dim - size]``."""
    return [builtins.min(builtins.max(int(i), 0), n - s)
            for i, n, s in zip(indices, shape, sizes)]


def _dynamic_slice_impl(x, *indices, slice_sizes):
    starts = _clamped_starts(x.shape, indices, slice_sizes)
    return x[tuple(_slice(s, s + n) for s, n in zip(starts, slice_sizes))]


dynamic_slice_p = standard_primitive("dynamic_slice", _dynamic_slice_impl,
                                     _dynamic_slice_abstract_eval)


def _dynamic_slice_jvp(primals, tangents, *, slice_sizes):
    out = dynamic_slice_p.bind(*primals, slice_sizes=slice_sizes)
    t = tangents[0]
    if type(t) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    return out, dynamic_slice_p.bind(t, *primals[1:], slice_sizes=slice_sizes)


def _dynamic_slice_transpose(ct, x, *indices, slice_sizes):
    assert ad.is_undefined_primal(x) and not any(map(ad.is_undefined_primal, indices))
    zeros = _zeros(x.aval.shape, core.get_aval(ct).dtype)
    return [dynamic_update_slice_p.bind(zeros, ct, *indices)] + [None] * len(indices)


def _index_vector(indices, dims, size):
    """Scalar start indices (some batched along axis 0 of shape ``(size,)``) as one index
    vector: shape ``(n,)`` when none is batched, else ``(size, n)`` batched at 0."""
    if all(d is None for d in dims):
        parts = [lax.broadcast_in_dim(i, (1,), ()) for i in indices]
        return lax.concatenate(parts, 0), None
    parts = [lax.broadcast_in_dim(batching.moveaxis(i, d, 0) if d is not None else i,
                                  (size, 1), () if d is None else (0,))
             for i, d in zip(indices, dims)]
    return lax.concatenate(parts, 1), 0


def _dynamic_slice_batch(vals, dims, slice_sizes):
    x, indices = vals[0], vals[1:]
    xd, idims = dims[0], dims[1:]
    if all(d is None for d in idims):
        # only the operand is batched: take the whole batch dimension
        zero = _zeros((), core.get_aval(indices[0]).dtype if indices else
                      dtypes.default_int_dtype())
        new_indices = list(indices)
        new_indices.insert(xd, zero)
        sizes = list(slice_sizes)
        sizes.insert(xd, core.get_aval(x).shape[xd])
        return dynamic_slice_p.bind(x, *new_indices, slice_sizes=tuple(sizes)), xd
    size = batching.axis_size_of(vals, dims)
    index, index_dim = _index_vector(indices, idims, size)
    n = len(slice_sizes)
    dnums = GatherDimensionNumbers(offset_dims=tuple(range(n)), collapsed_slice_dims=(),
                                   start_index_map=tuple(range(n)))
    return _gather_batch([x, index], [xd, index_dim], dimension_numbers=dnums,
                         fill_value=None, indices_are_sorted=True,
                         mode=GatherScatterMode.CLIP, slice_sizes=slice_sizes,
                         unique_indices=True)


ad.primitive_jvps[dynamic_slice_p] = _dynamic_slice_jvp
ad.primitive_transposes[dynamic_slice_p] = _dynamic_slice_transpose
batching.primitive_batchers[dynamic_slice_p] = _dynamic_slice_batch


def _dynamic_slice_indices(operand, start_indices, allow_negative_indices):
    """Start indices as scalar integer arrays of one dtype; negative ones wrap from the end
    where allowed (as in JAX), so XLA's clamping applies only to the rest."""
    shape = core.get_aval(operand).shape
    if not isinstance(start_indices, (list, tuple)):
        aval = core.get_aval(start_indices)
        if aval.ndim != 1:
            raise ValueError(f"Slice indices must be a 1D sequence, got {aval.shape}")
        if isinstance(start_indices, core.Tracer):
            start_indices = [index_in_dim(start_indices, k, keepdims=False)
                             for k in range(aval.shape[0])]
        else:
            start_indices = list(np.asarray(core.concrete_or_error(start_indices)))
    if len(start_indices) != len(shape):
        raise ValueError(f"Length of slice indices must match number of operand dimensions "
                         f"({len(start_indices)} vs {len(shape)})")
    if isinstance(allow_negative_indices, bool):
        allow_negative_indices = [allow_negative_indices] * len(shape)
    python_int = lambda i: isinstance(i, int) and not isinstance(i, bool)  # noqa: E731
    array_dtypes = [core.get_aval(i).dtype for i in start_indices if not python_int(i)]
    dtype = array_dtypes[0] if array_dtypes else dtypes.default_int_dtype()
    out = []
    for i, d, allow in zip(start_indices, shape, allow_negative_indices):
        idtype = dtype if python_int(i) else core.get_aval(i).dtype
        static = python_int(i) or isinstance(i, np.integer)
        if static or (not isinstance(i, core.Tracer) and idtype.kind in "iu"
                      and core.get_aval(i).ndim == 0):
            # a concrete index: wrap it now rather than with staged operations
            v = int(i) if static else int(core.to_numpy(i))
            if v < 0 and allow:
                v += d
            elif v < 0 and static:
                raise ValueError(f"Index {v} is out of bounds for dimension {d} if "
                                 f"allow_negative_indices=False")
            out.append(lax.convert_element_type(v, idtype))
            continue
        if allow and idtype.kind == "i":
            size = lax.convert_element_type(d, idtype)
            i = lax.select(lax.lt(i, lax.convert_element_type(0, idtype)), lax.add(i, size), i)
        out.append(i)
    return out


def dynamic_slice(operand, start_indices, slice_sizes, *, allow_negative_indices=True):
    """The ``slice_sizes`` block of ``operand`` starting at the (possibly traced)
    ``start_indices``, each clamped so the block fits, as XLA does."""
    indices = _dynamic_slice_indices(operand, start_indices, allow_negative_indices)
    sizes = canonical_shape(slice_sizes, "slice_sizes")
    return dynamic_slice_p.bind(operand, *indices, slice_sizes=sizes)


def dynamic_slice_in_dim(operand, start_index, slice_size, axis=0, *,
                         allow_negative_indices=True):
    """``operand[..., start_index:start_index + slice_size]`` along ``axis``."""
    shape = core.get_aval(operand).shape
    axis = int(axis)
    indices = [0] * len(shape)
    indices[axis] = start_index
    sizes = list(shape)
    sizes[axis] = int(slice_size)
    allow = [False] * len(shape)
    allow[axis] = allow_negative_indices
    return dynamic_slice(operand, indices, sizes, allow_negative_indices=allow)


def dynamic_index_in_dim(operand, index, axis=0, keepdims=True, *,
                         allow_negative_indices=True):
    """``operand[..., index]`` along ``axis`` for a possibly traced ``index``."""
    out = dynamic_slice_in_dim(operand, index, 1, axis,
                               allow_negative_indices=allow_negative_indices)
    return out if keepdims else lax.squeeze(out, (int(axis),))


# --- dynamic_update_slice --------------------------------------------------------------------


def _dynamic_update_slice_abstract_eval(x, update, *indices):
    if x.ndim != update.ndim:
        raise TypeError(f"dynamic_update_slice update must have the same rank as operand, got "
                        f"update shape {update.shape} for operand shape {x.shape}.")
    if not all(map(operator.ge, x.shape, update.shape)):
        raise TypeError(f"dynamic_update_slice update shape must be smaller than operand shape, "
                        f"got update shape {update.shape} for operand shape {x.shape}.")
    if x.dtype != update.dtype:
        raise TypeError(f"dynamic_update_slice requires arguments to have the same dtypes, got "
                        f"{x.dtype.name}, {update.dtype.name}.")
    _check_dynamic_indices("dynamic_update_slice", x, indices)
    weak = x.weak_type and update.weak_type and all(i.weak_type for i in indices)
    return ShapedArray(x.shape, x.dtype, weak)


def _dynamic_update_slice_impl(x, update, *indices):
    starts = _clamped_starts(x.shape, indices, update.shape)
    out = x.copy()
    out[tuple(_slice(s, s + n) for s, n in zip(starts, update.shape))] = update
    return out


dynamic_update_slice_p = standard_primitive("dynamic_update_slice", _dynamic_update_slice_impl,
                                            _dynamic_update_slice_abstract_eval)


def _dynamic_update_slice_jvp(primals, tangents):
    x, update, indices = primals[0], primals[1], primals[2:]
    out = dynamic_update_slice_p.bind(x, update, *indices)
    tx, tu = tangents[:2]
    if type(tx) is ad.Zero and type(tu) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    tangent = dynamic_update_slice_p.bind(ad.instantiate_zeros(tx), ad.instantiate_zeros(tu),
                                          *indices)
    return out, tangent


def _dynamic_update_slice_transpose(ct, x, update, *indices):
    assert not any(map(ad.is_undefined_primal, indices))
    update_shape = update.aval.shape if ad.is_undefined_primal(update) else \
        core.get_aval(update).shape
    ct_x = ct_update = None
    if ad.is_undefined_primal(x):
        zeros = _zeros(update_shape, core.get_aval(ct).dtype)
        ct_x = dynamic_update_slice_p.bind(ct, zeros, *indices)
    if ad.is_undefined_primal(update):
        ct_update = dynamic_slice_p.bind(ct, *indices, slice_sizes=update_shape)
    return [ct_x, ct_update] + [None] * len(indices)


def _dynamic_update_slice_batch(vals, dims):
    x, update, indices = vals[0], vals[1], vals[2:]
    xd, ud, idims = dims[0], dims[1], dims[2:]
    size = batching.axis_size_of(vals, dims)
    if all(d is None for d in idims):
        x = batching.bdim_at_front(x, xd, size)
        update = batching.bdim_at_front(update, ud, size)
        zero = _zeros((), core.get_aval(indices[0]).dtype if indices else
                      dtypes.default_int_dtype())
        return dynamic_update_slice_p.bind(x, update, zero, *indices), 0
    index, index_dim = _index_vector(indices, idims, size)
    n = core.get_aval(update).ndim - (ud is not None)
    dnums = ScatterDimensionNumbers(update_window_dims=tuple(range(n)), inserted_window_dims=(),
                                    scatter_dims_to_operand_dims=tuple(range(n)))
    return _scatter_batch(scatter_p, [x, index, update], [xd, index_dim, ud],
                          dimension_numbers=dnums, indices_are_sorted=True,
                          mode=GatherScatterMode.CLIP, unique_indices=True)


ad.primitive_jvps[dynamic_update_slice_p] = _dynamic_update_slice_jvp
ad.primitive_transposes[dynamic_update_slice_p] = _dynamic_update_slice_transpose
batching.primitive_batchers[dynamic_update_slice_p] = _dynamic_update_slice_batch


def _as_array_operand(x, dtype_of):
    """Python scalars take the dtype of ``dtype_of`` (weakly typed), as in lax."""
    if dtypes.is_python_scalar(x):
        aval = core.get_aval(dtype_of)
        return lax.convert_element_type(x, aval.dtype, weak_type=True)
    return x


def dynamic_update_slice(operand, update, start_indices, *, allow_negative_indices=True):
    """``operand`` with the block at ``start_indices`` (clamped so ``update`` fits)
    replaced by ``update``."""
    indices = _dynamic_slice_indices(operand, start_indices, allow_negative_indices)
    update = _as_array_operand(update, operand)
    return dynamic_update_slice_p.bind(operand, update, *indices)


def dynamic_update_slice_in_dim(operand, update, start_index, axis, *,
                                allow_negative_indices=True):
    """``dynamic_update_slice`` with the start given along ``axis`` only (0 elsewhere)."""
    ndim = core.get_aval(operand).ndim
    axis = int(axis)
    indices = [0] * ndim
    indices[axis] = start_index
    allow = [False] * ndim
    allow[axis] = allow_negative_indices
    return dynamic_update_slice(operand, update, indices, allow_negative_indices=allow)


def dynamic_update_index_in_dim(operand, update, index, axis, *, allow_negative_indices=True):
    """Replace ``operand[..., index]`` along ``axis`` by ``update`` (which may lack that axis)."""
    axis = int(axis)
    update = _as_array_operand(update, operand)
    if core.get_aval(update).ndim != core.get_aval(operand).ndim:
        if core.get_aval(update).ndim + 1 != core.get_aval(operand).ndim:
            raise TypeError(f"dynamic_update_index_in_dim update must have rank equal to the "
                            f"operand rank or one less, got update shape "
                            f"{core.get_aval(update).shape} for operand shape "
                            f"{core.get_aval(operand).shape}")
        update = lax.expand_dims(update, (axis,))
    return dynamic_update_slice_in_dim(operand, update, index, axis,
                                       allow_negative_indices=allow_negative_indices)


# --- dimension numbers and modes -------------------------------------------------------------


class GatherDimensionNumbers(NamedTuple):
    """How the dimensions of a gather's operand, start indices and output correspond (XLA's
    GatherDimensionNumbers; the index vector is the last dimension of the indices)."""

    offset_dims: tuple
    collapsed_slice_dims: tuple
    start_index_map: tuple
    operand_batching_dims: tuple = ()
    start_indices_batching_dims: tuple = ()


class ScatterDimensionNumbers(NamedTuple):
    """How the dimensions of a scatter's operand, indices and updates correspond (XLA's
    ScatterDimensionNumbers; the index vector is the last dimension of the indices)."""

    update_window_dims: tuple
    inserted_window_dims: tuple
    scatter_dims_to_operand_dims: tuple
    operand_batching_dims: tuple = ()
    scatter_indices_batching_dims: tuple = ()


class GatherScatterMode(enum.Enum):
    """What out-of-bounds indices do.

    CLIP: indices are clamped so that the whole window is in bounds.
    FILL_OR_DROP: a gathered window with any part out of bounds is filled with
      ``fill_value``; a scattered window with any part out of bounds is dropped.
    PROMISE_IN_BOUNDS: the caller promises in-bounds indices; out of bounds, gathers clamp
      and scatters drop (as XLA does), and gradients are not meaningful.
    """

    CLIP = enum.auto()
    FILL_OR_DROP = enum.auto()
    PROMISE_IN_BOUNDS = enum.auto()

    @staticmethod
    def from_any(s):
        if isinstance(s, GatherScatterMode):
            return s
        if s == "clip":
            return GatherScatterMode.CLIP
        if s is None or s == "fill" or s == "drop":
            return GatherScatterMode.FILL_OR_DROP
        if s == "promise_in_bounds":
            return GatherScatterMode.PROMISE_IN_BOUNDS
        raise ValueError(f'Unknown gather mode "{s}"')


def _canonical_dnums(cls, dnums, name):
    """Dimension numbers as ``cls`` with tuples of Python ints (hashable params)."""
    if isinstance(dnums, dict):
        dnums = cls(**dnums)
    elif not isinstance(dnums, cls):
        if not isinstance(dnums, (tuple, list)) or not 3 <= len(dnums) <= 5:
            raise TypeError(f"{name} dimension_numbers must be a {cls.__name__}, got {dnums!r}")
        dnums = cls(*dnums)
    try:
        return cls(*(tuple(int(d) for d in field) for field in dnums))
    except TypeError:
        raise TypeError(f"{name} dimension_numbers must hold sequences of integers, got "
                        f"{dnums!r}") from None


def _gather_dnums_of_scatter(dnums):
    return GatherDimensionNumbers(
        offset_dims=dnums.update_window_dims,
        collapsed_slice_dims=dnums.inserted_window_dims,
        start_index_map=dnums.scatter_dims_to_operand_dims,
        operand_batching_dims=dnums.operand_batching_dims,
        start_indices_batching_dims=dnums.scatter_indices_batching_dims)


def _scatter_dnums_of_gather(dnums):
    return ScatterDimensionNumbers(
        update_window_dims=dnums.offset_dims,
        inserted_window_dims=dnums.collapsed_slice_dims,
        scatter_dims_to_operand_dims=dnums.start_index_map,
        operand_batching_dims=dnums.operand_batching_dims,
        scatter_indices_batching_dims=dnums.start_indices_batching_dims)


def _scatter_window_sizes(operand_shape, updates_shape, dnums):
    """The window size in every operand dimension: 1 for inserted and batching dimensions,
    the matching updates dimension otherwise (the slice sizes of the inverse gather)."""
    sizes, pos = [], 0
    for i in range(len(operand_shape)):
        if i in dnums.inserted_window_dims or i in dnums.operand_batching_dims:
            sizes.append(1)
        else:
            sizes.append(updates_shape[dnums.update_window_dims[pos]])
            pos += 1
    return tuple(sizes)


def _default_fill_value(dtype):
    if dtypes.is_inexact(dtype):
        return float("nan")
    if dtype.kind == "i":
        return int(np.iinfo(dtype).min)
    if dtype.kind == "u":
        return int(np.iinfo(dtype).max)
    if dtype == dtypes.bool_:
        return True
    raise ValueError(f"Unsupported dtype for gather fill_value {dtype}")


# --- shared checks ---------------------------------------------------------------------------


def _is_sorted(dims, op, name):
    if list(dims) != sorted(dims):
        raise TypeError(f"{name} in {op} op must be sorted; got {dims}")


def _dims_in_range(dims, rank, op, name):
    for d in dims:
        if d < 0 or d >= rank:
            raise TypeError(f"Invalid {name} set in {op} op; valid range is [0, {rank}); "
                            f"got: {d}.")


def _no_duplicate_dims(dims, op, name):
    if len(set(dims)) != len(dims):
        raise TypeError(f"{name} in {op} op must not repeat; got: {dims}.")


def _check_indices_batching_dims(op, operand, indices, operand_batching_dims,
                                 indices_batching_dims, indices_name, index_vector_dim):
    """The batching dims of the indices (shared by gather and scatter): distinct, in range,
    not the index vector dim, paired one to one with the operand's and of the same sizes.
    Returns the batch shape."""
    Op = op.capitalize()
    _no_duplicate_dims(indices_batching_dims, op, indices_name)
    _dims_in_range(indices_batching_dims, indices.ndim, op, indices_name)
    if index_vector_dim in indices_batching_dims:
        raise TypeError(f"{Op} op cannot have the index vector dimension as a batching "
                        f"dimension; got {indices_batching_dims}.")
    if len(operand_batching_dims) != len(indices_batching_dims):
        raise TypeError(f"{Op} op requires equal numbers of operand_batching_dims and "
                        f"{indices_name}, got {operand_batching_dims} and "
                        f"{indices_batching_dims}.")
    operand_batch = tuple(operand.shape[i] for i in operand_batching_dims)
    indices_batch = tuple(indices.shape[i] for i in indices_batching_dims)
    if operand_batch != indices_batch:
        raise TypeError(f"{Op} op requires operand batching dimensions and indices batching "
                        f"dimensions to have the same shape, got {operand_batch} and "
                        f"{indices_batch}.")
    return operand_batch


def _disjoint_dims(dims1, dims2, op, name1, name2):
    if not set(dims1).isdisjoint(dims2):
        raise TypeError(f"{name1} and {name2} in {op} op must be disjoint; got: {dims1} and "
                        f"{dims2}.")


def _check_indices_dtype(indices):
    if not dtypes.is_integer(indices.dtype):
        raise ValueError(f"indices must have an integer type, got {indices.dtype.name}")


# --- gather ----------------------------------------------------------------------------------


def _gather_shape(indices_shape, dnums, slice_sizes):
    batch = iter(indices_shape[:-1])
    window = iter(s for i, s in enumerate(slice_sizes)
                  if i not in dnums.collapsed_slice_dims and i not in dnums.operand_batching_dims)
    rank = len(dnums.offset_dims) + len(indices_shape) - 1
    return tuple(next(window) if i in dnums.offset_dims else next(batch) for i in range(rank))


def _gather_abstract_eval(operand, indices, *, dimension_numbers, fill_value,
                          indices_are_sorted, mode, slice_sizes, unique_indices):
    _check_indices_dtype(indices)
    dn = dimension_numbers
    if indices.ndim < 1:
        raise TypeError(f"Gather index leaf dimension must be within [0, rank(indices) + 1). "
                        f"rank(indices) is {indices.ndim} and gather index leaf dimension is "
                        f"-1; indices need a trailing index vector dimension.")
    index_vector_dim = indices.ndim - 1
    _is_sorted(dn.offset_dims, "gather", "offset_dims")
    _no_duplicate_dims(dn.offset_dims, "gather", "offset_dims")
    out_rank = len(dn.offset_dims) + indices.ndim - 1
    for i, d in enumerate(dn.offset_dims):
        if d < 0 or d >= out_rank:
            raise TypeError(f"Offset dimension {i} in gather op is out of bounds; got {d}, but "
                            f"should have been in [0, {out_rank})")
    if len(dn.start_index_map) != indices.shape[index_vector_dim]:
        raise TypeError(f"Gather op has {len(dn.start_index_map)} elements in start_index_map "
                        f"and the bound of dimension index_vector_dim={index_vector_dim} of "
                        f"indices is {indices.shape[index_vector_dim]}. These two numbers must "
                        f"be equal.")
    for i, d in enumerate(dn.start_index_map):
        if d < 0 or d >= operand.ndim:
            raise TypeError(f"Invalid start_index_map; domain is [0, {operand.ndim}), got: "
                            f"{i}->{d}.")
    _no_duplicate_dims(dn.start_index_map, "gather", "start_index_map")
    _is_sorted(dn.collapsed_slice_dims, "gather", "collapsed_slice_dims")
    _dims_in_range(dn.collapsed_slice_dims, operand.ndim, "gather", "collapsed_slice_dims")
    _no_duplicate_dims(dn.collapsed_slice_dims, "gather", "collapsed_slice_dims")
    _no_duplicate_dims(dn.operand_batching_dims, "gather", "operand_batching_dims")
    _is_sorted(dn.operand_batching_dims, "gather", "operand_batching_dims")
    _dims_in_range(dn.operand_batching_dims, operand.ndim, "gather", "operand_batching_dims")
    _disjoint_dims(dn.collapsed_slice_dims, dn.operand_batching_dims, "gather",
                   "collapsed_slice_dims", "operand_batching_dims")
    _disjoint_dims(dn.start_index_map, dn.operand_batching_dims, "gather", "start_index_map",
                   "operand_batching_dims")
    _check_indices_batching_dims("gather", operand, indices, dn.operand_batching_dims,
                                 dn.start_indices_batching_dims, "start_indices_batching_dims",
                                 index_vector_dim)
    if len(slice_sizes) != operand.ndim:
        raise TypeError(f"Gather op must have one slice size for every input dimension; got: "
                        f"len(slice_sizes)={len(slice_sizes)}, input_shape.rank={operand.ndim}")
    if len(slice_sizes) != len(dn.offset_dims) + len(dn.collapsed_slice_dims) + \
            len(dn.operand_batching_dims):
        raise TypeError(f"All components of the offset index in a gather op must either be a "
                        f"offset dimension or explicitly collapsed/batching; got "
                        f"len(slice_sizes)={len(slice_sizes)}, output_slice_sizes="
                        f"{dn.offset_dims}, collapsed_slice_dims={dn.collapsed_slice_dims}, "
                        f"operand_batching_dims={dn.operand_batching_dims}.")
    if 0 not in indices.shape:
        for i, (s, n) in enumerate(zip(slice_sizes, operand.shape)):
            if not 0 <= s <= n:
                raise TypeError(f"Slice size at index {i} in gather op is out of range, must "
                                f"be within [0, {n} + 1), got {s}.")
    for i, d in enumerate(dn.collapsed_slice_dims):
        if slice_sizes[d] != 1:
            raise TypeError(f"Gather op can only collapse slice dims with bound 1, but bound "
                            f"is {slice_sizes[d]} for index {d} at position {i}.")
    for i, d in enumerate(dn.operand_batching_dims):
        if slice_sizes[d] > 1:
            raise TypeError(f"Gather op can only have operand batching dims with bound 0/1, "
                            f"but bound is {slice_sizes[d]} for index {d} at position {i}.")
    shape = _gather_shape(indices.shape, dn, slice_sizes)
    return ShapedArray(shape, operand.dtype, operand.weak_type)


def _place(a, positions, rank):
    """Reshape ``a`` (one axis per entry of ``positions``) to rank ``rank`` with its axes at
    ``positions`` and size 1 elsewhere, so it broadcasts against a grid of that rank."""
    shape = [1] * rank
    for p, n in zip(positions, a.shape):
        shape[p] = n
    return a.reshape(shape)


class _Plan:
    """How a gather or scatter addresses the operand: one broadcastable index array per
    *indexed* operand dimension; the *full* window dimensions (whole extent, never indexed)
    are left to basic slicing, so that e.g. ``x[idx]`` copies contiguous rows.

    ``perm`` puts the indexed operand dimensions first; indexing ``transpose(operand, perm)``
    with ``grid`` gives an array of shape ``kept_shape + full sizes``, whose axes are the
    output (or updates) axes ``order``."""

    def __init__(self, operand_shape, starts, batch_pos, window_pos, sizes, start_dims,
                 out_shape):
        rank = len(out_shape)
        full = sorted(d for d in window_pos
                      if d not in start_dims and sizes[d] == operand_shape[d])
        self.full_pos = [window_pos[d] for d in full]
        kept_pos = [p for p in range(rank) if p not in self.full_pos]
        indexed = [d for d in range(len(operand_shape)) if d not in full]
        self.perm = indexed + full
        self.kept_shape = tuple(out_shape[p] for p in kept_pos)
        self.order = kept_pos + self.full_pos
        self.grid = []
        for d in indexed:
            g = _place(starts[d], batch_pos, rank) if d in starts else np.zeros((), np.intp)
            if d in window_pos:
                g = g + _place(np.arange(sizes[d]), (window_pos[d],), rank)
            self.grid.append(self.reduce(g) if g.ndim else g)
        # with the indexed dimensions leading in a C-contiguous operand, one linear index
        # into the flattened leading dimensions addresses the same elements faster
        self.linear = len(indexed) > 1 and self.perm[:len(indexed)] == list(range(len(indexed)))

    def flat(self, x, shape):
        """``x`` (the operand, C-contiguous) with its indexed dims flattened, and the linear
        index into them (None when the operand is not laid out for it)."""
        n = len(self.grid)
        if not self.linear or not x.flags.c_contiguous:
            return None, None
        lin = self.grid[0]
        for g, size in zip(self.grid[1:], shape[1:n]):
            lin = lin * size + g
        return x.reshape((-1,) + tuple(shape[n:])), lin

    def reduce(self, a):
        """Drop the full window axes (of size 1 in ``a``)."""
        return np.squeeze(a, axis=tuple(self.full_pos)) if self.full_pos else a


def _starts(operand_shape, indices, start_index_map, operand_batching_dims,
            indices_batching_dims, window_sizes, clamp, check):
    """Per batch element, the start of its window in the operand: a dict from operand
    dimension to an array of the batch shape (dimensions absent start at 0); and, if
    ``check``, a mask of the batch elements whose window lies in bounds (None when all do)."""
    batch_shape = indices.shape[:-1]
    starts = {}
    in_bounds = None
    if start_index_map:
        idx = indices if indices.dtype == np.intp else indices.astype(np.intp)
        upper = np.array([operand_shape[d] - window_sizes[d] for d in start_index_map],
                         np.intp)
        clipped = np.clip(idx, 0, upper) if clamp or check else idx
        if check:
            ok = clipped == idx
            if not ok.all():
                in_bounds = ok.all(axis=-1)
        idx = clipped if clamp else idx
        for k, d in enumerate(start_index_map):
            starts[d] = idx[..., k]
    for od, idim in zip(operand_batching_dims, indices_batching_dims):
        starts[od] = np.broadcast_to(
            _place(np.arange(batch_shape[idim]), (idim,), len(batch_shape)), batch_shape)
    return starts, in_bounds


def _gather_impl(operand, indices, *, dimension_numbers, fill_value, indices_are_sorted, mode,
                 slice_sizes, unique_indices):
    dn = dimension_numbers
    out_shape = _gather_shape(indices.shape, dn, slice_sizes)
    if 0 in out_shape:
        return np.zeros(out_shape, operand.dtype)
    rank = len(out_shape)
    batch_pos = [i for i in range(rank) if i not in dn.offset_dims]
    window_dims = [d for d in range(operand.ndim)
                   if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    window_pos = dict(zip(window_dims, dn.offset_dims))
    starts, in_bounds = _starts(operand.shape, indices, dn.start_index_map,
                                dn.operand_batching_dims, dn.start_indices_batching_dims,
                                slice_sizes, clamp=True,
                                check=mode is GatherScatterMode.FILL_OR_DROP)
    plan = _Plan(operand.shape, starts, batch_pos, window_pos, slice_sizes, dn.start_index_map,
                 out_shape)
    src = np.transpose(operand, plan.perm)
    flat, lin = plan.flat(operand, operand.shape)
    if flat is not None:
        res = np.take(flat, lin, axis=0)
    elif len(plan.grid) == 1:
        res = np.take(src, plan.grid[0], axis=0)
    else:
        res = src[tuple(plan.grid)] if plan.grid else src
    full_shape = plan.kept_shape + src.shape[len(plan.grid):]
    if res.shape != full_shape:  # output axes that no index varies along
        res = np.broadcast_to(res, full_shape)
    out = np.transpose(res, np.argsort(plan.order))
    if mode is GatherScatterMode.FILL_OR_DROP and in_bounds is not None:
        fill = _default_fill_value(operand.dtype) if fill_value is None else fill_value
        with np.errstate(invalid="ignore", over="ignore"):
            fill = np.array(fill).astype(operand.dtype)
        out = np.where(_place(in_bounds, batch_pos, rank), out, fill)
    return out


gather_p = standard_primitive("gather", _gather_impl, _gather_abstract_eval)


def _gather_jvp(g, operand, indices, *, dimension_numbers, fill_value, indices_are_sorted,
                mode, slice_sizes, unique_indices):
    return gather_p.bind(g, indices, dimension_numbers=dimension_numbers,
                         fill_value=0 if mode is GatherScatterMode.FILL_OR_DROP else None,
                         indices_are_sorted=indices_are_sorted, mode=mode,
                         slice_sizes=slice_sizes, unique_indices=unique_indices)


def _gather_transpose(ct, operand, indices, *, dimension_numbers, fill_value,
                      indices_are_sorted, mode, slice_sizes, unique_indices):
    assert ad.is_undefined_primal(operand) and not ad.is_undefined_primal(indices)
    zeros = _zeros(operand.aval.shape, core.get_aval(ct).dtype)
    out = scatter_add_p.bind(zeros, indices, ct,
                             dimension_numbers=_scatter_dnums_of_gather(dimension_numbers),
                             indices_are_sorted=indices_are_sorted, mode=mode,
                             unique_indices=unique_indices)
    return [out, None]


def _shift(dims, k=1):
    return tuple(d + k for d in dims)


def _gather_batch(vals, dims, *, dimension_numbers, fill_value, indices_are_sorted, mode,
                  slice_sizes, unique_indices):
    operand, indices = vals
    od, idd = dims
    dn = dimension_numbers
    params = dict(fill_value=fill_value, mode=mode)
    if idd is None:
        # the batch dimension becomes one more (full) window dimension, output dim 0
        operand = batching.moveaxis(operand, od, 0)
        size = core.get_aval(operand).shape[0]
        dnums = GatherDimensionNumbers(
            offset_dims=(0,) + _shift(dn.offset_dims),
            collapsed_slice_dims=_shift(dn.collapsed_slice_dims),
            start_index_map=_shift(dn.start_index_map),
            operand_batching_dims=_shift(dn.operand_batching_dims),
            start_indices_batching_dims=dn.start_indices_batching_dims)
        return gather_p.bind(operand, indices, dimension_numbers=dnums,
                             indices_are_sorted=indices_are_sorted,
                             slice_sizes=(size,) + tuple(slice_sizes),
                             unique_indices=unique_indices, **params), 0
    indices = batching.moveaxis(indices, idd, 0)
    if od is None:
        # the batch dimension is one more batch dimension of the indices
        dnums = dn._replace(offset_dims=_shift(dn.offset_dims),
                            start_indices_batching_dims=_shift(dn.start_indices_batching_dims))
        return gather_p.bind(operand, indices, dimension_numbers=dnums,
                             indices_are_sorted=False, slice_sizes=tuple(slice_sizes),
                             unique_indices=False, **params), 0
    # both batched: pair the two batch dimensions as gather batching dimensions
    operand = batching.moveaxis(operand, od, 0)
    size = core.get_aval(operand).shape[0]
    dnums = GatherDimensionNumbers(
        offset_dims=_shift(dn.offset_dims),
        collapsed_slice_dims=_shift(dn.collapsed_slice_dims),
        start_index_map=_shift(dn.start_index_map),
        operand_batching_dims=(0,) + _shift(dn.operand_batching_dims),
        start_indices_batching_dims=(0,) + _shift(dn.start_indices_batching_dims))
    return gather_p.bind(operand, indices, dimension_numbers=dnums,
                         indices_are_sorted=indices_are_sorted,
                         slice_sizes=(0 if size == 0 else 1,) + tuple(slice_sizes),
                         unique_indices=unique_indices, **params), 0


ad.defjvp(gather_p, _gather_jvp, None)
ad.primitive_transposes[gather_p] = _gather_transpose
batching.primitive_batchers[gather_p] = _gather_batch


def gather(operand, start_indices, dimension_numbers, slice_sizes, *, unique_indices=False,
           indices_are_sorted=False, mode=None, fill_value=None):
    """XLA's Gather: the ``slice_sizes`` windows of ``operand`` starting at each index vector
    (the last axis of ``start_indices``). ``mode`` (default: promise_in_bounds, which clamps)
    decides what out-of-bounds windows do; 'fill' fills them with ``fill_value`` (default NaN,
    the most negative signed / largest unsigned integer, or True)."""
    dnums = _canonical_dnums(GatherDimensionNumbers, dimension_numbers, "gather")
    mode = GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else \
        GatherScatterMode.from_any(mode)
    if mode is GatherScatterMode.FILL_OR_DROP:
        if fill_value is None:
            fill_value = _default_fill_value(core.get_aval(operand).dtype)
        else:
            fill_value = np.asarray(core.concrete_or_error(
                fill_value, "The fill_value argument of gather must be static.")).item()
    else:
        fill_value = None
    return gather_p.bind(operand, start_indices, dimension_numbers=dnums,
                         fill_value=fill_value, indices_are_sorted=bool(indices_are_sorted),
                         mode=mode, slice_sizes=canonical_shape(slice_sizes, "slice_sizes"),
                         unique_indices=bool(unique_indices))


# --- scatter ---------------------------------------------------------------------------------


def _updates_batching_dims(indices_batching_dims, update_window_dims, updates_rank):
    scatter_dims = [d for d in range(updates_rank) if d not in update_window_dims]
    return tuple(scatter_dims[i] for i in indices_batching_dims)


def _scatter_abstract_eval_for(name):
    def abstract_eval(operand, indices, updates, *, dimension_numbers, indices_are_sorted,
                      mode, unique_indices):
        _check_indices_dtype(indices)
        if operand.dtype != updates.dtype:
            raise TypeError(f"{name} requires arguments to have the same dtypes, got "
                            f"{operand.dtype.name}, {updates.dtype.name}.")
        _scatter_shape_check(operand, indices, updates, dimension_numbers)
        return ShapedArray(operand.shape, operand.dtype, operand.weak_type)

    return abstract_eval


def _scatter_shape_check(operand, indices, updates, dn):
    if indices.ndim < 1:
        raise TypeError(f"Scatter index leaf dimension must be within [0, rank(indices) + 1). "
                        f"rank(indices) is {indices.ndim} and scatter index leaf dimension is "
                        f"-1; indices need a trailing index vector dimension.")
    index_vector_dim = indices.ndim - 1
    expected_rank = indices.ndim - 1 + len(dn.update_window_dims)
    if updates.ndim != expected_rank:
        raise TypeError(f"Updates tensor must be of rank {expected_rank}; got {updates.ndim}.")
    _is_sorted(dn.update_window_dims, "scatter", "update_window_dims")
    _no_duplicate_dims(dn.update_window_dims, "scatter", "update_window_dims")
    _dims_in_range(dn.update_window_dims, updates.ndim, "scatter", "update_window_dims")
    _is_sorted(dn.inserted_window_dims, "scatter", "inserted_window_dims")
    _no_duplicate_dims(dn.inserted_window_dims, "scatter", "inserted_window_dims")
    _dims_in_range(dn.inserted_window_dims, operand.ndim, "scatter", "inserted_window_dims")
    _is_sorted(dn.operand_batching_dims, "scatter", "operand_batching_dims")
    _no_duplicate_dims(dn.operand_batching_dims, "scatter", "operand_batching_dims")
    _dims_in_range(dn.operand_batching_dims, operand.ndim, "scatter", "operand_batching_dims")
    _disjoint_dims(dn.inserted_window_dims, dn.operand_batching_dims, "scatter",
                   "inserted_window_dims", "operand_batching_dims")
    _disjoint_dims(dn.scatter_dims_to_operand_dims, dn.operand_batching_dims, "scatter",
                   "scatter_dims_to_operand_dims", "operand_batching_dims")
    operand_batch = _check_indices_batching_dims(
        "scatter", operand, indices, dn.operand_batching_dims, dn.scatter_indices_batching_dims,
        "scatter_indices_batching_dims", index_vector_dim)
    updates_batch = tuple(updates.shape[i] for i in _updates_batching_dims(
        dn.scatter_indices_batching_dims, dn.update_window_dims, updates.ndim))
    if operand_batch != updates_batch:
        raise TypeError(f"Scatter op requires operand batching dimensions and updates batching "
                        f"dimensions to have the same shape, got {operand_batch} and "
                        f"{updates_batch}.")
    window_size = len(dn.update_window_dims) + len(dn.inserted_window_dims) + \
        len(dn.operand_batching_dims)
    if operand.ndim != window_size:
        raise TypeError(f"Scatter op has window of size {window_size}; doesn't match operand of "
                        f"rank {operand.ndim}.")
    if len(dn.scatter_dims_to_operand_dims) != indices.shape[index_vector_dim]:
        raise TypeError(f"Scatter op has {len(dn.scatter_dims_to_operand_dims)} elements in "
                        f"scatter_dims_to_operand_dims and the bound of dimension "
                        f"index_vector_dim={index_vector_dim} of indices is "
                        f"{indices.shape[index_vector_dim]}. These two numbers must be equal")
    for i, d in enumerate(dn.scatter_dims_to_operand_dims):
        if d < 0 or d >= operand.ndim:
            raise TypeError(f"Invalid scatter_dims_to_operand_dims mapping; domain is "
                            f"[0, {operand.ndim}), got: {i}->{d}.")
    _no_duplicate_dims(dn.scatter_dims_to_operand_dims, "scatter",
                       "scatter_dims_to_operand_dims")
    max_sizes = [operand.shape[i] for i in range(operand.ndim)
                 if i not in dn.inserted_window_dims and i not in dn.operand_batching_dims]
    for i, d in enumerate(dn.update_window_dims):
        if max_sizes[i] < updates.shape[d]:
            raise TypeError(f"Bounds of the window dimensions of updates must not exceed the "
                            f"bounds of the corresponding dimensions of operand. For dimension "
                            f"{d}, updates bound is {updates.shape[d]}, operand bound is "
                            f"{max_sizes[i]}.")
    scatter_dims = [d for d in range(updates.ndim) if d not in dn.update_window_dims]
    for k, d in enumerate(scatter_dims):
        if updates.shape[d] != indices.shape[k]:
            raise TypeError(f"Bounds of the scatter dimensions of updates must be the same as "
                            f"the bounds of the corresponding dimensions of scatter indices. "
                            f"For scatter dimension {d}, updates bound is {updates.shape[d]}, "
                            f"indices bound is {indices.shape[k]}.")


def _scatter_impl_for(combine):
    """An impl applying ``combine(out, index_tuple, values)`` in place on a copy of the
    operand: ``ufunc.at`` for the combining scatters, assignment for ``scatter``."""

    def impl(operand, indices, updates, *, dimension_numbers, indices_are_sorted, mode,
             unique_indices):
        dn = dimension_numbers
        out = operand.copy()
        if updates.size == 0:
            return out
        rank = updates.ndim
        batch_pos = [i for i in range(rank) if i not in dn.update_window_dims]
        window_dims = [d for d in range(operand.ndim) if d not in dn.inserted_window_dims
                       and d not in dn.operand_batching_dims]
        window_pos = dict(zip(window_dims, dn.update_window_dims))
        sizes = _scatter_window_sizes(operand.shape, updates.shape, dn)
        starts, in_bounds = _starts(operand.shape, indices, dn.scatter_dims_to_operand_dims,
                                    dn.operand_batching_dims, dn.scatter_indices_batching_dims,
                                    sizes, clamp=mode is GatherScatterMode.CLIP,
                                    check=mode is not GatherScatterMode.CLIP)
        plan = _Plan(operand.shape, starts, batch_pos, window_pos, sizes,
                     dn.scatter_dims_to_operand_dims, updates.shape)
        values = np.transpose(updates, plan.order)
        target, lin = plan.flat(out, out.shape)  # views: writes land in ``out``
        if target is not None:
            grid = [np.broadcast_to(lin, plan.kept_shape)]
        else:
            target = np.transpose(out, plan.perm)
            grid = [np.broadcast_to(g, plan.kept_shape) for g in plan.grid]
        if not grid:  # nothing indexed: address a leading axis of length 1
            target = target[np.newaxis]
            grid = [np.zeros(plan.kept_shape, np.intp)]
        if in_bounds is not None:  # drop the windows that do not fit
            keep = np.broadcast_to(plan.reduce(_place(in_bounds, batch_pos, rank)),
                                   plan.kept_shape)
            grid = [g[keep] for g in grid]
            values = values[keep]
        combine(target, tuple(grid), values)
        return out

    return impl


def _assign(out, index, values):
    out[index] = values  # with duplicate indices, the last update in row-major order wins


def _scatter_prim(name, combine):
    return standard_primitive(name, _scatter_impl_for(combine), _scatter_abstract_eval_for(name))


scatter_p = _scatter_prim("scatter", _assign)
scatter_add_p = _scatter_prim("scatter-add", np.add.at)
scatter_sub_p = _scatter_prim("scatter-sub", np.subtract.at)
scatter_mul_p = _scatter_prim("scatter-mul", np.multiply.at)
scatter_min_p = _scatter_prim("scatter-min", np.minimum.at)
scatter_max_p = _scatter_prim("scatter-max", np.maximum.at)


def _scatter_gather(x, indices, dnums, updates_shape, mode):
    """The gather that reads, for every update element, the operand element it scatters to
    (0 for the windows a FILL_OR_DROP scatter drops)."""
    sizes = _scatter_window_sizes(core.get_aval(x).shape, updates_shape, dnums)
    fill_value = 0 if mode is GatherScatterMode.FILL_OR_DROP else None
    return gather_p.bind(x, indices, dimension_numbers=_gather_dnums_of_scatter(dnums),
                         fill_value=fill_value, indices_are_sorted=False, mode=mode,
                         slice_sizes=sizes, unique_indices=False)


def _clamping(mode):
    """A gather mode that reads where a scatter of ``mode`` writes (any in-bounds value for
    windows the scatter drops)."""
    return GatherScatterMode.CLIP if mode is GatherScatterMode.CLIP else \
        GatherScatterMode.PROMISE_IN_BOUNDS


def _scatter_addsub_jvp(prim, primals, tangents, **params):
    operand, indices, updates = primals
    out = prim.bind(operand, indices, updates, **params)
    t_op, _, t_up = tangents
    if type(t_op) is ad.Zero and type(t_up) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    return out, prim.bind(ad.instantiate_zeros(t_op), indices, ad.instantiate_zeros(t_up),
                          **params)


def _scatter_addsub_transpose(prim, ct, operand, indices, updates, *, dimension_numbers,
                              indices_are_sorted, mode, unique_indices):
    assert not ad.is_undefined_primal(indices)
    ct_op = ct if ad.is_undefined_primal(operand) else None
    ct_up = None
    if ad.is_undefined_primal(updates):
        ct_up = _scatter_gather(ct, indices, dimension_numbers, updates.aval.shape, mode)
        if prim is scatter_sub_p:
            ct_up = lax.neg(ct_up)
    return [ct_op, None, ct_up]


def _scatter_mul_jvp(primals, tangents, **params):
    x, indices, y = primals
    t_x, _, t_y = tangents
    out = scatter_mul_p.bind(x, indices, y, **params)
    tangent = ad.Zero.from_primal_value(out)
    if type(t_x) is not ad.Zero:
        tangent = scatter_mul_p.bind(t_x, indices, y, **params)
    if type(t_y) is not ad.Zero:
        tangent = ad.add_tangents(tangent, _scatter_mul_updates_tangent(x, indices, y, t_y,
                                                                        **params))
    return out, tangent


def _scatter_mul_updates_tangent(x, indices, y, t_y, *, dimension_numbers, indices_are_sorted,
                                 mode, unique_indices):
    """d out / d y · t_y, where out[p] = x[p] · prod of the updates y_j landing on p.

    With unique indices that is x · scatter_add(t_y). Otherwise each y_j's factor is the
    product of the *other* updates at its position, computed without dividing by zero: the
    product of the nonzero updates and the number of zero updates per position decide it."""
    dn = dimension_numbers
    params = dict(dimension_numbers=dn, indices_are_sorted=indices_are_sorted, mode=mode,
                  unique_indices=unique_indices)
    zeros_x = lax.full_like(x, 0)
    if unique_indices:
        return lax.mul(x, scatter_add_p.bind(zeros_x, indices, t_y, **params))
    y_shape = core.get_aval(y).shape
    is_zero = lax.eq(y, lax.full_like(y, 0))
    ones_y, zeros_y = lax.full_like(y, 1), lax.full_like(y, 0)
    y_nonzero = lax.select(is_zero, ones_y, y)
    prod_nonzero = scatter_mul_p.bind(lax.full_like(x, 1), indices, y_nonzero, **params)
    n_zero = scatter_add_p.bind(zeros_x, indices, lax.select(is_zero, ones_y, zeros_y), **params)
    prod_at = _scatter_gather(prod_nonzero, indices, dn, y_shape, _clamping(mode))
    n_zero_at = _scatter_gather(n_zero, indices, dn, y_shape, _clamping(mode))
    others = lax.select(
        is_zero,
        lax.select(lax.eq(n_zero_at, ones_y), prod_at, zeros_y),
        lax.select(lax.eq(n_zero_at, zeros_y), lax.div(prod_at, y_nonzero), zeros_y))
    return lax.mul(x, scatter_add_p.bind(zeros_x, indices, lax.mul(t_y, others), **params))


def _scatter_mul_transpose(ct, operand, indices, updates, *, dimension_numbers,
                           indices_are_sorted, mode, unique_indices):
    assert not ad.is_undefined_primal(indices)
    params = dict(dimension_numbers=dimension_numbers, indices_are_sorted=indices_are_sorted,
                  mode=mode, unique_indices=unique_indices)
    ct_op = ct_up = None
    if ad.is_undefined_primal(operand):
        if ad.is_undefined_primal(updates):
            raise ValueError("scatter_mul is not linear in operand and updates together")
        ct_op = scatter_mul_p.bind(ct, indices, updates, **params)
    elif ad.is_undefined_primal(updates):
        if not unique_indices:
            raise NotImplementedError(
                "scatter_mul is linear in its updates only with unique_indices=True; "
                "with duplicate indices the updates multiply each other")
        ct_up = _scatter_gather(lax.mul(ct, operand), indices, dimension_numbers,
                                updates.aval.shape, mode)
    return [ct_op, None, ct_up]


def _scatter_extremal_jvp(prim, primals, tangents, **params):
    """scatter-min/max: the tangent of a position comes from the values that won there; ties
    (among updates, and with the operand) share it equally, as in JAX."""
    operand, indices, updates = primals
    t_op, _, t_up = tangents
    out = prim.bind(operand, indices, updates, **params)
    if type(t_op) is ad.Zero and type(t_up) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    t_op, t_up = ad.instantiate_zeros(t_op), ad.instantiate_zeros(t_up)
    dn, mode = params["dimension_numbers"], params["mode"]
    shape = core.get_aval(updates).shape
    read = lambda x: _scatter_gather(x, indices, dn, shape, _clamping(mode))  # noqa: E731
    count = lambda u: scatter_add_p.bind(lax.full_like(operand, 0), indices, u,  # noqa: E731
                                         **params)
    initial, target = read(operand), read(out)
    won = lax.eq(updates, target)
    kept = lax.eq(initial, target)
    ones, zeros = lax.full_like(updates, 1), lax.full_like(updates, 0)
    num_won = read(count(lax.select(won, ones, zeros)))
    num_refs = read(count(ones))
    share_kept = lax.div(1.0, lax.add(num_won, 1.0))
    updates_coef = lax.select(won, lax.select(kept, share_kept, lax.div(1.0, num_won)), zeros)
    operand_coef = lax.div(lax.add(-1.0, lax.select(kept, share_kept, zeros)), num_refs)
    contributions = lax.add(lax.mul(read(t_op), operand_coef), lax.mul(t_up, updates_coef))
    return out, scatter_add_p.bind(t_op, indices, contributions, **params)


def _update_ids(updates_shape, dn):
    """A positive id per update window (the same over a window's elements), to find out
    which update a scatter lets win each position."""
    ids_shape = [1 if d in dn.update_window_dims else n for d, n in enumerate(updates_shape)]
    n = int(np.prod(ids_shape, dtype=np.int64))
    id_dtype = dtypes.int32 if n < np.iinfo(np.int32).max else dtypes.default_int_dtype()
    ids = lax.add(lax.reshape(lax.iota(id_dtype, n), ids_shape),
                  lax.convert_element_type(1, id_dtype))
    return lax.broadcast_in_dim(ids, tuple(updates_shape), tuple(range(len(updates_shape))))


def _winners(ids, indices, operand_shape, dn, params):
    """The ids left in each operand position by scattering ``ids`` (0 where none landed), and
    for each update element whether it won its position."""
    id_dtype = core.get_aval(ids).dtype
    ids_shape = core.get_aval(ids).shape
    scattered = scatter_p.bind(_zeros(operand_shape, id_dtype), indices, ids, **params)
    gathered = _scatter_gather(scattered, indices, dn, ids_shape, _clamping(params["mode"]))
    return scattered, lax.eq(ids, gathered)


def _scatter_jvp(primals, tangents, *, dimension_numbers, indices_are_sorted, mode,
                 unique_indices):
    operand, indices, updates = primals
    t_op, _, t_up = tangents
    dn = dimension_numbers
    params = dict(dimension_numbers=dn, indices_are_sorted=indices_are_sorted, mode=mode,
                  unique_indices=unique_indices)
    if type(t_op) is ad.Zero and type(t_up) is ad.Zero:
        out = scatter_p.bind(operand, indices, updates, **params)
        return out, ad.Zero.from_primal_value(out)
    t_op, t_up = ad.instantiate_zeros(t_op), ad.instantiate_zeros(t_up)
    if unique_indices:
        return (scatter_p.bind(operand, indices, updates, **params),
                scatter_p.bind(t_op, indices, t_up, **params))
    # Duplicate indices: which update wins is decided by scattering ids; the primal and the
    # tangent are then scatter-adds of the masked winners into the masked operand.
    ids = _update_ids(core.get_aval(updates).shape, dn)
    scattered, won = _winners(ids, indices, core.get_aval(operand).shape, dn, params)
    untouched = lax.eq(scattered, lax.full_like(scattered, 0))
    mask_op = lambda x: lax.select(untouched, x, lax.full_like(x, 0))  # noqa: E731
    mask_up = lambda x: lax.select(won, x, lax.full_like(x, 0))  # noqa: E731
    out = scatter_add_p.bind(mask_op(operand), indices, mask_up(updates), **params)
    tangent = scatter_add_p.bind(mask_op(t_op), indices, mask_up(t_up), **params)
    return out, tangent


def _scatter_transpose(ct, operand, indices, updates, *, dimension_numbers,
                       indices_are_sorted, mode, unique_indices):
    assert not ad.is_undefined_primal(indices)
    dn = dimension_numbers
    params = dict(dimension_numbers=dn, indices_are_sorted=indices_are_sorted, mode=mode,
                  unique_indices=unique_indices)
    updates_aval = updates.aval if ad.is_undefined_primal(updates) else \
        core.get_aval(updates)
    ct_dtype = core.get_aval(ct).dtype
    ct_op = ct_up = None
    if ad.is_undefined_primal(operand):
        # overwritten positions get no cotangent
        ct_op = scatter_p.bind(ct, indices, _zeros(updates_aval.shape, ct_dtype), **params)
    if ad.is_undefined_primal(updates):
        ct_up = _scatter_gather(ct, indices, dn, updates_aval.shape, mode)
        if not unique_indices:  # only the update that won a position gets its cotangent
            ids = _update_ids(updates_aval.shape, dn)
            _, won = _winners(ids, indices, core.get_aval(ct).shape, dn, params)
            ct_up = lax.select(won, ct_up, lax.full_like(ct_up, 0))
    return [ct_op, None, ct_up]


def _scatter_batch(prim, vals, dims, *, dimension_numbers, indices_are_sorted, mode,
                   unique_indices):
    operand, indices, updates = vals
    od, idd, ud = dims
    dn = dimension_numbers
    size = batching.axis_size_of(vals, dims)
    operand = batching.bdim_at_front(operand, od, size)
    updates = batching.bdim_at_front(updates, ud, size)
    params = dict(indices_are_sorted=indices_are_sorted, mode=mode,
                  unique_indices=unique_indices)
    if idd is None:
        # the batch dimension is one more window dimension, updated whole
        dnums = ScatterDimensionNumbers(
            update_window_dims=(0,) + _shift(dn.update_window_dims),
            inserted_window_dims=_shift(dn.inserted_window_dims),
            scatter_dims_to_operand_dims=_shift(dn.scatter_dims_to_operand_dims),
            operand_batching_dims=_shift(dn.operand_batching_dims),
            scatter_indices_batching_dims=dn.scatter_indices_batching_dims)
        return prim.bind(operand, indices, updates, dimension_numbers=dnums, **params), 0
    indices = batching.moveaxis(indices, idd, 0)
    dnums = ScatterDimensionNumbers(
        update_window_dims=_shift(dn.update_window_dims),
        inserted_window_dims=_shift(dn.inserted_window_dims),
        scatter_dims_to_operand_dims=_shift(dn.scatter_dims_to_operand_dims),
        operand_batching_dims=(0,) + _shift(dn.operand_batching_dims),
        scatter_indices_batching_dims=(0,) + _shift(dn.scatter_indices_batching_dims))
    return prim.bind(operand, indices, updates, dimension_numbers=dnums, **params), 0


def _register_scatter_rules():
    for prim in (scatter_add_p, scatter_sub_p):
        ad.primitive_jvps[prim] = (lambda p: lambda primals, tangents, **params:
                                   _scatter_addsub_jvp(p, primals, tangents, **params))(prim)
        ad.primitive_transposes[prim] = (lambda p: lambda ct, *args, **params:
                                         _scatter_addsub_transpose(p, ct, *args, **params))(prim)
    for prim in (scatter_min_p, scatter_max_p):
        ad.primitive_jvps[prim] = (lambda p: lambda primals, tangents, **params:
                                   _scatter_extremal_jvp(p, primals, tangents, **params))(prim)
    ad.primitive_jvps[scatter_mul_p] = _scatter_mul_jvp
    ad.primitive_transposes[scatter_mul_p] = _scatter_mul_transpose
    ad.primitive_jvps[scatter_p] = _scatter_jvp
    ad.primitive_transposes[scatter_p] = _scatter_transpose
    for prim in (scatter_p, scatter_add_p, scatter_sub_p, scatter_mul_p, scatter_min_p,
                 scatter_max_p):
        batching.primitive_batchers[prim] = (lambda p: lambda vals, dims, **params:
                                             _scatter_batch(p, vals, dims, **params))(prim)


_register_scatter_rules()


def _scatter_fn(prim, doc):
    def fn(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
           unique_indices=False, mode=None):
        dnums = _canonical_dnums(ScatterDimensionNumbers, dimension_numbers, prim.name)
        updates = _as_array_operand(updates, operand)
        return prim.bind(operand, scatter_indices, updates, dimension_numbers=dnums,
                         indices_are_sorted=bool(indices_are_sorted),
                         mode=GatherScatterMode.from_any(mode),
                         unique_indices=bool(unique_indices))

    fn.__name__ = prim.name.replace("-", "_")
    fn.__qualname__ = fn.__name__
    fn.__doc__ = doc + (" Out-of-bounds update windows are dropped unless ``mode='clip'`` "
                        "clamps them.")
    return fn


scatter = _scatter_fn(scatter_p, "XLA's Scatter: ``operand`` with the ``updates`` windows "
                      "written at the index vectors (last axis of ``scatter_indices``); with "
                      "duplicate indices the last update in row-major order wins.")
scatter_add = _scatter_fn(scatter_add_p, "Scatter combining by addition (duplicates "
                          "accumulate).")
scatter_sub = _scatter_fn(scatter_sub_p, "Scatter combining by subtraction.")
scatter_mul = _scatter_fn(scatter_mul_p, "Scatter combining by multiplication.")
scatter_min = _scatter_fn(scatter_min_p, "Scatter combining by minimum.")
scatter_max = _scatter_fn(scatter_max_p, "Scatter combining by maximum.")
