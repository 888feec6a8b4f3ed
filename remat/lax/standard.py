"""Helpers for defining primitives: construction, dtype checks, shape checks, scalar operands."""

import numpy as np

from remat import core, dtypes
from remat.array import Array
from remat.core import Primitive, ShapedArray

# dtype classes accepted by primitives, named as in error messages
FLOAT = ("floating",)
INEXACT = ("floating", "complexfloating")
INT = ("signedinteger", "unsignedinteger")
INT_OR_BOOL = ("signedinteger", "unsignedinteger", "bool")
NUMBER = ("signedinteger", "unsignedinteger", "floating", "complexfloating")
REAL = ("signedinteger", "unsignedinteger", "floating")
ANY = ("signedinteger", "unsignedinteger", "floating", "complexfloating", "bool")

_KINDS = {"signedinteger": "i", "unsignedinteger": "u", "floating": "f",
          "complexfloating": "c", "bool": "b"}


def standard_primitive(name, impl, abstract_eval, multiple_results=False):
    prim = Primitive(name)
    prim.multiple_results = multiple_results
    prim.def_impl(impl)
    prim.def_abstract_eval(abstract_eval)
    return prim


def copying_impl(into):
    """The impl of an update primitive whose ``into(operand, *rest, **params)`` writes its
    result into the operand itself (``registry.update_impls``): ``into`` on a copy, of the
    operand's layout (as the update in place keeps it, so a later sum rounds the same either
    way)."""
    def impl(operand, *rest, **params):
        out = operand.copy(order="K")
        into(out, *rest, **params)
        return out

    return impl


def check_dtype(name, aval, accepted, what="operand"):
    if "extended" in accepted and isinstance(aval.dtype, dtypes.ExtendedDType):
        return  # (eq and ne of keys; JAX's message lists the number kinds only)
    if dtypes.kind(aval.dtype) not in {_KINDS[k] for k in accepted if k != "extended"}:
        numbers = [k for k in accepted if k != "extended"]
        raise TypeError(f"{name} does not accept dtype {aval.dtype.name} for its {what}. "
                        f"Accepted dtypes are subtypes of {', '.join(numbers)}.")


def check_same_dtypes(name, avals):
    kinds = {a.dtype for a in avals}
    if len(kinds) > 1:
        got = ", ".join(a.dtype.name for a in avals)
        raise TypeError(f"{name} requires arguments to have the same dtypes, got {got}. "
                        f"(Tip: remat.numpy.{name} is a similar function that does automatic "
                        f"type promotion on inputs).")


def broadcasting_shape(name, avals):
    """Elementwise operands must have equal shapes, except that rank-0 operands broadcast."""
    shapes = {a.shape for a in avals if a.shape}
    if len(shapes) > 1:
        got = ", ".join(str(a.shape) for a in avals)
        raise TypeError(f"{name} got incompatible shapes for broadcasting: {got}.")
    return shapes.pop() if shapes else ()


def nary_abstract_eval(name, accepted, result_dtype=None):
    """Abstract eval of an elementwise op: same dtypes, equal (or scalar) shapes."""

    cache = {}

    def abstract_eval(*avals, **params):
        out = cache.get(avals)
        if out is not None:
            return out
        for a in avals:
            check_dtype(name, a, accepted)
        check_same_dtypes(name, avals)
        shape = broadcasting_shape(name, avals)
        dtype = avals[0].dtype if result_dtype is None else result_dtype
        out = ShapedArray(shape, dtype, all(a.weak_type for a in avals))
        if len(cache) < 4096:
            cache[avals] = out
        return out

    return abstract_eval


def as_operands(name, *xs):
    """Operands of an elementwise lax op: Python scalars take the dtype of the array operands
    (weakly typed), so ``lax.add(x, 1.0)`` works as in JAX."""
    arrays = [x for x in xs if not dtypes.is_python_scalar(x)]
    if len(arrays) == len(xs):
        return xs
    if arrays:
        dtype = core.get_aval(arrays[0]).dtype
    else:
        dtype, _ = dtypes.result_type_of([dtypes.dtype_and_weak(x) for x in xs])
    return tuple(_scalar_as(x, dtype) if dtypes.is_python_scalar(x) else x for x in xs)


def _scalar_as(x, dtype):
    buf = np.asarray(x, dtype=dtype)
    return Array._new(buf, ShapedArray((), dtype, weak_type=not isinstance(x, bool)))


def canonical_shape(shape, what="shape"):
    try:
        shape = tuple(int(core.concrete_or_error(d, f"The {what} argument must be static."))
                      for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    except TypeError as e:
        if isinstance(e, core.ConcretizationTypeError):
            raise
        raise TypeError(f"{what} must be a sequence of integers, got {shape!r}") from None
    if any(d < 0 for d in shape):  # JAX's shape rules raise TypeError for these
        raise TypeError(f"{what} must have every element be nonnegative, got {shape}.")
    return shape
