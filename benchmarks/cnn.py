"""A small CNN's training step, ``jit(value_and_grad)``, on remat and on JAX from the same model
source, each system in a fresh process of its own (as a user runs it: no allocator tuning but
remat's own), the systems interleaved round by round.

    python benchmarks/cnn.py [--rounds 3] [--seconds 8]

The model: CIFAR-sized NHWC input (batch 64, 32x32x3), three 3x3 ``SAME`` convolutions
(32, 32, 64 channels) with ReLU, a 2x2 average pool after the second and the third, a dense
layer to 10 classes and a softmax cross-entropy. Each process steps for ``--seconds`` after
its first call; the table gives, per system, the best round's median step (the round least
disturbed by other tenants), and the ratio remat / JAX.
"""

import argparse
import os
import subprocess
import sys

MODEL = """
import sys, time
import numpy as np
import {module} as lib
import {module}.numpy as jnp
from {module} import lax


def conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def pool(x):
    b, h, w, c = x.shape
    return x.reshape(b, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))


def loss(params, x, y):
    w1, w2, w3, wd = params
    h = jnp.maximum(conv(x, w1), 0.0)
    h = pool(jnp.maximum(conv(h, w2), 0.0))
    h = pool(jnp.maximum(conv(h, w3), 0.0))
    logits = h.reshape(h.shape[0], -1) @ wd
    logits = logits - jnp.max(logits, axis=1, keepdims=True)
    return jnp.mean(jnp.log(jnp.sum(jnp.exp(logits), axis=1)) - jnp.sum(logits * y, axis=1))


rng = np.random.default_rng(0)
params = [rng.standard_normal(s).astype(np.float32) * 0.1
          for s in [(3, 3, 3, 32), (3, 3, 32, 32), (3, 3, 32, 64), (8 * 8 * 64, 10)]]
x = rng.standard_normal((64, 32, 32, 3)).astype(np.float32)
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
step = lib.jit(lib.value_and_grad(loss))
lib.block_until_ready(step(params, x, y))
times = []
end = time.perf_counter() + {seconds}
while time.perf_counter() < end:
    start = time.perf_counter()
    lib.block_until_ready(step(params, x, y))
    times.append(time.perf_counter() - start)
print(sorted(times)[len(times) // 2])
"""


def measure(module, seconds):
    """The median step, in seconds, of a fresh process."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", MODEL.format(module=module, seconds=seconds)],
                         capture_output=True, text=True, env=env, check=True).stdout.split()
    return float(out[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args(argv)
    systems = ["remat", "jax"]
    best = {}
    for _ in range(args.rounds):
        for module in systems:
            best[module] = min(best.get(module, float("inf")), measure(module, args.seconds))
    ours, theirs = best["remat"] * 1e3, best["jax"] * 1e3
    print(f"{'':18s}{'remat ms':>10s}{'JAX ms':>10s}{'remat/JAX':>11s}")
    print(f"{'CNN step':18s}{ours:10.1f}{theirs:10.1f}{ours / theirs:11.2f}")


if __name__ == "__main__":
    main()
