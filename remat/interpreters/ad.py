"""Automatic differentiation: the JVP trace with symbolic zeros, and transposition.

Rule registries (a primitive's rules are registered beside the primitive):
- ``primitive_jvps[prim](primals, tangents, **params) -> (primal_out, tangent_out)``; tangents
  may be ``Zero``; for ``multiple_results`` primitives both outputs are lists.
- ``primitive_transposes[prim](ct, *args, **params) -> [ct_arg or None per arg]``, where the
  linear arguments are ``UndefinedPrimal`` and the others are values (residuals). ``ct`` is
  never ``Zero`` for single-result primitives (the backward pass skips those equations).
"""

import numpy as np

from remat import core, dtypes, source_info
from remat.core import Trace, Tracer
from remat.interpreters import array_ops
from remat.interpreters import partial_eval as pe

primitive_jvps = {}
primitive_transposes = {}
# Allocations (``new_ref``) whose JVP rule runs even on zero tangents: a differentiated value
# may be written into what they create later.
always_differentiated = set()
# ``prepare_backward_pass(jaxpr, consts) -> (jaxpr, consts)``: rewrites mutable arrays created
# inside a linear jaxpr into values before it is transposed (set by remat's discharge module)
prepare_backward_pass = None


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


class CustomVJPException(Exception):
    """A ``custom_vjp`` function differentiated with respect to a value it closes over: its
    ``bwd`` gives cotangents for its explicit arguments only (JAX's exception, at JAX's path)."""

    def __init__(self):
        super().__init__(
            "Detected differentiation of a custom_vjp function with respect to a closed-over "
            "value. That isn't supported because the custom VJP rule only specifies how to "
            "differentiate the custom_vjp function with respect to explicit input parameters. "
            "Try passing the closed-over value into the custom_vjp function as an argument, and "
            "adapting the custom_vjp fwd and bwd rules.")


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
    """Zeros of ``aval``, weakly typed where it is (as JAX's: a Python float's zero tangent)."""
    return array_ops.full(aval.shape, 0, aval.dtype, aval.weak_type)


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
    return array_ops.add(x, y)


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

    def __repr__(self):
        """As JAX's: ``GradTracer`` when the tangent is being staged (linearize, grad),
        ``JVPTracer`` otherwise."""
        primal = core.value_str(self.primal)
        t = self.tangent
        if isinstance(t, Tracer) and not isinstance(t, JVPTracer):
            return f"GradTracer(primal={primal}, typeof(tangent)={core.get_aval(t).str_short()})"
        tangent = f"Zero({t.aval.str_short()})" if type(t) is Zero else core.value_str(t)
        return f"JVPTracer(primal={primal}, tangent={tangent})"

    def concrete_value(self):
        p = self.primal
        return p.concrete_value() if isinstance(p, Tracer) else core.to_numpy(p)


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
        if all(type(t) is Zero for t in tangents) and primitive not in always_differentiated:
            with core.set_current_trace(self.parent):
                return primitive.bind(*primals, **params)
        rule = primitive_jvps.get(primitive)
        if rule is None:
            raise NotImplementedError(
                f"Differentiation rule for '{primitive.name}' not implemented")
        with core.set_current_trace(self.parent):
            # tuples, as JAX hands them (a rule may use them as a vmap in_axes prefix)
            primal_out, tangent_out = rule(tuple(primals), tuple(tangents), **params)
        if primitive.multiple_results:
            return [self.make_tracer(p, t) for p, t in zip(primal_out, tangent_out)]
        return self.make_tracer(primal_out, tangent_out)

    def make_tracer(self, primal, tangent):
        """An output: a tracer, or (as JAX's) the primal itself where the tangent is a
        symbolic zero, so a value that does not depend on the perturbed inputs is no tracer
        of this trace (equinox's ``filter_jvp`` tells the outputs without a tangent so)."""
        tangent = _symbolic_float0(tangent)
        if type(tangent) is Zero:
            return primal
        return JVPTracer(self, primal, tangent)


def _symbolic_float0(tangent):
    """A tangent of an integer or boolean value (dtype float0) is zero whatever it holds: as in
    JAX, it becomes the symbolic ``Zero``, so rules never see it (equinox's ``unvmap_max`` has
    none) and it is never staged."""
    if type(tangent) is Zero:
        return tangent
    aval = core.get_aval(tangent)
    return Zero(aval) if aval.dtype == dtypes.float0 else tangent


# --- forward mode on flat functions and on jaxprs --------------------------------------------


def jvp_flat(flat_fun, primals, tangents):
    """``(primal_outs, tangent_outs)`` of ``flat_fun``; tangents may be ``Zero``."""
    with core.new_trace(JVPTrace) as trace:
        ins = [trace.make_tracer(p, t) for p, t in zip(primals, tangents)]
        outs = flat_fun(*ins)
        return core.unzip2(trace.to_primal_tangent(o) for o in outs)


@core.memoize_on_jaxpr
def jvp_jaxpr(closed, nonzeros, instantiate):
    """A jaxpr computing ``closed`` and its JVP: inputs are the primals and then the tangents
    of the ``nonzeros`` inputs; outputs are the primals and then the nonzero output tangents.
    Returns ``(jaxpr, out_nonzeros)``; ``instantiate`` (bool or list) forces output tangents."""
    n_out = len(closed.out_avals)
    if isinstance(instantiate, bool):
        instantiate = [instantiate] * n_out
    n_in = len(closed.in_avals)
    result = {}

    def fun(*args):
        primals, nz_tangents = args[:n_in], iter(args[n_in:])
        tangents = [next(nz_tangents) if nz else Zero(core.get_aval(p).to_tangent_aval())
                    for p, nz in zip(primals, nonzeros)]
        outs, out_tangents = jvp_flat(lambda *xs: core.eval_jaxpr(closed.jaxpr, closed.consts,
                                                                  *xs), primals, tangents)
        out_tangents = [instantiate_zeros(t) if inst else t
                        for t, inst in zip(out_tangents, instantiate)]
        result["nonzeros"] = [type(t) is not Zero for t in out_tangents]
        return list(outs) + [t for t in out_tangents if type(t) is not Zero]

    in_avals = list(closed.in_avals) + [a.to_tangent_aval() for a, nz in
                                        zip(closed.in_avals, nonzeros) if nz]
    jaxpr = pe.trace_to_jaxpr(fun, in_avals, closed.jaxpr.debug_info)
    return jaxpr, result["nonzeros"]


# --- linearize: JVP with the tangent computation staged by partial evaluation ----------------


def jvp_of_jaxpr_rule(closed, primals, tangents):
    """A JVP rule for a primitive whose value is ``closed`` applied to its operands: the JVP
    of ``closed``, evaluated under the current trace."""
    nonzeros = tuple(type(t) is not Zero for t in tangents)
    jvp_closed, out_nz = jvp_jaxpr(closed, nonzeros, False)
    outs = core.eval_jaxpr(jvp_closed.jaxpr, jvp_closed.consts, *primals,
                           *[t for t in tangents if type(t) is not Zero])
    n = len(closed.out_avals)
    it = iter(outs[n:])
    return outs[:n], [next(it) if nz else Zero(a.to_tangent_aval())
                      for nz, a in zip(out_nz, closed.out_avals)]


def linearize_flat(flat_fun, primals):
    """Linearize ``flat_fun`` at ``primals``.

    Returns ``(primal_outs, linear, out_nonzero)``: ``linear`` is a ClosedJaxpr from the input
    tangents to the nonzero output tangents whose consts are exactly the residuals, i.e. what
    the backward pass needs from the forward pass.
    """
    for p in primals:
        if not isinstance(core.get_aval(p), core.ShapedArray):  # a mutable array (remat.Ref)
            aval = core.get_aval(p)
            raise ValueError(f"Expected cotangent type {aval} but got "
                             f"{core.long_type_str(aval.inner_aval)}: "
                             f"differentiating with respect to a mutable array reference is "
                             f"not supported; pass it as a non-differentiated argument")
    with core.new_trace(pe.PartialEvalTrace) as trace:
        tangent_args = [trace.new_arg(core.get_aval(p).to_tangent_aval()) for p in primals]
        primal_outs, tangent_outs = jvp_flat(flat_fun, primals, tangent_args)
        out_nonzero = [type(t) is not Zero for t in tangent_outs]
        linear = trace.to_jaxpr([t for t in tangent_outs if type(t) is not Zero])
    for p in primal_outs:
        if pe.is_unknown(trace, p):
            raise AssertionError("a primal output depends on a tangent")
    return list(primal_outs), linear, out_nonzero


# --- transposition ---------------------------------------------------------------------------


def backward_pass(jaxpr, consts, args, cts_out, consume_consts=False):
    """Transpose ``jaxpr`` with respect to its ``UndefinedPrimal`` arguments.

    Equations not touching linear inputs are evaluated forward first; the linear ones are
    transposed in reverse. Every value, residuals included, is freed after its last use; with
    ``consume_consts`` the caller hands over ``consts`` (a list, emptied here) so residuals die
    as the backward pass consumes them. Returns cotangents of the linear inputs (``Zero`` where
    nothing flowed).
    """
    if prepare_backward_pass is not None:
        jaxpr, consts = prepare_backward_pass(jaxpr, consts)
    primal_env = {}
    linear_vars = set()
    for v, c in zip(jaxpr.constvars, consts):
        primal_env[v] = c
    if consume_consts:
        consts.clear()
    for v, a in zip(jaxpr.invars, args):
        if is_undefined_primal(a):
            linear_vars.add(v)
        else:
            primal_env[v] = a
    forward, linear = [], []
    for eqn in jaxpr.eqns:
        if any(type(v) is not core.Literal and v in linear_vars for v in eqn.invars):
            linear_vars.update(eqn.outvars)
            linear.append(eqn)
        else:
            forward.append(eqn)
    schedule = forward + linear[::-1]
    last_use = {}
    for i, eqn in enumerate(schedule):
        for v in eqn.invars:
            if type(v) is not core.Literal and v not in linear_vars:
                last_use[v] = i
    frees = [[] for _ in schedule]
    for v, i in last_use.items():
        frees[i].append(v)

    def read(v):
        return v.val if type(v) is core.Literal else primal_env[v]

    ct_env = {}
    for v, ct in zip(jaxpr.outvars, cts_out):
        if type(v) is not core.Literal and v in linear_vars and type(ct) is not Zero:
            ct_env[v] = add_tangents(ct_env.get(v, Zero(v.aval)), ct)
    for i, eqn in enumerate(schedule):
        with source_info.override(eqn.source_info):
            if i < len(forward):
                outs = eqn.primitive.bind(*[read(v) for v in eqn.invars], **eqn.params)
                for v, o in zip(eqn.outvars,
                                outs if eqn.primitive.multiple_results else [outs]):
                    primal_env[v] = o
            else:
                _transpose_eqn(eqn, linear_vars, read, ct_env)
        for v in frees[i]:
            primal_env.pop(v, None)
    return [ct_env.pop(v, Zero(v.aval.to_tangent_aval())) if is_undefined_primal(a) else None
            for v, a in zip(jaxpr.invars, args)]


def transpose_traced_whole(closed, cts_out):
    """The input cotangents of a linear function whose jaxpr ``closed`` was traced whole (all of
    its inputs linear). What does not depend on the inputs runs forward first, as partial
    evaluation: a loop or cond carrying primal values beside linear ones (a counter, a
    checkpointed loop's schedule) is split, never transposed whole."""
    jaxpr, consts = closed.jaxpr, list(closed.consts)
    if prepare_backward_pass is not None:
        jaxpr, consts = prepare_backward_pass(jaxpr, consts)
    n_in = len(jaxpr.invars)
    known, linear, _, num_res = pe.partial_eval_jaxpr_nounits(
        core.ClosedJaxpr(jaxpr, consts), (True,) * n_in, True)
    residuals = core.eval_jaxpr(known.jaxpr, known.consts)
    args = [*residuals, *[UndefinedPrimal(v.aval) for v in jaxpr.invars]]
    return backward_pass(linear.jaxpr, list(linear.consts), args, cts_out)[num_res:]


def _residual_as_array(x, aval):
    """A residual as a rule is given it in JAX, an Array (with its ``aval``), not a NumPy
    buffer or scalar (a literal, a const): equinox's rules read ``x.aval``."""
    if type(x) is np.ndarray or isinstance(x, np.generic):
        return core.make_array(x, aval)
    return x


def _transpose_eqn(eqn, linear_vars, read, ct_env):
    cts = [ct_env.pop(v, None) for v in eqn.outvars]
    if eqn.primitive.multiple_results:
        if all(c is None for c in cts):
            return
        cts = [Zero(v.aval.to_tangent_aval()) if c is None else c
               for v, c in zip(eqn.outvars, cts)]
    else:
        if cts[0] is None or type(cts[0]) is Zero:
            return
        cts = cts[0]
    rule = primitive_transposes.get(eqn.primitive)
    if rule is None:
        raise NotImplementedError(f"Transpose rule (for reverse-mode differentiation) for "
                                  f"'{eqn.primitive.name}' not implemented")
    args = [UndefinedPrimal(v.aval) if type(v) is not core.Literal and v in linear_vars
            else _residual_as_array(read(v), v.aval) for v in eqn.invars]
    cts_in = rule(cts, *args, **eqn.params)
    for v, a, ct in zip(eqn.invars, args, cts_in):
        if is_undefined_primal(a) and ct is not None and type(ct) is not Zero:
            ct_env[v] = add_tangents(ct_env.get(v, Zero(v.aval)), ct)


@core.memoize_on_jaxpr
def transpose_jaxpr(closed, linear, nonzero_cts):
    """The transpose of ``closed`` with respect to its ``linear`` inputs: a jaxpr taking the
    non-linear inputs, then cotangents of the ``nonzero_cts`` outputs, and returning the
    cotangents of the linear inputs (zeros instantiated).

    ``closed`` is first partially evaluated with the non-linear inputs known, so equations
    mixing primal and tangent work (a jvp'd scan, a checkpoint's recomputation) are split and
    their primal parts run forward inside the transposed jaxpr.
    """
    in_avals = closed.in_avals
    res_avals = [a for a, lin in zip(in_avals, linear) if not lin]
    ct_avals = [a.to_tangent_aval() for a, nz in zip(closed.out_avals, nonzero_cts) if nz]

    def fun(*args):
        res, cts = iter(args[:len(res_avals)]), args[len(res_avals):]
        with core.new_trace(pe.PartialEvalTrace) as trace:
            primal_args = [trace.new_arg(a) if lin else next(res)
                           for a, lin in zip(in_avals, linear)]
            outs = core.eval_jaxpr(closed.jaxpr, closed.consts, *primal_args)
            flows = [nz and pe.is_unknown(trace, o) for o, nz in zip(outs, nonzero_cts)]
            lin_closed = trace.to_jaxpr([o for o, f in zip(outs, flows) if f])
        ct_iter = iter(cts)
        cts_out = [next(ct_iter) if nz else None for nz in nonzero_cts]
        cts_out = [c for c, f in zip(cts_out, flows) if f]
        lin_args = [UndefinedPrimal(a) for a in lin_closed.in_avals]
        cts_in = backward_pass(lin_closed.jaxpr, list(lin_closed.consts), lin_args, cts_out,
                               consume_consts=True)
        return [instantiate_zeros(c) for c in cts_in]

    return pe.trace_to_jaxpr(fun, res_avals + ct_avals, closed.jaxpr.debug_info)
