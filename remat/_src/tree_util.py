"""``jax._src.tree_util`` for libraries (flax's ``nnx`` asks ``type in _registry``): which
types are pytree nodes in remat's default registry."""

from remat.tree_util import *  # noqa: F403 - the same module, under JAX's private path
from remat.tree_util import default_registry

__all__ = ["_registry"]


class _RegisteredTypes:
    """``typ in _registry``: whether ``typ`` is a pytree node type (the built-in
    containers, namedtuples and every registered class)."""

    def __contains__(self, typ):
        return isinstance(typ, type) and default_registry.is_node(typ)

    def __repr__(self):
        return "<the pytree node types of remat.tree_util.default_registry>"


_registry = _RegisteredTypes()
