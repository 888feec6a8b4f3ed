"""``shard_map`` over one device (against JAX's) and over a 2x2 mesh of four local devices
(against explicit blockwise computations), with collectives, grad, jit and checkpoint;
``make_mesh``, ``Mesh`` and ``NamedSharding`` over several devices; bad specs."""

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax import lax as jlax

import remat
import remat.numpy as rnp
from remat import lax
from remat.config import config
from remat.experimental.shard_map import shard_map as experimental_shard_map
from remat.sharding import Mesh, NamedSharding
from remat.sharding import PartitionSpec as P

RNG = np.random.default_rng(2)


@pytest.fixture
def mesh22():
    with config.override("remat_num_cpu_devices", 4):
        yield remat.make_mesh((2, 2), ("x", "y"))


def test_one_device_matches_jax():
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    mesh = Mesh(np.array(remat.devices()), ("x",))
    jmesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))

    def make(L, N):
        return lambda b: N.sin(b) + L.psum(b.sum(), "x") * L.axis_index("x")

    got = remat.shard_map(make(lax, rnp), mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)
    want = jax.shard_map(make(jlax, jjnp), mesh=jmesh, in_specs=jax.sharding.PartitionSpec("x"),
                         out_specs=jax.sharding.PartitionSpec("x"))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    old = experimental_shard_map(make(lax, rnp), mesh, P("x"), P("x"), check_rep=False)(x)
    np.testing.assert_allclose(np.asarray(old), np.asarray(want), rtol=1e-6)


def test_blocks_and_collectives_on_a_two_by_two_mesh(mesh22):
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    seen = remat.shard_map(lambda b: b * 0 + lax.axis_index("x") * 2 + lax.axis_index("y"),
                           mesh=mesh22, in_specs=P("x", "y"), out_specs=P("x", "y"))(x)
    np.testing.assert_array_equal(np.asarray(seen), np.kron([[0, 1], [2, 3]], np.ones((2, 3))))
    rowsum = remat.shard_map(lambda b: lax.psum(b.sum(1, keepdims=True), "y"), mesh=mesh22,
                             in_specs=P("x", "y"), out_specs=P("x", None))(x)
    np.testing.assert_allclose(np.asarray(rowsum), x.sum(1, keepdims=True), rtol=1e-5)
    total = remat.shard_map(lambda b: lax.psum(b.sum(), ("x", "y")), mesh=mesh22,
                            in_specs=P("x", "y"), out_specs=P())(x)
    np.testing.assert_allclose(float(total), x.sum(), rtol=1e-5)
    # a tuple of mesh axes splits one dim row-major; all_gather tiled reassembles it
    v = np.arange(8.0, dtype=np.float32)
    whole = remat.shard_map(lambda b: lax.all_gather(b, ("x", "y"), tiled=True), mesh=mesh22,
                            in_specs=P(("x", "y")), out_specs=P())(v)
    np.testing.assert_array_equal(np.asarray(whole), v)
    # an argument replicated over the mesh, a pytree of specs
    w = RNG.standard_normal((6, 2)).astype(np.float32)
    out = remat.shard_map(lambda d: {"y": lax.psum(d["a"] @ d["w"][:3] * 0 + d["a"].sum(), "y")},
                          mesh=mesh22, in_specs=({"a": P("x", "y"), "w": P()},),
                          out_specs={"y": P("x")})({"a": x, "w": w})
    assert out["y"].shape == (4, 2)


def _model_loss(w, x):
    h = remat.checkpoint(lambda a, b: rnp.tanh(a @ b))(x, w)
    return (h ** 2).sum()


def test_grad_jit_and_checkpoint_of_data_parallel_step(mesh22):
    w = RNG.standard_normal((5, 3)).astype(np.float32)
    x = RNG.standard_normal((8, 5)).astype(np.float32)

    def step(w, xb):
        return lax.psum(remat.grad(_model_loss)(w, xb), ("x", "y"))

    sharded = remat.shard_map(step, mesh=mesh22, in_specs=(P(), P(("x", "y"))), out_specs=P())
    full = remat.grad(_model_loss)(w, x)
    np.testing.assert_allclose(np.asarray(sharded(w, x)), np.asarray(full), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(np.asarray(remat.jit(sharded)(w, x)), np.asarray(full),
                               rtol=1e-4, atol=1e-5)
    # grad of the shard_mapped loss itself
    loss = remat.shard_map(lambda w, xb: lax.psum(_model_loss(w, xb), ("x", "y")), mesh=mesh22,
                           in_specs=(P(), P(("x", "y"))), out_specs=P())
    np.testing.assert_allclose(np.asarray(remat.grad(loss)(w, x)), np.asarray(full),
                               rtol=1e-4, atol=1e-5)
    jfull = jax.grad(lambda w: (jjnp.tanh(x @ w) ** 2).sum())(w)
    np.testing.assert_allclose(np.asarray(remat.grad(loss)(w, x)), np.asarray(jfull),
                               rtol=1e-4, atol=1e-5)


def test_mesh_and_named_sharding_over_four_devices(mesh22):
    assert mesh22.shape == {"x": 2, "y": 2} and mesh22.size == 4
    np.testing.assert_array_equal(mesh22.device_ids, [[0, 1], [2, 3]])
    s = NamedSharding(mesh22, P("x", None))
    assert s.shard_shape((4, 6)) == (2, 6) and s.num_devices == 4
    assert not s.is_fully_replicated and NamedSharding(mesh22, P()).is_fully_replicated
    index = s.devices_indices_map((4, 6))
    assert index[mesh22.devices[1, 0]] == (slice(2, 4), slice(None))
    assert index[mesh22.devices[0, 1]] == (slice(0, 2), slice(None))
    both = NamedSharding(mesh22, P(("x", "y")))
    assert both.devices_indices_map((8,))[mesh22.devices[1, 0]] == (slice(4, 6),)
    assert s.is_equivalent_to(NamedSharding(mesh22, P("x")), 2)
    assert not s.is_equivalent_to(NamedSharding(mesh22, P("y")), 2)
    with pytest.raises(ValueError, match="must be >= the product"):
        remat.make_mesh((4, 2), ("a", "b"))


def test_bad_specs(mesh22):
    x = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match=r"argument 0 .*dim 0 of size 3 is not divisible by "
                                         r"the 2 members of mesh axes \('x',\)"):
        remat.shard_map(lambda b: b, mesh=mesh22, in_specs=P("x"), out_specs=P("x"))(x)
    with pytest.raises(ValueError, match="'z', which is not in the mesh"):
        remat.shard_map(lambda b: b, mesh=mesh22, in_specs=P("z"), out_specs=P())(x)
    with pytest.raises(ValueError, match="has 3 entries but the value has rank 2"):
        remat.shard_map(lambda b: b, mesh=mesh22, in_specs=P(None, None, "x"),
                        out_specs=P())(x)
    with pytest.raises(ValueError, match="more than once"):
        remat.shard_map(lambda b: b, mesh=mesh22, in_specs=P("x", "x"), out_specs=P())(
            np.ones((4, 4)))
    with pytest.raises(ValueError, match="needs a mesh"):
        remat.shard_map(lambda b: b, in_specs=P(), out_specs=P())(x)
    with pytest.raises(NameError, match="unbound axis name: q"):
        remat.shard_map(lambda b: lax.psum(b, "q"), mesh=mesh22, in_specs=P(),
                        out_specs=P())(x)
    with pytest.raises(ValueError, match="out_specs"):
        remat.shard_map(lambda b: (b, b), mesh=mesh22, in_specs=P(),
                        out_specs=(P(), P(), P()))(x)


def test_shard_map_under_a_mesh_context(mesh22):
    x = RNG.standard_normal((4, 2)).astype(np.float32)
    with remat.sharding.set_mesh(mesh22):
        out = remat.shard_map(lambda b: lax.pmax(b, "x"), in_specs=P("x"), out_specs=P())(x)
    np.testing.assert_allclose(np.asarray(out), np.maximum(x[:2], x[2:]))


def test_replication_of_outputs_is_checked(mesh22):
    x = RNG.standard_normal((4, 2)).astype(np.float32)
    with pytest.raises(ValueError, match="does not name mesh axis 'x'"):
        remat.shard_map(lambda b: b, mesh=mesh22, in_specs=P("x"), out_specs=P())(x)
    with pytest.raises(ValueError, match="require replication"):  # axis_index varies over y
        remat.shard_map(lambda b: b * lax.axis_index("y"), mesh=mesh22, in_specs=P(),
                        out_specs=P())(x)
    first = remat.shard_map(lambda b: b, mesh=mesh22, in_specs=P("x"), out_specs=P(),
                            check_vma=False)(x)
    np.testing.assert_array_equal(np.asarray(first), x[:2])
    # a replicated value under a spec that names an axis: one copy per member
    tiled = remat.shard_map(lambda b: lax.psum(b, "x"), mesh=mesh22, in_specs=P("x"),
                            out_specs=P("y"))(x)
    np.testing.assert_allclose(np.asarray(tiled), np.tile(x[:2] + x[2:], (2, 1)), rtol=1e-6)
    # JAX checks the same way on its one device
    jmesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    with pytest.raises(ValueError, match="require replication"):
        jax.shard_map(lambda b: b, mesh=jmesh, in_specs=jax.sharding.PartitionSpec("x"),
                      out_specs=jax.sharding.PartitionSpec())(x)
    with pytest.raises(ValueError, match="require replication"):
        remat.shard_map(lambda b: b, mesh=Mesh(np.array(remat.devices()[:1]), ("x",)),
                        in_specs=P("x"), out_specs=P())(x)


def test_automatic_axes_are_refused(mesh22):
    with pytest.raises(ValueError, match="auto axes"):
        remat.shard_map(lambda b: b, mesh=mesh22, in_specs=P(), out_specs=P(), auto={"y"})
    with pytest.raises(ValueError, match="automatic"):
        remat.shard_map(lambda b: b, mesh=mesh22, in_specs=P(), out_specs=P(),
                        axis_names={"x"})(np.ones(2))
    same = remat.shard_map(lambda b: b, mesh=mesh22, in_specs=P(), out_specs=P(),
                           axis_names={"x", "y"})(np.ones(2))
    np.testing.assert_array_equal(np.asarray(same), np.ones(2))
