"""dtype canonicalization, weak types and JAX's promotion lattice."""

import itertools

import numpy as np
import pytest

from remat import dtypes
from remat.config import config

ALL = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
       np.float16, np.float32, np.float64, np.complex64]


@pytest.mark.parametrize("a, b, expected", [
    (np.int8, np.uint8, np.int16),
    (np.int32, np.float16, np.float16),
    (np.uint32, np.int32, np.int64),
    (np.bool_, np.int8, np.int8),
    (np.float16, np.float32, np.float32),
    (np.int64, np.float32, np.float32),
    (np.float32, np.complex64, np.complex64),
])
def test_promote_types_x64(a, b, expected, x64):
    assert dtypes.promote_types(a, b) == np.dtype(expected)


def test_64_bit_types_narrow_without_x64():
    assert not config.enable_x64
    assert dtypes.canonicalize_dtype(np.float64) == np.float32
    assert dtypes.canonicalize_dtype(np.int64) == np.int32
    assert dtypes.promote_types(np.uint32, np.int32) == np.int32  # int64, narrowed


def test_weak_types():
    # a Python float does not widen a float16 array; an int array meeting a float gets weak f32
    assert dtypes.result_type(np.ones(2, np.float16), 1.0) == np.float16
    assert dtypes.result_type(np.int8(1), 2) == np.int8
    dtype, weak = dtypes.result_type(np.int32(1), 1.0, return_weak_type_flag=True)
    assert dtype == np.float32 and weak
    dtype, weak = dtypes.result_type(1, 2, return_weak_type_flag=True)
    assert dtype == np.int32 and weak


def test_x64_flag_changes_python_scalar_dtypes(x64):
    assert dtypes.python_scalar_dtype(1.0) == np.float64
    assert dtypes.python_scalar_dtype(1) == np.int64


def test_short_names():
    assert [dtypes.short_name(d) for d in (np.float32, np.int8, np.uint16, np.bool_)] == [
        "f32", "i8", "u16", "bool"]


def test_lattice_matches_jax(x64):
    jax = pytest.importorskip("jax")
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        for a, b in itertools.product(ALL, ALL):
            expected = jax.numpy.promote_types(a, b)
            assert dtypes.promote_types(a, b) == np.dtype(expected), (a, b)
    finally:
        jax.config.update("jax_enable_x64", previous)
