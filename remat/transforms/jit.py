"""The user's ``jit``: traces a function once per (function, static arguments, input avals
and tree) and runs the staged jaxpr through the executor, as a ``jit_p`` equation
(``remat.call``) inside every transformation; the trace caches, ``clear_caches``, and the
ahead-of-time stages (``trace``, ``lower``, ``eval_shape``)."""

import functools
import gc
import inspect
import logging
import sys
import time
import warnings
import weakref

import numpy as np

from remat import core, devices, dtypes, exec, stages
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
from remat.call import jit_p
from remat.config import config
from remat.core import Tracer
from remat.interpreters import partial_eval as pe
from remat.runtime import collection, memory
from remat.tree_util import tree_flatten, tree_unflatten


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
                 inline=False, backend=None):
        self.fun = fun
        self.backend = backend
        self.static_argnums, self.static_argnames, self.donate_argnums = resolve_jit_argnums(
            fun, static_argnums, static_argnames, donate_argnums)
        self._traces = _traces_for(fun, (self.static_argnums, self.static_argnames,
                                         self.donate_argnums, bool(keep_unused), bool(inline)))
        functools.update_wrapper(self, fun, updated=())  # not fun's __dict__

    @property
    def __signature__(self):
        """``fun``'s signature, which JAX's jitted functions carry themselves: read even where
        wrappers are not followed (``inspect.signature(f, follow_wrapped=False)``)."""
        return inspect.signature(self.fun)

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
            devices.device_count(self.backend)  # an unknown backend: JAX's RuntimeError
            names = names_of()
            self._check_tracing_allowed(key, names)
            flat_fun, store = flatten_fun(dyn_fun, in_tree)
            debug = core.DebugInfo(fun_name(self.fun), names, "jit", fun_sourceinfo(self.fun))
            self._traces.count += 1
            start = time.perf_counter()
            with collection.young_only():
                closed = pe.trace_to_jaxpr(flat_fun, avals, debug)
            if config.log_compiles:
                logger.warning("Finished tracing %s for jit in %.6g sec", fun_name(self.fun),
                               time.perf_counter() - start)
            call_jaxpr, consts = pe.closed_call(closed)
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
        return tree_unflatten(out_tree, [_host_float0(o) for o in outs])

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
        keep_unused=False, device=None, backend=None, inline=False):
    """Stage ``fun`` once per input signature and run it through the executor. Without
    ``fun``, a decorator with these options. ``device`` and ``backend`` are JAX's deprecated
    placement options: remat's arrays all live on the host CPU, so a valid one changes
    nothing (as ``device_put``); an unknown backend fails when the function is traced."""
    if fun is _UNSPECIFIED:
        return lambda f: jit(f, static_argnums=static_argnums, static_argnames=static_argnames,
                             donate_argnums=donate_argnums, keep_unused=keep_unused,
                             device=device, backend=backend, inline=inline)
    check_callable(fun)
    if device is not None or backend is not None:
        warnings.warn("backend and device argument on jit is deprecated. You can use "
                      "`jax.device_put(..., jax.local_devices(backend=\"cpu\")[0])` on the "
                      "inputs to the jitted function to get the same behavior.",
                      DeprecationWarning, stacklevel=2)
        if device is not None and backend is not None:
            raise ValueError(f"can't specify both a device and a backend for jit, got "
                             f"device={device!r} and backend={backend!r}")
    return JittedFunction(fun, static_argnums, static_argnames, donate_argnums, keep_unused,
                          inline, backend)


def _host_float0(x):
    """A float0 output (the cotangent of an integer input) as JAX returns one: a NumPy array,
    not an Array (equinox compares two with ``==``, which NumPy allows for them)."""
    if type(x) is Array and x.dtype == dtypes.float0:
        return np.zeros(x.shape, dtypes.float0)
    return x
