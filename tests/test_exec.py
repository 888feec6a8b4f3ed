"""The jit executor: passes (inlining, constant folding, CSE with barriers, DCE), buffer reuse
that never corrupts values, and freeing at last use."""

import gc

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax, memory
from remat.exec import plan_for

f32 = np.float32


def _plan(fun, *args):
    return plan_for(remat.jit(fun).lower(*args).jaxpr)


def _names(plan):
    return [s.primitive.name for s in plan.steps]


def test_cse_merges_duplicates_but_not_across_barriers():
    x = jnp.ones(3)
    assert _names(_plan(lambda x: jnp.sin(x) + jnp.sin(x), x)) == ["sin", "add"]

    def barred(x):
        (y,) = lax.optimization_barrier((x,))
        return jnp.sin(x) + jnp.sin(y)

    assert _names(_plan(barred, x)).count("sin") == 2


def test_cse_keeps_literals_that_compare_equal_but_differ_in_bits():
    """0.0 == -0.0, yet a broadcast of each is a different value: merging them turned a
    select between the two into a select of one (every -0.0 came out +0.0)."""
    which = np.arange(12).reshape(3, 4) % 3 == 0

    def f(w):
        zero = lax.broadcast_in_dim(np.array(0.0, f32), w.shape, ())
        neg_zero = lax.broadcast_in_dim(np.array(-0.0, f32), w.shape, ())
        return lax.select(w, zero, neg_zero) * 1.0 + jnp.full(w.shape, -0.0, f32)

    # (the broadcasts are read as their scalars: the select keeps both, distinct)
    select = next(e for e in _plan(f, which).jaxpr.eqns if e.primitive.name == "select_n")
    assert {bool(np.signbit(v.val)) for v in select.invars[1:]} == {False, True}
    np.testing.assert_array_equal(np.signbit(np.asarray(remat.jit(f)(which))), ~which)


def test_constant_folding_of_scalar_literals():
    plan = _plan(remat.grad(lambda x: jnp.mean(x ** 2)), jnp.ones(8))
    assert "div" not in _names(plan)


def test_dce_and_inlining_of_nested_jit():
    inner = remat.jit(lambda x: (jnp.sin(x), jnp.cos(x)))
    plan = _plan(lambda x: inner(x)[0], jnp.ones(3))
    assert _names(plan) == ["sin"]  # jit inlined, the unused cos removed


def test_buffer_reuse_never_overwrites_inputs_or_literals():
    x = jnp.arange(4.0)
    before = np.array(x)
    fun = remat.jit(lambda x: ((x + 1.0) * 2.0 - 3.0) / 4.0)
    for _ in range(3):
        np.testing.assert_allclose(fun(x), ((before + 1) * 2 - 3) / 4)
    np.testing.assert_array_equal(x, before)


def test_buffer_reuse_respects_views():
    def f(x):
        y = jnp.sin(x)
        z = y.reshape(2, 2)  # a view of y's buffer
        w = y * 2.0  # y dies here, but its view z is still alive
        return z, w

    x = jnp.arange(4.0)
    z, w = remat.jit(f)(x)
    np.testing.assert_allclose(z, np.sin(np.arange(4.0)).reshape(2, 2), rtol=1e-6)
    np.testing.assert_allclose(w, 2 * np.sin(np.arange(4.0)), rtol=1e-6)


def test_jit_frees_intermediates_at_last_use():
    n = 1 << 18

    def chain(x):
        for _ in range(10):
            x = jnp.sin(x) + 1.0
        return x

    x = jnp.ones(n)
    fun = remat.jit(chain)
    fun(x)
    # the output plus at most one live intermediate at a time (reused in place)
    assert memory.peak_memory(fun, x) <= 2 * 4 * n


def test_overridden_impls_see_every_call_under_jit():
    calls = []
    impl = lax.add_p.impl
    lax.add_p.def_impl(lambda a, b: (calls.append(1), impl(a, b))[1])
    try:
        remat.jit(lambda x: (x * 2.0 + 1.0) + 3.0)(jnp.ones(4))
    finally:
        lax.add_p.def_impl(impl)
    assert len(calls) == 2


def test_donated_arguments_are_reused_and_deleted():
    n = 1 << 18
    step = remat.jit(lambda x, y: x * 2.0 + y, donate_argnums=0)
    x, y = jnp.arange(float(n)), jnp.arange(float(n))
    gc.collect()  # (garbage freed inside the measurement would offset it)
    base = memory.live_bytes()
    z = step(x, y)
    assert x.is_deleted() and not y.is_deleted()
    assert memory.live_bytes() == base  # the result lives in x's old buffer
    np.testing.assert_allclose(z[:3], [0.0, 3.0, 6.0])
    with pytest.raises(RuntimeError, match="Array has been deleted"):
        x + 1.0
    # without donation the result needs a buffer of its own
    z2 = remat.jit(lambda x, y: x * 2.0 + y)(y, y)
    assert memory.live_bytes() == base + 4 * n
    del z, z2


def test_donation_under_transformations_is_ignored():
    step = remat.jit(lambda x: jnp.sum(x * x), donate_argnums=0)
    x = jnp.arange(4.0)
    g = remat.grad(step)(x)
    assert not x.is_deleted()
    np.testing.assert_allclose(g, 2 * np.arange(4.0))


def _raise_above_3(x):
    if x > 3:
        raise ValueError("above 3")


def _calls_back(x):
    y = jnp.sin(x)
    remat.debug.callback(_raise_above_3, jnp.sum(y) * 10)  # the line the note names
    return y


def _scans(xs):
    def body(c, x):
        remat.debug.callback(_raise_above_3, c)  # the body's line
        return c + x, c

    return remat.lax.scan(body, 0.0, xs)  # the loop's line


def _line_of(fun, text):
    import inspect

    lines, first = inspect.getsourcelines(fun)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _whiles(x):
    def body(c):
        remat.debug.callback(_raise_above_3, c[0])
        return c * 2.0

    return remat.lax.while_loop(lambda c: c[0] < 100.0, body, x)


@pytest.mark.parametrize("interpreted", [False, True], ids=["generated", "interpreted"])
@pytest.mark.parametrize("fun", [_calls_back, _scans, _whiles])
def test_an_error_raised_while_a_plan_runs_frees_its_buffers(fun, interpreted):
    """The run's intermediates (and a loop's stacked outputs and carries) are released when a
    step raises: none stays counted live after the error."""
    from remat.exec import plan as exec_plan

    x = jnp.ones(1000)
    with exec_plan.interpreted() if interpreted else exec_plan.generated():
        jitted = remat.jit(fun)
        jitted.lower(x)  # (tracing holds its Python scalars as tiny Arrays)
        gc.collect()
        base = memory.live_bytes()
        with pytest.raises(ValueError, match="above 3"):
            jitted(x)
        assert memory.live_bytes() == base


@pytest.mark.parametrize("interpreted", [False, True], ids=["generated", "interpreted"])
def test_an_error_raised_while_a_plan_runs_names_the_users_line(interpreted):
    """The plan runs long after tracing: a note on the error names the equation's source line
    (the traceback alone shows remat's frames and the callback, not the jitted code); a loop
    names its own line and its body's (from the loop kernel, or the body's plan)."""
    from remat.exec import plan as exec_plan

    with exec_plan.interpreted() if interpreted else exec_plan.generated():
        with pytest.raises(ValueError, match="above 3") as info:
            remat.jit(_calls_back)(jnp.ones(3))
        line = _line_of(_calls_back, "the line the note names")
        assert f"(raised by debug_callback at test_exec.py:{line} (_calls_back))" in \
            info.value.__notes__
        with pytest.raises(ValueError, match="above 3") as info:
            remat.jit(_scans)(jnp.ones(10))
        for text in ("the loop", "the body's line"):
            assert any(f"test_exec.py:{_line_of(_scans, text)}" in note
                       for note in info.value.__notes__), (text, info.value.__notes__)


def test_a_products_transpose_is_folded_into_the_product():
    """``transpose(x @ w)`` whose only use is the transpose becomes ``w.T @ x.T`` written
    directly (JAX's weight gradients): no transpose step, a C-contiguous result, the eager
    value; a product used elsewhere too, or batched, keeps its transpose."""
    from remat.exec import plan_for
    from remat.exec.passes import optimize_jaxpr

    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    w = rng.standard_normal((5, 3)).astype(np.float32)

    def names(fun, *args):
        return [e.primitive.name for e in optimize_jaxpr(remat.jit(fun).lower(*args).jaxpr).eqns]

    grad = remat.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w)))
    assert "transpose" not in names(grad, w, x)
    got = remat.jit(grad)(w, x)
    assert np.asarray(got).flags.c_contiguous
    np.testing.assert_allclose(np.asarray(got), np.asarray(grad(w, x)), rtol=1e-6)
    assert not any(type(s).__name__ == "Step" and s.primitive.name == "transpose"
                   for s in plan_for(remat.jit(grad).lower(w, x).jaxpr).steps)

    def also_used(x, w):
        y = x @ w
        return y.T, y

    assert "transpose" in names(also_used, x, w)
    batched = rng.standard_normal((2, 6, 5)).astype(np.float32)
    assert "transpose" in names(lambda a: jnp.swapaxes(a @ a.transpose(0, 2, 1), 0, 1),
                                batched)
    t, y = remat.jit(also_used)(x, w)
    np.testing.assert_allclose(np.asarray(t), (x @ w).T, rtol=1e-6)
    three = rng.standard_normal((5, 4, 2)).astype(np.float32)  # free dims (6) and (4, 2)
    fun = remat.jit(lambda x, three: jnp.transpose(jnp.tensordot(x, three, 1), (1, 2, 0)))
    assert "transpose" not in names(lambda x, three: jnp.transpose(jnp.tensordot(x, three, 1),
                                                                   (1, 2, 0)), x, three)
    np.testing.assert_allclose(np.asarray(fun(x, three)),
                               np.transpose(np.tensordot(x, three, 1), (1, 2, 0)), rtol=1e-5)


def test_a_plan_generates_its_code_once_it_is_hot(monkeypatch):
    """Plans are tiered (issue 34.1): the first runs go step by step, and the code is
    generated only once the time spent there reaches what generating it costs; both tiers give
    the same bits."""
    from remat.exec import codegen
    from remat.exec import plan as exec_plan

    def f(x):
        for _ in range(20):
            x = jnp.tanh(x) * 1.5 + x
        return x

    x = np.linspace(-1.0, 1.0, 7, dtype=np.float32)
    jitted = remat.jit(f)
    plan = plan_for(jitted.lower(x).jaxpr)
    estimate = codegen.compile_seconds(plan.steps)
    assert estimate > 0
    compiled = []
    monkeypatch.setattr(exec_plan, "compile_steps",
                        lambda p: compiled.append(p) or codegen.compile_steps(p))
    first = np.asarray(jitted(x))
    assert compiled == [] and plan._generated is None  # a run once never pays for code
    while not compiled:
        assert np.array_equal(np.asarray(jitted(x)), first)
    assert compiled == [plan] and plan._interpreted_seconds >= estimate
    assert np.array_equal(np.asarray(jitted(x)), first)  # the generated tier
    assert len(compiled) == 1
    with exec_plan.interpreted():
        assert np.array_equal(np.asarray(jitted(x)), first)
