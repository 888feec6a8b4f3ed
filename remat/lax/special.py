"""Special functions NumPy lacks, vectorized over float arrays (NumPy only, no SciPy).

Every function evaluates in float64 and casts back to the input dtype, so float32 and
float16 results are the float64 value rounded once (within an ulp of correctly rounded).
Float64 accuracy is a few ulps except where the problem itself is ill-conditioned (near the
zeros of lgamma/digamma on the negative axis). Edge values follow JAX (``jax.lax``):

===========  ===========================================================================
erf/erfc     erf(±inf) = ±1, erfc(+inf) = 0, erfc(-inf) = 2, NaN -> NaN.
erf_inv      erf_inv(±1) = ±inf, NaN outside [-1, 1], erf_inv(-0.0) = -0.0.
lgamma       log|Γ(x)|; +inf at 0, the negative integers and ±inf.
digamma      NaN at 0 and the negative integers (JAX's choice) and at -inf; +inf at +inf.
polygamma    NaN unless m is a non-negative integer; m = 0 is digamma. For m >= 1 at
             x = 0 or a negative integer (or -inf): +inf for odd m (the true limit from
             both sides) and NaN for even m (the sign differs on the two sides), like JAX.
             At x = +inf it returns the limit ±0 where JAX returns NaN.
===========  ===========================================================================
"""

import functools
import math
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np

# Bernoulli numbers B_2, B_4, ..., B_26 (exact).
_BERNOULLI = [Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30),
              Fraction(5, 66), Fraction(-691, 2730), Fraction(7, 6), Fraction(-3617, 510),
              Fraction(43867, 798), Fraction(-174611, 330), Fraction(854513, 138),
              Fraction(-236364091, 2730), Fraction(8553103, 6)]

_ASYMPTOTIC_X = 10.0  # lgamma/digamma switch to their asymptotic series from here on
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_EULER_GAMMA = 0.57721566490153286061


def _float64_impl(f):
    """Evaluate in float64 on a flat array, silently, and return the input dtype and shape."""

    @functools.wraps(f)
    def wrapper(*args):
        args = np.broadcast_arrays(*(np.asarray(a) for a in args))
        dtype, shape = args[-1].dtype, args[-1].shape
        flat = [a.astype(np.float64).ravel() for a in args]
        with np.errstate(all="ignore"):
            out = f(*flat)
        return out.reshape(shape).astype(dtype, copy=False)

    return wrapper


def _horner(coeffs, t):
    """Polynomial with coefficients highest degree first."""
    acc = np.full_like(t, coeffs[0])
    for c in coeffs[1:]:
        acc = acc * t + c
    return acc


def _shift_up(x, limit, term):
    """Recurrence to the asymptotic region: for each x > 0 find the least n with x + n >= limit
    and return (x + n, sum_{k<n} term(x + k, idx)) where idx selects the elements summed."""
    acc = np.zeros_like(x)
    n = np.zeros_like(x)
    idx = np.flatnonzero(x < limit)
    k = 0
    while idx.size:
        acc[idx] += term(x[idx] + k, idx)
        n[idx] += 1
        k += 1
        idx = idx[x[idx] + k < limit]
    return x + n, acc


# --- erf, erfc ------------------------------------------------------------------------------
# W. J. Cody, "Rational Chebyshev approximations for the error function", Math. Comp. 23
# (1969) 631-638: the coefficients of his three near-minimax rational approximations.

_ERF_P = (1.85777706184603153e-1, 3.16112374387056560e0, 1.13864154151050156e2,
          3.77485237685302021e2, 3.20937758913846947e3)
_ERF_Q = (1.0, 2.36012909523441209e1, 2.44024637934444173e2, 1.28261652607737228e3,
          2.84423683343917062e3)
_ERFC_P = (2.15311535474403846e-8, 5.64188496988670089e-1, 8.88314979438837594e0,
           6.61191906371416295e1, 2.98635138197400131e2, 8.81952221241769090e2,
           1.71204761263407058e3, 2.05107837782607147e3, 1.23033935479799725e3)
_ERFC_Q = (1.0, 1.57449261107098347e1, 1.17693950891312499e2, 5.37181101862009858e2,
           1.62138957456669019e3, 3.29079923573345963e3, 4.36261909014324716e3,
           3.43936767414372164e3, 1.23033935480374942e3)
_ERFC_TAIL_P = (1.63153871373020978e-2, 3.05326634961232344e-1, 3.60344899949804439e-1,
                1.25781726111229246e-1, 1.60837851487422766e-2, 6.58749161529837803e-4)
_ERFC_TAIL_Q = (1.0, 2.56852019228982242e0, 1.87295284992346047e0, 5.27905102951428412e-1,
                6.05183413124413191e-2, 2.33520497626869185e-3)
_ERF_SMALL = 0.46875  # below this erf is direct, above it erfc is


def _exp_minus_square(y):
    """exp(-y*y) without the error of rounding y*y: split y = h + l with h*h exact (Cody)."""
    h = np.trunc(y * 16.0) / 16.0
    return np.exp(-h * h) * np.exp(-(y - h) * (y + h))


def _erf_small(x):
    """erf(x) for |x| <= 0.46875."""
    t = x * x
    return x * _horner(_ERF_P, t) / _horner(_ERF_Q, t)


def _erfc_large(y):
    """erfc(y) for y > 0.46875 (+inf included), with no cancellation in the tail."""
    out = np.empty_like(y)
    mid = y <= 4.0
    ym = y[mid]
    out[mid] = _exp_minus_square(ym) * _horner(_ERFC_P, ym) / _horner(_ERFC_Q, ym)
    yt = np.minimum(y[~mid], 40.0)  # erfc(40) underflows to 0 already; keeps inf out
    t = 1.0 / (yt * yt)
    r = t * _horner(_ERFC_TAIL_P, t) / _horner(_ERFC_TAIL_Q, t)
    out[~mid] = _exp_minus_square(yt) * (1.0 / math.sqrt(math.pi) - r) / yt
    return out


@_float64_impl
def erf(x):
    """Error function, from Cody's rational approximations (1969)."""
    out = np.empty_like(x)
    small = ~(np.abs(x) > _ERF_SMALL)  # NaN included
    out[small] = _erf_small(x[small])
    xl = x[~small]
    out[~small] = np.copysign(1.0 - _erfc_large(np.abs(xl)), xl)
    return out


@_float64_impl
def erfc(x):
    """Complementary error function 1 - erf(x), from Cody's rational approximations (1969);
    for large x it is exp(-x^2) times a rational function, so it keeps full relative precision
    down to the underflow threshold."""
    out = np.empty_like(x)
    small = ~(np.abs(x) > _ERF_SMALL)
    out[small] = 1.0 - _erf_small(x[small])
    xl = x[~small]
    e = _erfc_large(np.abs(xl))
    out[~small] = np.where(xl > 0, e, 2.0 - e)
    return out


# --- erf_inv --------------------------------------------------------------------------------
# Initial guess: M. Giles, "Approximating the erfinv function", GPU Computing Gems (2010),
# single-precision polynomials (relative error ~1e-7), then Halley steps in float64.

_GILES_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                  0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_GILES_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
               0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


@_float64_impl
def erf_inv(x):
    """Inverse error function: Giles' (2010) approximation refined by two Halley steps on
    erf(r) = |x| (|x| <= 0.5) or erfc(r) = 1 - |x| (exact for |x| >= 0.5, so values next to
    ±1 keep full precision)."""
    a = np.abs(x)
    q = 1.0 - a
    w = -np.log(q * (1.0 + a))
    r = np.where(w < 5.0, _horner(_GILES_CENTRAL, w - 2.5),
                 _horner(_GILES_TAIL, np.sqrt(w) - 3.0)) * a
    near_one = a > 0.5
    finite = a < 1.0
    for _ in range(2):
        f = np.where(near_one, q - erfc(r), erf(r) - a)  # erf(r) - |x| either way
        u = f / (2.0 / math.sqrt(math.pi) * np.exp(-r * r))  # Newton step f / f'
        r = np.where(finite, r - u / (1.0 + r * u), r)  # Halley, as f''/f' = -2r
    r = np.where(a == 1.0, np.inf, np.where(a > 1.0, np.nan, r))
    return np.copysign(r, x)


# --- lgamma ---------------------------------------------------------------------------------

def _lgamma_stirling(x):
    """Stirling's series for x >= 10: (x - 1/2) log x - x + log sqrt(2 pi) + sum B_2k/..."""
    coeffs = [float(b / (2 * k * (2 * k - 1))) for k, b in enumerate(_BERNOULLI[:8], 1)]
    t = 1.0 / x
    series = t * _horner(coeffs[::-1], t * t)
    return (x - 0.5) * (np.log(x) - 1.0) - 0.5 + _LOG_SQRT_2PI + series


@_float64_impl
def _hurwitz_zeta(s, x):
    """Hurwitz zeta sum_{k>=0} (x + k)^-s for s > 1 and x > 0 (s may vary per element):
    shift x up by the direct sum, then the Euler-Maclaurin formula with 12 Bernoulli terms."""
    limit = max(16.0, float(np.max(s, initial=0.0)) + 6.0)
    w, acc = _shift_up(x, limit, lambda v, idx: v ** -s[idx])
    ws = w ** -s
    tail = w * ws / (s - 1.0) + 0.5 * ws
    term = ws / w * s  # (s)_{2j-1} w^(-s-2j+1) for j = 1
    for j, b in enumerate(_BERNOULLI[:12], 1):
        tail += float(b / math.factorial(2 * j)) * term
        term = term * (s + 2 * j - 1) * (s + 2 * j) / (w * w)
    return acc + tail


# lgamma(2 + z) = (1 - gamma) z + sum_{k>=2} (-1)^k (zeta(k) - 1) / k z^k, for |z| < 2
# (Abramowitz & Stegun 6.1.33 rearranged); we use it on |z| <= 1/2.
_KS = np.arange(2.0, 30.0)
_LGAMMA2_SERIES = tuple(((-1.0) ** _KS * _hurwitz_zeta(_KS, np.full_like(_KS, 2.0)) / _KS)[::-1])


def _lgamma_near_2(z):
    """lgamma(2 + z) for |z| <= 1/2, exact in relative terms as z -> 0."""
    return z * (_horner(_LGAMMA2_SERIES, z) * z + (1.0 - _EULER_GAMMA))


def _lgamma_positive(x):
    """log Gamma(x) for x > 0 (and +inf)."""
    out = np.empty_like(x)
    tiny = x < 0.5
    z = x[tiny]  # lgamma(x) = lgamma(2 + z) - log(1 + z) - log(z)
    out[tiny] = _lgamma_near_2(z) - np.log1p(z) - np.log(z)
    near1 = (x >= 0.5) & (x < 1.5)
    z = x[near1] - 1.0  # exact; lgamma(x) = lgamma(2 + z) - log(1 + z)
    out[near1] = _lgamma_near_2(z) - np.log1p(z)
    mid = (x >= 1.5) & (x < _ASYMPTOTIC_X)
    xm = x[mid]  # shift down into [1.5, 2.5): lgamma(x) = lgamma(x - n) + log prod (x - k)
    n = np.floor(xm - 1.5)
    prod = np.ones_like(xm)
    for k in range(1, int(_ASYMPTOTIC_X)):
        prod = np.where(k <= n, prod * (xm - k), prod)
    out[mid] = _lgamma_near_2(xm - n - 2.0) + np.log(prod)
    big = x >= _ASYMPTOTIC_X
    out[big] = _lgamma_stirling(x[big])
    return out


def _abs_sin_pi(x):
    """|sin(pi x)| with an exact argument reduction (period 1)."""
    return np.abs(np.sin(math.pi * (x - np.round(x))))


def _cot_pi(x):
    """cot(pi x) with an exact argument reduction (period 1); +-inf at the integers."""
    return 1.0 / np.tan(math.pi * (x - np.round(x)))


@_float64_impl
def lgamma(x):
    """log|Gamma(x)|: the series of lgamma(2 + z) in zeta(k) - 1 near 1 and 2, the recurrence
    between 1.5 and 10, Stirling's series above, and the reflection formula
    lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x) for x <= 0."""
    out = np.full_like(x, np.nan)
    pos = x > 0
    out[pos] = _lgamma_positive(x[pos])
    neg = x <= 0
    xn = x[neg]
    val = math.log(math.pi) - np.log(_abs_sin_pi(xn)) - _lgamma_positive(1.0 - xn)
    out[neg] = np.where(np.floor(xn) == xn, np.inf, val)
    return out


# --- digamma and polygamma --------------------------------------------------------------------

def _decimal_split(digits):
    """A constant as a float64 pair hi + lo (hi correctly rounded)."""
    getcontext().prec = 50
    hi = float(digits)
    return hi, float(Decimal(digits) - Decimal(hi))


# The positive zero of digamma, to 40 digits, and the Taylor coefficients there,
# psi^(k)(x0) / k! = (-1)^(k+1) zeta(k + 1, x0).
_PSI_ROOT_HI, _PSI_ROOT_LO = _decimal_split("1.461632144968362341262659542325721325")
_KS = np.arange(2.0, 24.0)
_PSI_ROOT_SERIES = tuple(
    ((-1.0) ** _KS * _hurwitz_zeta(_KS, np.full_like(_KS, _PSI_ROOT_HI)))[::-1])
_PSI_ROOT_RADIUS = 0.25


def _digamma_asymptotic(x):
    """psi(x) ~ log x - 1/(2x) - sum B_2k / (2k x^2k) for x >= 10 (+inf included)."""
    coeffs = [float(b / (2 * k)) for k, b in enumerate(_BERNOULLI[:8], 1)]
    t = 1.0 / (x * x)
    return np.log(x) - 0.5 / x - t * _horner(coeffs[::-1], t)


def _digamma_positive(x):
    out = np.empty_like(x)
    root = np.abs(x - _PSI_ROOT_HI) <= _PSI_ROOT_RADIUS
    d = (x[root] - _PSI_ROOT_HI) - _PSI_ROOT_LO
    out[root] = d * _horner(_PSI_ROOT_SERIES, d)
    other = ~root
    w, acc = _shift_up(x[other], _ASYMPTOTIC_X, lambda v, idx: 1.0 / v)
    out[other] = _digamma_asymptotic(w) - acc
    return out


@_float64_impl
def digamma(x):
    """psi(x) = d/dx lgamma(x): recurrence psi(x) = psi(x + 1) - 1/x up to 10 and the
    asymptotic series there; a Taylor series around the positive zero x0 = 1.4616... (in
    x - x0 computed in double-double) keeps the relative precision there; reflection
    psi(x) = psi(1 - x) - pi cot(pi x) for x <= 0, NaN at the poles."""
    out = np.full_like(x, np.nan)
    pos = x > 0
    out[pos] = _digamma_positive(x[pos])
    neg = x <= 0
    xn = x[neg]
    val = _digamma_positive(1.0 - xn) - math.pi * _cot_pi(xn)
    out[neg] = np.where(np.floor(xn) == xn, np.nan, val)
    return out


@functools.cache
def _cot_derivative_poly(m):
    """Q_m with d^m/du^m cot u = (-1)^m Q_m(cot u): Q_0 = c, Q_{k+1} = (1 + c^2) Q_k'.
    Returned highest degree first."""
    q = np.polynomial.Polynomial([0.0, 1.0])
    for _ in range(m):
        q = np.polynomial.Polynomial([1.0, 0.0, 1.0]) * q.deriv()
    return tuple(q.coef[::-1])


_FACTORIALS = np.array([float(math.factorial(k)) for k in range(171)] + [np.inf])


@_float64_impl
def polygamma(m, x):
    """psi^(m)(x) for integer m >= 0: digamma for m = 0; for m >= 1 and x > 0,
    (-1)^(m+1) m! zeta(m + 1, x) with the Hurwitz zeta from the direct sum plus the
    Euler-Maclaurin tail; for x <= 0 the reflection formula
    psi^(m)(x) = (-1)^m [psi^(m)(1 - x) - pi^(m+1) Q_m(cot pi x)]. Poles as in the module
    docstring; factorials overflow float64 beyond m = 170, as in JAX."""
    out = np.full_like(x, np.nan)
    valid = (m >= 0) & (np.floor(m) == m) & np.isfinite(m)
    zero = valid & (m == 0)
    out[zero] = digamma(x[zero])
    valid &= m > 0
    sign = np.where(m % 2 == 1, 1.0, -1.0)  # (-1)^(m+1)
    mi = np.minimum(m, 171.0)
    pos = valid & (x > 0) & (x < np.inf)
    s = m[pos] + 1.0
    out[pos] = sign[pos] * _FACTORIALS[mi[pos].astype(np.intp)] * _hurwitz_zeta(s, x[pos])
    at_inf = valid & (x == np.inf)
    out[at_inf] = sign[at_inf] * 0.0
    neg = valid & (x <= 0)
    pole = neg & (np.floor(x) == x)
    out[pole] = np.where(sign[pole] > 0, np.inf, np.nan)
    neg &= ~pole
    for order in np.unique(m[neg]):
        sel = neg & (m == order)
        k = int(order)
        xs = x[sel]
        reflected = polygamma(np.full_like(xs, order), 1.0 - xs)
        cot_term = math.pi ** (k + 1) * _horner(_cot_derivative_poly(k), _cot_pi(xs))
        out[sel] = (-1.0) ** k * (reflected - cot_term)
    return out
