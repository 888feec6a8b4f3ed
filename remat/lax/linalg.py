"""Matrix decompositions and solves, reached as ``remat.lax.linalg.<name>`` (JAX's
``jax.lax.linalg``): ``cholesky eig eigh lu lu_pivots_to_permutation qr svd triangular_solve``
here, and ``schur hessenberg householder_product tridiagonal tridiagonal_solve`` (with
``geqrf``) from ``remat.lax.linalg_forms``. Each is a primitive with its impl (NumPy's and
SciPy's LAPACK), abstract eval, JVP (JAX's formulas), transpose where it is linear
(``triangular_solve`` and ``tridiagonal_solve``, in the right-hand side) and batching rule.

Every primitive takes any number of leading batch dims (NumPy batches them, or the impl loops
over them), so a vmapped dim just moves to the front. As with JAX on CPU, a factorization that
fails (a matrix that is not positive definite, an iteration that does not converge) gives NaNs
rather than an exception. ``lu_solve`` solves with an LU factorization; it is what
``remat.numpy.linalg.solve`` and ``remat.scipy.linalg.lu_solve`` are written on.
"""

import enum

import numpy as np

from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax import complex_parts, elementwise
from remat.lax.complex_parts import imag
from remat.lax.elementwise import add, div, eq, integer_pow, mul, neg, sub
from remat.lax.linalg_common import (
    as_cols,
    as_rows,
    batch_leading,
    check_rank,
    check_square,
    complex_dtype,
    conj,
    convert,
    diagonal,
    dtype_of,
    eye_like,
    inverse_permutation,
    is_complex,
    lapack,
    lapack_input,
    matmul,
    matrix_const,
    mH,
    mT,
    ndim_of,
    per_matrix,
    permute_rows,
    real,
    real_dtype,
    scalar_like,
    scipy_linalg,
    shape_of,
    symmetrize,
    tril,
    triu,
)
from remat.lax.linalg_forms import (  # noqa: F401 - remat.lax.linalg.<name>, as JAX
    geqrf,
    geqrf_p,
    hessenberg,
    hessenberg_p,
    householder_product,
    householder_product_p,
    schur,
    schur_p,
    tridiagonal,
    tridiagonal_p,
    tridiagonal_solve,
    tridiagonal_solve_p,
)
from remat.lax.reductions import argmax, reduce_sum
from remat.lax.shape import (
    broadcasted_iota,
    concatenate,
    expand_dims,
    full,
    full_like,
    pad,
    reshape,
    squeeze,
)
from remat.lax.slicing import slice_in_dim
from remat.lax.standard import INEXACT, check_dtype, standard_primitive
from remat.runtime import parallel
from remat.runtime.lazy_imports import LazyModule

blas = LazyModule("scipy.linalg.blas")

# JAX's ``jax.lax`` namespace has none of these names: they are ``remat.lax.linalg.<name>``.
__all__ = []


class EigImplementation(enum.Enum):
    """Which eigensolver ``eig`` uses (remat always uses LAPACK's ``geev``)."""

    LAPACK = "lapack"
    MAGMA = "magma"
    CUSOLVER = "cusolver"


class EighImplementation(enum.Enum):
    """Which eigensolver ``eigh`` uses (remat always uses LAPACK's ``syevd``/``heevd``)."""

    QR = "qr"
    JACOBI = "jacobi"
    QDWH = "qdwh"


class SvdAlgorithm(enum.Enum):
    """Which SVD algorithm ``svd`` uses (remat always uses LAPACK's ``gesdd``)."""

    DEFAULT = "default"
    QR = "QR"
    JACOBI = "Jacobi"
    POLAR = "polar"
    DIVIDE_AND_CONQUER = "divide_and_conquer"


# --- cholesky --------------------------------------------------------------------------------


def _cholesky_abstract_eval(x):
    check_square("cholesky", x)
    return ShapedArray(x.shape, x.dtype)


def _cholesky_impl(x):
    with parallel.blas_threads():  # LAPACK is not split by the executor: let it thread
        # Reads the lower triangle; a failed factorization is NaN below the diagonal, as JAX's.
        return np.tril(per_matrix(np.linalg.cholesky, lapack_input(x)))


cholesky_p = standard_primitive("cholesky", _cholesky_impl, _cholesky_abstract_eval)


def _cholesky_jvp(primals, tangents):
    """Murray's forward rule (arXiv:1602.07527): ``dL = L Phi(L^-1 dA L^-H)``, where ``Phi``
    takes the lower triangle with the diagonal halved."""
    (x,), (sigma_dot,) = primals, tangents
    chol = cholesky_p.bind(x)
    sigma_dot = ad.instantiate_zeros(sigma_dot)
    tmp = triangular_solve(chol, sigma_dot, left_side=False, transpose_a=True, conjugate_a=True,
                           lower=True)
    inner = triangular_solve(chol, tmp, left_side=True, transpose_a=False, lower=True)
    n = shape_of(x)[-1]
    phi = mul(inner, matrix_const(inner, np.tri(n) - 0.5 * np.eye(n)))
    return chol, matmul(chol, phi)


ad.primitive_jvps[cholesky_p] = _cholesky_jvp
batch_leading(cholesky_p)


def cholesky(x, *, symmetrize_input=True):
    """The lower Cholesky factor ``L`` of ``x = L L^H`` (NaNs where ``x`` is not positive
    definite); with ``symmetrize_input=False`` only the lower triangle of ``x`` is read."""
    if symmetrize_input:
        x = symmetrize(x)
    return cholesky_p.bind(x)


# --- eigh ------------------------------------------------------------------------------------


def _check_subset(name, n, subset_by_index):
    if subset_by_index is None:
        return n
    lo, hi = subset_by_index
    if not 0 <= lo <= hi <= n:
        raise ValueError(f"{name}: subset_by_index must satisfy 0 <= start <= end <= {n}, "
                         f"got {subset_by_index}")
    return hi - lo


def _eigh_abstract_eval(x, *, lower, sort_eigenvalues, subset_by_index, algorithm):
    check_square("eigh", x, "symmetric eigendecomposition")
    n = x.shape[-1]
    d = _check_subset("eigh", n, subset_by_index)
    batch = x.shape[:-2]
    return [ShapedArray((*batch, n, d), x.dtype), ShapedArray((*batch, d), real_dtype(x.dtype))]


def _eigh_impl(x, *, lower, sort_eigenvalues, subset_by_index, algorithm):
    with parallel.blas_threads():
        w, v = per_matrix(lambda a: np.linalg.eigh(a, UPLO="L" if lower else "U"),
                           lapack_input(x))
    if subset_by_index is not None:  # LAPACK's eigenvalues are ascending
        lo, hi = subset_by_index
        w, v = w[..., lo:hi], v[..., lo:hi]
    return [v, w]


eigh_p = standard_primitive("eigh", _eigh_impl, _eigh_abstract_eval, multiple_results=True)


def _eigh_jvp(primals, tangents, *, lower, sort_eigenvalues, subset_by_index, algorithm):
    """Nondegenerate perturbation theory: ``dw = diag(V^H dA V)``,
    ``dV = V (F o V^H dA V)`` with ``F[i, j] = 1 / (w[j] - w[i])`` off the diagonal."""
    (a,), (a_dot,) = primals, tangents
    n = shape_of(a)[-1]
    if subset_by_index is not None and tuple(subset_by_index) != (0, n):
        raise NotImplementedError("Derivatives not defined for partial eigen decomposition.")
    v, w_real = eigh_p.bind(symmetrize(a), lower=lower, sort_eigenvalues=sort_eigenvalues,
                            subset_by_index=subset_by_index, algorithm=algorithm)
    a_dot = ad.instantiate_zeros(a_dot)
    w = convert(w_real, dtype_of(a))
    eye = eye_like(v)
    diffs = add(eye, sub(as_rows(w, shape_of(v)), as_cols(w, shape_of(v))))
    fmat = sub(div(full_like(diffs, 1), diffs), eye)
    vdag_adot_v = matmul(matmul(mH(v), a_dot), v)
    dv = matmul(v, mul(fmat, vdag_adot_v))
    dw = diagonal(real(vdag_adot_v))
    return [v, w_real], [dv, dw]


ad.primitive_jvps[eigh_p] = _eigh_jvp
batch_leading(eigh_p)


def eigh(x, *, lower=True, symmetrize_input=True, sort_eigenvalues=True, subset_by_index=None,
         implementation=None):
    """Eigendecomposition of a Hermitian matrix: ``(v, w)``, eigenvectors as the columns of
    ``v`` and eigenvalues ``w`` in ascending order."""
    if symmetrize_input:
        x = symmetrize(x)
    subset = None if subset_by_index is None else tuple(int(i) for i in subset_by_index)
    v, w = eigh_p.bind(x, lower=bool(lower), sort_eigenvalues=bool(sort_eigenvalues),
                       subset_by_index=subset, algorithm=implementation)
    return v, w


# --- eig -------------------------------------------------------------------------------------


def _eig_abstract_eval(x, *, compute_left_eigenvectors, compute_right_eigenvectors,
                       enable_eigvec_derivs, implementation):
    check_square("eig", x)
    dtype = complex_dtype(x.dtype)
    outs = [ShapedArray(x.shape[:-1], dtype)]
    outs += [ShapedArray(x.shape, dtype)] * (compute_left_eigenvectors
                                             + compute_right_eigenvectors)
    return outs


def _eig_one(a, left, right):
    """geev on one matrix or a batch: ``(w, vl?, vr?)``, complex."""
    dtype = complex_dtype(a.dtype)
    if left:  # SciPy's geev gives left eigenvectors one matrix at a time
        w, vl, vr = scipy_linalg.eig(a, left=True, right=True, check_finite=False)
        outs = (w, vl, vr) if right else (w, vl)
    elif right:
        outs = tuple(np.linalg.eig(a))
    else:
        outs = (np.linalg.eigvals(a),)
    return tuple(o.astype(dtype) for o in outs)


def _eig_impl(x, *, compute_left_eigenvectors, compute_right_eigenvectors, enable_eigvec_derivs,
              implementation):
    x = lapack_input(x)
    left, right = compute_left_eigenvectors, compute_right_eigenvectors
    with parallel.blas_threads():
        if not left:
            return list(per_matrix(lambda a: _eig_one(a, False, right), x))
        dtype = complex_dtype(x.dtype)
        outs = [np.empty(x.shape[:-1] if i == 0 else x.shape, dtype)
                for i in range(1 + left + right)]
        for idx in np.ndindex(x.shape[:-2]):
            for out, part in zip(outs, per_matrix(lambda a: _eig_one(a, True, right), x[idx])):
                out[idx] = part
        return outs


eig_p = standard_primitive("eig", _eig_impl, _eig_abstract_eval, multiple_results=True)


def _eig_vec_jvp(w, v, da):
    """Nondegenerate perturbation theory (Giles, sec. 3.1), as JAX: ``P = V^-1 dA V``,
    ``dw = diag(P)``, ``U = V (F o P)`` with ``F[i, j] = 1 / (w[j] - w[i])`` off the diagonal.
    ``dv_j = u_j + c_j v_j`` where LAPACK's normalisation (unit 2-norm, the largest-magnitude
    component real) fixes ``c_j = -Re(v_j^H u_j) - i Im(u_kj) / v_kj``, ``k`` the row of the
    largest ``|v_ij|``."""
    shape, nd = shape_of(v), ndim_of(v)
    eye = eye_like(v)
    fmat = sub(integer_pow(add(eye, sub(as_rows(w, shape), as_cols(w, shape))),
                                   -1), eye)
    lu_, _, perm = lu(v)
    p = matmul(lu_solve(lu_, perm, da), v)
    u = matmul(v, mul(fmat, p))
    k = argmax(elementwise.abs(v), nd - 2, np.int32)
    rows = broadcasted_iota(np.int32, shape, nd - 2)
    mask = convert(eq(rows, as_rows(k, shape)), dtype_of(v))
    v_dot_u = reduce_sum(mul(conj(v), u), (nd - 2,))
    u_k = reduce_sum(mul(mask, u), (nd - 2,))
    v_k = reduce_sum(mul(mask, v), (nd - 2,))
    c = complex_parts.complex(neg(real(v_dot_u)), neg(div(imag(u_k), real(v_k))))
    return diagonal(p), add(u, mul(v, as_rows(c, shape)))


def _eig_jvp(primals, tangents, *, compute_left_eigenvectors, compute_right_eigenvectors,
             enable_eigvec_derivs, implementation):
    """Eigenvalues: ``dw = diag(V^-1 dA V)``; eigenvectors (opted in with
    ``enable_eigvec_derivs``) by ``_eig_vec_jvp``, the left ones as the right eigenvectors of
    ``A^H`` (eigenvalues ``conj(w)``)."""
    (a,), (da,) = primals, tangents
    left, right = compute_left_eigenvectors, compute_right_eigenvectors
    if (left or right) and not enable_eigvec_derivs:
        raise NotImplementedError(
            "Derivatives of non-symmetric eigenvectors are only valid under assumptions on "
            "the input that remat cannot check (see the enable_eigvec_derivs argument to "
            "remat.lax.linalg.eig). Pass enable_eigvec_derivs=True to opt in.")
    outs = eig_p.bind(a, compute_left_eigenvectors=left, compute_right_eigenvectors=True,
                      enable_eigvec_derivs=enable_eigvec_derivs, implementation=implementation)
    w, vr = outs[0], outs[-1]
    da = convert(ad.instantiate_zeros(da), dtype_of(vr))
    if not (left or right):
        lu_, _, perm = lu(vr)
        vinv_da = lu_solve(lu_, perm, da)
        dw = reduce_sum(mul(vinv_da, mT(vr)), (ndim_of(vr) - 1,))
        return [w], [dw]
    dw, dvr = _eig_vec_jvp(w, vr, da)
    primal_out, tangent_out = [w], [dw]
    if left:
        _, dvl = _eig_vec_jvp(conj(w), outs[1], mH(da))
        primal_out.append(outs[1])
        tangent_out.append(dvl)
    if right:
        primal_out.append(vr)
        tangent_out.append(dvr)
    return primal_out, tangent_out


ad.primitive_jvps[eig_p] = _eig_jvp
batch_leading(eig_p)


def eig(x, *, compute_left_eigenvectors=True, compute_right_eigenvectors=True,
        enable_eigvec_derivs=False, implementation=None, use_magma=None):
    """Eigendecomposition of a general square matrix: ``[w, vl, vr]`` (left and right
    eigenvectors as requested), complex, with LAPACK's normalization (unit 2-norm, the
    largest component real)."""
    return eig_p.bind(x, compute_left_eigenvectors=bool(compute_left_eigenvectors),
                      compute_right_eigenvectors=bool(compute_right_eigenvectors),
                      enable_eigvec_derivs=bool(enable_eigvec_derivs),
                      implementation=implementation)


# --- lu --------------------------------------------------------------------------------------


def _pivots_to_permutation(pivots, size):
    """Apply LAPACK's row swaps ``i <-> pivots[..., i]`` to ``arange(size)``."""
    batch = pivots.shape[:-1]
    perm = np.broadcast_to(np.arange(size, dtype=np.int32), (*batch, size)).copy()
    if perm.size == 0 or pivots.shape[-1] == 0:
        return perm
    rows = np.arange(perm[..., 0].size)
    flat = perm.reshape(-1, size)
    piv = pivots.reshape(-1, pivots.shape[-1])
    for i in range(piv.shape[-1]):
        j = piv[:, i]
        tmp = flat[:, i].copy()
        flat[:, i] = flat[rows, j]
        flat[rows, j] = tmp
    return flat.reshape(perm.shape)


def _lu_abstract_eval(x):
    check_dtype("lu", x, INEXACT)
    check_rank("lu", x, 2)
    *batch, m, n = x.shape
    return [ShapedArray(x.shape, x.dtype), ShapedArray((*batch, min(m, n)), np.dtype(np.int32)),
            ShapedArray((*batch, m), np.dtype(np.int32))]


def _lu_impl(x):
    x = lapack_input(x)
    *batch, m, n = x.shape
    lu_out = np.array(x, order="C")
    pivots = np.zeros((*batch, min(m, n)), np.int32)
    if m and n:
        getrf = lapack.get_lapack_funcs("getrf", dtype=x.dtype)
        with parallel.blas_threads():
            for idx in np.ndindex(*batch):
                lu_out[idx], pivots[idx], _ = getrf(x[idx])  # singular: U has a zero pivot
    return [lu_out, pivots, _pivots_to_permutation(pivots, m)]


lu_p = standard_primitive("lu", _lu_impl, _lu_abstract_eval, multiple_results=True)


def _lu_jvp(primals, tangents):
    """De Hoog, Anderssen and Lukas: with ``F = L^-1 P dA U^-1``,
    ``dL = L tril(F, -1)`` and ``dU = triu(F) U``, stored together as ``dLU = dL + dU``."""
    (a,), (a_dot,) = primals, tangents
    lu_, pivots, permutation = lu_p.bind(a)
    a_dot = ad.instantiate_zeros(a_dot)
    *batch, m, n = shape_of(a)
    k = min(m, n)
    nd = len(batch) + 2
    zero = scalar_like(a, 0)
    no_pad = [(0, 0, 0)] * len(batch)
    l_part = slice_in_dim(lu_, 0, k, axis=nd - 1)
    l_mat = pad(tril(l_part, -1), zero, no_pad + [(0, 0, 0), (0, m - k, 0)])
    l_mat = add(l_mat, matrix_const(l_mat, np.eye(m)))
    u_part = slice_in_dim(lu_, 0, k, axis=nd - 2)
    u_mat = pad(triu(u_part), zero, no_pad + [(0, n - k, 0), (0, 0, 0)])
    u_mat = add(u_mat, matrix_const(u_mat, np.diag((np.arange(n) >= k).astype(float))))
    la = triangular_solve(l_mat, permute_rows(a_dot, permutation), left_side=True, lower=True,
                          unit_diagonal=True)
    lau = triangular_solve(u_mat, la, left_side=False, lower=False)
    lu_dot = add(matmul(l_mat, tril(lau, -1)), matmul(triu(lau), u_mat))
    return ([lu_, pivots, permutation],
            [lu_dot, ad.Zero.from_primal_value(pivots), ad.Zero.from_primal_value(permutation)])


ad.primitive_jvps[lu_p] = _lu_jvp
batch_leading(lu_p)


def lu(x):
    """LU decomposition with partial pivoting, ``P A = L U``: ``(lu, pivots, permutation)``,
    ``L`` (unit diagonal, not stored) and ``U`` packed in ``lu``, the row swaps as LAPACK's
    ``pivots`` and as the ``permutation`` of the rows, both int32."""
    return lu_p.bind(x)


def _lu_pivots_to_permutation_abstract_eval(pivots, *, permutation_size):
    if pivots.dtype != np.int32:
        raise TypeError(f"lu_pivots_to_permutation does not accept dtype {pivots.dtype.name}. "
                        f"Accepted dtypes are int32.")
    check_rank("lu_pivots_to_permutation", pivots, 1)
    if permutation_size < pivots.shape[-1]:
        raise ValueError(f"Output permutation size {permutation_size} has to exceed the "
                         f"trailing dimension of the pivots. Got pivots size "
                         f"{pivots.shape[-1]}")
    return ShapedArray((*pivots.shape[:-1], permutation_size), pivots.dtype)


lu_pivots_to_permutation_p = standard_primitive(
    "lu_pivots_to_permutation",
    lambda pivots, *, permutation_size: _pivots_to_permutation(pivots, permutation_size),
    _lu_pivots_to_permutation_abstract_eval)
ad.defjvp_zero(lu_pivots_to_permutation_p)
batch_leading(lu_pivots_to_permutation_p)


def lu_pivots_to_permutation(pivots, permutation_size):
    """The permutation of ``arange(permutation_size)`` made by LU's row swaps ``pivots``."""
    return lu_pivots_to_permutation_p.bind(pivots, permutation_size=int(permutation_size))


def lu_solve(lu, permutation, b, trans=0):
    """Solve ``A x = b`` (``trans=0``), ``A^T x = b`` (1) or ``A^H x = b`` (2) given
    ``lu, _, permutation = lu(A)``; ``b`` is ``[..., m, k]`` with ``lu``'s batch dims. Linear
    in ``b`` (triangular solves and a row gather), so it transposes."""
    if trans == 0:
        x = permute_rows(b, permutation)
        x = triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True)
        return triangular_solve(lu, x, left_side=True, lower=False)
    if trans in (1, 2):
        conj = trans == 2
        x = triangular_solve(lu, b, left_side=True, lower=False, transpose_a=True,
                             conjugate_a=conj)
        x = triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True,
                             transpose_a=True, conjugate_a=conj)
        return permute_rows(x, inverse_permutation(permutation))
    raise ValueError(f"'trans' value must be 0, 1, or 2, got {trans}")


# --- qr --------------------------------------------------------------------------------------


def _qr_abstract_eval(x, *, pivoting, full_matrices, use_magma):
    check_dtype("qr", x, INEXACT)
    check_rank("qr", x, 2)
    *batch, m, n = x.shape
    k = m if full_matrices else min(m, n)
    outs = [ShapedArray((*batch, m, k), x.dtype), ShapedArray((*batch, k, n), x.dtype)]
    if pivoting:
        outs.append(ShapedArray((*batch, n), np.dtype(np.int32)))
    return outs


def _qr_impl(x, *, pivoting, full_matrices, use_magma):
    x = lapack_input(x)
    with parallel.blas_threads():
        if not pivoting:
            return list(np.linalg.qr(x, mode="complete" if full_matrices else "reduced"))
        *batch, m, n = x.shape
        k = m if full_matrices else min(m, n)
        q = np.empty((*batch, m, k), x.dtype)
        r = np.empty((*batch, k, n), x.dtype)
        p = np.empty((*batch, n), np.int32)
        for idx in np.ndindex(*batch):
            q[idx], r[idx], p[idx] = scipy_linalg.qr(
                x[idx], mode="full" if full_matrices else "economic", pivoting=True,
                check_finite=False)
        return [q, r, p]


qr_p = standard_primitive("qr", _qr_impl, _qr_abstract_eval, multiple_results=True)


def _thin_qr_jvp(q, r, dx):
    """The JVP of ``x = q r`` for ``[..., m, n]`` with ``m >= n`` (thin factors)."""
    dx_rinv = triangular_solve(r, dx)  # right side: dx r^-1
    qt_dx_rinv = matmul(mH(q), dx_rinv)
    lower = tril(qt_dx_rinv, -1)
    do = sub(lower, mH(lower))  # skew-symmetric
    if is_complex(q):  # the imaginary part of the diagonal
        imag_diag = sub(qt_dx_rinv, convert(real(qt_dx_rinv), dtype_of(q)))
        do = add(do, mul(eye_like(do), imag_diag))
    dq = add(matmul(q, sub(do, qt_dx_rinv)), dx_rinv)
    dr = matmul(sub(qt_dx_rinv, do), r)
    return dq, dr


def _qr_jvp(primals, tangents, *, pivoting, full_matrices, use_magma):
    (x,), (dx,) = primals, tangents
    q, r, *p = qr_p.bind(x, pivoting=pivoting, full_matrices=full_matrices, use_magma=use_magma)
    dx = ad.instantiate_zeros(dx)
    *batch, m, n = shape_of(x)
    nd = len(batch) + 2
    if pivoting:  # x[..., p] = q r: the columns in the pivoted order
        x, dx = mT(permute_rows(mT(x), p[0])), mT(permute_rows(mT(dx), p[0]))
    extra = [ad.Zero.from_primal_value(p[0])] if pivoting else []
    if m < n:  # x = [x1 x2], r = [r1 r2]: x1 = q r1 is square, r2 = q^H x2
        x2 = slice_in_dim(x, m, n, axis=nd - 1)
        dx1 = slice_in_dim(dx, 0, m, axis=nd - 1)
        dx2 = slice_in_dim(dx, m, n, axis=nd - 1)
        r1 = slice_in_dim(r, 0, m, axis=nd - 1)
        dq, dr1 = _thin_qr_jvp(q, r1, dx1)
        dr2 = add(matmul(mH(dq), x2), matmul(mH(q), dx2))
        return [q, r, *p], [dq, concatenate([dr1, dr2], nd - 1), *extra]
    q_mn = slice_in_dim(q, 0, n, axis=nd - 1) if full_matrices else q
    r_nn = slice_in_dim(r, 0, n, axis=nd - 2) if full_matrices else r
    dq_mn, dr_nn = _thin_qr_jvp(q_mn, r_nn, dx)
    if not full_matrices or m == n:
        return [q, r, *p], [dq_mn, dr_nn, *extra]
    # The trailing m - n columns of a full q (arXiv:2409.13374, eqs. 32-33).
    q_nn = slice_in_dim(q_mn, 0, n, axis=nd - 2)
    q_pn = slice_in_dim(q_mn, n, m, axis=nd - 2)
    q_mp = slice_in_dim(q, n, m, axis=nd - 1)
    dq_nn = slice_in_dim(dq_mn, 0, n, axis=nd - 2)
    dq_pn = slice_in_dim(dq_mn, n, m, axis=nd - 2)
    lu_, _, perm = lu(sub(q_nn, eye_like(q_nn)))
    z_pn_h = lu_solve(lu_, perm, mH(q_pn), trans=2)
    z_pn = mH(z_pn_h)
    dq_mp = sub(matmul(dq_mn, z_pn_h),
                    matmul(add(q_mn, matmul(q_mp, z_pn)),
                            mH(sub(dq_pn, matmul(z_pn, dq_nn)))))
    dq = concatenate([dq_mn, dq_mp], nd - 1)
    dr = concatenate([dr_nn, full((*batch, m - n, n), 0, dtype_of(dr_nn))], nd - 2)
    return [q, r, *p], [dq, dr, *extra]


ad.primitive_jvps[qr_p] = _qr_jvp
batch_leading(qr_p)


def qr(x, *, pivoting=False, full_matrices=True, use_magma=None):
    """QR decomposition ``x = q r`` (``x[:, p] = q r`` with ``pivoting``): ``(q, r)`` or
    ``(q, r, p)``; ``q`` is ``[..., m, m]`` with ``full_matrices``, else
    ``[..., m, min(m, n)]``."""
    q, r, *p = qr_p.bind(x, pivoting=bool(pivoting), full_matrices=bool(full_matrices),
                         use_magma=use_magma)
    return (q, r, p[0]) if pivoting else (q, r)


# --- svd -------------------------------------------------------------------------------------


def _svd_abstract_eval(x, *, full_matrices, compute_uv, subset_by_index, algorithm):
    check_dtype("svd", x, INEXACT)
    check_rank("svd", x, 2)
    *batch, m, n = x.shape
    k = min(m, n)
    if subset_by_index is not None:
        if full_matrices and tuple(subset_by_index) != (0, k):
            raise ValueError("full_matrices and subset_by_index cannot both be set")
        k = min(k, _check_subset("svd", k, subset_by_index))
    s = ShapedArray((*batch, k), real_dtype(x.dtype))
    if not compute_uv:
        return [s]
    um, vn = (m, n) if full_matrices else (k, k)
    return [s, ShapedArray((*batch, m, um), x.dtype), ShapedArray((*batch, vn, n), x.dtype)]


def _svd_impl(x, *, full_matrices, compute_uv, subset_by_index, algorithm):
    x = lapack_input(x)
    with parallel.blas_threads():
        if not compute_uv:
            s = per_matrix(lambda a: np.linalg.svd(a, compute_uv=False), x)
            outs = [s]
        else:
            u, s, vt = per_matrix(lambda a: tuple(np.linalg.svd(a, full_matrices=full_matrices)),
                                   x)
            outs = [s, u, vt]
    if subset_by_index is not None:  # singular values are descending
        lo, hi = subset_by_index
        outs[0] = outs[0][..., lo:hi]
        if compute_uv:
            outs[1], outs[2] = outs[1][..., :, lo:hi], outs[2][..., lo:hi, :]
    return outs


svd_p = standard_primitive("svd", _svd_impl, _svd_abstract_eval, multiple_results=True)


def _svd_jvp(primals, tangents, *, full_matrices, compute_uv, subset_by_index, algorithm):
    """``ds = diag(Re(U^H dA V))``; ``dU``, ``dV`` by the standard formulas for distinct
    singular values, plus the parts of ``dA V`` and ``dA^H U`` outside the factors' spans."""
    (a,), (da,) = primals, tangents
    s, u, vt = svd_p.bind(a, full_matrices=False, compute_uv=True,
                          subset_by_index=subset_by_index, algorithm=algorithm)
    da = ad.instantiate_zeros(da)
    *_, m, n = shape_of(a)
    if compute_uv and full_matrices and m != n:
        raise NotImplementedError(
            "Singular value decomposition JVP not implemented for full matrices")
    ut, v = mH(u), mH(vt)
    ds_mat = matmul(matmul(ut, da), v)
    ds = diagonal(real(ds_mat))
    if not compute_uv:
        return [s], [ds]
    k = shape_of(s)[-1]
    square = (*shape_of(s)[:-1], k, k)
    s_row, s_col = as_rows(s, square), as_cols(s, square)
    eye = eye_like(s_row)
    s_diffs = mul(add(s_row, s_col), sub(s_row, s_col))
    f = sub(div(full_like(eye, 1), add(s_diffs, eye)), eye)
    f = convert(f, dtype_of(a))
    s_row_a, s_col_a = convert(s_row, dtype_of(a)), convert(s_col, dtype_of(a))
    dss = mul(s_row_a, ds_mat)
    sds = mul(s_col_a, ds_mat)
    du_inner = mul(f, add(dss, mH(dss)))
    if is_complex(a):  # the imaginary part of the diagonal, for complex inputs
        s_zeros = convert(eq(s, scalar_like(s, 0)), dtype_of(s))
        s_inv = sub(div(full_like(s, 1), add(s, s_zeros)), s_zeros)
        s_inv_mat = convert(mul(eye, as_rows(s_inv, square)), dtype_of(a))
        half = scalar_like(ds_mat, 0.5)
        du_inner = add(du_inner, mul(mul(half, sub(ds_mat, mH(ds_mat))),
                                             s_inv_mat))
    du = matmul(u, du_inner)
    dv = matmul(v, mul(f, add(sds, mH(sds))))
    if m > n:
        dav = matmul(da, v)
        proj = sub(dav, matmul(u, matmul(ut, dav)))
        du = add(du, div(proj, as_rows(convert(s, dtype_of(a)), shape_of(proj))))
    if n > m:
        dahu = matmul(mH(da), u)
        proj = sub(dahu, matmul(v, matmul(vt, dahu)))
        dv = add(dv, div(proj, as_rows(convert(s, dtype_of(a)), shape_of(proj))))
    return [s, u, vt], [ds, du, mH(dv)]


ad.primitive_jvps[svd_p] = _svd_jvp
batch_leading(svd_p)


def svd(x, *, full_matrices=True, compute_uv=True, subset_by_index=None, algorithm=None):
    """Singular value decomposition: ``(u, s, vh)`` or just ``s`` (descending)."""
    subset = None if subset_by_index is None else tuple(int(i) for i in subset_by_index)
    outs = svd_p.bind(x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv),
                      subset_by_index=subset, algorithm=algorithm)
    if compute_uv:
        s, u, vt = outs
        return u, s, vt
    return outs[0]


# --- triangular_solve ------------------------------------------------------------------------


def _triangular_solve_abstract_eval(a, b, *, left_side, lower, transpose_a, conjugate_a,
                                    unit_diagonal):
    for i, x in enumerate((a, b)):
        check_dtype("triangular_solve", x, INEXACT)
        check_rank("triangular_solve", x, 2, i)
    if a.dtype != b.dtype:
        raise TypeError(f"triangular_solve requires arguments to have the same dtypes, got "
                        f"{a.dtype.name}, {b.dtype.name}.")
    if a.shape[-1] != a.shape[-2]:
        raise ValueError(f"The first input to triangular_solve must be a square matrix. Got "
                         f"shape {a.shape[-2:]}.")
    common = -2 if left_side else -1
    if a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[common]:
        raise ValueError(f"Incompatible shapes for arguments to triangular_solve: {a.shape} "
                         f"and {b.shape}.")
    return ShapedArray(b.shape, b.dtype)


def _triangular_solve_impl(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    a, b = lapack_input(a), lapack_input(b)
    out = np.zeros(b.shape, b.dtype)
    if b.size == 0:
        return out
    if conjugate_a and not transpose_a:  # BLAS conjugates only with the transpose
        a, trans = np.conj(a), 0
    else:
        trans = 2 if conjugate_a else int(transpose_a)
    trsm = blas.get_blas_funcs("trsm", dtype=b.dtype)
    with parallel.blas_threads():
        for idx in np.ndindex(b.shape[:-2]):  # BLAS trsm: no singularity check, as XLA's
            out[idx] = trsm(1.0, a[idx], b[idx], side=int(not left_side), lower=int(lower),
                            trans_a=trans, diag=int(unit_diagonal))
    return out


triangular_solve_p = standard_primitive("triangular_solve", _triangular_solve_impl,
                                        _triangular_solve_abstract_eval)


def _triangular_solve_jvp_a(g_a, ans, a, b, *, left_side, lower, transpose_a, conjugate_a,
                            unit_diagonal):
    """``d(A^-1 B) = -A^-1 dA A^-1 B`` (on the used triangle), in the cheaper order."""
    m, n = shape_of(b)[-2:]
    k = 1 if unit_diagonal else 0
    g_a = neg(tril(g_a, -k) if lower else triu(g_a, k))
    g_a = mT(g_a) if transpose_a else g_a
    g_a = conj(g_a) if conjugate_a else g_a
    params = dict(left_side=left_side, lower=lower, transpose_a=transpose_a,
                  conjugate_a=conjugate_a, unit_diagonal=unit_diagonal)

    def a_inverse(rhs):
        return triangular_solve_p.bind(a, rhs, **params)

    if left_side:
        return a_inverse(matmul(g_a, ans)) if m > n else matmul(a_inverse(g_a), ans)
    return a_inverse(matmul(ans, g_a)) if m < n else matmul(ans, a_inverse(g_a))


def _triangular_solve_jvp_b(g_b, ans, a, b, **params):
    return triangular_solve_p.bind(a, g_b, **params)


def _triangular_solve_transpose(ct, a, b, *, left_side, lower, transpose_a, conjugate_a,
                                unit_diagonal):
    if ad.is_undefined_primal(a):
        raise ValueError("triangular_solve is linear only in its right-hand side b")
    ct_b = triangular_solve_p.bind(a, ct, left_side=left_side, lower=lower,
                                   transpose_a=not transpose_a, conjugate_a=conjugate_a,
                                   unit_diagonal=unit_diagonal)
    return [None, ct_b]


def _triangular_solve_batch(vals, dims, **params):
    (a, b), (bd_a, bd_b) = vals, dims
    if bd_a is batching.not_mapped:  # fold the vmapped dim into b's free dim
        b_shape = shape_of(b)
        nd = len(b_shape)
        if params["left_side"]:
            b = batching.moveaxis(b, bd_b, nd - 1)  # [..., m, n, B]
            flat = reshape(b, (*shape_of(b)[:-2], shape_of(b)[-2] * shape_of(b)[-1]))
            out = triangular_solve_p.bind(a, flat, **params)
            return reshape(out, shape_of(b)), nd - 1
        b = batching.moveaxis(b, bd_b, nd - 2)  # [..., n, B, m]
        s = shape_of(b)
        flat = reshape(b, (*s[:-3], s[-3] * s[-2], s[-1]))
        out = triangular_solve_p.bind(a, flat, **params)
        return reshape(out, s), nd - 2
    size = batching.axis_size_of(vals, dims)
    a = batching.bdim_at_front(a, bd_a, size)
    b = batching.bdim_at_front(b, bd_b, size)
    return triangular_solve_p.bind(a, b, **params), 0


ad.defjvp2(triangular_solve_p, _triangular_solve_jvp_a, _triangular_solve_jvp_b)
ad.primitive_transposes[triangular_solve_p] = _triangular_solve_transpose
batching.primitive_batchers[triangular_solve_p] = _triangular_solve_batch


def triangular_solve(a, b, *, left_side=False, lower=False, transpose_a=False,
                     conjugate_a=False, unit_diagonal=False):
    """Solve ``op(a) x = b`` (``left_side``) or ``x op(a) = b`` for triangular ``a``, where
    ``op`` transposes and/or conjugates as asked; a ``b`` of one rank less than ``a`` is a
    (batch of) vector(s)."""
    conjugate_a = bool(conjugate_a) and is_complex(a)
    singleton = ndim_of(b) == ndim_of(a) - 1
    if singleton:
        b = expand_dims(b, (ndim_of(b) if left_side else ndim_of(b) - 1,))
    out = triangular_solve_p.bind(a, b, left_side=bool(left_side), lower=bool(lower),
                                  transpose_a=bool(transpose_a), conjugate_a=conjugate_a,
                                  unit_diagonal=bool(unit_diagonal))
    if singleton:
        out = squeeze(out, (ndim_of(out) - 1 if left_side else ndim_of(out) - 2,))
    return out


