"""The dtype side of ``remat.numpy``: scalar types (``jnp.float32`` ...), the abstract
NumPy type hierarchy, dtype queries (``result_type can_cast issubdtype isdtype finfo iinfo``),
array properties (``ndim shape size``), ``astype`` and the numeric constants.
"""

import builtins
import math
import warnings

import ml_dtypes
import numpy as np

from remat import dtypes
from remat.array import Array
from remat.numpy.util import (
    _arr,
    _canon,
    _canonicalize_axes,
    _check_arraylike,
    _convert,
    _dtype,
    _dtype_pair,
    _is_arraylike,
    _make_scalar_type,
    _np_type,
    _value_dtype,
)

__all__ = [
    "astype", "bfloat16", "bool", "bool_", "can_cast", "cdouble", "character", "complex128",
    "complex64", "complex_", "complexfloating", "ComplexWarning", "csingle", "double", "dtype",
    "e", "euler_gamma", "finfo", "flexible", "float16", "float32", "float4_e2m1fn", "float64",
    "float6_e2m3fn", "float6_e3m2fn", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float_", "floating", "generic", "half", "iinfo", "inexact", "inf", "int1", "int16", "int2",
    "int32", "int4", "int64", "int8", "int_", "integer", "iscomplexobj", "isdtype", "isrealobj",
    "isscalar", "issubdtype", "iterable", "nan", "ndarray", "ndim", "newaxis", "number",
    "object_", "pi", "promote_types", "result_type", "shape", "signedinteger", "single", "size",
    "uint", "uint1", "uint16", "uint2", "uint32", "uint4", "uint64", "uint8", "unsignedinteger",
]


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


def _ml_dtype(name):
    """The scalar type of the ml_dtypes dtype ``name``: remat.dtypes' own when it defines
    it (the dtypes remat computes with), else ml_dtypes'."""
    own = getattr(dtypes, name, None)
    return _make_scalar_type(name, getattr(ml_dtypes, name) if own is None else own)


bfloat16 = _ml_dtype("bfloat16")
float8_e3m4 = _ml_dtype("float8_e3m4")
float8_e4m3 = _ml_dtype("float8_e4m3")
float8_e4m3b11fnuz = _ml_dtype("float8_e4m3b11fnuz")
float8_e4m3fn = _ml_dtype("float8_e4m3fn")
float8_e4m3fnuz = _ml_dtype("float8_e4m3fnuz")
float8_e5m2 = _ml_dtype("float8_e5m2")
float8_e5m2fnuz = _ml_dtype("float8_e5m2fnuz")
float8_e8m0fnu = _ml_dtype("float8_e8m0fnu")
float4_e2m1fn = _ml_dtype("float4_e2m1fn")
float6_e2m3fn = _ml_dtype("float6_e2m3fn")
float6_e3m2fn = _ml_dtype("float6_e3m2fn")
int1, int2, int4 = _ml_dtype("int1"), _ml_dtype("int2"), _ml_dtype("int4")
uint1, uint2, uint4 = _ml_dtype("uint1"), _ml_dtype("uint2"), _ml_dtype("uint4")

# NumPy's abstract types for strings and objects, and its complex-cast warning
character = np.character
flexible = np.flexible
object_ = np.object_
ComplexWarning = np.exceptions.ComplexWarning


def result_type(*args):
    """JAX's type promotion of arrays, scalars and dtypes (weak Python scalars included)."""
    if not args:
        raise ValueError("at least one array or dtype is required")
    return dtypes.result_type_of([_dtype_pair(a) for a in args])[0]


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
    """``np.issubdtype`` as JAX has it: remat's scalar types are NumPy's, and bfloat16, the
    float8 formats and the small integers sit under ``floating`` / ``integer``."""
    return dtypes.issubdtype(_np_type(arg1), _np_type(arg2))


def isdtype(dtype, kind):
    """The array-API ``isdtype`` (kinds as strings or dtypes, or a tuple of them)."""
    kinds = tuple(map(_np_type, kind)) if isinstance(kind, tuple) else _np_type(kind)
    return dtypes.isdtype(_np_type(dtype), kinds)


def iinfo(int_type):
    """Machine limits of an integer dtype (or of an array's dtype), int4 and friends too."""
    return dtypes.iinfo(_value_dtype(int_type))


def finfo(float_type):
    """Machine limits of a floating dtype (or of an array's dtype), bfloat16 and the float8
    formats too."""
    return dtypes.finfo(_value_dtype(float_type))


def _warn_unless_arraylike(name, a):
    """JAX's deprecation of ``shape``/``ndim``/``size`` of what is not array-like (read, as
    NumPy reads it, for now); JAX counts what ``np.isscalar`` takes (a string) array-like."""
    if not (_is_arraylike(a) or np.isscalar(a)):
        warnings.warn(f"{name} requires ndarray or scalar arguments, got {type(a)} at position "
                      f"0. In a future JAX release this will be an error.", DeprecationWarning,
                      stacklevel=3)


def ndim(a):
    """Number of dimensions of an array, tracer or scalar, or the ``ndim`` of anything that
    has one (a ``ShapeDtypeStruct``, an aval), as in JAX."""
    if hasattr(a, "ndim"):
        return a.ndim
    _warn_unless_arraylike("ndim", a)
    return np.ndim(a)


def shape(a):
    """Shape of an array, tracer or scalar, or the ``shape`` of anything that has one."""
    if hasattr(a, "shape"):
        return a.shape
    _warn_unless_arraylike("shape", a)
    return np.shape(a)


def size(a, axis=None):
    """Number of elements (along ``axis``, an int or a sequence of ints, when given)."""
    _warn_unless_arraylike("size", a)
    if axis is None and hasattr(a, "size"):
        return a.size
    s = shape(a)
    if axis is None:
        return math.prod(s)
    return math.prod(s[i] for i in _canonicalize_axes(axis, len(s)))


def isscalar(element):
    """True for Python/NumPy scalars and rank-0 arrays."""
    if isinstance(element, (np.generic,)) or dtypes.is_python_scalar(element):
        return True
    if hasattr(element, "aval"):
        return element.aval.ndim == 0
    return False


def astype(x, dtype, /, *, copy=False, device=None):
    """``x`` converted to ``dtype`` (strongly typed)."""
    _check_arraylike("astype", x)
    return _convert(_arr(x), _canon(dtype), False)


def iscomplexobj(x):
    """Whether ``x`` has a complex dtype: read from its ``dtype`` when it has one (a
    ``ShapeDtypeStruct``, a scalar type such as ``jnp.float32``), as in JAX."""
    if isinstance(x, (builtins.complex, np.complexfloating)):
        return True
    if x is None or isinstance(x, (builtins.bool, int, float, str, np.generic)):
        return False
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        dtype = _dtype(_arr(x))
    return issubdtype(dtype, np.complexfloating)


def isrealobj(x):
    """Whether ``x`` has a non-complex dtype."""
    return not iscomplexobj(x)


def iterable(y):
    """Whether ``iter(y)`` works (False for scalars and rank-0 arrays)."""
    return np.iterable(y)
