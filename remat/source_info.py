"""The user's source location of each staged equation, skipping remat's own frames."""

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

    def __str__(self):
        return f"{os.path.basename(self.file)}:{self.line} ({self.function})"


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
    while frame is not None:
        code = frame.f_code
        if not _is_internal(code.co_filename):
            return SourceInfo(code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return None


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
