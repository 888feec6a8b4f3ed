"""The native loop tier (``remat.exec.native``): loops of tiny arrays compiled with numba agree
with the generated-Python tier on every primitive it writes, on every carry/xs/ys structure,
under grad and jit; kernels are cached on disk across processes; the flag turns it off."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.config import config

pytest.importorskip("numba")


def _states(native):
    return [loop.state for table in native._loops.values() for loop in table.values()]


def _both_tiers(native, fn, *args):
    """``fn(*args)`` on the Python tier and on the native tier (every loop compiled), after
    checking the Python tier's loop kernels against the plans run step by step."""
    with config.override("remat_native_loops", False):
        python = fn(*args)
        with remat.exec.interpreted():
            stepwise = fn(*args)
    _assert_close(python, stepwise, 1e-6)
    fn(*args)  # (the eager fixture compiles every loop at this first native run)
    native_out = fn(*args)
    return python, native_out


def _assert_close(got, want, rtol):
    for g, w in zip(remat.tree_util.tree_leaves(got), remat.tree_util.tree_leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


def _many_primitives(p, h, x):
    """A step touching every rule of the native tier that float32 work reaches."""
    a = jnp.tanh(x @ p["w"] + h @ p["u"] + p["b"])                  # dot_general, tanh, add
    a = a + remat.nn.sigmoid(a) * jnp.exp(-a * a) - jnp.log1p(a * a)
    r = jnp.roll(a, 1, axis=1) - jnp.roll(a, -2, axis=1)             # slice, concatenate
    q = jnp.pad(a[:, 1:], ((0, 0), (1, 0))) + jnp.flip(a, axis=1)    # pad, rev
    m = jnp.max(q, axis=1, keepdims=True) + jnp.min(r)               # reduce_max/min
    s = jnp.sum(r * q, axis=0) / a.shape[0]                          # reduce_sum, div
    t = (a.T @ q).reshape(-1)[: a.shape[1]]                          # transpose, reshape
    g = jnp.where(a > 0, a, 0.1 * a) ** 3 + jnp.clip(q, -0.5, 0.5)   # select, integer_pow
    i = jnp.argmax(a, axis=1).astype(jnp.float32)[:, None]           # argmax, convert
    d = lax.dynamic_update_slice(a, lax.dynamic_slice(q, (1, 2), (2, 3)), (0, 1))
    k = jnp.arange(a.shape[1], dtype=jnp.float32) * 1e-3            # iota
    st = jnp.stack([a[0], q[1]])[1][None, :]                          # stack
    new = 0.5 * (g + d) + 1e-2 * (m + s + t + k + i + st) + jnp.sqrt(jnp.abs(r) + 1.0)
    return new / (1.0 + jnp.abs(new)), jnp.sum(new * new)


@pytest.fixture
def params():
    rng = np.random.default_rng(0)
    f32 = np.float32
    return ({"w": (rng.standard_normal((3, 6)) / 2).astype(f32),
             "u": (rng.standard_normal((6, 6)) / 3).astype(f32),
             "b": rng.standard_normal(6).astype(f32) / 5},
            rng.standard_normal((4, 6)).astype(f32) / 2,
            rng.standard_normal((7, 4, 3)).astype(f32))


def test_every_primitive_and_its_gradient(native_loops, params):
    def loss(p, h0, xs):
        h, ys = lax.scan(lambda h, x: _many_primitives(p, h, x), h0, xs)
        return jnp.sum(h * h) + jnp.sum(ys)

    fn = remat.jit(remat.value_and_grad(loss, argnums=(0, 1, 2)))
    python, native_out = _both_tiers(native_loops, fn, *params)
    assert _states(native_loops).count("ready") >= 2  # the forward and the backward scan
    _assert_close(native_out, python, 2e-5)


def test_checkpointed_body_and_reverse_scan(native_loops, params):
    p, h0, xs = params

    def loss(p, h0, xs):
        step = remat.checkpoint(lambda h, x: _many_primitives(p, h, x))
        h, ys = lax.scan(step, h0, xs, reverse=True)
        return jnp.sum(h) + jnp.sum(ys * ys)

    fn = remat.jit(remat.grad(loss))
    python, native_out = _both_tiers(native_loops, fn, p, h0, xs)
    assert "ready" in _states(native_loops)
    _assert_close(native_out, python, 2e-5)


def test_carry_xs_ys_structures(native_loops):
    def body(carry, x):
        n, flag, v = carry
        a, b = x
        v = v * a[0] + b
        return (n + 1, jnp.logical_not(flag), v), {"s": jnp.sum(v), "v": v, "n": n}

    def run(v0, xs):
        return lax.scan(body, (jnp.int32(0), jnp.bool_(True), v0), xs, reverse=True)

    xs = (np.linspace(0.5, 1.5, 10, dtype=np.float32)[:, None] * np.ones((10, 2), np.float32),
          np.arange(30, dtype=np.float32).reshape(10, 3))
    python, native_out = _both_tiers(native_loops, remat.jit(run), np.ones(3, np.float32), xs)
    _assert_close(native_out, python, 1e-6)
    assert "ready" in _states(native_loops)


def test_scalar_carry_without_xs_or_ys_and_empty_loops(native_loops):
    def run(x, n):
        return lax.fori_loop(0, 50, lambda i, c: c * 0.99 + jnp.sin(c) / (i + 1.0), x), \
            lax.scan(lambda c, _: (c + 1.0, None), x, None, length=n)[0]

    python, native_out = _both_tiers(native_loops, remat.jit(run, static_argnums=1),
                                     np.float32(0.3), 20)
    _assert_close(native_out, python, 1e-6)
    assert remat.jit(run, static_argnums=1)(np.float32(0.3), 0)[1] == np.float32(0.3)


def test_while_loop(native_loops):
    def run(x, limit):
        def cond(c):
            return (c[1] < limit) & (jnp.sum(c[0]) < 1e6)

        def body(c):
            v, i = c
            return jnp.concatenate([v[1:], v[:1]]) * 1.5 + i, i + 1

        return lax.while_loop(cond, body, (x, jnp.int32(0)))

    python, native_out = _both_tiers(native_loops, remat.jit(run), np.arange(4.0, dtype=np.float32),
                                     30)
    _assert_close(native_out, python, 1e-6)
    assert "ready" in _states(native_loops)


def test_loops_with_unsupported_primitives_stay_on_python(native_loops):
    def run(x):  # cumsum has no native rule: the loop keeps the Python tier, correctly
        return lax.scan(lambda c, _: (jnp.cumsum(c) * 0.5, None), x, None, length=5)[0]

    want = np.asarray(remat.jit(run)(np.ones(3, np.float32)))
    assert np.allclose(want, remat.jit(run)(np.ones(3, np.float32)))
    assert "unsupported" in _states(native_loops)


def test_flag_off_keeps_the_python_tier():
    from remat.exec import native

    def run(x):
        return lax.scan(lambda c, _: (c * 0.5 + 1.0, None), x, None, length=3)[0]

    with config.override("remat_native_loops", False), native.eager():
        remat.jit(run)(np.ones(2, np.float32))
        remat.jit(run)(np.ones(2, np.float32))
    assert "ready" not in _states(native) or not native.enabled()


def test_memory_accounting_matches_the_python_tier(native_loops):
    def loss(x):
        def body(c, _):
            c = jnp.tanh(c * 1.1 + 0.2)
            return c, c * c
        c, ys = lax.scan(body, x, None, length=200)
        return jnp.sum(c) + jnp.sum(ys)

    fn = remat.jit(remat.grad(loss))
    x = np.linspace(-1, 1, 500, dtype=np.float32)
    fn(x)
    native_peak = remat.memory.peak_memory(fn, x)
    with config.override("remat_native_loops", False):
        python_peak = remat.memory.peak_memory(fn, x)
    # the stacked residuals dominate; an iteration is accounted at its plan's modelled peak
    assert python_peak > 200 * 500 * 4
    assert abs(native_peak - python_peak) <= 8 * 500 * 4


_CACHE_SCRIPT = textwrap.dedent("""
    import numpy as np, remat, remat.numpy as jnp
    from remat.exec import native
    f = remat.jit(lambda x: remat.lax.scan(lambda c, _: (jnp.cos(c) * 0.9, None), x, None,
                                           length=7)[0])
    with native.eager():
        out = f(np.ones(3, np.float32))
    (loop,) = [l for t in native._loops.values() for l in t.values()]
    print(loop.state, sum(loop.kernel.stats.cache_hits.values()),
          float(np.asarray(out)[0]))
""")


def test_kernels_are_cached_across_processes(tmp_path):
    env = {**os.environ, "REMAT_CACHE_DIR": str(tmp_path), "REMAT_NATIVE_LOOPS": "1",
           "PYTHONPATH": os.pathsep.join(sys.path)}
    runs = [subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    assert runs[0][0] == runs[1][0] == "ready"
    assert runs[0][1] == "0" and int(runs[1][1]) >= 1  # compiled, then loaded
    assert runs[0][2] == runs[1][2]
    assert list((tmp_path / "native").glob("remat_loop_*.py"))


def test_cache_key_changes_with_the_kernels_module(monkeypatch):
    from remat.exec import native

    key = native._cache_key("source")
    monkeypatch.setattr(native, "_KERNELS_DIGEST", "changed")
    assert native._cache_key("source") != key
    assert native._cache_key("other source") != native._cache_key("source")


def test_flag_from_the_environment():
    code = "import remat; print(remat.config.remat_native_loops)"
    for value, want in (("0", "False"), ("1", "True")):
        env = {**os.environ, "REMAT_NATIVE_LOOPS": value, "PYTHONPATH": os.pathsep.join(sys.path)}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert out == want


def test_hot_loops_compile_in_the_background(monkeypatch):
    from remat.exec import native

    monkeypatch.setattr(native, "HOT_SECONDS", 0.0)

    def run(x):
        return lax.scan(lambda c, _: (c * 0.25 + jnp.exp(-c), None), x, None, length=9)[0]

    f = remat.jit(run)
    x = np.full(2, 0.5, np.float32)
    with config.override("remat_native_loops", True):
        first = f(x)  # returns on the Python tier while the kernel compiles
        native.wait()
        assert "ready" in _states(native)
        np.testing.assert_allclose(f(x), first, rtol=1e-6)


def test_remaining_reductions(native_loops):
    def body(c, x):
        p = jnp.prod(1.0 + 0.1 * c, axis=0)                      # reduce_prod
        k = jnp.argmin(c, axis=1).astype(jnp.float32)            # argmin
        a = jnp.any(c > 0.5, axis=1) & jnp.all(c > -2.0, axis=1)  # reduce_or, reduce_and
        new = c * 0.9 + x + 0.01 * (p + k[:, None] + a[:, None])
        return new, jnp.max(new, axis=(0, 1)) - jnp.min(new, axis=0)

    xs = np.random.default_rng(1).standard_normal((6, 3, 4)).astype(np.float32)
    run = remat.jit(lambda c: lax.scan(body, c, xs))
    python, native_out = _both_tiers(native_loops, run, np.zeros((3, 4), np.float32))
    _assert_close(native_out, python, 1e-6)
    assert "ready" in _states(native_loops)


def test_effects_in_a_loop_kernel_run_every_iteration_in_order(capsys):
    def body(c, x):
        remat.debug.print("step {}", 7)  # invariant operands: still once per iteration
        remat.debug.print("x {}", x)
        return c + x, None

    remat.jit(lambda xs: lax.scan(body, np.float32(0), xs)[0])(np.arange(3.0, dtype=np.float32))
    assert capsys.readouterr().out.splitlines() == [
        "step 7", "x 0.0", "step 7", "x 1.0", "step 7", "x 2.0"]
