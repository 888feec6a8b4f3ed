"""The call primitive ``jit_p`` (a staged sub-jaxpr run by the executor) with all its rules,
and the partial-eval helpers every call-like primitive shares (``split_call_eqn``,
``recompute_whole_rule``). The user's ``jit`` wrapper is ``remat.transforms.jit``."""



from remat import core, exec
from remat.core import ClosedJaxpr, Jaxpr, JaxprEqn, Primitive, Var
from remat.interpreters import ad, batching, discharge
from remat.interpreters import partial_eval as pe
from remat.offload import offload_p, staged_with_reloads
from remat.runtime import registry

jit_p = Primitive("jit")
jit_p.multiple_results = True


def _jit_impl(*args, name, jaxpr):
    return exec.evaluate(jaxpr, *args)


def _jit_abstract_eval(*avals, jaxpr, name):
    return jaxpr.out_avals


jit_p.def_impl(_jit_impl)
jit_p.def_abstract_eval(_jit_abstract_eval)


def _jit_jvp(primals, tangents, jaxpr, name):
    nonzeros = tuple(type(t) is not ad.Zero for t in tangents)
    jvp_closed, out_nonzeros = ad.jvp_jaxpr(jaxpr, nonzeros, False)
    jvp_closed, consts = pe.closed_call(jvp_closed)
    outs = jit_p.bind(*consts, *primals, *[t for t in tangents if type(t) is not ad.Zero],
                      name=name, jaxpr=jvp_closed)
    n = len(jaxpr.out_avals)
    primal_out, nz_tangents = outs[:n], iter(outs[n:])
    tangent_out = [next(nz_tangents) if nz else ad.Zero(a.to_tangent_aval())
                   for nz, a in zip(out_nonzeros, jaxpr.out_avals)]
    return primal_out, tangent_out


def _jit_partial_eval(trace, args, params):
    jaxpr, name = params["jaxpr"], params["name"]
    unknowns = tuple(pe.is_unknown(trace, x) for x in args)
    known, unknown, out_unknowns, num_res = pe.partial_eval_jaxpr_nounits(jaxpr, unknowns,
                                                                          False)
    known_args = [x for x, u in zip(args, unknowns) if not u]
    known, forwarded = _forward_input_residuals(known, num_res)
    known, known_consts = pe.closed_call(known)
    with core.set_current_trace(trace.parent):
        known_outs = jit_p.bind(*known_consts, *known_args, name=name, jaxpr=known)
    n_known = len(known_outs) - (num_res - sum(f is not None for f in forwarded))
    computed = iter(known_outs[n_known:])
    residuals = [known_args[f] if f is not None else next(computed) for f in forwarded]
    unknown_outs = trace.stage_with_residuals(
        jit_p, [*residuals, *[x for x, u in zip(args, unknowns) if u]],
        dict(name=name, jaxpr=unknown))
    known_iter, unknown_iter = iter(known_outs[:n_known]), iter(unknown_outs)
    return [next(unknown_iter) if u else next(known_iter) for u in out_unknowns]


def _forward_input_residuals(known, num_res):
    """Residuals that are just inputs of the known jaxpr are passed along directly instead
    of being returned by it. Returns the trimmed jaxpr and, per residual, the index of the
    known input it is (or None)."""
    j = known.jaxpr
    n_out = len(j.outvars) - num_res
    position = {v: i for i, v in enumerate(j.invars)}
    forwarded = [position.get(v) if type(v) is Var else None for v in j.outvars[n_out:]]
    if not any(f is not None for f in forwarded):
        return known, forwarded
    keep = [True] * n_out + [f is None for f in forwarded]
    trimmed, _ = pe.dce_closed_jaxpr(known, keep)
    return trimmed, forwarded


def _jit_transpose(cts, *args, jaxpr, name):
    linear = tuple(ad.is_undefined_primal(x) for x in args)
    nonzero_cts = tuple(type(c) is not ad.Zero for c in cts)
    t_closed = ad.transpose_jaxpr(jaxpr, linear, nonzero_cts)
    t_closed, consts = pe.closed_call(t_closed)
    res = [x for x, lin in zip(args, linear) if not lin]
    outs = iter(jit_p.bind(*consts, *res, *[c for c in cts if type(c) is not ad.Zero],
                           name=f"transpose({name})", jaxpr=t_closed))
    return [next(outs) if lin else None for lin in linear]


def _jit_batch(vals, dims, jaxpr, name):
    size = batching.axis_size_of(vals, dims)
    vals = [v if d is batching.not_mapped else batching.moveaxis(v, d, 0)
            for v, d in zip(vals, dims)]
    batched = tuple(d is not batching.not_mapped for d in dims)
    b_closed, out_batched = batching.batch_jaxpr(jaxpr, size, batched, False)
    b_closed, consts = pe.closed_call(b_closed)
    outs = jit_p.bind(*consts, *vals, name=name, jaxpr=b_closed)
    return outs, [0 if b else batching.not_mapped for b in out_batched]


def _jit_dce(used_outputs, eqn):
    closed = eqn.params["jaxpr"]
    new_jaxpr, used_inputs = pe.dce_jaxpr(closed.jaxpr, used_outputs, prune_inputs=True)
    if not new_jaxpr.eqns and not any(used_outputs):
        return used_inputs, None
    live = set(new_jaxpr.constvars)
    consts = [c for v, c in zip(closed.jaxpr.constvars, closed.consts) if v in live]
    new_params = dict(eqn.params, jaxpr=ClosedJaxpr(new_jaxpr, consts))
    new_eqn = eqn.replace(
        invars=[v for v, u in zip(eqn.invars, used_inputs) if u],
        outvars=[v for v, u in zip(eqn.outvars, used_outputs) if u],
        params=new_params)
    return used_inputs, new_eqn


def _jit_pe_custom(eqn, unknowns, policy, unsaveable):
    """A jit inside a checkpoint being split: split its jaxpr with the same policy."""
    if eqn.params["jaxpr"].consts:
        return recompute_whole_rule(eqn, unknowns, policy, unsaveable)
    split = pe.partial_eval_jaxpr_custom(eqn.params["jaxpr"].jaxpr, unknowns, policy,
                                         stage_known_outputs=True)
    params = dict(name=eqn.params["name"])
    return split_call_eqn(eqn, unknowns, split, jit_p, params, dict(params))


def split_call_eqn(eqn, unknowns, split, primitive, known_params, staged_params):
    """The known and staged equations of a call-like equation whose jaxpr was split by
    ``partial_eval_jaxpr_custom``: residuals that are the call's own inputs are read
    directly; the others become new outputs of the known equation."""
    inner = eqn.params["jaxpr"].jaxpr
    outer_of = dict(zip(inner.invars, eqn.invars))
    res_outer = [outer_of.get(r) or Var(r.aval) for r in split.residuals]
    computed = [i for i, r in enumerate(split.residuals) if r not in outer_of]
    n_known = len(split.known.outvars) - len(split.residuals)
    res_out, offloads = [], []
    for i in computed:  # offloaded residuals leave the known side already in host memory
        v = split.known.outvars[n_known + i]
        if split.offloaded[i]:
            host = Var(v.aval)
            offloads.append(JaxprEqn([v], [host], offload_p, {}, eqn.source_info))
            v = host
        res_out.append(v)
    known = Jaxpr([], split.known.invars, split.known.outvars[:n_known] + res_out,
                  split.known.eqns + offloads)
    new_res = [res_outer[i] for i in computed]
    for params in (known_params, staged_params):
        if not isinstance(params.get("prevent_cse", True), bool):
            params["prevent_cse"] = True
    eqn_known = JaxprEqn([v for v, u in zip(eqn.invars, unknowns) if not u],
                         [v for v, u in zip(eqn.outvars, split.out_unknowns) if not u] + new_res,
                         primitive, dict(known_params, jaxpr=ClosedJaxpr(known, [])),
                         eqn.source_info)
    staged = staged_with_reloads(split.staged, split.offloaded)
    eqn_staged = JaxprEqn(res_outer + [v for v, u in zip(eqn.invars, unknowns) if u],
                          [v for v, st in zip(eqn.outvars, split.out_staged) if st], primitive,
                          dict(staged_params, jaxpr=ClosedJaxpr(staged, [])), eqn.source_info)
    return eqn_known, eqn_staged, split.out_unknowns, split.out_staged, new_res


def recompute_whole_rule(eqn, unknowns, policy, unsaveable):
    """For a primitive with sub-jaxprs inside a checkpoint: the known outputs come from the
    known half of a known/unknown split (its residuals dropped); the staged side reruns the
    whole equation, so nothing inside it is saved."""
    in_vars = [Var(v.aval) for v in eqn.invars]
    inner = eqn.replace(invars=[nv if type(v) is Var else v
                                for v, nv in zip(eqn.invars, in_vars)])
    single = ClosedJaxpr(Jaxpr([], in_vars, inner.outvars, [inner]), [])
    known, _, out_uk, num_res = pe.partial_eval_jaxpr_nounits(single, tuple(unknowns), False)
    n_known_out = len(known.out_avals) - num_res
    known, _ = pe.dce_closed_jaxpr(known, [True] * n_known_out + [False] * num_res)
    eqn_known = JaxprEqn([v for v, u in zip(eqn.invars, unknowns) if not u],
                         [v for v, u in zip(eqn.outvars, out_uk) if not u], jit_p,
                         dict(name=eqn.primitive.name, jaxpr=known), eqn.source_info)
    return eqn_known, eqn, out_uk, [True] * len(eqn.outvars), []


ad.primitive_jvps[jit_p] = _jit_jvp
ad.primitive_transposes[jit_p] = _jit_transpose
pe.partial_eval_rules[jit_p] = _jit_partial_eval
batching.primitive_batchers[jit_p] = _jit_batch
pe.dce_rules[jit_p] = _jit_dce
pe.partial_eval_jaxpr_custom_rules[jit_p] = _jit_pe_custom
registry.inline_rules[jit_p] = lambda eqn: (
    None if eqn.params["jaxpr"].consts else (eqn.params["jaxpr"], None))


def rebind_as_jit(eqn, new_call, consts, operands):
    """``eqn``'s call, its Refs discharged into ``new_call``, run as a ``jit`` (a custom
    derivative rule does not matter to the pure program a discharge makes)."""
    name = eqn.params.get("name", eqn.primitive.name)
    return jit_p.bind(*consts, *operands, name=name, jaxpr=new_call)


discharge.handle_refs(jit_p, discharge.call_rule("jaxpr", rebind_as_jit, "jit"))
