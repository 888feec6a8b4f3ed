"""Samplers of vectors and matrices: ``multivariate_normal`` (a factor of the covariance times
standard normals), ``dirichlet`` (normalized gamma draws, formed in log space), ``orthogonal``
(the Q of a Gaussian matrix's QR, signs fixed so that it is Haar-distributed) and ``ball``
(uniform in the unit p-ball, by Barthe et al.'s construction)."""

from operator import index

import numpy as np

from remat import core, dtypes, lax
from remat import numpy as jnp
from remat.lax import linalg as lax_linalg
from remat.lax.standard import canonical_shape
from remat.random.bits import _check_shape, _float_dtype, _normal, _shape_of
from remat.random.distributions import _exponential
from remat.random.gamma import _gamma, _generalized_normal
from remat.random.keys import _check_key, _split

__all__ = ["ball", "dirichlet", "multivariate_normal", "orthogonal"]


def multivariate_normal(key, mean, cov, shape=None, dtype=None, method="cholesky"):
    """Normal vectors of ``mean`` (``[..., n]``) and covariance ``cov`` (``[..., n, n]``):
    ``mean + factor @ z`` for standard normal ``z``, the factor from ``method`` (``cholesky``,
    ``eigh`` or ``svd``; the latter two accept semidefinite covariances)."""
    key, _ = _check_key("multivariate_normal", key)
    mean, cov = jnp.asarray(mean), jnp.asarray(cov)
    common = jnp.result_type(mean, cov)
    if dtypes.kind(common) not in "fc":
        common = dtypes.default_float_dtype()
    mean = lax.convert_element_type(mean, common)
    cov = lax.convert_element_type(cov, common)
    if method not in {"svd", "eigh", "cholesky"}:
        raise ValueError("method must be one of {'svd', 'eigh', 'cholesky'}")
    if dtype is None:
        dtype = common
    dtype = dtypes.canonicalize_dtype(dtype)
    if dtypes.kind(dtype) != "f":
        raise ValueError(f"dtype argument to `multivariate_normal` must be a float dtype, got "
                         f"{dtype.name}")
    if shape is not None:
        shape = canonical_shape(shape)
    mean_shape, cov_shape = core.get_aval(mean).shape, core.get_aval(cov).shape
    if len(mean_shape) < 1:
        raise ValueError(f"multivariate_normal requires mean.ndim >= 1, got mean.ndim == "
                         f"{len(mean_shape)}")
    if len(cov_shape) < 2:
        raise ValueError(f"multivariate_normal requires cov.ndim >= 2, got cov.ndim == "
                         f"{len(cov_shape)}")
    n = mean_shape[-1]
    if cov_shape[-2:] != (n, n):
        raise ValueError(f"multivariate_normal requires cov.shape == (..., n, n) for n={n}, "
                         f"but got cov.shape == {cov_shape}.")
    if shape is None:
        shape = np.broadcast_shapes(mean_shape[:-1], cov_shape[:-2])
    else:
        _check_shape("normal", shape, mean_shape[:-1], cov_shape[:-2])
    if method == "svd":
        u, s, _ = lax_linalg.svd(cov, full_matrices=True, compute_uv=True)
        factor = jnp.multiply(u, jnp.sqrt(s[..., None, :]))
    elif method == "eigh":
        v, w = lax_linalg.eigh(cov)
        factor = jnp.multiply(v, jnp.sqrt(w[..., None, :]))
    else:
        factor = lax_linalg.cholesky(cov)
    samples = _normal(key, (*shape, n), dtype)
    return jnp.add(mean, jnp.einsum("...ij,...j->...i", factor, samples))


def dirichlet(key, alpha, shape=None, dtype=None):
    """Dirichlet vectors of concentrations ``alpha`` (``[..., k]``): the softmax of
    log-gamma draws (log space keeps small concentrations from underflowing)."""
    key, _ = _check_key("dirichlet", key)
    dtype = _float_dtype("dirichlet", dtype)
    if shape is not None:
        shape = canonical_shape(shape)
    alpha_shape = _shape_of(alpha)
    if len(alpha_shape) < 1:
        raise ValueError(f"dirichlet requires alpha.ndim >= 1, got alpha.ndim == "
                         f"{len(alpha_shape)}")
    if shape is None:
        shape = alpha_shape[:-1]
    else:
        _check_shape("dirichlet", shape, alpha_shape[:-1])
    alpha = lax.convert_element_type(jnp.asarray(alpha), dtype)
    log_gamma = _gamma(key, alpha, (*shape, alpha_shape[-1]), dtype, True)
    unnormalized = jnp.exp(jnp.subtract(log_gamma, lax.stop_gradient(
        jnp.max(log_gamma, axis=-1, keepdims=True))))
    return jnp.divide(unnormalized, jnp.sum(unnormalized, axis=-1, keepdims=True))


def orthogonal(key, n, shape=(), dtype=None, m=None):
    """Haar-random matrices with orthonormal columns (``[*shape, n, m]``; ``m`` defaults to
    ``n``): Q of the QR of a Gaussian matrix with the signs of R's diagonal moved into Q."""
    shape = canonical_shape(shape)
    key, _ = _check_key("orthogonal", key)
    dtype = dtypes.canonicalize_dtype(dtypes.default_float_dtype() if dtype is None else dtype)
    if dtypes.kind(dtype) not in "fc":
        raise ValueError(f"dtype argument to `normal` must be a float or complex dtype, got "
                         f"{dtype.name}")
    n = index(core.concrete_or_error(n, "The error occurred in jax.random.orthogonal()"))
    m = n if m is None else \
        index(core.concrete_or_error(m, "The error occurred in jax.random.orthogonal()"))
    z = _normal(key, (*shape, max(n, m), min(n, m)), dtype)
    q, r = lax_linalg.qr(z, full_matrices=False)
    d = jnp.diagonal(r, axis1=-2, axis2=-1)
    x = jnp.multiply(q, jnp.expand_dims(jnp.sign(d), -2))
    return jnp.swapaxes(x, -1, -2) if n < m else x


def ball(key, d, p=2, shape=(), dtype=None):
    """Points uniform in the ``d``-dimensional unit ``p``-norm ball: ``g / (|g|_p^p + e) **
    (1 / p)`` for generalized-normal ``g`` and exponential ``e``."""
    shape = canonical_shape(shape)
    key, _ = _check_key("ball", key)
    dtype = dtypes.canonicalize_dtype(dtypes.default_float_dtype() if dtype is None else dtype)
    d = index(core.concrete_or_error(d, "The error occurred in jax.random.ball()"))
    if dtypes.kind(dtype) != "f":
        raise ValueError(f"dtype argument to `gamma` must be a float dtype, got {dtype.name}")
    k1, k2 = _split(key, (2,))
    g = _generalized_normal(k1, p, (*shape, d), dtype)
    e = _exponential(k2, shape, dtype)
    norm = jnp.power(jnp.add(jnp.sum(jnp.power(jnp.abs(g), p), axis=-1), e),
                     1 / p if type(p) in (int, float) else jnp.divide(1, p))
    return jnp.divide(g, norm[..., None])

