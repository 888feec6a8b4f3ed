"""The stages of a jitted function, as JAX's ahead-of-time API:
``jit(f).trace(*args)`` → ``Traced`` (the jaxpr) → ``.lower()`` → ``Lowered`` (the jaxpr after
the executor's passes: inlining, constant folding, CSE, DCE, with checkpoint's
``optimization_barrier``s) → ``.compile()`` → ``Compiled`` (the executor's plan), callable on
the dynamic arguments.

``Compiled.memory_analysis()`` replays the plan's own buffer accounting on the avals: which
step allocates, which writes into a dying operand's buffer, which returns a view, and where
every buffer is freed; so its peak is what ``remat.memory`` measures when the plan runs.
``cost_analysis()`` counts flops, transcendentals and bytes accessed, equation by equation.
"""

import math
from typing import Any, NamedTuple, Protocol

from remat import core, exec
from remat.api_util import ShapeDtypeStruct
from remat.core import ClosedJaxpr, Literal
from remat.devices import SHARDING
from remat.exec.fusion import FusedStep
from remat.exec.peaks import nbytes, plan_peaks, slot_avals, sub_jaxprs
from remat.runtime.registry import elementwise_impls
from remat.tree_util import PyTreeDef, tree_flatten, tree_map, tree_unflatten

__all__ = ["ArgInfo", "Compiled", "CompiledMemoryStats", "CompilerOptions", "Lowered",
           "StagedCall", "Traced", "Wrapped"]

CompilerOptions = dict[str, Any]  # accepted by ``Lowered.compile``; the executor has none


class Wrapped(Protocol):
    """What ``jit`` returns: callable, and the entry to the stages below."""

    def __call__(self, *args, **kwargs): ...

    def trace(self, *args, **kwargs) -> "Traced": ...

    def lower(self, *args, **kwargs) -> "Lowered": ...

    def eval_shape(self, *args, **kwargs): ...


class StagedCall(NamedTuple):
    """What ``jit`` made of one call signature (see ``remat.transforms.jit``)."""

    fun_name: str
    closed: ClosedJaxpr  # as traced: the closed-over values are its consts
    call_jaxpr: ClosedJaxpr  # const-free: the consts are its leading inputs
    consts: list
    in_tree: PyTreeDef  # of (dynamic args, dynamic kwargs)
    out_tree: PyTreeDef
    donated: tuple  # per flat dynamic input
    donate_argnums: tuple
    execute: Any  # execute(flat dynamic args) -> flat outputs, as the jitted function runs


class ArgInfo:
    """The abstract value of one argument, and whether it is donated."""

    __slots__ = ("_aval", "donated")

    def __init__(self, aval, donated):
        self._aval, self.donated = aval, donated

    shape = property(lambda self: self._aval.shape)
    dtype = property(lambda self: self._aval.dtype)

    def __repr__(self):
        return f"ArgInfo(_aval={self._aval!r}, donated={self.donated})"


class _Stage:
    """What every stage knows about the call: its argument and result structure."""

    def __init__(self, staged):
        self._staged = staged

    in_tree = property(lambda self: self._staged.in_tree)
    out_tree = property(lambda self: self._staged.out_tree)
    donate_argnums = property(lambda self: self._staged.donate_argnums)
    fun_name = property(lambda self: self._staged.fun_name)

    @property
    def in_avals(self):
        return tree_unflatten(self.in_tree, self._staged.closed.in_avals)

    @property
    def out_avals(self):
        return tree_unflatten(self.out_tree, self._staged.closed.out_avals)

    @property
    def args_info(self):
        infos = [ArgInfo(a, d) for a, d in zip(self._staged.closed.in_avals,
                                                self._staged.donated)]
        return tree_unflatten(self.in_tree, infos)

    @property
    def out_info(self):
        return tree_unflatten(self.out_tree, [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type)
                                              for a in self._staged.closed.out_avals])


class Traced(_Stage):
    """``jit(f).trace(*args)``: the staged program (``.jaxpr``)."""

    @property
    def jaxpr(self):
        return self._staged.closed

    def lower(self, *, lowering_platforms=None):
        if lowering_platforms not in (None, ("cpu",), ["cpu"]):
            raise ValueError(f"remat lowers for 'cpu' only, got {lowering_platforms!r}")
        return Lowered(self._staged)


class Lowered(_Stage):
    """``jit(f).lower(*args)``: the jaxpr after the executor's passes."""

    def __init__(self, staged):
        super().__init__(staged)
        self._optimized = None

    @property
    def jaxpr(self):
        """The staged jaxpr the plan is made from (its consts as leading inputs)."""
        return self._staged.call_jaxpr.jaxpr

    def compiler_ir(self, dialect=None):
        """The optimized jaxpr: what the executor's plan is made from."""
        if self._optimized is None:
            self._optimized = exec.optimize_jaxpr(self._staged.call_jaxpr.jaxpr)
        return self._optimized

    def as_text(self, dialect=None, *, debug_info=False):
        return core.pp_jaxpr(self.compiler_ir())

    def compile(self, compiler_options=None):
        """The executor's plan for this jaxpr (made once, shared with the jitted calls)."""
        if compiler_options:
            raise ValueError(f"Unknown compiler_options {sorted(compiler_options)}: remat's "
                             f"executor takes none")
        return Compiled(self._staged, exec.plan_for(self._staged.call_jaxpr.jaxpr))

    def cost_analysis(self):
        return _cost_analysis(self.compiler_ir())


class Compiled(_Stage):
    """``jit(f).lower(*args).compile()``: the executor's plan, callable on the dynamic
    arguments (static arguments are left out, as in JAX)."""

    def __init__(self, staged, plan):
        super().__init__(staged)
        self._plan = plan

    def __call__(self, *args, **kwargs):
        flat, tree = tree_flatten((args, kwargs))
        if tree != self.in_tree:
            raise TypeError(f"Function compiled with input pytree does not match the input "
                            f"pytree it was called with: compiled with {self.in_tree}, called "
                            f"with {tree}.")
        mismatches = []
        for i, (x, aval) in enumerate(zip(flat, self._staged.closed.in_avals)):
            got = core.get_aval(x)
            if got.shape != aval.shape or got.dtype != aval.dtype:
                mismatches.append(f"Argument {i} compiled with {_type_str(aval)} and called "
                                  f"with {_type_str(got)}")
        if mismatches:
            raise TypeError("Argument types differ from the types for which this computation "
                            "was compiled. The mismatches are:\n" + "\n".join(mismatches))
        return tree_unflatten(self.out_tree, self._staged.execute(flat))

    call = __call__

    def runtime_executable(self):
        """The executor's plan."""
        return self._plan

    @property
    def input_shardings(self):
        return tree_map(lambda _: SHARDING, self.args_info)

    @property
    def output_shardings(self):
        return tree_unflatten(self.out_tree, [SHARDING] * self.out_tree.num_leaves)

    def as_text(self):
        """The plan: the jaxpr it runs and its steps (fused runs, in-place writes, frees)."""
        plan = self._plan
        avals = slot_avals(plan)
        lines = [core.pp_jaxpr(plan.jaxpr), f"plan: {len(plan.steps)} steps, "
                 f"{plan.num_slots} buffers"]
        for i, step in enumerate(plan.steps):
            if type(step) is FusedStep:
                what = "fused[" + ", ".join(m.primitive.name for m in step.members) + "]"
            else:
                what = step.primitive.name
            outs = ", ".join(avals[s].str_short() for s in step.outs)
            notes = []
            if type(step) is not FusedStep and step.donor is not None:
                notes.append("in place")
            if step.frees:
                notes.append(f"frees {len(step.frees)}")
            lines.append(f"  {i}: {what} -> {outs or '()'}"
                         + (f"  ({', '.join(notes)})" if notes else ""))
        return "\n".join(lines)

    def memory_analysis(self):
        return _memory_analysis(self._plan, self._staged)

    def cost_analysis(self):
        return _cost_analysis(self._plan.jaxpr)


def _type_str(aval):
    return f"{aval.dtype.name}[{','.join(str(d) for d in aval.shape)}]"


# --- memory ------------------------------------------------------------------------------------


class CompiledMemoryStats:
    """Bytes of one run of a plan (JAX's field names). ``temp_size_in_bytes``: the peak of
    the intermediates the plan allocates; ``peak_memory_in_bytes``: the peak of everything
    live during the run — the arguments, the intermediates and the outputs made so far."""

    _fields = ("generated_code_size_in_bytes", "argument_size_in_bytes",
               "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
               "host_generated_code_size_in_bytes", "host_argument_size_in_bytes",
               "host_output_size_in_bytes", "host_alias_size_in_bytes",
               "host_temp_size_in_bytes", "peak_memory_in_bytes")

    def __init__(self, **sizes):
        for name in self._fields:
            setattr(self, name, int(sizes.get(name, 0)))

    def __repr__(self):
        fields = ", ".join(f"{n}={getattr(self, n)}" for n in self._fields)
        return f"CompiledMemoryStats({fields})"


def _memory_analysis(plan, staged):
    peak, temp, alias = plan_peaks(plan)
    arguments = sum(nbytes(a) for a in plan.jaxpr.in_avals)
    outputs = sum(nbytes(a) for a in plan.jaxpr.out_avals)
    return CompiledMemoryStats(argument_size_in_bytes=arguments, output_size_in_bytes=outputs,
                               alias_size_in_bytes=alias, temp_size_in_bytes=temp,
                               peak_memory_in_bytes=arguments + peak)


# --- cost ----------------------------------------------------------------------------------------

_TRANSCENDENTAL = frozenset({
    "exp", "exp2", "log", "log1p", "expm1", "sin", "cos", "tan", "asin", "acos", "atan",
    "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "logistic", "pow", "sqrt",
    "rsqrt", "cbrt", "erf", "erfc", "erf_inv", "lgamma", "digamma", "igamma", "igammac",
    "bessel_i0e", "bessel_i1e", "polygamma", "zeta", "random_gamma_grad",
    "regularized_incomplete_beta"})
_REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and",
                         "reduce_or", "reduce_xor", "argmax", "argmin", "cumsum", "cumprod",
                         "cummax", "cummin", "cumlogsumexp", "reduce_precision"})


def _eqn_flops(eqn):
    """``(flops, transcendentals)`` of one equation (its sub-jaxprs counted by the caller)."""
    name = eqn.primitive.name
    out = eqn.outvars[0].aval if eqn.outvars else None
    if name == "dot_general":
        (lhs_contract, _), _ = eqn.params["dimension_numbers"]
        lhs = eqn.invars[0].aval
        return 2 * math.prod(out.shape) * math.prod(lhs.shape[d] for d in lhs_contract), 0
    if name == "conv_general_dilated":
        rhs = eqn.invars[1].aval
        out_features = rhs.shape[eqn.params["dimension_numbers"].rhs_spec[0]]
        return 2 * math.prod(out.shape) * (math.prod(rhs.shape) // max(out_features, 1)), 0
    if name in _TRANSCENDENTAL:
        return 0, math.prod(out.shape)
    if name in _REDUCTIONS:
        return math.prod(eqn.invars[0].aval.shape), 0
    if eqn.primitive in elementwise_impls:
        return math.prod(out.shape), 0
    return 0, 0


def _jaxpr_cost(jaxpr):
    flops = transcendentals = accessed = 0
    for eqn in jaxpr.eqns:
        f, t = _eqn_flops(eqn)
        inner = [_jaxpr_cost(j) for j in sub_jaxprs(eqn.params)]
        if inner:
            times = eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1
            pick = max if eqn.primitive.name == "cond" else sum
            f += times * pick(c[0] for c in inner)
            t += times * pick(c[1] for c in inner)
            accessed += times * pick(c[2] for c in inner)
        flops, transcendentals = flops + f, transcendentals + t
        accessed += sum(nbytes(v.aval) for v in eqn.invars if type(v) is not Literal)
        accessed += sum(nbytes(v.aval) for v in eqn.outvars)
    return flops, transcendentals, accessed


def _cost_analysis(jaxpr):
    """JAX's keys: ``flops``, ``transcendentals``, ``bytes accessed`` (every equation's
    operands and results, before fusion), and per argument ``bytes accessed{i}{}`` and
    ``bytes accessedout{}``."""
    flops, transcendentals, accessed = _jaxpr_cost(jaxpr)
    cost = {"flops": float(flops), "transcendentals": float(transcendentals),
            "bytes accessed": float(accessed)}
    read = {v for e in jaxpr.eqns for v in e.invars if type(v) is not Literal}
    read.update(v for v in jaxpr.outvars if type(v) is not Literal)
    for i, v in enumerate(jaxpr.invars):
        cost[f"bytes accessed{i}{{}}"] = float(nbytes(v.aval) if v in read else 0)
    cost["bytes accessedout{}"] = float(sum(nbytes(a) for a in jaxpr.out_avals))
    return cost
