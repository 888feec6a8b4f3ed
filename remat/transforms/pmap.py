"""``pmap``: map a function over the leading axis of its arguments, one member per local
device, with collectives across the mapped axis.

The members run as one batched computation: ``jit(vmap(f, axis_name=...))``. remat's devices
are all the host's memory and cores, so splitting the batch into per-device shards run on
threads would only add per-shard Python dispatch; the batched program does each primitive
once over all members, and the executor's own worker threads already split large array work.

With several processes (``remat.distributed``) the mapped axis is this process's devices, and
the named axis spans every process: its size in collectives is ``process_count() * local``
and ``axis_index`` is ``process_index() * local + member`` (the collectives' rules then call
``remat.lax.process_collectives``).
"""

import weakref

from remat import distributed, named_axes
from remat.api_util import check_callable, fun_name, wrap_transformed
from remat.core import get_aval
from remat.devices import _check_backend, local_device_count
from remat.transforms import api
from remat.transforms.jit import jit
from remat.tree_util import tree_flatten

__all__ = ["pmap"]


class _AnonymousAxis:
    """The axis of a ``pmap`` without ``axis_name``: no collective can name it."""

    def __repr__(self):
        return "<pmap axis>"


_ANONYMOUS = _AnonymousAxis()
_compiled = weakref.WeakKeyDictionary()  # fun -> {options key: jitted members}
_unreferenceable = {}  # id(fun) -> (fun, {options key: jitted members}), a bounded few


def _argnums(value, what):
    nums = (value,) if isinstance(value, int) else tuple(value)
    if not all(isinstance(i, int) for i in nums):
        raise TypeError(f"pmap {what} must be an int or a tuple of ints, got {value!r}")
    return nums


def pmap(fun, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(),
         donate_argnums=(), devices=None, backend=None, axis_size=None):
    """``fun`` mapped over axis ``in_axes`` of its arguments, one member per local device
    (at most ``local_device_count()`` members), outputs stacked along ``out_axes``."""
    check_callable(fun)
    _check_backend(backend)
    static = _argnums(static_broadcasted_argnums, "static_broadcasted_argnums")
    donate = _argnums(donate_argnums, "donate_argnums")
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    name = _ANONYMOUS if axis_name is None else axis_name
    options = (name, in_axes, out_axes, static, donate, axis_size)
    # (axes may be lists or dicts: equinox's filter_pmap passes its arguments' axes as a pytree)
    key = (name, _axes_key(in_axes), _axes_key(out_axes), static, donate, axis_size)

    def prepared(args, kwargs):
        """The axis environment of a call on ``args`` and the jitted members it runs."""
        if isinstance(in_axes, tuple) and len(in_axes) != len(args):
            raise ValueError(f"pmap in_axes must be an int, None, or a tuple of entries "
                             f"corresponding to the positional arguments passed to the "
                             f"function, but got len(in_axes)={len(in_axes)}, "
                             f"len(args)={len(args)}")
        size = _mapped_size(args, kwargs, static, in_axes, axis_size)
        available = len(devices) if devices is not None else local_device_count()
        if size > available:
            raise ValueError(f"compiling computation that requires {size} logical devices, "
                             f"but only {available} XLA devices are available "
                             f"(num_replicas={size})")
        processes = distributed.process_count()
        if processes > 1:
            env = named_axes.extend_axis_env(name, processes * size, spans_processes=True,
                                             local_size=size,
                                             process_index=distributed.process_index())
        else:
            env = named_axes.extend_axis_env(name, size)
        return env, _members(fun, key, options)

    def pmapped(*args, **kwargs):
        env, members = prepared(args, kwargs)
        with env:
            return members(*args, **kwargs)

    def lower(*args, **kwargs):
        """The ``Lowered`` stage of the members' program for these arguments, as
        ``jit(f).lower``: ``.as_text()``, ``.compile()`` (equinox's ``filter_pmap(f).lower``)."""
        env, members = prepared(args, kwargs)
        with env:
            return members.lower(*args, **kwargs)

    pmapped = wrap_transformed(pmapped, fun, f"pmap({fun_name(fun)})")
    pmapped.lower = lower
    return pmapped


def _axes_key(axes):
    """``in_axes``/``out_axes`` as a hashable key: their leaves and structure."""
    leaves, tree = tree_flatten(axes)
    return tuple(leaves), tree


def _members(fun, key, options):
    """The jitted batched program of ``fun``'s members under ``options`` (``key``, hashable):
    made once per function and options (held weakly by the function), so ``pmap(f)(x)``
    written inline traces once, as JAX's cache does."""
    try:
        per_fun = _compiled.setdefault(fun, {})
    except TypeError:  # not weakly referenceable: held by the key's entry for the process
        per_fun = _unreferenceable.setdefault(id(fun), (fun, {}))[1]
        if len(_unreferenceable) > 256:
            _unreferenceable.clear()
    hit = per_fun.get(key)
    if hit is None:
        hit = per_fun[key] = _make_members(
            weakref.ref(fun) if _weakrefable(fun) else lambda: fun, options)
    return hit


def _weakrefable(fun):
    try:
        weakref.ref(fun)
    except TypeError:
        return False
    return True


def _make_members(fun_ref, options):
    name, in_axes, out_axes, static, donate, axis_size = options

    def members(*args, **kwargs):
        fun = fun_ref()
        n = len(args)
        statics = {i % n: args[i] for i in static}
        dynamic = [a for i, a in enumerate(args) if i not in statics]

        def call(*dyn, **kw):
            it = iter(dyn)
            return fun(*[statics[i] if i in statics else next(it) for i in range(n)], **kw)

        axes = in_axes
        if isinstance(in_axes, tuple):
            axes = tuple(ax for i, ax in enumerate(in_axes) if i not in statics)
        return api.vmap(call, in_axes=axes, out_axes=out_axes, axis_name=name,
                        axis_size=axis_size)(*dynamic, **kwargs)

    return jit(members, static_argnums=static, donate_argnums=donate)


def _mapped_size(args, kwargs, static, in_axes, axis_size):
    """The size of the mapped axis (checking every mapped argument agrees); keyword
    arguments are mapped along their leading axis, as in JAX."""
    n = len(args)
    statics = {i % n for i in static}
    dynamic = tuple(a for i, a in enumerate(args) if i not in statics)
    axes = in_axes
    if isinstance(in_axes, tuple):
        axes = tuple(ax for i, ax in enumerate(in_axes) if i not in statics)
    keyword_leaves = tree_flatten(kwargs)[0]
    flat_axes = api._flatten_axes("in_axes", dynamic, axes) + [0] * len(keyword_leaves)
    sizes = set()
    for leaf, ax in zip(tree_flatten(dynamic)[0] + keyword_leaves, flat_axes):
        if ax is None:
            continue
        shape = get_aval(leaf).shape
        if not -len(shape) <= ax < len(shape):
            raise ValueError(f"pmap was requested to map its argument along axis {ax}, which "
                             f"implies that its rank should be at least "
                             f"{ax + 1 if ax >= 0 else -ax}, but is only {len(shape)} (its "
                             f"shape is {shape})")
        sizes.add(shape[ax])
    if axis_size is not None:
        sizes.add(int(axis_size))
    if not sizes:
        raise ValueError("pmap requires at least one argument with a mapped axis (in_axes), "
                         "or axis_size")
    if len(sizes) > 1:
        raise ValueError(f"pmap got inconsistent sizes for array axes to be mapped: "
                         f"{sorted(sizes)}")
    return sizes.pop()
