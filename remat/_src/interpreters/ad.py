"""``jax._src.interpreters.ad``: the exception diffrax's tests expect from a ``custom_vjp``
differentiated with respect to a closed-over value."""

from remat.interpreters.ad import CustomVJPException

__all__ = ["CustomVJPException"]
