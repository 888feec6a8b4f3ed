"""Offloading saved residuals: ``offload`` moves a value out of working memory into a
memory-mapped temporary file (counted as host bytes by ``remat.memory``), ``reload`` brings it
back for the backward pass. Both are identities for every transformation."""

import tempfile

import numpy as np

from remat.core import Primitive
from remat.interpreters import ad, batching


def _to_host(x):
    if x.nbytes == 0:
        return np.array(x)
    with tempfile.TemporaryFile() as f:  # unlinked at once; the mapping keeps the data
        host = np.memmap(f, dtype=x.dtype, mode="w+", shape=x.shape)
    host[...] = x
    return host


def _to_device(x):
    return np.array(x)


offload_p = Primitive("offload")
offload_p.def_impl(_to_host)
offload_p.def_abstract_eval(lambda x: x)
reload_p = Primitive("reload")
reload_p.def_impl(_to_device)
reload_p.def_abstract_eval(lambda x: x)

for _p in (offload_p, reload_p):
    ad.deflinear(_p, lambda ct, _p=_p: [_p.bind(ct)])
    batching.defvectorized(_p)
