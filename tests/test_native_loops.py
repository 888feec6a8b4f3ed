"""The native loop tier (``remat.exec.native``): loops of tiny arrays compiled with numba agree
with the generated-Python tier on every primitive it writes, on every carry/xs/ys structure,
under grad and jit; kernels are cached on disk across processes; the flag turns it off."""

import functools
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax, memory
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


def _new_python_kernels(fn, *args):
    """Run ``fn`` on the Python tier, check it bit for bit against the plans run step by
    step, and return the Python-tier kernels of the loops it made (other tests' loops may
    still be alive)."""
    from remat.exec import native

    def loops():
        return [loop for table in native._loops.values() for loop in table.values()]

    earlier = loops()  # (held: a loop freed meanwhile could lend a new one its id)
    seen = {id(loop) for loop in earlier}
    with config.override("remat_native_loops", False):
        got = fn(*args)
        with remat.exec.interpreted():
            want = fn(*args)
    for g, e in zip(remat.tree_util.tree_leaves(got), remat.tree_util.tree_leaves(want)):
        g, e = np.ascontiguousarray(g), np.ascontiguousarray(e)
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_array_equal(g.reshape(-1).view(np.uint8), e.reshape(-1).view(np.uint8))
    return [loop.python for loop in loops() if id(loop) not in seen
            and loop.python is not None]


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


_WARM_SCRIPT = textwrap.dedent("""
    import numpy as np, remat, remat.numpy as jnp
    from remat.exec import native
    f = remat.jit(lambda x: remat.lax.scan(lambda c, _: (jnp.cos(c) * 0.9, None), x, None,
                                           length=7)[0])
    x = np.ones(3, np.float32)
    first = f(x)
    (loop,) = [l for t in native._loops.values() for l in t.values()]
    calls = []
    python = loop.python
    loop.python = lambda *args: calls.append(1) or python(*args)
    second = f(x)
    print(loop.state, len(calls), float(np.asarray(first)[0]) == float(np.asarray(second)[0]))
""")


def test_a_kernel_compiled_before_is_native_from_the_second_call(tmp_path):
    """A loop whose kernel an earlier process compiled loads it from the cache while its first
    call runs: the second call is native, although the loop never ran hot (the threshold set
    out of reach)."""
    env = {**os.environ, "REMAT_CACHE_DIR": str(tmp_path), "REMAT_NATIVE_LOOPS": "1",
           "PYTHONPATH": os.pathsep.join(sys.path), "REMAT_NATIVE_HOT_SECONDS": "1e9"}

    def run(script):
        return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, check=True).stdout.split()

    assert run(_WARM_SCRIPT) == ["cold", "1", "True"]  # nothing cached: the Python tier
    assert run(_CACHE_SCRIPT)[0] == "ready"  # compiled, its types recorded
    assert run(_WARM_SCRIPT) == ["ready", "0", "True"]


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


def test_hot_loops_compile_in_the_background(monkeypatch, tmp_path):
    """A hot loop's kernel compiles in another process (not contending for this one's GIL);
    this process loads its machine code from the cache."""
    from remat.exec import native

    monkeypatch.setattr(native, "HOT_SECONDS", 0.0)
    monkeypatch.setattr(native, "CACHE_DIR", tmp_path)
    elsewhere = []
    compile_elsewhere = native._compile_elsewhere
    monkeypatch.setattr(native, "_compile_elsewhere",
                        lambda *args: elsewhere.append(compile_elsewhere(*args)))

    def run(x):
        return lax.scan(lambda c, _: (c * 0.25 + jnp.exp(-c), None), x, None, length=9)[0]

    before = {id(loop) for t in native._loops.values() for loop in t.values()}
    f = remat.jit(run)
    x = np.full(2, 0.5, np.float32)
    with config.override("remat_native_loops", True):
        first = f(x)  # returns on the Python tier while the kernel compiles
        native.wait()
        assert "ready" in _states(native)
        np.testing.assert_allclose(f(x), first, rtol=1e-6)
    assert elsewhere == [True]
    (kernel,) = [loop.kernel for t in native._loops.values() for loop in t.values()
                 if id(loop) not in before and loop.kernel is not None]
    assert sum(kernel.stats.cache_hits.values()) == 1 and not kernel.stats.cache_misses


def test_the_compiling_process_stays_for_the_next_batch(monkeypatch, tmp_path, new_loops):
    """One process compiles batch after batch (a new one's start, numba's import and first
    compile cost most of a second each time); one that has left is replaced."""
    from remat.exec import native

    monkeypatch.setattr(native, "HOT_SECONDS", 0.0)
    monkeypatch.setattr(native, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(native, "_dispatchers", {})  # (none compiled in this process yet)
    x = np.full(2, 0.5, np.float32)

    asked = []
    ask = native._ask_compiler
    monkeypatch.setattr(native, "_ask_compiler", lambda batch: asked.append(1) or ask(batch))

    def compiled(step):  # (bodies of other sources: a constant alone would not make one)
        f = remat.jit(lambda x: lax.scan(lambda c, _: (step(c), None), x, None, length=7)[0])
        with config.override("remat_native_loops", True):
            (loop,) = new_loops(lambda: f(x))
            native.wait()
            assert loop.state == "ready", loop.error
        return native._compiler_process[0]

    first = compiled(lambda c: c * 0.5 + jnp.exp(-c))
    assert first is not None and first.poll() is None
    assert compiled(lambda c: c * 0.375 - jnp.sin(c)) is first
    assert len(asked) == 2
    first.kill()
    first.wait()
    again = compiled(lambda c: c * 0.125 + jnp.cos(c))
    assert again is not first and again.poll() is None
    assert len(asked) == 3
    # a process that leaves without answering (an idle one, just as a batch came): asked again
    leaving = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    native._compiler_process[0] = leaving
    again.stdin.close()  # (the one it stands in for leaves too)
    last = compiled(lambda c: c * 0.0625 - jnp.tanh(c))
    assert last is not leaving and last.poll() is None and leaving.returncode == 0
    assert len(asked) == 5


def test_hot_kernels_compile_one_process_at_a_time(monkeypatch, tmp_path):
    """Kernels hot at once queue for one compiling process, which takes them in batches: a
    plan's many clusters, each compiled in a process of its own at once, took a GPT step from
    0.5 s to 7 s on two cores."""
    from remat.exec import native

    monkeypatch.setattr(native, "HOT_SECONDS", 0.0)
    monkeypatch.setattr(native, "CACHE_DIR", tmp_path)
    batches, running = [], []
    compile_elsewhere = native._compile_elsewhere

    def counted(jobs):
        running.append(1)
        batches.append((len(jobs), len(running)))
        try:
            return compile_elsewhere(jobs)
        finally:
            running.pop()

    monkeypatch.setattr(native, "_compile_elsewhere", counted)
    monkeypatch.setattr(native, "_dispatchers", {})  # (none compiled in this process yet)

    def run(x):  # (three bodies of three sources: constants alone would share one)
        for step in (lambda c: c * 0.5 + jnp.exp(-c), lambda c: c * 0.375 - jnp.sin(c),
                     lambda c: c * 0.125 + jnp.cos(c)):
            x = lax.scan(lambda c, _, step=step: (step(c), None), x, None, length=5)[0]
        return x

    f = remat.jit(run)
    x = np.full(2, 0.5, np.float32)
    with config.override("remat_native_loops", True):
        first = f(x)
        native.wait()
        np.testing.assert_allclose(f(x), first, rtol=1e-6)
    assert sum(n for n, _ in batches) == 3 and len(batches) < 3
    assert max(at_once for _, at_once in batches) == 1


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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_sums_round_as_numpys_over_every_layout_of_axes(dtype):
    """``sum_in_numpy_order`` gives NumPy's ``add.reduce`` bit for bit on C-contiguous
    operands: pairwise along a reduced innermost run (past 128 and 8192 elements), in order
    across the rest, size-1 axes dropped, zeros' signs as NumPy's."""
    from remat.exec import native_kernels
    from remat.exec.native_rules import numpy_sum_order

    rng = np.random.default_rng(7)
    cases = [((), ()), ((12,), (0,)), ((9000,), (0,)), ((3, 200), (1,)), ((200, 3), (0,)),
             ((2, 1, 300, 1), (2,)), ((200, 1), (0,)), ((4, 5, 6, 7), (0, 2)),
             ((4, 5, 6, 7), (1, 3)), ((4, 5, 6, 7), (0, 1, 2, 3)), ((4, 5, 6), ()),
             ((3, 140), (0, 1)), ((5, 2), (1,))]
    for shape, axes in cases:
        x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-4, 4, shape)).astype(dtype)
        for operand in (x, -np.zeros(shape, dtype)):
            want = np.add.reduce(operand, axis=axes, dtype=dtype)
            sizes, kept_strides, inner, inner_reduced = numpy_sum_order(shape, axes)
            rows = np.ascontiguousarray(operand).reshape((int(np.prod(sizes)), inner))
            out = np.empty(int(np.prod(np.shape(want))), dtype)
            got = native_kernels.sum_in_numpy_order(rows, sizes, kept_strides, inner_reduced,
                                                    out).reshape(np.shape(want))
            if sizes == (1,) and inner_reduced:  # (a whole sum: the kernels call this)
                assert dtype(0) + native_kernels.pairwise_sum(rows.ravel(), 0, inner) == got
            assert np.array_equal(got, want) and \
                np.array_equal(np.signbit(got), np.signbit(want)), (shape, axes)


def test_a_float32_sum_in_a_loop_rounds_alike_on_both_tiers(native_loops):
    """A float32 sum that a float64 accumulator rounds differently (2**24 plus ones: float32
    drops each one) gives the Python tier's bits natively too."""
    big = np.array([2.0 ** 24] + [1.0] * 11, np.float32).reshape(3, 4)

    def body(c, x):
        total = jnp.sum(c * x) + jnp.sum(c * x, axis=0)[1]
        return c, total

    run = remat.jit(lambda c, xs: lax.scan(body, c, xs))
    xs = np.ones((5, 3, 4), np.float32)
    assert np.float32(np.add.reduce(big.ravel())) != np.float32(big.astype(np.float64).sum())
    python, native_out = _both_tiers(native_loops, run, big, xs)
    assert "ready" in _states(native_loops)
    np.testing.assert_array_equal(np.asarray(native_out[1]), np.asarray(python[1]))


@pytest.mark.parametrize("shape,axes", [((40,), (0,)), ((2, 13), (1,)), ((5,), (0,)),
                                        ((128,), (0,)), ((3, 4, 17), (0, 2)),
                                        ((4, 1, 9), (2,)), ((2, 3, 100), (0, 1, 2)),
                                        ((7, 5), (0,))])
def test_native_sums_of_fused_values_round_as_the_python_tier(native_loops, shape, axes):
    """A sum of values computed in the fused loops (pairwise written into them along one
    short axis, the helper over a longer run, in order over leading axes) gives the Python
    tier's bits."""
    rng = np.random.default_rng(3)
    c0 = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 5, shape)).astype(np.float32)
    xs = rng.standard_normal((4,) + shape).astype(np.float32)

    def body(c, x):
        return c * 0.999, jnp.sum(c * x - 0.5 * x, axis=axes)

    run = remat.jit(lambda c, xs: lax.scan(body, c, xs))
    python, native_out = _both_tiers(native_loops, run, c0, xs)
    assert "ready" in _states(native_loops)
    np.testing.assert_array_equal(np.asarray(native_out[1]), np.asarray(python[1]))


def test_effects_in_a_loop_kernel_run_every_iteration_in_order(capsys):
    def body(c, x):
        remat.debug.print("step {}", 7)  # invariant operands: still once per iteration
        remat.debug.print("x {}", x)
        return c + x, None

    remat.jit(lambda xs: lax.scan(body, np.float32(0), xs)[0])(np.arange(3.0, dtype=np.float32))
    assert capsys.readouterr().out.splitlines() == [
        "step 7", "x 0.0", "step 7", "x 1.0", "step 7", "x 2.0"]


# --- fused elementwise chains on random programs ---------------------------------------------
# The native tier computes chains of elementwise and index-remapping work as explicit index
# loops (one per value some equation needs as an array). Random scan bodies (seeded) over
# floats, ints and bools, with broadcasting, scalars, selects, comparisons, rolls, pads,
# flips, transposes, slices, dynamic slices and sums must agree with the Python tier, values
# and gradients.


def _random_body(seed, n_ops=14):
    """A scan body ``(f, i, b), x -> (f', i', b'), ys`` of ``n_ops`` random operations."""
    def body(carry, x):
        rng = np.random.default_rng(seed)  # (the same program at every trace)
        f, i, b = carry
        floats, ints, bools = [f, x, f * 0.5 + x], [i], [b]

        def pick(pool):
            return pool[int(rng.integers(len(pool)))]

        for _ in range(n_ops):
            a, c = pick(floats), pick(floats)
            kind = int(rng.integers(12))
            if kind == 0:
                unary = [jnp.sin, jnp.tanh, remat.nn.sigmoid, jnp.negative, jnp.abs,
                         lambda v: jnp.exp(jnp.clip(v, -4, 4)), lambda v: jnp.log1p(v * v),
                         lambda v: jnp.sqrt(jnp.abs(v) + 0.5), jnp.square, lambda v: v ** 3,
                         lambda v: lax.rsqrt(v * v + 1.0), jnp.cos, jnp.floor, jnp.sign]
                floats.append(unary[int(rng.integers(len(unary)))](a))
            elif kind == 1:
                binary = [jnp.add, jnp.subtract, jnp.multiply, jnp.maximum, jnp.minimum,
                          lambda u, v: u / (1.0 + jnp.abs(v)), jnp.arctan2]
                floats.append(binary[int(rng.integers(len(binary)))](a, c))
            elif kind == 2:  # scalars and broadcasting of rows and columns
                floats.append([a * 1.5 - 0.25, a + a[0], a * a[:, 1:2], 2.0 - a,
                               a + jnp.sum(x) * 0.1][int(rng.integers(5))])
            elif kind == 3:  # comparisons and selects
                pred = [a > 0.1, a <= c, pick(bools), (pick(ints) % 3) == 1][int(rng.integers(4))]
                floats.append(jnp.where(pred, a, c * 0.5))
                bools.append(pred)
            elif kind == 4:  # index remaps: rolls, flips, pads, transposes, slices
                floats.append([jnp.roll(a, 1, axis=1), jnp.roll(a, -2, axis=0),
                               jnp.flip(a, axis=1), jnp.pad(a[:, 1:], ((0, 0), (1, 0))),
                               jnp.pad(a[1:], ((0, 1), (0, 0)), constant_values=0.5),
                               a.T.reshape(a.shape[::-1]).T,
                               jnp.concatenate([a[:, 2:], a[:, :2]], axis=1),
                               lax.dynamic_update_slice(a, a[:1, :2] * 2.0, (i[0, 0] % 3, 1)),
                               lax.dynamic_slice(jnp.pad(a, 1), (i[0, 1] % 2, 1), a.shape)][
                    int(rng.integers(9))])
            elif kind == 5:  # sums (in NumPy's order), broadcast back
                floats.append([a - jnp.sum(a, axis=0) * 0.2, a + jnp.sum(c, axis=1, keepdims=True),
                               a * jnp.mean(c)][int(rng.integers(3))])
            elif kind == 6:
                floats.append(jnp.clip(a, -1.5, 1.5) + pick(ints).astype(a.dtype) * 0.01)
            elif kind == 7:
                floats.append(a + pick(bools).astype(a.dtype))
            elif kind == 8:  # integer work
                j, k = pick(ints), pick(ints)
                ints.append([j + k, j * 3 - k, jnp.maximum(j, k), jnp.where(pick(bools), j, -k),
                             (j & 7) ^ k, ~j, jnp.roll(j, 1, axis=1), jnp.abs(j) % 5,
                             (a > 0).astype(j.dtype) + j, j // 2][int(rng.integers(10))])
            elif kind == 9:  # boolean work
                p, q = pick(bools), pick(bools)
                bools.append([p & q, p | (pick(ints) > 2), ~p, p ^ q, p & (a < c)][
                    int(rng.integers(5))])
            elif kind == 10:
                floats.append(lax.select(pick(bools), a, c) * 0.9)
            else:
                floats.append(a.astype(jnp.int32).astype(a.dtype) * 0.1 + c)
        out_f = jnp.tanh(sum(floats[-3:]) * 0.3 + f * 0.5)
        out_i = (ints[-1] + ints[0]) % 1000
        out_b = bools[-1] ^ b
        return (out_f, out_i, out_b), (floats[-1], ints[-1], bools[-1])
    return body


def _run_random(body, f32):
    dtype = np.float32 if f32 else np.float64
    rng = np.random.default_rng(0)
    f0 = rng.standard_normal((3, 5)).astype(dtype)
    i0 = rng.integers(-5, 6, (3, 5)).astype(np.int32)
    b0 = rng.random((3, 5)) > 0.5
    xs = rng.standard_normal((5, 3, 5)).astype(dtype)

    def loss(f0, xs):
        (f, i, b), (yf, yi, yb) = lax.scan(body, (f0, i0, b0), xs)
        return jnp.sum(f * f) + jnp.sum(yf), (f, i, b, yf, yi, yb)

    return remat.jit(remat.value_and_grad(loss, argnums=(0, 1), has_aux=True)), (f0, xs)


def _assert_agree(got, want, rtol):
    for g, w in zip(remat.tree_util.tree_leaves(got), remat.tree_util.tree_leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("f32", [True, False], ids=["float32", "float64"])
def test_fused_random_chains_agree_with_python_tier(native_loops, seed, f32):
    body = _random_body(seed)
    with config.override("jax_enable_x64", not f32):
        fn, args = _run_random(body, f32)
        python, native_out = _both_tiers(native_loops, fn, *args)
        states = _states(native_loops)
    assert states.count("ready") >= 2, states  # the forward and the backward kernels
    _assert_agree(native_out, python, 1e-4 if f32 else 1e-9)


def test_weight_gradients_in_a_loop_body_are_products_written_transposed():
    """A weight's gradient ``(g.T @ x).T`` (JAX's transpose of ``x @ w``) is one product with
    its operands swapped in the optimized body: no transpose is left for the accumulating add
    to read across its rows, and the Python tier stays the interpreter's bit for bit."""
    from remat.exec.passes import optimize_jaxpr

    rng = np.random.default_rng(3)
    p = {"wx": rng.standard_normal((5, 7)).astype(np.float32),
         "wh": rng.standard_normal((7, 7)).astype(np.float32) / 3}
    xs = rng.standard_normal((6, 4, 5)).astype(np.float32)

    def loss(p, xs):
        h, _ = lax.scan(lambda h, x: (jnp.tanh(x @ p["wx"] + h @ p["wh"]), None),
                        jnp.zeros((4, 7), jnp.float32), xs)
        return jnp.sum(h * h)

    fn = remat.jit(remat.grad(loss))
    scans = [e for e in fn.lower(p, xs).jaxpr.eqns if e.primitive.name == "scan"]
    backward = optimize_jaxpr(scans[-1].params["jaxpr"].jaxpr)
    names = [e.primitive.name for e in backward.eqns]
    assert "transpose" not in names and names.count("dot_general") >= 3
    with config.override("remat_native_loops", False):
        got = fn(p, xs)
        with remat.exec.interpreted():
            want = fn(p, xs)
    for g, w in zip(remat.tree_util.tree_leaves(got), remat.tree_util.tree_leaves(want)):
        assert np.asarray(g).flags.c_contiguous
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    eager = remat.grad(loss)(p, xs)  # (a product, then its transpose)
    for g, e in zip(remat.tree_util.tree_leaves(got), remat.tree_util.tree_leaves(eager)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5, atol=1e-6)


def test_native_float32_exp_is_within_3_ulp_of_expf():
    """The native tier's float32 ``exp`` (and ``logistic``) is a vectorizable polynomial:
    within 3 ulp of NumPy's over the normal range; inf, NaN, overflow and underflow exact."""
    from numba import njit

    from remat.exec import native_kernels

    @njit(error_model="numpy")
    def exp_all(x):
        out = np.empty_like(x)
        for k in range(x.size):
            out[k] = native_kernels.exp_value(x[k])
        return out

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-104, 89, 400_000), rng.uniform(-3, 3, 400_000)])
    x = x.astype(np.float32)
    with np.errstate(over="ignore"):
        got, want = exp_all(x), np.exp(x)
    normal = (want > np.finfo(np.float32).tiny) & np.isfinite(want)
    ulps = np.abs(got[normal].view(np.int32).astype(np.int64)
                  - want[normal].view(np.int32).astype(np.int64))
    assert ulps.max() <= 3
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.8, 200.0, -110.0, -1e4],
                       np.float32)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(exp_all(special), np.exp(special))


def test_native_kernel_fuses_rolls_into_split_index_loops(native_loops):
    """A Lorenz-96 step: no array expression or concatenation is left in the loop, the
    rolls' loops are split where they wrap, and only the carry is allocated per iteration."""
    def step(x, _):
        dx = (jnp.roll(x, -1) - jnp.roll(x, 2)) * jnp.roll(x, 1) - x + 8.0
        return x + 0.01 * dx, jnp.sum(dx * dx)

    run = remat.jit(lambda x: lax.scan(step, x, None, length=20))
    x = np.linspace(0, 1, 12, dtype=np.float32)
    python, native_out = _both_tiers(native_loops, run, x)
    _assert_close(native_out, python, 1e-6)
    (loop,) = [loop for table in native_loops._loops.values() for loop in table.values()
               if loop.source and "(12, )" in loop.source]  # (earlier tests' may be alive)
    assert loop.state == "ready"
    body = loop.source.split("for it in range(length):")[1]
    assert "np.concatenate" not in body and "range(2, 11)" in body
    assert body.count("np.empty") == 1  # (the new carry; every other buffer is reused)


def test_python_tier_hoists_invariant_work_through_a_checkpoints_barrier():
    """A checkpointed body's recomputation reads the loop's constants through an
    optimization barrier: the Python tier passes them on unchanged, so work on them alone (a
    bias broadcast) runs once before the loop, and the results stay the interpreter's."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 6)).astype(np.float32) / 3
    b = rng.standard_normal(6).astype(np.float32)
    xs = rng.standard_normal((7, 4, 6)).astype(np.float32)

    def loss(w, b, xs):
        body = remat.checkpoint(lambda h, x: (jnp.tanh(h @ w + x + b), None))
        h, _ = lax.scan(body, jnp.zeros((4, 6), jnp.float32), xs)
        return jnp.sum(h * h)

    kernels = [k for k in _new_python_kernels(remat.jit(remat.grad(loss, argnums=(0, 1))),
                                              w, b, xs) if "xs1" in k.source_lines[0]]
    assert len(kernels) == 1
    for kernel in kernels:  # the backward loop: the broadcast sits before the loop
        lines = kernel.source_lines
        loop_at = next(i for i, line in enumerate(lines) if line.strip().startswith("for it"))
        assert any("broadcast" in str(kernel.__globals__.get(name))
                   for line in lines[:loop_at] for name in line.replace("(", " ").split()
                   if name in kernel.__globals__)


@pytest.mark.parametrize("axis", [0, 1])
def test_python_tier_writes_concatenated_slices_as_one_gather(axis):
    """Rolls and stencil shifts (slices of one array, concatenated along the sliced axis) are
    one indexing by a constant index on the Python tier, and their transposes' slice-adds one
    indexed add: bit for bit the interpreter's, also with strided slices, a slice read
    elsewhere too, a loop-invariant array, and slices of two arrays (left as they were)."""
    rng = np.random.default_rng(6)
    x0 = rng.standard_normal((8, 10)).astype(np.float32)
    c = rng.standard_normal((8, 10)).astype(np.float32)

    def body(x, _):
        n = x.shape[axis]
        ix = lambda a, lo, hi, st=1: lax.slice_in_dim(a, lo, hi, st, axis=axis)  # noqa: E731
        shifted = jnp.roll(x, -3, axis=axis) - 2 * jnp.roll(x, 1, axis=axis)
        head = ix(x, 0, 2)
        strided = lax.concatenate([ix(x, 1, n, 2), ix(x, 0, n, 2)], axis)
        invariant = lax.concatenate([ix(c, 2, n), ix(c, 0, 2)], axis)
        mixed = lax.concatenate([ix(x, 0, n - 2), ix(c, 0, 2)], axis)
        partial = lax.concatenate([ix(x, 2, 5), ix(x, 0, 1)], axis)
        new = jnp.tanh(shifted + strided * invariant - mixed)
        return new, jnp.sum(head * head) + jnp.sum(jnp.sin(partial))

    def loss(x):
        x, ys = lax.scan(body, x, None, length=5)
        return jnp.sum(x * x) + jnp.sum(ys)

    kernels = _new_python_kernels(remat.jit(remat.value_and_grad(loss)), x0)
    (forward,) = [k for k in kernels if "ys0" in k.source_lines[0]]
    (backward,) = [k for k in kernels if "xs0" in k.source_lines[0]]
    lines = forward.source_lines
    loop_at = next(i for i, line in enumerate(lines) if line.strip().startswith("for it"))
    gathered = re.compile(r"f[0-9]+\(\w+, g[0-9]+, [0-9]+, g[0-9]+\)")
    assert sum(bool(gathered.search(line)) for line in lines) == 5  # the two rolls, the
    # strided pair, the partial pair, the invariant pair (hoisted before the loop)
    assert any(gathered.search(line) for line in lines[:loop_at])
    assert sum("np.concatenate" in line for line in lines[loop_at:]) == 1  # (the mixed one)
    # the transposes: each roll's two slice-adds one permuted add, the partial pair's one
    # indexed add into its two targets
    adds = [line.strip() for line in backward.source_lines if "+=" in line]
    assert sum(bool(re.fullmatch(r"t[0-9]+ \+= t[0-9]+\[(:, )*g[0-9]+\]", a))
               for a in adds) == 2, adds
    assert sum(bool(re.fullmatch(r"t[0-9]+\[(:, )*g[0-9]+\] \+= t[0-9]+\[(:, )*g[0-9]+\]", a))
               for a in adds) == 1, adds


@pytest.mark.parametrize("order", ["C", "F"])
def test_python_tier_gather_has_the_concatenations_layout(order):
    """A gather of slices along a later axis is laid out as the plans' concatenation (C order
    for a C-order array; ``x[:, index]`` puts the indexed axis outermost), so a sum over it and
    the next axis adds in the interpreter's order, bit for bit (``_new_python_kernels``)."""
    x0 = np.random.default_rng(0).standard_normal((64, 2, 3))
    x0 = np.asfortranarray(x0) if order == "F" else x0

    def body(x, _):
        y = lax.concatenate([x[:, 1:], x[:, :1]], 1)
        return x, jnp.sum(y, axis=(1, 2))

    def f(x):
        x = x if order == "C" else jnp.transpose(jnp.transpose(x) * 1.0)
        return lax.scan(body, x, None, length=2)[1]

    (kernel,) = _new_python_kernels(remat.jit(f), x0)
    assert not any("[:, g" in line for line in kernel.source_lines)


def test_python_tier_writes_small_matrix_products_as_the_impls_matmul():
    """A matrix product too small to split is the impl's own ``np.matmul`` call in a
    Python-tier kernel, in each contraction the impl runs that way (the gradient's
    transposed operands included): bit for bit the interpreter's; a product large enough to
    split across the workers still calls the impl."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((16, 16)).astype(np.float32) / 4
    big = rng.standard_normal((256, 256)).astype(np.float32) / 16
    xs = rng.standard_normal((4, 8, 16)).astype(np.float32)

    def loss(w, big, xs):
        def body(h, x):
            h = jnp.tanh(h @ w + x)
            return h, jnp.sum((big @ big)[:8, :16] * h)
        h, ys = lax.scan(body, jnp.zeros((8, 16), jnp.float32), xs)
        return jnp.sum(h * h) + jnp.sum(ys)

    sources = ["\n".join(kernel.source_lines) for kernel in
               _new_python_kernels(remat.jit(remat.grad(loss, argnums=(0, 1))), w, big, xs)]
    text = "\n".join(sources)
    assert re.search(r"= np\.matmul\(c[0-9]+, k[0-9]+\)", text)  # h @ w
    assert re.search(r"= np\.matmul\(t[0-9]+, k[0-9]+\)", text)  # its transpose for h's
    # gradient, on the loop's contiguous copy of w.T (``loop_constants``)
    assert not re.search(r"np\.matmul\([^)]*k[0-9]+\.T\)", text)
    assert re.search(r"= np\.matmul\(t[0-9]+\.T, t[0-9]+\)", text)  # w's gradient
    # the big product's gradient (256 x 256 x 256 multiply-adds): the impl, which splits it
    impl_calls = r"_normalized\(f[0-9]+\((k[0-9]+, t[0-9]+|t[0-9]+, k[0-9]+), "
    assert len(re.findall(impl_calls, text)) == 2


def test_python_tier_accumulates_a_carry_in_its_own_buffer():
    """A carry whose one use gives its next value (a weight gradient summed over the steps)
    is updated in place on the Python tier, in a scan and a while loop: bit for bit the
    interpreter's, the caller's initial carry untouched (the kernel updates its own copy),
    and a carry read twice, or whose next value is also stored, still gets a new array."""
    rng = np.random.default_rng(8)
    w = (rng.standard_normal((16, 16)) / 4).astype(np.float32)
    xs = rng.standard_normal((6, 8, 16)).astype(np.float32)

    def loss(w, xs):
        def body(h, x):
            h = jnp.tanh(h @ w + x)
            return h, jnp.sum(h * h)
        h, ys = lax.scan(body, jnp.zeros((8, 16), jnp.float32), xs)
        return jnp.sum(h) + jnp.sum(ys)

    def loop(acc0, twice0, kept0, xs):
        def body(carry, x):
            acc, twice, kept = carry
            nxt = kept * 0.5 + x
            return (acc + x * x, twice + twice * x, nxt), nxt
        return lax.scan(body, (acc0, twice0, kept0), xs)

    def counted(acc0, xs):
        def body(c):
            i, acc = c
            return i + 1, acc - xs[i] * 0.25
        return lax.while_loop(lambda c: c[0] < xs.shape[0], body, (0, acc0))[1]

    grads = _new_python_kernels(remat.jit(remat.grad(loss)), w, xs)
    (backward,) = [k for k in grads if any("i = length - 1 - it" in line
                                           for line in k.source_lines)]
    in_place = [line.strip() for line in backward.source_lines if "out=c" in line]
    assert in_place and all(re.fullmatch(r"t[0-9]+ = u[0-9]+\((c[0-9]+), .*, out=\1\)", line)
                            for line in in_place), in_place
    init = [np.ones((8, 16), np.float32) for _ in range(3)]
    before = [a.copy() for a in init]
    (scan,) = _new_python_kernels(remat.jit(loop), *init, xs)
    text = "\n".join(scan.source_lines)
    assert len(re.findall(r"out=c[0-9]+\)", text)) == 1, text  # acc only
    acc0 = jnp.asarray(init[0])
    (while_kernel,) = _new_python_kernels(remat.jit(counted), acc0, xs)
    assert re.search(r"out=c1\)", "\n".join(while_kernel.source_lines))
    for a, b in zip(init + [np.asarray(acc0)], before + [before[0]]):
        np.testing.assert_array_equal(a, b)


def test_python_tier_slice_adds_keep_the_pads_zero_additions():
    """``base + pad(y, 0.0)`` adds 0.0 to every element of ``base`` outside ``y``'s part:
    -0.0 becomes 0.0 there. The slice-add written for it must too, also when ``base`` is a
    new array it could take over (its -0.0 came out unchanged)."""
    def f(c0):
        def body(c, _):
            base = c * -1.0  # -0.0 where c is 0.0
            return base + lax.pad(c[:2] * 2.0, 0.0, ((1, 1, 0),)), None
        return lax.scan(body, c0, None, length=1)[0]

    c0 = np.array([0.0, 1.0, 0.0, 0.0], np.float32)
    (kernel,) = _new_python_kernels(remat.jit(f), c0)
    assert any(re.search(r"t[0-9]+\[1:3\] \+= ", line) for line in kernel.source_lines)
    np.testing.assert_array_equal(np.asarray(remat.jit(f)(c0)), [0.0, -1.0, 2.0, 0.0])
    np.testing.assert_array_equal(np.signbit(np.asarray(remat.jit(f)(c0))),
                                  [False, True, False, False])


def test_python_tier_adds_a_pad_used_by_several_adds_into_each_accumulator():
    """A GRU's gradient: the slices of ``x @ wx`` and ``h @ wh`` a gate reads share their
    cotangent, one zero pad read by both products' sums of pads. Each sum is one buffer of
    zeros with its pieces added in (the shared piece computed once), never the padded copies
    and their full-size adds; bit for bit the interpreter's, with -0.0 and pieces that
    overlap."""
    def body(h, x):
        gx, gh = x @ jnp.ones((4, 6), np.float32), h @ jnp.full((4, 6), 0.5, np.float32)
        shared = jnp.tanh(gx[:, :2] + gh[:, :2])  # read by both products' cotangents
        over = jnp.sin(gx[:, 1:4] * gh[:, 1:4])  # overlaps shared's part
        return shared.sum(1, keepdims=True) * over[:, :1] + h * gx[:, 4:5] - gh[:, 2:], None

    def loss(h, xs):
        return jnp.sum(lax.scan(body, h, xs)[0] ** 2)

    rng = np.random.default_rng(3)
    h0 = rng.standard_normal((3, 4)).astype(np.float32)
    xs = rng.standard_normal((5, 3, 4)).astype(np.float32)
    xs[0, 0] = -0.0
    h0[1] = 0.0
    kernels = _new_python_kernels(remat.jit(remat.grad(loss, argnums=(0, 1))), h0, xs)
    (backward,) = [k for k in kernels if "xs1" in k.source_lines[0]]
    lines = [line.strip() for line in backward.source_lines]
    assert sum("np.zeros((3, 6)" in line for line in lines) == 2, lines
    assert not any("np.full((3, 6" in line for line in lines), lines  # (no padded copies)
    assert sum(bool(re.fullmatch(r"t[0-9]+\[0:3, [0-9]+:[0-9]+\] \+= .+", line))
               for line in lines) >= 4, lines


def test_loops_read_a_constant_used_across_its_rows_from_a_transposed_copy():
    """``h @ w.T`` with ``w`` a loop constant (a dense layer's gradient) reads a contiguous
    copy of ``w.T`` made once per loop, in scans and while loops, on the plans and both loop
    tiers alike (bit for bit the same rewritten body); the copy is counted in memory while
    the loop runs, and the executor's memory model counts it too."""
    from remat.exec.loop_constants import held_bytes, transposed_constants

    rng = np.random.default_rng(9)
    w = (rng.standard_normal((16, 24)) / 4).astype(np.float32)
    xs = rng.standard_normal((5, 8, 24)).astype(np.float32)

    def scanned(w, xs):
        def body(h, x):  # (w read across its rows, then in order)
            return jnp.tanh((h @ w.T) @ w + x), None
        return lax.scan(body, jnp.zeros((8, 24), jnp.float32), xs)[0]

    def counted(w, h):  # (a while loop; its gradient's product reads w across its rows)
        def body(c):
            return c[0] + 1, jnp.sin((c[1] @ w.T) @ w)
        return lax.while_loop(lambda c: c[0] < 4, body, (0, h))[1]

    def gradient(w, xs, checkpointed=False):  # (JAX's transpose of u @ w: a product on
        def loss(w):                            # w's rows; checkpointed: in the body's
            def body(h, x):                     # recomputation, behind its barrier)
                return jnp.tanh(jnp.sin(h @ w.T) @ w + x), None
            body = remat.checkpoint(body) if checkpointed else body
            return jnp.sum(lax.scan(body, xs[0], xs)[0])
        return remat.grad(loss)(w)

    checkpointed = functools.partial(gradient, checkpointed=True)
    for fn, args in ((scanned, (w, xs)), (counted, (w, xs[0])), (gradient, (w, xs)),
                     (checkpointed, (w, xs))):
        for eqn in remat.make_jaxpr(fn)(*args).eqns:
            if eqn.primitive.name not in ("scan", "while"):
                continue
            body, n = (eqn.params["jaxpr"], eqn.params["num_consts"]) if \
                eqn.primitive.name == "scan" else (eqn.params["body_jaxpr"],
                                                   eqn.params["body_nconsts"])
            rewritten, sources = transposed_constants(body, n)
            assert sources and all(p == (1, 0) for _, p in sources)
            assert rewritten.jaxpr.invars[0].aval.shape == (24, 16)
            constants = set(rewritten.jaxpr.invars[:n + len(sources)])
            assert not any(e.primitive.name == "transpose" and e.invars[0] in constants
                           for e in rewritten.jaxpr.eqns)
            assert held_bytes(eqn.primitive.name, eqn.params) == len(sources) * w.nbytes
        kernels = _new_python_kernels(remat.jit(fn), *args)
        text = "\n".join("\n".join(k.source_lines) for k in kernels)
        assert kernels and "np.matmul(" in text, text
        assert not re.search(r"np\.matmul\([^)]*k[0-9]+\.T\)", text), text
        with remat.exec.interpreted():  # (the plans run the rewritten body too)
            np.testing.assert_array_equal(np.asarray(remat.jit(fn)(*args)),
                                          np.asarray(remat.jit(fn)(*args)))
        compiled = remat.jit(fn).lower(*args).compile()
        stats = compiled.memory_analysis()
        modelled = stats.peak_memory_in_bytes - stats.argument_size_in_bytes
        with remat.exec.interpreted():
            assert memory.peak_memory(compiled, *args) <= modelled
        assert memory.peak_memory(compiled, *args) <= modelled
        np.testing.assert_allclose(np.asarray(remat.jit(fn)(*args)),
                                   np.asarray(fn(*args)), rtol=1e-5, atol=1e-6)
    # a constant too large to hold twice for the loop's duration is read as it was
    from remat.exec.loop_constants import MAX_COPY_ELEMENTS
    n = MAX_COPY_ELEMENTS // 16 + 1
    big = remat.ShapeDtypeStruct((16, n), np.float32)
    h0 = remat.ShapeDtypeStruct((8, n), np.float32)
    eqn = next(e for e in remat.make_jaxpr(lambda w, h: lax.scan(
        lambda h, _: (jnp.tanh((h @ w.T) @ w), None), h, None, length=2)[0])(big, h0).eqns
        if e.primitive.name == "scan")
    assert transposed_constants(eqn.params["jaxpr"], eqn.params["num_consts"])[1] == []


def test_results_do_not_depend_on_which_buffers_the_plans_reuse():
    """A product of a transposed view and a broadcast has the view's layout; the plans wrote
    the next product into that buffer (keeping the layout) where a new array, as the Python
    tier makes, is in C order: the sum over it then added in another order (fuzz seed 62293:
    1 ulp). Results are written into a dying buffer only when it is in C order."""
    rng = np.random.default_rng(10)
    a = rng.standard_normal((2, 3, 2))
    c0 = rng.standard_normal((3, 2, 2))

    def f(a, c0):
        def body(c, _):
            h = lax.broadcast_in_dim(jnp.arange(2.0) + 1.0, (2, 3, 2), (0,))
            s = jnp.sum(jnp.transpose(c, (1, 0, 2)) * h * a)
            return 0.5 * (c + jnp.tanh(s)), s
        return lax.scan(body, c0, None, length=3)

    with config.override("jax_enable_x64", True):
        (kernel,) = _new_python_kernels(remat.jit(f), a, c0)
    assert "for it in range" in "\n".join(kernel.source_lines)


# --- issue 31 §1: a zero pad deferred as a slice-add whose use was not a slice-add -----------
# A zero pad whose every use is an ``add`` is written as slice-adds into the other operands
# (its var never bound); an add with a scalar literal operand (``x + 1.0``, or a broadcast zero
# cotangent that the plans' pass folds into a literal) is not written that way, and read the
# pad's unbound var: ``KeyError: Var(...)`` from the Python-tier kernel writer.


def _issue_31_run(ns, x, w, v):
    """The fuzzer's program of issue 31 (reconstructed) on ``ns`` (remat's or JAX's ``(jax,
    jnp, lax, checkpoint_name)``): a checkpointed scan body taking a ``value_and_grad`` of a
    loss with checkpoints, names, and a ``jit`` that ignores all but one of its many operands
    (its transpose's zero cotangents are added to the others')."""
    jax, jnp_, lax_, name = ns
    P = jax.checkpoint_policies
    C0, C1, C2 = (np.cos(np.arange(n) * 0.7 + k).reshape(s).astype(np.float32)
                  for k, (n, s) in enumerate([(24, (8, 3)), (9, (3, 3)), (9, (3, 3))]))

    def loss(e0, e1, e2):
        e3 = name(e0 @ e1, "a")
        e4 = e0.T
        e5 = jnp_.where(e1 > 0.1, e1, e1)
        e7 = jnp_.log1p(e2 * e2)

        def blk11_1_1(e7):
            def blk11_1_2(e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10):
                return (name(jnp_.concatenate([e0, e0], axis=0), "c"),)
            return jax.jit(blk11_1_2)(e0, e1, e2, e3, e4, e5, e5, e7, e5, e5, e5)

        (e11,) = jax.checkpoint(blk11_1_1, policy=P.save_any_names_but_these("b", "a"))(e7)
        e12 = jnp_.matmul(e4, e0)
        (e13,) = jax.checkpoint(lambda: (jnp_.einsum("ij,kj->ik", e4, e4),),
                                policy=P.nothing_saveable)()
        # (slices of the closed-over values: zero pads among their cotangents' terms)
        e14 = jnp_.sum(e1[1:] * e0[2:]) + jnp_.sum(e2[1:] * e0[0, 1:])
        return jnp_.sum(e11 * C0) + jnp_.sum(e12 * C1) + jnp_.sum(e13 * C2) + e14

    def body(c, _):
        val, (gx, gw, gv) = jax.value_and_grad(loss, argnums=(0, 1, 2))(c, w, v)
        return c - 0.01 * gx, (val, gw, gv)

    return lax_.scan(jax.checkpoint(body), x, None, length=3)


def test_issue_31_program_on_both_loop_tiers_and_against_jax(native_loops):
    """The Python tier writes its scan's kernel (the plans' results bit for bit), the native
    tier agrees, and jit, eager and JAX give the same values and gradients."""
    from remat.ad_checkpoint import checkpoint_name

    rng = np.random.default_rng(31)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 3)))
    v = rng.standard_normal(3).astype(np.float32)
    ns = (remat, jnp, lax, checkpoint_name)
    fn = remat.jit(functools.partial(_issue_31_run, ns))
    _new_python_kernels(fn, x, w, v)  # (bit for bit the plans run step by step)
    python, native_out = _both_tiers(native_loops, fn, x, w, v)
    assert "ready" in _states(native_loops)
    _assert_close(native_out, python, 2e-5)
    with config.override("remat_native_loops", False):
        _assert_close(python, _issue_31_run(ns, x, w, v), 1e-5)  # jit vs eager
    jax = pytest.importorskip("jax")
    from jax.ad_checkpoint import checkpoint_name as jax_checkpoint_name

    want = _issue_31_run((jax, jax.numpy, jax.lax, jax_checkpoint_name), x, w, v)
    _assert_close(python, [np.asarray(a) for a in jax.tree_util.tree_leaves(want)], 1e-5)


def _pad_plus_literal(c, _):
    return c * 0.5, jnp.pad(c, 1) + 1.0


def _sliced_pad_plus_literal(c, _):  # (a slice's pad: a slice-add's piece, were it one)
    return c * 0.5, lax.pad(c[1:], 0.0, ((1, 0, 0), (0, 0, 0))) + 0.5


def _pad_slice_added_and_plus_literal(c, _):
    p = lax.pad(c[:2] * 2.0, 0.0, ((1, 1, 0), (0, 0, 0)))
    return c + p, p + 1.0


def _scalar_pad_plus_literal(c, _):
    s = lax.pad(jnp.sum(c), np.float32(0.0), ())
    return c * 0.5, s + 1.0


def _gradient_with_a_jits_zero_cotangent(c, w):
    def loss(c, w):  # (the jit ignores w: its transpose gives w a zero cotangent, added to
        u = remat.jit(lambda a, b: jnp.sin(a))(c, w)  # the pad of w[1:]'s)
        return jnp.sum(u) + jnp.sum(w[1:] * c[1:])
    gc, gw = remat.grad(loss, argnums=(0, 1))(c, w)
    return c - 0.1 * gc, gw


@pytest.mark.parametrize("body", [_pad_plus_literal, _sliced_pad_plus_literal,
                                  _pad_slice_added_and_plus_literal, _scalar_pad_plus_literal,
                                  _gradient_with_a_jits_zero_cotangent])
@pytest.mark.parametrize("checkpointed", [False, True])
def test_a_zero_pad_added_to_a_literal_in_a_loop_body(native_loops, body, checkpointed):
    """Each way a zero pad in a loop body reaches an add that is not a slice-add: the Python
    tier writes it (bit for bit the plans), the native tier agrees, and both equal eager."""
    step = remat.checkpoint(body) if checkpointed else body
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    x[1, 1] = -0.0

    def run(x):
        return lax.scan(step, x, jnp.stack([x, 2 * x]))

    _new_python_kernels(remat.jit(run), x)
    python, native_out = _both_tiers(native_loops, remat.jit(run), x)
    assert "ready" in _states(native_loops)
    _assert_close(native_out, python, 1e-6)
    with config.override("remat_native_loops", False):
        _assert_close(python, run(x), 1e-6)


def test_a_loading_kernel_gets_the_gil_promptly_and_the_interval_comes_back():
    """While kernels load on background threads the GIL's switch interval is short (a loop on
    the Python tier held the GIL 5 ms at each of the loader's file reads); after the last, it
    is what it was."""
    import sys

    from remat.exec import native

    before = sys.getswitchinterval()
    with native._prompt_switching():
        assert sys.getswitchinterval() == pytest.approx(native.LOADING_SWITCH_INTERVAL)
        with native._prompt_switching():
            assert sys.getswitchinterval() == pytest.approx(native.LOADING_SWITCH_INTERVAL)
        assert sys.getswitchinterval() == pytest.approx(native.LOADING_SWITCH_INTERVAL)
    assert sys.getswitchinterval() == before


def test_a_kernel_compiled_for_other_types_leaves_the_call_to_the_python_tier(native_loops):
    """A kernel loaded from the cache was compiled for the argument types recorded with its
    source, which another process may have recorded for another loop of the same source (a
    fuzz campaign met a float64 body's kernel in a float32 program, and numba refused the
    call). A call the kernel has no signature for runs on the Python tier, and the loop goes
    back to compile for its own types once hot."""
    from remat.exec import loops

    def loops_now():
        return {id(loop): loop for t in native_loops._loops.values() for loop in t.values()}

    before = loops_now()
    f = remat.jit(lambda x: lax.scan(lambda c, _: (c * 0.5 + 1.0, None), x, None, length=7)[0])
    x = np.ones(3, np.float32)
    want = f(x)
    (loop,) = [loop for key, loop in loops_now().items() if key not in before]
    assert loop.state == "ready"
    other = np.ones(3, np.float64)  # (types the kernel was not compiled for)
    hot, native_loops.HOT_SECONDS = native_loops.HOT_SECONDS, float("inf")
    try:  # (not hot again at once: inside ``eager`` it would compile at this call)
        out = loops._run_kernel(loop, loop.kernel, 0, [7, other])
    finally:
        native_loops.HOT_SECONDS = hot
    assert loop.state == "cold" and loop.kernel is None
    np.testing.assert_allclose(out[0], np.asarray(want, np.float64), rtol=1e-6)


def _rotations(z0, thetas):
    """A complex carry rotated by ``exp(i theta)`` per step, its parts written back into a
    buffer row by row (``complex``, ``exp``, ``real``, ``imag``, ``conj``, a dynamic update)."""
    def step(carry, theta):
        z, buf, i = carry
        z = z * jnp.exp(1j * theta.astype(jnp.complex64)) + 0.01 * jnp.conj(z)
        row = jnp.stack([jnp.real(z), jnp.imag(z)])
        buf = lax.dynamic_update_slice(buf, row[None], (i, 0, 0))
        return (z, buf, i + 1), lax.complex(jnp.imag(z), jnp.real(z))
    buf = jnp.zeros((thetas.shape[0], 2) + z0.shape, jnp.float32)
    (z, buf, _), ys = lax.scan(step, (z0, buf, jnp.int32(0)), thetas)
    return jnp.sum(jnp.real(z) * 2.0 + jnp.imag(z)) + jnp.sum(buf * buf) + \
        jnp.sum(jnp.abs(ys))


def test_complex_loops_and_their_gradients_are_native(native_loops, new_loops):
    """A loop over complex arrays (equinox's checkpointed rotation test) compiles, forward
    and backward, and agrees with the Python tier; its updates are written as element loops
    (numba compiles an array assigned to a slice in about a second each). (A rank-0 complex
    value keeps its loop off both tiers: the Python tier's NumPy scalars would round other
    than the plans' arrays.)"""
    z0 = (np.linspace(0.5, 1.0, 3) + 0.3j).astype(np.complex64)
    thetas = np.linspace(-0.4, 0.9, 18, dtype=np.float32).reshape(6, 3)
    run = remat.jit(remat.value_and_grad(_rotations, argnums=1))
    python, native_out = _both_tiers(native_loops, run, z0, thetas)
    _assert_close(native_out, python, 2e-5)
    loops = new_loops(lambda: remat.jit(remat.value_and_grad(
        lambda t: _rotations(z0, t) * 1.0))(thetas))
    assert loops and all(loop.state == "ready" for loop in loops), \
        [(loop.state, loop.error) for loop in loops]
    assert any("np.complex64" in loop.source for loop in loops)
    for loop in loops:
        assert not re.search(r"\[[^\]]*:[^\]]*\] = |\[\.\.\.\] = [a-z]", loop.source), \
            loop.source
