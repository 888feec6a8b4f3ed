"""Helpers shared by the user-facing transformations: flattening functions over pytrees,
static arguments, argument names for messages and provenance."""

import inspect
import operator

import numpy as np

from remat import core, dtypes
from remat.tree_util import keystr, tree_flatten, tree_flatten_with_path, tree_unflatten


class OutStore:
    """Where a flattened function leaves the tree structure of its output (and of its
    auxiliary output, for ``has_aux`` functions)."""

    __slots__ = ("tree", "aux_tree", "num_out")

    def __init__(self):
        self.tree = self.aux_tree = self.num_out = None


def flatten_fun(fun, in_tree):
    """``fun(*args, **kwargs)`` as a function of the flat leaves of ``(args, kwargs)``."""
    store = OutStore()

    def flat_fun(*leaves):
        args, kwargs = tree_unflatten(in_tree, leaves)
        out = fun(*args, **kwargs)
        flat_out, store.tree = tree_flatten(out)
        return flat_out

    return flat_fun, store


def flatten_fun_nokwargs(fun, in_tree, has_aux=False):
    """``fun(*args)`` as a function of the flat leaves of ``args``. With ``has_aux`` the
    function returns ``(out, aux)`` and the flat output is out's leaves then aux's leaves."""
    store = OutStore()

    def flat_fun(*leaves):
        out = fun(*tree_unflatten(in_tree, leaves))
        aux_leaves = []
        if has_aux:
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TypeError("has_aux=True requires the function to return a pair "
                                f"(output, auxiliary data), got {type(out).__name__}")
            out, aux = out
            aux_leaves, store.aux_tree = tree_flatten(aux)
        flat_out, store.tree = tree_flatten(out)
        store.num_out = len(flat_out)
        return flat_out + aux_leaves

    return flat_fun, store


def fun_name(fun):
    while hasattr(fun, "func") and not hasattr(fun, "__name__"):  # functools.partial
        fun = fun.func
    return getattr(fun, "__name__", type(fun).__name__)


def _signature(fun):
    try:
        return inspect.signature(fun)
    except (TypeError, ValueError):
        return None


def arg_names(fun, args, kwargs, static_argnums=()):
    """A name for every flat leaf of the non-static ``(args, kwargs)``: ``x``, ``x[0]``,
    ``params['w']``."""
    sig = _signature(fun)
    positional = []
    if sig is not None:
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                positional.append(p.name)
            elif p.kind == p.VAR_POSITIONAL:
                positional.extend(f"{p.name}[{i}]" for i in range(len(args) - len(positional)))
                break
    names = []
    for i, arg in enumerate(args):
        if i in static_argnums:
            continue
        base = positional[i] if i < len(positional) else f"args[{i}]"
        names.extend(base + keystr(path) for path, _ in tree_flatten_with_path(arg)[0])
    for k in sorted(kwargs):
        names.extend(k + keystr(path) for path, _ in tree_flatten_with_path(kwargs[k])[0])
    return names


def abstractify(x, name):
    """The aval of an argument leaf; TypeError naming the argument when it is not an array."""
    if isinstance(x, ShapeDtypeStruct):
        return core.ShapedArray(x.shape, dtypes.canonicalize_dtype(x.dtype), x.weak_type)
    try:
        return core.get_aval(x)
    except TypeError:
        raise TypeError(f"Argument '{name}' of type {type(x)} is not a valid JAX type: "
                        f"traced arguments must be arrays or scalars "
                        f"(mark it static with static_argnums to pass other values).") from None


class ShapeDtypeStruct:
    """A shape and dtype standing in for an array (as in ``eval_shape``)."""

    __slots__ = ("shape", "dtype", "weak_type")

    def __init__(self, shape, dtype, weak_type=False):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.weak_type = weak_type

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    def __eq__(self, other):
        return (isinstance(other, ShapeDtypeStruct) and self.shape == other.shape
                and self.dtype == other.dtype and self.weak_type == other.weak_type)

    def __hash__(self):
        return hash((self.shape, self.dtype, self.weak_type))

    def __repr__(self):
        weak = ", weak_type=True" if self.weak_type else ""
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name}{weak})"


def normalize_argnums(argnums, num_args, fun_label, what="static_argnums"):
    """Validated, non-negative argnums; TypeError/ValueError naming ``fun_label``."""
    if argnums is None:
        return ()
    if isinstance(argnums, int) and not isinstance(argnums, bool):
        argnums = (argnums,)
    try:
        argnums = tuple(argnums)
    except TypeError:
        raise TypeError(f"{fun_label} {what} must be an int or a tuple of ints, "
                        f"got {argnums!r}") from None
    out = []
    for a in argnums:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"{fun_label} {what} must contain only ints, got {a!r} "
                            f"of type {type(a).__name__}")
        a = operator.index(a)
        if num_args is not None and not -num_args <= a < num_args:
            raise ValueError(f"{fun_label} got {what}={a!r} but was called with only "
                             f"{num_args} positional argument{'s' if num_args != 1 else ''}")
        out.append(a % num_args if num_args is not None and a < 0 else a)
    return tuple(sorted(set(out)))


def static_argnums_from_names(fun, static_argnames):
    """Positions of ``static_argnames`` in ``fun``'s signature (those that have one)."""
    sig = _signature(fun)
    if sig is None:
        return ()
    params = [p.name for p in sig.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return tuple(params.index(n) for n in static_argnames if n in params)


class HashableByIdentity:
    """Wraps an unhashable static argument so caches key on its identity."""

    __slots__ = ("val",)

    def __init__(self, val):
        self.val = val

    def __hash__(self):
        return id(self.val)

    def __eq__(self, other):
        return isinstance(other, HashableByIdentity) and self.val is other.val


def static_key(value):
    """A cache key for a static argument: the value if hashable, else its identity."""
    try:
        hash(value)
        return value
    except TypeError:
        return HashableByIdentity(value)


def split_static(fun, args, static_argnums):
    """The non-static arguments, and ``fun`` as a function of them alone."""
    if not static_argnums:
        return args, fun
    dyn_args = tuple(a for i, a in enumerate(args) if i not in static_argnums)

    def fun_of_dynamic(*dyn, **kwargs):
        it = iter(dyn)
        full = [args[i] if i in static_argnums else next(it) for i in range(len(args))]
        return fun(*full, **kwargs)

    return dyn_args, fun_of_dynamic
