"""A pytest plugin that runs a JAX library's own tests on remat and records each outcome.

Load it first, ``python -m pytest -p ecosystem_plugin ...`` with ``benchmarks/`` on
``PYTHONPATH``; plugins named by ``-p`` load before any other, so the alias is in place before
anything imports ``jax``. It reads its settings from the environment:

- ``ECOSYSTEM_BACKEND``: ``remat`` installs ``remat.jax_alias`` (``import jax`` gives remat);
  ``jax`` (the default) leaves JAX alone, for the baseline run.
- ``ECOSYSTEM_TIMEOUT``: seconds each phase of a test (setup, call, teardown) may run before
  it fails with ``TestTimeout``; 0 turns the alarm off. The alarm interrupts Python code only:
  a hang inside one C call is caught by the runner's watchdog (``ecosystem_suites.py``).
- ``ECOSYSTEM_RESULTS``: a file to which one JSON line per event is appended, flushed at once so
  that a run killed midway keeps what it did: ``collected`` (the test ids), ``start`` (a test
  begins), ``report`` (a phase's outcome and, on failure, its exception's first line and the
  source line it was raised from) and
  ``collect_error`` (a test file that did not import).
- ``ECOSYSTEM_ONLY``: a file of test ids, one a line: only these run (a run resumed after a
  crash, or remat's run of the tests that pass on JAX).
- ``ECOSYSTEM_MAX_TESTS``: run at most this many of the collected tests, spread evenly over the
  collection order, so a bounded run samples every file rather than the first few.
"""

import json
import os
import signal

import pytest

BACKEND = os.environ.get("ECOSYSTEM_BACKEND", "jax")
if BACKEND == "remat":
    import remat.jax_alias
    from remat.config import config

    remat.jax_alias.install()
    # as remat's own suite does: the native loop tier compiles hot loops with numba on a
    # background thread, seconds of CPU per loop, which would dominate short library tests
    if "REMAT_NATIVE_LOOPS" not in os.environ:
        config.update("remat_native_loops", False)
elif BACKEND != "jax":
    raise ValueError(f"ECOSYSTEM_BACKEND must be 'jax' or 'remat', not {BACKEND!r}")

TIMEOUT = float(os.environ.get("ECOSYSTEM_TIMEOUT", "0"))
_RESULTS = os.environ.get("ECOSYSTEM_RESULTS")


class TestTimeout(BaseException):
    """A test phase ran past ``ECOSYSTEM_TIMEOUT``: a BaseException, so that a test's own
    ``except Exception`` cannot swallow it (pytest records it as the phase's failure)."""

    __test__ = False  # not a test class, whatever pytest's name rules say


def _record(event, **fields):
    if _RESULTS is None:
        return
    with open(_RESULTS, "a") as out:
        out.write(json.dumps({"event": event, **fields}) + "\n")
        out.flush()


def _first_line(report):
    """The failure's exception as ``Type: first line of its message``."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[0] if lines else text
    if line.endswith(":") and len(lines) > 1:  # ``Type:`` and a message from the next line on
        line = f"{line} {lines[1]}"
    # pytest drops the type from a rewritten ``assert``'s message: give it back
    return f"AssertionError: {line}" if line.startswith("assert ") else line


def _raising_line(report):
    """The source line of the traceback's innermost shown frame (pytest hides unittest's)."""
    entries = getattr(getattr(report.longrepr, "reprtraceback", None), "reprentries", None)
    lines = getattr(entries[-1], "lines", []) if entries else []
    marked = [line[1:].strip() for line in lines if line.startswith(">")]
    return marked[-1] if marked else ""


def _collect_error_line(report):
    """A collection error's exception: its longrepr is text whose ``E`` lines hold it."""
    text = str(report.longrepr)
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    return errors[0] if errors else _first_line(report)


def _evenly_spread(items, count):
    if count >= len(items):
        return items
    return [items[(i * len(items)) // count] for i in range(count)]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    selected = items
    only = os.environ.get("ECOSYSTEM_ONLY")
    if only is not None:
        with open(only) as listing:
            wanted = {line.strip() for line in listing if line.strip()}
        selected = [item for item in selected if item.nodeid in wanted]
    max_tests = int(os.environ.get("ECOSYSTEM_MAX_TESTS", "0"))
    if max_tests:
        selected = _evenly_spread(selected, max_tests)
    if len(selected) != len(items):
        kept = {id(item) for item in selected}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = selected
    _record("collected", ids=[item.nodeid for item in items])


def pytest_collectreport(report):
    if report.failed:
        _record("collect_error", id=report.nodeid, message=_collect_error_line(report))


def pytest_runtest_logstart(nodeid, location):
    _record("start", id=nodeid)


def pytest_runtest_logreport(report):
    fields = {"id": report.nodeid, "when": report.when, "outcome": report.outcome,
              "duration": round(report.duration, 3)}
    if hasattr(report, "wasxfail"):
        fields["xfail"] = True
    if report.failed:
        fields["message"] = _first_line(report)
        fields["where"] = _raising_line(report)
    _record("report", **fields)


def _on_alarm(signum, frame):
    raise TestTimeout(f"test phase ran over {TIMEOUT:g} s")


def _with_alarm():
    if not TIMEOUT:
        return (yield)
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TIMEOUT)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _with_alarm())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _with_alarm())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _with_alarm())
