"""The device API for remat's one CPU device, the Array placement attributes, and the other
top-level runtime names (config contexts, typeof, linear_transpose ...), against JAX."""

import os
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat.config import config
from remat.test_util import check_grads

jax = pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_devices_and_counts_match_jax():
    for name in ("devices", "local_devices"):
        assert repr(getattr(remat, name)()) == repr(getattr(jax, name)())
    for name in ("device_count", "local_device_count", "process_index", "process_count",
                 "default_backend", "process_indices"):
        assert getattr(remat, name)() == getattr(jax, name)()
    with pytest.raises(RuntimeError, match="Unknown backend: 'gpu'"):
        remat.devices("gpu")
    assert remat.devices("cpu") == remat.devices()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert (remat.host_id(), remat.host_count(), remat.host_ids()) == (0, 1, [0])
    assert len(caught) == 3 and "renamed" in str(caught[0].message)


def test_device_object():
    device = remat.devices()[0]
    jdevice = jax.devices()[0]
    for attr in ("platform", "device_kind", "id", "process_index"):
        assert getattr(device, attr) == getattr(jdevice, attr)
    assert repr(device) == repr(jdevice) == "CpuDevice(id=0)" and str(device) == str(jdevice)
    assert pickle.loads(pickle.dumps(device)) is device
    x = jnp.arange(1000.0)
    assert device.memory_stats()["bytes_in_use"] >= x.nbytes


def test_array_placement_attributes_match_jax():
    x, jx = jnp.ones(3), jax.numpy.ones(3)
    assert repr(x.sharding) == repr(jx.sharding)
    assert x.device is remat.devices()[0] and x.devices() == {x.device}
    for attr in ("is_fully_replicated", "is_fully_addressable", "committed"):
        assert getattr(x, attr) == getattr(jx, attr)
    (shard,) = x.addressable_shards
    (jshard,) = jx.addressable_shards
    assert shard.index == jshard.index and shard.replica_id == jshard.replica_id
    assert shard.data is x and repr(shard.device) == repr(jshard.device)
    sharding = x.sharding
    assert sharding.shard_shape((3,)) == (3,) and sharding.num_devices == 1
    assert sharding.devices_indices_map((3, 2)) == {x.device: (slice(None), slice(None))}
    assert sharding.memory_kind == "device" and sharding == jnp.zeros(2).sharding
    assert x.unsafe_buffer_pointer() == np.asarray(x).ctypes.data
    assert x.copy_to_host_async() is None and remat.copy_to_host_async([x]) == [x]
    assert x.on_device_size_in_bytes() == 12 and x.addressable_data(0) is x


def test_live_arrays_and_effects_barrier():
    x = jnp.arange(5.0)
    live = remat.live_arrays()
    assert any(a is x for a in live)
    x.delete()
    assert not any(a is x for a in remat.live_arrays())
    assert remat.effects_barrier() is None
    info = remat.print_environment_info(return_string=True)
    assert f"remat:   {remat.__version__}" in info and "numpy:" in info


# --- other top-level names --------------------------------------------------------------------


def test_version_typeof_float0():
    assert remat.version.__version__ == remat.__version__
    assert remat.typeof(jnp.ones(3)) == remat.core.ShapedArray((3,), np.float32)
    assert remat.typeof(1.0).weak_type and remat.typeof(1.0).dtype == np.float32
    assert remat.float0 == jax.float0


def test_config_contexts_like_jax():
    assert remat.enable_x64.value is False
    with remat.enable_x64(True):
        assert config.enable_x64 and jnp.ones(1, np.float64).dtype == np.float64
    assert not config.enable_x64
    with remat.debug_nans():  # boolean flags default to True, as JAX's
        assert config.debug_nans
    with remat.checking_leaks():
        assert remat.check_tracer_leaks.value
    for name in ("numpy_dtype_promotion", "default_matmul_precision", "numpy_rank_promotion",
                 "default_prng_impl", "legacy_prng_key", "log_compiles", "explain_cache_misses",
                 "no_tracing", "no_execution", "threefry_partitionable"):
        assert getattr(remat, name).value == getattr(jax, name).value, name
    with pytest.raises(ValueError, match="not a valid value for jax_numpy_dtype_promotion"):
        with remat.numpy_dtype_promotion("bad"):
            pass
    with remat.default_matmul_precision("highest"), remat.transfer_guard("disallow"):
        assert config.default_matmul_precision == "highest"
        assert config.transfer_guard_host_to_device == "disallow"
    assert config.transfer_guard_host_to_device is None


def test_parse_flags_with_absl_reads_the_command_line_as_jax():
    # flax's test modules call it at import; each process parses once, so each runs apart
    code = ("import sys; import {lib} as jax; jax.config.parse_flags_with_absl(); "
            "c = jax.config; print(c.jax_enable_x64, c.jax_numpy_rank_promotion, "
            "c.jax_debug_nans, c.jax_debug_infs)")
    argv = ["--jax_enable_x64", "--jax_numpy_rank_promotion=warn", "--jax_no_such_flag=1",
            "--other", "--jax_debug_infs=false", "--", "--jax_debug_nans"]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    outs = [subprocess.run([sys.executable, "-c", code.format(lib=lib), *argv], env=env,
                           capture_output=True, text=True, timeout=120) for lib in ("remat", "jax")]
    assert outs[0].returncode == 0, outs[0].stderr[-2000:]
    assert outs[0].stdout == outs[1].stdout == "True warn False False\n"


def test_mesh_utils_as_jax_lays_out_cpu_devices():
    from jax.experimental import mesh_utils as jax_mesh_utils

    from remat.experimental import mesh_utils

    for fn, args, kwargs in [("create_device_mesh", ((1, 1),), {}),
                             ("create_device_mesh", ([1],), {}),
                             ("create_hybrid_device_mesh", ((1,), (1,)),
                              {"process_is_granule": True})]:
        got, want = getattr(mesh_utils, fn)(*args, **kwargs), getattr(jax_mesh_utils, fn)(
            *args, **kwargs)
        assert repr(got) == repr(want)
    for args, match in [(((2, 1),), r"Number of devices 1 must equal the product of "
                                    r"mesh_shape \(2, 1\)"),
                        ((("a", 1),), "should be a sequence of ints")]:
        for lib in (mesh_utils, jax_mesh_utils):
            with pytest.raises(ValueError, match=match):
                lib.create_device_mesh(*args)
    for lib in (mesh_utils, jax_mesh_utils):
        with pytest.raises(ValueError, match="does not have attribute slice_index"):
            lib.create_hybrid_device_mesh((1,), (1,))
    with config.override("remat_num_cpu_devices", 4):
        mesh = mesh_utils.create_device_mesh((2, 2))
        assert mesh.shape == (2, 2) and [d.id for d in mesh.flat] == [0, 1, 2, 3]
        mesh = mesh_utils.create_device_mesh((2, 1), remat.devices()[2:])
        assert [d.id for d in mesh.flat] == [2, 3]
        assert remat.sharding.Mesh(mesh_utils.create_device_mesh((4,)), ("x",)).size == 4


def test_debug_nans_and_infs_in_jit():
    with remat.debug_nans(True):
        with pytest.raises(FloatingPointError, match=r"invalid value \(nan\) encountered in log"):
            remat.jit(lambda x: jnp.log(x) * 2)(-1.0)
        assert float(remat.jit(jnp.log)(1.0)) == 0.0
    with remat.debug_infs(True):
        with pytest.raises(FloatingPointError, match=r"divide by zero \(inf\) encountered in "
                                                     r"div"):
            remat.jit(lambda x: 1.0 / x)(0.0)
    assert np.isnan(float(remat.jit(jnp.log)(-1.0)))  # off: no check


def test_no_tracing_no_execution_log_compiles(caplog):
    g = remat.jit(lambda x: x + 1)
    g(1.0)
    with remat.no_tracing(True):
        assert float(g(2.0)) == 3.0  # cached: no trace needed
        with pytest.raises(RuntimeError, match="'no_tracing' is set"):
            remat.jit(lambda x: x * 3)(1.0)
    with remat.no_execution(True):
        with pytest.raises(RuntimeError, match="no_execution config option is set"):
            g(1.0)
    with caplog.at_level("WARNING", logger="remat.jit"), remat.log_compiles(True):
        remat.jit(lambda x: x * 4)(1.0)
    assert "Finished tracing <lambda> for jit" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="remat.jit"), remat.explain_cache_misses(True):
        h = remat.jit(lambda x: x * 5)
        h(1.0)
        h(jnp.ones(2))
    assert "never seen" in caplog.text and "different input types: at x" in caplog.text


def test_make_user_context_retraces():
    context = remat.make_user_context(default_value=None)
    calls = []
    f = remat.jit(lambda x: calls.append(1) or x * 2)
    f(1.0)
    with context(1):
        f(1.0)
        f(2.0)
    with context(2):
        f(1.0)
    assert len(calls) == 3 and context.value is None


def test_named_scope_reaches_the_name_stack():
    with remat.named_scope("outer"):
        with remat.named_scope("inner"):
            eqn = remat.make_jaxpr(jnp.sin)(1.0).eqns[0]
    assert eqn.source_info.name_stack == ("outer", "inner")
    with pytest.raises(TypeError, match="must be a string"):
        remat.named_scope(3)


def test_jacobian_is_jacrev():
    fun = lambda x: jnp.sin(x) * x  # noqa: E731
    x = np.array([0.3, 1.2], np.float32)
    np.testing.assert_allclose(remat.jacobian(fun)(x),
                               jax.jacobian(lambda x: jax.numpy.sin(x) * x)(x), rtol=1e-6)


def test_linear_transpose_matches_jax():
    def fun(lib):
        return lambda x, y: (x * 2 + y, {"a": lib.numpy.sum(x)})

    x, y = np.ones(3, np.float32), np.float32(2)
    ours = remat.linear_transpose(fun(remat), x, y)
    theirs = jax.linear_transpose(fun(jax), x, y)
    ct = (np.arange(3, dtype=np.float32), {"a": np.float32(5)})
    for a, b in zip(ours(ct), theirs(ct)):
        np.testing.assert_allclose(a, b)
    # the transpose of a linear map is linear: its own transpose is the map again
    check_grads(lambda c: ours((c, {"a": np.float32(1)}))[0], (np.ones(3, np.float32),),
                order=1, modes=("fwd", "rev"))
    out = remat.jit(lambda t, c: t(c))(ours, ct)  # a pytree: passes through jit
    np.testing.assert_allclose(out[0], theirs(ct)[0])
    with pytest.raises(TypeError, match="cotangent tree does not match"):
        ours(1.0)
    with pytest.raises(TypeError, match="cotangent type does not match"):
        ours((np.ones(2, np.float32), {"a": np.float32(1)}))
    with pytest.raises(TypeError, match="linear_transpose only supports"):
        remat.linear_transpose(lambda x: x.astype(np.int32), 1.0)
    zero = remat.linear_transpose(lambda x: jnp.zeros(3), jnp.ones(3))(jnp.ones(3))
    assert zero[0].tolist() == [0.0, 0.0, 0.0]


def test_jax_num_cpu_devices_flag_and_jax_lib_version():
    """equinox's conftest sets JAX's ``jax_num_cpu_devices`` and its tests read
    ``jax.lib.__version__`` (issue 33): both exist, as in JAX; the flag gives the local CPU
    device count (-1: unset, as JAX's default)."""
    jax = pytest.importorskip("jax")
    assert config.jax_num_cpu_devices == jax.config.jax_num_cpu_devices == -1
    assert remat.local_device_count() == 1
    with config.override("jax_num_cpu_devices", 3):
        assert remat.local_device_count() == 3 and len(remat.devices()) == 3
        assert remat.pmap(lambda x: x * 2.0)(jnp.arange(3.0)).tolist() == [0.0, 2.0, 4.0]
    assert remat.local_device_count() == 1
    code = ("import remat.jax_alias; remat.jax_alias.install()\n"
            "import jax, jax.lib; print(jax.lib.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == jax.lib.__version__
