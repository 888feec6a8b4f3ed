"""``custom_remat`` and the data policies of JAX 0.11's checkpoint (``jax_remat3``)."""

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import checkpoint_policies as cp
from remat.ad_checkpoint import Recompute, Saveable, checkpoint_name, saved_residuals
from remat.checkpoint_policies import (
    SaveAndOffloadOnlyTheseNames,
    SaveAnyNamesButThese,
    SaveOnlyTheseNames,
)
from remat.checkpointing.custom_remat import custom_remat


def _prims(jaxpr):
    """Every primitive name in ``jaxpr``, nested jaxprs included."""
    names = []
    for eqn in jaxpr.eqns:
        names.append(eqn.primitive.name)
        for p in eqn.params.values():
            inner = getattr(p, "jaxpr", p)
            if hasattr(inner, "eqns"):
                names += _prims(inner)
    return names


def _backward_prims(jaxpr):
    """Primitive names inside the staged (differentiated) checkpoint equations."""
    names = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "checkpoint" and eqn.params["differentiated"]:
            names += _prims(eqn.params["jaxpr"].jaxpr)
    return names


sin_saving_cos = custom_remat(jnp.sin,
                              lambda _, x: (jnp.sin(x), jnp.cos(x)),
                              lambda cos_x, x: (jnp.sin(x), cos_x),
                              lambda cos_x, g: (cos_x * g,))


def _sin_fwd(policy, x):
    if isinstance(policy, SaveOnlyTheseNames) and "cos" in policy.saveable_names:
        return jnp.sin(x), jnp.cos(x)
    return jnp.sin(x), None


def _sin_rem(cos_x, x):
    if cos_x is None:
        cos_x = jnp.cos(x)
    return jnp.sin(x), cos_x


sin_by_policy = custom_remat(jnp.sin, _sin_fwd, _sin_rem, lambda cos_x, g: (cos_x * g,))
save_cos = cp.save_only_these_names("cos")


def _chain(x):
    return np.cos(np.sin(x)) * np.cos(x)


def test_the_saved_cosine_is_not_recomputed():
    f = remat.remat(lambda x: sin_saving_cos(sin_saving_cos(x)))
    np.testing.assert_allclose(remat.grad(f)(1.0), _chain(1.0), rtol=1e-6)
    jaxpr = remat.make_jaxpr(remat.grad(f))(1.0).jaxpr
    assert "cos" not in _backward_prims(jaxpr)  # f_fwd's cos was saved, f_rem reuses it
    assert _backward_prims(jaxpr).count("mul") == 2  # the two f_bwd products
    # the plain function recomputes both cosines on the backward pass
    plain = remat.make_jaxpr(remat.grad(remat.remat(lambda x: jnp.sin(jnp.sin(x)))))(1.0)
    assert _backward_prims(plain.jaxpr).count("cos") == 2


def test_f_fwd_receives_the_enclosing_policy():
    seen = []

    def fwd(policy, x):
        seen.append(policy)
        return jnp.sin(x), None

    s = custom_remat(jnp.sin, fwd, _sin_rem, lambda c, g: (c * g,))
    remat.grad(remat.checkpoint(s, policy=save_cos))(1.0)
    remat.grad(remat.checkpoint(s))(1.0)
    assert seen[0] is save_cos
    assert seen[1] is cp.nothing_saveable  # no policy: save nothing
    # under jit the checkpoint's own policy still reaches the rule
    remat.jit(remat.grad(remat.checkpoint(s, policy=save_cos)))(1.0)
    assert seen[2] is save_cos


@pytest.mark.parametrize("policy,saved", [(save_cos, 2), (cp.nothing_saveable, 0)])
def test_the_rule_responds_to_the_policy(policy, saved):
    f = remat.checkpoint(lambda x: sin_by_policy(sin_by_policy(x)), policy=policy)
    np.testing.assert_allclose(remat.grad(f)(3.0), _chain(3.0), rtol=1e-6)
    residuals = saved_residuals(f, 3.0)
    assert sum("sin_fwd" in d for _, d in residuals) == saved
    assert sum("argument" in d for _, d in residuals) == (1 if saved == 0 else 0)
    jaxpr = remat.make_jaxpr(remat.grad(f))(3.0).jaxpr
    assert _backward_prims(jaxpr).count("cos") == (0 if saved else 2)


@pytest.mark.parametrize("policy", [save_cos, cp.nothing_saveable])
def test_linearize_through_a_checkpoints_split_is_the_jvp_of_f(policy):
    """``linearize`` splits a checkpoint as ``vjp`` does, so its tangent map meets the staged
    ``custom_lin``, whose rule is ``f_bwd``: evaluated forward as ``f_bwd``'s transpose (found
    by the fuzzer: it raised "can't apply forward-mode autodiff" where JAX runs ``f``), eagerly
    and under jit, and without saving more for ``vjp`` than the rule asks."""
    f = remat.checkpoint(lambda x: jnp.cos(sin_by_policy(sin_by_policy(x)) * 2.0),
                         policy=policy)
    plain = lambda x: jnp.cos(jnp.sin(jnp.sin(x)) * 2.0)  # noqa: E731
    x, t = np.float32([0.3, -1.2, 2.0]), np.float32([1.0, 0.5, -2.0])
    want_out, want_t = remat.jvp(plain, (x,), (t,))
    for fn in (f, remat.jit(f)):
        out, lin = remat.linearize(fn, x)
        np.testing.assert_allclose(out, want_out, rtol=1e-6)
        np.testing.assert_allclose(lin(t), want_t, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(remat.jit(lin)(t), want_t, rtol=1e-5, atol=1e-6)
    saved = saved_residuals(f, x)
    assert sum("sin_fwd" in d for _, d in saved) == (2 if policy is save_cos else 0)


def test_grad_of_a_linearized_tangent_map_through_a_checkpoints_split():
    """Second order: differentiating the tangent map ``linearize`` gives (the forward
    evaluation of ``f_bwd``'s transpose) equals differentiating ``f``'s own (fuzz seed 63605:
    "Differentiation rule for 'custom_lin' not implemented")."""
    f = remat.checkpoint(lambda x: jnp.cos(sin_by_policy(x) * 2.0), policy=save_cos)
    plain = lambda x: jnp.cos(jnp.sin(x) * 2.0)  # noqa: E731
    t = np.float32([1.0, -0.5])

    def through(fn):
        return lambda x: jnp.sum(remat.linearize(fn, x)[1](t) ** 2)

    x = np.float32([0.4, 1.3])
    np.testing.assert_allclose(remat.grad(through(f))(x), remat.grad(through(plain))(x),
                               rtol=1e-5)
    np.testing.assert_allclose(remat.jit(remat.grad(through(f)))(x),
                               remat.grad(through(plain))(x), rtol=1e-5)
    # a custom_vjp's rule has no forward form: forward mode still refuses it, as in JAX
    g = remat.custom_vjp(jnp.sin)
    g.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda c, ct: (c * ct,))
    with pytest.raises(TypeError, match="forward-mode"):
        remat.linearize(g, x)[1](t)


def test_vmap_of_a_linearized_tangent_map_through_a_checkpoints_split():
    """The staged ``custom_lin`` batched: ``vmap`` over linearizations, and the gradient
    through it (fuzz seed 73034: "Batching rule for 'custom_lin' not implemented"); equal to
    the same on ``f`` without the rule."""
    f = remat.checkpoint(lambda x: jnp.cos(sin_by_policy(x) * 2.0), policy=save_cos)
    plain = lambda x: jnp.cos(jnp.sin(x) * 2.0)  # noqa: E731
    xs = np.float32([[0.4, 1.3], [-0.7, 2.1], [0.0, 0.9]])
    ts = np.float32([[1.0, -0.5], [0.25, 2.0], [-1.5, 0.5]])

    def tangents(fn):
        return remat.vmap(lambda x, t: remat.linearize(fn, x)[1](t))

    want = tangents(plain)(xs, ts)
    np.testing.assert_allclose(tangents(f)(xs, ts), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(remat.jit(tangents(f))(xs, ts), want, rtol=1e-5, atol=1e-6)
    loss = lambda fn: lambda xs: jnp.sum(tangents(fn)(xs, ts) ** 2)  # noqa: E731
    np.testing.assert_allclose(remat.grad(loss(f))(xs), remat.grad(loss(plain))(xs),
                               rtol=1e-5, atol=1e-6)


def test_outside_a_checkpoint_it_is_f():
    calls = []

    def fwd(policy, x):
        calls.append("fwd")
        return jnp.sin(x), None

    s = custom_remat(lambda x: jnp.sin(x) * 1.0, fwd, _sin_rem, lambda c, g: (c * g,))
    x = jnp.arange(3.0)
    np.testing.assert_allclose(s(x), np.sin(np.arange(3.0)), rtol=1e-6)
    np.testing.assert_allclose(remat.grad(lambda x: s(x).sum())(x), np.cos(np.arange(3.0)),
                               rtol=1e-6)
    out, t = remat.jvp(s, (x,), (jnp.ones(3),))
    np.testing.assert_allclose(t, np.cos(np.arange(3.0)), rtol=1e-6)
    np.testing.assert_allclose(remat.vmap(s)(x), np.sin(np.arange(3.0)), rtol=1e-6)
    # second order inside a checkpoint: the rules are first-order, so f is differentiated
    f = remat.checkpoint(lambda x: sin_by_policy(sin_by_policy(x)), policy=save_cos)
    g2 = remat.grad(remat.grad(f))(3.0)
    np.testing.assert_allclose(g2, remat.grad(remat.grad(lambda x: jnp.sin(jnp.sin(x))))(3.0),
                               rtol=1e-5)
    assert calls == []


def test_under_vmap_jit_and_scan():
    f = remat.checkpoint(lambda x: sin_by_policy(sin_by_policy(x)), policy=save_cos)
    xs = jnp.linspace(-1.0, 2.0, 4)
    expected = _chain(np.linspace(-1.0, 2.0, 4))
    np.testing.assert_allclose(remat.vmap(remat.grad(f))(xs), expected, rtol=1e-5)
    np.testing.assert_allclose(remat.grad(lambda x: remat.vmap(f)(x).sum())(xs), expected,
                               rtol=1e-5)
    np.testing.assert_allclose(remat.jit(remat.vmap(remat.grad(f)))(xs), expected, rtol=1e-5)

    def body(c, x):
        return f(c * x), None

    def loss(c):
        return remat.lax.scan(body, c, xs)[0]

    def plain_loss(c):
        return remat.lax.scan(lambda c, x: (jnp.sin(jnp.sin(c * x)), None), c, xs)[0]

    np.testing.assert_allclose(remat.grad(loss)(0.7), remat.grad(plain_loss)(0.7), rtol=1e-5)


def test_a_shared_argument_under_vmap_sums_its_cotangent():
    g = remat.checkpoint(lambda x, y: sin_by_policy(x * y).sum(), policy=save_cos)

    def loss(y, rule):
        return remat.vmap(rule, in_axes=(0, None))(jnp.arange(3.0), y).sum()

    plain = remat.grad(loss)(2.0, lambda x, y: jnp.sin(x * y).sum())
    np.testing.assert_allclose(remat.grad(loss)(2.0, g), plain, rtol=1e-6)


def test_pytrees_static_args_and_none_cotangents():
    def f(p, scale):
        return {"y": jnp.sin(p["a"]) * scale + p["b"]}

    def fwd(policy, p, scale):
        return f(p, scale), jnp.cos(p["a"])

    def rem(cos_a, p, scale):
        return f(p, scale), (cos_a, scale)

    def bwd(res, g):
        cos_a, scale = res
        return ({"a": cos_a * scale * g["y"], "b": g["y"]}, None)

    fr = custom_remat(f, fwd, rem, bwd, static_argnums=(1,))
    p = {"a": jnp.arange(3.0), "b": jnp.ones(3)}
    loss = remat.checkpoint(lambda p: fr(p, 2.0)["y"].sum())
    grads = remat.grad(loss)(p)
    np.testing.assert_allclose(grads["a"], 2.0 * np.cos(np.arange(3.0)), rtol=1e-6)
    np.testing.assert_allclose(grads["b"], np.ones(3))

    fr2 = custom_remat(lambda x, y: x * y, lambda _, x, y: (x * y, None),
                       lambda _, x, y: (x * y, y), lambda y, g: (g * y, None))
    gx, gy = remat.grad(remat.checkpoint(lambda x, y: fr2(x, y)), argnums=(0, 1))(2.0, 3.0)
    assert (float(gx), float(gy)) == (3.0, 0.0)  # None: a zero cotangent, as f_bwd says


def test_bad_rules_are_reported():
    bad = custom_remat(jnp.sin, lambda _, x: jnp.sin(x), _sin_rem, lambda c, g: (c * g,))
    with pytest.raises(TypeError, match="must return a pair"):
        remat.grad(remat.checkpoint(bad))(1.0)
    short = custom_remat(jnp.sin, _sin_fwd, _sin_rem, lambda c, g: ())
    with pytest.raises(TypeError, match="one cotangent per argument"):
        remat.grad(remat.checkpoint(short))(1.0)
    with pytest.raises(TypeError, match="callable"):
        custom_remat(jnp.sin, None, _sin_rem, _sin_rem)


@pytest.mark.parametrize("returns_it", [False, True], ids=["uses", "returns"])
def test_a_rule_that_closes_over_a_traced_value_is_named(returns_it):
    """Rules may not close over a value an enclosing transformation traces (they run when
    the checkpoint is split, after that trace): using it or returning it as an output gets
    the same error naming the rule, not a generic leak from deep inside."""
    def outer(x, y):
        def f(a):
            return (a * a, y) if returns_it else (a * y, a)
        fwd = lambda _, a: (f(a), None)  # noqa: E731
        rem = lambda _, a: (f(a), a)  # noqa: E731
        bwd = lambda a, g: remat.vjp(f, a)[1](g)  # noqa: E731
        out = custom_remat(f, fwd, rem, bwd)(jnp.sin(x))
        return out[0] + out[1]

    with pytest.raises(remat.errors.UnexpectedTracerError,
                       match="custom_remat rule .*_fwd closes over a value traced"):
        remat.grad(remat.checkpoint(outer))(1.0, 2.0)


# --- data policies ---------------------------------------------------------------------------


def test_name_policies_are_data():
    p = cp.save_only_these_names("a", "b")
    assert isinstance(p, SaveOnlyTheseNames) and p.saveable_names == frozenset({"a", "b"})
    assert p == SaveOnlyTheseNames(frozenset({"b", "a"})) and hash(p) == hash(
        cp.save_only_these_names("b", "a"))
    q = cp.save_any_names_but_these("a")
    assert isinstance(q, SaveAnyNamesButThese) and q.names == frozenset({"a"})
    r = cp.save_and_offload_only_these_names(names_which_can_be_saved=["y"],
                                             names_which_can_be_offloaded=["z"],
                                             offload_src="device", offload_dst="pinned_host")
    assert isinstance(r, SaveAndOffloadOnlyTheseNames)
    assert (r.names_which_can_be_saved, r.names_which_can_be_offloaded) == (
        frozenset({"y"}), frozenset({"z"}))
    assert (r.offload_src, r.offload_dst) == ("device", "pinned_host")
    assert remat.checkpoint_policies is cp  # a module: ``from ... import`` works
    remat.config.update("jax_remat3", True)  # accepted (remat has only this implementation)


def _named_layers(W, x):
    x = checkpoint_name(jnp.sin(W @ x), "layer0")
    x = checkpoint_name(jnp.sin(W @ x), "layer1")
    return jnp.sum(W @ x)


@pytest.mark.parametrize("policy,names", [
    (cp.save_only_these_names("layer1"), ["layer1"]),
    (cp.save_any_names_but_these("layer1"), ["layer0"]),
    (SaveOnlyTheseNames(frozenset({"layer0", "layer1"})), ["layer0", "layer1"]),
])
def test_residuals_keep_their_names(policy, names):
    W, x = jnp.ones((4, 4)) * 0.1, jnp.ones(4)
    f = remat.checkpoint(_named_layers, policy=policy)
    described = [d for _, d in saved_residuals(f, W, x)]
    assert sorted(n for n in ("layer0", "layer1") if any(f"named '{n}'" in d
                                                         for d in described)) == names
    plain = remat.grad(_named_layers)(W, x)
    np.testing.assert_allclose(remat.grad(f)(W, x), plain, rtol=1e-6)


def test_policies_may_answer_with_markers():
    def policy(prim, *_, **__):
        return Saveable if prim.name == "cos" else Recompute

    def f(x):
        return jnp.sin(jnp.cos(x) * 2.0)

    g = remat.checkpoint(f, policy=policy)
    described = [d for _, d in saved_residuals(g, 1.0)]
    assert any("output of cos" in d for d in described)
    assert not any("output of sin" in d or "output of mul" in d for d in described)
    np.testing.assert_allclose(remat.grad(g)(1.0), remat.grad(f)(1.0), rtol=1e-6)
    both = cp.save_from_both_policies(policy, cp.nothing_saveable)
    described = [d for _, d in saved_residuals(remat.checkpoint(f, policy=both), 1.0)]
    assert any("output of cos" in d for d in described)
