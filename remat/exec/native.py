"""Loop kernels: a ``scan`` or ``while_loop`` whose body works on tiny arrays runs as one
function with the loop inside it (its source from ``loop_source``), so an iteration costs its
NumPy calls (or machine code) instead of a plan's per-step dispatch and per-buffer bookkeeping.

Two tiers. The Python tier is used from a loop's first call. The native tier compiles the
kernel with numba (NumPy's error model: no division checks) once the loop is *hot*
(``HOT_SECONDS`` spent in it), on a background thread while the Python tier keeps running; it
is used from the next call on, and a kernel that fails to compile leaves its loop on the
Python tier. Native kernels are written as source files under the cache directory
(``REMAT_CACHE_DIR``, default ``~/.cache/remat``), named by a hash of their source, the helpers
module and numba's version, and compiled with numba's on-disk cache: a new process loads a
loop's machine code in a fraction of a second.

The flag ``remat_native_loops`` (environment ``REMAT_NATIVE_LOOPS=0|1``; default on) turns the
native tier off; without numba installed it is off.
"""

import contextlib
import hashlib
import importlib.util
import os
import sys
import threading
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


def _python_kernel(source, objects):
    """The kernel as ordinary Python on NumPy (``objects``: the impls and params it calls)."""
    namespace = {"np": np, "_normalized": _normalized, **objects}
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


def _cache_key(source):
    version = numba.__version__ if numba is not None else ""
    digest = hashlib.sha256(f"{source}\0{_KERNELS_DIGEST}\0{version}".encode())
    return digest.hexdigest()[:24]


def _load(source):
    """The kernel dispatcher of ``source``, from its (content-named) file in the cache."""
    key = _cache_key(source)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = CACHE_DIR / f"remat_loop_{key}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(_NATIVE_HEADER + source)
        os.replace(tmp, path)  # atomic: concurrent processes write the same content
    name = f"remat_native_loop_{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # numba's cache finds the kernel's globals through it
    spec.loader.exec_module(module)
    return module.kernel


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

    __slots__ = ("source", "python", "spent", "kernel", "state", "error", "thread",
                 "__weakref__")

    def __init__(self, python, source, error=None):
        self.python = python  # the Python tier's kernel, or None (the plans run the loop)
        self.source = source  # the native kernel's source, or None
        self.spent = 0.0
        self.kernel = None
        self.state = "cold" if source is not None else \
            "unsupported" if error is None or isinstance(error, Unsupported) else "failed"
        self.error = error  # why it is not native (unsupported, or numba's failure)
        self.thread = None

    def observe(self, seconds, args, written=()):
        """The Python tier ran for ``seconds`` on ``args`` (those at the positions ``written``
        written by the kernel): start compiling once hot."""
        self.heat(seconds, lambda: tuple(
            numba.typeof(a) for a in canonical_operands(args, written)))

    def heat(self, seconds, types):
        """Add ``seconds`` spent on the Python side: once hot, compile for the argument types
        ``types()`` gives."""
        if self.state != "cold" or not enabled():
            return
        self.spent += seconds
        if self.spent >= HOT_SECONDS:
            self.state = "compiling"
            try:
                types = types()
            except ValueError as e:  # (an operand type numba does not have)
                self.error, self.state = e.with_traceback(None), "failed"
                return
            if _synchronous:
                self._compile(types)
            else:
                self.thread = threading.Thread(target=self._compile, args=(types,),
                                               name="remat-native-compile", daemon=True)
                _pending.add(self)
                self.thread.start()

    def _compile(self, types):
        try:
            kernel = _load(self.source)
            with warnings.catch_warnings():  # (np.dot on strided views: numba copies them)
                warnings.simplefilter("ignore", numba.NumbaPerformanceWarning)
                kernel.compile(types)
            kernel.disable_compile()  # a call with other types must not compile in line
            self.kernel, self.state = kernel, "ready"
        except Exception as e:  # numba could not type it: the Python kernel stays
            self.error, self.state = e.with_traceback(None), "failed"
        finally:
            _pending.discard(self)

    def ready(self):
        return self.kernel if self.state == "ready" and enabled() else None


_pending = weakref.WeakSet()
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
        try:
            python = _python_kernel(*write(False))
            if numba is not None:
                try:
                    source, _ = write(True)
                except Unsupported:
                    raise
                except Exception as e:  # a writer's bug must not break a loop that runs
                    error = e.with_traceback(None)
        except Unsupported as e:
            error = e.with_traceback(None)  # (its frames would keep the body's consts alive)
        loop = table[key] = Loop(python, source, error)
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


def wait():
    """Block until every kernel being compiled is ready (or has failed)."""
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
