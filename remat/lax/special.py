"""Numerical kernels of the special-function primitives: SciPy's ``scipy.special`` evaluated
in float64 (complex128 for complex inputs) and rounded once to the input dtype, so float32,
float16 and bfloat16 results are within an ulp of the correctly rounded value. NumPy ports
of JAX's series are used where SciPy has no function (``igamma_grad_a``,
``random_gamma_grad``). Edge values follow JAX (``jax.lax``) where JAX defines them:

===========  ===========================================================================
erf/erfc     erf(±inf) = ±1, erfc(+inf) = 0, erfc(-inf) = 2, NaN -> NaN.
erf_inv      erf_inv(±1) = ±inf, NaN outside [-1, 1], erf_inv(-0.0) = -0.0.
lgamma       log|Γ(x)|; +inf at 0, the negative integers and ±inf.
digamma      NaN at 0 and the negative integers (JAX's choice) and at -inf; +inf at +inf.
polygamma    NaN unless m is a non-negative integer; m = 0 is digamma. For m >= 1 at
             x = 0 or a negative integer (or -inf): +inf for odd m (the true limit from
             both sides) and NaN for even m (the sign differs on the two sides), like JAX.
             At x = +inf it returns the limit ±0 where JAX returns NaN. Negative
             non-integer x: correct values (JAX's are often far off there). Orders past
             170, where m! overflows float64, go through logarithms for x > 0 (NaN for
             negative non-integer x).
igamma(c)    SciPy's values: P(0, x > 0) = 1 (JAX gives NaN for 0 < x < 1), NaN for a < 0,
             x < 0 or a = x = 0.
zeta         SciPy's Hurwitz zeta: NaN for x < 1, +inf at x = 1 and at the poles q = 0,
             -1, ... (JAX: NaN there for some x).
===========  ===========================================================================
"""

import functools

import numpy as np

from remat.runtime.lazy_imports import LazyModule, lazy_function

sc = LazyModule("scipy.special")

_EPS64 = np.finfo(np.float64).eps
_LOG_MAX64 = float(np.log(np.finfo(np.float64).max))


def float64_kernel(f):
    """Evaluate ``f`` on float64 (complex128) copies of its broadcast arguments, with
    floating-point warnings off, and return the dtype of the last argument."""

    @functools.wraps(f)
    def wrapper(*args):
        args = np.broadcast_arrays(*(np.asarray(a) for a in args))
        dtype = args[-1].dtype
        wide = np.complex128 if dtype.kind == "c" else np.float64
        with np.errstate(all="ignore"):
            out = f(*(a.astype(wide) for a in args))
            return np.asarray(out).astype(dtype, copy=False)

    return wrapper


def scipy_kernel(name):
    """``float64_kernel`` of ``scipy.special``'s function ``name``, SciPy imported at its first
    call."""
    return float64_kernel(lazy_function(sc, name))


# --- error function -----------------------------------------------------------------------

erf = scipy_kernel("erf")
erfc = scipy_kernel("erfc")


@float64_kernel
def erf_inv(x):
    """Inverse error function; keeps the sign of a zero (SciPy returns +0.0 for -0.0)."""
    return np.where(x == 0, x, sc.erfinv(x))


# --- gamma family -------------------------------------------------------------------------

@float64_kernel
def lgamma(x):
    """log|Gamma(x)|, with +inf at -inf as JAX (SciPy gives -inf there); below 1e-300 in
    magnitude it is -log|x| (SciPy overflows to +inf for subnormal x)."""
    tiny = (np.abs(x) < 1e-300) & (x != 0)
    return np.where(x == -np.inf, np.inf,
                    np.where(tiny, -np.log(np.abs(np.where(tiny, x, 1.0))), sc.gammaln(x)))


def _cot_pi(x):
    """cot(pi x) with an exact argument reduction to r in [-1/2, 1/2]; past |r| = 1/4 as
    tan(pi (1/2 - |r|)), which is exactly 0 at the half-integers."""
    r = x - np.round(x)
    a = np.abs(r)
    return np.where(a < 0.25, 1.0 / np.tan(np.pi * r), np.copysign(np.tan(np.pi * (0.5 - a)), r))


def _digamma(x):
    """psi(x) in float64, NaN at the poles 0, -1, -2, ... and at -inf (SciPy: ±inf). For
    x < 0 by the reflection psi(1 - x) - pi cot(pi x) with an exact argument reduction
    (SciPy's own loses up to 1e-7 relative next to the poles)."""
    pole = (x <= 0) & (np.floor(x) == x)
    negative = x < 0
    reflected = sc.psi(1.0 - x) - np.pi * _cot_pi(np.where(negative, x, 0.5))
    return np.where(pole, np.nan, np.where(negative, reflected, sc.psi(x)))


digamma = float64_kernel(_digamma)

_LARGE_ORDER = 170  # past this m! overflows: it is taken as exp(lgamma(m + 1))


@float64_kernel
def polygamma(m, x):
    """psi^(m)(x) for integer m >= 0; edge values as in the module docstring."""
    valid = (m >= 0) & (np.floor(m) == m) & np.isfinite(m)
    mm = np.where(valid, m, 1.0)
    out = sc.polygamma(np.minimum(mm, _LARGE_ORDER).astype(np.int64), x)
    large = valid & (m > _LARGE_ORDER)
    out[large & (x < 0)] = np.nan  # not computed: the reflection formula overflows there
    large &= x > 0
    if large.any():  # (-1)^(m+1) m! zeta(m + 1, x) through logarithms
        ml, xl = m[large], x[large]
        sign = np.where(ml % 2 == 1, 1.0, -1.0)
        out[large] = sign * np.exp(sc.gammaln(ml + 1) + np.log(sc.zeta(ml + 1, xl)))
    odd = mm % 2 == 1
    pole = (x <= 0) & (np.floor(x) == x)  # includes -inf
    out = np.where(pole, np.where(odd, np.inf, np.nan), out)
    out = np.where(x == np.inf, np.where(odd, 0.0, -0.0), out)
    out = np.where(m == 0, _digamma(x), out)
    return np.where(valid, out, np.nan)


igamma = scipy_kernel("gammainc")
igammac = scipy_kernel("gammaincc")


# --- derivatives of the incomplete gamma function (ported from JAX's lax/special.py) ------

def _converge(step, state, active, limit):
    """Iterate ``step(state, idx) -> still_active`` on the indices still active, at most
    ``limit`` times; ``state`` is a dict of flat float64 arrays updated in place."""
    idx = np.flatnonzero(active)
    for _ in range(limit):
        if not idx.size:
            return
        idx = idx[step(state, idx)]


def _igamma_series(ax, x, a, enabled, sample):
    """The power series of P(a, x) differentiated in a (x <= 1 or x <= a)."""
    s = {"r": a.copy(), "c": np.ones_like(a), "ans": np.ones_like(a), "dc_da": np.zeros_like(a),
         "dans_da": np.zeros_like(a)}

    def step(s, i):
        r = s["r"][i] + 1.0
        xi, c = x[i], s["c"][i]
        dc_da = s["dc_da"][i] * (xi / r) - (c * xi) / (r * r)
        dans_da = s["dans_da"][i] + dc_da
        c = c * (xi / r)
        s["r"][i], s["dc_da"][i], s["dans_da"][i], s["c"][i] = r, dc_da, dans_da, c
        s["ans"][i] += c
        return np.abs(dc_da / dans_da) > _EPS64

    _converge(step, s, enabled, 2000)
    dlogax_da = np.log(x) - _digamma(a + 1.0)
    if sample:
        return -(s["dans_da"] + s["ans"] * dlogax_da) * x / a
    return ax * (s["ans"] * dlogax_da + s["dans_da"]) / a


def _igammac_continued_fraction(ax, x, a, enabled, sample):
    """The continued fraction of Q(a, x) differentiated in a (x > 1 and x > a)."""
    y = 1.0 - a
    z = x + y + 1.0
    ans = (x + 1.0) / (z * x)
    s = {"y": y, "z": z, "c": np.zeros_like(x), "pkm1": x + 1.0, "qkm1": z * x,
         "pkm2": np.ones_like(x), "qkm2": x.copy(), "dpkm2": np.zeros_like(x),
         "dqkm2": np.zeros_like(x), "dpkm1": np.zeros_like(x), "dqkm1": -x, "ans": ans,
         "dans": (0.0 + ans * x) / (z * x)}

    def step(s, i):
        g = {k: v[i] for k, v in s.items()}
        c, y, z = g["c"] + 1.0, g["y"] + 1.0, g["z"] + 2.0
        yc = y * c
        pk = g["pkm1"] * z - g["pkm2"] * yc
        qk = g["qkm1"] * z - g["qkm2"] * yc
        nonzero = qk != 0
        ans = np.where(nonzero, pk / np.where(nonzero, qk, 1.0), g["ans"])
        dpk = g["dpkm1"] * z - g["pkm1"] - g["dpkm2"] * yc + g["pkm2"] * c
        dqk = g["dqkm1"] * z - g["qkm1"] - g["dqkm2"] * yc + g["qkm2"] * c
        dans = np.where(nonzero, (dpk - ans * dqk) / np.where(nonzero, qk, 1.0), g["dans"])
        unconverged = np.where(nonzero, np.abs(dans - g["dans"]), 1.0) > _EPS64
        scale = np.where(np.abs(pk) > 1.0 / _EPS64, _EPS64, 1.0)
        new = {"c": c, "y": y, "z": z, "ans": ans, "dans": dans,
               "pkm2": g["pkm1"] * scale, "pkm1": pk * scale, "qkm2": g["qkm1"] * scale,
               "qkm1": qk * scale, "dpkm2": g["dpkm1"] * scale, "dpkm1": dpk * scale,
               "dqkm2": g["dqkm1"] * scale, "dqkm1": dqk * scale}
        for k, v in new.items():
            s[k][i] = v
        return unconverged

    _converge(step, s, enabled, 2000)
    dlogax_da = np.log(x) - _digamma(a)
    if sample:
        return -(s["dans"] + s["ans"] * dlogax_da) * x
    return ax * (s["ans"] * dlogax_da + s["dans"])


def _igamma_grad(a, x, sample):
    a, x = np.broadcast_arrays(a, x)
    shape = a.shape
    a, x = a.ravel().copy(), x.ravel().copy()
    is_nan = np.isnan(a) | np.isnan(x)
    x_is_zero = x == 0
    domain_error = (x < 0) | (a <= 0)
    use_continued_fraction = (x > 1) & (x > a)
    log_ax = a * np.log(x) - x - sc.gammaln(a)
    underflow = log_ax < -_LOG_MAX64
    ax = np.exp(log_ax)
    enabled = ~(x_is_zero | domain_error | underflow | is_nan)
    out = np.where(use_continued_fraction,
                   -_igammac_continued_fraction(ax, x, a, enabled & use_continued_fraction,
                                                sample),
                   _igamma_series(ax, x, a, enabled & ~use_continued_fraction, sample))
    out = np.where(x_is_zero, 0.0, out)
    return np.where(domain_error | is_nan, np.nan, out).reshape(shape)


@float64_kernel
def igamma_grad_a(a, x):
    """d/da P(a, x), by JAX's differentiated series and continued fraction."""
    return _igamma_grad(a, x, sample=False)


@float64_kernel
def random_gamma_grad(a, x):
    """dx/da of a Gamma(a, 1) sample x (implicit differentiation of P(a, x) = u), by
    JAX's algorithm: -(dP/da) / (dP/dx) without forming the density."""
    return _igamma_grad(a, x, sample=True)


# --- beta, zeta, Bessel ---------------------------------------------------------------------

betainc = scipy_kernel("betainc")
zeta = scipy_kernel("zeta")
bessel_i0e = scipy_kernel("i0e")
bessel_i1e = scipy_kernel("i1e")
