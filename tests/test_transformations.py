"""jvp, linearize, vjp, grad, jacobians, vmap, jit — alone and nested in any order."""

import inspect

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.test_util import check_grads

f32 = np.float32


def f(x, y):
    return jnp.sum(jnp.sin(x) * y + jnp.exp(x * 0.1))


X = np.linspace(-1, 1, 6).astype(f32).reshape(2, 3)
Y = np.linspace(0.5, 2, 6).astype(f32).reshape(2, 3)


def df_dx(x, y):
    return np.cos(x) * y + 0.1 * np.exp(x * 0.1)


def test_grad_matches_analytic():
    np.testing.assert_allclose(remat.grad(f)(X, Y), df_dx(X, Y), rtol=1e-6)


def test_grad_argnums_tuple_and_value_and_grad():
    value, (gx, gy) = remat.value_and_grad(f, argnums=(0, 1))(X, Y)
    np.testing.assert_allclose(value, np.sum(np.sin(X) * Y + np.exp(X * 0.1)), rtol=1e-6)
    np.testing.assert_allclose(gx, df_dx(X, Y), rtol=1e-6)
    np.testing.assert_allclose(gy, np.sin(X), rtol=1e-6)


def test_grad_has_aux():
    g, aux = remat.grad(lambda x: (jnp.sum(x ** 2), {"mean": jnp.mean(x)}), has_aux=True)(X)
    np.testing.assert_allclose(g, 2 * X, rtol=1e-6)
    np.testing.assert_allclose(aux["mean"], X.mean(), rtol=1e-6)


def test_grad_pytree_argument():
    params = {"w": X, "b": [Y, f32(2.0)]}
    g = remat.grad(lambda p: jnp.sum(p["w"] * p["b"][0]) * p["b"][1])(params)
    np.testing.assert_allclose(g["w"], Y * 2, rtol=1e-6)
    np.testing.assert_allclose(g["b"][0], X * 2, rtol=1e-6)
    np.testing.assert_allclose(g["b"][1], np.sum(X * Y), rtol=1e-5)


def test_jvp_and_linearize_agree():
    t = np.ones_like(X)
    out, tangent = remat.jvp(lambda x: jnp.sin(x) * 2, (X,), (t,))
    out2, f_jvp = remat.linearize(lambda x: jnp.sin(x) * 2, X)
    np.testing.assert_allclose(out, out2)
    np.testing.assert_allclose(tangent, 2 * np.cos(X), rtol=1e-6)
    np.testing.assert_allclose(f_jvp(t), tangent, rtol=1e-6)


def test_vjp_pullback_reusable_and_checks_structure():
    out, pullback = remat.vjp(lambda x: (jnp.sin(x), x * 2), X)
    ct = (np.ones_like(X), np.ones_like(X))
    (g1,), (g2,) = pullback(ct), pullback(ct)
    np.testing.assert_allclose(g1, np.cos(X) + 2, rtol=1e-6)
    np.testing.assert_allclose(g1, g2)
    with pytest.raises(TypeError, match="Tree structure of cotangent"):
        pullback(np.ones_like(X))


def test_vjp_holds_only_residuals():
    # sin(sin(x)) needs cos(x) and cos(sin(x)) for the backward pass: two residuals
    _, pullback = remat.vjp(lambda x: jnp.sin(jnp.sin(x)), X)
    assert len(pullback.linear.consts) == 2


def test_jacobians_and_hessian():
    fun = lambda x: jnp.array([x[0] * x[1], jnp.sin(x[2])])
    x = np.array([1.0, 2.0, 0.5], f32)
    expected = np.array([[2.0, 1.0, 0.0], [0.0, 0.0, np.cos(0.5)]], f32)
    np.testing.assert_allclose(remat.jacfwd(fun)(x), expected, rtol=1e-6)
    np.testing.assert_allclose(remat.jacrev(fun)(x), expected, rtol=1e-6)
    h = remat.hessian(lambda x: jnp.sum(x ** 3))(x)
    np.testing.assert_allclose(h, np.diag(6 * x), rtol=1e-6)


def test_grad_errors():
    with pytest.raises(TypeError, match="Gradient only defined for scalar-output functions"):
        remat.grad(jnp.sin)(X)
    with pytest.raises(TypeError, match="grad requires real-valued outputs"):
        remat.grad(lambda x: jnp.sum(x).astype(jnp.int32))(X)
    with pytest.raises(TypeError, match="grad requires real- or complex-valued inputs"):
        remat.grad(lambda x: jnp.sum(x * 1.0))(np.arange(3))


def test_jvp_errors():
    with pytest.raises(TypeError, match="same tree structure"):
        remat.jvp(jnp.sin, (X,), [X, X])
    with pytest.raises(ValueError, match="different primal and tangent shapes"):
        remat.jvp(jnp.sin, (X,), (np.ones(3, f32),))


def test_perturbation_confusion():
    fun = lambda x: remat.grad(lambda y: x * y)(f32(1.0))
    assert remat.grad(fun)(f32(2.0)) == 1.0
    # nested jvp with the same function at both levels
    inner = lambda x: remat.jvp(lambda y: x * y, (f32(3.0),), (f32(1.0),))[1]
    assert remat.jvp(inner, (f32(2.0),), (f32(1.0),))[1] == 1.0


# --- vmap ------------------------------------------------------------------------------------


def _loop(fun, xs, in_axes):
    n = next(np.shape(x)[a] for x, a in zip(xs, in_axes) if a is not None)
    return np.stack([np.asarray(fun(*[x if a is None else np.take(x, i, axis=a)
                                      for x, a in zip(xs, in_axes)])) for i in range(n)])


@pytest.mark.parametrize("in_axes", [(0, 0), (1, 1), (0, None), (None, 1), (-1, 0)])
def test_vmap_matches_loop(in_axes):
    g = lambda a, b: jnp.tanh(a) * b + 1.0
    a = np.arange(12, dtype=f32).reshape(3, 4) / 10
    b = np.arange(12, dtype=f32).reshape(3, 4)[::-1] / 7
    if in_axes[1] == 0 and in_axes[0] == -1:
        b = b.T
    if in_axes[0] is None:
        a = a[0] if in_axes[1] == 1 else a
        a = a[:3]
    if in_axes[1] is None:
        b = b[0]
    expected = _loop(g, (a, b), in_axes)
    np.testing.assert_allclose(remat.vmap(g, in_axes=in_axes)(a, b), expected, rtol=1e-6)


def test_vmap_out_axes_and_pytrees():
    fun = lambda d: {"s": d["x"] * 2, "t": jnp.sum(d["y"])}
    d = {"x": np.ones((2, 3), f32), "y": np.ones((2, 4), f32)}
    out = remat.vmap(fun, in_axes=({"x": 1, "y": 0},), out_axes={"s": 1, "t": 0})(
        {"x": np.ones((3, 2), f32), "y": d["y"]})
    assert out["s"].shape == (3, 2) and out["t"].shape == (2,)


def test_vmap_unbatched_output_is_broadcast():
    out = remat.vmap(lambda x: f32(1.0), axis_size=None)(np.ones(4, f32))
    assert out.shape == (4,)


def test_vmap_maps_keyword_arguments_along_their_leading_axis():
    # JAX's rule: in_axes covers the positional arguments; keyword arguments are mapped
    # along axis 0 (a scalar one is an error, as a mismatched size)
    f = lambda a, *, b, c=1.0: a * b["w"] + c
    x, w = np.arange(3.0, dtype=f32), np.arange(6.0, dtype=f32).reshape(3, 2)
    got = remat.vmap(f, in_axes=(None,))(x, b={"w": w[:, 0]})
    np.testing.assert_allclose(got, x[None, :] * w[:, :1] + 1.0)
    got = remat.vmap(f)(x, b={"w": w[:, 1]}, c=x)
    np.testing.assert_allclose(got, x * w[:, 1] + x)
    with pytest.raises(ValueError, match=r"along axis 0, which implies that its rank should "
                                         r"be at least 1, but is only 0"):
        remat.vmap(f)(x, b={"w": w[:, 0]}, c=2.0)
    with pytest.raises(ValueError, match=r"inconsistent sizes(.|\n)*kwargs\['b'\]\['w'\]"):
        remat.vmap(f)(x, b={"w": w[:2, 0]})
    assert remat.vmap(remat.jit(f))(x, b={"w": w[:, 0]}).shape == (3,)


def test_vmap_inconsistent_sizes_error():
    with pytest.raises(ValueError, match="inconsistent sizes"):
        remat.vmap(jnp.add)(np.ones(2, f32), np.ones(3, f32))


def test_vmap_axis_out_of_range():
    with pytest.raises(ValueError, match="rank should be at least"):
        remat.vmap(jnp.sin, in_axes=2)(np.ones((2, 3), f32))


def test_nested_vmap():
    x = np.arange(24, dtype=f32).reshape(2, 3, 4)
    out = remat.vmap(remat.vmap(lambda v: jnp.sum(v * v)))(x)
    np.testing.assert_allclose(out, np.sum(x * x, axis=-1))


# --- jit -------------------------------------------------------------------------------------


def test_jit_traces_once_per_signature():
    fun = remat.jit(lambda x, n: x * n, static_argnums=1)
    fun(X, 2)
    fun(X + 1, 2)
    assert fun.trace_count == 1
    fun(X, 3)
    fun(np.ones(5, f32), 3)
    assert fun.trace_count == 3


def test_jit_static_argnames_and_kwargs():
    fun = remat.jit(lambda x, *, scale: x * scale, static_argnames="scale")
    np.testing.assert_allclose(fun(X, scale=3.0), X * 3)


def test_jit_device_and_backend_options_as_in_jax():
    # chex's jit variant passes device=None, backend=None; a CPU device or backend places
    # nothing differently on remat; JAX's deprecation warning, its ValueError for both at
    # once, its RuntimeError for an unknown backend when the function is traced
    np.testing.assert_allclose(remat.jit(lambda x: x * 2, device=None, backend=None)(X), X * 2)
    for placement in ({"device": remat.devices()[0]}, {"backend": "cpu"}):
        with pytest.warns(DeprecationWarning, match="backend and device argument on jit"):
            fun = remat.jit(lambda x: x * 2, **placement)
        np.testing.assert_allclose(fun(X), X * 2)
        with pytest.warns(DeprecationWarning, match="backend and device argument on jit"):
            fun = remat.jit(**placement)(lambda x: x * 3)
        np.testing.assert_allclose(fun(X), X * 3)
    with pytest.warns(DeprecationWarning), pytest.raises(
            ValueError, match=r"can't specify both a device and a backend for jit, got "
                              r"device=CpuDevice\(id=0\) and backend='cpu'"):
        remat.jit(lambda x: x, device=remat.devices()[0], backend="cpu")
    with pytest.warns(DeprecationWarning):
        fun = remat.jit(lambda x: x, backend="gpu")
    with pytest.raises(RuntimeError, match="Unknown backend: 'gpu' requested"):
        fun(X)


def test_jitted_function_carries_its_signature():
    # chex's fake pmap reads it with inspect.signature(f, follow_wrapped=False), as JAX has it
    def f(x, y=2, *, z):
        return x

    jitted = remat.jit(f, static_argnames="z")
    assert inspect.signature(jitted, follow_wrapped=False) == inspect.signature(f)
    assert str(jitted.__signature__) == "(x, y=2, *, z)"


def test_jit_equals_eager_and_disable_jit():
    fun = lambda x, y: jnp.sum(jnp.tanh(x @ y.T))
    np.testing.assert_allclose(remat.jit(fun)(X, Y), fun(X, Y), rtol=1e-6)
    seen = []
    with remat.disable_jit():
        remat.jit(lambda x: seen.append(type(x).__name__) or x)(X)
    assert seen == ["ndarray"]


def test_jit_executor_cse_merges_duplicates():
    fun = remat.jit(lambda x: jnp.sin(x) + jnp.sin(x))
    from remat.exec import plan_for

    call_jaxpr = fun.lower(X)
    plan = plan_for(call_jaxpr.jaxpr)
    assert [s.primitive.name for s in plan.steps] == ["sin", "add"]
    np.testing.assert_allclose(fun(X), 2 * np.sin(X), rtol=1e-6)


COMPOSITIONS = {
    "grad(jit)": lambda g: remat.grad(remat.jit(g)),
    "jit(grad)": lambda g: remat.jit(remat.grad(g)),
    "grad(grad)": lambda g: remat.grad(remat.grad(g)),
    "jvp(grad)": lambda g: (lambda x: remat.jvp(remat.grad(g), (x,), (f32(1.0),))[1]),
    "grad(vmap-sum)": lambda g: remat.grad(lambda x: jnp.sum(remat.vmap(g)(x * jnp.ones(3)))),
    "vmap(grad)": lambda g: (lambda x: remat.vmap(remat.grad(g))(x * jnp.ones(3))[0]),
    "jit(vmap(jit(grad)))": lambda g: (
        lambda x: remat.jit(remat.vmap(remat.jit(remat.grad(g))))(x * jnp.ones(3))[1]),
}


@pytest.mark.parametrize("name", list(COMPOSITIONS))
def test_compositions_agree_with_analytic(name):
    g = lambda x: jnp.sin(x) * x
    x = f32(0.7)
    dg = lambda x: np.cos(x) * x + np.sin(x)
    d2g = lambda x: -np.sin(x) * x + 2 * np.cos(x)
    expected = {
        "grad(jit)": dg(x), "jit(grad)": dg(x), "grad(grad)": d2g(x), "jvp(grad)": d2g(x),
        "grad(vmap-sum)": 3 * dg(x), "vmap(grad)": dg(x), "jit(vmap(jit(grad)))": dg(x),
    }[name]
    np.testing.assert_allclose(COMPOSITIONS[name](g)(x), expected, rtol=1e-5)


def test_check_grads_through_jit_and_vmap():
    fun = remat.jit(lambda x, y: remat.vmap(lambda a, b: jnp.sum(jnp.tanh(a) * b))(x, y))
    check_grads(fun, (X, Y), order=2)


def test_eval_shape():
    out = remat.eval_shape(lambda x: {"a": x @ x.T, "b": jnp.sum(x)}, X)
    assert out["a"].shape == (2, 2) and out["b"].shape == () and out["b"].dtype == np.float32


def test_stop_gradient():
    g = remat.grad(lambda x: jnp.sum(lax.stop_gradient(x) * x))(X)
    np.testing.assert_allclose(g, X)
