"""``remat.extend.core.primitives``: remat's primitives (``add_p``, ``dot_general_p`` ...), as
``jax.extend.core.primitives``: every ``<name>_p`` of ``remat.lax``."""

from remat import lax as _lax
from remat.core import Primitive as _Primitive

__all__ = sorted(n for n in dir(_lax)
                 if n.endswith("_p") and isinstance(getattr(_lax, n), _Primitive))

globals().update({n: getattr(_lax, n) for n in __all__})
