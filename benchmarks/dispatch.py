"""Dispatch overheads: eager per-primitive cost, grad call overhead, and jit trace time of a
1,000-equation function — remat and, when installed, JAX side by side in the same run.

    python benchmarks/dispatch.py [--repeat N]
"""

import argparse

import numpy as np
from harness import compare


def _workloads(jax, jnp):
    x = jnp.asarray(np.linspace(0.1, 1.0, 8, dtype=np.float32))
    s = jnp.asarray(np.float32(0.5))

    def eager_op():
        return jnp.sin(x)

    def eager_binop():
        return x * s

    loss = lambda w: jnp.sum(jnp.tanh(w * x) * x)
    grad_fn = jax.grad(loss)

    def grad_call():
        return grad_fn(s)

    def trace_1000():
        def long_fn(v):  # a fresh function each time, so no trace cache can answer
            for _ in range(500):
                v = jnp.sin(v) * 1.01
            return v

        return jax.make_jaxpr(long_fn)(x)

    return {
        "eager sin, f32[8] (us/op)": (eager_op, 1e6, 2000),
        "eager mul, f32[8] (us/op)": (eager_binop, 1e6, 2000),
        "grad of a 4-op loss (us/call)": (grad_call, 1e6, 200),
        "make_jaxpr of 1,000 equations (ms)": (trace_1000, 1e3, 3),
    }


def run(repeat):
    compare(_workloads, repeat, label_width=40)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    run(parser.parse_args().repeat)
