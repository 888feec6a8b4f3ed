"""The numba helpers generated native loops call: what has no one-line NumPy form in numba
(reductions over rows with a float64 accumulator, batched matmuls, a fast float32 tanh).
Compiled once per signature and cached on disk next to this file (``cache=True``)."""

import numpy as np
from numba import njit

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


@njit(cache=True, fastmath=False)
def tanh_f32(x):
    out = np.empty(x.shape, np.float32)
    flat_in = x.ravel()  # (a copy when x is a strided view)
    flat = out.ravel()
    for i in range(flat_in.size):
        v = flat_in[i]
        if abs(v) < _TINY:
            flat[i] = v
            continue
        c = min(max(v, -_TANH_CLAMP), _TANH_CLAMP)
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
        flat[i] = p / q
    return out


@njit(cache=True)
def tanh_f32_scalar(v):
    return tanh_f32(np.full(1, v, np.float32))[0]


@njit(cache=True)
def sum_rows_f64(rows):
    out = np.empty(rows.shape[0], np.float64)
    for r in range(rows.shape[0]):
        acc = 0.0
        for k in range(rows.shape[1]):
            acc += np.float64(rows[r, k])
        out[r] = acc
    return out


@njit(cache=True)
def sum_all_f64(x):
    """The sum of every element, accumulated in float64."""
    acc = 0.0
    for v in x.ravel():
        acc += np.float64(v)
    return acc


@njit(cache=True)
def _beats(v, acc, largest):
    return v > acc if largest else v < acc


@njit(cache=True)
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


@njit(cache=True)
def prod_rows(rows):
    out = np.empty(rows.shape[0], rows.dtype)
    for r in range(rows.shape[0]):
        acc = rows[r, 0]
        for k in range(1, rows.shape[1]):
            acc = acc * rows[r, k]
        out[r] = acc
    return out


@njit(cache=True)
def any_rows(rows):
    out = np.zeros(rows.shape[0], np.bool_)
    for r in range(rows.shape[0]):
        for k in range(rows.shape[1]):
            if rows[r, k]:
                out[r] = True
                break
    return out


@njit(cache=True)
def all_rows(rows):
    out = np.ones(rows.shape[0], np.bool_)
    for r in range(rows.shape[0]):
        for k in range(rows.shape[1]):
            if not rows[r, k]:
                out[r] = False
                break
    return out


@njit(cache=True)
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


@njit(cache=True)
def batched_dot(a, b):
    """``a (B, M, K) @ b (B, K, N)`` per batch, BLAS for floats."""
    out = np.empty((a.shape[0], a.shape[1], b.shape[2]), a.dtype)
    for i in range(a.shape[0]):
        out[i] = np.dot(np.ascontiguousarray(a[i]), np.ascontiguousarray(b[i]))
    return out
