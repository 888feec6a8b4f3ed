"""``remat.scipy.linalg``: JAX's ``jax.scipy.linalg``, written on ``remat.lax.linalg`` and
``remat.numpy.linalg``, so the factorizations and solves are differentiable and batchable.

SciPy's ``overwrite_*``, ``check_finite``, ``lwork`` and ``lapack_driver`` arguments are
accepted and ignored, as in JAX. Beyond JAX: ``eigh`` solves the generalized problem (``b``,
``type`` 1-3, by a Cholesky reduction) and takes ``eigvals``; ``lu`` takes batches;
``eigh_tridiagonal`` is the dense Hermitian eigendecomposition of the tridiagonal matrix
(differentiable); ``polar`` computes both methods by the SVD. ``sqrtm``, ``funm``,
``rsf2csf`` and ``solve_sylvester`` work in complex arithmetic (complex Schur forms), as
JAX's, and need ``conj``/``real`` of complex arrays.
"""

import math
import operator
import warnings
from functools import partial

import numpy as np

import remat.numpy as jnp
from remat import dtypes, lax
from remat.custom_derivatives import custom_jvp
from remat.lax import linalg as lax_linalg
from remat.numpy import linalg as jnp_linalg
from remat.scipy import special
from remat.transforms import api

__all__ = [
    "block_diag", "cho_factor", "cho_solve", "cholesky", "circulant", "companion",
    "convolution_matrix", "det", "dft", "eigh", "eigh_tridiagonal", "expm", "expm_frechet",
    "fiedler", "fiedler_companion", "funm", "hadamard", "hankel", "helmert", "hessenberg",
    "hilbert", "inv", "invhilbert", "invpascal", "leslie", "lu", "lu_factor", "lu_solve",
    "pascal", "polar", "qr", "qr_multiply", "rsf2csf", "schur", "solve", "solve_sylvester",
    "solve_triangular", "sqrtm", "svd", "toeplitz",
]

_ensure_arraylike = jnp_linalg._ensure_arraylike
_promote_inexact = jnp_linalg._promote_inexact


def _arrays(name, *args):
    return _promote_inexact(*_ensure_arraylike(name, *args))


def _H(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def _rhs_signature(name, a, b):
    """Whether ``b`` is a (batch of) vector(s): SciPy's rule, with JAX's deprecation of
    batched 1-D right-hand sides."""
    if b.ndim == 1:
        return True
    if a.ndim == b.ndim + 1 and a.shape[-1] == b.shape[-1]:
        warnings.warn(f"jax.scipy.linalg.{name}: batched 1D solves with b.ndim > 1 are "
                      f"deprecated, and in the future will be treated as a batched 2D solve. "
                      f"Use {name}(..., b[..., None]).squeeze(-1) to avoid this warning.",
                      category=FutureWarning, stacklevel=3)
        return True
    return False


def _broadcast_solve(fn, a_operands, b, vector):
    """``fn(*a_operands, b)`` with ``b`` as a ``[..., m, k]`` matrix and every batch dim
    broadcast (the primitives want equal batch dims)."""
    core_b = b.shape[-1:] if vector else b.shape[-2:]
    a_batches = [x.shape[:x.ndim - r] for x, r in a_operands]
    batch = jnp.broadcast_shapes(*a_batches, b.shape[:b.ndim - len(core_b)])
    operands = [jnp.broadcast_to(x, batch + x.shape[x.ndim - r:]) for x, r in a_operands]
    b = jnp.broadcast_to(b[..., None] if vector else b, batch + core_b + ((1,) if vector else ()))
    out = fn(*operands, b)
    return out[..., 0] if vector else out


# --- Cholesky, LU, QR, triangular solves -----------------------------------------------------


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """The Cholesky factor of a Hermitian positive-definite matrix: upper ``U`` with
    ``a = U^H U`` (lower ``L`` with ``lower=True``); only that triangle of ``a`` is read."""
    (a,) = _arrays("cholesky", a)
    chol = lax_linalg.cholesky(a if lower else _H(a), symmetrize_input=False)
    return chol if lower else _H(chol)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """``(c, lower)`` for ``cho_solve``."""
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """Solve ``a x = b`` given ``cho_factor(a)``."""
    c, lower = c_and_lower
    c, b = _arrays("cho_solve", c, b)
    vector = _rhs_signature("cho_solve", c, b)

    def solve_(c_, b_):
        b_ = lax_linalg.triangular_solve(c_, b_, left_side=True, lower=lower,
                                         transpose_a=not lower, conjugate_a=not lower)
        return lax_linalg.triangular_solve(c_, b_, left_side=True, lower=lower,
                                           transpose_a=lower, conjugate_a=lower)

    return _broadcast_solve(solve_, [(c, 2)], b, vector)


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     debug=None, check_finite=True):
    """Solve ``op(a) x = b`` for triangular ``a``: ``trans`` 0/'N' (``a``), 1/'T'
    (``a^T``) or 2/'C' (``a^H``)."""
    if trans in (0, "N"):
        transpose_a, conjugate_a = False, False
    elif trans in (1, "T"):
        transpose_a, conjugate_a = True, False
    elif trans in (2, "C"):
        transpose_a, conjugate_a = True, True
    else:
        raise ValueError(f"Invalid 'trans' value {trans}")
    a, b = _arrays("solve_triangular", a, b)
    vector = _rhs_signature("solve_triangular", a, b)
    return _broadcast_solve(
        partial(lax_linalg.triangular_solve, left_side=True, lower=lower,
                transpose_a=transpose_a, conjugate_a=conjugate_a, unit_diagonal=unit_diagonal),
        [(a, 2)], b, vector)


def lu_factor(a, overwrite_a=False, check_finite=True):
    """``(lu, piv)`` for ``lu_solve``: ``L`` and ``U`` packed, LAPACK's row swaps (0-based)."""
    (a,) = _arrays("lu_factor", a)
    lu_, pivots, _ = lax_linalg.lu(a)
    return lu_, pivots


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """Solve ``a x = b`` (``trans=0``), ``a^T x = b`` (1) or ``a^H x = b`` (2) given
    ``lu_factor(a)``."""
    lu_, pivots = lu_and_piv
    lu_, b = _arrays("lu_solve", lu_, b)
    pivots = jnp.asarray(pivots)
    perm = lax_linalg.lu_pivots_to_permutation(pivots, lu_.shape[-2])
    vector = _rhs_signature("lu_solve", lu_, b)
    return _broadcast_solve(partial(lax_linalg.lu_solve, trans=trans), [(lu_, 2), (perm, 1)],
                            b, vector)


def lu(a, permute_l=False, overwrite_a=False, check_finite=True):
    """LU decomposition ``a = p l u``: ``(p, l, u)``, or ``(p l, u)`` with ``permute_l``."""
    (a,) = _arrays("lu", a)
    lu_, _, permutation = lax_linalg.lu(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    p = (permutation[..., None, :] == jnp.arange(m, dtype=permutation.dtype)[:, None])
    p = p.astype(a.dtype)
    lower = jnp.tril(lu_, -1)[..., :, :k] + jnp.eye(m, k, dtype=a.dtype)
    upper = jnp.triu(lu_)[..., :k, :]
    if permute_l:
        return jnp.matmul(p, lower), upper
    return p, lower, upper


def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """QR decomposition: ``(q, r)`` for modes 'full' and 'economic', ``(r,)`` for 'r'; with
    ``pivoting``, the column permutation ``p`` (``a[:, p] = q r``) is appended."""
    if mode in ("full", "r"):
        full_matrices = True
    elif mode == "economic":
        full_matrices = False
    else:
        raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
    (a,) = _arrays("qr", a)
    q, r, *p = lax_linalg.qr(a, pivoting=pivoting, full_matrices=full_matrices)
    if mode == "r":
        return (r, p[0]) if pivoting else (r,)
    return (q, r, p[0]) if pivoting else (q, r)


def qr_multiply(a, c, mode="right", pivoting=False, conjugate=False, overwrite_a=False,
                overwrite_c=False):
    """``c @ q`` (``mode='right'``) or ``q @ c`` ('left') for the thin ``q`` of ``qr(a)``,
    with the economic ``r`` (and the pivots, with ``pivoting``)."""
    a, c = _arrays("qr_multiply", a, c)
    if mode not in ("right", "left"):
        raise ValueError(f"mode must be 'right' or 'left', got {mode!r}")
    onedim = c.ndim == 1
    if onedim:
        c = c[:, None] if mode == "left" else c[None, :]
    m, n = a.shape[-2:]
    k = min(m, n)
    if mode == "left" and c.shape[-2] != k:
        raise ValueError(f"Array shapes are not compatible for Q @ c operation: a has shape "
                         f"{tuple(a.shape)} so Q has {k} columns, but c has {c.shape[-2]} "
                         f"rows (expected {k}).")
    if mode == "right" and c.shape[-1] != m:
        raise ValueError(f"Array shapes are not compatible for c @ Q operation: a has shape "
                         f"{tuple(a.shape)} so Q has {m} rows, but c has {c.shape[-1]} "
                         f"columns (expected {m}).")
    q, r, *p = lax_linalg.qr(a, pivoting=pivoting, full_matrices=False)
    q = jnp.conj(q) if conjugate else q
    out = jnp.matmul(q, c) if mode == "left" else jnp.matmul(c, q)
    if onedim:
        out = out.ravel()
    return (out, r, p[0]) if pivoting else (out, r)


def _solve_positive_impl(a, b, lower):
    """``a^-1 b`` for Hermitian positive-definite ``a`` (``[..., m, m]``, ``b [..., m, k]``,
    equal batch dims) by Cholesky, reading the ``lower`` (or upper) triangle of ``a``."""
    return cho_solve(cho_factor(a, lower=lower), b)


def _solve_positive_jvp(lower, primals, tangents):
    """One factorization for the value and the tangent: ``dx = a^-1 (db - da x)``."""
    (a, b), (da, db) = primals, tangents
    factor = cho_factor(a, lower=lower)
    x = cho_solve(factor, b)
    return x, cho_solve(factor, db - jnp.matmul(da, x))


_solve_positive = custom_jvp(_solve_positive_impl, nondiff_argnums=(2,))
_solve_positive.defjvp(_solve_positive_jvp)


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, debug=False,
          check_finite=True, assume_a="gen"):
    """Solve ``a x = b``; ``assume_a='pos'`` factors a positive-definite ``a`` by Cholesky
    (reading the ``lower`` triangle), the others ('gen', 'sym', 'her') by LU."""
    valid_assume_a = ["gen", "sym", "her", "pos"]
    if assume_a not in valid_assume_a:
        raise ValueError(f"Expected assume_a to be one of {valid_assume_a}; got {assume_a!r}")
    if assume_a != "pos":
        return jnp_linalg.solve(a, b)
    a, b = _arrays("solve", a, b)
    if not (a.ndim >= 2 and b.ndim in (a.ndim, a.ndim - 1)
            and a.shape[-1] == a.shape[-2] == b.shape[a.ndim - 2]):
        raise ValueError(f"The arguments to solve must have shapes a=[..., m, m] and "
                         f"b=[..., m, k] or b=[..., m]; got a={a.shape} and b={b.shape}")
    return _broadcast_solve(lambda a_, b_: _solve_positive(a_, b_, bool(lower)), [(a, 2)], b,
                            a.ndim == b.ndim + 1)


# --- decompositions --------------------------------------------------------------------------


def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
        lapack_driver="gesdd"):
    """Singular value decomposition: ``(u, s, vh)``, or ``s`` with ``compute_uv=False``."""
    (a,) = _arrays("svd", a)
    return lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)


def det(a, overwrite_a=False, check_finite=True):
    """The determinant of the last two axes."""
    return jnp_linalg.det(a)


def inv(a, overwrite_a=False, check_finite=True):
    """The inverse of a square matrix."""
    return jnp_linalg.inv(a)


def eigh(a, b=None, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False,
         turbo=True, eigvals=None, type=1, check_finite=True):
    """Eigenvalues (ascending) and eigenvectors of a Hermitian ``a``, or of the generalized
    problem with a positive-definite ``b``: ``a v = w b v`` (``type=1``), ``a b v = w v`` (2)
    or ``b a v = w v`` (3). ``eigvals=(lo, hi)`` keeps eigenvalues ``lo..hi`` (inclusive)."""
    if type not in (1, 2, 3):
        raise ValueError(f"eigh: type must be 1, 2 or 3, got {type}")
    (a,) = _arrays("eigh", a)
    subset = None if eigvals is None else (int(eigvals[0]), int(eigvals[1]) + 1)
    if b is None:
        v, w = lax_linalg.eigh(a, lower=lower, subset_by_index=subset)
        return w if eigvals_only else (w, v)
    a, b = _promote_inexact(a, jnp.asarray(b))
    chol = cholesky(b, lower=True)  # b = L L^H
    tri = partial(lax_linalg.triangular_solve, chol, lower=True)
    if type == 1:  # L^-1 a L^-H y = w y, v = L^-H y
        c = tri(tri(a, left_side=True), left_side=False, transpose_a=True, conjugate_a=True)
    else:  # L^H a L y = w y
        c = jnp.matmul(jnp.matmul(_H(chol), a), chol)
    v, w = lax_linalg.eigh(c, lower=lower, subset_by_index=subset)
    if eigvals_only:
        return w
    if type == 3:
        return w, jnp.matmul(chol, v)
    return w, tri(v, left_side=True, transpose_a=True, conjugate_a=True)


def schur(a, output="real"):
    """Schur decomposition ``a = z t z^H``: ``(t, z)``, ``t`` quasi-triangular (real) or
    triangular (``output='complex'``)."""
    if output not in ("real", "complex"):
        raise ValueError(f"Expected 'output' to be either 'real' or 'complex', got "
                         f"{output=}.")
    (a,) = _arrays("schur", a)
    if output == "complex":
        a = a.astype(np.result_type(a.dtype, np.complex64))
    return lax_linalg.schur(a)


def hessenberg(a, *, calc_q=False, overwrite_a=False, check_finite=True):
    """The upper Hessenberg form ``h`` of ``a`` (and the unitary ``q`` with
    ``a = q h q^H``)."""
    (a,) = _arrays("hessenberg", a)
    n = a.shape[-1]
    if n == 0:
        return (jnp.zeros_like(a), jnp.zeros_like(a)) if calc_q else jnp.zeros_like(a)
    packed, taus = lax_linalg.hessenberg(a)
    h = jnp.triu(packed, -1)
    if not calc_q:
        return h
    q = lax_linalg.householder_product(packed[..., 1:, :-1], taus)
    batch = packed.shape[:-2]
    q = jnp.concatenate([
        jnp.concatenate([jnp.ones(batch + (1, 1), a.dtype), jnp.zeros(batch + (1, n - 1),
                                                                       a.dtype)], axis=-1),
        jnp.concatenate([jnp.zeros(batch + (n - 1, 1), a.dtype), q], axis=-1)], axis=-2)
    return h, q


def polar(a, side="right", *, method="qdwh", eps=None, max_iterations=None):
    """The polar decomposition ``a = u p`` (``side='right'``, ``p`` is ``[n, n]``) or
    ``a = p u`` ('left', ``[m, m]``): ``(u, p)``, ``u`` with orthonormal columns (rows) and
    ``p`` Hermitian positive semi-definite. Both methods compute it from the SVD."""
    (arr,) = _ensure_arraylike("polar", a)
    if arr.ndim < 2:
        raise ValueError("The input `a` must be at least a 2-D array.")
    if side not in ("right", "left"):
        raise ValueError("The argument `side` must be either 'right' or 'left'.")
    if method not in ("qdwh", "svd"):
        raise ValueError(f"Unknown polar decomposition method {method}.")
    (arr,) = _promote_inexact(arr)
    u_svd, s_svd, vh_svd = lax_linalg.svd(arr, full_matrices=False)
    s_svd = s_svd.astype(u_svd.dtype)
    unitary = jnp.matmul(u_svd, vh_svd)
    if side == "right":
        posdef = jnp.matmul(_H(vh_svd) * s_svd[..., None, :], vh_svd)
    else:
        posdef = jnp.matmul(u_svd * s_svd[..., None, :], _H(u_svd))
    return unitary, posdef


def eigh_tridiagonal(d, e, *, eigvals_only=False, select="a", select_range=None, tol=None,
                     key=None):
    """Eigenvalues (ascending), and eigenvectors, of the Hermitian tridiagonal matrix with
    diagonal ``d`` and subdiagonal ``e``; ``select='i'`` keeps the eigenvalues with indices
    ``select_range[0]..select_range[1]``."""
    alpha, beta = jnp.asarray(d), jnp.asarray(e)
    supported = (np.float32, np.float64, np.complex64, np.complex128)
    if alpha.dtype != beta.dtype:
        raise TypeError(f"diagonal and off-diagonal values must have same dtype, got "
                        f"{alpha.dtype} and {beta.dtype}")
    if alpha.dtype not in supported:
        raise TypeError(f"Only float32 and float64 inputs are supported as inputs to "
                        f"jax.scipy.linalg.eigh_tridiagonal, got {alpha.dtype} and "
                        f"{beta.dtype}")
    n = alpha.shape[0]
    if select == "a":
        subset = None
    elif select == "i":
        if select_range is None:
            raise ValueError("for select='i', select_range must be specified.")
        if select_range[0] > select_range[1]:
            raise ValueError("Got empty index range in select_range.")
        subset = (int(select_range[0]), int(select_range[1]) + 1)
    elif select == "v":
        raise NotImplementedError("eigh_tridiagonal(..., select='v') is not implemented: "
                                  "the number of eigenvalues in a range is not static")
    else:
        raise ValueError("'select must have a value in {'a', 'i', 'v'}.")
    if n <= 1:
        w = jnp.real(alpha)
        return w if eigvals_only else (w, jnp.eye(n, dtype=alpha.dtype))
    upper = jnp.conj(beta)
    matrix = (jnp.diag(alpha) + jnp.diag(beta, -1) + jnp.diag(upper, 1))
    v, w = lax_linalg.eigh(matrix, symmetrize_input=False, subset_by_index=subset)
    return w if eigvals_only else (w, v)


# --- matrix functions ------------------------------------------------------------------------


def _pade(a, coefficients):
    """The numerator and denominator of a Pade approximant of ``exp(a)``, as ``(U, V)`` with
    ``U`` the odd part and ``V`` the even part."""
    b = coefficients
    ident = jnp.eye(*a.shape, dtype=a.dtype)
    a2 = a @ a
    if len(b) == 14:  # degree 13: the powers beyond 6 are factored
        a4 = a2 @ a2
        a6 = a4 @ a2
        u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2
                 + b[1] * ident)
        v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 \
            + b[0] * ident
        return u, v
    powers = [ident, a2]  # then a^4, a^6, a^8 as the degree needs
    while len(powers) < len(b) // 2:
        powers.append(powers[-1] @ a2)
    u = a @ sum(b[2 * i + 1] * p for i, p in enumerate(powers))
    v = sum(b[2 * i] * p for i, p in enumerate(powers))
    return u, v


_PADE = {
    3: (120., 60., 12., 1.),
    5: (30240., 15120., 3360., 420., 30., 1.),
    7: (17297280., 8648640., 1995840., 277200., 25200., 1512., 56., 1.),
    9: (17643225600., 8821612800., 2075673600., 302702400., 30270240., 2162160., 110880.,
        3960., 90., 1.),
    13: (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800.,
         129060195264000., 10559470521600., 670442572800., 33522128640., 1323241920.,
         40840800., 960960., 16380., 182., 1.),
}


def _expm_2d(a, upper_triangular, max_squarings):
    """Higham's scaling and squaring with the Pade degree chosen by the 1-norm (JAX's)."""
    a_l1 = jnp_linalg.norm(a, 1)
    if a.dtype in (np.float64, np.complex128):
        maxnorm, degrees = 5.371920351148152, (3, 5, 7, 9, 13)
        conds = [1.495585217958292e-002, 2.539398330063230e-001, 9.504178996162932e-001,
                 2.097847961257068e+000]
    else:
        maxnorm, degrees = 3.925724783138660, (3, 5, 7)
        conds = [4.258730016922831e-001, 1.880152677804762e+000]
    n_squarings = jnp.maximum(0, jnp.floor(jnp.log2(a_l1 / maxnorm)))
    a = a / (2 ** n_squarings).astype(a.dtype)
    idx = jnp.digitize(a_l1, jnp.array(conds, dtype=a_l1.dtype))
    u, v = lax.switch(idx, [partial(_pade, coefficients=_PADE[d]) for d in degrees], a)
    p, q = u + v, -u + v
    r = solve_triangular(q, p) if upper_triangular else jnp_linalg.solve(q, p)

    def square(c, i):
        return lax.cond(i < n_squarings, lambda x: x @ x, lambda x: x, c), None

    r, _ = lax.scan(square, r, jnp.arange(max_squarings, dtype=n_squarings.dtype))
    return jnp.where(n_squarings > max_squarings, jnp.full_like(r, np.nan), r)


def expm(A, *, upper_triangular=False, max_squarings=16):
    """The matrix exponential (NaN when more than ``max_squarings`` squarings would be
    needed)."""
    (A,) = _arrays("expm", A)
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"Expected A to be a (batched) square matrix, got {A.shape=}.")
    if A.dtype not in (np.float32, np.float64, np.complex64, np.complex128):
        raise TypeError(f"A.dtype={A.dtype} is not supported.")
    fn = partial(_expm_2d, upper_triangular=upper_triangular, max_squarings=max_squarings)
    batch = A.shape[:-2]
    flat = A.reshape((-1,) + A.shape[-2:])
    out = api.vmap(fn)(flat) if batch else fn(A)
    return out.reshape(A.shape) if batch else out


def expm_frechet(A, E, *, method=None, compute_expm=True):
    """The Frechet derivative of ``expm`` at ``A`` in the direction ``E`` (a JVP), with
    ``expm(A)`` first unless ``compute_expm=False``."""
    A_arr, E_arr = jnp.asarray(A), jnp.asarray(E)
    if A_arr.ndim < 2 or A_arr.shape[-2] != A_arr.shape[-1]:
        raise ValueError(f"expected A to be a (batched) square matrix, got "
                         f"A.shape={A_arr.shape}")
    if E_arr.ndim < 2 or E_arr.shape[-2] != E_arr.shape[-1]:
        raise ValueError(f"expected E to be a (batched) square matrix, got "
                         f"E.shape={E_arr.shape}")
    if A_arr.shape != E_arr.shape:
        raise ValueError(f"expected A and E to be the same shape, got A.shape={A_arr.shape} "
                         f"E.shape={E_arr.shape}")
    A_arr, E_arr = _promote_inexact(A_arr, E_arr)
    expm_a, frechet = api.jvp(expm, (A_arr,), (E_arr,))
    return (expm_a, frechet) if compute_expm else frechet


def _sqrtm_triu(t):
    """The upper triangular square root of an upper triangular ``t``, column by column."""
    diag = jnp.sqrt(jnp.diagonal(t))
    n = diag.shape[0]
    u = jnp.diag(diag)
    rows = jnp.arange(n)
    for j in range(n):
        for i in range(j - 1, -1, -1):
            between = (rows > i) & (rows < j)
            s = jnp.sum(jnp.where(between, u[i, :] * u[:, j], 0))
            value = jnp.where(t[i, j] == s, 0, (t[i, j] - s) / (diag[i] + diag[j]))
            u = u.at[i, j].set(value)
    return u


def sqrtm(A, blocksize=1):
    """The principal square root of a square matrix, from its complex Schur form (complex,
    as JAX's)."""
    if blocksize > 1:
        raise NotImplementedError("Blocked version is not implemented yet.")
    (A,) = _arrays("sqrtm", A)
    t, z = schur(A, output="complex")
    return jnp.matmul(jnp.matmul(z, _sqrtm_triu(t)), _H(z))


def _rsf2csf_2d(t, z):
    dtype = np.result_type(t.dtype, z.dtype, np.complex64)
    t, z = t.astype(dtype), z.astype(dtype)
    eps = np.finfo(dtype).eps
    n = t.shape[0]
    for m in range(n - 1, 0, -1):
        sub = t[m, m - 1]
        needs = jnp.abs(sub) > eps * (jnp.abs(t[m - 1, m - 1]) + jnp.abs(t[m, m]))
        mu = jnp_linalg.eigvals(t[m - 1:m + 1, m - 1:m + 1]) - t[m, m]
        r = jnp.sqrt(jnp.abs(mu[0]) ** 2 + jnp.abs(sub) ** 2).astype(dtype)
        safe_r = jnp.where(r == 0, 1, r)
        c, s = mu[0] / safe_r, sub / safe_r
        g = jnp.stack([jnp.stack([jnp.conj(c), s]), jnp.stack([-s, c])])
        g = jnp.where(needs, g, jnp.eye(2, dtype=dtype))
        t = t.at[m - 1:m + 1, m - 1:].set(g @ t[m - 1:m + 1, m - 1:])
        t = t.at[:m + 1, m - 1:m + 1].set(t[:m + 1, m - 1:m + 1] @ _H(g))
        z = z.at[:, m - 1:m + 1].set(z[:, m - 1:m + 1] @ _H(g))
        t = t.at[m, m - 1].set(0)
    return t, z


def rsf2csf(T, Z, check_finite=True):
    """Convert a real Schur form ``(T, Z)`` to the complex one (triangular ``T``)."""
    T_arr, Z_arr = jnp.asarray(T), jnp.asarray(Z)
    if T_arr.ndim < 2 or T_arr.shape[-1] != T_arr.shape[-2]:
        raise ValueError("Input 'T' must be square.")
    if Z_arr.ndim < 2 or Z_arr.shape[-1] != Z_arr.shape[-2]:
        raise ValueError("Input 'Z' must be square.")
    if T_arr.shape[-1] != Z_arr.shape[-1]:
        raise ValueError(f"Input array shapes must match: Z: {Z_arr.shape} vs. T: "
                         f"{T_arr.shape}")
    if T_arr.ndim == 2:
        return _rsf2csf_2d(T_arr, Z_arr)
    return api.vmap(rsf2csf)(T_arr, Z_arr)


def funm(A, func, disp=True):
    """``func`` of a square matrix (applied to its eigenvalues), by the Schur-Parlett
    recurrence (Golub and Van Loan, Algorithm 11.1.1); complex, as JAX's. With
    ``disp=False``, also an estimate of the error."""
    (A,) = _arrays("funm", A)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError("expected square array_like input")
    t, z = rsf2csf(*schur(A))
    n = t.shape[0]
    f = jnp.diag(func(jnp.diagonal(t))).astype(t.dtype)
    minden = jnp.abs(t[0, 0])
    rows = jnp.arange(n)
    for p in range(1, n):
        for i in range(1, n - p + 1):
            j = i + p
            s = t[i - 1, j - 1] * (f[j - 1, j - 1] - f[i - 1, i - 1])
            between = (rows >= i) & (rows < j - 1)
            s = s + (jnp.sum(jnp.where(between, t[i - 1] * f[:, j - 1], 0))
                     - jnp.sum(jnp.where(between, f[i - 1] * t[:, j - 1], 0)))
            den = t[j - 1, j - 1] - t[i - 1, i - 1]
            s = jnp.where(den != 0, s / jnp.where(den != 0, den, 1), s)
            f = f.at[i - 1, j - 1].set(s)
            minden = jnp.minimum(minden, jnp.abs(den))
    f = jnp.matmul(jnp.matmul(z, f), _H(z))
    if disp:
        return f
    tol = np.finfo(np.result_type(f.dtype, np.float32)).eps
    minden = jnp.where(minden == 0.0, tol, minden)
    err = jnp.where(jnp.any(jnp.isinf(jnp.abs(f))), np.inf,
                    jnp.minimum(1, jnp.maximum(tol, (tol / minden)
                                               * jnp_linalg.norm(jnp.triu(t, 1), 1))))
    return f, err


def solve_sylvester(A, B, C, *, method="schur", tol=1e-8):
    """The ``X`` with ``A X + X B = C``, by the Bartels-Stewart algorithm on complex Schur
    forms (``method='schur'``) or by eigendecompositions ('eigen'); NaNs when ``A`` and
    ``-B`` share an eigenvalue (to ``tol``)."""
    A, B, C = _arrays("solve_sylvester", A, B, C)
    m, n = C.shape[-2:]
    if A.shape[-2:] != (m, m) or B.shape[-2:] != (n, n):
        raise ValueError(f"Incompatible shapes for Sylvester equation:\nA: {A.shape}\nB: "
                         f"{B.shape}\nC: {C.shape}")
    if method not in ("schur", "eigen"):
        raise ValueError(f'Unrecognized method {method}. The two valid methods are either '
                         f'"schur" or "eigen".')
    if A.ndim > 2:
        return api.vmap(partial(solve_sylvester, method=method, tol=tol))(A, B, C)
    if method == "schur":
        r, u = schur(A, output="complex")
        s, v = schur(_H(B), output="complex")
        f = jnp.matmul(jnp.matmul(_H(u), C.astype(r.dtype)), v)
        s = _H(s)  # upper triangular: solve r y + y s = f from the bottom-right corner
        y = jnp.zeros((m, n), r.dtype)
        for i in range(m - 1, -1, -1):
            for j in range(n - 1, -1, -1):
                rhs = f[i, j] - jnp.sum(r[i, i + 1:] * y[i + 1:, j]) \
                    - jnp.sum(y[i, j + 1:] * s[j + 1:, j])
                y = y.at[i, j].set(rhs / (r[i, i] + s[j, j]))
        x = jnp.matmul(jnp.matmul(u, y), _H(v))
    else:
        ra, ua = jnp_linalg.eig(A)
        rb, ub = jnp_linalg.eig(B)
        f = jnp_linalg.solve(ua, jnp.matmul(C.astype(ra.dtype), ub))
        y = f / (ra[:, None] + rb[None, :])
        x = jnp.matmul(jnp.matmul(ua, y), jnp_linalg.inv(ub))
    if not jnp.issubdtype(C.dtype, jnp.complexfloating):
        x = jnp.real(x)
    gaps = jnp.abs(jnp_linalg.eigvals(A)[:, None] + jnp_linalg.eigvals(B)[None, :])
    return jnp.where(jnp.any(gaps < tol), jnp.full_like(x, np.nan), x)


# --- special matrices ------------------------------------------------------------------------


def block_diag(*arrs):
    """The block-diagonal matrix of the (at most 2-D) arguments."""
    if len(arrs) == 0:
        arrs = (jnp.zeros((1, 0)),)
    arrs = _ensure_arraylike("block_diag", *arrs)
    dtype = jnp.result_type(*arrs)
    bad = [i for i, a in enumerate(arrs) if a.ndim > 2]
    if bad:
        raise ValueError(f"Arguments to jax.scipy.linalg.block_diag must have at most 2 "
                         f"dimensions, got {arrs[bad[0]]} at argument {bad[0]}.")
    blocks = [jnp.atleast_2d(a).astype(dtype) for a in arrs]
    total = sum(b.shape[1] for b in blocks)
    rows, col = [], 0
    for b in blocks:
        rows.append(jnp.pad(b, ((0, 0), (col, total - col - b.shape[1]))))
        col += b.shape[1]
    return jnp.concatenate(rows, axis=0)


def _index_matrix(v, idx):
    """``v[..., idx]`` for a static integer matrix ``idx``."""
    return jnp.take(v, jnp.asarray(idx), axis=-1)


def toeplitz(c, r=None):
    """The Toeplitz matrix with first column ``c`` and first row ``r`` (default
    ``conj(c)``); batched over leading dims."""
    if r is None:
        (c,) = _ensure_arraylike("toeplitz", c)
        r = jnp.conj(c)
    else:
        c, r = _ensure_arraylike("toeplitz", c, r)
    c, r = jnp.atleast_1d(c), jnp.atleast_1d(r)
    nc, nr = c.shape[-1], r.shape[-1]
    dtype = jnp.promote_types(c.dtype, r.dtype)
    if nc == 0 or nr == 0:
        batch = jnp.broadcast_shapes(c.shape[:-1], r.shape[:-1])
        return jnp.zeros(batch + (nc, nr), dtype)
    batch = jnp.broadcast_shapes(c.shape[:-1], r.shape[:-1])
    elems = jnp.concatenate([jnp.broadcast_to(jnp.flip(c, -1), batch + (nc,)).astype(dtype),
                             jnp.broadcast_to(r[..., 1:], batch + (nr - 1,)).astype(dtype)],
                            axis=-1)
    return _index_matrix(elems, (nc - 1) - np.arange(nc)[:, None] + np.arange(nr)[None, :])


def hankel(c, r=None):
    """The Hankel matrix with first column ``c`` and last row ``r`` (default zeros)."""
    if r is None:
        (c,) = _ensure_arraylike("hankel", c)
        r = jnp.zeros_like(c)
    else:
        c, r = _ensure_arraylike("hankel", c, r)
    if c.ndim == 0:
        raise ValueError("hankel: c must be at least 1-dimensional, got a scalar.")
    if r.ndim == 0:
        raise ValueError("hankel: r must be at least 1-dimensional, got a scalar.")
    nc, nr = c.shape[-1], r.shape[-1]
    dtype = jnp.result_type(c, r)
    batch = jnp.broadcast_shapes(c.shape[:-1], r.shape[:-1])
    if nc == 0 or nr == 0:
        return jnp.zeros(batch + (nc, nr), dtype)
    v = jnp.concatenate([jnp.broadcast_to(c, batch + (nc,)).astype(dtype),
                         jnp.broadcast_to(r[..., 1:], batch + (nr - 1,)).astype(dtype)],
                        axis=-1)
    return _index_matrix(v, np.arange(nc)[:, None] + np.arange(nr)[None, :])


def circulant(c):
    """The circulant matrix with first column ``c``."""
    (c,) = _ensure_arraylike("circulant", c)
    c = jnp.atleast_1d(c)
    n = c.shape[-1]
    return _index_matrix(c, (np.arange(n)[:, None] - np.arange(n)[None, :]) % n)


def leslie(f, s):
    """The Leslie matrix: fecundities ``f`` in the first row, survival rates ``s`` on the
    subdiagonal."""
    f, s = _ensure_arraylike("leslie", f, s)
    f, s = jnp.atleast_1d(f), jnp.atleast_1d(s)
    if f.shape[-1] < 2:
        raise ValueError(f"The length of f along the last axis must be at least 2; got shape "
                         f"{f.shape}.")
    if s.shape[-1] != f.shape[-1] - 1:
        raise ValueError(f"Incorrect lengths for f and s. The length of s along the last axis "
                         f"must be one less than the length of f; got f shape {f.shape} and "
                         f"s shape {s.shape}.")
    n = f.shape[-1]
    dtype = jnp.result_type(f, s)
    batch = jnp.broadcast_shapes(f.shape[:-1], s.shape[:-1])
    sub = s.astype(dtype)[..., :, None] * jnp.eye(n - 1, n, dtype=dtype)
    return jnp.concatenate([jnp.broadcast_to(f.astype(dtype), batch + (n,))[..., None, :],
                            jnp.broadcast_to(sub, batch + (n - 1, n))], axis=-2)


def companion(a):
    """The companion matrix of the polynomial with coefficients ``a``."""
    (a,) = _arrays("companion", a)
    a = jnp.atleast_1d(a)
    if a.shape[-1] < 2:
        raise ValueError(f"The length of `a` along the last axis must be at least 2; got "
                         f"shape {a.shape}.")
    first_row = -a[..., 1:] / a[..., :1]
    m = a.shape[-1] - 1
    below = jnp.broadcast_to(jnp.eye(m - 1, m, dtype=a.dtype), a.shape[:-1] + (m - 1, m))
    return jnp.concatenate([first_row[..., None, :], below], axis=-2)


def fiedler(a):
    """The symmetric Fiedler matrix ``|a[i] - a[j]|``."""
    (a,) = _ensure_arraylike("fiedler", a)
    a = jnp.atleast_1d(a)
    return jnp.abs(a[..., :, None] - a[..., None, :])


def fiedler_companion(a):
    """The pentadiagonal Fiedler companion matrix of the polynomial with coefficients
    ``a``."""
    (a,) = _arrays("fiedler_companion", a)
    a = jnp.atleast_1d(a)
    if a.shape[-1] == 0:
        raise ValueError(f"fiedler_companion requires the last axis of 'a' to have nonzero "
                         f"length, but got an array of shape {a.shape}.")
    n = a.shape[-1] - 1
    if n == 0:
        return jnp.zeros(a.shape[:-1] + (0, 0), a.dtype)
    a = a / a[..., :1]
    if n == 1:
        return -a[..., 1:, None]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    even, odd = i % 2 == 0, i % 2 == 1
    # (mask, index into -a or None for a one) per pentadiagonal band
    bands = [((i == 0) & (j == 0), np.ones_like(i)), ((i == 1) & (j == 0), None),
             ((j == i + 1) & even, np.minimum(i + 2, n) + 0 * j), ((j == i + 2) & even, None),
             ((j == i - 1) & even & (i >= 2), np.minimum(i + 1, n) + 0 * j),
             ((j == i - 2) & odd & (i >= 3), None)]
    out = jnp.zeros(a.shape[:-1] + (n, n), a.dtype)
    for mask, index in bands:
        value = jnp.ones((), a.dtype) if index is None else -_index_matrix(a, index)
        out = jnp.where(mask, value, out)
    return out


def convolution_matrix(a, n, mode="full"):
    """The Toeplitz matrix of the convolution with ``a`` (``mode`` 'full', 'valid' or
    'same')."""
    n = operator.index(n)
    if n <= 0:
        raise ValueError(f"n must be a positive integer; got {n}.")
    (a,) = _ensure_arraylike("convolution_matrix", a)
    if a.ndim == 0:
        raise ValueError("convolution_matrix: a must be at least 1-dimensional, got a scalar.")
    m = a.shape[-1]
    if m < 1:
        raise ValueError(f"len(a) must be at least 1; got shape {a.shape}.")
    if mode not in ("full", "valid", "same"):
        raise ValueError(f"mode must be one of 'full', 'valid', 'same'; got {mode!r}.")
    pad = [(0, 0)] * (a.ndim - 1) + [(0, n - 1)]
    az, raz = jnp.pad(a, pad), jnp.pad(jnp.flip(a, axis=-1), pad)
    length = m + n - 1
    if mode == "same":
        trim = min(n, m) - 1
        tb, te = trim // 2, trim - trim // 2
    elif mode == "valid":
        tb = te = min(n, m) - 1
    else:
        tb = te = 0
    return toeplitz(az[..., tb:length - te], raz[..., length - n - tb:length - tb])


def _float_arange(n, dtype=None):
    return jnp.arange(n, dtype=dtypes.canonicalize_dtype(dtype or dtypes.default_float_dtype()))


def hilbert(n):
    """The Hilbert matrix ``1 / (i + j + 1)``."""
    a = _float_arange(n)[:, None]
    return 1 / (a + a.T + 1)


def invhilbert(n):
    """The inverse of the Hilbert matrix (its closed form in binomial coefficients)."""
    a = _float_arange(n)
    i, j = a[:, None], a[None, :]
    s = i + j
    return ((-1.0) ** s * (s + 1.0) * special.comb(n + i, n - j - 1)
            * special.comb(n + j, n - i - 1) * special.comb(s, i) ** 2)


def _check_kind(kind):
    kind = "symmetric" if kind is None else kind
    if kind not in ("symmetric", "lower", "upper"):
        raise ValueError(f"Expected kind to be one of: ['symmetric', 'lower', 'upper']; got "
                         f"{kind}")
    return kind


def _binom(n, k):
    """``n choose k`` for float arrays, 0 where ``k > n`` (through ``lgamma``)."""
    return jnp.exp(lax.lgamma(n + 1.0) - lax.lgamma(n - k + 1.0) - lax.lgamma(k + 1.0))


def pascal(n, kind=None):
    """The Pascal matrix of binomial coefficients (float32, as JAX's)."""
    kind = _check_kind(kind)
    a = jnp.arange(n, dtype=np.float32)
    lower = _binom(a[:, None], a[None, :])
    if kind == "lower":
        return lower
    return lower.T if kind == "upper" else jnp.dot(lower, lower.T)


def invpascal(n, kind=None):
    """The inverse of the Pascal matrix: ``(-1)^(i-j) binom(i, j)`` for the lower one."""
    kind = _check_kind(kind)
    a = _float_arange(n)
    i, j = a[:, None], a[None, :]
    lower = (-1.0) ** (i - j) * _binom(i, j)
    if kind == "lower":
        return lower
    return lower.T if kind == "upper" else jnp.dot(lower.T, lower)


def helmert(n, full=False):
    """The Helmert matrix: ``n - 1`` orthonormal rows orthogonal to the ones vector (with
    ``full``, that vector normalized first)."""
    if n < 1:
        raise ValueError(f"n must be a positive integer; got {n}.")
    i, j = jnp.arange(n - 1)[:, None], jnp.arange(n)[None, :]
    k = (i + 1).astype(dtypes.default_float_dtype())
    denom = jnp.sqrt(k * (k + 1))
    h = jnp.where(j <= i, 1.0 / denom, jnp.where(j == i + 1, -k / denom, jnp.zeros_like(denom)))
    if full:
        h = jnp.concatenate([jnp.full((1, n), 1.0 / math.sqrt(n), dtype=h.dtype), h], axis=0)
    return h


def hadamard(n, dtype=int):
    """The Hadamard matrix of order ``n`` (a power of 2), by Sylvester's construction."""
    if n < 1 or not math.log2(n).is_integer():
        raise ValueError(f"n must be a positive power of 2; got {n}.")
    h = jnp.ones((1, 1), dtype=dtype)
    for _ in range(int(math.log2(n))):
        h = jnp.concatenate([jnp.concatenate([h, h], axis=1), jnp.concatenate([h, -h], axis=1)],
                            axis=0)
    return h


def dft(n, scale=None, *, dtype=None):
    """The discrete Fourier transform matrix ``exp(-2 pi i j k / n)`` (scaled by
    ``1/sqrt(n)`` for 'sqrtn', ``1/n`` for 'n')."""
    if scale is not None and scale not in ("sqrtn", "n"):
        raise ValueError(f"scale must be None, 'sqrtn', or 'n'; got {scale!r}.")
    dtype = dtypes.canonicalize_dtype(dtype or dtypes.default_complex_dtype())
    if dtypes.kind(dtype) != "c":
        raise ValueError(f"dtype must be a complex floating-point type; got {dtype}.")
    a = jnp.arange(n).astype(dtype)
    omegas = jnp.exp(-2j * np.pi * a[:, None] * a[None, :] / n)
    if scale == "sqrtn":
        return omegas / math.sqrt(n)
    return omegas / n if scale == "n" else omegas
