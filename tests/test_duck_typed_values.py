"""Values that stand in for arrays, each call against JAX: anything with ``shape`` and ``dtype``
(``ShapeDtypeStruct``, an aval, a user's class) where JAX takes it (the ``*_like`` functions,
``eval_shape``, ``make_jaxpr``, ``linear_transpose``, ``shape``/``ndim``/``size``,
``iscomplexobj``) and rejects it (a jit call, ``jnp.array``); scalar types (``jnp.float32``)
used as values; the sharding of an aval (``typeof(x).sharding.mesh``/``.spec``); and the
``issubdtype``/``finfo`` of the ml_dtypes scalar types."""

import functools
import warnings

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.core import ShapedArray as JaxShapedArray

import remat
import remat.numpy as jnp
from remat.core import ShapedArray
from remat.sharding import AxisType, make_mesh, set_mesh


class _Duck:
    """A user's stand-in for an array: a shape and a dtype, nothing else."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, np.dtype(dtype)


class _DtypeOnly:
    """Has a dtype but no shape: ``eval_shape`` reads it as a scalar, ``zeros_like`` rejects
    it (JAX's duck typing asks for both)."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)


def _stand_ins(lib, shaped_array):
    """The same stand-ins, built with ``lib`` (remat or jax): name -> value."""
    return {
        "struct": lib.ShapeDtypeStruct((2, 3), lib.numpy.float32),
        "weak_struct": lib.ShapeDtypeStruct((2,), lib.numpy.float32, weak_type=True),
        "int_struct": lib.ShapeDtypeStruct((4,), lib.numpy.int16),
        "aval": shaped_array((2, 3), np.float32),
        "weak_aval": shaped_array((3,), np.float32, weak_type=True),
        "duck": _Duck((2,), "int16"),
    }


STAND_INS = list(_stand_ins(remat, ShapedArray))


def _pair(name):
    return _stand_ins(remat, ShapedArray)[name], _stand_ins(jax, JaxShapedArray)[name]


def _outcome(fn, *args, **kwargs):
    """What a call gives, comparable across remat and JAX: an array's values, dtype and weak
    type, a struct's shape, dtype and weak type, or the type of the exception it raises."""
    try:
        out = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the type is the outcome compared
        return ("raises", type(e))
    if hasattr(out, "__array__") and hasattr(out, "weak_type"):
        return ("array", np.asarray(out).tolist(), str(out.dtype), bool(out.weak_type))
    if hasattr(out, "shape") and hasattr(out, "dtype"):
        return ("struct", tuple(out.shape), str(out.dtype), bool(getattr(out, "weak_type", 0)))
    return ("value", out)


def assert_alike(remat_call, jax_call, *, raises=None):
    got, want = _outcome(remat_call), _outcome(jax_call)
    if want[0] == "raises":
        assert raises is not None and issubclass(want[1], raises), want
        assert got[0] == "raises" and issubclass(got[1], raises), got
    else:
        assert got == want


# --- the *_like functions ---------------------------------------------------------------------


@pytest.mark.parametrize("name", STAND_INS)
@pytest.mark.parametrize("like", ["zeros_like", "ones_like", "empty_like"])
def test_like_functions_take_anything_with_shape_and_dtype(like, name):
    mine, theirs = _pair(name)
    for kwargs in ({}, {"dtype": np.int32}, {"shape": (3, 1)}):
        assert_alike(functools.partial(getattr(jnp, like), mine, **kwargs),
                     functools.partial(getattr(jjnp, like), theirs, **kwargs))


@pytest.mark.parametrize("name", STAND_INS)
def test_full_like_takes_anything_with_shape_and_dtype(name):
    mine, theirs = _pair(name)
    assert_alike(lambda: jnp.full_like(mine, 2.5), lambda: jjnp.full_like(theirs, 2.5))
    assert_alike(lambda: jnp.full_like(mine, 7, dtype=np.int8),
                 lambda: jjnp.full_like(theirs, 7, dtype=np.int8))
    assert_alike(lambda: jnp.full_like(mine, np.ones(mine.shape[-1:])),
                 lambda: jjnp.full_like(theirs, np.ones(theirs.shape[-1:])))


def test_like_functions_check_what_is_not_duck_typed():
    # dtype without shape is not enough; a list fill value is still not array-like
    for fn in ("zeros_like", "ones_like", "full_like"):
        args = (2,) if fn == "full_like" else ()
        assert_alike(functools.partial(getattr(jnp, fn), _DtypeOnly("int16"), *args),
                     functools.partial(getattr(jjnp, fn), _DtypeOnly("int16"), *args),
                     raises=TypeError)
    mine, theirs = _pair("struct")
    with pytest.raises(TypeError, match="at position 1"):
        jnp.full_like(mine, [1, 2, 3])
    with pytest.raises(TypeError, match="at position 1"):
        jjnp.full_like(theirs, [1, 2, 3])


def test_zeros_like_over_eval_shape_output():
    # diffrax's way of building a state: zeros of every leaf eval_shape gives
    def f(x):
        return {"y": x * 2, "n": jnp.sum(x).astype(np.int32), "w": 1.0 * x[0]}

    def g(x):
        return {"y": x * 2, "n": jjnp.sum(x).astype(np.int32), "w": 1.0 * x[0]}

    mine = remat.tree.map(jnp.zeros_like, remat.eval_shape(f, jnp.ones(3)))
    theirs = jax.tree.map(jjnp.zeros_like, jax.eval_shape(g, jjnp.ones(3)))
    for k in theirs:
        assert _outcome(mine.get, k) == _outcome(theirs.get, k), k


# --- abstract evaluation: what JAX's shaped_abstractify takes --------------------------------


@pytest.mark.parametrize("name", STAND_INS)
def test_eval_shape_of_stand_ins(name):
    mine, theirs = _pair(name)
    assert_alike(lambda: remat.eval_shape(lambda x: x * 2, mine),
                 lambda: jax.eval_shape(lambda x: x * 2, theirs))
    assert_alike(lambda: remat.eval_shape(lambda x: x, mine),
                 lambda: jax.eval_shape(lambda x: x, theirs))


def test_eval_shape_of_dtype_only_value_is_a_scalar():
    assert_alike(lambda: remat.eval_shape(lambda x: x + 1, _DtypeOnly("int16")),
                 lambda: jax.eval_shape(lambda x: x + 1, _DtypeOnly("int16")))


@pytest.mark.parametrize("value", ["f32_type", "np_type", "dtype", "str"])
def test_eval_shape_rejects_what_is_not_an_array(value):
    values = {"f32_type": (jnp.float32, jjnp.float32), "np_type": (np.float32, np.float32),
              "dtype": (np.dtype("float32"),) * 2, "str": ("abc",) * 2}
    mine, theirs = values[value]
    assert_alike(lambda: remat.eval_shape(lambda x: x, mine),
                 lambda: jax.eval_shape(lambda x: x, theirs), raises=TypeError)


@pytest.mark.parametrize("name", ["struct", "aval", "duck"])
def test_make_jaxpr_and_lower_take_stand_ins(name):
    mine, theirs = _pair(name)
    got = remat.make_jaxpr(lambda x: x + 1)(mine)
    want = jax.make_jaxpr(lambda x: x + 1)(theirs)
    for avals, jax_avals in ((got.in_avals, want.in_avals), (got.out_avals, want.out_avals)):
        assert [(a.shape, a.dtype, a.weak_type) for a in avals] == \
            [(a.shape, a.dtype, a.weak_type) for a in jax_avals]
    lowered = remat.jit(lambda x: x + 1).lower(mine).out_info
    assert _outcome(lambda: lowered) == \
        _outcome(lambda: jax.jit(lambda x: x + 1).lower(theirs).out_info)


@pytest.mark.parametrize("name", ["struct", "aval", "duck"])
def test_jit_call_rejects_stand_ins(name):
    mine, theirs = _pair(name)
    assert_alike(lambda: remat.jit(lambda x: x * 2)(mine), lambda: jax.jit(lambda x: x * 2)(theirs),
                 raises=TypeError)
    assert_alike(lambda: remat.jit(lambda x: x)(jnp.float32),
                 lambda: jax.jit(lambda x: x)(jjnp.float32),
                 raises=TypeError)


@pytest.mark.parametrize("name", ["struct", "weak_aval", "duck"])
def test_linear_transpose_at_stand_ins(name):
    # lineax transposes at its operators' in_structure(), a tree of ShapeDtypeStructs
    mine, theirs = _pair(name)
    ct_mine = jnp.ones(mine.shape, mine.dtype)
    ct_theirs = jjnp.ones(theirs.shape, theirs.dtype)
    assert_alike(lambda: remat.linear_transpose(lambda x: 3 * x, mine)(ct_mine)[0],
                 lambda: jax.linear_transpose(lambda x: 3 * x, theirs)(ct_theirs)[0])


@pytest.mark.parametrize("shape", [(), (2,)])
def test_struct_is_typed_but_has_no_value(shape):
    # JAX maps a ShapeDtypeStruct to its aval (typeof, lax.full_like, an eval_shape output:
    # equinox's filter_closure_convert returns its input structs from eval_shape), but a
    # computation that needs its value raises TypeError
    mine = remat.ShapeDtypeStruct(shape, np.float32)
    theirs = jax.ShapeDtypeStruct(shape, np.float32)
    got, want = remat.typeof(mine), jax.typeof(theirs)
    assert (got.shape, got.dtype, got.weak_type) == (want.shape, want.dtype, want.weak_type)
    assert_alike(functools.partial(remat.lax.full_like, mine, 2.0),
                 functools.partial(jax.lax.full_like, theirs, 2.0))
    got = remat.eval_shape(lambda: (mine, jnp.ones(3)))
    want = jax.eval_shape(lambda: (theirs, jjnp.ones(3)))
    assert [_outcome(lambda s=s: s) for s in got] == [_outcome(lambda s=s: s) for s in want]
    got = remat.make_jaxpr(lambda: mine)()
    want = jax.make_jaxpr(lambda: theirs)()
    assert [(v.aval.shape, v.aval.dtype) for v in got.jaxpr.constvars] == \
        [(v.aval.shape, v.aval.dtype) for v in want.jaxpr.constvars]
    for call_mine, call_theirs in (
            (remat.jit(lambda: mine), jax.jit(lambda: theirs)),
            (functools.partial(remat.jit(lambda x: x * 2), mine),
             functools.partial(jax.jit(lambda x: x * 2), theirs)),
            (functools.partial(remat.lax.add, mine, 1.0),
             functools.partial(jax.lax.add, theirs, 1.0)),
            (functools.partial(jnp.add, mine, 1.0), functools.partial(jjnp.add, theirs, 1.0)),
            (functools.partial(remat.jit(lambda x: remat.lax.add(x, mine)), jnp.ones(shape)),
             functools.partial(jax.jit(lambda x: jax.lax.add(x, theirs)), jjnp.ones(shape)))):
        assert_alike(call_mine, call_theirs, raises=TypeError)


def test_avals_are_abstract_values():
    # lineax: isinstance(x, jax.core.AbstractValue) after isinstance(x, jax.core.ShapedArray)
    assert isinstance(ShapedArray((2,), np.float32), remat.core.AbstractValue)
    assert isinstance(JaxShapedArray((2,), np.float32), jax.core.AbstractValue)
    assert not isinstance(remat.ShapeDtypeStruct((2,), np.float32), remat.core.AbstractValue)
    assert not isinstance(jax.ShapeDtypeStruct((2,), np.float32), jax.core.AbstractValue)


def test_array_of_stand_in_is_rejected():
    for name in ("struct", "aval"):
        mine, theirs = _pair(name)
        for fn in ("array", "asarray"):
            assert_alike(functools.partial(getattr(jnp, fn), mine),
                         functools.partial(getattr(jjnp, fn), theirs), raises=TypeError)


def test_eval_shape_keeps_key_dtypes():
    got = remat.eval_shape(lambda: remat.random.split(remat.random.key(0), 3))
    want = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), 3))
    assert (got.shape, str(got.dtype)) == (want.shape, str(want.dtype)) == ((3,), "key<fry>")
    assert remat.ShapeDtypeStruct.like(remat.random.key(1)).dtype == got.dtype
    zeros, jax_zeros = jnp.zeros_like(got), jjnp.zeros_like(want)
    assert str(zeros.dtype) == str(jax_zeros.dtype) == "key<fry>"
    np.testing.assert_array_equal(remat.random.key_data(zeros), jax.random.key_data(jax_zeros))


# --- shape, ndim, size, iscomplexobj of stand-ins --------------------------------------------


@pytest.mark.parametrize("name", STAND_INS)
def test_shape_ndim_size_of_stand_ins(name):
    mine, theirs = _pair(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # JAX's, for size of a non-array
        for fn in ("shape", "ndim", "size"):
            assert_alike(functools.partial(getattr(jnp, fn), mine),
                         functools.partial(getattr(jjnp, fn), theirs))
        assert_alike(lambda: jnp.size(mine, 0), lambda: jjnp.size(theirs, 0))


def test_size_takes_a_sequence_of_axes():
    x, y = jnp.ones((2, 3, 4)), jjnp.ones((2, 3, 4))
    for axis in (1, -1, (0, 2), (0, 1, 2), ()):
        assert jnp.size(x, axis) == jjnp.size(y, axis)
    for axis in ((0, 0), 5):
        assert_alike(functools.partial(jnp.size, x, axis), functools.partial(jjnp.size, y, axis),
                     raises=ValueError)


def test_shape_ndim_size_of_non_arrays_warn_as_in_jax():
    for value in (None, {"a": 1}, [[1, 2]]):
        for fn in ("shape", "ndim", "size"):
            with pytest.warns(DeprecationWarning, match="requires ndarray or scalar"):
                got = getattr(jnp, fn)(value)
            with pytest.warns(DeprecationWarning, match="requires ndarray or scalar"):
                assert got == getattr(jjnp, fn)(value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # what np.isscalar takes is array-like to JAX
        assert jnp.shape("abc") == jjnp.shape("abc") == ()
        assert jnp.size(np.ones((2, 1))) == jjnp.size(np.ones((2, 1))) == 2


@pytest.mark.parametrize("fn", ["iscomplexobj", "isrealobj"])
def test_iscomplexobj_reads_dtypes(fn):
    values = [
        (1j, 1j), (np.complex64(1), np.complex64(1)), (None, None), ("abc", "abc"),
        (jnp.float32, jjnp.float32), (jnp.complex64, jjnp.complex64),
        (remat.ShapeDtypeStruct((2,), np.complex64), jax.ShapeDtypeStruct((2,), np.complex64)),
        (remat.ShapeDtypeStruct((2,), np.float32), jax.ShapeDtypeStruct((2,), np.float32)),
        ([1, 2j], [1, 2j]), (jnp.ones(2, np.complex64), jjnp.ones(2, np.complex64)),
        (jnp.ones(2, jnp.bfloat16), jjnp.ones(2, jjnp.bfloat16)),
        (remat.random.key(0), jax.random.key(0)),
    ]
    for mine, theirs in values:
        assert getattr(jnp, fn)(mine) == getattr(jjnp, fn)(theirs), mine


# --- scalar types as values --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["float32", "bfloat16", "int8", "complex64", "bool_"])
def test_scalar_types_as_values(name):
    mine, theirs = getattr(jnp, name), getattr(jjnp, name)
    # not arrays (JAX's jnp.array(jnp.bool_) reads the class's truth, True: not followed)
    for fn in ("array", "asarray", "zeros_like", "ravel")[0 if name != "bool_" else 2:]:
        assert_alike(functools.partial(getattr(jnp, fn), mine),
                     functools.partial(getattr(jjnp, fn), theirs), raises=TypeError)
    for fn in ("dtype", "result_type", "iscomplexobj", "isrealobj"):
        assert getattr(jnp, fn)(mine) == getattr(jjnp, fn)(theirs)
    assert np.dtype(mine) == np.dtype(theirs) and jnp.zeros(2, mine).dtype == np.dtype(theirs)
    assert remat.tree.leaves({"a": mine}) == [mine]  # a leaf, as JAX's is
    for x in ([1, 0], jnp.arange(2), np.arange(2)):
        assert_alike(functools.partial(mine, x),
                     functools.partial(theirs, np.asarray(x) if hasattr(x, "aval") else x))


def test_scalar_type_of_none_is_a_value_error():
    assert_alike(lambda: jnp.float32(None), lambda: jjnp.float32(None), raises=ValueError)
    assert_alike(lambda: jnp.array(None), lambda: jjnp.array(None), raises=ValueError)
    assert_alike(lambda: jnp.array([1.0, None]), lambda: jjnp.array([1.0, None]), raises=ValueError)


ML_NAMES = ["bfloat16", "float16", "float8_e4m3fn", "int4", "uint4", "int8", "float32",
            "complex64", "bool_"]
ABSTRACT = ["floating", "inexact", "integer", "signedinteger", "unsignedinteger", "number",
            "complexfloating", "generic"]


@pytest.mark.parametrize("name", ML_NAMES)
def test_issubdtype_places_ml_dtypes_as_jax(name):
    # optax's safe_increment asks issubdtype(count.dtype, jnp.floating) of a bfloat16 count
    for other in ML_NAMES + ABSTRACT:
        for form in (lambda t: t, np.dtype):
            got = jnp.issubdtype(form(getattr(jnp, name)), getattr(jnp, other))
            assert got == jjnp.issubdtype(form(getattr(jjnp, name)), getattr(jjnp, other)), \
                (name, other)


@pytest.mark.parametrize("name", ML_NAMES)
def test_finfo_iinfo_of_ml_dtypes(name):
    for fn in ("finfo", "iinfo"):
        got = _outcome(getattr(jnp, fn), getattr(jnp, name))
        want = _outcome(getattr(jjnp, fn), getattr(jjnp, name))
        assert got[0] == want[0], (fn, got, want)
        if got[0] != "raises":
            assert (str(got[1].max), str(got[1].min)) == (str(want[1].max), str(want[1].min))


# --- the sharding of an aval -----------------------------------------------------------------


def _sharding_facts(s):
    return (type(s).__name__, tuple(s.mesh.axis_names), s.mesh.empty,
            s.mesh.are_all_axes_explicit, s.mesh.are_all_axes_auto, tuple(s.spec),
            s.is_fully_replicated, s.shard_shape((4, 6)[:len(s.spec)]))


def test_aval_sharding_is_replicated_over_the_empty_mesh():
    for shape in ((), (3,), (4, 6)):
        got = ShapedArray(shape, np.float32).sharding
        assert _sharding_facts(got) == _sharding_facts(JaxShapedArray(shape, np.float32).sharding)


def test_aval_made_with_a_sharding():
    # flax's nn.scan builds ``ShapedArray(shape, dtype, sharding=x.aval.sharding)``; remat's
    # values are whole on the host, so an aval's sharding stays the replicated one
    x = jnp.ones((4, 6))
    aval = ShapedArray((4, 6), np.float32, sharding=remat.typeof(x).sharding)
    javal = JaxShapedArray((4, 6), np.float32, sharding=jax.typeof(jjnp.ones((4, 6))).sharding)
    assert aval == ShapedArray((4, 6), np.float32) and aval.shape == javal.shape
    assert _sharding_facts(aval.sharding) == _sharding_facts(javal.sharding)
    assert ShapedArray((6,), np.float32, True, sharding=None).weak_type
    assert aval.update(shape=(6,), sharding=None).shape == (6,)


def test_traced_aval_sharding_as_optax_reads_it():
    # optax: ``jax.typeof(x).sharding.mesh.are_all_axes_explicit``, ``sharding.spec``
    seen = {}
    remat.jit(lambda x: seen.setdefault("remat", remat.typeof(x).sharding) and x)(jnp.ones(3))
    jax.jit(lambda x: seen.setdefault("jax", jax.typeof(x).sharding) and x)(jjnp.ones(3))
    assert _sharding_facts(seen["remat"]) == _sharding_facts(seen["jax"])
    assert _sharding_facts(remat.typeof(jnp.ones((4, 6))).sharding) == \
        _sharding_facts(jax.typeof(jjnp.ones((4, 6))).sharding)


def test_aval_sharding_under_a_mesh():
    seen = {}
    mesh = make_mesh((1,), ("x",), axis_types=(AxisType.Explicit,))
    with set_mesh(mesh):
        remat.jit(lambda x: seen.setdefault("remat", remat.typeof(x).sharding) and x)(
            jnp.ones(2))
    jmesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
    with jax.sharding.set_mesh(jmesh):
        jax.jit(lambda x: seen.setdefault("jax", jax.typeof(x).sharding) and x)(jjnp.ones(2))
    assert _sharding_facts(seen["remat"]) == _sharding_facts(seen["jax"])
    assert seen["remat"].mesh.are_all_axes_explicit


def test_mesh_without_axes_has_no_axis_kind():
    from remat.sharding import AbstractMesh

    empty, jax_empty = AbstractMesh((), ()), jax.sharding.AbstractMesh((), ())
    for kind in ("are_all_axes_auto", "are_all_axes_explicit", "are_all_axes_manual"):
        assert getattr(empty, kind) is getattr(jax_empty, kind) is False


# --- typed keys against other dtypes ---------------------------------------------------------


@pytest.mark.parametrize("other", ["int", "raw_key", "float_array"])
def test_keys_do_not_promote_against_other_dtypes(other):
    others = {"int": (1, 1), "raw_key": (remat.random.PRNGKey(0), jax.random.PRNGKey(0)),
              "float_array": (jnp.ones(()), jjnp.ones(()))}
    mine, theirs = others[other]
    for fn in ("equal", "not_equal", "add"):
        with pytest.raises(TypeError) as got:
            getattr(jnp, fn)(remat.random.key(0), mine)
        with pytest.raises(TypeError) as want:
            getattr(jjnp, fn)(jax.random.key(0), theirs)
        assert str(got.value) == str(want.value)
