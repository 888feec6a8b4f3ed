"""Loop constants read in memory order: a ``scan`` or ``while`` body that reads a loop constant
across its rows (``registry.in_order_forms``: the ``w`` of ``x @ w.T``, in every dense layer's
gradient), or transposes it (a view), is rewritten to read a contiguous transposed copy
instead, made once per loop, not once per iteration. BLAS runs those products 1.1-2.4x faster
(a GRU's backward step: 41 -> 26 us). The copies are new leading constants of the body, so
the plans and both loop tiers run the same rewritten body and agree bit for bit."""

import math

from remat import core
from remat.core import ClosedJaxpr, Jaxpr, JaxprEqn, Var
from remat.exec.passes import inline_calls
from remat.runtime import registry
from remat.runtime.registry import in_order_forms

# the largest constant copied: above it the copy's memory (held for the whole loop) weighs
# more than the product's speed (1.08x at 256x256x256; a 4096x4096 weight would be 64 MiB)
MAX_COPY_ELEMENTS = 1 << 20


@core.memoize_on_jaxpr
def transposed_constants(closed, num_consts):
    """``(body, sources)``: ``closed`` reading transposed copies of some constants, which lead
    its inputs, and for each copy ``(position, permutation)``: the constant's position among
    the body's constants (its closed consts, then its ``num_consts`` leading inputs) and how
    it is transposed; ``(closed, [])`` when no constant is read across its rows. A constant
    is read across its rows by a ``registry.in_order_forms`` equation, and by a
    ``transpose`` of it (whose result becomes the copy)."""
    jaxpr = inline_calls(closed.jaxpr)  # (a checkpointed body's recomputation reads them)
    position = {v: i for i, v in enumerate([*jaxpr.constvars, *jaxpr.invars[:num_consts]])}
    constant = {v: v for v in position}  # a var holding a constant's value -> the constant
    copies = {}  # (constant, permutation) -> its transposed copy's var
    origin = {}  # a copy's var -> (constant, permutation)
    rename = {}  # a transpose's result -> the copy that replaces it

    def copyable(v):
        return type(v) is Var and v in constant and \
            math.prod(v.aval.shape) <= MAX_COPY_ELEMENTS

    def copy(v, permutation):
        key = (constant[v], tuple(permutation))
        if key not in copies:
            copies[key] = Var(v.aval.update(shape=tuple(v.aval.shape[d] for d in permutation)))
            origin[copies[key]] = key
        return copies[key]

    eqns = []
    for eqn in jaxpr.eqns:
        eqn = eqn.replace(invars=[rename.get(v, v) if type(v) is Var else v
                                  for v in eqn.invars])
        x = eqn.invars[0] if eqn.invars else None
        if eqn.primitive is registry.barrier_primitive:  # (a checkpoint's: same values)
            constant.update((o, constant[v]) for o, v in zip(eqn.outvars, eqn.invars)
                            if type(v) is Var and v in constant)
        elif eqn.primitive is registry.transpose_primitive and copyable(x):
            rename[eqn.outvars[0]] = copy(x, eqn.params["permutation"])
            continue
        form = in_order_forms.get(eqn.primitive)
        w = eqn.invars[1] if len(eqn.invars) == 2 else None
        params = form(eqn) if form is not None and (
            copyable(w) or (type(w) is Var and w in origin)) else None
        if params is not None:
            if w not in origin:
                read = copy(w, (1, 0))
            else:  # a copy read across its rows: the constant itself, in order
                read = origin[w][0] if origin[w][1] == (1, 0) else None
            if read is not None:
                eqn = JaxprEqn([x, read], eqn.outvars, eqn.primitive, params, eqn.source_info)
        eqns.append(eqn)
    if not copies:
        return closed, []
    outvars = [rename.get(v, v) if type(v) is Var else v for v in jaxpr.outvars]
    body = Jaxpr(jaxpr.constvars, [*copies.values(), *jaxpr.invars], outvars, eqns,
                 jaxpr.debug_info)
    return ClosedJaxpr(body, closed.consts), [(position[v], p) for v, p in copies]


def _loop_body(name, params):
    """A loop step's body and how many of its inputs are constants (None: not a loop)."""
    if name == "scan":
        return params["jaxpr"], params["num_consts"]
    if name == "while":
        return params["body_jaxpr"], params["body_nconsts"]
    return None, 0


def held_bytes(name, params):
    """The bytes of the transposed copies a loop step (primitive ``name``) holds while it
    runs: the executor's memory model counts them beside the body's own peak."""
    body, num_consts = _loop_body(name, params)
    if body is None:
        return 0
    _, sources = transposed_constants(body, num_consts)
    avals = [v.aval for v in (*body.jaxpr.constvars, *body.jaxpr.invars[:num_consts])]
    return sum(math.prod(avals[i].shape) * avals[i].dtype.itemsize for i, _ in sources)
