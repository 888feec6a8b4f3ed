"""``remat.extend``: JAX's extension API (``jax.extend``) for libraries that define their own
primitives and transformations on top of remat: ``core`` (``Primitive``, the jaxpr types and
the trace helpers), ``linear_util`` (wrapped functions and transformations) and
``source_info_util`` (where equations come from)."""

from remat.extend import core, linear_util, source_info_util

__all__ = ["core", "linear_util", "source_info_util"]
