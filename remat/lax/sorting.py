"""``sort``: a stable, lexicographic multi-operand sort along one dimension, with its rules.

The JVP permutes each tangent with the primal permutation by sorting it along with the keys
(``sort(keys..., tangents..., num_keys)``) — no gather is needed, and since the sort is always
stable the permutation is exactly the primal one. Such a sort is linear in its non-key
operands; its transpose applies the inverse permutation, again with ``sort``: sorting an
iota along with the keys gives the permutation, and sorting the cotangents by it undoes it.
"""

import numpy as np

from remat import core, dtypes, lax
from remat.interpreters import ad, batching
from remat.lax.standard import standard_primitive

__all__ = ["sort", "sort_key_val", "sort_p"]


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


def _sort_impl(*operands, dimension, is_stable, num_keys):
    # Always stable, so that sorts sharing keys (primal, tangents, cotangents) agree. NumPy
    # orders NaNs last and treats -0.0 and 0.0 as equal, as JAX does.
    keys = [np.moveaxis(k, dimension, -1) for k in operands[:num_keys]]
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
    iota = lax.broadcasted_iota(dtypes.default_int_dtype(), shape, dimension)
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
