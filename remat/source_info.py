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


def current():
    """The innermost frame outside remat, or None."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if not _is_internal(code.co_filename):
            return SourceInfo(code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return None


def summarize(info):
    return "unknown" if info is None else str(info)
