"""bfloat16, the float8 formats and float16 through every remat API that takes a float dtype,
against JAX: ``finfo``/``iinfo``, ``issubdtype``/``isdtype``, creation, conversion and
promotion, the float predicates, ``nan_to_num``, ``nextafter``, ``spacing``, the random
samplers and ``nn.initializers`` (bit for bit), reductions, and the lax operations whose dtype
checks asked NumPy's ``dtype.kind`` (which is 'V' for the ml_dtypes types).

The samplers' values are JAX's on the CPU: XLA computes bfloat16 and float8 a step at a time
in a wider type, rounding each step, as NumPy does on ml_dtypes arrays. A float16 sampler whose
uniform draw is scaled to other bounds than [0, 1) depends on the machine (XLA rounds its
``u * span + lo`` once on some, each step on others; ``remat.random.bits``), so float16 is
compared bit for bit only where the machine does not matter.
"""

import ml_dtypes
import numpy as np
import pytest

import remat
import remat.numpy as jnp
import remat.random as random
from remat import dtypes, lax
from remat.experimental import checkify
from remat.nn import initializers
from remat.test_util import check_grads

jax = pytest.importorskip("jax")
jjnp = jax.numpy

FLOATS = ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]
ML_FLOATS = ["bfloat16", "float8_e4m3fn", "float8_e5m2"]
SMALL_INTS = ["int4", "uint4", "int2", "uint2"]
VALUES = [0.0, -0.0, 1.0, -2.5, 1e-3, 300.0, np.inf, -np.inf, np.nan]


def _bits(a):
    a = np.asarray(a)
    if a.dtype == np.bool_ or dtypes.kind(a.dtype) in "iu":
        return a
    return a.view(f"uint{a.dtype.itemsize * 8}")


def assert_same(got, want):
    """Equal dtype, shape and bits (any NaN matches any NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    same = _bits(got) == _bits(want)
    if dtypes.is_inexact(got.dtype):
        same |= np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    assert same.all(), (got, want)


def values(name):
    """VALUES in ``name`` (float8_e4m3fn has no infinity: those become NaN)."""
    with np.errstate(all="ignore"):
        return np.array(VALUES, np.float32).astype(getattr(jjnp, name))


@pytest.mark.parametrize("name", FLOATS)
def test_finfo_matches_jax(name):
    want = jjnp.finfo(getattr(jjnp, name))
    for arg in (getattr(jnp, name), np.dtype(name), name, jnp.zeros(2, getattr(jnp, name))):
        got = jnp.finfo(arg)
        for field in ("bits", "dtype", "nmant", "nexp", "maxexp", "minexp", "machep", "negep",
                      "iexp", "precision"):
            assert getattr(got, field) == getattr(want, field), field
        for field in ("eps", "epsneg", "max", "min", "tiny", "smallest_normal",
                      "smallest_subnormal", "resolution"):
            assert_same(getattr(got, field), getattr(want, field))
    assert dtypes.finfo(getattr(dtypes, name)).bits == want.bits


@pytest.mark.parametrize("name", SMALL_INTS)
def test_iinfo_of_the_small_integers_matches_jax(name):
    want = jjnp.iinfo(getattr(jjnp, name))
    got = jnp.iinfo(getattr(jnp, name))
    assert (got.min, got.max, got.bits, got.dtype) == (want.min, want.max, want.bits, want.dtype)
    assert jnp.iinfo(jnp.zeros(2, getattr(jnp, name))).max == want.max


@pytest.mark.parametrize("name", FLOATS + SMALL_INTS)
def test_issubdtype_and_isdtype_match_jax(name):
    abstract = ["generic", "number", "inexact", "floating", "complexfloating", "integer",
                "signedinteger", "unsignedinteger"]
    for ours in (getattr(jnp, name), np.dtype(name), name):
        theirs = ours if ours is name or isinstance(ours, np.dtype) else getattr(jjnp, name)
        for parent in abstract:
            assert jnp.issubdtype(ours, getattr(jnp, parent)) == \
                jjnp.issubdtype(theirs, getattr(jjnp, parent)), (ours, parent)
        assert jnp.issubdtype(ours, getattr(jnp, name))
        assert not jnp.issubdtype(jnp.float32, ours)
    kinds = ["bool", "signed integer", "unsigned integer", "integral", "real floating",
             "complex floating", "numeric", ("bool", "real floating"), name, "float32"]
    for kind in kinds:
        assert jnp.isdtype(getattr(jnp, name), kind) == jjnp.isdtype(getattr(jjnp, name), kind)
    with pytest.raises(ValueError, match="Unrecognized kind"):
        jnp.isdtype(getattr(jnp, name), "real floatin")


@pytest.mark.parametrize("name", FLOATS)
def test_creation_conversion_and_promotion_match_jax(name):
    ours, theirs = getattr(jnp, name), getattr(jjnp, name)
    assert_same(jnp.zeros(3, dtype=ours), jjnp.zeros(3, dtype=theirs))
    assert_same(jnp.ones((2, 2), name), jjnp.ones((2, 2), name))
    assert_same(jnp.full(3, 0.3, ours), jjnp.full(3, 0.3, theirs))
    assert_same(jnp.array([0.1, 1, 2.7], dtype=ours), jjnp.array([0.1, 1, 2.7], dtype=theirs))
    assert_same(jnp.array([0.1, 1e4], jnp.float32).astype(ours),
                jjnp.array([0.1, 1e4], jjnp.float32).astype(theirs))
    assert_same(ours(1.3), theirs(1.3))
    assert jnp.dtype(name) == jjnp.dtype(name)
    # float to integer conversion saturates and takes NaN to 0, as in JAX
    for to in (np.int32, np.uint8, np.int8):
        assert_same(jnp.asarray(values(name)).astype(to), jjnp.asarray(values(name)).astype(to))
    for other in FLOATS + ["float32", "int8"]:
        try:
            want = jjnp.promote_types(theirs, getattr(jjnp, other))
        except jax.dtypes.TypePromotionError:
            with pytest.raises(dtypes.TypePromotionError, match="no available implicit"):
                jnp.promote_types(ours, getattr(jnp, other))
            continue
        assert jnp.promote_types(ours, getattr(jnp, other)) == want
    for scalar in (1, 1.0):
        assert jnp.result_type(ours, scalar) == jjnp.result_type(theirs, scalar)


@pytest.mark.parametrize("name", FLOATS)
def test_float_predicates_nan_to_num_nextafter_and_spacing_match_jax(name):
    x = values(name)
    for fn in ("isnan", "isinf", "isfinite", "isposinf", "isneginf", "nan_to_num"):
        assert_same(getattr(jnp, fn)(x), getattr(jjnp, fn)(x))
    assert_same(jnp.nan_to_num(x, nan=1.5, posinf=2.0, neginf=-3.0),
                jjnp.nan_to_num(x, nan=1.5, posinf=2.0, neginf=-3.0))
    zeros, ones = np.zeros_like(x), np.ones_like(x)
    for toward in (zeros, ones, -ones, x):
        assert_same(jnp.nextafter(x, toward), jjnp.nextafter(x, toward))
    if name in ("bfloat16", "float16"):  # JAX's spacing needs a 16-bit or wider signbit
        assert_same(jnp.spacing(x), jjnp.spacing(x))
        assert_same(jnp.signbit(x), jjnp.signbit(x))
    else:  # the float8s: NumPy's spacing and signbit on ml_dtypes arrays
        with np.errstate(all="ignore"):
            assert_same(jnp.spacing(x), np.spacing(x))
        assert_same(jnp.signbit(x), np.signbit(x))


# samplers: (name, call); the float16 draws scaled to other bounds depend on the machine
EXACT_IN_FLOAT16 = {"uniform", "normal", "exponential", "gumbel", "laplace", "logistic",
                    "cauchy", "rayleigh", "bernoulli", "weibull_min", "pareto", "triangular",
                    "wald", "lognormal", "categorical"}
SAMPLERS = {
    "uniform": lambda r, k, d: r.uniform(k, (64,), d),
    "uniform_bounds": lambda r, k, d: r.uniform(k, (64,), d, -0.3, 2.5),
    "normal": lambda r, k, d: r.normal(k, (64,), d),
    "truncated_normal": lambda r, k, d: r.truncated_normal(k, -1.5, 2.0, (64,), d),
    "exponential": lambda r, k, d: r.exponential(k, (64,), d),
    "gumbel": lambda r, k, d: r.gumbel(k, (64,), d),
    "laplace": lambda r, k, d: r.laplace(k, (64,), d),
    "logistic": lambda r, k, d: r.logistic(k, (64,), d),
    "cauchy": lambda r, k, d: r.cauchy(k, (64,), d),
    "rayleigh": lambda r, k, d: r.rayleigh(k, 1.0, (64,), d),
    "bernoulli": lambda r, k, d: r.bernoulli(k, np.array(0.3, d), (64,)),
    "gamma": lambda r, k, d: r.gamma(k, 2.0, (64,), d),  # beta, t, chisquare... build on it
    "weibull_min": lambda r, k, d: r.weibull_min(k, 1.0, 2.0, (64,), d),
    "pareto": lambda r, k, d: r.pareto(k, 2.0, (64,), d),
    "triangular": lambda r, k, d: r.triangular(k, 0.0, 0.3, 1.0, (64,), d),
    "wald": lambda r, k, d: r.wald(k, 1.0, (64,), d),
    "lognormal": lambda r, k, d: r.lognormal(k, 0.5, (64,), d),
    "categorical": lambda r, k, d: r.categorical(k, np.array([0.1, 0.5, -1.0], d), shape=(64,)),
}


@pytest.mark.parametrize("name", FLOATS)
def test_random_samplers_bit_identical_to_jax(name):
    ours, theirs = getattr(jnp, name), getattr(jjnp, name)
    for sampler, draw in SAMPLERS.items():
        if name == "float16" and sampler not in EXACT_IN_FLOAT16:
            continue
        assert_same(draw(random, random.key(3), ours), draw(jax.random, jax.random.key(3),
                                                            theirs)), sampler
    # the other key layout, and raw keys
    with jax.threefry_partitionable(False), remat.config.override(
            "jax_threefry_partitionable", False):
        assert_same(random.normal(random.PRNGKey(5), (3, 7), ours),
                    jax.random.normal(jax.random.PRNGKey(5), (3, 7), theirs))


@pytest.mark.parametrize("name", ML_FLOATS)
def test_samplers_through_a_norm_agree_to_a_rounding(name):
    """JAX's ``maxwell`` (and ``ball``) take a norm, which XLA fuses without rounding the
    squares: values agree with it to one rounding of the dtype."""
    ours, theirs = getattr(jnp, name), getattr(jjnp, name)
    eps = float(jjnp.finfo(theirs).eps)
    got, want = random.maxwell(random.key(2), (64,), ours), \
        jax.random.maxwell(jax.random.key(2), (64,), theirs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=eps, atol=0)


def test_uniform_rejects_what_jax_rejects():
    with pytest.raises(TypeError, match="8-, 16-, 32-, or 64-bit"):
        random.uniform(random.key(0), (3,), jnp.float4_e2m1fn)
    with pytest.raises(ValueError, match="must be a float dtype"):
        random.uniform(random.key(0), (3,), jnp.int4)


INITIALIZERS = {
    "glorot_normal": lambda I, d: I.glorot_normal(dtype=d),
    "he_uniform": lambda I, d: I.he_uniform(dtype=d),
    "normal": lambda I, d: I.normal(0.3, d),
    "uniform": lambda I, d: I.uniform(0.3, d),
    "truncated_normal": lambda I, d: I.truncated_normal(0.3, d),
    "variance_scaling": lambda I, d: I.variance_scaling(2.0, "fan_out", "normal", dtype=d),
    "constant": lambda I, d: I.constant(0.3, d),
    "zeros": lambda I, d: lambda key, shape: I.zeros(key, shape, d),
    "ones": lambda I, d: lambda key, shape: I.ones(key, shape, d),
}
TRUNCATED = {"glorot_normal", "truncated_normal"}


@pytest.mark.parametrize("name", FLOATS)
def test_initializers_bit_identical_to_jax(name):
    ours, theirs = getattr(jnp, name), getattr(jjnp, name)
    for init, make in INITIALIZERS.items():
        if name == "float16" and init in TRUNCATED:  # truncated_normal scales its uniform
            continue
        want = make(jax.nn.initializers, theirs)(jax.random.key(4), (5, 6))
        assert_same(make(initializers, ours)(random.key(4), (5, 6)), want)


@pytest.mark.parametrize("name", FLOATS)
def test_reductions_accumulate_as_jax(name):
    """bfloat16 and float16 accumulate in float32, the float8s in their own type (over more
    terms XLA's float8 sums follow its own tree, hence the short rows)."""
    x = np.random.default_rng(0).standard_normal((200, 7)).astype(getattr(jjnp, name))
    for fn in ("sum", "var", "std", "prod", "cumsum", "max", "argmax"):
        assert_same(getattr(jnp, fn)(x, axis=-1), getattr(jjnp, fn)(x, axis=-1))
    # XLA divides by the count as a product with its float32 reciprocal: one rounding apart
    np.testing.assert_allclose(np.asarray(jnp.mean(x, axis=-1), np.float32),
                               np.asarray(jjnp.mean(x, axis=-1), np.float32),
                               rtol=float(jjnp.finfo(x.dtype).eps))
    if name in ("bfloat16", "float16"):
        assert_same(jnp.linalg.norm(x[:, 0]), jjnp.linalg.norm(x[:, 0]))


@pytest.mark.parametrize("name", FLOATS)
def test_lax_operations_take_low_precision_floats(name):
    theirs = getattr(jjnp, name)
    x = np.array([[1.5, -2.0, 3.25, 0.5], [0.25, 4.0, -1.0, 2.0]], theirs)
    assert_same(jnp.sort(values(name)), jjnp.sort(values(name)))
    assert_same(jnp.argsort(values(name)), jjnp.argsort(values(name)))
    assert_same(lax.top_k(x, 2)[1], jax.lax.top_k(x, 2)[1])
    assert_same(lax.approx_max_k(x, 2)[1], jax.lax.approx_max_k(x, 2)[1])
    assert_same(lax.reduce_window(x, np.array(0, theirs), lax.add, (1, 2), (1, 1), "VALID"),
                jax.lax.reduce_window(x, np.array(0, theirs), jax.lax.add, (1, 2), (1, 1),
                                      "VALID"))
    lhs, rhs = x[None, None], x[None, None, :, :2]
    assert_same(lax.conv_general_dilated(lhs, rhs, (1, 1), "VALID",
                                         preferred_element_type=np.float32),
                jax.lax.conv_general_dilated(lhs, rhs, (1, 1), "VALID",
                                             preferred_element_type=np.float32))
    assert_same(remat.linear_transpose(lambda v: 2 * v, x)(x)[0],
                jax.linear_transpose(lambda v: 2 * v, x)(x)[0])
    u = lax.rng_uniform(np.array(0, theirs), np.array(1, theirs), (3,))
    assert u.dtype == np.dtype(name) and u.shape == (3,)


def test_checkify_and_check_grads_see_bfloat16():
    err, _ = checkify.checkify(jnp.log, errors=checkify.nan_checks)(
        np.array([-1.0], ml_dtypes.bfloat16))
    assert "nan generated by primitive: log" in str(err.get())
    check_grads(lambda v: jnp.sin(v) * v, (np.array([1.0, 2.0], ml_dtypes.bfloat16),), 2)
    wrong = remat.custom_jvp(jnp.sin)
    wrong.defjvp(lambda primals, tangents: (jnp.sin(primals[0]), 3 * tangents[0]))
    with pytest.raises(AssertionError):  # compared at bfloat16's tolerance, not skipped
        check_grads(wrong, (np.array([1.0], ml_dtypes.bfloat16),), 1, modes=["fwd"])
