"""``pmap`` over 1 and 4 local devices (against JAX's one-device pmap and explicit
computations), under grad/jvp/jit with checkpoint inside, nested; the devices API with
several devices; and the multi-process code paths in one process, with the MPI engine
replaced by a simulation that runs each rank's program and combines their buffers."""

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax import lax as jlax

import remat
import remat.numpy as rnp
from remat import distributed, lax
from remat.config import config
from remat.test_util import check_grads

RNG = np.random.default_rng(1)


@pytest.fixture
def four_devices():
    with config.override("remat_num_cpu_devices", 4):
        yield


# --- one device, against JAX -----------------------------------------------------------------


def test_one_device_matches_jax_pmap():
    x = RNG.standard_normal((1, 3)).astype(np.float32)

    def make(L, N):
        return lambda v: N.sin(L.psum(v, "i")) * L.axis_index("i") + L.pmean(v, "i")

    got = remat.pmap(make(lax, rnp), "i")(x)
    want = jax.pmap(make(jlax, jjnp), "i")(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    g = remat.grad(lambda v: remat.pmap(make(lax, rnp), "i")(v).sum())(x)
    jg = jax.grad(lambda v: jax.pmap(make(jlax, jjnp), "i")(v).sum())(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(jg), rtol=1e-6)


def test_more_members_than_devices_is_a_value_error():
    assert remat.local_device_count() == 1
    with pytest.raises(ValueError, match="requires 3 logical devices, but only 1"):
        remat.pmap(lambda v: v)(np.ones((3, 2)))


# --- four devices ----------------------------------------------------------------------------


def test_devices_api_with_four_devices(four_devices):
    assert remat.device_count() == remat.local_device_count() == 4
    assert [d.id for d in remat.devices()] == [0, 1, 2, 3] == [d.id for d in
                                                                remat.local_devices()]
    assert repr(remat.devices()[3]) == "CpuDevice(id=3)"
    assert remat.devices()[0] is remat.devices()[0]


def test_device_count_restored_after_override():
    assert remat.device_count() == 1 and remat.devices() == [remat.devices()[0]]


def test_collectives_across_four_devices(four_devices):
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    out = remat.pmap(lambda v: lax.psum(v, "d") * lax.axis_index("d"), axis_name="d")(x)
    np.testing.assert_allclose(np.asarray(out), x.sum(0) * np.arange(4)[:, None], rtol=1e-5)
    gathered = remat.pmap(lambda v: lax.all_gather(v, "d"), axis_name="d")(x)
    np.testing.assert_array_equal(np.asarray(gathered), np.broadcast_to(x, (4, 4, 3)))
    perm = remat.pmap(lambda v: lax.ppermute(v, "d", [(i, (i + 1) % 4) for i in range(4)]),
                      axis_name="d")(x)
    np.testing.assert_array_equal(np.asarray(perm), np.roll(x, 1, axis=0))
    # the same results as JAX's vmap with the axis named (JAX's CPU pmap has one device)
    want = jax.vmap(lambda v: jlax.psum(v, "d") * jlax.axis_index("d"), axis_name="d")(x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-5)


def test_in_axes_out_axes_static_and_axis_size(four_devices):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    y = RNG.standard_normal(3).astype(np.float32)
    f = remat.pmap(lambda a, b, k: a * b * k, in_axes=(1, None, None),
                   static_broadcasted_argnums=2, out_axes=1)
    np.testing.assert_allclose(np.asarray(f(x, y, 2.0)), x * y[:, None] * 2, rtol=1e-6)
    consts = remat.pmap(lambda: lax.axis_index("i"), axis_name="i", axis_size=3)()
    np.testing.assert_array_equal(np.asarray(consts), [0, 1, 2])
    with pytest.raises(ValueError, match="inconsistent sizes"):
        remat.pmap(lambda a, b: a + b)(np.ones((2, 3)), np.ones((3, 3)))
    with pytest.raises(ValueError, match="requires 5 logical devices, but only 4"):
        remat.pmap(lambda a: a)(np.ones((5, 3)))
    with pytest.raises(NameError, match="unbound axis name: j"):
        remat.pmap(lambda a: lax.psum(a, "j"), axis_name="i")(np.ones((2, 3)))
    with pytest.raises(NameError):  # pmap without axis_name: no collective can name it
        remat.pmap(lambda a: lax.psum(a, "i"))(np.ones((2, 3)))


def _step(params, batch):
    """A checkpointed two-layer model's loss on one member's batch."""
    w1, w2 = params
    block = remat.checkpoint(lambda h, w: rnp.tanh(h @ w))
    h = block(batch, w1)
    return ((h @ w2) ** 2).mean()


def test_keyword_arguments_mapped_along_their_leading_axis(four_devices):
    # as JAX's pmap (chex's fake_pmap tests): in_axes covers the positional arguments only
    x, y = RNG.standard_normal((2, 4, 3)).astype(np.float32)

    def f(a, b=1.0, *, c):
        return (a * b + c).sum(), lax.psum(c.sum(), "i")

    got = remat.pmap(f, "i", in_axes=(None,))(x[0], c=y, b=np.arange(4.0))
    np.testing.assert_allclose(got[0], (x[0] * np.arange(4.0)[:, None] + y).sum(axis=1),
                               rtol=1e-6)
    np.testing.assert_allclose(got[1], np.full(4, y.sum()), rtol=1e-6)
    got = remat.pmap(f, "i", static_broadcasted_argnums=1)(x, 3.0, c=y)
    np.testing.assert_allclose(got[0], (x * 3.0 + y).sum(axis=1), rtol=1e-6)
    with pytest.raises(ValueError, match="rank should be at least 1"):
        remat.pmap(f, "i")(x, c=1.0)
    with pytest.raises(ValueError, match="inconsistent sizes"):
        remat.pmap(f, "i")(x, c=y[:2])
    one = remat.pmap(lambda a, *, c: a * c)(x[:1], c=y[:1])
    np.testing.assert_allclose(one, jax.pmap(lambda a, *, c: a * c)(x[:1], c=y[:1]))


def test_grad_of_data_parallel_step_equals_full_batch(four_devices):
    params = (RNG.standard_normal((5, 6)).astype(np.float32),
              RNG.standard_normal((6, 2)).astype(np.float32))
    data = RNG.standard_normal((4, 3, 5)).astype(np.float32)

    def member(p, b):
        g = remat.grad(_step)(p, b)
        return lax.pmean(g, "dp")

    grads = remat.pmap(member, axis_name="dp", in_axes=(None, 0))(params, data)
    full = remat.grad(lambda p: _step(p, data.reshape(12, 5)))(params)
    for g, f in zip(grads, full):
        for k in range(4):
            np.testing.assert_allclose(np.asarray(g)[k], np.asarray(f), rtol=1e-4, atol=1e-6)
    jfull = jax.grad(lambda p: ((jjnp.tanh(data.reshape(12, 5) @ p[0]) @ p[1]) ** 2).mean())(
        params)
    np.testing.assert_allclose(np.asarray(grads[0])[0], np.asarray(jfull[0]), rtol=1e-4,
                               atol=1e-6)


def test_transformations_of_pmap(four_devices):
    x = RNG.standard_normal((4, 3))

    def f(v):
        return remat.pmap(lambda a: rnp.sin(lax.psum(a * a, "i")) + lax.all_gather(a, "i")
                          .sum(0), axis_name="i")(v)

    with remat.enable_x64(True):
        check_grads(f, (x,), order=1, modes=("fwd", "rev"))
    np.testing.assert_allclose(np.asarray(remat.jit(f)(x)), np.asarray(f(x)), rtol=1e-6)
    t = RNG.standard_normal((4, 3))
    _, tangent = remat.jvp(f, (x,), (t,))
    eps = 1e-3
    np.testing.assert_allclose(np.asarray(tangent),
                               (np.asarray(f(x + eps * t)) - np.asarray(f(x - eps * t)))
                               / (2 * eps), rtol=1e-2, atol=1e-3)


def test_nested_pmap_and_vmap(four_devices):
    x = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    out = remat.pmap(remat.pmap(lambda v: lax.psum(v, ("i", "j")), axis_name="j"),
                     axis_name="i")(x)
    np.testing.assert_allclose(np.asarray(out), np.broadcast_to(x.sum((0, 1)), x.shape),
                               rtol=1e-5)
    mixed = remat.vmap(remat.pmap(lambda v: lax.pmax(v, "i") - lax.pmin(v, "v"),
                                  axis_name="i"), axis_name="v")(x)
    ref = x.max(1, keepdims=True) - x.min(0, keepdims=True)
    np.testing.assert_allclose(np.asarray(mixed), ref, rtol=1e-5)


# --- several processes, simulated ------------------------------------------------------------


class SimulatedRanks:
    """The buffer collectives of ``remat.distributed`` over ``count`` simulated ranks: every
    rank's program runs in turn, in passes; a collective whose every rank's input was
    recorded in an earlier pass returns its real result, the first unknown one records this
    rank's input, and it and later ones return zeros. Deterministic programs converge in one
    pass per collective."""

    def __init__(self, count):
        self.count, self.known = count, {}

    def run(self, program, max_passes=60):
        for _ in range(max_passes):
            self.new = {}
            outs = []
            for rank in range(self.count):
                self.rank, self.calls = rank, 0
                distributed._state.process_id, distributed._state.num_processes = rank, \
                    self.count
                try:
                    outs.append(program(rank))
                finally:
                    distributed._state.process_id, distributed._state.num_processes = 0, 1
            if not self.new:
                return outs
            self.known.update(self.new)
        raise AssertionError("the simulated ranks did not converge")

    def _call(self, buf, combine, blank):
        call = self.calls
        self.calls += 1
        ins = self.known.get(call)
        if ins is not None:
            return combine([ins[s] for s in range(self.count)], self.rank)
        if call == len(self.known):  # later calls' inputs depend on this one's result
            self.new.setdefault(call, {})[self.rank] = np.array(buf)
        return blank

    def allreduce(self, buf, op):
        reduce = {"sum": np.sum, "max": np.max, "min": np.min}[op]
        return self._call(buf, lambda ins, r: reduce(np.stack(ins), 0).astype(buf.dtype),
                          np.zeros_like(buf))

    def allgather(self, buf):
        return self._call(buf, lambda ins, r: np.stack(ins),
                          np.zeros((self.count,) + buf.shape, buf.dtype))

    def reduce_scatter(self, buf):
        return self._call(buf, lambda ins, r: sum(i[r] for i in ins).astype(buf.dtype),
                          np.zeros(buf.shape[1:], buf.dtype))

    def alltoall(self, buf):
        return self._call(buf, lambda ins, r: np.stack([i[r] for i in ins]),
                          np.zeros_like(buf))


@pytest.fixture
def two_ranks(monkeypatch):
    sim = SimulatedRanks(2)
    for name in ("allreduce", "allgather", "reduce_scatter", "alltoall"):
        monkeypatch.setattr(distributed, name, getattr(sim, name))
    with config.override("remat_num_cpu_devices", 2):
        yield sim


SPANNING = {
    "psum": lambda v: lax.psum(v, "i") + lax.axis_index("i"),
    "pmean_pmax_pmin": lambda v: lax.pmean(v, "i") * lax.pmax(v, "i") - lax.pmin(v, "i"),
    "all_gather": lambda v: lax.all_gather(v, "i", axis=1),
    "all_gather_tiled": lambda v: lax.all_gather(v, "i", tiled=True),
    "psum_scatter": lambda v: lax.psum_scatter(v, "i", scatter_dimension=1, tiled=True),
    "psum_scatter_untiled": lambda v: lax.psum_scatter(v[:, :4], "i", scatter_dimension=1),
    "all_to_all": lambda v: lax.all_to_all(v, "i", 1, 0, tiled=True),
    "ppermute": lambda v: lax.ppermute(v, "i", [(0, 3), (3, 1), (1, 0), (2, 2)]),
    "pbroadcast": lambda v: lax.pbroadcast(v, "i", 2),
    "psum_of_unmapped": lambda v: lax.psum(2.0, "i") * v,
}


@pytest.mark.parametrize("name", sorted(SPANNING))
def test_axis_spanning_two_processes_equals_one_process(two_ranks, name):
    op = SPANNING[name]
    full = RNG.standard_normal((4, 3, 8)).astype(np.float32)
    outs = two_ranks.run(lambda r: np.asarray(remat.pmap(op, axis_name="i")(
        full[2 * r:2 * r + 2])))
    want = np.asarray(remat.vmap(op, axis_name="i")(full))
    np.testing.assert_allclose(np.concatenate(outs), want, rtol=1e-5, atol=1e-6)


def test_grad_of_step_across_two_processes_equals_full_batch(two_ranks):
    params = (RNG.standard_normal((5, 6)).astype(np.float32),
              RNG.standard_normal((6, 2)).astype(np.float32))
    data = RNG.standard_normal((4, 3, 5)).astype(np.float32)

    def member(p, b):
        return lax.pmean(remat.grad(_step)(p, b), "dp")

    def rank_program(r):
        g = remat.pmap(member, axis_name="dp", in_axes=(None, 0))(params, data[2 * r:2 * r + 2])
        return [np.asarray(x) for x in g]

    outs = two_ranks.run(rank_program)
    full = remat.grad(lambda p: _step(p, data.reshape(12, 5)))(params)
    for rank_grads in outs:
        for g, f in zip(rank_grads, full):
            np.testing.assert_allclose(g, np.broadcast_to(np.asarray(f), g.shape), rtol=1e-4,
                                       atol=1e-6)


def test_grad_through_spanning_collectives(two_ranks):
    full = RNG.standard_normal((4, 6)).astype(np.float32)

    def loss(v):
        return remat.pmap(lambda a: (rnp.sin(lax.all_gather(a, "i")) * lax.psum(a, "i")).sum()
                          + (lax.ppermute(a, "i", [(0, 1), (1, 2), (2, 3), (3, 0)]) * a).sum(),
                          axis_name="i")(v).sum()

    outs = two_ranks.run(lambda r: np.asarray(remat.grad(loss)(full[2 * r:2 * r + 2])))
    want = remat.grad(lambda v: remat.vmap(
        lambda a: (rnp.sin(lax.all_gather(a, "i")) * lax.psum(a, "i")).sum()
        + (lax.ppermute(a, "i", [(0, 1), (1, 2), (2, 3), (3, 0)]) * a).sum(),
        axis_name="i")(v).sum())(full)
    np.testing.assert_allclose(np.concatenate(outs), np.asarray(want), rtol=1e-4, atol=1e-5)
    # what each rank sees of the job
    seen = two_ranks.run(lambda r: (remat.process_index(), remat.process_count(),
                                    [d.id for d in remat.local_devices()],
                                    remat.device_count()))
    assert seen == [(0, 2, [0, 1], 4), (1, 2, [2, 3], 4)]


def test_device_count_from_xla_flags_and_bad_config(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_foo=1 --xla_force_host_platform_device_count=3")
    assert remat.local_device_count() == 3 and remat.devices()[2].id == 2
    with config.override("remat_num_cpu_devices", 2):  # the config wins over XLA_FLAGS
        assert remat.device_count() == 2
    with pytest.raises(ValueError, match="positive integer"):
        config.update("remat_num_cpu_devices", 0)
    monkeypatch.delenv("XLA_FLAGS")
    assert remat.device_count() == 1


def test_pmap_over_given_devices(four_devices):
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    out = remat.pmap(lambda v: lax.psum(v, "i"), "i", devices=remat.devices()[:2])(x)
    np.testing.assert_allclose(np.asarray(out), np.broadcast_to(x.sum(0), (2, 3)))
    with pytest.raises(ValueError, match="requires 3 logical devices, but only 2"):
        remat.pmap(lambda v: v, devices=remat.devices()[:2])(np.ones((3, 1)))


def test_inline_pmap_traces_once_per_function(four_devices):
    traces = []

    def f(v):
        traces.append(1)
        return lax.psum(v, "i")

    x = np.ones((4, 2), np.float32)
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(remat.pmap(f, "i")(x)), 4.0)
    assert len(traces) == 1
    remat.pmap(f, "i")(np.ones((2, 2), np.float32))  # another size: traced again
    assert len(traces) == 2


def test_pytree_axes_cache_and_lower(four_devices):
    # equinox's filter_pmap passes its arguments' axes as a pytree of lists and dicts, and
    # lowers its pmap ahead of time
    traces = []

    def f(d, v):
        traces.append(1)
        return {"s": lax.psum(d["a"] * 2, "i") + v[0]}

    g = remat.pmap(f, "i", in_axes=({"a": 0}, [None]))
    x, v = {"a": np.arange(8.0, dtype=np.float32).reshape(4, 2)}, [np.float32(1)]
    want = np.arange(8.0).reshape(4, 2).sum(0) * 2 + 1
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(g(x, v)["s"]), np.broadcast_to(want, (4, 2)))
    assert len(traces) == 1
    lowered = g.lower(x, v)
    assert "reduce_sum" in lowered.as_text() or "psum" in lowered.as_text()
    np.testing.assert_allclose(np.asarray(lowered.compile()(x, v)["s"]),
                               np.broadcast_to(want, (4, 2)))
    assert len(traces) == 1


def test_transformations_keep_the_functions_attributes():
    class Scaled:
        """Multiplies by its factor."""

        def __init__(self, k):
            self.factor = k

        def __call__(self, x):
            return x * self.factor

    f = remat.vmap(Scaled(3.0))
    assert f.factor == 3.0 and f.__wrapped__.factor == 3.0
    assert f.__doc__ == "Multiplies by its factor."
    np.testing.assert_allclose(np.asarray(f(np.ones((2, 3), np.float32))), 3.0)
    for transform in (remat.grad, remat.value_and_grad, remat.jacfwd, remat.jacrev):
        g = transform(Scaled(2.0))
        assert g.__wrapped__.factor == 2.0 and g.factor == 2.0, transform


def test_transformations_of_objects_with_odd_names_still_wrap():
    class Named:
        __name__ = property(lambda self: 3)  # (not a string: cannot be copied)

        def __call__(self, x):
            return x * 2

    f = Named()
    assert remat.vmap(f).__wrapped__ is f and remat.grad(f).__wrapped__ is f
    assert float(remat.grad(f)(1.0)) == 2.0
