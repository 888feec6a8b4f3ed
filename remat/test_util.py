"""Gradient checking against finite differences (``check_grads``), for tests of every rule;
``check_vmap`` compares a batched function with a loop over the examples.

Finite differences are taken in float64 (x64 is switched on while they run, and inexact inputs
are upcast), so their error is far below the tolerance — unless the function rejects float64
inputs (a float32 scan carry it closes over meets the upcast one): then they run at the inputs'
own dtypes, as JAX's always do. The AD side runs at the inputs' own dtypes, and the tolerance
is that dtype's (as JAX's ``default_gradient_tolerance``).

Complex values are checked whole, as JAX's ``public_test_util`` does: random directions are
complex, finite differences run in complex128, inner products are ``Re <x, y>``, and a VJP is
checked as ``conj(vjp(conj(ct)))`` (JAX's pullback is the plain transpose).
"""

import functools

import numpy as np

from remat import core, dtypes
from remat.config import config
from remat.transforms import api
from remat.tree_util import tree_flatten, tree_map

EPS = 1e-4
default_gradient_tolerance = {
    np.dtype(dtypes.bfloat16): 1e-1,
    **{np.dtype(t): 1e-1 for t in (dtypes.float8_e4m3fn, dtypes.float8_e5m2, dtypes.float8_e3m4,
                                   dtypes.float8_e4m3, dtypes.float8_e4m3b11fnuz,
                                   dtypes.float8_e4m3fnuz, dtypes.float8_e5m2fnuz)},
    np.dtype(np.float16): 1e-2,
    np.dtype(np.float32): 2e-3,
    np.dtype(np.float64): 1e-5,
    np.dtype(np.complex64): 1e-3,
    np.dtype(np.complex128): 1e-5,
}


def _tolerance(tol, tree):
    if tol is not None:
        return tol
    leaf_dtypes = [np.asarray(x).dtype for x in tree_flatten(tree)[0]]
    return max((default_gradient_tolerance.get(d, 0.0) for d in leaf_dtypes), default=1e-5)


def _to_numpy(tree):
    return tree_map(lambda x: np.asarray(x), tree)


def _upcast(x):
    x = np.asarray(x)
    if dtypes.kind(x.dtype) == "c":
        return x.astype(np.complex128)
    return x.astype(np.float64) if dtypes.kind(x.dtype) == "f" else x


def _is_inexact(x):
    return dtypes.kind(np.asarray(x).dtype) in "fc"


def rand_like(rng, x):
    x = np.asarray(x)
    if dtypes.kind(x.dtype) not in "fc":
        return np.zeros(x.shape, dtype=np.dtype([("float0", np.void, 0)]))
    if dtypes.kind(x.dtype) == "c":
        return (rng.standard_normal(x.shape) + 1j * rng.standard_normal(x.shape)).astype(x.dtype)
    return rng.standard_normal(x.shape).astype(x.dtype)


def _vdot(a, b):
    fa, fb = tree_flatten(_to_numpy(a))[0], tree_flatten(_to_numpy(b))[0]
    return sum(float(np.real(np.vdot(x.astype(np.complex128).ravel(),
                                     y.astype(np.complex128).ravel())))
               for x, y in zip(fa, fb) if _is_inexact(x) and _is_inexact(y))


def numerical_jvp(f, primals, tangents, eps=EPS):
    """Central difference of ``f`` at ``primals`` along ``tangents``: in float64 where ``f``
    accepts float64 inputs, else (a function whose float32 inputs meet float32 values it
    closes over, such as a scan carry) at the inputs' own dtypes, as JAX's always is."""
    try:
        with config.override("jax_enable_x64", True):
            return _central_difference(f, tree_map(_upcast, primals), tangents, eps)
    except TypeError:
        return _central_difference(f, primals, tangents, eps)


def _central_difference(f, primals, tangents, eps):
    def shifted(sign):
        args = tree_map(lambda p, t: _shift(p, t, sign * eps), primals, tangents)
        return _to_numpy(f(*args))

    plus, minus = shifted(1.0), shifted(-1.0)
    return tree_map(lambda a, b: (_upcast(a) - b) / (2 * eps) if _is_inexact(a)
                    else np.zeros_like(a, np.float64), plus, minus)


def _shift(primal, tangent, step):
    if not _is_inexact(primal):
        return primal
    p = np.asarray(primal)
    return (p + step * np.asarray(tangent, p.dtype)).astype(p.dtype)


def check_close(actual, expected, atol, rtol, err_msg=""):
    fa, ta = tree_flatten(_to_numpy(actual))
    fe, te = tree_flatten(_to_numpy(expected))
    if ta != te:
        raise AssertionError(f"tree structures differ: {ta} vs {te}. {err_msg}")
    for a, e in zip(fa, fe):
        if dtypes.kind(a.dtype) not in "fc":  # float0 tangents, integers
            continue
        wide = np.complex128 if dtypes.kind(a.dtype) == "c" or np.iscomplexobj(e) else np.float64
        np.testing.assert_allclose(a.astype(wide), np.asarray(e, wide),
                                   atol=atol, rtol=rtol, err_msg=err_msg)


def check_jvp(f, args, atol=None, rtol=None, eps=EPS, err_msg=""):
    """JVP from AD against central differences along a random direction."""
    rng = np.random.RandomState(0)
    tangent = tree_map(functools.partial(rand_like, rng), args)
    _, t_out = api.jvp(f, args, tangent)
    expected = numerical_jvp(f, args, tangent, eps)
    tol_tree = f(*args)
    check_close(t_out, expected, _tolerance(atol, tol_tree), _tolerance(rtol, tol_tree),
                err_msg or "JVP does not match finite differences")


def _conj(x):
    """JAX's check_vjp conjugates the cotangent in and out (a VJP is the plain transpose)."""
    return np.conj(x) if dtypes.kind(x.dtype) == "c" else x


def check_vjp(f, args, atol=None, rtol=None, eps=EPS, err_msg=""):
    """<ct, J t> from the VJP against the same inner product by finite differences."""
    rng = np.random.RandomState(1)
    out, pullback = api.vjp(f, *args)
    tangent = tree_map(functools.partial(rand_like, rng), args)
    ct = tree_map(functools.partial(rand_like, rng), out)
    ct_in = tree_map(_conj, _to_numpy(pullback(tree_map(_conj, ct))))
    ip = _vdot(tangent, ct_in)
    ip_expected = _vdot(numerical_jvp(f, args, tangent, eps), ct)
    tol = _tolerance(atol, out)
    scale = max(1.0, abs(ip_expected))
    if abs(ip - ip_expected) > tol * scale + _tolerance(rtol, out) * abs(ip_expected):
        raise AssertionError(f"{err_msg or 'VJP does not match finite differences'}: "
                             f"<t, vjp(ct)> = {ip} but <J t, ct> ≈ {ip_expected}")


def check_grads(f, args, order=2, modes=("fwd", "rev"), atol=None, rtol=None, eps=None):
    """Check derivatives of ``f`` at ``args`` up to ``order`` in the given ``modes``."""
    eps = eps or EPS
    args = tuple(args)

    def check(fun, fun_args, order):
        if "fwd" in modes:
            check_jvp(fun, fun_args, atol, rtol, eps, f"JVP of order {order}")
            if order > 1:
                rng = np.random.RandomState(2)
                tangent = tree_map(functools.partial(rand_like, rng), fun_args)
                check(lambda *a: api.jvp(fun, a, _cast_like(tangent, a))[1], fun_args,
                      order - 1)
        if "rev" in modes:
            check_vjp(fun, fun_args, atol, rtol, eps, f"VJP of order {order}")
            if order > 1:
                rng = np.random.RandomState(3)
                ct = tree_map(functools.partial(rand_like, rng), _to_numpy(fun(*fun_args)))
                check(lambda *a: _pull(fun, a, ct), fun_args, order - 1)

    check(f, args, order)


def _cast_like(tangent, primals):
    """Tangents in the primals' dtypes."""
    return tree_map(lambda t, p: t.astype(core.get_aval(p).dtype) if dtypes.kind(t.dtype) in "fc"
                    else t, tangent, primals)


def _pull(fun, args, ct):
    out, pullback = api.vjp(fun, *args)
    return pullback(_cast_like(ct, out))


def check_vmap(f, args, in_axes, rtol=1e-5, atol=1e-5):
    """``vmap(f, in_axes)(*args)`` equals stacking ``f`` over the examples one at a time."""
    size = next(a.shape[ax] for a, ax in zip(args, in_axes) if ax is not None)
    out = api.vmap(f, in_axes=in_axes)(*args)
    expected = np.stack([
        np.asarray(f(*[a if ax is None else np.take(a, i, axis=ax)
                       for a, ax in zip(args, in_axes)])) for i in range(size)])
    assert out.shape == expected.shape
    np.testing.assert_allclose(np.asarray(out), expected, rtol=rtol, atol=atol)
