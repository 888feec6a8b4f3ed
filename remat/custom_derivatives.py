"""``custom_jvp`` and ``custom_vjp``: user-defined derivative rules.

A call of a decorated function binds a call primitive carrying the function's traced jaxpr
(traced once per signature; closed-over values become leading operands) and the user's rule
as a flat Python callable. Evaluating the call runs the jaxpr; the JVP trace runs the rule; vmap
batches both; staging keeps the call in the jaxpr so later transformations still use the rule.
For ``custom_vjp`` the JVP emits ``custom_lin``, a linear primitive whose transpose is the
user's ``bwd``.

Where no trace needs the function's jaxpr (eager evaluation, and eager ``jvp``/``grad``/``vjp``
on concrete values), the call is not traced at all, as JAX's: the function runs on arrays, or
the rule on the JVP trace's primals and tangents, so Python control flow on values works.
"""

import functools
import inspect

import numpy as np

from remat import core, exec
from remat.api_util import TraceCache, fun_name, static_key
from remat.call import jit_p, rebind_as_jit
from remat.config import config
from remat.core import ClosedJaxpr, Primitive
from remat.custom_linear import linear_call  # noqa: F401  (remat.custom_derivatives.linear_call)
from remat.interpreters import ad, batching, discharge
from remat.interpreters import partial_eval as pe
from remat.tree_util import tree_flatten, tree_map, tree_structure, tree_unflatten


def _split_nondiff(args, nondiff_argnums):
    nondiff = tuple(args[i] for i in nondiff_argnums)
    diff = tuple(a for i, a in enumerate(args) if i not in nondiff_argnums)
    return nondiff, diff


def _merge_nondiff(nondiff, diff, nondiff_argnums):
    it_n, it_d = iter(nondiff), iter(diff)
    n = len(nondiff) + len(diff)
    return [next(it_n) if i in nondiff_argnums else next(it_d) for i in range(n)]


class SymbolicZero:
    """A zero tangent or cotangent known to be zero without a value: what rules defined with
    ``symbolic_zeros=True`` see for unperturbed inputs and zero cotangents."""

    def __init__(self, aval):
        self.aval = aval

    shape = property(lambda self: self.aval.shape)
    dtype = property(lambda self: self.aval.dtype)

    def __repr__(self):
        return f"SymbolicZero({self.aval.str_short()})"

    def instantiate(self):
        return ad.instantiate_zeros(ad.Zero(self.aval))


class CustomVJPPrimal:
    """A primal input as ``custom_vjp``'s ``fwd`` sees it with ``symbolic_zeros=True``: its
    ``value``, and whether it is ``perturbed`` (differentiated)."""

    __slots__ = ("value", "perturbed")

    def __init__(self, value, perturbed):
        self.value, self.perturbed = value, perturbed

    def __repr__(self):
        return f"CustomVJPPrimal(value={self.value!r}, perturbed={self.perturbed})"


def zero_from_primal(x, symbolic_zeros=False):
    """The zero tangent of ``x`` (a pytree): ``SymbolicZero``s, or zero arrays."""
    def zero(leaf):
        aval = core.get_aval(leaf).to_tangent_aval()
        return SymbolicZero(aval) if symbolic_zeros else ad.instantiate_zeros(ad.Zero(aval))

    return tree_map(zero, x)


def custom_vjp_primal_tree_values(tree):
    """``tree`` with each ``CustomVJPPrimal`` replaced by its value."""
    return tree_map(lambda x: x.value if isinstance(x, CustomVJPPrimal) else x, tree,
                    is_leaf=lambda x: isinstance(x, CustomVJPPrimal))


def _to_symbolic(t):
    return SymbolicZero(t.aval) if type(t) is ad.Zero else t


def _from_symbolic(t, aval):
    """A rule's output tangent/cotangent: ``SymbolicZero`` (or None) becomes ``ad.Zero``."""
    if t is None or isinstance(t, SymbolicZero):
        return ad.Zero(aval.to_tangent_aval())
    return t


class _TracedCall:
    """The jaxpr of ``fun`` at one signature, with closed-over consts as leading operands."""

    def __init__(self, fun, flat_args, in_tree, name):
        store = {}

        def flat_fun(*leaves):
            out = fun(*tree_unflatten(in_tree, leaves))
            flat, store["tree"] = tree_flatten(out)
            return flat

        avals = [core.get_aval(x) for x in flat_args]
        closed = pe.trace_to_jaxpr(flat_fun, avals, core.DebugInfo(name, [], "custom"))
        self.consts = list(closed.consts)
        self.jaxpr = ClosedJaxpr(pe.convert_constvars_jaxpr(closed.jaxpr), [])
        self.out_tree = store["tree"]
        self.cacheable = not any(isinstance(c, core.Tracer) for c in self.consts)


def _trace_call(cache, fun, key_extra, flat_args, in_tree, name):
    key = (key_extra, in_tree, tuple(core.get_aval(x) for x in flat_args),
           config.trace_context())
    traced = cache.get(key)
    if traced is None:
        traced = _TracedCall(fun, flat_args, in_tree, name)
        if traced.cacheable:
            cache[key] = traced
    return traced


def _opaque(*args, **kwargs):
    """The signature JAX gives a ``functools.partial``: no keyword resolves to a position."""


class _CustomDerivative:
    """What custom_jvp and custom_vjp share: nondiff arguments, and the traced call."""

    kind, rule_name = "", ""

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun, updated=())  # not fun's __dict__
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self._cache = TraceCache()
        self._signature = None  # the function's, read at the first call

    def _positional(self, args, kwargs, rule):
        """The call's arguments, all positional: keyword arguments bound to their positions
        by the function's signature, defaults filled in, as JAX's ``resolve_kwargs``."""
        if rule is None:
            raise AttributeError(f"No {self.rule_name} defined for {self.kind} function "
                                 f"{fun_name(self.fun)} using def{self.rule_name.lower()}.")
        try:
            if self._signature is None:
                self._signature = inspect.signature(
                    _opaque if isinstance(self.fun, functools.partial) else self.fun)
            bound = self._signature.bind(*args, **kwargs)
            bound.apply_defaults()
            passed = [k for k in bound.kwargs if k in kwargs]
            if passed:
                raise TypeError(f"The following keyword arguments could not be resolved to "
                                f"positions: {', '.join(passed)}")
        except TypeError as e:
            raise TypeError(f"The input arguments to the {self.kind}-decorated function "
                            f"{fun_name(self.fun)} could not be resolved to positional-only "
                            f"arguments. Binding failed with the error:\n{e}") from e
        return bound.args

    def _run_fun(self, nondiff, in_tree, out_tree, flat_args):
        """The function itself on concrete values, handed arrays as JAX hands them."""
        diff = tree_unflatten(in_tree, [core.array_of_value(x) for x in flat_args])
        out = self.fun(*_merge_nondiff(nondiff, diff, self.nondiff_argnums))
        flat, out_tree["tree"] = tree_flatten(out)
        return flat

    def _trace(self, nondiff, flat_args, in_tree):
        """The function's jaxpr at the avals of ``flat_args`` (cached per signature)."""
        fun = lambda *d: self.fun(*_merge_nondiff(nondiff, d, self.nondiff_argnums))
        key = tuple(static_key(n) for n in nondiff)
        return _trace_call(self._cache, fun, key, flat_args, in_tree, fun_name(self.fun))


def _has_tracer(tree):
    return any(isinstance(x, core.Tracer) for x in tree_flatten(tree)[0])


def _expect_out_tree(out_tree, tree, message):
    """The first output structure seen is the function's (the traced one, or the rule's where
    nothing was traced); every later one must match it."""
    expected = out_tree.setdefault("tree", tree)
    if tree != expected:
        raise TypeError(message(expected))


def _call_without_jaxpr(flat_args, run_fun, run_rule, closure_differentiable=True):
    """The call's flat outputs where no trace needs the function's jaxpr, as JAX's
    ``process_custom_jvp_call``/``process_custom_vjp_call`` give them; None where one does
    (staging, vmap, a value linearize does not know): then the caller traces and binds.

    Eagerly the function runs (``run_fun``) on concrete values. A JVP trace with a perturbed
    input runs the rule (``run_rule(primals, tangents)``, None when it cannot) under its
    parent; one without passes the primals to its parent, as vmap passes unbatched values
    (``jacfwd`` batches only the tangents) and linearize's partial evaluation known ones.
    Unless ``closure_differentiable`` (a ``custom_vjp``), outputs that a passed-over JVP trace
    still differentiates came from a closed-over value: ``CustomVJPException``, as JAX."""
    trace = core.current_trace()
    passed_over = []
    while True:
        if trace is core.eval_trace:
            if any(isinstance(x, core.Tracer) for x in flat_args):
                return None
            with core.set_current_trace(trace):
                outs = run_fun(flat_args)
            if not closure_differentiable and any(
                    isinstance(o, ad.JVPTracer) and o._trace in passed_over
                    and type(o.tangent) is not ad.Zero for o in outs):
                raise ad.CustomVJPException()
            return outs
        if isinstance(trace, ad.JVPTrace):
            primals, tangents = core.unzip2(trace.to_primal_tangent(x) for x in flat_args)
            if any(type(t) is not ad.Zero for t in tangents):
                with core.set_current_trace(trace.parent):
                    result = run_rule([core.array_of_value(p) for p in primals], tangents)
                if result is None:
                    return None
                return [trace.make_tracer(p, t) for p, t in zip(*result)]
            passed_over.append(trace)
            flat_args = primals
        elif type(trace) is batching.BatchTrace and trace.axis_name is None:
            vals, dims = core.unzip2(trace.to_val_dim(x) for x in flat_args)
            if any(d is not batching.not_mapped for d in dims):
                return None
            flat_args = vals
        elif type(trace) is not pe.PartialEvalTrace or any(
                pe.is_unknown(trace, x) for x in flat_args):
            return None
        trace = trace.parent


def _call_impl(*args, call_jaxpr, num_consts, **_):
    return exec.plan_for(call_jaxpr.jaxpr).run(args)


def _call_abstract_eval(*avals, call_jaxpr, **_):
    return call_jaxpr.out_avals


def _call_dce(used_outputs, eqn):
    return [True] * len(eqn.invars), eqn


# --- custom_jvp ------------------------------------------------------------------------------

custom_jvp_call_p = Primitive("custom_jvp_call")
custom_jvp_call_p.multiple_results = True
custom_jvp_call_p.def_impl(_call_impl)
custom_jvp_call_p.def_abstract_eval(_call_abstract_eval)
pe.dce_rules[custom_jvp_call_p] = _call_dce


class _WrappedFun:
    """JAX's ``lu.WrappedFun`` as jaxpr interpreters call it: ``call_wrapped(*args)``."""

    def __init__(self, fun):
        self.call_wrapped = fun


def _custom_jvp_call_bind_params(params):
    """The params with JAX's ``subfuns``, the function and its JVP (equinox's
    ``finalise_jaxpr`` inlines the call through them)."""
    closed = params["call_jaxpr"]
    fun = _WrappedFun(lambda *args: core.eval_jaxpr(closed.jaxpr, closed.consts, *args))
    return dict(params, subfuns=(fun, _WrappedFun(params["jvp_jaxpr_fun"])))


custom_jvp_call_p.get_bind_params = _custom_jvp_call_bind_params


def _custom_jvp_call_jvp(primals, tangents, call_jaxpr, jvp_jaxpr_fun, num_consts):
    primals, tangents = primals[num_consts:], tangents[num_consts:]
    if not getattr(jvp_jaxpr_fun, "symbolic_zeros", False):
        tangents = [ad.instantiate_zeros(t) for t in tangents]
    outs, out_tangents = jvp_jaxpr_fun(list(primals), list(tangents))
    return outs, out_tangents


def _batch_call(vals, dims, call_jaxpr, num_consts):
    """What both custom-call batchers start from: the batch size, the values with their batch
    axes in front, which are batched, the batched call, the primals' batch dims (after the
    consts), and the number of outputs."""
    size = batching.axis_size_of(vals, dims)
    vals = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
    batched = tuple(d is not None for d in dims)
    b_call, _ = batching.batch_jaxpr(call_jaxpr, size, batched, True)
    primal_dims = [0 if b else None for b in batched[num_consts:]]
    return size, vals, batched, b_call, primal_dims, len(call_jaxpr.out_avals)


def _custom_jvp_call_batch(vals, dims, call_jaxpr, jvp_jaxpr_fun, num_consts):
    size, vals, batched, b_call, primal_dims, n_out = _batch_call(vals, dims, call_jaxpr,
                                                                   num_consts)
    axis_name = batching.rule_axis_name()  # (the rule runs later, outside this one)

    def batched_jvp(primals, tangents):
        zero_tangents = []  # which output tangents the rule gave as symbolic zeros

        def flat(*pt):
            outs, t_outs = jvp_jaxpr_fun(list(pt[:len(primals)]), list(pt[len(primals):]))
            zero_tangents[:] = [type(t) is ad.Zero for t in t_outs]
            return list(outs) + [t for t in t_outs if type(t) is not ad.Zero]

        outs, out_dims = batching.batch_flat(flat, size, list(primals) + list(tangents),
                                             primal_dims + primal_dims, axis_name)
        outs = [batching.bdim_at_front(o, d, size) for o, d in zip(outs, out_dims)]
        outs, nonzero_tangents = outs[:n_out], iter(outs[n_out:])
        return outs, [ad.Zero.from_primal_value(o) if zero else next(nonzero_tangents)
                      for o, zero in zip(outs, zero_tangents)]

    batched_jvp.__name__ = f"vmap({getattr(jvp_jaxpr_fun, '__name__', 'jvp')})"
    outs = custom_jvp_call_p.bind(*vals, call_jaxpr=b_call, jvp_jaxpr_fun=batched_jvp,
                                  num_consts=num_consts)
    return outs, [0] * n_out


def _custom_jvp_call_transpose(cts, *args, call_jaxpr, jvp_jaxpr_fun, num_consts):
    """Reached when the call is applied to tangents (a JVP rule calling the function on its
    tangent, or a checkpoint recomputing the tangent side): there the function is linear in
    those inputs, so its own jaxpr is transposed, as JAX does."""
    linear = tuple(ad.is_undefined_primal(x) for x in args)
    nz_cts = tuple(type(c) is not ad.Zero for c in cts)
    transposed = ad.transpose_jaxpr(call_jaxpr, linear, nz_cts)
    res = [x for x, lin in zip(args, linear) if not lin]
    outs = iter(core.eval_jaxpr(transposed.jaxpr, transposed.consts, *res,
                                *[c for c in cts if type(c) is not ad.Zero]))
    return [next(outs) if lin else None for lin in linear]


ad.primitive_jvps[custom_jvp_call_p] = _custom_jvp_call_jvp
ad.primitive_transposes[custom_jvp_call_p] = _custom_jvp_call_transpose
batching.primitive_batchers[custom_jvp_call_p] = _custom_jvp_call_batch


class custom_jvp(_CustomDerivative):
    """Decorate ``fun`` with a custom JVP rule (``defjvp`` / ``defjvps``)."""

    kind, rule_name = "custom_jvp", "JVP"

    def __init__(self, fun, nondiff_argnums=()):
        super().__init__(fun, nondiff_argnums)
        self.jvp = None
        self.symbolic_zeros = False

    def defjvp(self, jvp, symbolic_zeros=False):
        """``jvp(primals, tangents) -> (primal_out, tangent_out)`` (nondiff args first). With
        ``symbolic_zeros`` the rule sees ``SymbolicZero`` for unperturbed inputs' tangents and
        may return one."""
        self.jvp = jvp
        self.symbolic_zeros = symbolic_zeros
        return jvp

    def defjvps(self, *jvps):
        """One rule per argument: ``jvp_i(g_i, ans, *args) -> tangent contribution``."""

        def jvp(primals, tangents):
            ans = self(*primals)
            out = None
            for rule, t in zip(jvps, tangents):
                if rule is None:
                    continue
                contribution = rule(t, ans, *primals)
                out = contribution if out is None else tree_map(
                    lambda a, b: a + b, out, contribution)
            if out is None:
                out = tree_map(lambda a: a * 0, ans)
            return ans, out

        self.defjvp(jvp)

    def __call__(self, *args, **kwargs):
        args = self._positional(args, kwargs, self.jvp)
        nondiff, diff = _split_nondiff(args, self.nondiff_argnums)
        flat_args, in_tree = tree_flatten(diff)
        out_tree = {}  # the output structure: the traced function's, or else the rule's
        name = fun_name(self.fun)

        def jvp_flat(primals, tangents):
            p = tree_unflatten(in_tree, primals)
            t = tree_unflatten(in_tree, [_to_symbolic(x) for x in tangents])
            out, t_out = self.jvp(*nondiff, p, t) if nondiff else self.jvp(p, t)
            flat_out, tree = tree_flatten(out)
            flat_t, t_tree = tree_flatten(t_out, is_leaf=lambda x: isinstance(x, SymbolicZero))
            flat_t = [_from_symbolic(ot, core.get_aval(o)) for ot, o in zip(flat_t, flat_out)]
            for got in (tree, t_tree):
                _expect_out_tree(out_tree, got, lambda expected: (
                    f"Custom JVP rule for {name} must produce primal and tangent outputs with "
                    f"the structure of the function's output {expected}; got {tree} and "
                    f"{t_tree}."))
            for o, ot in zip(flat_out, flat_t):
                if type(ot) is not ad.Zero and core.get_aval(o).shape != core.get_aval(ot).shape:
                    raise ValueError(f"Custom JVP rule for {name} returned a tangent of shape "
                                     f"{core.get_aval(ot).shape} for a primal output of shape "
                                     f"{core.get_aval(o).shape}.")
            return flat_out, flat_t

        jvp_flat.__name__ = getattr(self.jvp, "__name__", "jvp")
        jvp_flat.symbolic_zeros = self.symbolic_zeros
        if not _has_tracer(nondiff):
            outs = _call_without_jaxpr(
                flat_args, functools.partial(self._run_fun, nondiff, in_tree, out_tree),
                lambda primals, tangents: _custom_jvp_call_jvp(primals, tangents, None,
                                                               jvp_flat, 0))
            if outs is not None:
                return tree_unflatten(out_tree["tree"], outs)
        traced = self._trace(nondiff, flat_args, in_tree)
        out_tree["tree"] = traced.out_tree
        outs = custom_jvp_call_p.bind(*traced.consts, *flat_args, call_jaxpr=traced.jaxpr,
                                      jvp_jaxpr_fun=jvp_flat, num_consts=len(traced.consts))
        return tree_unflatten(out_tree["tree"], outs)


# --- custom_vjp ------------------------------------------------------------------------------

custom_vjp_call_p = Primitive("custom_vjp_call")
custom_vjp_call_p.multiple_results = True
custom_vjp_call_p.def_impl(_call_impl)
custom_vjp_call_p.def_abstract_eval(_call_abstract_eval)
pe.dce_rules[custom_vjp_call_p] = _call_dce

custom_lin_p = Primitive("custom_lin")
custom_lin_p.multiple_results = True


_NO_FORWARD_MODE = "can't apply forward-mode autodiff (jvp) to a custom_vjp function."


def _custom_lin_impl(*args, num_res, bwd, out_avals, transposable=False):
    """Evaluated forward (``linearize``'s tangent map) only when ``bwd`` is known to be a
    linear map built of primitives (a ``custom_remat``'s ``f_bwd``): then as its transpose,
    from the same residuals. A ``custom_vjp``'s ``bwd`` may be anything: as in JAX, no."""
    if not transposable:
        raise TypeError(_NO_FORWARD_MODE)
    res = [_as_array(r) for r in args[:num_res]]
    tangents = [_as_array(t) for t in args[num_res:]]
    closed = pe.trace_to_jaxpr(lambda *cts: bwd(res, list(cts)), list(out_avals))
    outs = ad.transpose_traced_whole(closed, tangents)
    return [ad.instantiate_zeros(o) for o in outs]


def _custom_lin_jvp(primals, tangents, **params):
    """Differentiating ``linearize``'s tangent map (second order): through the forward
    evaluation, the transpose of ``bwd``."""
    if not params.get("transposable"):
        raise TypeError(_NO_FORWARD_MODE)
    return ad.jvp_flat(lambda *args: _custom_lin_impl(*args, **params), primals, tangents)


custom_lin_p.def_impl(_custom_lin_impl)
custom_lin_p.def_abstract_eval(lambda *avals, out_avals, **_: list(out_avals))
ad.primitive_jvps[custom_lin_p] = _custom_lin_jvp


def _as_array(x):
    """A NumPy buffer as an Array (what a user's rule is given, as in JAX); others as they
    are."""
    if isinstance(x, (np.ndarray, np.generic, bool, int, float, complex)):
        return core.make_array(np.asarray(x), core.get_aval(x))
    return x


def _custom_lin_transpose(cts, *args, num_res, bwd, out_avals, transposable=False):
    res = [_as_array(r) for r in args[:num_res]]
    if getattr(bwd, "symbolic_zeros", False):
        cts = [SymbolicZero(c.aval) if type(c) is ad.Zero else _as_array(c) for c in cts]
    else:
        cts = [_as_array(ad.instantiate_zeros(c)) for c in cts]
    cts_in = bwd(res, cts)
    return [None] * num_res + list(cts_in)


ad.primitive_transposes[custom_lin_p] = _custom_lin_transpose


def _custom_vjp_call_jvp(primals, tangents, call_jaxpr, fwd, bwd, num_consts):
    if any(type(t) is not ad.Zero for t in tangents[:num_consts]):
        raise ad.CustomVJPException()  # bwd has no cotangent for a closed-over value
    consts, primals, tangents = primals[:num_consts], primals[num_consts:], tangents[num_consts:]
    perturbed = [type(t) is not ad.Zero for t in tangents]
    if getattr(fwd, "optimize_remat", False):
        outs, res = _remat_optimized_fwd(fwd, perturbed, consts, primals, call_jaxpr)
    else:
        outs, res = fwd(list(primals), perturbed)
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    out_avals = tuple(core.get_aval(o).to_tangent_aval() for o in outs)
    t_out = custom_lin_p.bind(*res, *tangents, num_res=len(res), bwd=bwd, out_avals=out_avals)
    return outs, t_out


def _custom_vjp_call_batch(vals, dims, call_jaxpr, fwd, bwd, num_consts):
    size, vals, batched, b_call, primal_dims, n_out = _batch_call(vals, dims, call_jaxpr,
                                                                   num_consts)

    axis_name = batching.rule_axis_name()  # (the rules run later, outside this one)

    def at_front(outs, out_dims):
        return [batching.bdim_at_front(o, d, size) for o, d in zip(outs, out_dims)]

    def batched_fwd(primals, perturbed):
        def flat(*p):
            outs, res = fwd(list(p), perturbed)
            return list(outs) + list(res)

        outs = at_front(*batching.batch_flat(flat, size, list(primals), primal_dims,
                                             axis_name))
        return outs[:n_out], outs[n_out:]

    def batched_bwd(res, cts):
        def flat(*rc):
            return list(bwd(list(rc[:len(res)]), list(rc[len(res):])))

        return at_front(*batching.batch_flat(flat, size, list(res) + list(cts),
                                             [0] * (len(res) + len(cts)), axis_name))

    batched_bwd.symbolic_zeros = False  # the batched cotangents are instantiated
    outs = custom_vjp_call_p.bind(*vals, call_jaxpr=b_call, fwd=batched_fwd, bwd=batched_bwd,
                                  num_consts=num_consts)
    return outs, [0] * n_out


ad.primitive_jvps[custom_vjp_call_p] = _custom_vjp_call_jvp
batching.primitive_batchers[custom_vjp_call_p] = _custom_vjp_call_batch


def _custom_lin_batch(vals, dims, num_res, bwd, out_avals, transposable=False):
    """A batched ``custom_lin`` (``vmap`` of a tangent map, or of a jvp transposed later): its
    operands batched along axis 0, its ``bwd`` run batched on them."""
    size = batching.axis_size_of(vals, dims)
    vals = [batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims)]
    axis_name = batching.rule_axis_name()  # (``bwd`` runs later, outside this rule)

    def batched_bwd(res, cts):
        def flat(*rc):
            return list(bwd(list(rc[:num_res]), list(rc[num_res:])))

        outs, out_dims = batching.batch_flat(flat, size, list(res) + list(cts),
                                             [0] * (num_res + len(cts)), axis_name)
        return [batching.bdim_at_front(o, d, size) for o, d in zip(outs, out_dims)]

    batched_bwd.symbolic_zeros = False  # the batched cotangents are instantiated
    batched_avals = tuple(a.update(shape=(size, *a.shape)) for a in out_avals)
    outs = custom_lin_p.bind(*vals, num_res=num_res, bwd=batched_bwd, out_avals=batched_avals,
                             transposable=transposable)
    return outs, [0] * len(outs)


batching.primitive_batchers[custom_lin_p] = _custom_lin_batch


class custom_vjp(_CustomDerivative):
    """Decorate ``fun`` with a custom VJP: ``defvjp(fwd, bwd)`` where
    ``fwd(*args) -> (out, residuals)`` and ``bwd(residuals, ct) -> tuple of input cts``."""

    kind, rule_name = "custom_vjp", "VJP"

    def __init__(self, fun, nondiff_argnums=()):
        super().__init__(fun, nondiff_argnums)
        self.fwd = self.bwd = None
        self.symbolic_zeros = self.optimize_remat = False

    def defvjp(self, fwd, bwd, symbolic_zeros=False, optimize_remat=False):
        """``fwd(*args) -> (out, res)``, ``bwd(res, ct) -> args_ct``. With ``symbolic_zeros``
        ``fwd`` sees each input leaf as a ``CustomVJPPrimal`` (``.value``, ``.perturbed``)
        and ``bwd`` sees zero cotangents as ``SymbolicZero``s. With ``optimize_remat``, a
        rematerializing checkpoint computes the primal output with the function itself
        where ``fwd``'s residuals are not needed (they are recomputed later anyway)."""
        self.fwd, self.bwd = fwd, bwd
        self.symbolic_zeros, self.optimize_remat = symbolic_zeros, optimize_remat

    def __call__(self, *args, **kwargs):
        args = self._positional(args, kwargs, self.fwd)
        nondiff, diff = _split_nondiff(args, self.nondiff_argnums)
        flat_args, in_tree = tree_flatten(diff)
        out_tree = {}  # the output structure: the traced function's, or else fwd's
        name = fun_name(self.fun)
        res_tree = {}

        def fwd_flat(primals, perturbed):
            if self.symbolic_zeros:
                primals = [CustomVJPPrimal(p, bool(d)) for p, d in zip(primals, perturbed)]
            full = _merge_nondiff(nondiff, tree_unflatten(in_tree, primals),
                                  self.nondiff_argnums)
            result = self.fwd(*full)
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise TypeError(f"Custom VJP fwd rule {getattr(self.fwd, '__name__', 'fwd')} "
                                f"for function {name} must produce a pair (list or tuple of "
                                f"length two) representing primal outputs and residuals.")
            out, res = result
            flat_out, tree = tree_flatten(out)
            _expect_out_tree(out_tree, tree, lambda expected: (
                f"Custom VJP fwd rule must produce an output with the same container (pytree) "
                f"structure as the args tuple of the primal function; expected {expected}, got "
                f"{tree}."))
            flat_res, res_tree["tree"] = tree_flatten(res)
            # Python scalars among the residuals reach bwd as they are (as JAX hands them
            # back), not as arrays: a rule may branch on a bool it saved
            res_tree["python"] = {i: r for i, r in enumerate(flat_res)
                                  if type(r) in (bool, int, float, complex)}
            return flat_out, [r for i, r in enumerate(flat_res) if i not in res_tree["python"]]

        def bwd_flat(res, cts):
            res = iter(res)
            python = res_tree["python"]
            flat_res = [python[i] if i in python else next(res)
                        for i in range(res_tree["tree"].num_leaves)]
            r = tree_unflatten(res_tree["tree"], flat_res)
            ct = tree_unflatten(out_tree["tree"], cts)
            cts_in = self.bwd(*nondiff, r, ct) if nondiff else self.bwd(r, ct)
            if not isinstance(cts_in, (tuple, list)):
                raise TypeError(f"Custom VJP bwd rule must produce a tuple, got "
                                f"{type(cts_in).__name__}")
            if len(cts_in) != len(diff):
                raise TypeError(f"Custom VJP bwd rule must produce a tuple of length equal to "
                                f"the number of primal (differentiable) arguments "
                                f"({len(diff)}), got {len(cts_in)}.")
            flat_cts = []
            for arg, c in zip(diff, cts_in):
                arg_leaves = tree_flatten(arg)[0]
                if c is None or isinstance(c, SymbolicZero):
                    flat_cts.extend(ad.instantiate_zeros(ad.Zero.from_primal_value(x))
                                    for x in arg_leaves)
                else:
                    if tree_structure(c) != tree_structure(arg):
                        raise TypeError(f"Custom VJP bwd rule produced a cotangent with "
                                        f"structure {tree_structure(c)} for an argument of "
                                        f"structure {tree_structure(arg)}.")
                    flat_cts.extend(x.instantiate() if isinstance(x, SymbolicZero) else x
                                    for x in tree_flatten(c)[0])
            return flat_cts

        fwd_flat.__name__ = getattr(self.fwd, "__name__", "fwd")
        bwd_flat.__name__ = getattr(self.bwd, "__name__", "bwd")
        fwd_flat.optimize_remat = self.optimize_remat
        bwd_flat.symbolic_zeros = self.symbolic_zeros

        def run_rule(primals, tangents):  # (optimize_remat splits fwd beside the jaxpr)
            if not self.optimize_remat:
                return _custom_vjp_call_jvp(primals, tangents, None, fwd_flat, bwd_flat, 0)
            return None

        if not _has_tracer(nondiff):
            outs = _call_without_jaxpr(
                flat_args, functools.partial(self._run_fun, nondiff, in_tree, out_tree),
                run_rule, closure_differentiable=False)
            if outs is not None:
                return tree_unflatten(out_tree["tree"], outs)
        traced = self._trace(nondiff, flat_args, in_tree)
        out_tree["tree"] = traced.out_tree
        outs = custom_vjp_call_p.bind(*traced.consts, *flat_args, call_jaxpr=traced.jaxpr,
                                      fwd=fwd_flat, bwd=bwd_flat,
                                      num_consts=len(traced.consts))
        return tree_unflatten(out_tree["tree"], outs)


# --- optimize_remat: the primal output from the function itself when fwd's residuals die ----

remat_opt_p = Primitive("remat_opt")
remat_opt_p.multiple_results = True


def _remat_optimized_fwd(fwd, perturbed, consts, primals, call_jaxpr):
    """``fwd`` traced and bound as ``remat_opt`` beside the function's own jaxpr."""
    store = {}

    def flat(*xs):
        outs, res = fwd(list(xs[len(consts):]), perturbed)
        store["n_out"] = len(outs)
        return [*outs, *res]

    avals = [core.get_aval(x) for x in [*consts, *primals]]
    fwd_jaxpr = pe.trace_to_jaxpr(flat, avals, core.DebugInfo("fwd", [], "custom_vjp"))
    outs = remat_opt_p.bind(*consts, *primals, fwd_jaxpr=fwd_jaxpr, fun_jaxpr=call_jaxpr,
                            num_res=len(fwd_jaxpr.out_avals) - store["n_out"])
    n = store["n_out"]
    return outs[:n], outs[n:]


def _remat_opt_impl(*args, fwd_jaxpr, fun_jaxpr, num_res):
    return core.eval_jaxpr(fwd_jaxpr.jaxpr, fwd_jaxpr.consts, *args)


def _remat_opt_jvp(primals, tangents, fwd_jaxpr, fun_jaxpr, num_res):
    return ad.jvp_of_jaxpr_rule(fwd_jaxpr, primals, tangents)


def _remat_opt_batch(vals, dims, fwd_jaxpr, fun_jaxpr, num_res):
    size = batching.axis_size_of(vals, dims)
    vals = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
    batched = tuple(d is not None for d in dims)
    b_fwd, _ = batching.batch_jaxpr(fwd_jaxpr, size, batched, True)
    b_fun, _ = batching.batch_jaxpr(fun_jaxpr, size, batched, True)
    outs = remat_opt_p.bind(*vals, fwd_jaxpr=b_fwd, fun_jaxpr=b_fun, num_res=num_res)
    return outs, [0] * len(outs)


def _remat_opt_dce(used_outputs, eqn):
    """Where no residual is used (the forward pass of a checkpoint that recomputes them), the
    primal outputs come from the function's own jaxpr instead of ``fwd``."""
    num_res = eqn.params["num_res"]
    if any(used_outputs[len(used_outputs) - num_res:]):
        return [True] * len(eqn.invars), eqn
    n_out = len(used_outputs) - num_res
    fun = eqn.params["fun_jaxpr"]
    return [True] * len(eqn.invars), eqn.replace(
        primitive=jit_p, outvars=eqn.outvars[:n_out], params=dict(name="fun", jaxpr=fun))


remat_opt_p.def_impl(_remat_opt_impl)
remat_opt_p.def_abstract_eval(lambda *avals, fwd_jaxpr, **_: fwd_jaxpr.out_avals)
ad.primitive_jvps[remat_opt_p] = _remat_opt_jvp
batching.primitive_batchers[remat_opt_p] = _remat_opt_batch
pe.dce_rules[remat_opt_p] = _remat_opt_dce


# --- Refs handed to a custom derivative: its rules take them as they are; a pure program runs
# the call as a jit --------------------------------------------------------------------------

pe.ref_primitives.add(custom_lin_p)  # custom_vjp residuals may be Refs (plumbing)
discharge.rules_take_refs.update({custom_jvp_call_p, custom_vjp_call_p, custom_lin_p})
discharge.handle_refs(custom_jvp_call_p,
                      discharge.call_rule("call_jaxpr", rebind_as_jit, "custom_jvp"))
discharge.handle_refs(custom_vjp_call_p,
                      discharge.call_rule("call_jaxpr", rebind_as_jit, "custom_vjp"))
discharge.handle_refs(remat_opt_p, discharge.call_rule("fwd_jaxpr", rebind_as_jit, "custom_vjp"))


# --- closure conversion and custom_gradient ---------------------------------------------------


def closure_convert(fun, *example_args):
    """``(converted, consts)``: ``fun`` traced at the example arguments' types, with the values
    it closes over (traced ones included) hoisted out as ``consts``, so that
    ``converted(*args, *consts) == fun(*args)``. What a ``custom_vjp`` rule needs to close over
    a value being differentiated."""
    flat_args, in_tree = tree_flatten(example_args)
    store = {}

    def flat_fun(*leaves):
        out = fun(*tree_unflatten(in_tree, leaves))
        flat, store["tree"] = tree_flatten(out)
        return flat

    closed = pe.trace_to_jaxpr(flat_fun, [core.get_aval(x) for x in flat_args],
                               core.DebugInfo(fun_name(fun), [], "closure_convert"))
    jaxpr = pe.convert_constvars_jaxpr(closed.jaxpr)
    consts, out_tree, n_consts = list(closed.consts), store["tree"], len(closed.consts)

    def converted(*args):
        leaves, tree = tree_flatten(args[:len(args) - n_consts])
        if tree != in_tree:
            raise TypeError(f"closure-converted {fun_name(fun)} called with arguments of "
                            f"structure {tree}, traced for {in_tree}")
        outs = core.eval_jaxpr(jaxpr, [], *args[len(args) - n_consts:], *leaves)
        return tree_unflatten(out_tree, outs)

    return converted, consts


def custom_gradient(fun):
    """``fun(*args) -> (out, vjp)`` as a function whose reverse-mode derivative is ``vjp``
    (``vjp(out_ct)`` returns one cotangent per argument)."""

    @functools.wraps(fun)
    def wrapper(*args):
        rule = {}

        @custom_vjp
        def primal(*xs):
            return fun(*xs)[0]

        def fwd(*xs):
            out, vjp = fun(*xs)
            converted, consts = closure_convert(vjp, out)
            rule["vjp"] = converted
            return out, consts

        def bwd(consts, ct):
            cts = rule["vjp"](ct, *consts)
            return tuple(cts) if isinstance(cts, (tuple, list)) else (cts,)

        primal.defvjp(fwd, bwd)
        return primal(*args)

    return wrapper
