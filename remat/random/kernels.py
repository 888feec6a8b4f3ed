"""XLA's CPU float kernels, rounding for rounding, as primitives of ``remat.random``.

jax.random's samplers are fused by XLA; on CPU, LLVM contracts each multiply whose only use is
an add into a fused multiply-add, and XLA evaluates ``log``/``log1p`` (float32), ``erf`` and
``erf_inv`` with its own polynomials. NumPy has no FMA, and its ``log``/``erf`` round
differently, so the samplers use these primitives where they must reproduce JAX's values to
the last bit: ``fma`` (the exactly rounded ``a * b + c``), ``xla_log``, ``xla_log1p``,
``xla_erf``, ``xla_erf_inv`` and ``xla_lgamma``. Each has a NumPy impl, abstract eval, JVP and
batching rule.
"""

import itertools
import math
import struct

import numpy as np

from remat import core, dtypes, lax
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax.standard import broadcasting_shape, standard_primitive

__all__ = ["fma_p", "xla_erf_inv_p", "xla_erf_p", "xla_lgamma_p", "xla_log1p_p", "xla_log_p"]


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


# --- fma: the exactly rounded a * b + c (NumPy has none) -------------------------------------


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
    """float32 and narrower: the product is exact in float64, so ``s = fl64(a * b + c)`` has one
    rounding; rounding ``s`` again to the narrow type is then correct unless ``s`` fell exactly
    on a narrow midpoint (or the result is subnormal): redo those rounding the sum to odd in
    53 bits first, which makes the second rounding exact (53 >= 2 * 24 + 2)."""
    dtype = np.result_type(a, b, c)
    p = np.multiply(a, b, dtype=np.float64)
    c = np.asarray(c, np.float64)
    s = p + c
    info = dtypes.finfo(dtype)
    drop = 52 - info.nmant  # float64 mantissa bits below the narrow type's
    low = s.view(np.uint64) & np.uint64((1 << drop) - 1)
    suspect = np.nonzero((low == np.uint64(1 << (drop - 1))) | (np.abs(s) < info.tiny))
    if suspect[0].size:
        p, c = np.broadcast_arrays(p, c)
        s[suspect] = _add_round_to_odd(p[suspect], c[suspect])
    return _round_float64(s, dtype)


def _round_float64(s, dtype):
    """float64 values rounded once to ``dtype``. ml_dtypes converts float64 to its types
    through float32, rounding twice; rounding to odd in float32 first keeps the second
    rounding exact (24 >= 2 * 8 + 2 bits for bfloat16 and the float8s)."""
    if dtype not in (np.float16, np.float32):
        s32 = s.astype(np.float32)
        even = (s32.view(np.uint32) & np.uint32(1)) == 0
        fix = even & (s32.astype(np.float64) != s) & np.isfinite(s32)
        s32[fix] = np.nextafter(s32[fix], np.where(s[fix] > s32[fix], np.inf, -np.inf)
                                .astype(np.float32))
        s = s32
    return s.astype(dtype)


def _fma_wide(a, b, c):
    """float64: Boldo & Melquiond's emulated FMA (exact product and sum, the low parts added
    rounding to odd, one final rounding); a * b + c where a partial result overflows."""
    uh, ul = _two_prod(a, b)
    th, tl = _two_sum(c, uh)
    z = th + _add_round_to_odd(tl, ul)
    ok = np.isfinite(z) & np.isfinite(ul) & np.isfinite(tl)
    return z if ok.all() else np.where(ok, z, a * b + c)


def _fma_wide_elements(a, b, c):
    """``_fma_wide`` element by element on Python floats: the same IEEE operations, so the same
    bits, without its two dozen NumPy calls, which cost far more than the arithmetic on the
    few elements a random draw's kernels mostly see (diffrax's Brownian tree: two)."""
    shapes = (np.shape(a), np.shape(b), np.shape(c))
    shape = max(shapes, key=len)
    if any(s and s != shape for s in shapes):
        shape = np.broadcast_shapes(*shapes)
    out = []
    for x, y, z in zip(*(_elements(v, shape) for v in (a, b, c))):
        uh, ul = _two_prod(x, y)
        th, tl = _two_sum(z, uh)
        s, e = _two_sum(tl, ul)
        if e != 0 and math.isfinite(s) and math.isfinite(e) and \
                not _INT64.unpack(_FLOAT64.pack(s))[0] & 1:
            s = math.nextafter(s, math.inf if e > 0 else -math.inf)
        r = th + s
        ok = math.isfinite(r) and math.isfinite(ul) and math.isfinite(tl)
        out.append(r if ok else x * y + z)
    return np.array(out, np.float64).reshape(shape)


def _elements(v, shape):
    """The Python floats of ``v`` broadcast to ``shape``, flattened (lazily for a scalar)."""
    if np.ndim(v) == 0:
        return itertools.repeat(float(v))
    return (v if np.shape(v) == shape else np.broadcast_to(v, shape)).ravel().tolist()


_FLOAT64, _INT64 = struct.Struct("<d"), struct.Struct("<q")
_FEW_ELEMENTS = 32  # below this many, the element loop is the faster float64 FMA


def _fma_kernel(a, b, c):
    """The correctly rounded ``a * b + c`` (NumPy has no FMA), for operands of one float
    dtype of which at least one is an array of the full, non-scalar shape (the kernels)."""
    if np.result_type(a, b, c).itemsize < 8:
        return _fma_narrow(a, b, c)
    if max(np.size(a), np.size(b), np.size(c)) < _FEW_ELEMENTS:
        return _fma_wide_elements(a, b, c)
    return _fma_wide(a, b, c)


def _fma_np(a, b, c):
    """The impl of ``fma``: any shapes that broadcast, rank 0 included."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(b), np.shape(c))
    a, b, c = (np.broadcast_to(v, shape).reshape(-1) for v in (a, b, c))
    with np.errstate(all="ignore"):
        return _fma_kernel(a, b, c).reshape(shape)


def _check_float(name, *avals):
    for a in avals:
        if dtypes.kind(a.dtype) != "f":
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


def fused_mul_add(a, b, c):
    """``a * b + c`` as XLA's CPU backend computes it where the product feeds only the sum:
    one rounding (a fused multiply-add; float16 is computed in float32, where the product is
    exact, and rounded once), except in bfloat16 and the float8 formats, which XLA computes a
    step at a time in a wider type, rounding each. Operands broadcast (NumPy rules) and take
    the dtype of ``c`` when it is an array, else of the first of ``a``, ``b`` that is one."""
    from_arrays = [x for x in (c, a, b) if hasattr(x, "aval")]
    dtype = core.get_aval(from_arrays[0] if from_arrays else c).dtype
    a, b, c = (lax.convert_element_type(x, dtype) if hasattr(x, "aval") else _const(x, dtype)
               for x in (a, b, c))
    if dtype == dtypes.float16:
        wide = [lax.convert_element_type(x, dtypes.float32) for x in (a, b, c)]
        return lax.convert_element_type(_broadcast_op(fma_p.bind, *wide), dtype)
    if dtype.itemsize < 4:  # bfloat16, float8: each step rounded
        return _broadcast_op(lambda a, b, c: lax.add(lax.mul(a, b), c), a, b, c)
    return _broadcast_op(fma_p.bind, a, b, c)


def _broadcast_op(op, *args):
    """``op`` on operands broadcast to one shape (rank-0 operands are left to the op)."""
    shape = np.broadcast_shapes(*(core.get_aval(x).shape for x in args))
    args = [x if not core.get_aval(x).shape or core.get_aval(x).shape == shape else
            lax.broadcast_in_dim(x, shape, tuple(range(len(shape) - core.get_aval(x).ndim,
                                                       len(shape))))
            for x in args]
    return op(*args)


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


_libm_log = np.frompyfunc(math.log, 1, 1)


def _log_f64(a):
    """float64: the C library's log, which XLA calls (NumPy's vectorized log differs from
    it in the last bit for about one input in a thousand)."""
    out = np.log(a)
    regular = np.isfinite(a) & (a > 0)
    out[regular] = _libm_log(a[regular]).astype(np.float64)
    return out


def _log(a):
    return _log_f32(a) if a.dtype == np.float32 else _log_f64(a)


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


# erf: float32 (and float16, through float32) as XLA's CPU emitter: Eigen's rational
# interpolant, odd numerator over even denominator in x^2 by Horner's rule in FMAs, and +-1
# from |x| = 3.8325... on; float64 is the C library's erf, which XLA calls.
_ERF_NUM32 = np.float32([0.00022905065861350646, 0.0034082910107109506, 0.050955695062380861,
                         0.18520832239976145, 1.128379143519084])
_ERF_DEN32 = np.float32([-1.1791602954361697e-7, 0.000023547966471313185,
                         0.0010179625278914885, 0.014070470171167667, 0.11098505178285362,
                         0.49746925110067538, 1.0])
_ERF_ONE32 = np.float32(3.832506856900711)
_libm_erf = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    if x.dtype == np.float64:
        return _libm_erf(x).astype(np.float64)
    x2 = x * x
    p = x * _horner(_ERF_NUM32, x2)
    q = _horner(_ERF_DEN32, x2)
    return np.where(np.abs(x) >= _ERF_ONE32, np.copysign(np.float32(1), x), p / q)


# lgamma, as XLA expands it (Lanczos' approximation, g = 7 and 9 terms, in the argument's
# precision with XLA's log and log1p): z / 7.5 is taken as z * (1 / 7.5) and the last product
# is fused into its sum, as XLA compiles them. Below 1/2, the reflection formula (whose sine is
# NumPy's, so there the value is within ulps of XLA's).
_LANCZOS_G = 7.0
_LANCZOS_BASE = 0.99999999999980993227684700473478
_LANCZOS = (676.520368121885098567009190444019, -1259.13921672240287047156078755283,
            771.3234287776530788486528258894, -176.61502916214059906584551354,
            12.507343278686904814458936853, -0.13857109526572011689554707,
            9.984369578019570859563e-6, 1.50563273514931155834e-7)


def _lgamma(x):
    c = x.dtype.type
    reflect = x < c(0.5)
    z = np.where(reflect, -x, x - c(1))
    a = np.full_like(x, c(_LANCZOS_BASE))
    for i, coeff in enumerate(_LANCZOS):
        a = a + c(coeff) / (z + c(i + 1))
    t = c(_LANCZOS_G + 0.5) + z
    log_t = c(math.log(_LANCZOS_G + 0.5)) + _log1p(z * c(1 / (_LANCZOS_G + 0.5)))
    r = (z + c(0.5)) - t / log_t
    out = _fma_kernel(r, log_t, c((math.log(2) + math.log(math.pi)) / 2)) + _log(a)
    frac = np.abs(x) - np.floor(np.abs(x))
    frac = np.where(c(0.5) < frac, c(1) - frac, frac)
    denom = _log(np.sin(c(math.pi) * frac))
    reflected = np.where(np.isfinite(denom), (c(math.log(math.pi)) - denom) - out, -denom)
    out = np.where(reflect, reflected, out)
    return np.where(np.isinf(x), c(np.inf), out)


def _xla_kernel(fn):
    """A NumPy impl from a float32/float64 kernel: float16, bfloat16 and the float8 formats are
    computed in float32 and rounded once at the end, as XLA's CPU backend does."""

    def impl(x):
        shape = x.shape
        with np.errstate(all="ignore"):
            if x.dtype.itemsize < 4:
                out = fn(np.atleast_1d(x).astype(np.float32)).astype(x.dtype)
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
xla_erf_p = _xla_unary(
    "xla_erf", _erf,
    lambda g, ans, x: lax.mul(g, lax.mul(2 / math.sqrt(math.pi), lax.exp(lax.neg(lax.square(x))))))
xla_lgamma_p = _xla_unary("xla_lgamma", _lgamma, lambda g, ans, x: lax.mul(g, lax.digamma(x)))
xla_erf_inv_p = _xla_unary(
    "xla_erf_inv", _erf_inv,
    lambda g, ans, x: lax.mul(g, lax.mul(math.sqrt(math.pi) / 2, lax.exp(lax.square(ans)))))

