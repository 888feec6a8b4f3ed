"""The axis environment: the named axes bound while a function is traced (by
``vmap(axis_name=)``, ``pmap`` and ``shard_map``), innermost last.

Collectives look their axis up here for its size (``axis_size``, ``all_gather``'s shape while
staging under ``jit``) and fail with JAX's ``NameError`` when it is not bound. The bound axes
are part of every trace cache's key (a user context of ``remat.config``), so a function jitted
under one set of axes is traced again under another. An axis that spans processes (pmap when
``remat.distributed`` has several) knows its per-process size; its size is the global one.
"""

import contextlib
import dataclasses

from remat.config import config, make_user_context

__all__ = ["AxisFrame", "axis_frame", "axis_size", "batch_axis_env", "bound_axis_names",
           "extend_axis_env", "names_tuple", "unbound_error"]


@dataclasses.dataclass(frozen=True)
class AxisFrame:
    """One bound axis: its ``name``, global ``size``, and, for an axis spanning processes,
    ``local_size`` (this process's share) and ``process_index`` (this process's place: the
    axis index is ``process_index * local_size + member``)."""

    name: object
    size: int
    spans_processes: bool = False
    local_size: int | None = None
    process_index: int = 0


# the bound frames, outermost first, as a config user context: jit's cache keys include it
_env = make_user_context(())


def _frames():
    return config.read(_env.name)


@contextlib.contextmanager
def extend_axis_env(name, size, *, spans_processes=False, local_size=None, process_index=0):
    """Bind axis ``name`` of ``size`` inside the block (a no-op for ``name=None``)."""
    if name is None:
        yield
        return
    frame = AxisFrame(name, int(size), spans_processes,
                      None if local_size is None else int(local_size), int(process_index))
    with _env(_frames() + (frame,)):
        yield frame


@contextlib.contextmanager
def batch_axis_env(name, size):
    """Bind a vmapped axis ``name`` of ``size`` members in this process, unless its innermost
    binding already has that many here (``pmap``'s binding spanning processes stays)."""
    for frame in reversed(_frames()):
        if frame.name == name:
            if (frame.local_size or frame.size) == size:
                yield frame
                return
            break
    with extend_axis_env(name, size) as frame:
        yield frame


def bound_axis_names():
    """The names bound now, outermost first."""
    return [f.name for f in _frames()]


def unbound_error(name):
    available = ", ".join(repr(n) for n in bound_axis_names()) or "(none)"
    return NameError(f"unbound axis name: {name}. The following axis names (e.g. defined by "
                     f"pmap) are available to collective operations: {available}")


def axis_frame(name):
    """The innermost frame binding ``name``; ``NameError`` (JAX's message) if none does."""
    for frame in reversed(_frames()):
        if frame.name == name:
            return frame
    raise unbound_error(name)


def names_tuple(axis_name):
    """``axis_name`` (a name or a tuple/list of names) as a tuple of names."""
    if isinstance(axis_name, (tuple, list)):
        return tuple(axis_name)
    return (axis_name,)


def axis_size(axis_name):
    """The size of ``axis_name`` (the product over a tuple of names)."""
    size = 1
    for name in names_tuple(axis_name):
        size *= axis_frame(name).size
    return size
