"""The options of custom derivative and batching rules, as JAX's: ``symbolic_zeros``
(``SymbolicZero``, ``CustomVJPPrimal``), ``optimize_remat``, eager calls, ``custom_vmap``."""

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat.custom_batching import custom_vmap, sequential_vmap
from remat.custom_derivatives import (
    CustomVJPPrimal,
    SymbolicZero,
    custom_vjp_primal_tree_values,
    zero_from_primal,
)


def test_custom_functions_run_eagerly_outside_transformations():
    @remat.custom_jvp
    def relu_like(x):
        return x if x > 0 else 0.0 * x  # Python control flow on a value

    relu_like.defjvp(lambda p, t: (relu_like(p[0]), t[0] * (p[0] > 0)))
    assert float(relu_like(2.0)) == 2.0 and float(relu_like(-1.0)) == 0.0

    @remat.custom_vjp
    def clip(x):
        return x if x < 1 else 1.0

    clip.defvjp(lambda x: (clip(x), None), lambda _, g: (g,))
    assert float(clip(3.0)) == 1.0


def test_rules_see_arrays():
    seen = []

    @remat.custom_vjp
    def f(x):
        return jnp.sin(x)

    def bwd(res, g):
        seen.append((type(res), type(g)))
        return (res * g,)

    f.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), bwd)
    remat.grad(f)(1.0)
    remat.vjp(f, 2.0)[1](1.0)
    assert all(r is remat.Array and g is remat.Array for r, g in seen)
    ct, = remat.vjp(jnp.sin, 2.0)[1](1.0)
    assert type(ct) is remat.Array


def test_custom_vjp_symbolic_zeros():
    log = []

    @remat.custom_vjp
    def f(x, y):
        return x * y

    def fwd(x, y):
        assert isinstance(x, CustomVJPPrimal) and isinstance(y, CustomVJPPrimal)
        log.append((x.perturbed, y.perturbed))
        return x.value * y.value, (x.value, y.value)

    def bwd(res, g):
        log.append(type(g).__name__)
        x, y = res
        return g * y, SymbolicZero(remat.core.get_aval(y))

    f.defvjp(fwd, bwd, symbolic_zeros=True)
    assert float(remat.grad(f)(2.0, 3.0)) == 3.0
    assert log[0] == (True, False)
    gx, gy = remat.grad(f, argnums=(0, 1))(2.0, 3.0)
    assert log[2] == (True, True) and (float(gx), float(gy)) == (3.0, 0.0)
    # an unused output's cotangent reaches bwd as a symbolic zero
    @remat.custom_vjp
    def two(x):
        return x, 2 * x

    two.defvjp(lambda x: ((x.value, 2 * x.value), None),
               lambda _, g: (log.append(type(g[1]).__name__) or g[0],),
               symbolic_zeros=True)
    assert float(remat.grad(lambda x: two(x)[0])(1.0)) == 1.0
    assert log[-1] == "SymbolicZero"


def test_custom_jvp_symbolic_zeros():
    seen = []

    @remat.custom_jvp
    def f(x, y):
        return x * y

    def f_jvp(primals, tangents):
        x, y = primals
        tx, ty = tangents
        seen.append(tuple(isinstance(t, SymbolicZero) for t in tangents))
        out = x * y
        parts = [t for t in (None if isinstance(tx, SymbolicZero) else tx * y,
                             None if isinstance(ty, SymbolicZero) else ty * x) if t is not None]
        return out, sum(parts) if parts else SymbolicZero(remat.core.get_aval(out))

    f.defjvp(f_jvp, symbolic_zeros=True)
    _, t = remat.jvp(lambda x: f(x, 3.0), (2.0,), (1.0,))
    assert float(t) == 3.0 and seen[-1] == (False, True)
    assert float(remat.grad(f, argnums=1)(2.0, 3.0)) == 2.0
    np.testing.assert_allclose(remat.vmap(remat.grad(f))(jnp.arange(3.0), jnp.ones(3)),
                               np.ones(3))


def test_a_symbolic_zero_output_tangent_of_a_batched_custom_jvp():
    """A rule's ``SymbolicZero`` output tangent, from a call batched before it is
    differentiated (``grad`` of a ``vmap``, diffrax's ``test_against``), stays a symbolic zero
    of the batched value instead of reaching the batched trace as a value."""

    @remat.custom_jvp
    def f(x, n):
        return jnp.sin(x), n + 1.0

    def f_jvp(primals, tangents):
        (x, n), (tx, _) = primals, tangents
        tx = tx.instantiate() if isinstance(tx, SymbolicZero) else tx
        return f(x, n), (jnp.cos(x) * tx, SymbolicZero(remat.core.get_aval(n)))

    f.defjvp(f_jvp, symbolic_zeros=True)

    def g(x, n):
        a, b = f(x, n)
        return a * b

    xs, ns = jnp.arange(3.0), jnp.ones(3)
    expected = 2 * np.cos(np.arange(3.0, dtype=np.float32))
    np.testing.assert_allclose(remat.grad(lambda xs: remat.vmap(g)(xs, ns).sum())(xs),
                               expected, rtol=1e-6)

    def looped(xs):
        return remat.lax.scan(lambda c, _: (c + remat.vmap(g)(xs, ns).sum(), None), 0.0,
                              None, length=2)[0]

    np.testing.assert_allclose(remat.jit(remat.grad(looped))(xs), 2 * expected, rtol=1e-6)


def test_zero_helpers():
    z = zero_from_primal({"a": jnp.ones(3)}, symbolic_zeros=True)
    assert isinstance(z["a"], SymbolicZero) and z["a"].shape == (3,)
    assert np.all(np.asarray(zero_from_primal(jnp.ones(2))) == 0)
    tree = {"a": CustomVJPPrimal(1.0, True), "b": 2.0}
    assert custom_vjp_primal_tree_values(tree) == {"a": 1.0, "b": 2.0}


def _cubic_vjp(optimize_remat):
    calls = []

    @remat.custom_vjp
    def f(x):
        calls.append("f")
        return np.array([1.0], np.float32) * x  # differs from fwd's output on purpose

    def fwd(x):
        calls.append("fwd")
        return np.array([2.0], np.float32) * x * x, (x,)

    f.defvjp(fwd, lambda res, g: (g * 4.0 * res[0],), optimize_remat=optimize_remat)
    return f, calls


def test_optimize_remat_computes_the_forward_output_with_the_function():
    x = jnp.linspace(0.0, 3.0, 4)
    f, _ = _cubic_vjp(True)
    loss = remat.checkpoint(lambda x: f(x).sum())
    value, grad = remat.value_and_grad(loss)(x)
    # the forward pass used f (residuals not needed there); the backward pass fwd's residuals
    np.testing.assert_allclose(value, np.sum(np.linspace(0.0, 3.0, 4)), rtol=1e-6)
    np.testing.assert_allclose(grad, 4.0 * np.linspace(0.0, 3.0, 4), rtol=1e-6)
    plain, _ = _cubic_vjp(False)
    value, _ = remat.value_and_grad(remat.checkpoint(lambda x: plain(x).sum()))(x)
    np.testing.assert_allclose(value, np.sum(2 * np.linspace(0.0, 3.0, 4) ** 2), rtol=1e-6)
    # without a checkpoint fwd's residuals are needed, so fwd runs
    value, _ = remat.value_and_grad(lambda x: f(x).sum())(x)
    np.testing.assert_allclose(value, np.sum(2 * np.linspace(0.0, 3.0, 4) ** 2), rtol=1e-6)
    np.testing.assert_allclose(remat.vmap(remat.grad(loss))(jnp.stack([x, x])),
                               4.0 * np.stack([np.linspace(0.0, 3.0, 4)] * 2), rtol=1e-6)


@custom_vmap
def _add(x, y):
    return jnp.sin(x) + y


@_add.def_vmap
def _add_rule(axis_size, in_batched, x, y):
    _add_rule.calls.append((axis_size, list(in_batched)))
    return jnp.sin(x) + y, any(in_batched)


_add_rule.calls = []


def test_custom_vmap_runs_its_rule():
    xs, ys = jnp.arange(3.0), jnp.ones(3)
    expected = np.sin(np.arange(3.0)) + 1
    assert float(_add(1.0, 2.0)) == pytest.approx(np.sin(1.0) + 2, rel=1e-6)
    np.testing.assert_allclose(remat.vmap(_add)(xs, ys), expected, rtol=1e-6)
    assert _add_rule.calls[-1] == (3, [True, True])
    np.testing.assert_allclose(remat.vmap(_add, in_axes=(0, None))(xs, 1.0), expected,
                               rtol=1e-6)
    assert _add_rule.calls[-1] == (3, [True, False])
    np.testing.assert_allclose(remat.jit(remat.vmap(_add))(xs, ys), expected, rtol=1e-6)
    _, t = remat.jvp(remat.vmap(_add), (xs, ys), (jnp.ones(3), jnp.ones(3)))
    np.testing.assert_allclose(t, np.cos(np.arange(3.0)) + 1, rtol=1e-6)
    g = remat.grad(lambda x: remat.vmap(_add)(x, ys).sum())(xs)
    np.testing.assert_allclose(g, np.cos(np.arange(3.0)), rtol=1e-6)
    np.testing.assert_allclose(remat.vmap(remat.grad(_add))(xs, ys), np.cos(np.arange(3.0)),
                               rtol=1e-6)


def test_custom_vmap_errors_and_sequential_vmap():
    @custom_vmap
    def f(x):
        return x

    with pytest.raises(AttributeError, match="def_vmap"):
        f(1.0)
    f.def_vmap(lambda n, b, x: x)
    with pytest.raises(TypeError, match="must return a pair"):
        remat.vmap(f)(jnp.ones(3))
    total = sequential_vmap(lambda x: x.sum())
    np.testing.assert_allclose(remat.vmap(total)(jnp.ones((3, 4))), [4.0, 4.0, 4.0])


def test_custom_gradient_uses_the_given_vjp():
    from remat.custom_derivatives import custom_gradient

    @custom_gradient
    def f(x):
        return x ** 2, lambda g: (g * x,)  # deliberately not 2x: the rule is what is used

    assert float(remat.grad(f)(3.0)) == 3.0
    assert float(remat.grad(lambda x: f(x) * x)(3.0)) == 3.0 * 3.0 + 9.0
    np.testing.assert_allclose(remat.vmap(remat.grad(f))(jnp.arange(3.0)), [0.0, 1.0, 2.0])
    assert float(remat.jit(remat.grad(f))(3.0)) == 3.0


def test_closure_convert_hoists_traced_values():
    from remat.custom_derivatives import closure_convert

    hoisted = []

    def outer(y):
        converted, consts = closure_convert(lambda x: x * y, 1.0)
        hoisted.append(len(consts))
        return converted(2.0, *consts)

    assert float(outer(5.0)) == 10.0
    assert float(remat.grad(outer)(5.0)) == 2.0
    assert hoisted[-1] == 1  # y, traced by grad
