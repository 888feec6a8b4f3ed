"""Mutable array references (``remat.ref``): eagerly, under jit, grad, checkpoint, vmap and
control flow, each against NumPy semantics and against JAX (``jax.ref``)."""

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.ad_checkpoint import checkpoint_policies, saved_residuals
from remat.test_util import check_grads

jax = pytest.importorskip("jax")
jjnp = jax.numpy

f32 = np.float32


def _both(program, *args):
    """``program(lib, np_lib, *args)`` run with remat and with JAX."""
    return program(remat, jnp, *args), program(jax, jjnp, *args)


def _close(a, b, tol=1e-6):
    a_leaves, b_leaves = remat.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(a_leaves) == len(b_leaves)
    for x, y in zip(a_leaves, b_leaves):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype, (x.dtype, y.dtype, x.shape, y.shape)
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


def _contents(ref):
    return np.asarray(ref[...])


# --- eager ------------------------------------------------------------------------------------


def test_eager_reads_and_writes_match_numpy_and_jax():
    def program(lib, np_lib):
        r = lib.new_ref(np_lib.arange(12.0).reshape(3, 4))
        row = r[0]
        r[1] = row
        r[2, 3] = r[1, 2]
        col = r[:, 1]
        r[0, :3] = col
        r[np_lib.array([0, 0, 1]), np_lib.array([1, 2, 3])] = np_lib.array([-1.0, -2.0, -3.0])
        r[1] += 10.0
        r[::2, -1] += 1.0
        lib.ref.addupdate(r, (np_lib.array([2, 2]), 0), np_lib.ones(2))  # repeated: both add
        old = lib.ref.swap(r, (0, slice(1, 3)), np_lib.zeros(2))
        lib.ref.set(r, (-1, Ellipsis), np_lib.full(4, 7.0))
        return r[...], old, lib.ref.get(r, (1,)), lib.ref.get(r)

    ours, theirs = _both(program)
    _close(ours, theirs)
    x = np.arange(12.0, dtype=f32).reshape(3, 4)  # the same with NumPy, in place
    x[1] = x[0]
    x[2, 3] = x[1, 2]
    x[0, :3] = x[:, 1].copy()
    x[[0, 0, 1], [1, 2, 3]] = [-1.0, -2.0, -3.0]
    x[1] += 10.0
    x[::2, -1] += 1.0
    np.add.at(x, ([2, 2], 0), 1.0)
    x[0, 1:3] = 0.0
    x[-1] = 7.0
    np.testing.assert_array_equal(np.asarray(ours[0]), x)


def test_ref_buffer_is_updated_in_place():
    r = remat.new_ref(jnp.zeros(5))
    address = r.unsafe_buffer_pointer()
    r[2] = 3.0
    r[...] += 1.0
    remat.jit(lambda: r.__setitem__(0, 9.0))()
    assert r.unsafe_buffer_pointer() == address
    np.testing.assert_array_equal(_contents(r), [9, 1, 4, 1, 1])


def test_new_ref_copies_and_freeze_returns_contents():
    x = jnp.arange(3.0)
    r = remat.new_ref(x)
    r[0] = 5.0
    np.testing.assert_array_equal(np.asarray(x), [0, 1, 2])  # the initial value is copied
    out = remat.freeze(r)
    assert isinstance(out, remat.Array) and out.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(out), [5, 1, 2])
    r[1] = -1.0  # a frozen copy does not change with the Ref
    np.testing.assert_array_equal(np.asarray(out), [5, 1, 2])
    assert remat.free_ref(remat.new_ref(1.0)) == ()


def test_empty_ref_starts_as_zeros():
    r = remat.empty_ref(remat.ShapeDtypeStruct((2, 3), np.int32))
    assert remat.typeof(r) == remat.ref.AbstractRef(remat.core.ShapedArray((2, 3), np.int32))
    np.testing.assert_array_equal(_contents(r), np.zeros((2, 3), np.int32))

    @remat.jit
    def f():
        e = remat.empty_ref(jnp.zeros(2))
        e[...] = jnp.ones(2)
        return remat.freeze(e)

    np.testing.assert_array_equal(np.asarray(f()), [1, 1])


@pytest.mark.parametrize("idx", [0, -1, (1, 2), (slice(None), 1), (Ellipsis, 0),
                                 (slice(3, 0, -2),), (0, slice(None, None, 2)),
                                 (np.array([2, 0]),), (np.array([[0], [2]]), np.array([1, 3])),
                                 (np.array([0, 1]), slice(1, 3)),
                                 (slice(None), np.array([3, 1])),
                                 (np.array([0, 2]), 1), (1, np.array([0, 3, 3]))])
def test_read_shapes_follow_numpy(idx):
    x = np.arange(20, dtype=f32).reshape(4, 5)
    r = remat.new_ref(x)
    got = r[idx]
    np.testing.assert_array_equal(np.asarray(got), x[idx])
    traced = remat.jit(lambda: r[idx])()  # the same index staged: its abstract eval agrees
    assert traced.shape == x[idx].shape


def test_dynamic_scalar_indices_clamp_like_jax():
    def program(lib, np_lib):
        r = lib.new_ref(np_lib.arange(4.0))
        read = lib.jit(lambda i: r[i])(7)
        lib.jit(lambda i: r.__setitem__(i, 9.0))(7)
        lib.jit(lambda i: r.__setitem__(i, -5.0))(-1)
        return read, r[...]

    ours, theirs = _both(program)
    _close(ours, theirs)
    np.testing.assert_array_equal(np.asarray(ours[1]), [0, 1, 2, -5])


def test_repr_and_types_match_jax():
    def program(lib, np_lib):
        a = lib.new_ref(np_lib.arange(3))
        b = lib.new_ref(np_lib.ones((2, 2)))
        c = lib.new_ref(3)
        d = lib.new_ref(0.5)
        d[...] = np_lib.float32(1.5)  # written: the weak type of the initial value is gone
        return [repr(a), repr(b), repr(c), repr(d), str(lib.typeof(b)), repr(lib.typeof(c)),
                len(b), b.shape, str(b.dtype), b.ndim, b.size]

    ours, theirs = _both(program)
    assert ours == theirs
    r = remat.new_ref(1.0)
    assert isinstance(r, remat.Ref) and not isinstance(r, remat.Array)
    assert remat.typeof(r).inner_aval.weak_type


def test_traced_refs_are_refs_and_print_as_state_ops():
    seen = []

    def f(r, x):
        seen.append(isinstance(r, remat.Ref))
        r[1:] += x
        remat.ref.addupdate(r, 0, x[0])
        return r[jnp.array([0, 2])].sum()

    text = str(remat.make_jaxpr(f)(remat.new_ref(jnp.zeros(3)), jnp.ones(2)))
    assert seen == [True]
    assert "b:Ref{f32[3]}" in text
    for op in ("get[indexer=[1:3]]", "swap[indexer=[1:3]]", "addupdate[indexer=[0]]",
               "get[indexer=[i0]]"):
        assert op in text, text


# --- errors (as JAX's) -----------------------------------------------------------------------


def _check_error(program, exc_type, match):
    for lib, np_lib in ((remat, jnp), (jax, jjnp)):
        with pytest.raises(exc_type, match=match):
            program(lib, np_lib)


def test_write_checks_shape_and_dtype():
    def wrong_shape(lib, np_lib):
        lib.new_ref(np_lib.zeros(3))[...] = np_lib.ones(2)

    def scalar_into_array(lib, np_lib):
        lib.new_ref(np_lib.zeros(3))[...] = 1.0

    def int_into_float(lib, np_lib):
        lib.new_ref(np_lib.zeros(3))[0] = 5

    def addupdate_shape(lib, np_lib):
        lib.new_ref(np_lib.zeros(3)).addupdate(1.0)

    _check_error(wrong_shape, ValueError, r"Invalid shape for `swap`")
    _check_error(scalar_into_array, ValueError, r"Invalid shape for `swap`")
    _check_error(int_into_float, ValueError, r"Invalid dtype for `swap`")
    _check_error(addupdate_shape, ValueError, r"Invalid shape for `addupdate`")


def test_bad_indices():
    def out_of_bounds(lib, np_lib):
        lib.new_ref(np_lib.zeros(3))[5]

    _check_error(out_of_bounds, ValueError, r"Out of bound indexer: idx=5, dim=3")
    r = remat.new_ref(jnp.zeros(3))
    with pytest.raises(IndexError, match="boolean"):
        r[jnp.array([True, False, True])]
    with pytest.raises(TypeError, match="integer"):
        r[jnp.array([0.0])]
    with pytest.raises(IndexError, match="Too many indices"):
        r[0, 1]
    with pytest.raises(TypeError, match="None"):
        r[0, None]
    np.testing.assert_array_equal(np.asarray(r[None]), np.zeros(3))  # as JAX: the whole Ref
    with pytest.raises(remat.errors.ConcretizationTypeError):
        remat.jit(lambda i: r[i:i + 2])(0)


def test_refs_are_not_arrays():
    def lax_sin(lib, np_lib):
        lib.lax.sin(lib.new_ref(1.0))

    def jit_lax_sin(lib, np_lib):
        lib.jit(lambda r: lib.lax.sin(r))(lib.new_ref(1.0))

    _check_error(lax_sin, ValueError, r"Attempting to pass a Ref Ref\{float32\[\]\} to a "
                                     r"primitive: sin -- did you forget to unpack")
    _check_error(jit_lax_sin, ValueError, r"did you forget to unpack")
    with pytest.raises(TypeError):
        remat.new_ref(1.0) + 1  # noqa: B018
    with pytest.raises(TypeError, match="Error interpreting argument to new_ref"):
        remat.new_ref([1.0, 2.0])
    with pytest.raises(TypeError, match="mutable array reference"):
        remat.new_ref(remat.new_ref(1.0))


def test_refs_cannot_be_returned_or_aliased():
    def returned(lib, np_lib):
        lib.jit(lambda r: r)(lib.new_ref(np_lib.arange(3)))

    def created_and_returned(lib, np_lib):
        lib.jit(lambda x: lib.new_ref(x))(np_lib.arange(3))

    def aliased(lib, np_lib):
        r = lib.new_ref(0.0)
        lib.jit(lambda x_ref, y_ref: x_ref[...] + y_ref[...])(r, r)

    def closed_and_passed(lib, np_lib):
        r = lib.new_ref(0.0)
        lib.jit(lambda y_ref: r[...] + y_ref[...])(r)

    _check_error(returned, ValueError, r"traced for jit returned a mutable array reference of "
                                      r"type Ref\{int32\[3\]\}")
    _check_error(created_and_returned, ValueError, r"was created on line")
    _check_error(aliased, ValueError, r"appeared at both x_ref and y_ref")
    _check_error(closed_and_passed, ValueError, r"closed over and passed as the argument y_ref")
    with pytest.raises(ValueError, match="checkpoint / remat returned a mutable array"):
        remat.checkpoint(lambda x: remat.new_ref(x))(1.0)
    with pytest.raises(ValueError, match="in the scope that created it"):
        remat.jit(lambda r: remat.freeze(r))(remat.new_ref(1.0))


def test_differentiation_errors():
    x_ref = remat.new_ref(jnp.zeros(3))

    def differentiated_write(lib, np_lib, ref):
        def bad(w):
            ref[...] += w
            return w.sum()

        lib.grad(bad)(np_lib.ones(3))

    with pytest.raises(Exception, match="differentiated value on a non-differentiated array "
                                        "reference of type Ref{float32\\[3\\]}"):
        differentiated_write(remat, jnp, x_ref)
    with pytest.raises(Exception, match="differentiated value on a non-differentiated"):
        differentiated_write(jax, jjnp, jax.new_ref(jjnp.zeros(3)))
    with pytest.raises(Exception, match="addupdate operation with a differentiated value"):
        remat.grad(lambda x: remat.ref.addupdate(x_ref, 0, x) or x)(1.0)
    with pytest.raises(Exception, match="set/swap operation with a differentiated value"):
        remat.jvp(lambda x: x_ref.__setitem__(0, x) or x, (1.0,), (1.0,))

    def wrt_ref(lib, np_lib):
        lib.grad(lambda r: r[...].sum())(lib.new_ref(np_lib.zeros(3)))

    _check_error(wrt_ref, ValueError, r"Expected cotangent type Ref\{float32\[3\]\} but got "
                                     r"float32\[3\]")
    with pytest.raises(ValueError, match="Expected cotangent type"):
        remat.vjp(lambda r: r[...] ** 2, remat.new_ref(2.0))


def test_vmap_errors():
    def batched_into_closed(lib, np_lib):
        x_ref = lib.new_ref(0.0)
        lib.vmap(lambda x: x_ref.__setitem__(Ellipsis, x))(np_lib.arange(3.0))

    _check_error(batched_into_closed, Exception,
                r"set/swap operation with vmapped value on an unbatched array reference of "
                r"type Ref\{float32\[\]\}")
    y_ref = remat.new_ref(jnp.zeros(3))
    with pytest.raises(Exception, match="vmapped value on an unbatched"):  # batched index
        remat.vmap(lambda i: y_ref.__setitem__(i, 1.0))(jnp.arange(3))


# --- jit ---------------------------------------------------------------------------------------


def test_jit_closed_over_ref_matches_eager_and_jax():
    def program(lib, np_lib, jit):
        x_ref = lib.new_ref(np_lib.zeros(3))

        def f():
            x_ref[...] += 1.0
            x_ref[0] += 1
            x_ref[1] += 5

        f = lib.jit(f) if jit else f
        f()
        f()
        return x_ref[...]

    for jit in (False, True):
        ours, theirs = _both(program, jit)
        _close(ours, theirs)
        np.testing.assert_array_equal(np.asarray(ours), [4, 12, 2])


def test_jit_ref_arguments_and_nested_jit():
    def program(lib, np_lib):
        x_ref = lib.new_ref(np_lib.zeros((1, 3)))
        z_ref = lib.new_ref(np_lib.zeros((2, 3)))
        w_ref = lib.new_ref(np_lib.zeros(3))

        @lib.jit
        def inner(y_ref, z):
            w_ref[...] += 1.0
            y_ref[0, 2] += 7.0
            return z + 9.0

        @lib.jit
        def f(x_mut, y, z_mut, w):
            x_mut[...] += 1
            z_mut[...] += 1
            out = inner(x_mut, y)
            return x_mut[...] + y + z_mut[...] + w, out

        outs = f(x_ref, np_lib.ones((2, 3)), z_ref, np_lib.ones((2, 1)))
        return outs, x_ref[...], z_ref[...], w_ref[...]

    ours, theirs = _both(program)
    _close(ours, theirs)


def test_jit_internal_refs():
    def program(lib, np_lib):
        @lib.jit
        def f(x):
            r = lib.new_ref(x)
            r[0] += 1.0
            r[0] += 1.0
            r[2] += r[1] * 3
            y = r[...]
            lib.free_ref(r)
            return y

        @lib.jit
        @lib.jit
        def g():
            return lib.new_ref(np_lib.zeros(4))[...]

        return f(np_lib.arange(3.0)), g()

    ours, theirs = _both(program)
    _close(ours, theirs)
    np.testing.assert_array_equal(np.asarray(ours[0]), [2, 1, 5])


def test_jit_traces_once_and_sees_writes_between_calls():
    r = remat.new_ref(jnp.arange(3.0))
    f = remat.jit(lambda s: r[...] * s)
    np.testing.assert_array_equal(np.asarray(f(2.0)), [0, 2, 4])
    r[...] = jnp.ones(3)
    np.testing.assert_array_equal(np.asarray(f(2.0)), [2, 2, 2])
    assert f.trace_count == 1


# --- grad ------------------------------------------------------------------------------------


def _internal(lib, np_lib, x):
    """A pure function that uses a Ref internally."""
    r = lib.new_ref(x)
    r[...] = np_lib.sin(r[...])
    r[1:] += r[:-1] * 2.0
    lib.ref.addupdate(r, 0, np_lib.cos(x[2]))
    r[np_lib.array([2, 0])] = r[np_lib.array([0, 2])] * x[1]
    return r[...]


def _internal_pure(x):
    y = jnp.sin(x)
    y = y.at[1:].add(y[:-1] * 2.0)
    y = y.at[0].add(jnp.cos(x[2]))
    return y.at[jnp.array([2, 0])].set(y[jnp.array([0, 2])] * x[1])


X = np.array([0.3, -1.2, 0.7], f32)


def test_grad_of_internal_refs_matches_pure_function_and_jax():
    def program(lib, np_lib, x):
        f = lambda x: _internal(lib, np_lib, x)  # noqa: E731
        loss = lambda x: (f(x) ** 2).sum()  # noqa: E731
        return f(x), lib.grad(loss)(x), lib.jit(lib.grad(loss))(x), lib.jacrev(f)(x)

    ours, theirs = _both(program, X)
    _close(ours, theirs, 1e-5)
    _close(ours[1], remat.grad(lambda x: (_internal_pure(x) ** 2).sum())(X), 1e-5)
    # (JAX 0.10's jacfwd fails on Refs; remat's agrees with the pure function's)
    _close(remat.jacfwd(lambda x: _internal(remat, jnp, x))(X), remat.jacfwd(_internal_pure)(X),
           1e-5)


def test_check_grads_through_refs():
    check_grads(lambda x: _internal(remat, jnp, x), (X,), order=2, modes=("fwd", "rev"),
                atol=2e-2, rtol=2e-2)


def test_grad_doc_examples():
    def program(lib, np_lib):
        def g(x):
            x_ref = lib.new_ref(0.0)
            x_ref[...] = np_lib.sin(x)
            return x_ref[...]

        @lib.jit
        def pure2(x):
            ref = lib.new_ref(x)
            ref[...] = ref[...] + ref[...]
            return ref[...]

        @lib.jit
        def grad_of_frozen(x):
            x_ = lib.new_ref(x)
            x_[()] = x_[()] + x_[()]
            return lib.freeze(x_)

        return (lib.grad(g)(1.0), lib.grad(pure2)(3.0), lib.grad(grad_of_frozen)(1.0),
                lib.jvp(g, (1.0,), (2.0,)), lib.linearize(g, 1.0)[1](1.0))

    ours, theirs = _both(program)
    _close(ours, theirs)


def test_second_order_through_refs():
    def h(x):
        r = remat.new_ref(x)
        r[...] = jnp.sin(r[...]) * r[...]
        return r[...]

    expected = 2 * np.cos(1.0) - np.sin(1.0)  # d²/dx² x sin x
    np.testing.assert_allclose(np.asarray(remat.grad(remat.grad(h))(1.0)), expected, 1e-6)
    np.testing.assert_allclose(np.asarray(remat.hessian(h)(1.0)), expected, 1e-6)


def test_closed_over_ref_collects_stop_gradient_values():
    def program(lib, np_lib, jit):
        acc = lib.new_ref(np_lib.zeros(3))

        def loss(w, x):
            y = np_lib.sin(w * x)
            acc[...] += lib.lax.stop_gradient(y)
            return y.sum()

        g = lib.grad(loss)
        g = lib.jit(g) if jit else g
        return g(np_lib.ones(3), 2.0), g(np_lib.ones(3), 1.0), acc[...]

    for jit in (False, True):
        ours, theirs = _both(program, jit)
        _close(ours, theirs)
        np.testing.assert_allclose(np.asarray(ours[2]), np.sin([2.0] * 3) + np.sin(1.0), 1e-6)


def _stash(lib):
    @lib.custom_vjp
    def stash_grads(grads_ref, x):
        return x

    def fwd(grads_ref, x):
        return x, grads_ref

    def bwd(grads_ref, g):
        grads_ref[...] += g
        return None, g

    stash_grads.defvjp(fwd, bwd)
    return stash_grads


@pytest.mark.parametrize("wrap", ["plain", "jit", "grad_of_jit", "checkpoint", "jit_checkpoint"])
def test_gradient_accumulation_through_custom_vjp(wrap):
    """The custom_vjp ``stash_grads`` writes the cotangent it receives into a Ref: each grad
    call accumulates it once, whatever wraps the function."""
    def program(lib, np_lib):
        stash = _stash(lib)

        def f(x, grads_ref):
            return np_lib.sin(stash(grads_ref, x))

        grads_ref = lib.new_ref(0.0)
        closed_ref = lib.new_ref(0.0)

        def h(x):
            return np_lib.sin(stash(closed_ref, x)) * x

        if wrap in ("checkpoint", "jit_checkpoint"):
            f, h = lib.checkpoint(f), lib.checkpoint(h)
        g_f, g_h = lib.grad(f), lib.grad(h)
        if wrap == "grad_of_jit":
            g_f, g_h = lib.grad(lib.jit(f)), lib.grad(lib.jit(h))
        elif wrap in ("jit", "jit_checkpoint"):
            g_f, g_h = lib.jit(g_f), lib.jit(g_h)
        outs = [g_f(1.0, grads_ref), g_f(0.5, grads_ref), g_h(1.0), g_h(2.0)]
        return outs, grads_ref[...], closed_ref[...]

    ours, theirs = _both(program)
    _close(ours, theirs, 1e-6)
    np.testing.assert_allclose(np.asarray(ours[1]), np.cos(1.0) + np.cos(0.5), 1e-6)


# --- checkpoint ------------------------------------------------------------------------------


def _layered(lib, np_lib, W, x):
    r = lib.new_ref(x)
    r[...] = np_lib.sin(W @ r[...])
    r[...] = np_lib.sin(W @ r[...])
    return r[...].sum()


W = (np.arange(9.0, dtype=f32).reshape(3, 3) - 4) / 10
X3 = np.arange(3.0, dtype=f32)


@pytest.mark.parametrize("policy", [None, "dots_saveable", "everything_saveable",
                                    "nothing_saveable"])
def test_checkpointed_function_with_internal_refs(policy):
    pol = None if policy is None else getattr(checkpoint_policies, policy)
    f = remat.checkpoint(lambda W, x: _layered(remat, jnp, W, x), policy=pol)
    expected = jax.grad(lambda W, x: _layered(jax, jjnp, W, x), argnums=(0, 1))(W, X3)
    _close(remat.grad(f, argnums=(0, 1))(W, X3), expected, 1e-5)
    _close(remat.jit(remat.grad(f, argnums=(0, 1)))(W, X3), expected, 1e-5)
    check_grads(lambda x: f(W, x), (X3,), order=2, modes=("fwd", "rev"), atol=2e-2,
                rtol=2e-2)


def test_checkpoint_policy_decides_what_the_reads_feed():
    f = lambda W, x: _layered(remat, jnp, W, x)  # noqa: E731
    res = {p: saved_residuals(remat.checkpoint(f, policy=getattr(checkpoint_policies, p)), W,
                              X3) for p in ("nothing_saveable", "dots_saveable",
                                            "everything_saveable")}
    assert [d for _, d in res["nothing_saveable"]] == ["from the argument W",
                                                       "from the argument x"]
    dots = [d for _, d in res["dots_saveable"] if "dot_general" in d]
    assert len(dots) == 2  # one matmul per layer, each reading the Ref
    assert len(res["everything_saveable"]) > len(res["dots_saveable"])
    assert all("Ref" not in str(a) for a, _ in res["everything_saveable"])  # values, not Refs


def test_checkpoint_writes_a_closed_over_ref_once():
    """Inside a checkpoint a write to a Ref closed over runs on the forward pass only (JAX
    replays it when it rematerializes; remat does not), and a read of it sees what the
    function saw, however the Ref changes before the backward pass."""
    acc = remat.new_ref(jnp.ones(3))

    def body(W, x):
        y = jnp.sin(W @ x)
        z = jnp.sin(W @ (y * acc[...]))  # read before the write ...
        acc[...] = acc[...] + lax.stop_gradient(y)
        return z.sum() + jnp.cos(y * acc[1]).sum()  # ... and after it

    def body_no_ref(W, x, a):
        y = jnp.sin(W @ x)
        after = a + lax.stop_gradient(y)
        return jnp.sin(W @ (y * a)).sum() + jnp.cos(y * after[1]).sum()

    for policy, wrap in ((None, lambda g: g), (checkpoint_policies.dots_saveable, lambda g: g),
                         (None, remat.jit)):
        start = np.asarray(acc[...]).copy()
        g = wrap(remat.grad(remat.checkpoint(body, policy=policy), argnums=(0, 1)))(W, X3)
        expected = remat.grad(body_no_ref, argnums=(0, 1))(W, X3, jnp.asarray(start))
        _close(g, expected, 1e-5)
        np.testing.assert_allclose(_contents(acc), start + np.sin(W @ X3), 1e-6)


def test_checkpoint_of_an_impure_function_differentiates_like_the_function():
    """(JAX 0.10 replays the write when it rematerializes, so its backward pass reads the Ref
    written twice: grad(checkpoint(f)) there is twice grad(f) here.)"""
    acc = remat.new_ref(jnp.zeros(2))

    def f(x):
        y = jnp.sin(x)
        acc[...] += lax.stop_gradient(y)
        return (y * acc[...]).sum()

    x = np.array([0.5, 1.0], f32)
    expected = np.sin(x) * np.cos(x)  # d/dx sum(sin x * sin x), the second factor constant
    cf = remat.checkpoint(f)
    for g in (remat.grad(f), remat.grad(cf), remat.grad(remat.jit(cf)),
              remat.jit(remat.grad(cf)), remat.grad(remat.checkpoint(remat.jit(f)))):
        acc[...] = jnp.zeros(2)
        np.testing.assert_allclose(np.asarray(g(x)), expected, 1e-6)
        np.testing.assert_allclose(_contents(acc), np.sin(x), 1e-6)  # written once


# --- vmap ------------------------------------------------------------------------------------


def test_vmap_of_internal_refs_matches_loop_and_jax():
    def program(lib, np_lib, xs, idx):
        def f(x, i):
            r = lib.new_ref(x)
            r[...] = r[...] * r[...]
            r[i] = -1.0
            return r[...]

        def g(x):
            r = lib.new_ref(0.0)  # created from an unbatched value, written with batched ones
            r[...] = x
            return r[...]

        return (lib.vmap(f)(xs, idx), lib.vmap(g)(xs[:, 0]),
                lib.vmap(lib.jit(lambda x: _internal(lib, np_lib, x)))(xs))

    xs = np.arange(12.0, dtype=f32).reshape(4, 3) / 10
    idx = np.array([0, 2, 1, 2])
    ours, theirs = _both(program, xs, idx)
    _close(ours, theirs, 1e-6)
    loop = np.stack([np.asarray(_internal(remat, jnp, x)) for x in xs])
    np.testing.assert_allclose(np.asarray(ours[2]), loop, 1e-6)


def test_vmap_over_ref_arguments():
    def program(lib, np_lib):
        def dist(x, y, out_ref):
            out_ref[...] = np_lib.sum((x - y) ** 2)

        vecs = np_lib.arange(12.0).reshape(3, 4)
        out_ref = lib.new_ref(np_lib.zeros((3, 3)))
        lib.vmap(lib.vmap(dist, (0, None, 0)), (None, 0, 0))(vecs, vecs, out_ref)
        x_ref = lib.new_ref(0.0)
        reads = lib.vmap(lambda x: x + x_ref[...])(np_lib.arange(3.0))
        return out_ref[...], reads

    ours, theirs = _both(program)
    _close(ours, theirs)


def test_vmap_ref_argument_on_a_later_axis():
    out = remat.new_ref(jnp.zeros((4, 3)))
    remat.vmap(lambda r, x: r.__setitem__(Ellipsis, x * 2), in_axes=(1, 0))(
        out, jnp.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(_contents(out), np.arange(12.0).reshape(3, 4).T * 2)


# --- control flow ----------------------------------------------------------------------------


def test_loops_update_a_closed_over_ref():
    def program(lib, np_lib):
        r = lib.new_ref(0)

        def body(_, x):
            r[...] += x
            return (), r[...]

        _, ys = lib.lax.scan(body, (), np_lib.arange(5))
        _, ys_jit = lib.jit(lambda: lib.lax.scan(body, (), np_lib.arange(5)))()
        acc = lib.new_ref(np_lib.zeros(3))

        def floop(i, c):
            acc[i] += c
            return c * 2.0

        a = lib.lax.fori_loop(0, 3, floop, 1.0)
        b = lib.jit(lambda n: lib.lax.fori_loop(0, n, floop, 1.0))(3)  # a while_loop
        w = lib.new_ref(np_lib.zeros(2))

        def wbody(c):
            w[0] += 1.0
            return c + 1

        n = lib.lax.while_loop(lambda c: c < 3, wbody, 0)
        return ys, ys_jit, r[...], a, b, acc[...], n, w[...]

    ours, theirs = _both(program)
    _close(ours, theirs)


def test_cond_branches_write_the_same_ref():
    def program(lib, np_lib, pred):
        x_ref = lib.new_ref(0.0)

        def f(pred):
            lib.lax.cond(pred, lambda: x_ref.__setitem__((), 1.0),
                         lambda: x_ref.__setitem__((), 2.0))

        f(pred)
        first = x_ref[...]
        lib.jit(f)(not pred)
        return first, x_ref[...]

    for pred in (True, False):
        ours, theirs = _both(program, pred)
        _close(ours, theirs)


def test_loop_bodies_with_internal_refs_and_their_gradients():
    def program(lib, np_lib):
        def body_fun(_, x):
            x_mut = lib.new_ref(x)
            x_mut[...] += 2
            return (), x_mut[...]

        def loss(xs):
            def step(c, x):
                r = lib.new_ref(x)
                r[...] = np_lib.sin(r[...]) * c
                return c + r[...], r[...]

            c, ys = lib.lax.scan(step, 1.0, xs)
            return c + ys.sum()

        xs = np_lib.arange(3.0) / 2
        return (lib.lax.scan(body_fun, (), np.arange(5))[1],
                lib.jit(lambda: lib.lax.scan(body_fun, (), np.arange(5)))()[1],
                lib.grad(loss)(xs), lib.jit(lib.grad(loss))(xs))

    ours, theirs = _both(program)
    _close(ours, theirs, 1e-6)


def test_scan_collects_stop_gradient_values_under_grad():
    def program(lib, np_lib):
        acc = lib.new_ref(np_lib.zeros(3))

        def step(c, _):
            acc[0] += lib.lax.stop_gradient(c)
            return np_lib.sin(c), None

        g = lib.grad(lambda x: lib.lax.scan(step, x, None, length=3)[0])(1.0)
        return g, acc[...]

    ours, theirs = _both(program)
    _close(ours, theirs, 1e-6)


# --- transposition ---------------------------------------------------------------------------


def test_linear_transpose_of_a_function_using_refs():
    """A linear function that accumulates with refs transposes like its pure equivalent: a
    read transposes to a scatter-add of the cotangent, an addupdate to a read."""
    def f(x):
        r = remat.new_ref(jnp.zeros(4))
        remat.ref.addupdate(r, jnp.array([0, 2, 2]), x[:3] * 2.0)
        r[1:3] += x[2:4]
        return r[...] - x

    def f_pure(x):
        y = jnp.zeros(4).at[jnp.array([0, 2, 2])].add(x[:3] * 2.0)
        return y.at[1:3].add(x[2:4]) - x

    x = np.arange(4.0, dtype=f32)
    ct = np.array([1.0, -2.0, 3.0, 0.5], f32)
    _close(f(x), f_pure(x))
    _close(remat.linear_transpose(f, x)(ct), remat.linear_transpose(f_pure, x)(ct))
