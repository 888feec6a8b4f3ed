"""Property-based tests of checkpoint / remat: random programs of differentiable primitives
with named values, random saving policies (name-based ones over the program's names, unions,
offloading), and random nesting of checkpoint / jit / vmap around random sub-blocks.

Properties:
- rematerialization never changes a value or a gradient: the recomputation replays the same
  primitives on the same inputs, so the comparison with the un-checkpointed program is tight
  (float32 ``rtol=1e-5, atol=1e-6``);
- ``nothing_saveable`` saves only (some of) the checkpoint's inputs; ``everything_saveable``
  saves exactly what the program without checkpoint saves; any policy saves only values it
  allows (and offloads exactly the values it answers ``Offloadable`` for).

"Never saves more bytes than everything_saveable" is not a property of rematerialization (a
policy that refuses a small value may have to keep a bigger one it is recomputed from, in JAX
too): ``test_dots_saveable_can_save_more_bytes_than_everything_saveable`` in
test_checkpoint_interplay.py shows one case. The properties above are what holds.
"""

import fuzzing
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import remat
import remat.numpy as jnp
from remat import lax
from remat.ad_checkpoint import checkpoint_name, name_p, saved_residuals
from remat.interpreters.partial_eval import Offloadable
from remat.tree_util import tree_leaves

cp = remat.checkpoint_policies
N = 4
NAMES = ("a", "b", "c")
TOL = dict(rtol=1e-5, atol=1e-6)
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])

# --- random policies -------------------------------------------------------------------------

names = st.lists(st.sampled_from(NAMES), max_size=3, unique=True).map(tuple)
simple_policy = st.one_of(
    st.sampled_from([("default",), ("everything",), ("nothing",), ("dots",), ("dots_no_batch",),
                     ("offload_dot",)]),
    st.tuples(st.sampled_from(["except", "any_but", "only"]), names),
    st.lists(st.sampled_from(NAMES), max_size=3, unique=True).flatmap(
        lambda ns: st.integers(0, len(ns)).map(
            lambda k: ("offload_names", tuple(ns[:k]), tuple(ns[k:])))),
)
policies = st.one_of(simple_policy, st.tuples(st.just("both"), simple_policy, simple_policy))


def make_policy(spec):
    """The policy of a spec (the differential fuzzer's spec format)."""
    return fuzzing.make_policy(fuzzing.Namespace.remat(), spec)


# --- random programs -------------------------------------------------------------------------
# A program is a list of ops, each producing a new f32[N] value from the last one (and maybe an
# earlier one); a block runs a sub-program as a function of (value, M) under wrappers.

leaf_op = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(["sin", "cos", "tanh", "exp"])),
    st.tuples(st.sampled_from(["mul", "add", "sum"]), st.integers(0, 7)),
    st.just(("dot",)),
    st.tuples(st.just("name"), st.sampled_from(NAMES)),
)
wrapper = st.one_of(
    st.tuples(st.just("checkpoint"), policies, st.booleans()),
    st.just(("jit",)),
    st.tuples(st.just("vmap"), st.sampled_from([0, 1, -1])),
    st.sampled_from([("scan",), ("fori_loop",), ("cond",)]),
)
programs = st.recursive(
    st.lists(leaf_op, min_size=1, max_size=4),
    lambda inner: st.lists(
        st.one_of(leaf_op, st.tuples(st.just("block"), st.lists(wrapper, min_size=1, max_size=2),
                                     inner)), min_size=1, max_size=4),
    max_leaves=16,
)

UNARY = {"sin": jnp.sin, "cos": jnp.cos, "tanh": jnp.tanh,
         "exp": lambda v: jnp.exp(0.5 * jnp.tanh(v))}  # exp of small values: no overflow


def run(ops, vals, M, strip):
    """Evaluate ``ops`` on the value list ``vals``; ``strip`` removes every checkpoint."""
    vals = list(vals)
    for op in ops:
        v, kind = vals[-1], op[0]
        if kind == "unary":
            out = UNARY[op[1]](v)
        elif kind == "mul":  # multiplying by tanh keeps magnitudes bounded
            out = v * jnp.tanh(vals[op[1] % len(vals)])
        elif kind == "add":
            out = 0.5 * (v + vals[op[1] % len(vals)])
        elif kind == "sum":  # a reduction broadcast back
            out = v * jnp.tanh(0.3 * jnp.sum(vals[op[1] % len(vals)]))
        elif kind == "dot":
            out = jnp.dot(M, v)
        elif kind == "name":
            out = checkpoint_name(v, op[1])
        else:
            out = run_block(op[1], op[2], v, vals[0], M, strip)
        vals.append(out)
    return vals[-1]


def wrap(w, fn, strip):
    if w[0] == "checkpoint":
        return fn if strip else remat.checkpoint(fn, policy=make_policy(w[1]),
                                                 prevent_cse=w[2])
    if w[0] == "jit":
        return remat.jit(fn)
    if w[0] == "scan":  # two steps with the value as the carry, and stacked outputs
        def scanned(v, M):
            c, ys = lax.scan(lambda c, _: (fn(c, M), jnp.cos(c)), v, None, length=2)
            return c + 0.1 * jnp.sum(ys, axis=0)
        return scanned
    if w[0] == "fori_loop":
        return lambda v, M: lax.fori_loop(0, 2, lambda i, c: fn(c, M), v)
    if w[0] == "cond":
        return lambda v, M: lax.cond(jnp.sum(v) > 0, fn, lambda v, M: jnp.sin(v) * 0.5, v, M)
    ax = w[1]

    def batched(v, M):  # two examples stacked on axis ``ax``; their mean is the result
        ys = remat.vmap(fn, in_axes=(ax, None))(jnp.stack([v, 0.5 * v + 0.1], axis=ax), M)
        return 0.5 * (ys[0] + ys[1])

    return batched


def run_block(wrappers, ops, v, x0, M, strip):
    # the sub-program also closes over the program's input x0 (a tracer when differentiated)
    fn = lambda v, M: run(ops, [x0, v], M, strip)
    for w in wrappers:
        fn = wrap(w, fn, strip)
    return fn(v, M)


def make_fun(program, strip):
    return lambda x, M: jnp.sum(run(program, [x], M, strip))


def _inputs(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(N).astype(np.float32)
    M = (rng.standard_normal((N, N)) / np.sqrt(N)).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(M)


def assert_close(a, b):
    for u, v in zip(tree_leaves(a), tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), **TOL)


# --- properties ------------------------------------------------------------------------------


@SETTINGS
@given(programs, policies, st.integers(0, 2**16))
def test_random_program_gradients_equal_unrematerialized(program, top_policy, seed):
    x, M = _inputs(seed)
    plain = make_fun(program, strip=True)
    remat_f = make_fun(program, strip=False)
    whole = remat.checkpoint(remat_f, policy=make_policy(top_policy))
    v0, g0 = remat.value_and_grad(plain, argnums=(0, 1))(x, M)
    for f in (remat_f, whole):
        v, g = remat.value_and_grad(f, argnums=(0, 1))(x, M)
        assert_close(v0, v)
        assert_close(g0, g)


@settings(SETTINGS, max_examples=25)
@given(programs, policies, st.integers(0, 2**16))
def test_random_program_under_jit_and_vmap_of_grad(program, top_policy, seed):
    x, M = _inputs(seed)
    plain = make_fun(program, strip=True)
    whole = remat.checkpoint(make_fun(program, strip=False), policy=make_policy(top_policy))
    g0 = remat.grad(plain, argnums=(0, 1))(x, M)
    assert_close(g0, remat.jit(remat.grad(whole, argnums=(0, 1)))(x, M))
    xs = jnp.stack([x, -0.5 * x])
    gs0 = remat.vmap(remat.grad(plain, argnums=(0, 1)), in_axes=(0, None))(xs, M)
    gs = remat.vmap(remat.grad(whole, argnums=(0, 1)), in_axes=(0, None))(xs, M)
    assert_close(gs0, gs)


def _allowed(policy, aval, description):
    """Whether the residual described was one ``policy`` may save (and how)."""
    offloaded = description.startswith("offloaded ")
    what = description.removeprefix("offloaded ")
    if what.startswith("named '"):
        decision = policy(name_p, aval, name=what.split("'")[1])
    elif what.startswith("output of "):
        prim = what.split()[2]
        if prim in ("checkpoint", "jitted"):  # a nested call's value, checked inside it
            return True
        params = {}
        if prim == "dot_general":
            params["dimension_numbers"] = (((1,), (0,)), ((), ()))  # the programs' only dot
        decision = policy(getattr(lax, f"{prim}_p"), aval, **params)
    else:
        return False
    return bool(decision) and isinstance(decision, Offloadable) == offloaded


def _has_control_flow(program):
    return any(op[0] == "block" and (any(w[0] in ("scan", "fori_loop", "cond") for w in op[1])
                                     or _has_control_flow(op[2])) for op in program)


def _total(residuals):
    return sum(a.nbytes for a, _ in residuals)


@SETTINGS
@given(programs, policies, st.integers(0, 2**16))
def test_random_program_saves_only_what_the_policy_allows(program, top_policy, seed):
    x, M = _inputs(seed)
    body = make_fun(program, strip=False)
    nothing = saved_residuals(remat.checkpoint(body, policy=cp.nothing_saveable), x, M)
    assert all(d in ("from the argument x", "from the argument M") for _, d in nothing)
    assert _total(nothing) <= x.nbytes + M.nbytes
    everything = saved_residuals(remat.checkpoint(make_fun(program, strip=True),
                                                  policy=cp.everything_saveable), x, M)
    unremat = saved_residuals(make_fun(program, strip=True), x, M)
    if _has_control_flow(program):
        # the policy reaches inside cond / scan / fori_loop, but a staged loop starts again from
        # its initial carry (as JAX's), which plain AD need not keep: beyond the arguments,
        # everything_saveable saves no more than plain AD
        inner = [r for r in everything if not r[1].startswith("from the argument")]
        assert _total(inner) <= _total(unremat)
    else:
        assert _total(everything) == _total(unremat)
    policy = make_policy(top_policy) or cp.nothing_saveable
    for aval, d in saved_residuals(remat.checkpoint(body, policy=policy), x, M):
        assert d.startswith("from the argument") or _allowed(policy, aval, d), (d, top_policy)
