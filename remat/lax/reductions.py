"""Reductions (reduce_sum/max/min/prod/and/or/xor, argmax/argmin) and cumulative ops (cumsum,
cumprod, cummax, cummin, cumlogsumexp) — each with its impl, abstract eval, JVP, transpose and
batching rules.

Reductions take ``axes``, a sorted tuple of distinct nonnegative axes (negative axes are an
error, as in ``jax.lax``). The JVPs of ``reduce_prod`` and of the cumulative ops are built from
products of pairs (a tree, or an associative scan written with pad/reshape/concatenate), so
they are exact where the operand has zeros and can themselves be differentiated and transposed.
"""

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax import elementwise, rule_ops
from remat.lax.elementwise import (
    add,
    convert_element_type,
    div,
    eq,
    exp,
    log1p,
    mul,
    ne,
    neg,
    select,
    sub,
)
from remat.lax.shape import (
    broadcast_in_dim,
    concatenate,
    expand_dims,
    full,
    full_like,
    pad,
    reshape,
    rev,
    squeeze,
    transpose,
)
from remat.lax.standard import ANY, NUMBER, check_dtype, standard_primitive
from remat.runtime import registry

__all__ = [
    "argmax",
    "argmax_p",
    "argmin",
    "argmin_p",
    "cumlogsumexp",
    "cumlogsumexp_p",
    "cummax",
    "cummax_p",
    "cummin",
    "cummin_p",
    "cumprod",
    "cumprod_p",
    "cumsum",
    "cumsum_p",
    "reduce_and",
    "reduce_and_p",
    "reduce_max",
    "reduce_max_p",
    "reduce_min",
    "reduce_min_p",
    "reduce_or",
    "reduce_or_p",
    "reduce_prod",
    "reduce_prod_p",
    "reduce_sum",
    "reduce_sum_p",
    "reduce_xor",
    "reduce_xor_p",
]


# --- shared shape logic ----------------------------------------------------------------------


def _check_axes(x, axes):
    if len(axes) != len(set(axes)):
        raise ValueError(f"duplicate value in 'axes' of reduction: {axes}")
    if not all(0 <= a < x.ndim for a in axes):
        raise ValueError(f"reduction axes {axes} contains out-of-bounds indices for "
                         f"{x.str_short()}.")


def _reduced_shape(x, axes):
    return tuple(d for i, d in enumerate(x.shape) if i not in axes)


def _kept_dims(ndim, axes):
    return tuple(i for i in range(ndim) if i not in axes)


def _reduce_abstract_eval(name, accepted, keep_weak=True):
    def abstract_eval(x, axes):
        check_dtype(name, x, accepted)
        _check_axes(x, axes)
        return ShapedArray(_reduced_shape(x, axes), x.dtype, x.weak_type and keep_weak)

    return abstract_eval


def _canonical_axes(axes):
    """``axes`` as the sorted tuple of ints that the primitives take; duplicates are kept so
    that the abstract eval reports them."""
    axes = tuple(int(a) for a in (axes if isinstance(axes, (tuple, list)) else (axes,)))
    return tuple(sorted(axes)) if len(set(axes)) == len(axes) else axes


def _reducer_batcher(prim):
    """Reductions of a batched operand: shift the axes past the batch dim."""

    def rule(vals, dims, axes, **params):
        (x,), (d,) = vals, dims
        moved = tuple(a + (a >= d) for a in axes)
        out_dim = d - sum(a < d for a in axes)
        return prim.bind(x, axes=moved, **params), out_dim

    batching.primitive_batchers[prim] = rule


# --- impls -----------------------------------------------------------------------------------


def _reduce_impl(np_reduce, identity):
    """A NumPy reduction in the operand's dtype; empty reductions give the monoid identity."""

    def impl(x, axes):
        if x.size == 0:  # an empty reduced axis, or an empty result
            return np.full(_reduced_shape(x, axes), identity(x.dtype), dtype=x.dtype)
        return np.asarray(np_reduce(x, axes)).astype(x.dtype, copy=False)

    return impl


def _lowest(dtype):
    if dtypes.kind(dtype) == "b":
        return False
    if dtypes.kind(dtype) in "iu":
        return dtypes.iinfo(dtype).min
    return -np.inf


def _highest(dtype):
    if dtypes.kind(dtype) == "b":
        return True
    if dtypes.kind(dtype) in "iu":
        return dtypes.iinfo(dtype).max
    return np.inf


def _all_ones(dtype):
    kind = dtypes.kind(dtype)
    return True if kind == "b" else dtypes.iinfo(dtype).max if kind == "u" else -1


def _sum(x, axes):
    return np.add.reduce(x, axis=axes, dtype=x.dtype)


def _prod(x, axes):
    return np.multiply.reduce(x, axis=axes, dtype=x.dtype)


reduce_sum_p = standard_primitive("reduce_sum", _reduce_impl(_sum, lambda d: 0),
                                  _reduce_abstract_eval("reduce_sum", NUMBER))
reduce_prod_p = standard_primitive("reduce_prod", _reduce_impl(_prod, lambda d: 1),
                                   _reduce_abstract_eval("reduce_prod", NUMBER))
reduce_max_p = standard_primitive(
    "reduce_max", _reduce_impl(lambda x, axes: np.max(x, axis=axes), _lowest),
    _reduce_abstract_eval("reduce_max", ANY))
reduce_min_p = standard_primitive(
    "reduce_min", _reduce_impl(lambda x, axes: np.min(x, axis=axes), _highest),
    _reduce_abstract_eval("reduce_min", ANY))


def _logical_abstract_eval(x, axes):
    if dtypes.kind(x.dtype) not in "biu":
        raise TypeError(f"logical reduction requires operand dtype bool or int, got "
                        f"{x.dtype.name}.")
    _check_axes(x, axes)
    return ShapedArray(_reduced_shape(x, axes), x.dtype)


reduce_and_p = standard_primitive(
    "reduce_and", _reduce_impl(lambda x, axes: np.bitwise_and.reduce(x, axis=axes), _all_ones),
    _logical_abstract_eval)
reduce_or_p = standard_primitive(
    "reduce_or", _reduce_impl(lambda x, axes: np.bitwise_or.reduce(x, axis=axes),
                              lambda d: False if dtypes.kind(d) == "b" else 0),
    _logical_abstract_eval)

reduce_xor_p = standard_primitive(
    "reduce_xor", _reduce_impl(lambda x, axes: np.bitwise_xor.reduce(x, axis=axes),
                               lambda d: False if dtypes.kind(d) == "b" else 0),
    _logical_abstract_eval)

_SUMMED_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))


def _reduce_sum_source(eqn, ins):
    """A sum of a non-empty array into an array: the impl's own NumPy call (a loop kernel's
    shapes are known when it is written; the impl checks them at every call)."""
    x, out = eqn.invars[0].aval, eqn.outvars[0].aval
    if eqn.primitive.impl is not _sum_impl or not out.shape or not x.size or \
            x.dtype not in _SUMMED_DTYPES:
        return None
    return f"np.add.reduce({ins[0]}, axis={tuple(eqn.params['axes'])}, dtype=np.{x.dtype.name})"


_sum_impl = reduce_sum_p.impl
registry.source_forms[reduce_sum_p] = _reduce_sum_source

for _p in (reduce_sum_p, reduce_prod_p, reduce_max_p, reduce_min_p, reduce_and_p, reduce_or_p,
           reduce_xor_p):
    _reducer_batcher(_p)
ad.defjvp_zero(reduce_and_p)
ad.defjvp_zero(reduce_or_p)
ad.defjvp_zero(reduce_xor_p)


# --- reduce_sum: linear ----------------------------------------------------------------------


def _reduce_sum_transpose(ct, x, axes):
    shape = x.aval.shape
    return [broadcast_in_dim(ct, shape, _kept_dims(len(shape), axes))]


ad.deflinear2(reduce_sum_p, _reduce_sum_transpose)


# --- reduce_max / reduce_min: the gradient goes to the chosen locations, shared by ties --------


def _chooser_jvp(g, ans, x, axes):
    shape = core.get_aval(x).shape
    dtype = core.get_aval(g).dtype
    at_choice = eq(x, broadcast_in_dim(ans, shape, _kept_dims(len(shape), axes)))
    mask = convert_element_type(at_choice, dtype)
    counts = reduce_sum(mask, axes)
    return div(reduce_sum(mul(g, mask), axes), counts)


ad.defjvp2(reduce_max_p, _chooser_jvp)
ad.defjvp2(reduce_min_p, _chooser_jvp)


# --- reduce_prod: a tree of pairwise products ------------------------------------------------


def _reduce_prod_jvp(primals, tangents, axes):
    """The product rule applied to a balanced tree of pairwise products: exact at zeros (no
    division by the operand), linear in the tangent, and differentiable again."""
    (x,), (t,) = primals, tangents
    out = reduce_prod_p.bind(x, axes=axes)
    if type(t) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    aval = core.get_aval(x)
    kept = _kept_dims(aval.ndim, axes)
    kept_shape = tuple(aval.shape[d] for d in kept)
    n = int(np.prod([aval.shape[a] for a in axes], dtype=np.int64))
    if n == 0:
        return out, full(kept_shape, 0, core.get_aval(t).dtype)
    perm = kept + tuple(axes)
    x = reshape(transpose(x, perm), kept_shape + (n,))
    t = reshape(transpose(t, perm), kept_shape + (n,))
    last = len(kept_shape)
    while n > 1:
        if n % 2:
            x = _extend(x, last, 1, 1)
            t = _extend(t, last, 1, 0)
            n += 1
        x = reshape(x, kept_shape + (n // 2, 2))
        t = reshape(t, kept_shape + (n // 2, 2))
        # d(a*b) = da*b + a*db: each tangent meets the other member of its pair
        t = reduce_sum(mul(t, rev(x, (last + 1,))), (last + 1,))
        x = reduce_prod(x, (last + 1,))
        n //= 2
    return out, reshape(t, kept_shape)


ad.primitive_jvps[reduce_prod_p] = _reduce_prod_jvp


# --- argmax / argmin -------------------------------------------------------------------------


def _argminmax_abstract_eval(name):
    def abstract_eval(x, axes, index_dtype):
        if len(axes) != 1:
            raise TypeError(f"{name} takes exactly one axis, got axes={axes}")
        (axis,) = axes
        if not 0 <= axis < x.ndim:
            raise ValueError(f"Invalid axis {axis} for operand shape {x.shape}")
        if dtypes.kind(x.dtype) == "c":  # JAX's comparisons have no order for complex values
            raise TypeError(f"{name} does not accept dtype {x.dtype.name}. Accepted dtypes "
                            f"are subtypes of integer, floating, bool.")
        if x.shape[axis] < 1:
            raise ValueError(f"argmin and argmax require non-empty reduced dimension. "
                             f"operand.shape={x.shape} axis={axis}")
        if dtypes.kind(np.dtype(index_dtype)) not in "iu":
            raise TypeError(f"index_dtype must be an integer type, but got "
                            f"{np.dtype(index_dtype).name}")
        return ShapedArray(_reduced_shape(x, axes), index_dtype)

    return abstract_eval


# np.argmax / np.argmin return the first NaN if there is one, else the first extremum: JAX's
# semantics (NaN counts as both the max and the min).
argmax_p = standard_primitive(
    "argmax", lambda x, axes, index_dtype: np.argmax(x, axis=axes[0]).astype(index_dtype),
    _argminmax_abstract_eval("argmax"))
argmin_p = standard_primitive(
    "argmin", lambda x, axes, index_dtype: np.argmin(x, axis=axes[0]).astype(index_dtype),
    _argminmax_abstract_eval("argmin"))
for _p in (argmax_p, argmin_p):
    _reducer_batcher(_p)
    ad.defjvp_zero(_p)


# --- cumulative ops --------------------------------------------------------------------------


def _cumulative_abstract_eval(name):
    def abstract_eval(x, axis, reverse):
        check_dtype(name, x, NUMBER)
        if axis < 0:
            raise ValueError(f"{name} does not allow negative axes, got axis={axis}")
        if axis >= x.ndim:
            raise ValueError(f"axis {axis} is out of bounds for array of shape {x.shape}")
        return x

    return abstract_eval


def _cumulative_impl(accumulate):
    def impl(x, axis, reverse):
        if x.shape[axis] == 0:
            return x
        if reverse:
            x = np.flip(x, axis)
        with np.errstate(all="ignore"):
            out = accumulate(x, axis).astype(x.dtype, copy=False)
        return np.flip(out, axis) if reverse else out

    return impl


cumsum_p = standard_primitive(
    "cumsum", _cumulative_impl(lambda x, axis: np.cumsum(x, axis=axis, dtype=x.dtype)),
    _cumulative_abstract_eval("cumsum"))
cumprod_p = standard_primitive(
    "cumprod", _cumulative_impl(lambda x, axis: np.cumprod(x, axis=axis, dtype=x.dtype)),
    _cumulative_abstract_eval("cumprod"))
cummax_p = standard_primitive(
    "cummax", _cumulative_impl(lambda x, axis: np.maximum.accumulate(x, axis=axis)),
    _cumulative_abstract_eval("cummax"))
cummin_p = standard_primitive(
    "cummin", _cumulative_impl(lambda x, axis: np.minimum.accumulate(x, axis=axis)),
    _cumulative_abstract_eval("cummin"))


def _cumlogsumexp_abstract_eval(x, axis, reverse):
    check_dtype("cumlogsumexp", x, ("floating",))
    return _cumulative_abstract_eval("cumlogsumexp")(x, axis, reverse)


cumlogsumexp_p = standard_primitive(
    "cumlogsumexp", _cumulative_impl(lambda x, axis: np.logaddexp.accumulate(x, axis=axis)),
    _cumlogsumexp_abstract_eval)


def _cumulative_batcher(prim):
    def rule(vals, dims, axis, reverse):
        (x,), (d,) = vals, dims
        return prim.bind(x, axis=axis + (axis >= d), reverse=reverse), d

    batching.primitive_batchers[prim] = rule


for _p in (cumsum_p, cumprod_p, cummax_p, cummin_p, cumlogsumexp_p):
    _cumulative_batcher(_p)

ad.deflinear(cumsum_p, lambda ct, axis, reverse: [cumsum(ct, axis, not reverse)])


# Slicing-free helpers along one axis, written with pad (negative padding crops), reshape and
# concatenate, so the scan below needs only shape primitives (and is transposable).


def _crop(x, axis, lo, hi):
    """``x`` without its first ``lo`` and last ``hi`` entries along ``axis``."""
    if lo == hi == 0:
        return x
    config = [(0, 0, 0)] * core.get_aval(x).ndim
    config[axis] = (-lo, -hi, 0)
    return pad(x, full((), 0, core.get_aval(x).dtype), config)


def _extend(x, axis, hi, value):
    """``x`` with ``hi`` entries equal to ``value`` appended along ``axis``."""
    config = [(0, 0, 0)] * core.get_aval(x).ndim
    config[axis] = (0, hi, 0)
    return pad(x, full((), value, core.get_aval(x).dtype), config)


def _length(x, axis):
    return core.get_aval(x).shape[axis]


def _even_odd(x, axis):
    """The entries of ``x`` at even and at odd positions along ``axis``."""
    shape = core.get_aval(x).shape
    n = shape[axis]
    if n % 2:
        x = _extend(x, axis, 1, 0)
    half = (n + 1) // 2
    pairs = reshape(x, shape[:axis] + (half, 2) + shape[axis + 1:])
    even = squeeze(_crop(pairs, axis + 1, 0, 1), (axis + 1,))
    odd = squeeze(_crop(pairs, axis + 1, 1, 0), (axis + 1,))
    return even, _crop(odd, axis, 0, n % 2)


def _interleave(even, odd, axis):
    """Inverse of ``_even_odd``: ``even`` has as many entries as ``odd`` or one more."""
    extra = _length(even, axis) - _length(odd, axis)
    if extra:
        odd = _extend(odd, axis, 1, 0)
    shape = core.get_aval(even).shape
    both = concatenate([expand_dims(even, (axis + 1,)),
                            expand_dims(odd, (axis + 1,))], axis + 1)
    out = reshape(both, shape[:axis] + (2 * shape[axis],) + shape[axis + 1:])
    return _crop(out, axis, 0, extra)


def _associative_scan(fn, elems, axis):
    """Inclusive prefix combination of the tuples ``elems`` (arrays of one shape) along
    ``axis``, for an associative ``fn(left_elems, right_elems) -> elems``: combine neighbouring
    pairs, scan the half-length result recursively, then fill in the even positions."""
    n = _length(elems[0], axis)
    if n < 2:
        return elems
    evens, odds = zip(*(_even_odd(x, axis) for x in elems))
    reduced = fn([_crop(e, axis, 0, n % 2) for e in evens], list(odds))
    odd_out = _associative_scan(fn, reduced, axis)
    # position 2k (k >= 1) is the prefix at 2k-1 combined with entry 2k
    lefts = odd_out if n % 2 else [_crop(o, axis, 0, 1) for o in odd_out]
    rest = fn(lefts, [_crop(e, axis, 1, 0) for e in evens])
    even_out = [concatenate([_crop(e, axis, 0, _length(e, axis) - 1), r], axis)
                for e, r in zip(evens, rest)]
    return [_interleave(e, o, axis) for e, o in zip(even_out, odd_out)]


def _scan_jvp(prim, fn, make_elems, finish):
    """A cumulative op's JVP from an associative scan over (primal, tangent, ...) tuples."""

    def jvp(primals, tangents, axis, reverse):
        (x,), (t,) = primals, tangents
        out = prim.bind(x, axis=axis, reverse=reverse)
        if type(t) is ad.Zero:
            return out, ad.Zero.from_primal_value(out)
        elems = make_elems(x, t)
        if reverse:
            elems = [rev(e, (axis,)) for e in elems]
        result = _associative_scan(fn, elems, axis)
        if reverse:
            result = [rev(e, (axis,)) for e in result]
        return out, finish(result)

    ad.primitive_jvps[prim] = jvp


def _prod_combine(left, right):
    (a, ta), (b, tb) = left, right
    return [mul(a, b), add(mul(ta, b), mul(a, tb))]


_scan_jvp(cumprod_p, _prod_combine, lambda x, t: [x, t], lambda r: r[1])


def _chooser_combine(choose):
    """Running extremum with the sum of the tangents at the positions that attain it and their
    count; the tangent is their mean, so ties share it as in ``reduce_max``'s rule."""

    def combine(left, right):
        (a, sa, ca), (b, sb, cb) = left, right
        m = choose(a, b)
        at_a, at_b = eq(a, m), eq(b, m)
        zero = full_like(sa, 0)
        return [m,
                add(select(at_a, sa, zero), select(at_b, sb, zero)),
                add(select(at_a, ca, zero), select(at_b, cb, zero))]

    return combine


def _chooser_elems(x, t):
    dtype = core.get_aval(t).dtype
    return [x, t, full(core.get_aval(x).shape, 1, dtype)]


_scan_jvp(cummax_p, _chooser_combine(lambda a, b: elementwise.max(a, b)), _chooser_elems,
          lambda r: div(r[1], r[2]))
_scan_jvp(cummin_p, _chooser_combine(lambda a, b: elementwise.min(a, b)), _chooser_elems,
          lambda r: div(r[1], r[2]))


def _logaddexp(a, b):
    """``log(exp(a) + exp(b))`` without overflow; NaN where ``a - b`` is (equal infinities
    give ``a + b``)."""
    delta = sub(a, b)
    stable = add(elementwise.max(a, b), log1p(exp(neg(elementwise.abs(delta)))))
    return select(ne(delta, delta), add(a, b), stable)


def _finite_or_zero(x):
    return select(eq(x, full_like(x, np.inf)), full_like(x, 0), x)


def _logsumexp_combine(left, right):
    """``logaddexp`` and its tangent ``ta * exp(a - out) + tb * exp(b - out)`` (as JAX's,
    with +inf replaced by 0 in the exponents)."""
    (a, ta), (b, tb) = left, right
    out = _logaddexp(a, b)
    o = _finite_or_zero(out)
    return [out, add(mul(ta, exp(sub(_finite_or_zero(a), o))),
                         mul(tb, exp(sub(_finite_or_zero(b), o))))]


_scan_jvp(cumlogsumexp_p, _logsumexp_combine, lambda x, t: [x, t], lambda r: r[1])


# --- the lax functions -----------------------------------------------------------------------


def _reduce_fn(prim):
    def fn(operand, axes):
        return prim.bind(operand, axes=_canonical_axes(axes))

    fn.__name__ = prim.name
    fn.__doc__ = f"``{prim.name}`` of ``operand`` over ``axes`` (nonnegative ints)."
    return fn


reduce_sum = _reduce_fn(reduce_sum_p)
reduce_prod = _reduce_fn(reduce_prod_p)
reduce_max = _reduce_fn(reduce_max_p)
reduce_min = _reduce_fn(reduce_min_p)
reduce_and = _reduce_fn(reduce_and_p)
reduce_or = _reduce_fn(reduce_or_p)
reduce_xor = _reduce_fn(reduce_xor_p)


def argmax(operand, axis, index_dtype):
    """Index of the first maximum along ``axis`` (a NaN counts as the maximum)."""
    return argmax_p.bind(operand, axes=(int(axis),),
                         index_dtype=dtypes.canonicalize_dtype(index_dtype))


def argmin(operand, axis, index_dtype):
    """Index of the first minimum along ``axis`` (a NaN counts as the minimum)."""
    return argmin_p.bind(operand, axes=(int(axis),),
                         index_dtype=dtypes.canonicalize_dtype(index_dtype))


def _cumulative_fn(prim, what):
    def fn(operand, axis=0, reverse=False):
        return prim.bind(operand, axis=int(axis), reverse=bool(reverse))

    fn.__name__ = prim.name
    fn.__doc__ = f"Cumulative {what} along ``axis`` (from the end if ``reverse``)."
    return fn


cumsum = _cumulative_fn(cumsum_p, "sum")
cumprod = _cumulative_fn(cumprod_p, "product")
cummax = _cumulative_fn(cummax_p, "maximum")
cummin = _cumulative_fn(cummin_p, "minimum")
cumlogsumexp = _cumulative_fn(cumlogsumexp_p, "log-sum-exp")

del _p


rule_ops.provide(reduce_sum=reduce_sum)


