"""The reference rematerialization workload: gradient (w.r.t. all weights) of mean(h_L**2) for a
stack of residual MLP blocks

    h_{i+1} = h_i + gelu(h_i @ W1_i) @ W2_i          (tanh gelu, width D, expansion 4)

on T tokens, L blocks, float32; as an unrolled Python loop and as a scan over stacked weights;
each with no checkpoint, a checkpoint per block (nothing saveable), and ``dots_saveable`` per
block. Prints measured peak bytes (remat.memory), the analytic minimum for the policy, step
time (median) and time relative to no checkpoint; a hand-written NumPy forward+backward, serial
and data-parallel, the faster of which is the floor; and JAX (jit) / PyTorch (eager,
torch.utils.checkpoint) side by side when installed.

    python benchmarks/block_stack.py            # L=24, D=256, T=8192
    python benchmarks/block_stack.py --small    # L=6, D=64, T=1024

Analytic minimum (float32 bytes; H = T*D*4 is one activation, A = 4*H one hidden layer,
P = 8*D*D*4 one block's weights). Parameters and the input exist before the step and are not
counted; the returned gradients (L*P) are. The backward pass of a block, for this network and
remat's differentiation rules (gelu written as 0.5*a*(1 + tanh(c*(a + 0.044715*a**3)))), needs:

  * for dW1 = h^T ct_a: the block input h (H);  for dW2 = g^T ct_o: the gelu output g (A);
  * for ct_a = ct_g * gelu'(a): the JVP factors of gelu, which remat's rules save as four
    hidden-sized arrays: 0.5*a, 1 + tanh(u), 1 - tanh(u)**2 and 3*a**2 (4A).

So each policy saves, per block, R:
  no checkpoint    h, g and the 4 gelu factors          R = H + 5A
  checkpoint       h only                               R = H
  dots_saveable    h and a = h @ W1                     R = H + A
and the backward pass of one block works with W. Run step by step (eager, or arrays too small
for the executor to fuse), that is its two activation-sized cotangents (2H), plus, when it
recomputes, that block's 5 hidden-sized residuals (5A); each hidden-sized cotangent product
frees a residual it consumes, so the block never needs more than that. Under ``jit`` with
fusion (remat.exec.fusion), the gelu, its derivative and the cotangent products run as one
fused pass over two hidden-sized inputs, a and ct_g = ct @ W2^T, writing g and ct_a into their
buffers: beside the block's output cotangent (H), a recomputing block holds 2A (checkpoint) or,
with a saved, A (dots_saveable):
  step by step     W = 2H  (none),  2H + 5A  (checkpoint, dots_saveable)
  fused            W = 2H  (none),  H + 2A  (checkpoint),  H + A  (dots_saveable)

Unrolled: processing block k (from L-1 down to 0) holds the residuals of blocks 0..k, the
gradients of blocks k+1..L-1 and of block k (P), and W. That is linear in k, so the peak is
at one end:  max(L*R + P, R + L*P) + W   (and at least the forward pass's end, L*R + H).
Scan: the residuals are stacked arrays, freed only when the backward scan ends, and the
backward scan's stacked weight gradients exist from its start:  L*R + L*P + W.
"""

import argparse
import functools
import statistics
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from harness import median_time, tune_allocator

GELU_C = 0.7978845608028654


def analytic_minimum(policy, L, D, T, form="unrolled", fused=None):
    """The peak bytes the policy needs for this network (see the module docstring); ``fused``
    (by default: whether remat's executor fuses a hidden-sized array) picks the working set."""
    from remat.exec import fusion

    H = T * D * 4
    A = 4 * H
    P = 8 * D * D * 4
    if fused is None:
        fused = T * 4 * D >= fusion.FUSE_MIN_ELEMENTS
    R = {"none": H + 5 * A, "checkpoint": H, "dots_saveable": H + A}[policy]
    if fused:
        W = {"none": 2 * H, "checkpoint": H + 2 * A, "dots_saveable": H + A}[policy]
    else:
        W = 2 * H + (0 if policy == "none" else 5 * A)
    if form == "scan":
        return L * R + L * P + W
    return max(max(L * R + P, R + L * P) + W, L * R + H)


# --- the model, written once for remat and for JAX ----------------------------------------


def make_loss(system, form, policy):
    """The network's loss, written against ``system``: the ``remat`` or the ``jax`` module."""
    jnp = system.numpy

    def gelu(a):
        return 0.5 * a * (1.0 + jnp.tanh(GELU_C * (a + 0.044715 * a ** 3)))

    def block(h, w1, w2):
        return h + gelu(h @ w1) @ w2

    if policy == "checkpoint":
        block = system.checkpoint(block)
    elif policy == "dots_saveable":
        block = system.checkpoint(block, policy=system.checkpoint_policies.dots_saveable)

    if form == "unrolled":
        def loss(params, h):
            for w1, w2 in params:
                h = block(h, w1, w2)
            return jnp.mean(h ** 2)
    else:
        def loss(params, h):
            h, _ = system.lax.scan(lambda c, w: (block(c, *w), None), h, params)
            return jnp.mean(h ** 2)
    return loss


def make_params(jnp, form, weights):
    """The weights as ``jnp`` arrays: a list of pairs (unrolled), or two stacks (scan)."""
    if form == "unrolled":
        return [(jnp.asarray(w1), jnp.asarray(w2)) for w1, w2 in weights]
    return (jnp.asarray(np.stack([w for w, _ in weights])),
            jnp.asarray(np.stack([w for _, w in weights])))


def make_remat_step(form, policy):
    import remat
    import remat.numpy  # noqa: F401 - make_loss reaches it as remat.numpy

    return remat.jit(remat.grad(make_loss(remat, form, policy)))


def remat_params(form, weights):
    import remat.numpy as jnp

    return make_params(jnp, form, weights)


# --- the hand-written NumPy floor ------------------------------------------------------------


def numpy_step(weights, h0, tokens=None):
    """Forward saving (h, a, t, g) per block, backward by hand, with in-place NumPy updates
    wherever a temporary can be reused: the speed floor for a NumPy implementation. (With
    ``tokens``, h0 is a slice of rows of a batch that large; the loss is still its mean.)"""
    saved = []
    h = h0
    for w1, w2 in weights:
        a = h @ w1
        t = a * a
        t *= a
        t *= 0.044715
        t += a
        t *= GELU_C
        np.tanh(t, out=t)
        g = t + 1.0
        g *= a
        g *= 0.5
        saved.append((h, a, t, g))
        h = h + g @ w2
    ct = h * (2.0 / (h.size if tokens is None else tokens * h.shape[1]))
    grads = [None] * len(weights)
    for i in range(len(weights) - 1, -1, -1):
        w1, w2 = weights[i]
        h, a, t, g = saved.pop()
        dw2 = g.T @ ct
        del g
        ct_a = ct @ w2.T  # ct_g, turned into ct_a in place below
        # gelu'(a) = 0.5 (1 + t) + 0.5 a (1 - t^2) c (1 + 3 * 0.044715 a^2)
        d = a * a
        d *= 3 * 0.044715
        d += 1.0
        d *= a
        d *= 0.5 * GELU_C
        t2 = t * t
        np.subtract(1.0, t2, out=t2)
        d *= t2
        del t2
        t += 1.0
        t *= 0.5
        d += t
        ct_a *= d
        del d, t, a
        dw1 = h.T @ ct_a
        ct = ct + ct_a @ w1.T
        grads[i] = (dw1, dw2)
    return grads


def numpy_step_threaded(weights, h0, pool, workers):
    """The same, data-parallel: each worker runs ``numpy_step`` on its share of the tokens
    (which are independent until the weight gradients, summed at the end), with BLAS on one
    thread per worker: how fast hand-written NumPy gets on all the cores."""
    from remat.runtime import parallel

    rows = [h0[i * len(h0) // workers:(i + 1) * len(h0) // workers] for i in range(workers)]
    with parallel.session():  # (used here only to keep BLAS single-threaded meanwhile)
        parts = list(pool.map(lambda h: numpy_step(weights, h, len(h0)), rows))
    grads = parts[0]
    for part in parts[1:]:
        for (d1, d2), (e1, e2) in zip(grads, part):
            d1 += e1
            d2 += e2
    return grads


# --- measurement -----------------------------------------------------------------------------


def measure_remat(forms, weights, h0, repeat):
    """Peak bytes and median step time of every (form, policy). The timed steps are
    interleaved (one step of each configuration per round, plus the NumPy floor), so slow
    spells of the machine hit every configuration alike and the ratios stay meaningful."""
    import remat
    import remat.numpy as jnp

    h = jnp.asarray(h0)
    runs, peaks = {}, {}
    for form in forms:
        params = remat_params(form, weights)
        for policy in POLICY_NAMES:
            step = make_remat_step(form, policy)
            step(params, h)  # trace and warm up
            peaks[form, policy] = remat.memory.peak_memory(step, params, h)
            runs[form, policy] = functools.partial(step, params, h)
    runs["numpy"] = functools.partial(numpy_step, weights, h0)
    workers = remat_threads()
    pool = ThreadPoolExecutor(workers)
    runs["numpy threaded"] = functools.partial(numpy_step_threaded, weights, h0, pool, workers)
    times = {key: [] for key in runs}
    for _ in range(repeat):
        for key, run in runs.items():
            times[key].append(median_time(run, 1))
    return peaks, {key: statistics.median(ts) for key, ts in times.items()}


POLICY_NAMES = ("none", "checkpoint", "dots_saveable")


def measure_jax(form, policy, weights, h0, repeat):
    import jax
    import jax.numpy as jnp

    loss = make_loss(jax, form, policy)
    params = make_params(jnp, form, weights)
    step = jax.jit(jax.grad(loss))
    h = jnp.asarray(h0)
    compiled = step.lower(params, h).compile()
    try:
        temp = compiled.memory_analysis().temp_size_in_bytes
    except Exception:  # noqa: BLE001 - memory analysis is backend-dependent
        temp = None
    jax.block_until_ready(step(params, h))
    return temp, median_time(lambda: jax.block_until_ready(step(params, h)), repeat)


def measure_torch(policy, weights, h0, repeat):
    import torch
    from torch.utils.checkpoint import checkpoint

    torch.set_num_threads(2)

    def gelu(a):
        return 0.5 * a * (1.0 + torch.tanh(GELU_C * (a + 0.044715 * a ** 3)))

    def block(h, w1, w2):
        return h + gelu(h @ w1) @ w2

    params = [(torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True))
              for a, b in weights]
    h0_t = torch.tensor(h0)

    def step():
        h = h0_t
        for w1, w2 in params:
            h = checkpoint(block, h, w1, w2, use_reentrant=False) \
                if policy == "checkpoint" else block(h, w1, w2)
        loss = (h ** 2).mean()
        return torch.autograd.grad(loss, [p for pair in params for p in pair])

    step()
    return None, median_time(step, repeat)


def remat_threads():
    from remat.runtime import parallel

    return parallel.num_threads()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="L=6, D=64, T=1024")
    parser.add_argument("--L", type=int)
    parser.add_argument("--D", type=int)
    parser.add_argument("--T", type=int)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-others", action="store_true", help="skip JAX and PyTorch")
    args = parser.parse_args(argv)
    tuned = tune_allocator()
    L, D, T = (6, 64, 1024) if args.small else (24, 256, 8192)
    L, D, T = args.L or L, args.D or D, args.T or T
    rng = np.random.default_rng(0)
    weights = [((rng.standard_normal((D, 4 * D)) / np.sqrt(D)).astype(np.float32),
                (rng.standard_normal((4 * D, D)) / np.sqrt(4 * D) / L).astype(np.float32))
               for _ in range(L)]
    h0 = rng.standard_normal((T, D)).astype(np.float32)
    print(f"block stack: L={L} D={D} T={T} float32 (2 cores); times are medians of "
          f"{args.repeat}; large buffers kept in the heap: {tuned}")
    peaks, times = measure_remat(("unrolled", "scan"), weights, h0, args.repeat)
    floor = min(times["numpy"], times["numpy threaded"])
    print(f"hand-written NumPy forward+backward: {times['numpy'] * 1e3:.1f} ms; data-parallel "
          f"on {remat_threads()} threads: {times['numpy threaded'] * 1e3:.1f} ms (the floor: "
          f"the faster)")
    header = (f"{'system':8s} {'form':9s} {'policy':14s} {'peak MiB':>9s} {'analytic':>9s} "
              f"{'peak/min':>8s} {'ms/step':>9s} {'vs none':>8s} {'vs numpy':>8s}")
    print(header)
    print("-" * len(header))
    for form in ("unrolled", "scan"):
        base = times[form, "none"]
        for policy in POLICY_NAMES:
            peak, t = peaks[form, policy], times[form, policy]
            amin = analytic_minimum(policy, L, D, T, form)
            print(f"{'remat':8s} {form:9s} {policy:14s} {peak / 2**20:9.1f} "
                  f"{amin / 2**20:9.1f} {peak / amin:8.2f} {t * 1e3:9.1f} {t / base:8.2f} "
                  f"{t / floor:8.2f}")
    if args.no_others:
        return
    try:
        import jax

        jax.config.update("jax_platforms", "cpu")
        for form in ("unrolled", "scan"):
            base = None
            for policy in POLICY_NAMES:
                temp, t = measure_jax(form, policy, weights, h0, args.repeat)
                base = t if base is None else base
                temp_s = f"{temp / 2**20:9.1f}" if temp is not None else f"{'n/a':>9s}"
                print(f"{'jax':8s} {form:9s} {policy:14s} {temp_s} {'(temp)':>9s} {'':8s} "
                      f"{t * 1e3:9.1f} {t / base:8.2f} {t / floor:8.2f}")
    except ImportError:
        print("(JAX not installed: skipped)")
    try:
        import torch  # noqa: F401

        base = None
        for policy in ("none", "checkpoint"):
            _, t = measure_torch(policy, weights, h0, args.repeat)
            base = t if base is None else base
            print(f"{'torch':8s} {'unrolled':9s} {policy:14s} {'n/a':>9s} {'':9s} {'':8s} "
                  f"{t * 1e3:9.1f} {t / base:8.2f} {t / floor:8.2f}")
    except ImportError:
        print("(PyTorch not installed: skipped)")


if __name__ == "__main__":
    main()
