"""The rewrite passes of the loop-kernel writer (``loop_writer.Body``): ways of writing some
equations that keep tiny-array work in a loop body from allocating, copying or calling NumPy
at every equation. A tier lists the passes its bodies get (``KernelWriter.rewrites``); each
equation is offered to them in order, the first that writes it wins, and an equation none
writes is written by the tier's rule. A pass is made for each body written (its analysis of
the body in ``__init__``); a value it holds back is written when an equation reads it
(``realize``) or at the body's end (``finish``). A new rewrite is a ``Rewrite`` subclass here,
listed in its tier's ``rewrites`` where it must come in the order.

Every rewrite gives the same values, bit for bit, as writing each equation by its rule."""

import numpy as np

from remat.core import Literal
from remat.exec.native_rules import rules
from remat.exec.steps import IDENTITIES, updated_carries
from remat.interpreters import partial_eval as pe


class Rewrite:
    """One pass over a body's equations (``body``: the ``loop_writer.Body`` being written)."""

    def __init__(self, body):
        self.body = body

    def write(self, eqn, rule):
        """Write ``eqn`` (its rule: ``rule``) if this pass applies to it; whether it did."""
        return False

    def realize(self, v):
        """Before an equation reads ``v``: write it if this pass has held it back."""

    def finish(self):
        """After the body's last equation: write what this pass still holds back."""


def nested(body, v, src):
    """Nesting: a result that is a new array (``src``) with one use stays an expression inside
    its consumer's call instead of getting a name (numba fuses nested array expressions into
    one loop; ``Body.fresh`` lets the consumer update it in place). Its source when it nests,
    else None."""
    if body.uses.get(v) != 1:
        return None
    return f"({src})" if not src.startswith("(") else src


class HoistedInvariants(Rewrite):
    """Loop-invariant work is written once, before the loop: an equation (no control flow, no
    effect, no user code: hoisted work runs even where its branch or loop would not) whose
    operands are all literals or loop-invariant values."""

    def write(self, eqn, rule):
        body, kernel = self.body, self.body.kernel
        if eqn.primitive.name in kernel.control_flow or pe.has_effects(eqn) or getattr(
                eqn.primitive, "runs_user_code", False) or not all(
                type(v) is Literal or body.env[v] in kernel.invariant for v in eqn.invars):
            return False
        kernel.hoist(rule, eqn, [body.read(v) for v in eqn.invars], body.env)
        return True


class ForwardedIdentities(Rewrite):
    """An identity (``IDENTITIES``: its outputs are its operands) writes nothing: its outputs
    are its operands' sources, so a loop-invariant one stays invariant and work on it is
    hoisted."""

    def write(self, eqn, rule):
        if eqn.primitive.name not in IDENTITIES:
            return False
        body = self.body
        body.env.update((o, body.read(v)) for o, v in zip(eqn.outvars, eqn.invars))
        return True


class UpdatedCarries(Rewrite):
    """A carry whose next value is an update of it (``steps.updated_carries``: a checkpoint
    store written at every iteration) is written in place: into the kernel's own copy of the
    first carry, made before the loop, or into the caller's buffer where the caller handed it
    over (``KernelWriter.donated``). Every value still held back is written first, so none
    reads the carry after it changes."""

    def __init__(self, body):
        super().__init__(body)
        found = updated_carries(body.jaxpr, body.carried) if body.carried else {}
        producer = {v: e for e in body.jaxpr.eqns for v in e.outvars}
        self.updating = {producer[body.jaxpr.outvars[out]]: position
                         for position, out in found.items()}

    def write(self, eqn, rule):
        position = self.updating.get(eqn)
        if position is None:
            return False
        body, kernel = self.body, self.body.kernel
        later = {v for e in body.jaxpr.eqns[body.jaxpr.eqns.index(eqn):] for v in e.invars
                 if type(v) is not Literal}
        later.update(v for v in body.jaxpr.outvars if type(v) is not Literal)
        for v in [v for v in body.env if v in later and v.aval.shape]:
            value = body.read(v)  # (a lazy value computed)
            if isinstance(value, str) and value.startswith("("):  # (a nested expression)
                body.env[v] = kernel.bind(value)
        carry = body.env[body.jaxpr.invars[position]]
        if position not in kernel.donated:
            kernel.preamble.append(f"    {carry} = {carry}.copy()")
        kernel.write_into(eqn, [body.read(v) for v in eqn.invars], carry)
        body.env[eqn.outvars[0]] = carry
        return True


class AccumulatedCarries(Rewrite):
    """A carry summed over the iterations is added into in place: where a carry's one use is a
    ufunc call giving, as its only use, the same carry's next value (a gradient accumulated
    over the iterations: ``acc + g`` allocated a new array at every one), the call writes into
    the carry's buffer (the kernel's own copy of the first carry, made before the loop)."""

    def __init__(self, body):
        super().__init__(body)
        self.accumulating = _accumulating(body.jaxpr, body.carried, body.uses, body.consumer,
                                          body.kernel.ufunc_of)

    def write(self, eqn, rule):
        if eqn not in self.accumulating or not self.body.kernel.calls_impl(rule):
            return False
        body, kernel, out = self.body, self.body.kernel, eqn.outvars[0]
        carry = body.env[body.jaxpr.invars[self.accumulating[eqn]]]
        kernel.preamble.append(f"    {carry} = {carry}.copy()")
        ufunc = kernel.name_object("u", kernel.ufunc_of(eqn))
        body.env[out] = kernel.bind(f"{ufunc}({', '.join(body.read(v) for v in eqn.invars)}, "
                                    f"out={carry})")
        body.fresh.add(out)
        return True


def _accumulating(jaxpr, carried, uses, consumer, ufunc_of):
    """The equations a loop body can write into a carry's buffer: ``{eqn: the carry's input
    position}`` for a carry whose one use is a ufunc call (``ufunc_of``) giving, as its only
    use, the same carry's next value, of its shape and dtype."""
    found = {}
    for position, out_position in carried.items():
        v, out = jaxpr.invars[position], jaxpr.outvars[out_position]
        if type(out) is Literal or not v.aval.shape or uses.get(v) != 1 or \
                uses.get(out) != 2 or list(jaxpr.outvars).count(out) != 1:
            continue
        eqn = consumer[v]
        if eqn.outvars == [out] and out.aval.shape == v.aval.shape and \
                out.aval.dtype == v.aval.dtype and ufunc_of(eqn) is not None and \
                all(type(x) is Literal or x.aval.dtype == v.aval.dtype for x in eqn.invars):
            found[eqn] = position
    return found


class GatheredSlices(Rewrite):
    """A concatenation of slices of one array (a ``roll``, a stencil's shifts), each whole on
    every other axis, is one indexing by a constant index array: one NumPy call instead of one
    per slice and the concatenation (before the loop when the array is invariant); the slices
    used by it alone are not written."""

    def __init__(self, body):
        super().__init__(body)
        self.gathers = _concatenated_slices(body.jaxpr)
        body.done.update(e for e in body.jaxpr.eqns if e.primitive.name == "slice"
                         and body.uses.get(e.outvars[0]) == 1
                         and body.consumer[e.outvars[0]] in self.gathers)

    def write(self, eqn, rule):
        if eqn not in self.gathers:
            return False
        body, kernel = self.body, self.body.kernel
        src, index, axis, taken = self.gathers[eqn]
        x = body.read(src)
        if len(src.aval.shape) == 1:  # (one layout only: indexed in place)
            expr = f"{x}[{kernel.name_object('g', index)}]"
        else:
            slices = tuple((slice(None),) * axis + (slice(*t),) for t in taken)
            expr = f"{kernel.name_object('f', _gathered)}({x}, " \
                   f"{kernel.name_object('g', index)}, {axis}, {kernel.name_object('g', slices)})"
        if x in kernel.invariant:
            kernel.hoist(lambda ctx, e, ins: [expr], eqn, [], body.env)
            return True
        body.env[eqn.outvars[0]] = kernel.bind(expr)
        body.fresh.add(eqn.outvars[0])
        return True


def _taken(eqn, axis):
    """``(start, stop, stride)`` a slice takes along ``axis`` when it takes every other axis
    whole, else None."""
    p = eqn.params
    shape = eqn.invars[0].aval.shape
    cuts = list(zip(p["start_indices"], p["limit_indices"],
                    p.get("strides") or (1,) * len(shape)))
    if any(cut != (0, n, 1) for d, (cut, n) in enumerate(zip(cuts, shape)) if d != axis):
        return None
    return cuts[axis]


def _concatenated_slices(jaxpr):
    """The concatenations whose operands are all slices of one array, each whole on every
    other axis: ``{concatenate eqn: (array var, index along the axis, axis, each slice's
    (start, stop, stride))}``."""
    slices = {e.outvars[0]: e for e in jaxpr.eqns if e.primitive.name == "slice"}
    found = {}
    for eqn in jaxpr.eqns:
        if eqn.primitive.name != "concatenate":
            continue
        axis = eqn.params["dimension"]
        parts = [slices.get(v) for v in eqn.invars if type(v) is not Literal]
        if len(parts) != len(eqn.invars) or None in parts or \
                any(part.invars[0] is not parts[0].invars[0] for part in parts):
            continue
        taken = [_taken(part, axis) for part in parts]
        if None not in taken:
            found[eqn] = (parts[0].invars[0], np.concatenate([np.arange(*t) for t in taken]),
                          axis, tuple(taken))
    return found


def _gathered(x, index, axis, slices):
    """The slices of ``x`` along ``axis`` (``slices``: each one's index tuple) concatenated,
    in the layout the plans' ``np.concatenate`` gives them (it follows its operands' strides;
    a later sum's or product's rounding depends on it): for a C-contiguous ``x``, C order, so
    one ``np.take`` (always C order; ``x[:, index]`` is not: advanced indexing after a slice
    puts the indexed axis outermost in memory); else the slices concatenated, as the plans
    do."""
    if type(x) is not np.ndarray:
        x = np.asarray(getattr(x, "_buf", x))
    if x.flags.c_contiguous:
        return np.take(x, index, axis=axis)
    return np.concatenate([x[s] for s in slices], axis=axis)


class SliceAdds(Rewrite):
    """A zero ``pad`` whose every use is an ``add`` of full-shape arrays (the transpose of a
    ``slice``, e.g. of ``roll``; a gate's slice of two products' cotangents) is never built:
    each add becomes a slice-add of the padded value into an accumulator (the add's other
    operand, updated in place where it is a fresh array used once, else a copy; a buffer of
    zeros where every operand is such a pad). A pad of a single-use slice along one axis is a
    piece read as a view; a run of pieces of one array into disjoint targets is merged into one
    indexed add (``_merged_slice_adds``). A pad some other equation needs after all is built
    where it is read."""

    def __init__(self, body):
        super().__init__(body)
        self.added = {}  # var -> how many of its uses are slice-adds
        for eqn in body.jaxpr.eqns:
            for v in eqn.invars:
                if type(v) is not Literal:
                    self.added[v] = self.added.get(v, 0) + _slice_add(eqn)
        self.pieces = _padded_slices(body.jaxpr, body.uses, body.consumer)  # (its slice
        # is not written: the pad reads it as a view)
        body.done.update(sliced for sliced, _ in self.pieces.values())
        self.pads = {}  # var -> (source, index, piece) of a deferred zero pad
        self.pad_uses = {}  # deferred pad -> how many of its adds are still to come
        self.pending = {}  # accumulator name -> the slice-adds into it not written yet
        self.normalized = set()  # accumulators holding no -0.0 (so adding 0.0 changes nothing)

    def write(self, eqn, rule):
        out = eqn.outvars[0] if eqn.outvars else None
        uses = self.body.uses
        if eqn.primitive.name == "pad" and uses.get(out) and \
                self.added.get(out) == uses[out] and _zero_pad(eqn):
            self.defer(eqn)
            return True
        if any(v in self.pads for v in eqn.invars) and _slice_add(eqn):
            self.add_into(eqn)
            return True
        return False

    def defer(self, eqn):
        """Hold the pad back: its source (computed once if it has several adds) and index."""
        body, kernel, out = self.body, self.body.kernel, eqn.outvars[0]
        if eqn in self.pieces:
            sliced, axis = self.pieces[eqn]
            src = body.read(sliced.invars[0])
            self.pads[out] = (rules["slice"](kernel, sliced, [src])[0], _pad_index(eqn),
                              _piece(src, sliced, axis, eqn))
        else:
            src = body.read(eqn.invars[0])
            if body.uses[out] > 1 and not src.isidentifier():  # (computed once)
                src = kernel.bind(src)
            self.pads[out] = (src, _pad_index(eqn), None)
        self.pad_uses[out] = body.uses[out]

    def add_into(self, eqn):
        """An add of deferred pads: their slice-adds into an accumulator, pending until it is
        read (slice-adds of one array in a row are written as one)."""
        body, kernel, out = self.body, self.body.kernel, eqn.outvars[0]
        base = next((v for v in eqn.invars if v not in self.pads), None)
        if base is None:
            acc = kernel.bind(f"np.zeros({out.aval.shape}, {kernel.dtype(out.aval.dtype)})")
        elif base in body.fresh and body.uses[base] == 1:
            acc = body.env[base] if body.env[base].isidentifier() else \
                kernel.bind(body.env[base])
            if base not in self.normalized and out.aval.dtype.kind in "fc":
                # (the pads' zeros added: -0.0 becomes 0.0 where nothing else is)
                kernel.line(f"{acc} += {kernel.const(0, out.aval.dtype)}")
        else:
            acc = kernel.bind(f"{body.read(base)} + {kernel.const(0, out.aval.dtype)}")
        for v in eqn.invars:
            if v in self.pads:
                self.pending.setdefault(acc, []).append(self.pads[v])
                self.pad_uses[v] -= 1
                if not self.pad_uses[v]:
                    del self.pads[v], self.pad_uses[v]
        body.env[out] = acc
        body.fresh.add(out)
        self.normalized.add(out)

    def realize(self, v):
        body, kernel = self.body, self.body.kernel
        if v in self.pads:  # (a pad some other use needs after all: materialize it)
            src, index, _ = self.pads.pop(v)
            del self.pad_uses[v]
            body.env[v] = kernel.bind(f"np.zeros({v.aval.shape}, {kernel.dtype(v.aval.dtype)})")
            kernel.line(f"{body.env[v]}{index} = {src}")
        if body.env[v] in self.pending:
            self.flush(body.env[v])

    def finish(self):
        for acc in list(self.pending):
            self.flush(acc)

    def flush(self, acc):
        """Write the slice-adds pending into ``acc``."""
        kernel = self.body.kernel
        for line in _merged_slice_adds(acc, self.pending.pop(acc), kernel.name_object):
            kernel.line(line)


def _padded_slices(jaxpr, uses, consumer):
    """Zero pads of single-use slices, the slice cutting (stride 1) and the pad padding one
    and the same axis, whose one use is a slice-add (``_slice_add``: the transpose of a
    ``roll`` or a stencil): ``{pad eqn: (slice eqn, axis)}``."""
    slices = {e.outvars[0]: e for e in jaxpr.eqns if e.primitive.name == "slice"}
    found = {}
    for eqn in jaxpr.eqns:
        if eqn.primitive.name != "pad" or not _zero_pad(eqn) or type(eqn.invars[0]) is Literal:
            continue
        sliced, out = slices.get(eqn.invars[0]), eqn.outvars[0]
        if sliced is None or uses.get(eqn.invars[0]) != 1 or uses.get(out) != 1 or \
                not _slice_add(consumer[out]) or type(sliced.invars[0]) is Literal:
            continue
        padded = [d for d, (lo, hi, _) in enumerate(eqn.params["padding_config"]) if lo or hi]
        axis = padded[0] if len(padded) == 1 else 0 if not padded else None
        taken = None if axis is None else _taken(sliced, axis)
        if taken is not None and taken[2] == 1:
            found[eqn] = (sliced, axis)
    return found


def _piece(src, sliced, axis, pad):
    """A slice-add ``acc[targets] += src[sources]`` along one axis: (array name, axis,
    source indices, target indices, the axis' length)."""
    lo, hi, _ = _taken(sliced, axis)
    at = pad.params["padding_config"][axis][0]
    return (src, axis, np.arange(lo, hi), np.arange(at, at + hi - lo),
            pad.outvars[0].aval.shape[axis])


def _merged_slice_adds(acc, adds, name_object):
    """The lines of slice-adds into ``acc`` in order; a run of pieces of one array into
    disjoint targets is one indexed add (each element still gets the same additions in the
    same order: bit for bit the separate adds)."""
    lines, run, targets = [], [], set()

    def write_run():
        if len(run) == 1:
            src, index, _ = run[0]
            lines.append(f"{acc}{index} += {src}")
        elif run:
            name, axis, _, _, n = run[0][2]
            sources = np.concatenate([piece[2] for _, _, piece in run])
            into = np.concatenate([piece[3] for _, _, piece in run])
            lead = ":, " * axis
            if len(into) == n:  # every element once: a permutation of the array
                order = np.empty(n, np.intp)
                order[into] = sources
                lines.append(f"{acc} += {name}[{lead}{name_object('g', order)}]")
            else:
                lines.append(f"{acc}[{lead}{name_object('g', into)}] += "
                             f"{name}[{lead}{name_object('g', sources)}]")
        run.clear()
        targets.clear()

    for add in adds:
        piece = add[2]
        if run and (piece is None or piece[:2] != run[0][2][:2]
                    or not targets.isdisjoint(piece[3].tolist())):
            write_run()
        if piece is None:
            src, index, _ = add
            lines.append(f"{acc}{index} += {src}")
        else:
            run.append(add)
            targets.update(piece[3].tolist())
    write_run()
    return lines


def _slice_add(eqn):
    """An ``add`` of arrays of its result's shape: the only use a pad written as slice-adds
    may have (its var is never bound; ``x + 1.0`` or a folded broadcast zero would read it)."""
    shape = eqn.outvars[0].aval.shape if eqn.primitive.name == "add" else ()
    return bool(shape) and all(type(v) is not Literal and v.aval.shape == shape
                               for v in eqn.invars)


def _zero_pad(eqn):
    """A pad by zeros on both sides, no interior padding (a slice's transpose)."""
    pad_value = eqn.invars[1]
    return type(pad_value) is Literal and np.asarray(pad_value.val)[()] == 0 and all(
        lo >= 0 and hi >= 0 and not interior for lo, hi, interior in eqn.params["padding_config"])


def _pad_index(eqn):
    shape = eqn.invars[0].aval.shape
    return "[" + ", ".join(f"{lo}:{lo + n}" for n, (lo, _, _) in
                           zip(shape, eqn.params["padding_config"])) + "]"
