"""``ufunc``: NumPy's universal-function object for any elementwise Python function
(``frompyfunc``), with the methods ``reduce accumulate reduceat outer at``.

A call maps the function over the broadcast elements with ``vectorize``; the methods
fold it with ``fori_loop``/``scan`` in NumPy's order, so they work for any binary function
(and are traceable), just not as fast as a dedicated reduction.
"""

import math
import operator

import numpy as np

from remat import dtypes, lax
from remat.numpy.functional import vectorize
from remat.numpy.selection import take
from remat.numpy.shapes import broadcast_to, moveaxis, ravel, reshape
from remat.numpy.util import (
    _arr,
    _canon,
    _canonicalize_axis,
    _check_arraylike,
    _convert,
    _dtype,
    _shape,
    asarray,
)
from remat.transforms.api import eval_shape, vmap

__all__ = ["frompyfunc", "ufunc"]


def _row(x, i):
    """``x[i]`` along the first axis, for a traced ``i``."""
    return lax.dynamic_index_in_dim(x, i, 0, keepdims=False)


class ufunc:
    """A universal function: ``func`` of ``nin`` arrays giving ``nout``, applied
    elementwise with broadcasting; ``identity`` is the value a reduction of nothing gives.
    ``call reduce accumulate at reduceat`` may supply faster implementations of those
    methods."""

    def __init__(self, func, /, nin, nout, *, name=None, nargs=None, identity=None, call=None,
                 reduce=None, accumulate=None, at=None, reduceat=None):
        self.__doc__ = func.__doc__
        self.__name__ = name or func.__name__
        self._func = func
        self._nin = operator.index(nin)
        self._nout = operator.index(nout)
        self._nargs = operator.index(nargs or nin)
        self._identity = identity
        self._impls = {"call": call, "reduce": reduce, "accumulate": accumulate, "at": at,
                       "reduceat": reduceat}

    nin = property(lambda self: self._nin)
    nout = property(lambda self: self._nout)
    nargs = property(lambda self: self._nargs)
    identity = property(lambda self: self._identity)

    def _key(self):
        return (self._func, self.__name__, self._identity, self._nin, self._nout, self._nargs)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, ufunc) and self._key() == other._key()

    def __repr__(self):
        return f"<jnp.ufunc '{self.__name__}'>"

    def __call__(self, *args, out=None, where=None):
        _check_arraylike(self.__name__, *args)
        if out is not None:
            raise NotImplementedError(f"out argument of {self}")
        if where is not None:
            raise NotImplementedError(f"where argument of {self}")
        call = self._impls["call"] or vectorize(self._func)
        return call(*args)

    def _binary_only(self, method):
        if self._nin != 2:
            raise ValueError(f"{method} only supported for binary ufuncs")
        if self._nout != 1:
            raise ValueError(f"{method} only supported for functions returning a single value")

    def _result_dtype(self, *args):
        ones = [lax.full((), 1, _dtype(_arr(a))) for a in args]
        return eval_shape(self._func, *ones).dtype

    def reduce(self, a, axis=0, dtype=None, out=None, keepdims=False, initial=None,
               where=None):
        """``a`` folded with the function along ``axis`` (several axes, or all for None, are
        merged first), starting from ``initial`` (or the identity, or the first element);
        ``where`` masks out elements (needing an initial value)."""
        _check_arraylike(f"{self.__name__}.reduce", a)
        self._binary_only("reduce")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.reduce()")
        if where is not None:
            _check_arraylike(f"{self.__name__}.reduce", where)
            if self._identity is None and initial is None:
                raise ValueError(f"reduction operation {self.__name__!r} does not have an "
                                 f"identity, so to use a where mask one has to specify "
                                 f"'initial'.")
            if _dtype(_arr(where)) != dtypes.bool_:
                raise ValueError(f"where argument must have dtype=bool; got "
                                 f"dtype={_dtype(_arr(where))}")
        if self._impls["reduce"] is not None:
            return self._impls["reduce"](a, axis=axis, dtype=dtype, keepdims=keepdims,
                                         initial=initial, where=where)
        return self._reduce_by_loop(a, axis, dtype, keepdims, initial, where)

    def _reduce_by_loop(self, a, axis, dtype, keepdims, initial, where):
        arr = _arr(a)
        initial = self._identity if initial is None else initial
        d = self._result_dtype(arr, arr) if dtype is None else _canon(dtype)
        mask = None if where is None else lax.broadcast_in_dim(
            _arr(where), _shape(arr), tuple(range(arr.ndim - _arr(where).ndim, arr.ndim)))
        nd = arr.ndim
        axes = tuple(range(nd)) if axis is None else tuple(
            _canonicalize_axis(ax, nd) for ax in ((axis,) if np.ndim(axis) == 0 else axis))
        kept = tuple(i for i in range(nd) if i not in axes)
        s = _shape(arr)
        final = tuple(1 if i in axes else s[i] for i in range(nd)) if keepdims else \
            tuple(s[i] for i in kept)

        def merged(x):
            x = lax.transpose(x, axes + kept)
            return lax.reshape(x, (math.prod(s[i] for i in axes),) + tuple(s[i] for i in kept))

        arr = merged(arr)
        mask = None if mask is None else merged(mask)
        n = _shape(arr)[0]
        if n == 0:
            if initial is None:
                raise ValueError(f"zero-size array to reduction operation {self.__name__} "
                                 f"which has no identity")
            return lax.full(final, initial, d)

        def body(i, acc):
            step = self(acc, _convert(_row(arr, i), d))
            return step if mask is None else lax.select(_row(mask, i), step, acc)

        if initial is None:
            start, acc = 1, _convert(_row(arr, 0), d)
        else:
            start, acc = 0, lax.full(_shape(arr)[1:], initial, d)
        result = lax.fori_loop(start, n, body, acc)
        return lax.reshape(result, final)

    def accumulate(self, a, axis=0, dtype=None, out=None):
        """The running fold of ``a`` along ``axis`` (the first element as it is)."""
        self._binary_only("accumulate")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.accumulate()")
        if self._impls["accumulate"] is not None:
            return self._impls["accumulate"](a, axis=axis, dtype=dtype)
        _check_arraylike(f"{self.__name__}.accumulate", a)
        arr = _arr(a)
        d = self._result_dtype(arr, arr) if dtype is None else _canon(dtype)
        if axis is None or isinstance(axis, tuple):
            raise ValueError("accumulate does not allow multiple axes")
        axis = _canonicalize_axis(axis, arr.ndim)
        if not math.prod(_shape(arr)):
            return lax.full(_shape(arr), 0, d)
        arr = moveaxis(arr, axis, 0)
        first = _convert(_row(arr, 0), d)
        rest = _convert(lax.slice_in_dim(arr, 1, _shape(arr)[0]), d)

        def step(acc, x):
            y = self(acc, x)
            return y, y

        _, tail = lax.scan(step, first, rest)
        out = lax.concatenate([lax.expand_dims(first, (0,)), _convert(tail, d)], 0)
        return moveaxis(out, 0, axis)

    def at(self, a, indices, b=None, /, *, inplace=True):
        """``a`` with the function applied at ``indices`` (with the values ``b``), one
        index after another, so repeated indices apply it repeatedly."""
        if inplace:
            raise NotImplementedError("jax.numpy.ufunc.at cannot modify arrays in-place: "
                                      "JAX arrays are immutable. Pass inplace=False to "
                                      "instead return an updated array.")
        if self._impls["at"] is not None:
            return self._impls["at"](a, indices) if b is None else \
                self._impls["at"](a, indices, b)
        args = () if b is None else (b,)
        _check_arraylike(f"{self.__name__}.at", a, *args)
        d = self._result_dtype(a, *args)
        a = _convert(_arr(a), d)
        args = tuple(_convert(_arr(x), d) for x in args)
        idx = indices if isinstance(indices, tuple) else (indices,)
        arrays = [asarray(i) for i in idx if not isinstance(i, slice)]
        if not arrays or not any(_shape(i) for i in arrays):
            return a.at[idx].set(self(a.at[idx].get(), *args))
        count_shape = _shape(arrays[0]) if len(arrays) == 1 else \
            np.broadcast_shapes(*(_shape(i) for i in arrays))
        count = math.prod(count_shape)
        flat = [i if isinstance(i, slice) else
                ravel(lax.broadcast_in_dim(asarray(i), count_shape,
                                           tuple(range(len(count_shape) - asarray(i).ndim,
                                                       len(count_shape)))))
                for i in idx]
        if args:
            v = args[0]
            v = broadcast_to(v, count_shape + _shape(v)[len(count_shape):])
            args = (reshape(v, (count,) + _shape(v)[len(count_shape):]),)

        def step(acc, i):
            where = tuple(s if isinstance(s, slice) else _row(s, i) for s in flat)
            value = self(acc.at[where].get(), *(_row(x, i) for x in args))
            return acc.at[where].set(value), None

        return lax.scan(step, a, lax.iota(dtypes.int32, count))[0]

    def reduceat(self, a, indices, axis=0, dtype=None, out=None):
        """Folds of ``a`` along ``axis`` over the slices ``indices[i]:indices[i+1]`` (the
        single element ``indices[i]`` where the next index is not larger)."""
        self._binary_only("reduceat")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.reduceat()")
        if self._impls["reduceat"] is not None:
            return self._impls["reduceat"](a, indices, axis=axis, dtype=dtype)
        _check_arraylike(f"{self.__name__}.reduceat", a, indices)
        a, indices = _arr(a), _arr(indices)
        if a.ndim == 0:
            raise ValueError(f"reduceat: a must have 1 or more dimension, got "
                             f"a.shape={_shape(a)}")
        if indices.ndim != 1:
            raise ValueError(f"reduceat: indices must be one-dimensional, got "
                             f"indices.shape={_shape(indices)}")
        if axis is None or isinstance(axis, (tuple, list)):
            raise ValueError("reduceat requires a single integer axis.")
        axis = _canonicalize_axis(axis, a.ndim)
        d = _dtype(a) if dtype is None else _canon(dtype)
        a = _convert(a, d)
        n = _shape(a)[axis]
        out = take(a, indices, axis=axis)
        bounds = lax.concatenate([_convert(indices, dtypes.int32),
                                  lax.full((1,), n, dtypes.int32)], 0)
        shape = [1] * out.ndim
        shape[axis] = _shape(indices)[0]
        start = lax.reshape(lax.slice_in_dim(bounds, 0, _shape(indices)[0]), tuple(shape))
        stop = lax.reshape(lax.slice_in_dim(bounds, 1, _shape(indices)[0] + 1), tuple(shape))

        def body(i, acc):
            inside = lax.bitwise_and(lax.gt(i, start), lax.lt(i, stop))
            inside = lax.broadcast_in_dim(inside, _shape(acc), tuple(range(acc.ndim)))
            row = lax.dynamic_index_in_dim(a, i, axis, keepdims=True)
            row = lax.broadcast_in_dim(row, _shape(acc), tuple(range(acc.ndim)))
            return lax.select(inside, _convert(self(acc, row), d), acc)

        return lax.fori_loop(0, n, body, out)

    def outer(self, A, B, /):
        """The function of every element of ``A`` with every element of ``B``, shaped
        ``A.shape + B.shape``."""
        self._binary_only("outer")
        _check_arraylike(f"{self.__name__}.outer", A, B)
        A, B = _arr(A), _arr(B)
        result = vmap(vmap(self, (None, 0)), (0, None))(ravel(A), ravel(B))
        return reshape(result, _shape(A) + _shape(B))


def frompyfunc(func, /, nin, nout, *, identity=None):
    """A ``ufunc`` of the Python function ``func`` of ``nin`` arguments giving ``nout``."""
    return ufunc(func, nin, nout, identity=identity)
