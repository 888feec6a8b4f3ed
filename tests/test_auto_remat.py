"""Automatic rematerialization under a memory budget: ``checkpoint_policies.memory_budget``
(one checkpoint region) and ``remat.auto_remat`` (a whole function's structure)."""

import itertools

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import checkpoint_policies as cp
from remat import memory
from remat.ad_checkpoint import print_saved_residuals, saved_residuals
from remat.checkpointing.budget import recompute_cost, recording, solve_ilp
from remat.test_util import check_grads

FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)


def mlp(params, x):
    for w1, w2 in params:
        x = x + jnp.tanh(x @ w1) @ w2
    return jnp.mean(x ** 2)


def jax_mlp(params, x):
    for w1, w2 in params:
        x = x + jjnp.tanh(x @ w1) @ w2
    return jjnp.mean(x ** 2)


def make_params(rng, depth, width, hidden):
    return [(rng.normal(size=(width, hidden)).astype("f4") * 0.2,
             rng.normal(size=(hidden, width)).astype("f4") * 0.2) for _ in range(depth)]


def assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(0)
    return make_params(rng, 4, 16, 32), rng.normal(size=(8, 16)).astype("f4")


# --- gradients equal no-remat ----------------------------------------------------------------


@pytest.mark.parametrize("fraction", FRACTIONS)
def test_budget_policy_gradients_equal_no_remat_and_jax(small, fraction):
    params, x = small
    expected = jax.grad(jax_mlp)(params, x)
    f = remat.checkpoint(mlp, policy=cp.memory_budget(fraction))
    assert_trees_close(remat.grad(f)(params, x), remat.grad(mlp)(params, x))
    assert_trees_close(remat.grad(f)(params, x), expected, rtol=2e-5)
    assert_trees_close(remat.jit(remat.grad(f))(params, x), expected, rtol=2e-5)


@pytest.mark.parametrize("fraction", FRACTIONS)
def test_auto_remat_gradients_equal_no_remat(small, fraction):
    params, x = small
    f = remat.auto_remat(mlp, memory_budget=fraction)
    expected = jax.grad(jax_mlp)(params, x)
    assert_trees_close(remat.grad(f)(params, x), expected, rtol=2e-5)
    assert_trees_close(remat.jit(remat.grad(f))(params, x), expected, rtol=2e-5)
    value, grads = remat.value_and_grad(f)(params, x)
    np.testing.assert_allclose(value, jax_mlp(params, x), rtol=1e-5)
    out, pullback = remat.vjp(f, params, x)
    assert_trees_close(pullback(jnp.float32(1.0))[0], expected, rtol=2e-5)


def test_auto_remat_check_grads(small):
    params, x = small
    f = remat.auto_remat(lambda x: mlp(params, x), memory_budget=0.0)
    check_grads(f, (x.astype("f4"),), order=1, modes=("fwd", "rev"), atol=2e-2, rtol=2e-2)


def scan_model(w, x):
    def body(h, _):
        return h + jnp.tanh(h @ w), None
    h, _ = remat.lax.scan(body, x, None, length=6)
    return jnp.sum(h ** 2)


def jax_scan_model(w, x):
    def body(h, _):
        return h + jjnp.tanh(h @ w), None
    h, _ = jax.lax.scan(body, x, None, length=6)
    return jjnp.sum(h ** 2)


@pytest.mark.parametrize("fraction", (0.0, 0.5, 1.0))
def test_scan_body_under_budget(fraction):
    rng = np.random.default_rng(1)
    w = rng.normal(size=(8, 8)).astype("f4") * 0.3
    x = rng.normal(size=(4, 8)).astype("f4")
    expected = jax.grad(jax_scan_model, argnums=(0, 1))(w, x)
    for f in (remat.auto_remat(scan_model, memory_budget=fraction),
              remat.checkpoint(scan_model, policy=cp.memory_budget(fraction))):
        assert_trees_close(remat.grad(f, argnums=(0, 1))(w, x), expected, rtol=2e-5)
        with recording() as found:
            step = remat.jit(remat.grad(f, argnums=(0, 1)))
            assert_trees_close(step(w, x), expected, rtol=2e-5)
        assert memory.peak_memory(step, w, x) <= found[0].budget


def test_scan_regions_use_the_fast_solver_small_graphs_the_ilp(small):
    params, x = small
    rng = np.random.default_rng(2)
    w, xs = rng.normal(size=(8, 8)).astype("f4"), rng.normal(size=(4, 8)).astype("f4")
    with recording() as found:
        remat.grad(remat.checkpoint(mlp, policy=cp.memory_budget(0.5)))(params, x)
        remat.grad(remat.checkpoint(scan_model, policy=cp.memory_budget(0.5)))(w, xs)
    mlp_choice, scan_choice = found
    assert any(c[0].primitive.name == "dot_general" for c in mlp_choice.saved
               + mlp_choice.recomputed)
    assert (mlp_choice.method, scan_choice.method) == ("ilp", "greedy")
    # inside the scan body: candidates weighted by the trip count
    body = [c for c in scan_choice.saved + scan_choice.recomputed if c[0].primitive.name == "tanh"]
    assert body and all(size == 6 * 4 * 8 * 4 for _, size, _ in body)


def test_cuts_fall_between_blocks():
    from remat.checkpointing.auto_remat import crossing_bytes, cut_points
    rng = np.random.default_rng(4)
    params, x = make_params(rng, 5, 16, 64), rng.normal(size=(32, 16)).astype("f4")
    jaxpr = remat.make_jaxpr(mlp)(params, x).jaxpr
    crossing = crossing_bytes(jaxpr)
    adds = [i for i, e in enumerate(jaxpr.eqns) if e.primitive.name == "add"
            and e.outvars[0].aval.shape == (32, 16)]
    assert all(crossing[i] == x.nbytes for i in adds[:-1])
    cuts = cut_points(jaxpr, 6)
    assert cuts == adds  # one block per segment, the loss on its own


def test_nested_hand_checkpoint_respected(small):
    params, x = small

    def block(h, w1, w2):
        return h + jnp.tanh(h @ w1) @ w2

    hand = remat.checkpoint(block, policy=cp.nothing_saveable)

    def f(params, x):
        for w1, w2 in params:
            x = hand(x, w1, w2)
        return jnp.mean(x ** 2)

    expected = jax.grad(jax_mlp)(params, x)
    for budget in (0.0, 1.0):
        g = remat.checkpoint(f, policy=cp.memory_budget(budget))
        assert_trees_close(remat.grad(g)(params, x), expected, rtol=2e-5)
        a = remat.auto_remat(f, memory_budget=budget)
        assert_trees_close(remat.jit(remat.grad(a))(params, x), expected, rtol=2e-5)
    # the hand checkpoint saves nothing inside, whatever the budget: no tanh is a residual
    for _, src in saved_residuals(remat.checkpoint(f, policy=cp.memory_budget(1.0)), params, x):
        assert "tanh" not in src


def test_vmap_matches_loop(small):
    params, x = small
    xs = np.stack([x, 2 * x, -x])
    f = remat.grad(remat.auto_remat(mlp, memory_budget=0.3), argnums=1)
    g = remat.grad(remat.checkpoint(mlp, policy=cp.memory_budget(0.3)), argnums=1)
    for fun in (f, g):
        batched = remat.vmap(fun, in_axes=(None, 0))(params, xs)
        looped = np.stack([np.asarray(fun(params, xi)) for xi in xs])
        np.testing.assert_allclose(np.asarray(batched), looped, rtol=1e-5, atol=1e-6)


# --- the budget holds on generated programs ---------------------------------------------------


def generated_program(seed):
    """A random MLP / residual stack: depth, widths, activations and residual links drawn."""
    rng = np.random.default_rng(seed)
    depth = int(rng.integers(2, 7))
    width = int(rng.choice([8, 16, 32]))
    hidden = int(rng.choice([16, 32, 64]))
    batch = int(rng.choice([8, 32, 64]))
    acts = [("tanh", jnp.tanh, jjnp.tanh), ("sin", jnp.sin, jjnp.sin),
            ("relu", remat.nn.relu, jax.nn.relu)]
    layers = [(acts[int(rng.integers(3))], bool(rng.integers(2))) for _ in range(depth)]
    params = make_params(rng, depth, width, hidden)
    x = rng.normal(size=(batch, width)).astype("f4")

    def build(np_mod, which):
        def f(params, x):
            for (w1, w2), (act, residual) in zip(params, layers):
                y = act[which](x @ w1) @ w2
                x = x + y if residual else np_mod.tanh(y)
            return np_mod.mean(x ** 2)
        return f

    return build(jnp, 1), build(jjnp, 2), params, x


@pytest.mark.parametrize("seed", range(20))
def test_generated_programs_measured_peak_within_budget(seed):
    f, jf, params, x = generated_program(seed)
    expected = jax.grad(jf)(params, x)
    last_cost = None
    for fraction in (0.0, 0.5, 1.0):
        with recording() as choices:
            g = remat.jit(remat.grad(remat.auto_remat(f, memory_budget=fraction)))
            grads = g(params, x)
        choice = choices[0]
        assert memory.peak_memory(g, params, x) <= choice.budget
        assert choice.chosen.peak <= choice.budget
        assert_trees_close(grads, expected, rtol=5e-5, atol=1e-5)
        if last_cost is not None:  # more budget never gives more recompute
            assert choice.chosen.cost <= last_cost * (1 + 1e-9)
        last_cost = choice.chosen.cost
    # a byte budget just at the smallest feasible peak still holds
    smallest = min(s.peak for s in choice.options)
    g = remat.jit(remat.grad(remat.auto_remat(f, memory_budget=smallest)))
    assert memory.peak_memory(g, params, x) <= smallest


def test_auto_remat_reduces_measured_peak():
    rng = np.random.default_rng(3)
    params, x = make_params(rng, 8, 64, 128), rng.normal(size=(256, 64)).astype("f4")
    none = memory.peak_memory(remat.jit(remat.grad(mlp)), params, x)
    tight = memory.peak_memory(remat.jit(remat.grad(remat.auto_remat(mlp, memory_budget=0.0))),
                               params, x)
    assert tight < 0.6 * none


@pytest.mark.parametrize("seed", range(4))
def test_region_budget_modelled_peak_and_monotone_cost(seed):
    f, _, params, x = generated_program(100 + seed)
    last = None
    for fraction in FRACTIONS:
        with recording() as found:
            g = remat.jit(remat.grad(remat.checkpoint(f, policy=cp.memory_budget(fraction))))
            g(params, x)
        resolution = found[0]
        assert resolution.peak <= resolution.budget
        assert memory.peak_memory(g, params, x) <= resolution.budget
        if last is not None:
            assert resolution.cost <= last * (1 + 1e-9)
        last = resolution.cost
    assert found[0].cost == 0.0  # a fraction of 1.0 recomputes nothing


# --- the exact solver ------------------------------------------------------------------------


def brute_force(sizes, costs, needed, parents, limit):
    best = None
    for bits in itertools.product((0, 1), repeat=len(sizes)):
        saved = {i for i, b in enumerate(bits) if b}
        if sum(sizes[i] for i in saved) > limit:
            continue
        cost = recompute_cost(saved, costs, needed, parents)
        best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(25))
def test_ilp_equals_brute_force_on_tiny_graphs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    sizes = [int(s) for s in rng.integers(1, 20, size=n)]
    costs = [float(c) for c in rng.integers(1, 50, size=n)]
    needed = [bool(b) for b in rng.integers(0, 2, size=n)]
    parents = [sorted({int(j) for j in rng.integers(0, i, size=int(rng.integers(0, 3)))})
               if i else [] for i in range(n)]
    for limit in (0, sum(sizes) // 3, sum(sizes) // 2, sum(sizes)):
        chosen = solve_ilp(sizes, costs, needed, parents, limit)
        assert sum(sizes[i] for i in chosen) <= limit
        assert recompute_cost(chosen, costs, needed, parents) == pytest.approx(
            brute_force(sizes, costs, needed, parents, limit))


# --- bad input -------------------------------------------------------------------------------


def test_bad_input():
    with pytest.raises(ValueError, match="non-negative"):
        cp.memory_budget(-1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        cp.memory_budget(1.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        cp.memory_budget(float("nan"))
    with pytest.raises(TypeError, match="bytes_or_fraction"):
        cp.memory_budget("half")
    with pytest.raises(TypeError, match="bytes_or_fraction"):
        cp.memory_budget(True)
    with pytest.raises(TypeError, match="cost_model"):
        cp.memory_budget(0.5, cost_model=3)
    with pytest.raises(TypeError, match="auto_remat: memory_budget must be an int"):
        remat.auto_remat(mlp, memory_budget=None)
    with pytest.raises(ValueError, match="auto_remat: memory_budget must be non-negative"):
        remat.auto_remat(mlp, memory_budget=-5)
    with pytest.raises(TypeError, match="callable"):
        remat.auto_remat(3, memory_budget=0.5)


def test_budget_below_inputs_states_smallest_feasible(small):
    params, x = small
    for f in (remat.checkpoint(mlp, policy=cp.memory_budget(16)),
              remat.auto_remat(mlp, memory_budget=16)):
        with pytest.raises(ValueError, match=r"smallest feasible budget for this function is "
                                             r"\d+ bytes"):
            remat.grad(f)(params, x)


def test_cost_model_hook_is_used(small):
    params, x = small
    seen = []

    def cost(eqn):
        seen.append(eqn.primitive.name)
        return 1.0

    remat.grad(remat.checkpoint(mlp, policy=cp.memory_budget(0.5, cost_model=cost)))(params, x)
    assert "dot_general" in seen and "tanh" in seen


# --- what was chosen, and why ----------------------------------------------------------------


def test_print_saved_residuals_shows_the_budget_choice(small, capsys):
    params, x = small
    f = remat.checkpoint(mlp, policy=cp.memory_budget(1.0))
    residuals = saved_residuals(f, params, x)
    assert any("chosen by memory_budget(1.0)" in src and "recompute cost" in src
               for _, src in residuals)
    print_saved_residuals(f, params, x)
    out = capsys.readouterr().out
    assert "memory_budget(1.0): budget" in out and "modelled peak" in out
    assert "saved f32[8,32] output of tanh" in out
    print_saved_residuals(remat.auto_remat(mlp, memory_budget=0.0), params, x)
    out = capsys.readouterr().out
    assert "auto_remat(0.0): budget" in out and "chose" in out


def test_fraction_zero_saves_less_than_one(small):
    params, x = small
    low = saved_residuals(remat.checkpoint(mlp, policy=cp.memory_budget(0.0)), params, x)
    high = saved_residuals(remat.checkpoint(mlp, policy=cp.memory_budget(1.0)), params, x)
    assert sum(a.nbytes for a, _ in low) <= sum(a.nbytes for a, _ in high)


# --- the trade-off explorer ------------------------------------------------------------------


def test_tradeoff_table_and_plot(tmp_path):
    rng = np.random.default_rng(5)
    params, x = make_params(rng, 4, 32, 64), rng.normal(size=(64, 32)).astype("f4")
    block = remat.checkpoint(lambda x, w1, w2: x + jnp.tanh(x @ w1) @ w2)

    def per_block(params, x):
        for w1, w2 in params:
            x = block(x, w1, w2)
        return jnp.mean(x ** 2)

    table = memory.tradeoff(mlp, params, x, budgets=(0.0, 1.0), repeat=1,
                            variants={"per block": per_block})
    labels = [r.label for r in table]
    rows = {r.label: r for r in table}
    assert rows["per block"].peak_bytes < rows["no remat"].peak_bytes
    assert rows["auto_remat(0.0)"].peak_bytes <= rows["per block"].peak_bytes
    assert labels[0] == "no remat" and "checkpoint(dots_saveable)" in labels
    assert "auto_remat(0.0)" in labels and "auto_remat(1.0)" in labels
    for r in table:
        if r.budget is not None:
            assert r.peak_bytes <= r.budget
    assert any(r.pareto for r in table)
    assert "peak MiB" in str(table) and "auto_remat(0.0)" in str(table)
    path = memory.plot_tradeoff(table, tmp_path / "tradeoff.png")
    assert (tmp_path / "tradeoff.png").read_bytes()[:4] == b"\x89PNG" and path


def test_known_nested_checkpoint_inside_a_split_checkpoint():
    """Regression: a nested checkpoint with only non-differentiated operands is a known
    equation of the outer split; its ``policy`` param once collided with policy_answer's."""
    inner = remat.checkpoint(lambda n: jnp.sin(n * 1.0))
    f = remat.checkpoint(lambda x, n: jnp.sum(inner(n) * x), policy=cp.dots_saveable)
    np.testing.assert_allclose(remat.grad(f)(jnp.ones(3), jnp.arange(3.0)), np.sin(np.arange(3.0)),
                               rtol=1e-6)


@pytest.mark.parametrize("budget", [0.0, 0.5, 1.0])
def test_auto_remat_of_a_function_with_its_own_refs(budget):
    """The Refs a function creates are discharged before its structure is cut and modelled
    (found by the fuzzer: a Ref write inside a segment failed the split)."""
    def f(x):
        r = remat.new_ref(jnp.zeros((2, 3)))
        r[...] += x * x
        r[0] += jnp.sin(x[0])
        return remat.freeze(r) * 2

    x = np.linspace(0.1, 0.6, 6).reshape(2, 3)
    want = remat.grad(lambda x: jnp.sum(f(x) ** 2))(x)
    got = remat.grad(lambda x: jnp.sum(remat.auto_remat(f, memory_budget=budget)(x) ** 2))(x)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_auto_remat_of_a_function_reverse_mode_cannot_differentiate():
    """A function no one differentiates runs as it is even when reverse mode could not go
    through it (a fori_loop with a traced bound); its gradient raises the usual error (found
    by the fuzzer: ``auto_remat(grad(f))`` weighed a second derivative)."""
    def f(x, n):
        return remat.lax.fori_loop(0, n, lambda i, c: jnp.sin(c) + x, x)

    x = np.linspace(0.1, 0.5, 3)
    auto = remat.auto_remat(f, memory_budget=0.5)
    np.testing.assert_allclose(auto(x, 3), f(x, 3), rtol=1e-12)
    np.testing.assert_allclose(remat.jit(auto)(x, 3), f(x, 3), rtol=1e-12)
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
        remat.grad(lambda x: jnp.sum(auto(x, jnp.int32(3))))(x)


# --- issue 31 §3: regions whose candidates save zero bytes ------------------------------------
# A value in a loop that runs no iteration (a scan or fori_loop of length 0, or a scan over
# zero-length xs) takes no bytes if saved: it is no candidate of a budget, which divided each
# candidate's recompute cost by its bytes (ZeroDivisionError). JAX's plain gradient runs.


def _scan_of_length_0(x):
    c, ys = remat.lax.scan(lambda c, _: (jnp.sin(c) * c, jnp.cos(c)), x, None, length=0)
    return jnp.sum(c * x) + jnp.sum(ys) + jnp.sum(jnp.tanh(x) * x)


def _fori_loop_of_length_0(x):
    return jnp.sum(remat.lax.fori_loop(0, 0, lambda i, c: jnp.sin(c) * c, x) * jnp.tanh(x))


def _scan_over_zero_size_xs(x):
    c, ys = remat.lax.scan(lambda c, r: (c + jnp.sin(r), jnp.exp(r)), x[0], x[:0])
    return jnp.sum(c * c) + jnp.sum(ys) + jnp.sum(jnp.cos(x) * x)


def _scan_of_length_0_in_a_scan(x):
    def outer(c, _):
        c2, ys = remat.lax.scan(lambda k, _: (jnp.sin(k) * k, jnp.cos(k)), c, None, length=0)
        return c2 * 1.5 + jnp.sum(ys), jnp.sin(c)
    c, ys = remat.lax.scan(outer, x, None, length=2)
    return jnp.sum(c ** 2) + jnp.sum(ys)


def _zero_size_values_in_a_scan(x):
    def body(c, _):
        z = jnp.sin(c[:, :0]) * 2.0
        return c * jnp.cos(c) + jnp.sum(z), z
    c, zs = remat.lax.scan(body, x, None, length=2)
    return jnp.sum(c) + jnp.sum(zs) + jnp.sum(jnp.sin(x[:0]) @ jnp.ones((3, 2)))


def _revolve_scan_and_jitted_scan_of_length_0(x):
    c, _ = remat.lax.scan(lambda c, _: (jnp.sin(c) * c, None), x, None, length=0, checkpoints=2)
    d = remat.jit(lambda a: remat.lax.scan(lambda k, _: (jnp.exp(k) * k, None), a, None,
                                           length=0)[0])(x)
    return jnp.sum(c * d * jnp.tanh(x))


@pytest.mark.parametrize("f", [_scan_of_length_0, _fori_loop_of_length_0,
                               _scan_over_zero_size_xs, _scan_of_length_0_in_a_scan,
                               _zero_size_values_in_a_scan,
                               _revolve_scan_and_jitted_scan_of_length_0])
@pytest.mark.parametrize("jit", [False, True])
def test_budgets_of_regions_whose_values_save_zero_bytes(f, jit):
    x = np.linspace(-0.6, 0.7, 12, dtype=np.float32).reshape(4, 3)
    want = np.asarray(remat.grad(f)(x))
    wrap = remat.jit if jit else (lambda g: g)
    for fraction in (0.0, 0.5, 1.0):
        policy = cp.memory_budget(fraction)
        got = wrap(remat.grad(remat.checkpoint(f, policy=policy)))(x)
        np.testing.assert_array_equal(np.asarray(got), want)
        got = wrap(remat.grad(remat.auto_remat(f, memory_budget=fraction)))(x)
        np.testing.assert_array_equal(np.asarray(got), want)
    with recording() as found:  # (every candidate saves some bytes)
        wrap(remat.grad(remat.checkpoint(f, policy=cp.memory_budget(0.5))))(x)
    assert found and all(size > 0 for r in found for _, size, _ in r.saved + r.recomputed)
