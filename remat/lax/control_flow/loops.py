"""``scan`` and ``while_loop`` with their rules, and ``fori_loop`` and ``map`` written on them."""

import inspect

import numpy as np

from remat import core, dtypes
from remat.call import recompute_whole_rule
from remat.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Primitive, Var
from remat.exec import loops as exec_loops
from remat.interpreters import ad, batching, discharge
from remat.interpreters import partial_eval as pe
from remat.lax.control_flow.common import (
    _capitalize,
    _leaf_paths,
    _live_consts,
    _mismatch_extra,
    _or,
    _permute,
    _run,
    _stage,
    _trace,
    _typematch,
    _with_extra_invars,
    _zeros,
)
from remat.lax.elementwise import add, convert_element_type, lt, select
from remat.lax.reductions import reduce_or
from remat.lax.shape import broadcast_in_dim
from remat.runtime import registry
from remat.tree_util import (
    tree_flatten,
    tree_structure,
    tree_unflatten,
)

# scan and while_loop with checkpoints, set by remat.lax.control_flow.checkpointed
checkpointed_scan = checkpointed_while_loop = None

# --- scan ------------------------------------------------------------------------------------

scan_p = Primitive("scan")
scan_p.multiple_results = True


def _scan_abstract_eval(*avals, jaxpr, num_consts, num_carry, length, reverse, unroll):
    _check_scan_operands(avals, jaxpr, num_consts, num_carry, length)
    return list(jaxpr.out_avals[:num_carry]) + \
        _stacked_avals(jaxpr.out_avals[num_carry:], length)


def _stacked_avals(avals, length):
    return [a.update(shape=(length,) + a.shape) for a in avals]


def _check_scan_operands(avals, jaxpr, num_consts, num_carry, length):
    """The operands have the body's input types (xs with a leading ``length`` axis): a rule
    that binds a scan wrongly fails here, where it is made, not at run time."""
    body = jaxpr.in_avals
    if len(avals) != len(body):
        raise TypeError(f"scan got {len(avals)} operands for a body of {len(body)} inputs")
    for i, (a, b) in enumerate(zip(avals, body)):
        want = b.shape if i < num_consts + num_carry else (length,) + b.shape
        if a.shape != want or a.dtype != b.dtype:
            raise TypeError(f"scan operand {i} has type {a.dtype}{list(a.shape)} where the body "
                            f"(num_consts={num_consts}, num_carry={num_carry}, "
                            f"length={length}) takes {b.dtype}{list(want)}")


scan_p.def_abstract_eval(_scan_abstract_eval)
scan_p.def_impl(exec_loops.run_scan)  # the executor runs the body, as a loop kernel when it can


def _scan_split(seq, num_consts, num_carry):
    seq = list(seq)
    return seq[:num_consts], seq[num_consts:num_consts + num_carry], seq[num_consts + num_carry:]


def _scan_jvp(primals, tangents, jaxpr, num_consts, num_carry, length, reverse, unroll):
    nz = [type(t) is not ad.Zero for t in tangents]
    const_nz, carry_nz, xs_nz = _scan_split(nz, num_consts, num_carry)
    n_ys = len(jaxpr.out_avals) - num_carry
    while True:
        inst = tuple(carry_nz) + (False,) * n_ys
        _, out_nz = ad.jvp_jaxpr(jaxpr, tuple(const_nz + carry_nz + xs_nz), inst)
        new = _or(carry_nz, out_nz[:num_carry])
        if new == carry_nz:
            break
        carry_nz = new
    inst = tuple(carry_nz) + (False,) * n_ys
    jvp_closed, out_nz = ad.jvp_jaxpr(jaxpr, tuple(const_nz + carry_nz + xs_nz), inst)
    # reorder [primals..., tangents...] into [consts, const_t, carry, carry_t, xs, xs_t]
    n_in = len(primals)
    t_pos = {i: n_in + k for k, i in enumerate([i for i, z in
                                                 enumerate(const_nz + carry_nz + xs_nz) if z])}
    groups = [range(num_consts), range(num_consts, num_consts + num_carry),
              range(num_consts + num_carry, n_in)]
    order = []
    for g in groups:
        order += list(g) + [t_pos[i] for i in g if i in t_pos]
    n_carry_t = sum(carry_nz)
    ys_nz = out_nz[num_carry:]
    out_t_pos = len(jaxpr.out_avals)
    out_order = list(range(num_carry)) + list(range(out_t_pos, out_t_pos + n_carry_t)) + \
        list(range(num_carry, out_t_pos)) + \
        list(range(out_t_pos + n_carry_t, out_t_pos + n_carry_t + sum(ys_nz)))
    body = _permute(jvp_closed, order, out_order)
    consts, init, xs = _scan_split(primals, num_consts, num_carry)
    ct, it, xt = _scan_split(tangents, num_consts, num_carry)
    init_t = [ad.instantiate_zeros(t) for t, z in zip(it, carry_nz) if z]
    outs = scan_p.bind(*consts, *[t for t in ct if type(t) is not ad.Zero], *init, *init_t,
                       *xs, *[t for t in xt if type(t) is not ad.Zero], jaxpr=body,
                       num_consts=num_consts + sum(const_nz), num_carry=num_carry + n_carry_t,
                       length=length, reverse=reverse, unroll=unroll)
    carry_out, carry_t = outs[:num_carry], iter(outs[num_carry:num_carry + n_carry_t])
    ys, ys_t = outs[num_carry + n_carry_t:num_carry + n_carry_t + n_ys], \
        iter(outs[num_carry + n_carry_t + n_ys:])
    carry_avals = jaxpr.out_avals[:num_carry]
    y_avals = _stacked_avals(jaxpr.out_avals[num_carry:], length)
    tangent_out = [next(carry_t) if z else ad.Zero(a.to_tangent_aval())
                   for z, a in zip(carry_nz, carry_avals)]
    tangent_out += [next(ys_t) if z else ad.Zero(a.to_tangent_aval())
                    for z, a in zip(ys_nz, y_avals)]
    return list(carry_out) + list(ys), tangent_out


def _loop_variant_vars(jaxpr, variant_invars):
    variant = set(variant_invars)
    for eqn in jaxpr.eqns:
        if any(type(v) is not Literal and v in variant for v in eqn.invars):
            variant.update(eqn.outvars)
    return variant


def _unknown_carries(jaxpr, num_consts, num_carry, unknowns):
    """Which carries are unknown once the loop runs: those whose init is, and those the body
    makes unknown from an unknown input (a fixed point)."""
    const_uk, carry_uk, xs_uk = _scan_split(unknowns, num_consts, num_carry)
    n_ys = len(jaxpr.out_avals) - num_carry
    while True:
        inst = tuple(carry_uk) + (False,) * n_ys
        out_uk = pe.partial_eval_jaxpr_nounits(jaxpr, tuple(const_uk + carry_uk + xs_uk),
                                               inst)[2]
        new = _or(carry_uk, out_uk[:num_carry])
        if new == carry_uk:
            return carry_uk
        carry_uk = new


def _scan_partial_eval(trace, args, params):
    jaxpr, num_consts, num_carry = params["jaxpr"], params["num_consts"], params["num_carry"]
    unknowns = [pe.is_unknown(trace, x) for x in args]
    const_uk, _, xs_uk = _scan_split(unknowns, num_consts, num_carry)
    carry_uk = _unknown_carries(jaxpr, num_consts, num_carry, unknowns)
    n_ys = len(jaxpr.out_avals) - num_carry
    in_uk = tuple(const_uk + carry_uk + xs_uk)
    known, unknown, out_uk, num_res = pe.partial_eval_jaxpr_nounits(
        jaxpr, in_uk, tuple(carry_uk) + (False,) * n_ys)
    n_kc, n_kcarry = num_consts - sum(const_uk), num_carry - sum(carry_uk)
    n_known_out = len(known.out_avals) - num_res
    # residuals computed from known consts alone are loop-invariant: hoist them out of the loop
    variant = _loop_variant_vars(known.jaxpr, known.jaxpr.invars[n_kc:])
    res_vars = known.jaxpr.outvars[n_known_out:]
    invariant = [type(v) is Literal or v not in variant for v in res_vars]
    consts, carry, xs = _scan_split(args, num_consts, num_carry)
    known_consts = [x for x, u in zip(consts, const_uk) if not u]
    known_carry = [x for x, u in zip(carry, carry_uk) if not u]
    known_xs = [x for x, u in zip(xs, xs_uk) if not u]
    kj = known.jaxpr
    hoisted = Jaxpr(kj.constvars, kj.invars[:n_kc],
                    [v for v, inv in zip(res_vars, invariant) if inv], kj.eqns)
    # DCE drops dead constvars: keep the consts aligned with the ones that remain
    hoisted, _ = pe.dce_closed_jaxpr(ClosedJaxpr(hoisted, known.consts))
    # residuals that are just a step's slice of a known xs are read from that xs itself,
    # not stacked again (no copy of e.g. the stacked layer weights)
    xs_position = {v: j for j, v in enumerate(kj.invars[n_kc + n_kcarry:])}
    from_xs = [None if inv or type(v) is Literal else xs_position.get(v)
               for v, inv in zip(res_vars, invariant)]
    body_known, _ = pe.dce_closed_jaxpr(
        known, [True] * n_known_out + [not inv and f is None
                                       for inv, f in zip(invariant, from_xs)])
    with core.set_current_trace(trace.parent):
        inv_res = _run(hoisted, *known_consts) if any(invariant) else []
        known_outs = scan_p.bind(*known_consts, *known_carry, *known_xs, jaxpr=body_known,
                                 num_consts=n_kc, num_carry=n_kcarry,
                                 length=params["length"], reverse=params["reverse"],
                                 unroll=params["unroll"])
    stacked = iter(known_outs[n_known_out:])
    var_res = [known_xs[f] if f is not None else next(stacked)
               for f, inv in zip(from_xs, invariant) if not inv]
    # unknown body inputs: [res..., unknown consts, unknown carry, unknown xs]
    res_idx = list(range(num_res))
    inv_idx = [i for i, inv in zip(res_idx, invariant) if inv]
    var_idx = [i for i, inv in zip(res_idx, invariant) if not inv]
    n_uc, n_ucarry = sum(const_uk), sum(carry_uk)
    n_ux = sum(xs_uk)
    base = num_res
    order = inv_idx + list(range(base, base + n_uc)) + \
        list(range(base + n_uc, base + n_uc + n_ucarry)) + var_idx + \
        list(range(base + n_uc + n_ucarry, base + n_uc + n_ucarry + n_ux))
    body_unknown = _permute(unknown, order)
    unknown_outs = trace.stage_with_residuals(
        scan_p, [*inv_res, *[x for x, u in zip(consts, const_uk) if u],
                 *[x for x, u in zip(carry, carry_uk) if u], *var_res,
                 *[x for x, u in zip(xs, xs_uk) if u]],
        dict(params, jaxpr=body_unknown, num_consts=len(inv_idx) + n_uc, num_carry=n_ucarry))
    k, uk = iter(known_outs[:n_known_out]), iter(unknown_outs)
    return [next(uk) if u else next(k) for u in out_uk]


def _scan_transpose(cts, *args, jaxpr, num_consts, num_carry, length, reverse, unroll):
    linear = [ad.is_undefined_primal(x) for x in args]
    if not all(linear[num_consts:num_consts + num_carry]) and not all(
            _unknown_carries(jaxpr, num_consts, num_carry, linear)):
        return _transpose_primal_carries(cts, args, linear, dict(
            jaxpr=jaxpr, num_consts=num_consts, num_carry=num_carry, length=length,
            reverse=reverse, unroll=unroll))
    consts, carry, xs = _scan_split(args, num_consts, num_carry)
    const_lin, _, xs_lin = _scan_split(linear, num_consts, num_carry)
    # Every carry is treated as linear; a known carry init (e.g. an instantiated zero tangent)
    # simply receives no cotangent.
    ct_carry = [ad.instantiate_zeros(c) for c in cts[:num_carry]]
    y_avals = _stacked_avals(jaxpr.out_avals[num_carry:], length)
    ct_ys = [ad.instantiate_zeros(ad.Zero(a.to_tangent_aval())) if type(c) is ad.Zero else c
             for c, a in zip(cts[num_carry:], y_avals)]
    res_consts = [x for x, lin in zip(consts, const_lin) if not lin]
    res_xs = [x for x, lin in zip(xs, xs_lin) if not lin]
    lin_const_avals = [x.aval.to_tangent_aval() for x in consts if ad.is_undefined_primal(x)]
    in_avals = jaxpr.in_avals
    c_avals, k_avals, x_avals = _scan_split(in_avals, num_consts, num_carry)

    def t_body(*a):
        rc, rest = a[:len(res_consts)], a[len(res_consts):]
        acc, rest = rest[:len(lin_const_avals)], rest[len(lin_const_avals):]
        ctc, rest = rest[:num_carry], rest[num_carry:]
        rx, cty = rest[:len(res_xs)], rest[len(res_xs):]
        rc_it, rx_it = iter(rc), iter(rx)
        primal = [ad.UndefinedPrimal(av) if lin else next(rc_it)
                  for av, lin in zip(c_avals, const_lin)]
        primal += [ad.UndefinedPrimal(av) for av in k_avals]
        primal += [ad.UndefinedPrimal(av) if lin else next(rx_it)
                   for av, lin in zip(x_avals, xs_lin)]
        cts_in = ad.backward_pass(jaxpr.jaxpr, jaxpr.consts, primal, list(ctc) + list(cty))
        c_cts, k_cts, x_cts = _scan_split(cts_in, num_consts, num_carry)
        c_cts = [ad.instantiate_zeros(c) for c, lin in zip(c_cts, const_lin) if lin]
        new_acc = [add(a_, c) for a_, c in zip(acc, c_cts)]
        k_cts = [ad.instantiate_zeros(c) for c in k_cts]
        x_cts = [ad.instantiate_zeros(c) for c, lin in zip(x_cts, xs_lin) if lin]
        return new_acc + k_cts + x_cts

    body_avals = [core.get_aval(x) for x in res_consts] + lin_const_avals + \
        [a.to_tangent_aval() for a in k_avals] + \
        [core.get_aval(x).update(shape=core.get_aval(x).shape[1:]) for x in res_xs] + \
        [a.to_tangent_aval() for a in jaxpr.out_avals[num_carry:]]
    t_jaxpr = _stage(t_body, body_avals)
    acc0 = [_zeros(a) for a in lin_const_avals]
    outs = scan_p.bind(*res_consts, *acc0, *ct_carry, *res_xs, *ct_ys, jaxpr=t_jaxpr,
                       num_consts=len(res_consts), num_carry=len(acc0) + num_carry,
                       length=length, reverse=not reverse, unroll=unroll)
    acc, k_ct, x_ct = outs[:len(acc0)], outs[len(acc0):len(acc0) + num_carry], \
        outs[len(acc0) + num_carry:]
    acc_it, x_it = iter(acc), iter(x_ct)
    result = [next(acc_it) if lin else None for lin in const_lin]
    result += [c if ad.is_undefined_primal(x) else None for x, c in zip(carry, k_ct)]
    result += [next(x_it) if lin else None for lin in xs_lin]
    return result


def _transpose_primal_carries(cts, args, linear, params):
    """Transposes a scan that carries primal values beside its linear ones (a counter, or the
    schedule of a checkpointed loop's reverse sweep, in a linear function traced whole): the
    primal part runs forward now, as partial evaluation would have run it, and the linear scan
    it leaves, whose carries are all linear, is transposed."""
    pvals = [pe.PartialVal.unknown(x.aval) if lin else pe.PartialVal.known(x)
             for x, lin in zip(args, linear)]
    jaxpr, out_pvals, consts = pe.trace_to_jaxpr_nounits(
        lambda *a: scan_p.bind(*a, **params), pvals)
    linear_cts = [ct for ct, pv in zip(cts, out_pvals) if not pv.is_known()]
    dummies = [x for x in args if ad.is_undefined_primal(x)]
    in_cts = iter(ad.backward_pass(jaxpr, consts, dummies, linear_cts))
    return [next(in_cts) if lin else None for lin in linear]


def _scan_batch(vals, dims, jaxpr, num_consts, num_carry, length, reverse, unroll):
    size = batching.axis_size_of(vals, dims)
    consts, carry, xs = _scan_split(vals, num_consts, num_carry)
    cd, kd, xd = _scan_split(dims, num_consts, num_carry)
    const_b = [d is not None for d in cd]
    carry_b = [d is not None for d in kd]
    xs_b = [d is not None for d in xd]
    n_ys = len(jaxpr.out_avals) - num_carry
    while True:
        inst = tuple(carry_b) + (False,) * n_ys
        _, out_b = batching.batch_jaxpr(jaxpr, size, tuple(const_b + carry_b + xs_b), inst)
        new = _or(carry_b, out_b[:num_carry])
        if new == carry_b:
            break
        carry_b = new
    inst = tuple(carry_b) + (False,) * n_ys
    body, out_b = batching.batch_jaxpr(jaxpr, size, tuple(const_b + carry_b + xs_b), inst)
    consts = [x if d is None else batching.moveaxis(x, d, 0) for x, d in zip(consts, cd)]
    carry = [batching.bdim_at_front(x, d, size) if b else x
             for x, d, b in zip(carry, kd, carry_b)]
    xs = [x if d is None else batching.moveaxis(x, d, 1) for x, d in zip(xs, xd)]
    outs = scan_p.bind(*consts, *carry, *xs, jaxpr=body, num_consts=num_consts,
                       num_carry=num_carry, length=length, reverse=reverse, unroll=unroll)
    out_dims = [0 if b else None for b in carry_b] + \
        [1 if b else None for b in out_b[num_carry:]]
    return outs, out_dims


def _scan_dce(used_outputs, eqn):
    p = eqn.params
    jaxpr, num_consts, num_carry = p["jaxpr"], p["num_consts"], p["num_carry"]
    used_carry = list(used_outputs[:num_carry])
    used_ys = list(used_outputs[num_carry:])
    while True:
        _, used_in = pe.dce_jaxpr(jaxpr.jaxpr, used_carry + used_ys)
        new = _or(used_carry, used_in[num_consts:num_consts + num_carry])
        if new == used_carry:
            break
        used_carry = new
    j, used_in = pe.dce_jaxpr(jaxpr.jaxpr, used_carry + used_ys)
    used_c, _, used_x = _scan_split(used_in, num_consts, num_carry)
    keep_in = used_c + used_carry + used_x
    new_j = Jaxpr(j.constvars, [v for v, k in zip(j.invars, keep_in) if k], j.outvars, j.eqns,
                  j.debug_info)
    new_eqn = eqn.replace(
        invars=[v for v, k in zip(eqn.invars, keep_in) if k],
        outvars=[v for v, k in zip(eqn.outvars, used_carry + used_ys) if k],
        params=dict(p, jaxpr=ClosedJaxpr(new_j, _live_consts(jaxpr, j)), num_consts=sum(used_c),
                    num_carry=sum(used_carry)))
    return keep_in, new_eqn


ad.primitive_jvps[scan_p] = _scan_jvp
ad.primitive_transposes[scan_p] = _scan_transpose
pe.partial_eval_rules[scan_p] = _scan_partial_eval
batching.primitive_batchers[scan_p] = _scan_batch
pe.dce_rules[scan_p] = _scan_dce


def _scan_pe_custom(eqn, unknowns, policy, unsaveable):
    """A scan inside a checkpoint: split its body with the checkpoint's policy. The known scan
    computes the known outputs and stacks the residuals the policy saves; loop-invariant and
    per-step-input residuals are read from the scan's own operands. The staged scan carries
    the known carries along and returns every output, known ones included (each step's
    recomputed, or read from the residuals the policy saved), so nothing outside the policy
    is saved."""
    p = eqn.params
    body, num_consts, num_carry = p["jaxpr"], p["num_consts"], p["num_carry"]
    if body.consts:
        return recompute_whole_rule(eqn, unknowns, policy, unsaveable)
    const_uk, carry_uk, xs_uk = _scan_split(unknowns, num_consts, num_carry)
    n_xs = len(xs_uk)
    carry_inst = [False] * num_consts + [True] * num_carry + [False] * n_xs
    while True:
        split = pe.partial_eval_jaxpr_custom(
            body.jaxpr, const_uk + carry_uk + xs_uk, policy, in_inst=carry_inst,
            ensure_out_inst=True)
        new = _or(carry_uk, split.out_unknowns[:num_carry])
        if new == carry_uk:
            break
        carry_uk = new
    # a known carry whose output the body computes as unknown is unknown (the staged scan
    # reads its known initial value as an operand); the known scan no longer takes it
    unknowns = const_uk + carry_uk + xs_uk
    bj = body.jaxpr
    c_in, _, x_in = _scan_split(bj.invars, num_consts, num_carry)
    kinds = {}
    for i, v in enumerate(c_in):
        kinds[v] = ("const", i)
    for i, v in enumerate(x_in):
        kinds[v] = ("xs", i)
    consts, carry, xs = _scan_split(eqn.invars, num_consts, num_carry)
    const_res = [r for r in split.residuals if kinds.get(r, ("",))[0] == "const"]
    xs_res = [r for r in split.residuals if kinds.get(r, ("",))[0] == "xs"]
    stacked = [r for r in split.residuals if r not in kinds]  # computed in the body
    n_known_out = len(split.known.outvars) - len(split.residuals)
    known_body = Jaxpr([], split.known.invars, split.known.outvars[:n_known_out] + stacked,
                       split.known.eqns)
    length = p["length"]
    stacked_outer = [Var(r.aval.update(shape=(length,) + r.aval.shape)) for r in stacked]
    n_kcarry = num_carry - sum(carry_uk)
    known_outs = [v for v, u in zip(eqn.outvars, split.out_unknowns) if not u]
    eqn_known = JaxprEqn(
        [v for v, u in zip(eqn.invars, unknowns) if not u], known_outs + stacked_outer, scan_p,
        dict(p, jaxpr=ClosedJaxpr(known_body, []), num_consts=num_consts - sum(const_uk),
             num_carry=n_kcarry), eqn.source_info)
    staged = split.staged
    n_res = len(split.residuals)
    position = {r: i for i, r in enumerate(split.residuals)}
    uk_c = sum(const_uk)
    rest = list(range(n_res, len(staged.invars)))  # unknown consts, every carry, unknown xs
    order = ([position[r] for r in const_res] + rest[:uk_c] + rest[uk_c:uk_c + num_carry]
             + [position[r] for r in stacked] + [position[r] for r in xs_res]
             + rest[uk_c + num_carry:])
    staged_body = Jaxpr([], [staged.invars[i] for i in order], staged.outvars, staged.eqns)
    eqn_staged = JaxprEqn(
        [consts[kinds[r][1]] for r in const_res] + [v for v, u in zip(consts, const_uk) if u]
        + list(carry) + stacked_outer + [xs[kinds[r][1]] for r in xs_res]
        + [v for v, u in zip(xs, xs_uk) if u],
        [v for v, st in zip(eqn.outvars, split.out_staged) if st], scan_p,
        dict(p, jaxpr=ClosedJaxpr(staged_body, []), num_consts=len(const_res) + uk_c,
             num_carry=num_carry), eqn.source_info)
    return eqn_known, eqn_staged, split.out_unknowns, split.out_staged, stacked_outer


pe.partial_eval_jaxpr_custom_rules[scan_p] = _scan_pe_custom


def _carry_component(fun):
    """How JAX's messages name the input carry's leaf at a path: after the body's first
    parameter (``c``, ``c['b'][0]``), or by path where the body has no signature."""
    try:
        params = list(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        params = []
    if params:
        return lambda path: (f"the input carry component {params[0]}{path}" if path
                             else f"the input carry {params[0]}")
    return lambda path: f"the input carry at path {path}" if path else "the input carry"


def _check_carry_tree(what, in_tree, out_tree):
    """JAX's error for a loop body whose carry output's structure differs from its input's."""
    if in_tree != out_tree:
        raise TypeError(f"{what} function carry input and carry output must have the same "
                        f"pytree structure, but they differ:\n\nThe input carry is {in_tree} "
                        f"but the carry output is {out_tree}.\n\nRevise the function so that "
                        f"the carry output has the same pytree structure as the carry input.")


def _check_carry_type(what, fun, in_tree, in_avals, out_avals):
    """JAX's error for a loop body whose carry output types differ from its input's (weak
    types aside): every differing leaf, by path, with both types."""
    component = _carry_component(fun)
    diffs = [f"{component(path)} has type {core.long_type_str(a)} but the corresponding "
             f"output carry component has type {core.long_type_str(b)}{_mismatch_extra(a, b)}"
             for path, a, b in zip(_leaf_paths(in_tree), in_avals, out_avals)
             if not _typematch(a, b)]
    if not diffs:
        return
    if len(diffs) == 1:
        differences = f"{_capitalize(diffs[0])}.\n"
    else:  # JAX's layout, blank lines included
        differences = "\n".join(f"  * {d};\n" for d in diffs[:-1]) + f"  * {diffs[-1]}.\n"
    raise TypeError(f"{what} function carry input and carry output must have equal types, but "
                    f"they differ:\n\n{differences}\nRevise the function so that all output "
                    f"types match the corresponding input types.")


def _promote_weak_typed_carry(init_flat, in_avals, out_avals):
    """JAX's rule for a weakly typed initial carry (a Python scalar's) whose type the body
    changes: it becomes the promotion of itself with the output's dtype, strongly typed (weak
    float64 ``0.0`` under x64 with a float32 output: float32). A strong carry, or a weak one
    whose output keeps its shape and dtype, stays as it is. ``(init_flat, changed)``."""
    promoted = [convert_element_type(x, dtypes.result_type(x, b.dtype))
                if a.weak_type and not _typematch(a, b) else x
                for x, a, b in zip(init_flat, in_avals, out_avals)]
    return promoted, any(p is not x for p, x in zip(promoted, init_flat))


def _trace_carried(trace, what, fun, init_flat, init_tree):
    """A loop traced on its carry's types by ``trace(carry_avals) -> (traced, carry_out_tree,
    carry_out_avals)``, as every loop form does it: once, then again on the initial carry
    promoted where it is weakly typed and the body changes its type; then each carry output
    must have its input's type. ``(traced, init_flat)``, the carry promoted."""
    avals = [core.get_aval(x) for x in init_flat]
    traced, out_tree, out_avals = trace(avals)
    _check_carry_tree(what, init_tree, out_tree)
    init_flat, changed = _promote_weak_typed_carry(init_flat, avals, out_avals)
    if changed:
        avals = [core.get_aval(x) for x in init_flat]
        traced, out_tree, out_avals = trace(avals)
        _check_carry_tree(what, init_tree, out_tree)
    _check_carry_type(what, fun, init_tree, avals, out_avals)
    return traced, init_flat


def trace_scan_body(f, init_flat, init_tree, xs_flat, xs_tree):
    """A scan's body traced on the carry's and one x's types (see ``_trace_carried``):
    ``(jaxpr, consts, carry_out_tree, y_tree, init_flat)``."""
    x_avals = [core.get_aval(x).update(shape=core.get_aval(x).shape[1:]) for x in xs_flat]
    in_tree = tree_structure((tree_unflatten(init_tree, init_flat),
                              tree_unflatten(xs_tree, xs_flat)))

    def body(carry, x):
        out = f(carry, x)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"scan body output must be a pair (carry, y), got {out!r}")
        return out

    def trace(carry_avals):
        jaxpr, consts, out_tree = _trace(body, in_tree, carry_avals + x_avals, "scan")
        carry_out_tree, y_tree = out_tree.children()
        return ((jaxpr, consts, carry_out_tree, y_tree), carry_out_tree,
                jaxpr.out_avals[:len(carry_avals)])

    traced, init_flat = _trace_carried(trace, "scan body", f, init_flat, init_tree)
    return (*traced, init_flat)


def scan_length(xs_flat, length):
    """The trip count of a scan over ``xs_flat`` (their common leading size, or ``length``),
    with JAX's errors."""
    lengths = {core.get_aval(x).shape[0] if core.get_aval(x).shape else None for x in xs_flat}
    if None in lengths:
        raise ValueError("scan got value with no leading axis to scan over")
    if length is not None:
        length = int(core.concrete_or_error(length, "The length argument of scan"))
        if lengths and lengths != {length}:
            raise ValueError(f"scan got `length` argument of {length} which disagrees with "
                             f"leading axis sizes {sorted(lengths)}.")
        return length
    if not lengths:
        raise ValueError("scan got no values to scan over and `length` not provided.")
    if len(lengths) > 1:
        raise ValueError(f"scan got values with different leading axis sizes: "
                         f"{', '.join(str(n) for n in sorted(lengths))}.")
    return lengths.pop()


def scan(f, init, xs=None, length=None, reverse=False, unroll=1, _split_transpose=False, *,
         checkpoints=None, memory_budget=None):
    """Loop ``carry, y = f(carry, x)`` over the leading axis of ``xs``, stacking the ``y``.

    Differentiating a scan saves its per-iteration residuals stacked, and the backward pass
    runs as a scan in the opposite direction. With ``checkpoints=K`` (or ``memory_budget``
    bytes) it keeps only K carries instead: see ``remat.lax.control_flow.checkpointed``.
    ``_split_transpose`` is JAX's option of how XLA schedules the transposed loop (flax
    passes it); the values are the same either way, so it changes nothing here."""
    del _split_transpose
    if checkpoints is not None or memory_budget is not None:
        return checkpointed_scan(f, init, xs, length, reverse, unroll, checkpoints=checkpoints,
                                 memory_budget=memory_budget)
    xs_flat, xs_tree = tree_flatten(xs)
    length = scan_length(xs_flat, length)
    init_flat, init_tree = tree_flatten(init)
    jaxpr, consts, carry_out_tree, y_tree, init_flat = trace_scan_body(
        f, init_flat, init_tree, xs_flat, xs_tree)
    n_carry = len(init_flat)
    outs = scan_p.bind(*consts, *init_flat, *xs_flat, jaxpr=jaxpr, num_consts=len(consts),
                       num_carry=len(init_flat), length=length, reverse=bool(reverse),
                       unroll=int(unroll) if not isinstance(unroll, bool) else int(unroll))
    return (tree_unflatten(carry_out_tree, outs[:n_carry]),
            tree_unflatten(y_tree, outs[n_carry:]))


def map(f, xs):
    """``stack([f(x) for x in xs])`` as a scan."""
    _, ys = scan(lambda _, x: ((), f(x)), (), xs)
    return ys


# --- while_loop ------------------------------------------------------------------------------

while_p = Primitive("while")
while_p.multiple_results = True


def _while_abstract_eval(*avals, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    return body_jaxpr.out_avals


while_p.def_abstract_eval(_while_abstract_eval)
while_p.def_impl(exec_loops.run_while)


def _while_split(seq, cond_nconsts, body_nconsts):
    seq = list(seq)
    return (seq[:cond_nconsts], seq[cond_nconsts:cond_nconsts + body_nconsts],
            seq[cond_nconsts + body_nconsts:])


def _while_jvp(primals, tangents, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    nz = [type(t) is not ad.Zero for t in tangents]
    _, bconst_nz, carry_nz = _while_split(nz, cond_nconsts, body_nconsts)
    n_carry = len(carry_nz)
    while True:
        _, out_nz = ad.jvp_jaxpr(body_jaxpr, tuple(bconst_nz + carry_nz), tuple(carry_nz))
        new = _or(carry_nz, out_nz)
        if new == carry_nz:
            break
        carry_nz = new
    body_jvp, _ = ad.jvp_jaxpr(body_jaxpr, tuple(bconst_nz + carry_nz), tuple(carry_nz))
    nb = body_nconsts
    n_bt = sum(bconst_nz)
    n_ct = sum(carry_nz)
    # body_jvp inputs: [bconsts, carry, bconst_t, carry_t] -> [bconsts, bconst_t, carry, carry_t]
    order = list(range(nb)) + list(range(nb + n_carry, nb + n_carry + n_bt)) + \
        list(range(nb, nb + n_carry)) + \
        list(range(nb + n_carry + n_bt, nb + n_carry + n_bt + n_ct))
    body = _permute(body_jvp, order)
    carry_t_avals = [a.to_tangent_aval() for a, z in
                     zip(body_jaxpr.out_avals, carry_nz) if z]
    cond = _with_extra_invars(cond_jaxpr, carry_t_avals, len(cond_jaxpr.in_avals))
    cconsts, bconsts, carry = _while_split(primals, cond_nconsts, body_nconsts)
    _, bct, kt = _while_split(tangents, cond_nconsts, body_nconsts)
    outs = while_p.bind(*cconsts, *bconsts, *[t for t in bct if type(t) is not ad.Zero],
                        *carry, *[ad.instantiate_zeros(t) for t, z in zip(kt, carry_nz) if z],
                        cond_jaxpr=cond, body_jaxpr=body, cond_nconsts=cond_nconsts,
                        body_nconsts=nb + n_bt)
    it = iter(outs[n_carry:])
    return outs[:n_carry], [next(it) if z else ad.Zero(a.to_tangent_aval())
                            for z, a in zip(carry_nz, body_jaxpr.out_avals)]


def _while_partial_eval(trace, args, params):
    cond_jaxpr, body_jaxpr = params["cond_jaxpr"], params["body_jaxpr"]
    cond_nconsts, body_nconsts = params["cond_nconsts"], params["body_nconsts"]
    unknowns = [pe.is_unknown(trace, x) for x in args]
    cconst_uk, bconst_uk, carry_uk = _while_split(unknowns, cond_nconsts, body_nconsts)
    while True:
        out_uk = pe.partial_eval_jaxpr_nounits(body_jaxpr, tuple(bconst_uk + carry_uk),
                                               tuple(carry_uk))[2]
        new = _or(carry_uk, out_uk)
        if new == carry_uk:
            break
        carry_uk = new
    _, cond_uses = pe.dce_jaxpr(cond_jaxpr.jaxpr)
    cond_unknown = any(u and c for u, c in zip(cconst_uk + carry_uk, cond_uses))
    all_unknown = trace.stage_with_residuals(while_p, args, params)
    if cond_unknown or all(carry_uk):
        return all_unknown
    # the known carries follow a loop of their own; the staged loop recomputes them
    known = [not u for u in carry_uk]
    body_k, used = pe.dce_jaxpr(body_jaxpr.jaxpr, known)
    if any(u and not k for u, k in zip(used[body_nconsts:], known)):
        # the known outputs' equations read an unknown carry (an inner loop that dead-code
        # elimination cannot split by carry): no separate known loop, stage the whole loop
        return all_unknown
    keep = [u for u in used[:body_nconsts]] + known
    body_k = ClosedJaxpr(Jaxpr(body_k.constvars,
                               [v for v, k in zip(body_k.invars, keep) if k],
                               body_k.outvars, body_k.eqns), _live_consts(body_jaxpr, body_k))
    cj = cond_jaxpr.jaxpr
    cond_k = ClosedJaxpr(Jaxpr(cj.constvars, cj.invars[:cond_nconsts] + [
        v for v, k in zip(cj.invars[cond_nconsts:], known) if k], cj.outvars, cj.eqns),
        cond_jaxpr.consts)
    cconsts, bconsts, carry = _while_split(args, cond_nconsts, body_nconsts)
    with core.set_current_trace(trace.parent):
        known_outs = while_p.bind(
            *cconsts, *[x for x, k in zip(bconsts, keep) if k],
            *[x for x, k in zip(carry, known) if k], cond_jaxpr=cond_k, body_jaxpr=body_k,
            cond_nconsts=cond_nconsts, body_nconsts=sum(keep[:body_nconsts]))
    k_it = iter(known_outs)
    return [next(k_it) if k else u for k, u in zip(known, all_unknown)]


def _while_dce(used_outputs, eqn):
    """Only the carries the used outputs, the cond and each other need (to a fixpoint): so
    a loop inside another's body can be split by carry (the known part of a partially
    evaluated outer loop never reads an unknown carry through it)."""
    p = eqn.params
    cond, body = p["cond_jaxpr"], p["body_jaxpr"]
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    _, cond_used = pe.dce_jaxpr(cond.jaxpr)
    used_carry = _or(list(used_outputs), cond_used[nc:])
    while True:
        _, used_in = pe.dce_jaxpr(body.jaxpr, used_carry)
        new = _or(used_carry, used_in[nb:])
        if new == used_carry:
            break
        used_carry = new
    b, used_in = pe.dce_jaxpr(body.jaxpr, used_carry)
    used_bconsts = used_in[:nb]
    c = cond.jaxpr
    new_cond = ClosedJaxpr(Jaxpr(c.constvars, c.invars[:nc] + [
        v for v, k in zip(c.invars[nc:], used_carry) if k], c.outvars, c.eqns, c.debug_info),
        cond.consts)
    new_body = ClosedJaxpr(Jaxpr(b.constvars, [v for v, k in zip(b.invars, used_bconsts +
                                                               used_carry) if k],
                                 b.outvars, b.eqns, b.debug_info), _live_consts(body, b))
    keep_in = [True] * nc + used_bconsts + used_carry
    new_eqn = eqn.replace(
        invars=[v for v, k in zip(eqn.invars, keep_in) if k],
        outvars=[v for v, k in zip(eqn.outvars, used_carry) if k],
        params=dict(p, cond_jaxpr=new_cond, body_jaxpr=new_body,
                    body_nconsts=sum(used_bconsts)))
    return keep_in, new_eqn


def _while_transpose(cts, *args, **params):
    raise ValueError("Reverse-mode differentiation does not work for lax.while_loop or "
                     "lax.fori_loop with dynamic start/stop values. Try using lax.scan, or "
                     "using fori_loop with static start/stop.")


def batch_while(vals, dims, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    """A while loop batched: ``(operands, cond, body, cond_nconsts, body_nconsts, which
    carries are batched)`` to bind again. With a batched predicate the loop runs while any
    element does, each finished element held still (so a loop's step count, and a
    checkpointed loop's schedule, stays one for the whole batch)."""
    size = batching.axis_size_of(vals, dims)
    vals = [x if d is None else batching.moveaxis(x, d, 0) for x, d in zip(vals, dims)]
    cconsts, bconsts, carry = _while_split(vals, cond_nconsts, body_nconsts)
    cb, bb, kb = _while_split([d is not None for d in dims], cond_nconsts, body_nconsts)
    was = list(kb)
    while True:
        _, out_b = batching.batch_jaxpr(body_jaxpr, size, tuple(bb + kb), tuple(kb))
        new = _or(kb, out_b)
        if new == kb:
            break
        kb = new
    _, pred_b = batching.batch_jaxpr(cond_jaxpr, size, tuple(cb + kb), False)
    if pred_b[0]:
        kb = [True] * len(kb)
    body_b, _ = batching.batch_jaxpr(body_jaxpr, size, tuple(bb + kb), tuple(kb))
    cond_b, _ = batching.batch_jaxpr(cond_jaxpr, size, tuple(cb + kb), False)
    carry = [batching.bdim_at_front(x, None, size) if b and not w else x
             for x, b, w in zip(carry, kb, was)]
    if not pred_b[0]:
        return [*cconsts, *bconsts, *carry], cond_b, body_b, cond_nconsts, body_nconsts, kb
    nc, nb = cond_nconsts, body_nconsts
    c_avals = [core.get_aval(x) for x in cconsts]
    b_avals = [core.get_aval(x) for x in bconsts]
    k_avals = [core.get_aval(x) for x in carry]

    def any_cond(*a):
        return [reduce_or(_run(cond_b, *a)[0], (0,))]

    def select_body(*a):
        cc, bc, k = a[:nc], a[nc:nc + nb], a[nc + nb:]
        pred = _run(cond_b, *cc, *k)[0]
        out = []
        for old, new in zip(k, _run(body_b, *bc, *k)):
            shape = core.get_aval(new).shape
            which = broadcast_in_dim(pred, shape, (0,)) if len(shape) > 1 else pred
            out.append(select(which, new, old))
        return out

    cond_any = _stage(any_cond, c_avals + k_avals)
    body_sel = _stage(select_body, c_avals + b_avals + k_avals)
    return [*cconsts, *cconsts, *bconsts, *carry], cond_any, body_sel, nc, nc + nb, kb


def _while_batch(vals, dims, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    ops, cond_b, body_b, nc, nb, kb = batch_while(vals, dims, cond_jaxpr, body_jaxpr,
                                                  cond_nconsts, body_nconsts)
    outs = while_p.bind(*ops, cond_jaxpr=cond_b, body_jaxpr=body_b, cond_nconsts=nc,
                        body_nconsts=nb)
    return outs, [0 if b else None for b in kb]


ad.primitive_jvps[while_p] = _while_jvp
ad.primitive_transposes[while_p] = _while_transpose
pe.partial_eval_rules[while_p] = _while_partial_eval
batching.primitive_batchers[while_p] = _while_batch
pe.partial_eval_jaxpr_custom_rules[while_p] = recompute_whole_rule
pe.dce_rules[while_p] = _while_dce


def while_loop(cond_fun, body_fun, init_val, *, max_steps=None, checkpoints=None,
               memory_budget=None):
    """``while cond_fun(val): val = body_fun(val)``, staged as one primitive. Forward-mode
    differentiable; reverse mode with ``max_steps``/``checkpoints``/``memory_budget`` (see
    ``remat.lax.control_flow.checkpointed``), else use ``scan`` or static ``fori_loop``."""
    if max_steps is not None or checkpoints is not None or memory_budget is not None:
        return checkpointed_while_loop(cond_fun, body_fun, init_val, max_steps=max_steps,
                                       checkpoints=checkpoints, memory_budget=memory_budget)
    init_flat, init_tree = tree_flatten(init_val)
    cond_j, cond_consts, body_j, body_consts, body_tree, init_flat = trace_while(
        cond_fun, body_fun, init_flat, init_tree)
    outs = while_p.bind(*cond_consts, *body_consts, *init_flat, cond_jaxpr=cond_j,
                        body_jaxpr=body_j, cond_nconsts=len(cond_consts),
                        body_nconsts=len(body_consts))
    return tree_unflatten(body_tree, outs)


def trace_while(cond_fun, body_fun, init_flat, init_tree):
    """The cond and body of a while loop traced on its carry's types (see
    ``_trace_carried``): ``(cond_jaxpr, cond_consts, body_jaxpr, body_consts, body_tree,
    init_flat)``."""
    in_tree = tree_structure((tree_unflatten(init_tree, init_flat),))

    def trace(avals):
        cond_j, cond_consts, _ = _trace(cond_fun, in_tree, avals, "while_loop cond")
        out = cond_j.out_avals
        if len(out) != 1 or out[0].shape != () or out[0].dtype != np.bool_:
            raise TypeError(f"cond_fun must return a boolean scalar, but got output type(s) "
                            f"{[a.str_short() for a in out]}.")
        body_j, body_consts, body_tree = _trace(body_fun, in_tree, avals, "while_loop body")
        return (cond_j, cond_consts, body_j, body_consts, body_tree), body_tree, \
            body_j.out_avals

    traced, init_flat = _trace_carried(trace, "while_loop body", body_fun, init_flat,
                                       init_tree)
    return (*traced, init_flat)


def fori_loop(lower, upper, body_fun, init_val, unroll=None):
    """``for i in range(lower, upper): val = body_fun(i, val)``. With concrete bounds this is
    a ``scan`` (reverse-differentiable); with traced bounds a ``while_loop``."""
    lo_aval = core.get_aval(lower)
    dtype = dtypes.result_type(lower, upper) if lo_aval.dtype.kind in "iu" else np.int32
    try:
        lo = int(core.concrete_or_error(lower))
        hi = int(core.concrete_or_error(upper))
    except core.ConcretizationTypeError:
        lo = hi = None
    # the carries are named ``loop_carry`` as JAX's are, for the carry type errors
    if lo is not None:
        def scan_body(loop_carry, _):
            i, x = loop_carry
            return (add(i, convert_element_type(1, dtype)), body_fun(i, x)), None

        start = convert_element_type(lo, dtype)
        (_, result), _ = scan(scan_body, (start, init_val), None, length=max(hi - lo, 0),
                              unroll=unroll or 1)
        return result

    def while_cond(loop_carry):
        i, hi_, _ = loop_carry
        return lt(i, hi_)

    def while_body(loop_carry):
        i, hi_, x = loop_carry
        return add(i, convert_element_type(1, dtype)), hi_, body_fun(i, x)

    lower = convert_element_type(lower, dtype)
    upper = convert_element_type(upper, dtype)
    _, _, result = while_loop(while_cond, while_body, (lower, upper, init_val))
    return result


# --- Refs closed over by a loop's body: discharged into carries ------------------------------


def _scan_discharge(contents, invals, eqn):
    """A Ref handed to a scan (closed over by its body) becomes a carry."""
    p = eqn.params
    nc, nk = p["num_consts"], p["num_carry"]
    if any(type(x) is discharge.Handle for x in invals[nc:]):
        raise TypeError("scan carries and scanned-over values cannot be mutable array "
                        "references: close over the Ref in the scan body instead")
    closed = p["jaxpr"]
    keys = discharge.threaded(invals[:nc], [closed], contents)
    consts = invals[:nc]
    new = discharge.trace_body(closed, consts, keys, closed.in_avals[nc:], "keys-last")
    # body inputs: [non-Ref consts, keys, carry, xs]; outputs: [carry, ys, keys] -> keys first
    j = new.jaxpr
    n_op = sum(type(x) is not discharge.Handle for x in consts)
    n_k = len(keys)
    out_order = list(range(len(j.outvars) - n_k, len(j.outvars))) + list(
        range(len(j.outvars) - n_k))
    body = ClosedJaxpr(Jaxpr(j.constvars, j.invars, [j.outvars[i] for i in out_order], j.eqns,
                             j.debug_info), new.consts)
    body, body_consts = pe.closed_call(body)
    outs = scan_p.bind(*body_consts, *[x for x in consts if type(x) is not discharge.Handle],
                       *[contents[k] for k in keys], *invals[nc:],
                       **dict(p, jaxpr=body, num_consts=len(body_consts) + n_op,
                              num_carry=n_k + nk))
    for k, v in zip(keys, outs[:n_k]):
        contents[k] = v
    return outs[n_k:]


def _while_discharge(contents, invals, eqn):
    """A Ref handed to a while loop (closed over by its cond or body) becomes a carry; the
    cond may read it, not write it."""
    p = eqn.params
    ncc, nbc = p["cond_nconsts"], p["body_nconsts"]
    cconsts, bconsts, carry = invals[:ncc], invals[ncc:ncc + nbc], invals[ncc + nbc:]
    if any(type(x) is discharge.Handle for x in carry):
        raise TypeError("while_loop carries cannot be mutable array references: close over "
                        "the Ref in the loop body instead")
    cond_j, body_j = p["cond_jaxpr"], p["body_jaxpr"]
    keys = discharge.threaded(list(cconsts) + list(bconsts), [cond_j, body_j], contents)
    n_k = len(keys)
    carry_avals = body_j.out_avals
    body = discharge.trace_body(body_j, bconsts, keys, carry_avals, "keys-last")
    j = body.jaxpr  # outputs [carry, keys] -> [keys, carry]
    n_out = len(j.outvars)
    body = ClosedJaxpr(Jaxpr(j.constvars, j.invars,
                             j.outvars[n_out - n_k:] + j.outvars[:n_out - n_k], j.eqns,
                             j.debug_info), body.consts)
    key_avals = [discharge.aval_of_key(k, list(cconsts) + list(bconsts)) for k in keys]
    c_ops = [x for x in cconsts if type(x) is not discharge.Handle]

    def cond(*xs):
        ops, kv, rest = xs[:len(c_ops)], xs[len(c_ops):len(c_ops) + n_k], xs[len(c_ops) + n_k:]
        local = dict(zip(keys, kv))
        args = discharge.body_args(cconsts, ops, local) + list(rest)
        out = discharge.interpret(cond_j.jaxpr, cond_j.consts, args, local)
        if any(local[k] is not v for k, v in zip(keys, kv)):
            raise ValueError("a while_loop's cond_fun cannot write to mutable array references")
        return out

    cond_new = pe.trace_to_jaxpr(cond, [core.get_aval(x) for x in c_ops] + key_avals +
                                 list(carry_avals), cond_j.jaxpr.debug_info)
    cond_new, cc_consts = pe.closed_call(cond_new)
    body, b_consts = pe.closed_call(body)
    b_ops = [x for x in bconsts if type(x) is not discharge.Handle]
    outs = while_p.bind(*cc_consts, *c_ops, *b_consts, *b_ops, *[contents[k] for k in keys],
                        *carry, **dict(p, cond_jaxpr=cond_new, body_jaxpr=body,
                                       cond_nconsts=len(cc_consts) + len(c_ops),
                                       body_nconsts=len(b_consts) + len(b_ops)))
    for k, v in zip(keys, outs[:n_k]):
        contents[k] = v
    return outs[n_k:]


discharge.handle_refs(scan_p, _scan_discharge)
discharge.handle_refs(while_p, _while_discharge)


def _donating(prim, run):
    """Let the executor hand a loop the operands it may write into (``run``: the loop taking
    them over); a loop over Refs runs as its impl does."""
    impl = prim.impl

    def donating(offered, taken, *args, **params):
        if discharge.params_have_state(params):
            return impl(*args, **params)
        return run(offered, taken, *args, **params)

    registry.donating_impls[prim] = (impl, donating)


_donating(scan_p, exec_loops.donating_scan)
_donating(while_p, exec_loops.donating_while)
