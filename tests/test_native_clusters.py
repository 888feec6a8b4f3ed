"""Native elementwise clusters (``remat.exec.native_clusters``): a plan's runs of small
elementwise steps computed by one numba kernel give the steps' results bit for bit, on every
clustered primitive, on special values and on generated programs; a result written into a
dying input's buffer never raises the peak; a replaced impl or the flag off runs the steps."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat
import remat.numpy as jnp
from remat import lax, memory
from remat.config import config
from remat.exec import native_clusters, plan_for
from remat.exec.plan import interpreted

pytest.importorskip("numba")

SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.5, -2.25,
                    1e30, -1e30, 0.5, 2.0, -0.5], np.float32)


def _operands(rng, shape):
    """Arrays of ``shape`` mixing special values with random ones (ties included)."""
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    n = len(SPECIAL)
    flat_a[:n * n] = np.repeat(SPECIAL, n)[:flat_a.size]  # every pair of specials
    flat_b[:n * n] = np.tile(SPECIAL, n)[:flat_b.size]
    flat_b[n * n:n * n + 20] = flat_a[n * n:n * n + 20]  # equal operands
    return a, b


def _clusters(fn, *args):
    plan = plan_for(remat.jit(fn).lower(*args).jaxpr)
    return plan, list(plan.clusters.values())


def _bits(x):
    """The bits of ``x``, every NaN as one NaN (a NaN's sign is the hardware's: x86's 0/0
    gives a negative NaN, NumPy's loops may give a positive one)."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        return x
    return np.where(np.isnan(x), np.nan, x).astype(x.dtype).view(f"u{x.dtype.itemsize}")


def _check(native, fn, *args, expect_cluster=True):
    """``fn`` jitted, run by its native clusters, equals its steps run one by one, bit for
    bit (NaNs as NaNs); returns how many cluster runs were native."""
    jitted = remat.jit(fn)
    with interpreted():
        want = jitted(*args)
    jitted(*args)  # (heats the plan: eager() compiles its clusters at once)
    plan, clusters = _clusters(fn, *args)
    if expect_cluster:
        assert clusters, "no cluster formed"
        assert all(c.loop is not None and c.loop.state == "ready" for c in clusters), \
            [(c.loop and c.loop.state, c.loop and c.loop.error) for c in clusters]
    ran = []
    orig = native_clusters.Cluster.run_native

    def counting(self, env, owned):
        ran.append(orig(self, env, owned))
        return ran[-1]

    native_clusters.Cluster.run_native = counting
    try:
        got = jitted(*args)
    finally:
        native_clusters.Cluster.run_native = orig
    for g, w in zip(remat.tree_util.tree_leaves(got), remat.tree_util.tree_leaves(want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(_bits(g), _bits(w))
    if expect_cluster:
        assert ran and all(ran)
    return sum(ran)


BINARY = {
    "add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "max": lax.max,
    "min": lax.min,
}
COMPARE = {"eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_arithmetic_on_special_values_equals_numpy_bit_for_bit(native_loops, rng, name):
    op = BINARY[name]
    a, b = _operands(rng, (24, 40))
    _check(native_loops, lambda a, b: lax.neg(op(op(a, b), lax.abs(b))), a, b)
    _check(native_loops, lambda a, b: op(b, op(a, 0.0)) * 2.0, a, b)  # (literal operands)


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_comparisons_and_selects_equal_numpy_bit_for_bit(native_loops, rng, name):
    op = COMPARE[name]
    a, b = _operands(rng, (24, 40))
    _check(native_loops, lambda a, b: lax.select(op(a, b), a * b, lax.square(b)), a, b)


def test_logical_ops_and_conversions(native_loops, rng):
    a, b = _operands(rng, (24, 40))
    i = rng.integers(-5, 5, (24, 40)).astype(np.int32)

    def f(a, b, i):
        p = lax.bitwise_and(lax.lt(a, b), lax.bitwise_not(lax.eq(a, 0.0)))
        q = lax.bitwise_or(p, lax.bitwise_xor(lax.gt(i, 0), lax.ne(b, b)))
        return (lax.convert_element_type(q, np.float32) + lax.convert_element_type(i, np.float32)
                * a, lax.convert_element_type(a, np.bool_), i * 3 + i)
    _check(native_loops, f, a, b, i)


def test_relu_gradient_chain_takes_the_dying_inputs_buffer(native_loops, rng):
    """JAX's gradient of ``maximum(x @ w + b, 0)``: one kernel, the result written into the
    product's buffer, the peak no higher than the steps'."""
    x = rng.standard_normal((64, 32)).astype(np.float32)
    w = rng.standard_normal((32, 48)).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)

    def loss(w, b, x):
        return jnp.sum(jnp.maximum(x @ w + b, 0.0) ** 2)
    grad = remat.grad(loss, argnums=(0, 1))
    assert _check(native_loops, grad, w, b, x) >= 1
    plan, clusters = _clusters(grad, w, b, x)
    assert any(c.donors for c in clusters)
    jitted = remat.jit(grad)
    with config.override("remat_native_loops", False):
        steps = memory.peak_memory(jitted, w, b, x)
    assert memory.peak_memory(jitted, w, b, x) <= steps


def test_a_large_update_is_one_pass_over_its_fused_steps(native_loops, rng):
    """An SGD update ``p - 0.01 * g`` of a dying gradient too large for a tiny-array kernel:
    the plan's fused step (two passes of tiles) becomes one native pass, written into the
    gradient's buffer, the peak no higher than the steps'."""
    from remat.exec.fusion import FusedStep
    p, x = rng.standard_normal((2, 300, 400)).astype(np.float32)

    def update(p, x):
        return p - 0.01 * jnp.cumsum(x, axis=1)
    assert _check(native_loops, update, p, x) == 1
    plan, [cluster] = _clusters(update, p, x)
    start = next(i for i, c in plan.clusters.items())
    assert type(plan.steps[start]) is FusedStep and cluster.span == 1
    assert [m.primitive.name for m in cluster.members] == ["mul", "sub"]
    assert cluster.donors  # (into the cumulative sum's, which dies there)
    jitted = remat.jit(update)
    with config.override("remat_native_loops", False):
        steps = memory.peak_memory(jitted, p, x)
    assert memory.peak_memory(jitted, p, x) <= steps


def test_clusters_never_raise_a_measured_peak(native_loops, rng):
    """The gradient of a masked softmax (attention's): the steps' broadcast of the mask is a
    NumPy view (no memory) read again by the backward pass; a kernel materializing it, or
    judged against steps that counted it, would hold more memory than the steps did."""
    s = rng.standard_normal((4, 96, 96)).astype(np.float32)
    mask = np.tril(np.ones((96, 96), bool))

    def loss(s, mask):
        logits = jnp.where(mask, s / 4.9, -1e9)
        p = remat.nn.softmax(logits, axis=-1)
        return jnp.sum(p * p)
    grad = remat.jit(remat.grad(loss))
    with config.override("remat_native_loops", False):
        grad(s, mask)
        steps = memory.peak_memory(grad, s, mask)
    grad(s, mask)
    assert _clusters(remat.grad(loss), s, mask)[1]
    assert memory.peak_memory(grad, s, mask) <= steps
    _check(native_loops, remat.grad(loss), s, mask)


def test_two_steps_form_a_cluster_only_on_large_arrays(native_loops, rng):
    """One call costs more than two NumPy passes over a small array: a pair of steps is a
    cluster only from ``MIN_PAIR_ELEMENTS`` on."""
    def fn(a, b):
        return a * b - b
    for n, want in ((64, 0), (native_clusters.MIN_PAIR_ELEMENTS, 1)):
        a, b = rng.standard_normal((2, n)).astype(np.float32)
        assert len(_clusters(fn, a, b)[1]) == want
        _check(native_loops, fn, a, b, expect_cluster=bool(want))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_xla_kernels_alone_form_clusters_and_give_their_impls_bits(native_loops, rng, dtype):
    """One of XLA's float kernels (``random.kernels``: dozens of NumPy passes each) pays for a
    cluster by itself, and its native form gives the impl's bits (normal noise: ``erf_inv``,
    ``log1p`` and the FMAs of both), specials included."""
    from remat.random import kernels

    x = np.concatenate([rng.uniform(-1, 1, 3000), [0.0, -0.0, 1.0, -1.0, np.nan, 0.999999]])
    x = x.astype(dtype)
    with config.override("jax_enable_x64", True):
        for prim in (kernels.xla_erf_inv_p, kernels.xla_log1p_p):
            fn = lambda v, prim=prim: prim.bind(v)  # noqa: E731
            assert len(_clusters(fn, x)[1]) == 1
            assert _check(native_loops, fn, x) == 1
        fn = lambda a, b, c: kernels.fma_p.bind(a, b, c)  # noqa: E731
        assert _check(native_loops, fn, x, x[::-1].copy(), x * 3) == 1


def test_a_view_read_after_a_run_ends_its_cluster_before_it(native_loops, rng):
    """A run of eligible steps ending in a view the plan reads later (a broadcast the kernel
    would have to materialize) clusters without that view."""
    a, b = rng.standard_normal((2, 64)).astype(np.float32)

    def fn(a, b):
        c = (a * b + a) * b - a
        return c, jnp.broadcast_to(c[:, None], (64, 3)) + 1.0
    plan, clusters = _clusters(fn, a, b)
    assert len(clusters) >= 1
    names = [m.primitive.name for m in clusters[0].members]
    assert names[-1] != "broadcast_in_dim" and "mul" in names
    _check(native_loops, fn, a, b)


def test_scalar_broadcasts_are_read_as_scalars(rng):
    """A select between broadcast constants (``maximum``'s gradient) reads the constants:
    no broadcast is materialized."""
    x = rng.standard_normal((64, 48)).astype(np.float32)
    fn = remat.grad(lambda x: jnp.sum(jnp.maximum(x, 0.0)))
    names = [e.primitive.name for e in plan_for(remat.jit(fn).lower(x).jaxpr).jaxpr.eqns]
    assert "broadcast_in_dim" not in names
    np.testing.assert_array_equal(remat.jit(fn)(x), (x > 0).astype(np.float32))


def test_a_replaced_impl_or_the_flag_off_runs_the_steps(native_loops, rng):
    a, b = rng.standard_normal((2, 16, 16)).astype(np.float32)

    def fn(a, b):
        return (a * b + a) * b - a
    jitted = remat.jit(fn)
    jitted(a, b)
    _, clusters = _clusters(fn, a, b)
    assert clusters and clusters[0].loop.state == "ready"
    calls = []
    mul = lax.mul_p.impl
    lax.mul_p.impl = lambda *xs: calls.append(1) or mul(*xs)
    try:
        out = jitted(a, b)
    finally:
        lax.mul_p.impl = mul
    assert len(calls) == 2
    np.testing.assert_array_equal(out, fn(a, b))
    orig = native_clusters.Cluster.run_native
    with config.override("remat_native_loops", False):
        assert clusters[0].run_native([None] * 99, set()) is False
    assert orig is native_clusters.Cluster.run_native


def test_cluster_results_keep_the_plans_accounting(native_loops, rng):
    """Every buffer a native cluster returns is tracked, and freed with the run."""
    a, b = _operands(rng, (32, 32))
    jitted = remat.jit(lambda a, b: ((a + b) * a - b, lax.max(a, b) * 2.0 + a))
    jitted(a, b)
    before = memory.live_bytes()
    outs = jitted(a, b)
    del outs
    assert memory.live_bytes() == before


# --- generated programs ----------------------------------------------------------------------

_UNARY = [lax.neg, lax.abs, lax.square, lambda x: lax.max(x, 0.0), lambda x: x * 0.5,
          lambda x: lax.select(lax.gt(x, 1.0), x, -x)]
_BIN = [lax.add, lax.sub, lax.mul, lax.div, lax.max, lax.min,
        lambda x, y: lax.select(lax.le(x, y), y, x),
        lambda x, y: lax.convert_element_type(lax.eq(x, y), np.float32) + x]


@st.composite
def _programs(draw):
    steps = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 7), st.integers(0, 50),
                                    st.integers(0, 50)), min_size=3, max_size=12))
    rows = draw(st.sampled_from([1, 3, 8, 1700]))  # (1700 rows: fused steps, in clusters)
    return steps, rows, draw(st.integers(0, 2 ** 31 - 1))


@settings(max_examples=30, deadline=None)
@given(_programs())
def test_generated_elementwise_programs_equal_their_steps(program):
    """Random chains of the clustered operations (with a broadcast bias row and scalar
    literals) on special values: the native clusters give the steps' bits."""
    from remat.exec import native
    steps, rows, seed = program
    rng = np.random.default_rng(seed)
    a, b = _operands(rng, (rows, 40))
    bias = rng.standard_normal(40).astype(np.float32)

    def fn(a, b, bias):
        vals = [a, b, a + bias]
        for binary, k, i, j in steps:
            x, y = vals[i % len(vals)], vals[j % len(vals)]
            vals.append(_BIN[k % len(_BIN)](x, y) if binary else _UNARY[k % len(_UNARY)](x))
        return vals[-1], vals[-2]
    with config.override("remat_native_loops", True), native.eager():
        _check(native, fn, a, b, bias, expect_cluster=False)
