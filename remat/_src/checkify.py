"""``jax._src.checkify`` for libraries (flax's ``nnx.checkify``): ``remat.experimental.checkify``
with the names JAX's private module also has (``JaxException``, ``Out``)."""

from typing import TypeVar

from remat.experimental.checkify import *  # noqa: F403
from remat.experimental.checkify import JaxException, check_p

__all__ = ["JaxException", "Out", "check_p"]

Out = TypeVar("Out")
