"""``jax._src.dtypes`` for libraries (equinox, flax): remat's dtype module, with the two
names libraries take from JAX's private one that ``remat.dtypes`` spells differently."""

import numpy as np

from remat.dtypes import *  # noqa: F403 - the same module, under JAX's private path
from remat.dtypes import ExtendedDType, TypePromotionError, extended, finfo, iinfo

__all__ = ["DType", "ExtendedDType", "TypePromotionError", "extended", "finfo", "iinfo",
           "supports_inf"]

DType = np.dtype


def supports_inf(dtype):
    """Whether floating ``dtype`` has infinities (the float8 ``fn`` types do not)."""
    return bool(np.issubdtype(dtype, np.inexact)) and bool(np.isinf(
        np.array(np.inf).astype(dtype)))
