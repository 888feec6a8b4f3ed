"""``reduce``: XLA's variadic reduction with a user computation (``reduce_p``), with its impl,
abstract eval, JVP and batching rules; a computation that is ``add``/``mul``/``max``/``min``
or a bitwise op with its identity as the init value becomes the matching reduce_* primitive,
as in JAX.

Both the impl and the rules reduce as a balanced tree: the reduced dims are flattened into one
axis, whose halves are combined (an odd entry waits for the next level) until one entry is
left, which is combined with the init values once. XLA assumes the computation associative
and commutative with the init values as identities, so any order is a valid one; the tree keeps
each step a whole-array operation and makes the JVP the JVP of that tree (so it differentiates
in both modes, as JAX's does).
"""

import operator

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax import combiners, elementwise
from remat.lax.elementwise import (
    add,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    convert_element_type,
    mul,
)
from remat.lax.reductions import (
    reduce_and_p,
    reduce_max_p,
    reduce_min_p,
    reduce_or_p,
    reduce_prod_p,
    reduce_sum_p,
    reduce_xor_p,
)
from remat.lax.shape import broadcast_in_dim, concatenate, full, reshape
from remat.lax.slicing import slice_in_dim
from remat.lax.standard import standard_primitive
from remat.tree_util import tree_flatten, tree_unflatten

__all__ = ["reduce", "reduce_p"]


def _abstract_eval(*avals, computation, jaxpr, dimensions):
    n = len(avals) // 2
    operands, inits = avals[:n], avals[n:]
    if any(i.shape for i in inits):
        raise ValueError(f"reduce found non-scalar initial value: {[i.shape for i in inits]}")
    if any(o.dtype != i.dtype for o, i in zip(operands, inits)):
        raise TypeError(f"reduce operand dtypes should match corresponding initial value "
                        f"dtypes, got operands={list(operands)} and "
                        f"initial_values={list(inits)}")
    if len({o.shape for o in operands}) > 1:
        raise TypeError(f"reduce operands must have equal shapes, got "
                        f"{[o.shape for o in operands]}")
    ndim = operands[0].ndim
    if len(set(dimensions)) != len(dimensions) or not all(0 <= d < ndim for d in dimensions):
        raise ValueError(f"reduce dimensions {dimensions} must be distinct axes of operands "
                         f"of shape {operands[0].shape}")
    shape = tuple(d for i, d in enumerate(operands[0].shape) if i not in dimensions)
    return [ShapedArray(shape, o.dtype, o.weak_type and i.weak_type)
            for o, i in zip(operands, inits)]


def _flatten_reduced(shape, dimensions):
    """(permutation putting the reduced dims last, kept shape, reduced size)."""
    kept = tuple(i for i in range(len(shape)) if i not in dimensions)
    size = int(np.prod([shape[d] for d in dimensions], dtype=np.int64))
    return kept + tuple(dimensions), tuple(shape[i] for i in kept), size


def _impl(*args, computation, jaxpr, dimensions):
    n = len(args) // 2
    operands, inits = args[:n], args[n:]
    perm, kept, size = _flatten_reduced(operands[0].shape, dimensions)
    xs = [np.transpose(x, perm).reshape(kept + (size,)) for x in operands]
    while size > 1:
        half = size // 2
        paired = combiners.apply_to_buffers(jaxpr, [x[..., :half] for x in xs] +
                                            [x[..., half:2 * half] for x in xs])
        if size % 2:
            paired = [np.concatenate([p, x[..., 2 * half:]], -1) for p, x in zip(paired, xs)]
        xs, size = paired, size - half
    starts = [np.broadcast_to(np.asarray(i, x.dtype), kept) for x, i in zip(operands, inits)]
    if size == 0:
        return [np.array(s) for s in starts]
    return combiners.apply_to_buffers(jaxpr, starts + [x[..., 0] for x in xs])


reduce_p = standard_primitive("reduce", _impl, _abstract_eval, multiple_results=True)


def _reduce_tree(operands, inits, jaxpr, dimensions):
    """The impl's reduction in lax operations (for the JVP and batched init values)."""
    shape = core.get_aval(operands[0]).shape
    perm, kept, size = _flatten_reduced(shape, dimensions)
    axis = len(kept)
    xs = [reshape(x, kept + (size,), perm) for x in operands]
    while size > 1:
        half = size // 2
        paired = combiners.apply(jaxpr, [slice_in_dim(x, 0, half, axis=axis) for x in xs] +
                                 [slice_in_dim(x, half, 2 * half, axis=axis) for x in xs])
        if size % 2:
            paired = [concatenate([p, slice_in_dim(x, 2 * half, size, axis=axis)], axis)
                      for p, x in zip(paired, xs)]
        xs, size = paired, size - half
    starts = [broadcast_in_dim(i, kept, ()) for i in inits]
    if size == 0:
        return starts
    return combiners.apply(jaxpr, starts + [reshape(x, kept) for x in xs])


def _jvp(primals, tangents, *, computation, jaxpr, dimensions):
    n = len(primals) // 2
    outs = reduce_p.bind(*primals, computation=computation, jaxpr=jaxpr,
                         dimensions=dimensions)
    return outs, ad.jvp_flat(lambda *args: _reduce_tree(args[:n], args[n:], jaxpr, dimensions),
                             primals, tangents)[1]


def _batch(vals, dims, *, computation, jaxpr, dimensions):
    n = len(vals) // 2
    size = batching.axis_size_of(vals, dims)
    if all(d is batching.not_mapped for d in dims[n:]):
        operands = [batching.bdim_at_front(x, d, size) for x, d in zip(vals[:n], dims[:n])]
        outs = reduce_p.bind(*operands, *vals[n:], computation=computation, jaxpr=jaxpr,
                             dimensions=tuple(d + 1 for d in dimensions))
        return outs, [0] * n
    # per-example init values: batch the reduction tree itself
    return combiners.batch_decomposition(
        lambda *args: _reduce_tree(args[:n], args[n:], jaxpr, dimensions), vals, dims)


ad.primitive_jvps[reduce_p] = _jvp
batching.primitive_batchers[reduce_p] = _batch


# --- the lax function ------------------------------------------------------------------------


def _identity_of(computation, dtype):
    """The identity that makes ``computation`` a monoid reducer on ``dtype``, and the
    primitive it becomes (as JAX's ``_get_monoid_reducer``), or None."""
    intlike = dtypes.kind(dtype) in "biu"
    if computation is add:
        return 0, reduce_sum_p
    if computation is mul:
        return 1, reduce_prod_p
    if computation is elementwise.max:
        return combiners.max_identity(dtype), reduce_max_p
    if computation is elementwise.min:
        return combiners.min_identity(dtype), reduce_min_p
    if intlike and computation is bitwise_or:
        return 0, reduce_or_p
    if intlike and computation is bitwise_and:
        return np.array(-1).astype(dtype), reduce_and_p
    if intlike and computation is bitwise_xor:
        return 0, reduce_xor_p
    return None


def _monoid_reducer(computation, init):
    aval = core.get_aval(init)
    if aval.shape or (isinstance(init, core.Tracer) and init.concrete_value() is None):
        return None
    found = _identity_of(computation, aval.dtype)
    if found is None:
        return None
    identity, prim = found
    return prim if np.equal(np.asarray(core.concrete_or_error(init)), identity) else None


def reduce(operands, init_values, computation, dimensions, out_sharding=None):
    """Reduce ``operands`` (an array or a pytree of arrays of one shape) over ``dimensions``
    with ``computation(xs, ys)`` (associative, with the scalar ``init_values`` as
    identities)."""
    flat_operands, tree = tree_flatten(operands)
    flat_inits, init_tree = tree_flatten(init_values)
    if tree != init_tree:
        raise ValueError(f"Operands must have the same tree structure as init_values: {tree} "
                         f"vs. {init_tree}")
    if len(flat_operands) != len(flat_inits):
        raise ValueError(f"Must have same total number of operands as init_values: "
                         f" {len(flat_operands)} vs. {len(flat_inits)}")
    dimensions = tuple(operator.index(d) for d in dimensions)
    if len(flat_operands) == 1:
        prim = _monoid_reducer(computation, flat_inits[0])
        if prim is not None:
            axes = tuple(sorted(dimensions)) if len(set(dimensions)) == len(dimensions) \
                else dimensions
            out = prim.bind(flat_operands[0], axes=axes)
            weak = core.get_aval(flat_operands[0]).weak_type and \
                core.get_aval(flat_inits[0]).weak_type
            if core.get_aval(out).weak_type != weak:
                out = convert_element_type(out, core.get_aval(out).dtype, weak)
            return tree_unflatten(tree, [out])
    inits = [full((), x) if dtypes.is_python_scalar(x) else x for x in flat_inits]
    avals = [core.get_aval(x) for x in inits]
    jaxpr, out_tree = combiners.trace_combiner(computation, avals, init_tree, "reduction")
    if out_tree != tree:
        raise TypeError(f"reduce computation must return a pytree of the structure of the "
                        f"operands {tree}, got {out_tree}")
    combiners.check_outputs(jaxpr, avals, "reduce")
    outs = reduce_p.bind(*flat_operands, *inits, computation=computation, jaxpr=jaxpr,
                         dimensions=dimensions)
    return tree_unflatten(tree, outs)
