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
``minval``/``maxval``), ``normal`` (real and complex), ``gumbel``, ``categorical``,
``bernoulli`` and ``choice`` equal ``jax.random`` on CPU to the last bit in float16, float32
and float64 (the tests compare with JAX). The reference is JAX's own call, as made eagerly:
inside a user's ``jax.jit`` XLA may also fold constant bounds into the arithmetic, which can
move a float16 ``uniform`` draw by an ulp (JAX's ``gumbel`` does this internally, and ``gumbel``
here follows it).

Keys carry no derivative (``threefry2x32`` has a zero JVP; ``grad`` with ``allow_int=True``
gives float0 cotangents for them), while ``uniform`` is differentiable in ``minval`` and
``maxval`` as in JAX.
"""

import math
from collections.abc import Sequence

import numpy as np

from remat import core, dtypes, lax
from remat import numpy as jnp
from remat.config import config
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


def _fma_narrow(a, b, c):
    """float16/float32: the product is exact in float64, so ``s = fl64(a * b + c)`` has one
    rounding; rounding ``s`` again to the narrow type is then correct unless ``s`` fell exactly
    on a narrow midpoint (or the result is subnormal): redo those rounding the sum to odd in
    53 bits first, which makes the second rounding exact (53 >= 2 * 24 + 2)."""
    dtype = np.result_type(a, b, c)
    p = np.multiply(a, b, dtype=np.float64)
    c = np.asarray(c, np.float64)
    s = p + c
    out = s.astype(dtype)
    info = np.finfo(dtype)
    drop = 52 - info.nmant  # float64 mantissa bits below the narrow type's
    low = s.view(np.uint64) & np.uint64((1 << drop) - 1)
    suspect = np.nonzero((low == np.uint64(1 << (drop - 1))) | (np.abs(s) < info.tiny))
    if suspect[0].size:
        p, c = np.broadcast_arrays(p, c)
        out[suspect] = _add_round_to_odd(p[suspect], c[suspect]).astype(dtype)
    return out


def _fma_wide(a, b, c):
    """float64: Boldo & Melquiond's emulated FMA (exact product and sum, the low parts added
    rounding to odd, one final rounding); a * b + c where a partial result overflows."""
    uh, ul = _two_prod(a, b)
    th, tl = _two_sum(c, uh)
    z = th + _add_round_to_odd(tl, ul)
    ok = np.isfinite(z) & np.isfinite(ul) & np.isfinite(tl)
    return z if ok.all() else np.where(ok, z, a * b + c)


def _fma_kernel(a, b, c):
    """The correctly rounded ``a * b + c`` (NumPy has no FMA), for operands of one float
    dtype of which at least one is an array of the full, non-scalar shape (the kernels)."""
    return _fma_narrow(a, b, c) if np.result_type(a, b, c).itemsize < 8 else \
        _fma_wide(a, b, c)


def _fma_np(a, b, c):
    """The impl of ``fma``: any shapes that broadcast, rank 0 included."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(b), np.shape(c))
    a, b, c = (np.broadcast_to(v, shape).reshape(-1) for v in (a, b, c))
    with np.errstate(all="ignore"):
        return _fma_kernel(a, b, c).reshape(shape)


def _check_float(name, *avals):
    for a in avals:
        if a.dtype.kind != "f":
            raise TypeError(f"{name} does not accept dtype {a.dtype.name}. Accepted dtypes "
                            f"are subtypes of floating.")
    if len({a.dtype for a in avals}) > 1:
        got = ", ".join(a.dtype.name for a in avals)
        raise TypeError(f"{name} requires arguments to have the same dtypes, got {got}.")
    return ShapedArray(broadcasting_shape(name, avals), avals[0].dtype,
                       all(a.weak_type for a in avals))


fma_p = standard_primitive("fma", _fma_np, lambda a, b, c: _check_float("fma", a, b, c))
_elementwise_batch(fma_p)


def _fma_jvp(primals, tangents):
    a, b, c = primals
    out = fma_p.bind(a, b, c)
    shape = core.get_aval(out).shape
    terms = []
    ta, tb, tc = tangents
    if type(ta) is not ad.Zero:
        terms.append(lax.mul(ta, b))
    if type(tb) is not ad.Zero:
        terms.append(lax.mul(a, tb))
    if type(tc) is not ad.Zero:
        terms.append(tc)
    acc = ad.Zero.from_primal_value(out)
    for t in terms:
        if core.get_aval(t).shape != shape:
            t = lax.broadcast_in_dim(t, shape, ())
        acc = ad.add_tangents(acc, t)
    return out, acc


ad.primitive_jvps[fma_p] = _fma_jvp


def _fma(a, b, c):
    """``a * b + c`` with one rounding, for equal-dtype float operands of one shape."""
    return fma_p.bind(a, b, c)


def _const(value, dtype):
    """A rank-0 constant of ``dtype`` (any value of the dtype, unlike a weak Python scalar)."""
    return np.array(value, dtypes.canonicalize_dtype(dtype))


def _f32(bits):
    return np.array(bits, np.uint32).view(np.float32)


def _f64(bits):
    return np.array(bits, np.uint64).view(np.float64)


def _horner(coeffs, z):
    p = _fma_kernel(coeffs[0], z, coeffs[1])
    for c in coeffs[2:]:
        p = _fma_kernel(z, p, c)
    return p


# log (float32): Cephes' logf as in Eigen's plog. Mantissa m in [sqrt(1/2), sqrt(2)), x = m - 1,
# log = x - x^2/2 + x^3 P(x) + e log(2) with log(2) split in two parts.
_LOG_P = _f32([0x3D9021BB, 0xBDEBD1B8, 0x3DEF251A, 0xBDFE5D4F, 0x3E11E9BF, 0xBE2AAE50,
               0x3E4CCEAC, 0xBE7FFFFC, 0x3EAAAAAA])
_LOG2_LO, _LOG2_HI = _f32(0xB95E8083), _f32(0x3F318000)
_MIN_NORMAL32 = _f32(0x00800000)
_SQRT_HALF32 = _f32(0x3F3504F3)


def _log_f32(a):
    ac = np.where(a > _MIN_NORMAL32, a, _MIN_NORMAL32)
    bits = ac.view(np.uint32)
    e = ((bits >> np.uint32(23)).astype(np.int32) - 127).astype(np.float32) + np.float32(1)
    m = ((bits & np.uint32(0x807FFFFF)) | np.uint32(0x3F000000)).view(np.float32)  # [0.5, 1)
    small = m < _SQRT_HALF32
    x = (m - np.float32(1)) + np.where(small, m, np.float32(0))
    e = e - np.where(small, np.float32(1), np.float32(0))
    x2 = x * x
    x3 = x2 * x
    c = _LOG_P
    y = _fma_kernel(_fma_kernel(x, c[0], c[1]), x, c[2])
    y1 = _fma_kernel(_fma_kernel(x, c[3], c[4]), x, c[5])
    y2 = _fma_kernel(_fma_kernel(x, c[6], c[7]), x, c[8])
    y = _fma_kernel(_fma_kernel(y, x3, y1), x3, y2)
    y = _fma_kernel(y, x3, e * _LOG2_LO)
    r = _fma_kernel(e, _LOG2_HI, _fma_kernel(-x2, np.float32(0.5), x) + y)
    r = np.where((a < 0) | np.isnan(a), np.float32(np.nan), r)
    r = np.where(a == 0, np.float32(-np.inf), r)
    return np.where(a == np.inf, np.float32(np.inf), r)


def _log(a):
    return _log_f32(a) if a.dtype == np.float32 else np.log(a)


def _piecewise(z, branches):
    """``fn(z)`` where ``mask``, for ``(mask, fn)`` pairs covering ``z``: each polynomial is
    evaluated only on its own elements."""
    out = np.empty_like(z)
    for mask, fn in branches:
        if mask.any():
            out[mask] = fn(z[mask])
    return out


# log1p: a rational approximation for |t| < sqrt(2) - 1 (where log(1 + t) loses digits),
# log(1 + t) elsewhere.
_LOG1P = {
    np.dtype(np.float32): (
        _f32([0x417101AD, 0x42A6185B, 0x435DC32D, 0x439A8CA3, 0x43586D8A, 0x42707982]),
        np.concatenate([np.float32([4.527e-05]),
                        _f32([0x3EFF40C5, 0x40D284FA, 0x41EF4B9C, 0x4273CC76, 0x426473AD,
                              0x41A05101])]),
        _f32(0x3ED413CD)),
    np.dtype(np.float64): (
        _f64([0x402E20359E903E37, 0x4054C30B52213498, 0x406BB86590FCFB56, 0x407351945DC908A5,
              0x406B0DB13E48E066, 0x404E0F304466448E]),
        _f64([0x3F07BC0962B395CA, 0x3FDFE818A0FE1A83, 0x401A509F46F4FA53, 0x403DE9738B8CB9C9,
              0x404E798EB86C3351, 0x404C8E7597479A10, 0x40340A202D99830A]),
        _f64(0x3FDA827999FCEF32)),
}


def _log1p(t):
    num, den, threshold = _LOG1P[t.dtype]

    def rational(ts):
        p = np.ones_like(ts)
        for c in num:
            p = _fma_kernel(p, ts, c)
        q = np.full_like(ts, den[0])
        for c in den[1:]:
            q = _fma_kernel(q, ts, c)
        t2 = ts * ts
        return ts + _fma_kernel(t2, t.dtype.type(-0.5), (ts * t2) * (q / p))

    small = np.abs(t) < threshold
    return _piecewise(t, [(small, rational), (~small, lambda v: _log(v + t.dtype.type(1)))])


# erf_inv: M. Giles, "Approximating the erfinv function" (GPU Computing Gems, 2010), with
# w = -log1p(-x^2); float32 uses the single-precision polynomials (w < 5, w >= 5), float64 the
# double-precision ones (w < 6.25, w < 16, w >= 16), each evaluated by Horner's rule in FMAs.
_ERF_INV32 = (
    np.float32([2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                -0.00125372503, -0.00417768164, 0.246640727, 1.50140941]),
    np.float32([-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682]))
_ERF_INV64 = (
    _f64([0xBBB135D2E746E627, 0xBC08DDF93324D327, 0x3C37B83EEF0B7C9F, 0x3C69BA72CD589B91,
          0xBCA33689090A6B96, 0x3C782E11898132E0, 0x3CFDE4ACFD9E26BA, 0xBD26D33EED66C487,
          0xBD36F2167040D8E2, 0x3D872A22C2D77E20, 0xBDAC8859C4E5C0AF, 0xBDCDC583D118A561,
          0x3E120F47CCF46B3C, 0xBE31A9E38DC84D60, 0xBE5F36CD6D3D46A9, 0x3E9C6B4F5D03B787,
          0xBEB6E8A5434AE8A2, 0xBEED1D1F7B8736F6, 0x3F2879C2A212F024, 0xBF4845769484FCA8,
          0xBF78B6C33114F909, 0x3FCEBD80D9B13E28, 0x3FFA755E7C99AE86]),
    _f64([0x3E23040F87DBD932, 0x3E785CBE52878635, 0xBE92777453DD3955, 0x3E5395ABCD554C6C,
          0x3EB936388A3790AD, 0xBED0D5DB812B5083, 0x3EC8860CD5D652F6, 0x3EEA29A0CACDFB23,
          0xBF08CEF1F80281F2, 0x3F11E684D0B9188A, 0x3EF932CD54C8A222, 0xBF37448A89EF8AA3,
          0x3F4F3CC55AD40C25, 0xBF5BA924132F38B1, 0x3F6468EECA533CF8, 0xBF6EBADABB891BBD,
          0x3F75FFCFE5B76AFC, 0x3FF0158A6D641D39, 0x4008ABCC380D5A48]),
    _f64([0xBDBDCEC3A7785389, 0xBDF18FEEC0E38727, 0x3E19E6BF2DDA45E3, 0xBE30468FB24E2F5F,
          0x3E405AC6A8FBA182, 0xBE50102E495FB9C0, 0x3E5F4C20E1334AF8, 0xBE722D220FDF9C3E,
          0x3E8EBC8BB824CB54, 0xBEB0A8D40EA372CC, 0x3ED2FBD29D093D2B, 0xBEF4A3497E1E0FAC,
          0x3F13EBF4EB00938F, 0xBF2C2F36A8FC5D53, 0xBF222EA5DF04047C, 0x3FF02A30D1FBA0DC,
          0x4013664DDD1AD7FB]))


def _erf_inv(x):
    w = -_log1p(x * -x)
    if x.dtype == np.float32:
        lt5 = w < np.float32(5)
        z = np.where(lt5, w - np.float32(2.5), np.sqrt(w) - np.float32(3))
        p = _piecewise(z, [(lt5, lambda v: _horner(_ERF_INV32[0], v)),
                           (~lt5, lambda v: _horner(_ERF_INV32[1], v))])
    else:
        lt6, lt16 = w < 6.25, w < 16.0
        z = np.where(lt6, w - 3.125, np.sqrt(w) - np.where(lt16, 3.25, 5.0))
        p = _piecewise(z, [(lt6, lambda v: _horner(_ERF_INV64[0], v)),
                           (~lt6 & lt16, lambda v: _horner(_ERF_INV64[1], v)),
                           (~lt16, lambda v: _horner(_ERF_INV64[2], v))])
    return x * np.where(np.abs(x) == 1, x.dtype.type(np.inf), p)


def _xla_kernel(fn):
    """A NumPy impl from a float32/float64 kernel: float16 is computed in float32 and rounded
    once at the end, as XLA's CPU backend does."""

    def impl(x):
        shape = x.shape
        with np.errstate(all="ignore"):
            if x.dtype == np.float16:
                out = fn(np.atleast_1d(x).astype(np.float32)).astype(np.float16)
            else:
                out = fn(np.atleast_1d(x))
        return out.reshape(shape)

    return impl


def _xla_unary(name, fn, jvp):
    prim = standard_primitive(name, _xla_kernel(fn), lambda x: _check_float(name, x))
    batching.defvectorized(prim)
    ad.defjvp2(prim, jvp)
    return prim


xla_log_p = _xla_unary("xla_log", _log, lambda g, ans, x: lax.div(g, x))
xla_log1p_p = _xla_unary("xla_log1p", _log1p, lambda g, ans, x: lax.div(g, lax.add(x, 1.0)))
xla_erf_inv_p = _xla_unary(
    "xla_erf_inv", _erf_inv,
    lambda g, ans, x: lax.mul(g, lax.mul(math.sqrt(math.pi) / 2, lax.exp(lax.square(ans)))))


# --- keys ------------------------------------------------------------------------------------


def _check_key(name, key):
    """A raw key (``uint32[2]``) as an array; batched keys are for ``vmap``."""
    if not core.is_array_like(key):
        key = jnp.asarray(key)
    aval = core.get_aval(key)
    if aval.dtype != dtypes.uint32:
        raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.dtype = "
                        f"uint32; got dtype={aval.dtype.name}")
    if aval.shape[-1:] != (2,):
        raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.shape to "
                        f"end with (2,); got shape={aval.shape} for impl=threefry2x32")
    if aval.ndim != 1:
        raise ValueError(f"{name} accepts a single key, but was given a key array of shape "
                         f"{aval.shape} != (). Use jax.vmap for batching.")
    return key


def _key_words(key):
    """The two uint32 scalars of a key."""
    return (lax.reshape(lax.slice(key, (0,), (1,)), ()),
            lax.reshape(lax.slice(key, (1,), (2,)), ()))


def _shape_of(x):
    return core.get_aval(x).shape if hasattr(x, "aval") else np.shape(x)


def _check_impl(impl):
    if impl is not None and impl != "threefry2x32":
        raise ValueError(f"unrecognized PRNG implementation {impl!r}; remat has threefry2x32")


def _seed(ctor, seed):
    if _shape_of(seed):
        raise TypeError(f"{ctor} accepts a scalar seed, but was given an array of shape "
                        f"{_shape_of(seed)} != (). Use jax.vmap for batching")
    if type(seed) in (bool, int):
        seed = np.int64(seed)  # JAX's rule: any int64 seed; wraps to int32 without x64
    seed = jnp.asarray(seed)
    dtype = core.get_aval(seed).dtype
    if dtype.kind not in "iu":
        raise TypeError(f"PRNG key seed must be an integer; got {seed!r}")
    # The key is the seed's 64 bits as two uint32 words (the high one 0 for narrower seeds).
    lo = lax.convert_element_type(seed, dtypes.uint32)
    if dtype.itemsize == 8:
        hi = lax.div(lax.convert_element_type(seed, dtypes.uint64), np.uint64(1 << 32))
        hi = lax.convert_element_type(hi, dtypes.uint32)
    else:
        hi = _const(0, dtypes.uint32)
    return lax.concatenate([lax.reshape(hi, (1,)), lax.reshape(lo, (1,))], 0)


def PRNGKey(seed, *, impl=None):
    """A raw threefry key (``uint32[2]``) from an integer seed: the seed's 64 bits as two
    words. Python ints must fit int64; without x64 the seed is taken modulo 2**32 first."""
    _check_impl(impl)
    return _seed("PRNGKey", seed)


def key(seed, *, impl=None):
    """Same as ``PRNGKey``: remat represents every key as a raw ``uint32[2]`` array."""
    _check_impl(impl)
    return _seed("key", seed)


def key_data(keys):
    """The raw ``uint32`` data of keys (keys already are their data in remat)."""
    return keys


def wrap_key_data(key_bits_array, *, impl=None):
    """Keys from raw ``uint32[..., 2]`` data (an identity in remat)."""
    _check_impl(impl)
    return jnp.asarray(key_bits_array)


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


def _iota_2x32(shape):
    """The row-major index of every element of ``shape`` as (high, low) uint32 words."""
    size = math.prod(shape)
    if size >= 1 << 32:
        raise ValueError(f"random arrays of {size} >= 2**32 elements are not supported")
    return lax.full(shape, 0, dtypes.uint32), lax.reshape(lax.iota(dtypes.uint32, size), shape)


def _split(key, shape):
    if _partitionable():
        k1, k2 = _key_words(key)
        b1, b2 = threefry2x32_p.bind(k1, k2, *_iota_2x32(shape))
        return jnp.stack([b1, b2], axis=len(shape))
    count = lax.iota(dtypes.uint32, 2 * math.prod(shape))
    return lax.reshape(threefry_2x32(key, count), (*shape, 2))


def split(key, num=2):
    """``num`` new keys (or an array of keys of shape ``num`` when it is a tuple)."""
    key = _check_key("split", key)
    shape = tuple(num) if isinstance(num, Sequence) else (num,)
    return _split(key, canonical_shape(shape, "num"))


def fold_in(key, data):
    """A new key from ``key`` and a 32-bit integer ``data``: the hash of ``[0, data]``."""
    key = _check_key("fold_in", key)
    if _shape_of(data):
        raise TypeError(f"fold_in accepts a scalar, but was given an array of shape "
                        f"{_shape_of(data)} != (). Use jax.vmap for batching.")
    if type(data) is int:
        if not 0 <= data < 1 << 32:
            raise OverflowError(f"Python integer {data} out of bounds for uint32")
        data = np.uint32(data)
    data = lax.convert_element_type(jnp.asarray(data), dtypes.uint32)
    counts = lax.concatenate([lax.full((1,), 0, dtypes.uint32), lax.reshape(data, (1,))], 0)
    return threefry_2x32(key, counts)


# --- bits ------------------------------------------------------------------------------------


def _shift_left(x, n):
    return lax.mul(x, _const(1 << n, core.get_aval(x).dtype))


def _shift_right(x, n):
    """Logical right shift of an unsigned array."""
    return lax.div(x, _const(1 << n, core.get_aval(x).dtype))


def _random_bits(key, bit_width, shape):
    """``uint{bit_width}`` bits of ``shape``, laid out as JAX lays them out."""
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
    key = _check_key("bits", key)
    if dtype is None:
        dtype = dtypes.uint64 if config.enable_x64 else dtypes.uint32
    dtype = dtypes.canonicalize_dtype(dtype)
    if dtype.kind != "u":
        raise ValueError(f"dtype argument to `bits` must be an unsigned int dtype, got "
                         f"{dtype.name}")
    return _random_bits(key, dtype.itemsize * 8, canonical_shape(shape))


# --- samplers --------------------------------------------------------------------------------


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
    if dtype.kind != "f":
        raise ValueError(f"dtype argument to `{name}` must be a float dtype, got {dtype.name}")
    return dtype


def _bcast_to(x, shape):
    x_shape = core.get_aval(x).shape
    if x_shape == tuple(shape):
        return x
    return jnp.broadcast_to(x, shape)


def _uniform(key, shape, dtype, minval, maxval):
    """Floats in [minval, maxval): the top mantissa bits of random bits as a float in [0, 1)
    (exactly JAX's ``bitcast(bits >> shift | 1.0) - 1.0``), scaled and shifted."""
    minval = lax.convert_element_type(jnp.asarray(minval), dtype)
    maxval = lax.convert_element_type(jnp.asarray(maxval), dtype)
    _check_shape("uniform", shape, core.get_aval(minval).shape, core.get_aval(maxval).shape)
    minval, maxval = _bcast_to(minval, shape), _bcast_to(maxval, shape)
    info = np.finfo(dtype)
    nbits, nmant = info.bits, info.nmant
    mantissa = _shift_right(_random_bits(key, nbits, shape), nbits - nmant)
    floats = lax.mul(lax.convert_element_type(mantissa, dtype),
                     _const(2.0 ** -nmant, dtype))
    span = lax.sub(maxval, minval)
    if dtype == dtypes.float16:  # XLA's CPU backend does not fuse float16 multiply-adds
        scaled = lax.add(lax.mul(floats, span), minval)
    else:
        scaled = _fma(floats, span, minval)
    return lax.max(minval, scaled)


def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0):
    """Floats uniform in ``[minval, maxval)`` (bounds broadcast against ``shape``)."""
    key = _check_key("uniform", key)
    dtype = _float_dtype("uniform", dtype)
    return _uniform(key, canonical_shape(shape), dtype, minval, maxval)


def _normal_real(key, shape, dtype):
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = _uniform(key, shape, dtype, lo, np.array(1.0, dtype))
    return lax.mul(_const(np.sqrt(2), dtype), xla_erf_inv_p.bind(u))


def normal(key, shape=(), dtype=None):
    """Standard normal values: ``sqrt(2) * erf_inv(u)`` with ``u`` uniform in (-1, 1); for a
    complex dtype, independent real and imaginary parts of variance 1/2."""
    key = _check_key("normal", key)
    dtype = dtypes.canonicalize_dtype(dtypes.default_float_dtype() if dtype is None else dtype)
    if dtype.kind not in "fc":
        raise ValueError(f"dtype argument to `normal` must be a float or complex dtype, got "
                         f"{dtype.name}")
    shape = canonical_shape(shape)
    if dtype.kind == "f":
        return _normal_real(key, shape, dtype)
    real_dtype = np.finfo(dtype).dtype
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
    key = _check_key("bernoulli", key)
    p = jnp.asarray(p)
    dtype = core.get_aval(p).dtype
    if dtype.kind != "f":
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
        u2 = lax.mul(u2, _const(2.0 ** -np.finfo(dtype).nmant, dtype))
        return jnp.less(u2, jnp.subtract(p, u1))
    return jnp.less(_uniform(key, shape, dtype, 0.0, 1.0), p)


def _convert_and_clip_integer(val, dtype):
    """``val`` (integer) in integer ``dtype``, clipped to its range rather than wrapped."""
    src = core.get_aval(val).dtype
    lo = max(np.iinfo(dtype).min, np.iinfo(src).min)
    hi = min(np.iinfo(dtype).max, np.iinfo(src).max)
    val = lax.clamp(_const(lo, src), val, _const(hi, src))
    return lax.convert_element_type(val, dtype)


def _int_operand(x):
    x = jnp.asarray(x)
    if core.get_aval(x).dtype.kind not in "iu":
        x = lax.convert_element_type(x, dtypes.default_int_dtype())
    return x


def randint(key, shape, minval, maxval, dtype=None):
    """Integers uniform in ``[minval, maxval)``. Like JAX, a value takes two draws of the
    dtype's width (``hi * (2**nbits mod span) + lo mod span``), which keeps the modulo bias
    small; 8- and 16-bit dtypes are sampled in 32 bits."""
    key = _check_key("randint", key)
    dtype = dtypes.canonicalize_dtype(dtypes.default_int_dtype() if dtype is None else dtype)
    if dtype.kind not in "iu":
        raise TypeError(f"randint only accepts integer dtypes, got {dtype.name}")
    shape = canonical_shape(shape)
    info = np.iinfo(dtype)
    sample_dtype = dtype
    minval, maxval = _int_operand(minval), _int_operand(maxval)
    if info.bits < 32:
        sample_dtype = dtypes.int32
        minval = jnp.clip(lax.convert_element_type(minval, dtypes.int32), int(info.min),
                          int(info.max))
        maxval = jnp.clip(lax.convert_element_type(maxval, dtypes.int32), int(info.min),
                          int(info.max) + 1)
    out = _randint(key, minval, maxval, shape, sample_dtype)
    return lax.convert_element_type(out, dtype)


def _randint(key, minval, maxval, shape, dtype):
    _check_shape("randint", shape, core.get_aval(minval).shape, core.get_aval(maxval).shape)
    # maxval beyond the dtype's range (randint(key, s, 0, 256, uint8)): one more value
    maxval_dtype = core.get_aval(maxval).dtype
    dtype_max = _convert_and_clip_integer(_const(np.iinfo(dtype).max, dtype),
                                          maxval_dtype)
    out_of_range = jnp.greater(maxval, dtype_max)
    minval = _bcast_to(_convert_and_clip_integer(minval, dtype), shape)
    maxval = _bcast_to(_convert_and_clip_integer(maxval, dtype), shape)
    out_of_range = _bcast_to(out_of_range, shape)
    nbits = np.iinfo(dtype).bits
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
        info = np.finfo(dtype)
        fine = lax.add(lax.add(high, lax.mul(_const(2.0 ** -info.nmant, dtype), low)),
                       _const(info.tiny, dtype))
        x = lax.select(lax.ge(high, _const(0.5, dtype)), high, fine)
        return lax.neg(xla_log_p.bind(lax.neg(xla_log1p_p.bind(lax.neg(x)))))
    # JAX draws uniform(minval=tiny, maxval=1) inside a jitted function, where XLA folds
    # (bits - 1) + tiny into bits + round(tiny - 1) = bits - 1: the draw is max(tiny, f).
    u = lax.max(_const(np.finfo(dtype).tiny, dtype), _uniform(key, shape, dtype, 0.0, 1.0))
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
    key = _check_key("gumbel", key)
    dtype = _float_dtype("gumbel", dtype)
    return _gumbel(key, canonical_shape(shape), dtype, _gumbel_mode(mode))


def _top_k_indices(x, k):
    """Indices of the ``k`` largest entries along the last axis (ties: lower index first)."""
    shape = core.get_aval(x).shape
    iota = lax.broadcasted_iota(dtypes.int32, shape, len(shape) - 1)
    _, idx = lax.sort_key_val(lax.neg(x), iota, dimension=len(shape) - 1)
    return lax.slice_in_dim(idx, 0, k, axis=len(shape) - 1)


def categorical(key, logits, axis=-1, shape=None, replace=True, mode=None):
    """Indices drawn with probabilities ``softmax(logits, axis)``, by the Gumbel-max trick
    (Gumbel top-k without replacement)."""
    key = _check_key("categorical", key)
    logits = jnp.asarray(logits)
    logits_shape = core.get_aval(logits).shape
    ndim = len(logits_shape)
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for logits of shape {logits_shape}")
    batch_shape = tuple(np.delete(logits_shape, axis))
    if shape is None:
        shape = batch_shape
    else:
        shape = canonical_shape(shape)
        _check_shape("categorical", shape, batch_shape)
    dtype = core.get_aval(logits).dtype
    mode = _gumbel_mode(mode)
    prefix = shape[:len(shape) - len(batch_shape)]
    if replace:
        axis = axis - ndim if axis >= 0 else axis
        noise_shape = list(shape[len(shape) - len(batch_shape):])
        noise_shape.insert(axis % ndim, logits_shape[axis])
        noisy = jnp.add(_gumbel(key, (*prefix, *noise_shape), dtype, mode),
                        lax.expand_dims(logits, tuple(range(len(prefix)))))
        return jnp.argmax(noisy, axis=axis)
    noisy = jnp.add(logits, _gumbel(key, logits_shape, dtype, mode))
    k = math.prod(prefix)
    if k > logits_shape[axis]:
        raise ValueError(f"Number of samples without replacement ({k}) cannot exceed number "
                         f"of categories ({logits_shape[axis]}).")
    idx = _top_k_indices(jnp.moveaxis(noisy, axis, -1), k)
    return lax.reshape(idx, shape, (len(batch_shape), *range(len(batch_shape))))


def _shuffle(key, x, axis):
    """Sort by fresh random 32-bit keys, repeated (3 log n / log(2**32 - 1) rounds) so that
    key collisions are unlikely to bias the permutation."""
    size = math.prod(core.get_aval(x).shape)
    rounds = int(np.ceil(3 * np.log(max(1, size)) / np.log(np.iinfo(np.uint32).max)))
    for _ in range(rounds):
        key, subkey = _split(key, (2,))
        sort_keys = _random_bits(subkey, 32, core.get_aval(x).shape)
        _, x = lax.sort_key_val(sort_keys, x, axis)
    return x


def permutation(key, x, axis=0, independent=False):
    """A shuffled ``arange(x)`` (integer ``x``) or ``x`` shuffled along ``axis`` (each slice
    on its own when ``independent``)."""
    key = _check_key("permutation", key)
    if not core.is_array_like(x):
        x = jnp.asarray(x)
    aval = core.get_aval(x)
    if not aval.ndim:
        if aval.dtype.kind not in "iu":
            raise TypeError("x must be an integer or at least 1-dimensional")
        n = int(core.concrete_or_error(x, "argument x of jax.random.permutation()"))
        return _shuffle(key, jnp.arange(n), 0)
    axis = int(axis)
    if not -aval.ndim <= axis < aval.ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {aval.ndim}")
    axis %= aval.ndim
    if independent or aval.ndim == 1:
        return _shuffle(key, x, axis)
    ind = _shuffle(key, jnp.arange(aval.shape[axis]), 0)
    return jnp.take(x, ind, axis, unique_indices=True)


def choice(key, a, shape=(), replace=True, p=None, axis=0, mode=None):
    """Samples of ``a`` (or of ``arange(a)`` for an integer) along ``axis``, uniformly or
    with probabilities ``p``, with or without replacement."""
    key = _check_key("choice", key)
    if not isinstance(shape, Sequence):
        raise TypeError(f"shape argument of jax.random.choice must be a sequence, got {shape}")
    shape = canonical_shape(shape)
    arr = jnp.asarray(a)
    aval = core.get_aval(arr)
    if aval.ndim == 0:
        n_inputs = int(core.concrete_or_error(a, "The error occurred in jax.random.choice()"))
    else:
        if not -aval.ndim <= axis < aval.ndim:
            raise ValueError(f"axis {axis} is out of bounds for array of dimension "
                             f"{aval.ndim}")
        axis %= aval.ndim
        n_inputs = aval.shape[axis]
    n_draws = math.prod(shape)
    if n_draws == 0:
        return jnp.zeros(shape, dtype=aval.dtype)
    if n_inputs <= 0:
        raise ValueError("a must be greater than 0 unless no samples are taken")
    if not replace and n_draws > n_inputs:
        raise ValueError(f"Cannot take a larger sample (size {n_draws}) than population "
                         f"(size {n_inputs}) when 'replace=False'")
    if p is None:
        if replace:
            ind = randint(key, shape, 0, n_inputs)
            result = ind if aval.ndim == 0 else jnp.take(arr, ind, axis)
        else:
            perm = permutation(key, n_inputs if aval.ndim == 0 else arr, axis)
            result = lax.slice_in_dim(perm, 0, n_draws, axis=0 if aval.ndim == 0 else axis)
    else:
        p = jnp.asarray(p)
        if core.get_aval(p).dtype.kind != "f":
            p = lax.convert_element_type(p, dtypes.default_float_dtype())
        if core.get_aval(p).shape != (n_inputs,):
            raise ValueError(f"p must be None or a 1D vector with the same size as "
                             f"a.shape[axis]. p has shape {core.get_aval(p).shape} and "
                             f"a.shape[axis] is {n_inputs}.")
        p_dtype = core.get_aval(p).dtype
        if replace:
            p_cuml = jnp.cumsum(p)
            u = _uniform(key, shape, p_dtype, 0.0, 1.0)
            r = jnp.multiply(p_cuml[-1], jnp.subtract(1, u))
            ind = jnp.searchsorted(p_cuml, r).astype(dtypes.default_int_dtype())
        else:
            g = jnp.add(_gumbel(key, (n_inputs,), p_dtype, _gumbel_mode(mode)),
                        xla_log_p.bind(p))
            ind = lax.convert_element_type(_top_k_indices(g, n_draws),
                                           dtypes.default_int_dtype())
        result = ind if aval.ndim == 0 else jnp.take(arr, ind, axis)
    out_shape = shape if aval.ndim == 0 else \
        aval.shape[:axis] + tuple(shape) + aval.shape[axis + 1:]
    return jnp.reshape(result, out_shape)
