"""The gather primitive: impl, abstract eval, JVP, transpose (a scatter-add with the same
mode) and batching; ``lax.gather`` and ``lax.index_take``."""

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax import rule_ops
from remat.lax.elementwise import add, lt, rem, select
from remat.lax.gather_scatter_common import (
    GatherDimensionNumbers,
    GatherScatterMode,
    WindowPlan,
    canonical_dnums,
    check_dims_in_range,
    check_disjoint_dims,
    check_indices_batching_dims,
    check_indices_dtype,
    check_no_duplicate_dims,
    check_sorted,
    default_fill_value,
    place_axes,
    reads_zero_out_of_bounds,
    scatter_dnums_of_gather,
    shift_dims,
    window_starts,
    zeros,
)
from remat.lax.shape import concatenate, expand_dims, full_like
from remat.lax.standard import canonical_shape, standard_primitive

__all__ = ["gather", "gather_p", "index_take"]


def _gather_shape(indices_shape, dnums, slice_sizes):
    batch = iter(indices_shape[:-1])
    window = iter(s for i, s in enumerate(slice_sizes)
                  if i not in dnums.collapsed_slice_dims and i not in dnums.operand_batching_dims)
    rank = len(dnums.offset_dims) + len(indices_shape) - 1
    return tuple(next(window) if i in dnums.offset_dims else next(batch) for i in range(rank))


def _gather_abstract_eval(operand, indices, *, dimension_numbers, fill_value,
                          indices_are_sorted, mode, slice_sizes, unique_indices):
    check_indices_dtype(indices)
    dn = dimension_numbers
    if indices.ndim < 1:
        raise TypeError(f"Gather index leaf dimension must be within [0, rank(indices) + 1). "
                        f"rank(indices) is {indices.ndim} and gather index leaf dimension is "
                        f"-1; indices need a trailing index vector dimension.")
    index_vector_dim = indices.ndim - 1
    check_sorted(dn.offset_dims, "gather", "offset_dims")
    check_no_duplicate_dims(dn.offset_dims, "gather", "offset_dims")
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
    check_no_duplicate_dims(dn.start_index_map, "gather", "start_index_map")
    check_sorted(dn.collapsed_slice_dims, "gather", "collapsed_slice_dims")
    check_dims_in_range(dn.collapsed_slice_dims, operand.ndim, "gather", "collapsed_slice_dims")
    check_no_duplicate_dims(dn.collapsed_slice_dims, "gather", "collapsed_slice_dims")
    check_no_duplicate_dims(dn.operand_batching_dims, "gather", "operand_batching_dims")
    check_sorted(dn.operand_batching_dims, "gather", "operand_batching_dims")
    check_dims_in_range(dn.operand_batching_dims, operand.ndim, "gather", "operand_batching_dims")
    check_disjoint_dims(dn.collapsed_slice_dims, dn.operand_batching_dims, "gather",
                   "collapsed_slice_dims", "operand_batching_dims")
    check_disjoint_dims(dn.start_index_map, dn.operand_batching_dims, "gather", "start_index_map",
                   "operand_batching_dims")
    check_indices_batching_dims("gather", operand, indices, dn.operand_batching_dims,
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
    masked = reads_zero_out_of_bounds(mode)
    starts, in_bounds = window_starts(operand.shape, indices, dn.start_index_map,
                                      dn.operand_batching_dims, dn.start_indices_batching_dims,
                                      slice_sizes, clamp=True, check=masked)
    plan = WindowPlan(operand.shape, starts, batch_pos, window_pos, slice_sizes,
                      dn.start_index_map, out_shape)
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
    order = np.argsort(plan.order)
    # (no transpose when the order is already right: a fresh result, not a view of one, is
    # what the executor can write a following elementwise step into)
    out = res if (order == np.arange(len(order))).all() else np.transpose(res, order)
    if masked and in_bounds is not None:
        if mode is GatherScatterMode.ONE_HOT:
            fill = 0
        else:
            fill = default_fill_value(operand.dtype) if fill_value is None else fill_value
        with np.errstate(invalid="ignore", over="ignore"):
            fill = np.array(fill).astype(operand.dtype)
        out = np.where(place_axes(in_bounds, batch_pos, rank), out, fill)
    return out


gather_p = standard_primitive("gather", _gather_impl, _gather_abstract_eval)


def _gather_jvp(g, operand, indices, *, dimension_numbers, fill_value, indices_are_sorted,
                mode, slice_sizes, unique_indices):
    """Gather is linear in the operand: the tangent is the same gather, with zeros where a
    FILL_OR_DROP gather fills."""
    return gather_p.bind(g, indices, dimension_numbers=dimension_numbers,
                         fill_value=0 if mode is GatherScatterMode.FILL_OR_DROP else None,
                         indices_are_sorted=indices_are_sorted, mode=mode,
                         slice_sizes=slice_sizes, unique_indices=unique_indices)


def _gather_transpose(ct, operand, indices, *, dimension_numbers, fill_value,
                      indices_are_sorted, mode, slice_sizes, unique_indices):
    """A scatter-add with the same mode: CLIP sends the cotangent of a clamped window to
    where it was read; FILL_OR_DROP, PROMISE_IN_BOUNDS and ONE_HOT drop it (as JAX)."""
    assert ad.is_undefined_primal(operand) and not ad.is_undefined_primal(indices)
    out = rule_ops.scatter_add_p.bind(zeros(operand.aval.shape, core.get_aval(ct).dtype), indices,
                                 ct, dimension_numbers=scatter_dnums_of_gather(dimension_numbers),
                                 indices_are_sorted=indices_are_sorted, mode=mode,
                                 unique_indices=unique_indices)
    return [out, None]


def gather_batching_rule(vals, dims, *, dimension_numbers, fill_value, indices_are_sorted,
                         mode, slice_sizes, unique_indices):
    operand, indices = vals
    od, idd = dims
    dn = dimension_numbers
    params = dict(fill_value=fill_value, mode=mode)
    if idd is None:
        # the batch dimension becomes one more (full) window dimension, output dim 0
        operand = batching.moveaxis(operand, od, 0)
        size = core.get_aval(operand).shape[0]
        dnums = GatherDimensionNumbers(
            offset_dims=(0,) + shift_dims(dn.offset_dims),
            collapsed_slice_dims=shift_dims(dn.collapsed_slice_dims),
            start_index_map=shift_dims(dn.start_index_map),
            operand_batching_dims=shift_dims(dn.operand_batching_dims),
            start_indices_batching_dims=dn.start_indices_batching_dims)
        return gather_p.bind(operand, indices, dimension_numbers=dnums,
                             indices_are_sorted=indices_are_sorted,
                             slice_sizes=(size,) + tuple(slice_sizes),
                             unique_indices=unique_indices, **params), 0
    indices = batching.moveaxis(indices, idd, 0)
    if od is None:
        # the batch dimension is one more batch dimension of the indices
        dnums = dn._replace(
            offset_dims=shift_dims(dn.offset_dims),
            start_indices_batching_dims=shift_dims(dn.start_indices_batching_dims))
        return gather_p.bind(operand, indices, dimension_numbers=dnums,
                             indices_are_sorted=False, slice_sizes=tuple(slice_sizes),
                             unique_indices=False, **params), 0
    # both batched: pair the two batch dimensions as gather batching dimensions
    operand = batching.moveaxis(operand, od, 0)
    size = core.get_aval(operand).shape[0]
    dnums = GatherDimensionNumbers(
        offset_dims=shift_dims(dn.offset_dims),
        collapsed_slice_dims=shift_dims(dn.collapsed_slice_dims),
        start_index_map=shift_dims(dn.start_index_map),
        operand_batching_dims=(0,) + shift_dims(dn.operand_batching_dims),
        start_indices_batching_dims=(0,) + shift_dims(dn.start_indices_batching_dims))
    return gather_p.bind(operand, indices, dimension_numbers=dnums,
                         indices_are_sorted=indices_are_sorted,
                         slice_sizes=(0 if size == 0 else 1,) + tuple(slice_sizes),
                         unique_indices=unique_indices, **params), 0


ad.defjvp(gather_p, _gather_jvp, None)
ad.primitive_transposes[gather_p] = _gather_transpose
batching.primitive_batchers[gather_p] = gather_batching_rule


def gather(operand, start_indices, dimension_numbers, slice_sizes, *, unique_indices=False,
           indices_are_sorted=False, mode=None, fill_value=None):
    """XLA's Gather: the ``slice_sizes`` windows of ``operand`` starting at each index vector
    (the last axis of ``start_indices``). ``mode`` (default: promise_in_bounds, which clamps)
    decides what out-of-bounds windows do; 'fill' fills them with ``fill_value`` (default NaN,
    the most negative signed / largest unsigned integer, or True); 'one_hot' reads zeros."""
    dnums = canonical_dnums(GatherDimensionNumbers, dimension_numbers, "gather")
    mode = GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else \
        GatherScatterMode.from_any(mode)
    if mode is GatherScatterMode.FILL_OR_DROP:
        if fill_value is None:
            fill_value = default_fill_value(core.get_aval(operand).dtype)
        else:
            fill_value = np.asarray(core.concrete_or_error(
                fill_value, "The fill_value argument of gather must be static.")).item()
    else:
        fill_value = None
    return gather_p.bind(operand, start_indices, dimension_numbers=dnums,
                         fill_value=fill_value, indices_are_sorted=bool(indices_are_sorted),
                         mode=mode, slice_sizes=canonical_shape(slice_sizes, "slice_sizes"),
                         unique_indices=bool(unique_indices))


def index_take(src, idxs, axes):
    """``src`` at the index arrays ``idxs`` (one 1-D array per axis in ``axes``, wrapped
    modulo the axis size): the result's first axis runs over the indices, the others are the
    axes of ``src`` not indexed, in order."""
    axes = tuple(int(a) for a in axes)
    shape = core.get_aval(src).shape
    if len(idxs) != len(axes):
        raise ValueError(f"index_take needs one index array per axis, got {len(idxs)} index "
                         f"arrays for axes {axes}")
    columns = []
    for i, ax in zip(idxs, axes):
        size = full_like(i, shape[ax])
        wrapped = rem(i, size)
        if dtypes.kind(core.get_aval(i).dtype) == "i":  # a floor modulus, as Python's %
            wrapped = select(lt(wrapped, full_like(wrapped, 0)),
                                 add(wrapped, size), wrapped)
        columns.append(expand_dims(wrapped, (1,)))
    indices = concatenate(columns, 1)
    slice_sizes = tuple(1 if d in axes else n for d, n in enumerate(shape))
    dnums = GatherDimensionNumbers(
        offset_dims=tuple(range(1, len(shape) - len(axes) + 1)),
        collapsed_slice_dims=axes, start_index_map=axes)
    return gather(src, indices, dnums, slice_sizes)
