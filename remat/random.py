"""``remat.random``: JAX's counter-based threefry-2x32 PRNG, reproduced bit for bit.

Keys are raw ``uint32[2]`` arrays, as ``jax.random.PRNGKey`` returns. ``key(seed)`` returns
the same raw representation: remat has no typed key arrays, so ``key_data`` and
``wrap_key_data`` are identities, kept so that code written for typed keys runs unchanged.

Bits. Everything is derived from ``threefry2x32`` (a primitive with a NumPy impl, abstract
eval, batching rule and zero JVP, so keys work under ``jit``, ``vmap``, ``grad`` and inside
``checkpoint``, where a dropout mask is recomputed identically on the backward pass) applied to
counters laid out exactly as in JAX. JAX has two layouts, chosen by the flag
``jax_threefry_partitionable``: ``True`` (JAX's default since 0.5, and ours) hashes the counter
of every output element on its own; ``False`` (the original layout) hashes ``iota`` split into
two halves and concatenates the halves. Both are implemented; the flag is read at call time.

Floats. The samplers reproduce what JAX computes *on CPU* from those bits, which is not what a
plain NumPy evaluation of the same formulas gives: XLA fuses ``a * b + c`` into one fused
multiply-add (one rounding) in float32 and float64, and evaluates ``log``/``log1p`` (float32)
and ``erf_inv`` with its own polynomials. The private primitives ``fma``, ``xla_log``,
``xla_log1p`` and ``xla_erf_inv`` below compute exactly those roundings, so ``uniform`` (any
``minval``/``maxval``), ``normal``, ``gumbel``, ``categorical`` and ``bernoulli`` equal
``jax.random`` to the last bit in float16, float32 and float64 (the tests compare with JAX).
"""

import math
from collections.abc import Sequence

import numpy as np

from remat import core, dtypes, lax
from remat import numpy as jnp
from remat.config import Config, _env_flag, config
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.standard import broadcasting_shape, canonical_shape, standard_primitive

__all__ = [
    "PRNGKey",
    "bernoulli",
    "bits",
    "categorical",
    "choice",
    "fold_in",
    "gumbel",
    "key",
    "key_data",
    "normal",
    "permutation",
    "randint",
    "split",
    "threefry2x32_p",
    "threefry_2x32",
    "uniform",
    "wrap_key_data",
]

_UINT = {8: dtypes.uint8, 16: dtypes.uint16, 32: dtypes.uint32, 64: dtypes.uint64}


def _register_partitionable_flag():
    """``jax_threefry_partitionable`` (JAX's name and default) until ``remat.config`` lists it."""
    if "threefry_partitionable" not in Config._defaults:
        Config._defaults = {**Config._defaults,
                            "threefry_partitionable": ("JAX_THREEFRY_PARTITIONABLE", True)}
        object.__setattr__(config, "threefry_partitionable",
                           _env_flag("JAX_THREEFRY_PARTITIONABLE", True))


_register_partitionable_flag()


def _partitionable():
    return config.read("jax_threefry_partitionable")


# --- the threefry2x32 primitive --------------------------------------------------------------

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32_impl(k1, k2, x1, x2):
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011), in uint32 arithmetic that wraps."""
    shape = np.broadcast_shapes(k1.shape, k2.shape, x1.shape, x2.shape)
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
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


def _elementwise_batch(prim):
    """Batching rule of an elementwise primitive whose operands are equal-shaped or rank 0:
    batched operands get their batch dim first (batched scalars are broadcast)."""

    def rule(vals, dims, **params):
        size = batching.axis_size_of(vals, dims)
        avals = [core.get_aval(x) for x in vals]
        unbatched = [a if d is batching.not_mapped else
                     a.update(shape=a.shape[:d] + a.shape[d + 1:]) for a, d in zip(avals, dims)]
        shape = broadcasting_shape(prim.name, unbatched)
        args = []
        for x, d, a in zip(vals, dims, avals):
            if d is batching.not_mapped and not a.shape:
                args.append(x)  # an unbatched scalar broadcasts inside the primitive
                continue
            x = batching.bdim_at_front(x, d, size)
            if core.get_aval(x).ndim - 1 < len(shape):
                x = lax.broadcast_in_dim(x, (size,) + shape, (0,))
            args.append(x)
        out = prim.bind(*args, **params)
        return out, ([0] * len(out) if prim.multiple_results else 0)

    batching.primitive_batchers[prim] = rule


_elementwise_batch(threefry2x32_p)


# --- XLA's CPU float kernels, rounding for rounding ------------------------------------------
# jax.random's samplers are fused by XLA; on CPU, LLVM contracts each multiply whose only use
# is an add into a fused multiply-add, and XLA evaluates log/log1p (float32) and erf_inv with
# the polynomials below. NumPy has no FMA, so ``_fma`` computes the exactly rounded a * b + c.

def _two_sum(a, b):
    """``s + e == a + b`` exactly, ``s = fl(a + b)`` (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _two_prod(a, b):
    """``p + e == a * b`` exactly for float64 (Dekker's product with Veltkamp's split)."""
    p = a * b
    ca, cb = a * 134217729.0, b * 134217729.0  # 2**27 + 1
    ah, bh = ca - (ca - a), cb - (cb - b)
    al, bl = a - ah, b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _add_round_to_odd(x, y):
    """``x + y`` (float64) rounded to odd: exact sums as they are, inexact ones to the
    neighbour whose last mantissa bit is 1 (Boldo & Melquiond 2008)."""
    s, e = _two_sum(x, y)
    even = (s.view(np.uint64) & np.uint64(1)) == 0
    fix = (e != 0) & even & np.isfinite(s) & np.isfinite(e)
    return np.where(fix, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)


def _fma_impl(a, b, c):
    a, b, c = np.broadcast_arrays(a, b, c)
    shape = a.shape
    a, b, c = (np.atleast_1d(v) for v in (a, b, c))  # 0-d arithmetic would give scalars
    with np.errstate(all="ignore"):
        if a.dtype.itemsize < 8:
            # The product of two float32s (or float16s) is exact in float64, and the sum
            # rounded to odd in 53 bits, then rounded to 24 (or 11), is correctly rounded.
            out = _add_round_to_odd(a.astype(np.float64) * b.astype(np.float64),
                                    c.astype(np.float64)).astype(a.dtype)
        else:
            # Boldo & Melquiond's emulated FMA: exact product and sum, the low parts added
            # rounding to odd, one final rounding. Falls back to a * b + c where a partial
            # result overflows (operands beyond ~1e300).
            uh, ul = _two_prod(a, b)
            th, tl = _two_sum(c, uh)
            z = th + _add_round_to_odd(tl, ul)
            ok = np.isfinite(z) & np.isfinite(ul) & np.isfinite(tl)
            out = np.where(ok, z, a * b + c)
    return out.reshape(shape)
