"""Shape primitives: broadcast_in_dim, reshape, transpose, squeeze, rev, pad, concatenate,
iota — with their rules (``expand_dims`` is a ``broadcast_in_dim``, as in JAX). Reshapes and
transposes return NumPy views."""

import functools

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, array_ops, batching
from remat.lax import rule_ops
from remat.lax.elementwise import convert_element_type, select, sub
from remat.lax.standard import canonical_shape, check_same_dtypes, standard_primitive
from remat.runtime import memory, registry

__all__ = [
    "broadcast",
    "broadcast_in_dim",
    "broadcast_in_dim_p",
    "broadcasted_iota",
    "concatenate",
    "concatenate_p",
    "expand_dims",
    "full",
    "full_like",
    "iota",
    "iota_p",
    "pad",
    "pad_p",
    "reshape",
    "reshape_p",
    "rev",
    "rev_p",
    "squeeze",
    "squeeze_p",
    "transpose",
    "transpose_p",
    "zeros_like_array",
]

# --- broadcast_in_dim ------------------------------------------------------------------------


def _broadcast_in_dim_abstract_eval(x, shape, broadcast_dimensions):
    if len(broadcast_dimensions) != x.ndim:
        raise TypeError(f"broadcast_in_dim broadcast_dimensions must have length equal to "
                        f"operand ndim; got broadcast_dimensions {broadcast_dimensions} for "
                        f"operand ndim {x.ndim}.")
    if len(set(broadcast_dimensions)) != len(broadcast_dimensions) or \
            list(broadcast_dimensions) != sorted(broadcast_dimensions) or \
            any(not 0 <= d < len(shape) for d in broadcast_dimensions):
        raise TypeError(f"broadcast_in_dim broadcast_dimensions must be strictly increasing "
                        f"dimensions of the output shape {shape}; got {broadcast_dimensions}.")
    for i, d in enumerate(broadcast_dimensions):
        if x.shape[i] not in (1, shape[d]):
            raise TypeError(f"broadcast_in_dim operand dimension sizes must either be 1, or be "
                            f"equal to their corresponding dimensions in the target broadcast "
                            f"shape; got operand of shape {x.shape}, target broadcast shape "
                            f"{shape}, broadcast_dimensions {broadcast_dimensions}")
    return ShapedArray(shape, x.dtype, x.weak_type)


def _broadcast_in_dim_impl(x, shape, broadcast_dimensions):
    memory.check_fits(shape, x.dtype)
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = x.shape[i]
    return np.broadcast_to(x.reshape(expanded), shape)


broadcast_in_dim_p = standard_primitive("broadcast_in_dim", _broadcast_in_dim_impl,
                                        _broadcast_in_dim_abstract_eval)


def _broadcast_in_dim_transpose(ct, x, shape, broadcast_dimensions):
    in_shape = x.aval.shape
    summed = [d for d in range(len(shape)) if d not in broadcast_dimensions]
    summed += [d for i, d in enumerate(broadcast_dimensions)
               if in_shape[i] == 1 and shape[d] != 1]
    out = rule_ops.reduce_sum(ct, tuple(sorted(summed))) if summed else ct
    return [reshape(out, in_shape)]


def _broadcast_in_dim_batch(vals, dims, shape, broadcast_dimensions):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    size = core.get_aval(x).shape[0]
    return broadcast_in_dim_p.bind(x, shape=(size,) + tuple(shape),
                                   broadcast_dimensions=(0,) + tuple(
                                       b + 1 for b in broadcast_dimensions)), 0


ad.deflinear2(broadcast_in_dim_p, _broadcast_in_dim_transpose)
batching.primitive_batchers[broadcast_in_dim_p] = _broadcast_in_dim_batch


def broadcast_in_dim(operand, shape, broadcast_dimensions):
    """Broadcast ``operand`` to ``shape``; operand dim i becomes output dim
    ``broadcast_dimensions[i]``."""
    shape = canonical_shape(shape, "broadcast_in_dim shape")
    aval = core.get_aval(operand)
    if aval.shape == shape and tuple(broadcast_dimensions) == tuple(range(len(shape))) and \
            not isinstance(operand, (int, float, bool, complex)):
        return operand
    return broadcast_in_dim_p.bind(operand, shape=shape,
                                   broadcast_dimensions=tuple(int(d) for d in
                                                              broadcast_dimensions))


def broadcast(operand, sizes):
    """Add leading dimensions ``sizes``."""
    ndim = core.get_aval(operand).ndim
    sizes = canonical_shape(sizes, "broadcast sizes")
    return broadcast_in_dim(operand, sizes + core.get_aval(operand).shape,
                            tuple(range(len(sizes), len(sizes) + ndim)))


def full(shape, fill_value, dtype=None):
    """An array of ``shape`` filled with ``fill_value``."""
    shape = canonical_shape(shape, "full shape")
    if dtype is None:
        dtype, weak = dtypes.dtype_and_weak(fill_value)
    else:
        dtype, weak = dtypes.canonicalize_dtype(dtype), False
    return full_of_type(shape, fill_value, dtype, weak)


def full_of_type(shape, fill_value, dtype, weak_type):
    """``full`` of a canonical shape and dtype, weakly typed or not (the interpreters' zeros
    keep their aval's weak type)."""
    return broadcast_in_dim(convert_element_type(fill_value, dtype, weak_type), shape, ())


def full_like(x, fill_value, dtype=None, shape=None):
    """``full`` with the shape and dtype of ``x`` (dtype/shape overridable)."""
    aval = core.get_aval(x)
    weak = aval.weak_type if dtype is None else False
    dtype = aval.dtype if dtype is None else dtypes.canonicalize_dtype(dtype)
    value = convert_element_type(fill_value, dtype, weak)
    return broadcast_in_dim(value, aval.shape if shape is None else
                            canonical_shape(shape, "full_like shape"), ())


def zeros_like_array(x):
    return full_like(x, 0)


# --- reshape ---------------------------------------------------------------------------------


def _reshape_abstract_eval(x, new_sizes, dimensions):
    if int(np.prod(new_sizes, dtype=np.int64)) != x.size:
        raise TypeError(f"reshape total size must be unchanged, got new_sizes {new_sizes} "
                        f"for shape {x.shape}.")
    if dimensions is not None and sorted(dimensions) != list(range(x.ndim)):
        raise TypeError(f"reshape dimensions must be a permutation of the operand dimensions, "
                        f"got {dimensions} for shape {x.shape}.")
    return ShapedArray(new_sizes, x.dtype, x.weak_type)


def _reshape_impl(x, new_sizes, dimensions):
    if dimensions is not None:
        x = np.transpose(x, dimensions)
    return np.reshape(x, new_sizes)


reshape_p = standard_primitive("reshape", _reshape_impl, _reshape_abstract_eval)


def _reshape_transpose(ct, x, new_sizes, dimensions):
    if dimensions is None:
        return [reshape(ct, x.aval.shape)]
    permuted = tuple(x.aval.shape[d] for d in dimensions)
    return [transpose(reshape(ct, permuted), tuple(np.argsort(dimensions)))]


def _reshape_batch(vals, dims, new_sizes, dimensions):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    if dimensions is not None:
        x = transpose(x, (0,) + tuple(p + 1 for p in dimensions))
    size = core.get_aval(x).shape[0]
    return reshape_p.bind(x, new_sizes=(size,) + tuple(new_sizes), dimensions=None), 0


ad.deflinear2(reshape_p, _reshape_transpose)
batching.primitive_batchers[reshape_p] = _reshape_batch


def reshape(operand, new_sizes, dimensions=None):
    """``operand`` with shape ``new_sizes`` (row-major order, after permuting by
    ``dimensions`` if given)."""
    new_sizes = canonical_shape(new_sizes, "reshape new_sizes")
    aval = core.get_aval(operand)
    if dimensions is not None:
        dimensions = tuple(int(d) for d in dimensions)
        if dimensions == tuple(range(aval.ndim)):
            dimensions = None
    if aval.shape == new_sizes and dimensions is None and hasattr(operand, "aval"):
        return operand
    return reshape_p.bind(operand, new_sizes=new_sizes, dimensions=dimensions)


# --- transpose -------------------------------------------------------------------------------


def _transpose_abstract_eval(x, permutation):
    if sorted(permutation) != list(range(x.ndim)):
        raise TypeError(f"transpose permutation isn't a permutation of operand dimensions, got "
                        f"permutation {permutation} for operand shape {x.shape}.")
    return ShapedArray(tuple(x.shape[p] for p in permutation), x.dtype, x.weak_type)


transpose_p = standard_primitive("transpose", lambda x, permutation: np.transpose(x, permutation),
                                 _transpose_abstract_eval)
ad.deflinear(transpose_p, lambda ct, permutation: [transpose(ct, tuple(np.argsort(permutation)))])


def _transpose_batch(vals, dims, permutation):
    (x,), (d,) = vals, dims
    perm = tuple(p if p < d else p + 1 for p in permutation)
    perm = (d,) + perm
    return transpose_p.bind(x, permutation=perm), 0


batching.primitive_batchers[transpose_p] = _transpose_batch
registry.transpose_primitive = transpose_p
registry.broadcast_primitive = broadcast_in_dim_p


def transpose(operand, permutation):
    """Permute the dimensions of ``operand``."""
    permutation = tuple(int(p) for p in permutation)
    if hasattr(operand, "aval") and permutation == tuple(range(operand.aval.ndim)):
        return operand
    return transpose_p.bind(operand, permutation=permutation)


# --- squeeze / expand_dims -------------------------------------------------------------------


def _squeeze_abstract_eval(x, dimensions):
    for d in dimensions:
        if not 0 <= d < x.ndim or x.shape[d] != 1:
            raise ValueError(f"cannot select an axis to squeeze out which has size not equal to "
                             f"one, got shape={x.shape} and dimensions={dimensions}")
    return ShapedArray(tuple(s for i, s in enumerate(x.shape) if i not in dimensions),
                       x.dtype, x.weak_type)


squeeze_p = standard_primitive("squeeze", lambda x, dimensions: np.squeeze(x, dimensions),
                               _squeeze_abstract_eval)
ad.deflinear2(squeeze_p, lambda ct, x, dimensions: [reshape(ct, x.aval.shape)])


def _squeeze_batch(vals, dims, dimensions):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    return squeeze_p.bind(x, dimensions=tuple(a + 1 for a in dimensions)), 0


batching.primitive_batchers[squeeze_p] = _squeeze_batch


def _normalize_axes(dimensions, ndim, name):
    out = []
    for d in dimensions:
        d = int(d)
        if not -ndim <= d < ndim:
            raise ValueError(f"{name}: axis {d} is out of bounds for array of dimension {ndim}")
        out.append(d % ndim)
    return tuple(sorted(set(out)))


def squeeze(array, dimensions):
    """Remove the size-1 ``dimensions``."""
    dimensions = _normalize_axes(dimensions, core.get_aval(array).ndim, "squeeze")
    if not dimensions and hasattr(array, "aval"):
        return array
    return squeeze_p.bind(array, dimensions=dimensions)


def expand_dims(array, dimensions):
    """Insert size-1 axes at ``dimensions`` (positions in the output). Staged as the
    ``broadcast_in_dim`` that adds them, as JAX stages it: there is no expand_dims primitive."""
    dimensions = tuple(dimensions)
    if len(set(dimensions)) != len(dimensions):
        raise ValueError(f"repeated axis in lax.expand_dims: {dimensions}")
    aval = core.get_aval(array)
    out_ndim = aval.ndim + len(dimensions)
    dims = _normalize_axes(dimensions, out_ndim, "expand_dims")
    if len(dims) != len(dimensions):  # distinct only once made nonnegative
        raise ValueError(f"repeated axis in lax.expand_dims: "
                         f"{[int(d) % out_ndim for d in dimensions]}")
    if not dims and hasattr(array, "aval"):
        return array
    shape = list(aval.shape)
    for d in dims:
        shape.insert(d, 1)
    kept = tuple(i for i in range(out_ndim) if i not in dims)
    return broadcast_in_dim_p.bind(array, shape=tuple(shape), broadcast_dimensions=kept)


# --- rev -------------------------------------------------------------------------------------


def _rev_abstract_eval(x, dimensions):
    if any(not 0 <= d < x.ndim for d in dimensions) or len(set(dimensions)) != len(dimensions):
        raise ValueError(f"rev dimensions must be unique axes of the operand, got {dimensions} "
                         f"for shape {x.shape}")
    return x


rev_p = standard_primitive("rev", lambda x, dimensions: np.flip(x, dimensions) if dimensions
                           else x, _rev_abstract_eval)
ad.deflinear(rev_p, lambda ct, dimensions: [rev(ct, dimensions)])
batching.primitive_batchers[rev_p] = lambda vals, dims, dimensions: (
    rev_p.bind(vals[0], dimensions=tuple(a + (a >= dims[0]) for a in dimensions)), dims[0])


def rev(operand, dimensions):
    """Reverse ``operand`` along ``dimensions``."""
    return rev_p.bind(operand, dimensions=tuple(int(d) for d in dimensions))


# --- pad -------------------------------------------------------------------------------------


def _pad_abstract_eval(x, padding_value, padding_config):
    check_same_dtypes("pad", [x, padding_value])
    if padding_value.shape:
        raise TypeError(f"pad padding_value must be a scalar, got shape {padding_value.shape}")
    if len(padding_config) != x.ndim:
        raise ValueError(f"pad padding_config has length {len(padding_config)} but the operand "
                         f"has {x.ndim} dimensions")
    shape = []
    for n, (lo, hi, interior) in zip(x.shape, padding_config):
        if interior < 0:
            raise ValueError(f"pad interior padding must be nonnegative, got {padding_config}")
        size = lo + hi + n + max(n - 1, 0) * interior
        if size < 0:
            raise ValueError(f"pad produces a negative dimension from shape {x.shape} and "
                             f"padding_config {padding_config}")
        shape.append(size)
    return ShapedArray(shape, x.dtype, x.weak_type and padding_value.weak_type)  # as JAX


@functools.lru_cache(maxsize=4096)
def _pad_plan(shape, padding_config):
    """(grown shape, where the operand goes in it, the crop of negative padding or None),
    computed once per distinct shape and config."""
    grown = tuple(max(lo, 0) + max(hi, 0) + n + max(n - 1, 0) * i
                  for n, (lo, hi, i) in zip(shape, padding_config))
    index = tuple(slice(max(lo, 0), max(lo, 0) + max(n - 1, 0) * (i + 1) + 1 if n else
                        max(lo, 0), i + 1)
                  for n, (lo, hi, i) in zip(shape, padding_config))
    crop = None
    if any(lo < 0 or hi < 0 for lo, hi, _ in padding_config):
        crop = tuple(slice(-lo if lo < 0 else 0, g + hi if hi < 0 else g)
                     for g, (lo, hi, _) in zip(grown, padding_config))
    return grown, index, crop


def _pad_impl(x, padding_value, padding_config):
    grown, index, crop = _pad_plan(x.shape, padding_config)
    out = np.empty(grown, x.dtype)
    out.fill(padding_value)
    out[index] = x
    return out if crop is None else out[crop]


pad_p = standard_primitive("pad", _pad_impl, _pad_abstract_eval)


def _pad_transpose(ct, x, padding_value, padding_config):
    out = []
    if ad.is_undefined_primal(x):
        lo_hi = [(-min(lo, 0), -min(hi, 0), 0) for lo, hi, _ in padding_config]
        zero = full((), 0, core.get_aval(ct).dtype)
        unpad = pad(ct, zero, lo_hi)
        starts = [max(lo, 0) for lo, _, _ in padding_config]
        limits = [s + (n - 1) * (i + 1) + 1 if n else s
                  for s, n, (_, _, i) in zip(starts, x.aval.shape, padding_config)]
        strides = [i + 1 for _, _, i in padding_config]
        ct_x = rule_ops.slice(unpad, starts, limits, strides)
        out.append(ct_x)
    else:
        ct_x = None
        out.append(None)
    if ad.is_undefined_primal(padding_value):
        total = rule_ops.reduce_sum(ct, tuple(range(core.get_aval(ct).ndim)))
        inner = rule_ops.reduce_sum(ct_x, tuple(range(core.get_aval(ct_x).ndim))) \
            if ct_x is not None else _pad_interior_sum(ct, x, padding_config)
        out.append(sub(total, inner))
    else:
        out.append(None)
    return out


def _pad_interior_sum(ct, x, padding_config):
    t = _pad_transpose(ct, ad.UndefinedPrimal(x), 0, padding_config)[0]
    return rule_ops.reduce_sum(t, tuple(range(core.get_aval(t).ndim)))


def _pad_batch(vals, dims, padding_config):
    (x, pv), (dx, dpv) = vals, dims
    size = batching.axis_size_of(vals, dims)
    x = batching.bdim_at_front(x, dx, size)
    config = ((0, 0, 0),) + tuple(padding_config)
    if dpv is batching.not_mapped:
        return pad_p.bind(x, pv, padding_config=config), 0
    # a batched padding value: pad with zeros, then select the padding positions
    zero = full((), 0, core.get_aval(x).dtype)
    padded = pad_p.bind(x, zero, padding_config=config)
    mask = pad_p.bind(full(core.get_aval(x).shape, True, dtypes.bool_),
                      full((), False, dtypes.bool_), padding_config=config)
    out_shape = core.get_aval(padded).shape
    pv = broadcast_in_dim(batching.moveaxis(pv, dpv, 0), out_shape, (0,))
    return select(mask, padded, pv), 0


ad.deflinear2(pad_p, _pad_transpose)
batching.primitive_batchers[pad_p] = _pad_batch


def pad(operand, padding_value, padding_config):
    """Pad with ``padding_value``: ``padding_config`` is ``[(low, high, interior)]`` per dim;
    negative low/high crop."""
    config = tuple((int(lo), int(hi), int(i)) for lo, hi, i in padding_config)
    if dtypes.is_python_scalar(padding_value):  # weak, as any Python scalar operand
        padding_value = convert_element_type(padding_value, core.get_aval(operand).dtype,
                                                 weak_type=True)
    return pad_p.bind(operand, padding_value, padding_config=config)


# --- concatenate -----------------------------------------------------------------------------


def _concatenate_abstract_eval(*xs, dimension):
    if not xs:
        raise TypeError("concatenate requires at least one operand")
    check_same_dtypes("concatenate", xs)
    nd = xs[0].ndim
    if not 0 <= dimension < max(nd, 1) or any(x.ndim != nd for x in xs):
        raise TypeError(f"concatenate requires operands of equal rank with 0 <= dimension < "
                        f"rank; got shapes {[x.shape for x in xs]} and dimension {dimension}")
    for x in xs:
        if x.shape[:dimension] + x.shape[dimension + 1:] != \
                xs[0].shape[:dimension] + xs[0].shape[dimension + 1:]:
            raise TypeError(f"concatenate requires operand shapes to be equal except in the "
                            f"concatenated dimension {dimension}; got "
                            f"{[x.shape for x in xs]}")
    shape = list(xs[0].shape)
    shape[dimension] = sum(x.shape[dimension] for x in xs)
    return ShapedArray(shape, xs[0].dtype, all(x.weak_type for x in xs))


concatenate_p = standard_primitive(
    "concatenate", lambda *xs, dimension: np.concatenate(xs, axis=dimension),
    _concatenate_abstract_eval)


def _concatenate_transpose(ct, *xs, dimension):
    out, start = [], 0
    ct_shape = core.get_aval(ct).shape
    for x in xs:
        n = x.aval.shape[dimension] if ad.is_undefined_primal(x) else \
            core.get_aval(x).shape[dimension]
        if ad.is_undefined_primal(x):
            starts = [0] * len(ct_shape)
            limits = list(ct_shape)
            starts[dimension], limits[dimension] = start, start + n
            out.append(rule_ops.slice(ct, starts, limits))
        else:
            out.append(None)
        start += n
    return out


def _concatenate_jvp(primals, tangents, dimension):
    out = concatenate_p.bind(*primals, dimension=dimension)
    if all(type(t) is ad.Zero for t in tangents):
        return out, ad.Zero.from_primal_value(out)
    ts = [full_like(p, 0) if type(t) is ad.Zero else t for p, t in zip(primals, tangents)]
    return out, concatenate_p.bind(*ts, dimension=dimension)


def _concatenate_batch(vals, dims, dimension):
    size = batching.axis_size_of(vals, dims)
    xs = [batching.bdim_at_front(x, d, size) for x, d in zip(vals, dims)]
    return concatenate_p.bind(*xs, dimension=dimension + 1), 0


ad.primitive_jvps[concatenate_p] = _concatenate_jvp
ad.primitive_transposes[concatenate_p] = _concatenate_transpose
batching.primitive_batchers[concatenate_p] = _concatenate_batch


def concatenate(operands, dimension):
    """Join ``operands`` along ``dimension``."""
    operands = list(operands)
    if len(operands) == 1 and hasattr(operands[0], "aval"):
        return operands[0]
    return concatenate_p.bind(*operands, dimension=int(dimension))


# --- iota ------------------------------------------------------------------------------------


def _iota_impl(*, dtype, shape, dimension):
    ramp = np.arange(shape[dimension], dtype=dtype)
    expanded = [1] * len(shape)
    expanded[dimension] = shape[dimension]
    return np.broadcast_to(ramp.reshape(expanded), shape)


def _iota_abstract_eval(*, dtype, shape, dimension):
    if not 0 <= dimension < len(shape):
        raise ValueError(f"iota dimension must be between 0 and len(shape) {len(shape)}, "
                         f"got dimension={dimension}")
    return ShapedArray(shape, dtype)


iota_p = standard_primitive("iota", _iota_impl, _iota_abstract_eval)


def iota(dtype, size):
    """``[0, 1, ..., size-1]``."""
    return iota_p.bind(dtype=dtypes.canonicalize_dtype(dtype),
                       shape=canonical_shape((size,), "iota shape"), dimension=0)


def broadcasted_iota(dtype, shape, dimension):
    """An iota along ``dimension`` broadcast to ``shape``."""
    return iota_p.bind(dtype=dtypes.canonicalize_dtype(dtype),
                       shape=canonical_shape(shape, "iota shape"), dimension=int(dimension))


array_ops.full, array_ops.transpose = full_of_type, transpose
array_ops.broadcast_in_dim = broadcast_in_dim


rule_ops.provide(broadcast_in_dim=broadcast_in_dim, full=full, full_like=full_like)


