"""The ahead-of-time API: ``jit(f).trace/lower/compile``, ``Compiled`` calls, and the plan's
memory and cost analyses (checked against measured memory and against JAX)."""

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax, memory

jax = pytest.importorskip("jax")

f32 = np.float32


def f(x, y):
    return jnp.sin(x) @ y


X, Y = np.ones((4, 4), f32), np.ones((4, 2), f32)


def test_stage_objects_match_jax():
    ours, theirs = remat.jit(f), jax.jit(lambda x, y: jax.numpy.sin(x) @ y)
    traced, jtraced = ours.trace(X, Y), theirs.trace(X, Y)
    assert type(traced).__name__ == "Traced" and traced.fun_name == "f"
    assert str(traced.jaxpr) == str(remat.make_jaxpr(f)(X, Y))
    for attr in ("in_tree", "out_tree"):
        assert repr(getattr(traced, attr)) == repr(getattr(jtraced, attr))
    assert repr(traced.out_info) == repr(jtraced.out_info)
    lowered, jlowered = traced.lower(), theirs.lower(X, Y)
    assert repr(lowered.in_tree) == repr(jlowered.in_tree)
    assert repr(lowered.out_info) == repr(jlowered.out_info)
    (info_x, info_y), kwargs = lowered.args_info
    assert kwargs == {} and info_x.shape == (4, 4) and info_y.dtype == np.float32
    assert not info_x.donated
    compiled = lowered.compile()
    np.testing.assert_allclose(compiled(X, Y), jlowered.compile()(X, Y), rtol=1e-6)
    assert remat.jit(f).eval_shape(X, Y) == remat.ShapeDtypeStruct((4, 2), np.float32)
    assert repr(compiled.input_shardings[0][0]) == repr(
        jlowered.compile().input_shardings[0][0])


def test_compiled_takes_the_dynamic_arguments_and_checks_them():
    g = remat.jit(lambda x, n, *, k: x * n + k, static_argnums=1, static_argnames="k")
    compiled = g.lower(np.ones(2, f32), 3, k=1.0).compile()
    assert compiled(np.full(2, 2, f32)).tolist() == [7.0, 7.0]
    with pytest.raises(TypeError, match="input pytree does not match"):
        compiled(np.ones(2, f32), 3)
    with pytest.raises(TypeError, match=r"compiled with float32\[2\] and called with "
                                        r"float32\[3\]"):
        compiled(np.ones(3, f32))
    shapes = remat.jit(f).lower(remat.ShapeDtypeStruct((4, 4), np.float32), Y).compile()
    np.testing.assert_allclose(shapes(X, Y), f(X, Y), rtol=1e-6)


def test_lowered_text_shows_checkpoint_barriers():
    def loss(w, x, prevent_cse):
        inner = remat.checkpoint(lambda w, x: jnp.sin(jnp.tanh(w @ x)), prevent_cse=prevent_cse)
        return jnp.sum(inner(w, x))

    w, x = np.ones((3, 3), f32), np.ones(3, f32)
    text = remat.jit(remat.grad(lambda w, x: loss(w, x, True))).lower(w, x).as_text()
    assert "optimization_barrier" in text
    text = remat.jit(remat.grad(lambda w, x: loss(w, x, False))).lower(w, x).as_text()
    assert "optimization_barrier" not in text
    plan_text = remat.jit(f).lower(X, Y).compile().as_text()
    assert "plan: 2 steps" in plan_text and "dot_general -> f32[4,2]" in plan_text


def test_lowered_jaxpr_is_the_call_jaxpr():
    lowered = remat.jit(lambda x: jnp.sin(x) + jnp.sin(x)).lower(X)
    assert [str(v.aval) for v in lowered.jaxpr.invars] == ["f32[4,4]"]
    assert [e.primitive.name for e in lowered.compiler_ir().eqns] == ["sin", "add"]  # CSE


def _programs():
    x, w, b = np.ones((300, 300), f32), np.full((300, 300), 0.01, f32), np.ones(300, f32)

    def scan_f(x):
        return lax.scan(lambda c, _: (jnp.sin(c) * 2, jnp.sum(c)), x, None, length=4)

    def updated_while_viewed(x, i):
        y = x * 2.0
        view = lax.dynamic_slice(y, (i, 0), (2, 4))
        return lax.dynamic_update_slice(y, x[:1], (i, 0)), view + 1.0

    def remat_loss(w, x):
        return jnp.sum(remat.checkpoint(lambda w, x: jnp.sin(jnp.tanh(x @ w) @ w))(w, x))

    return {
        "chain": (lambda x: jnp.exp(jnp.sin(x) * 2 + 1), (x,)),
        "transposes": (lambda x, w: (x.T @ w).T + 1, (x, w)),
        "mlp_grad": (remat.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w) @ w.T)), (w, x)),
        "reshape": (lambda x: jnp.sum(x.reshape(-1) * 2), (x,)),
        "identity_outputs": (lambda x: (x, x.T), (x,)),
        "broadcast": (lambda x, b: jnp.tanh(x + b[None, :]), (x, b)),
        "scan": (scan_f, (x,)),
        "checkpoint_grad": (remat.grad(remat_loss), (w, x)),
        "fused": (lambda x: jnp.exp(jnp.sin(x) * 2 + 1) - x, (np.ones((512, 512), f32),)),
        # a gather's fresh output takes the following elementwise step in place
        "gather": (lambda x, i: x[i] + 1.0, (x, np.arange(200, dtype=np.int32) % 7)),
        "gather_grad": (remat.grad(lambda x, i: jnp.sum(jnp.tanh(x[i]) * 2.0)),
                        (x, np.arange(200, dtype=np.int32) % 7)),
        # an update written into its dying operand; one copying it while a view is read
        "update": (lambda x, i: lax.dynamic_update_slice(x * 2.0, x[:1] + 1.0, (i, 0)),
                   (x, np.int32(3))),
        "update_viewed": (updated_while_viewed, (x, np.int32(3))),
    }


@pytest.mark.parametrize("name", list(_programs()))
def test_memory_analysis_is_the_measured_peak(name):
    fun, args = _programs()[name]
    args = [jnp.asarray(a) for a in args]
    compiled = remat.jit(fun).lower(*args).compile()
    stats = compiled.memory_analysis()
    assert stats.argument_size_in_bytes == sum(a.nbytes for a in args)
    outs = remat.tree_util.tree_leaves(compiled(*args))
    assert stats.output_size_in_bytes == sum(o.nbytes for o in outs)
    measured = memory.peak_memory(compiled, *args)
    assert stats.peak_memory_in_bytes - stats.argument_size_in_bytes == measured
    assert stats.temp_size_in_bytes <= measured
    assert "temp_size_in_bytes=" in repr(stats)


def test_memory_analysis_aliases_and_policies():
    x = jnp.ones((100, 100))
    stats = remat.jit(lambda x: (x, x.T)).lower(x).compile().memory_analysis()
    assert stats.alias_size_in_bytes == 2 * x.nbytes and stats.temp_size_in_bytes == 0

    def loss(policy):
        def layer(w, h):
            return jnp.tanh(h @ w)

        def f(w, h):
            for _ in range(4):
                h = remat.checkpoint(layer, policy=policy)(w, h)
            return jnp.sum(h)

        return remat.jit(remat.grad(f))

    w, h = jnp.full((64, 64), 0.01), jnp.ones((32, 64))
    save = loss(remat.checkpoint_policies.everything_saveable).lower(w, h).compile()
    recompute = loss(remat.checkpoint_policies.nothing_saveable).lower(w, h).compile()
    for compiled in (save, recompute):
        stats = compiled.memory_analysis()
        assert stats.peak_memory_in_bytes - stats.argument_size_in_bytes == \
            memory.peak_memory(compiled, w, h)


def test_cost_analysis_matches_jax_flops_and_transcendentals():
    cost = remat.jit(f).lower(X, Y).compile().cost_analysis()
    jcost = jax.jit(lambda x, y: jax.numpy.sin(x) @ y).lower(X, Y).compile().cost_analysis()
    assert cost["flops"] == jcost["flops"] == 64.0
    assert cost["transcendentals"] == jcost["transcendentals"] == 16.0
    assert {"flops", "transcendentals", "bytes accessed", "bytes accessed0{}",
            "bytes accessed1{}", "bytes accessedout{}"} <= set(cost) & set(jcost)
    assert cost["bytes accessed0{}"] == X.nbytes and cost["bytes accessedout{}"] == 32.0
    conv = remat.jit(lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "SAME"))
    xs, ks = np.ones((1, 2, 5, 5), f32), np.ones((3, 2, 3, 3), f32)
    assert conv.lower(xs, ks).cost_analysis()["flops"] == 2 * (3 * 5 * 5) * (2 * 3 * 3)
    scanned = remat.jit(lambda x: lax.scan(lambda c, _: (jnp.sin(c), None), x, None,
                                           length=5)[0])
    assert scanned.lower(X).cost_analysis()["transcendentals"] == 5 * 16


def test_donation_through_compiled():
    compiled = remat.jit(lambda x: x * 2, donate_argnums=0).lower(jnp.ones(3)).compile()
    assert compiled.args_info[0][0].donated
    x = jnp.ones(3)
    assert compiled(x).tolist() == [2.0, 2.0, 2.0]
    assert x.is_deleted()
