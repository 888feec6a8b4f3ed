"""A long-running process does not accumulate (issue 34.5): the plans, loop kernels and
derived jaxprs remat caches live only as long as the function they were made for."""

import gc

import numpy as np

import remat
import remat.numpy as jnp
from remat import core, lax
from remat.exec import plan as exec_plan


def _train_once(scale):
    def loss(w, xs):
        def body(c, x):
            return jnp.tanh(c @ w + x), jnp.sum(c)

        c, ys = lax.scan(remat.checkpoint(body), xs[0], xs)
        return jnp.sum(c) + jnp.sum(ys) * scale

    w, xs = np.eye(4, dtype=np.float32) * 0.5, np.ones((3, 4), np.float32)
    remat.jit(remat.grad(loss))(w, xs)
    remat.grad(loss)(w, xs)
    remat.vmap(remat.jit(loss), (None, 0))(w, np.ones((2, 3, 4), np.float32))


def test_plans_die_with_their_functions():
    _train_once(0.0)
    gc.collect()
    plans, objects = len(exec_plan._plans), len(gc.get_objects())
    for i in range(20):
        _train_once(float(i))
    gc.collect()
    assert len(exec_plan._plans) <= plans
    assert len(gc.get_objects()) < objects + 2000  # (not 20 functions' worth: ~16,000)


def test_a_memoized_result_that_is_its_key_does_not_keep_it():
    """A memoized transformation that returns its jaxpr unchanged (alone or in a tuple) must
    not hold its own weak key: the entry would never be freed."""

    @core.memoize_on_jaxpr
    def unchanged(closed, n):
        return closed, [n]

    closed = remat.make_jaxpr(lambda x: x * 2.0)(1.0)
    assert unchanged(closed, 1) == (closed, [1])
    assert unchanged(closed, 1)[0] is closed
    alive = [closed.jaxpr]
    del closed
    gc.collect()
    assert gc.get_referrers(alive[0]) == [alive]
