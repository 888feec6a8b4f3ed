"""``linear_call``: call a linear function with a custom implementation of its transpose.

``linear_call(fun, fun_transpose, residual_args, linear_args)`` binds ``linear_call_p``
carrying ``fun``'s jaxpr (``callee``) and a thunk that traces ``fun_transpose`` on first need.
Its JVP applies the call to the tangents (it is linear in ``linear_args``); its transpose is a
``linear_call`` of ``fun_transpose`` whose own transpose is ``fun`` again, so transposing
twice gives back the original. Eagerly and under ``jit`` it runs ``fun``'s jaxpr.
"""

import functools

from remat import core
from remat.api_util import fun_name
from remat.call import rebind_as_jit
from remat.core import ClosedJaxpr, Primitive
from remat.interpreters import ad, batching, discharge
from remat.interpreters import partial_eval as pe
from remat.tree_util import tree_flatten, tree_structure, tree_unflatten

__all__ = ["linear_call", "linear_call_p"]

linear_call_p = Primitive("linear_call")
linear_call_p.multiple_results = True


def _trace_flat(fun, in_tree, in_avals, what):
    """``fun`` traced at ``in_avals`` (flat leaves of ``in_tree``): (a const-free ClosedJaxpr
    taking the consts first, the consts, the output tree)."""
    store = {}

    def flat(*leaves):
        out = fun(*tree_unflatten(in_tree, leaves))
        flat_out, store["tree"] = tree_flatten(out)
        return flat_out

    closed = pe.trace_to_jaxpr(flat, list(in_avals), core.DebugInfo(fun_name(fun), [], what))
    jaxpr = ClosedJaxpr(pe.convert_constvars_jaxpr(closed.jaxpr), [])
    return jaxpr, list(closed.consts), store["tree"]


def linear_call(fun, fun_transpose, residual_args, linear_args):
    """``fun(residual_args, linear_args)``, where ``fun`` is linear in ``linear_args`` and its
    transpose with respect to them is ``fun_transpose(residual_args, out_cotangent)``
    (``fun :: r -> a -o b``, ``fun_transpose :: r -> b -o a``). Reverse-mode differentiation
    and ``linear_transpose`` use ``fun_transpose`` instead of transposing ``fun``."""
    res_leaves, res_tree = tree_flatten(residual_args)
    lin_leaves, lin_tree = tree_flatten(linear_args)
    res_avals = [core.get_aval(x) for x in res_leaves]
    lin_avals = [core.get_aval(x) for x in lin_leaves]
    f_in_tree = tree_structure((residual_args, linear_args))
    callee, f_consts, out_tree = _trace_flat(fun, f_in_tree, res_avals + lin_avals,
                                             "linear_call fun")
    out_avals = callee.out_avals[:]
    n_consts = len(f_consts)
    t_in_tree = tree_structure((residual_args, tree_unflatten(out_tree, [0] * len(out_avals))))

    @functools.cache
    def transpose_thunk():
        t_jaxpr, t_consts, t_out_tree = _trace_flat(
            fun_transpose, t_in_tree, res_avals + [a.to_tangent_aval() for a in out_avals],
            "linear_call fun_transpose")
        if t_out_tree != lin_tree:
            raise TypeError(f"transpose output pytree structure must match that of linear "
                            f"inputs, got output structure {t_out_tree} and input structure "
                            f"{lin_tree}.")
        return t_jaxpr, t_consts

    outs = linear_call_p.bind(*f_consts, *res_leaves, *lin_leaves, callee=callee,
                              transpose_thunk=transpose_thunk, num_callee_consts=n_consts,
                              num_res=len(res_leaves))
    return tree_unflatten(out_tree, outs)


def _linear_call_impl(*args, callee, transpose_thunk, num_callee_consts, num_res):
    return core.eval_jaxpr(callee.jaxpr, callee.consts, *args)


def _linear_call_abstract_eval(*avals, callee, transpose_thunk, num_callee_consts, num_res):
    return callee.out_avals


def _linear_call_jvp(primals, tangents, callee, transpose_thunk, num_callee_consts, num_res):
    """Linear in its linear operands: the tangent is the call applied to their tangents."""
    n_fixed = num_callee_consts + num_res
    if any(type(t) is not ad.Zero for t in tangents[:n_fixed]):
        raise ValueError("linear_call cannot be differentiated with respect to its residual "
                         "arguments (or values its functions close over): it is linear only "
                         "in its linear arguments")
    params = dict(callee=callee, transpose_thunk=transpose_thunk,
                  num_callee_consts=num_callee_consts, num_res=num_res)
    outs = linear_call_p.bind(*primals, **params)
    lin_tangents = tangents[n_fixed:]
    if all(type(t) is ad.Zero for t in lin_tangents):
        return outs, [ad.Zero(a.to_tangent_aval()) for a in callee.out_avals]
    t_outs = linear_call_p.bind(*primals[:n_fixed],
                                *[ad.instantiate_zeros(t) for t in lin_tangents], **params)
    return outs, t_outs


def _linear_call_transpose(cts, *args, callee, transpose_thunk, num_callee_consts, num_res):
    """A ``linear_call`` of ``fun_transpose`` on the cotangents, whose own transpose is the
    original call."""
    t_jaxpr, t_consts = transpose_thunk()
    f_consts = args[:num_callee_consts]
    residuals = args[num_callee_consts:num_callee_consts + num_res]
    linear = args[num_callee_consts + num_res:]
    if any(ad.is_undefined_primal(x) for x in (*f_consts, *residuals)):
        raise ValueError("linear_call is not linear in its residual arguments: differentiate "
                         "with respect to them outside the linear_call")
    cts = [ad.instantiate_zeros(c) for c in cts]

    def back_to_fun():
        return callee, list(f_consts)

    cts_in = linear_call_p.bind(*t_consts, *residuals, *cts, callee=t_jaxpr,
                                transpose_thunk=back_to_fun, num_callee_consts=len(t_consts),
                                num_res=num_res)
    return [None] * (num_callee_consts + num_res) + [
        ct if ad.is_undefined_primal(x) else None for x, ct in zip(linear, cts_in)]


def _linear_call_batch(vals, dims, callee, transpose_thunk, num_callee_consts, num_res):
    """Both ``fun`` and ``fun_transpose`` batched alike: batch axes in front, every output (and
    every cotangent of the transpose) batched."""
    size = batching.axis_size_of(vals, dims)
    vals = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
    batched = tuple(d is not None for d in dims)
    b_callee, _ = batching.batch_jaxpr(callee, size, batched, True)
    b_callee, extra = _const_free(b_callee)
    res_batched = batched[num_callee_consts:num_callee_consts + num_res]
    n_out = len(callee.out_avals)

    @functools.cache
    def b_thunk():
        t_jaxpr, t_consts = transpose_thunk()
        b_t, _ = batching.batch_jaxpr(t_jaxpr, size, (False,) * len(t_consts) + res_batched
                                      + (True,) * n_out, True)
        b_t, t_extra = _const_free(b_t)
        return b_t, list(t_extra) + list(t_consts)

    outs = linear_call_p.bind(*extra, *vals, callee=b_callee, transpose_thunk=b_thunk,
                              num_callee_consts=len(extra) + num_callee_consts, num_res=num_res)
    return outs, [0] * len(outs)


def _const_free(closed):
    if not closed.consts:
        return closed, []
    return ClosedJaxpr(pe.convert_constvars_jaxpr(closed.jaxpr), []), list(closed.consts)


linear_call_p.def_impl(_linear_call_impl)
linear_call_p.def_abstract_eval(_linear_call_abstract_eval)
ad.primitive_jvps[linear_call_p] = _linear_call_jvp
ad.primitive_transposes[linear_call_p] = _linear_call_transpose
batching.primitive_batchers[linear_call_p] = _linear_call_batch
discharge.handle_refs(linear_call_p, discharge.call_rule("callee", rebind_as_jit, "linear_call"))
