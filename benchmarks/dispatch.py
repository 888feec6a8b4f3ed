"""Dispatch overheads: eager per-primitive cost, grad call overhead, and jit trace time of a
1,000-equation function — remat and, when installed, JAX side by side in the same run.

    python benchmarks/dispatch.py [--repeat N]
"""

import argparse
import statistics
import time

import numpy as np


def _median_time(fn, repeat, number):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


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
    import remat
    import remat.numpy as rnp

    systems = {"remat": (remat, rnp)}
    try:
        import jax
        import jax.numpy as jjnp

        jax.config.update("jax_platforms", "cpu")
        systems["jax"] = (jax, jjnp)
    except ImportError:
        pass
    results = {}
    for name, (lib, np_mod) in systems.items():
        for label, (fn, scale, number) in _workloads(lib, np_mod).items():
            fn()  # warm up (traces, caches)
            if name == "jax":
                out = fn()
                getattr(out, "block_until_ready", lambda: None)()
            results[(label, name)] = _median_time(fn, repeat, number) * scale
    labels = list(dict.fromkeys(label for label, _ in results))
    header = f"{'workload':40s} {'remat':>10s}" + (f" {'jax':>10s} {'remat/jax':>10s}"
                                                   if "jax" in systems else "")
    print(header)
    print("-" * len(header))
    for label in labels:
        ours = results[(label, "remat")]
        line = f"{label:40s} {ours:10.2f}"
        if "jax" in systems:
            theirs = results[(label, "jax")]
            line += f" {theirs:10.2f} {ours / theirs:10.2f}"
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    run(parser.parse_args().repeat)
