"""Discrete samplers: ``categorical``, ``permutation``, ``choice``, ``rademacher``,
``geometric``, ``poisson``, ``binomial`` and ``multinomial``.

``poisson`` and ``binomial`` are JAX's (and TensorFlow's) algorithms: Knuth's product of
uniforms and inversion by geometric sums for small means, Hormann's transformed rejection
(PTRS) and BTRS for large ones. Their rejection loops are ``lax.while_loop``s over the whole
array, drawing fresh uniforms for every element at each step until every element is
accepted, as in JAX. An element accepted early is overwritten by each later acceptance, so
its value depends on how many steps the slowest element takes: the same key and parameters
give JAX's samples only if every acceptance test rounds as XLA's does, which is why these
use the XLA-rounding kernels (``xla_log``, ``xla_log1p``, ``xla_lgamma``, fused multiply-adds
where XLA fuses them). Under ``vmap`` each example's loop stops on its own, as in JAX.
"""

import math
from collections.abc import Sequence

import numpy as np

from remat import core, dtypes, lax
from remat import numpy as jnp
from remat.lax.standard import canonical_shape
from remat.random.bits import (
    _as_inexact,
    _check_broadcast_shapes,
    _check_shape,
    _gumbel,
    _gumbel_mode,
    _int_dtype,
    _randint,
    _uniform,
)
from remat.random.kernels import _const, fused_mul_add, xla_lgamma_p, xla_log1p_p, xla_log_p
from remat.random.keys import _check_key, _random_bits, _split

__all__ = ["binomial", "categorical", "choice", "geometric", "multinomial", "permutation",
           "poisson", "rademacher"]


def _top_k_indices(x, k):
    """Indices of the ``k`` largest entries along the last axis (ties: lower index first)."""
    shape = core.get_aval(x).shape
    iota = lax.broadcasted_iota(dtypes.int32, shape, len(shape) - 1)
    _, idx = lax.sort_key_val(lax.neg(x), iota, dimension=len(shape) - 1)
    return lax.slice_in_dim(idx, 0, k, axis=len(shape) - 1)


def categorical(key, logits, axis=-1, shape=None, replace=True, mode=None):
    """Indices drawn with probabilities ``softmax(logits, axis)``, by the Gumbel-max trick
    (Gumbel top-k without replacement)."""
    key, _ = _check_key("categorical", key)
    logits = jnp.asarray(logits)
    logits_shape = core.get_aval(logits).shape
    ndim = len(logits_shape)
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for logits of shape {logits_shape}")
    batch_shape = tuple(np.delete(logits_shape, axis))
    if shape is None:
        shape = batch_shape
    else:
        shape = canonical_shape(shape)
        _check_shape("categorical", shape, batch_shape)
    dtype = core.get_aval(logits).dtype
    mode = _gumbel_mode(mode)
    prefix = shape[:len(shape) - len(batch_shape)]
    if replace:
        axis = axis - ndim if axis >= 0 else axis
        noise_shape = list(shape[len(shape) - len(batch_shape):])
        noise_shape.insert(axis % ndim, logits_shape[axis])
        noisy = jnp.add(_gumbel(key, (*prefix, *noise_shape), dtype, mode),
                        lax.expand_dims(logits, tuple(range(len(prefix)))))
        return jnp.argmax(noisy, axis=axis)
    noisy = jnp.add(logits, _gumbel(key, logits_shape, dtype, mode))
    k = math.prod(prefix)
    if k > logits_shape[axis]:
        raise ValueError(f"Number of samples without replacement ({k}) cannot exceed number "
                         f"of categories ({logits_shape[axis]}).")
    idx = _top_k_indices(jnp.moveaxis(noisy, axis, -1), k)
    return lax.reshape(idx, shape, (len(batch_shape), *range(len(batch_shape))))


def _shuffle(key, x, axis):
    """Sort by fresh random 32-bit keys, repeated (3 log n / log(2**32 - 1) rounds) so that
    key collisions are unlikely to bias the permutation."""
    size = math.prod(core.get_aval(x).shape)
    rounds = int(np.ceil(3 * np.log(max(1, size)) / np.log(np.iinfo(np.uint32).max)))
    for _ in range(rounds):
        key, subkey = _split(key, (2,))
        sort_keys = _random_bits(subkey, 32, core.get_aval(x).shape)
        _, x = lax.sort_key_val(sort_keys, x, axis)
    return x


def permutation(key, x, axis=0, independent=False):
    """A shuffled ``arange(x)`` (integer ``x``) or ``x`` shuffled along ``axis`` (each slice
    on its own when ``independent``)."""
    key, _ = _check_key("permutation", key)
    return _permutation(key, x, axis, independent)


def _permutation(key, x, axis, independent):
    if not core.is_array_like(x):
        x = jnp.asarray(x)
    aval = core.get_aval(x)
    if not aval.ndim:
        if dtypes.kind(aval.dtype) not in "iu":
            raise TypeError("x must be an integer or at least 1-dimensional")
        n = int(core.concrete_or_error(x, "argument x of jax.random.permutation()"))
        return _shuffle(key, jnp.arange(n), 0)
    axis = int(axis)
    if not -aval.ndim <= axis < aval.ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {aval.ndim}")
    axis %= aval.ndim
    if independent or aval.ndim == 1:
        return _shuffle(key, x, axis)
    ind = _shuffle(key, jnp.arange(aval.shape[axis]), 0)
    return jnp.take(x, ind, axis, unique_indices=True)


def choice(key, a, shape=(), replace=True, p=None, axis=0, mode=None):
    """Samples of ``a`` (or of ``arange(a)`` for an integer) along ``axis``, uniformly or
    with probabilities ``p``, with or without replacement."""
    key, _ = _check_key("choice", key)
    if not isinstance(shape, Sequence):
        raise TypeError(f"shape argument of jax.random.choice must be a sequence, got {shape}")
    shape = canonical_shape(shape)
    arr = jnp.asarray(a)
    aval = core.get_aval(arr)
    if aval.ndim == 0:
        n_inputs = int(core.concrete_or_error(a, "The error occurred in jax.random.choice()"))
    else:
        if not -aval.ndim <= axis < aval.ndim:
            raise ValueError(f"axis {axis} is out of bounds for array of dimension "
                             f"{aval.ndim}")
        axis %= aval.ndim
        n_inputs = aval.shape[axis]
    n_draws = math.prod(shape)
    if n_draws == 0:
        return jnp.zeros(shape, dtype=aval.dtype)
    if n_inputs <= 0:
        raise ValueError("a must be greater than 0 unless no samples are taken")
    if not replace and n_draws > n_inputs:
        raise ValueError(f"Cannot take a larger sample (size {n_draws}) than population "
                         f"(size {n_inputs}) when 'replace=False'")
    if p is None:
        if replace:
            ind = _randint(key, shape, 0, n_inputs, dtypes.default_int_dtype())
            result = ind if aval.ndim == 0 else jnp.take(arr, ind, axis)
        else:
            perm = _permutation(key, n_inputs if aval.ndim == 0 else arr, axis, False)
            result = lax.slice_in_dim(perm, 0, n_draws, axis=0 if aval.ndim == 0 else axis)
    else:
        p = jnp.asarray(p)
        if dtypes.kind(core.get_aval(p).dtype) != "f":
            p = lax.convert_element_type(p, dtypes.default_float_dtype())
        if core.get_aval(p).shape != (n_inputs,):
            raise ValueError(f"p must be None or a 1D vector with the same size as "
                             f"a.shape[axis]. p has shape {core.get_aval(p).shape} and "
                             f"a.shape[axis] is {n_inputs}.")
        p_dtype = core.get_aval(p).dtype
        if replace:
            p_cuml = jnp.cumsum(p)
            u = _uniform(key, shape, p_dtype, 0.0, 1.0)
            r = jnp.multiply(p_cuml[-1], jnp.subtract(1, u))
            ind = jnp.searchsorted(p_cuml, r).astype(dtypes.default_int_dtype())
        else:
            g = jnp.add(_gumbel(key, (n_inputs,), p_dtype, _gumbel_mode(mode)),
                        xla_log_p.bind(p))
            ind = lax.convert_element_type(_top_k_indices(g, n_draws),
                                           dtypes.default_int_dtype())
        result = ind if aval.ndim == 0 else jnp.take(arr, ind, axis)
    out_shape = shape if aval.ndim == 0 else \
        aval.shape[:axis] + tuple(shape) + aval.shape[axis + 1:]
    return jnp.reshape(result, out_shape)


def rademacher(key, shape=(), dtype=None):
    """-1 or +1 with equal probability: ``2 * bernoulli(key, 0.5) - 1``."""
    key, _ = _check_key("rademacher", key)
    dtype = dtypes.canonicalize_dtype(dtypes.default_int_dtype() if dtype is None else dtype)
    return _rademacher(key, canonical_shape(shape), dtype)


def _rademacher(key, shape, dtype):
    float_dtype = dtypes.default_float_dtype()  # bernoulli(key, 0.5): a weak float p
    heads = lax.lt(_uniform(key, shape, float_dtype, 0.0, 1.0), _const(0.5, float_dtype))
    b = lax.convert_element_type(heads, dtype)
    return lax.convert_element_type(jnp.subtract(jnp.multiply(2, b), 1), dtype)


def geometric(key, p, shape=None, dtype=None):
    """Trials until the first success, success probability ``p``: ``floor(log(u) /
    log1p(-p)) + 1`` for ``u`` uniform (``u = 0`` taken as 1)."""
    key, _ = _check_key("geometric", key)
    dtype = _int_dtype("geometric", dtype)
    shape = _check_broadcast_shapes("geometric", shape, p)
    p = _as_inexact(p)
    float_dtype = core.get_aval(p).dtype
    u = _uniform(key, shape, float_dtype, 0.0, 1.0)
    u = lax.select(lax.eq(u, _const(0, float_dtype)), lax.full_like(u, 1), u)
    log_one_minus_p = jnp.broadcast_to(xla_log1p_p.bind(lax.neg(p)), shape)
    g = lax.add(lax.floor(lax.div(xla_log_p.bind(u), log_one_minus_p)), _const(1, float_dtype))
    return lax.convert_element_type(g, dtype)


# --- poisson ---------------------------------------------------------------------------------


def _poisson_knuth(key, lam, shape, dtype, max_iters):
    """Knuth: count uniforms until their product falls below ``exp(-lam)``."""

    def body(carry):
        i, k, rng, log_prod = carry
        rng, subkey = _split(rng, (2,))
        k = lax.select(lax.gt(log_prod, lax.neg(lam)), lax.add(k, _const(1, dtype)), k)
        u = _uniform(subkey, shape, dtypes.float32, 0.0, 1.0)
        return lax.add(i, _const(1, core.get_aval(i).dtype)), k, rng, \
            lax.add(log_prod, xla_log_p.bind(u))

    def cond(carry):
        i, _, _, log_prod = carry
        return jnp.logical_and(jnp.any(lax.gt(log_prod, lax.neg(lam))),
                               jnp.less(i, max_iters))

    init = (_counter(max_iters), lax.full(shape, 0, dtype), key,
            lax.full(shape, 0, dtypes.float32))
    k = lax.while_loop(cond, body, init)[1]
    return lax.convert_element_type(lax.sub(k, _const(1, dtype)), dtype)


def _counter(max_iters):
    """A loop counter of the dtype of the loop's bound."""
    return lax.full((), 0, dtypes.canonicalize_dtype(np.asarray(max_iters).dtype))


def _poisson_rejection(key, lam, shape, dtype, max_iters):
    """Hormann's transformed rejection with squeeze (PTRS), for ``lam >= 10``."""
    fdt = core.get_aval(lam).dtype
    c = lambda v: _const(v, fdt)  # noqa: E731
    log_lam = xla_log_p.bind(lam)
    b = fused_mul_add(c(2.53), lax.sqrt(lam), c(0.931))
    a = fused_mul_add(c(0.02483), b, c(-0.059))
    inv_alpha = lax.add(c(1.1239), lax.div(c(1.1328), lax.sub(b, c(3.4))))
    v_r = lax.sub(c(0.9277), lax.div(c(3.6224), lax.sub(b, c(2))))

    def body(carry):
        i, k_out, accepted, key = carry
        key, subkey_0, subkey_1 = _split(key, (3,))
        u = lax.sub(_uniform(subkey_0, shape, fdt, 0.0, 1.0), c(0.5))
        v = _uniform(subkey_1, shape, fdt, 0.0, 1.0)
        u_shifted = lax.sub(c(0.5), lax.abs(u))
        slope = lax.add(lax.div(lax.mul(c(2), a), u_shifted), b)
        k = lax.floor(lax.add(fused_mul_add(slope, u, lam), c(0.43)))
        s = xla_log_p.bind(lax.div(lax.mul(v, inv_alpha),
                                   lax.add(lax.div(a, lax.mul(u_shifted, u_shifted)), b)))
        t = lax.sub(fused_mul_add(k, log_lam, lax.neg(lam)), xla_lgamma_p.bind(lax.add(k, c(1))))
        accept1 = lax.bitwise_and(lax.ge(u_shifted, c(0.07)), lax.le(v, v_r))
        reject = lax.bitwise_or(lax.lt(k, c(0)), lax.bitwise_and(lax.lt(u_shifted, c(0.013)),
                                                                 lax.gt(v, u_shifted)))
        accept = lax.bitwise_or(accept1, lax.bitwise_and(lax.bitwise_not(reject),
                                                         lax.le(s, t)))
        k_out = lax.select(accept, k, k_out)
        return (lax.add(i, _const(1, core.get_aval(i).dtype)), k_out,
                lax.bitwise_or(accepted, accept), key)

    def cond(carry):
        i, _, accepted, _ = carry
        return jnp.logical_and(jnp.any(lax.bitwise_not(accepted)), jnp.less(i, max_iters))

    init = (_counter(max_iters), lax.full(shape, -1, fdt),
            lax.full(shape, False, dtypes.bool_), key)
    k = lax.while_loop(cond, body, init)[1]
    return lax.convert_element_type(k, dtype)


def poisson(key, lam, shape=None, dtype=None):
    """Poisson counts of rate ``lam`` (computed in float32, as JAX does): Knuth's algorithm
    where ``lam < 10``, transformed rejection elsewhere (both run; each element takes its
    own), 0 where ``lam == 0``."""
    key, _ = _check_key("poisson", key)
    dtype = dtypes.canonicalize_dtype(dtypes.default_int_dtype() if dtype is None else dtype)
    if dtypes.kind(dtype) not in "iu":
        raise ValueError(f"dtype argument to `poisson` must be an int dtype, got {dtype.name}")
    shape = _shape_of_param(lam) if shape is None else canonical_shape(shape)
    lam = lax.convert_element_type(jnp.broadcast_to(lam, shape), dtypes.float32)
    use_knuth = lax.bitwise_or(lax.ne(lam, lam), lax.lt(lam, _const(10, dtypes.float32)))
    lam_knuth = lax.select(use_knuth, lam, lax.full_like(lam, 0.0))
    lam_rejection = lax.select(use_knuth, lax.full_like(lam, 1e5), lam)
    max_iters = dtype.type(dtypes.iinfo(dtype).max)  # insanely conservative, as JAX
    result = lax.select(use_knuth, _poisson_knuth(key, lam_knuth, shape, dtype, max_iters),
                        _poisson_rejection(key, lam_rejection, shape, dtype, max_iters))
    return lax.select(lax.eq(lam, _const(0, dtypes.float32)), lax.full_like(result, 0), result)


def _shape_of_param(x):
    return core.get_aval(x).shape if core.is_array_like(x) else np.shape(x)


# --- binomial --------------------------------------------------------------------------------

_STIRLING_TAIL = np.array([0.0810614667953272, 0.0413406959554092, 0.0276779256849983,
                           0.02079067210376509, 0.0166446911898211, 0.0138761288230707,
                           0.0118967099458917, 0.0104112652619720, 0.00925546218271273,
                           0.00833056343336287])


def _stirling_approx_tail(k):
    """``log(k!) - [(k + 1/2) log(k + 1) - (k + 1) + log(2 pi)/2]``: a table for k <= 9,
    the asymptotic series beyond."""
    dt = core.get_aval(k).dtype
    c = lambda v: _const(v, dt)  # noqa: E731
    use_table = lax.le(k, c(9))
    k = lax.clamp(c(0), k, c(9))
    kp1 = lax.add(k, c(1))
    kp1sq = lax.mul(kp1, kp1)
    approx = lax.div(lax.sub(c(1 / 12), lax.div(lax.sub(c(1 / 360), lax.div(c(1 / 1260), kp1sq)),
                                                kp1sq)), kp1)
    table = jnp.asarray(_STIRLING_TAIL.astype(dt))
    return lax.select(use_table, jnp.take(table, lax.convert_element_type(lax.floor(k),
                                                                          dtypes.int32)),
                      approx)


def _binomial_inversion(key, count, prob, shape, dtype, max_iters):
    """Sum geometric waiting times until they exceed ``count`` (``count * p <= 10``)."""
    fdt = core.get_aval(prob).dtype
    c = lambda v: _const(v, fdt)  # noqa: E731
    log1minusprob = xla_log1p_p.bind(lax.neg(prob))

    def body(carry):
        i, num_geom, geom_sum, key = carry
        subkey, key = _split(key, (2,))
        num_geom_out = lax.select(lax.le(geom_sum, count), lax.add(num_geom, c(1)), num_geom)
        u = _uniform(subkey, shape, fdt, 0.0, 1.0)
        geom = lax.ceil(lax.div(xla_log_p.bind(u), log1minusprob))
        return lax.add(i, _const(1, core.get_aval(i).dtype)), num_geom_out, \
            lax.add(geom_sum, geom), key

    def cond(carry):
        i, _, geom_sum, _ = carry
        return jnp.logical_and(jnp.any(lax.le(geom_sum, count)), jnp.less(i, max_iters))

    init = (_counter(max_iters), lax.full(shape, 0, fdt),
            lax.full(shape, 0, fdt), key)
    k = lax.while_loop(cond, body, init)[1]
    return lax.convert_element_type(lax.sub(k, c(1)), dtype)


def _btrs(key, count, prob, shape, dtype, max_iters):
    """Hormann's BTRS transformed rejection (``count * p > 10``)."""
    fdt = core.get_aval(prob).dtype
    c = lambda v: _const(v, fdt)  # noqa: E731
    log = xla_log_p.bind
    stddev = lax.sqrt(lax.mul(lax.mul(count, prob), lax.sub(c(1), prob)))
    b = fused_mul_add(c(2.53), stddev, c(1.15))
    a = lax.add(fused_mul_add(c(0.0248), b, c(-0.0873)), lax.mul(c(0.01), prob))
    cc = fused_mul_add(count, prob, c(0.5))
    v_r = lax.sub(c(0.92), lax.div(c(4.2), b))
    r = lax.div(prob, lax.sub(c(1), prob))
    alpha = lax.mul(lax.add(c(2.83), lax.div(c(5.1), b)), stddev)
    m = lax.floor(lax.mul(lax.add(count, c(1)), prob))

    def body(carry):
        i, k_out, accepted, key = carry
        key, subkey_0, subkey_1 = _split(key, (3,))
        u = _uniform(subkey_0, shape, fdt, 0.0, 1.0)
        v = _uniform(subkey_1, shape, fdt, 0.0, 1.0)
        u = lax.sub(u, c(0.5))
        us = lax.sub(c(0.5), lax.abs(u))
        accept1 = lax.bitwise_and(lax.ge(us, c(0.07)), lax.le(v, v_r))
        k = lax.floor(fused_mul_add(lax.add(lax.div(lax.mul(c(2), a), us), b), u, cc))
        reject = lax.bitwise_or(lax.lt(k, c(0)), lax.gt(k, count))
        v = log(lax.div(lax.mul(v, alpha), lax.add(lax.div(a, lax.mul(us, us)), b)))
        n_m1 = lax.add(lax.sub(count, m), c(1))
        n_k1 = lax.add(lax.sub(count, k), c(1))
        ub = lax.add(lax.mul(lax.add(m, c(0.5)),
                             log(lax.div(lax.add(m, c(1)), lax.mul(r, n_m1)))),
                     lax.mul(lax.add(count, c(1)), log(lax.div(n_m1, n_k1))))
        ub = lax.add(ub, lax.mul(lax.add(k, c(0.5)),
                                 log(lax.div(lax.mul(r, n_k1), lax.add(k, c(1))))))
        ub = lax.add(ub, _stirling_approx_tail(m))
        ub = lax.add(ub, _stirling_approx_tail(lax.sub(count, m)))
        ub = lax.sub(ub, _stirling_approx_tail(k))
        ub = lax.sub(ub, _stirling_approx_tail(lax.sub(count, k)))
        accept = lax.bitwise_or(accept1, lax.bitwise_and(lax.bitwise_not(reject),
                                                         lax.le(v, ub)))
        k_out = lax.select(accept, k, k_out)
        return (lax.add(i, _const(1, core.get_aval(i).dtype)), k_out,
                lax.bitwise_or(accepted, accept), key)

    def cond(carry):
        i, _, accepted, _ = carry
        return jnp.logical_and(jnp.any(lax.bitwise_not(accepted)), jnp.less(i, max_iters))

    init = (_counter(max_iters), lax.full(shape, -1, fdt),
            lax.full(shape, False, dtypes.bool_), key)
    return lax.convert_element_type(lax.while_loop(cond, body, init)[1], dtype)


def binomial(key, n, p, shape=None, dtype=None):
    """Successes in ``n`` trials of probability ``p`` (as floats): inversion where
    ``n * min(p, 1 - p) <= 10``, BTRS elsewhere; NaN for invalid ``n`` or ``p``, inf for
    ``n = inf``."""
    key, _ = _check_key("binomial", key)
    for name, v in (("n", n), ("p", p)):
        if not core.is_array_like(v):
            raise TypeError(f"binomial requires ndarray or scalar arguments, got "
                            f"{type(v)} at position {('n', 'p').index(name)}.")
    dtype = dtypes.canonicalize_dtype(dtypes.default_float_dtype() if dtype is None else dtype)
    if dtypes.kind(dtype) != "f":
        raise ValueError(f"dtype argument to `binomial` must be a float dtype, got "
                         f"{dtype.name}")
    return _binomial(key, n, p, None if shape is None else canonical_shape(shape), dtype)


def _binomial(key, n, p, shape, dtype):
    if shape is None:
        shape = np.broadcast_shapes(_shape_of_param(n), _shape_of_param(p))
    else:
        _check_shape("binomial", shape, _shape_of_param(n), _shape_of_param(p))
    prob = _as_inexact(p)
    fdt = core.get_aval(prob).dtype
    c = lambda v: _const(v, fdt)  # noqa: E731
    count = jnp.broadcast_to(lax.convert_element_type(jnp.asarray(n), fdt), shape)
    prob = jnp.broadcast_to(prob, shape)
    p_lt_half = lax.lt(prob, c(0.5))
    q = lax.select(p_lt_half, prob, lax.sub(c(1), prob))
    count_nan_or_neg = lax.bitwise_or(lax.ne(count, count), lax.lt(count, c(0)))
    count_inf = jnp.isinf(count)
    q_is_nan = lax.ne(q, q)
    q_l_0 = lax.lt(q, c(0))
    q = lax.select(lax.bitwise_or(q_is_nan, q_l_0), lax.full_like(q, 0.01), q)
    use_inversion = lax.bitwise_or(count_nan_or_neg, lax.le(lax.mul(count, q), c(10)))
    count = lax.floor(count)  # float counts as np.random.binomial takes them
    count_inv = lax.select(use_inversion, count, lax.full_like(count, 0.0))
    count_btrs = lax.select(use_inversion, lax.full_like(count, 1e4), count)
    q_btrs = lax.select(use_inversion, lax.full_like(q, 0.5), q)
    max_iters = dtype.type(dtypes.finfo(dtype).max)
    samples = lax.select(use_inversion,
                         _binomial_inversion(key, count_inv, q, shape, dtype, max_iters),
                         _btrs(key, count_btrs, q_btrs, shape, dtype, max_iters))
    invalid = lax.bitwise_or(lax.bitwise_or(q_l_0, q_is_nan), count_nan_or_neg)
    samples = lax.select(invalid, lax.full_like(samples, np.nan), samples)
    samples = lax.select(lax.bitwise_and(count_inf, lax.bitwise_not(invalid)),
                         lax.full_like(samples, np.inf), samples)
    keep = lax.bitwise_or(lax.bitwise_or(p_lt_half, count_nan_or_neg),
                          lax.bitwise_or(q_is_nan, count_inf))
    return lax.select(keep, samples, lax.sub(lax.convert_element_type(count, dtype), samples))


def multinomial(key, n, p, *, shape=None, dtype=None, unroll=1):
    """Counts of ``n`` draws over the categories of the last axis of ``p``: a scan of
    binomials over the categories, each of the remaining count."""
    key, _ = _check_key("multinomial", key)
    for i, v in enumerate((n, p)):
        if not core.is_array_like(v):
            raise TypeError(f"multinomial requires ndarray or scalar arguments, got "
                            f"{type(v)} at position {i}.")
    n, p = jnp.asarray(n), jnp.asarray(p)
    fdt = jnp.result_type(n, p)
    if dtypes.kind(fdt) not in "fc":
        fdt = dtypes.default_float_dtype()
    n, p = lax.convert_element_type(n, fdt), lax.convert_element_type(p, fdt)
    shape = core.get_aval(p).shape if shape is None else canonical_shape(shape)
    n = jnp.broadcast_to(n, shape[:-1])
    p = jnp.moveaxis(jnp.broadcast_to(p, shape), -1, 0)
    remaining = jnp.flip(jnp.cumsum(jnp.flip(p, 0), 0), 0)
    ratios = lax.div(p, jnp.where(lax.eq(remaining, _const(0, fdt)), _const(1, fdt), remaining))
    keys = _split(key, (core.get_aval(ratios).shape[0],))

    def step(remainder, ratio_key):
        ratio, k = ratio_key
        count = _binomial(k, remainder, jnp.clip(ratio, 0, 1), None, fdt)
        return lax.sub(remainder, count), count

    _, counts = lax.scan(step, n, (ratios, keys), unroll=unroll)
    out_dtype = dtypes.default_float_dtype() if dtype is None else dtype
    return jnp.moveaxis(counts, 0, -1).astype(out_dtype)
