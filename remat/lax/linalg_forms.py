"""The condensed forms and structured solves of ``remat.lax.linalg``: ``schur``,
``hessenberg``, ``tridiagonal``, ``geqrf`` with ``householder_product`` (LAPACK's packed
Householder form), which have no derivative rules (as in JAX), and ``tridiagonal_solve``, with
its JVP, transpose (it is linear in the right-hand side) and batching rules.
"""

import numpy as np

from remat import dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.elementwise import add, mul, neg
from remat.lax.linalg_common import (
    as_cols,
    batch_leading,
    check_rank,
    check_square,
    dtype_of,
    lapack,
    lapack_input,
    lapack_loop,
    ndim_of,
    real_dtype,
    scipy_linalg,
    shape_of,
)
from remat.lax.shape import concatenate, full, reshape
from remat.lax.slicing import slice_in_dim
from remat.lax.standard import INEXACT, check_dtype, standard_primitive
from remat.runtime import parallel

# --- tridiagonal_solve -----------------------------------------------------------------------


def _tridiagonal_solve_abstract_eval(dl, d, du, b, *, perturb_singular):
    for i, x in enumerate((dl, d, du, b)):
        check_dtype("tridiagonal_solve", x, INEXACT)
        check_rank("tridiagonal_solve", x, 2 if i == 3 else 1, i)
    if len({x.dtype for x in (dl, d, du, b)}) > 1:
        raise TypeError("tridiagonal_solve requires arguments to have the same dtypes, got "
                        + ", ".join(x.dtype.name for x in (dl, d, du, b)) + ".")
    if dl.shape != d.shape or dl.shape != du.shape:
        raise TypeError("tridiagonal_solve requires that all diagonal arguments have the same "
                        "shape.")
    if dl.shape != b.shape[:-1]:
        raise TypeError("tridiagonal_solve requires that the leading ndim-1 dimensions of b "
                        "equal the dimensions of the diagonal arguments.")
    return ShapedArray(b.shape, b.dtype)


def _gtsv_perturbed(dl, d, du, b):
    """LAPACK's ``gttrf`` elimination with partial pivoting, then back substitution in which
    pivots smaller than ``eps * max|U|`` are perturbed to that size (``dlagts``' idea), so a
    singular system gives a finite solution, as inverse iteration needs."""
    m = d.shape[0]
    sub, diag, sup = dl[1:].copy(), d.copy(), du[:-1].copy()
    sup2 = np.zeros(max(m - 2, 0), d.dtype)
    x = b.copy()
    for i in range(m - 1):
        if abs(diag[i]) >= abs(sub[i]):  # no row interchange
            if diag[i] != 0:
                fact = sub[i] / diag[i]
                diag[i + 1] -= fact * sup[i]
                x[i + 1] -= fact * x[i]
        else:  # interchange rows i and i + 1
            fact = diag[i] / sub[i]
            diag[i], sup[i], diag[i + 1] = sub[i], diag[i + 1], sup[i] - fact * diag[i + 1]
            if i < m - 2:
                sup2[i], sup[i + 1] = sup[i + 1], -fact * sup[i + 1]
            x[[i, i + 1]] = x[[i + 1, i]]
            x[i + 1] -= fact * x[i]
    real = real_dtype(d.dtype)
    scale = max(np.abs(diag).max(initial=0), np.abs(sup).max(initial=0),
                np.abs(sup2).max(initial=0))
    tol = max(np.finfo(real).eps * scale, np.finfo(real).tiny)
    magnitude = np.abs(diag)
    phase = np.where(magnitude == 0, 1, diag / np.where(magnitude == 0, 1, magnitude))
    diag = np.where(magnitude < tol, phase * tol, diag)
    for i in range(m - 1, -1, -1):
        acc = x[i].copy()
        if i + 1 < m:
            acc -= sup[i] * x[i + 1]
        if i + 2 < m:
            acc -= sup2[i] * x[i + 2]
        x[i] = acc / diag[i]
    return x


def _tridiagonal_solve_impl(dl, d, du, b, *, perturb_singular):
    dl, d, du, b = (lapack_input(x) for x in (dl, d, du, b))
    out = np.empty(b.shape, b.dtype)
    m = d.shape[-1]
    gtsv = lapack.get_lapack_funcs("gtsv", dtype=b.dtype)
    for idx in np.ndindex(d.shape[:-1]):
        if m == 0 or b.shape[-1] == 0:
            out[idx] = 0
        elif perturb_singular:
            out[idx] = _gtsv_perturbed(dl[idx], d[idx], du[idx], b[idx])
        else:
            *_, x, info = gtsv(dl[idx][1:], d[idx], du[idx][:-1], b[idx])
            out[idx] = np.nan if info > 0 else x  # a singular system: NaNs, as JAX
    return out


tridiagonal_solve_p = standard_primitive("tridiagonal_solve", _tridiagonal_solve_impl,
                                         _tridiagonal_solve_abstract_eval)


def _tridiagonal_product(dl, d, du, b):
    """``T b`` for the tridiagonal ``T`` with diagonals ``dl, d, du``."""
    nd = ndim_of(b)
    m = shape_of(b)[-2]
    y = mul(as_cols(d, shape_of(b)), b)
    zero_row = full((*shape_of(b)[:-2], 1, shape_of(b)[-1]), 0, dtype_of(b))
    below = concatenate([zero_row, slice_in_dim(b, 0, m - 1, axis=nd - 2)], nd - 2)
    above = concatenate([slice_in_dim(b, 1, m, axis=nd - 2), zero_row], nd - 2)
    y = add(y, mul(as_cols(dl, shape_of(b)), below))
    return add(y, mul(as_cols(du, shape_of(b)), above))


def _tridiagonal_solve_jvp(primals, tangents, *, perturb_singular):
    *diags, _ = primals
    *diags_dot, b_dot = tangents
    ans = tridiagonal_solve_p.bind(*primals, perturb_singular=perturb_singular)
    if all(type(t) is ad.Zero for t in diags_dot):
        rhs = b_dot
    else:
        matvec_dot = _tridiagonal_product(*map(ad.instantiate_zeros, diags_dot), ans)
        rhs = ad.add_tangents(b_dot, neg(matvec_dot))
    return ans, tridiagonal_solve_p.bind(*diags, ad.instantiate_zeros(rhs),
                                         perturb_singular=perturb_singular)


def _tridiagonal_solve_transpose(ct, dl, d, du, b, *, perturb_singular):
    if any(ad.is_undefined_primal(x) for x in (dl, d, du)):
        raise ValueError("tridiagonal_solve is linear only in its right-hand side b")
    nd = ndim_of(du)
    m = shape_of(du)[-1]
    zero = full((*shape_of(du)[:-1], 1), 0, dtype_of(du))
    dl_t = concatenate([zero, slice_in_dim(du, 0, m - 1, axis=nd - 1)], nd - 1)
    du_t = concatenate([slice_in_dim(dl, 1, m, axis=nd - 1), zero], nd - 1)
    return [None, None, None,
            tridiagonal_solve_p.bind(dl_t, d, du_t, ct, perturb_singular=perturb_singular)]


def _tridiagonal_solve_batch(vals, dims, *, perturb_singular):
    (dl, d, du, b), (bdl, bd, bdu, bb) = vals, dims
    if bdl is bd is bdu is batching.not_mapped:  # fold the vmapped dim into b's columns
        b = batching.moveaxis(b, bb, ndim_of(b) - 1)
        s = shape_of(b)
        out = tridiagonal_solve_p.bind(dl, d, du, reshape(b, (*s[:-2], s[-2] * s[-1])),
                                       perturb_singular=perturb_singular)
        return reshape(out, s), len(s) - 1
    size = batching.axis_size_of(vals, dims)
    vals = [batching.bdim_at_front(x, dim, size) for x, dim in zip(vals, dims)]
    return tridiagonal_solve_p.bind(*vals, perturb_singular=perturb_singular), 0


ad.primitive_jvps[tridiagonal_solve_p] = _tridiagonal_solve_jvp
ad.primitive_transposes[tridiagonal_solve_p] = _tridiagonal_solve_transpose
batching.primitive_batchers[tridiagonal_solve_p] = _tridiagonal_solve_batch


def tridiagonal_solve(dl, d, du, b, *, perturb_singular=False):
    """Solve ``T x = b`` for the tridiagonal ``T`` with ``T[i, i-1] = dl[i]`` (``dl[0]`` is
    ignored), ``T[i, i] = d[i]``, ``T[i, i+1] = du[i]`` (``du[-1]`` ignored); ``b`` is
    ``[..., m, k]``. ``perturb_singular`` perturbs tiny pivots so singular systems give finite
    solutions."""
    return tridiagonal_solve_p.bind(dl, d, du, b, perturb_singular=bool(perturb_singular))


# --- schur, hessenberg, householder_product, tridiagonal, geqrf ------------------------------


def _schur_abstract_eval(x, *, compute_schur_vectors, sort_eig_vals, select_callable):
    check_square("schur", x)
    return [ShapedArray(x.shape, x.dtype)] * (2 if compute_schur_vectors else 1)


def _schur_impl(x, *, compute_schur_vectors, sort_eig_vals, select_callable):
    x = lapack_input(x)
    t, z = np.empty_like(x), np.empty_like(x)
    output = "complex" if dtypes.kind(x.dtype) == "c" else "real"
    sort = select_callable if sort_eig_vals else None
    with parallel.blas_threads():
        for idx in np.ndindex(x.shape[:-2]):
            res = scipy_linalg.schur(x[idx], output=output, sort=sort, check_finite=False)
            t[idx], z[idx] = res[0], res[1]
    return [t, z] if compute_schur_vectors else [t]


schur_p = standard_primitive("schur", _schur_impl, _schur_abstract_eval, multiple_results=True)
batch_leading(schur_p)


def schur(x, *, compute_schur_vectors=True, sort_eig_vals=False, select_callable=None):
    """Schur decomposition ``x = Q T Q^H``: ``(T, Q)`` (real Schur form for real ``x``); with
    ``sort_eig_vals``, the eigenvalues for which ``select_callable`` is true come first."""
    if sort_eig_vals and select_callable is None:
        raise ValueError("schur: sort_eig_vals=True needs a select_callable")
    return tuple(schur_p.bind(x, compute_schur_vectors=bool(compute_schur_vectors),
                              sort_eig_vals=bool(sort_eig_vals),
                              select_callable=select_callable))


def _hessenberg_abstract_eval(a):
    check_square("hessenberg", a, "Hessenberg reduction")
    return [ShapedArray(a.shape, a.dtype),
            ShapedArray((*a.shape[:-2], max(a.shape[-1] - 1, 0)), a.dtype)]


def _hessenberg_impl(a):
    a = lapack_input(a)
    n = a.shape[-1]
    if n == 0:
        return [a, np.zeros((*a.shape[:-2], 0), a.dtype)]
    def gehrd(routine, matrix):
        packed, taus, _ = routine(matrix)
        return packed, taus[:n - 1]

    return lapack_loop("gehrd", a, gehrd, [((n, n), a.dtype), ((n - 1,), a.dtype)])


hessenberg_p = standard_primitive("hessenberg", _hessenberg_impl, _hessenberg_abstract_eval,
                                  multiple_results=True)
batch_leading(hessenberg_p)


def hessenberg(a):
    """Reduction to upper Hessenberg form, LAPACK's packed ``(a, taus)``: the Hessenberg
    matrix in the upper triangle and first subdiagonal, the Householder reflectors below."""
    return tuple(hessenberg_p.bind(a))


def _householder_product_abstract_eval(a, taus):
    for i, x in enumerate((a, taus)):
        check_dtype("householder_product", x, INEXACT)
        check_rank("householder_product", x, 2 - i, i)
    m, n = a.shape[-2:]
    if m < n:
        raise ValueError(f"The first argument to householder_product must have at least as "
                         f"many rows as columns, got shape {a.shape[-2:]}")
    if taus.shape[-1] > n or a.shape[:-2] != taus.shape[:-1] or a.dtype != taus.dtype:
        raise ValueError(f"Incompatible arguments to householder_product: a {a.shape} "
                         f"{a.dtype.name}, taus {taus.shape} {taus.dtype.name}")
    return ShapedArray(a.shape, a.dtype)


def _householder_product_impl(a, taus):
    a, taus = lapack_input(a), lapack_input(taus)
    name = "ungqr" if dtypes.kind(a.dtype) == "c" else "orgqr"
    routine = lapack.get_lapack_funcs(name, dtype=a.dtype)
    out = np.zeros(a.shape, a.dtype)
    if a.size == 0:
        return out
    k = taus.shape[-1]
    for idx in np.ndindex(a.shape[:-2]):
        tau = np.zeros(a.shape[-1], a.dtype)
        tau[:k] = taus[idx]
        out[idx] = routine(a[idx], tau)[0]
    return out


householder_product_p = standard_primitive("householder_product", _householder_product_impl,
                                           _householder_product_abstract_eval)
batch_leading(householder_product_p)


def householder_product(a, taus):
    """The unitary matrix (``a``'s shape) made by the Householder reflectors stored below the
    diagonal of ``a`` with scale factors ``taus`` (LAPACK's ``orgqr``)."""
    return householder_product_p.bind(a, taus)


def _tridiagonal_abstract_eval(a, *, lower):
    check_square("tridiagonal", a)
    *batch, n, _ = a.shape
    real = real_dtype(a.dtype)
    m = max(n - 1, 0)
    return [ShapedArray(a.shape, a.dtype), ShapedArray((*batch, n), real),
            ShapedArray((*batch, m), real), ShapedArray((*batch, m), a.dtype)]


def _tridiagonal_impl(a, *, lower):
    a = lapack_input(a)
    n = a.shape[-1]
    real = real_dtype(a.dtype)
    m = max(n - 1, 0)
    name = "hetrd" if dtypes.kind(a.dtype) == "c" else "sytrd"
    if n == 0:
        return [a, np.zeros(a.shape[:-1], real), np.zeros((*a.shape[:-2], 0), real),
                np.zeros((*a.shape[:-2], 0), a.dtype)]
    return lapack_loop(name, a, lambda f, x: f(x, lower=int(lower))[:4],
                        [((n, n), a.dtype), ((n,), real), ((m,), real), ((m,), a.dtype)])


tridiagonal_p = standard_primitive("tridiagonal", _tridiagonal_impl, _tridiagonal_abstract_eval,
                                   multiple_results=True)
batch_leading(tridiagonal_p)


def tridiagonal(a, *, lower=True):
    """Reduction of a Hermitian matrix to tridiagonal form, LAPACK's ``(a, d, e, taus)``:
    diagonal ``d``, off-diagonal ``e``, the reflectors packed in ``a``."""
    return tuple(tridiagonal_p.bind(a, lower=bool(lower)))


def _geqrf_abstract_eval(a):
    check_dtype("geqrf", a, INEXACT)
    check_rank("geqrf", a, 2)
    *batch, m, n = a.shape
    return [ShapedArray(a.shape, a.dtype), ShapedArray((*batch, min(m, n)), a.dtype)]


def _geqrf_impl(a):
    a = lapack_input(a)
    *_, m, n = a.shape
    if m == 0 or n == 0:
        return [a, np.zeros((*a.shape[:-2], 0), a.dtype)]

    def geqrf_one(routine, matrix):
        packed, taus, *_ = routine(matrix)
        return packed, taus

    return lapack_loop("geqrf", a, geqrf_one, [((m, n), a.dtype), ((min(m, n),), a.dtype)])


geqrf_p = standard_primitive("geqrf", _geqrf_impl, _geqrf_abstract_eval, multiple_results=True)
batch_leading(geqrf_p)


def geqrf(a):
    """LAPACK's Householder QR, ``(a, taus)``: ``r`` in the upper triangle, the reflectors
    below it (``jnp.linalg.qr(mode='raw')``; ``householder_product`` forms ``q``)."""
    return tuple(geqrf_p.bind(a))
