"""Summaries of samples: ``mode``, ``rankdata`` and ``sem`` (``jax.scipy.stats``)."""

import math
from typing import NamedTuple

import numpy as np

from remat import dtypes, lax
from remat import numpy as jnp
from remat.numpy.util import _canonicalize_axis
from remat.scipy.stats._common import promote_args_inexact
from remat.transforms import api

__all__ = ["ModeResult", "mode", "rankdata", "sem"]

_NAN_POLICIES = ("propagate", "omit", "raise")


def _check_nan_policy(nan_policy, name):
    if nan_policy not in _NAN_POLICIES:
        raise ValueError(f"Illegal nan_policy value {nan_policy!r}; expected one of "
                         "{'propagate', 'omit', 'raise'}")
    if nan_policy == "omit":
        raise NotImplementedError(f"Logic for `nan_policy` of {nan_policy} is not implemented")
    if nan_policy == "raise":
        raise NotImplementedError(
            f"In order to best JIT compile `{name}`, we cannot know whether `x` contains "
            f"nans. Please check if nans exist in `x` outside of the `{name}` function.")


class ModeResult(NamedTuple):
    mode: object
    count: object


def mode(a, axis=0, nan_policy="propagate", keepdims=False):
    """The most common value along ``axis`` (the smallest among ties) and its count."""
    x = jnp.atleast_1d(jnp.asarray(a))
    _check_nan_policy(nan_policy, "mode")
    if axis is not None:
        axis = _canonicalize_axis(axis, x.ndim)
    input_shape = x.shape
    if keepdims:
        output_shape = tuple(1 if axis is None or i == axis else s
                             for i, s in enumerate(input_shape))
    elif axis is None:
        output_shape = ()
    else:
        output_shape = tuple(s for i, s in enumerate(input_shape) if i != axis)
    if axis is None:
        axis = 0
        x = x.ravel()

    def mode_of_column(column):
        if column.size == 0:
            return (jnp.array(np.nan, dtype=dtypes.default_float_dtype()),
                    jnp.array(0, dtype=dtypes.default_float_dtype()))
        vals, counts = jnp.unique(column, return_counts=True, size=column.size)
        return vals[jnp.argmax(counts)], counts.max()

    x = jnp.moveaxis(x, axis, 0)
    x = x.reshape(x.shape[0], math.prod(x.shape[1:]))
    vals, counts = api.vmap(mode_of_column, in_axes=1)(x)
    return ModeResult(vals.reshape(output_shape), counts.reshape(output_shape))


def _invert_permutation(i):
    return jnp.empty_like(i).at[i].set(jnp.arange(i.size, dtype=i.dtype))


_RANK_METHODS = ("average", "min", "max", "dense", "ordinal")


def rankdata(a, method="average", *, axis=None, nan_policy="propagate"):
    """Ranks from 1, ties broken by ``method``; all NaN if ``a`` holds a NaN."""
    a = jnp.asarray(a)
    _check_nan_policy(nan_policy, "rankdata")
    if method not in _RANK_METHODS:
        raise ValueError(f"unknown method '{method}'")
    if axis is not None:
        return jnp.apply_along_axis(rankdata, axis, a, method)
    a = jnp.ravel(a)
    out_dtype = dtypes.default_float_dtype()

    def ranks(a):
        arr, sorter = lax.sort_key_val(a, jnp.arange(a.size))
        inv = _invert_permutation(sorter)
        if method == "ordinal":
            return (inv + 1).astype(out_dtype)
        obs = jnp.concatenate([jnp.array([True]), arr[1:] != arr[:-1]])
        dense = obs.cumsum()[inv]
        if method == "dense":
            return dense.astype(out_dtype)
        count = jnp.nonzero(obs, size=arr.size + 1, fill_value=obs.size)[0].astype(out_dtype)
        if method == "max":
            return count[dense]
        if method == "min":
            return count[dense - 1] + 1
        return 0.5 * (count[dense] + count[dense - 1] + 1)

    return lax.cond(jnp.any(jnp.isnan(a)), lambda a: jnp.full_like(a, np.nan, out_dtype),
                    ranks, a)


def sem(a, axis=0, ddof=1, nan_policy="propagate", *, keepdims=False):
    """The standard error of the mean: std(ddof) / sqrt(n)."""
    b, = promote_args_inexact("sem", a)
    if nan_policy == "propagate":
        size = b.size if axis is None else b.shape[axis]
        return b.std(axis, ddof=ddof, keepdims=keepdims) / jnp.sqrt(size).astype(b.dtype)
    if nan_policy == "omit":
        count = (~jnp.isnan(b)).sum(axis, keepdims=keepdims)
        return jnp.nanstd(b, axis, ddof=ddof, keepdims=keepdims) / jnp.sqrt(count).astype(b.dtype)
    raise ValueError(f"{nan_policy} is not supported")


