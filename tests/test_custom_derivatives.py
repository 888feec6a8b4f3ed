"""custom_jvp and custom_vjp under jvp, grad, vmap, jit and nesting."""

import functools

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


def test_custom_derivatives_bind_keyword_and_default_arguments_as_jax():
    # JAX resolves a call's keywords to positions and fills in defaults before anything else,
    # so nondiff_argnums may name a defaulted argument (flax's fp8 ops)
    @functools.partial(remat.custom_vjp, nondiff_argnums=(1,))
    def f(x, n=3, *, k=2):
        return x * n

    f.defvjp(lambda x, n: (x * n, None), lambda n, r, g: (g * n,))

    @functools.partial(remat.custom_jvp, nondiff_argnums=(1,))
    def h(x, n=3):
        return x * n

    h.defjvp(lambda n, xs, ts: (xs[0] * n, ts[0] * n))
    for fun in (f, h):
        assert float(fun(2.0)) == 6.0 and float(fun(2.0, n=4)) == 8.0
        assert float(remat.grad(fun)(2.0)) == 3.0
        assert float(remat.grad(functools.partial(fun, n=5))(1.0)) == 5.0
        assert float(remat.jit(lambda x, fun=fun: fun(x=x, n=2))(1.5)) == 3.0
    kind = {f: "custom_vjp", h: "custom_jvp"}
    for fun, args, kwargs, why in [(f, (2.0,), {"k": 1}, "The following keyword arguments "
                                    "could not be resolved to positions: k"),
                                   (f, (2.0, 1, 2), {}, "too many positional arguments"),
                                   (h, (2.0,), {"m": 1}, "got an unexpected keyword argument 'm'")]:
        with pytest.raises(TypeError, match=f"The input arguments to the {kind[fun]}-decorated "
                                            f"function {fun.__name__} could not be resolved to "
                                            f"positional-only arguments. Binding failed with "
                                            f"the error:\n{why}"):
            fun(*args, **kwargs)


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


# --- eager differentiation runs the rules on concrete values (as JAX's) -----------------------


@remat.custom_jvp
def _sin_if_positive(x):
    return jnp.sin(x) if x > 0 else x


_sin_if_positive.defjvp(lambda p, t: (_sin_if_positive(p[0]), jnp.cos(p[0]) * t[0]))


@remat.custom_vjp
def _sin_if_positive_vjp(x):
    return jnp.sin(x) if x > 0 else x


def _sin_if_positive_fwd(x):
    positive = x > 0
    return (jnp.sin(x) if positive else x), (jnp.cos(x) if positive else jnp.ones_like(x))


_sin_if_positive_vjp.defvjp(_sin_if_positive_fwd, lambda slope, g: (slope * g,))


def test_custom_jvp_with_python_control_flow_under_eager_jvp_and_grad():
    """The tutorial's pattern: outside jit the rule (and the function) see concrete values.
    The values are JAX's."""
    f = _sin_if_positive
    np.testing.assert_allclose(remat.grad(f)(1.0), 0.5403023, rtol=1e-6)
    np.testing.assert_allclose(remat.grad(f)(-1.0), 0.5403023, rtol=1e-6)
    primal, tangent = remat.jvp(f, (1.0,), (2.0,))
    np.testing.assert_allclose([primal, tangent], [0.84147096, 1.0806046], rtol=1e-6)
    np.testing.assert_allclose(remat.vjp(f, 1.0)[1](1.0), [0.5403023], rtol=1e-6)
    np.testing.assert_allclose(remat.linearize(f, 1.0)[1](3.0), 1.6209068, rtol=1e-6)
    np.testing.assert_allclose(remat.grad(remat.grad(f))(1.0), -0.84147096, rtol=1e-6)
    np.testing.assert_allclose(remat.jacfwd(f)(1.0), 0.5403023, rtol=1e-6)
    np.testing.assert_allclose(remat.hessian(f)(1.0), -0.84147096, rtol=1e-6)
    inner = lambda x: remat.jvp(f, (x,), (1.0,))[1]
    np.testing.assert_allclose(remat.jvp(inner, (1.0,), (1.0,)), [0.5403023, -0.84147096],
                               rtol=1e-6)
    np.testing.assert_allclose(remat.grad(lambda x: x * f(2.0))(1.0), 0.9092974, rtol=1e-6)


def test_custom_vjp_with_python_control_flow_under_eager_grad_and_vjp():
    f = _sin_if_positive_vjp
    np.testing.assert_allclose(remat.grad(f)(1.0), 0.5403023, rtol=1e-6)
    assert remat.grad(f)(-1.0) == 1.0
    np.testing.assert_allclose(remat.vjp(f, 1.0)[1](2.0), [1.0806046], rtol=1e-6)
    np.testing.assert_allclose(remat.grad(remat.grad(f))(1.0), -0.84147096, rtol=1e-6)
    np.testing.assert_allclose(remat.jacrev(f)(1.0), 0.5403023, rtol=1e-6)


@pytest.mark.parametrize("fun", [_sin_if_positive, _sin_if_positive_vjp])
def test_python_control_flow_in_custom_rules_still_raises_under_jit_and_vmap(fun):
    from remat.errors import TracerBoolConversionError

    cases = [(remat.jit(fun), f32(1.0)), (remat.jit(remat.grad(fun)), f32(1.0)),
             (remat.vmap(remat.grad(fun)), np.ones(2, f32))]
    for transformed, x in cases:
        with pytest.raises(TracerBoolConversionError):
            transformed(x)


def test_custom_functions_are_handed_arrays():
    """A Python scalar reaches the function, and the rules, as a weakly typed Array; a NumPy
    value as an Array of its canonical dtype (equinox's ``nextafter`` reads ``x.dtype``)."""
    seen = []

    @remat.custom_jvp
    def g(x):
        seen.append((type(x).__name__, x.dtype, x.aval.weak_type))
        return jnp.where(x == 0, jnp.finfo(x.dtype).tiny, x)

    g.defjvp(lambda p, t: (g(*p), t[0]))
    out = g(0.001)
    np.testing.assert_allclose(out, 0.001)
    assert out.dtype == np.float32
    assert g(np.float64(2.0)).dtype == np.float32
    with pytest.raises(ValueError):  # jnp.finfo of int32, as in JAX
        g(3)
    assert remat.grad(g)(0.001) == 1.0
    np.testing.assert_array_equal(remat.vmap(g)(jnp.ones(2)), [1.0, 1.0])
    assert seen[:4] == [("Array", np.float32, True), ("Array", np.float32, False),
                        ("Array", np.int32, True), ("Array", np.float32, True)]


def test_custom_vjp_function_fwd_and_bwd_are_handed_arrays():
    seen = []

    @remat.custom_vjp
    def k(x):
        seen.append(("fun", type(x).__name__, x.dtype, x.aval.weak_type))
        return x * 2

    def k_fwd(x):
        seen.append(("fwd", type(x).__name__, x.dtype, x.aval.weak_type))
        return x * 2, x

    def k_bwd(r, g):
        seen.append(("bwd", type(r).__name__, r.dtype, type(g).__name__, g.dtype))
        return (2 * g,)

    k.defvjp(k_fwd, k_bwd)
    assert k(1.0) == 2.0
    assert remat.grad(k)(1.0) == 2.0
    np.testing.assert_array_equal(remat.vmap(remat.grad(k))(jnp.ones(2)), [2.0, 2.0])
    assert seen[:3] == [("fun", "Array", np.float32, True), ("fwd", "Array", np.float32, True),
                        ("bwd", "Array", np.float32, "Array", np.float32)]


def test_nested_custom_jvp_rules_on_concrete_values():
    @remat.custom_jvp
    def outer(x):
        return _sin_if_positive(x) * 2

    @outer.defjvp
    def _outer_jvp(p, t):
        _, inner_t = remat.jvp(_sin_if_positive, p, t)
        return outer(p[0]), inner_t * 2 + t[0]

    np.testing.assert_allclose(remat.grad(outer)(1.0), 2.0806046, rtol=1e-6)
    np.testing.assert_allclose(remat.grad(remat.grad(outer))(1.0), -1.6829419, rtol=1e-6)


# --- a custom_jvp rule's equations under a checkpoint's policy (JAX's api_test RematTest) -----


def _count_sin_cos(f):
    text = str(remat.make_jaxpr(remat.linearize(f, 4.0)[1])(1.0))
    return text.count(" sin "), text.count(" cos ")


def _save_prim(name):
    return lambda prim, *_, **__: str(prim) == name


def _funky_sin(compute):
    """A custom_jvp sin whose rule computes sin and cos through ``compute``."""

    @remat.custom_jvp
    def sin(x):
        return jnp.sin(x)

    def sin_jvp(primals, tangents):
        (x,), (xdot,) = primals, tangents
        y, c = compute(x)
        return y, c * xdot

    sin.defjvp(sin_jvp)
    return sin


def _cond_apply(f, x):
    return remat.lax.cond(x.sum() > -jnp.inf, f, lambda x: x, x)


def _cond_apply_true(f, x):
    return remat.lax.cond(True, f, lambda x: x, x)


def _scan_apply(f, x):
    y, _ = remat.lax.scan(lambda x, _: (f(x), None), x, None, length=1)
    return y


def _check_funky(apply, sin, expected):
    """``expected``: policy -> JAX's (count of ' sin ', count of ' cos ') in the linearized
    jaxpr; 'nested' is ``apply`` twice under nothing_saveable."""
    from functools import partial

    from remat.test_util import check_grads

    policies = {"save_cos": _save_prim("cos"), "save_sin": _save_prim("sin"),
                "everything": remat.checkpoint_policies.everything_saveable,
                "nothing": remat.checkpoint_policies.nothing_saveable}
    got = {}
    for name, policy in policies.items():
        f = remat.checkpoint(partial(apply, sin), policy=policy)
        check_grads(f, (3.0,), order=2, modes=["rev"])
        got[name] = _count_sin_cos(f)
    twice = remat.checkpoint(lambda x: apply(sin, apply(sin, x)),
                             policy=remat.checkpoint_policies.nothing_saveable)
    check_grads(twice, (3.0,), order=2, modes=["rev"])
    got["nested"] = _count_sin_cos(twice)
    assert got == expected


def test_remat_of_cond_funky_custom_jvp():
    sin = _funky_sin(lambda x: remat.jit(lambda: (jnp.sin(x), jnp.cos(x)))())
    _check_funky(_cond_apply, sin, {"save_cos": (0, 0), "save_sin": (0, 1),
                                    "everything": (0, 0), "nothing": (0, 1),
                                    "nested": (1, 2)})


def test_remat_of_cond_funky_custom_jvp2():
    sin = _funky_sin(lambda x: _cond_apply_true(lambda xs: (jnp.sin(xs[0]), jnp.cos(xs[1])),
                                                (x, x)))
    _check_funky(_cond_apply_true, sin, {"save_cos": (0, 0), "save_sin": (0, 1),
                                         "everything": (0, 0), "nothing": (0, 1),
                                         "nested": (1, 2)})


def test_remat_of_scan_funky_custom_jvp():
    sin = _funky_sin(lambda x: remat.jit(lambda: (jnp.sin(x), jnp.cos(x)))())
    _check_funky(_scan_apply, sin, {"save_cos": (0, 0), "save_sin": (0, 1),
                                    "everything": (0, 0), "nothing": (1, 1),
                                    "nested": (2, 2)})


def test_remat_of_scan_funky_custom_jvp2():
    sin = _funky_sin(lambda x: _scan_apply(lambda xs: (jnp.sin(xs[0]), jnp.cos(xs[1])),
                                           (x, x)))
    _check_funky(_scan_apply, sin, {"save_cos": (1, 0), "save_sin": (0, 1),
                                    "everything": (0, 0), "nothing": (1, 1),
                                    "nested": (2, 2)})


def test_known_custom_remat_derivative_inside_a_checkpoint():
    """A custom_remat's JVP that depends on nothing being differentiated is split by the
    policy like any known call (the split reaches known calls now), not taken for a tangent."""
    from remat.checkpointing.custom_remat import custom_remat

    sin = custom_remat(jnp.sin, lambda _, x: (jnp.sin(x), jnp.cos(x)),
                       lambda cos_x, x: (jnp.sin(x), cos_x), lambda cos_x, g: (cos_x * g,))

    def f(x):
        return jnp.sin(x) * remat.jvp(sin, (f32(0.7),), (f32(1.0),))[1]

    for policy in (remat.checkpoint_policies.nothing_saveable,
                   remat.checkpoint_policies.everything_saveable,
                   remat.checkpoint_policies.save_only_these_names("cos")):
        got = remat.grad(remat.checkpoint(f, policy=policy))(f32(0.3))
        np.testing.assert_allclose(got, np.cos(0.3) * np.cos(0.7), rtol=1e-6)


# --- differentiating a custom_vjp with respect to a closed-over value -------------------------


def _closing_over(w):
    @remat.custom_vjp
    def f(x):
        return x * w

    f.defvjp(lambda x: (f(x), None), lambda _, g: (g * 2.0,))
    return f(f32(3.0))


@pytest.mark.parametrize("transform", ["grad", "grad_of_jit", "jvp_of_jit"])
def test_a_custom_vjp_differentiated_by_its_closure_raises_as_jax(transform):
    """``bwd`` gives no cotangent for ``w``: JAX raises ``CustomVJPException`` (from
    ``jax._src.interpreters.ad``; diffrax's tests expect it) where remat once differentiated
    through ``f``'s body, silently bypassing the rule."""
    from remat._src.interpreters.ad import CustomVJPException
    run = {"grad": remat.grad(_closing_over),
           "grad_of_jit": remat.grad(remat.jit(_closing_over)),
           "jvp_of_jit": lambda w: remat.jvp(remat.jit(_closing_over), (w,), (w,))}[transform]
    with pytest.raises(CustomVJPException, match="closed-over value"):
        run(f32(2.0))


def test_a_custom_vjp_closing_over_an_undifferentiated_value_still_runs():
    def outer(x, w):
        @remat.custom_vjp
        def f(x):
            return x * w

        f.defvjp(lambda x: (f(x), None), lambda _, g: (g * 2.0,))
        return f(x)

    assert float(remat.grad(outer)(f32(3.0), f32(5.0))) == 2.0  # JAX: 2.0
