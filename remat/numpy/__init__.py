"""``remat.numpy``: the NumPy API on remat's primitives, with JAX's semantics (type
promotion with weak types, float32 defaults, immutable arrays)."""

from remat.numpy.lax_numpy import *
from remat.numpy.reductions import *
from remat.numpy.einsum import einsum, einsum_path
from remat.numpy import linalg

# Last: attaches operators and methods (x + y, x[i], x.at[i], x.sum() ...) to Array and to
# tracers, calling the functions above.
from remat.numpy import array_methods
