"""Windowed reductions: ``reduce_window`` (the sum, max and min primitives, and a generic one
carrying a user computation), and the select-and-gather / select-and-scatter primitives that
differentiate max and min pooling — each with its impl, abstract eval, JVP, transpose and
batching rules.

The impls base-dilate and pad the operand with the reduction's identity in one allocation, and
``sliding_window_view`` exposes every window as a strided view (window strides and window
dilation are slices of it). Sums and extrema reduce that view over its window axes; the
selecting ops and the generic reduction loop over the positions of one window (not over the
outputs), each step a whole-array operation.

Derivatives follow JAX: the JVP of a windowed max (min) gathers, per window, the tangent of
the first element that ``ge`` (``le``) selects (``select_and_gather_add``); its transpose
scatters cotangents back to those elements (``select_and_scatter_add``), and the two are each
other's transposes, so pooling differentiates to any order in both modes. A generic
computation differentiates through the reduction written in lax operations (pads, strided
slices and the computation), in both modes too.
"""

import operator

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax import combiners, elementwise, slicing
from remat.lax import shape as lax_shape
from remat.lax.convolution import padtype_to_pads
from remat.lax.elementwise import add, ge_p, le_p
from remat.lax.gather_scatter_common import ScatterDimensionNumbers
from remat.lax.scatters import scatter_add
from remat.lax.shape import broadcast_in_dim, expand_dims, iota, pad, reshape
from remat.lax.standard import standard_primitive
from remat.tree_util import tree_flatten, tree_unflatten

__all__ = [
    "reduce_window",
    "reduce_window_max_p",
    "reduce_window_min_p",
    "reduce_window_p",
    "reduce_window_shape_tuple",
    "reduce_window_sum_p",
    "select_and_gather_add_p",
    "select_and_scatter_add_p",
    "select_and_scatter_p",
]


# --- shapes and parameter checks -------------------------------------------------------------


def _dilate_shape(shape, dilation):
    if not all(d > 0 for d in dilation):
        raise TypeError(f"All dilations must be positive, got {tuple(dilation)}.")
    return tuple(max(1 + r * (d - 1), 0) for d, r in zip(shape, dilation))


def reduce_window_shape_tuple(operand_shape, window_dimensions, window_strides, padding,
                              base_dilation=None, window_dilation=None):
    """The output shape of a windowed reduction: ``(padded - window) // stride + 1`` per
    dimension (0 where the window does not fit), after base and window dilation."""
    if base_dilation is not None:
        operand_shape = _dilate_shape(operand_shape, base_dilation)
    if window_dilation is not None:
        window_dimensions = _dilate_shape(window_dimensions, window_dilation)
    padded = [d + lo + hi for d, (lo, hi) in zip(operand_shape, padding)]
    return tuple(max((p - w) // s + 1, 0)
                 for p, w, s in zip(padded, window_dimensions, window_strides))


def _check_shapelike(name, arg, obj, positive=False):
    if not isinstance(obj, (tuple, list, np.ndarray)):
        raise TypeError(f"{name} {arg} must be of type tuple/list/ndarray, got {type(obj)}.")
    if not all(isinstance(d, (int, np.integer)) for d in obj):
        raise TypeError(f"{name} {arg} must have every element be an integer type, got "
                        f"{tuple(map(type, obj))}.")
    bound, what = (1, "strictly positive") if positive else (0, "nonnegative")
    if not all(d >= bound for d in obj):
        raise TypeError(f"{name} {arg} must have every element be {what}, got {obj}.")


def _window_shape(name, operand, window_dimensions, window_strides, padding, base_dilation,
                  window_dilation):
    """JAX's shape rule of the windowed reductions (TypeErrors naming the argument)."""
    _check_shapelike(name, "window_dimensions", window_dimensions, positive=True)
    _check_shapelike(name, "window_strides", window_strides, positive=True)
    _check_shapelike(name, "base_dilation", base_dilation)
    _check_shapelike(name, "window_dilation", window_dilation)
    if operand.ndim != len(window_dimensions):
        raise TypeError(f"{name} got the wrong number of window_dimensions for operand: got "
                        f"operand shape {operand.shape} with window_dimensions "
                        f"{window_dimensions}.")
    for arg, seq in (("window_strides", window_strides), ("base_dilation", base_dilation),
                     ("window_dilation", window_dilation)):
        if len(seq) != len(window_dimensions):
            raise TypeError(f"{name} got inconsistent {arg} and window_dimensions: got {arg} "
                            f"{seq} and window_dimensions {window_dimensions}.")
    if len(padding) != len(window_dimensions):
        raise TypeError(f"{name} got inconsistent padding and window_dimensions: got padding "
                        f"{padding} and window_dimensions {window_dimensions}.")
    return reduce_window_shape_tuple(operand.shape, window_dimensions, window_strides, padding,
                                     base_dilation, window_dilation)


# --- NumPy helpers: dilated and padded operands, windows as strided views --------------------


def _dilate_pad(x, fill, padding, base_dilation):
    """``x`` base-dilated (the holes hold ``fill``) and padded with ``fill`` (negative pads
    crop), in one allocation; ``x`` itself when there is nothing to do."""
    if all(r == 1 for r in base_dilation) and all(lo == hi == 0 for lo, hi in padding):
        return x
    dilated = tuple(max(1 + r * (n - 1), 0) for n, r in zip(x.shape, base_dilation))
    grown = tuple(max(lo, 0) + n + max(hi, 0) for n, (lo, hi) in zip(dilated, padding))
    out = np.full(grown, fill, x.dtype)
    out[tuple(slice(max(lo, 0), max(lo, 0) + n, r)
              for n, r, (lo, _) in zip(dilated, base_dilation, padding))] = x
    return out[_crop(grown, padding)]


def _crop(grown, padding):
    return tuple(slice(max(-lo, 0), max(g - max(-hi, 0), max(-lo, 0)))
                 for g, (lo, hi) in zip(grown, padding))


def _undilate_unpad(y, shape, padding, base_dilation):
    """The entries of ``y`` (shaped like ``_dilate_pad``'s result) that hold the operand's
    elements: the inverse of ``_dilate_pad`` on them."""
    dilated = tuple(max(1 + r * (n - 1), 0) for n, r in zip(shape, base_dilation))
    grown = tuple(max(lo, 0) + n + max(hi, 0) for n, (lo, hi) in zip(dilated, padding))
    full = np.zeros(grown, y.dtype)
    full[_crop(grown, padding)] = y
    return full[tuple(slice(max(lo, 0), max(lo, 0) + n, r)
                      for n, r, (lo, _) in zip(dilated, base_dilation, padding))]


def _windows(xp, out_shape, window_dimensions, window_strides, window_dilation,
             writeable=False):
    """A view of ``xp`` of shape ``out_shape + window_dimensions``: element ``(o, k)`` is
    ``xp[o * stride + k * window_dilation]``."""
    span = tuple(1 + r * (k - 1) for k, r in zip(window_dimensions, window_dilation))
    if xp.ndim:  # the bytes are windowed: NumPy cannot rebuild float8_e5m2 from its '<f1'
        raw = np.dtype((np.void, xp.dtype.itemsize))
        view = sliding_window_view(xp.view(raw), span, writeable=writeable).view(xp.dtype)
    else:
        view = xp
    index = tuple(slice(0, o * s, s) for o, s in zip(out_shape, window_strides)) + \
        tuple(slice(None, None, r) for r in window_dilation)
    return view[index] if index else view


def _positions(window_dimensions):
    """The index tuples of one window's elements, in row-major order."""
    return [(Ellipsis,) + idx for idx in np.ndindex(*window_dimensions)]


def _size(shape):
    return int(np.prod(shape, dtype=np.int64))


# --- reduce_window_sum / max / min -----------------------------------------------------------


def _monoid_abstract_eval(name, numbers_only):
    def abstract_eval(x, *, window_dimensions, window_strides, padding, base_dilation,
                      window_dilation):
        if numbers_only and dtypes.kind(x.dtype) not in "iufc":
            raise TypeError(f"operand to {name} must have a number dtype, got "
                            f"{x.dtype.name}")
        shape = _window_shape(name, x, window_dimensions, window_strides, padding,
                              base_dilation, window_dilation)
        return ShapedArray(shape, x.dtype, x.weak_type)

    return abstract_eval


def _monoid_impl(reduce, identity):
    def impl(x, *, window_dimensions, window_strides, padding, base_dilation,
             window_dilation):
        out_shape = reduce_window_shape_tuple(x.shape, window_dimensions, window_strides,
                                              padding, base_dilation, window_dilation)
        if _size(out_shape) == 0:
            return np.full(out_shape, identity(x.dtype), x.dtype)
        xp = _dilate_pad(x, identity(x.dtype), padding, base_dilation)
        view = _windows(xp, out_shape, window_dimensions, window_strides, window_dilation)
        axes = tuple(range(x.ndim, 2 * x.ndim))
        return np.asarray(reduce(view, axes)).astype(x.dtype, copy=False)

    return impl


reduce_window_sum_p = standard_primitive(
    "reduce_window_sum",
    _monoid_impl(lambda v, axes: np.add.reduce(v, axis=axes, dtype=v.dtype), lambda d: 0),
    _monoid_abstract_eval("reduce_window_sum", True))
reduce_window_max_p = standard_primitive(
    "reduce_window_max",
    _monoid_impl(lambda v, axes: np.max(v, axis=axes), combiners.max_identity),
    _monoid_abstract_eval("reduce_window_max", False))
reduce_window_min_p = standard_primitive(
    "reduce_window_min",
    _monoid_impl(lambda v, axes: np.min(v, axis=axes), combiners.min_identity),
    _monoid_abstract_eval("reduce_window_min", False))


def _vjp_lhs_padding(in_shape, window_dimensions, window_strides, out_shape, padding,
                     base_dilation, window_dilation):
    """Pads of the stride-dilated cotangent so that a stride-``base_dilation`` window sum
    over it gives the operand's cotangent (as a convolution's lhs transpose)."""
    in_d = _dilate_shape(in_shape, base_dilation)
    win_d = _dilate_shape(window_dimensions, window_dilation)
    out_d = _dilate_shape(out_shape, window_strides)
    before = [w - lo - 1 for w, (lo, _) in zip(win_d, padding)]
    after = [i + w - 1 - o - b for i, w, o, b in zip(in_d, win_d, out_d, before)]
    return list(zip(before, after))


def _reduce_window_sum_transpose(ct, x, *, window_dimensions, window_strides, padding,
                                 base_dilation, window_dilation):
    in_shape = x.aval.shape
    ct_shape = core.get_aval(ct).shape
    pads = _vjp_lhs_padding(in_shape, window_dimensions, window_strides, ct_shape, padding,
                            base_dilation, window_dilation)
    config = [(lo, hi, s - 1) for (lo, hi), s in zip(pads, window_strides)]
    padded = pad(ct, lax_shape.full((), 0, core.get_aval(ct).dtype), config)
    ones = (1,) * len(in_shape)
    return [reduce_window_sum_p.bind(
        padded, window_dimensions=window_dimensions, window_strides=base_dilation,
        padding=((0, 0),) * len(in_shape), base_dilation=ones,
        window_dilation=window_dilation)]


def _insert_unit_window(params, bdim):
    """Window params with a size-1, stride-1 window over a new (batch) dimension ``bdim``."""
    def at(seq, value):
        return tuple(seq[:bdim]) + (value,) + tuple(seq[bdim:])

    out = dict(params)
    for name in ("window_dimensions", "window_strides", "base_dilation", "window_dilation"):
        if name in out:
            out[name] = at(out[name], 1)
    out["padding"] = at(out["padding"], (0, 0))
    return out


def _monoid_batcher(prim):
    def rule(vals, dims, **params):
        (x,), (d,) = vals, dims
        return prim.bind(x, **_insert_unit_window(params, d)), d

    batching.primitive_batchers[prim] = rule


for _p in (reduce_window_sum_p, reduce_window_max_p, reduce_window_min_p):
    _monoid_batcher(_p)
ad.deflinear2(reduce_window_sum_p, _reduce_window_sum_transpose)


def _chooser_jvp(select_prim):
    def rule(g, x, *, window_dimensions, window_strides, padding, base_dilation,
             window_dilation):
        return select_and_gather_add_p.bind(
            g, x, select_prim=select_prim, window_dimensions=window_dimensions,
            window_strides=window_strides, padding=padding, base_dilation=base_dilation,
            window_dilation=window_dilation)

    return rule


# --- select_and_gather_add: the tangent of each window's selected element --------------------


def _select_fill(select_prim, dtype):
    if select_prim is ge_p:
        return combiners.max_identity(dtype)
    return combiners.min_identity(dtype)


def _check_select_prim(name, select_prim):
    if select_prim not in (ge_p, le_p):
        raise TypeError(f"{name} select_prim must be ge_p or le_p, got {select_prim}")


def _select_and_gather_add_abstract_eval(tangents, operand, *, select_prim, window_dimensions,
                                         window_strides, padding, base_dilation,
                                         window_dilation):
    _check_select_prim("select_and_gather_add", select_prim)
    if tangents.shape != operand.shape:
        raise TypeError(f"select_and_gather_add tangents and operand shapes must match, got "
                        f"{tangents.shape} and {operand.shape}.")
    shape = _window_shape("select_and_gather_add", operand, window_dimensions,
                          window_strides, padding, base_dilation, window_dilation)
    return ShapedArray(shape, tangents.dtype, tangents.weak_type)


def _select_switches(select_prim, current, candidate):
    """Where a window scan moves from ``current`` to ``candidate``: where ``select`` does not
    keep the current element (XLA's select-and-scatter order: the first of equals stays)."""
    keep = np.greater_equal(current, candidate) if select_prim is ge_p else \
        np.less_equal(current, candidate)
    return ~keep


def _select_and_gather_add_impl(tangents, operand, *, select_prim, window_dimensions,
                                window_strides, padding, base_dilation, window_dilation):
    out_shape = reduce_window_shape_tuple(operand.shape, window_dimensions, window_strides,
                                          padding, base_dilation, window_dilation)
    if _size(out_shape) == 0:
        return np.zeros(out_shape, tangents.dtype)
    fill = _select_fill(select_prim, operand.dtype)
    xv = _windows(_dilate_pad(operand, fill, padding, base_dilation), out_shape,
                  window_dimensions, window_strides, window_dilation)
    tv = _windows(_dilate_pad(tangents, 0, padding, base_dilation), out_shape,
                  window_dimensions, window_strides, window_dilation)
    first, *rest = _positions(window_dimensions)
    best, out = xv[first], tv[first]
    for idx in rest:
        cand = xv[idx]
        switch = _select_switches(select_prim, best, cand)
        best = np.where(switch, cand, best)
        out = np.where(switch, tv[idx], out)
    return np.array(out, dtype=tangents.dtype)


select_and_gather_add_p = standard_primitive("select_and_gather_add",
                                             _select_and_gather_add_impl,
                                             _select_and_gather_add_abstract_eval)


def _select_and_gather_add_jvp(primals, tangents, **params):
    (t, x), (dt, _) = primals, tangents
    out = select_and_gather_add_p.bind(t, x, **params)
    if type(dt) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    return out, select_and_gather_add_p.bind(dt, x, **params)


def _select_and_gather_add_transpose(ct, t, x, *, select_prim, window_dimensions,
                                     window_strides, padding, base_dilation, window_dilation):
    assert ad.is_undefined_primal(t) and not ad.is_undefined_primal(x)
    if any(r != 1 for r in window_dilation):
        return [_scatter_to_selected(ct, x, t.aval, select_prim, window_dimensions,
                                     window_strides, padding, base_dilation,
                                     window_dilation), None]
    ndim = len(window_dimensions)
    dilated = any(r != 1 for r in base_dilation)
    if dilated:  # the holes of a base-dilated operand are never selected
        fill = lax_shape.full((), _select_fill(select_prim, core.get_aval(x).dtype),
                        core.get_aval(x).dtype)
        x = pad(x, fill, [(0, 0, r - 1) for r in base_dilation])
    out = select_and_scatter_add_p.bind(ct, x, select_prim=select_prim,
                                        window_dimensions=window_dimensions,
                                        window_strides=window_strides, padding=padding)
    if dilated:
        out = slicing.slice(out, (0,) * ndim, core.get_aval(out).shape, base_dilation)
    return [out, None]


def _scatter_to_selected(ct, x, t_aval, select_prim, window_dimensions, window_strides,
                         padding, base_dilation, window_dilation):
    """The transpose for a window-dilated selection: gather each window's selected position
    (as the 'tangent' ``1 + flat index``; 0 marks a window of padding only), then scatter-add
    the cotangents there."""
    shape = t_aval.shape
    n = _size(shape)
    index_dtype = dtypes.int64 if n >= 2 ** 31 - 1 else dtypes.int32
    positions = add(reshape(iota(index_dtype, n), shape),
                        lax_shape.full((), 1, index_dtype))
    chosen = select_and_gather_add_p.bind(
        positions, x, select_prim=select_prim, window_dimensions=window_dimensions,
        window_strides=window_strides, padding=padding, base_dilation=base_dilation,
        window_dilation=window_dilation)
    chosen = expand_dims(chosen, (core.get_aval(chosen).ndim,))
    dnums = ScatterDimensionNumbers(
        update_window_dims=(), inserted_window_dims=(0,),
        scatter_dims_to_operand_dims=(0,))
    flat = scatter_add(lax_shape.full((n + 1,), 0, t_aval.dtype), chosen, ct, dnums)
    return reshape(slicing.slice(flat, (1,), (n + 1,)), shape)


def _select_and_gather_add_batch(vals, dims, **params):
    size = batching.axis_size_of(vals, dims)
    t, x = (batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims))
    return select_and_gather_add_p.bind(t, x, **_insert_unit_window(params, 0)), 0


ad.primitive_jvps[select_and_gather_add_p] = _select_and_gather_add_jvp
ad.primitive_transposes[select_and_gather_add_p] = _select_and_gather_add_transpose
batching.primitive_batchers[select_and_gather_add_p] = _select_and_gather_add_batch
ad.defjvp(reduce_window_max_p, _chooser_jvp(ge_p))
ad.defjvp(reduce_window_min_p, _chooser_jvp(le_p))


# --- select_and_scatter_add: each window's source value added at its selected element --------


def _select_and_scatter_add_abstract_eval(source, operand, *, select_prim, window_dimensions,
                                          window_strides, padding):
    _check_select_prim("select_and_scatter_add", select_prim)
    ones = (1,) * len(window_dimensions)
    shape = _window_shape("select_and_scatter_add", operand, window_dimensions,
                          window_strides, padding, ones, ones)
    if source.shape != shape:
        raise TypeError(f"select_and_scatter_add source shape must be the window output "
                        f"shape {shape}, got {source.shape}.")
    return ShapedArray(operand.shape, source.dtype, source.weak_type)


def _select_and_scatter_add_impl(source, operand, *, select_prim, window_dimensions,
                                 window_strides, padding):
    ones = (1,) * operand.ndim
    out_shape = source.shape
    fill = _select_fill(select_prim, operand.dtype)
    xp = _dilate_pad(operand, fill, padding, ones)
    out = np.zeros(xp.shape, source.dtype)
    if _size(out_shape) and xp.size:
        xv = _windows(xp, out_shape, window_dimensions, window_strides, ones)
        positions = _positions(window_dimensions)
        best, choice = xv[positions[0]], np.zeros(out_shape, np.intp)
        for j, idx in enumerate(positions[1:], 1):
            cand = xv[idx]
            switch = _select_switches(select_prim, best, cand)
            best = np.where(switch, cand, best)
            choice[switch] = j
        ov = _windows(out, out_shape, window_dimensions, window_strides, ones, writeable=True)
        zero = np.zeros((), source.dtype)
        for j, idx in enumerate(positions):
            region = ov[idx]  # one element per window, so no two windows share an entry
            region += np.where(choice == j, source, zero)
    return _undilate_unpad(out, operand.shape, padding, ones)


select_and_scatter_add_p = standard_primitive("select_and_scatter_add",
                                              _select_and_scatter_add_impl,
                                              _select_and_scatter_add_abstract_eval)


def _select_and_scatter_add_jvp(primals, tangents, **params):
    (s, x), (ds, _) = primals, tangents
    out = select_and_scatter_add_p.bind(s, x, **params)
    if type(ds) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    return out, select_and_scatter_add_p.bind(ds, x, **params)


def _select_and_scatter_add_transpose(ct, s, x, *, select_prim, window_dimensions,
                                      window_strides, padding):
    assert ad.is_undefined_primal(s) and not ad.is_undefined_primal(x)
    ones = (1,) * len(window_dimensions)
    return [select_and_gather_add_p.bind(
        ct, x, select_prim=select_prim, window_dimensions=window_dimensions,
        window_strides=window_strides, padding=padding, base_dilation=ones,
        window_dilation=ones), None]


def _select_and_scatter_add_batch(vals, dims, **params):
    size = batching.axis_size_of(vals, dims)
    s, x = (batching.bdim_at_front(v, d, size) for v, d in zip(vals, dims))
    return select_and_scatter_add_p.bind(s, x, **_insert_unit_window(params, 0)), 0


ad.primitive_jvps[select_and_scatter_add_p] = _select_and_scatter_add_jvp
ad.primitive_transposes[select_and_scatter_add_p] = _select_and_scatter_add_transpose
batching.primitive_batchers[select_and_scatter_add_p] = _select_and_scatter_add_batch


# --- select_and_scatter: XLA's generic form, with select and scatter computations ------------


def _select_and_scatter_abstract_eval(operand, source, init_value, *, select_jaxpr,
                                      scatter_jaxpr, window_dimensions, window_strides,
                                      padding):
    ones = (1,) * len(window_dimensions)
    shape = _window_shape("select_and_scatter", operand, window_dimensions, window_strides,
                          padding, ones, ones)
    if source.shape != shape:
        raise TypeError(f"select_and_scatter source shape must be the window output shape "
                        f"{shape}, got {source.shape}.")
    if init_value.shape or init_value.dtype != source.dtype:
        raise TypeError(f"select_and_scatter init_value must be a scalar of the source's "
                        f"dtype {source.dtype.name}, got {init_value.str_short()}.")
    return ShapedArray(operand.shape, source.dtype)


def _select_and_scatter_impl(operand, source, init_value, *, select_jaxpr, scatter_jaxpr,
                             window_dimensions, window_strides, padding):
    ones = (1,) * operand.ndim
    out_shape = source.shape
    xp = _dilate_pad(operand, np.zeros((), operand.dtype), padding, ones)
    valid_p = _dilate_pad(np.ones(operand.shape, bool), False, padding, ones)
    out = np.full(xp.shape, init_value, source.dtype)
    if _size(out_shape) and xp.size:
        xv = _windows(xp, out_shape, window_dimensions, window_strides, ones)
        mv = _windows(valid_p, out_shape, window_dimensions, window_strides, ones)
        positions = _positions(window_dimensions)
        best, found = xv[positions[0]], mv[positions[0]]
        choice = np.zeros(out_shape, np.intp)
        for j, idx in enumerate(positions[1:], 1):  # padding is never selected
            cand, valid = xv[idx], mv[idx]
            keep, = combiners.apply_to_buffers(select_jaxpr, [best, cand])
            switch = valid & (~found | ~keep.astype(bool))
            best = np.where(switch, cand, best)
            choice[switch] = j
            found = found | valid
        ov = _windows(out, out_shape, window_dimensions, window_strides, ones, writeable=True)
        for j, idx in enumerate(positions):
            hit = found & (choice == j)
            if hit.any():
                region = ov[idx]
                combined, = combiners.apply_to_buffers(scatter_jaxpr, [region, source])
                region[...] = np.where(hit, combined, region)
    return _undilate_unpad(out, operand.shape, padding, ones)


select_and_scatter_p = standard_primitive("select_and_scatter", _select_and_scatter_impl,
                                          _select_and_scatter_abstract_eval)


def _select_and_scatter_batch(vals, dims, **params):
    (x, s, init), (dx, ds, dinit) = vals, dims
    if dinit is not batching.not_mapped:
        raise NotImplementedError("select_and_scatter batching is not implemented for "
                                  "init_value")
    size = batching.axis_size_of(vals, dims)
    x, s = batching.bdim_at_front(x, dx, size), batching.bdim_at_front(s, ds, size)
    return select_and_scatter_p.bind(x, s, init, **_insert_unit_window(params, 0)), 0


batching.primitive_batchers[select_and_scatter_p] = _select_and_scatter_batch


# --- reduce_window with a generic computation ------------------------------------------------


def _reduce_window_abstract_eval(*avals, jaxpr, window_dimensions, window_strides, padding,
                                 base_dilation, window_dilation):
    n = len(avals) // 2
    operands, inits = avals[:n], avals[n:]
    if any(o.dtype != i.dtype for o, i in zip(operands, inits)):
        raise TypeError(f"reduce_window got inconsistent dtypes for operands and "
                        f"init_values: got operand dtypes {[o.dtype for o in operands]} and "
                        f"init_value dtypes {[i.dtype for i in inits]}.")
    if any(i.shape for i in inits):
        raise TypeError(f"reduce_window expected init_values to be scalars but init_values "
                        f"have shapes {[i.shape for i in inits]}.")
    if len({o.shape for o in operands}) > 1:
        raise TypeError(f"reduce_window operands must have equal shapes, got "
                        f"{[o.shape for o in operands]}.")
    shape = _window_shape("reduce_window", operands[0], window_dimensions, window_strides,
                          padding, base_dilation, window_dilation)
    return [ShapedArray(shape, o.dtype) for o in operands]


def _reduce_window_impl(*args, jaxpr, window_dimensions, window_strides, padding,
                        base_dilation, window_dilation):
    n = len(args) // 2
    operands, inits = args[:n], args[n:]
    out_shape = reduce_window_shape_tuple(operands[0].shape, window_dimensions,
                                          window_strides, padding, base_dilation,
                                          window_dilation)
    acc = [np.broadcast_to(np.asarray(i, x.dtype), out_shape) for x, i in zip(operands, inits)]
    if _size(out_shape) == 0:
        return [np.array(a) for a in acc]
    views = [_windows(_dilate_pad(x, i, padding, base_dilation), out_shape, window_dimensions,
                      window_strides, window_dilation) for x, i in zip(operands, inits)]
    for idx in _positions(window_dimensions):
        acc = combiners.apply_to_buffers(jaxpr, acc + [v[idx] for v in views])
    return [np.array(a) for a in acc]


reduce_window_p = standard_primitive("reduce_window", _reduce_window_impl,
                                     _reduce_window_abstract_eval, multiple_results=True)


def _reduce_window_jvp(primals, tangents, *, jaxpr, **params):
    """The JVP of the reduction written in lax operations (``_reduce_window_decomposed``):
    its tangent part is built of pads, strided slices and the computation's own linearized
    primitives, so the generic reduce_window differentiates in reverse mode too."""
    n = len(primals) // 2
    return ad.jvp_flat(
        lambda *args: _reduce_window_decomposed(args[:n], args[n:], jaxpr, **params),
        primals, tangents)


def _reduce_window_decomposed(operands, inits, jaxpr, window_dimensions, window_strides,
                              padding, base_dilation, window_dilation):
    """The generic reduction in lax operations: pad (and base-dilate) with the init values,
    then combine one strided slice per window position into the accumulators."""
    shape = core.get_aval(operands[0]).shape
    out_shape = reduce_window_shape_tuple(shape, window_dimensions, window_strides, padding,
                                          base_dilation, window_dilation)
    acc = [broadcast_in_dim(i, out_shape, ()) for i in inits]
    if _size(out_shape) == 0:
        return acc
    config = [(lo, hi, r - 1) for (lo, hi), r in zip(padding, base_dilation)]
    padded = [pad(x, i, config) for x, i in zip(operands, inits)]
    for idx in np.ndindex(*window_dimensions):
        start = [k * r for k, r in zip(idx, window_dilation)]
        limit = [s + (o - 1) * st + 1 for s, o, st in zip(start, out_shape, window_strides)]
        acc = combiners.apply(jaxpr, acc + [slicing.slice(p, start, limit, window_strides)
                                            for p in padded])
    return acc


def _reduce_window_batch(vals, dims, *, jaxpr, **params):
    n = len(vals) // 2
    if any(d is not batching.not_mapped for d in dims[n:]):  # per-example init values
        return combiners.batch_decomposition(
            lambda *args: _reduce_window_decomposed(args[:n], args[n:], jaxpr, **params),
            vals, dims)
    size = batching.axis_size_of(vals, dims)
    operands = [batching.bdim_at_front(x, d, size) for x, d in zip(vals[:n], dims[:n])]
    outs = reduce_window_p.bind(*operands, *vals[n:], jaxpr=jaxpr,
                                **_insert_unit_window(params, 0))
    return outs, [0] * n


ad.primitive_jvps[reduce_window_p] = _reduce_window_jvp
batching.primitive_batchers[reduce_window_p] = _reduce_window_batch


# --- the lax function ------------------------------------------------------------------------


def _is_concrete_scalar(x):
    if core.get_aval(x).shape:
        return False
    return not isinstance(x, core.Tracer) or x.concrete_value() is not None


def _monoid_primitive(computation, init):
    """The sum/max/min primitive that ``reduce_window(operand, init, computation)`` is, when
    ``computation`` is ``lax.add``/``max``/``min`` and ``init`` its identity (as JAX)."""
    if computation not in (add, elementwise.max, elementwise.min) or not _is_concrete_scalar(init):
        return None
    value = np.asarray(core.concrete_or_error(init))
    dtype = core.get_aval(init).dtype
    if computation is add:
        return reduce_window_sum_p if value == 0 else None
    if computation is elementwise.max:
        return reduce_window_max_p if value == combiners.max_identity(dtype) else None
    return reduce_window_min_p if value == combiners.min_identity(dtype) else None


def _as_ints(name, arg, values):
    try:
        return tuple(operator.index(v) for v in values)
    except TypeError:
        raise TypeError(f"{name} {arg} must have every element be an integer type, got "
                        f"{tuple(map(type, values))}.") from None


def reduce_window(operand, init_value, computation, window_dimensions, window_strides=None,
                  padding="VALID", base_dilation=None, window_dilation=None):
    """Reduce each (strided, dilated, padded) window of ``operand`` (an array or a pytree of
    arrays of one shape) with ``computation``, starting from ``init_value``; padding is
    ``'VALID'``, ``'SAME'``, ``'SAME_LOWER'`` or ``(low, high)`` pairs."""
    flat_operands, tree = tree_flatten(operand)
    flat_inits, init_tree = tree_flatten(init_value)
    if tree != init_tree:
        raise ValueError(f"Operands must have the same tree structure as init_values: {tree} "
                         f"vs. {init_tree}")
    if not flat_operands:
        raise ValueError("reduce_window must have at least one operand.")
    window_dimensions = _as_ints("reduce_window", "window_dimensions", window_dimensions)
    nd = len(window_dimensions)
    window_strides = (1,) * nd if window_strides is None else \
        _as_ints("reduce_window", "window_strides", window_strides)
    base_dilation = (1,) * nd if base_dilation is None else \
        _as_ints("reduce_window", "base_dilation", base_dilation)
    window_dilation = (1,) * nd if window_dilation is None else \
        _as_ints("reduce_window", "window_dilation", window_dilation)
    if isinstance(padding, str):
        span = _dilate_shape(window_dimensions, window_dilation)  # (JAX pads for the
        shape = core.get_aval(flat_operands[0]).shape  # undilated operand shape)
        padding = padtype_to_pads(shape, span, window_strides, padding)
    padding = tuple((operator.index(lo), operator.index(hi)) for lo, hi in padding)
    params = dict(window_dimensions=window_dimensions, window_strides=window_strides,
                  padding=padding, base_dilation=base_dilation,
                  window_dilation=window_dilation)
    if len(flat_operands) == 1:
        prim = _monoid_primitive(computation, flat_inits[0])
        if prim is not None:
            return tree_unflatten(tree, [prim.bind(flat_operands[0], **params)])
    inits = [lax_shape.full((), x) if dtypes.is_python_scalar(x) else x for x in flat_inits]
    avals = [core.get_aval(x) for x in inits]
    jaxpr, out_tree = combiners.trace_combiner(computation, avals, tree, "reduce_window")
    if out_tree != tree:
        raise ValueError(f"reduce_window output must have the same tree structure as the "
                         f"operands {tree} vs. {out_tree}")
    combiners.check_outputs(jaxpr, avals, "reduce_window")
    return tree_unflatten(tree, reduce_window_p.bind(*flat_operands, *inits, jaxpr=jaxpr,
                                                     **params))


del _p
