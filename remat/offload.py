"""Offloading saved residuals: ``offload`` moves a value out of working memory into a
memory-mapped temporary file (counted as host bytes by ``remat.memory``), ``reload`` brings it
back for the backward pass. Both are identities for every transformation."""

import numpy as np

from remat.core import Jaxpr, JaxprEqn, Primitive, Var
from remat.interpreters import ad, batching
from remat.runtime import memory, registry


def _to_host(x):
    host = memory.host_empty(x.shape, x.dtype)
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
registry.host_results.add(offload_p)

for _p in (offload_p, reload_p):
    ad.deflinear(_p, lambda ct, _p=_p: [_p.bind(ct)])
    batching.defvectorized(_p)


def staged_with_reloads(staged, offloaded):
    """The staged jaxpr reading its offloaded residuals back into working memory first."""
    if not any(offloaded):
        return staged
    new_invars, reloads = [], []
    for v, off in zip(staged.invars, list(offloaded) + [False] * len(staged.invars)):
        if off:
            host = Var(v.aval)
            new_invars.append(host)
            reloads.append(JaxprEqn([host], [v], reload_p, {}, None))
        else:
            new_invars.append(v)
    return Jaxpr([], new_invars, staged.outvars, reloads + staged.eqns, staged.debug_info)
