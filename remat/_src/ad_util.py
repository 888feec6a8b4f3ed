"""``jax._src.ad_util`` for libraries (lineax): the ``stop_gradient`` primitive, to which
lineax adds a transpose rule."""

from remat.lax import stop_gradient_p

__all__ = ["stop_gradient_p"]
