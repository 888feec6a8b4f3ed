"""Primitives behind ``remat.scipy.special`` functions that JAX builds from loops of lax
ops (``hyp1f1``, ``expn``, ``sici``, ...): here each is one elementwise primitive whose impl
is the SciPy function (evaluated in float64, rounded to the input dtype) and whose JVP rules
are JAX's formulas, written with other primitives so that higher derivatives work too. The
derivatives JAX takes of a series in a parameter (``hyp1f1`` in ``a`` and ``b``, ``hyp2f1``
in ``a``, ``b`` and ``c``) are NumPy ports of JAX's series, as kernels of their own.

These are not ``jax.lax`` names, so ``remat.lax`` does not export them.
"""

import math

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax import elementwise
from remat.lax.elementwise import (
    add,
    convert_element_type,
    cos,
    digamma,
    div,
    eq,
    erf,
    exp,
    log,
    mul,
    neg,
    select,
    sin,
    sqrt,
    square,
    sub,
)
from remat.lax.shape import full_like
from remat.lax.special import float64_kernel, sc, scipy_kernel
from remat.lax.special_functions import defjvp_elementwise, elementwise_primitive
from remat.lax.standard import (
    FLOAT,
    INEXACT,
    broadcasting_shape,
    check_dtype,
    check_same_dtypes,
    standard_primitive,
)
from remat.runtime.lazy_imports import lazy_function

_EPS64 = np.finfo(np.float64).eps


def _const(x, value):
    """``value`` as a rank-0 constant of ``x``'s dtype."""
    return full_like(x, value, shape=())


# --- gamma function and its logarithm, digamma and polygamma for complex arguments ----------

def _gamma_kernel(x):
    """Gamma(x); NaN at the negative integers (SciPy: NaN or inf), as JAX."""
    pole = (x.real < 0) & (np.floor(x.real) == x.real) & (x.imag == 0)
    return np.where(pole, np.nan, sc.gamma(x))


gamma_p = elementwise_primitive("gamma", float64_kernel(_gamma_kernel), 1, INEXACT)
loggamma_p = elementwise_primitive("loggamma", scipy_kernel("loggamma"), 1,
                                   ("complexfloating",))
psi_p = elementwise_primitive("psi", scipy_kernel("psi"), 1, ("complexfloating",))


def _complex_hurwitz_zeta(s, z):
    """sum_k (z + k)^-s for an int s >= 2 and complex z: the direct sum until
    Re(z + n) >= 20 + s, then Euler-Maclaurin with 10 Bernoulli terms."""
    limit = 20.0 + s
    n = np.maximum(0.0, np.ceil(limit - z.real))
    acc = np.zeros_like(z)
    for k in range(int(n.max(initial=0.0))):
        acc = acc + np.where(k < n, (z + k) ** -s, 0.0)
    w = z + n
    tail = w ** (1 - s) / (s - 1) + 0.5 * w ** -s
    bernoulli = sc.bernoulli(20)
    rising = float(s)  # (s)_{2j-1}
    for j in range(1, 11):
        tail = tail + bernoulli[2 * j] / math.factorial(2 * j) * rising * w ** (-s - 2 * j + 1)
        rising *= (s + 2 * j - 1) * (s + 2 * j)
    return acc + tail


def _complex_polygamma_kernel(z, *, m):
    return (-1) ** (m + 1) * math.factorial(m) * _complex_hurwitz_zeta(m + 1, z)


def _complex_polygamma_impl(z, *, m):
    return float64_kernel(lambda v: _complex_polygamma_kernel(v, m=m))(z)


complex_polygamma_p = standard_primitive(
    "complex_polygamma", _complex_polygamma_impl,
    lambda z, *, m: (check_dtype("complex_polygamma", z, ("complexfloating",)), z)[1])
batching.defvectorized(complex_polygamma_p)


def digamma_any(x):
    """psi(x) for real (``lax.digamma``) or complex (SciPy's complex psi) ``x``."""
    return psi_p.bind(x) if dtypes.kind(core.get_aval(x).dtype) == "c" else digamma(x)


ad.defjvp2(gamma_p, lambda g, ans, x: mul(g, mul(ans, digamma_any(x))))
ad.defjvp(loggamma_p, lambda g, x: mul(g, psi_p.bind(x)))
ad.defjvp(psi_p, lambda g, x: mul(g, complex_polygamma_p.bind(x, m=1)))
ad.defjvp(complex_polygamma_p,
          lambda g, x, *, m: mul(g, complex_polygamma_p.bind(x, m=m + 1)))


# --- beta, Pochhammer ---------------------------------------------------------------------

betaln_p = elementwise_primitive("betaln", scipy_kernel("betaln"), 2)
defjvp_elementwise(
    betaln_p,
    lambda g, a, b: mul(g, sub(digamma(a), digamma(add(a, b)))),
    lambda g, a, b: mul(g, sub(digamma(b), digamma(add(a, b)))))

poch_p = elementwise_primitive(
    "poch", float64_kernel(lambda z, m: np.where(m == 0, 1.0, sc.poch(z, m))), 2)
defjvp_elementwise(
    poch_p,
    lambda g, ans, z, m: mul(g, mul(
        sub(digamma(add(z, m)), digamma(z)), ans)),
    lambda g, ans, z, m: mul(g, mul(digamma(add(z, m)), ans)),
    with_output=True)


# --- error-function relatives ---------------------------------------------------------------

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

dawsn_p = elementwise_primitive("dawsn", scipy_kernel("dawsn"), 1)
defjvp_elementwise(
    dawsn_p, lambda g, ans, x: mul(g, sub(_const(x, 1.0),
                                                  mul(_const(x, 2.0), mul(x, ans)))),
    with_output=True)

erfcx_p = elementwise_primitive("erfcx", scipy_kernel("erfcx"), 1, INEXACT)
defjvp_elementwise(
    erfcx_p, lambda g, ans, x: mul(g, sub(mul(_const(x, 2.0), mul(x, ans)),
                                                  _const(x, _TWO_OVER_SQRT_PI))),
    with_output=True)

wofz_p = elementwise_primitive("wofz", scipy_kernel("wofz"), 1, ("complexfloating",))
defjvp_elementwise(
    wofz_p, lambda g, ans, z: mul(g, add(neg(mul(_const(z, 2.0),
                                                                 mul(z, ans))),
                                                 _const(z, 1j * _TWO_OVER_SQRT_PI))),
    with_output=True)

ndtri_p = elementwise_primitive("ndtri", scipy_kernel("ndtri"), 1)
defjvp_elementwise(
    ndtri_p, lambda g, ans, p: mul(g, mul(
        _const(p, math.sqrt(2 * math.pi)), exp(mul(_const(p, 0.5), square(ans))))),
    with_output=True)


def _owens_t_dh(g, h, a):
    """-phi(h) erf(a h / sqrt 2) / 2."""
    density = exp(mul(_const(h, -0.5), square(h)))
    return mul(g, div(neg(mul(density, erf(
        div(mul(a, h), _const(h, math.sqrt(2)))))), _const(h, 2 * math.sqrt(2 * math.pi))))


def _owens_t_da(g, h, a):
    """exp(-h^2 (1 + a^2) / 2) / (2 pi (1 + a^2))."""
    one_a2 = add(square(a), _const(a, 1.0))
    return mul(g, div(exp(mul(_const(h, -0.5), mul(one_a2, square(h)))),
                              mul(_const(a, 2 * math.pi), one_a2)))


owens_t_p = elementwise_primitive("owens_t", scipy_kernel("owens_t"), 2)
defjvp_elementwise(owens_t_p, _owens_t_dh, _owens_t_da)


# --- exponential and trigonometric integrals, dilogarithm ----------------------------------

expi_p = elementwise_primitive("expi", scipy_kernel("expi"), 1)
defjvp_elementwise(expi_p, lambda g, x: mul(g, div(exp(x), x)))


def _expn_kernel(n, x):
    """E_n(x) for integer n >= 0 (NaN for other n, and for x < 0)."""
    valid = (n >= 0) & (np.floor(n) == n)
    return np.where(valid, sc.expn(np.where(valid, n, 0).astype(np.int64), x), np.nan)


expn_p = elementwise_primitive("expn", float64_kernel(_expn_kernel), 2)


def _expn_dn(g, n, x):
    raise ValueError("expn gradient with respect to n is not supported.")


defjvp_elementwise(expn_p, _expn_dn,
                   lambda g, n, x: neg(mul(g, expn_p.bind(
                       sub(n, _const(n, 1.0)), x))))


def _spence_kernel(x):
    return np.where(x < 0, np.nan, sc.spence(x))


spence_p = elementwise_primitive("spence", float64_kernel(_spence_kernel), 1)


def _spence_dx(g, x):
    """d/dx spence(x) = log(x) / (1 - x), -1 at x = 1."""
    one = _const(x, 1.0)
    at_one = eq(x, one)
    safe = select(at_one, full_like(x, 2.0), x)
    slope = div(log(safe), sub(one, safe))
    return mul(g, select(at_one, full_like(x, -1.0), slope))


defjvp_elementwise(spence_p, _spence_dx)


def _unary_pair_primitive(name, kernel):
    """A unary elementwise primitive with two outputs (``sici``, ``fresnel``)."""

    def impl(x):
        return tuple(float64_kernel(lambda v, i=i: kernel(v)[i])(x) for i in range(2))

    def abstract_eval(x):
        check_dtype(name, x, FLOAT)
        return [x, x]

    prim = standard_primitive(name, impl, abstract_eval, multiple_results=True)
    batching.primitive_batchers[prim] = lambda vals, dims: (prim.bind(*vals), [dims[0]] * 2)
    return prim


sici_p = _unary_pair_primitive("sici", lazy_function(sc, "sici"))
fresnel_p = _unary_pair_primitive("fresnel", lazy_function(sc, "fresnel"))


def _sici_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    si, ci = sici_p.bind(x)
    if type(t) is ad.Zero:
        return [si, ci], [ad.Zero.from_primal_value(si), ad.Zero.from_primal_value(ci)]
    return [si, ci], [mul(t, div(sin(x), x)), mul(t, div(cos(x), x))]


def _fresnel_jvp(primals, tangents):
    """S' = sin(pi x^2 / 2), C' = cos(pi x^2 / 2)."""
    (x,), (t,) = primals, tangents
    s, c = fresnel_p.bind(x)
    if type(t) is ad.Zero:
        return [s, c], [ad.Zero.from_primal_value(s), ad.Zero.from_primal_value(c)]
    angle = mul(_const(x, math.pi / 2), square(x))
    return [s, c], [mul(t, sin(angle)), mul(t, cos(angle))]


ad.primitive_jvps[sici_p] = _sici_jvp
ad.primitive_jvps[fresnel_p] = _fresnel_jvp


# --- confluent and Gauss hypergeometric functions -----------------------------------------

def _parameter_series(first_term, ratio, weight, *args, limit=250):
    """JAX's series for the derivative of a hypergeometric function in a parameter:
    sum_{k>=1} term_k weight(k), term_1 = first_term, term_{k+1} = term_k ratio(k), until
    |term / sum| <= eps (at most ``limit`` terms); float64 NumPy arrays."""
    term = first_term(*args)
    total = np.zeros_like(term)
    active = np.ones(term.shape, bool)
    for k in range(1, limit):
        total = np.where(active, total + term * weight(k, *args), total)
        term = term * ratio(k, *args)
        with np.errstate(all="ignore"):
            active &= np.abs(term) / np.abs(total) > _EPS64
        if not active.any():
            break
    return total


def _hyp1f1_da(a, b, x):
    return _parameter_series(lambda a, b, x: a / b * x,
                             lambda k, a, b, x: (a + k) / (b + k) * x / (k + 1),
                             lambda k, a, b, x: sc.psi(a + k) - sc.psi(a), a, b, x)


def _hyp1f1_db(a, b, x):
    return _parameter_series(lambda a, b, x: a / b * x,
                             lambda k, a, b, x: (a + k) / (b + k) * x / (k + 1),
                             lambda k, a, b, x: sc.psi(b) - sc.psi(b + k), a, b, x)


def _hyp2f1_ratio(k, a, b, c, x):
    return (a + k) * (b + k) / (c + k) / (k + 1) * x


def _hyp2f1_first(a, b, c, x):
    return a * b / c * x


def _hyp2f1_da(a, b, c, x):
    return _parameter_series(_hyp2f1_first, _hyp2f1_ratio,
                             lambda k, a, b, c, x: sc.psi(a + k) - sc.psi(a), a, b, c, x)


def _hyp2f1_db(a, b, c, x):
    return _parameter_series(_hyp2f1_first, _hyp2f1_ratio,
                             lambda k, a, b, c, x: sc.psi(b + k) - sc.psi(b), a, b, c, x)


def _hyp2f1_dc(a, b, c, x):
    return _parameter_series(_hyp2f1_first, _hyp2f1_ratio,
                             lambda k, a, b, c, x: sc.psi(c) - sc.psi(c + k), a, b, c, x)


hyp1f1_p = elementwise_primitive("hyp1f1", scipy_kernel("hyp1f1"), 3)
hyp1f1_da_p = elementwise_primitive("hyp1f1_da", float64_kernel(_hyp1f1_da), 3)
hyp1f1_db_p = elementwise_primitive("hyp1f1_db", float64_kernel(_hyp1f1_db), 3)
hyp2f1_p = elementwise_primitive("hyp2f1", scipy_kernel("hyp2f1"), 4)
hyp2f1_da_p = elementwise_primitive("hyp2f1_da", float64_kernel(_hyp2f1_da), 4)
hyp2f1_db_p = elementwise_primitive("hyp2f1_db", float64_kernel(_hyp2f1_db), 4)
hyp2f1_dc_p = elementwise_primitive("hyp2f1_dc", float64_kernel(_hyp2f1_dc), 4)


def _plus_one(*xs):
    return [add(v, _const(v, 1.0)) for v in xs]


defjvp_elementwise(
    hyp1f1_p,
    lambda g, a, b, x: mul(g, hyp1f1_da_p.bind(a, b, x)),
    lambda g, a, b, x: mul(g, hyp1f1_db_p.bind(a, b, x)),
    lambda g, a, b, x: mul(g, mul(div(a, b), hyp1f1_p.bind(*_plus_one(a, b), x))))
defjvp_elementwise(
    hyp2f1_p,
    lambda g, a, b, c, x: mul(g, hyp2f1_da_p.bind(a, b, c, x)),
    lambda g, a, b, c, x: mul(g, hyp2f1_db_p.bind(a, b, c, x)),
    lambda g, a, b, c, x: mul(g, hyp2f1_dc_p.bind(a, b, c, x)),
    lambda g, a, b, c, x: mul(g, mul(div(mul(a, b), c),
                                             hyp2f1_p.bind(*_plus_one(a, b, c), x))))


# --- Bessel functions of the first kind, spherical harmonics -------------------------------

bessel_jv_p = elementwise_primitive("bessel_jv", scipy_kernel("jv"), 2)


def _bessel_jv_dv(g, v, z):
    raise ValueError("bessel_jn gradient with respect to the order v is not supported.")


def _bessel_jv_dz(g, v, z):
    """J_v'(z) = (J_{v-1}(z) - J_{v+1}(z)) / 2."""
    one = _const(v, 1.0)
    return mul(g, mul(_const(z, 0.5), sub(bessel_jv_p.bind(sub(v, one), z),
                                                      bessel_jv_p.bind(add(v, one), z))))


defjvp_elementwise(bessel_jv_p, _bessel_jv_dv, _bessel_jv_dz)


def _sph_harm_y_kernel(n, m, theta, phi):
    """Y_n^m(theta, phi) (SciPy's convention: theta polar, phi azimuthal); 0 for |m| > n."""
    valid = (np.abs(m) <= n) & (n >= 0)
    ni, mi = np.where(valid, n, 0).astype(np.int64), np.where(valid, m, 0).astype(np.int64)
    return np.where(valid, sc.sph_harm_y(ni, mi, theta, phi), 0.0)


def _sph_harm_y_impl(n, m, theta, phi):
    n, m, theta, phi = np.broadcast_arrays(n, m, theta, phi)
    out_dtype = np.result_type(theta.dtype, np.complex64)
    with np.errstate(all="ignore"):
        out = _sph_harm_y_kernel(*(v.astype(np.float64) for v in (n, m, theta, phi)))
    return out.astype(out_dtype)


def _sph_harm_y_abstract_eval(n, m, theta, phi):
    avals = [n, m, theta, phi]
    for a in avals:
        check_dtype("sph_harm_y", a, FLOAT)
    check_same_dtypes("sph_harm_y", avals)
    shape = broadcasting_shape("sph_harm_y", avals)
    complex_dtype = dtypes.complex128 if theta.dtype == dtypes.float64 else dtypes.complex64
    return ShapedArray(shape, complex_dtype, all(a.weak_type for a in avals))


sph_harm_y_p = standard_primitive("sph_harm_y", _sph_harm_y_impl, _sph_harm_y_abstract_eval)
batching.broadcast_batcher(sph_harm_y_p)


def _sph_harm_y_dtheta(g, ans, n, m, theta, phi):
    """dY_n^m/dtheta = m cot(theta) Y_n^m + sqrt((n - m)(n + m + 1)) e^{-i phi} Y_n^{m+1}."""
    one = _const(m, 1.0)
    cdtype = core.get_aval(ans).dtype
    up = sph_harm_y_p.bind(n, add(m, one), theta, phi)
    factor = sqrt(elementwise.max(mul(sub(n, m), add(add(n, m), one)),
                              full_like(n, 0.0)))
    phase = exp(mul(convert_element_type(phi, cdtype), _const(ans, -1j)))
    cot = div(cos(theta), sin(theta))
    deriv = add(mul(ans, convert_element_type(mul(m, cot), cdtype)),
                    mul(convert_element_type(factor, cdtype), mul(phase, up)))
    return mul(convert_element_type(g, cdtype), deriv)


def _sph_harm_y_dphi(g, ans, n, m, theta, phi):
    """dY_n^m/dphi = i m Y_n^m."""
    cdtype = core.get_aval(ans).dtype
    return mul(convert_element_type(mul(g, m), cdtype), mul(ans, _const(ans, 1j)))


defjvp_elementwise(sph_harm_y_p, None, None, _sph_harm_y_dtheta, _sph_harm_y_dphi,
                   with_output=True)
