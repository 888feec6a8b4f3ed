"""Helpers shared by the linear-algebra primitives (``remat.lax.linalg`` and
``remat.lax.linalg_forms``): matrix operations written on lax primitives for the JVP and
transpose rules (conjugate transposes, triangles, diagonals, row permutations), the checks of
the abstract evals, and the LAPACK plumbing of the impls (batches, half precision, NaNs on
failure)."""

import numpy as np

from remat import core, dtypes
from remat.interpreters import batching
from remat.lax import complex_parts
from remat.lax.dot import dot_general
from remat.lax.elementwise import add, convert_element_type, div, select
from remat.lax.gather_scatter_common import GatherDimensionNumbers
from remat.lax.gathers import gather
from remat.lax.reductions import reduce_sum
from remat.lax.shape import (
    broadcast_in_dim,
    broadcasted_iota,
    expand_dims,
    full,
    full_like,
    transpose,
)
from remat.lax.slicing import slice_in_dim
from remat.lax.sorting import sort_key_val
from remat.lax.standard import INEXACT, check_dtype
from remat.runtime import parallel
from remat.runtime.lazy_imports import LazyModule

scipy_linalg = LazyModule("scipy.linalg")
lapack = LazyModule("scipy.linalg.lapack")

# --- matrix operations on lax values -----------------------------------------------------------


def shape_of(x):
    return core.get_aval(x).shape


def dtype_of(x):
    return core.get_aval(x).dtype


def ndim_of(x):
    return len(shape_of(x))


def is_complex(x):
    return dtypes.kind(dtype_of(x)) == "c"


def mT(x):
    nd = ndim_of(x)
    return transpose(x, (*range(nd - 2), nd - 1, nd - 2))


def conj(x):
    # Real values are their own conjugates; complex ones need the elementwise ``conj``.
    return complex_parts.conj(x) if is_complex(x) else x


def real(x):
    return complex_parts.real(x) if is_complex(x) else x


def mH(x):
    return conj(mT(x))


def matmul(a, b):
    """``a @ b`` of matrices with equal leading batch dims."""
    nd = ndim_of(a)
    batch = tuple(range(nd - 2))
    return dot_general(a, b, (((nd - 1,), (nd - 2,)), (batch, batch)))


def scalar_like(x, value):
    return full((), value, dtype_of(x))


def matrix_const(x, value):
    """A constant ``[m, n]`` matrix broadcast to ``x``'s (batch) shape and dtype."""
    nd = ndim_of(x)
    value = np.asarray(value, dtype_of(x))
    return broadcast_in_dim(value, shape_of(x), (nd - 2, nd - 1))


def select_mask(x, mask):
    """``x`` where the constant ``[m, n]`` boolean ``mask`` holds, else 0 (a select, so
    infinities outside the mask do not leak in as NaNs)."""
    nd = ndim_of(x)
    pred = broadcast_in_dim(np.asarray(mask), shape_of(x), (nd - 2, nd - 1))
    return select(pred, x, full_like(x, 0))


def tril(x, k=0):
    m, n = shape_of(x)[-2:]
    return select_mask(x, np.tri(m, n, k, dtype=bool))


def triu(x, k=0):
    m, n = shape_of(x)[-2:]
    return select_mask(x, ~np.tri(m, n, k - 1, dtype=bool))


def eye_like(x):
    m, n = shape_of(x)[-2:]
    return matrix_const(x, np.eye(m, n))


def symmetrize(x):
    return div(add(x, mH(x)), scalar_like(x, 2))


def diagonal(x):
    """The diagonal of the last two axes, ``[..., min(m, n)]``."""
    m, n = shape_of(x)[-2:]
    out = reduce_sum(select_mask(x, np.eye(m, n, dtype=bool)), (ndim_of(x) - 2,))
    return slice_in_dim(out, 0, min(m, n), axis=ndim_of(out) - 1)


def as_rows(v, shape):
    """``v[..., k]`` broadcast to ``shape = [..., r, k]``: ``out[..., i, j] = v[..., j]``."""
    nb = ndim_of(v) - 1
    return broadcast_in_dim(v, shape, (*range(nb), nb + 1))


def as_cols(v, shape):
    """``v[..., k]`` broadcast to ``shape = [..., k, c]``: ``out[..., i, j] = v[..., i]``."""
    nb = ndim_of(v) - 1
    return broadcast_in_dim(v, shape, tuple(range(nb + 1)))


def convert(x, dtype):
    return x if dtype_of(x) == dtype else convert_element_type(x, dtype)


def permute_rows(x, permutation):
    """``x[..., permutation, :]`` (a gather, so it transposes to a scatter-add)."""
    nb = ndim_of(x) - 2
    k = shape_of(x)[-1]
    dnums = GatherDimensionNumbers(
        offset_dims=(nb + 1,), collapsed_slice_dims=(nb,), start_index_map=(nb,),
        operand_batching_dims=tuple(range(nb)), start_indices_batching_dims=tuple(range(nb)))
    return gather(x, expand_dims(permutation, (nb + 1,)), dnums, (1,) * (nb + 1) + (k,),
                      indices_are_sorted=False, unique_indices=True, mode="promise_in_bounds")


def inverse_permutation(permutation):
    last = ndim_of(permutation) - 1
    iota = broadcasted_iota(dtype_of(permutation), shape_of(permutation), last)
    return sort_key_val(permutation, iota, last)[1]


def batch_leading(prim):
    """The batching rule of a primitive that takes leading batch dims: every operand gets the
    vmapped dim first (unbatched ones are broadcast)."""

    def rule(vals, dims, **params):
        size = batching.axis_size_of(vals, dims)
        vals = [batching.bdim_at_front(x, d, size) for x, d in zip(vals, dims)]
        out = prim.bind(*vals, **params)
        return out, ([0] * len(out) if prim.multiple_results else 0)

    batching.primitive_batchers[prim] = rule


# --- helpers for impls and abstract evals ----------------------------------------------------


def check_rank(name, aval, rank, index=0):
    if aval.ndim < rank:
        raise TypeError(f"Input {index} to {name} must have rank at least {rank}, but got "
                        f"shape={aval.shape}")


def check_square(name, x, argument=None):
    """An inexact ``[..., n, n]`` operand, else JAX's error (``argument`` names the operand
    as JAX's message for ``name`` does)."""
    check_dtype(name, x, INEXACT)
    check_rank(name, x, 2)
    if x.shape[-1] != x.shape[-2]:
        if argument is not None:
            raise ValueError(f"Argument to {argument} must have shape [..., n, n], got shape "
                             f"{x.shape}")
        raise ValueError(f"The input to {name} must be a square matrix. Got shape "
                         f"{x.shape[-2:]}.")


def real_dtype(dtype):
    return np.finfo(dtype).dtype if dtypes.kind(dtype) == "c" else dtype


def complex_dtype(dtype):
    return np.result_type(dtype, np.complex64)


def lapack_input(x):
    """LAPACK has no half precision: float16 is computed in float32 (cast back by the caller's
    abstract dtype)."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def per_matrix(fn, x):
    """``fn`` on a batch of matrices at once (NumPy's batched LAPACK), or, when that fails,
    one matrix at a time, where a matrix that fails gives NaNs (JAX's behaviour on CPU)."""
    try:
        return fn(x)
    except np.linalg.LinAlgError:
        pass
    template = fn(np.eye(*x.shape[-2:], dtype=x.dtype))  # the shapes and dtypes of a result
    single = not isinstance(template, tuple)
    parts = (template,) if single else template
    outs = [np.empty(x.shape[:-2] + p.shape, p.dtype) for p in parts]
    for idx in np.ndindex(x.shape[:-2]):
        try:
            result = fn(x[idx])
        except np.linalg.LinAlgError:
            result = (np.nan,) * len(outs)
        for out, part in zip(outs, (result,) if single else result):
            out[idx] = part
    return outs[0] if single else tuple(outs)


def lapack_loop(name, x, fn, out_shapes):
    """Run the LAPACK routine ``name`` (``fn(routine, matrix) -> parts``) on each matrix."""
    routine = lapack.get_lapack_funcs(name, dtype=x.dtype)
    outs = [np.zeros((*x.shape[:-2], *s), dt) for s, dt in out_shapes]
    with parallel.blas_threads():
        for idx in np.ndindex(x.shape[:-2]):
            for out, part in zip(outs, fn(routine, x[idx])):
                out[idx] = part
    return outs
