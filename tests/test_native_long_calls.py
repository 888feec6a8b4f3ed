"""A loop's long call on the Python tier: it makes the loop hot while it runs (not only once it
returns), its compile starts at once with the GIL handed over promptly, and a while loop's or
a scan's call goes on natively from the iteration it reached once the kernel is ready.
equinox's 100,000-step loop, on a cold cache, ran 23 s before its compile started, 13 s more
before the compiling process did, and its second call 21 s more on the Python tier."""

import sys
import threading
import time

import numpy as np
import pytest
from fuzzing import ReadyAfter

import remat
import remat.numpy as jnp
from remat import lax
from remat.config import config

pytest.importorskip("numba")


def _filling(n):
    def run(xs):
        def body(c):
            i, xs = c
            return i + 1, xs.at[i].set(jnp.tanh(xs[i - 1] * 0.5 + 1.0))
        return lax.while_loop(lambda c: c[0] < n, body, (1, xs * 1.0))[1]
    return remat.jit(run)


def test_a_long_call_makes_its_loop_hot_while_it_runs(monkeypatch, new_loops):
    from remat.exec import native

    f = _filling(20)
    xs = np.zeros(20, np.float32)
    with config.override("remat_native_loops", False):
        (loop,) = new_loops(lambda: f(xs))
    queued = []
    monkeypatch.setattr(native, "HOT_SECONDS", 0.05)
    monkeypatch.setattr(native, "_compile_later", lambda loop, types: queued.append(types))
    with config.override("remat_native_loops", True):
        assert loop.state == "cold"
        token = native.watch(loop, [xs], {0})
        deadline = time.perf_counter() + 5.0
        while not queued and time.perf_counter() < deadline:
            time.sleep(0.01)  # (the call, still running)
        assert loop.state == "compiling" and len(queued) == 1
        native.unwatch(token)
        loop.observe(1.0, [xs], {0})  # (the call's own heat, once it returns: no second compile)
    assert len(queued) == 1


def test_a_short_call_leaves_its_loop_cold(monkeypatch, new_loops):
    from remat.exec import native

    f = _filling(20)
    xs = np.zeros(20, np.float32)
    with config.override("remat_native_loops", False):
        (loop,) = new_loops(lambda: f(xs))
    monkeypatch.setattr(native, "HOT_SECONDS", 0.2)
    monkeypatch.setattr(native, "_compile_later", lambda loop, types: pytest.fail("compiled"))
    with config.override("remat_native_loops", True):
        native.unwatch(native.watch(loop, [xs], {0}))
        time.sleep(0.3)
        assert loop.state == "cold" and not native._running


def test_the_compiling_thread_gets_the_gil_promptly(monkeypatch, tmp_path, new_loops):
    """Writing the kernel's files and pickling its types, before the compiling process starts,
    give the GIL up at each file operation: at the default switch interval, a running Python
    tier kept it 5 ms each time."""
    from remat.exec import native

    intervals = []
    monkeypatch.setattr(native, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(native, "_compile_elsewhere",
                        lambda jobs: intervals.append(sys.getswitchinterval()) or False)
    f = _filling(20)
    xs = np.zeros(20, np.float32)
    with config.override("remat_native_loops", False):
        (loop,) = new_loops(lambda: f(xs))
    monkeypatch.setattr(native, "HOT_SECONDS", 0.0)
    with config.override("remat_native_loops", True):
        loop.observe(1.0, [1, xs], {1})
        native.wait()
    assert intervals == [pytest.approx(native.LOADING_SWITCH_INTERVAL)]


def test_a_while_call_hands_over_to_the_native_kernel_once_ready(native_loops, new_loops):
    """The Python tier's while kernel checks its loop's flag between iterations: once the
    native kernel is ready, it goes on from the carries reached."""
    from remat.exec import loops

    n = 300
    f = _filling(n)
    xs = np.zeros(n, np.float32)
    with config.override("remat_native_loops", False):
        (loop,) = new_loops(lambda: f(xs))
        want = np.asarray(f(xs))
    f(xs)  # (the Python tier, then compiled: ``native_loops`` compiles at the first run)
    assert loop.state == "ready" and loop.native_ready == [True]
    assert any("_native_ready[0]" in line for line in loop.python.source_lines)

    calls = []
    kernel = loop.kernel

    class Counting:
        """The native kernel, counting its calls and the iteration it started from."""
        def __call__(self, *args):
            calls.append(int(args[0]))
            return kernel(*args)

    loop.kernel = Counting()
    try:
        i, buf = loops._run_kernel(loop, loop.python, 0, [1, xs.copy()], {1})
    finally:
        loop.kernel = kernel
    assert calls == [1]  # (handed over before the first iteration: the flag was set)
    np.testing.assert_allclose(buf, want, rtol=1e-6)
    assert int(i) == n

    with config.override("remat_native_loops", False):  # (off: no hand-over)
        calls.clear()
        loop.kernel = Counting()
        try:
            i, buf = loops._run_kernel(loop, loop.python, 0, [1, xs.copy()], {1})
        finally:
            loop.kernel = kernel
        assert calls == [] and loop.native_ready == [False]
        np.testing.assert_array_equal(buf, want)


@pytest.mark.parametrize("reverse", [False, True])
def test_a_scan_call_hands_over_to_the_native_kernel_at_the_iteration_it_reached(
        reverse, native_loops, new_loops):
    """A long scan's Python-tier call goes on natively once the kernel is ready: from the
    carries reached, over the rest of its xs, writing the rest of its ys."""
    n, done = 50, 17
    xs = np.linspace(-1, 1, n * 3, dtype=np.float32).reshape(n, 3)

    def run(c, xs):
        return lax.scan(lambda c, x: (jnp.tanh(c * 0.9 + x), c * x), c, xs, reverse=reverse)

    f = remat.jit(run)
    c0 = np.full(3, 0.5, np.float32)
    with config.override("remat_native_loops", False):
        (loop,) = new_loops(lambda: f(c0, xs))
        want_c, want_ys = (np.asarray(a) for a in f(c0, xs))
    f(c0, xs)  # (compiled at the first run: ``native_loops``)
    assert loop.state == "ready"
    assert any("_native_ready[0]" in line for line in loop.python.source_lines)

    started = []
    kernel = loop.kernel

    def counting(*args):  # the native kernel, recording how many iterations it was left
        started.append(int(args[0]))
        return kernel(*args)

    namespace = loop.python.__globals__
    flag = namespace["_native_ready"]
    # (the call starts on the Python tier, as one that started before the compile ended)
    loop.kernel, loop.state = counting, "compiling"
    namespace["_native_ready"] = ReadyAfter(loop, done)
    try:
        c, ys = (np.asarray(a) for a in f(c0, xs))
    finally:
        loop.kernel, loop.state, namespace["_native_ready"] = kernel, "ready", flag
    assert started == [n - done]
    # (numba's tanh and NumPy's differ in the last bits)
    np.testing.assert_allclose(c, want_c, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ys, want_ys, rtol=1e-6, atol=1e-6)
    ran = slice(0, done) if not reverse else slice(n - done, n)  # (the Python tier's own)
    np.testing.assert_array_equal(ys[ran], want_ys[ran])


def test_a_hand_over_to_a_kernel_of_other_types_finishes_on_the_python_tier(native_loops,
                                                                           new_loops):
    from remat.exec import loops

    f = _filling(30)
    xs = np.zeros(30, np.float32)
    (loop,) = new_loops(lambda: f(xs))
    f(xs)
    assert loop.state == "ready"
    other = xs.astype(np.float64)  # (types the kernel was not compiled for)
    i, buf = loops._handed_over(loop, [1, other.copy()], {1})
    assert loop.state == "cold" and loop.native_ready == [False]
    np.testing.assert_array_equal(buf, loop.python(1, other.copy())[1])
    assert int(i) == 30


@pytest.mark.parametrize("kind", ["while", "scan"])
def test_python_tier_loops_yield_the_gil_while_the_native_tier_works_in_the_background(
        monkeypatch, kind):
    """While a background thread of the native tier works (``_prompt_switching``: the watcher
    typing a hot call's operands, the compiler, a kernel's loading), a Python-tier loop sleeps
    a moment every ``YIELD_EVERY``: a loop of short NumPy calls starved those threads whatever
    the switch interval (equinox's 100,000-step loop: numba's import in the watcher had not
    finished after 17 s). Without background work, and no call watched, it never sleeps."""
    from remat.exec import native

    n = 400
    if kind == "while":
        f = _filling(n)
    else:
        f = remat.jit(lambda xs: lax.scan(lambda c, x: (jnp.tanh(c * 0.5 + x), c), 0.0, xs)[1])
    xs = np.zeros(n, np.float32)
    sleeps, sleep = [], time.sleep
    monkeypatch.setattr(native, "YIELD_EVERY", 1e-12)
    monkeypatch.setattr(native.time, "sleep", lambda s: sleeps.append(s) if  # (this thread's:
                        threading.current_thread() is threading.main_thread() else sleep(s))
    # the watcher of earlier tests' calls sleeps on its own)
    with config.override("remat_native_loops", False):
        want = np.asarray(f(xs))
        assert sleeps == []
        with native._prompt_switching():  # (as a background thread at work would)
            got = np.asarray(f(xs))
    assert len(sleeps) >= n - 1 and set(sleeps) == {native.YIELD_SLEEP}
    np.testing.assert_array_equal(got, want)
