"""Loop kernels' source: a ``scan`` or ``while_loop`` body written once as one function with
the loop inside it, for either tier of ``remat.exec.native``.

The writer is shared (``loop_writer``): a body's equations in order, each offered to its
tier's rewrite passes (``loop_rewrites``), else written by its tier's rule. The Python tier
(``loop_python``) calls each primitive's impl (or its ufunc) on the values the plans would
give it, so its results equal the interpreter's bit for bit; its passes hoist loop-invariant
work and constants before the loop, nest single-use elementwise results in their consumer's
call, write a zero ``pad`` feeding ``add``s as slice-adds, a concatenation of slices as one
gather, and a carry summed over the iterations in place. The native tier (``loop_native``)
writes every equation from ``native_rules``, fusing elementwise work and index remaps into
explicit index loops, for numba.
"""

import math

import numpy as np

from remat.exec.loop_native import Lazy, NativeKernel
from remat.exec.loop_python import PythonKernel
from remat.exec.loop_writer import Unsupported
from remat.exec.native_rules import NATIVE_DTYPES
from remat.runtime.parallel import MIN_SPLIT_ELEMENTS

# the largest value of a plan's native cluster: one pass on one thread beats NumPy's passes up
# to the size the executor splits across its workers
CLUSTER_MAX_ELEMENTS = MIN_SPLIT_ELEMENTS - 1


def _check_operands(*jaxprs, max_elements=None):
    """A kernel's operands and results have types it computes on (no float0) and, for a
    cluster, at most ``max_elements`` elements. A loop's may be larger (a large carry that
    the body only addresses: ``native_rules.ADDRESSING``), its equations' values may not."""
    for jaxpr in jaxprs:
        for v in (*jaxpr.invars, *jaxpr.outvars):
            if v.aval.dtype not in NATIVE_DTYPES or max_elements is not None and \
                    math.prod(v.aval.shape) > max_elements:
                raise Unsupported(f"an operand of type {v.aval.str_short()}")


def scan_source(jaxpr, num_consts, num_carry, reverse, native, donated=()):
    """``kernel(length, *consts, *carry, *xs, *ys) -> carry``: the scan, ys written in place
    (and the ``donated`` carries, where the body updates them). Returns the kernel's source,
    the objects its namespace needs and, on the native tier, its constants (its last operand
    ``_q`` where there are any) and whether it may exit (``BranchNotNative``)."""
    _check_operands(jaxpr)
    num_xs = len(jaxpr.invars) - num_consts - num_carry
    num_ys = len(jaxpr.outvars) - num_carry
    consts = [f"k{i}" for i in range(num_consts)]
    k = (NativeKernel if native else PythonKernel)(consts)
    k.donated = frozenset(num_consts + j for j in donated)
    k.values = [] if native else None
    k.may_exit = native
    carry = [f"c{i}" for i in range(num_carry)]
    xs = [f"xs{i}" for i in range(num_xs)]
    ys = [f"ys{i}" for i in range(num_ys)]
    k.line("for it in range(length):")
    k.indent += 1
    if not native:  # (as a while kernel's: the native kernel goes on from iteration ``it``)
        k.line("if _native_ready[0]:")
        k.line(f"    raise _HandOver(({''.join(c + ', ' for c in carry)}), it)")
        k.line("if _yielding[0]:")
        k.line("    _yield_to_background()")
    k.line("i = length - 1 - it" if reverse else "i = it")
    outs = k.body(jaxpr, consts + carry + [k.bind(f"{x}[i]") for x in xs],
                  escaping=range(num_carry), stored=range(num_carry, len(jaxpr.outvars)),
                  carried={num_consts + j: j for j in range(num_carry)})
    for y, value, v in zip(ys, outs[num_carry:], jaxpr.outvars[num_carry:]):
        k.store(y, "i", value, v.aval.shape)
    k.carry(carry, outs[:num_carry], [v.aval for v in jaxpr.outvars[:num_carry]])
    k.indent -= 1
    k.line(f"return ({''.join(c + ', ' for c in carry)})")
    return k.source(["length"] + consts + carry + xs + ys), k.objects, tuple(k.values or ()), \
        k.exits


def while_source(cond, body, cond_nconsts, body_nconsts, native, donated=()):
    """``kernel(*cond_consts, *body_consts, *carry) -> carry`` (and its namespace's objects and
    native constants, as ``scan_source``; the ``donated`` carries written in place, where the
    body updates them)."""
    _check_operands(cond, body)
    cconsts = [f"a{i}" for i in range(cond_nconsts)]
    bconsts = [f"b{i}" for i in range(body_nconsts)]
    k = (NativeKernel if native else PythonKernel)(cconsts + bconsts)
    k.donated = frozenset(body_nconsts + j for j in donated)
    k.values = [] if native else None
    k.may_exit = native
    carry = [f"c{i}" for i in range(len(body.outvars))]
    k.line("while True:")
    k.indent += 1
    if not native:  # (between iterations: the native kernel, once ready, goes on from here;
        # and a background thread of the native tier gets the GIL: ``_yield_to_background``)
        k.line("if _native_ready[0]:")
        k.line(f"    raise _HandOver(({''.join(c + ', ' for c in carry)}))")
        k.line("if _yielding[0]:")
        k.line("    _yield_to_background()")
    (pred,) = k.body(cond, cconsts + carry, escaping=())
    k.line(f"if not {pred}:")
    k.line("    break")
    k.carry(carry, k.body(body, bconsts + carry, escaping=range(len(body.outvars)),
                          carried={body_nconsts + j: j for j in range(len(carry))}),
            [v.aval for v in body.outvars])
    k.indent -= 1
    k.line(f"return ({''.join(c + ', ' for c in carry)})")
    return k.source(cconsts + bconsts + carry), k.objects, tuple(k.values or ()), k.exits


def elementwise_source(jaxpr, donated=None):
    """``kernel(*ins, *outs) -> scalars``: straight-line elementwise work (a plan's cluster, no
    loop) as the native tier writes it. The array results are computed into their buffers
    among ``outs`` (allocated by the caller, one per array result), those of one shape
    together in one loop nest, so that no intermediate is ever an array; the rank-0 results
    are returned, in order. ``donated``: result position -> the position of the operand it is
    written into (read only at the index written, every element's reads before its stores);
    that result has no buffer among ``outs``. (The operand itself, not a second view of its
    buffer, is written: a store through another array would stop the loop's vectorization.)"""
    _check_operands(jaxpr, max_elements=CLUSTER_MAX_ELEMENTS)
    donated = donated or {}
    ins = [f"x{i}" for i in range(len(jaxpr.invars))]
    k = NativeKernel()
    k.one_pass = True
    k.max_elements = CLUSTER_MAX_ELEMENTS
    values = k.body(jaxpr, ins, stored=range(len(jaxpr.outvars)))
    outs, scalars, by_shape = [], [], {}
    for pos, (v, value) in enumerate(zip(jaxpr.outvars, values)):
        if not v.aval.shape:
            scalars.append(value if v.aval.dtype == np.bool_ else
                           f"{k.dtype(v.aval.dtype)}({value})")
            continue
        if pos in donated:
            target = ins[donated[pos]]
        else:
            target = f"o{len(outs)}"
            outs.append(target)
        if isinstance(value, Lazy):
            by_shape.setdefault(v.aval.shape, []).append((value, target))
        else:
            k.line(f"{target}[...] = {value}")
    for pairs in by_shape.values():
        k.materialize_together(pairs)
    k.line(f"return ({''.join(o + ', ' for o in scalars)})")
    return k.source(ins + outs)

