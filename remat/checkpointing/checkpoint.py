"""``checkpoint`` / ``remat``: rematerialization with saving policies, named values, residual
inspection, and offloading.

``checkpoint(fun)`` traces ``fun`` once per signature and binds ``checkpoint_p`` with the
jaxpr. Eagerly and under ``jvp``/``vmap`` it behaves like ``fun``. When it is partially
evaluated for reverse mode (``linearize``/``vjp``/``grad``), the policy decides which known
intermediates may be saved: the known side computes the primal outputs and only those
residuals; the staged side (a ``checkpoint`` equation marked ``differentiated``) recomputes
everything else the backward pass needs, and nothing more (DCE).
"""

import functools
import logging

import numpy as np

from remat import core, exec
from remat.api_util import (
    HashableByIdentity,
    TraceCache,
    abstractify,
    arg_names,
    flatten_fun,
    fun_name,
    fun_sourceinfo,
    static_argnums_from_names,
)
from remat.call import split_call_eqn
from remat.checkpointing import budget as budget_policy
from remat.checkpointing import policies as checkpoint_policies
from remat.checkpointing.policies import nothing_saveable
from remat.config import config
from remat.core import ClosedJaxpr, Literal, Primitive
from remat.errors import ConcretizationTypeError
from remat.interpreters import ad, batching, discharge
from remat.interpreters import partial_eval as pe
from remat.interpreters.partial_eval import Offloadable, Recompute, Saveable
from remat.lax.identity import name_p
from remat.offload import offload_p, staged_with_reloads
from remat.runtime import registry
from remat.tree_util import tree_flatten, tree_leaves, tree_map, tree_structure, tree_unflatten

logger = logging.getLogger("remat.checkpoint")

__all__ = ["checkpoint", "remat", "checkpoint_name", "checkpoint_policies", "saved_residuals",
           "print_saved_residuals", "checkpoint_p", "name_p", "Offloadable", "Recompute",
           "Saveable"]

# --- names -----------------------------------------------------------------------------------


def checkpoint_name(x, name):
    """Identity on the pytree ``x`` that tags its leaves with ``name`` for policies."""
    if not isinstance(name, str):
        raise TypeError(f"checkpoint_name expects a string name, got {name!r}")
    return tree_map(lambda leaf: name_p.bind(leaf, name=name), x)


# --- the primitive ---------------------------------------------------------------------------

checkpoint_p = Primitive("checkpoint")
checkpoint_p.multiple_results = True


def _checkpoint_impl(*args, jaxpr, prevent_cse, differentiated, policy):
    return exec.evaluate(jaxpr, *args)


def _checkpoint_abstract_eval(*avals, jaxpr, prevent_cse, differentiated, policy):
    return jaxpr.out_avals


checkpoint_p.def_impl(_checkpoint_impl)
checkpoint_p.def_abstract_eval(_checkpoint_abstract_eval)


def _extend_prevent_cse(prevent_cse, n_new, position=0):
    """``prevent_cse`` for a jaxpr with ``n_new`` extra inputs inserted at ``position``."""
    if isinstance(prevent_cse, bool):
        return prevent_cse
    return prevent_cse[:position] + (True,) * n_new + prevent_cse[position:]


def _checkpoint_jvp(primals, tangents, jaxpr, prevent_cse, differentiated, policy):
    nonzeros = tuple(type(t) is not ad.Zero for t in tangents)
    jvp_closed, out_nz = ad.jvp_jaxpr(jaxpr, nonzeros, False)
    jvp_closed, consts = pe.closed_call(jvp_closed)
    nz_tangents = [t for t in tangents if type(t) is not ad.Zero]
    cse = prevent_cse if isinstance(prevent_cse, bool) else \
        (True,) * len(consts) + tuple(prevent_cse) + tuple(
            p for p, nz in zip(prevent_cse, nonzeros) if nz)
    outs = checkpoint_p.bind(*consts, *primals, *nz_tangents, jaxpr=jvp_closed,
                             prevent_cse=cse, differentiated=differentiated, policy=policy)
    n = len(jaxpr.out_avals)
    it = iter(outs[n:])
    return outs[:n], [next(it) if nz else ad.Zero(a.to_tangent_aval())
                      for nz, a in zip(out_nz, jaxpr.out_avals)]


def _check_no_effects(jaxpr):
    for eqn in jaxpr.eqns:
        if pe.has_effects(eqn) and not getattr(eqn.primitive, "remat_replayable", False):
            raise NotImplementedError(
                f"Effects not supported in partial-eval of `checkpoint`/`remat`: the "
                f"checkpointed function performs '{eqn.primitive.name}', a side effect that "
                f"cannot be safely replayed when the backward pass recomputes the function. "
                f"Move the side effect outside the checkpointed function.")


def _checkpoint_partial_eval(trace, args, params):
    jaxpr, policy = params["jaxpr"], params["policy"] or nothing_saveable
    _check_no_effects(jaxpr.jaxpr)
    unknowns = [pe.is_unknown(trace, x) for x in args]
    split = pe.partial_eval_jaxpr_custom(jaxpr.jaxpr, unknowns, policy)
    known, staged, out_uk = split.known, split.staged, split.out_unknowns
    residuals, offloaded = split.residuals, split.offloaded
    known_args = [x for x, u in zip(args, unknowns) if not u]
    with core.set_current_trace(trace.parent):
        outs = core.eval_jaxpr(known, [], *known_args)
        n_known = len(outs) - len(residuals)
        res_vals = [offload_p.bind(r) if off else r
                    for r, off in zip(outs[n_known:], offloaded)]
    level = logging.WARNING if config.log_checkpoint_residuals else logging.DEBUG
    if logger.isEnabledFor(level):  # as JAX: DEBUG always, WARNING with the flag on
        _log_residuals(level, jaxpr.jaxpr, known, residuals, n_known, offloaded)
    staged = staged_with_reloads(staged, offloaded)
    prevent_cse = params["prevent_cse"]
    if not isinstance(prevent_cse, bool):
        prevent_cse = (True,) * len(residuals) + tuple(
            p for p, u in zip(prevent_cse, unknowns) if u)
    staged_params = dict(params, jaxpr=ClosedJaxpr(staged, []), prevent_cse=prevent_cse,
                         differentiated=True)
    unknown_args = [x for x, u in zip(args, unknowns) if u]
    staged_outs = trace.stage_with_residuals(checkpoint_p, [*res_vals, *unknown_args],
                                             staged_params)
    k, s = iter(outs[:n_known]), iter(staged_outs)
    return [next(s) if u else next(k) for u in out_uk]


def _log_residuals(level, jaxpr, known, residuals, n_known, offloaded):
    inputs = [r for r in residuals if r in set(jaxpr.invars)]
    producers = {v: eqn for eqn in known.eqns for v in eqn.outvars}
    lines = []
    if inputs:
        lines.append("saving inputs with shapes:")
        lines += [f"  {r.aval.str_short()}" for r in inputs]
    inner = [(r, off) for r, off in zip(residuals, offloaded) if r not in set(jaxpr.invars)]
    if inner:
        lines.append(("and " if inputs else "") + "saving these intermediates:")
        for r, off in inner:
            where = " (offloaded)" if off else ""
            lines.append(f"  {r.aval.str_short()} from {_describe_eqn(producers.get(r))}"
                         f"{where}")
    logger.log(level, "remat-decorated function %s", "\n".join(lines) or "saving nothing")


def _checkpoint_transpose(cts, *args, jaxpr, prevent_cse, differentiated, policy):
    linear = tuple(ad.is_undefined_primal(x) for x in args)
    nz_cts = tuple(type(c) is not ad.Zero for c in cts)
    t_closed = ad.transpose_jaxpr(jaxpr, linear, nz_cts)
    t_closed, consts = pe.closed_call(t_closed)
    res = [x for x, lin in zip(args, linear) if not lin]
    nz = [c for c in cts if type(c) is not ad.Zero]
    cse = prevent_cse if isinstance(prevent_cse, bool) else \
        (True,) * len(consts) + tuple(p for p, lin in zip(prevent_cse, linear) if not lin) + \
        (False,) * len(nz)
    outs = iter(checkpoint_p.bind(*consts, *res, *nz, jaxpr=t_closed, prevent_cse=cse,
                                  differentiated=True, policy=policy))
    return [next(outs) if lin else None for lin in linear]


def _checkpoint_batch(vals, dims, jaxpr, prevent_cse, differentiated, policy):
    size = batching.axis_size_of(vals, dims)
    vals = [v if d is None else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
    batched = tuple(d is not None for d in dims)
    b_closed, out_b = batching.batch_jaxpr(jaxpr, size, batched, False)
    b_closed, consts = pe.closed_call(b_closed)
    cse = _extend_prevent_cse(prevent_cse, len(consts))
    outs = checkpoint_p.bind(*consts, *vals, jaxpr=b_closed, prevent_cse=cse,
                             differentiated=differentiated, policy=policy)
    return outs, [0 if b else None for b in out_b]


def _checkpoint_dce(used_outputs, eqn):
    closed = eqn.params["jaxpr"]
    new, used_inputs = pe.dce_jaxpr(closed.jaxpr, used_outputs, prune_inputs=True)
    cse = eqn.params["prevent_cse"]
    if not isinstance(cse, bool):
        cse = tuple(p for p, u in zip(cse, used_inputs) if u)
    new_eqn = eqn.replace(invars=[v for v, u in zip(eqn.invars, used_inputs) if u],
                          outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
                          params=dict(eqn.params, jaxpr=ClosedJaxpr(new, []),
                                      prevent_cse=cse))
    return used_inputs, new_eqn


def _checkpoint_pe_custom(eqn, unknowns, policy, unsaveable):
    """A checkpoint nested in a checkpoint (or jit) being split: split it in place, with a
    value saveable only if both policies allow it."""
    params = eqn.params
    combined = checkpoint_policies.both(policy, params["policy"] or nothing_saveable)
    split = pe.partial_eval_jaxpr_custom(params["jaxpr"].jaxpr, unknowns, combined,
                                         stage_known_outputs=True)
    return split_call_eqn(eqn, unknowns, split, checkpoint_p,
                          dict(params, differentiated=False),
                          dict(params, differentiated=True))


ad.primitive_jvps[checkpoint_p] = _checkpoint_jvp
ad.primitive_transposes[checkpoint_p] = _checkpoint_transpose
pe.partial_eval_rules[checkpoint_p] = _checkpoint_partial_eval
batching.primitive_batchers[checkpoint_p] = _checkpoint_batch
pe.dce_rules[checkpoint_p] = _checkpoint_dce
pe.partial_eval_jaxpr_custom_rules[checkpoint_p] = _checkpoint_pe_custom


# --- Refs handed to a checkpoint -----------------------------------------------------------


def _rebind_checkpoint(eqn, new_call, consts, operands):
    p = eqn.params
    cse = p["prevent_cse"]
    if not isinstance(cse, bool):
        cse = (True,) * len(consts) + tuple(cse) + (True,) * (
            len(operands) - len(cse))
    return checkpoint_p.bind(*consts, *operands, jaxpr=new_call, prevent_cse=cse,
                             differentiated=p["differentiated"], policy=p["policy"])


def _checkpoint_pe_with_refs(rule):
    """Before a checkpoint is split into saved and recomputed parts, its Refs are discharged
    (except those a custom derivative rule needs): the contents of those it is handed are read
    on entry and written back on exit, once, on the forward pass. What it saves is then
    values, and a recomputed read sees the contents it saw the first time."""
    def pe_rule(trace, args, params):
        jaxpr = params["jaxpr"]
        if not discharge.has_state(jaxpr):
            return rule(trace, args, params)
        keep = discharge.plumbing_inputs(jaxpr)
        mask = tuple(not k for k in keep)
        d = discharge.discharge_state(jaxpr, mask)
        body, consts = pe.closed_call(d.closed)
        refs = [args[i] for i in d.ref_inputs]
        ins = [discharge.ref_contents(r) for r in d.found] + [
            discharge.ref_contents(a) if i in d.ref_inputs else a for i, a in enumerate(args)]
        cse = params["prevent_cse"]
        if not isinstance(cse, bool):
            cse = (True,) * (len(consts) + len(d.found)) + tuple(cse)
        outs = rule(trace, [*consts, *ins], dict(params, jaxpr=body, prevent_cse=cse))
        n_out = len(jaxpr.out_avals)
        for r, final, written in zip(refs + list(d.found), outs[n_out:], d.written):
            if written:
                discharge.write_back(r, final)
        return outs[:n_out]

    return pe_rule


discharge.handle_refs(
    checkpoint_p, discharge.call_rule("jaxpr", _rebind_checkpoint, "checkpoint / remat"),
    pe_rule=_checkpoint_pe_with_refs)



def _checkpoint_inline(eqn):
    """Under jit the executor flattens checkpoints; a differentiated one (the backward pass's
    recomputation) first passes the inputs ``prevent_cse`` selects through a barrier."""
    p = eqn.params
    if not p["differentiated"] or p["prevent_cse"] is False:
        return p["jaxpr"], None
    flags = p["prevent_cse"]
    return p["jaxpr"], [True] * len(eqn.invars) if flags is True else list(flags)


registry.inline_rules[checkpoint_p] = _checkpoint_inline


# --- the user API ----------------------------------------------------------------------------

_CONCRETE_MESSAGE = """The 'concrete' option to remat.checkpoint / remat.remat is deprecated; in \
its place, you can use its `static_argnums` option, and if necessary the \
`remat.ensure_compile_time_eval()` context manager.

For example, if using `concrete=True` for an `is_training` flag:

  from functools import partial

  @partial(remat.checkpoint, concrete=True)
  def foo(x, is_training):
    if is_training:
      return f(x)
    else:
      return g(x)

replace it with a use of `static_argnums`:

  @partial(remat.checkpoint, static_argnums=(1,))
  def foo(x, is_training):
    ...

If remat.numpy operations need to be performed on static arguments, we can use the \
`remat.ensure_compile_time_eval()` context manager. For example, we can replace this use of \
`concrete=True`:

  @partial(remat.checkpoint, concrete=True)
  def foo(x, y):
    if y > 0:
      return f(x)
    else:
      return g(x)

with this combination of `static_argnums` and `remat.ensure_compile_time_eval()`:

  @partial(remat.checkpoint, static_argnums=(1,))
  def foo(x, y):
    with remat.ensure_compile_time_eval():
      y_pos = y > 0
    if y_pos:
      return f(x)
    else:
      return g(x)

See https://jax.readthedocs.io/en/latest/jep/11830-new-remat-checkpoint.html"""

_STATIC_HINT = ("Consider using the `static_argnums` parameter for `remat.remat` or "
                "`remat.checkpoint`. See the `remat.checkpoint` docstring and its example "
                "involving `static_argnums`.")


class _StaticArg:
    """A static argument as a cache key: by value when hashable, else by identity."""

    __slots__ = ("val", "key")

    def __init__(self, val):
        self.val = val
        try:
            hash(val)
            self.key = val
        except TypeError:
            self.key = HashableByIdentity(val)

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, _StaticArg) and self.key == other.key


def _validate_static_argnums(static_argnums, nargs):
    if type(static_argnums) is int:
        static_argnums = (static_argnums,)
    elif not (type(static_argnums) is tuple and all(type(d) is int for d in static_argnums)):
        raise TypeError("the `static_argnums` argument to `checkpoint` / `remat` must be an "
                        f"int, tuple of ints or, bool, but got value {static_argnums}")
    if not all(-nargs <= d < nargs for d in static_argnums):
        raise ValueError("the `static_argnums` argument to `checkpoint` / `remat` can only "
                         "take integer values greater than or equal to `-len(args)` and less "
                         f"than `len(args)`, but got {static_argnums}")
    return frozenset(d % nargs for d in static_argnums)


def _prevent_cse_flags(prevent_cse, dyn_args, kwargs):
    """``prevent_cse`` as a bool, or one bool per flat input from a pytree prefix."""
    if isinstance(prevent_cse, bool):
        return prevent_cse
    prefix = tuple(prevent_cse) if isinstance(prevent_cse, list) else prevent_cse
    if not isinstance(prefix, tuple) or len(prefix) != len(dyn_args):
        raise ValueError(f"checkpoint prevent_cse must be a bool or a tuple with one entry "
                         f"(a bool or a pytree prefix of bools) per positional argument; got "
                         f"{prevent_cse!r} for {len(dyn_args)} arguments")
    flags = []
    for p, arg in zip(prefix, dyn_args):
        leaves = tree_leaves(arg)
        if isinstance(p, bool):
            flags += [p] * len(leaves)
        else:
            sub = tree_structure(p).flatten_up_to(arg)
            for flag, subtree in zip(tree_leaves(p), sub):
                flags += [bool(flag)] * len(tree_leaves(subtree))
    flags += [True] * len(tree_leaves(kwargs))
    return tuple(flags)


class _Checkpointed:
    """A checkpointed function: traced once per (static args, input tree and avals)."""

    def __init__(self, fun, prevent_cse, policy, static_argnums, static_argnames):
        functools.update_wrapper(self, fun, updated=())  # not fun's __dict__
        self.fun = fun
        self.prevent_cse = prevent_cse
        self.policy = policy
        self.static_argnums = static_argnums
        self.static_argnames = tuple(static_argnames)
        self.cache = TraceCache()
        self.trace_count = 0

    def _trace(self, dyn_fun, in_tree, avals, names):
        flat_fun, store = flatten_fun(dyn_fun, in_tree)
        debug = core.DebugInfo(fun_name(self.fun), names, "checkpoint / remat",
                               fun_sourceinfo(self.fun))
        self.trace_count += 1
        try:
            closed = pe.trace_to_jaxpr(flat_fun, avals, debug)
        except ConcretizationTypeError as e:
            if _STATIC_HINT not in str(e):
                e.args = (str(e) + "\n\n" + _STATIC_HINT,) + e.args[1:]
            raise
        jaxpr, consts = pe.closed_call(closed)
        return jaxpr, consts, store.tree

    def __call__(self, *args, **kwargs):
        nums = set()
        if self.static_argnums != ():
            nums = set(_validate_static_argnums(self.static_argnums, len(args)))
        nums |= {i for i in static_argnums_from_names(self.fun, self.static_argnames)
                 if i < len(args)}
        static_kw = {k: v for k, v in kwargs.items() if k in self.static_argnames}
        kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        dyn_args = tuple(a for i, a in enumerate(args) if i not in nums)
        statics = tuple(_StaticArg(args[i]) for i in sorted(nums))
        static_kw_key = tuple(sorted((k, _StaticArg(v)) for k, v in static_kw.items()))

        def dyn_fun(*dyn, **kw):
            it = iter(dyn)
            full = [args[i] if i in nums else next(it) for i in range(len(args))]
            return self.fun(*full, **kw, **static_kw)

        flat_args, in_tree = tree_flatten((dyn_args, kwargs))
        names = arg_names(self.fun, args, kwargs, nums)
        avals = tuple(abstractify(x, n) for x, n in zip(flat_args, names))
        key = (statics, static_kw_key, in_tree, avals, config.trace_context())
        entry = self.cache.get(key)
        if entry is None:
            entry = self._trace(dyn_fun, in_tree, list(avals), names)
            if not any(isinstance(c, core.Tracer) for c in entry[1]):
                self.cache[key] = entry
        jaxpr, consts, out_tree = entry
        cse = _prevent_cse_flags(self.prevent_cse, dyn_args, kwargs)
        if not isinstance(cse, bool):
            cse = (True,) * len(consts) + cse
        outs = checkpoint_p.bind(*consts, *map(_lifted, flat_args, avals), jaxpr=jaxpr,
                                 prevent_cse=cse, differentiated=False, policy=self.policy)
        return tree_unflatten(out_tree, outs)


def _lifted(x, aval):
    """A Python scalar argument as the weakly typed Array its aval describes: one the
    checkpoint forwards to an output is then an Array wherever it comes back (a linearized
    checkpoint's known outputs are its known inputs, as given), as in JAX."""
    if type(x) in (bool, int, float, complex):
        return core.make_array(np.asarray(x, aval.dtype), aval)
    return x


def checkpoint(fun=None, *, prevent_cse=True, policy=None, static_argnums=(),
               static_argnames=(), concrete=False):
    """Make ``fun`` recompute its internal linearization points when differentiated: only its
    inputs (and what ``policy`` allows) are saved for the backward pass."""
    if concrete:
        raise NotImplementedError(_CONCRETE_MESSAGE)
    if fun is None:
        return functools.partial(checkpoint, prevent_cse=prevent_cse, policy=policy,
                                 static_argnums=static_argnums,
                                 static_argnames=static_argnames)
    if not callable(fun):
        raise TypeError(f"checkpoint expects a callable, got {fun!r}")
    if policy is not None and not callable(policy):
        raise TypeError(f"checkpoint policy must be a callable "
                        f"policy(prim, *avals, **params) -> bool, got {policy!r}")
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    return _Checkpointed(fun, prevent_cse, policy, static_argnums, static_argnames)


remat = checkpoint


# --- seeing what is saved --------------------------------------------------------------------


def _describe_eqn(eqn):
    if eqn is None:
        return "unknown"
    src = "unknown" if eqn.source_info is None else str(eqn.source_info)
    return f"{eqn.primitive.name} from {src}"


def saved_residuals(f, *args, **kwargs):
    """``[(aval, description)]`` of the values ``grad``/``vjp`` of ``f`` would save."""
    return _residuals_and_choices(f, args, kwargs)[0]


def _residuals_and_choices(f, args, kwargs):
    """The residual descriptions, and what memory budgets chose on the way (a value a budget
    saved says so, with its bytes and recompute cost)."""
    flat_args, in_tree = tree_flatten((args, kwargs))
    names = arg_names(f, args, kwargs)

    def residuals_of(*leaves):
        flat_f, _ = flatten_fun(f, in_tree)
        _, linear, _ = ad.linearize_flat(flat_f, list(leaves))
        return list(linear.consts)

    avals = [abstractify(x, n) for x, n in zip(flat_args, names)]
    with budget_policy.recording() as choices:
        jaxpr = pe.trace_to_jaxpr(residuals_of, avals, core.DebugInfo(
            fun_name(f), names, "saved_residuals")).jaxpr
    residuals = _describe_residuals(jaxpr, names)
    by_budget = {}
    for choice in choices:
        for eqn, size, cost in getattr(choice, "saved", ()):
            for v in eqn.outvars:
                by_budget[(v.aval.str_short(), eqn.primitive.name, str(eqn.source_info))] = \
                    f" (chosen by {choice.policy!r}: {size} bytes, recompute cost {cost:.4g})"
    described = []
    for aval, src in residuals:
        match = next((why for (a, prim, where), why in by_budget.items()
                      if a == aval.str_short() and src.endswith(where)
                      and f"of {prim} from" in src), "")
        described.append((aval, src + match))
    return described, choices


def _describe_residuals(jaxpr, names):
    res_vars = {v for v in jaxpr.outvars if type(v) is not Literal}
    results = [(v.aval, "from a literal") for v in jaxpr.outvars if type(v) is Literal]
    results += [(v.aval, "from a constant") for v in jaxpr.constvars if v in res_vars]
    results += [(v.aval, f"from the argument {n}") for v, n in zip(jaxpr.invars, names)
                if v in res_vars]
    for eqn in jaxpr.eqns:
        src = "unknown" if eqn.source_info is None else str(eqn.source_info)
        for v in eqn.outvars:
            if v not in res_vars:
                continue
            if eqn.primitive is name_p:
                results.append((v.aval, f"named '{eqn.params['name']}' from {src}"))
            elif eqn.primitive.name == "jit":
                inner = eqn.params["jaxpr"].jaxpr
                inner_v = inner.outvars[eqn.outvars.index(v)]
                producer = next((e for e in inner.eqns if inner_v in e.outvars), None)
                if producer is not None and producer.primitive is offload_p:
                    results.append((v.aval, f"offloaded {_offload_source(inner, producer)}"))
                else:
                    results.append((v.aval, f"output of jitted function "
                                            f"'{eqn.params['name']}' from {src}"))
            elif eqn.primitive is offload_p:
                results.append((v.aval, f"offloaded {_offload_source(jaxpr, eqn)}"))
            else:
                producer = _producer_inside(eqn, eqn.outvars.index(v))
                if producer.primitive is name_p:
                    results.append((v.aval, f"named '{producer.params['name']}' from "
                                            f"{producer.source_info}"))
                else:
                    results.append((v.aval, f"output of {_describe_eqn(producer)}"))
    return results


def _producer_inside(eqn, index):
    """The equation inside a scan, cond or nested checkpoint that computes its output
    ``index`` (a residual the policy saved inside), or ``eqn`` itself. Of a cond's branches,
    the first that computes it (the others pad the slot with zeros)."""
    if eqn.primitive.name in ("scan", "checkpoint", "jit"):
        bodies = [eqn.params["jaxpr"].jaxpr]
    elif eqn.primitive.name == "cond":
        bodies = [b.jaxpr for b in eqn.params["branches"]]
    else:
        return eqn
    for body in bodies:
        inner_v = body.outvars[index]
        producer = next((e for e in body.eqns if inner_v in e.outvars), None)
        if producer is None or _is_padding(producer):
            continue
        return _producer_inside(producer, producer.outvars.index(inner_v))
    return eqn


def _is_padding(eqn):
    """A broadcast literal zero: how a cond's branch fills the residual slots of others."""
    return (eqn.primitive.name == "broadcast_in_dim" and type(eqn.invars[0]) is Literal
            and eqn.invars[0].val == 0)


def _offload_source(jaxpr, offload_eqn):
    src = offload_eqn.invars[0]
    for eqn in jaxpr.eqns:
        if src in eqn.outvars:
            if eqn.primitive is name_p:
                return f"named '{eqn.params['name']}' from {eqn.source_info}"
            return f"output of {_describe_eqn(eqn)}"
    return "value"


def print_saved_residuals(f, *args, **kwargs):
    """Print what ``grad``/``vjp`` of ``f`` would save, one value per line, then the total."""
    residuals, choices = _residuals_and_choices(f, args, kwargs)
    total = 0
    for aval, src in residuals:
        print(f"{aval.str_short()} {src}")
        if not src.startswith("offloaded"):
            total += aval.nbytes
    offloaded = sum(a.nbytes for a, s in residuals if s.startswith("offloaded"))
    extra = f" (+{offloaded} bytes offloaded)" if offloaded else ""
    print(f"total: {total} bytes saved in {len(residuals)} residuals{extra}")
    for choice in dict.fromkeys(choices):  # what each memory budget chose, and why
        print(choice.format())
