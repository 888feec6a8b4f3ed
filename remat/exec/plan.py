"""Prepared execution plans: a jaxpr compiled once into a list of steps over numbered slots,
run on NumPy buffers with each buffer freed (and released from memory accounting) right
after its last use."""

import weakref

import numpy as np

from remat import memory
from remat.core import Literal
from remat.exec.passes import optimize_jaxpr

# prim -> (its default impl, the NumPy ufunc it is): elementwise primitives the executor may
# run with ``out=`` into the buffer of an input that dies at that step (no new allocation).
inplace_ufuncs = {}


class Step:
    __slots__ = ("primitive", "ins", "outs", "params", "frees", "out_dtypes", "multiple",
                 "source_info", "donor", "ufunc")

    def __init__(self, primitive, ins, outs, params, frees, out_dtypes, source_info=None):
        self.primitive = primitive
        self.ins = ins  # slot numbers, or ("lit", value)
        self.outs = outs
        self.params = params
        self.frees = frees
        self.out_dtypes = out_dtypes
        self.multiple = primitive.multiple_results
        self.source_info = source_info
        self.donor = None  # an input slot whose buffer may receive the output
        self.ufunc = None


class Plan:
    """A jaxpr (consts already turned into inputs) prepared for repeated execution."""

    def __init__(self, jaxpr):
        jaxpr = optimize_jaxpr(jaxpr)
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

        self.steps = []
        for eqn, fr in zip(jaxpr.eqns, frees):
            ins = [literal(v) if type(v) is Literal else slot_of(v) for v in eqn.invars]
            outs = [slot_of(v) for v in eqn.outvars]
            step = Step(eqn.primitive, ins, outs, eqn.params, [slot_of(v) for v in fr],
                        [v.aval.dtype for v in eqn.outvars], eqn.source_info)
            if eqn.primitive in inplace_ufuncs and not eqn.params:
                out_aval = eqn.outvars[0].aval
                dying = set(fr)
                for v in eqn.invars:
                    if (type(v) is not Literal and v in dying
                            and v.aval.shape == out_aval.shape
                            and v.aval.dtype == out_aval.dtype):
                        step.donor = slot_of(v)
                        step.ufunc = inplace_ufuncs[eqn.primitive]
                        break
            self.steps.append(step)
        self.out_atoms = [literal(v) if type(v) is Literal else slot_of(v)
                          for v in jaxpr.outvars]
        self.num_slots = len(slot)
        # With sinks (destinations for outputs, e.g. a scan's stacked ys), an output moves to
        # its sink as soon as nothing later reads it: step index -> output positions.
        last_read = {}
        for i, eqn in enumerate(jaxpr.eqns):
            for v in eqn.outvars:
                last_read.setdefault(v, i)
            for v in eqn.invars:
                if type(v) is not Literal:
                    last_read[v] = i
        self.sink_after = {}
        for pos, v in enumerate(jaxpr.outvars):
            if type(v) is not Literal and v not in inputs:
                self.sink_after.setdefault(last_read[v], []).append(pos)

    def _sink(self, index, env, owned, sinks, sunk):
        """Move the outputs no later step reads into their sinks, freeing their buffers."""
        for pos in self.sink_after[index]:
            dest = sinks[pos]
            if dest is None:
                continue
            slot = self.out_atoms[pos]
            dest[...] = env[slot]
            sunk[pos] = dest
            if slot in owned and all(p in sunk or self.out_atoms[p] != slot
                                     for p in range(len(self.out_atoms))):
                memory.untrack(env[slot])
                owned.discard(slot)
                env[slot] = None

    @staticmethod
    def _donatable(step, buf):
        """The donor buffer is ours alone (no views of it alive), writeable, and the
        primitive still has its default impl (an overriding impl must see every call)."""
        return (buf.base is None and buf.flags.writeable and memory.holders(buf) == 1
                and step.primitive.impl is step.ufunc[0])

    def run(self, args, sinks=None, donated=()):
        """Execute on NumPy buffers; returns the output buffers (tracked by the caller's
        wrappers only after return: intermediates are tracked here while alive). ``sinks``
        optionally gives, per output, an array view to write it into as early as possible
        (the returned value is then that view). The ``donated`` inputs (indices) are handed
        over: freed at their last use, and reusable for outputs."""
        env = [None] * self.num_slots
        for s, a in zip(self.in_slots, args):
            env[s] = a
        owned = set()
        for i in donated:
            slot = self.in_slots[i]
            if slot not in owned:
                memory.track(args[i])
                owned.add(slot)
        sunk = {}
        for index, step in enumerate(self.steps):
            ins = [env[i] if type(i) is int else i[1] for i in step.ins]
            donor = step.donor
            if donor is not None and donor in owned and self._donatable(step, env[donor]):
                buf = env[donor]
                step.ufunc[1](*ins, out=buf)
                env[donor] = None  # ownership (and accounting) moves to the output slot
                owned.discard(donor)
                owned.add(step.outs[0])
                env[step.outs[0]] = buf
            else:
                out = step.primitive.impl(*ins, **step.params)
                for s, o, dt in zip(step.outs, out if step.multiple else (out,),
                                    step.out_dtypes):
                    if type(o) is not np.ndarray:
                        o = np.asarray(getattr(o, "_buf", o))
                    if o.dtype != dt:
                        o = o.astype(dt)
                    memory.track(o)
                    owned.add(s)
                    env[s] = o
            for s in step.frees:
                if s in owned:
                    memory.untrack(env[s])
                    owned.discard(s)
                env[s] = None
            if sinks is not None and index in self.sink_after:
                self._sink(index, env, owned, sinks, sunk)
            if memory._recorder is not None:
                memory.record_step(step.primitive, step.source_info)
        results = [sunk[p] if p in sunk else env[a] if type(a) is int else a[1]
                   for p, a in enumerate(self.out_atoms)]
        for s in owned:
            memory.untrack(env[s])
        return results


_plans = weakref.WeakKeyDictionary()


def plan_for(jaxpr):
    """The (cached) plan of a jaxpr without constvars."""
    plan = _plans.get(jaxpr)
    if plan is None:
        plan = _plans[jaxpr] = Plan(jaxpr)
    return plan


_closed_plans = weakref.WeakKeyDictionary()


def evaluate(closed, *bufs, sinks=None):
    """Run a ClosedJaxpr (whose consts are concrete) on NumPy buffers."""
    if not closed.consts:
        return plan_for(closed.jaxpr).run(bufs, sinks)
    entry = _closed_plans.get(closed)
    if entry is None:
        from remat.interpreters.partial_eval import convert_constvars_jaxpr

        consts = [getattr(c, "_buf", c) for c in closed.consts]
        entry = _closed_plans[closed] = (Plan(convert_constvars_jaxpr(closed.jaxpr)), consts)
    plan, consts = entry
    return plan.run(consts + list(bufs), sinks)
