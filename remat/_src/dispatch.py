"""``jax._src.dispatch`` for libraries (equinox): ``wait_for_tokens`` waits for the effects of
computations already dispatched; remat runs every effect synchronously, in program order, so
they are done already (as ``remat.effects_barrier``)."""

from remat.devices import effects_barrier as wait_for_tokens

__all__ = ["wait_for_tokens"]
