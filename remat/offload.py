"""Offloading saved residuals: ``offload`` moves a value out of working memory into a
memory-mapped temporary file (counted as host bytes by ``remat.memory``), ``reload`` brings it
back for the backward pass. Both are identities for every transformation."""

import numpy as np

from remat.core import Jaxpr, JaxprEqn, Primitive, Var
from remat.interpreters import ad, batching
from remat.runtime import memory, registry


def _dense_strides(x):
    """``x.strides`` when ``x`` fills its ``x.nbytes`` exactly, its axes in some order (C,
    Fortran, a transpose of either); None for a sliced, broadcast or reversed view."""
    expected = x.itemsize
    for stride, size in sorted((s, n) for s, n in zip(x.strides, x.shape) if n != 1):
        if stride != expected:
            return None
        expected *= size
    return x.strides


def _laid_out_as(x, flat):
    """``flat`` (a one-dimensional buffer of ``x.size`` elements) viewed with the shape and
    memory layout of ``x``, or in C order where ``x`` is not dense."""
    strides = _dense_strides(x)
    return np.ndarray(x.shape, x.dtype, buffer=flat, strides=strides)


def _to_host(x):
    """The offloaded copy keeps the residual's memory layout, and so does its reload: a
    Fortran-ordered or transposed residual must reach the backward pass's products as it
    would have unoffloaded, since BLAS sums a product differently for another layout (a
    matrix-vector product's kernel depends on which operand is transposed)."""
    host = _laid_out_as(x, memory.host_empty((x.size,), x.dtype))
    host[...] = x
    return host


def _to_device(x):
    out = _laid_out_as(x, np.empty(x.size, x.dtype))
    out[...] = x
    return out


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
