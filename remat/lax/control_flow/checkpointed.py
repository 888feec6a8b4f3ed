"""Reverse mode of long loops in bounded memory: ``scan(..., checkpoints=K)`` and a
reverse-differentiable ``while_loop(..., max_steps=, checkpoints=)``.

Differentiating a loop of ``n`` steps normally keeps every step's residuals. With
``checkpoints=K`` the forward pass keeps only ``K`` carries (and the last step's input), and
the backward pass recomputes each state it needs from the nearest earlier checkpoint, placing
new checkpoints as it goes, with the binomial schedule of Griewank & Walther ("revolve",
ACM TOMS 26(1), 2000): the fewest forward steps any schedule with ``K`` checkpoints can take,
``r*n - C(K+r, r-1)`` where ``r`` is the smallest integer with ``C(K+r, r) >= n``.

A ``while_loop``'s trip count is unknown while it runs, so its forward pass places
checkpoints online: Stumm & Walther's algorithm (SIAM J. Sci. Comput. 32(2), 2010) while it is
optimal (up to ``C(K+2, 2) - 1`` steps), then Wang & Moin's dynamic checkpointing (SIAM J.
Sci. Comput. 31(4), 2009). Its backward pass runs the binomial schedule from whatever
checkpoints are held, deciding each move with integer arithmetic inside the loop.

Each loop is a primitive with its rules: the primal (``checkpointed_scan``,
``checkpointed_while``) runs the plain loop; its JVP is a forward sweep that stores the
checkpoints (``checkpointed_while_fwd`` for a while loop, whose batching keeps the schedule
unbatched) and a primitive linear in the tangents (``checkpointed_scan_lin``,
``checkpointed_while_lin``) whose impl, JVP and batching are forward mode from the first
checkpoint and whose transpose is the checkpointed backward pass.
"""

import functools

import numpy as np

from remat import core, dtypes, exec
from remat.call import recompute_whole_rule
from remat.core import Primitive
from remat.interpreters import ad, batching
from remat.interpreters import partial_eval as pe
from remat.lax import elementwise
from remat.lax import shape as lax_shape
from remat.lax.control_flow import conditionals, loops
from remat.lax.control_flow import loops as lax_loops
from remat.lax.control_flow.common import _or, _run, _stage
from remat.lax.control_flow.loops import (
    _scan_abstract_eval,
    fori_loop,
    scan_p,
)
from remat.lax.control_flow.revolve import (
    _I32,
    _INT_MAX,
    _online_slot,
    _split_traced,
    checkpoint_count,
    default_while_checkpoints,
    scan_schedule,
)
from remat.lax.elementwise import (
    add,
    bitwise_and,
    bitwise_not,
    convert_element_type,
    eq,
    ge,
    gt,
    lt,
    select,
    sub,
)
from remat.lax.identity import copy_p
from remat.lax.reductions import argmax, argmin, reduce_or, reduce_sum
from remat.lax.shape import expand_dims
from remat.lax.slicing import dynamic_index_in_dim, dynamic_update_index_in_dim, index_in_dim
from remat.tree_util import tree_flatten, tree_unflatten

# --- what the loops share --------------------------------------------------------------------


def _zeros(aval):
    return lax_shape.full(aval.shape, 0, aval.dtype)


# The checkpoints are stored in one array per carry leaf, ``K + 1`` states each: the last slot
# is scratch. A loop writes the state it may store at every step, into its slot or into the
# scratch slot, with one ``dynamic_update_slice`` whose operand (the store, a carry of the loop)
# dies there: the executor writes it in place, so the store is never copied and a loop holds
# ``K + 1`` states however many it stores. A read copies the state out, so no view of the store
# is alive when it is written.


def _store_avals(avals, k):
    return [a.update(shape=(k + 1,) + a.shape, weak_type=False) for a in avals]


def _new_store(avals, k):
    return [_zeros(a) for a in _store_avals(avals, k)]


def _read(buf, slot):
    """A copy of the state in ``slot`` of the checkpoint store."""
    return [copy_p.bind(dynamic_index_in_dim(b, slot, 0, keepdims=False)) for b in buf]


def _write(buf, state, slot, pred, k):
    """The checkpoint store with ``state`` in ``slot`` where ``pred``, else in the scratch
    slot (the stored states untouched)."""
    slot = select(pred, slot, _I32(k))
    return [dynamic_update_index_in_dim(b, s, slot, 0) for b, s in zip(buf, state)]


def _differentiated():
    """Whether a derivative of what is being traced is being taken (the backward pass itself
    differentiated, as in ``grad(grad(f))``): its loops must then be reverse-differentiable."""
    trace = core.current_trace()
    while trace is not None:
        if isinstance(trace, ad.JVPTrace):
            return True
        trace = trace.parent
    return False


def _while(cond, body, init, checkpoints):
    """A while loop of the backward pass: plain, or checkpointed where it is differentiated."""
    if _differentiated():
        return while_loop(cond, body, init, checkpoints=checkpoints)
    return lax_loops.while_loop(cond, body, init)


def _fori(count, fn, init, checkpoints):
    """``fori_loop(0, count, fn, init)`` for a traced ``count`` (see ``_while``)."""
    return _while(lambda st: lt(st[0], count),
                  lambda st: [add(st[0], _I32(1)), fn(st[0], st[1])],
                  [_I32(0), init], checkpoints)[1]



def _move(b, cur, cur_pos, buf, pos, held, advance, k):
    """One move of a backward pass whose next step to reverse is ``b - 1``: restore the
    latest checkpoint when the state at hand is spent (``cur_pos < 0``), advance by the
    binomial split of what is left before that step (``advance(state, start, count)``), and
    store the state in a free slot unless it reached the step (``pos``: each slot's step, -1
    when free; ``held`` slots in use). Returns ``(stored, state, its step, buf, pos,
    held)``."""
    zero, one = _I32(0), _I32(1)
    target = sub(b, one)
    top = argmax(pos, 0, _I32)  # (read at every move: no view of the store outlives it)
    cur, cur_pos = conditionals.cond(lt(cur_pos, zero), lambda c, p, r, q: [list(r), q],
                                     lambda c, p, r, q: [list(c), p], list(cur), cur_pos,
                                     _read(buf, top), dynamic_index_in_dim(pos, top, 0, False))
    left = sub(b, cur_pos)
    free = sub(_I32(k), held)
    m = conditionals.cond(bitwise_and(gt(left, one), gt(free, zero)),
                 lambda l, f: _split_traced(l, add(f, one)),
                 lambda l, f: sub(l, one), left, free)
    cur = advance(cur, cur_pos, m)
    cur_pos = add(cur_pos, m)
    store = bitwise_and(gt(free, zero), lt(cur_pos, target))
    slot = argmin(pos, 0, _I32)
    buf = _write(buf, cur, slot, store, k)
    pos = conditionals.cond(
        store, lambda p, i, q: dynamic_update_index_in_dim(p, expand_dims(q, (0,)), i, 0),
        lambda p, i, q: p, pos, slot, cur_pos)
    held = select(store, add(held, one), held)
    return store, cur, cur_pos, buf, pos, held


def _after_reverse(stored, b, cur_pos, pos, held):
    """``(b, cur_pos, pos, held)`` after a move: when it reversed step ``b - 1``, the next step
    to reverse is the one before, the state at hand is spent and a checkpoint of the reversed
    step's input is freed."""
    done = bitwise_not(stored)
    t = sub(b, _I32(1))
    at_t = eq(pos, t)
    drop = bitwise_and(done, reduce_or(at_t, (0,)))
    freed = select(at_t, lax_shape.full(core.get_aval(pos).shape, -1, _I32), pos)
    return (select(done, t, b), select(done, _I32(-1), cur_pos),
            select(done, freed, pos), select(drop, sub(held, _I32(1)), held))


def _carry_only(jaxpr, num_carry):
    """The body without its per-step outputs: what advancing through steps runs."""
    n_out = len(jaxpr.out_avals)
    closed, _ = pe.dce_closed_jaxpr(jaxpr, [True] * num_carry + [False] * (n_out - num_carry))
    return closed


def _vjp_step(jaxpr, args, nonzero, cts):
    """Cotangents of the ``nonzero`` inputs of ``jaxpr`` at ``args`` for output cotangents
    ``cts`` (None: zero): one step run taped and reversed."""
    where = [i for i, nz in enumerate(nonzero) if nz]
    if not where:
        return []

    def step(*diff):
        full = list(args)
        for i, d in zip(where, diff):
            full[i] = d
        return _run(jaxpr, *full)

    _, linear, out_nz = ad.linearize_flat(step, [args[i] for i in where])
    given = [ad.instantiate_zeros(ad.Zero(a.to_tangent_aval())) if c is None else c
             for c, a, nz in zip(cts, jaxpr.out_avals, out_nz) if nz]
    undefined = [ad.UndefinedPrimal(core.get_aval(args[i]).to_tangent_aval()) for i in where]
    out = ad.backward_pass(linear.jaxpr, linear.consts, undefined, given)
    return [ad.instantiate_zeros(c) for c in out]


def _nonzero_fixed_point(jaxpr, num_fixed, carry_nz, rest_nz, n_extra_out):
    """Which carries have nonzero tangents: those given, and every carry a nonzero input
    reaches through the body. Returns ``(carry_nz, out_nz)``."""
    fixed, rest = list(num_fixed), list(rest_nz)
    carry_nz = list(carry_nz)
    while True:
        inst = tuple(carry_nz) + (False,) * n_extra_out
        _, out_nz = ad.jvp_jaxpr(jaxpr, tuple(fixed + carry_nz + rest), inst)
        new = _or(carry_nz, out_nz[:len(carry_nz)])
        if new == carry_nz:
            return carry_nz, out_nz
        carry_nz = new


def _split(seq, *sizes):
    seq, out, i = list(seq), [], 0
    for n in sizes:
        out.append(seq[i:i + n])
        i += n
    out.append(seq[i:])
    return out


def _tangents(values, nonzero):
    return [ad.instantiate_zeros(t) for t, nz in zip(values, nonzero) if nz]


def _full_tangents(given, nonzero, avals):
    it = iter(given)
    return [next(it) if nz else ad.Zero(a.to_tangent_aval()) for nz, a in zip(nonzero, avals)]


# --- impls traced once -----------------------------------------------------------------------


def _impl_from(fn):
    """An impl running ``fn`` (a traceable function of the operands and params) as a jaxpr
    traced once per body jaxpr, params and operand types: an executor calling the impl at
    every run does not retrace."""

    @core.memoize_on_jaxpr
    def staged(body, name, rest, avals):
        params = dict(rest, **{name: body})
        return _stage(lambda *args: fn(*args, **params), avals)

    def impl(*args, **params):
        name = "jaxpr" if "jaxpr" in params else "body_jaxpr"
        rest = tuple((k, v) for k, v in params.items() if k != name)
        with core.set_current_trace(core.eval_trace):  # traced as the plain computation
            closed = staged(params[name], name, rest, tuple(core.get_aval(a) for a in args))
        # (run by the executor: its results are buffers of its own, which a caller's plan
        # may hand over to a loop writing into them)
        return exec.evaluate(closed, *[getattr(a, "_buf", a) for a in args])

    impl.__name__ = fn.__name__
    return impl


def _define_linear_loop(prim, forward, abstract_eval, transpose):
    """A loop linear in its tangents computed by ``forward`` (traceable): its impl, JVP and
    batching are ``forward``'s own; its transpose is the checkpointed backward pass."""

    def jvp(primals, tangents, **params):
        return ad.jvp_flat(functools.partial(forward, **params), primals, tangents)

    def batch(vals, dims, **params):
        size = batching.axis_size_of(vals, dims)
        return batching.batch_flat(functools.partial(forward, **params), size, vals, dims)

    prim.def_impl(_impl_from(forward))
    prim.def_abstract_eval(abstract_eval)
    ad.primitive_jvps[prim] = jvp
    ad.primitive_transposes[prim] = transpose
    batching.primitive_batchers[prim] = batch


# --- checkpointed scan -----------------------------------------------------------------------

checkpointed_scan_p = Primitive("checkpointed_scan")
checkpointed_scan_p.multiple_results = True


def _ckpt_scan_impl(*args, jaxpr, num_consts, num_carry, length, reverse, unroll, checkpoints):
    return scan_p.bind(*args, jaxpr=jaxpr, num_consts=num_consts, num_carry=num_carry,
                       length=length, reverse=reverse, unroll=unroll)


def _ckpt_scan_abstract_eval(*avals, checkpoints, **params):
    return _scan_abstract_eval(*avals, **params)


def _scan_forward(jaxpr, consts, init, xs, schedule, reverse, unroll):
    """The forward pass: the scan's outputs, its checkpoint buffers (``K + 1`` states each, the
    first the loop's input), each slot's step (-1: free) and the last step's input."""
    num_carry = len(init)
    k = schedule.checkpoints
    first = schedule.first_sweep
    stored = np.full(k, -1, _I32)
    stored[:len(first)] = first
    buf = _new_store([core.get_aval(c) for c in init], k)

    def step(state, x):
        carry, _, buf, t, j = state
        store = eq(t, dynamic_index_in_dim(stored, elementwise.min(j, _I32(k - 1)), 0, False))
        buf = _write(buf, carry, j, store, k)
        outs = _run(jaxpr, *consts, *carry, *x)
        return (outs[:num_carry], list(carry), buf, add(t, _I32(1)),
                select(store, add(j, _I32(1)), j)), outs[num_carry:]

    (carry, last, buf, _, _), ys = lax_loops.scan(
        step, (list(init), list(init), buf, _I32(0), _I32(0)), list(xs), length=schedule.steps,
        reverse=reverse, unroll=unroll)
    return carry, ys, buf, stored, last


def _ckpt_scan_jvp(primals, tangents, *, jaxpr, num_consts, num_carry, length, reverse,
                   unroll, checkpoints):
    params = dict(jaxpr=jaxpr, num_consts=num_consts, num_carry=num_carry, length=length,
                  reverse=reverse, unroll=unroll)
    nz = [type(t) is not ad.Zero for t in tangents]
    const_nz, carry_nz, xs_nz = _split(nz, num_consts, num_carry)
    n_ys = len(jaxpr.out_avals) - num_carry
    if not any(nz) or length == 0:
        return ad.primitive_jvps[scan_p](primals, tangents, **params)
    carry_nz, out_nz = _nonzero_fixed_point(jaxpr, const_nz, carry_nz, xs_nz, n_ys)
    ys_nz = out_nz[num_carry:]
    schedule = scan_schedule(length, checkpoints)
    consts, init, xs = _split(primals, num_consts, num_carry)
    carry, ys, buf, pos, last = _scan_forward(jaxpr, consts, init, xs, schedule, reverse,
                                              unroll)
    const_t, init_t, xs_t = _split(tangents, num_consts, num_carry)
    lin = dict(params, checkpoints=schedule.checkpoints, const_nz=tuple(const_nz),
               carry_nz=tuple(carry_nz), xs_nz=tuple(xs_nz), ys_nz=tuple(ys_nz))
    t_out = checkpointed_scan_lin_p.bind(
        *consts, *xs, *buf, pos, *last, *_tangents(const_t, const_nz),
        *_tangents(init_t, carry_nz), *_tangents(xs_t, xs_nz), **lin)
    carry_avals = jaxpr.out_avals[:num_carry]
    y_avals = [a.update(shape=(length,) + a.shape) for a in jaxpr.out_avals[num_carry:]]
    return list(carry) + list(ys), _full_tangents(t_out, list(carry_nz) + list(ys_nz),
                                                  list(carry_avals) + y_avals)


def _ckpt_scan_batch(vals, dims, *, jaxpr, num_consts, num_carry, length, reverse, unroll,
                     checkpoints):
    size = batching.axis_size_of(vals, dims)
    consts, carry, xs = _split(vals, num_consts, num_carry)
    cd, kd, xd = _split(dims, num_consts, num_carry)
    const_b = [d is not None for d in cd]
    xs_b = [d is not None for d in xd]
    n_ys = len(jaxpr.out_avals) - num_carry
    carry_b = [d is not None for d in kd]
    while True:
        _, out_b = batching.batch_jaxpr(jaxpr, size, tuple(const_b + carry_b + xs_b),
                                        tuple(carry_b) + (False,) * n_ys)
        new = _or(carry_b, out_b[:num_carry])
        if new == carry_b:
            break
        carry_b = new
    body, out_b = batching.batch_jaxpr(jaxpr, size, tuple(const_b + carry_b + xs_b),
                                       tuple(carry_b) + (False,) * n_ys)
    consts = [x if d is None else batching.moveaxis(x, d, 0) for x, d in zip(consts, cd)]
    carry = [batching.bdim_at_front(x, d, size) if b else x
             for x, d, b in zip(carry, kd, carry_b)]
    xs = [x if d is None else batching.moveaxis(x, d, 1) for x, d in zip(xs, xd)]
    outs = checkpointed_scan_p.bind(*consts, *carry, *xs, jaxpr=body, num_consts=num_consts,
                                    num_carry=num_carry, length=length, reverse=reverse,
                                    unroll=unroll, checkpoints=checkpoints)
    return outs, [0 if b else None for b in carry_b] + \
        [1 if b else None for b in out_b[num_carry:]]


checkpointed_scan_p.def_impl(_ckpt_scan_impl)
checkpointed_scan_p.def_abstract_eval(_ckpt_scan_abstract_eval)
ad.primitive_jvps[checkpointed_scan_p] = _ckpt_scan_jvp
batching.primitive_batchers[checkpointed_scan_p] = _ckpt_scan_batch
pe.partial_eval_jaxpr_custom_rules[checkpointed_scan_p] = recompute_whole_rule

# The tangents of a checkpointed scan, linear in them: operands are the residuals (consts, xs,
# checkpoint buffers, each slot's step, the last step's input) and then the nonzero tangents
# (consts, carry, xs).

checkpointed_scan_lin_p = Primitive("checkpointed_scan_lin")
checkpointed_scan_lin_p.multiple_results = True


def _scan_lin_operands(args, num_consts, num_carry, n_xs, checkpoints):
    consts, xs, buf, rest = _split(args, num_consts, n_xs, num_carry)
    return consts, xs, buf, rest[0], rest[1:1 + num_carry], rest[1 + num_carry:]


def _scan_lin_forward(*args, jaxpr, num_consts, num_carry, length, reverse, unroll,
                      checkpoints, const_nz, carry_nz, xs_nz, ys_nz):
    """Forward mode: the JVP of the scan rerun from its input (the first checkpoint)."""
    n_xs = len(xs_nz)
    consts, xs, buf, _, _, tangents = _scan_lin_operands(args, num_consts, num_carry, n_xs,
                                                         checkpoints)
    init = [index_in_dim(b, 0, 0, keepdims=False) for b in buf[:num_carry]]
    const_t, init_t, xs_t = _split(tangents, sum(const_nz), sum(carry_nz))
    in_avals = jaxpr.in_avals
    full_t = (_full_tangents(const_t, const_nz, in_avals[:num_consts]) +
              _full_tangents(init_t, carry_nz, in_avals[num_consts:num_consts + num_carry]) +
              _full_tangents(xs_t, xs_nz, [core.get_aval(x) for x in xs]))

    def loop(*primals):
        return scan_p.bind(*primals, jaxpr=jaxpr, num_consts=num_consts, num_carry=num_carry,
                           length=length, reverse=reverse, unroll=unroll)

    _, t_out = ad.jvp_flat(loop, [*consts, *init, *xs], full_t)
    return _tangents(t_out[:num_carry], carry_nz) + _tangents(t_out[num_carry:], ys_nz)


def _scan_lin_abstract_eval(*avals, jaxpr, num_carry, length, carry_nz, ys_nz, **_):
    outs = [a.to_tangent_aval() for a, nz in zip(jaxpr.out_avals[:num_carry], carry_nz) if nz]
    return outs + [a.update(shape=(length,) + a.shape).to_tangent_aval()
                   for a, nz in zip(jaxpr.out_avals[num_carry:], ys_nz) if nz]


def _accumulate(acc, ct):
    """``acc + ct`` for a constant's cotangent summed over the steps; an integer constant's is
    float0 (no values: it stays as it is)."""
    if core.get_aval(acc).dtype == dtypes.float0:
        return acc
    return add(acc, ct)


def _scan_lin_transpose(cts, *args, jaxpr, num_consts, num_carry, length, reverse, unroll,
                        checkpoints, const_nz, carry_nz, xs_nz, ys_nz):
    """The backward pass: a loop of the binomial schedule's moves (``_move``), each step
    reversed by its own VJP when a move reaches it."""
    n_xs = len(xs_nz)
    consts, xs, buf, pos, last, tangents = _scan_lin_operands(args, num_consts, num_carry,
                                                              n_xs, checkpoints)
    for r in [*consts, *xs, *buf, pos, *last]:
        assert not ad.is_undefined_primal(r), "checkpointed_scan_lin residual is linear"
    schedule = scan_schedule(length, checkpoints)
    n_ct_carry = sum(carry_nz)
    ct_carry = [ad.instantiate_zeros(c) for c in cts[:n_ct_carry]]
    ct_ys = [ad.instantiate_zeros(c) for c in cts[n_ct_carry:]]
    body = _carry_only(jaxpr, num_carry)
    x_nz = [x for x, nz in zip(xs, xs_nz) if nz]

    def index(t):
        return sub(_I32(length - 1), t) if reverse else t

    def at(t, arrays):
        return [dynamic_index_in_dim(a, index(t), 0, False) for a in arrays]

    def advance(state, start, count):
        def one(i, c):
            return _run(body, *consts, *c, *at(add(start, i), xs))

        return _fori(count, one, list(state), checkpoints)

    def reverse_step(cur, t, ct_c, acc):
        it = iter(ct_c)
        ct_out = [next(it) if nz else None for nz in carry_nz]
        it = iter(at(t, ct_ys))
        ct_out += [next(it) if nz else None for nz in ys_nz]
        in_cts = _vjp_step(jaxpr, [*consts, *cur, *at(t, xs)], [*const_nz, *carry_nz, *xs_nz],
                           ct_out)
        c_ct, k_ct, x_ct = _split(in_cts, sum(const_nz), sum(carry_nz))
        return [k_ct, [_accumulate(a, c) for a, c in zip(acc, c_ct)], x_ct]

    def move(state, _):
        b, cur, cur_pos, buf, pos, held, ct_c, acc = state
        stored, cur, cur_pos, buf, pos, held = _move(b, cur, cur_pos, buf, pos, held, advance,
                                                     checkpoints)
        ct_c, acc, x_ct = conditionals.cond(
            stored, lambda c, t, g, a: [list(g), list(a), [_zeros(core.get_aval(x).update(
                shape=core.get_aval(x).shape[1:]).to_tangent_aval()) for x in x_nz]],
            reverse_step, list(cur), sub(b, _I32(1)), list(ct_c), list(acc))
        b, cur_pos, pos, held = _after_reverse(stored, b, cur_pos, pos, held)
        return (b, cur, cur_pos, buf, pos, held, ct_c, acc), x_ct

    acc = [_zeros(a.to_tangent_aval()) for a, nz in zip(jaxpr.in_avals[:num_consts], const_nz)
           if nz]
    init = (_I32(length), list(last), _I32(length - 1), list(buf), pos,
            _I32(len(schedule.first_sweep)), ct_carry, acc)
    (_, _, _, _, _, _, ct_init, ct_consts), x_cts = lax_loops.scan(move, init, None,
                                                             length=schedule.moves)
    if x_nz:  # the moves that reversed a step, in the order of xs
        rows = schedule.reverse_move[::-1] if reverse else schedule.reverse_move
        _, x_cts = lax_loops.scan(lambda c, r: (c, [dynamic_index_in_dim(x, r, 0, False)
                                              for x in x_cts]), None, rows)
    lin = [ad.is_undefined_primal(t) for t in tangents]
    out = list(ct_consts) + list(ct_init) + list(x_cts)
    return [None] * (len(args) - len(tangents)) + [c if li else None
                                                   for c, li in zip(out, lin)]


_define_linear_loop(checkpointed_scan_lin_p, _scan_lin_forward, _scan_lin_abstract_eval,
                    _scan_lin_transpose)


# --- the user-facing scan --------------------------------------------------------------------


def _strong_avals(init_flat):
    """The avals of the carry's strongly typed leaves: a memory budget too small for them is
    an error before the body is traced (the weakly typed ones may change type in it)."""
    return [a for a in map(core.get_aval, init_flat) if not a.weak_type]


def scan(f, init, xs=None, length=None, reverse=False, unroll=1, *, checkpoints=None,
         memory_budget=None):
    """``lax.scan`` whose reverse mode keeps at most ``checkpoints`` carries (or as many as
    ``memory_budget`` bytes hold) and recomputes the rest with the binomial schedule."""
    init_flat, init_tree = tree_flatten(init)
    k = checkpoint_count(checkpoints, memory_budget, _strong_avals(init_flat), "scan")
    if k is None:
        return loops.scan(f, init, xs, length, reverse, unroll)
    xs_flat, xs_tree = tree_flatten(xs)
    length = loops.scan_length(xs_flat, length)
    if length == 0:
        return loops.scan(f, init, xs, length, reverse, unroll)
    jaxpr, consts, carry_out_tree, y_tree, init_flat = loops.trace_scan_body(
        f, init_flat, init_tree, xs_flat, xs_tree)
    if memory_budget is not None:  # the whole carry, of the types the body promoted it to
        k = checkpoint_count(None, memory_budget, [core.get_aval(x) for x in init_flat],
                             "scan")
    n_carry = len(init_flat)
    outs = checkpointed_scan_p.bind(
        *consts, *init_flat, *xs_flat, jaxpr=jaxpr, num_consts=len(consts),
        num_carry=n_carry, length=length, reverse=bool(reverse),
        unroll=int(unroll), checkpoints=min(k, length))
    return (tree_unflatten(carry_out_tree, outs[:n_carry]),
            tree_unflatten(y_tree, outs[n_carry:]))


# --- checkpointed while loop -----------------------------------------------------------------


def _loop_functions(cond_jaxpr, body_jaxpr, cconsts, bconsts):
    def cond(val):
        return _run(cond_jaxpr, *cconsts, *val)[0]

    def body(val):
        return _run(body_jaxpr, *bconsts, *val)

    def masked(val):
        """A step that leaves a finished state as it is (a batch's elements finish apart)."""
        pred = cond(val)
        return [select(pred, new, old) for new, old in zip(body(val), val)]

    return cond, body, masked


def _bounded(cond, max_steps):
    if max_steps is None:
        return lambda step, val: cond(val)
    return lambda step, val: bitwise_and(lt(step, _I32(max_steps)), cond(val))


checkpointed_while_p = Primitive("checkpointed_while")
checkpointed_while_p.multiple_results = True


def _ckpt_while_loop(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, max_steps,
                     checkpoints):
    """The primal: the loop, stopped after ``max_steps`` steps when given."""
    cconsts, bconsts, init = _split(args, cond_nconsts, body_nconsts)
    cond, body, _ = _loop_functions(cond_jaxpr, body_jaxpr, cconsts, bconsts)
    bounded = _bounded(cond, max_steps)
    _, out = lax_loops.while_loop(lambda st: bounded(st[0], st[1]),
                            lambda st: [add(st[0], _I32(1)), body(st[1])],
                            [_I32(0), list(init)])
    return out


def _ckpt_while_abstract_eval(*avals, body_jaxpr, **_):
    return body_jaxpr.out_avals


def _ckpt_while_batch(vals, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts,
                      max_steps, checkpoints):
    ops, cond_j, body_j, nc, nb, kb = loops.batch_while(vals, dims, cond_jaxpr, body_jaxpr,
                                                        cond_nconsts, body_nconsts)
    outs = checkpointed_while_p.bind(*ops, cond_jaxpr=cond_j, body_jaxpr=body_j,
                                     cond_nconsts=nc, body_nconsts=nb, max_steps=max_steps,
                                     checkpoints=checkpoints)
    return outs, [0 if b else None for b in kb]


def _ckpt_while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts,
                    max_steps, checkpoints):
    params = dict(cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr, cond_nconsts=cond_nconsts,
                  body_nconsts=body_nconsts, max_steps=max_steps, checkpoints=checkpoints)
    nz = [type(t) is not ad.Zero for t in tangents]
    _, bconst_nz, carry_nz = _split(nz, cond_nconsts, body_nconsts)
    if not any(bconst_nz + carry_nz):
        outs = checkpointed_while_p.bind(*primals, **params)
        return outs, [ad.Zero(core.get_aval(o).to_tangent_aval()) for o in outs]
    carry_nz, _ = _nonzero_fixed_point(body_jaxpr, bconst_nz, carry_nz, [], 0)
    n_carry = len(carry_nz)
    fwd = checkpointed_while_fwd_p.bind(*primals, **params)
    final, last, buf, (pos, steps) = _split(fwd, n_carry, n_carry, n_carry)
    cconsts, bconsts, _ = _split(primals, cond_nconsts, body_nconsts)
    _, bconst_t, init_t = _split(tangents, cond_nconsts, body_nconsts)
    t_out = checkpointed_while_lin_p.bind(
        *cconsts, *bconsts, *buf, pos, steps, *last, *_tangents(bconst_t, bconst_nz),
        *_tangents(init_t, carry_nz), **params, bconst_nz=tuple(bconst_nz),
        carry_nz=tuple(carry_nz))
    return final, _full_tangents(t_out, carry_nz, body_jaxpr.out_avals)


checkpointed_while_p.def_impl(_impl_from(_ckpt_while_loop))
checkpointed_while_p.def_abstract_eval(_ckpt_while_abstract_eval)
ad.primitive_jvps[checkpointed_while_p] = _ckpt_while_jvp
batching.primitive_batchers[checkpointed_while_p] = _ckpt_while_batch
pe.partial_eval_jaxpr_custom_rules[checkpointed_while_p] = recompute_whole_rule

# The forward pass of a differentiated while loop: the final state, the last step's input,
# the checkpoint buffers (one per carry leaf, ``checkpoints + 1`` states each, the last
# scratch), each slot's step (-1: empty) and the number of steps run.

checkpointed_while_fwd_p = Primitive("checkpointed_while_fwd")
checkpointed_while_fwd_p.multiple_results = True


def _while_forward(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, max_steps,
                   checkpoints):
    cconsts, bconsts, init = _split(args, cond_nconsts, body_nconsts)
    cond, body, _ = _loop_functions(cond_jaxpr, body_jaxpr, cconsts, bconsts)
    bounded = _bounded(cond, max_steps)
    k = checkpoints
    buf = _new_store(body_jaxpr.out_avals, k)
    pos = lax_shape.full((k,), -1, _I32)
    level = dynamic_update_index_in_dim(lax_shape.full((k,), 0, _I32),
                                            lax_shape.full((1,), _INT_MAX, _I32), _I32(0), 0)
    sw = [_I32(0), _I32(k), _I32(k), np.bool_(True)]

    def step_fn(st):
        step, sw, level, val, _, buf, pos = st
        save, slot, sw, level = _online_slot(step, sw, level, pos, k, max_steps)
        buf = _write(buf, val, slot, save, k)
        pos = conditionals.cond(
            save, lambda p, i, s: dynamic_update_index_in_dim(p, expand_dims(s, (0,)), i, 0),
            lambda p, i, s: p, pos, slot, step)
        return [add(step, _I32(1)), sw, level, body(val), list(val), buf, pos]

    steps, _, _, final, last, buf, pos = _while(
        lambda st: bounded(st[0], st[3]), step_fn,
        [_I32(0), sw, level, list(init), list(init), buf, pos], k)
    return [*final, *last, *buf, pos, steps]


def _while_fwd_abstract_eval(*avals, body_jaxpr, checkpoints, **_):
    carry = list(body_jaxpr.out_avals)
    buf = _store_avals(carry, checkpoints)
    return carry + carry + buf + [core.ShapedArray((checkpoints,), np.dtype(_I32)),
                                  core.ShapedArray((), np.dtype(_I32))]


def _while_fwd_batch(vals, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts,
                     max_steps, checkpoints):
    ops, cond_j, body_j, nc, nb, kb = loops.batch_while(vals, dims, cond_jaxpr, body_jaxpr,
                                                        cond_nconsts, body_nconsts)
    outs = checkpointed_while_fwd_p.bind(*ops, cond_jaxpr=cond_j, body_jaxpr=body_j,
                                         cond_nconsts=nc, body_nconsts=nb,
                                         max_steps=max_steps, checkpoints=checkpoints)
    carry_dims = [0 if b else None for b in kb]
    buf_dims = [1 if b else None for b in kb]
    return outs, carry_dims + carry_dims + buf_dims + [None, None]


def _while_fwd_jvp(primals, tangents, **params):
    return ad.jvp_flat(functools.partial(_while_forward, **params), primals, tangents)


checkpointed_while_fwd_p.def_impl(_impl_from(_while_forward))
checkpointed_while_fwd_p.def_abstract_eval(_while_fwd_abstract_eval)
ad.primitive_jvps[checkpointed_while_fwd_p] = _while_fwd_jvp
batching.primitive_batchers[checkpointed_while_fwd_p] = _while_fwd_batch

# The tangents of a checkpointed while loop, linear in them: operands are the residuals (cond
# and body consts, checkpoint buffers, slot steps, step count, the last step's input) and then
# the nonzero tangents (body consts, carry).

checkpointed_while_lin_p = Primitive("checkpointed_while_lin")
checkpointed_while_lin_p.multiple_results = True


def _while_lin_operands(args, cond_nconsts, body_nconsts, n_carry, checkpoints):
    cconsts, bconsts, buf, rest = _split(args, cond_nconsts, body_nconsts, n_carry)
    pos, steps, rest = rest[0], rest[1], rest[2:]
    last, tangents = rest[:n_carry], rest[n_carry:]
    return cconsts, bconsts, buf, pos, steps, last, tangents


def _while_lin_forward(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, max_steps,
                       checkpoints, bconst_nz, carry_nz):
    """Forward mode: the JVP of the loop rerun from its input (the first checkpoint)."""
    n_carry = len(carry_nz)
    cconsts, bconsts, buf, _, steps, _, tangents = _while_lin_operands(
        args, cond_nconsts, body_nconsts, n_carry, checkpoints)
    init = [index_in_dim(b, 0, 0, keepdims=False) for b in buf[:n_carry]]
    bconst_t, init_t = _split(tangents, sum(bconst_nz))[:2]
    full_t = (_full_tangents(bconst_t, bconst_nz, [core.get_aval(b) for b in bconsts]) +
              _full_tangents(init_t, carry_nz, body_jaxpr.out_avals))

    def run(*primals):
        bc, val = primals[:body_nconsts], primals[body_nconsts:]
        _, _, masked = _loop_functions(cond_jaxpr, body_jaxpr, cconsts, bc)
        return fori_loop(_I32(0), steps, lambda i, v: masked(v), list(val))

    _, t_out = ad.jvp_flat(run, [*bconsts, *init], full_t)
    return _tangents(t_out, carry_nz)


def _while_lin_abstract_eval(*avals, body_jaxpr, carry_nz, **_):
    return [a.to_tangent_aval() for a, nz in zip(body_jaxpr.out_avals, carry_nz) if nz]


def _while_lin_transpose(cts, *args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts,
                         max_steps, checkpoints, bconst_nz, carry_nz):
    """The backward pass from the checkpoints the forward pass left: a loop of the binomial
    schedule's moves (``_move``), each step reversed by its own VJP when a move reaches it."""
    n_carry = len(carry_nz)
    cconsts, bconsts, buf, pos, steps, last, tangents = _while_lin_operands(
        args, cond_nconsts, body_nconsts, n_carry, checkpoints)
    for r in [*cconsts, *bconsts, *buf, pos, steps, *last]:
        assert not ad.is_undefined_primal(r), "checkpointed_while_lin residual is linear"
    k = checkpoints
    one = _I32(1)
    _, _, masked = _loop_functions(cond_jaxpr, body_jaxpr, cconsts, bconsts)
    step_jaxpr = _stage(
        lambda *a: _loop_functions(cond_jaxpr, body_jaxpr, a[:cond_nconsts],
                                   a[cond_nconsts:cond_nconsts + body_nconsts])[2](
            list(a[cond_nconsts + body_nconsts:])),
        [core.get_aval(x) for x in [*cconsts, *bconsts]] + list(body_jaxpr.out_avals))
    acc = [_zeros(core.get_aval(b).to_tangent_aval()) for b, nz in zip(bconsts, bconst_nz)
           if nz]

    def advance(state, start, count):
        return _fori(count, lambda i, v: masked(v), list(state), k)

    def reverse_step(cur, ct, acc):
        it = iter(ct)
        ct_out = [next(it) if nz else None for nz in carry_nz]
        in_cts = _vjp_step(step_jaxpr, [*cconsts, *bconsts, *cur],
                           [False] * cond_nconsts + list(bconst_nz) + list(carry_nz), ct_out)
        b_ct, k_ct = in_cts[:sum(bconst_nz)], in_cts[sum(bconst_nz):]
        return [k_ct, [add(a, c) for a, c in zip(acc, b_ct)]]

    def move(st):
        b, cur, cur_pos, buf, pos, held, ct, acc = st
        stored, cur, cur_pos, buf, pos, held = _move(b, cur, cur_pos, buf, pos, held, advance,
                                                     k)
        ct, acc = conditionals.cond(stored, lambda c, g, a: [list(g), list(a)], reverse_step,
                           list(cur), list(ct), list(acc))
        b, cur_pos, pos, held = _after_reverse(stored, b, cur_pos, pos, held)
        return [b, cur, cur_pos, buf, pos, held, ct, acc]

    ct = [ad.instantiate_zeros(c) for c in cts]
    held = reduce_sum(convert_element_type(ge(pos, _I32(0)), _I32), (0,))
    st = _while(lambda st: gt(st[0], _I32(0)), move,
                [steps, list(last), sub(steps, one), list(buf), pos, held, ct, acc], k)
    lin = [ad.is_undefined_primal(t) for t in tangents]
    out = list(st[7]) + list(st[6])
    return [None] * (len(args) - len(tangents)) + [c if li else None for c, li in zip(out, lin)]


_define_linear_loop(checkpointed_while_lin_p, _while_lin_forward, _while_lin_abstract_eval,
                    _while_lin_transpose)


# --- the user-facing while loop --------------------------------------------------------------


def while_loop(cond_fun, body_fun, init_val, *, max_steps=None, checkpoints=None,
               memory_budget=None):
    """``lax.while_loop`` stopped after ``max_steps`` steps (when given) and differentiable in
    reverse mode with ``checkpoints`` stored carries (or ``memory_budget`` bytes of them;
    with only ``max_steps``, the fewest that keep the online schedule optimal)."""
    if max_steps is None and checkpoints is None and memory_budget is None:
        return loops.while_loop(cond_fun, body_fun, init_val)
    if max_steps is not None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)):
            raise TypeError(f"while_loop: max_steps must be None or an int, got "
                            f"{max_steps!r}.")
        if max_steps < 0:
            raise ValueError(f"while_loop: max_steps must be non-negative, got {max_steps}.")
        max_steps = int(max_steps)
    init_flat, init_tree = tree_flatten(init_val)
    k = checkpoint_count(checkpoints, memory_budget, _strong_avals(init_flat), "while_loop")
    if k is None:
        if max_steps is None:  # checkpoints='all' without a bound: JAX's while_loop
            return loops.while_loop(cond_fun, body_fun, init_val)
        k = max_steps if checkpoints == "all" else default_while_checkpoints(max_steps)
    cond_j, cond_consts, body_j, body_consts, body_tree, init_flat = loops.trace_while(
        cond_fun, body_fun, init_flat, init_tree)
    if memory_budget is not None:  # the whole carry, of the types the body promoted it to
        k = checkpoint_count(None, memory_budget, [core.get_aval(x) for x in init_flat],
                             "while_loop")
    if max_steps == 0:  # no step runs, but the result has the loop's (promoted) carry types
        return tree_unflatten(body_tree, init_flat)
    if max_steps is not None:
        k = min(k, max_steps)
    outs = checkpointed_while_p.bind(*cond_consts, *body_consts, *init_flat, cond_jaxpr=cond_j,
                                     body_jaxpr=body_j, cond_nconsts=len(cond_consts),
                                     body_nconsts=len(body_consts), max_steps=max_steps,
                                     checkpoints=k)
    return tree_unflatten(body_tree, outs)


loops.checkpointed_scan, loops.checkpointed_while_loop = scan, while_loop
