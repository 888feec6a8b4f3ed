"""The NumPy floors of ``benchmarks/loops.py`` compute what the workloads compute: a floor
that skipped work would make the Python tier look slow against it."""

import sys
from pathlib import Path

import numpy as np
import pytest

import remat
import remat.numpy as jnp

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))

import loops  # noqa: E402
import loops_numpy  # noqa: E402


def _assert_close(floor, ours):
    floor, ours = remat.tree_util.tree_leaves(floor), remat.tree_util.tree_leaves(ours)
    assert len(floor) == len(ours)
    for a, b in zip(floor, ours):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        # (against the array's scale: float32 rounding, in another order, grows through a
        # chaotic ODE's steps; work left out would be off by the whole)
        assert np.max(np.abs(a - b)) <= 2e-5 * np.max(np.abs(b)), np.max(np.abs(a - b))


@pytest.mark.parametrize("checkpointed", [False, True])
def test_lorenz96_floor(checkpointed):
    fn, args = loops.lorenz96(remat, jnp, steps=60, checkpointed=checkpointed)
    _assert_close(loops_numpy.lorenz96(steps=60, checkpointed=checkpointed)(*args), fn(*args))


@pytest.mark.parametrize("checkpointed", [False, True])
@pytest.mark.parametrize("cell", ["tanh", "gru"])
def test_rnn_floor(cell, checkpointed):
    fn, args = loops.rnn(remat, jnp, cell, t=12, b=4, h=16, i=8, checkpointed=checkpointed)
    _assert_close(loops_numpy.rnn(cell, checkpointed)(*args), fn(*args))


def test_mlp_floor():
    fn, args = loops.mlp_sgd(remat, jnp, steps=3, batch=16)
    before = [(w.copy(), b.copy()) for w, b in args[0]]
    _assert_close(loops_numpy.mlp_sgd(3)(*args), fn(*args))
    _assert_close(args[0], before)  # (the floor updates copies of the parameters)
