"""``pure_callback`` and ``io_callback``: values, dtypes, jit, vmap methods, effects (DCE, CSE,
order) and differentiation, against NumPy and JAX."""

import contextlib

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.test_util import check_grads

jax = pytest.importorskip("jax")

f32 = np.float32
SDS = remat.ShapeDtypeStruct


def host_sin(x):
    assert type(x) is remat.Array  # callbacks receive remat Arrays, as JAX's receive jax Arrays
    return np.sin(np.asarray(x))


@pytest.mark.parametrize("wrap", [lambda f: f, remat.jit], ids=["eager", "jit"])
def test_pure_callback_values_and_dtypes(wrap):
    x = np.linspace(-1, 1, 5, dtype=f32)
    out = wrap(lambda x: remat.pure_callback(host_sin, SDS(x.shape, x.dtype), x))(x)
    assert out.dtype == np.float32 and out.shape == (5,)
    np.testing.assert_allclose(out, np.sin(x), rtol=1e-6)
    expected = jax.pure_callback(lambda x: np.sin(np.asarray(x)),
                                 jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_pytrees_in_and_out_and_kwargs():
    def host(a, b, *, scale):
        return {"sum": np.asarray(a) + np.asarray(b["c"]), "n": np.int32(scale)}

    shapes = {"sum": SDS((2,), np.float32), "n": SDS((), np.int32)}
    out = remat.jit(lambda a, c: remat.pure_callback(host, shapes, a, {"c": c}, scale=3))(
        jnp.ones(2), jnp.arange(2.0))
    assert out["sum"].tolist() == [1.0, 2.0] and int(out["n"]) == 3
    assert out["n"].dtype == np.int32


def test_python_scalars_and_float64_results_are_converted():
    assert float(remat.pure_callback(lambda: 3, SDS((), np.float32))) == 3.0
    out = remat.pure_callback(lambda: np.float64(2.5), SDS((), np.float32))
    assert out.dtype == np.float32 and float(out) == 2.5


def test_bad_results_and_arguments():
    with pytest.raises(RuntimeError, match="Incorrect output shape for return value #0"):
        remat.pure_callback(lambda x: x, SDS((2,), np.float32), jnp.ones(3))
    with pytest.raises(RuntimeError, match="Incorrect output dtype for return value #0"):
        remat.pure_callback(lambda x: x, SDS((3,), np.int32), jnp.ones(3))
    with pytest.raises(ValueError, match="64-bit types"):
        remat.pure_callback(lambda x: x, SDS((3,), np.float64), jnp.ones(3))
    with pytest.raises(ValueError, match="vmap_method must be"):
        remat.pure_callback(lambda x: x, SDS((3,), np.float32), jnp.ones(3), vmap_method="x")
    with pytest.raises(TypeError, match="callable"):
        remat.pure_callback(3, SDS((3,), np.float32), jnp.ones(3))
    with pytest.raises(RuntimeError, match="returned 2 values"):
        remat.io_callback(lambda: (1.0, 2.0), SDS((), np.float32))


def test_pure_callback_is_pure_under_jit_io_callback_is_not():
    calls = []

    def host(x):
        calls.append(float(x))
        return np.asarray(x)

    scalar = SDS((), np.float32)
    remat.jit(lambda x: (remat.pure_callback(host, scalar, x), x + 1)[1])(f32(1))
    assert calls == []  # an unused pure result is dead code (as in JAX)
    remat.jit(lambda x: (remat.io_callback(host, scalar, x), x + 1)[1])(f32(2))
    assert calls == [2.0]  # an io_callback always runs
    calls.clear()
    remat.jit(lambda x: remat.io_callback(host, scalar, x) + remat.io_callback(host, scalar, x))(
        f32(3))
    assert calls == [3.0, 3.0]  # never merged by CSE


def test_io_callbacks_run_in_program_order_under_jit_and_scan():
    log = []

    def record(tag):
        def host(x):
            log.append((tag, float(x)))
            return np.asarray(x)
        return host

    scalar = SDS((), np.float32)

    @remat.jit
    def f(x):
        a = remat.io_callback(record("a"), scalar, x)
        b = remat.io_callback(record("b"), scalar, x * 2)
        return remat.io_callback(record("c"), scalar, a + b, ordered=True)

    assert float(f(f32(1))) == 3.0
    assert log == [("a", 1.0), ("b", 2.0), ("c", 3.0)]
    log.clear()

    def body(c, x):
        return c + remat.io_callback(record("s"), scalar, x), None

    lax.scan(body, f32(0), jnp.arange(3.0))
    assert log == [("s", 0.0), ("s", 1.0), ("s", 2.0)]


@pytest.mark.parametrize("method", ["sequential", "sequential_unrolled", "expand_dims",
                                    "broadcast_all"])
def test_pure_callback_vmap_methods_match_a_loop_and_jax(method):
    seen = []

    def host(x, y):
        seen.append((np.shape(x), np.shape(y)))
        return np.asarray(x) * np.asarray(y)

    def fun(lib, x, y):
        return lib.pure_callback(host, lib.ShapeDtypeStruct((), np.float32), x, y,
                                 vmap_method=method)

    xs, y = np.arange(3, dtype=f32), f32(2)
    out = remat.vmap(lambda x, y: fun(remat, x, y), in_axes=(0, None))(xs, y)
    np.testing.assert_allclose(out, [fun(remat, x, y) for x in xs])
    ours, seen[:] = list(seen[:1]), []
    jax.vmap(lambda x, y: fun(jax, x, y), in_axes=(0, None))(xs, y)
    assert ours == seen[:1]  # the callback sees the same shapes as under JAX


def test_pure_callback_vmap_without_method_raises():
    with pytest.raises(NotImplementedError, match="vmap_method"):
        remat.vmap(lambda x: remat.pure_callback(host_sin, SDS((), np.float32), x))(jnp.ones(2))


def test_io_callback_vmap_is_sequential_unless_ordered():
    seen = []
    out = remat.vmap(lambda x: remat.io_callback(
        lambda v: seen.append(float(v)) or np.asarray(v) * 2, SDS((), np.float32), x))(
        jnp.arange(3.0))
    assert out.tolist() == [0.0, 2.0, 4.0] and seen == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="Cannot `vmap` ordered IO callback"):
        remat.vmap(lambda x: remat.io_callback(lambda v: v, SDS((), np.float32), x,
                                               ordered=True))(jnp.ones(2))


def test_callbacks_are_not_differentiable_without_a_custom_rule():
    pure = lambda x: remat.pure_callback(host_sin, SDS((), np.float32), x)  # noqa: E731
    with pytest.raises(ValueError, match="Pure callbacks do not support JVP"):
        remat.grad(pure)(f32(1))
    with pytest.raises(ValueError, match="IO callbacks do not support JVP"):
        remat.grad(lambda x: remat.io_callback(host_sin, SDS((), np.float32), x))(f32(1))


def test_pure_callback_differentiable_through_custom_jvp():
    @remat.custom_jvp
    def sin(x):
        return remat.pure_callback(host_sin, SDS(x.shape, x.dtype), x, vmap_method="sequential")

    @sin.defjvp
    def sin_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        cos = remat.pure_callback(lambda v: np.cos(np.asarray(v)), SDS(x.shape, x.dtype), x,
                                  vmap_method="sequential")
        return sin(x), cos * t

    x = np.array([0.3, -0.7], f32)
    np.testing.assert_allclose(remat.grad(lambda x: jnp.sum(sin(x)))(x), np.cos(x), rtol=1e-6)
    check_grads(sin, (x,), order=1, modes=("fwd", "rev"))
    np.testing.assert_allclose(remat.jit(remat.vmap(sin))(x), np.sin(x), rtol=1e-6)


def test_callback_primitives_print_in_jaxprs():
    text = str(remat.make_jaxpr(lambda x: remat.pure_callback(host_sin, SDS((3,), np.float32),
                                                              x))(jnp.ones(3)))
    assert "pure_callback[" in text and "callback=host_sin" in text
    text = str(remat.make_jaxpr(lambda x: remat.io_callback(host_sin, SDS((3,), np.float32),
                                                            x))(jnp.ones(3)))
    assert "io_callback[" in text and "ordered=False" in text


@pytest.mark.parametrize("tier", ["python", "plans"])
def test_io_callback_with_several_results_runs_once_per_loop_iteration(tier):
    """A loop kernel calls a multiple-result equation once and picks its results out: an
    io_callback returning two values runs once per iteration, and a stateful one gives each
    iteration its own state."""
    from remat.config import config
    from remat.exec import interpreted

    calls = []

    def host(x):
        calls.append(float(x))
        return f32(len(calls)), f32(x) + 1

    def body(c, _):
        n, c1 = remat.io_callback(host, (SDS((), np.float32), SDS((), np.float32)), c)
        return c1, n

    fun = remat.jit(lambda c: lax.scan(body, c, None, length=4))
    with config.override("remat_native_loops", False), \
            interpreted() if tier == "plans" else contextlib.nullcontext():
        c, ns = fun(f32(0))
    assert calls == [0.0, 1.0, 2.0, 3.0]
    assert float(c) == 4.0 and np.asarray(ns).tolist() == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("kind", ["pure_callback", "io_callback"])
def test_an_exception_in_a_callback_surfaces_as_jaxs_runtime_error(kind, staged):
    # (as JAX: its message carries the callback's traceback, which equinox searches for the
    # name of its runtime error; the exception is the cause)
    from remat.errors import JaxRuntimeError
    from remat.experimental import io_callback

    class _OwnError(RuntimeError):
        pass

    def fail(x):
        raise _OwnError(f"bad value {float(x)}")

    call = remat.pure_callback if kind == "pure_callback" else io_callback
    f = lambda x: call(fail, remat.ShapeDtypeStruct((), np.float32), x)  # noqa: E731
    with pytest.raises(JaxRuntimeError, match="_OwnError: bad value 2.0") as e:
        (remat.jit(f) if staged else f)(np.float32(2.0))
    assert type(e.value.__cause__) is _OwnError


@pytest.mark.parametrize("staged", [False, True])
def test_callback_errors_match_the_oracle(staged):
    jax = pytest.importorskip("jax")

    def fail(x):
        raise ValueError("boom")

    f = lambda x: jax.pure_callback(fail, jax.ShapeDtypeStruct((), np.float32), x)  # noqa: E731
    with pytest.raises(jax.errors.JaxRuntimeError, match="ValueError: boom"):
        (jax.jit(f) if staged else f)(np.float32(2.0))
