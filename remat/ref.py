"""``remat.ref``: mutable array references (JAX's ``jax.ref``).

A ``Ref`` is a mutable array: ``ref[idx]`` reads it, ``ref[idx] = x`` and ``ref[idx] += x``
write it in place, ``freeze(ref)`` gives its final contents. Refs work eagerly and under
every transformation: ``jit`` (closed over, passed in, or created inside), ``grad`` (a Ref
created inside a differentiated function is differentiated through; one created outside
may receive non-differentiated values, e.g. statistics or gradients written by a
``custom_vjp`` rule), ``checkpoint`` (writes run once, on the forward pass), ``vmap`` (Refs
passed in are batched along their mapped axis; created ones are batched) and ``scan`` /
``fori_loop`` / ``while_loop`` / ``cond`` bodies that update a Ref they close over.

Restrictions (as JAX's): a Ref cannot be returned from ``jit`` or a loop body, passed twice
to ``jit``, differentiated with respect to (``grad``/``vjp`` of a Ref argument), written with
a differentiated value when created outside the differentiated function, or written with a
vmapped value when created outside ``vmap``; ``freeze`` applies only in the scope that created
the Ref. The primitives and their rules are in ``remat.state.primitives``; how a program using
Refs becomes a pure one for execution is ``remat.interpreters.discharge``.
"""

from remat import core
from remat.state.primitives import (
    AbstractRef,
    Ref,
    empty_ref,
    free_ref,
    freeze,
    new_ref,
    ref_addupdate,
    ref_get,
    ref_set,
    ref_swap,
)

__all__ = ["AbstractRef", "Ref", "addupdate", "empty_ref", "free_ref", "freeze", "get",
           "new_ref", "set", "swap"]


def get(ref, idx=None):
    """``ref[idx]`` (the whole contents when ``idx`` is None or ``()``), as an array."""
    return ref_get(ref, idx)


def swap(ref, idx, value, _function_name="ref_swap"):
    """``ref[idx] = value``, returning the previous value of ``ref[idx]``."""
    return ref_swap(ref, idx, value, _function_name)


def set(ref, idx, value):  # noqa: A001  (JAX's name)
    """``ref[idx] = value``; returns None."""
    ref_set(ref, idx, value)


def addupdate(ref, idx, x):
    """``ref[idx] += x`` as one operation (under reverse mode its transpose is one read)."""
    ref_addupdate(ref, idx, x)


# --- traced Refs: indexing a tracer whose type is a Ref reads and writes it ------------------

_array_getitem = core.Tracer.__getitem__
_array_setitem = core.Tracer.__setitem__


def _tracer_getitem(self, idx):
    if type(self.aval) is AbstractRef:
        return ref_get(self, idx)
    return _array_getitem(self, idx)


def _tracer_setitem(self, idx, value):
    if type(self.aval) is AbstractRef:
        ref_set(self, idx, value)
        return
    _array_setitem(self, idx, value)


def _tracer_addupdate(self, x, idx=()):
    if type(self.aval) is not AbstractRef:
        raise AttributeError(f"{type(self).__name__!r} object has no attribute 'addupdate' "
                             f"(it is not a mutable array reference)")
    ref_addupdate(self, idx, x)


core.Tracer.__getitem__ = _tracer_getitem
core.Tracer.__setitem__ = _tracer_setitem
core.Tracer.addupdate = _tracer_addupdate
