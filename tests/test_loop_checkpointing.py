"""Checkpointed loops: ``scan(..., checkpoints=K)`` and reverse-mode ``while_loop(...,
max_steps=, checkpoints=)``. The binomial schedule against its closed form and a brute-force
optimum, the forward steps actually run, gradients under every K against the plain scan and
JAX, forward mode, second order, vmap/jit/checkpoint compositions, peak memory, bad input, and
the docs' code."""

import functools
import math
import os
import re

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.exec.plan import interpreted
from remat.lax.control_flow.revolve import (
    _split_traced,
    binomial_steps,
    optimal_split,
    revolve_forward_steps,
    scan_schedule,
)
from remat.memory import peak_memory
from remat.test_util import check_grads

R = np.random.default_rng(0)


def rand(*shape, scale=1.0):
    return (scale * R.standard_normal(shape)).astype(np.float32)


def assert_trees_close(a, b, rtol=2e-5, atol=1e-6):
    fa, ta = remat.tree_util.tree_flatten(a)
    fb, tb = remat.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(fa, fb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, x.dtype, y.shape, y.dtype)
        if x.dtype.kind == "f":
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


# --- the schedule ----------------------------------------------------------------------------


@functools.cache
def brute_force_steps(steps, snapshots):
    """The fewest forward steps over every recursive schedule (dynamic programming)."""
    if steps <= 1:
        return 0
    if snapshots == 1:
        return steps * (steps - 1) // 2
    return min(m + brute_force_steps(steps - m, snapshots - 1) + brute_force_steps(m, snapshots)
               for m in range(1, steps))


def test_closed_form_is_the_optimum():
    for s in range(1, 6):
        for n in range(1, 45):
            assert revolve_forward_steps(n, s) == brute_force_steps(n, s), (n, s)
    # the extremes: one checkpoint recomputes everything, n checkpoints nothing
    assert revolve_forward_steps(10, 1) == 45 and revolve_forward_steps(10, 10) == 9
    assert binomial_steps(3, 2) == 10


@pytest.mark.parametrize("n,k", [(n, k) for n in (1, 2, 3, 7, 10, 11, 33, 64) for k in
                                 (1, 2, 3, 4, 6, 64)] + [(1000, 10), (997, 7), (5000, 100)])
def test_scan_schedule_attains_the_optimum(n, k):
    sched = scan_schedule(n, k)
    assert sched.forward_steps == revolve_forward_steps(n, k)
    assert len(sched.first_sweep) <= min(n, k) and sched.first_sweep[0] == 0
    assert sched.most_held <= min(n, k)


def test_traced_split_matches_python():
    steps, snaps = [], []
    for n in [*range(2, 40), 1000, 10 ** 5, 10 ** 8]:
        for s in [2, 3, 5, 50, 10 ** 4]:
            steps.append(n)
            snaps.append(s)
    got = remat.jit(remat.vmap(_split_traced))(np.array(steps, np.int32),
                                               np.array(snaps, np.int32))
    want = [optimal_split(n, s) for n, s in zip(steps, snaps)]
    np.testing.assert_array_equal(got, want)


# --- scan: gradients -------------------------------------------------------------------------


def rnn_step(c, x):
    h, (i, s) = c
    h2 = jnp.tanh(h * 0.9 + x * h[::-1] + 0.1)
    return (h2, (i + 1, s * 0.95 + h2.sum())), {"y": h2 * s}


def rnn_loss(c0, xs, checkpoints=None, reverse=False):
    c, ys = lax.scan(rnn_step, c0, xs, reverse=reverse, checkpoints=checkpoints)
    return (c[0] ** 2).sum() + c[1][1] + (ys["y"] ** 2).sum()


def jax_rnn_loss(c0, xs, reverse=False):
    def step(c, x):
        h, (i, s) = c
        h2 = jjnp.tanh(h * 0.9 + x * h[::-1] + 0.1)
        return (h2, (i + 1, s * 0.95 + h2.sum())), {"y": h2 * s}

    c, ys = jax.lax.scan(step, c0, xs, reverse=reverse)
    return (c[0] ** 2).sum() + c[1][1] + (ys["y"] ** 2).sum()


C0 = (rand(3, scale=0.5), (np.int32(0), np.float32(0.3)))
XS = rand(13, 3, scale=0.3)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 13, 40, "all"])
def test_scan_grad_every_k(k, reverse):
    grad = remat.grad(rnn_loss, (0, 1), allow_int=True)
    want = grad(C0, XS, None, reverse)
    got = grad(C0, XS, k, reverse)
    assert_trees_close(got, want)
    np.testing.assert_allclose(rnn_loss(C0, XS, k, reverse), rnn_loss(C0, XS, None, reverse),
                               rtol=1e-6)
    jax_grad = jax.grad(jax_rnn_loss, (0, 1), allow_int=True)(C0, XS, reverse)
    np.testing.assert_allclose(got[0][0], jax_grad[0][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0][1][1], jax_grad[0][1][1], rtol=1e-5)
    np.testing.assert_allclose(got[1], jax_grad[1], rtol=1e-5, atol=1e-6)


def test_scan_jit_equals_eager():
    f = remat.grad(rnn_loss, (0, 1), allow_int=True)
    assert_trees_close(remat.jit(f, static_argnums=2)(C0, XS, 3), f(C0, XS, 3))


def test_scan_values_and_dtypes_unchanged():
    c, ys = lax.scan(rnn_step, C0, XS, checkpoints=2)
    c_ref, ys_ref = lax.scan(rnn_step, C0, XS)
    assert_trees_close((c, ys), (c_ref, ys_ref), rtol=0, atol=0)
    assert np.asarray(c[1][0]).dtype == np.int32 and np.asarray(ys["y"]).dtype == np.float32


def test_scan_check_grads_both_modes():
    def f(h, xs):
        c, ys = lax.scan(lambda h, x: (jnp.sin(h * x) + 0.5 * h, h.sum()), h, xs,
                         checkpoints=2)
        return c.sum() + ys.sum()

    check_grads(f, (rand(3, scale=0.5), rand(6, scale=0.5)), order=2, modes=("fwd", "rev"),
                atol=3e-3, rtol=3e-3)


def test_scan_jvp_matches_plain():
    t = (np.ones(3, np.float32), (np.zeros((), jax.dtypes.float0), np.float32(1.0)))
    _, t_got = remat.jvp(lambda c: rnn_loss(c, XS, 3), (C0,), (t,))
    _, t_want = remat.jvp(lambda c: rnn_loss(c, XS), (C0,), (t,))
    np.testing.assert_allclose(t_got, t_want, rtol=1e-5)


def loss2(h, xs, k):
    c, ys = lax.scan(lambda h, x: (jnp.tanh(h * x + 0.3), h.sum()), h, xs, checkpoints=k)
    return c.sum() + ys.sum()


@pytest.mark.parametrize("k", [1, 2, 4])
def test_scan_second_order(k):
    h, xs = rand(3, scale=0.5), rand(7)
    want = remat.hessian(lambda h: loss2(h, xs, None))(h)
    np.testing.assert_allclose(remat.hessian(lambda h: loss2(h, xs, k))(h), want, rtol=1e-4,
                               atol=1e-5)  # forward over reverse
    rev_rev = remat.jit(remat.jacrev(remat.grad(lambda h: loss2(h, xs, k))))(h)
    np.testing.assert_allclose(rev_rev, want, rtol=1e-4, atol=1e-5)
    inner_jit = remat.grad(lambda h: remat.jit(remat.grad(lambda h: loss2(h, xs, k)))(h)[0])(h)
    np.testing.assert_allclose(inner_jit, want[0], rtol=1e-4, atol=1e-5)


def test_scan_vmap_against_python_loop():
    hs, xs = rand(4, 3, scale=0.5), rand(4, 9)
    grad = remat.grad(loss2, (0, 1))
    want = [grad(h, x, None) for h, x in zip(hs, xs)]
    got = remat.vmap(grad, (0, 0, None))(hs, xs, 2)
    for i, w in enumerate(want):
        assert_trees_close((got[0][i], got[1][i]), w)
    # and the other nesting: the gradient of a batched checkpointed scan
    g = remat.grad(lambda hs: remat.vmap(loss2, (0, 0, None))(hs, xs, 2).sum())(hs)
    np.testing.assert_allclose(g, np.stack([w[0] for w in want]), rtol=2e-5, atol=1e-6)
    vals = remat.vmap(loss2, (0, None, None))(hs, xs[0], 3)
    np.testing.assert_allclose(vals, [loss2(h, xs[0], None) for h in hs], rtol=1e-6)


def test_scan_policy_inside_body_and_checkpoint_around():
    w = rand(3, 3, scale=0.5)

    def layer(h, x):
        return jnp.tanh(w @ h + x), None

    body = remat.checkpoint(layer, policy=remat.checkpoint_policies.dots_saveable)

    def loss(h, xs, k, f=body):
        return lax.scan(f, h, xs, checkpoints=k)[0].sum()

    h, xs = rand(3), rand(8, 3)
    want = remat.grad(loss, (0, 1))(h, xs, None, layer)
    assert_trees_close(remat.grad(loss, (0, 1))(h, xs, 3), want)
    outer = remat.checkpoint(lambda h, xs: loss(h, xs, 2))
    assert_trees_close(remat.jit(remat.grad(outer, (0, 1)))(h, xs), want)


def test_scan_primitive_in_jaxpr():
    jaxpr = remat.make_jaxpr(lambda h, xs: loss2(h, xs, 3))(rand(3), rand(7))
    assert "checkpointed_scan[" in str(jaxpr) and "checkpoints=3" in str(jaxpr)
    grad_jaxpr = str(remat.make_jaxpr(remat.grad(lambda h, xs: loss2(h, xs, 3)))(rand(3),
                                                                                rand(7)))
    # the stored checkpoints: three slots and the scratch one, not a (7, ...) stack of
    # residuals
    assert "f32[4,3]" in grad_jaxpr and "f32[7,3]" not in grad_jaxpr


def test_memory_budget_picks_k():
    carry_bytes = 3 * 4
    jaxpr = str(remat.make_jaxpr(
        lambda h, xs: lax.scan(lambda h, x: (h * x, None), h, xs,
                               memory_budget=5 * carry_bytes + 7)[0])(rand(3), rand(9)))
    assert "checkpoints=5" in jaxpr
    g = remat.grad(lambda h: lax.scan(lambda h, x: (jnp.sin(h) * x, None), h, XS[:, 0],
                                      memory_budget=carry_bytes)[0].sum())(rand(3))
    assert np.all(np.isfinite(g))


# --- scan: the forward steps run, and peak memory --------------------------------------------


def count_forward_steps(n, k, jit):
    calls = []

    def tick(c):
        calls.append(1)
        return np.int32(0)

    def body(c, x):
        remat.io_callback(tick, remat.ShapeDtypeStruct((), np.int32), lax.stop_gradient(c))
        return jnp.sin(c) * 1.01 + x, None

    def loss(c, xs):
        return lax.scan(body, c, xs, checkpoints=k)[0].sum()

    grad = remat.grad(loss)
    xs = np.linspace(0, 1, n, dtype=np.float32)
    (remat.jit(grad) if jit else grad)(np.ones(2, np.float32), xs)
    return len(calls)


@pytest.mark.parametrize("n,k", [(1, 1), (5, 1), (10, 2), (30, 3), (50, 5), (64, 6), (20, 20)])
@pytest.mark.parametrize("jit", [False, True])
def test_recompute_count_is_the_binomial_optimum(n, k, jit):
    # revolve's count: the forward pass to the last step's input, and the backward pass's
    # advances; besides them the last step runs once (the loop's output) and every step once
    # more, taped, as it is reversed
    assert count_forward_steps(n, k, jit) == revolve_forward_steps(n, k) + 1 + n


def test_peak_memory_bounded_by_checkpoints():
    d = 2048
    carry = d * 4

    def loss(c, xs, k):
        return lax.scan(lambda c, x: (jnp.sin(c) * 1.01 + x, None), c, xs,
                        checkpoints=k)[0].sum()

    c0 = np.ones(d, np.float32)
    peaks = {}
    for n in (24, 96):
        xs = np.linspace(0, 1, n, dtype=np.float32)
        for k in (1, 2, 4, "all"):
            f = remat.jit(remat.grad(loss), static_argnums=2)
            f(c0, xs, k)
            peaks[n, k] = peak_memory(f, c0, xs, k)
    for k in (1, 2, 4):
        # the checkpoints (written in place) and a few working carries (see
        # test_peak_memory_is_k_plus_a_constant)
        assert peaks[96, k] <= (k + 8) * carry, (k, peaks[96, k] / carry)
        with interpreted():  # each buffer accounted as it lives
            exact = peak_memory(remat.jit(remat.grad(loss), static_argnums=2), c0, xs, k)
        assert exact <= (k + 9) * carry, (k, exact / carry)
        assert peaks[96, k] == peaks[24, k]  # independent of the length
    assert peaks[96, "all"] >= 96 * carry > 4 * peaks[96, 4]


def _tanh_losses(n):
    """Issue 34's workload: ``tanh(c*w + x)`` over a 4096-float carry, as a scan and as a
    while loop of ``n`` steps."""
    w = np.float32(0.9)

    def scan_loss(c, xs, k):
        return lax.scan(lambda c, x: (jnp.tanh(c * w + x), None), c, xs,
                        checkpoints=k)[0].sum()

    def while_loss(c, xs, k):
        def body(s):
            i, c = s
            return i + 1, jnp.tanh(c * w + xs[i])
        return lax.while_loop(lambda s: s[0] < n, body, (0, c), max_steps=n,
                              checkpoints=k)[1].sum()

    return {"scan": scan_loss, "while": while_loss}


@pytest.mark.parametrize("loop", ["scan", "while"])
def test_peak_memory_is_k_plus_a_constant(loop):
    # The store holds K + 1 states (the last slot scratch) and is written in place, in the
    # forward pass and, handed over to it, in the backward pass. On top of it, at most 8
    # carries: the scratch slot; the backward loop's state and cotangent, and their first
    # values (the last step's input, the output's cotangent) held by its caller until it
    # ends; the state restored from a checkpoint; the advancing loop's state and one step's
    # temporaries (the while loop's counter store and slots' steps add a few bytes).
    d, n = 4096, 60
    carry = d * 4
    loss = _tanh_losses(n)[loop]
    c0, xs = np.ones(d, np.float32), np.linspace(0, 1, n, dtype=np.float32)
    want = remat.jit(remat.grad(loss), static_argnums=2)(c0, xs, "all")  # every state kept
    peaks, exact = {}, {}
    for k in (1, 5, 10):
        f = remat.jit(remat.grad(loss), static_argnums=2)
        np.testing.assert_array_equal(f(c0, xs, k), want)
        peaks[k] = peak_memory(f, c0, xs, k)
        with interpreted():  # each buffer accounted as it lives
            exact[k] = peak_memory(remat.jit(remat.grad(loss), static_argnums=2), c0, xs, k)
        assert peaks[k] <= (k + 8) * carry, (k, peaks[k] / carry)
        assert exact[k] <= (k + 9) * carry, (k, exact[k] / carry)
    for k in (5, 10):  # one carry per checkpoint more
        assert abs(peaks[k] - peaks[1] - (k - 1) * carry) <= 256, (k, peaks)
        assert abs(exact[k] - exact[1] - (k - 1) * carry) <= 256, (k, exact)


# --- while_loop ------------------------------------------------------------------------------


def wbody(s):
    i, x = s
    return i + 1, jnp.sin(x) * 1.05 + 0.1 * x[::-1]


def wloss(x0, n, k, max_steps=None):
    out = lax.while_loop(lambda s: s[0] < n, wbody, (0, x0), max_steps=max_steps,
                         checkpoints=k)
    return out[1].sum()


def wloss_scan(x0, n):
    return lax.scan(lambda x, _: (wbody((0, x))[1], None), x0, None, length=n)[0].sum()


X0 = np.linspace(0.1, 1, 4).astype(np.float32)


@pytest.mark.parametrize("n", [0, 1, 2, 9, 30])
@pytest.mark.parametrize("k", [1, 2, 3, 50])
def test_while_grad_against_fixed_length_scan(n, k):
    want = remat.grad(wloss_scan)(X0, n) if n else np.ones(4, np.float32)
    np.testing.assert_allclose(remat.grad(wloss)(X0, n, k), want, rtol=1e-4, atol=1e-6)
    got = remat.jit(remat.grad(wloss), static_argnums=2)(X0, n, k)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_while_against_finite_differences():
    check_grads(lambda x: wloss(x, 7, 2), (X0,), order=2, modes=("fwd", "rev"), atol=3e-3,
                rtol=3e-3)


def test_while_against_jax():
    def step(x):
        return jjnp.sin(x) * 1.05 + 0.1 * x[::-1]

    want = jax.grad(lambda x: jax.lax.fori_loop(0, 11, lambda i, x: step(x), x).sum())(X0)
    np.testing.assert_allclose(remat.grad(wloss)(X0, 11, 3), want, rtol=1e-5, atol=1e-6)


def test_while_max_steps():
    np.testing.assert_allclose(wloss(X0, 20, 3, max_steps=7), wloss_scan(X0, 7), rtol=1e-6)
    np.testing.assert_allclose(remat.grad(wloss)(X0, 20, 3, max_steps=7),
                               remat.grad(wloss_scan)(X0, 7), rtol=1e-5)
    # max_steps alone picks the checkpoints; max_steps=0 runs nothing
    g = remat.grad(lambda x: lax.while_loop(lambda s: s[0] < 5, wbody, (0, x),
                                            max_steps=40)[1].sum())(X0)
    np.testing.assert_allclose(g, remat.grad(wloss_scan)(X0, 5), rtol=1e-5)
    out = lax.while_loop(lambda s: s[0] < 5, wbody, (0, X0), max_steps=0)
    assert int(out[0]) == 0 and out[1] is X0


def test_while_past_the_online_optimum():
    # 3 checkpoints stay optimal online up to C(5, 2) - 1 = 9 steps; beyond, dynamic
    # checkpointing takes over
    for n in (10, 60):
        np.testing.assert_allclose(remat.jit(remat.grad(wloss), static_argnums=2)(X0, n, 3),
                                   remat.grad(wloss_scan)(X0, n), rtol=1e-4, atol=1e-6)


def test_while_forward_mode_and_second_order():
    t = np.ones(4, np.float32)
    _, got = remat.jvp(lambda x: wloss(x, 9, 3), (X0,), (t,))
    _, want = remat.jvp(lambda x: wloss_scan(x, 9), (X0,), (t,))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    hess = remat.hessian(lambda x: wloss_scan(x, 6))(X0)
    np.testing.assert_allclose(remat.hessian(lambda x: wloss(x, 6, 2))(X0), hess, rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(remat.jacrev(remat.grad(lambda x: wloss(x, 6, 2)))(X0), hess,
                               rtol=1e-4, atol=1e-5)


def test_while_vmap_with_different_trip_counts():
    ns = np.array([0, 3, 8, 5], np.int32)
    xs = np.stack([X0, 0.5 * X0, X0 + 0.2, -X0])
    want = np.stack([remat.grad(wloss_scan)(x, int(n)) if n else np.ones(4, np.float32)
                     for x, n in zip(xs, ns)])
    np.testing.assert_allclose(remat.vmap(remat.grad(wloss), (0, 0, None))(xs, ns, 3), want,
                               rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(
        remat.grad(lambda xs: remat.vmap(wloss, (0, 0, None))(xs, ns, 3).sum())(xs), want,
        rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(
        remat.jit(remat.vmap(remat.grad(wloss), (0, 0, None)), static_argnums=2)(xs, ns, 3),
        want, rtol=2e-5, atol=1e-6)


def test_while_policy_inside_body_and_checkpoint_around():
    w = rand(4, 4, scale=0.4)

    def step(s):
        i, x = s
        return i + 1, jnp.tanh(w @ x) + 0.5 * x

    inner = remat.checkpoint(step, policy=remat.checkpoint_policies.dots_saveable)

    def loss(x, body):
        return lax.while_loop(lambda s: s[0] < 6, body, (0, x), checkpoints=2)[1].sum()

    want = remat.grad(lambda x: lax.scan(lambda x, _: (step((0, x))[1], None), x, None,
                                         length=6)[0].sum())(X0)
    np.testing.assert_allclose(remat.grad(loss)(X0, inner), want, rtol=1e-5, atol=1e-6)
    outer = remat.checkpoint(lambda x: loss(x, step))
    np.testing.assert_allclose(remat.jit(remat.grad(outer))(X0), want, rtol=1e-5, atol=1e-6)


def test_while_without_keywords_keeps_jax_behaviour():
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
        remat.grad(lambda x: lax.while_loop(lambda s: s[0] < 3, wbody, (0, x))[1].sum())(X0)


def adaptive_ode(y0, k, t_end=2.0):
    """dy/dt = -k y + sin(3t) by Heun's method with an embedded Euler error estimate: the
    step size (and so the number of steps) adapts to the solution."""
    def f(t, y):
        return -k * y + jnp.sin(3.0 * t)

    def cond(s):
        return s[0] < t_end

    def step(s):
        t, y, h = s
        h = jnp.minimum(h, t_end - t)
        k1 = f(t, y)
        k2 = f(t + h, y + h * k1)
        y_new = y + 0.5 * h * (k1 + k2)
        err = jnp.max(jnp.abs(0.5 * h * (k2 - k1))) + 1e-9
        factor = jnp.clip(0.9 * jnp.sqrt(1e-4 / err), 0.3, 2.0)
        return t + h, y_new, h * factor

    return cond, step, (np.float32(0.0), y0, np.float32(0.05))


def test_while_adaptive_ode_against_scan():
    y0, k = np.array([1.0, -0.5, 2.0], np.float32), np.float32(1.3)

    def solve(y0, k, checkpoints):
        cond, step, init = adaptive_ode(y0, k)
        return lax.while_loop(cond, step, init, checkpoints=checkpoints)[1].sum()

    cond, step, init = adaptive_ode(y0, k)
    n = 0
    state = init
    while bool(cond(state)):
        state, n = step(state), n + 1
    assert n > 30

    def solve_scan(y0, k):
        cond, step, init = adaptive_ode(y0, k)
        return lax.scan(lambda s, _: (step(s), None), init, None, length=n)[0][1].sum()

    want = remat.grad(solve_scan, (0, 1))(y0, k)
    for c in (2, 5):
        got = remat.jit(remat.grad(solve, (0, 1)), static_argnums=2)(y0, k, c)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-6)


def test_while_peak_memory_bounded():
    d, n = 2048, 60
    carry = d * 4 + 4

    def loss(x, k):
        return lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, jnp.sin(s[1]) * 1.01),
                              (0, x), checkpoints=k)[1].sum()

    x = np.ones(d, np.float32)
    for k in (2, 4):
        f = remat.jit(remat.grad(loss), static_argnums=1)
        f(x, k)
        assert peak_memory(f, x, k) <= (k + 9) * carry


# --- bad input -------------------------------------------------------------------------------


def test_bad_checkpoints():
    f = lambda c, x: (c + x, None)  # noqa: E731
    for bad in (0, -3):
        with pytest.raises(ValueError, match="checkpoints must be at least 1"):
            lax.scan(f, 0.0, XS[:, 0], checkpoints=bad)
        with pytest.raises(ValueError, match="checkpoints must be at least 1"):
            lax.while_loop(lambda s: s < 3, lambda s: s + 1, 0, checkpoints=bad)
    for bad in (2.5, "some", True, [2]):
        with pytest.raises(TypeError, match="checkpoints must be None, 'all' or a positive int"):
            lax.scan(f, 0.0, XS[:, 0], checkpoints=bad)


def test_bad_memory_budget_names_the_smallest_feasible_budget():
    f = lambda c, x: (c + x, None)  # noqa: E731
    c0 = np.zeros(5, np.float32)  # 20 bytes
    for bad in (19, 0, -1):
        with pytest.raises(ValueError, match="smallest feasible budget is 20 bytes"):
            lax.scan(f, c0, XS[:, :1], memory_budget=bad)
    with pytest.raises(ValueError, match="smallest feasible budget is 20 bytes"):
        lax.while_loop(lambda s: s[0] < 3, lambda s: s, (c0,), memory_budget=10)
    with pytest.raises(TypeError, match="memory_budget must be a number"):
        lax.scan(f, c0, XS[:, :1], memory_budget="1MB")
    with pytest.raises(ValueError, match="either checkpoints or memory_budget"):
        lax.scan(f, c0, XS[:, :1], checkpoints=2, memory_budget=100)


def test_bad_max_steps():
    with pytest.raises(ValueError, match="max_steps must be non-negative"):
        lax.while_loop(lambda s: s < 3, lambda s: s + 1, 0, max_steps=-1)
    with pytest.raises(TypeError, match="max_steps must be None or an int"):
        lax.while_loop(lambda s: s < 3, lambda s: s + 1, 0, max_steps=2.5)


# --- the docs --------------------------------------------------------------------------------

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "loop_checkpointing.md")


def test_docs_code_blocks_run(capsys):
    with open(DOC) as fh:
        blocks = re.findall(r"```python\n(.*?)```", fh.read(), flags=re.S)
    assert len(blocks) >= 3
    namespace = {"__name__": "loop_checkpointing_doc"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"loop_checkpointing.md block {i}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "forward steps" in out and math.isfinite(namespace.get("checked", math.nan))


def test_grad_with_an_integer_constant_of_the_checkpointed_body():
    """An integer loop constant (indices the body reads) has a float0 cotangent, which the
    checkpointed scan's transpose summed over the steps with ``add`` and failed ("add does
    not accept dtype void": fuzz seed 67542); it stays float0, and the float gradient matches
    the plain scan's."""
    idx = np.array([2, 0, 1], np.int32)
    xs = np.linspace(0.1, 0.9, 12, dtype=np.float32).reshape(4, 3)

    def loss(w, idx, checkpoints):
        def body(c, x):
            c = jnp.sin(c[idx] * w + x)
            return c, jnp.sum(c)
        kw = {"checkpoints": checkpoints} if checkpoints else {}
        c, ys = lax.scan(body, jnp.ones(3, jnp.float32), xs, **kw)
        return jnp.sum(c) + jnp.sum(ys)

    w = np.float32(0.7)
    want = remat.grad(loss)(w, idx, None)
    for k in (1, 2):
        np.testing.assert_allclose(remat.grad(loss)(w, idx, k), want, rtol=1e-5)
        g_w, g_idx = remat.grad(loss, argnums=(0, 1), allow_int=True)(w, idx, k)
        assert g_idx.dtype == remat.dtypes.float0
        np.testing.assert_allclose(g_w, want, rtol=1e-5)
