"""Discharging state: a jaxpr that reads and writes mutable array references, rewritten into
a pure one, and the places where remat does it.

``discharge_state(closed)`` re-traces ``closed`` with every Ref replaced by its contents: a
Ref input becomes a value input and its final contents an extra output; a Ref created
inside (``new_ref``) becomes the value it holds; ``get``/``swap``/``addupdate`` become reads
and indexed updates of that value (``remat.state.primitives``' value rules); calls and control
flow that are handed Refs thread their contents through (a ``scan``'s closed-over Ref becomes
a carry, a ``cond``'s an operand and output of every branch). Concrete Refs closed over deep
inside (consts of sub-jaxprs) are found first and threaded as leading inputs and trailing
outputs. The result never contains a Ref, so the executor and the transformations of pure
programs handle it unchanged.

It knows no primitive: each owner declares its own here. The Ref primitives register their
discharge rules (``register_state_primitive``); a call or loop that can be handed Refs
registers its rule with ``handle_refs``, which also lets the impl, JVP, batching and
partial-eval rules its owner registered take Refs. A generic call's rule is ``call_rule``;
control flow's use ``threaded``, ``trace_body`` and ``interpret``.

It is used:
- to run an equation on concrete Refs (``core.ref_eval``): the Refs' contents go in, the
  discharged equation runs, the final contents are copied back into the Refs' buffers;
- to run calls and loops whose bodies create Refs;
- by the JVP of a call handed a Ref created inside a differentiated function, by ``vmap`` of a
  call handed a Ref, and by ``checkpoint`` before it splits its function into saved and
  recomputed parts (so what it saves is values, and the policy sees what the reads compute);
- before a linear jaxpr that creates Refs is transposed (a read transposes to a scatter-add
  of its cotangent, an ``addupdate`` to a read).
"""

import collections
import types
import weakref
from typing import NamedTuple

import numpy as np

from remat import core, source_info
from remat.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Tracer, Var
from remat.interpreters import ad, batching
from remat.interpreters import partial_eval as pe
from remat.ref_types import (
    AbstractRef,
    Ref,
    TangentCell,
    full_indexer,
    vmapped_write_error,
    written_into_undifferentiated,
)

__all__ = ["Discharged", "discharge_state", "has_state"]

# What the owners of primitives declare here (remat.state.primitives for the Ref primitives;
# jit, checkpoint, the custom derivatives and control flow for the calls that take Refs):
# prim -> rule(contents, invals, eqn) -> outputs: how an equation of a Ref primitive, or one
# handed Refs (``Handle`` operands) or whose sub-jaxprs use Refs, is discharged
state_rules = {}
discharge_rules = {}
STATE_PRIMITIVES = set()
_WRITES = set()  # state primitives that write their Ref
_CREATES = set()  # state primitives that make a new Ref
# primitives whose Python rules receive Refs as they are (custom_vjp's fwd/bwd): a Ref they
# are handed is never discharged before differentiation
rules_take_refs = set()
# reading and writing a Ref's whole contents under a transformation: the get and swap
# primitives' binds, from remat.state.primitives
ref_access = types.SimpleNamespace(read=None, write=None)


def register_state_primitive(primitive, rule, *, creates=False, writes=False):
    """Declare a Ref primitive and its discharge ``rule(contents, invals, eqn)``."""
    STATE_PRIMITIVES.add(primitive)
    state_rules[primitive] = rule
    if creates:
        _CREATES.add(primitive)
    if writes:
        _WRITES.add(primitive)


def _is_ref(aval):
    return type(aval) is AbstractRef


def _sub_jaxprs(params):
    for value in params.values():
        if isinstance(value, ClosedJaxpr):
            yield value
        elif isinstance(value, (tuple, list)):
            yield from (v for v in value if isinstance(v, ClosedJaxpr))


def _memo_on(fn):
    """Cache ``fn(jaxpr)`` weakly on a Jaxpr or ClosedJaxpr."""
    cache = weakref.WeakKeyDictionary()

    def cached(obj):
        hit = cache.get(obj)
        if hit is None:
            hit = cache[obj] = fn(obj)
        return hit

    return cached


# --- what a jaxpr does with state ------------------------------------------------------------


@_memo_on
def has_state(closed):
    """Whether ``closed`` (at any depth) creates, reads or writes a Ref, or is handed one."""
    return (any(type(c) is Ref for c in closed.consts) or _jaxpr_has_state(closed.jaxpr))


@_memo_on
def _jaxpr_has_state(jaxpr):
    if any(_is_ref(v.aval) for v in jaxpr.invars + jaxpr.constvars + jaxpr.outvars):
        return True
    return any(eqn.primitive in STATE_PRIMITIVES or any(has_state(s) for s in
                                                         _sub_jaxprs(eqn.params))
               for eqn in jaxpr.eqns)


def params_have_state(params):
    return any(has_state(s) for s in _sub_jaxprs(params))


@_memo_on
def concrete_refs(closed):
    """The concrete Refs among the consts of ``closed`` and of its sub-jaxprs, in order."""
    found = [c for c in closed.consts if type(c) is Ref]
    for eqn in closed.jaxpr.eqns:
        for sub in _sub_jaxprs(eqn.params):
            found += concrete_refs(sub)
    unique = []
    for r in found:
        if not any(r is u for u in unique):
            unique.append(r)
    return tuple(unique)


@_memo_on
def _writes_outer_refs(closed):
    """Whether ``closed`` writes a Ref it is handed (an input or a const), at any depth."""
    outer = {v for v in closed.jaxpr.invars + closed.jaxpr.constvars if _is_ref(v.aval)}
    for eqn in closed.jaxpr.eqns:
        refs = [v for v in eqn.invars if type(v) is Var and v in outer]
        if not refs:
            continue
        if eqn.primitive in _WRITES or any(_writes_outer_refs(s)
                                           for s in _sub_jaxprs(eqn.params)):
            return True
    return False


def _writes_ref_operand(eqn):
    if eqn.primitive in STATE_PRIMITIVES:
        return False
    if not any(type(v) is Var and _is_ref(v.aval) for v in eqn.invars):
        return False
    return any(_writes_outer_refs(s) for s in _sub_jaxprs(eqn.params))


@_memo_on
def _creates_refs(jaxpr):
    return any(eqn.primitive in _CREATES
               or any(_creates_refs(s.jaxpr) for s in _sub_jaxprs(eqn.params))
               for eqn in jaxpr.eqns)


# --- the interpreter -------------------------------------------------------------------------


class Handle:
    """A Ref being discharged: its contents live in the interpreter's state under ``key``."""

    __slots__ = ("key", "aval", "created")

    def __init__(self, key, aval, created=None):
        self.key = key
        self.aval = aval
        self.created = created  # the equation's source info where new_ref made it, if it did


def full(aval):
    return full_indexer(aval.shape)


# prim -> rule(contents, invals, eqn) -> outputs: how an equation handed Refs (``Handle``
# operands), or whose sub-jaxprs use Refs, is discharged
discharge_rules = {}


def interpret(jaxpr, consts, args, contents):
    """Evaluate ``jaxpr`` under the current trace with the Refs that are ``Handle``s (and the
    concrete Refs that are keys of ``contents``) replaced by their contents."""
    env = {}
    for v, c in zip(jaxpr.constvars, consts):
        env[v] = Handle(c, c.aval) if type(c) is Ref and c in contents else c
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        invals = [v.bindable() if type(v) is Literal else env[v] for v in eqn.invars]
        with source_info.override(eqn.source_info):
            outs = _eval_eqn(eqn, invals, contents)
        if eqn.primitive.multiple_results:
            env.update(zip(eqn.outvars, outs))
        else:
            env[eqn.outvars[0]] = outs
    return [v.bindable() if type(v) is Literal else env[v] for v in jaxpr.outvars]


def _eval_eqn(eqn, invals, contents):
    prim = eqn.primitive
    handles = [x for x in invals if type(x) is Handle]
    rule = state_rules.get(prim)
    if rule is not None and (prim in _CREATES or handles):
        return rule(contents, invals, eqn)
    if handles or params_have_state(eqn.params):
        rule = discharge_rules.get(prim)
        if rule is not None:
            return rule(contents, invals, eqn)
        if handles:
            raise ValueError(f"Attempting to pass a Ref {handles[0].aval} to a primitive: "
                             f"{prim.name} -- did you forget to unpack ([...]) the ref?")
        return prim.bind(*invals, **_internal_params(eqn.params))
    return prim.bind(*invals, **eqn.params)


def _internal_params(params):
    """``params`` with every sub-jaxpr's own Refs discharged (signature unchanged)."""
    def rewrite(value):
        if isinstance(value, ClosedJaxpr) and has_state(value):
            return discharge_state(value, False).closed
        if isinstance(value, tuple) and any(isinstance(v, ClosedJaxpr) for v in value):
            return tuple(rewrite(v) for v in value)
        return value

    return {k: rewrite(v) for k, v in params.items()}


def returned_ref_error(closed, h, what=None):
    info = closed.jaxpr.debug_info
    name = info.func_name if info is not None else "the function"
    at = f" at {info.func_src}" if info is not None and info.func_src else ""
    traced_for = what or (info.traced_for if info is not None else "jit")
    if isinstance(h.created, source_info.SourceInfo):
        origin = (f"The returned mutable array was created on line {h.created.file}:"
                  f"{h.created.line} ({h.created.function}).")
    else:
        origin = "The returned mutable array was passed in as an argument (or closed over)."
    return ValueError(f"function {name}{at} traced for {traced_for} returned a mutable array "
                      f"reference of type {h.aval}, but mutable array references cannot be "
                      f"returned.\n\n{origin}")


class Discharged(NamedTuple):
    """A pure jaxpr taking the contents of ``found`` (concrete Refs closed over inside), then
    the original inputs (the Refs at ``ref_inputs`` as their contents), and returning the
    original outputs, then the final contents of those Ref inputs, then of ``found``;
    ``written`` says, per final contents, whether it can differ from the initial."""

    closed: ClosedJaxpr
    ref_inputs: tuple
    found: tuple
    written: tuple


@core.memoize_on_jaxpr
def discharge_state(closed, operands=True):
    """``closed`` with its Refs discharged: those it creates always; the Refs it is handed
    (inputs, and concrete Refs among its consts at any depth) when ``operands`` is True, or
    the inputs whose entry is True when it is a tuple. Undischarged Refs stay Refs."""
    n = len(closed.in_avals)
    mask = [operands] * n if isinstance(operands, bool) else list(operands)
    ref_inputs = tuple(i for i, a in enumerate(closed.in_avals) if _is_ref(a) and mask[i])
    found = concrete_refs(closed) if operands is not False else ()
    in_avals = [r.aval.inner_aval for r in found] + [
        a.inner_aval if i in ref_inputs else a for i, a in enumerate(closed.in_avals)]
    written = []

    def fun(*args):
        contents = dict(zip(found, args[:len(found)]))
        ins = list(args[len(found):])
        handles = []
        for i in ref_inputs:
            h = Handle(object(), closed.in_avals[i])
            contents[h.key] = ins[i]
            ins[i] = h
            handles.append(h)
        initial = [contents[h.key] for h in handles] + list(args[:len(found)])
        outs = interpret(closed.jaxpr, closed.consts, ins, contents)
        for o in outs:
            if type(o) is Handle:
                raise returned_ref_error(closed, o)
        finals = [contents[h.key] for h in handles] + [contents[r] for r in found]
        written[:] = [f is not i for f, i in zip(finals, initial)]
        return outs + finals

    new = pe.trace_to_jaxpr(fun, in_avals, closed.jaxpr.debug_info)
    return Discharged(new, ref_inputs, found, tuple(written))


# --- discharge rules of calls and control flow -----------------------------------------------


def threaded(invals, subs, contents):
    """The Ref keys an equation's bodies thread: its ``Handle`` operands' (once each, in
    order), then the concrete Refs closed over inside its bodies that are being discharged."""
    keys = []
    for x in invals:
        if type(x) is Handle and not any(x.key is k for k in keys):
            keys.append(x.key)
    for sub in subs:
        for r in concrete_refs(sub):
            if r in contents and not any(r is k for k in keys):
                keys.append(r)
    return keys


def aval_of_key(key, invals):
    if type(key) is Ref:
        return key.aval.inner_aval
    return next(x.aval.inner_aval for x in invals if type(x) is Handle and x.key is key)


def body_args(invals, operands, local):
    """A body's arguments: a ``Handle`` (keyed as outside) for each Ref operand, whose
    contents come from ``local``; the other operands as given."""
    args = []
    it = iter(operands)
    for x in invals:
        args.append(Handle(x.key, x.aval) if type(x) is Handle else next(it))
    return args


def trace_body(closed, invals, keys, extra_avals, order):
    """``closed`` re-traced on the contents of ``keys`` and its non-Ref operands ``invals``:
    ``order`` is 'keys-first' (inputs ``[keys, operands]``, outputs ``[keys, outs]``) or
    'keys-last' (inputs ``[operands, keys]``, outputs ``[outs, keys]``). ``extra_avals``
    are avals of inputs after the Ref-bearing operands (a scan's carry and xs)."""
    key_avals = [aval_of_key(k, invals) for k in keys]
    op_avals = [core.get_aval(x) for x in invals if type(x) is not Handle]
    n_k, n_op = len(keys), len(op_avals)

    def body(*xs):
        if order == "keys-first":
            kv, ops, extra = xs[:n_k], xs[n_k:n_k + n_op], xs[n_k + n_op:]
        else:
            ops, kv, extra = xs[:n_op], xs[n_op:n_op + n_k], xs[n_op + n_k:]
        local = dict(zip(keys, kv))
        args = body_args(invals, ops, local) + list(extra)
        outs = interpret(closed.jaxpr, closed.consts, args, local)
        for o in outs:
            if type(o) is Handle:
                raise returned_ref_error(closed, o)
        finals = [local[k] for k in keys]
        return finals + outs if order == "keys-first" else outs + finals

    avals = (key_avals + op_avals if order == "keys-first" else op_avals + key_avals)
    return pe.trace_to_jaxpr(body, avals + list(extra_avals), closed.jaxpr.debug_info)


def check_no_aliases(invals, closed, kind):
    seen = {}
    names = list(closed.jaxpr.debug_info.arg_names) if closed.jaxpr.debug_info else []
    offset = len(invals) - len(names)  # leading operands are closed-over values
    info = closed.jaxpr.debug_info
    where = f"{info.func_name} at {info.func_src}" if info and info.func_src else \
        (info.func_name if info else "the function")
    for i, x in enumerate(invals):
        if type(x) is not Handle:
            continue
        j = next((j for k, j in seen.items() if k is x.key), None)
        if j is None:
            seen[x.key] = i
            continue
        name_i = names[i - offset] if i >= offset else None
        name_j = names[j - offset] if j >= offset else None
        if name_j is None and name_i is not None:
            raise ValueError(f"when tracing {where} for {kind}, a mutable array reference of "
                             f"type {x.aval} was both closed over and passed as the argument "
                             f"{name_i}")
        raise ValueError(f"only one reference to a mutable array may be passed as an argument "
                         f"to a function, but when tracing {where} for {kind} the mutable "
                         f"array reference of type {x.aval} appeared at both "
                         f"{name_j or j} and {name_i or i}.")


def call_rule(jaxpr_param, rebind, kind):
    """For primitives calling one jaxpr on their operands (jit, checkpoint, custom calls): the
    body takes the Refs' contents in their operand slots and returns their final contents
    after its outputs. ``rebind(eqn, new_call, consts, operands) -> outputs``."""

    def rule(contents, invals, eqn):
        closed = eqn.params[jaxpr_param]
        check_no_aliases(invals, closed, kind)
        keys = threaded(invals, [closed], contents)
        found = [k for k in keys if type(k) is Ref and not any(
            type(x) is Handle and x.key is k for x in invals)]
        ops_avals = [x.aval.inner_aval if type(x) is Handle else core.get_aval(x)
                     for x in invals]

        def body(*xs):
            ops, fv = xs[:len(invals)], xs[len(invals):]
            local = dict(zip(found, fv))
            args = []
            for x, op in zip(invals, ops):
                if type(x) is Handle:
                    local.setdefault(x.key, op)
                    args.append(Handle(x.key, x.aval))
                else:
                    args.append(op)
            outs = interpret(closed.jaxpr, closed.consts, args, local)
            for o in outs:
                if type(o) is Handle:
                    raise returned_ref_error(closed, o, kind)
            return outs + [local[k] for k in keys]

        new = pe.trace_to_jaxpr(body, ops_avals + [r.aval.inner_aval for r in found],
                                closed.jaxpr.debug_info)
        new_call, consts = pe.closed_call(new)
        operands = [contents[x.key] if type(x) is Handle else x for x in invals] + \
            [contents[r] for r in found]
        outs = rebind(eqn, new_call, consts, operands)
        n = len(outs) - len(keys)
        for k, v in zip(keys, outs[n:]):
            contents[k] = v
        return outs[:n]

    return rule





# --- running an equation that involves state -------------------------------------------------


def _unique_refs(args, is_ref):
    """``(refs, slots)``: the distinct Refs among ``args`` (by identity) and, per argument,
    the index of its Ref or None."""
    refs, slots = [], []
    for x in args:
        if is_ref(x):
            j = next((j for j, r in enumerate(refs) if r is x), None)
            if j is None:
                j = len(refs)
                refs.append(x)
            slots.append(j)
        else:
            slots.append(None)
    return refs, slots


_EQN_CACHE = collections.OrderedDict()


def _params_key(params):
    try:
        key = tuple(sorted(params.items()))
        hash(key)
        return key
    except TypeError:
        return None


def discharged_eqn(primitive, avals, slots, params):
    """The discharge of one equation of ``primitive`` on operands of ``avals``, the Ref
    operands sharing a Ref where ``slots`` say so. Its inputs are the found Refs' contents,
    the distinct Refs' contents, then the other operands."""
    params_key = _params_key(params)
    key = None if params_key is None else (primitive, tuple(avals), tuple(slots), params_key)
    hit = _EQN_CACHE.get(key) if key is not None else None
    if hit is not None:
        _EQN_CACHE.move_to_end(key)
        return hit
    n_refs = max((s for s in slots if s is not None), default=-1) + 1
    ref_vars = [None] * n_refs
    other_vars = []
    eqn_invars = []
    for a, s in zip(avals, slots):
        if s is None:
            v = Var(a)
            other_vars.append(v)
        else:
            v = ref_vars[s] = ref_vars[s] or Var(a)
        eqn_invars.append(v)
    out = core.abstract_eval(primitive, list(avals), params)
    out_avals = list(out) if primitive.multiple_results else [out]
    outvars = [Var(a) for a in out_avals]
    eqn = JaxprEqn(eqn_invars, outvars, primitive, params, source_info.current())
    closed = ClosedJaxpr(Jaxpr([], ref_vars + other_vars, outvars, [eqn]), [])
    hit = (discharge_state(closed), len(out_avals))
    if key is not None:
        _EQN_CACHE[key] = hit
        if len(_EQN_CACHE) > 256:
            _EQN_CACHE.popitem(last=False)
    return hit


def _contents_of(ref):
    """A copy of a concrete Ref's contents, as an Array (the Ref's own buffer stays
    private: outputs may alias inputs)."""
    return core.make_array(np.array(ref._value), ref.aval.inner_aval)


def run_discharged(primitive, args, params):
    """Run ``primitive`` eagerly on ``args`` (concrete Refs among them, or Refs used by its
    sub-jaxprs): through its discharge, then the Refs' final contents copied back."""
    refs, slots = _unique_refs(args, lambda x: type(x) is Ref)
    avals = [core.get_aval(x) for x in args]
    d, n_out = discharged_eqn(primitive, avals, slots, params)
    others = [x for x, s in zip(args, slots) if s is None]
    ins = [_contents_of(r) for r in d.found] + [_contents_of(r) for r in refs] + others
    with core.set_current_trace(core.eval_trace):
        outs = core.eval_jaxpr(d.closed.jaxpr, d.closed.consts, *ins)
    for r, final, written in zip(list(refs) + list(d.found), outs[n_out:], d.written):
        if written:
            r._value[...] = core.to_numpy(final)
            r._pristine = False
    outs = outs[:n_out]
    return outs if primitive.multiple_results else outs[0]


def _eval_with_refs(trace, primitive, args, params):
    if any(isinstance(x, Tracer) for x in args):
        return trace._forward_to_tracer_trace(primitive, args, params)
    if primitive not in discharge_rules:
        aval = next(core.get_aval(x) for x in args if type(x) is Ref)
        raise ValueError(f"Attempting to pass a Ref {aval} to a primitive: {primitive.name} "
                         f"-- did you forget to unpack ([...]) the ref?")
    return run_discharged(primitive, args, params)


def _stateful_impl(primitive, impl):
    """``impl`` of a call or loop, running bodies that use Refs through their discharge."""
    def run(*bufs, **params):
        if not params_have_state(params):
            return impl(*bufs, **params)
        outs = run_discharged(primitive, bufs, params)
        if primitive.multiple_results:
            return [core.to_numpy(o) for o in outs]
        return core.to_numpy(outs)

    run.__name__ = getattr(impl, "__name__", "impl")
    return run


# --- under transformations -------------------------------------------------------------------


def ref_contents(ref):
    """The whole contents of ``ref`` (a read under the current transformation)."""
    return ref_access.read(ref)


def write_back(ref, value):
    """``ref[...] = value`` under the current transformation."""
    ref_access.write(ref, value)


def _jvp_with_cells(primitive, rule):
    """The JVP rule of a call, for when it is handed a Ref created inside the differentiated
    function (whose tangent is a ``TangentCell``): the call is discharged, its Refs' contents
    go in with their tangents, and the final contents (and tangents) are written back."""
    def jvp(primals, tangents, **params):
        if not any(type(t) is TangentCell for t in tangents):
            return rule(primals, tangents, **params)
        refs, slots = _unique_refs(primals, lambda x: isinstance(x, Ref))
        ref_tangents = [None] * len(refs)
        for t, s in zip(tangents, slots):
            if s is not None and ref_tangents[s] is None:
                ref_tangents[s] = t
        d, n_out = discharged_eqn(primitive, [core.get_aval(x) for x in primals], slots,
                                  params)
        all_refs = list(d.found) + refs
        cells = [ad.Zero(r.aval.inner_aval.to_tangent_aval()) for r in d.found] + ref_tangents
        ins = [ref_contents(r) for r in all_refs]
        in_t = [c.value if type(c) is TangentCell else
                ad.Zero(core.get_aval(r).inner_aval.to_tangent_aval())
                for r, c in zip(all_refs, cells)]
        others = [(p, t) for p, t, s in zip(primals, tangents, slots) if s is None]
        outs, out_t = ad.jvp_of_jaxpr_rule(d.closed, ins + [p for p, _ in others],
                                           in_t + [t for _, t in others])
        finals = list(zip(refs + list(d.found), outs[n_out:], out_t[n_out:], d.written,
                          ref_tangents + [None] * len(d.found)))
        for r, final, final_t, written, cell in finals:
            if written:
                write_back(r, final)
            if type(cell) is TangentCell:
                cell.value = final_t
            elif type(final_t) is not ad.Zero:
                raise written_into_undifferentiated("set/swap", r)
        return outs[:n_out], out_t[:n_out]

    return jvp


def _unbatched_aval(aval, dim):
    if dim is None:
        return aval
    return aval.update(shape=aval.shape[:dim] + aval.shape[dim + 1:])


def _batch_with_refs(primitive, rule):
    """The batching rule of a call handed Refs (or whose bodies create them): discharged,
    with the Refs' contents batched as they are, and the final contents written back."""
    def batch(vals, dims, **params):
        refs, slots = _unique_refs(vals, lambda x: isinstance(x, Ref))
        if not refs and not params_have_state(params):
            return rule(vals, dims, **params)
        ref_dims = [None] * len(refs)
        for d, s in zip(dims, slots):
            if s is not None:
                ref_dims[s] = d
        avals = [_unbatched_aval(core.get_aval(x), dd) for x, dd in zip(vals, dims)]
        d, n_out = discharged_eqn(primitive, avals, slots, params)
        size = batching.axis_size_of(vals, dims)
        ins = [ref_contents(r) for r in list(d.found) + refs]
        in_dims = [None] * len(d.found) + ref_dims
        others = [(v, dd) for v, dd, s in zip(vals, dims, slots) if s is None]
        outs, out_dims = batching.batch_flat(
            lambda *xs: core.eval_jaxpr(d.closed.jaxpr, d.closed.consts, *xs), size,
            ins + [v for v, _ in others], in_dims + [dd for _, dd in others])
        targets = list(zip(refs, ref_dims)) + [(r, None) for r in d.found]
        for (r, r_dim), final, f_dim, written in zip(targets, outs[n_out:], out_dims[n_out:],
                                                      d.written):
            if not written:
                continue
            if r_dim is None and f_dim is not None:
                raise vmapped_write_error("set/swap", r)
            if r_dim is not None:
                final = batching.moveaxis(batching.bdim_at_front(final, f_dim, size), 0, r_dim)
            write_back(r, final)
        return outs[:n_out], out_dims[:n_out]

    return batch


def plumbing_inputs(jaxpr):
    """The Ref inputs of ``jaxpr`` that reach a custom derivative rule (at any depth): they
    must stay Refs through differentiation (a custom_vjp's bwd may write to them)."""
    def reaches_rules(closed):
        return any(e.primitive in rules_take_refs or any(reaches_rules(s) for s in
                                                         _sub_jaxprs(e.params))
                   for e in closed.jaxpr.eqns)

    keep = set()
    for eqn in jaxpr.jaxpr.eqns:
        if eqn.primitive in rules_take_refs or any(reaches_rules(s)
                                                    for s in _sub_jaxprs(eqn.params)):
            keep.update(v for v in eqn.invars if type(v) is Var and _is_ref(v.aval))
    return [v in keep for v in jaxpr.jaxpr.invars]


def _pe_with_internal_refs(rule):
    """A loop, branch or call whose bodies create their own Refs: partial evaluation (which
    splits and hoists their equations) sees those Refs discharged, the signature unchanged."""
    def pe_rule(trace, args, params):
        if params_have_state(params):
            params = _internal_params(params)
        return rule(trace, args, params)

    return pe_rule


def _prepare_backward_pass(jaxpr, consts):
    """A linear jaxpr that creates Refs, with them discharged (transposable by the ordinary
    rules)."""
    if not _creates_refs(jaxpr):
        return jaxpr, consts
    n = len(jaxpr.constvars)
    closed = ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), [])
    new = discharge_state(closed, False).closed
    j = new.jaxpr
    out = Jaxpr(j.constvars + j.invars[:n], j.invars[n:], j.outvars, j.eqns, j.debug_info)
    return out, list(new.consts) + list(consts)


# --- how the owners of calls and loops let their rules take Refs -------------------------------


def handle_refs(primitive, rule, pe_rule=None):
    """Declare ``primitive`` (a call or loop) discharged by ``rule`` when handed Refs or when
    its bodies use them, and let the impl, JVP, batching and partial-eval rules registered for
    it so far take Refs: its owner calls this after registering them. ``pe_rule`` replaces the
    partial-eval wrapping (checkpoint's, which discharges before it splits)."""
    discharge_rules[primitive] = rule
    pe.ref_primitives.add(primitive)
    primitive.def_impl(_stateful_impl(primitive, primitive.impl))
    if primitive in ad.primitive_jvps:
        ad.primitive_jvps[primitive] = _jvp_with_cells(primitive, ad.primitive_jvps[primitive])
    if primitive in batching.primitive_batchers:
        batching.primitive_batchers[primitive] = _batch_with_refs(
            primitive, batching.primitive_batchers[primitive])
    if primitive in pe.partial_eval_rules:
        wrap = pe_rule or _pe_with_internal_refs
        pe.partial_eval_rules[primitive] = wrap(pe.partial_eval_rules[primitive])


def _discharge_internal_refs(eqn):
    """An equation split inside a checkpoint, with the Refs its bodies create discharged."""
    if params_have_state(eqn.params):
        return eqn.replace(params=_internal_params(eqn.params))
    return eqn


core.ref_eval = _eval_with_refs
pe.writes_ref_operand = _writes_ref_operand
pe.prepare_custom_eqn = _discharge_internal_refs
ad.prepare_backward_pass = _prepare_backward_pass
