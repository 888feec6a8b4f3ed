"""Optimal checkpointing of a long loop: the gradient of Lorenz-96 (N=40, RK4, dt=0.01, the
model of ``loops.py``) through ``lax.scan`` of 10^4 and 10^5 steps, float32.

    python benchmarks/loop_checkpointing.py [--steps 10000,100000] [--repeat 3]
        [--table-ks 1,5,10,20,40] [--only-table]

First, issue 34's table: the peak of ``jit(grad)`` in carries, for K checkpoints, of
``lax.scan(lambda c, x: (tanh(c*w + x), None), ones(4096), xs[400], checkpoints=K)`` and of the
same loop as ``while_loop(..., max_steps=400, checkpoints=K)`` (``remat.memory.peak_memory``:
the executor's own accounting); it should be K plus a constant.

Configurations: the plain scan (``checkpoints='all'``: every step's residuals kept),
``checkpoints=K`` for K in {100, 10, ceil(log2 n)} (the binomial schedule), and the recipe JAX
users use today: a ``checkpoint`` of an outer scan of inner scans (about sqrt(n) blocks of
about sqrt(n) steps: the outer scan keeps one carry per block, the backward pass reruns each
block once, keeping its steps' residuals).

Per configuration: the peak live bytes of one jitted ``value_and_grad`` call
(``remat.memory.peak_memory``), in carries (160 bytes) and against the plain scan; the forward
steps the schedule must run (revolve's optimum ``r*n - beta(K+1, r-1)`` plus the ``n + 1`` every
checkpointed schedule runs: the output's last step, and each step once more, taped, as it is
reversed), and the steps counted by an ``io_callback`` in the step (up to ``--count-up-to``
steps: the count runs on the Python tier); the warm time (the best of ``--repeat`` calls, the
native loop tier compiled beforehand); whether the gradient is bit for bit the plain scan's.
"""

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

F32 = np.float32
N, DT = 40, 0.01


def lorenz96(jnp, x, forcing):
    def rhs(x):
        return (jnp.roll(x, -1) - jnp.roll(x, 2)) * jnp.roll(x, 1) - x + forcing

    k1 = rhs(x)
    k2 = rhs(x + 0.5 * DT * k1)
    k3 = rhs(x + 0.5 * DT * k2)
    k4 = rhs(x + DT * k3)
    return x + DT / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def nested_block(steps):
    """The inner scan's length: the divisor of ``steps`` closest to its square root."""
    return min((d for d in range(1, steps + 1) if steps % d == 0),
               key=lambda d: abs(d - math.sqrt(steps)))


def make_loss(steps, config, on_step=None):
    """The loss ``sum(x_n**2)`` for one configuration ('all', an int K, or 'nested')."""
    import remat
    import remat.numpy as jnp

    def step(x, forcing):
        if on_step is not None:
            remat.io_callback(on_step, remat.ShapeDtypeStruct((), np.int32),
                              remat.lax.stop_gradient(x))
        return lorenz96(jnp, x, forcing)

    def loss(x0, forcing):
        body = lambda x, _: (step(x, forcing), None)  # noqa: E731
        if config == "nested":
            block = nested_block(steps)

            def outer(x, _):
                return remat.lax.scan(body, x, None, length=block)[0], None

            x, _ = remat.lax.scan(remat.checkpoint(outer), x0, None, length=steps // block)
        else:
            x, _ = remat.lax.scan(body, x0, None, length=steps, checkpoints=config)
        return jnp.sum(x * x)

    return loss


def optimum_steps(steps, config):
    """The forward steps the configuration must run: revolve's optimum plus ``n + 1`` for a
    checkpointed scan; ``n`` for the plain scan; ``2n`` for the nested recipe (each block is
    rerun once as the backward pass reaches it, its steps' residuals kept)."""
    from remat.lax.control_flow.revolve import revolve_forward_steps

    if config == "all":
        return steps
    if config == "nested":
        return 2 * steps
    return revolve_forward_steps(steps, config) + 1 + steps


def count_steps(steps, config, x0, forcing):
    """The forward steps one gradient runs, counted by an ``io_callback`` in the step (the
    Python tier, so only for shorter runs). A ``checkpoint`` runs such an effect once, so the
    nested recipe's count would miss its recomputation: it is not counted."""
    import remat

    if config == "nested":
        return None
    calls = []

    def tick(x):
        calls.append(1)
        return np.int32(0)

    remat.jit(remat.grad(make_loss(steps, config, tick), (0, 1)))(x0, forcing)
    return len(calls)


def tanh_losses(steps):
    """Issue 34's loop, ``tanh(c*w + x)``, as a scan and as a while loop of ``steps`` steps."""
    import remat
    import remat.numpy as jnp

    w = F32(0.9)

    def scan_loss(c, xs, k):
        return remat.lax.scan(lambda c, x: (jnp.tanh(c * w + x), None), c, xs,
                              checkpoints=k)[0].sum()

    def while_loss(c, xs, k):
        def body(s):
            i, c = s
            return i + 1, jnp.tanh(c * w + xs[i])
        return remat.lax.while_loop(lambda s: s[0] < steps, body, (0, c), max_steps=steps,
                                    checkpoints=k)[1].sum()

    return {"scan": scan_loss, "while_loop": while_loss}


def peak_table(ks, steps=400, size=4096):
    """Print K -> the peak of ``jit(grad)`` in carries, for the scan and the while loop."""
    import remat
    from remat.memory import peak_memory

    c0, xs = np.ones(size, F32), np.linspace(0, 1, steps, dtype=F32)
    carry = c0.nbytes
    losses = tanh_losses(steps)
    print(f"\ntanh(c*w + x), {steps} steps, carry {carry} bytes: peak of jit(grad) in carries")
    print(f"{'K':>4} " + " ".join(f"{name:>12} {'- K':>6}" for name in losses))
    for k in ks:
        cells = []
        for loss in losses.values():
            f = remat.jit(remat.grad(loss), static_argnums=2)
            f(c0, xs, k)
            peak = peak_memory(f, c0, xs, k) / carry
            cells.append(f"{peak:>12.2f} {peak - k:>6.2f}")
        print(f"{k:>4} " + " ".join(cells), flush=True)


def run(steps, repeat, count):
    import remat
    from remat.exec import native
    from remat.memory import peak_memory

    x0 = (8.0 + 0.01 * np.arange(N)).astype(F32)
    forcing = F32(8.0)
    carry = x0.nbytes
    configs = ["all", 100, 10, math.ceil(math.log2(steps)), "nested"]
    print(f"\nLorenz-96 RK4, {steps} steps (carry {carry} bytes)")
    print(f"{'config':>10} {'peak bytes':>12} {'carries':>9} {'vs all':>7} {'fwd steps':>10} "
          f"{'counted':>10} {'per step':>9} {'warm s':>8} {'vs all':>7} {'same grad':>9}")
    reference = base = None
    for config in configs:
        f = remat.jit(remat.value_and_grad(make_loss(steps, config), (0, 1)))
        with native.eager():  # the native kernels compiled at the first call, not timed
            value, grads = f(x0, forcing)
        best = math.inf
        for _ in range(repeat):
            start = time.perf_counter()
            f(x0, forcing)
            best = min(best, time.perf_counter() - start)
        peak = peak_memory(f, x0, forcing)
        optimum = optimum_steps(steps, config)
        counted = count_steps(steps, config, x0, forcing) if count else None
        if counted is not None and config != "all":
            assert counted == optimum, (config, counted, optimum)
        g = np.concatenate([np.ravel(grads[0]), np.ravel(grads[1])])
        if reference is None:
            reference, base = g, (peak, best)
        same = np.array_equal(g, reference, equal_nan=True)
        name = config if isinstance(config, str) else f"K={config}"
        print(f"{name:>10} {peak:>12} {peak / carry:>9.1f} {peak / base[0]:>7.4f} "
              f"{optimum:>10} {counted if counted is not None else '-':>10} "
              f"{optimum / steps:>9.2f} {best:>8.3f} {best / base[1]:>7.1f} "
              f"{'yes' if same else 'no':>9}")
    finite = bool(np.all(np.isfinite(reference)))
    print(f"(gradient finite: {finite}; Lorenz-96 is chaotic, so over long horizons its float32 "
          f"gradient overflows, in every configuration alike)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="10000,100000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--count-up-to", type=int, default=10000,
                        help="count the steps run (slow: the Python tier) up to this length")
    parser.add_argument("--table-ks", default="1,5,10,20,40",
                        help="the Ks of issue 34's peak table (empty: no table)")
    parser.add_argument("--only-table", action="store_true", help="print only that table")
    args = parser.parse_args(argv)
    if args.table_ks:
        peak_table([int(k) for k in args.table_ks.split(",")])
    if args.only_table:
        return
    for steps in (int(s) for s in args.steps.split(",")):
        run(steps, args.repeat, steps <= args.count_up_to)


if __name__ == "__main__":
    main()
