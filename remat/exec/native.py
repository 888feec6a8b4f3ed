"""Loop kernels: a ``scan`` or ``while_loop`` whose body works on tiny arrays runs as one
function with the loop inside it (its source from ``loop_source``), so an iteration costs its
NumPy calls (or machine code) instead of a plan's per-step dispatch and per-buffer bookkeeping.

Two tiers. The Python tier is used from a loop's first call. The native tier compiles the
kernel with numba (NumPy's error model: no division checks) once the loop is *hot*
(``HOT_SECONDS`` spent in it), in another process while the Python tier keeps running (a
background thread waits for it); a call running on the Python tier then goes on natively from
the iteration it reached (``HandOver``), and a kernel that fails to compile leaves its loop on
the Python tier. Native kernels are written as source files under
the cache directory (``REMAT_CACHE_DIR``, default ``~/.cache/remat``), named by a hash of their
source, the helpers module and numba's version, and compiled with numba's on-disk cache, beside
the argument types they were compiled for: a loop whose kernel an earlier process compiled
loads its machine code while its first call runs, and is native from its second call.

The flag ``remat_native_loops`` (environment ``REMAT_NATIVE_LOOPS=0|1``; default on) turns the
native tier off; without numba installed it is off.
"""

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import threading
import time
import warnings
import weakref
from pathlib import Path

import numpy as np

from remat.config import config
from remat.exec.loop_source import Unsupported, scan_source, while_source
from remat.exec.passes import optimize_jaxpr
from remat.interpreters.partial_eval import convert_constvars_jaxpr
from remat.runtime.lazy_imports import LazyModule, installed

numba = LazyModule("numba") if installed("numba") else None  # the tier is off without it

HOT_SECONDS = float(os.environ.get("REMAT_NATIVE_HOT_SECONDS", "0.25"))
WARM_WAIT = 5.0  # the longest a loop's second call waits for its cached kernel to load
LOADING_SWITCH_INTERVAL = 1e-4  # the GIL's switch interval while a thread loads a kernel
BATCH_WINDOW = 0.05  # how long the compiler waits for more hot loops before it starts: one
# process compiles them all (each process pays numba's start, about a second)
CACHE_DIR = Path(os.environ.get("REMAT_CACHE_DIR", Path.home() / ".cache" / "remat")) / "native"


_NATIVE_HEADER = """import numpy as np
from numba import njit
from remat.exec import native_kernels as _k


@njit(cache=True, nogil=True, error_model="numpy")
"""


def _normalized(out, dtype):
    """An impl's result as the plans keep it: an ndarray of the equation's dtype."""
    if type(out) is not np.ndarray:
        out = np.asarray(getattr(out, "_buf", out))
    return out if out.dtype == dtype else out.astype(dtype)


class HandOver(Exception):  # noqa: N818 (not an error: a Python-tier call's way out)
    """Raised by a Python-tier kernel between two iterations once its loop's native kernel is
    ready (``Loop.native_ready``): the native kernel goes on from ``carries`` (a scan's, from
    its iteration ``done``)."""

    def __init__(self, carries, done=None):
        super().__init__()
        self.carries = carries
        self.done = done


_background = [0]  # background threads of the native tier at work (``_prompt_switching``)
_yielding = [0.0]  # how often a Python-tier loop yields the GIL now (0: never)
_yield_lock = threading.Lock()
_last_yield = [0.0]
YIELD_EVERY = 0.002  # while background threads work: a third of the time
WATCHED_YIELD_EVERY = 0.02  # while a call is watched (``watch``): the watcher's look
YIELD_SLEEP = 0.001


def _update_yielding():
    with _yield_lock:
        _yielding[0] = YIELD_EVERY if _background[0] > 0 else \
            WATCHED_YIELD_EVERY if _running else 0.0


def _yield_to_background():
    """Let the native tier's background threads (the long-call watcher, the compiler, a
    kernel's loading) run while a Python-tier loop runs. A loop whose every iteration makes
    short NumPy calls starves them otherwise, whatever the switch interval: each call gives
    the GIL up for a moment and takes it back before a waiting thread wakes, which resets
    that thread's wait (equinox's 100,000-step loop ran 17 s while a thread importing numba
    got nowhere). A third of the time while they work; a twentieth while a call is watched
    (so that the watcher sees its deadline pass); never otherwise."""
    now = time.perf_counter()
    if now - _last_yield[0] >= _yielding[0]:
        time.sleep(YIELD_SLEEP)
        _last_yield[0] = time.perf_counter()


def _python_kernel(source, objects, native_ready):
    """The kernel as ordinary Python on NumPy (``objects``: the impls and params it calls;
    ``native_ready``: the loop's flag a while kernel reads between iterations)."""
    namespace = {"np": np, "_normalized": _normalized, "_HandOver": HandOver,
                 "_native_ready": native_ready, "_yielding": _yielding,
                 "_yield_to_background": _yield_to_background, **objects}
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    exec(compile(source, f"<remat loop {digest}>", "exec"), namespace)
    kernel = namespace["kernel"]
    kernel.source_lines = source.splitlines()
    return kernel


def raised_at(kernel, error):
    """The user's line of the effect in a Python-tier ``kernel`` that raised ``error``, or
    None."""
    tb, line = error.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code is kernel.__code__:
            line = tb.tb_lineno
        tb = tb.tb_next
    text = kernel.source_lines[line - 1] if line else ""
    return text.rsplit("  # at ", 1)[1] if "  # at " in text else None


# --- compiling and caching -------------------------------------------------------------------


# what a cached kernel's machine code depends on besides its source: a change to the helpers
# it calls, to numba or to Python makes every kernel compile afresh
_KERNELS_DIGEST = hashlib.sha256(Path(__file__).with_name("native_kernels.py").read_bytes()
                                 + sys.version.encode()).hexdigest()


@functools.cache
def _numba_version():
    """numba's version, read without importing it (a loop asks before it knows it will
    compile)."""
    return importlib.metadata.version("numba") if numba is not None else ""


def _cache_key(source):
    digest = hashlib.sha256(f"{source}\0{_KERNELS_DIGEST}\0{_numba_version()}".encode())
    return digest.hexdigest()[:24]


def _compiled_types_path(source):
    """Where a compiled kernel's argument types are kept: a loop that finds them loads its
    machine code from numba's cache at once, instead of running hot first."""
    return CACHE_DIR / f"remat_loop_{_cache_key(source)}.types"


def _record_types(source, types):
    path = _compiled_types_path(source)
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(pickle.dumps(types))
    os.replace(tmp, path)  # atomic, as the source file


def _recorded_types(source):
    """The argument types a kernel of ``source`` was compiled for, in this process or an
    earlier one, or None."""
    try:
        return pickle.loads(_compiled_types_path(source).read_bytes())
    except Exception:  # none recorded, or unreadable: the loop runs hot first
        return None


def _source_file(source):
    """The path of the kernel's (content-named) source file in the cache, written once, and
    its module's name."""
    key = _cache_key(source)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = CACHE_DIR / f"remat_loop_{key}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(_NATIVE_HEADER + source)
        os.replace(tmp, path)  # atomic: concurrent processes write the same content
    return path, f"remat_native_loop_{key}"


def _import_kernel(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # numba's cache finds the kernel's globals through it
    spec.loader.exec_module(module)
    return module.kernel


def _load(source):
    """The kernel dispatcher of ``source``, from its file in the cache."""
    return _import_kernel(*_source_file(source))


def _compile_types(kernel, types):
    with warnings.catch_warnings():  # (np.dot on strided views: numba copies them)
        warnings.simplefilter("ignore", numba.NumbaPerformanceWarning)
        kernel.compile(types)


def serve_compiles():
    """The compiling process (``_compile_elsewhere``), at a lower priority than the process
    that asked: each line of its input is one batch, a JSON list of the kernels'
    ``[path, name, types_path]`` (the source file ``path``, compiled for the pickled argument
    types in ``types_path``); it answers each batch with a line, ``1`` where every compile
    succeeded, else ``0`` (a kernel that fails does not stop the others: the asking process
    compiles it and meets the error itself). numba's cache keeps the machine code for the
    asking process. It exits when its input ends or after ``COMPILER_IDLE_EXIT`` seconds
    without a batch."""
    import select

    if hasattr(os, "nice"):
        os.nice(10)
    while select.select([sys.stdin], [], [], COMPILER_IDLE_EXIT)[0]:
        line = sys.stdin.readline()
        if not line:
            return
        failed = 0
        for path, name, types_path in json.loads(line):
            try:
                _compile_types(_import_kernel(Path(path), name),
                               pickle.loads(Path(types_path).read_bytes()))
            except Exception:
                failed += 1
        sys.stdout.write("0\n" if failed else "1\n")
        sys.stdout.flush()


_COMPILER = "from remat.exec.native import serve_compiles; serve_compiles()"
COMPILE_TIMEOUT = 600.0
COMPILER_IDLE_EXIT = 60.0  # (numba's start costs a new process about a second)
_compiler_process = [None]  # the compiling process, while it runs


def _forget_compiler():
    _compiler_process[0] = None  # (a forked child does not share its parent's)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_compiler)


def _compiling_process():
    """The compiling process: the running one, or a new one."""
    process = _compiler_process[0]
    if process is None or process.poll() is not None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        process = subprocess.Popen([sys.executable, "-c", _COMPILER], env=env, text=True,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
        _compiler_process[0] = process
    return process


def _ask_compiler(batch):
    """The compiling process's answer to ``batch``: whether every compile succeeded, or None
    where the process ended without answering and was not killed for its time."""
    try:
        process = _compiling_process()
        process.stdin.write(json.dumps(batch) + "\n")
        process.stdin.flush()
    except OSError:
        _compiler_process[0] = None
        return None
    deadline = threading.Timer(COMPILE_TIMEOUT, process.kill)
    deadline.start()
    try:  # (blocked reading the pipe: no Python code runs until it answers)
        with _waiting_without_gil():
            answer = process.stdout.readline()
    finally:
        deadline.cancel()
    if answer:
        return answer.strip() == "1"
    _compiler_process[0] = None
    return False if process.wait() < 0 else None  # (killed: by the deadline, say)


def _compile_elsewhere(jobs):
    """numba's compiles of kernels ``[(source, types)]``, run in another process: in this one
    they would contend for the GIL with the Python tier still running the loop, and take
    several times as long (the ODE benchmark's two kernels: native after 41-55 s that way,
    after 19-20 s then; 14 s to compile alone). One process compiles what is queued, a batch
    at a time (``_compile_queued``): a plan's many clusters, hot at once, each in a process of
    its own, took a GPT step from 0.5 s to 7 s on two cores while they compiled. It stays for
    the next batch (``serve_compiles``): a new process's start, numba's import and first
    compile, cost each batch most of a second. This process then loads the machine code from
    the cache. Whether every compile succeeded."""
    batch, types_paths = [], []
    for source, types in jobs:
        path, name = _source_file(source)
        types_path = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.types")
        types_path.write_bytes(pickle.dumps(types))
        batch.append([str(path), name, str(types_path)])
        types_paths.append(types_path)
    try:
        answer = _ask_compiler(batch)
        if answer is None:  # (a process that had just left, idle: a new one)
            answer = _ask_compiler(batch)
        return bool(answer)
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        for types_path in types_paths:
            types_path.unlink(missing_ok=True)


_switching = [0, None]  # threads loading a kernel, the switch interval before the first
_switching_lock = threading.Lock()


@contextlib.contextmanager
def _prompt_switching():
    """The GIL handed over sooner while a background thread loads a kernel (numba's import and
    the machine code from the cache). That thread reads hundreds of files and gives the GIL up
    at each read; a loop running on the Python tier meanwhile then held it for the whole
    switch interval (5 ms) every time: a cached kernel took 22 s to load during a long first
    call, and 3.4 s at 0.1 ms."""
    with _switching_lock:
        if _switching[0] == 0:
            _switching[1] = sys.getswitchinterval()
            sys.setswitchinterval(min(LOADING_SWITCH_INTERVAL, _switching[1]))
        _switching[0] += 1
        _background[0] += 1
    _update_yielding()
    try:
        yield
    finally:
        with _switching_lock:
            _switching[0] -= 1
            _background[0] -= 1
            if _switching[0] == 0:
                sys.setswitchinterval(_switching[1])
        _update_yielding()


@contextlib.contextmanager
def _waiting_without_gil():
    """Inside ``_prompt_switching``: this thread waits without the GIL (on the compiling
    process), so Python-tier loops need not yield to it meanwhile."""
    with _switching_lock:
        _background[0] -= 1
    _update_yielding()
    try:
        yield
    finally:
        with _switching_lock:
            _background[0] += 1
        _update_yielding()


_queue = []  # (loop, argument types) waiting for the compiling process
_queue_lock = threading.Lock()
_compiler = None  # the thread that runs the compiling processes, while there is work


def _compile_later(loop, types):
    """Queue ``loop``'s compile for the one background compiler; the loop's thread is it."""
    global _compiler
    with _queue_lock:
        _queue.append((loop, types))
        if _compiler is None:
            _compiler = threading.Thread(target=_compile_queued, name="remat-native-compile",
                                         daemon=True)
            _compiler.start()
        loop.thread = _compiler


def _compile_queued():
    """Compile what is queued, in batches, until the queue is empty."""
    global _compiler
    while True:
        time.sleep(BATCH_WINDOW)  # (loops hot together compile together)
        with _queue_lock:
            batch = _queue[:]
            _queue.clear()
            if not batch:
                _compiler = None
                return
        # (the GIL handed over promptly throughout: writing the kernels' files and pickling
        # their types gave it up at each file operation, and then waited the running Python
        # tier's whole switch interval for it: 13 s before the compiling process started)
        with _prompt_switching():
            try:
                _compile_elsewhere([(loop.source, types) for loop, types in batch])
            except Exception:  # (then each compiles here, and meets its error itself)
                pass
            for loop, types in batch:
                loop._compile(types)


def canonical(arg, read_only=True):
    """An operand as kernels take it: rank-0 values as NumPy scalars, arrays C-contiguous and,
    unless the kernel writes them (a scan's stacked ys), read-only: so a kernel's argument
    types never change between calls (an operand once writable and later read-only, an input
    where an intermediate was, had no compiled signature)."""
    arg = np.asarray(arg)
    if not arg.shape:
        return arg[()]
    arg = np.ascontiguousarray(arg)
    if read_only and arg.flags.writeable:
        arg = arg.view()
        arg.flags.writeable = False
    return arg


def canonical_operands(args, written):
    """``args`` as a native kernel takes them, those at the positions ``written`` written by
    it."""
    return [a if type(a) is int else canonical(a, i not in written) for i, a in enumerate(args)]


class Loop:
    """One loop body's kernels: the Python one from the start, time spent in it, then the
    native one."""

    __slots__ = ("source", "values", "exits", "python", "native_ready", "spent", "kernel",
                 "state", "error", "thread", "waited", "__weakref__")

    def __init__(self, python, source, error=None, values=(), exits=False, native_ready=None):
        self.python = python  # the Python tier's kernel, or None (the plans run the loop)
        # [whether a running Python-tier call should hand over to the native kernel] (read
        # by a while kernel between iterations: a long first call goes native once compiled)
        self.native_ready = native_ready if native_ready is not None else [False]
        self.source = source  # the native kernel's source, or None
        self.values = values  # its typed constants, its last operand where there are any
        self.exits = exits  # whether it may exit at a branch it has no code for
        self.spent = 0.0
        self.kernel = None
        self.state = "cold" if source is not None else \
            "unsupported" if error is None or isinstance(error, Unsupported) else "failed"
        self.error = error  # why it is not native (unsupported, or numba's failure)
        self.thread = None
        self.waited = False  # whether a call waited for a warm kernel's loading

    def warm_start(self):
        """Load the machine code an earlier compile of this kernel left in the cache, on a
        background thread while the first call runs on the Python tier; later calls wait for
        it (``ready``)."""
        if self.state != "cold" or not enabled() or _synchronous or \
                not _compiled_types_path(self.source).exists():
            return
        self.state = "loading"
        self.thread = threading.Thread(target=self._load_recorded, name="remat-native-load",
                                       daemon=True)
        _pending.add(self)
        self.thread.start()

    def _load_recorded(self):
        with _prompt_switching():
            types = _recorded_types(self.source)
            if types is None:
                self.state = "cold"  # the Python tier runs hot first, as without a cache
                _pending.discard(self)
                return
            self._compile(types)

    def observe(self, seconds, args, written=()):
        """The Python tier ran for ``seconds`` on ``args`` (those at the positions ``written``
        written by the kernel): start compiling once hot."""
        self.heat(seconds, lambda: tuple(
            numba.typeof(a) for a in self.native_operands(args, written)))

    def native_operands(self, args, written=()):
        """``args`` as the native kernel takes them (``canonical_operands``), its constants
        last."""
        operands = canonical_operands(args, written)
        return operands + [self.values] if self.values else operands

    def heat(self, seconds, types):
        """Add ``seconds`` spent on the Python side: once hot, compile for the argument types
        ``types()`` gives."""
        with _heat_lock:  # (a call's thread and the watcher of long calls, ``watch``)
            if self.state == "loading":
                self.spent += seconds  # (a warm kernel is being loaded: later calls wait)
            if self.state != "cold" or not enabled():
                return
            self.spent += seconds
            if self.spent < HOT_SECONDS:
                return
            self.state = "compiling"
            _typing[0] += 1  # (``wait`` waits for it: its compile is not queued yet)
        try:
            try:
                types = types()
            except ValueError as e:  # (an operand type numba does not have)
                self.error, self.state = e.with_traceback(None), "failed"
                return
            _pending.add(self)
            if _synchronous:
                self._compile(types)
            else:
                _compile_later(self, types)
        finally:
            with _heat_lock:
                _typing[0] -= 1

    def _compile(self, types):
        """Load the kernel, compiled for ``types``: from the cache where an earlier run or the
        compiling process (``_compile_queued``) compiled it, else compiled here."""
        try:
            kernel = _load(self.source)
            _compile_types(kernel, types)  # (loaded from the cache where compiled elsewhere)
            kernel.disable_compile()  # a call with other types must not compile in line
            if self.state == "compiling":
                _record_types(self.source, types)
            _dispatchers[self.source] = kernel
            self.use(kernel, "ready")
        except Exception as e:  # numba could not type it: the Python kernel stays
            self.error, self.state = e.with_traceback(None), "failed"
        finally:
            _pending.discard(self)

    def mismatched(self):
        """A call's argument types are not those the kernel was compiled for (a kernel loaded
        from the cache was compiled for the types another process recorded for the same
        source: a float64 body's, say). The loop goes back to the Python tier, to compile
        for its own types once hot again."""
        self.use(None, "cold")
        self.spent, self.waited = 0.0, True

    def exited(self, error):
        """The native kernel reached a branch it has no code for (``BranchNotNative``): the
        Python tier reruns the call, and runs the loop from now on (a branch taken once, such
        as an error's, may well be taken again)."""
        self.use(None, "exited")
        self.error = error.with_traceback(None)

    def use(self, kernel, state):
        """Run on ``kernel`` from now on (None: the Python tier), in ``state``; a running
        Python-tier while call hands over to it (``native_ready``)."""
        self.kernel, self.state = kernel, state
        self.native_ready[0] = kernel is not None and enabled()

    def ready(self):
        if self.state == "loading" and self.spent and not self.waited:
            self.waited = True  # (the first call never waits, a later one once, and not long:
            self.thread.join(WARM_WAIT)  # a cache numba cannot use means compiling afresh)
        return self.kernel if self.state == "ready" and enabled() else None


_heat_lock = threading.Lock()
_typing = [0]  # hot loops whose operands are being typed (numba's import, the first time)


# --- long calls: hot while they run --------------------------------------------------------

_running = {}  # token -> (deadline, loop, operands, written): Python-tier calls being watched
_running_changed = threading.Condition()
_watcher = None  # the thread that watches them, once one has run
_watcher_asleep = False  # whether it waits for a call (after a second with none)
WATCH_PERIOD = 0.02  # how often it looks, while calls come


def watch(loop, args, written=()):
    """Watch a Python-tier call of ``loop`` on ``args`` (those at the positions ``written``
    written by it), starting now: should it outlast the loop's heat budget, the loop is hot at
    once and compiles while the call goes on (the heat is otherwise added after a call:
    equinox's 100,000-step loop ran 23 s before compiling, and its second call 21 s more).
    A token for ``unwatch`` once the call returns, or None. Cheap: a tiny loop's call costs
    a dictionary entry (the watcher looks every ``WATCH_PERIOD`` while calls come)."""
    global _watcher
    if loop.state != "cold" or not enabled() or _synchronous:
        return None
    token = object()
    with _running_changed:
        _running[token] = (time.perf_counter() + HOT_SECONDS - loop.spent, loop, args, written)
        _update_yielding()
        if _watcher is None:
            _watcher = threading.Thread(target=_watch, name="remat-native-watch", daemon=True)
            _watcher.start()
        elif _watcher_asleep:
            _running_changed.notify()
    return token


def unwatch(token):
    if token is not None:
        with _running_changed:
            _running.pop(token, None)
            _update_yielding()


def _watch():
    """Heat the loops whose watched calls outlast their deadlines (``watch``)."""
    global _watcher_asleep
    last_call = time.perf_counter()
    while True:
        with _running_changed:
            now = time.perf_counter()
            if _running:
                last_call = now
            elif now - last_call > 1.0:
                _watcher_asleep = True
                while not _running:
                    _running_changed.wait()
                _watcher_asleep = False
                continue
            due = [token for token, entry in _running.items() if entry[0] <= now]
            entries = [_running.pop(token) for token in due]
            if entries:
                _update_yielding()
        if not entries:
            time.sleep(WATCH_PERIOD)
            continue
        with _prompt_switching():  # (numba's import, for the argument types, reads files)
            for _, loop, args, written in entries:
                loop.observe(HOT_SECONDS, args, written)


_pending = weakref.WeakSet()
# source -> its kernel, once loaded in this process: a new loop of a source another loop has
# compiled (a buffer of another size, the same body traced again) is native from its first call
_dispatchers = {}
_loops = weakref.WeakKeyDictionary()  # body jaxpr -> {static params: Loop}
_synchronous = False


def enabled():
    return numba is not None and config.remat_native_loops


def _loop(jaxpr, key, write):
    """The loop state of a body: ``write(native)`` gives a tier's (source, objects)."""
    table = _loops.setdefault(jaxpr, {})
    loop = table.get(key)
    if loop is None:
        python = source = error = None
        values, exits, native_ready = (), False, [False]
        try:
            python = _python_kernel(*write(False)[:2], native_ready)
            if numba is not None:
                try:
                    source, _, values, exits = write(True)
                except Unsupported:
                    raise
                except Exception as e:  # a writer's bug must not break a loop that runs
                    error = e.with_traceback(None)
        except Unsupported as e:
            error = e.with_traceback(None)  # (its frames would keep the body's consts alive)
        loop = table[key] = Loop(python, source, error, values, exits, native_ready)
        kernel = _dispatchers.get(source)
        if kernel is not None:  # (compiled in this process for a loop of the same source)
            loop.use(kernel, "ready")
        else:
            loop.warm_start()
    return loop


def _optimized(closed):
    """A body as its kernel is written from: its consts leading its operands, optimized
    (only when a kernel is written: a loop's later calls find it in ``_loops``)."""
    return optimize_jaxpr(convert_constvars_jaxpr(closed.jaxpr))


def scan_loop(closed, num_consts, num_carry, reverse, donated=()):
    """The native state of a scan over ``closed`` (its consts lead the kernel's operands;
    ``donated``: the carries it may write into)."""
    return _loop(closed, ("scan", num_consts, num_carry, reverse, donated),
                 lambda native: scan_source(_optimized(closed), len(closed.consts) + num_consts,
                                            num_carry, reverse, native, donated))


def while_loop(cond, body, cond_nconsts, body_nconsts, donated=()):
    """The native state of a while loop (keyed on its body; its cond is part of the key)."""
    return _loop(body, ("while", cond, cond_nconsts, body_nconsts, donated),
                 lambda native: while_source(_optimized(cond), _optimized(body),
                                             len(cond.consts) + cond_nconsts,
                                             len(body.consts) + body_nconsts, native, donated))


def is_dispatch_error(error):
    """Whether ``error`` is numba's refusal of arguments of types a kernel has no compiled
    signature for (raised before the kernel runs)."""
    return isinstance(error, TypeError) and str(error).startswith("No matching definition")


def wait():
    """Block until every kernel being compiled is ready (or has failed): a loop the watcher
    has made hot may still be typing its operands (numba's first import), its compile not yet
    queued."""
    while _typing[0]:
        time.sleep(0.001)
    for loop in list(_pending):
        if loop.thread is not None:
            loop.thread.join()


def is_eager():
    """Whether native forms compile at their first run (inside ``eager``): plans then generate
    their code at their first run too, so that their clusters run natively at once."""
    return _synchronous


@contextlib.contextmanager
def eager():
    """Inside, a loop with a native form compiles at its first run, before it returns (tests)."""
    global _synchronous, HOT_SECONDS
    saved = _synchronous, HOT_SECONDS
    _synchronous, HOT_SECONDS = True, 0.0
    try:
        yield
    finally:
        _synchronous, HOT_SECONDS = saved
