"""Loops of small operations, where an interpreter loses: the warm step of ``value_and_grad``
through ``lax.scan`` (float32), remat vs JAX from the same model source, timed in interleaved
rounds, with the NumPy floor: the same computation written by hand in NumPy
(``loops_numpy.py``), the speed the generated-Python tier can at best reach.

    python benchmarks/loops.py [--repeat 5] [--only ode,rnn,gru,mlp]

remat runs twice: with the native loop tier off (``python``: generated-Python plans) and on
(``native``: hot loops of tiny arrays compiled with numba; timed after their kernels are
ready). The first-call column is remat's first call (no native code yet).

Workloads: Lorenz-96 (N=40, RK4, 2,000 steps); a tanh RNN and a GRU (T=1,000, B=32, H=128,
I=64); 200 jitted SGD steps of an MLP 784-512-512-10 (batch 128). Each scan workload also runs
with its body checkpointed (``checkpoint`` column).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import loops_numpy  # noqa: E402
from harness import systems  # noqa: E402

F32 = np.float32


def lorenz96(lib, jnp, steps=2000, n=40, dt=0.01, checkpointed=False):
    def rhs(x, forcing):
        return (jnp.roll(x, -1) - jnp.roll(x, 2)) * jnp.roll(x, 1) - x + forcing

    def step(x, forcing):
        k1 = rhs(x, forcing)
        k2 = rhs(x + 0.5 * dt * k1, forcing)
        k3 = rhs(x + 0.5 * dt * k2, forcing)
        k4 = rhs(x + dt * k3, forcing)
        return x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    def loss(x0, forcing):
        body = lambda x, _: (step(x, forcing), None)
        if checkpointed:
            body = lib.checkpoint(body)
        x, _ = lib.lax.scan(body, x0, None, length=steps)
        return jnp.sum(x * x)

    x0 = (8.0 + 0.01 * np.arange(n)).astype(F32)
    forcing = np.asarray(8.0, F32)
    return lib.jit(lib.value_and_grad(loss, argnums=(0, 1))), (x0, forcing)


def rnn(lib, jnp, cell="tanh", t=1000, b=32, h=128, i=64, checkpointed=False):
    rng = np.random.default_rng(0)
    gates = 3 if cell == "gru" else 1
    params = {"wx": (rng.standard_normal((i, gates * h)) / np.sqrt(i)).astype(F32),
              "wh": (rng.standard_normal((h, gates * h)) / np.sqrt(h)).astype(F32),
              "b": np.zeros(gates * h, F32)}
    xs = rng.standard_normal((t, b, i)).astype(F32)

    def tanh_cell(p, hid, x):
        return jnp.tanh(x @ p["wx"] + hid @ p["wh"] + p["b"])

    def gru_cell(p, hid, x):
        gx = x @ p["wx"] + p["b"]
        gh = hid @ p["wh"]
        z = lib.nn.sigmoid(gx[:, :h] + gh[:, :h])
        r = lib.nn.sigmoid(gx[:, h:2 * h] + gh[:, h:2 * h])
        n = jnp.tanh(gx[:, 2 * h:] + r * gh[:, 2 * h:])
        return (1 - z) * n + z * hid

    fn = gru_cell if cell == "gru" else tanh_cell

    def loss(p, xs):
        body = lambda hid, x: (fn(p, hid, x), None)
        if checkpointed:
            body = lib.checkpoint(body)
        hid, _ = lib.lax.scan(body, jnp.zeros((b, h), F32), xs)
        return jnp.mean(hid * hid)

    return lib.jit(lib.value_and_grad(loss)), (params, xs)


def mlp_sgd(lib, jnp, steps=200, batch=128):
    rng = np.random.default_rng(0)
    sizes = [784, 512, 512, 10]
    params = [((rng.standard_normal((m, n)) / np.sqrt(m)).astype(F32), np.zeros(n, F32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((batch, 784)).astype(F32)
    y = np.eye(10, dtype=F32)[rng.integers(0, 10, batch)]

    def loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jnp.maximum(h @ w + b, 0.0)
        w, b = params[-1]
        logits = h @ w + b
        logp = logits - lib.nn.logsumexp(logits, axis=-1, keepdims=True)
        return -jnp.mean(jnp.sum(logp * y, axis=-1))

    @lib.jit
    def sgd_step(params, x, y):
        g = lib.grad(loss)(params, x, y)
        return lib.tree_util.tree_map(lambda p, d: p - 0.01 * d, params, g)

    def run(params, x, y):
        for _ in range(steps):
            params = sgd_step(params, x, y)
        return params

    return run, (params, x, y)


FLOORS = {  # the hand-written NumPy version of each workload, on the same arguments
    "ode": loops_numpy.lorenz96,
    "rnn": lambda **k: loops_numpy.rnn("tanh", **k),
    "gru": lambda **k: loops_numpy.rnn("gru", **k),
    "mlp": lambda **k: loops_numpy.mlp_sgd(),
}

WORKLOADS = {
    "ode": ("Lorenz-96 RK4, 2,000 steps", lorenz96),
    "rnn": ("tanh RNN T=1000 B=32 H=128", lambda lib, jnp, **k: rnn(lib, jnp, "tanh", **k)),
    "gru": ("GRU T=1000 B=32 H=128", lambda lib, jnp, **k: rnn(lib, jnp, "gru", **k)),
    "mlp": ("MLP 784-512-512-10, 200 SGD steps", lambda lib, jnp, **k: mlp_sgd(lib, jnp)),
}


def _block(out):
    import remat

    for leaf in remat.tree_util.tree_leaves(out):
        getattr(leaf, "block_until_ready", lambda: None)()


def _tier(fn, native):
    """``fn`` run with remat's native loop tier on or off."""
    import remat

    def run(*args):
        with remat.config.override("remat_native_loops", native):
            return fn(*args)
    return run


def _floor(fn, threaded):
    """A NumPy floor run as remat's plans and XLA's code run: subnormals flushed to zero
    (NumPy alone does not, and an RNN's cotangents decay into them: every operation on one is
    about a hundred times slower, 164 instead of 55 ms for the tanh RNN), BLAS on its own
    threads (``threaded``) or on one."""
    from remat.runtime import denormals, parallel

    blas = parallel.find_blas_threads()

    def run(*args):
        saved_fenv = denormals.flush()
        saved_threads = blas.get() if blas is not None else None
        if blas is not None and not threaded:
            blas.set(1)
        try:
            return fn(*args)
        finally:
            if saved_threads is not None:
                blas.set(saved_threads)
            denormals.restore(saved_fenv)
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default=",".join(WORKLOADS))
    args = parser.parse_args(argv)
    from remat.exec import native

    found = systems()
    cases = []  # (label, system, fn, args, first call seconds)
    for key in args.only.split(","):
        title, make = WORKLOADS[key]
        variants = [("", {})] if key == "mlp" else [("", {}), (" checkpoint", {
            "checkpointed": True})]
        for suffix, kw in variants:
            for name, (lib, jnp) in found.items():
                fn, fn_args = make(lib, jnp, **kw)
                tiers = [(name, fn)] if name != "remat" else \
                    [("remat", _tier(fn, False)), ("native", _tier(fn, True))]
                for system, run in tiers:
                    start = time.perf_counter()
                    _block(run(*fn_args))  # first call: traces and compiles (not natively)
                    first = time.perf_counter() - start
                    if system == "native":  # warm: every hot loop's kernel compiled
                        with native.eager():
                            _block(run(*fn_args))
                        native.wait()
                    cases.append((title + suffix, system, run, fn_args, first))
                if name == "remat":  # the floor: the faster of BLAS on one thread or its own
                    for threaded in (False, True):
                        cases.append((title + suffix, f"numpy{'+' * threaded}",
                                      _floor(FLOORS[key](**kw), threaded), fn_args, None))
    times = {(c[0], c[1]): [] for c in cases}
    for _ in range(args.repeat):  # interleaved rounds
        for label, name, fn, fn_args, _ in cases:
            start = time.perf_counter()
            _block(fn(*fn_args))
            times[(label, name)].append(time.perf_counter() - start)
    first = {(c[0], c[1]): c[4] for c in cases}
    ms = {key: statistics.median(t) * 1e3 for key, t in times.items()}
    for label in dict.fromkeys(c[0] for c in cases):
        ms[(label, "numpy")] = min(ms.pop((label, "numpy")), ms.pop((label, "numpy+")))
    has_jax = "jax" in found
    header = f"{'workload':38s} {'numpy ms':>8s} {'python ms':>9s} {'py/np':>6s} " \
             f"{'native ms':>9s}" + (
        f" {'jax ms':>7s} {'py/jax':>7s} {'nat/jax':>7s} {'1st s':>6s} {'1st jax':>7s}"
        if has_jax else "")
    print(header)
    print("-" * len(header))
    for label in dict.fromkeys(c[0] for c in cases):
        py, nat, floor = ms[(label, "remat")], ms[(label, "native")], ms[(label, "numpy")]
        line = f"{label:38s} {floor:8.1f} {py:9.1f} {py / floor:6.2f} {nat:9.1f}"
        if has_jax:
            jx = ms[(label, "jax")]
            line += f" {jx:7.1f} {py / jx:7.2f} {nat / jx:7.2f} {first[(label, 'remat')]:6.2f}" \
                    f" {first[(label, 'jax')]:7.2f}"
        print(line)


if __name__ == "__main__":
    main()
