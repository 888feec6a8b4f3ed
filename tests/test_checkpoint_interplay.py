"""checkpoint / remat composed with every other transformation: policies under grad, jit,
vmap, jacobians, linearize and higher order; inside scan / cond / while_loop bodies and around
them; with custom_jvp / custom_vjp inside; nested; what each policy saves; and offloading
measured in host and working memory.

Rematerialization must never change a derivative: the recomputed values are produced by the
same primitives on the same inputs as in the un-checkpointed run, so gradients are compared
at a tight tolerance (``TIGHT``), not at finite-difference tolerance.
"""

import gc
import inspect

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax, memory
from remat.ad_checkpoint import checkpoint_name, print_saved_residuals, saved_residuals
from remat.test_util import check_grads
from remat.tree_util import tree_leaves, tree_map

cp = remat.checkpoint_policies
TIGHT = dict(rtol=1e-6, atol=1e-7)


def _rand(rng, *shape, scale=0.5):
    return jnp.asarray((scale * rng.standard_normal(shape)).astype(np.float32))


def assert_trees_close(a, b, **tol):
    tol = tol or TIGHT
    la, lb = tree_leaves(a), tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_allclose(x, y, **tol)


def _line_of(fun, marker):
    """The source line of ``fun`` that contains ``marker`` (for source descriptions)."""
    lines, start = inspect.getsourcelines(fun)
    hits = [start + i for i, line in enumerate(lines) if marker in line]
    assert len(hits) == 1, marker
    return hits[0]


def _total_bytes(residuals):
    return sum(a.nbytes for a, _ in residuals)


# --- the MLP-like function and every policy ---------------------------------------------------


def mlp(W1, W2, b, x):
    h = checkpoint_name(jnp.dot(W1, x), "h")
    a = checkpoint_name(jnp.tanh(h + b), "a")
    o = checkpoint_name(jnp.dot(W2, a), "o")
    return jnp.sum(jnp.sin(o) * o)


def _mlp_args(seed=0):
    rng = np.random.default_rng(seed)
    return _rand(rng, 5, 4), _rand(rng, 3, 5), _rand(rng, 5), _rand(rng, 4)


def _policies():
    return {
        "default": None,
        "everything_saveable": cp.everything_saveable,
        "nothing_saveable": cp.nothing_saveable,
        "dots_saveable": cp.dots_saveable,
        "checkpoint_dots": cp.checkpoint_dots,
        "dots_with_no_batch_dims_saveable": cp.dots_with_no_batch_dims_saveable,
        "checkpoint_dots_with_no_batch_dims": cp.checkpoint_dots_with_no_batch_dims,
        "save_anything_except_these_names": cp.save_anything_except_these_names("a"),
        "save_any_names_but_these": cp.save_any_names_but_these("h"),
        "save_only_these_names": cp.save_only_these_names("a", "o"),
        "save_from_both_policies(dots,names)": cp.save_from_both_policies(
            cp.dots_saveable, cp.save_only_these_names("a")),
        "save_from_both_policies(names,names)": cp.save_from_both_policies(
            cp.save_only_these_names("h"), cp.save_any_names_but_these("o")),
        "save_and_offload_only_these_names": cp.save_and_offload_only_these_names(
            names_which_can_be_saved=["h"], names_which_can_be_offloaded=["a"]),
        "offload_dot_with_no_batch_dims": cp.offload_dot_with_no_batch_dims(),
        "memory_budget(0.5)": cp.memory_budget(0.5),
        "memory_budget(0.0)": cp.memory_budget(0.0),
    }


POLICIES = _policies()
POLICY_IDS = list(POLICIES)


def test_policy_list_covers_the_namespace():
    """Every public policy of ``checkpoint_policies`` is exercised below (its classes and
    answer markers are reached through the constructors)."""
    exercised = {name.split("(")[0] for name in POLICY_IDS}
    public = {n for n in cp.__all__ if n[0].islower()}
    assert public <= exercised | {"default"}, public - exercised


ALL_ARGNUMS = (0, 1, 2, 3)


@pytest.mark.parametrize("name", POLICY_IDS)
def test_grad_every_policy(name):
    args = _mlp_args()
    f = remat.checkpoint(mlp, policy=POLICIES[name])
    v0, g0 = remat.value_and_grad(mlp, argnums=ALL_ARGNUMS)(*args)
    v1, g1 = remat.value_and_grad(f, argnums=ALL_ARGNUMS)(*args)
    assert_trees_close(v0, v1)
    assert_trees_close(g0, g1)


@pytest.mark.parametrize("name", POLICY_IDS)
def test_grad_every_policy_under_jit(name):
    args = _mlp_args(1)
    f = remat.checkpoint(mlp, policy=POLICIES[name])
    g0 = remat.grad(mlp, argnums=ALL_ARGNUMS)(*args)
    assert_trees_close(g0, remat.jit(remat.grad(f, argnums=ALL_ARGNUMS))(*args))
    # jit between grad and the checkpoint (through a wrapper; see the jit(checkpoint) test)
    inner_jit = remat.jit(lambda *a: f(*a))
    assert_trees_close(g0, remat.grad(inner_jit, argnums=ALL_ARGNUMS)(*args))


@pytest.mark.parametrize("name", POLICY_IDS)
def test_grad_every_policy_under_vmap(name):
    W1, W2, b, x = _mlp_args(2)
    rng = np.random.default_rng(3)
    xs = _rand(rng, 3, 4)  # batch on axis 0
    bs = _rand(rng, 5, 3)  # batch on axis 1
    f = remat.checkpoint(mlp, policy=POLICIES[name])
    in_axes = (None, None, 1, 0)
    ref = remat.vmap(remat.grad(mlp, argnums=ALL_ARGNUMS), in_axes=in_axes)(W1, W2, bs, xs)
    got = remat.vmap(remat.grad(f, argnums=ALL_ARGNUMS), in_axes=in_axes)(W1, W2, bs, xs)
    assert_trees_close(ref, got)
    # vmap inside grad, the checkpoint inside the vmap
    def loss(fun):
        return lambda W1, W2, bs, xs: jnp.sum(remat.vmap(fun, in_axes=in_axes)(W1, W2, bs, xs))
    assert_trees_close(remat.grad(loss(mlp), argnums=ALL_ARGNUMS)(W1, W2, bs, xs),
                       remat.grad(loss(f), argnums=ALL_ARGNUMS)(W1, W2, bs, xs))
    # and the per-example loop agrees with the vmapped checkpoint
    loop = [remat.grad(f, argnums=ALL_ARGNUMS)(W1, W2, bs[:, i], xs[i]) for i in range(3)]
    assert_trees_close(tree_map(lambda *r: np.stack(r), *loop), got, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", POLICY_IDS)
def test_jacobians_and_linearize_every_policy(name):
    args = _mlp_args(4)
    f = remat.checkpoint(mlp, policy=POLICIES[name])
    assert_trees_close(remat.jacfwd(mlp, argnums=(0, 3))(*args),
                       remat.jacfwd(f, argnums=(0, 3))(*args))
    assert_trees_close(remat.jacrev(mlp, argnums=(0, 3))(*args),
                       remat.jacrev(f, argnums=(0, 3))(*args))
    assert_trees_close(remat.hessian(mlp, argnums=3)(*args), remat.hessian(f, argnums=3)(*args))
    y0, lin0 = remat.linearize(mlp, *args)
    y1, lin1 = remat.linearize(f, *args)
    tangents = _mlp_args(5)
    assert_trees_close(y0, y1)
    assert_trees_close(lin0(*tangents), lin1(*tangents))


@pytest.mark.parametrize("name", POLICY_IDS)
def test_second_order_through_checkpoint(name):
    args = _mlp_args(6)
    f = remat.checkpoint(mlp, policy=POLICIES[name])
    check_grads(f, args, order=2, modes=("fwd", "rev"))
    # grad of grad (reverse over reverse) equals the un-checkpointed one
    gg = lambda fun: remat.grad(lambda x: jnp.sum(remat.grad(fun, argnums=3)(*args[:3], x) ** 2))
    assert_trees_close(gg(mlp)(args[3]), gg(f)(args[3]), rtol=1e-5, atol=1e-6)


def test_grad_of_grad_scalar():
    """The seed example, differentiated twice (the recomputed linearization points are
    themselves differentiated)."""
    g = remat.checkpoint(lambda x: jnp.sin(jnp.sin(x)))
    x = 2.0
    v, d = remat.value_and_grad(g)(x)
    np.testing.assert_allclose(v, 0.78907233, rtol=1e-6)
    np.testing.assert_allclose(d, -0.2556391, rtol=1e-6)
    d2 = remat.grad(remat.grad(g))(x)
    ref = remat.grad(remat.grad(lambda x: jnp.sin(jnp.sin(x))))(x)
    np.testing.assert_allclose(d2, ref, **TIGHT)
    np.testing.assert_allclose(remat.grad(remat.grad(remat.grad(g)))(x),
                               remat.grad(remat.grad(remat.grad(lambda x: jnp.sin(jnp.sin(x)))))(x),
                               **TIGHT)


# --- control flow ----------------------------------------------------------------------------

L, N, B = 4, 6, 3  # layers, width, batch


def _layer(x, W):
    h = checkpoint_name(jnp.dot(W, x), "h")
    return jnp.sin(jnp.tanh(h)), None


def _layer_unnamed(x, W):
    return jnp.sin(jnp.tanh(jnp.dot(W, x))), None


def _scan_net(body):
    def net(Ws, x):
        y, _ = lax.scan(body, x, Ws)
        return jnp.sum(y)

    return net


def _scan_args(seed=7):
    rng = np.random.default_rng(seed)
    return _rand(rng, L, N, N), _rand(rng, N, B, scale=1.0)


SCAN_BODIES = {
    "default": remat.checkpoint(_layer),
    "prevent_cse=False": remat.checkpoint(_layer, prevent_cse=False),
    "dots_saveable": remat.checkpoint(_layer, policy=cp.dots_saveable),
    "save_only_these_names": remat.checkpoint(_layer, policy=cp.save_only_these_names("h")),
    "everything_saveable": remat.checkpoint(_layer, policy=cp.everything_saveable),
}


@pytest.mark.parametrize("name", list(SCAN_BODIES))
def test_scan_over_layers_with_checkpointed_body(name):
    Ws, x = _scan_args()
    ref, net = _scan_net(_layer), _scan_net(SCAN_BODIES[name])
    assert_trees_close(ref(Ws, x), net(Ws, x))
    g0 = remat.grad(ref, argnums=(0, 1))(Ws, x)
    assert_trees_close(g0, remat.grad(net, argnums=(0, 1))(Ws, x))
    assert_trees_close(g0, remat.jit(remat.grad(net, argnums=(0, 1)))(Ws, x))
    # the unrolled Python loop agrees too
    def unrolled(Ws, x):
        for i in range(L):
            x, _ = SCAN_BODIES[name](x, Ws[i])
        return jnp.sum(x)
    assert_trees_close(g0, remat.grad(unrolled, argnums=(0, 1))(Ws, x), rtol=1e-5, atol=1e-6)


def test_scan_with_checkpointed_body_saves_only_stacked_carries_and_inputs():
    Ws, x = _scan_args()
    plain = saved_residuals(_scan_net(_layer), Ws, x)
    remat_ = saved_residuals(_scan_net(remat.checkpoint(_layer, policy=cp.nothing_saveable)),
                             Ws, x)
    dots = saved_residuals(_scan_net(remat.checkpoint(_layer_unnamed, policy=cp.dots_saveable)),
                           Ws, x)
    # nothing_saveable: per step only the carry in (the activations x_i) and the weights W_i,
    # stacked over the L steps; no intermediate of the body
    assert sorted(a.shape for a, _ in remat_) == sorted([(L, N, N), (L, N, B)])
    assert _total_bytes(remat_) < _total_bytes(plain)
    # dots_saveable on the body adds exactly the stacked dot outputs
    assert sorted(a.shape for a, _ in dots) == sorted([(L, N, N), (L, N, B), (L, N, B)])
    assert _total_bytes(remat_) < _total_bytes(dots) <= _total_bytes(plain)
    # the pullback holds the same residuals
    _, pullback = remat.vjp(_scan_net(remat.checkpoint(_layer)), Ws, x)
    held = sum(np.asarray(c).nbytes for c in pullback.linear.consts)
    assert held == _total_bytes(remat_)
    _, pullback_plain = remat.vjp(_scan_net(_layer), Ws, x)
    assert held < sum(np.asarray(c).nbytes for c in pullback_plain.linear.consts)


def test_scan_with_checkpointed_body_does_not_copy_the_stacked_weights():
    rng = np.random.default_rng(17)
    Ws, x = _rand(rng, L, 32, 32), _rand(rng, 32, B)
    net = _scan_net(remat.checkpoint(_layer))
    descriptions = [d for _, d in saved_residuals(net, Ws, x)]
    assert "from the argument Ws" in descriptions
    out, _, _, live = _measure_vjp(net, (Ws, x))
    assert live == np.asarray(out).nbytes + L * 32 * B * 4  # the stacked carries only


def test_policy_of_a_checkpoint_around_a_scan_applies_inside_the_body():
    """The policy reaches into the scan body: under dots_saveable the known scan stacks each
    layer's dot and the staged scan recomputes the rest from it, carrying the activations
    along from the initial carry (as JAX does)."""
    Ws, x = _scan_args()
    dots = saved_residuals(remat.checkpoint(_scan_net(_layer_unnamed), policy=cp.dots_saveable),
                           Ws, x)
    assert [(a.shape, d) for a, d in dots] == [
        ((L, N, N), "from the argument Ws"), ((N, B), "from the argument x"),
        ((L, N, B), dots[2][1])]
    assert dots[2][1].startswith("output of dot_general from ")
    # everything_saveable saves what plain AD saves, plus the initial carry the staged scan
    # starts from
    ev = saved_residuals(remat.checkpoint(_scan_net(_layer), policy=cp.everything_saveable),
                         Ws, x)
    plain = saved_residuals(_scan_net(_layer), Ws, x)
    assert _total_bytes(ev) == _total_bytes(plain) + x.nbytes
    grads = remat.grad(remat.checkpoint(_scan_net(_layer_unnamed), policy=cp.dots_saveable),
                       argnums=(0, 1))(Ws, x)
    assert_trees_close(grads, remat.grad(_scan_net(_layer_unnamed), argnums=(0, 1))(Ws, x))


def test_policy_inside_scan_saves_no_more_than_jax():
    jax = pytest.importorskip("jax")
    from jax._src.ad_checkpoint import saved_residuals as jax_saved_residuals
    from jax.ad_checkpoint import checkpoint_name as jax_checkpoint_name

    Ws, x = _scan_args()

    def net(body, lib, checkpoint_name):
        def layer(x, W):
            return lib.sin(lib.tanh(checkpoint_name(lib.dot(W, x), "h"))), None

        def f(Ws, x):
            return lib.sum(body(layer, x, Ws)[0])
        return f

    for policy in ("dots_saveable", "everything_saveable", "nothing_saveable"):
        ours = saved_residuals(remat.checkpoint(
            net(lax.scan, jnp, checkpoint_name), policy=getattr(cp, policy)), Ws, x)
        theirs = jax_saved_residuals(jax.checkpoint(
            net(jax.lax.scan, jax.numpy, jax_checkpoint_name),
            policy=getattr(jax.checkpoint_policies, policy)), Ws, x)
        assert _total_bytes(ours) <= sum(a.size * a.dtype.itemsize for a, _ in theirs), policy


def _branch_a(W, x):
    return jnp.sin(checkpoint_name(jnp.dot(W, x), "d"))


def _branch_b(W, x):
    return jnp.cos(jnp.tanh(x)) * 2.0 + 0.0 * jnp.sum(W)


@pytest.mark.parametrize("pred", [True, False])
@pytest.mark.parametrize("policy", [None, cp.dots_saveable, cp.everything_saveable,
                                    cp.save_only_these_names("d")])
def test_checkpoint_inside_cond_branches(pred, policy):
    rng = np.random.default_rng(8)
    W, x = _rand(rng, N, N), _rand(rng, N)

    def f(W, x, a, b):
        return jnp.sum(lax.cond(pred, a, b, W, x) ** 2)

    ca, cb = remat.checkpoint(_branch_a, policy=policy), remat.checkpoint(_branch_b, policy=policy)
    g0 = remat.grad(f, argnums=(0, 1))(W, x, _branch_a, _branch_b)
    assert_trees_close(g0, remat.grad(f, argnums=(0, 1))(W, x, ca, cb))
    assert_trees_close(g0, remat.jit(remat.grad(f, argnums=(0, 1)), static_argnums=(2, 3))(
        W, x, ca, cb))


def _with_cond(W, x):
    y = jnp.sin(x)
    z = lax.cond(jnp.sum(y) > 0, lambda y: jnp.tanh(jnp.dot(W, y)), lambda y: jnp.exp(0.1 * y), y)
    return jnp.sum(jnp.sin(z))


def _with_scan(W, x):
    def body(c, w):
        return jnp.sin(jnp.dot(W, c)) * w, jnp.cos(c)

    c, ys = lax.scan(body, jnp.tanh(x), jnp.linspace(0.5, 1.0, 3))
    return jnp.sum(c) + jnp.sum(ys * ys)


@pytest.mark.parametrize("fun", [_with_cond, _with_scan], ids=["cond", "scan"])
@pytest.mark.parametrize("policy", [None, cp.dots_saveable, cp.everything_saveable])
def test_checkpoint_of_function_containing_control_flow(fun, policy):
    rng = np.random.default_rng(9)
    W, xs = _rand(rng, N, N), [_rand(rng, N), -_rand(rng, N) - 1.0]
    f = remat.checkpoint(fun, policy=policy)
    for x in xs:  # both cond branches
        g0 = remat.grad(fun, argnums=(0, 1))(W, x)
        assert_trees_close(g0, remat.grad(f, argnums=(0, 1))(W, x))
        assert_trees_close(g0, remat.jit(remat.grad(f, argnums=(0, 1)))(W, x))
    if policy is None:  # the control flow is recomputed, nothing inside it is saved
        res = saved_residuals(f, W, xs[0])
        assert [d for _, d in res] == ["from the argument W", "from the argument x"]


def test_checkpoint_of_function_containing_fori_loop():
    """Regression: DCE of the scan's dead counter (a literal input) must keep the later
    inputs live."""
    x = jnp.asarray(np.linspace(-1, 1, 3).astype(np.float32))

    def f(x):
        return jnp.sum(lax.fori_loop(0, 2, lambda i, y: jnp.sin(y), x))

    assert_trees_close(remat.grad(f)(x), remat.grad(remat.checkpoint(f))(x))


def test_checkpoint_of_function_calling_jit_with_unused_leading_input():
    """Regression: a pruned leading jit input must not make the next one look dead."""
    @remat.jit
    def h(a, b):
        return a * 2.0, jnp.sin(b)

    def f(x):
        _, v = h(jnp.cos(x), x)
        return jnp.sum(v)

    x = jnp.asarray(np.linspace(-1, 1, 3).astype(np.float32))
    assert_trees_close(remat.grad(f)(x), remat.grad(remat.checkpoint(f))(x))


def test_checkpoint_inside_while_loop_body_jvp():
    rng = np.random.default_rng(10)
    W, x, t = _rand(rng, N, N), _rand(rng, N), _rand(rng, N)
    body = lambda y: jnp.sin(jnp.dot(W, y))

    def loop(body):
        def f(x):
            return lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, body(c[1])), (0, x))[1]
        return f

    ref = remat.jvp(loop(body), (x,), (t,))
    for pol in (None, cp.dots_saveable):
        assert_trees_close(ref, remat.jvp(loop(remat.checkpoint(body, policy=pol)), (x,), (t,)))
        assert_trees_close(ref, remat.jvp(remat.checkpoint(loop(body), policy=pol), (x,), (t,)))
        assert_trees_close(ref, remat.jit(lambda x, t, pol=pol: remat.jvp(
            loop(remat.checkpoint(body, policy=pol)), (x,), (t,)))(x, t))
    # forward-over-while linearizes too (the while is recomputed whole inside the checkpoint)
    _, lin0 = remat.linearize(loop(body), x)
    _, lin1 = remat.linearize(remat.checkpoint(loop(body)), x)
    assert_trees_close(lin0(t), lin1(t))


# --- custom derivatives inside a checkpoint ---------------------------------------------------


@remat.custom_jvp
def _csin(x):
    return jnp.sin(x)


@_csin.defjvp
def _csin_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return jnp.sin(x), 3.0 * jnp.cos(x) * t  # 3x the true derivative: distinguishable


@remat.custom_vjp
def _ctanh(x):
    return jnp.tanh(x)


def _ctanh_fwd(x):
    y = jnp.tanh(x)
    return y, y


def _ctanh_bwd(y, g):
    return (5.0 * g * (1 - y * y),)  # 5x the true derivative


_ctanh.defvjp(_ctanh_fwd, _ctanh_bwd)


def _custom_net(W, x):
    h = checkpoint_name(jnp.dot(W, x), "h")
    return jnp.sum(_ctanh(checkpoint_name(_csin(h), "s")) ** 2)


CUSTOM_POLICIES = [None, cp.everything_saveable, cp.dots_saveable, cp.save_only_these_names("h"),
                   cp.save_anything_except_these_names("s"),
                   cp.save_and_offload_only_these_names(names_which_can_be_saved=["s"],
                                                        names_which_can_be_offloaded=["h"])]


@pytest.mark.parametrize("policy", CUSTOM_POLICIES)
def test_custom_rules_inside_checkpoint(policy):
    rng = np.random.default_rng(11)
    W, x = _rand(rng, N, N), _rand(rng, N)
    h = np.asarray(W) @ np.asarray(x)
    y = np.tanh(np.sin(h))
    # d/dh sum(y^2) with the custom rules: 2y * 5(1 - y^2) * 3cos(h)
    dh = 2 * y * 5 * (1 - y * y) * 3 * np.cos(h)
    f = remat.checkpoint(_custom_net, policy=policy)
    gW, gx = remat.grad(f, argnums=(0, 1))(W, x)
    np.testing.assert_allclose(gx, np.asarray(W).T @ dh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gW, np.outer(dh, np.asarray(x)), rtol=1e-5, atol=1e-6)
    g0 = remat.grad(_custom_net, argnums=(0, 1))(W, x)
    assert_trees_close(g0, (gW, gx))
    assert_trees_close(g0, remat.jit(remat.grad(f, argnums=(0, 1)))(W, x))
    xs = jnp.stack([x, 2 * x])
    assert_trees_close(remat.vmap(remat.grad(_custom_net, argnums=1), in_axes=(None, 0))(W, xs),
                       remat.vmap(remat.grad(f, argnums=1), in_axes=(None, 0))(W, xs))
    # forward mode through the checkpoint uses the custom_jvp rule (custom_vjp functions,
    # as in JAX, refuse jvp)
    t = jnp.ones_like(x)
    fwd = lambda fun: remat.jvp(lambda x: jnp.sum(fun(x) ** 2), (x,), (t,))[1]
    ref_fwd = np.sum(2 * np.sin(h) * 3 * np.cos(h) * (np.asarray(W) @ np.ones(N)))
    np.testing.assert_allclose(fwd(lambda x: _csin(jnp.dot(W, x))), ref_fwd, rtol=1e-5)
    np.testing.assert_allclose(
        fwd(remat.checkpoint(lambda x: _csin(checkpoint_name(jnp.dot(W, x), "h")),
                             policy=policy)), ref_fwd, rtol=1e-5)


def test_jit_of_custom_jvp_object_inside_checkpoint_keeps_rule():
    x = jnp.asarray(np.linspace(-1, 1, 4).astype(np.float32))
    f = remat.checkpoint(lambda x: jnp.sum(remat.jit(_csin)(x)))
    np.testing.assert_allclose(remat.grad(f)(x), 3.0 * np.cos(np.asarray(x)), rtol=1e-6)


# --- vmap / jit / nesting ---------------------------------------------------------------------


def _pnet(params, x):
    h = checkpoint_name(jnp.tanh(jnp.dot(params["W"], x) + params["b"]), "h")
    return jnp.sin(h) * h


def _pnet_args(seed=12):
    rng = np.random.default_rng(seed)
    return {"W": _rand(rng, 3, 4), "b": _rand(rng, 3)}, _rand(rng, 4, 5), _rand(rng, 5, 3)


VMAP_POLICIES = [None, cp.dots_saveable, cp.save_only_these_names("h"),
                 cp.offload_dot_with_no_batch_dims(),
                 cp.save_and_offload_only_these_names(names_which_can_be_saved=[],
                                                      names_which_can_be_offloaded=["h"])]


@pytest.mark.parametrize("policy", VMAP_POLICIES)
def test_vmap_of_checkpoint_in_axes(policy):
    params, xs, bs = _pnet_args()
    f = remat.checkpoint(_pnet, policy=policy)
    cases = [
        ((None, -1), (params, xs)),  # negative axis, unbatched params
        (({"W": None, "b": None}, 1), (params, xs)),  # pytree prefix with None leaves
        (({"W": None, "b": 0}, -1), ({"W": params["W"], "b": bs}, xs)),  # mixed
        ((None, 0), (params, xs.T)),
    ]
    for in_axes, args in cases:
        def loss(fun, in_axes=in_axes):
            return lambda *a: jnp.sum(remat.vmap(fun, in_axes=in_axes)(*a))
        g0 = remat.grad(loss(_pnet), argnums=(0, 1))(*args)
        assert_trees_close(g0, remat.grad(loss(f), argnums=(0, 1))(*args))
        assert_trees_close(g0, remat.jit(remat.grad(loss(f), argnums=(0, 1)))(*args))
        assert_trees_close(remat.vmap(_pnet, in_axes=in_axes)(*args),
                           remat.vmap(f, in_axes=in_axes)(*args))


@pytest.mark.parametrize("policy", VMAP_POLICIES)
def test_checkpoint_of_vmapped_and_jitted_functions(policy):
    params, xs, _ = _pnet_args(13)
    ref = lambda p, xs: jnp.sum(remat.vmap(_pnet, in_axes=(None, 1))(p, xs))
    g0 = remat.grad(ref, argnums=(0, 1))(params, xs)
    variants = {
        "checkpoint(vmap)": lambda p, xs: jnp.sum(remat.checkpoint(
            remat.vmap(_pnet, in_axes=(None, 1)), policy=policy)(p, xs)),
        "jit(vmap(jit(checkpoint(jit))))": lambda p, xs: jnp.sum(remat.jit(remat.vmap(
            lambda p, x: remat.jit(lambda p, x: remat.checkpoint(
                remat.jit(_pnet), policy=policy)(p, x))(p, x), in_axes=(None, 1)))(p, xs)),
        "checkpoint(jit(vmap))": lambda p, xs: jnp.sum(remat.checkpoint(
            remat.jit(remat.vmap(_pnet, in_axes=(None, 1))), policy=policy)(p, xs)),
    }
    for name, fun in variants.items():
        assert_trees_close(g0, remat.grad(fun, argnums=(0, 1))(params, xs)), name
        assert_trees_close(g0, remat.jit(remat.grad(fun, argnums=(0, 1)))(params, xs)), name


def _inner(x):
    return jnp.sin(checkpoint_name(jnp.cos(x) * 2.0, "c"))


def _make_outer(inner_policy):
    def outer(x):
        y = remat.checkpoint(_inner, policy=inner_policy)(x)
        return jnp.sum(jnp.tanh(checkpoint_name(y, "y")) ** 2)
    return outer


NEST_POLICIES = [None, cp.everything_saveable, cp.save_only_these_names("y", "c"),
                 cp.dots_saveable]


@pytest.mark.parametrize("outer_policy", NEST_POLICIES)
@pytest.mark.parametrize("inner_policy", NEST_POLICIES)
def test_nested_checkpoints_with_different_policies(outer_policy, inner_policy):
    x = jnp.asarray(np.linspace(-1.5, 1.5, 5).astype(np.float32))
    ref = lambda x: jnp.sum(jnp.tanh(_inner(x)) ** 2)
    f = remat.checkpoint(_make_outer(inner_policy), policy=outer_policy)
    g0 = remat.grad(ref)(x)
    assert_trees_close(g0, remat.grad(f)(x))
    assert_trees_close(g0, remat.jit(remat.grad(f))(x))
    assert_trees_close(remat.hessian(ref)(x), remat.hessian(f)(x), rtol=1e-5, atol=1e-6)
    # checkpoint applied directly to a checkpointed function
    direct = remat.checkpoint(remat.checkpoint(lambda x: jnp.sum(jnp.tanh(_inner(x)) ** 2),
                                               policy=inner_policy), policy=outer_policy)
    assert_trees_close(g0, remat.grad(direct)(x))
    res = saved_residuals(f, x)
    if outer_policy in (None, cp.dots_saveable):
        # the outer policy saves nothing of this dot-free function: only its input
        assert [d for _, d in res] == ["from the argument x"]


def test_nested_outer_nothing_saveable_overrides_inner_everything_saveable():
    """A value inside nested checkpoints is saved only if every enclosing policy allows it."""
    x = jnp.asarray(np.linspace(-1.5, 1.5, 5).astype(np.float32))
    f = remat.checkpoint(_make_outer(cp.everything_saveable), policy=cp.nothing_saveable)
    assert [d for _, d in saved_residuals(f, x)] == ["from the argument x"]
    g = remat.checkpoint(_make_outer(cp.save_only_these_names("c")),
                         policy=cp.save_only_these_names("y"))
    assert [d.split(" from ")[0] for _, d in saved_residuals(g, x)] == \
        ["from the argument x", "named 'y'"]


def test_jit_of_checkpointed_function_keeps_the_checkpoint():
    x = jnp.asarray(np.linspace(-1, 1, 8).astype(np.float32))

    def f(x):
        return jnp.sum(jnp.sin(jnp.sin(jnp.sin(x))))

    c = remat.checkpoint(f)
    jc = remat.jit(c)
    assert "checkpoint[" in str(remat.make_jaxpr(jc)(x))
    assert _total_bytes(saved_residuals(jc, x)) == _total_bytes(saved_residuals(c, x))
    assert c.cache is not getattr(jc, "cache", None)


# --- checkpoint_name ------------------------------------------------------------------------


def test_checkpoint_name_on_a_pytree_is_a_transparent_identity():
    tree = {"a": jnp.arange(3.0), "b": (jnp.ones((2, 2)), jnp.asarray(2.0))}
    named = lambda t: checkpoint_name(t, "foo")
    assert_trees_close(named(tree), tree)
    jaxpr = str(remat.make_jaxpr(named)(tree))
    assert jaxpr.count("name[name=foo]") == 3
    assert_trees_close(remat.jit(named)(tree), tree)
    # jvp: the tangent passes through unchanged
    tangent = tree_map(lambda x: jnp.full_like(x, 0.5), tree)
    primal_out, tangent_out = remat.jvp(named, (tree,), (tangent,))
    assert_trees_close(primal_out, tree)
    assert_trees_close(tree_map(jnp.asarray, tangent_out), tangent)
    # vmap: batched leaves stay batched at the same axis, unbatched ones pass through
    batched = {"a": jnp.ones((4, 3)), "b": (jnp.zeros((2, 4, 2)), jnp.arange(4.0))}
    vnamed = remat.vmap(named, in_axes=({"a": 0, "b": (1, 0)},), out_axes={"a": 0, "b": (1, 0)})
    out = vnamed(batched)
    assert_trees_close(out, batched)
    # grad: identity derivative; the name survives jit and vmap in the jaxpr
    s = lambda t: jnp.sum(named(t)["a"] * 3.0) + jnp.sum(named(t)["b"][0])
    g = remat.grad(s)(tree)
    assert_trees_close(g, {"a": jnp.full(3, 3.0), "b": (jnp.ones((2, 2)), jnp.asarray(0.0))})
    assert str(remat.make_jaxpr(vnamed)(batched)).count("name[name=foo]") == 3
    assert "name[name=foo]" in str(remat.make_jaxpr(remat.jit(named))(tree))
    with pytest.raises(TypeError):
        checkpoint_name(tree, 3)


# --- what each policy saves -----------------------------------------------------------------


def three_layers(W1, W2, W3, x):
    x = checkpoint_name(jnp.sin(jnp.dot(W1, x)), "a")  # LAYER1
    x = checkpoint_name(jnp.sin(jnp.dot(W2, x)), "b")  # LAYER2
    x = checkpoint_name(jnp.sin(jnp.dot(W3, x)), "c")  # LAYER3
    return jnp.sum(x)


def _three_args(n=8, b=2, seed=14):
    rng = np.random.default_rng(seed)
    return _rand(rng, n, n), _rand(rng, n, n), _rand(rng, n, n), _rand(rng, n, b)


def _at(layer):
    return f"test_checkpoint_interplay.py:{_line_of(three_layers, f'LAYER{layer}')} " \
           f"(three_layers)"


ARGS = ["from the argument W1", "from the argument W2", "from the argument W3",
        "from the argument x"]


def _expected_saved():
    named = lambda n, i: f"named '{n}' from {_at(i)}"
    out = lambda p, i: f"output of {p} from {_at(i)}"
    return {
        "nothing_saveable": [],
        "everything_saveable": [out("cos", 1), named("a", 1), out("cos", 2), named("b", 2),
                                out("cos", 3)],
        "dots_saveable": [out("dot_general", i) for i in (1, 2, 3)],
        "dots_with_no_batch_dims_saveable": [out("dot_general", i) for i in (1, 2, 3)],
        # 'b' is not saved under any alias (not as the sin output it names either): the dot
        # feeding it is saved instead and sin is recomputed
        "save_anything_except_these_names('b')": [out("cos", 1), named("a", 1),
                                                  out("dot_general", 2), out("cos", 2),
                                                  out("cos", 3)],
        "save_any_names_but_these('b')": [named("a", 1)],  # 'c' is not needed backwards
        "save_only_these_names('a','c')": [named("a", 1)],
        "save_only_these_names('b')": [named("b", 2)],
        "save_from_both_policies(dots,only('b'))": [out("dot_general", 1), out("dot_general", 2),
                                                    named("b", 2), out("dot_general", 3)],
        "save_and_offload(saved=a,offloaded=b)": [named("a", 1), "offloaded " + named("b", 2)],
        "offload_dot_with_no_batch_dims": ["offloaded " + out("dot_general", i)
                                           for i in (1, 2, 3)],
    }


SAVE_POLICIES = {
    "nothing_saveable": cp.nothing_saveable,
    "everything_saveable": cp.everything_saveable,
    "dots_saveable": cp.dots_saveable,
    "dots_with_no_batch_dims_saveable": cp.dots_with_no_batch_dims_saveable,
    "save_anything_except_these_names('b')": cp.save_anything_except_these_names("b"),
    "save_any_names_but_these('b')": cp.save_any_names_but_these("b"),
    "save_only_these_names('a','c')": cp.save_only_these_names("a", "c"),
    "save_only_these_names('b')": cp.save_only_these_names("b"),
    "save_from_both_policies(dots,only('b'))": cp.save_from_both_policies(
        cp.dots_saveable, cp.save_only_these_names("b")),
    "save_and_offload(saved=a,offloaded=b)": cp.save_and_offload_only_these_names(
        names_which_can_be_saved=["a"], names_which_can_be_offloaded=["b"]),
    "offload_dot_with_no_batch_dims": cp.offload_dot_with_no_batch_dims(),
}


@pytest.mark.parametrize("name", list(SAVE_POLICIES))
def test_saved_residuals_per_policy(name):
    args = _three_args()
    res = saved_residuals(remat.checkpoint(three_layers, policy=SAVE_POLICIES[name]), *args)
    descriptions = [d for _, d in res]
    assert descriptions == ARGS + _expected_saved()[name]
    assert [a.shape for a, _ in res][4:] == [(8, 2)] * (len(res) - 4)
    if name == "save_anything_except_these_names('b')":
        assert not any("'b'" in d or d == f"output of sin from {_at(2)}" for d in descriptions)
    # the gradient is the same whatever is saved
    assert_trees_close(remat.grad(three_layers, argnums=(0, 1, 2, 3))(*args),
                       remat.grad(remat.checkpoint(three_layers, policy=SAVE_POLICIES[name]),
                                  argnums=(0, 1, 2, 3))(*args))


def test_everything_saveable_saves_what_no_checkpoint_saves():
    args = _three_args()
    plain = saved_residuals(three_layers, *args)
    ev = saved_residuals(remat.checkpoint(three_layers, policy=cp.everything_saveable), *args)
    assert [(a.shape, d) for a, d in plain] == [(a.shape, d) for a, d in ev]


def test_saved_residuals_under_jit():
    """Inside a jit, a checkpoint saves values of the same number and sizes as on its own,
    and the jitted forward pass adds no working memory for them beyond those values."""
    args = _three_args()
    for pol in (cp.nothing_saveable, cp.dots_saveable, cp.save_only_these_names("b")):
        c = remat.checkpoint(three_layers, policy=pol)
        own = saved_residuals(c, *args)
        jitted = saved_residuals(remat.jit(lambda *a, c=c: c(*a)), *args)
        assert sorted(a.shape for a, _ in jitted) == sorted(a.shape for a, _ in own)
        # the checkpoint's arguments pass through the jit: described as arguments (as in JAX)
        descriptions = [d for _, d in jitted]
        assert descriptions[:4] == [f"from the argument a[{i}]" for i in range(4)]
        assert all(d.startswith("output of jitted function '<lambda>' from test_checkpoint_inter")
                   for d in descriptions[4:])
        intermediates = sum(a.nbytes for a, d in own if not d.startswith("from the argument"))
        out, _, _, live = _measure_vjp(remat.jit(lambda *a, c=c: c(*a)), args)
        assert live == np.asarray(out).nbytes + intermediates


def test_print_saved_residuals_totals(capsys):
    args = _three_args()
    pol = cp.save_and_offload_only_these_names(names_which_can_be_saved=["a"],
                                               names_which_can_be_offloaded=["b"])
    print_saved_residuals(remat.checkpoint(three_layers, policy=pol), *args)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == "f32[8,8] from the argument W1"
    assert out[-2].startswith("f32[8,2] offloaded named 'b'")
    assert out[-1] == "total: 896 bytes saved in 6 residuals (+64 bytes offloaded)"


def test_dots_saveable_can_save_more_bytes_than_everything_saveable():
    """Not a bug: a restrictive policy may have to keep a bigger value from which the needed
    one is recomputed (here the dot output instead of the scalar cos), as in JAX."""
    rng = np.random.default_rng(15)
    M, x = _rand(rng, 16, 16), _rand(rng, 16)
    f = lambda M, x: jnp.sin(jnp.sum(jnp.dot(M, x)))
    ev = saved_residuals(remat.checkpoint(f, policy=cp.everything_saveable), M, x)
    dots = saved_residuals(remat.checkpoint(f, policy=cp.dots_saveable), M, x)
    assert [a.shape for a, _ in ev][-1] == () and [a.shape for a, _ in dots][-1] == (16,)
    assert _total_bytes(dots) > _total_bytes(ev)


def test_naming_a_dot_does_not_change_what_dots_saveable_saves():
    rng = np.random.default_rng(16)
    W, x = _rand(rng, 4, 4), _rand(rng, 4)
    named = lambda W, x: jnp.sum(jnp.sin(checkpoint_name(jnp.dot(W, x), "h")))
    unnamed = lambda W, x: jnp.sum(jnp.sin(jnp.dot(W, x)))
    res_named = saved_residuals(remat.checkpoint(named, policy=cp.dots_saveable), W, x)
    res_unnamed = saved_residuals(remat.checkpoint(unnamed, policy=cp.dots_saveable), W, x)
    assert [d.split(" from ")[0] for _, d in res_named] == \
        [d.split(" from ")[0] for _, d in res_unnamed] == \
        ["from the argument W", "from the argument x", "output of dot_general"]


# --- offloading is real ---------------------------------------------------------------------

OFFLOAD_POLICIES = {
    "names": cp.save_and_offload_only_these_names(names_which_can_be_saved=["a"],
                                                  names_which_can_be_offloaded=["b"]),
    "dots": cp.offload_dot_with_no_batch_dims(),
}


def _measure_vjp(fun, args):
    """Host and working-memory bytes that the forward pass of ``vjp`` leaves behind."""
    gc.collect()
    host0, live0 = memory.host_bytes(), memory.live_bytes()
    out, pullback = remat.vjp(fun, *args)
    return out, pullback, memory.host_bytes() - host0, memory.live_bytes() - live0


def _wrapped(fun, wrap):
    return {"eager": fun, "jit": remat.jit(lambda *a: fun(*a)),
            "vmap": lambda *a: remat.vmap(fun, in_axes=(None, None, None, 0))(
                *a[:3], jnp.expand_dims(a[3], 0))[0]}[wrap]


def assert_trees_equal(a, b):
    la, lb = tree_leaves(a), tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", list(OFFLOAD_POLICIES))
@pytest.mark.parametrize("wrap", ["eager", "jit", "vmap"])
def test_offloading_is_real(name, wrap):
    args = _three_args(n=32, b=4)
    c = remat.checkpoint(three_layers, policy=OFFLOAD_POLICIES[name])
    res = saved_residuals(c, *args)
    offloaded = sum(a.nbytes for a, d in res if d.startswith("offloaded"))
    kept = sum(a.nbytes for a, d in res
               if not d.startswith("offloaded") and not d.startswith("from the argument"))
    assert offloaded > 0
    fun = _wrapped(c, wrap)
    # Offloading (and recomputing) changes no bit of the gradient of the same program run the
    # same way. A checkpoint runs its backward pass as a plan of the executor, even under
    # eager, so the reference is the uncheckpointed function's plan, not eager ``grad``: plans
    # fold a product's transpose into the product (operands swapped), and a BLAS kernel may
    # sum the swapped product in another order (OpenBLAS's Haswell sgemm does at this size,
    # its Sandybridge and SkylakeX ones do not).
    out0, pullback0 = remat.vjp(remat.jit(_wrapped(three_layers, wrap)), *args)
    g0 = pullback0(jnp.ones_like(out0))
    del pullback0
    gc.collect()
    base = memory.host_bytes()
    out, pullback, host, live = _measure_vjp(fun, args)
    assert host == offloaded
    # working memory holds the output and the non-offloaded residuals only
    assert live == np.asarray(out).nbytes + kept
    assert_trees_equal(g0, pullback(jnp.ones_like(out)))
    assert memory.host_bytes() == base + host  # held by the pullback until it dies
    del pullback
    gc.collect()
    assert memory.host_bytes() == base


def test_offloaded_residuals_survive_two_pullback_calls_and_linearize():
    args = _three_args(n=16, b=2)
    c = remat.checkpoint(three_layers, policy=OFFLOAD_POLICIES["dots"])
    g0 = remat.grad(three_layers, argnums=(0, 1, 2, 3))(*args)
    gc.collect()
    base = memory.host_bytes()
    out, pullback, host, _ = _measure_vjp(c, args)
    assert host == 3 * 16 * 2 * 4
    ct = jnp.ones_like(out)
    assert_trees_close(g0, pullback(ct))
    assert_trees_close(g0, pullback(ct))  # reloaded again, still held on the host
    assert memory.host_bytes() == base + host
    del pullback
    gc.collect()
    assert memory.host_bytes() == base
    _, lin = remat.linearize(c, *args)
    assert memory.host_bytes() == base + host
    _, lin0 = remat.linearize(three_layers, *args)
    assert_trees_close(lin0(*args), lin(*args))
    del lin
    gc.collect()
    assert memory.host_bytes() == base


def test_offloading_keeps_a_residuals_memory_layout():
    """An offloaded residual comes back laid out as it went (a transposed view stays
    Fortran-ordered), so the backward pass's products see the operands they see unoffloaded:
    a matrix-vector product's BLAS kernel, and its sums, depend on the matrix's layout."""
    from remat.offload import offload_p, reload_p

    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 48)).astype(np.float32)
    for x in (w, w.T, w[None], w.T[:, None, :], np.float32(2.5) * np.ones(())):
        back = reload_p.impl(offload_p.impl(x))
        assert back.strides == x.strides and np.array_equal(back, x)
    assert reload_p.impl(offload_p.impl(w[:, ::2])).flags.c_contiguous  # not dense: C order

    def f(W, x):
        h = checkpoint_name(jnp.sin(W).T, "h")  # (48, 64), Fortran-ordered
        return jnp.sum(jnp.sin(h @ x))

    args = (jnp.asarray(w), _rand(rng, 64))
    saved = remat.checkpoint(f, policy=cp.save_only_these_names("h"))
    moved = remat.checkpoint(f, policy=cp.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["h"]))
    assert saved_residuals(moved, *args)[-1][1].startswith("offloaded named 'h'")
    for wrap in (lambda g: g, remat.jit):
        assert_trees_equal(wrap(remat.grad(saved, argnums=(0, 1)))(*args),
                           wrap(remat.grad(moved, argnums=(0, 1)))(*args))


def test_offloading_inside_a_scan_body():
    Ws, x = _scan_args()
    body = remat.checkpoint(_layer, policy=cp.offload_dot_with_no_batch_dims())
    net = _scan_net(body)
    out, pullback, host, _ = _measure_vjp(net, (Ws, x))
    assert_trees_close(remat.grad(_scan_net(_layer), argnums=(0, 1))(Ws, x),
                       pullback(jnp.ones_like(out)))
    assert host == L * N * B * 4


def test_offloading_through_a_jit_inside_the_checkpoint():
    args = _three_args(n=16, b=2)
    pol = OFFLOAD_POLICIES["names"]
    res = saved_residuals(remat.checkpoint(remat.jit(three_layers), policy=pol), *args)
    inner = [d for _, d in res if not d.startswith("from the argument")]
    assert len(inner) == 2 and sum(d.startswith("offloaded") for d in inner) == 1
