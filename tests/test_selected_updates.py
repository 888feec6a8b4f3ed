"""A ``select_n`` of an array and its update is run as one update that selects within the
updated part (``passes.fold_selected_updates``), so the update writes in place: a vmapped
while loop with a batched predicate ends every step so. And the native loop tier writes the
point gathers and scatters such loops make, whatever the carry's size."""

import numpy as np
import pytest

import remat
import remat.numpy as jnp
from remat import lax
from remat.exec import optimize_jaxpr
from remat.memory import peak_memory

UPDATES = {
    "set": lambda x, i, u: x.at[i].set(u),
    "add": lambda x, i, u: x.at[i].add(u),
    "sub": lambda x, i, u: lax.scatter_sub(x, jnp.reshape(i, (1,)), u,
                                           lax.ScatterDimensionNumbers((), (0,), (0,))),
    "mul": lambda x, i, u: x.at[i].multiply(u),
    "min": lambda x, i, u: x.at[i].min(u),
    "max": lambda x, i, u: x.at[i].max(u),
    "clip": lambda x, i, u: x.at[i].set(u, mode="clip"),
    "update_slice": lambda x, i, u: lax.dynamic_update_index_in_dim(x, u, i, 0),
}
# values with -0.0, a nan and infinities: selecting the kept value must keep each bit
X = np.array([[-0.0, 1.5, np.nan, -2.0, np.inf], [3.0, -np.inf, 0.0, 7.0, -1.0]], np.float32)


def _selects(fn, *args):
    """The ``select_n`` equations of ``fn``'s optimized jaxpr, nested jaxprs included."""
    found = []

    def walk(jaxpr):
        for e in jaxpr.eqns:
            if e.primitive.name == "select_n":
                found.append(e)
            for p in e.params.values():
                inner = getattr(p, "jaxpr", None)
                if inner is not None:
                    walk(optimize_jaxpr(getattr(inner, "jaxpr", inner)))
    walk(optimize_jaxpr(remat.make_jaxpr(fn)(*args).jaxpr))
    return found


def _same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("kind", sorted(UPDATES))
@pytest.mark.parametrize("update_first", [False, True])
@pytest.mark.parametrize("index", [1, 4, 6, -1])  # 6: out of bounds (dropped, or clipped)
def test_a_select_of_an_update_is_the_update_of_a_select(kind, update_first, index):
    """Per row, a batched predicate picks the update or the row as it was; eager (each
    primitive on its own) and jitted (the folded form) agree bit for bit, and the jitted form
    selects only the updated elements."""
    update = UPDATES[kind]

    def row(x, p):
        new = update(x, index, jnp.float32(-3.0))
        return jnp.where(p, x, new) if update_first else jnp.where(p, new, x)

    f = remat.vmap(row)
    p = np.array([True, False])
    want = f(X, p)
    _same_bits(remat.jit(f)(X, p), want)
    assert all(e.outvars[0].aval.shape != X.shape for e in _selects(f, X, p))


def test_a_scalar_predicate_and_duplicate_indices():
    """A scalar predicate (no vmap), and a scatter whose indices repeat: the last of the
    duplicates wins, or all of them add, when the predicate holds, and nothing changes when it
    does not."""
    idx = np.array([1, 3, 1])
    u = np.array([5.0, 6.0, -7.0], np.float32)

    def f(x, p):
        x = jnp.asarray(x)
        return (jnp.where(p, x.at[idx].set(u), x), jnp.where(p, x.at[idx].add(u), x))

    for p in (True, False):
        want = f(X[0], p)
        for g, w in zip(remat.jit(f)(X[0], p), want):
            _same_bits(g, w)
    assert all(e.outvars[0].aval.shape != X[0].shape for e in _selects(f, X[0], True))


def test_a_predicate_along_the_updated_axis_is_left_alone():
    """A predicate that varies along the axis the update indexes cannot be carried to the
    update: the select stays, and the values are right."""
    def f(x, p):
        return jnp.where(p, jnp.asarray(x).at[2].set(9.0), x)

    p = np.array([True, False, True, False, True])
    _same_bits(remat.jit(f)(X[0], p), f(X[0], p))
    assert any(e.outvars[0].aval.shape == X[0].shape for e in _selects(f, X[0], p))


def _vmapped_while(n, kind):
    """equinox's ``test_speed_while``: each member sets one element a step until its own
    counter reaches the size; the counter is batched, so is the loop's predicate."""
    def f(step, xs):
        def body(carry):
            i, buf = carry
            return i + 1, UPDATES[kind](buf, i, jnp.float32(1.0) + buf[i % n])
        return lax.while_loop(lambda c: c[0] < c[1].size, body, (step, xs))
    return remat.jit(remat.vmap(f))


@pytest.mark.parametrize("kind", ["set", "add", "update_slice"])
def test_a_vmapped_while_loop_updates_its_carry_in_place(kind):
    """The loop's peak holds the carry once, and a member that starts further on stops
    sooner, its rows untouched by the others' later steps."""
    n = 4096
    f = _vmapped_while(n, kind)
    steps, xs = np.array([n - 200, n - 3]), np.zeros((2, n), np.float32)
    count, out = f(steps, xs)
    np.testing.assert_array_equal(count, [n, n])
    want = np.zeros((2, n), np.float32)
    want[0, n - 200:], want[1, n - 3:] = 1.0, 1.0
    np.testing.assert_array_equal(out, want)
    assert peak_memory(f, steps, xs) <= xs.nbytes + 1024


@pytest.mark.parametrize("kind", ["set", "add", "update_slice"])
def test_a_large_carry_the_body_only_addresses_runs_natively(native_loops, kind):
    """A 100,000-element carry (above a native body's size for its values) whose every use is
    the element read and the element written: the loop compiles, and gives the Python tier's
    values (the members start near the end: the Python tier takes 200 us a step)."""
    n = 100_000
    f = _vmapped_while(n, kind)
    args = np.array([n - 60, n - 5]), np.zeros((2, n), np.float32)
    with remat.config.override("remat_native_loops", False):
        want = f(*args)
    got = f(*args)
    assert "ready" in [loop.state for table in native_loops._loops.values()
                       for loop in table.values() if loop.source and n in loop.values]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert np.asarray(got[1])[:, n - 60:].any()


def test_loops_over_buffers_of_other_sizes_share_one_native_kernel(native_loops):
    """The buffer's size reaches the kernel as its loop's constant (``c[1].size``) and its
    bounds: both are read at run time, not written into the source, so loops over buffers of
    another size run the kernel compiled once (equinox's ``test_speed_buffer_while`` times
    seven sizes)."""
    sources = {}
    for n in (300, 500):
        before = {id(loop) for table in native_loops._loops.values() for loop in table.values()}
        f = _vmapped_while(n, "set")
        args = np.array([n - 60, n - 5]), np.zeros((2, n), np.float32)
        with remat.config.override("remat_native_loops", False):
            want = f(*args)
        got = f(*args)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        (loop,) = [loop for table in native_loops._loops.values() for loop in table.values()
                   if id(loop) not in before and loop.source]
        assert loop.state == "ready" and n in loop.values
        sources[n] = loop.source
    assert sources[300] == sources[500]


def test_a_loop_of_a_source_compiled_here_is_native_from_its_first_call(native_loops):
    """A loop over a buffer of another size (a new trace) whose kernel this process has
    compiled already runs it at once: no Python-tier first call, no load from the cache."""
    def added(before):
        return [loop for table in native_loops._loops.values() for loop in table.values()
                if id(loop) not in before and loop.source]

    def loops():
        return {id(loop) for table in native_loops._loops.values() for loop in table.values()}

    before = loops()
    _vmapped_while(700, "add")(np.array([600, 690]), np.zeros((2, 700), np.float32))
    (first,) = added(before)
    assert first.state == "ready"
    before = loops()
    n = 900
    f = _vmapped_while(n, "add")
    args = np.array([n - 60, n - 5]), np.zeros((2, n), np.float32)
    with remat.config.override("remat_native_loops", False):
        want = f(*args)
    (loop,) = added(before)  # (made by the Python tier's run: ready before the native one)
    assert loop.source == first.source and loop.state == "ready"
    got = f(*args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("mode", [None, "clip", "drop", "fill"])
def test_point_gathers_and_scatters_on_both_tiers(native_loops, mode):
    """Reads and writes of single rows (a window along the other axis) at indices that go out
    of bounds and repeat, every combining scatter: the native tier's loops agree with the
    Python tier's impls exactly."""
    idx = np.array([0, 3, 7, 3, -1, 9])  # 7 and 9 out of bounds, 3 twice

    def body(c, k):
        at = (idx + k) % 11 - 1
        rows = c.at[at].get(mode=mode, fill_value=0.5 if mode == "fill" else None)
        new = c.at[at].set(rows * 0.5 + 1.0, mode=mode)
        new = new.at[at].add(0.25, mode=mode).at[at].multiply(1.5, mode=mode)
        new = new.at[at].min(2.0, mode=mode).at[at].max(-2.0, mode=mode)
        return new, rows.sum()

    run = remat.jit(lambda c: lax.scan(body, c, np.arange(5)))
    got, want, states = _on_both_tiers(native_loops, run, np.linspace(-1.0, 1.0, 24)
                                       .reshape(8, 3).astype(np.float32))
    assert "ready" in states
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _on_both_tiers(native_loops, run, *args):
    """``run(*args)`` on the native tier, on the Python tier, and the loops' states."""
    with remat.config.override("remat_native_loops", False):
        want = run(*args)
    got = run(*args)
    return got, want, [loop.state for table in native_loops._loops.values()
                       for loop in table.values()]


@pytest.mark.parametrize("update", ["literal", "computed"])
def test_a_scatter_of_one_rank_0_update_in_a_native_loop(native_loops, update):
    """A scatter whose update is a single element (rank 0: a scalar in a kernel's body, as
    equinox's checkpointed while loop marks its slots) runs natively, as the impl does."""
    dnums = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                        scatter_dims_to_operand_dims=(0,))

    def body(c, k):
        value = np.float32(-1.0) if update == "literal" else c[(k + 1) % 6] * 2.0
        return lax.scatter(c, k[None], value, dnums), c[k]

    run = remat.jit(lambda c: lax.scan(body, c, np.arange(6, dtype=np.int32)))
    got, want, states = _on_both_tiers(native_loops, run,
                                       np.linspace(-1.0, 1.0, 6).astype(np.float32))
    assert "ready" in states
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
