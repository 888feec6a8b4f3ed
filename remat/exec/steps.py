"""One step of a plan: a primitive applied to the buffers in numbered slots, with the
executor's variants (in-place into a dying input, split across the workers)."""

import numpy as np

from remat.core import Literal
from remat.runtime import memory, parallel
from remat.runtime.registry import elementwise_impls

# Primitives whose impl returns its operand(s) (output i is input i): no new buffer.
IDENTITIES = frozenset({"optimization_barrier", "stop_gradient", "name"})
# Primitives whose impl returns a NumPy view of its first operand: no new buffer (a reshape
# copies only where NumPy cannot reshape in place).
VIEWS = frozenset({"reshape", "squeeze", "transpose", "broadcast_in_dim", "slice", "rev"})
BUFFERLESS = IDENTITIES | VIEWS  # results that hold no buffer of their own


class Step:
    """One equation of a plan: its primitive run on the buffers in its input slots."""

    __slots__ = ("primitive", "ins", "outs", "params", "frees", "out_dtypes", "multiple",
                 "source_info", "donor", "ufunc", "elementwise", "out_shape")

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

    def default_impl(self):
        """The primitive still has the impl the plan was made for (an overriding impl, e.g.
        a test's counter, must see every call: no in-place, split or fused variants)."""
        return self.primitive.impl is self.elementwise

    def execute(self, env, owned):
        ins = [env[i] if type(i) is int else i[1] for i in self.ins]
        donor = self.donor
        if donor is not None and donor in owned and self.default_impl() \
                and donatable(env[donor]):
            buf = env[donor]
            parallel.ufunc_into(self.ufunc, ins, buf)
            env[donor] = None  # ownership (and accounting) moves to the output slot
            owned.discard(donor)
            owned.add(self.outs[0])
            env[self.outs[0]] = buf
        else:
            out = None
            if self.elementwise is not None and self.default_impl():
                out = parallel.elementwise(self.elementwise, self.ufunc, ins, self.params,
                                           self.out_shape, self.out_dtypes[0])
            if out is None:
                out = self.primitive.impl(*ins, **self.params)
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
        release(self.frees, env, owned)

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
