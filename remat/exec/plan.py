"""Prepared execution plans: a jaxpr compiled once into a list of steps over numbered slots,
run on NumPy buffers with each buffer freed (and released from memory accounting) right
after its last use.

Plans run in two tiers. A new plan runs step by step; once the time it has spent there
reaches what generating its code would cost (``codegen.compile_seconds``), its steps become
one generated function (``codegen.compile_steps``), which runs every later call. A plan that
runs once (a first call, a one-off ``jit``) never pays for code it would not reuse, and the
total time of any plan is at most about twice what it would be had it known its future."""

import contextlib
import time
import weakref

import numpy as np

from remat import dtypes, source_info
from remat.core import Literal
from remat.exec import native
from remat.exec.codegen import compile_seconds, compile_steps, raising_step
from remat.exec.fusion import FusedStep, cluster_elementwise, fuse_steps
from remat.exec.native_clusters import native_clusters
from remat.exec.passes import optimize_jaxpr
from remat.exec.steps import Step, in_place_donor, update_donor
from remat.interpreters.partial_eval import convert_constvars_jaxpr
from remat.runtime import collection, memory, parallel
from remat.runtime.registry import elementwise_impls, update_impls


class Plan:
    """A jaxpr (consts already turned into inputs) prepared for repeated execution."""

    def __init__(self, jaxpr):
        jaxpr = cluster_elementwise(optimize_jaxpr(jaxpr))
        self.jaxpr = jaxpr
        slot = {}

        def slot_of(v):
            if v not in slot:
                slot[v] = len(slot)
            return slot[v]

        self.in_slots = [slot_of(v) for v in jaxpr.invars]
        inputs = set(jaxpr.invars)  # the caller's, unless donated (then owned by the run)
        frees = jaxpr.free_plan()

        def literal(v):
            value = np.asarray(v.val, v.aval.dtype)
            value.flags.writeable = False  # shared by every run: never a donation target
            return ("lit", value)

        steps = []
        slot_avals = {}
        eqn_of = {}  # id(step) -> its equation
        for eqn, fr in zip(jaxpr.eqns, frees):
            ins = [literal(v) if type(v) is Literal else slot_of(v) for v in eqn.invars]
            outs = [slot_of(v) for v in eqn.outvars]
            step = Step(eqn.primitive, ins, outs, eqn.params, [slot_of(v) for v in fr],
                        [v.aval.dtype for v in eqn.outvars], eqn.source_info)
            if eqn.primitive in elementwise_impls:
                step.elementwise, ufunc = elementwise_impls[eqn.primitive]
                step.out_shape = eqn.outvars[0].aval.shape
                if not eqn.params and not any(  # (keys: records, no ufunc loop)
                        isinstance(v.aval.dtype, dtypes.ExtendedDType) for v in eqn.invars):
                    step.ufunc = ufunc
                donor = in_place_donor(eqn, set(fr))
                if donor is not None:
                    step.donor = slot_of(donor)
            elif eqn.primitive in update_impls:
                step.update = update_impls[eqn.primitive]
                donor = update_donor(eqn, set(fr))
                if donor is not None:
                    step.donor = slot_of(donor)
            steps.append(step)
            eqn_of[id(step)] = eqn
            for v in eqn.invars + eqn.outvars:
                if type(v) is not Literal:
                    slot_avals[slot_of(v)] = v.aval
        self.out_atoms = [literal(v) if type(v) is Literal else slot_of(v)
                          for v in jaxpr.outvars]
        self.steps = fuse_steps(steps, jaxpr.eqns, slot_avals, set(self.in_slots))
        self.num_slots = len(slot)
        self._generated = None  # the steps as generated code, once the plan is hot
        self._interpreted_seconds = 0.0  # spent running step by step, until then
        # With sinks (destinations for outputs, e.g. a scan's stacked ys), an output moves to
        # its sink as soon as nothing later reads it: step index -> output positions.
        last_read = {}
        for i, step in enumerate(self.steps):
            for s in step.outs:
                last_read.setdefault(s, i)
            for s in step.ins:
                if type(s) is int:
                    last_read[s] = i
        input_slots = {slot[v] for v in inputs}
        self.sink_after = {}
        for pos, v in enumerate(jaxpr.outvars):
            if type(v) is not Literal and slot[v] not in input_slots:
                self.sink_after.setdefault(last_read[slot[v]], []).append(pos)
        # runs of steps the generated code may run as one native kernel: first index -> run
        self.clusters = native_clusters(
            self.steps, eqn_of, slot_avals, {a for a in self.out_atoms if type(a) is int},
            self.sink_after, set(self.in_slots))
        self._cold = list(self.clusters.values())  # those waiting for the plan to be hot

    def _sink_dests(self, index, step, sinks):
        """slot -> sink for the outputs a fused step can write straight into their sinks:
        produced by it, read by nothing later, and sunk at every output position."""
        dests = {}
        for pos in self.sink_after[index]:
            slot = self.out_atoms[pos]
            if slot in step.outs and all(sinks[p] is not None
                                         for p, a in enumerate(self.out_atoms) if a == slot):
                dests.setdefault(slot, sinks[pos])
        return dests

    def _sink(self, index, env, owned, sinks, sunk):
        """Move the outputs no later step reads into their sinks, freeing their buffers."""
        for pos in self.sink_after[index]:
            dest = sinks[pos]
            if dest is None:
                continue
            slot = self.out_atoms[pos]
            if env[slot] is not dest:  # (a fused step may have written it there already)
                dest[...] = env[slot]
            sunk[pos] = dest
            if slot in owned and all(p in sunk or self.out_atoms[p] != slot
                                     for p in range(len(self.out_atoms))):
                memory.untrack(env[slot])
                owned.discard(slot)
                env[slot] = None

    def run(self, args, sinks=None, donated=()):
        """Execute on NumPy buffers; returns the output buffers (tracked by the caller's
        wrappers only after return: intermediates are tracked here while alive). ``sinks``
        optionally gives, per output, an array view to write it into as early as possible
        (the returned value is then that view). The ``donated`` inputs (indices) are handed
        over: freed at their last use, and reusable for outputs."""
        with parallel.session():
            return self._run(args, sinks, donated)

    def _run(self, args, sinks, donated):
        env = [None] * self.num_slots
        for s, a in zip(self.in_slots, args):
            env[s] = a
        owned = set()
        try:
            for i in donated:
                slot = self.in_slots[i]
                if slot not in owned:
                    memory.track(args[i])
                    owned.add(slot)
            sunk = {}
            self._steps(env, owned, sinks, sunk)
            return [sunk[p] if p in sunk else env[a] if type(a) is int else a[1]
                    for p, a in enumerate(self.out_atoms)]
        finally:  # (also when a step raised: its intermediates die with the run)
            for s in owned:
                memory.untrack(env[s])

    def _steps(self, env, owned, sinks, sunk):
        if self._generated is None and memory._recorder is None and _tier != "interpreted" \
                and (_tier == "generated" or native.is_eager()
                     or self._interpreted_seconds >= compile_seconds(self.steps)):
            self._generated = compile_steps(self)
        if self._generated is not None and memory._recorder is None \
                and _tier != "interpreted":
            start = time.perf_counter() if self._cold else None
            try:
                self._generated(env, owned, sinks, sunk)
            except Exception as e:
                _name_user_line(e, self.steps, raising_step(self._generated, e))
                raise
            if start is not None and native.enabled():
                seconds = time.perf_counter() - start
                self._cold = [c for c in self._cold if c.heat(seconds)]
            return
        start = time.perf_counter()
        self._interpret(env, owned, sinks, sunk)
        self._interpreted_seconds += time.perf_counter() - start

    def _interpret(self, env, owned, sinks, sunk):
        """The steps one by one (a cold plan, a timeline being recorded, or the interpreted
        tier asked for)."""
        for index, step in enumerate(self.steps):
            try:
                if sinks is not None and index in self.sink_after and \
                        type(step) is FusedStep:
                    step.execute(env, owned, self._sink_dests(index, step, sinks))
                else:
                    step.execute(env, owned)
            except Exception as e:
                _name_user_line(e, self.steps, index)
                raise
            if sinks is not None and index in self.sink_after:
                self._sink(index, env, owned, sinks, sunk)
            if memory._recorder is not None:
                step.record()


def _name_user_line(error, steps, index):
    """Add to ``error`` a note naming the user's line of the step that raised it (the plan
    runs long after tracing, so the traceback alone shows only remat's frames); a loop or
    call inside another plan gets its own line named there too."""
    if index is None:
        return
    step = steps[index]
    members = step.members if type(step) is FusedStep else [step]
    info = next((m.source_info for m in members if m.source_info is not None), None)
    if info is None:
        return
    note = f"(raised by {members[0].primitive.name} at {source_info.summarize(info)})"
    if note not in getattr(error, "__notes__", ()):
        error.add_note(note)


_plans = weakref.WeakKeyDictionary()
_tier = None  # None: by heat; "interpreted" or "generated": that tier for every plan


@contextlib.contextmanager
def _only(tier):
    global _tier
    previous, _tier = _tier, tier
    try:
        yield
    finally:
        _tier = previous


def interpreted():
    """Plans run step by step (never as generated code) inside: a reference for tests."""
    return _only("interpreted")


def generated():
    """Plans run as generated code from their first run inside (the tier a hot plan runs):
    for tests of that tier."""
    return _only("generated")


def plan_for(jaxpr):
    """The (cached) plan of a jaxpr without constvars."""
    plan = _plans.get(jaxpr)
    if plan is None:
        plan = _plans[jaxpr] = _new_plan(jaxpr)
    return plan


def _new_plan(jaxpr):
    """A plan built without the collector's full collections (``collection.young_only``: a
    plan's thousands of small objects made them run, over the whole heap)."""
    with collection.young_only():
        return Plan(jaxpr)


_closed_plans = weakref.WeakKeyDictionary()


def _plan_and_consts(closed):
    """The plan of a ClosedJaxpr whose consts are concrete (they become leading inputs) and
    the const buffers to pass it."""
    if not closed.consts:
        return plan_for(closed.jaxpr), []
    entry = _closed_plans.get(closed)
    if entry is None:
        consts = [getattr(c, "_buf", c) for c in closed.consts]
        entry = _closed_plans[closed] = (_new_plan(convert_constvars_jaxpr(closed.jaxpr)),
                                         consts)
    return entry


def prepared(closed):
    """``run(*bufs, sinks=None, donated=())`` for a ClosedJaxpr whose consts are concrete: its
    plan (and const buffers) found once, for a loop that runs the same body at every step
    (``donated``: the positions among ``bufs`` of the buffers handed over to the run)."""
    plan, consts = _plan_and_consts(closed)
    return lambda *bufs, sinks=None, donated=(): plan.run(
        consts + list(bufs), sinks, [len(consts) + i for i in donated])


def evaluate(closed, *bufs, sinks=None, donated=()):
    """Run a ClosedJaxpr (whose consts are concrete) on NumPy buffers (``donated``: the
    positions among ``bufs`` of the buffers handed over to the run)."""
    plan, consts = _plan_and_consts(closed)
    return plan.run(consts + list(bufs) if consts else bufs, sinks,
                    [len(consts) + i for i in donated])
