"""``remat.numpy.linalg``: JAX's ``jax.numpy.linalg``, written on the primitives of
``remat.lax.linalg`` (LAPACK impls with JVP, transpose and batching rules), so every function
is differentiable in both modes and batchable where JAX's is.

As in JAX: ``solve`` factors ``a`` once by LU and differentiates by a custom JVP that reuses
the factorization (``dx = solve(a, db - da x)``; the tangent side is triangular solves and a
row gather, which transpose); ``inv`` is ``solve`` with the identity; ``det`` and ``slogdet``
come from LU with JAX's custom JVPs (a cofactor solve keeps ``det``'s derivative finite at
singular matrices); ``pinv`` has JAX's custom JVP (Golub and Pereyra).
"""

import itertools
import math
import operator
from typing import NamedTuple

import numpy as np

from remat import dtypes
from remat.array import Array
from remat.core import Tracer
from remat.custom_derivatives import custom_jvp
from remat.lax import linalg as lax_linalg
from remat.numpy import contractions, elementwise, reductions, selection
from remat.numpy.creation import arange, eye, ones, zeros, zeros_like
from remat.numpy.einsum import einsum
from remat.numpy.elementwise import conj, exp, log, power, real, sqrt, square
from remat.numpy.indexing import take_along_axis
from remat.numpy.logic import isinf, isnan, where
from remat.numpy.reductions import count_nonzero, cumprod, prod
from remat.numpy.scalar_types import complexfloating, finfo, inexact, issubdtype, result_type
from remat.numpy.shapes import broadcast_to, concatenate, expand_dims, flip, moveaxis, swapaxes
from remat.numpy.sorting import argsort
from remat.numpy.util import array, asarray, broadcast_shapes

__all__ = [
    "cholesky", "cond", "cross", "det", "diagonal", "eig", "eigh", "eigvals", "eigvalsh", "inv",
    "lstsq", "matmul", "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose",
    "multi_dot", "norm", "outer", "pinv", "qr", "slogdet", "solve", "svd", "svdvals",
    "tensordot", "tensorinv", "tensorsolve", "trace", "vecdot", "vector_norm",
]


class EighResult(NamedTuple):
    eigenvalues: Array
    eigenvectors: Array


class EigResult(NamedTuple):
    eigenvalues: Array
    eigenvectors: Array


class QRResult(NamedTuple):
    Q: Array
    R: Array


class SlogdetResult(NamedTuple):
    sign: Array
    logabsdet: Array


class SVDResult(NamedTuple):
    U: Array
    S: Array
    Vh: Array


# --- helpers ---------------------------------------------------------------------------------


_SCALARS = (bool, int, float, complex, np.ndarray, np.generic, Array, Tracer)


def _ensure_arraylike(name, *args):
    """``args`` as arrays; lists and other non-arrays are a TypeError, as in JAX."""
    for i, x in enumerate(args):
        if not isinstance(x, _SCALARS):
            raise TypeError(f"{name} requires ndarray or scalar arguments, got {type(x)} at "
                            f"position {i}.")
    return [asarray(x) for x in args]


def _promote_inexact(*args):
    """``args`` as arrays of their common inexact dtype (integers and booleans become the
    default float)."""
    dtype = result_type(*args)
    if not issubdtype(dtype, inexact):
        dtype = dtypes.default_float_dtype()
    arrays = [asarray(x) for x in args]
    return [x if x.dtype == dtype else x.astype(dtype) for x in arrays]


def _mT(x):
    return swapaxes(x, -1, -2)


def _H(x):
    return conj(_mT(x))


def _symmetrize(x):
    return (x + _H(x)) / 2


def _is_complex(x):
    return issubdtype(x.dtype, complexfloating)


def _abs_sq(x):
    return square(elementwise.abs(x)) if _is_complex(x) else x * x


def _canonicalize_axis(axis, ndim):
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim


# --- decompositions --------------------------------------------------------------------------


def cholesky(a, *, upper=False, symmetrize_input=True):
    """The Cholesky factor of a Hermitian positive-definite ``a``: lower ``L`` with
    ``a = L L^H`` (or upper ``U = L^H`` with ``upper=True``); NaNs where it fails."""
    (a,) = _promote_inexact(*_ensure_arraylike("jnp.linalg.cholesky", a))
    chol = lax_linalg.cholesky(a, symmetrize_input=symmetrize_input)
    return _H(chol) if upper else chol


def svd(a, full_matrices=True, compute_uv=True, hermitian=False, subset_by_index=None):
    """Singular value decomposition ``a = U diag(S) Vh`` of the last two axes: an
    ``SVDResult(U, S, Vh)``, or just ``S`` (descending) with ``compute_uv=False``;
    ``hermitian=True`` uses the (faster) Hermitian eigendecomposition."""
    (a,) = _promote_inexact(*_ensure_arraylike("jnp.linalg.svd", a))
    if hermitian:
        w, v = lax_linalg.eigh(a, subset_by_index=subset_by_index)
        s = elementwise.abs(v)
        order = flip(argsort(s, axis=-1), axis=-1)  # descending, as JAX's sort + rev
        s = take_along_axis(s, order, axis=-1)
        if not compute_uv:
            return s
        sign = take_along_axis(elementwise.sign(v), order, axis=-1)
        u = take_along_axis(w, order[..., None, :], axis=-1)
        return SVDResult(u, s, _H(u * sign[..., None, :].astype(u.dtype)))
    out = lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv,
                         subset_by_index=subset_by_index)
    return SVDResult(*out) if compute_uv else out


def svdvals(x, /):
    """The singular values of the last two axes, in descending order."""
    (x,) = _ensure_arraylike("jnp.linalg.svdvals", x)
    return svd(x, compute_uv=False, hermitian=False)


def eig(a):
    """Eigenvalues and right eigenvectors of a general square matrix, complex:
    ``EigResult(eigenvalues, eigenvectors)``."""
    (a,) = _promote_inexact(*_ensure_arraylike("jnp.linalg.eig", a))
    w, v = lax_linalg.eig(a, compute_left_eigenvectors=False)
    return EigResult(w, v)


def eigvals(a):
    """The (complex) eigenvalues of a general square matrix."""
    (a,) = _promote_inexact(*_ensure_arraylike("jnp.linalg.eigvals", a))
    return lax_linalg.eig(a, compute_left_eigenvectors=False,
                          compute_right_eigenvectors=False)[0]


def _uplo_lower(uplo):
    if uplo is None or uplo == "L":
        return True
    if uplo == "U":
        return False
    raise ValueError(f"UPLO must be one of None, 'L', or 'U', got {uplo}")


def eigh(a, UPLO=None, symmetrize_input=True):
    """Eigenvalues (ascending) and eigenvectors of a Hermitian matrix:
    ``EighResult(eigenvalues, eigenvectors)``."""
    (a,) = _ensure_arraylike("jnp.linalg.eigh", a)
    lower = _uplo_lower(UPLO)
    (a,) = _promote_inexact(a)
    v, w = lax_linalg.eigh(a, lower=lower, symmetrize_input=symmetrize_input)
    return EighResult(w, v)


def eigvalsh(a, UPLO="L", *, symmetrize_input=True):
    """The eigenvalues (ascending) of a Hermitian matrix."""
    (a,) = _promote_inexact(*_ensure_arraylike("jnp.linalg.eigvalsh", a))
    return eigh(a, UPLO, symmetrize_input=symmetrize_input).eigenvalues


def qr(a, mode="reduced"):
    """QR decomposition: ``QRResult(Q, R)`` for modes ``'reduced'`` (thin), ``'complete'``
    and ``'full'`` (thin, as JAX), just ``R`` for ``'r'``, and LAPACK's Householder form
    ``(a^T, taus)`` for ``'raw'``."""
    (a,) = _promote_inexact(*_ensure_arraylike("jnp.linalg.qr", a))
    if mode == "raw":
        packed, taus = lax_linalg.geqrf(a)
        return QRResult(_mT(packed), taus)
    if mode in ("reduced", "r", "full"):
        full_matrices = False
    elif mode == "complete":
        full_matrices = True
    else:
        raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
    q, r = lax_linalg.qr(a, pivoting=False, full_matrices=full_matrices)
    return r if mode == "r" else QRResult(q, r)


# --- solve, inv, det -------------------------------------------------------------------------


@custom_jvp
def _solve_core(a, b):
    """``a^-1 b`` for ``a [..., m, m]`` and ``b [..., m, k]`` with equal batch dims."""
    lu_, _, perm = lax_linalg.lu(a)
    return lax_linalg.lu_solve(lu_, perm, b)


@_solve_core.defjvp
def _solve_core_jvp(primals, tangents):
    """One LU factorization for the value and the tangent: ``dx = a^-1 (db - da x)``."""
    (a, b), (da, db) = primals, tangents
    lu_, _, perm = lax_linalg.lu(a)
    x = lax_linalg.lu_solve(lu_, perm, b)
    return x, lax_linalg.lu_solve(lu_, perm, db - contractions.matmul(da, x))


def solve(a, b):
    """The solution ``x`` of ``a x = b``: ``b`` is ``[..., m]`` (vectors) or ``[..., m, k]``,
    batch dims broadcast."""
    a, b = _promote_inexact(*_ensure_arraylike("jnp.linalg.solve", a, b))
    if a.ndim < 2:
        raise ValueError(f"left hand array must be at least two dimensional; got "
                         f"a.shape={a.shape}")
    if b.ndim > 1 and a.ndim == b.ndim + 1 and a.shape[-1] == b.shape[-1] and \
            a.shape[-1] != b.shape[-2]:
        raise ValueError(f"Invalid shapes for solve: {a.shape}, {b.shape}. Prior to JAX "
                         f"v0.5.0, this would have been treated as a batched 1-dimensional "
                         f"solve. To recover this behavior, use solve(a, b[..., None])"
                         f".squeeze(-1).")
    vector = b.ndim == 1
    core_b = b.shape[-1:] if vector else b.shape[-2:]
    if a.shape[-1] != a.shape[-2] or core_b[0] != a.shape[-1]:
        raise ValueError(f"The arguments to solve must have shapes a=[..., m, m] and "
                         f"b=[..., m, k] or b=[..., m]; got a={a.shape} and b={b.shape}")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:b.ndim - len(core_b)])
    a = broadcast_to(a, batch + a.shape[-2:])
    b = broadcast_to(b[..., None] if vector else b, batch + core_b + ((1,) if vector else ()))
    x = _solve_core(a, b)
    return x[..., 0] if vector else x


def inv(a):
    """The inverse of a square matrix (batched), as ``solve(a, I)``."""
    (arr,) = _ensure_arraylike("jnp.linalg.inv", a)
    if arr.ndim < 2 or arr.shape[-1] != arr.shape[-2]:
        raise ValueError(f"Argument to inv must have shape [..., n, n], got {arr.shape}.")
    (arr,) = _promote_inexact(arr)
    return solve(arr, broadcast_to(eye(arr.shape[-1], dtype=arr.dtype), arr.shape))


def _lu_sign_parity(pivots, n):
    iota = arange(n, dtype=pivots.dtype)
    return count_nonzero(pivots != iota, axis=-1)


def _slogdet_from_lu(a):
    lu_, pivots, _ = lax_linalg.lu(a)
    dtype = a.dtype
    diag = selection.diagonal(lu_, axis1=-2, axis2=-1)
    is_zero = reductions.any(diag == array(0, dtype=dtype), axis=-1)
    parity = _lu_sign_parity(pivots, a.shape[-1])
    if _is_complex(a):
        sign = prod(diag / elementwise.abs(diag).astype(dtype), axis=-1)
    else:
        sign = array(1, dtype=dtype)
        parity = parity + count_nonzero(diag < 0, axis=-1)
    sign = where(is_zero, array(0, dtype=dtype),
                     sign * array(-2 * (parity % 2) + 1, dtype=dtype))
    logdet = where(is_zero, array(-np.inf, dtype=dtype),
                       reductions.sum(log(elementwise.abs(diag)).astype(dtype), axis=-1))
    return sign, real(logdet)


def _slogdet_from_qr(a):
    """``|det a| = prod |r_ii|``; the sign of ``det q`` (a product of reflections) from the
    LU of the well-conditioned ``q``."""
    q, r = lax_linalg.qr(a, full_matrices=False)
    r_diag = selection.diagonal(r, axis1=-2, axis2=-1)
    sign_q, _ = _slogdet_from_lu(q)
    logdet = reductions.sum(log(elementwise.abs(r_diag)), axis=-1)
    return sign_q * prod(elementwise.sign(r_diag), axis=-1), logdet


def _slogdet_jvp(primals, tangents):
    (x,), (g,) = primals, tangents
    sign, ans = slogdet(x)
    ans_dot = reductions.trace(solve(x, g), axis1=-1, axis2=-2)
    if _is_complex(x):
        sign_dot = (ans_dot - real(ans_dot).astype(ans_dot.dtype)) * sign
        ans_dot = real(ans_dot)
    else:
        sign_dot = zeros_like(sign)
    return (sign, ans), (sign_dot, ans_dot)


_slogdet_lu = custom_jvp(_slogdet_from_lu)
_slogdet_lu.defjvp(_slogdet_jvp)
_slogdet_qr = custom_jvp(_slogdet_from_qr)
_slogdet_qr.defjvp(_slogdet_jvp)


@custom_jvp
def _slogdet_small(a):
    """Closed forms for 1x1 and 2x2 matrices."""
    if a.shape[-1] == 1:
        det_ = a[..., 0, 0]
    else:
        det_ = a[..., 0, 0] * a[..., 1, 1] - a[..., 0, 1] * a[..., 1, 0]
    return elementwise.sign(det_), real(log(elementwise.abs(det_)))


@_slogdet_small.defjvp
def _slogdet_small_jvp(primals, tangents):
    (x,), (g,) = primals, tangents
    sign, ans = _slogdet_small(x)
    if x.shape[-1] == 1:
        ans_dot = g[..., 0, 0] / x[..., 0, 0]
    else:
        x00, x01, x10, x11 = x[..., 0, 0], x[..., 0, 1], x[..., 1, 0], x[..., 1, 1]
        det_ = x00 * x11 - x01 * x10
        ans_dot = (g[..., 0, 0] * x11 - g[..., 0, 1] * x10 - g[..., 1, 0] * x01
                   + g[..., 1, 1] * x00) / det_
    if _is_complex(x):
        sign_dot = (ans_dot - real(ans_dot).astype(ans_dot.dtype)) * sign
        ans_dot = real(ans_dot)
    else:
        sign_dot = zeros_like(sign)
    return (sign, ans), (sign_dot, ans_dot)


def slogdet(a, *, method=None):
    """``SlogdetResult(sign, logabsdet)`` of the determinant, by LU (``method=None`` or
    ``'lu'``) or QR (``'qr'``)."""
    (a,) = _promote_inexact(*_ensure_arraylike("jnp.linalg.slogdet", a))
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"Argument to slogdet() must have shape [..., n, n], got {a.shape}")
    if method is None or method == "lu":
        if a.shape[-1] in (1, 2):
            return SlogdetResult(*_slogdet_small(a))
        return SlogdetResult(*_slogdet_lu(a))
    if method == "qr":
        return SlogdetResult(*_slogdet_qr(a))
    raise ValueError(f"Unknown slogdet method '{method}'. Supported methods are 'lu' (`None`), "
                     f"and 'qr'.")


def _cofactor_solve(a, b):
    """``(det a, det(a) a^-1 b)``, finite where ``a`` is singular: JAX's derivative of
    ``det`` (the adjugate, ``det(a) a^-1``, exists at every ``a``)."""
    n = a.shape[-1]
    if n == 1:
        return a[..., 0, 0], b
    lu_, pivots, permutation = lax_linalg.lu(a)
    batch = broadcast_shapes(lu_.shape[:-2], b.shape[:-2])
    x = broadcast_to(b, batch + b.shape[-2:])
    lu_ = broadcast_to(lu_, batch + lu_.shape[-2:])
    diag = selection.diagonal(lu_, axis1=-2, axis2=-1)
    parity = _lu_sign_parity(pivots, n)
    sign = asarray(-2 * (parity % 2) + 1, dtype=a.dtype)
    # partial_det[..., -1] is det(a); partial_det[..., -2] is det(u) / u_nn.
    partial_det = cumprod(diag, axis=-1) * sign[..., None]
    lu_ = lu_.at[..., -1, -1].set(1.0 / partial_det[..., -2])
    permutation = broadcast_to(permutation, (*batch, n))
    d = lax_linalg.triangular_solve(lu_, ones(x.shape[:-1], x.dtype), left_side=True,
                                    lower=False)
    d = reductions.any(isnan(d) | isinf(d), axis=-1)[..., None, None]  # not full rank
    x = where(d, zeros_like(x), x)
    x = take_along_axis(x, permutation[..., None], axis=-2)
    x = lax_linalg.triangular_solve(lu_, x, left_side=True, lower=True, unit_diagonal=True)
    x = concatenate((x[..., :-1, :] * partial_det[..., -1, None, None], x[..., -1:, :]),
                        axis=-2)
    x = lax_linalg.triangular_solve(lu_, x, left_side=True, lower=False)
    x = where(d, zeros_like(x), x)
    return partial_det[..., -1], x


@custom_jvp
def _det(a):
    sign, logdet = slogdet(a)
    return sign * exp(logdet).astype(sign.dtype)


@_det.defjvp
def _det_jvp(primals, tangents):
    (x,), (g,) = primals, tangents
    y, z = _cofactor_solve(x, g)
    return y, reductions.trace(z, axis1=-1, axis2=-2)


def det(a):
    """The determinant of the last two axes (closed forms for 2x2 and 3x3)."""
    (a,) = _promote_inexact(*_ensure_arraylike("jnp.linalg.det", a))
    shape = a.shape
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ValueError(f"Argument to _det() must have shape [..., n, n], got {shape}")
    if shape[-1] == 2:
        return a[..., 0, 0] * a[..., 1, 1] - a[..., 0, 1] * a[..., 1, 0]
    if shape[-1] == 3:
        return (a[..., 0, 0] * a[..., 1, 1] * a[..., 2, 2]
                + a[..., 0, 1] * a[..., 1, 2] * a[..., 2, 0]
                + a[..., 0, 2] * a[..., 1, 0] * a[..., 2, 1]
                - a[..., 0, 2] * a[..., 1, 1] * a[..., 2, 0]
                - a[..., 0, 0] * a[..., 1, 2] * a[..., 2, 1]
                - a[..., 0, 1] * a[..., 1, 0] * a[..., 2, 2])
    return _det(a)


# --- pinv, lstsq, rank, cond, powers ---------------------------------------------------------


def _pinv_impl(a, rtol, hermitian):
    m, n = a.shape[-2:]
    if m == 0 or n == 0:
        return zeros(a.shape[:-2] + (n, m), a.dtype)
    arr = conj(a)
    if rtol is None:
        rtol = 10.0 * max(m, n) * array(finfo(arr.dtype).eps)
    rtol = asarray(rtol)
    u, s, vh = svd(arr, full_matrices=False, hermitian=hermitian)
    rtol = expand_dims(rtol[..., None], tuple(range(s.ndim - rtol.ndim - 1)))
    cutoff = rtol * s[..., 0:1]  # singular values at most rtol * the largest are dropped
    s = where(s > cutoff, s, np.inf).astype(u.dtype)
    res = contractions.matmul(_mT(vh), _mT(u) / s[..., None])
    return res.astype(arr.dtype)


def _pinv_jvp(rtol, hermitian, primals, tangents):
    """Golub and Pereyra (1973): the derivative of the pseudo-inverse."""
    (a,), (a_dot,) = primals, tangents
    p = _pinv(a, rtol, hermitian)
    if hermitian:  # svd(..., hermitian=True) symmetrizes its input; so must the JVP
        a, a_dot = _symmetrize(a), _symmetrize(a_dot)
    m, n = a.shape[-2:]
    if m >= n:
        s = (p @ _H(p)) @ _H(a_dot)
        t = (_H(a_dot) @ _H(p)) @ p
        p_dot = -(p @ a_dot) @ p + s - (s @ a) @ p + t - (p @ a) @ t
    else:
        s = p @ (_H(p) @ _H(a_dot))
        t = _H(a_dot) @ (_H(p) @ p)
        p_dot = -p @ (a_dot @ p) + s - s @ (a @ p) + t - p @ (a @ t)
    return p, p_dot


_pinv = custom_jvp(_pinv_impl, nondiff_argnums=(1, 2))
_pinv.defjvp(_pinv_jvp)


def pinv(a, rtol=None, hermitian=False, *, rcond=None):
    """The Moore-Penrose pseudo-inverse, dropping singular values at most ``rtol`` times the
    largest (default ``10 * max(m, n) * eps``); ``rcond`` is ``rtol``'s old name."""
    if rcond is not None:
        if rtol is not None:
            raise ValueError("pinv: only one of rtol and rcond may be specified.")
        rtol = rcond
    (a,) = _promote_inexact(*_ensure_arraylike("jnp.linalg.pinv", a))
    return _pinv(a, rtol, bool(hermitian))


def lstsq(a, b, rcond=None, *, numpy_resid=False):
    """The least-squares solution of ``a x = b`` via the SVD: ``(x, residuals, rank, s)``;
    residuals are always returned unless ``numpy_resid``, as NumPy."""
    a, b = _promote_inexact(*_ensure_arraylike("jnp.linalg.lstsq", a, b))
    if a.shape[0] != b.shape[0]:
        raise ValueError("Leading dimensions of input arrays must match")
    b_orig_ndim = b.ndim
    if b_orig_ndim == 1:
        b = b[:, None]
    if a.ndim != 2:
        raise TypeError(f"{a.ndim}-dimensional array given. Array must be two-dimensional")
    if b.ndim != 2:
        raise TypeError(f"{b.ndim}-dimensional array given. Array must be one or "
                        f"two-dimensional")
    m, n = a.shape
    dtype = a.dtype
    if a.size == 0:
        s = zeros(0, dtype=a.dtype)
        rank = array(0, dtype=int)
        x = zeros((n, *b.shape[1:]), dtype=a.dtype)
    else:
        if rcond is None:
            rcond = float(finfo(dtype).eps) * max(n, m)
        else:
            rcond = where(rcond < 0, finfo(dtype).eps, rcond)
        u, s, vt = svd(a, full_matrices=False)
        mask = (s > 0) & (s >= array(rcond, dtype=s.dtype) * s[0])
        rank = mask.sum()
        safe_s = where(mask, s, 1).astype(a.dtype)
        s_inv = where(mask, 1 / safe_s, 0)[:, None]
        x = contractions.matmul(_H(vt), s_inv * contractions.matmul(_H(u), b))
    if numpy_resid and (rank < n or m <= n):
        resid = asarray([])
    else:
        resid = norm(b - contractions.matmul(a, x), axis=0) ** 2
    if b_orig_ndim == 1:
        x = x.ravel()
    return x, resid, rank, s


def matrix_rank(M, rtol=None, *, hermitian=False, tol=None):
    """The number of singular values above ``rtol`` (default ``max(m, n) * eps`` times the
    largest)."""
    (M,) = _ensure_arraylike("jnp.linalg.matrix_rank", M)
    if tol is not None:
        if rtol is not None:
            raise ValueError("matrix_rank: only one of tol or rtol may be specified.")
        rtol = tol
    (M,) = _promote_inexact(M)
    if M.ndim < 2:
        return (M != 0).any().astype(np.int32)
    S = svd(M, full_matrices=False, compute_uv=False, hermitian=hermitian)
    if rtol is None:
        rtol = S.max(-1) * np.array(max(M.shape[-2:]), S.dtype) * finfo(S.dtype).eps
    rtol = expand_dims(rtol, np.ndim(rtol))
    return reductions.sum(S > rtol, axis=-1)


def matrix_power(a, n):
    """``a`` raised to the integer power ``n`` by repeated squaring (``inv`` first for
    ``n < 0``)."""
    (arr,) = _ensure_arraylike("jnp.linalg.matrix_power", a)
    if arr.ndim < 2:
        raise TypeError(f"{arr.ndim}-dimensional array given. Array must be at least "
                        f"two-dimensional")
    if arr.shape[-2] != arr.shape[-1]:
        raise TypeError("Last 2 dimensions of the array must be square")
    try:
        n = operator.index(n)
    except TypeError as err:
        raise TypeError(f"exponent must be an integer, got {n}") from err
    if n == 0:
        return broadcast_to(eye(arr.shape[-2], dtype=arr.dtype), arr.shape)
    if n < 0:
        arr, n = inv(arr), -n
    if n <= 3:
        out = arr
        for _ in range(n - 1):
            out = out @ arr
        return out
    z = result = None
    while n > 0:
        z = arr if z is None else z @ z
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else result @ z
    return result


def cond(x, p=None):
    """The condition number in the ``p``-norm (the ratio of extreme singular values for
    ``p`` None, 2 or -2; ``norm(x, p) * norm(inv(x), p)`` otherwise)."""
    (arr,) = _ensure_arraylike("cond", x)
    if arr.ndim < 2:
        raise ValueError(f"jnp.linalg.cond: input array must be at least 2D; got "
                         f"{arr.shape=}")
    if arr.shape[-1] == 0 or arr.shape[-2] == 0:
        raise ValueError(f"jnp.linalg.cond: input array must not be empty; got {arr.shape=}")
    if p is None or p == 2:
        s = svdvals(arr)
        return s[..., 0] / s[..., -1]
    if p == -2:
        s = svdvals(arr)
        r = s[..., -1] / s[..., 0]
    else:
        if arr.shape[-2] != arr.shape[-1]:
            raise ValueError(f"jnp.linalg.cond: for {p=}, array must be square; got "
                             f"{arr.shape=}")
        r = norm(arr, ord=p, axis=(-2, -1)) * norm(inv(arr), ord=p, axis=(-2, -1))
    # NaNs (from a singular x) become infinities where x itself has no NaNs.
    return where(isnan(r) & ~isnan(arr).any(axis=(-2, -1)), np.inf, r)


# --- norms -----------------------------------------------------------------------------------


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """The vector ``ord``-norm over ``axis`` (all axes, flattened, by default)."""
    (x,) = _promote_inexact(*_ensure_arraylike("jnp.linalg.vector_norm", x))
    if ord is None or ord == 2:
        return sqrt(reductions.sum(_abs_sq(x), axis=axis, keepdims=keepdims))
    if isinstance(ord, str):
        msg = f"Invalid order '{ord}' for vector norm."
        if ord in ("inf", "-inf"):
            msg += f"Use '{ord[:-3]}jax.numpy.inf' instead."
        raise ValueError(msg)
    if ord == np.inf:
        return reductions.max(elementwise.abs(x), axis=axis, keepdims=keepdims, initial=0)
    if ord == -np.inf:
        return reductions.min(elementwise.abs(x), axis=axis, keepdims=keepdims)
    if ord == 0:
        return reductions.sum(x != 0, dtype=finfo(x.dtype).dtype, axis=axis, keepdims=keepdims)
    if ord == 1:
        return reductions.sum(elementwise.abs(x), axis=axis, keepdims=keepdims)
    abs_x = elementwise.abs(x)
    ord_arr = array(ord, abs_x.dtype)
    out = reductions.sum(abs_x ** ord_arr, axis=axis, keepdims=keepdims)
    return power(out, array(1.0, abs_x.dtype) / ord_arr)


def _matrix_norm(x, ord, axis, keepdims):
    row_axis, col_axis = axis
    if ord is None or ord in ("f", "fro"):
        return sqrt(reductions.sum(_abs_sq(x), axis=axis, keepdims=keepdims))
    if ord in (1, -1, np.inf, -np.inf):
        # 1: the largest column sum (sum over rows); inf: the largest row sum.
        sum_axis, pick_axis = (row_axis, col_axis) if ord in (1, -1) else (col_axis, row_axis)
        if not keepdims and pick_axis > sum_axis:
            pick_axis -= 1
        sums = reductions.sum(elementwise.abs(x), axis=sum_axis, keepdims=keepdims)
        if ord > 0:
            return reductions.max(sums, axis=pick_axis, keepdims=keepdims, initial=0)
        return reductions.min(sums, axis=pick_axis, keepdims=keepdims)
    if ord in ("nuc", 2, -2):
        s = svd(moveaxis(x, axis, (-2, -1)), compute_uv=False)
        if ord == 2:
            y = reductions.max(s, axis=-1, initial=0)
        elif ord == -2:
            y = reductions.min(s, axis=-1)
        else:
            y = reductions.sum(s, axis=-1)
        return expand_dims(y, axis) if keepdims else y
    raise ValueError(f"Invalid order '{ord}' for matrix norm.")


def norm(x, ord=None, axis=None, keepdims=False):
    """Vector norms over one axis and matrix norms (``None``/'fro', 'nuc', 1, -1, 2, -2,
    inf, -inf) over two; with ``axis=None`` a 1-D input takes a vector norm, a 2-D input a
    matrix norm, and ``ord=None`` the 2-norm of all elements."""
    (x,) = _promote_inexact(*_ensure_arraylike("jnp.linalg.norm", x))
    ndim = x.ndim
    if axis is None:
        if ord is None:
            return sqrt(reductions.sum(_abs_sq(x), keepdims=keepdims))
        axis = tuple(range(ndim))
    elif isinstance(axis, tuple):
        axis = tuple(_canonicalize_axis(a, ndim) for a in axis)
    else:
        axis = (_canonicalize_axis(axis, ndim),)
    if len(axis) == 1:
        return vector_norm(x, ord=2 if ord is None else ord, axis=axis, keepdims=keepdims)
    if len(axis) == 2:
        if axis[0] == axis[1]:
            raise ValueError("Duplicate axes given.")
        return _matrix_norm(x, ord, axis, keepdims)
    raise ValueError(f"Improper number of axes for norm: {axis=}. Pass one axis to compute a "
                     f"vector-norm, or two axes to compute a matrix-norm.")


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """The matrix ``ord``-norm of the last two axes."""
    (x,) = _ensure_arraylike("jnp.linalg.matrix_norm", x)
    return norm(x, ord=ord, keepdims=keepdims, axis=(-2, -1))


# --- the array-API wrappers and tensor functions ---------------------------------------------


def cross(x1, x2, /, *, axis=-1):
    """The cross product of 3-vectors along ``axis``."""
    x1, x2 = _ensure_arraylike("jnp.linalg.cross", x1, x2)
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ValueError(f"Both input arrays must be (arrays of) 3-dimensional vectors, but "
                         f"they have {x1.shape[axis]=} and {x2.shape[axis]=}")
    return contractions.cross(x1, x2, axis=axis)


def outer(x1, x2, /):
    """The outer product of two vectors."""
    x1, x2 = _ensure_arraylike("jnp.linalg.outer", x1, x2)
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError(f"Input arrays must be one-dimensional, but they are {x1.ndim=} "
                         f"{x2.ndim=}")
    return x1[:, None] * x2[None, :]


def matrix_transpose(x, /):
    """Swap the last two axes."""
    (x,) = _ensure_arraylike("jnp.linalg.matrix_transpose", x)
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose requires at least 2 dimensions; got "
                         f"ndim={x.ndim}")
    return _mT(x)


def vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    """The dot product of vectors along ``axis`` (conjugating ``x1``), broadcasting the
    rest."""
    x1, x2 = _ensure_arraylike("jnp.linalg.vecdot", x1, x2)
    return contractions.vecdot(x1, x2, axis=axis, precision=precision,
                      preferred_element_type=preferred_element_type)


def matmul(x1, x2, /, *, precision=None, preferred_element_type=None):
    """Matrix product with NumPy's broadcasting."""
    x1, x2 = _ensure_arraylike("jnp.linalg.matmul", x1, x2)
    return contractions.matmul(x1, x2, precision=precision,
                               preferred_element_type=preferred_element_type)


def tensordot(x1, x2, /, *, axes=2, precision=None, preferred_element_type=None,
              out_sharding=None):
    """Tensor contraction over ``axes`` (an int: the last of ``x1`` with the first of
    ``x2``; or two sequences of axes)."""
    x1, x2 = _ensure_arraylike("jnp.linalg.tensordot", x1, x2)
    return contractions.tensordot(x1, x2, axes=axes, precision=precision,
                         preferred_element_type=preferred_element_type)


def diagonal(x, /, *, offset=0):
    """The diagonals of the last two axes."""
    (x,) = _ensure_arraylike("jnp.linalg.diagonal", x)
    return selection.diagonal(x, offset=offset, axis1=-2, axis2=-1)


def trace(x, /, *, offset=0, dtype=None):
    """The sum of the diagonals of the last two axes."""
    (x,) = _ensure_arraylike("jnp.linalg.trace", x)
    return reductions.trace(x, offset=offset, axis1=-2, axis2=-1, dtype=dtype)


def tensorinv(a, ind=2):
    """The inverse of ``a`` as a linear map from its last ``a.ndim - ind`` axes to its first
    ``ind`` axes."""
    (arr,) = _ensure_arraylike("tensorinv", a)
    ind = operator.index(ind)
    if ind <= 0:
        raise ValueError(f"ind must be a positive integer; got {ind=}")
    contracting_shape, batch_shape = arr.shape[:ind], arr.shape[ind:]
    flatshape = (math.prod(contracting_shape), math.prod(batch_shape))
    if flatshape[0] != flatshape[1]:
        raise ValueError(f"tensorinv is only possible when the product of the first `ind` "
                         f"dimensions equals that of the remaining dimensions. got "
                         f"{arr.shape=} with {ind=}.")
    return inv(arr.reshape(flatshape)).reshape(*batch_shape, *contracting_shape)


def tensorsolve(a, b, axes=None):
    """The ``x`` with ``tensordot(a, x, x.ndim) == b``."""
    a_arr, b_arr = _ensure_arraylike("tensorsolve", a, b)
    if axes is not None:
        a_arr = moveaxis(a_arr, axes, len(axes) * (a_arr.ndim - 1,))
    out_shape = a_arr.shape[b_arr.ndim:]
    if a_arr.shape[:b_arr.ndim] != b_arr.shape:
        raise ValueError(f"After moving axes to end, leading shape of a must match shape of "
                         f"b. got a.shape={a_arr.shape}, b.shape={b_arr.shape}")
    if b_arr.size != math.prod(out_shape):
        raise ValueError(f"Input arrays must have prod(a.shape[:b.ndim]) == "
                         f"prod(a.shape[b.ndim:]); got a.shape={a_arr.shape}, "
                         f"b.ndim={b_arr.ndim}.")
    a_arr = a_arr.reshape(b_arr.size, math.prod(out_shape))
    return solve(a_arr, b_arr.ravel()).reshape(out_shape)


def multi_dot(arrays, *, precision=None):
    """The product of a chain of matrices (the first and last may be vectors), contracted in
    the cheapest order."""
    arrs = _ensure_arraylike("jnp.linalg.multi_dot", *arrays)
    if len(arrs) < 2:
        raise ValueError(f"multi_dot requires at least two arrays; got len(arrays)="
                         f"{len(arrs)}")
    if not (arrs[0].ndim in (1, 2) and arrs[-1].ndim in (1, 2)
            and all(a.ndim == 2 for a in arrs[1:-1])):
        raise ValueError(f"multi_dot: input arrays must all be two-dimensional, except for "
                         f"the first and last array which may be 1 or 2 dimensional. Got "
                         f"array shapes {[a.shape for a in arrs]}")
    if any(a.shape[-1] != b.shape[0] for a, b in zip(arrs[:-1], arrs[1:])):
        raise ValueError(f"multi_dot: last dimension of each array must match first "
                         f"dimension of following array. Got array shapes "
                         f"{[a.shape for a in arrs]}")
    einsum_axes = [(i, i + 1) for i in range(len(arrs))]
    if arrs[0].ndim == 1:
        einsum_axes[0] = einsum_axes[0][1:]
    if arrs[-1].ndim == 1:
        einsum_axes[-1] = einsum_axes[-1][:1]
    return einsum(*itertools.chain(*zip(arrs, einsum_axes)), optimize="auto",
                      precision=precision)
