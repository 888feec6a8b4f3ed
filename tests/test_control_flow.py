"""Control flow: cond/switch, while_loop, scan, fori_loop and map, each against its unrolled
Python equivalent (values, jvp, grad, vmap, jit, nesting), plus errors, the staged jaxprs,
residual structure under vjp and dead-code elimination."""

import contextlib

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import core, lax
from remat.interpreters import partial_eval as pe
from remat.test_util import check_grads
from remat.tree_util import tree_flatten, tree_map, tree_unflatten

R = np.random.default_rng(0)


def rand(*shape):
    return R.standard_normal(shape).astype(np.float32)


def assert_close(a, b, tol=1e-5):
    fa, ta = tree_flatten(a)
    fb, tb = tree_flatten(b)
    assert ta == tb, (ta, tb)
    for x, y in zip(fa, fb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape, (x.shape, y.shape)
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


def stack(trees):
    return tree_map(lambda *xs: jnp.stack(xs), *trees)


def scan_ref(f, init, xs, length=None, reverse=False):
    """``lax.scan`` unrolled in Python (only non-control-flow primitives)."""
    leaves, tree = tree_flatten(xs)
    n = length if length is not None else leaves[0].shape[0]
    carry, ys = init, [None] * n
    for i in (reversed(range(n)) if reverse else range(n)):
        x = None if xs is None else tree_unflatten(tree, [x[i] for x in leaves])
        carry, ys[i] = f(carry, x)
    return carry, stack(ys)


def while_ref(cond_fun, body_fun, val):
    while bool(cond_fun(val)):
        val = body_fun(val)
    return val


def count_prims(jaxpr, name):
    """Occurrences of primitive ``name`` in ``jaxpr`` and all its sub-jaxprs."""
    n = 0
    for eqn in jaxpr.eqns:
        n += eqn.primitive.name == name
        for p in eqn.params.values():
            for sub in p if isinstance(p, tuple) else (p,):
                if isinstance(sub, (core.ClosedJaxpr, core.Jaxpr)):
                    n += count_prims(sub.jaxpr if isinstance(sub, core.ClosedJaxpr) else sub,
                                     name)
    return n


# A recurrent cell used throughout: carry (h, n), xs (x, s); ys (y, None-free pytree)
W = rand(3, 3)
XS = rand(5, 3)
H0 = rand(3)


def rnn_body(W):
    def body(carry, x):
        h, n = carry
        h = jnp.tanh(W @ h + x["x"]) * x["s"]
        return (h, n + 1), {"y": jnp.sin(h), "n": n}

    return body


def rnn_xs(xs=XS):
    return {"x": xs, "s": np.linspace(0.5, 1.5, xs.shape[0]).astype(np.float32)}


def rnn_loss(scan):
    def loss(W, h0, xs):
        (h, n), ys = scan(rnn_body(W), (h0, 0), rnn_xs(xs))
        return jnp.sum(h * h) + jnp.sum(ys["y"] * ys["y"] * 0.5)

    return loss


scan_loss = rnn_loss(lax.scan)
unrolled_loss = rnn_loss(scan_ref)


# --- scan: values -----------------------------------------------------------------------------


def test_scan_pytree_values_match_unrolled_and_numpy():
    (h, n), ys = lax.scan(rnn_body(W), (H0, 0), rnn_xs())
    (h_r, n_r), ys_r = scan_ref(rnn_body(W), (H0, 0), rnn_xs())
    assert_close((h, ys), (h_r, ys_r))
    assert int(n) == 5 and np.asarray(n).dtype == np.int32
    np.testing.assert_array_equal(ys["n"], np.arange(5))
    # pure NumPy
    hh, s = H0.astype(np.float64), np.linspace(0.5, 1.5, 5)
    ys_np = []
    for i in range(5):
        hh = np.tanh(W @ hh + XS[i]) * s[i]
        ys_np.append(np.sin(hh))
    np.testing.assert_allclose(h, hh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ys["y"], np.stack(ys_np), rtol=1e-5, atol=1e-6)


def test_scan_reverse_stacks_outputs_in_input_order():
    xs = np.arange(1.0, 5.0, dtype=np.float32)

    def f(c, x):
        return c * 2 + x, c

    carry, ys = lax.scan(f, np.float32(0), xs, reverse=True)
    carry_r, ys_r = scan_ref(f, np.float32(0), xs, reverse=True)
    assert_close((carry, ys), (carry_r, ys_r))
    # iterations visit x = 4, 3, 2, 1; ys[i] is the carry seen by xs[i]
    np.testing.assert_array_equal(ys, [24.0, 11.0, 4.0, 0.0])
    assert float(carry) == 49.0


def test_scan_xs_none_with_length_and_none_ys():
    carry, ys = lax.scan(lambda c, x: ((c[0] * c[1], c[1] + 1.0), None),
                         (np.float32(1), np.float32(1)), None, length=5)
    assert ys is None
    assert float(carry[0]) == 120.0 and float(carry[1]) == 6.0
    c, ys = lax.scan(lambda c, _: (c + 1, c * c), np.int32(0), xs=None, length=4)
    np.testing.assert_array_equal(ys, [0, 1, 4, 9])
    assert int(c) == 4


def test_scan_length_zero():
    c, ys = lax.scan(lambda c, x: (c + x, {"a": c * x, "b": x[:2]}), H0, np.zeros((0, 3),
                                                                             np.float32))
    np.testing.assert_array_equal(c, H0)
    assert ys["a"].shape == (0, 3) and ys["b"].shape == (0, 2)
    c, ys = lax.scan(lambda c, _: (c + 1.0, c), H0, None, length=0)
    np.testing.assert_array_equal(c, H0)
    assert ys.shape == (0, 3) and ys.dtype == np.float32


def test_scan_weak_carry_is_promoted():
    c, ys = lax.scan(lambda c, x: (c + x, c), 0.0, np.ones(3, np.float32))
    assert c.dtype == np.float32 and not c.weak_type
    np.testing.assert_array_equal(ys, [0.0, 1.0, 2.0])


def test_scan_length_errors():
    with pytest.raises(ValueError, match="different leading axis sizes"):
        lax.scan(lambda c, x: (c, None), 0.0, (np.ones(3), np.ones(4)))
    with pytest.raises(ValueError, match="length"):
        lax.scan(lambda c, x: (c, None), 0.0, None)
    with pytest.raises(ValueError, match="disagrees"):
        lax.scan(lambda c, x: (c, None), 0.0, np.ones(3), length=4)


def test_map_matches_python_loop():
    xs = rand(4, 3)
    ys = lax.map(lambda x: {"s": jnp.sum(x), "e": jnp.exp(x)}, xs)
    np.testing.assert_allclose(ys["s"], xs.sum(1), rtol=1e-5)
    np.testing.assert_allclose(ys["e"], np.exp(xs), rtol=1e-5)


# --- scan: derivatives ------------------------------------------------------------------------


def test_scan_jvp_matches_unrolled():
    args = (W, H0, XS)
    tangents = (rand(3, 3), rand(3), rand(5, 3))
    out, t = remat.jvp(scan_loss, args, tangents)
    out_r, t_r = remat.jvp(unrolled_loss, args, tangents)
    assert_close((out, t), (out_r, t_r), 1e-4)


def test_scan_grad_matches_unrolled_and_closes_over_differentiated_value():
    # W is differentiated and closed over by the scan body
    g = remat.grad(scan_loss, argnums=(0, 1, 2))(W, H0, XS)
    g_r = remat.grad(unrolled_loss, argnums=(0, 1, 2))(W, H0, XS)
    assert_close(g, g_r, 1e-4)
    assert all(np.abs(np.asarray(x)).sum() > 0 for x in g)


def test_scan_check_grads_second_order():
    def f(W, h0, xs):
        return lax.scan(lambda c, x: (jnp.sin(W @ c) + x, c * x), h0, xs)

    check_grads(f, (W * 0.5, H0, XS[:3]), order=2)


def test_scan_reverse_pytree_grad_and_second_order():
    def f(a, xs):
        def body(c, x):
            u, v = c
            return (u * jnp.cos(x["p"]) + v, v * a), {"o": u * x["q"]}

        (u, v), ys = lax.scan(body, (a, a * 2.0), {"p": xs, "q": xs * xs}, reverse=True)
        return u + v + jnp.sum(ys["o"])

    def fr(a, xs):
        def body(c, x):
            u, v = c
            return (u * jnp.cos(x["p"]) + v, v * a), {"o": u * x["q"]}

        (u, v), ys = scan_ref(body, (a, a * 2.0), {"p": xs, "q": xs * xs}, reverse=True)
        return u + v + jnp.sum(ys["o"])

    a, xs = np.float32(0.7), rand(4)
    assert_close(f(a, xs), fr(a, xs))
    assert_close(remat.grad(f, (0, 1))(a, xs), remat.grad(fr, (0, 1))(a, xs), 1e-4)
    check_grads(f, (a, xs), order=2)


def test_scan_carry_unknown_only_through_fixpoint():
    # v depends on x only through u: partial eval must iterate to find v unknown too
    def f(x, init_v):
        def body(c, _):
            u, v, k = c
            return (u * 0.9, v + u * u, k + 1), k

        (u, v, k), ks = lax.scan(body, (x, init_v, 0), None, length=4)
        return v

    def fr(x, init_v):
        u, v = x, init_v
        for _ in range(4):
            u, v = u * 0.9, v + u * u
        return v

    g = remat.grad(f)(np.float32(1.5), np.float32(2.0))
    assert_close(g, remat.grad(fr)(np.float32(1.5), np.float32(2.0)))
    assert abs(float(g)) > 0


def test_scan_linearize_matches_jvp():
    args = (W, H0, XS)
    tangents = (rand(3, 3), rand(3), rand(5, 3))
    out, f_jvp = remat.linearize(scan_loss, *args)
    _, t = remat.jvp(unrolled_loss, args, tangents)
    assert_close(f_jvp(*tangents), t, 1e-4)
    assert_close(out, unrolled_loss(*args), 1e-5)


def test_scan_of_integer_ys_and_carry_under_grad():
    def f(x):
        (c, i), (ys, idx) = lax.scan(lambda c, x: ((c[0] * x, c[1] + 1), (c[0], c[1])),
                                     (x[0], 0), x)
        return c + jnp.sum(ys) + idx.sum().astype(np.float32) * 0

    xs = rand(4)
    expected = remat.grad(lambda x: x[0] * x[0] * x[1] * x[2] * x[3] + x[0] + x[0] * x[0]
                          + x[0] * x[0] * x[1] + x[0] * x[0] * x[1] * x[2])(xs)
    assert_close(remat.grad(f)(xs), expected, 1e-4)


def test_scan_jvp_with_only_xs_or_only_closure_tangents():
    xt, wt = rand(5, 3), rand(3, 3)
    assert_close(remat.jvp(lambda xs: scan_loss(W, H0, xs), (XS,), (xt,)),
                 remat.jvp(lambda xs: unrolled_loss(W, H0, xs), (XS,), (xt,)), 1e-4)
    assert_close(remat.jvp(lambda w: scan_loss(w, H0, XS), (W,), (wt,)),
                 remat.jvp(lambda w: unrolled_loss(w, H0, XS), (W,), (wt,)), 1e-4)


def test_scan_grad_of_only_ys_or_only_carry():
    def ys_loss(scan):
        return lambda xs: jnp.sum(scan(rnn_body(W), (H0, 0), rnn_xs(xs))[1]["y"])

    assert_close(remat.grad(ys_loss(lax.scan))(XS), remat.grad(ys_loss(scan_ref))(XS), 1e-4)
    f = lambda c, xs: lax.scan(lambda c, x: (c * x, c + x), c, xs)
    g = remat.grad(lambda c: jnp.sum(f(c, XS)[0]))(H0)
    assert_close(g, np.prod(XS, axis=0), 1e-5)


def test_scan_with_integer_xs_under_grad_and_vmap():
    def body(c, k):
        return c * k.astype(np.float32) + jnp.sin(c), k * 2

    ks, x = np.array([1, 2, 3], np.int32), rand(2)
    f = lambda x: lax.scan(body, x, ks)
    fr = lambda x: scan_ref(body, x, ks)
    assert_close(f(x), fr(x))
    assert_close(remat.grad(lambda x: jnp.sum(f(x)[0]))(x),
                 remat.grad(lambda x: jnp.sum(fr(x)[0]))(x), 1e-5)
    xb = rand(4, 2)
    assert_close(remat.vmap(f)(xb), stack([fr(xi) for xi in xb]))
    check_grads(lambda x: f(x)[0], (x,), order=2)


def test_scan_length_zero_under_grad_vmap_jit():
    f = lambda c, xs: lax.scan(lambda c, x: (c * x, c + x), c, xs)
    c, xs = rand(3), np.zeros((0, 3), np.float32)
    assert_close(remat.grad(lambda c: jnp.sum(f(c, xs)[0]))(c), np.ones(3, np.float32))
    assert remat.vmap(f, in_axes=(0, None))(rand(2, 3), xs)[1].shape == (2, 0, 3)
    assert_close(remat.jit(f)(c, xs)[0], c)


def test_hessians_through_scan_and_cond():
    f = lambda x: jnp.sum(lax.scan(lambda c, z: (jnp.sin(c * z), c * c), x[0], x)[1])
    fr = lambda x: jnp.sum(scan_ref(lambda c, z: (jnp.sin(c * z), c * c), x[0], x)[1])
    x = rand(3)
    assert_close(remat.hessian(f)(x), remat.hessian(fr)(x), 1e-4)
    g = lambda x: lax.cond(x[0] > 0, lambda x: jnp.sum(jnp.sin(x) * x),
                           lambda x: jnp.sum(x * x * x), x)
    gr = lambda x: jnp.sum(jnp.sin(x) * x) if x[0] > 0 else jnp.sum(x * x * x)
    assert_close(remat.hessian(g)(x), remat.hessian(gr)(x), 1e-4)
    assert_close(remat.hessian(g)(-x), remat.hessian(gr)(-x), 1e-4)


def test_map_grad_and_vmap():
    f = lambda W, xs: jnp.sum(lax.map(lambda x: jnp.tanh(W @ x), xs))
    fr = lambda W, xs: jnp.sum(jnp.stack([jnp.tanh(W @ x) for x in xs]))
    assert_close(remat.grad(f, (0, 1))(W, XS), remat.grad(fr, (0, 1))(W, XS), 1e-5)
    Ws = rand(2, 3, 3)
    assert_close(remat.vmap(f, (0, None))(Ws, XS), np.stack([fr(w, XS) for w in Ws]), 1e-5)


# --- scan: vmap -------------------------------------------------------------------------------


def test_scan_vmap_batched_carry_only():
    hs = rand(4, 3)
    f = lambda h: lax.scan(rnn_body(W), (h, 0), rnn_xs())
    out = remat.vmap(f)(hs)
    assert_close(out, stack([scan_ref(rnn_body(W), (h, 0), rnn_xs()) for h in hs]))


def test_scan_vmap_batched_xs_non_leading_axis():
    xs_b = rand(5, 2, 3)  # mapped over axis 1

    def f(xs):
        return lax.scan(rnn_body(W), (H0, 0), rnn_xs(xs))

    out = remat.vmap(f, in_axes=1)(xs_b)
    expected = stack([scan_ref(rnn_body(W), (H0, 0), rnn_xs(xs_b[:, b])) for b in range(2)])
    assert_close(out, expected)
    assert out[1]["y"].shape == (2, 5, 3)


def test_scan_vmap_batched_consts_and_carry_and_xs():
    Ws = rand(3, 3, 2)  # a closure over a value mapped along its last axis
    hs, xs_b = rand(2, 3), rand(5, 3, 2)
    out = remat.vmap(scan_loss, in_axes=(2, 0, 2))(Ws, hs, xs_b)
    expected = np.stack([unrolled_loss(Ws[..., b], hs[b], xs_b[..., b]) for b in range(2)])
    assert_close(out, expected, 1e-5)
    g = remat.vmap(remat.grad(scan_loss), in_axes=(2, 0, 2))(Ws, hs, xs_b)
    g_r = np.stack([remat.grad(unrolled_loss)(Ws[..., b], hs[b], xs_b[..., b])
                    for b in range(2)])
    assert_close(g, g_r, 1e-4)


def test_scan_vmap_carry_mapped_along_non_leading_axis_and_reverse():
    f = lambda c, xs: lax.scan(lambda c, x: (jnp.sin(c) * x, c * x), c, xs, reverse=True)
    fr = lambda c, xs: scan_ref(lambda c, x: (jnp.sin(c) * x, c * x), c, xs, reverse=True)
    cs, xs = rand(2, 3), rand(4, 2)  # carries mapped along axis 1
    out = remat.vmap(f, in_axes=(1, None))(cs, xs)
    assert_close(out, stack([fr(cs[:, b], xs) for b in range(3)]), 1e-5)
    assert_close(remat.jvp(f, (cs[:, 0], xs), (cs[:, 1], xs)),
                 remat.jvp(fr, (cs[:, 0], xs), (cs[:, 1], xs)), 1e-5)
    check_grads(f, (cs[:, 0], xs), order=2)


def test_grad_of_vmapped_scan():
    Ws = rand(2, 3, 3)

    def total(Ws, f):
        return jnp.sum(remat.vmap(f, in_axes=(0, None, None))(Ws, H0, XS))

    assert_close(remat.grad(total)(Ws, scan_loss), remat.grad(total)(Ws, unrolled_loss), 1e-4)


# --- cond / switch ----------------------------------------------------------------------------


def branch_fns():
    def t(x, y):
        return {"a": jnp.sin(x) * y["k"], "b": x[0]}

    def f(x, y):
        return {"a": x * y["k"] * y["k"], "b": jnp.sum(x)}

    return t, f


def test_cond_values_and_float_predicate():
    t, f = branch_fns()
    x, y = rand(3), {"k": np.float32(1.5)}
    assert_close(lax.cond(True, t, f, x, y), t(x, y))
    assert_close(lax.cond(False, t, f, x, y), f(x, y))
    assert_close(lax.cond(np.float32(0.5), t, f, x, y), t(x, y))
    assert_close(lax.cond(0.0, t, f, x, y), f(x, y))
    assert_close(lax.cond(np.int32(3), t, f, x, y), t(x, y))
    assert_close(lax.cond(-2, t, f, x, y), t(x, y))
    assert_close(lax.cond(np.uint8(0), t, f, x, y), f(x, y))
    # no operands: the branches close over outer values
    assert float(lax.cond(False, lambda: x[0], lambda: x[1])) == x[1]


def test_cond_older_spellings_as_in_jax():
    # optax's tests pass the operand as ``operand=``; JAX also keeps the five-argument form
    x = rand(3)
    for pred in (True, False):
        want = x + 1.0 if pred else x * 2.0
        assert_close(lax.cond(pred, lambda v: v + 1.0, lambda v: v * 2.0, operand=x), want)
        got = remat.jit(lambda p, v: lax.cond(p, lambda a: a + 1.0, lambda a: a * 2.0,
                                              operand=v))(pred, x)
        assert_close(got, want)
        assert_close(lax.cond(pred, x, lambda v: v + 1.0, 2 * x, lambda v: v * 2.0),
                     x + 1.0 if pred else 4.0 * x)
    with pytest.raises(TypeError, match="if 'operand' keyword is passed then no positional "
                                        "operands can be passed"):
        lax.cond(True, lambda v: v, lambda v: v, x, operand=x)
    with pytest.raises(TypeError, match="true_fun and false_fun arguments should be callable"):
        lax.cond(True, 1, lambda v: v, x)
    with pytest.raises(TypeError, match="cond predicate is None"):
        lax.cond(None, lambda v: v, lambda v: v, x)


def test_switch_three_branches_with_clamping():
    branches = [lambda x: x + 1.0, lambda x: x * 10.0, lambda x: -x]
    x = rand(2)
    for i, k in [(-5, 0), (0, 0), (1, 1), (2, 2), (7, 2)]:
        assert_close(lax.switch(i, branches, x), branches[k](x))
        assert_close(lax.switch(np.int32(i), branches, x), branches[k](x))
    with pytest.raises(ValueError, match="Empty branch"):
        lax.switch(0, [], x)


def test_cond_jvp_and_grad_match_each_branch():
    t, f = branch_fns()
    x, k = rand(3), np.float32(1.5)

    def run(p, x, k):
        out = lax.cond(p, t, f, x, {"k": k})
        return jnp.sum(out["a"]) + out["b"]

    for p, br in [(True, t), (False, f)]:
        def ref(x, k, br=br):
            return jnp.sum(br(x, {"k": k})["a"]) + br(x, {"k": k})["b"]

        tx, tk = rand(3), np.float32(0.3)
        assert_close(remat.jvp(lambda x, k, p=p: run(p, x, k), (x, k), (tx, tk)),
                     remat.jvp(ref, (x, k), (tx, tk)), 1e-5)
        assert_close(remat.grad(run, (1, 2))(p, x, k), remat.grad(ref, (0, 1))(x, k), 1e-5)


def test_cond_check_grads_second_order():
    def f(x, y):
        return lax.cond(jnp.sum(x) > 0, lambda a, b: jnp.sin(a) * b,
                        lambda a, b: jnp.cos(a * b), x, y)

    x, y = rand(3), rand(3)
    check_grads(f, (np.abs(x), y), order=2)
    check_grads(f, (-np.abs(x), y), order=2)


def test_cond_operand_used_in_one_branch_only_and_residual_padding():
    # branch 1 needs residuals of x, branch 0 of y: each branch's pads the others'
    def f(x, y):
        return lax.cond(x[0] > y[0], lambda x, y: jnp.sum(jnp.exp(x)),
                        lambda x, y: jnp.sum(jnp.sin(y) * y), x, y)

    x, y = rand(3), rand(3)
    gx, gy = remat.grad(f, (0, 1))(x, y)
    if x[0] > y[0]:
        assert_close((gx, gy), (np.exp(x), np.zeros(3, np.float32)), 1e-5)
    else:
        assert_close((gx, gy), (np.zeros(3, np.float32), np.cos(y) * y + np.sin(y)), 1e-5)
    gx, gy = remat.grad(f, (0, 1))(y, x)  # the other branch
    assert_close((gx, gy), remat.grad(lambda a, b: jnp.sum(jnp.exp(a)) if a[0] > b[0]
                                      else jnp.sum(jnp.sin(b) * b), (0, 1))(y, x), 1e-5)


def test_switch_grad_and_second_order():
    branches = [lambda x: jnp.sum(jnp.sin(x)), lambda x: jnp.sum(x * x * x),
                lambda x: jnp.prod(x)]
    x = rand(3)
    for i in range(-1, 4):
        k = min(max(i, 0), 2)
        assert_close(remat.grad(lambda x, i=i: lax.switch(i, branches, x))(x),
                     remat.grad(branches[k])(x), 1e-5)
    check_grads(lambda x: lax.switch(1, branches, x), (x,), order=2)


def test_cond_vmap_batched_predicate_selects_both_branches():
    xs = rand(6, 3)
    xs[:3] = np.abs(xs[:3])
    xs[3:] = -np.abs(xs[3:])

    def f(x):
        return lax.cond(x[0] > 0, lambda x: (jnp.sin(x), x[1]), lambda x: (x * 2.0, -x[1]), x)

    out = remat.vmap(f)(xs)
    assert_close(out, stack([f(x) for x in xs]))
    # under jit too, and the batched cond has become a select
    jaxpr = remat.make_jaxpr(remat.vmap(f))(xs)
    assert count_prims(jaxpr.jaxpr, "cond") == 0
    assert count_prims(jaxpr.jaxpr, "select_n") == 2
    assert_close(remat.jit(remat.vmap(f))(xs), out)
    # the gradient of a batched-predicate cond
    g = remat.grad(lambda xs: jnp.sum(remat.vmap(f)(xs)[0]))(xs)
    assert_close(g, np.stack([remat.grad(lambda x: jnp.sum(f(x)[0]))(x) for x in xs]), 1e-5)


def test_switch_vmap_batched_index_clamps():
    idx = np.array([-3, 0, 1, 2, 9], np.int32)
    x = rand(5, 2)
    branches = [lambda x: x + 1.0, lambda x: x * 10.0, lambda x: -x]
    out = remat.vmap(lambda i, x: lax.switch(i, branches, x))(idx, x)
    assert_close(out, np.stack([branches[min(max(i, 0), 2)](xi) for i, xi in zip(idx, x)]))


def test_cond_vmap_unbatched_predicate_and_branch_closing_over_vmapped_value():
    ks = rand(4)
    x = rand(3)

    def f(k, p):
        # the branch closes over k, which is being vmapped; the operand x is not
        return lax.cond(p, lambda x: x * k, lambda x: x + k, x)

    for p in (True, False):
        out = remat.vmap(lambda k, p=p: f(k, p))(ks)
        assert_close(out, np.stack([f(k, p) for k in ks]))
        jaxpr = remat.make_jaxpr(remat.vmap(lambda k, p=p: f(k, p)))(ks)
        assert count_prims(jaxpr.jaxpr, "cond") == 1  # an unbatched predicate stays a cond
    # batched operand, unbatched closure, in_axes=1
    xb = rand(3, 4)
    out = remat.vmap(lambda x: lax.cond(True, lambda x: x * ks[0], jnp.cos, x), in_axes=1)(xb)
    assert_close(out, (xb * ks[0]).T)


def test_cond_vmap_only_predicate_batched():
    x = rand(3)
    ps = np.array([True, False, True])
    f = lambda p: lax.cond(p, lambda x: jnp.sin(x), lambda x: x * 3.0, x)
    assert_close(remat.vmap(f)(ps), np.stack([f(p) for p in ps]))


def test_vmap_of_grad_of_cond_with_batched_predicate_and_int_operand():
    def f(x):
        return lax.cond(x[0] > 0, lambda x: jnp.sum(jnp.sin(x)), lambda x: jnp.sum(x * x), x)

    def fr(x):
        return jnp.sum(jnp.sin(x)) if x[0] > 0 else jnp.sum(x * x)

    xs = rand(6, 3)
    g_r = np.stack([remat.grad(fr)(x) for x in xs])
    assert_close(remat.vmap(remat.grad(f))(xs), g_r, 1e-5)
    assert_close(remat.jit(remat.vmap(remat.grad(f)))(xs), g_r, 1e-5)

    def h(x, n):
        return lax.cond(n > 2, lambda x, n: x * n.astype(np.float32), lambda x, n: jnp.sin(x),
                        x, n)

    x = np.float32(0.3)
    assert_close(remat.grad(h)(x, np.int32(5)), np.float32(5))
    assert_close(remat.vmap(remat.grad(h), (None, 0))(x, np.array([1, 5], np.int32)),
                 np.array([np.cos(x), 5.0], np.float32), 1e-6)


def test_cond_batched_predicate_under_jvp_either_order():
    def f(x):
        return lax.cond(x[0] > 0, lambda x: jnp.sin(x) * x, lambda x: x * 3.0, x)

    def fr(x):
        return jnp.sin(x) * x if x[0] > 0 else x * 3.0

    xs, ts = rand(5, 3), rand(5, 3)
    expected = stack([remat.jvp(fr, (x,), (t,)) for x, t in zip(xs, ts)])
    assert_close(remat.vmap(lambda x, t: remat.jvp(f, (x,), (t,)))(xs, ts), expected, 1e-5)
    assert_close(remat.jvp(remat.vmap(f), (xs,), (ts,)), expected, 1e-5)


# --- while_loop / fori_loop -------------------------------------------------------------------


def newton_sqrt(a):
    def cond_fun(s):
        x, i = s
        return (jnp.abs(x * x - a) > 1e-4) & (i < 50)

    def body_fun(s):
        x, i = s
        return (x - (x * x - a) / (2.0 * x), i + 1)

    return cond_fun, body_fun


def test_while_loop_values_pytree():
    c, b = newton_sqrt(np.float32(2.0))
    x, i = lax.while_loop(c, b, (np.float32(1.0), 0))
    xr, ir = while_ref(c, b, (np.float32(1.0), 0))
    assert_close((x, i), (xr, ir))
    assert abs(float(x) - np.sqrt(2.0)) < 1e-4 and int(i) == int(ir) > 1
    # never-entered loop
    out = lax.while_loop(lambda s: s["n"] < 0, lambda s: {"n": s["n"] + 1}, {"n": 3})
    assert int(out["n"]) == 3


def test_while_cond_fun_must_return_bool_scalar():
    with pytest.raises(TypeError, match="boolean scalar"):
        lax.while_loop(lambda x: x, lambda x: x, np.float32(1))
    with pytest.raises(TypeError, match="boolean scalar"):
        lax.while_loop(lambda x: x > 0, lambda x: x, np.ones(2, np.float32))


def test_while_jvp_forward_mode_works_reverse_mode_raises():
    def f(a, x0):
        def body(s):
            x, i = s
            return jnp.sin(x) * a + x, i + 1

        return lax.while_loop(lambda s: s[1] < 5, body, (x0, 0))[0]

    def fr(a, x0):
        x = x0
        for _ in range(5):
            x = jnp.sin(x) * a + x
        return x

    args, tangents = (np.float32(0.3), rand(3)), (np.float32(0.7), rand(3))
    assert_close(remat.jvp(f, args, tangents), remat.jvp(fr, args, tangents), 1e-5)
    check_grads(f, args, order=2, modes=("fwd",))
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for "
                                         "lax.while_loop"):
        remat.grad(lambda a, x: jnp.sum(f(a, x)))(*args)


def test_while_loop_grad_wrt_value_not_in_loop_is_fine():
    # the loop reads nothing being differentiated: grad never transposes it
    def f(x):
        n = lax.while_loop(lambda i: i < 3, lambda i: i + 1, 0)
        return x * n.astype(np.float32)

    assert float(remat.grad(f)(np.float32(2.0))) == 3.0


def test_fori_loop_static_bounds_values_and_reverse_mode():
    def f(x):
        return lax.fori_loop(1, 5, lambda i, x: jnp.sin(x) * i.astype(np.float32) + x, x)

    def fr(x):
        for i in range(1, 5):
            x = jnp.sin(x) * float(i) + x
        return x

    x = rand(3)
    assert_close(f(x), fr(x))
    assert count_prims(remat.make_jaxpr(f)(x).jaxpr, "scan") == 1
    assert_close(remat.grad(lambda x: jnp.sum(f(x)))(x),
                 remat.grad(lambda x: jnp.sum(fr(x)))(x), 1e-4)
    check_grads(f, (x * 0.3,), order=2)
    # empty and reversed ranges run no iteration
    assert_close(lax.fori_loop(3, 3, lambda i, x: x + 1.0, x), x)
    assert_close(lax.fori_loop(5, 2, lambda i, x: x + 1.0, x), x)


def test_fori_loop_traced_bounds():
    body = lambda i, x: x * 2.0 + i.astype(np.float32)
    f = remat.jit(lambda n, x: lax.fori_loop(0, n, body, x))
    x = rand(2)
    ref = x
    for i in range(4):
        ref = ref * 2.0 + i
    assert_close(f(4, x), ref)
    assert count_prims(remat.make_jaxpr(lambda n, x: lax.fori_loop(0, n, body, x))(4, x).jaxpr,
                       "while") == 1
    # forward mode through traced bounds works; reverse mode tells the user what to do
    assert_close(remat.jvp(lambda x: f(4, x), (x,), (np.ones(2, np.float32),))[1],
                 np.full(2, 16.0, np.float32))
    with pytest.raises(ValueError, match="Try using lax.scan, or using fori_loop with "
                                         "static start/stop"):
        remat.grad(lambda x: jnp.sum(f(4, x)))(x)


def test_while_linearize_matches_unrolled_jvp():
    def f(x):
        return lax.while_loop(lambda s: s[1] < 3, lambda s: (jnp.sin(s[0]) * 2.0, s[1] + 1),
                              (x, 0))[0]

    def fr(x):
        for _ in range(3):
            x = jnp.sin(x) * 2.0
        return x

    x, t = rand(3), rand(3)
    out, f_jvp = remat.linearize(f, x)
    assert_close(out, fr(x))
    assert_close(f_jvp(t), remat.jvp(fr, (x,), (t,))[1], 1e-5)


def test_while_vmap_batched_predicate_elements_finish_at_different_times():
    a = np.array([2.0, 9.0, 0.25, 100.0], np.float32)

    def sqrt(a):
        c, b = newton_sqrt(a)
        return lax.while_loop(c, b, (jnp.maximum(a, 1.0), 0))

    x, i = remat.vmap(sqrt)(a)
    refs = [while_ref(*newton_sqrt(ai), (np.float32(max(ai, 1.0)), 0)) for ai in a]
    assert_close((x, i), stack(refs))
    assert len(set(np.asarray(i).tolist())) > 1  # different trip counts
    np.testing.assert_allclose(x, np.sqrt(a), rtol=1e-4)
    # under jit, and forward-mode through the batched loop
    assert_close(remat.jit(remat.vmap(sqrt))(a), (x, i))
    _, t = remat.jvp(remat.vmap(lambda a: sqrt(a)[0]), (a,), (np.ones(4, np.float32),))
    np.testing.assert_allclose(t, 0.5 / np.sqrt(a), rtol=1e-3)


def test_while_vmap_batched_carry_unbatched_predicate():
    xs = rand(4, 3)
    f = lambda x: lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, jnp.sin(s[1])), (0, x))
    n, y = remat.vmap(f)(xs)
    assert_close((n, y), stack([while_ref(lambda s: s[0] < 3,
                                          lambda s: (s[0] + 1, jnp.sin(s[1])), (0, x))
                                for x in xs]))
    # the counter stays unbatched inside, so the loop is not turned into a select-loop
    jaxpr = remat.make_jaxpr(remat.vmap(f))(xs)
    assert count_prims(jaxpr.jaxpr, "select_n") == 0


def test_fori_loop_vmap_batched_upper_bound():
    ns = np.array([0, 1, 3, 5], np.int32)
    f = remat.vmap(lambda n, x: lax.fori_loop(0, n, lambda i, x: x * 2.0 + 1.0, x))
    out = f(ns, np.ones(4, np.float32))
    np.testing.assert_array_equal(out, [1.0, 3.0, 15.0, 63.0])


def test_while_loop_closure_over_outer_tracers():
    # cond and body close over jvp- and vmap-traced values
    def f(limit, step, x):
        return lax.while_loop(lambda s: s[0] < limit,
                              lambda s: (s[0] + step, s[1] * step), (np.float32(0), x))[1]

    limits = np.array([1.0, 2.5, 4.0], np.float32)
    out = remat.vmap(f, in_axes=(0, None, None))(limits, np.float32(1.0), np.float32(3.0))
    np.testing.assert_array_equal(out, [3.0, 3.0, 3.0])
    out, t = remat.jvp(lambda s: f(np.float32(3.0), np.float32(1.5), s), (np.float32(2.0),),
                       (np.float32(1.0),))
    assert float(out) == 2.0 * 1.5 ** 2 and float(t) == 1.5 ** 2
    # the body closes over a vmapped step: the value carry becomes batched, the counter and
    # the predicate stay unbatched
    steps = np.array([1.5, 2.0], np.float32)
    out = remat.vmap(f, in_axes=(None, 0, None))(np.float32(3.0), steps, np.float32(1.0))
    np.testing.assert_allclose(out, [1.5 ** 2, 2.0 ** 2])
    a = np.array([2.0, 9.0, 0.25], np.float32)

    def sqrt(a):
        c, b = newton_sqrt(a)
        return lax.while_loop(c, b, (jnp.maximum(a, 1.0), 0))[0]

    t = remat.vmap(lambda a: remat.jvp(sqrt, (a,), (np.float32(1),))[1])(a)
    np.testing.assert_allclose(t, 0.5 / np.sqrt(a), rtol=1e-3)


# --- jit --------------------------------------------------------------------------------------


def test_jit_equals_eager_and_composes_with_grad_and_vmap():
    j = remat.jit(scan_loss)
    assert_close(j(W, H0, XS), scan_loss(W, H0, XS), 1e-5)
    g_r = remat.grad(unrolled_loss)(W, H0, XS)
    assert_close(remat.grad(j)(W, H0, XS), g_r, 1e-4)
    assert_close(remat.jit(remat.grad(scan_loss))(W, H0, XS), g_r, 1e-4)
    Ws = rand(2, 3, 3)
    expected = np.stack([unrolled_loss(w, H0, XS) for w in Ws])
    assert_close(remat.vmap(j, in_axes=(0, None, None))(Ws, H0, XS), expected, 1e-5)
    assert_close(remat.jit(remat.vmap(scan_loss, in_axes=(0, None, None)))(Ws, H0, XS),
                 expected, 1e-5)


def test_jit_body_closing_over_jit_tracer():
    @remat.jit
    def f(w, xs):
        return lax.scan(lambda c, x: (c * w + x, c), np.float32(0), xs)

    fr = lambda w, xs: scan_ref(lambda c, x: (c * w + x, c), np.float32(0), xs)
    w, xs = np.float32(0.5), rand(4)
    assert_close(f(w, xs), fr(w, xs))
    assert_close(remat.grad(lambda w: f(w, xs)[0])(w), remat.grad(lambda w: fr(w, xs)[0])(w))


def test_jit_prunes_unused_scan_outputs_with_computed_inputs():
    # under jit, DCE rewrites the scan; the equations computing its remaining inputs stay
    def body(c, x):
        u, v = c
        return (u + jnp.sin(x), v * jnp.exp(x)), (u * x, jnp.cos(v))

    def g(x):
        a, b, c = jnp.sin(x[0]), jnp.cos(x[0]), jnp.exp(x)
        return lax.scan(body, (a, b), c)[1][0]

    x = rand(4)
    assert_close(remat.jit(g)(x), g(x))
    assert_close(remat.jit(remat.grad(lambda x: jnp.sum(g(x))))(x),
                 remat.grad(lambda x: jnp.sum(g(x)))(x), 1e-5)


def test_jit_cond_and_while():
    t, f = branch_fns()
    x, y = rand(3), {"k": np.float32(0.5)}
    jc = remat.jit(lambda p, x, y: lax.cond(p, t, f, x, y))
    assert_close(jc(True, x, y), t(x, y))
    assert_close(jc(False, x, y), f(x, y))
    c, b = newton_sqrt(np.float32(3.0))
    jw = remat.jit(lambda x: lax.while_loop(c, b, (x, 0)))
    assert_close(jw(np.float32(1.0)), while_ref(c, b, (np.float32(1.0), 0)))
    g = remat.grad(lambda x, k: jnp.sum(jc(x[0] > 0, x, {"k": k})["a"]), (0, 1))(x, y["k"])
    br = t if x[0] > 0 else f
    assert_close(g, remat.grad(lambda x, k: jnp.sum(br(x, {"k": k})["a"]), (0, 1))(x, y["k"]),
                 1e-5)


# --- nesting ----------------------------------------------------------------------------------


def nested(scan, cond):
    """scan over xs whose body runs, under a cond, an inner scan (scan in cond in scan)."""

    def f(w, xs):
        def inner(c, z):
            return jnp.sin(c * w + z), c * z

        def body(c, x):
            def heavy(c):
                c2, ys = scan(inner, c, x)
                return c2 + jnp.sum(ys)

            c = cond(jnp.sum(x) > 0, heavy, lambda c: jnp.cos(c) * w, c)
            return c, c * c

        c, ys = scan(body, np.float32(0.5), xs)
        return c + jnp.sum(ys)

    return f


def py_cond(p, t, f, *ops):
    return t(*ops) if bool(p) else f(*ops)


def test_nested_scan_cond_scan_values_grad_jit_vmap():
    f, fr = nested(lax.scan, lax.cond), nested(scan_ref, py_cond)
    w = np.float32(0.8)
    xs = rand(4, 3) * 0.5
    xs[1] = -np.abs(xs[1])
    xs[2] = np.abs(xs[2])
    assert_close(f(w, xs), fr(w, xs), 1e-5)
    g, g_r = remat.grad(f, (0, 1))(w, xs), remat.grad(fr, (0, 1))(w, xs)
    assert_close(g, g_r, 1e-4)
    assert_close(remat.jit(f)(w, xs), fr(w, xs), 1e-5)
    assert_close(remat.jit(remat.grad(f, (0, 1)))(w, xs), g_r, 1e-4)
    ws = np.array([0.3, 0.8, 1.2], np.float32)
    assert_close(remat.vmap(f, in_axes=(0, None))(ws, xs),
                 np.stack([fr(wi, xs) for wi in ws]), 1e-5)
    # batched xs make the outer cond's predicate batched
    xb = rand(2, 4, 3) * 0.5
    xb[0, 0], xb[1, 0] = np.abs(xb[0, 0]), -np.abs(xb[1, 0])
    assert_close(remat.vmap(f, in_axes=(None, 0))(w, xb),
                 np.stack([fr(w, x) for x in xb]), 1e-5)
    assert_close(remat.vmap(remat.grad(f), in_axes=(None, 0))(w, xb),
                 np.stack([remat.grad(fr)(w, x) for x in xb]), 1e-4)
    jaxpr = remat.make_jaxpr(f)(w, xs).jaxpr
    assert count_prims(jaxpr, "scan") == 2 and count_prims(jaxpr, "cond") == 1


def test_scan_of_scan_and_cond_in_scan_second_order():
    def f(w, c0, xs):
        def outer(c, row):
            c, _ = lax.scan(lambda c, z: (jnp.tanh(c * w + z), None), c, row)
            c = lax.cond(c > 0, lambda c: c * w, lambda c: jnp.sin(c), c)
            return c, c

        return lax.scan(outer, c0, xs)

    def fr(w, c0, xs):
        def outer(c, row):
            for z in row:
                c = jnp.tanh(c * w + z)
            c = c * w if c > 0 else jnp.sin(c)
            return c, c

        return scan_ref(outer, c0, xs)

    args = (np.float32(0.9), np.float32(0.1), rand(3, 2))
    assert_close(f(*args), fr(*args), 1e-5)
    assert_close(remat.jacrev(f, (0, 1, 2))(*args), remat.jacrev(fr, (0, 1, 2))(*args), 1e-4)
    check_grads(f, args, order=2)


def test_while_in_scan_and_cond_in_while_under_vmap_jit_jvp():
    def f(a, xs):
        def body(c, x):
            def wb(s):
                v, i = s
                v = lax.cond(v > 1.0, lambda v: v * 0.5, lambda v: v + x, v)
                return v, i + 1

            v, _ = lax.while_loop(lambda s: s[1] < 3, wb, (c, 0))
            return v, v * a

        return lax.scan(body, a, xs)

    def fr(a, xs):
        c, ys = a, []
        for x in xs:
            for _ in range(3):
                c = c * 0.5 if c > 1.0 else c + x
            ys.append(c * a)
        return c, jnp.stack(ys)

    a, xs = np.float32(0.7), np.abs(rand(4))
    assert_close(f(a, xs), fr(a, xs), 1e-5)
    As = np.array([0.2, 0.7, 1.5], np.float32)
    assert_close(remat.vmap(f, (0, None))(As, xs), stack([fr(ai, xs) for ai in As]), 1e-5)
    xb = np.abs(rand(2, 4))
    assert_close(remat.jit(remat.vmap(f, (None, 0)))(a, xb), stack([fr(a, x) for x in xb]), 1e-5)
    assert_close(remat.jvp(f, (a, xs), (np.float32(1), xs)),
                 remat.jvp(fr, (a, xs), (np.float32(1), xs)), 1e-4)


def test_scan_in_while_with_batched_predicate_and_traced_fori_in_scan():
    def f(x):
        def body(s):
            v, i = s
            v, _ = lax.scan(lambda c, _: (jnp.sin(c) + 0.5, None), v, None, length=2)
            return v, i + 1

        return lax.while_loop(lambda s: (s[0] < 1.3) & (s[1] < 10), body, (x, 0))

    def fr(x):
        v, i = x, 0
        while v < 1.3 and i < 10:
            for _ in range(2):
                v = jnp.sin(v) + 0.5
            i += 1
        return v, i

    xs = np.array([-1.0, 0.5, 3.0, 1.2], np.float32)
    expected = stack([fr(x) for x in xs])
    assert_close(remat.vmap(f)(xs), expected, 1e-6)
    assert_close(remat.jit(remat.vmap(f))(xs), expected, 1e-6)
    _, t = remat.jvp(remat.vmap(lambda x: f(x)[0]), (xs,), (np.ones(4, np.float32),))
    assert_close(t, np.stack([remat.jvp(lambda x: fr(x)[0], (x,), (np.float32(1),))[1]
                              for x in xs]), 1e-5)

    def g(n, x):
        return lax.scan(lambda c, k: (lax.fori_loop(0, n + k, lambda i, v: v * 1.5, c), c),
                        x, np.arange(3, dtype=np.int32))

    def gr(n, x):
        c, ys = x, []
        for k in range(3):
            ys.append(c)
            c = c * 1.5 ** (int(n) + k)
        return c, jnp.stack(ys)

    ns, xs = np.array([0, 2], np.int32), rand(2)
    assert_close(remat.vmap(g)(ns, xs), stack([gr(n, x) for n, x in zip(ns, xs)]), 1e-5)


def test_vmap_of_vmap_of_scan_and_its_gradient():
    f = lambda c, xs: lax.scan(lambda c, x: (c * x + 1.0, jnp.sin(c)), c, xs)
    fr = lambda c, xs: scan_ref(lambda c, x: (c * x + 1.0, jnp.sin(c)), c, xs)
    xs, cs = rand(5, 2, 3), rand(3, 2)  # xs: scan axis 0, outer batch axis 1, inner axis 2
    ff = remat.vmap(remat.vmap(f, in_axes=(0, 1)), in_axes=(1, 1))
    expected = stack([stack([fr(cs[j, i], xs[:, i, j]) for j in range(3)]) for i in range(2)])
    assert_close(ff(cs, xs), expected, 1e-5)
    g = remat.grad(lambda cs, xs: jnp.sum(ff(cs, xs)[1]), (0, 1))(cs, xs)
    g_r = remat.grad(lambda cs, xs: sum(jnp.sum(fr(cs[j, i], xs[:, i, j])[1])
                                        for i in range(2) for j in range(3)), (0, 1))(cs, xs)
    assert_close(g, g_r, 1e-4)


# --- errors -----------------------------------------------------------------------------------


def test_cond_branch_output_mismatch_errors():
    x = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="cond branches must have equal output types") as e:
        lax.cond(True, lambda x: x[:2], lambda x: x, x)
    assert ("The output of true_fun has type float32[2] but the corresponding output of "
            "false_fun has type float32[3], so the shapes do not match") in str(e.value)
    with pytest.raises(TypeError, match="so the dtypes do not match") as e:
        lax.cond(True, lambda x: {"a": x, "b": x.astype(np.int32)},
                 lambda x: {"a": x, "b": x}, x)
    assert "true_fun at path ['b'] has type int32[3]" in str(e.value)
    assert "false_fun has type float32[3]" in str(e.value)
    with pytest.raises(TypeError, match="cond branch outputs must have the same pytree "
                                        "structure") as e:
        lax.cond(True, lambda x: (x, x), lambda x: x, x)
    assert "true_fun output is" in str(e.value) and "false_fun output is" in str(e.value)
    with pytest.raises(TypeError, match="switch branches must have equal output types") as e:
        lax.switch(1, [lambda x: x, lambda x: x, lambda x: x[0]], x)
    assert "output of branch 0 has type float32[3]" in str(e.value)
    assert "output of branch2 has type float32[]" in str(e.value)  # JAX's "branch{i}"
    with pytest.raises(TypeError, match="Pred must be a scalar"):
        lax.cond(np.array([True, False]), lambda x: x, lambda x: x, x)
    with pytest.raises(TypeError, match="Index type must be an integer"):
        lax.switch(1.5, [lambda x: x, lambda x: x], x)
    with pytest.raises(TypeError, match="Index type must be an integer"):
        lax.switch(True, [lambda x: x, lambda x: x], x)


def test_scan_carry_mismatch_errors():
    x = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="scan body function carry input and carry output "
                                        "must have equal types") as e:
        lax.scan(lambda c, _: (c[:2], None), x, None, length=2)
    assert ("The input carry c has type float32[3] but the corresponding output carry "
            "component has type float32[2], so the shapes do not match") in str(e.value)
    with pytest.raises(TypeError, match="the dtypes do not match") as e:
        lax.scan(lambda carry, _: ((carry[0], carry[1].astype(np.int32)), None), (x, x), None,
                 length=2)
    assert "The input carry component carry[1] has type float32[3]" in str(e.value)
    assert "output carry component has type int32[3]" in str(e.value)
    with pytest.raises(TypeError, match="must have the same pytree structure"):
        lax.scan(lambda c, _: ((c, c), None), x, None, length=2)
    with pytest.raises(TypeError, match="must be a pair"):
        lax.scan(lambda c, _: c, x, None, length=2)
    with pytest.raises(TypeError, match="while_loop body function carry input and carry "
                                        "output must have equal types"):
        lax.while_loop(lambda c: True, lambda c: c[:2], x)
    # a weakly typed carry joining a strong float32 output is not a mismatch
    assert lax.scan(lambda c, x: (c * x, None), 1.0, x)[0].dtype == np.float32


# --- the staged jaxprs ------------------------------------------------------------------------


def test_jaxpr_of_scan_and_cond_is_one_primitive_not_unrolled():
    f = lambda xs: lax.scan(lambda c, x: (c + jnp.sin(x), c * x), np.float32(0), xs)
    jaxpr = remat.make_jaxpr(f)(np.ones(100, np.float32))
    text = str(jaxpr)
    assert len(jaxpr.jaxpr.eqns) == 1 and jaxpr.jaxpr.eqns[0].primitive.name == "scan"
    assert "scan[" in text and "length=100" in text and "num_carry=1" in text
    assert text.count("sin") == 1
    g = lambda p, x: lax.cond(p, jnp.sin, jnp.cos, x)
    text = str(remat.make_jaxpr(g)(True, np.float32(1)))
    assert "cond[" in text and "branches=" in text
    assert text.count("sin") == 1 and text.count("cos") == 1
    text = str(remat.make_jaxpr(lambda x: lax.while_loop(lambda x: x < 9.0,
                                                         lambda x: x * 2.0, x))(1.0))
    assert "while[" in text and "body_jaxpr=" in text and "cond_jaxpr=" in text


def test_jaxpr_of_grad_of_scan_has_forward_and_backward_scans():
    jaxpr = remat.make_jaxpr(remat.grad(scan_loss))(W, H0, XS).jaxpr
    scans = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
    assert len(scans) == 2
    assert [e.params["reverse"] for e in scans] == [False, True]
    assert all(e.params["length"] == 5 for e in scans)


# --- residuals --------------------------------------------------------------------------------


def test_vjp_of_scan_stacks_per_iteration_residuals_and_not_invariant_ones():
    L = 7
    Wm, h0, xs = rand(4, 4), rand(4), rand(L, 4)

    def body(h, x):
        return jnp.tanh(Wm @ h + x), None

    out, pullback = remat.vjp(lambda h0, xs: lax.scan(body, h0, xs)[0], h0, xs)
    consts = [np.asarray(c) for c in pullback.linear.consts]
    shapes = [c.shape for c in consts]
    # per-iteration residuals (e.g. tanh's output) are stacked along a leading dim L
    assert any(s == (L, 4) for s in shapes), shapes
    # the closed-over matrix is saved once, not once per iteration
    assert sum(c.shape == (4, 4) and np.array_equal(c, Wm) for c in consts) == 1, shapes
    assert not any(s == (L, 4, 4) for s in shapes), shapes
    assert sum(c.size for c in consts) <= Wm.size + 2 * L * 4, shapes
    # and the pullback is right
    ct = rand(4)
    out_r, pb_r = remat.vjp(lambda h0, xs: scan_ref(body, h0, xs)[0], h0, xs)
    assert_close(out, out_r, 1e-5)
    assert_close(pullback(ct), pb_r(ct), 1e-5)


def test_residuals_computed_from_loop_invariants_are_hoisted_out_of_the_scan():
    L = 6
    Wm, h0, xs = rand(4, 4), rand(4), rand(L, 4)

    def body(Wm):
        return lambda h, x: (jnp.sin(jnp.tanh(Wm) @ h + x), None)

    _, pullback = remat.vjp(lambda Wm, h0, xs: lax.scan(body(Wm), h0, xs)[0], Wm, h0, xs)
    shapes = sorted(np.shape(c) for c in pullback.linear.consts)
    # tanh(W) and its derivative once each; cos(.) and the carries stacked per iteration
    assert shapes == [(4, 4), (4, 4), (L, 4), (L, 4)], shapes
    consts = [np.asarray(c) for c in pullback.linear.consts]
    assert any(np.allclose(c, np.tanh(Wm), atol=1e-6) for c in consts if c.shape == (4, 4))
    ct = rand(4)
    _, pb_r = remat.vjp(lambda Wm, h0, xs: scan_ref(body(Wm), h0, xs)[0], Wm, h0, xs)
    assert_close(pullback(ct), pb_r(ct), 1e-5)


# --- dead-code elimination --------------------------------------------------------------------


def test_dce_removes_unused_scan_carry_and_ys():
    def f(a, b, xs):
        def body(c, x):
            u, v = c
            return (u + jnp.sin(x), v * jnp.exp(x)), (u * x, jnp.cos(v))

        return lax.scan(body, (a, b), xs)

    a, b, xs = np.float32(1), np.float32(2), rand(4)
    closed = remat.make_jaxpr(f)(a, b, xs)
    eqn = closed.jaxpr.eqns[0]
    n_body = len(eqn.params["jaxpr"].jaxpr.eqns)
    # keep only the first ys output: it reads u, which needs only the u carry
    new, used = pe.dce_jaxpr(closed.jaxpr, [False, False, True, False])
    (scan_eqn,) = new.eqns
    body = scan_eqn.params["jaxpr"].jaxpr
    names = [e.primitive.name for e in body.eqns]
    assert len(body.eqns) < n_body
    assert "exp" not in names and "cos" not in names and "sin" in names
    assert scan_eqn.params["num_carry"] == 1 and len(scan_eqn.outvars) == 2
    assert used == [True, False, True]
    out = core.eval_jaxpr(new, closed.consts, a, b, xs)
    assert_close(out[0], f(a, b, xs)[1][0])
    # a used carry keeps alive the carries it reads (a fixpoint over iterations)
    g = lambda a, b, xs: lax.scan(lambda c, x: ((c[0] + c[1], c[1] * 2.0), c[0] * x), (a, b),
                                  xs)
    closed_g = remat.make_jaxpr(g)(a, b, xs)
    new_g, used_g = pe.dce_jaxpr(closed_g.jaxpr, [False, False, True])
    assert used_g == [True, True, True] and new_g.eqns[0].params["num_carry"] == 2
    new_g, used_g = pe.dce_jaxpr(closed_g.jaxpr, [False, True, False])
    assert used_g == [False, True, False] and new_g.eqns[0].params["num_carry"] == 1
    assert not new_g.eqns[0].params["jaxpr"].jaxpr.eqns[0].primitive.name == "add"
    # nothing used: the scan disappears
    new, used = pe.dce_jaxpr(closed.jaxpr, [False] * 4)
    assert not new.eqns and used == [False, False, False]


def test_dce_of_cond_prunes_branches_and_operands():
    def f(p, x, y):
        return lax.cond(p, lambda x, y: (jnp.sin(x), jnp.exp(y)),
                        lambda x, y: (jnp.cos(x), y * y), x, y)

    x, y = np.float32(0.3), np.float32(0.4)
    closed = remat.make_jaxpr(f)(True, x, y)
    new, used = pe.dce_jaxpr(closed.jaxpr, [True, False])
    cond_eqn = [e for e in new.eqns if e.primitive.name == "cond"][0]
    for br in cond_eqn.params["branches"]:
        names = [e.primitive.name for e in br.jaxpr.eqns]
        assert "exp" not in names and "mul" not in names and len(br.jaxpr.invars) == 1
    assert used == [True, True, False]
    for p in (True, False):
        assert_close(core.eval_jaxpr(new, closed.consts, p, x, y)[0], f(p, x, y)[0])


def test_dce_and_partial_eval_of_bodies_with_consts():
    """Derived bodies may carry consts of their own; DCE and partial eval keep them aligned."""
    from remat.lax.control_flow import cond_p, scan_p

    A, B = np.arange(3.0, dtype=np.float32), np.full(3, 2.0, np.float32)
    av = core.ShapedArray((3,), np.float32)
    body = pe.trace_to_jaxpr(lambda c, x: [lax.add(c, A), lax.mul(x, B)], [av, av])
    assert len(body.consts) == 2

    def f(c, xs):
        return scan_p.bind(c, xs, jaxpr=body, num_consts=0, num_carry=1, length=2,
                           reverse=False, unroll=1)

    c, xs = np.ones(3, np.float32), rand(2, 3)
    closed = remat.make_jaxpr(f)(c, xs)
    for k in range(2):
        used = [i == k for i in range(2)]
        new, _ = pe.dce_jaxpr(closed.jaxpr, used)
        assert_close(core.eval_jaxpr(new, closed.consts, c, xs)[0], f(c, xs)[k])
    g = remat.grad(lambda xs: jnp.sum(f(c, xs)[1]))(xs)
    assert_close(g, np.broadcast_to(B, (2, 3)))
    br = [pe.trace_to_jaxpr(lambda x: [lax.add(x, A), lax.mul(x, B)], [av]),
          pe.trace_to_jaxpr(lambda x: [lax.mul(x, A), lax.sub(x, B)], [av])]
    g = lambda i, x: cond_p.bind(i, x, branches=tuple(br))
    closed = remat.make_jaxpr(g)(np.int32(1), c)
    new, _ = pe.dce_jaxpr(closed.jaxpr, [False, True])
    assert_close(core.eval_jaxpr(new, closed.consts, np.int32(1), c)[0], c - B)
    assert_close(remat.grad(lambda x: jnp.sum(g(np.int32(1), x)[0]))(c), A)


# --- against JAX ------------------------------------------------------------------------------


def _both(build):
    """``build(lax, jnp)`` evaluated with remat and with JAX."""
    jax = pytest.importorskip("jax")
    return build(remat, lax, jnp), build(jax, jax.lax, jax.numpy)


def test_against_jax_scan_values_grads_vmap():
    def build(api, lx, np_):
        def loss(W, h0, xs):
            def body(carry, x):
                h, n = carry
                h = np_.tanh(W @ h + x["x"]) * x["s"]
                return (h, n + 1), {"y": np_.sin(h), "n": n}

            (h, n), ys = lx.scan(body, (h0, 0), rnn_xs(xs), reverse=True)
            return np_.sum(h * h) + np_.sum(ys["y"] * ys["y"] * 0.5)

        Ws = np.stack([W, W * 0.5])
        return (loss(W, H0, XS), api.grad(loss, (0, 1, 2))(W, H0, XS),
                api.vmap(api.grad(loss), (0, None, None))(Ws, H0, XS),
                api.jit(loss)(W, H0, XS))

    mine, theirs = _both(build)
    assert_close(mine, tuple(tree_map(np.asarray, theirs)), 1e-4)


def test_against_jax_cond_switch_while_fori():
    def build(api, lx, np_):
        x = np.linspace(-1.0, 1.0, 4).astype(np.float32)
        branches = [lambda x: np_.sin(x), lambda x: x * x, lambda x: -x]
        c = lambda x: lx.cond(x[0] > 0, lambda x: np_.sum(np_.exp(x)), lambda x: np_.sum(x * x),
                              x)
        sw = [lx.switch(i, branches, x) for i in (-2, 1, 5)]
        grads = [api.grad(c)(x), api.grad(c)(-x)]
        vm = api.vmap(c)(np.stack([x, -x, x[::-1]]))

        def sqrt(a):
            return lx.while_loop(lambda s: (np_.abs(s[0] * s[0] - a) > 1e-4) & (s[1] < 50),
                                 lambda s: (s[0] - (s[0] * s[0] - a) / (2.0 * s[0]), s[1] + 1),
                                 (np_.maximum(a, 1.0), 0))

        w = api.vmap(sqrt)(np.array([2.0, 9.0, 0.25], np.float32))
        fl = api.grad(lambda x: np_.sum(lx.fori_loop(1, 4, lambda i, x: np_.sin(x) * i, x)))(x)
        return sw, grads, vm, w, fl

    mine, theirs = _both(build)
    assert_close(mine, tree_map(np.asarray, theirs), 1e-4)


def test_against_jax_error_types():
    jax = pytest.importorskip("jax")
    x = np.ones(3, np.float32)
    cases = [
        lambda lx: lx.cond(True, lambda x: x[:2], lambda x: x, x),
        lambda lx: lx.cond(True, lambda x: (x, x), lambda x: x, x),
        lambda lx: lx.scan(lambda c, _: (c[:2], None), x, None, length=2),
        lambda lx: lx.scan(lambda c, _: (c.astype(np.int32), None), x, None, length=2),
        lambda lx: lx.switch(1.5, [lambda x: x, lambda x: x], x),
    ]
    for case in cases:
        with pytest.raises(TypeError) as theirs:
            case(jax.lax)
        with pytest.raises(TypeError) as mine:
            case(lax)
        first = str(theirs.value).split(",")[0].split(" but")[0]
        assert str(mine.value).startswith(first), (str(mine.value), first)

    def traced_bounds(api, lx):
        f = api.jit(lambda n, x: lx.fori_loop(0, n, lambda i, x: x * 2.0, x))
        return api.grad(lambda x: f(3, x))(np.float32(1))

    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
        traced_bounds(jax, jax.lax)
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
        traced_bounds(remat, lax)


def test_linearize_of_nested_while_loops_with_traced_trip_counts():
    """The outer loop's partial evaluation splits off its known carries; dead-code elimination
    must split the inner loop by carry too (it kept the whole inner loop, and the known loop
    read a tangent carry it did not have: KeyError)."""
    def loop(n, body, x):
        return lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, body(s[1])), (0, x))[1]

    def f(x, n):
        return loop(n, lambda c: loop(n, lambda c: jnp.sin(c) * 1.5, c), x)

    x, n = np.linspace(0.5, 1.0, 3).astype(np.float32), np.int32(2)
    want = x
    for _ in range(4):
        want = np.sin(want) * 1.5
    dx = np.ones(3, np.float32)
    y, f_lin = remat.linearize(lambda x: f(x, n), x)
    _, jvp_out = remat.jvp(lambda x: f(x, n), (x,), (dx,))
    np.testing.assert_allclose(y, want, rtol=1e-6)
    np.testing.assert_allclose(f_lin(dx), jvp_out, rtol=1e-6)
    eps = 1e-3
    fd = (np.asarray(f(x + eps, n), np.float64) - np.asarray(f(x - eps, n), np.float64)) / (2 * eps)
    np.testing.assert_allclose(jvp_out, fd, rtol=2e-2)


# --- weakly typed loop carries and branch outputs, as JAX (issue 31 §2) -----------------------


@contextlib.contextmanager
def _x64_for_both(on):
    """x64 set for remat and for JAX alike (both restored after); gives the jax module."""
    jax = pytest.importorskip("jax")
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", on)
    try:
        with remat.config.override("jax_enable_x64", on):
            yield jax
    finally:
        jax.config.update("jax_enable_x64", previous)


def _weak_init_loops(lx, np_, remat_only):
    """Every loop form from a Python-scalar initial carry (weak float64 ``0.0`` under x64,
    weak float32 otherwise; or a weak int) whose body returns float32 (or bfloat16): functions
    of a float32 scale ``s``. ``remat_only(**kw)`` gives remat's own loop arguments
    (``checkpoints=``, ``max_steps=``) and nothing for JAX, which runs the plain form."""
    xs = np_.asarray(np.linspace(-1.0, 1.0, 5).astype(np.float32))

    def step(c, x, s):
        return c * 0.9 + np_.tanh(s * x)

    def scan(s, **kw):
        return lx.scan(lambda c, x: (step(c, x, s), c), 0.0, xs, **kw)

    def while_loop(s, init=0.0, **kw):
        return lx.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, step(c[1], xs[c[0]], s)),
                             (0, init), **kw)

    return {
        "scan": scan,
        "scan_checkpoints": lambda s: scan(s, **remat_only(checkpoints=2)),
        "scan_bfloat16": lambda s: lx.scan(
            lambda c, x: (c + (s * x).astype(np_.bfloat16), None), 0.0, xs)[0],
        "while_loop": while_loop,
        "while_loop_int_init": lambda s: while_loop(s, init=0),
        "while_loop_max_steps_checkpoints": lambda s: while_loop(
            s, **remat_only(max_steps=8, checkpoints=2)),
        "fori_loop": lambda s: lx.fori_loop(0, 5, lambda i, c: step(c, xs[i], s), 0.0),
        "fori_loop_int_init": lambda s: lx.fori_loop(0, 5, lambda i, c: step(c, xs[i], s), 0),
    }


def _assert_same_values_and_types(mine, theirs, tol=1e-5):
    """Equal trees, each leaf of the same dtype and weak type, and close values."""
    jax = pytest.importorskip("jax")
    fm, tm = tree_flatten(mine)
    ft, tt = jax.tree_util.tree_flatten(theirs)
    assert len(fm) == len(ft), (tm, tt)
    for a, b in zip(fm, ft):
        assert (core.get_aval(a).dtype, core.get_aval(a).weak_type) == \
            (jax.typeof(b).dtype, jax.typeof(b).weak_type), (core.get_aval(a), jax.typeof(b))
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                   rtol=tol, atol=tol)


def _total(np_, out):
    """The sum of a loop's float outputs (its loss)."""
    leaves = [x for x in remat.tree_util.tree_leaves(out)
              if np.dtype(x.dtype).kind == "f" or x.dtype == np_.bfloat16]
    return sum(np_.sum(x.astype(np.float32)) for x in leaves)


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("form", sorted(_weak_init_loops(lax, jnp, dict)))
def test_weak_typed_initial_carry_is_promoted_as_jax(form, x64):
    """A weakly typed initial carry whose type the body changes takes the promotion of its
    dtype with the output's (0.0 under x64 with a float32 body: float32), in every loop form:
    the value, its dtype and weak type, and its derivatives (grad, jit(grad), vmap; forward
    mode where JAX's form has no reverse mode) are JAX's."""
    with _x64_for_both(x64) as jax:
        mine = _weak_init_loops(lax, jnp, dict)[form]
        theirs = _weak_init_loops(jax.lax, jax.numpy, lambda **kw: {})[form]
        s = np.float32(0.7)
        ss = np.array([0.3, 0.7, 1.1], np.float32)
        _assert_same_values_and_types(mine(s), theirs(s))
        _assert_same_values_and_types(remat.jit(mine)(s), jax.jit(theirs)(s))
        _assert_same_values_and_types(remat.vmap(mine)(ss), jax.vmap(theirs)(ss))
        loss_mine = lambda s: _total(jnp, mine(s))  # noqa: E731
        loss_theirs = lambda s: _total(jax.numpy, theirs(s))  # noqa: E731
        d_theirs = jax.jvp(loss_theirs, (s,), (np.float32(1),))[1]
        _assert_same_values_and_types(remat.jvp(loss_mine, (s,), (np.float32(1),))[1],
                                      d_theirs, 1e-4)
        if form == "while_loop" or form == "while_loop_int_init":
            with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
                remat.grad(loss_mine)(s)
            return
        _assert_same_values_and_types(remat.grad(loss_mine)(s), d_theirs, 1e-4)
        _assert_same_values_and_types(remat.jit(remat.grad(loss_mine))(s), d_theirs, 1e-4)
        _assert_same_values_and_types(remat.vmap(remat.grad(loss_mine))(ss),
                                      jax.vmap(jax.jacfwd(loss_theirs))(ss), 1e-4)


def test_weak_typed_carry_fori_loop_under_x64_issue_example():
    """The issue's program under x64: JAX's float32 value, not a TypeError."""
    xs = np.array([0.1, -0.2, 0.3, 0.05, 0.15], np.float32)
    with _x64_for_both(True) as jax:
        jxs, rxs = jax.numpy.asarray(xs), jnp.asarray(xs)
        theirs = jax.lax.fori_loop(0, 5, lambda i, c: c * 0.9 + jax.numpy.tanh(jxs[i]), 0.0)
        mine = lax.fori_loop(0, 5, lambda i, c: c * 0.9 + jnp.tanh(rxs[i]), 0.0)
        assert mine.dtype == np.float32
        _assert_same_values_and_types(mine, theirs, 1e-6)


def test_weak_typed_carry_checkpointed_loops_count_the_promoted_carry():
    """``memory_budget`` counts the carry as the body promoted it (4 bytes of float32 under
    x64, not the 8 of the Python scalar's float64), and ``max_steps=0`` returns the promoted
    carry."""
    xs = np.ones(8, np.float32)
    body = lambda c, x: (c * 0.5 + x, None)  # noqa: E731
    with _x64_for_both(True):
        c, _ = lax.scan(body, 0.0, xs, memory_budget=4)
        assert c.dtype == np.float32
        np.testing.assert_allclose(c, lax.scan(body, np.float32(0), xs)[0], rtol=1e-6)
        with pytest.raises(ValueError, match="smallest feasible budget is 4 bytes"):
            lax.scan(body, 0.0, xs, memory_budget=3)
        c = lax.while_loop(lambda c: c < 3, lambda c: c + np.float32(1), 0.0, max_steps=5,
                           memory_budget=4)
        assert c.dtype == np.float32 and float(c) == 3.0
        out = lax.while_loop(lambda c: c < 1, lambda c: c + np.float32(1), 0.0, max_steps=0)
        assert out.dtype == np.float32 and float(out) == 0.0


def _rejected_carries(lx, np_, remat_only):
    """Programs JAX rejects: a strongly typed carry whose dtype changes, a weakly typed one
    whose promoted type still differs from the output's (an int output, a new shape), several
    leaves at once; in every loop form."""
    xs = np_.asarray(np.ones(4, np.float32))

    def to_f16(c, x):
        return c.astype(np.float16), None

    def tree_body(c, x):
        return {"a": c["a"].astype(np.int16), "b": (c["b"][0][:1], c["b"][1])}, None

    def counter_to_int16(c):
        return (c + 1).astype(np.int16)

    return {
        "scan_strong_dtype": lambda: lx.scan(to_f16, np.float32(0), xs),
        "scan_checkpoints_strong_dtype": lambda: lx.scan(to_f16, np.float32(0), xs,
                                                         **remat_only(checkpoints=2)),
        "scan_weak_init_int_output": lambda: lx.scan(
            lambda c, x: (lx.convert_element_type(c, np.int32), None), 0.0, xs),
        "scan_weak_init_new_shape": lambda: lx.scan(
            lambda c, x: (np_.zeros(3, np.float32) + c, None), 0.0, xs),
        "scan_tree_several_leaves": lambda: lx.scan(
            tree_body, {"a": np.float32(0), "b": (np.ones(2, np.float32), 1.0)}, xs),
        "scan_three_leaves": lambda: lx.scan(
            lambda c, x: ((c[0].astype(np.int16), c[1][:1], c[2].astype(np.int32)), None),
            (np.float32(1), np.ones((2, 3), np.float32), np.float32(1)), xs),
        "while_loop_strong_dtype": lambda: lx.while_loop(lambda c: c < 5, counter_to_int16,
                                                         np.int32(0)),
        "while_loop_max_steps_checkpoints_strong_dtype": lambda: lx.while_loop(
            lambda c: c < 5, counter_to_int16, np.int32(0),
            **remat_only(max_steps=8, checkpoints=2)),
        "while_loop_weak_init_int_output": lambda: lx.while_loop(
            lambda c: c < 5, lambda c: lx.convert_element_type(c, np.int8), 0.0),
        "fori_loop_static": lambda: lx.fori_loop(
            0, 3, lambda i, c: c.astype(np.int16), np.float32(0)),
        "fori_loop_traced_bounds": lambda: lx.fori_loop(
            0, np_.asarray(3) + 0 * np_.asarray(0), lambda i, c: c.astype(np.int16),
            np.float32(0)),
    }


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("case", sorted(_rejected_carries(lax, jnp, dict)))
def test_rejected_carry_types_raise_jax_error(case, x64):
    """What JAX still rejects raises JAX's TypeError, word for word: the loop, each carry
    leaf's path after the body's parameter name (``loop_carry`` for fori_loop), both types."""
    with _x64_for_both(x64) as jax:
        with pytest.raises(TypeError) as theirs:
            _rejected_carries(jax.lax, jax.numpy, lambda **kw: {})[case]()
        with pytest.raises(TypeError) as mine:
            _rejected_carries(lax, jnp, dict)[case]()
        assert str(mine.value) == str(theirs.value)


def _weak_branches(lx, np_):
    """cond/switch whose branches' outputs differ only in weak type (2.0 against float32 under
    x32; float64 against float32 under x64)."""
    weak = lambda x: 2.0  # noqa: E731
    strong = lambda x: np_.sin(x)  # noqa: E731
    scaled = lambda x: x * 3.0  # noqa: E731
    return {
        "cond_false_branch_weak": lambda p, x: lx.cond(p, strong, weak, x),
        "cond_true_branch_weak": lambda p, x: lx.cond(p, weak, strong, x),
        "switch_branch_0_weak": lambda i, x: lx.switch(i, [weak, strong, scaled], x),
        "switch_branch_0_strong": lambda i, x: lx.switch(i, [strong, weak, scaled], x),
    }


_BRANCHES_REMAT = _weak_branches(lax, jnp)


@pytest.mark.parametrize("case", sorted(_BRANCHES_REMAT))
def test_branch_outputs_differing_in_weak_type_as_jax(case):
    """Under x32 the branches match (weak types aside) and the output has branch 0's weak
    type (``false_fun`` for cond), whichever branch runs; so adding a bfloat16 gives JAX's
    dtype. Values and gradients (grad, jit(grad), vmap) are JAX's. Under x64 the weak
    float64 no longer matches float32: JAX's TypeError, word for word."""
    x = np.float32(0.5)
    with _x64_for_both(False) as jax:
        theirs = _weak_branches(jax.lax, jax.numpy)[case]
        mine = _BRANCHES_REMAT[case]
        for index in (0, 1, 2) if case.startswith("switch") else (True, False):
            _assert_same_values_and_types(mine(index, x), theirs(index, x))
            _assert_same_values_and_types(mine(index, x) + jnp.bfloat16(1),
                                          theirs(index, x) + jax.numpy.bfloat16(1))
            _assert_same_values_and_types(remat.jit(mine)(index, x), jax.jit(theirs)(index, x))
            for d_mine, d_theirs in [(remat.grad(mine, 1), jax.grad(theirs, 1)),
                                     (remat.jit(remat.grad(mine, 1)),
                                      jax.jit(jax.grad(theirs, 1)))]:
                _assert_same_values_and_types(d_mine(index, x), d_theirs(index, x))
        indices = np.array([1, 0, 2, 1]) if case.startswith("switch") else \
            np.array([True, False, True, False])
        xs = np.linspace(-1.0, 1.0, 4).astype(np.float32)
        _assert_same_values_and_types(remat.vmap(mine)(indices, xs),
                                      jax.vmap(theirs)(indices, xs))
        _assert_same_values_and_types(remat.vmap(remat.grad(mine, 1))(indices, xs),
                                      jax.vmap(jax.grad(theirs, 1))(indices, xs))
    with _x64_for_both(True) as jax:
        theirs = _weak_branches(jax.lax, jax.numpy)[case]
        index = 1 if case.startswith("switch") else True
        with pytest.raises(TypeError) as want:
            theirs(index, x)
        with pytest.raises(TypeError) as got:
            _BRANCHES_REMAT[case](index, x)
        assert str(got.value) == str(want.value)


def test_branch_outputs_of_other_types_raise_jax_error():
    """Branches differing in dtype or shape beyond weak types: JAX's message, every differing
    leaf listed, with each branch's name and source."""
    jax = pytest.importorskip("jax")
    cases = [
        lambda lx, np_: lx.cond(True, lambda: (np.float32(1), np_.ones(2), 1),
                                lambda: (np.float16(1), np_.ones(3), 2)),
        lambda lx, np_: lx.cond(True, lambda: 2, lambda: np.float32(1)),
        lambda lx, np_: lx.switch(2, [lambda: (np.float32(1), np_.ones(2)),
                                      lambda: (np.float32(1), np_.ones(2)),
                                      lambda: (np.float16(1), np_.ones((2, 1)))]),
    ]
    for case in cases:
        with pytest.raises(TypeError) as want:
            case(jax.lax, jax.numpy)
        with pytest.raises(TypeError) as got:
            case(lax, jnp)
        assert str(got.value) == str(want.value)


# --- transposing loops that carry primal values ------------------------------------------------


def _scan_with_counter(x, read_after=True):
    """A linear function of ``x`` whose scan also carries an integer counter, read as a
    predicate inside the loop (and after it)."""
    def body(c, _):
        k, y = c
        y = jnp.where(k > 1, y * 2.0, y + x)
        return (k + 1, y), y
    (k, y), ys = lax.scan(body, (0, jnp.zeros(3, np.float32)), None, length=4)
    return (jnp.where(k > 2, y, 3.0 * y) if read_after else y) + ys.sum(0)


def test_linear_transpose_of_a_scan_carrying_a_counter_matches_vjp():
    x, ct = rand(3), rand(3)
    (got,) = remat.linear_transpose(_scan_with_counter, x)(ct)
    (want,) = remat.vjp(_scan_with_counter, x)[1](ct)
    assert_close(got, want)
    np.testing.assert_allclose(got, 23.0 * ct, rtol=1e-6)


def test_transposing_a_whole_staged_scan_runs_its_primal_carries_forward():
    """The scan transpose rule given a scan traced whole (not split by partial evaluation):
    the counter carry is primal, so it is run forward, not transposed as linear. (A primal
    output read after the loop needs the partial evaluation that ``linear_transpose`` does.)"""
    from remat.interpreters import ad
    x = rand(3)
    closed = pe.trace_to_jaxpr(lambda x: [_scan_with_counter(x, read_after=False)],
                               [core.get_aval(x)])
    scan_eqn = next(e for e in closed.jaxpr.eqns if e.primitive.name == "scan")
    assert any(not np.issubdtype(a.dtype, np.floating)
               for a in scan_eqn.params["jaxpr"].in_avals)
    ct = rand(3)
    (got,) = ad.backward_pass(closed.jaxpr, list(closed.consts),
                              [ad.UndefinedPrimal(core.get_aval(x))], [ct])
    np.testing.assert_allclose(got, 23.0 * ct, rtol=1e-6)


# --- a callback in an untaken branch inside a loop never runs -------------------------------


def _raising_callback(x):
    raise AssertionError("the untaken branch's callback ran")


@pytest.mark.parametrize("loop", ["while_loop", "fori_loop", "scan"])
def test_a_callback_in_an_untaken_branch_of_a_loop_body_never_runs(loop):
    """equinox's ``error_if`` raises from a pure_callback in a cond branch; the loop kernels
    once hoisted that loop-invariant callback out of its branch and ran it every time."""
    def check(x, bad):
        fail = lambda: remat.pure_callback(_raising_callback, remat.ShapeDtypeStruct((), np.int32),
                                           np.int32(0))
        return x * 1.5 + lax.cond(bad, fail, lambda: np.int32(0)).astype(np.float32)

    def run(x):
        if loop == "while_loop":
            return lax.while_loop(lambda c: c[0] < 3,
                                  lambda c: (c[0] + 1, check(c[1], c[0] < 0)), (0, x))[1]
        if loop == "fori_loop":
            return lax.fori_loop(0, 3, lambda i, x: check(x, i < 0), x)
        return lax.scan(lambda x, i: (check(x, i < 0), None), x, np.arange(3))[0]

    assert float(remat.jit(run)(np.float32(1.0))) == 1.5 ** 3
    assert float(remat.jvp(run, (np.float32(1.0),), (np.float32(1.0),))[1]) == 1.5 ** 3
