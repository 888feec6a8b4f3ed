"""Products that contract axes (``dot matmul vdot vecdot inner outer tensordot kron
cross matvec vecmat``), each lowered to one ``dot_general`` with JAX's result dtype.
"""

import builtins

import numpy as np

from remat import dtypes, lax
from remat.numpy.creation import zeros_like
from remat.numpy.elementwise import conjugate, multiply, subtract
from remat.numpy.shapes import broadcast_arrays, expand_dims, moveaxis, ravel, stack
from remat.numpy.util import (
    _arr,
    _canon,
    _canonicalize_axes,
    _check_arraylike,
    _convert,
    _promote_dtypes,
    _result_of,
    _shape,
    _shared_type,
    _slice_axis,
    _static_int,
)

_max = builtins.max
_min = builtins.min
_sum = builtins.sum

__all__ = [
    "cross", "dot", "inner", "kron", "matmul", "matvec", "outer", "tensordot", "vdot", "vecdot",
    "vecmat",
]


def matvec(x1, x2, /):
    """Matrix-vector products over the leading (batch) axes."""
    return matmul(x1, expand_dims(x2, -1))[..., 0]


def vecmat(x1, x2, /):
    """Vector-matrix products over the leading (batch) axes."""
    return matmul(expand_dims(conjugate(x1), -2), x2)[..., 0, :]


def _dot_general(a, b, dims, precision=None, preferred_element_type=None):
    """dot_general on promoted operands, with JAX's result dtype and weak type."""
    d, weak = _shared_type(a, b) or _result_of(a, b)
    out_dtype = d if preferred_element_type is None else _canon(preferred_element_type)
    if d == dtypes.bool_:
        a, b = _convert(a, dtypes.int32), _convert(b, dtypes.int32)
        out = lax.dot_general(a, b, dims, precision=precision)
        return _convert(lax.ne(out, lax.full((), 0, dtypes.int32)), out_dtype, weak)
    a, b = _convert(a, d), _convert(b, d)
    out = lax.dot_general(a, b, dims, precision=precision,
                          preferred_element_type=preferred_element_type)
    return _convert(out, out_dtype, weak and preferred_element_type is None)


def dot(a, b, *, precision=None, preferred_element_type=None):
    """NumPy's ``dot``: products of scalars, inner products of vectors, and the contraction
    of ``a``'s last axis with ``b``'s second-to-last (or only) axis."""
    _check_arraylike("dot", a, b)
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        out = multiply(a, b)
        return out if preferred_element_type is None else _convert(
            out, _canon(preferred_element_type))
    contract_b = 0 if b.ndim == 1 else b.ndim - 2
    return _dot_general(a, b, (((a.ndim - 1,), (contract_b,)), ((), ())), precision,
                        preferred_element_type)


def matmul(a, b, *, precision=None, preferred_element_type=None):
    """``a @ b`` with NumPy's rules: 1-D operands are promoted to matrices (and the added
    axis removed), leading axes broadcast as batch axes."""
    _check_arraylike("matmul", a, b)
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: inputs must have at least one dimension, got shapes "
                         f"{_shape(a)} and {_shape(b)}")
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    sa, sb = _shape(a), _shape(b)
    if b.ndim <= 2:
        # no batch axes on b: dot_general's (a's free axes, b's free axes) is matmul's order
        return _dot_general(a, b, (((a.ndim - 1,), (0,)), ((), ())), precision,
                            preferred_element_type)
    if a.ndim == b.ndim and sa[:-2] == sb[:-2]:
        batch = tuple(range(a.ndim - 2))
        return _dot_general(a, b, (((a.ndim - 1,), (b.ndim - 2,)), (batch, batch)), precision,
                            preferred_element_type)
    a_batch = sa[:-2] if not a_vec else ()
    b_batch = sb[:-2] if not b_vec else ()
    nb = _max(len(a_batch), len(b_batch))
    a_batch = (None,) * (nb - len(a_batch)) + a_batch
    b_batch = (None,) * (nb - len(b_batch)) + b_batch
    # Classify each output batch axis: shared (a dot_general batch dim), or belonging to one
    # operand only (a free dim of that operand); size-1 axes facing a larger one are dropped.
    a_drop, b_drop, batch_pairs = [], [], []
    a_free_out, b_free_out, shared_out = [], [], []
    a_pos = b_pos = 0
    for i, (da, db) in enumerate(zip(a_batch, b_batch)):
        if da is None:
            b_free_out.append((i, b_pos))
            b_pos += 1
        elif db is None:
            a_free_out.append((i, a_pos))
            a_pos += 1
        elif da == db:
            batch_pairs.append((a_pos, b_pos))
            shared_out.append(i)
            a_pos += 1
            b_pos += 1
        elif da == 1:
            a_drop.append(a_pos)
            b_free_out.append((i, b_pos))
            a_pos += 1
            b_pos += 1
        elif db == 1:
            b_drop.append(b_pos)
            a_free_out.append((i, a_pos))
            a_pos += 1
            b_pos += 1
        else:
            raise ValueError(f"Incompatible shapes for matmul arguments: {sa} and {sb}")
    a = lax.squeeze(a, tuple(a_drop)) if a_drop else a
    b = lax.squeeze(b, tuple(b_drop)) if b_drop else b

    def renumber(pos, dropped):
        return pos - _sum(1 for d in dropped if d < pos)

    batch_a = tuple(renumber(p, a_drop) for p, _ in batch_pairs)
    batch_b = tuple(renumber(p, b_drop) for _, p in batch_pairs)
    ca = a.ndim - 1
    cb = b.ndim - 1 if b_vec else b.ndim - 2
    out = _dot_general(a, b, (((ca,), (cb,)), (batch_a, batch_b)), precision,
                       preferred_element_type)
    # dot_general's output: shared batch axes, a's free axes in order, b's free axes in order.
    a_free_positions = sorted(a_free_out, key=lambda t: renumber(t[1], a_drop))
    b_free_positions = sorted(b_free_out, key=lambda t: renumber(t[1], b_drop))
    order = list(shared_out) + [i for i, _ in a_free_positions]
    if not a_vec:
        order.append(nb)  # a's row axis
    order += [i for i, _ in b_free_positions]
    if not b_vec:
        order.append(nb + (0 if a_vec else 1))  # b's column axis
    perm = tuple(sorted(range(len(order)), key=order.__getitem__))
    return lax.transpose(out, perm)


def vdot(a, b, *, precision=None, preferred_element_type=None):
    """Dot product of the flattened arrays (conjugating ``a``)."""
    _check_arraylike("vdot", a, b)
    return dot(conjugate(ravel(a)), ravel(b), precision=precision,
               preferred_element_type=preferred_element_type)


def vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    """Dot products of vectors along ``axis`` (broadcasting the other axes)."""
    x1, x2 = broadcast_arrays(x1, x2)
    x1 = moveaxis(x1, axis, -1)
    x2 = moveaxis(x2, axis, -1)
    return matmul(expand_dims(conjugate(x1), -2), expand_dims(x2, -1),
                  precision=precision,
                  preferred_element_type=preferred_element_type)[..., 0, 0]


def inner(a, b, *, precision=None, preferred_element_type=None):
    """Contraction of the last axes of ``a`` and ``b``."""
    _check_arraylike("inner", a, b)
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    return _dot_general(a, b, (((a.ndim - 1,), (b.ndim - 1,)), ((), ())), precision,
                        preferred_element_type)


def outer(a, b, out=None):
    """``a[:, None] * b[None, :]`` of the flattened arrays."""
    _check_arraylike("outer", a, b)
    a, b = ravel(a), ravel(b)
    a, b = _promote_dtypes(a, b)
    n, m = _shape(a)[0], _shape(b)[0]
    return multiply(lax.broadcast_in_dim(a, (n, m), (0,)), lax.broadcast_in_dim(b, (n, m), (1,)))


def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None):
    """Contract ``a``'s and ``b``'s axes: the last/first ``axes`` of each, or the listed
    pairs."""
    _check_arraylike("tensordot", a, b)
    a, b = _arr(a), _arr(b)
    if not isinstance(axes, (list, tuple)):
        n = _static_int(axes, "axes")
        if n < 0 or n > _min(a.ndim, b.ndim):
            raise TypeError(f"Number of tensordot axes (axes {n}) exceeds input ranks "
                            f"({_shape(a)} and {_shape(b)})")
        ca = tuple(range(a.ndim - n, a.ndim))
        cb = tuple(range(n))
    else:
        if len(axes) != 2:
            raise TypeError(f"tensordot requires axes to be an int or a pair of sequences, "
                            f"got {axes}")
        ax_a, ax_b = axes
        ax_a = (ax_a,) if np.ndim(ax_a) == 0 else tuple(ax_a)
        ax_b = (ax_b,) if np.ndim(ax_b) == 0 else tuple(ax_b)
        if len(ax_a) != len(ax_b):
            raise TypeError(f"tensordot requires axes lists to have equal length, got {ax_a} "
                            f"and {ax_b}.")
        ca = _canonicalize_axes(ax_a, a.ndim)
        cb = _canonicalize_axes(ax_b, b.ndim)
    return _dot_general(a, b, ((ca, cb), ((), ())), precision, preferred_element_type)


def kron(a, b):
    """Kronecker product."""
    _check_arraylike("kron", a, b)
    a, b = _promote_dtypes(_arr(a), _arr(b))
    nd = _max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + _shape(a)
    sb = (1,) * (nd - b.ndim) + _shape(b)
    a, b = lax.reshape(a, sa), lax.reshape(b, sb)
    full_shape = tuple(v for pair in zip(sa, sb) for v in pair)
    ab = lax.broadcast_in_dim(a, full_shape, tuple(range(0, 2 * nd, 2)))
    bb = lax.broadcast_in_dim(b, full_shape, tuple(range(1, 2 * nd, 2)))
    prod = multiply(ab, bb)
    return lax.reshape(prod, tuple(x * y for x, y in zip(sa, sb)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cross product of 3-vectors (or 2-vectors, giving the z component)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _promote_dtypes(_arr(a), _arr(b))
    a = moveaxis(a, axisa, -1)
    b = moveaxis(b, axisb, -1)
    na, nb = _shape(a)[-1], _shape(b)[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("Dimension must be either 2 or 3 for cross product")
    ai = [_slice_axis(a, a.ndim - 1, i, i + 1)[..., 0] for i in range(na)]
    bi = [_slice_axis(b, b.ndim - 1, i, i + 1)[..., 0] for i in range(nb)]
    if na == 2 and nb == 2:
        return subtract(multiply(ai[0], bi[1]), multiply(ai[1], bi[0]))
    zero_a = zeros_like(ai[0])
    zero_b = zeros_like(bi[0])
    a0, a1, a2 = ai if na == 3 else (ai[0], ai[1], zero_a)
    b0, b1, b2 = bi if nb == 3 else (bi[0], bi[1], zero_b)
    c = stack([subtract(multiply(a1, b2), multiply(a2, b1)),
               subtract(multiply(a2, b0), multiply(a0, b2)),
               subtract(multiply(a0, b1), multiply(a1, b0))], -1)
    return moveaxis(c, -1, axisc)
