"""Data-parallel training step of the demo's transformer over 1 and 2 MPI processes (weak
scaling: each process keeps the same per-process batch), its efficiency, and the share of the
step spent in the process collectives.

    python benchmarks/data_parallel.py [--per-rank-batch 12] [--steps 8] [--threads 1]

Each configuration is a separate ``mpiexec -n P`` job running this file with ``--worker``:
the demo's model (checkpointed blocks, dropout) and its jitted step ``value_and_grad`` then
``process_allreduce`` of the loss and gradients (what ``pmean`` over a process-spanning axis
does). Timed: the median of the warm steps. Collectives: the wall time inside
``remat.distributed``'s collectives (header exchange, MPI call, waiting for the slower rank),
from its counters, as a share of the step. ``--threads`` sets ``REMAT_NUM_THREADS`` for every
process (by default one core per process, so P processes ask for P cores).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def worker(per_rank_batch, steps):
    sys.path.insert(0, ROOT)
    from mpi4py import MPI

    import remat
    import remat.numpy as jnp
    from remat import demo, distributed, lax, random

    distributed.initialize()
    count, rank = distributed.process_count(), distributed.process_index()
    config = dict(demo.CONFIG, batch=per_rank_batch * count)
    text, chars, tokens = demo.load_corpus()
    first = rank * per_rank_batch
    # each process draws its own dropout masks (its key folds in the rank): per-process work
    # stays fixed (the demo's --data-parallel slices whole-batch masks to match one process)
    loss_fn = demo.make_loss(demo.make_forward("checkpoint", config["n_heads"],
                                               config["dropout"]))

    @remat.jit
    def step(params, x, y, key):
        loss, grads = remat.value_and_grad(loss_fn)(params, x, y, key)
        return remat.tree_util.tree_map(lambda t: t / count, lax.process_allreduce((loss, grads)))

    params = demo.init_params(random.PRNGKey(0), len(chars), **config)
    times, shares, nbytes = [], [], 0
    for i, (x, y) in enumerate(demo.batches(tokens, config["batch"], config["seq_len"],
                                            steps + 1)):
        rows = slice(first, first + per_rank_batch)
        key = random.fold_in(random.fold_in(random.PRNGKey(1), i), rank)
        x, y = jnp.asarray(x[rows]), jnp.asarray(y[rows])
        MPI.COMM_WORLD.Barrier()  # start every step together
        distributed.reset_collective_stats()
        start = time.perf_counter()
        loss, grads = step(params, x, y, key)
        elapsed = time.perf_counter() - start
        if i > 0:  # the first step traces and plans
            stats = distributed.collective_stats()
            times.append(elapsed)
            shares.append(stats["seconds"] / elapsed)
            nbytes = stats["bytes"]
    if rank == 0:
        print(json.dumps({"processes": count, "step_s": statistics.median(times),
                          "collective_share": statistics.median(shares),
                          "collective_bytes": nbytes}))
    distributed.shutdown()


def launch(processes, per_rank_batch, steps, threads):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpiexec = mpiexec if os.path.exists(mpiexec) else shutil.which("mpiexec")
    if mpiexec is None:
        sys.exit("needs mpiexec: pip install 'remat[distributed]'")
    # BLAS on the process's own threads only: OpenBLAS's idle threads spin after each call and
    # would take the other process's core
    env = dict(os.environ, REMAT_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    cmd = [mpiexec, "-n", str(processes), sys.executable, os.path.abspath(__file__), "--worker",
           "--per-rank-batch", str(per_rank_batch), "--steps", str(steps)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode:
        sys.exit(f"mpiexec -n {processes} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-rank-batch", type=int, default=12)
    parser.add_argument("--steps", type=int, default=8, help="timed steps (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="REMAT_NUM_THREADS per process")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.per_rank_batch, args.steps)
    print(f"demo transformer, policy 'checkpoint', {args.per_rank_batch} sequences per process "
          f"per step, {args.threads} executor thread(s) per process, {os.cpu_count()} cores\n")
    header = (f"{'processes':>9s} {'global batch':>12s} {'ms/step':>8s} {'efficiency':>10s} "
              f"{'collectives':>11s} {'KiB reduced':>11s}")
    print(header)
    print("-" * len(header))
    base = None
    for p in args.processes:
        r = launch(p, args.per_rank_batch, args.steps, args.threads)
        base = r["step_s"] if base is None else base
        print(f"{p:9d} {p * args.per_rank_batch:12d} {r['step_s'] * 1e3:8.1f} "
              f"{base / r['step_s']:10.2f} {r['collective_share']:11.1%} "
              f"{r['collective_bytes'] / 1024:11.0f}", flush=True)
    print("\n(efficiency: weak scaling, step time with 1 process / with P; collectives: median "
          "share of a step spent in remat.distributed's collectives, waiting included)")


if __name__ == "__main__":
    main()
