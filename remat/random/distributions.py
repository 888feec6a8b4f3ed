"""Continuous samplers written on ``uniform`` and ``normal``, each JAX's transformation of the
same draws: ``exponential laplace logistic cauchy pareto rayleigh weibull_min maxwell
double_sided_maxwell lognormal truncated_normal triangular wald``.

Where JAX's value on CPU is determined by the bits and XLA's kernels alone (``exponential``,
``laplace``, ``logistic``, ``rayleigh``, ``truncated_normal``), it is reproduced to the last
bit with the XLA-rounding primitives of ``remat.random.kernels``; elsewhere (``exp``, ``tan``,
``pow``) values agree within float32 ulps.
"""

import numpy as np

from remat import dtypes, lax
from remat import numpy as jnp
from remat.lax.standard import canonical_shape
from remat.random.bits import (
    _bcast_to,
    _check_all_safe_to_cast,
    _check_broadcast_shapes,
    _check_shape,
    _float_dtype,
    _normal,
    _shape_of,
    _uniform,
)
from remat.random.discrete import _rademacher
from remat.random.kernels import (
    _const,
    fused_mul_add,
    xla_erf_inv_p,
    xla_erf_p,
    xla_log1p_p,
    xla_log_p,
)
from remat.random.keys import _check_key, _split

__all__ = ["cauchy", "double_sided_maxwell", "exponential", "laplace", "logistic", "lognormal",
           "maxwell", "pareto", "rayleigh", "triangular", "truncated_normal", "wald",
           "weibull_min"]


def _tiny_uniform(key, shape, dtype):
    """JAX's ``uniform(minval=tiny, maxval=1)`` as XLA compiles it inside a jitted sampler:
    it folds ``(bits - 1) + tiny`` into ``bits + round(tiny - 1) = bits - 1``, so the draw is
    ``max(tiny, f)`` (which differs from the unfolded formula in float16)."""
    return lax.max(_const(dtypes.finfo(dtype).tiny, dtype), _uniform(key, shape, dtype, 0.0, 1.0))


def _convert(x, dtype):
    return lax.convert_element_type(jnp.asarray(x), dtype)


def exponential(key, shape=(), dtype=None):
    """Standard exponential values: ``-log1p(-u)``."""
    key, _ = _check_key("exponential", key)
    dtype = _float_dtype("exponential", dtype)
    return _exponential(key, canonical_shape(shape), dtype)


def _exponential(key, shape, dtype):
    u = _uniform(key, shape, dtype, 0.0, 1.0)
    return lax.neg(xla_log1p_p.bind(lax.neg(u)))  # 1 - u keeps log's argument in (0, 1]


def laplace(key, shape=(), dtype=None):
    """Standard Laplace values: ``sign(u) * log1p(-|u|)`` for ``u`` uniform in (-1, 1)."""
    key, _ = _check_key("laplace", key)
    dtype = _float_dtype("laplace", dtype)
    lo = -1.0 + float(dtypes.finfo(dtype).epsneg)
    u = _uniform(key, canonical_shape(shape), dtype, lo, 1.0)
    return lax.mul(lax.sign(u), xla_log1p_p.bind(lax.neg(lax.abs(u))))


def logistic(key, shape=(), dtype=None):
    """Standard logistic values: ``log(u) - log1p(-u)``."""
    key, _ = _check_key("logistic", key)
    dtype = _float_dtype("logistic", dtype)
    x = _tiny_uniform(key, canonical_shape(shape), dtype)
    return lax.sub(xla_log_p.bind(x), xla_log1p_p.bind(lax.neg(x)))


def cauchy(key, shape=(), dtype=None):
    """Standard Cauchy values: ``tan(pi * (u - 1/2))`` for ``u`` uniform in [eps, 1)."""
    key, _ = _check_key("cauchy", key)
    dtype = _float_dtype("cauchy", dtype)
    u = _uniform(key, canonical_shape(shape), dtype, float(dtypes.finfo(dtype).eps), 1.0)
    return lax.tan(lax.mul(_const(np.pi, dtype), lax.sub(u, _const(0.5, dtype))))


def pareto(key, b, shape=None, dtype=None):
    """Pareto values of shape ``b`` (scale 1): ``exp(e / b)`` for ``e`` exponential."""
    key, _ = _check_key("pareto", key)
    dtype = _float_dtype("pareto", dtype)
    shape = _check_broadcast_shapes("pareto", shape, b)
    _check_all_safe_to_cast("pareto", dtype, b)
    b = _convert(b, dtype)
    return lax.exp(jnp.divide(_exponential(key, shape, dtype), b))


def rayleigh(key, scale, shape=None, dtype=None):
    """Rayleigh values: ``scale * sqrt(-2 log u)``."""
    key, _ = _check_key("rayleigh", key)
    dtype = _float_dtype("rayleigh", dtype)
    shape = _check_broadcast_shapes("rayleigh", shape, scale)
    _check_all_safe_to_cast("rayleigh", dtype, scale)
    u = _uniform(key, shape, dtype, 0.0, 1.0)
    scale = _bcast_to(_convert(scale, dtype), shape)
    return lax.mul(scale, lax.sqrt(lax.mul(xla_log_p.bind(u), _const(-2, dtype))))


def weibull_min(key, scale, concentration, shape=(), dtype=None):
    """Weibull values: ``scale * (-log1p(-u)) ** (1 / concentration)`` (the inverse CDF)."""
    key, _ = _check_key("weibull_min", key)
    dtype = _float_dtype("weibull_min", dtype)
    u = _uniform(key, canonical_shape(shape), dtype, 0.0, 1.0)
    e = lax.neg(xla_log1p_p.bind(lax.neg(u)))
    return jnp.multiply(jnp.power(e, jnp.divide(1.0, concentration)), scale)


def maxwell(key, shape=(), dtype=None):
    """Maxwell values: the norm of three independent standard normals."""
    key, _ = _check_key("maxwell", key)
    dtype = _float_dtype("maxwell", dtype)
    return _maxwell(key, canonical_shape(shape), dtype)


def _maxwell(key, shape, dtype):
    """``norm(n, axis=-1)`` of normals ``n[..., 3]``, its squares summed as XLA's CPU
    reduction of a 3-vector sums them (for up to about a thousand rows; its tiling changes
    the order for more): ``fma(n2, n2, fma(n0, n0, n1 * n1))``."""
    n = _normal(key, (*shape, 3), dtype)
    x0, x1, x2 = (lax.index_in_dim(n, i, -1, keepdims=False) for i in range(3))
    return lax.sqrt(fused_mul_add(x2, x2, fused_mul_add(x0, x0, lax.mul(x1, x1))))


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
    """Maxwell values with a random sign, scaled and shifted. As in JAX, the parameters'
    broadcast shape is appended to ``shape`` (and used alone when ``shape`` is empty)."""
    key, _ = _check_key("double_sided_maxwell", key)
    dtype = _float_dtype("double_sided_maxwell", dtype)
    shape = canonical_shape(shape)
    params_shape = np.broadcast_shapes(_shape_of(loc), _shape_of(scale))
    shape = (shape or params_shape) + params_shape
    maxwell_key, rademacher_key = _split(key, (2,))
    maxwell_rvs = _maxwell(maxwell_key, shape, dtype)
    random_sign = _rademacher(rademacher_key, shape, dtype)
    scale = jnp.broadcast_to(_convert(scale, dtype), shape)
    return fused_mul_add(lax.mul(random_sign, maxwell_rvs), scale,
                         jnp.broadcast_to(_convert(loc, dtype), shape))


def lognormal(key, sigma=np.float32(1), shape=None, dtype=None):
    """Log-normal values: ``exp(sigma * n)`` for ``n`` standard normal (real or complex)."""
    key, _ = _check_key("lognormal", key)
    dtype = dtypes.canonicalize_dtype(dtypes.default_float_dtype() if dtype is None else dtype)
    if dtypes.kind(dtype) not in "fc":
        raise ValueError(f"dtype argument to `lognormal` must be a float or complex dtype, "
                         f"got {dtype.name}")
    shape = _check_broadcast_shapes("lognormal", shape, sigma)
    _check_all_safe_to_cast("lognormal", dtype, sigma)
    sigma = _convert(sigma, dtype)
    return lax.exp(jnp.multiply(_normal(key, shape, dtype), sigma))


def truncated_normal(key, lower, upper, shape=None, dtype=None):
    """Normal values truncated to ``(lower, upper)``: the inverse CDF of ``u`` uniform between
    the CDF's values at the bounds, ``sqrt(2) * erf_inv(u)``, clamped inside the open
    interval. Differentiable in ``lower`` and ``upper``."""
    if shape is not None:
        shape = canonical_shape(shape)
    key, _ = _check_key("truncated_normal", key)
    dtype = _float_dtype("truncated_normal", dtype)
    if shape is None:
        shape = np.broadcast_shapes(_shape_of(lower), _shape_of(upper))
    else:
        _check_shape("truncated_normal", shape, _shape_of(lower), _shape_of(upper))
    sqrt2 = _const(np.sqrt(2), dtype)
    lower, upper = _convert(lower, dtype), _convert(upper, dtype)
    a = xla_erf_p.bind(lax.div(lower, sqrt2))
    b = xla_erf_p.bind(lax.div(upper, sqrt2))
    u = _uniform(key, shape, dtype, a, b)
    out = lax.mul(sqrt2, xla_erf_inv_p.bind(u))
    # clamp into the open interval: rounding (or u == a) must not reach the bounds
    lo = lax.nextafter(lax.stop_gradient(lower), lax.full_like(lower, np.inf))
    hi = lax.nextafter(lax.stop_gradient(upper), lax.full_like(upper, -np.inf))
    return jnp.clip(out, lo, hi)


def triangular(key, left, mode, right, shape=None, dtype=None):
    """Triangular values on ``[left, right]`` peaking at ``mode`` (the inverse CDF)."""
    key, _ = _check_key("triangular", key)
    dtype = _float_dtype("triangular", dtype)
    shape = _check_broadcast_shapes("triangular", shape, left, mode, right)
    _check_all_safe_to_cast("triangular", dtype, left, mode, right)
    left, mode, right = (jnp.broadcast_to(_convert(v, dtype), shape)
                         for v in (left, mode, right))
    width = lax.sub(right, left)
    fc = lax.div(lax.sub(mode, left), width)
    u = _uniform(key, shape, dtype, 0.0, 1.0)
    out1 = lax.add(left, lax.sqrt(lax.mul(lax.mul(u, width), lax.sub(mode, left))))
    out2 = lax.sub(right, lax.sqrt(lax.mul(lax.mul(lax.sub(_const(1, dtype), u), width),
                                           lax.sub(right, mode))))
    return lax.select(lax.lt(u, fc), out1, out2)


def wald(key, mean, shape=None, dtype=None):
    """Wald (inverse Gaussian) values of ``mean`` and scale 1 (Michael, Schucany and Haas's
    transformation of a normal and a uniform)."""
    key, _ = _check_key("wald", key)
    dtype = _float_dtype("wald", dtype)
    shape = _check_broadcast_shapes("wald", shape, mean)
    _check_all_safe_to_cast("wald", dtype, mean)
    k1, k2 = _split(key, (2,))
    mean = jnp.broadcast_to(_convert(mean, dtype), shape)
    c = lambda v: _const(v, dtype)  # noqa: E731
    v = _normal(k1, shape, dtype)
    z = _uniform(k2, shape, dtype, 0.0, 1.0)
    y = lax.integer_pow(v, 2)
    y_sq = lax.integer_pow(y, 2)
    mean_sq = lax.integer_pow(mean, 2)
    # XLA fuses the first product of the sum, and the last product into its difference
    sqrt_term = lax.sqrt(fused_mul_add(lax.mul(c(4), mean), y, lax.mul(mean_sq, y_sq)))
    x = fused_mul_add(lax.neg(lax.div(mean, c(2))), sqrt_term,
                      lax.add(mean, lax.div(lax.mul(mean_sq, y), c(2))))
    return lax.select(lax.le(z, lax.div(mean, lax.add(mean, x))), x, lax.div(mean_sq, x))

