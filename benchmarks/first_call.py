"""What a user meets first: ``import``, and the first call of a jitted training step (trace,
compile, run) in a fresh process, on remat and on JAX from the same model source.

    python benchmarks/first_call.py [--rounds 5]

Each measurement is its own fresh process (bytecode caches warm, as after any install), the
systems interleaved round by round; the table gives the best of the rounds (the least
disturbed by other tenants) and the ratio remat / JAX. The workloads:

- ``mlp48``: a 48-block residual MLP (width 64, batch 32), a ``checkpoint`` per block,
  ``jit(grad)`` of the mean squared output;
- ``rnn``: ``jit(grad)`` of a tanh RNN (width 64) over 100 steps of ``lax.scan``, its body
  checkpointed.
"""

import argparse
import os
import subprocess
import sys

WORKLOADS = {
    "mlp48": """
def step(ws, x):
    def block(w, h):
        return h + jnp.tanh(h @ w) * 0.1
    for w in ws:
        x = lib.checkpoint(block)(w, x)
    return jnp.mean(x * x)
ws = [np.full((64, 64), 0.01, np.float32) + np.eye(64, dtype=np.float32) * 0.001 * i
      for i in range(48)]
args = (ws, np.ones((32, 64), np.float32))
""",
    "rnn": """
def step(w, xs):
    def body(h, x):
        return jnp.tanh(h @ w + x), None
    h, _ = lib.lax.scan(lib.checkpoint(body), jnp.zeros((32, 64), jnp.float32), xs)
    return jnp.mean(h * h)
args = (np.full((64, 64), 0.01, np.float32), np.ones((100, 32, 64), np.float32))
""",
}

TIMED = """
import time
start = time.perf_counter()
import {module} as lib
import {module}.numpy as jnp
imported = time.perf_counter()
import numpy as np
{workload}
grad_step = lib.jit(lib.grad(step))
called = time.perf_counter()
out = grad_step(*args)
lib.tree_util.tree_map(lambda a: a.block_until_ready(), out)
done = time.perf_counter()
print(imported - start, done - called)
"""


def measure(module, workload):
    """(import seconds, first-call seconds) in a fresh process."""
    code = TIMED.format(module=module, workload=WORKLOADS[workload])
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout.split()
    return float(out[0]), float(out[1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    systems = ["remat", "jax"]
    for module in systems:  # bytecode written before any round is timed
        measure(module, "rnn")
    best = {}
    for _ in range(args.rounds):
        for workload in WORKLOADS:
            for module in systems:
                imported, first = measure(module, workload)
                for key, value in (("import", imported), (workload, first)):
                    best[key, module] = min(best.get((key, module), float("inf")), value)
    print(f"{'':24s}{'remat ms':>10s}{'JAX ms':>10s}{'remat/JAX':>11s}")
    for key in ("import", *WORKLOADS):
        ours, theirs = best[key, "remat"] * 1e3, best[key, "jax"] * 1e3
        label = "import" if key == "import" else f"first call, {key}"
        print(f"{label:24s}{ours:10.1f}{theirs:10.1f}{ours / theirs:11.2f}")


if __name__ == "__main__":
    main()
