"""``remat.typing``: the static type annotations of JAX's ``jax.typing``.

- ``ArrayLike``: any value that converts implicitly to a remat array: ``remat.Array`` (and a
  tracer standing for one inside a transformation), ``numpy.ndarray``, NumPy scalars and
  Python's ``bool``/``int``/``float``/``complex``.  Sequences and strings are not array-like.
- ``DTypeLike``: any value ``remat.numpy.dtype`` accepts: a name (``'float32'``), a scalar
  type (``numpy.float32``, ``float``), a ``numpy.dtype``, or an object with a ``dtype``
  (``remat.numpy.float32``).

Both are ``typing.Union`` objects, as JAX's: ``isinstance(x, ArrayLike)`` works at run time;
``DTypeLike`` (which holds ``type[Any]``) is for annotations only.
"""

from typing import Any, Protocol, Union, runtime_checkable

import numpy as np

from remat.array import Array
from remat.core import Tracer

__all__ = ["ArrayLike", "DType", "DTypeLike", "Shape", "SupportsDType"]

DType = np.dtype
Shape = tuple[int, ...]


@runtime_checkable
class SupportsDType(Protocol):
    """An object with a ``dtype`` (``remat.numpy.float32``, an array)."""

    @property
    def dtype(self, /) -> DType: ...


ArrayLike = Union[  # noqa: UP007 - a Union object, as JAX's, for isinstance and printing
    Array,  # remat's array
    Tracer,  # an array inside a transformation (JAX's tracers are jax.Array too)
    np.ndarray,
    np.bool_, np.number,  # NumPy scalars
    bool, int, float, complex,  # Python scalars
]

DTypeLike = Union[  # noqa: UP007 - as above
    str,  # 'float32', 'int32'
    type[Any],  # np.float32, float
    np.dtype,  # np.dtype('float32')
    SupportsDType,  # remat.numpy.float32
]
