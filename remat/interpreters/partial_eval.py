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


class StagingTrace(Trace):
    """Records equations into a jaxpr under construction."""

    def __init__(self, parent, debug_info=None):
        super().__init__(parent)
        self.invars = []
        self.eqns = []
        self.const_vars = {}  # id(value) -> Var
        self.const_vals = []  # (Var, value), kept alive here
        self.debug_info = debug_info

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

