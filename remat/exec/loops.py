"""How the executor runs control flow: ``scan`` and ``while`` step their bodies' prepared
plans (or, once a loop of tiny arrays is hot, its native kernel: ``native``), ``cond`` runs
the chosen branch's plan. These are the primitives' impls, registered here so that
``remat.lax`` knows nothing of the executor."""

import functools
import time

import numpy as np

from remat import core
from remat.exec import native, plan
from remat.exec.loop_constants import transposed_constants
from remat.exec.native_rules import BranchNotNative
from remat.exec.peaks import plan_peaks
from remat.exec.plan import _plan_and_consts, evaluate, prepared
from remat.exec.steps import default_updates, updated_carries
from remat.runtime import memory, registry
from remat.runtime.parallel import session


@core.memoize_on_jaxpr
def _offloaded_outputs(closed):
    """Which outputs of a body are offloaded residuals: their stacks live in host memory."""
    producers = {v: e.primitive for e in closed.jaxpr.eqns for v in e.outvars}
    return [producers.get(v) in registry.host_results for v in closed.jaxpr.outvars]


@core.memoize_on_jaxpr
def _iteration_peak(closed, donated=()):
    """The bytes one run of a body's plan allocates at its peak (``donated``: the positions of
    the operands handed over to it): what a native iteration is accounted as holding."""
    plan, consts = _plan_and_consts(closed)
    return plan_peaks(plan, [len(consts) + i for i in donated])[0]


@core.memoize_on_jaxpr
def _updated_carries(closed, first, num_carry):
    """The carries (indices among the ``num_carry`` from operand ``first``) a body's plan
    updates in place (``updated_carries``)."""
    plan, consts = _plan_and_consts(closed)
    start = len(consts) + first
    found = updated_carries(plan.jaxpr, {start + j: j for j in range(num_carry)})
    return tuple(sorted(position - start for position in found))


def _taken(closed, first, num_carry, offered, loop):
    """The carries a loop takes over from its caller (offered, and updated in place by its
    body: only then can the body's writes keep the buffer the caller still refers to). None
    where its native kernel may exit (``BranchNotNative``), from the call's start or from a
    Python-tier call handed over to it: the call then reruns from the carries as they came."""
    if not offered or not default_updates() or loop is not None and loop.exits:
        return ()
    return tuple(j for j in _updated_carries(closed, first, num_carry)
                 if first + j in offered)


def _kernel(loop):
    """The kernel to run a loop with: native once compiled, else its Python kernel; None when
    the plans must run it step by step (no kernel for the body, a memory timeline being
    recorded, or the interpreter asked for)."""
    if loop is None or loop.python is None or memory._recorder is not None or \
            plan._tier == "interpreted":
        return None
    return loop.ready() or loop.python


def _rerun_on_exit(loop, kernel, run):
    """``run(kernel)``, rerun with the Python kernel where the native one (called, or handed
    over to) exits at a branch it has no code for (its operands are as they came: ``_taken``)."""
    try:
        return run(kernel)
    except BranchNotNative as e:
        loop.exited(e)
        return run(loop.python)


def _run_kernel(loop, kernel, peak, args, written=(), rest=None):
    """``kernel(*args)`` (the operands at the positions ``written`` written by it) accounted at
    the body's modelled peak; the time it took counts towards compiling the loop natively.
    A Python-tier call handed over (``native.HandOver``) goes on from the operands
    ``rest(args, hand_over)`` gives (by default a while loop's: its carries replaced)."""
    # (the Python kernel takes the operands as the plans would: their layout decides BLAS's
    # rounding; a native kernel's argument types need them canonical)
    operands = args if kernel is loop.python else loop.native_operands(args, written)
    start = time.perf_counter()
    watched = None
    if kernel is loop.python:
        watched = native.watch(loop, operands, written)
        if not native.enabled():
            loop.native_ready[0] = False  # (no hand-over while the native tier is off)
    with memory.held(peak), np.errstate(all="ignore"):
        try:
            out = kernel(*operands)
        except native.HandOver as h:
            out = _handed_over(loop, (rest or _rest_of_while)(args, h), written)
        except TypeError as e:
            if kernel is loop.python or not native.is_dispatch_error(e):
                raise
            loop.mismatched()  # (compiled for other types: the Python tier runs this call)
            kernel, operands = loop.python, args
            out = kernel(*operands)
        except Exception as e:
            at = native.raised_at(kernel, e) if kernel is loop.python else None
            if at is not None:
                e.add_note(f"(raised in a loop's body at {at})")
            raise
        finally:
            native.unwatch(watched)
    if kernel is loop.python:
        loop.observe(time.perf_counter() - start, operands, written)
    return out


def _rest_of_while(args, hand_over):
    """A while loop's operands from the carries its Python-tier kernel reached."""
    return [*args[:len(args) - len(hand_over.carries)], *hand_over.carries]


def _handed_over(loop, args, written):
    """The rest of a loop's call, from the operands ``args`` where its Python-tier kernel
    stopped when the native kernel became ready (``native.HandOver``): on the native kernel,
    or on the Python tier where the native one was compiled for other types."""
    try:
        return loop.kernel(*loop.native_operands(args, written))
    except TypeError as e:
        if not native.is_dispatch_error(e):
            raise
        loop.mismatched()  # (which lowers the flag: the Python tier runs to the end)
        return loop.python(*args)


def _transposed_copies(constants, sources):
    """The contiguous transposed copies ``transposed_constants`` asks for, tracked (the caller
    untracks them when its loop is done)."""
    copies = [np.ascontiguousarray(np.transpose(np.asarray(constants[i]), permutation))
              for i, permutation in sources]
    for c in copies:
        memory.track(c)
    return copies


def run_scan(*args, **params):
    return donating_scan(frozenset(), [], *args, **params)


def donating_scan(offered, taken_out, *args, jaxpr, num_consts, num_carry, length, reverse,
              unroll):
    """The scan, taking over the carries it updates in place of those ``offered`` (operand
    positions; those it takes are added to ``taken_out`` at once)."""
    body, sources = transposed_constants(jaxpr, num_consts)
    copies = _transposed_copies([*jaxpr.consts, *args[:num_consts]], sources)
    num_consts += len(copies)
    updated = _updated_carries(body, num_consts, num_carry) if default_updates() else ()
    loop = native.scan_loop(body, num_consts, num_carry, reverse, updated) \
        if not any(_offloaded_outputs(body)[num_carry:]) else None
    kernel = _kernel(loop)
    taken = _taken(body, num_consts, num_carry, {i + len(copies) for i in offered}, loop)
    taken_out.extend(num_consts - len(copies) + j for j in taken)
    try:
        return _scan(copies + list(args), body, num_consts, num_carry, length, reverse, loop,
                     kernel if length else None, updated, taken)
    finally:
        for c in copies:
            memory.untrack(c)


def _scan(args, jaxpr, num_consts, num_carry, length, reverse, loop, kernel, updated, taken):
    consts = list(args[:num_consts])
    carry = list(args[num_consts:num_consts + num_carry])
    xs = list(args[num_consts + num_carry:])
    offloaded = _offloaded_outputs(jaxpr)[num_carry:]
    ys = [(memory.host_empty if off else np.empty)((length,) + a.shape, a.dtype)
          for a, off in zip(jaxpr.out_avals[num_carry:], offloaded)]
    for y in ys:
        memory.track(y)
    try:
        if kernel is None:
            return _scan_steps(jaxpr, consts, carry, xs, ys, num_carry, length, reverse,
                               taken) + ys

        def run(kernel):
            carries = list(carry)
            held = _kernel_carries(loop, kernel, carries, updated, taken)
            try:
                operands = [length, *jaxpr.consts, *consts, *carries, *xs, *ys]
                written = {1 + len(jaxpr.consts) + num_consts + j for j in updated}
                written.update(len(operands) - 1 - i for i in range(len(ys)))
                return _run_kernel(loop, kernel, _iteration_peak(
                    jaxpr, _positions(num_consts, updated)), operands, written,
                    functools.partial(_rest_of_scan, 1 + len(jaxpr.consts) + num_consts,
                                      num_carry, reverse))
            finally:  # (held through the kernel's run; now its result holds them)
                _let_go(held, [True] * len(held))
        out = _rerun_on_exit(loop, kernel, run)
        return [np.asarray(c, a.dtype) for c, a in zip(out, jaxpr.out_avals[:num_carry])] + ys
    finally:
        for y in ys:
            memory.untrack(y)


def _rest_of_scan(first_carry, num_carry, reverse, args, hand_over):
    """A scan's operands for its iterations from ``hand_over.done`` on: the carries its
    Python-tier kernel reached, and the rest of its xs and of its ys (views: the native
    kernel writes the ys the call returns)."""
    length, done = args[0], hand_over.done
    rest = slice(done, None) if not reverse else slice(0, length - done)
    return [length - done, *args[1:first_carry], *hand_over.carries,
            *(a[rest] for a in args[first_carry + num_carry:])]


def _kernel_carries(loop, kernel, carry, updated, taken):
    """Make ``carry`` (in place) what a loop kernel writes into: the ``updated`` carries the
    loop took over as they are, the others copied (the loop's own, tracked). Returns the
    buffers the loop holds. A native kernel takes C-contiguous copies; the Python one takes
    the layout a plan's copy keeps (a later sum of the carry rounds as the plans' does)."""
    order = "K" if kernel is loop.python else "C"
    held = []
    for j in updated:
        if j not in taken:
            carry[j] = np.array(carry[j], order=order)
            memory.track(carry[j])
        held.append(carry[j])
    return held


def _positions(first, carries):
    return tuple(first + j for j in carries)


def _scan_steps(jaxpr, consts, carry, xs, ys, num_carry, length, reverse, taken):
    """The scan on the body's prepared plan, its ys written into their stacked buffers; the
    carries it updates in place handed over to each step's plan while the loop owns them."""
    owned = [j in taken for j in range(num_carry)]
    updated = _updated_carries(jaxpr, len(consts), num_carry) if default_updates() else ()
    body = prepared(jaxpr)
    try:
        with session():  # one for the loop: each step's plan nests in it
            for i in (range(length - 1, -1, -1) if reverse else range(length)):
                # each iteration writes its ys straight into their stacked buffers
                sinks = [None] * num_carry + [buf[i, ...] for buf in ys]
                donated = _hand_over(carry, owned, updated)
                outs = body(*consts, *carry, *[x[i] for x in xs], sinks=sinks,
                            donated=_positions(len(consts), donated))
                carry, owned = _carried_on(carry, owned, outs[:num_carry])
                for sink, y in zip(sinks[num_carry:], outs[num_carry:]):
                    if y is not sink:  # outputs that are inputs or literals are not sunk
                        sink[...] = y
    finally:
        _let_go(carry, owned)
    return carry


def _hand_over(carry, owned, updated):
    """The carries a step's plan takes over (owned by the loop, updated in place by it): the
    loop lets go of them (the plan holds them while it runs)."""
    donated = [j for j in updated if owned[j]]
    for j in donated:
        memory.untrack(carry[j])
        owned[j] = False
    return donated


def _carried_on(carry, owned, outs):
    """The next carries, held by the loop (the ones before let go of)."""
    new = [np.asarray(c) for c in outs]
    _let_go(carry, owned)
    for c in new:
        memory.track(c)
    return new, [True] * len(new)


def _let_go(carry, owned):
    for c, own in zip(carry, owned):
        if own:
            memory.untrack(c)


def run_while(*args, **params):
    return donating_while(frozenset(), [], *args, **params)


def donating_while(offered, taken_out, *args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    """The while loop, taking over the carries it updates in place of those ``offered``
    (operand positions; those it takes are added to ``taken_out`` at once)."""
    body, sources = transposed_constants(body_jaxpr, body_nconsts)
    copies = _transposed_copies([*body_jaxpr.consts, *args[cond_nconsts:]], sources)
    args = [*args[:cond_nconsts], *copies, *args[cond_nconsts:]]
    num_carry = len(body_jaxpr.out_avals)
    first = cond_nconsts + body_nconsts
    body_nconsts += len(copies)
    updated = _updated_carries(body, body_nconsts, num_carry) if default_updates() else ()
    loop = native.while_loop(cond_jaxpr, body, cond_nconsts, body_nconsts, updated)
    kernel = _kernel(loop)
    taken = _taken(body, body_nconsts, num_carry,
                   {i - cond_nconsts + len(copies) for i in offered if i >= first}, loop)
    taken_out.extend(first + j for j in taken)
    try:
        if kernel is None:
            return _while_steps(args, cond_jaxpr, body, cond_nconsts, body_nconsts, taken)
        return _rerun_on_exit(loop, kernel, lambda kernel: _while_kernel(
            loop, kernel, args, cond_jaxpr, body, cond_nconsts, body_nconsts, updated, taken))
    finally:
        for c in copies:
            memory.untrack(c)


def _while_kernel(loop, kernel, args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts,
                  updated, taken):
    num_carry = len(body_jaxpr.out_avals)
    peak = max(_iteration_peak(cond_jaxpr),
               _iteration_peak(body_jaxpr, _positions(body_nconsts, updated)))
    carry = list(args[cond_nconsts + body_nconsts:])
    held = _kernel_carries(loop, kernel, carry, updated, taken)
    try:
        operands = [*cond_jaxpr.consts, *args[:cond_nconsts], *body_jaxpr.consts,
                    *args[cond_nconsts:cond_nconsts + body_nconsts], *carry]
        first = len(operands) - num_carry
        out = _run_kernel(loop, kernel, peak, operands, {first + j for j in updated})
    finally:  # (held through the kernel's run; now its result holds them)
        _let_go(held, [True] * len(held))
    return [np.asarray(c, a.dtype) for c, a in zip(out, body_jaxpr.out_avals)]


def _while_steps(args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, taken):
    cconsts = args[:cond_nconsts]
    bconsts = args[cond_nconsts:cond_nconsts + body_nconsts]
    carry = list(args[cond_nconsts + body_nconsts:])
    owned = [j in taken for j in range(len(carry))]
    updated = _updated_carries(body_jaxpr, body_nconsts, len(carry)) \
        if default_updates() else ()
    try:
        while evaluate(cond_jaxpr, *cconsts, *carry)[0]:
            donated = _hand_over(carry, owned, updated)
            outs = evaluate(body_jaxpr, *bconsts, *carry,
                            donated=_positions(body_nconsts, donated))
            carry, owned = _carried_on(carry, owned, outs)
    finally:
        _let_go(carry, owned)
    return carry


def run_cond(index, *ops, branches):
    return evaluate(branches[int(index)], *ops)


