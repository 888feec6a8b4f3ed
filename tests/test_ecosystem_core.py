"""The core fixes JAX-ecosystem libraries needed (equinox, flax, diffrax), each against JAX:
tracers are ``remat.Array`` instances; ``named_scope`` decorates; the axis-taking batching
registry and ``PartialVal``; ``vmap`` of arguments with ``None`` subtrees; ``ShapeDtypeStruct``
with a sharding and as a dtype source; Python ints checked against the dtype asked for; and
``remat.interpreters.mlir`` reachable from the package."""

import functools
import os
import subprocess
import sys
import warnings

import jax
import jax.extend.core
import jax.interpreters.batching
import jax.interpreters.partial_eval
import jax.numpy as jjnp
import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat.extend.core import Primitive
from remat.interpreters import batching
from remat.interpreters.partial_eval import PartialVal
from remat.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- 1. a tracer is a remat.Array, as a JAX tracer is a jax.Array -------------------------------


def _array_checks(lib, np_):
    """What ``isinstance(., lib.Array)`` says inside each transformation (and for a token)."""
    seen = {}

    def probe(name):
        def f(x):
            seen[name] = isinstance(x, lib.Array) and isinstance(x, np_.ndarray)
            return x * 2.0
        return f

    lib.jit(probe("jit"))(1.0)
    lib.grad(probe("grad"))(1.0)
    lib.vmap(probe("vmap"))(np_.ones(2))
    lib.jvp(probe("jvp"), (1.0,), (1.0,))
    lib.make_jaxpr(probe("make_jaxpr"))(1.0)
    lib.grad(lib.checkpoint(probe("checkpoint")))(1.0)
    lib.lax.scan(lambda c, x: (probe("scan")(c), x), 1.0, np_.ones(2))

    def with_token(x):
        seen["token"] = isinstance(lib.lax.create_token(), lib.Array)
        return x

    lib.jit(with_token)(1.0)

    def with_ref(x):
        seen["ref"] = isinstance(lib.new_ref(x), lib.Array)
        return x

    lib.jit(with_ref)(np_.ones(2))
    seen["concrete"] = isinstance(np_.ones(2), lib.Array)
    seen["numpy"] = isinstance(np.ones(2), lib.Array)
    seen["scalar"] = isinstance(1.0, lib.Array)
    seen["tracer_subclass"] = issubclass(lib.core.Tracer, lib.Array)
    return seen


def test_tracers_are_arrays_as_in_jax():
    ours, theirs = _array_checks(remat, jnp), _array_checks(jax, jjnp)
    assert ours == theirs
    assert ours["jit"] and ours["grad"] and ours["scan"] and not ours["token"]


def test_concrete_array_paths_unchanged_for_tracers():
    """remat's own checks for a concrete Array still tell tracers apart."""
    x = jnp.arange(4.0)
    f = remat.jit(lambda x, i: x[i] + x ** i)
    np.testing.assert_allclose(f(x, 2), jjnp.arange(4.0)[2] + jjnp.arange(4.0) ** 2)
    g = remat.jit(lambda x: (jnp.asarray(x) is x, jnp.array(x) * 1)[1])
    np.testing.assert_array_equal(g(x), x)
    seen = []
    remat.jit(lambda x: seen.append(type(x) is remat.Array) or x)(x)
    assert seen == [False]  # ``type(x) is Array``: the concrete test
    assert isinstance(remat.grad(lambda v: jnp.sum(v ** 2))(x), remat.Array)


def test_equinox_style_is_array_filters_tracers():
    """equinox's ``is_array``: ``isinstance(x, (jax.Array, np.ndarray, np.generic))``, used to
    split a pytree into traced and static parts inside ``jit``."""
    def split(lib, tree):
        return [isinstance(leaf, (lib.Array, np.ndarray, np.generic))
                for leaf in lib.tree_util.tree_leaves(tree)]

    got, want = [], []
    remat.jit(lambda t: got.append(split(remat, (t, 3, "s"))) or t)(jnp.ones(2))
    jax.jit(lambda t: want.append(split(jax, (t, 3, "s"))) or t)(jjnp.ones(2))
    assert got == want == [[True, False, False]]


# --- 2. named_scope as a decorator ---------------------------------------------------------------


def test_named_scope_decorates_as_in_jax():
    def build(lib):
        @lib.named_scope("inner")
        def inner(x):
            return x * 2.0

        @lib.named_scope("outer")
        def outer(x):
            return inner(x) + 1.0

        return inner, outer

    inner, outer = build(remat)
    jinner, jouter = build(jax)
    assert (inner.__name__, outer.__name__) == (jinner.__name__, jouter.__name__)
    eqns = remat.make_jaxpr(outer)(1.0).eqns
    jeqns = jax.make_jaxpr(jouter)(1.0).eqns
    assert ["/".join(e.source_info.name_stack) for e in eqns] == \
        [str(e.source_info.name_stack) for e in jeqns] == ["outer/inner", "outer"]
    np.testing.assert_allclose(remat.grad(outer)(3.0), jax.grad(jouter)(3.0))
    # recursion re-enters the scope per call, and the stack unwinds after each
    depth = []

    @remat.named_scope("rec")
    def rec(x, n):
        depth.append(remat.source_info._name_stack)
        return x if n == 0 else rec(x + 1.0, n - 1)

    assert float(rec(0.0, 2)) == 2.0
    assert depth == [("rec",), ("rec", "rec"), ("rec", "rec", "rec")]
    assert remat.source_info._name_stack == ()
    with pytest.raises(TypeError):
        remat.named_scope(3)
    with pytest.raises(TypeError):
        jax.named_scope(3)


# --- 3. axis_primitive_batchers and PartialVal ---------------------------------------------------


def _axis_rule_primitive(lib, np_, batching_mod, calls):
    """A primitive ``scaled_sum(x) = sum(x) * 2`` whose batching rule is registered in
    ``axis_primitive_batchers`` (as equinox's ``create_vprim`` does)."""
    prim = (Primitive if lib is remat else jax.extend.core.Primitive)("scaled_sum_" + lib.__name__)
    prim.def_impl(lambda x: np_.sum(x) * 2.0)
    prim.def_abstract_eval(lambda aval: lib.core.ShapedArray((), aval.dtype))

    def rule(axis_size, axis_name, spmd_axis_name, vals, dims):
        calls.append((axis_size, axis_name, spmd_axis_name, dims))
        (x,), (d,) = vals, dims
        return np_.sum(np_.moveaxis(x, d, 0).reshape(x.shape[d], -1), axis=1) * 2.0, 0

    batching_mod.axis_primitive_batchers[prim] = rule
    return prim


def test_axis_primitive_batchers_match_jax():
    calls, jcalls = [], []
    prim = _axis_rule_primitive(remat, jnp, batching, calls)
    jprim = _axis_rule_primitive(jax, jjnp, jax.interpreters.batching, jcalls)
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    out = remat.vmap(prim.bind, in_axes=1, axis_name="i")(jnp.asarray(x))
    jout = jax.vmap(jprim.bind, in_axes=1, axis_name="i")(jjnp.asarray(x))
    np.testing.assert_allclose(out, jout)
    np.testing.assert_allclose(out, [prim.bind(jnp.asarray(col)) for col in x.T])  # a loop
    assert calls == jcalls == [(4, "i", None, (1,))]
    np.testing.assert_allclose(remat.jit(remat.vmap(prim.bind))(jnp.asarray(x)), x.sum(1) * 2)
    with pytest.raises(NotImplementedError, match="Batching rule"):
        remat.vmap(Primitive("no_rule").bind)(jnp.ones(2))


def test_partial_val_matches_jax():
    JPV = jax.interpreters.partial_eval.PartialVal
    aval, javal = remat.core.ShapedArray((2,), np.float32), jax.core.ShapedArray((2,), np.float32)
    known, jknown = PartialVal.known(jnp.ones(2)), JPV.known(jjnp.ones(2))
    unknown, junknown = PartialVal.unknown(aval), JPV.unknown(javal)
    assert isinstance(known, tuple) and len(known) == len(jknown) == 2
    assert (known.is_known(), unknown.is_known()) == (jknown.is_known(), junknown.is_known()) \
        == (True, False)
    assert known[0] is None and unknown[1] is None and unknown[0] is aval
    assert unknown.get_known() is None and junknown.get_known() is None
    kaval, jkaval = known.get_aval(), jknown.get_aval()
    assert (kaval.shape, kaval.dtype) == (jkaval.shape, jkaval.dtype) == ((2,), np.float32)
    assert unknown.get_aval() is aval
    pv, const = known  # unpacked as flax does: ``for pv, const in out_pvals``
    assert pv is None and float(const.sum()) == 2.0
    with pytest.raises(ValueError, match="not both"):
        PartialVal((aval, jnp.ones(2)))


def _known_unknown_tracing(lib, lu, pe, np_, shaped_array):
    """flax's lazy_init and nn.scan: a wrapped function, flattened, traced with some
    inputs known and some only abstract."""

    def f(x, y, *, scale):
        return {"known": x * scale, "unknown": y + x, "also_known": np_.sin(x)}

    args, kwargs = (np.float32(1.5), np.ones(3, np.float32)), {"scale": np.float32(2.0)}
    info = lib.api_util.debug_info("lazy_init", f, args, kwargs)
    flat, in_tree = lib.tree_util.tree_flatten((args, kwargs))
    flat_fun, out_tree = lib.api_util.flatten_fun(lu.wrap_init(f, debug_info=info), in_tree)
    pvals = [pe.PartialVal.known(flat[0]), pe.PartialVal.unknown(shaped_array((3,), np.float32)),
             pe.PartialVal.known(flat[2])]
    jaxpr, out_pvals, consts = pe.trace_to_jaxpr_nounits(flat_fun, pvals)
    knowns = [None if pv is not None else float(const) for pv, const in out_pvals]
    unknowns = [None if pv is None else (pv.shape, str(pv.dtype)) for pv, _ in out_pvals]
    return (tuple(info.arg_names), info.traced_for, knowns, unknowns, len(jaxpr.invars),
            len(jaxpr.eqns), str(out_tree()))


def test_known_unknown_tracing_of_wrapped_functions_matches_jax():
    import jax.extend.linear_util

    from remat.extend import linear_util

    got = _known_unknown_tracing(remat, linear_util, remat.interpreters.partial_eval, jnp,
                                 remat.core.ShapedArray)
    want = _known_unknown_tracing(jax, jax.extend.linear_util,
                                  jax.interpreters.partial_eval, jjnp, jax.core.ShapedArray)
    assert got[1:] == want[1:]
    assert got[0] == ("x", "y", "scale") and want[0][:2] == ("x", "y")
    # with JAX's flatten_fun_nokwargs, and instantiate making a known output unknown
    wrapped = linear_util.wrap_init(lambda a, b: (a * 2, b))
    flat_fun, out_tree = remat.api_util.flatten_fun_nokwargs(
        wrapped, remat.tree_util.tree_structure((1, 2)))
    aval = remat.core.ShapedArray((), np.float32)
    pe = remat.interpreters.partial_eval
    jaxpr, out_pvals, consts = pe.trace_to_jaxpr_nounits(
        flat_fun, [pe.PartialVal.known(np.float32(3)), pe.PartialVal.unknown(aval)],
        instantiate=[True, False])
    assert [pv is None for pv, _ in out_pvals] == [False, False] and len(jaxpr.outvars) == 2
    assert str(out_tree()) == "PyTreeDef((*, *))"


def test_jax_scheduling_and_sharding_options_change_no_value():
    # flax passes scan's _split_transpose and vmap's spmd_axis_name (its lifted transforms)
    step = lambda c, x: (c + x, c * x)
    xs = np.arange(4.0, dtype=np.float32)
    for split in (False, True):
        got = remat.lax.scan(step, np.float32(1), xs, _split_transpose=split)
        want = jax.lax.scan(step, np.float32(1), xs, _split_transpose=split)
        np.testing.assert_allclose(got[1], want[1])
    got = remat.vmap(lambda x: x * 2, spmd_axis_name="data")(xs)
    np.testing.assert_allclose(got, xs * 2)


# --- 4. vmap: a None subtree takes no axis -------------------------------------------------------


VMAP_NONE_CASES = [
    # (in_axes, args builder, function)
    ((None, 0), lambda np_: ({"a": None, "b": np_.arange(3.0)}, np_.ones((2, 3))),
     lambda t, x: t["b"] * x),
    (((None, None, None), 0), lambda np_: ((None, np_.ones(3), None), np_.ones((2, 3))),
     lambda t, x: t[1] + x),
    ((0, None, 0), lambda np_: (np_.arange(2.0), (None, np_.ones(3), None),
                                np_.ones((2, 3)) * 2),
     lambda a, t, x: a + t[1] + x),
    ((0, {"a": None, "b": 0}), lambda np_: (np_.arange(2.0),
                                            {"a": None, "b": np_.ones((2, 3))}),
     lambda a, t: a * t["b"].sum()),
    ((None, 1), lambda np_: ([None, np_.arange(4.0)], np_.ones((4, 2))),
     lambda t, x: t[1] @ x),
]


@pytest.mark.parametrize("case", range(len(VMAP_NONE_CASES)))
def test_vmap_none_subtree_takes_no_axis(case):
    """Regression: a ``None`` node in an argument gave ``_flatten_axes`` a spurious axis, so
    the axes of later leaves shifted (or vmap found no mapped axis at all)."""
    in_axes, args, f = VMAP_NONE_CASES[case]
    out = remat.vmap(f, in_axes=in_axes)(*args(jnp))
    jout = jax.vmap(f, in_axes=in_axes)(*args(jjnp))
    assert out.shape == jout.shape and out.dtype == jout.dtype
    np.testing.assert_allclose(out, jout)
    np.testing.assert_allclose(remat.jit(remat.vmap(f, in_axes=in_axes))(*args(jnp)), jout)


def test_vmap_none_in_outputs_and_out_axes():
    out = remat.vmap(lambda x: (None, x * 2), out_axes=(None, 0))(jnp.ones(2))
    jout = jax.vmap(lambda x: (None, x * 2), out_axes=(None, 0))(jjnp.ones(2))
    assert out[0] is None and jout[0] is None
    np.testing.assert_allclose(out[1], jout[1])

    def f(t, x):
        return {"a": None, "b": x}, t["b"]

    spec = dict(in_axes=({"a": None, "b": None}, 0), out_axes=({"a": None, "b": 1}, None))
    out = remat.vmap(f, **spec)({"a": None, "b": 3.0}, jnp.ones((2, 3)))
    jout = jax.vmap(f, **spec)({"a": None, "b": 3.0}, jjnp.ones((2, 3)))
    assert out[0]["a"] is None and out[0]["b"].shape == jout[0]["b"].shape == (3, 2)
    assert float(out[1]) == float(jout[1]) == 3.0
    out = remat.vmap(lambda t: t, in_axes=((0, 0),))((None, jnp.ones(2)))  # 0 for None: no leaf
    jout = jax.vmap(lambda t: t, in_axes=((0, 0),))((None, jjnp.ones(2)))
    assert out[0] is None and jout[0] is None and out[1].shape == jout[1].shape == (2,)
    for bad in [((0, 0, 0),), (({"a": 0}, 0),)]:
        with pytest.raises(ValueError, match="tree prefix"):
            remat.vmap(lambda t: t, in_axes=bad)((None, jnp.ones(2)))
        with pytest.raises(ValueError, match="tree prefix"):
            jax.vmap(lambda t: t, in_axes=bad)((None, jjnp.ones(2)))


# --- 5. ShapeDtypeStruct: sharding, and a dtype source -------------------------------------------


def test_shape_dtype_struct_sharding_matches_jax():
    dev, jdev = remat.devices()[0], jax.devices()[0]
    plain = remat.ShapeDtypeStruct((2, 3), jnp.float32)
    jplain = jax.ShapeDtypeStruct((2, 3), jjnp.float32)
    sharded = remat.ShapeDtypeStruct((2, 3), jnp.float32, sharding=SingleDeviceSharding(dev))
    jsharded = jax.ShapeDtypeStruct((2, 3), jjnp.float32,
                                    sharding=jax.sharding.SingleDeviceSharding(jdev))
    assert plain.sharding is None and jplain.sharding is None
    assert repr(plain) == repr(jplain) and repr(sharded) == repr(jsharded)
    assert sharded.sharding == SingleDeviceSharding(dev)
    assert (sharded == plain) == (jsharded == jplain) == False  # noqa: E712
    assert sharded == remat.ShapeDtypeStruct((2, 3), np.float32,
                                             sharding=SingleDeviceSharding(dev))
    assert hash(sharded) == hash(remat.ShapeDtypeStruct((2, 3), np.float32,
                                                        sharding=SingleDeviceSharding(dev)))
    weak = remat.ShapeDtypeStruct((), jnp.float32, weak_type=True)
    assert repr(weak) == repr(jax.ShapeDtypeStruct((), jjnp.float32, weak_type=True))
    with pytest.raises(ValueError, match="sharding should be an instance"):
        remat.ShapeDtypeStruct((2,), jnp.float32, sharding=3)
    with pytest.raises(ValueError, match="sharding should be an instance"):
        jax.ShapeDtypeStruct((2,), jjnp.float32, sharding=3)
    spec = remat.ShapeDtypeStruct((2,), jnp.float32, sharding=PartitionSpec("x"))
    with pytest.raises(TypeError, match="context mesh cannot be empty"):
        _ = spec.sharding
    mesh = Mesh(np.array(remat.devices()), ("x",))
    with remat.sharding.set_mesh(mesh):
        assert spec.sharding == NamedSharding(mesh, PartitionSpec("x"))
    # eval_shape takes it as an argument, whatever its sharding
    assert remat.eval_shape(lambda x: x * 2, sharded) == plain


def test_shape_dtype_struct_like_update_len_match_jax():
    for x, jx in [(jnp.ones(2), jjnp.ones(2)), (np.ones(2), np.ones(2)), (1.0, 1.0),
                  (jnp.int8(3), jjnp.int8(3))]:
        assert repr(remat.ShapeDtypeStruct.like(x)) == repr(jax.ShapeDtypeStruct.like(jx))
    s, js = remat.ShapeDtypeStruct((2,), jnp.float32), jax.ShapeDtypeStruct((2,), jjnp.float32)
    assert repr(s.update(shape=(3,))) == repr(js.update(shape=(3,)))
    assert repr(s.update(weak_type=True)) == repr(js.update(weak_type=True))
    assert repr(s.update(dtype=np.int32)) == repr(js.update(dtype=np.int32))
    assert len(s) == len(js) == 2
    with pytest.raises(TypeError, match="unsized"):
        len(remat.ShapeDtypeStruct((), jnp.float32))
    with pytest.raises(TypeError, match="unexpected keyword"):
        s.update(size=3)


class _HasDtype:
    dtype = np.dtype(np.int16)


@pytest.mark.parametrize("args", [
    lambda lib, np_: (lib.ShapeDtypeStruct((2,), np_.float32),),
    lambda lib, np_: (lib.ShapeDtypeStruct((2,), np_.float16), 1.0),
    lambda lib, np_: (lib.ShapeDtypeStruct((2,), np_.float16), np_.float32),
    lambda lib, np_: (lib.ShapeDtypeStruct((), np_.float32, weak_type=True), np_.float16),
    lambda lib, np_: (lib.ShapeDtypeStruct((2,), np_.int8), lib.ShapeDtypeStruct((), np_.uint8)),
    lambda lib, np_: (_HasDtype(),),
    lambda lib, np_: (_HasDtype(), 1),
])
def test_result_type_of_values_with_a_dtype_matches_jax(args):
    """equinox's closure conversion asks ``jnp.result_type`` of ``ShapeDtypeStruct``s."""
    assert jnp.result_type(*args(remat, jnp)) == jjnp.result_type(*args(jax, jjnp))


# --- 6. a Python int with an explicit dtype is checked against that dtype ------------------------


INT_CASES = [(2998342421, "uint32"), (2 ** 32 - 1, "uint32"), (2 ** 32 + 5, "uint32"),
             (-1, "uint32"), (2 ** 31, "int32"), (-2 ** 31, "int32"), (2 ** 31 - 1, "int32"),
             (2 ** 40, "int64"), (2 ** 63, "uint64"), (300, "uint8"), (255, "uint8"),
             (-200, "int8"), (-1, "uint16"), (2 ** 33, "float32"), (2 ** 40, "bfloat16"),
             (2 ** 40, "complex64"), (5, "bool"), (9, "int4")]


def _int_outcome(np_, v, d, how):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # JAX warns for int64 without x64
        try:
            if how == "scalar_type":
                out = getattr(np_, d)(v)
            elif how == "array":
                out = np_.array(v, dtype=getattr(np_, d))
            else:
                out = np_.asarray(v, getattr(np_, d))
        except OverflowError as e:
            return "OverflowError", str(e)
    return str(out.dtype), np.asarray(out, np.float64 if d != "complex64" else None).tolist(), \
        out.weak_type


@pytest.mark.parametrize("how", ["scalar_type", "array", "asarray"])
@pytest.mark.parametrize("v,d", INT_CASES)
def test_python_int_with_explicit_dtype_matches_jax(v, d, how):
    assert _int_outcome(jnp, v, d, how) == _int_outcome(jjnp, v, d, how)


def test_uint32_above_int32_range_under_transformations():
    """flax folds 32-bit hashes into PRNG keys so: ``jnp.uint32(2998342421)``."""
    out = remat.jit(lambda k: k + jnp.uint32(2998342421))(jnp.uint32(1))
    jout = jax.jit(lambda k: k + jjnp.uint32(2998342421))(jjnp.uint32(1))
    assert out.dtype == jout.dtype == np.uint32 and int(out) == int(jout) == 2998342422
    key = remat.random.fold_in(remat.random.PRNGKey(0), jnp.uint32(2998342421))
    jkey = jax.random.fold_in(jax.random.PRNGKey(0), jjnp.uint32(2998342421))
    np.testing.assert_array_equal(key, jkey)


# --- 7. remat.interpreters.mlir reachable from the package --------------------------------------


def test_interpreters_package_exposes_mlir():
    code = ("import remat.interpreters as i, remat.interpreters.mlir as m; "
            "assert i.mlir is m and callable(i.mlir.register_lowering); print('ok')")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


# --- 8. jaxpr atoms and a trace's main (equinox's jaxpr tools and filter_jvp) -------------------


def test_core_atom_is_a_variable_or_a_literal():
    jaxpr = remat.make_jaxpr(lambda x: x * 2.0)(1.0).jaxpr
    (eqn,) = jaxpr.eqns
    assert all(isinstance(v, remat.core.Atom) for v in eqn.invars)
    assert {type(v) for v in eqn.invars} == {remat.core.Var, remat.core.Literal}


def test_a_traces_main_tells_its_own_tracers_from_an_outer_ones():
    """equinox's ``filter_jvp`` keeps the outputs whose ``_trace.main`` is the top trace's."""
    from remat.extend.core import find_top_trace
    from remat.interpreters.ad import JVPTracer

    def inner(x, outer_tracer):
        main = find_top_trace([x]).main
        assert isinstance(x, JVPTracer) and x._trace.main is main
        assert outer_tracer._trace.main is not main
        return x

    def outer(y):
        return remat.jvp(lambda x: inner(x, y), (y * 1.0,), (1.0,))[1]

    assert float(remat.jvp(outer, (2.0,), (1.0,))[0]) == 1.0


# --- 9. an integer's float0 tangent is a symbolic zero (equinox's unvmap_max has no JVP) --------


def _max_of_ints():
    from remat.extend.core import Primitive
    prim = Primitive("max_of_ints_without_jvp")
    prim.def_impl(lambda n: np.max(np.asarray(n)))
    prim.def_abstract_eval(lambda n: remat.core.ShapedArray((), n.dtype))
    return prim


def test_a_custom_vjps_integer_output_has_a_symbolic_zero_tangent():
    """A custom_vjp's tangent map gives a float0 array for an integer output; as in JAX it
    becomes a symbolic zero, so a primitive without a JVP rule may read the integer under a
    jit (diffrax's BacksolveAdjoint runs equinox's ``unvmap_max`` so)."""
    prim = _max_of_ints()

    @remat.custom_vjp
    def f(x):
        return x * 2.0, jnp.array([3, 1], np.int32)

    f.defvjp(lambda x: (f(x), None), lambda _, g: (g[0] * 2.0,))

    def loss(x):
        y, k = f(x)
        return y * remat.jit(prim.bind)(k).astype(y.dtype)

    assert float(remat.grad(loss)(np.float32(2.0))) == 6.0
    assert float(remat.jit(remat.grad(loss))(np.float32(2.0))) == 6.0


def test_a_float0_tangent_never_reaches_a_rule():
    prim = _max_of_ints()

    @remat.jit
    def f(x, n):
        return x * prim.bind(n).astype(x.dtype)

    n = np.array([1, 4, 2], np.int32)
    float0_tangent = np.zeros(n.shape, remat.dtypes.float0)
    out, t = remat.jvp(f, (np.float32(2.0), n), (np.float32(1.0), float0_tangent))
    assert float(out) == 8.0 and float(t) == 4.0
    assert float(remat.grad(lambda x: remat.jit(f)(x, n))(np.float32(2.0))) == 4.0


# --- 10. a tracer of a trace set aside by ensure_compile_time_eval is a constant there ----------


def _shape_inside_compile_time_eval(lib):
    @lib.jit
    def f(x):
        with lib.ensure_compile_time_eval():
            shape = lib.eval_shape(lambda: x * 2.0)
            ones = lib.numpy.ones(shape.shape, shape.dtype)
        return x + ones

    return f(np.arange(3.0, dtype=np.float32))


def test_eval_shape_of_an_outer_tracer_inside_ensure_compile_time_eval_matches_jax():
    """lineax's ``diagonal`` takes ``eval_shape`` of a closure over the operator's tracer under
    ``ensure_compile_time_eval`` (diffrax's ImplicitAdjoint runs it)."""
    np.testing.assert_array_equal(_shape_inside_compile_time_eval(remat),
                                  _shape_inside_compile_time_eval(jax))


# --- 11. what equinox's jaxpr interpreters and layers ask of the core ------------------------


def _rebind(closed, *args):
    """A jaxpr interpreter written as equinox's ``finalise_eval_jaxpr``: each equation bound
    again with ``get_bind_params`` (a custom_jvp call inlined through its ``subfuns``)."""
    env = dict(zip(closed.jaxpr.constvars, closed.consts))
    env.update(zip(closed.jaxpr.invars, args))
    for eqn in closed.jaxpr.eqns:
        assert isinstance(eqn.primitive, remat.extend.core.Primitive)
        assert eqn.effects == frozenset()
        params = eqn.primitive.get_bind_params(eqn.params)
        ins = [v.val if isinstance(v, remat.core.Literal) else env[v] for v in eqn.invars]
        if "subfuns" in params:
            outs = params["subfuns"][0].call_wrapped(*ins)
        else:
            outs = eqn.primitive.bind(*ins, **params)
        env.update(zip(eqn.outvars, outs if eqn.primitive.multiple_results else [outs]))
    return [env[v] for v in closed.jaxpr.outvars]


def test_a_jaxpr_bound_again_through_get_bind_params_gives_its_values():
    @remat.custom_jvp
    def softsign(x):
        return x / (1.0 + jnp.abs(x))

    softsign.defjvp(lambda p, t: (softsign(p[0]), t[0] / (1.0 + jnp.abs(p[0])) ** 2))

    def f(x):
        return remat.lax.cond(x.sum() > 0, jnp.sin, jnp.cos, softsign(x) * 2.0)

    x = np.array([0.5, -2.0, 3.0], np.float32)
    closed = remat.make_jaxpr(f)(x)
    (got,) = _rebind(closed, x)
    np.testing.assert_allclose(got, f(x), rtol=1e-6)
    (staged,) = remat.jit(lambda x: _rebind(closed, x))(x)
    np.testing.assert_allclose(staged, f(x), rtol=1e-6)


def test_a_new_primitives_impl_runs_on_traced_values_when_a_library_calls_it():
    prim = remat.extend.core.Primitive("double_it")
    prim.def_impl(lambda x: x * 2.0)
    prim.def_abstract_eval(lambda x: x)
    x = np.arange(3.0, dtype=np.float32)
    np.testing.assert_array_equal(remat.jit(prim.impl)(x), 2.0 * x)
    np.testing.assert_array_equal(remat.jit(prim.bind)(x), 2.0 * x)


def test_vmap_passes_an_unmapped_non_array_argument_through():
    """equinox's adaptive pooling maps a function over arrays with ``jnp.mean`` as an
    unmapped argument (in_axes None), as JAX allows."""
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    out = remat.vmap(lambda row, op: op(row), in_axes=(0, None))(x, jnp.mean)
    np.testing.assert_allclose(out, x.mean(axis=1))


def test_a_jitted_float0_cotangent_is_a_numpy_array_as_in_jax():
    """equinox's ``tree_equal`` compares gradients with ``==``: for an integer input's float0
    cotangent that works on NumPy arrays (what JAX returns), not on a remat Array."""
    def grads(lib):
        return lib.jit(lambda x, n: lib.vjp(lambda x, n: x * n, x, n)[1](1.0))(2.0, 3)

    (_, got), (_, want) = grads(remat), grads(jax)
    assert isinstance(got, np.ndarray) and isinstance(want, np.ndarray)
    assert got.dtype == want.dtype and bool(np.all(got == got))


def test_equal_treedefs_with_unhashable_aux_data_hash_equal_and_jit_does_not_retrace():
    """equinox's filter_jit passes a fresh, equal treedef as a static argument on each call;
    a module's static fields (a dict of kwargs) make its aux data unhashable."""
    @remat.tree_util.register_pytree_node_class
    class WithKwargs:
        def __init__(self, x, kwargs):
            self.x, self.kwargs = x, kwargs

        def tree_flatten(self):
            return (self.x,), self.kwargs

        @classmethod
        def tree_unflatten(cls, kwargs, children):
            return cls(children[0], kwargs)

    def treedef():
        return remat.tree_util.tree_structure(WithKwargs(1.0, {"has_aux": False}))

    assert treedef() == treedef() and hash(treedef()) == hash(treedef())
    traces = []

    @functools.partial(remat.jit, static_argnums=1)
    def f(x, structure):
        traces.append(structure)
        return x + 1.0

    f(1.0, treedef())
    f(2.0, treedef())
    assert len(traces) == 1
