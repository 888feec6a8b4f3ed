"""``remat.numpy``: the NumPy API on remat's primitives, with JAX's semantics (type
promotion with weak types, float32 defaults, immutable arrays)."""

from remat.numpy.scalar_types import *
from remat.numpy.creation import *
from remat.numpy.shapes import *
from remat.numpy.selection import *
from remat.numpy.manipulation import *
from remat.numpy.searching import *
from remat.numpy.logic import *
from remat.numpy.bitwise import *
from remat.numpy.elementwise import *
from remat.numpy.index_tricks import *
from remat.numpy.contractions import *
from remat.numpy.sorting import *
from remat.numpy.reductions import *
from remat.numpy.quantiles import *
from remat.numpy.setops import *
from remat.numpy.calculus import *
from remat.numpy.correlation import *
from remat.numpy.polynomials import *
from remat.numpy.windows import *
from remat.numpy.histograms import *
from remat.numpy.padding import *
from remat.numpy.functional import *
from remat.numpy.ufuncs import *
from remat.numpy.host_io import *
from remat.numpy.einsum import einsum, einsum_path
from remat.numpy import linalg
from remat.numpy import fft

# Last: operators and methods (x + y, x[i], x.at[i], x.sum() ...) on Array and on tracers,
# calling the functions above.
import sys as _sys

from remat.numpy import array_methods

array_methods.attach(_sys.modules[__name__])
