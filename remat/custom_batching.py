"""``custom_vmap``: a function with its own batching rule (``jax.custom_batching``).

A call binds ``custom_vmap_call`` with the function's jaxpr and the user's rule
``rule(axis_size, in_batched, *args) -> (out, out_batched)``. Eagerly and when staged it is the
function; under ``vmap`` the rule runs on the batched arguments (batch axis first); under
``jvp`` it becomes the ``custom_vmap`` of the JVP, whose rule is the JVP of the user's rule;
linearized, the function's own jaxpr is differentiated.
"""

import functools

from remat import core, lax
from remat.api_util import TraceCache, check_callable, fun_name
from remat.custom_derivatives import _trace_call
from remat.interpreters import ad, batching
from remat.interpreters import partial_eval as pe
from remat.transforms import api
from remat.tree_util import tree_flatten, tree_structure, tree_unflatten

__all__ = ["custom_vmap", "sequential_vmap", "custom_vmap_call_p"]

custom_vmap_call_p = core.Primitive("custom_vmap_call")
custom_vmap_call_p.multiple_results = True


def _impl(*args, call_jaxpr, rule, num_consts):
    return core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *args)


custom_vmap_call_p.def_impl(_impl)
custom_vmap_call_p.def_abstract_eval(lambda *avals, call_jaxpr, **_: call_jaxpr.out_avals)


def _batch(vals, dims, call_jaxpr, rule, num_consts):
    size = batching.axis_size_of(vals, dims)
    if any(d is not batching.not_mapped for d in dims[:num_consts]):
        # the function closes over a batched value: batch it as a whole
        b_call, out_b = batching.batch_jaxpr(call_jaxpr, size,
                                             tuple(d is not batching.not_mapped for d in dims),
                                             False)
        vals = [v if d is batching.not_mapped else batching.moveaxis(v, d, 0)
                for v, d in zip(vals, dims)]
        outs = core.eval_jaxpr(b_call.jaxpr, b_call.consts, *vals)
        return outs, [0 if b else batching.not_mapped for b in out_b]
    args = [v if d is batching.not_mapped else batching.moveaxis(v, d, 0)
            for v, d in zip(vals[num_consts:], dims[num_consts:])]
    in_batched = [d is not batching.not_mapped for d in dims[num_consts:]]
    outs, out_batched = rule(size, in_batched, args)
    return outs, [0 if b else batching.not_mapped for b in out_batched]


def _jvp(primals, tangents, call_jaxpr, rule, num_consts):
    n = len(primals)
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    jvp_closed, _ = ad.jvp_jaxpr(call_jaxpr, (True,) * n, True)
    outs = custom_vmap_call_p.bind(*primals, *tangents, call_jaxpr=jvp_closed,
                                   rule=_jvp_of_rule(rule, n - num_consts),
                                   num_consts=num_consts)
    n_out = len(call_jaxpr.out_avals)
    return outs[:n_out], outs[n_out:]


def _jvp_of_rule(rule, n_args):
    """The batching rule of the JVP: the JVP of ``rule``, a primal and its tangent batched
    alike. (Called only without batched consts; the consts' tangents sit among the args.)"""

    def jvp_rule(size, in_batched, args):
        primals, tangents = args[:n_args], args[n_args:]
        p_b, t_b = in_batched[:n_args], in_batched[n_args:]
        batched = [a or b for a, b in zip(p_b, t_b)]
        primals = [batching.bdim_at_front(p, 0 if b else batching.not_mapped, size)
                   if want and not b else p for p, b, want in zip(primals, p_b, batched)]
        tangents = [batching.bdim_at_front(t, 0 if b else batching.not_mapped, size)
                    if want and not b else t for t, b, want in zip(tangents, t_b, batched)]
        store = {}

        def primal_rule(*p):
            outs, store["out_batched"] = rule(size, batched, list(p))
            return outs

        outs, t_outs = api.jvp(primal_rule, tuple(primals), tuple(tangents))
        out_batched = list(store["out_batched"])
        return [*outs, *t_outs], out_batched + out_batched

    return jvp_rule


def _partial_eval(trace, args, params):
    """Linearized: the function's own jaxpr is differentiated (its linear part transposes)."""
    closed = params["call_jaxpr"]
    with core.set_current_trace(trace):
        return core.eval_jaxpr(closed.jaxpr, closed.consts, *args)


batching.primitive_batchers[custom_vmap_call_p] = _batch
ad.primitive_jvps[custom_vmap_call_p] = _jvp
pe.partial_eval_rules[custom_vmap_call_p] = _partial_eval


class custom_vmap:
    """``fun`` with a custom batching rule, set with ``def_vmap``:
    ``rule(axis_size, in_batched, *args) -> (out, out_batched)``, where ``in_batched`` and
    ``out_batched`` are pytrees of bools like the arguments and the output, and batched
    values have their batch axis first."""

    def __init__(self, fun):
        check_callable(fun)
        functools.update_wrapper(self, fun, updated=())
        self.fun = fun
        self.vmap_rule = None
        self._cache = TraceCache()

    def def_vmap(self, vmap_rule):
        check_callable(vmap_rule)
        self.vmap_rule = vmap_rule
        return vmap_rule

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError(f"custom_vmap function {fun_name(self.fun)} takes its arguments "
                            f"positionally; got keyword arguments {sorted(kwargs)}")
        if self.vmap_rule is None:
            raise AttributeError(f"No batching rule defined for custom_vmap function "
                                 f"{fun_name(self.fun)} using def_vmap.")
        flat_args, in_tree = tree_flatten(args)
        traced = _trace_call(self._cache, self.fun, (), flat_args, in_tree,
                             fun_name(self.fun))
        out_tree = traced.out_tree
        name = fun_name(self.fun)

        def flat_rule(size, in_batched, flat_vals):
            batched = tree_unflatten(in_tree, in_batched)
            result = self.vmap_rule(size, list(batched), *tree_unflatten(in_tree, flat_vals))
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise TypeError(f"custom_vmap rule for {name} must return a pair (output, "
                                f"output batched flags), got {type(result).__name__}")
            out, out_batched = result
            flat_out, tree = tree_flatten(out)
            if tree != out_tree:
                raise TypeError(f"custom_vmap rule for {name} must return an output with the "
                                f"function's structure {out_tree}, got {tree}")
            flat_b = flags_per_leaf(out_batched, out)
            for o, b in zip(flat_out, flat_b):
                if b and core.get_aval(o).shape[:1] != (size,):
                    raise ValueError(f"custom_vmap rule for {name} marks an output as batched "
                                     f"whose leading axis is not of size {size}")
            return flat_out, flat_b

        flat_rule.__name__ = name
        outs = custom_vmap_call_p.bind(*traced.consts, *flat_args, call_jaxpr=traced.jaxpr,
                                       rule=flat_rule, num_consts=len(traced.consts))
        return tree_unflatten(out_tree, outs)


def flags_per_leaf(flags, tree):
    """``flags`` (a bool, or a pytree of bools that is a prefix of ``tree``) per leaf of
    ``tree``."""
    if isinstance(flags, bool):
        return [flags] * len(tree_flatten(tree)[0])
    flat = []
    for flag, sub in zip(tree_flatten(flags)[0], tree_structure(flags).flatten_up_to(tree)):
        flat += [bool(flag)] * len(tree_flatten(sub)[0])
    return flat


def sequential_vmap(f):
    """``f`` whose batching runs it once per example (``lax.map``), as JAX's."""
    wrapped = custom_vmap(f)

    @wrapped.def_vmap
    def rule(axis_size, in_batched, *args):
        flat, tree = tree_flatten(args)
        flat_b = flags_per_leaf(list(in_batched), list(args))
        batched = [a for a, b in zip(flat, flat_b) if b]

        def one(xs):
            it = iter(xs)
            full = [next(it) if b else a for a, b in zip(flat, flat_b)]
            return f(*tree_unflatten(tree, full))

        out = lax.map(one, batched)
        return out, True

    return wrapped
