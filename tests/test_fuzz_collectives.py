"""Generated programs with collectives: random chains of elementwise ops, dots and
collectives over one or two named axes, run under ``vmap(axis_name=)`` by remat and by JAX
(values, gradients, and JVPs compared), and against the same program with each collective
written out as explicit array work over the stacked members (no named axes at all); then with
the outer axis a ``pmap`` spanning two simulated processes, against the one-process program."""

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax import lax as jlax

import remat
import remat.numpy as rnp
from remat import lax

D = 4  # per-member vector length
SIZES = {"i": 2, "j": 4}


def _unary(rng):
    name = str(rng.choice(["sin", "tanh", "cos", "square", "softplus"]))

    def op(L, N, v, w, ctx):
        if name == "square":
            return v * v * 0.5
        if name == "softplus":
            return N.log1p(N.exp(-N.abs(v))) + N.maximum(v, 0.0)
        return getattr(N, name)(v)

    return name, op, lambda V, w, X, axes: op(None, np, V, w, None)


def _dot(rng):
    return ("dot", lambda L, N, v, w, ctx: N.dot(v, w) * 0.5,
            lambda V, w, X, axes: V @ w * 0.5)


def _mul_input(rng):
    return ("mul_x", lambda L, N, v, w, ctx: v * ctx["x"] + v,
            lambda V, w, X, axes: V * X + V)


def _collective(rng, axes, differentiable):
    kinds = ["psum", "pmean", "all_gather", "psum_scatter", "ppermute", "all_to_all",
             "axis_index"] + ([] if differentiable else ["pmax", "pmin"])
    kind = str(rng.choice(kinds))
    axis = str(rng.choice(axes))
    n = SIZES[axis]
    coef = rng.standard_normal(n).astype(np.float32)
    perm = [(int(s), int(d)) for s, d in enumerate(rng.permutation(n))]
    reduced = tuple(axes) if len(axes) > 1 and rng.random() < 0.5 else axis
    if kind not in ("psum", "pmean"):
        reduced = axis

    def op(L, N, v, w, ctx):
        if kind in ("psum", "pmean", "pmax", "pmin"):
            return getattr(L, kind)(v, reduced)
        if kind == "all_gather":
            return N.dot(coef, L.all_gather(v, axis))
        if kind == "psum_scatter":
            part = L.psum_scatter(v, axis, tiled=True)
            return L.all_gather(part, axis, tiled=True)
        if kind == "ppermute":
            return L.ppermute(v, axis, perm)
        if kind == "all_to_all":
            # (+ 0 * x: JAX 0.10's all_to_all of a value unmapped along the axis is wrong)
            v = v + 0.0 * ctx["x"]
            return L.all_to_all(v.reshape(n, D // n), axis, 0, 0).reshape(D)
        return v * (L.axis_index(axis) + 1.0)

    def explicit(V, w, X, axes):
        """The collective as array work on all members at once (members leading)."""
        a = axes.index(axis)
        over = tuple(axes.index(r) for r in (reduced if isinstance(reduced, tuple)
                                             else (reduced,)))
        if kind in ("psum", "psum_scatter"):
            return np.broadcast_to(V.sum(over, keepdims=True), V.shape)
        if kind in ("pmean", "pmax", "pmin"):
            reduce = {"pmean": np.mean, "pmax": np.max, "pmin": np.min}[kind]
            return np.broadcast_to(reduce(V, over, keepdims=True), V.shape)
        if kind == "all_gather":
            mixed = np.tensordot(coef.astype(V.dtype), V, axes=([0], [a]))
            return np.broadcast_to(np.expand_dims(mixed, a), V.shape)
        if kind == "ppermute":
            source = [0] * n
            for src, dst in perm:
                source[dst] = src
            return np.take(V, source, axis=a)
        if kind == "all_to_all":
            chunks = V.reshape(V.shape[:-1] + (n, D // n))
            return np.swapaxes(chunks, a, len(axes)).reshape(V.shape)
        index = np.arange(n).reshape([n if i == a else 1 for i in range(V.ndim)])
        return V * (index + 1.0)

    return f"{kind}[{reduced}]", op, explicit


def make_program(seed, differentiable=True):
    """A random program ``build(L, N)(x, w) -> vector`` of one member, its explicit
    all-members form ``explicit(X, w)``, and its description."""
    rng = np.random.default_rng(seed)
    axes = ["i", "j"] if rng.random() < 0.5 else ["j"]
    steps = []
    for _ in range(int(rng.integers(3, 8))):
        r = rng.random()
        if r < 0.45:
            steps.append(_collective(rng, axes, differentiable))
        elif r < 0.7:
            steps.append(_unary(rng))
        elif r < 0.85:
            steps.append(_dot(rng))
        else:
            steps.append(_mul_input(rng))

    def build(L, N):
        def f(x, w):
            ctx = {"x": x}
            v = x
            for _, op, _ in steps:
                v = op(L, N, v, w, ctx)
            return v

        return f

    def explicit(X, w):
        V = X
        for _, _, ex in steps:
            V = ex(V, w, X, axes)
        return V

    return axes, build, explicit, " -> ".join(name for name, _, _ in steps)


def _vmapped(lib, fun, axes):
    f = fun
    for a in reversed(axes):
        f = lib.vmap(f, in_axes=(0, None), axis_name=a)
    return f


def _inputs(seed, axes):
    rng = np.random.default_rng(1000 + seed)
    x = (rng.standard_normal(tuple(SIZES[a] for a in axes) + (D,)) * 0.7).astype(np.float32)
    w = (rng.standard_normal((D, D)) * 0.5).astype(np.float32)
    return x, w


@pytest.mark.parametrize("seed", range(40))
def test_generated_program_matches_jax_and_explicit(seed):
    differentiable = seed % 4 != 3
    axes, build, explicit, text = make_program(seed, differentiable)
    x, w = _inputs(seed, axes)
    got = _vmapped(remat, build(lax, rnp), axes)(x, w)
    want = _vmapped(jax, build(jlax, jjnp), axes)(x, w)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-4, atol=2e-5,
                               err_msg=text)
    np.testing.assert_allclose(np.asarray(got), explicit(x.astype(np.float64),
                                                         w.astype(np.float64)),
                               rtol=2e-4, atol=2e-5, err_msg=text)
    jitted = remat.jit(_vmapped(remat, build(lax, rnp), axes))(x, w)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(got), rtol=1e-5, atol=1e-6,
                               err_msg=text)
    if not differentiable:
        return
    cot = np.random.default_rng(seed).standard_normal(np.shape(want)).astype(np.float32)
    grads = []
    for lib, L, N in ((remat, lax, rnp), (jax, jlax, jjnp)):
        f = _vmapped(lib, build(L, N), axes)
        grads.append(lib.grad(lambda a, b, f=f: (f(a, b) * cot).sum(), argnums=(0, 1))(x, w))
    for g, h in zip(*grads):
        np.testing.assert_allclose(np.asarray(g), np.asarray(h), rtol=1e-3, atol=1e-4,
                                   err_msg=text)
    tx = np.random.default_rng(seed + 1).standard_normal(x.shape).astype(np.float32)
    tangents = [lib.jvp(lambda a, lib=lib, L=L, N=N: _vmapped(lib, build(L, N), axes)(a, w),
                        (x,), (tx,))[1]
                for lib, L, N in ((remat, lax, rnp), (jax, jlax, jjnp))]
    np.testing.assert_allclose(np.asarray(tangents[0]), np.asarray(tangents[1]), rtol=1e-3,
                               atol=1e-4, err_msg=text)
    # grad inside the vmap, of each member's own loss: the transposes of the collectives
    # carry every member's cotangent, so it is the grad of the members' total loss
    row = cot.reshape(-1, D)[0]
    inner = {}
    for lib, L, N in ((remat, lax, rnp), (jax, jlax, jjnp)):
        if lib is jax and "all_to_all" in text:
            continue  # JAX 0.10 mis-shapes the cotangent of an unmapped all_to_all
        member = build(L, N)
        g = lib.grad(lambda a, b, m=member: (m(a, b) * row).sum())
        inner[lib] = _vmapped(lib, g, axes)(x, w)
    total = remat.grad(lambda a: (_vmapped(remat, build(lax, rnp), axes)(a, w) * row).sum())(x)
    np.testing.assert_allclose(np.asarray(inner[remat]), np.asarray(total), rtol=1e-3,
                               atol=1e-4, err_msg=text)
    if jax in inner:
        np.testing.assert_allclose(np.asarray(inner[remat]), np.asarray(inner[jax]),
                                   rtol=1e-3, atol=1e-4, err_msg=text)


# --- the same programs with the outer axis spanning two (simulated) processes ----------------


@pytest.mark.parametrize("seed", range(0, 40, 2))
def test_generated_program_across_two_processes(seed, monkeypatch):
    """The outer named axis becomes a pmap over 2 ranks of ``size / 2`` local devices each
    (collectives through ``remat.lax.process_collectives``, the MPI engine simulated): values
    and gradients equal the one-process program's."""
    from test_pmap import SimulatedRanks

    from remat import distributed
    from remat.config import config

    differentiable = seed % 4 != 3
    axes, build, _, text = make_program(seed, differentiable)
    x, w = _inputs(seed, axes)
    outer, local = axes[0], SIZES[axes[0]] // 2
    sim = SimulatedRanks(2)
    for name in ("allreduce", "allgather", "reduce_scatter", "alltoall"):
        monkeypatch.setattr(distributed, name, getattr(sim, name))
    member = build(lax, rnp)
    inner = _vmapped(remat, member, axes[1:]) if len(axes) > 1 else member
    cot = np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32)

    def rank_program(r):
        part = slice(r * local, (r + 1) * local)
        step = remat.pmap(inner, axis_name=outer, in_axes=(0, None))
        out = step(x[part], w)
        if not differentiable:
            return np.asarray(out), None, None
        gx, gw = remat.grad(lambda a, b: (step(a, b) * cot[part]).sum(), argnums=(0, 1))(
            x[part], w)
        return np.asarray(out), np.asarray(gx), np.asarray(gw)

    with config.override("remat_num_cpu_devices", local):
        ranks = sim.run(rank_program)
    crosses = [step for step in text.split(" -> ") if not step.startswith("axis_index")
               and (f"[{outer}]" in step or f"'{outer}'" in step)]
    assert bool(sim.known) == bool(crosses), (text, sorted(sim.known))
    full = _vmapped(remat, member, axes)
    np.testing.assert_allclose(np.concatenate([r[0] for r in ranks]), np.asarray(full(x, w)),
                               rtol=2e-4, atol=2e-5, err_msg=text)
    if differentiable:
        gx, gw = remat.grad(lambda a, b: (full(a, b) * cot).sum(), argnums=(0, 1))(x, w)
        np.testing.assert_allclose(np.concatenate([r[1] for r in ranks]), np.asarray(gx),
                                   rtol=1e-3, atol=1e-4, err_msg=text)
        np.testing.assert_allclose(sum(r[2] for r in ranks), np.asarray(gw), rtol=1e-3,
                                   atol=1e-4, err_msg=text)
