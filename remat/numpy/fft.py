"""``remat.numpy.fft``: JAX's ``jax.numpy.fft``, written on the ``fft`` primitive of
``remat.lax`` (linear, so differentiable in both modes, and batchable).

As in JAX, ``n``/``s`` crop or zero-pad the input first, the transformed axes are moved last
for the primitive, and ``norm`` (``"backward"``, ``"ortho"`` or ``"forward"``) scales the
result. ``hfft``/``ihfft`` conjugate the half spectrum (``lax.conj``), as JAX's.
"""

import math
import operator

import numpy as np

from remat import dtypes, lax
from remat.array import Array
from remat.core import Tracer
from remat.lax.fft import FftType
from remat.numpy.creation import arange
from remat.numpy.elementwise import conj
from remat.numpy.padding import pad
from remat.numpy.shapes import moveaxis, roll
from remat.numpy.util import array, asarray

__all__ = [
    "fft", "fft2", "fftfreq", "fftn", "fftshift", "hfft", "ifft", "ifft2", "ifftn", "ifftshift",
    "ihfft", "irfft", "irfft2", "irfftn", "rfft", "rfft2", "rfftfreq", "rfftn",
]

_ARRAYLIKE = (bool, int, float, complex, np.ndarray, np.generic, Array, Tracer)


def _ensure_arraylike(name, x):
    if not isinstance(x, _ARRAYLIKE):
        raise TypeError(f"{name} requires ndarray or scalar arguments, got {type(x)} at "
                        f"position 0.")
    return asarray(x)


def _norm_factor(s, func_name, norm):
    """The scale of a transform of sizes ``s`` (static, so a Python number)."""
    if norm == "backward":
        return 1.0
    size = math.prod(s)
    inverse = func_name.startswith("i")
    if norm == "ortho":
        return math.sqrt(size) if inverse else 1 / math.sqrt(size)
    if norm == "forward":
        return size if inverse else 1 / size
    raise ValueError(f'Invalid norm value {norm}; should be "backward","ortho" or "forward".')


def _fft_core(func_name, fft_type, a, s, axes, norm):
    full_name = f"jax.numpy.fft.{func_name}"
    arr = _ensure_arraylike(full_name, a)
    if s is not None:
        s = tuple(map(operator.index, s))
        if any(n <= 0 for n in s):
            raise ValueError("Shape should be positive.")
    if s is not None and axes is not None and len(s) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    orig_axes = axes
    if axes is None:
        axes = range(arr.ndim) if s is None else range(arr.ndim - len(s), arr.ndim)
    axes = tuple(axes)
    if len(axes) != len(set(axes)):
        raise ValueError(f"{full_name} does not support repeated axes. Got axes {axes}.")
    if orig_axes is not None:  # the transformed axes go last, for the primitive
        axes = tuple(range(arr.ndim - len(axes), arr.ndim))
        arr = moveaxis(arr, orig_axes, axes)
    if s is not None:
        in_s = list(arr.shape)
        for axis, n in zip(axes, s):
            in_s[axis] = n
        if fft_type == FftType.IRFFT:
            in_s[-1] = in_s[-1] // 2 + 1
        arr = arr[tuple(slice(n) for n in in_s)]
        arr = pad(arr, [(0, n - m) for n, m in zip(in_s, arr.shape)])
    elif fft_type == FftType.IRFFT:
        s = [arr.shape[axis] for axis in axes[:-1]]
        if axes:
            s += [max(0, 2 * (arr.shape[axes[-1]] - 1))]
    else:
        s = [arr.shape[axis] for axis in axes]
    transformed = lax.fft(arr, fft_type, tuple(s))
    if norm is not None:
        factor = _norm_factor(s, func_name, norm)
        if factor != 1.0:
            transformed = transformed * array(factor, dtype=transformed.dtype)
    if orig_axes is not None:
        transformed = moveaxis(transformed, axes, orig_axes)
    return transformed


def _axis_check_1d(func_name, axis):
    if isinstance(axis, (list, tuple)):
        full_name = f"jax.numpy.fft.{func_name}"
        raise ValueError(f"{full_name} does not support multiple axes. Please use "
                         f"{full_name}n. Got axis = {axis!r}.")


def _fft_core_1d(func_name, fft_type, a, n, axis, norm):
    _axis_check_1d(func_name, axis)
    axes = None if axis is None else [axis]
    s = None if n is None else [n]
    return _fft_core(func_name, fft_type, a, s, axes, norm)


def _fft_core_2d(func_name, fft_type, a, s, axes, norm):
    if len(axes) != 2:
        raise ValueError(f"jax.numpy.fft.{func_name} only supports 2 axes. Got axes = "
                         f"{axes!r}.")
    return _fft_core(func_name, fft_type, a, s, axes, norm)


def fft(a, n=None, axis=-1, norm=None):
    """The 1-D discrete Fourier transform along ``axis`` (``n`` crops or zero-pads)."""
    return _fft_core_1d("fft", FftType.FFT, a, n, axis, norm)


def ifft(a, n=None, axis=-1, norm=None):
    """The 1-D inverse discrete Fourier transform along ``axis``."""
    return _fft_core_1d("ifft", FftType.IFFT, a, n, axis, norm)


def rfft(a, n=None, axis=-1, norm=None):
    """The 1-D transform of a real input: the ``n // 2 + 1`` non-negative frequencies."""
    return _fft_core_1d("rfft", FftType.RFFT, a, n, axis, norm)


def irfft(a, n=None, axis=-1, norm=None):
    """The inverse of ``rfft``: a real signal of length ``n`` (default
    ``2 * (a.shape[axis] - 1)``)."""
    return _fft_core_1d("irfft", FftType.IRFFT, a, n, axis, norm)


def hfft(a, n=None, axis=-1, norm=None):
    """The transform of a signal with Hermitian symmetry, given its half spectrum ``a``: a
    real signal of length ``n`` (default ``2 * (a.shape[axis] - 1)``)."""
    _axis_check_1d("hfft", axis)
    conj_a = conj(_ensure_arraylike("jax.numpy.fft.hfft", a))
    nn = (conj_a.shape[axis] - 1) * 2 if n is None else n
    return _fft_core_1d("hfft", FftType.IRFFT, conj_a, n, axis, norm) * nn


def ihfft(a, n=None, axis=-1, norm=None):
    """The inverse of ``hfft``: the half spectrum of a real signal, conjugated and scaled by
    ``1 / n``."""
    _axis_check_1d("ihfft", axis)
    arr = _ensure_arraylike("jax.numpy.fft.ihfft", a)
    nn = arr.shape[axis] if n is None else n
    out = _fft_core_1d("ihfft", FftType.RFFT, arr, n, axis, norm)
    return conj(out) * array(1 / nn, dtype=out.dtype)


def fft2(a, s=None, axes=(-2, -1), norm=None):
    """The 2-D discrete Fourier transform over ``axes``."""
    return _fft_core_2d("fft2", FftType.FFT, a, s, axes, norm)


def ifft2(a, s=None, axes=(-2, -1), norm=None):
    """The 2-D inverse discrete Fourier transform over ``axes``."""
    return _fft_core_2d("ifft2", FftType.IFFT, a, s, axes, norm)


def rfft2(a, s=None, axes=(-2, -1), norm=None):
    """The 2-D transform of a real input (half spectrum along the last axis)."""
    return _fft_core_2d("rfft2", FftType.RFFT, a, s, axes, norm)


def irfft2(a, s=None, axes=(-2, -1), norm=None):
    """The inverse of ``rfft2``."""
    return _fft_core_2d("irfft2", FftType.IRFFT, a, s, axes, norm)


def fftn(a, s=None, axes=None, norm=None):
    """The N-D discrete Fourier transform over ``axes`` (all by default)."""
    return _fft_core("fftn", FftType.FFT, a, s, axes, norm)


def ifftn(a, s=None, axes=None, norm=None):
    """The N-D inverse discrete Fourier transform over ``axes``."""
    return _fft_core("ifftn", FftType.IFFT, a, s, axes, norm)


def rfftn(a, s=None, axes=None, norm=None):
    """The N-D transform of a real input (half spectrum along the last axis)."""
    return _fft_core("rfftn", FftType.RFFT, a, s, axes, norm)


def irfftn(a, s=None, axes=None, norm=None):
    """The inverse of ``rfftn``."""
    return _fft_core("irfftn", FftType.IRFFT, a, s, axes, norm)


def _check_freq_args(name, n, d):
    if isinstance(n, (list, tuple)):
        raise ValueError(f"The n argument of jax.numpy.fft.{name} only takes an int. Got n = "
                         f"{list(n)}.")
    if isinstance(d, (list, tuple)):
        raise ValueError(f"The d argument of jax.numpy.fft.{name} only takes a single value. "
                         f"Got d = {list(d)}.")


def fftfreq(n, d=1.0, *, dtype=None, device=None):
    """The sample frequencies of ``fft`` for ``n`` samples spaced ``d`` apart:
    ``[0, 1, ..., n//2 - 1, -(n//2), ..., -1] / (d n)`` (``n`` odd: up to ``(n-1)//2``)."""
    _check_freq_args("fftfreq", n, d)
    out_dtype = dtypes.canonicalize_dtype(dtype or dtypes.default_float_dtype())
    dtype = (out_dtype if dtypes.kind(out_dtype) in "fc" else dtypes.default_float_dtype())
    dtype = dtypes.finfo(dtype).dtype
    i = arange(n, dtype=dtype)
    k = (i + n // 2) % n - n // 2
    return (k.astype(dtype) / array(d * n, dtype=dtype)).astype(out_dtype)


def rfftfreq(n, d=1.0, *, dtype=None, device=None):
    """The sample frequencies of ``rfft``: ``[0, 1, ..., n//2] / (d n)``."""
    _check_freq_args("rfftfreq", n, d)
    dtype = dtype or dtypes.default_float_dtype()
    k = arange(0, n // 2 + 1, dtype=dtype)
    return k / array(d * n, dtype=dtype)


def _shifts(x, axes, sign):
    if axes is None:
        axes = tuple(range(x.ndim))
        return [sign * (dim // 2) for dim in x.shape], axes
    if isinstance(axes, int):
        return sign * (x.shape[axes] // 2), axes
    return [sign * (x.shape[ax] // 2) for ax in axes], axes


def fftshift(x, axes=None):
    """Move the zero frequency to the centre (a roll by half of each axis)."""
    x = _ensure_arraylike("fftshift", x)
    shift, axes = _shifts(x, axes, 1)
    return roll(x, shift, axes)


def ifftshift(x, axes=None):
    """The inverse of ``fftshift``."""
    x = _ensure_arraylike("ifftshift", x)
    shift, axes = _shifts(x, axes, -1)
    return roll(x, shift, axes)
