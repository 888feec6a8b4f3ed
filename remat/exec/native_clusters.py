"""Native elementwise clusters: a plan's run of small elementwise steps (with the broadcasts,
reshapes and other index remaps between them) computed by one numba kernel, each result in one
pass with the intermediates as scalars, instead of one NumPy call and one array per step. A
gradient's chains of compares and selects (``maximum``'s, ``logsumexp``'s) cost a handful of
passes over memory instead of a dozen, and a tiny-array chain one call instead of many.

Only work numba computes exactly as NumPy does is clustered: IEEE arithmetic, comparisons,
selects, ``maximum``/``minimum`` in NumPy's form, conversions that round the same, and index
remaps. A cluster's results equal its steps' bit for bit, so a plan gives the same results
before and after its kernels are ready. A cluster is formed only where it cannot raise the
peak: its results (new arrays) and the intermediates it computes once for several uses take no
more memory than the steps' intermediates at their peak.

Kernels are compiled like loop kernels (``remat.exec.native``): once the plan is hot, on a
background thread, under the ``remat_native_loops`` flag, and cached on disk. Until then, and
whenever the flag is off, the steps run as they always did.
"""

import math

import numpy as np

from remat.core import Jaxpr, Literal
from remat.exec import native
from remat.exec.fusion import FusedStep, nbytes, steps_peak
from remat.exec.loop_source import CLUSTER_MAX_ELEMENTS, Unsupported, elementwise_source
from remat.exec.native_rules import index_remap
from remat.exec.steps import BUFFERLESS, VIEWS, Step, donatable, release
from remat.runtime import memory
from remat.runtime.lazy_imports import LazyModule, installed

numba = LazyModule("numba") if installed("numba") else None  # the tier is off without it

MIN_COMPUTING = 3  # fewer steps cost less than the kernel's call (about 5 us on tiny arrays)
MIN_PAIR_ELEMENTS = 1 << 15  # from this size two steps (one pass saved) pay for the call

# elementwise primitives whose numba element form rounds exactly as their NumPy impl
_EXACT = frozenset({"add", "sub", "mul", "neg", "max", "min", "eq", "ne", "lt", "le", "gt",
                    "ge", "select_n", "and", "or", "xor", "not", "square", "copy", "copy_p",
                    "stop_gradient"})
_FLOAT_ONLY = frozenset({"div", "abs"})  # (integer forms differ at edge cases)
# XLA's float kernels (``remat.random.kernels``), whose native forms give their impls' bits:
# each impl is dozens of NumPy passes (an FMA emulated in float64 alone is forty), so one of
# them pays for a kernel's call by itself
_XLA_KERNELS = frozenset({"fma", "xla_erf_inv", "xla_log1p", "xla_log"})
_DTYPES = frozenset(np.dtype(t) for t in (np.bool_, np.int32, np.int64, np.float32,
                                          np.float64))


def _exact_conversion(old, new):
    """A conversion numba rounds as NumPy does (float to integer is not: NaN and overflow)."""
    return new == np.bool_ or old == np.bool_ or old.kind == new.kind or \
        (old.kind == "i" and new.kind == "f")


def _eligible(eqn):
    name = eqn.primitive.name
    avals = [v.aval for v in (*eqn.invars, *eqn.outvars)]
    if len(eqn.outvars) != 1 or any(a.dtype not in _DTYPES or
                                    math.prod(a.shape) > CLUSTER_MAX_ELEMENTS for a in avals):
        return False
    if any(type(v) is Literal and v.aval.shape for v in eqn.invars):
        return False
    out = eqn.outvars[0].aval
    if name in VIEWS:  # (a reshape only where it merely adds or drops unit axes)
        return index_remap(eqn) is not None
    if name == "convert_element_type":
        return _exact_conversion(eqn.invars[0].aval.dtype, out.dtype)
    if any(v.aval.shape and v.aval.shape != out.shape for v in eqn.invars):
        return False  # (NumPy broadcasting between operands: the array forms)
    return name in _EXACT or (name in _FLOAT_ONLY | _XLA_KERNELS and out.dtype.kind == "f")


def native_clusters(steps, eqn_of, slot_avals, outputs, sink_after, inputs):
    """First index -> Cluster, for each run of consecutive ``steps`` (plain or fused) whose
    equations are all eligible, and enough work to pay for a call (``_pays``); none but the
    last step moves an output to a sink. ``eqn_of`` maps id(step) to its equation,
    ``outputs`` and ``inputs`` are the plan's output and input slots, ``sink_after`` its
    sinks by step. Without numba, none."""
    clusters = {}
    if numba is None:
        return clusters
    run, first = [], 0  # the run's plain steps (a fused step's members), its first index

    def close(stop):
        while run and _pays(run, eqn_of, slot_avals):
            cluster = Cluster.build(list(run), steps[first:stop], eqn_of, slot_avals,
                                    outputs, inputs)
            if cluster is not None:
                clusters[first] = cluster
                break
            last = steps[stop - 1]  # (a view read after the run, at its end: end before it)
            if type(last) is not Step or eqn_of[id(last)].primitive.name not in BUFFERLESS:
                break
            run.pop()
            stop -= 1
        run.clear()

    for i, step in enumerate(steps):
        members = step.members if type(step) is FusedStep else [step]
        if all(type(m) is Step and id(m) in eqn_of and _eligible(eqn_of[id(m)])
               for m in members):
            if not run:
                first = i
            run.extend(members)
            if i in sink_after:  # (a sink ends a run)
                close(i + 1)
            continue
        close(i)
    close(len(steps))
    return clusters


def _pays(members, eqn_of, slot_avals):
    """Enough computing steps that one call costs less than the steps: three, or two on
    arrays large enough that the pass saved outweighs the call."""
    computing = [m for m in members if eqn_of[id(m)].primitive.name not in VIEWS]
    if len(computing) >= MIN_COMPUTING or \
            any(eqn_of[id(m)].primitive.name in _XLA_KERNELS for m in computing):
        return True
    return len(computing) == 2 and max(
        math.prod(slot_avals[m.outs[0]].shape) for m in computing) >= MIN_PAIR_ELEMENTS


class Cluster:
    """Consecutive elementwise steps of a plan, run by one native kernel once it is compiled
    (see the module docstring); until then the generated plan runs the steps themselves."""

    __slots__ = ("members", "span", "impls", "jaxpr", "ins", "outs", "frees", "out_avals",
                 "donors", "donor_slots", "loop")

    def __init__(self, members, span, jaxpr, ins, outs, frees, out_avals, donors):
        self.members = members  # the plain steps (a fused step's, in its place)
        self.span = span  # how many of the plan's steps it stands for
        self.impls = [m.primitive.impl for m in members]  # (an impl replaced later, e.g. by
        # a test's counter, must see every call: the steps run then)
        self.jaxpr = jaxpr  # the cluster's equations: external inputs -> values read after
        self.ins = ins  # external input slots, in the order of the jaxpr's invars
        self.outs = outs  # result slots, in the order of its outvars
        self.frees = frees  # slots whose last use is in the cluster
        self.out_avals = out_avals
        self.donors = donors  # result slot -> the dying input slot whose buffer it takes
        self.donor_slots = frozenset(donors.values())
        self.loop = None  # its native.Loop, made when the plan is hot

    @classmethod
    def build(cls, members, spanned, eqn_of, slot_avals, outputs, inputs):
        """The cluster of ``members`` (the plain steps of the plan's ``spanned`` steps), or
        None where it would have no results or could raise the peak."""
        eqns = [eqn_of[id(m)] for m in members]
        produced = {m.outs[0]: e.outvars[0] for m, e in zip(members, eqns)}
        freed = {s for m in members for s in m.frees}
        ins, invars, remapped = [], [], set()
        for m, e in zip(members, eqns):
            for s, v in zip(m.ins, e.invars):
                if type(s) is int and s not in produced and s not in ins:
                    ins.append(s)
                    invars.append(v)
                if type(s) is int and e.primitive.name in VIEWS:
                    remapped.add(s)  # (an input read at other indices than written)
        outs = [s for s in produced if s not in freed or s in outputs]
        if not outs or any(e.primitive.name in BUFFERLESS
                           for m, e in zip(members, eqns) if m.outs[0] in outs):
            return None  # (a view the steps return costs nothing; the kernel's would, for as
            # long as it is read after the cluster)
        # a donor is read only at the index written: never through a remap, and no remap
        # reads a value computed in the cluster (which might have read it)
        donors = {} if remapped & set(produced) else cls._donors(
            outs, [s for s in ins if s in freed and s not in remapped and s not in outputs
                   and s not in inputs],  # (the caller's inputs are not the run's to write)
            slot_avals)
        if not cls._keeps_peak(spanned, eqns, set(produced.values()), outs, donors,
                               slot_avals, inputs):
            return None
        jaxpr = Jaxpr([], invars, [produced[s] for s in outs], eqns)
        return cls(members, len(spanned), jaxpr, ins, outs, sorted(freed),
                   [slot_avals[s] for s in outs], donors)

    @staticmethod
    def _donors(outs, dying, slot_avals):
        """Result -> an input dying in the cluster that it may be written into: the kernel
        computes its results in one loop nest (one shape), reading such an input only at the
        index it writes, every element's reads before its stores."""
        shapes = {slot_avals[s].shape for s in outs if slot_avals[s].shape}
        if len(shapes) != 1:
            return {}
        donors, free = {}, list(dying)
        for s in outs:
            a = slot_avals[s]
            x = next((x for x in free if slot_avals[x].shape == a.shape
                      and slot_avals[x].dtype == a.dtype), None) if a.shape else None
            if x is not None:
                donors[s] = x
                free.remove(x)
        return donors

    @staticmethod
    def _keeps_peak(spanned, eqns, produced, outs, donors, slot_avals, inputs):
        """The kernel's memory (its results not written into dying inputs, and the operands
        of broadcasts it computes first) never exceeds the spanned steps' peak extra memory,
        a fused step's as it runs (the caller's inputs are neither written by the steps nor
        freed by the run)."""
        staged = {e.invars[0] for e in eqns if e.primitive.name == "broadcast_in_dim"
                  and e.invars[0] in produced}
        kernel = sum(nbytes(slot_avals[s]) for s in outs if s not in donors) + \
            sum(nbytes(v.aval) for v in staged)
        return kernel <= steps_peak(spanned, slot_avals, inputs)

    def _types(self):
        """The kernel's argument types: inputs read-only and C-contiguous as ``canonical``
        makes them (the donors writable), then the results' new buffers."""
        def array(aval, readonly):
            dtype = numba.from_dtype(np.dtype(aval.dtype))
            return numba.types.Array(dtype, len(aval.shape), "C", readonly=readonly) \
                if aval.shape else dtype
        return tuple(array(v.aval, s not in self.donor_slots)
                     for s, v in zip(self.ins, self.jaxpr.invars)) \
            + tuple(array(a, False) for s, a in zip(self.outs, self.out_avals)
                    if a.shape and s not in self.donors)

    def heat(self, seconds):
        """The plan ran for ``seconds`` with this cluster's steps: compile once hot. Whether
        the cluster still waits to be hot."""
        if self.loop is None:
            try:
                source = elementwise_source(self.jaxpr, {
                    self.outs.index(o): self.ins.index(x) for o, x in self.donors.items()})
                self.loop = native.Loop(None, source)
            except Unsupported as e:
                self.loop = native.Loop(None, None, e)
        self.loop.heat(seconds, self._types)
        return self.loop.state == "cold"

    def run_native(self, env, owned):
        """Run the kernel if it is ready (and no step's impl was replaced); whether it ran."""
        loop = self.loop
        kernel = loop.ready() if loop is not None else None
        if kernel is None or not all(m.primitive.impl is impl
                                     for m, impl in zip(self.members, self.impls)):
            return False
        for x in self.donors.values():  # (else the steps run: the kernel writes them)
            if x not in owned or not donatable(env[x]):
                return False
        args = [env[s] if s in self.donor_slots else native.canonical(env[s]) for s in self.ins]
        buffers = [np.empty(a.shape, a.dtype) for s, a in zip(self.outs, self.out_avals)
                   if a.shape and s not in self.donors]
        scalars = iter(kernel(*args, *buffers))
        del args
        fresh = iter(buffers)
        for slot, aval in zip(self.outs, self.out_avals):
            x = self.donors.get(slot)
            if x is not None:  # (its buffer, and its accounting, are now the result's)
                out = env[x]
                owned.discard(x)
                env[x] = None
            else:
                out = next(fresh) if aval.shape else np.asarray(next(scalars), aval.dtype)
                memory.track(out)
            owned.add(slot)
            env[slot] = out
        release(self.frees, env, owned)
        return True
