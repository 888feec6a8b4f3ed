"""Eager ``grad`` per call (no ``jit``): the gradient of a small MLP's loss, taken afresh at
every call, on remat, JAX and PyTorch eager (each when installed), from one model source for
remat and JAX and the same model written for PyTorch, interleaved round by round in one
process.

    python benchmarks/eager_grad.py [--rounds 5] [--calls 50] [--width 64] [--batch 32]

The table gives each system's best round's mean time per call, and remat's ratio to the
others. Eager calls are dominated by dispatch: the arrays are small.
"""

import argparse
import time

import numpy as np


def _data(width, batch, layers):
    rng = np.random.default_rng(0)
    params = [(rng.normal(0, width ** -0.5, (width, width)).astype(np.float32),
               np.zeros(width, np.float32)) for _ in range(layers)]
    x = rng.normal(size=(batch, width)).astype(np.float32)
    y = rng.normal(size=(batch, width)).astype(np.float32)
    return params, x, y


def _jax_like(lib, jnp, params, x, y):
    """The step on remat or JAX: ``grad`` of the loss, traced at every call."""
    def loss(params, x, y):
        h = x
        for w, b in params:
            h = jnp.tanh(h @ w + b)
        return jnp.mean((h - y) ** 2)

    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in params]
    x, y = jnp.asarray(x), jnp.asarray(y)

    def step():
        grads = lib.grad(loss)(params, x, y)
        return [np.asarray(g) for pair in grads for g in pair]
    return step


def _torch(params, x, y):
    import torch

    torch.set_num_threads(2)
    params = [(torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True))
              for w, b in params]
    x, y = torch.tensor(x), torch.tensor(y)
    flat = [p for pair in params for p in pair]

    def step():
        h = x
        for w, b in params:
            h = torch.tanh(h @ w + b)
        loss = torch.mean((h - y) ** 2)
        return [g.numpy() for g in torch.autograd.grad(loss, flat)]
    return step


def _systems(params, x, y):
    import remat
    import remat.numpy as rnp

    found = {"remat": _jax_like(remat, rnp, params, x, y)}
    try:
        import jax
        import jax.numpy as jjnp

        jax.config.update("jax_platforms", "cpu")
        found["jax"] = _jax_like(jax, jjnp, params, x, y)
    except ImportError:
        pass
    try:
        found["torch"] = _torch(params, x, y)
    except ImportError:
        pass
    return found


def run(rounds, calls, width, batch, layers):
    params, x, y = _data(width, batch, layers)
    steps = _systems(params, x, y)
    outs = {name: step() for name, step in steps.items()}  # (warm up; and the same gradient)
    for name, grads in outs.items():
        for g, want in zip(grads, outs["remat"]):
            np.testing.assert_allclose(g, want, rtol=2e-4, atol=2e-6, err_msg=name)
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(calls):
                step()
            best[name] = min(best[name], (time.perf_counter() - start) / calls)
    print(f"eager grad of a {layers}-layer tanh MLP (width {width}, batch {batch}), "
          f"best of {rounds} rounds of {calls} calls")
    for name, t in best.items():
        ratio = "" if name == "remat" else f"   remat / {name} = {best['remat'] / t:.2f}"
        print(f"{name:6s} {t * 1e6:9.1f} us/call{ratio}")
    return best


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--layers", type=int, default=3)
    a = parser.parse_args()
    run(a.rounds, a.calls, a.width, a.batch, a.layers)
