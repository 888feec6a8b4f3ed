"""Memory accounting: exactness (against tracemalloc), timelines, and the measured peaks of the
block-stack gradient under each policy against the analytic expectation (unrolled and scan)."""

import importlib.util
import os
import sys
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import memory

_BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "benchmarks")
sys.path.insert(0, _BENCHMARKS)  # block_stack imports its sibling harness module
_spec = importlib.util.spec_from_file_location(
    "block_stack", os.path.join(_BENCHMARKS, "block_stack.py"))
block_stack = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(block_stack)


def _numpy_traced_bytes():
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
    return sum(stat.size for stat in snapshot.statistics("filename"))


def test_accounting_matches_tracemalloc():
    x = jnp.ones((256, 256))
    tracemalloc.start()
    try:
        base_np, base_live = _numpy_traced_bytes(), memory.live_bytes()
        ys = [jnp.sin(x * float(i)) for i in range(4)]
        z = ys[0].reshape(-1)  # a view: no new bytes
        grew_np = _numpy_traced_bytes() - base_np
        grew_live = memory.live_bytes() - base_live
        assert grew_live == 4 * x.nbytes
        assert abs(grew_np - grew_live) <= 4096  # NumPy's own small bookkeeping only
        del ys, z
        assert memory.live_bytes() == base_live
    finally:
        tracemalloc.stop()


def test_peak_memory_and_reset():
    n = 1 << 16

    def f(x):
        a = jnp.sin(x)
        b = jnp.cos(x)
        return a + b

    x = jnp.ones(n)
    assert memory.peak_memory(f, x) == 3 * 4 * n  # a, b and the result
    memory.reset_peak()
    assert memory.peak_bytes() == memory.live_bytes()


@pytest.mark.parametrize("measure", ["peak", "timeline"])
def test_garbage_from_before_a_measurement_is_not_collected_inside_it(measure):
    """Unreachable arrays from before the call (held in a reference cycle) are not collected
    during the measurement: their bytes would be subtracted from the call's own."""
    import gc

    class Cycle:
        pass

    n = 1 << 16
    f = remat.jit(lambda x: x * 2.0 + 1.0)
    x = jnp.ones(n)
    f(x)
    thresholds = gc.get_threshold()
    gc.disable()
    try:
        garbage = Cycle()
        garbage.self, garbage.array = garbage, jnp.ones(4 * n) * 2.0
        del garbage

        def allocating(x):
            _ = [{} for _ in range(5000)]  # (a collection would start here, freeing the
            return f(x)                    # cycle above and its array)

        gc.set_threshold(500)  # (not before the call: it allocates far fewer objects)
        gc.enable()

        if measure == "peak":
            assert memory.peak_memory(allocating, x) == 4 * n
        else:
            assert min(b for _, b in memory.memory_timeline(allocating, x)) >= 0
    finally:
        gc.set_threshold(*thresholds)
        gc.enable()
        gc.collect()


def test_timeline_labels_and_jit():
    def f(x):
        return jnp.sum(jnp.sin(x) * 2.0)  # timeline line

    x = jnp.ones(1000)
    samples = memory.memory_timeline(remat.grad(f), x)
    assert samples[0] == ("start", 0) and samples[-1][0] == "end (outputs alive)"
    assert any(label.startswith("sin at test_memory.py") for label, _ in samples)
    assert max(b for _, b in samples) >= 2 * 4000
    jitted = memory.memory_timeline(remat.jit(remat.grad(f)), x)
    # under jit only the gradient's work remains (sin is dead code): cos, labelled by line
    assert any(label.startswith("cos at test_memory.py") for label, _ in jitted)
    assert samples[-1][1] == jitted[-1][1] == 4000  # the gradient


def test_plot_memory_timeline(tmp_path):
    pytest.importorskip("matplotlib")
    x = jnp.ones(1000)
    timelines = {name: memory.memory_timeline(remat.grad(fn), x)
                 for name, fn in [("plain", lambda v: jnp.sum(jnp.sin(jnp.sin(v)))),
                                  ("remat", remat.checkpoint(
                                      lambda v: jnp.sum(jnp.sin(jnp.sin(v)))))]}
    path = memory.plot_memory_timeline(timelines, tmp_path / "timeline.png")
    assert os.path.getsize(path) > 1000


SMALL = dict(L=4, D=32, T=256)


def _weights(L, D, T):
    rng = np.random.default_rng(0)
    weights = [((rng.standard_normal((D, 4 * D)) / np.sqrt(D)).astype(np.float32),
                (rng.standard_normal((4 * D, D)) / np.sqrt(4 * D) / L).astype(np.float32))
               for _ in range(L)]
    return weights, jnp.asarray(rng.standard_normal((T, D)).astype(np.float32))


FUSED = dict(L=4, D=32, T=512)  # hidden arrays of 2**16 elements: the executor fuses them


@pytest.mark.parametrize("form", ["unrolled", "scan"])
@pytest.mark.parametrize("jit,size", [(True, SMALL), (False, SMALL), (True, FUSED)])
def test_measured_peaks_match_the_analytic_expectation(form, jit, size):
    weights, h0 = _weights(**size)
    params = block_stack.remat_params(form, weights)
    peaks = {}
    for policy in ("none", "checkpoint", "dots_saveable"):
        step = block_stack.make_remat_step(form, policy)
        fn = step if jit else step.fun
        fn(params, h0)
        peaks[policy] = memory.peak_memory(fn, params, h0)
        expected = block_stack.analytic_minimum(policy, form=form, fused=jit and size is FUSED,
                                                **size)
        assert 0.8 * expected <= peaks[policy] <= 1.2 * expected, (policy, peaks[policy],
                                                                   expected)
    assert peaks["checkpoint"] < peaks["dots_saveable"] < peaks["none"]
    # checkpointing per block must cut the peak to well under half at this depth
    assert peaks["checkpoint"] < 0.45 * peaks["none"]


def test_gradients_identical_across_policies():
    weights, h0 = _weights(**SMALL)
    for form in ("unrolled", "scan"):
        params = block_stack.remat_params(form, weights)
        ref = block_stack.make_remat_step(form, "none")(params, h0)
        for policy in ("checkpoint", "dots_saveable"):
            out = block_stack.make_remat_step(form, policy)(params, h0)
            for a, b in zip(remat.tree_util.tree_leaves(out), remat.tree_util.tree_leaves(ref)):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_numpy_floor_computes_the_same_gradients():
    weights, h0 = _weights(**SMALL)
    floor = block_stack.numpy_step(weights, np.asarray(h0))
    ours = block_stack.make_remat_step("unrolled", "none")(
        block_stack.remat_params("unrolled", weights), h0)
    for (a, b), (c, d) in zip(floor, ours):
        np.testing.assert_allclose(c, a, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(d, b, rtol=1e-4, atol=1e-6)
    with ThreadPoolExecutor(2) as pool:  # the data-parallel floor: two halves of the tokens
        threaded = block_stack.numpy_step_threaded(weights, np.asarray(h0), pool, 2)
    for (a, b), (c, d) in zip(floor, threaded):
        np.testing.assert_allclose(c, a, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(d, b, rtol=1e-4, atol=1e-6)


def test_accounting_is_exact_under_concurrent_holders():
    """Threads holding and releasing the same buffers (concurrent calls on shared inputs):
    no update is lost, so every count returns to where it started."""
    shared = [np.empty(1 << 10, np.float32) for _ in range(4)]
    base = memory.live_bytes()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible

    def churn(_):
        for _ in range(20_000):
            for buf in shared:
                memory.track(buf)
            for buf in shared:
                memory.untrack(buf)

    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(churn, range(4)))
    finally:
        sys.setswitchinterval(switch)
    assert [memory.holders(b) for b in shared] == [0] * 4
    assert memory.live_bytes() == base
