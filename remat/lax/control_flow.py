"""Control flow primitives: ``cond`` (and ``switch``), ``while_loop``, ``scan`` — each carrying
its body jaxpr(s) as params, with impl, abstract eval, JVP, partial-eval, transpose, batching
and DCE rules — plus ``fori_loop`` and ``map`` written on them.

Sub-jaxprs are ClosedJaxprs whose consts are concrete; values the user's functions close over
are hoisted into leading operands when the function is traced, so outer tracers flow through
the rules like any operand.
"""

import numpy as np

from remat import core, dtypes, exec, lax, memory
from remat.api_util import arg_names, flatten_fun_nokwargs, fun_name
from remat.call import recompute_whole_rule
from remat.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Primitive, Var
from remat.interpreters import ad, batching
from remat.interpreters import partial_eval as pe
from remat.offload import host_empty, offload_p, staged_with_reloads
from remat.tree_util import (
    keystr,
    tree_flatten,
    tree_flatten_with_path,
    tree_structure,
    tree_unflatten,
)

__all__ = [
    "cond",
    "cond_p",
    "fori_loop",
    "map",
    "scan",
    "scan_p",
    "switch",
    "while_loop",
    "while_p",
]


# --- helpers ---------------------------------------------------------------------------------


def _trace(fun, in_tree, in_avals, what):
    """Trace ``fun`` on avals: (const-free ClosedJaxpr, consts to pass first, out_tree)."""
    flat_fun, store = flatten_fun_nokwargs(fun, in_tree)
    debug = core.DebugInfo(fun_name(fun), [], what)
    closed = pe.trace_to_jaxpr(flat_fun, in_avals, debug)
    jaxpr = ClosedJaxpr(pe.convert_constvars_jaxpr(closed.jaxpr), [])
    return jaxpr, list(closed.consts), store.tree


def _run(closed, *args):
    """Evaluate a sub-jaxpr under the current trace (inside rules)."""
    return core.eval_jaxpr(closed.jaxpr, closed.consts, *args)


def _stage(fun, in_avals):
    """Trace a flat function of flat arguments into a ClosedJaxpr (for derived bodies)."""
    return pe.trace_to_jaxpr(fun, list(in_avals))


def _permute(closed, in_order, out_order=None):
    """``closed`` with its invars (and outvars) reordered: no retracing."""
    j = closed.jaxpr
    outvars = j.outvars if out_order is None else [j.outvars[i] for i in out_order]
    new = Jaxpr(j.constvars, [j.invars[i] for i in in_order], outvars, j.eqns, j.debug_info)
    return ClosedJaxpr(new, closed.consts)


def _with_extra_invars(closed, avals, position):
    """``closed`` taking extra unused inputs of ``avals`` inserted at ``position``."""
    j = closed.jaxpr
    extra = [Var(a) for a in avals]
    invars = j.invars[:position] + extra + j.invars[position:]
    return ClosedJaxpr(Jaxpr(j.constvars, invars, j.outvars, j.eqns, j.debug_info),
                       closed.consts)


def _live_consts(closed, new_jaxpr):
    """The consts of ``closed`` that ``new_jaxpr`` (a DCE of it, which drops dead
    constvars) still reads, in its constvar order."""
    vals = dict(zip(closed.jaxpr.constvars, closed.consts))
    return [vals[v] for v in new_jaxpr.constvars]


def _zeros(aval):
    return lax.full(aval.shape, 0, aval.dtype)


def _type_str(aval):
    return f"{aval.dtype.name}{list(aval.shape)}"


def _or(a, b):
    return [x or y for x, y in zip(a, b)]


# --- cond / switch ---------------------------------------------------------------------------

cond_p = Primitive("cond")
cond_p.multiple_results = True


def _cond_impl(index, *ops, branches):
    return exec.evaluate(branches[int(index)], *ops)


def _cond_abstract_eval(index, *ops, branches):
    if index.shape or index.dtype.kind not in "iu":
        raise TypeError(f"cond index must be an integer scalar, got {index.str_short()}")
    return branches[0].out_avals


cond_p.def_impl(_cond_impl)
cond_p.def_abstract_eval(_cond_abstract_eval)


def _cond_jvp(primals, tangents, branches):
    index, ops = primals[0], primals[1:]
    nonzeros = tuple(type(t) is not ad.Zero for t in tangents[1:])
    out_nz = [False] * len(branches[0].out_avals)
    for b in branches:
        out_nz = _or(out_nz, ad.jvp_jaxpr(b, nonzeros, False)[1])
    jvp_branches = tuple(ad.jvp_jaxpr(b, nonzeros, tuple(out_nz))[0] for b in branches)
    nz_tangents = [t for t in tangents[1:] if type(t) is not ad.Zero]
    outs = cond_p.bind(index, *ops, *nz_tangents, branches=jvp_branches)
    n = len(branches[0].out_avals)
    it = iter(outs[n:])
    return outs[:n], [next(it) if nz else ad.Zero(a.to_tangent_aval())
                      for nz, a in zip(out_nz, branches[0].out_avals)]


def _cond_partial_eval(trace, args, params):
    branches = params["branches"]
    index, ops = args[0], args[1:]
    if pe.is_unknown(trace, index):
        return trace.stage_with_residuals(cond_p, args, params)
    unknowns = tuple(pe.is_unknown(trace, x) for x in ops)
    out_uk = [False] * len(branches[0].out_avals)
    for b in branches:
        out_uk = _or(out_uk, pe.partial_eval_jaxpr_nounits(b, unknowns, False)[2])
    splits = [pe.partial_eval_jaxpr_nounits(b, unknowns, tuple(out_uk)) for b in branches]
    res_avals = [list(known.out_avals[len(known.out_avals) - num_res:])
                 for known, _, _, num_res in splits]
    all_res = [a for avals in res_avals for a in avals]
    known_branches, unknown_branches = [], []
    for i, (known, unknown, _, num_res) in enumerate(splits):
        before = sum(len(r) for r in res_avals[:i])
        after = sum(len(r) for r in res_avals[i + 1:])
        n_known_out = len(known.out_avals) - num_res

        def known_fun(*xs, known=known, before=before, after=after, n=n_known_out):
            outs = _run(known, *xs)
            pad_before = [_zeros(a) for a in all_res[:before]]
            pad_after = [_zeros(a) for a in all_res[len(all_res) - after:]] if after else []
            return outs[:n] + pad_before + outs[n:] + pad_after

        known_branches.append(_stage(known_fun, known.in_avals))
        end = before + len(res_avals[i])
        padded = _with_extra_invars(unknown, all_res[:before], 0)
        unknown_branches.append(_with_extra_invars(padded, all_res[end:], end))
    known_ops = [x for x, u in zip(ops, unknowns) if not u]
    with core.set_current_trace(trace.parent):
        known_outs = cond_p.bind(index, *known_ops, branches=tuple(known_branches))
    n_known = len(known_outs) - len(all_res)
    residuals = known_outs[n_known:]
    unknown_ops = [x for x, u in zip(ops, unknowns) if u]
    unknown_outs = trace.stage_with_residuals(
        cond_p, [index, *residuals, *unknown_ops], dict(branches=tuple(unknown_branches)))
    k, uk = iter(known_outs[:n_known]), iter(unknown_outs)
    return [next(uk) if u else next(k) for u in out_uk]


def _cond_transpose(cts, index, *ops, branches):
    linear = tuple(ad.is_undefined_primal(x) for x in ops)
    nz_cts = tuple(type(c) is not ad.Zero for c in cts)
    t_branches = tuple(ad.transpose_jaxpr(b, linear, nz_cts) for b in branches)
    res = [x for x, lin in zip(ops, linear) if not lin]
    outs = iter(cond_p.bind(index, *res, *[c for c in cts if type(c) is not ad.Zero],
                            branches=t_branches))
    return [None] + [next(outs) if lin else None for lin in linear]


def _cond_batch(vals, dims, branches):
    size = batching.axis_size_of(vals, dims)
    index, ops = vals[0], vals[1:]
    op_dims = dims[1:]
    ops = [x if d is None else batching.moveaxis(x, d, 0) for x, d in zip(ops, op_dims)]
    batched = tuple(d is not None for d in op_dims)
    if dims[0] is not None:
        # a batched predicate: evaluate every branch, then select per element
        index = batching.moveaxis(index, dims[0], 0)
        branch_outs = []
        for b in branches:
            bj, _ = batching.batch_jaxpr(b, size, batched, True)
            branch_outs.append(_run(bj, *ops))
        outs = []
        for cases in zip(*branch_outs):
            shape = core.get_aval(cases[0]).shape
            which = lax.broadcast_in_dim(index, shape, (0,)) if len(shape) > 1 else index
            outs.append(lax.select_n(which, *cases))
        return outs, [0] * len(outs)
    out_b = [False] * len(branches[0].out_avals)
    for b in branches:
        out_b = _or(out_b, batching.batch_jaxpr(b, size, batched, False)[1])
    b_branches = tuple(batching.batch_jaxpr(b, size, batched, tuple(out_b))[0]
                       for b in branches)
    outs = cond_p.bind(index, *ops, branches=b_branches)
    return outs, [0 if b else None for b in out_b]


def _cond_dce(used_outputs, eqn):
    branches = eqn.params["branches"]
    new, used_in = [], [False] * len(branches[0].in_avals)
    for b in branches:
        j, u = pe.dce_jaxpr(b.jaxpr, used_outputs)
        new.append(j)
        used_in = _or(used_in, u)
    pruned = tuple(ClosedJaxpr(Jaxpr(j.constvars, [v for v, u in zip(j.invars, used_in) if u],
                                     j.outvars, j.eqns, j.debug_info), _live_consts(b, j))
                   for j, b in zip(new, branches))
    new_eqn = eqn.replace(invars=[eqn.invars[0]] + [v for v, u in zip(eqn.invars[1:], used_in)
                                                    if u],
                          outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
                          params=dict(branches=pruned))
    return [True] + used_in, new_eqn


ad.primitive_jvps[cond_p] = _cond_jvp
ad.primitive_transposes[cond_p] = _cond_transpose
pe.partial_eval_rules[cond_p] = _cond_partial_eval
batching.primitive_batchers[cond_p] = _cond_batch
pe.dce_rules[cond_p] = _cond_dce


def _cond_pe_custom(eqn, unknowns, policy, unsaveable):
    """A cond inside a checkpoint: split each branch with the checkpoint's policy. The known
    cond computes the known outputs and the residuals the taken branch saves (branches share
    residual slots of one type, the others' padded with zeros); the staged cond takes them
    and every operand, and recomputes the rest of the taken branch."""
    branches = eqn.params["branches"]
    if unknowns[0] or any(b.consts for b in branches):
        return recompute_whole_rule(eqn, unknowns, policy, unsaveable)
    ops_uk = list(unknowns[1:])
    splits = [pe.partial_eval_jaxpr_custom(b.jaxpr, ops_uk, policy, in_inst=True,
                                           ensure_out_inst=True) for b in branches]
    out_uk = [False] * len(eqn.outvars)
    for split in splits:
        out_uk = _or(out_uk, split.out_unknowns)
    slots, slot_of = _residual_slots(splits)
    known_branches, staged_branches = [], []
    for split, slot_index in zip(splits, slot_of):
        known_branches.append(_known_branch(split, out_uk, slots, slot_index))
        slot_vars = [Var(a) for a, _ in slots]
        for r, k in zip(split.residuals, slot_index):
            slot_vars[k] = r
        offloaded = [False] * len(slots)
        for off, k in zip(split.offloaded, slot_index):
            offloaded[k] = off
        staged = split.staged
        staged = Jaxpr([], slot_vars + staged.invars[len(split.residuals):], staged.outvars,
                       staged.eqns, staged.debug_info)
        staged_branches.append(ClosedJaxpr(staged_with_reloads(staged, offloaded), []))
    res_vars = [Var(a) for a, _ in slots]
    index, ops = eqn.invars[0], eqn.invars[1:]
    eqn_known = JaxprEqn([index] + [v for v, u in zip(ops, ops_uk) if not u],
                         [v for v, u in zip(eqn.outvars, out_uk) if not u] + res_vars, cond_p,
                         dict(branches=tuple(known_branches)), eqn.source_info)
    eqn_staged = JaxprEqn([index] + res_vars + list(ops), list(eqn.outvars), cond_p,
                          dict(branches=tuple(staged_branches)), eqn.source_info)
    return eqn_known, eqn_staged, out_uk, [True] * len(eqn.outvars), res_vars


def _residual_slots(splits):
    """Residual slots shared by the branches: ``(slots, slot_of)`` where ``slots`` lists each
    slot's (aval, offloaded) and ``slot_of[i][j]`` is the slot of branch i's residual j. Only
    one branch runs, so a slot of a given type serves one residual of each branch."""
    slots, slot_of = [], []
    for split in splits:
        taken, index = set(), []
        for r, off in zip(split.residuals, split.offloaded):
            k = next((k for k, kind in enumerate(slots)
                      if k not in taken and kind == (r.aval, off)), None)
            if k is None:
                k = len(slots)
                slots.append((r.aval, off))
            taken.add(k)
            index.append(k)
        slot_of.append(index)
    return slots, slot_of


def _known_branch(split, out_uk, slots, slot_index):
    """A branch of the known cond: the outputs known in every branch, then every residual
    slot (this branch's residuals, offloaded where the policy says; zeros elsewhere)."""
    n_known = len(split.known.outvars) - len(split.residuals)
    keep = [not u for u, own in zip(out_uk, split.out_unknowns) if not own]
    known = ClosedJaxpr(split.known, [])

    def known_fun(*xs):
        outs = _run(known, *xs)
        res = [_zeros(a) for a, _ in slots]
        for r, k in zip(outs[n_known:], slot_index):
            res[k] = offload_p.bind(r) if slots[k][1] else r
        return [o for o, k in zip(outs[:n_known], keep) if k] + res

    return _stage(known_fun, known.in_avals)


pe.partial_eval_jaxpr_custom_rules[cond_p] = _cond_pe_custom


def _leaf_paths(tree):
    """``keystr`` of every leaf of a tree structure (``''`` for a bare leaf)."""
    dummy = tree_unflatten(tree, [0] * tree.num_leaves)
    return [keystr(path) for path, _ in tree_flatten_with_path(dummy)[0]]


def _join_branch_outputs(traced, names, kind):
    """Check the branches return the same types (JAX's messages); weak types are joined to
    strong ones. ``names`` are in the order the user wrote the branches."""
    trees = [t[2] for t in traced]
    for name, tree in zip(names[1:], trees[1:]):
        if tree != trees[0]:
            raise TypeError(
                f"{kind} branch outputs must have the same pytree structure, but they differ:"
                f"\n\n{names[0]} output is {trees[0]} but {name} output is {tree}.\n\n"
                f"Revise {names[0]} and/or {name} so that they have the same pytree structure.")
    avals = [t[0].out_avals for t in traced]
    paths = _leaf_paths(trees[0])
    for name, other in zip(names[1:], avals[1:]):
        for path, a, b in zip(paths, avals[0], other):
            what = "shapes" if a.shape != b.shape else "dtypes" if a.dtype != b.dtype else None
            if what:
                at = f" at path {path}" if path else ""
                raise TypeError(
                    f"{kind} branches must have equal output types but they differ.\n\n"
                    f"The output of {names[0]}{at} has type {_type_str(a)} but the "
                    f"corresponding output of {name} has type {_type_str(b)}, so the {what} "
                    f"do not match.\n\nRevise {names[0]} and/or {name} so that all output "
                    f"types match.")
    return [all(av[k].weak_type for av in avals) for k in range(len(avals[0]))]


def switch(index, branches, *operands):
    """Apply ``branches[index](*operands)``; ``index`` is clamped into range."""
    branches = list(branches)
    if not branches:
        raise ValueError("Empty branch sequence")
    index_aval = core.get_aval(index)
    if index_aval.shape != ():
        raise TypeError(f"Branch index must be scalar, got {index} of shape "
                        f"{index_aval.shape}.")
    if index_aval.dtype.kind not in "iu":
        raise TypeError(f"Index type must be an integer, got {index} as "
                        f"{index_aval.dtype.name}")
    index = lax.convert_element_type(index, np.int32)
    if len(branches) > 1:
        index = lax.clamp(np.int32(0), index, np.int32(len(branches) - 1))
    names = [f"branch {i}" for i in range(len(branches))]
    return _bind_branches(index, branches, operands, names, names, "switch")


def cond(pred, true_fun, false_fun, *operands):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``, staged as one
    primitive so it can be traced, batched and differentiated. A numeric ``pred`` is true
    when nonzero."""
    aval = core.get_aval(pred)
    if aval.shape != ():
        raise TypeError(f"Pred must be a scalar, got {pred!r} of shape {aval.shape}.")
    if aval.dtype.kind not in "biuf":
        raise TypeError(f"Pred type must be either boolean or number, got {aval.dtype}.")
    if aval.dtype.kind != "b":
        pred = lax.ne(pred, lax.convert_element_type(0, aval.dtype))
    index = lax.convert_element_type(pred, np.int32)
    return _bind_branches(index, [false_fun, true_fun], operands, ["false_fun", "true_fun"],
                          ["true_fun", "false_fun"], "cond")


def _bind_branches(index, funs, operands, names, user_order, kind):
    flat_ops, in_tree = tree_flatten(tuple(operands))
    avals = [core.get_aval(x) for x in flat_ops]
    traced = [_trace(f, in_tree, avals, kind) for f in funs]
    by_name = dict(zip(names, traced))
    weak = _join_branch_outputs([by_name[n] for n in user_order], user_order, kind)
    if any(a.weak_type != w for t in traced for a, w in zip(t[0].out_avals, weak)):
        traced = [_trace(_strengthen(f, weak), in_tree, avals, kind) for f in funs]
    consts = [c for t in traced for c in t[1]]
    n_consts = [len(t[1]) for t in traced]
    jaxprs = []
    for i, (j, _, _) in enumerate(traced):
        before = [core.get_aval(c) for t in traced[:i] for c in t[1]]
        after = [core.get_aval(c) for t in traced[i + 1:] for c in t[1]]
        j = _with_extra_invars(j, before, 0)
        j = _with_extra_invars(j, after, len(before) + n_consts[i])
        jaxprs.append(j)
    outs = cond_p.bind(index, *consts, *flat_ops, branches=tuple(jaxprs))
    return tree_unflatten(traced[0][2], outs)


def _strengthen(fun, weak):
    def strong(*args):
        out = fun(*args)
        leaves, tree = tree_flatten(out)
        leaves = [x if w or not core.get_aval(x).weak_type
                  else lax.convert_element_type(x, core.get_aval(x).dtype, False)
                  for x, w in zip(leaves, weak)]
        return tree_unflatten(tree, leaves)

    strong.__name__ = fun_name(fun)
    return strong


# --- scan ------------------------------------------------------------------------------------

scan_p = Primitive("scan")
scan_p.multiple_results = True


def _scan_impl(*args, jaxpr, num_consts, num_carry, length, reverse, unroll):
    consts = list(args[:num_consts])
    carry = list(args[num_consts:num_consts + num_carry])
    xs = args[num_consts + num_carry:]
    y_avals = jaxpr.out_avals[num_carry:]
    ys = [(host_empty if off else np.empty)((length,) + a.shape, a.dtype)
          for a, off in zip(y_avals, _offloaded_outputs(jaxpr)[num_carry:])]
    for y in ys:
        memory.track(y)
    owned_carry = False
    body = exec.prepared(jaxpr)
    with exec.session():  # one for the loop: each step's plan nests in it
        for i in (range(length - 1, -1, -1) if reverse else range(length)):
            # each iteration writes its ys straight into their stacked buffers
            sinks = [None] * num_carry + [buf[i, ...] for buf in ys]
            outs = body(*consts, *carry, *[x[i] for x in xs], sinks=sinks)
            if owned_carry:
                for c in carry:
                    memory.untrack(c)
            carry = [np.asarray(c) for c in outs[:num_carry]]
            for c in carry:
                memory.track(c)
            owned_carry = True
            for sink, y in zip(sinks[num_carry:], outs[num_carry:]):
                if y is not sink:  # outputs that are inputs or literals are not sunk
                    sink[...] = y
    if owned_carry:
        for c in carry:
            memory.untrack(c)
    for y in ys:
        memory.untrack(y)
    return carry + ys


@core.memoize_on_jaxpr
def _offloaded_outputs(closed):
    """Which outputs of a body are offloaded residuals: their stacks live in host memory."""
    producers = {v: e.primitive for e in closed.jaxpr.eqns for v in e.outvars}
    return [producers.get(v) is offload_p for v in closed.jaxpr.outvars]


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


scan_p.def_impl(_scan_impl)
scan_p.def_abstract_eval(_scan_abstract_eval)


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


def _scan_partial_eval(trace, args, params):
    jaxpr, num_consts, num_carry = params["jaxpr"], params["num_consts"], params["num_carry"]
    unknowns = [pe.is_unknown(trace, x) for x in args]
    const_uk, carry_uk, xs_uk = _scan_split(unknowns, num_consts, num_carry)
    n_ys = len(jaxpr.out_avals) - num_carry
    while True:
        inst = tuple(carry_uk) + (False,) * n_ys
        out_uk = pe.partial_eval_jaxpr_nounits(jaxpr, tuple(const_uk + carry_uk + xs_uk),
                                               inst)[2]
        new = _or(carry_uk, out_uk[:num_carry])
        if new == carry_uk:
            break
        carry_uk = new
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
    consts, carry, xs = _scan_split(args, num_consts, num_carry)
    const_lin = [ad.is_undefined_primal(x) for x in consts]
    xs_lin = [ad.is_undefined_primal(x) for x in xs]
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
        new_acc = [lax.add(a_, c) for a_, c in zip(acc, c_cts)]
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


def _carry_names(fun, init_tree):
    """Names of the carry's leaves as the user's function calls them (``c``, ``c[0]``)."""
    dummy = tree_unflatten(init_tree, [0] * init_tree.num_leaves)
    try:
        names = arg_names(fun, (dummy,), {})
    except (TypeError, ValueError):
        names = []
    if len(names) != init_tree.num_leaves:
        names = [f"carry{p}" for p in _leaf_paths(init_tree)]
    return names


def _carry_mismatch(fun, in_tree, out_tree, in_avals, out_avals, what):
    """JAX's errors for a loop body whose carry output differs from its carry input."""
    if in_tree != out_tree:
        raise TypeError(f"{what} function carry input and carry output must have the same "
                        f"pytree structure, but they differ:\n\nThe input carry is {in_tree} "
                        f"but the carry output is {out_tree}.\n\nRevise the function so that "
                        f"the carry output has the same pytree structure as the carry input.")
    problems = []
    for name, a, b in zip(_carry_names(fun, in_tree), in_avals, out_avals):
        what_differs = "shapes" if a.shape != b.shape else \
            "dtypes" if a.dtype != b.dtype else None
        if what_differs:
            problems.append((name, a, b, what_differs))
    if not problems:
        return
    if len(problems) == 1:
        name, a, b, d = problems[0]
        detail = (f"The input carry {name} has type {_type_str(a)} but the corresponding "
                  f"output carry component has type {_type_str(b)}, so the {d} do not match.")
    else:
        detail = "\n".join(f"  * the input carry component {name} has type {_type_str(a)} "
                           f"but the corresponding output carry component has type "
                           f"{_type_str(b)}, so the {d} do not match"
                           for name, a, b, d in problems)
    raise TypeError(f"{what} function carry input and carry output must have equal types, but "
                    f"they differ:\n\n{detail}\n\nRevise the function so that all output "
                    f"types match the corresponding input types.")


def _strong_carry(init_flat, out_avals):
    """Carries whose input is weakly typed but whose output is not become strong."""
    changed = False
    new = []
    for x, b in zip(init_flat, out_avals):
        a = core.get_aval(x)
        if a.weak_type and not b.weak_type:
            x = lax.convert_element_type(x, a.dtype, False)
            changed = True
        new.append(x)
    return new, changed


def scan(f, init, xs=None, length=None, reverse=False, unroll=1):
    """Loop ``carry, y = f(carry, x)`` over the leading axis of ``xs``, stacking the ``y``.

    Differentiating a scan saves its per-iteration residuals stacked, and the backward pass
    runs as a scan in the opposite direction."""
    xs_flat, xs_tree = tree_flatten(xs)
    lengths = {core.get_aval(x).shape[0] if core.get_aval(x).shape else None for x in xs_flat}
    if None in lengths:
        raise ValueError("scan got value with no leading axis to scan over")
    if length is not None:
        length = int(core.concrete_or_error(length, "The length argument of scan"))
        if lengths and lengths != {length}:
            raise ValueError(f"scan got `length` argument of {length} which disagrees with "
                             f"leading axis sizes {sorted(lengths)}.")
    else:
        if not lengths:
            raise ValueError("scan got no values to scan over and `length` not provided.")
        if len(lengths) > 1:
            raise ValueError(f"scan got values with different leading axis sizes: "
                             f"{', '.join(str(n) for n in sorted(lengths))}.")
        length = lengths.pop()
    init_flat, init_tree = tree_flatten(init)
    x_avals = [core.get_aval(x).update(shape=core.get_aval(x).shape[1:]) for x in xs_flat]

    def body(carry, x):
        out = f(carry, x)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"scan body output must be a pair (carry, y), got {out!r}")
        return out

    for _ in range(2):
        carry_avals = [core.get_aval(x) for x in init_flat]
        in_tree = tree_structure((tree_unflatten(init_tree, init_flat),
                                  tree_unflatten(xs_tree, xs_flat)))
        jaxpr, consts, out_tree = _trace(body, in_tree, carry_avals + x_avals, "scan")
        carry_out_tree, y_tree = out_tree.children
        n_carry = len(init_flat)
        _carry_mismatch(f, init_tree, carry_out_tree, carry_avals,
                        jaxpr.out_avals[:n_carry], "scan body")
        init_flat, changed = _strong_carry(init_flat, jaxpr.out_avals[:n_carry])
        if not changed:
            break
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


def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cconsts = args[:cond_nconsts]
    bconsts = args[cond_nconsts:cond_nconsts + body_nconsts]
    carry = list(args[cond_nconsts + body_nconsts:])
    owned = False
    while exec.evaluate(cond_jaxpr, *cconsts, *carry)[0]:
        new = [np.asarray(c) for c in exec.evaluate(body_jaxpr, *bconsts, *carry)]
        for c in new:
            memory.track(c)
        if owned:
            for c in carry:
                memory.untrack(c)
        carry, owned = new, True
    if owned:
        for c in carry:
            memory.untrack(c)
    return carry


def _while_abstract_eval(*avals, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    return body_jaxpr.out_avals


while_p.def_impl(_while_impl)
while_p.def_abstract_eval(_while_abstract_eval)


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


def _while_transpose(cts, *args, **params):
    raise ValueError("Reverse-mode differentiation does not work for lax.while_loop or "
                     "lax.fori_loop with dynamic start/stop values. Try using lax.scan, or "
                     "using fori_loop with static start/stop.")


def _while_batch(vals, dims, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    size = batching.axis_size_of(vals, dims)
    vals = [x if d is None else batching.moveaxis(x, d, 0) for x, d in zip(vals, dims)]
    cconsts, bconsts, carry = _while_split(vals, cond_nconsts, body_nconsts)
    cb, bb, kb = _while_split([d is not None for d in dims], cond_nconsts, body_nconsts)
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
    was_batched = _while_split([d is not None for d in dims], cond_nconsts, body_nconsts)[2]
    carry = [batching.bdim_at_front(x, None, size) if b and not was else x
             for x, b, was in zip(carry, kb, was_batched)]
    if not pred_b[0]:
        outs = while_p.bind(*cconsts, *bconsts, *carry, cond_jaxpr=cond_b, body_jaxpr=body_b,
                            cond_nconsts=cond_nconsts, body_nconsts=body_nconsts)
        return outs, [0 if b else None for b in kb]
    # a batched predicate: keep looping while any element runs; finished elements hold still
    n_c, n_b = cond_nconsts, body_nconsts
    c_avals = [core.get_aval(x) for x in cconsts]
    b_avals = [core.get_aval(x) for x in bconsts]
    k_avals = [core.get_aval(x) for x in carry]

    def any_cond(*a):
        return [lax.reduce_or(_run(cond_b, *a)[0], (0,))]

    def select_body(*a):
        cc, bc, k = a[:n_c], a[n_c:n_c + n_b], a[n_c + n_b:]
        pred = _run(cond_b, *cc, *k)[0]
        new = _run(body_b, *bc, *k)
        out = []
        for old, upd in zip(k, new):
            shape = core.get_aval(upd).shape
            which = lax.broadcast_in_dim(pred, shape, (0,)) if len(shape) > 1 else pred
            out.append(lax.select(which, upd, old))
        return out

    cond_any = _stage(any_cond, c_avals + k_avals)
    body_sel = _stage(select_body, c_avals + b_avals + k_avals)
    outs = while_p.bind(*cconsts, *cconsts, *bconsts, *carry, cond_jaxpr=cond_any,
                        body_jaxpr=body_sel, cond_nconsts=n_c, body_nconsts=n_c + n_b)
    return outs, [0] * len(outs)


ad.primitive_jvps[while_p] = _while_jvp
ad.primitive_transposes[while_p] = _while_transpose
pe.partial_eval_rules[while_p] = _while_partial_eval
batching.primitive_batchers[while_p] = _while_batch
pe.partial_eval_jaxpr_custom_rules[while_p] = recompute_whole_rule


def while_loop(cond_fun, body_fun, init_val):
    """``while cond_fun(val): val = body_fun(val)``, staged as one primitive. Forward-mode
    differentiable; for reverse mode use ``scan`` or ``fori_loop`` with static bounds."""
    init_flat, init_tree = tree_flatten(init_val)
    for _ in range(2):
        avals = [core.get_aval(x) for x in init_flat]
        in_tree = tree_structure((tree_unflatten(init_tree, init_flat),))
        cond_j, cond_consts, cond_tree = _trace(cond_fun, in_tree, avals, "while_loop cond")
        out = cond_j.out_avals
        if len(out) != 1 or out[0].shape != () or out[0].dtype != np.bool_:
            raise TypeError(f"cond_fun must return a boolean scalar, but got output type(s) "
                            f"{[a.str_short() for a in out]}.")
        body_j, body_consts, body_tree = _trace(body_fun, in_tree, avals, "while_loop body")
        _carry_mismatch(body_fun, init_tree, body_tree, avals, body_j.out_avals,
                        "while_loop body")
        init_flat, changed = _strong_carry(init_flat, body_j.out_avals)
        if not changed:
            break
    outs = while_p.bind(*cond_consts, *body_consts, *init_flat, cond_jaxpr=cond_j,
                        body_jaxpr=body_j, cond_nconsts=len(cond_consts),
                        body_nconsts=len(body_consts))
    return tree_unflatten(body_tree, outs)


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
    if lo is not None:
        def scan_body(carry, _):
            i, x = carry
            return (lax.add(i, lax.convert_element_type(1, dtype)), body_fun(i, x)), None

        start = lax.convert_element_type(lo, dtype)
        (_, result), _ = scan(scan_body, (start, init_val), None, length=max(hi - lo, 0),
                              unroll=unroll or 1)
        return result

    def while_cond(carry):
        i, hi_, _ = carry
        return lax.lt(i, hi_)

    def while_body(carry):
        i, hi_, x = carry
        return lax.add(i, lax.convert_element_type(1, dtype)), hi_, body_fun(i, x)

    lower = lax.convert_element_type(lower, dtype)
    upper = lax.convert_element_type(upper, dtype)
    _, _, result = while_loop(while_cond, while_body, (lower, upper, init_val))
    return result

