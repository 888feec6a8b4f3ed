"""jit's trace cache is keyed on the function (held weakly) and its static configuration, as
JAX's: ``jit(f)(x); jit(f)(y)`` traces ``f`` once; ``clear_caches`` empties every cache."""

import functools
import gc
import weakref

import numpy as np

import remat
import remat.numpy as jnp
from remat import dtypes
from remat.exec import plan as exec_plan


def counting():
    calls = []

    def f(x, n=1):
        calls.append(n)  # a side effect: runs once per trace
        return x * n

    return f, calls


def test_jit_of_the_same_function_twice_traces_once():
    f, calls = counting()
    assert float(remat.jit(f)(np.float32(2))) == 2.0
    assert float(remat.jit(f)(np.float32(3))) == 3.0
    assert calls == [1]
    a, b = remat.jit(f), remat.jit(f)
    assert a.cache is b.cache and a.trace_count == b.trace_count == 1


def test_decorated_and_wrapped_calls_share_the_trace():
    f, calls = counting()
    jitted = remat.jit(f)
    for x in range(3):
        jitted(np.float32(x))
        remat.jit(f)(np.float32(x))
    assert calls == [1]
    remat.jit(f)(np.ones(2, np.float32))  # a new signature traces again
    assert calls == [1, 1]


def test_static_configuration_is_part_of_the_key():
    f, calls = counting()
    remat.jit(f)(np.float32(1), 2)  # n traced
    remat.jit(f, static_argnums=1)(np.float32(1), 2)  # n static: another configuration
    remat.jit(f, static_argnums=1)(np.float32(1), 2)
    remat.jit(f, static_argnames="n")(np.float32(1), n=2)  # the same static n, by name
    assert len(calls) == 3
    remat.jit(f, donate_argnums=0)(jnp.ones(()))  # donation: another configuration
    assert len(calls) == 4
    remat.jit(f, static_argnums=1)(np.float32(1), 3)  # another static value
    assert len(calls) == 5


def test_the_cache_does_not_keep_functions_alive():
    f, calls = counting()
    out = remat.jit(f)(np.float32(1))
    ref = weakref.ref(f)
    del f
    gc.collect()
    assert ref() is None and float(out) == 1.0


def test_unhashable_and_partial_callables_still_work():
    class Callable:
        __hash__ = None  # unhashable: the wrapper keeps its own cache

        def __init__(self):
            self.calls = 0

        def __call__(self, x):
            self.calls += 1
            return x + 1

    c = Callable()
    g = remat.jit(c)
    assert float(g(np.float32(1))) == 2.0 and float(g(np.float32(2))) == 3.0
    assert c.calls == 1
    f, calls = counting()
    p = functools.partial(f, n=3)
    remat.jit(p)(np.float32(1))
    remat.jit(p)(np.float32(2))
    assert calls == [3]  # the same partial object: one trace


def test_config_changes_retrace():
    f, calls = counting()
    remat.jit(f)(1.0)
    with remat.enable_x64(True):
        remat.jit(f)(1.0)
    assert len(calls) == 2


def test_clear_caches_empties_every_cache():
    f, calls = counting()
    remat.jit(f)(np.float32(1))
    body_calls = []

    def body(x):
        body_calls.append(1)
        return jnp.sin(x)

    checkpointed = remat.checkpoint(body)
    checkpointed(np.float32(1))
    checkpointed(np.float32(2))
    assert body_calls == [1]
    dtypes.result_type(np.float32, np.int32)
    assert len(exec_plan._plans) > 0
    remat.clear_caches()
    assert len(exec_plan._plans) == 0
    assert dtypes._result_type_cached.cache_info().currsize == 0
    remat.jit(f)(np.float32(1))
    assert calls == [1, 1]  # traced again
    checkpointed(np.float32(1))
    assert body_calls == [1, 1]


def test_tracing_and_planning_defer_full_collections_and_restore_the_thresholds():
    """A first call's tracing and plan building allocate thousands of objects: full
    collections (which walk the whole heap, a fifth of a 48-block model's first call) wait
    until they end, young ones still run, and the user's thresholds come back."""
    from remat.runtime import collection

    seen = []

    def f(x):
        seen.append(gc.get_threshold())
        return jnp.sin(x) * 2

    before = gc.get_threshold()
    remat.jit(f)(np.float32(1.0))
    assert seen == [(*before[:2], collection._NEVER)] and gc.get_threshold() == before
    gc.set_threshold(500, 7, 9)  # the user's own thresholds are the ones restored
    try:
        remat.jit(lambda x: f(x) + 1)(np.float32(1.0))
        assert seen[-1] == (500, 7, collection._NEVER) and gc.get_threshold() == (500, 7, 9)
    finally:
        gc.set_threshold(*before)
    with collection.young_only():  # reentrant: the outer block holds
        with collection.young_only():
            pass
        assert gc.get_threshold()[2] == collection._NEVER
    assert gc.get_threshold() == before


def test_memory_measurements_pause_the_collector_reentrantly():
    from remat.runtime import collection

    assert gc.isenabled()
    with collection.paused():
        with collection.paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collection.paused():
            pass
        assert not gc.isenabled()  # (the user's choice stands)
    finally:
        gc.enable()
