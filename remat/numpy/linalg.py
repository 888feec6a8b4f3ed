"""``remat.numpy.linalg``: vector and matrix norms (and the singular values they need).

The singular values come from the ``svd`` primitive defined here (NumPy's LAPACK SVD as its
impl) with its JVP and batching rules, so matrix 2-norms and nuclear norms are
differentiable and batchable like everything else.
"""

import numpy as np

from remat import core, dtypes, lax
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.standard import FLOAT, check_dtype, standard_primitive
from remat.numpy import reductions
from remat.numpy.lax_numpy import (
    _arr,
    _canonicalize_axis,
    _check_arraylike,
    _convert,
    _dtype,
    _promote_dtypes_inexact,
    _shape,
)

__all__ = ["matrix_norm", "norm", "svd", "svd_p", "svdvals", "vector_norm"]

# --- the svd primitive -----------------------------------------------------------------------


def _svd_abstract_eval(x, *, full_matrices, compute_uv):
    check_dtype("svd", x, FLOAT)
    if x.ndim < 2:
        raise ValueError(f"svd requires an operand of at least two dimensions, got shape "
                         f"{x.shape}")
    *batch, m, n = x.shape
    k = min(m, n)
    s = ShapedArray((*batch, k), x.dtype)
    if not compute_uv:
        return [s]
    um, vn = (m, n) if full_matrices else (k, k)
    return [s, ShapedArray((*batch, m, um), x.dtype), ShapedArray((*batch, vn, n), x.dtype)]


def _svd_impl(x, *, full_matrices, compute_uv):
    if not compute_uv:
        return [np.linalg.svd(x, compute_uv=False)]
    u, s, vt = np.linalg.svd(x, full_matrices=full_matrices)
    return [s, u, vt]


svd_p = standard_primitive("svd", _svd_impl, _svd_abstract_eval, multiple_results=True)


def _svd_jvp(primals, tangents, *, full_matrices, compute_uv):
    """ds = diag(U^T dA V); for U and V the standard formulas for distinct singular values
    (thin factors only)."""
    (a,), (da,) = primals, tangents
    s, u, vt = svd_p.bind(a, full_matrices=False, compute_uv=True)
    da = ad.instantiate_zeros(da)
    v = _mT(vt)
    dav = lax.dot_general(da, v, *_bmm_dims(da))
    ut_da_v = lax.dot_general(_mT(u), dav, *_bmm_dims(u))
    ds = _diag_of(ut_da_v)
    if not compute_uv:
        return [s], [ds]
    if full_matrices and _shape(a)[-1] != _shape(a)[-2]:
        raise NotImplementedError("differentiating svd with full_matrices=True is only "
                                  "defined for square matrices")
    k = _shape(s)[-1]
    s_row = lax.broadcast_in_dim(s, _shape(s)[:-1] + (k, k), tuple(range(len(_shape(s)))))
    s_col = lax.broadcast_in_dim(s, _shape(s)[:-1] + (k, k),
                                 tuple(range(len(_shape(s)) - 1)) + (len(_shape(s)),))
    s_sq_diff = lax.sub(lax.square(s_row), lax.square(s_col))
    eye = _eye_like(s_sq_diff)
    safe = lax.select(lax.eq(eye, lax.full((), 1, _dtype(eye))),
                      lax.full_like(s_sq_diff, 1), s_sq_diff)
    f = lax.select(lax.eq(eye, lax.full((), 1, _dtype(eye))), lax.full_like(s_sq_diff, 0),
                   lax.div(lax.full_like(s_sq_diff, 1), safe))
    s_diag = lax.mul(eye, s_col)
    dp = ut_da_v
    dpt = _mT(dp)
    # dU = U (F o (dP S + S dP^T)) ; dV = V (F o (S dP + dP^T S))   (thin case, square-ish)
    s_dp = lax.dot_general(s_diag, dp, *_bmm_dims(s_diag))
    dp_s = lax.dot_general(dp, s_diag, *_bmm_dims(dp))
    s_dpt = lax.dot_general(s_diag, dpt, *_bmm_dims(s_diag))
    dpt_s = lax.dot_general(dpt, s_diag, *_bmm_dims(dpt))
    omega_u = lax.mul(lax.neg(f), lax.add(dp_s, s_dpt))
    omega_v = lax.mul(lax.neg(f), lax.add(s_dp, dpt_s))
    du = lax.dot_general(u, omega_u, *_bmm_dims(u))
    dv = lax.dot_general(v, omega_v, *_bmm_dims(v))
    m, n = _shape(a)[-2:]
    s_inv = lax.div(lax.full_like(s, 1), s)

    def scale_columns(x):  # x S^-1
        nb = len(_shape(s)) - 1
        return lax.mul(x, lax.broadcast_in_dim(s_inv, _shape(x), tuple(range(nb)) + (nb + 1,)))

    if m > k:  # the part of dA V outside span(U)
        proj = lax.sub(dav, lax.dot_general(u, ut_da_v, *_bmm_dims(u)))
        du = lax.add(du, scale_columns(proj))
    if n > k:  # the part of dA^T U outside span(V)
        ut_da = lax.dot_general(_mT(u), da, *_bmm_dims(u))
        proj = lax.sub(_mT(ut_da), lax.dot_general(v, _mT(ut_da_v), *_bmm_dims(v)))
        dv = lax.add(dv, scale_columns(proj))
    return [s, u, vt], [ds, du, _mT(dv)]


def _bmm_dims(x):
    nd = len(_shape(x))
    batch = tuple(range(nd - 2))
    return ((((nd - 1,), (nd - 2,)), (batch, batch)),)


def _mT(x):
    nd = len(_shape(x))
    return lax.transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _diag_of(x):
    nd = len(_shape(x))
    k = _shape(x)[-1]
    eye = _eye_like(x)
    return lax.reduce_sum(lax.mul(x, eye), (nd - 1,)) if k else lax.reduce_sum(x, (nd - 1,))


def _eye_like(x):
    s = _shape(x)
    nd = len(s)
    rows = lax.broadcasted_iota(dtypes.int32, s, nd - 2)
    cols = lax.broadcasted_iota(dtypes.int32, s, nd - 1)
    return lax.convert_element_type(lax.eq(rows, cols), _dtype(x))


def _svd_batch(vals, dims, *, full_matrices, compute_uv):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 0)
    outs = svd_p.bind(x, full_matrices=full_matrices, compute_uv=compute_uv)
    return outs, [0] * len(outs)


ad.primitive_jvps[svd_p] = _svd_jvp
batching.primitive_batchers[svd_p] = _svd_batch


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """Singular value decomposition of the last two axes: ``(u, s, vh)`` or just ``s``."""
    _check_arraylike("svd", a)
    (a,) = _promote_dtypes_inexact(_arr(a))
    a = _convert(a, _dtype(a))
    outs = svd_p.bind(a, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
    if not compute_uv:
        return outs[0]
    s, u, vt = outs
    return u, s, vt


def svdvals(x, /):
    """The singular values of the last two axes, in descending order."""
    return svd(x, compute_uv=False)


# --- norms -----------------------------------------------------------------------------------


def _abs(x):
    return lax.abs(x)


def _vector_norm(x, ord, axis, keepdims):
    if ord is None or ord == 2:
        return lax.sqrt(reductions.sum(lax.square(_abs(x)), axis=axis, keepdims=keepdims))
    if isinstance(ord, str):
        raise ValueError(f"Invalid order '{ord}' for vector norm.")
    if ord == np.inf:
        return reductions.max(_abs(x), axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return reductions.min(_abs(x), axis=axis, keepdims=keepdims)
    if ord == 0:
        nz = lax.convert_element_type(lax.ne(x, lax.full((), 0, _dtype(x))), _dtype(x))
        return reductions.sum(nz, axis=axis, keepdims=keepdims)
    if ord == 1:
        return reductions.sum(_abs(x), axis=axis, keepdims=keepdims)
    p = lax.full((), ord, _dtype(x))
    total = reductions.sum(lax.pow(_abs(x), p), axis=axis, keepdims=keepdims)
    return lax.pow(total, lax.div(lax.full((), 1, _dtype(x)), p))


def _matrix_norm(x, ord, axes, keepdims):
    row, col = axes
    if ord is None or ord == "fro":
        return lax.sqrt(reductions.sum(lax.square(_abs(x)), axis=axes, keepdims=keepdims))
    if ord in (1, -1, np.inf, -np.inf):
        # 1: the largest column sum (sum over rows); inf: the largest row sum.
        sum_axis, pick_axis = (row, col) if ord in (1, -1) else (col, row)
        sums = reductions.sum(_abs(x), axis=sum_axis, keepdims=True)
        pick = reductions.max if ord > 0 else reductions.min
        out = pick(sums, axis=pick_axis, keepdims=True)
        if keepdims:
            return out
        return lax.squeeze(out, tuple(sorted(axes)))
    if ord in (2, -2, "nuc"):
        moved = _move_to_end(x, row, col)
        s = svd_p.bind(moved, full_matrices=False, compute_uv=False)[0]
        nd = len(_shape(s))
        if ord == "nuc":
            out = lax.reduce_sum(s, (nd - 1,))
        elif ord == 2:
            out = lax.reduce_max(s, (nd - 1,))
        else:
            out = lax.reduce_min(s, (nd - 1,))
        if keepdims:
            for a in sorted(axes):
                out = lax.expand_dims(out, (a,))
        return out
    raise ValueError(f"Invalid order '{ord}' for matrix norm.")


def _move_to_end(x, row, col):
    nd = len(_shape(x))
    perm = tuple(i for i in range(nd) if i not in (row, col)) + (row, col)
    return lax.transpose(x, perm)


def norm(x, ord=None, axis=None, keepdims=False):
    """Vector norms (``ord`` None/2, 1, inf, -inf, 0, any p) over one axis and matrix norms
    (None/'fro', 1, -1, 2, -2, inf, -inf, 'nuc') over two; with ``axis=None`` a 1-D input
    takes a vector norm, a 2-D input a matrix norm, and ``ord=None`` the 2-norm of all
    elements."""
    _check_arraylike("jnp.linalg.norm", x)
    (x,) = _promote_dtypes_inexact(_arr(x))
    x = _convert(x, _dtype(x))
    nd = len(_shape(x))
    if axis is None:
        if ord is None:
            out = lax.sqrt(reductions.sum(lax.square(_abs(x))))
            return lax.reshape(out, (1,) * nd) if keepdims else out
        if nd == 1:
            axes = (0,)
        elif nd == 2:
            axes = (0, 1)
        else:
            raise ValueError("Improper number of axes for norm: ord requires a 1-D or 2-D "
                             "input when axis is None")
    elif np.ndim(axis) == 0:
        axes = (_canonicalize_axis(axis, nd),)
    else:
        axes = tuple(_canonicalize_axis(a, nd) for a in axis)
    if len(axes) == 1:
        return _vector_norm(x, ord, axes, keepdims)
    if len(axes) == 2:
        if axes[0] == axes[1]:
            raise ValueError("Duplicate axes given.")
        return _matrix_norm(x, ord, axes, keepdims)
    raise ValueError(f"Improper number of axes for norm: {axis}")


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """The array-API vector norm (all axes flattened by default)."""
    (x,) = _promote_dtypes_inexact(_arr(x))
    if axis is None:
        out = _vector_norm(lax.reshape(x, (core.get_aval(x).size,)), ord, (0,), False)
        return lax.reshape(out, (1,) * len(_shape(x))) if keepdims else out
    return norm(x, ord=ord, axis=axis, keepdims=keepdims)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """The array-API matrix norm of the last two axes."""
    return norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)

