"""The complex-number primitives ``real imag complex conj``, each with its impl, abstract eval,
JVP, transpose and batching rules.

All four are linear over the reals, so their JVPs apply them to the tangents. Their transposes
follow JAX's convention for complex cotangents (a VJP is the plain transpose of the JVP, with no
conjugation): ``real`` transposes to ``complex(ct, 0)``, ``imag`` to ``complex(0, -ct)``,
``complex`` to ``(real(ct), -imag(ct))`` and ``conj`` to ``conj(ct)`` (``real(ct)`` when its
operand was real). With these, ``grad`` of a real-valued function of a complex ``z`` is
``df/dx - i df/dy``, the conjugate of the steepest-ascent direction, as in JAX.
"""

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax import rule_ops
from remat.lax.elementwise import neg
from remat.lax.standard import (
    as_operands,
    broadcasting_shape,
    check_dtype,
    check_same_dtypes,
    standard_primitive,
)

__all__ = [
    "complex",
    "complex_p",
    "conj",
    "conj_p",
    "imag",
    "imag_p",
    "real",
    "real_p",
]

# the real dtypes that ``complex`` pairs up (and that ``conj`` accepts besides complex ones)
_PART_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _real_dtype(dtype):
    return np.finfo(dtype).dtype


def _complex_dtype(dtype):
    return np.result_type(dtype, np.complex64)


def _check_part_dtype(name, aval, position=None):
    if aval.dtype not in _PART_DTYPES:
        at = "" if position is None else f" at position {position}"
        raise TypeError(f"{name} does not accept dtype {aval.dtype.name}{at}. Accepted dtypes"
                        f"{at} are subtypes of float32, float64.")


# --- real, imag ------------------------------------------------------------------------------


def _part_abstract_eval(name):
    def abstract_eval(x):
        check_dtype(name, x, ("complexfloating",))
        return ShapedArray(x.shape, _real_dtype(x.dtype), x.weak_type)

    return abstract_eval


real_p = standard_primitive("real", lambda x: np.array(x.real),
                            _part_abstract_eval("real"))
imag_p = standard_primitive("imag", lambda x: np.array(x.imag),
                            _part_abstract_eval("imag"))


def _zero_part(ct):
    """A rank-0 zero of ``ct``'s dtype (rank-0 operands broadcast inside ``complex``)."""
    return np.zeros((), core.get_aval(ct).dtype)


ad.deflinear2(real_p, lambda ct, x: [complex_p.bind(ct, _zero_part(ct))])
ad.deflinear2(imag_p, lambda ct, x: [complex_p.bind(_zero_part(ct), neg(ct))])
batching.defvectorized(real_p)
batching.defvectorized(imag_p)


# --- complex ---------------------------------------------------------------------------------


def _complex_impl(x, y):
    """Parts written into a fresh complex array: ``x + 1j * y`` would turn an infinite
    ``y`` into a NaN real part."""
    out = np.empty(np.broadcast_shapes(x.shape, y.shape), _complex_dtype(x.dtype))
    out.real = x
    out.imag = y
    return out


def _complex_abstract_eval(x, y):
    for i, a in enumerate((x, y)):
        _check_part_dtype("complex", a, i)
    check_same_dtypes("complex", (x, y))
    return ShapedArray(broadcasting_shape("complex", (x, y)), _complex_dtype(x.dtype),
                       x.weak_type and y.weak_type)


complex_p = standard_primitive("complex", _complex_impl, _complex_abstract_eval)


def _unbroadcast(aval, ct):
    """The cotangent of a rank-0 operand that was broadcast against a larger one."""
    if core.get_aval(ct).shape == aval.shape:
        return ct
    return rule_ops.reduce_sum(ct, tuple(range(core.get_aval(ct).ndim)))


def _complex_transpose(ct, x, y):
    return [_unbroadcast(x.aval, real_p.bind(ct)) if ad.is_undefined_primal(x) else None,
            _unbroadcast(y.aval, neg(imag_p.bind(ct))) if ad.is_undefined_primal(y)
            else None]


def _zeros_like(aval):
    if not aval.shape:
        return np.zeros((), aval.dtype)
    return rule_ops.full(aval.shape, 0, aval.dtype)


def _complex_jvp(primals, tangents):
    """Linear in both parts; a missing tangent part is a zero of the primal part's type."""
    out = complex_p.bind(*primals)
    if all(type(t) is ad.Zero for t in tangents):
        return out, ad.Zero.from_primal_value(out)
    parts = [_zeros_like(core.get_aval(p)) if type(t) is ad.Zero else t
             for p, t in zip(primals, tangents)]
    return out, complex_p.bind(*parts)


ad.primitive_jvps[complex_p] = _complex_jvp
ad.primitive_transposes[complex_p] = _complex_transpose
batching.broadcast_batcher(complex_p)


# --- conj ------------------------------------------------------------------------------------


def _conj_impl(x, *, input_dtype):
    if dtypes.kind(x.dtype) == "c":
        return np.conjugate(x)
    return x.astype(_complex_dtype(x.dtype))


def _conj_abstract_eval(x, *, input_dtype):
    if dtypes.kind(x.dtype) != "c" and x.dtype not in _PART_DTYPES:
        raise TypeError(f"conj does not accept dtype {x.dtype.name}. Accepted dtypes are "
                        f"subtypes of float32, complexfloating, float64.")
    return ShapedArray(x.shape, _complex_dtype(x.dtype), x.weak_type)


conj_p = standard_primitive("conj", _conj_impl, _conj_abstract_eval)


def _conj_transpose(ct, x, *, input_dtype):
    if dtypes.kind(input_dtype) == "c":
        return [conj_p.bind(ct, input_dtype=core.get_aval(ct).dtype)]
    return [real_p.bind(ct)]


ad.deflinear2(conj_p, _conj_transpose)
batching.defvectorized(conj_p)


# --- the lax functions -----------------------------------------------------------------------


def real(x):
    """The real part of a complex ``x`` (float32 for complex64, float64 for complex128)."""
    (x,) = as_operands("real", x)
    return real_p.bind(x)


def imag(x):
    """The imaginary part of a complex ``x``."""
    (x,) = as_operands("imag", x)
    return imag_p.bind(x)


def complex(x, y):  # noqa: A001 - JAX's name
    """``x + i y`` from two float32 (complex64) or two float64 (complex128) parts."""
    x, y = as_operands("complex", x, y)
    return complex_p.bind(x, y)


def conj(x):
    """The complex conjugate; a float32/float64 ``x`` becomes complex with zero imaginary
    part (as JAX's ``lax.conj``)."""
    (x,) = as_operands("conj", x)
    return conj_p.bind(x, input_dtype=core.get_aval(x).dtype)


rule_ops.provide(conj=conj, real=real)


