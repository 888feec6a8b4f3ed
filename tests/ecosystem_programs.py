"""Programs that use JAX-ecosystem libraries (optax, chex, equinox, flax, diffrax), run
the same under JAX and under remat.

Each program imports ``jax`` (and its library) when it runs, and returns a JSON-able dict of
results.  ``tests/test_ecosystem.py`` runs each one in this process under the real JAX (the
oracle) and in a subprocess with ``jax`` aliased to remat::

    python tests/ecosystem_programs.py optax_training --remat

(the pytest process has imported the real JAX, so the alias needs a process of its own).
"""

import json
import sys

import numpy as np


def install_remat_alias():
    """Alias ``jax`` to remat."""
    import remat
    import remat.jax_alias

    remat.jax_alias.install()


def _data():
    rng = np.random.RandomState(0)
    x = rng.randn(16, 3).astype(np.float32)
    y = rng.randn(16, 1).astype(np.float32)
    params = {"w1": (rng.randn(3, 8) * 0.3).astype(np.float32), "b1": np.zeros(8, np.float32),
              "w2": (rng.randn(8, 1) * 0.3).astype(np.float32), "b2": np.zeros(1, np.float32)}
    return x, y, params


def _leaves(tree):
    import jax

    return [np.asarray(leaf).tolist() for leaf in jax.tree_util.tree_leaves(tree)]


def optax_training():
    """A small MLP (its hidden layer under ``checkpoint``) trained for 20 ``jit`` steps by
    each optimizer; the losses and final parameters."""
    import jax
    import jax.numpy as jnp
    import optax

    x, y, params0 = _data()
    x, y = jnp.asarray(x), jnp.asarray(y)

    def loss(p, x, y):
        hidden = jax.checkpoint(lambda x: jnp.tanh(x @ p["w1"] + p["b1"]))(x)
        return jnp.mean((hidden @ p["w2"] + p["b2"] - y) ** 2)

    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 3, 20)
    optimizers = {
        "sgd": optax.sgd(0.1),
        "sgd_nesterov": optax.sgd(0.1, momentum=0.9, nesterov=True),
        "adam": optax.adam(1e-2),
        "adamw_warmup_cosine": optax.adamw(schedule, weight_decay=1e-2),
        "clip_adam": optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2)),
    }
    out = {}
    for name, opt in optimizers.items():
        @jax.jit
        def step(p, state, opt=opt):
            value, grads = jax.value_and_grad(loss)(p, x, y)
            updates, state = opt.update(grads, state, p)
            return optax.apply_updates(p, updates), state, value

        p = {k: jnp.asarray(v) for k, v in params0.items()}
        state = opt.init(p)
        losses = []
        for _ in range(20):
            p, state, value = step(p, state)
            losses.append(float(value))
        out[name] = {"losses": losses, "params": _leaves(p),
                     "dtypes": sorted({str(leaf.dtype) for leaf in jax.tree_util.tree_leaves(p)})}
    return out


def chex_probes():
    """chex's assertions (passing and failing), ``chex.dataclass`` through ``tree_map`` and
    ``jit``, ``assert_max_traces`` and ``chexify``."""
    import chex
    import jax
    import jax.numpy as jnp

    x = jnp.ones((2, 3))
    out = {}
    chex.assert_shape(x, (2, 3))
    chex.assert_rank(x, 2)
    chex.assert_type(x, jnp.float32)
    chex.assert_trees_all_close({"a": x}, {"a": x + 1e-7})
    chex.assert_trees_all_equal_shapes({"a": x}, {"a": x * 2})
    chex.assert_tree_all_finite({"a": x})
    chex.assert_equal_shape([x, x])
    chex.assert_scalar_positive(3.0)
    chex.assert_tree_shape_prefix({"a": x}, (2,))
    failures = {}
    for name, bad in {"shape": lambda: chex.assert_shape(x, (3, 2)),
                      "rank": lambda: chex.assert_rank(x, 3),
                      "type": lambda: chex.assert_type(x, jnp.int32),
                      "close": lambda: chex.assert_trees_all_close(x, x + 1.0),
                      "finite": lambda: chex.assert_tree_all_finite(x / 0.0)}.items():
        try:
            bad()
            failures[name] = "passed"
        except AssertionError:
            failures[name] = "AssertionError"
    out["failures"] = failures

    @chex.dataclass
    class Params:
        w: chex.Array
        b: chex.Array

    p = Params(w=x, b=jnp.arange(3.0))
    doubled = jax.tree_util.tree_map(lambda a: a * 2, p)
    out["dataclass_type"] = type(doubled).__name__
    out["dataclass_leaves"] = _leaves(doubled)
    out["dataclass_jit"] = float(jax.jit(lambda p: p.w.sum() + p.b.sum())(p))

    @jax.jit
    def shaped(x):
        chex.assert_shape(x, (2, 3))
        return x * 2

    out["jit_assert"] = np.asarray(shaped(x)).tolist()

    @chex.assert_max_traces(n=1)
    def traced_once(x):
        return x + 1

    jitted = jax.jit(traced_once)
    jitted(x)
    jitted(x)
    try:
        jitted(jnp.ones(4))  # a new shape: a second trace
        out["max_traces"] = "passed"
    except AssertionError:
        out["max_traces"] = "AssertionError"

    checked = chex.chexify(lambda x: (chex.assert_tree_all_finite(x), x * 3)[1],
                           async_check=False)
    out["chexify_ok"] = np.asarray(checked(x)).tolist()
    try:
        checked(x / 0.0)
        out["chexify_bad"] = "passed"
    except AssertionError as e:
        out["chexify_bad"] = "AssertionError: non-finite" if "non-finite" in str(e) else str(e)
    chex.block_until_chexify_assertions_complete()

    # pmap and the collectives: a real pmap over the one local device, and chex's fake_pmap
    # (a vmap with the axis name) over four members
    xs = jnp.arange(4.0).reshape(4, 1) + x[0]
    out["pmap_psum"] = np.asarray(
        jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(xs[:1])).tolist()
    with chex.fake_pmap():
        centred = jax.pmap(lambda v: v - jax.lax.pmean(v, "i"), axis_name="i")(xs)
        gathered = jax.pmap(lambda v: jax.lax.all_gather(v, "i"), axis_name="i")(xs)
    out["fake_pmap_pmean"] = np.asarray(centred).tolist()
    out["fake_pmap_all_gather"] = np.asarray(gathered).tolist()
    chex.assert_trees_all_close(gathered[0], xs)
    return out


def equinox_mlp():
    """An ``eqx.nn.MLP`` applied, under ``filter_jit``, its ``filter_grad`` (also through
    ``filter_checkpoint``) and ``filter_vmap``."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    mlp = eqx.nn.MLP(3, 2, 8, 2, key=jax.random.PRNGKey(0))
    x = jnp.asarray(_data()[0][0])

    def loss(m, x):
        return jnp.sum(m(x) ** 2)

    out = {"apply": np.asarray(mlp(x)).tolist(),
           "filter_jit": np.asarray(eqx.filter_jit(lambda m, x: m(x))(mlp, x)).tolist(),
           "filter_grad": _leaves(eqx.filter_grad(loss)(mlp, x)),
           "filter_checkpoint": _leaves(eqx.filter_grad(eqx.filter_checkpoint(loss))(mlp, x)),
           "filter_vmap": np.asarray(eqx.filter_vmap(lambda m, x: m(x), in_axes=(None, 0))(
               mlp, jnp.asarray(_data()[0][:4]))).tolist()}
    return out


def flax_linen():
    """A ``linen`` MLP (``Dense``) initialized and applied; the gradient through
    ``nn.remat(nn.Dense)``."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(nn.relu(nn.Dense(8)(x)))

    class Rematted(nn.Module):
        @nn.compact
        def __call__(self, x):
            return jnp.tanh(nn.remat(nn.Dense)(4)(x))

    x = jnp.asarray(_data()[0][:2])
    model = MLP()
    params = model.init(jax.random.PRNGKey(0), x)
    rematted = Rematted()
    rparams = rematted.init(jax.random.PRNGKey(1), x)
    grads = jax.grad(lambda p: rematted.apply(p, x).sum())(rparams)
    return {"params": _leaves(params), "apply": np.asarray(model.apply(params, x)).tolist(),
            "remat_grads": _leaves(grads)}


def _diffrax_solver():
    import diffrax
    import jax.numpy as jnp

    term = diffrax.ODETerm(lambda t, y, a: -a * y)

    def solve(a, saveat=None):
        return diffrax.diffeqsolve(term, diffrax.Tsit5(), t0=0.0, t1=1.0, dt0=0.1,
                                   y0=jnp.array([1.0, 2.0]), args=a,
                                   saveat=saveat or diffrax.SaveAt(t1=True),
                                   adjoint=diffrax.RecursiveCheckpointAdjoint()).ys

    return solve


def diffrax_solve():
    """``diffeqsolve(Tsit5())`` of y' = -a y (``RecursiveCheckpointAdjoint``): the solution
    at t1, at several save points, and under ``jit``."""
    import diffrax
    import jax
    import jax.numpy as jnp

    solve = _diffrax_solver()
    ts = diffrax.SaveAt(ts=jnp.linspace(0.0, 1.0, 5))
    return {"ys": np.asarray(solve(0.5)).tolist(),
            "ys_saveat": np.asarray(solve(0.5, ts)).tolist(),
            "ys_jit": np.asarray(jax.jit(solve)(1.5)).tolist()}


def diffrax_grad():
    """The gradient of ``diffeqsolve(Tsit5())``'s solution with respect to the decay rate,
    reverse mode through ``RecursiveCheckpointAdjoint`` (equinox's checkpointed while loop)."""
    import jax
    import jax.numpy as jnp

    solve = _diffrax_solver()
    return {"grad": float(jax.grad(lambda a: jnp.sum(solve(a)))(0.5))}


PROGRAMS = {"optax_training": ("optax", optax_training), "chex_probes": ("chex", chex_probes),
            "equinox_mlp": ("equinox", equinox_mlp), "flax_linen": ("flax", flax_linen),
            "diffrax_solve": ("diffrax", diffrax_solve), "diffrax_grad": ("diffrax", diffrax_grad)}


def main(argv):
    name = argv[1]
    if "--remat" in argv:
        install_remat_alias()
    result = {}
    try:
        result["out"] = PROGRAMS[name][1]()
    except Exception as e:  # noqa: BLE001 - reported to the test, which says what failed
        result["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv)
