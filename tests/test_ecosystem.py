"""The JAX ecosystem on remat: the public names libraries need (``remat.typing``,
``remat.sharding``, ``remat.flatten_util``, ``remat.experimental.checkify``, ``remat.extend``,
``remat.interpreters.mlir``, the ``remat._src`` compatibility modules, ``remat.jax_alias``),
each against JAX; then optax, chex, equinox, flax and diffrax programs run with ``jax``
aliased to remat (in a subprocess) against the same programs under JAX."""

import importlib.util
import json
import os
import subprocess
import sys

import jax
import jax.experimental.layout
import jax.extend.core
import jax.flatten_util
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.experimental import checkify as jcheckify

import remat
import remat.jax_alias
import remat.numpy as jnp
from remat import lax
from remat.experimental import checkify
from remat.experimental.layout import Format, Layout, with_layout_constraint
from remat.extend import linear_util as lu
from remat.extend import source_info_util
from remat.extend.core import ClosedJaxpr, Primitive, mapped_aval, unmapped_aval
from remat.flatten_util import ravel_pytree
from remat.interpreters import ad, batching, mlir
from remat.sharding import (
    AbstractMesh,
    AxisType,
    Mesh,
    NamedSharding,
    PartitionSpec,
    Sharding,
    SingleDeviceSharding,
)
from remat.test_util import check_grads
from remat.typing import ArrayLike, DTypeLike

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import ecosystem_programs  # noqa: E402, I001 - the programs live beside this file


# --- remat.typing, remat.Device ----------------------------------------------------------------


def test_typing_array_like_matches_jax():
    values = [jnp.ones(2), np.ones(2), np.float32(1), np.bool_(True), 1, 2.5, True, 1j]
    for v in values:
        assert isinstance(v, ArrayLike), v
        assert isinstance(np.asarray(v) if isinstance(v, jnp.ndarray) else v,
                          jax.typing.ArrayLike), v
    for v in [[1, 2], "x", None, (1.0,)]:
        assert not isinstance(v, ArrayLike) and not isinstance(v, jax.typing.ArrayLike), v
    seen = []
    remat.jit(lambda x: seen.append(isinstance(x, ArrayLike)) or x)(jnp.ones(2))
    assert seen == [True]  # a tracer is array-like, as JAX's are jax.Array


def test_typing_dtype_like_matches_jax():
    # an annotation only, as JAX's (``type[Any]`` in a Union cannot be checked at run time)
    names = [getattr(a, "__name__", str(a)) for a in DTypeLike.__args__]
    assert names == [getattr(a, "__name__", str(a)) for a in jax.typing.DTypeLike.__args__]
    for union in (DTypeLike, jax.typing.DTypeLike):
        with pytest.raises(TypeError):
            isinstance(np.float32, union)
    from remat.typing import SupportsDType

    assert isinstance(jnp.float32, SupportsDType) and isinstance(jnp.ones(2), SupportsDType)


def test_device_type():
    (device,) = remat.devices()
    assert isinstance(device, remat.Device)
    assert (device.platform, device.id, repr(device)) == ("cpu", 0, repr(jax.devices()[0]))


# --- remat.sharding ----------------------------------------------------------------------------


def test_partition_spec_matches_jax():
    P, JP = PartitionSpec, jax.sharding.PartitionSpec
    for args in [("x", None), ("x",), (), (("x", "y"), None)]:
        assert repr(P(*args)) == repr(JP(*args))
        assert list(P(*args)) == list(JP(*args)) and len(P(*args)) == len(JP(*args))
    assert (P("x", None) == P("x")) == (JP("x", None) == JP("x")) == False  # noqa: E712
    assert P("x", None) == P("x", None) and hash(P("x", None)) == hash(P("x", None))
    assert P("x") != P("y") and P("x")[0:1] == P("x")
    with pytest.raises(TypeError, match="PartitionSpec entries"):
        P(3)


def test_mesh_and_named_sharding_on_one_device():
    mesh = Mesh(np.array(remat.devices()), ("x",))
    jmesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    assert repr(mesh) == repr(jmesh)
    assert (mesh.shape, mesh.axis_names, mesh.size, mesh.axis_types) == (
        dict(jmesh.shape), jmesh.axis_names, jmesh.size, jmesh.axis_types.__class__(
            AxisType[t.name] for t in jmesh.axis_types))
    s = NamedSharding(mesh, PartitionSpec("x"))
    js = jax.sharding.NamedSharding(jmesh, jax.sharding.PartitionSpec("x"))
    assert s.shard_shape((4, 3)) == js.shard_shape((4, 3)) == (4, 3)
    assert (s.num_devices, s.is_fully_replicated) == (js.num_devices, js.is_fully_replicated)
    assert s.device_set == set(remat.devices()) and isinstance(s, Sharding)
    assert isinstance(jnp.ones(2).sharding, Sharding)
    assert isinstance(jnp.ones(2).sharding, SingleDeviceSharding)
    with pytest.raises(ValueError, match="not found in mesh"):
        NamedSharding(mesh, PartitionSpec("y"))
    with pytest.raises(ValueError, match="one device"):
        Mesh(np.array(remat.devices() * 2), ("x",))
    with pytest.raises(ValueError, match="ndim"):
        Mesh(np.array(remat.devices()), ("x", "y"))


def test_mesh_context_and_reshard():
    assert remat.sharding.get_abstract_mesh().empty and remat.sharding.get_mesh() is None
    assert jax.sharding.get_abstract_mesh().empty
    x = jnp.arange(3.0)
    with pytest.raises(ValueError, match="not under a mesh context"):
        remat.sharding.reshard(x, PartitionSpec())
    with pytest.raises(ValueError, match="not under a mesh context"):
        jax.sharding.reshard(jjnp.arange(3.0), jax.sharding.PartitionSpec())
    mesh = Mesh(np.array(remat.devices()), ("x",), axis_types=(AxisType.Explicit,))
    with remat.sharding.set_mesh(mesh):
        assert remat.sharding.get_mesh() is mesh
        assert remat.sharding.get_abstract_mesh() == AbstractMesh(
            (1,), ("x",), axis_types=(AxisType.Explicit,))
        np.testing.assert_array_equal(remat.sharding.reshard(x, PartitionSpec("x")), x)
    assert remat.sharding.get_mesh() is None
    f = remat.sharding.explicit_axes(lambda x: x * 2, axes="x")
    np.testing.assert_array_equal(f(x), 2 * np.arange(3.0))


# --- remat.flatten_util ------------------------------------------------------------------------


TREES = [{"a": np.float32(1.5), "b": np.ones((2, 3), np.float32)},
         [np.arange(3, dtype=np.int32), np.ones(2, np.float32)],
         ((np.arange(4, dtype=np.int32).reshape(2, 2),), {"c": np.int32(7)}),
         {"x": np.ones(3, np.float16), "y": np.ones(1, np.float32)}]


@pytest.mark.parametrize("tree", TREES)
def test_ravel_pytree_matches_jax(tree):
    flat, unravel = ravel_pytree(remat.tree.map(jnp.asarray, tree))
    jflat, junravel = jax.flatten_util.ravel_pytree(jax.tree.map(jjnp.asarray, tree))
    assert flat.dtype == jflat.dtype and flat.shape == jflat.shape
    np.testing.assert_array_equal(flat, jflat)
    back, jback = unravel(flat), junravel(jflat)
    assert remat.tree.structure(back) == remat.tree.structure(tree)
    for a, b in zip(remat.tree.leaves(back), jax.tree.leaves(jback)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_ravel_pytree_empty_and_errors():
    flat, unravel = ravel_pytree({})
    jflat, _ = jax.flatten_util.ravel_pytree({})
    assert flat.shape == jflat.shape == (0,) and flat.dtype == jflat.dtype == np.float32
    assert unravel(flat) == {}
    _, unravel = ravel_pytree([jnp.ones(2, np.int32), jnp.ones(1, np.float32)])
    with pytest.raises(TypeError, match="expected dtype float32"):
        unravel(jnp.ones(3, np.int32))
    _, same = ravel_pytree([jnp.ones(2, np.int32), jnp.ones(1, np.float32)])
    assert unravel == same and hash(unravel) == hash(same)


def test_ravel_pytree_under_transformations():
    tree = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(2)}
    flat, unravel = ravel_pytree(tree)

    def f(v):
        t = unravel(v)
        return jnp.sum(jnp.sin(t["w"]) * 2.0) + jnp.sum(t["b"] ** 2)

    check_grads(f, (flat,), order=2)
    np.testing.assert_allclose(remat.jit(f)(flat), f(flat), rtol=1e-6)
    batch = jnp.stack([flat, flat * 2, flat - 1])
    np.testing.assert_allclose(remat.vmap(f)(batch), [f(v) for v in batch], rtol=1e-6)
    g = remat.jit(lambda t: ravel_pytree(t)[0])(tree)
    np.testing.assert_array_equal(g, flat)


# --- tree and vectorize additions libraries use ------------------------------------------------


def test_tree_and_vectorize_names_libraries_use():
    tree = {"a": 1, "b": (2, 3)}
    assert remat.tree.reduce(lambda a, b: a + b, tree, initializer=10) == \
        jax.tree.reduce(lambda a, b: a + b, tree, initializer=10) == 16
    assert remat.tree_util.tree_all([True, (1, 2)]) and not remat.tree_util.tree_all([0, 1])
    dot = jnp.vectorize(lambda a, b: jnp.sum(a * b), signature="(n),(n)->()")
    jdot = jjnp.vectorize(lambda a, b: jjnp.sum(a * b), signature="(n),(n)->()")
    a, b = np.arange(6.0).reshape(2, 3), np.arange(3.0)
    np.testing.assert_allclose(dot(a, b), jdot(a, b))


# --- checkify ----------------------------------------------------------------------------------


def _positive_log(ck, np_):
    def f(x):
        ck.check(x > 0, "x must be positive, got {x}", x=x)
        return np_.log(x)
    return f


@pytest.mark.parametrize("value", [-1.0, 2.0])
def test_checkify_user_check_matches_jax(value):
    err, out = checkify.checkify(_positive_log(checkify, jnp))(jnp.float32(value))
    jerr, jout = jcheckify.checkify(_positive_log(jcheckify, jjnp))(jjnp.float32(value))
    assert err.get() == jerr.get()
    np.testing.assert_allclose(out, jout)
    err, out = remat.jit(checkify.checkify(_positive_log(checkify, jnp)))(jnp.float32(value))
    assert err.get() == jerr.get()
    if value < 0:
        assert err.get() == "x must be positive, got -1.0 (`check` failed)"
        assert isinstance(err.get_exception(), checkify.FailedCheckError)
        with pytest.raises(checkify.JaxRuntimeError, match="must be positive"):
            err.throw()
        assert issubclass(checkify.JaxRuntimeError, ValueError)
    else:
        assert err.get() is None and err.get_exception() is None
        err.throw()


def test_check_outside_checkify():
    f = _positive_log(checkify, jnp)
    with pytest.raises(checkify.JaxRuntimeError, match="must be positive"):
        f(jnp.float32(-1.0))  # eagerly: raises at once, as JAX's
    assert float(f(jnp.float32(1.0))) == 0.0
    with pytest.raises(ValueError, match="not functionalized"):
        remat.jit(f)(jnp.float32(1.0))
    with pytest.raises(TypeError, match="scalar pred"):
        checkify.check(jnp.array([True, False]), "arr")
    with pytest.raises(TypeError, match="PyTrees of arrays"):
        checkify.check(jnp.bool_(True), "{}", 1.0)
    # debug_check does nothing outside checkify, staged or not
    remat.jit(lambda x: (checkify.debug_check(x > 0, "neg"), x)[1])(jnp.float32(-1.0))


AUTOMATIC = [
    ("nan", lambda np_: lambda x: np_.log(x) * 0 + x, jnp.float32(-1.0)),
    ("div", lambda np_: lambda x: x / (x - x), jnp.float32(1.0)),
    ("idiv", lambda np_: lambda x: x // (x - x), jnp.int32(3)),
    ("index", lambda np_: lambda x, i: x[i], (jnp.ones(3), 7)),
    ("dynamic_slice", None, (jnp.ones(3), 7)),
    ("scatter", lambda np_: lambda x, i: x.at[i].set(1.0), (jnp.ones(3), 7)),
    ("gather", lambda np_: lambda x, i: x[np_.array([0, i])], (jnp.ones((3, 2)), 4)),
    ("ok", lambda np_: lambda x: np_.sin(x) / 2, jnp.float32(1.0)),
]


@pytest.mark.parametrize("name,make,args", AUTOMATIC, ids=[a[0] for a in AUTOMATIC])
def test_checkify_automatic_checks_match_jax(name, make, args):
    args = args if isinstance(args, tuple) else (args,)
    if make is None:
        f = lambda x, i: lax.dynamic_slice(x, (i,), (2,))  # noqa: E731
        jf = lambda x, i: jax.lax.dynamic_slice(x, (i,), (2,))  # noqa: E731
    else:
        f, jf = make(jnp), make(jjnp)
    jargs = [jjnp.asarray(np.asarray(a)) if hasattr(a, "shape") else a for a in args]
    err, out = checkify.checkify(f, errors=checkify.all_checks)(*args)
    jerr, jout = jcheckify.checkify(jf, errors=jcheckify.all_checks)(*jargs)
    assert err.get() == jerr.get()
    if jerr.get() is None:  # after a failure the value is unspecified
        np.testing.assert_allclose(np.asarray(out, np.float64), np.asarray(jout, np.float64))
    err, _ = remat.jit(checkify.checkify(f, errors=checkify.all_checks))(*args)
    assert err.get() == jerr.get()
    err, _ = checkify.checkify(f)(*args)  # user checks only: nothing automatic
    assert err.get() is None


def test_checkify_through_control_flow_matches_jax():
    def cond_fn(ck, lax_):
        return lambda x: lax_.cond(x > 0, lambda x: x, lambda x: (
            ck.check(x > -5, "too small {}", x), x)[1], x)

    def scan_fn(ck, lax_):
        def body(c, x):
            ck.check(x < 3, "big {}", x)
            return c + x, c
        return lambda xs: lax_.scan(body, 0.0, xs)

    def while_fn(ck, lax_):
        def body(c):
            ck.check(c < 4, "c reached {}", c)
            return c + 1
        return lambda x: lax_.while_loop(lambda c: c < 10, body, x)

    cases = [(cond_fn, np.float32(-6)), (cond_fn, np.float32(-1)), (cond_fn, np.float32(2)),
             (scan_fn, np.arange(5, dtype=np.float32)), (scan_fn, np.arange(3, dtype=np.float32)),
             (while_fn, np.float32(0)), (while_fn, np.float32(5))]
    for make, x in cases:
        err, out = checkify.checkify(make(checkify, lax))(jnp.asarray(x))
        jerr, jout = jcheckify.checkify(make(jcheckify, jax.lax))(jjnp.asarray(x))
        assert err.get() == jerr.get(), (make.__name__, x)
        for a, b in zip(remat.tree.leaves(out), jax.tree.leaves(jout)):
            np.testing.assert_allclose(a, b)


def test_checkify_with_grad_vmap_and_check_error():
    f = _positive_log(checkify, jnp)
    jf = _positive_log(jcheckify, jjnp)
    err, g = checkify.checkify(remat.grad(f))(jnp.float32(-1.0))
    jerr, jg = jcheckify.checkify(jax.grad(jf))(jjnp.float32(-1.0))
    assert err.get() == jerr.get()
    err, g = checkify.checkify(remat.grad(f))(jnp.float32(2.0))
    assert err.get() is None and float(g) == pytest.approx(0.5)
    xs = np.array([1.0, -1.0, -2.0], np.float32)
    err, _ = remat.vmap(checkify.checkify(f))(jnp.asarray(xs))
    jerr, _ = jax.vmap(jcheckify.checkify(jf))(jjnp.asarray(xs))
    assert err.get() == jerr.get()  # 'at mapped index 1: ...' lines
    err, out = checkify.checkify(remat.vmap(f))(jnp.asarray(xs))
    assert err.get() == "x must be positive, got -1.0 (`check` failed)"  # the first failure
    first, _ = checkify.checkify(f)(jnp.float32(-3.0))
    err, out = checkify.checkify(lambda x: (checkify.check_error(first), x * 2)[1])(1.0)
    assert err.get() == first.get() and float(out) == 2.0
    with pytest.raises(checkify.JaxRuntimeError, match="got -3.0"):
        checkify.check_error(first)
    checkify.check_error(checkify.init_error)
    assert remat.tree.leaves(checkify.init_error) == jax.tree.leaves(jcheckify.init_error) == []
    with pytest.raises(TypeError, match="error categories"):
        checkify.checkify(f, errors={"nan"})


# --- remat.extend, remat.interpreters.mlir -------------------------------------------------------


def _cube_primitive():
    """A new primitive defined as in JAX's docs: impl on Arrays, abstract eval, JVP,
    batching, and a lowering as a function (what ``jit`` runs for it)."""
    cube_p = Primitive("test_cube")
    cube_p.def_impl(lambda x: jnp.multiply(x, jnp.multiply(x, x)))
    cube_p.def_abstract_eval(lambda aval: aval)
    ad.primitive_jvps[cube_p] = lambda primals, tangents: (
        cube_p.bind(primals[0]), 3.0 * primals[0] ** 2 * tangents[0])
    batching.primitive_batchers[cube_p] = lambda vals, dims: (cube_p.bind(vals[0]), dims[0])
    mlir.register_lowering(cube_p, mlir.lower_fun(lambda x: x * x * x, multiple_results=False))
    return cube_p


def test_extend_primitive_through_transformations():
    cube_p = _cube_primitive()
    assert cube_p in mlir.lowerings
    x = jnp.arange(1.0, 4.0)
    np.testing.assert_allclose(cube_p.bind(x), np.arange(1.0, 4.0) ** 3)
    np.testing.assert_allclose(remat.jit(cube_p.bind)(x), np.arange(1.0, 4.0) ** 3)
    np.testing.assert_allclose(remat.grad(lambda x: cube_p.bind(x).sum())(x),
                               3 * np.arange(1.0, 4.0) ** 2)
    np.testing.assert_allclose(remat.vmap(cube_p.bind)(x[:, None]), (x ** 3)[:, None])
    check_grads(lambda x: cube_p.bind(x), (x,), order=1, modes=("fwd",))
    jaxpr = remat.make_jaxpr(cube_p.bind)(x)
    assert isinstance(jaxpr, ClosedJaxpr) and jaxpr.eqns[0].primitive is cube_p


def _counted_primitive(name, lowered):
    """A primitive whose impl counts its calls, lowered as the function ``lowered``."""
    calls = []
    prim = Primitive(name)
    prim.def_impl(lambda x, *, k: calls.append(1) or jnp.sin(x) * k)
    prim.def_abstract_eval(lambda aval, *, k: aval)
    ad.primitive_jvps[prim] = lambda primals, tangents, *, k: (
        prim.bind(primals[0], k=k), jnp.cos(primals[0]) * k * tangents[0])
    batching.primitive_batchers[prim] = lambda vals, dims, *, k: (prim.bind(vals[0], k=k),
                                                                 dims[0])
    mlir.register_lowering(prim, mlir.lower_fun(lowered, multiple_results=False))
    return prim, calls


def test_a_primitive_lowered_as_a_function_runs_that_function_under_jit():
    """As XLA does, a ``jit`` plan runs a ``lower_fun`` lowering's trace in place of the
    primitive (equinox's primitives in diffrax's solver loops cost their impl's dispatch on
    every step otherwise); eagerly the impl runs. Values agree either way."""
    prim, calls = _counted_primitive("test_sin_k", lambda x, *, k: jnp.sin(x) * k)
    x = jnp.linspace(0.1, 1.0, 4)

    def loop(x):
        return lax.fori_loop(0, 20, lambda i, c: prim.bind(c, k=0.9), x)

    np.testing.assert_allclose(prim.bind(x, k=0.9), np.sin(np.asarray(x)) * 0.9, rtol=1e-6)
    assert len(calls) == 1  # eagerly, the impl
    expected = np.asarray(x)
    for _ in range(20):
        expected = np.sin(expected) * np.float32(0.9)
    np.testing.assert_allclose(loop(x), expected, rtol=1e-5)  # a loop runs as a plan
    np.testing.assert_allclose(remat.jit(loop)(x), expected, rtol=1e-5)
    np.testing.assert_allclose(remat.jit(remat.vmap(loop))(x[:, None]), expected[:, None],
                               rtol=1e-5)
    g = remat.jit(remat.grad(lambda x: loop(x).sum()))(x)
    fd = (np.asarray(loop(x + 1e-3)) - np.asarray(loop(x - 1e-3))) / 2e-3
    np.testing.assert_allclose(g, fd, rtol=1e-2)
    assert len(calls) == 1


def test_rules_receive_tuples_a_vmap_in_axes_prefix_of_their_operands():
    """As JAX's ``unzip2`` gives them, JVP and batching rules receive tuples. equinox's vprim
    vmaps its impl and JVP with ``in_axes=(batch_dims, tangent_dims)`` over
    ``(primals, tangents)``: a list where the operands are a tuple is no tree prefix."""
    prim = Primitive("test_vprim_like")
    prim.def_impl(lambda x: jnp.sin(x))
    prim.def_abstract_eval(lambda aval: aval)
    seen = []

    def jvp(primals, tangents):
        seen.append((type(primals), type(tangents)))
        return remat.vmap(lambda p, t: (jnp.sin(p[0]), jnp.cos(p[0]) * t[0]),
                          in_axes=((0,), (0,)))(primals, tangents)

    def batch(vals, dims):
        seen.append((type(vals), type(dims)))
        return remat.vmap(lambda v: jnp.sin(v[0]), in_axes=(tuple(dims),))(vals), 0

    ad.primitive_jvps[prim] = jvp
    batching.primitive_batchers[prim] = batch
    x = jnp.linspace(0.1, 1.0, 3)
    np.testing.assert_allclose(remat.vmap(prim.bind)(x), np.sin(np.asarray(x)), rtol=1e-6)
    _, t = remat.jvp(prim.bind, (x,), (jnp.ones(3),))
    np.testing.assert_allclose(t, np.cos(np.asarray(x)), rtol=1e-6)
    assert set(seen) == {(tuple, tuple)}


def test_a_lowering_whose_trace_holds_constants_leaves_the_impl_to_run():
    """A lowering that traces to a jaxpr with constants is not inlined; the impl runs."""
    table = np.linspace(1.0, 2.0, 4).astype(np.float32)
    prim, calls = _counted_primitive(
        "test_sin_table", lambda x, *, k: jnp.sin(x) * k * jnp.asarray(table) / table)
    x = jnp.linspace(0.1, 1.0, 4)
    out = remat.jit(lambda x: prim.bind(x, k=2.0))(x)
    np.testing.assert_allclose(out, np.sin(np.asarray(x)) * 2.0, rtol=1e-6)
    assert len(calls) == 1


def test_extend_core_helpers():
    aval = remat.core.ShapedArray((4, 3), np.float32)
    javal = jax.core.ShapedArray((4, 3), np.float32)
    assert mapped_aval(4, 0, aval).shape == jax.extend.core.mapped_aval(4, 0, javal).shape
    assert unmapped_aval(5, 1, aval).shape == jax.extend.core.unmapped_aval(5, 1, javal).shape
    from remat.extend import core as ecore

    assert ecore.primitives.sin_p is lax.sin_p
    assert ecore.primal_dtype_to_tangent_dtype(np.int32) == \
        jax.extend.core.primal_dtype_to_tangent_dtype(np.int32)
    assert ecore.valid_jaxtype(np.float32(1)) and not ecore.valid_jaxtype("x")
    state = ecore.get_opaque_trace_state()
    seen = []
    remat.jit(lambda x: seen.append(ecore.get_opaque_trace_state() == state) or x)(1.0)
    assert seen == [False] and ecore.get_opaque_trace_state() == state
    seen = []
    remat.jit(lambda x: seen.append(ecore.unsafe_am_i_under_a_jit_DO_NOT_USE()) or x)(1.0)
    assert seen == [True] and not ecore.unsafe_am_i_under_a_jit_DO_NOT_USE()


def test_linear_util_transformations():
    def add(x, y):
        return x + y

    def scale(k, *args):
        out = yield args, {}
        yield out * k

    wrapped = lu.transformation(scale, lu.wrap_init(add), 3)
    assert wrapped.call_wrapped(1, 2) == 9
    assert wrapped == lu.transformation(scale, lu.wrap_init(add), 3)
    assert hash(wrapped) == hash(lu.transformation(scale, lu.wrap_init(add), 3))

    def with_aux(*args):
        out = yield args, {}
        yield out, "aux"

    wrapped, aux = lu.transformation_with_aux(with_aux, lu.wrap_init(add))
    with pytest.raises(lu.StoreException):
        aux()
    assert wrapped.call_wrapped(1, 2) == 3 and aux() == "aux"
    assert lu.transformation2(lambda f, k, *a: f(*a) * k, lu.wrap_init(add), 10).call_wrapped(
        1, 2) == 30
    calls = []

    @lu.cache
    def traced(fun, n):
        calls.append(n)
        return fun.call_wrapped(n, n)

    fun = lu.wrap_init(add)
    assert traced(fun, 2) == traced(fun, 2) == 4 and calls == [2]


def test_source_info_util():
    with source_info_util.extend_name_stack("outer"):
        stack = source_info_util.current_name_stack()
        assert str(stack) == "outer" and stack.extend("inner").wrap_name("f") == "outer/inner/f"
    assert source_info_util.current().file == __file__


# --- remat._src, layout -------------------------------------------------------------------------


def test_src_compat_modules():
    from remat._src import ad_util, dispatch, traceback_util
    from remat._src.tree_util import _registry

    assert ad_util.stop_gradient_p is lax.stop_gradient_p
    assert dispatch.wait_for_tokens() is None
    frame = sys._getframe()
    assert traceback_util.include_frame(frame)
    traceback_util.register_exclusion(HERE)
    try:
        assert not traceback_util.include_frame(frame)
    finally:
        traceback_util._exclude_paths.remove(HERE)
    assert traceback_util.api_boundary(lambda x: x + 1)(1) == 2
    assert list in _registry and dict in _registry and int not in _registry


def test_layout():
    layout, jlayout = Layout((1, 0)), jax.experimental.layout.Layout((1, 0))
    assert repr(layout) == repr(jlayout)
    assert repr(Format(Layout.AUTO)) == repr(jax.experimental.layout.Format(
        jax.experimental.layout.Layout.AUTO))
    x = jnp.ones((2, 3))
    np.testing.assert_array_equal(remat.jit(lambda x: with_layout_constraint(x, layout))(x), x)
    with pytest.raises(ValueError, match="rank"):
        with_layout_constraint(x, Layout((0,)))


# --- the alias and the libraries -----------------------------------------------------------------


def _run_aliased(code_or_program, *, program=True, timeout=180):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = ([sys.executable, os.path.join(HERE, "ecosystem_programs.py"), code_or_program,
            "--remat"] if program else [sys.executable, "-c", code_or_program])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_xla_bridge_reachable_from_jax_and_device_count_settable_late():
    # chex's set_n_cpu_devices: ``jax._src.xla_bridge._backends`` (no module import) says
    # whether the device count is fixed yet; JAX's table is empty until a computation runs,
    # remat's always is (its devices follow XLA_FLAGS at each call)
    code = """
import os
{setup}
import jax
assert jax._src.xla_bridge._backends == {{}}
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=3"
print(len(jax.devices()), len(jax._src.xla_bridge.devices()))
"""
    out = _run_aliased(code.format(setup="import remat.jax_alias; remat.jax_alias.install()"),
                       program=False)
    assert out.split() == _run_aliased(code.format(setup=""), program=False).split() == ["3", "3"]


def test_jax_alias():
    with pytest.raises(RuntimeError, match="already imported"):
        remat.jax_alias.install()  # this process imported the real JAX: no mixing
    out = _run_aliased("""
import remat, remat.jax_alias
remat.jax_alias.install()
import jax, jax.numpy, jax.extend.core
from jax.experimental import checkify
assert jax.numpy is remat.numpy and jax.Array is remat.Array
assert jax.extend.core.Primitive is remat.extend.core.Primitive
assert jax.__version__ == remat.jax_alias.JAX_API_VERSION
assert jax.version.__version_info__ >= (0, 10)
assert remat.numpy.__spec__.name == 'remat.numpy'
jax.jit = None  # set on the alias module: remat itself keeps its jit
assert callable(remat.jit)
remat.jax_alias.uninstall()
import jax as real
assert real is not remat and 'remat' not in real.__file__
print('ok')
""", program=False)
    assert out.strip() == "ok"


def test_ecosystem_guide_runs():
    """docs/ecosystem.md's code blocks, in order, in a fresh process (the alias needs one)."""
    import re

    with open(os.path.join(ROOT, "docs", "ecosystem.md")) as fh:
        blocks = re.findall(r"```python\n(.*?)```", fh.read(), flags=re.S)
    assert blocks
    if importlib.util.find_spec("optax") is None:
        pytest.skip("optax is not installed")
    out = _run_aliased("\n".join(blocks), program=False)
    assert "from the argument" in out and "loss " in out


def _compare(remat_out, jax_out, rtol, atol, path="out"):
    if isinstance(jax_out, dict):
        assert sorted(remat_out) == sorted(jax_out), path
        for k in jax_out:
            _compare(remat_out[k], jax_out[k], rtol, atol, f"{path}.{k}")
    elif isinstance(jax_out, list) and jax_out and isinstance(jax_out[0], str | dict | list) \
            and not all(isinstance(v, int | float) for v in np.ravel(np.asarray(jax_out,
                                                                               dtype=object))):
        assert len(remat_out) == len(jax_out), path
        for i, (a, b) in enumerate(zip(remat_out, jax_out)):
            _compare(a, b, rtol, atol, f"{path}[{i}]")
    elif isinstance(jax_out, str | bool) or jax_out is None:
        assert remat_out == jax_out, path
    else:
        np.testing.assert_allclose(np.asarray(remat_out, np.float64),
                                   np.asarray(jax_out, np.float64), rtol=rtol, atol=atol,
                                   err_msg=path)


# The programs remat runs today, unchanged (see docs/ecosystem.md, "Where each library
# stands").
EXPECTED_TO_RUN = {"optax_training", "chex_probes", "equinox_mlp", "flax_linen", "diffrax_solve",
                   "diffrax_grad"}


@pytest.mark.parametrize("name", sorted(ecosystem_programs.PROGRAMS))
def test_library_program_matches_jax(name):
    library, program = ecosystem_programs.PROGRAMS[name]
    if importlib.util.find_spec(library) is None:
        pytest.skip(f"{library} is not installed")
    result = json.loads(_run_aliased(name).strip().splitlines()[-1])
    if "error" in result:
        if name in EXPECTED_TO_RUN:
            pytest.fail(f"{library} on remat: {result['error']}")
        pytest.xfail(f"{library} on remat is blocked: {result['error']}")
    _compare(result["out"], program(), rtol=2e-5, atol=2e-6)
