"""``pad`` with all of NumPy's modes, lowered to ``pad``, slices and concatenations.
"""

import builtins

import numpy as np

from remat import core, dtypes, lax
from remat.core import Tracer
from remat.numpy import reductions
from remat.numpy.elementwise import around
from remat.numpy.functional import apply_along_axis
from remat.numpy.shapes import broadcast_to
from remat.numpy.util import (
    _arr,
    _check_arraylike,
    _convert,
    _dtype,
    _lax_const,
    _shape,
    _slice_axis,
    _take_static,
    _to_inexact_dtype,
    _with,
)

_min = builtins.min

__all__ = [
    "pad",
]


def _pad_widths(pad_width, nd):
    pw = np.asarray(core.concrete_or_error(pad_width, "pad_width must be static"))
    if dtypes.kind(pw.dtype) not in "iu":
        if pw.size and not np.all(pw == np.round(pw)):
            raise TypeError(f"pad_width must be of integral type, got {pad_width}")
        pw = pw.astype(np.int64)
    try:
        pw = np.broadcast_to(pw, (nd, 2))
    except ValueError:
        raise ValueError(f"jnp.pad: pad_width with nd={nd} has unsupported shape "
                         f"{np.shape(pad_width)}. Valid shapes are ({nd}, 2), (1, 2), (2,), "
                         f"(1,), or ().") from None
    if (pw < 0).any():
        raise ValueError("index can't contain negative values")
    return [(int(lo), int(hi)) for lo, hi in pw]


def _per_axis_values(values, nd, d, name):
    """Broadcast NumPy's per-axis (before, after) scalars; arrays may be traced."""
    if hasattr(values, "aval") and isinstance(values, Tracer):
        v = _convert(values, d)
        if v.ndim == 0:
            return [(v, v)] * nd
        v = broadcast_to(v, (nd, 2))
        return [(v[i, 0], v[i, 1]) for i in range(nd)]
    arr_ = np.asarray(values if not hasattr(values, "aval") else np.asarray(values))
    try:
        arr_ = np.broadcast_to(arr_, (nd, 2))
    except ValueError:
        raise ValueError(f"jnp.pad: {name} has unsupported shape {np.shape(values)}") from None
    return [(lax.convert_element_type(arr_[i, 0], d), lax.convert_element_type(arr_[i, 1], d))
            for i in range(nd)]


def pad(array, pad_width, mode="constant", **kwargs):
    """Pad with NumPy's modes: constant, edge, reflect and symmetric (even or odd), wrap,
    maximum, minimum, mean, linear_ramp, empty, or a function ``mode(vector, pad_width,
    axis, kwargs)`` returning each padded 1-D vector (applied along every axis in turn)."""
    _check_arraylike("pad", array)
    x = _arr(array)
    nd = x.ndim
    widths = _pad_widths(pad_width, nd)
    d = _dtype(x)
    if callable(mode):
        return _pad_with_function(x, widths, mode, kwargs)
    allowed = {"constant": {"constant_values"}, "empty": set(), "edge": set(),
               "wrap": set(), "reflect": {"reflect_type"}, "symmetric": {"reflect_type"},
               "maximum": {"stat_length"}, "minimum": {"stat_length"},
               "mean": {"stat_length"}, "linear_ramp": {"end_values"}}
    if mode not in allowed:
        raise ValueError(f"Unimplemented padding mode '{mode}' for np.pad.")
    unexpected = set(kwargs) - allowed[mode]
    if unexpected:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': {unexpected}")
    if mode in ("constant", "empty"):
        cv = kwargs.get("constant_values", 0) if mode == "constant" else 0
        if np.ndim(cv) == 0 and not (isinstance(cv, Tracer) and cv.ndim):
            return lax.pad(x, _convert(_arr(cv), d), [(lo, hi, 0) for lo, hi in widths])
        values = _per_axis_values(cv, nd, d, "constant_values")
        for ax, ((lo, hi), (vlo, vhi)) in enumerate(zip(widths, values)):
            cfg = [(0, 0, 0)] * nd
            if lo:
                cfg[ax] = (lo, 0, 0)
                x = lax.pad(x, vlo, cfg)
            if hi:
                cfg[ax] = (0, hi, 0)
                x = lax.pad(x, vhi, cfg)
        return x
    reflect_type = kwargs.get("reflect_type", "even")
    if mode in ("reflect", "symmetric") and reflect_type not in ("even", "odd"):
        raise ValueError(f"reflect_type must be 'even' or 'odd', got {reflect_type!r}")
    for ax, (lo, hi) in enumerate(widths):
        if not lo and not hi:
            continue
        n = _shape(x)[ax]
        if mode in ("edge", "reflect", "symmetric", "wrap"):
            if n == 0:
                raise ValueError(f"can't extend empty axis {ax} using modes other than "
                                 f"'constant' or 'empty'")
            if mode in ("reflect", "symmetric") and reflect_type == "odd" and n > 1:
                x = _pad_reflect_odd(x, ax, lo, hi, mode == "symmetric")
                continue
            idx = np.pad(np.arange(n), (lo, hi), mode=mode)
            x = _take_static(x, idx, ax)
        elif mode in ("maximum", "minimum", "mean"):
            x = _pad_stat(x, ax, lo, hi, mode, kwargs.get("stat_length"), nd)
        else:
            x = _pad_linear_ramp(x, ax, lo, hi, kwargs.get("end_values", 0), nd)
    return x


def _pad_stat(x, ax, lo, hi, mode, stat_length, nd):
    n = _shape(x)[ax]
    if stat_length is None:
        lengths = (n, n)
    else:
        sl = np.broadcast_to(np.asarray(stat_length), (nd, 2))
        lengths = (_min(int(sl[ax, 0]), n), _min(int(sl[ax, 1]), n))
    fn = {"maximum": reductions.max, "minimum": reductions.min, "mean": reductions.mean}[mode]
    parts = []
    if lo:
        stat = fn(_slice_axis(x, ax, 0, lengths[0]), axis=ax, keepdims=True)
        if mode == "mean" and dtypes.is_integer(_dtype(x)):
            stat = around(stat)
        stat = _convert(stat, _dtype(x))
        parts.append(lax.broadcast_in_dim(stat, _with(_shape(x), ax, lo),
                                          tuple(range(nd))))
    parts.append(x)
    if hi:
        stat = fn(_slice_axis(x, ax, n - lengths[1], n), axis=ax, keepdims=True)
        if mode == "mean" and dtypes.is_integer(_dtype(x)):
            stat = around(stat)
        stat = _convert(stat, _dtype(x))
        parts.append(lax.broadcast_in_dim(stat, _with(_shape(x), ax, hi),
                                          tuple(range(nd))))
    return lax.concatenate(parts, ax)


def _pad_linear_ramp(x, ax, lo, hi, end_values, nd):
    d = _dtype(x)
    cd = _to_inexact_dtype(d)
    ev = np.broadcast_to(np.asarray(end_values), (nd, 2))
    n = _shape(x)[ax]
    parts = []
    xf = _convert(x, cd)
    if lo:
        edge = _slice_axis(xf, ax, 0, 1)
        parts.append(_ramp(edge, float(ev[ax, 0]), lo, ax))
    parts.append(xf)
    if hi:
        edge = _slice_axis(xf, ax, n - 1, n)
        parts.append(lax.rev(_ramp(edge, float(ev[ax, 1]), hi, ax), (ax,)))
    if dtypes.is_integer(d):  # NumPy builds integer ramps with an integer linspace: floor
        parts = [lax.floor(p) if i != (1 if lo else 0) else p for i, p in enumerate(parts)]
    return _convert(lax.concatenate(parts, ax), d)


def _ramp(edge, end, count, ax):
    """``count`` values going linearly from ``end`` towards ``edge`` (excluded): NumPy's
    ``linspace(end, edge, count, endpoint=False)`` along ``ax``."""
    s = _with(_shape(edge), ax, count)
    d = _dtype(edge)
    edge_b = lax.broadcast_in_dim(edge, s, tuple(range(len(s))))
    end_ = lax.full((), end, d)
    step = lax.div(lax.sub(edge_b, end_), lax.full((), count, d))
    return lax.add(end_, lax.mul(lax.broadcasted_iota(d, s, ax), step))


def _pad_reflect_odd(x, ax, lo, hi, include_edge):
    """NumPy's odd reflection (``2 * edge - mirror image``), grown chunk by chunk as NumPy
    does when the padding is wider than the axis: each chunk mirrors what is already there
    (a whole number of the original periods at most) about the current edge."""
    period = _shape(x)[ax]
    while lo or hi:
        filled = _shape(x)[ax]
        if include_edge:
            chunk, offset = filled // period * period, 1
        else:
            chunk, offset = (filled - 1) // (period - 1) * (period - 1), 0
        if lo:
            k = _min(chunk, lo)
            mirror = lax.rev(_slice_axis(x, ax, 1 - offset, k + 1 - offset), (ax,))
            x = lax.concatenate([_odd_mirror(_slice_axis(x, ax, 0, 1), mirror), x], ax)
            lo -= k
        if hi:
            k = _min(chunk, hi)
            n = _shape(x)[ax]
            mirror = lax.rev(_slice_axis(x, ax, n + offset - 1 - k, n + offset - 1), (ax,))
            x = lax.concatenate([x, _odd_mirror(_slice_axis(x, ax, n - 1, n), mirror)], ax)
            hi -= k
    return x


def _odd_mirror(edge, mirror):
    """``2 * edge - mirror`` (``edge`` one wide along the padded axis)."""
    edge = lax.broadcast_in_dim(edge, _shape(mirror), tuple(range(mirror.ndim)))
    return lax.sub(lax.mul(_lax_const(edge, 2), edge), mirror)


def _pad_with_function(x, widths, func, kwargs):
    """Zero padding, then ``func(vector, (before, after), axis, kwargs)`` mapped over the 1-D
    vectors along each axis in turn (JAX's protocol: ``func`` returns the padded vector)."""
    x = lax.pad(x, lax.full((), 0, _dtype(x)), [(lo, hi, 0) for lo, hi in widths])
    for ax in range(x.ndim):
        x = apply_along_axis(func, ax, x, widths[ax], ax, kwargs)
    return x
