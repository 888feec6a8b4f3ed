"""``remat.nn.initializers``: bit for bit JAX's values for the same key (LAPACK's QR aside, to
rounding), the fan arithmetic of ``in_axis``/``out_axis``/``batch_axis``, dtypes, the variances
the initializers promise, jit and vmap, and JAX's errors."""

import math

import numpy as np
import pytest

import remat
import remat.numpy as jnp
import remat.random as random
from remat.config import config
from remat.nn import initializers as init

F32 = np.float32

# name -> (factory(module), shape)
INITIALIZERS = {  # one shape where the axes allow: each shape costs JAX compilations
    "zeros": (lambda I: I.zeros, (6, 7)),
    "ones": (lambda I: I.ones, (6, 7)),
    "constant": (lambda I: I.constant(-0.3), (6, 7)),
    "uniform": (lambda I: I.uniform(), (6, 7)),
    "uniform_scale": (lambda I: I.uniform(2.5), (6, 7)),
    "normal": (lambda I: I.normal(), (6, 7)),
    "normal_stddev": (lambda I: I.normal(0.7), (6, 7)),
    "truncated_normal": (lambda I: I.truncated_normal(0.5), (6, 7)),
    "truncated_normal_bounds": (lambda I: I.truncated_normal(1.0, lower=-1.0, upper=3.0),
                                (6, 7)),
    "glorot_uniform": (lambda I: I.glorot_uniform(), (6, 7)),
    "glorot_normal": (lambda I: I.glorot_normal(), (6, 7)),
    "xavier_uniform": (lambda I: I.xavier_uniform(), (6, 7)),
    "xavier_normal": (lambda I: I.xavier_normal(), (6, 7)),
    "lecun_uniform": (lambda I: I.lecun_uniform(), (6, 7)),
    "lecun_normal": (lambda I: I.lecun_normal(), (6, 7)),
    "he_uniform": (lambda I: I.he_uniform(in_axis=0, out_axis=1), (6, 7)),
    "he_normal": (lambda I: I.he_normal(), (6, 7)),
    "kaiming_uniform": (lambda I: I.kaiming_uniform(in_axis=-1, out_axis=-2), (6, 7)),
    "kaiming_normal": (lambda I: I.kaiming_normal(in_axis=-1, out_axis=-2), (6, 7)),
    "variance_scaling_fan_out": (lambda I: I.variance_scaling(0.5, "fan_out", "normal"),
                                 (6, 7)),
    "variance_scaling_fan_geo_avg": (lambda I: I.variance_scaling(2.0, "fan_geo_avg",
                                                                  "uniform"), (6, 7)),
    "variance_scaling_conv": (lambda I: I.variance_scaling(
        1.5, "fan_avg", "truncated_normal", in_axis=(0, 2), out_axis=3, batch_axis=(1,)),
        (2, 3, 1, 7)),
    "complex_uniform": (lambda I: I.variance_scaling(1.0, "fan_in", "uniform",
                                                     dtype=np.complex64), (6, 7)),
}


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture(scope="module")
def jax():
    return pytest.importorskip("jax")


@pytest.mark.parametrize("name", sorted(INITIALIZERS))
def test_bit_identical_to_jax(jax, name):
    factory, shape = INITIALIZERS[name]
    for seed in (0, 11):
        want = factory(jax.nn.initializers)(jax.random.key(seed), shape)
        got = factory(init)(random.key(seed), shape)
        assert same_bits(got, want), name
        assert same_bits(factory(init)(random.PRNGKey(seed), shape), want)  # raw keys too


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_bit_identical_to_jax_in_other_dtypes(jax, dtype):
    """(float16's truncated normal, which JAX draws differently on different CPUs: the next
    test.)"""
    x64 = dtype == np.float64
    factories = [lambda I: I.he_uniform(), lambda I: I.normal(0.3, dtype)]
    if x64:
        factories.append(lambda I: I.glorot_normal(dtype=dtype))
    jax.config.update("jax_enable_x64", x64)
    try:
        with config.override("jax_enable_x64", x64):
            for factory in factories:
                want = factory(jax.nn.initializers)(jax.random.key(2), (6, 7), dtype)
                got = factory(init)(random.key(2), (6, 7), dtype)
                assert got.dtype == dtype and same_bits(got, want)
    finally:
        jax.config.update("jax_enable_x64", False)


def _jax_float16_glorot_normal(jax, key, shape, rounding_once):
    """JAX's float16 ``glorot_normal``, written out as JAX computes it, with its uniform's
    ``floats * span + minval`` rounded once (in float32, where the product is exact) or after
    each operation."""
    jnp, lax, f16 = jax.numpy, jax.lax, np.float16
    variance = jnp.array(1.0 / ((shape[-2] + shape[-1]) / 2), f16)
    stddev = jnp.sqrt(variance) / jnp.array(.87962566103423978, f16)
    sqrt2 = np.array(np.sqrt(2), f16)
    lower, upper = jnp.array(-2, f16), jnp.array(2, f16)
    minval = np.asarray(lax.erf(lower / sqrt2))
    span = np.asarray(lax.erf(upper / sqrt2)) - minval
    floats = np.asarray(jax.random.uniform(key, shape, f16))  # [0, 1): the same random bits
    if rounding_once:
        u = (floats.astype(np.float32) * np.float32(span) + np.float32(minval)).astype(f16)
    else:
        u = floats * span + minval
    out = sqrt2 * lax.erf_inv(np.maximum(minval, u))
    inf = jnp.array(np.inf, f16)
    inside = lax.nextafter(lower, inf), lax.nextafter(upper, -inf)
    return jnp.clip(out, *inside) * stddev


def test_float16_truncated_normal_matches_jax_rounding_once(jax):
    """JAX's float16 truncated normal depends on the CPU: its uniform's ``floats * span +
    minval`` is a multiply-add that XLA fuses (as it fuses float32 ones) where the CPU has
    float16 FMAs (AVX512-FP16), rounding once, and rounds after each operation elsewhere (a
    few draws in ten then differ by an ulp of the uniform, several ulps of the result). remat
    rounds once on every machine: its draw is JAX's computed with one rounding, which is
    JAX's own on CPUs with float16 FMAs."""
    key, shape = jax.random.key(2), (6, 7)
    once = _jax_float16_glorot_normal(jax, key, shape, rounding_once=True)
    each = _jax_float16_glorot_normal(jax, key, shape, rounding_once=False)
    assert not same_bits(once, each)  # this key meets the difference
    jax_draw = jax.nn.initializers.glorot_normal(dtype=np.float16)(key, shape)
    assert same_bits(jax_draw, once) or same_bits(jax_draw, each)  # the write-up is JAX's
    got = init.glorot_normal(dtype=np.float16)(random.key(2), shape)
    assert got.dtype == np.float16 and same_bits(got, once)


def test_complex_truncated_normal_and_orthogonal_match_jax(jax):
    cases = [(lambda I: I.variance_scaling(1.0, "fan_in", "truncated_normal"), (6, 7),
              np.complex64),
             (lambda I: I.orthogonal(), (6, 4), None),
             (lambda I: I.orthogonal(2.0, column_axis=0), (3, 4, 5), None),
             (lambda I: I.delta_orthogonal(), (3, 3, 4, 4), None),
             (lambda I: I.delta_orthogonal(0.5), (3, 2, 3, 4, 5), None)]
    for factory, shape, dtype in cases:
        want = np.asarray(factory(jax.nn.initializers)(jax.random.key(5), shape, dtype))
        got = np.asarray(factory(init)(random.key(5), shape, dtype))
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=3e-7, rtol=3e-6)  # exp and QR round apart


def test_compute_fans():
    assert init._compute_fans((3, 4)) == (3, 4)
    assert init._compute_fans((2, 3, 4, 5)) == (4 * 6, 5 * 6)  # receptive field 2 * 3
    assert init._compute_fans((4, 3, 5), in_axis=0, out_axis=(1, 2)) == (4, 15)
    assert init._compute_fans((2, 3, 4), batch_axis=0) == (3, 4)
    assert init._compute_fans((7,), in_axis=0, out_axis=0) == (1, 1)  # field 1/7
    with pytest.raises(ValueError, match="Must be at least 2D or specify in_axis"):
        init._compute_fans((7,))


def test_variances_are_as_promised():
    key = random.key(0)
    shape = (200, 300)
    fan_in, fan_out = shape
    cases = [(init.glorot_uniform(), 2 / (fan_in + fan_out)),
             (init.glorot_normal(), 2 / (fan_in + fan_out)),
             (init.lecun_normal(), 1 / fan_in),
             (init.he_uniform(), 2 / fan_in),
             (init.he_normal(), 2 / fan_in),
             (init.variance_scaling(3.0, "fan_out", "normal"), 3 / fan_out),
             (init.variance_scaling(1.0, "fan_geo_avg", "uniform"),
              1 / math.sqrt(fan_in * fan_out)),
             (init.uniform(0.5), 0.5 ** 2 / 12 + 0.25 ** 2),  # E[x^2] of U[0, 0.5)
             (init.normal(0.2), 0.04)]
    for initializer, variance in cases:
        w = np.asarray(initializer(key, shape), np.float64)
        assert w.shape == shape and w.dtype == np.float64
        np.testing.assert_allclose(np.mean(w ** 2), variance, rtol=0.03)
    tn = np.asarray(init.glorot_normal()(key, shape))
    assert np.abs(tn).max() < 2 * math.sqrt(2 / (fan_in + fan_out)) / 0.87962566103423978
    c = np.asarray(init.variance_scaling(1.0, "fan_in", "truncated_normal",
                                         dtype=np.complex64)(key, shape))
    assert c.dtype == np.complex64
    np.testing.assert_allclose(np.mean(np.abs(c) ** 2), 1 / fan_in, rtol=0.03)


def test_orthogonal_initializers_are_orthogonal():
    w = np.asarray(init.orthogonal(scale=2.0)(random.key(1), (6, 4)))
    np.testing.assert_allclose(w.T @ w, 4 * np.eye(4), atol=1e-5)
    w = np.asarray(init.orthogonal(column_axis=0)(random.key(1), (3, 4, 5)))
    flat = np.moveaxis(w, 0, -1).reshape(-1, 3)
    np.testing.assert_allclose(flat.T @ flat, np.eye(3), atol=1e-5)
    assert np.asarray(init.orthogonal()(random.key(1), (0, 3))).shape == (0, 3)
    d = np.array(init.delta_orthogonal()(random.key(2), (3, 3, 4, 6)))
    centre = d[1, 1]
    np.testing.assert_allclose(centre @ centre.T, np.eye(4), atol=1e-5)
    d[1, 1] = 0
    assert not d.any()  # zero but at the spatial centre


def test_dtypes_and_defaults():
    key = random.key(3)
    assert init.zeros(key, (2, 3)).dtype == F32
    assert init.ones(key, (2,), np.int32).dtype == np.int32
    assert init.constant(2, np.float16)(key, (2,)).dtype == np.float16
    np.testing.assert_array_equal(init.constant(2.5)(key, (2, 2)), np.full((2, 2), 2.5, F32))
    assert init.normal(dtype=np.float16)(key, (3,)).dtype == np.float16
    assert init.normal(dtype=np.float16)(key, (3,), F32).dtype == F32  # the call's dtype wins
    assert init.he_normal(dtype=np.complex64)(key, (3, 3)).dtype == np.complex64
    with config.override("jax_enable_x64", True):
        assert init.glorot_uniform()(key, (2, 2)).dtype == np.float64
    assert isinstance(init.glorot_normal(), init.Initializer)
    assert isinstance(init.zeros, init.Initializer)
    assert init.xavier_uniform is init.glorot_uniform and init.kaiming_normal is init.he_normal


def test_jit_and_vmap():
    f = init.he_normal()
    key = random.key(4)
    np.testing.assert_array_equal(remat.jit(f, static_argnums=1)(key, (4, 5)), f(key, (4, 5)))
    keys = random.split(key, 3)
    batched = remat.vmap(lambda k: f(k, (4, 5)))(keys)
    for i in range(3):
        np.testing.assert_array_equal(batched[i], f(keys[i], (4, 5)))
    g = remat.jit(lambda k: init.orthogonal()(k, (5, 3)))
    np.testing.assert_allclose(g(key), init.orthogonal()(key, (5, 3)), atol=1e-6)


def test_errors():
    key = random.key(0)
    with pytest.raises(ValueError, match="invalid mode for variance scaling"):
        init.variance_scaling(1.0, "fan_middle", "normal")(key, (2, 2))
    with pytest.raises(ValueError, match="invalid distribution for variance scaling"):
        init.variance_scaling(1.0, "fan_in", "cauchy")(key, (2, 2))
    with pytest.raises(ValueError, match="Must be at least 2D"):
        init.glorot_uniform()(key, (5,))
    with pytest.raises(ValueError, match="at least a 2D shape"):
        init.orthogonal()(key, (5,))
    with pytest.raises(ValueError, match="3D, 4D or 5D"):
        init.delta_orthogonal()(key, (3, 3))
    with pytest.raises(ValueError, match="`fan_in` must be less or equal than `fan_out`"):
        init.delta_orthogonal()(key, (3, 5, 4))
    with pytest.raises(TypeError, match="nonnegative"):
        init.he_normal()(key, (3, -1))


def test_errors_agree_with_jax(jax):
    for call in (lambda I, k: I.variance_scaling(1.0, "fan_middle", "normal")(k, (2, 2)),
                 lambda I, k: I.orthogonal()(k, (5,)),
                 lambda I, k: I.delta_orthogonal()(k, (3, 5, 4)),
                 lambda I, k: I.lecun_uniform()(k, (5,))):
        with pytest.raises(Exception) as want:
            call(jax.nn.initializers, jax.random.key(0))
        with pytest.raises(Exception) as got:
            call(init, random.key(0))
        assert type(got.value) is type(want.value) and str(got.value) == str(want.value)


def test_initializers_in_a_model():
    """A two-layer network initialized and trained a step, as user code does it."""
    k1, k2 = random.split(random.key(7))
    params = {"w1": init.he_normal()(k1, (4, 8)), "b1": init.zeros(None, (8,)),
              "w2": init.glorot_uniform()(k2, (8, 1)), "b2": init.zeros(None, (1,))}

    def loss(p, x):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"]) ** 2)

    x = np.ones((3, 4), F32)
    grads = remat.grad(loss)(params, x)
    assert all(np.all(np.isfinite(np.asarray(g))) for g in grads.values())
    assert np.any(np.asarray(grads["w1"]) != 0)
