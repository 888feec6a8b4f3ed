"""How the executor runs control flow: ``scan`` and ``while`` step their bodies' prepared
plans (or, once a loop of tiny arrays is hot, its native kernel: ``native``), ``cond`` runs
the chosen branch's plan. These are the primitives' impls, registered here so that
``remat.lax`` knows nothing of the executor."""

import time

import numpy as np

from remat import core
from remat.exec import native, plan
from remat.exec.loop_constants import transposed_constants
from remat.exec.peaks import plan_peaks
from remat.exec.plan import _plan_and_consts, evaluate, prepared
from remat.runtime import memory, registry
from remat.runtime.parallel import session


@core.memoize_on_jaxpr
def _offloaded_outputs(closed):
    """Which outputs of a body are offloaded residuals: their stacks live in host memory."""
    producers = {v: e.primitive for e in closed.jaxpr.eqns for v in e.outvars}
    return [producers.get(v) in registry.host_results for v in closed.jaxpr.outvars]


@core.memoize_on_jaxpr
def _iteration_peak(closed):
    """The bytes one run of a body's plan allocates at its peak: what a native iteration is
    accounted as holding."""
    return plan_peaks(_plan_and_consts(closed)[0])[0]


def _kernel(loop):
    """The kernel to run a loop with: native once compiled, else its Python kernel; None when
    the plans must run it step by step (no kernel for the body, a memory timeline being
    recorded, or the interpreter asked for)."""
    if loop is None or loop.python is None or memory._recorder is not None or \
            plan._tier == "interpreted":
        return None
    return loop.ready() or loop.python


def _run_kernel(loop, kernel, peak, args, written=0):
    """``kernel(*args)`` (the last ``written`` operands written by it) accounted at the body's
    modelled peak; the time it took counts towards compiling the loop natively."""
    # (the Python kernel takes the operands as the plans would: their layout decides BLAS's
    # rounding; a native kernel's argument types need them canonical)
    operands = args if kernel is loop.python else native.canonical_operands(args, written)
    start = time.perf_counter()
    with memory.held(peak), np.errstate(all="ignore"):
        try:
            out = kernel(*operands)
        except Exception as e:
            at = native.raised_at(kernel, e) if kernel is loop.python else None
            if at is not None:
                e.add_note(f"(raised in a loop's body at {at})")
            raise
    if kernel is loop.python:
        loop.observe(time.perf_counter() - start, operands, written)
    return out


def _transposed_copies(constants, sources):
    """The contiguous transposed copies ``transposed_constants`` asks for, tracked (the caller
    untracks them when its loop is done)."""
    copies = [np.ascontiguousarray(np.transpose(np.asarray(constants[i]), permutation))
              for i, permutation in sources]
    for c in copies:
        memory.track(c)
    return copies


def run_scan(*args, jaxpr, num_consts, num_carry, length, reverse, unroll):
    body, sources = transposed_constants(jaxpr, num_consts)
    copies = _transposed_copies([*jaxpr.consts, *args[:num_consts]], sources)
    try:
        return _scan(copies + list(args), body, num_consts + len(copies), num_carry, length,
                     reverse)
    finally:
        for c in copies:
            memory.untrack(c)


def _scan(args, jaxpr, num_consts, num_carry, length, reverse):
    consts = list(args[:num_consts])
    carry = list(args[num_consts:num_consts + num_carry])
    xs = list(args[num_consts + num_carry:])
    offloaded = _offloaded_outputs(jaxpr)[num_carry:]
    ys = [(memory.host_empty if off else np.empty)((length,) + a.shape, a.dtype)
          for a, off in zip(jaxpr.out_avals[num_carry:], offloaded)]
    for y in ys:
        memory.track(y)
    try:
        loop = native.scan_loop(jaxpr, num_consts, num_carry, reverse) \
            if not any(offloaded) else None
        kernel = _kernel(loop)
        if kernel is not None and length:
            out = _run_kernel(loop, kernel, _iteration_peak(jaxpr),
                              [length, *jaxpr.consts, *args, *ys], len(ys))
            carry = [np.asarray(c, a.dtype) for c, a in zip(out, jaxpr.out_avals[:num_carry])]
        else:
            carry = _scan_steps(jaxpr, consts, carry, xs, ys, num_carry, length, reverse)
    finally:
        for y in ys:
            memory.untrack(y)
    return carry + ys


def _scan_steps(jaxpr, consts, carry, xs, ys, num_carry, length, reverse):
    """The scan on the body's prepared plan, its ys written into their stacked buffers."""
    owned_carry = False
    body = prepared(jaxpr)
    try:
        with session():  # one for the loop: each step's plan nests in it
            for i in (range(length - 1, -1, -1) if reverse else range(length)):
                # each iteration writes its ys straight into their stacked buffers
                sinks = [None] * num_carry + [buf[i, ...] for buf in ys]
                outs = body(*consts, *carry, *[x[i] for x in xs], sinks=sinks)
                new = [np.asarray(c) for c in outs[:num_carry]]
                if owned_carry:
                    for c in carry:
                        memory.untrack(c)
                for c in new:
                    memory.track(c)
                carry, owned_carry = new, True
                for sink, y in zip(sinks[num_carry:], outs[num_carry:]):
                    if y is not sink:  # outputs that are inputs or literals are not sunk
                        sink[...] = y
    finally:
        if owned_carry:
            for c in carry:
                memory.untrack(c)
    return carry


def run_while(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    body, sources = transposed_constants(body_jaxpr, body_nconsts)
    copies = _transposed_copies([*body_jaxpr.consts, *args[cond_nconsts:]], sources)
    args = [*args[:cond_nconsts], *copies, *args[cond_nconsts:]]
    try:
        return _while(args, cond_jaxpr, body, cond_nconsts, body_nconsts + len(copies))
    finally:
        for c in copies:
            memory.untrack(c)


def _while(args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    loop = native.while_loop(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts)
    kernel = _kernel(loop)
    if kernel is None:
        return _while_steps(args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts)
    peak = max(_iteration_peak(cond_jaxpr), _iteration_peak(body_jaxpr))
    out = _run_kernel(loop, kernel, peak, [*cond_jaxpr.consts, *args[:cond_nconsts],
                                           *body_jaxpr.consts, *args[cond_nconsts:]])
    return [np.asarray(c, a.dtype) for c, a in zip(out, body_jaxpr.out_avals)]


def _while_steps(args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cconsts = args[:cond_nconsts]
    bconsts = args[cond_nconsts:cond_nconsts + body_nconsts]
    carry = list(args[cond_nconsts + body_nconsts:])
    owned = False
    try:
        while evaluate(cond_jaxpr, *cconsts, *carry)[0]:
            new = [np.asarray(c) for c in evaluate(body_jaxpr, *bconsts, *carry)]
            for c in new:
                memory.track(c)
            if owned:
                for c in carry:
                    memory.untrack(c)
            carry, owned = new, True
    finally:
        if owned:
            for c in carry:
                memory.untrack(c)
    return carry


def run_cond(index, *ops, branches):
    return evaluate(branches[int(index)], *ops)

