"""remat.nn: values against float64 NumPy formulas (and JAX when installed), derivatives by
finite differences, derivatives at the kinks and at extreme inputs (finite, equal to the
analytic limits), softmax normalization, logsumexp options, one_hot, vmap and jit."""

import math

import numpy as np
import pytest

import remat
import remat.nn as nn
import remat.numpy as jnp
from remat.config import config
from remat.test_util import check_grads

_erf = np.vectorize(math.erf)


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _softplus(x):
    return np.logaddexp(x, 0)


SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

# name -> (function, float64 reference)
ELEMENTWISE = {
    "relu": (nn.relu, lambda x: np.maximum(x, 0)),
    "relu6": (nn.relu6, lambda x: np.clip(x, 0, 6)),
    "sigmoid": (nn.sigmoid, _sig),
    "silu": (nn.silu, lambda x: x * _sig(x)),
    "swish": (nn.swish, lambda x: x * _sig(x)),
    "tanh": (nn.tanh, np.tanh),
    "softplus": (nn.softplus, _softplus),
    "log_sigmoid": (nn.log_sigmoid, lambda x: -_softplus(-x)),
    "gelu": (nn.gelu, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi)
                                                       * (x + 0.044715 * x ** 3)))),
    "gelu_exact": (lambda x: nn.gelu(x, approximate=False),
                   lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    "leaky_relu": (nn.leaky_relu, lambda x: np.where(x >= 0, x, 0.01 * x)),
    "elu": (nn.elu, lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0)))),
    "celu": (lambda x: nn.celu(x, 0.7),
             lambda x: np.maximum(x, 0) + 0.7 * np.expm1(np.minimum(x, 0) / 0.7)),
    "selu": (nn.selu, lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA
                                                      * np.expm1(np.minimum(x, 0)))),
    "hard_tanh": (nn.hard_tanh, lambda x: np.clip(x, -1, 1)),
    "hard_sigmoid": (nn.hard_sigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
    "hard_silu": (nn.hard_silu, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "hard_swish": (nn.hard_swish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "soft_sign": (nn.soft_sign, lambda x: x / (np.abs(x) + 1)),
}

# smooth away from these points (kinks) -> second-order derivative checks
KINKS = {"relu": [0], "relu6": [0, 6], "leaky_relu": [0], "elu": [0], "selu": [0],
         "celu": [0], "hard_tanh": [-1, 1], "hard_sigmoid": [-3, 3], "hard_silu": [-3, 3],
         "hard_swish": [-3, 3]}


def _points(rng, kinks=(), n=12, scale=4.0):
    x = rng.uniform(-scale, scale, n)
    for k in kinks:  # keep finite differences off the kinks
        x = np.where(np.abs(x - k) < 0.05, x + 0.1, x)
    return x


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_values(name, rng):
    f, ref = ELEMENTWISE[name]
    x = np.concatenate([np.linspace(-8, 8, 33), [0.0, -1.0, 1.0, 6.0, -3.0, 3.0]])
    for dtype, tol in ((np.float32, 2e-6), (np.float64, 1e-12)):
        with config.override("jax_enable_x64", dtype == np.float64):
            out = f(x.astype(dtype))
            assert out.dtype == dtype and out.shape == x.shape
            np.testing.assert_allclose(np.asarray(out, np.float64), ref(x.astype(dtype)),
                                       rtol=tol, atol=tol)
    assert f(np.float16(0.5)).dtype == np.float16
    # integer inputs: as in JAX, relu and hard_tanh keep them, the logistic family rejects
    # them and the rest promote them to the default float
    if name in ("sigmoid", "silu", "swish"):
        with pytest.raises(TypeError):
            f(np.arange(3))
    else:
        expected = np.int32 if name in ("relu", "hard_tanh") else np.float32
        assert f(np.arange(3)).dtype == expected


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_gradients(name, rng):
    f, _ = ELEMENTWISE[name]
    with config.override("jax_enable_x64", True):
        x = _points(rng, KINKS.get(name, ()))
        check_grads(f, (x,), order=2, modes=("fwd", "rev"))
        check_grads(f, (np.float64(0.3),), order=1)


def test_derivatives_at_kinks_are_zero_like_jax():
    for x in (0.0, -0.0):
        assert remat.grad(nn.relu)(x) == 0.0
        assert remat.jvp(nn.relu, (x,), (1.0,))[1] == 0.0
    assert remat.grad(nn.relu)(2.0) == 1.0 and remat.grad(nn.relu)(-2.0) == 0.0
    assert remat.grad(nn.relu6)(0.0) == 0.0 and remat.grad(nn.relu6)(6.0) == 0.0
    assert remat.grad(nn.relu6)(3.0) == 1.0
    np.testing.assert_array_equal(remat.vmap(remat.grad(nn.relu))(np.float32([-1, 0, 1])),
                                  [0, 0, 1])
    # second derivative of relu is 0 everywhere (its JVP selects the tangent)
    assert remat.grad(remat.grad(nn.relu))(1.5) == 0.0


# derivative limits at +-1e4 (float32): (function, d/dx at -1e4, d/dx at +1e4, value at -1e4,
# value at +1e4)
EXTREMES = {
    "sigmoid": (nn.sigmoid, 0.0, 0.0, 0.0, 1.0),
    "silu": (nn.silu, 0.0, 1.0, 0.0, 1e4),
    "softplus": (nn.softplus, 0.0, 1.0, 0.0, 1e4),
    "log_sigmoid": (nn.log_sigmoid, 1.0, 0.0, -1e4, 0.0),
    "gelu": (nn.gelu, 0.0, 1.0, 0.0, 1e4),
    "gelu_exact": (lambda x: nn.gelu(x, approximate=False), 0.0, 1.0, 0.0, 1e4),
    "tanh": (nn.tanh, 0.0, 0.0, -1.0, 1.0),
    "elu": (nn.elu, 0.0, 1.0, -1.0, 1e4),
    "selu": (nn.selu, 0.0, SELU_SCALE, -SELU_SCALE * SELU_ALPHA, SELU_SCALE * 1e4),
    "celu": (nn.celu, 0.0, 1.0, -1.0, 1e4),
    "relu": (nn.relu, 0.0, 1.0, 0.0, 1e4),
    "hard_silu": (nn.hard_silu, 0.0, 1.0, 0.0, 1e4),
}


@pytest.mark.parametrize("name", sorted(EXTREMES))
def test_extreme_inputs_give_the_analytic_limits(name):
    f, d_lo, d_hi, v_lo, v_hi = EXTREMES[name]
    x = np.float32([-1e4, 1e4])
    out = np.asarray(f(x))
    np.testing.assert_allclose(out, [v_lo, v_hi], rtol=1e-6)
    g = np.asarray(remat.vmap(remat.grad(f))(x))
    assert np.isfinite(g).all(), g
    np.testing.assert_allclose(g, [d_lo, d_hi], rtol=1e-6, atol=1e-30)
    t = np.asarray(remat.jvp(f, (x,), (np.ones(2, np.float32),))[1])
    np.testing.assert_allclose(t, [d_lo, d_hi], rtol=1e-6, atol=1e-30)


def test_soft_sign_far_out():
    # d/dx = 1/(|x|+1) - |x|/(|x|+1)^2 cancels to 1/(|x|+1)^2: check it in float64, where the
    # cancellation costs 4 of 16 digits (float32 keeps about 3: only finite and positive)
    g32 = np.asarray(remat.vmap(remat.grad(nn.soft_sign))(np.float32([-1e4, 1e4])))
    assert np.isfinite(g32).all() and (g32 > 0).all()
    with config.override("jax_enable_x64", True):
        g = np.asarray(remat.vmap(remat.grad(nn.soft_sign))(np.array([-1e4, 1e4])))
    np.testing.assert_allclose(g, [1 / (1 + 1e4) ** 2] * 2, rtol=1e-10)


# --- softmax, log_softmax, logsumexp ---------------------------------------------------------


def _np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, 1, (0, 2)], ids=str)
def test_softmax_family_values(axis, rng):
    x = rng.normal(size=(3, 4, 5)) * 3
    with config.override("jax_enable_x64", True):
        y = np.asarray(nn.softmax(x, axis=axis))
        np.testing.assert_allclose(y, _np_softmax(x, axis), rtol=1e-12)
        np.testing.assert_allclose(y.sum(axis=axis), 1.0, rtol=1e-12)
        np.testing.assert_allclose(nn.log_softmax(x, axis=axis), np.log(_np_softmax(x, axis)),
                                   rtol=1e-12, atol=1e-12)
        lse = np.log(np.exp(x).sum(axis=axis))
        np.testing.assert_allclose(nn.logsumexp(x, axis=axis), lse, rtol=1e-12)
        np.testing.assert_allclose(nn.logsumexp(x, axis=axis, keepdims=True),
                                   np.log(np.exp(x).sum(axis=axis, keepdims=True)), rtol=1e-12)
    assert nn.softmax(x.astype(np.float32), axis=axis).dtype == np.float32


def test_softmax_family_gradients(rng):
    x = rng.normal(size=(3, 4))
    w = rng.normal(size=(3, 4))
    with config.override("jax_enable_x64", True):
        for axis in (-1, 0):
            for f in (nn.softmax, nn.log_softmax, nn.logsumexp):
                check_grads(lambda v, f=f, a=axis: f(v, axis=a), (x,), order=2)
        check_grads(lambda v: nn.logsumexp(v), (x,), order=2)
        check_grads(lambda v, b: nn.logsumexp(v, axis=1, b=b), (x, np.abs(w) + 0.1), order=2)
        check_grads(lambda v: nn.standardize(v, axis=1), (x,), order=2)
        check_grads(lambda v: nn.glu(v, axis=1), (x,), order=2)


def test_large_logits_no_overflow_and_exact_gradients():
    x = np.float32([1e4, 0.0, -1e4])
    np.testing.assert_array_equal(nn.softmax(x), [1, 0, 0])
    np.testing.assert_allclose(nn.log_softmax(x), [0, -1e4, -2e4])
    assert nn.logsumexp(x) == 1e4
    np.testing.assert_array_equal(remat.grad(nn.logsumexp)(x), [1, 0, 0])
    np.testing.assert_array_equal(remat.grad(lambda v: nn.log_softmax(v)[1])(x), [-1, 1, 0])
    np.testing.assert_array_equal(remat.grad(lambda v: nn.softmax(v)[0])(x), [0, 0, 0])
    jac = np.asarray(remat.jacfwd(nn.softmax)(np.float32([3e4, 3e4, -5.0])))
    np.testing.assert_allclose(jac[:2, :2], [[0.25, -0.25], [-0.25, 0.25]], rtol=1e-6)
    assert np.isfinite(jac).all()
    # all -inf: logsumexp is -inf (not NaN); softmax of equal huge values is uniform
    assert nn.logsumexp(np.float32([-np.inf, -np.inf])) == -np.inf
    np.testing.assert_allclose(nn.softmax(np.float32([3e38, 3e38])), [0.5, 0.5])
    assert np.isfinite(remat.grad(lambda v: nn.log_softmax(v)[0])(np.float32([88, -88])))\
        .all()


def test_softmax_where_and_logsumexp_options():
    x = np.float32([[1.0, 2.0, 3.0], [0.0, -1.0, 5.0]])
    mask = np.array([[True, False, True], [True, True, False]])
    y = np.asarray(nn.softmax(x, where=mask))
    ref = np.where(mask, np.exp(x) / np.where(mask, np.exp(x), 0).sum(1, keepdims=True), 0)
    np.testing.assert_allclose(y, ref, rtol=1e-6)
    ls = np.asarray(nn.log_softmax(x, where=mask))
    assert np.isneginf(ls[~mask]).all()
    np.testing.assert_allclose(ls[mask], np.log(ref[mask]), rtol=1e-6)
    np.testing.assert_allclose(nn.logsumexp(x, axis=1, where=mask),
                               np.log(np.where(mask, np.exp(x), 0).sum(1)), rtol=1e-6)
    b = np.float32([1.0, -3.0, 0.5])
    s = np.exp(x) @ b
    out, sign = nn.logsumexp(x, axis=1, b=b, return_sign=True)
    np.testing.assert_allclose(out, np.log(np.abs(s)), rtol=1e-6)
    np.testing.assert_array_equal(sign, np.sign(s))
    plain = np.asarray(nn.logsumexp(x, axis=1, b=b))
    np.testing.assert_array_equal(np.isnan(plain), s < 0)
    # b = 0 drops the term entirely (even an infinite one)
    assert nn.logsumexp(np.float32([np.inf, 1.0]), b=np.float32([0, 1])) == 1.0


def test_standardize_and_glu():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 6)).astype(np.float32) * 3 + 1
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    for alg in ("fast", "stable"):
        np.testing.assert_allclose(nn.standardize(x, algorithm=alg), ref, rtol=1e-4,
                                   atol=1e-5)
    with pytest.raises(ValueError, match="Unknown algorithm"):
        nn.standardize(x, algorithm="slow")
    np.testing.assert_allclose(nn.glu(x), x[:, :3] * _sig(x[:, 3:]), rtol=1e-6)
    np.testing.assert_allclose(nn.glu(x, axis=0), x[:2] * _sig(x[2:]), rtol=1e-6)
    with pytest.raises(ValueError, match="even"):
        nn.glu(x[:, :5])


# --- one_hot ---------------------------------------------------------------------------------


def test_one_hot():
    x = np.array([0, 2, 5, -1, 1])
    out = nn.one_hot(x, 3)
    np.testing.assert_array_equal(out, (x[:, None] == np.arange(3)).astype(np.float32))
    assert out.dtype == np.float32
    assert nn.one_hot(x, 3, dtype=jnp.int8).dtype == np.int8
    assert nn.one_hot(x, 3, dtype=bool).dtype == np.bool_
    y = np.array([[0, 1], [2, 0]])
    assert nn.one_hot(y, 4).shape == (2, 2, 4)
    np.testing.assert_array_equal(nn.one_hot(y, 4, axis=0), np.moveaxis(np.eye(4)[y], -1, 0))
    np.testing.assert_array_equal(nn.one_hot(y, 4, axis=1), np.moveaxis(np.eye(4)[y], -1, 1))
    np.testing.assert_array_equal(nn.one_hot(y, 4, axis=-2), np.moveaxis(np.eye(4)[y], -1, 1))
    assert nn.one_hot(y, 0).shape == (2, 2, 0)
    assert nn.one_hot(np.int32(2), 3).shape == (3,)
    with config.override("jax_enable_x64", True):
        assert nn.one_hot(x, 3).dtype == np.float64
    np.testing.assert_array_equal(remat.jit(nn.one_hot, static_argnums=1)(x, 3), out)
    np.testing.assert_array_equal(remat.vmap(lambda v: nn.one_hot(v, 3))(x), out)
    np.testing.assert_array_equal(remat.vmap(lambda v: nn.one_hot(v, 3, axis=0), in_axes=1,
                                             out_axes=2)(y), nn.one_hot(y, 3, axis=0))


def test_one_hot_errors():
    with pytest.raises(remat.errors.ConcretizationTypeError, match="num_classes"):
        remat.jit(nn.one_hot)(np.arange(3), 3)
    with pytest.raises(ValueError, match="non-negative"):
        nn.one_hot(np.arange(3), -1)
    with pytest.raises(ValueError, match="out of bounds"):
        nn.one_hot(np.arange(3), 3, axis=2)
    with pytest.raises(TypeError):
        nn.one_hot(np.arange(3), 2.5)


# --- transformations and JAX -----------------------------------------------------------------


def test_vmap_and_jit_match_plain_calls(rng):
    x = rng.normal(size=(4, 5)).astype(np.float32)
    for f in (nn.softmax, nn.log_softmax, nn.logsumexp, nn.gelu, nn.silu, nn.relu):
        for in_axes in (0, 1):
            out = remat.vmap(f, in_axes=in_axes)(x)
            ref = np.stack([np.asarray(f(np.take(x, i, in_axes)))
                            for i in range(x.shape[in_axes])])
            np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(remat.jit(f)(x), f(x), rtol=1e-6, atol=1e-7)
    g = remat.jit(remat.grad(lambda v: jnp.sum(nn.softmax(v) * np.arange(5.0))))(x)
    ref = remat.grad(lambda v: jnp.sum(nn.softmax(v) * np.arange(5.0)))(x)
    np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-7)


def test_matches_jax_nn():
    jax = pytest.importorskip("jax")
    x = np.linspace(-6, 5, 23).astype(np.float32)
    checks = [(n, getattr(jax.nn, n)(x), getattr(nn, n)(x)) for n in (
        "softplus", "log_sigmoid", "gelu", "selu", "log_softmax", "softmax", "logsumexp")]
    checks.append(("gelu exact", jax.nn.gelu(x, approximate=False),
                   nn.gelu(x, approximate=False)))
    checks.append(("one_hot", jax.nn.one_hot(np.array([[1, 3], [0, 9]]), 4, axis=1),
                   nn.one_hot(np.array([[1, 3], [0, 9]]), 4, axis=1)))
    for name, a, b in checks:
        assert np.asarray(a).dtype == np.asarray(b).dtype, name
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6, atol=1e-6,
                                   err_msg=name)
    g = jax.grad(lambda v: jax.nn.log_softmax(v)[3])(x)
    np.testing.assert_allclose(remat.grad(lambda v: nn.log_softmax(v)[3])(x), g, rtol=1e-6,
                               atol=1e-7)
