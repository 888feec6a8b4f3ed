"""The helpers of ``native_kernels`` in plain NumPy: a loop kernel's source runs as ordinary
Python with these (the generated-Python tier, from a loop's first call), and as machine code
with numba's."""

import numpy as np


def tanh_f32(x):
    return np.tanh(x)


def tanh_f32_scalar(v):
    return np.tanh(v)


def sum_all_f64(x):
    return np.sum(x, dtype=np.float64)


def sum_rows_f64(rows):
    return np.sum(rows, axis=1, dtype=np.float64)


def max_rows(rows):
    return np.max(rows, axis=1)


def min_rows(rows):
    return np.min(rows, axis=1)


def prod_rows(rows):
    return np.prod(rows, axis=1)


def any_rows(rows):
    return np.any(rows, axis=1)


def all_rows(rows):
    return np.all(rows, axis=1)


def argmax_rows(rows):
    return np.argmax(rows, axis=1)


def argmin_rows(rows):
    return np.argmin(rows, axis=1)


def batched_dot(a, b):
    return np.matmul(a, b)
