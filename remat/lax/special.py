"""NumPy implementations of the special functions NumPy lacks (temporary, being replaced)."""

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])
_lgamma = np.vectorize(math.lgamma, otypes=[np.float64])


def erf(x):
    return _erf(x).astype(x.dtype)


def erfc(x):
    return (1 - _erf(x)).astype(x.dtype)


def erf_inv(x):
    raise NotImplementedError


def lgamma(x):
    return _lgamma(x).astype(x.dtype)


def digamma(x):
    raise NotImplementedError


def polygamma(m, x):
    raise NotImplementedError
