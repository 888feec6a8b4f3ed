"""Memory-budget policies: ``checkpoint_policies.memory_budget(bytes_or_fraction)`` decides
what a checkpoint saves so that its differentiated computation fits a memory budget, with as
little recomputation as it can.

The budget bounds the executor's **modelled peak** of the checkpoint region differentiated:
its forward pass (the known side of the split, which keeps the residuals) followed by its
backward pass (the transpose of the staged side, which recomputes what was not saved), as
``remat.exec.peaks.plan_peaks`` replays the plan's buffer accounting on avals, above the
region's inputs. For ``auto_remat`` of a loss under ``grad`` that region is the whole step,
so the budget bounds what ``memory.peak_memory`` measures of ``jit(grad(...))``. A fraction
interpolates between the peak of saving only the inputs (0.0) and the peak of saving
everything (1.0, no rematerialization).

A budget policy is resolvable (``resolve_for``, the hook ``partial_eval_jaxpr_custom`` calls):
when a checkpoint's jaxpr is split it

1. lists the candidate equations, those whose outputs the split may keep: the jaxpr's own
   known equations, and, recursively, those in the bodies of ``scan`` (bytes and cost times
   the trip count) and ``jit`` equations with unknown operands;
2. proposes save sets, one per point of a grid of residual-byte bounds: with the **exact
   solver** when every candidate is at the top level and there are at most
   ``ILP_MAX_CANDIDATES`` (measured: HiGHS takes about 12 ms per solve at 200 candidates and
   0.3 s at 400, and there is one solve per grid point) (an integer program over
   save/recompute decisions, solved by
   ``scipy.optimize.milp`` (HiGHS): minimise the recompute cost subject to every value the
   backward pass needs being saved or recomputed from saved or recomputed operands, and the
   saved bytes under the bound), and always with the **fast solver** (greedy knapsack:
   candidates by recompute cost per byte, the longest prefix within the bound);
3. splits the jaxpr with each proposal and models the backward pass's peak and measures its
   recompute cost (the cost of the staged side beyond that of saving everything);
4. saves exactly the equations of the cheapest proposal whose modelled peak fits.

Steps 1-3 do not depend on the budget (they are cached per jaxpr), so a larger budget never
chooses more recomputation. The cost model: flops for ``dot_general`` and convolutions,
bytes touched for everything else, the two related by a flop-per-byte ratio timed once per
process; or ``cost_model(eqn) -> float``.
"""

import contextlib
import functools
import math
import numbers
import time
import weakref
from typing import NamedTuple

import numpy as np

from remat import core
from remat.core import ClosedJaxpr, Literal, Var
from remat.exec.peaks import nbytes, plan_peaks, sub_jaxprs
from remat.exec.plan import Plan
from remat.interpreters import ad
from remat.interpreters import partial_eval as pe
from remat.runtime.lazy_imports import LazyModule

optimize = LazyModule("scipy.optimize")

__all__ = ["MemoryBudget", "memory_budget", "SavedEquations", "Resolution", "default_cost",
           "solve_ilp", "recompute_cost", "recording", "ILP_MAX_CANDIDATES"]

ILP_MAX_CANDIDATES = 200  # HiGHS solves these in well under a second
GRID_POINTS = 12  # residual-byte bounds proposed per solver


# --- the cost model --------------------------------------------------------------------------


@functools.cache
def flops_per_byte():
    """How many flops of a matrix multiply cost as much time as touching one byte in an
    elementwise pass, timed once per process on this machine."""
    a = np.ones((192, 192), np.float32)
    x = np.ones(1 << 19, np.float32)

    def best(f):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            f()
            times.append(time.perf_counter() - start)
        return max(min(times), 1e-9)

    per_flop = best(lambda: a @ a) / (2 * 192 ** 3)
    per_byte = best(lambda: np.add(x, x)) / (3 * x.nbytes)
    return per_byte / per_flop


def _flops(eqn):
    out = eqn.outvars[0].aval
    if eqn.primitive.name == "dot_general":
        (lhs_contract, _), _ = eqn.params["dimension_numbers"]
        lhs = eqn.invars[0].aval
        return 2 * math.prod(out.shape) * math.prod(lhs.shape[d] for d in lhs_contract)
    rhs = eqn.invars[1].aval
    out_features = rhs.shape[eqn.params["dimension_numbers"].rhs_spec[0]]
    return 2 * math.prod(out.shape) * (math.prod(rhs.shape) // max(out_features, 1))


def default_cost(eqn):
    """Recompute cost of one equation in bytes-touched units: a dot or convolution's flops
    over the machine's flop-per-byte ratio, else the bytes it reads and writes."""
    if eqn.primitive.name in ("dot_general", "conv_general_dilated"):
        return _flops(eqn) / flops_per_byte()
    return float(sum(nbytes(v.aval) for v in eqn.invars if type(v) is not Literal)
                 + sum(nbytes(v.aval) for v in eqn.outvars))


def _eqn_cost(eqn, cost_model):
    """The cost of running ``eqn`` once: its sub-jaxprs' equations summed (a scan's times its
    length, a cond's costliest branch), else ``cost_model(eqn)``."""
    inner = [jaxpr_cost(j, cost_model) for j in sub_jaxprs(eqn.params)]
    if not inner:
        return float(cost_model(eqn))
    if eqn.primitive.name == "cond":
        return max(inner)
    return sum(inner) * (eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1)


def jaxpr_cost(jaxpr, cost_model):
    return sum(_eqn_cost(eqn, cost_model) for eqn in jaxpr.eqns)


# --- candidates ------------------------------------------------------------------------------


class Candidate(NamedTuple):
    eqn: core.JaxprEqn
    nbytes: int  # bytes its outputs take if saved (times the trip count of enclosing scans),
    # never 0
    cost: float  # cost of recomputing it (likewise)
    top: bool  # an equation of the checkpoint's own jaxpr (not inside a scan or jit)


def out_bytes(eqn):
    return sum(nbytes(v.aval) for v in eqn.outvars)


def _candidates(jaxpr, unknown, times, cost_model, top, out):
    for eqn in jaxpr.eqns:
        is_unknown = any(type(v) is Var and v in unknown for v in eqn.invars)
        if not is_unknown:
            saved = times * out_bytes(eqn)
            if saved:  # (nothing to decide where saving costs no bytes: a zero-size value,
                # or any value in a loop that runs no iteration)
                out.append(Candidate(eqn, saved, times * _eqn_cost(eqn, cost_model), top))
            continue
        unknown.update(eqn.outvars)
        name, params = eqn.primitive.name, eqn.params
        if name in ("scan", "jit") and not params["jaxpr"].consts:
            body = params["jaxpr"].jaxpr
            inner_unknown = {b for b, v in zip(body.invars, eqn.invars)
                             if type(v) is Var and v in unknown}
            if name == "scan":  # a carry is unknown when its initial value is
                carry = slice(params["num_consts"], params["num_consts"] + params["num_carry"])
                for b, o in zip(body.invars[carry], body.outvars[:params["num_carry"]]):
                    if b in inner_unknown and type(o) is Var:
                        inner_unknown.add(o)
            length = params.get("length", 1) if name == "scan" else 1
            _candidates(body, inner_unknown, times * length, cost_model, False, out)
    return out


class SavedEquations:
    """A resolved policy: save the outputs of exactly these equations (by identity), recompute
    everything else. Asked by primitive alone (no equation at hand), it recomputes."""

    def __init__(self, eqns, resolution=None):
        self.eqns = tuple(eqns)  # kept alive, so their ids stay theirs
        self.ids = frozenset(id(e) for e in self.eqns)
        self.resolution = resolution

    def decide_eqn(self, eqn):
        return id(eqn) in self.ids

    def __call__(self, *_, **__):
        return False


# --- the exact solver ------------------------------------------------------------------------


def solve_ilp(nbytes_, costs, needed, parents, limit):
    """The save set (indices) of least recompute cost whose bytes are within ``limit``: node
    ``i`` is saved (``s_i``) or recomputed (``r_i``) when ``needed[i]``, and a recomputed node's
    ``parents`` must be saved or recomputed too. ``scipy.optimize.milp`` (HiGHS)."""
    n = len(nbytes_)
    if n == 0:
        return frozenset()
    rows, lower = [], []

    def row(entries, lo):
        r = np.zeros(2 * n)
        for j, c in entries:
            r[j] += c
        rows.append(r)
        lower.append(lo)

    for i in range(n):
        if needed[i]:
            row([(i, 1), (n + i, 1)], 1)
        for j in parents[i]:
            row([(j, 1), (n + j, 1), (n + i, -1)], 0)
    budget_row = np.concatenate([np.asarray(nbytes_, float), np.zeros(n)])
    constraints = [optimize.LinearConstraint(budget_row, -np.inf, float(limit))]
    if rows:
        constraints.append(optimize.LinearConstraint(np.array(rows), np.array(lower), np.inf))
    scale = max(max(costs), 1e-30)
    # ties: fewer saved bytes (a tie-break far below any cost difference)
    tie = 1e-9 / max(sum(nbytes_), 1)
    c = np.concatenate([np.asarray(nbytes_, float) * tie, np.asarray(costs, float) / scale])
    result = optimize.milp(c, constraints=constraints, integrality=np.ones(2 * n),
                           bounds=optimize.Bounds(0, 1))
    if result.x is None:
        return None
    return frozenset(i for i in range(n) if result.x[i] > 0.5)


def recompute_cost(saved, costs, needed, parents):
    """The cost of recomputing what the backward pass needs when ``saved`` is kept: the
    needed unsaved nodes and, transitively, their unsaved parents."""
    todo = [i for i in range(len(costs)) if needed[i] and i not in saved]
    seen = set()
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        todo.extend(j for j in parents[i] if j not in saved)
    return sum(costs[i] for i in seen)


# --- modelling a split -----------------------------------------------------------------------


class _EveryCandidate:
    def __init__(self, ids):
        self.ids = ids

    def decide_eqn(self, eqn):
        return id(eqn) in self.ids

    def __call__(self, *_, **__):
        return False


def modelled_peak(split):
    """The modelled peak of the known jaxpr followed by the transposed staged jaxpr, the
    primal outputs dropped as ``grad`` drops them (``value_and_grad``/``vjp`` hold them too:
    their bytes come on top)."""
    known, staged = split.known, split.staged
    n_res = len(split.residuals)
    n_known_out = len(known.outvars) - n_res
    linear = [False] * n_res + [True] * (len(staged.invars) - n_res)
    backward = ad.transpose_jaxpr(ClosedJaxpr(staged, []), linear,
                                  [True] * len(staged.outvars))
    in_avals = [v.aval for v in known.invars]
    ct_avals = [v.aval.to_tangent_aval() for v in staged.outvars]

    def program(*args):
        outs = core.eval_jaxpr(known, [], *args[:len(in_avals)])
        cts = core.eval_jaxpr(backward.jaxpr, backward.consts, *outs[n_known_out:],
                              *args[len(in_avals):])
        return list(cts)

    closed = pe.trace_to_jaxpr(program, in_avals + ct_avals)
    return plan_peaks(Plan(pe.convert_constvars_jaxpr(closed.jaxpr)))[0]


class Option(NamedTuple):
    eqns: tuple  # the candidate equations saved
    kept: frozenset  # ids of those the backward pass reads (inside a scan body: all saved)
    peak: int  # modelled peak bytes of the differentiated region
    cost: float  # recompute cost beyond saving everything
    solver: str  # "ilp", "greedy", "inputs" or "everything"


class Table(NamedTuple):
    options: list
    candidates: list
    inputs_peak: int  # saving only the inputs
    everything_peak: int  # saving every candidate (no rematerialization)
    solver: str  # "ilp" when the exact solver proposed, else "greedy"


def _byte_grid(total):
    return [total * k / GRID_POINTS for k in range(GRID_POINTS + 1)]


def _greedy_sets(cands):
    order = sorted(range(len(cands)), key=lambda i: -cands[i].cost / cands[i].nbytes)
    prefix, total, sets = [], 0, []
    bounds = iter(_byte_grid(sum(c.nbytes for c in cands)))
    bound = next(bounds)
    for i in order + [None]:
        size = cands[i].nbytes if i is not None else math.inf
        while total + size > bound:
            sets.append(frozenset(prefix))
            bound = next(bounds, None)
            if bound is None:
                return sets
        prefix.append(i)
        total += size
    return sets


def _ilp_sets(jaxpr, unknowns, cands):
    """One ILP solution per grid bound, over the top-level graph of ``cands``."""
    everything = _EveryCandidate(frozenset(id(c.eqn) for c in cands))
    residuals = set(pe.partial_eval_jaxpr_custom(jaxpr, unknowns, everything).residuals)
    index = {v: i for i, c in enumerate(cands) for v in c.eqn.outvars}
    needed = [any(v in residuals for v in c.eqn.outvars) for c in cands]
    parents = [sorted({index[v] for v in c.eqn.invars if type(v) is Var and v in index})
               for c in cands]
    sizes, costs = [c.nbytes for c in cands], [c.cost for c in cands]
    sets = []
    for bound in _byte_grid(sum(sizes)):
        chosen = solve_ilp(sizes, costs, needed, parents, bound)
        if chosen is not None:
            sets.append(chosen)
    return sets


_tables = weakref.WeakKeyDictionary()  # jaxpr -> {(unknowns, cost model): Table}


def _table(jaxpr, unknowns, cost_model):
    per_jaxpr = _tables.setdefault(jaxpr, {})
    key = (unknowns, cost_model)
    table = per_jaxpr.get(key)
    if table is None:
        table = per_jaxpr[key] = _build_table(jaxpr, unknowns, cost_model)
    return table


def _build_table(jaxpr, unknowns, cost_model):
    unknown = {v for v, u in zip(jaxpr.invars, unknowns) if u}
    cands = _candidates(jaxpr, unknown, 1, cost_model, True, [])
    exact = len(cands) <= ILP_MAX_CANDIDATES and all(c.top for c in cands)
    proposals = [(frozenset(), "inputs"), (frozenset(range(len(cands))), "everything")]
    if exact:
        proposals += [(s, "ilp") for s in _ilp_sets(jaxpr, unknowns, cands)]
    proposals += [(s, "greedy") for s in _greedy_sets(cands)]
    options, seen = [], {}
    for chosen, solver in proposals:
        if chosen in seen:
            continue
        eqns = tuple(cands[i].eqn for i in sorted(chosen))
        split = pe.partial_eval_jaxpr_custom(jaxpr, list(unknowns), SavedEquations(eqns))
        seen[chosen] = len(options)
        residuals = set(split.residuals)
        kept = frozenset(id(cands[i].eqn) for i in chosen if not cands[i].top
                         or any(v in residuals for v in cands[i].eqn.outvars))
        options.append(Option(eqns, kept, modelled_peak(split),
                              jaxpr_cost(split.staged, cost_model), solver))
    inputs, everything = (options[seen[s]] for s, _ in proposals[:2])
    options = [o._replace(cost=max(0.0, o.cost - everything.cost)) for o in options]
    return Table(options, cands, inputs.peak, everything.peak, "ilp" if exact else "greedy")


# --- the policy ------------------------------------------------------------------------------


class Resolution(NamedTuple):
    """What a budget chose for one checkpoint's jaxpr, and why."""

    policy: "MemoryBudget"
    budget: int  # bytes
    peak: int  # modelled peak of the chosen split
    cost: float  # its recompute cost
    solver: str  # which proposal won: "ilp", "greedy", "inputs" or "everything"
    method: str  # which solver proposed for this jaxpr: "ilp" (exact) or "greedy" (fast)
    saved: tuple  # (eqn, bytes, recompute cost) per saved candidate
    recomputed: tuple  # likewise, the other candidates (recomputed where the backward pass
    # needs them)
    inputs_peak: int
    everything_peak: int

    def format(self):
        lines = [f"{self.policy!r}: budget {self.budget} bytes; modelled peak {self.peak} "
                 f"bytes (inputs only: {self.inputs_peak}, everything: "
                 f"{self.everything_peak}); recompute cost {self.cost:.4g}; solver "
                 f"{self.method}, chosen set from {self.solver}"]
        for eqn, size, cost in self.saved:
            lines.append(f"  saved {_eqn_str(eqn)}: {size} bytes, recompute cost {cost:.4g}")
        return "\n".join(lines)

    def __str__(self):
        return self.format()


def _eqn_str(eqn):
    avals = " ".join(v.aval.str_short() for v in eqn.outvars)
    where = "" if eqn.source_info is None else f" from {eqn.source_info}"
    return f"{avals} output of {eqn.primitive.name}{where}"


recorders = []


@contextlib.contextmanager
def recording():
    """Collect the ``Resolution`` of every budget resolved inside (``saved_residuals``)."""
    found = []
    recorders.append(found)
    try:
        yield found
    finally:
        recorders.remove(found)


class MemoryBudget:
    """A checkpoint policy that chooses what to save against a memory budget (see the module
    docstring). Asked per primitive before it is resolved (as part of another policy), it
    saves nothing, which fits any budget."""

    def __init__(self, bytes_or_fraction, cost_model=None):
        self.budget = bytes_or_fraction
        self.cost_model = default_cost if cost_model is None else cost_model

    def __repr__(self):
        return f"memory_budget({self.budget!r})"

    def __call__(self, *_, **__):
        return False

    def budget_bytes(self, table):
        """The budget in bytes for ``table``'s jaxpr (a fraction resolved against it)."""
        if isinstance(self.budget, numbers.Integral):
            return int(self.budget)
        spread = max(0, table.everything_peak - table.inputs_peak)
        return int(table.inputs_peak + self.budget * spread)

    def resolve_for(self, jaxpr, in_unknowns):
        table = _table(jaxpr, tuple(bool(u) for u in in_unknowns), self.cost_model)
        budget = self.budget_bytes(table)
        feasible = [o for o in table.options if o.peak <= budget]
        if not feasible:
            smallest = min(o.peak for o in table.options)
            raise ValueError(
                f"memory_budget: a budget of {budget} bytes is below what must be kept: the "
                f"smallest feasible budget for this function is {smallest} bytes (its "
                f"differentiated peak saving only its inputs is {table.inputs_peak} bytes)")
        best = min(feasible, key=lambda o: (float(f"{o.cost:.9g}"), o.peak))
        chosen = best.kept
        described = [(c.eqn, c.nbytes, c.cost) for c in table.candidates]
        resolution = Resolution(self, budget, best.peak, best.cost, best.solver, table.solver,
                                tuple(d for d in described if id(d[0]) in chosen),
                                tuple(d for d in described if id(d[0]) not in chosen),
                                table.inputs_peak, table.everything_peak)
        for found in recorders:
            found.append(resolution)
        return SavedEquations(best.eqns, resolution)


def memory_budget(bytes_or_fraction, *, cost_model=None):
    """A policy that saves what fits ``bytes_or_fraction`` with the least recomputation: an
    int is bytes of the differentiated region's modelled peak; a float in [0, 1] interpolates
    between saving only the inputs (0.0) and saving everything (1.0)."""
    value = bytes_or_fraction
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"memory_budget: bytes_or_fraction must be an int (bytes) or a float "
                        f"in [0, 1] (a fraction), got {value!r}")
    if isinstance(value, numbers.Integral):
        if value < 0:
            raise ValueError(f"memory_budget: bytes_or_fraction must be non-negative, got "
                             f"{value} bytes")
        value = int(value)
    else:
        value = float(value)
        if not 0.0 <= value <= 1.0:  # also refuses nan
            raise ValueError(f"memory_budget: a fractional bytes_or_fraction must be in "
                             f"[0, 1], got {value}")
    if cost_model is not None and not callable(cost_model):
        raise TypeError(f"memory_budget: cost_model must be a callable (eqn) -> float, got "
                        f"{cost_model!r}")
    return MemoryBudget(value, cost_model)
