"""What the control-flow primitives share: tracing a body to a ClosedJaxpr, running one, and
reordering or extending a body's inputs."""


from remat import core
from remat.api_util import flatten_fun_nokwargs, fun_name
from remat.core import ClosedJaxpr, Jaxpr, Var
from remat.interpreters import partial_eval as pe
from remat.lax.shape import full
from remat.tree_util import (
    keystr,
    tree_flatten_with_path,
    tree_unflatten,
)

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
    return full(aval.shape, 0, aval.dtype)


def _typematch(a, b):
    """JAX's ``core.typematch``: the same shape and dtype, weak types aside."""
    return a.shape == b.shape and a.dtype == b.dtype


def _mismatch_extra(a, b):
    """What differs between two avals, as JAX's messages end (``, so the dtypes do not
    match``)."""
    what = [f"the {kind} do not match" for kind, differs in
            (("dtypes", a.dtype != b.dtype), ("shapes", a.shape != b.shape)) if differs]
    if not what:
        return ""
    return ", so " + (what[0] if len(what) == 1 else
                      ", ".join(what[:-1]) + ", and " + what[-1])


def _capitalize(s):
    return s[:1].upper() + s[1:]


def _or(a, b):
    return [x or y for x, y in zip(a, b)]


def _leaf_paths(tree):
    """``keystr`` of every leaf of a tree structure (``''`` for a bare leaf)."""
    dummy = tree_unflatten(tree, [0] * tree.num_leaves)
    return [keystr(path) for path, _ in tree_flatten_with_path(dummy)[0]]
