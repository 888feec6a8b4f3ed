"""Eager overhead of checkpoint: (a) ``vjp`` of 128 composed ``sin``s with a checkpoint in the
middle, per call (also with ``static_argnums``); (b) the time to trace
``make_jaxpr(value_and_grad(vmap(checkpoint(sim))))`` for a 100-step unrolled Lorenz-63
simulation on an (8, 3) batch. remat and, when installed, JAX side by side in one run.

    python benchmarks/remat_overhead.py [--repeat N]
"""

import argparse
import functools

import numpy as np
from harness import compare


def workloads(lib, jnp):
    def chain(x):
        for _ in range(64):
            x = jnp.sin(x)
        x = lib.checkpoint(jnp.sin)(x)
        for _ in range(63):
            x = jnp.sin(x)
        return x

    @functools.partial(lib.checkpoint, static_argnums=(1,))
    def middle(x, n):
        for _ in range(n):
            x = jnp.sin(x)
        return x

    def chain_static(x):
        for _ in range(63):
            x = jnp.sin(x)
        x = middle(x, 2)
        for _ in range(63):
            x = jnp.sin(x)
        return x

    x = jnp.asarray(np.float32(0.5))

    def vjp_call(fn):
        def run():
            out, pullback = lib.vjp(fn, x)
            return pullback(jnp.ones_like(out))
        return run

    def lorenz_step(state, dt=0.01, sigma=10.0, rho=28.0, beta=8.0 / 3.0):
        x_, y_, z_ = state[0], state[1], state[2]
        d = jnp.stack([sigma * (y_ - x_), x_ * (rho - z_) - y_, x_ * y_ - beta * z_])
        return state + dt * d

    def sim(state):
        for _ in range(100):
            state = lorenz_step(state)
        return jnp.sum(state ** 2)

    batch = jnp.asarray(np.ones((8, 3), np.float32))

    def trace_lorenz():
        fresh = lambda s: sim(s)  # a new function each time: no trace cache can answer
        loss = lambda b: jnp.sum(lib.vmap(lib.checkpoint(fresh))(b))
        return lib.make_jaxpr(lib.value_and_grad(loss))(batch)

    return {
        "vjp, 128 sins, checkpoint in the middle (us)": (vjp_call(chain), 1e6, 20),
        "same with static_argnums (us)": (vjp_call(chain_static), 1e6, 20),
        "trace value_and_grad(vmap(checkpoint(lorenz))) (ms)": (trace_lorenz, 1e3, 2),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    compare(workloads, parser.parse_args().repeat)


if __name__ == "__main__":
    main()
