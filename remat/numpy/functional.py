"""Applying Python functions over arrays: ``vectorize`` (with gufunc signatures),
``apply_along_axis apply_over_axes`` and ``piecewise``, built on ``vmap`` and ``select``.
"""

import functools
import re

from remat import dtypes, lax
from remat.numpy.shapes import expand_dims, squeeze
from remat.numpy.util import (
    _arr,
    _canonicalize_axis,
    _check_arraylike,
    _convert,
    _dtype,
    _shape,
    _to_bool,
    asarray,
    broadcast_shapes,
)
from remat.transforms.api import vmap

__all__ = ["apply_along_axis", "apply_over_axes", "piecewise", "vectorize"]


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """``func1d`` applied to the 1-D slices of ``arr`` along ``axis`` (with ``vmap``)."""
    arr = _arr(arr)
    axis = _canonicalize_axis(axis, arr.ndim)

    def fn(x):
        return func1d(x, *args, **kwargs)

    # the axes after ``axis`` (outermost: the last) map to trailing output axes; the axes
    # before it map to leading ones
    for i in range(1, arr.ndim - axis):
        fn = vmap(fn, in_axes=i, out_axes=-1)
    for _ in range(axis):
        fn = vmap(fn, in_axes=0, out_axes=0)
    return fn(arr)


def apply_over_axes(func, a, axes):
    """``func(a, axis)`` applied for each of ``axes`` in turn, each result keeping ``a``'s
    rank (a reduced axis is reinserted)."""
    _check_arraylike("apply_over_axes", a)
    a = _arr(a)
    for axis in axes:
        b = func(a, axis)
        if b.ndim == a.ndim:
            a = b
        elif b.ndim == a.ndim - 1:
            a = expand_dims(b, axis)
        else:
            raise ValueError("function is not returning an array of the correct shape")
    return a


# --- vectorize -------------------------------------------------------------------------------

_DIM = r"\w+"
_CORE_DIMS = rf"(?:{_DIM}(?:,{_DIM})*)?"
_ARGUMENT = rf"\({_CORE_DIMS}\)"
_ARGUMENTS = rf"{_ARGUMENT}(?:,{_ARGUMENT})*"
_SIGNATURE = rf"^{_ARGUMENTS}->{_ARGUMENTS}$"


def _parse_signature(signature):
    """The core dimension names of each input and each output of a gufunc signature such
    as ``'(m,n),(n)->(m)'``."""
    if not re.match(_SIGNATURE, signature):
        raise ValueError(f"not a valid gufunc signature: {signature}")
    return ([tuple(re.findall(_DIM, arg)) for arg in re.findall(_ARGUMENT, part)]
            for part in signature.split("->"))


def _record_core_sizes(sizes, shape, core_dims, context, is_input):
    if is_input and len(shape) < len(core_dims):
        raise ValueError(f"input with shape {shape!r} does not have enough dimensions for all "
                         f"core dimensions {core_dims!r} {context}")
    if not is_input and len(shape) != len(core_dims):
        raise ValueError(f"output shape {shape!r} does not match core dimensions "
                         f"{core_dims!r} {context}")
    core_shape = shape[len(shape) - len(core_dims):]
    for dim, size in zip(core_dims, core_shape):
        if sizes.setdefault(dim, size) != size:
            raise ValueError(f"inconsistent size for core dimension {dim!r}: {size!r} vs "
                             f"{sizes[dim]!r} {context}")


def _checking_outputs(func, sizes, output_core_dims, context):
    def checked(*args):
        out = func(*args)
        outs = out if isinstance(out, tuple) else (out,)
        if len(output_core_dims) > 1 and not isinstance(out, tuple):
            raise TypeError(f"output must be a tuple when multiple outputs are expected, got: "
                            f"{out!r}\n{context}")
        if len(outs) != len(output_core_dims):
            raise TypeError(f"wrong number of output arguments: expected "
                            f"{len(output_core_dims)!r}, got {len(outs)!r} {context}")
        seen = dict(sizes)
        for o, core_dims in zip(outs, output_core_dims):
            _record_core_sizes(seen, _shape(o), core_dims, context, is_input=False)
        return out

    return checked


def _without_excluded(func, excluded, args, kwargs):
    """``func`` with the excluded positional and keyword arguments bound, and the others."""
    if not excluded:
        return func, list(args), kwargs
    static = [(i, args[i]) for i in sorted(e for e in excluded if isinstance(e, int))
              if i < len(args)]
    static_kwargs = {k: v for k, v in kwargs.items() if k in excluded}
    dynamic = [a for i, a in enumerate(args) if i not in excluded]
    dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in excluded}

    def bound(*args, **kwargs):
        args = list(args)
        for i, a in static:
            args.insert(i, a)
        return func(*args, **kwargs, **static_kwargs)

    return bound, dynamic, dynamic_kwargs


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """``pyfunc`` mapped with ``vmap`` over the broadcast leading (loop) axes of its array
    arguments. ``signature`` (NumPy's gufunc notation, e.g. ``'(n),(n)->()'``) names the
    trailing core axes each argument and result keeps; ``excluded`` positions or keywords
    are passed through unmapped."""
    if any(not isinstance(e, (str, int)) for e in excluded):
        raise TypeError(f"jax.numpy.vectorize can only exclude integer or string arguments, "
                        f"but excluded={excluded!r}")
    if any(isinstance(e, int) and e < 0 for e in excluded):
        raise ValueError(f"excluded={excluded!r} contains negative numbers")

    @functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        context = f"on vectorized function with excluded={excluded!r} and " \
                  f"signature={signature!r}"
        func, args, kwargs = _without_excluded(pyfunc, excluded, args, kwargs)
        if signature is not None:
            input_core_dims, output_core_dims = _parse_signature(signature)
        else:
            input_core_dims, output_core_dims = [()] * len(args), None
        nones = {i for i, a in enumerate(args) if a is None}
        if nones:
            if any(input_core_dims[i] != () for i in nones):
                raise ValueError(f"Cannot pass None at locations {nones} with "
                                 f"signature={signature!r}")
            func, args, _ = _without_excluded(func, nones, args, {})
            input_core_dims = [d for i, d in enumerate(input_core_dims) if i not in nones]
        if len(args) != len(input_core_dims):
            raise TypeError(f"wrong number of positional arguments: expected "
                            f"{len(input_core_dims)!r}, got {len(args)!r} {context}")
        args = [asarray(a) for a in args]
        sizes = {}
        loop_shapes = []
        for a, core_dims in zip(args, input_core_dims):
            _record_core_sizes(sizes, _shape(a), core_dims, context, is_input=True)
            loop_shapes.append(_shape(a)[:a.ndim - len(core_dims)])
        loop_shape = broadcast_shapes(*loop_shapes)
        if output_core_dims is not None:
            func = _checking_outputs(func, sizes, output_core_dims, context)
        # map each loop axis with vmap (size-1 axes are squeezed and not mapped), rather than
        # broadcasting the arguments
        squeezed, filled = [], []
        for a, s in zip(args, loop_shapes):
            filled.append(((1,) * (len(loop_shape) - len(s)) + s)[::-1])
            squeezed.append(squeeze(a, tuple(i for i, d in enumerate(s) if d == 1)))
        mapped = func if not kwargs else functools.partial(func, **kwargs)
        expand = []
        for negdim, axis_sizes in enumerate(zip(*filled)):
            in_axes = tuple(None if d == 1 else 0 for d in axis_sizes)
            if all(ax is None for ax in in_axes):
                expand.append(len(loop_shape) - 1 - negdim)
            else:
                mapped = vmap(mapped, in_axes)
        out = mapped(*squeezed)
        if not expand:
            return out
        if isinstance(out, tuple):
            return tuple(expand_dims(o, tuple(expand)) for o in out)
        return expand_dims(out, tuple(expand))

    return wrapped


def piecewise(x, condlist, funclist, *args, **kw):
    """``funclist[i](x)`` (or the constant ``funclist[i]``) where ``condlist[i]`` holds, the
    last holding condition winning; elsewhere the extra last function, or 0. Every function
    sees all of ``x`` and the results are selected elementwise, as under JAX's ``vmap`` of
    ``switch``."""
    _check_arraylike("piecewise", x)
    x = _arr(x)
    nc, nf = len(condlist), len(funclist)
    if nf == nc + 1:
        funclist = list(funclist[-1:]) + list(funclist[:-1])
    elif nf == nc:
        funclist = [0] + list(funclist)
    else:
        raise ValueError(f"with {nc} condition(s), either {nc} or {nc + 1} functions are "
                         f"expected; got {nf}")
    conds = [_to_bool(asarray(c)) for c in condlist]
    d = _dtype(x)
    which = lax.full(_shape(x), 0, dtypes.int32)
    for i, c in enumerate(conds):
        c = lax.broadcast_in_dim(c, _shape(x), tuple(range(len(_shape(x)) - c.ndim,
                                                            len(_shape(x))))) \
            if _shape(c) != _shape(x) else c
        which = lax.select(c, lax.full(_shape(x), i + 1, dtypes.int32), which)
    branches = []
    for f in funclist:
        value = f(x, *args, **kw) if callable(f) else asarray(f)
        value = _convert(asarray(value), d)
        if _shape(value) != _shape(x):
            value = lax.broadcast_in_dim(value, _shape(x),
                                         tuple(range(x.ndim - value.ndim, x.ndim)))
        branches.append(value)
    return lax.select_n(which, *branches)
