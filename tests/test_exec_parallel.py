"""The executor's worker threads and elementwise fusion: results equal to serial, unfused
execution; memory never above it; BLAS's thread count handed back; overriding impls, sinks,
donation and strided inputs all still honoured."""

import gc
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import remat
import remat.numpy as jnp
from remat import lax, memory
from remat.core import eval_jaxpr
from remat.exec import fusion, plan_for
from remat.exec.fusion import FusedStep
from remat.runtime import parallel

f32 = np.float32
BIG = (1024, 1024)  # 2**20 elements: at the split and above the fusion thresholds


def _rand(shape, seed=0, dtype=f32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _gelu(a):
    return 0.5 * a * (1.0 + jnp.tanh(0.7978845608 * (a + 0.044715 * a ** 3)))


def _gelu_fwd_bwd(a, ct):
    y, vjp = remat.vjp(_gelu, a)
    return y, vjp(ct)[0]


def _steps(fun, *args):
    return plan_for(remat.jit(fun).lower(*args).jaxpr).steps


@pytest.fixture
def unfused(monkeypatch):
    """Run with fusion switched off (plans made inside see no fusible run)."""
    def switch():
        monkeypatch.setattr(fusion, "FUSE_MIN_ELEMENTS", 1 << 62)
    return switch


@pytest.fixture
def serial():
    """Run with one worker: every step whole, BLAS left alone."""
    old = parallel.num_threads()
    parallel.set_num_threads(1)
    yield
    parallel.set_num_threads(old)


def test_fused_run_is_bitwise_the_eager_result():
    a, ct = jnp.asarray(_rand(BIG)), jnp.asarray(_rand(BIG, 1))
    steps = _steps(_gelu_fwd_bwd, a, ct)
    assert any(type(s) is FusedStep for s in steps)
    fused = [s for s in steps if type(s) is FusedStep]
    assert sum(len(s.members) for s in fused) >= 15  # the whole gelu and its derivative
    got = remat.jit(_gelu_fwd_bwd)(a, ct)
    want = _gelu_fwd_bwd(a, ct)  # eager: one primitive at a time, whole arrays
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_small_arrays_are_not_fused():
    x = jnp.ones((8, 8))
    steps = _steps(lambda x: jnp.tanh(x * 2.0 + 1.0), x)
    assert [s.primitive.name for s in steps] == ["mul", "add", "tanh"]


def test_fusion_never_raises_the_peak(unfused):
    a, ct = jnp.asarray(_rand(BIG)), jnp.asarray(_rand(BIG, 1))
    fused_peak = memory.peak_memory(remat.jit(_gelu_fwd_bwd), a, ct)
    unfused()
    unfused_peak = memory.peak_memory(remat.jit(_gelu_fwd_bwd), a, ct)
    assert fused_peak <= unfused_peak
    nbytes = a.size * 4
    assert fused_peak == 2 * nbytes  # just the two results: every intermediate is tile-sized


def test_timeline_keeps_every_fused_primitive_and_line():
    x = jnp.asarray(_rand(BIG))
    samples = memory.memory_timeline(remat.jit(lambda x: jnp.tanh(x * 2.0) + 1.0), x)
    labels = [label.split(" at ")[0] for label, _ in samples]
    assert ["mul", "tanh", "add"] == [n for n in labels if n in ("mul", "tanh", "add")]
    assert all("test_exec_parallel.py" in label for label, _ in samples[1:4])


def test_donated_input_receives_the_fused_output():
    x = jnp.asarray(_rand(BIG))
    expect = np.tanh(np.asarray(x) * f32(2.0)) + f32(1.0)
    fun = remat.jit(lambda x: jnp.tanh(x * 2.0) + 1.0, donate_argnums=0)
    fun.lower(x)  # trace first (tracing holds its Python scalars as tiny Arrays)
    gc.collect()  # (garbage freed inside the measurement would offset it)
    before = memory.live_bytes()
    memory.reset_peak()
    out = fun(x)
    assert memory.peak_bytes() - before <= 0  # written into x's buffer: nothing allocated
    assert x.is_deleted()
    np.testing.assert_array_equal(np.asarray(out), expect)


def test_an_overriding_impl_sees_every_call(monkeypatch):
    calls = []
    original = lax.tanh_p.impl

    def counting(x):
        calls.append(x.shape)
        return original(x)

    x = jnp.asarray(_rand(BIG))
    fun = remat.jit(lambda x: jnp.tanh(x * 2.0) + 1.0)
    fun(x)  # plan made with the default impls: the run is fused
    monkeypatch.setattr(lax.tanh_p, "impl", counting)
    out = fun(x)
    assert calls == [BIG]  # whole, once: the fused step fell back to single steps
    np.testing.assert_array_equal(np.asarray(out), np.tanh(np.asarray(x) * f32(2)) + f32(1))


def test_strided_inputs_are_tiled_by_rows():
    x = jnp.asarray(_rand((256, 1024)))
    fun = remat.jit(lambda x: jnp.tanh(x.T * 3.0) - x.T)
    assert any(type(s) is FusedStep for s in _steps(lambda x: jnp.tanh(x.T * 3.0) - x.T, x))
    xt = np.asarray(x).T
    np.testing.assert_array_equal(np.asarray(fun(x)), np.tanh(xt * f32(3)) - xt)


def test_integer_and_parameterised_elementwise_steps_fuse():
    x = jnp.asarray(np.arange(BIG[0] * BIG[1], dtype=np.int32).reshape(BIG) % 97)
    fun = remat.jit(lambda x: (x * 3 + 1) ** 3 - x)
    xs = np.asarray(x)
    np.testing.assert_array_equal(np.asarray(fun(x)), (xs * 3 + 1) ** 3 - xs)
    y = jnp.asarray(_rand(BIG))
    np.testing.assert_array_equal(np.asarray(remat.jit(lambda y: (y * 2.0) ** 3 + y)(y)),
                                  np.asarray((y * 2.0) ** 3 + y))


def test_scan_body_writes_fused_outputs_into_the_stacked_ys(unfused):
    xs = jnp.asarray(_rand((3,) + BIG))

    def body(c, x):
        y = jnp.tanh(x * 2.0 + c)
        return c + 1.0, (y, y * 3.0)

    fun = remat.jit(lambda xs: lax.scan(body, 0.0, xs))
    (c, (ys, zs)) = fun(xs)
    x = np.asarray(xs)
    want = np.tanh(x * f32(2) + np.arange(3, dtype=f32)[:, None, None])
    np.testing.assert_array_equal(np.asarray(ys), want)
    np.testing.assert_array_equal(np.asarray(zs), want * f32(3))
    fused_peak = memory.peak_memory(fun, xs)
    unfused()
    assert fused_peak <= memory.peak_memory(remat.jit(lambda xs: lax.scan(body, 0.0, xs)), xs)


@pytest.mark.parametrize("lhs,rhs", [((600, 300), (300, 500)),  # split by rows
                                     ((4, 3000), (3000, 600)),  # few rows: by columns
                                     ((6, 200, 100), (6, 100, 300))])  # by batch
def test_split_matmul_matches_numpy(lhs, rhs):
    a, b = _rand(lhs), _rand(rhs, 1)
    if len(lhs) == 2:
        fun = remat.jit(jnp.matmul)
    else:
        fun = remat.jit(lambda a, b: lax.dot_general(a, b, (([2], [1]), ([0], [0]))))
    np.testing.assert_allclose(np.asarray(fun(jnp.asarray(a), jnp.asarray(b))),
                               np.matmul(a, b), rtol=2e-5, atol=2e-4)


def test_serial_execution_gives_the_same_results(serial):
    a, ct = jnp.asarray(_rand(BIG)), jnp.asarray(_rand(BIG, 1))
    got = remat.jit(_gelu_fwd_bwd)(a, ct)
    with parallel.session():
        assert parallel.workers() == 1
    for g, w in zip(got, _gelu_fwd_bwd(a, ct)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_blas_threads_are_handed_back_even_after_an_error(monkeypatch):
    state = parallel._state
    with parallel.session():
        pass  # finds the BLAS library, if there is one to steer
    if state.blas is None or parallel.num_threads() < 2:
        pytest.skip("no OpenBLAS thread control here, or one worker: nothing to hand back")
    get = state.blas.get  # every OpenBLAS in the process (NumPy's, SciPy's)
    before = get()
    with parallel.session():
        assert set(get()) == {1} and parallel.workers() == parallel.num_threads()
        with parallel.blas_threads():
            assert get() == before
            with parallel.lent_blas():  # (nested: each gives back the count it found)
                assert set(get()) == {parallel.workers()}
            assert get() == before
        assert set(get()) == {1}
        seen = []
        matmul = np.matmul
        monkeypatch.setattr(np, "matmul", lambda *a, **k: seen.append(set(get())) or
                            matmul(*a, **k))
        a = np.ones((256, 256), f32)
        parallel.matmul(a, a)  # a matrix product: on BLAS's threads, lent for the call
        assert seen == [{parallel.workers()}] and set(get()) == {1}
        entered, leave = threading.Event(), threading.Event()

        def other():
            with parallel.session():
                entered.set()
                leave.wait()

        with ThreadPoolExecutor(1) as pool:  # another thread runs a plan: nothing is lent
            done = pool.submit(other)
            entered.wait()
            with parallel.lent_blas():
                assert set(get()) == {1}
            leave.set()
            done.result()
    assert get() == before
    with pytest.raises(ZeroDivisionError):
        with parallel.session():
            raise ZeroDivisionError("inside a run")
    assert get() == before and state.depth == 0


def test_a_failing_part_raises_after_every_part_is_done():
    done = []

    def part(i):
        if i == 0:
            raise ValueError("part 0 failed")
        done.append(i)

    with parallel.session():
        if parallel.workers() < 2:
            pytest.skip("one worker: parts run one after another")
        parts = [(i,) for i in range(parallel.workers())]
        with pytest.raises(ValueError, match="part 0 failed"):
            parallel.run_parts(part, parts)
    assert sorted(done) == list(range(1, len(parts)))


def test_set_num_threads_rejects_nonsense():
    with pytest.raises(ValueError, match="positive"):
        parallel.set_num_threads(0)


def test_concurrent_runs_from_two_threads():
    a, ct = jnp.asarray(_rand(BIG)), jnp.asarray(_rand(BIG, 1))
    fun = remat.jit(_gelu_fwd_bwd)
    want = [np.asarray(w) for w in _gelu_fwd_bwd(a, ct)]
    fun(a, ct)
    blas = parallel._state.blas
    before = blas.get() if blas else None

    def check(_):
        for _ in range(3):
            for g, w in zip(fun(a, ct), want):
                np.testing.assert_array_equal(np.asarray(g), w)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(check, range(2)))
    assert parallel._state.depth == 0
    if blas:
        assert blas.get() == before


def _fused_sizes(fun, *args):
    return [len(s.members) for s in _steps(fun, *args) if type(s) is FusedStep]


def test_runs_separated_by_an_independent_matmul_merge(unfused):
    a, w = jnp.asarray(_rand((2048, 128))), jnp.asarray(_rand((128, 128), 1))
    c = jnp.asarray(_rand((2048, 128), 2))

    def independent(a, w, c):  # the matmul reads neither run: it moves before the first
        u = jnp.tanh(a * 2.0) + 1.0
        m = c @ w
        return jnp.sum((u * m - 3.0) * u)

    def dependent(a, w, c):  # the matmul reads the first run, the second run reads it
        u = jnp.tanh(a * 2.0) + 1.0
        m = u @ w
        return jnp.sum((u * m - 3.0) * u)

    assert _fused_sizes(independent, a, w, c) == [6]
    assert _fused_sizes(dependent, a, w, c) == [3, 3]
    for fun in (independent, dependent):
        got = remat.jit(fun)(a, w, c)
        np.testing.assert_allclose(float(got), float(fun(a, w, c)), rtol=1e-6)
    merged_peak = memory.peak_memory(remat.jit(independent), a, w, c)
    unfused()
    assert merged_peak <= memory.peak_memory(remat.jit(independent), a, w, c)


def test_merging_never_raises_the_peak_above_program_order():
    a = jnp.asarray(_rand((2048, 128)))
    ws = [jnp.asarray(_rand((128, 128), i)) for i in range(1, 4)]

    def many_independent_products(a, *ws):  # moving all three up would hold them at once
        u = jnp.tanh(a * 2.0) + 1.0
        ms = [a @ w for w in ws]
        v = u * 3.0 - 1.0
        return [v] + ms

    jaxpr = remat.jit(many_independent_products).lower(a, *ws).jaxpr
    peak = memory.peak_memory(remat.jit(many_independent_products), a, *ws)
    gc.collect()  # (garbage freed inside the measurement would offset it)
    memory.reset_peak()  # program order, step by step, no fusion: eval_jaxpr
    base = memory.live_bytes()
    outs = eval_jaxpr(jaxpr, [], a, *ws)
    program_order = memory.peak_bytes() - base
    del outs
    assert peak <= program_order


def test_an_intermediate_lives_in_the_tile_of_the_output_written_after_it():
    """``p - 0.01 * g`` with ``g`` dying: ``0.01 * g`` is written over ``g``'s tile (its last
    read) and the result over it again, no register in between (an SGD update's two in-place
    passes)."""
    p, g = jnp.asarray(_rand((784, 512))), jnp.asarray(_rand((784, 512), 1))

    def update(p, g):
        g = g * 2.0  # (a buffer of the run's own, dying in it)
        return p - 0.01 * g

    (fused,) = [s for s in _steps(update, p, g) if type(s) is FusedStep]
    assert fused.registers == []
    targets = [where for _, _, where in fused.program]
    assert targets[0] == targets[-1] == ("out", fused.outs[0])
    np.testing.assert_array_equal(np.asarray(remat.jit(update)(p, g)), np.asarray(update(p, g)))


_UNARY = [jnp.tanh, jnp.negative, jnp.exp, jnp.sqrt, lambda x: x * 0.5 + 1.0]  # (fusible ones)
_BINARY = [jnp.add, jnp.subtract, jnp.multiply, jnp.maximum, jnp.minimum, jnp.divide]


@st.composite
def _elementwise_programs(draw):
    ops = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.integers(0, 30),
                                  st.integers(0, 30)), min_size=2, max_size=10))
    outs = draw(st.lists(st.integers(0, 30), min_size=1, max_size=3))
    return ops, outs, draw(st.integers(0, 2 ** 31 - 1))


@settings(max_examples=25, deadline=None)
@given(_elementwise_programs())
def test_generated_fused_runs_equal_their_steps_and_keep_the_peak(program):
    """Random elementwise chains on 153,600 elements (two tiles, the second partial), values
    read several times, several of them returned, inputs of the run's own dying in it (their
    buffers reused for outputs and intermediates): the fused plan gives the eager result bit
    for bit (NaNs as NaNs; a subnormal eager value is a zero of its sign there, flushed as XLA
    flushes it), at a peak no higher than the steps'."""
    ops, outs, seed = program
    a, b = jnp.asarray(_rand((600, 256), seed)), jnp.asarray(_rand((600, 256), seed + 1))

    def fn(a, b):
        vals = [a * 1.5, b - 0.5]
        for binary, k, i, j in ops:
            x, y = vals[i % len(vals)], vals[j % len(vals)]
            vals.append(_BINARY[k % len(_BINARY)](x, y) if binary else _UNARY[k % len(_UNARY)](x))
        return [vals[-1]] + [vals[i % len(vals)] for i in outs]

    assume(any(type(s) is FusedStep for s in _steps(fn, a, b)))
    for got, want in zip(remat.jit(fn)(a, b), fn(a, b)):
        got, want = np.asarray(got), np.asarray(want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        # (a plan flushes subnormal results to zero, as XLA does; eager NumPy keeps them)
        subnormal = (want != 0) & (np.abs(want) < np.finfo(np.float32).tiny)
        assert (got[subnormal] == 0).all() and \
            (np.signbit(got[subnormal]) == np.signbit(want[subnormal])).all()
        kept = ~np.isnan(want) & ~subnormal
        np.testing.assert_array_equal(got[kept].view(np.uint32), want[kept].view(np.uint32))
    fused_peak = memory.peak_memory(remat.jit(fn), a, b)
    old = fusion.FUSE_MIN_ELEMENTS
    fusion.FUSE_MIN_ELEMENTS = 1 << 62
    try:
        unfused_peak = memory.peak_memory(remat.jit(fn), a, b)
    finally:
        fusion.FUSE_MIN_ELEMENTS = old
    assert fused_peak <= unfused_peak
