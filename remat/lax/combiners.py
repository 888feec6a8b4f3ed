"""User combining functions — the ``computation`` of ``reduce`` and ``reduce_window``, the
``select`` and ``scatter`` of ``select_and_scatter`` — traced once to a jaxpr on scalars, and
applied to whole arrays elementwise, by batching that jaxpr over the flattened elements (so a
combiner may use any primitive, not only elementwise ones)."""

import functools

import numpy as np

from remat import core, dtypes
from remat.api_util import fun_name
from remat.core import ShapedArray, Tracer
from remat.interpreters import batching
from remat.interpreters import partial_eval as pe
from remat.lax.shape import full, reshape
from remat.tree_util import tree_flatten, tree_unflatten


def max_identity(dtype):
    """The identity of ``max`` on ``dtype``: its lowest value."""
    if dtypes.kind(dtype) == "b":
        return False
    return dtypes.iinfo(dtype).min if dtypes.kind(dtype) in "iu" else -np.inf


def min_identity(dtype):
    """The identity of ``min`` on ``dtype``: its highest value."""
    if dtypes.kind(dtype) == "b":
        return True
    return dtypes.iinfo(dtype).max if dtypes.kind(dtype) in "iu" else np.inf


def trace_combiner(computation, avals, tree, what):
    """``computation(xs, ys)``, with ``xs`` and ``ys`` pytrees of structure ``tree`` whose
    leaves are scalars of ``avals``, as ``(ClosedJaxpr of 2n scalars, output tree)``."""
    avals = tuple(ShapedArray((), a.dtype, a.weak_type) for a in avals)
    try:
        return _traced(computation, avals, tree, what)
    except TypeError as e:
        if "unhashable" not in str(e):
            raise
        return _trace(computation, avals, tree, what)


@functools.lru_cache(maxsize=512)
def _traced(computation, avals, tree, what):
    return _trace(computation, avals, tree, what)


def _trace(computation, avals, tree, what):
    n = len(avals)
    store = {}

    def flat_fun(*leaves):
        out = computation(tree_unflatten(tree, leaves[:n]), tree_unflatten(tree, leaves[n:]))
        flat, store["tree"] = tree_flatten(out)
        for x in flat:
            if not core.is_array_like(x):
                raise ValueError(f"Invalid return type from {what} function: {type(x)}\n"
                                 f"{what} functions should only return arrays.")
        return flat

    debug = core.DebugInfo(fun_name(computation), [], what)
    closed = pe.trace_to_jaxpr(flat_fun, list(avals) * 2, debug)
    if any(isinstance(c, Tracer) for c in closed.consts):
        raise NotImplementedError(f"{what} computations can't close over Tracers: pass the "
                                  f"traced values as operands instead.")
    return closed, store["tree"]


def check_outputs(closed, avals, what):
    """A combiner returns scalars of its operands' dtypes, one per operand."""
    outs = closed.out_avals
    if len(outs) != len(avals) or any(o.shape != () or o.dtype != a.dtype
                                      for o, a in zip(outs, avals)):
        got = ", ".join(o.str_short() for o in outs)
        want = ", ".join(ShapedArray((), a.dtype).str_short() for a in avals)
        raise TypeError(f"{what} computation must return scalars of its operands' dtypes "
                        f"({want}), got ({got}).")


def apply(closed, args):
    """``closed`` (a combiner on scalars) applied elementwise to ``args``, arrays of one shape,
    under the current trace."""
    shape = core.get_aval(args[0]).shape
    size = int(np.prod(shape, dtype=np.int64))
    if size == 0:
        return [full(shape, 0, a.dtype) for a in closed.out_avals]
    flat = [reshape(a, (size,)) for a in args]
    batched, _ = batching.batch_jaxpr(closed, size, (True,) * len(args), True)
    outs = core.eval_jaxpr(batched.jaxpr, batched.consts, *flat)
    return [reshape(o, shape) for o in outs]


def apply_to_buffers(closed, bufs):
    """``apply`` on NumPy buffers, evaluated eagerly (for impls); returns NumPy arrays."""
    shape = np.shape(bufs[0])
    size = int(np.prod(shape, dtype=np.int64))
    if size == 0:
        return [np.zeros(shape, a.dtype) for a in closed.out_avals]
    batched, _ = batching.batch_jaxpr(closed, size, (True,) * len(bufs), True)
    with core.set_current_trace(core.eval_trace):
        outs = core.eval_jaxpr(batched.jaxpr, batched.consts,
                               *[np.reshape(b, (size,)) for b in bufs])
    return [np.reshape(core.to_numpy(o), shape) for o in outs]


def batch_decomposition(fn, vals, dims):
    """``fn`` (a flat function written in lax operations) applied to the batched ``vals``
    (batch dims ``dims``): traced on the unbatched avals, batched as a jaxpr and evaluated;
    every output is batched along axis 0. For batching rules whose primitive cannot take a
    batched operand itself (a per-example init value)."""
    size = batching.axis_size_of(vals, dims)
    avals = []
    for x, d in zip(vals, dims):
        aval = core.get_aval(x)
        avals.append(aval if d is batching.not_mapped else
                     aval.update(shape=aval.shape[:d] + aval.shape[d + 1:]))
    closed = pe.trace_to_jaxpr(fn, avals)
    batched, _ = batching.batch_jaxpr(closed, size,
                                      tuple(d is not batching.not_mapped for d in dims), True)
    vals = [x if d is batching.not_mapped else batching.moveaxis(x, d, 0)
            for x, d in zip(vals, dims)]
    outs = core.eval_jaxpr(batched.jaxpr, batched.consts, *vals)
    return outs, [0] * len(outs)
