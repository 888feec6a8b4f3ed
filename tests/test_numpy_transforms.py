"""Every differentiable remat.numpy function under the transformations: gradients (forward
and reverse, to second order) against finite differences, ``vmap`` (over a non-leading axis)
against a Python loop, and ``jit`` against eager evaluation."""

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat.test_util import check_grads
from remat.tree_util import tree_leaves, tree_map

RNG = np.random.default_rng(4)


def r(*shape):
    return RNG.normal(size=shape).astype(np.float32)


def pos(*shape):
    return (np.abs(r(*shape)) + 0.5).astype(np.float32)


def unit(*shape):
    return (np.tanh(r(*shape)) * 0.9).astype(np.float32)


X, Y = r(3, 4), r(3, 4)
ORDER = np.argsort(X, axis=1)

CASES = [
    ("sqrt", jnp.sqrt, (pos(3, 4),)), ("cbrt", jnp.cbrt, (pos(3),)), ("exp", jnp.exp, (X,)),
    ("exp2", jnp.exp2, (X,)), ("expm1", jnp.expm1, (X,)), ("log", jnp.log, (pos(3, 4),)),
    ("log1p", jnp.log1p, (pos(3, 4),)), ("log2", jnp.log2, (pos(3),)),
    ("log10", jnp.log10, (pos(3),)), ("sin", jnp.sin, (X,)), ("cos", jnp.cos, (X,)),
    ("tan", jnp.tan, (unit(3),)), ("arcsin", jnp.arcsin, (unit(3),)),
    ("arccos", jnp.arccos, (unit(3),)), ("arctan", jnp.arctan, (X,)),
    ("sinh", jnp.sinh, (X,)), ("cosh", jnp.cosh, (X,)), ("tanh", jnp.tanh, (X,)),
    ("arcsinh", jnp.arcsinh, (X,)), ("arccosh", jnp.arccosh, (pos(3) + 1,)),
    ("arctanh", jnp.arctanh, (unit(3),)), ("deg2rad", jnp.deg2rad, (X,)),
    ("rad2deg", jnp.rad2deg, (X,)), ("reciprocal", jnp.reciprocal, (pos(3),)),
    ("negative", jnp.negative, (X,)), ("positive", jnp.positive, (X,)),
    ("abs", jnp.abs, (X,)), ("square", jnp.square, (X,)), ("sinc", jnp.sinc, (X,)),
    ("fabs", jnp.fabs, (X,)), ("trunc", jnp.trunc, (X,)), ("floor", jnp.floor, (X,)),
    ("round", jnp.round, (X,)),
    ("add", jnp.add, (X, Y)), ("subtract", jnp.subtract, (X, Y[0])),
    ("multiply", jnp.multiply, (X, Y)), ("divide", jnp.divide, (X, pos(4))),
    ("power", jnp.power, (pos(3, 4), Y)), ("power_static", lambda a: jnp.power(a, 3), (X,)),
    ("power_int_exponent", lambda a: jnp.power(a, np.arange(4)), (X,)),
    ("float_power", jnp.float_power, (pos(3), r(3))), ("maximum", jnp.maximum, (X, Y)),
    ("minimum", jnp.minimum, (X, Y)), ("fmax", jnp.fmax, (X, Y)), ("fmin", jnp.fmin, (X, Y)),
    ("arctan2", jnp.arctan2, (X, Y)), ("hypot", jnp.hypot, (X, Y)),
    ("logaddexp", jnp.logaddexp, (X, Y)), ("logaddexp2", jnp.logaddexp2, (X, Y)),
    ("copysign", jnp.copysign, (X, Y)), ("remainder", jnp.remainder, (X, pos(3, 4))),
    ("fmod", jnp.fmod, (X, pos(3, 4))), ("heaviside", jnp.heaviside, (X, Y)),
    ("where", lambda a, b: jnp.where(a > 0, a, b), (X, Y)),
    ("clip", lambda a: jnp.clip(a, -0.5, 0.5), (X,)), ("nan_to_num", jnp.nan_to_num, (X,)),
    ("sum", lambda a: jnp.sum(a, axis=1), (X,)),
    ("mean", lambda a: jnp.mean(a, axis=(0,), keepdims=True), (X,)),
    ("var", lambda a: jnp.var(a, axis=1, ddof=1), (X,)), ("std", jnp.std, (X,)),
    ("max", lambda a: jnp.max(a, axis=0), (X,)), ("min", jnp.min, (X,)),
    ("prod", lambda a: jnp.prod(a, axis=1), (X,)),
    ("cumsum", lambda a: jnp.cumsum(a, axis=1), (X,)),
    ("cumprod", lambda a: jnp.cumprod(a, axis=0), (X,)), ("nansum", jnp.nansum, (X,)),
    ("nanmean", lambda a: jnp.nanmean(a, axis=1), (X,)),
    ("average", lambda a, w: jnp.average(a, axis=1, weights=w), (X, pos(4))),
    ("ptp", lambda a: jnp.ptp(a, axis=1), (X,)), ("median", lambda a: jnp.median(a, axis=1),
                                                  (X,)),
    ("sum_where", lambda a: jnp.sum(a, where=a > 0), (X,)),
    ("max_initial", lambda a: jnp.max(a, axis=1, initial=0.3), (X,)),
    ("dot", jnp.dot, (r(2, 3), r(3, 4))), ("matmul", jnp.matmul, (r(2, 1, 3, 4), r(5, 4, 2))),
    ("matmul_vec", jnp.matmul, (r(3), r(2, 3, 4))), ("vdot", jnp.vdot, (X, Y)),
    ("inner", jnp.inner, (r(2, 3), r(4, 3))), ("outer", jnp.outer, (r(3), r(4))),
    ("tensordot", lambda a, b: jnp.tensordot(a, b, ((0, 1), (1, 0))), (r(3, 4, 5), r(4, 3, 2))),
    ("kron", jnp.kron, (r(2, 3), r(3, 2))), ("trace", jnp.trace, (r(4, 5),)),
    ("diagonal", lambda a: jnp.diagonal(a, 1), (r(4, 5),)),
    ("einsum_matmul", lambda a, b: jnp.einsum("ij,jk->ik", a, b), (r(2, 3), r(3, 4))),
    ("einsum_trace", lambda a: jnp.einsum("ii", a), (r(3, 3),)),
    ("einsum_chain", lambda a, b, c: jnp.einsum("abc,cd,de->abe", a, b, c),
     (r(2, 3, 4), r(4, 5), r(5, 2))),
    ("einsum_ellipsis", lambda a, b: jnp.einsum("...ij,...jk", a, b), (r(2, 2, 3), r(2, 3, 4))),
    ("einsum_diagonal", lambda a: jnp.einsum("iij->ij", a), (r(3, 3, 2),)),
    ("cross", jnp.cross, (r(4, 3), r(4, 3))),
    ("norm", jnp.linalg.norm, (X,)), ("norm_1", lambda a: jnp.linalg.norm(a, 1, axis=1), (X,)),
    ("norm_inf", lambda a: jnp.linalg.norm(a, np.inf), (X,)),
    ("norm_2", lambda a: jnp.linalg.norm(a, 2), (X,)),
    ("norm_nuc", lambda a: jnp.linalg.norm(a, "nuc"), (X,)),
    ("norm_p", lambda a: jnp.linalg.norm(a, 3, axis=0), (X,)),
    ("svd_tall", lambda a: jnp.linalg.svd(a, full_matrices=False), (r(4, 3),)),
    ("svd_wide", lambda a: jnp.linalg.svd(a, full_matrices=False), (r(3, 5),)),
    ("svd_square", jnp.linalg.svd, (r(3, 3),)),
    ("reshape", lambda a: jnp.reshape(a, (2, -1), order="F"), (X,)), ("ravel", jnp.ravel, (X,)),
    ("squeeze", jnp.squeeze, (r(1, 3, 1),)),
    ("expand_dims", lambda a: jnp.expand_dims(a, (0, 2)), (X,)),
    ("broadcast_to", lambda a: jnp.broadcast_to(a, (2, 3, 4)), (r(3, 1),)),
    ("concatenate", lambda a, b: jnp.concatenate([a, b], axis=1), (X, Y)),
    ("stack", lambda a, b: jnp.stack([a, b], axis=2), (X, Y)),
    ("hstack", lambda a, b: jnp.hstack([a, b]), (X, Y)),
    ("vstack", lambda a, b: jnp.vstack([a, b]), (r(4), r(4))),
    ("split", lambda a: jnp.split(a, [1, 3], axis=1), (X,)),
    ("array_split", lambda a: jnp.array_split(a, 3), (X,)),
    ("tile", lambda a: jnp.tile(a, (2, 1, 3)), (X,)),
    ("repeat", lambda a: jnp.repeat(a, 2, axis=1), (X,)),
    ("repeat_counts", lambda a: jnp.repeat(a, np.array([1, 0, 3]), axis=0), (X,)),
    ("pad_constant", lambda a: jnp.pad(a, ((1, 2), (0, 3)), constant_values=1.5), (X,)),
    ("pad_edge", lambda a: jnp.pad(a, 2, mode="edge"), (X,)),
    ("pad_reflect", lambda a: jnp.pad(a, 3, mode="reflect"), (X,)),
    ("pad_symmetric", lambda a: jnp.pad(a, 4, mode="symmetric"), (X,)),
    ("pad_wrap", lambda a: jnp.pad(a, 5, mode="wrap"), (X,)),
    ("pad_mean", lambda a: jnp.pad(a, 2, mode="mean"), (X,)),
    ("pad_linear_ramp", lambda a: jnp.pad(a, 2, mode="linear_ramp"), (X,)),
    ("flip", jnp.flip, (X,)), ("roll", lambda a: jnp.roll(a, 2, axis=1), (X,)),
    ("rot90", jnp.rot90, (X,)), ("transpose", jnp.transpose, (r(2, 3, 4),)),
    ("moveaxis", lambda a: jnp.moveaxis(a, 0, -1), (r(2, 3, 4),)),
    ("swapaxes", lambda a: jnp.swapaxes(a, 0, 2), (r(2, 3, 4),)),
    ("tril", jnp.tril, (r(4, 4),)), ("triu", lambda a: jnp.triu(a, 1), (r(4, 4),)),
    ("diag", jnp.diag, (r(4),)), ("atleast_3d", jnp.atleast_3d, (r(4),)),
    ("sort", lambda a: jnp.sort(a, axis=1), (X,)),
    ("take", lambda a: jnp.take(a, np.array([2, 0, -1]), axis=1), (X,)),
    ("take_along_axis", lambda a: jnp.take_along_axis(a, ORDER, axis=1), (X,)),
    ("linspace", lambda a, b: jnp.linspace(a, b, 5), (r(3), r(3))),
    ("asarray_of_tracers", lambda a, b: jnp.asarray([[a, b], [b, a]]), (r(), r())),
    ("meshgrid", lambda a, b: jnp.meshgrid(a, b), (r(3), r(4))),
    ("diff", lambda a: jnp.diff(a, 2, axis=1), (X,)),
    ("quantile", lambda a: jnp.quantile(a, np.array([0.3, 0.8]), axis=1), (X,)),
    ("trapezoid", lambda a, b: jnp.trapezoid(a, x=b), (X, np.sort(r(4)))),
    ("append", lambda a, b: jnp.append(a, b, axis=0), (X, Y)),
    ("apply_along_axis", lambda a: jnp.apply_along_axis(jnp.cumsum, 0, a), (X,)),
]
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("name, f, args", CASES, ids=IDS)
def test_gradients(name, f, args):
    check_grads(f, args, order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("name, f, args", CASES, ids=IDS)
def test_vmap_over_a_non_leading_axis(name, f, args):
    size = 3
    axes = tuple(min(1, np.ndim(a)) for a in args)
    batched = [np.stack([a + np.float32(0.1 * k) for k in range(size)], axis=ax)
               for a, ax in zip(args, axes)]
    out = remat.vmap(f, in_axes=axes)(*batched)
    loop = [f(*[np.take(b, k, axis=ax) for b, ax in zip(batched, axes)]) for k in range(size)]
    expected = tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *loop)
    for o, e in zip(tree_leaves(out), tree_leaves(expected)):
        np.testing.assert_allclose(np.asarray(o), e, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name, f, args", CASES, ids=IDS)
def test_jit_matches_eager(name, f, args):
    eager = f(*args)
    jitted = remat.jit(f)(*args)
    for o, e in zip(tree_leaves(jitted), tree_leaves(eager)):
        assert (o.shape, o.dtype, o.weak_type) == (e.shape, e.dtype, e.weak_type)
        np.testing.assert_allclose(np.asarray(o), np.asarray(e), rtol=1e-6, atol=1e-6)


def test_integer_outputs_have_zero_gradients():
    def f(x):
        return jnp.sum(x * jnp.argmax(x, axis=1)[:, None]) + jnp.sum(jnp.floor_divide(x, 2.0))

    g = remat.grad(f)(X)
    np.testing.assert_allclose(np.asarray(g), np.broadcast_to(
        np.argmax(X, axis=1)[:, None], X.shape).astype(np.float32))


def test_grad_of_weakly_typed_scalar_math():
    g = remat.grad(lambda x: jnp.sum(jnp.sin(x) * 2 + x ** 2))(np.float32(0.5))
    assert g.dtype == np.float32
    np.testing.assert_allclose(float(g), 2 * np.cos(0.5) + 1.0, rtol=1e-6)
