"""``custom_remat(f, f_fwd, f_rem, f_bwd)``: a function that carries its own
rematerialization rule (JAX 0.11's ``jax.custom_remat``).

Outside a checkpoint's reverse-mode split it is ``f`` (evaluated, jvp'd, batched and
differentiated as ``f``). When a checkpoint with policy ``P`` splits it for the backward pass,
the forward side runs ``f_fwd(P, *args) -> (out, res)`` and saves exactly ``res`` (whatever the
policy says of other values); the backward side runs ``f_rem(res, *args) -> (out, res2)`` to
rematerialize, then ``f_bwd(res2, out_ct) -> args_ct``.

How: the call binds ``custom_remat_call`` (``f``'s jaxpr plus the rules). Its JVP binds
``custom_remat_jvp`` on primals and tangents; that equation evaluates as ``jvp(f)``, and its
policy-aware partial-eval rule (what a checkpoint uses) splits it into a ``jit`` of ``f_fwd``
on the known side and, on the staged side, a ``jit`` of ``f_rem`` feeding ``custom_lin``,
whose transpose is ``f_bwd`` (and which ``linearize`` evaluates forward as the transpose of
``f_bwd``, a linear map: the same residuals serve both).
"""

import functools

from remat import core
from remat.api_util import (
    TraceCache,
    check_callable,
    fun_name,
    static_argnums_from_names,
    static_key,
)
from remat.call import _jit_pe_custom, jit_p
from remat.core import JaxprEqn, Var
from remat.custom_derivatives import _trace_call, custom_lin_p
from remat.errors import UnexpectedTracerError
from remat.interpreters import ad, batching
from remat.interpreters import partial_eval as pe
from remat.tree_util import tree_flatten, tree_structure, tree_unflatten

__all__ = ["custom_remat", "custom_remat_call_p", "custom_remat_jvp_p"]


class _Rules:
    """The user's three rules at the flat level, for one call signature."""

    def __init__(self, name, fwd, rem, bwd, in_tree, out_tree, arg_avals):
        self.name = name
        self.fwd, self.rem, self.bwd = fwd, rem, bwd
        self.in_tree, self.out_tree = in_tree, out_tree
        self.arg_avals = arg_avals  # of the flat (dynamic) arguments: the cotangents' types

    def arg_trees(self):
        """Per argument, its pytree of avals."""
        return tree_unflatten(self.in_tree, self.arg_avals)

    def _outs(self, result, rule):
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise TypeError(f"custom_remat rule {rule} for {self.name} must return a pair "
                            f"(output, residuals), got {type(result).__name__}")
        out, res = result
        flat_out, tree = tree_flatten(out)
        if tree != self.out_tree:
            raise TypeError(f"custom_remat rule {rule} for {self.name} must return an output "
                            f"with the structure of the function's output {self.out_tree}; "
                            f"got {tree}")
        flat_res, res_tree = tree_flatten(res)
        return flat_out, flat_res, res_tree

    def fwd_flat(self, policy, flat_args):
        """``(out, res, res_tree)`` of ``f_fwd(policy, *args)``."""
        return self._outs(self.fwd(policy, *tree_unflatten(self.in_tree, flat_args)),
                          "f_fwd")

    def rem_flat(self, res_tree, flat_res, flat_args):
        res = tree_unflatten(res_tree, flat_res)
        return self._outs(self.rem(res, *tree_unflatten(self.in_tree, flat_args)), "f_rem")

    def bwd_flat(self, res2_tree, flat_res2, flat_cts):
        cts_in = self.bwd(tree_unflatten(res2_tree, flat_res2),
                          tree_unflatten(self.out_tree, flat_cts))
        args = self.arg_trees()
        if not isinstance(cts_in, (tuple, list)) or len(cts_in) != len(args):
            raise TypeError(f"custom_remat rule f_bwd for {self.name} must return a tuple with "
                            f"one cotangent per argument ({len(args)}), got {cts_in!r}")
        flat = []
        for arg, ct in zip(args, cts_in):
            if ct is None:
                flat += [ad.instantiate_zeros(ad.Zero(a.to_tangent_aval()))
                         for a in tree_flatten(arg)[0]]
                continue
            if tree_structure(ct) != tree_structure(arg):
                raise TypeError(f"custom_remat rule f_bwd for {self.name} returned a cotangent "
                                f"with structure {tree_structure(ct)} for an argument of "
                                f"structure {tree_structure(arg)}")
            flat += tree_flatten(ct)[0]
        return flat


def _call_impl(*args, call_jaxpr, rules, num_consts):
    return core.eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *args)


custom_remat_call_p = core.Primitive("custom_remat_call")
custom_remat_call_p.multiple_results = True
custom_remat_call_p.def_impl(_call_impl)
custom_remat_call_p.def_abstract_eval(lambda *avals, call_jaxpr, **_: call_jaxpr.out_avals)


def _custom_remat_call_jvp(primals, tangents, call_jaxpr, rules, num_consts):
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    outs = custom_remat_jvp_p.bind(*primals, *tangents, call_jaxpr=call_jaxpr, rules=rules,
                                   num_consts=num_consts)
    n = len(call_jaxpr.out_avals)
    return outs[:n], outs[n:]


def _batched_rules(rules, size, arg_dims):
    """``rules`` vmapped over the arguments batched along ``arg_dims`` (residuals and output
    cotangents batched along their leading axis). An unbatched argument is shared by every
    example, so its cotangent is the sum over the batch. The rules run later, under the
    vmap's axis name (a rule may use the named axis)."""
    axis_name = batching.rule_axis_name()

    def run(fn, vals, dims):
        trees = {}

        def flat(*xs):
            out, res, trees["res"] = fn(*xs)
            trees["n"] = len(out)
            return [*out, *res]

        outs, out_dims = batching.batch_flat(flat, size, list(vals), list(dims), axis_name)
        outs = [batching.bdim_at_front(o, d, size) for o, d in zip(outs, out_dims)]
        return outs[:trees["n"]], outs[trees["n"]:], trees["res"]

    def fwd(policy, *args):
        flat_args = tree_flatten(args)[0]
        out, res, res_tree = run(lambda *a: rules.fwd_flat(policy, a), flat_args, arg_dims)
        return tree_unflatten(rules.out_tree, out), tree_unflatten(res_tree, res)

    def rem(res, *args):
        flat_res, res_tree = tree_flatten(res)
        flat_args = tree_flatten(args)[0]
        n = len(flat_res)
        out, res2, res2_tree = run(
            lambda *v: rules.rem_flat(res_tree, v[:n], v[n:]), [*flat_res, *flat_args],
            [0] * n + list(arg_dims))
        return tree_unflatten(rules.out_tree, out), tree_unflatten(res2_tree, res2)

    def bwd(res2, cts):
        flat_res2, res2_tree = tree_flatten(res2)
        flat_cts = tree_flatten(cts)[0]
        n = len(flat_res2)
        outs, dims = batching.batch_flat(
            lambda *v: rules.bwd_flat(res2_tree, v[:n], v[n:]), size,
            [*flat_res2, *flat_cts], [0] * (n + len(flat_cts)), axis_name)
        flat = []
        for o, d, arg_dim in zip(outs, dims, arg_dims):
            o = batching.bdim_at_front(o, d, size)
            flat.append(o if arg_dim is not batching.not_mapped else o.sum(0))
        return tuple(tree_unflatten(rules.in_tree, flat))

    avals = [a if d is batching.not_mapped else a.update(shape=(size, *a.shape))
             for a, d in zip(rules.arg_avals, arg_dims)]
    return _Rules(f"vmap({rules.name})", fwd, rem, bwd, rules.in_tree, rules.out_tree, avals)


def _custom_remat_call_batch(vals, dims, call_jaxpr, rules, num_consts):
    size = batching.axis_size_of(vals, dims)
    vals = [v if d is batching.not_mapped else batching.moveaxis(v, d, 0)
            for v, d in zip(vals, dims)]
    batched = tuple(d is not batching.not_mapped for d in dims)
    b_call, _ = batching.batch_jaxpr(call_jaxpr, size, batched, True)
    arg_dims = [0 if b else batching.not_mapped for b in batched[num_consts:]]
    outs = custom_remat_call_p.bind(*vals, call_jaxpr=b_call,
                                    rules=_batched_rules(rules, size, arg_dims),
                                    num_consts=num_consts)
    return outs, [0] * len(outs)


ad.primitive_jvps[custom_remat_call_p] = _custom_remat_call_jvp
batching.primitive_batchers[custom_remat_call_p] = _custom_remat_call_batch


# --- the JVP equation: jvp(f) everywhere, the user's rules in a checkpoint's split -----------

custom_remat_jvp_p = core.Primitive("custom_remat_jvp")
custom_remat_jvp_p.multiple_results = True


@core.memoize_on_jaxpr
def _jvp_of(call_jaxpr):
    n = len(call_jaxpr.in_avals)
    jvp_closed, _ = ad.jvp_jaxpr(call_jaxpr, (True,) * n, True)
    return jvp_closed


def _jvp_impl(*args, call_jaxpr, rules, num_consts):
    jvp_closed = _jvp_of(call_jaxpr)
    return core.eval_jaxpr(jvp_closed.jaxpr, jvp_closed.consts, *args)


def _jvp_abstract_eval(*avals, call_jaxpr, rules, num_consts):
    outs = list(call_jaxpr.out_avals)
    return outs + [a.to_tangent_aval() for a in outs]


custom_remat_jvp_p.def_impl(_jvp_impl)
custom_remat_jvp_p.def_abstract_eval(_jvp_abstract_eval)


def _jvp_partial_eval(trace, args, params):
    """Linearized outside a checkpoint: as ``jvp(f)``, inlined."""
    with core.set_current_trace(trace):
        return _jvp_impl(*args, **params)


def _jvp_batch(vals, dims, call_jaxpr, rules, num_consts):
    n_in = len(call_jaxpr.in_avals)
    size = batching.axis_size_of(vals, dims)
    vals = [v if d is batching.not_mapped else batching.moveaxis(v, d, 0)
            for v, d in zip(vals, dims)]
    # a primal and its tangent are batched together, so the batched rules see one signature
    batched = [dims[i] is not batching.not_mapped or dims[n_in + i] is not batching.not_mapped
               for i in range(n_in)]
    vals = [batching.bdim_at_front(v, 0 if dims[i] is not batching.not_mapped else
                                   batching.not_mapped, size) if batched[i % n_in] else v
            for i, v in enumerate(vals)]
    b_call, _ = batching.batch_jaxpr(call_jaxpr, size, tuple(batched), True)
    arg_dims = [0 if b else batching.not_mapped for b in batched[num_consts:]]
    outs = custom_remat_jvp_p.bind(*vals, call_jaxpr=b_call,
                                   rules=_batched_rules(rules, size, arg_dims),
                                   num_consts=num_consts)
    return outs, [0] * len(outs)


def _jvp_as_jit(eqn):
    jvp_closed = _jvp_of(eqn.params["call_jaxpr"])
    return eqn.replace(primitive=jit_p,
                       params=dict(name=eqn.params["rules"].name, jaxpr=jvp_closed))


def _trace_rule(fn, avals, name):
    """``fn`` traced at ``avals``: ``(closed_jaxpr, extra)`` where ``fn`` returns
    ``(outs, extra)``."""
    store = {}

    def flat(*xs):
        outs, store["extra"] = fn(*xs)
        return outs

    closes_over = (f"custom_remat rule {name} closes over a value traced by an enclosing "
                   f"transformation; pass it as an argument")
    try:
        closed = pe.trace_to_jaxpr(flat, list(avals), core.DebugInfo(name, [], "custom_remat"))
    except UnexpectedTracerError as e:  # (it returned such a value: the same mistake)
        raise UnexpectedTracerError(closes_over) from e
    if any(isinstance(c, core.Tracer) for c in closed.consts):
        raise UnexpectedTracerError(closes_over)
    return closed, store["extra"]


def _jvp_pe_custom(eqn, unknowns, policy, unsaveable):
    """Split for a checkpoint with ``policy``: ``f_fwd(policy, *args)`` on the known side,
    saving its residuals; ``f_rem`` and ``custom_lin`` (transposed by ``f_bwd``) staged."""
    params = eqn.params
    call_jaxpr, rules, num_consts = params["call_jaxpr"], params["rules"], params["num_consts"]
    n_in = len(call_jaxpr.in_avals)
    primals_uk, tangents_uk = unknowns[:n_in], unknowns[n_in:]
    consts_perturbed = any(tangents_uk[:num_consts])
    if any(primals_uk) or consts_perturbed or not any(tangents_uk):
        # higher order, a closed-over value being differentiated, or nothing unknown (a known
        # derivative, split like any call): differentiate f itself
        return _jit_pe_custom(_jvp_as_jit(eqn), unknowns, policy, unsaveable)
    arg_vars = eqn.invars[num_consts:n_in]
    tangent_vars = eqn.invars[n_in + num_consts:]
    arg_avals = [v.aval for v in arg_vars]
    n_out = len(call_jaxpr.out_avals)

    def fwd(*args):
        out, res, res_tree = rules.fwd_flat(policy, args)
        return [*out, *res], (len(res), res_tree)

    fwd_closed, (n_res, res_tree) = _trace_rule(fwd, arg_avals, f"{rules.name}_fwd")
    res_vars = [Var(a) for a in fwd_closed.out_avals[n_out:]]
    primal_outs = eqn.outvars[:n_out]
    eqn_known = JaxprEqn(list(arg_vars), [*primal_outs, *res_vars], jit_p,
                         dict(name=f"{rules.name}_fwd", jaxpr=fwd_closed), eqn.source_info)
    out_tangent_avals = tuple(a.to_tangent_aval() for a in call_jaxpr.out_avals)

    def staged(*xs):
        res, args, ts = xs[:n_res], xs[n_res:n_res + len(arg_vars)], xs[n_res + len(arg_vars):]
        out, res2, res2_tree = rules.rem_flat(res_tree, res, args)
        bwd = functools.partial(_bwd_flat, rules, res2_tree)
        t_out = custom_lin_p.bind(*res2, *ts, num_res=len(res2), bwd=bwd,
                                  out_avals=out_tangent_avals, transposable=True)
        return [*out, *t_out], None

    staged_closed, _ = _trace_rule(
        staged, [*fwd_closed.out_avals[n_out:], *arg_avals, *[v.aval for v in tangent_vars]],
        f"{rules.name}_rem")
    eqn_staged = JaxprEqn([*res_vars, *arg_vars, *tangent_vars], list(eqn.outvars), jit_p,
                          dict(name=f"{rules.name}_rem", jaxpr=staged_closed),
                          eqn.source_info)
    out_uk = [False] * n_out + [True] * n_out
    return eqn_known, eqn_staged, out_uk, [True] * (2 * n_out), res_vars


def _bwd_flat(rules, res2_tree, res2, cts):
    return rules.bwd_flat(res2_tree, res2, cts)


ad.primitive_jvps[custom_remat_jvp_p] = lambda primals, tangents, call_jaxpr, **_: (
    ad.jvp_of_jaxpr_rule(_jvp_of(call_jaxpr), primals, tangents))
pe.partial_eval_rules[custom_remat_jvp_p] = _jvp_partial_eval
pe.partial_eval_jaxpr_custom_rules[custom_remat_jvp_p] = _jvp_pe_custom
batching.primitive_batchers[custom_remat_jvp_p] = _jvp_batch


# --- the user API ----------------------------------------------------------------------------


class _CustomRemat:
    """``f`` with custom rematerialization rules (see the module docstring)."""

    def __init__(self, fun, fwd, rem, bwd, static_argnums, static_argnames):
        functools.update_wrapper(self, fun, updated=())
        self.fun, self.fwd, self.rem, self.bwd = fun, fwd, rem, bwd
        if isinstance(static_argnums, int):
            static_argnums = (static_argnums,)
        if isinstance(static_argnames, str):
            static_argnames = (static_argnames,)
        self.static_argnums = tuple(static_argnums)
        self.static_argnames = tuple(static_argnames)
        self._cache = TraceCache()

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError(f"custom_remat function {fun_name(self.fun)} takes its arguments "
                            f"positionally; got keyword arguments {sorted(kwargs)}")
        nums = {i % len(args) for i in self.static_argnums} | {
            i for i in static_argnums_from_names(self.fun, self.static_argnames)
            if i < len(args)}
        statics = {i: args[i] for i in nums}

        def full(dyn):
            it = iter(dyn)
            return [statics[i] if i in nums else next(it) for i in range(len(args))]

        dyn = tuple(a for i, a in enumerate(args) if i not in nums)
        flat_args, in_tree = tree_flatten(dyn)
        key = tuple((i, static_key(v)) for i, v in sorted(statics.items()))
        traced = _trace_call(self._cache, lambda *d: self.fun(*full(d)), key, flat_args,
                             in_tree, fun_name(self.fun))
        def bwd(res2, cts):
            cts_in = self.bwd(res2, cts)
            if nums and isinstance(cts_in, (tuple, list)) and len(cts_in) == len(args):
                cts_in = tuple(c for i, c in enumerate(cts_in) if i not in nums)  # statics'
            return cts_in

        rules = _Rules(fun_name(self.fun),
                       lambda policy, *d: self.fwd(policy, *full(d)),
                       lambda res, *d: self.rem(res, *full(d)),
                       bwd, in_tree, traced.out_tree, [core.get_aval(x) for x in flat_args])
        outs = custom_remat_call_p.bind(*traced.consts, *flat_args, call_jaxpr=traced.jaxpr,
                                        rules=rules, num_consts=len(traced.consts))
        return tree_unflatten(traced.out_tree, outs)


def custom_remat(f, f_fwd, f_rem, f_bwd, *, static_argnums=(), static_argnames=()):
    """Wrap ``f`` with custom rematerialization rules for reverse mode under ``checkpoint``:
    ``f_fwd(policy, *args) -> (out, res)`` on the forward pass (``res`` may be None),
    ``f_rem(res, *args) -> (out, res2)`` on the backward pass, ``f_bwd(res2, out_ct) ->
    args_ct``. Everywhere else the function is ``f``."""
    for fn in (f, f_fwd, f_rem, f_bwd):
        check_callable(fn)
    return _CustomRemat(f, f_fwd, f_rem, f_bwd, static_argnums, static_argnames)
