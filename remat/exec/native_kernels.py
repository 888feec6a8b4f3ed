"""The numba helpers generated native loops call: what has no one-line NumPy form in numba
(float sums in NumPy's order, reductions over rows, batched matmuls, a fast float32 tanh).
Every helper uses NumPy's error model: a float division by zero gives inf or NaN, no check
and no exception (which would also keep loops of it from vectorizing).
Compiled once per signature and cached on disk next to this file (``cache=True``)."""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from remat.exec.native_rules import BranchNotNative  # noqa: F401 (kernels raise _k.BranchNotNative)
from remat.runtime.xla_constants import (
    ERF_INV32,
    ERF_INV64,
    LOG1P,
    LOG2_HI,
    LOG2_LO,
    LOG_P,
    MIN_NORMAL32,
    SQRT_HALF32,
)

# XLA's float32 tanh: a rational approximation on [-c, c] (saturated beyond), exact to a few
# ulp; numba's tanhf is several times slower.
_TANH_CLAMP = np.float32(7.90531110763549805)
_A = [np.float32(v) for v in (4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05,
                              5.12229709037114e-08, -8.60467152213735e-11, 2.00018790482477e-13,
                              -2.76076847742355e-16)]
_B = [np.float32(v) for v in (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04,
                              1.19825839466702e-06)]
A1, A3, A5, A7, A9, A11, A13 = _A
B0, B2, B4, B6 = _B
_TINY = np.float32(0.0004)


@njit(cache=True, inline="always", error_model="numpy")
def tanh_value(v):
    """One float32 tanh, branch-free (a select, not a jump: loops of it vectorize)."""
    c = np.minimum(np.maximum(v, -_TANH_CLAMP), _TANH_CLAMP)
    c2 = c * c
    p = c2 * A13 + A11
    p = c2 * p + A9
    p = c2 * p + A7
    p = c2 * p + A5
    p = c2 * p + A3
    p = c2 * p + A1
    p = c * p
    q = c2 * B6 + B4
    q = c2 * q + B2
    q = c2 * q + B0
    return v if abs(v) < _TINY else p / q


# A float32 exp that loops vectorize (numba calls libm's expf one element at a time):
# Cody-Waite range reduction by ln 2 and Cephes' polynomial, within 1 ulp of expf over the
# finite range; the scale 2**n applied in two halves so that overflow gives inf and
# underflow 0 (or a subnormal) exactly as expf does.
_LOG2E = np.float32(1.44269504088896341)
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(-2.12194440e-4)
_P = [np.float32(v) for v in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                              4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)]
P0, P1, P2, P3, P4, P5 = _P
_EXP_LOW = np.float32(-104.0)  # exp below it rounds to 0, above _EXP_HIGH to inf
_EXP_HIGH = np.float32(89.0)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)


@intrinsic
def _float_from_bits(typingctx, bits):
    """The float32 whose bit pattern is the int32 ``bits``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@njit(cache=True, inline="always", error_model="numpy")
def _pow2(k):
    return _float_from_bits(np.int32((k + 127) << 23))


@njit(cache=True, inline="always", error_model="numpy")
def exp_value(v):
    """One float32 exp, branch-free."""
    x = v if v == v else _ZERO
    x = np.minimum(np.maximum(x, _EXP_LOW), _EXP_HIGH)
    n = np.floor(x * _LOG2E + _HALF)
    r = x - n * _LN2_HI
    r = r - n * _LN2_LO
    p = P0 * r + P1
    p = p * r + P2
    p = p * r + P3
    p = p * r + P4
    p = p * r + P5
    y = p * (r * r) + r + _ONE
    k = np.int32(n)
    half = np.int32(k >> 1)
    y = y * _pow2(half) * _pow2(np.int32(k - half))
    return y if v == v else v


@intrinsic
def fma(typingctx, a, b, c):
    """The correctly rounded ``a * b + c`` of one float type (LLVM's fma: the instruction
    where the CPU has it, the C library's otherwise), as XLA's kernels and remat's float
    impls (``random.kernels._fma_kernel``) compute it."""
    if not (isinstance(a, types.Float) and a == b == c):
        return None

    def codegen(context, builder, signature, args):
        return builder.fma(*args)
    return a(a, a, a), codegen


# erf_inv as ``random.kernels._erf_inv``: w = -log1p(-x^2) (a rational approximation for small
# arguments, log(1 + t) otherwise), then Giles' polynomials by Horner's rule in FMAs.
_LOG2_LO32, _LOG2_HI32 = np.float32(LOG2_LO), np.float32(LOG2_HI)
_LOG1P32_NUM, _LOG1P32_DEN, _LOG1P32_AT = LOG1P[np.dtype(np.float32)]
_LOG1P64_NUM, _LOG1P64_DEN, _LOG1P64_AT = LOG1P[np.dtype(np.float64)]
_ERF_INV32_LO, _ERF_INV32_HI = ERF_INV32
_ERF_INV64_A, _ERF_INV64_B, _ERF_INV64_C = ERF_INV64
_MIN_NORMAL32, _SQRT_HALF32 = np.float32(MIN_NORMAL32), np.float32(SQRT_HALF32)


@njit(cache=True, inline="always", error_model="numpy")
def _horner(coeffs, z):
    p = fma(coeffs[0], z, coeffs[1])
    for k in range(2, len(coeffs)):
        p = fma(z, p, coeffs[k])
    return p


@intrinsic
def _bits_of(typingctx, x):
    """The int32 bit pattern of the float32 ``x``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.int32(types.float32), codegen


@njit(cache=True, error_model="numpy")
def log_f32(a):
    """``random.kernels._log_f32`` for one element (Cephes' logf, as Eigen's plog)."""
    ac = a if a > _MIN_NORMAL32 else _MIN_NORMAL32
    bits = _bits_of(ac)
    e = np.float32(((bits >> 23) & 0xFF) - 127) + np.float32(1)
    m = _float_from_bits((bits & ~np.int32(0x7F800000)) | np.int32(0x3F000000))  # [0.5, 1)
    small = m < _SQRT_HALF32
    x = (m - np.float32(1)) + (m if small else np.float32(0))
    if small:
        e = e - np.float32(1)
    x2 = x * x
    x3 = x2 * x
    c = LOG_P
    y = fma(fma(x, c[0], c[1]), x, c[2])
    y1 = fma(fma(x, c[3], c[4]), x, c[5])
    y2 = fma(fma(x, c[6], c[7]), x, c[8])
    y = fma(fma(y, x3, y1), x3, y2)
    y = fma(y, x3, e * _LOG2_LO32)
    r = fma(e, _LOG2_HI32, fma(-x2, np.float32(0.5), x) + y)
    if a < 0 or a != a:
        return np.float32(np.nan)
    if a == 0:
        return np.float32(-np.inf)
    return np.float32(np.inf) if a == np.inf else r


@njit(cache=True, error_model="numpy")
def _log1p_rational(t, num, den, one, half):
    """``random.kernels._log1p``'s rational branch (``one``, ``half``: of ``t``'s type)."""
    p = one
    for k in range(len(num)):
        p = fma(p, t, num[k])
    q = den[0]
    for k in range(1, len(den)):
        q = fma(q, t, den[k])
    t2 = t * t
    return t + fma(t2, -half, (t * t2) * (q / p))


@njit(cache=True, error_model="numpy")
def log1p_f32(t):
    """``random.kernels._log1p`` for one float32 element."""
    if np.abs(t) < _LOG1P32_AT:
        return _log1p_rational(t, _LOG1P32_NUM, _LOG1P32_DEN, np.float32(1), np.float32(0.5))
    return log_f32(t + np.float32(1))


@njit(cache=True, error_model="numpy")
def log1p_f64(t):
    """``random.kernels._log1p`` for one float64 element (the C library's log elsewhere)."""
    if np.abs(t) < _LOG1P64_AT:
        return _log1p_rational(t, _LOG1P64_NUM, _LOG1P64_DEN, 1.0, 0.5)
    return np.log(t + 1.0)


@njit(cache=True, error_model="numpy")
def erf_inv_f32(x):
    w = -log1p_f32(x * -x)
    if w < np.float32(5):
        p = _horner(_ERF_INV32_LO, w - np.float32(2.5))
    else:
        p = _horner(_ERF_INV32_HI, np.sqrt(w) - np.float32(3))
    return x * (np.float32(np.inf) if np.abs(x) == 1 else p)


@njit(cache=True, error_model="numpy")
def erf_inv_f64(x):
    w = -log1p_f64(x * -x)
    if w < 6.25:
        p = _horner(_ERF_INV64_A, w - 3.125)
    elif w < 16.0:
        p = _horner(_ERF_INV64_B, np.sqrt(w) - 3.25)
    else:
        p = _horner(_ERF_INV64_C, np.sqrt(w) - 5.0)
    return x * (np.inf if np.abs(x) == 1 else p)


@njit(cache=True, inline="always", error_model="numpy")
def flushed(x, tiny):
    """``x`` with a subnormal read as a zero of its sign, as the executor's denormals-are-zero
    mode makes NumPy's ``maximum``/``minimum`` read it (a select passes the bits unchanged).
    Only bit operations and an ordered compare: right in either mode."""
    return x if (x != x) | (np.abs(x) >= tiny) else np.copysign(x * 0, x)


@njit(cache=True, inline="always", error_model="numpy")
def int_div(x, y):
    """lax's signed integer division: toward zero; ``x / 0`` is -1."""
    safe = y if y != 0 else 1
    q = x // safe
    q = q + ((x - q * safe != 0) and ((x < 0) != (safe < 0)))
    return q if y != 0 else -1


@njit(cache=True, inline="always", error_model="numpy")
def int_rem(x, y):
    """lax's signed integer remainder (C's, the dividend's sign); ``x % 0`` is ``x``."""
    safe = y if y != 0 else 1
    r = x % safe
    r = r - safe if r != 0 and (x < 0) != (safe < 0) else r
    return r if y != 0 else x


@njit(cache=True, inline="always", error_model="numpy")
def uint_div(x, y):
    """lax's unsigned integer division; ``x / 0`` has every bit set."""
    return x // y if y != 0 else ~(x ^ x)


@njit(cache=True, inline="always", error_model="numpy")
def uint_rem(x, y):
    """lax's unsigned integer remainder; ``x % 0`` is ``x``."""
    return x % y if y != 0 else x


_THREEFRY_PARITY = np.uint32(0x1BD11BDA)


@njit(cache=True, inline="always", error_model="numpy")
def _rotated(b, r):
    return np.uint32(np.uint32(b << np.uint32(r)) | np.uint32(b >> np.uint32(32 - r)))


@njit(cache=True, inline="always", error_model="numpy")
def _mixed(a, b, r):
    a = np.uint32(a + b)
    return a, np.uint32(_rotated(b, r) ^ a)


@njit(cache=True, inline="always", error_model="numpy")
def threefry_pair(k1, k2, x1, x2):
    """Threefry-2x32 with 20 rounds on one pair of uint32 words, as ``remat.random``'s
    ``threefry2x32`` impl computes it (every sum wraps at 32 bits): its two words."""
    k3 = np.uint32(k1 ^ k2 ^ _THREEFRY_PARITY)
    a, b = np.uint32(x1 + k1), np.uint32(x2 + k2)
    for i in range(5):
        if i % 2 == 0:
            a, b = _mixed(a, b, 13)
            a, b = _mixed(a, b, 15)
            a, b = _mixed(a, b, 26)
            a, b = _mixed(a, b, 6)
        else:
            a, b = _mixed(a, b, 17)
            a, b = _mixed(a, b, 29)
            a, b = _mixed(a, b, 16)
            a, b = _mixed(a, b, 24)
        j = (i + 1) % 3
        a = np.uint32(a + (k1 if j == 0 else k2 if j == 1 else k3))
        j = (i + 2) % 3
        b = np.uint32(b + (k1 if j == 0 else k2 if j == 1 else k3) + np.uint32(i + 1))
    return a, b


@njit(cache=True, error_model="numpy")
def tanh_f32(x):
    out = np.empty(x.shape, np.float32)
    flat_in = x.ravel()  # (a copy when x is a strided view)
    flat = out.ravel()
    for i in range(flat_in.size):
        flat[i] = tanh_value(flat_in[i])
    return out


@njit(cache=True, error_model="numpy")
def tanh_f32_scalar(v):
    return tanh_value(v)


@njit(cache=True, error_model="numpy")
def _block_sum(a, lo, n):
    """NumPy's ``pairwise_sum`` of 1 to 128 elements: fewer than 8 in order; else eight
    interleaved accumulators, combined as a tree, then the rest in order."""
    if n < 8:  # (from the first element, not zero: the callers add the sum to a zero, which
        res = a[lo]  # erases the only difference, a zero's sign; n is at least 1)
        for i in range(lo + 1, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    end = lo + n - n % 8
    for i in range(lo + 8, end, 8):
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for i in range(end, lo + n):
        res += a[i]
    return res


@njit(cache=True, error_model="numpy")
def pairwise_sum(a, lo, n):
    """NumPy's float ``add`` reduction of ``a[lo:lo + n]`` (its ``pairwise_sum``): blocks of
    at most 128 (``_block_sum``), a longer run the sum of its two halves (the first a multiple
    of 8 long), in ``a``'s dtype, so a native sum rounds as the NumPy one of the Python tier
    does. (The halving is walked with a stack: numba's cache cannot link a recursive
    function into the kernels that call it.)"""
    if n <= 128:
        return _block_sum(a, lo, n)
    starts, sizes = np.empty(256, np.int64), np.empty(256, np.int64)
    combine = np.empty(256, np.bool_)
    sums = np.empty(128, a.dtype)
    top, done = 1, 0
    starts[0], sizes[0], combine[0] = lo, n, False
    while top:
        top -= 1
        start, size = starts[top], sizes[top]
        if combine[top]:  # (both halves summed: the first is below the second)
            done -= 1
            sums[done - 1] = sums[done - 1] + sums[done]
        elif size <= 128:
            sums[done] = _block_sum(a, start, size)
            done += 1
        else:
            half = size // 2
            half -= half % 8
            starts[top], sizes[top], combine[top] = start, size, True
            starts[top + 1], sizes[top + 1], combine[top + 1] = start + half, size - half, False
            starts[top + 2], sizes[top + 2], combine[top + 2] = start, half, False
            top += 3
    return sums[0]


@njit(cache=True, error_model="numpy")
def _output_row(r, sizes, kept_strides):
    """The output row of row ``r`` of a C-ordered array of outer dimensions ``sizes``."""
    o = 0
    for i in range(len(sizes) - 1, -1, -1):
        o += (r % sizes[i]) * kept_strides[i]
        r //= sizes[i]
    return o


@njit(cache=True, error_model="numpy")
def sum_in_numpy_order(rows, sizes, kept_strides, inner_reduced, out):
    """A float sum in the order NumPy's ``add.reduce`` takes over a C-contiguous operand, viewed
    as ``rows`` (its outer dimensions ``sizes`` flattened; the innermost, reduced or kept,
    across), into ``out`` (flat, C order): from zero, each output adds the pairwise sums of its
    rows (``inner_reduced``), or its rows element by element, in C order. ``kept_strides``:
    each outer dimension's stride in output rows (0 where reduced)."""
    n = rows.shape[1]
    out[:] = 0
    if inner_reduced:
        flat = rows.ravel()
        for r in range(rows.shape[0]):
            out[_output_row(r, sizes, kept_strides)] += pairwise_sum(flat, r * n, n)
        return out
    for r in range(rows.shape[0]):
        o = _output_row(r, sizes, kept_strides) * n
        for j in range(n):
            out[o + j] += rows[r, j]
    return out


@njit(cache=True, error_model="numpy")
def _beats(v, acc, largest):
    return v > acc if largest else v < acc


@njit(cache=True, error_model="numpy")
def extreme_rows(rows, largest):
    """The largest (or smallest) element of each row; NaN if the row has one, as lax."""
    out = np.empty(rows.shape[0], rows.dtype)
    for r in range(rows.shape[0]):
        acc = rows[r, 0]
        for k in range(1, rows.shape[1]):
            v = rows[r, k]
            if v != v:
                acc = v
                break
            if _beats(v, acc, largest):
                acc = v
        out[r] = acc
    return out


@njit(cache=True, error_model="numpy")
def prod_rows(rows):
    out = np.empty(rows.shape[0], rows.dtype)
    for r in range(rows.shape[0]):
        acc = rows[r, 0]
        for k in range(1, rows.shape[1]):
            acc = acc * rows[r, k]
        out[r] = acc
    return out


@njit(cache=True, error_model="numpy")
def any_rows(rows):
    out = np.zeros(rows.shape[0], np.bool_)
    for r in range(rows.shape[0]):
        for k in range(rows.shape[1]):
            if rows[r, k]:
                out[r] = True
                break
    return out


@njit(cache=True, error_model="numpy")
def all_rows(rows):
    out = np.ones(rows.shape[0], np.bool_)
    for r in range(rows.shape[0]):
        for k in range(rows.shape[1]):
            if not rows[r, k]:
                out[r] = False
                break
    return out


@njit(cache=True, error_model="numpy")
def arg_extreme_rows(rows, largest):
    """The index of the largest (or smallest) element of each row: the first NaN's if the row
    has one, else the first of equal extremes, as lax."""
    out = np.empty(rows.shape[0], np.int64)
    for r in range(rows.shape[0]):
        best = rows[r, 0]
        at = 0
        if best == best:
            for k in range(1, rows.shape[1]):
                v = rows[r, k]
                if v != v:
                    at = k
                    break
                if _beats(v, best, largest):
                    best = v
                    at = k
        out[r] = at
    return out


@njit(cache=True, error_model="numpy")
def batched_dot(a, b):
    """``a (B, M, K) @ b (B, K, N)`` per batch, BLAS for floats."""
    out = np.empty((a.shape[0], a.shape[1], b.shape[2]), a.dtype)
    for i in range(a.shape[0]):
        out[i] = np.dot(np.ascontiguousarray(a[i]), np.ascontiguousarray(b[i]))
    return out
