"""NumPy indexing (``x[idx]``) and indexed updates (``x.at[idx].set(y)``), lowered to lax,
and the index functions built on them: ``take take_along_axis put put_along_axis place``.

As in JAX, an index is lowered to the cheapest primitive that expresses it:

1. ints, slices, ``None``/``...`` only: a static ``slice`` (then ``rev``/``squeeze``/
   ``expand_dims``), so ``x[1:3]`` stages as a single ``slice``;
2. plus scalar integer arrays or tracers (and unit-step slices): ``dynamic_slice``, which clamps
   the start like JAX;
3. anything else (integer arrays, concrete boolean masks, strided slices mixed with dynamic
   indices, ``mode='fill'``): ``gather``, following NumPy's rules for where the advanced-index
   dimensions go.

Indexed updates always lower to a ``scatter`` variant built from the same plan as the gather.

Out-of-bounds indices behave as in JAX: reads clamp (static ints too: ``arange(10)[11]`` is
9), ``mode='fill'`` reads ``fill_value`` instead, and updates drop out-of-bounds values
(``mode='clip'`` clamps them). ``remat.numpy.array_methods`` builds ``x[idx]`` and
``x.at[idx]`` on ``rewriting_take`` and ``scatter_update``.
"""

import operator
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from remat import core, dtypes, lax
from remat.array import Array
from remat.numpy.util import _canonicalize_axis, _check_arraylike, asarray, broadcast_shapes

__all__ = [
    "NonConcreteBooleanIndexError",
    "UpdateOp",
    "place",
    "put",
    "put_along_axis",
    "rewriting_take",
    "scatter_update",
    "take",
    "take_along_axis",
]


class NonConcreteBooleanIndexError(IndexError):
    """A boolean mask whose value is not known while tracing: the result shape would depend on
    it. (JAX's ``jax.errors.NonConcreteBooleanIndexError``.)"""

    def __init__(self, aval):
        super().__init__(
            f"Array boolean indices must be concrete; got {aval.str_short()}\n\n"
            "See https://docs.jax.dev/en/latest/errors.html"
            "#jax.errors.NonConcreteBooleanIndexError")


# --- parsing ---------------------------------------------------------------------------------

_NONE, _ELLIPSIS, _SLICE, _INT, _BOOL, _BOOL_ARRAY, _ARRAY = (
    "none", "ellipsis", "slice", "int", "bool", "bool_array", "array")


def _is_traced(x):
    return isinstance(x, core.Tracer)


def _concrete(x):
    """The NumPy value of an Array / NumPy value, or of a tracer with a known value; else None."""
    if isinstance(x, core.Tracer):
        value = x.concrete_value()
        return None if value is None else np.asarray(core.concrete_or_error(value))
    if isinstance(x, Array):
        return x._buf
    return np.asarray(x)


def _sequence_index(seq):
    """An index given as a (nested) list inside the index tuple, as an array."""
    if len(seq) == 0:
        return np.zeros((0,), dtype=np.int32)
    leaves = []

    def walk(s):
        for e in s:
            if isinstance(e, (list, tuple)):
                walk(e)
            else:
                leaves.append(e)

    walk(seq)
    if any(_is_traced(e) for e in leaves):  # a list holding tracers: stack them with lax
        return asarray(seq)
    return np.asarray(seq)


def _classify(idx):
    """(kind, value) of one entry of an index tuple."""
    if idx is None:
        return _NONE, None
    if idx is Ellipsis:
        return _ELLIPSIS, None
    if isinstance(idx, slice):
        return _SLICE, idx
    if isinstance(idx, (bool, np.bool_)):
        return _BOOL, bool(idx)
    if isinstance(idx, (int, np.integer)):
        return _INT, int(idx)
    if isinstance(idx, str):
        raise TypeError(f"JAX does not support string indexing; got idx={idx!r}")
    if isinstance(idx, (list, tuple)):
        idx = _sequence_index(idx)
    if isinstance(idx, (Array, core.Tracer, np.ndarray)):
        dtype = idx.dtype
        if dtype == np.bool_:
            return (_BOOL, idx) if idx.ndim == 0 else (_BOOL_ARRAY, idx)
        if dtypes.issubdtype(dtype, np.integer):
            return _ARRAY, idx
        raise TypeError(f"Indexer must have integer or boolean type, got indexer with type "
                        f"{np.dtype(dtype).name}")
    if isinstance(idx, (float, complex, np.generic)):
        raise TypeError(f"Indexer must have integer or boolean type, got indexer with type "
                        f"{np.dtype(type(idx)).name}")
    raise IndexError("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and "
                     f"integer or boolean arrays are valid indices. Got {idx!r}")


def _as_tuple(idx):
    if isinstance(idx, tuple):
        return idx
    if isinstance(idx, Sequence) and not isinstance(idx, str):
        # NumPy's old heuristics for lists as multidimensional indices; JAX rejects them all.
        raise TypeError("Using a non-tuple sequence for multidimensional indexing is not "
                        "allowed; use `arr[tuple(seq)]` or `arr[array(seq)]` instead of "
                        "`arr[seq]`. See https://github.com/jax-ml/jax/issues/4564 for more "
                        "information.")
    return (idx,)


class _Entry:
    """One index entry after parsing: its kind, value and (for kinds consuming one axis) the
    axis of the indexed array it applies to; ``pos`` is its position in the user's tuple,
    used for NumPy's contiguity rule for advanced indices."""

    __slots__ = ("kind", "value", "axis", "pos")

    def __init__(self, kind, value, axis, pos):
        self.kind, self.value, self.axis, self.pos = kind, value, axis, pos

    def __repr__(self):
        return f"_Entry({self.kind}, {self.value!r}, axis={self.axis}, pos={self.pos})"


def _canonical_slice(s, size, pos):
    """(start, step, length) of a slice with static bounds on an axis of ``size``."""
    bounds = []
    for b in (s.start, s.stop, s.step):
        if isinstance(b, core.Tracer):
            value = b.concrete_value()
            if value is None:
                raise IndexError(f"Slice entries must be static integers. Got {s} at "
                                 f"position {pos}")
            b = core.concrete_or_error(value)
        try:
            bounds.append(None if b is None else operator.index(b))
        except TypeError:
            raise TypeError("slice indices must be integers or None or have an __index__ "
                            "method") from None
    start, stop, step = slice(*bounds).indices(size)
    return start, step, len(range(start, stop, step))


def _parse(idx, shape):
    """Parse ``idx`` against ``shape``: a list of _Entry with the ellipsis expanded and
    trailing full slices added; boolean arrays are left for ``_expand_bool_arrays``."""
    raw = [(_classify(i), p) for p, i in enumerate(_as_tuple(idx))]
    consumed = 0
    n_ellipsis = 0
    for (kind, value), _ in raw:
        if kind == _ELLIPSIS:
            n_ellipsis += 1
        elif kind == _BOOL_ARRAY:
            consumed += value.ndim
        elif kind in (_SLICE, _INT, _ARRAY):
            consumed += 1
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if consumed > len(shape):
        raise IndexError(f"Too many indices: array is {len(shape)}-dimensional, but {consumed} "
                         f"were indexed")
    entries = []
    axis = 0
    for (kind, value), pos in raw:
        if kind == _ELLIPSIS:
            for _ in range(len(shape) - consumed):
                entries.append(_Entry(_SLICE, slice(None), axis, pos))
                axis += 1
        elif kind in (_NONE, _BOOL):
            entries.append(_Entry(kind, value, None, pos))
        elif kind == _BOOL_ARRAY:
            entries.append(_Entry(kind, value, tuple(range(axis, axis + value.ndim)), pos))
            axis += value.ndim
        else:
            entries.append(_Entry(kind, value, axis, pos))
            axis += 1
    end = len(raw)
    while axis < len(shape):
        entries.append(_Entry(_SLICE, slice(None), axis, end))
        axis += 1
    return entries


def _parse_mode(mode):
    if mode is None:
        return None
    return lax.GatherScatterMode.from_any(mode)


def _clip_or_promise(mode):
    return mode is None or mode in (lax.GatherScatterMode.CLIP,
                                    lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def _index_dtype(shape):
    if any(d > np.iinfo(np.int32).max for d in shape):
        return dtypes.canonicalize_dtype(np.int64)
    return dtypes.int32


# --- the static and dynamic slice paths ------------------------------------------------------


def _static_int_start(value, size, axis, normalize):
    """A static integer index as the start it reads: negative ones wrapped once (with
    ``normalize``), then clamped into the axis, as JAX's gathers and dynamic slices do."""
    if size == 0:
        raise IndexError(f"index is out of bounds for axis {axis} with size 0")
    if normalize and value < 0:
        value += size
    return min(max(value, 0), size - 1)


def _static_slice(x, entries, shape, normalize):
    """``x[idx]`` with only static ints, slices, None and at most one scalar boolean."""
    starts, limits, strides, rev_axes, squeeze_axes, new_axes = [], [], [], [], [], []
    out_shape = []
    for e in entries:
        if e.kind == _INT:
            i = _static_int_start(e.value, shape[e.axis], e.axis, normalize)
            starts.append(i)
            limits.append(i + 1)
            strides.append(1)
            squeeze_axes.append(e.axis)
        elif e.kind == _SLICE:
            start, step, length = _canonical_slice(e.value, shape[e.axis], e.pos)
            if step > 0:
                starts.append(start)
                limits.append(start + step * (length - 1) + 1 if length else start)
                strides.append(step)
            else:  # slice the same elements in increasing order, then reverse
                starts.append(start + step * (length - 1) if length else 0)
                limits.append(start + 1 if length else 0)
                strides.append(-step)
                rev_axes.append(e.axis)
            out_shape.append(length)
        else:  # None, or a scalar boolean: a new axis (of size 0 for False)
            new_axes.append(len(out_shape))
            out_shape.append(0 if e.kind == _BOOL and not e.value else 1)
    if 0 in out_shape and any(e.kind == _BOOL for e in entries):
        return lax.full_like(x, 0, shape=out_shape)  # x[False]: nothing to slice
    if tuple(starts) != (0,) * len(shape) or tuple(limits) != tuple(shape) or \
            any(s != 1 for s in strides):
        x = lax.slice(x, starts, limits, None if all(s == 1 for s in strides) else strides)
    return _reverse_squeeze_expand(x, rev_axes, squeeze_axes, new_axes)


def _reverse_squeeze_expand(x, rev_axes, squeeze_axes, new_axes):
    """The end of a basic-indexing view: negative steps, integer indices, ``None``s."""
    if rev_axes:
        x = lax.rev(x, rev_axes)
    if squeeze_axes:
        x = lax.squeeze(x, squeeze_axes)
    if new_axes:
        x = lax.expand_dims(x, new_axes)
    return x


def _scalar_index(value, index_dtype):
    """A scalar integer Array/tracer as a start index of ``index_dtype`` (``dynamic_slice``
    wraps negative starts itself, as in JAX)."""
    aval = core.get_aval(value)
    if aval.dtype != index_dtype or aval.weak_type:
        value = lax.convert_element_type(value, index_dtype)
    return value


def _dynamic_slice(x, entries, shape, normalize):
    """``x[idx]`` with scalar integer arrays/tracers among static ints and unit-step slices
    (``dynamic_slice`` wraps negative dynamic starts when ``normalize``, and clamps)."""
    index_dtype = _index_dtype(shape)
    starts, sizes, rev_axes, squeeze_axes, new_axes = [], [], [], [], []
    out_pos = 0
    for e in entries:
        if e.kind in (_INT, _ARRAY):
            size = shape[e.axis]
            if size == 0:
                raise IndexError(f"index is out of bounds for axis {e.axis} with size 0")
            if e.kind == _INT:
                starts.append(index_dtype.type(_static_int_start(e.value, size, e.axis,
                                                                 normalize)))
            else:
                starts.append(_scalar_index(e.value, index_dtype))
            sizes.append(1)
            squeeze_axes.append(e.axis)
        elif e.kind == _SLICE:
            start, step, length = _canonical_slice(e.value, shape[e.axis], e.pos)
            if step < 0:
                start = start - length + 1 if length else 0
                rev_axes.append(e.axis)
            starts.append(index_dtype.type(start))
            sizes.append(length)
            out_pos += 1
        else:
            new_axes.append(out_pos)
            out_pos += 1
    x = lax.dynamic_slice(x, starts, sizes, allow_negative_indices=normalize)
    return _reverse_squeeze_expand(x, rev_axes, squeeze_axes, new_axes)


def _static_path_ok(entries, mode):
    if not _clip_or_promise(mode):
        return False
    n_bool = sum(e.kind == _BOOL for e in entries)
    for e in entries:
        if e.kind == _BOOL and (n_bool > 1 or _is_traced(e.value)):
            return False
        if e.kind not in (_NONE, _SLICE, _INT, _BOOL):
            return False
    return not (n_bool and any(e.kind == _INT for e in entries))


def _dynamic_path_ok(entries, shape, mode):
    if not _clip_or_promise(mode):
        return False
    for e in entries:
        if e.kind == _ARRAY and core.get_aval(e.value).ndim == 0:
            continue
        if e.kind == _SLICE:
            _, step, _ = _canonical_slice(e.value, shape[e.axis], e.pos)
            if step in (1, -1):
                continue
            return False
        if e.kind not in (_NONE, _INT):
            return False
    return True


# --- the gather/scatter plan -----------------------------------------------------------------


def _expand_bool_arrays(entries):
    """Concrete boolean masks become one integer index array per masked axis; a traced mask
    raises NonConcreteBooleanIndexError."""
    out = []
    for e in entries:
        if e.kind not in (_BOOL, _BOOL_ARRAY):
            out.append(e)
            continue
        value = _concrete(e.value)
        if value is None:
            raise NonConcreteBooleanIndexError(core.get_aval(e.value))
        if e.kind == _BOOL:
            out.append(_Entry(_BOOL, bool(value), None, e.pos))
            continue
        out.append(_Entry(_BOOL_ARRAY, value, e.axis, e.pos))  # shape checked in _plan
    return out


class _Plan:
    """How ``x[idx]`` is one gather (or ``x.at[idx]`` one scatter): see ``_plan``."""

    __slots__ = ("slice_shape", "gather_slice_shape", "indices", "offset_dims",
                 "collapsed_slice_dims", "start_index_map", "newaxis_dims", "bool_axes",
                 "unique", "sorted")


def _normalize_index_array(value, size, index_dtype, normalize):
    """An integer index array (NumPy or traced) with negative entries wrapped (when
    ``normalize``), in ``index_dtype``; concrete values stay NumPy, limited to [-1, size] so
    that far out-of-bounds values stay out of bounds in a narrower index dtype."""
    if not _is_traced(value):
        value = _concrete(value)
        if normalize and dtypes.kind(value.dtype) == "i":
            value = np.where(value < 0, value + size, value)
        if value.size and dtypes.kind(value.dtype) in "iu":
            value = np.clip(value, -1 if dtypes.kind(value.dtype) == "i" else 0, size)
        return value.astype(index_dtype)
    aval = core.get_aval(value)
    if normalize and dtypes.kind(aval.dtype) == "i":
        value = lax.select(lax.lt(value, 0), lax.add(value, size), value)
    if aval.dtype != index_dtype or aval.weak_type:
        value = lax.convert_element_type(value, index_dtype)
    return value


def _broadcast_index(value, shape, start, index_dtype):
    """Place the dims of an index component at ``start`` of the batch ``shape``."""
    ndim = np.ndim(value) if not _is_traced(value) else core.get_aval(value).ndim
    dims = tuple(range(start, start + ndim))
    if not _is_traced(value):
        expanded = [1] * len(shape)
        for d, n in zip(dims, np.shape(value)):
            expanded[d] = n
        return np.broadcast_to(np.reshape(value, expanded), shape).astype(index_dtype)
    return lax.broadcast_in_dim(value, shape, dims)


def _plan(entries, shape, normalize=True):
    """NumPy's indexing semantics as one gather: which axes are indexed by which index arrays,
    which become windows (unit-step slices), and where the result's dimensions go. Negative
    integer indices count from the end when ``normalize``."""
    index_dtype = _index_dtype(shape)
    # Boolean masks -> integer arrays; scalar booleans -> an index array over a new axis.
    expanded, bool_axes = [], []
    x_shape = []
    axis = 0
    for e in entries:
        if e.kind == _BOOL_ARRAY:
            mask = e.value
            want = tuple(shape[a] for a in e.axis)
            if mask.shape != want and not any(s == 0 for s in mask.shape):
                raise IndexError(f"boolean index did not match shape of indexed array in index "
                                 f"{e.pos}: got {mask.shape}, expected {want}")
            for a, ix in zip(e.axis, np.nonzero(mask)):
                expanded.append(_Entry(_ARRAY, ix, axis, e.pos))
                x_shape.append(shape[a])
                axis += 1
        elif e.kind == _BOOL:
            bool_axes.append(axis)
            expanded.append(_Entry(_ARRAY, np.arange(int(e.value)), axis, e.pos))
            x_shape.append(1)
            axis += 1
        elif e.kind == _NONE:
            expanded.append(e)
        else:
            expanded.append(_Entry(e.kind, e.value, axis, e.pos))
            x_shape.append(shape[e.axis])
            axis += 1

    def ndim_of(v):
        return core.get_aval(v).ndim if _is_traced(v) else np.ndim(v)

    advanced_mode = any(e.kind == _ARRAY and ndim_of(e.value) > 0 for e in expanded) or \
        bool(bool_axes)
    advanced = [e for e in expanded if advanced_mode and e.kind in (_INT, _ARRAY)]
    if advanced:
        positions = sorted({e.pos for e in advanced})
        contiguous = positions == list(range(positions[0], positions[-1] + 1))
        first = advanced[0] if contiguous else expanded[0]
        arrays = []
        for e in advanced:
            if e.kind == _INT:
                if x_shape[e.axis] == 0:
                    raise IndexError(f"index is out of bounds for axis {e.axis} with size 0")
                arrays.append(_normalize_index_array(np.asarray(e.value), x_shape[e.axis],
                                                     index_dtype, normalize))
            else:
                arrays.append(_normalize_index_array(e.value, x_shape[e.axis], index_dtype,
                                                     normalize))
        shapes = [core.get_aval(a).shape if _is_traced(a) else np.shape(a) for a in arrays]
        try:
            batch_shape = tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            got = " ".join(str(tuple(s)) for s in shapes)
            raise IndexError(f"shape mismatch: indexing arrays could not be broadcast together "
                             f"with shapes {got}") from None
        advanced_ids = {id(e) for e in advanced}
    else:
        first, advanced_ids = None, set()

    plan = _Plan()
    components = []  # (index value, start dim in the batch shape)
    batch = []  # the batch (gather-indices) shape, without the trailing index vector dim
    offset_dims, collapsed, start_index_map = [], [], []
    slice_shape, gather_slice_shape, newaxis_dims = [], [], []
    y_axis = collapsed_y_axis = 0
    has_reversed = False
    for e in expanded:
        if e is first:
            start = len(batch)
            for a in arrays:
                nd = ndim_of(a)
                if nd < len(batch_shape):  # right-align as NumPy broadcasting does
                    a = _broadcast_index(a, batch_shape, len(batch_shape) - nd, index_dtype)
                components.append((a, start))
            batch += batch_shape
            for e2 in advanced:
                start_index_map.append(e2.axis)
                collapsed.append(e2.axis)
            slice_shape += batch_shape
            y_axis += len(batch_shape)
            collapsed_y_axis += len(batch_shape)
        if id(e) in advanced_ids:
            gather_slice_shape.append(1)
            continue
        if e.kind in (_INT, _ARRAY):  # a scalar index outside advanced indexing
            size = x_shape[e.axis]
            if size == 0:
                raise IndexError(f"index is out of bounds for axis {e.axis} with size 0")
            value = np.asarray(e.value) if e.kind == _INT else e.value
            components.append((_normalize_index_array(value, size, index_dtype, normalize),
                               len(batch)))
            collapsed.append(e.axis)
            start_index_map.append(e.axis)
            gather_slice_shape.append(1)
        elif e.kind == _NONE:
            slice_shape.append(1)
            newaxis_dims.append(y_axis)
            y_axis += 1
        else:  # a slice
            size = x_shape[e.axis]
            start, step, length = _canonical_slice(e.value, size, e.pos)
            slice_shape.append(length)
            if step == 1:
                if length != size:
                    components.append((np.asarray(start, index_dtype), len(batch)))
                    start_index_map.append(e.axis)
                gather_slice_shape.append(length)
                offset_dims.append(collapsed_y_axis)
            else:
                has_reversed |= step < 0
                components.append((np.arange(length, dtype=index_dtype) * step + start,
                                   len(batch)))
                batch.append(length)
                start_index_map.append(e.axis)
                collapsed.append(e.axis)
                gather_slice_shape.append(1)
            collapsed_y_axis += 1
            y_axis += 1

    if not components:
        indices = None
    elif len(components) == 1 and components[0][1] == 0 and \
            ndim_of(components[0][0]) == len(batch):
        value = components[0][0]
        indices = np.expand_dims(value, -1) if not _is_traced(value) else \
            lax.expand_dims(value, (len(batch),))
    else:
        full = tuple(batch) + (1,)
        parts = [_broadcast_index(v, full, s, index_dtype) for v, s in components]
        if any(_is_traced(p) for p in parts):
            indices = lax.concatenate(parts, len(batch))
        else:
            indices = np.concatenate(parts, axis=len(batch))
    plan.slice_shape = tuple(slice_shape)
    plan.gather_slice_shape = tuple(gather_slice_shape)
    plan.indices = indices
    plan.offset_dims = tuple(offset_dims)
    plan.collapsed_slice_dims = tuple(sorted(collapsed))
    plan.start_index_map = tuple(start_index_map)
    plan.newaxis_dims = tuple(newaxis_dims)
    plan.bool_axes = tuple(bool_axes)
    plan.unique = not advanced
    plan.sorted = not advanced and not has_reversed
    return plan


def _gather(x, entries, shape, *, indices_are_sorted, unique_indices, mode, fill_value,
            normalize):
    plan = _plan(_expand_bool_arrays(entries), shape, normalize)
    if fill_value is not None:
        fill_value = core.concrete_or_error(fill_value,
                                            "fill_value argument to indexed get()")
        if np.ndim(fill_value) != 0:
            raise ValueError("fill_value argument to indexed get() must be a scalar")
        fill_value = np.asarray(fill_value).item()
    if plan.bool_axes:
        x = lax.expand_dims(x, plan.bool_axes)
    if any(d == 0 for d in plan.slice_shape):
        return lax.full_like(x, 0, shape=plan.slice_shape)
    if plan.indices is not None:
        dnums = lax.GatherDimensionNumbers(offset_dims=plan.offset_dims,
                                           collapsed_slice_dims=plan.collapsed_slice_dims,
                                           start_index_map=plan.start_index_map)
        x = lax.gather(x, plan.indices, dnums, plan.gather_slice_shape,
                       unique_indices=bool(unique_indices or plan.unique),
                       indices_are_sorted=bool(indices_are_sorted or plan.sorted),
                       mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else mode,
                       fill_value=fill_value)
    if plan.newaxis_dims:
        x = lax.expand_dims(x, plan.newaxis_dims)
    return x


def rewriting_take(arr, idx, *, indices_are_sorted=False, unique_indices=False, mode=None,
                   fill_value=None, normalize_indices=True):
    """``arr[idx]`` with NumPy semantics, as JAX lowers it (see the module docstring).

    ``mode`` is how out-of-bounds indices are handled (JAX's ``GatherScatterMode`` or one of
    'clip', 'fill'/'drop', 'promise_in_bounds', 'one_hot'). By default (as with 'clip') an
    out-of-bounds index, static or dynamic, is clamped into the axis: ``arange(10)[11]`` is
    9; 'fill' returns ``fill_value`` instead. ``normalize_indices=False`` leaves negative
    indices out of bounds rather than counting them from the end."""
    shape = core.get_aval(arr).shape
    entries = _parse(idx, shape)
    mode = _parse_mode(mode)
    normalize = bool(normalize_indices)
    if _static_path_ok(entries, mode):
        return _static_slice(arr, entries, shape, normalize)
    if any(e.kind == _ARRAY for e in entries) and _dynamic_path_ok(entries, shape, mode):
        return _dynamic_slice(arr, entries, shape, normalize)
    return _gather(arr, entries, shape, indices_are_sorted=indices_are_sorted,
                   unique_indices=unique_indices, mode=mode, fill_value=fill_value,
                   normalize=normalize)


# --- indexed updates -------------------------------------------------------------------------


def _broadcast_to(y, shape):
    """``y`` broadcast to ``shape`` with NumPy's rules, using lax."""
    aval = core.get_aval(y)
    if aval.shape == tuple(shape):
        return y
    nd = len(shape) - aval.ndim
    if nd < 0:
        raise ValueError(f"Cannot broadcast to shape with fewer dimensions: "
                         f"arr_shape={aval.shape} shape={tuple(shape)}")
    if any(s not in (1, t) for s, t in zip(aval.shape, shape[nd:])):
        raise ValueError(f"Incompatible shapes for broadcasting: {aval.shape} and requested "
                         f"shape {tuple(shape)}")
    kept = [i for i, s in enumerate(aval.shape) if s == shape[nd + i]]
    if len(kept) != aval.ndim:  # drop size-1 dims that stretch, then broadcast
        y = lax.reshape(y, tuple(aval.shape[i] for i in kept))
    return lax.broadcast_in_dim(y, tuple(shape), tuple(nd + i for i in kept))


def _as_value(y, x_dtype):
    """The update operand: Python ints that fit become ``x``'s integer dtype (as in JAX)."""
    if isinstance(y, int) and not isinstance(y, bool) and dtypes.issubdtype(x_dtype, np.integer):
        info = dtypes.iinfo(x_dtype)
        if info.min <= y <= info.max:
            return lax.convert_element_type(y, x_dtype)
    if isinstance(y, (list, tuple)):
        y = np.asarray(y)
    if isinstance(y, np.ndarray) or isinstance(y, np.generic):
        y = np.asarray(y)
        return lax.convert_element_type(y, dtypes.canonicalize_dtype(y.dtype))
    if dtypes.is_python_scalar(y):
        dtype, weak = dtypes.dtype_and_weak(y)
        return lax.convert_element_type(y, dtype, weak)
    if not isinstance(y, (Array, core.Tracer)):
        raise TypeError(f"Value {y!r} with type {type(y)} is not a valid JAX type")
    return y


class UpdateOp(NamedTuple):
    """How an indexed update combines the values: ``scatter`` is a function with the
    signature of ``lax.scatter`` (``lax.scatter_add``, ...), ``whole`` the same update
    applied elementwise when the index selects the whole array (``x.at[:]``)."""

    scatter: Callable
    whole: Callable


UPDATE_OPS = {
    "scatter": UpdateOp(lax.scatter, lambda x, y: y),
    "scatter_add": UpdateOp(lax.scatter_add, lax.add),
    "scatter_sub": UpdateOp(lax.scatter_sub, lax.sub),
    "scatter_mul": UpdateOp(lax.scatter_mul, lax.mul),
    "scatter_min": UpdateOp(lax.scatter_min, lax.min),
    "scatter_max": UpdateOp(lax.scatter_max, lax.max),
}


def scatter_update(x, idx, y, scatter_op, *, indices_are_sorted=False, unique_indices=False,
                   mode=None, normalize_indices=True):
    """``x`` with ``x[idx] (op)= y`` done functionally by a scatter.

    ``scatter_op`` is an ``UpdateOp`` or the name of one in ``UPDATE_OPS``: 'scatter',
    'scatter_add', 'scatter_sub', 'scatter_mul', 'scatter_min' or 'scatter_max'. ``y`` is
    broadcast to the shape of ``x[idx]``; the computation runs in the promoted dtype of ``x``
    and ``y`` and is cast back to ``x``'s dtype (as JAX does). Out-of-bounds updates are
    dropped unless ``mode='clip'``; ``normalize_indices=False`` leaves negative indices out
    of bounds."""
    op = UPDATE_OPS[scatter_op] if isinstance(scatter_op, str) else scatter_op
    x_aval = core.get_aval(x)
    shape = x_aval.shape
    y = _as_value(y, x_aval.dtype)
    entries = _expand_bool_arrays(_parse(idx, shape))
    plan = _plan(entries, shape, bool(normalize_indices))
    if any(d == 0 for d in plan.slice_shape):
        return x
    dtype, weak = dtypes.result_type(x, y, return_weak_type_flag=True)
    if x_aval.dtype != dtype:
        x = lax.convert_element_type(x, dtype, weak)
    if core.get_aval(y).dtype != dtype:
        y = lax.convert_element_type(y, dtype, weak)
    y = _broadcast_to(y, plan.slice_shape)
    if plan.newaxis_dims:
        y = lax.squeeze(y, plan.newaxis_dims)
    if plan.bool_axes:
        x = lax.expand_dims(x, plan.bool_axes)
    if plan.indices is None:  # every axis is a full slice: no indices to scatter at
        out = op.whole(x, y)
    else:
        dnums = lax.ScatterDimensionNumbers(
            update_window_dims=plan.offset_dims, inserted_window_dims=plan.collapsed_slice_dims,
            scatter_dims_to_operand_dims=plan.start_index_map)
        out = op.scatter(
            x, plan.indices, y, dnums,
            indices_are_sorted=bool(indices_are_sorted or plan.sorted),
            unique_indices=bool(unique_indices or plan.unique), mode=mode)
    if plan.bool_axes:
        out = lax.squeeze(out, plan.bool_axes)
    out_aval = core.get_aval(out)
    if out_aval.dtype != x_aval.dtype or out_aval.weak_type != x_aval.weak_type:
        out = lax.convert_element_type(out, x_aval.dtype, x_aval.weak_type)
    return out


# --- take, take_along_axis, put, put_along_axis, place ---------------------------------------


def _size(shape):
    return int(np.prod(shape, dtype=np.int64))


def _ravel(x):
    return lax.reshape(x, (_size(core.get_aval(x).shape),))


def _check_integer_indices(indices):
    dtype = core.get_aval(indices).dtype
    if not dtypes.is_integer(dtype):
        raise ValueError(f"indices must have an integer type, got {dtype.name}")


def _wrap_negative(indices, size):
    """Negative (signed) indices counted from the end of an axis of ``size``."""
    dtype = core.get_aval(indices).dtype
    if dtypes.kind(dtype) != "i":
        return indices
    return lax.select(lax.lt(indices, lax.full_like(indices, 0)),
                      lax.add(indices, lax.full_like(indices, size)), indices)


def _floor_mod(indices, size):
    """``indices % size`` with Python's sign rule (``size`` > 0)."""
    n = lax.full_like(indices, size)
    r = lax.rem(indices, n)
    if dtypes.kind(core.get_aval(indices).dtype) != "i":
        return r
    return lax.select(lax.lt(r, lax.full_like(r, 0)), lax.add(r, n), r)


def _clamp_index(indices, size):
    """``indices`` clamped into ``[0, size - 1]``."""
    return lax.clamp(lax.full_like(indices, 0, shape=()), indices,
                     lax.full_like(indices, size - 1, shape=()))


def take(a, indices, axis=None, out=None, mode=None, unique_indices=False,
         indices_are_sorted=False, fill_value=None):
    """Elements of ``a`` at ``indices`` along ``axis`` (of the flattened array by default).

    As in JAX, out-of-bounds indices do not raise: ``mode='fill'`` (the default) returns
    ``fill_value`` for them (NaN for inexact dtypes, the most negative signed / largest
    unsigned integer, True), ``'clip'`` clamps them (negative ones to 0), ``'wrap'`` wraps
    them modulo the axis size. Negative indices in bounds count from the end ('fill')."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.take is not supported.")
    _check_arraylike("take", a, indices)
    a, indices = asarray(a), asarray(indices)
    if axis is None:
        a = _ravel(a)
        axis = 0
    shape = core.get_aval(a).shape
    axis = _canonicalize_axis(axis, len(shape))
    _check_integer_indices(indices)
    size = shape[axis]
    if mode is None or (isinstance(mode, str) and mode == "fill"):
        gather_mode = lax.GatherScatterMode.FILL_OR_DROP
        indices = _wrap_negative(indices, size)
    elif isinstance(mode, str) and mode == "raise":
        raise NotImplementedError("The 'raise' mode to jnp.take is not supported.")
    elif isinstance(mode, str) and mode == "wrap":
        gather_mode = lax.GatherScatterMode.PROMISE_IN_BOUNDS
        indices = _floor_mod(indices, size) if size else indices
    elif isinstance(mode, str) and mode == "clip":
        gather_mode = lax.GatherScatterMode.CLIP
    else:
        raise ValueError(f"Invalid mode '{mode}' for np.take")
    idx_shape = core.get_aval(indices).shape
    if size == 0:
        if _size(idx_shape):
            raise IndexError("Cannot do a non-empty jnp.take() from an empty axis.")
        return a
    if _size(idx_shape) == 0:
        return lax.full_like(a, 0, shape=shape[:axis] + idx_shape + shape[axis + 1:])
    nd = len(idx_shape)
    dnums = lax.GatherDimensionNumbers(
        offset_dims=tuple(range(axis)) + tuple(range(axis + nd, len(shape) + nd - 1)),
        collapsed_slice_dims=(axis,), start_index_map=(axis,))
    slice_sizes = shape[:axis] + (1,) + shape[axis + 1:]
    return lax.gather(a, lax.expand_dims(indices, (nd,)), dnums, slice_sizes, mode=gather_mode,
                      unique_indices=unique_indices, indices_are_sorted=indices_are_sorted,
                      fill_value=fill_value)


def take_along_axis(arr, indices, axis=-1, mode=None, fill_value=None, *,
                    wrap_negative_indices=None):
    """``arr`` indexed along ``axis`` by ``indices`` of the same rank, the other axes
    broadcast against each other (``np.take_along_axis``).

    ``mode`` is a gather mode: 'fill' (the default: out-of-bounds indices give
    ``fill_value``), 'clip', 'promise_in_bounds' or 'one_hot' (out of bounds reads zero).
    Negative indices count from the end unless ``wrap_negative_indices=False`` (by default
    they do except with ``mode='promise_in_bounds'``, as in JAX)."""
    _check_arraylike("take_along_axis", arr, indices)
    a, indices = asarray(arr), asarray(indices)
    idx_aval = core.get_aval(indices)
    if not dtypes.is_integer(idx_aval.dtype):
        raise TypeError(f"take_along_axis indices must be of integer type, got "
                        f"{idx_aval.dtype.name}")
    if axis is None:
        if idx_aval.ndim != 1:
            raise ValueError(f"take_along_axis indices must be 1D if axis=None, got shape "
                             f"{idx_aval.shape}")
        a = _ravel(a)
        axis = 0
    a_shape, idx_shape = core.get_aval(a).shape, idx_aval.shape
    rank = len(a_shape)
    if rank != len(idx_shape):
        raise ValueError(f"indices and arr must have the same number of dimensions; "
                         f"{len(idx_shape)} vs. {rank}")
    axis = _canonicalize_axis(axis, rank)
    axis_size = a_shape[axis]
    arr_shape = a_shape[:axis] + (1,) + a_shape[axis + 1:]
    out_shape = broadcast_shapes(idx_shape, arr_shape)
    if axis_size == 0:
        return lax.full(out_shape, 0, core.get_aval(a).dtype)
    if wrap_negative_indices is None:
        wrap_negative_indices = not (isinstance(mode, str) and mode == "promise_in_bounds")
    if wrap_negative_indices:
        indices = _wrap_negative(indices, axis_size)
    # Index dims of size 1 take the whole axis of ``arr`` (offset dims); operand dims of size
    # 1 facing a longer index dim are squeezed; the rest pair up as gather batching dims.
    index_dims = [i for i, n in enumerate(idx_shape) if i == axis or n != 1]
    indices = lax.reshape(indices, tuple(out_shape[i] for i in index_dims) + (1,))
    slice_sizes, offset_dims, start_index_map, collapsed = [], [], [], []
    operand_batching, indices_batching, squeezed = [], [], []
    new_i = j = 0
    for i in range(rank):
        if i == axis:
            slice_sizes.append(1)
            start_index_map.append(new_i)
            collapsed.append(new_i)
            new_i, j = new_i + 1, j + 1
        elif idx_shape[i] == 1:
            offset_dims.append(i)
            slice_sizes.append(arr_shape[i])
            new_i += 1
        elif arr_shape[i] == 1:
            squeezed.append(i)
            j += 1
        else:
            slice_sizes.append(0 if arr_shape[i] == 0 else 1)
            operand_batching.append(new_i)
            indices_batching.append(j)
            new_i, j = new_i + 1, j + 1
    if squeezed:
        a = lax.squeeze(a, squeezed)
    dnums = lax.GatherDimensionNumbers(
        offset_dims=tuple(offset_dims), collapsed_slice_dims=tuple(collapsed),
        start_index_map=tuple(start_index_map), operand_batching_dims=tuple(operand_batching),
        start_indices_batching_dims=tuple(indices_batching))
    return lax.gather(a, indices, dnums, tuple(slice_sizes),
                      mode="fill" if mode is None else mode, fill_value=fill_value)


def _inplace_error(name):
    return ValueError(f"jax.numpy.{name} cannot modify arrays in-place, because JAX arrays are "
                      f"immutable. Pass inplace=False to instead return an updated array.")


def _tile_to_size(x, n):
    """The 1-D ``x`` repeated (or cut) to length ``n``."""
    m = core.get_aval(x).shape[0]
    return x if m == n else rewriting_take(x, np.arange(n) % m)


def put(a, ind, v, mode=None, *, inplace=True):
    """A copy of ``a`` with the flat positions ``ind`` set to ``v`` (repeated to the length of
    ``ind``). ``inplace=False`` is required, as JAX arrays are immutable. Out-of-bounds
    indices are clamped (negative ones first count from the end), or with ``mode='clip'``
    clamped, or with ``mode='wrap'`` wrapped modulo the size."""
    if inplace:
        raise _inplace_error("put")
    _check_arraylike("put", a, ind, v)
    arr = asarray(a)
    ind, v = _ravel(asarray(ind)), _ravel(asarray(v))
    shape = core.get_aval(arr).shape
    size = _size(shape)
    n_ind, n_v = core.get_aval(ind).shape[0], core.get_aval(v).shape[0]
    ind_dtype = core.get_aval(ind).dtype
    if not dtypes.is_integer(ind_dtype):
        raise TypeError(f"Indexer must have integer or boolean type, got indexer with type "
                        f"{ind_dtype.name}")
    if not size or not n_ind or not n_v:
        return arr
    v = _tile_to_size(v, n_ind)
    if mode is None:
        ind, scatter_mode = _clamp_index(_wrap_negative(ind, size), size), "drop"
    elif mode == "clip":
        ind, scatter_mode = _clamp_index(ind, size), "promise_in_bounds"
    elif mode == "wrap":
        ind, scatter_mode = _floor_mod(ind, size), "promise_in_bounds"
    elif mode == "raise":
        raise NotImplementedError("The 'raise' mode to jnp.put is not supported.")
    else:
        raise ValueError(f"mode should be one of 'wrap' or 'clip'; got mode={mode!r}")
    flat = scatter_update(_ravel(arr), ind, v, "scatter", mode=scatter_mode)
    return lax.reshape(flat, shape)


def put_along_axis(arr, indices, values, axis, inplace=True, *, mode=None):
    """A copy of ``arr`` with ``values`` (broadcast to ``indices``) written at ``indices``
    along ``axis``, the counterpart of ``take_along_axis``; ``inplace=False`` is required.
    Out-of-bounds updates are dropped unless ``mode='clip'``."""
    if inplace:
        raise _inplace_error("put_along_axis")
    _check_arraylike("put_along_axis", arr, indices, values)
    arr, indices, values = asarray(arr), asarray(indices), asarray(values)
    original_shape = core.get_aval(arr).shape
    if axis is None:
        arr = _ravel(arr)
        axis = 0
    shape = core.get_aval(arr).shape
    idx_shape = core.get_aval(indices).shape
    if len(shape) != len(idx_shape):
        raise ValueError(f"put_along_axis arguments 'arr' and 'indices' must have same ndim. "
                         f"Got arr.ndim={len(shape)} and indices.ndim={len(idx_shape)}.")
    try:
        values = _broadcast_to(values, idx_shape)
    except ValueError:
        raise ValueError(f"put_along_axis argument 'values' must be broadcastable to "
                         f"'indices'. Got values.shape={core.get_aval(values).shape} and "
                         f"indices.shape={idx_shape}.") from None
    axis = _canonicalize_axis(axis, len(shape))
    index = tuple(indices if k == axis else
                  np.arange(n).reshape((1,) * k + (n,) + (1,) * (len(shape) - k - 1))
                  for k, n in enumerate(shape))
    out = scatter_update(arr, index, values, "scatter", mode=mode)
    return lax.reshape(out, original_shape) if len(original_shape) != len(shape) else out


def place(arr, mask, vals, *, inplace=True):
    """A copy of ``arr`` whose elements where ``mask`` is true are set, in order, to the
    elements of ``vals`` (repeated as needed); ``inplace=False`` is required. The k-th true
    element of the mask takes ``vals[k % len(vals)]`` (a cumulative sum finds k), so the mask
    may be traced."""
    _check_arraylike("place", arr, mask, vals)
    data, mask, vals = asarray(arr), asarray(mask), _ravel(asarray(vals))
    if inplace:
        raise _inplace_error("place")
    data_aval = core.get_aval(data)
    size = _size(data_aval.shape)
    if size != _size(core.get_aval(mask).shape):
        raise ValueError("place: arr and mask must be the same size")
    n_vals = core.get_aval(vals).shape[0]
    if not n_vals:
        raise ValueError("Cannot place values from an empty array")
    if not size:
        return data
    flat_mask = _ravel(mask)
    if core.get_aval(flat_mask).dtype != dtypes.bool_:
        flat_mask = lax.ne(flat_mask, lax.full_like(flat_mask, 0))
    rank = lax.cumsum(lax.convert_element_type(flat_mask, dtypes.int32))
    rank = _floor_mod(lax.sub(rank, lax.full_like(rank, 1)), n_vals)
    picked = lax.convert_element_type(rewriting_take(vals, rank), data_aval.dtype,
                                      data_aval.weak_type)
    return lax.reshape(lax.select(flat_mask, picked, _ravel(data)), data_aval.shape)
