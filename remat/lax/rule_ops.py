"""Ops that the rules of remat's lowest lax modules call from modules above them.

The core lax modules form one order (elementwise, complex parts, shape, reductions, loops,
gathers, scatters, slicing), each importing only those below it. A few rules must reach up:
``broadcast_in_dim``'s transpose is a ``reduce_sum``, ``pad``'s a ``slice``, a gather's a
scatter-add. The module that owns such an op provides it here when it is imported, and the
rule reads it when it runs, by which time ``remat.lax`` is whole."""


def provide(**ops):
    """Make ``ops`` (name=function or primitive) reachable as attributes of this module."""
    globals().update(ops)
