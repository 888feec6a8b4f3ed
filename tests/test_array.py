"""The eager Array: immutability, repr, NumPy interop, operators and methods (shared with
tracers), Python conversions, and its memory accounting."""

import copy
import gc

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax, memory
from remat.errors import ConcretizationTypeError


def arr(x, dtype=None):
    return jnp.asarray(np.asarray(x, dtype=dtype))


# --- immutability ----------------------------------------------------------------------------


def test_buffer_is_read_only():
    x = arr([1.0, 2.0], np.float32)
    assert not x._buf.flags.writeable
    with pytest.raises(ValueError):
        x._buf[0] = 5.0
    # the view NumPy gets is read-only too, so np.asarray(x) cannot mutate x
    with pytest.raises(ValueError):
        np.asarray(x)[0] = 5.0
    assert x.tolist() == [1.0, 2.0]


def test_item_assignment_raises_like_jax():
    x = arr([1.0, 2.0], np.float32)
    with pytest.raises(TypeError) as info:
        x[0] = 1.0
    assert str(info.value).startswith("'Array' object does not support item assignment. JAX "
                                      "arrays are immutable.")
    assert "x.at[idx].set(y)" in str(info.value)


def test_array_cannot_be_constructed_directly():
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        remat.Array(np.zeros(3))


# --- repr / str ------------------------------------------------------------------------------


def test_repr_like_jax():
    assert repr(arr([1.0, 2.0], np.float32)) == "Array([1., 2.], dtype=float32)"
    assert repr(lax.full((), 2.0)) == "Array(2., dtype=float32, weak_type=True)"
    assert repr(arr([[1, 2], [3, 4]], np.int32)) == ("Array([[1, 2],\n"
                                                     "       [3, 4]], dtype=int32)")
    assert repr(arr([True], bool)) == "Array([ True], dtype=bool)"
    assert str(arr([1.0, 2.0], np.float32)) == "[1. 2.]"
    assert f"{arr(np.float32(1.5)):.2f}" == "1.50"


# --- NumPy interop ---------------------------------------------------------------------------


def test_array_protocol():
    x = arr([1.0, 2.5], np.float32)
    a = np.asarray(x)
    assert isinstance(a, np.ndarray) and a.dtype == np.float32
    np.testing.assert_array_equal(a, [1.0, 2.5])
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    b = np.array(x, copy=True)
    assert b.flags.writeable
    b[0] = 7  # a copy: x is unchanged
    assert float(x[0]) == 1.0
    assert np.sum(x) == 3.5  # NumPy functions accept Arrays


def test_numpy_operands_on_either_side():
    x = arr([1.0, 2.0], np.float32)
    out = np.ones(2) + x  # NumPy defers to Array's reflected operator
    assert isinstance(out, remat.Array) and out.dtype == np.float32
    out = x * np.ones(2)
    assert isinstance(out, remat.Array) and out.dtype == np.float32
    out = np.float32(2) * arr([1.0], np.float16)
    assert isinstance(out, remat.Array) and out.dtype == np.float32
    out = np.ones(2) < x  # comparisons too
    assert isinstance(out, remat.Array) and out.tolist() == [False, True]
    q, r = divmod(np.full(2, 3.0), x)
    assert isinstance(q, remat.Array) and q.tolist() == [3.0, 1.0] and r.tolist() == [0.0, 1.0]


def test_tracer_array_conversion_is_an_error():
    def f(x):
        return np.asarray(x)

    with pytest.raises(TypeError, match="__array__"):
        remat.make_jaxpr(f)(np.zeros(2, np.float32))


# --- operators -------------------------------------------------------------------------------

F32 = np.array([1.0, 2.0, 3.0], np.float32)
I32 = np.array([0, 1, 2], np.int32)

SCALAR_OPS = [
    # (description, function of (f32 array, i32 array), dtype, weak_type)
    ("f32 + 1", lambda f, i: f + 1, np.float32, False),
    ("f32 * 2.5", lambda f, i: f * 2.5, np.float32, False),
    ("1 - f32", lambda f, i: 1 - f, np.float32, False),
    ("i32 + 1", lambda f, i: i + 1, np.int32, False),
    ("i32 * 2.5", lambda f, i: i * 2.5, np.float32, True),
    ("i32 / 2", lambda f, i: i / 2, np.float32, False),
    ("2 ** i32", lambda f, i: 2 ** i, np.int32, False),
    ("i32 ** 2", lambda f, i: i ** 2, np.int32, False),
    ("f32 ** 2", lambda f, i: f ** 2, np.float32, False),
    ("i32 // 2", lambda f, i: i // 2, np.int32, False),
    ("i32 % 2", lambda f, i: i % 2, np.int32, False),
    ("7 % i32+1", lambda f, i: 7 % (i + 1), np.int32, False),
    ("True + i32", lambda f, i: True + i, np.int32, False),
    ("f32 + True", lambda f, i: f + True, np.float32, False),
    ("1j * f32", lambda f, i: 1j * f, np.complex64, False),
    ("f32 < 2", lambda f, i: f < 2, np.bool_, False),
    ("2 >= f32", lambda f, i: 2 >= f, np.bool_, False),
    ("i32 == 1", lambda f, i: i == 1, np.bool_, False),
    ("i32 != 1", lambda f, i: i != 1, np.bool_, False),
    ("-i32", lambda f, i: -i, np.int32, False),
    ("+f32", lambda f, i: +f, np.float32, False),
    ("abs(-f32)", lambda f, i: abs(-f), np.float32, False),
    ("~i32", lambda f, i: ~i, np.int32, False),
    ("i32 & 1", lambda f, i: i & 1, np.int32, False),
    ("1 | i32", lambda f, i: 1 | i, np.int32, False),
    ("i32 ^ 3", lambda f, i: i ^ 3, np.int32, False),
    ("f32 @ f32", lambda f, i: f @ f, np.float32, False),
    ("f32 @ numpy", lambda f, i: f @ np.ones((3, 2), np.float32), np.float32, False),
    ("numpy @ f32", lambda f, i: np.ones((2, 3), np.float32) @ f, np.float32, False),
]


@pytest.mark.parametrize("desc,fun,dtype,weak", SCALAR_OPS, ids=[c[0] for c in SCALAR_OPS])
def test_operators_match_numpy_with_jax_dtypes(desc, fun, dtype, weak):
    out = fun(jnp.asarray(F32), jnp.asarray(I32))
    assert isinstance(out, remat.Array)
    assert out.dtype == dtype
    assert out.weak_type == weak
    np.testing.assert_allclose(np.asarray(out), fun(F32, I32).astype(dtype), rtol=1e-6)
    # the same operators on tracers
    staged = remat.jit(fun)(F32, I32)
    assert staged.dtype == dtype
    np.testing.assert_allclose(np.asarray(staged), np.asarray(out), rtol=1e-6)


def test_weak_types_combine_like_jax():
    w = lax.full((), 2.0)
    assert (w + 1).weak_type and (w * w).weak_type
    assert (w + 1).dtype == np.float32
    assert not (w + jnp.asarray(F32)).weak_type
    h = arr([1.0], np.float16)
    assert (h + 1.0).dtype == np.float16
    i8 = arr([1], np.int8)
    assert (i8 + 1).dtype == np.int8


def test_bool_operators():
    b = arr([True, False, True], bool)
    np.testing.assert_array_equal(np.asarray(b & True), [True, False, True])
    np.testing.assert_array_equal(np.asarray(~b), [False, True, False])
    np.testing.assert_array_equal(np.asarray(b | arr([False, True, False], bool)), [1, 1, 1])
    assert (b ^ b).dtype == np.bool_


def test_divmod_and_round():
    x = arr([7, -7, 5], np.int32)
    q, r = divmod(x, 3)
    np.testing.assert_array_equal(np.asarray(q), [2, -3, 1])
    np.testing.assert_array_equal(np.asarray(r), [1, 2, 2])
    q, r = divmod(10, arr([3, 4], np.int32))
    np.testing.assert_array_equal(np.asarray(q), [3, 2])
    np.testing.assert_array_equal(np.asarray(r), [1, 2])
    out = round(arr(np.float32(2.7)))
    assert out.dtype == np.int32 and int(out) == 3
    np.testing.assert_allclose(np.asarray(round(arr([1.26, 2.31], np.float32), 1)), [1.3, 2.3])


@pytest.mark.parametrize("other", ["a", None, object(), {1: 2}])
def test_unsupported_operands_raise_type_error(other):
    x = arr([1.0, 2.0], np.float32)
    for op in (lambda: x + other, lambda: other + x, lambda: x * other, lambda: x @ other,
               lambda: x < other, lambda: x ** other, lambda: x & other):
        with pytest.raises(TypeError):
            op()


def test_equality_with_non_arrays():
    x = arr([1.0, 2.0], np.float32)
    assert (x == None) is False  # noqa: E711  (Python's identity fallback, as in JAX)
    assert (x != None) is True  # noqa: E711
    assert (x == "a") is False
    with pytest.raises(TypeError, match="unsupported operand type"):
        _ = x == [1.0, 2.0]
    with pytest.raises(TypeError, match="unsupported operand type"):
        x + [1.0, 2.0]


def test_operator_methods_return_not_implemented():
    x = arr([1.0], np.float32)
    assert x.__add__("a") is NotImplemented
    assert x.__rmul__(None) is NotImplemented
    assert x.__lt__(object()) is NotImplemented


def test_contains():
    x = arr([1.0, 2.0], np.float32)
    assert 2.0 in x and 3.0 not in x


# --- methods ---------------------------------------------------------------------------------

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 5

METHODS = [
    ("reshape tuple", lambda a: a.reshape((4, 6))),
    ("reshape varargs", lambda a: a.reshape(4, -1)),
    ("reshape order", lambda a: a.reshape((6, 4), order="C")),
    ("ravel", lambda a: a.ravel()),
    ("flatten", lambda a: a.flatten()),
    ("squeeze", lambda a: a[:1].squeeze()),
    ("squeeze axis", lambda a: a[:, :1].squeeze(axis=1)),
    ("transpose", lambda a: a.transpose()),
    ("transpose varargs", lambda a: a.transpose(2, 0, 1)),
    ("transpose tuple", lambda a: a.transpose((1, 2, 0))),
    ("swapaxes", lambda a: a.swapaxes(0, 2)),
    ("T", lambda a: a.T),
    ("mT", lambda a: a.mT),
    ("sum", lambda a: a.sum()),
    ("sum axis", lambda a: a.sum(axis=1)),
    ("sum keepdims", lambda a: a.sum(axis=(0, 2), keepdims=True)),
    ("mean", lambda a: a.mean(0)),
    ("var", lambda a: a.var(axis=2)),
    ("std", lambda a: a.std()),
    ("max", lambda a: a.max(axis=-1)),
    ("min", lambda a: a.min()),
    ("prod", lambda a: (a[0] / 4).prod(axis=0)),
    ("argmax", lambda a: a.argmax()),
    ("argmin axis", lambda a: a.argmin(axis=1)),
    ("all", lambda a: (a > -6).all()),
    ("any axis", lambda a: (a > 10).any(axis=0)),
    ("cumsum", lambda a: a.cumsum(axis=1)),
    ("cumprod", lambda a: (a[0] / 4).cumprod(axis=1)),
    ("clip", lambda a: a.clip(-1, 3)),
    ("round", lambda a: (a / 3).round(1)),
    ("conj", lambda a: a.conj()),
    ("conjugate", lambda a: a.conjugate()),
    ("real", lambda a: a.real),
    ("imag", lambda a: a.imag),
    ("dot", lambda a: a[0].dot(a[1].T)),
    ("astype", lambda a: a.astype(np.int32)),
    ("copy", lambda a: a.copy()),
    ("repeat", lambda a: a[0].repeat(2, axis=0)),
    ("take", lambda a: a.take(np.array([0, 5, 7]))),
    ("take axis", lambda a: a.take(np.array([2, 0]), axis=2)),
]


@pytest.mark.parametrize("desc,fun", METHODS, ids=[m[0] for m in METHODS])
def test_methods_match_numpy(desc, fun):
    want = fun(A)
    got = fun(jnp.asarray(A))
    assert isinstance(got, remat.Array)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    staged = remat.jit(fun)(A)  # the methods exist on tracers as well
    np.testing.assert_allclose(np.asarray(staged), want, rtol=1e-5, atol=1e-6)


def test_sort_methods():
    if not hasattr(jnp, "sort"):
        pytest.skip("remat.numpy.sort is not implemented")
    a = np.array([[3.0, 1.0, 2.0], [0.0, -1.0, 5.0]], np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(a).sort(axis=1)), np.sort(a, 1))
    np.testing.assert_array_equal(np.asarray(jnp.asarray(a).argsort(axis=1)),
                                  np.argsort(a, 1))


def test_nonzero_method():
    a = np.array([[0, 1], [2, 0]], np.int32)
    for got, want in zip(jnp.asarray(a).nonzero(), a.nonzero()):
        np.testing.assert_array_equal(np.asarray(got), want)


def test_matrix_transpose_needs_two_dims():
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        _ = jnp.asarray(F32).mT


def test_copy_module_and_copy_method_make_new_buffers():
    x = arr([1.0, 2.0], np.float32)
    for y in (x.copy(), copy.copy(x), copy.deepcopy(x)):
        assert isinstance(y, remat.Array)
        assert y._buf is not x._buf
        np.testing.assert_array_equal(np.asarray(y), [1.0, 2.0])


def test_itemsize_nbytes_and_item_on_tracers():
    def f(x):
        assert x.itemsize == 4 and x.nbytes == 12
        return x

    remat.make_jaxpr(f)(F32)
    with pytest.raises(ConcretizationTypeError):
        remat.make_jaxpr(lambda x: x.item())(np.float32(1))
    with pytest.raises(ConcretizationTypeError):
        remat.make_jaxpr(lambda x: x.tolist())(F32)


# --- Python protocols ------------------------------------------------------------------------


def test_len_and_iteration():
    x = jnp.asarray(A)
    assert len(x) == 2
    rows = list(x)
    assert len(rows) == 2 and all(isinstance(r, remat.Array) for r in rows)
    np.testing.assert_array_equal(np.asarray(rows[1]), A[1])
    assert [int(v) for v in arr([3, 1, 2], np.int32)] == [3, 1, 2]
    s = arr(np.float32(1.0))
    with pytest.raises(TypeError, match="len"):
        len(s)
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        iter(s)


def test_iteration_over_tracer():
    def f(x):
        a, b, c = x
        return a + b * c

    np.testing.assert_allclose(np.asarray(remat.jit(f)(F32)), 1.0 + 2.0 * 3.0)


def test_scalar_conversions():
    assert float(arr(np.float32(2.5))) == 2.5
    assert int(arr(np.int32(3))) == 3
    assert int(arr(np.float32(3.7))) == 3
    assert bool(arr([1.0], np.float32)) is True
    assert bool(arr(np.float32(0.0))) is False
    assert complex(arr(np.float32(1.0))) == 1 + 0j
    assert arr(np.int32(2)).item() == 2 and arr([[1, 2]], np.int32).tolist() == [[1, 2]]
    assert [10, 20, 30][arr(np.int32(1))] == 20  # __index__
    with pytest.raises(TypeError):
        [10, 20][arr(np.float32(1))]
    with pytest.raises(ValueError, match="ambiguous"):
        bool(arr([1.0, 2.0], np.float32))


def test_tracer_conversions_raise():
    with pytest.raises(ConcretizationTypeError):
        remat.make_jaxpr(lambda x: float(x))(np.float32(1))
    with pytest.raises(ConcretizationTypeError):
        remat.make_jaxpr(lambda x: 1 if x > 0 else 0)(np.float32(1))


def test_block_until_ready_and_hash():
    x = arr([1.0], np.float32)
    assert x.block_until_ready() is x
    assert remat.block_until_ready(x) is x
    with pytest.raises(TypeError, match="unhashable"):
        hash(x)


def test_properties():
    x = jnp.asarray(A)
    assert x.shape == (2, 3, 4) and x.ndim == 3 and x.size == 24
    assert x.dtype == np.float32 and x.itemsize == 4 and x.nbytes == 96
    assert not x.weak_type


# --- memory accounting -----------------------------------------------------------------------


def _live():
    gc.collect()
    return memory.live_bytes()


def test_creating_and_deleting_arrays_counts_exact_bytes():
    base = _live()
    x = jnp.asarray(np.arange(1000, dtype=np.float32))
    assert _live() - base == x.nbytes == 4000
    y = x + 1.0  # a fresh result buffer
    assert _live() - base == 8000
    del y
    assert _live() - base == 4000
    del x
    assert _live() == base


def test_views_add_no_bytes_and_keep_the_base_alive():
    base = _live()
    x = jnp.asarray(np.arange(600, dtype=np.float64).astype(np.float32))
    assert _live() - base == 2400
    r = x.reshape(20, 30)
    t = r.T
    s = x[10:20]
    assert _live() - base == 2400  # reshape, transpose and basic slices are views
    del x
    assert _live() - base == 2400  # the views keep the base's buffer counted
    del r, s
    assert _live() - base == 2400
    np.testing.assert_array_equal(np.asarray(t)[:, 0], np.arange(30))
    del t
    assert _live() == base


def test_tracing_allocates_nothing():
    x = jnp.asarray(np.ones(256, np.float32))
    base = _live()
    remat.make_jaxpr(lambda x: (x * 2.0).sum())(x)
    assert _live() == base
