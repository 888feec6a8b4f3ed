"""remat.random: bit-exact agreement with jax.random (a committed fixture, checked without JAX,
and direct comparisons when JAX is installed), the threefry2x32 primitive and its rules, the
exact-FMA and XLA-kernel primitives, keys under jit / vmap / grad / checkpoint, errors and
distribution sanity.

The fixture ``tests/data/jax_random_values.json`` is written by
``tests/data/make_jax_random_values.py`` (run it with JAX installed to regenerate). Each XLA
compilation costs JAX a fraction of a second, so the direct comparisons that run by default
are compact; ``REMAT_EXHAUSTIVE_JAX=1`` adds a grid over seeds, shapes, dtypes and both
layouts (a few minutes).
"""

import importlib.util
import json
import math
import os
from fractions import Fraction

import numpy as np
import pytest

import remat
import remat.numpy as jnp
import remat.random as random
from remat import lax
from remat.config import config
from remat.random import kernels, keys
from remat.test_util import check_grads

_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
_spec = importlib.util.spec_from_file_location(
    "make_jax_random_values", os.path.join(_DATA, "make_jax_random_values.py"))
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)

with open(fixture.PATH) as _f:
    CASES = json.load(_f)["cases"]

FLAGS = [(x64, part) for x64 in (False, True) for part in (True, False)]


def _flags(x64, partitionable):
    class _Both:
        def __enter__(self):
            self.a = config.override("jax_enable_x64", x64)
            self.b = config.override("jax_threefry_partitionable", partitionable)
            self.a.__enter__()
            self.b.__enter__()

        def __exit__(self, *exc):
            self.b.__exit__(*exc)
            self.a.__exit__(*exc)

    return _Both()


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# --- the fixture, without JAX ----------------------------------------------------------------


@pytest.mark.parametrize("x64,partitionable", FLAGS, ids=lambda v: str(v))
def test_fixture_matches_jax_bit_for_bit(x64, partitionable):
    cases = [c for c in CASES if c["x64"] == x64 and c["partitionable"] == partitionable]
    assert len(cases) > 40
    bad = []
    with _flags(x64, partitionable):
        for case in cases:
            out = fixture.encode(fixture.call(random, case))
            if out != case["out"]:
                bad.append((case["fn"], case["args"], case["kwargs"], out, case["out"]))
    assert not bad, bad[:3]


def test_fixture_covers_every_sampler():
    assert {c["fn"] for c in CASES} >= {
        "PRNGKey", "split", "fold_in", "bits", "uniform", "normal", "gumbel", "bernoulli",
        "randint", "categorical", "permutation", "choice"}


def test_known_values_without_fixture():
    # jax.random.PRNGKey(0) and its split under JAX 0.10's default (partitionable) layout
    np.testing.assert_array_equal(random.PRNGKey(0), [0, 0])
    np.testing.assert_array_equal(random.split(random.PRNGKey(0)),
                                  [[1797259609, 2579123966], [928981903, 3453687069]])
    np.testing.assert_array_equal(random.uniform(random.PRNGKey(0), (3,)),
                                  np.float32([0.947667, 0.9785799, 0.33229148]))
    with config.override("jax_threefry_partitionable", False):
        np.testing.assert_array_equal(random.split(random.PRNGKey(0)),
                                      [[4146024105, 967050713], [2718843009, 1272950319]])


# --- the threefry2x32 primitive --------------------------------------------------------------

# Known-answer tests of Threefry-2x32-20 (Salmon et al., Random123).
KAT = [((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
       ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
       ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]


@pytest.mark.parametrize("key,count,expected", KAT)
def test_threefry2x32_known_answers(key, count, expected):
    u = np.uint32
    out = random.threefry2x32_p.bind(u(key[0]), u(key[1]), u(count[0]), u(count[1]))
    assert [int(o) for o in out] == list(expected)
    assert all(o.dtype == np.uint32 and o.shape == () for o in out)
    # the same through the hash helper: count [c0, c1] hashes as the pair (c0, c1)
    hashed = random.threefry_2x32(np.array(key, np.uint32), np.array(count, np.uint32))
    np.testing.assert_array_equal(hashed, np.array(expected, np.uint32))


def _np_hash(key, count):
    """threefry_2x32 on a flat count, elementwise via the primitive on scalars."""
    flat = list(np.ravel(count)) + ([0] if np.size(count) % 2 else [])
    h = len(flat) // 2
    pairs = [random.threefry2x32_p.bind(np.uint32(key[0]), np.uint32(key[1]),
                                        np.uint32(flat[i]), np.uint32(flat[h + i]))
             for i in range(h)]
    out = [int(p[0]) for p in pairs] + [int(p[1]) for p in pairs]
    return np.array(out[:np.size(count)], np.uint32).reshape(np.shape(count))


@pytest.mark.parametrize("n", [0, 1, 2, 5, 8])
def test_threefry_2x32_pairs_halves(n):
    key = np.array([123, 456], np.uint32)
    count = np.arange(100, 100 + n, dtype=np.uint32)
    np.testing.assert_array_equal(random.threefry_2x32(key, count), _np_hash(key, count))
    np.testing.assert_array_equal(random.threefry_2x32(key, count.reshape(1, n)),
                                  _np_hash(key, count).reshape(1, n))


def test_threefry2x32_abstract_eval_and_errors():
    k = np.uint32(1)
    x = np.zeros((3, 4), np.uint32)
    out = remat.eval_shape(lambda a, b: random.threefry2x32_p.bind(k, k, a, b), x, x)
    assert [o.shape for o in out] == [(3, 4), (3, 4)]
    assert all(o.dtype == np.uint32 for o in out)
    with pytest.raises(TypeError, match="must have uint32 type"):
        random.threefry2x32_p.bind(k, k, x.astype(np.int32), x)
    with pytest.raises(TypeError, match="incompatible shapes"):
        random.threefry2x32_p.bind(k, k, x, np.zeros(3, np.uint32))
    with pytest.raises(TypeError, match="requires uint32"):
        random.threefry_2x32(np.array([1, 2], np.uint32), np.arange(3))


def test_threefry2x32_scalar_operands_broadcast():
    k1, k2 = np.uint32(9), np.uint32(11)
    x1 = np.arange(6, dtype=np.uint32).reshape(2, 3)
    out = random.threefry2x32_p.bind(k1, k2, x1, np.uint32(5))
    for i, j in np.ndindex(2, 3):
        one = random.threefry2x32_p.bind(k1, k2, x1[i, j], np.uint32(5))
        assert int(out[0][i, j]) == int(one[0]) and int(out[1][i, j]) == int(one[1])


@pytest.mark.parametrize("in_axes", [(0, None, 0, None), (None, 0, 1, 1), (0, 0, None, 0)],
                         ids=str)
def test_threefry2x32_vmap_matches_loop(in_axes):
    rng = np.random.default_rng(1)
    n = 3
    shapes = {0: (n,), 1: (4, n), None: ()}
    args = []
    for i, ax in enumerate(in_axes):
        if ax is None:
            shape = () if i < 2 else (4,)
        elif i < 2:
            shape = (n,)
        else:
            shape = (n, 4) if ax == 0 else shapes[ax]
        args.append(rng.integers(0, 2**32, shape, dtype=np.uint32))
    out = remat.vmap(lambda *a: random.threefry2x32_p.bind(*a), in_axes=in_axes)(*args)
    for b in range(n):
        sl = [a if ax is None else np.take(a, b, axis=ax) for a, ax in zip(args, in_axes)]
        ref = random.threefry2x32_p.bind(*sl)
        for o, r in zip(out, ref):
            np.testing.assert_array_equal(o[b], r)


def test_threefry2x32_jvp_is_zero_and_jit_matches():
    x = np.arange(4, dtype=np.uint32)
    f = lambda a: random.threefry2x32_p.bind(np.uint32(1), np.uint32(2), a, a)
    primals, tangents = remat.jvp(f, (x,), (np.zeros(4, remat.dtypes.float0),))
    assert all(t.dtype == remat.dtypes.float0 for t in tangents)
    for a, b in zip(remat.jit(f)(x), f(x)):
        np.testing.assert_array_equal(a, b)
    assert "threefry2x32" in str(remat.make_jaxpr(f)(x))


# --- exact FMA -------------------------------------------------------------------------------


def _exact_fma(a, b, c, dtype):
    out = []
    for x, y, z in zip(a, b, c):
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        out.append(_round_fraction(exact, dtype))
    return np.array(out, dtype)


def _round_fraction(q, dtype):
    """The float of ``dtype`` nearest to ``q`` (ties to even), for normal-range values."""
    if q == 0:
        return dtype(0.0)
    info = np.finfo(dtype)
    sign = -1 if q < 0 else 1
    q = abs(q)
    e = math.floor(math.log2(q.numerator) - math.log2(q.denominator))
    while Fraction(2) ** e > q:
        e -= 1
    while Fraction(2) ** (e + 1) <= q:
        e += 1
    ulp = Fraction(2) ** (e - info.nmant)
    m = q / ulp
    r = math.floor(m)
    if m - r > Fraction(1, 2) or (m - r == Fraction(1, 2) and r % 2):
        r += 1
    return dtype(sign * float(r * ulp))


def _fma_cases(dtype, n, rng):
    a = rng.normal(size=n).astype(dtype)
    b = rng.normal(size=n).astype(dtype)
    c = rng.normal(size=n).astype(dtype)
    # adversarial: c cancels the product's leading part, so the exact result needs the
    # product's low bits, and half-ulp ties of the plain a * b + c
    c[: n // 2] = -(a[: n // 2].astype(np.float64) * b[: n // 2]).astype(dtype)
    a[-4:] = dtype(1) + np.finfo(dtype).eps
    b[-4:] = dtype(1) + np.finfo(dtype).eps
    c[-4:] = -dtype(1)
    return a, b, c


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_fma_is_correctly_rounded(dtype, rng):
    with config.override("jax_enable_x64", True):
        a, b, c = _fma_cases(dtype, 400, rng)
        out = np.asarray(random.fma_p.bind(a, b, c))
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, _exact_fma(a, b, c, dtype))
        plain = (a * b + c).astype(dtype)
        assert (plain != out).any()  # the cases do exercise the single rounding


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fma_of_a_few_elements_is_correctly_rounded_too(dtype, rng):
    """float32 and float64 FMAs of fewer than 32 elements run element by element on Python
    floats (``_fma_float32``, ``_fma_float64``): the same bits as the array paths, specials,
    overflow and subnormals included."""
    with config.override("jax_enable_x64", True):
        a, b, c = _fma_cases(dtype, 400, rng)
        for lo in range(0, 400, 20):
            part = slice(lo, lo + 20)
            out = np.asarray(random.fma_p.bind(a[part], b[part], c[part]))
            np.testing.assert_array_equal(out, _exact_fma(a[part], b[part], c[part], dtype))
    big = np.finfo(dtype).max / 4
    tiny = np.finfo(dtype).smallest_subnormal
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, big, -big, tiny, 1.0, 3.0,
                         np.finfo(dtype).tiny, 1 + np.finfo(dtype).eps, 1 - np.finfo(dtype).eps,
                         np.finfo(dtype).tiny * 0.75], dtype)
    a, b, c = (rng.choice(specials, 3000) for _ in range(3))
    array_path = kernels._fma_wide if dtype == np.float64 else kernels._fma_narrow
    with np.errstate(all="ignore"):
        whole = array_path(a, b, c)
        for lo in range(0, 3000, 30):
            part = slice(lo, lo + 30)
            few = kernels._fma_kernel(a[part], b[part], c[part])
            assert few.dtype == dtype
            np.testing.assert_array_equal(few, whole[part])
            np.testing.assert_array_equal(np.signbit(few), np.signbit(whole[part]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_xla_kernels_of_a_few_elements_match_their_array_path(dtype, rng):
    """The polynomial kernels evaluate few elements on Python floats (``_horner``): the same
    bits as on many, for every branch of each kernel."""
    x = np.concatenate([rng.uniform(-1, 1, 300), 1 - 10.0 ** rng.uniform(-17, 0, 200),
                        np.sign(rng.normal(size=200)) * 10.0 ** rng.uniform(-40, 5, 200),
                        [0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf]]).astype(dtype)
    kernels_of = {"erf_inv": kernels._erf_inv, "log1p": kernels._log1p,
                  "log": lambda v: kernels._log(np.abs(v))}
    if dtype == np.float32:
        kernels_of["erf"] = kernels._erf
    with np.errstate(all="ignore"):
        for name, kernel in kernels_of.items():
            whole = kernel(x)
            few = np.concatenate([kernel(x[lo:lo + 7]) for lo in range(0, len(x), 7)])
            np.testing.assert_array_equal(few, whole, err_msg=name)


def test_threefry2x32_of_a_few_elements_matches_its_array_path(rng):
    """Fewer than 16 elements hash on Python ints: the same bits as the uint32 arrays."""
    words = [rng.integers(0, 2**32, size=64, dtype=np.uint64).astype(np.uint32)
             for _ in range(4)]
    whole = keys._threefry2x32_impl(*words)
    for lo in range(0, 64, 8):
        part = [w[lo:lo + 8] for w in words]
        for key in (part[:2], [w[:1] for w in part[:2]]):  # keys per element, or one key
            few = keys._threefry2x32_impl(*key, *part[2:])
            ref = whole if key[0].size == 8 else keys._threefry2x32_impl(
                np.broadcast_to(key[0], (64,)), np.broadcast_to(key[1], (64,)), *words[2:])
            for out, expected in zip(few, ref):
                assert out.dtype == np.uint32 and out.shape == (8,)
                np.testing.assert_array_equal(out, expected[lo:lo + 8])


@pytest.mark.parametrize("dtype,a,b,c,expected", [
    # a * b is exactly halfway between two floats of the dtype and c breaks the tie. In float32
    # c is below what float64 can see next to a * b, so rounding a * b + c to float64 first
    # lands on the tie and then rounds the wrong way (float16 sums are exact in float64)
    (np.float32, 1 + 2.0**-12, 1 + 2.0**-12, 2.0**-80, 1 + 2.0**-11 + 2.0**-23),
    (np.float32, 1 + 2.0**-12, 1 + 2.0**-12, -(2.0**-80), 1 + 2.0**-11),
    (np.float16, 1 + 2.0**-4, 1 + 2.0**-7, 2.0**-24, 1 + 2.0**-4 + 2.0**-7 + 2.0**-10),
], ids=["f32-up", "f32-down", "f16-up"])
def test_fma_double_rounding_cases(dtype, a, b, c, expected):
    a, b, c = dtype(a), dtype(b), dtype(c)
    out = random.fma_p.bind(a, b, c)
    assert out.dtype == dtype and float(out) == expected
    assert float(out) == float(_exact_fma([a], [b], [c], dtype)[0])


def test_fma_special_values():
    f = np.float32
    a = f([np.inf, np.nan, 1.0, 0.0, 3e38, -0.0])
    b = f([2.0, 1.0, np.inf, np.inf, 10.0, 1.0])
    c = f([1.0, 0.0, -np.inf, 1.0, 0.0, -0.0])  # -0 * 1 + -0 = -0
    out = np.asarray(random.fma_p.bind(a, b, c))
    np.testing.assert_array_equal(np.isnan(out), [False, True, True, True, False, False])
    assert out[0] == np.inf and out[4] == np.inf
    assert out[5] == 0.0 and np.signbit(out[5])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 40])  # (element by element; the array path)
def test_fma_of_zeros_keeps_ieee_signs(dtype, n):
    """``a * b + c`` of zeros is -0 only where both terms are -0, as a fused multiply-add
    gives it (the float64 emulation's parts summed to +0)."""
    cases = [(0.0, -0.5, -0.0, True), (-0.0, 1.0, -0.0, True), (0.0, 1.0, -0.0, False),
             (0.0, -0.5, 0.0, False), (2.0, 0.5, -1.0, False)]
    with config.override("jax_enable_x64", True):
        for a, b, c, negative in cases:
            out = np.asarray(random.fma_p.bind(*(np.full(n, v, dtype) for v in (a, b, c))))
            assert (out == 0).all() and np.signbit(out).all() == negative, (a, b, c, out)


def test_fma_rules(rng):
    a, b, c = (rng.normal(size=(3, 4)) for _ in range(3))
    with config.override("jax_enable_x64", True):
        check_grads(lambda x, y, z: random.fma_p.bind(x, y, z), (a, b, c), order=2)
        check_grads(lambda x, y, z: random.fma_p.bind(x, y, z), (a[0, 0], b[0, 0], c[0, 0]),
                    order=1)
    a, b, c = (x.astype(np.float32) for x in (a, b, c))
    f = lambda x, y, z: random.fma_p.bind(x, y, z)
    out = remat.vmap(f, in_axes=(1, None, 0))(a, b[:, 0], c.T)
    ref = np.stack([np.asarray(f(a[:, j], b[:, 0], c.T[j])) for j in range(4)])
    np.testing.assert_array_equal(out, ref)
    out = remat.vmap(f, in_axes=(0, None, None))(a[:, 0], np.float32(2), np.float32(1))
    np.testing.assert_array_equal(out, a[:, 0] * 2 + 1)
    with pytest.raises(TypeError, match="same dtypes"):
        random.fma_p.bind(a, b.astype(np.float16), c)
    with pytest.raises(TypeError, match="floating"):
        random.fma_p.bind(np.int32(1), np.int32(2), np.int32(3))


# --- XLA's kernels ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_xla_kernels_accuracy_and_special_values(dtype):
    with config.override("jax_enable_x64", True):
        x = np.linspace(-0.999, 0.999, 801).astype(dtype)
        y = np.asarray(random.xla_erf_inv_p.bind(x)).astype(np.float64)
        # erf(erf_inv(x)) == x up to the approximations' error (a few ulps)
        erf = np.vectorize(math.erf)
        tol = {np.float16: 2e-3, np.float32: 2e-6, np.float64: 1e-13}[dtype]
        np.testing.assert_allclose(erf(y), x.astype(np.float64), rtol=tol, atol=tol)
        p = np.geomspace(1e-4, 1e4, 101).astype(dtype)
        np.testing.assert_allclose(np.asarray(random.xla_log_p.bind(p)), np.log(p), rtol=tol)
        t = np.linspace(-0.9, 3.0, 101).astype(dtype)
        np.testing.assert_allclose(np.asarray(random.xla_log1p_p.bind(t)), np.log1p(t),
                                   rtol=tol, atol=tol)
        s = np.array([0.0, -0.0, 1.0, -1.0, 2.0, np.nan], dtype)
        e = np.asarray(random.xla_erf_inv_p.bind(s))
        assert e[0] == 0 and e[1] == 0 and np.signbit(e[1])
        assert e[2] == np.inf and e[3] == -np.inf and np.isnan(e[4]) and np.isnan(e[5])
        v = np.array([0.0, -1.0, np.inf, np.nan, 1.0], dtype)
        lg = np.asarray(random.xla_log_p.bind(v))
        assert lg[0] == -np.inf and np.isnan(lg[1]) and lg[2] == np.inf and np.isnan(lg[3])
        assert lg[4] == 0
        l1 = np.asarray(random.xla_log1p_p.bind(np.array([-1.0, -2.0, 0.0, 1e-30], dtype)))
        assert l1[0] == -np.inf and np.isnan(l1[1]) and l1[2] == 0
        assert l1[3] == dtype(1e-30)


def test_xla_kernel_rules():
    with config.override("jax_enable_x64", True):
        check_grads(random.xla_erf_inv_p.bind, (np.array([-0.7, 0.1, 0.5]),), order=1,
                    atol=1e-6, rtol=1e-6)
        check_grads(random.xla_log_p.bind, (np.array([0.3, 1.5, 9.0]),), order=1, atol=1e-6,
                    rtol=1e-6)
        check_grads(random.xla_log1p_p.bind, (np.array([-0.3, 0.01, 2.0]),), order=1,
                    atol=1e-6, rtol=1e-6)
    x = np.linspace(-0.9, 0.9, 12).astype(np.float32).reshape(3, 4)
    out = remat.vmap(random.xla_erf_inv_p.bind, in_axes=1)(x)
    np.testing.assert_array_equal(out, np.asarray(random.xla_erf_inv_p.bind(x)).T)


# --- direct comparison with JAX --------------------------------------------------------------


@pytest.fixture
def jax_flags():
    jax = pytest.importorskip("jax")
    saved = (jax.config.jax_enable_x64, jax.config.jax_threefry_partitionable)

    def set_flags(x64, partitionable):
        jax.config.update("jax_enable_x64", x64)
        jax.config.update("jax_threefry_partitionable", partitionable)
        return _flags(x64, partitionable)

    yield jax, set_flags
    jax.config.update("jax_enable_x64", saved[0])
    jax.config.update("jax_threefry_partitionable", saved[1])


def assert_all_equal(jax, checks):
    bad = [name for name, a, b in checks if not _bits_equal(a, b)]
    assert not bad, bad


SEEDS = np.array([0, 1, -1, 7, 2**31 - 1, -2**31, 123456789, 42], np.int32)


def test_samplers_match_jax_on_more_seeds(jax_flags):
    """Eight seeds through each sampler (JAX compiles each once), larger draws, float16/32/64
    and both layouts."""
    jax, set_flags = jax_flags
    jr = jax.random
    samplers = {
        "split": lambda r, k: r.split(k, 3),
        "uniform": lambda r, k: r.uniform(k, (500,), minval=-2.5, maxval=1e3),
        "normal f16": lambda r, k: r.normal(k, (500,), "float16"),
        "normal f32": lambda r, k: r.normal(k, (500,)),
    }
    checks = []
    with set_flags(False, True):
        for seed in SEEDS:
            kj, kr = jr.PRNGKey(seed), random.PRNGKey(seed)
            checks.append((f"PRNGKey({seed})", kj, kr))
            checks += [(f"{name} {seed}", f(jr, kj), f(random, kr))
                       for name, f in samplers.items()]
    with set_flags(True, True):
        kj, kr = jr.PRNGKey(2**40 + 3), random.PRNGKey(2**40 + 3)
        checks += [("x64 key", kj, kr),
                   ("normal f64", jr.normal(kj, (500,), "float64"),
                    random.normal(kr, (500,), "float64")),
                   ("uniform f64", jr.uniform(kj, (500,), "float64", -1.0, 3.0),
                    random.uniform(kr, (500,), "float64", -1.0, 3.0))]
    with set_flags(False, False):
        kj, kr = jr.PRNGKey(9), random.PRNGKey(9)
        checks += [("original bits uint16", jr.bits(kj, (3, 5), "uint16"),
                    random.bits(kr, (3, 5), "uint16"))]
    assert_all_equal(jax, checks)


exhaustive = pytest.mark.skipif(
    not os.environ.get("REMAT_EXHAUSTIVE_JAX"),
    reason="many XLA compilations (minutes); set REMAT_EXHAUSTIVE_JAX=1 to run")


@exhaustive
@pytest.mark.parametrize("x64,partitionable", FLAGS, ids=lambda v: str(v))
def test_keys_and_bits_match_jax(jax_flags, x64, partitionable):
    jax, set_flags = jax_flags
    jr = jax.random
    checks = []
    with set_flags(x64, partitionable):
        seeds = [0, 3, -5, 2**31 - 1, 2**33 + 17, -2**62, np.int32(-9), np.uint32(4000000000)]
        if x64:
            seeds += [np.int64(-2**45), np.uint64(2**63 + 11)]
        for seed in seeds:
            kj, kr = jr.PRNGKey(seed), random.PRNGKey(seed)
            checks.append((f"PRNGKey({seed!r})", kj, kr))
            checks.append((f"key({seed!r})", jr.key_data(jr.key(seed)),
                           random.key_data(random.key(seed))))
            for num in (2, 5, (2, 2)):
                checks.append((f"split {num}", jr.split(kj, num), random.split(kr, num)))
            for data in (0, 17, 2**32 - 1, np.int32(-3)):
                checks.append((f"fold_in {data}", jr.fold_in(kj, data), random.fold_in(kr, data)))
        kj, kr = jr.PRNGKey(11), random.PRNGKey(11)
        dts = ["uint8", "uint16", "uint32"] + (["uint64"] if x64 else [])
        for dt in dts:
            for shape in [(), (1,), (3,), (4, 5), (0,), (2, 0, 3), (33,)]:
                checks.append((f"bits {dt} {shape}", jr.bits(kj, shape, dt),
                               random.bits(kr, shape, dt)))
        checks.append(("bits default", jr.bits(kj, (3,)), random.bits(kr, (3,))))
    assert_all_equal(jax, checks)


@exhaustive
@pytest.mark.parametrize("x64,partitionable", FLAGS, ids=lambda v: str(v))
def test_samplers_match_jax(jax_flags, x64, partitionable):
    jax, set_flags = jax_flags
    jr = jax.random
    checks = []
    with set_flags(x64, partitionable):
        floats = ["float16", "float32"] + (["float64"] if x64 else [])
        for seed in (5, 2**32 + 1):
            kj, kr = jr.PRNGKey(seed), random.PRNGKey(seed)
            for dt in floats:
                for shape in [(), (257,), (3, 5)]:
                    checks += [
                        (f"uniform {dt}{shape}", jr.uniform(kj, shape, dt),
                         random.uniform(kr, shape, dt)),
                        (f"normal {dt}{shape}", jr.normal(kj, shape, dt),
                         random.normal(kr, shape, dt)),
                        (f"gumbel {dt}{shape}", jr.gumbel(kj, shape, dt),
                         random.gumbel(kr, shape, dt))]
                checks += [
                    (f"uniform range {dt}", jr.uniform(kj, (200,), dt, -2.5, 1e3),
                     random.uniform(kr, (200,), dt, -2.5, 1e3)),
                    (f"uniform reversed {dt}", jr.uniform(kj, (50,), dt, 4.0, -0.3),
                     random.uniform(kr, (50,), dt, 4.0, -0.3)),
                    (f"gumbel high {dt}", jr.gumbel(kj, (50,), dt, mode="high"),
                     random.gumbel(kr, (50,), dt, mode="high")),
                    (f"bernoulli {dt}", jr.bernoulli(kj, np.array([0.1, 0.5, 0.9], dt), (4, 3)),
                     random.bernoulli(kr, np.array([0.1, 0.5, 0.9], dt), (4, 3))),
                    (f"bernoulli high {dt}", jr.bernoulli(kj, np.array(0.2, dt), (9,), "high"),
                     random.bernoulli(kr, np.array(0.2, dt), (9,), "high"))]
                lg = np.linspace(-3, 3, 24).reshape(4, 6).astype(dt)
                checks += [
                    (f"categorical {dt}", jr.categorical(kj, lg), random.categorical(kr, lg)),
                    (f"categorical axis0 {dt}", jr.categorical(kj, lg, 0, (5, 6)),
                     random.categorical(kr, lg, 0, (5, 6))),
                    (f"categorical norep {dt}", jr.categorical(kj, lg, 1, (3, 4), False),
                     random.categorical(kr, lg, 1, (3, 4), False))]
            lo, hi = np.arange(3, dtype=np.float32), np.float32(7)
            checks.append(("uniform array bounds", jr.uniform(kj, (2, 3), minval=lo, maxval=hi),
                           random.uniform(kr, (2, 3), minval=lo, maxval=hi)))
            checks.append(("bernoulli default", jr.bernoulli(kj, 0.5, (7,)),
                           random.bernoulli(kr, 0.5, (7,))))
            ints = ["int8", "uint8", "int16", "uint16", "int32", "uint32"]
            ints += ["int64", "uint64"] if x64 else []
            for dt in ints:
                info = np.iinfo(dt)
                lo_, hi_ = np.array(info.min, dt), np.array(info.max, dt)
                checks += [(f"randint {dt}", jr.randint(kj, (30,), 0, 100, dt),
                            random.randint(kr, (30,), 0, 100, dt)),
                           (f"randint full {dt}", jr.randint(kj, (30,), lo_, hi_, dt),
                            random.randint(kr, (30,), lo_, hi_, dt))]
            checks += [
                ("randint uint8 to 256", jr.randint(kj, (30,), 0, 256, "uint8"),
                 random.randint(kr, (30,), 0, 256, "uint8")),
                ("randint empty", jr.randint(kj, (5,), 4, 2), random.randint(kr, (5,), 4, 2)),
                ("randint arrays", jr.randint(kj, (2, 3), np.arange(3), np.array([[5], [9]])),
                 random.randint(kr, (2, 3), np.arange(3), np.array([[5], [9]]))),
                ("permutation 2000", jr.permutation(kj, 2000), random.permutation(kr, 2000)),
                ("permutation 0", jr.permutation(kj, 0), random.permutation(kr, 0))]
            a = np.arange(30.0).reshape(5, 6)
            for axis in (0, 1, -1):
                for ind in (False, True):
                    checks.append((f"permutation {axis} {ind}",
                                   jr.permutation(kj, a, axis, ind),
                                   random.permutation(kr, a, axis, ind)))
            p = np.array([0.5, 0.1, 0.0, 0.4], np.float32)
            checks += [
                ("choice", jr.choice(kj, 7, (4,)), random.choice(kr, 7, (4,))),
                ("choice norep", jr.choice(kj, 7, (4,), False), random.choice(kr, 7, (4,), False)),
                ("choice p", jr.choice(kj, 4, (9,), p=p), random.choice(kr, 4, (9,), p=p)),
                ("choice p norep", jr.choice(kj, 4, (3,), False, p),
                 random.choice(kr, 4, (3,), False, p)),
                ("choice axis", jr.choice(kj, a, (2, 2), axis=1),
                 random.choice(kr, a, (2, 2), axis=1)),
                ("choice empty", jr.choice(kj, 5, (0,)), random.choice(kr, 5, (0,)))]
    assert_all_equal(jax, checks)


# --- transformations -------------------------------------------------------------------------


def _sample_all(key):
    k1, k2, k3, k4 = random.split(key, 4)
    return (random.uniform(k1, (3,)), random.normal(k2, (2, 2)),
            random.randint(k3, (4,), -3, 9), random.bernoulli(k4, 0.3, (5,)),
            random.permutation(k1, 6), random.categorical(k2, jnp.arange(4.0)),
            random.fold_in(k3, 12))


@pytest.mark.parametrize("partitionable", [True, False])
def test_jit_matches_eager(partitionable):
    with config.override("jax_threefry_partitionable", partitionable):
        key = random.PRNGKey(4)
        for a, b in zip(remat.jit(_sample_all)(key), _sample_all(key)):
            assert _bits_equal(a, b)
        seeds = remat.jit(lambda s: random.PRNGKey(s))(np.int32(-7))
        np.testing.assert_array_equal(seeds, random.PRNGKey(-7))


def test_vmap_over_split_keys_matches_loop():
    keys = random.split(random.PRNGKey(1), 5)
    outs = remat.vmap(_sample_all)(keys)
    for i in range(5):
        for a, b in zip(outs, _sample_all(keys[i])):
            assert _bits_equal(a[i], b)
    # keys along axis 1, and a batched sampler argument
    out = remat.vmap(lambda k, lo: random.uniform(k, (2,), minval=lo), in_axes=(1, 0))(
        keys.T, jnp.arange(5.0))
    for i in range(5):
        assert _bits_equal(out[i], random.uniform(keys[i], (2,), minval=float(i)))


def test_vmap_over_seeds_and_fold_in_data():
    seeds = np.array([0, -1, 7, 2**31 - 1], np.int32)
    keys = remat.vmap(random.PRNGKey)(seeds)
    np.testing.assert_array_equal(keys, np.stack([random.PRNGKey(s) for s in seeds]))
    key = random.PRNGKey(3)
    data = np.arange(4, dtype=np.uint32)
    folded = remat.vmap(random.fold_in, in_axes=(None, 0))(key, data)
    np.testing.assert_array_equal(folded, np.stack([random.fold_in(key, d) for d in data]))
    splits = remat.vmap(lambda k: random.split(k, 3))(keys)
    np.testing.assert_array_equal(splits[2], random.split(keys[2], 3))


def test_grad_through_uniform_bounds():
    key = random.PRNGKey(8)
    f = lambda lo, hi: jnp.sum(random.uniform(key, (6,), minval=lo, maxval=hi))
    g_lo, g_hi = remat.grad(f, argnums=(0, 1))(np.float32(-1.0), np.float32(3.0))
    u = np.asarray(random.uniform(key, (6,)))  # the unit draws: value = lo + u (hi - lo)
    np.testing.assert_allclose(g_lo, np.sum(1 - u), rtol=1e-6)
    np.testing.assert_allclose(g_hi, np.sum(u), rtol=1e-6)
    with config.override("jax_enable_x64", True):
        check_grads(lambda lo, hi: random.uniform(key, (4,), jnp.float64, lo, hi),
                    (np.float64(-0.5), np.float64(2.0)), order=2)
    # a key is an integer input: its cotangent is float0 zeros
    gk = remat.grad(lambda k, x: jnp.sum(random.normal(k, (3,)) * x), argnums=(0, 1),
                    allow_int=True)(
        key, np.float32(2.0))
    assert gk[0].dtype == remat.dtypes.float0 and gk[0].shape == (2,)
    np.testing.assert_allclose(gk[1], np.sum(random.normal(key, (3,))), rtol=1e-6)


def _dropout_loss(w, x, key):
    h = jnp.tanh(x @ w)
    keep = random.bernoulli(key, 0.6, h.shape)
    h = jnp.where(keep, h / 0.6, 0.0)
    return jnp.sum(h ** 2)


@pytest.mark.parametrize("policy", [None, "nothing_saveable"])
def test_dropout_inside_checkpoint_recomputes_the_same_mask(policy):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 5)).astype(np.float32)
    x = rng.normal(size=(3, 4)).astype(np.float32)
    key = random.PRNGKey(42)
    pol = None if policy is None else getattr(remat.checkpoint_policies, policy)
    calls = []
    impl = random.threefry2x32_p.impl
    random.threefry2x32_p.def_impl(lambda *a: (calls.append(1), impl(*a))[1])
    try:
        g_ref = remat.grad(_dropout_loss)(w, x, key)
        n_plain = len(calls)
        g_ckpt = remat.grad(remat.checkpoint(_dropout_loss, policy=pol))(w, x, key)
        n_ckpt = len(calls) - n_plain
        g_jit = remat.jit(remat.grad(remat.checkpoint(_dropout_loss, policy=pol)))(w, x, key)
    finally:
        random.threefry2x32_p.def_impl(impl)
    assert _bits_equal(g_ckpt, g_ref) and _bits_equal(g_jit, g_ref)
    assert n_ckpt == 2 * n_plain  # the mask is drawn again on the backward pass
    assert np.count_nonzero(np.asarray(g_ref)) > 0


def test_split_and_sample_inside_scan_and_cond():
    def body(key, _):
        key, sub = random.split(key)
        return key, random.normal(sub, (2,))

    _, xs = lax.scan(body, random.PRNGKey(0), None, length=3)
    key = random.PRNGKey(0)
    for i in range(3):
        key, sub = random.split(key)
        assert _bits_equal(xs[i], random.normal(sub, (2,)))
    out = lax.cond(True, lambda k: random.uniform(k, (2,)), lambda k: jnp.zeros(2),
                   random.PRNGKey(5))
    assert _bits_equal(out, random.uniform(random.PRNGKey(5), (2,)))


# --- keys, flags, errors ---------------------------------------------------------------------


def test_key_helpers_and_flag():
    k = random.PRNGKey(9)  # raw keys (typed keys: tests/test_prng_keys.py)
    assert k.dtype == np.uint32 and k.shape == (2,)
    np.testing.assert_array_equal(k, [0, 9])
    assert random.key_data(k) is k
    np.testing.assert_array_equal(random.key_data(random.key(9)), k)
    np.testing.assert_array_equal(
        random.key_data(random.wrap_key_data(np.array([0, 9], np.uint32))), k)
    assert config.read("jax_threefry_partitionable") is True  # JAX's default
    assert random.split(k).shape == (2, 2) and random.split(k, (3, 1)).shape == (3, 1, 2)
    assert not np.array_equal(random.split(k), random.split(random.fold_in(k, 0)))
    with pytest.raises(ValueError, match="not available in remat"):
        random.PRNGKey(0, impl="rbg")
    with pytest.raises(ValueError, match="unrecognized PRNG implementation"):
        random.PRNGKey(0, impl="mersenne")


def test_seeds_without_and_with_x64():
    np.testing.assert_array_equal(random.PRNGKey(2**32 + 5), [0, 5])
    np.testing.assert_array_equal(random.PRNGKey(-1), [0, 2**32 - 1])
    with config.override("jax_enable_x64", True):
        np.testing.assert_array_equal(random.PRNGKey(2**32 + 5), [1, 5])
        np.testing.assert_array_equal(random.PRNGKey(-1), [2**32 - 1, 2**32 - 1])
        np.testing.assert_array_equal(random.PRNGKey(np.uint64(2**63 + 5)), [2**31, 5])
        assert random.bits(random.PRNGKey(0), (2,)).dtype == np.uint64
        assert random.uniform(random.PRNGKey(0), (2,)).dtype == np.float64
        assert random.randint(random.PRNGKey(0), (2,), 0, 3).dtype == np.int64


def test_errors():
    key = random.PRNGKey(0)
    with pytest.raises(TypeError, match="expected key_data.dtype = uint32"):
        random.split(np.array([0, 1], np.int32))
    with pytest.raises(TypeError, match=r"end with \(2,\)"):
        random.uniform(np.zeros(3, np.uint32))
    with pytest.raises(ValueError, match="accepts a single key"):
        random.normal(random.split(key, 3))
    with pytest.raises(TypeError, match="scalar seed"):
        random.PRNGKey(np.arange(2))
    with pytest.raises(TypeError, match="must be an integer"):
        random.PRNGKey(1.5)
    with pytest.raises(OverflowError):
        random.PRNGKey(2**64)
    with pytest.raises(TypeError, match="fold_in accepts a scalar"):
        random.fold_in(key, np.arange(2))
    with pytest.raises(OverflowError, match="out of bounds for uint32"):
        random.fold_in(key, -1)
    with pytest.raises(ValueError, match="unsigned int dtype"):
        random.bits(key, (2,), np.int32)
    with pytest.raises(ValueError, match="must be a float dtype"):
        random.uniform(key, (2,), np.int32)
    with pytest.raises(ValueError, match="float or complex dtype"):
        random.normal(key, (2,), np.int32)
    with pytest.raises(ValueError, match="broadcast"):
        random.uniform(key, (2,), minval=np.zeros(3))
    with pytest.raises(TypeError, match="floating dtype"):
        random.bernoulli(key, 1)
    with pytest.raises(ValueError, match="expected 'high' or 'low'"):
        random.bernoulli(key, 0.5, mode="mid")
    with pytest.raises(ValueError, match="broadcast"):
        random.bernoulli(key, np.full(3, 0.5), (2,))
    with pytest.raises(TypeError, match="integer dtypes"):
        random.randint(key, (2,), 0, 3, np.float32)
    with pytest.raises(TypeError, match="at least 1-dimensional"):
        random.permutation(key, 3.0)
    with pytest.raises(ValueError, match="cannot exceed number of categories"):
        random.categorical(key, np.zeros(3), shape=(4,), replace=False)
    with pytest.raises(ValueError, match="larger sample"):
        random.choice(key, 3, (4,), replace=False)
    with pytest.raises(ValueError, match="p must be None or a 1D vector"):
        random.choice(key, 3, (2,), p=np.ones(4) / 4)
    with pytest.raises(ValueError, match="valid mode for gumbel"):
        random.gumbel(key, (2,), mode="highest")
    with pytest.raises(remat.errors.ConcretizationTypeError):
        remat.jit(lambda n: random.permutation(key, n))(5)


# --- distributions ---------------------------------------------------------------------------


def test_distribution_sanity():
    key = random.PRNGKey(2024)
    k = random.split(key, 8)
    u = np.asarray(random.uniform(k[0], (20000,), minval=-2.0, maxval=3.0))
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.05
    n = np.asarray(random.normal(k[1], (20000,)))
    assert abs(n.mean()) < 0.03 and abs(n.std() - 1) < 0.03
    b = np.asarray(random.bernoulli(k[2], 0.3, (20000,)))
    assert b.dtype == np.bool_ and abs(b.mean() - 0.3) < 0.02
    r = np.asarray(random.randint(k[3], (5000,), -3, 4))
    assert set(np.unique(r)) == set(range(-3, 4))
    perm = np.asarray(random.permutation(k[4], 50))
    np.testing.assert_array_equal(np.sort(perm), np.arange(50))
    logits = np.log(np.array([0.1, 0.2, 0.7], np.float32))
    c = np.asarray(random.categorical(k[5], logits, shape=(20000,)))
    np.testing.assert_allclose(np.bincount(c, minlength=3) / 20000, [0.1, 0.2, 0.7], atol=0.02)
    g = np.asarray(random.gumbel(k[6], (20000,)))
    assert abs(g.mean() - np.euler_gamma) < 0.05
    ch = np.asarray(random.choice(k[7], 10, (10,), replace=False))
    np.testing.assert_array_equal(np.sort(ch), np.arange(10))
