"""Staging: tracing Python functions into jaxprs.

``StagingTrace`` records every primitive applied to its tracers as a jaxpr equation. Values it
does not own (concrete arrays, tracers of enclosing transformations) become constvars, or
literals when they are scalars. Partial evaluation (known/unknown, policies) and dead-code
elimination build on it.
"""

from remat import core
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
    __slots__ = ("var",)

    def __init__(self, trace, var):
        self._trace = trace
        self.var = var

    @property
    def aval(self):
        return self.var.aval

    @property
    def _origin(self):
        return self._trace.describe_origin(self.var)


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

    def new_arg(self, aval):
        var = Var(aval)
        self.invars.append(var)
        return StagingTracer(self, var)

    def to_atom(self, x):
        if isinstance(x, Tracer):
            if x._trace is self:
                return x.var
            self.check_foreign(x)
            return self._const(x, x.aval)
        aval = get_aval(x)
        if not aval.shape:
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



# --- known/unknown partial evaluation --------------------------------------------------------

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


def has_effects(eqn):
    return getattr(eqn.primitive, "has_effects", False)


def dce_jaxpr(jaxpr, used_outputs=None, prune_inputs=False):
    """Remove equations whose outputs are unused. Returns ``(new_jaxpr, used_inputs)``;
    with ``prune_inputs`` the unused invars are dropped from the new jaxpr too."""
    if used_outputs is None:
        used_outputs = [True] * len(jaxpr.outvars)
    live = {v for v, u in zip(jaxpr.outvars, used_outputs) if u and type(v) is Var}
    new_eqns = []
    for eqn in reversed(jaxpr.eqns):
        used = [v in live for v in eqn.outvars]
        if not any(used) and not has_effects(eqn):
            continue
        rule = dce_rules.get(eqn.primitive)
        if rule is not None:
            used_ins, eqn = rule(used, eqn)
            if eqn is None:
                continue
        else:
            used_ins = [True] * len(eqn.invars)
        for v, u in zip(eqn.invars, used_ins):
            if u and type(v) is Var:
                live.add(v)
        new_eqns.append(eqn)
    new_eqns.reverse()
    used_inputs = [v in live for v in jaxpr.invars]
    invars = [v for v, u in zip(jaxpr.invars, used_inputs) if u] if prune_inputs \
        else jaxpr.invars
    outvars = [v for v, u in zip(jaxpr.outvars, used_outputs) if u]
    constvars = [v for v in jaxpr.constvars if v in live]
    new = Jaxpr(constvars, invars, outvars, new_eqns, jaxpr.debug_info)
    return new, used_inputs


def dce_closed_jaxpr(closed, used_outputs=None, prune_inputs=False):
    live_consts = None
    new, used_inputs = dce_jaxpr(closed.jaxpr, used_outputs, prune_inputs)
    keep = set(new.constvars)
    live_consts = [c for v, c in zip(closed.jaxpr.constvars, closed.consts) if v in keep]
    return ClosedJaxpr(new, live_consts), used_inputs
