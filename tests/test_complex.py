"""Complex numbers through every transformation: the primitives ``real imag complex conj``
(values, dtypes, errors, JVPs, JAX's transposes, batching), the complex derivative convention
of every elementwise primitive that accepts complex values, ``grad``/``jacfwd``/``jacrev`` with
``holomorphic=True`` and their errors, complex ``dot_general`` and reductions, the
``remat.numpy`` complex functions, ``remat.numpy.linalg`` and ``fft`` on complex inputs, and
vmap / jit / checkpoint / scan of complex functions.

Each is checked against NumPy and hard-coded values, and against JAX where it is installed.
Finite differences (``check_grads``) see complex functions through ``_realified``: a function
of the real and imaginary parts of its arguments that returns the parts of its outputs, so
the real derivatives checked pass through every complex rule; ``check_grads`` itself takes
complex functions whole (JAX's conventions), tested at the end, wrong rules included.
"""

import warnings

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.config import config
from remat.test_util import check_grads
from remat.tree_util import tree_flatten

RNG = np.random.default_rng(7)


def _jax():
    return pytest.importorskip("jax")


def crand(*shape, dtype=np.complex64):
    return (RNG.normal(size=shape) + 1j * RNG.normal(size=shape)).astype(dtype)


def frand(*shape, dtype=np.float32):
    return RNG.normal(size=shape).astype(dtype)


def _close(actual, expected, tol=1e-5, dtype=None):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if dtype is not None:
        assert actual.dtype == np.dtype(dtype), (actual.dtype, dtype)
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


def _assert_same_as_jax(actual, expected, tol=1e-5):
    """Equal values, shapes and dtypes (leaf by leaf)."""
    la, le = tree_flatten(actual)[0], tree_flatten(_jax().tree_util.tree_leaves(expected))[0]
    assert len(la) == len(le)
    for a, e in zip(la, le):
        _close(a, e, tol, np.asarray(e).dtype)


def _realified(f, n_args):
    """``f`` of ``n_args`` complex arguments as a function of their real and imaginary parts,
    returning the real and imaginary parts of its complex outputs (real ones as they are)."""

    def of_parts(*parts):
        zs = [lax.complex(parts[2 * i], parts[2 * i + 1]) for i in range(n_args)]
        outs = []
        for o in tree_flatten(f(*zs))[0]:
            outs += [jnp.real(o), jnp.imag(o)] if jnp.iscomplexobj(o) else [o]
        return tuple(outs)

    return of_parts


def _parts(*zs):
    return tuple(p for z in zs for p in (np.real(z).copy(), np.imag(z).copy()))


def check_complex_grads(f, zs, order=1, modes=("fwd", "rev"), **kw):
    check_grads(_realified(f, len(zs)), _parts(*zs), order=order, modes=modes, **kw)


# --- the primitives --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,part", [(np.complex64, np.float32),
                                        (np.complex128, np.float64)])
def test_parts_values_and_dtypes(dtype, part):
    z = crand(2, 3, dtype=dtype)
    with config.override("jax_enable_x64", True):
        _close(lax.real(z), z.real, dtype=part)
        _close(lax.imag(z), z.imag, dtype=part)
        _close(lax.conj(z), np.conj(z), dtype=dtype)
        _close(lax.complex(z.real, z.imag), z, dtype=dtype)
        _close(lax.conj(z.real), z.real.astype(dtype), dtype=dtype)
        assert remat.eval_shape(lax.real, z).dtype == part


def test_parts_scalars_weak_types_and_broadcasting():
    out = lax.complex(1.0, 2.0)
    assert out.dtype == np.complex64 and out.weak_type and complex(out) == 1 + 2j
    r = lax.real(1 + 2j)
    assert r.dtype == np.float32 and r.weak_type and float(r) == 1.0
    c = lax.conj(1 + 2j)
    assert c.dtype == np.complex64 and c.weak_type and complex(c) == 1 - 2j
    x = np.float32([1, 2])
    _close(lax.complex(x, 3.0), [1 + 3j, 2 + 3j], dtype=np.complex64)
    _close(lax.complex(np.float32(5), x), [5 + 1j, 5 + 2j], dtype=np.complex64)
    assert not lax.complex(x, 3.0).weak_type
    # infinite parts stay where they are (x + 1j * y would make a NaN real part)
    inf = lax.complex(np.float32([0.0]), np.float32([np.inf]))
    assert np.asarray(inf)[0].real == 0.0 and np.isinf(np.asarray(inf)[0].imag)


def test_parts_errors_match_jax():
    jlax = _jax().lax
    z, x = crand(2), frand(2)
    bad = [(lambda m: m.real(x), "real does not accept dtype float32"),
           (lambda m: m.imag(np.int32([1])), "imag does not accept dtype int32"),
           (lambda m: m.complex(z, z), "complex does not accept dtype complex64 at position 0"),
           (lambda m: m.complex(x, x.astype(np.float16)),
            "complex does not accept dtype float16 at position 1"),
           (lambda m: m.conj(np.int32([1])), "conj does not accept dtype int32")]
    for call, msg in bad:
        with pytest.raises(TypeError, match=msg):
            call(lax)
        with pytest.raises(TypeError, match=msg):
            call(jlax)
    with config.override("jax_enable_x64", True), pytest.raises(TypeError, match="same dtypes"):
        lax.complex(x, x.astype(np.float64))


def test_jaxpr_names_and_params():
    z = crand(2)
    assert str(remat.make_jaxpr(lax.conj)(z)) == \
        "{ lambda ; a:c64[2]. let b:c64[2] = conj[input_dtype=complex64] a in (b,) }"
    text = str(remat.make_jaxpr(lambda z: lax.complex(lax.real(z), lax.imag(z)))(z))
    assert "f32[2] = real a" in text and "f32[2] = imag a" in text and "c64[2] = complex" in text
    assert "integer_pow[y=-1]" in str(remat.make_jaxpr(lax.reciprocal)(z))
    assert not remat.make_jaxpr(jnp.conj)(frand(2)).eqns  # the identity on real values


def test_transposes_follow_jax():
    z, ct_c, ct_r = crand(3), crand(3), frand(3)
    x, y = frand(3), frand(3)
    # real -> complex(ct, 0); imag -> complex(0, -ct); conj -> conj(ct); conj of real -> real
    _close(remat.vjp(lax.real, z)[1](ct_r)[0], ct_r + 0j, dtype=np.complex64)
    _close(remat.vjp(lax.imag, z)[1](ct_r)[0], -1j * ct_r, dtype=np.complex64)
    _close(remat.vjp(lax.conj, z)[1](ct_c)[0], np.conj(ct_c), dtype=np.complex64)
    _close(remat.vjp(lax.conj, x)[1](ct_c)[0], ct_c.real, dtype=np.float32)
    gx, gy = remat.vjp(lax.complex, x, y)[1](ct_c)
    _close(gx, ct_c.real, dtype=np.float32)
    _close(gy, -ct_c.imag, dtype=np.float32)
    # a rank-0 part broadcast against an array sums its cotangent
    g0 = remat.vjp(lambda s: lax.complex(x, s), np.float32(1))[1](ct_c)[0]
    _close(g0, -ct_c.imag.sum(), 1e-5, np.float32)
    jax = _jax()
    for f, args, ct in [(jax.lax.real, (z,), ct_r), (jax.lax.imag, (z,), ct_r),
                        (jax.lax.conj, (z,), ct_c), (jax.lax.conj, (x,), ct_c),
                        (jax.lax.complex, (x, y), ct_c)]:
        mine = getattr(lax, f.__name__)
        _assert_same_as_jax(remat.vjp(mine, *args)[1](ct), jax.vjp(f, *args)[1](ct))
        _assert_same_as_jax(remat.jvp(mine, args, args)[1], jax.jvp(f, args, args)[1])


def test_primitive_grads_by_finite_differences():
    z, w = crand(3), crand(3)
    check_complex_grads(lambda z: lax.real(z) * lax.imag(z), (z,), order=2)
    check_complex_grads(lambda z: lax.conj(z) * z * z, (z,), order=2)
    check_complex_grads(lambda z, w: lax.complex(lax.imag(z), lax.real(w)) ** 2, (z, w))
    check_grads(lambda x, y: jnp.abs(lax.complex(x, y)) ** 3, (frand(3), frand(3)), order=2)
    check_grads(lambda x: lax.imag(lax.conj(x) * (1 + 2j)), (frand(3),), order=2)


@pytest.mark.parametrize("name", ["real", "imag", "conj"])
def test_unary_parts_vmap_and_jit(name):
    f = getattr(lax, name)
    zs = crand(4, 3)
    for axis in (0, 1):
        out = remat.vmap(f, in_axes=axis)(zs)
        expected = np.stack([np.asarray(f(np.take(zs, i, axis))) for i in range(zs.shape[axis])])
        _close(out, expected)
    _close(remat.jit(f)(zs), f(zs))


def test_complex_vmap_and_jit():
    xs, ys, y = frand(4, 3), frand(4, 3), frand(3)
    expected = xs + 1j * ys
    _close(remat.vmap(lax.complex)(xs, ys), expected, dtype=np.complex64)
    _close(remat.vmap(lax.complex, in_axes=(1, 1))(xs.T, ys.T), expected)
    _close(remat.vmap(lax.complex, in_axes=(0, None))(xs, y), xs + 1j * y)
    _close(remat.vmap(lambda a: lax.complex(a, np.float32(2)))(xs), xs + 2j)
    _close(remat.vmap(lambda s: lax.complex(y, s))(xs[:, 0]), y + 1j * xs[:, :1])
    _close(remat.jit(lax.complex)(xs, ys), expected)


def test_reciprocal():
    z = crand(3)
    _close(lax.reciprocal(z), 1 / z, 1e-5, np.complex64)
    _close(lax.reciprocal(np.float32([2, 4])), [0.5, 0.25], dtype=np.float32)
    _assert_same_as_jax(lax.reciprocal(z), _jax().lax.reciprocal(z))
    check_complex_grads(lax.reciprocal, (z,), order=2)


# --- elementwise primitives on complex values ------------------------------------------------

UNARY = ["exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan",
         "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt", "rsqrt",
         "square", "neg", "sign", "abs", "real", "imag", "conj", "reciprocal"]
Z = np.array([0.3 + 0.7j, -0.4 + 0.2j, 0.5 - 0.6j, 1.2 + 0.1j], np.complex64)
T = np.array([0.2 - 0.1j, 0.3 + 0.5j, -0.7 + 0.4j, 0.1 + 0.9j], np.complex64)


@pytest.mark.parametrize("name", UNARY)
def test_unary_complex_derivatives_match_jax(name):
    jax = _jax()
    mine, theirs = getattr(lax, name), getattr(jax.lax, name)
    # JAX's acosh rule 1/sqrt(z^2 - 1) has the wrong sign where Re(z) < 0 (remat follows the
    # principal branch there: see test_acosh_derivative_follows_the_principal_branch)
    z = np.abs(Z.real) + 1j * Z.imag if name == "acosh" else Z
    out, tangent = remat.jvp(mine, (z,), (T,))
    j_out, j_tangent = jax.jvp(theirs, (z,), (T,))
    _assert_same_as_jax(out, j_out, 1e-5)
    _assert_same_as_jax(tangent, j_tangent, 1e-4)
    ct = (T[::-1] if np.iscomplexobj(j_out) else T.real).astype(np.asarray(j_out).dtype)
    _assert_same_as_jax(remat.vjp(mine, z)[1](ct), jax.vjp(theirs, z)[1](ct), 1e-4)


def test_acosh_derivative_follows_the_principal_branch():
    z = np.array([-0.4 + 0.2j, -2 - 0.3j, 0.5 + 0.1j], np.complex128)
    with config.override("jax_enable_x64", True):
        d = remat.jvp(lax.acosh, (z,), (np.ones_like(z),))[1]
    _close(d, 1 / (np.sqrt(z - 1) * np.sqrt(z + 1)), 1e-12)
    _close(d, (np.arccosh(z + 1e-7) - np.arccosh(z - 1e-7)) / 2e-7, 1e-6)


@pytest.mark.parametrize("name", [n for n in UNARY if n not in ("sign",)])
def test_unary_complex_grads_by_finite_differences(name):
    check_complex_grads(getattr(lax, name), (Z,), order=1)


def test_holomorphic_derivatives_are_the_complex_derivative():
    """The JVP of a holomorphic primitive is ``f'(z) t``; its VJP is ``ct f'(z)`` (the plain
    transpose: no conjugation)."""
    derivs = {"exp": np.exp, "sin": np.cos, "cos": lambda z: -np.sin(z),
              "log": lambda z: 1 / z, "sqrt": lambda z: 0.5 / np.sqrt(z),
              "tanh": lambda z: 1 - np.tanh(z) ** 2, "reciprocal": lambda z: -1 / z ** 2}
    for name, d in derivs.items():
        f = getattr(lax, name)
        _close(remat.jvp(f, (Z,), (T,))[1], d(Z) * T, 1e-5)
        _close(remat.vjp(f, Z)[1](T)[0], T * d(Z), 1e-5)
        _close(remat.grad(f, holomorphic=True)(Z[0]), d(Z[0]), 1e-5)


def test_abs_derivative():
    z = np.complex64(3 + 4j)
    _close(remat.grad(jnp.abs)(z), 0.6 - 0.8j, 1e-6, np.complex64)
    _close(remat.grad(jnp.abs)(np.complex64(0)), 0j)
    _close(remat.jvp(jnp.abs, (z,), (np.complex64(1j),))[1], 0.8, 1e-6, np.float32)
    # on reals: the sign, with slope 1 at 0 (as JAX)
    _close(remat.vmap(remat.grad(jnp.abs))(np.float32([-2, 0, 3])), [-1, 1, 1])
    jax = _jax()
    for x in (z, np.complex64(0), np.float32(0), np.float32(-1.5)):
        _assert_same_as_jax(remat.grad(jnp.abs)(x), jax.grad(jax.numpy.abs)(x))


BINARY = {
    "mul": lambda m, a, b: a * b,
    "div": lambda m, a, b: a / b,
    "add_sub": lambda m, a, b: a + b - 2 * b,
    "pow": lambda m, a, b: m.power(a, b),
    "pow_float": lambda m, a, b: m.power(a, 2.5) * b,
    "integer_pow": lambda m, a, b: a ** 3 + b ** -2,
    "max": lambda m, a, b: m.maximum(a, b),
    "where": lambda m, a, b: m.where(m.real(a) > 0, a, b),
    "log10": lambda m, a, b: m.log10(a) * m.log2(b),
    "logaddexp": lambda m, a, b: m.logaddexp(a, b),
}


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_complex_matches_jax(name):
    jax = _jax()
    f = BINARY[name]
    w = Z[::-1] * 0.7
    out, pullback = remat.vjp(lambda a, b: f(jnp, a, b), Z, w)
    j_out, j_pullback = jax.vjp(lambda a, b: f(jax.numpy, a, b), Z, w)
    _assert_same_as_jax(out, j_out, 1e-4)
    _assert_same_as_jax(pullback(T), j_pullback(T), 1e-4)
    _assert_same_as_jax(remat.jvp(lambda a, b: f(jnp, a, b), (Z, w), (T, T))[1],
                 jax.jvp(lambda a, b: f(jax.numpy, a, b), (Z, w), (T, T))[1], 1e-4)
    if name not in ("max", "where"):
        check_complex_grads(lambda a, b: f(jnp, a, b), (Z, w))


# --- grad, vjp, jacfwd, jacrev: JAX's conventions and errors ---------------------------------


def test_grad_of_real_valued_functions_is_the_conjugate_convention():
    """``grad(f)(z) = df/dx - i df/dy`` for real-valued ``f`` (JAX's convention)."""
    z = np.complex64(3 + 4j)
    _close(remat.grad(lambda z: jnp.abs(z) ** 2)(z), 6 - 8j, 1e-5, np.complex64)  # 2 conj(z)
    _close(remat.grad(lambda z: jnp.real(z * z))(z), 6 + 8j, 1e-5)  # x^2 - y^2: 2x + 2iy
    _close(remat.grad(lambda z: jnp.imag(z))(z), -1j, 1e-6)
    _close(remat.grad(lambda z: jnp.real(z))(z), 1 + 0j, 1e-6)
    _close(remat.grad(jnp.angle)(z), (-4 - 3j) / 25, 1e-6)
    jax = _jax()
    fns = [lambda m, z: m.abs(z) ** 2, lambda m, z: m.real(m.exp(z) * m.conj(z)),
           lambda m, z: m.angle(z * z), lambda m, z: m.imag(m.log(z)) + m.abs(m.sin(z))]
    for f in fns:
        _assert_same_as_jax(remat.grad(lambda z, f=f: f(jnp, z))(z),
                     jax.grad(lambda z, f=f: f(jax.numpy, z))(z))


def test_vjp_cotangent_conventions():
    x, z = frand(3), crand(3)
    ct_c, ct_r = crand(3), frand(3)
    # real input, complex output: the real part of ct * f'(x)
    g = remat.vjp(lambda x: jnp.exp(1j * x), x)[1](ct_c)[0]
    _close(g, np.real(ct_c * 1j * np.exp(1j * x)), 1e-5, np.float32)
    # complex input, real output |z|^2: ct * 2 conj(z)
    _close(remat.vjp(lambda z: jnp.abs(z) ** 2, z)[1](ct_r)[0], ct_r * 2 * np.conj(z), 1e-5)
    jax = _jax()
    cases = [(lambda m, x: m.exp(1j * x), x, ct_c), (lambda m, z: m.abs(z) ** 2, z, ct_r),
             (lambda m, z: m.sin(m.conj(z)) * z, z, ct_c)]
    for f, arg, ct in cases:
        _assert_same_as_jax(remat.vjp(lambda a, f=f: f(jnp, a), arg)[1](ct),
                     jax.vjp(lambda a, f=f: f(jax.numpy, a), arg)[1](ct), 1e-5)


def test_holomorphic_grad_jacfwd_jacrev_hessian():
    z = crand(3)

    def f(m, z):
        return m.sin(z) * z[::-1]

    expected = np.diag(np.cos(z) * z[::-1]) + np.diag(np.sin(z))[:, ::-1]
    _close(remat.jacfwd(lambda z: f(jnp, z), holomorphic=True)(z), expected, 1e-5,
           np.complex64)
    _close(remat.jacrev(lambda z: f(jnp, z), holomorphic=True)(z), expected, 1e-5,
           np.complex64)
    val, g = remat.value_and_grad(lambda z: jnp.exp(z) * z, holomorphic=True)(z[0])
    _close(val, np.exp(z[0]) * z[0], 1e-5)
    _close(g, np.exp(z[0]) * (1 + z[0]), 1e-5, np.complex64)
    h = remat.hessian(lambda z: jnp.sum(jnp.sin(z) * z), holomorphic=True)(z)
    _close(h, np.diag(2 * np.cos(z) - z * np.sin(z)), 1e-5, np.complex64)
    jax = _jax()
    _assert_same_as_jax(remat.jacrev(lambda z: f(jnp, z), holomorphic=True)(z),
                 jax.jacrev(lambda z: f(jax.numpy, z), holomorphic=True)(z))
    _assert_same_as_jax(remat.jacfwd(lambda z: f(jnp, z), holomorphic=True)(z),
                 jax.jacfwd(lambda z: f(jax.numpy, z), holomorphic=True)(z))
    # jacrev of a real-valued function of complex inputs: rows of the conjugate convention
    _assert_same_as_jax(remat.jacrev(jnp.abs)(z), jax.jacrev(jax.numpy.abs)(z))
    # jacfwd of real inputs to complex outputs
    x = frand(3)
    _assert_same_as_jax(remat.jacfwd(lambda x: jnp.exp(1j * x))(x),
                 jax.jacfwd(lambda x: jax.numpy.exp(1j * x))(x))


HOLOMORPHIC_ERRORS = [
    ("grad", lambda m, z, x: m.grad(m.numpy.sin)(z[0]), "grad requires real-valued outputs"),
    ("grad_holo_real_in", lambda m, z, x: m.grad(m.numpy.sin, holomorphic=True)(x[0]),
     "grad with holomorphic=True requires inputs with complex dtype, but got float32"),
    ("grad_holo_real_out", lambda m, z, x: m.grad(m.numpy.abs, holomorphic=True)(z[0]),
     "grad with holomorphic=True requires outputs with complex dtype, but got float32"),
    ("grad_int_out", lambda m, z, x: m.grad(lambda x: (x > 0).astype(np.int32))(x[0]),
     "grad requires real-valued outputs .* For differentiation of functions with integer"),
    ("jacfwd", lambda m, z, x: m.jacfwd(m.numpy.sin)(z), "jacfwd requires real-valued inputs"),
    ("jacfwd_holo_real_in", lambda m, z, x: m.jacfwd(m.numpy.sin, holomorphic=True)(x),
     "jacfwd with holomorphic=True requires inputs with complex dtype"),
    ("jacfwd_holo_real_out", lambda m, z, x: m.jacfwd(m.numpy.abs, holomorphic=True)(z),
     "jacfwd with holomorphic=True requires outputs with complex dtype"),
    ("jacrev", lambda m, z, x: m.jacrev(m.numpy.sin)(z), "jacrev requires real-valued outputs"),
    ("jacrev_holo_real_in", lambda m, z, x: m.jacrev(m.numpy.sin, holomorphic=True)(x),
     "jacrev with holomorphic=True requires inputs with complex dtype"),
    ("jacrev_holo_real_out", lambda m, z, x: m.jacrev(m.numpy.abs, holomorphic=True)(z),
     "jacrev with holomorphic=True requires outputs with complex dtype"),
]


@pytest.mark.parametrize("name,call,msg", HOLOMORPHIC_ERRORS, ids=[c[0] for c in
                                                                    HOLOMORPHIC_ERRORS])
def test_holomorphic_errors_match_jax(name, call, msg):
    z, x = crand(2), frand(2)
    with pytest.raises(TypeError, match=msg):
        call(remat, z, x)
    with pytest.raises(TypeError, match=msg):
        call(_jax(), z, x)


# --- dot_general, reductions -----------------------------------------------------------------


def test_dot_general_transpose_does_not_conjugate():
    a, b, ct = crand(2, 3), crand(3, 4), crand(2, 4)
    out, pullback = remat.vjp(lambda a, b: lax.dot(a, b), a, b)
    _close(out, a @ b, 1e-5, np.complex64)
    ga, gb = pullback(ct)
    _close(ga, ct @ b.T, 1e-5, np.complex64)
    _close(gb, a.T @ ct, 1e-5, np.complex64)
    jax = _jax()
    _assert_same_as_jax(pullback(ct), jax.vjp(lambda a, b: jax.lax.dot(a, b), a, b)[1](ct))
    dims = (((2,), (1,)), ((0,), (0,)))
    x, y = crand(2, 3, 4), crand(2, 4, 5)
    _close(lax.dot_general(x, y, dims), np.einsum("bij,bjk->bik", x, y), 1e-5)
    check_complex_grads(lambda x, y: lax.dot_general(x, y, dims), (x, y))


def test_mixed_real_complex_dot_grad():
    """The cotangent of a real operand of a complex dot is the real part, silently."""
    x, z = frand(3), crand(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = remat.grad(lambda x: jnp.real(lax.dot(x, z)))(x)
    _close(g, z.real, 1e-6, np.float32)
    jax = _jax()
    _assert_same_as_jax(g, jax.grad(lambda x: jax.numpy.real(jax.lax.dot(x, z)))(x))
    with pytest.warns(np.exceptions.ComplexWarning, match="discards the imaginary part"):
        lax.convert_element_type(z, np.float32)


REDUCTIONS = {
    "sum": lambda m, a: m.sum(a, axis=0), "prod": lambda m, a: m.prod(a, axis=1),
    "mean": lambda m, a: m.mean(a), "cumsum": lambda m, a: m.cumsum(a, axis=1),
    "cumprod": lambda m, a: m.cumprod(a, axis=0), "var": lambda m, a: m.var(a, axis=0),
    "std": lambda m, a: m.std(a), "trace": lambda m, a: m.trace(a[:, :2]),
    "vdot": lambda m, a: m.vdot(a, a[::-1]), "linalg_norm": lambda m, a: m.linalg.norm(a),
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_complex_reductions(name):
    a = crand(2, 3)
    f = REDUCTIONS[name]
    expected = f(np, a)
    _close(f(jnp, a), expected, 1e-5, np.asarray(expected).dtype
           if np.asarray(expected).dtype != np.float64 else np.float32)
    jax = _jax()
    ct = np.asarray(f(jax.numpy, a))
    ct = (ct * 0 + 0.5 - 0.25j).astype(ct.dtype) if np.iscomplexobj(ct) else ct * 0 + 0.5
    _assert_same_as_jax(remat.vjp(lambda a: f(jnp, a), a)[1](ct),
                 jax.vjp(lambda a: f(jax.numpy, a), a)[1](ct), 1e-4)
    check_complex_grads(lambda a: f(jnp, a), (a,))


def test_var_of_complex_is_real():
    a = crand(4)
    v = jnp.var(a)
    assert v.dtype == np.float32
    _close(v, np.var(a), 1e-5)
    _close(jnp.var(a, dtype=np.complex64), np.var(a), 1e-5, np.complex64)
    with pytest.raises(ValueError, match="real dtype parameters"):
        jnp.var(a, dtype=np.float32)


# --- remat.numpy on complex values -----------------------------------------------------------


def test_numpy_complex_functions_against_numpy():
    z = np.array([[0.3 + 0.7j, -0.4 + 0.2j, 0.5 - 0.6j], [1.5 + 0j, 0j, -2.5 - 1j]],
                 np.complex64)
    for name in ("real", "imag", "conj", "conjugate", "angle", "abs", "absolute", "iscomplex",
                 "isreal", "isfinite", "sign", "sqrt", "exp", "log1p", "square", "rint",
                 "round", "sort_complex", "reciprocal"):
        with np.errstate(invalid="ignore", divide="ignore"):
            expected = getattr(np, name)(z)
        out = getattr(jnp, name)(z)
        if name in ("angle", "abs", "absolute", "real", "imag"):
            assert out.dtype == np.float32, name
        _close(out, expected, 1e-5)
    assert jnp.iscomplexobj(z) and not jnp.isrealobj(z) and not jnp.iscomplexobj(z.real)
    _close(jnp.angle(z, deg=True), np.angle(z, deg=True), 1e-4)
    _close(jnp.round(z * 10, 1), np.round(z * 10, 1), 1e-4)
    _close(jnp.vdot(z, z[::-1]), np.vdot(z, z[::-1]), 1e-5)
    _close(jnp.isclose(z, z + 1e-7), np.isclose(z, z + 1e-7))
    assert bool(jnp.allclose(z, z * (1 + 1e-7)))
    _close(jnp.log2(z[1]), [np.log2(1.5 + 0j), -np.inf + 0j, np.log2(-2.5 - 1j)], 1e-5)
    _close(jnp.log10(z[0]), np.log10(z[0]), 1e-5)
    _close(jnp.real(frand(2) * 0 + 1), [1, 1])
    _close(jnp.imag(np.float32([1, 2])), [0, 0])
    # isfinite looks at both parts
    _close(jnp.isfinite(np.complex64([np.inf, 1j * np.inf, 1 + 1j])), [False, False, True])


def test_numpy_complex_functions_against_jax():
    jnp_j = _jax().numpy
    z = crand(2, 3)
    w = crand(2, 3)
    for f in (lambda m: m.angle(z), lambda m: m.logaddexp(z, w), lambda m: m.logaddexp2(z, w),
              lambda m: m.corrcoef(z), lambda m: m.cov(z), lambda m: m.iscomplex(z),
              lambda m: m.log2(z), lambda m: m.round(z, 2), lambda m: m.fft.hfft(z[0], 6),
              lambda m: m.fft.ihfft(z[0].real, 5), lambda m: m.angle(np.complex64(1j))):
        _assert_same_as_jax(f(jnp), f(jnp_j), 1e-4)


def test_numpy_complex_errors_match_jax():
    jnp_j = _jax().numpy
    z = crand(3)
    for call, err in [(lambda m: m.hypot(z, z), ValueError),
                      (lambda m: m.clip(z, 0, 1), ValueError),
                      (lambda m: m.median(z), ValueError),
                      (lambda m: m.argmax(z), TypeError)]:
        with pytest.raises(err):
            call(jnp)
        with pytest.raises(err):
            call(jnp_j)


# --- linear algebra and fft on complex inputs ------------------------------------------------


def _hermitian(n):
    a = crand(n, n)
    return (a @ a.conj().T + n * np.eye(n)).astype(np.complex64)


A = crand(3, 3)
H = _hermitian(3)
B = crand(3)
W = crand(3, 3)

LINALG = {
    "inv": lambda m, a: m.linalg.inv(a),
    "solve": lambda m, a: m.linalg.solve(a, B),
    "det": lambda m, a: m.linalg.det(a),
    "slogdet": lambda m, a: tuple(m.linalg.slogdet(a)),
    "pinv": lambda m, a: m.linalg.pinv(a),
    "matrix_power": lambda m, a: m.linalg.matrix_power(a, 3),
    "matrix_power_neg": lambda m, a: m.linalg.matrix_power(a, -2),
    "norm": lambda m, a: m.linalg.norm(a),
    "norm_2": lambda m, a: m.linalg.norm(a, 2),
    "cholesky": lambda m, a: m.linalg.cholesky(a),
    "eigvalsh": lambda m, a: m.linalg.eigvalsh(a),
    "svdvals": lambda m, a: m.linalg.svd(a, compute_uv=False),
}


@pytest.mark.parametrize("name", list(LINALG))
def test_linalg_complex_values_against_numpy(name):
    f = LINALG[name]
    a = H if name in ("cholesky", "eigvalsh") else A
    for out, expected in zip(tree_flatten(f(jnp, a))[0], tree_flatten(f(np, a))[0]):
        expected = np.asarray(expected)
        want = np.float32 if expected.dtype.kind == "f" else np.complex64
        _close(out, expected, 2e-4, want)


def test_linalg_complex_decompositions_reconstruct():
    u, s, vh = jnp.linalg.svd(A)
    _close((np.asarray(u) * np.asarray(s)) @ np.asarray(vh), A, 1e-5)
    assert u.dtype == np.complex64 and s.dtype == np.float32
    q, r = jnp.linalg.qr(A)
    _close(np.asarray(q) @ np.asarray(r), A, 1e-5)
    _close(np.asarray(q).conj().T @ np.asarray(q), np.eye(3), 1e-5)
    w, v = jnp.linalg.eigh(H)
    _close(np.asarray(v) @ np.diag(np.asarray(w)) @ np.asarray(v).conj().T, H, 1e-4)
    _close(w, np.linalg.eigvalsh(H), 1e-4, np.float32)
    lo = jnp.linalg.cholesky(H)
    _close(np.asarray(lo) @ np.asarray(lo).conj().T, H, 1e-4)


LINALG_LOSSES = {
    "inv": lambda m, a: m.sum(m.abs(m.linalg.inv(a) * W) ** 2),
    "solve": lambda m, a: m.sum(m.abs(m.linalg.solve(a, B)) ** 2),
    "det": lambda m, a: m.real(m.linalg.det(a) * (1 - 2j)),
    "slogdet": lambda m, a: m.linalg.slogdet(a)[1] + m.real(m.linalg.slogdet(a)[0] * (1 + 1j)),
    "eigh": lambda m, a: m.sum(m.linalg.eigh(a)[0] * m.arange(3.0))
    + m.sum(m.abs(m.linalg.eigh(a)[1]) ** 2 * m.real(W)),
    "svd": lambda m, a: m.sum(m.linalg.svd(a, compute_uv=False) * m.arange(3.0)),
    "qr": lambda m, a: m.sum(m.abs(m.linalg.qr(a)[1] * W) ** 2),
    "cholesky": lambda m, a: m.sum(m.abs(m.linalg.cholesky(a) * W) ** 2),
    "norm_nuc": lambda m, a: m.linalg.norm(a, "nuc"),
    "pinv": lambda m, a: m.sum(m.abs(m.linalg.pinv(a) * W) ** 2),
    "matrix_power": lambda m, a: m.sum(m.abs(m.linalg.matrix_power(a, 3) * W) ** 2),
    "eigvals": lambda m, a: m.sum(m.abs(m.linalg.eigvals(a))),
}


@pytest.mark.parametrize("name", list(LINALG_LOSSES))
def test_linalg_complex_grads_match_jax(name):
    jax = _jax()
    f = LINALG_LOSSES[name]
    a = H if name in ("cholesky", "eigh") else A
    v, g = remat.value_and_grad(lambda a: f(jnp, a))(a)
    jv, jg = jax.value_and_grad(lambda a: f(jax.numpy, a))(a)
    _close(v, jv, 1e-3)
    _close(g, jg, 2e-3, np.complex64)


@pytest.mark.parametrize("name", ["inv", "det", "solve", "cholesky"])
def test_linalg_complex_grads_by_finite_differences(name):
    f = {"inv": jnp.linalg.inv, "det": jnp.linalg.det,
         "solve": lambda a: jnp.linalg.solve(a, B),
         "cholesky": lambda a: jnp.linalg.cholesky((a + jnp.conj(a.T)) / 2)}[name]
    check_complex_grads(f, (H if name == "cholesky" else A,), atol=5e-3, rtol=5e-3)


@pytest.mark.parametrize("left,right", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", [np.complex64, np.float32])
def test_eig_eigenvector_derivatives_match_jax(left, right, dtype):
    jax = _jax()
    a, t = A.astype(dtype) if dtype == np.complex64 else A.real.copy(), crand(3, 3)
    t = t.astype(dtype) if dtype == np.complex64 else t.real.copy()

    def eig(m):
        return lambda a: m.lax.linalg.eig(a, compute_left_eigenvectors=left,
                                          compute_right_eigenvectors=right,
                                          enable_eigvec_derivs=True)

    outs, tangents = remat.jvp(eig(remat), (a,), (t,))
    j_outs, j_tangents = jax.jvp(eig(jax), (a,), (t,))
    assert len(tangents) == len(j_tangents) == 1 + left + right
    # the eigenpairs may come in another order: match them by eigenvalue
    order = np.lexsort((np.asarray(outs[0]).imag, np.asarray(outs[0]).real))
    j_order = np.lexsort((np.asarray(j_outs[0]).imag, np.asarray(j_outs[0]).real))
    _close(np.asarray(tangents[0])[order], np.asarray(j_tangents[0])[j_order], 1e-3)
    for v, jv, tv, jtv in zip(outs[1:], j_outs[1:], tangents[1:], j_tangents[1:]):
        v, jv = np.asarray(v)[:, order], np.asarray(jv)[:, j_order]
        # LAPACK builds may pick eigenvectors of opposite signs: v = s jv gives dv = s djv
        s = np.sum(np.conj(jv) * v, axis=0)
        _close(v, jv * s, 1e-4)
        _close(np.asarray(tv)[:, order], np.asarray(jtv)[:, j_order] * s, 1e-3)
    with pytest.raises(NotImplementedError, match="enable_eigvec_derivs"):
        remat.jvp(lambda a: lax.linalg.eig(a), (a,), (t,))


def test_fft_conjugating_transforms():
    a = crand(4)
    _close(jnp.fft.hfft(a), np.fft.hfft(a), 1e-4, np.float32)
    _close(jnp.fft.hfft(a, 5), np.fft.hfft(a, 5), 1e-4)
    x = frand(6)
    _close(jnp.fft.ihfft(x), np.fft.ihfft(x), 1e-5, np.complex64)
    _close(jnp.fft.ihfft(x, 4), np.fft.ihfft(x, 4), 1e-5)
    check_complex_grads(lambda a: jnp.fft.hfft(a, 6), (a,))
    check_grads(lambda x: jnp.real(jnp.fft.ihfft(x)) + jnp.imag(jnp.fft.ihfft(x)), (x,),
                order=1)
    jax = _jax()
    _assert_same_as_jax(remat.grad(lambda a: jnp.sum(jnp.fft.hfft(a) ** 2))(a),
                 jax.grad(lambda a: jax.numpy.sum(jax.numpy.fft.hfft(a) ** 2))(a), 1e-3)


# --- vmap, jit, checkpoint, scan -------------------------------------------------------------


def _loss(m, j):
    def f(z):
        w = m.exp(z) * m.conj(z) + j.lax.complex(m.real(z), m.abs(z))
        return m.sum(m.abs(w) ** 2) + m.real(m.vdot(z, w))

    return f


def _scan_loss(m, j):
    def f(z):
        def body(c, x):
            c = c * x + m.conj(c) * 0.5
            return c, m.real(c) + m.imag(c)

        c, ys = j.lax.scan(body, z[0], z)
        return m.abs(c) + m.sum(ys)

    return f


@pytest.mark.parametrize("make", [_loss, _scan_loss], ids=["elementwise", "scan"])
def test_transformations_compose_on_complex_functions(make):
    jax = _jax()
    z = crand(3) * 0.5
    zs = np.stack([z, z * 1j, np.conj(z)])
    f, jf = make(jnp, remat), make(jax.numpy, jax)
    expected = jax.grad(jf)(z)
    _close(remat.jit(f)(z), f(z), 1e-5)
    _close(f(z), jf(z), 1e-5)
    for g in (remat.grad(f), remat.jit(remat.grad(f)), remat.grad(remat.checkpoint(f)),
              remat.grad(remat.checkpoint(f, policy=remat.checkpoint_policies.dots_saveable))):
        _assert_same_as_jax(g(z), expected, 1e-4)
    batched = remat.vmap(remat.grad(f))(zs)
    _close(batched, np.stack([np.asarray(remat.grad(f)(zi)) for zi in zs]), 1e-5)
    _assert_same_as_jax(remat.jit(remat.vmap(remat.grad(f)))(zs), jax.vmap(jax.grad(jf))(zs), 1e-4)
    _assert_same_as_jax(remat.jvp(remat.grad(f), (z,), (z,))[1],
                 jax.jvp(jax.grad(jf), (z,), (z,))[1], 1e-4)
    check_complex_grads(f, (z,))


def test_complex_scan_carry_and_checkpointed_scan():
    z = crand(4) * 0.5

    def f(z):
        def body(c, x):
            return remat.checkpoint(lambda c, x: jnp.sin(c) * x + jnp.conj(x))(c, x), c

        c, cs = lax.scan(body, jnp.complex64(1j), z)
        return c, cs

    (c, cs), (jc, jcs) = f(z), _reference_scan(z)
    _close(c, jc, 1e-5, np.complex64)
    _close(cs, jcs, 1e-5, np.complex64)
    check_complex_grads(f, (z,))


def _reference_scan(z):
    c, cs = np.complex64(1j), []
    for x in z:
        cs.append(c)
        c = np.sin(c) * x + np.conj(x)
    return c, np.array(cs)


# --- check_grads on complex functions itself -------------------------------------------------

CHECKED = {
    "holomorphic": (lambda z: jnp.exp(z) * z ** 2, 1),
    "conj_times_sin": (lambda z: jnp.conj(z) * z * jnp.sin(z), 1),
    "two_arguments": (lambda z, w: z * jnp.conj(w) + jnp.abs(z) ** 2, 2),
    "real_valued": (lambda z: jnp.abs(z) ** 2 + jnp.angle(z) * jnp.real(z), 1),
    "parts": (lambda z: lax.complex(lax.imag(z), lax.real(z) ** 2), 1),
}


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("name", list(CHECKED))
def test_check_grads_on_complex_functions_directly(name, dtype):
    """check_grads takes complex arguments and outputs as they are (no realification), in
    both modes, to second order."""
    f, n = CHECKED[name]
    zs = [(Z * s).astype(dtype) for s in (1.0, -0.7j)[:n]]
    with config.override("jax_enable_x64", dtype == np.complex128):
        check_grads(f, zs, order=2, modes=("fwd", "rev"))


def test_check_grads_real_to_complex_and_mixed_arguments():
    x = Z.real.copy()
    check_grads(lambda x: x * (1 + 2j) + jnp.exp(1j * x), (x,), order=2)
    check_grads(lambda x, z: jnp.sin(x * z) + x, (x, Z), order=2)


def _wrong_jvp_square():
    """``z * z`` whose JVP keeps only the real part of ``2 z dz``: invisible to a check that
    drops imaginary parts."""
    @remat.custom_jvp
    def square(z):
        return z * z

    @square.defjvp
    def _(primals, tangents):
        (z,), (dz,) = primals, tangents
        return square(z), lax.complex(lax.real(2 * z * dz), lax.full_like(lax.real(z), 0))

    return square


def _conjugated_vjp_scale(c):
    """``z * c`` whose VJP conjugates ``c`` (the convention JAX does not use)."""
    @remat.custom_vjp
    def scale(z):
        return z * c

    scale.defvjp(lambda z: (z * c, None), lambda _, ct: (ct * np.conj(c),))
    return scale


def test_check_grads_catches_wrong_complex_rules():
    with pytest.raises(AssertionError, match="JVP"):
        check_grads(_wrong_jvp_square(), (Z,), order=1, modes=("fwd",))
    c = np.complex64(0.5 + 2j)
    with pytest.raises(AssertionError, match="VJP"):
        check_grads(_conjugated_vjp_scale(c), (Z,), order=1, modes=("rev",))
    # the same functions with the right rules pass
    check_grads(lambda z: z * z, (Z,), order=1)
    right = remat.custom_vjp(lambda z: z * c)
    right.defvjp(lambda z: (z * c, None), lambda _, ct: (ct * c,))
    check_grads(right, (Z,), order=1, modes=("rev",))


def test_check_grads_agrees_with_jaxs_on_the_wrong_rules():
    """JAX's own check_grads rejects the JAX versions of the same wrong rules."""
    jax = _jax()
    from jax.test_util import check_grads as jax_check_grads

    @jax.custom_jvp
    def square(z):
        return z * z

    square.defjvp(lambda p, t: (square(p[0]), jax.lax.complex(
        jax.lax.real(2 * p[0] * t[0]), jax.numpy.zeros_like(jax.lax.real(p[0])))))
    with pytest.raises(AssertionError):
        jax_check_grads(square, (Z,), order=1, modes=("fwd",))
    c = np.complex64(0.5 + 2j)
    scale = jax.custom_vjp(lambda z: z * c)
    scale.defvjp(lambda z: (z * c, None), lambda _, ct: (ct * np.conj(c),))
    with pytest.raises(AssertionError):
        jax_check_grads(scale, (Z,), order=1, modes=("rev",))
    jax_check_grads(lambda z: jax.numpy.conj(z) * z * jax.numpy.sin(z), (Z,), order=2)
    check_grads(lambda z: jnp.conj(z) * z * jnp.sin(z), (Z,), order=2)
