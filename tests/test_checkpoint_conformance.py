"""checkpoint conformance with JAX's own checkpoint tests (issue 14): policies reaching into
cond branches and scan bodies, policies and custom_jvp inside cond, and custom_jvp functions
applied to tangents under a checkpoint. Counts are pinned here and compared with JAX where it
is installed."""

import logging
import unittest
from functools import partial

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.ad_checkpoint import checkpoint_name, saved_residuals
from remat.errors import UnexpectedTracerError
from remat.test_util import check_grads

cp = remat.checkpoint_policies


def _counts(text):
    return tuple(text.count(f" {p}") for p in ("sin ", "cos ", "dot_"))


def _linearized_counts(lib, f, *args):
    """(sin, cos, dot_general) counts of the jaxpr of ``f``'s linearized function."""
    _, f_lin = lib.linearize(f, *args)
    return _counts(str(lib.make_jaxpr(f_lin)(*args)))


# --- 1. policies through control flow --------------------------------------------------------


def _three_dots(lib, W, x):
    lx = lib.lax
    for _ in range(3):
        x = lib.numpy.sin(lib.numpy.dot(x, W, precision=lx.Precision.HIGHEST))
    return x


def _dots_net(lib, kind, checkpoint_outside):
    """JAX's test_remat_checkpoint_dots_{inside,outside}_{cond,scan}: three sin(dot) layers
    in a cond branch or a scan body, with a checkpoint (dots saveable) around the layers or
    around the whole control flow."""
    x = lib.numpy.ones((5,))
    dots = lib.checkpoint_policies.checkpoint_dots
    layers = _three_dots if checkpoint_outside else (
        lambda lib_, W, x: lib.checkpoint(partial(_three_dots, lib_, W), policy=dots)(x))

    def f(W):
        if kind == "cond":
            return lib.lax.cond(x.sum() > 0, lambda x: layers(lib, W, x), lambda x: x, x)
        return lib.lax.scan(lambda c, _: (layers(lib, W, c), None), x, None, length=2)[0]

    return lib.checkpoint(f, policy=dots) if checkpoint_outside else f


# (sin, cos, dot_general) in the linearized jaxpr, as JAX 0.10 has them: the policy saves the
# primal dots, so only the tangent dots remain (two per layer, one for the first layer of a
# cond since x is a constant); a staged scan recomputes the carry's sin.
DOTS_COUNTS = {("cond", False): (2, 3, 5), ("cond", True): (2, 3, 5),
               ("scan", False): (2, 3, 6), ("scan", True): (3, 3, 6)}


@pytest.mark.parametrize("kind", ["cond", "scan"])
@pytest.mark.parametrize("outside", [False, True], ids=["inside", "outside"])
def test_dots_policy_reaches_into_control_flow(kind, outside):
    f = _dots_net(remat, kind, outside)
    W = jnp.asarray(np.linspace(-1, 1, 25, dtype=np.float32).reshape(5, 5))
    assert _linearized_counts(remat, f, W) == DOTS_COUNTS[kind, outside]
    check_grads(f, (W,), order=2, modes=["fwd", "rev"])
    loss = lambda W: jnp.sum(f(W) ** 2)
    g = remat.grad(loss)(W)
    np.testing.assert_allclose(remat.jit(remat.grad(loss))(W), g, rtol=1e-6, atol=1e-6)
    Ws = jnp.stack([W, 0.5 * W])
    np.testing.assert_allclose(remat.vmap(remat.grad(loss))(Ws)[0], g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["cond", "scan"])
@pytest.mark.parametrize("outside", [False, True], ids=["inside", "outside"])
def test_dots_policy_in_control_flow_counts_match_jax(kind, outside):
    jax = pytest.importorskip("jax")
    W = np.linspace(-1, 1, 25, dtype=np.float32).reshape(5, 5)
    assert _linearized_counts(jax, _dots_net(jax, kind, outside), W) == DOTS_COUNTS[kind, outside]
    ours = remat.grad(lambda W: jnp.sum(_dots_net(remat, kind, outside)(W)))(W)
    theirs = jax.grad(lambda W: jax.numpy.sum(_dots_net(jax, kind, outside)(W)))(W)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_policy_inside_switch_shares_residual_slots():
    """Three branches saving different dots: the known cond returns one slot per residual type
    (only one branch runs), and each branch's backward reads what it saved."""
    W = jnp.asarray(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4))

    def f(i, W, x):
        branches = [lambda W, x: jnp.sin(W @ x), lambda W, x: jnp.cos(W @ (W @ x)),
                    lambda W, x: jnp.tanh(x) * 2.0]
        return jnp.sum(lax.switch(i, branches, W, x))

    x = jnp.ones(4)
    g = remat.checkpoint(f, policy=cp.dots_saveable)
    res = saved_residuals(g, 1, W, x)
    shapes = sorted(a.shape for a, d in res if not d.startswith("from the argument"))
    # two f32[4] slots: branch 1 saves two dots, branch 0 reuses one of them for its one
    assert shapes == [(4,), (4,)]
    for i in range(3):
        want = remat.grad(f, argnums=(1, 2))(i, W, x)
        got = remat.grad(g, argnums=(1, 2))(i, W, x)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        check_grads(partial(g, i), (W, x), order=2, modes=["rev"])


def test_policy_through_nested_checkpoint_in_scan_in_cond():
    """A named value inside a nested checkpoint inside a scan inside a cond: only it is saved
    (stacked over the steps), under jit too."""
    names = cp.save_only_these_names("h")

    def layer(c, W):
        h = checkpoint_name(jnp.dot(W, c), "h")
        return jnp.sin(h), None

    def f(Ws, x):
        def run(x):
            return lax.scan(remat.checkpoint(layer, policy=names), x, Ws)[0]
        return jnp.sum(lax.cond(jnp.sum(x) > 0, run, jnp.cos, x))

    Ws = jnp.asarray(np.linspace(-1, 1, 3 * 16, dtype=np.float32).reshape(3, 4, 4))
    x = jnp.ones(4)
    g = remat.checkpoint(f, policy=names)
    inner = [(a.shape, d) for a, d in saved_residuals(g, Ws, x)
             if not d.startswith("from the argument")]
    assert [s for s, _ in inner] == [(3, 4)]
    assert inner[0][1].startswith("named 'h' from ")
    want = remat.grad(f, argnums=(0, 1))(Ws, x)
    for got in (remat.grad(g, argnums=(0, 1))(Ws, x),
                remat.jit(remat.grad(g, argnums=(0, 1)))(Ws, x)):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# --- 2. policies and custom_jvp inside cond --------------------------------------------------


def _custom_sin(lib):
    @lib.custom_jvp
    def sin(x):
        return lib.numpy.sin(x)

    @sin.defjvp
    def sin_jvp(primals, tangents):
        (x,), (g,) = primals, tangents
        return sin(x), lib.numpy.cos(x) * g

    return sin


def _custom_jvp_funs(lib):
    sin = _custom_sin(lib)
    cond = lambda x, br: lib.lax.cond(x > 0, br, lambda x: x, x)
    return {"plain": lambda x: sin(sin(x)),
            "cond": lambda x: cond(x, sin),
            "jit_cond": lib.jit(lambda x: cond(x, sin)),
            "cond_jit": lambda x: cond(x, lib.jit(sin))}


def _policies(lib):
    return {"save_cos": lambda prim, *_, **__: str(prim) == "cos",
            "save_sin": lambda prim, *_, **__: str(prim) == "sin",
            "nothing": lib.checkpoint_policies.nothing_saveable,
            "everything": lib.checkpoint_policies.everything_saveable}


# (sin, cos) in the linearized jaxpr, as JAX 0.10 has them
CUSTOM_JVP_COUNTS = {
    ("plain", "save_cos"): (0, 0), ("plain", "save_sin"): (1, 2), ("plain", "nothing"): (1, 2),
    ("plain", "everything"): (0, 0)}
for _fun in ("cond", "jit_cond", "cond_jit"):
    CUSTOM_JVP_COUNTS.update({(_fun, "save_cos"): (0, 0), (_fun, "save_sin"): (0, 1),
                              (_fun, "nothing"): (0, 1), (_fun, "everything"): (0, 0)})


@pytest.mark.parametrize("policy", ["save_cos", "save_sin", "nothing", "everything"])
@pytest.mark.parametrize("fun", ["plain", "cond", "jit_cond", "cond_jit"])
def test_policy_and_custom_jvp_inside_cond(fun, policy):
    f = remat.checkpoint(_custom_jvp_funs(remat)[fun], policy=_policies(remat)[policy])
    _, f_lin = remat.linearize(f, 1.0)
    assert _counts(str(remat.make_jaxpr(f_lin)(1.0)))[:2] == CUSTOM_JVP_COUNTS[fun, policy]
    check_grads(f, (3.0,), order=2, modes=["fwd", "rev"])
    check_grads(f, (-3.0,), order=2, modes=["rev"])
    xs = jnp.asarray([3.0, -2.0, 0.5])
    np.testing.assert_allclose(remat.vmap(remat.grad(f))(xs),
                               [remat.grad(f)(x) for x in (3.0, -2.0, 0.5)], rtol=1e-6)
    np.testing.assert_allclose(remat.jit(remat.grad(f))(3.0), remat.grad(f)(3.0), rtol=1e-6)


@pytest.mark.parametrize("policy", ["save_cos", "save_sin", "nothing", "everything"])
@pytest.mark.parametrize("fun", ["plain", "cond", "jit_cond", "cond_jit"])
def test_policy_and_custom_jvp_inside_cond_match_jax(fun, policy):
    jax = pytest.importorskip("jax")
    f = jax.checkpoint(_custom_jvp_funs(jax)[fun], policy=_policies(jax)[policy])
    _, f_lin = jax.linearize(f, 1.0)
    assert _counts(str(jax.make_jaxpr(f_lin)(1.0)))[:2] == CUSTOM_JVP_COUNTS[fun, policy]


# --- 3. custom_jvp applied to tangents under a checkpoint ------------------------------------


def _linear_custom(lib):
    @lib.custom_jvp
    def prim(x):
        return 3.0 * x

    @prim.defjvp
    def prim_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return prim(x), prim(t)  # the rule calls the function on the tangent

    return prim


@pytest.mark.parametrize("policy", [cp.nothing_saveable, cp.everything_saveable, None])
def test_custom_jvp_on_tangents_under_checkpoint_transposes(policy):
    prim = _linear_custom(remat)
    f = remat.checkpoint(lambda x: jnp.sin(prim(x)), policy=policy)
    x = jnp.float32(0.7)
    assert np.isclose(remat.grad(f)(x), 3.0 * np.cos(2.1))
    assert np.isclose(remat.grad(remat.grad(f))(x), -9.0 * np.sin(2.1), rtol=1e-6)
    check_grads(f, (x,), order=2, modes=["fwd", "rev"])
    np.testing.assert_allclose(remat.jit(remat.grad(f))(x), remat.grad(f)(x), rtol=1e-6)
    xs = jnp.asarray([0.1, 0.7])
    np.testing.assert_allclose(remat.vmap(remat.grad(f))(xs), 3.0 * np.cos(3.0 * xs),
                               rtol=1e-6)
    g = remat.checkpoint(lambda x: lax.cond(x > 0, prim, jnp.sin, x), policy=policy)
    check_grads(g, (x,), order=2, modes=["fwd", "rev"])


def test_custom_jvp_on_tangents_matches_jax():
    jax = pytest.importorskip("jax")
    ours = _linear_custom(remat)
    theirs = _linear_custom(jax)
    f = lambda lib, p: lib.checkpoint(lambda x: lib.numpy.sin(p(x)),
                                      policy=lib.checkpoint_policies.nothing_saveable)
    for order in (1, 2):
        g_ours, g_theirs = f(remat, ours), f(jax, theirs)
        for _ in range(order):
            g_ours, g_theirs = remat.grad(g_ours), jax.grad(g_theirs)
        np.testing.assert_allclose(g_ours(0.7), g_theirs(0.7), rtol=1e-6)


# --- 9. residual logging reaches the root logger ---------------------------------------------


class _RootLogs(unittest.TestCase):
    def runTest(self):  # unittest needs one to construct the case
        pass


def _sin_then_cos(x):
    return jnp.cos(jnp.sin(x).sum())


def test_residual_logging_reaches_root_logger_at_jax_levels():
    """JAX logs what a checkpoint saves at DEBUG always, at WARNING with the flag on, through
    its module logger up to the root (JAX's tests use ``assertLogs`` on the root)."""
    case = _RootLogs()
    x = jnp.arange(3.0)
    with case.assertLogs(level=logging.DEBUG) as logs:
        remat.grad(remat.remat(_sin_then_cos))(x)
    records = [r for r in logs.records if "remat-decorated function" in r.getMessage()]
    assert [r.levelno for r in records] == [logging.DEBUG]
    assert "saving inputs with shapes:\n  f32[3]" in records[0].getMessage()
    with remat.config.override("jax_log_checkpoint_residuals", True), \
            case.assertLogs(level=logging.WARNING) as logs:
        remat.grad(remat.remat(_sin_then_cos, policy=cp.everything_saveable))(x)
    assert len(logs.records) == 1 and logs.records[0].levelno == logging.WARNING
    message = logs.records[0].getMessage()
    assert "saving these intermediates:" in message
    assert "f32[3] from cos from " in message and "f32[] from sin from " in message
    with case.assertNoLogs(level=logging.INFO):
        remat.grad(remat.remat(_sin_then_cos))(x)  # DEBUG only while the flag is off


# --- 6. escaped tracers ----------------------------------------------------------------------


def test_tracer_escaping_a_checkpoint_through_global_state_names_function_and_line():
    """JAX's test_escaped_tracer_remat: a checkpointed function updating a Python list leaks
    its tracer to the next call; the error says so, and names the function and the line."""
    def f():
        seq = [jnp.zeros([])]

        def g():
            seq[0] += 1  # the leak
            return seq[0]

        remat.remat(g)()
        remat.remat(g)()

    for run in (f, remat.jit(f)):
        with pytest.raises(UnexpectedTracerError) as info:
            run()
        message = str(info.value)
        assert "global state" in message
        assert "intermediate value with type f32[]" in message
        assert (f"The function being traced when the value leaked was g at {__file__}:"
                f"{_line_of('def g():')} traced for checkpoint / remat.") in message
        assert (f"The leaked intermediate value was created on line {__file__}:"
                f"{_line_of('# the leak')} (g).") in message


def _line_of(fragment):
    with open(__file__) as fh:
        hits = [i + 1 for i, line in enumerate(fh) if fragment in line and "_line_of" not in line]
    assert len(hits) == 1, hits
    return hits[0]


# --- 8. check_grads keeps the inputs' dtypes -------------------------------------------------


def _scan_from_closed_over_carry(W):
    x = jnp.ones((3,), jnp.float32)  # a float32 carry the function closes over
    return lax.scan(lambda c, _: (jnp.sin(W @ c), None), x, None, length=2)[0]


def test_check_grads_of_function_closing_over_float32_carry():
    """Upcasting W to float64 would make the carry float64 too, against the float32 initial
    carry (a TypeError, as in JAX): the finite differences run at W's own float32 instead."""
    W = jnp.asarray(np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3))
    with pytest.raises(TypeError), remat.config.override("jax_enable_x64", True):
        _scan_from_closed_over_carry(np.asarray(W, np.float64))
    check_grads(_scan_from_closed_over_carry, (W,), order=2, modes=["fwd", "rev"])
    check_grads(remat.checkpoint(_scan_from_closed_over_carry, policy=cp.dots_saveable), (W,),
                order=2, modes=["fwd", "rev"])


def test_check_grads_at_inputs_dtypes_still_catches_a_wrong_derivative():
    @remat.custom_jvp
    def wrong(W):
        return _scan_from_closed_over_carry(W)

    @wrong.defjvp
    def wrong_jvp(primals, tangents):
        (W,), (t,) = primals, tangents
        return wrong(W), 1.1 * remat.jvp(_scan_from_closed_over_carry, (W,), (t,))[1]

    W = jnp.asarray(np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3))
    with pytest.raises(AssertionError):
        check_grads(wrong, (W,), order=1, modes=["fwd"])
    check_grads(_scan_from_closed_over_carry, (W,), order=1, modes=["fwd"])


# --- 9. no redundant flops under jit (JAX's test_remat_no_redundant_flops) -----------------


def _never_saveable(*_, **__):
    return False


REMAT_VARIANTS = {
    "remat": remat.remat,
    "checkpoint": remat.checkpoint,
    "policy": partial(remat.remat, policy=_never_saveable),
    "new_policy": partial(remat.checkpoint, policy=cp.nothing_saveable),
    "dots": partial(remat.checkpoint, policy=cp.dots_saveable),
    "no_prevent_cse": partial(remat.checkpoint, prevent_cse=False),
}


@pytest.fixture
def sin_shapes():
    """The shape of each operand ``sin``'s impl is called on."""
    shapes = []
    impl = lax.sin_p.impl
    lax.sin_p.def_impl(lambda x: shapes.append(np.shape(x)) or impl(x))
    yield shapes
    lax.sin_p.def_impl(impl)


@pytest.mark.parametrize("remat_fn", REMAT_VARIANTS.values(), ids=REMAT_VARIANTS.keys())
@pytest.mark.parametrize("nesting", ["grad_of_jit", "jit_of_grad"])
def test_remat_no_redundant_flops(sin_shapes, remat_fn, nesting):
    """``sin(2.)`` depends on literals only: the plans fold it once, when they are built (the
    forward and the backward plans of ``grad(jit(g))`` share the folded value), and no call
    of the compiled function runs it again."""
    @remat_fn
    def f(x, y):
        return jnp.sin(x) * y

    g = lambda x: f(2., x)
    dg = remat.grad(remat.jit(g)) if nesting == "grad_of_jit" else remat.jit(remat.grad(g))
    np.testing.assert_allclose(dg(3.), np.sin(np.float32(2.)), rtol=1e-6)
    assert len(sin_shapes) <= 1
    sin_shapes.clear()
    dg(3.)
    assert sin_shapes == []


@pytest.mark.parametrize("remat_fn", REMAT_VARIANTS.values(), ids=REMAT_VARIANTS.keys())
def test_remat_still_recomputes_arrays_and_argument_values(sin_shapes, remat_fn):
    """Folding stops at scalars of literals (DESIGN §4.3): a constant array and a value of the
    arguments are recomputed by the backward plan at every call, never pinned in a plan."""
    from_constant = remat_fn(lambda x: jnp.sum(jnp.sin(jnp.arange(1000.)) * x))
    from_argument = remat_fn(lambda x: jnp.sum(jnp.sin(x) * x))
    assert saved_residuals(from_constant, jnp.ones(1000)) == []
    for fun, x in ((from_constant, jnp.ones(1000)), (from_argument, jnp.ones(3))):
        dfun = remat.grad(remat.jit(fun))
        for _ in range(2):
            sin_shapes.clear()
            dfun(x)
            assert sin_shapes == [np.shape(x)] * 2  # the forward plan's and the backward's
