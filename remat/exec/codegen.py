"""Plans as generated Python: a plan's steps become one straight-line function, so running it
costs the NumPy calls and the buffer bookkeeping the plan decided, not an interpreter's walk
over step objects.

Each small single-output step is written out: its operands read from their slots (literals
bound as constants), the ufunc called directly (in place into a dying operand's buffer where
the plan allows it), the result normalized to the step's dtype, tracked, and the dying
operands released. Large elementwise steps (split across the workers), fused runs and
multiple-result steps call their step object. The semantics are exactly ``Step.execute``'s:
an overriding impl (``prim.impl`` replaced, e.g. by a test's counter) still sees every call,
and a result that is an operand the run does not own is never reused in place.
"""

import bisect
import math
import time

import numpy as np

from remat.exec.fusion import FusedStep
from remat.exec.steps import Step, donatable
from remat.runtime import memory, parallel


def _inline(step):
    """A step written out in the generated code (the others call ``step.execute``)."""
    return (type(step) is Step and not step.multiple
            and (step.update is None or step.donor is None)  # (in place: ``execute``)
            and (step.out_shape is None
                 or math.prod(step.out_shape) < parallel.MIN_SPLIT_ELEMENTS))


class _Source:
    def __init__(self):
        self.lines = []
        self.names = {}

    def bind(self, prefix, i, value):
        name = f"{prefix}{i}"
        self.names[name] = value
        return name

    def emit(self, indent, line):
        self.lines.append("    " * indent + line)


def _emit_frees(src, indent, frees):
    for s in frees:
        src.emit(indent, f"if {s} in owned:")
        src.emit(indent + 1, f"_untrack(env[{s}])")
        src.emit(indent + 1, f"owned.discard({s})")
        src.emit(indent, f"env[{s}] = None")


def _emit_step(src, key, step, base=1):
    """One inlined step (``key`` names its bound objects), at indentation ``base``."""
    out = step.outs[0]
    prim = src.bind("_p", key, step.primitive)
    operands = []
    for k, atom in enumerate(step.ins):
        if type(atom) is int:
            src.emit(base, f"x{k} = env[{atom}]")
            operands.append(f"x{k}")
        else:
            operands.append(src.bind(f"_c{key}_", k, atom[1]))
    args = ", ".join(operands)
    dtype = src.bind("_dt", key, step.out_dtypes[0])
    if step.ufunc is None:
        _emit_general(src, base, key, step, prim, operands, dtype)
    else:
        # the default impl is this ufunc: call it directly (in place when the plan allows)
        src.emit(base, f"if {prim}.impl is {src.bind('_d', key, step.elementwise)}:")
        ufunc = src.bind("_u", key, step.ufunc)
        indent = base + 1
        if step.donor is not None:
            d = step.donor
            src.emit(base + 1, f"if {d} in owned and _donatable(env[{d}]):")
            src.emit(base + 2, f"o = env[{d}]")
            src.emit(base + 2, f"{ufunc}({args}, out=o)")
            src.emit(base + 2, f"env[{d}] = None")
            src.emit(base + 2, f"owned.discard({d})")
            src.emit(base + 1, "else:")
            indent = base + 2
        src.emit(indent, f"o = {ufunc}({args})")
        _emit_normalize(src, indent, dtype)
        src.emit(indent, "_track(o)")
        src.emit(base + 1, f"owned.add({out})")
        src.emit(base + 1, f"env[{out}] = o")
        src.emit(base, "else:")
        _emit_general(src, base + 1, key, step, prim, operands, dtype)
    _emit_frees(src, base, step.frees)


def _emit_normalize(src, indent, dtype):
    """An ndarray of the step's dtype (reductions to a scalar give NumPy scalars)."""
    src.emit(indent, "if type(o) is not _ndarray:")
    src.emit(indent + 1, "o = _asarray(getattr(o, '_buf', o))")
    src.emit(indent, f"if o.dtype != {dtype}:")
    src.emit(indent + 1, f"o = o.astype({dtype})")


def _emit_general(src, indent, key, step, prim, operands, dtype):
    """Any impl: its result may be one of its operands (then the run owns it only if it owns
    that operand)."""
    out = step.outs[0]
    args = operands + ([f"**{src.bind('_k', key, step.params)}"] if step.params else [])
    src.emit(indent, f"o = {prim}.impl({', '.join(args)})")
    _emit_normalize(src, indent, dtype)
    if operands:
        alias = " or ".join(f"o is {x}" for x in operands)
        src.emit(indent, f"if ({alias}) and {src.bind('_s', key, step)}._aliases_unowned("
                         f"o, [{', '.join(operands)}], owned):")
        src.emit(indent + 1, f"env[{out}] = o")
        src.emit(indent, "else:")
        indent += 1
    src.emit(indent, "_track(o)")
    src.emit(indent, f"owned.add({out})")
    src.emit(indent, f"env[{out}] = o")


def _emit_any(src, indent, i, step, sinks_here):
    """Step ``i`` at ``indent`` (inlined, or its ``execute``), moving outputs to their sinks
    after it when ``sinks_here``."""
    if _inline(step):
        _emit_step(src, i, step, indent)
    elif type(step) is FusedStep and sinks_here:
        name = src.bind("_s", i, step)
        src.emit(indent, "if sinks is not None:")
        src.emit(indent + 1, f"{name}.execute(env, owned, _plan._sink_dests({i}, {name}, sinks))")
        src.emit(indent, "else:")
        src.emit(indent + 1, f"{name}.execute(env, owned)")
    else:
        src.emit(indent, f"{src.bind('_s', i, step)}.execute(env, owned)")
    if sinks_here:
        _emit_sink(src, indent, i)


def _emit_sink(src, indent, i):
    src.emit(indent, "if sinks is not None:")
    src.emit(indent + 1, f"_plan._sink({i}, env, owned, sinks, sunk)")


# Python's compile() of a plan's source, per step: about 26 lines of source, 0.6 ms on this
# project's machine. Refined by every compile in the process (a running mean).
_seconds_per_step = 6e-4


def compile_seconds(steps):
    """About how long generating the code of ``steps`` takes."""
    return _seconds_per_step * len(steps)


def _measured(n_steps, seconds):
    global _seconds_per_step
    if n_steps >= 16:  # (smaller plans time mostly the fixed cost)
        _seconds_per_step = 0.5 * _seconds_per_step + 0.5 * seconds / n_steps


def compile_steps(plan):
    """``run(env, owned, sinks, sunk)``: the plan's steps as one generated function (sinks,
    when given, receive the outputs as soon as nothing later reads them). A native cluster's
    steps run only where its kernel is not ready (``Cluster.run_native`` ran it otherwise)."""
    src = _Source()
    src.names.update(_ndarray=np.ndarray, _asarray=np.asarray, _track=memory.track,
                     _untrack=memory.untrack, _donatable=donatable, _plan=plan)
    src.emit(0, "def run(env, owned, sinks, sunk):")
    src.emit(1, "pass")
    first_lines = []  # the generated line each step starts on (1-based)
    cluster_end = 0  # the index after the last step of the cluster being written
    for i, step in enumerate(plan.steps):
        first_lines.append(len(src.lines) + 1)
        cluster = plan.clusters.get(i)
        if cluster is not None:
            src.emit(1, f"if not {src.bind('_n', i, cluster)}.run_native(env, owned):")
            cluster_end = i + cluster.span
        inside = i < cluster_end
        kind = step.primitive.name if type(step) is Step else "fused"
        src.emit(2 if inside else 1, f"# {i}: {kind}")
        _emit_any(src, 2 if inside else 1, i, step, i in plan.sink_after and not inside)
        if i == cluster_end - 1 and i in plan.sink_after:  # (either way, after the cluster)
            _emit_sink(src, 1, i)
    namespace = dict(src.names)
    start = time.perf_counter()
    code = compile("\n".join(src.lines), f"<remat plan {id(plan):x}>", "exec")
    _measured(len(plan.steps), time.perf_counter() - start)
    exec(code, namespace)
    run = namespace["run"]
    run.first_lines = first_lines
    return run


def raising_step(generated, error):
    """The index of the step of ``generated`` (a ``compile_steps`` function) that ``error``
    was raised in, from its traceback; None when it did not come from there."""
    tb, line = error.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code is generated.__code__:
            line = tb.tb_lineno
        tb = tb.tb_next
    if line is None:
        return None
    return bisect.bisect_right(generated.first_lines, line) - 1
