"""Slicing primitives: slice, dynamic_slice and dynamic_update_slice, with their impls,
abstract evals, JVP, transpose and batching rules, and the ``*_in_dim`` conveniences.

Dynamic starts are clamped so the block fits, as XLA does; with batched start indices the
batching rules become a gather (scatter) with one index vector per batch element."""

import builtins
import functools
import operator

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax import rule_ops
from remat.lax.elementwise import add, convert_element_type, lt, select, select_n
from remat.lax.gather_scatter_common import (
    GatherDimensionNumbers,
    GatherScatterMode,
    ScatterDimensionNumbers,
    as_array_operand,
    zeros,
)
from remat.lax.gathers import gather_batching_rule
from remat.lax.scatters import scatter_batching_rule, scatter_p
from remat.lax.shape import broadcast_in_dim, concatenate, expand_dims, full, pad, squeeze
from remat.lax.standard import canonical_shape, copying_impl, standard_primitive
from remat.runtime import registry

__all__ = [
    "dynamic_index_in_dim",
    "dynamic_slice",
    "dynamic_slice_in_dim",
    "dynamic_slice_p",
    "dynamic_update_index_in_dim",
    "dynamic_update_slice",
    "dynamic_update_slice_in_dim",
    "dynamic_update_slice_p",
    "index_in_dim",
    "slice",
    "slice_in_dim",
    "slice_p",
]

_slice = builtins.slice  # this module defines lax.slice


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
    return [pad(ct, full((), 0, core.get_aval(ct).dtype), config)]


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
    return result if keepdims else squeeze(result, (axis,))


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
    blank = zeros(x.aval.shape, core.get_aval(ct).dtype)
    return [dynamic_update_slice_p.bind(blank, ct, *indices)] + [None] * len(indices)


def _index_vector(indices, dims, size):
    """Scalar start indices (some batched along axis 0 of shape ``(size,)``) as one index
    vector: shape ``(n,)`` when none is batched, else ``(size, n)`` batched at 0."""
    if all(d is None for d in dims):
        parts = [broadcast_in_dim(i, (1,), ()) for i in indices]
        return concatenate(parts, 0), None
    parts = [broadcast_in_dim(batching.moveaxis(i, d, 0) if d is not None else i,
                                  (size, 1), () if d is None else (0,))
             for i, d in zip(indices, dims)]
    return concatenate(parts, 1), 0


def _dynamic_slice_batch(vals, dims, slice_sizes):
    x, indices = vals[0], vals[1:]
    xd, idims = dims[0], dims[1:]
    if all(d is None for d in idims):
        # only the operand is batched: take the whole batch dimension
        zero = zeros((), core.get_aval(indices[0]).dtype if indices else
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
    return gather_batching_rule([x, index], [xd, index_dim], dimension_numbers=dnums,
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
        if static or (not isinstance(i, core.Tracer) and dtypes.kind(idtype) in "iu"
                      and core.get_aval(i).ndim == 0):
            # a concrete index: wrap it now rather than with staged operations
            v = int(i) if static else int(core.to_numpy(i))
            if v < 0 and allow:
                v += d
            elif v < 0 and static:
                raise ValueError(f"Index {v} is out of bounds for dimension {d} if "
                                 f"allow_negative_indices=False")
            out.append(convert_element_type(v, idtype))
            continue
        if allow and dtypes.kind(idtype) == "i":
            size = convert_element_type(d, idtype)
            i = select(lt(i, convert_element_type(0, idtype)), add(i, size), i)
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
    return out if keepdims else squeeze(out, (int(axis),))


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


def _dynamic_update_slice_into(x, update, *indices):
    """The update written into ``x`` itself (the impl's copy, or ``x`` where the executor owns
    it and it dies here)."""
    starts = _clamped_starts(x.shape, indices, update.shape)
    x[tuple(_slice(s, s + n) for s, n in zip(starts, update.shape))] = update


_dynamic_update_slice_impl = copying_impl(_dynamic_update_slice_into)
dynamic_update_slice_p = standard_primitive("dynamic_update_slice", _dynamic_update_slice_impl,
                                            _dynamic_update_slice_abstract_eval)
registry.update_impls[dynamic_update_slice_p] = (_dynamic_update_slice_impl,
                                                 _dynamic_update_slice_into)


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
        blank = zeros(update_shape, core.get_aval(ct).dtype)
        ct_x = dynamic_update_slice_p.bind(ct, blank, *indices)
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
        zero = zeros((), core.get_aval(indices[0]).dtype if indices else
                      dtypes.default_int_dtype())
        return dynamic_update_slice_p.bind(x, update, zero, *indices), 0
    index, index_dim = _index_vector(indices, idims, size)
    n = core.get_aval(update).ndim - (ud is not None)
    dnums = ScatterDimensionNumbers(update_window_dims=tuple(range(n)), inserted_window_dims=(),
                                    scatter_dims_to_operand_dims=tuple(range(n)))
    return scatter_batching_rule(scatter_p, [x, index, update], [xd, index_dim, ud],
                                 dimension_numbers=dnums, indices_are_sorted=True,
                                 mode=GatherScatterMode.CLIP, unique_indices=True)


def _selected_update_slice(eqn, kept_dims, update_case):
    """``select_n`` between a dynamic update's operand and its result, its predicate broadcast
    along the operand's ``kept_dims``, as one update of the selected block: None unless the
    block spans each kept dimension whole (so the predicate is the same along the block)."""
    operand, update = eqn.invars[0].aval, eqn.invars[1].aval
    if any(update.shape[d] != operand.shape[d] for d in kept_dims):
        return None

    def selected(pred, x, u, *starts):
        which = broadcast_in_dim(pred, update.shape, tuple(kept_dims))
        kept = dynamic_slice_p.bind(x, *starts, slice_sizes=update.shape)
        cases = (kept, u) if update_case == 1 else (u, kept)
        return dynamic_update_slice_p.bind(x, select_n(which, *cases), *starts)
    return selected


registry.selected_update_forms[dynamic_update_slice_p] = _selected_update_slice
ad.primitive_jvps[dynamic_update_slice_p] = _dynamic_update_slice_jvp
ad.primitive_transposes[dynamic_update_slice_p] = _dynamic_update_slice_transpose
batching.primitive_batchers[dynamic_update_slice_p] = _dynamic_update_slice_batch



def dynamic_update_slice(operand, update, start_indices, *, allow_negative_indices=True):
    """``operand`` with the block at ``start_indices`` (clamped so ``update`` fits)
    replaced by ``update``."""
    indices = _dynamic_slice_indices(operand, start_indices, allow_negative_indices)
    update = as_array_operand(update, operand)
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
    update = as_array_operand(update, operand)
    if core.get_aval(update).ndim != core.get_aval(operand).ndim:
        if core.get_aval(update).ndim + 1 != core.get_aval(operand).ndim:
            raise TypeError(f"dynamic_update_index_in_dim update must have rank equal to the "
                            f"operand rank or one less, got update shape "
                            f"{core.get_aval(update).shape} for operand shape "
                            f"{core.get_aval(operand).shape}")
        update = expand_dims(update, (axis,))
    return dynamic_update_slice_in_dim(operand, update, index, axis,
                                       allow_negative_indices=allow_negative_indices)


rule_ops.provide(slice=slice)
