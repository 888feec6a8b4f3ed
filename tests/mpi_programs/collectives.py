"""Run under ``mpiexec -n 2``: checks remat's process collectives across two processes and
saves what every rank computed for the test process to compare (``argv[1]``, an .npz).

Prints ``OK <name>`` for each check passed in the processes themselves; rank 0 writes the
gathered arrays (gradients, tangents, values) keyed ``<name>/rank<r>``.
"""

import os
import sys
import traceback

import numpy as np
from mpi4py import MPI

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"  # for pmap_end_to_end
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import programs  # noqa: E402

import remat  # noqa: E402
import remat.numpy as jnp  # noqa: E402
from remat import distributed, lax, memory  # noqa: E402

remat.config.update("remat_native_loops", False)
distributed.initialize()
rank, size = distributed.process_index(), distributed.process_count()
results = {}


def ok(name):
    if rank == 0:
        print("OK", name, flush=True)


def save(name, value):
    results[name] = np.asarray(value)


def basics():
    assert size == 2 and distributed.is_initialized()
    try:
        distributed.initialize()
        raise AssertionError("a second initialize() did not raise")
    except RuntimeError as e:
        assert "only be called once" in str(e)
    x = jnp.arange(3.0, dtype=jnp.float32) + 10 * rank
    np.testing.assert_array_equal(lax.process_allreduce(x), [10, 12, 14])
    np.testing.assert_array_equal(lax.process_allreduce(x, "max"), [10, 11, 12])
    np.testing.assert_array_equal(lax.process_allreduce(x, "min"), [0, 1, 2])
    i = jnp.array([rank, 5], jnp.int32)
    out = lax.process_allreduce(i)
    assert out.dtype == jnp.int32 and out.tolist() == [1, 10]
    b = jnp.array([rank == 0, True, False])
    assert lax.process_allreduce(b, "max").tolist() == [True, True, False]
    assert lax.process_allreduce(b, "min").tolist() == [False, True, False]
    h = jnp.array([1.5, 2.25], jnp.bfloat16) * (rank + 1)
    out = lax.process_allreduce(h)
    assert out.dtype == jnp.bfloat16 and out.astype(np.float32).tolist() == [4.5, 6.75]
    g = lax.process_allgather(x)
    assert g.shape == (2, 3)
    np.testing.assert_array_equal(g, [[0, 1, 2], [10, 11, 12]])
    hb = lax.process_allgather(h)
    assert hb.dtype == jnp.bfloat16 and hb.shape == (2, 2)
    m = jnp.arange(6.0).reshape(2, 3) + 100 * rank
    np.testing.assert_array_equal(lax.process_alltoall(m), [m[0] - 100 * rank + 0,
                                                           m[0] - 100 * rank + 100]
                                  if rank == 0 else [m[1] - 100, m[1]])
    np.testing.assert_array_equal(lax.process_reduce_scatter(m), (m[rank] - 100 * rank) * 2 + 100)
    # jit gives the same values, pytrees are mapped leaf by leaf
    tree = remat.jit(lambda t: lax.process_allreduce(t))({"a": x, "b": [m]})
    np.testing.assert_array_equal(tree["a"], [10, 12, 14])
    ok("basics")


def jaxpr_and_memory():
    x = jnp.ones((64, 64), jnp.float32)
    text = str(remat.make_jaxpr(lax.process_allgather)(x))
    assert "process_allgather[axis_size=2]" in text, text
    f = remat.jit(lambda x: lax.process_allgather(x * 2.0).sum())
    f(x)
    timeline = memory.memory_timeline(f, x)
    steps = [(e, b) for e, b in timeline if e.startswith("process_allgather")]
    assert steps, timeline
    assert max(b for _, b in steps) >= 2 * x.nbytes, timeline  # the gathered buffer counted
    peak = memory.peak_memory(remat.jit(lambda x: lax.process_allgather(x).sum()), x)
    assert peak >= 2 * x.nbytes, peak
    ok("memory")


def random_programs(count):
    for seed in range(count):
        spec = programs.generate(seed)
        X, W, C = programs.inputs(seed)
        loss = programs.distributed(spec, jnp.asarray(W[rank]), jnp.asarray(C[rank]))
        v = jnp.asarray(X[rank])
        value, grad = remat.value_and_grad(loss)(v)
        save(f"prog{seed}/value", value)
        save(f"prog{seed}/grad", grad)
        tangent = jnp.asarray(C[rank] * 0.5 + 0.25)
        _, jvp_out = remat.jvp(loss, (v,), (tangent,))
        save(f"prog{seed}/jvp", jvp_out)
        batch = jnp.stack([v, v * 0.5 + 0.1])
        save(f"prog{seed}/vmap_grad", remat.vmap(remat.grad(loss))(batch))
        save(f"prog{seed}/jit_grad", remat.jit(remat.grad(loss))(v))
    ok("random programs")


def data_parallel_mlp():
    """grad of the mean loss over the whole batch, from each rank's half and an allreduce."""
    rng = np.random.default_rng(7)
    w1 = rng.normal(size=(4, 8)).astype(np.float32)
    w2 = rng.normal(size=(8, 1)).astype(np.float32)
    xs = rng.normal(size=(6, 4)).astype(np.float32)
    ys = rng.normal(size=(6, 1)).astype(np.float32)
    local = slice(3 * rank, 3 * rank + 3)

    @remat.checkpoint
    def hidden(w1, x):
        return jnp.tanh(x @ w1)

    def loss(params, x, y):
        w1, w2 = params
        return jnp.mean((hidden(w1, x) @ w2 - y) ** 2)

    @remat.jit
    def step(params, x, y):
        value, grads = remat.value_and_grad(loss)(params, x, y)
        return lax.process_allreduce((value, grads)), size

    (value, grads), _ = step((jnp.asarray(w1), jnp.asarray(w2)), xs[local], ys[local])
    save("mlp/loss", value / size)
    save("mlp/g1", grads[0] / size)
    save("mlp/g2", grads[1] / size)
    ok("data parallel mlp")


def pmap_end_to_end():
    """pmap over the local device, with the pmean spanning both processes."""
    try:
        from remat.transforms.pmap import pmap
    except ImportError:
        print("SKIP pmap (remat.pmap not built yet)", flush=True) if rank == 0 else None
        return
    rng = np.random.default_rng(8)
    w = rng.normal(size=(4, 2)).astype(np.float32)
    xs = rng.normal(size=(8, 4)).astype(np.float32)
    n = remat.local_device_count()
    assert n == 2, n  # XLA_FLAGS below: two local devices per process, four members in all
    local = xs[4 * rank:4 * rank + 4].reshape(n, 4 // n, 4)

    def step(w, x):
        features = remat.checkpoint(lambda w, x: jnp.sin(x @ w))
        g = remat.grad(lambda w: jnp.mean(features(w, x) ** 2))(w)
        members = lax.all_gather(lax.axis_index("dp"), "dp")
        return lax.pmean(g, "dp"), lax.psum(1, "dp"), members

    g, count, members = pmap(step, axis_name="dp", in_axes=(None, 0))(w, local)
    assert np.asarray(count).tolist() == [4, 4], count
    assert np.asarray(members).tolist() == [[0, 1, 2, 3]] * 2, members
    save("pmap/grad", g[0])
    np.testing.assert_allclose(g[1], g[0], rtol=1e-6)
    ok("pmap")


def mismatch():
    """Different shapes on the two ranks: a ValueError on both, naming both shapes."""
    x = jnp.ones(3 + rank)
    try:
        lax.process_allreduce(x)
        raise AssertionError("mismatched shapes did not raise")
    except ValueError as e:
        msg = str(e)
        assert "rank 0 has float32[3]" in msg and "rank 1 has float32[4]" in msg, msg
    # the job is still usable after the error
    np.testing.assert_array_equal(lax.process_allreduce(jnp.ones(2)), [2.0, 2.0])
    ok(f"mismatch error: {msg}")


failed = False
for check in (basics, jaxpr_and_memory, lambda: random_programs(int(os.environ.get(
        "REMAT_MPI_PROGRAMS", "12"))), data_parallel_mlp, pmap_end_to_end, mismatch):
    try:
        check()
    except Exception:
        failed = True
        print(f"FAIL on rank {rank}:\n{traceback.format_exc()}", flush=True)

gathered = MPI.COMM_WORLD.gather(results, root=0)  # the test's own traffic, beside remat's
if rank == 0 and len(sys.argv) > 1:
    np.savez(sys.argv[1], **{f"{k}/rank{r}": v for r, res in enumerate(gathered)
                             for k, v in res.items()})
distributed.shutdown()
sys.exit(1 if failed else 0)
