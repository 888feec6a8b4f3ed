"""Jaxpr-to-jaxpr passes run before execution under jit."""

from remat.core import Jaxpr, JaxprEqn, Literal
from remat.interpreters import partial_eval as pe

# Primitives never merged by CSE: barriers exist precisely to keep values distinct, and
# effectful or random primitives must run as often as written.
cse_barriers = set()


def _atom_key(v, rename):
    if type(v) is Literal:
        return ("lit", v.aval, v.val.item() if hasattr(v.val, "item") else v.val)
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


def optimize_jaxpr(jaxpr):
    """The pass pipeline run once per jitted jaxpr: CSE, then DCE."""
    jaxpr = cse_jaxpr(jaxpr)
    jaxpr, _ = pe.dce_jaxpr(jaxpr)
    return jaxpr
