"""The user-facing transformations."""

from remat import core
from remat.api_util import (
    ShapeDtypeStruct,
    abstractify,
    arg_names,
    flatten_fun,
    fun_name,
    normalize_argnums,
    split_static,
)
from remat.interpreters import partial_eval as pe
from remat.tree_util import tree_flatten, tree_unflatten


def _trace_user_fun(fun, args, kwargs, static_argnums, traced_for):
    """Stage ``fun`` at the avals of ``args``: (ClosedJaxpr, output tree)."""
    label = f"{traced_for} of {fun_name(fun)}"
    static = normalize_argnums(static_argnums, len(args), label)
    dyn_args, dyn_fun = split_static(fun, args, static)
    flat_args, in_tree = tree_flatten((dyn_args, kwargs))
    names = arg_names(fun, args, kwargs, static)
    in_avals = [abstractify(x, n) for x, n in zip(flat_args, names)]
    flat_fun, store = flatten_fun(dyn_fun, in_tree)
    debug = core.DebugInfo(fun_name(fun), names, traced_for)
    closed = pe.trace_to_jaxpr(flat_fun, in_avals, debug)
    return closed, store.tree


def make_jaxpr(fun, static_argnums=(), return_shape=False):
    """``make_jaxpr(f)(*args)``: the ClosedJaxpr of ``f`` at the shapes of ``args``."""

    def make_jaxpr_f(*args, **kwargs):
        closed, out_tree = _trace_user_fun(fun, args, kwargs, static_argnums, "make_jaxpr")
        if return_shape:
            shapes = [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in closed.out_avals]
            return closed, tree_unflatten(out_tree, shapes)
        return closed

    make_jaxpr_f.__name__ = f"make_jaxpr({fun_name(fun)})"
    return make_jaxpr_f


def eval_shape(fun, *args, **kwargs):
    """The output shapes/dtypes of ``fun(*args, **kwargs)`` without computing anything."""
    closed, out_tree = _trace_user_fun(fun, args, kwargs, (), "eval_shape")
    shapes = [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in closed.out_avals]
    return tree_unflatten(out_tree, shapes)
