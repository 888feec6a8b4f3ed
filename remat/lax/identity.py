"""Primitives that return their operands: ``copy``, ``stop_gradient``, ``name`` (what
``checkpoint_name`` tags a value with, for policies) and ``optimization_barrier`` (which the
jit executor's CSE pass never looks through)."""

import numpy as np

from remat import core, dtypes
from remat.interpreters import ad, batching
from remat.interpreters import partial_eval as pe
from remat.lax.standard import standard_primitive
from remat.runtime import registry
from remat.tree_util import tree_flatten, tree_map, tree_unflatten

__all__ = [
    "copy",
    "copy_p",
    "optimization_barrier",
    "optimization_barrier_p",
    "stop_gradient",
    "stop_gradient_p",
]

copy_p = standard_primitive("copy", np.copy, lambda x: x)
ad.deflinear(copy_p, lambda ct: [copy_p.bind(ct)])
batching.defvectorized(copy_p)


def copy(x):
    """A fresh copy of ``x``."""
    return copy_p.bind(x)


name_p = core.Primitive("name")
name_p.def_impl(lambda x, *, name: x)
name_p.def_abstract_eval(lambda x, *, name: x)


def _name_jvp(primals, tangents, *, name):
    (x,), (t,) = primals, tangents
    return name_p.bind(x, name=name), t  # the tangent is not named


ad.primitive_jvps[name_p] = _name_jvp
ad.primitive_transposes[name_p] = lambda ct, x, *, name: [ct]
batching.primitive_batchers[name_p] = lambda vals, dims, *, name: (
    name_p.bind(vals[0], name=name), dims[0])
pe.name_primitive = name_p

stop_gradient_p = standard_primitive("stop_gradient", lambda x: x, lambda x: x)
ad.defjvp_zero(stop_gradient_p)
batching.defvectorized(stop_gradient_p)


def stop_gradient(x):
    """``x`` with zero derivative (any pytree)."""
    def stop(leaf):
        aval = core.get_aval(leaf)
        if dtypes.kind(aval.dtype) not in "fc":
            return leaf
        return stop_gradient_p.bind(leaf)

    return tree_map(stop, x)


optimization_barrier_p = standard_primitive(
    "optimization_barrier", lambda *xs: list(xs), lambda *avals: list(avals),
    multiple_results=True)


def _barrier_jvp(primals, tangents):
    """One barrier for the primals and another for the nonzero tangents (as JAX): a barrier
    mixing them would make the primal outputs depend on tangents, so nothing could be
    linearized (vjp, grad) through it."""
    nonzero = [i for i, t in enumerate(tangents) if type(t) is not ad.Zero]
    outs = optimization_barrier_p.bind(*primals)
    touts = optimization_barrier_p.bind(*[tangents[i] for i in nonzero]) if nonzero else []
    tangents_out = [ad.Zero(t.aval) if type(t) is ad.Zero else None for t in tangents]
    for k, i in enumerate(nonzero):
        tangents_out[i] = touts[k]
    return outs, tangents_out


def _barrier_transpose(cts, *args):
    live = [i for i, c in enumerate(cts) if type(c) is not ad.Zero]
    outs = optimization_barrier_p.bind(*[cts[i] for i in live])
    result = [None] * len(args)
    for k, i in enumerate(live):
        result[i] = outs[k]
    return result


registry.cse_barriers.add(optimization_barrier_p)
registry.barrier_primitive = optimization_barrier_p
ad.primitive_jvps[optimization_barrier_p] = _barrier_jvp
ad.primitive_transposes[optimization_barrier_p] = _barrier_transpose
batching.primitive_batchers[optimization_barrier_p] = lambda vals, dims: (
    optimization_barrier_p.bind(*vals), list(dims))


def optimization_barrier(operand):
    """Identity on a pytree, opaque to the executor's common-subexpression elimination."""
    leaves, tree = tree_flatten(operand)
    return tree_unflatten(tree, optimization_barrier_p.bind(*leaves))
