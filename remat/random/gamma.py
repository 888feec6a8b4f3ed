"""The gamma family: ``gamma`` and ``loggamma`` through the primitive ``random_gamma_p``, and
``beta``, ``chisquare``, ``f``, ``t`` and ``generalized_normal`` written on them.

``random_gamma_p(keys, a, log_space)`` takes typed keys (of a leading part of ``a``'s shape)
and draws one sample per element of ``a`` with Marsaglia and Tsang's method (2000): each
element gets its own key (``split`` of its key into as many as there are elements under it)
and runs JAX's rejection loop, a ``lax.while_loop`` (with an inner one redrawing the normal
until ``v > 0``), vectorized over the elements with ``vmap``, so every element's sample is a
function of its key and ``a`` alone. ``a < 1`` is boosted to ``a + 1`` and multiplied by
``u ** (1 / a)`` (added as ``log(u) / a`` in log space, which keeps tiny ``a`` finite). The
primitive's impl evaluates that lax program (traced once per shape and flags; JAX lowers it
the same way). Its JVP is the implicit reparameterization gradient ``dx/da = -(dF/da) /
(dF/dx)`` of the gamma CDF ``F`` (``lax.random_gamma_grad``), as in JAX, so ``gamma`` is
differentiable in ``a`` (this is not the derivative of the rejection sampler's path, which is
not smooth in ``a``).

Samples agree with JAX's within float32 ulps, not to the bit: XLA computes ``(1/3) /
sqrt(d)`` with the processor's approximate ``rsqrt`` refined by Newton steps, and ``pow`` and
``exp`` with its own polynomials.
"""

import functools
import math

import numpy as np

from remat import core, dtypes, lax
from remat import numpy as jnp
from remat.config import config
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.interpreters import partial_eval as pe
from remat.lax.standard import canonical_shape, standard_primitive
from remat.random.bits import (
    _check_all_safe_to_cast,
    _check_broadcast_shapes,
    _check_shape,
    _float_dtype,
    _normal,
    _normal_real,
    _shape_of,
    _uniform,
)
from remat.random.discrete import _rademacher
from remat.random.distributions import _exponential
from remat.random.kernels import _const, fused_mul_add, xla_log_p
from remat.random.keys import KeyTy, _check_key, _split, _wrap, key_dtype, random_unwrap_p
from remat.transforms.api import vmap

__all__ = ["beta", "chisquare", "f", "gamma", "generalized_normal", "loggamma",
           "random_gamma_p", "t"]


# --- one sample: Marsaglia and Tsang ---------------------------------------------------------


def _gamma_one(key, alpha, log_space):
    """One Gamma(alpha, 1) sample (or its log) from a raw key, as JAX draws it."""
    dtype = core.get_aval(alpha).dtype
    c = lambda v: _const(v, dtype)  # noqa: E731
    log = xla_log_p.bind
    zero, one = c(0), c(1)
    boost_mask = lax.ge(alpha, one)
    alpha_orig = alpha
    alpha = lax.select(boost_mask, alpha, lax.add(alpha, one))
    d = lax.sub(alpha, c(1 / 3))
    scale = lax.div(c(1 / 3), lax.sqrt(d))

    def rejected(state):
        _, x2, v, u = state
        squeeze = lax.ge(u, fused_mul_add(c(-0.0331), lax.mul(x2, x2), one))
        exact = lax.ge(log(u), lax.add(lax.mul(x2, c(0.5)),
                                       lax.mul(d, lax.add(lax.sub(one, v), log(v)))))
        return lax.bitwise_and(squeeze, exact)

    def next_xv(state):
        key, subkey = _split(state[0], (2,))
        x = _normal_real(subkey, (), dtype)
        return key, x, fused_mul_add(x, scale, one)

    def draw(state):
        key, x_key, u_key = _split(state[0], (3,))
        _, x, v = lax.while_loop(lambda s: lax.le(s[2], zero), next_xv, (x_key, zero, c(-1)))
        u = _uniform(u_key, (), dtype, 0.0, 1.0)
        return key, lax.mul(x, x), lax.mul(lax.mul(v, v), v), u

    key, subkey = _split(key, (2,))
    _, _, v, _ = lax.while_loop(rejected, draw, (key, zero, one, c(2)))  # starts rejected
    if log_space:
        log_u = lax.neg(_exponential(subkey, (), dtype))
        log_boost = lax.select(lax.bitwise_or(boost_mask, lax.eq(log_u, zero)), zero,
                               lax.mul(log_u, lax.div(one, alpha_orig)))
        return lax.add(lax.add(log(d), log(v)), log_boost)
    u = lax.sub(one, _uniform(subkey, (), dtype, 0.0, 1.0))
    boost = lax.select(boost_mask, one, lax.pow(u, lax.div(one, alpha_orig)))
    return lax.mul(lax.mul(d, v), boost)


def _gamma_sampler(keys, a, log_space):
    """Samples for every element of ``a``: each key split into one key per element under
    it, and ``_gamma_one`` vectorized over the elements."""
    a_shape = core.get_aval(a).shape
    key_shape = core.get_aval(keys).shape
    n_keys = math.prod(key_shape)
    per_key = math.prod(a_shape[len(key_shape):])
    data = lax.reshape(random_unwrap_p.bind(keys), (n_keys, 2))
    element_keys = vmap(lambda k: _split(k, (per_key,)))(data)
    element_keys = lax.reshape(element_keys, (n_keys * per_key, 2))
    alphas = lax.reshape(a, (n_keys * per_key,))
    samples = vmap(lambda k, al: _gamma_one(k, al, log_space))(element_keys, alphas)
    return lax.reshape(samples, a_shape)


# --- the primitive ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _sampler_jaxpr(keys_aval, a_aval, log_space, trace_context):
    fun = lambda keys, a: [_gamma_sampler(keys, a, log_space)]  # noqa: E731
    return pe.trace_to_jaxpr(fun, [keys_aval, a_aval])


def _random_gamma_impl(keys, a, *, log_space):
    if not a.size:
        return np.zeros(a.shape, a.dtype)
    avals = ShapedArray(keys.shape, key_dtype()), ShapedArray(a.shape, a.dtype)
    closed = _sampler_jaxpr(*avals, log_space, config.trace_context())
    args = [core.make_array(np.array(x), aval) for x, aval in zip((keys, a), avals)]
    with core.set_current_trace(core.eval_trace):  # eagerly, on copies of the operands
        out, = core.eval_jaxpr(closed.jaxpr, closed.consts, *args)
    return core.to_numpy(out)


def _random_gamma_abstract_eval(keys, a, *, log_space):
    if not isinstance(keys.dtype, KeyTy):
        raise TypeError(f"random_gamma takes a key array operand, got keys.dtype="
                        f"{keys.dtype}")
    if dtypes.kind(a.dtype) != "f":
        raise TypeError(f"random_gamma requires a floating-point a, got {a.dtype}")
    if a.shape[:keys.ndim] != keys.shape:
        raise ValueError(f"random_gamma: the keys' shape {keys.shape} must be a prefix of "
                         f"the shape of a, {a.shape}")
    return a


random_gamma_p = standard_primitive("random_gamma", _random_gamma_impl,
                                    _random_gamma_abstract_eval)


def _gamma_grad(sample, a, log_space):
    """``d sample / d a``: the reparameterization gradient (of ``log sample`` in log space,
    with a sample that underflowed to 0 taken as the smallest normal float)."""
    if not log_space:
        return lax.random_gamma_grad(a, sample)
    samples = lax.exp(sample)
    tiny = lax.full_like(samples, dtypes.finfo(core.get_aval(samples).dtype).tiny)
    samples = lax.select(lax.eq(samples, lax.full_like(samples, 0)), tiny, samples)
    return lax.div(lax.random_gamma_grad(a, samples), samples)


ad.defjvp2(random_gamma_p, None,
           lambda g, ans, keys, a, *, log_space: lax.mul(g, _gamma_grad(ans, a, log_space)))


def _random_gamma_batch(vals, dims, *, log_space):
    size = batching.axis_size_of(vals, dims)
    keys, a = (batching.bdim_at_front(x, d, size) for x, d in zip(vals, dims))
    return random_gamma_p.bind(keys, a, log_space=log_space), 0


batching.primitive_batchers[random_gamma_p] = _random_gamma_batch


# --- the samplers ----------------------------------------------------------------------------


def _gamma(key, a, shape, dtype, log_space):
    a_shape = _shape_of(a)
    if shape is None:
        shape = a_shape
    else:
        _check_shape("gamma", shape, a_shape)
    a = lax.convert_element_type(jnp.asarray(a), dtype)
    if core.get_aval(a).shape != shape:
        a = jnp.broadcast_to(a, shape)
    return random_gamma_p.bind(_wrap(key), a, log_space=log_space)


def gamma(key, a, shape=None, dtype=None):
    """Gamma(a, 1) values; differentiable in ``a``."""
    key, _ = _check_key("gamma", key)
    dtype = _float_dtype("gamma", dtype)
    return _gamma(key, a, None if shape is None else canonical_shape(shape), dtype, False)


def loggamma(key, a, shape=None, dtype=None):
    """The logarithms of Gamma(a, 1) values, accurate for small ``a`` (whose samples
    underflow in linear space); differentiable in ``a``."""
    key, _ = _check_key("loggamma", key)
    dtype = _float_dtype("gamma", dtype)  # JAX's message names `gamma`
    return _gamma(key, a, None if shape is None else canonical_shape(shape), dtype, True)


def beta(key, a, b, shape=None, dtype=None):
    """Beta(a, b) values: ``Ga / (Ga + Gb)`` for gamma draws, formed from their logarithms
    (scaled by the larger) so that small ``a`` and ``b`` keep their precision."""
    key, _ = _check_key("beta", key)
    dtype = _float_dtype("beta", dtype)
    _check_all_safe_to_cast("beta", dtype, a, b)
    shape = _check_broadcast_shapes("beta", shape, a, b)
    a = jnp.broadcast_to(lax.convert_element_type(jnp.asarray(a), dtype), shape)
    b = jnp.broadcast_to(lax.convert_element_type(jnp.asarray(b), dtype), shape)
    key_a, key_b = _split(key, (2,))
    log_gamma_a = _gamma(key_a, a, shape, dtype, True)
    log_gamma_b = _gamma(key_b, b, shape, dtype, True)
    log_max = lax.max(log_gamma_a, log_gamma_b)
    gamma_a = lax.exp(lax.sub(log_gamma_a, log_max))
    gamma_b = lax.exp(lax.sub(log_gamma_b, log_max))
    return lax.div(gamma_a, lax.add(gamma_a, gamma_b))


def chisquare(key, df, shape=None, dtype=None):
    """Chi-square values with ``df`` degrees of freedom: ``2 * Gamma(df / 2)``."""
    key, _ = _check_key("chisquare", key)
    dtype = _float_dtype("chisquare", dtype)
    shape = _check_broadcast_shapes("chisquare", shape, df)
    _check_all_safe_to_cast("chisquare", dtype, df)
    return _chisquare(key, df, shape, dtype)


def _chisquare(key, df, shape, dtype):
    two = _const(2, dtype)
    half_df = jnp.divide(lax.convert_element_type(jnp.asarray(df), dtype), two)
    return lax.mul(lax.exp(_gamma(key, half_df, shape, dtype, True)), two)


def f(key, dfnum, dfden, shape=None, dtype=None):
    """F-distribution values: the ratio of two chi-squares, each over its degrees."""
    key, _ = _check_key("f", key)
    dtype = _float_dtype("f", dtype)
    shape = _check_broadcast_shapes("f", shape, dfnum, dfden)
    _check_all_safe_to_cast("f", dtype, dfnum, dfden)
    dfden = lax.convert_element_type(jnp.asarray(dfden), dtype)
    dfnum = lax.convert_element_type(jnp.asarray(dfnum), dtype)
    key_dfd, key_dfn = _split(key, (2,))
    num = jnp.divide(_chisquare(key_dfn, dfnum, shape, dtype), dfnum)
    den = jnp.divide(_chisquare(key_dfd, dfden, shape, dtype), dfden)
    return lax.div(num, den)


def t(key, df, shape=None, dtype=None):
    """Student's t values: ``n * sqrt((df / 2) / g)`` for ``n`` normal and ``g`` a
    Gamma(df / 2) draw."""
    key, _ = _check_key("t", key)
    dtype = _float_dtype("t", dtype)
    shape = _check_broadcast_shapes("t", shape, df)
    _check_all_safe_to_cast("t", dtype, df)
    df = lax.convert_element_type(jnp.asarray(df), dtype)
    key_n, key_g = _split(key, (2,))
    n = _normal(key_n, shape, dtype)
    half_df = jnp.divide(df, _const(2, dtype))
    g = _gamma(key_g, half_df, shape, dtype, False)
    return jnp.multiply(n, jnp.sqrt(jnp.divide(half_df, g)))


def generalized_normal(key, p, shape=(), dtype=None):
    """Generalized normal values of power ``p`` (density ``exp(-|x|^p)``): a random sign
    times ``Gamma(1 / p) ** (1 / p)``."""
    shape = canonical_shape(shape)
    key, _ = _check_key("generalized_normal", key)
    dtype = dtypes.canonicalize_dtype(dtypes.default_float_dtype() if dtype is None else dtype)
    if dtypes.kind(dtype) != "f":
        raise ValueError(f"dtype argument to `gamma` must be a float dtype, got {dtype.name}")
    return _generalized_normal(key, p, shape, dtype)


def _generalized_normal(key, p, shape, dtype):
    k_gamma, k_sign = _split(key, (2,))
    inv_p = 1 / p if type(p) in (int, float) else jnp.divide(1, p)
    g = _gamma(k_gamma, inv_p, shape, dtype, False)
    r = _rademacher(k_sign, shape, dtype)
    return jnp.multiply(r, jnp.power(g, inv_p))
