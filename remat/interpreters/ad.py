"""Automatic differentiation: the JVP trace with symbolic zeros, and transposition.

Rule registries (a primitive's rules are registered beside the primitive):
- ``primitive_jvps[prim](primals, tangents, **params) -> (primal_out, tangent_out)``; tangents
  may be ``Zero``; for ``multiple_results`` primitives both outputs are lists.
- ``primitive_transposes[prim](ct, *args, **params) -> [ct_arg or None per arg]``, where the
  linear arguments are ``UndefinedPrimal`` and the others are values (residuals). ``ct`` is
  never ``Zero`` for single-result primitives (the backward pass skips those equations).
"""

import numpy as np

from remat import core, dtypes
from remat.core import Trace, Tracer

primitive_jvps = {}
primitive_transposes = {}


class Zero:
    """A symbolic zero tangent or cotangent of abstract value ``aval``."""

    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval

    @staticmethod
    def from_primal_value(x):
        return Zero(core.get_aval(x).to_tangent_aval())

    def __repr__(self):
        return f"Zero({self.aval})"


class UndefinedPrimal:
    """A linear input of an equation being transposed."""

    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval

    def __repr__(self):
        return f"UndefinedPrimal({self.aval})"


def is_undefined_primal(x):
    return type(x) is UndefinedPrimal


def zeros_like_aval(aval):
    from remat import lax

    return lax.full(aval.shape, 0, aval.dtype)


def instantiate_zeros(t):
    """A concrete zero array for a symbolic ``Zero`` (NumPy float0 zeros for float0)."""
    if type(t) is not Zero:
        return t
    if t.aval.dtype == dtypes.float0:
        return np.zeros(t.aval.shape, dtypes.float0)
    return zeros_like_aval(t.aval)


def add_tangents(x, y):
    if type(x) is Zero:
        return y
    if type(y) is Zero:
        return x
    from remat import lax

    return lax.add(x, y)


# --- helpers for writing rules ---------------------------------------------------------------


def defjvp(primitive, *rules):
    """Per-operand JVP rules ``rule(g, *primals, **params) -> tangent contribution``
    (``None`` for an operand that is not differentiable)."""

    def jvp(primals, tangents, **params):
        out = primitive.bind(*primals, **params)
        acc = Zero(core.get_aval(out).to_tangent_aval())
        for rule, t in zip(rules, tangents):
            if rule is not None and type(t) is not Zero:
                acc = add_tangents(acc, rule(t, *primals, **params))
        return out, acc

    primitive_jvps[primitive] = jvp


def defjvp2(primitive, *rules):
    """Like ``defjvp`` but each rule also gets the primal output: ``rule(g, ans, *primals)``."""

    def jvp(primals, tangents, **params):
        out = primitive.bind(*primals, **params)
        acc = Zero(core.get_aval(out).to_tangent_aval())
        for rule, t in zip(rules, tangents):
            if rule is not None and type(t) is not Zero:
                acc = add_tangents(acc, rule(t, out, *primals, **params))
        return out, acc

    primitive_jvps[primitive] = jvp


def defjvp_zero(primitive):
    """The output does not depend differentiably on any input (comparisons, integer ops)."""

    def jvp(primals, tangents, **params):
        out = primitive.bind(*primals, **params)
        if primitive.multiple_results:
            return out, [Zero.from_primal_value(o) for o in out]
        return out, Zero.from_primal_value(out)

    primitive_jvps[primitive] = jvp


def deflinear(primitive, transpose_rule):
    """A primitive linear in all operands: its JVP applies it to the tangents;
    ``transpose_rule(ct, **params) -> [ct per operand]``."""

    def jvp(primals, tangents, **params):
        out = primitive.bind(*primals, **params)
        if all(type(t) is Zero for t in tangents):
            zero = ([Zero.from_primal_value(o) for o in out] if primitive.multiple_results
                    else Zero.from_primal_value(out))
            return out, zero
        return out, primitive.bind(*[instantiate_zeros(t) for t in tangents], **params)

    primitive_jvps[primitive] = jvp
    primitive_transposes[primitive] = lambda ct, *args, **params: transpose_rule(ct, **params)


def deflinear2(primitive, transpose_rule):
    """Like ``deflinear`` but ``transpose_rule(ct, *args, **params)`` sees the operands."""
    deflinear(primitive, lambda ct, **params: None)
    primitive_transposes[primitive] = transpose_rule


# --- the JVP trace ---------------------------------------------------------------------------


class JVPTracer(Tracer):
    __slots__ = ("primal", "tangent")

    def __init__(self, trace, primal, tangent):
        self._trace = trace
        self.primal = primal
        self.tangent = tangent

    @property
    def aval(self):
        return core.get_aval(self.primal)

    def concrete_value(self):
        p = self.primal
        return p.concrete_value() if isinstance(p, Tracer) else core.concrete_or_error(p)


class JVPTrace(Trace):
    """Forward mode: every value carries a tangent; rules run under the parent trace."""

    def to_primal_tangent(self, x):
        if isinstance(x, JVPTracer) and x._trace is self:
            return x.primal, x.tangent
        if isinstance(x, Tracer):
            self.check_foreign(x)
        return x, Zero.from_primal_value(x)

    def process_primitive(self, primitive, args, params):
        primals, tangents = core.unzip2(self.to_primal_tangent(x) for x in args)
        if all(type(t) is Zero for t in tangents):
            with core.set_current_trace(self.parent):
                return primitive.bind(*primals, **params)
        rule = primitive_jvps.get(primitive)
        if rule is None:
            raise NotImplementedError(
                f"Differentiation rule for '{primitive.name}' not implemented")
        with core.set_current_trace(self.parent):
            primal_out, tangent_out = rule(primals, tangents, **params)
        if primitive.multiple_results:
            return [self.make_tracer(p, t) for p, t in zip(primal_out, tangent_out)]
        return self.make_tracer(primal_out, tangent_out)

    def make_tracer(self, primal, tangent):
        return JVPTracer(self, primal, tangent)
