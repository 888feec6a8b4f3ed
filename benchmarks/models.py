"""Models' training steps, ``jit(value_and_grad)``, on remat and on JAX from the same model
source, each system in a fresh process of its own (as a user runs it: no allocator tuning but
remat's own), the systems interleaved round by round.

    python benchmarks/models.py [--rounds 3] [--seconds 8] [--only cnn,gpt]

The models:

- ``cnn``: CIFAR-sized NHWC input (batch 64, 32x32x3), three 3x3 ``SAME`` convolutions
  (32, 32, 64 channels) with ReLU, a 2x2 average pool after the second and the third, a dense
  layer to 10 classes and a softmax cross-entropy;
- ``gpt``: a 4-layer decoder (width 128, 4 heads, causal attention, a 4x GELU MLP, pre-layer
  norms) over 8 sequences of 256 tokens from a 512-token vocabulary, next-token
  cross-entropy.

Each process steps for ``--seconds`` after its first call; the table gives, per system, the
best round's median step (the round least disturbed by other tenants), and the ratio
remat / JAX.
"""

import argparse
import os
import subprocess
import sys

PRELUDE = """
import time
import numpy as np
import {module} as lib
import {module}.numpy as jnp
from {module} import lax
rng = np.random.default_rng(0)
"""

CNN = """

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


params = [rng.standard_normal(s).astype(np.float32) * 0.1
          for s in [(3, 3, 3, 32), (3, 3, 32, 32), (3, 3, 32, 64), (8 * 8 * 64, 10)]]
x = rng.standard_normal((64, 32, 32, 3)).astype(np.float32)
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
args = (params, x, y)
"""

GPT = """
V, D, H, T, B, L = 512, 128, 4, 256, 8, 4


def layer_norm(x, g):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5) * g


def attention(x, wqkv, wo):
    q, k, v = jnp.split(x @ wqkv, 3, axis=-1)
    heads = lambda a: a.reshape(B, T, H, D // H).transpose(0, 2, 1, 3)
    q, k, v = heads(q), heads(k), heads(v)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // H)
    scores = jnp.where(np.tril(np.ones((T, T), bool)), scores, -1e9)
    out = lib.nn.softmax(scores, axis=-1) @ v
    return out.transpose(0, 2, 1, 3).reshape(B, T, D) @ wo


def loss(params, tokens):
    x = params["embed"][tokens[:, :-1]] + params["pos"]
    for p in params["layers"]:
        x = x + attention(layer_norm(x, p["g1"]), p["wqkv"], p["wo"])
        x = x + lib.nn.gelu(layer_norm(x, p["g2"]) @ p["w1"]) @ p["w2"]
    logits = layer_norm(x, params["g"]) @ params["embed"].T
    logp = logits - lib.nn.logsumexp(logits, axis=-1, keepdims=True)
    return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1))


def normal(*shape):
    return (rng.standard_normal(shape) * 0.02).astype(np.float32)


params = {{"embed": normal(V, D), "pos": normal(T, D), "g": np.ones(D, np.float32),
          "layers": [{{"wqkv": normal(D, 3 * D), "wo": normal(D, D), "w1": normal(D, 4 * D),
                      "w2": normal(4 * D, D), "g1": np.ones(D, np.float32),
                      "g2": np.ones(D, np.float32)}} for _ in range(L)]}}
args = (params, rng.integers(0, V, (B, T + 1)))
"""

TIMED = """
step = lib.jit(lib.value_and_grad(loss))
lib.block_until_ready(step(*args))
times = []
end = time.perf_counter() + {seconds}
while time.perf_counter() < end:
    start = time.perf_counter()
    lib.block_until_ready(step(*args))
    times.append(time.perf_counter() - start)
print(sorted(times)[len(times) // 2])
"""


MODELS = {"cnn": CNN, "gpt": GPT}


def measure(module, model, seconds):
    """The median step, in seconds, of a fresh process."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    code = (PRELUDE + MODELS[model] + TIMED).format(module=module, seconds=seconds)
    out = subprocess.run([sys.executable, "-c", code],
                         capture_output=True, text=True, env=env, check=True).stdout.split()
    return float(out[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--only", default=",".join(MODELS))
    args = parser.parse_args(argv)
    models = args.only.split(",")
    best = {}
    for _ in range(args.rounds):
        for model in models:
            for module in ("remat", "jax"):
                best[model, module] = min(best.get((model, module), float("inf")),
                                          measure(module, model, args.seconds))
    print(f"{'step of':18s}{'remat ms':>10s}{'JAX ms':>10s}{'remat/JAX':>11s}")
    for model in models:
        ours, theirs = best[model, "remat"] * 1e3, best[model, "jax"] * 1e3
        print(f"{model:18s}{ours:10.1f}{theirs:10.1f}{ours / theirs:11.2f}")


if __name__ == "__main__":
    main()
