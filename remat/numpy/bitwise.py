"""Bitwise operations on integers and booleans: ``bitwise_and/or/xor/not/count``, the
shifts, and ``packbits``/``unpackbits``.

remat.lax has no shift or population-count primitive, so these are composed: a shift by
``y`` is a multiplication or floor division by ``2**y`` (looked up in a table of the dtype's
powers of two, wrapping as the hardware shift does), and a population count sums a byte
table over the bytes of the value.
"""

import numpy as np

from remat import dtypes, lax
from remat.array import from_numpy
from remat.numpy.selection import take
from remat.numpy.shapes import ravel, swapaxes
from remat.numpy.util import (
    _check_arraylike,
    _convert,
    _dtype,
    _named,
    _one_arg,
    _promote_args,
    _promote_args_numeric,
    _promote_dtypes_numeric,
    _shape,
    _weak,
)

__all__ = [
    "bitwise_and", "bitwise_count", "bitwise_invert", "bitwise_left_shift", "bitwise_not",
    "bitwise_or", "bitwise_right_shift", "bitwise_xor", "invert", "left_shift", "packbits",
    "right_shift", "unpackbits",
]


def _bitwise(name, lax_fn):
    def fn(x1, x2, /):
        x1, x2 = _promote_args(name, x1, x2)
        if not (dtypes.is_integer(_dtype(x1)) or _dtype(x1) == dtypes.bool_):
            raise TypeError(f"{name} requires integer or boolean arguments, got "
                            f"{_dtype(x1).name}")
        return lax_fn(x1, x2)

    return _named(fn, name, f"Elementwise ``{name}`` of integers or booleans.")


bitwise_and = _bitwise("bitwise_and", lax.bitwise_and)
bitwise_or = _bitwise("bitwise_or", lax.bitwise_or)
bitwise_xor = _bitwise("bitwise_xor", lax.bitwise_xor)


def invert(x, /):
    """Bitwise NOT (logical NOT for booleans)."""
    x = _one_arg("invert", x)
    if not (dtypes.is_integer(_dtype(x)) or _dtype(x) == dtypes.bool_):
        raise TypeError(f"invert requires an integer or boolean argument, got "
                        f"{_dtype(x).name}")
    return lax.bitwise_not(x)


bitwise_not = bitwise_invert = invert


def _check_integer(name, x):
    if not dtypes.is_integer(_dtype(x)):
        raise TypeError(f"{name} does not accept dtype {_dtype(x).name}. Accepted dtypes are "
                        f"subtypes of integer.")


def _unsigned(d):
    return np.dtype(f"uint{8 * np.dtype(d).itemsize}")


def _power_of_two(y, d, count):
    """``2**y`` as dtype ``d`` for ``0 <= y < count`` (the caller masks other ``y``)."""
    table = from_numpy(np.array([1 << k for k in range(count)], dtype=np.uint64).astype(d), d)
    yi = _convert(y, dtypes.int32)
    yi = lax.clamp(lax.full((), 0, dtypes.int32), yi, lax.full((), count - 1, dtypes.int32))
    return take(table, yi, mode="clip")


def _in_range(y, lo, hi):
    """``lo <= y < hi`` elementwise (``y`` an integer array)."""
    d = _dtype(y)
    above = lax.ge(y, lax.full((), lo, d)) if dtypes.kind(d) == "i" or lo > 0 else \
        lax.full(_shape(y), True, dtypes.bool_)
    return lax.bitwise_and(above, lax.lt(y, lax.full((), hi, d)))


def left_shift(x, y, /):
    """``x << y`` elementwise; shifts by a negative amount or by the bit width or more give
    0, as JAX's ``shift_left``."""
    x, y = _promote_args_numeric("left_shift", x, y)
    _check_integer("left_shift", x)
    d, weak = _dtype(x), _weak(x)
    bits = 8 * d.itemsize
    u = _unsigned(d)
    shifted = lax.mul(_convert(x, u), _power_of_two(y, u, bits))
    out = lax.select(_in_range(y, 0, bits), shifted, lax.full(_shape(shifted), 0, u))
    return _convert(out, d, weak)


def right_shift(x1, x2, /):
    """``x1 >> x2`` elementwise: arithmetic (sign-filling) for signed integers, logical for
    unsigned ones; shifts by a negative amount or by the bit width or more fill with the
    sign, as JAX's ``shift_right_arithmetic``/``shift_right_logical``."""
    x, y = _promote_args_numeric("right_shift", x1, x2)
    _check_integer("right_shift", x)
    d = _dtype(x)
    bits = 8 * d.itemsize
    if dtypes.kind(d) == "u":
        q = lax.div(x, _power_of_two(y, d, bits))
        return lax.select(_in_range(y, 0, bits), q, lax.full(_shape(q), 0, d))
    # signed: floor(x / 2**y), the divisor kept below the sign bit; wider shifts leave the
    # sign alone
    zero = lax.full((), 0, d)
    divisor = _power_of_two(y, d, bits - 1)
    q = lax.div(x, divisor)
    inexact_negative = lax.bitwise_and(lax.lt(x, zero), lax.ne(lax.rem(x, divisor), zero))
    q = lax.select(inexact_negative, lax.sub(q, lax.full((), 1, d)), q)
    sign_fill = lax.select(lax.lt(x, zero), lax.full(_shape(q), -1, d), lax.full(_shape(q), 0, d))
    return _convert(lax.select(_in_range(y, 0, bits - 1), q, sign_fill), d, _weak(x))


bitwise_left_shift = left_shift
bitwise_right_shift = right_shift

_BYTE_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def bitwise_count(x, /):
    """The number of one bits in ``|x|`` (as NumPy), as uint8."""
    (x,) = _promote_dtypes_numeric(x)
    _check_arraylike("bitwise_count", x)
    if _dtype(x) == dtypes.bool_:
        x = _convert(x, dtypes.int32)
    _check_integer("bitwise_count", x)
    d = _dtype(x)
    if dtypes.kind(d) == "i":
        x = lax.abs(x)
    u = _unsigned(d)
    x = _convert(x, u)
    table = from_numpy(_BYTE_POPCOUNT, dtypes.uint8)
    total = None
    for k in range(d.itemsize):
        byte = lax.rem(x, lax.full((), 256, u)) if d.itemsize > 1 else x
        count = take(table, _convert(byte, dtypes.int32), mode="clip")
        total = count if total is None else lax.add(total, count)
        if k + 1 < d.itemsize:
            x = lax.div(x, lax.full((), 256, u))
    return total


def _bit_weights(bitorder):
    if bitorder not in ("little", "big"):
        raise ValueError("'order' must be either 'little' or 'big'")
    w = np.array([1 << k for k in range(8)], dtype=np.uint8)
    return w[::-1] if bitorder == "big" else w


def packbits(a, axis=None, bitorder="big"):
    """Booleans (nonzero elements) packed eight to a uint8 along ``axis`` (the flattened
    array by default), zero-padded to a multiple of eight."""
    _check_arraylike("packbits", a)
    arr = _one_arg("packbits", a)
    if not (dtypes.is_integer(_dtype(arr)) or _dtype(arr) == dtypes.bool_):
        raise TypeError("Expected an input array of integer or boolean data type")
    weights = _bit_weights(bitorder)
    if axis is None:
        arr, axis = ravel(arr), 0
    arr = swapaxes(arr, axis, -1)
    bits = _convert(lax.ne(arr, lax.full((), 0, _dtype(arr))), dtypes.int32)
    n = _shape(bits)[-1]
    padded = -(-n // 8) * 8
    if padded != n:
        bits = lax.pad(bits, lax.full((), 0, dtypes.int32),
                       [(0, 0, 0)] * (bits.ndim - 1) + [(0, padded - n, 0)])
    bits = lax.reshape(bits, _shape(bits)[:-1] + (padded // 8, 8))
    w = lax.broadcast_in_dim(from_numpy(weights.astype(np.int32), dtypes.int32), _shape(bits),
                             (bits.ndim - 1,))
    packed = lax.reduce_sum(lax.mul(bits, w), (bits.ndim - 1,))
    return swapaxes(_convert(packed, dtypes.uint8), axis, -1)


def unpackbits(a, axis=None, count=None, bitorder="big"):
    """The bits of the uint8 array ``a`` as a uint8 array of zeros and ones, eight per
    element along ``axis`` (the flattened array by default), cut or zero-padded to
    ``count``."""
    _check_arraylike("unpackbits", a)
    arr = _one_arg("unpackbits", a)
    if _dtype(arr) != dtypes.uint8:
        raise TypeError("Expected an input array of unsigned byte data type")
    weights = _bit_weights(bitorder)
    if axis is None:
        arr, axis = ravel(arr), 0
    arr = swapaxes(arr, axis, -1)
    s = _shape(arr) + (8,)
    w = lax.broadcast_in_dim(from_numpy(weights, dtypes.uint8), s, (len(s) - 1,))
    expanded = lax.broadcast_in_dim(arr, s, tuple(range(len(s) - 1)))
    bits = _convert(lax.ne(lax.bitwise_and(expanded, w), lax.full((), 0, dtypes.uint8)),
                    dtypes.uint8)
    bits = lax.reshape(bits, s[:-2] + (s[-2] * 8,))
    if count is not None:
        n = _shape(bits)[-1]
        if count > n:
            bits = lax.pad(bits, lax.full((), 0, dtypes.uint8),
                           [(0, 0, 0)] * (bits.ndim - 1) + [(0, count - n, 0)])
        else:
            bits = lax.slice_in_dim(bits, 0, len(range(n)[:count]), axis=bits.ndim - 1)
    return swapaxes(bits, axis, -1)
