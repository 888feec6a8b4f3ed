"""Gaussian kernel density estimation (``jax.scipy.stats.gaussian_kde``)."""

import numpy as np

from remat import lax, random
from remat import numpy as jnp
from remat.numpy.util import _check_arraylike, _promote_dtypes_inexact
from remat.scipy import special
from remat.transforms import api
from remat.tree_util import register_pytree_node_class

__all__ = ["gaussian_kde"]


def _cholesky_solve(chol, b):
    """``(L L^T)^-1 b`` for the lower Cholesky factor ``L`` and a matrix ``b``."""
    y = lax.linalg.triangular_solve(chol, b, left_side=True, lower=True)
    return lax.linalg.triangular_solve(chol, y, left_side=True, lower=True, transpose_a=True)


@register_pytree_node_class
class gaussian_kde:  # noqa: N801 (JAX's and SciPy's name)
    """A kernel density estimate from ``dataset`` (``(d, n)``, or ``(n,)`` for one
    dimension) with Gaussian kernels whose covariance is the data covariance times
    ``factor**2``; ``bw_method`` is 'scott' (default), 'silverman', a scalar factor, or a
    callable of the estimator. ``weights`` weigh the points."""

    __slots__ = ("neff", "dataset", "weights", "covariance", "inv_cov")

    def __init__(self, dataset, bw_method=None, weights=None):
        _check_arraylike("gaussian_kde", dataset)
        dataset = jnp.atleast_2d(dataset)
        if jnp.iscomplexobj(dataset):
            raise NotImplementedError("gaussian_kde does not support complex data")
        if not dataset.size > 1:
            raise ValueError("`dataset` input should have multiple elements.")
        d, n = dataset.shape
        if weights is not None:
            _check_arraylike("gaussian_kde", weights)
            dataset, weights = _promote_dtypes_inexact(dataset, jnp.asarray(weights))
            weights = jnp.atleast_1d(weights)
            weights = weights / jnp.sum(weights)
            if weights.ndim != 1:
                raise ValueError("`weights` input should be one-dimensional.")
            if len(weights) != n:
                raise ValueError("`weights` input should be of length n")
        else:
            dataset, = _promote_dtypes_inexact(dataset)
            weights = jnp.full(n, 1.0 / n, dtype=dataset.dtype)
        self.dataset, self.weights = dataset, weights
        self.neff = 1 / jnp.sum(weights ** 2)
        self.set_bandwidth(bw_method)

    def set_bandwidth(self, bw_method=None):
        """Recompute the kernel covariance for a new ``bw_method``."""
        d = self.d
        bw_method = "scott" if bw_method is None else bw_method
        if isinstance(bw_method, str) and bw_method == "scott":
            factor = jnp.power(self.neff, -1.0 / (d + 4))
        elif isinstance(bw_method, str) and bw_method == "silverman":
            factor = jnp.power(self.neff * (d + 2) / 4.0, -1.0 / (d + 4))
        elif np.ndim(bw_method) == 0 and not isinstance(bw_method, str) and \
                not callable(bw_method):
            factor = bw_method
        elif callable(bw_method):
            factor = bw_method(self)
        else:
            raise ValueError("`bw_method` should be 'scott', 'silverman', a scalar, or a "
                             "callable.")
        data_covariance = jnp.atleast_2d(jnp.cov(self.dataset, rowvar=1, bias=False,
                                                 aweights=self.weights))
        data_inv_cov = jnp.linalg.inv(data_covariance)
        self.covariance = data_covariance * factor ** 2
        self.inv_cov = data_inv_cov / factor ** 2

    def tree_flatten(self):
        return (self.neff, self.dataset, self.weights, self.covariance, self.inv_cov), None

    @classmethod
    def tree_unflatten(cls, aux_data, children):
        kde = cls.__new__(cls)
        kde.neff, kde.dataset, kde.weights, kde.covariance, kde.inv_cov = children
        return kde

    @property
    def d(self):
        return self.dataset.shape[0]

    @property
    def n(self):
        return self.dataset.shape[1]

    def _reshape_points(self, points):
        points = jnp.asarray(points)
        if jnp.iscomplexobj(points):
            raise NotImplementedError("gaussian_kde does not support complex coordinates")
        points = jnp.atleast_2d(points)
        d, m = points.shape
        if d != self.d:
            if d == 1 and m == self.d:
                return jnp.reshape(points, (self.d, 1))
            raise ValueError(f"points have dimension {d}, dataset has dimension {self.d}")
        return points

    def evaluate(self, points):
        """The density at ``points`` (``(d, m)``)."""
        _check_arraylike("evaluate", points)
        points = self._reshape_points(points)
        return _kernel_sum(False, self.dataset.T, self.weights[:, None], points.T,
                           self.inv_cov)[:, 0]

    __call__ = evaluate
    pdf = evaluate

    def logpdf(self, x):
        """The log density at ``x``, by a log-sum-exp over the kernels."""
        _check_arraylike("logpdf", x)
        x = self._reshape_points(x)
        return _kernel_sum(True, self.dataset.T, self.weights[:, None], x.T,
                           self.inv_cov)[:, 0]

    def integrate_gaussian(self, mean, cov):
        """The integral of the density times a Gaussian ``N(mean, cov)``."""
        mean = jnp.atleast_1d(jnp.squeeze(jnp.asarray(mean)))
        cov = jnp.atleast_2d(jnp.asarray(cov))
        if mean.shape != (self.d,):
            raise ValueError(f"mean does not have dimension {self.d}")
        if cov.shape != (self.d, self.d):
            raise ValueError(f"covariance does not have dimension {self.d}")
        chol = lax.linalg.cholesky(self.covariance + cov)
        norm = 1.0 / (jnp.sqrt(2 * np.pi) ** self.d * jnp.prod(jnp.diag(chol)))
        return _kernel_convolve(chol, norm, self.dataset, self.weights, mean)

    def integrate_box_1d(self, low, high):
        """The probability mass between ``low`` and ``high`` (one dimension only)."""
        if self.d != 1:
            raise ValueError("integrate_box_1d() only handles 1D pdfs")
        if np.ndim(low) != 0 or np.ndim(high) != 0:
            raise ValueError("the limits of integration in integrate_box_1d must be scalars")
        sigma = jnp.squeeze(jnp.sqrt(self.covariance))
        low = jnp.squeeze((low - self.dataset) / sigma)
        high = jnp.squeeze((high - self.dataset) / sigma)
        return jnp.sum(self.weights * (special.ndtr(high) - special.ndtr(low)))

    def integrate_kde(self, other):
        """The integral of the product of two estimates."""
        if other.d != self.d:
            raise ValueError("KDEs are not the same dimensionality")
        chol = lax.linalg.cholesky(self.covariance + other.covariance)
        norm = 1.0 / (jnp.sqrt(2 * np.pi) ** self.d * jnp.prod(jnp.diag(chol)))
        small, large = (self, other) if self.n < other.n else (other, self)
        result = api.vmap(lambda mean: _kernel_convolve(chol, norm, large.dataset,
                                                        large.weights, mean),
                          in_axes=1)(small.dataset)
        return jnp.sum(result * small.weights)

    def resample(self, key, shape=()):
        """Samples of the density, ``(d, *shape)``: a data point drawn by weight plus
        Gaussian noise of the kernel covariance."""
        ind_key, eps_key = random.split(key)
        ind = random.choice(ind_key, self.n, shape=shape, p=self.weights)
        normal = random.normal(eps_key, tuple(shape) + (self.d,), dtype=self.dataset.dtype)
        eps = jnp.moveaxis(normal @ lax.linalg.cholesky(self.covariance).T, -1, 0)
        return self.dataset[:, ind] + eps

    def integrate_box(self, low_bounds, high_bounds, maxpts=None):
        raise NotImplementedError(
            "only 1D box integrations are supported; use `integrate_box_1d`")


def _kernel_convolve(chol, norm, target, weights, mean):
    diff = target - mean[:, None]
    alpha = _cholesky_solve(chol, diff)
    arg = 0.5 * jnp.sum(diff * alpha, axis=0)
    return norm * jnp.sum(jnp.exp(-arg) * weights)


def _kernel_sum(in_log, points, values, xi, precision):
    """sum_j values_j N(xi; points_j, precision^-1) for each row of ``xi`` (in logs with
    ``in_log``)."""
    points, values, xi, precision = _promote_dtypes_inexact(points, values, xi, precision)
    d = points.shape[1]
    if xi.shape[1] != d:
        raise ValueError("points and xi must have same trailing dim")
    if precision.shape != (d, d):
        raise ValueError("precision matrix must match data dims")
    whitening = lax.linalg.cholesky(precision)
    points = jnp.dot(points, whitening)
    xi = jnp.dot(xi, whitening)
    log_norm = jnp.sum(jnp.log(jnp.diag(whitening))) - 0.5 * d * np.log(2 * np.pi)
    sq_dist = jnp.sum(jnp.square(xi[:, None, :] - points[None, :, :]), axis=-1)  # (m, n)
    arg = log_norm - 0.5 * sq_dist
    if in_log:
        return special.logsumexp(jnp.log(values[:, 0])[None, :] + arg, axis=1)[:, None]
    return jnp.sum(values[:, 0][None, :] * jnp.exp(arg), axis=1)[:, None]
