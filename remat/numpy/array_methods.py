"""Operators, methods and properties of ``remat.Array`` and of tracers.

They are attached to both classes here (at class level: both use ``__slots__``), each one a thin
call of the ``remat.numpy`` function of the same meaning, so eager arrays and traced values
behave identically. ``remat.numpy`` imports this module last, when all its functions exist.
"""

import numpy as np

from remat import core, lax
from remat.array import Array
from remat.numpy import elementwise, indexing, reductions
from remat.numpy.creation import ones_like
from remat.numpy.elementwise import floor_divide, imag, real, remainder
from remat.numpy.logic import equal
from remat.numpy.scalar_types import astype
from remat.numpy.searching import compress
from remat.numpy.shapes import ravel, reshape, swapaxes, transpose

_ACCEPTED = (int, float, complex, np.generic, np.ndarray, Array, core.Tracer)


def _accepted(other):
    """Operands an operator handles; anything else gets NotImplemented, so Python raises its
    usual TypeError (or tries the other operand's reflected method)."""
    return isinstance(other, _ACCEPTED)


def _binary(name, reflected=False):
    def op(self, other):
        if not _accepted(other):
            return NotImplemented
        fun = getattr(_numpy, name)
        return fun(other, self) if reflected else fun(self, other)

    return op


def _equality(name, symbol):
    def op(self, other):
        if _accepted(other):
            return getattr(_numpy, name)(self, other)
        # As JAX: containers are rejected rather than compared by identity.
        if type(other) in (dict, list, set, tuple):
            raise TypeError(f"unsupported operand type(s) for {symbol}: "
                            f"{type(self).__name__!r} and {type(other).__name__!r}")
        return NotImplemented

    return op


def _unary(name):
    def op(self):
        return getattr(_numpy, name)(self)

    return op


def _divmod(self, other):
    if not _accepted(other):
        return NotImplemented
    return floor_divide(self, other), remainder(self, other)


def _rdivmod(self, other):
    if not _accepted(other):
        return NotImplemented
    return floor_divide(other, self), remainder(other, self)


def _round_operator(self, ndigits=None):
    """``round(x)``: like Python's, no ``ndigits`` gives an integer (array)."""
    out = elementwise.round(self, ndigits or 0)
    return out.astype(int) if ndigits is None else out


def _getitem(self, idx):
    return indexing.rewriting_take(self, idx)


def _setitem(self, idx, value):
    raise TypeError(f"{type(self).__name__!r} object does not support item assignment. JAX "
                    f"arrays are immutable. Instead of ``x[idx] = y``, use "
                    f"``x = x.at[idx].set(y)`` or another .at[] method: "
                    f"https://docs.jax.dev/en/latest/_autosummary/jax.numpy.ndarray.at.html")


def _contains(self, element):
    return bool(reductions.any(equal(self, element)))


def _copy(self):
    return lax.copy(self)


def _deepcopy(self, memo):
    return lax.copy(self)


_OPERATORS = {
    "__getitem__": _getitem,
    "__setitem__": _setitem,
    "__contains__": _contains,
    "__copy__": _copy,
    "__deepcopy__": _deepcopy,
    "__neg__": _unary("negative"),
    "__pos__": _unary("positive"),
    "__abs__": _unary("abs"),
    "__invert__": _unary("invert"),
    "__round__": _round_operator,
    "__eq__": _equality("equal", "=="),
    "__ne__": _equality("not_equal", "!="),
    "__lt__": _binary("less"),
    "__le__": _binary("less_equal"),
    "__gt__": _binary("greater"),
    "__ge__": _binary("greater_equal"),
    "__divmod__": _divmod,
    "__rdivmod__": _rdivmod,
}
for _name, _fun in [("add", "add"), ("sub", "subtract"), ("mul", "multiply"),
                    ("truediv", "true_divide"), ("floordiv", "floor_divide"),
                    ("mod", "remainder"), ("pow", "power"), ("matmul", "matmul"),
                    ("and", "bitwise_and"), ("or", "bitwise_or"), ("xor", "bitwise_xor")]:
    _OPERATORS[f"__{_name}__"] = _binary(_fun)
    _OPERATORS[f"__r{_name}__"] = _binary(_fun, reflected=True)


# --- methods ---------------------------------------------------------------------------------


def _astype(self, dtype, copy=False, device=None):
    """``x`` cast to ``dtype``."""
    return astype(self, dtype)


def _reshape(self, *args, order="C"):
    """``x.reshape(2, 3)`` or ``x.reshape((2, 3))``."""
    shape = args[0] if len(args) == 1 and not isinstance(args[0], (int, np.integer)) else args
    return reshape(self, shape, order=order)


def _ravel(self, order="C"):
    """``x`` as a 1-D array."""
    return ravel(self, order=order)


def _transpose(self, *args):
    """``x.transpose()``, ``x.transpose(1, 0, 2)`` or ``x.transpose((1, 0, 2))``."""
    if not args:
        axes = None
    elif len(args) == 1 and (args[0] is None or isinstance(args[0], (tuple, list))):
        axes = args[0]
    else:
        axes = args
    return transpose(self, axes)


def _transpose_property(self):
    return transpose(self)


def _matrix_transpose_property(self):
    ndim = core.get_aval(self).ndim
    if ndim < 2:
        raise ValueError(f"matrix_transpose requires at least 2 dimensions; got ndim={ndim}")
    return swapaxes(self, -1, -2)


def _real_property(self):
    return real(self)


def _imag_property(self):
    return imag(self)


def _itemsize_property(self):
    return core.get_aval(self).dtype.itemsize


def _nbytes_property(self):
    return core.get_aval(self).nbytes


# --- x.at[idx] -------------------------------------------------------------------------------


class _IndexUpdateHelper:
    """``x.at``: index it to get an ``_IndexUpdateRef`` (``x.at[idx]``)."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index):
        return _IndexUpdateRef(self.array, index)

    def __repr__(self):
        return f"_IndexUpdateHelper({self.array!r})"


class _IndexUpdateRef:
    """``x.at[idx]``: functional versions of ``x[idx]``, ``x[idx] = y``, ``x[idx] += y``, ...
    Each method returns a new array. As in JAX, ``get`` clamps out-of-bounds indices
    (``mode='fill'`` returns ``fill_value`` instead) and the updates drop out-of-bounds
    updates (``mode='clip'`` clamps them); ``wrap_negative_indices=False`` leaves negative
    indices out of bounds instead of counting them from the end."""

    __slots__ = ("array", "index")

    def __init__(self, array, index):
        self.array = array
        self.index = index

    def __repr__(self):
        return f"_IndexUpdateRef({self.array!r}, {self.index!r})"

    def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None,
            fill_value=None, wrap_negative_indices=True):
        """``x[idx]``, with control over out-of-bounds handling (``mode``, ``fill_value``)."""
        return indexing.rewriting_take(self.array, self.index,
                                       indices_are_sorted=indices_are_sorted,
                                       unique_indices=unique_indices, mode=mode,
                                       fill_value=fill_value,
                                       normalize_indices=wrap_negative_indices)

    def _update(self, op, values, indices_are_sorted, unique_indices, mode,
                wrap_negative_indices, array=None):
        return indexing.scatter_update(
            self.array if array is None else array, self.index, values, op,
            indices_are_sorted=indices_are_sorted, unique_indices=unique_indices, mode=mode,
            normalize_indices=wrap_negative_indices)

    def set(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
            wrap_negative_indices=True):
        """``x[idx] = values``."""
        return self._update("scatter", values, indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices)

    def apply(self, func, *, indices_are_sorted=False, unique_indices=False, mode=None,
              wrap_negative_indices=True):
        """``func`` (a unary elementwise function keeping the dtype) applied at ``idx``; a
        repeated index applies it repeatedly, like ``ufunc.at``."""

        def scatter(x, indices, updates, dnums, **params):
            return lax.scatter_apply(x, indices, func, dnums,
                                     update_shape=core.get_aval(updates).shape, **params)

        def whole(x, updates):
            return scatter(x, np.zeros((0,), np.int32), updates,
                           lax.ScatterDimensionNumbers(tuple(range(core.get_aval(x).ndim)),
                                                       (), ()))

        zero = lax.full_like(self.array, 0, shape=())
        return self._update(indexing.UpdateOp(scatter, whole), zero, indices_are_sorted,
                            unique_indices, mode, wrap_negative_indices)

    def add(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
            wrap_negative_indices=True):
        """``x[idx] += values`` (repeated indices accumulate, like ``np.add.at``)."""
        return self._update("scatter_add", values, indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices)

    def subtract(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
                 wrap_negative_indices=True):
        """``x[idx] -= values``."""
        return self._update("scatter_sub", values, indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices)

    def multiply(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
                 wrap_negative_indices=True):
        """``x[idx] *= values``."""
        return self._update("scatter_mul", values, indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices)

    mul = multiply

    def divide(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
               wrap_negative_indices=True):
        """``x[idx] /= values`` (true division, so integer arrays give floats as in JAX)."""
        return elementwise.divide(self.array, self._update(
            "scatter_mul", values, indices_are_sorted, unique_indices, mode,
            wrap_negative_indices, array=ones_like(self.array)))

    def power(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
              wrap_negative_indices=True):
        """``x[idx] **= values``."""
        return elementwise.power(self.array, self._update(
            "scatter_mul", values, indices_are_sorted, unique_indices, mode,
            wrap_negative_indices, array=ones_like(self.array)))

    def min(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
            wrap_negative_indices=True):
        """``x[idx] = minimum(x[idx], values)``."""
        return self._update("scatter_min", values, indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices)

    def max(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
            wrap_negative_indices=True):
        """``x[idx] = maximum(x[idx], values)``."""
        return self._update("scatter_max", values, indices_are_sorted, unique_indices, mode,
                            wrap_negative_indices)


def _at_property(self):
    return _IndexUpdateHelper(self)


def _forward(name):
    """A method ``x.name(*args, **kwargs)`` that is ``jnp.name(x, *args, **kwargs)``."""

    def method(self, *args, **kwargs):
        return getattr(_numpy, name)(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``remat.numpy.{name}`` of this array."
    return method


def _compress(self, condition, axis=None, *, size=None, fill_value=0, out=None):
    """``x.compress(condition)``: ``jnp.compress(condition, x)``."""
    return compress(condition, self, axis=axis, size=size, fill_value=fill_value, out=out)


def _tracer_item(self, *args):
    """``x.item()``: needs the concrete value (a ConcretizationTypeError under tracing)."""
    value = core.concrete_or_error(self, "The item() method was called on a traced value.")
    return np.asarray(value).item(*args)


def _tracer_tolist(self):
    value = core.concrete_or_error(self, "The tolist() method was called on a traced value.")
    return np.asarray(value).tolist()


_FORWARDED = ["sum", "mean", "var", "std", "max", "min", "prod", "argmax", "argmin", "all",
              "any", "cumsum", "cumprod", "clip", "round", "conj", "conjugate", "dot",
              "repeat", "take", "squeeze", "swapaxes", "nonzero", "sort", "argsort", "ptp",
              "diagonal", "trace", "searchsorted", "argpartition", "choose"]

_METHODS = {
    "astype": _astype,
    "reshape": _reshape,
    "ravel": _ravel,
    "flatten": _ravel,
    "transpose": _transpose,
    "copy": _copy,
    "compress": _compress,
}

_PROPERTIES = {
    "T": _transpose_property,
    "mT": _matrix_transpose_property,
    "real": _real_property,
    "imag": _imag_property,
    "at": _at_property,
}

_TRACER_ONLY = {  # Array has its own versions of these
    "item": _tracer_item,
    "tolist": _tracer_tolist,
    "itemsize": property(_itemsize_property),
    "nbytes": property(_nbytes_property),
}


_numpy = None  # remat.numpy's namespace, whose functions the operators and methods call


def attach(numpy_namespace):
    """Attach the operators and methods to Array and tracers, calling the functions of
    ``numpy_namespace`` (``remat.numpy`` hands itself over once it is complete)."""
    global _numpy
    _numpy = numpy_namespace
    for cls in (Array, core.Tracer):
        for name, fun in _OPERATORS.items():
            setattr(cls, name, fun)
        for name, fun in _METHODS.items():
            setattr(cls, name, fun)
        for name in _FORWARDED:
            if hasattr(_numpy, name):  # only what remat.numpy implements
                setattr(cls, name, _forward(name))
        for name, fun in _PROPERTIES.items():
            setattr(cls, name, property(fun))
    for name, value in _TRACER_ONLY.items():
        setattr(core.Tracer, name, value)

