"""Bit-level primitives: ``population_count``, ``clz``, the shifts, ``mulhi``,
``bitcast_convert_type`` and ``reduce_precision`` — with their impls, abstract evals and
rules. Integer results have zero derivatives; ``reduce_precision`` is linear (its tangent is
rounded the same way), as in JAX.

Shifts follow XLA: a shift by the bit width or more (or by a negative amount) gives 0, or the
sign fill for ``shift_right_arithmetic``; ``shift_right_logical`` shifts the unsigned bits.
"""

import operator

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.shape import transpose
from remat.lax.standard import (
    as_operands,
    broadcasting_shape,
    standard_primitive,
)

__all__ = [
    "bitcast_convert_type",
    "bitcast_convert_type_p",
    "clz",
    "clz_p",
    "mulhi",
    "mulhi_p",
    "population_count",
    "population_count_p",
    "reduce_precision",
    "reduce_precision_p",
    "shift_left",
    "shift_left_p",
    "shift_right_arithmetic",
    "shift_right_arithmetic_p",
    "shift_right_logical",
    "shift_right_logical_p",
]


def _unsigned(dtype):
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def _signed(dtype):
    return np.dtype(f"i{np.dtype(dtype).itemsize}")


def _check_integer(name, aval, position=None):
    if dtypes.kind(aval.dtype) not in "iu":
        at = "" if position is None else f" at position {position}"
        raise TypeError(f"{name} does not accept dtype {aval.dtype.name}{at}. Accepted dtypes"
                        f"{at} are subtypes of integer.")


# --- population_count and clz ----------------------------------------------------------------


def _unary_int_abstract_eval(name):
    def abstract_eval(x):
        _check_integer(name, x)
        return x

    return abstract_eval


def _popcount(x):
    return np.bitwise_count(x.view(_unsigned(x.dtype))).astype(x.dtype)


def _clz(x):
    """Leading zeros of the bit pattern: the bit width less the bit length, found by a binary
    search over the shifts (exact for every width, unlike a float log2)."""
    u = x.view(_unsigned(x.dtype))
    width = 8 * x.dtype.itemsize
    length = np.zeros(u.shape, np.int64)
    shift = width // 2
    while shift:
        high = (u >> np.array(shift, u.dtype)) != 0
        length += np.where(high, shift, 0)
        u = np.where(high, u >> np.array(shift, u.dtype), u)
        shift //= 2
    length += u != 0
    return (width - length).astype(x.dtype)


population_count_p = standard_primitive("population_count", _popcount,
                                        _unary_int_abstract_eval("population_count"))
clz_p = standard_primitive("clz", _clz, _unary_int_abstract_eval("clz"))
for _p in (population_count_p, clz_p):
    batching.defvectorized(_p)
    ad.defjvp_zero(_p)


def population_count(x):
    """The number of set bits of each element (integer dtypes)."""
    return population_count_p.bind(x)


def clz(x):
    """The number of leading zero bits of each element (integer dtypes)."""
    return clz_p.bind(x)


# --- shifts and mulhi ------------------------------------------------------------------------


def _binary_int_abstract_eval(name):
    def abstract_eval(x, y):
        _check_integer(name, x, 0)
        _check_integer(name, y, 1)
        if x.dtype != y.dtype:
            raise TypeError(f"{name} requires arguments to have the same dtypes, got "
                            f"{x.dtype.name}, {y.dtype.name}.")
        return ShapedArray(broadcasting_shape(name, [x, y]), x.dtype,
                           x.weak_type and y.weak_type)

    return abstract_eval


def _shift_amounts(x, y):
    """The shift amounts as unsigned values and where they are out of range (>= the width,
    which includes every negative amount)."""
    width = 8 * x.dtype.itemsize
    amount = y.astype(_unsigned(y.dtype))
    over = amount >= width
    return np.where(over, 0, amount).astype(_unsigned(x.dtype)), over


def _shift_left(x, y):
    amount, over = _shift_amounts(x, y)
    out = np.left_shift(x.view(_unsigned(x.dtype)), amount).view(x.dtype)
    return np.where(over, np.zeros((), x.dtype), out)


def _shift_right_logical(x, y):
    amount, over = _shift_amounts(x, y)
    out = np.right_shift(x.view(_unsigned(x.dtype)), amount).view(x.dtype)
    return np.where(over, np.zeros((), x.dtype), out)


def _shift_right_arithmetic(x, y):
    amount, over = _shift_amounts(x, y)
    signed = x.view(_signed(x.dtype))
    width = 8 * x.dtype.itemsize
    amount = np.where(over, width - 1, amount).astype(signed.dtype)
    return np.right_shift(signed, amount).view(x.dtype)


def _mulhi(x, y):
    """The high half of the double-width product (signed for signed dtypes)."""
    bits = 8 * x.dtype.itemsize
    signed = dtypes.kind(x.dtype) == "i"
    if bits < 64:
        wide = np.dtype(f"{'i' if signed else 'u'}{2 * x.dtype.itemsize}")
        return ((x.astype(wide) * y.astype(wide)) >> np.array(bits, wide)).astype(x.dtype)
    ux, uy = x.view(np.uint64), y.view(np.uint64)
    mask, half = np.uint64(0xFFFFFFFF), np.uint64(32)
    x_lo, x_hi, y_lo, y_hi = ux & mask, ux >> half, uy & mask, uy >> half
    lo_lo, lo_hi, hi_lo, hi_hi = x_lo * y_lo, x_lo * y_hi, x_hi * y_lo, x_hi * y_hi
    cross = (lo_hi & mask) + (hi_lo & mask) + (lo_lo >> half)
    high = hi_hi + (lo_hi >> half) + (hi_lo >> half) + (cross >> half)
    if signed:  # subtract y where x < 0 and x where y < 0 (mod 2**64)
        high = high - np.where(x < 0, uy, np.uint64(0)) - np.where(y < 0, ux, np.uint64(0))
    return high.view(x.dtype)


def _wrapping(impl, *args):
    with np.errstate(over="ignore"):
        return impl(*args)


shift_left_p = standard_primitive("shift_left", _shift_left,
                                  _binary_int_abstract_eval("shift_left"))
shift_right_arithmetic_p = standard_primitive(
    "shift_right_arithmetic", _shift_right_arithmetic,
    _binary_int_abstract_eval("shift_right_arithmetic"))
shift_right_logical_p = standard_primitive("shift_right_logical", _shift_right_logical,
                                           _binary_int_abstract_eval("shift_right_logical"))
mulhi_p = standard_primitive("mulhi", lambda x, y: _wrapping(_mulhi, x, y),
                             _binary_int_abstract_eval("mulhi"))
for _p in (shift_left_p, shift_right_arithmetic_p, shift_right_logical_p, mulhi_p):
    batching.broadcast_batcher(_p)
    ad.defjvp_zero(_p)


def _binary_fn(prim, doc):
    def fn(x, y, /):
        x, y = as_operands(prim.name, x, y)
        return prim.bind(x, y)

    fn.__name__ = prim.name
    fn.__doc__ = doc
    return fn


shift_left = _binary_fn(shift_left_p, "Elementwise ``x << y`` (0 where ``y`` is out of range).")
shift_right_arithmetic = _binary_fn(
    shift_right_arithmetic_p, "Elementwise ``x >> y`` filling with the sign bit.")
shift_right_logical = _binary_fn(
    shift_right_logical_p, "Elementwise ``x >> y`` of the unsigned bits, filling with zeros.")
mulhi = _binary_fn(mulhi_p, "The high N bits of the 2N-bit product of N-bit integers.")


# --- bitcast_convert_type --------------------------------------------------------------------


def _bitcast_abstract_eval(x, *, new_dtype):
    old, new = x.dtype, np.dtype(new_dtype)
    if old != new and (dtypes.kind(old) in "bc" or dtypes.kind(new) in "bc"):
        raise TypeError(f"lax.bitcast_convert_type does not support bool or complex values "
                        f"unless the operand and destination types match. Got operand "
                        f"dtype={old}, new_dtype={new}. Consider using the arr.view() method "
                        f"instead.")
    old_bits, new_bits = 8 * old.itemsize, 8 * new.itemsize
    if old_bits == new_bits:
        shape = x.shape
    elif old_bits > new_bits:
        shape = x.shape + (old_bits // new_bits,)
    else:
        last = x.shape[-1] if x.shape else 1
        if last * old_bits != new_bits:
            raise ValueError(f"Attempting to convert array of shape {x.shape} from {old} of "
                             f"size {old_bits} bits to {new} of size {new_bits}, bits but "
                             f"{last} * {old_bits} != {new_bits}")
        shape = x.shape[:-1]
    return ShapedArray(shape, new)


def _bitcast_impl(x, *, new_dtype):
    new = np.dtype(new_dtype)
    if new.itemsize > x.dtype.itemsize:
        return np.ascontiguousarray(x).view(new).reshape(x.shape[:-1])
    if new.itemsize < x.dtype.itemsize:
        return np.ascontiguousarray(x).view(new).reshape(x.shape + (-1,))
    return x.view(new)


bitcast_convert_type_p = standard_primitive("bitcast_convert_type", _bitcast_impl,
                                            _bitcast_abstract_eval)
ad.defjvp_zero(bitcast_convert_type_p)


def _bitcast_batch(vals, dims, *, new_dtype):
    (x,), (d,) = vals, dims
    ndim = core.get_aval(x).ndim
    if d == ndim - 1 and np.dtype(new_dtype).itemsize != core.get_aval(x).dtype.itemsize:
        x, d = transpose(x, (d,) + tuple(range(d))), 0  # the last dim is the bytes
    return bitcast_convert_type_p.bind(x, new_dtype=new_dtype), d


batching.primitive_batchers[bitcast_convert_type_p] = _bitcast_batch


def bitcast_convert_type(operand, new_dtype):
    """``operand``'s bits read as ``new_dtype``: a narrower type adds a trailing dim of the
    pieces, a wider one consumes the trailing dim."""
    return bitcast_convert_type_p.bind(operand, new_dtype=dtypes.canonicalize_dtype(new_dtype))


# --- reduce_precision ------------------------------------------------------------------------


def _reduce_precision_abstract_eval(x, *, exponent_bits, mantissa_bits):
    if dtypes.kind(x.dtype) != "f":
        raise TypeError(f"reduce_precision does not accept dtype {x.dtype.name}. Accepted "
                        f"dtypes are subtypes of floating.")
    if exponent_bits < 1:
        raise ValueError(f"reduce_precision: exponent_bits must be positive; got "
                         f"{exponent_bits}")
    if mantissa_bits < 0:
        raise ValueError(f"reduce_precision: mantissa_bits must be non-negative; got "
                         f"{mantissa_bits}")
    return x


def _reduce_precision_impl(x, *, exponent_bits, mantissa_bits):
    """XLA's ReducePrecision on the bits: round the mantissa to nearest even, then send
    exponents out of the narrower range to signed infinity (above) or signed zero (below);
    NaNs stay NaN."""
    info = dtypes.finfo(x.dtype)
    src_mantissa, src_exponent = info.nmant, info.nexp
    utype = _unsigned(x.dtype)
    bits = x.view(utype)
    one = utype.type(1)
    with np.errstate(over="ignore"):
        if mantissa_bits < src_mantissa:
            drop = utype.type(src_mantissa - mantissa_bits)
            last_bit = one << drop
            bias = (last_bit >> one) - one
            bits = bits + (((bits & last_bit) >> drop) + bias)
            bits = bits & ~(last_bit - one)
        if exponent_bits < src_exponent:
            width = 8 * x.dtype.itemsize
            sign = bits & (one << utype.type(width - 1))
            exp_mask = ((one << utype.type(src_exponent)) - one) << utype.type(src_mantissa)
            exponent_bias = (1 << (src_exponent - 1)) - 1
            reduced_bias = (1 << (exponent_bits - 1)) - 1
            exponent = bits & exp_mask
            overflows = exponent > utype.type((exponent_bias + reduced_bias) << src_mantissa)
            underflows = exponent <= utype.type((exponent_bias - reduced_bias)
                                                << src_mantissa)
            bits = np.where(overflows, sign | exp_mask, np.where(underflows, sign, bits))
    return np.where(np.isnan(x), x, np.asarray(bits, utype).view(x.dtype))


reduce_precision_p = standard_primitive("reduce_precision", _reduce_precision_impl,
                                        _reduce_precision_abstract_eval)
ad.deflinear(reduce_precision_p, lambda ct, **params: [reduce_precision_p.bind(ct, **params)])
batching.defvectorized(reduce_precision_p)


def reduce_precision(operand, exponent_bits, mantissa_bits):
    """``operand`` rounded to a float format with ``exponent_bits`` and ``mantissa_bits``
    (round to nearest even; overflow to infinity, underflow to zero)."""
    exponent_bits = operator.index(core.concrete_or_error(
        exponent_bits, "exponent_bits argument of lax.reduce_precision"))
    mantissa_bits = operator.index(core.concrete_or_error(
        mantissa_bits, "mantissa_bits argument of lax.reduce_precision"))
    if dtypes.is_python_scalar(operand):
        operand = np.asarray(operand, dtypes.dtype_and_weak(operand)[0])
    return reduce_precision_p.bind(operand, exponent_bits=exponent_bits,
                                   mantissa_bits=mantissa_bits)


del _p
