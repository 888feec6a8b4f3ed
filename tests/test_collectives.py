"""Collectives over named axes under ``vmap(axis_name=)``: values against explicit NumPy and
against JAX, derivatives (JAX and numerical), jit/checkpoint inside, nested and unrelated
axes, and errors."""

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax import lax as jlax

import remat
import remat.numpy as rnp
from remat import lax
from remat.test_util import check_grads

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 3, 4)).astype(np.float32)


def check(make, *args, in_axes=0, axis_name="i", transform=None, rtol=1e-5):
    """``make(lax, np)`` built with each library, vmapped over ``axis_name`` (and wrapped by
    ``transform(lib)``); the two results compared, remat's returned."""
    outs = []
    for lib, L, N in ((remat, lax, rnp), (jax, jlax, jjnp)):
        f = lib.vmap(make(L, N), in_axes=in_axes, axis_name=axis_name)
        if transform is not None:
            f = transform(lib, f)
        outs.append(f(*args))
    got, want = outs
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=1e-5)
    return got


# --- values ----------------------------------------------------------------------------------


def test_psum_pmean_pmax_pmin_match_numpy_and_jax():
    for name, ref in (("psum", X.sum(0)), ("pmean", X.mean(0)), ("pmax", X.max(0)),
                      ("pmin", X.min(0))):
        got = check(lambda L, N, name=name: lambda x: getattr(L, name)(x, "i"), X)
        np.testing.assert_allclose(np.asarray(got), np.broadcast_to(ref, X.shape), rtol=1e-5)


def test_psum_of_ints_bools_and_pmean_of_ints():
    ints = np.arange(12, dtype=np.int32).reshape(4, 3)
    got = check(lambda L, N: lambda x: L.psum(x, "i"), ints)
    assert np.asarray(got).dtype == np.int32
    check(lambda L, N: lambda x: L.psum(x > 5, "i"), ints)
    check(lambda L, N: lambda x: L.pmean(x, "i"), ints)


def test_psum_of_unmapped_values_multiplies_by_axis_size():
    got = check(lambda L, N: lambda x, y: L.psum(y, "i"), X, np.float32(2.0), in_axes=(0, None))
    np.testing.assert_allclose(np.asarray(got), 8.0)
    check(lambda L, N: lambda x: L.psum(1.0, "i") * x, X)
    check(lambda L, N: lambda x: L.pmean(3.0, "i") + x, X)
    check(lambda L, N: lambda x, y: L.all_gather(y, "i"), X, np.arange(3.0, dtype=np.float32),
         in_axes=(0, None))


@pytest.mark.parametrize("axis,tiled", [(0, False), (1, False), (2, False), (-1, False),
                                        (0, True), (1, True)])
def test_all_gather(axis, tiled):
    got = check(lambda L, N: lambda x: L.all_gather(x, "i", axis=axis, tiled=tiled), X)
    ref = np.moveaxis(X, 0, axis if axis >= 0 else axis + 3)
    if tiled:
        ref = np.concatenate(list(X), axis=axis)
    np.testing.assert_array_equal(np.asarray(got)[2], ref)


@pytest.mark.parametrize("dim,tiled", [(0, False), (1, False), (0, True), (1, True)])
def test_psum_scatter(dim, tiled):
    shape = [4, 3, 4] if not tiled else [4, 3, 8]
    if dim == 0:
        shape[1], shape[2] = (4, 3) if not tiled else (8, 3)
    x = RNG.standard_normal(shape).astype(np.float32)
    got = check(lambda L, N: lambda v: L.psum_scatter(v, "i", scatter_dimension=dim,
                                                     tiled=tiled), x)
    total = x.sum(0)
    for k in range(4):
        if tiled:
            c = total.shape[dim] // 4
            ref = np.take(total, np.arange(k * c, (k + 1) * c), axis=dim)
        else:
            ref = np.take(total, k, axis=dim)
        np.testing.assert_allclose(np.asarray(got)[k], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("split,concat,tiled", [(0, 0, False), (0, 1, False), (1, 0, False),
                                                (0, 1, True), (1, 1, True)])
def test_all_to_all(split, concat, tiled):
    shape = [4, 4, 4] if not tiled else [4, 8, 4]
    x = RNG.standard_normal(shape).astype(np.float32)
    got = check(lambda L, N: lambda v: L.all_to_all(v, "i", split, concat, tiled=tiled), x)
    if not tiled:  # member k gets chunk k of every member, stacked at concat
        for k in range(4):
            ref = np.stack([np.take(x[j], k, axis=split) for j in range(4)], axis=concat)
            np.testing.assert_array_equal(np.asarray(got)[k], ref)


def test_ppermute_pshuffle_pswapaxes_axis_index_axis_size():
    perm = [(0, 1), (1, 2), (2, 3), (3, 0)]
    got = check(lambda L, N: lambda x: L.ppermute(x, "i", perm), X)
    np.testing.assert_array_equal(np.asarray(got), X[[3, 0, 1, 2]])
    got = check(lambda L, N: lambda x: L.pshuffle(x, "i", [2, 0, 3, 1]), X)
    np.testing.assert_array_equal(np.asarray(got), X[[2, 0, 3, 1]])
    check(lambda L, N: lambda x: L.pswapaxes(x, "i", 1), X)
    got = check(lambda L, N: lambda x: x * L.axis_index("i"), X)
    assert np.asarray(remat.vmap(lambda x: lax.axis_index("i"), axis_name="i")(X)).dtype == \
        np.int32
    np.testing.assert_allclose(np.asarray(got), X * np.arange(4)[:, None, None])
    assert remat.vmap(lambda x: x * lax.axis_size("i"), axis_name="i")(X).shape == X.shape
    np.testing.assert_allclose(
        remat.vmap(lambda x: x * lax.axis_size("i"), axis_name="i")(X), 4 * X)


def test_ppermute_partial_permutation_gives_zeros():
    got = remat.vmap(lambda x: lax.ppermute(x, "i", [(0, 2)]), axis_name="i")(X)
    ref = np.zeros_like(X)
    ref[2] = X[0]
    np.testing.assert_array_equal(np.asarray(got), ref)


def test_pbroadcast_against_explicit():
    got = remat.vmap(lambda x: lax.pbroadcast(x, "i", 2), axis_name="i")(X)
    np.testing.assert_array_equal(np.asarray(got), np.broadcast_to(X[2], X.shape))
    g = remat.grad(lambda xs: (remat.vmap(lambda x: lax.pbroadcast(x, "i", 1) *
                                          (lax.axis_index("i") + 1.0), axis_name="i")(xs)
                               ).sum())(X[:, 0, 0])
    np.testing.assert_allclose(np.asarray(g), [0.0, 10.0, 0.0, 0.0])


# --- derivatives -----------------------------------------------------------------------------


LINEAR = {
    "psum": lambda L: lambda x: L.psum(x, "i"),
    "pmean": lambda L: lambda x: L.pmean(x, "i"),
    "all_gather": lambda L: lambda x: L.all_gather(x, "i", axis=1),
    "all_gather_tiled": lambda L: lambda x: L.all_gather(x, "i", axis=0, tiled=True),
    "psum_scatter": lambda L: lambda x: L.psum_scatter(x, "i", scatter_dimension=1,
                                                       tiled=True),
    "all_to_all": lambda L: lambda x: L.all_to_all(x, "i", 1, 0, tiled=True),
    "ppermute": lambda L: lambda x: L.ppermute(x, "i", [(0, 3), (3, 1), (1, 2), (2, 0)]),
}


@pytest.mark.parametrize("name", sorted(LINEAR))
def test_grad_of_collective_inside_vmap_matches_jax(name):
    x = RNG.standard_normal((4, 4, 4)).astype(np.float32)
    w = RNG.standard_normal((4, 4, 4)).astype(np.float32)

    def make(L, N):
        op = LINEAR[name](L)
        return lambda v: (N.sin(op(v * v)) * N.sum(v)).sum()

    check(make, x, transform=lambda lib, f: lib.grad(lambda v: (f(v) * w[:, 0, 0]).sum()))
    check(lambda L, N: lib_grad(L, N, make), x)  # grad inside the vmap

    def tangent(lib, f):
        return lambda v: lib.jvp(f, (v,), (w,))[1]

    check(make, x, transform=tangent)


def lib_grad(L, N, make):
    lib = remat if L is lax else jax
    return lib.grad(make(L, N))


@pytest.mark.parametrize("name", sorted(LINEAR) + ["pmax"])
def test_check_grads_of_collectives(name):
    op = (lambda x: lax.pmax(x, "i")) if name == "pmax" else LINEAR[name](lax)
    f = remat.vmap(lambda v: rnp.tanh(op(v)), axis_name="i")
    x = RNG.standard_normal((4, 4, 4))
    with remat.enable_x64(True):
        check_grads(f, (x,), order=2, modes=("fwd", "rev"))


def test_pmax_derivative_flows_to_the_maximum():
    x = np.array([1.0, 5.0, 2.0, 5.0], np.float32)
    g = remat.grad(lambda v: remat.vmap(lambda e: lax.pmax(e, "i"), axis_name="i")(v)[0])(x)
    np.testing.assert_allclose(np.asarray(g), [0.0, 0.5, 0.0, 0.5])


# --- with jit, checkpoint, nesting -----------------------------------------------------------


def test_jit_and_checkpoint_inside_and_jit_outside():
    def make(L, N):
        lib = remat if L is lax else jax

        def body(x):
            inner = lib.jit(lambda v: L.psum(N.sin(v), "i") * L.axis_index("i"))
            ck = lib.checkpoint(lambda v: L.all_gather(N.cos(v), "i").sum(0))
            return inner(x) + ck(x)

        return body

    check(make, X)
    check(make, X, transform=lambda lib, f: lib.jit(f))
    check(make, X, transform=lambda lib, f: lib.grad(lambda v: lib.jit(f)(v).sum()))
    check(lambda L, N: lib_grad(L, N, lambda L, N: lambda v: make(L, N)(v).sum()), X)


def test_jit_with_unmapped_argument_and_psum_inside():
    check(lambda L, N: lambda x, y: (remat if L is lax else jax).jit(
        lambda b: L.psum(b, "i"))(y), X, np.float32(3.0), in_axes=(0, None))


def test_jitted_function_traced_again_under_another_axis_size():
    f = remat.jit(lambda v: lax.all_gather(v, "i"))
    a = remat.vmap(f, axis_name="i")(X)
    b = remat.vmap(f, axis_name="i")(X[:2])
    assert a.shape == (4, 4, 3, 4) and b.shape == (2, 2, 3, 4)


def test_nested_named_axes():
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)

    def make(L, N):
        return lambda v: L.psum(v, ("i", "j")) + L.pmean(v, "j") * L.axis_index("i")

    for L, N, lib in ((lax, rnp, remat), (jlax, jjnp, jax)):
        f = lib.vmap(lib.vmap(make(L, N), axis_name="j"), axis_name="i")
        ref = x.sum((0, 1)) + x.mean(1, keepdims=True) * np.arange(2)[:, None, None]
        np.testing.assert_allclose(np.asarray(f(x)), np.broadcast_to(ref, x.shape), rtol=1e-5,
                                   atol=1e-5)
    index = remat.vmap(remat.vmap(lambda v: lax.axis_index(("i", "j")), axis_name="j"),
                       axis_name="i")(x)
    np.testing.assert_array_equal(np.asarray(index), np.arange(6).reshape(2, 3))
    gathered = remat.vmap(remat.vmap(lambda v: lax.all_gather(v, ("i", "j")), axis_name="j"),
                          axis_name="i")(x)
    np.testing.assert_array_equal(np.asarray(gathered)[1, 2], x.reshape(6, 5))


def test_psum_scatter_over_two_axes():
    x = RNG.standard_normal((2, 3, 12)).astype(np.float32)
    out = remat.vmap(remat.vmap(lambda v: lax.psum_scatter(v, ("i", "j"), tiled=True),
                                axis_name="j"), axis_name="i")(x)
    total = x.sum((0, 1)).reshape(6, 2)
    np.testing.assert_allclose(np.asarray(out).reshape(6, 2), total, rtol=1e-5)


def test_collective_under_an_unrelated_vmap_matches_a_loop():
    cases = [lambda v: lax.psum(v, "i"), lambda v: lax.all_gather(v, "i", axis=1),
             lambda v: lax.psum_scatter(v, "i", scatter_dimension=0, tiled=False),
             lambda v: lax.all_to_all(v, "i", 0, 0),
             lambda v: lax.ppermute(v, "i", [(0, 1), (1, 0), (2, 3), (3, 2)])]
    y = RNG.standard_normal((5, 4, 4, 3)).astype(np.float32)  # (unrelated, named, ...)
    for op in cases:
        inner = remat.vmap(op, axis_name="i")
        loop = np.stack([np.asarray(inner(y[b])) for b in range(5)])
        np.testing.assert_allclose(np.asarray(remat.vmap(inner)(y)), loop, rtol=1e-5)
        # the unrelated vmap inside the named one
        nested = remat.vmap(remat.vmap(op), in_axes=1, out_axes=1, axis_name="i")(y)
        np.testing.assert_allclose(np.asarray(nested), loop, rtol=1e-5)


def test_make_jaxpr_of_named_vmap_has_no_collective_left():
    text = str(remat.make_jaxpr(remat.vmap(lambda v: lax.psum(v, "i"), axis_name="i"))(X))
    assert "reduce_sum" in text and "psum" not in text


# --- errors ----------------------------------------------------------------------------------


def test_unbound_axis_name_errors():
    with pytest.raises(NameError, match="unbound axis name: i"):
        lax.psum(1.0, "i")
    with pytest.raises(NameError, match="unbound axis name: j. The following axis names"):
        remat.vmap(lambda v: lax.psum(v, "j"), axis_name="i")(X)
    with pytest.raises(NameError, match="'i'"):
        remat.vmap(lambda v: lax.axis_index("k"), axis_name="i")(X)
    with pytest.raises(NameError, match="unbound axis name"):
        remat.jit(lambda v: lax.all_gather(v, "i"))(X)
    with pytest.raises(NameError):
        lax.axis_size("i")


def test_mismatched_sizes_and_bad_arguments():
    with pytest.raises(ValueError, match="scatter dimension"):
        remat.vmap(lambda v: lax.psum_scatter(v, "i", scatter_dimension=0), axis_name="i")(X)
    with pytest.raises(ValueError, match="split axis"):
        remat.vmap(lambda v: lax.all_to_all(v, "i", 0, 1), axis_name="i")(X)
    with pytest.raises(ValueError, match="axis_index_groups"):
        remat.vmap(lambda v: lax.psum(v, "i", axis_index_groups=[[0, 1], [2, 3]]),
                   axis_name="i")(X)
    with pytest.raises(ValueError, match="unique"):
        remat.vmap(lambda v: lax.ppermute(v, "i", [(0, 1), (2, 1)]), axis_name="i")(X)
    with pytest.raises(ValueError, match="outside axis"):
        remat.vmap(lambda v: lax.ppermute(v, "i", [(0, 7)]), axis_name="i")(X)
    with pytest.raises(ValueError, match="permutation"):
        remat.vmap(lambda v: lax.pshuffle(v, "i", [0, 0, 1, 2]), axis_name="i")(X)
    with pytest.raises(ValueError, match="source 4 is outside axis 'i' of size 4"):
        remat.vmap(lambda v: lax.pbroadcast(v, "i", 4), axis_name="i")(X)
    with pytest.raises(ValueError, match="out of bounds"):
        remat.vmap(lambda v: lax.all_gather(v, "i", axis=4), axis_name="i")(X)
    with pytest.raises(TypeError, match="pmax does not accept dtype complex64"):
        remat.vmap(lambda v: lax.pmax(v, "i"), axis_name="i")(X.astype(np.complex64))


def _control_flow_programs(L, N, lib):
    return {
        "checkpoint_unmapped": lambda x, y: lib.checkpoint(lambda b: L.psum(b, "i"))(y),
        "scan": lambda x, y: L.scan(lambda c, _: (L.psum(c * x, "i") * 0.1 + c, None), y,
                                    None, length=3)[0],
        "scan_unmapped": lambda x, y: L.scan(lambda c, _: (L.psum(c, "i") * 0.1, None), y,
                                             None, length=3)[0],
        "fori": lambda x, y: L.fori_loop(0, 3, lambda i, c: L.pmean(N.sin(c), "i") + x, x),
        "cond": lambda x, y: L.cond(y.sum() > 0, lambda v: L.psum(v, "i"),
                                    lambda v: L.all_gather(v, "i")[0], x),
    }


@pytest.mark.parametrize("name", sorted(_control_flow_programs(lax, rnp, remat)))
def test_collectives_inside_control_flow_match_jax(name):
    y = np.ones(4, np.float32)

    def make(L, N):
        return _control_flow_programs(L, N, remat if L is lax else jax)[name]

    check(make, X[:, 0], y, in_axes=(0, None))
    check(make, X[:, 0], y, in_axes=(0, None),
         transform=lambda lib, f: lambda a, b: lib.grad(lambda v: f(v, b).sum())(a))


def test_collective_in_cond_with_a_batched_predicate():
    """Both branches run for every member, so the psum's transpose carries the cotangent of
    every member whose predicate chose it (JAX 0.10 drops it for the others)."""
    x = X[:, 0, 0]
    f = remat.vmap(lambda v: lax.cond(v > 0, lambda a: lax.psum(a, "i"),
                                      lambda a: a * lax.axis_index("i"), v), axis_name="i")
    pred = x > 0
    np.testing.assert_allclose(np.asarray(f(x)), np.where(pred, x.sum(), x * np.arange(4)),
                               rtol=1e-5)
    g = remat.grad(lambda v: f(v).sum())(x)
    np.testing.assert_allclose(np.asarray(g), pred.sum() + (~pred) * np.arange(4))


def test_make_jaxpr_with_axis_env():
    text = str(remat.make_jaxpr(lambda v: lax.all_gather(lax.psum(v, "i"), "i"),
                                axis_env=[("i", 4)])(X[0]))
    assert "psum" in text and "all_gather" in text and "f32[4,3,4]" in text
    jtext = str(jax.make_jaxpr(lambda v: jlax.all_gather(jlax.psum(v, "i"), "i"),
                               axis_env=[("i", 4)])(X[0]))
    assert "f32[4,3,4]" in jtext
    with pytest.raises(NameError, match="unbound axis name: j"):
        remat.make_jaxpr(lambda v: lax.psum(v, "j"), axis_env=[("i", 4)])(X[0])


def test_ppermute_pshuffle_pbroadcast_over_two_axes():
    x = RNG.standard_normal((2, 3, 5))
    flat = x.reshape(6, 5)
    perm = [(0, 4), (4, 5), (5, 0), (2, 3)]

    def nested(op):
        return remat.vmap(remat.vmap(op, axis_name="j"), axis_name="i")

    out = np.asarray(nested(lambda v: lax.ppermute(v, ("i", "j"), perm))(x)).reshape(6, 5)
    ref = np.zeros_like(flat)
    for src, dst in perm:
        ref[dst] = flat[src]
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    shuffled = nested(lambda v: lax.pshuffle(v, ("i", "j"), [5, 4, 3, 2, 1, 0]))(x)
    np.testing.assert_allclose(np.asarray(shuffled).reshape(6, 5), flat[::-1], rtol=1e-6)
    broadcast = nested(lambda v: lax.pbroadcast(v, ("i", "j"), 4))(x)
    np.testing.assert_allclose(np.asarray(broadcast).reshape(6, 5), np.tile(flat[4], (6, 1)),
                               rtol=1e-6)
    with remat.enable_x64(True):
        check_grads(nested(lambda v: rnp.sin(lax.ppermute(v, ("i", "j"), perm))), (x,),
                    order=1)


def test_custom_rules_of_a_named_vmap_see_its_axis_when_they_run_later():
    """A custom_vjp's fwd/bwd, a custom_jvp's rule and a custom_remat's rules batched by a
    named vmap run after the vmap has returned, when the batched function is differentiated:
    they must still see the vmap's axis name (fuzz seed 61072: "unbound axis name" from a
    custom_remat's f_bwd using axis_index, under value_and_grad of a named vmap)."""
    from remat.checkpointing.custom_remat import custom_remat

    def make(ns, lib_lax, custom_vjp, custom_jvp):
        @custom_vjp
        def scaled(x):
            return x * (lib_lax.axis_index("i") + 1.0)

        scaled.defvjp(lambda x: (scaled(x), x),
                      lambda x, g: (lib_lax.psum(g, "i") * (lib_lax.axis_index("i") + 1.0),))

        @custom_jvp
        def shifted(x):
            return ns.sin(x) + lib_lax.axis_index("i")

        shifted.defjvp(lambda p, t: (shifted(*p), ns.cos(p[0]) * t[0]
                                     * (lib_lax.axis_index("i") + 1.0)))
        return lambda x: shifted(scaled(x)) ** 2

    x = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)

    def loss(lib, f):
        return lambda x: lib.numpy.sum(lib.vmap(f, axis_name="i")(x))

    got = remat.grad(loss(remat, make(rnp, lax, remat.custom_vjp, remat.custom_jvp)))(x)
    want = jax.grad(loss(jax, make(jjnp, jlax, jax.custom_vjp, jax.custom_jvp)))(x)
    np.testing.assert_allclose(got, want, rtol=1e-5)

    def fn(x):
        return rnp.sin(x) * (lax.axis_index("i") + 1.0)

    cr = custom_remat(fn, lambda policy, x: (fn(x), None), lambda saved, x: (fn(x), x),
                      lambda x, g: remat.vjp(fn, x)[1](g))
    for outer in (lambda f: f, remat.jit):
        got = outer(remat.grad(loss(remat, remat.checkpoint(cr))))(x)
        want = remat.grad(loss(remat, remat.checkpoint(fn)))(x)
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_call_with_no_operands_that_uses_the_named_axis_is_batched():
    """``jit(lambda: axis_index("i"))()`` inside a named vmap: no operand is batched, yet its
    body depends on the axis (it ran unbatched, and ``axis_index`` raised "unbound axis name"
    when the body was executed: fuzz seed 64431)."""
    def f(ns, lib_lax, jit):
        def g(x):
            k = jit(lambda: lib_lax.axis_index("i") * 2 + 1)()
            return ns.sin(x) * k
        return g

    x = np.linspace(0.1, 1.0, 4, dtype=np.float32)
    want = jax.vmap(f(jjnp, jlax, jax.jit), axis_name="i")(x)
    for outer in (lambda h: h, remat.jit):
        got = outer(remat.vmap(f(rnp, lax, remat.jit), axis_name="i"))(x)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    out, lin = remat.linearize(remat.vmap(f(rnp, lax, remat.jit), axis_name="i"), x)
    _, jlin = jax.linearize(jax.vmap(f(jjnp, jlax, jax.jit), axis_name="i"), x)
    np.testing.assert_allclose(lin(np.ones_like(x)), jlin(np.ones_like(x)), rtol=1e-6)
