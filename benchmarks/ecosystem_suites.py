"""Run a JAX library's own test suite on JAX, then on remat, and count what carries over.

    python benchmarks/ecosystem_suites.py LIB [--backend jax|remat|both] [--json PATH]
        [--select EXPR] [--max-tests N] [--timeout S] [--tests-dir DIR]

LIB is optax, chex, flax, equinox or diffrax. The suite runs unchanged under pytest, once on
JAX and once with ``import jax`` answered by remat (``remat.jax_alias``, installed by the
plugin ``ecosystem_plugin.py`` before anything imports ``jax``). With ``--backend both``, remat
runs the tests that pass on JAX, and the report gives how many of those pass on remat and the
commonest causes of the others: each failure's exception type and the first line of its
message, with numbers and addresses blanked, so that one missing feature counts once.

Where the tests are:

- optax and chex ship their tests inside their wheels: the installed copies run (optax's
  ``alias_test.py`` and ``schedules/_schedule_test.py`` import scikit-learn; without it they
  do not import on either backend and the report counts them as files that did not import).
- flax, equinox and diffrax do not; fetch the tests of the installed version and name the
  folder with ``--tests-dir``: flax's sdist (``pip download --no-binary :all: --no-deps
  flax==VERSION -d DIR`` and unpack it), equinox's and diffrax's GitHub repositories at the
  tag ``vVERSION``. The suite then runs from that folder under its own pytest configuration.

Each test phase has ``--timeout`` seconds (an alarm inside the test process); a test stuck in
one C call past that, or a crash of the test process, is recorded as that test's failure
(``Hang: ...`` / ``Crash: ...``) and the run resumes after it, so no single test stops a run.

``--select`` is a pytest ``-k`` expression; ``--max-tests N`` runs N of the collected tests,
spread evenly over the collection order (the JAX run picks them; remat runs the same ones).
"""

import argparse
import collections
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

INSTALLED_SUITES = ("optax", "chex")  # their tests ship in the wheel
FETCHED_SUITES = {
    "flax": "flax's sdist: pip download --no-binary :all: --no-deps flax=={v} -d DIR, unpacked",
    "equinox": "https://github.com/patrick-kidger/equinox at tag v{v}",
    "diffrax": "https://github.com/patrick-kidger/diffrax at tag v{v}",
}
LIBRARIES = INSTALLED_SUITES + tuple(FETCHED_SUITES)

COLLECTION_GRACE_S = 900  # importing a suite's modules (and the library) before any test runs
WATCHDOG_GRACE_S = 60  # beyond the per-phase alarm, before a silent test process is killed


# --- where a suite is and how pytest runs it ---------------------------------------------------


class Suite:
    """A library's test suite: the paths handed to pytest, the folder it runs in (its rootdir,
    so test ids read ``optax/_src/alias_test.py::...``) and the configuration arguments."""

    def __init__(self, lib, tests_dir, work_dir):
        self.lib = lib
        try:
            self.version = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            self.version = None  # a folder of tests alone (this runner's own tests)
        if lib in INSTALLED_SUITES:
            package = os.path.dirname(importlib.util.find_spec(lib).origin)
            self.root = os.path.dirname(package)
            self.paths = [package]
            # the wheel has no pytest configuration: an empty one, so none is picked up from
            # a folder above
            ini = os.path.join(work_dir, "pytest.ini")
            with open(ini, "w") as out:
                out.write("[pytest]\n")
            self.config_args = ["-c", ini, f"--rootdir={self.root}"]
            # nor do they use pytest plugins: those installed here (jaxtyping's, hypothesis's)
            # would only slow each start
            self.env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        else:
            if tests_dir is None:
                source = FETCHED_SUITES[lib].format(v=self.version)
                raise SystemExit(f"{lib}'s tests are not installed: fetch them ({source}) "
                                 f"and pass that folder as --tests-dir")
            tests_dir = os.path.abspath(tests_dir)
            if os.path.basename(tests_dir) in ("tests", "test"):
                tests_dir = os.path.dirname(tests_dir)
            found = [os.path.join(tests_dir, name) for name in ("tests", "test")
                     if os.path.isdir(os.path.join(tests_dir, name))]
            if not found:
                raise SystemExit(f"no tests/ or test/ folder in {tests_dir}")
            # the suite's own configuration applies (found from the tests' folder upwards)
            self.root, self.paths = tests_dir, found[:1]
            self.config_args = [f"--rootdir={tests_dir}"]
            self.env = {}  # and its plugins (equinox's configuration asks for jaxtyping's)

    def command(self, select, targets=None):
        """pytest's command line: the whole suite, or ``targets`` (test files or ids)."""
        args = [sys.executable, "-m", "pytest", "-p", "ecosystem_plugin", "-p", "no:cacheprovider",
                *self.config_args, "--continue-on-collection-errors", "-q", "--no-header",
                "-rN", *(targets or self.paths)]
        return args + (["-k", select] if select else [])


# --- one backend's run ----------------------------------------------------------------------


def _read_events(path):
    """The plugin's events so far; a last line still being written is left for later."""
    if not os.path.exists(path):
        return []
    with open(path) as source:
        lines = source.read().split("\n")
    return [json.loads(line) for line in lines[:-1]]  # every complete line ends in "\n"


def _run_pytest(command, env, cwd, results, log, timeout):
    """Run pytest until it exits or goes silent past the watchdog; returns ``(its exit code,
    None when killed; the test it was in when it ended, None when between tests)``."""
    earlier = len(_read_events(results))  # a resumed run appends to its predecessors' events
    with open(log, "a") as out:
        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    seen, last_change, in_test = earlier, time.monotonic(), False
    limit = (timeout or 3600) + WATCHDOG_GRACE_S
    while process.poll() is None:
        time.sleep(0.5)
        events = _read_events(results)
        if len(events) != seen:
            last = events[-1]
            in_test = last["event"] == "start" or last.get("when") in ("setup", "call")
            seen, last_change = len(events), time.monotonic()
        # inside a test, its phases' alarms bound it; outside (collection, the session's end)
        # only pytest's own work runs
        allowed = limit if in_test else max(COLLECTION_GRACE_S, limit)
        if time.monotonic() - last_change > allowed:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return None, _unfinished(_read_events(results)[earlier:])
    return process.returncode, _unfinished(_read_events(results)[earlier:])


def _unfinished(events):
    """The test that started last, when its teardown was never reported (its process ended
    inside it)."""
    started = [e["id"] for e in events if e["event"] == "start"]
    if not started:
        return None
    finished = any(e["event"] == "report" and e["id"] == started[-1] and e["when"] == "teardown"
                   for e in events)
    return None if finished else started[-1]


class Outcome(collections.namedtuple("Outcome", "status message where importing",
                                      defaults=(None, "", False))):
    """A test's status (passed, failed, skipped, xfailed, xpassed) and, when it failed, its
    first failure's ``Type: message``, the source line that raised it, and whether it was its
    test file's import that failed."""


def _outcomes(events):
    """Each test's ``Outcome``, from its phases' reports."""
    phases = collections.defaultdict(list)
    for event in events:
        if event["event"] == "report":
            phases[event["id"]].append(event)
    outcomes = {}
    for test_id, reports in phases.items():
        failed = [r for r in reports if r["outcome"] == "failed"]
        if failed:
            outcomes[test_id] = Outcome("failed", failed[0]["message"], failed[0]["where"])
        elif any(r["outcome"] == "skipped" for r in reports):
            xfail = any(r.get("xfail") for r in reports)
            outcomes[test_id] = Outcome("xfailed" if xfail else "skipped")
        elif any(r.get("xfail") for r in reports):
            outcomes[test_id] = Outcome("xpassed")
        else:
            outcomes[test_id] = Outcome("passed")
    return outcomes


def run_backend(suite, backend, work_dir, *, only=None, select=None, max_tests=0, timeout=180,
                targets=None):
    """Run ``suite`` (or its ``targets``: test files or ids relative to ``suite.root``) on
    ``backend`` (``jax`` or ``remat``); returns ``(outcomes, collected,
    collection errors)``: ``{test id: Outcome}``, the ids the run selected, and
    ``{test file id: message}`` for the files that did not import."""
    results = os.path.join(work_dir, f"{backend}.jsonl")
    log = os.path.join(work_dir, f"{backend}.log")
    only_file = os.path.join(work_dir, f"{backend}.only")
    env = dict(os.environ, **suite.env, ECOSYSTEM_BACKEND=backend, ECOSYSTEM_RESULTS=results,
               ECOSYSTEM_TIMEOUT=str(timeout),
               PYTHONPATH=os.pathsep.join(
                   path for path in (HERE, ROOT, os.environ.get("PYTHONPATH")) if path))
    env.pop("ECOSYSTEM_ONLY", None)
    if only is not None:
        _write_ids(only_file, only)
        env["ECOSYSTEM_ONLY"] = only_file
    if max_tests:
        env["ECOSYSTEM_MAX_TESTS"] = str(max_tests)
    for stale in (results, log):
        if os.path.exists(stale):
            os.remove(stale)
    command = suite.command(select, targets)
    interrupted = {}  # test id -> why its process ended under it
    while True:
        code, ended_in = _run_pytest(command, env, suite.root, results, log, timeout)
        events = _read_events(results)
        if ended_in is not None:
            interrupted[ended_in] = (
                f"Hang: no progress for {(timeout or 3600) + WATCHDOG_GRACE_S:g} s, "
                f"test process killed"
                if code is None else f"Crash: test process died ({_exit_status(code)})")
            print(f"  {backend}: {interrupted[ended_in]} in {ended_in}; resuming after it",
                  file=sys.stderr, flush=True)
        listings = [e["ids"] for e in events if e["event"] == "collected"]
        outcomes = _outcomes(events)
        remaining = [t for t in (listings[0] if listings else [])
                     if t not in outcomes and t not in interrupted]
        if ended_in is None and code not in (0, 1, 5):  # ended outside any test
            if remaining or not listings:
                raise SystemExit(f"pytest on {backend} ended with {_exit_status(code)} outside "
                                 f"any test; see {log}")
            print(f"  {backend}: pytest ended with {_exit_status(code)} after its last test",
                  file=sys.stderr, flush=True)
        if ended_in is None or not remaining:
            break
        _write_ids(only_file, remaining)
        env["ECOSYSTEM_ONLY"] = only_file
        env.pop("ECOSYSTEM_MAX_TESTS", None)  # the first run's sample is in the listing
    outcomes = _outcomes(events)
    outcomes.update({t: Outcome("failed", why) for t, why in interrupted.items()})
    listings = [e["ids"] for e in events if e["event"] == "collected"]
    errors = {e["id"]: e["message"] for e in events if e["event"] == "collect_error"}
    return outcomes, (listings[0] if listings else []), errors


def _exit_status(code):
    if code is None:
        return "no progress, killed"
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


def _write_ids(path, ids):
    with open(path, "w") as out:
        out.write("".join(f"{test_id}\n" for test_id in ids))


# --- grouping the failures ----------------------------------------------------------------------

_QUALIFIED_TYPE = re.compile(r"^(?:[A-Za-z_][\w]*\.)+(?=[A-Za-z_]\w*(?::|$))")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?(?![\w])")
CAUSE_WIDTH = 160


def normalize_cause(message):
    """A failure's message as its group's text: ``Type: first line``, the exception's module
    path dropped (``jax._src.errors.X`` and remat's ``X`` group together), addresses and
    numbers blanked (``0x…``, ``N``), cut to ``CAUSE_WIDTH`` characters."""
    line = (message or "").strip().splitlines()[0] if (message or "").strip() else "(no message)"
    line = _QUALIFIED_TYPE.sub("", line)
    line = _ADDRESS.sub("0x…", line)
    line = _NUMBER.sub("N", line)
    return line if len(line) <= CAUSE_WIDTH else line[:CAUSE_WIDTH - 1] + "…"


# JAX machinery that remat does not model (XLA's lowering and compiled forms, devices and
# sharding, JAX's private modules): a failure whose message, or the source line that raised it,
# names it is marked "[touches ...]" in its cause, so that such groups read as what they are
JAX_INTERNALS = (
    ("XLA lowering/HLO", re.compile(
        r"\.lower\(|\bLowered\b|\bCompiled\b|\blowering\b|\.compile\(|\bhlo\b|HLO|stablehlo"
        r"|\bmlir\b|xla_computation|as_text|compiler_ir|cost_analysis|memory_analysis"
        r"|xla_client|XlaRuntimeError")),
    ("devices/sharding", re.compile(
        r"xla_bridge|\b[Ss]hardings?\b|NamedSharding|PartitionSpec|\bMesh\b|\bdevices?\b"
        r"|local_devices|device_count|\bbackend\b")),
    ("jax._src", re.compile(r"\b(?:jax|remat)\._src\b")),
)
def _internals_area(text):
    return next((area for area, pattern in JAX_INTERNALS if pattern.search(text)), None)


def group_causes(failures):
    """``[[tests, cause], ...]``, the commonest first, for a list of failed ``Outcome``s."""
    counts = collections.Counter()
    for failure in failures:
        area = _internals_area(f"{failure.message}\n{failure.where}")
        counts[normalize_cause(failure.message)
               + (" (while importing the test file)" if failure.importing else "")
               + (f" [touches {area}]" if area else "")] += 1
    return [[n, cause] for cause, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def _not_run_outcome(test_id, collect_errors):
    """Why a test selected for remat was not collected there: its file's import error."""
    for file_id, message in collect_errors.items():
        if test_id == file_id or test_id.startswith(file_id + "::"):
            return Outcome("failed", message, importing=True)
    return Outcome("failed", "NotRun: test not collected on remat")


# --- the report ------------------------------------------------------------------------------


def _print_backend(backend, outcomes, collected, errors, seconds):
    tally = collections.Counter(outcome.status for outcome in outcomes.values())
    parts = ", ".join(f"{n} {kind}" for kind, n in sorted(tally.items()))
    print(f"{backend}: {len(collected)} tests selected, {parts or 'none run'}"
          f"{f'; {len(errors)} test files did not import' if errors else ''} ({seconds:.0f} s)",
          flush=True)
    if backend == "jax":  # left out of every count: say which, and why
        for file_id, message in sorted(errors.items()):
            print(f"  did not import on JAX: {file_id}: {normalize_cause(message)}")


JSON_KEYS = ("lib", "version", "jax_passed", "remat_passed", "causes")


def summarize(lib, version, runs, jax_passing):
    """The figures of a run: tests passing on JAX; of those (of all, without a JAX run),
    passing on remat; the causes of remat's failures; how many were neither (skipped)."""
    record = {"lib": lib, "version": version, "jax_passed": None, "remat_passed": None,
              "causes": [], "remat_ran": 0, "remat_failed": 0}
    if "jax" in runs:
        record["jax_passed"] = len(jax_passing)
    if "remat" in runs:
        remat = runs["remat"]
        ran = [remat[t] for t in (jax_passing if "jax" in runs else remat)]
        failures = [outcome for outcome in ran if outcome.status == "failed"]
        record.update(remat_passed=sum(outcome.status == "passed" for outcome in ran),
                      remat_ran=len(ran), remat_failed=len(failures),
                      causes=group_causes(failures))
    return record


def _print_summary(record, top):
    if record["jax_passed"] is not None:
        print(f"tests passing on JAX: {record['jax_passed']}")
    if record["remat_passed"] is None:
        return
    ran, passed = record["remat_ran"], record["remat_passed"]
    others = ran - passed - record["remat_failed"]
    print(f"{'of those, ' if record['jax_passed'] is not None else ''}passing on remat: "
          f"{passed} of {ran}{f' ({100 * passed / ran:.1f}%)' if ran else ''}"
          + (f"; {others} skipped on remat" if others else ""))
    print(f"top causes of failure on remat ({record['remat_failed']} tests, "
          f"{len(record['causes'])} causes):")
    for entry in record["causes"][:top]:
        print("  " + json.dumps(entry, ensure_ascii=False))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("lib", choices=LIBRARIES)
    parser.add_argument("--backend", choices=("jax", "remat", "both"), default="both")
    parser.add_argument("--json", metavar="PATH", help="write the figures and causes here")
    parser.add_argument("--outcomes", metavar="PATH",
                        help="write every test's outcome and message on each backend here")
    parser.add_argument("--select", metavar="EXPR", help="a pytest -k expression")
    parser.add_argument("--max-tests", type=int, default=0, metavar="N",
                        help="run N of the selected tests, spread over the suite")
    parser.add_argument("--timeout", type=float, default=180, metavar="S",
                        help="seconds per test phase (default 180; 0: no limit)")
    parser.add_argument("--tests-dir", metavar="DIR",
                        help="the fetched tests of flax, equinox or diffrax (see above)")
    parser.add_argument("--top", type=int, default=15, help="how many causes to print")
    parser.add_argument("--log-dir", metavar="DIR",
                        help="keep pytest's output and the raw results here")
    args = parser.parse_args(argv)

    work_dir = args.log_dir or tempfile.mkdtemp(prefix=f"ecosystem-{args.lib}-")
    os.makedirs(work_dir, exist_ok=True)
    suite = Suite(args.lib, args.tests_dir, work_dir)
    print(f"{args.lib} {suite.version}: tests under {', '.join(suite.paths)}", flush=True)
    runs = {}
    only = None  # remat's tests, when JAX ran first: those passing there
    for backend in (("jax", "remat") if args.backend == "both" else (args.backend,)):
        start = time.monotonic()
        outcomes, collected, errors = run_backend(
            suite, backend, work_dir, only=only, select=args.select,
            max_tests=args.max_tests if only is None else 0, timeout=args.timeout)
        if only is not None:  # selected on JAX but missing on remat: their file's import error
            for test_id in only:
                outcomes.setdefault(test_id, _not_run_outcome(test_id, errors))
        runs[backend] = outcomes
        _print_backend(backend, outcomes, collected, errors, time.monotonic() - start)
        if backend == "jax":
            only = [t for t in collected if t in outcomes and outcomes[t].status == "passed"]

    record = summarize(args.lib, suite.version, runs, only)
    _print_summary(record, args.top)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({key: record[key] for key in JSON_KEYS}, out, indent=1, ensure_ascii=False)
    if args.outcomes:
        with open(args.outcomes, "w") as out:
            json.dump({backend: {t: o._asdict() for t, o in outcomes.items()}
                       for backend, outcomes in runs.items()}, out, indent=1, ensure_ascii=False)
    if args.log_dir is None:
        print(f"pytest output: {work_dir}")


if __name__ == "__main__":
    main()
