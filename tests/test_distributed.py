"""Multi-process runs over MPI: ``remat.distributed`` and the process collectives.

One ``mpiexec -n 2`` run of ``tests/mpi_programs/collectives.py`` checks the collectives across
two processes (values, dtypes, jit, memory accounting, random programs under grad / jvp / vmap
/ jit / checkpoint, a data-parallel step, mismatched shapes); this file compares what the ranks
computed with the single-process program on every rank's data, in remat and in JAX. The
in-process tests cover ``initialize``'s errors, the missing-extra error and the one-process
behaviour of the primitives.
"""

import functools
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import distributed, lax, memory
from remat.test_util import check_grads

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "mpi_programs"))
import programs  # noqa: E402

PROGRAM_COUNT = 12
TIMEOUT_S = 120


def mpiexec():
    """The launcher that came with the MPI wheel (beside this Python), else one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.path.exists(beside) else shutil.which("mpiexec")


def have_mpi():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return mpiexec() is not None


needs_mpi = pytest.mark.skipif(not have_mpi(), reason="needs mpi4py and mpiexec "
                               "(pip install 'remat[distributed]')")


def run_mpi(program, *args, n=2):
    """``mpiexec -n n python program args`` with a timeout: a hang fails, never blocks."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]),
        REMAT_NATIVE_LOOPS="0", REMAT_MPI_PROGRAMS=str(PROGRAM_COUNT))
    # MPICH's hydra launcher starts local ranks by fork; no ssh or flags needed in a container
    cmd = [mpiexec(), "-n", str(n), sys.executable, os.path.join(HERE, "mpi_programs", program),
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("mpi") / "results.npz"
    proc = run_mpi("collectives.py", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, dict(np.load(out))


# --- across two processes --------------------------------------------------------------------


@needs_mpi
def test_checks_pass_in_both_ranks(two_ranks):
    stdout, _ = two_ranks
    for name in ("basics", "memory", "random programs", "data parallel mlp"):
        assert f"OK {name}" in stdout, stdout


@needs_mpi
def test_mismatched_shapes_fail_clearly_on_every_rank(two_ranks):
    stdout, _ = two_ranks
    line = next(ln for ln in stdout.splitlines() if ln.startswith("OK mismatch error"))
    assert "rank 0 has float32[3]" in line and "rank 1 has float32[4]" in line


def _global_reference(np_, grad, jvp, seed):
    spec = programs.generate(seed)
    X, W, C = programs.inputs(seed)
    losses = programs.global_(spec, np_.asarray(W), np_.asarray(C), np_)
    total = lambda V: losses(V).sum()
    T = C * 0.5 + 0.25
    return {"value": np.asarray(losses(np_.asarray(X))),
            "grad": np.asarray(grad(total)(np_.asarray(X))),
            "jvp": np.asarray(jvp(losses, (np_.asarray(X),), (np_.asarray(T),))[1]),
            "vmap_grad": np.stack([np.asarray(grad(total)(np_.asarray(X))),
                                   np.asarray(grad(total)(np_.asarray(X * 0.5 + 0.1)))], 1)}


@needs_mpi
@pytest.mark.parametrize("seed", range(PROGRAM_COUNT))
def test_random_program_equals_single_process(two_ranks, seed):
    """Each rank's value, gradient, tangent, vmapped and jitted gradient is its slice of the
    single-process program on all ranks' data (remat's and JAX's)."""
    import jax
    import jax.numpy as jjnp

    _, got = two_ranks
    refs = [_global_reference(jnp, remat.grad, remat.jvp, seed),
            _global_reference(jjnp, jax.grad, jax.jvp, seed)]
    for ref in refs:
        for r in range(programs.P):
            key = f"prog{seed}/{{}}/rank{r}"
            np.testing.assert_allclose(got[key.format("value")], ref["value"][r], rtol=1e-5,
                                       atol=1e-5)
            np.testing.assert_allclose(got[key.format("grad")], ref["grad"][r], rtol=1e-4,
                                       atol=1e-5)
            np.testing.assert_allclose(got[key.format("jit_grad")], ref["grad"][r], rtol=1e-4,
                                       atol=1e-5)
            np.testing.assert_allclose(got[key.format("jvp")], ref["jvp"][r], rtol=1e-4,
                                       atol=1e-5)
            np.testing.assert_allclose(got[key.format("vmap_grad")], ref["vmap_grad"][r],
                                       rtol=1e-4, atol=1e-5)
            assert got[key.format("grad")].dtype == np.float32


@needs_mpi
def test_data_parallel_gradient_equals_full_batch(two_ranks):
    import jax
    import jax.numpy as jjnp

    _, got = two_ranks
    rng = np.random.default_rng(7)
    w1 = rng.normal(size=(4, 8)).astype(np.float32)
    w2 = rng.normal(size=(8, 1)).astype(np.float32)
    xs = rng.normal(size=(6, 4)).astype(np.float32)
    ys = rng.normal(size=(6, 1)).astype(np.float32)

    def loss(np_, params):
        return np_.mean((np_.tanh(xs @ params[0]) @ params[1] - ys) ** 2)

    for np_, vg in ((jnp, remat.value_and_grad), (jjnp, jax.value_and_grad)):
        value, (g1, g2) = vg(functools.partial(loss, np_))((np_.asarray(w1), np_.asarray(w2)))
        for r in range(2):
            np.testing.assert_allclose(got[f"mlp/loss/rank{r}"], value, rtol=1e-5)
            np.testing.assert_allclose(got[f"mlp/g1/rank{r}"], g1, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(got[f"mlp/g2/rank{r}"], g2, rtol=1e-4, atol=1e-6)


@needs_mpi
def test_pmap_pmean_spans_processes(two_ranks):
    """pmap over two local devices in each of two processes: pmean of the gradients (a
    checkpoint inside) averages over all four members, the whole batch's gradient."""
    stdout, got = two_ranks
    if "SKIP pmap" in stdout:
        pytest.skip("remat.pmap is not built yet")
    rng = np.random.default_rng(8)
    w = rng.normal(size=(4, 2)).astype(np.float32)
    xs = rng.normal(size=(8, 4)).astype(np.float32)
    full = remat.grad(lambda w: jnp.mean(jnp.sin(jnp.asarray(xs) @ w) ** 2))(jnp.asarray(w))
    for r in range(2):
        np.testing.assert_allclose(got[f"pmap/grad/rank{r}"], full, rtol=1e-4, atol=1e-6)


# --- one process -----------------------------------------------------------------------------


def test_not_initialized_is_one_process():
    assert not distributed.is_initialized()
    assert distributed.process_index() == 0 and distributed.process_count() == 1
    distributed.shutdown()  # a no-op, as JAX's


def test_missing_extra_raises_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", None)
    with pytest.raises(ImportError, match=r'pip install "remat\[distributed\]"'):
        distributed.initialize()
    assert not distributed.is_initialized()


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(process_id=-1), TypeError, "process_id must be a nonnegative int"),
    (dict(num_processes=0), TypeError, "num_processes must be a positive int"),
    (dict(num_processes="2"), TypeError, "num_processes must be a positive int"),
    (dict(process_id=True), TypeError, "process_id must be a nonnegative int"),
    (dict(process_id=3, num_processes=2), ValueError, "process_id < num_processes"),
    (dict(cluster_detection_method="slurm"), ValueError, "cluster_detection_method"),
    (dict(local_device_ids=[-1]), TypeError, "local_device_ids"),
    (dict(coordinator_address=1234), TypeError, "coordinator_address"),
])
def test_initialize_rejects_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        distributed.initialize(**kwargs)
    assert not distributed.is_initialized()


@needs_mpi
@pytest.mark.parametrize("kwargs, match", [
    (dict(num_processes=2), r"num_processes=2 contradicts MPI, which runs 1"),
    (dict(process_id=1, num_processes=2), r"num_processes=2 contradicts MPI"),
])
def test_initialize_arguments_must_agree_with_mpi(kwargs, match):
    with pytest.raises(ValueError, match=match):
        distributed.initialize(**kwargs)
    assert not distributed.is_initialized()


@needs_mpi
def test_initialize_twice_raises_and_shutdown_resets():
    distributed.initialize(coordinator_address="localhost:1234", num_processes=1, process_id=0,
                           local_device_ids=0, cluster_detection_method="mpi4py")
    try:
        assert distributed.is_initialized() and distributed.process_count() == 1
        assert distributed.local_device_ids() == (0,)
        with pytest.raises(RuntimeError, match="should only be called once"):
            distributed.initialize()
        # with one MPI process the collectives run through MPI and are identities
        x = jnp.arange(4.0)
        np.testing.assert_array_equal(lax.process_allreduce(x), x)
        np.testing.assert_array_equal(lax.process_allgather(x), x[None])
        assert distributed.collective_stats()["calls"] >= 2
    finally:
        distributed.shutdown()
    assert not distributed.is_initialized() and distributed.process_count() == 1


def test_one_process_values_and_dtypes():
    x = jnp.arange(6, dtype=jnp.int32).reshape(3, 2)
    for op in ("sum", "max", "min"):
        out = lax.process_allreduce(x, op)
        assert out.dtype == jnp.int32
        np.testing.assert_array_equal(out, np.arange(6).reshape(3, 2))
    g = lax.process_allgather(x)
    assert g.shape == (1, 3, 2) and g.dtype == jnp.int32
    np.testing.assert_array_equal(lax.process_reduce_scatter(g), x)
    np.testing.assert_array_equal(lax.process_alltoall(g), g)
    w = lax.process_allreduce(jnp.ones((), jnp.float32) * 1.5)
    assert w.dtype == jnp.float32 and not w.aval.weak_type
    assert lax.process_allreduce(1.5).aval.weak_type  # a Python scalar stays weakly typed


def test_one_process_bad_input():
    with pytest.raises(ValueError, match="op must be one of"):
        lax.process_allreduce(jnp.ones(3), "prod")
    with pytest.raises(TypeError, match="process_allreduce does not accept dtype complex64"):
        lax.process_allreduce(jnp.ones(3, jnp.complex64), "max")
    with pytest.raises(TypeError, match="does not accept dtype bool"):
        lax.process_allreduce(jnp.ones(3, bool), "sum")
    with pytest.raises(ValueError, match="leading axis is the process count 1, got shape"):
        lax.process_alltoall(jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="leading axis is the process count 1"):
        lax.process_reduce_scatter(jnp.ones(()))
    with pytest.raises(ValueError, match="traced for 2 process"):
        lax.process_allreduce_p.bind(jnp.ones(3), op="sum", axis_size=2)


@pytest.mark.parametrize("fn", [
    lambda x: lax.process_allreduce(x * x, "sum"),
    lambda x: lax.process_allreduce(jnp.sin(x), "max"),
    lambda x: lax.process_allreduce(jnp.sin(x), "min"),
    lambda x: lax.process_allgather(jnp.sin(x)),
    lambda x: lax.process_reduce_scatter(jnp.sin(x)[None] * 2.0),
    lambda x: lax.process_alltoall(jnp.sin(x)[None]),
])
def test_one_process_transformations(fn):
    x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 2)).astype(np.float32))
    check_grads(fn, (x,), order=2, modes=("fwd", "rev"), atol=1e-2, rtol=1e-2)
    np.testing.assert_allclose(remat.jit(fn)(x), fn(x), rtol=1e-6)
    batched = jnp.stack([x, x * 2.0, x - 1.0])
    np.testing.assert_allclose(remat.vmap(fn)(batched), np.stack([fn(b) for b in batched]),
                               rtol=1e-6)
    np.testing.assert_allclose(remat.vmap(fn, in_axes=2, out_axes=1)(batched.transpose(1, 2, 0)),
                               np.stack([fn(b) for b in batched], 1), rtol=1e-6)
    loss = lambda x: (fn(x) ** 2).sum()
    np.testing.assert_allclose(remat.grad(remat.checkpoint(loss))(x), remat.grad(loss)(x),
                               rtol=1e-6)


def test_max_tangent_is_shared_among_ties_like_reduce_max():
    """With one process the extremum is always 'tied' with itself: the tangent passes whole."""
    x = jnp.asarray([1.0, 3.0])
    t = jnp.asarray([0.5, -2.0])
    _, tangent = remat.jvp(lambda x: lax.process_allreduce(x, "max"), (x,), (t,))
    np.testing.assert_array_equal(tangent, t)


def test_collective_buffers_are_counted_by_memory():
    x = jnp.ones((128, 64), jnp.float32)

    def f(x):
        y = x + 1.0
        return lax.process_allgather(y).sum() + y.sum()  # y lives on past the gather

    f = remat.jit(f)
    f(x)
    timeline = memory.memory_timeline(f, x)
    gathered = [b for e, b in timeline if e.startswith("process_allgather")]
    assert gathered == [2 * x.nbytes], timeline  # y and the gathered copy


@needs_mpi
def test_demo_data_parallel_matches_whole_batch_run():
    """``mpiexec -n 2 python -m remat.demo --data-parallel --reference``: the two-process
    losses are the one-process whole-batch run's."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]), REMAT_NATIVE_LOOPS="0")
    proc = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "remat.demo",
                           "--data-parallel", "--reference", "--steps", "3"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=env,
                          cwd=os.path.dirname(HERE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 process(es), each 12 of the 24 sequences" in proc.stdout
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.strip()[:1].isdigit()]
    assert [int(r[0]) for r in rows] == [0, 2]
    for _, dp, whole in rows:
        assert abs(float(dp) - float(whole)) < 1e-4, proc.stdout
    assert proc.stdout.count("remat demo, data-parallel") == 1  # rank 0 prints
