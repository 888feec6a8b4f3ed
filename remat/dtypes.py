"""Dtypes: canonicalization under the x64 flag, weak types, and JAX's type-promotion lattice.

bfloat16 is left out: NumPy has no native bfloat16 and the project keeps NumPy as its only
runtime dependency.
"""

import functools

import numpy as np

from remat.config import config

bool_ = np.dtype("bool")
int8, int16, int32, int64 = (np.dtype(f"int{b}") for b in (8, 16, 32, 64))
uint8, uint16, uint32, uint64 = (np.dtype(f"uint{b}") for b in (8, 16, 32, 64))
float16, float32, float64 = (np.dtype(f"float{b}") for b in (16, 32, 64))
complex64, complex128 = np.dtype("complex64"), np.dtype("complex128")

float0 = np.dtype([("float0", np.void, 0)])  # tangent dtype of integer and boolean values

_SUPPORTED = {bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
              float16, float32, float64, complex64, complex128}

_NARROW = {int64: int32, uint64: uint32, float64: float32, complex128: complex64}

_python_scalar_kind = {bool: "b", int: "i", float: "f", complex: "c"}


def canonicalize_dtype(dtype):
    """The dtype a value of ``dtype`` gets in remat: 64-bit types narrow unless x64 is on."""
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


def issubdtype(a, b):
    return np.issubdtype(a, b)


def is_float(dtype):
    return np.dtype(dtype).kind == "f"


def is_inexact(dtype):
    return np.dtype(dtype).kind in "fc"


def is_integer(dtype):
    return np.dtype(dtype).kind in "iu"


def finfo(dtype):
    return np.finfo(dtype)


def iinfo(dtype):
    return np.iinfo(dtype)


# --- the promotion lattice -------------------------------------------------------------------
# Nodes are dtypes plus the three weak kinds "i*", "f*", "c*" (Python int/float/complex).
_WEAK = ("i*", "f*", "c*")
_LATTICE = {
    bool_: ["i*"],
    "i*": [uint8, int8],
    uint8: [int16, uint16],
    uint16: [int32, uint32],
    uint32: [int64, uint64],
    uint64: ["f*"],
    int8: [int16],
    int16: [int32],
    int32: [int64],
    int64: ["f*"],
    "f*": [float16, "c*"],
    float16: [float32],
    float32: [float64, complex64],
    float64: [complex128],
    "c*": [complex64],
    complex64: [complex128],
    complex128: [],
}


def _upper_bounds():
    bounds = {}

    def visit(node):
        if node not in bounds:
            acc = {node}
            for child in _LATTICE[node]:
                acc |= visit(child)
            bounds[node] = acc
        return bounds[node]

    for node in _LATTICE:
        visit(node)
    return bounds


_UB = _upper_bounds()


@functools.cache
def _join(nodes):
    common = set.intersection(*(_UB[n] for n in nodes))
    for node in common:
        if _UB[node] >= common:
            return node
    raise TypeError(f"no common type for {nodes}")


def _node(dtype, weak):
    dtype = np.dtype(dtype)
    if weak:
        return {"b": bool_, "i": "i*", "u": "i*", "f": "f*", "c": "c*"}[dtype.kind]
    return dtype


def _weak_node_dtype(node):
    return {"i*": default_int_dtype(), "f*": default_float_dtype(),
            "c*": default_complex_dtype()}[node]


def promote_types(a, b):
    """Promotion of two (strong) dtypes, as ``jnp.promote_types``."""
    return canonicalize_dtype(_join((_node(a, False), _node(b, False))))


def result_type_of(pairs):
    """Result (dtype, weak_type) of a sequence of ``(dtype, weak_type)`` pairs."""
    return _result_type_cached(tuple(pairs), config.enable_x64)


@functools.lru_cache(maxsize=4096)
def _result_type_cached(pairs, x64):
    pairs = [(canonicalize_dtype(d), bool(w)) for d, w in pairs]
    if len(pairs) == 1:
        return pairs[0]
    if len({d for d, _ in pairs}) == 1 and not all(w for _, w in pairs):
        return pairs[0][0], False
    if all(w for _, w in pairs):  # all weak: join the dtypes themselves, stay weak
        nodes = tuple(sorted({d for d, _ in pairs}, key=str))
        return canonicalize_dtype(nodes[0] if len(nodes) == 1 else _join(nodes)), True
    nodes = tuple(sorted({_node(d, w) for d, w in pairs}, key=str))
    node = nodes[0] if len(nodes) == 1 else _join(nodes)
    if node in _WEAK:  # the join is a weak kind: that kind's default dtype
        return canonicalize_dtype(_weak_node_dtype(node)), True
    return canonicalize_dtype(node), False


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
    raise TypeError(f"Cannot determine the dtype of {type(x).__name__} value {x!r}")


def result_type(*args, return_weak_type_flag=False):
    """``jnp.result_type``: JAX promotion of arrays, scalars and dtypes."""
    if not args:
        raise ValueError("at least one array or dtype is required")
    dtype, weak = result_type_of([dtype_and_weak(a) for a in args])
    return (dtype, weak) if return_weak_type_flag else dtype


def short_name(dtype):
    """Short dtype name used in printed avals: f32, i32, bool, u8, c64."""
    dtype = np.dtype(dtype)
    if dtype == float0:
        return "float0"
    if dtype == bool_:
        return "bool"
    return {"f": "f", "i": "i", "u": "u", "c": "c"}[dtype.kind] + str(dtype.itemsize * 8)

