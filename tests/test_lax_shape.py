"""Every shape primitive (broadcast_in_dim, reshape, transpose, squeeze, expand_dims, rev, pad,
concatenate, iota) and identity primitive (copy, optimization_barrier, stop_gradient), from one
table of cases: values against NumPy in several dtypes, dtypes and weak types against JAX,
parameter errors, derivatives by finite differences, vmap against a Python loop for leading,
inner and trailing batch axes (and mixed batched/unbatched operands), and jit."""

import re
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest

import remat
from remat import lax
from remat.config import config
from remat.lax import identity, shape
from remat.test_util import check_grads
from remat.tree_util import tree_leaves, tree_map

DTYPES = ["float32", "float64", "int32", "bool", "complex64"]


def _jax():
    return pytest.importorskip("jax")


def _rand(shape_, dtype, rng):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape_) < 0.5
    if dtype.kind in "iu":
        return rng.integers(-9, 10, shape_).astype(dtype)
    x = rng.standard_normal(shape_)
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape_)
    return x.astype(dtype)


# --- NumPy references ------------------------------------------------------------------------


def np_broadcast_in_dim(x, shape_, dims):
    expanded = [1] * len(shape_)
    for i, d in enumerate(dims):
        expanded[d] = x.shape[i]
    return np.broadcast_to(np.reshape(x, expanded), shape_)


def np_pad(x, value, config_):
    """Interior padding first, then low/high (negative: cropping), one axis at a time."""
    for axis, (lo, hi, interior) in enumerate(config_):
        n = x.shape[axis]
        if n and interior:
            grown = list(x.shape)
            grown[axis] = (n - 1) * (interior + 1) + 1
            out = np.full(grown, value, x.dtype)
            index = [slice(None)] * x.ndim
            index[axis] = slice(None, None, interior + 1)
            out[tuple(index)] = x
            x = out
        for amount, at_end in ((lo, False), (hi, True)):
            if amount > 0:
                extra = list(x.shape)
                extra[axis] = amount
                block = np.full(extra, value, x.dtype)
                x = np.concatenate([x, block] if at_end else [block, x], axis)
            elif amount < 0:
                index = [slice(None)] * x.ndim
                index[axis] = slice(None, amount) if at_end else slice(-amount, None)
                x = x[tuple(index)]
    return x


def np_iota(dtype, shape_, dimension):
    return np_broadcast_in_dim(np.arange(shape_[dimension], dtype=dtype), shape_, (dimension,))


# --- the table -------------------------------------------------------------------------------


class Case(NamedTuple):
    prim: object
    call: Callable        # call(L, *operands), L = remat.lax or jax.lax
    ref: Callable         # NumPy reference
    shapes: tuple         # operand shapes; a padding value is ()
    grad: str = "smooth"  # "smooth" | "zero" (stop_gradient) | "none" (no operands)
    jax_name: str = ""    # the primitive JAX stages for it, when JAX has no such primitive


S = shape
CASES = {
    "broadcast_in_dim_leading": Case(
        S.broadcast_in_dim_p, lambda L, x: L.broadcast_in_dim(x, (2, 3), (1,)),
        lambda x: np_broadcast_in_dim(x, (2, 3), (1,)), ((3,),)),
    "broadcast_in_dim_size1": Case(
        S.broadcast_in_dim_p, lambda L, x: L.broadcast_in_dim(x, (3, 4, 2), (0, 2)),
        lambda x: np_broadcast_in_dim(x, (3, 4, 2), (0, 2)), ((1, 2),)),
    "broadcast_in_dim_scalar": Case(
        S.broadcast_in_dim_p, lambda L, x: L.broadcast_in_dim(x, (2, 3), ()),
        lambda x: np.broadcast_to(x, (2, 3)), ((),)),
    "broadcast_in_dim_middle": Case(
        S.broadcast_in_dim_p, lambda L, x: L.broadcast_in_dim(x, (2, 4, 3), (0, 2)),
        lambda x: np_broadcast_in_dim(x, (2, 4, 3), (0, 2)), ((2, 3),)),
    "broadcast": Case(
        S.broadcast_in_dim_p, lambda L, x: L.broadcast(x, (2, 1)),
        lambda x: np.broadcast_to(x, (2, 1) + x.shape), ((3,),)),
    "reshape": Case(S.reshape_p, lambda L, x: L.reshape(x, (6, 4)),
                    lambda x: x.reshape(6, 4), ((2, 3, 4),)),
    "reshape_dimensions": Case(
        S.reshape_p, lambda L, x: L.reshape(x, (4, 6), dimensions=(2, 0, 1)),
        lambda x: np.transpose(x, (2, 0, 1)).reshape(4, 6), ((2, 3, 4),)),
    "reshape_to_scalar": Case(S.reshape_p, lambda L, x: L.reshape(x, ()),
                              lambda x: x.reshape(()), ((1, 1),)),
    "transpose": Case(S.transpose_p, lambda L, x: L.transpose(x, (2, 0, 1)),
                      lambda x: np.transpose(x, (2, 0, 1)), ((2, 3, 4),)),
    "transpose_2d": Case(S.transpose_p, lambda L, x: L.transpose(x, (1, 0)),
                         lambda x: x.T, ((3, 5),)),
    "squeeze": Case(S.squeeze_p, lambda L, x: L.squeeze(x, (0, 2)),
                    lambda x: np.squeeze(x, (0, 2)), ((1, 3, 1, 2),)),
    "squeeze_negative": Case(S.squeeze_p, lambda L, x: L.squeeze(x, (-1,)),
                             lambda x: x[..., 0], ((3, 1),)),
    "expand_dims": Case(S.broadcast_in_dim_p, lambda L, x: L.expand_dims(x, (0, 3)),
                        lambda x: np.expand_dims(x, (0, 3)), ((2, 3),)),
    "expand_dims_negative": Case(S.broadcast_in_dim_p, lambda L, x: L.expand_dims(x, (-1,)),
                                 lambda x: x[..., None], ((2, 3),)),
    "rev": Case(S.rev_p, lambda L, x: L.rev(x, (0,)), lambda x: x[::-1], ((3, 4),)),
    "rev_both": Case(S.rev_p, lambda L, x: L.rev(x, (0, 1)), lambda x: x[::-1, ::-1],
                     ((3, 4),)),
    "rev_last": Case(S.rev_p, lambda L, x: L.rev(x, (2,)), lambda x: x[..., ::-1],
                     ((2, 3, 4),)),
    "pad_edges": Case(S.pad_p, lambda L, x, v: L.pad(x, v, [(1, 2, 0)]),
                      lambda x, v: np_pad(x, v, [(1, 2, 0)]), ((4,), ())),
    "pad_interior": Case(S.pad_p, lambda L, x, v: L.pad(x, v, [(0, 0, 2)]),
                         lambda x, v: np_pad(x, v, [(0, 0, 2)]), ((4,), ())),
    "pad_negative": Case(S.pad_p, lambda L, x, v: L.pad(x, v, [(-1, 2, 1), (2, -3, 0)]),
                         lambda x, v: np_pad(x, v, [(-1, 2, 1), (2, -3, 0)]), ((3, 4), ())),
    "pad_crop_into_interior": Case(
        S.pad_p, lambda L, x, v: L.pad(x, v, [(-2, -1, 2), (0, 0, 0)]),
        lambda x, v: np_pad(x, v, [(-2, -1, 2), (0, 0, 0)]), ((3, 2), ())),
    "concatenate": Case(S.concatenate_p, lambda L, a, b, c: L.concatenate([a, b, c], 0),
                        lambda a, b, c: np.concatenate([a, b, c], 0), ((2, 3), (4, 3), (1, 3))),
    "concatenate_last": Case(S.concatenate_p, lambda L, a, b, c: L.concatenate([a, b, c], 1),
                             lambda a, b, c: np.concatenate([a, b, c], 1),
                             ((2, 1), (2, 3), (2, 2))),
    "iota": Case(S.iota_p, lambda L: L.iota(np.int32, 5), lambda: np.arange(5, dtype=np.int32),
                 (), grad="none"),
    "broadcasted_iota": Case(S.iota_p, lambda L: L.broadcasted_iota(np.float32, (2, 3), 1),
                             lambda: np_iota(np.float32, (2, 3), 1), (), grad="none"),
    "copy": Case(identity.copy_p, lambda L, x: L.copy(x) if L is lax else L.copy_p.bind(x),
                 np.copy, ((2, 3),)),
    "optimization_barrier": Case(
        identity.optimization_barrier_p, lambda L, x, y: L.optimization_barrier((x, [y])),
        lambda x, y: (x, [y]), ((2, 3), (4,))),
    "stop_gradient": Case(identity.stop_gradient_p, lambda L, x: L.stop_gradient(x),
                          lambda x: x, ((2, 3),), grad="zero"),
}
NAMES = sorted(CASES)
WITH_OPERANDS = [n for n in NAMES if CASES[n].shapes]


def _operands(case, dtype, seed=0, shapes=None):
    rng = np.random.default_rng(seed)
    return [_rand(s, dtype, rng) for s in (shapes or case.shapes)]


def _run(name):
    case = CASES[name]
    return lambda *xs: case.call(lax, *xs)


def _x64(dtype):
    return config.override("jax_enable_x64", np.dtype(dtype).itemsize == 8)


def _assert_tree_equal(actual, expected):
    la, le = tree_leaves(actual), tree_leaves(expected)
    assert len(la) == len(le)
    for a, e in zip(la, le):
        e = np.asarray(e)
        assert np.shape(a) == e.shape and np.asarray(a).dtype == e.dtype, (
            np.shape(a), e.shape, np.asarray(a).dtype, e.dtype)
        np.testing.assert_array_equal(np.asarray(a), e)


# --- the table covers the modules ------------------------------------------------------------


def test_every_primitive_is_in_the_table():
    prims = {getattr(m, n) for m in (shape, identity) for n in m.__all__ if n.endswith("_p")}
    missing = sorted(p.name for p in prims - {c.prim for c in CASES.values()})
    assert not missing, f"primitives without a table entry: {missing}"


def test_primitive_names_are_jaxs():
    jlax = _jax().lax
    for m in (shape, identity):
        for n in m.__all__:
            if n.endswith("_p"):
                assert getattr(m, n).name == getattr(jlax, n).name, n


# --- values, dtypes, weak types ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_values_against_numpy(name, dtype):
    case = CASES[name]
    with _x64(dtype):
        args = _operands(case, dtype)
        out = _run(name)(*args)
        expected = case.ref(*args)
        _assert_tree_equal(out, expected)
        for leaf in tree_leaves(out):
            # stop_gradient returns non-float leaves as they are (NumPy arrays here)
            assert not getattr(leaf, "aval", remat.core.get_aval(leaf)).weak_type


@pytest.mark.parametrize("name", WITH_OPERANDS)
def test_weak_types_propagate_like_jax(name):
    """A weakly typed operand (a Python scalar, or an array made from one) stays weak."""
    jax = _jax()
    case = CASES[name]
    strong = _operands(case, np.float32)
    weak = [lax.full(s, 1.5) for s in case.shapes]
    assert all(w.aval.weak_type for w in weak)
    for args in (strong, weak, [weak[0]] + strong[1:], strong[:1] + weak[1:]):
        jargs = [jax.numpy.full(s, 1.5) if isinstance(a, remat.Array) else a
                 for a, s in zip(args, case.shapes)]
        theirs = tree_leaves(jax.eval_shape(lambda *xs: case.call(jax.lax, *xs), *jargs))
        ours = tree_leaves(case.call(lax, *args))
        for o, t in zip(ours, theirs):
            assert (o.shape, o.dtype, o.aval.weak_type) == (t.shape, t.dtype, t.weak_type), (
                [a.aval.weak_type if hasattr(a, "aval") else False for a in args])


def test_weak_types_of_constructors():
    x = np.float32([1, 2])
    assert lax.broadcast_in_dim(2.0, (2, 3), ()).aval.weak_type
    assert lax.full((2,), 1.0).aval.weak_type
    assert not lax.full((2,), 1.0, np.float32).aval.weak_type
    assert not lax.full_like(x, 2).aval.weak_type
    assert lax.full_like(lax.full((2,), 1.0), 2).aval.weak_type
    assert lax.full_like(x, 2, np.int32).dtype == np.int32
    assert lax.full_like(x, 2, shape=(3, 1)).shape == (3, 1)
    np.testing.assert_array_equal(lax.zeros_like_array(np.int32([3, 4])), [0, 0])
    assert lax.iota(np.int32, 3).aval.weak_type is False
    with config.override("jax_enable_x64", False):
        assert lax.iota(np.int64, 3).dtype == np.int32
    # a Python padding value takes the operand's dtype, weakly (as in JAX)
    out = lax.pad(np.int32([1, 2]), 7, [(1, 0, 0)])
    assert out.dtype == np.int32 and not out.aval.weak_type
    np.testing.assert_array_equal(out, [7, 1, 2])
    assert lax.pad(lax.full((2,), 1.0), 0.0, [(1, 0, 0)]).aval.weak_type
    assert not lax.pad(lax.full((2,), 1.0), np.float32(0), [(1, 0, 0)]).aval.weak_type


def test_shortcuts_return_the_operand_itself():
    """As in JAX: no equation for a reshape to the same shape, an identity transpose, an empty
    squeeze or a single-operand concatenate."""
    x = lax.full((2, 3), 1.0, np.float32)
    assert lax.reshape(x, (2, 3)) is x
    assert lax.transpose(x, (0, 1)) is x
    assert lax.squeeze(x, ()) is x
    assert lax.concatenate([x], 0) is x
    assert lax.broadcast_in_dim(x, (2, 3), (0, 1)) is x
    jaxpr = remat.make_jaxpr(lambda x: lax.reshape(lax.transpose(x, (0, 1)), (2, 3)))(x)
    assert not jaxpr.jaxpr.eqns
    # but reshape with an identity `dimensions` to a new shape still reshapes
    np.testing.assert_array_equal(lax.reshape(x, (3, 2), (0, 1)), np.ones((3, 2)))


def test_zero_sized_operands():
    z = np.zeros((0, 3), np.float32)
    assert lax.pad(z, np.float32(1), [(1, 1, 2), (0, 0, 0)]).shape == (2, 3)
    np.testing.assert_array_equal(lax.pad(z, np.float32(1), [(1, 1, 2), (0, 0, 0)]),
                                  np.ones((2, 3)))
    assert lax.concatenate([z, np.ones((2, 3), np.float32)], 0).shape == (2, 3)
    assert lax.broadcast_in_dim(z, (4, 0, 3), (1, 2)).shape == (4, 0, 3)
    assert lax.reshape(z, (3, 0)).shape == (3, 0)
    assert lax.rev(z, (0, 1)).shape == (0, 3)
    assert lax.iota(np.int32, 0).shape == (0,)


def test_pad_values_match_jax():
    jax = _jax()
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    for config_ in ([(-1, 2, 1), (2, -3, 0)], [(0, 0, 3), (-2, -2, 1)], [(-3, 0, 2), (1, 1, 1)],
                    [(-5, -1, 2), (0, -4, 0)]):
        ours = lax.pad(x, np.float32(-1), config_)
        theirs = jax.lax.pad(x, np.float32(-1), config_)
        np.testing.assert_array_equal(ours, theirs, err_msg=str(config_))
        np.testing.assert_array_equal(ours, np_pad(x, np.float32(-1), config_))


# --- errors ------------------------------------------------------------------------------------

ERRORS = [
    # (function, exception, message pattern)
    (lambda: lax.broadcast_in_dim(np.ones(3), (2, 3), ()), TypeError,
     r"broadcast_in_dim broadcast_dimensions must have length equal to operand ndim.*\(\).*1"),
    (lambda: lax.broadcast_in_dim(np.ones((3, 2)), (2, 3), (1, 0)), TypeError,
     r"broadcast_in_dim broadcast_dimensions must be strictly increasing.*\(2, 3\).*\(1, 0\)"),
    (lambda: lax.broadcast_in_dim(np.ones(3), (2, 3), (2,)), TypeError,
     r"broadcast_in_dim broadcast_dimensions must be strictly increasing.*\(2, 3\).*\(2,\)"),
    (lambda: lax.broadcast_in_dim(np.ones((3, 2)), (2, 3), (0, 0)), TypeError,
     r"broadcast_in_dim broadcast_dimensions must be strictly increasing.*\(0, 0\)"),
    (lambda: lax.broadcast_in_dim(np.ones(3), (2, 4), (1,)), TypeError,
     r"broadcast_in_dim operand dimension sizes must either be 1.*\(3,\).*\(2, 4\)"),
    (lambda: lax.broadcast_in_dim(np.ones(3), (2, -1), (1,)), TypeError,
     r"broadcast_in_dim shape must have every element be nonnegative.*\(2, -1\)"),
    (lambda: lax.reshape(np.ones((2, 3)), (4, 2)), TypeError,
     r"reshape total size must be unchanged.*\(4, 2\).*\(2, 3\)"),
    (lambda: lax.reshape(np.ones((2, 3)), (3, 2), (0, 0)), TypeError,
     r"reshape dimensions must be a permutation.*\(0, 0\).*\(2, 3\)"),
    (lambda: lax.reshape(np.ones((2, 3)), (3, 2), (1, 2)), TypeError,
     r"reshape dimensions must be a permutation.*\(1, 2\).*\(2, 3\)"),
    (lambda: lax.transpose(np.ones((2, 3)), (0, 0)), TypeError,
     r"transpose permutation isn't a permutation.*\(0, 0\).*\(2, 3\)"),
    (lambda: lax.transpose(np.ones((2, 3)), (1, 0, 2)), TypeError,
     r"transpose permutation isn't a permutation.*\(1, 0, 2\).*\(2, 3\)"),
    (lambda: lax.squeeze(np.ones((1, 3)), (1,)), ValueError,
     r"cannot select an axis to squeeze out which has size not equal to one.*\(1, 3\).*\(1,\)"),
    (lambda: lax.squeeze(np.ones((1, 3)), (2,)), ValueError,
     r"squeeze: axis 2 is out of bounds for array of dimension 2"),
    (lambda: lax.expand_dims(np.ones((1, 3)), (3,)), ValueError,
     r"expand_dims: axis 3 is out of bounds for array of dimension 3"),
    (lambda: lax.rev(np.ones((2, 3)), (2,)), ValueError,
     r"rev dimensions must be unique axes.*\(2,\).*\(2, 3\)"),
    (lambda: lax.rev(np.ones((2, 3)), (0, 0)), ValueError,
     r"rev dimensions must be unique axes.*\(0, 0\).*\(2, 3\)"),
    (lambda: lax.pad(np.ones((2, 3)), 0.0, [(1, 1, 0)]), ValueError,
     r"pad padding_config has length 1 but the operand has 2 dimensions"),
    (lambda: lax.pad(np.ones(3), 0.0, [(0, 0, -1)]), ValueError,
     r"pad interior padding must be nonnegative"),
    (lambda: lax.pad(np.ones(3), 0.0, [(-2, -2, 0)]), ValueError,
     r"pad produces a negative dimension from shape \(3,\).*\(-2, -2, 0\)"),
    (lambda: lax.pad(np.ones(3, np.float32), np.ones(2, np.float32), [(0, 0, 0)]), TypeError,
     r"pad padding_value must be a scalar.*\(2,\)"),
    (lambda: lax.pad(np.ones(3, np.float32), np.int32(0), [(0, 0, 0)]), TypeError,
     r"pad requires arguments to have the same dtypes.*float32.*int32"),
    (lambda: lax.concatenate([np.ones((2, 3)), np.ones((2, 4))], 0), TypeError,
     r"concatenate requires operand shapes to be equal except in the concatenated dimension 0"
     r".*\(2, 3\).*\(2, 4\)"),
    (lambda: lax.concatenate([np.ones((2, 3)), np.ones(3)], 0), TypeError,
     r"concatenate requires operands of equal rank.*\(2, 3\).*\(3,\)"),
    (lambda: lax.concatenate([np.ones((2, 3)), np.ones((2, 3))], 2), TypeError,
     r"concatenate requires operands of equal rank with 0 <= dimension < rank.*dimension 2"),
    (lambda: lax.concatenate([np.ones(3, np.float32), np.ones(3, np.int32)], 0), TypeError,
     r"concatenate requires arguments to have the same dtypes.*float32.*int32"),
    (lambda: lax.concatenate([], 0), TypeError, r"concatenate requires at least one operand"),
    (lambda: lax.broadcasted_iota(np.int32, (2, 3), 2), ValueError,
     r"iota dimension must be between 0 and len\(shape\) 2, got dimension=2"),
    (lambda: lax.iota(np.int32, -1), TypeError,
     r"iota shape must have every element be nonnegative"),
    (lambda: lax.broadcasted_iota(np.int32, (2, -3), 0), TypeError,
     r"iota shape must have every element be nonnegative.*\(2, -3\)"),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_parameter_errors(i):
    fn, exc, pattern = ERRORS[i]
    with pytest.raises(exc, match=pattern):
        fn()


def test_errors_are_raised_when_staging():
    with pytest.raises(TypeError, match="reshape total size must be unchanged"):
        remat.make_jaxpr(lambda x: lax.reshape(x, (5,)))(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="transpose permutation"):
        remat.jit(lambda x: lax.transpose(x, (0, 0)))(np.ones((2, 3), np.float32))


# --- derivatives -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in WITH_OPERANDS if CASES[n].grad == "smooth"])
def test_grads(name):
    case = CASES[name]
    check_grads(_run(name), _operands(case, np.float32, seed=1), order=2, modes=("fwd", "rev"))


def test_pad_gradients_by_hand():
    """The padding value's cotangent is the sum over padded (not cropped) positions."""
    x = np.arange(1, 5, dtype=np.float32)
    config_ = [(-1, 2, 1)]  # [1 p 2 p 3 p 4] -> crop 1 low, add 2 high: [p 2 p 3 p 4 p p]
    f = lambda x, v: lax.pad(x, v, config_)  # noqa: E731
    out = f(x, np.float32(0))
    np.testing.assert_array_equal(out, [0, 2, 0, 3, 0, 4, 0, 0])
    ct = np.arange(1, 9, dtype=np.float32)
    gx, gv = remat.vjp(f, x, np.float32(0))[1](ct)
    np.testing.assert_array_equal(gx, [0, 2, 4, 6])  # x[0] was cropped
    assert gv == 1 + 3 + 5 + 7 + 8
    # the padding value alone (operand not differentiated)
    gv = remat.grad(lambda v: lax.reduce_sum(f(x, v), (0,)))(np.float32(3))
    assert gv == 5


def test_concatenate_gradients_by_hand():
    a, b, c = (np.full(s, k, np.float32) for s, k in (((2, 3), 1), ((4, 3), 2), ((1, 3), 3)))
    ct = np.arange(21, dtype=np.float32).reshape(7, 3)
    ga, gb, gc = remat.vjp(lambda a, b, c: lax.concatenate([a, b, c], 0), a, b, c)[1](ct)
    np.testing.assert_array_equal(ga, ct[:2])
    np.testing.assert_array_equal(gb, ct[2:6])
    np.testing.assert_array_equal(gc, ct[6:])
    # only the middle operand differentiated, in forward and reverse mode
    _, t = remat.jvp(lambda b: lax.concatenate([a, b, c], 0), (b,), (np.ones_like(b),))
    np.testing.assert_array_equal(t, np.concatenate([0 * a, np.ones_like(b), 0 * c]))
    (g,) = remat.vjp(lambda b: lax.concatenate([a, b, c], 0), b)[1](ct)
    np.testing.assert_array_equal(g, ct[2:6])


def test_broadcast_in_dim_gradient_sums_broadcast_axes():
    x = np.float32([[1.0], [2.0]])  # (2, 1) -> (3, 2, 4): a new axis and a size-1 axis
    ct = np.arange(24, dtype=np.float32).reshape(3, 2, 4)
    (g,) = remat.vjp(lambda x: lax.broadcast_in_dim(x, (3, 2, 4), (1, 2)), x)[1](ct)
    np.testing.assert_array_equal(g, ct.sum((0, 2))[:, None])


def test_reshape_with_dimensions_gradient_by_hand():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    ct = np.arange(24, dtype=np.float32).reshape(4, 6) * 10
    (g,) = remat.vjp(lambda x: lax.reshape(x, (4, 6), (2, 0, 1)), x)[1](ct)
    np.testing.assert_array_equal(g, np.transpose(ct.reshape(4, 2, 3), (1, 2, 0)))


def test_stop_gradient_has_zero_derivative():
    x = np.float32([1.0, -2.0, 3.0])
    g = remat.grad(lambda x: lax.reduce_sum(lax.mul(lax.stop_gradient(x), x), (0,)))(x)
    np.testing.assert_array_equal(g, x)  # only the unstopped factor
    _, t = remat.jvp(lax.stop_gradient, (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(t, [0, 0, 0])
    g = remat.grad(lambda x: lax.reduce_sum(lax.stop_gradient(x), (0,)))(x)
    np.testing.assert_array_equal(g, [0, 0, 0])
    # second order through a stopped term
    h = remat.grad(remat.grad(lambda s: lax.mul(lax.stop_gradient(lax.square(s)), s)))(
        np.float32(3))
    assert h == 0
    # pytrees; integer leaves pass through unchanged (no primitive)
    tree = {"a": x, "n": np.int32([1, 2])}
    out = lax.stop_gradient(tree)
    np.testing.assert_array_equal(out["a"], x)
    np.testing.assert_array_equal(out["n"], [1, 2])
    text = str(remat.make_jaxpr(lax.stop_gradient)(tree))
    assert text.count("stop_gradient") == 1


def test_optimization_barrier_derivatives_and_pytrees():
    x, y = np.float32([1.0, 2.0]), np.float32([3.0])
    f = lambda x, y: lax.optimization_barrier((lax.sin(x), {"y": lax.mul(y, y)}))  # noqa: E731
    check_grads(f, (x, y), order=2, modes=("fwd", "rev"))
    # a derivative with respect to one leaf only: the other tangent stays symbolic zero
    _, t = remat.jvp(lambda x: lax.optimization_barrier((x, y)), (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(t[0], [1, 1])
    np.testing.assert_array_equal(t[1], [0])
    text = str(remat.make_jaxpr(lambda x: remat.grad(
        lambda x: lax.reduce_sum(lax.optimization_barrier(lax.sin(x)), (0,)))(x))(x))
    assert text.count("optimization_barrier") >= 2  # forward and transposed


def test_copy_is_a_real_copy():
    x = np.float32([1, 2])
    out = lax.copy(x)
    np.testing.assert_array_equal(out, x)
    assert not np.shares_memory(np.asarray(out), x)
    check_grads(lax.copy, (x,), order=2, modes=("fwd", "rev"))


# --- vmap --------------------------------------------------------------------------------------

B = 3


def _batched(case, dtype, seed=0):
    ex = [_operands(case, dtype, seed=seed + b) for b in range(B)]
    return [np.stack([e[i] for e in ex]) for i in range(len(case.shapes))]


def _loop(f, args, in_axes):
    outs = []
    for b in range(B):
        outs.append(f(*[a if ax is None else np.take(a, b, axis=ax)
                        for a, ax in zip(args, in_axes)]))
    return tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *outs)


def _check_vmap(f, args, in_axes):
    expected = _loop(f, args, in_axes)
    out = remat.vmap(f, in_axes=tuple(in_axes))(*args)
    _assert_tree_equal(out, expected)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("name", WITH_OPERANDS)
def test_vmap_all_batched(name, axis):
    case = CASES[name]
    batched = _batched(case, np.float32)
    axes = [axis if (axis == 0 or len(s) >= 1) else 0 for s in case.shapes]
    _check_vmap(_run(name), [np.moveaxis(a, 0, ax) for a, ax in zip(batched, axes)], axes)


@pytest.mark.parametrize("name", [n for n in WITH_OPERANDS if len(CASES[n].shapes) > 1])
def test_vmap_mixed(name):
    """Each operand alone batched (the others shared), and different axes per operand."""
    case = CASES[name]
    f = _run(name)
    batched = _batched(case, np.float32)
    single = _operands(case, np.float32, seed=9)
    n = len(case.shapes)
    for i in range(n):
        _check_vmap(f, [batched[j] if j == i else single[j] for j in range(n)],
                    [0 if j == i else None for j in range(n)])
        _check_vmap(f, [single[j] if j == i else batched[j] for j in range(n)],
                    [None if j == i else 0 for j in range(n)])
    axes = [(-1, 1, 0)[j] if len(s) else 0 for j, s in enumerate(case.shapes)]
    _check_vmap(f, [np.moveaxis(b, 0, ax) for b, ax in zip(batched, axes)], axes)


def test_vmap_pad_batched_padding_value_with_negative_and_interior_padding():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    vs = np.float32([7, 8, 9])
    for config_ in ([(-1, 2, 1), (2, -3, 0)], [(1, 1, 2), (0, 0, 0)]):
        f = lambda x, v, c=config_: lax.pad(x, v, c)  # noqa: E731
        _check_vmap(f, [x, vs], [None, 0])
        xb = rng.standard_normal((3, 4, B)).astype(np.float32)
        _check_vmap(f, [xb, vs], [2, 0])


def test_vmap_iota_and_constructors_inside():
    """Unbatched constants built inside a batched function."""
    x = np.arange(6, dtype=np.float32).reshape(B, 2)
    f = lambda x: lax.add(x, lax.broadcasted_iota(np.float32, (2,), 0))  # noqa: E731
    _check_vmap(f, [x], [0])
    g = lambda x: lax.concatenate([x, lax.full((1,), 5.0, np.float32)], 0)  # noqa: E731
    _check_vmap(g, [x], [0])


def test_nested_vmap():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    cases = [
        lambda x: lax.transpose(x, (1, 0)),
        lambda x: lax.reshape(x, (4, 2), dimensions=(1, 0)),
        lambda x: lax.pad(x, np.float32(0), [(1, -1, 1), (0, 1, 0)]),
        lambda x: lax.broadcast_in_dim(x, (2, 4, 1), (0, 2)),
        lambda x: lax.concatenate([x, x, x[:1]], 0),
        lambda x: lax.rev(lax.expand_dims(x, (0,)), (1,)),
        lambda x: lax.squeeze(lax.expand_dims(x, (2,)), (2,)),
    ]
    for f in cases:
        # outer over axis 1, inner over axis 2 of the (2, 4, 5) slices: examples of shape (2, 4)
        # for broadcast_in_dim (2, 4) -> dims (0, 2) needs a (2, 1) operand: slice it
        g = f if f is not cases[3] else (lambda x, f=f: f(x[:, :1]))
        out = remat.vmap(remat.vmap(g, in_axes=2), in_axes=1)(x)
        expected = np.stack([np.stack([np.asarray(g(x[:, i, :, j])) for j in range(5)])
                             for i in range(3)])
        _assert_tree_equal(out, expected)


def test_vmap_of_grad_of_pad_and_concatenate():
    rng = np.random.default_rng(8)
    xs = rng.standard_normal((B, 4)).astype(np.float32)
    vs = np.float32([1, 2, 3])

    def loss(x, v):
        y = lax.pad(x, v, [(1, -1, 1)])
        z = lax.concatenate([y, lax.mul(x, x)], 0)
        return lax.reduce_sum(lax.mul(z, z), (0,))

    g = remat.vmap(remat.grad(loss, (0, 1)))(xs, vs)
    for b in range(B):
        ref = remat.grad(loss, (0, 1))(xs[b], vs[b])
        np.testing.assert_allclose(g[0][b], ref[0], rtol=1e-6)
        np.testing.assert_allclose(g[1][b], ref[1], rtol=1e-6)


# --- jit ---------------------------------------------------------------------------------------

VIEWS = [n for n in WITH_OPERANDS if len(CASES[n].shapes) == 1 and CASES[n].shapes[0]]


@pytest.mark.parametrize("name", VIEWS)
def test_jit_never_overwrites_a_value_another_one_views(name):
    """Shape impls return NumPy views; the executor's in-place ufunc steps must not write
    into a dying view whose base is still live (or the other way round)."""
    case = CASES[name]
    x = _operands(case, np.float32)[0]
    view = _run(name)

    def f(x):
        y = lax.mul(x, 2.0)
        z = view(y)
        return lax.neg(z), y, lax.sin(lax.copy(y)), z

    def g(x):
        y = lax.mul(x, 2.0)
        return lax.add(view(y), 1.0), lax.neg(y)

    for h in (f, g):
        expected = tree_map(np.asarray, h(x))
        _assert_tree_equal(remat.jit(h)(x), expected)
        _assert_tree_equal(remat.jit(h)(x), expected)  # and from the cached plan




@pytest.mark.parametrize("name", NAMES)
def test_jit_matches_eager_and_stages_the_primitive(name):
    case = CASES[name]
    f = _run(name)
    args = _operands(case, np.float32)
    _assert_tree_equal(remat.jit(f)(*args), tree_map(np.asarray, f(*args)))
    text = str(remat.make_jaxpr(remat.jit(f))(*args))
    assert re.search(rf"= {re.escape(case.prim.name)}[\[ ]", text), text
    assert "jit[" in text
    if case.jax_name:  # JAX stages another primitive for it
        jax = _jax()
        assert f"= {case.jax_name}[" in str(jax.make_jaxpr(lambda *xs: case.call(jax.lax, *xs))(
            *args))
