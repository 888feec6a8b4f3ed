"""custom_jvp and custom_vjp under jvp, grad, vmap, jit and nesting."""

import numpy as np
import pytest

import remat
import remat.numpy as jnp

f32 = np.float32


@remat.custom_jvp
def softplus(x):
    return jnp.log1p(jnp.exp(x))


@softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus(x), t * 2.0  # deliberately not the true derivative, to see it used


@remat.custom_vjp
def clip_gradient(x):
    return x


def _clip_fwd(x):
    return x, None


def _clip_bwd(_, g):
    return (jnp.clip(g, -1.0, 1.0),)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)

X = np.array([-1.0, 0.5, 3.0], f32)


def test_custom_jvp_rule_is_used_in_both_modes():
    np.testing.assert_allclose(softplus(X), np.log1p(np.exp(X)), rtol=1e-6)
    _, t = remat.jvp(softplus, (X,), (np.ones(3, f32),))
    np.testing.assert_allclose(t, 2.0)
    np.testing.assert_allclose(remat.grad(lambda x: jnp.sum(softplus(x)))(X), 2.0)


def test_custom_jvp_under_vmap_jit_and_second_order():
    g = remat.vmap(remat.grad(softplus))(X)
    np.testing.assert_allclose(g, 2.0)
    np.testing.assert_allclose(remat.jit(remat.grad(softplus))(f32(0.3)), 2.0)
    # the rule's tangent is linear in t with constant slope: the second derivative is 0
    assert remat.grad(remat.grad(softplus))(f32(0.3)) == 0.0


def test_custom_jvp_defjvps():
    @remat.custom_jvp
    def mul(x, y):
        return x * y

    mul.defjvps(lambda g, ans, x, y: g * y * 10.0, lambda g, ans, x, y: g * x)
    gx, gy = remat.grad(mul, argnums=(0, 1))(f32(2.0), f32(3.0))
    assert (gx, gy) == (30.0, 2.0)


def test_custom_jvp_nondiff_argnums():
    from functools import partial

    @partial(remat.custom_jvp, nondiff_argnums=(0,))
    def apply(fn, x):
        return fn(x)

    @apply.defjvp
    def _apply_jvp(fn, primals, tangents):
        (x,), (t,) = primals, tangents
        return apply(fn, x), t * 5.0

    assert remat.grad(lambda x: apply(jnp.sin, x))(f32(1.0)) == 5.0


def test_custom_jvp_staged_keeps_rule():
    jaxpr = remat.make_jaxpr(softplus)(f32(1.0))
    assert "custom_jvp_call" in str(jaxpr)


def test_custom_vjp_grad_vmap_jit():
    loss = lambda x: jnp.sum(clip_gradient(x) * 10.0)
    np.testing.assert_allclose(remat.grad(loss)(X), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(remat.jit(remat.grad(loss))(X), [1.0, 1.0, 1.0])
    per = remat.vmap(remat.grad(lambda x: clip_gradient(x) * 0.5))(X)
    np.testing.assert_allclose(per, [0.5, 0.5, 0.5])


def test_custom_vjp_with_residuals_and_nondiff():
    from functools import partial

    @partial(remat.custom_vjp, nondiff_argnums=(1,))
    def scaled_sin(x, k):
        return jnp.sin(x) * k

    def fwd(x, k):
        return scaled_sin(x, k), jnp.cos(x)

    def bwd(k, cos_x, g):
        return (g * cos_x * k,)

    scaled_sin.defvjp(fwd, bwd)
    np.testing.assert_allclose(remat.grad(lambda x: jnp.sum(scaled_sin(x, 3.0)))(X),
                               3 * np.cos(X), rtol=1e-6)


def test_custom_vjp_forward_mode_error():
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        remat.jvp(clip_gradient, (X,), (X,))


def test_custom_vjp_bad_fwd_output():
    @remat.custom_vjp
    def h(x):
        return x

    h.defvjp(lambda x: x, lambda r, g: (g,))
    with pytest.raises(TypeError, match="must produce a pair"):
        remat.grad(h)(f32(1.0))


def test_python_scalar_residuals_reach_bwd_as_python_scalars():
    """As JAX: a bool saved by fwd is still a bool in bwd (equinox branches on it), and ints
    and floats stay ints and floats, under grad, jit, vmap and checkpoint."""
    seen = []

    @remat.custom_vjp
    def f(x):
        return x * 2

    def fwd(x):
        return x * 2, (True, 3, 1.5, x)

    def bwd(r, g):
        flag, n, s, _ = r
        seen.append((type(flag), isinstance(n, int), isinstance(s, float)))
        return (g * n * s if flag else g,)

    f.defvjp(fwd, bwd)
    for fn in (remat.grad(f), remat.jit(remat.grad(f)), remat.grad(remat.checkpoint(f))):
        assert fn(1.0) == 4.5
    np.testing.assert_array_equal(remat.vmap(remat.grad(f))(np.ones(2, np.float32)), [4.5, 4.5])
    assert set(seen) == {(bool, True, True)}
