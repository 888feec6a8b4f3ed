"""``remat.scipy.special``: ``jax.scipy.special`` with JAX's names, signatures, dtype
promotion (integers and booleans compute in the default float) and error types.

Each function is either a composition of differentiable lax ops written as JAX writes it
(``xlogy``, ``entr``, ``comb``, ``log_ndtr`` ...) or an elementwise primitive whose impl is the
SciPy function and whose JVP rules are JAX's formulas (``remat.lax.special_functions`` and
``remat.lax.scipy_special_primitives``), so jvp, vjp, vmap and jit work on all of them.
Where JAX approximates with a truncated loop (``bessel_jn``'s ``n_iter``), SciPy's value is
computed and the argument is only checked.
"""

import math
import operator

import numpy as np

from remat import core, dtypes, lax
from remat import numpy as jnp
from remat.custom_derivatives import custom_jvp
from remat.lax import scipy_special_primitives as prims
from remat.lax.special import sc
from remat.nn import log_softmax as _nn_log_softmax
from remat.nn import logsumexp
from remat.nn import softmax as _nn_softmax
from remat.numpy.util import _promote_args_inexact
from remat.transforms import api

__all__ = [
    "bernoulli", "bessel_jn", "beta", "betainc", "betaln", "boxcox", "boxcox1p", "comb",
    "dawsn", "digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp1", "expi", "expit",
    "expn", "factorial", "fresnel", "gamma", "gammainc", "gammaincc", "gammaln", "gammasgn",
    "hyp1f1", "hyp2f1", "i0", "i0e", "i1", "i1e", "kl_div", "log_ndtr", "log_softmax",
    "loggamma", "logit", "logsumexp", "multigammaln", "ndtr", "ndtri", "owens_t", "poch",
    "polygamma", "rel_entr", "sici", "softmax", "spence", "sph_harm_y", "wofz", "xlog1py",
    "xlogy", "zeta",
]


def _dtype(x):
    return core.get_aval(x).dtype


def _is_complex(x):
    return dtypes.kind(_dtype(x)) == "c"


def _reject_complex(name, x, what="inputs"):
    if _is_complex(x):
        raise ValueError(f"{name} does not support complex-valued {what}.")


def _c(x, value):
    """``value`` as a rank-0 constant of ``x``'s dtype."""
    return lax.full_like(x, value, shape=())


def _strong(x):
    """``x`` without a weak type: the functions JAX builds around typed constants (``poch``,
    ``owens_t``, ``expn``, ``hyp1f1``, ``hyp2f1``) return strongly typed results even for
    weakly typed (Python scalar) inputs."""
    aval = core.get_aval(x)
    return lax.convert_element_type(x, aval.dtype, weak_type=False) if aval.weak_type else x


def _float32_or_64(name, x):
    """``x`` as an array, which must be float32 or float64 (JAX's check for the functions
    whose constants are tabulated for those two dtypes)."""
    x = jnp.asarray(x)
    if _dtype(x) not in (dtypes.float32, dtypes.float64):
        raise TypeError(f"x.dtype={_dtype(x).name} is not supported in {name}: only float32 "
                        f"and float64 are.")
    return x


# --- gamma and beta functions -------------------------------------------------------------

def gammaln(x):
    """log|Gamma(x)|."""
    x, = _promote_args_inexact("gammaln", x)
    return lax.lgamma(x)


def gammasgn(x):
    """The sign of Gamma(x): -1, 1, or NaN at the poles (and -1 at -0.0, where Gamma = -inf)."""
    x, = _promote_args_inexact("gammasgn", x)
    _reject_complex("gammasgn", x)
    floor_x = lax.floor(x)
    negative = x < 0
    nan = negative & (x == floor_x) | jnp.isnan(x)
    minus = negative & (floor_x % 2 != 0) | (x == 0) & jnp.signbit(x)
    return jnp.where(nan, np.nan, jnp.where(minus, -1.0, 1.0)).astype(_dtype(x))


def gamma(x):
    """Gamma(x) (real or complex); NaN at the poles 0 excluded: Gamma(±0) = ±inf."""
    x, = _promote_args_inexact("gamma", x)
    return prims.gamma_p.bind(x)


def loggamma(x):
    """log Gamma(x): the principal branch for complex ``x``; NaN for real ``x <= 0``."""
    x, = _promote_args_inexact("loggamma", x)
    if _is_complex(x):
        return prims.loggamma_p.bind(x)
    return jnp.where(x > 0, lax.lgamma(x), np.nan)


def betaln(a, b):
    """log|B(a, b)|."""
    a, b = _promote_args_inexact("betaln", a, b)
    return prims.betaln_p.bind(a, b)


def beta(a, b):
    """B(a, b) = Gamma(a) Gamma(b) / Gamma(a + b)."""
    a, b = _promote_args_inexact("beta", a, b)
    _reject_complex("beta", a)
    sign = gammasgn(a) * gammasgn(b) * gammasgn(a + b)
    return sign * lax.exp(betaln(a, b))


def betainc(a, b, x):
    """Regularized incomplete beta function I_x(a, b)."""
    a, b, x = _promote_args_inexact("betainc", a, b, x)
    _reject_complex("betainc", x)
    return lax.betainc(a, b, x)


def gammainc(a, x):
    """Regularized lower incomplete gamma function P(a, x)."""
    a, x = _promote_args_inexact("gammainc", a, x)
    return lax.igamma(a, x)


def gammaincc(a, x):
    """Regularized upper incomplete gamma function Q(a, x)."""
    a, x = _promote_args_inexact("gammaincc", a, x)
    return lax.igammac(a, x)


def digamma(x):
    """psi(x) = d/dx log Gamma(x)."""
    x, = _promote_args_inexact("digamma", x)
    return lax.digamma(x)


def polygamma(n, x):
    """psi^(n)(x), the n-th derivative of digamma; ``n`` must have an integer dtype."""
    if not dtypes.is_integer(core.get_aval(jnp.asarray(n)).dtype):
        raise ValueError(f"Argument `n` to polygamma must be of integer type. Got dtype "
                         f"{core.get_aval(jnp.asarray(n)).dtype}.")
    n, x = _promote_args_inexact("polygamma", n, x)
    _reject_complex("polygamma", x)
    return lax.polygamma(n, x)


def multigammaln(a, d):
    """log of the multivariate gamma function of dimension ``d`` (a static integer)."""
    d = operator.index(core.concrete_or_error(d, "d argument of multigammaln"))
    a, d_ = _promote_args_inexact("multigammaln", a, d)
    constant = _c(a, 0.25) * d_ * (d_ - _c(a, 1.0)) * _c(a, math.log(math.pi))
    b = jnp.arange(d, dtype=_dtype(d_)) / _c(a, 2.0)
    shifted = jnp.expand_dims(a, -1) - jnp.expand_dims(b, tuple(range(a.ndim)))
    return jnp.sum(gammaln(shifted), axis=-1) + constant


def factorial(n, exact=False):
    """n! = Gamma(n + 1) (0 for negative n). ``exact=True`` is not available in JAX."""
    if exact:
        raise NotImplementedError("factorial with exact=True")
    n, = _promote_args_inexact("factorial", n)
    return jnp.where(n < 0, 0, lax.exp(lax.lgamma(n + 1))).astype(_dtype(n))


def comb(N, k, *, repetition=False):
    """The number of combinations of ``N`` things taken ``k`` at a time (real-valued)."""
    N, k = _promote_args_inexact("comb", N, k)
    if repetition:
        return jnp.where((k == 0) & (N >= 0), _c(N, 1.0), comb(N + k - 1, k))
    valid = (k <= N) & (N >= 0) & (k >= 0)
    safe_n = jnp.where(valid, N, _c(N, 0.0))
    safe_k = jnp.where(valid, k, _c(k, 0.0))
    result = lax.exp(gammaln(safe_n + 1) - gammaln(safe_k + 1) - gammaln(safe_n + 1 - safe_k))
    return jnp.where(valid, result, _c(result, 0.0))


def poch(z, m):
    """The rising factorial (z)_m = Gamma(z + m) / Gamma(z)."""
    z, m = _promote_args_inexact("poch", z, m)
    _reject_complex("jnp.poch", z)
    return _strong(prims.poch_p.bind(z, m))


# --- error function and relatives ---------------------------------------------------------

def erf(x):
    """The error function."""
    x, = _promote_args_inexact("erf", x)
    return lax.erf(x)


def erfc(x):
    """1 - erf(x)."""
    x, = _promote_args_inexact("erfc", x)
    return lax.erfc(x)


def erfinv(x):
    """The inverse of erf."""
    x, = _promote_args_inexact("erfinv", x)
    return lax.erf_inv(x)


def erfcx(x):
    """exp(x^2) erfc(x), real or complex."""
    x, = _promote_args_inexact("erfcx", x)
    return prims.erfcx_p.bind(x)


def wofz(z):
    """The Faddeeva function exp(-z^2) erfc(-iz); real input computes in complex."""
    z = jnp.asarray(z)
    dtype = dtypes.result_type(z, dtypes.default_complex_dtype()) if not _is_complex(z) \
        else _dtype(z)
    if not _is_complex(z) and _dtype(z) == dtypes.float64:
        dtype = dtypes.canonicalize_dtype(dtypes.complex128)
    return prims.wofz_p.bind(z.astype(dtype))


def dawsn(x):
    """Dawson's integral exp(-x^2) int_0^x exp(t^2) dt."""
    x, = _promote_args_inexact("dawsn", x)
    _reject_complex("dawsn", x)
    return prims.dawsn_p.bind(x)


def ndtr(x):
    """The standard normal CDF, from erf near 0 and erfc in the tails (as JAX)."""
    x = _float32_or_64("ndtr", x)
    half_sqrt_2 = _c(x, 0.5 * math.sqrt(2.0))
    w = x * half_sqrt_2
    z = lax.abs(w)
    y = jnp.where(z < half_sqrt_2, 1.0 + lax.erf(w),
                  jnp.where(w > 0, 2.0 - lax.erfc(z), lax.erfc(z)))
    return _c(x, 0.5) * y


def ndtri(p):
    """The inverse of ndtr."""
    p = _float32_or_64("ndtri", p)
    return prims.ndtri_p.bind(p)


_LOG_NDTR_BOUNDS = {np.dtype(np.float64): (-20.0, 8.0), np.dtype(np.float32): (-10.0, 5.0)}


def _log_ndtr_asymptotic_series(x, series_order):
    """1 + sum_{n=1}^{order} (-1)^n (2n - 1)!! / x^(2n)."""
    if series_order <= 0:
        return lax.full_like(x, 1.0)
    x_2 = lax.square(x)
    even_sum, odd_sum = jnp.zeros_like(x), jnp.zeros_like(x)
    x_2n = x_2
    for n in range(1, series_order + 1):
        y = float(np.prod(np.arange(2 * n - 1, 1, -2))) / x_2n
        if n % 2:
            odd_sum = odd_sum + y
        else:
            even_sum = even_sum + y
        x_2n = x_2n * x_2
    return 1.0 + even_sum - odd_sum


def _log_ndtr_impl(series_order, x):
    lower, upper = _LOG_NDTR_BOUNDS[_dtype(x)]
    above = x > upper
    ndtr_res = ndtr(jnp.where(above, -x, lax.max(x, _c(x, lower))))
    low_x = lax.min(x, _c(x, lower))
    log_scale = -0.5 * lax.square(low_x) - lax.log(-low_x) - 0.5 * math.log(2 * math.pi)
    lower_res = log_scale + lax.log(_log_ndtr_asymptotic_series(low_x, series_order))
    return jnp.where(above, -ndtr_res, jnp.where(x > lower, lax.log(ndtr_res), lower_res))


_log_ndtr = custom_jvp(_log_ndtr_impl, nondiff_argnums=(0,))


@_log_ndtr.defjvp
def _log_ndtr_jvp(series_order, primals, tangents):
    (x,), (t,) = primals, tangents
    ans = _log_ndtr(series_order, x)
    norm_logpdf = -0.5 * lax.square(x) - 0.5 * math.log(2 * math.pi)
    return ans, t * lax.exp(norm_logpdf - ans)


def log_ndtr(x, series_order=3):
    """log of the standard normal CDF: log(ndtr(x)) in the middle, -ndtr(-x) above and an
    asymptotic series of ``series_order`` terms below (-20 in float64, -10 in float32)."""
    if not isinstance(series_order, int):
        raise TypeError("series_order must be a Python integer.")
    if series_order < 0:
        raise ValueError("series_order must be non-negative.")
    if series_order > 30:
        raise ValueError("series_order must be <= 30.")
    x = jnp.asarray(x)
    if _dtype(x) not in _LOG_NDTR_BOUNDS:
        raise TypeError(f"x.dtype={_dtype(x).name} is not supported.")
    return _log_ndtr(series_order, x)


def owens_t(h, a):
    """Owen's T function T(h, a)."""
    h, a = _promote_args_inexact("owens_t", h, a)
    return _strong(prims.owens_t_p.bind(h, a))


# --- logistic, entropies ------------------------------------------------------------------

def logit(x):
    """log(x / (1 - x)); its derivative is 1 / (x (1 - x))."""
    return _logit(*_promote_args_inexact("logit", x))


@custom_jvp
def _logit(x):
    return lax.log(lax.div(x, lax.sub(_c(x, 1.0), x)))


_logit.defjvps(lambda g, ans, x: lax.div(g, lax.mul(x, lax.sub(_c(x, 1.0), x))))


def expit(x):
    """The logistic function 1 / (1 + exp(-x))."""
    x, = _promote_args_inexact("expit", x)
    return lax.logistic(x)


def xlogy(x, y):
    """x log(y), 0 where x = 0 (unless y is NaN); its derivative in y is x / y."""
    return _xlogy(*_promote_args_inexact("xlogy", x, y))


@custom_jvp
def _xlogy(x, y):
    return jnp.where((x != 0.0) | jnp.isnan(y), lax.mul(x, lax.log(y)), jnp.zeros_like(x))


@_xlogy.defjvp
def _xlogy_jvp(primals, tangents):
    (x, y), (x_dot, y_dot) = primals, tangents
    result = _xlogy(x, y)
    return result, (x_dot * lax.log(y) + y_dot * x / y).astype(_dtype(result))


def xlog1py(x, y):
    """x log(1 + y), 0 where x = 0 (unless y is NaN); its derivative in y is x / (1 + y)."""
    return _xlog1py(*_promote_args_inexact("xlog1py", x, y))


@custom_jvp
def _xlog1py(x, y):
    return jnp.where((x != 0.0) | jnp.isnan(y), lax.mul(x, lax.log1p(y)), jnp.zeros_like(x))


@_xlog1py.defjvp
def _xlog1py_jvp(primals, tangents):
    (x, y), (x_dot, y_dot) = primals, tangents
    result = _xlog1py(x, y)
    return result, (x_dot * lax.log1p(y) + y_dot * x / (1 + y)).astype(_dtype(result))


@custom_jvp
def _xlogx(x):
    """x log(x), whose derivative log(x) + 1 is not the product rule's NaN at 0."""
    return xlogy(x, x)


@_xlogx.defjvp
def _xlogx_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    return _xlogx(x), x_dot * (lax.log(x) + 1)


def entr(x):
    """-x log(x) for x >= 0, -inf for x < 0."""
    x, = _promote_args_inexact("entr", x)
    _reject_complex("entr", x)
    return lax.select(lax.lt(x, _c(x, 0.0)), lax.full_like(x, -np.inf), lax.neg(_xlogx(x)))


def rel_entr(p, q):
    """p log(p / q) for p, q > 0; 0 at p = 0 <= q; inf elsewhere."""
    p, q = _promote_args_inexact("rel_entr", p, q)
    _reject_complex("rel_entr", p)
    zero = _c(p, 0.0)
    both_positive = lax.bitwise_and(lax.gt(p, zero), lax.gt(q, zero))
    zero_p = lax.bitwise_and(lax.eq(p, zero), lax.ge(q, zero))
    safe_p = jnp.where(both_positive, p, _c(p, 1.0))
    safe_q = jnp.where(both_positive, q, _c(q, 1.0))
    log_val = lax.sub(_xlogx(safe_p), xlogy(safe_p, safe_q))
    return jnp.where(both_positive, log_val, jnp.where(zero_p, zero, _c(p, np.inf)))


def kl_div(p, q):
    """rel_entr(p, q) - p + q."""
    p, q = _promote_args_inexact("kl_div", p, q)
    _reject_complex("kl_div", p)
    return rel_entr(p, q) - p + q


def boxcox(x, lmbda):
    """(x^lmbda - 1) / lmbda, log(x) at lmbda = 0."""
    x, lmbda = _promote_args_inexact("boxcox", x, lmbda)
    return _boxcox(jnp.log(x), lmbda)


def boxcox1p(x, lmbda):
    """((1 + x)^lmbda - 1) / lmbda, log1p(x) at lmbda = 0."""
    x, lmbda = _promote_args_inexact("boxcox1p", x, lmbda)
    return _boxcox(jnp.log1p(x), lmbda)


def _boxcox(log_x, lmbda):
    zero = lmbda == 0
    safe = jnp.where(zero, jnp.ones_like(lmbda), lmbda)
    return jnp.where(zero, log_x, jnp.expm1(safe * log_x) / safe)


def softmax(x, /, *, axis=None):
    """exp(x) / sum(exp(x), axis) (over all axes by default, as SciPy)."""
    return _nn_softmax(x, axis=axis)


def log_softmax(x, /, *, axis=None):
    """x - logsumexp(x, axis) (over all axes by default, as SciPy)."""
    return _nn_log_softmax(x, axis=axis)


# --- Bessel functions ---------------------------------------------------------------------

def i0e(x):
    """exp(-|x|) I0(x)."""
    x, = _promote_args_inexact("i0e", x)
    return lax.bessel_i0e(x)


def i0(x):
    """The modified Bessel function I0."""
    x, = _promote_args_inexact("i0", x)
    return lax.mul(lax.exp(lax.abs(x)), lax.bessel_i0e(x))


def i1e(x):
    """exp(-|x|) I1(x)."""
    x, = _promote_args_inexact("i1e", x)
    return lax.bessel_i1e(x)


def i1(x):
    """The modified Bessel function I1."""
    x, = _promote_args_inexact("i1", x)
    return lax.mul(lax.exp(lax.abs(x)), lax.bessel_i1e(x))


def bessel_jn(z, *, v, n_iter=50):
    """J_0(z), ..., J_v(z) stacked on a new leading axis. SciPy's values: ``n_iter`` (the
    length of JAX's backward recurrence) is checked, not needed."""
    z = jnp.asarray(z)
    z, = _promote_args_inexact("bessel_jn", z)
    if _is_complex(z):
        raise ValueError("complex input not supported.")
    v = operator.index(core.concrete_or_error(v, "Argument v of bessel_jn."))
    int(core.concrete_or_error(n_iter, "Argument n_iter of bessel_jn."))
    if v < 0:
        raise ValueError(f"bessel_jn: the order v must be non-negative, got {v}")
    orders = [lax.full_like(z, k) for k in range(v + 1)]
    return jnp.stack([prims.bessel_jv_p.bind(n, z) for n in orders])


def sph_harm_y(n, m, theta, phi, diff_n=None, n_max=None):
    """The spherical harmonic Y_n^m(theta, phi) (theta polar, phi azimuthal), complex;
    ``n`` and ``m`` integers. ``n_max`` is checked when given (SciPy needs no bound)."""
    if diff_n is not None:
        raise NotImplementedError(
            "The 'diff_n' argument to jax.scipy.special.sph_harm_y is not supported.")
    n, m = jnp.asarray(n), jnp.asarray(m)
    for name, v in (("n", n), ("m", m)):
        if not dtypes.is_integer(_dtype(v)):
            raise TypeError(f"sph_harm_y: {name} must have an integer dtype, got {_dtype(v)}")
    if n_max is not None:
        int(core.concrete_or_error(n_max, "The `n_max` argument of `sph_harm_y` must be "
                                   "statically specified."))
    theta, phi = _promote_args_inexact("sph_harm_y", theta, phi)
    dtype = _dtype(theta)
    if theta.ndim == 0:
        theta = jnp.reshape(theta, (1,))
    args = [lax.convert_element_type(v, dtype) for v in (n, m)] + [theta, phi]
    shape = np.broadcast_shapes(*(core.get_aval(v).shape for v in args))
    return prims.sph_harm_y_p.bind(*(jnp.broadcast_to(v, shape) for v in args))


# --- exponential integrals, hypergeometric functions, zeta ------------------------------

def expi(x):
    """The exponential integral Ei(x)."""
    x, = _promote_args_inexact("expi", x)
    _reject_complex("expi", x)
    return prims.expi_p.bind(x)


def expn(n, x):
    """The generalized exponential integral E_n(x) (integer n >= 0)."""
    n, x = _promote_args_inexact("expn", n, x)
    _reject_complex("expn", x)
    return _strong(prims.expn_p.bind(n, x))


def exp1(x):
    """E_1(x)."""
    x, = _promote_args_inexact("exp1", x)
    _reject_complex("exp1", x)
    return _strong(prims.expn_p.bind(lax.full_like(x, 1.0), x))


def sici(x):
    """The sine and cosine integrals (Si(x), Ci(x))."""
    x, = _promote_args_inexact("sici", x)
    if _is_complex(x):
        raise ValueError(f"Argument `x` to sici must be real-valued. Got dtype {_dtype(x)}.")
    si, ci = prims.sici_p.bind(x)
    return si, ci


def fresnel(x):
    """The Fresnel integrals (S(x), C(x))."""
    x, = _promote_args_inexact("fresnel", x)
    _reject_complex("fresnel", x)
    s, c = prims.fresnel_p.bind(x)
    return s, c


def spence(x):
    """Spence's function (the dilogarithm Li2(1 - x)); NaN for x < 0."""
    x = _float32_or_64("spence", x)
    return prims.spence_p.bind(x)


def hyp1f1(a, b, x):
    """The confluent hypergeometric function 1F1(a; b; x)."""
    a, b, x = _promote_args_inexact("hyp1f1", a, b, x)
    _reject_complex("hyp1f1", x)
    return _strong(prims.hyp1f1_p.bind(a, b, x))


def hyp2f1(a, b, c, x):
    """The Gauss hypergeometric function 2F1(a, b; c; x)."""
    a, b, c, x = _promote_args_inexact("hyp2f1", a, b, c, x)
    _reject_complex("hyp2f1", x)
    return _strong(prims.hyp2f1_p.bind(a, b, c, x))


# the tail of the Euler-Maclaurin formula for zeta: B_2j / (2j)! as divisors (JAX's table)
_BERNOULLI_DIVISORS = np.array([
    12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1307674368000 / 691, 74724249600.0,
    -10670622842880000 / 3617, 5109094217170944000 / 43867,
    -802857662698291200000 / 174611, 14101100039391805440000 / 77683,
    -1693824136731743669452800000 / 236364091, 186134520519971831808000000 / 657931,
    -37893265687455865519472640000000 / 3392780147,
    759790291646040068357842010112000000 / 1723168255201,
    -134196726836183700385281186201600000000 / 7709321041217])


def _zeta_series_expansion(s, a):
    """Hurwitz zeta by Euler-Maclaurin in differentiable ops (N = M = 8 terms in float32,
    16 in float64): what the JVP of ``zeta`` differentiates, as in JAX."""
    dtype = _dtype(a)
    n = 8 if dtype == dtypes.float32 else 16
    s_, a_ = jnp.expand_dims(s, -1), jnp.expand_dims(a, -1)
    k = jnp.expand_dims(jnp.arange(n, dtype=dtype), tuple(range(a.ndim)))
    direct = jnp.sum((a_ + k) ** -s_, -1)
    integral = (a + n) ** (1.0 - s) / (s - 1.0)
    t0 = (a + n) ** -s
    m = jnp.expand_dims(jnp.arange(2 * n, dtype=dtype), tuple(range(s.ndim)))
    s_over_a = (s_ + m) / (a_ + n)
    t1 = jnp.cumprod(s_over_a, -1)[..., ::2]
    t1 = jnp.clip(t1, max=float(dtypes.finfo(dtype).max))
    coefs = np.expand_dims(_BERNOULLI_DIVISORS[:n].astype(dtype), tuple(range(a.ndim)))
    return direct + integral + t0 * (0.5 + jnp.sum(t1 / coefs, -1))


@custom_jvp
def _zeta(x, q):
    return lax.zeta(x, q)


@_zeta.defjvp
def _zeta_jvp(primals, tangents):
    return _zeta(*primals), api.jvp(_zeta_series_expansion, primals, tangents)[1]


def zeta(x, q=None):
    """The Hurwitz zeta function sum_k (q + k)^-x; the Riemann zeta function (q = 1) when
    ``q`` is None."""
    if q is None:
        x, = _promote_args_inexact("zeta", x)
        q = lax.full_like(x, 1.0)
    x, q = _promote_args_inexact("zeta", x, q)
    return _zeta(x, q)


# --- Bernoulli numbers --------------------------------------------------------------------

def bernoulli(n):
    """The Bernoulli numbers B_0, ..., B_n (B_1 = -1/2), in the default float dtype."""
    n = operator.index(core.concrete_or_error(n, "Argument n of bernoulli"))
    if n < 0:
        raise ValueError("n must be a non-negative integer.")
    return jnp.asarray(sc.bernoulli(n)[:n + 1].astype(dtypes.default_float_dtype()))
