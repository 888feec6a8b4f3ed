"""Bad input fails as in JAX: the same error type, raised at the same time (wrapping or
calling), with a message naming the problem; floating-point errors give nan/inf without
RuntimeWarnings; arrays too large for memory fail where they are created; per-function trace
caches stay bounded. Each case is written once against the shared API, checked against its
hard-coded expectation and, when JAX is installed, against JAX."""

import os
import re
import warnings

import numpy as np
import pytest

import remat
import remat.numpy as rnp
from remat import lax as rlax
from remat.config import Config, config
from remat.errors import OutOfMemoryError
from remat.runtime import memory  # where the allocation limit is read

remat_api = (remat, rnp, rlax)


def jax_api():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_platforms", "cpu")
    return jax, jax.numpy, jax.lax


def raised(fn, api):
    """The exception ``fn(*api)`` raises (the test fails if it raises none)."""
    with pytest.raises(Exception) as info:
        fn(*api)
    return info.value


# --- (function of (api, jnp, lax), expected type, message pattern) ---------------------------


def _f2(x, y):
    return x * len(y)


def _positional_only(x, /, y):
    return x * y


CALLABLE = [
    ("grad", lambda api, jnp, lax: api.grad(3)),
    ("value_and_grad", lambda api, jnp, lax: api.value_and_grad(3)),
    ("vmap", lambda api, jnp, lax: api.vmap(3)),
    ("jit", lambda api, jnp, lax: api.jit(3)),
    ("jit(None)", lambda api, jnp, lax: api.jit(None)),
    ("jacfwd", lambda api, jnp, lax: api.jacfwd(3)),
    ("jacrev", lambda api, jnp, lax: api.jacrev(3)),
    ("hessian", lambda api, jnp, lax: api.hessian(3)),
    ("make_jaxpr", lambda api, jnp, lax: api.make_jaxpr(3)),
    ("jvp", lambda api, jnp, lax: api.jvp(3, (1.0,), (1.0,))),
    ("vjp", lambda api, jnp, lax: api.vjp(3, 1.0)),
    ("linearize", lambda api, jnp, lax: api.linearize(3, 1.0)),
    ("eval_shape", lambda api, jnp, lax: api.eval_shape(3, 1.0)),
]

ERRORS = [
    # vmap: axes out of range, malformed axis specs (the latter when vmap wraps)
    ("vmap out_axes=3 of a rank-1 output",
     lambda api, jnp, lax: api.vmap(lambda x: x * 2, out_axes=3)(jnp.ones(3)),
     ValueError, r"axis 3 is out of bounds for array of dimension 1"),
    ("vmap out_axes=1 of a rank-1 output",
     lambda api, jnp, lax: api.vmap(lambda x: x * 2, out_axes=1)(jnp.ones(3)),
     ValueError, r"axis 1 is out of bounds for array of dimension 1"),
    ("vmap out_axes=-2 of a rank-1 output",
     lambda api, jnp, lax: api.vmap(lambda x: x * 2, out_axes=-2)(jnp.ones(3)),
     ValueError, r"axis -2 is out of bounds for array of dimension 1"),
    ("vmap out_axes=-3 of a rank-2 output",
     lambda api, jnp, lax: api.vmap(lambda x: x * 2, out_axes=-3)(jnp.ones((3, 4))),
     ValueError, r"axis -3 is out of bounds for array of dimension 2"),
    ("vmap out_axes=1 of an unmapped scalar output",
     lambda api, jnp, lax: api.vmap(lambda x: 1.0, out_axes=1)(jnp.ones(3)),
     ValueError, r"axis 1 is out of bounds for array of dimension 1"),
    ("vmap out_axes=None of a mapped output",
     lambda api, jnp, lax: api.vmap(lambda x: x, out_axes=None)(jnp.ones(3)),
     ValueError, r"got axis spec None but output was batched on axis 0"),
    ("vmap in_axes=1 of a rank-1 argument",
     lambda api, jnp, lax: api.vmap(lambda x: x, in_axes=1)(jnp.ones(3)),
     ValueError, r"axis 1, which implies that its rank should be at least 2"),
    ("vmap in_axes=-2 of a rank-1 argument",
     lambda api, jnp, lax: api.vmap(lambda x: x, in_axes=-2)(jnp.ones(3)),
     ValueError, r"axis -2, which implies that its rank should be at least 2"),
    ("vmap in_axes=0 of a scalar",
     lambda api, jnp, lax: api.vmap(lambda x: x)(jnp.float32(1)),
     ValueError, r"rank should be at least 1, but is only 0"),
    ("vmap in_axes=(1.0,)", lambda api, jnp, lax: api.vmap(lambda x: x, in_axes=(1.0,)),
     TypeError, r"in_axes must be an int, None, or \(nested\) container .* got \(1.0,\)"),
    ("vmap in_axes=('a',)", lambda api, jnp, lax: api.vmap(lambda x: x, in_axes=("a",)),
     TypeError, r"in_axes must be an int, None, or \(nested\) container"),
    ("vmap in_axes=dict", lambda api, jnp, lax: api.vmap(lambda x: x, in_axes={"a": 0}),
     TypeError, r"in_axes must be an int, None, or a tuple of entries"),
    ("vmap out_axes='a'", lambda api, jnp, lax: api.vmap(lambda x: x, out_axes="a"),
     TypeError, r"out_axes must be an int, None, or \(nested\) container .* got a\."),
    ("vmap out_axes=(1.0,)", lambda api, jnp, lax: api.vmap(lambda x: x, out_axes=(1.0,)),
     TypeError, r"out_axes must be an int, None, or \(nested\) container"),
    # jit: static arguments
    ("jit unhashable static (by position)",
     lambda api, jnp, lax: api.jit(_f2, static_argnums=1)(jnp.ones(2), [1, 2]),
     ValueError, r"Non-hashable static arguments are not supported.*list.*\[1, 2\]"),
    ("jit unhashable static (by name)",
     lambda api, jnp, lax: api.jit(_f2, static_argnames="y")(jnp.ones(2), y=[1, 2]),
     ValueError, r"Non-hashable static arguments are not supported.*list"),
    ("jit unhashable static (a name inferred from static_argnums)",
     lambda api, jnp, lax: api.jit(_f2, static_argnums=1)(jnp.ones(2), y={"a": 1}),
     ValueError, r"Non-hashable static arguments are not supported.*dict"),
    ("jit unhashable static (an array)",
     lambda api, jnp, lax: api.jit(_f2, static_argnums=1)(jnp.ones(2), np.ones(2)),
     ValueError, r"Non-hashable static arguments are not supported.*ndarray"),
    ("jit static_argnames the function does not take",
     lambda api, jnp, lax: api.jit(_f2, static_argnames="zz"),
     ValueError, r"invalid argnames \{'zz'\} in static_argnames\. Function does not take"),
    ("jit static_argnames of *args",
     lambda api, jnp, lax: api.jit(lambda *a: a[0], static_argnames="zz"),
     ValueError, r"invalid argnames \{'zz'\}"),
    ("jit static_argnames positional-only",
     lambda api, jnp, lax: api.jit(_positional_only, static_argnames="x"),
     ValueError, r"invalid argnames \{'x'\} in static_argnames\. These are positional-only"),
    ("jit static_argnums past the signature",
     lambda api, jnp, lax: api.jit(_f2, static_argnums=5),
     ValueError, r"static_argnums=\(5,\), but only accepts 2 positional arguments"),
    ("jit static_argnums before the signature",
     lambda api, jnp, lax: api.jit(_f2, static_argnums=-3),
     ValueError, r"static_argnums=\(-3,\), but only accepts 2 positional arguments"),
    ("jit donate_argnums past the signature",
     lambda api, jnp, lax: api.jit(_f2, donate_argnums=5),
     ValueError, r"donate_argnums=\(5,\), but only accepts 2 positional arguments"),
    ("jit negative static_argnums past a call's arguments",
     lambda api, jnp, lax: api.jit(lambda *a: a[0], static_argnums=-3)(1.0),
     ValueError, r"must have value greater than or equal to -len\(args\).*-3"),
    ("jit static_argnums not ints", lambda api, jnp, lax: api.jit(_f2, static_argnums="a"),
     TypeError, r"static_argnums"),
    # grad argnums
    ("grad argnums=3 with one argument",
     lambda api, jnp, lax: api.grad(lambda x: x, argnums=3)(1.0),
     TypeError, r"argnums=3 requires at least 4 positional arguments .* got only 1"),
    ("value_and_grad argnums=(0, 3) with one argument",
     lambda api, jnp, lax: api.value_and_grad(lambda x: x, argnums=(0, 3))(1.0),
     TypeError, r"argnums=\(0, 3\) requires at least 4 positional arguments"),
    ("grad argnums=-3 with one argument",
     lambda api, jnp, lax: api.grad(lambda x: x, argnums=-3)(1.0), ValueError, r"-3"),
    ("jacfwd argnums=3 with one argument",
     lambda api, jnp, lax: api.jacfwd(lambda x: x, argnums=3)(1.0), ValueError, r"3"),
    ("jacrev argnums=3 with one argument",
     lambda api, jnp, lax: api.jacrev(lambda x: x, argnums=3)(1.0), ValueError, r"3"),
    # elementwise operands of equal rank that do not broadcast: the lax op's TypeError
    ("ones(3) + ones(4)", lambda api, jnp, lax: jnp.ones(3) + jnp.ones(4),
     TypeError, r"add got incompatible shapes for broadcasting: \(3,\), \(4,\)\."),
    ("ones(3) < ones(4)", lambda api, jnp, lax: jnp.ones(3) < jnp.ones(4),
     TypeError, r"got incompatible shapes for broadcasting: \(3,\), \(4,\)"),
    ("multiply (2, 3) by (3, 2)",
     lambda api, jnp, lax: jnp.multiply(jnp.ones((2, 3)), jnp.ones((3, 2))),
     TypeError, r"got incompatible shapes for broadcasting: \(2, 3\), \(3, 2\)"),
    ("maximum (3,) and (4,)", lambda api, jnp, lax: jnp.maximum(jnp.ones(3), jnp.ones(4)),
     TypeError, r"got incompatible shapes for broadcasting"),
    ("ones(3) - ones(4) under jit",
     lambda api, jnp, lax: api.jit(lambda a, b: a - b)(jnp.ones(3), jnp.ones(4)),
     TypeError, r"got incompatible shapes for broadcasting: \(3,\), \(4,\)"),
    ("x * ones(4) under grad",
     lambda api, jnp, lax: api.grad(lambda a: (a * jnp.ones(4)).sum())(jnp.ones(3)),
     TypeError, r"got incompatible shapes for broadcasting: \(3,\), \(4,\)"),
    ("x + ones(4) under vmap",
     lambda api, jnp, lax: api.vmap(lambda a: a + jnp.ones(4))(jnp.ones((2, 3))),
     TypeError, r"got incompatible shapes for broadcasting: \(3,\), \(4,\)"),
    ("lax.add (3,) and (4,)", lambda api, jnp, lax: lax.add(jnp.ones(3), jnp.ones(4)),
     TypeError, r"add got incompatible shapes for broadcasting: \(3,\), \(4,\)"),
    # ...of different ranks: NumPy's broadcasting ValueError
    ("ones((2, 3)) + ones(4)", lambda api, jnp, lax: jnp.ones((2, 3)) + jnp.ones(4),
     ValueError, r"Incompatible shapes for broadcasting: shapes=\[\(2, 3\), \(4,\)\]"),
    # transpose
    ("jnp.transpose repeated axes", lambda api, jnp, lax: jnp.transpose(jnp.ones((2, 3)), (0, 0)),
     TypeError, r"isn't a permutation of operand dimensions, got permutation \(0, 0\) for "
                r"operand shape \(2, 3\)"),
    ("Array.transpose repeated axes", lambda api, jnp, lax: jnp.ones((2, 3)).transpose(0, 0),
     TypeError, r"isn't a permutation.*\(0, 0\)"),
    ("jnp.transpose too few axes", lambda api, jnp, lax: jnp.transpose(jnp.ones((2, 3)), (1,)),
     TypeError, r"isn't a permutation.*\(1,\)"),
    ("jnp.transpose axis out of bounds",
     lambda api, jnp, lax: jnp.transpose(jnp.ones((2, 3)), (0, 2)),
     ValueError, r"axis 2 is out of bounds for array of dimension 2"),
    ("lax.transpose repeated axes", lambda api, jnp, lax: lax.transpose(jnp.ones((2, 3)), (0, 0)),
     TypeError, r"isn't a permutation.*\(0, 0\)"),
    ("lax.transpose too few axes", lambda api, jnp, lax: lax.transpose(jnp.ones((2, 3)), (0,)),
     TypeError, r"isn't a permutation.*\(0,\) for operand shape \(2, 3\)"),
    ("lax.transpose too many axes",
     lambda api, jnp, lax: lax.transpose(jnp.ones((2, 3)), (0, 1, 2)),
     TypeError, r"isn't a permutation.*\(0, 1, 2\)"),
    # negative sizes
    ("zeros((-1,))", lambda api, jnp, lax: jnp.zeros((-1,)),
     TypeError, r"must have every element be nonnegative, got \(-1,\)"),
    ("zeros(-1)", lambda api, jnp, lax: jnp.zeros(-1),
     TypeError, r"must have every element be nonnegative, got \(-1,\)"),
    ("ones((2, -3))", lambda api, jnp, lax: jnp.ones((2, -3)),
     TypeError, r"must have every element be nonnegative, got \(2, -3\)"),
    ("full((-1,), 1.0)", lambda api, jnp, lax: jnp.full((-1,), 1.0),
     TypeError, r"nonnegative, got \(-1,\)"),
    ("empty((-1,))", lambda api, jnp, lax: jnp.empty((-1,)), TypeError, r"nonnegative"),
    ("zeros_like(shape=(-2,))", lambda api, jnp, lax: jnp.zeros_like(jnp.ones(3), shape=(-2,)),
     TypeError, r"nonnegative, got \(-2,\)"),
    ("ones_like(shape=(-1, 2))",
     lambda api, jnp, lax: jnp.ones_like(jnp.ones(3), shape=(-1, 2)),
     TypeError, r"nonnegative, got \(-1, 2\)"),
    ("full_like(shape=(-1,))",
     lambda api, jnp, lax: jnp.full_like(jnp.ones(3), 2.0, shape=(-1,)),
     TypeError, r"nonnegative"),
    ("broadcast_to (-1,)", lambda api, jnp, lax: jnp.broadcast_to(jnp.ones(1), (-1,)),
     TypeError, r"broadcast_in_dim shape must have every element be nonnegative"),
    ("lax.broadcast_in_dim (-2,)",
     lambda api, jnp, lax: lax.broadcast_in_dim(jnp.ones(1), (-2,), (0,)),
     TypeError, r"broadcast_in_dim shape must have every element be nonnegative, got \(-2,\)"),
    ("lax.broadcast (-2,)", lambda api, jnp, lax: lax.broadcast(jnp.ones(1), (-2,)),
     TypeError, r"nonnegative"),
    ("lax.full (-2,)", lambda api, jnp, lax: lax.full((-2,), 1.0), TypeError, r"nonnegative"),
    ("lax.full_like shape=(-1,)",
     lambda api, jnp, lax: lax.full_like(jnp.ones(3), 2.0, shape=(-1,)),
     TypeError, r"nonnegative"),
    ("lax.iota -2", lambda api, jnp, lax: lax.iota(np.int32, -2),
     TypeError, r"iota shape must have every element be nonnegative, got \(-2,\)"),
    ("lax.broadcasted_iota (-1, 2)",
     lambda api, jnp, lax: lax.broadcasted_iota(np.int32, (-1, 2), 0),
     TypeError, r"iota shape must have every element be nonnegative"),
    ("reshape (-1, -1)", lambda api, jnp, lax: jnp.reshape(jnp.ones(4), (-1, -1)),
     TypeError, r"can only specify one unknown axis size with a `-1` value, got \(-1, -1\)"),
    ("reshape (-3, 2)", lambda api, jnp, lax: jnp.ones((2, 3)).reshape(-3, 2),
     TypeError, r"cannot reshape array of shape \(2, 3\) into shape \(-3, 2\)"),
    ("lax.reshape (-2, -2)", lambda api, jnp, lax: lax.reshape(jnp.ones(4), (-2, -2)),
     TypeError, r"reshape new_sizes must .*\(-2, -2\)"),
    ("eye(-2): NumPy's ValueError, as in JAX", lambda api, jnp, lax: jnp.eye(-2),
     ValueError, r"negative dimensions are not allowed"),
]


@pytest.mark.parametrize("name,fn", CALLABLE, ids=[c[0] for c in CALLABLE])
def test_transformations_reject_a_non_callable(name, fn):
    err = raised(fn, remat_api)
    assert type(err) is TypeError
    assert "Expected a callable value, got 3" in str(err) or "got None" in str(err)


@pytest.mark.parametrize("name,fn", CALLABLE, ids=[c[0] for c in CALLABLE])
def test_transformations_reject_a_non_callable_as_jax(name, fn):
    assert type(raised(fn, jax_api())) is TypeError


def test_transformations_reject_a_non_callable_when_they_wrap_it():
    """Not later, when the wrapped function is called: the error points at the bad line."""
    for transform in (remat.grad, remat.value_and_grad, remat.vmap, remat.jit, remat.jacfwd,
                      remat.jacrev, remat.hessian, remat.make_jaxpr):
        with pytest.raises(TypeError, match="Expected a callable value, got f"):
            transform("f")


def test_jit_without_a_function_is_a_decorator():
    @remat.jit(static_argnums=1)
    def f(x, n):
        return x * n

    assert float(f(rnp.float32(2.0), 3)) == 6.0 and f.trace_count == 1


@pytest.mark.parametrize("name,fn,exc,pattern", ERRORS, ids=[c[0] for c in ERRORS])
def test_bad_input_raises(name, fn, exc, pattern):
    err = raised(fn, remat_api)
    assert isinstance(err, exc), f"{type(err).__name__}: {err}"
    assert re.search(pattern, str(err)), str(err)


@pytest.mark.parametrize("name,fn,exc,pattern", ERRORS, ids=[c[0] for c in ERRORS])
def test_bad_input_raises_as_jax(name, fn, exc, pattern):
    err = raised(fn, jax_api())
    assert isinstance(err, exc), f"JAX raised {type(err).__name__}: {err}"


# --- what stays valid ------------------------------------------------------------------------

def _static_1_then_1_0(api, jnp):
    """Equal static values of different types give different traces (int32 * 1.0 is float)."""
    f = api.jit(lambda x, n: x * n, static_argnums=1)
    return [f(jnp.int32(2), 1).dtype.name, f(jnp.int32(2), 1.0).dtype.name]


VALID = [
    ("vmap out_axes=-1 of a rank-2 output",
     lambda api, jnp, lax: api.vmap(lambda x: x * 2, out_axes=-1)(jnp.arange(12.0).reshape(3, 4))),
    ("vmap out_axes=1 of an unmapped output",
     lambda api, jnp, lax: api.vmap(lambda x: jnp.arange(2.0), out_axes=1)(jnp.ones(3))),
    ("vmap out_axes=-1 of a scalar output",
     lambda api, jnp, lax: api.vmap(lambda x: x.sum(), out_axes=-1)(jnp.ones((3, 2)))),
    ("jit static by keyword, inferred from static_argnums",
     lambda api, jnp, lax: api.jit(lambda x, n=2: x * n, static_argnums=1)(1.0, n=3)),
    ("jit static_argnums past the call's arguments (a default)",
     lambda api, jnp, lax: api.jit(lambda x, n=2: x * n, static_argnums=1)(1.0)),
    ("jit static_argnames with **kwargs",
     lambda api, jnp, lax: api.jit(lambda x, **kw: x * kw["zz"], static_argnames="zz")(
         1.0, zz=4)),
    ("jit static 1 then 1.0: traced apart", lambda api, jnp, lax: _static_1_then_1_0(api, jnp)),
    ("transpose of a 1-d array by (0,)", lambda api, jnp, lax: lax.transpose(jnp.ones(3), (0,))),
    ("broadcasting a (2, 1) and a (3,)", lambda api, jnp, lax: jnp.ones((2, 1)) + jnp.ones(3)),
]

VALID_EXPECTED = {
    "vmap out_axes=-1 of a rank-2 output": np.arange(12.0).reshape(3, 4).T * 2,
    "vmap out_axes=1 of an unmapped output": np.tile(np.arange(2.0)[:, None], (1, 3)),
    "vmap out_axes=-1 of a scalar output": np.full(3, 2.0),
    "jit static by keyword, inferred from static_argnums": 3.0,
    "jit static_argnums past the call's arguments (a default)": 2.0,
    "jit static_argnames with **kwargs": 4.0,
    "jit static 1 then 1.0: traced apart": ["int32", "float32"],
    "transpose of a 1-d array by (0,)": np.ones(3),
    "broadcasting a (2, 1) and a (3,)": np.full((2, 3), 2.0),
}


@pytest.mark.parametrize("name,fn", VALID, ids=[c[0] for c in VALID])
def test_valid_input_still_works(name, fn):
    out = fn(*remat_api)
    want = VALID_EXPECTED[name]
    if isinstance(want, list):
        assert out == want
    else:
        np.testing.assert_allclose(np.asarray(out), want)


@pytest.mark.parametrize("name,fn", VALID, ids=[c[0] for c in VALID])
def test_valid_input_still_works_as_jax(name, fn):
    out = fn(*jax_api())
    want = VALID_EXPECTED[name]
    if isinstance(want, list):
        assert out == want
    else:
        np.testing.assert_allclose(np.asarray(out), want)


# --- arrays too large for memory -------------------------------------------------------------

HUGE = (10**12,)

HUGE_CREATIONS = {
    "zeros": lambda: rnp.zeros(HUGE),
    "ones": lambda: rnp.ones(HUGE),
    "full": lambda: rnp.full(HUGE, 2.0),
    "full of an array": lambda: rnp.full((10**6, 10**6), rnp.ones(10**6)),
    "empty": lambda: rnp.empty(HUGE),
    "zeros_like": lambda: rnp.zeros_like(rnp.ones(1), shape=HUGE),
    "ones_like": lambda: rnp.ones_like(rnp.ones(1), shape=HUGE),
    "full_like": lambda: rnp.full_like(rnp.ones(1), 3.0, shape=HUGE),
    "empty_like": lambda: rnp.empty_like(rnp.ones(1), shape=HUGE),
    "broadcast_to": lambda: rnp.broadcast_to(rnp.ones(1), HUGE),
    "lax.broadcast_in_dim": lambda: rlax.broadcast_in_dim(rnp.ones(1), HUGE, (0,)),
    "lax.full": lambda: rlax.full(HUGE, 1.0),
    "under jit": lambda: remat.jit(lambda: rnp.zeros(HUGE))(),
    "under jit, of an argument": lambda: remat.jit(lambda x: x + rnp.zeros(HUGE))(1.0),
    "under vmap": lambda: remat.vmap(lambda x: rnp.broadcast_to(x, HUGE))(rnp.ones(2)),
    "under grad": lambda: remat.grad(lambda x: rnp.sum(x * rnp.zeros(HUGE)))(1.0),
}


@pytest.mark.skipif(memory.machine_bytes is None, reason="the machine's memory is unknown")
@pytest.mark.parametrize("name", list(HUGE_CREATIONS))
def test_an_array_larger_than_memory_fails_where_it_is_created(name):
    with pytest.raises(OutOfMemoryError, match=r"RESOURCE_EXHAUSTED: Out of memory allocating "
                                               r"\d+ bytes for an array of shape \(") as info:
        HUGE_CREATIONS[name]()
    assert isinstance(info.value, MemoryError) and isinstance(info.value, RuntimeError)
    assert "dtype float32" in str(info.value)


def test_the_memory_limit_is_the_machines(monkeypatch):
    monkeypatch.setattr(memory, "machine_bytes", 4096)
    assert rnp.zeros(1024).shape == (1024,)  # 4096 bytes: fits
    with pytest.raises(OutOfMemoryError, match=r"allocating 4100 bytes for an array of shape "
                                               r"\(1025,\) and dtype float32 \(this machine "
                                               r"has 4096 bytes"):
        rnp.zeros(1025)
    with pytest.raises(OutOfMemoryError, match=r"allocating 8200 bytes .* \(1025,\) .* int64"):
        with config.override("jax_enable_x64", True):
            rnp.ones(1025, dtype=np.int64)


def test_shapes_of_huge_arrays_can_still_be_computed():
    out = remat.eval_shape(lambda: rnp.zeros(HUGE))
    assert out.shape == HUGE and out.dtype == np.float32
    assert remat.make_jaxpr(lambda: rnp.ones(HUGE))().out_avals[0].shape == HUGE


# --- floating-point errors: nan/inf, no warnings ---------------------------------------------

FP_CASES = {
    "log of -1 and 0": lambda jnp, x: jnp.log(x),
    "division by zero": lambda jnp, x: x / 0.0,
    "sqrt of -1": lambda jnp, x: jnp.sqrt(x),
    "arcsin of 2": lambda jnp, x: jnp.arcsin(x * 0 + 2.0),
    "arctanh of 2": lambda jnp, x: jnp.arctanh(x * 0 + 2.0),
    "exp overflow": lambda jnp, x: jnp.exp(x * 0 + 1000.0),
    "multiply overflow": lambda jnp, x: (x * 0 + 1e30) * (x * 0 + 1e30),
    "inf - inf": lambda jnp, x: (x * 0 + jnp.inf) - jnp.inf,
    "sin of inf": lambda jnp, x: jnp.sin(x * 0 + jnp.inf),
    "power overflow": lambda jnp, x: (x * 0 + 10.0) ** 1000.0,
    "x ** 0.5 of -1": lambda jnp, x: x ** 0.5,
    "std of inf": lambda jnp, x: jnp.std(x * 0 + jnp.inf),
    "norm overflow": lambda jnp, x: jnp.linalg.norm(x * 0 + 1e30),
    "dot overflow": lambda jnp, x: jnp.dot(x * 0 + 1e30, x * 0 + 1e30),
    "inf times 0 in a matmul": lambda jnp, x: (x * 0 + jnp.inf)[None] @ (x * 0)[:, None],
}
FP_WARNING_ONLY = {  # no NumPy reference, or backend-defined values: only warnings checked
    "softmax of inf": lambda jnp, x: remat.nn.softmax(x * 0 + jnp.inf),
    "nan and inf cast to int32": lambda jnp, x: (x / 0.0).astype(jnp.int32),
    "huge cast to int32": lambda jnp, x: (x * 0 + 1e20).astype(jnp.int32),
    "integer division by zero": lambda jnp, x: x.astype(jnp.int32) // jnp.int32(0),
}
FP_X = np.array([-1.0, 0.0, 1.0], np.float32)


def _in_mode(mode, f, x):
    if mode == "eager":
        return f(x)
    if mode == "jit":
        return remat.jit(f)(x)
    if mode == "jit, donating":
        return remat.jit(f, donate_argnums=0)(rnp.array(x))
    if mode == "vmap":
        return remat.vmap(f)(rnp.stack([x, x]))[0]
    if mode == "grad":  # the backward pass of the float function (values unchecked)
        return remat.grad(lambda y: rnp.sum(f(y).astype(np.float32)))(x)
    raise AssertionError(mode)


MODES = ["eager", "jit", "jit, donating", "vmap", "grad"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(FP_CASES) + list(FP_WARNING_ONLY))
def test_floating_point_errors_give_no_warnings(name, mode):
    f = FP_CASES.get(name) or FP_WARNING_ONLY[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _in_mode(mode, lambda y: f(rnp, y), rnp.asarray(FP_X))
    if name in FP_CASES and mode != "grad":
        with np.errstate(all="ignore"):
            want = np.asarray(f(np, FP_X.copy()), np.float32)
        np.testing.assert_array_equal(np.asarray(out), want)


@pytest.mark.parametrize("name", list(FP_CASES))
def test_floating_point_results_as_jax(name):
    _, jnp, _ = jax_api()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        theirs = np.asarray(FP_CASES[name](jnp, jnp.asarray(FP_X)))
    ours = np.asarray(FP_CASES[name](rnp, rnp.asarray(FP_X)))
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_the_callers_numpy_error_state_is_left_alone():
    before = np.geterr()
    rnp.log(rnp.asarray(FP_X))
    remat.jit(lambda x: x / 0.0)(rnp.asarray(FP_X))
    assert np.geterr() == before
    with np.errstate(divide="raise"):
        rnp.log(rnp.zeros(2))  # remat's own op: -inf, as in JAX
        with pytest.raises(FloatingPointError):
            np.log(np.zeros(2))  # the caller's NumPy still raises as the caller asked


# --- bounded trace caches --------------------------------------------------------------------


@pytest.fixture
def cache_size_3():
    old = config.trace_cache_size
    config.update("jax_trace_cache_size", 3)
    yield
    config.update("jax_trace_cache_size", old)


def test_trace_cache_size_defaults_to_jaxs_bound():
    assert Config().trace_cache_size == 4096
    assert config.read("jax_trace_cache_size") == config.trace_cache_size


def test_trace_cache_size_is_validated_and_read_from_the_environment(monkeypatch):
    for bad in (0, -1, "many", 2.5):
        with pytest.raises(ValueError, match="jax_trace_cache_size must be a positive integer"):
            config.update("jax_trace_cache_size", bad)
    monkeypatch.setitem(os.environ, "JAX_TRACE_CACHE_SIZE", "7")
    assert Config().trace_cache_size == 7


def test_jit_cache_never_exceeds_its_bound(cache_size_3):
    f = remat.jit(lambda x: x + 1)
    for n in range(1, 11):
        assert float(f(rnp.ones(n)).sum()) == 2 * n
        assert len(f.cache) == min(n, 3)
    assert f.trace_count == 10


def test_jit_cache_evicts_the_least_recently_used(cache_size_3):
    f = remat.jit(lambda x: x * 2)
    for n in (1, 2, 3):
        f(rnp.ones(n))
    f(rnp.ones(1))  # a hit: 1 becomes the most recently used
    assert f.trace_count == 3
    f(rnp.ones(4))  # evicts 2, the least recently used
    assert f.trace_count == 4
    for n in (1, 3, 4):
        f(rnp.ones(n))
    assert f.trace_count == 4  # still cached
    f(rnp.ones(2))
    assert f.trace_count == 5  # traced again
    assert [key[2][0].shape for key in f.cache.keys()] == [(3,), (4,), (2,)]


def test_jit_cache_bound_counts_static_values(cache_size_3):
    f = remat.jit(lambda x, n: x * n, static_argnums=1)
    for n in range(10):
        assert float(f(rnp.float32(1.0), n)) == n
    assert len(f.cache) == 3 and f.trace_count == 10


def test_custom_jvp_cache_is_bounded(cache_size_3):
    @remat.custom_jvp
    def f(x):
        return rnp.sin(x)

    f.defjvp(lambda primals, tangents: (f(primals[0]), rnp.cos(primals[0]) * tangents[0]))
    for n in range(1, 8):
        np.testing.assert_allclose(np.asarray(remat.grad(lambda x: f(x).sum())(rnp.ones(n))),
                                   np.cos(np.ones(n)), rtol=1e-6)
        assert len(f._cache) <= 3


def test_jit_names_the_argument_leaf_that_is_not_an_array():
    """The argument names are worked out only when something is wrong (not on every call):
    the error must still name the leaf, on a first call and after a cached one."""
    f = remat.jit(lambda params, x: x)
    f({"w": np.ones(2)}, 1.0)
    with pytest.raises(TypeError, match=r"Argument 'params\['w'\]' of type <class 'str'>"):
        f({"w": "abc"}, 1.0)
