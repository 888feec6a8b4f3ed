"""Native loop kernels with a branch they cannot write: a ``cond`` branch that calls back into
Python (equinox's runtime checks raise from one) is written as an exit. The kernel runs natively
until that branch is taken; the call then reruns on the Python tier, from its operands as they
came, and the loop stays there."""

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.config import config

pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _no_kernels_compiled_yet(monkeypatch):
    """Each test's loops compile their own kernels (the tests' loops share sources: one made
    native from its first call by another's kernel would skip the run on the Python tier)."""
    from remat.exec import native

    monkeypatch.setattr(native, "_dispatchers", {})


def _checked(x, limit, calls):
    """``x`` unchanged, through a branch that calls back (counted in ``calls``) where ``x``
    reaches ``limit``: the shape of equinox's ``error_if``."""
    def report(v):
        calls.append(float(v))
        return np.asarray(v)

    return lax.cond(x >= limit, lambda v: remat.pure_callback(
        report, remat.ShapeDtypeStruct((), v.dtype), v), lambda v: v, x)


def _filling_loop(limit, calls):
    """A jitted while loop that fills a buffer made inside the program (so its kernel could
    write into it in place) one element a step, each value checked."""
    def run(n):
        def body(c):
            i, buf = c
            value = _checked(buf[i - 1] * 0.5 + 1.0, limit, calls)
            return i + 1, buf.at[i].set(value)

        buf = jnp.zeros(n, jnp.float32) + 1.0
        return lax.while_loop(lambda c: c[0] < n, body, (1, buf))[1]
    return remat.jit(run, static_argnums=0)


def _on_the_python_tier(new_loops, run):
    """``run()`` with the native tier off, and the loops it made (compiled at the next run
    with the tier on, inside the ``native_loops`` fixture)."""
    out = []
    with config.override("remat_native_loops", False):
        loops = new_loops(lambda: out.append(run()))
    return out[0], loops


def test_a_branch_never_taken_keeps_the_loop_native(native_loops, new_loops):
    calls = []
    f = _filling_loop(limit=1e9, calls=calls)
    want, (loop,) = _on_the_python_tier(new_loops, lambda: np.asarray(f(50)))
    f(50)  # (on the Python tier, then compiled)
    assert loop.exits and loop.state == "ready" and "BranchNotNative" in loop.source
    np.testing.assert_array_equal(np.asarray(f(50)), want)
    assert calls == []


def test_a_taken_branch_reruns_the_call_on_the_python_tier(native_loops, new_loops):
    calls = []
    f = _filling_loop(limit=1.9, calls=calls)  # (the values climb to 2: step 5 reaches 1.9)
    want, (loop,) = _on_the_python_tier(new_loops, lambda: np.asarray(f(12)))
    expected_calls = list(calls)
    assert len(expected_calls) > 1
    f(12)  # (on the Python tier, then compiled)
    assert loop.state == "ready" and loop.exits
    calls[:] = []
    got = np.asarray(f(12))  # the native kernel exits at step 5: the Python tier reruns it all
    np.testing.assert_array_equal(got, want)  # (from the buffer as it came, not as left)
    assert calls == expected_calls  # each taken branch called back once, in order
    assert loop.state == "exited" and loop.kernel is None
    calls[:] = []
    np.testing.assert_array_equal(np.asarray(f(12)), want)
    assert calls == expected_calls


def test_a_scan_exits_and_reruns_with_its_stacked_outputs(native_loops, new_loops):
    calls = []

    def run(x, xs):
        def body(c, x):
            c = _checked(c * 0.9 + x, 3.0, calls)
            return c, c * 2.0
        return lax.scan(body, x, xs)

    f = remat.jit(run)
    x, xs = np.float32(0.0), np.linspace(0.0, 1.0, 40, dtype=np.float32)
    want, (loop,) = _on_the_python_tier(new_loops, lambda: f(x, xs))
    expected_calls = list(calls)
    assert expected_calls
    f(x, xs)  # (on the Python tier, then compiled)
    assert loop.state == "ready" and loop.exits
    calls[:] = []
    got = f(x, xs)
    assert loop.state == "exited"
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert calls == expected_calls


def test_an_error_raised_in_a_taken_branch_reaches_the_caller(native_loops):
    def fail(v):
        raise ValueError(f"value {float(v)} out of range")

    def run(n):
        def body(c):
            i, x = c
            x = lax.cond(x > 5.0, lambda v: remat.pure_callback(
                fail, remat.ShapeDtypeStruct((), v.dtype), v), lambda v: v, x + 1.0)
            return i + 1, x
        return lax.while_loop(lambda c: c[0] < n, body, (0, jnp.float32(0.0)))[1]

    f = remat.jit(run, static_argnums=0)
    assert float(f(3)) == 3.0  # (compiled natively: the branch is never taken)
    # (as JAX: an exception in a host callback surfaces as a JaxRuntimeError naming it)
    with pytest.raises(remat.errors.JaxRuntimeError, match="value 7.0 out of range") as e:
        f(10)
    assert type(e.value.__cause__) is ValueError


def test_a_python_tier_call_handed_over_to_an_exiting_kernel_reruns_from_its_operands(
        native_loops, new_loops, monkeypatch):
    """A long Python-tier call goes on natively once the kernel is ready
    (``native.HandOver``); where that kernel then exits, the call reruns from the carries as
    they came, so a loop that may exit never takes its caller's buffers."""
    from remat.exec import loops

    calls = []
    f = _filling_loop(limit=1.9, calls=calls)
    want, (loop,) = _on_the_python_tier(new_loops, lambda: np.asarray(f(12)))
    expected_calls = list(calls)
    f(12)  # (on the Python tier, then compiled)
    assert loop.state == "ready" and loop.native_ready == [True]
    calls[:] = []
    monkeypatch.setattr(loops, "_kernel", lambda loop: loop.python)  # (as if still compiling)
    got = np.asarray(f(12))  # hands over at once; the native kernel exits at step 5
    np.testing.assert_array_equal(got, want)
    assert calls == expected_calls
    assert loop.state == "exited" and loop.native_ready == [False]
