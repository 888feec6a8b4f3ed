"""Random programs over process collectives, in two forms built from one spec:

- ``distributed(spec)``: what each process runs, on its own value ``v`` of shape (P, N), with
  ``remat.lax.process_*`` collectives (and checkpoint / jit placed as the spec says);
- ``global_(spec, np_)``: the same computation in one process on the stacked values of every
  process ``V`` of shape (P, P, N), collectives written as sums, maxima and transposes over the
  leading axis, for any NumPy-like module (``remat.numpy`` or ``jax.numpy``).

Each process's local loss is ``sum(v * c)``; the gradient a process computes of its own loss
(collectives transposing to collectives) is its slice of the gradient of the sum of all
processes' losses, which the global form computes directly.
"""

import numpy as np

import remat
import remat.numpy as jnp
from remat import checkpoint_policies, lax

P, N = 2, 3
OPS = ("sin", "tanh", "scale", "square", "allreduce_sum", "allreduce_max", "allreduce_min",
       "alltoall", "allgather_mean", "reduce_scatter")
COLLECTIVES = OPS[4:]


def generate(seed, length=5):
    """A spec: a list of ops (at least two collectives) and checkpoint / jit placement."""
    rng = np.random.default_rng(seed)
    ops = list(rng.choice(OPS, size=length))
    while sum(op in COLLECTIVES for op in ops) < 2:
        ops[int(rng.integers(length))] = str(rng.choice(COLLECTIVES))
    cut = sorted(rng.choice(np.arange(1, length), size=2, replace=False))
    return {"ops": [str(o) for o in ops], "checkpoint": (int(cut[0]), int(cut[1])),
            "policy": str(rng.choice(["nothing_saveable", "everything_saveable"])),
            "jit": bool(rng.integers(2)), "seed": seed}


def inputs(seed):
    """Every process's input, scale and loss weights: (X, W, C), each (P, P, N) float32."""
    rng = np.random.default_rng(1000 + seed)
    return tuple(rng.normal(size=(P, P, N)).astype(np.float32) for _ in range(3))


def _dist_op(op, v, w):
    if op == "sin":
        return jnp.sin(v)
    if op == "tanh":
        return jnp.tanh(v)
    if op == "scale":
        return v * w
    if op == "square":
        return v * v * 0.5
    if op.startswith("allreduce_"):
        return lax.process_allreduce(v, op[len("allreduce_"):])
    if op == "alltoall":
        return lax.process_alltoall(v)
    if op == "allgather_mean":
        return v * lax.process_allgather(v).mean(0)
    if op == "reduce_scatter":
        return v * 0.5 + lax.process_reduce_scatter(v)[None, :]
    raise ValueError(op)


def _global_op(op, V, W, np_):
    if op == "sin":
        return np_.sin(V)
    if op == "tanh":
        return np_.tanh(V)
    if op == "scale":
        return V * W
    if op == "square":
        return V * V * 0.5
    if op == "allreduce_sum":
        return np_.broadcast_to(V.sum(0), V.shape)
    if op == "allreduce_max":
        return np_.broadcast_to(V.max(0), V.shape)
    if op == "allreduce_min":
        return np_.broadcast_to(V.min(0), V.shape)
    if op == "alltoall":
        return np_.swapaxes(V, 0, 1)
    if op == "allgather_mean":
        return V * V.mean(0)
    if op == "reduce_scatter":
        return V * 0.5 + V.sum(0)[:, None, :]
    raise ValueError(op)


def distributed(spec, w, c):
    """The per-process loss ``v -> sum(f(v) * c)`` with the spec's checkpoint and jit."""
    ops = spec["ops"]
    lo, hi = spec["checkpoint"]
    policy = getattr(checkpoint_policies, spec["policy"])

    def segment(v, part):
        for op in part:
            v = _dist_op(op, v, w)
        return v

    middle = remat.checkpoint(lambda v: segment(v, ops[lo:hi]), policy=policy)

    def loss(v):
        v = segment(v, ops[:lo])
        v = middle(v)
        v = segment(v, ops[hi:])
        return (v * c).sum()

    return remat.jit(loss) if spec["jit"] else loss


def global_(spec, W, C, np_):
    """Every process's loss at once: ``V -> (P,)`` losses."""

    def losses(V):
        for op in spec["ops"]:
            V = _global_op(op, V, W, np_)
        return (V * C).sum(axis=(1, 2))

    return losses
