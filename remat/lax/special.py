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
             At x = +inf it returns the limit ±0 where JAX returns NaN. Negative
             non-integer x: correct values (JAX's are often far off there). m > 170,
             where m! overflows float64: ±inf for 0 < x <= 1 (the true value overflows
             too), NaN elsewhere.
===========  ===========================================================================
"""

import functools
import math
from decimal import Decimal, localcontext
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
            return f(*flat).reshape(shape).astype(dtype, copy=False)

    return wrapper


def _horner(coeffs, t):
    """Polynomial with coefficients highest degree first."""
    acc = np.full_like(t, coeffs[0])
    for c in coeffs[1:]:
        acc = acc * t + c
    return acc


def _shift_up(x, limit, term):
    """Recurrence to the asymptotic region: for each x > 0 the least n with x + n >= limit;
    returns (x + n, sum_{k<n} term(x + k)), summing only over the elements still below."""
    acc = np.zeros_like(x)
    n = np.zeros_like(x)
    idx = np.flatnonzero(x < limit)
    k = 0
    while idx.size:
        acc[idx] += term(x[idx] + k)
        n[idx] += 1
        k += 1
        idx = idx[x[idx] + k < limit]
    return x + n, acc


def _int_power(t, n):
    """t ** n for a Python int n >= 1 by binary powering (much faster than np.power)."""
    result = None
    while True:
        if n & 1:
            result = t if result is None else result * t
        n >>= 1
        if not n:
            return result
        t = t * t


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
    """Inverse error function: Giles' (2010) approximation (an asymptotic one in the far tail)
    refined by two Halley steps on erf(r) = |x| (|x| <= 0.5) or erfc(r) = 1 - |x| (exact for
    |x| >= 0.5, so values next to ±1 keep full precision)."""
    a = np.abs(x)
    q = 1.0 - a
    w = -np.log(q * (1.0 + a))
    r = np.empty_like(a)
    central = w < 5.0
    r[central] = _horner(_GILES_CENTRAL, w[central] - 2.5) * a[central]
    mid = (w >= 5.0) & (w < 16.0)
    r[mid] = _horner(_GILES_TAIL, np.sqrt(w[mid]) - 3.0) * a[mid]
    # Giles' tail polynomial is fitted for float32 (w < 16); past it (1 - |x| < 1e-7) use
    # the asymptotic inverse of erfc(r) ~ exp(-r^2) / (r sqrt(pi)) (1 - 1/(2 r^2)).
    far = ~(central | mid)  # |x| >= 1 and NaN too; fixed up below
    t = -np.log(q[far])
    r0 = np.sqrt(np.maximum(t - 0.5 * np.log(math.pi * t), 1.0))
    r[far] = np.sqrt(t - np.log(r0 * math.sqrt(math.pi)) + np.log1p(-0.5 / (r0 * r0)))
    tail = a > 0.5
    finite = a < 1.0
    for _ in range(2):
        f = np.empty_like(r)  # erf(r) - |x|, computed as 1 - |x| - erfc(r) in the tail
        f[tail] = q[tail] - erfc(r[tail])
        f[~tail] = erf(r[~tail]) - a[~tail]
        u = f / (2.0 / math.sqrt(math.pi) * np.exp(-r * r))  # Newton step f / f'
        r = np.where(finite, r - u / (1.0 + r * u), r)  # Halley, as f''/f' = -2r
    r = np.where(a == 1.0, np.inf, np.where(a > 1.0, np.nan, r))
    return np.copysign(r, x)


# --- Hurwitz zeta, lgamma ------------------------------------------------------------------

def _hurwitz_zeta(s, x):
    """Hurwitz zeta sum_{k>=0} (x + k)^-s for an int s >= 2 and float64 x > 0: the direct
    sum up to x + n >= max(12, s + 6), then the Euler-Maclaurin formula with 12 Bernoulli
    terms (their ratio is about ((s + 2j) / (2 pi w))^2, so the sum converges fast)."""
    w, acc = _shift_up(x, max(12.0, s + 6.0), lambda v: _int_power(1.0 / v, s))
    t = 1.0 / w
    # tail = w^(1-s) [1/(s-1) + t/2 + sum_j B_2j/(2j)! (s)_{2j-1} t^2j]
    series = 1.0 / (s - 1) + 0.5 * t
    term = s * (t * t)  # (s)_{2j-1} t^2j for j = 1
    for j, b in enumerate(_BERNOULLI[:12], 1):
        series += float(b / math.factorial(2 * j)) * term
        term = term * ((s + 2 * j - 1) * (s + 2 * j)) * (t * t)
    return acc + np.power(w, 1.0 - s) * series


def _lgamma_stirling(x):
    """Stirling's series for x >= 10: (x - 1/2) log x - x + log sqrt(2 pi) + sum B_2k/..."""
    coeffs = [float(b / (2 * k * (2 * k - 1))) for k, b in enumerate(_BERNOULLI[:8], 1)]
    t = 1.0 / x
    series = t * _horner(coeffs[::-1], t * t)
    return (x - 0.5) * (np.log(x) - 1.0) - 0.5 + _LOG_SQRT_2PI + series


# Around 2 (Abramowitz & Stegun 6.1.33 and its derivative, rearranged), for |z| < 2:
#   lgamma(2 + z) = (1 - gamma) z + sum_{k>=2} (-1)^k (zeta(k) - 1) / k z^k,
#   digamma(2 + z) = (1 - gamma) + sum_{k>=2} (-1)^k (zeta(k) - 1) z^(k-1);
# we use them on |z| <= 1/2 (28 terms reach 1e-18).
_KS = np.arange(2.0, 30.0)  # the k above
_ZETA_MINUS_1 = np.array([(-1) ** k * _hurwitz_zeta(k, np.array([2.0]))[0] for k in range(2, 30)])
_LGAMMA2_SERIES = tuple((_ZETA_MINUS_1 / _KS)[::-1])
_DIGAMMA2_SERIES = tuple(_ZETA_MINUS_1[::-1])


def _lgamma_near_2(z):
    """lgamma(2 + z) for |z| <= 1/2, exact in relative terms as z -> 0."""
    return z * (_horner(_LGAMMA2_SERIES, z) * z + (1.0 - _EULER_GAMMA))


def _digamma_near_2(z):
    """psi(2 + z) for |z| <= 1/2."""
    return z * _horner(_DIGAMMA2_SERIES, z) + (1.0 - _EULER_GAMMA)


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
    """cot(pi x) with an exact argument reduction to r in [-1/2, 1/2]; past |r| = 1/4 as
    tan(pi (1/2 - |r|)), which is exactly 0 at the half-integers. +-inf at the integers."""
    r = x - np.round(x)
    a = np.abs(r)
    return np.where(a < 0.25, 1.0 / np.tan(math.pi * r),
                    np.copysign(np.tan(math.pi * (0.5 - a)), r))


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
    hi = float(digits)
    with localcontext() as ctx:
        ctx.prec = 50
        return hi, float(Decimal(digits) - Decimal(hi))


# The positive zero of digamma, to 40 digits, and the Taylor coefficients there,
# psi^(k)(x0) / k! = (-1)^(k+1) zeta(k + 1, x0).
_PSI_ROOT_HI, _PSI_ROOT_LO = _decimal_split("1.461632144968362341262659542325721325")
_PSI_ROOT_SERIES = tuple((-1) ** k * _hurwitz_zeta(k, np.array([_PSI_ROOT_HI]))[0]
                         for k in range(23, 1, -1))
_PSI_ROOT_RADIUS = 0.25


def _digamma_asymptotic(x):
    """psi(x) ~ log x - 1/(2x) - sum B_2k / (2k x^2k) for x >= 10 (+inf included)."""
    coeffs = [float(b / (2 * k)) for k, b in enumerate(_BERNOULLI[:8], 1)]
    t = 1.0 / (x * x)
    return np.log(x) - 0.5 / x - t * _horner(coeffs[::-1], t)


def _digamma_positive(x):
    """psi(x) for x > 0 (and +inf), the same way as _lgamma_positive."""
    out = np.empty_like(x)
    root = np.abs(x - _PSI_ROOT_HI) <= _PSI_ROOT_RADIUS
    d = (x[root] - _PSI_ROOT_HI) - _PSI_ROOT_LO
    out[root] = d * _horner(_PSI_ROOT_SERIES, d)
    tiny = (x < 0.5) & ~root
    z = x[tiny]  # psi(z) = psi(2 + z) - 1/(1 + z) - 1/z
    out[tiny] = _digamma_near_2(z) - 1.0 / (1.0 + z) - 1.0 / z
    near1 = (x >= 0.5) & (x < 1.5) & ~root
    xm = x[near1]
    out[near1] = _digamma_near_2(xm - 1.0) - 1.0 / xm
    mid = (x >= 1.5) & (x < _ASYMPTOTIC_X) & ~root
    xm = x[mid]  # shift down into [1.5, 2.5): psi(x) = psi(x - n) + sum_{k=1..n} 1/(x - k)
    n = np.floor(xm - 1.5)
    acc = np.zeros_like(xm)
    for k in range(int(_ASYMPTOTIC_X) - 1, 0, -1):  # smallest terms first
        acc += np.where(k <= n, 1.0 / (xm - k), 0.0)
    out[mid] = _digamma_near_2(xm - n - 2.0) + acc
    big = x >= _ASYMPTOTIC_X
    out[big] = _digamma_asymptotic(x[big])
    return out


@_float64_impl
def digamma(x):
    """psi(x) = d/dx lgamma(x): the series of psi(2 + z) in zeta(k) - 1 with the recurrence
    psi(x + 1) = psi(x) + 1/x below 10 and the asymptotic series above; a Taylor series
    around the positive zero x0 = 1.4616... (in x - x0 computed in double-double) keeps the
    relative precision there; reflection psi(x) = psi(1 - x) - pi cot(pi x) for x <= 0, NaN
    at the poles."""
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


@_float64_impl
def polygamma(m, x):
    """psi^(m)(x) for integer m >= 0: digamma for m = 0; for m >= 1 and x > 0,
    (-1)^(m+1) m! zeta(m + 1, x) with the Hurwitz zeta from the direct sum plus the
    Euler-Maclaurin tail; for x <= 0 the reflection formula
    psi^(m)(x) = (-1)^m [psi^(m)(1 - x) - pi^(m+1) Q_m(cot pi x)] (backward stable: the
    error is a few ulps times the condition number). Poles, +inf and m > 170 as in the
    module docstring."""
    out = np.full_like(x, np.nan)
    valid = (m >= 0) & (np.floor(m) == m) & np.isfinite(m)
    zero = valid & (m == 0)
    out[zero] = digamma(x[zero])
    valid &= m > 0
    sign = np.where(m % 2 == 1, 1.0, -1.0)  # (-1)^(m+1)
    pos = valid & (x > 0) & (x < np.inf)
    for order in np.unique(m[pos]):
        sel = pos & (m == order)
        k = int(order)
        if k > 170:  # m! overflows: so does the result for x <= 1; not computed beyond
            out[sel] = np.where(x[sel] <= 1.0, sign[sel] * np.inf, np.nan)
            continue
        out[sel] = (-1.0) ** (k + 1) * float(math.factorial(k)) * _hurwitz_zeta(k + 1, x[sel])
    at_inf = valid & (x == np.inf)
    out[at_inf] = sign[at_inf] * 0.0
    neg = valid & (x <= 0)
    pole = neg & (np.floor(x) == x)
    out[pole] = np.where(sign[pole] > 0, np.inf, np.nan)
    neg &= ~pole
    for order in np.unique(m[neg & (m <= 170)]):
        sel = neg & (m == order)
        k = int(order)
        xs = x[sel]
        reflected = polygamma(np.full_like(xs, order), 1.0 - xs)
        cot_term = math.pi ** (k + 1) * _horner(_cot_derivative_poly(k), _cot_pi(xs))
        out[sel] = (-1.0) ** k * (reflected - cot_term)
    return out
