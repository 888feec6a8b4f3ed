"""``remat.debug``: looking at values inside transformed code, as ``jax.debug``.

``print``/``log``/``callback``/``breakpoint`` stage a debugging callback (see
``remat.callback``) that runs with the concrete values wherever the program runs: at once
eagerly, when the executor reaches it under ``jit``, once per batch element under ``vmap``,
once per iteration in a ``scan``, in the branch taken by a ``cond``; under ``grad`` it sees the
primal values in the forward pass. It never changes the computation.
"""

import cmd
import inspect
import logging
import os
import pprint
import string
import sys
import threading
import traceback

import numpy as np

from remat import core
from remat.devices import SHARDING
from remat.source_info import current as current_source
from remat.transforms.callback import debug_callback_p, debug_print_p, merge_static
from remat.tree_util import tree_flatten, tree_map, tree_unflatten

__all__ = ["DebugEffect", "OrderedDebugEffect", "breakpoint", "callback",
           "inspect_array_sharding", "log", "print", "visualize_array_sharding",
           "visualize_sharding"]

_builtin_print = print


class DebugEffect:
    """The effect of a debugging callback: kept by dead-code elimination, never merged,
    and replayed (not refused) by rematerialization."""

    def __repr__(self):
        return "Debug"


class OrderedDebugEffect(DebugEffect):
    """A debugging callback ordered with the other ordered ones (``ordered=True``)."""

    def __repr__(self):
        return "OrderedDebug"


def _split_args(args, kwargs):
    """``(in_tree, array leaves, ((position, value), ...) of the other leaves)``."""
    leaves, in_tree = tree_flatten((args, kwargs))
    dynamic, static = [], []
    for i, leaf in enumerate(leaves):
        if core.is_array_like(leaf):
            dynamic.append(leaf)
        else:
            static.append((i, leaf))
    return in_tree, dynamic, tuple(static)


# --- callback ----------------------------------------------------------------------------------


class _StaticCallback:
    """The user's callback with its non-array arguments put back in place."""

    __slots__ = ("callback", "in_tree", "static_args")

    def __init__(self, callback, in_tree, static_args):
        self.callback, self.in_tree, self.static_args = callback, in_tree, static_args

    def __call__(self, *dyn_args):
        args, kwargs = merge_static(self.in_tree, dyn_args, self.static_args)
        self.callback(*args, **kwargs)
        return ()

    @property
    def __name__(self):
        return getattr(self.callback, "__name__", type(self.callback).__name__)


def callback(callback=None, *args, ordered=False, partitioned=False, **kwargs):
    """Call ``callback(*args, **kwargs)`` (on Arrays; it returns nothing) wherever the
    program runs. Two forms: ``callback(f, *args)`` and ``callback(ordered=True)(f, *args)``."""

    def staged(fn, *c_args, **c_kwargs):
        if not callable(fn):
            raise TypeError(f"first argument to jax.debug.callback must be callable, but got "
                            f"an object of type {type(fn)}")
        in_tree, dynamic, static = _split_args(c_args, c_kwargs)
        debug_callback_p.bind(*dynamic, callback=_StaticCallback(fn, in_tree, static),
                              ordered=ordered, partitioned=partitioned)

    if callback is not None:
        staged(callback, *args, **kwargs)
        return None
    if args or kwargs:
        raise TypeError(f"debug_callback received unexpected arguments in the two-call form: "
                        f"{args=} {kwargs=}")
    return staged


# --- print and log -----------------------------------------------------------------------------


class _FormatChecker(string.Formatter):
    """Checks a format string against its arguments without formatting anything."""

    def format_field(self, value, format_spec):
        return ""

    def check_unused_args(self, used_args, args, kwargs):
        unused = [a for i, a in enumerate(args) if i not in used_args]
        if unused:
            raise ValueError(f"Unused positional arguments to `jax.debug.print`: {unused}")
        unused_kw = [k for k in kwargs if k not in used_args]
        if unused_kw:
            raise ValueError(f"Unused keyword arguments to `jax.debug.print`: {unused_kw}. You "
                             f"may be passing an f-string (i.e, `f\"{{x}}\"`) into "
                             f"`jax.debug.print` and instead should pass in a regular string.")


_checker = _FormatChecker()


def _staged_print(fmt, args, kwargs, ordered, partitioned, skip_format_check, level):
    if not isinstance(fmt, str):
        raise TypeError(f"jax.debug.print: the format must be a string, got {fmt!r}")
    if not skip_format_check:
        _checker.format(fmt, *args, **kwargs)
    has_placeholders = bool(fmt) and next(iter(string.Formatter().parse(fmt)))[1] is not None
    in_tree, dynamic, static = _split_args(args, kwargs)
    record = None
    if level is not None:
        where = current_source()
        record = (level, where.file if where else "(unknown file)", where.line if where else 0)
    debug_print_p.bind(*dynamic, fmt=fmt, has_placeholders=has_placeholders, in_tree=in_tree,
                       logging_record=record,
                       np_printoptions=tuple(np.get_printoptions().items()), ordered=ordered,
                       partitioned=partitioned, static_args=static)


def print(fmt=None, *args, ordered=False, partitioned=False, skip_format_check=False,  # noqa: A001
          **kwargs):
    """Print ``fmt.format(*args, **kwargs)`` with the values as they are when the program
    runs (not an f-string: the values are not known while tracing). Two forms:
    ``print("x={x}", x=x)`` and ``print(ordered=True)("x={x}", x=x)``."""
    return _print_or_log(fmt, args, kwargs, ordered, partitioned, skip_format_check, None,
                         "debug_print")


def log(fmt=None, *args, ordered=False, partitioned=False, skip_format_check=False, **kwargs):
    """As ``print``, to the ``remat.debug`` logger at INFO level (attributed to the user's
    source line) instead of stdout."""
    return _print_or_log(fmt, args, kwargs, ordered, partitioned, skip_format_check,
                         logging.INFO, "debug_log")


def _print_or_log(fmt, args, kwargs, ordered, partitioned, skip_format_check, level, name):
    if fmt is not None:
        _staged_print(fmt, args, kwargs, ordered, partitioned, skip_format_check, level)
        return None
    if args or kwargs:
        raise TypeError(f"{name} received unexpected arguments in the two-call form: "
                        f"{args=} {kwargs=}")
    return lambda fmt, *a, **kw: _staged_print(fmt, a, kw, ordered, partitioned,
                                               skip_format_check, level)


# --- breakpoint --------------------------------------------------------------------------------

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class DebuggerFrame:
    """A Python frame seen by the debugger: its file, line, source and locals (traced
    values replaced by their concrete values when the breakpoint runs)."""

    __slots__ = ("filename", "locals", "globals", "code_context", "source", "lineno", "offset")

    def __init__(self, filename, locals, globals, code_context, source, lineno, offset):  # noqa: A002
        self.filename, self.locals, self.globals = filename, locals, globals
        self.code_context, self.source, self.lineno, self.offset = (code_context, source,
                                                                    lineno, offset)

    @classmethod
    def from_frameinfo(cls, info):
        try:
            lines, start = inspect.getsourcelines(info.frame)
            source = [line.rstrip("\n") for line in lines]
            offset = info.lineno - max(start, 1)
            if offset >= len(source):
                source, offset = [], None
        except (OSError, TypeError):
            source, offset = [], None
        return cls(info.filename, dict(info.frame.f_locals), {}, info.code_context, source,
                   info.lineno, offset)


class CliDebugger(cmd.Cmd):
    """A small command-line debugger over the captured frames (JAX's ``jdb``): ``p``/``pp``
    expressions, ``u``/``d`` between frames, ``l``ist, ``w``here, ``c``ontinue, ``q``uit."""

    prompt = "(jdb) "

    def __init__(self, frames, thread_id, stdin=None, stdout=None, completekey="tab"):
        super().__init__(stdin=stdin, stdout=stdout, completekey=completekey)
        self.use_rawinput = stdin is None
        self.frames, self.frame_index, self.thread_id = frames, 0, thread_id
        self.intro = "Entering jdb:"

    def current_frame(self):
        return self.frames[self.frame_index]

    def evaluate(self, expr):
        frame = self.current_frame()
        return eval(expr, {}, {**frame.globals, **frame.locals})  # noqa: S307 - a debugger

    def _error_message(self):
        exc_type, exc = sys.exc_info()[:2]
        _builtin_print("***", traceback.format_exception_only(exc_type, exc)[-1].strip(),
                       file=self.stdout)

    def default(self, line):
        self.do_p(line)

    def emptyline(self):
        return False

    def do_p(self, arg):
        """p expression: evaluate and print the value of an expression"""
        try:
            _builtin_print(repr(self.evaluate(arg)), file=self.stdout)
        except Exception:  # noqa: BLE001 - reported to the user, as pdb does
            self._error_message()

    def do_pp(self, arg):
        """pp expression: evaluate and pretty-print the value of an expression"""
        try:
            _builtin_print(pprint.pformat(self.evaluate(arg)), file=self.stdout)
        except Exception:  # noqa: BLE001 - reported to the user, as pdb does
            self._error_message()

    def print_context(self, num_lines=2):
        frame = self.current_frame()
        out = [f"> {frame.filename}({frame.lineno})"]
        if frame.offset is not None:
            for i, line in enumerate(frame.source):
                if frame.offset - 1 - num_lines <= i <= frame.offset + num_lines:
                    out.append(("->  " if i == frame.offset else "    ") + line)
        _builtin_print("\n".join(out), file=self.stdout)

    def do_up(self, arg):
        """u(p): move up a stack frame"""
        if self.frame_index == len(self.frames) - 1:
            _builtin_print("At topmost frame.", file=self.stdout)
        else:
            self.frame_index += 1
        self.print_context()

    def do_down(self, arg):
        """d(own): move down a stack frame"""
        if self.frame_index == 0:
            _builtin_print("At bottommost frame.", file=self.stdout)
        else:
            self.frame_index -= 1
        self.print_context()

    def do_list(self, arg):
        """l(ist): list the source around the current line"""
        self.print_context(num_lines=5)

    def do_where(self, arg):
        """w(here): print the stack, most recent frame last"""
        out = ["Traceback:"]
        for frame in self.frames[::-1]:
            out.append(f'  File "{frame.filename}", line {frame.lineno}')
            out.append("    " + (frame.source[frame.offset].strip()
                                 if frame.offset is not None else "<no source>"))
        _builtin_print("\n".join(out), file=self.stdout)

    def do_continue(self, arg):
        """c(ont(inue)): continue the program"""
        return True

    def do_quit(self, arg):
        """q(uit): exit the program"""
        sys.exit(0)

    do_u, do_d, do_l, do_w, do_bt = do_up, do_down, do_list, do_where, do_where
    do_c = do_cont = do_continue
    do_q = do_exit = do_EOF = do_quit

    def run(self):
        while True:
            try:
                self.cmdloop()
                break
            except KeyboardInterrupt:
                _builtin_print("--Keyboard Interrupt--", file=sys.stdout)


_debug_lock = threading.Lock()


def _user_frames(filter_frames):
    infos = inspect.stack()[2:]  # less this module's frames
    if filter_frames:
        infos = [i for i in infos
                 if not os.path.abspath(i.filename).startswith(_PACKAGE_DIR)]
    return [DebuggerFrame.from_frameinfo(i) for i in infos]


def breakpoint(*, backend=None, filter_frames=True, num_frames=None, ordered=False,  # noqa: A001
               token=None, **kwargs):
    """Stop when the program reaches this point and open ``jdb`` on the user's frames, their
    traced locals holding their concrete values (once per batch element under vmap).
    ``kwargs`` go to the debugger (``stdin=``, ``stdout=``). With ``token`` (a pytree), the
    breakpoint runs once its value is computed and the token is returned."""
    if token is not None and ordered:
        raise ValueError("`ordered` and `token` are mutually exclusive arguments.")
    if backend not in (None, "cli"):
        raise ValueError(f"Unknown debugger backend {backend!r}: remat has 'cli'")
    frames = _user_frames(filter_frames)
    if num_frames is not None:
        frames = frames[:num_frames]
    # traced locals are passed to the callback; everything else is kept as it is
    traced = []
    for frame in frames:
        for name, value in frame.locals.items():
            try:
                leaves = tree_flatten(value)[0]
            except Exception:  # noqa: BLE001 - a local that cannot be flattened stays as is
                continue
            if any(isinstance(x, core.Tracer) for x in leaves):
                traced.append((frame, name, value))
    flat_values, values_tree = tree_flatten([v for _, _, v in traced])

    def enter(*concrete):
        for (frame, name, _), value in zip(traced, tree_unflatten(values_tree, concrete)):
            frame.locals[name] = value
        thread_id = None
        if threading.current_thread() is not threading.main_thread():
            thread_id = threading.get_ident()
        with _debug_lock:
            CliDebugger(frames, thread_id, **kwargs).run()

    dynamic = [x for x in flat_values if core.is_array_like(x)]
    positions = [i for i, x in enumerate(flat_values) if core.is_array_like(x)]
    static = [(i, x) for i, x in enumerate(flat_values) if not core.is_array_like(x)]

    def enter_flat(*dyn):
        merged = dict(static)
        merged.update(zip(positions, dyn))
        enter(*[merged[i] for i in range(len(flat_values))])

    if token is None:
        debug_callback_p.bind(*dynamic, callback=enter_flat, ordered=ordered,
                              partitioned=False)
        return None
    token_leaves, token_tree = tree_flatten(token)
    debug_callback_p.bind(*token_leaves, *dynamic,
                          callback=lambda *xs: enter_flat(*xs[len(token_leaves):]),
                          ordered=False, partitioned=False)
    return tree_unflatten(token_tree, token_leaves)


# --- sharding ----------------------------------------------------------------------------------


def inspect_array_sharding(value, *, callback):
    """Call ``callback(sharding)`` for each array leaf of ``value``. Every remat array lives
    whole on the one CPU device, so this is known while tracing: the callback runs at once."""
    tree_map(lambda leaf: callback(SHARDING), value)


def visualize_sharding(shape, sharding, *, use_color=True, scale=1.0, min_width=9,
                       max_width=80, color_map=None):
    """Draw how an array of ``shape`` is laid out over devices: one box, the CPU."""
    if len(shape) > 2 or len(shape) == 0:
        raise ValueError(f"visualize_sharding only works for shapes with 1 or 2 dimensions, "
                         f"got shape {tuple(shape)}")
    label = " ".join(f"{d.platform.upper()} {d.id}"
                     for d in sorted(sharding.device_set, key=lambda d: d.id))
    cols = shape[-1]
    rows = shape[0] if len(shape) == 2 else 1
    width = int(min(max_width, max(min_width, len(label) + 4, round(cols * scale))))
    height = max(1, min(10, round(rows * scale / 4))) if len(shape) == 2 else 1
    inner = width - 2
    lines = ["┌" + "─" * inner + "┐"]
    for i in range(height):
        text = label if i == height // 2 else ""
        lines.append("│" + text.center(inner) + "│")
    lines.append("└" + "─" * inner + "┘")
    _builtin_print("\n".join(lines))


def visualize_array_sharding(arr, **kwargs):
    """``visualize_sharding`` of an array's shape and sharding."""
    shape = np.shape(arr)
    inspect_array_sharding(arr, callback=lambda s: visualize_sharding(shape, s, **kwargs))
