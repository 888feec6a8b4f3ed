"""Random numbers inside native loop kernels: ``threefry2x32`` (the hash under every
``remat.random`` draw) and unsigned ``rem`` (``randint``'s range) have native forms, so a loop
that draws at each step (equinox's buffer test reads a row ``randint`` picks) runs natively,
drawing the same bits as the Python tier and as JAX."""

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.config import config

numba = pytest.importorskip("numba")


def test_the_native_threefry_pair_is_the_impls_hash():
    from remat.exec.native_kernels import threefry_pair
    from remat.random.keys import _threefry2x32_impl

    rng = np.random.default_rng(0)
    words = rng.integers(0, 2**32, size=(4, 300), dtype=np.uint64).astype(np.uint32)
    words[:, :4] = [[0, 0xFFFFFFFF, 0, 1], [0, 0xFFFFFFFF, 0, 2], [0, 0xFFFFFFFF, 1, 3],
                    [0, 0xFFFFFFFF, 0, 4]]
    want = _threefry2x32_impl(*words)
    got = np.array([threefry_pair(*words[:, i]) for i in range(words.shape[1])]).T
    np.testing.assert_array_equal(got.astype(np.uint32), np.asarray(want))


def _both_tiers(new_loops, f, *args):
    """``f(*args)`` on the Python tier and on the native one (every loop compiled: the
    ``native_loops`` fixture), and the states of the loops it made."""
    results = []

    def run():
        with config.override("remat_native_loops", False):
            results.append(f(*args))
        f(*args)  # (on the Python tier, then compiled)
        results.append(f(*args))
    states = [loop.state for loop in new_loops(run)]
    want, got = results
    return got, want, states


def test_a_loop_drawing_a_row_at_each_step_runs_natively(native_loops, new_loops):
    def run(buf):
        def body(c):
            i, buf = c
            j = remat.random.randint(remat.random.PRNGKey(i), (), 0, i)
            return i + 1, buf.at[i].set(2 * jnp.tanh(buf[j]))
        return lax.while_loop(lambda c: c[0] < buf.size, body, (1, buf))[1]

    buf = np.linspace(0.1, 1.0, 200, dtype=np.float32)
    got, want, states = _both_tiers(new_loops, remat.jit(run), buf)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    assert states == ["ready"]


def test_a_scan_drawing_key_bits_in_its_body_matches_the_python_tier_bitwise(
        native_loops, new_loops):
    def run(key, xs):
        def body(key, x):
            key, sub = remat.random.split(key)
            bits = remat.random.bits(sub, (3,))
            return key, (bits % jnp.uint32(7)) + x
        return lax.scan(body, key, xs)

    key = remat.random.PRNGKey(3)
    xs = np.arange(30, dtype=np.uint32).reshape(10, 3)
    got, want, states = _both_tiers(new_loops, remat.jit(run), key, xs)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert states == ["ready"]


def test_unsigned_remainders_by_zero_keep_the_dividend_natively(native_loops, new_loops):
    def run(x, ys):
        return lax.scan(lambda c, y: (c, lax.rem(c, y)), x, ys)[1]

    x = np.uint32(4_000_000_000)
    ys = np.array([0, 1, 7, 3_000_000_000, 0xFFFFFFFF, 0], np.uint32)
    got, want, states = _both_tiers(new_loops, remat.jit(run), x, ys)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(want), [x, 0, x % 7, x % 3_000_000_000, x, x])
    assert states == ["ready"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_xla_float_kernels_have_native_forms_bit_for_bit(dtype):
    """``xla_erf_inv`` (under every ``random.normal``), ``xla_log1p``, ``xla_log`` and ``fma``
    as the native tier computes them, one element at a time with LLVM's fma: the impls'
    bits on random arguments and on their edges."""
    from remat.exec import native_kernels as k
    from remat.random import kernels

    dt = np.dtype(dtype)
    rng = np.random.default_rng(0)
    unit = np.concatenate([rng.uniform(-1, 1, 3000), 1 - 10.0 ** -rng.uniform(1, 15, 500),
                           [0.0, 1.0, -1.0, 0.5, np.nan, 2.0]]).astype(dt)
    wide = np.concatenate([rng.uniform(-0.9, 3, 3000), 10.0 ** rng.uniform(-30, 30, 500),
                           [0.0, -1.0, np.inf, np.nan, -0.5]]).astype(dt)
    f32 = dt == np.float32
    cases = [(kernels._erf_inv, k.erf_inv_f32 if f32 else k.erf_inv_f64, unit),
             (kernels._log1p, k.log1p_f32 if f32 else k.log1p_f64, wide)]
    if f32:
        cases.append((kernels._log, k.log_f32, wide))
    for impl, native_form, x in cases:
        with np.errstate(all="ignore"):
            want = kernels._xla_kernel(impl)(x)
        got = np.array([native_form(v) for v in x], dt)
        np.testing.assert_array_equal(got, want)
    a, b, c = ((rng.normal(size=2000) * 10.0 ** rng.integers(-8, 8, 2000)).astype(dt)
               for _ in range(3))
    fma = numba.njit(lambda a, b, c: k.fma(a, b, c))  # (an intrinsic: native code only)
    got = np.array([fma(*v) for v in zip(a, b, c)], dt)
    np.testing.assert_array_equal(got, kernels._fma_np(a, b, c))


def test_a_loop_drawing_normal_noise_runs_natively_with_the_same_bits(native_loops, new_loops):
    """A while loop adding ``random.normal`` noise at each step (diffrax's Brownian
    increments): its erf_inv and log1p are native, so the loop is, drawing the Python tier's
    bits."""
    def run(x):
        def body(c):
            i, x = c
            noise = remat.random.normal(remat.random.fold_in(remat.random.PRNGKey(0), i),
                                        x.shape, x.dtype)
            return i + 1, x * 0.9 + 0.1 * noise
        return lax.while_loop(lambda c: c[0] < 30, body, (0, x))[1]

    for dtype in (np.float32, np.float64):
        with config.override("jax_enable_x64", True):
            x = np.linspace(-1, 1, 6).astype(dtype)
            got, want, states = _both_tiers(new_loops, remat.jit(run), x)
            assert states and all(s == "ready" for s in states), states
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
