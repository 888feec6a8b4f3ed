"""``sort``: a stable, lexicographic multi-operand sort along one dimension, with its rules;
``top_k`` and ``approx_max_k``/``approx_min_k`` (exact here, as JAX's CPU fallback); and the
comparisons in XLA's total order of floats (``eq_to``, ``le_to``, ``lt_to``) that sort
comparators use.

The JVP permutes each tangent with the primal permutation by sorting it along with the keys
(``sort(keys..., tangents..., num_keys)``) — no gather is needed, and since the sort is always
stable the permutation is exactly the primal one. Such a sort is linear in its non-key
operands; its transpose applies the inverse permutation, again with ``sort``: sorting an
iota along with the keys gives the permutation, and sorting the cotangents by it undoes it.
"""

import math
import operator

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.gather_scatter_common import GatherDimensionNumbers
from remat.lax.gathers import gather
from remat.lax.shape import broadcasted_iota, expand_dims
from remat.lax.standard import (
    ANY,
    REAL,
    check_same_dtypes,
    nary_abstract_eval,
    standard_primitive,
)

__all__ = [
    "approx_max_k",
    "approx_min_k",
    "approx_top_k_p",
    "eq_to_p",
    "le_to_p",
    "lt_to_p",
    "sort",
    "sort_key_val",
    "sort_p",
    "top_k",
    "top_k_p",
]


def _sort_abstract_eval(*avals, dimension, is_stable, num_keys):
    if not avals:
        raise TypeError("Sort requires at least one operand")
    if any(a.shape != avals[0].shape for a in avals[1:]):
        shapes = " ".join(str(a.shape) for a in avals)
        raise TypeError(f"Arguments to sort must have equal shapes, got: {shapes}")
    if not 1 <= num_keys <= len(avals):
        raise ValueError(f"num_keys={num_keys} must be between 1 and "
                         f"len(operand)={len(avals)}")
    if not 0 <= dimension < avals[0].ndim:
        raise ValueError(f"sort dimension {dimension} is out of bounds for operands of shape "
                         f"{avals[0].shape}")
    return list(avals)


def _sortable(keys):
    """Keys NumPy sorts as JAX does: ml_dtypes' sorts put NaNs first, so its floats
    (bfloat16, the float8s) sort as their exact float32 values."""
    if dtypes.kind(keys.dtype) == "f" and keys.dtype.itemsize < 4:
        return keys.astype(np.float32)
    return keys


def _sort_impl(*operands, dimension, is_stable, num_keys):
    # Always stable, so that sorts sharing keys (primal, tangents, cotangents) agree. NumPy
    # orders NaNs last and treats -0.0 and 0.0 as equal, as JAX does.
    keys = [_sortable(np.moveaxis(k, dimension, -1)) for k in operands[:num_keys]]
    if num_keys == 1:
        perm = np.argsort(keys[0], axis=-1, kind="stable")
    else:
        perm = np.lexsort(keys[::-1], axis=-1)
    return [np.moveaxis(np.take_along_axis(np.moveaxis(x, dimension, -1), perm, axis=-1),
                        -1, dimension) for x in operands]


sort_p = standard_primitive("sort", _sort_impl, _sort_abstract_eval, multiple_results=True)


def _sort_jvp(primals, tangents, dimension, is_stable, num_keys):
    params = dict(dimension=dimension, is_stable=is_stable, num_keys=num_keys)
    out = sort_p.bind(*primals, **params)
    nonzero = [i for i, t in enumerate(tangents) if type(t) is not ad.Zero]
    tangents_out = [ad.Zero.from_primal_value(o) for o in out]
    if nonzero:
        moved = sort_p.bind(*primals[:num_keys], *[tangents[i] for i in nonzero], **params)
        for i, t in zip(nonzero, moved[num_keys:]):
            tangents_out[i] = t
    return out, tangents_out


def _sort_transpose(cts, *operands, dimension, is_stable, num_keys):
    keys = operands[:num_keys]
    if any(ad.is_undefined_primal(k) for k in keys):
        raise ValueError("sort is not linear in its keys and cannot be transposed with respect "
                         "to them")
    linear = [i for i, x in enumerate(operands)
              if ad.is_undefined_primal(x) and type(cts[i]) is not ad.Zero]
    out = [None] * len(operands)
    if not linear:
        return out
    shape = core.get_aval(keys[0]).shape
    iota = broadcasted_iota(dtypes.default_int_dtype(), shape, dimension)
    perm = sort_p.bind(*keys, iota, dimension=dimension, is_stable=True,
                       num_keys=num_keys)[-1]
    # ``sorted[j] = x[perm[j]]``, so the cotangent of ``x[perm[j]]`` is ``ct[j]``: sort the
    # cotangents by ``perm``.
    back = sort_p.bind(perm, *[cts[i] for i in linear], dimension=dimension, is_stable=True,
                       num_keys=1)
    for i, ct in zip(linear, back[1:]):
        out[i] = ct
    return out


def _sort_batch(vals, dims, dimension, is_stable, num_keys):
    size = batching.axis_size_of(vals, dims)
    operands = [batching.bdim_at_front(x, d, size) for x, d in zip(vals, dims)]
    out = sort_p.bind(*operands, dimension=dimension + 1, is_stable=is_stable,
                      num_keys=num_keys)
    return out, [0] * len(out)


ad.primitive_jvps[sort_p] = _sort_jvp
ad.primitive_transposes[sort_p] = _sort_transpose
batching.primitive_batchers[sort_p] = _sort_batch


def _canonical_dimension(dimension, ndim):
    dimension = int(dimension)
    if not -ndim <= dimension < ndim:
        raise ValueError(f"axis {dimension} is out of bounds for array of dimension {ndim}")
    return dimension % ndim


def sort(operand, dimension=-1, is_stable=True, num_keys=1):
    """Sort ``operand`` (an array, or a sequence of arrays of one shape sorted together
    lexicographically by the first ``num_keys``) along ``dimension``; NaNs sort last."""
    if isinstance(operand, (list, tuple)):
        if not operand:
            raise TypeError("Sort requires at least one operand")
        if not 1 <= num_keys <= len(operand):
            raise ValueError(f"num_keys={num_keys} must be between 1 and "
                             f"len(operand)={len(operand)}")
        dimension = _canonical_dimension(dimension, core.get_aval(operand[0]).ndim)
        return tuple(sort_p.bind(*operand, dimension=dimension, is_stable=bool(is_stable),
                                 num_keys=int(num_keys)))
    if num_keys != 1:
        raise ValueError(f"num_keys={num_keys} must equal 1 for a single operand.")
    dimension = _canonical_dimension(dimension, core.get_aval(operand).ndim)
    return sort_p.bind(operand, dimension=dimension, is_stable=bool(is_stable), num_keys=1)[0]


def sort_key_val(keys, values, dimension=-1, is_stable=True):
    """Sort ``keys`` along ``dimension`` and apply the same permutation to ``values``."""
    dimension = _canonical_dimension(dimension, core.get_aval(keys).ndim)
    k, v = sort_p.bind(keys, values, dimension=dimension, is_stable=bool(is_stable), num_keys=1)
    return k, v


# --- top_k -----------------------------------------------------------------------------------


def _total_order_key(x):
    """Integer keys ordered as XLA's total order of ``x``'s values: -NaN < -inf < ... < -0.0 <
    0.0 < ... < inf < NaN for floats (a sign-magnitude flip of the bits)."""
    if dtypes.kind(x.dtype) == "b":
        return x.astype(np.uint8)
    if dtypes.kind(x.dtype) in "iu":
        return x
    bits = x.view(np.dtype(f"i{x.dtype.itemsize}"))
    return bits ^ ((bits >> (8 * x.dtype.itemsize - 1)) & np.iinfo(bits.dtype).max)


def _top_order(x, axis, largest):
    """The permutation along ``axis`` that sorts ``x`` from the largest (``largest``) or the
    smallest value, equal values in index order."""
    key = _total_order_key(np.moveaxis(x, axis, -1))
    return np.argsort(~key if largest else key, axis=-1, kind="stable")


def _total_order_compare(compare):
    def impl(x, y):
        return compare(_total_order_key(np.asarray(x)), _total_order_key(np.asarray(y)))

    return impl


def _total_order_abstract_eval(name, accepted):
    elementwise = nary_abstract_eval(name, accepted, dtypes.bool_)

    def abstract_eval(x, y):
        check_same_dtypes(name, [x, y])
        return elementwise(x, y)

    return abstract_eval


# Comparisons in the total order (-NaN < -inf < ... < -0.0 < 0.0 < ... < inf < NaN): what a
# sort orders by, unlike eq/le/lt (for which -0.0 == 0.0 and NaN compares false).
eq_to_p = standard_primitive("eq_to", _total_order_compare(np.equal),
                             _total_order_abstract_eval("eq_to", ANY))
le_to_p = standard_primitive("le_to", _total_order_compare(np.less_equal),
                             _total_order_abstract_eval("le_to", REAL + ("bool",)))
lt_to_p = standard_primitive("lt_to", _total_order_compare(np.less),
                             _total_order_abstract_eval("lt_to", REAL + ("bool",)))
for _p in (eq_to_p, le_to_p, lt_to_p):
    ad.defjvp_zero(_p)
    batching.broadcast_batcher(_p)
del _p


def _take_top(x, axis, k, largest):
    order = _top_order(x, axis, largest)[..., :k]
    values = np.take_along_axis(np.moveaxis(x, axis, -1), order, axis=-1)
    return [np.moveaxis(values, -1, axis), np.moveaxis(order.astype(np.int32), -1, axis)]


def _top_k_abstract_eval(operand, *, k, axis):
    if dtypes.kind(operand.dtype) == "c":
        raise ValueError("top_k is not compatible with complex inputs.")
    if k < 0:
        raise ValueError(f"k argument to top_k must be nonnegative, got {k}")
    if not operand.shape:
        raise TypeError(f"top_k operand must have >= 1 dimension, got {operand.shape}")
    if not 0 <= axis < operand.ndim:
        raise ValueError(f"axis argument out of range: axis={axis} for "
                         f"operand.shape={operand.shape}")
    shape = list(operand.shape)
    if shape[axis] < k:
        raise ValueError(f"k argument to top_k must be no larger than size along axis; got "
                         f"k={k} with shape={tuple(shape)} and axis={axis}")
    shape[axis] = k
    return [ShapedArray(shape, operand.dtype, operand.weak_type),
            ShapedArray(shape, dtypes.int32)]


top_k_p = standard_primitive("top_k", lambda x, *, k, axis: _take_top(x, axis, k, True),
                             _top_k_abstract_eval, multiple_results=True)


def _gather_along(tangent, indices, axis):
    """``take_along_axis(tangent, indices, axis)`` as one gather (JAX's top_k JVP)."""
    rank = core.get_aval(indices).ndim
    others = tuple(i for i in range(rank) if i != axis)
    dnums = GatherDimensionNumbers(
        offset_dims=(), collapsed_slice_dims=(axis,), start_index_map=(axis,),
        operand_batching_dims=others, start_indices_batching_dims=others)
    return gather(tangent, expand_dims(indices, (rank,)), dnums, (1,) * rank)


def _top_k_jvp(primals, tangents, *, k, axis):
    (x,), (t,) = primals, tangents
    values, indices = top_k_p.bind(x, k=k, axis=axis)
    if type(t) is ad.Zero:
        return [values, indices], [ad.Zero.from_primal_value(values),
                                   ad.Zero.from_primal_value(indices)]
    return [values, indices], [_gather_along(t, indices, axis),
                               ad.Zero.from_primal_value(indices)]


def _top_k_batch(vals, dims, *, k, axis):
    (x,), (d,) = vals, dims
    return top_k_p.bind(x, k=k, axis=axis + (d <= axis)), [d, d]


ad.primitive_jvps[top_k_p] = _top_k_jvp
batching.primitive_batchers[top_k_p] = _top_k_batch


def top_k(operand, k, *, axis=-1):
    """The ``k`` largest entries of ``operand`` along ``axis`` and their int32 indices, in
    descending order (equal values in index order; NaN is the largest)."""
    k = operator.index(core.concrete_or_error(k, "The k argument of top_k must be static."))
    if k < 0:
        raise ValueError(f"k argument to top_k must be nonnegative, got {k}")
    axis = _canonical_dimension(axis, core.get_aval(operand).ndim)
    return tuple(top_k_p.bind(operand, k=k, axis=axis))


# --- approx_max_k / approx_min_k: exact, as JAX's CPU fallback --------------------------------

_LANE_TILING, _CHUNK_TILING = 128, 1024  # XLA's TPU tilings, which fix the output size


def _log2_floor(n):
    return max(int(n).bit_length() - 1, 0)


def _log2_ceil(n):
    return (int(n) - 1).bit_length() if n > 1 else 0


def approx_top_k_output_size(input_size, rank, k, recall_target, aggregate_to_topk,
                             input_size_override):
    """How many results ``approx_top_k`` returns along the reduction dimension (XLA's
    ``ApproxTopKReductionOutputSize``): ``k`` when aggregating, else the size of the bins
    the TPU algorithm would keep."""
    if aggregate_to_topk:
        return k
    tiling = _CHUNK_TILING if rank == 1 else _LANE_TILING
    if input_size <= tiling:
        return input_size
    if 0 <= input_size_override < input_size:
        raise ValueError(f"reduction_input_size_override {input_size_override} must be at "
                         f"least the reduction dimension's size {input_size}")
    logical = input_size_override if input_size_override >= 0 else input_size
    if k == 1:
        return tiling
    if recall_target == 1.0:
        return input_size
    if not 0.0 < recall_target <= 1.0:
        raise ValueError(f"recall_target should range in (0,1], got {recall_target}")
    m = min(max(int((1.0 - k) / math.log(recall_target)), tiling), logical)
    reduction = _log2_floor(logical // m)
    if reduction == 0:
        return input_size
    reduction = min(reduction, _log2_ceil(input_size // tiling))  # not too far for large inputs
    tiles = -(-input_size // tiling)
    return -(-tiles // (1 << reduction)) * tiling


def _approx_top_k_abstract_eval(operand, *, k, reduction_dimension, recall_target, is_max_k,
                                reduction_input_size_override, aggregate_to_topk):
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    if not operand.shape:
        raise TypeError(f"approx_top_k operand must have >= 1 dimension, got {operand.shape}")
    if not -operand.ndim <= reduction_dimension < operand.ndim:
        raise ValueError(f"reduction_dimension {reduction_dimension} is out of bounds for "
                         f"operand of shape {operand.shape}")
    dims = list(operand.shape)
    if dims[reduction_dimension] < k:
        raise ValueError(f"k must be smaller than the size of reduction_dim "
                         f"{dims[reduction_dimension]}, got {k}")
    if dtypes.kind(operand.dtype) != "f":
        raise ValueError("operand must be a floating type")
    dims[reduction_dimension] = approx_top_k_output_size(
        dims[reduction_dimension], len(dims), k, recall_target, aggregate_to_topk,
        reduction_input_size_override)
    return [ShapedArray(dims, operand.dtype, operand.weak_type),
            ShapedArray(dims, dtypes.int32)]


def _approx_top_k_impl(x, *, k, reduction_dimension, recall_target, is_max_k,
                       reduction_input_size_override, aggregate_to_topk):
    axis = reduction_dimension % x.ndim
    size = approx_top_k_output_size(x.shape[axis], x.ndim, k, recall_target,
                                    aggregate_to_topk, reduction_input_size_override)
    return _take_top(x, axis, size, is_max_k)


approx_top_k_p = standard_primitive("approx_top_k", _approx_top_k_impl,
                                    _approx_top_k_abstract_eval, multiple_results=True)


def _approx_top_k_jvp(primals, tangents, **params):
    (x,), (t,) = primals, tangents
    values, indices = approx_top_k_p.bind(x, **params)
    if type(t) is ad.Zero:
        return [values, indices], [ad.Zero.from_primal_value(values),
                                   ad.Zero.from_primal_value(indices)]
    axis = params["reduction_dimension"] % core.get_aval(x).ndim
    return [values, indices], [_gather_along(t, indices, axis),
                               ad.Zero.from_primal_value(indices)]


def _approx_top_k_batch(vals, dims, *, reduction_dimension, **params):
    (x,), (d,) = vals, dims
    unbatched = [i for i in range(core.get_aval(x).ndim) if i != d]
    out = approx_top_k_p.bind(x, reduction_dimension=unbatched[reduction_dimension], **params)
    return out, [d, d]


ad.primitive_jvps[approx_top_k_p] = _approx_top_k_jvp
batching.primitive_batchers[approx_top_k_p] = _approx_top_k_batch


def _approx_k(operand, k, reduction_dimension, recall_target, is_max_k,
              reduction_input_size_override, aggregate_to_topk):
    return tuple(approx_top_k_p.bind(
        operand, k=operator.index(k), reduction_dimension=operator.index(reduction_dimension),
        recall_target=float(recall_target), is_max_k=is_max_k,
        reduction_input_size_override=operator.index(reduction_input_size_override),
        aggregate_to_topk=bool(aggregate_to_topk)))


def approx_max_k(operand, k, reduction_dimension=-1, recall_target=0.95,
                 reduction_input_size_override=-1, aggregate_to_topk=True):
    """The ``k`` largest entries along ``reduction_dimension`` and their indices; exact (as
    JAX on CPU), sorted; without ``aggregate_to_topk`` as many as XLA's TPU bins hold."""
    return _approx_k(operand, k, reduction_dimension, recall_target, True,
                     reduction_input_size_override, aggregate_to_topk)


def approx_min_k(operand, k, reduction_dimension=-1, recall_target=0.95,
                 reduction_input_size_override=-1, aggregate_to_topk=True):
    """The ``k`` smallest entries along ``reduction_dimension`` and their indices (see
    ``approx_max_k``)."""
    return _approx_k(operand, k, reduction_dimension, recall_target, False,
                     reduction_input_size_override, aggregate_to_topk)
