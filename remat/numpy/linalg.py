"""``remat.numpy.linalg``: vector and matrix norms (and the singular values they need).

The singular values come from the ``svd`` primitive of ``remat.lax.linalg`` (NumPy's LAPACK
SVD as its impl, with JVP and batching rules), so matrix 2-norms and nuclear norms are
differentiable and batchable like everything else.
"""

import numpy as np

from remat import core, lax
from remat.lax.linalg import svd_p
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

__all__ = ["matrix_norm", "norm", "svd", "svdvals", "vector_norm"]

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

