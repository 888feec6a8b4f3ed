"""A long campaign of the differential fuzzer (``fuzzing.py``): one seeded program per case, run
in worker processes, continuing past failures.

    python tests/fuzz_campaign.py --cases 50000 --jobs 2 [--start 0] [--jax-every 1] [--log F]

Every case gets the checks that need only remat (with vs without checkpoints, jit vs eager,
generated vs interpreted plans); every ``--native-every``-th case with a loop also runs with
its loops compiled by numba, against the Python loop tier;
every ``--jax-every``-th case is also compared with JAX, where it is installed (JAX's eager
dispatch makes that check about ten times the cost of the others). A case that JAX rejects is
counted as invalid, not as a failure, when remat rejects it too; a case still running after
``--case-timeout`` seconds is a failure (a hang). Prints a summary, with the failures grouped by
cause (the check that disagreed, or the exception's type and the innermost frame of remat it
passed through) and the smallest seed of each; each failure (its seed, cause, traceback and
program) goes to the log.
"""

import argparse
import collections
import multiprocessing
import signal
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import fuzzing  # noqa: E402

_namespaces = None


class CaseTimeout(BaseException):
    """A case ran past its time (a BaseException: remat's handlers must not catch it)."""


def _alarm(signum, frame):
    raise CaseTimeout


def _init():
    global _namespaces
    signal.signal(signal.SIGALRM, _alarm)
    import remat

    remat.config.update("jax_enable_x64", True)
    try:
        import jax
    except ImportError:
        jax_ns = None
    else:
        jax.config.update("jax_enable_x64", True)
        jax_ns = fuzzing.Namespace.jax()
    _namespaces = (fuzzing.Namespace.remat(), jax_ns)


def cause_of(error):
    """What a failure is grouped by: the check that disagreed, or the exception's type and the
    innermost frame of remat (of any file where remat has none) it was raised through."""
    if isinstance(error, fuzzing.Disagreement):
        return "wrong result: " + str(error).split(":", 1)[0]
    frames = traceback.extract_tb(error.__traceback__)
    in_remat = [f for f in frames if "/remat/" in f.filename]
    where = (in_remat or frames)[-1]
    path = where.filename[where.filename.rfind("/remat/") + 1:] if in_remat else where.filename
    return f"{type(error).__name__} at {path}:{where.lineno} ({where.name})" + (
        "" if in_remat else " (no frame of remat)")


def run_case(task):
    """(seed, with_jax, with_native, timeout) -> (seed, outcome, cause, detail): outcome is
    'ok', 'jax-checked', 'invalid' or 'fail'."""
    seed, with_jax, with_native, timeout = task
    remat_ns, jax_ns = _namespaces
    program = fuzzing.draw_program(fuzzing.RandomChooser(seed))
    signal.alarm(timeout)
    try:
        return (seed, *_check(program, remat_ns, jax_ns if with_jax else None, with_native))
    except CaseTimeout as e:
        trace = "".join(traceback.format_exception(e)[-12:])
        return seed, "fail", f"timeout: {cause_of(e)}", f"{trace}{program!r}"
    finally:
        signal.alarm(0)


def _check(program, remat_ns, jax_ns, with_native):
    try:
        fuzzing.check_program(program, remat_ns, jax_ns)
        if with_native and fuzzing.has_loop(program):
            fuzzing.check_native(program, remat_ns)
    except fuzzing.Disagreement as e:
        return "fail", cause_of(e), str(e)
    except Exception as e:  # remat raised: a failure unless JAX rejects the program too
        if jax_ns is not None and fuzzing.jax_rejects(program, jax_ns):
            return "invalid", cause_of(e), f"{type(e).__name__}: {e}\n{program!r}"
        trace = "".join(traceback.format_exception(e)[-12:])
        return "fail", cause_of(e), f"remat raised {type(e).__name__}: {e}\n{trace}{program!r}"
    return "jax-checked" if jax_ns is not None else "ok", "", ""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--jax-every", type=int, default=1)
    parser.add_argument("--native-every", type=int, default=0,
                        help="also compare the native loop tier with the Python tier on every "
                             "N-th case (each compiles its loops with numba: seconds)")
    parser.add_argument("--case-timeout", type=int, default=300,
                        help="seconds a case may run before it counts as a failure (a hang)")
    parser.add_argument("--log", default="fuzz_failures.log")
    args = parser.parse_args(argv)
    tasks = [(s, (s - args.start) % args.jax_every == 0,
              args.native_every > 0 and (s - args.start) % args.native_every == 0,
              args.case_timeout)
             for s in range(args.start, args.start + args.cases)]
    counts = dict(ok=0, **{"jax-checked": 0}, invalid=0, fail=0)
    causes = collections.defaultdict(list)  # (outcome, cause) -> seeds
    start = time.time()
    with open(args.log, "w") as log, multiprocessing.Pool(args.jobs, _init) as pool:
        for done, (seed, outcome, cause, detail) in enumerate(
                pool.imap_unordered(run_case, tasks, chunksize=16), 1):
            counts[outcome] += 1
            if outcome in ("fail", "invalid"):
                causes[outcome, cause].append(seed)
                log.write(f"seed {seed} {outcome} [{cause}]: {detail}\n\n")
                log.flush()
            if done % 1000 == 0:
                print(f"{done} cases, {time.time() - start:.0f} s: {counts}", flush=True)
    print(f"{args.cases} cases (seeds {args.start}..{args.start + args.cases - 1}) in "
          f"{time.time() - start:.0f} s: {counts['ok'] + counts['jax-checked']} passed "
          f"({counts['jax-checked']} also against JAX), {counts['invalid']} invalid, "
          f"{counts['fail']} failed")
    for (outcome, cause), seeds in sorted(causes.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(seeds):5d} {outcome:7s} {cause} (seed {min(seeds)})")
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
