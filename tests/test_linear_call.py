"""``custom_derivatives.linear_call`` (a linear function with a custom transpose) and
``fwd_and_bwd`` (vjp split into a reusable forward and backward), against JAX."""

from functools import partial

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat.custom_derivatives import linear_call
from remat.test_util import check_grads, check_vmap

jax = pytest.importorskip("jax")
jjnp = jax.numpy

f32 = np.float32


def _close(a, b, tol=1e-6):
    a_leaves, b_leaves = remat.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(a_leaves) == len(b_leaves)
    for x, y in zip(a_leaves, b_leaves):
        x, y = np.asarray(x), np.asarray(jjnp.asarray(y))  # (JAX may give a TypedFloat)
        assert x.shape == y.shape and x.dtype == y.dtype, (x.dtype, y.dtype, x.shape, y.shape)
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


def _both(program, *args):
    return program(remat, jnp, *args), program(jax, jjnp, *args)


# --- linear_call -----------------------------------------------------------------------------


def _div_add(lib, x, denom):
    """``x + x / denom`` where the division is a linear_call whose transpose is written
    out (JAX's docstring example)."""
    return x + lib.custom_derivatives.linear_call(lambda r, x: x / r, lambda r, t: t / r,
                                                  denom, x)


def _custom_id(lib, x):
    """The identity, with a deliberately wrong transpose (7), to see it used."""
    return lib.custom_derivatives.linear_call(lambda _, x: x, lambda _, t: 7.0 * jnp.ones_like(t)
                                              if lib is remat else 7.0 * jjnp.ones_like(t),
                                              (), x)


def _transpose(lib, f, x_example):
    def transposed(y):
        (x,) = lib.linear_transpose(f, x_example)(y)
        return x

    return transposed


def test_values_and_linear_transpose_match_jax():
    def program(lib, np_lib):
        cid = partial(_custom_id, lib)
        t1 = _transpose(lib, cid, 1.0)
        t2 = _transpose(lib, t1, 1.0)
        t3 = _transpose(lib, t2, 1.0)
        return (_div_add(lib, 9.0, 3.0),
                _transpose(lib, partial(_div_add, lib, denom=3.0), 1.0)(18.0),
                cid(1.0), t1(1.0), t2(1.0), t3(1.0))

    ours, theirs = _both(program)
    _close(ours, theirs)
    np.testing.assert_allclose([float(v) for v in ours], [12.0, 24.0, 1.0, 7.0, 1.0, 7.0])


def test_reverse_mode_uses_the_custom_transpose():
    def program(lib, np_lib):
        cid = partial(_custom_id, lib)
        return (lib.grad(cid)(1.0), lib.jit(lib.grad(cid))(1.0),
                lib.grad(lambda x: np_lib.sin(cid(x) * 2.0))(0.5),
                lib.grad(partial(_div_add, lib))(2.0, 4.0),
                lib.jvp(lambda x: _div_add(lib, x, 4.0), (2.0,), (1.0,)),
                lib.grad(lib.checkpoint(lambda x: np_lib.sin(cid(x) * 2.0)))(0.5))

    ours, theirs = _both(program)
    _close(ours, theirs)
    assert float(ours[0]) == 7.0  # the transpose, not the (identity) function's own


def test_jit_matches_eager():
    f = lambda x, d: _div_add(remat, x, d)  # noqa: E731
    x, d = np.array([1.0, -2.0, 3.0], f32), np.array([2.0, 4.0, 8.0], f32)
    np.testing.assert_allclose(np.asarray(remat.jit(f)(x, d)), np.asarray(f(x, d)), 1e-7)
    np.testing.assert_allclose(np.asarray(f(x, d)), x + x / d, 1e-7)
    text = str(remat.make_jaxpr(f)(x, d))
    assert "linear_call" in text


def test_vmap_matches_a_loop():
    x, d = np.arange(3.0, dtype=f32), np.arange(1.0, 4.0, dtype=f32)
    check_vmap(lambda x, d: _div_add(remat, x, d), (x, d), (0, 0))
    check_vmap(lambda x: _div_add(remat, x, 3.0), (x,), (0,))
    # and the transpose of a batched linear_call is the batched transpose
    g = remat.vmap(remat.grad(lambda x, d: _div_add(remat, x, d) * 2.0))(x, d)
    np.testing.assert_allclose(np.asarray(g), 2 * (1 + 1 / d), 1e-6)
    t = remat.vmap(_transpose(remat, partial(_div_add, remat, denom=3.0), 1.0))(x)
    np.testing.assert_allclose(np.asarray(t), x + x / 3, 1e-6)


def test_check_grads_with_a_true_transpose():
    W = np.arange(6.0, dtype=f32).reshape(2, 3) / 4

    def matvec(x):
        return linear_call(lambda W, x: W @ x, lambda W, ct: W.T @ ct, W, x)

    def f(x):
        return jnp.tanh(matvec(jnp.sin(x)))

    check_grads(f, (np.array([0.2, -0.5, 1.0], f32),), order=2, modes=("fwd", "rev"),
                atol=1e-2, rtol=1e-2)
    jac = remat.jacrev(matvec)(np.ones(3, f32))
    np.testing.assert_allclose(np.asarray(jac), W, 1e-6)
    np.testing.assert_allclose(np.asarray(remat.jacfwd(matvec)(np.ones(3, f32))), W, 1e-6)


def test_pytree_arguments():
    def program(lib, np_lib):
        fun = lambda r, xs: {"a": xs[0] * r["s"], "b": xs[1]}  # noqa: E731
        fun_t = lambda r, ct: (ct["a"] * r["s"], ct["b"] * 2.0)  # noqa: E731
        out = lib.custom_derivatives.linear_call(fun, fun_t, {"s": 2.0}, (1.0, 3.0))
        g = lib.grad(lambda x, y: lib.custom_derivatives.linear_call(
            fun, fun_t, {"s": 2.0}, (x, y))["b"], argnums=(0, 1))(1.0, 3.0)
        return out, g

    ours, theirs = _both(program)
    _close(ours, theirs)


def test_errors():
    with pytest.raises(TypeError, match="transpose output pytree structure must match"):
        remat.grad(lambda x: linear_call(lambda r, x: x, lambda r, ct: (ct, ct), (), x))(1.0)
    with pytest.raises(ValueError, match="residual"):
        remat.grad(lambda r: linear_call(lambda r, x: x * r, lambda r, ct: ct * r, r, 1.0))(
            2.0)


# --- fwd_and_bwd -----------------------------------------------------------------------------

X = np.ones((4, 4), f32) / 3
WM = (np.arange(16.0, dtype=f32).reshape(4, 4) - 8) / 10
CT = np.ones((4, 4), f32)


def test_fwd_and_bwd_match_jax_and_vjp():
    def program(lib, np_lib):
        f = lambda x, W: np_lib.sin(x @ W)  # noqa: E731
        fwd, bwd = lib.fwd_and_bwd(f, argnums=(0, 1))
        y, res = fwd(X, WM)
        both = bwd(res, CT)
        fwd1, bwd1 = lib.fwd_and_bwd(f, argnums=1)
        one = bwd1(fwd1(X, WM)[1], CT)
        fwd2, bwd2 = lib.fwd_and_bwd(lambda x, W: (f(x, W), {"aux": x.sum()}), argnums=0,
                                     has_aux=True)
        y2, res2, aux = fwd2(X, WM)
        fwd3, bwd3 = lib.fwd_and_bwd(f, argnums=0, jitted=False)
        unjitted = bwd3(fwd3(X, WM)[1], CT)
        return y, both, one, y2, aux, bwd2(res2, CT), unjitted

    ours, theirs = _both(program)
    _close(ours, theirs, 1e-5)
    _, pullback = remat.vjp(lambda x, W: jnp.sin(x @ W), X, WM)
    _close(ours[1], tuple(np.asarray(g) for g in pullback(CT)), 1e-6)
    assert isinstance(ours[1], tuple) and not isinstance(ours[2], tuple)


def test_fwd_and_bwd_trace_once_across_iterations():
    calls = []

    def f(x, W):
        calls.append(1)
        return jnp.tanh(x @ W)

    fwd, bwd = remat.fwd_and_bwd(f, argnums=(0, 1))
    for i in range(3):
        y, res = fwd(X * i, WM)
        bwd(res, CT)
    assert len(calls) == 1 and fwd.trace_count == 1 and bwd.trace_count == 1


def test_fwd_and_bwd_errors():
    with pytest.raises(TypeError, match="callable"):
        remat.fwd_and_bwd(3, argnums=0)
    with pytest.raises(TypeError):
        remat.fwd_and_bwd(jnp.sin, argnums="a")
    with pytest.raises(ValueError, match="argnums"):
        remat.fwd_and_bwd(lambda x, W: x @ W, argnums=3)[0](X, WM)
