"""checkpoint / remat: the seed documents' behaviours, the gradient-checkpointing guide's
residual lists, recompute counts, static_argnums, caching, prevent_cse, logging, effects."""

import functools
import logging
import os

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import core, lax
from remat.ad_checkpoint import checkpoint_name, print_saved_residuals, saved_residuals
from remat.errors import ConcretizationTypeError
from remat.interpreters import ad, batching

f32 = np.float32
HERE = os.path.basename(__file__)


def line_of(fragment):
    """The line number in this file of the unique line containing ``fragment``."""
    with open(__file__) as fh:
        hits = [i + 1 for i, line in enumerate(fh)
                if fragment in line and "line_of" not in line and "where(" not in line]
    assert len(hits) == 1, (fragment, hits)
    return hits[0]


def where(fragment, function):
    return f"{HERE}:{line_of(fragment)} ({function})"


def descriptions(f, *args, **kwargs):
    return [f"{aval.str_short()} {src}" for aval, src in saved_residuals(f, *args, **kwargs)]


# --- the guide's network ---------------------------------------------------------------------


def g(W, x):
    y = jnp.dot(W, x)  # the dot of g
    return jnp.sin(y)  # the sin of g


def f(W1, W2, W3, x):
    x = g(W1, x)
    x = g(W2, x)
    x = g(W3, x)
    return x


def f2(W1, W2, W3, x):
    x = remat.checkpoint(g)(W1, x)
    x = remat.checkpoint(g)(W2, x)
    x = remat.checkpoint(g)(W3, x)
    return x


def f4_body(W1, W2, W3, x):
    x = checkpoint_name(g(W1, x), name="a")  # name a
    x = checkpoint_name(g(W2, x), name="b")  # name b
    x = checkpoint_name(g(W3, x), name="c")  # name c
    return x


W1, W2, W3, X = jnp.ones((5, 4)), jnp.ones((6, 5)), jnp.ones((7, 6)), jnp.ones(4)
ARGS = [
    "f32[5,4] from the argument W1",
    "f32[6,5] from the argument W2",
    "f32[7,6] from the argument W3",
    "f32[4] from the argument x",
]


def test_guide_f_saves_everything():
    sin, cos = where("the sin of g", "g"), where("the sin of g", "g")
    assert descriptions(f, W1, W2, W3, X) == ARGS + [
        f"f32[5] output of sin from {sin}", f"f32[5] output of cos from {cos}",
        f"f32[6] output of sin from {sin}", f"f32[6] output of cos from {cos}",
        f"f32[7] output of cos from {cos}"]


def test_guide_f2_saves_only_checkpoint_inputs():
    sin = where("the sin of g", "g")
    assert descriptions(f2, W1, W2, W3, X) == ARGS + [
        f"f32[5] output of sin from {sin}", f"f32[6] output of sin from {sin}"]


def test_guide_f3_dots_with_no_batch_dims():
    f3 = remat.checkpoint(f, policy=remat.checkpoint_policies.dots_with_no_batch_dims_saveable)
    dot = where("the dot of g", "g")
    assert descriptions(f3, W1, W2, W3, X) == ARGS + [
        f"f32[5] output of dot_general from {dot}", f"f32[6] output of dot_general from {dot}",
        f"f32[7] output of dot_general from {dot}"]


def test_guide_f4_save_only_these_names():
    f4 = remat.checkpoint(f4_body, policy=remat.checkpoint_policies.save_only_these_names("a"))
    assert descriptions(f4, W1, W2, W3, X) == ARGS + [
        f"f32[5] named 'a' from {where('# name a', 'f4_body')}"]


def test_save_anything_except_these_names_really_excludes_them():
    policy = remat.checkpoint_policies.save_anything_except_these_names("b")
    out = descriptions(remat.checkpoint(f4_body, policy=policy), W1, W2, W3, X)
    assert not any("named 'b'" in d for d in out)
    # 'b' (= sin of the second dot) is recomputed from the saved second dot instead
    assert f"f32[6] output of dot_general from {where('the dot of g', 'g')}" in out
    assert f"f32[5] named 'a' from {where('# name a', 'f4_body')}" in out


def test_nothing_saveable_saves_only_inputs_and_everything_saveable_everything():
    policies = remat.checkpoint_policies
    assert descriptions(remat.checkpoint(f), W1, W2, W3, X) == ARGS
    everything = remat.checkpoint(f, policy=policies.everything_saveable)
    assert len(descriptions(everything, W1, W2, W3, X)) == len(descriptions(f, W1, W2, W3, X))


def test_print_saved_residuals_lines_and_total(capsys):
    print_saved_residuals(f2, W1, W2, W3, X)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == ARGS
    total = 4 * (20 + 30 + 42 + 4 + 5 + 6)
    assert lines[-1] == f"total: {total} bytes saved in 6 residuals"


def test_residual_descriptions_for_jit_literals_arguments_and_kwargs():
    def fj(x):
        y = remat.jit(jnp.sin)(x)  # the jitted sin
        return jnp.cos(y)  # the cos after jit

    assert descriptions(fj, f32(3.0)) == [
        f"f32[] output of jitted function 'sin' from {where('# the jitted sin', 'fj')}",
        f"f32[] output of sin from {where('# the cos after jit', 'fj')}"]

    def fk(x, y):
        return x[0] * y * jnp.sin(x[1])  # the kw example

    loc = where("# the kw example", "fk")
    assert descriptions(fk, (f32(1.0), f32(2.0)), y=f32(3.0)) == [
        "f32[] from the argument x[0]", "f32[] from the argument y",
        f"f32[] output of mul from {loc}", f"f32[] output of sin from {loc}",
        f"f32[] output of cos from {loc}"]

    c = jnp.arange(3.0) + 1.0
    assert descriptions(lambda x: jnp.sum(x * c), jnp.ones(3)) == ["f32[3] from a constant"]


# --- the seed documents ------------------------------------------------------------------------


def test_api_doc_example_value_and_grad():
    @remat.checkpoint
    def gfun(x):
        y = jnp.sin(x)
        z = jnp.sin(y)
        return z

    value, grad = remat.value_and_grad(gfun)(2.0)
    assert np.isclose(value, 0.78907233) and np.isclose(grad, -0.2556391)
    assert value.weak_type and grad.weak_type
    # only the input is saved
    assert descriptions(gfun, 2.0) == ["f32[] from the argument x"]


def recursive_checkpoint(funs):
    if len(funs) == 1:
        return funs[0]
    elif len(funs) == 2:
        f1, f2 = funs
        return lambda x: f1(f2(x))  # pair
    else:
        f1 = recursive_checkpoint(funs[:len(funs) // 2])
        f2 = recursive_checkpoint(funs[len(funs) // 2:])
        return lambda x: f1(remat.checkpoint(f2)(x))  # halves


def test_recursive_checkpoint_chain_of_8_and_16_sins():
    # as in JAX: every saved value is computed by a pair's application of two functions
    pair = where("# pair", "<lambda>")
    assert descriptions(recursive_checkpoint([jnp.sin] * 8), 3.0) == [
        "f32[] from the argument x", f"f32[] output of sin from {pair}",
        f"f32[] output of cos from {pair}", f"f32[] output of cos from {pair}"]
    assert descriptions(recursive_checkpoint([jnp.sin] * 16), 3.0) == [
        "f32[] from the argument x", f"f32[] output of sin from {pair}",
        f"f32[] output of sin from {pair}", f"f32[] output of cos from {pair}",
        f"f32[] output of cos from {pair}"]


def test_recursive_checkpoint_saves_logarithmically_many_values():
    counts = [len(saved_residuals(recursive_checkpoint([jnp.sin] * n), 3.0))
              for n in (4, 8, 16, 32, 64)]
    plain = [len(saved_residuals(recursive_checkpoint([jnp.sin] * 2) if n == 2 else
                                 functools.reduce(lambda a, b: (lambda x: a(b(x))),
                                                  [jnp.sin] * n), 3.0)) for n in (8, 64)]
    assert plain == [8, 64]
    assert counts == sorted(counts) and counts[-1] <= 2 * np.log2(64)
    for n in (8, 16, 64):
        fun = recursive_checkpoint([jnp.sin] * n)
        expected = remat.grad(functools.reduce(lambda a, b: (lambda x: a(b(x))),
                                               [jnp.sin] * n))(f32(0.3))
        assert np.isclose(remat.grad(fun)(f32(0.3)), expected, rtol=1e-5)


def test_jep_dots_policy_example():
    def apply_layer(W, x):
        return jnp.sin(jnp.dot(W, x))

    @functools.partial(remat.checkpoint, policy=remat.checkpoint_policies.checkpoint_dots)
    def predict(params, x):
        for W in params[:-1]:
            x = apply_layer(W, x)
        return jnp.dot(params[-1], x)

    rng = np.random.default_rng(0)
    params = [rng.standard_normal((4, 4)).astype(f32) for _ in range(3)]
    x = rng.standard_normal(4).astype(f32)
    out = saved_residuals(predict, params, x)
    kinds = [src.split(" from")[0] for _, src in out]
    assert kinds.count("output of dot_general") == 2 and "output of sin" not in kinds
    assert "output of cos" not in kinds
    loss = lambda p, x: jnp.sum(predict(p, x))
    plain = lambda p, x: jnp.sum(predict.fun(p, x))
    for a, b in zip(remat.grad(loss)(params, x), remat.grad(plain)(params, x)):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_jep_constants_are_rematerialized_not_saved():
    @remat.checkpoint
    def fconst(x):
        a = jnp.sin(jnp.arange(100_000, dtype=jnp.float32))  # does not depend on x
        return jnp.sum(a * x)

    assert saved_residuals(fconst, jnp.ones(100_000)) == []
    g_ = remat.grad(fconst)(jnp.ones(100_000))
    np.testing.assert_allclose(g_, np.sin(np.arange(100_000, dtype=f32)), rtol=1e-6)


def test_concrete_true_raises_migration_message():
    with pytest.raises(NotImplementedError, match="use its `static_argnums` option"):
        remat.checkpoint(lambda x: x, concrete=True)


def test_static_argnums_is_training_example():
    @functools.partial(remat.checkpoint, static_argnums=(1,))
    def foo(x, is_training):
        if is_training:
            return jnp.sin(x)
        return jnp.cos(x)

    assert np.isclose(remat.grad(foo)(f32(0.5), True), np.cos(0.5))
    assert np.isclose(remat.grad(foo)(f32(0.5), False), -np.sin(0.5))


def test_static_argnums_with_ensure_compile_time_eval():
    @functools.partial(remat.checkpoint, static_argnums=(1,))
    def foo(x, y):
        with remat.ensure_compile_time_eval():
            y_pos = y > 0
        if y_pos:
            return jnp.sin(x)
        return jnp.cos(x)

    assert np.isclose(foo(f32(0.5), 2.0), np.sin(0.5))
    assert np.isclose(remat.jit(lambda x: foo(x, -1.0))(f32(0.5)), np.cos(0.5))


def test_static_argnums_validation():
    fun = lambda x, n: x * n
    with pytest.raises(TypeError, match=r"`static_argnums` argument to `checkpoint` / `remat` "
                                        r"must be an int, tuple of ints"):
        remat.checkpoint(fun, static_argnums=[1])(f32(1), 2)
    with pytest.raises(ValueError, match=r"greater than or equal to `-len\(args\)` and less "
                                         r"than `len\(args\)`"):
        remat.checkpoint(fun, static_argnums=(2,))(f32(1), 2)
    assert remat.checkpoint(fun, static_argnums=-1)(f32(2), 3) == 6.0


def test_static_arguments_cache_by_value_and_unhashables_by_identity():
    fun = remat.checkpoint(lambda x, cfg: x * len(cfg), static_argnums=1)
    fun(f32(1), (1, 2))
    fun(f32(2), (1, 2))
    assert fun.trace_count == 1
    fun(f32(1), (1, 2, 3))
    assert fun.trace_count == 2
    cfg = [1, 2]  # unhashable: keyed by identity
    fun(f32(1), cfg)
    fun(f32(1), cfg)
    assert fun.trace_count == 3
    fun(f32(1), [1, 2])
    assert fun.trace_count == 4


def test_repeated_calls_trace_once():
    fun = remat.checkpoint(lambda x: jnp.sin(jnp.sin(x)))
    for i in range(5):
        remat.grad(fun)(f32(i))
        fun(f32(i))
    assert fun.trace_count == 1


def test_concretization_error_suggests_static_argnums():
    @remat.checkpoint
    def foo(x, flag):
        return x if flag > 0 else -x

    with pytest.raises(ConcretizationTypeError, match="Consider using the `static_argnums`"):
        foo(f32(1), f32(2))


def test_jvp_is_unchanged_and_stays_a_checkpoint():
    fun = remat.checkpoint(lambda x: jnp.sin(jnp.sin(x)))
    _, t = remat.jvp(fun, (f32(0.5),), (f32(1.0),))
    assert np.isclose(t, np.cos(np.sin(0.5)) * np.cos(0.5))
    jaxpr = remat.make_jaxpr(lambda x: remat.jvp(fun, (x,), (f32(1.0),)))(f32(0.5))
    assert [e.primitive.name for e in jaxpr.eqns] == ["checkpoint"]


def test_higher_order_keeps_the_checkpoint():
    fun = remat.checkpoint(lambda x: jnp.sin(jnp.sin(x)))
    jaxpr = remat.make_jaxpr(remat.grad(remat.grad(fun)))(f32(0.5))
    assert "checkpoint" in str(jaxpr)
    from remat.test_util import check_grads

    check_grads(fun, (f32(0.5),), order=2)


# --- recompute counts ------------------------------------------------------------------------


@pytest.fixture
def sin_calls():
    calls = []
    impl = lax.sin_p.impl
    lax.sin_p.def_impl(lambda x: (calls.append(1), impl(x))[1])
    yield calls
    lax.sin_p.def_impl(impl)


def test_linearize_of_one_checkpoint_evaluates_the_primal_once(sin_calls):
    fun = remat.checkpoint(lambda x: jnp.sin(jnp.sin(x)))
    _, f_jvp = remat.linearize(fun, f32(0.5))
    assert len(sin_calls) == 2  # the forward pass only
    f_jvp(f32(1.0))
    assert len(sin_calls) == 3  # the tangent needs cos(sin x): one recomputed sin


def test_jit_of_checkpoint_has_no_redundant_primal_evaluation(sin_calls):
    fun = remat.jit(remat.value_and_grad(remat.checkpoint(lambda x: jnp.sin(jnp.sin(x)))))
    fun(f32(0.5))
    sin_calls.clear()
    fun(f32(0.5))
    assert len(sin_calls) == 3  # forward 2, backward recomputes only sin(x)


def test_prevent_cse_false_lets_cse_merge_the_recomputation(sin_calls):
    fun = remat.jit(remat.value_and_grad(
        remat.checkpoint(lambda x: jnp.sin(jnp.sin(x)), prevent_cse=False)))
    fun(f32(0.5))
    sin_calls.clear()
    fun(f32(0.5))
    assert len(sin_calls) == 2


def _counting_primitive():
    """A user primitive (extension API) whose evaluations are counted."""
    calls = []
    p = core.Primitive("counted_sin")
    p.def_impl(lambda x: (calls.append(1), np.sin(x))[1])
    p.def_abstract_eval(lambda a: a)
    ad.defjvp(p, lambda g_, x: lax.mul(g_, lax.cos(x)))
    batching.defvectorized(p)
    return p, calls


def _backward_recomputes(n):
    """Evaluations the backward pass of ``recursive_checkpoint`` of ``n`` functions needs: the
    first half recurses; the checkpointed second half reruns its forward pass up to the input
    of its last function (n/2 - 1 evaluations) and then recurses: B(n) = 2 B(n/2) + n/2 - 1."""
    return 0 if n <= 2 else 2 * _backward_recomputes(n // 2) + n // 2 - 1


@pytest.mark.parametrize("n", [4, 8, 16])
def test_recursive_checkpoint_recompute_counts(n):
    p, calls = _counting_primitive()
    fun = recursive_checkpoint([p.bind] * n)
    out, pullback = remat.vjp(fun, f32(0.3))
    assert len(calls) == n  # the forward pass evaluates each function once
    pullback(f32(1.0))
    assert len(calls) == n + _backward_recomputes(n)  # 5, 13, 33
    plain = functools.reduce(lambda a, b: (lambda x: a(b(x))), [p.bind] * n)
    calls.clear()
    remat.grad(plain)(f32(0.3))
    assert len(calls) == n


# --- logging, effects ------------------------------------------------------------------------


def test_log_checkpoint_residuals(caplog):
    fun = remat.checkpoint(g, policy=remat.checkpoint_policies.dots_saveable)
    with remat.config.override("jax_log_checkpoint_residuals", True), \
            caplog.at_level(logging.WARNING, logger="remat.checkpoint"):
        remat.grad(lambda W, x: jnp.sum(fun(W, x)))(W1, X)
    text = caplog.text
    assert "saving inputs with shapes:\n  f32[4]" in text  # x, for the gradient of W
    assert "saving these intermediates" in text and "dot_general" in text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="remat.checkpoint"):
        remat.grad(lambda W, x: jnp.sum(fun(W, x)))(W1, X)
    assert caplog.text == ""


def test_side_effects_inside_checkpoint_raise():
    def effectful(x):
        three = remat.io_callback(lambda: np.float32(3), remat.ShapeDtypeStruct((), np.float32))
        return jnp.sin(x) * three

    assert np.isclose(remat.checkpoint(effectful)(f32(1.0)), 3 * np.sin(1.0))
    with pytest.raises(NotImplementedError, match="Effects not supported in partial-eval"):
        remat.grad(remat.checkpoint(effectful))(f32(1.0))


def test_checkpoint_name_is_identity_on_pytrees():
    tree = {"a": jnp.ones(2), "b": (f32(1),)}
    out = checkpoint_name(tree, "z")
    assert remat.tree_util.tree_structure(out) == remat.tree_util.tree_structure(tree)
    jaxpr = remat.make_jaxpr(lambda x: checkpoint_name(x, "z"))(jnp.ones(2))
    assert str(jaxpr) == "{ lambda ; a:f32[2]. let b:f32[2] = name[name=z] a in (b,) }"
    with pytest.raises(TypeError, match="string name"):
        checkpoint_name(jnp.ones(2), 3)


def test_prevent_cse_tuple_prefix():
    fun = remat.checkpoint(lambda x, y: jnp.sin(x) * y, prevent_cse=(True, False))
    value, grads = remat.jit(remat.value_and_grad(fun, argnums=(0, 1)))(f32(0.5), f32(2.0))
    assert np.isclose(grads[0], 2 * np.cos(0.5)) and np.isclose(grads[1], np.sin(0.5))
    with pytest.raises(ValueError, match="prevent_cse"):
        remat.checkpoint(lambda x: x, prevent_cse=(True, True))(f32(1))


def test_a_forwarded_python_scalar_comes_back_an_array_under_linearize():
    """A checkpoint that returns its Python-float argument unchanged gives an Array under
    ``linearize`` (its known outputs are its known inputs, as given), as JAX does; the
    campaign found it as a float reaching a loss (seed 5000946)."""

    def f(x):
        c, s = remat.checkpoint(lambda a: (a, jnp.sum(x * x)))(-1.5)
        return c, x * 2.0 + s

    x = jnp.ones(3)
    for outs in (remat.linearize(f, x)[0], remat.jvp(f, (x,), (x,))[0], f(x)):
        assert all(isinstance(o, remat.Array) for o in outs), [type(o) for o in outs]
        assert float(outs[0]) == -1.5 and outs[0].dtype == jnp.zeros(()).dtype
    grad = remat.grad(lambda x: jnp.sum(remat.linearize(f, x)[0][0] * x))(x)
    np.testing.assert_array_equal(grad, np.full(3, -1.5))
