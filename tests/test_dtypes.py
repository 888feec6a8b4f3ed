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


# --- bfloat16, the float8/float6/float4 formats, int2/int4/uint2/uint4 ---------------------

ml_dtypes = pytest.importorskip("ml_dtypes")
ML = [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
      ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz,
      ml_dtypes.float8_e3m4, ml_dtypes.float8_e4m3, ml_dtypes.float8_e8m0fnu,
      ml_dtypes.float4_e2m1fn, ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn,
      ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2, ml_dtypes.int1,
      ml_dtypes.uint1]
FLOATS_ML = ML[:12]
INTS_ML = ML[12:]


@pytest.fixture
def jax_x64():
    jax = pytest.importorskip("jax")
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield jax
    jax.config.update("jax_enable_x64", previous)


def _jax_promotion(jax, a, b):
    try:
        return np.dtype(jax.numpy.promote_types(a, b))
    except jax.dtypes.TypePromotionError:
        return "error"


def _our_promotion(a, b):
    try:
        return dtypes.promote_types(a, b)
    except dtypes.TypePromotionError:
        return "error"


def test_lattice_with_ml_dtypes_matches_jax(x64, jax_x64):
    """Every pair of the standard and ml_dtypes types: the same result, or a
    TypePromotionError where JAX has no promotion (8-bit floats, 2- and 4-bit ints)."""
    everything = ALL + [np.uint64, np.complex128] + ML
    for a, b in itertools.product(everything, everything):
        assert _our_promotion(a, b) == _jax_promotion(jax_x64, a, b), (a, b)


@pytest.mark.parametrize("x64_on", [False, True])
def test_weak_python_scalars_with_ml_dtypes_match_jax(x64_on):
    jax = pytest.importorskip("jax")
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", x64_on)
    try:
        with config.override("jax_enable_x64", x64_on):
            for t in ML:
                for scalar in (1, 1.0, 1j, True):
                    try:
                        want = jax.dtypes.result_type(t, scalar, return_weak_type_flag=True)
                    except jax.dtypes.TypePromotionError:
                        with pytest.raises(dtypes.TypePromotionError):
                            dtypes.result_type(t, scalar)
                        continue
                    got = dtypes.result_type(t, scalar, return_weak_type_flag=True)
                    assert (got[0], got[1]) == (np.dtype(want[0]), want[1]), (t, scalar)
    finally:
        jax.config.update("jax_enable_x64", previous)


def test_type_promotion_error_is_a_value_error_with_jax_message():
    assert issubclass(dtypes.TypePromotionError, ValueError)
    with pytest.raises(dtypes.TypePromotionError, match="8-bit floats do not support"):
        dtypes.promote_types(ml_dtypes.float8_e4m3fn, np.float32)
    with pytest.raises(dtypes.TypePromotionError, match="4-bit integers do not support"):
        dtypes.promote_types(ml_dtypes.int4, np.int8)


def test_bfloat16_promotions():
    bf16 = np.dtype(ml_dtypes.bfloat16)
    assert dtypes.promote_types(bf16, np.float16) == np.float32
    assert dtypes.promote_types(bf16, np.int32) == bf16
    assert dtypes.promote_types(bf16, np.float32) == np.float32
    assert dtypes.result_type(np.ones(2, bf16), 1.0, return_weak_type_flag=True) == (bf16, False)
    assert dtypes.canonicalize_dtype(bf16) == bf16  # never narrowed


@pytest.mark.parametrize("t", ML, ids=lambda t: np.dtype(t).name)
def test_kind_issubdtype_finfo_iinfo_against_jax(t):
    jax = pytest.importorskip("jax")
    for parent in (np.generic, np.number, np.inexact, np.floating, np.integer,
                   np.signedinteger, np.unsignedinteger, np.float32, np.int8, t):
        assert dtypes.issubdtype(t, parent) == jax.dtypes.issubdtype(t, parent), parent
    assert not dtypes.issubdtype(np.float32, t)
    if t in FLOATS_ML:
        assert dtypes.kind(t) == "f" and dtypes.is_float(t) and dtypes.is_inexact(t)
        ours, theirs = dtypes.finfo(t), jax.dtypes.finfo(t)
        assert (float(ours.max), float(ours.eps), ours.bits) == \
            (float(theirs.max), float(theirs.eps), theirs.bits)
    else:
        assert dtypes.kind(t) in "iu" and dtypes.is_integer(t) and not dtypes.is_inexact(t)
        ours, theirs = dtypes.iinfo(t), jax.dtypes.iinfo(t)
        assert (int(ours.min), int(ours.max), ours.bits) == \
            (int(theirs.min), int(theirs.max), theirs.bits)


@pytest.mark.parametrize("t", ML + [np.bool_, np.int8, np.float32, np.complex64],
                         ids=lambda t: np.dtype(t).name)
def test_itemsize_bits_short_name_and_scalar_type_against_jax(t):
    jax = pytest.importorskip("jax")
    assert dtypes.itemsize_bits(t) == jax.dtypes.itemsize_bits(t)
    assert dtypes.scalar_type_of(np.zeros(2, t)) is jax.dtypes.scalar_type_of(np.zeros(2, t))
    with config.override("jax_enable_x64", False):
        printed = str(jax.make_jaxpr(lambda x: x)(np.zeros(2, t)))
    assert f"{dtypes.short_name(t)}[2]" in printed


def test_scalar_type_of_python_scalars_and_bad_dtypes():
    assert [dtypes.scalar_type_of(v) for v in (True, 1, 1.0, 1j)] == [bool, int, float, complex]
    with pytest.raises(TypeError):
        dtypes.itemsize_bits("not a dtype")
    with pytest.raises(ValueError):
        dtypes.itemsize_bits(None)


def test_exported_names_are_jax_scalar_types():
    jax = pytest.importorskip("jax")
    assert dtypes.bfloat16 is jax.dtypes.bfloat16
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz", "float8_e4m3fnuz",
                 "float8_e5m2fnuz", "float8_e3m4", "float8_e4m3", "float8_e8m0fnu",
                 "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "int4", "uint4", "int2",
                 "uint2"):
        assert np.dtype(getattr(dtypes, name)) == np.dtype(getattr(jax.numpy, name)), name


# --- jax_numpy_dtype_promotion="strict" ------------------------------------------------------

# what jnp.add gives under strict promotion, as JAX 0.10: dtype and weak type, or "error";
# Python scalars promote into their kind and above, dtypes never into one another
STRICT_ADD = [
    (np.ones(2, np.float16), np.ones(2, np.float32), "error"),
    (np.ones(2, np.int32), np.ones(2, np.float32), "error"),
    (np.ones(2, np.int8), np.ones(2, np.int32), "error"),
    (np.ones(2, np.bool_), 1, "error"),
    (np.ones(2, np.float16), 1.0, ("float16", False)),
    (np.ones(2, np.float16), 1, ("float16", False)),
    (np.ones(2, np.int8), 1, ("int8", False)),
    (np.ones(2, np.int8), 1.0, "error"),
    (np.ones(2, np.float32), 1j, "error"),
    (np.ones(2, np.complex64), 1.0, ("complex64", False)),
    (1, 1.0, ("float32", True)),
    (1.0, 1j, ("complex64", True)),
    (np.ones(2, np.float32), np.ones(2, np.float32), ("float32", False)),
]


def _strict_add(jnp, x, y, error):
    try:
        out = jnp.add(x, y)
    except error:
        return "error"
    return str(out.dtype), bool(out.weak_type)


@pytest.fixture
def strict_promotion():
    config.update("jax_numpy_dtype_promotion", "strict")
    yield
    config.update("jax_numpy_dtype_promotion", "standard")


@pytest.mark.parametrize("x, y, expected", STRICT_ADD)
def test_strict_promotion(x, y, expected, strict_promotion):
    import remat.numpy as jnp

    assert _strict_add(jnp, x, y, dtypes.TypePromotionError) == expected
    assert _strict_add(jnp, y, x, dtypes.TypePromotionError) == expected


def test_strict_promotion_message_and_arange(strict_promotion):
    import remat.numpy as jnp

    with pytest.raises(dtypes.TypePromotionError, match=r"Input dtypes \('float16', 'float32'\) "
                       r"have no available implicit dtype promotion path when "
                       r"jax_numpy_dtype_promotion=strict"):
        jnp.promote_types(np.float16, np.float32)
    # (arange's Python-scalar bounds are weakly typed: they join without promotion)
    assert jnp.arange(0.0, 10, 2).dtype == np.float32
    assert jnp.arange(np.int8(0), 10).dtype == np.int8


@pytest.mark.parametrize("x, y, expected", STRICT_ADD)
def test_strict_promotion_matches_jax(x, y, expected):
    jax = pytest.importorskip("jax")
    with jax.numpy_dtype_promotion("strict"):
        got = _strict_add(jax.numpy, x, y, jax.dtypes.TypePromotionError)
    assert got == expected


@pytest.mark.parametrize("mode", ["standard", "strict"])
def test_spaces_and_trapezoid_take_their_inputs_inexact_dtype(mode):
    # (as JAX: linspace/logspace/geomspace compute in the inexact dtype of their bounds, so
    # float16 bounds give float16 and integer bounds float32, under strict promotion too;
    # trapezoid integrates integers as floats)
    import remat.numpy as jnp

    config.update("jax_numpy_dtype_promotion", mode)
    try:
        for fn in (jnp.linspace, jnp.logspace, jnp.geomspace):
            assert fn(np.float16(1), np.float16(2), 3).dtype == np.float16
            assert fn(np.int32(1), np.int32(4), 3).dtype == np.float32
        np.testing.assert_allclose(np.asarray(jnp.linspace(np.int8(0), 4, 3)), [0, 2, 4])
        out = jnp.trapezoid(np.arange(6, dtype=np.int32).reshape(2, 3))
        assert out.dtype == np.float32
        np.testing.assert_allclose(np.asarray(out), [2.0, 8.0])
    finally:
        config.update("jax_numpy_dtype_promotion", "standard")


def test_weak_operands_whose_join_is_a_weak_kind_take_its_default():
    # (weakly typed int64 and uint64 join at the weak float kind: its default dtype, weak)
    with config.override("jax_enable_x64", True):
        assert dtypes.result_type_of([(np.int64, True), (np.uint64, True)]) == \
            (np.dtype(np.float64), True)
