"""Dtypes: canonicalization under the x64 flag, weak types, and JAX's type-promotion lattice.

bfloat16, the float8/float6/float4 formats and the 2- and 4-bit integers come from
``ml_dtypes`` (as in JAX). NumPy files them under kind ``'V'``, so code that asks what kind
of number a dtype holds asks ``kind(dtype)`` here (``'f'``, ``'i'``, ``'u'`` for them), and
``issubdtype`` puts them under ``np.floating`` / ``np.signedinteger`` /
``np.unsignedinteger`` as JAX does; ``finfo`` and ``iinfo`` are ml_dtypes', which know them.
Code that classifies dtypes asks these, never ``np.dtype.kind``, ``np.issubdtype`` or
``np.finfo``, which misfile or reject the ml_dtypes types. The sub-byte integers and the
8-bit and smaller floats promote with nothing but Python scalars (``TypePromotionError``, as
in JAX).
"""

import functools

import ml_dtypes
import numpy as np

from remat.config import config

bool_ = np.dtype("bool")
int8, int16, int32, int64 = (np.dtype(f"int{b}") for b in (8, 16, 32, 64))
uint8, uint16, uint32, uint64 = (np.dtype(f"uint{b}") for b in (8, 16, 32, 64))
float16, float32, float64 = (np.dtype(f"float{b}") for b in (16, 32, 64))
complex64, complex128 = np.dtype("complex64"), np.dtype("complex128")

# ml_dtypes' scalar types, exported as JAX exports them (``jax.dtypes.bfloat16``)
bfloat16 = ml_dtypes.bfloat16
float8_e4m3fn, float8_e5m2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
float8_e4m3b11fnuz, float8_e4m3fnuz = ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float8_e4m3fnuz
float8_e5m2fnuz, float8_e3m4 = ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e3m4
float8_e4m3, float8_e8m0fnu = ml_dtypes.float8_e4m3, ml_dtypes.float8_e8m0fnu
float4_e2m1fn = ml_dtypes.float4_e2m1fn
float6_e2m3fn, float6_e3m2fn = ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn
int2, int4, uint2, uint4 = ml_dtypes.int2, ml_dtypes.int4, ml_dtypes.uint2, ml_dtypes.uint4

_BF16 = np.dtype(bfloat16)
# the floats narrower than 16 bits: no promotion but with Python scalars
_SMALL_FLOATS = tuple(np.dtype(t) for t in (
    float4_e2m1fn, float6_e2m3fn, float6_e3m2fn, float8_e3m4, float8_e4m3, float8_e8m0fnu,
    float8_e4m3b11fnuz, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz))
_SMALL_INTS = tuple(np.dtype(t) for t in (ml_dtypes.int1, int2, int4))  # int1: jnp.int1
_SMALL_UINTS = tuple(np.dtype(t) for t in (ml_dtypes.uint1, uint2, uint4))
# what kind of number each ml_dtypes dtype holds (NumPy says 'V' for all of them)
_ML_KIND = {_BF16: "f", **{d: "f" for d in _SMALL_FLOATS}, **{d: "i" for d in _SMALL_INTS},
            **{d: "u" for d in _SMALL_UINTS}}

float0 = np.dtype([("float0", np.void, 0)])  # tangent dtype of integer and boolean values


class extended(np.void):
    """Scalar type of the extended dtypes, which NumPy lacks: ``issubdtype(d, extended)``."""


class prng_key(extended):
    """Scalar type of the PRNG key dtypes (``key<fry>``): ``issubdtype(d, prng_key)``."""


class ExtendedDType:
    """A dtype NumPy lacks (``key<fry>``): what users and abstract values see, under its own
    name; at run time its values live in ``self.dtype``, a NumPy record dtype of the same
    bytes (which ``np.dtype(x)`` picks up), so NumPy's structural operations (reshape,
    indexing, concatenation, where) apply to them unchanged. Not a number: its tangents are
    float0 and arithmetic rejects it."""

    kind = "V"
    type = extended

    def __init__(self, name, physical):
        self.name = name
        self.dtype = np.dtype((self.type, physical))

    itemsize = property(lambda self: self.dtype.itemsize)

    def __repr__(self):
        return self.name

    __str__ = __repr__

    def __eq__(self, other):
        return type(other) is type(self) and other.name == self.name

    def __hash__(self):
        return hash((type(self), self.name))


_SUPPORTED = {bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
              float16, float32, float64, complex64, complex128, *_ML_KIND}

_NARROW = {int64: int32, uint64: uint32, float64: float32, complex128: complex64}

_python_scalar_kind = {bool: "b", int: "i", float: "f", complex: "c"}


def canonicalize_dtype(dtype):
    """The dtype a value of ``dtype`` gets in remat: 64-bit types narrow unless x64 is on."""
    if isinstance(dtype, ExtendedDType):
        return dtype
    dtype = np.dtype(dtype)
    if dtype not in _SUPPORTED:
        if dtype == float0:
            return dtype
        raise TypeError(f"dtype {dtype.name} is not a valid remat array type")
    if not config.enable_x64:
        return _NARROW.get(dtype, dtype)
    return dtype


def default_int_dtype():
    return int64 if config.enable_x64 else int32


def default_float_dtype():
    return float64 if config.enable_x64 else float32


def default_complex_dtype():
    return complex128 if config.enable_x64 else complex64


def python_scalar_dtype(x):
    """Canonical dtype of a Python scalar (weakly typed wherever it is used)."""
    kind = _python_scalar_kind[type(x) if type(x) in _python_scalar_kind else _scalar_base(x)]
    return {"b": bool_, "i": default_int_dtype(), "f": default_float_dtype(),
            "c": default_complex_dtype()}[kind]


def _scalar_base(x):
    for t in (bool, int, float, complex):
        if isinstance(x, t):
            return t
    raise TypeError(f"{x!r} is not a Python scalar")


def is_python_scalar(x):
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)


def _scalar_type(x):
    """The NumPy scalar type ``x`` names (``np.float32``, ``ml_dtypes.bfloat16``,
    ``np.floating``); an extended dtype is its scalar type."""
    if isinstance(x, ExtendedDType):
        return x.type
    if isinstance(x, type) and issubclass(x, np.generic):
        return x
    return np.dtype(x).type


# each ml_dtypes scalar type with the abstract types it is filed under, as in JAX
_ML_PARENTS = {"f": (np.floating, np.inexact), "i": (np.signedinteger, np.integer),
               "u": (np.unsignedinteger, np.integer)}
_ML_SUPERTYPES = {d.type: {d.type, *_ML_PARENTS[k], np.number, np.generic}
                  for d, k in _ML_KIND.items()}


def issubdtype(a, b):
    """``np.issubdtype`` as JAX has it: bfloat16 and the small floats are under
    ``np.floating``, the 1-, 2- and 4-bit integers under ``np.signedinteger`` /
    ``np.unsignedinteger``, and an extended dtype (a PRNG key's) is under ``extended``."""
    if isinstance(b, ExtendedDType):
        return isinstance(a, ExtendedDType) and a == b
    return _issubtype(_scalar_type(a), _scalar_type(b))


@functools.lru_cache(maxsize=512)
def _issubtype(a, b):
    if a in _ML_SUPERTYPES:
        return b in _ML_SUPERTYPES[a]
    return bool(np.issubdtype(a, b))


def kind(dtype):
    """The kind of number a dtype holds, as ``np.dtype.kind`` ('b', 'i', 'u', 'f', 'c',
    'V'), with the ml_dtypes floats 'f' and their integers 'i' / 'u'."""
    k = getattr(dtype, "kind", None)  # dtypes (NumPy's, extended) have it: kept fast
    if type(k) is not str:
        dtype = np.dtype(dtype)
        k = dtype.kind
    return _ML_KIND.get(dtype, k) if k == "V" else k


def is_float(dtype):
    return kind(dtype) == "f"


def is_inexact(dtype):
    return kind(dtype) in "fc"


def is_integer(dtype):
    return kind(dtype) in "iu"


# the array-API kinds of ``isdtype``, by the kinds of number they hold
_ISDTYPE_KINDS = {"bool": "b", "signed integer": "i", "unsigned integer": "u",
                  "integral": "iu", "real floating": "f", "complex floating": "c",
                  "numeric": "iufc"}


def isdtype(dtype, kinds):
    """The array API's ``isdtype``: whether ``dtype`` is of a named kind (``'real floating'``
    includes bfloat16 and the float8 formats) or equals a given dtype, or any in a tuple."""
    dtype = np.dtype(dtype)
    for k in kinds if isinstance(kinds, tuple) else (kinds,):
        if isinstance(k, str) and k in _ISDTYPE_KINDS:
            if dtype in _SUPPORTED and kind(dtype) in _ISDTYPE_KINDS[k]:
                return True
            continue
        try:
            if dtype == np.dtype(k):
                return True
        except TypeError as e:
            if isinstance(k, str):
                raise ValueError(f"Unrecognized kind={k!r} expected one of "
                                 f"{list(_ISDTYPE_KINDS)}, or a compatible input for "
                                 f"jnp.dtype()") from None
            raise TypeError(f"Expected kind to be a dtype, string, or tuple; got kind={k!r}") \
                from e
    return False


def supports_inf(dtype):
    """Whether float ``dtype`` has infinities (float8_e4m3fn, the ``fnuz`` formats and the
    6- and 4-bit floats do not)."""
    return issubdtype(dtype, np.inexact) and bool(np.isinf(np.array(np.inf).astype(dtype)))


def finfo(dtype):
    """Machine limits of a float dtype, bfloat16 and the float8 formats included (NumPy's
    ``finfo`` rejects those: NumPy files them under kind 'V')."""
    return ml_dtypes.finfo(dtype)


def iinfo(dtype):
    """Machine limits of an integer dtype, int2/int4/uint2/uint4 included."""
    return ml_dtypes.iinfo(dtype)


def itemsize_bits(dtype):
    """The width of ``dtype`` in bits (4 for int4, 16 for bfloat16, 8 for bool)."""
    if dtype is None:
        raise ValueError("dtype cannot be None.")
    if isinstance(dtype, ExtendedDType):
        return dtype.itemsize * 8
    dtype = np.dtype(dtype)
    if dtype in _ML_KIND:
        name = dtype.name
        return 16 if dtype == _BF16 else int(name[len(name.rstrip("0123456789")):] if
                                              name.startswith(("int", "uint")) else
                                              name.split("_")[0][len("float"):])
    return dtype.itemsize * 8


def scalar_type_of(x):
    """The Python scalar type (bool, int, float, complex) of the values of ``x``."""
    dtype = dtype_and_weak(x)[0] if not isinstance(x, (np.ndarray, np.generic)) else x.dtype
    return {"b": bool, "i": int, "u": int, "f": float, "c": complex}[kind(dtype)]


class TypePromotionError(ValueError):
    """Raised when dtypes have no implicit promotion (the small floats and integers)."""


# --- the promotion lattice -------------------------------------------------------------------
# Nodes are dtypes plus the three weak kinds "i*", "f*", "c*" (Python int/float/complex).
_WEAK = ("i*", "f*", "c*")
_LATTICE = {
    bool_: ["i*"],
    "i*": [uint8, int8, *_SMALL_UINTS, *_SMALL_INTS],
    **{d: [] for d in _SMALL_UINTS + _SMALL_INTS},
    uint8: [int16, uint16],
    uint16: [int32, uint32],
    uint32: [int64, uint64],
    uint64: ["f*"],
    int8: [int16],
    int16: [int32],
    int32: [int64],
    int64: ["f*"],
    "f*": [*_SMALL_FLOATS, _BF16, float16, "c*"],
    **{d: [] for d in _SMALL_FLOATS},
    _BF16: [float32],
    float16: [float32],
    float32: [float64, complex64],
    float64: [complex128],
    "c*": [complex64],
    complex64: [complex128],
    complex128: [],
}


# ``jax_numpy_dtype_promotion="strict"``: only Python scalars (the weak kinds) promote, into
# any dtype of their kind or above; dtypes never promote into one another
_STRICT_LATTICE = {
    "i*": ["f*", *(d for d in _LATTICE if d not in _WEAK and kind(d) in "iu")],
    "f*": ["c*", *(d for d in _LATTICE if d not in _WEAK and kind(d) == "f")],
    "c*": [d for d in _LATTICE if d not in _WEAK and kind(d) == "c"],
    **{d: [] for d in _LATTICE if d not in _WEAK},
}


def _upper_bounds(lattice):
    bounds = {}

    def visit(node):
        if node not in bounds:
            acc = {node}
            for child in lattice[node]:
                acc |= visit(child)
            bounds[node] = acc
        return bounds[node]

    for node in lattice:
        visit(node)
    return bounds


_UB = _upper_bounds(_LATTICE)
_STRICT_UB = _upper_bounds(_STRICT_LATTICE)


def promotion_is_strict():
    """Whether ``jax_numpy_dtype_promotion`` is ``"strict"``."""
    return config.numpy_dtype_promotion == "strict"


@functools.cache
def _join(nodes, strict=False):
    bounds = _STRICT_UB if strict else _UB
    common = set.intersection(*(bounds[n] for n in nodes))
    for node in common:
        if bounds[node] >= common:
            return node
    names = ", ".join(repr(_NODE_NAMES.get(n, getattr(n, "name", n))) for n in nodes)
    if strict:
        raise TypePromotionError(
            f"Input dtypes ({names}) have no available implicit dtype promotion path when "
            f"jax_numpy_dtype_promotion=strict. Try explicitly casting inputs to the desired "
            f"output type, or set jax_numpy_dtype_promotion=standard.")
    small = [n for n in nodes if n in _SMALL_FLOATS or n in _SMALL_INTS + _SMALL_UINTS]
    why = ("8-bit floats do not support implicit promotion" if any(
        n in _SMALL_FLOATS for n in small) else
        "1-bit, 2-bit and 4-bit integers do not support implicit promotion")
    raise TypePromotionError(
        f"Input dtypes ({names}) have no available implicit dtype promotion path. To avoid "
        f"unintended promotion, {why}. If you'd like your inputs to be promoted to another "
        f"type, you can do so explicitly using e.g. x.astype('float32')")


_NODE_NAMES = {"i*": "<class 'int'>", "f*": "<class 'float'>", "c*": "<class 'complex'>"}


def _node(dtype, weak):
    dtype = np.dtype(dtype)
    if weak:
        return {"b": bool_, "i": "i*", "u": "i*", "f": "f*", "c": "c*"}[kind(dtype)]
    return dtype


def _weak_node_dtype(node):
    return {"i*": default_int_dtype(), "f*": default_float_dtype(),
            "c*": default_complex_dtype()}[node]


def promote_types(a, b):
    """Promotion of two (strong) dtypes, as ``jnp.promote_types``."""
    return _node_dtype(_join((_node(a, False), _node(b, False)), promotion_is_strict()))


def result_type_of(pairs):
    """Result (dtype, weak_type) of a sequence of ``(dtype, weak_type)`` pairs."""
    return _result_type_cached(tuple(pairs), config.enable_x64, promotion_is_strict())


@functools.lru_cache(maxsize=4096)
def _result_type_cached(pairs, x64, strict):
    pairs = [(canonicalize_dtype(d), bool(w)) for d, w in pairs]
    if len(pairs) == 1:
        return pairs[0]
    if len({d for d, _ in pairs}) == 1 and not all(w for _, w in pairs):
        return pairs[0][0], False
    if all(w for _, w in pairs) and not strict:  # all weak: join the dtypes, stay weak
        nodes = tuple(sorted({d for d, _ in pairs}, key=str))
        return _node_dtype(nodes[0] if len(nodes) == 1 else _join(nodes, strict)), True
    nodes = tuple(sorted({_node(d, w) for d, w in pairs}, key=str))
    node = nodes[0] if len(nodes) == 1 else _join(nodes, strict)
    return _node_dtype(node), node in _WEAK


def _node_dtype(node):
    """A lattice node's dtype: a weak kind's is its default (int64 joined with uint64 is
    ``f*``)."""
    return canonicalize_dtype(_weak_node_dtype(node) if node in _WEAK else node)


def dtype_and_weak(x):
    """(dtype, weak_type) of anything array-like: Arrays, tracers, NumPy values, Python scalars."""
    aval = getattr(x, "aval", None)
    if aval is not None:
        return aval.dtype, aval.weak_type
    if is_python_scalar(x):
        return python_scalar_dtype(x), not isinstance(x, bool)
    if isinstance(x, (np.ndarray, np.generic)):
        return canonicalize_dtype(x.dtype), False
    if isinstance(x, (np.dtype, type)) or isinstance(x, str):
        return canonicalize_dtype(x), False
    if isinstance(x, (list, tuple)):
        return canonicalize_dtype(np.asarray(x).dtype), False
    if getattr(x, "dtype", None) is not None:  # ShapeDtypeStruct, or any value with a dtype
        return canonicalize_dtype(x.dtype), False  # strong, as JAX (only avals are weak)
    raise TypeError(f"Cannot determine the dtype of {type(x).__name__} value {x!r}")


def result_type(*args, return_weak_type_flag=False):
    """``jnp.result_type``: JAX promotion of arrays, scalars and dtypes."""
    if not args:
        raise ValueError("at least one array or dtype is required")
    dtype, weak = result_type_of([dtype_and_weak(a) for a in args])
    return (dtype, weak) if return_weak_type_flag else dtype


def short_name(dtype):
    """Short dtype name used in printed avals: f32, i32, bool, u8, c64."""
    if isinstance(dtype, ExtendedDType):
        return dtype.name
    dtype = np.dtype(dtype)
    if dtype == float0:
        return "float0"
    if dtype == bool_:
        return "bool"
    if dtype == _BF16:
        return "bf16"
    if dtype in _ML_KIND:  # float8_e4m3fn -> f8_e4m3fn, int4 -> i4, uint2 -> u2
        name = dtype.name
        return "f" + name[len("float"):] if name.startswith("float") else name[0] + \
            name.lstrip("uint")
    return {"f": "f", "i": "i", "u": "u", "c": "c"}[dtype.kind] + str(dtype.itemsize * 8)

