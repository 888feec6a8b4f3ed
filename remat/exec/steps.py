"""One step of a plan: a primitive applied to the buffers in numbered slots, with the
executor's variants (in-place into a dying input, split across the workers)."""

import numpy as np

from remat.core import Literal
from remat.runtime import memory, parallel, registry
from remat.runtime.registry import donating_impls, elementwise_impls, update_impls

# Primitives whose impl returns its operand(s) (output i is input i): no new buffer.
IDENTITIES = frozenset({"optimization_barrier", "stop_gradient", "name"})
# Primitives whose impl returns a NumPy view of its first operand: no new buffer (a reshape
# copies only where NumPy cannot reshape in place).
VIEWS = frozenset({"reshape", "squeeze", "transpose", "broadcast_in_dim", "slice", "rev"})
BUFFERLESS = IDENTITIES | VIEWS  # results that hold no buffer of their own


class Step:
    """One equation of a plan: its primitive run on the buffers in its input slots."""

    __slots__ = ("primitive", "ins", "outs", "params", "frees", "out_dtypes", "multiple",
                 "source_info", "donor", "ufunc", "elementwise", "out_shape", "update")

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
        self.ufunc = None  # the ufunc it runs (elementwise, no params)
        self.elementwise = None  # the default impl, for an elementwise primitive
        self.out_shape = None
        self.update = None  # (impl, into) of an update primitive (``update_impls``)

    def default_impl(self):
        """The primitive still has the impl the plan was made for (an overriding impl, e.g.
        a test's counter, must see every call: no in-place, split or fused variants)."""
        if self.update is not None:
            return self.primitive.impl is self.update[0]
        return self.primitive.impl is self.elementwise

    def execute(self, env, owned):
        ins = [env[i] if type(i) is int else i[1] for i in self.ins]
        donor = self.donor
        if donor is not None and donor in owned and self.default_impl() \
                and donatable(env[donor]):
            buf = env[donor]
            if self.update is None:
                parallel.ufunc_into(self.ufunc, ins, buf)
            else:
                self.update[1](buf, *ins[1:], **self.params)
            env[donor] = None  # ownership (and accounting) moves to the output slot
            owned.discard(donor)
            owned.add(self.outs[0])
            env[self.outs[0]] = buf
        else:
            out = None
            if self.elementwise is not None and self.default_impl():
                out = parallel.elementwise(self.elementwise, self.ufunc, ins, self.params,
                                           self.out_shape, self.out_dtypes[0])
            taken = []
            if out is None:
                impl, donating = donating_impls.get(self.primitive, (None, None))
                if impl is not self.primitive.impl:
                    out = self.primitive.impl(*ins, **self.params)
                else:
                    try:
                        out = donating(self._offered(env, owned), taken, *ins, **self.params)
                    except BaseException:
                        self._handed_over(taken, env, owned)
                        raise
            for s, o, dt in zip(self.outs, out if self.multiple else (out,), self.out_dtypes):
                if type(o) is not np.ndarray:
                    o = np.asarray(getattr(o, "_buf", o))
                if o.dtype != dt:
                    o = o.astype(dt)
                if self._aliases_unowned(o, ins, owned):
                    env[s] = o  # the caller's buffer (an identity's result): never ours to reuse
                    continue
                memory.track(o)
                owned.add(s)
                env[s] = o
            self._handed_over(taken, env, owned)
        release(self.frees, env, owned)

    def _handed_over(self, taken, env, owned):
        """Let go of the operands the impl took over (it untracked them)."""
        for i in taken:
            owned.discard(self.ins[i])
            env[self.ins[i]] = None

    def _offered(self, env, owned):
        """The positions of the operands the step may hand over to its impl: they die here,
        appear once among the operands, and the run owns their buffers alone."""
        slots = [s for s in self.ins if type(s) is int]
        return frozenset(i for i, s in enumerate(self.ins)
                         if type(s) is int and s in self.frees and s in owned
                         and slots.count(s) == 1 and donatable(env[s]))

    def _aliases_unowned(self, out, ins, owned):
        """``out`` is one of the step's input buffers (identity primitives return their
        operand) that the run does not own: a literal, or the caller's input."""
        for atom, buf in zip(self.ins, ins):
            if buf is out:
                return type(atom) is not int or atom not in owned
        return False

    def record(self):
        memory.record_step(self.primitive, self.source_info)


def in_place_donor(eqn, dying):
    """The input of an elementwise ``eqn`` that dies there (is in ``dying``) and whose buffer
    its output can take (a ufunc without params, same shape and dtype), or None."""
    entry = elementwise_impls.get(eqn.primitive)
    if entry is None or entry[1] is None or eqn.params or len(eqn.outvars) != 1:
        return None
    out = eqn.outvars[0].aval
    return next((v for v in eqn.invars if type(v) is not Literal and v in dying
                 and v.aval.shape == out.shape and v.aval.dtype == out.dtype), None)


def update_donor(eqn, dying):
    """The operand an update equation (``update_impls``) writes its result into: its first,
    where it dies there (is in ``dying``) and is no other operand too; or None."""
    if eqn.primitive not in update_impls:
        return None
    x = eqn.invars[0]
    if type(x) is Literal or x not in dying or any(v is x for v in eqn.invars[1:]):
        return None
    return x


def default_updates():
    """Every update primitive still has the impl the executor writes in place for (an
    overriding impl, e.g. a test's counter, must see every call)."""
    return all(prim.impl is impl for prim, (impl, _) in update_impls.items())


def _new_array(eqn):
    """Whether the equation's results are always new arrays, never views of an operand."""
    return eqn.primitive in elementwise_impls or eqn.primitive.name == "copy" or \
        eqn.primitive is registry.select_primitive and len(eqn.invars) > 2


def updated_carries(jaxpr, carried):
    """The carries a loop body updates in place: ``{input position: output position}`` of
    ``carried`` (each carry's input position -> its output position) for a carry whose next
    value is an update equation (``update_donor``) of it, the carry's last use, while no other
    value that may view its buffer is still to be read (the results of any equation reading
    it, but those of elementwise and ``copy`` equations and of a ``select_n`` of two or more
    cases, which are new arrays)."""
    producer = {v: (i, e) for i, e in enumerate(jaxpr.eqns) for v in e.outvars}
    last_use = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for v in eqn.invars:
            if type(v) is not Literal:
                last_use[v] = i
    outputs = [v for v in jaxpr.outvars if type(v) is not Literal]
    found = {}
    for position, out_position in carried.items():
        v, out = jaxpr.invars[position], jaxpr.outvars[out_position]
        if type(out) is Literal or out not in producer or outputs.count(out) != 1 or \
                v in outputs or out in last_use:
            continue
        at, eqn = producer[out]
        if update_donor(eqn, {v}) is not v or last_use.get(v) != at:
            continue
        views = {v}
        for e in jaxpr.eqns[:at]:
            if any(x in views for x in e.invars if type(x) is not Literal) and \
                    not _new_array(e):
                views.update(e.outvars)
        if all(x is v or (last_use.get(x, -1) < at and x not in outputs) for x in views):
            found[position] = out_position
    return found


def donatable(buf):
    """The buffer is ours alone (no views of it alive), writeable, and in C order: a result
    written into it then has the layout a new array would (NumPy gives a new result C order
    whenever an operand is), so later layout-sensitive work (a sum's order, BLAS's transposes)
    rounds alike however the executor placed it."""
    return buf.base is None and buf.flags.writeable and buf.flags.c_contiguous and \
        memory.holders(buf) == 1


def release(slots, env, owned):
    """Drop the buffers in ``slots``, freeing those the run owns."""
    for s in slots:
        if s in owned:
            memory.untrack(env[s])
            owned.discard(s)
        env[s] = None
