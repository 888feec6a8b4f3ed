"""The basic samplers, from which the others are built: ``uniform``, ``normal``, ``randint``,
``bernoulli`` and ``gumbel``, with the shape and dtype checks the samplers share.

Floats reproduce what JAX computes *on CPU* from the threefry bits, which is not what a plain
NumPy evaluation of the same formulas gives: XLA fuses ``a * b + c`` into one fused
multiply-add and evaluates ``log``/``log1p`` (float32) and ``erf_inv`` with its own polynomials
(``remat.random.kernels``). So ``uniform`` (any ``minval``/``maxval``), ``normal`` (real and
complex), ``gumbel`` and ``bernoulli`` equal ``jax.random`` on CPU to the last bit in float16,
float32 and float64, and in bfloat16 and the float8 formats, which XLA computes a step at a
time in float32 (float16 for the float8s), rounding each step as NumPy does on ml_dtypes arrays
(the kernels take them through float32 and round once). The reference is JAX's own call, as
made eagerly, on the machine the tests run on (an x86-64 with AVX-512): there XLA computes a
float16 ``uniform``'s ``u * (maxval - minval) + minval`` in float32 and rounds once (another
machine has been seen rounding each float16 step); inside a user's ``jax.jit`` XLA may also
fold constant bounds into the arithmetic (JAX's ``gumbel`` does this internally, and ``gumbel``
here follows it). ``uniform`` is differentiable in ``minval`` and ``maxval``, as in JAX.
"""

import numpy as np

from remat import core, dtypes, lax
from remat import numpy as jnp
from remat.lax.standard import canonical_shape
from remat.random.kernels import _const, _fma, xla_erf_inv_p, xla_log1p_p, xla_log_p
from remat.random.keys import _UINT, _check_key, _random_bits, _shift_right, _split

__all__ = ["bernoulli", "gumbel", "normal", "randint", "uniform"]


def _check_shape(name, shape, *param_shapes):
    if param_shapes:
        try:
            got = np.broadcast_shapes(shape, *param_shapes)
        except ValueError:
            raise ValueError(f"Incompatible shapes for broadcasting: shapes="
                             f"{[tuple(shape), *map(tuple, param_shapes)]}") from None
        if got != tuple(shape):
            raise ValueError(f"{name} parameter shapes must be broadcast-compatible with shape "
                             f"argument, and the result of broadcasting the shapes must equal "
                             f"the shape argument, but got result {got} for shape argument "
                             f"{tuple(shape)}.")


def _float_dtype(name, dtype):
    dtype = dtypes.canonicalize_dtype(dtypes.default_float_dtype() if dtype is None else dtype)
    if dtypes.kind(dtype) != "f":
        raise ValueError(f"dtype argument to `{name}` must be a float dtype, got {dtype.name}")
    return dtype


def _bcast_to(x, shape):
    x_shape = core.get_aval(x).shape
    if x_shape == tuple(shape):
        return x
    return jnp.broadcast_to(x, shape)


def _shape_of(x):
    return core.get_aval(x).shape if core.is_array_like(x) else np.shape(x)


def _check_broadcast_shapes(name, shape, *args):
    """``shape`` (canonical), or the broadcast shape of the parameters when it is None."""
    arg_shapes = [_shape_of(a) for a in args]
    if shape is None:
        return np.broadcast_shapes(*arg_shapes) if arg_shapes else ()
    shape = canonical_shape(shape)
    _check_shape(name, shape, *arg_shapes)
    return shape


def _check_all_safe_to_cast(name, dtype, *args):
    """Parameters must convert to the sample dtype without loss (weak Python scalars do)."""
    for arg in args:
        arg_dtype = jnp.result_type(arg)
        if arg_dtype != dtype and jnp.result_type(arg, dtype) != dtype:
            raise ValueError(f"In arguments to {name}, cannot safely cast argument of type "
                             f"{arg_dtype} to {dtype}")


def _as_inexact(x):
    """``x`` as an array of an inexact dtype (integers and booleans: the default float)."""
    x = jnp.asarray(x)
    if dtypes.kind(core.get_aval(x).dtype) not in "fc":
        x = lax.convert_element_type(x, dtypes.default_float_dtype())
    return x


def _int_dtype(name, dtype):
    dtype = dtypes.canonicalize_dtype(dtypes.default_int_dtype() if dtype is None else dtype)
    if dtypes.kind(dtype) not in "iu":
        raise ValueError(f"dtype argument to `{name}` must be an int dtype, got {dtype.name}")
    return dtype


def _uniform(key, shape, dtype, minval, maxval):
    """Floats in [minval, maxval): the top mantissa bits of random bits as a float in [0, 1)
    (exactly JAX's ``bitcast(bits >> shift | 1.0) - 1.0``), scaled and shifted. Formats of
    fewer than 8 mantissa bits (bfloat16, the float8s) take 8 random bits, as in JAX."""
    info = dtypes.finfo(dtype)
    nbits, nmant = info.bits, info.nmant
    if nbits not in (8, 16, 32, 64):
        raise TypeError(f"uniform only accepts 8-, 16-, 32-, or 64-bit dtypesgot {dtype}.")
    minval = lax.convert_element_type(jnp.asarray(minval), dtype)
    maxval = lax.convert_element_type(jnp.asarray(maxval), dtype)
    _check_shape("uniform", shape, core.get_aval(minval).shape, core.get_aval(maxval).shape)
    minval, maxval = _bcast_to(minval, shape), _bcast_to(maxval, shape)
    rng_bits = 8 if nmant < 8 else nbits
    bits = _random_bits(key, rng_bits, shape)
    if rng_bits != nbits:
        bits = lax.convert_element_type(bits, _UINT[nbits])
    shift = rng_bits - nmant  # float8_e8m0fnu has no mantissa: all bits shift out
    mantissa = _shift_right(bits, shift) if shift < nbits else lax.full_like(bits, 0)
    floats = lax.mul(lax.convert_element_type(mantissa, dtype),
                     _const(2.0 ** -nmant, dtype))
    span = lax.sub(maxval, minval)
    if dtype == dtypes.float16:  # XLA's CPU backend computes it in float32, rounding once
        wide = [lax.convert_element_type(x, dtypes.float32) for x in (floats, span, minval)]
        scaled = lax.convert_element_type(lax.add(lax.mul(wide[0], wide[1]), wide[2]), dtype)
    elif nbits < 32:  # bfloat16, float8: XLA rounds each step, as NumPy on ml_dtypes does
        scaled = lax.add(lax.mul(floats, span), minval)
    else:
        scaled = _fma(floats, span, minval)
    return lax.max(minval, scaled)


def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0):
    """Floats uniform in ``[minval, maxval)`` (bounds broadcast against ``shape``)."""
    key, _ = _check_key("uniform", key)
    dtype = _float_dtype("uniform", dtype)
    return _uniform(key, canonical_shape(shape), dtype, minval, maxval)


def _normal_real(key, shape, dtype):
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = _uniform(key, shape, dtype, lo, np.array(1.0, dtype))
    return lax.mul(_const(np.sqrt(2), dtype), xla_erf_inv_p.bind(u))


def normal(key, shape=(), dtype=None):
    """Standard normal values: ``sqrt(2) * erf_inv(u)`` with ``u`` uniform in (-1, 1); for a
    complex dtype, independent real and imaginary parts of variance 1/2."""
    key, _ = _check_key("normal", key)
    dtype = dtypes.canonicalize_dtype(dtypes.default_float_dtype() if dtype is None else dtype)
    if dtypes.kind(dtype) not in "fc":
        raise ValueError(f"dtype argument to `normal` must be a float or complex dtype, got "
                         f"{dtype.name}")
    return _normal(key, canonical_shape(shape), dtype)


def _normal(key, shape, dtype):
    if dtypes.kind(dtype) == "f":
        return _normal_real(key, shape, dtype)
    real_dtype = dtypes.finfo(dtype).dtype
    k_re, k_im = _split(key, (2,))
    re = lax.convert_element_type(_normal_real(k_re, shape, real_dtype), dtype)
    im = lax.convert_element_type(_normal_real(k_im, shape, real_dtype), dtype)
    return jnp.divide(jnp.add(re, jnp.multiply(1j, im)), _const(np.sqrt(2), dtype))


def bernoulli(key, p=0.5, shape=None, mode="low"):
    """Booleans that are True with probability ``p`` (``mode='high'`` draws twice the bits,
    for probabilities below the float's resolution)."""
    if shape is not None:
        shape = canonical_shape(shape)
    if mode not in ("high", "low"):
        raise ValueError(f"got mode={mode!r}, expected 'high' or 'low'")
    key, _ = _check_key("bernoulli", key)
    p = jnp.asarray(p)
    dtype = core.get_aval(p).dtype
    if dtypes.kind(dtype) != "f":
        raise TypeError(f"bernoulli probability `p` must have a floating dtype, got "
                        f"{dtype.name}.")
    if shape is None:
        shape = core.get_aval(p).shape
    else:
        _check_shape("bernoulli", shape, core.get_aval(p).shape)
    if mode == "high":
        u = _uniform(key, (2, *shape), dtype, 0.0, 1.0)
        u1 = lax.reshape(lax.slice_in_dim(u, 0, 1), shape)
        u2 = lax.reshape(lax.slice_in_dim(u, 1, 2), shape)
        u2 = lax.mul(u2, _const(2.0 ** -dtypes.finfo(dtype).nmant, dtype))
        return jnp.less(u2, jnp.subtract(p, u1))
    return jnp.less(_uniform(key, shape, dtype, 0.0, 1.0), p)


def _convert_and_clip_integer(val, dtype):
    """``val`` (integer) in integer ``dtype``, clipped to its range rather than wrapped."""
    src = core.get_aval(val).dtype
    lo = max(dtypes.iinfo(dtype).min, dtypes.iinfo(src).min)
    hi = min(dtypes.iinfo(dtype).max, dtypes.iinfo(src).max)
    val = lax.clamp(_const(lo, src), val, _const(hi, src))
    return lax.convert_element_type(val, dtype)


def _int_operand(x):
    x = jnp.asarray(x)
    if dtypes.kind(core.get_aval(x).dtype) not in "iu":
        x = lax.convert_element_type(x, dtypes.default_int_dtype())
    return x


def randint(key, shape, minval, maxval, dtype=None):
    """Integers uniform in ``[minval, maxval)``. Like JAX, a value takes two draws of the
    dtype's width (``hi * (2**nbits mod span) + lo mod span``), which keeps the modulo bias
    small; 8- and 16-bit dtypes are sampled in 32 bits."""
    key, _ = _check_key("randint", key)
    dtype = dtypes.canonicalize_dtype(dtypes.default_int_dtype() if dtype is None else dtype)
    if dtypes.kind(dtype) not in "iu":
        raise TypeError(f"randint only accepts integer dtypes, got {dtype.name}")
    return _randint(key, canonical_shape(shape), minval, maxval, dtype)


def _randint(key, shape, minval, maxval, dtype):
    info = dtypes.iinfo(dtype)
    sample_dtype = dtype
    minval, maxval = _int_operand(minval), _int_operand(maxval)
    if info.bits < 32:
        sample_dtype = dtypes.int32
        minval = jnp.clip(lax.convert_element_type(minval, dtypes.int32), int(info.min),
                          int(info.max))
        maxval = jnp.clip(lax.convert_element_type(maxval, dtypes.int32), int(info.min),
                          int(info.max) + 1)
    out = _randint_in_dtype(key, minval, maxval, shape, sample_dtype)
    return lax.convert_element_type(out, dtype)


def _randint_in_dtype(key, minval, maxval, shape, dtype):
    _check_shape("randint", shape, core.get_aval(minval).shape, core.get_aval(maxval).shape)
    # maxval beyond the dtype's range (randint(key, s, 0, 256, uint8)): one more value
    maxval_dtype = core.get_aval(maxval).dtype
    dtype_max = _convert_and_clip_integer(_const(dtypes.iinfo(dtype).max, dtype),
                                          maxval_dtype)
    out_of_range = jnp.greater(maxval, dtype_max)
    minval = _bcast_to(_convert_and_clip_integer(minval, dtype), shape)
    maxval = _bcast_to(_convert_and_clip_integer(maxval, dtype), shape)
    out_of_range = _bcast_to(out_of_range, shape)
    nbits = dtypes.iinfo(dtype).bits
    unsigned = _UINT[nbits]
    k1, k2 = _split(key, (2,))
    higher_bits = _random_bits(k1, nbits, shape)
    lower_bits = _random_bits(k2, nbits, shape)
    span = lax.convert_element_type(lax.sub(maxval, minval), unsigned)
    one = lax.full(shape, 1, unsigned)
    span = lax.select(lax.le(maxval, minval), one, span)  # maxval <= minval gives minval
    span = lax.select(lax.bitwise_and(out_of_range, lax.gt(maxval, minval)),
                      lax.add(span, one), span)  # may wrap to 0: then rem leaves x as is
    # (hi * 2**nbits + lo) mod span, with 2**nbits mod span computed without overflow
    multiplier = _rem(lax.full(shape, 1 << (nbits // 2), unsigned), span)
    multiplier = _rem(lax.mul(multiplier, multiplier), span)
    offset = lax.add(lax.mul(_rem(higher_bits, span), multiplier), _rem(lower_bits, span))
    offset = _rem(offset, span)
    return lax.add(minval, lax.convert_element_type(offset, dtype))


def _rem(x, y):
    """Unsigned remainder with XLA's ``x rem 0 = x``."""
    zero = lax.eq(y, _const(0, core.get_aval(y).dtype))
    return lax.select(zero, x, lax.rem(x, lax.select(zero, lax.full_like(y, 1), y)))


def _gumbel(key, shape, dtype, mode):
    if mode == "high":
        u = _uniform(key, (2, *shape), dtype, 0.0, 1.0)
        high = lax.reshape(lax.slice_in_dim(u, 0, 1), shape)
        low = lax.reshape(lax.slice_in_dim(u, 1, 2), shape)
        info = dtypes.finfo(dtype)
        fine = lax.add(lax.add(high, lax.mul(_const(2.0 ** -info.nmant, dtype), low)),
                       _const(info.tiny, dtype))
        x = lax.select(lax.ge(high, _const(0.5, dtype)), high, fine)
        return lax.neg(xla_log_p.bind(lax.neg(xla_log1p_p.bind(lax.neg(x)))))
    # JAX draws uniform(minval=tiny, maxval=1) inside a jitted function, where XLA folds
    # (bits - 1) + tiny into bits + round(tiny - 1) = bits - 1: the draw is max(tiny, f).
    u = lax.max(_const(dtypes.finfo(dtype).tiny, dtype), _uniform(key, shape, dtype, 0.0, 1.0))
    return lax.neg(xla_log_p.bind(lax.neg(xla_log_p.bind(u))))


def _gumbel_mode(mode):
    mode = "low" if mode is None else mode
    if mode not in ("high", "low"):
        raise ValueError(f"Must provide valid mode for gumbel got: {mode} (remat has 'low' "
                         f"and 'high')")
    return mode


def gumbel(key, shape=(), dtype=None, mode=None):
    """Standard Gumbel floats, ``-log(-log(u))``; ``mode='high'`` uses twice the bits to
    reach further into the tail."""
    key, _ = _check_key("gumbel", key)
    dtype = _float_dtype("gumbel", dtype)
    return _gumbel(key, canonical_shape(shape), dtype, _gumbel_mode(mode))

