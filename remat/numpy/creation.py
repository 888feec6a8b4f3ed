"""Array creation: constants (``zeros ones full *_like``), ranges (``arange linspace
logspace geomspace``), matrices (``eye tri tril triu diag vander``), index grids and the
``from*`` constructors.
"""

import builtins

import numpy as np

from remat import core, dtypes, lax
from remat.array import from_numpy
from remat.core import Tracer
from remat.numpy.elementwise import log10, power
from remat.numpy.scalar_types import ndim, result_type, shape
from remat.numpy.searching import nonzero
from remat.numpy.selection import diagonal
from remat.numpy.shapes import broadcast_to, ravel, stack
from remat.numpy.util import (
    _arr,
    _broadcast_to_shape,
    _canon,
    _canonicalize_axis,
    _check_arraylike,
    _checked_shape,
    _convert,
    _dtype_and_weak,
    _full,
    _np_type,
    _scalar_like,
    _shape,
    _static_index_arrays,
    _static_int,
    _to_inexact_dtype,
    _zeros_like_aval,
    array,
    asarray,
    broadcast_shapes,
)
from remat.transforms.api import vmap

_max = builtins.max
_abs = builtins.abs

__all__ = [
    "arange", "array", "asarray", "copy", "diag", "diag_indices", "diag_indices_from",
    "diagflat", "empty", "empty_like", "eye", "from_dlpack", "frombuffer", "fromfile",
    "fromfunction", "fromiter", "fromstring", "full", "full_like", "geomspace", "identity",
    "indices", "linspace", "logspace", "mask_indices", "meshgrid", "ones", "ones_like", "tri",
    "tril", "tril_indices", "tril_indices_from", "triu", "triu_indices", "triu_indices_from",
    "vander", "zeros", "zeros_like",
]


def zeros(shape, dtype=None, *, device=None):
    """An array of zeros (float32 unless ``dtype`` says otherwise)."""
    d = dtypes.default_float_dtype() if dtype is None else _canon(dtype)
    return lax.full(_checked_shape(shape, "zeros"), 0, d)


def ones(shape, dtype=None, *, device=None):
    """An array of ones (float32 unless ``dtype`` says otherwise)."""
    d = dtypes.default_float_dtype() if dtype is None else _canon(dtype)
    return lax.full(_checked_shape(shape, "ones"), 1, d)


def empty(shape, dtype=None, *, device=None):
    """Arrays are immutable, so an 'uninitialized' array is a zero array."""
    return zeros(shape, dtype)


def full(shape, fill_value, dtype=None, *, device=None):
    """An array of ``shape`` filled with ``fill_value`` (which may itself be an array that
    broadcasts to ``shape``)."""
    _check_arraylike("full", fill_value)
    s = _checked_shape(shape, "full")
    if type(fill_value) is builtins.bool:
        fill_value = np.bool_(fill_value)
    if dtypes.is_python_scalar(fill_value) or ndim(fill_value) == 0:
        return lax.full(s, fill_value, None if dtype is None else _canon(dtype))
    return broadcast_to(asarray(fill_value, dtype=dtype), s)


def _is_duck_typed(a):
    """Whether ``a`` is not an array but has ``shape`` and ``dtype`` (a ``ShapeDtypeStruct``,
    an aval), which the ``*_like`` functions take as JAX's do."""
    return not hasattr(a, "aval") and hasattr(a, "shape") and hasattr(a, "dtype")


def _like(a, dtype, shape, name):
    """(shape, dtype, weak_type) of the result of a ``*_like`` function. A duck-typed ``a``
    gives a strong dtype: JAX reads weak types from arrays only."""
    if _is_duck_typed(a):
        a_shape, a_dtype, a_weak = np.shape(a), _canon(a.dtype), False
    else:
        _check_arraylike(name, a)
        a_shape, (a_dtype, a_weak) = core.get_aval(a).shape, _dtype_and_weak(a)
    s = a_shape if shape is None else _checked_shape(shape, name)
    if dtype is None:
        return s, a_dtype, a_weak
    return s, _canon(dtype), False


def zeros_like(a, dtype=None, shape=None, *, device=None):
    """Zeros with the shape and dtype of ``a``."""
    s, d, weak = _like(a, dtype, shape, "zeros_like")
    return _full(s, 0, d, weak)


def ones_like(a, dtype=None, shape=None, *, device=None):
    """Ones with the shape and dtype of ``a``."""
    s, d, weak = _like(a, dtype, shape, "ones_like")
    return _full(s, 1, d, weak)


def empty_like(prototype, dtype=None, shape=None, *, device=None):
    """Zeros with the shape and dtype of ``prototype`` (arrays are immutable)."""
    return zeros_like(prototype, dtype, shape)


def full_like(a, fill_value, dtype=None, shape=None, *, device=None):
    """``fill_value`` broadcast to the shape of ``a``, in the dtype of ``a``."""
    _check_arraylike("full_like", 0 if _is_duck_typed(a) else a, fill_value)
    s, d, weak = _like(a, dtype, shape, "full_like")
    if ndim(fill_value) == 0:
        return _full(s, fill_value, d, weak)
    return broadcast_to(_convert(_arr(fill_value), d, weak), s)


def arange(start, stop=None, step=None, dtype=None, *, device=None):
    """Evenly spaced values; the bounds must be static (as in NumPy and JAX)."""
    msg = "It arose in the jnp.arange argument '{}'"
    start = core.concrete_or_error(start, msg.format("start"))
    stop = None if stop is None else core.concrete_or_error(stop, msg.format("stop"))
    step = None if step is None else core.concrete_or_error(step, msg.format("step"))
    bounds = [x for x in (start, stop, step) if x is not None]
    for x in bounds:
        if np.ndim(x) != 0:
            raise ValueError(f"arange: arguments must be scalars, got {x!r}")
    if dtype is None:
        d = dtypes.result_type(*bounds)  # (Python scalars weakly typed, as JAX's)
    else:
        d = _canon(dtype)
    if stop is None and step is None:
        n = np.asarray(start)
        count = _max(int(np.ceil(n)) if dtypes.kind(n.dtype) in "fc" else int(n), 0)
        return lax.iota(d, count)
    values = np.arange(np.asarray(start).item(), np.asarray(stop).item(),
                       None if step is None else np.asarray(step).item())
    return from_numpy(values.astype(d), d)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
    """``num`` evenly spaced samples from ``start`` to ``stop`` (which may be arrays, even
    traced ones; the samples go along ``axis``)."""
    num = _static_int(num, "num")
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    _check_arraylike("linspace", start, stop)
    d = _canon(dtype) if dtype is not None else \
        _to_inexact_dtype(result_type(start, stop))
    cd = _to_inexact_dtype(d)
    if cd == dtypes.float16:  # float16 steps accumulate visible error: compute in float32
        cd = dtypes.float32
    start, stop = _arr(start), _arr(stop)
    start, stop = _convert(start, cd), _convert(stop, cd)
    bshape = broadcast_shapes(_shape(start), _shape(stop))
    nd = len(bshape)
    axis = _canonicalize_axis(axis, nd + 1)
    out_shape = bshape[:axis] + (num,) + bshape[axis:]
    bdims = tuple(i for i in range(nd + 1) if i != axis)
    start_b = lax.broadcast_in_dim(_broadcast_to_shape(start, bshape), out_shape, bdims)
    stop_b = lax.broadcast_in_dim(_broadcast_to_shape(stop, bshape), out_shape, bdims)
    div = (num - 1) if endpoint else num
    delta = lax.sub(_broadcast_to_shape(stop, bshape), _broadcast_to_shape(start, bshape))
    if num == 0:
        out = lax.full(out_shape, 0, cd)
    elif div > 0:
        # NumPy's formula, start + i * step, with the endpoint set exactly
        step_b = lax.div(lax.sub(stop_b, start_b), lax.full((), div, cd))
        iota = lax.broadcasted_iota(cd, out_shape, axis)
        out = lax.add(start_b, lax.mul(iota, step_b))
        if endpoint:
            out = lax.select(lax.eq(iota, lax.full((), num - 1, cd)), stop_b, out)
    else:
        out = start_b
    if dtypes.is_integer(d):
        out = lax.floor(out)
    out = _convert(out, d)
    if retstep:
        step = lax.div(delta, lax.full((), div, cd)) if div > 0 else \
            lax.full(_shape(delta), np.nan, cd)
        return out, step
    return out


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """``base ** linspace(start, stop)``."""
    d = _canon(dtype) if dtype is not None else \
        _to_inexact_dtype(result_type(start, stop))
    lin = linspace(start, stop, num, endpoint=endpoint, axis=axis, dtype=_to_inexact_dtype(d))
    return _convert(power(_convert(_arr(base), _to_inexact_dtype(d)), lin), d)


def _tri_mask(n, m, k):
    """Boolean (n, m) mask of the elements on or below diagonal ``k``."""
    rows = lax.broadcasted_iota(dtypes.int32, (n, m), 0)
    cols = lax.broadcasted_iota(dtypes.int32, (n, m), 1)
    if isinstance(k, Tracer):
        return lax.ge(lax.add(rows, _convert(k, dtypes.int32)), cols)
    return lax.ge(lax.add(rows, lax.full((), int(k), dtypes.int32)), cols)


def eye(N, M=None, k=0, dtype=None, *, device=None):
    """Ones on diagonal ``k`` of an ``N x M`` matrix, zeros elsewhere."""
    n = _static_int(N, "N")
    m = n if M is None else _static_int(M, "M")
    if n < 0 or m < 0:
        raise ValueError(f"negative dimensions are not allowed, got {(n, m)}")
    d = dtypes.default_float_dtype() if dtype is None else _canon(dtype)
    rows = lax.broadcasted_iota(dtypes.int32, (n, m), 0)
    cols = lax.broadcasted_iota(dtypes.int32, (n, m), 1)
    kk = _convert(k, dtypes.int32) if isinstance(k, Tracer) else \
        lax.full((), _static_int(k, "k"), dtypes.int32)
    return lax.convert_element_type(lax.eq(lax.add(rows, kk), cols), d)


def identity(n, dtype=None):
    """The ``n x n`` identity matrix."""
    return eye(n, dtype=dtype)


def tri(N, M=None, k=0, dtype=None):
    """Ones on and below diagonal ``k``, zeros above."""
    n = _static_int(N, "N")
    m = n if M is None else _static_int(M, "M")
    d = dtypes.default_float_dtype() if dtype is None else _canon(dtype)
    return lax.convert_element_type(_tri_mask(n, m, k), d)


def tril(m, k=0):
    """``m`` with the elements above diagonal ``k`` of its last two axes zeroed."""
    m = _arr(m)
    s = _shape(m)
    if len(s) < 2:
        raise ValueError("Argument to jax.numpy.tril must be at least 2D")
    mask = lax.broadcast_in_dim(_tri_mask(s[-2], s[-1], k), s, (len(s) - 2, len(s) - 1))
    return lax.select(mask, m, _zeros_like_aval(m))


def triu(m, k=0):
    """``m`` with the elements below diagonal ``k`` of its last two axes zeroed."""
    m = _arr(m)
    s = _shape(m)
    if len(s) < 2:
        raise ValueError("Argument to jax.numpy.triu must be at least 2D")
    kk = lax.sub(k, 1) if isinstance(k, Tracer) else _static_int(k, "k") - 1
    mask = lax.broadcast_in_dim(_tri_mask(s[-2], s[-1], kk), s, (len(s) - 2, len(s) - 1))
    return lax.select(mask, _zeros_like_aval(m), m)


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate arrays from 1-D coordinate vectors (``indexing='xy'`` or ``'ij'``)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"Valid values for indexing are 'xy' and 'ij', got {indexing}")
    args = [_arr(x) for x in xi]
    for x in args:
        if _shape(x) and len(_shape(x)) != 1:
            raise ValueError(f"Arguments to jax.numpy.meshgrid must be 1D, got shape "
                             f"{_shape(x)}")
    args = [ravel(x) for x in args]
    n = len(args)
    if n == 0:
        return []
    sizes = [_shape(x)[0] for x in args]
    if indexing == "xy" and n > 1:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, x in enumerate(args):
        pos = i
        if indexing == "xy" and n > 1 and i < 2:
            pos = 1 - i
        if sparse:
            s = [1] * n
            s[pos] = _shape(x)[0]
            out.append(lax.reshape(x, tuple(s)))
        else:
            out.append(lax.broadcast_in_dim(x, tuple(sizes), (pos,)))
    return out


def diag(v, k=0):
    """The diagonal ``k`` of a matrix, or a matrix with ``v`` on diagonal ``k``."""
    v = _arr(v)
    k = _static_int(k, "k")
    s = _shape(v)
    if len(s) == 2:
        return diagonal(v, offset=k)
    if len(s) != 1:
        raise ValueError("diag input must be 1d or 2d")
    n = s[0] + _abs(k)
    padded = lax.pad(v, _scalar_like(v, 0), [(0, _abs(k), 0)])
    vb = lax.broadcast_in_dim(padded, (n, n), (0,) if k >= 0 else (1,))
    rows = lax.broadcasted_iota(dtypes.int32, (n, n), 0)
    cols = lax.broadcasted_iota(dtypes.int32, (n, n), 1)
    mask = lax.eq(lax.sub(cols, rows), lax.full((), k, dtypes.int32))
    return lax.select(mask, vb, _zeros_like_aval(vb))


def diagflat(v, k=0):
    """A matrix with the flattened ``v`` on diagonal ``k``."""
    return diag(ravel(v), k)


def copy(a, order=None):
    """A copy of ``a`` (a new buffer)."""
    return lax.copy(_arr(a))


def tril_indices(n, k=0, m=None):
    """Row and column indices of the lower triangle of an ``n x m`` matrix."""
    return _static_index_arrays(np.tril_indices(_static_int(n, "n"), _static_int(k, "k"),
                                                None if m is None else _static_int(m, "m")))


def triu_indices(n, k=0, m=None):
    """Row and column indices of the upper triangle of an ``n x m`` matrix."""
    return _static_index_arrays(np.triu_indices(_static_int(n, "n"), _static_int(k, "k"),
                                                None if m is None else _static_int(m, "m")))


def tril_indices_from(arr, k=0):
    """``tril_indices`` for the shape of the 2-D ``arr``."""
    s = shape(arr)
    if len(s) != 2:
        raise ValueError("input array must be 2-d")
    return tril_indices(s[0], k, s[1])


def triu_indices_from(arr, k=0):
    """``triu_indices`` for the shape of the 2-D ``arr``."""
    s = shape(arr)
    if len(s) != 2:
        raise ValueError("input array must be 2-d")
    return triu_indices(s[0], k, s[1])


def diag_indices(n, ndim=2):
    """Indices of the main diagonal of an ``n x ... x n`` array."""
    return _static_index_arrays(np.diag_indices(_static_int(n, "n"), _static_int(ndim, "ndim")))


def diag_indices_from(arr):
    """``diag_indices`` for the (all equal) shape of ``arr``."""
    s = shape(arr)
    if len(s) < 2 or len(set(s)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    return diag_indices(s[0], len(s))


def indices(dimensions, dtype=None, sparse=False):
    """A grid of indices, one array per dimension."""
    dims = tuple(_static_int(d, "dimensions") for d in dimensions)
    d = dtypes.default_int_dtype() if dtype is None else _canon(dtype)
    out = []
    for i, n in enumerate(dims):
        if sparse:
            s = [1] * len(dims)
            s[i] = n
            out.append(lax.broadcasted_iota(d, tuple(s), i))
        else:
            out.append(lax.broadcasted_iota(d, dims, i))
    return tuple(out) if sparse else stack(out) if out else lax.full((0,), 0, d)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """Numbers spaced evenly on a log scale from ``start`` to ``stop``."""
    d = _canon(dtype) if dtype is not None else \
        _to_inexact_dtype(result_type(start, stop))
    cd = _to_inexact_dtype(d)
    start, stop = _convert(_arr(start), cd), _convert(_arr(stop), cd)
    sign = lax.sign(start)
    logs = linspace(log10(lax.abs(start)), log10(lax.abs(stop)), num, endpoint=endpoint,
                    axis=axis)
    out = lax.mul(power(lax.full((), 10, cd), logs), _bcast_along(sign, logs, axis))
    return _convert(out, d)


def _bcast_along(x, like, axis):
    s = _shape(like)
    axis = _canonicalize_axis(axis, len(s))
    dims = tuple(i for i in range(len(s)) if i != axis)
    return lax.broadcast_in_dim(_broadcast_to_shape(x, tuple(s[i] for i in dims)), s, dims)


def mask_indices(n, mask_func, k=0, *, size=None):
    """Row and column indices of the nonzero elements of ``mask_func(ones((n, n)), k)``
    (e.g. ``triu``); traced use needs the static ``size`` of ``nonzero``."""
    return nonzero(mask_func(ones((_static_int(n, "n"), _static_int(n, "n"))), k), size=size)


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of the 1-D ``x``: its columns are powers of ``x``, decreasing
    from ``N - 1`` (or increasing from 0)."""
    _check_arraylike("vander", x)
    x = _arr(x)
    if x.ndim != 1:
        raise ValueError("x must be a one-dimensional array")
    n = _shape(x)[0] if N is None else _static_int(N, "N")
    if n < 0:
        raise ValueError("N must be nonnegative")
    exponents = np.arange(n) if increasing else np.arange(n - 1, -1, -1)
    if not n:
        return lax.full((_shape(x)[0], 0), 0, _dtype_and_weak(x)[0])
    return stack([power(x, int(p)) for p in exponents], axis=1)


def fromfunction(function, shape, *, dtype=float, **kwargs):
    """``function`` applied to every index of ``shape`` (vmapped over scalar coordinates of
    ``dtype``, so it sees scalars rather than NumPy's whole coordinate grids)."""
    shape = tuple(_static_int(d, "shape") for d in shape)
    for i in range(len(shape)):
        in_axes = [0 if i == j else None for j in range(len(shape))]
        function = vmap(function, in_axes=tuple(in_axes[::-1]))
    return function(*(arange(s, dtype=dtype) for s in shape), **kwargs)


def frombuffer(buffer, dtype=float, count=-1, offset=0):
    """A 1-D array of the bytes of ``buffer`` read as ``dtype``."""
    return asarray(np.frombuffer(buffer=buffer, dtype=_np_dtype(dtype), count=count,
                                 offset=offset))


def fromstring(string, dtype=float, count=-1, *, sep):
    """A 1-D array of the numbers in the text ``string``, separated by ``sep``."""
    return asarray(np.fromstring(string, dtype=_np_dtype(dtype), count=count, sep=sep))


def fromiter(iterable, dtype, count=-1):
    """A 1-D array of the values of ``iterable``, read on the host now (so it is eager:
    under ``jit`` the iterable is consumed once, at tracing time)."""
    return asarray(np.fromiter(iterable, dtype=_np_dtype(dtype), count=count))


def fromfile(file, dtype=float, count=-1, sep="", offset=0):
    """A 1-D array read from a file on the host now (eager, like ``fromiter``)."""
    return asarray(np.fromfile(file, dtype=_np_dtype(dtype), count=count, sep=sep,
                               offset=offset))


def from_dlpack(x, /, *, device=None, copy=None):
    """An array of an object implementing the DLPack protocol (a CPU buffer), through
    ``np.from_dlpack``."""
    return asarray(np.from_dlpack(x, copy=copy))


def _np_dtype(dtype):
    return np.dtype(_np_type(dtype))
