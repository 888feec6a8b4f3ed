"""Wrong values and gradients found outside the suite (issue 12) and by the differential fuzzer,
each reduced to its smallest form and checked against the hand-derived answer (float64)."""

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.ad_checkpoint import checkpoint, checkpoint_name

pytestmark = pytest.mark.usefixtures("x64")
A = np.array([0.3, -1.2, 2.0])


def test_identity_result_reused_in_place_under_jit():
    for ident in (lambda c: checkpoint_name(c, "b"), lax.stop_gradient):
        out = remat.jit(lambda c, ident=ident: (ident(c) * 0.5, c[0]))(np.array([1.0, 2.0]))
        np.testing.assert_array_equal(out[0], [0.5, 1.0])
        assert float(out[1]) == 1.0


def test_identity_result_reused_in_place_in_a_scan_body():
    _, ys = lax.scan(lambda c, t: (checkpoint_name(c, "b") * 0.5, c[0]), np.array([1.0, 2.0]),
                     jnp.zeros(2))
    np.testing.assert_array_equal(ys, [1.0, 0.5])


@pytest.mark.parametrize("order", ["jit_of_grad", "grad_of_jit"])
def test_checkpoint_input_shared_with_an_earlier_nonlinear_use(order):
    loss = lambda x: jnp.sum(x * x) + jnp.sum(checkpoint(jnp.sin)(x))
    g = remat.jit(remat.grad(loss)) if order == "jit_of_grad" else remat.grad(remat.jit(loss))
    np.testing.assert_allclose(g(A), 2 * A + np.cos(A), rtol=1e-12)


def test_jitted_pair_with_a_checkpointed_output():
    f = remat.jit(lambda x, y: (x * y, checkpoint(jnp.cos)(x)))
    g = remat.grad(lambda x: jnp.sum(f(x, x)[0]) + 2 * jnp.sum(f(x, x)[1]))(A)
    np.testing.assert_allclose(g, 2 * A - 2 * np.sin(A), rtol=1e-12)


TS = np.array([0.5, 1.0, -0.7])
W = np.array([0.3, -0.5, 0.8])


@pytest.mark.parametrize("where", ["inside_body", "whole_body"])
def test_scan_with_checkpoint_over_a_closed_over_differentiated_value(where):
    def loss(w):
        if where == "inside_body":
            body = lambda c, t: (c + checkpoint(lambda t: jnp.sum(jnp.cos(w)) * t)(t), None)
        else:
            body = checkpoint(lambda c, t: (c + jnp.sum(jnp.cos(w)) * t, None))
        return lax.scan(body, 0.0, TS)[0]

    np.testing.assert_allclose(remat.grad(loss)(W), -TS.sum() * np.sin(W), rtol=1e-12)


def test_nested_checkpoints_outer_without_prevent_cse():
    rng = np.random.default_rng(0)
    x, w, v, c = rng.standard_normal((4, 3)), rng.standard_normal((3, 3)), \
        rng.standard_normal(3), rng.standard_normal(3)

    def loss(x, w, v):
        e3 = w @ v

        def outer():
            e5 = v * v
            e7 = jnp.tanh(e5)
            (e10,) = checkpoint(lambda x, w, v, e3, e5, e7: (v * e3,))(x, w, v, e3, e5, e7)
            return e5, e7, e10

        _, e7, e10 = checkpoint(outer, prevent_cse=False)()
        return jnp.sum((e10 + e7) * c)

    gx, gw, gv = remat.grad(loss, argnums=(0, 1, 2))(x, w, v)
    e3 = w @ v
    np.testing.assert_array_equal(gx, np.zeros_like(x))
    np.testing.assert_allclose(gw, np.outer(c * v, v), rtol=1e-12)
    want_v = c * e3 + w.T @ (c * v) + c * 2 * v / np.cosh(v * v) ** 2
    np.testing.assert_allclose(gv, want_v, rtol=1e-12)


@pytest.mark.parametrize("policy", ["everything_saveable", "dots_saveable"])
def test_scan_in_checkpoint_with_a_known_carry_made_unknown_by_the_body(policy):
    """The carry starts known (zeros) but the body mixes in the differentiated ``w``: the
    policy-aware split made the carry unknown yet still passed it to the known scan, whose
    operands then no longer matched its body (found by the fuzzer)."""

    def f(w, xs):
        saving = getattr(remat.checkpoint_policies, policy)
        return remat.checkpoint(lambda w: _scan_loss(w, xs), policy=saving)(w)

    w = np.array([0.3, -0.2, 0.5])
    xs = np.linspace(0.1, 1.0, 12).reshape(4, 3)
    plain = remat.grad(lambda w: _scan_loss(w, xs))(w)
    np.testing.assert_allclose(remat.grad(f)(w, xs), plain, rtol=1e-12)
    np.testing.assert_allclose(plain, [-1.80914916, 5.3064672, -4.52805575], rtol=1e-7)


def _scan_loss(w, xs):
    def body(c, x):
        c = jnp.sin(c) * x + w * x
        return c, c * 2.0

    c, ys = lax.scan(body, jnp.zeros(3), xs)
    return jnp.sum(c) + jnp.sum(jnp.cos(ys))


@pytest.mark.parametrize("make, want", [
    (lambda: jnp.full((), 2998342421, jnp.uint32), np.uint32(2998342421)),
    (lambda: jnp.full((2,), 2**32 - 1, jnp.uint32), np.full(2, 2**32 - 1, np.uint32)),
    (lambda: lax.convert_element_type(2**31 + 3, jnp.uint32), np.uint32(2**31 + 3)),
    (lambda: remat.jit(lambda: jnp.full((), 2**31 + 5, jnp.uint32))(), np.uint32(2**31 + 5)),
])
def test_python_int_beyond_int32_fills_a_wider_dtype(make, want):
    """A Python int is taken at full width when a dtype is given: 2**31 fits a uint32 even
    though it is no int32 (found converting a PRNG seed)."""
    got = make()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), want)
