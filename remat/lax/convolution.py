"""Convolution: ``conv_general_dilated`` with its impl, abstract eval, JVP, transpose and
batching rules, the ``conv`` / ``conv_with_general_padding`` / ``conv_transpose`` wrappers, and
the dimension-number helpers (``ConvDimensionNumbers``, ``conv_dimension_numbers``,
``padtype_to_pads``).

The impl is im2col on NumPy, channels-last: the input is zero-interleaved (lhs dilation) and
padded in one allocation, ``sliding_window_view`` exposes every window as a strided view (window
strides and rhs dilation are slices of that view), and one batched ``np.matmul`` per chunk of
the batch (the patch buffer stays under ``_CHUNK_BYTES``) contracts the patches with the kernel,
one matrix product per feature/batch group. Stride-1 ungrouped convolutions wide enough skip
im2col's copy (``_shifted_conv``): in the flattened input a window's elements sit at fixed
distances from its start, so contiguous runs and strided views of the input itself are the
matrix products' operands.

``batch_group_count`` is fully supported (XLA's semantics: the lhs batch dim splits into
groups, group-major, each paired with one group of output features); the rhs transpose of a
grouped convolution uses it, as in JAX.
"""

import operator
from collections import namedtuple

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.dot import (
    canonicalize_precision,
    canonicalize_preferred_element_type,
    compute_dtype,
)
from remat.lax.elementwise import convert_element_type
from remat.lax.shape import full, reshape, rev, transpose
from remat.lax.standard import ANY, check_dtype, standard_primitive
from remat.runtime import parallel

__all__ = [
    "ConvDimensionNumbers",
    "ConvGeneralDilatedDimensionNumbers",
    "conv",
    "conv_dimension_numbers",
    "conv_general_dilated",
    "conv_general_dilated_p",
    "conv_general_permutations",
    "conv_general_shape_tuple",
    "conv_shape_tuple",
    "conv_transpose",
    "conv_transpose_shape_tuple",
    "conv_with_general_padding",
    "padtype_to_pads",
]

ConvDimensionNumbers = namedtuple("ConvDimensionNumbers", ["lhs_spec", "rhs_spec", "out_spec"])
ConvDimensionNumbers.__doc__ = """Convolution layouts as dimension indices: ``lhs_spec`` is
(batch dim, feature dim, spatial dims...), ``rhs_spec`` is (out-feature dim, in-feature dim,
spatial dims...), ``out_spec`` is (batch dim, feature dim, spatial dims...); the spatial dims of
all three are listed in the same (the kernel's) order."""

# What ``dimension_numbers`` may be: layout strings, explicit dimension indices, or None (the
# default ``NC...``/``OI...`` layouts).
ConvGeneralDilatedDimensionNumbers = tuple[str, str, str] | ConvDimensionNumbers | None


# --- dimension numbers and padding -----------------------------------------------------------


def conv_general_permutations(dimension_numbers):
    """The (lhs, rhs, out) dimension permutations for a triple of layout strings such as
    ``('NHWC', 'HWIO', 'NHWC')``; spatial dims are ordered as they appear in the rhs string."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    charpairs = (("N", "C"), ("O", "I"), ("N", "C"))
    for i, (a, b) in enumerate(charpairs):
        if not dimension_numbers[i].count(a) == dimension_numbers[i].count(b) == 1:
            raise TypeError(f"convolution dimension_numbers[{i}] must contain the characters "
                            f"'{a}' and '{b}' exactly once, got {dimension_numbers[i]}.")
        if len(dimension_numbers[i]) != len(set(dimension_numbers[i])):
            raise TypeError(f"convolution dimension_numbers[{i}] cannot have duplicate "
                            f"characters, got {dimension_numbers[i]}.")
    if not (set(lhs_spec) - {"N", "C"} == set(rhs_spec) - {"O", "I"}
            == set(out_spec) - {"N", "C"}):
        raise TypeError(f"convolution dimension_numbers elements must each have the same set "
                        f"of spatial characters, got {tuple(dimension_numbers)}.")

    def perm(spec, pair):
        spatial = [i for i, ch in enumerate(spec) if ch not in pair]
        spatial.sort(key=lambda i: rhs_spec.index(spec[i]))
        return (spec.index(pair[0]), spec.index(pair[1])) + tuple(spatial)

    return tuple(perm(s, p) for s, p in zip(dimension_numbers, charpairs))


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers):
    """``dimension_numbers`` (None, a triple of layout strings, or a ``ConvDimensionNumbers``)
    as a canonical ``ConvDimensionNumbers`` of int tuples."""
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        return ConvDimensionNumbers(*(tuple(operator.index(d) for d in spec)
                                      for spec in dimension_numbers))
    if len(lhs_shape) != len(rhs_shape):
        raise TypeError(f"convolution requires lhs and rhs ndim to be equal, got "
                        f"{len(lhs_shape)} and {len(rhs_shape)}.")
    if dimension_numbers is None:
        iota = tuple(range(len(lhs_shape)))
        return ConvDimensionNumbers(iota, iota, iota)
    if not isinstance(dimension_numbers, (list, tuple)):
        raise TypeError(f"convolution dimension_numbers must be tuple/list or None, got "
                        f"{type(dimension_numbers)}.")
    if len(dimension_numbers) != 3:
        raise TypeError(f"convolution dimension_numbers list/tuple must be length 3, got "
                        f"{len(dimension_numbers)}.")
    if not all(isinstance(s, str) for s in dimension_numbers):
        raise TypeError(f"convolution dimension_numbers elements must be strings, got "
                        f"{tuple(map(type, dimension_numbers))}.")
    for i, s in enumerate(dimension_numbers):
        if len(s) != len(lhs_shape):
            raise TypeError(f"convolution dimension_numbers[{i}] must have len equal to the "
                            f"ndim of lhs and rhs, got {len(s)} for lhs and rhs shapes "
                            f"{tuple(lhs_shape)} and {tuple(rhs_shape)}.")
    return ConvDimensionNumbers(*conv_general_permutations(dimension_numbers))


def padtype_to_pads(in_shape, window_shape, window_strides, padding):
    """Explicit ``(low, high)`` pads for ``'SAME'``, ``'SAME_LOWER'`` or ``'VALID'``:
    SAME pads so that the output size is ``ceil(in / stride)``, the odd unit going high
    (SAME) or low (SAME_LOWER)."""
    kind = padding.upper() if isinstance(padding, str) else padding
    if kind == "VALID":
        return [(0, 0)] * len(in_shape)
    if kind in ("SAME", "SAME_LOWER"):
        pads = []
        for n, k, s in zip(in_shape, window_shape, window_strides):
            out = -(-int(n) // int(s))
            total = max((out - 1) * int(s) + int(k) - int(n), 0)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if kind == "SAME" else (big, small))
        return pads
    raise RuntimeError(f"Unrecognized padding type: expected 'VALID', 'SAME', or 'SAME_LOWER', "
                       f"got {padding}.")


def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count=1):
    """The output shape of a convolution of operands in the canonical layouts (``NC...``
    and ``OI...``): ``pads`` is a padding string or ``(low, high)`` pairs."""
    if isinstance(pads, str):
        pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    if len(pads) != len(lhs_shape) - 2:
        raise TypeError(f"Wrong number of explicit pads for convolution: expected "
                        f"{len(lhs_shape) - 2}, got {len(pads)}.")
    padded = [int(n) + int(lo) + int(hi) for n, (lo, hi) in zip(lhs_shape[2:], pads)]
    if any(p < 0 for p in padded):
        raise ValueError(f"Negative padding is larger than the size of the corresponding "
                         f"dimension: got padding={pads} for lhs_shape[2:]="
                         f"{tuple(lhs_shape[2:])}")
    out_space = tuple(max((p - int(k)) // int(s) + 1, 0)
                      for p, k, s in zip(padded, rhs_shape[2:], strides))
    batch = int(lhs_shape[0])
    if batch_group_count > 1:
        if batch % batch_group_count:
            raise ValueError(f"batch_group_count must divide lhs batch dimension size, but "
                             f"{batch_group_count} does not divide {batch}.")
        batch //= batch_group_count
    return (batch, int(rhs_shape[0])) + out_space


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
    """The output shape of ``conv_general_dilated`` for layout strings
    ``dimension_numbers`` (no dilation)."""
    lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
    out = conv_shape_tuple(tuple(lhs_shape[i] for i in lhs_perm),
                           tuple(rhs_shape[i] for i in rhs_perm), window_strides, padding)
    return tuple(out[i] for i in np.argsort(out_perm))


def conv_transpose_shape_tuple(lhs_shape, rhs_shape, window_strides, padding,
                               dimension_numbers):
    """The output shape of ``conv_transpose`` for layout strings ``dimension_numbers``:
    ``padding`` is 'SAME'/'VALID' or the transposed convolution's own ``(low, high)``
    pairs."""
    lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
    lhs_t = [int(lhs_shape[i]) for i in lhs_perm]
    rhs_t = [int(rhs_shape[i]) for i in rhs_perm]
    if isinstance(padding, str):
        padding = [_transpose_pads(k, s, padding) for k, s in zip(rhs_t[2:], window_strides)]
    totals = [int(lo) + int(hi) for lo, hi in padding]
    out_space = [(i - 1) * s - k + 2 + p
                 for i, k, s, p in zip(lhs_t[2:], rhs_t[2:], window_strides, totals)]
    out = (lhs_t[0], rhs_t[0]) + tuple(out_space)
    return tuple(out[i] for i in np.argsort(out_perm))


def _dilate_dim(d, dilation):
    return 0 if d == 0 else 1 + dilation * (d - 1)


def _positive_ints(name, values, count):
    try:
        values = tuple(operator.index(v) for v in values)
    except TypeError:
        raise TypeError(f"conv_general_dilated {name} must be a sequence of integers, got "
                        f"{values!r}") from None
    if len(values) != count:
        raise ValueError(f"conv_general_dilated {name} must have one entry per spatial "
                         f"dimension ({count}), got {values}")
    if any(v < 1 for v in values):
        raise ValueError(f"conv_general_dilated {name} must be positive, got {values}")
    return values


# --- abstract eval ---------------------------------------------------------------------------


def _conv_result_dtype(lhs, rhs, preferred_element_type):
    check_dtype("conv_general_dilated", lhs, ANY, "lhs")
    check_dtype("conv_general_dilated", rhs, ANY, "rhs")
    if lhs.dtype != rhs.dtype:
        raise TypeError(f"lax.conv_general_dilated requires arguments to have the same dtypes, "
                        f"got {lhs.dtype.name}, {rhs.dtype.name}.")
    dtype = lhs.dtype
    pref = preferred_element_type
    if pref is None or pref == dtype:
        return dtype
    kind, pref_kind = dtypes.kind(dtype), dtypes.kind(pref)
    compatible = (kind in "iu" and pref_kind in "iuf") or (kind == "f" and pref_kind == "f") or \
        (kind == "c" and pref_kind == "c")
    if not compatible:
        raise TypeError("Input type is incompatible with `preferred_element_type`. The "
                        "compatible combinations of (input_type, preferred_element_type) are "
                        "(integral, integral), (integral, floating), (floating, floating), "
                        "(complex, complex).")
    if pref_kind == kind and pref.itemsize < dtype.itemsize:
        raise TypeError("`preferred_element_type` must not be narrower than the original "
                        "type.")
    return pref


def _conv_shape(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                dimension_numbers, feature_group_count, batch_group_count):
    name = "conv_general_dilated"
    if lhs.ndim != rhs.ndim:
        raise ValueError(f"{name} lhs and rhs must have the same number of dimensions, but got "
                         f"{lhs.shape} and {rhs.shape}.")
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    for what, spec in zip(("lhs", "rhs", "out"), dimension_numbers):
        if sorted(spec) != list(range(lhs.ndim)):
            raise ValueError(f"{name} dimension_numbers {what}_spec must be a permutation of "
                             f"the {lhs.ndim} operand dimensions, got {spec}")
    nsp = lhs.ndim - 2
    if lhs.ndim < 2:
        raise ValueError(f"{name} operands must have at least 2 dimensions (batch and "
                         f"feature), got {lhs.shape} and {rhs.shape}.")
    if feature_group_count < 1:
        raise ValueError(f"{name} feature_group_count must be a positive integer, got "
                         f"{feature_group_count}.")
    if batch_group_count < 1:
        raise ValueError(f"{name} batch_group_count must be a positive integer, got "
                         f"{batch_group_count}.")
    lhs_features = lhs.shape[lhs_spec[1]]
    rhs_in, rhs_out = rhs.shape[rhs_spec[1]], rhs.shape[rhs_spec[0]]
    quot, rem = divmod(lhs_features, feature_group_count)
    if rem:
        raise ValueError(f"{name} feature_group_count must divide lhs feature dimension size, "
                         f"but {feature_group_count} does not divide {lhs_features}.")
    if quot != rhs_in:
        raise ValueError(f"{name} lhs feature dimension size divided by feature_group_count "
                         f"must equal the rhs input feature dimension size, but "
                         f"{lhs_features} // {feature_group_count} != {rhs_in}.")
    if rhs_out % feature_group_count:
        raise ValueError(f"{name} rhs output feature dimension size must be a multiple of "
                         f"feature_group_count, but {rhs_out} is not a multiple of "
                         f"{feature_group_count}.")
    lhs_batch = lhs.shape[lhs_spec[0]]
    if lhs_batch % batch_group_count:
        raise ValueError(f"{name} batch_group_count must divide lhs batch dimension size, but "
                         f"{batch_group_count} does not divide {lhs_batch}.")
    if rhs_out % batch_group_count:
        raise ValueError(f"{name} rhs output feature dimension size must be a multiple of "
                         f"batch_group_count, but {rhs_out} is not a multiple of "
                         f"{batch_group_count}.")
    if batch_group_count > 1 and feature_group_count > 1:
        raise ValueError(f"At most one of batch_group_count and feature_group_count may be > 1, "
                         f"got batch_group_count={batch_group_count} and "
                         f"feature_group_count={feature_group_count}")
    for what, seq in (("window_strides", window_strides), ("padding", padding),
                      ("lhs_dilation", lhs_dilation), ("rhs_dilation", rhs_dilation)):
        if len(seq) != nsp:
            raise ValueError(f"{name} window and {what} must have the same number of "
                             f"dimensions, but got {nsp} and {len(seq)}")
    out_spatial = []
    for i in range(nsp):
        n = _dilate_dim(lhs.shape[lhs_spec[2 + i]], lhs_dilation[i])
        k = _dilate_dim(rhs.shape[rhs_spec[2 + i]], rhs_dilation[i])
        lo, hi = padding[i]
        padded = n + lo + hi
        if padded < 0:
            raise ValueError(f"Negative padding is larger than the size of the corresponding "
                             f"dimension: got padding={padding} for lhs spatial shape "
                             f"{tuple(lhs.shape[d] for d in lhs_spec[2:])}")
        out_spatial.append(0 if padded < k else (padded - k) // window_strides[i] + 1)
    canonical = (lhs_batch // batch_group_count, rhs_out) + tuple(out_spatial)
    shape = [0] * lhs.ndim
    for pos, d in zip(out_spec, canonical):
        shape[pos] = d
    return tuple(shape)


def _conv_abstract_eval(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                        dimension_numbers, feature_group_count, batch_group_count, precision,
                        preferred_element_type):
    dtype = _conv_result_dtype(lhs, rhs, preferred_element_type)
    shape = _conv_shape(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                        dimension_numbers, feature_group_count, batch_group_count)
    return ShapedArray(shape, dtype, lhs.weak_type and rhs.weak_type)


# --- impl ------------------------------------------------------------------------------------

_CHUNK_BYTES = 64 << 20  # bound on the im2col buffer: larger batches go in chunks
_MIN_SHIFTED_WIDTH = 16  # the narrowest inner dimension of ``_shifted_conv``'s products


def _dilate_and_pad(x, lhs_dilation, padding, dtype):
    """``x`` (N, spatial..., C) zero-interleaved by ``lhs_dilation`` and padded (negative pads
    crop), in ``dtype``, with one allocation."""
    if all(d == 1 for d in lhs_dilation) and all(lo == hi == 0 for lo, hi in padding):
        return x if x.dtype == dtype else x.astype(dtype)
    spatial = x.shape[1:-1]
    dilated = [_dilate_dim(n, d) for n, d in zip(spatial, lhs_dilation)]
    grown = [max(lo, 0) + n + max(hi, 0) for n, (lo, hi) in zip(dilated, padding)]
    out = np.zeros((x.shape[0],) + tuple(grown) + (x.shape[-1],), dtype)
    place = tuple(slice(max(lo, 0), max(lo, 0) + n, d)
                  for n, d, (lo, _) in zip(dilated, lhs_dilation, padding))
    out[(slice(None),) + place] = x
    crop = tuple(slice(max(-lo, 0), g - max(-hi, 0)) for g, (lo, hi) in zip(grown, padding))
    return out[(slice(None),) + crop]


def _flat_offsets(shape, steps):
    """The flat offset ``index . steps`` of each index of ``shape``, in row-major order."""
    return [sum(i * step for i, step in zip(at, steps)) for at in np.ndindex(*shape)]


def _shifted_conv(x, w, rhs_dilation, out_spatial, work):
    """A stride-1, ungrouped convolution of ``x`` (N, padded spatial..., C; dilated) by ``w``
    (O, C, K...) as ``(N, out..., O)``, without im2col's copy of every window: in ``x``
    flattened row-major, a window's element at kernel offset ``k`` sits a fixed distance
    ``k . strides`` from the window's start, for every window. So either
    - *by taps*: each kernel offset's product is one matrix product of a contiguous run of the
      flattened rows (every position computed, the valid ones kept), summed over the offsets;
      or
    - *by windows*: each output position's product is one matrix product of a strided view
      (batch rows, a contiguous run of the position's window rows) with the kernel spread
      over that run, zeros between its rows (a weight gradient's few positions, large window).
    Whichever computes fewer needless products; None where both waste over half their work
    (im2col is then cheaper), or where the windows' needless products would multiply a
    non-finite input (``0 * inf``)."""
    n, padded, c = x.shape[0], x.shape[1:-1], x.shape[-1]
    o, kernel = w.shape[0], w.shape[2:]
    strides = [int(np.prod(padded[i + 1:], dtype=np.int64)) for i in range(len(padded))]
    offsets = _flat_offsets(kernel, [r * s for r, s in zip(rhs_dilation, strides)])
    taps, extent = len(offsets), offsets[-1] + 1
    rows, positions = int(np.prod(padded, dtype=np.int64)), int(np.prod(out_spatial))
    # (the products' inner dimensions: by taps, C; by windows, N; narrow ones make BLAS slow)
    by_taps = rows * taps if c >= _MIN_SHIFTED_WIDTH else np.inf
    by_windows = positions * extent if n >= _MIN_SHIFTED_WIDTH else np.inf
    if min(by_taps, by_windows) > 2 * positions * taps:
        return None
    x = np.ascontiguousarray(x, work)
    per_tap = np.moveaxis(w.reshape(o, c, taps), 0, -1).astype(work, copy=False)  # (C, taps, O)
    if by_taps <= by_windows:
        flat = x.reshape(n * rows, c)
        span = n * rows - offsets[-1]  # (rows past it are no valid position's)
        out = np.empty((n * rows, o), work)
        for t, offset in enumerate(offsets):
            part, tap = flat[offset:offset + span], np.ascontiguousarray(per_tap[:, t])
            if t == 0:
                parallel.matmul(part, tap, out=out[:span])
            else:
                out[:span] += parallel.matmul(part, tap)
        valid = (slice(None),) + tuple(slice(0, k) for k in out_spatial)
        return out.reshape((n,) + padded + (o,))[valid].copy()  # (the modelled buffer)
    if dtypes.kind(work) in "fc" and not np.isfinite(x).all():
        return None
    spread = np.zeros((extent, c, o), work)
    spread[offsets] = per_tap.transpose(1, 0, 2)
    spread = spread.reshape(extent * c, o)
    flat = x.reshape(n, rows * c)
    starts = _flat_offsets(out_spatial, strides)
    out = np.empty((n, positions, o), work)

    def products(first, stop):  # (one worker's positions: each product is narrow)
        for i in range(first, stop):
            np.matmul(flat[:, starts[i] * c:(starts[i] + extent) * c], spread, out=out[:, i])

    parallel.run_parts(products, parallel.bounds(positions, min(parallel.workers(), positions)))
    return out.reshape((n,) + tuple(out_spatial) + (o,))


def _conv_impl(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
               dimension_numbers, feature_group_count, batch_group_count, precision,
               preferred_element_type):
    # Works channels-last, (N, spatial..., C), so that each im2col row is gathered from runs
    # of contiguous features.
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    out_dtype = lhs.dtype if preferred_element_type is None else preferred_element_type
    work = compute_dtype(out_dtype)
    nsp = lhs.ndim - 2
    x = np.transpose(lhs, (lhs_spec[0],) + tuple(lhs_spec[2:]) + (lhs_spec[1],))
    x = _dilate_and_pad(x, lhs_dilation, padding, work)
    w = np.transpose(rhs, rhs_spec)  # (O, I, K...)
    kernel = w.shape[2:]
    window = tuple(_dilate_dim(k, r) for k, r in zip(kernel, rhs_dilation))
    out_spatial = tuple(0 if p < k else (p - k) // s + 1
                        for p, k, s in zip(x.shape[1:-1], window, window_strides))
    fgc, bgc = feature_group_count, batch_group_count
    groups = fgc * bgc
    n, c = x.shape[0] // bgc, x.shape[-1] // fgc
    o_total = w.shape[0]
    o = o_total // groups
    # the result is computed as (n, out..., O); out_perm takes it to the out layout
    last = (out_spec[0],) + tuple(out_spec[2:]) + (out_spec[1],)
    out_perm = tuple(int(i) for i in np.argsort(last))
    k_size = c * int(np.prod(kernel, dtype=np.int64))
    positions = int(np.prod(out_spatial, dtype=np.int64))
    if n * o_total * positions == 0 or k_size == 0:
        return np.zeros((n,) + out_spatial + (o_total,), work).transpose(out_perm)
    if groups == 1 and all(s == 1 for s in window_strides):
        res = _shifted_conv(x, w, rhs_dilation, out_spatial, work)
        if res is not None:
            return res.transpose(out_perm)
    win = np.lib.stride_tricks.sliding_window_view(x, window, axis=tuple(range(1, 1 + nsp)))
    win = win[(slice(None),) + tuple(slice(None, None, s) for s in window_strides)
              + (slice(None),) + tuple(slice(None, None, r) for r in rhs_dilation)]
    # (N, out..., C, K...) -> (bgc, n, out..., fgc, c, K...) -> (bgc, fgc, n, out..., K..., c)
    win = win.reshape((bgc, n) + out_spatial + (fgc, c) + kernel)
    k_axes = tuple(range(4 + nsp, 4 + 2 * nsp))
    win = win.transpose((0, 2 + nsp, 1) + tuple(range(2, 2 + nsp)) + k_axes + (3 + nsp,))
    # kernel: (O, c, K...) -> (G, o, c, K...) -> (G, K..., c, o)
    wmat = w.reshape((groups, o, c) + kernel).transpose(
        (0,) + tuple(range(3, 3 + nsp)) + (2, 1)).reshape(groups, k_size, o)
    if wmat.dtype != work:
        wmat = wmat.astype(work)
    res = np.empty((groups, n) + out_spatial + (o,), work)
    row_bytes = groups * positions * k_size * np.dtype(work).itemsize
    step = max(1, min(n, _CHUNK_BYTES // max(row_bytes, 1)))
    for start in range(0, n, step):
        stop = min(n, start + step)
        patches = win[:, :, start:stop].reshape(groups, (stop - start) * positions, k_size)
        res[:, start:stop] = parallel.matmul(patches, wmat).reshape(
            (groups, stop - start) + out_spatial + (o,))
    if groups > 1:  # (G, n, out..., o) -> (n, out..., G, o)
        res = res.transpose(tuple(range(1, 2 + nsp)) + (0, 2 + nsp))
    return res.reshape((n,) + out_spatial + (o_total,)).transpose(out_perm)


conv_general_dilated_p = standard_primitive("conv_general_dilated", _conv_impl,
                                            _conv_abstract_eval)


# --- JVP and transposes ----------------------------------------------------------------------


def _conv_jvp(primals, tangents, **params):
    lhs, rhs = primals
    tl, tr = tangents
    out = conv_general_dilated_p.bind(lhs, rhs, **params)
    acc = ad.Zero(core.get_aval(out).to_tangent_aval())
    if not dtypes.is_inexact(core.get_aval(out).dtype):
        return out, acc
    if type(tl) is not ad.Zero:
        acc = ad.add_tangents(acc, conv_general_dilated_p.bind(tl, rhs, **params))
    if type(tr) is not ad.Zero:
        acc = ad.add_tangents(acc, conv_general_dilated_p.bind(lhs, tr, **params))
    return out, acc


def _split_axis(x, dim, size):
    """Reshape axis ``dim`` of size ``size * m`` into two axes ``(size, m)``."""
    shape = list(core.get_aval(x).shape)
    shape[dim:dim + 1] = [size, shape[dim] // size]
    return reshape(x, tuple(shape))


def _merge_axis(x, src, dst):
    """Merge axis ``src`` into axis ``dst`` (``dst`` counted with ``src`` removed) as its major
    part."""
    shape = core.get_aval(x).shape
    perm = [i for i in range(len(shape)) if i != src]
    perm.insert(dst, src)
    new = [s for i, s in enumerate(shape) if i != src]
    new[dst] *= shape[src]
    return reshape(x, tuple(new), tuple(perm))


def _spec_transpose(spec):
    return (spec[1], spec[0]) + tuple(spec[2:])


def _dilated(shape, dilation):
    return [_dilate_dim(d, r) for d, r in zip(shape, dilation)]


def _conv_transpose_lhs(ct, lhs_aval, rhs, *, window_strides, padding, lhs_dilation,
                        rhs_dilation, dimension_numbers, feature_group_count, batch_group_count,
                        precision, preferred_element_type):
    """The lhs cotangent: a convolution of the cotangent (dilated by the strides) with the
    spatially flipped kernel whose in/out features are swapped."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    rhs_shape = core.get_aval(rhs).shape
    ct_shape = core.get_aval(ct).shape
    groups = feature_group_count
    if feature_group_count > 1 or batch_group_count > 1:
        groups = max(feature_group_count, batch_group_count)
        rhs = _split_axis(rhs, rhs_spec[0], groups)
        rhs = _merge_axis(rhs, rhs_spec[0], rhs_spec[1])
    in_sp = _dilated([lhs_aval.shape[d] for d in lhs_spec[2:]], lhs_dilation)
    k_sp = _dilated([rhs_shape[d] for d in rhs_spec[2:]], rhs_dilation)
    out_sp = _dilated([ct_shape[d] for d in out_spec[2:]], window_strides)
    pads = []
    for n, k, m, (lo, _) in zip(in_sp, k_sp, out_sp, padding):
        before = k - lo - 1
        pads.append((before, n + k - 1 - m - before))
    rhs = rev(rhs, tuple(rhs_spec[2:]))
    if core.get_aval(rhs).dtype != core.get_aval(ct).dtype:  # preferred_element_type widened
        rhs = convert_element_type(rhs, core.get_aval(ct).dtype)
    out = conv_general_dilated(
        ct, rhs, window_strides=lhs_dilation, padding=pads,
        lhs_dilation=window_strides, rhs_dilation=rhs_dilation,
        dimension_numbers=ConvDimensionNumbers(out_spec, _spec_transpose(rhs_spec), lhs_spec),
        feature_group_count=groups, batch_group_count=1, precision=precision,
        preferred_element_type=preferred_element_type)
    if batch_group_count > 1:
        out = _split_axis(out, lhs_spec[1], batch_group_count)
        out = _merge_axis(out, lhs_spec[1], lhs_spec[0])
    if core.get_aval(out).dtype != lhs_aval.dtype:
        out = convert_element_type(out, lhs_aval.dtype)
    return out


def _conv_transpose_rhs(ct, lhs, rhs_aval, *, window_strides, padding, lhs_dilation,
                        rhs_dilation, dimension_numbers, feature_group_count, batch_group_count,
                        precision, preferred_element_type):
    """The rhs cotangent: a convolution of the lhs with the cotangent as kernel, the batch
    dim contracted (feature groups become batch groups and vice versa)."""
    if core.get_aval(ct).size == 0 or core.get_aval(lhs).size == 0:
        return full(rhs_aval.shape, 0, rhs_aval.dtype)
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    lhs_shape = core.get_aval(lhs).shape
    ct_shape = core.get_aval(ct).shape
    fgc, bgc = batch_group_count, feature_group_count
    in_sp = _dilated([lhs_shape[d] for d in lhs_spec[2:]], lhs_dilation)
    k_sp = _dilated([rhs_aval.shape[d] for d in rhs_spec[2:]], rhs_dilation)
    out_sp = _dilated([ct_shape[d] for d in out_spec[2:]], window_strides)
    pads = [(lo, m - n + k - lo - 1) for n, k, m, (lo, _) in zip(in_sp, k_sp, out_sp, padding)]
    if core.get_aval(lhs).dtype != core.get_aval(ct).dtype:  # preferred_element_type widened
        lhs = convert_element_type(lhs, core.get_aval(ct).dtype)
    out = conv_general_dilated(
        lhs, ct, window_strides=rhs_dilation, padding=pads, lhs_dilation=lhs_dilation,
        rhs_dilation=window_strides,
        dimension_numbers=ConvDimensionNumbers(_spec_transpose(lhs_spec),
                                               _spec_transpose(out_spec),
                                               _spec_transpose(rhs_spec)),
        feature_group_count=fgc, batch_group_count=bgc, precision=precision,
        preferred_element_type=preferred_element_type)
    if core.get_aval(out).dtype != rhs_aval.dtype:
        out = convert_element_type(out, rhs_aval.dtype)
    return out


def _conv_transpose(ct, lhs, rhs, **params):
    lhs_undefined, rhs_undefined = ad.is_undefined_primal(lhs), ad.is_undefined_primal(rhs)
    if lhs_undefined and rhs_undefined:
        raise ValueError("conv_general_dilated is not linear in both operands at once: "
                         "transposing it needs one operand's value")
    if lhs_undefined:
        return [_conv_transpose_lhs(ct, lhs.aval, rhs, **params), None]
    if rhs_undefined:
        return [None, _conv_transpose_rhs(ct, lhs, rhs.aval, **params)]
    return [None, None]


# --- batching --------------------------------------------------------------------------------


def _group_major(x, bdim, dim, groups):
    """Fold batch axis ``bdim`` of ``x`` into axis ``dim`` (an index of the unbatched
    operand) whose size is ``groups * m`` (group-major), giving ``groups * (B * m)``: the
    vmapped size goes inside each group so grouping is preserved."""
    x = batching.moveaxis(x, bdim, 0)
    x = _split_axis(x, dim + 1, groups)  # (B, ..., groups, m, ...)
    x = _merge_axis(x, 0, dim + 1)  # (..., groups, B*m, ...)
    return _merge_axis(x, dim, dim)  # (..., groups*B*m, ...)


def _conv_batch(vals, dims, **params):
    """Fold the vmapped dim into the convolution: into N for the lhs, into O for the rhs
    (inside the groups when grouped), into a larger feature (or batch) group count when
    both are batched."""
    (lhs, rhs), (lbd, rbd) = vals, dims
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    fgc, bgc = params["feature_group_count"], params["batch_group_count"]
    size = batching.axis_size_of(vals, dims)
    if lbd is not batching.not_mapped and rbd is not batching.not_mapped:
        if bgc > 1:
            lhs = _merge_axis(lhs, lbd, lhs_spec[0])
            params = dict(params, batch_group_count=bgc * size)
        else:
            lhs = _merge_axis(lhs, lbd, lhs_spec[1])
            params = dict(params, feature_group_count=fgc * size)
        rhs = _merge_axis(rhs, rbd, rhs_spec[0])
        out = conv_general_dilated_p.bind(lhs, rhs, **params)
        return _split_axis(out, out_spec[1], size), out_spec[1]
    if lbd is not batching.not_mapped:
        if bgc == 1:
            lhs = _merge_axis(lhs, lbd, lhs_spec[0])
        else:
            lhs = _group_major(lhs, lbd, lhs_spec[0], bgc)
        out = conv_general_dilated_p.bind(lhs, rhs, **params)
        return _split_axis(out, out_spec[0], size), out_spec[0]
    if fgc == 1 and bgc == 1:
        rhs = _merge_axis(rhs, rbd, rhs_spec[0])
        out = conv_general_dilated_p.bind(lhs, rhs, **params)
        return _split_axis(out, out_spec[1], size), out_spec[1]
    groups = max(fgc, bgc)
    rhs = _group_major(rhs, rbd, rhs_spec[0], groups)
    out = conv_general_dilated_p.bind(lhs, rhs, **params)  # features: (groups, B, o)
    out = _split_axis(out, out_spec[1], groups)
    out = _split_axis(out, out_spec[1] + 1, size)
    return _merge_axis(out, out_spec[1], out_spec[1] + 1), out_spec[1]


ad.primitive_jvps[conv_general_dilated_p] = _conv_jvp
ad.primitive_transposes[conv_general_dilated_p] = _conv_transpose
batching.primitive_batchers[conv_general_dilated_p] = _conv_batch


# --- public functions ------------------------------------------------------------------------


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None,
                         rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
                         batch_group_count=1, precision=None, preferred_element_type=None):
    """General n-dimensional convolution with strides, padding ('SAME', 'SAME_LOWER',
    'VALID' or ``(low, high)`` pairs), lhs (transposed) and rhs (atrous) dilation, layouts,
    and feature/batch groups."""
    lhs_shape, rhs_shape = core.get_aval(lhs).shape, core.get_aval(rhs).shape
    dnums = conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
    nsp = len(lhs_shape) - 2
    window_strides = _positive_ints("window_strides", window_strides, nsp)
    if lhs_dilation is None:
        lhs_dilation = (1,) * nsp
    elif isinstance(padding, str) and any(d != 1 for d in lhs_dilation):
        raise ValueError("String padding is not implemented for transposed convolution using "
                         "this op. Please either exactly specify the required padding or use "
                         "conv_transpose.")
    lhs_dilation = _positive_ints("lhs_dilation", lhs_dilation, nsp)
    rhs_dilation = _positive_ints("rhs_dilation", (1,) * nsp if rhs_dilation is None
                                  else rhs_dilation, nsp)
    if isinstance(padding, str):
        in_sp = [lhs_shape[d] for d in dnums.lhs_spec[2:]]
        k_sp = [_dilate_dim(rhs_shape[d], r) for d, r in zip(dnums.rhs_spec[2:], rhs_dilation)]
        padding = padtype_to_pads(in_sp, k_sp, window_strides, padding)
    try:
        padding = tuple((operator.index(lo), operator.index(hi)) for lo, hi in padding)
    except (ValueError, TypeError):
        raise ValueError(f"padding argument to conv_general_dilated should be a string or a "
                         f"sequence of (low, high) pairs, got {padding}") from None
    return conv_general_dilated_p.bind(
        lhs, rhs, window_strides=window_strides, padding=padding, lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation, dimension_numbers=dnums,
        feature_group_count=operator.index(feature_group_count),
        batch_group_count=operator.index(batch_group_count),
        precision=canonicalize_precision(precision),
        preferred_element_type=canonicalize_preferred_element_type(preferred_element_type,
                                                                   "conv_general_dilated"))


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    """Convolution in the default NCHW/OIHW layout with 'SAME' or 'VALID' padding."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                              precision=None, preferred_element_type=None):
    """Convolution in the default layout with explicit padding and dilations."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                rhs_dilation=rhs_dilation, precision=precision,
                                preferred_element_type=preferred_element_type)


_TRANSPOSE_LAYOUTS = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"),
                      4: ("NHWC", "HWIO", "NHWC"), 5: ("NHWDC", "HWDIO", "NHWDC")}


def _transpose_pads(k, s, padding):
    """Pads of the stride-dilated input of a transposed convolution, from the forward
    convolution's padding (a string, or with ``use_consistent_padding`` a (low, high) pair)."""
    if padding == "SAME":
        total = k + s - 2
        before = k - 1 if s > k - 1 else -(-total // 2)
    elif padding == "VALID":
        total = k + s - 2 + max(k - s, 0)
        before = k - 1
    else:
        lo, hi = padding
        before, total = k - lo - 1, 2 * k - lo - hi - 2
    return before, total - before


def conv_transpose(lhs, rhs, strides, padding, rhs_dilation=None, dimension_numbers=None,
                   transpose_kernel=False, precision=None, preferred_element_type=None,
                   use_consistent_padding=False):
    """Transposed ("fractionally strided") convolution: the input is dilated by ``strides``.
    Layouts default to channels-last (``NHWC``/``HWIO``); ``transpose_kernel`` flips the
    kernel and swaps its feature dims, giving exactly the gradient of the forward conv."""
    lhs_shape, rhs_shape = core.get_aval(lhs).shape, core.get_aval(rhs).shape
    if len(lhs_shape) != len(rhs_shape) or len(lhs_shape) < 2:
        raise ValueError(f"conv_transpose requires lhs and rhs of equal rank >= 2, got shapes "
                         f"{lhs_shape} and {rhs_shape}")
    nsp = len(lhs_shape) - 2
    if dimension_numbers is None:
        if len(lhs_shape) not in _TRANSPOSE_LAYOUTS:
            raise ValueError("No 4+ dimensional dimension_number defaults.")
        dimension_numbers = _TRANSPOSE_LAYOUTS[len(lhs_shape)]
    dn = conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
    rhs_dilation = (1,) * nsp if rhs_dilation is None else tuple(rhs_dilation)
    strides = tuple(strides)
    if len(strides) != nsp or len(rhs_dilation) != nsp:
        raise ValueError(f"conv_transpose strides and rhs_dilation need {nsp} entries, got "
                         f"{strides} and {rhs_dilation}")
    if isinstance(padding, str):
        padding = padding.upper()
    if use_consistent_padding or padding in ("SAME", "VALID"):
        forward = [padding] * nsp if isinstance(padding, str) else [tuple(p) for p in padding]
        if isinstance(padding, str) and padding not in ("SAME", "VALID"):
            raise ValueError(f"Invalid padding mode: {padding}")
        kernel = [_dilate_dim(rhs_shape[d], r) for d, r in zip(dn.rhs_spec[2:], rhs_dilation)]
        padding = [_transpose_pads(k, s, p) for k, s, p in zip(kernel, strides, forward)]
    if transpose_kernel:
        rhs = rev(rhs, tuple(dn.rhs_spec[2:]))
        perm = list(range(len(rhs_shape)))
        perm[dn.rhs_spec[0]], perm[dn.rhs_spec[1]] = dn.rhs_spec[1], dn.rhs_spec[0]
        rhs = transpose(rhs, tuple(perm))
    return conv_general_dilated(lhs, rhs, (1,) * nsp, padding, lhs_dilation=strides,
                                rhs_dilation=rhs_dilation, dimension_numbers=dn,
                                precision=precision,
                                preferred_element_type=preferred_element_type)
