"""Polynomials as 1-D coefficient arrays, highest power first (NumPy's ``poly*`` API):
arithmetic (``polyadd polysub polymul polydiv``), calculus (``polyder polyint``),
evaluation (``polyval``, a Horner ``scan``), fitting (``polyfit``, least squares by SVD) and
roots (``poly roots``, the eigenvalues of the companion matrix).
"""

import operator

import numpy as np

from remat import core, dtypes, lax
from remat.numpy import linalg
from remat.numpy.contractions import dot, outer
from remat.numpy.correlation import convolve
from remat.numpy.creation import diag, ones, vander
from remat.numpy.elementwise import divide, multiply, negative, sqrt, true_divide
from remat.numpy.manipulation import trim_zeros
from remat.numpy.shapes import atleast_1d, concatenate, roll
from remat.numpy.util import (
    _arr,
    _check_arraylike,
    _convert,
    _dtype,
    _promote_dtypes,
    _promote_dtypes_inexact,
    _shape,
    broadcast_shapes,
)

__all__ = [
    "poly", "polyadd", "polyder", "polydiv", "polyfit", "polyint", "polymul", "polysub",
    "polyval", "roots",
]


def _complex_dtype(d):
    real = np.dtype(d) if dtypes.kind(np.dtype(d)) in "fc" else dtypes.default_float_dtype()
    if dtypes.kind(real) == "c":
        return real
    return dtypes.canonicalize_dtype(dtypes.complex128 if real == dtypes.float64
                                     else dtypes.complex64)


def _element(x, i):
    return lax.reshape(lax.slice_in_dim(x, i, i + 1), ())


def poly(seq_of_zeros):
    """The coefficients of the monic polynomial with the given roots (or with the
    eigenvalues of a square matrix as roots)."""
    _check_arraylike("poly", seq_of_zeros)
    (z,) = _promote_dtypes_inexact(_arr(seq_of_zeros))
    z = atleast_1d(z)
    sh = _shape(z)
    if len(sh) == 2 and sh[0] == sh[1] and sh[0] != 0:
        z = linalg.eigvals(z)
    if z.ndim != 1:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    d = _dtype(z)
    if not _shape(z)[0]:
        return lax.full((), 1, d)
    a = lax.full((1,), 1, d)
    zero = lax.full((1,), 0, d)
    for k in range(_shape(z)[0]):
        # (x - z_k) * a(x): the coefficients shift up one place, minus z_k times a
        a = lax.sub(lax.concatenate([a, zero], 0),
                    lax.mul(_element(z, k), lax.concatenate([zero, a], 0)))
    return a


def _pad_front(x, n):
    return lax.pad(x, lax.full((), 0, _dtype(x)), [(n, 0, 0)]) if n else x


def polyadd(a1, a2):
    """The sum of two polynomials (the shorter one aligned at the constant term)."""
    _check_arraylike("polyadd", a1, a2)
    a1, a2 = _promote_dtypes(_arr(a1), _arr(a2))
    n = max(_shape(a1)[0], _shape(a2)[0])
    return lax.add(_pad_front(a1, n - _shape(a1)[0]), _pad_front(a2, n - _shape(a2)[0]))


def polysub(a1, a2):
    """The difference of two polynomials."""
    _check_arraylike("polysub", a1, a2)
    a1, a2 = _promote_dtypes(_arr(a1), _arr(a2))
    return polyadd(a1, negative(a2))


def polymul(a1, a2, *, trim_leading_zeros=False):
    """The product of two polynomials (a full convolution of their coefficients)."""
    _check_arraylike("polymul", a1, a2)
    a1, a2 = _promote_dtypes_inexact(_arr(a1), _arr(a2))
    if trim_leading_zeros and (_shape(a1)[0] > 1 or _shape(a2)[0] > 1):
        a1, a2 = trim_zeros(a1, trim="f"), trim_zeros(a2, trim="f")
    if not _shape(a1)[0]:
        a1 = lax.full((1,), 0, _dtype(a2))
    if not _shape(a2)[0]:
        a2 = lax.full((1,), 0, _dtype(a1))
    return convolve(a1, a2, mode="full")


def polydiv(u, v, *, trim_leading_zeros=False):
    """The quotient and remainder of polynomial long division of ``u`` by ``v`` (the
    remainder keeps ``u``'s length unless ``trim_leading_zeros``, which needs concrete
    values)."""
    _check_arraylike("polydiv", u, v)
    u, v = _promote_dtypes_inexact(_arr(u), _arr(v))
    m, n = _shape(u)[0] - 1, _shape(v)[0] - 1
    d = _dtype(u)
    scale = lax.div(lax.full((), 1, d), _element(v, 0))
    quotient = []
    for k in range(m - n + 1):
        factor = lax.mul(scale, _element(u, k))
        quotient.append(factor)
        term = lax.pad(lax.mul(factor, v), lax.full((), 0, d), [(k, m - n - k, 0)])
        u = lax.sub(u, term)
    q = lax.full((1,), 0, d) if not quotient else \
        lax.concatenate([lax.reshape(f, (1,)) for f in quotient], 0)
    if trim_leading_zeros:
        tol = float(np.sqrt(dtypes.finfo(d).eps))
        values = np.abs(np.asarray(core.concrete_or_error(
            u, "The error arose in polydiv with trim_leading_zeros=True.")))
        big = np.flatnonzero(values >= tol)
        u = lax.slice_in_dim(u, int(big[0]) if big.size else _shape(u)[0], _shape(u)[0])
    return q, u


def polyder(p, m=1):
    """The ``m``-th derivative of a polynomial."""
    _check_arraylike("polyder", p)
    m = operator.index(core.concrete_or_error(m, "'m' argument of jnp.polyder"))
    (p,) = _promote_dtypes_inexact(_arr(p))
    if m < 0:
        raise ValueError("Order of derivative must be positive")
    if m == 0:
        return p
    n = _shape(p)[0]
    powers = np.arange(n - 1, m - 1, -1)  # the exponents of the surviving terms
    coeff = np.prod([powers - j for j in range(m)], axis=0) if n > m else np.zeros(0)
    kept = lax.slice_in_dim(p, 0, max(n - m, 0))
    return lax.mul(kept, _arr(coeff.astype(_dtype(p))))


def polyint(p, m=1, k=None):
    """The ``m``-th antiderivative of a polynomial, with integration constants ``k`` (a
    scalar for all, or one per integration, the last first)."""
    m = operator.index(core.concrete_or_error(m, "'m' argument of jnp.polyint"))
    k = 0 if k is None else k
    _check_arraylike("polyint", p, k)
    p, k = _promote_dtypes_inexact(_arr(p), _arr(k))
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    k = atleast_1d(k)
    if _shape(k)[0] == 1:
        k = lax.broadcast_in_dim(lax.reshape(k, ()), (m,), ())
    if _shape(k) != (m,):
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or m.")
    if m == 0:
        return p
    n = _shape(p)[0]
    grid = np.arange(n + m)[None, :] - np.arange(m)[:, None]
    coeff = np.maximum(1, grid).prod(0)[::-1]
    return true_divide(concatenate([p, k]), _arr(coeff.astype(_dtype(p))))


def polyval(p, x, *, unroll=16):
    """The polynomial ``p`` at ``x`` by Horner's rule (a ``scan`` over the coefficients;
    ``p`` may have trailing axes, one polynomial per position)."""
    _check_arraylike("polyval", p, x)
    p, x = _promote_dtypes(_arr(p), _arr(x))
    shape = broadcast_shapes(_shape(p)[1:], _shape(x))
    y = lax.full(shape, 0, _dtype(x))

    def horner(acc, coefficient):
        return lax.add(multiply(acc, x), coefficient), None

    return lax.scan(horner, y, p, unroll=unroll)[0]


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """The least-squares polynomial of degree ``deg`` through ``(x, y)`` (``y`` may hold
    several data sets as columns), optionally weighted by ``w``; ``full`` adds the
    residuals, rank, singular values and ``rcond``, ``cov`` the coefficients' covariance."""
    _check_arraylike("polyfit", x, y, *([] if w is None else [w]))
    x, y = _arr(x), _arr(y)
    deg = int(core.concrete_or_error(deg, "deg must be int"))
    order = deg + 1
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if x.ndim != 1:
        raise TypeError("expected 1D vector for x")
    if not _shape(x)[0]:
        raise TypeError("expected non-empty vector for x")
    if y.ndim < 1 or y.ndim > 2:
        raise TypeError("expected 1D or 2D array for y")
    if _shape(x)[0] != _shape(y)[0]:
        raise TypeError("expected x and y to have same length")
    if rcond is None:
        rcond = _shape(x)[0] * float(dtypes.finfo(_dtype(_promote_dtypes_inexact(x)[0])).eps)
    rcond = float(core.concrete_or_error(rcond, "rcond must be float"))
    lhs, rhs = vander(x, order), y
    if w is not None:
        (w,) = _promote_dtypes_inexact(_arr(w))
        if w.ndim != 1:
            raise TypeError("expected a 1-d array for weights")
        if _shape(w)[0] != _shape(y)[0]:
            raise TypeError("expected w and y to have the same length")
        lhs = multiply(lhs, lax.broadcast_in_dim(w, _shape(lhs), (0,)))
        rhs = multiply(rhs, w if rhs.ndim == 1 else lax.broadcast_in_dim(w, _shape(rhs), (0,)))
    (lhs,) = _promote_dtypes_inexact(lhs)
    scale = sqrt(lax.reduce_sum(lax.mul(lhs, lhs), (0,)))
    lhs = divide(lhs, lax.broadcast_in_dim(scale, _shape(lhs), (1,)))
    c, resids, rank, s = linalg.lstsq(lhs, rhs, rcond)
    c = divide(c, scale if c.ndim == 1 else lax.broadcast_in_dim(scale, _shape(c), (0,)))
    if full:
        return c, resids, rank, s, _arr(rcond)
    if cov:
        vbase = divide(linalg.inv(dot(lax.transpose(lhs, (1, 0)), lhs)), outer(scale, scale))
        if cov == "unscaled":
            fac = lax.full((), 1, _dtype(vbase))
        else:
            if _shape(x)[0] <= order:
                raise ValueError("the number of data points must exceed order to scale the "
                                 "covariance matrix")
            fac = divide(resids, _shape(x)[0] - order)
        fac = atleast_1d(fac)
        if y.ndim == 1:
            return c, multiply(vbase, lax.reshape(fac, (1,) + _shape(fac)))
        return c, multiply(lax.expand_dims(vbase, (2,)), lax.reshape(fac, (1, 1) + _shape(fac)))
    return c


def _roots_no_zeros(p):
    n = _shape(p)[0]
    if n < 2:
        return lax.full((0,), 0, _complex_dtype(_dtype(p)))
    companion = diag(ones((n - 2,), _dtype(p)), -1)
    first_row = lax.reshape(negative(divide(lax.slice_in_dim(p, 1, n), _element(p, 0))),
                            (1, n - 1))
    companion = lax.concatenate([first_row, lax.slice_in_dim(companion, 1, n - 1)], 0)
    return linalg.eigvals(companion)


def roots(p, *, strip_zeros=True):
    """The roots of a polynomial (complex): the eigenvalues of its companion matrix.
    Leading zeros are stripped (needing concrete ``p``); with ``strip_zeros=False`` their
    count is traced and the roots they would add are NaN."""
    _check_arraylike("roots", p)
    (p,) = _promote_dtypes_inexact(_arr(p))
    p = atleast_1d(p)
    if p.ndim != 1:
        raise ValueError("Input must be a rank-1 array.")
    n = _shape(p)[0]
    if n < 2:
        return lax.full((0,), 0, _complex_dtype(_dtype(p)))
    is_zero = lax.eq(p, lax.full((), 0, _dtype(p)))
    all_zero = lax.reduce_and(is_zero, (0,))
    first_nonzero = lax.argmin(_convert(is_zero, dtypes.int32), 0, dtypes.int32)
    leading = lax.select(all_zero, lax.full((), n, dtypes.int32), first_nonzero)
    if strip_zeros:
        k = int(np.asarray(core.concrete_or_error(
            leading, "The error occurred in the jnp.roots() function. To use this within a "
                     "JIT-compiled context, pass strip_zeros=False, but be aware that "
                     "leading zeros will result in some returned roots being set to NaN.")))
        return _roots_no_zeros(lax.slice_in_dim(p, k, n))
    p = lax.select(lax.broadcast_in_dim(all_zero, (n,), ()), lax.full((n,), 1, _dtype(p)), p)
    r = _roots_no_zeros(roll(p, negative(leading)))
    r = lax.sort((_convert(lax.eq(r, lax.full((), 0, _dtype(r))), dtypes.int32), r),
                 dimension=0, num_keys=1)[1]
    valid = lax.lt(lax.iota(dtypes.int32, n - 1), lax.sub(lax.full((), n - 1, dtypes.int32),
                                                          leading))
    return lax.select(valid, r, lax.full((n - 1,), complex(np.nan, np.nan), _dtype(r)))

