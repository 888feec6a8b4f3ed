"""``jit``: the call primitive ``jit_p`` (a staged sub-jaxpr) with its rules, and the user
wrapper that traces once per (function, static arguments, input avals and tree)."""

import functools
import gc
import logging
import sys
import time
import weakref

import numpy as np

from remat import core, dtypes, exec, memory, stages
from remat.api_util import (
    TraceCache,
    abstract_leaves,
    arg_names,
    argnums_in_bounds,
    check_callable,
    flatten_fun,
    fun_name,
    fun_sourceinfo,
    hashable_static,
    resolve_jit_argnums,
    split_static,
)
from remat.array import Array
from remat.config import config
from remat.core import ClosedJaxpr, Jaxpr, JaxprEqn, Primitive, Tracer, Var
from remat.interpreters import ad, batching
from remat.interpreters import partial_eval as pe
from remat.offload import offload_p, staged_with_reloads
from remat.runtime import registry
from remat.tree_util import tree_flatten, tree_unflatten

jit_p = Primitive("jit")
jit_p.multiple_results = True


def _jit_impl(*args, name, jaxpr):
    return exec.evaluate(jaxpr, *args)


def _jit_abstract_eval(*avals, jaxpr, name):
    return jaxpr.out_avals


jit_p.def_impl(_jit_impl)
jit_p.def_abstract_eval(_jit_abstract_eval)


def closed_call(jaxpr):
    """A const-free ClosedJaxpr for a ``jit_p`` param (consts become leading inputs)."""
    if not jaxpr.consts:
        return jaxpr, []
    return ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr.jaxpr), []), list(jaxpr.consts)


def _jit_jvp(primals, tangents, jaxpr, name):
    nonzeros = tuple(type(t) is not ad.Zero for t in tangents)
    jvp_closed, out_nonzeros = ad.jvp_jaxpr(jaxpr, nonzeros, False)
    jvp_closed, consts = closed_call(jvp_closed)
    outs = jit_p.bind(*consts, *primals, *[t for t in tangents if type(t) is not ad.Zero],
                      name=name, jaxpr=jvp_closed)
    n = len(jaxpr.out_avals)
    primal_out, nz_tangents = outs[:n], iter(outs[n:])
    tangent_out = [next(nz_tangents) if nz else ad.Zero(a.to_tangent_aval())
                   for nz, a in zip(out_nonzeros, jaxpr.out_avals)]
    return primal_out, tangent_out


def _jit_partial_eval(trace, args, params):
    jaxpr, name = params["jaxpr"], params["name"]
    unknowns = tuple(pe.is_unknown(trace, x) for x in args)
    known, unknown, out_unknowns, num_res = pe.partial_eval_jaxpr_nounits(jaxpr, unknowns,
                                                                          False)
    known_args = [x for x, u in zip(args, unknowns) if not u]
    known, forwarded = _forward_input_residuals(known, num_res)
    known, known_consts = closed_call(known)
    with core.set_current_trace(trace.parent):
        known_outs = jit_p.bind(*known_consts, *known_args, name=name, jaxpr=known)
    n_known = len(known_outs) - (num_res - sum(f is not None for f in forwarded))
    computed = iter(known_outs[n_known:])
    residuals = [known_args[f] if f is not None else next(computed) for f in forwarded]
    unknown_outs = trace.stage_with_residuals(
        jit_p, [*residuals, *[x for x, u in zip(args, unknowns) if u]],
        dict(name=name, jaxpr=unknown))
    known_iter, unknown_iter = iter(known_outs[:n_known]), iter(unknown_outs)
    return [next(unknown_iter) if u else next(known_iter) for u in out_unknowns]


def _forward_input_residuals(known, num_res):
    """Residuals that are just inputs of the known jaxpr are passed along directly instead
    of being returned by it. Returns the trimmed jaxpr and, per residual, the index of the
    known input it is (or None)."""
    j = known.jaxpr
    n_out = len(j.outvars) - num_res
    position = {v: i for i, v in enumerate(j.invars)}
    forwarded = [position.get(v) if type(v) is Var else None for v in j.outvars[n_out:]]
    if not any(f is not None for f in forwarded):
        return known, forwarded
    keep = [True] * n_out + [f is None for f in forwarded]
    trimmed, _ = pe.dce_closed_jaxpr(known, keep)
    return trimmed, forwarded


def _jit_transpose(cts, *args, jaxpr, name):
    linear = tuple(ad.is_undefined_primal(x) for x in args)
    nonzero_cts = tuple(type(c) is not ad.Zero for c in cts)
    t_closed = ad.transpose_jaxpr(jaxpr, linear, nonzero_cts)
    t_closed, consts = closed_call(t_closed)
    res = [x for x, lin in zip(args, linear) if not lin]
    outs = iter(jit_p.bind(*consts, *res, *[c for c in cts if type(c) is not ad.Zero],
                           name=f"transpose({name})", jaxpr=t_closed))
    return [next(outs) if lin else None for lin in linear]


def _jit_batch(vals, dims, jaxpr, name):
    size = batching.axis_size_of(vals, dims)
    vals = [v if d is batching.not_mapped else batching.moveaxis(v, d, 0)
            for v, d in zip(vals, dims)]
    batched = tuple(d is not batching.not_mapped for d in dims)
    b_closed, out_batched = batching.batch_jaxpr(jaxpr, size, batched, False)
    b_closed, consts = closed_call(b_closed)
    outs = jit_p.bind(*consts, *vals, name=name, jaxpr=b_closed)
    return outs, [0 if b else batching.not_mapped for b in out_batched]


def _jit_dce(used_outputs, eqn):
    closed = eqn.params["jaxpr"]
    new_jaxpr, used_inputs = pe.dce_jaxpr(closed.jaxpr, used_outputs, prune_inputs=True)
    if not new_jaxpr.eqns and not any(used_outputs):
        return used_inputs, None
    live = set(new_jaxpr.constvars)
    consts = [c for v, c in zip(closed.jaxpr.constvars, closed.consts) if v in live]
    new_params = dict(eqn.params, jaxpr=ClosedJaxpr(new_jaxpr, consts))
    new_eqn = eqn.replace(
        invars=[v for v, u in zip(eqn.invars, used_inputs) if u],
        outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
        params=new_params)
    return used_inputs, new_eqn


def _jit_pe_custom(eqn, unknowns, policy, unsaveable):
    """A jit inside a checkpoint being split: split its jaxpr with the same policy."""
    if eqn.params["jaxpr"].consts:
        return recompute_whole_rule(eqn, unknowns, policy, unsaveable)
    split = pe.partial_eval_jaxpr_custom(eqn.params["jaxpr"].jaxpr, unknowns, policy,
                                         stage_known_outputs=True)
    params = dict(name=eqn.params["name"])
    return split_call_eqn(eqn, unknowns, split, jit_p, params, dict(params))


def split_call_eqn(eqn, unknowns, split, primitive, known_params, staged_params):
    """The known and staged equations of a call-like equation whose jaxpr was split by
    ``partial_eval_jaxpr_custom``: residuals that are the call's own inputs are read
    directly; the others become new outputs of the known equation."""
    inner = eqn.params["jaxpr"].jaxpr
    outer_of = dict(zip(inner.invars, eqn.invars))
    res_outer = [outer_of.get(r) or Var(r.aval) for r in split.residuals]
    computed = [i for i, r in enumerate(split.residuals) if r not in outer_of]
    n_known = len(split.known.outvars) - len(split.residuals)
    res_out, offloads = [], []
    for i in computed:  # offloaded residuals leave the known side already in host memory
        v = split.known.outvars[n_known + i]
        if split.offloaded[i]:
            host = Var(v.aval)
            offloads.append(JaxprEqn([v], [host], offload_p, {}, eqn.source_info))
            v = host
        res_out.append(v)
    known = Jaxpr([], split.known.invars, split.known.outvars[:n_known] + res_out,
                  split.known.eqns + offloads)
    new_res = [res_outer[i] for i in computed]
    for params in (known_params, staged_params):
        if not isinstance(params.get("prevent_cse", True), bool):
            params["prevent_cse"] = True
    eqn_known = JaxprEqn([v for v, u in zip(eqn.invars, unknowns) if not u],
                         [v for v, u in zip(eqn.outvars, split.out_unknowns) if not u] + new_res,
                         primitive, dict(known_params, jaxpr=ClosedJaxpr(known, [])),
                         eqn.source_info)
    staged = staged_with_reloads(split.staged, split.offloaded)
    eqn_staged = JaxprEqn(res_outer + [v for v, u in zip(eqn.invars, unknowns) if u],
                          [v for v, st in zip(eqn.outvars, split.out_staged) if st], primitive,
                          dict(staged_params, jaxpr=ClosedJaxpr(staged, [])), eqn.source_info)
    return eqn_known, eqn_staged, split.out_unknowns, split.out_staged, new_res


def recompute_whole_rule(eqn, unknowns, policy, unsaveable):
    """For a primitive with sub-jaxprs inside a checkpoint: the known outputs come from the
    known half of a known/unknown split (its residuals dropped); the staged side reruns the
    whole equation, so nothing inside it is saved."""
    in_vars = [Var(v.aval) for v in eqn.invars]
    inner = eqn.replace(invars=[nv if type(v) is Var else v
                                for v, nv in zip(eqn.invars, in_vars)])
    single = ClosedJaxpr(Jaxpr([], in_vars, inner.outvars, [inner]), [])
    known, _, out_uk, num_res = pe.partial_eval_jaxpr_nounits(single, tuple(unknowns), False)
    n_known_out = len(known.out_avals) - num_res
    known, _ = pe.dce_closed_jaxpr(known, [True] * n_known_out + [False] * num_res)
    eqn_known = JaxprEqn([v for v, u in zip(eqn.invars, unknowns) if not u],
                         [v for v, u in zip(eqn.outvars, out_uk) if not u], jit_p,
                         dict(name=eqn.primitive.name, jaxpr=known), eqn.source_info)
    return eqn_known, eqn, out_uk, [True] * len(eqn.outvars), []


ad.primitive_jvps[jit_p] = _jit_jvp
ad.primitive_transposes[jit_p] = _jit_transpose
pe.partial_eval_rules[jit_p] = _jit_partial_eval
batching.primitive_batchers[jit_p] = _jit_batch
pe.dce_rules[jit_p] = _jit_dce
pe.partial_eval_jaxpr_custom_rules[jit_p] = _jit_pe_custom
registry.inline_rules[jit_p] = lambda eqn: (
    None if eqn.params["jaxpr"].consts else (eqn.params["jaxpr"], None))


# --- the user wrapper ------------------------------------------------------------------------


class _Traces:
    """The traces of one function under one jit configuration. Shared by every ``jit`` of
    that function with that configuration: as JAX, the cache is keyed on the function (held
    weakly) and its static configuration, not on the wrapper, so ``jit(f)(x); jit(f)(y)``
    traces ``f`` once."""

    __slots__ = ("cache", "count", "__weakref__")

    def __init__(self):
        self.cache = TraceCache()
        self.count = 0


_traces_by_fun = weakref.WeakKeyDictionary()  # fun -> {jit configuration: _Traces}


def _traces_for(fun, configuration):
    try:
        per_fun = _traces_by_fun.get(fun)
        if per_fun is None:
            per_fun = _traces_by_fun[fun] = {}
    except TypeError:  # not weakly referenceable, or unhashable: the wrapper's own cache
        return _Traces()
    traces = per_fun.get(configuration)
    if traces is None:
        traces = per_fun[configuration] = _Traces()
    return traces


logger = logging.getLogger("remat.jit")


class JittedFunction:
    """``jit(fun)``: traces ``fun`` once per signature and runs the staged jaxpr through the
    executor; nests inside every transformation through ``jit_p``'s rules. ``trace``,
    ``lower`` and ``eval_shape`` give the stages of JAX's ahead-of-time API."""

    def __init__(self, fun, static_argnums, static_argnames, donate_argnums, keep_unused=False,
                 inline=False):
        self.fun = fun
        self.static_argnums, self.static_argnames, self.donate_argnums = resolve_jit_argnums(
            fun, static_argnums, static_argnames, donate_argnums)
        self._traces = _traces_for(fun, (self.static_argnums, self.static_argnames,
                                         self.donate_argnums, bool(keep_unused), bool(inline)))
        functools.update_wrapper(self, fun, updated=())  # not fun's __dict__

    cache = property(lambda self: self._traces.cache, doc="The traces, by signature.")
    trace_count = property(lambda self: self._traces.count,
                           doc="How many times the function has been traced.")

    def _static(self, args, kwargs):
        nums = set(argnums_in_bounds(self.static_argnums, len(args)))
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        static_kwargs = {k: v for k, v in kwargs.items() if k in self.static_argnames}
        return tuple(sorted(nums)), dyn_kwargs, static_kwargs

    def _entry(self, args, kwargs):
        """``((closed, call_jaxpr, consts, out_tree, in_tree), flat dynamic args)``: the
        trace for these arguments, from the cache or traced now."""
        static, dyn_kwargs, static_kwargs = self._static(args, kwargs)
        key_static = (tuple(hashable_static(args[i], f"(index {i})", self.fun) for i in static),
                      tuple(sorted((k, hashable_static(v, repr(k), self.fun))
                                   for k, v in static_kwargs.items())))
        dyn_args, dyn_fun = split_static(self.fun, args, static)
        if static_kwargs:
            dyn_fun = functools.partial(dyn_fun, **static_kwargs)
        flat_args, in_tree = tree_flatten((dyn_args, dyn_kwargs))
        names_of = functools.partial(arg_names, self.fun, args, dyn_kwargs, static)
        avals = abstract_leaves(flat_args, names_of)
        key = (key_static, in_tree, avals, config.trace_context())
        entry = self._traces.cache.get(key)
        if entry is None:
            names = names_of()
            self._check_tracing_allowed(key, names)
            flat_fun, store = flatten_fun(dyn_fun, in_tree)
            debug = core.DebugInfo(fun_name(self.fun), names, "jit", fun_sourceinfo(self.fun))
            self._traces.count += 1
            start = time.perf_counter()
            closed = pe.trace_to_jaxpr(flat_fun, avals, debug)
            if config.log_compiles:
                logger.warning("Finished tracing %s for jit in %.6g sec", fun_name(self.fun),
                               time.perf_counter() - start)
            call_jaxpr, consts = closed_call(closed)
            entry = (closed, call_jaxpr, consts, store.tree, in_tree)
            if not any(isinstance(c, Tracer) for c in consts):
                self._traces.cache[key] = entry  # closures over tracers are traced afresh
        return entry, flat_args

    def _check_tracing_allowed(self, key, names):
        name = fun_name(self.fun)
        if config.no_tracing:
            where = fun_sourceinfo(self.fun)
            raise RuntimeError(f"re-tracing function {name}{' at ' + where if where else ''} "
                               f"for `jit`, but 'no_tracing' is set")
        if config.explain_cache_misses:
            logger.warning("%s", _explain_miss(name, fun_sourceinfo(self.fun), key, names,
                                               self._traces.cache.keys()))

    def __call__(self, *args, **kwargs):
        if config.disable_jit:
            return self.fun(*args, **kwargs)
        (_, call_jaxpr, consts, out_tree, _), flat_args = self._entry(args, kwargs)
        outs = self._execute(call_jaxpr, consts, flat_args, self._donated_leaves(args, kwargs))
        return tree_unflatten(out_tree, outs)

    def _execute(self, call_jaxpr, consts, flat_args, donated):
        """The staged call on the flat dynamic arguments: run now by the executor (with the
        donated buffers handed over) or, under a transformation, bound as ``jit_p``."""
        checks = config.no_execution or config.debug_nans or config.debug_infs
        eager = (donated or checks) and core.current_trace() is core.eval_trace and not any(
            isinstance(x, Tracer) for x in list(consts) + list(flat_args))
        name = fun_name(self.fun)
        if eager and config.no_execution:
            raise RuntimeError(f"remat tried to execute function jit({name}), but the "
                               f"no_execution config option is set")
        if donated and eager:
            outs = self._run_donating(call_jaxpr, consts, flat_args, donated)
        else:
            outs = jit_p.bind(*consts, *flat_args, name=name, jaxpr=call_jaxpr)
        if eager and (config.debug_nans or config.debug_infs):
            _check_finite(name, call_jaxpr, consts, flat_args, outs)
        return outs

    def _donated_leaves(self, args, kwargs):
        """Flat indices (among the dynamic leaves) of the arguments in ``donate_argnums``."""
        if not self.donate_argnums:
            return ()
        static, _, _ = self._static(args, kwargs)
        nums = set(argnums_in_bounds(self.donate_argnums, len(args)))
        indices, position = [], 0
        for i, arg in enumerate(args):
            if i in static:
                continue
            n = len(tree_flatten(arg)[0])
            if i in nums:
                indices.extend(range(position, position + n))
            position += n
        return tuple(indices)

    def _run_donating(self, call_jaxpr, consts, flat_args, donated):
        """Run the plan eagerly, handing the donated Arrays' buffers over to it: they are
        freed at their last use (or reused for outputs) and the Arrays are deleted."""
        bufs, given, borrowed = [], [], []
        for i, x in enumerate(flat_args):
            if i in donated and type(x) is Array and not x.is_deleted():
                buf = x.delete()
                if buf.base is None and not buf.flags.writeable and memory.holders(buf) == 0:
                    buf.flags.writeable = True  # the deleted Array's own copy: ours to reuse
                bufs.append(buf)
                given.append(len(consts) + i)
            else:
                bufs.append(core.to_numpy(x, core.get_aval(x)))
                if type(x) is not Array:  # (the user's: a result must not alias it)
                    borrowed.append(bufs[-1])
        const_bufs = [core.to_numpy(c, core.get_aval(c)) for c in consts]
        with np.errstate(all="ignore"):  # as every other run (see core.ignore_fp_errors)
            outs = exec.plan_for(call_jaxpr.jaxpr).run(const_bufs + bufs, donated=given)
        return [core.make_array(core.unborrowed(o, borrowed), a)
                for o, a in zip(outs, call_jaxpr.out_avals)]

    # --- the ahead-of-time API -------------------------------------------------------------

    def _staged(self, args, kwargs):
        (closed, call_jaxpr, consts, out_tree, in_tree), _ = self._entry(args, kwargs)
        donated = set(self._donated_leaves(args, kwargs))
        flags = tuple(i in donated for i in range(len(closed.in_avals)))

        def execute(flat_args):
            return self._execute(call_jaxpr, consts, flat_args,
                                 tuple(i for i, d in enumerate(flags) if d))

        return stages.StagedCall(fun_name(self.fun), closed, call_jaxpr, consts, in_tree,
                                 out_tree, flags, self.donate_argnums, execute)

    def trace(self, *args, **kwargs):
        """The ``Traced`` stage for these arguments (arrays or ``ShapeDtypeStruct``s)."""
        return stages.Traced(self._staged(args, kwargs))

    def lower(self, *args, **kwargs):
        """The ``Lowered`` stage: ``.as_text()``, ``.compile()``, ``.cost_analysis()``."""
        return stages.Lowered(self._staged(args, kwargs))

    def eval_shape(self, *args, **kwargs):
        """The ``ShapeDtypeStruct``s of the result, without running anything."""
        return stages.Traced(self._staged(args, kwargs)).out_info

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)


def _explain_miss(name, where, key, names, seen):
    """Why a call traces again: JAX's ``explain_cache_misses`` report, against the most
    recently used key."""
    head = f"TRACING CACHE MISS for {name}" + (f" defined at {where}" if where else "")
    if not seen:
        return f"{head}:\n  never seen function (or signature) before"
    prev = seen[-1]
    reasons = []
    if prev[0] != key[0]:
        reasons.append(f"different static arguments: now {key[0]}, before {prev[0]}")
    if prev[1] != key[1]:
        reasons.append(f"different input pytree: now {key[1]}, before {prev[1]}")
    elif prev[2] != key[2]:
        for n, a, b in zip(names, key[2], prev[2]):
            if a != b:
                reasons.append(f"different input types: at {n}, now {a!r} and before {b!r}")
    if prev[3] != key[3]:
        reasons.append(f"different configuration (x64, PRNG, user contexts): now {key[3]}, "
                       f"before {prev[3]}")
    return f"{head}:\n  " + "\n  ".join(reasons or ["all previously seen cache keys differ"])


def _check_finite(name, call_jaxpr, consts, flat_args, outs):
    """``debug_nans``/``debug_infs``: a non-finite output of a jitted call raises
    FloatingPointError naming the first primitive that produced one (found by running the
    jaxpr again, equation by equation)."""
    check_nan, check_inf = config.debug_nans, config.debug_infs

    def bad(x):
        buf = np.asarray(x)
        if dtypes.kind(buf.dtype) not in "fc":
            return None
        if check_nan and np.isnan(buf).any():
            return "invalid value (nan)"
        if check_inf and np.isinf(buf).any():
            return "divide by zero (inf)"
        return None

    problem = next((p for p in map(bad, outs) if p), None)
    if problem is None:
        return
    env = dict(zip(call_jaxpr.jaxpr.invars, list(consts) + list(flat_args)))
    for eqn in call_jaxpr.jaxpr.eqns:
        ins = [v.val if type(v) is core.Literal else env[v] for v in eqn.invars]
        out = eqn.primitive.bind(*ins, **eqn.params)
        out = out if eqn.primitive.multiple_results else [out]
        env.update(zip(eqn.outvars, out))
        found = next((p for p in map(bad, out) if p), None)
        if found:
            raise FloatingPointError(f"{found} encountered in {eqn.primitive.name}")
    raise FloatingPointError(f"{problem} encountered in jit({name})")


def clear_caches():
    """Empty every cache remat keeps: the traces of jitted and checkpointed functions (and
    of custom derivatives), the executor's plans, and the memoized helpers (LRU caches) of
    its modules. Derived jaxprs (JVP, transpose, batched, partial-eval splits) are cached
    weakly on the jaxprs they come from, so they go with them."""
    for obj in gc.get_objects():
        if type(obj) is TraceCache:
            obj._entries.clear()
    exec.plan._plans.clear()
    exec.plan._closed_plans.clear()
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "remat" or name.startswith("remat.")):
            continue
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)) and hasattr(value, "cache_info"):
                value.cache_clear()


_UNSPECIFIED = object()


def jit(fun=_UNSPECIFIED, /, *, static_argnums=None, static_argnames=None, donate_argnums=(),
        keep_unused=False, inline=False):
    """Stage ``fun`` once per input signature and run it through the executor. Without
    ``fun``, a decorator with these options."""
    if fun is _UNSPECIFIED:
        return lambda f: jit(f, static_argnums=static_argnums, static_argnames=static_argnames,
                             donate_argnums=donate_argnums, keep_unused=keep_unused,
                             inline=inline)
    check_callable(fun)
    return JittedFunction(fun, static_argnums, static_argnames, donate_argnums, keep_unused,
                          inline)
