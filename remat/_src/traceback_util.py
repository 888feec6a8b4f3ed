"""``jax._src.traceback_util`` for libraries (equinox, flax, jaxtyping): the registry of
source paths whose frames are library-internal, and ``api_boundary``.

remat does not rewrite the tracebacks of exceptions: ``api_boundary`` marks a function as a
library entry point and calls it unchanged; ``include_frame`` answers, from the registered
paths, whether a frame is user code (equinox uses it to point at the user's line).
"""

import functools
import os
import traceback
import types

__all__ = ["api_boundary", "filter_traceback", "include_filename", "include_frame",
           "register_exclusion"]

_exclude_paths = []  # source paths (files or folders) whose frames are internal


def register_exclusion(path):
    """Treat frames from ``path`` (a file or a folder) as internal."""
    _exclude_paths.append(path)


register_exclusion(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # remat


def _path_starts_with(path, prefix):
    path, prefix = os.path.abspath(path), os.path.abspath(prefix)
    try:
        return os.path.commonpath([path, prefix]) == prefix
    except ValueError:  # different drives
        return False


def include_filename(filename):
    """Whether frames of ``filename`` are user code (not under a registered path)."""
    return not any(_path_starts_with(filename, p) for p in _exclude_paths)


def include_frame(frame):
    """Whether ``frame`` is user code."""
    return include_filename(frame.f_code.co_filename)


def filter_traceback(tb):
    """``tb`` with the internal frames left out."""
    out = None
    for frame, lineno in reversed(list(traceback.walk_tb(tb))):
        if include_frame(frame):
            out = types.TracebackType(out, frame, frame.f_lasti, lineno)
    return out


def api_boundary(fun=None, *, repro_api_name=None, repro_user_func=False):
    """Mark ``fun`` as an entry point of a library's API; it runs unchanged (remat keeps
    tracebacks whole).  Usable as ``@api_boundary`` and ``@api_boundary(...)``."""
    if fun is None:
        return functools.partial(api_boundary, repro_api_name=repro_api_name,
                                 repro_user_func=repro_user_func)

    @functools.wraps(fun)
    def boundary(*args, **kwargs):
        return fun(*args, **kwargs)

    return boundary
