"""``auto_remat(fun, memory_budget=...)``: rematerialization chosen for a whole function.

A checkpoint's recomputation runs at once when the backward pass reaches it, so what one
region saves moves its backward peak little: memory is saved by *where* the regions are. So
``auto_remat`` traces ``fun`` once per signature and weighs structures for it: its equations
cut into ``k`` segments (``SEGMENT_COUNTS``) at narrow points (``cut_points``: local minima of
the bytes crossing a cut, balanced by a binary search on the largest segment), each a
``checkpoint`` with an inner policy (``INNER_POLICIES``), the last segment (a loss, say)
checkpointed or left as it is, and the body of every ``scan`` checkpointed with the same
inner policy (so each iteration keeps only its carry, or its dots). Each structure is
modelled as ``remat.checkpointing.budget`` models a split: the function differentiated with
respect to the inputs being differentiated (JVP tracers with a tangent; all floating inputs
when called outside AD), its modelled peak and its recompute cost beyond no rematerialization; the
cheapest that fits the budget runs (ties: the smaller peak). The structures and their figures
are cached per function and signature, shared by every budget. A fraction interpolates
between the smallest modelled peak (0.0) and that of no rematerialization (1.0). The result is
ordinary ``checkpoint`` equations, so ``grad``, ``value_and_grad``, ``vjp``, ``jit``, ``vmap``
and nested hand-written checkpoints (kept whole inside a segment, their own policy
respected) compose with it. Under ``vmap`` the choice is made per example (the traced avals
are unbatched), so a byte budget is per example there.
"""

import functools
import numbers
import weakref
from typing import NamedTuple

import numpy as np

from remat import core
from remat.api_util import abstractify, arg_names, flatten_fun, fun_name
from remat.checkpointing.budget import jaxpr_cost, modelled_peak, out_bytes, recorders
from remat.checkpointing.budget import memory_budget as memory_budget_policy
from remat.checkpointing.checkpoint import checkpoint_p
from remat.checkpointing.policies import (
    dots_saveable,
    dots_with_no_batch_dims_saveable,
    everything_saveable,
    nothing_saveable,
)
from remat.core import ClosedJaxpr, Jaxpr, Literal, Var, new_jaxpr_eqn
from remat.dtypes import issubdtype
from remat.exec.peaks import nbytes
from remat.interpreters import ad
from remat.interpreters import partial_eval as pe
from remat.interpreters.discharge import discharge_state, has_state
from remat.tree_util import tree_flatten, tree_unflatten

__all__ = ["auto_remat", "Structure"]

SEGMENT_COUNTS = tuple(range(1, 17)) + (20, 24, 32, 48, 64)


class Structure(NamedTuple):
    """One rematerialization structure of a function and what the model says of it."""

    segments: int  # 0: no rematerialization
    inner: str  # the policy inside each segment and scan body
    plain_tail: bool  # the last segment (a loss, say) left as it is
    peak: int  # modelled peak bytes of the function differentiated
    cost: float  # recompute cost beyond no rematerialization

    def describe(self):
        if not self.segments:
            return "no rematerialization"
        if self.segments == 1 and self.plain_tail:
            return f"scan bodies checkpointed ({self.inner}), nothing else"
        tail = ", the last one not checkpointed" if self.plain_tail else ""
        return f"{self.segments} segment(s), {self.inner} inside{tail}"


class AutoRematChoice(NamedTuple):
    """What ``auto_remat`` chose for one signature, and the alternatives it weighed."""

    policy: object
    budget: int
    chosen: Structure
    options: tuple

    def format(self):
        lines = [f"auto_remat({self.policy.budget!r}): budget {self.budget} bytes; chose "
                 f"{self.chosen.describe()}: modelled peak {self.chosen.peak} bytes, recompute "
                 f"cost {self.chosen.cost:.4g}"]
        return "\n".join(lines)

    def __str__(self):
        return self.format()


def _checkpoint_eqn(ins, outs, body_eqns, policy):
    body = Jaxpr([], ins, outs, body_eqns)
    return new_jaxpr_eqn(ins, outs, checkpoint_p,
                         dict(jaxpr=ClosedJaxpr(body, []), prevent_cse=True,
                              differentiated=False, policy=policy))


def _checkpointed_scan(eqn, policy):
    """``eqn`` (a scan) with its body one checkpoint of ``policy``."""
    body = eqn.params["jaxpr"]
    if body.consts:
        return eqn
    ins = [Var(v.aval) for v in body.jaxpr.invars]
    outs = [Var(a) for a in body.out_avals]
    inner = new_jaxpr_eqn(ins, outs, checkpoint_p,
                          dict(jaxpr=body, prevent_cse=True, differentiated=False,
                               policy=policy), eqn.source_info)
    return eqn.replace(params=dict(eqn.params, jaxpr=ClosedJaxpr(Jaxpr([], ins, outs, [inner]),
                                                                  [])))


def crossing_bytes(jaxpr):
    """Per cut after equation ``p``: the bytes of the values computed at or before ``p`` and
    used after it, what a segment boundary there keeps (the inputs excluded: kept anyway)."""
    n = len(jaxpr.eqns)
    defined = {v: i for i, e in enumerate(jaxpr.eqns) for v in e.outvars}
    last_use = {}
    for i, e in enumerate(jaxpr.eqns):
        for v in e.invars:
            if type(v) is Var and v in defined:
                last_use[v] = i
    for v in jaxpr.outvars:
        if type(v) is Var and v in defined:
            last_use[v] = n
    delta = [0] * (n + 1)
    for v, end in last_use.items():
        delta[defined[v]] += nbytes(v.aval)
        delta[end] -= nbytes(v.aval)
    crossing, live = [], 0
    for i in range(n):
        live += delta[i]
        crossing.append(live)
    return crossing


def cut_points(jaxpr, segments):
    """Where to cut ``jaxpr`` into at most ``segments``: at narrow points (local minima of
    ``crossing_bytes``: between blocks, not inside one), chosen so that the largest segment's
    output bytes are as small as they can be (a binary search on that size, each probe a
    greedy sweep)."""
    n = len(jaxpr.eqns)
    crossing = crossing_bytes(jaxpr)
    narrow = [p for p in range(n - 1) if (p == 0 or crossing[p] <= crossing[p - 1])
              and crossing[p] <= crossing[p + 1]]
    prefix, run = [], 0
    for e in jaxpr.eqns:
        run += max(out_bytes(e), 1)
        prefix.append(run)

    def sweep(limit):
        cuts, start, last = [], 0, None
        for p in narrow + [n - 1]:
            if prefix[p] - start > limit:
                if last is None:
                    return None
                cuts.append(last)
                start, last = prefix[last], None
                if prefix[p] - start > limit:
                    return None
            last = p
        return cuts

    lo, hi = 0, prefix[-1]
    best = []
    while lo < hi:
        mid = (lo + hi) // 2
        cuts = sweep(mid)
        if cuts is not None and len(cuts) < segments:
            best, hi = cuts, mid
        else:
            lo = mid + 1
    return best


def restructure(jaxpr, segments, policy, plain_tail=False):
    """``jaxpr`` with its scans' bodies checkpointed and its equations cut into ``segments``
    checkpoints (``cut_points``), each with ``policy`` (the last left as it is with
    ``plain_tail``)."""
    eqns = [_checkpointed_scan(e, policy) if e.primitive.name == "scan" else e
            for e in jaxpr.eqns]
    groups, start = [], 0
    for cut in cut_points(jaxpr, segments) + [len(eqns) - 1]:
        groups.append(eqns[start:cut + 1])
        start = cut + 1
    groups = [g for g in groups if g]
    tail = groups.pop() if plain_tail else []
    new_eqns = []
    for i, group in enumerate(groups):
        later = [e for g in groups[i + 1:] for e in g]
        new_eqns.append(_segment(group, later + tail, jaxpr, policy))
    return Jaxpr([], jaxpr.invars, jaxpr.outvars, new_eqns + tail)


def _segment(group, later, jaxpr, policy):
    defined = {v for e in group for v in e.outvars}
    ins, seen = [], set()
    for e in group:
        for v in e.invars:
            if type(v) is Var and v not in defined and v not in seen:
                seen.add(v)
                ins.append(v)
    used_later = {v for e in later for v in e.invars if type(v) is Var}
    used_later.update(v for v in jaxpr.outvars if type(v) is not Literal)
    outs = [v for e in group for v in e.outvars if v in used_later]
    return _checkpoint_eqn(ins, outs, group, policy)


def _model(jaxpr, cost_model, nonzeros):
    """``(modelled peak, backward cost)`` of ``jaxpr`` differentiated w.r.t. its ``nonzeros``
    inputs."""
    jvp_closed, _ = ad.jvp_jaxpr(ClosedJaxpr(jaxpr, []), nonzeros, False)
    jvp_closed, consts = pe.closed_call(jvp_closed)
    n_primal = len(consts) + len(jaxpr.invars)
    unknowns = [False] * n_primal + [True] * (len(jvp_closed.jaxpr.invars) - n_primal)
    split = pe.partial_eval_jaxpr_custom(jvp_closed.jaxpr, unknowns, everything_saveable)
    return modelled_peak(split), jaxpr_cost(split.staged, cost_model)


INNER_POLICIES = {"nothing_saveable": nothing_saveable, "dots_saveable": dots_saveable,
                  "dots_with_no_batch_dims_saveable": dots_with_no_batch_dims_saveable}


def _options(jaxpr, cost_model, nonzeros):
    """Every structure weighed; the first is no rematerialization."""
    peak, base = _model(jaxpr, cost_model, nonzeros)
    options = [Structure(0, "none", False, peak, 0.0)]
    n = len(jaxpr.eqns)
    seen_cuts = set()
    for k in sorted({min(k, n) for k in SEGMENT_COUNTS if n}):
        cuts = tuple(cut_points(jaxpr, k))
        if cuts in seen_cuts:  # another count cut the same places: the same structures
            continue
        seen_cuts.add(cuts)
        for name, inner in INNER_POLICIES.items():
            for plain_tail in (False, True):
                candidate = restructure(jaxpr, k, inner, plain_tail)
                peak, cost = _model(candidate, cost_model, nonzeros)
                options.append(Structure(k, name, plain_tail, peak, max(0.0, cost - base)))
    return options


def _being_differentiated(values):
    return any(isinstance(x, ad.JVPTracer) and type(x.tangent) is not ad.Zero for x in values)


def _differentiated(values):
    """Which inputs are being differentiated (a JVP tracer with a tangent); all the floating
    ones when none is (the choice is then for a later ``vjp`` of the same signature)."""
    marked = tuple(_being_differentiated([x]) for x in values)
    if any(marked):
        return marked
    return tuple(issubdtype(core.get_aval(x).dtype, np.inexact) for x in values)


# signature -> the structures weighed, shared by every budget of one function
_weighed = weakref.WeakKeyDictionary()


class _AutoRemat:
    def __init__(self, fun, policy):
        functools.update_wrapper(self, fun, updated=())
        self.fun, self.policy = fun, policy
        self.cache = {}
        self.weighed = {}

    def _choose(self, flat_fun, avals, names, flat_args, key):
        debug = core.DebugInfo(fun_name(self.fun), names, "auto_remat")
        closed = pe.trace_to_jaxpr(flat_fun, avals, debug)
        if has_state(closed):  # the Refs it creates are discharged: then cut and modelled
            closed = discharge_state(closed, False).closed
        closed, consts = pe.closed_call(closed)
        nonzeros = _differentiated(list(consts) + list(flat_args))
        try:
            per_fun = _weighed.setdefault(self.fun, {})
        except TypeError:  # not weakly referenceable: weighed per wrapper
            per_fun = self.weighed
        weigh_key = (key, nonzeros, self.policy.cost_model,
                     tuple(core.get_aval(c) for c in consts))
        options = per_fun.get(weigh_key)
        if options is None or any(isinstance(c, core.Tracer) for c in consts):
            try:
                options = _options(closed.jaxpr, self.policy.cost_model, nonzeros)
            except Exception:
                if _being_differentiated(list(consts) + list(flat_args)):
                    raise  # the error the gradient itself would raise
                # a function no one differentiates (here) that reverse mode cannot go
                # through (a while loop, say): nothing to rematerialize, run it as it is
                options = [Structure(0, "none", False, 0, 0.0)]
            per_fun[weigh_key] = options
        peaks = [s.peak for s in options]
        policy = self.policy
        if isinstance(policy.budget, numbers.Integral):
            budget = policy.budget
        else:
            low = min(peaks)
            budget = int(low + policy.budget * max(0, peaks[0] - low))
        feasible = [s for s in options if s.peak <= budget]
        if not feasible:
            raise ValueError(
                f"auto_remat: a memory_budget of {budget} bytes is below what must be kept: the "
                f"smallest feasible budget for this function is {min(peaks)} bytes")
        chosen = min(feasible, key=lambda s: (float(f"{s.cost:.9g}"), s.peak, s.segments))
        jaxpr = closed.jaxpr
        if chosen.segments:
            jaxpr = restructure(jaxpr, chosen.segments, INNER_POLICIES[chosen.inner],
                                chosen.plain_tail)
        return ClosedJaxpr(jaxpr, []), consts, AutoRematChoice(policy, budget, chosen,
                                                               tuple(options))

    def __call__(self, *args, **kwargs):
        flat_args, in_tree = tree_flatten((args, kwargs))
        names = arg_names(self.fun, args, kwargs)
        avals = tuple(abstractify(x, n) for x, n in zip(flat_args, names))
        key = (in_tree, avals, _differentiated(flat_args))
        entry = self.cache.get(key)
        if entry is None:
            flat_fun, store = flatten_fun(self.fun, in_tree)
            jaxpr, consts, choice = self._choose(flat_fun, list(avals), names, flat_args, key)
            entry = (jaxpr, consts, choice, store.tree)
            if not any(isinstance(c, core.Tracer) for c in consts):
                self.cache[key] = entry
        jaxpr, consts, choice, out_tree = entry
        for found in recorders:
            found.append(choice)
        outs = core.eval_jaxpr(jaxpr.jaxpr, [], *consts, *flat_args)
        return tree_unflatten(out_tree, outs)


def auto_remat(fun=None, *, memory_budget, cost_model=None):
    """``fun`` rematerialized so that its gradient step fits ``memory_budget`` (int bytes of
    the modelled peak, or a float in [0, 1] between the smallest peak and no remat) with
    the least recomputation; see the module docstring."""
    try:
        policy = memory_budget_policy(memory_budget, cost_model=cost_model)
    except (TypeError, ValueError) as e:  # in this function's words: its argument's name
        raise type(e)(str(e).replace("memory_budget: bytes_or_fraction",
                                     "auto_remat: memory_budget")) from None
    if fun is None:
        return functools.partial(auto_remat, memory_budget=memory_budget,
                                 cost_model=cost_model)
    if not callable(fun):
        raise TypeError(f"auto_remat expects a callable, got {fun!r}")
    return _AutoRemat(fun, policy)

