"""Correlations: the 1-D ``convolve`` and ``correlate`` (one ``conv_general_dilated``
each, so they differentiate and batch like any convolution) and the sample statistics
``cov`` and ``corrcoef``.
"""

from remat import dtypes, lax
from remat.numpy import reductions
from remat.numpy.contractions import dot
from remat.numpy.creation import diag
from remat.numpy.elementwise import absolute, clip, conjugate, multiply, sqrt, true_divide
from remat.numpy.shapes import atleast_2d, concatenate, squeeze, transpose
from remat.numpy.util import (
    _arr,
    _canon,
    _check_arraylike,
    _convert,
    _dtype,
    _promote_dtypes,
    _promote_dtypes_inexact,
    _shape,
)

__all__ = ["convolve", "corrcoef", "correlate", "cov"]


def _conv(name, x, y, mode, precision, preferred_element_type):
    _check_arraylike(name, x, y)
    x, y = _arr(x), _arr(y)
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError(f"{name}() only support 1-dimensional inputs.")
    if preferred_element_type is None:  # NumPy convolves in floating point
        x, y = _promote_dtypes_inexact(x, y)
    else:
        x, y = _promote_dtypes(x, y)
        preferred_element_type = _canon(preferred_element_type)
    if not _shape(x)[0] or not _shape(y)[0]:
        raise ValueError(f"{name}: inputs cannot be empty, got shapes {_shape(x)} and "
                         f"{_shape(y)}.")
    reverse_output = False
    if name == "correlate":
        y = conjugate(y)
        if _shape(x)[0] < _shape(y)[0]:
            x, y, reverse_output = y, x, True
    else:
        if _shape(x)[0] < _shape(y)[0]:
            x, y = y, x
        y = lax.rev(y, (0,))
    m = _shape(y)[0]
    if mode == "valid":
        padding = [(0, 0)]
    elif mode == "same":
        padding = [(m // 2, m - m // 2 - 1)]
    elif mode == "full":
        padding = [(m - 1, m - 1)]
    else:
        raise ValueError("mode must be one of ['full', 'same', 'valid']")
    out = lax.conv_general_dilated(lax.reshape(x, (1, 1, _shape(x)[0])),
                                   lax.reshape(y, (1, 1, m)), (1,), padding,
                                   precision=precision,
                                   preferred_element_type=preferred_element_type)
    out = lax.reshape(out, (_shape(out)[2],))
    return lax.rev(out, (0,)) if reverse_output else out


def convolve(a, v, mode="full", *, precision=None, preferred_element_type=None):
    """The discrete linear convolution of the 1-D ``a`` and ``v`` ('full', 'same' or
    'valid' output, as NumPy)."""
    return _conv("convolve", a, v, mode, precision, preferred_element_type)


def correlate(a, v, mode="valid", *, precision=None, preferred_element_type=None):
    """The cross-correlation of the 1-D ``a`` and ``v`` (``v`` conjugated, not flipped)."""
    return _conv("correlate", a, v, mode, precision, preferred_element_type)


def _weights(name, w, n):
    _check_arraylike("cov", w)
    w = _arr(w)
    if w.ndim > 1:
        raise RuntimeError(f"cannot handle multidimensional {name}")
    if _shape(w)[0] != n:
        raise RuntimeError(f"incompatible numbers of samples and {name}")
    return w


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None,
        dtype=None):
    """The covariance matrix of the variables in the rows of ``m`` (columns when not
    ``rowvar``), with ``y`` as more variables, frequency and reliability weights, and
    ``ddof`` (default 1, or 0 with ``bias``)."""
    if y is not None:
        _check_arraylike("cov", m, y)
        m, y = _promote_dtypes_inexact(_arr(m), _arr(y))
        if y.ndim > 2:
            raise ValueError("y has more than 2 dimensions")
    else:
        _check_arraylike("cov", m)
        (m,) = _promote_dtypes_inexact(_arr(m))
    if m.ndim > 2:
        raise ValueError("m has more than 2 dimensions")
    if dtype is not None and not dtypes.is_inexact(_canon(dtype)):
        raise ValueError(f"cov: dtype must be a subclass of float or complex; got "
                         f"dtype={dtype}")
    x = atleast_2d(m)
    if not rowvar and m.ndim != 1:
        x = transpose(x)
    if _shape(x)[0] == 0:
        return lax.full((0, 0), 0, dtypes.default_float_dtype())
    if y is not None:
        y2 = atleast_2d(_arr(y))
        if not rowvar and _shape(y2)[0] != 1:
            y2 = transpose(y2)
        x = concatenate([x, y2], axis=0)
    n_vars, n_obs = _shape(x)
    if n_obs == 0:
        return lax.full(() if n_vars == 1 else (n_vars, n_vars), float("nan"), _dtype(x))
    if ddof is None:
        ddof = 1 if not bias else 0
    w = None
    if fweights is not None:
        fw = _weights("fweights", fweights, n_obs)
        if not dtypes.is_integer(_dtype(fw)):
            raise TypeError("fweights must be integer.")
        w = absolute(fw)
    aw = None
    if aweights is not None:
        aw = absolute(_weights("aweights", aweights, n_obs))
        w = aw if w is None else multiply(w, aw)
    if dtype is not None:
        x = _convert(x, _canon(dtype))
        w = None if w is None else _convert(w, _canon(dtype))
    avg, w_sum = reductions.average(x, axis=1, weights=w, returned=True)
    w_sum = lax.reshape(lax.slice_in_dim(w_sum, 0, 1), ())
    if w is None:
        f = n_obs - ddof
    elif ddof == 0:
        f = w_sum
    elif aw is None:
        f = w_sum - ddof
    else:
        f = w_sum - ddof * reductions.sum(multiply(w, aw)) / w_sum
    x = x - lax.broadcast_in_dim(avg, _shape(x), (0,))
    xw = x if w is None else multiply(x, lax.broadcast_in_dim(_convert(w, _dtype(x)),
                                                              _shape(x), (1,)))
    return squeeze(true_divide(dot(x, conjugate(transpose(xw))), f))


def corrcoef(x, y=None, rowvar=True, dtype=None):
    """Pearson correlation coefficients: ``cov`` normalized by the standard deviations,
    clipped to [-1, 1]."""
    _check_arraylike("corrcoef", x)
    if dtype is not None and not dtypes.is_inexact(_canon(dtype)):
        raise ValueError(f"corrcoef: dtype must be a subclass of float or complex; got "
                         f"dtype={dtype}")
    c = cov(x, y, rowvar, dtype=dtype)
    if not _shape(c):
        return true_divide(c, c)  # NaN for nan/nan, inf/inf and 0/0, else 1
    d = diag(c)
    stddev = sqrt(lax.real(d)) if dtypes.kind(_dtype(d)) == "c" else sqrt(d)
    stddev = _convert(stddev, _dtype(c))
    c = true_divide(true_divide(c, lax.broadcast_in_dim(stddev, _shape(c), (0,))),
                    lax.broadcast_in_dim(stddev, _shape(c), (1,)))
    if dtypes.kind(_dtype(c)) == "c":  # each part clipped, as JAX
        return lax.complex(clip(lax.real(c), -1, 1), clip(lax.imag(c), -1, 1))
    return clip(c, -1, 1)
