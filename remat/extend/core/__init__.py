"""``remat.extend.core``: the objects a new primitive or interpreter is built from, as JAX's
``jax.extend.core``: ``Primitive`` (with ``def_impl``/``def_abstract_eval`` and the rule
registries of ``remat.interpreters``), the jaxpr types (``Jaxpr``, ``ClosedJaxpr``,
``JaxprEqn``, ``Var``, ``Literal``), effects, and the current-trace helpers."""

import contextlib

import numpy as np

from remat import core as _core
from remat import dtypes as _dtypes
from remat.core import (
    ClosedJaxpr,
    DebugInfo,
    DropVar,
    Jaxpr,
    JaxprEqn,
    Literal,
    ShapedArray,
    Var,
    eval_jaxpr,
    jaxpr_as_fun,
)
from remat.extend.core import primitives
from remat.numpy import asarray as _asarray

__all__ = ["ClosedJaxpr", "DebugInfo", "DropVar", "Effect", "Effects", "Jaxpr", "JaxprEqn",
           "Literal", "Primitive", "Var", "array_types", "concrete_or_error", "eval_jaxpr",
           "find_top_trace", "gensym", "get_opaque_trace_state", "jaxpr_as_fun",
           "jaxprs_in_params", "mapped_aval", "new_jaxpr_eqn", "no_effects",
           "primal_dtype_to_tangent_dtype", "primitives", "set_current_trace", "subjaxprs",
           "take_current_trace", "unmapped_aval", "unsafe_am_i_under_a_jit_DO_NOT_USE",
           "unsafe_am_i_under_a_vmap_DO_NOT_USE", "valid_jaxtype"]


class _AnyPrimitive(type):
    """In JAX every primitive is a ``jax.extend.core.Primitive`` (equinox's jaxpr tools type
    their arguments so): here remat's own primitives count as ones too."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, _core.Primitive)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, _core.Primitive)


class Primitive(_core.Primitive, metaclass=_AnyPrimitive):
    """A new operation, defined as in JAX: ``def_impl(impl)`` takes a function of *Arrays*
    (it may call ``remat.numpy``/``remat.lax``), where remat's own primitives' impls take
    NumPy buffers; the rules go in ``remat.interpreters.ad`` / ``batching`` registries."""

    def def_impl(self, impl):
        multiple = lambda: self.multiple_results  # noqa: E731 - read when called

        def impl_on_buffers(*bufs, **params):
            if not all(isinstance(b, (np.ndarray, np.generic)) for b in bufs):
                return impl(*bufs, **params)  # a library calling ``prim.impl`` on its values
            with _core.set_current_trace(_core.eval_trace):
                out = impl(*(_asarray(b) for b in bufs), **params)
            if multiple():
                return [np.asarray(o) for o in out]
            return np.asarray(out)

        impl_on_buffers.__name__ = getattr(impl, "__name__", "impl")
        self.impl = impl_on_buffers
        return impl


class Effect:
    """The base of side-effect kinds an equation can have (subclass it for a new kind).
    remat marks an effectful primitive with ``has_effects = True``: dead-code elimination
    keeps its equations and CSE never merges them."""


Effects = frozenset
no_effects = frozenset()

array_types = frozenset({np.ndarray, *(np.dtype(t).type for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128,
    _dtypes.bfloat16))})


def valid_jaxtype(x):
    """Whether ``x`` can be an operand of a primitive (an array or a scalar)."""
    try:
        _core.get_aval(x)
    except TypeError:
        return False
    return True


def primal_dtype_to_tangent_dtype(primal_dtype):
    """The dtype of tangents of values of ``primal_dtype`` (float0 for integers, booleans)."""
    return _core.ShapedArray((), primal_dtype).to_tangent_aval().dtype


def new_jaxpr_eqn(invars, outvars, primitive, params, effects=no_effects, source_info=None,
                  ctx=None):
    """A jaxpr equation (JAX's signature; effects are the primitive's in remat)."""
    return _core.new_jaxpr_eqn(invars, outvars, primitive, params, source_info)


def gensym(suffix=""):
    """A function making fresh ``Var``s: ``gensym()(aval)``."""
    return Var


def concrete_or_error(force, val, context=""):
    """``force(val)`` on the concrete value of ``val`` (``val`` itself when ``force`` is
    None); ``ConcretizationTypeError`` when ``val`` is traced."""
    value = _core.concrete_or_error(val, context)
    return value if force is None else force(value)


def jaxprs_in_params(params):
    """The jaxprs among the values of equation ``params`` (also inside tuples)."""
    for value in params.values():
        for v in value if isinstance(value, tuple | list) else (value,):
            if isinstance(v, ClosedJaxpr):
                yield v.jaxpr
            elif isinstance(v, Jaxpr):
                yield v


def subjaxprs(jaxpr):
    """The jaxprs in the parameters of ``jaxpr``'s equations (one level down)."""
    for eqn in jaxpr.eqns:
        yield from jaxprs_in_params(eqn.params)


def mapped_aval(size, axis, aval):
    """``aval`` with its mapped ``axis`` (of ``size``) removed, as inside ``vmap``."""
    if axis is None:
        return aval
    axis = axis % aval.ndim if aval.ndim else axis
    if aval.shape[axis] != size:
        raise ValueError(f"mapped axis {axis} of {aval} has size {aval.shape[axis]}, "
                         f"expected {size}")
    return aval.update(shape=aval.shape[:axis] + aval.shape[axis + 1:])


def unmapped_aval(size, axis, aval, explicit_mesh_axis=None):
    """``aval`` with a mapped axis of ``size`` inserted at ``axis``, as out of ``vmap``."""
    if axis is None:
        return aval
    axis = axis % (aval.ndim + 1)
    return aval.update(shape=aval.shape[:axis] + (size,) + aval.shape[axis:])


def find_top_trace(_):
    """The trace that interprets primitives now (its argument is ignored, as JAX's)."""
    return _core.current_trace()


class _OpaqueTraceState:
    """An identity for the current trace, compared by ``==`` (flax checks that a module is
    used under the trace it was made in)."""

    __slots__ = ("_trace",)

    def __init__(self, trace):
        self._trace = trace

    def __eq__(self, other):
        return isinstance(other, _OpaqueTraceState) and self._trace is other._trace

    def __hash__(self):
        return id(self._trace)


def get_opaque_trace_state(convention=None):
    """An opaque token for the current trace; equal tokens mean the same trace."""
    return _OpaqueTraceState(_core.current_trace())


def set_current_trace(trace, check_leaks=False):
    """Within the block, primitives are interpreted by ``trace``."""
    return _core.set_current_trace(trace)


@contextlib.contextmanager
def take_current_trace():
    """Within the block: the current trace, with primitives interpreted eagerly meanwhile
    (a rule that must call into the trace's parent uses ``set_current_trace``)."""
    trace = _core.current_trace()
    with _core.set_current_trace(_core.eval_trace):
        yield trace


def _trace_names():
    names, trace = [], _core.current_trace()
    while trace is not None:
        names.append(type(trace).__name__)
        trace = trace.parent
    return names


def unsafe_am_i_under_a_jit_DO_NOT_USE():
    """Whether code is being staged (traced to a jaxpr) now."""
    return any(n in ("StagingTrace", "PartialEvalTrace") for n in _trace_names())


def unsafe_am_i_under_a_vmap_DO_NOT_USE():
    """Whether a ``vmap`` is interpreting primitives now."""
    return "BatchTrace" in _trace_names()


del ShapedArray
