"""vmap: the batching trace.

Rule registry (rules live beside their primitives):
``primitive_batchers[prim](batched_args, batch_dims, **params) -> (out, out_dim)``, where each
batch dim is an int or ``not_mapped`` (None) and at least one operand is batched. For
``multiple_results`` primitives, ``out`` and ``out_dim`` are lists.
"""

import functools

from remat import core, named_axes
from remat.core import Trace, Tracer
from remat.interpreters import array_ops
from remat.interpreters import partial_eval as pe

primitive_batchers = {}
# Rules that also take the axis (JAX's older form, which libraries such as equinox register):
# ``axis_primitive_batchers[prim](axis_size, axis_name, spmd_axis_name, vals, dims, **params)``
axis_primitive_batchers = {}
not_mapped = None
# Allocations (``new_ref``) always batched, even of unbatched values: batched values may be
# written into what they create later.
always_batched = set()
# Collectives over named axes (remat.lax.parallel): when a primitive's ``axis_name`` param is
# this trace's axis, ``collective_batchers[prim](axis_size, axis_name, vals, dims, **params)``
# runs, even for unbatched operands (psum of an unbatched value multiplies it by the size).
collective_batchers = {}
# The axes (name, size) of the traces whose rules are running, innermost last: the axis a
# rule's ``batch_jaxpr``/``batch_flat`` of a sub-jaxpr batches along.
_rule_axes = []


class BatchTracer(Tracer):
    __slots__ = ("val", "batch_dim")

    def __init__(self, trace, val, batch_dim):
        self._trace = trace
        self.val = val
        self.batch_dim = batch_dim

    @property
    def aval(self):
        aval = core.get_aval(self.val)
        if self.batch_dim is not_mapped:
            return aval
        shape = aval.shape[:self.batch_dim] + aval.shape[self.batch_dim + 1:]
        return aval.update(shape=shape)

    def __repr__(self):
        batched = core.long_type_str(core.get_aval(self.val))
        return f"VmapTracer(aval={core.long_type_str(self.aval)}, batched={batched})"


class BatchTrace(Trace):
    """Values carry a batch dimension (or none); rules run under the parent trace."""

    def __init__(self, parent, axis_size, axis_name=None):
        super().__init__(parent)
        self.axis_size = axis_size
        self.axis_name = axis_name

    def to_val_dim(self, x):
        if isinstance(x, BatchTracer) and x._trace is self:
            return x.val, x.batch_dim
        if isinstance(x, Tracer):
            self.check_foreign(x)
        return x, not_mapped

    def process_primitive(self, primitive, args, params):
        vals, dims = core.unzip2(self.to_val_dim(x) for x in args)
        if primitive in collective_batchers and params["axis_name"] == self.axis_name:
            rule = functools.partial(collective_batchers[primitive], self.axis_size,
                                     self.axis_name)
            return self._apply_rule(primitive, rule, vals, dims, params)
        if self.axis_name is not None and all(d is not_mapped for d in dims) and \
                _params_use_axis(params, self.axis_name):  # e.g. a jit whose body has a psum
            if not vals:  # (nothing to batch it by: its rule, which finds the size here)
                return self._apply_rule(primitive, primitive_batchers[primitive], vals, dims,
                                        params)
            with core.set_current_trace(self.parent):
                vals = [bdim_at_front(vals[0], not_mapped, self.axis_size), *vals[1:]]
            dims = [0, *dims[1:]]
        if primitive in always_batched and vals and all(d is not_mapped for d in dims):
            with core.set_current_trace(self.parent):
                vals = [bdim_at_front(v, not_mapped, self.axis_size) for v in vals]
            dims = [0] * len(vals)
        if all(d is not_mapped for d in dims):
            with core.set_current_trace(self.parent):
                return primitive.bind(*vals, **params)
        rule = primitive_batchers.get(primitive)
        if rule is None and primitive in axis_primitive_batchers:
            rule = functools.partial(_call_axis_rule, axis_primitive_batchers[primitive], self)
        if rule is None:
            raise NotImplementedError(f"Batching rule for '{primitive.name}' not implemented")
        return self._apply_rule(primitive, rule, vals, dims, params)

    def _apply_rule(self, primitive, rule, vals, dims, params):
        _rule_axes.append((self.axis_name, self.axis_size))
        try:
            with core.set_current_trace(self.parent):
                # tuples, as JAX's unzip2 gives them: a rule may use them as a vmap in_axes
                # prefix of its operands (equinox's vprim)
                out, out_dim = rule(tuple(vals), tuple(dims), **params)
        finally:
            _rule_axes.pop()
        if primitive.multiple_results:
            return [self.make_tracer(v, d) for v, d in zip(out, out_dim)]
        return self.make_tracer(out, out_dim)

    def make_tracer(self, val, dim):
        return BatchTracer(self, val, dim)


def _params_use_axis(params, name):
    """Whether a jaxpr among ``params`` (a call's body) has a collective over ``name``."""
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            jaxpr = getattr(item, "jaxpr", item)
            if isinstance(jaxpr, core.Jaxpr) and any(
                    (e.primitive in collective_batchers and e.params["axis_name"] == name)
                    or _params_use_axis(e.params, name) for e in jaxpr.eqns):
                return True
    return False


def _call_axis_rule(rule, trace, vals, dims, **params):
    """An ``axis_primitive_batchers`` rule, called as JAX calls one (operands and dims as
    tuples: libraries put the dims in primitive params, which must hash)."""
    return rule(trace.axis_size, trace.axis_name, None, tuple(vals), tuple(dims), **params)


# --- helpers for writing rules ---------------------------------------------------------------


def moveaxis(x, src, dst):
    """Move axis ``src`` of ``x`` to position ``dst`` (a transpose; no-op when equal)."""
    ndim = core.get_aval(x).ndim
    src, dst = src % ndim, dst % ndim
    if src == dst:
        return x
    perm = [i for i in range(ndim) if i != src]
    perm.insert(dst, src)
    return array_ops.transpose(x, tuple(perm))


def bdim_at_front(x, bdim, size):
    """``x`` with its batch dim first; unbatched values are broadcast to ``size``."""
    if bdim is not_mapped:
        aval = core.get_aval(x)
        return array_ops.broadcast_in_dim(x, (size,) + aval.shape, tuple(range(1, aval.ndim + 1)))
    return moveaxis(x, bdim, 0)


def axis_size_of(vals, dims):
    """The batch size: of the batched operands, else (a call with no operands whose body
    uses the axis) of the rule's trace."""
    for x, d in zip(vals, dims):
        if d is not not_mapped:
            return core.get_aval(x).shape[d]
    if _rule_axes:
        return _rule_axes[-1][1]
    raise ValueError("no batched operand")


def defvectorized(primitive):
    """Unary elementwise primitives: apply as is; the batch dim stays where it is."""

    def rule(vals, dims, **params):
        return primitive.bind(*vals, **params), dims[0]

    primitive_batchers[primitive] = rule


def broadcast_batcher(primitive):
    """n-ary elementwise primitives whose operands have equal shapes or are rank 0."""

    def rule(vals, dims, **params):
        size = axis_size_of(vals, dims)
        shapes = [core.get_aval(x).shape for x in vals]
        rank = max(len(s) - (d is not not_mapped) for s, d in zip(shapes, dims))
        if all(d is not not_mapped and len(s) - 1 == rank for s, d in zip(shapes, dims)) and \
                len(set(dims)) == 1:
            return primitive.bind(*vals, **params), dims[0]
        out = []
        for x, d, s in zip(vals, dims, shapes):
            if d is not_mapped and len(s) == 0:
                out.append(x)  # unbatched scalars broadcast inside the primitive
                continue
            x = bdim_at_front(x, d, size)
            if core.get_aval(x).ndim - 1 < rank:  # a batched scalar against arrays
                full = (size,) + _unbatched_shape(vals, dims, shapes, rank)
                x = array_ops.broadcast_in_dim(x, full, (0,))
            out.append(x)
        return primitive.bind(*out, **params), 0

    primitive_batchers[primitive] = rule


def _unbatched_shape(vals, dims, shapes, rank):
    for s, d in zip(shapes, dims):
        if len(s) - (d is not not_mapped) == rank:
            return s if d is not_mapped else s[:d] + s[d + 1:]
    raise AssertionError


def rule_axis_name():
    """The axis name of the batching rule running now (None outside one, or unnamed): a rule
    that defers work (a custom rule traced at differentiation time) batches it under this
    name, the deferred call running outside the rule."""
    return _rule_axes[-1][0] if _rule_axes else None


def batch_flat(flat_fun, size, vals, dims, axis_name=None):
    """Run ``flat_fun`` batched: returns ``(out_vals, out_dims)``. Inside a rule, the axis
    is (by default) the axis of the trace whose rule runs."""
    if axis_name is None:
        axis_name = rule_axis_name()
    with named_axes.batch_axis_env(axis_name, size), \
            core.new_trace(BatchTrace, size, axis_name) as trace:
        ins = [v if d is not_mapped else BatchTracer(trace, v, d) for v, d in zip(vals, dims)]
        outs = flat_fun(*ins)
        return core.unzip2(trace.to_val_dim(o) for o in outs)


def batch_jaxpr(closed, size, batched, instantiate, axis_name=None):
    """``closed`` batched along axis 0 of the ``batched`` inputs (see ``_batch_jaxpr``); the
    axis is named as ``batch_flat``'s."""
    if axis_name is None:
        axis_name = rule_axis_name()
    return _batch_jaxpr(closed, size, batched, instantiate, axis_name)


@core.memoize_on_jaxpr
def _batch_jaxpr(closed, size, batched, instantiate, axis_name):
    """``closed`` batched along axis 0 of the ``batched`` inputs. Returns
    ``(jaxpr, out_batched)``; batched outputs have their batch axis first; ``instantiate``
    (bool or tuple) forces outputs to be batched."""
    n_out = len(closed.out_avals)
    if isinstance(instantiate, bool):
        instantiate = (instantiate,) * n_out
    result = {}

    def fun(*args):
        dims = [0 if b else not_mapped for b in batched]
        outs, out_dims = batch_flat(
            lambda *xs: core.eval_jaxpr(closed.jaxpr, closed.consts, *xs), size, args, dims,
            axis_name)
        final = []
        out_batched = []
        for o, d, inst in zip(outs, out_dims, instantiate):
            if d is not_mapped and not inst:
                final.append(o)
                out_batched.append(False)
            else:
                final.append(bdim_at_front(o, d, size))
                out_batched.append(True)
        result["out_batched"] = out_batched
        return final

    in_avals = [a.update(shape=(size,) + a.shape) if b else a
                for a, b in zip(closed.in_avals, batched)]
    jaxpr = pe.trace_to_jaxpr(fun, in_avals, closed.jaxpr.debug_info)
    return jaxpr, result["out_batched"]
