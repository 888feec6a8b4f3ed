"""The XLA random-number primitives: ``rng_uniform`` (stateful: each evaluation draws anew
from a process-wide NumPy generator, so it is marked effectful and never merged or dropped)
and ``rng_bit_generator`` (stateless: a key in, the advanced key and the bits out), whose bits
come from Threefry-2x32 run over a 64-bit counter held in the key, for every
``RandomAlgorithm``. Shapes and dtypes are JAX's; the bits are not XLA's."""

import enum

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.slicing import dynamic_update_index_in_dim, index_in_dim
from remat.lax.standard import canonical_shape, standard_primitive

__all__ = [
    "RandomAlgorithm",
    "rng_bit_generator",
    "rng_bit_generator_p",
    "rng_uniform",
    "rng_uniform_p",
]


class RandomAlgorithm(enum.IntEnum):
    """Which PRNG algorithm ``rng_bit_generator`` uses (remat uses Threefry for all)."""

    RNG_DEFAULT = 0
    RNG_THREE_FRY = 1
    RNG_PHILOX = 2

    def __str__(self):
        return self.name


# --- rng_uniform -----------------------------------------------------------------------------

_generator = np.random.default_rng()


def _rng_uniform_abstract_eval(a, b, *, shape):
    if a.dtype != b.dtype:
        raise ValueError(f"Arguments to rng_uniform must have identical dtypes, got "
                         f"{a.dtype} and {b.dtype}.")
    if a.shape or b.shape:
        raise ValueError(f"Arguments to rng_uniform must be scalars; got shapes {a.shape} and "
                         f"{b.shape}.")
    if dtypes.kind(a.dtype) not in "iuf":
        raise TypeError(f"rng_uniform does not accept dtype {a.dtype.name}. Accepted dtypes "
                        f"are subtypes of integer and floating.")
    return ShapedArray(shape, a.dtype, a.weak_type and b.weak_type)


def _rng_uniform_impl(a, b, *, shape):
    if dtypes.kind(a.dtype) in "iu":
        return _generator.integers(a, b, size=shape, dtype=a.dtype, endpoint=False) \
            if b > a else np.full(shape, a, a.dtype)
    u = _generator.random(size=shape, dtype=np.float64)
    return (a + (b - a) * u).astype(a.dtype)


rng_uniform_p = standard_primitive("rng_uniform", _rng_uniform_impl,
                                   _rng_uniform_abstract_eval)
rng_uniform_p.has_effects = True  # each draw is new: never merged (CSE) nor dropped (DCE)
ad.defjvp_zero(rng_uniform_p)


def rng_uniform(a, b, shape):
    """Uniform values in ``[a, b)`` of ``shape`` from a stateful generator (as XLA's ``Rng``);
    prefer ``remat.random``."""
    return rng_uniform_p.bind(a, b, shape=canonical_shape(shape, "rng_uniform shape"))


# --- rng_bit_generator -----------------------------------------------------------------------

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(k1, k2, x1, x2):
    """Threefry-2x32, 20 rounds (Salmon et al. 2011), on uint32 arrays."""
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    with np.errstate(over="ignore"):
        a, b = x1 + ks[0], x2 + ks[1]
        for i in range(5):
            for r in _ROTATIONS[i % 2]:
                a = a + b
                b = ((b << np.uint32(r)) | (b >> np.uint32(32 - r))) ^ a
            a = a + ks[(i + 1) % 3]
            b = b + ks[(i + 2) % 3] + np.uint32(i + 1)
    return a, b


_BIT_DTYPES = {np.dtype(d) for d in (np.uint8, np.uint16, np.uint32, np.uint64)}


def _rng_bit_generator_abstract_eval(key, *, shape, dtype, algorithm):
    if not ((key.shape == (4,) and key.dtype == np.uint32) or
            (key.shape == (2,) and key.dtype == np.uint64)):
        raise TypeError(f"rng_bit_generator key must be uint32[4] or uint64[2], got "
                        f"{key.str_short()}")
    return [ShapedArray(key.shape, key.dtype, key.weak_type), ShapedArray(shape, dtype)]


def _rng_bit_generator_impl(key, *, shape, dtype, algorithm):
    words = np.ascontiguousarray(key).view(np.uint32)
    k1, k2 = words[0], words[1]
    counter = int(words[2]) | (int(words[3]) << 32)
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    per_value = 2 if dtype.itemsize == 8 else 1
    blocks = -(-n * per_value // 2)
    index = (np.arange(blocks, dtype=np.uint64) + np.uint64(counter)).astype(np.uint64)
    hi, lo = _threefry2x32(k1, k2, (index >> np.uint64(32)).astype(np.uint32),
                           (index & np.uint64(0xFFFFFFFF)).astype(np.uint32))
    bits = np.stack([hi, lo], -1).reshape(-1)[:n * per_value]
    if per_value == 2:
        values = bits.view(np.uint64)
    else:
        values = bits.astype(dtype)  # u8/u16: the low bits of each word, as XLA truncates
    advanced = (counter + blocks) % (1 << 64)
    new_words = np.array([k1, k2, advanced & 0xFFFFFFFF, advanced >> 32], np.uint32)
    return [new_words.view(key.dtype), values.reshape(shape)]


rng_bit_generator_p = standard_primitive("rng_bit_generator", _rng_bit_generator_impl,
                                         _rng_bit_generator_abstract_eval,
                                         multiple_results=True)
ad.defjvp_zero(rng_bit_generator_p)


def _rng_bit_generator_batch(vals, dims, *, shape, dtype, algorithm):
    """As JAX's: the first example's key draws the bits of the whole batch at once, and only
    that key advances."""
    (keys,), (d,) = vals, dims
    keys = batching.moveaxis(keys, d, 0)
    size = core.get_aval(keys).shape[0]
    key = index_in_dim(keys, 0, 0, keepdims=False)
    new_key, bits = rng_bit_generator_p.bind(key, shape=(size,) + tuple(shape), dtype=dtype,
                                             algorithm=algorithm)
    return [dynamic_update_index_in_dim(keys, new_key, 0, 0), bits], [0, 0]


batching.primitive_batchers[rng_bit_generator_p] = _rng_bit_generator_batch


def rng_bit_generator(key, shape, dtype=np.uint32, algorithm=RandomAlgorithm.RNG_DEFAULT, *,
                      out_sharding=None):
    """``(new_key, bits)``: unsigned random bits of ``shape`` and ``dtype`` from ``key``
    (uint32[4]), and the key to use next."""
    shape = canonical_shape(shape, "rng_bit_generator shape")
    dtype = dtypes.canonicalize_dtype(dtype)
    if dtype not in _BIT_DTYPES:
        raise TypeError(f"rng_bit_generator: unsupported dtype {dtype}")
    return tuple(rng_bit_generator_p.bind(key, shape=shape, dtype=dtype,
                                          algorithm=RandomAlgorithm(algorithm)))
