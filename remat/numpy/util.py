"""Shared machinery of ``remat.numpy``: how inputs become arrays (``array``/``asarray``),
JAX's type promotion with weak types, NumPy broadcasting of operands, axis normalization and
the small constants the other modules build with.

Everything is written on ``remat.lax``: NumPy is used only for static arithmetic on shapes,
axes and indices (never on values that may be traced), so every function works alike on
Arrays and on tracers of every transformation.
"""

import builtins
import operator

import numpy as np

from remat import core, dtypes, lax
from remat.array import Array, from_numpy
from remat.core import ShapedArray, Tracer

_max = builtins.max
_all = builtins.all
_any = builtins.any
_abs = builtins.abs


class _ScalarMeta(type):
    """``remat.numpy.float32`` and friends: usable as dtypes (``np.dtype(jnp.float32)``),
    comparable with NumPy's scalar types, and callable to build arrays (``jnp.float32(1)``)."""

    def __call__(cls, x=0):
        return asarray(x, dtype=cls.dtype)

    def __eq__(cls, other):
        return cls is other or cls.dtype.type == other

    def __ne__(cls, other):
        return not cls == other

    def __hash__(cls):
        return hash(cls.dtype.type)

    def __instancecheck__(cls, instance):
        return isinstance(instance, cls.dtype.type)

    def __repr__(cls):
        return f"<class 'remat.numpy.{cls.__name__}'>"


def _named(fn, name, doc=None):
    """A function made by a factory, named (and documented) as the public one it is."""
    fn.__name__ = fn.__qualname__ = name
    if doc is not None:
        fn.__doc__ = doc
    return fn


def _make_scalar_type(name, dtype):
    return _ScalarMeta(name, (), {"dtype": np.dtype(dtype), "__module__": "remat.numpy"})

_python_types = {builtins.bool: "b", int: "i", float: "f", complex: "c"}
_PY_SCALARS = (builtins.bool, int, float, complex)


def _np_type(t):
    """A NumPy-understood form of a dtype-like value (our scalar types become NumPy's)."""
    if isinstance(t, _ScalarMeta):
        return t.dtype.type
    return t


def _canon(d):
    return dtypes.canonicalize_dtype(_np_type(d))


def _dtype_and_weak(x):
    """(dtype, weak_type) of a value, as JAX sees it: Python ``int``/``float``/``complex``
    scalars are weakly typed, Python ``bool`` is a strong boolean."""
    if type(x) is builtins.bool:
        return dtypes.bool_, False
    return dtypes.dtype_and_weak(x)


def _dtype_pair(x):
    """(dtype, weak) of a value or dtype-like; Python types (``float``) are weak as in JAX."""
    if isinstance(x, type) and x in _python_types:
        if x is builtins.bool:
            return dtypes.bool_, False
        return dtypes.python_scalar_dtype(x()), True
    if isinstance(x, _ScalarMeta):
        return _canon(x), False
    return _dtype_and_weak(x)


def _result_of(*args):
    return dtypes.result_type_of([_dtype_and_weak(x) for x in args])


def _value_dtype(x):
    if hasattr(x, "aval"):
        return x.aval.dtype
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype
    return np.dtype(_np_type(x))


def _is_arraylike(x):
    return (hasattr(x, "aval") or dtypes.is_python_scalar(x)
            or isinstance(x, (np.ndarray, np.generic)))


def _check_arraylike(name, *args):
    for i, x in enumerate(args):
        if not _is_arraylike(x):
            raise TypeError(f"{name} requires ndarray or scalar arguments, got {type(x)} at "
                            f"position {i}.")


def _arr(x):
    """``x`` as an Array or tracer (Python scalars become weakly typed rank-0 Arrays)."""
    if isinstance(x, (Array, Tracer)):
        return x
    return asarray(x)


def _dtype(x):
    return core.get_aval(x).dtype


def _shape(x):
    return core.get_aval(x).shape


def _weak(x):
    return core.get_aval(x).weak_type


def _convert(x, dtype, weak_type=False):
    """``x`` as ``dtype`` (weakly typed if asked), skipping the conversion when it is one.
    Concrete values are converted now, so constants are folded rather than staged."""
    if hasattr(x, "aval") and x.aval.dtype == dtype and x.aval.weak_type == weak_type:
        return x
    if type(x) in _PY_SCALARS:
        return Array._new(np.array(x, dtype), ShapedArray((), dtype, weak_type))
    if not isinstance(x, Tracer):
        with core.ensure_compile_time_eval():
            return lax.convert_element_type(x, dtype, weak_type)
    return lax.convert_element_type(x, dtype, weak_type)


def _full(shape, value, dtype, weak_type=False):
    """``value`` (a scalar) broadcast to ``shape`` as ``dtype``."""
    return lax.broadcast_in_dim(_convert(value, dtype, weak_type), shape, ())


def _to_inexact_dtype(d):
    """The floating dtype an integer or boolean dtype computes in (64-bit ints keep 64 bits)."""
    d = np.dtype(d)
    if dtypes.kind(d) in "fc":
        return d
    return dtypes.canonicalize_dtype(dtypes.float64 if d.itemsize == 8 else dtypes.float32)


def _promote_dtypes(*args):
    """Convert ``args`` to their common (dtype, weak_type) under JAX's lattice."""
    if len(args) == 1 and hasattr(args[0], "aval"):
        return list(args)
    d, weak = _result_of(*args)
    return [_convert(x, d, weak) for x in args]


def _promote_dtypes_inexact(*args):
    d, weak = _result_of(*args)
    d = _to_inexact_dtype(d)
    return [_convert(x, d, weak) for x in args]


def _promote_dtypes_numeric(*args):
    d, weak = _result_of(*args)
    if d == dtypes.bool_:
        d = dtypes.int32
    return [_convert(x, d, weak) for x in args]


def broadcast_shapes(*shapes):
    """The NumPy broadcast of ``shapes`` (ValueError when they are incompatible)."""
    return _broadcast_int_shapes([tuple(operator.index(d) for d in
                                        ((s,) if np.ndim(s) == 0 else s)) for s in shapes])


def _broadcast_int_shapes(shapes):
    """``broadcast_shapes`` of tuples of ints (avals' shapes)."""
    if not shapes:
        return ()
    nd = _max(len(s) for s in shapes)
    out = []
    for i in range(nd):
        size = 1
        for s in shapes:
            j = i - nd + len(s)
            if j >= 0 and s[j] != 1:
                if size != 1 and s[j] != size:
                    raise ValueError(f"Incompatible shapes for broadcasting: shapes={shapes}")
                size = s[j]
        out.append(size)
    return tuple(out)


def _broadcast_to_shape(x, shape):
    """``x`` broadcast to ``shape`` (a tuple of ints), its axes the trailing ones."""
    s = _shape(x)
    if s == shape:
        return x
    lead = len(shape) - len(s)
    return lax.broadcast_in_dim_p.bind(x, shape=shape,
                                       broadcast_dimensions=tuple(range(lead, len(shape))))


def _promote_shapes(name, *args):
    """Broadcast ``args`` to their common shape; rank-0 operands stay rank 0 (the lax
    elementwise primitives broadcast them)."""
    shapes = [_shape(x) for x in args]
    nonscalar = {s for s in shapes if s}
    if len(nonscalar) <= 1:
        return list(args)
    try:
        result = broadcast_shapes(*shapes)
    except ValueError:
        if len({len(s) for s in nonscalar}) == 1:  # as JAX: the lax op's TypeError
            got = ", ".join(str(s) for s in shapes)
            raise TypeError(f"{name} got incompatible shapes for broadcasting: {got}.") from None
        raise
    return [x if not s else _broadcast_to_shape(x, result) for x, s in zip(args, shapes)]


def _check_for_prngkeys(name, args):
    """JAX's refusal to promote typed keys against another dtype: a TypeError naming the
    dtypes (keys of one dtype go on to the op, which decides)."""
    if not _any(isinstance(getattr(getattr(x, "aval", None), "dtype", None),
                           dtypes.ExtendedDType) for x in args):
        return
    names = [str(_dtype_and_weak(x)[0]) for x in args]
    if len(set(names)) > 1:
        raise TypeError(f"{name} does not accept dtypes {', '.join(names)}.")


def _promote_args(name, *args):
    _check_arraylike(name, *args)
    _check_for_prngkeys(name, args)
    return _promote_shapes(name, *_promote_dtypes(*args))


def _promote_args_inexact(name, *args):
    _check_arraylike(name, *args)
    _check_for_prngkeys(name, args)
    return _promote_shapes(name, *_promote_dtypes_inexact(*args))


def _promote_args_numeric(name, *args):
    _check_arraylike(name, *args)
    _check_for_prngkeys(name, args)
    return _promote_shapes(name, *_promote_dtypes_numeric(*args))


def _canonicalize_axis(axis, num_dims):
    """A nonnegative axis; NumPy's AxisError (a ValueError) when out of bounds."""
    axis = operator.index(core.concrete_or_error(axis, "The axis argument must be static."))
    if not -num_dims <= axis < num_dims:
        raise np.exceptions.AxisError(axis, num_dims)
    return axis % num_dims if num_dims else axis


def _canonicalize_axes(axis, num_dims, name="axis"):
    """A tuple of distinct nonnegative axes from an int or a sequence."""
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    out = tuple(_canonicalize_axis(a, num_dims) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in '{name}' argument: {axis}")
    return out


def _static_int(x, what):
    x = core.concrete_or_error(x, f"The {what} argument must be static.")
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {x!r}") from None


def _scalar_like(x, value):
    """A rank-0 constant with the dtype and weak type of ``x``."""
    aval = core.get_aval(x)
    return lax.convert_element_type(value, aval.dtype, aval.weak_type)


def _const(x, value):
    """A strongly typed rank-0 constant of ``x``'s dtype: results mixing it with a weakly
    typed ``x`` are strongly typed (where JAX uses such a constant, so do we)."""
    return lax.full((), value, _dtype(x))


def _lax_const(x, value):
    """A rank-0 constant of ``x``'s dtype, weakly typed only when ``x`` is a weakly typed
    scalar (JAX's ``lax._const``)."""
    aval = core.get_aval(x)
    return lax.full((), lax.convert_element_type(value, aval.dtype,
                                                 aval.weak_type and not aval.shape))


def _zeros_like_aval(x):
    return lax.full(_shape(x), 0, _dtype(x))


def _flatten_nested(obj, out):
    if isinstance(obj, (list, tuple)):
        for o in obj:
            _flatten_nested(o, out)
    else:
        out.append(obj)
    return out


def _stack_nested(obj, d):
    if isinstance(obj, (list, tuple)):
        if not obj:
            return lax.full((0,), 0, d)
        parts = [_stack_nested(o, d) for o in obj]
        shapes = {_shape(p) for p in parts}
        if len(shapes) > 1:
            raise ValueError(f"setting an array element with a sequence: the nested "
                             f"sequence is ragged (shapes {sorted(shapes)})")
        return lax.concatenate([lax.expand_dims(p, (0,)) for p in parts], 0)
    return _convert(_arr(obj), d, False)


def array(object, dtype=None, copy=True, order="K", ndmin=0):
    """An Array from an array, a scalar or nested sequences of them (sequences holding
    tracers are stacked, so they can be built inside transformations)."""
    if order not in (None, "K", "C", "A"):
        raise NotImplementedError(f"array: only order='C' layouts exist in remat, got {order}")
    d = None if dtype is None else _canon(dtype)
    if object is None:  # (JAX's ValueError, here and inside a sequence)
        raise ValueError("None is not a valid value for jnp.array")
    if isinstance(object, (Array, Tracer)):
        out = object if d is None else _convert(object, d, False)
    elif type(object) is builtins.bool:
        out = from_numpy(np.bool_(object), d)
    elif dtypes.is_python_scalar(object):
        if d is None:
            out = from_numpy(object, dtypes.python_scalar_dtype(object), weak_type=True)
        elif type(object) is int and not isinstance(d, dtypes.ExtendedDType):
            # checked against the dtype asked for, not int32 (``jnp.uint32(2998342421)``):
            # NumPy's conversion raises OverflowError out of its range, as JAX's does
            with np.errstate(over="ignore"):
                out = from_numpy(np.array(object, dtype=d), d)
        else:
            out = lax.convert_element_type(object, d, False)
    elif isinstance(object, (np.ndarray, np.generic)):
        out = from_numpy(object, d)
    elif isinstance(object, (list, tuple)):
        leaves = _flatten_nested(object, [])
        for leaf in leaves:
            if leaf is None:
                raise ValueError("None is not a valid value for jnp.array")
            if not _is_arraylike(leaf):
                raise TypeError(f"array: unsupported element {leaf!r} of type {type(leaf)}")
        if d is None:
            d = (_result_of(*leaves)[0]
                 if leaves else dtypes.default_float_dtype())
        if _any(isinstance(x, Tracer) for x in leaves):
            out = _stack_nested(object, d)
        else:
            buf = np.array(_to_numpy_nested(object), dtype=d)
            out = from_numpy(buf, d)
    elif hasattr(object, "__array__"):
        out = from_numpy(np.asarray(object), d)
    else:
        raise TypeError(f"Unexpected input type for array: {type(object)}")
    ndmin = operator.index(ndmin)
    if ndmin > out.ndim:
        out = lax.reshape(out, (1,) * (ndmin - out.ndim) + _shape(out))
    return out


def _to_numpy_nested(obj):
    if isinstance(obj, (list, tuple)):
        return [_to_numpy_nested(o) for o in obj]
    return np.asarray(obj)


def asarray(a, dtype=None, order=None, *, copy=None):
    """``a`` as an Array (Arrays and tracers of the right dtype are returned as they are)."""
    if copy is False and dtype is not None and hasattr(a, "aval") and \
            a.aval.dtype != _canon(dtype):
        raise ValueError("Unable to avoid copy while creating an array as requested.")
    return array(a, dtype=dtype, copy=builtins.bool(copy), order=order)


def _shape_arg(shape, name):
    if isinstance(shape, (list, tuple)):
        return tuple(_static_int(d, f"{name} shape") for d in shape)
    if np.ndim(shape) == 0 and not hasattr(shape, "aval"):
        return (_static_int(shape, f"{name} shape"),)
    if hasattr(shape, "aval") and shape.aval.ndim == 0:
        return (_static_int(shape, f"{name} shape"),)
    return tuple(_static_int(d, f"{name} shape") for d in np.asarray(shape))


def _checked_shape(shape, name):
    s = _shape_arg(shape, name)
    if _any(d < 0 for d in s):  # JAX's TypeError (NumPy's is a ValueError)
        raise TypeError(f"{name} shape must have every element be nonnegative, got {s}.")
    return s


def _one_arg(name, x):
    _check_arraylike(name, x)
    return _promote_dtypes(x)[0]


def _inexact_arg(name, x):
    aval = getattr(x, "aval", None)
    if aval is not None and dtypes.kind(aval.dtype) in "fc":
        return x  # the common case: already an inexact array, nothing to promote
    _check_arraylike(name, x)
    return _promote_dtypes_inexact(x)[0]


def _weakly_bool(out, *operands):
    """Boolean results of weakly typed operands are weakly typed, as in JAX."""
    if _all(_weak(x) for x in operands):
        return _convert(out, dtypes.bool_, True)
    return out


def _scalar_operand_fits(x1, x2, inexact=False):
    """True when one operand is an array and the other a Python int/float that promotes to
    the array's own dtype and weak type: the lax op takes them as they are (the scalar
    becomes a rank-0 operand of the array's dtype), which saves the promotion machinery on
    the hottest path (``x * 2.0``)."""
    if type(x2) in (int, float):
        arr, scalar = x1, x2
    elif type(x1) in (int, float):
        arr, scalar = x2, x1
    else:
        return False
    aval = getattr(arr, "aval", None)
    if aval is None:
        return False
    kind = dtypes.kind(aval.dtype)
    return kind == "f" or (not inexact and kind in "iu" and type(scalar) is int)


def _shared_type(x1, x2, inexact=False):
    """``(dtype, weak_type)`` of two arrays of one numeric type (floating or complex only if
    ``inexact``), which need no promotion; None otherwise."""
    a1, a2 = getattr(x1, "aval", None), getattr(x2, "aval", None)
    if a1 is None or a2 is None or a1.dtype != a2.dtype or a1.weak_type != a2.weak_type:
        return None
    kind = dtypes.kind(a1.dtype)
    return (a1.dtype, a1.weak_type) if kind in "fc" or (not inexact and kind in "iu") else None


def _operands_without_promotion(x1, x2, inexact=False):
    """``(x1, x2)`` ready for a binary lax op without the promotion machinery, in the commonest
    cases: a Python scalar of the array's type (it stays a rank-0 operand), or two arrays of
    one type, broadcast to their common shape. None when they need promotion, or when their
    shapes do not broadcast (the general path then raises JAX's error)."""
    if _scalar_operand_fits(x1, x2, inexact):
        return x1, x2
    if _shared_type(x1, x2, inexact) is None:
        return None
    s1, s2 = x1.aval.shape, x2.aval.shape
    if s1 == s2 or not s1 or not s2:
        return x1, x2
    try:
        shape = _broadcast_int_shapes((s1, s2))
    except ValueError:
        return None
    return _broadcast_to_shape(x1, shape), _broadcast_to_shape(x2, shape)


def _bcast_like(x, like):
    return _broadcast_to_shape(x, _shape(like)) if _shape(x) != _shape(like) else x


def _bcast_pair(x1, x2):
    s = broadcast_shapes(_shape(x1), _shape(x2))
    return _broadcast_to_shape(x1, s), _broadcast_to_shape(x2, s)


def _to_bool(x):
    if _dtype(x) == dtypes.bool_:
        return x
    return lax.ne(x, _lax_const(x, 0))


def _slice_axis(x, axis, start, stop, step=1):
    s = _shape(x)
    starts = [0] * len(s)
    limits = list(s)
    strides = [1] * len(s)
    starts[axis], limits[axis], strides[axis] = start, stop, step
    if start == 0 and stop == s[axis] and step == 1:
        return x
    return lax.slice(x, starts, limits, strides if step != 1 else None)


def _runs(idx):
    """Split a static index vector into maximal runs of consecutive steps of +1 or -1."""
    runs = []
    i = 0
    while i < len(idx):
        j = i + 1
        step = 0
        if j < len(idx) and _abs(int(idx[j]) - int(idx[i])) == 1:
            step = int(idx[j]) - int(idx[i])
            while j < len(idx) and int(idx[j]) - int(idx[j - 1]) == step:
                j += 1
        runs.append((int(idx[i]), int(idx[j - 1]), step))
        i = j
    return runs


def _take_static(x, idx, axis):
    """``x`` indexed along ``axis`` by a static index vector, built from slices (so it needs
    no gather and differentiates into pads)."""
    pieces = []
    for first, last, step in _runs(np.asarray(idx)):
        if step >= 0:
            pieces.append(_slice_axis(x, axis, first, last + 1))
        else:
            pieces.append(lax.rev(_slice_axis(x, axis, last, first + 1), (axis,)))
    if not pieces:
        return lax.full(_shape(x)[:axis] + (0,) + _shape(x)[axis + 1:], 0, _dtype(x))
    return lax.concatenate(pieces, axis) if len(pieces) > 1 else pieces[0]


def _with(shape_, ax, n):
    return shape_[:ax] + (n,) + shape_[ax + 1:]


def _static_index_arrays(arrays):
    idx_dtype = dtypes.default_int_dtype()
    return tuple(from_numpy(np.asarray(a).astype(idx_dtype), idx_dtype) for a in arrays)


def _normalize_index(idx, n):
    """Negative indices count from the end."""
    d = _dtype(idx)
    if dtypes.kind(d) == "u":
        return idx
    return lax.select(lax.lt(idx, lax.full((), 0, d)), lax.add(idx, lax.full((), n, d)), idx)


def _index_dtype(idx):
    d = _dtype(idx)
    if not dtypes.is_integer(d):
        raise TypeError(f"take: indices must be integers, got {d.name}")
    return d


def _scatter_1d(x, idx, updates, mode="drop", combine=lax.scatter):
    """The 1-D ``x`` with ``updates`` written (or, with ``combine=lax.scatter_add``, added) at
    the 1-D integer positions ``idx``. Negative positions count from the end once; ``mode``
    'drop' skips positions still out of range, 'clip' clamps them."""
    n = _shape(x)[0]
    d = _dtype(idx)
    if dtypes.kind(d) != "u":
        idx = lax.select(lax.lt(idx, lax.full((), 0, d)), lax.add(idx, lax.full((), n, d)), idx)
    if mode == "clip":
        idx = lax.clamp(lax.full((), 0, d), idx, lax.full((), _max(n - 1, 0), d))
    elif mode not in ("drop", "promise_in_bounds"):
        raise ValueError(f"invalid scatter mode {mode!r}; expected 'drop', 'clip' or "
                         f"'promise_in_bounds'")
    dnums = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                        scatter_dims_to_operand_dims=(0,))
    return combine(x, lax.expand_dims(idx, (1,)), updates, dnums,
                   mode=lax.GatherScatterMode.FILL_OR_DROP)
