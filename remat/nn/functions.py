"""Activation functions, softmax and friends, with JAX's definitions and signatures.

Numerically stable forms as in JAX: ``softplus`` is ``logaddexp(x, 0)``; ``log_softmax`` and
``logsumexp`` subtract the (stop-gradient) maximum before exponentiating; ``softmax`` has a
custom JVP ``y * (t - sum(y * t))`` so its derivative never divides by a sum of exponentials;
``relu`` and ``relu6`` have custom JVPs whose value at the kinks is 0, as in JAX;
``log1mexp`` switches between ``log(-expm1(-x))`` and ``log1p(-exp(-x))`` at ``log 2``.
"""

import operator

import numpy as np

from remat import core, dtypes, lax
from remat import numpy as jnp
from remat.custom_derivatives import custom_jvp
from remat.numpy.util import _check_arraylike

__all__ = [
    "celu",
    "elu",
    "gelu",
    "glu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "identity",
    "leaky_relu",
    "log1mexp",
    "log_sigmoid",
    "log_softmax",
    "logmeanexp",
    "logsumexp",
    "mish",
    "one_hot",
    "relu",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "soft_sign",
    "softmax",
    "softplus",
    "sparse_plus",
    "sparse_sigmoid",
    "squareplus",
    "standardize",
    "swish",
    "tanh",
]


def _inexact(x):
    """``x`` as an array of an inexact dtype (integers and booleans become the default
    float), as JAX's ``promote_args_inexact``."""
    x = jnp.asarray(x)
    if dtypes.kind(core.get_aval(x).dtype) not in "fc":
        x = x.astype(dtypes.default_float_dtype())
    return x


# --- elementwise activations -----------------------------------------------------------------


@custom_jvp
def relu(x):
    """``max(x, 0)``; its derivative at 0 is 0 (a custom JVP, as in JAX)."""
    return jnp.maximum(x, 0)


relu.defjvps(lambda g, ans, x: lax.select(lax.gt(x, lax.full_like(x, 0)), g,
                                          lax.full_like(g, 0)))


@custom_jvp
def relu6(x):
    """``min(max(x, 0), 6)``; derivative 0 at both kinks."""
    return jnp.minimum(jnp.maximum(x, 0), 6.0)


relu6.defjvps(lambda g, ans, x: lax.select(
    lax.bitwise_and(lax.gt(x, lax.full_like(x, 0)), lax.lt(x, lax.full_like(x, 6))),
    g, lax.full_like(g, 0)))


def sigmoid(x):
    """The logistic function ``1 / (1 + exp(-x))`` (float inputs, like ``lax.logistic``)."""
    return lax.logistic(jnp.asarray(x))


def silu(x):
    """``x * sigmoid(x)`` (also called swish)."""
    x = jnp.asarray(x)
    return x * sigmoid(x)


swish = silu


def tanh(x):
    """Hyperbolic tangent."""
    return jnp.tanh(x)


def softplus(x):
    """``log(1 + exp(x))``, as ``logaddexp(x, 0)`` so it neither overflows nor underflows."""
    return jnp.logaddexp(_inexact(x), 0)


def log_sigmoid(x):
    """``log(sigmoid(x)) = -softplus(-x)``."""
    return -softplus(-_inexact(x))


def gelu(x, approximate=True):
    """Gaussian error linear unit: ``x * Phi(x)``; ``approximate`` uses the tanh form
    ``0.5 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` for ``Phi``, otherwise the exact
    ``0.5 erfc(-x / sqrt(2))``."""
    x = _inexact(x)
    dtype = core.get_aval(x).dtype
    if approximate:
        sqrt_2_over_pi = np.sqrt(2 / np.pi).astype(dtype)
        cdf = 0.5 * (1.0 + jnp.tanh(sqrt_2_over_pi * (x + 0.044715 * (x ** 3))))
        return x * cdf
    sqrt_half = np.sqrt(0.5).astype(dtype)
    return (0.5 * x * lax.erfc(-x * sqrt_half)).astype(dtype)


def leaky_relu(x, negative_slope=1e-2):
    """``x`` where ``x >= 0``, else ``negative_slope * x``."""
    x = _inexact(x)
    return jnp.where(x >= 0, x, negative_slope * x)


def elu(x, alpha=1.0):
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)`` (no overflow for large ``x``)."""
    x = _inexact(x)
    return jnp.where(x > 0, x, alpha * jnp.expm1(jnp.where(x > 0, 0.0, x)))


def celu(x, alpha=1.0):
    """``max(x, 0) + alpha * expm1(min(x, 0) / alpha)``."""
    x = _inexact(x)
    return jnp.maximum(x, 0.0) + alpha * jnp.expm1(jnp.minimum(x, 0.0) / alpha)


def selu(x):
    """Scaled ELU with the self-normalizing constants of Klambauer et al. (2017)."""
    alpha = 1.6732632423543772848170429916717
    scale = 1.0507009873554804934193349852946
    return scale * elu(x, alpha)


def hard_tanh(x):
    """``x`` clipped to ``[-1, 1]`` (integers stay integers)."""
    x = jnp.asarray(x)
    return jnp.where(x > 1, 1, jnp.where(x < -1, -1, x))


def hard_sigmoid(x):
    """``relu6(x + 3) / 6``."""
    return relu6(_inexact(x) + 3.0) / 6.0


def hard_silu(x):
    """``x * hard_sigmoid(x)``."""
    x = _inexact(x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def soft_sign(x):
    """``x / (|x| + 1)``."""
    x = _inexact(x)
    return x / (jnp.abs(x) + 1)


def glu(x, axis=-1):
    """Gated linear unit: the first half of ``x`` along ``axis`` times the sigmoid of the
    second half."""
    x = jnp.asarray(x)
    size = core.get_aval(x).shape[axis]
    if size % 2:
        raise ValueError(f"glu: the size of axis {axis} must be even, got {size}")
    x1, x2 = jnp.split(x, 2, axis)
    return x1 * sigmoid(x2)


# --- reductions over an axis -----------------------------------------------------------------


def _axes(ndim, axis):
    """Canonical, sorted reduction axes (all of them for ``None``)."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) or np.ndim(axis) == 0 else tuple(axis)
    out = []
    for a in axes:
        a = operator.index(a)
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of bounds for array of dimension {ndim}")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in {axis}")
    return tuple(sorted(out))


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, where=None):
    """``log(sum(b * exp(a), axis))``, computed as ``amax + log(sum(b * exp(a - amax)))`` with
    the maximum ``amax`` a constant for differentiation (and 0 where it is not finite), so it
    neither overflows nor produces NaN gradients. With ``return_sign`` it returns
    ``(log|sum|, sign(sum))``; otherwise a negative sum gives NaN."""
    if where is not None:
        a = jnp.where(where, a, 0)
    if b is not None:
        a, b = _inexact(a), _inexact(b)
        dtype = dtypes.result_type(a, b)
        a, b = a.astype(dtype), b.astype(dtype)
        a = jnp.where(b != 0, a, -np.inf)
    else:
        a = _inexact(a)
    dims = _axes(core.get_aval(a).ndim, axis)
    amax = jnp.max(jnp.real(a), axis=dims, keepdims=keepdims, where=where, initial=-np.inf)
    amax = lax.stop_gradient(lax.select(jnp.isfinite(amax), amax, lax.full_like(amax, 0)))
    amax_with_dims = amax if keepdims else lax.expand_dims(amax, dims)
    exp_a = jnp.exp(a - amax_with_dims.astype(core.get_aval(a).dtype))
    if b is not None:
        exp_a = exp_a * b
    sumexp = jnp.sum(exp_a, axis=dims, keepdims=keepdims, where=where)
    sign = jnp.sign(sumexp)
    if return_sign or dtypes.kind(core.get_aval(sumexp).dtype) != "c":
        sumexp = jnp.abs(sumexp)
    out = jnp.log(sumexp) + amax.astype(core.get_aval(sumexp).dtype)
    if return_sign:
        return out, sign
    if b is not None and dtypes.kind(core.get_aval(out).dtype) != "c":
        out = jnp.where(sign < 0, np.nan, out)
    return out


def log_softmax(x, axis=-1, where=None):
    """``x - logsumexp(x, axis)``: the maximum is subtracted first (as a constant for
    differentiation), so large logits neither overflow nor lose their gradient."""
    x = _inexact(x)
    dims = _axes(core.get_aval(x).ndim, axis)
    x_max = jnp.max(x, dims, where=where, initial=-np.inf, keepdims=True)
    x_safe = x if where is None else jnp.where(where, x, -np.inf)
    shifted = x_safe - lax.stop_gradient(x_max)
    shifted_logsumexp = jnp.log(jnp.sum(jnp.exp(shifted), dims, where=where, keepdims=True))
    result = shifted - shifted_logsumexp
    if where is not None:
        return jnp.where(where, result, -np.inf)
    return result


def _softmax_impl(axis, x, where):
    x_max = jnp.max(x, axis, where=where, initial=-np.inf, keepdims=True)
    x_safe = x if where is None else jnp.where(where, x, -np.inf)
    unnormalized = jnp.exp(x_safe - x_max)
    result = unnormalized / jnp.sum(unnormalized, axis, where=where, keepdims=True)
    if where is not None:
        result = jnp.where(where, result, 0)
    return result


_softmax = custom_jvp(_softmax_impl, nondiff_argnums=(0,))


@_softmax.defjvp
def _softmax_jvp(axis, primals, tangents):
    (x, where), (x_dot, _) = primals, tangents
    y = _softmax(axis, x, where)
    return y, y * (x_dot - jnp.sum(y * x_dot, axis, where=where, keepdims=True))


def softmax(x, axis=-1, where=None):
    """``exp(x) / sum(exp(x), axis)`` (computed from ``x - max(x)``); its JVP is
    ``y * (t - sum(y * t, axis))``, exact and free of overflow."""
    x = _inexact(x)
    return _softmax(_axes(core.get_aval(x).ndim, axis), x, where)


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None, *,
                algorithm="fast"):
    """``(x - mean) / sqrt(variance + epsilon)`` with the statistics over ``axis`` unless
    given; ``algorithm='fast'`` takes the variance as ``mean(x^2) - mean(x)^2`` (clipped at
    0), ``'stable'`` as ``mean((x - mean)^2)``."""
    x = _inexact(x)
    if mean is None:
        mean = jnp.mean(x, axis, keepdims=True, where=where)
    if variance is None:
        if algorithm == "stable":
            variance = jnp.mean(jnp.square(x - mean), axis, keepdims=True, where=where)
        elif algorithm == "fast":
            variance = jnp.mean(jnp.square(x), axis, keepdims=True, where=where) \
                - jnp.square(mean)
            variance = jnp.clip(variance, 0)
        else:
            raise ValueError(f"Unknown algorithm '{algorithm}'. Expected 'fast' or 'stable'.")
    return (x - mean) * lax.rsqrt(variance + epsilon)


def one_hot(x, num_classes, *, dtype=None, axis=-1):
    """``x[..., None] == arange(num_classes)``, as ``dtype`` (default float), with the new
    axis at ``axis``. Out-of-range values give all-zero rows."""
    num_classes = core.concrete_or_error(
        num_classes, "The error arose in jax.nn.one_hot argument `num_classes`.")
    num_classes = operator.index(num_classes)
    if num_classes < 0:
        raise ValueError(f"one_hot: num_classes must be non-negative, got {num_classes}")
    x = jnp.asarray(x)
    aval = core.get_aval(x)
    dtype = dtypes.canonicalize_dtype(dtypes.default_float_dtype() if dtype is None else dtype)
    axis = operator.index(axis)
    if not -(aval.ndim + 1) <= axis <= aval.ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {aval.ndim + 1}")
    axis %= aval.ndim + 1
    lhs = lax.expand_dims(x, (axis,))
    rhs_shape = [1] * aval.ndim
    rhs_shape.insert(axis, num_classes)
    rhs = lax.broadcasted_iota(aval.dtype, rhs_shape, axis)
    return (lhs == rhs).astype(dtype)


# --- more activations (JAX 0.4.30 and later) ------------------------------------------------


def _arraylike(name, *xs):
    """``xs`` as arrays; lists and other non-arrays raise JAX's TypeError."""
    _check_arraylike(name, *xs)
    out = [jnp.asarray(x) for x in xs]
    return out[0] if len(out) == 1 else out


def identity(x):
    """``x`` itself (as an array)."""
    return _arraylike("identity", x)


def squareplus(x, b=4):
    """``(x + sqrt(x^2 + b)) / 2``, a smooth ReLU whose curvature ``b`` sets."""
    x, b = _arraylike("squareplus", x, b)
    return (x + jnp.sqrt(jnp.square(x) + b)) / 2


def sparse_plus(x):
    """0 for ``x <= -1``, ``x`` for ``x >= 1`` and ``(x + 1)^2 / 4`` between."""
    x = _arraylike("sparse_plus", x)
    return jnp.where(x <= -1.0, 0.0, jnp.where(x >= 1.0, x, (x + 1.0) ** 2 / 4))


def sparse_sigmoid(x):
    """``clip((x + 1) / 2, 0, 1)``, the derivative of ``sparse_plus``."""
    return 0.5 * jnp.clip(jnp.asarray(x) + 1.0, 0.0, 2.0)


def mish(x):
    """``x * tanh(softplus(x))``."""
    x = _arraylike("mish", x)
    return x * jnp.tanh(softplus(x))


@custom_jvp
def log1mexp(x):
    """``log(1 - exp(-x))`` for ``x > 0``: ``log(-expm1(-x))`` below ``log 2`` and
    ``log1p(-exp(-x))`` above, each where it keeps its precision."""
    x = _arraylike("log1mexp", x)
    c = jnp.log(2.0)
    return jnp.where(x < c, jnp.log(-jnp.expm1(-x)), jnp.log1p(-jnp.exp(-x)))


log1mexp.defjvps(lambda g, ans, x: g / jnp.expm1(x))


def logmeanexp(x, axis=None, where=None, keepdims=False):
    """``log(mean(exp(x), axis))``: ``logsumexp`` less the log of the number of terms
    (those selected by ``where``)."""
    lse = logsumexp(x, axis=axis, where=where, keepdims=keepdims)
    dtype = core.get_aval(lse).dtype
    if where is None:
        shape = jnp.shape(x)
        count = np.prod([shape[a] for a in _axes(len(shape), axis)], dtype=np.int64)
        count = lax.convert_element_type(count, dtype)
    else:
        count = jnp.sum(jnp.broadcast_to(where, jnp.shape(x)), axis, dtype=dtype,
                        keepdims=keepdims)
    return lse - jnp.log(count)
