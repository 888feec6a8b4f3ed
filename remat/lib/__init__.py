"""``jax.lib``'s public face: the version of jaxlib whose API remat follows (libraries and
their tests compare ``jax.lib.__version__``). remat has no XLA extension to expose."""

from remat.jax_alias import JAX_API_VERSION as __version__

__all__ = ["__version__"]
