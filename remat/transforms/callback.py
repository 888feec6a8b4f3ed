"""Calling back into Python from staged code: ``pure_callback``, ``io_callback`` and the
debugging callbacks (``debug_callback_p``, ``debug_print_p``) behind ``remat.debug``.

The callback receives remat Arrays and runs whenever the primitive's impl runs: eagerly at
once, under ``jit`` when the executor reaches its step. ``io_callback`` and the debugging
callbacks have effects (``has_effects``): dead-code elimination keeps them, CSE never merges
them, and the executor runs them in program order. ``pure_callback`` is pure, as in JAX: an
unused result may be eliminated and identical calls merged.

Differentiation: the debugging callbacks see the primal values only (their JVP binds them on
the primals, their transpose is nothing); ``pure_callback`` and ``io_callback`` cannot be
differentiated (a ``custom_jvp``/``custom_vjp`` around them supplies the rule), as in JAX.
"""

import dataclasses
import functools
import logging
import sys
import traceback

import numpy as np

from remat import core, dtypes, lax
from remat.core import Primitive, ShapedArray
from remat.errors import JaxRuntimeError
from remat.interpreters import ad, batching
from remat.tree_util import PyTreeDef, tree_flatten, tree_leaves, tree_map, tree_unflatten

__all__ = ["debug_callback_p", "debug_print_p", "io_callback", "io_callback_p",
           "pure_callback", "pure_callback_p"]


@dataclasses.dataclass(frozen=True)
class FlatCallback:
    """``callback`` as a function of the flat leaves of its ``(args, kwargs)``, returning the
    flat leaves of its result. Equal for the same function and argument structure, so jaxprs
    holding it compare (and cache) alike."""

    callback_func: object
    in_tree: PyTreeDef

    def __call__(self, *flat_args):
        args, kwargs = tree_unflatten(self.in_tree, flat_args)
        return tree_leaves(self.callback_func(*args, **kwargs))

    def __str__(self):
        return getattr(self.callback_func, "__name__", type(self.callback_func).__name__)


def as_host_arrays(bufs):
    """The impl's NumPy buffers as remat Arrays for the callback (read-only views: the
    executor's buffers themselves are left as they are)."""
    out = []
    for b in bufs:
        b = np.asarray(b)
        out.append(core.make_array(b.view(), ShapedArray(b.shape, b.dtype)))
    return out


def _run_callback(callback, bufs):
    """``callback`` on the impl's buffers. An exception it raises surfaces as JAX's does from
    a host callback, eagerly or staged: a ``JaxRuntimeError`` whose message carries the
    callback's traceback (equinox finds its runtime errors by their name there), the
    exception itself as its cause."""
    try:
        return callback(*as_host_arrays(bufs))
    except Exception as e:
        text = "".join(traceback.format_exception(e))
        raise JaxRuntimeError(f"INTERNAL: CpuCallback error calling callback: {text}") from e


def _check_results(name, flat, result_avals):
    """The callback's results as NumPy values of the declared shapes and dtypes."""
    if len(flat) != len(result_avals):
        raise RuntimeError(f"{name}: the callback returned {len(flat)} values, but "
                           f"result_shape_dtypes describes {len(result_avals)}.")
    outs = []
    for i, (x, aval) in enumerate(zip(flat, result_avals)):
        weak = type(x) in (bool, int, float, complex)
        x = np.asarray(x)
        if x.shape != aval.shape:
            raise RuntimeError(f"Incorrect output shape for return value #{i}: Expected: "
                               f"{aval.shape}, Actual: {x.shape}")
        if x.dtype != aval.dtype and not weak and \
                dtypes.canonicalize_dtype(x.dtype) != aval.dtype:
            raise RuntimeError(f"Incorrect output dtype for return value #{i}: Expected: "
                               f"{aval.dtype.name}, Actual: {x.dtype.name}")
        outs.append(np.asarray(x, aval.dtype))
    return outs


def _check_shape_dtype(shape_dtype):
    dt = np.dtype(shape_dtype.dtype)
    if dtypes.canonicalize_dtype(dt) != dt:
        raise ValueError("result_shape_dtypes cannot specify 64-bit types when "
                         "`jax_enable_x64` is disabled")
    return ShapedArray(shape_dtype.shape, dt)


def _result_avals(result_shape_dtypes):
    avals = tree_map(_check_shape_dtype, result_shape_dtypes)
    flat, out_tree = tree_flatten(avals)
    return tuple(flat), out_tree


def _check_args(name, flat_args):
    for x in flat_args:
        try:
            core.get_aval(x)
        except TypeError:
            raise TypeError(f"{name}: arguments must be arrays or scalars, got {x!r} of type "
                            f"{type(x).__name__}") from None


# --- pure_callback ---------------------------------------------------------------------------

pure_callback_p = Primitive("pure_callback")
pure_callback_p.multiple_results = True
# Pure, so it may be merged or dropped when unused, but it runs the user's Python, which may
# raise (equinox's error_if raises from one in a cond branch): never run it speculatively.
pure_callback_p.runs_user_code = True


def _pure_callback_impl(*args, callback, result_avals, sharding, vmap_method):
    return _check_results("pure_callback", _run_callback(callback, args), result_avals)


def _pure_callback_jvp(*args, **params):
    raise ValueError("Pure callbacks do not support JVP. Please use `jax.custom_jvp` to use "
                     "callbacks while taking gradients.")


def _pure_callback_transpose(*args, **params):
    raise ValueError("Pure callbacks do not support transpose. Please use `jax.custom_vjp` to "
                     "use callbacks while taking gradients.")


def _batched_avals(size, avals):
    return tuple(a.update(shape=(size,) + a.shape) for a in avals)


def _sequential(primitive, vals, dims, params):
    """The callback once per batch element, in order (``lax.map``)."""
    vals = [v if d is batching.not_mapped else batching.moveaxis(v, d, 0)
            for v, d in zip(vals, dims)]
    batched = [d is not batching.not_mapped for d in dims]

    def one(xs):
        it = iter(xs)
        return primitive.bind(*[next(it) if b else v for v, b in zip(vals, batched)], **params)

    outs = lax.map(one, [v for v, b in zip(vals, batched) if b])
    return list(outs), [0] * len(outs)


def _pure_callback_batch(vals, dims, *, callback, result_avals, sharding, vmap_method):
    params = dict(callback=callback, result_avals=result_avals, sharding=sharding,
                  vmap_method=vmap_method)
    size = batching.axis_size_of(vals, dims)
    if vmap_method in ("sequential", "sequential_unrolled"):
        return _sequential(pure_callback_p, vals, dims, params)
    if vmap_method in ("expand_dims", "broadcast_all"):
        lead = size if vmap_method == "broadcast_all" else 1
        args = [lax.broadcast(v, (lead,)) if d is batching.not_mapped
                else batching.moveaxis(v, d, 0) for v, d in zip(vals, dims)]
        outs = pure_callback_p.bind(*args, **dict(params, result_avals=_batched_avals(
            size, result_avals)))
        return outs, [0] * len(outs)
    if vmap_method == "legacy_vectorized":
        args = [v if d is batching.not_mapped else batching.moveaxis(v, d, 0)
                for v, d in zip(vals, dims)]
        outs = pure_callback_p.bind(*args, **dict(params, result_avals=_batched_avals(
            size, result_avals)))
        return outs, [0] * len(outs)
    raise NotImplementedError(
        f"vmap is only supported for the pure_callback primitive when vmap_method is one of "
        f"'sequential', 'sequential_unrolled', 'expand_dims', 'broadcast_all', or "
        f"'legacy_vectorized'. Got vmap_method={vmap_method}.")


pure_callback_p.def_impl(_pure_callback_impl)
pure_callback_p.def_abstract_eval(lambda *avals, result_avals, **_: list(result_avals))
ad.primitive_jvps[pure_callback_p] = _pure_callback_jvp
ad.primitive_transposes[pure_callback_p] = _pure_callback_transpose
batching.primitive_batchers[pure_callback_p] = _pure_callback_batch

_VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all",
                 "legacy_vectorized", None)


def pure_callback(callback, result_shape_dtypes, *args, sharding=None, vmap_method=None,
                  **kwargs):
    """Call the pure Python function ``callback(*args, **kwargs)`` (on remat Arrays) from
    staged code. ``result_shape_dtypes`` is a pytree of ``ShapeDtypeStruct`` describing its
    result. Being pure, an unused call may be dropped and equal calls merged; ``vmap_method``
    says how it is batched (``'sequential'``, ``'expand_dims'``, ``'broadcast_all'`` ...)."""
    if vmap_method not in _VMAP_METHODS:
        raise ValueError(f"vmap_method must be on of the allowed methods {list(_VMAP_METHODS)}, "
                         f"but got: {vmap_method}")
    if not callable(callback):
        raise TypeError(f"pure_callback: callback must be callable, got {callback!r}")
    flat_args, in_tree = tree_flatten((args, kwargs))
    _check_args("pure_callback", flat_args)
    result_avals, out_tree = _result_avals(result_shape_dtypes)
    outs = pure_callback_p.bind(*flat_args, callback=FlatCallback(callback, in_tree),
                                result_avals=result_avals, sharding=sharding,
                                vmap_method=vmap_method)
    return tree_unflatten(out_tree, outs)


# --- io_callback -----------------------------------------------------------------------------

io_callback_p = Primitive("io_callback")
io_callback_p.multiple_results = True
io_callback_p.has_effects = True


def _io_callback_impl(*args, callback, result_avals, sharding, ordered):
    return _check_results("io_callback", _run_callback(callback, args), result_avals)


def _io_callback_jvp(*args, **params):
    raise ValueError("IO callbacks do not support JVP.")


def _io_callback_transpose(*args, **params):
    raise ValueError("IO callbacks do not support transpose.")


def _io_callback_batch(vals, dims, *, callback, result_avals, sharding, ordered):
    if ordered:
        raise ValueError("Cannot `vmap` ordered IO callback.")
    return _sequential(io_callback_p, vals, dims, dict(
        callback=callback, result_avals=result_avals, sharding=sharding, ordered=False))


io_callback_p.def_impl(_io_callback_impl)
io_callback_p.def_abstract_eval(lambda *avals, result_avals, **_: list(result_avals))
ad.primitive_jvps[io_callback_p] = _io_callback_jvp
ad.primitive_transposes[io_callback_p] = _io_callback_transpose
batching.primitive_batchers[io_callback_p] = _io_callback_batch


def io_callback(callback, result_shape_dtypes, *args, sharding=None, ordered=False, **kwargs):
    """Call the impure Python function ``callback(*args, **kwargs)`` (on remat Arrays), also
    inside jit and other traced code, as often as the program says: the call is never
    dropped or merged. ``result_shape_dtypes`` is a pytree of ``ShapeDtypeStruct``
    describing the result; ``ordered`` calls cannot be vmapped."""
    if not callable(callback):
        raise TypeError(f"io_callback: callback must be callable, got {callback!r}")
    flat_args, in_tree = tree_flatten((args, kwargs))
    _check_args("io_callback", flat_args)
    result_avals, out_tree = _result_avals(result_shape_dtypes)
    outs = io_callback_p.bind(*flat_args, callback=FlatCallback(callback, in_tree),
                              result_avals=result_avals, sharding=sharding, ordered=ordered)
    return tree_unflatten(out_tree, outs)


# --- debugging callbacks ---------------------------------------------------------------------
# Callbacks without results, for looking at values: they see the primal values wherever
# the program runs (under vmap once per batch element), and never change the computation.

debug_callback_p = Primitive("debug_callback")
debug_print_p = Primitive("debug_print")


def _debug_jvp(primitive, primals, tangents, **params):
    return primitive.bind(*primals, **params), []


def _debug_transpose(cts, *args, **params):
    return [None] * len(args)


def _debug_batch(primitive, vals, dims, **params):
    """Unrolled over the batch: one call per element, in order."""
    size = batching.axis_size_of(vals, dims)
    for i in range(size):
        primitive.bind(*[v if d is batching.not_mapped
                         else lax.index_in_dim(v, i, axis=d, keepdims=False)
                         for v, d in zip(vals, dims)], **params)
    return [], []


def _debug_callback_impl(*args, callback, ordered, partitioned):
    callback(*as_host_arrays(args))
    return []


debug_logger = logging.getLogger("remat.debug")


def merge_static(in_tree, dyn_args, static_args):
    """``(args, kwargs)`` of a debugging call: its array leaves ``dyn_args`` put back among
    the leaves that are not arrays (``static_args``: ``(position, value)`` pairs)."""
    static = dict(static_args)
    dyn = iter(dyn_args)
    leaves = [static[i] if i in static else next(dyn)
              for i in range(len(static) + len(dyn_args))]
    return tree_unflatten(in_tree, leaves)


def _debug_print_impl(*args, fmt, ordered, partitioned, in_tree, static_args, np_printoptions,
                      has_placeholders, logging_record):
    fmt_args, fmt_kwargs = merge_static(in_tree, as_host_arrays(args), static_args)
    if has_placeholders:
        with np.printoptions(**dict(np_printoptions)):
            message = fmt.format(*fmt_args, **fmt_kwargs)
    else:
        message = " ".join((fmt, *(str(a) for a in fmt_args)))
    if logging_record is None:
        sys.stdout.write(message + "\n")
    else:
        level, filename, lineno = logging_record
        debug_logger.handle(debug_logger.makeRecord(debug_logger.name, level, filename, lineno,
                                                    message, (), None))
    return []


for _prim in (debug_callback_p, debug_print_p):
    _prim.multiple_results = True
    _prim.has_effects = True
    # may be replayed by rematerialization (JAX's DebugEffect is remat-allowed): a checkpoint
    # stages it on both sides, so it also runs while the backward pass recomputes
    _prim.remat_replayable = True
    _prim.def_abstract_eval(lambda *avals, **params: [])
    ad.primitive_jvps[_prim] = functools.partial(_debug_jvp, _prim)
    ad.primitive_transposes[_prim] = _debug_transpose
    batching.primitive_batchers[_prim] = functools.partial(_debug_batch, _prim)
debug_callback_p.def_impl(_debug_callback_impl)
debug_print_p.def_impl(_debug_print_impl)
