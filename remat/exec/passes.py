"""Jaxpr-to-jaxpr passes run before execution under jit."""

import numpy as np

from remat.core import Jaxpr, JaxprEqn, Literal, Var
from remat.interpreters import partial_eval as pe
from remat.runtime import registry
from remat.runtime.registry import cse_barriers, inline_rules, transposed_forms


def inline_calls(jaxpr):
    """Flatten inlinable call equations into ``jaxpr`` (fresh variables for each inlined
    body). A checkpoint's recomputation is preceded by an optimization barrier on the inputs
    its ``prevent_cse`` selects, so CSE cannot merge it with the forward pass."""
    if not any(e.primitive in inline_rules for e in jaxpr.eqns):
        return jaxpr
    rename = {}

    def atom(v, env):
        return env.get(v, v) if type(v) is not Literal else v

    eqns = []
    for eqn in jaxpr.eqns:
        rule = inline_rules.get(eqn.primitive)
        ins = [atom(v, rename) for v in eqn.invars]
        inlined = rule(eqn) if rule is not None else None
        if inlined is None:
            eqns.append(eqn if ins == eqn.invars else eqn.replace(invars=ins))
            continue
        closed, barrier = inlined
        if barrier:
            picked = [i for i, (v, b) in enumerate(zip(ins, barrier)) if b and type(v) is Var]
            if picked:
                outs = [Var(ins[i].aval) for i in picked]
                eqns.append(JaxprEqn([ins[i] for i in picked], outs, registry.barrier_primitive, {},
                                     eqn.source_info))
                for i, o in zip(picked, outs):
                    ins[i] = o
        inner = inline_calls(closed.jaxpr)
        env = dict(zip(inner.invars, ins))
        for e in inner.eqns:
            new_outs = [Var(v.aval) for v in e.outvars]
            eqns.append(e.replace(invars=[atom(v, env) for v in e.invars], outvars=new_outs))
            env.update(zip(e.outvars, new_outs))
        for outer_v, inner_v in zip(eqn.outvars, inner.outvars):
            rename[outer_v] = atom(inner_v, env)
    outvars = [atom(v, rename) for v in jaxpr.outvars]
    return Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, eqns, jaxpr.debug_info)


def _atom_key(v, rename):
    if type(v) is Literal:  # by its bits: 0.0 == -0.0 (and nan != nan) as values
        return ("lit", v.aval, np.asarray(v.val, v.aval.dtype).tobytes())
    return rename.get(v, v)


def _params_key(params):
    try:
        key = tuple(sorted(params.items()))
        hash(key)
        return key
    except TypeError:
        return None


def cse_jaxpr(jaxpr):
    """Common-subexpression elimination: an equation equal to an earlier one (same primitive,
    same operands, same params) reuses its outputs. Optimization barriers and effectful
    primitives are never merged, and nothing is merged across them (their outputs are new
    variables), so rematerialized values stay recomputed."""
    rename = {}
    seen = {}
    eqns = []
    for eqn in jaxpr.eqns:
        invars = [rename.get(v, v) if type(v) is not Literal else v for v in eqn.invars]
        prim = eqn.primitive
        params_key = _params_key(eqn.params)
        mergeable = (prim not in cse_barriers and params_key is not None
                     and not getattr(prim, "has_effects", False))
        if mergeable:
            key = (prim, tuple(_atom_key(v, rename) for v in eqn.invars), params_key)
            prev = seen.get(key)
            if prev is not None:
                for old, new in zip(eqn.outvars, prev.outvars):
                    rename[old] = new
                continue
        new_eqn = eqn if invars == eqn.invars else JaxprEqn(
            invars, eqn.outvars, prim, eqn.params, eqn.source_info)
        if mergeable:
            seen[key] = new_eqn
        eqns.append(new_eqn)
    outvars = [rename.get(v, v) if type(v) is not Literal else v for v in jaxpr.outvars]
    return Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, eqns, jaxpr.debug_info)


def fold_constants(jaxpr):
    """Evaluate equations whose operands are all literals and whose results are scalars
    (e.g. ``div 1.0 8.0``), replacing their uses by literals. Larger constant results are
    left to run: folding them would pin their memory for the life of the plan (a constant
    array a checkpoint does not save is recomputed, DESIGN §4.3)."""
    rename = {}
    eqns = []
    for eqn in jaxpr.eqns:
        invars = [rename.get(v, v) if type(v) is not Literal else v for v in eqn.invars]
        foldable = (invars and all(type(v) is Literal for v in invars)
                    and not eqn.primitive.multiple_results
                    and eqn.primitive not in cse_barriers
                    and not getattr(eqn.primitive, "has_effects", False)
                    and not eqn.outvars[0].aval.shape and not eqn.params)
        if foldable:
            out_aval = eqn.outvars[0].aval
            rename[eqn.outvars[0]] = Literal(_folded_scalar(eqn.primitive, invars, out_aval),
                                             out_aval)
            continue
        eqns.append(eqn if invars == eqn.invars else eqn.replace(invars=invars))
    outvars = [rename.get(v, v) if type(v) is not Literal else v for v in jaxpr.outvars]
    return Jaxpr(jaxpr.constvars, jaxpr.invars, outvars, eqns, jaxpr.debug_info)


_folded = {}  # (primitive, impl, operand dtypes and bits, result dtype) -> folded scalar
_FOLDED_ENTRIES = 4096  # scalars: a few hundred bytes an entry at most


def _folded_scalar(primitive, literals, out_aval):
    """The scalar ``primitive`` gives on the scalar ``literals``, computed once per process:
    a checkpoint's recomputation of a literal-only value, and the forward and backward plans
    of one differentiated ``jit``, fold the same expression, and its impl runs once for all
    of them (as XLA folds it without running it at all). Weak types are left out of the key
    (they do not change the value); the impl is in it, so a redefined impl is run anew."""
    vals = [np.asarray(v.val, v.aval.dtype) for v in literals]
    key = (primitive, primitive.impl, tuple((v.dtype, v.tobytes()) for v in vals),
           np.dtype(out_aval.dtype))
    value = _folded.get(key)
    if value is None:
        value = np.asarray(primitive.impl(*vals), out_aval.dtype)[()]
        if len(_folded) >= _FOLDED_ENTRIES:
            _folded.clear()
        _folded[key] = value
    return value


def fold_transposes(jaxpr):
    """A transpose that is the one use of a result its producer can write transposed
    (``registry.transposed_forms``: a matrix product, as JAX's gradients of ``x @ w`` give
    them) becomes that producer writing it so: later steps read it in memory order."""
    uses = {}
    for v in [v for e in jaxpr.eqns for v in e.invars] + list(jaxpr.outvars):
        if type(v) is Var:
            uses[v] = uses.get(v, 0) + 1
    producers = {e.outvars[0]: i for i, e in enumerate(jaxpr.eqns)
                 if e.primitive in transposed_forms}
    eqns, dropped = list(jaxpr.eqns), set()
    for i, eqn in enumerate(jaxpr.eqns):
        if eqn.primitive is not registry.transpose_primitive or type(eqn.invars[0]) is not Var:
            continue
        at = producers.get(eqn.invars[0])
        if at is None or uses[eqn.invars[0]] != 1:
            continue
        producer = eqns[at]
        form = transposed_forms[producer.primitive](producer, eqn.params["permutation"])
        if form is not None:
            invars, params = form
            eqns[at] = JaxprEqn(invars, eqn.outvars, producer.primitive, params,
                                producer.source_info)
            dropped.add(i)
    if not dropped:
        return jaxpr
    eqns = [e for i, e in enumerate(eqns) if i not in dropped]
    return Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars, eqns, jaxpr.debug_info)


def fold_scalar_broadcasts(jaxpr):
    """An elementwise equation reading a broadcast of a scalar literal (the ones, zeros and
    halves of JAX's gradients) reads the literal instead, where another operand gives the
    result its shape: NumPy broadcasts it for free, and the broadcast, once unused, is never
    materialized."""
    literal_of = {e.outvars[0]: e.invars[0] for e in jaxpr.eqns
                  if e.primitive is registry.broadcast_primitive and type(e.invars[0]) is Literal
                  and not e.invars[0].aval.shape}
    if not literal_of:
        return jaxpr
    eqns = []
    for eqn in jaxpr.eqns:
        shape = eqn.outvars[0].aval.shape if len(eqn.outvars) == 1 else None
        if eqn.primitive in registry.scalar_broadcasting and shape and any(
                v.aval.shape == shape and v not in literal_of for v in eqn.invars
                if type(v) is not Literal):
            invars = [literal_of.get(v, v) if type(v) is not Literal else v
                      for v in eqn.invars]
            if invars != eqn.invars:
                eqn = eqn.replace(invars=invars)
        eqns.append(eqn)
    return Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars, eqns, jaxpr.debug_info)


def fold_selected_updates(jaxpr):
    """``select_n(p, x, update(x, ...))`` becomes one update of ``x`` that selects within the
    updated part only (``registry.selected_update_forms``), where ``p`` is a scalar or a
    broadcast of a predicate and the update's result has no other use. A vmapped while loop
    with a batched predicate ends each step so, for every carry: the select read the carry
    after its update, so the update copied the whole carry and the select made another (an
    equinox loop setting one element of 100,000 a step: O(n) a step, O(n^2) a loop); now the
    update is the carry's last use and writes into it."""
    forms = registry.selected_update_forms
    if not any(e.primitive in forms for e in jaxpr.eqns):
        return jaxpr
    uses = {}
    for v in [v for e in jaxpr.eqns for v in e.invars] + list(jaxpr.outvars):
        if type(v) is Var:
            uses[v] = uses.get(v, 0) + 1
    producer = {e.outvars[0]: (i, e) for i, e in enumerate(jaxpr.eqns) if len(e.outvars) == 1}
    replaced, dropped = {}, set()
    for i, eqn in enumerate(jaxpr.eqns):
        if eqn.primitive is not registry.select_primitive or len(eqn.invars) != 3 or \
                eqn.invars[0].aval.dtype != np.bool_:
            continue
        predicate = _broadcast_predicate(eqn.invars[0], eqn.outvars[0].aval.shape, producer)
        for case in (1, 2):
            y, x = eqn.invars[case], eqn.invars[3 - case]
            if predicate is None or type(y) is not Var or type(x) is not Var or uses[y] != 1 \
                    or y not in producer:
                continue
            at, update = producer[y]
            if update.primitive not in forms or update.invars[0] is not x or at in dropped:
                continue
            form = forms[update.primitive](update, predicate[1], case - 1)
            eqns = form and _traced_eqns(form, [predicate[0], *update.invars], eqn.outvars[0],
                                         eqn.source_info)
            if eqns:
                replaced[i] = eqns
                dropped.add(at)
                break
    if not replaced:
        return jaxpr
    eqns = []
    for i, eqn in enumerate(jaxpr.eqns):
        if i not in dropped:
            eqns.extend(replaced.get(i, [eqn]))
    return Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars, eqns, jaxpr.debug_info)


def _broadcast_predicate(pred, shape, producer):
    """``(p, dims)`` where ``pred`` is ``p`` broadcast along ``dims`` of ``shape`` (each of
    ``p``'s dimensions whole; a scalar along none); else None."""
    if not pred.aval.shape:
        return pred, ()
    at_eqn = producer.get(pred) if type(pred) is Var else None
    if at_eqn is None or at_eqn[1].primitive is not registry.broadcast_primitive:
        return None
    eqn = at_eqn[1]
    p, dims = eqn.invars[0], tuple(eqn.params["broadcast_dimensions"])
    if any(p.aval.shape[k] != shape[d] for k, d in enumerate(dims)):
        return None
    return p, dims


def _traced_eqns(fn, atoms, out, info):
    """The equations of ``fn`` applied to ``atoms``, its result written to ``out``; None where
    its trace holds a constant array."""
    closed = pe.trace_to_jaxpr(lambda *args: [fn(*args)], [a.aval for a in atoms])
    inner = closed.jaxpr
    if inner.constvars or not inner.eqns or inner.eqns[-1].outvars[0] is not inner.outvars[0]:
        return None
    env = dict(zip(inner.invars, atoms))
    eqns = []
    for e in inner.eqns:
        outs = [Var(v.aval) for v in e.outvars]
        eqns.append(JaxprEqn([env.get(v, v) if type(v) is not Literal else v for v in e.invars],
                             outs, e.primitive, e.params, info))
        env.update(zip(e.outvars, outs))
    eqns[-1].outvars = [out]
    return eqns


def optimize_jaxpr(jaxpr):
    """The pass pipeline run once per jitted jaxpr: inlining, constant folding, CSE, selects of
    updates folded into the updates, scalar broadcasts folded into their elementwise uses,
    DCE, transposes folded into the products they read."""
    jaxpr = fold_scalar_broadcasts(fold_selected_updates(
        cse_jaxpr(fold_constants(inline_calls(jaxpr)))))
    jaxpr, _ = pe.dce_jaxpr(jaxpr)
    return fold_transposes(jaxpr)
