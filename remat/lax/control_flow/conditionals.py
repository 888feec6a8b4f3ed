"""``cond`` and ``switch``: one primitive carrying every branch's jaxpr, with its impl,
abstract eval, JVP, partial-eval (known/unknown and policy-aware), transpose, batching and DCE
rules."""

import numpy as np

from remat import core
from remat.api_util import fun_name, fun_sourceinfo
from remat.call import recompute_whole_rule
from remat.core import ClosedJaxpr, Jaxpr, JaxprEqn, Primitive, Var
from remat.exec import loops as exec_loops
from remat.interpreters import ad, batching, discharge
from remat.interpreters import partial_eval as pe
from remat.lax.control_flow.common import (
    _capitalize,
    _leaf_paths,
    _live_consts,
    _mismatch_extra,
    _or,
    _run,
    _stage,
    _trace,
    _typematch,
    _with_extra_invars,
    _zeros,
)
from remat.lax.elementwise import clamp, convert_element_type, ne, select_n
from remat.lax.shape import broadcast_in_dim
from remat.offload import offload_p, staged_with_reloads
from remat.tree_util import (
    tree_flatten,
    tree_unflatten,
)

# --- cond / switch ---------------------------------------------------------------------------

cond_p = Primitive("cond")
cond_p.multiple_results = True


def _cond_abstract_eval(index, *ops, branches):
    if index.shape or index.dtype.kind not in "iu":
        raise TypeError(f"cond index must be an integer scalar, got {index.str_short()}")
    return branches[0].out_avals


cond_p.def_abstract_eval(_cond_abstract_eval)
cond_p.def_impl(exec_loops.run_cond)


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
            which = broadcast_in_dim(index, shape, (0,)) if len(shape) > 1 else index
            outs.append(select_n(which, *cases))
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


def _fun_info(fun):
    """``name at file:line``, as JAX's branch messages name a branch."""
    where = fun_sourceinfo(fun)
    return f"{fun_name(fun)} at {where}" if where else "<unknown>"


def _check_branch_outputs(kind, name1, name2, fun1, fun2, traced1, traced2):
    """JAX's errors for two branches whose outputs differ in structure or in type (weak types
    aside: a weakly typed float32 output matches a float32 one, not a float64 one)."""
    tree1, tree2 = traced1[2], traced2[2]
    if tree1 != tree2:
        raise TypeError(
            f"{kind} branch outputs must have the same pytree structure, but they differ:"
            f"\n\n{name1} output is {tree1} but {name2} output is {tree2}.\n\n"
            f"Revise {name1} and/or {name2} so that they have the same pytree structure.")
    diffs = [f"the output of {name1}{f' at path {path}' if path else ''} has type "
             f"{core.long_type_str(a)} but the corresponding output of {name2} has type "
             f"{core.long_type_str(b)}{_mismatch_extra(a, b)}"
             for path, a, b in zip(_leaf_paths(tree1), traced1[0].out_avals,
                                   traced2[0].out_avals) if not _typematch(a, b)]
    if not diffs:
        return
    if len(diffs) == 1:
        differences = f"{_capitalize(diffs[0])}.\n"
    else:
        differences = "\n".join(f"  * {d};" for d in diffs[:-1]) + f"\n  * {diffs[-1]}.\n"
    raise TypeError(
        f"{kind} branches must have equal output types but they differ.\n\n"
        f"{name1} is {_fun_info(fun1)}\n{name2} is {_fun_info(fun2)}\n\n{differences}\n"
        f"Revise {name1} and/or {name2} so that all output types match.")


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
    index = convert_element_type(index, np.int32)
    if len(branches) > 1:
        index = clamp(np.int32(0), index, np.int32(len(branches) - 1))
    names = ["branch 0"] + [f"branch{i}" for i in range(1, len(branches))]  # JAX's names
    return _bind_branches(index, branches, operands, names, names, "switch")


_NO_OPERAND = object()


def cond(pred, true_fun, false_fun, *operands, operand=_NO_OPERAND):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``, staged as one
    primitive so it can be traced, batched and differentiated. A numeric ``pred`` is true
    when nonzero. JAX's older spellings work as in JAX: one operand as ``operand=``, and
    ``cond(pred, true_operand, true_fun, false_operand, false_fun)``."""
    if not (callable(true_fun) and callable(false_fun)):
        if callable(false_fun) and len(operands) == 2 and callable(operands[1]):
            x_true, f_true, x_false, f_false = true_fun, false_fun, *operands
            return cond(pred, lambda x, _: f_true(x), lambda _, x: f_false(x), x_true, x_false)
        raise TypeError("lax.cond: true_fun and false_fun arguments should be callable.")
    if operand is not _NO_OPERAND:
        if operands:
            raise TypeError(f"if 'operand' keyword is passed then no positional operands can "
                            f"be passed, got operand={operand!r} and positional operands "
                            f"{operands!r}")
        operands = (operand,)
    if pred is None:
        raise TypeError("cond predicate is None")
    aval = core.get_aval(pred)
    if aval.shape != ():
        raise TypeError(f"Pred must be a scalar, got {pred!r} of shape {aval.shape}.")
    if aval.dtype.kind not in "biuf":
        raise TypeError(f"Pred type must be either boolean or number, got {aval.dtype}.")
    if aval.dtype.kind != "b":
        pred = ne(pred, convert_element_type(0, aval.dtype))
    index = convert_element_type(pred, np.int32)
    return _bind_branches(index, [false_fun, true_fun], operands, ["false_fun", "true_fun"],
                          ["true_fun", "false_fun"], "cond")


def _bind_branches(index, funs, operands, names, user_order, kind):
    """``cond_p`` of the branches ``funs`` (in index order). As in JAX, each branch's outputs
    must match the first's (as the user lists them) in type, weak types aside; each branch
    keeps its own weak types, and the outputs take branch 0's (``false_fun``'s for cond)."""
    flat_ops, in_tree = tree_flatten(tuple(operands))
    avals = [core.get_aval(x) for x in flat_ops]
    traced = [_trace(f, in_tree, avals, kind) for f in funs]
    by_name = {n: (f, t) for n, f, t in zip(names, funs, traced)}
    first = user_order[0]
    for name in user_order[1:]:
        _check_branch_outputs(kind, first, name, by_name[first][0], by_name[name][0],
                              by_name[first][1], by_name[name][1])
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


# --- Refs handed to a cond: operands and outputs of every branch ----------------------------


def _cond_discharge(contents, invals, eqn):
    """A Ref handed to a cond is an operand of every branch, and its final contents an
    output of every branch (branches that do not write it pass it through)."""
    index, ops = invals[0], invals[1:]
    branches = eqn.params["branches"]
    keys = discharge.threaded(ops, branches, contents)
    new = tuple(discharge.trace_body(b, ops, keys, (), "keys-first") for b in branches)
    outs = cond_p.bind(index, *[contents[k] for k in keys],
                       *[x for x in ops if type(x) is not discharge.Handle],
                       **dict(eqn.params, branches=new))
    for k, v in zip(keys, outs[:len(keys)]):
        contents[k] = v
    return outs[len(keys):]


discharge.handle_refs(cond_p, _cond_discharge)
