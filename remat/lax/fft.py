"""The ``fft`` primitive: fast Fourier transforms over the trailing ``len(fft_lengths)`` dims,
of type ``FftType.FFT``/``IFFT`` (complex to complex), ``RFFT`` (real to the half spectrum) or
``IRFFT`` (the half spectrum back to real), with its impl (SciPy's pocketfft, which keeps
single precision), abstract eval, JVP (it is linear), transpose and batching rules.

The transposes are JAX's: an FFT's is an FFT of the same type (the DFT matrix is symmetric);
RFFT's and IRFFT's weigh the half spectrum by the Hermitian redundancy mask and conjugate
(JAX's convention for complex cotangents).
"""

import enum
import math

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.complex_parts import conj
from remat.lax.elementwise import convert_element_type, div, mul
from remat.lax.shape import broadcast_in_dim, full
from remat.lax.standard import standard_primitive
from remat.runtime.lazy_imports import LazyModule

scipy_fft = LazyModule("scipy.fft")

__all__ = ["FftType", "fft", "fft_p"]


class FftType(enum.IntEnum):
    """Which FFT operation to perform."""

    FFT = 0  # forward, complex to complex
    IFFT = 1  # inverse, complex to complex
    RFFT = 2  # forward, real to complex (the half spectrum)
    IRFFT = 3  # inverse, complex (the half spectrum) to real


_FFT_TYPE_NAMES = {"fft": FftType.FFT, "ifft": FftType.IFFT, "rfft": FftType.RFFT,
                   "irfft": FftType.IRFFT}


def _fft_type(fft_type):
    if isinstance(fft_type, FftType):
        return fft_type
    if isinstance(fft_type, str):
        typ = _FFT_TYPE_NAMES.get(fft_type.lower())
        if typ is None or fft_type not in (typ.name, typ.name.lower()):
            raise ValueError(f"Unknown FFT type '{fft_type}'")
        return typ
    raise TypeError(f"Unknown FFT type value '{fft_type}'")


def _complex_dtype(dtype):
    return dtypes.canonicalize_dtype(np.result_type(_inexact_dtype(dtype), np.complex64))


def _inexact_dtype(dtype):
    if dtypes.kind(dtype) in "fc":
        return dtype
    return dtypes.default_float_dtype()


def _real_dtype(dtype):
    return np.finfo(dtype).dtype


def _fft_abstract_eval(x, *, fft_type, fft_lengths):
    k = len(fft_lengths)
    if k > x.ndim:
        raise ValueError(f"FFT input shape {x.shape} must have at least as many input "
                         f"dimensions as fft_lengths {fft_lengths}.")
    if fft_type == FftType.RFFT:
        if x.dtype not in (np.float32, np.float64):
            raise ValueError(f"RFFT input must be float32 or float64, got {x.dtype}")
        if x.shape[x.ndim - k:] != fft_lengths:
            raise ValueError(f"RFFT input shape {x.shape} minor dimensions must be equal to "
                             f"fft_lengths {fft_lengths}")
        shape = x.shape[:x.ndim - k] + fft_lengths[:-1] + (fft_lengths[-1] // 2 + 1,)
        return ShapedArray(shape, _complex_dtype(x.dtype))
    if dtypes.kind(x.dtype) != "c":
        name = "IRFFT" if fft_type == FftType.IRFFT else "FFT"
        raise ValueError(f"{name} input must be complex64 or complex128, got {x.dtype}")
    if fft_type == FftType.IRFFT:
        if x.shape[x.ndim - k:-1] != fft_lengths[:-1]:
            raise ValueError(f"IRFFT input shape {x.shape} minor dimensions must be equal to "
                             f"all except the last fft_length, got fft_lengths={fft_lengths}")
        return ShapedArray(x.shape[:x.ndim - k] + fft_lengths, _real_dtype(x.dtype))
    if x.shape[x.ndim - k:] != fft_lengths:
        raise ValueError(f"FFT input shape {x.shape} minor dimensions must be equal to "
                         f"fft_lengths {fft_lengths}")
    return ShapedArray(x.shape, x.dtype)


def _fft_impl(x, *, fft_type, fft_lengths):
    axes = tuple(range(x.ndim - len(fft_lengths), x.ndim))
    if fft_type == FftType.FFT:
        return scipy_fft.fftn(x, axes=axes)
    if fft_type == FftType.IFFT:
        return scipy_fft.ifftn(x, axes=axes)
    if fft_type == FftType.RFFT:
        return scipy_fft.rfftn(x, axes=axes)
    return scipy_fft.irfftn(x, s=fft_lengths, axes=axes)


fft_p = standard_primitive("fft", _fft_impl, _fft_abstract_eval)


def _shape(x):
    return core.get_aval(x).shape


def _redundancy_mask(like, n, dtype, scale=1.0):
    """``scale`` times the Hermitian redundancy of the half spectrum of length ``n // 2 + 1``:
    1 for the DC (and, for even ``n``, the Nyquist) term, 2 for the others, along the last
    axis."""
    m = n // 2 + 1
    mask = np.full(m, 2.0)
    mask[0] = 1
    if n % 2 == 0:
        mask[-1] = 1
    mask = (mask * scale).astype(dtype)
    shape = _shape(like)
    return broadcast_in_dim(mask, shape, (len(shape) - 1,))


def _fft_transpose(ct, x, *, fft_type, fft_lengths):
    if fft_type == FftType.RFFT:  # N irfft(conj(ct) / mask)
        dtype = core.get_aval(ct).dtype
        scaled = div(conj(ct), _redundancy_mask(ct, fft_lengths[-1], dtype))
        out = fft_p.bind(scaled, fft_type=FftType.IRFFT, fft_lengths=fft_lengths)
        result = mul(out, full((), math.prod(fft_lengths), _real_dtype(dtype)))
    elif fft_type == FftType.IRFFT:  # conj(mask rfft(ct) / N)
        spectrum = fft_p.bind(ct, fft_type=FftType.RFFT, fft_lengths=fft_lengths)
        dtype = core.get_aval(spectrum).dtype
        scale = _redundancy_mask(spectrum, fft_lengths[-1], dtype, 1 / math.prod(fft_lengths))
        result = conj(mul(spectrum, scale))
    else:
        result = fft_p.bind(ct, fft_type=fft_type, fft_lengths=fft_lengths)
    return [result]


def _fft_batch(vals, dims, *, fft_type, fft_lengths):
    (x,), (d,) = vals, dims
    return fft_p.bind(batching.moveaxis(x, d, 0), fft_type=fft_type, fft_lengths=fft_lengths), 0


ad.deflinear2(fft_p, _fft_transpose)
batching.primitive_batchers[fft_p] = _fft_batch


def fft(x, fft_type, fft_lengths):
    """The FFT of type ``fft_type`` (an ``FftType`` or its name) over the trailing
    ``len(fft_lengths)`` dims of ``x``; ``fft_lengths`` are the sizes of the real-space signal
    (for IRFFT, the output's)."""
    typ = _fft_type(fft_type)
    dtype = core.get_aval(x).dtype
    if typ == FftType.RFFT:
        if dtypes.kind(dtype) == "c":
            raise ValueError("only real valued inputs supported for rfft")
        target = _inexact_dtype(dtype)
    else:
        target = _complex_dtype(dtype)
    if target != dtype:
        x = convert_element_type(x, target)
    fft_lengths = tuple(int(n) for n in fft_lengths)
    if not fft_lengths:
        return x
    return fft_p.bind(x, fft_type=typ, fft_lengths=fft_lengths)
