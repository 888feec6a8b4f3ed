"""``jax._src.core`` for libraries (flax's ``linen.fp8_ops`` names ``core.ShapedArray``):
remat's core module, under JAX's private path."""

from remat.core import *  # noqa: F403
from remat.core import ShapedArray, Tracer, get_aval

__all__ = ["ShapedArray", "Tracer", "get_aval"]
