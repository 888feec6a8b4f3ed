"""The executor's buffer reuse when a primitive's output may be its input (identity primitives
return their operand; reshape, slices, same-dtype conversions may return it or a view of it).
An aliased buffer must never be overwritten while the value it also holds is still needed: in a
jitted program (inputs from NumPy or remat Arrays), in a scan body (the carry), with donated
inputs, and in the backward pass of a checkpoint (whose optimization barrier is an identity)."""

import contextlib

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.ad_checkpoint import checkpoint, checkpoint_name

ALIASING = {
    "checkpoint_name": lambda c: checkpoint_name(c, "b"),
    "stop_gradient": lax.stop_gradient,
    "optimization_barrier": lax.optimization_barrier,
    "reshape_same": lambda c: jnp.reshape(c, c.shape),
    "reshape_view": lambda c: jnp.reshape(jnp.reshape(c, (2, 2)), (4,)),
    "astype_same": lambda c: c.astype(c.dtype),
    "convert_same": lambda c: lax.convert_element_type(c, c.dtype),
    "full_slice": lambda c: c[:],
    "lax_slice": lambda c: lax.slice(c, (0,), (4,)),
    "dynamic_slice": lambda c: lax.dynamic_slice(c, (0,), (4,)),
    "squeeze_expand": lambda c: jnp.squeeze(c[None], 0),
    "transpose_1d": jnp.transpose,
    "broadcast_same": lambda c: jnp.broadcast_to(c, c.shape),
    "asarray": jnp.asarray,
    "real": jnp.real,
    "pad_zero": lambda c: lax.pad(c, 0.0, [(0, 0, 0)]),
    "concatenate_one": lambda c: jnp.concatenate([c]),
    "where_same": lambda c: jnp.where(True, c, c),
}

X = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


def program(alias):
    """The aliased value dies in an elementwise step (an in-place candidate) while the
    original is still read afterwards."""
    return lambda c: (alias(c) * 0.5, c[0] + 0.0, c * 3.0)


def expected(c):
    return c * 0.5, c[0], c * 3.0


def assert_outputs(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize("name", sorted(ALIASING))
@pytest.mark.parametrize("make_input", [np.array, jnp.asarray], ids=["numpy", "array"])
def test_jit_never_overwrites_an_aliased_input(name, make_input):
    x = make_input(X.copy())
    assert_outputs(remat.jit(program(ALIASING[name]))(x), expected(X))
    np.testing.assert_array_equal(np.asarray(x), X)


@pytest.mark.parametrize("name", sorted(ALIASING))
def test_eager_never_overwrites_an_aliased_input(name):
    x = jnp.asarray(X)
    assert_outputs(program(ALIASING[name])(x), expected(X))
    np.testing.assert_array_equal(np.asarray(x), X)


@pytest.mark.parametrize("name", sorted(ALIASING))
@pytest.mark.parametrize("jitted", [False, True])
def test_scan_body_never_overwrites_its_carry(name, jitted):
    alias = ALIASING[name]

    def run(x):
        return lax.scan(lambda c, t: (alias(c) * 0.5, c[0]), x, jnp.zeros(3))

    carry, ys = (remat.jit(run) if jitted else run)(np.array(X))
    np.testing.assert_array_equal(np.asarray(carry), X / 8)
    np.testing.assert_array_equal(np.asarray(ys), [1.0, 0.5, 0.25])


@pytest.mark.parametrize("name", sorted(ALIASING))
def test_donated_input_aliased_by_an_identity(name):
    fun = remat.jit(program(ALIASING[name]), donate_argnums=0)
    assert_outputs(fun(jnp.asarray(X)), expected(X))


@pytest.mark.parametrize("name", sorted(ALIASING))
def test_vmap_of_jit_with_an_alias(name):
    xs = np.stack([X, -X])
    got = remat.vmap(remat.jit(program(ALIASING[name])))(xs)
    want = [np.stack(col) for col in zip(expected(X), expected(-X))]
    assert_outputs(got, want)


def test_a_plan_output_that_is_its_input_is_not_reused():
    """A program that returns its input and a value computed from an identity of it."""
    fun = remat.jit(lambda c: (c, lax.stop_gradient(c) + 1.0, c * 2.0))
    x = np.array(X)
    out = fun(x)
    assert_outputs(out, (X, X + 1, X * 2))
    np.testing.assert_array_equal(x, X)


def test_prevent_cse_barrier_in_the_backward_pass_keeps_the_input():
    """The checkpoint's barrier returns its operand; the cosine of it must not be written
    over the input that ``x * x``'s gradient still reads (issue 12, case 2)."""
    a = np.array([0.3, -1.2, 2.0], np.float32)
    loss = lambda x: jnp.sum(x * x) + jnp.sum(checkpoint(jnp.sin)(x))
    want = 2 * a + np.cos(a)
    np.testing.assert_allclose(remat.jit(remat.grad(loss))(a), want, rtol=1e-6)
    np.testing.assert_allclose(remat.grad(remat.jit(loss))(a), want, rtol=1e-6)


@pytest.mark.parametrize("donate", [False, True])
@pytest.mark.parametrize("name", sorted(ALIASING))
def test_a_numpy_argument_is_read_in_place_and_never_aliased_by_a_result(name, donate):
    """The user's NumPy arguments are read in place (no copy per call), and a result that is,
    or views, one gets its own buffer: the user's array stays writable, and writing it
    changes no result (eagerly, jitted, and jitted with another argument donated)."""
    fn = ALIASING[name]
    seen = []

    def probe(x):
        seen.append(x)
        return np.zeros((), np.float32)

    def body(x, y):
        unchanged = remat.pure_callback(probe, remat.ShapeDtypeStruct((), np.float32), x)
        return fn(x), fn(x) + unchanged, y * 2.0
    jitted = remat.jit(body, donate_argnums=(1,) if donate else ())
    x = np.arange(4.0, dtype=np.float32)
    for run in (lambda: (fn(x),), lambda: jitted(x, jnp.ones(4))):
        outs = run()
        assert x.flags.writeable
        x[0] = 42.0
        for out in outs[:2]:
            if isinstance(out, remat.Array):  # (eager ``x[:]`` is NumPy's own view)
                assert np.asarray(out)[0] == 0.0, name
        x[0] = 0.0
    assert np.shares_memory(np.asarray(seen[-1]), x)  # (read where it is: not copied)


# --- updates in place ------------------------------------------------------------------------

VIEWS_OF_UPDATED = {
    "slice": lambda y: y[1:3],
    "dynamic_slice": lambda y: lax.dynamic_slice(y, (1,), (2,)),
    "reshape": lambda y: jnp.reshape(y, (2, 2))[0],
    "identity": lax.stop_gradient,
}


# The updates the executor writes into their operand (``registry.update_impls``), each as
# ``update(b, v, i)``: ``b`` with ``v`` (shape (1,)) put at row ``i``, and as NumPy computes it.
UPDATES = {
    "dynamic_update_slice": lambda b, v, i: lax.dynamic_update_slice(b, v, (i,)),
    "scatter": lambda b, v, i: b.at[i].set(v[0]),
    "scatter_add": lambda b, v, i: b.at[jnp.stack([i, i])].add(v[0] * 0.5),
}


def updated(name, b, v, i):
    b = np.array(b)
    b[i] = b[i] + v[0] if name == "scatter_add" else v[0]
    return b


@pytest.mark.parametrize("update", sorted(UPDATES))
@pytest.mark.parametrize("name", sorted(VIEWS_OF_UPDATED))
def test_an_update_never_writes_into_a_buffer_a_view_still_reads(name, update):
    """An update writes into its operand where the operand dies there, but not while a view
    of it is read afterwards."""
    def fun(x):
        y = x * 2.0
        view = VIEWS_OF_UPDATED[name](y)
        return UPDATES[update](y, jnp.full(1, 10.0, np.float32), 1), view * 1.0

    z, view = remat.jit(fun)(np.array(X))
    np.testing.assert_array_equal(z, updated(update, X * 2, [10.0], 1))
    np.testing.assert_array_equal(view, VIEWS_OF_UPDATED[name](jnp.asarray(X * 2)))


@pytest.mark.parametrize("update", sorted(UPDATES))
@pytest.mark.parametrize("kernels", ["plans", "python", "native"])
def test_a_carry_updated_in_place_keeps_what_its_step_read(kernels, update, request):
    """A scan body reads its carry, then updates it (the update written in place): what it
    read (as ys, and into the other carry) is the value before the update, in the plans and
    in both loop-kernel tiers."""
    from remat.exec.plan import interpreted

    if kernels == "native":
        request.getfixturevalue("native_loops")

    def run(buf):
        def body(c, i):
            b, total = c
            seen = lax.dynamic_index_in_dim(b, i, 0, keepdims=False)
            return (UPDATES[update](b, -seen[None] * 2.0, i), total + b[0]), seen
        return lax.scan(body, (buf * 1.0, np.float32(0)), np.arange(4, dtype=np.int32))

    x = np.array(X)
    with interpreted() if kernels == "plans" else contextlib.nullcontext():
        (b, total), seen = remat.jit(run)(x)
    want_b = X.copy()
    for i in range(4):
        want_b = updated(update, want_b, -want_b[i:i + 1] * 2, i)
    np.testing.assert_array_equal(b, want_b)
    np.testing.assert_array_equal(total, X[0] + 3 * want_b[0])  # b[0] before step 0, then after
    np.testing.assert_array_equal(seen, X)
    np.testing.assert_array_equal(x, X)


@pytest.mark.parametrize("update", sorted(UPDATES))
@pytest.mark.parametrize("init", ["computed", "zeros"])
@pytest.mark.parametrize("size", [1000, 100_000], ids=["kernel", "plans"])
@pytest.mark.parametrize("loop", ["scan", "while"])
def test_a_carry_updated_in_place_is_never_copied(loop, size, init, update):
    """A loop whose carry is updated at every step (``dynamic_update_slice``, or a scatter as
    ``.at[i].set`` and ``.at[i].add`` write it) holds it once: a carry computed in the caller
    and dying at the loop is written in place, a broadcast zero copied once (a loop kernel's
    copy made before its loop, accounted at its modelled iteration peak)."""
    from remat.memory import peak_memory

    one = jnp.ones(1, np.float32)
    put = UPDATES[update]

    def run(x):
        b = x * 2.0 if init == "computed" else jnp.zeros(size, np.float32)
        if loop == "scan":
            return lax.scan(lambda b, i: (put(b, one * 3.0, i), None),
                            b, np.arange(10, dtype=np.int32))[0]
        return lax.while_loop(lambda s: s[0] < 10,
                              lambda s: (s[0] + 1, put(s[1], one * 3.0, s[0])), (0, b))[1]

    x = np.ones(size, np.float32)
    fun = remat.jit(run)
    out = fun(x)
    want = x * 2.0 if init == "computed" else np.zeros(size, np.float32)
    for i in range(10):
        want = updated(update, want, [3.0], i)
    np.testing.assert_array_equal(out, want)
    assert peak_memory(fun, x) <= x.nbytes + 1024


ROW_UPDATES = {
    "dynamic_update_slice": lambda b, row, i: lax.dynamic_update_index_in_dim(b, row, i, 0),
    "scatter": lambda b, row, i: b.at[i].set(row),
    "scatter_add": lambda b, row, i: b.at[i].add(row),
}


@pytest.mark.parametrize("update", sorted(ROW_UPDATES))
@pytest.mark.parametrize("steps", [0, 3])
def test_a_carry_updated_in_place_keeps_its_layout_on_both_tiers(steps, update):
    """A loop's carry of a transposed layout comes out of the Python loop kernel as out of the
    plans run step by step, whether the loop ran (each update copies the operand's layout) or
    not (the carry as it came): a later sum over it then rounds the same on both tiers. (A
    C-contiguous copy for the kernel left the two a bit apart: campaign seed 9,800,195.)"""
    from remat.exec.plan import generated, interpreted

    put = ROW_UPDATES[update]

    def run(x, n):
        def body(s):
            i, b = s
            return i + 1, put(b, jnp.tanh(b[i]) * 3.0, i)
        return lax.while_loop(lambda s: s[0] < n, body, (0, jnp.transpose(x * 2.0)))[1]

    x = np.random.RandomState(0).randn(7, 5).astype(np.float32)
    fun = remat.jit(run)
    with generated():
        kernel_out = np.asarray(fun(x, steps))
    with interpreted():
        plans_out = np.asarray(fun(x, steps))
    np.testing.assert_array_equal(kernel_out, plans_out)
    assert kernel_out.strides == plans_out.strides
