"""Contractions: ``dot_general`` (and the ``dot`` / ``batch_matmul`` wrappers) with its impl,
abstract eval, JVP, transpose and batching rules.

``dot_general`` is the hot primitive of every model, so its impl maps each contraction onto a
single ``np.matmul`` over views: operands are permuted to ``(batch, free, contract)`` and
``(batch, contract, free)`` and grouped into 2-D or 3-D matrices; plain matrix products go to
``np.matmul`` directly.
"""

import enum
import functools
import math
import operator

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.elementwise import convert_element_type, convert_element_type_p
from remat.lax.shape import transpose
from remat.lax.standard import standard_primitive
from remat.runtime import parallel, registry

__all__ = [
    "Precision",
    "batch_matmul",
    "dot",
    "dot_general",
    "dot_general_p",
]


class Precision(enum.Enum):
    """Precision of a contraction's operands. NumPy always computes in the operand (or wider)
    dtype, so this only records the request, as the params of the equation."""

    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    @classmethod
    def _missing_(cls, value):
        if isinstance(value, str):
            name = _PRECISION_STRINGS.get(value.lower())
            if name is not None:
                return cls[name]
        return None

    def __repr__(self):
        return f"Precision.{self.name}"

    def __str__(self):
        return self.name


_PRECISION_STRINGS = {"default": "DEFAULT", "fastest": "DEFAULT", "bfloat16": "DEFAULT",
                      "high": "HIGH", "tensorfloat32": "HIGH", "bfloat16_3x": "HIGH",
                      "highest": "HIGHEST", "float32": "HIGHEST"}


def canonicalize_precision(precision):
    """``None`` or a pair of ``Precision`` values (one per operand), as JAX stores it."""
    if precision is None:
        return None
    if isinstance(precision, Precision):
        return precision, precision
    if isinstance(precision, str) and precision.lower() in _PRECISION_STRINGS:
        p = Precision(precision)
        return p, p
    if isinstance(precision, (list, tuple)) and len(precision) == 2 and \
            all(isinstance(p, (Precision, str)) for p in precision):
        try:
            return tuple(Precision(p) for p in precision)
        except ValueError:
            pass
    raise ValueError(f"Precision argument must be one of:\n- None,\n- a string in "
                     f"{list(_PRECISION_STRINGS)},\n- a lax.Precision value,\n- a tuple of two "
                     f"lax.Precision values or strings;\nbut got {precision}.")


def canonicalize_preferred_element_type(preferred_element_type, name):
    if preferred_element_type is None:
        return None
    try:
        return dtypes.canonicalize_dtype(preferred_element_type)
    except TypeError as e:
        raise TypeError(f"{name}: invalid preferred_element_type {preferred_element_type!r}: "
                        f"{e}") from None


# --- dtype rules shared with the convolution -----------------------------------------------


def _bit_width(dtype):
    if dtype == dtypes.bool_:
        return 1
    return dtype.itemsize * 8


def _type_properties(dtype):
    """XLA's ordering of operand types (``HigherPrecisionType``): complex, then exponent
    range, mantissa, width, signedness."""
    is_complex = dtypes.kind(dtype) == "c"
    real = dtypes.finfo(dtype).dtype if is_complex else dtype
    kind = dtypes.kind(real)
    info = dtypes.finfo(real) if kind == "f" else None
    return (is_complex, info.maxexp if info else -1, info.nmant if info else -1,
            _bit_width(real), kind != "u")


def maybe_upcast(result_dtype, preferred_element_type, check_bit_width=True):
    """The output dtype given ``preferred_element_type`` (JAX/XLA's ``MaybeUpcast``)."""
    if preferred_element_type is None or result_dtype == preferred_element_type:
        return result_dtype
    if check_bit_width and dtypes.kind(result_dtype) != "f" and \
            _bit_width(preferred_element_type) < _bit_width(result_dtype):
        raise TypeError(f"`preferred_element_type` must not be narrower than the original "
                        f"type, got preferred_element_type of {preferred_element_type.name} "
                        f"for result type of {result_dtype.name}.")
    return preferred_element_type


def _dot_result_dtype(lhs_dtype, rhs_dtype, preferred_element_type, name="lax.dot_general"):
    """The wider operand type wins (mixed operand dtypes are allowed, as in JAX)."""
    if lhs_dtype == rhs_dtype and preferred_element_type is None:
        return lhs_dtype
    lp, rp = _type_properties(lhs_dtype), _type_properties(rhs_dtype)
    if lp > rp:
        result = lhs_dtype
    elif rp > lp:
        result = rhs_dtype
    else:
        if lhs_dtype != rhs_dtype:
            raise TypeError(f"{name} argument type error: {lhs_dtype.name}, {rhs_dtype.name}")
        result = lhs_dtype
    return maybe_upcast(result, preferred_element_type)


def compute_dtype(dtype):
    """The dtype NumPy computes a contraction in: float16 accumulates in float32 (NumPy's
    float16 matmul has no BLAS path and rounds every partial sum)."""
    return dtypes.float32 if dtype == dtypes.float16 else dtype


# --- dot_general -----------------------------------------------------------------------------


class _DotDimensionNumbers(tuple):
    """``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`` as nested tuples
    (hashable params) that print like JAX's: ``(([1], [0]), ([], []))``."""

    __slots__ = ()

    def __repr__(self):
        (lc, rc), (lb, rb) = self
        return f"(({list(lc)}, {list(rc)}), ({list(lb)}, {list(rb)}))"

    __str__ = __repr__


def _dims_tuple(dims, what):
    if isinstance(dims, (int, np.integer)):
        dims = (dims,)
    try:
        return tuple(operator.index(d) for d in dims)
    except TypeError:
        raise TypeError(f"dot_general {what} dimensions must be a sequence of integers, "
                        f"got {dims!r}") from None


_canonical_dims = {}  # the dimension numbers callers write, canonicalized (eager calls repeat)


def _canonicalize_dimension_numbers(dimension_numbers):
    if type(dimension_numbers) is _DotDimensionNumbers:
        return dimension_numbers
    try:
        return _canonical_dims[dimension_numbers]
    except (KeyError, TypeError):  # (new, or unhashable: lists)
        pass
    canonical = _parsed_dimension_numbers(dimension_numbers)
    if len(_canonical_dims) < 4096:
        try:
            _canonical_dims[dimension_numbers] = canonical
        except TypeError:
            pass
    return canonical


def _parsed_dimension_numbers(dimension_numbers):
    try:
        (lc, rc), (lb, rb) = dimension_numbers
    except (TypeError, ValueError):
        raise TypeError(f"dot_general dimension_numbers must be of the form "
                        f"((lhs_contracting_dims, rhs_contracting_dims), (lhs_batch_dims, "
                        f"rhs_batch_dims)), got {dimension_numbers!r}") from None
    return _DotDimensionNumbers(((_dims_tuple(lc, "contracting"), _dims_tuple(rc, "contracting")),
                                 (_dims_tuple(lb, "batch"), _dims_tuple(rb, "batch"))))


def _argsort(dims):
    """The positions of ``dims`` (distinct ints) in increasing order of their values."""
    return tuple(sorted(range(len(dims)), key=dims.__getitem__))


def _free_dims(ndim, contracting, batch):
    return tuple(d for d in range(ndim) if d not in contracting and d not in batch)


@functools.lru_cache(maxsize=4096)
def _dot_general_shape(lhs_shape, rhs_shape, dimension_numbers):
    """The output shape, after JAX's checks (cached: eager loops repeat the same shapes)."""
    (lc, rc), (lb, rb) = dimension_numbers
    lhs, rhs = ShapedArray(lhs_shape, np.float32), ShapedArray(rhs_shape, np.float32)
    for name, aval, c, b in (("lhs", lhs, lc, lb), ("rhs", rhs, rc, rb)):
        if not all(0 <= d < aval.ndim for d in c + b):
            raise TypeError(f"dot_general requires {name} dimension numbers to be nonnegative "
                            f"and less than the number of axes of the {name} value, got "
                            f"{name}_batch of {b} and {name}_contracting of {c} for {name} of "
                            f"rank {aval.ndim}")
    if len(lb) != len(rb):
        raise TypeError(f"dot_general requires equal numbers of lhs_batch and rhs_batch "
                        f"dimensions, got lhs_batch {lb} and rhs_batch {rb}.")
    for name, c, b in (("lhs", lc, lb), ("rhs", rc, rb)):
        if len(set(b)) != len(b):
            raise TypeError(f"dot_general requires {name} batch dimensions to be distinct, got "
                            f"{name}_batch {b}.")
        if len(set(c)) != len(c):
            raise TypeError(f"dot_general requires {name} contracting dimensions to be "
                            f"distinct, got {name}_contracting {c}.")
        if set(c) & set(b):
            raise TypeError(f"dot_general requires {name} batch dimensions to be disjoint from "
                            f"contracting dimensions, got {name}_batch {b} and "
                            f"{name}_contracting {c}.")
    lbs, rbs = tuple(lhs.shape[d] for d in lb), tuple(rhs.shape[d] for d in rb)
    if lbs != rbs:
        raise TypeError(f"dot_general requires lhs batch dimensions and rhs batch dimensions "
                        f"to have the same shape, got {lbs} and {rbs}.")
    lcs, rcs = tuple(lhs.shape[d] for d in lc), tuple(rhs.shape[d] for d in rc)
    if lcs != rcs:
        raise TypeError(f"dot_general requires contracting dimensions to have the same shape, "
                        f"got {lcs} and {rcs}.")
    return (lbs + tuple(lhs.shape[d] for d in _free_dims(lhs.ndim, lc, lb))
            + tuple(rhs.shape[d] for d in _free_dims(rhs.ndim, rc, rb)))


def _dot_general_abstract_eval(lhs, rhs, *, dimension_numbers, precision,
                               preferred_element_type):
    shape = _dot_general_shape(lhs.shape, rhs.shape, dimension_numbers)
    dtype = _dot_result_dtype(lhs.dtype, rhs.dtype, preferred_element_type)
    weak = lhs.weak_type and rhs.weak_type and preferred_element_type is None
    return ShapedArray(shape, dtype, weak)


def _prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n


# The contractions of two matrices the impl runs as one matmul of its operands: whether each
# is read transposed (a ``.T`` view).
_MATRIX_PRODUCTS = {((1,), (0,)): (False, False), ((0,), (0,)): (True, False),
                    ((1,), (1,)): (False, True)}


def _dot_general_impl(lhs, rhs, *, dimension_numbers, precision, preferred_element_type):
    (lc, rc), (lb, rb) = dimension_numbers
    out_dtype = _dot_result_dtype(lhs.dtype, rhs.dtype, preferred_element_type)
    work = compute_dtype(out_dtype)
    if lhs.dtype != work:
        lhs = lhs.astype(work)
    if rhs.dtype != work:
        rhs = rhs.astype(work)
    if not lb and lhs.ndim == 2 and rhs.ndim == 2:  # the plain matrix products
        transposed = _MATRIX_PRODUCTS.get((tuple(lc), tuple(rc)))
        if transposed is not None:
            return parallel.matmul(lhs.T if transposed[0] else lhs,
                                   rhs.T if transposed[1] else rhs)
    lf, rf = _free_dims(lhs.ndim, lc, lb), _free_dims(rhs.ndim, rc, rb)
    batch_shape = tuple(lhs.shape[d] for d in lb)
    lf_shape = tuple(lhs.shape[d] for d in lf)
    rf_shape = tuple(rhs.shape[d] for d in rf)
    k = _prod(lhs.shape[d] for d in lc)
    m, n = _prod(lf_shape), _prod(rf_shape)
    a = np.transpose(lhs, lb + lf + lc)  # views; reshape copies only when it must
    b = np.transpose(rhs, rb + rc + rf)
    # the product written into the result's own buffer (not returned as a reshaped view of
    # another: the executor writes a following elementwise step into a buffer of its own)
    out = np.empty(batch_shape + lf_shape + rf_shape, np.result_type(a.dtype, b.dtype))
    if lb:
        nb = _prod(batch_shape)
        parallel.matmul(a.reshape(nb, m, k), b.reshape(nb, k, n), out=out.reshape(nb, m, n))
    else:
        parallel.matmul(a.reshape(m, k), b.reshape(k, n), out=out.reshape(m, n))
    return out


dot_general_p = standard_primitive("dot_general", _dot_general_impl, _dot_general_abstract_eval)


def _transposed_dot_general(eqn, permutation):
    """``transpose(dot_general(a, b), perm)`` as ``dot_general(b, a)`` when ``perm`` swaps the
    free dimensions of the operands (no batch dimensions): the same sums, each written where
    the transpose wants it."""
    (lc, rc), (lb, _) = eqn.params["dimension_numbers"]
    lhs, rhs = eqn.invars
    n_lhs, n_rhs = len(lhs.aval.shape) - len(lc), len(rhs.aval.shape) - len(rc)
    if lb or tuple(permutation) != (*range(n_lhs, n_lhs + n_rhs), *range(n_lhs)):
        return None
    precision = eqn.params["precision"]
    return [rhs, lhs], dict(eqn.params, dimension_numbers=((rc, lc), ((), ())),
                            precision=precision[::-1] if precision is not None else None)


registry.transposed_forms[dot_general_p] = _transposed_dot_general


def _dot_general_in_order(eqn):
    """The params of the same product on its rhs transposed, when it reads a matrix rhs across
    its rows (``x @ w.T``: every dense layer's gradient), which BLAS runs 1.1-2.4x slower than
    the product on a contiguous ``w.T`` (measured from 8x16x16 to 256x256x256)."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs, rhs = eqn.invars
    if lb or len(lhs.aval.shape) != 2 or len(rhs.aval.shape) != 2 or tuple(rc) != (1,):
        return None
    return dict(eqn.params, dimension_numbers=((lc, (0,)), (lb, rb)))


registry.in_order_forms[dot_general_p] = _dot_general_in_order

def _dot_general_source(eqn, ins):
    """A product of two matrices too small to split across the workers: the impl's own
    ``np.matmul`` call (the impl checks dtypes and sizes at every call; a loop kernel's
    are known when it is written)."""
    (lc, rc), (lb, _) = eqn.params["dimension_numbers"]
    lhs, rhs, out = (v.aval for v in (*eqn.invars, eqn.outvars[0]))
    transposed = _MATRIX_PRODUCTS.get((tuple(lc), tuple(rc)))
    if transposed is None or lb or eqn.primitive.impl is not _dot_general_impl or \
            lhs.ndim != 2 or rhs.ndim != 2 or \
            not lhs.dtype == rhs.dtype == out.dtype == compute_dtype(out.dtype) or \
            math.prod(out.shape) * lhs.shape[lc[0]] >= parallel.MIN_SPLIT_FLOPS:
        return None
    a, b = (f"{x}.T" if t else x for x, t in zip(ins, transposed))
    return f"np.matmul({a}, {b})"


registry.source_forms[dot_general_p] = _dot_general_source


def _bind_dot(lhs, rhs, dimension_numbers, precision, preferred_element_type):
    return dot_general_p.bind(lhs, rhs,
                              dimension_numbers=_canonicalize_dimension_numbers(
                                  dimension_numbers),
                              precision=precision, preferred_element_type=preferred_element_type)


def _dot_general_jvp(primals, tangents, *, dimension_numbers, precision,
                     preferred_element_type):
    x, y = primals
    tx, ty = tangents
    params = dict(dimension_numbers=dimension_numbers, precision=precision,
                  preferred_element_type=preferred_element_type)
    out = dot_general_p.bind(x, y, **params)
    out_aval = core.get_aval(out)
    zero = ad.Zero(out_aval.to_tangent_aval())
    if not dtypes.is_inexact(out_aval.dtype):
        return out, zero
    terms = []
    if type(tx) is not ad.Zero:
        terms.append(dot_general_p.bind(tx, y, **params))
    if type(ty) is not ad.Zero:
        terms.append(dot_general_p.bind(x, ty, **params))
    acc = zero
    for t in terms:
        if core.get_aval(t).dtype != out_aval.dtype:
            t = convert_element_type(t, out_aval.dtype)
        acc = ad.add_tangents(acc, t)
    return out, acc


def _ranges_like(*xs):
    start = 0
    for x in xs:
        yield tuple(range(start, start + len(x)))
        start += len(x)


def _dot_transpose_operand(ct, x_aval, y, dimension_numbers, precision,
                           preferred_element_type, swap_ans):
    """The cotangent of operand ``x`` of ``dot_general(x, y)`` (or of ``dot_general(y, x)``
    when ``swap_ans``, with the dimension numbers already swapped): contract the cotangent
    with ``y`` over ``y``'s free dims, then permute into ``x``'s layout."""
    (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
    y_ndim = core.get_aval(y).ndim
    x_kept = _free_dims(x_aval.ndim, x_contract, x_batch)
    y_kept = _free_dims(y_ndim, y_contract, y_batch)
    if swap_ans:
        ans_batch, ans_y, _ = _ranges_like(x_batch, y_kept, x_kept)
    else:
        ans_batch, _, ans_y = _ranges_like(x_batch, x_kept, y_kept)
    dims = ((ans_y, y_kept), (ans_batch, y_batch))
    x_contract_sorted_by_y = tuple(x_contract[i] for i in _argsort(y_contract))
    unsorted_axes = tuple(x_batch) + x_kept + x_contract_sorted_by_y
    out = _bind_dot(ct, y, dims, precision, preferred_element_type)
    out = transpose(out, _argsort(unsorted_axes))
    if core.get_aval(out).dtype != x_aval.dtype:  # a real operand's cotangent: the real part
        out = convert_element_type_p.bind(out, new_dtype=x_aval.dtype,
                                              weak_type=x_aval.weak_type)
    return out


def _dot_general_transpose(ct, x, y, *, dimension_numbers, precision, preferred_element_type):
    if ad.is_undefined_primal(x) and ad.is_undefined_primal(y):
        raise ValueError("dot_general is not linear in both operands at once: transposing it "
                         "needs one operand's value")
    (lc, rc), (lb, rb) = dimension_numbers
    if ad.is_undefined_primal(x):
        return [_dot_transpose_operand(ct, x.aval, y, dimension_numbers, precision,
                                       preferred_element_type, swap_ans=False), None]
    if ad.is_undefined_primal(y):
        swapped = ((rc, lc), (rb, lb))
        return [None, _dot_transpose_operand(ct, y.aval, x, swapped, precision,
                                             preferred_element_type, swap_ans=True)]
    return [None, None]


def _bump(dims, b):
    """Dimension indices of an unbatched operand, as indices into the batched one."""
    return tuple(d + (d >= b) for d in dims)


def _dot_general_batch(vals, dims, *, dimension_numbers, precision, preferred_element_type):
    """The vmapped dim becomes an extra batch dim of the dot (both operands batched) or an
    extra free dim of the batched operand: no data movement either way."""
    (lhs, rhs), (lbd, rbd) = vals, dims
    (lc, rc), (lb, rb) = dimension_numbers
    lhs_ndim, rhs_ndim = core.get_aval(lhs).ndim, core.get_aval(rhs).ndim
    if lbd is not batching.not_mapped and rbd is not batching.not_mapped:
        new = (((_bump(lc, lbd), _bump(rc, rbd)),
                ((lbd,) + _bump(lb, lbd), (rbd,) + _bump(rb, rbd))))
        out_dim = 0
    elif lbd is not batching.not_mapped:
        free = _free_dims(lhs_ndim - 1, lc, lb)
        out_dim = len(lb) + sum(1 for d in free if d < lbd)
        new = ((_bump(lc, lbd), rc), (_bump(lb, lbd), rb))
    else:
        free = _free_dims(rhs_ndim - 1, rc, rb)
        out_dim = (lhs_ndim - len(lc)) + sum(1 for d in free if d < rbd)
        new = ((lc, _bump(rc, rbd)), (lb, _bump(rb, rbd)))
    return _bind_dot(lhs, rhs, new, precision, preferred_element_type), out_dim


ad.primitive_jvps[dot_general_p] = _dot_general_jvp
ad.primitive_transposes[dot_general_p] = _dot_general_transpose
batching.primitive_batchers[dot_general_p] = _dot_general_batch


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """General contraction: ``dimension_numbers = ((lhs_contracting, rhs_contracting),
    (lhs_batch, rhs_batch))``; the output has the batch dims, then the lhs free dims, then
    the rhs free dims."""
    return _bind_dot(lhs, rhs, dimension_numbers, canonicalize_precision(precision),
                     canonicalize_preferred_element_type(preferred_element_type, "dot_general"))


def dot(lhs, rhs, precision=None, preferred_element_type=None, *, dimension_numbers=None):
    """Vector/matrix products of operands of rank 1 or 2 (or ``dot_general`` when
    ``dimension_numbers`` is given)."""
    if dimension_numbers is None:
        ls, rs = core.get_aval(lhs).shape, core.get_aval(rhs).shape
        if 1 <= len(ls) <= 2 and 1 <= len(rs) <= 2 and ls[-1] == rs[0]:
            dimension_numbers = (((len(ls) - 1,), (0,)), ((), ()))
        else:
            raise ValueError(f"remat.lax.dot: dimension_numbers must be specified when not "
                             f"performing simple un-batched matrix-matrix, matrix-vector, or "
                             f"vector-vector products; got lhs_shape={ls} rhs_shape={rs}")
    return dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type)


def batch_matmul(lhs, rhs, precision=None):
    """Matrix products over all leading (batch) dims: ``[..., m, k] @ [..., k, n]``."""
    ln, rn = core.get_aval(lhs).ndim, core.get_aval(rhs).ndim
    if min(ln, rn) < 2:
        raise ValueError(f"Arguments to batch_matmul must be at least 2D, got {ln}, {rn}")
    if ln != rn:
        raise ValueError(f"Arguments to batch_matmul must have same ndim, got {ln}, {rn}")
    batch = tuple(range(ln - 2))
    return dot_general(lhs, rhs, (((ln - 1,), (rn - 2,)), (batch, batch)), precision=precision)
