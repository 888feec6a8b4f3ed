"""``remat.extend.source_info_util``: where staged equations come from (JAX's
``jax.extend.source_info_util``): the user's ``file:line (function)`` of each equation and the
name stack (``named_scope``) it was traced under."""

import contextlib

from remat import source_info as _source_info
from remat._src.traceback_util import register_exclusion as _register_traceback_exclusion
from remat.source_info import SourceInfo, summarize

__all__ = ["NameStack", "SourceInfo", "current", "current_name_stack", "extend_name_stack",
           "new_source_info", "register_exclusion", "summarize"]


class NameStack:
    """The scopes an equation was traced under, outermost first."""

    __slots__ = ("stack",)

    def __init__(self, stack=()):
        self.stack = tuple(stack)

    def extend(self, name):
        names = name if isinstance(name, tuple) else (name,)
        return NameStack(self.stack + names)

    def wrap_name(self, name):
        return "/".join((*self.stack, name))

    def __len__(self):
        return len(self.stack)

    def __eq__(self, other):
        return isinstance(other, NameStack) and self.stack == other.stack

    def __hash__(self):
        return hash(self.stack)

    def __str__(self):
        return "/".join(self.stack)

    def __repr__(self):
        return f"NameStack({self.stack!r})"


def current():
    """The source of an equation staged now (None outside user code)."""
    return _source_info.current()


def new_source_info():
    """An empty source (no file), for equations built by hand."""
    return SourceInfo("unknown", 0, "unknown", ())


def current_name_stack():
    """The name stack new equations are traced under."""
    info = _source_info.current()
    return NameStack(info.name_stack if info is not None else ())


@contextlib.contextmanager
def extend_name_stack(name):
    """Within the block, equations are traced under scope ``name`` too."""
    with _source_info.name_scope(name):
        yield current_name_stack()


def register_exclusion(path):
    """Treat frames from ``path`` as library-internal (see ``remat._src.traceback_util``).
    remat attributes equations to the first frame outside remat itself."""
    _register_traceback_exclusion(path)
