"""``linear_transpose``: the transpose of a linear function, by transposing its jaxpr (the
backward pass of reverse mode without the forward pass)."""

import numpy as np

from remat import core, dtypes
from remat.api_util import abstractify, check_callable, flatten_fun_nokwargs
from remat.interpreters import ad
from remat.interpreters import partial_eval as pe
from remat.tree_util import Partial, tree_flatten, tree_unflatten

__all__ = ["linear_transpose"]


def _transposer(jaxpr, in_tree, out_avals, out_tree):
    """``transposed(consts, out_cotangent)`` for the jaxpr of a linear function."""

    def transposed(consts, out_cotangent):
        return _transpose(jaxpr, consts, in_tree, out_avals, out_tree, out_cotangent)

    return transposed


def _transpose(jaxpr, consts, in_tree, out_avals, out_tree, out_cotangent):
    out_cts, tree = tree_flatten(out_cotangent)
    if tree != out_tree:
        raise TypeError(f"cotangent tree does not match function output, expected {out_tree} "
                        f"but got {tree}")
    for ct, aval in zip(out_cts, out_avals):
        got = core.get_aval(ct)
        if got.shape != aval.shape or got.dtype != aval.dtype:
            raise TypeError(f"cotangent type does not match function output, expected "
                            f"{tuple(out_avals)} but got {out_cts}")
    in_cts = ad.transpose_traced_whole(core.ClosedJaxpr(jaxpr, list(consts)), out_cts)
    return tree_unflatten(in_tree, [ad.instantiate_zeros(c) for c in in_cts])


def linear_transpose(fun, *primals, reduce_axes=()):
    """The transpose of the linear function ``fun`` at the shapes and dtypes of
    ``primals``: ``linear_transpose(f, *primals)(out_cotangent)`` is the tuple of input
    cotangents. ``f`` must be linear in its arguments (float to float, or int to int)."""
    check_callable(fun)
    if reduce_axes:
        raise NotImplementedError("reduce_axes argument to transpose is deprecated")
    flat, in_tree = tree_flatten(primals)
    in_avals = [abstractify(x, f"primals[{i}]") for i, x in enumerate(flat)]
    flat_fun, store = flatten_fun_nokwargs(fun, in_tree)
    closed = pe.trace_to_jaxpr(flat_fun, in_avals)
    out_avals = closed.out_avals
    in_dtypes = [a.dtype for a in in_avals]
    out_dtypes = [a.dtype for a in out_avals]
    if not (all(dtypes.issubdtype(d, np.inexact) for d in in_dtypes + out_dtypes)
            or all(dtypes.issubdtype(d, np.integer) for d in in_dtypes + out_dtypes)):
        raise TypeError(f"linear_transpose only supports [float or complex] -> [float or "
                        f"complex], and integer -> integer functions, but got {in_dtypes} -> "
                        f"{out_dtypes}.")
    transposed = _transposer(closed.jaxpr, in_tree, out_avals, store.tree)
    return Partial(transposed, tuple(closed.consts))  # a pytree: its consts are leaves
