"""How soon a loop runs at native speed: a fresh process calls the Lorenz-96 gradient of
``loops.py`` (RK4, 2,000 steps, ``jit(value_and_grad)`` of a ``lax.scan``) again and again, and
this prints when its calls reach their steady speed, on a cold native cache (a fresh
``REMAT_CACHE_DIR``) and on a warm one (the same directory again, in a new process), beside
JAX's first call and steady call from the same model source.

    python benchmarks/time_to_native.py [--seconds 15] [--workload ode|ode_checkpoint]
        [--long-call STEPS]

A run is *at native speed* from the first call (after the first) where the median of it and
the next nine is at most 1.5x the median of the run's last ten calls; the time to steady is
from the start of the first call to the start of that call. ``native s`` is when the first call
with every loop kernel native started; ``before`` the median call before steady speed,
``steady`` the median of the last ten calls.

``--long-call STEPS`` times instead one call of the same gradient at ``STEPS`` steps, in a fresh
process on a cold cache: a loop that gets hot during the call compiles meanwhile, and the call
goes on natively from the iteration it reached (``native.HandOver``); beside it the same call
with the native tier off, and JAX's (its compile included).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent

MODEL = """
import json, sys, time
sys.path.insert(0, {here!r})
import numpy as np
import {module} as lib
import {module}.numpy as jnp
from loops import lorenz96
fn, args = lorenz96(lib, jnp, steps={steps}, checkpointed={checkpointed})
"""

RUN = MODEL + """
if {module!r} == 'remat':
    import remat.exec.native
def native_ready(lib):  # whether every loop kernel of the program is native now (remat)
    loops = getattr(getattr(lib, "exec", None), "native", None)
    if loops is None:
        return None
    states = [l.state for t in loops._loops.values() for l in t.values()]
    return bool(states) and all(s == "ready" for s in states)
calls = []
start = time.perf_counter()
while time.perf_counter() - start < {seconds}:
    t0 = time.perf_counter()
    out = fn(*args)
    lib.tree_util.tree_map(lambda a: a.block_until_ready(), out)
    calls.append((t0 - start, time.perf_counter() - t0, native_ready(lib)))
print(json.dumps(calls))
"""


LONG_CALL = MODEL + """
start = time.perf_counter()
out = fn(*args)
lib.tree_util.tree_map(lambda a: a.block_until_ready(), out)
print(time.perf_counter() - start)
"""


def long_call(module, steps, checkpointed, native=True):
    """The seconds one call of ``steps`` steps takes in a fresh process (cold native cache)."""
    with tempfile.TemporaryDirectory(prefix="remat-cache-") as cache:
        env = dict(os.environ, REMAT_CACHE_DIR=cache, REMAT_NATIVE_LOOPS=str(int(native)))
        source = LONG_CALL.format(here=str(HERE), module=module, steps=steps,
                                  checkpointed=checkpointed)
        out = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True,
                             text=True, check=True)
    return float(out.stdout.split()[-1])


def run(module, seconds, checkpointed, cache_dir=None):
    """The (start, duration) of every call made in ``seconds``, in a fresh process."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode
    if cache_dir is not None:
        env["REMAT_CACHE_DIR"] = cache_dir
    source = RUN.format(here=str(HERE), module=module, seconds=seconds, steps=2000,
                        checkpointed=checkpointed)
    out = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(calls):
    """First call, time to steady speed, median call before it, the steady call, and when the
    first call with every loop kernel native started (s)."""
    native = next((t for t, _, ready in calls if ready), float("nan"))
    python = [d for _, d, ready in calls[1:] if ready is False]
    calls = [(t, d) for t, d, _ in calls]
    steady = statistics.median(d for _, d in calls[-10:])
    window = 10  # (a single slow call, another tenant's, must not count as not yet steady)
    at = next((i for i in range(1, len(calls)) if
               statistics.median(d for _, d in calls[i:i + window]) <= 1.5 * steady),
              len(calls))
    before = [d for _, d in calls[1:at]] or [calls[0][1]]
    reached = calls[at][0] if at < len(calls) else float("nan")
    return {"first": calls[0][1], "to_steady": reached, "before": statistics.median(before),
            "steady": steady, "calls": len(calls), "native": native,
            "python": statistics.median(python) if python else float("nan")}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--workload", choices=("ode", "ode_checkpoint"), default="ode")
    parser.add_argument("--long-call", type=int, metavar="STEPS")
    args = parser.parse_args(argv)
    checkpointed = args.workload == "ode_checkpoint"
    if args.long_call:
        print(f"Lorenz-96 RK4, one call of jit(value_and_grad) at {args.long_call:,} steps "
              f"(fresh process, cold cache)")
        for name, module, native in [("remat", "remat", True),
                                     ("remat, native tier off", "remat", False),
                                     ("jax", "jax", True)]:
            try:
                seconds = long_call(module, args.long_call, checkpointed, native)
            except subprocess.CalledProcessError:
                continue  # JAX not installed
            print(f"{name:24s} {seconds:8.2f} s")
        return
    rows = {}
    with tempfile.TemporaryDirectory(prefix="remat-cache-") as cache:
        rows["remat, cold cache"] = summary(run("remat", args.seconds, checkpointed, cache))
        rows["remat, warm cache"] = summary(run("remat", args.seconds, checkpointed, cache))
    try:
        rows["jax"] = summary(run("jax", min(args.seconds, 5.0), checkpointed))
    except subprocess.CalledProcessError:
        pass  # JAX not installed
    print(f"Lorenz-96 RK4, 2,000 steps{' (checkpointed body)' if checkpointed else ''}: "
          f"jit(value_and_grad), calls for {args.seconds:.0f} s in a fresh process")
    print(f"{'system':20s} {'1st call s':>10s} {'native s':>9s} {'to steady s':>12s} "
          f"{'before ms':>10s} {'steady ms':>10s} {'calls':>6s}")
    for name, r in rows.items():
        print(f"{name:20s} {r['first']:10.2f} {r['native']:9.2f} {r['to_steady']:12.2f} "
              f"{r['before'] * 1e3:10.1f} {r['steady'] * 1e3:10.1f} {r['calls']:6d}")
    if "jax" in rows:
        jax = rows["jax"]["steady"]
        print(f"remat / jax steady: Python tier (cold run, calls before native) "
              f"{rows['remat, cold cache']['python'] / jax:.2f}; native (warm run) "
              f"{rows['remat, warm cache']['steady'] / jax:.2f}")
    print(json.dumps(rows), file=sys.stderr)


if __name__ == "__main__":
    main()
