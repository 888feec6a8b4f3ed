"""``jax._src.dtypes`` for libraries (equinox, flax): remat's dtype module, with ``DType``,
the name libraries take from JAX's private one that ``remat.dtypes`` lacks."""

import numpy as np

from remat.dtypes import *  # noqa: F403 - the same module, under JAX's private path
from remat.dtypes import (
    ExtendedDType,
    TypePromotionError,
    extended,
    finfo,
    iinfo,
    supports_inf,
)

__all__ = ["DType", "ExtendedDType", "TypePromotionError", "extended", "finfo", "iinfo",
           "supports_inf"]

DType = np.dtype
