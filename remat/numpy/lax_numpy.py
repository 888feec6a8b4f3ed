"""The core of ``remat.numpy``: dtypes, array creation, elementwise math with NumPy
broadcasting and JAX type promotion, shape manipulation, and the contractions.

Everything here is written on ``remat.lax``: NumPy is used only for static arithmetic on
shapes, axes and indices (never on values that may be traced), so every function works alike
on Arrays and on tracers of every transformation, and is differentiable wherever its lax
building blocks are.
"""

import builtins
import math
import operator

import numpy as np

from remat import core, dtypes, lax
from remat.array import Array, from_numpy
from remat.core import ShapedArray, Tracer

_max = builtins.max
_min = builtins.min
_all = builtins.all
_any = builtins.any
_abs = builtins.abs
_sum = builtins.sum

# --- scalar types and dtype functions --------------------------------------------------------


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


bool_ = _make_scalar_type("bool_", np.bool_)
int8 = _make_scalar_type("int8", np.int8)
int16 = _make_scalar_type("int16", np.int16)
int32 = _make_scalar_type("int32", np.int32)
int64 = _make_scalar_type("int64", np.int64)
uint8 = _make_scalar_type("uint8", np.uint8)
uint16 = _make_scalar_type("uint16", np.uint16)
uint32 = _make_scalar_type("uint32", np.uint32)
uint64 = _make_scalar_type("uint64", np.uint64)
float16 = _make_scalar_type("float16", np.float16)
float32 = _make_scalar_type("float32", np.float32)
float64 = _make_scalar_type("float64", np.float64)
complex64 = _make_scalar_type("complex64", np.complex64)
complex128 = _make_scalar_type("complex128", np.complex128)
bool = bool_  # noqa: A001 - jnp.bool, as in JAX and NumPy 2
int_ = int64
uint = uint64
float_ = float64
complex_ = complex128
half, single, double = float16, float32, float64
csingle, cdouble = complex64, complex128

# abstract scalar types, shared with NumPy so issubdtype works across both
generic = np.generic
number = np.number
inexact = np.inexact
floating = np.floating
complexfloating = np.complexfloating
integer = np.integer
signedinteger = np.signedinteger
unsignedinteger = np.unsignedinteger

dtype = np.dtype

pi = np.pi
e = np.e
euler_gamma = np.euler_gamma
inf = np.inf
nan = np.nan
newaxis = None

ndarray = Array

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


def _lattice_result(pairs):
    """JAX's result (dtype, weak_type) of ``(dtype, weak)`` pairs: one operand keeps its own;
    equal dtypes with a strong one are strong; all-weak operands join their dtypes and stay
    weak; otherwise the lattice join, weak only when it is a Python scalar kind (taking that
    kind's default dtype)."""
    pairs = [(dtypes.canonicalize_dtype(d), builtins.bool(w)) for d, w in pairs]
    if len(pairs) == 1:
        return pairs[0]
    if len({d for d, _ in pairs}) == 1 and not _all(w for _, w in pairs):
        return pairs[0][0], False
    if _all(w for _, w in pairs):
        return dtypes.result_type_of([(d, False) for d, _ in pairs])[0], True
    defaults = {"i": dtypes.default_int_dtype(), "u": dtypes.default_int_dtype(),
                "f": dtypes.default_float_dtype(), "c": dtypes.default_complex_dtype()}
    return dtypes.result_type_of([(defaults.get(d.kind, d), True) if w else (d, False)
                                  for d, w in pairs])


def _result_of(*args):
    return _lattice_result([_dtype_and_weak(x) for x in args])


def result_type(*args):
    """JAX's type promotion of arrays, scalars and dtypes (weak Python scalars included)."""
    if not args:
        raise ValueError("at least one array or dtype is required")
    return _lattice_result([_dtype_pair(a) for a in args])[0]


def promote_types(a, b):
    """The promoted dtype of two dtypes under JAX's lattice."""
    return dtypes.promote_types(_canon(a), _canon(b))


def can_cast(from_, to, casting="safe"):
    """NumPy's casting rules on dtypes (or the dtype of an array)."""
    if hasattr(from_, "aval"):
        from_ = from_.aval.dtype
    return builtins.bool(np.can_cast(np.dtype(_np_type(from_)), np.dtype(_np_type(to)),
                                     casting=casting))


def issubdtype(arg1, arg2):
    """``np.issubdtype`` that also understands remat's scalar types."""
    return builtins.bool(np.issubdtype(_np_type(arg1), _np_type(arg2)))


def isdtype(dtype, kind):
    """The array-API ``isdtype`` (kinds as strings or dtypes, or a tuple of them)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    d = np.dtype(_np_type(dtype))
    names = {"bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu",
             "real floating": "f", "complex floating": "c", "numeric": "iufc"}
    for k in kinds:
        if isinstance(k, str):
            if k not in names:
                raise ValueError(f"Unrecognized data type kind: {k!r}")
            if d.kind in names[k]:
                return True
        elif d == np.dtype(_np_type(k)):
            return True
    return False


def iinfo(int_type):
    """Machine limits of an integer dtype (or of an array's dtype)."""
    return np.iinfo(_value_dtype(int_type))


def finfo(float_type):
    """Machine limits of a floating dtype (or of an array's dtype)."""
    return np.finfo(_value_dtype(float_type))


def _value_dtype(x):
    if hasattr(x, "aval"):
        return x.aval.dtype
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype
    return np.dtype(_np_type(x))


def ndim(a):
    """Number of dimensions of an array, tracer or scalar."""
    return _aval_of(a).ndim


def shape(a):
    """Shape of an array, tracer or scalar."""
    return _aval_of(a).shape


def size(a, axis=None):
    """Number of elements (along ``axis`` when given)."""
    s = _aval_of(a).shape
    if axis is None:
        return math.prod(s)
    return s[_canonicalize_axis(axis, len(s))]


def isscalar(element):
    """True for Python/NumPy scalars and rank-0 arrays."""
    if isinstance(element, (np.generic,)) or dtypes.is_python_scalar(element):
        return True
    if hasattr(element, "aval"):
        return element.aval.ndim == 0
    return False


def _aval_of(a):
    if isinstance(a, (list, tuple)):
        return core.get_aval(np.asarray(a))
    return core.get_aval(a)


# --- shared helpers --------------------------------------------------------------------------


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


def astype(x, dtype, /, *, copy=False, device=None):
    """``x`` converted to ``dtype`` (strongly typed)."""
    _check_arraylike("astype", x)
    return _convert(_arr(x), _canon(dtype), False)


def _to_inexact_dtype(d):
    """The floating dtype an integer or boolean dtype computes in (64-bit ints keep 64 bits)."""
    d = np.dtype(d)
    if d.kind in "fc":
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
    shapes = [tuple(operator.index(d) for d in ((s,) if np.ndim(s) == 0 else s))
              for s in shapes]
    if not shapes:
        return ()
    nd = _max(len(s) for s in shapes)
    out = []
    for i in range(nd):
        sizes = {s[i - nd + len(s)] for s in shapes if i - nd + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ValueError(f"Incompatible shapes for broadcasting: shapes={shapes}")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _broadcast_to_shape(x, shape):
    s = _shape(x)
    if s == shape:
        return x
    lead = len(shape) - len(s)
    return lax.broadcast_in_dim(x, shape, tuple(range(lead, len(shape))))


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


def _promote_args(name, *args):
    _check_arraylike(name, *args)
    return _promote_shapes(name, *_promote_dtypes(*args))


def _promote_args_inexact(name, *args):
    _check_arraylike(name, *args)
    return _promote_shapes(name, *_promote_dtypes_inexact(*args))


def _promote_args_numeric(name, *args):
    _check_arraylike(name, *args)
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


# --- creation --------------------------------------------------------------------------------


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
    if isinstance(object, (Array, Tracer)):
        out = object if d is None else _convert(object, d, False)
    elif type(object) is builtins.bool:
        out = from_numpy(np.bool_(object), d)
    elif dtypes.is_python_scalar(object):
        if d is None:
            out = from_numpy(object, dtypes.python_scalar_dtype(object), weak_type=True)
        else:
            out = lax.convert_element_type(object, d, False)
    elif isinstance(object, (np.ndarray, np.generic)):
        out = from_numpy(object, d)
    elif isinstance(object, (list, tuple)):
        leaves = _flatten_nested(object, [])
        for leaf in leaves:
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
    if ndim(fill_value) == 0:
        return lax.full(s, fill_value, None if dtype is None else _canon(dtype))
    return broadcast_to(asarray(fill_value, dtype=dtype), s)


def _like(a, dtype, shape, name):
    _check_arraylike(name, a)
    aval = core.get_aval(a)
    s = aval.shape if shape is None else _checked_shape(shape, name)
    if dtype is None:
        return (s,) + _dtype_and_weak(a)
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
    _check_arraylike("full_like", a, fill_value)
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
        d = dtypes.result_type_of([(dtypes.canonicalize_dtype(np.asarray(x).dtype), False)
                                   for x in bounds])[0]
    else:
        d = _canon(dtype)
    if stop is None and step is None:
        n = np.asarray(start)
        count = _max(int(np.ceil(n)) if n.dtype.kind in "fc" else int(n), 0)
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
        result_type(start, stop, dtypes.default_float_dtype())
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
        result_type(start, stop, dtypes.default_float_dtype())
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


# --- elementwise -----------------------------------------------------------------------------


def _one_arg(name, x):
    _check_arraylike(name, x)
    return _promote_dtypes(x)[0]


def _inexact_arg(name, x):
    aval = getattr(x, "aval", None)
    if aval is not None and aval.dtype.kind in "fc":
        return x  # the common case: already an inexact array, nothing to promote
    _check_arraylike(name, x)
    return _promote_dtypes_inexact(x)[0]


def _unary_inexact(name, lax_fn, doc):
    def fn(x, /):
        return lax_fn(_inexact_arg(name, x))

    return _named(fn, name, doc)


sqrt = _unary_inexact("sqrt", lax.sqrt, "Square root (ints compute in float).")
cbrt = _unary_inexact("cbrt", lax.cbrt, "Cube root.")
exp = _unary_inexact("exp", lax.exp, "Exponential.")
exp2 = _unary_inexact("exp2", lax.exp2, "``2 ** x``.")
expm1 = _unary_inexact("expm1", lax.expm1, "``exp(x) - 1``, accurate near 0.")
log = _unary_inexact("log", lax.log, "Natural logarithm.")
log1p = _unary_inexact("log1p", lax.log1p, "``log(1 + x)``, accurate near 0.")
sin = _unary_inexact("sin", lax.sin, "Sine.")
cos = _unary_inexact("cos", lax.cos, "Cosine.")
tan = _unary_inexact("tan", lax.tan, "Tangent.")
arcsin = _unary_inexact("arcsin", lax.asin, "Inverse sine.")
arccos = _unary_inexact("arccos", lax.acos, "Inverse cosine.")
arctan = _unary_inexact("arctan", lax.atan, "Inverse tangent.")
sinh = _unary_inexact("sinh", lax.sinh, "Hyperbolic sine.")
cosh = _unary_inexact("cosh", lax.cosh, "Hyperbolic cosine.")
tanh = _unary_inexact("tanh", lax.tanh, "Hyperbolic tangent.")
arcsinh = _unary_inexact("arcsinh", lax.asinh, "Inverse hyperbolic sine.")
arccosh = _unary_inexact("arccosh", lax.acosh, "Inverse hyperbolic cosine.")
arctanh = _unary_inexact("arctanh", lax.atanh, "Inverse hyperbolic tangent.")
asin, acos, atan = arcsin, arccos, arctan
asinh, acosh, atanh = arcsinh, arccosh, arctanh


def log2(x, /):
    """Base-2 logarithm."""
    x = _inexact_arg("log2", x)
    return lax.div(lax.log(x), lax.log(_const(x, 2)))


def log10(x, /):
    """Base-10 logarithm."""
    x = _inexact_arg("log10", x)
    return lax.div(lax.log(x), lax.log(_const(x, 10)))


def deg2rad(x, /):
    """Degrees to radians."""
    x = _inexact_arg("deg2rad", x)
    return lax.mul(x, _lax_const(x, np.pi / 180))


def rad2deg(x, /):
    """Radians to degrees."""
    x = _inexact_arg("rad2deg", x)
    return lax.mul(x, _lax_const(x, 180 / np.pi))


radians, degrees = deg2rad, rad2deg


def reciprocal(x, /):
    """``1 / x`` (ints compute in float)."""
    x = _inexact_arg("reciprocal", x)
    return lax.integer_pow(x, -1)


def negative(x, /):
    """``-x`` (booleans are not negatable, as in NumPy)."""
    x = _one_arg("negative", x)
    if _dtype(x) == dtypes.bool_:
        raise TypeError("The numpy boolean negative, the `-` operator, is not supported, use "
                        "the `~` operator or the logical_not function instead.")
    return lax.neg(x)


def positive(x, /):
    """``+x``."""
    return _one_arg("positive", x)


def absolute(x, /):
    """Absolute value (the magnitude for complex numbers)."""
    x = _one_arg("absolute", x)
    if _dtype(x) == dtypes.bool_ or _dtype(x).kind == "u":
        return x
    return lax.abs(x)


abs = absolute  # noqa: A001


def fabs(x, /):
    """Absolute value in floating point."""
    return lax.abs(_inexact_arg("fabs", x))


def sign(x, /):
    """-1, 0 or 1 by the sign of ``x`` (NaN stays NaN)."""
    x = _one_arg("sign", x)
    if _dtype(x) == dtypes.bool_:
        raise TypeError("sign does not accept dtype bool. Accepted dtypes are subtypes of "
                        "integer, floating, complexfloating.")
    if _dtype(x).kind == "u":
        return _convert(lax.ne(x, _scalar_like(x, 0)), _dtype(x), _weak(x))
    return lax.sign(x)


def _int_identity_or(name, lax_fn):
    def fn(x, /):
        x = _one_arg(name, x)
        if not dtypes.is_inexact(_dtype(x)):
            return x
        return lax_fn(x)

    return _named(fn, name)


floor = _int_identity_or("floor", lax.floor)
floor.__doc__ = "Largest integer not above ``x`` (integers are returned as they are)."
ceil = _int_identity_or("ceil", lax.ceil)
ceil.__doc__ = "Smallest integer not below ``x`` (integers are returned as they are)."


def rint(x, /):
    """Round to the nearest integer, halves to even (integers compute in float)."""
    x = _one_arg("rint", x)
    if not dtypes.is_inexact(_dtype(x)):
        return _convert(x, dtypes.default_float_dtype())
    return lax.round(x, 1)



def trunc(x, /):
    """Round towards zero."""
    x = _one_arg("trunc", x)
    if not dtypes.is_inexact(_dtype(x)):
        return x
    return lax.select(lax.lt(x, _scalar_like(x, 0)), lax.ceil(x), lax.floor(x))


def fix(x, out=None):
    """Round towards zero."""
    return trunc(x)


def round(a, decimals=0, out=None):
    """Round to ``decimals`` decimals, halves to even (as NumPy)."""
    a = _one_arg("round", a)
    decimals = _static_int(decimals, "decimals")
    d = _dtype(a)
    if d == dtypes.bool_:
        raise ValueError(f"data type {d.type} not inexact")
    if not dtypes.is_inexact(d):
        if decimals >= 0:
            return a
        factor = _scalar_like(a, 10 ** -decimals)
        fa = _convert(a, dtypes.default_float_dtype())
        fac = lax.convert_element_type(factor, _dtype(fa))
        return _convert(lax.mul(lax.round(lax.div(fa, fac), 1), fac), d, _weak(a))
    if decimals == 0:
        return lax.round(a, 1)
    factor = _scalar_like(a, 10.0 ** decimals)
    return lax.div(lax.round(lax.mul(a, factor), 1), factor)


around = round


def square(x, /):
    """``x * x``."""
    x = _one_arg("square", x)
    if _dtype(x) == dtypes.bool_:
        x = _convert(x, dtypes.int32, _weak(x))
    return lax.square(x)


def isfinite(x, /):
    """Whether each element is finite (integers always are)."""
    x = _one_arg("isfinite", x)
    if not dtypes.is_inexact(_dtype(x)):
        return lax.full(_shape(x), True, dtypes.bool_)
    return _weakly_bool(lax.is_finite(x), x)


def isinf(x, /):
    """Whether each element is positive or negative infinity."""
    x = _one_arg("isinf", x)
    if not dtypes.is_inexact(_dtype(x)):
        return lax.full(_shape(x), False, dtypes.bool_)
    return lax.eq(lax.abs(x), _const(lax.abs(x), np.inf))


def isposinf(x, /):
    """Whether each element is +inf."""
    x = _one_arg("isposinf", x)
    if not dtypes.is_inexact(_dtype(x)):
        return lax.full(_shape(x), False, dtypes.bool_)
    return lax.eq(x, _const(x, np.inf))


def isneginf(x, /):
    """Whether each element is -inf."""
    x = _one_arg("isneginf", x)
    if not dtypes.is_inexact(_dtype(x)):
        return lax.full(_shape(x), False, dtypes.bool_)
    return lax.eq(x, _const(x, -np.inf))


def isnan(x, /):
    """Whether each element is NaN."""
    x = _one_arg("isnan", x)
    if not dtypes.is_inexact(_dtype(x)):
        return _weakly_bool(lax.full(_shape(x), False, dtypes.bool_), x)
    return _weakly_bool(lax.ne(x, x), x)


def _weakly_bool(out, *operands):
    """Boolean results of weakly typed operands are weakly typed, as in JAX."""
    if _all(_weak(x) for x in operands):
        return _convert(out, dtypes.bool_, True)
    return out


def signbit(x, /):
    """Whether the sign bit is set (``-0.0`` counts as negative)."""
    x = _one_arg("signbit", x)
    d = _dtype(x)
    if d == dtypes.bool_ or d.kind == "u":
        return lax.full(_shape(x), False, dtypes.bool_)
    x = _convert(x, d)
    zero = _scalar_like(x, 0)
    if d.kind in "i":
        return lax.lt(x, zero)
    neg_zero = lax.bitwise_and(lax.eq(x, zero), lax.lt(lax.div(_scalar_like(x, 1), x), zero))
    return lax.bitwise_or(lax.lt(x, zero), neg_zero)


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
    kind = aval.dtype.kind
    return kind == "f" or (not inexact and kind in "iu" and type(scalar) is int)


def _same_type_operands(x1, x2, inexact):
    """Two arrays of one dtype and weak type, with equal shapes or one of rank 0, need no
    promotion or broadcasting: the lax op takes them as they are."""
    a1, a2 = getattr(x1, "aval", None), getattr(x2, "aval", None)
    if a1 is None or a2 is None or a1.dtype != a2.dtype or a1.weak_type != a2.weak_type:
        return False
    if a1.shape != a2.shape and a1.shape and a2.shape:
        return False
    kind = a1.dtype.kind
    return kind in "fc" or (not inexact and kind in "iu")


def _binary(name, promote, lax_fn, doc, bool_fn=None):
    inexact = promote is _promote_args_inexact

    def fn(x1, x2, /):
        if _scalar_operand_fits(x1, x2, inexact) or _same_type_operands(x1, x2, inexact):
            return lax_fn(x1, x2)
        x1, x2 = promote(name, x1, x2)
        if bool_fn is not None and _dtype(x1) == dtypes.bool_:
            return bool_fn(x1, x2)
        return lax_fn(x1, x2)

    return _named(fn, name, doc)


add = _binary("add", _promote_args, lax.add, "Elementwise ``x1 + x2`` (NumPy broadcasting).",
              lax.bitwise_or)
multiply = _binary("multiply", _promote_args, lax.mul, "Elementwise ``x1 * x2``.",
                   lax.bitwise_and)
arctan2 = _binary("arctan2", _promote_args_inexact, lax.atan2,
                  "Angle of the point ``(x2, x1)``, elementwise.")
atan2 = arctan2
nextafter = _binary("nextafter", _promote_args_inexact, lax.nextafter,
                    "Next representable value after ``x1`` towards ``x2``.")


def subtract(x1, x2, /):
    """Elementwise ``x1 - x2``."""
    if _scalar_operand_fits(x1, x2):
        return lax.sub(x1, x2)
    x1, x2 = _promote_args("subtract", x1, x2)
    if _dtype(x1) == dtypes.bool_:
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the "
                        "bitwise_xor, the `^` operator, or the logical_xor function instead.")
    return lax.sub(x1, x2)


def true_divide(x1, x2, /):
    """Elementwise ``x1 / x2``; integers divide in floating point."""
    if _scalar_operand_fits(x1, x2, inexact=True):
        return lax.div(x1, x2)
    x1, x2 = _promote_args_inexact("true_divide", x1, x2)
    return lax.div(x1, x2)


divide = true_divide


def floor_divide(x1, x2, /):
    """Elementwise ``x1 // x2`` with Python's rounding towards minus infinity."""
    x1, x2 = _promote_args_numeric("floor_divide", x1, x2)
    d = _dtype(x1)
    if d.kind == "u":
        return lax.div(x1, x2)
    if d.kind == "i":
        q = lax.div(x1, x2)
        zero = _scalar_like(x1, 0)
        r = lax.rem(x1, x2)
        fix_down = lax.bitwise_and(lax.ne(r, zero),
                                   lax.ne(lax.lt(x1, zero), lax.lt(x2, zero)))
        return lax.select(fix_down, lax.sub(q, _scalar_like(q, 1)), q)
    return _float_divmod(x1, x2)[0]


def _float_divmod(x1, x2):
    mod = lax.rem(x1, x2)
    div = lax.div(lax.sub(x1, mod), x2)
    zero = _scalar_like(mod, 0)
    fix_sign = lax.bitwise_and(lax.ne(mod, zero), lax.ne(lax.lt(x2, zero), lax.lt(mod, zero)))
    mod = lax.select(fix_sign, lax.add(mod, _bcast_like(x2, mod)), mod)
    div = lax.select(fix_sign, lax.sub(div, _scalar_like(div, 1)), div)
    return lax.round(div, 1), mod


def _bcast_like(x, like):
    return _broadcast_to_shape(x, _shape(like)) if _shape(x) != _shape(like) else x


def remainder(x1, x2, /):
    """Elementwise remainder with the sign of the divisor (Python's ``%``)."""
    x1, x2 = _promote_args_numeric("remainder", x1, x2)
    if _dtype(x1).kind == "u":
        return lax.rem(x1, x2)
    r = lax.rem(x1, x2)
    zero = _scalar_like(r, 0)
    fix_sign = lax.bitwise_and(lax.ne(r, zero), lax.ne(lax.lt(r, zero), lax.lt(x2, zero)))
    return lax.select(fix_sign, lax.add(r, _bcast_like(x2, r)), r)


mod = remainder


def fmod(x1, x2, /):
    """Elementwise remainder with the sign of the dividend (C's ``fmod``)."""
    x1, x2 = _promote_args_numeric("fmod", x1, x2)
    return lax.rem(x1, x2)


def divmod(x1, x2, /):  # noqa: A001
    """``(floor_divide(x1, x2), remainder(x1, x2))``."""
    return floor_divide(x1, x2), remainder(x1, x2)


def _static_int_exponent(x2):
    """The Python int of a static integer exponent, or None."""
    if isinstance(x2, Tracer):
        return None
    if isinstance(x2, builtins.bool):
        return None
    if isinstance(x2, int):
        return x2
    if isinstance(x2, (Array, np.ndarray, np.generic)) and np.ndim(x2) == 0 and \
            np.asarray(x2).dtype.kind in "iu":
        return int(np.asarray(x2))
    return None


def power(x1, x2, /):
    """Elementwise ``x1 ** x2``; a static integer exponent uses repeated multiplication."""
    _check_arraylike("power", x1, x2)
    y = _static_int_exponent(x2)
    if y is not None:
        x1 = _promote_dtypes_numeric(x1)[0]
        return lax.integer_pow(x1, y)
    (d1, w1), (d2, w2) = _dtype_and_weak(x1), _dtype_and_weak(x2)
    if dtypes.is_inexact(d1) and dtypes.is_integer(d2):
        # a floating base keeps its dtype under an integer exponent (as JAX)
        return lax.pow(*_promote_shapes("power", _convert(x1, d1, w1), _convert(x2, d2, w2)))
    x1, x2 = _promote_args_numeric("power", x1, x2)
    if dtypes.is_integer(_dtype(x1)):
        return _integer_power(x1, x2)
    return lax.pow(x1, x2)


pow = power  # noqa: A001


def _integer_power(x1, x2):
    """Integer ``x1 ** x2`` for traced exponents: binary exponentiation over every bit of the
    exponent (exact, wrapping like NumPy); negative exponents give ``1 // x1 ** -x2``
    (1 and -1 keep their magnitude, other bases give 0)."""
    s = broadcast_shapes(_shape(x1), _shape(x2))
    x1, x2 = _broadcast_to_shape(x1, s), _broadcast_to_shape(x2, s)
    d = _dtype(x1)
    zero, two = _const(x2, 0), _const(x2, 2)
    negative_exp = lax.lt(x2, zero)
    e_ = lax.select(negative_exp, lax.neg(x2), x2) if _dtype(x2).kind == "i" else x2
    acc = lax.full(s, 1, d)
    base = x1
    for _ in range(8 * _dtype(x2).itemsize):
        odd = lax.ne(lax.rem(e_, two), zero)
        acc = lax.select(odd, lax.mul(acc, base), acc)
        base = lax.mul(base, base)
        e_ = lax.div(e_, two)
    if _dtype(x2).kind == "i":
        unit = lax.eq(lax.abs(x1) if d.kind == "i" else x1, lax.full((), 1, d))
        acc = lax.select(negative_exp, lax.select(unit, acc, lax.full(s, 0, d)), acc)
    return _convert(acc, d, _weak(x1))


def float_power(x1, x2, /):
    """``x1 ** x2`` computed in floating point."""
    x1, x2 = _promote_args_inexact("float_power", x1, x2)
    return lax.pow(x1, x2)


def maximum(x1, x2, /):
    """Elementwise maximum (NaN propagates)."""
    if _scalar_operand_fits(x1, x2):
        return lax.max(x1, x2)
    x1, x2 = _promote_args("maximum", x1, x2)
    return lax.max(x1, x2)


def minimum(x1, x2, /):
    """Elementwise minimum (NaN propagates)."""
    if _scalar_operand_fits(x1, x2):
        return lax.min(x1, x2)
    x1, x2 = _promote_args("minimum", x1, x2)
    return lax.min(x1, x2)


def fmax(x1, x2):
    """Elementwise maximum ignoring NaNs."""
    x1, x2 = _promote_args("fmax", x1, x2)
    x1, x2 = _bcast_pair(x1, x2)
    return where(isnan(x1), x2, where(isnan(x2), x1, lax.max(x1, x2)))


def fmin(x1, x2):
    """Elementwise minimum ignoring NaNs."""
    x1, x2 = _promote_args("fmin", x1, x2)
    x1, x2 = _bcast_pair(x1, x2)
    return where(isnan(x1), x2, where(isnan(x2), x1, lax.min(x1, x2)))


def _bcast_pair(x1, x2):
    s = broadcast_shapes(_shape(x1), _shape(x2))
    return _broadcast_to_shape(x1, s), _broadcast_to_shape(x2, s)


def hypot(x1, x2, /):
    """``sqrt(x1**2 + x2**2)`` without overflow or underflow in the squares."""
    x1, x2 = _promote_args_inexact("hypot", x1, x2)
    x1, x2 = _bcast_pair(lax.abs(x1), lax.abs(x2))
    big, small = lax.max(x1, x2), lax.min(x1, x2)
    zero = _scalar_like(big, 0)
    is_zero = lax.eq(big, zero)
    safe_big = lax.select(is_zero, lax.full_like(big, 1), big)
    ratio = lax.div(small, safe_big)
    r = lax.mul(safe_big, lax.sqrt(lax.add(_scalar_like(ratio, 1), lax.square(ratio))))
    r = lax.select(is_zero, lax.full_like(r, 0), r)
    return where(lax.eq(big, _const(big, np.inf)), _lax_const(big, np.inf), r)


def logaddexp(x1, x2, /):
    """``log(exp(x1) + exp(x2))`` without overflow."""
    x1, x2 = _promote_args_inexact("logaddexp", x1, x2)
    x1, x2 = _bcast_pair(x1, x2)
    amax = lax.max(x1, x2)
    delta = lax.sub(x1, x2)
    nan_delta = lax.ne(delta, delta)
    safe_delta = lax.select(nan_delta, lax.full_like(delta, 0), delta)
    out = lax.add(amax, lax.log1p(lax.exp(lax.neg(lax.abs(safe_delta)))))
    return lax.select(nan_delta, lax.add(x1, x2), out)


def logaddexp2(x1, x2, /):
    """``log2(2**x1 + 2**x2)`` without overflow."""
    x1, x2 = _promote_args_inexact("logaddexp2", x1, x2)
    x1, x2 = _bcast_pair(x1, x2)
    amax = lax.max(x1, x2)
    delta = lax.sub(x1, x2)
    nan_delta = lax.ne(delta, delta)
    safe_delta = lax.select(nan_delta, lax.full_like(delta, 0), delta)
    tail = lax.log1p(lax.exp2(lax.neg(lax.abs(safe_delta))))
    out = lax.add(amax, lax.mul(_lax_const(amax, 1 / np.log(2)), tail))
    return lax.select(nan_delta, lax.add(x1, x2), out)


def copysign(x1, x2, /):
    """The magnitude of ``x1`` with the sign of ``x2``."""
    x1, x2 = _promote_args_inexact("copysign", x1, x2)
    x1, x2 = _bcast_pair(x1, x2)
    return where(signbit(x2), lax.neg(lax.abs(x1)), lax.abs(x1))


def heaviside(x1, x2, /):
    """0 where ``x1 < 0``, ``x2`` where ``x1 == 0``, 1 where ``x1 > 0``."""
    x1, x2 = _promote_args_inexact("heaviside", x1, x2)
    zero = _lax_const(x1, 0)
    return where(lax.lt(x1, zero), zero, where(lax.gt(x1, zero), _lax_const(x1, 1), x2))


def _comparison(name, lax_fn):
    def fn(x1, x2, /):
        if not _scalar_operand_fits(x1, x2):
            x1, x2 = _promote_args(name, x1, x2)
        return _weakly_bool(lax_fn(x1, x2), x1, x2)

    return _named(fn, name, f"Elementwise ``{name}`` comparison (a boolean array).")


equal = _comparison("equal", lax.eq)
not_equal = _comparison("not_equal", lax.ne)
less = _comparison("less", lax.lt)
less_equal = _comparison("less_equal", lax.le)
greater = _comparison("greater", lax.gt)
greater_equal = _comparison("greater_equal", lax.ge)


def _bitwise(name, lax_fn):
    def fn(x1, x2, /):
        x1, x2 = _promote_args(name, x1, x2)
        if not (dtypes.is_integer(_dtype(x1)) or _dtype(x1) == dtypes.bool_):
            raise TypeError(f"{name} requires integer or boolean arguments, got "
                            f"{_dtype(x1).name}")
        return lax_fn(x1, x2)

    return _named(fn, name, f"Elementwise ``{name}`` of integers or booleans.")


bitwise_and = _bitwise("bitwise_and", lax.bitwise_and)
bitwise_or = _bitwise("bitwise_or", lax.bitwise_or)
bitwise_xor = _bitwise("bitwise_xor", lax.bitwise_xor)


def invert(x, /):
    """Bitwise NOT (logical NOT for booleans)."""
    x = _one_arg("invert", x)
    if not (dtypes.is_integer(_dtype(x)) or _dtype(x) == dtypes.bool_):
        raise TypeError(f"invert requires an integer or boolean argument, got "
                        f"{_dtype(x).name}")
    return lax.bitwise_not(x)


bitwise_not = bitwise_invert = invert


def _to_bool(x):
    if _dtype(x) == dtypes.bool_:
        return x
    return lax.ne(x, _lax_const(x, 0))


def _logical(name, lax_fn):
    def fn(x1, x2, /):
        x1, x2 = _promote_args(name, x1, x2)
        return lax_fn(_to_bool(x1), _to_bool(x2))

    return _named(fn, name, f"Elementwise ``{name}`` of the truth values of the operands.")


logical_and = _logical("logical_and", lax.bitwise_and)
logical_or = _logical("logical_or", lax.bitwise_or)
logical_xor = _logical("logical_xor", lax.bitwise_xor)


def logical_not(x, /):
    """Elementwise NOT of the truth value of ``x``."""
    return lax.bitwise_not(_to_bool(_one_arg("logical_not", x)))


def where(condition, x=None, y=None, /, *, size=None, fill_value=None):
    """``x`` where ``condition`` else ``y`` (broadcasting all three); with only ``condition``
    it is ``nonzero(condition)``, which needs a static ``size`` under transformations."""
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise ValueError("Either both or neither of the x and y arguments should be provided "
                         f"to jax.numpy.where, got {x} and {y}.")
    _check_arraylike("where", condition, x, y)
    condition = _to_bool(_one_arg("where", condition))
    x, y = _promote_dtypes(x, y)
    s = broadcast_shapes(_shape(condition), _shape(x), _shape(y))
    x, y = _broadcast_to_shape(x, s), _broadcast_to_shape(y, s)
    if _shape(condition):
        condition = _broadcast_to_shape(condition, s)
    return lax.select(condition, x, y)


def select(condlist, choicelist, default=0):
    """The element of the first ``choicelist`` entry whose condition holds, else
    ``default``."""
    if len(condlist) != len(choicelist):
        raise ValueError(f"condlist must have length equal to choicelist ({len(condlist)} "
                         f"vs {len(choicelist)})")
    if not condlist:
        raise ValueError("condlist must be non-empty")
    out = default
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        out = where(cond, choice, out)
    return out


def clip(arr=None, /, min=None, max=None, *, a=None, a_min=None, a_max=None):  # noqa: A002
    """``arr`` limited to ``[min, max]`` (either bound may be None)."""
    if arr is None:
        arr = a
    if min is None:
        min = a_min  # noqa: A001
    if max is None:
        max = a_max  # noqa: A001
    _check_arraylike("clip", arr)
    if min is not None:
        arr = maximum(min, arr)
    if max is not None:
        arr = minimum(max, arr)
    return _arr(arr)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """``x`` with NaN, +inf and -inf replaced by finite numbers."""
    _check_arraylike("nan_to_num", x)
    x = _arr(x)
    d = _dtype(x)
    if not dtypes.is_inexact(d):
        return x
    info = np.finfo(d)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    x = _convert(x, d)
    out = where(isnan(x), _convert(_arr(nan), d), x)
    out = where(isposinf(out), _convert(_arr(posinf), d), out)
    return where(isneginf(out), _convert(_arr(neginf), d), out)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether ``|a - b| <= atol + rtol * |b|`` elementwise (equal infinities match)."""
    a, b = _promote_args("isclose", a, b)
    d = _dtype(a)
    if not dtypes.is_inexact(d):
        return _convert(lax.eq(*_bcast_pair(a, b)), dtypes.bool_)
    a, b = _convert(a, d), _convert(b, d)
    a, b = _bcast_pair(a, b)
    rtol_, atol_ = lax.convert_element_type(rtol, d), lax.convert_element_type(atol, d)
    close = lax.le(lax.abs(lax.sub(a, b)), lax.add(atol_, lax.mul(rtol_, lax.abs(b))))
    finite = lax.bitwise_and(lax.is_finite(a), lax.is_finite(b))
    both_inf = lax.eq(a, b)
    out = lax.select(finite, close, both_inf)
    if equal_nan:
        out = lax.bitwise_or(out, lax.bitwise_and(lax.ne(a, a), lax.ne(b, b)))
    return _convert(out, dtypes.bool_)


def conjugate(x, /):
    """Complex conjugate (the identity on real values)."""
    x = _one_arg("conjugate", x)
    if _dtype(x).kind == "c":
        raise TypeError("remat.lax has no complex conjugate primitive; conjugate supports "
                        "real arrays only")
    return x


conj = conjugate


def real(val, /):
    """The real part (the identity on real values)."""
    val = _one_arg("real", val)
    if _dtype(val).kind == "c":
        raise TypeError("remat.lax has no real-part primitive; real supports real arrays only")
    return val


def imag(val, /):
    """The imaginary part (zeros for real values)."""
    val = _one_arg("imag", val)
    if _dtype(val).kind == "c":
        raise TypeError("remat.lax has no imaginary-part primitive; imag supports real "
                        "arrays only")
    return lax.full_like(val, 0)


def sinc(x, /):
    """``sin(pi x) / (pi x)``, 1 at 0."""
    x = _inexact_arg("sinc", x)
    zero = lax.eq(x, _lax_const(x, 0))
    safe = lax.select(zero, lax.full_like(x, 1), x)
    pix = lax.mul(safe, _lax_const(x, np.pi))
    return lax.select(zero, lax.full_like(x, 1), lax.div(lax.sin(pix), pix))


# --- shape manipulation ----------------------------------------------------------------------


def _resolve_shape(newshape, size_, old_shape):
    newshape = _shape_arg(newshape, "reshape")
    neg = [i for i, d in enumerate(newshape) if d < 0]
    if _any(d < -1 for d in newshape):
        raise TypeError(f"cannot reshape array of shape {old_shape} into shape {newshape}: "
                        f"sizes must be nonnegative, or -1 for one unknown axis size")
    if len(neg) > 1:
        raise TypeError(f"can only specify one unknown axis size with a `-1` value, got "
                        f"{newshape}")
    if neg:
        known = math.prod(d for d in newshape if d >= 0)
        if known == 0 or size_ % known:
            raise TypeError(f"cannot reshape array of shape {old_shape} (size {size_}) into "
                            f"shape {newshape} because the product of specified axis sizes "
                            f"({known}) does not evenly divide {size_}")
        newshape = tuple(size_ // known if d < 0 else d for d in newshape)
    if math.prod(newshape) != size_:
        raise TypeError(f"cannot reshape array of shape {old_shape} (size {size_}) into shape "
                        f"{newshape} (size {math.prod(newshape)})")
    return newshape


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    """``a`` with a new shape (one entry may be -1); ``order='F'`` reads and writes in
    column-major order."""
    if shape is None:
        if newshape is None:
            raise TypeError("reshape() missing required argument 'shape'")
        shape = newshape
    _check_arraylike("reshape", a)
    a = _arr(a)
    old = _shape(a)
    new = _resolve_shape(shape, math.prod(old), old)
    if order in ("C", "A", None):
        return lax.reshape(a, new)
    if order == "F":
        rev_in = tuple(range(len(old)))[::-1]
        flat = lax.reshape(lax.transpose(a, rev_in), new[::-1])
        return lax.transpose(flat, tuple(range(len(new)))[::-1])
    raise ValueError(f"Unexpected value for 'order' argument: {order}.")


def ravel(a, order="C"):
    """``a`` flattened to one dimension."""
    return reshape(a, (-1,), order=order)


def squeeze(a, axis=None):
    """``a`` without its size-1 axes (all of them, or those in ``axis``)."""
    _check_arraylike("squeeze", a)
    a = _arr(a)
    s = _shape(a)
    if axis is None:
        axes = tuple(i for i, d in enumerate(s) if d == 1)
    else:
        axes = _canonicalize_axes(axis, len(s))
    return lax.squeeze(a, axes)


def expand_dims(a, axis):
    """``a`` with size-1 axes inserted at ``axis`` (positions in the result)."""
    _check_arraylike("expand_dims", a)
    a = _arr(a)
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    out_ndim = a.ndim + len(axes)
    axes = _canonicalize_axes(axes, out_ndim)
    return lax.expand_dims(a, axes)


def broadcast_to(array, shape):
    """``array`` broadcast to ``shape`` (NumPy rules; ValueError when it does not fit)."""
    _check_arraylike("broadcast_to", array)
    x = _arr(array)
    shape = _shape_arg(shape, "broadcast_to")
    s = _shape(x)
    if s == shape:
        return x
    lead = len(shape) - len(s)
    if lead < 0 or _any(d not in (1, t) for d, t in zip(s, shape[lead:])):
        raise ValueError(f"Incompatible shapes for broadcasting: {s} and requested shape "
                         f"{shape}")
    return lax.broadcast_in_dim(x, shape, tuple(range(lead, len(shape))))


def broadcast_arrays(*args):
    """``args`` broadcast to their common shape."""
    _check_arraylike("broadcast_arrays", *args)
    args = [_arr(x) for x in args]
    s = broadcast_shapes(*(_shape(x) for x in args))
    return [_broadcast_to_shape(x, s) for x in args]


def _as_array_list(arrays, name):
    if hasattr(arrays, "aval"):
        return [arrays[i] for i in range(_shape(arrays)[0])] if _shape(arrays) else [arrays]
    arrays = list(arrays)
    _check_arraylike(name, *arrays)
    return arrays


def concatenate(arrays, axis=0, dtype=None):
    """Join ``arrays`` along an existing ``axis`` (``axis=None`` flattens them first)."""
    arrays = _as_array_list(arrays, "concatenate")
    if not arrays:
        raise ValueError("Need at least one array to concatenate.")
    if axis is None:
        return concatenate([ravel(a) for a in arrays], 0, dtype)
    arrays = [_arr(a) for a in arrays]
    if _any(_shape(a) == () for a in arrays):
        raise ValueError("Zero-dimensional arrays cannot be concatenated.")
    nd = len(_shape(arrays[0]))
    if _any(len(_shape(a)) != nd for a in arrays):
        raise TypeError("Cannot concatenate arrays with different numbers of dimensions: got "
                        + ", ".join(str(_shape(a)) for a in arrays) + ".")
    axis = _canonicalize_axis(axis, nd)
    if dtype is None:
        arrays = _promote_dtypes(*arrays)
    else:
        arrays = [_convert(a, _canon(dtype)) for a in arrays]
    for a in arrays[1:]:
        s0, s = _shape(arrays[0]), _shape(a)
        if s0[:axis] + s0[axis + 1:] != s[:axis] + s[axis + 1:]:
            raise TypeError(f"Cannot concatenate arrays with shapes that differ in dimensions "
                            f"other than the one being concatenated: concatenating along "
                            f"dimension {axis} for shapes "
                            + ", ".join(str(_shape(x)) for x in arrays) + ".")
    return lax.concatenate(arrays, axis)


concat = concatenate


def stack(arrays, axis=0, out=None, dtype=None):
    """Join ``arrays`` (all of one shape) along a new ``axis``."""
    arrays = _as_array_list(arrays, "stack")
    if not arrays:
        raise ValueError("Need at least one array to stack.")
    arrays = [_arr(a) for a in arrays]
    shapes = {_shape(a) for a in arrays}
    if len(shapes) > 1:
        raise ValueError("All input arrays must have the same shape.")
    nd = len(_shape(arrays[0])) + 1
    axis = _canonicalize_axis(axis, nd)
    if dtype is None:
        arrays = _promote_dtypes(*arrays)
    else:
        arrays = [_convert(a, _canon(dtype)) for a in arrays]
    return lax.concatenate([lax.expand_dims(a, (axis,)) for a in arrays], axis)


def atleast_1d(*arys):
    """Each argument viewed with at least one dimension."""
    out = [reshape(a, (1,)) if ndim(_arr(a)) == 0 else _arr(a) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    """Each argument viewed with at least two dimensions (1-D becomes a row)."""
    out = []
    for a in arys:
        a = _arr(a)
        out.append(a if a.ndim >= 2 else lax.reshape(a, (1,) * (2 - a.ndim) + _shape(a)))
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    """Each argument viewed with at least three dimensions."""
    out = []
    for a in arys:
        a = _arr(a)
        s = _shape(a)
        if len(s) == 0:
            a = lax.reshape(a, (1, 1, 1))
        elif len(s) == 1:
            a = lax.reshape(a, (1, s[0], 1))
        elif len(s) == 2:
            a = lax.reshape(a, s + (1,))
        out.append(a)
    return out[0] if len(out) == 1 else out


def hstack(tup, dtype=None):
    """Stack along the second axis (the first for 1-D arrays)."""
    arrs = [atleast_1d(a) for a in _as_array_list(tup, "hstack")]
    axis = 0 if arrs and arrs[0].ndim == 1 else 1
    return concatenate(arrs, axis, dtype)


def vstack(tup, dtype=None):
    """Stack along the first axis (1-D arrays become rows)."""
    return concatenate([atleast_2d(a) for a in _as_array_list(tup, "vstack")], 0, dtype)


row_stack = vstack


def dstack(tup, dtype=None):
    """Stack along the third axis."""
    return concatenate([atleast_3d(a) for a in _as_array_list(tup, "dstack")], 2, dtype)


def column_stack(tup):
    """Stack 1-D arrays as columns (2-D arrays as they are)."""
    arrs = []
    for a in _as_array_list(tup, "column_stack"):
        a = _arr(a)
        arrs.append(lax.reshape(a, (_shape(a)[0], 1)) if a.ndim == 1 else atleast_2d(a))
    return concatenate(arrs, 1)


def _slice_axis(x, axis, start, stop, step=1):
    s = _shape(x)
    starts = [0] * len(s)
    limits = list(s)
    strides = [1] * len(s)
    starts[axis], limits[axis], strides[axis] = start, stop, step
    if start == 0 and stop == s[axis] and step == 1:
        return x
    return lax.slice(x, starts, limits, strides if step != 1 else None)


def _split(name, ary, indices_or_sections, axis, even):
    _check_arraylike(name, ary)
    ary = _arr(ary)
    axis = _canonicalize_axis(axis, ary.ndim)
    n = _shape(ary)[axis]
    if np.ndim(indices_or_sections) == 0 and not isinstance(indices_or_sections, (list, tuple)):
        sections = _static_int(indices_or_sections, "indices_or_sections")
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        if even and n % sections:
            raise ValueError(f"array split does not result in an equal division: rest is "
                             f"{n % sections}")
        q, r = builtins.divmod(n, sections)
        bounds = [0]
        for i in range(sections):
            bounds.append(bounds[-1] + q + (1 if i < r else 0))
    else:
        idx = [_static_int(i, "indices_or_sections") for i in
               np.asarray(core.concrete_or_error(indices_or_sections,
                                                 f"{name} indices must be static")).ravel()]
        bounds = [0] + [_min(_max(i if i >= 0 else i + n, 0), n) for i in idx] + [n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        out.append(_slice_axis(ary, axis, lo, _max(lo, hi)))
    return out


def split(ary, indices_or_sections, axis=0):
    """Split into equal sections or at the given indices."""
    return _split("split", ary, indices_or_sections, axis, True)


def array_split(ary, indices_or_sections, axis=0):
    """Split into sections whose sizes differ by at most one."""
    return _split("array_split", ary, indices_or_sections, axis, False)


def hsplit(ary, indices_or_sections):
    """Split along the second axis (the first for 1-D arrays)."""
    return split(ary, indices_or_sections, 0 if ndim(ary) == 1 else 1)


def vsplit(ary, indices_or_sections):
    """Split along the first axis."""
    return split(ary, indices_or_sections, 0)


def dsplit(ary, indices_or_sections):
    """Split along the third axis."""
    return split(ary, indices_or_sections, 2)


def tile(A, reps):
    """``A`` repeated ``reps`` times along each axis."""
    _check_arraylike("tile", A)
    a = _arr(A)
    reps = (reps,) if np.ndim(reps) == 0 else tuple(reps)
    reps = tuple(_static_int(r, "reps") for r in reps)
    s = _shape(a)
    nd = _max(len(s), len(reps))
    s = (1,) * (nd - len(s)) + s
    reps = (1,) * (nd - len(reps)) + reps
    a = lax.reshape(a, s)
    interleaved = tuple(v for pair in zip(reps, s) for v in pair)
    b = lax.broadcast_in_dim(a, interleaved, tuple(range(1, 2 * nd, 2)))
    return lax.reshape(b, tuple(r * d for r, d in zip(reps, s)))


def repeat(a, repeats, axis=None, *, total_repeat_length=None):
    """Repeat each element ``repeats`` times (a scalar or one count per element; traced counts
    need a static ``total_repeat_length``)."""
    _check_arraylike("repeat", a)
    a = _arr(a)
    if axis is None:
        a = ravel(a)
        axis = 0
    axis = _canonicalize_axis(axis, a.ndim)
    s = _shape(a)
    n = s[axis]
    if isinstance(repeats, Tracer) and repeats.concrete_value() is None:
        if total_repeat_length is None:
            raise core.ConcretizationTypeError(
                repeats, "jnp.repeat with a traced repeats argument requires the static "
                "total_repeat_length argument.")
        return _repeat_traced(a, repeats, axis, total_repeat_length)
    reps = np.asarray(core.concrete_or_error(repeats, "repeats must be static"))
    if reps.ndim == 0 or reps.size == 1:
        r = int(reps.reshape(()))
        if r < 0:
            raise ValueError("repeats may not contain negative values.")
        out = lax.broadcast_in_dim(a, s[:axis + 1] + (r,) + s[axis + 1:],
                                   tuple(i if i <= axis else i + 1 for i in range(len(s))))
        out = lax.reshape(out, s[:axis] + (n * r,) + s[axis + 1:])
    else:
        if reps.shape != (n,):
            raise ValueError(f"repeats has shape {reps.shape} but the axis has length {n}")
        if (reps < 0).any():
            raise ValueError("repeats may not contain negative values.")
        idx = np.repeat(np.arange(n), reps)
        out = _take_static(a, idx, axis)
    if total_repeat_length is not None:
        out = _fit_length(out, axis, total_repeat_length)
    return out


def _fit_length(x, axis, length):
    n = _shape(x)[axis]
    if n >= length:
        return _slice_axis(x, axis, 0, length)
    last = _slice_axis(x, axis, n - 1, n) if n else lax.full(
        _shape(x)[:axis] + (1,) + _shape(x)[axis + 1:], 0, _dtype(x))
    reps = [1] * x.ndim
    reps[axis] = length - n
    return lax.concatenate([x, tile(last, reps)], axis)


def _repeat_traced(a, repeats, axis, total):
    """Repeat with traced counts: output slot j takes element ``#{i: cumsum(r)[i] <= j}``."""
    n = _shape(a)[axis]
    reps = _convert(broadcast_to(repeats, (n,)), dtypes.int32)
    ends = lax.cumsum(reps, 0)
    slots = lax.broadcasted_iota(dtypes.int32, (n, total), 1)
    past = lax.le(lax.broadcast_in_dim(ends, (n, total), (0,)), slots)
    idx = lax.reduce_sum(_convert(past, dtypes.int32), (0,))
    idx = lax.min(idx, lax.full((), _max(n - 1, 0), dtypes.int32))
    return take(a, idx, axis=axis)


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


def flip(m, axis=None):
    """``m`` reversed along ``axis`` (all axes by default)."""
    _check_arraylike("flip", m)
    m = _arr(m)
    axes = tuple(range(m.ndim)) if axis is None else _canonicalize_axes(axis, m.ndim)
    return lax.rev(m, axes) if axes else m


def fliplr(m):
    """Reverse the second axis."""
    m = _arr(m)
    if m.ndim < 2:
        raise ValueError("fliplr requires an array of at least 2 dimensions")
    return flip(m, 1)


def flipud(m):
    """Reverse the first axis."""
    m = _arr(m)
    if m.ndim < 1:
        raise ValueError("flipud requires an array of at least 1 dimension")
    return flip(m, 0)


def roll(a, shift, axis=None):
    """Shift elements cyclically along ``axis`` (the flattened array by default)."""
    _check_arraylike("roll", a)
    a = _arr(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), _shape(a))
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    shifts = (shift,) if np.ndim(shift) == 0 else tuple(shift) if not hasattr(shift, "aval") \
        else [shift[i] for i in range(_shape(shift)[0])]
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(axes) == 1 and len(shifts) > 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        raise ValueError("shift and axis must have the same length")
    for sh, ax in zip(shifts, axes):
        ax = _canonicalize_axis(ax, a.ndim)
        n = _shape(a)[ax]
        if n == 0:
            continue
        if isinstance(sh, Tracer) and sh.concrete_value() is None:
            sh = _convert(sh, dtypes.int32)
            nn = lax.full((), n, dtypes.int32)
            start = lax.rem(lax.sub(nn, lax.rem(lax.add(lax.rem(sh, nn), nn), nn)), nn)
            doubled = lax.concatenate([a, a], ax)
            starts = [lax.full((), 0, dtypes.int32)] * a.ndim
            starts[ax] = start
            a = lax.dynamic_slice(doubled, starts, _shape(a))
        else:
            k = _static_int(sh, "shift") % n
            if k:
                a = lax.concatenate([_slice_axis(a, ax, n - k, n), _slice_axis(a, ax, 0, n - k)],
                                    ax)
    return a


def rot90(m, k=1, axes=(0, 1)):
    """Rotate by 90 degrees ``k`` times in the plane of ``axes``."""
    m = _arr(m)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    ax0, ax1 = (_canonicalize_axis(a, m.ndim) for a in axes)
    if ax0 == ax1:
        raise ValueError("Axes must be different.")
    k = _static_int(k, "k") % 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, ax0), ax1)
    perm = list(range(m.ndim))
    perm[ax0], perm[ax1] = perm[ax1], perm[ax0]
    if k == 1:
        return transpose(flip(m, ax1), perm)
    return flip(transpose(m, perm), ax1)


def transpose(a, axes=None):
    """Permute the axes (reverse them by default)."""
    _check_arraylike("transpose", a)
    a = _arr(a)
    if axes is None:
        axes = tuple(range(a.ndim))[::-1]
    else:  # a wrong count or a repeated axis: lax.transpose's TypeError, as in JAX
        axes = tuple(_canonicalize_axis(i, a.ndim) for i in axes)
    return lax.transpose(a, axes)


permute_dims = transpose


def matrix_transpose(x, /):
    """Swap the last two axes."""
    x = _arr(x)
    if x.ndim < 2:
        raise ValueError(f"x must be at least two-dimensional for matrix_transpose; got "
                         f"ndim={x.ndim}")
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return lax.transpose(x, tuple(perm))


def swapaxes(a, axis1, axis2):
    """Interchange two axes."""
    a = _arr(a)
    perm = list(range(a.ndim))
    i, j = _canonicalize_axis(axis1, a.ndim), _canonicalize_axis(axis2, a.ndim)
    perm[i], perm[j] = perm[j], perm[i]
    return lax.transpose(a, tuple(perm))


def moveaxis(a, source, destination):
    """Move axes ``source`` to positions ``destination`` (the others keep their order)."""
    a = _arr(a)
    src = _canonicalize_axes(source, a.ndim, "source")
    dst = _canonicalize_axes(destination, a.ndim, "destination")
    if len(src) != len(dst):
        raise ValueError(f"Inconsistent number of elements: {len(src)} vs {len(dst)}")
    perm = [i for i in range(a.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        perm.insert(d, s)
    return lax.transpose(a, tuple(perm))


def rollaxis(a, axis, start=0):
    """Move ``axis`` to just before ``start``."""
    a = _arr(a)
    axis = _canonicalize_axis(axis, a.ndim)
    start = _canonicalize_axis(start, a.ndim + 1)
    if start > axis:
        start -= 1
    return moveaxis(a, axis, start)


def _pad_widths(pad_width, nd):
    pw = np.asarray(core.concrete_or_error(pad_width, "pad_width must be static"))
    if pw.dtype.kind not in "iu":
        if pw.size and not np.all(pw == np.round(pw)):
            raise TypeError(f"pad_width must be of integral type, got {pad_width}")
        pw = pw.astype(np.int64)
    try:
        pw = np.broadcast_to(pw, (nd, 2))
    except ValueError:
        raise ValueError(f"jnp.pad: pad_width with nd={nd} has unsupported shape "
                         f"{np.shape(pad_width)}. Valid shapes are ({nd}, 2), (1, 2), (2,), "
                         f"(1,), or ().") from None
    if (pw < 0).any():
        raise ValueError("index can't contain negative values")
    return [(int(lo), int(hi)) for lo, hi in pw]


def _per_axis_values(values, nd, d, name):
    """Broadcast NumPy's per-axis (before, after) scalars; arrays may be traced."""
    if hasattr(values, "aval") and isinstance(values, Tracer):
        v = _convert(values, d)
        if v.ndim == 0:
            return [(v, v)] * nd
        v = broadcast_to(v, (nd, 2))
        return [(v[i, 0], v[i, 1]) for i in range(nd)]
    arr_ = np.asarray(values if not hasattr(values, "aval") else np.asarray(values))
    try:
        arr_ = np.broadcast_to(arr_, (nd, 2))
    except ValueError:
        raise ValueError(f"jnp.pad: {name} has unsupported shape {np.shape(values)}") from None
    return [(lax.convert_element_type(arr_[i, 0], d), lax.convert_element_type(arr_[i, 1], d))
            for i in range(nd)]


def pad(array, pad_width, mode="constant", **kwargs):
    """Pad with NumPy's modes: constant, edge, reflect, symmetric, wrap, maximum, minimum,
    mean, linear_ramp, empty."""
    _check_arraylike("pad", array)
    x = _arr(array)
    nd = x.ndim
    widths = _pad_widths(pad_width, nd)
    d = _dtype(x)
    if callable(mode):
        raise NotImplementedError("jnp.pad with a callable mode is not supported")
    allowed = {"constant": {"constant_values"}, "empty": set(), "edge": set(),
               "wrap": set(), "reflect": {"reflect_type"}, "symmetric": {"reflect_type"},
               "maximum": {"stat_length"}, "minimum": {"stat_length"},
               "mean": {"stat_length"}, "linear_ramp": {"end_values"}}
    if mode not in allowed:
        raise ValueError(f"Unimplemented padding mode '{mode}' for np.pad.")
    unexpected = set(kwargs) - allowed[mode]
    if unexpected:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': {unexpected}")
    if mode in ("constant", "empty"):
        cv = kwargs.get("constant_values", 0) if mode == "constant" else 0
        if np.ndim(cv) == 0 and not (isinstance(cv, Tracer) and cv.ndim):
            return lax.pad(x, _convert(_arr(cv), d), [(lo, hi, 0) for lo, hi in widths])
        values = _per_axis_values(cv, nd, d, "constant_values")
        for ax, ((lo, hi), (vlo, vhi)) in enumerate(zip(widths, values)):
            cfg = [(0, 0, 0)] * nd
            if lo:
                cfg[ax] = (lo, 0, 0)
                x = lax.pad(x, vlo, cfg)
            if hi:
                cfg[ax] = (0, hi, 0)
                x = lax.pad(x, vhi, cfg)
        return x
    if mode in ("reflect", "symmetric"):
        if kwargs.get("reflect_type", "even") != "even":
            raise NotImplementedError("jnp.pad: only reflect_type='even' is supported")
    for ax, (lo, hi) in enumerate(widths):
        if not lo and not hi:
            continue
        n = _shape(x)[ax]
        if mode in ("edge", "reflect", "symmetric", "wrap"):
            if n == 0:
                raise ValueError(f"can't extend empty axis {ax} using modes other than "
                                 f"'constant' or 'empty'")
            idx = np.pad(np.arange(n), (lo, hi), mode=mode)
            x = _take_static(x, idx, ax)
        elif mode in ("maximum", "minimum", "mean"):
            x = _pad_stat(x, ax, lo, hi, mode, kwargs.get("stat_length"), nd)
        else:
            x = _pad_linear_ramp(x, ax, lo, hi, kwargs.get("end_values", 0), nd)
    return x


def _pad_stat(x, ax, lo, hi, mode, stat_length, nd):
    from remat.numpy import reductions

    n = _shape(x)[ax]
    if stat_length is None:
        lengths = (n, n)
    else:
        sl = np.broadcast_to(np.asarray(stat_length), (nd, 2))
        lengths = (_min(int(sl[ax, 0]), n), _min(int(sl[ax, 1]), n))
    fn = {"maximum": reductions.max, "minimum": reductions.min, "mean": reductions.mean}[mode]
    parts = []
    if lo:
        stat = fn(_slice_axis(x, ax, 0, lengths[0]), axis=ax, keepdims=True)
        if mode == "mean" and dtypes.is_integer(_dtype(x)):
            stat = round(stat)
        stat = _convert(stat, _dtype(x))
        parts.append(lax.broadcast_in_dim(stat, _with(_shape(x), ax, lo),
                                          tuple(range(nd))))
    parts.append(x)
    if hi:
        stat = fn(_slice_axis(x, ax, n - lengths[1], n), axis=ax, keepdims=True)
        if mode == "mean" and dtypes.is_integer(_dtype(x)):
            stat = round(stat)
        stat = _convert(stat, _dtype(x))
        parts.append(lax.broadcast_in_dim(stat, _with(_shape(x), ax, hi),
                                          tuple(range(nd))))
    return lax.concatenate(parts, ax)


def _with(shape_, ax, n):
    return shape_[:ax] + (n,) + shape_[ax + 1:]


def _pad_linear_ramp(x, ax, lo, hi, end_values, nd):
    d = _dtype(x)
    cd = _to_inexact_dtype(d)
    ev = np.broadcast_to(np.asarray(end_values), (nd, 2))
    n = _shape(x)[ax]
    parts = []
    xf = _convert(x, cd)
    if lo:
        edge = _slice_axis(xf, ax, 0, 1)
        parts.append(_ramp(edge, float(ev[ax, 0]), lo, ax))
    parts.append(xf)
    if hi:
        edge = _slice_axis(xf, ax, n - 1, n)
        parts.append(lax.rev(_ramp(edge, float(ev[ax, 1]), hi, ax), (ax,)))
    if dtypes.is_integer(d):  # NumPy builds integer ramps with an integer linspace: floor
        parts = [lax.floor(p) if i != (1 if lo else 0) else p for i, p in enumerate(parts)]
    return _convert(lax.concatenate(parts, ax), d)


def _ramp(edge, end, count, ax):
    """``count`` values going linearly from ``end`` towards ``edge`` (excluded): NumPy's
    ``linspace(end, edge, count, endpoint=False)`` along ``ax``."""
    s = _with(_shape(edge), ax, count)
    d = _dtype(edge)
    edge_b = lax.broadcast_in_dim(edge, s, tuple(range(len(s))))
    end_ = lax.full((), end, d)
    step = lax.div(lax.sub(edge_b, end_), lax.full((), count, d))
    return lax.add(end_, lax.mul(lax.broadcasted_iota(d, s, ax), step))


def nonzero(a, *, size=None, fill_value=None):
    """Indices of the nonzero elements, one array per axis. Under transformations the
    number of results must be given as the static ``size`` (padded with ``fill_value``)."""
    _check_arraylike("nonzero", a)
    a = _arr(a)
    if a.ndim == 0:
        raise ValueError("Calling nonzero on 0d arrays is not allowed. Use "
                         "jnp.atleast_1d(scalar).nonzero() instead.")
    idx_dtype = dtypes.default_int_dtype()
    concrete = None
    if isinstance(a, Tracer):
        concrete = a.concrete_value()
    else:
        concrete = np.asarray(a)
    if concrete is not None:
        found = np.nonzero(np.asarray(concrete))
        if size is None:
            return tuple(from_numpy(f.astype(idx_dtype), idx_dtype) for f in found)
        size = _static_int(size, "size")
        out = []
        for i, f in enumerate(found):
            fill = 0 if fill_value is None else (fill_value[i] if np.ndim(fill_value) else
                                                 fill_value)
            f = f[:size]
            padded = np.concatenate([f, np.full(size - len(f), np.asarray(fill))])
            out.append(from_numpy(padded.astype(idx_dtype), idx_dtype))
        return tuple(out)
    if size is None:
        raise core.ConcretizationTypeError(
            a, "The size argument of jnp.nonzero must be statically specified to use "
               "jnp.nonzero within JAX transformations.")
    return _nonzero_traced(a, _static_int(size, "size"), fill_value, idx_dtype)


def _nonzero_traced(a, size, fill_value, idx_dtype):
    """Traceable nonzero: slot j holds the flat index i whose running count of nonzeros
    (exclusive) is j."""
    flat = ravel(_to_bool(a))
    n = _shape(flat)[0]
    mask = _convert(flat, idx_dtype)
    before = lax.sub(lax.cumsum(mask, 0), mask)
    slots = lax.broadcasted_iota(idx_dtype, (n, size), 1)
    hit = lax.bitwise_and(lax.eq(lax.broadcast_in_dim(before, (n, size), (0,)), slots),
                          lax.broadcast_in_dim(flat, (n, size), (0,)))
    iota_n = lax.broadcasted_iota(idx_dtype, (n, size), 0)
    flat_idx = lax.reduce_sum(lax.select(hit, iota_n, lax.full_like(iota_n, 0)), (0,))
    found = lax.reduce_or(hit, (0,))
    out = []
    rest = flat_idx
    s = _shape(a)
    strides = [math.prod(s[i + 1:]) for i in range(len(s))]
    for i, stride in enumerate(strides):
        coord = lax.div(rest, lax.full((), stride, idx_dtype))
        rest = lax.rem(rest, lax.full((), stride, idx_dtype))
        fill = 0 if fill_value is None else (fill_value[i] if np.ndim(fill_value) else
                                             fill_value)
        out.append(lax.select(found, coord, lax.full_like(coord, fill)))
    return tuple(out)


def flatnonzero(a, *, size=None, fill_value=None):
    """Indices of the nonzero elements of the flattened array."""
    return nonzero(ravel(a), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size=None, fill_value=None):
    """Indices of the nonzero elements as rows of an ``(N, ndim)`` array."""
    a = atleast_1d(_arr(a))
    return stack(nonzero(a, size=size, fill_value=fill_value), axis=1)


# --- more array manipulation ----------------------------------------------------------------


def copy(a, order=None):
    """A copy of ``a`` (a new buffer)."""
    return lax.copy(_arr(a))


def append(arr, values, axis=None):
    """``values`` appended to ``arr`` (both flattened when ``axis`` is None)."""
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], 0)
    return concatenate([arr, values], axis)


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """The ``n``-th discrete difference along ``axis``."""
    _check_arraylike("diff", a)
    a = _arr(a)
    n = _static_int(n, "n")
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n}")
    axis = _canonicalize_axis(axis, a.ndim)

    def edge(v):
        v = _arr(v)
        return broadcast_to(v, _with(_shape(a), axis, 1)) if v.ndim == 0 else v

    parts = ([edge(prepend)] if prepend is not None else []) + [a] + \
        ([edge(append)] if append is not None else [])
    if len(parts) > 1:
        a = concatenate(parts, axis)
    if a.ndim == 0 or n == 0:
        return a
    op = lax.bitwise_xor if _dtype(a) == dtypes.bool_ else lax.sub
    for _ in range(n):
        m = _shape(a)[axis]
        a = op(_slice_axis(a, axis, 1, _max(m, 1)), _slice_axis(a, axis, 0, _max(m - 1, 0)))
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    """Differences of consecutive elements of the flattened array."""
    out = diff(ravel(ary))
    parts = [ravel(asarray(to_begin))] if to_begin is not None else []
    parts.append(out)
    if to_end is not None:
        parts.append(ravel(asarray(to_end)))
    return concatenate(parts, 0) if len(parts) > 1 else out


def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple."""
    x = _arr(x)
    axis = _canonicalize_axis(axis, x.ndim)
    return tuple(lax.squeeze(_slice_axis(x, axis, i, i + 1), (axis,))
                 for i in range(_shape(x)[axis]))


def _static_index_arrays(arrays):
    idx_dtype = dtypes.default_int_dtype()
    return tuple(from_numpy(np.asarray(a).astype(idx_dtype), idx_dtype) for a in arrays)


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


def unravel_index(indices, shape):
    """Coordinates of flat ``indices`` in an array of ``shape`` (negative indices count
    from the end; out-of-range ones are clipped)."""
    shape = tuple(_static_int(d, "shape") for d in shape)
    idx = _arr(indices)
    if not dtypes.is_integer(_dtype(idx)):
        raise TypeError("only int indices permitted")
    size_ = math.prod(shape)
    idx = _normalize_index(idx, size_)
    idx = lax.clamp(_const(idx, 0), idx, _const(idx, _max(size_ - 1, 0)))
    out = []
    for stride in [math.prod(shape[i + 1:]) for i in range(len(shape))]:
        out.append(lax.div(idx, _const(idx, stride)))
        idx = lax.rem(idx, _const(idx, stride))
    return tuple(out)


def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    """Flat indices of the coordinates ``multi_index`` in an array of shape ``dims``
    (``mode='clip'`` or ``'wrap'`` for out-of-range coordinates)."""
    dims = tuple(_static_int(d, "dims") for d in dims)
    if len(multi_index) != len(dims):
        raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)}")
    if order not in ("C", "F"):
        raise ValueError("only 'C' or 'F' order is permitted")
    idx = [_arr(i) for i in multi_index]
    idx = list(broadcast_arrays(*idx))
    idx = _promote_dtypes(*idx)
    out = None
    strides = [math.prod(dims[i + 1:]) for i in range(len(dims))] if order == "C" else \
        [math.prod(dims[:i]) for i in range(len(dims))]
    for i, n, stride in zip(idx, dims, strides):
        if mode == "wrap":
            i = remainder(i, n)
        elif mode == "clip":
            i = clip(i, 0, n - 1)
        elif mode == "raise":
            concrete = i.concrete_value() if isinstance(i, Tracer) else np.asarray(i)
            if concrete is None:
                raise core.ConcretizationTypeError(
                    i, "The error occurred because ravel_multi_index was called with "
                       "mode='raise' on traced indices; use mode='clip' or 'wrap'.")
            if (np.asarray(concrete) < 0).any() or (np.asarray(concrete) >= n).any():
                raise ValueError("invalid entry in coordinates array")
        else:
            raise ValueError(f"invalid mode={mode!r}. Expected 'raise', 'wrap', or 'clip'")
        term = multiply(i, stride)
        out = term if out is None else add(out, term)
    return out


def isin(element, test_elements, assume_unique=False, invert=False):
    """Whether each element of ``element`` is in ``test_elements``."""
    e, t = _arr(element), ravel(test_elements)
    e, t = _promote_dtypes(e, t)
    n = _shape(t)[0]
    es = _shape(e)
    eb = lax.broadcast_in_dim(e, es + (n,), tuple(range(len(es))))
    tb = lax.broadcast_in_dim(t, es + (n,), (len(es),))
    found = lax.reduce_or(lax.eq(eb, tb), (len(es),))
    return lax.bitwise_not(found) if invert else found


def iscomplexobj(x):
    """Whether ``x`` has a complex dtype."""
    return _dtype(_arr(x)).kind == "c"


def isrealobj(x):
    """Whether ``x`` has a non-complex dtype."""
    return not iscomplexobj(x)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """Numbers spaced evenly on a log scale from ``start`` to ``stop``."""
    d = _canon(dtype) if dtype is not None else \
        result_type(start, stop, dtypes.default_float_dtype())
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


def matvec(x1, x2, /):
    """Matrix-vector products over the leading (batch) axes."""
    return matmul(x1, expand_dims(x2, -1))[..., 0]


def vecmat(x1, x2, /):
    """Vector-matrix products over the leading (batch) axes."""
    return matmul(expand_dims(conjugate(x1), -2), x2)[..., 0, :]


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The integral of ``y`` by the trapezoidal rule (samples at ``x`` or spacing ``dx``)."""
    y = _arr(y)
    axis = _canonicalize_axis(axis, y.ndim)
    y = moveaxis(y, axis, -1)
    if x is None:
        dx_ = _arr(dx)
    else:
        x = _arr(x)
        dx_ = diff(x if x.ndim == 1 else moveaxis(x, axis, -1), axis=-1)
    mid = multiply(add(y[..., 1:], y[..., :-1]), 0.5)
    from remat.numpy import reductions

    return reductions.sum(multiply(dx_, mid), axis=-1)


class _IndexExpression:
    """``s_[...]`` / ``index_exp[...]``: the index itself (a tuple for ``index_exp``)."""

    def __init__(self, maketuple):
        self.maketuple = maketuple

    def __getitem__(self, item):
        if self.maketuple and not isinstance(item, tuple):
            return (item,)
        return item


s_ = _IndexExpression(False)
index_exp = _IndexExpression(True)


def ix_(*args):
    """Open-mesh index arrays from 1-D sequences, for outer indexing."""
    out = []
    n = len(args)
    for i, a in enumerate(args):
        a = _arr(a)
        if a.ndim != 1:
            raise ValueError(f"Cross index must be 1 dimensional, got {a.ndim}")
        if _dtype(a) == dtypes.bool_:
            raise NotImplementedError("Boolean arguments to jnp.ix_ are not supported")
        s = [1] * n
        s[i] = _shape(a)[0]
        out.append(lax.reshape(a, tuple(s)))
    return tuple(out)


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """``func1d`` applied to the 1-D slices of ``arr`` along ``axis`` (with ``vmap``)."""
    from remat.api import vmap

    arr = _arr(arr)
    axis = _canonicalize_axis(axis, arr.ndim)

    def fn(x):
        return func1d(x, *args, **kwargs)

    # the axes after ``axis`` (outermost: the last) map to trailing output axes; the axes
    # before it map to leading ones
    for i in range(1, arr.ndim - axis):
        fn = vmap(fn, in_axes=i, out_axes=-1)
    for _ in range(axis):
        fn = vmap(fn, in_axes=0, out_axes=0)
    return fn(arr)


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """``pyfunc`` mapped over the elements of its array arguments (broadcast together), by
    ``vmap``; no ``signature`` support (core dimensions) beyond scalars."""
    if signature is not None:
        raise NotImplementedError("jnp.vectorize with a signature is not supported")
    from remat.api import vmap

    def wrapped(*args, **kwargs):
        positions = [i for i in range(len(args)) if i not in excluded]
        arrays = broadcast_arrays(*[args[i] for i in positions])
        nd = len(_shape(arrays[0])) if arrays else 0

        def call(*xs):
            full = list(args)
            for i, x in zip(positions, xs):
                full[i] = x
            return pyfunc(*full, **kwargs)

        fn = call
        for _ in range(nd):
            fn = vmap(fn)
        return fn(*arrays)

    return wrapped


# --- sorting ---------------------------------------------------------------------------------


def sort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """``a`` sorted along ``axis`` (the flattened array for ``axis=None``); NaNs sort last."""
    _check_arraylike("sort", a)
    a = _arr(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _canonicalize_axis(axis, a.ndim)
    if order is not None:
        raise ValueError("The 'order' argument to sort is not supported.")
    out = lax.sort(a, dimension=axis, is_stable=stable)
    return lax.rev(out, (axis,)) if descending else out


def argsort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """Indices that sort ``a`` along ``axis`` (stably: ties keep their order)."""
    _check_arraylike("argsort", a)
    a = _arr(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _canonicalize_axis(axis, a.ndim)
    if order is not None:
        raise ValueError("The 'order' argument to argsort is not supported.")
    idx_dtype = dtypes.default_int_dtype()
    n = _shape(a)[axis]
    iota = lax.broadcasted_iota(idx_dtype, _shape(a), axis)
    if descending:
        # a stable ascending sort of the reversed array, read backwards, keeps ties in order
        _, idx = lax.sort((lax.rev(a, (axis,)), iota), dimension=axis, is_stable=True,
                          num_keys=1)
        return lax.rev(lax.sub(lax.full((), n - 1, idx_dtype), idx), (axis,))
    _, idx = lax.sort((a, iota), dimension=axis, is_stable=True, num_keys=1)
    return idx


def searchsorted(a, v, side="left", sorter=None, *, method="compare_all"):
    """Insertion points of ``v`` into the sorted 1-D ``a`` (counting the elements below
    ``v``, or at most ``v`` for ``side='right'``)."""
    _check_arraylike("searchsorted", a, v)
    a, v = _arr(a), _arr(v)
    if a.ndim != 1:
        raise ValueError("a should be 1-dimensional")
    if side not in ("left", "right"):
        raise ValueError(f"{side!r} is an invalid value for keyword 'side'. Expected one of "
                         f"['left', 'right']")
    if sorter is not None:
        a = take(a, sorter)
    a, v = _promote_dtypes(a, v)
    n = _shape(a)[0]
    vs = _shape(v)
    ab = lax.broadcast_in_dim(a, vs + (n,), (len(vs),))
    vb = lax.broadcast_in_dim(v, vs + (n,), tuple(range(len(vs))))
    below = lax.lt(ab, vb) if side == "left" else lax.le(ab, vb)
    idx_dtype = dtypes.default_int_dtype()
    return lax.reduce_sum(_convert(below, idx_dtype), (len(vs),))


# --- contractions ----------------------------------------------------------------------------


def _dot_general(a, b, dims, precision=None, preferred_element_type=None):
    """dot_general on promoted operands, with JAX's result dtype and weak type."""
    d, weak = _result_of(a, b)
    out_dtype = d if preferred_element_type is None else _canon(preferred_element_type)
    if d == dtypes.bool_:
        a, b = _convert(a, dtypes.int32), _convert(b, dtypes.int32)
        out = lax.dot_general(a, b, dims, precision=precision)
        return _convert(lax.ne(out, lax.full((), 0, dtypes.int32)), out_dtype, weak)
    a, b = _convert(a, d), _convert(b, d)
    out = lax.dot_general(a, b, dims, precision=precision,
                          preferred_element_type=preferred_element_type)
    return _convert(out, out_dtype, weak and preferred_element_type is None)


def dot(a, b, *, precision=None, preferred_element_type=None):
    """NumPy's ``dot``: products of scalars, inner products of vectors, and the contraction
    of ``a``'s last axis with ``b``'s second-to-last (or only) axis."""
    _check_arraylike("dot", a, b)
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        out = multiply(a, b)
        return out if preferred_element_type is None else _convert(
            out, _canon(preferred_element_type))
    contract_b = 0 if b.ndim == 1 else b.ndim - 2
    return _dot_general(a, b, (((a.ndim - 1,), (contract_b,)), ((), ())), precision,
                        preferred_element_type)


def matmul(a, b, *, precision=None, preferred_element_type=None):
    """``a @ b`` with NumPy's rules: 1-D operands are promoted to matrices (and the added
    axis removed), leading axes broadcast as batch axes."""
    _check_arraylike("matmul", a, b)
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: inputs must have at least one dimension, got shapes "
                         f"{_shape(a)} and {_shape(b)}")
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    sa, sb = _shape(a), _shape(b)
    if b.ndim <= 2:
        # no batch axes on b: dot_general's (a's free axes, b's free axes) is matmul's order
        return _dot_general(a, b, (((a.ndim - 1,), (0,)), ((), ())), precision,
                            preferred_element_type)
    if a.ndim == b.ndim and sa[:-2] == sb[:-2]:
        batch = tuple(range(a.ndim - 2))
        return _dot_general(a, b, (((a.ndim - 1,), (b.ndim - 2,)), (batch, batch)), precision,
                            preferred_element_type)
    a_batch = sa[:-2] if not a_vec else ()
    b_batch = sb[:-2] if not b_vec else ()
    nb = _max(len(a_batch), len(b_batch))
    a_batch = (None,) * (nb - len(a_batch)) + a_batch
    b_batch = (None,) * (nb - len(b_batch)) + b_batch
    # Classify each output batch axis: shared (a dot_general batch dim), or belonging to one
    # operand only (a free dim of that operand); size-1 axes facing a larger one are dropped.
    a_drop, b_drop, batch_pairs = [], [], []
    a_free_out, b_free_out, shared_out = [], [], []
    a_pos = b_pos = 0
    for i, (da, db) in enumerate(zip(a_batch, b_batch)):
        if da is None:
            b_free_out.append((i, b_pos))
            b_pos += 1
        elif db is None:
            a_free_out.append((i, a_pos))
            a_pos += 1
        elif da == db:
            batch_pairs.append((a_pos, b_pos))
            shared_out.append(i)
            a_pos += 1
            b_pos += 1
        elif da == 1:
            a_drop.append(a_pos)
            b_free_out.append((i, b_pos))
            a_pos += 1
            b_pos += 1
        elif db == 1:
            b_drop.append(b_pos)
            a_free_out.append((i, a_pos))
            a_pos += 1
            b_pos += 1
        else:
            raise ValueError(f"Incompatible shapes for matmul arguments: {sa} and {sb}")
    a = lax.squeeze(a, tuple(a_drop)) if a_drop else a
    b = lax.squeeze(b, tuple(b_drop)) if b_drop else b

    def renumber(pos, dropped):
        return pos - _sum(1 for d in dropped if d < pos)

    batch_a = tuple(renumber(p, a_drop) for p, _ in batch_pairs)
    batch_b = tuple(renumber(p, b_drop) for _, p in batch_pairs)
    ca = a.ndim - 1
    cb = b.ndim - 1 if b_vec else b.ndim - 2
    out = _dot_general(a, b, (((ca,), (cb,)), (batch_a, batch_b)), precision,
                       preferred_element_type)
    # dot_general's output: shared batch axes, a's free axes in order, b's free axes in order.
    a_free_positions = sorted(a_free_out, key=lambda t: renumber(t[1], a_drop))
    b_free_positions = sorted(b_free_out, key=lambda t: renumber(t[1], b_drop))
    order = list(shared_out) + [i for i, _ in a_free_positions]
    if not a_vec:
        order.append(nb)  # a's row axis
    order += [i for i, _ in b_free_positions]
    if not b_vec:
        order.append(nb + (0 if a_vec else 1))  # b's column axis
    perm = tuple(sorted(range(len(order)), key=order.__getitem__))
    return lax.transpose(out, perm)


def vdot(a, b, *, precision=None, preferred_element_type=None):
    """Dot product of the flattened arrays (conjugating ``a``)."""
    _check_arraylike("vdot", a, b)
    return dot(conjugate(ravel(a)), ravel(b), precision=precision,
               preferred_element_type=preferred_element_type)


def vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    """Dot products of vectors along ``axis`` (broadcasting the other axes)."""
    x1, x2 = broadcast_arrays(x1, x2)
    x1 = moveaxis(x1, axis, -1)
    x2 = moveaxis(x2, axis, -1)
    return matmul(expand_dims(conjugate(x1), -2), expand_dims(x2, -1),
                  precision=precision,
                  preferred_element_type=preferred_element_type)[..., 0, 0]


def inner(a, b, *, precision=None, preferred_element_type=None):
    """Contraction of the last axes of ``a`` and ``b``."""
    _check_arraylike("inner", a, b)
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    return _dot_general(a, b, (((a.ndim - 1,), (b.ndim - 1,)), ((), ())), precision,
                        preferred_element_type)


def outer(a, b, out=None):
    """``a[:, None] * b[None, :]`` of the flattened arrays."""
    _check_arraylike("outer", a, b)
    a, b = ravel(a), ravel(b)
    a, b = _promote_dtypes(a, b)
    n, m = _shape(a)[0], _shape(b)[0]
    return multiply(lax.broadcast_in_dim(a, (n, m), (0,)), lax.broadcast_in_dim(b, (n, m), (1,)))


def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None):
    """Contract ``a``'s and ``b``'s axes: the last/first ``axes`` of each, or the listed
    pairs."""
    _check_arraylike("tensordot", a, b)
    a, b = _arr(a), _arr(b)
    if not isinstance(axes, (list, tuple)):
        n = _static_int(axes, "axes")
        if n < 0 or n > _min(a.ndim, b.ndim):
            raise TypeError(f"Number of tensordot axes (axes {n}) exceeds input ranks "
                            f"({_shape(a)} and {_shape(b)})")
        ca = tuple(range(a.ndim - n, a.ndim))
        cb = tuple(range(n))
    else:
        if len(axes) != 2:
            raise TypeError(f"tensordot requires axes to be an int or a pair of sequences, "
                            f"got {axes}")
        ax_a, ax_b = axes
        ax_a = (ax_a,) if np.ndim(ax_a) == 0 else tuple(ax_a)
        ax_b = (ax_b,) if np.ndim(ax_b) == 0 else tuple(ax_b)
        if len(ax_a) != len(ax_b):
            raise TypeError(f"tensordot requires axes lists to have equal length, got {ax_a} "
                            f"and {ax_b}.")
        ca = _canonicalize_axes(ax_a, a.ndim)
        cb = _canonicalize_axes(ax_b, b.ndim)
    return _dot_general(a, b, ((ca, cb), ((), ())), precision, preferred_element_type)


def kron(a, b):
    """Kronecker product."""
    _check_arraylike("kron", a, b)
    a, b = _promote_dtypes(_arr(a), _arr(b))
    nd = _max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + _shape(a)
    sb = (1,) * (nd - b.ndim) + _shape(b)
    a, b = lax.reshape(a, sa), lax.reshape(b, sb)
    full_shape = tuple(v for pair in zip(sa, sb) for v in pair)
    ab = lax.broadcast_in_dim(a, full_shape, tuple(range(0, 2 * nd, 2)))
    bb = lax.broadcast_in_dim(b, full_shape, tuple(range(1, 2 * nd, 2)))
    prod = multiply(ab, bb)
    return lax.reshape(prod, tuple(x * y for x, y in zip(sa, sb)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cross product of 3-vectors (or 2-vectors, giving the z component)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _promote_dtypes(_arr(a), _arr(b))
    a = moveaxis(a, axisa, -1)
    b = moveaxis(b, axisb, -1)
    na, nb = _shape(a)[-1], _shape(b)[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("Dimension must be either 2 or 3 for cross product")
    ai = [_slice_axis(a, a.ndim - 1, i, i + 1)[..., 0] for i in range(na)]
    bi = [_slice_axis(b, b.ndim - 1, i, i + 1)[..., 0] for i in range(nb)]
    if na == 2 and nb == 2:
        return subtract(multiply(ai[0], bi[1]), multiply(ai[1], bi[0]))
    zero_a = zeros_like(ai[0])
    zero_b = zeros_like(bi[0])
    a0, a1, a2 = ai if na == 3 else (ai[0], ai[1], zero_a)
    b0, b1, b2 = bi if nb == 3 else (bi[0], bi[1], zero_b)
    c = stack([subtract(multiply(a1, b2), multiply(a2, b1)),
               subtract(multiply(a2, b0), multiply(a0, b2)),
               subtract(multiply(a0, b1), multiply(a1, b0))], -1)
    return moveaxis(c, -1, axisc)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal ``offset`` of the planes of ``axis1`` and ``axis2``, as a new last
    axis (a strided slice of the flattened plane, so it transposes into a pad)."""
    _check_arraylike("diagonal", a)
    a = _arr(a)
    if a.ndim < 2:
        raise ValueError("diagonal requires an array of at least two dimensions.")
    i, j = _canonicalize_axis(axis1, a.ndim), _canonicalize_axis(axis2, a.ndim)
    if i == j:
        raise ValueError("axis1 and axis2 must not be equal")
    offset = _static_int(offset, "offset")
    rest = [k for k in range(a.ndim) if k not in (i, j)]
    a = lax.transpose(a, tuple(rest) + (i, j))
    lead = _shape(a)[:-2]
    n_rows, n_cols = _shape(a)[-2:]
    if offset >= 0:
        count = _max(_min(n_rows, n_cols - offset), 0)
        start = offset
    else:
        count = _max(_min(n_rows + offset, n_cols), 0)
        start = -offset * n_cols
    flat = lax.reshape(a, lead + (n_rows * n_cols,))
    if count == 0:
        return _full(lead + (0,), 0, _dtype(a), _weak(a))
    limit = start + (count - 1) * (n_cols + 1) + 1
    nd = len(lead) + 1
    return lax.slice(flat, (0,) * (nd - 1) + (start,), lead + (limit,),
                     (1,) * (nd - 1) + (n_cols + 1,))


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """Sum along a diagonal."""
    from remat.numpy import reductions

    return reductions.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


# --- indexing helpers built on gather --------------------------------------------------------


def _normalize_index(idx, n):
    """Negative indices count from the end."""
    d = _dtype(idx)
    if d.kind == "u":
        return idx
    return lax.select(lax.lt(idx, lax.full((), 0, d)), lax.add(idx, lax.full((), n, d)), idx)


def _index_dtype(idx):
    d = _dtype(idx)
    if not dtypes.is_integer(d):
        raise TypeError(f"take: indices must be integers, got {d.name}")
    return d


def take(a, indices, axis=None, out=None, mode=None, unique_indices=False,
         indices_are_sorted=False, fill_value=None):
    """Elements of ``a`` at ``indices`` along ``axis`` (the flattened array by default).
    ``mode='fill'`` (the default) returns ``fill_value`` (NaN, or the dtype's minimum for
    integers) for out-of-bounds indices; ``'clip'`` clamps them; ``'wrap'`` wraps them."""
    _check_arraylike("take", a, indices)
    a = _arr(a)
    indices = _arr(indices)
    if axis is None:
        a = ravel(a)
        axis = 0
    axis = _canonicalize_axis(axis, a.ndim)
    _index_dtype(indices)
    n = _shape(a)[axis]
    mode = "fill" if mode is None else mode
    if mode == "raise":
        raise NotImplementedError("The 'raise' mode to jnp.take is not supported.")
    if mode == "wrap":
        nn = lax.full((), _max(n, 1), _dtype(indices))
        indices = lax.rem(lax.add(lax.rem(indices, nn), nn), nn)
        mode = "clip"
    elif mode not in ("fill", "clip"):
        raise ValueError(f"Invalid mode '{mode}' for np.take")
    else:
        indices = _normalize_index(indices, n)
    idx = lax.expand_dims(indices, (indices.ndim,))
    s = _shape(a)
    slice_sizes = tuple(1 if i == axis else d for i, d in enumerate(s))
    offset_dims = tuple(list(range(axis)) + list(range(axis + indices.ndim, a.ndim
                                                       + indices.ndim - 1)))
    dnums = lax.GatherDimensionNumbers(offset_dims=offset_dims, collapsed_slice_dims=(axis,),
                                       start_index_map=(axis,))
    gmode = lax.GatherScatterMode.FILL_OR_DROP if mode == "fill" else \
        lax.GatherScatterMode.CLIP
    return lax.gather(a, idx, dnums, slice_sizes, unique_indices=unique_indices,
                      indices_are_sorted=indices_are_sorted, mode=gmode,
                      fill_value=fill_value)


def take_along_axis(arr, indices, axis, mode=None, fill_value=None):
    """``arr`` indexed along ``axis`` by ``indices`` of the same rank (the other axes
    broadcast), as ``np.take_along_axis``."""
    _check_arraylike("take_along_axis", arr, indices)
    a = _arr(arr)
    indices = _arr(indices)
    if axis is None:
        a = ravel(a)
        indices = ravel(indices)
        axis = 0
    _index_dtype(indices)
    if a.ndim != indices.ndim:
        raise ValueError(f"indices and arr must have the same number of dimensions; "
                         f"{indices.ndim} vs. {a.ndim}")
    axis = _canonicalize_axis(axis, a.ndim)
    sa, si = _shape(a), _shape(indices)
    out_shape = []
    for i in range(a.ndim):
        if i == axis:
            out_shape.append(si[i])
        else:
            out_shape.append(broadcast_shapes((sa[i],), (si[i],))[0])
    out_shape = tuple(out_shape)
    a = broadcast_to(a, _with(out_shape, axis, sa[axis]))
    indices = broadcast_to(indices, out_shape)
    n = sa[axis]
    mode = "fill" if mode is None else mode
    idx_d = _dtype(indices)
    if mode == "wrap":
        nn = lax.full((), _max(n, 1), idx_d)
        indices = lax.rem(lax.add(lax.rem(indices, nn), nn), nn)
        mode = "clip"
    elif mode not in ("fill", "clip"):
        raise ValueError(f"Invalid mode '{mode}' for take_along_axis")
    else:
        indices = _normalize_index(indices, n)
    # Every other axis is a batch axis of the gather: operand_batching_dims pairs it with the
    # same axis of the indices.
    batch = tuple(i for i in range(a.ndim) if i != axis)
    idx = lax.expand_dims(indices, (indices.ndim,))
    dnums = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(axis,),
                                       start_index_map=(axis,), operand_batching_dims=batch,
                                       start_indices_batching_dims=batch)
    gmode = lax.GatherScatterMode.FILL_OR_DROP if mode == "fill" else \
        lax.GatherScatterMode.CLIP
    return lax.gather(a, idx, dnums, (1,) * a.ndim, mode=gmode, fill_value=fill_value)



def _public_names(namespace, exclude=()):
    """The names this module exports: its public functions, scalar types and constants (not
    the modules and helpers it imports)."""
    return sorted(n for n, v in namespace.items()
                  if not n.startswith("_") and n not in exclude
                  and not isinstance(v, type(math))
                  and getattr(v, "__module__", "remat.numpy") in (None, "remat.numpy", __name__,
                                                                  "numpy", "builtins"))


__all__ = _public_names(globals(), exclude=("Array", "Tracer", "from_numpy")) + ["ndarray"]
