"""The executor's memory accounting replayed on avals: the peak bytes one run of a plan
allocates, decided step by step exactly as ``Plan.run`` holds and frees buffers (views share
their base's buffer, in-place steps take over their donor's). ``Compiled.memory_analysis`` and
loops that run outside the executor's buffers (the native tier) account with it."""


import numpy as np

from remat.core import ClosedJaxpr, Jaxpr
from remat.exec.fusion import FusedStep, nbytes
from remat.exec.loop_constants import held_bytes
from remat.exec.plan import plan_for
from remat.exec.steps import IDENTITIES, VIEWS
from remat.interpreters.partial_eval import convert_constvars_jaxpr


def stand_in(shape, strides=None):
    """A stride-only stand-in of an array (one byte per element, strides in elements; no data
    behind it, never read): NumPy's own view and reshape logic decides what a step's impl
    would return. C-contiguous without ``strides``."""
    if strides is None:
        strides = np.ones(len(shape), np.int64)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * max(shape[i + 1], 1)
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape, tuple(strides),
                                           writeable=False)


def _view_of(step, operand):
    """The stand-in of what the view step's impl returns for ``operand``'s stand-in, or None
    when it would copy (a reshape NumPy cannot do in place)."""
    if step.primitive.name != "reshape":
        return step.primitive.impl(operand, **step.params)
    if step.params["dimensions"] is not None:
        operand = np.transpose(operand, step.params["dimensions"])
    try:
        return np.reshape(operand, step.params["new_sizes"], copy=False)
    except ValueError:
        return None


def sub_jaxprs(params):
    for value in params.values():
        items = value if isinstance(value, (tuple, list)) else (value,)
        for item in items:
            if isinstance(item, ClosedJaxpr):
                yield convert_constvars_jaxpr(item.jaxpr)
            elif isinstance(item, Jaxpr):
                yield convert_constvars_jaxpr(item)


def slot_avals(plan):
    """The aval of every slot: the plan's steps (fused runs expanded) follow its jaxpr's
    equations one to one."""
    avals = dict(zip(plan.in_slots, plan.jaxpr.in_avals))
    members = [m for s in plan.steps for m in (s.members if type(s) is FusedStep else [s])]
    for step, eqn in zip(members, plan.jaxpr.eqns):
        for slot, v in zip(step.outs, eqn.outvars):
            avals[slot] = v.aval
    return avals


class _Buffers:
    """The executor's accounting replayed on avals: buffers held by slots (views share their
    base's buffer), counted while any slot holds them; the caller's inputs cost nothing."""

    def __init__(self, plan, avals, donated=()):
        self.avals = avals
        self.buffer = {}  # slot -> buffer id
        self.holders = {}  # buffer id -> number of slots holding it
        self.size = {}  # buffer id -> bytes (0 for the caller's buffers)
        self.is_base = {}  # slot -> it holds its buffer itself, not a view of it
        self.layout = {}  # slot -> the stand-in of its array (``stand_in``)
        self.live = 0
        donated = {plan.in_slots[i] for i in donated}
        for slot in plan.in_slots:  # (a donated one may be written into; its bytes are the
            if slot not in self.buffer:  # caller's, counted by it)
                self._hold(slot, ("donated" if slot in donated else "in", slot), 0, True,
                           stand_in(avals[slot].shape))

    def _hold(self, slot, buf, size, base, layout):
        if buf not in self.holders:
            self.holders[buf], self.size[buf] = 0, size
            self.live += size
        self.holders[buf] += 1
        self.buffer[slot], self.is_base[slot], self.layout[slot] = buf, base, layout

    def allocate(self, slot):
        self._hold(slot, ("out", slot), nbytes(self.avals[slot]), True,
                   stand_in(self.avals[slot].shape))

    def view(self, slot, of, layout):
        self._hold(slot, self.buffer[of], 0, False, layout)

    def literal_view(self, slot, size, layout):
        self._hold(slot, ("literal", slot), size, False, layout)

    def external(self, slot):
        """A value the run does not own (a literal returned as is)."""
        self._hold(slot, ("in", slot), 0, True, stand_in(self.avals[slot].shape))

    def alias(self, slot, of):
        self._hold(slot, self.buffer[of], 0, self.is_base[of], self.layout[of])

    def takeover(self, slot, donor):
        """The output written into ``donor``'s buffer, when the executor may (the run owns
        it, nothing else views it): True if it did."""
        buf = self.buffer.get(donor)
        if buf is None or buf[0] not in ("out", "donated") or self.holders[buf] != 1 or \
                not self.is_base[donor]:
            return False
        del self.buffer[donor]
        self.holders[buf] = 0
        self.live -= self.size[buf]
        del self.holders[buf]
        self._hold(slot, buf, self.size[buf], True, stand_in(self.avals[slot].shape))
        return True

    def free(self, slot):
        buf = self.buffer.pop(slot, None)
        if buf is None:
            return
        self.holders[buf] -= 1
        if self.holders[buf] == 0:
            self.live -= self.size[buf]
            del self.holders[buf]


def _step_outputs(buffers, step):
    name = step.primitive.name
    if name in IDENTITIES:
        for out, src in zip(step.outs, step.ins):
            if type(src) is int:
                buffers.alias(out, src)
            else:
                buffers.external(out)
        return
    src = step.ins[0] if step.ins else None
    if name in VIEWS:  # (a reshape's copy decided on the operand's strides)
        if type(src) is not int:  # a view of a literal: the literal's bytes, now tracked
            value = np.asarray(src[1])
            view = _view_of(step, value)  # of the literal itself (small, and really there)
            if view is None:
                view = stand_in(buffers.avals[step.outs[0]].shape)
            else:
                view = stand_in(view.shape, [st // max(view.itemsize, 1) for st in view.strides])
            buffers.literal_view(step.outs[0], value.nbytes, view)
            return
        view = _view_of(step, buffers.layout[src])
        if view is not None:
            buffers.view(step.outs[0], src, view)
            return
    if name == "dynamic_slice" and type(src) is int:  # a view, at a start known as it runs
        sizes = step.params["slice_sizes"]
        buffers.view(step.outs[0], src, buffers.layout[src][tuple(slice(0, n) for n in sizes)])
        return
    if step.donor is not None and step.default_impl() and \
            buffers.takeover(step.outs[0], step.donor):
        return
    for out in step.outs:
        buffers.allocate(out)


def plan_peaks(plan, donated=()):
    """``(peak bytes the run allocates, peak of those less the run's outputs, bytes of the
    outputs that are the caller's own buffers)`` of one run of ``plan`` (``donated``: the
    positions of the inputs handed over to it)."""
    avals = slot_avals(plan)
    buffers = _Buffers(plan, avals, donated)
    out_slots = {a for a in plan.out_atoms if type(a) is int}
    peak = temp = 0
    for step in plan.steps:
        transient = 0
        if type(step) is FusedStep:
            for slot, _, donors in step.outputs:
                if not (donors and buffers.takeover(slot, donors[0])):
                    buffers.allocate(slot)
        else:
            transient = max((plan_peaks(plan_for(j))[0] for j in sub_jaxprs(step.params)),
                            default=0) + held_bytes(step.primitive.name, step.params)
            _step_outputs(buffers, step)
        held_outputs = sum(buffers.size[b] for b in {buffers.buffer[s] for s in out_slots
                                                     if s in buffers.buffer})
        peak = max(peak, buffers.live + transient)
        temp = max(temp, buffers.live + transient - held_outputs)
        for slot in step.frees:
            buffers.free(slot)
    alias = sum(nbytes(avals[a]) for a in plan.out_atoms
                if type(a) is int and buffers.buffer.get(a, ("out",))[0] in ("in", "donated"))
    return peak, temp, alias
