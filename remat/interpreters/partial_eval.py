"""Staging: tracing Python functions into jaxprs.

``StagingTrace`` records every primitive applied to its tracers as a jaxpr equation. Values it
does not own (concrete arrays, tracers of enclosing transformations) become constvars, or
literals when they are scalars. Partial evaluation (known/unknown, policies) and dead-code
elimination build on it.
"""

from typing import NamedTuple

from remat import core, dtypes
from remat.core import (
    ClosedJaxpr,
    Jaxpr,
    Literal,
    Trace,
    Tracer,
    Var,
    get_aval,
    new_jaxpr_eqn,
)


class StagingTracer(Tracer):
    __slots__ = ("jaxpr_var",)  # not "var": that name is the array method ``x.var()``

    def __init__(self, trace, var):
        self._trace = trace
        self.jaxpr_var = var

    @property
    def aval(self):
        return self.jaxpr_var.aval

    def __repr__(self):
        return f"JitTracer({core.long_type_str(self.aval)})"

    @property
    def _origin(self):
        return self._trace.describe_origin(self.jaxpr_var)


class StagingTrace(Trace):
    """Records equations into a jaxpr under construction."""

    def __init__(self, parent, debug_info=None):
        super().__init__(parent)
        self.invars = []
        self.eqns = []
        self.const_vars = {}  # id(value) -> Var
        self.const_vals = []  # (Var, value), kept alive here
        self.debug_info = debug_info

    def describe_origin(self, var):
        """Which arguments of the traced function ``var`` depends on, in JAX's words."""
        info = self.debug_info
        if info is None:
            return None
        deps = {var}
        for eqn in reversed(self.eqns):
            if any(v in deps for v in eqn.outvars):
                deps.update(v for v in eqn.invars if isinstance(v, Var))
        names = [n for v, n in zip(self.invars, info.arg_names) if v in deps]
        where = f"The error occurred while tracing the function {info.func_name} for " \
                f"{info.traced_for}."
        if not names:
            return where
        args = ", ".join(names)
        plural = "s" if len(names) > 1 else ""
        return (f"{where} This concrete value was not available in Python because it depends "
                f"on the value{plural} of the argument{plural} {args}.")

    def describe_leak(self, tracer):
        lines = []
        info = self.debug_info
        if info is not None:
            at = f" at {info.func_src}" if info.func_src else ""
            lines.append(f"The function being traced when the value leaked was "
                         f"{info.func_name}{at} traced for {info.traced_for}.")
        var = getattr(tracer, "jaxpr_var", None)
        eqn = next((e for e in self.eqns if var in e.outvars), None)
        if eqn is not None and eqn.source_info is not None:
            lines.append(f"The leaked intermediate value was created on line "
                         f"{eqn.source_info.file}:{eqn.source_info.line} "
                         f"({eqn.source_info.function}).")
        return "\n".join(lines)

    def new_arg(self, aval):
        var = Var(aval)
        self.invars.append(var)
        return StagingTracer(self, var)

    def to_atom(self, x):
        if isinstance(x, Tracer):
            if x._trace is self:
                return x.jaxpr_var
            self.check_foreign(x)
            return self._const(x, x.aval)
        aval = get_aval(x)
        if not isinstance(aval, core.ShapedArray):  # a mutable array (remat.Ref): by reference
            return self._const(x, aval)
        # keys, and what has no value (a ShapeDtypeStruct out of eval_shape), are consts
        if not aval.shape and not isinstance(aval.dtype, dtypes.ExtendedDType) and \
                core.is_array_like(x):
            return Literal(core.to_numpy(x, aval)[()], aval)
        return self._const(x, aval)

    def _const(self, x, aval):
        var = self.const_vars.get(id(x))
        if var is None:
            var = self.const_vars[id(x)] = Var(aval)
            self.const_vals.append((var, x))
        return var

    def add_eqn(self, in_atoms, out_avals, primitive, params):
        outvars = [Var(a) for a in out_avals]
        self.eqns.append(new_jaxpr_eqn(in_atoms, outvars, primitive, params))
        return [StagingTracer(self, v) for v in outvars]

    def process_primitive(self, primitive, args, params):
        atoms = [self.to_atom(x) for x in args]
        for a in atoms:
            if not isinstance(a.aval, core.ShapedArray) and primitive not in ref_primitives:
                raise ValueError(f"Attempting to pass a Ref {a.aval} to a primitive: "
                                 f"{primitive.name} -- did you forget to unpack ([...]) the ref?")
        out_aval = core.abstract_eval(primitive, [a.aval for a in atoms], params)
        if primitive.multiple_results:
            return self.add_eqn(atoms, out_aval, primitive, params)
        return self.add_eqn(atoms, [out_aval], primitive, params)[0]

    def to_jaxpr(self, outs):
        """The ClosedJaxpr of everything recorded, returning ``outs``."""
        outvars = [self.to_atom(x) for x in outs]
        constvars = [v for v, _ in self.const_vals]
        consts = [x for _, x in self.const_vals]
        jaxpr = Jaxpr(constvars, self.invars, outvars, self.eqns, self.debug_info)
        return ClosedJaxpr(jaxpr, consts)


def trace_to_jaxpr(flat_fun, in_avals, debug_info=None):
    """Stage ``flat_fun`` (flat list of arrays in, flat list out) into a ClosedJaxpr."""
    with core.new_trace(StagingTrace, debug_info) as trace:
        args = [trace.new_arg(a) for a in in_avals]
        outs = flat_fun(*args)
        return trace.to_jaxpr(outs)


def convert_constvars_jaxpr(jaxpr):
    """Turn constvars into leading invars (for call primitives that take consts as operands)."""
    return Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.outvars, jaxpr.eqns, jaxpr.debug_info)


def closed_call(jaxpr):
    """A const-free ClosedJaxpr for a call primitive's param (consts become leading inputs),
    and those consts."""
    if not jaxpr.consts:
        return jaxpr, []
    return ClosedJaxpr(convert_constvars_jaxpr(jaxpr.jaxpr), []), list(jaxpr.consts)



# --- known/unknown partial evaluation --------------------------------------------------------


class PartialVal(tuple):
    """JAX's partial value, a pair ``(aval, const)``: ``(None, value)`` when known,
    ``(aval, None)`` when only the abstract value is (libraries such as flax build them)."""

    __slots__ = ()

    def __new__(cls, xs):
        aval, const = xs
        if (aval is None) == (const is None):
            raise ValueError(f"PartialVal holds an aval or a known value, not both: {xs!r}")
        return tuple.__new__(cls, (aval, const))

    @classmethod
    def known(cls, const):
        return cls((None, const))

    @classmethod
    def unknown(cls, aval):
        return cls((aval, None))

    def is_known(self):
        return self[0] is None

    def get_known(self):
        """The known value, or None when unknown."""
        return self[1] if self[0] is None else None

    def get_aval(self):
        """The abstract value: the unknown's own, or the known value's."""
        return get_aval(self[1]) if self[0] is None else self[0]

# prim -> rule(trace, args, params): how a primitive with some unknown operands is split.
partial_eval_rules = {}


def is_unknown(trace, x):
    return isinstance(x, StagingTracer) and x._trace is trace


class PartialEvalTrace(StagingTrace):
    """On-the-fly partial evaluation: operations on known values (anything that is not one of
    this trace's tracers) run now under the parent trace; operations touching unknown values
    are staged, and the known values they read become residuals (constvars)."""

    def process_primitive(self, primitive, args, params):
        for x in args:
            if isinstance(x, StagingTracer) and x._trace is self:
                break
        else:
            with core.set_current_trace(self.parent):
                return primitive.bind(*args, **params)
        rule = partial_eval_rules.get(primitive)
        if rule is not None:
            return rule(self, args, params)
        return super().process_primitive(primitive, args, params)

    def stage_with_residuals(self, primitive, args, params):
        """Stage ``primitive`` (the default for unknown operands); used by custom rules."""
        return StagingTrace.process_primitive(self, primitive, args, params)


def trace_to_jaxpr_nounits(fun, pvals, instantiate=False):
    """JAX's known/unknown tracing of a wrapped function at ``pvals`` (flax's ``lazy_init``
    and ``nn.scan``): what depends on known values only runs now, the rest is staged.
    Returns ``(jaxpr, out_pvals, consts)``: the jaxpr of the unknown outputs, over ``consts``
    (its constvars) and the unknown inputs; a ``PartialVal`` per output, its value when
    known. ``instantiate`` (bool or list) makes outputs unknown."""
    call = getattr(fun, "call_wrapped", fun)
    with core.new_trace(PartialEvalTrace) as trace:
        args = [pv.get_known() if pv.is_known() else trace.new_arg(pv[0]) for pv in pvals]
        outs = call(*args)
        if isinstance(instantiate, bool):
            instantiate = [instantiate] * len(outs)
        unknown = [is_unknown(trace, o) or inst for o, inst in zip(outs, instantiate)]
        closed = trace.to_jaxpr([o for o, u in zip(outs, unknown) if u])
    out_pvals = [PartialVal.unknown(get_aval(o)) if u else PartialVal.known(o)
                 for o, u in zip(outs, unknown)]
    return closed.jaxpr, out_pvals, list(closed.consts)


@core.memoize_on_jaxpr
def partial_eval_jaxpr_nounits(closed, unknowns, instantiate):
    """Split ``closed`` by which inputs are ``unknowns``.

    Returns ``(known, unknown, out_unknowns, num_res)``: ``known`` maps the known inputs to
    the known outputs followed by ``num_res`` residuals; ``unknown`` maps the residuals followed
    by the unknown inputs to the unknown outputs. ``instantiate`` (bool or list) forces outputs
    to be unknown.
    """
    n_out = len(closed.out_avals)
    if isinstance(instantiate, bool):
        instantiate = [instantiate] * n_out
    known_avals = [a for a, u in zip(closed.in_avals, unknowns) if not u]
    result = {}

    def known_fun(*known_args):
        with core.new_trace(PartialEvalTrace) as trace:
            it = iter(known_args)
            args = [trace.new_arg(a) if u else next(it) for a, u in zip(closed.in_avals, unknowns)]
            outs = core.eval_jaxpr(closed.jaxpr, closed.consts, *args)
            out_unknowns = [is_unknown(trace, o) or inst for o, inst in zip(outs, instantiate)]
            unknown_closed = trace.to_jaxpr([o for o, u in zip(outs, out_unknowns) if u])
        residuals = unknown_closed.consts
        unknown_jaxpr = convert_constvars_jaxpr(unknown_closed.jaxpr)
        result.update(unknown=ClosedJaxpr(unknown_jaxpr, []), out_unknowns=out_unknowns,
                      num_res=len(residuals))
        return [o for o, u in zip(outs, out_unknowns) if not u] + list(residuals)

    known = trace_to_jaxpr(known_fun, known_avals, closed.jaxpr.debug_info)
    return known, result["unknown"], result["out_unknowns"], result["num_res"]


# --- dead-code elimination -------------------------------------------------------------------

# prim -> rule(used_outputs, eqn) -> (used_inputs, new_eqn or None)
dce_rules = {}


# Primitives that take mutable array references (remat.Ref) as operands: the state primitives
# and the calls that can hand one to their bodies. Any other primitive given one is an error.
ref_primitives = set()
# ``writes_ref_operand(eqn)``: whether a call writes a Ref it is given (set by
# remat.interpreters.discharge), an effect that dead-code elimination must keep
writes_ref_operand = None
# ``prepare_custom_eqn(eqn)``: the equation a ``partial_eval_jaxpr_custom`` rule is handed, with
# the Refs its bodies create discharged (set by remat.interpreters.discharge)
prepare_custom_eqn = None


def has_effects(eqn):
    return getattr(eqn.primitive, "has_effects", False) or (
        writes_ref_operand is not None and writes_ref_operand(eqn))


def dce_jaxpr(jaxpr, used_outputs=None, prune_inputs=False):
    """Remove equations whose outputs are unused. Returns ``(new_jaxpr, used_inputs)``;
    with ``prune_inputs`` the unused invars are dropped from the new jaxpr too. Cached per
    jaxpr object (loops' and branches' rules ask again for the same bodies)."""
    if used_outputs is None:
        used_outputs = [True] * len(jaxpr.outvars)
    new, used_inputs = _dce_jaxpr(jaxpr, tuple(bool(u) for u in used_outputs),
                                  bool(prune_inputs))
    return new, list(used_inputs)


@core.memoize_on_jaxpr
def _dce_jaxpr(jaxpr, used_outputs, prune_inputs):
    live = {v for v, u in zip(jaxpr.outvars, used_outputs) if u and type(v) is Var}
    new_eqns = []
    for eqn in reversed(jaxpr.eqns):
        used = [v in live for v in eqn.outvars]
        if not any(used) and not has_effects(eqn):
            continue
        rule = dce_rules.get(eqn.primitive)
        if rule is not None:
            used_ins, new_eqn = rule(used, eqn)
        else:
            used_ins, new_eqn = [True] * len(eqn.invars), eqn
        if new_eqn is None:
            continue
        for v, u in zip(eqn.invars, used_ins):
            if u and type(v) is Var:
                live.add(v)
        new_eqns.append(new_eqn)
    new_eqns.reverse()
    used_inputs = [v in live for v in jaxpr.invars]
    invars = [v for v, u in zip(jaxpr.invars, used_inputs) if u] if prune_inputs \
        else jaxpr.invars
    outvars = [v for v, u in zip(jaxpr.outvars, used_outputs) if u]
    constvars = [v for v in jaxpr.constvars if v in live]
    new = Jaxpr(constvars, invars, outvars, new_eqns, jaxpr.debug_info)
    return new, tuple(used_inputs)


def dce_closed_jaxpr(closed, used_outputs=None, prune_inputs=False):
    live_consts = None
    new, used_inputs = dce_jaxpr(closed.jaxpr, used_outputs, prune_inputs)
    keep = set(new.constvars)
    live_consts = [c for v, c in zip(closed.jaxpr.constvars, closed.consts) if v in keep]
    return ClosedJaxpr(new, live_consts), used_inputs


# --- policy-aware partial evaluation of jaxprs (checkpoint) ----------------------------------

# prim -> rule(eqn, unknowns, policy, unsaveable) -> (eqn_known | None, eqn_staged | None,
#                                                    out_unknowns, out_inst, residuals)
# for primitives holding sub-jaxprs that should be split (rather than staged whole).
partial_eval_jaxpr_custom_rules = {}


class Offloadable:
    """A policy answer: save the value, but move it out of working memory (``src`` to
    ``dst``) until the backward pass needs it."""

    __slots__ = ("src", "dst")

    def __init__(self, src="device", dst="pinned_host"):
        self.src, self.dst = src, dst

    def __repr__(self):
        return f"Offloadable(src={self.src!r}, dst={self.dst!r})"

    def __bool__(self):
        return True


class SaveableType:
    """A policy answer: the value may be saved (as ``True``)."""

    def __repr__(self):
        return "Saveable"


class RecomputeType:
    """A policy answer: the value is recomputed on the backward pass (as ``False``)."""

    def __repr__(self):
        return "Recompute"


Saveable, Recompute = SaveableType(), RecomputeType()


def policy_answer(policy, prim, /, *avals, **params):  # a checkpoint eqn has a "policy" param
    """What ``policy`` says of an output of ``prim``: ``False`` (recompute), ``True`` (save)
    or an ``Offloadable``; the markers ``Recompute``/``Saveable`` read as ``False``/``True``."""
    answer = policy(prim, *avals, **params)
    if isinstance(answer, Offloadable):
        return answer
    if isinstance(answer, RecomputeType):
        return False
    return isinstance(answer, SaveableType) or bool(answer)


def resolve_policy(policy, jaxpr, in_unknowns):
    """A resolvable policy (``resolve_for(jaxpr, in_unknowns)``, e.g. a memory budget) is
    decided against the jaxpr being split; what it returns may answer per equation through
    ``decide_eqn(eqn)``."""
    resolve = getattr(policy, "resolve_for", None)
    return policy if resolve is None else resolve(jaxpr, in_unknowns)


def _policy_decision(policy, eqn, unsaveable):
    if any(v in unsaveable for v in eqn.outvars):
        return False
    decide_eqn = getattr(policy, "decide_eqn", None)
    if decide_eqn is not None:  # a resolved policy: by equation identity
        return decide_eqn(eqn)
    return policy_answer(policy, eqn.primitive, *[v.aval for v in eqn.invars], **eqn.params)


_UNLISTED_NAME = "\x00remat: a name no policy lists"
name_primitive = None  # ``checkpoint_name``'s primitive, set where it is defined


def _unsaveable_by_name(jaxpr, policy):
    """Values whose name the policy singles out as not saveable may not be saved under any
    alias: the name's input (and the chain of names above it) is unsaveable too. A name is
    singled out when the policy refuses it but would save an unlisted name — so
    ``save_anything_except_these_names('b')`` excludes 'b', while ``dots_saveable`` (which
    refuses every name) leaves a named dot saveable."""
    refused = set()
    for eqn in reversed(jaxpr.eqns):
        if eqn.primitive is not name_primitive:
            continue
        avals = [v.aval for v in eqn.invars]
        singled_out = (not policy_answer(policy, name_primitive, *avals, **eqn.params)
                       and policy_answer(policy, name_primitive, *avals,
                                         **dict(eqn.params, name=_UNLISTED_NAME)))
        if eqn.outvars[0] in refused or singled_out:
            refused.add(eqn.outvars[0])
            src = eqn.invars[0]
            if type(src) is Var:
                refused.add(src)
    return refused


def _known_decision(policy, eqn, unsaveable, inst):
    """Whether the outputs of ``eqn``, whose inputs are all known, are saved (``True`` or an
    ``Offloadable``) or recomputed on the backward pass (``False``)."""
    # an effect runs once, on the forward pass; a replayable one (debug.print) whose operands
    # the backward pass has at hand runs again there, as JAX's does
    replayable = getattr(eqn.primitive, "remat_replayable", False)
    decision = _policy_decision(policy, eqn, unsaveable) or (has_effects(eqn) and not replayable)
    if replayable and decision and all(type(v) is not Var or v in inst for v in eqn.invars):
        decision = False
    if getattr(eqn.primitive, "remat_run_once", False):
        decision = True  # a write to a mutable array: once, on the forward pass
    return decision


def _split_inside(eqn, decision, unsaveable):
    """A known call, cond or loop that the policy would recompute whole is split by its rule
    instead, as JAX's are always: the policy then reaches the equations inside it, so a value
    it saves there (a ``cos`` a custom JVP rule computes under ``jit``) is saved, not
    recomputed. One whose outputs are refused by name stays whole."""
    return (not decision and not has_effects(eqn)
            and not any(v in unsaveable for v in eqn.outvars))


class CustomSplit(NamedTuple):
    known: Jaxpr  # known inputs -> known outputs + residuals
    staged: Jaxpr  # residuals + unknown inputs -> staged outputs
    out_unknowns: list
    out_staged: list  # which outputs the staged jaxpr returns (unknown, or recomputed)
    residuals: list
    offloaded: list  # per residual: moved out of working memory until the backward pass


def partial_eval_jaxpr_custom(jaxpr, in_unknowns, policy, stage_known_outputs=False,
                              in_inst=False, ensure_out_inst=False):
    """Split ``jaxpr`` (no constvars) for a checkpoint with ``policy``.

    Known equations go to the known jaxpr. A known value may be saved for the backward pass
    only if the policy allows it; otherwise its equation is also copied into the staged jaxpr
    and recomputed there (a call, cond or loop is split by its rule instead, so the policy
    decides for the equations inside it). Unknown equations are staged. Returns ``(known, staged,
    out_unknowns, residuals, offloaded)``: ``known`` maps the known inputs to the known outputs
    followed by the residuals; ``staged`` maps the residuals followed by the unknown inputs to
    the unknown outputs (with ``stage_known_outputs``, also the known outputs it recomputes
    anyway, so an enclosing split need not save them); both are dead-code eliminated, so the
    residuals are exactly the saved values the backward pass uses.

    ``in_inst`` (bool or list) names known inputs the staged jaxpr also takes (after the
    residuals, in input order), so it can recompute from them rather than read residuals;
    ``ensure_out_inst`` (bool or list) names known outputs the staged jaxpr returns too,
    recomputed or read from residuals. Loop bodies and branches use both: a staged scan
    carries the known carry along, a staged cond branch takes every operand.
    """
    assert not jaxpr.constvars
    policy = resolve_policy(policy, jaxpr, in_unknowns)
    if isinstance(in_inst, bool):
        in_inst = [in_inst] * len(jaxpr.invars)
    if isinstance(ensure_out_inst, bool):
        ensure_out_inst = [ensure_out_inst] * len(jaxpr.outvars)
    unsaveable = _unsaveable_by_name(jaxpr, policy) if name_primitive else set()
    unknown, inst = set(), set()
    for v, u, i in zip(jaxpr.invars, in_unknowns, in_inst):
        if u:
            unknown.add(v)
        if u or i:
            inst.add(v)
    residuals = []  # known vars the staged side reads
    res_set = set()
    offload = set()
    known_eqns, staged_eqns = [], []

    def need(v):
        if type(v) is Var and v not in inst and v not in res_set:
            res_set.add(v)
            residuals.append(v)

    for eqn in jaxpr.eqns:
        uks = [type(v) is Var and v in unknown for v in eqn.invars]
        rule = partial_eval_jaxpr_custom_rules.get(eqn.primitive)
        decision = None if any(uks) else _known_decision(policy, eqn, unsaveable, inst)
        if rule is not None and (decision is None or _split_inside(eqn, decision, unsaveable)):
            handed = eqn if prepare_custom_eqn is None else prepare_custom_eqn(eqn)
            eqn_known, eqn_staged, out_uk, out_inst, res = rule(handed, uks, policy,
                                                                unsaveable)
            if eqn_known is not None:
                known_eqns.append(eqn_known)
            if eqn_staged is not None:
                for v in eqn_staged.invars:
                    if v not in res:
                        need(v)
                staged_eqns.append(eqn_staged)
            for v in res:
                if v not in res_set:
                    res_set.add(v)
                    residuals.append(v)
            for v, u, i in zip(eqn.outvars, out_uk, out_inst):
                if u:
                    unknown.add(v)
                if i:
                    inst.add(v)
        elif decision is None:
            for v in eqn.invars:
                need(v)
            staged_eqns.append(eqn)
            unknown.update(eqn.outvars)
            inst.update(eqn.outvars)
        else:
            known_eqns.append(eqn)
            if not decision:
                staged_eqns.append(eqn)  # recomputed on the backward pass
                for v in eqn.invars:
                    need(v)
                inst.update(eqn.outvars)
            elif isinstance(decision, Offloadable):
                offload.update(eqn.outvars)
    out_unknowns = [type(v) is Var and v in unknown for v in jaxpr.outvars]
    out_staged = [u or e or (stage_known_outputs and type(v) is Var and v in inst)
                  for v, u, e in zip(jaxpr.outvars, out_unknowns, ensure_out_inst)]
    for v, e in zip(jaxpr.outvars, ensure_out_inst):
        if e:
            need(v)
    staged_out = [v for v, st in zip(jaxpr.outvars, out_staged) if st]
    # residuals must be in the staged jaxpr's inputs before DCE decides which are used
    staged_invars = residuals + [v for v, u, i in zip(jaxpr.invars, in_unknowns, in_inst)
                                 if u or i]
    staged = Jaxpr([], staged_invars, staged_out, staged_eqns, jaxpr.debug_info)
    staged, used = dce_jaxpr(staged)
    used_res = used[:len(residuals)]
    residuals = [r for r, u in zip(residuals, used_res) if u]
    staged = Jaxpr([], residuals + staged.invars[len(used_res):], staged.outvars, staged.eqns,
                   jaxpr.debug_info)
    known_outs = [v for v, u in zip(jaxpr.outvars, out_unknowns) if not u]
    known = Jaxpr([], [v for v, u in zip(jaxpr.invars, in_unknowns) if not u],
                  known_outs + residuals, known_eqns, jaxpr.debug_info)
    known, _ = dce_jaxpr(known)
    return CustomSplit(known, staged, out_unknowns, out_staged, residuals,
                       [r in offload for r in residuals])
