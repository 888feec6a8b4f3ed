"""Keys: the threefry2x32 hash, typed key arrays and raw keys, and what is done to keys
(seeding, ``split``, ``fold_in``, ``bits``), laid out exactly as JAX lays them out.

Two kinds of key are accepted everywhere. A *raw* key is a ``uint32[2]`` array
(``PRNGKey``); a *typed* key is a scalar of dtype ``key<fry>`` (``key``), an extended dtype
whose values are held as 8-byte NumPy records, so key arrays index, reshape, concatenate and
flow through ``jit``, ``vmap``, ``scan``, ``cond`` and ``checkpoint`` like any array, and
have float0 tangents. ``random_wrap``/``random_unwrap`` convert between the two (they are
primitives, so the conversion works on traced keys); every sampler unwraps a typed key and
hashes its data, and ``split``/``fold_in`` hand back the kind of key they were given.

Bits come from ``threefry2x32`` (a primitive with a NumPy impl, abstract eval, batching rule
and zero JVP) applied to counters laid out as in JAX. JAX has two layouts, chosen by the flag
``jax_threefry_partitionable``: ``True`` (JAX's default since 0.5, and ours) hashes the
counter of every output element on its own; ``False`` hashes ``iota`` split into two halves
and concatenates the halves. Both are implemented; the flag is read at call time.
"""

import math
import warnings
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from remat import core, dtypes, lax
from remat import numpy as jnp
from remat.config import config
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.standard import broadcasting_shape, canonical_shape, standard_primitive
from remat.random.kernels import _const, _elements, _elementwise_batch

__all__ = [
    "PRNGKey",
    "bits",
    "clone",
    "fold_in",
    "key",
    "key_data",
    "key_dtype",
    "key_impl",
    "random_clone_p",
    "random_unwrap_p",
    "random_wrap_p",
    "split",
    "threefry2x32_p",
    "threefry_2x32",
    "wrap_key_data",
]

_UINT = {8: dtypes.uint8, 16: dtypes.uint16, 32: dtypes.uint32, 64: dtypes.uint64}


def _partitionable():
    return config.read("jax_threefry_partitionable")


# --- the threefry2x32 primitive --------------------------------------------------------------

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32_impl(k1, k2, x1, x2):
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011), in uint32 arithmetic that wraps."""
    shape = np.broadcast_shapes(k1.shape, k2.shape, x1.shape, x2.shape)
    if math.prod(shape) < _FEW_ELEMENTS:
        return _threefry2x32_elements(k1, k2, x1, x2, shape)
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(_PARITY))
    with np.errstate(over="ignore"):
        a = np.array(np.broadcast_to(x1 + ks[0], shape), dtype=np.uint32)
        b = np.array(np.broadcast_to(x2 + ks[1], shape), dtype=np.uint32)
        for i in range(5):
            for r in _ROTATIONS[i % 2]:
                a += b
                t = np.left_shift(b, np.uint32(r))
                np.right_shift(b, np.uint32(32 - r), out=b)
                b |= t
                b ^= a
            a += ks[(i + 1) % 3]
            b += ks[(i + 2) % 3]
            b += np.uint32(i + 1)
    return [a, b]


def _threefry2x32_elements(k1, k2, x1, x2, shape):
    """``_threefry2x32_impl`` on Python ints, element by element: on a few elements (a key
    split, one draw) its hundred NumPy calls cost more than the arithmetic."""
    out_a, out_b = [], []
    for key1, key2, a, b in zip(*(_elements(v, shape) for v in (k1, k2, x1, x2))):
        ks = (key1, key2, key1 ^ key2 ^ _PARITY)
        a, b = (a + key1) & _MASK, (b + key2) & _MASK
        for i in range(5):
            for r in _ROTATIONS[i % 2]:
                a = (a + b) & _MASK
                b = (((b << r) & _MASK) | (b >> (32 - r))) ^ a
            a = (a + ks[(i + 1) % 3]) & _MASK
            b = (b + ks[(i + 2) % 3] + i + 1) & _MASK
        out_a.append(a)
        out_b.append(b)
    return [np.array(out_a, np.uint32).reshape(shape), np.array(out_b, np.uint32).reshape(shape)]


_PARITY, _MASK = 0x1BD11BDA, 0xFFFFFFFF
_FEW_ELEMENTS = 16


def _threefry2x32_abstract_eval(k1, k2, x1, x2):
    avals = (k1, k2, x1, x2)
    if any(a.dtype != dtypes.uint32 for a in avals):
        got = ", ".join(a.dtype.name for a in avals)
        raise TypeError(f"Arguments to threefry2x32 must have uint32 type, got {got}")
    out = ShapedArray(broadcasting_shape("threefry2x32", avals), dtypes.uint32)
    return [out, out]


threefry2x32_p = standard_primitive("threefry2x32", _threefry2x32_impl,
                                    _threefry2x32_abstract_eval, multiple_results=True)
ad.defjvp_zero(threefry2x32_p)
_elementwise_batch(threefry2x32_p)


def threefry_2x32(keypair, count):
    """The threefry hash of ``count`` (uint32, any shape) under ``keypair``: the flattened
    counts, padded to even length, are split in two halves that are hashed as pairs, and the
    two output halves concatenated (JAX's ``threefry_2x32``)."""
    if isinstance(keypair, (tuple, list)):
        key1, key2 = keypair
    else:
        key1, key2 = _key_words(keypair)
    count = jnp.asarray(count)
    got = [core.get_aval(x).dtype for x in (key1, key2, count)]
    if any(d != dtypes.uint32 for d in got):
        raise TypeError(f"threefry_2x32 requires uint32 arguments, got {[d.name for d in got]}")
    shape = core.get_aval(count).shape
    n = math.prod(shape)
    flat = lax.reshape(count, (n,))
    if n % 2:
        flat = lax.concatenate([flat, lax.full((1,), 0, dtypes.uint32)], 0)
    half = (n + 1) // 2
    y1, y2 = threefry2x32_p.bind(key1, key2, lax.slice(flat, (0,), (half,)),
                                 lax.slice(flat, (half,), (2 * half,)))
    out = lax.concatenate([y1, y2], 0)
    if n % 2:
        out = lax.slice(out, (0,), (n,))
    return lax.reshape(out, shape)


# --- key types -------------------------------------------------------------------------------


class PRNGImpl(NamedTuple):
    """A PRNG implementation: the shape of its key data, its name and its short tag (the
    dtype of its keys is ``key<tag>``)."""

    key_shape: tuple
    name: str
    tag: str

    def __str__(self):
        return self.tag


threefry_prng_impl = PRNGImpl((2,), "threefry2x32", "fry")
prngs = {threefry_prng_impl.name: threefry_prng_impl}
# names JAX also knows; remat implements only threefry2x32
_JAX_ONLY_IMPLS = ("threefry4x32", "philox2x32", "philox4x32", "rbg", "unsafe_rbg")


class KeyTy(dtypes.ExtendedDType):
    """The dtype of typed keys of one implementation: ``key<fry>``, held as records of the
    implementation's ``uint32`` key data."""

    type = dtypes.prng_key

    def __init__(self, impl):
        self._impl = impl
        name = f"key<{impl.tag}>"
        super().__init__(name, [(name, np.uint32, impl.key_shape)])


_KEY_TYPES = {impl: KeyTy(impl) for impl in prngs.values()}


def is_key(x):
    """Whether ``x`` (an array or tracer) is a typed key array."""
    return isinstance(core.get_aval(x).dtype, KeyTy)


def resolve_prng_impl(spec):
    """The implementation a user's ``impl``/``dtype`` argument names (None: the default,
    the flag ``jax_default_prng_impl``)."""
    if spec is None:
        spec = config.read("jax_default_prng_impl")
    if type(spec) is PRNGImpl:
        return spec
    if isinstance(spec, KeyTy):
        return spec._impl
    if type(spec) is str:
        if spec in prngs:
            return prngs[spec]
        if spec in _JAX_ONLY_IMPLS:
            raise ValueError(f'PRNG implementation "{spec}" is not available in remat, which '
                             f'implements "threefry2x32" only.')
        names = ", ".join(f'"{name}"' for name in prngs)
        raise ValueError(f'unrecognized PRNG implementation "{spec}". Did you mean one of: '
                         f'{names}?')
    raise TypeError(f"unrecognized type {type(spec)} for specifying PRNG implementation.")


def key_dtype(impl_spec=None):
    """The dtype of the keys of a PRNG implementation (``key<fry>`` for threefry2x32)."""
    return _KEY_TYPES[resolve_prng_impl(impl_spec)]


def _check_key_data(impl, aval):
    """JAX's checks of raw key data (TypeError, as ``random_wrap`` raises)."""
    n = len(impl.key_shape)
    if aval.ndim < 1:
        raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.ndim >= 1; "
                        f"got ndim={aval.ndim}")
    if aval.shape[-n:] != impl.key_shape:
        raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.shape to "
                        f"end with {impl.key_shape}; got shape={aval.shape} for "
                        f"impl={impl.name}")
    if aval.dtype != dtypes.uint32:
        raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.dtype = "
                        f"uint32; got dtype={aval.dtype}")


# --- wrapping and unwrapping: the primitives between raw and typed keys ----------------------


def _wrap_impl(data, *, impl):
    key_ty = _KEY_TYPES[impl]
    shape = data.shape[:data.ndim - len(impl.key_shape)]
    return np.array(data, np.uint32, order="C").view(key_ty.dtype).reshape(shape)


def _wrap_abstract_eval(data, *, impl):
    _check_key_data(impl, data)
    return ShapedArray(data.shape[:data.ndim - len(impl.key_shape)], _KEY_TYPES[impl])


random_wrap_p = standard_primitive("random_wrap", _wrap_impl, _wrap_abstract_eval)
ad.defjvp_zero(random_wrap_p)


def _wrap_batch(vals, dims, *, impl):
    (data,), (d,) = vals, dims
    if d >= core.get_aval(data).ndim - len(impl.key_shape):  # batched along the key data
        data, d = batching.moveaxis(data, d, 0), 0
    return random_wrap_p.bind(data, impl=impl), d


batching.primitive_batchers[random_wrap_p] = _wrap_batch


def _unwrap_impl(keys):
    return np.array(keys[keys.dtype.names[0]], np.uint32)


def _unwrap_abstract_eval(keys):
    if not isinstance(keys.dtype, KeyTy):
        raise TypeError(f"random_unwrap takes key array operand, got keys.dtype={keys.dtype}")
    return ShapedArray(keys.shape + keys.dtype._impl.key_shape, dtypes.uint32)


random_unwrap_p = standard_primitive("random_unwrap", _unwrap_impl, _unwrap_abstract_eval)
ad.defjvp_zero(random_unwrap_p)
batching.defvectorized(random_unwrap_p)  # the key data's axes come after the batch axis

random_clone_p = standard_primitive("random_clone", np.copy, lambda x: x)
ad.deflinear(random_clone_p, lambda ct: [random_clone_p.bind(ct)])
batching.defvectorized(random_clone_p)


def _wrap(data, impl=threefry_prng_impl):
    return random_wrap_p.bind(data, impl=impl)


def _check_key(name, key, allow_batched=False):
    """``(data, typed)``: the raw ``uint32[..., 2]`` data of a typed or raw key, and whether
    it was typed. A single key unless ``allow_batched`` (batches of keys are for ``vmap``)."""
    if not core.is_array_like(key):
        raise TypeError(f"unexpected PRNG key type {type(key)}")
    aval = core.get_aval(key)
    typed = isinstance(aval.dtype, KeyTy)
    if not typed:
        _check_key_data(threefry_prng_impl, aval)
    shape = aval.shape if typed else aval.shape[:-1]
    if shape and not allow_batched:
        raise ValueError(f"{name} accepts a single key, but was given a key array of shape "
                         f"{aval.shape} != (). Use jax.vmap for batching.")
    if typed:
        return random_unwrap_p.bind(key), True
    legacy = config.read("jax_legacy_prng_key")
    if legacy != "allow":
        message = ("Legacy uint32 key array passed as key to jax.random function. Please create "
                   "keys using jax.random.key(). If use of a raw key array was intended, set "
                   'jax_legacy_prng_key="allow".')
        if legacy == "error":
            raise ValueError(message)
        warnings.warn(message, stacklevel=3)
    if not hasattr(key, "aval"):
        key = jnp.asarray(key)
    return key, False


def _key_words(key):
    """The two uint32 scalars of a raw key."""
    return (lax.reshape(lax.slice(key, (0,), (1,)), ()),
            lax.reshape(lax.slice(key, (1,), (2,)), ()))


def _shape_of(x):
    return core.get_aval(x).shape if hasattr(x, "aval") else np.shape(x)


# --- making keys -----------------------------------------------------------------------------


def _seed(ctor, seed):
    """The raw key of a seed: its 64 bits as two uint32 words (high word 0 for narrower
    seeds). Python ints must fit int64; without x64 the seed is taken modulo 2**32 first."""
    if hasattr(seed, "aval") and is_key(seed):
        raise TypeError(f"{ctor} accepts a scalar seed, but was given a PRNG key.")
    if _shape_of(seed):
        raise TypeError(f"{ctor} accepts a scalar seed, but was given an array of shape "
                        f"{_shape_of(seed)} != (). Use jax.vmap for batching")
    if type(seed) in (bool, int):
        seed = np.int64(seed)  # JAX's rule: any int64 seed; wraps to int32 without x64
    seed = jnp.asarray(seed)
    dtype = core.get_aval(seed).dtype
    if dtypes.kind(dtype) not in "iu":
        raise TypeError(f"PRNG key seed must be an integer; got {seed!r}")
    lo = lax.convert_element_type(seed, dtypes.uint32)
    if dtype.itemsize == 8:
        hi = lax.div(lax.convert_element_type(seed, dtypes.uint64), np.uint64(1 << 32))
        hi = lax.convert_element_type(hi, dtypes.uint32)
    else:
        hi = _const(0, dtypes.uint32)
    return lax.concatenate([lax.reshape(hi, (1,)), lax.reshape(lo, (1,))], 0)


def PRNGKey(seed, *, impl=None):
    """A raw (legacy) key, ``uint32[2]``, from an integer seed."""
    resolve_prng_impl(impl)
    return _seed("PRNGKey", seed)


def key(seed, *, impl=None, dtype=None):
    """A typed key (a scalar of dtype ``key<fry>``) from an integer seed; same data as
    ``PRNGKey(seed)``."""
    if dtype is not None:
        if impl is not None:
            raise ValueError("Cannot specify both `impl` and `dtype` arguments to "
                             "jax.random.key")
        impl = dtype
    return _wrap(_seed("key", seed), resolve_prng_impl(impl))


def key_data(keys):
    """The raw ``uint32[..., 2]`` data of typed keys (raw keys are returned as they are)."""
    data, _ = _check_key("key_data", keys, allow_batched=True)
    return data


def wrap_key_data(key_bits_array, *, impl=None, dtype=None):
    """Typed keys from raw ``uint32[..., 2]`` data (of shape ``key_bits_array.shape[:-1]``)."""
    if dtype is not None:
        if impl is not None:
            raise ValueError("Cannot specify both `impl` and `dtype` arguments to "
                             "jax.random.wrap_key_data")
        impl = dtype
    impl = resolve_prng_impl(impl)
    if not hasattr(key_bits_array, "aval"):
        key_bits_array = jnp.asarray(key_bits_array)
    return random_wrap_p.bind(key_bits_array, impl=impl)


def key_impl(keys):
    """The name of the implementation of ``keys`` (raw keys: the default, threefry2x32)."""
    keys, _ = _check_key("key_impl", keys, allow_batched=True)
    return threefry_prng_impl.name


def clone(key):
    """A copy of ``key`` (for key-reuse checkers; values are immutable here)."""
    return random_clone_p.bind(key)


# --- split and fold_in -----------------------------------------------------------------------


def _iota_2x32(shape):
    """The row-major index of every element of ``shape`` as (high, low) uint32 words."""
    size = math.prod(shape)
    if size >= 1 << 32:
        raise ValueError(f"random arrays of {size} >= 2**32 elements are not supported")
    return lax.full(shape, 0, dtypes.uint32), lax.reshape(lax.iota(dtypes.uint32, size), shape)


def _split(key, shape):
    """Raw keys of ``shape`` from one raw key."""
    if _partitionable():
        k1, k2 = _key_words(key)
        b1, b2 = threefry2x32_p.bind(k1, k2, *_iota_2x32(shape))
        return jnp.stack([b1, b2], axis=len(shape))
    count = lax.iota(dtypes.uint32, 2 * math.prod(shape))
    return lax.reshape(threefry_2x32(key, count), (*shape, 2))


def split(key, num=2):
    """``num`` new keys (an array of keys of shape ``num`` when it is a tuple), of the kind
    of ``key``: typed keys of shape ``(num,)`` or raw ``uint32[num, 2]``."""
    data, typed = _check_key("split", key)
    shape = tuple(num) if isinstance(num, Sequence) else (num,)
    out = _split(data, canonical_shape(shape, "num"))
    return _wrap(out) if typed else out


def fold_in(key, data):
    """A new key from ``key`` and a 32-bit integer ``data``: the hash of ``[0, data]``."""
    key, typed = _check_key("fold_in", key)
    if _shape_of(data):
        raise TypeError(f"fold_in accepts a scalar, but was given an array of shape "
                        f"{_shape_of(data)} != (). Use jax.vmap for batching.")
    if type(data) is int:
        if not 0 <= data < 1 << 32:
            raise OverflowError(f"Python integer {data} out of bounds for uint32")
        data = np.uint32(data)
    data = lax.convert_element_type(jnp.asarray(data), dtypes.uint32)
    counts = lax.concatenate([lax.full((1,), 0, dtypes.uint32), lax.reshape(data, (1,))], 0)
    out = threefry_2x32(key, counts)
    return _wrap(out) if typed else out


# --- bits ------------------------------------------------------------------------------------


def _shift_left(x, n):
    return lax.mul(x, _const(1 << n, core.get_aval(x).dtype))


def _shift_right(x, n):
    """Logical right shift of an unsigned array."""
    return lax.div(x, _const(1 << n, core.get_aval(x).dtype))


def _random_bits(key, bit_width, shape):
    """``uint{bit_width}`` bits of ``shape`` from a raw key, laid out as JAX lays them out."""
    dtype = _UINT[bit_width]
    if _partitionable():
        k1, k2 = _key_words(key)
        b1, b2 = threefry2x32_p.bind(k1, k2, *_iota_2x32(shape))
        if bit_width == 64:
            return lax.bitwise_or(_shift_left(lax.convert_element_type(b1, dtype), 32),
                                  lax.convert_element_type(b2, dtype))
        bits = lax.bitwise_xor(b1, b2)
        return bits if bit_width == 32 else lax.convert_element_type(bits, dtype)
    size = math.prod(shape)
    count = -(-bit_width * size // 32)
    if count >= (1 << 32) - 1:
        raise ValueError(f"random arrays of {size} elements are not supported")
    bits = threefry_2x32(key, lax.iota(dtypes.uint32, count))
    if bit_width == 64:
        hi, lo = (lax.convert_element_type(lax.slice(bits, (a,), (b,)), dtype)
                  for a, b in ((0, count // 2), (count // 2, count)))
        bits = lax.bitwise_or(_shift_left(hi, 32), lo)
    elif bit_width < 32:
        # each 32-bit word gives 32 // bit_width values, low bits first (a little-endian view)
        mask = _const((1 << bit_width) - 1, dtypes.uint32)
        parts = [lax.bitwise_and(_shift_right(bits, bit_width * j), mask)
                 for j in range(32 // bit_width)]
        bits = lax.reshape(jnp.stack(parts, axis=1), (count * 32 // bit_width,))
        bits = lax.convert_element_type(lax.slice(bits, (0,), (size,)), dtype)
    return lax.reshape(bits, shape)


def bits(key, shape=(), dtype=None):
    """Uniform random bits as unsigned integers (``uint64`` with x64, else ``uint32``)."""
    key, _ = _check_key("bits", key)
    if dtype is None:
        dtype = dtypes.uint64 if config.enable_x64 else dtypes.uint32
    dtype = dtypes.canonicalize_dtype(dtype)
    if dtypes.kind(dtype) != "u":
        raise ValueError(f"dtype argument to `bits` must be an unsigned int dtype, got "
                         f"{dtype.name}")
    return _random_bits(key, dtype.itemsize * 8, canonical_shape(shape))
