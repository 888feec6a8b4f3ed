"""The user's source location of each staged equation, skipping remat's own frames, and the
name stack (``named_scope`` / ``named_call``) it was traced under."""

import functools
import os
import sys
from typing import NamedTuple

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# Modules inside the package that are user code for provenance purposes.
_USER_MODULES = {os.path.join(_PACKAGE_DIR, "demo.py")}


class SourceInfo(NamedTuple):
    file: str
    line: int
    function: str
    name_stack: tuple = ()

    def __str__(self):
        return f"{os.path.basename(self.file)}:{self.line} ({self.function})"

    def name_stack_str(self):
        return "/".join(self.name_stack)


_internal_cache = {}


def _is_internal(filename):
    hit = _internal_cache.get(filename)
    if hit is None:
        path = os.path.abspath(filename)
        hit = (path.startswith(_PACKAGE_DIR) and path not in _USER_MODULES) or \
            filename.startswith("<frozen ")
        _internal_cache[filename] = hit
    return hit


_override = None  # set while re-evaluating an equation, so derived equations keep its origin


def current():
    """The user's source location for a new equation: the equation being re-evaluated, if
    any (so transformed jaxprs keep the user's lines), else the innermost frame outside
    remat."""
    if _override is not None:
        return _override
    frame = sys._getframe(1)
    known = _internal_cache
    while frame is not None:
        code = frame.f_code
        internal = known.get(code.co_filename)  # (inline: a dozen frames an equation)
        if internal is None:
            internal = _is_internal(code.co_filename)
        if not internal:
            return SourceInfo(code.co_filename, frame.f_lineno, code.co_name, _name_stack)
        frame = frame.f_back
    return SourceInfo("unknown", 0, "unknown", _name_stack) if _name_stack else None


_name_stack = ()  # the scopes (``named_scope``) new equations are traced under, outermost first


class name_scope:
    """Context manager: equations traced inside get ``name`` pushed on their name stack.
    Also a decorator, as JAX's ``named_scope``: each call of the function runs in the scope."""

    __slots__ = ("name", "prev")

    def __init__(self, name):
        if not isinstance(name, str):
            raise TypeError(f"named_scope name must be a string, got {name!r}")
        self.name = name

    def __enter__(self):
        global _name_stack
        self.prev = _name_stack
        _name_stack = _name_stack + (self.name,)

    def __exit__(self, *exc):
        global _name_stack
        _name_stack = self.prev

    def __call__(self, fun):
        name = self.name

        @functools.wraps(fun)
        def scoped(*args, **kwargs):
            with name_scope(name):  # a scope per call: calls may nest or recurse
                return fun(*args, **kwargs)

        return scoped


def summarize(info):
    return "unknown" if info is None else str(info)


class override:
    """Context manager: equations created inside are attributed to ``info``."""

    __slots__ = ("info", "prev")

    def __init__(self, info):
        self.info = info

    def __enter__(self):
        global _override
        self.prev = _override
        if self.info is not None:
            _override = self.info

    def __exit__(self, *exc):
        global _override
        _override = self.prev
