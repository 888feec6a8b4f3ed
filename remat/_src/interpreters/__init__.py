"""``jax._src.interpreters``: what libraries import from JAX's private interpreter modules."""

from remat._src.interpreters import ad  # noqa: F401
