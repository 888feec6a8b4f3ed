"""The transformation interpreters (``ad``, ``batching``, ``partial_eval``) and ``mlir``,
JAX's lowering registry, which ``import jax`` loads too: libraries reach
``jax.interpreters.mlir`` after importing only ``jax``."""

from remat.interpreters import mlir  # noqa: F401 - reachable as an attribute, as in JAX
