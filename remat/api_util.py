"""Helpers shared by the user-facing transformations: flattening functions over pytrees,
static arguments, argument names for messages and provenance."""

import collections
import functools
import inspect
import operator

import numpy as np

from remat import core, dtypes
from remat.config import config
from remat.sharding import NamedSharding, PartitionSpec, Sharding, get_mesh
from remat.tree_util import keystr, tree_flatten, tree_flatten_with_path, tree_unflatten


class OutStore:
    """Where a flattened function leaves the tree structure of its output (and of its
    auxiliary output, for ``has_aux`` functions)."""

    __slots__ = ("tree", "aux_tree", "num_out", "aux_held")

    def __init__(self):
        self.tree = self.aux_tree = self.num_out = None
        self.aux_held = {}

    def aux(self, traced):
        """The auxiliary output, from its ``traced`` leaves (those the flat function returned)
        and the leaves it held back: as in JAX, auxiliary data need not be arrays (equinox's
        ``filter_grad`` returns a string), and passes through the transformation untouched."""
        traced = iter(traced)
        leaves = [self.aux_held[i] if i in self.aux_held else next(traced)
                  for i in range(self.aux_tree.num_leaves)]
        return tree_unflatten(self.aux_tree, leaves)


def _is_jax_value(x):
    try:
        core.get_aval(x)
    except TypeError:
        return False
    return True


def flatten_fun(fun, in_tree):
    """``fun(*args, **kwargs)`` as a function of the flat leaves of ``(args, kwargs)``:
    ``(flat function, OutStore)``; for a ``WrappedFun`` (libraries calling
    ``jax.api_util``), JAX's ``(wrapped flat function, thunk of the output tree)``."""
    if hasattr(fun, "call_wrapped"):
        return _flatten_wrapped(fun, in_tree, True)
    store = OutStore()

    def flat_fun(*leaves):
        args, kwargs = tree_unflatten(in_tree, leaves)
        out = fun(*args, **kwargs)
        flat_out, store.tree = tree_flatten(out)
        return flat_out

    return flat_fun, store


def flatten_fun_nokwargs(fun, in_tree, has_aux=False):
    """``fun(*args)`` as a function of the flat leaves of ``args``. With ``has_aux`` the
    function returns ``(out, aux)`` and the flat output is out's leaves then aux's leaves.
    A ``WrappedFun`` gets JAX's form, as in ``flatten_fun``."""
    if hasattr(fun, "call_wrapped") and not has_aux:
        return _flatten_wrapped(fun, in_tree, False)
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
            store.aux_held = {i: x for i, x in enumerate(aux_leaves) if not _is_jax_value(x)}
            aux_leaves = [x for i, x in enumerate(aux_leaves) if i not in store.aux_held]
        flat_out, store.tree = tree_flatten(out)
        store.num_out = len(flat_out)
        return flat_out + aux_leaves

    return flat_fun, store


def _flatten_wrapped(fun, in_tree, with_kwargs):
    """JAX's flattening of a ``WrappedFun`` (``remat.extend.linear_util``):
    ``(wrapped flat function, thunk of the output tree)``."""
    return fun.wrap_with_aux(_flat_call, (in_tree, with_kwargs), False)


def _flat_call(f, in_tree, with_kwargs, *leaves):
    """JAX's flattening transformation of a ``WrappedFun``: ``(flat outputs, output tree)``."""
    if with_kwargs:
        args, kwargs = tree_unflatten(in_tree, leaves)
    else:
        args, kwargs = tree_unflatten(in_tree, leaves), {}
    return tree_flatten(f(*args, **kwargs))


def debug_info(traced_for, fun, args, kwargs, *, static_argnums=(), static_argnames=(),
               result_paths_thunk=None, sourceinfo=None, signature=None):
    """JAX's ``DebugInfo`` of tracing ``fun`` at ``args`` and ``kwargs`` for ``traced_for``
    (libraries wrap functions with it: ``lu.wrap_init(f, debug_info=...)``)."""
    dynamic = {k: v for k, v in kwargs.items() if k not in static_argnames}
    return core.DebugInfo(fun_name(fun), arg_names(fun, args, dynamic, static_argnums),
                          traced_for, sourceinfo or fun_sourceinfo(fun))


def check_callable(fun):
    """A transformation checks its function when it wraps it, as JAX does: the error points
    at the wrapping line, not at a later call."""
    if not callable(fun):
        raise TypeError(f"Expected a callable value, got {fun}")


def fun_name(fun):
    while hasattr(fun, "func") and not hasattr(fun, "__name__"):  # functools.partial
        fun = fun.func
    return getattr(fun, "__name__", type(fun).__name__)


def fun_sourceinfo(fun):
    """``file:line`` where ``fun`` is defined, or None (builtins, callable objects)."""
    while hasattr(fun, "func") and not hasattr(fun, "__code__"):  # functools.partial
        fun = fun.func
    code = getattr(inspect.unwrap(fun), "__code__", None)
    return None if code is None else f"{code.co_filename}:{code.co_firstlineno}"


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


def abstract_leaves(flat_args, names_of):
    """The avals of flat argument leaves; ``names_of()`` (their names, costly: only on error)
    names the leaf that is not an array."""
    try:
        return tuple(abstractify(x, "") for x in flat_args)
    except TypeError:
        return tuple(abstractify(x, n) for x, n in zip(flat_args, names_of()))


def abstractify(x, name):
    """The aval of an argument leaf, as JAX's ``shaped_abstractify`` reads it: an array's
    own, an aval itself, else the ``shape`` and ``dtype`` of anything that has a dtype (a
    ``ShapeDtypeStruct``: ``eval_shape(f, struct)``); TypeError naming the argument when it
    is none of these."""
    if isinstance(x, core.AbstractValue):
        return x
    try:
        return core.get_aval(x)
    except TypeError:
        pass
    aval = _duck_aval(x)
    if aval is None:
        raise TypeError(f"Argument '{name}' of type {type(x)} is not a valid JAX type: "
                        f"traced arguments must be arrays or scalars "
                        f"(mark it static with static_argnums to pass other values).")
    return aval


def _duck_aval(x):
    """The aval of a value that is not an array but has a ``dtype`` (and maybe a ``shape``
    and ``weak_type``), or None. Classes (``jnp.float32``, whose ``dtype`` is a class
    attribute) are types, not values."""
    dtype = getattr(x, "dtype", None)
    if dtype is None or isinstance(x, type):
        return None
    try:
        dtype = dtypes.canonicalize_dtype(dtype)
    except TypeError:
        return None
    return core.ShapedArray(np.shape(x), dtype, getattr(x, "weak_type", False))


class ShapeDtypeStruct:
    """A shape and dtype standing in for an array (as in ``eval_shape``), with the sharding
    an array of it would have (None: wherever it is put; a ``PartitionSpec`` names axes of
    the mesh set by ``remat.sharding.set_mesh``)."""

    __slots__ = ("shape", "dtype", "weak_type", "_sharding")

    def __init__(self, shape, dtype, weak_type=False, *, sharding=None):
        if sharding is not None and not isinstance(sharding, (Sharding, PartitionSpec)):
            raise ValueError(f"sharding should be an instance of `jax.sharding.Sharding` or "
                             f"`jax.sharding.PartitionSpec`. Got {sharding} of type "
                             f"{type(sharding)}.")
        self.shape = tuple(shape)
        # extended dtypes (``key<fry>``) stay themselves, as in an aval
        self.dtype = dtype if isinstance(dtype, dtypes.ExtendedDType) else np.dtype(dtype)
        self.weak_type = weak_type
        self._sharding = sharding

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    @property
    def sharding(self):
        if isinstance(self._sharding, PartitionSpec):
            mesh = get_mesh()
            if mesh is None:
                raise TypeError("When specifying PartitionSpec to `ShapeDtypeStruct`, the "
                                "context mesh cannot be empty. Please use `jax.set_mesh` to "
                                "set the mesh context.")
            return NamedSharding(mesh, self._sharding)
        return self._sharding

    @classmethod
    def like(cls, x):
        """The struct of ``x`` (an array, a NumPy value, a scalar or a struct). remat never
        commits an array to a device, so the sharding is None, as for JAX's uncommitted
        arrays."""
        if isinstance(x, ShapeDtypeStruct):
            return cls(x.shape, x.dtype, x.weak_type, sharding=x._sharding)
        aval = abstractify(x, "x")
        return cls(aval.shape, aval.dtype, aval.weak_type)

    def update(self, **kwargs):
        """A copy with the given ``shape``, ``dtype``, ``sharding`` or ``weak_type``."""
        unknown = set(kwargs) - {"shape", "dtype", "sharding", "weak_type"}
        if unknown:
            raise TypeError(f"ShapeDtypeStruct.update got unexpected keyword arguments "
                            f"{sorted(unknown)}")
        return ShapeDtypeStruct(kwargs.get("shape", self.shape), kwargs.get("dtype", self.dtype),
                                kwargs.get("weak_type", self.weak_type),
                                sharding=kwargs.get("sharding", self._sharding))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __eq__(self, other):
        return (isinstance(other, ShapeDtypeStruct) and self.shape == other.shape
                and self.dtype == other.dtype and self.weak_type == other.weak_type
                and self.sharding == other.sharding)

    def __hash__(self):
        return hash((self.shape, self.dtype, self.weak_type, self.sharding))

    def __repr__(self):
        sharding = self.sharding
        sharding = "" if sharding is None else f", sharding={sharding}"
        weak = ", weak_type=True" if self.weak_type else ""
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name}{sharding}{weak})"


core.pytype_aval_mappings[ShapeDtypeStruct] = lambda s: core.ShapedArray(
    s.shape, dtypes.canonicalize_dtype(s.dtype), s.weak_type)


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


def argnums_in_bounds(argnums, num_args):
    """jit's argnums at a call with ``num_args`` positional arguments, made nonnegative:
    those past the end are ignored (a parameter left to its default), those before the start
    are an error (JAX's rule)."""
    out = []
    for i in argnums:
        if i >= num_args:
            continue
        if i < -num_args:
            raise ValueError(f"Positional argument indices, e.g. for `static_argnums`, must have "
                             f"value greater than or equal to -len(args) and less than "
                             f"len(args), but got value {i} for len(args) == {num_args}.")
        out.append(i % num_args)
    return tuple(sorted(set(out)))


def resolve_jit_argnums(fun, static_argnums, static_argnames, donate_argnums):
    """jit's ``(static_argnums, static_argnames, donate_argnums)`` checked against ``fun``'s
    signature when jit wraps it: each of static_argnums/static_argnames not given is inferred
    from the other, and positions or names ``fun`` cannot take are a ValueError then."""
    label = f"jit of {fun_name(fun)}"
    if static_argnums is not None:
        static_argnums = normalize_argnums(static_argnums, None, label)
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    elif static_argnames is not None:
        static_argnames = tuple(static_argnames)
    donate_argnums = normalize_argnums(donate_argnums, None, label, "donate_argnums")
    sig = _signature(fun)
    if sig is None:  # a builtin: nothing to infer or check against
        return static_argnums or (), static_argnames or (), donate_argnums
    by_position = [(i, p.name) for i, p in enumerate(sig.parameters.values())
                   if p.kind is p.POSITIONAL_OR_KEYWORD]
    if static_argnums is None:
        static_argnums = tuple(i for i, n in by_position if n in (static_argnames or ()))
    if static_argnames is None:
        static_argnames = tuple(n for i, n in by_position if i in static_argnums)
    _check_argnums(sig, static_argnums, "static_argnums")
    _check_argnums(sig, donate_argnums, "donate_argnums")
    _check_argnames(sig, static_argnames)
    return static_argnums, static_argnames, donate_argnums


def _check_argnums(sig, argnums, what):
    params = sig.parameters.values()
    if not argnums or any(p.kind is p.VAR_POSITIONAL for p in params):
        return
    n = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    if min(argnums) < -n or max(argnums) >= n:
        raise ValueError(f"Jitted function has {what}={argnums}, but only accepts {n} "
                         f"positional arguments.")


def _check_argnames(sig, argnames):
    params = sig.parameters
    positional_only = {n for n in argnames if n in params and params[n].kind in
                       (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)}
    if positional_only:
        raise ValueError(f"Jitted function has invalid argnames {positional_only} in "
                         f"static_argnames. These are positional-only")
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    unknown = set(argnames) - set(params)
    if unknown:
        raise ValueError(f"Jitted function has invalid argnames {unknown} in static_argnames. "
                         f"Function does not take these args.")


def hashable_static(value, where, fun):
    """jit's cache key for a static argument: its value, and its type so that ``1`` and
    ``1.0`` (equal, but traced differently) do not share a trace. A value that cannot be
    hashed is a ValueError, as in JAX: keying it by identity would retrace on every call."""
    try:
        hash(value)
    except TypeError as e:
        raise ValueError(f"Non-hashable static arguments are not supported. Static argument "
                         f"{where} of type {type(value)} for function {fun_name(fun)} is "
                         f"non-hashable: {value!r}. The error was:\nTypeError: {e}") from None
    return type(value), value


class TraceCache:
    """A function's traces by signature, at most ``config.trace_cache_size`` of them: the
    least recently used is evicted first, so a function called with ever-new shapes or
    static values does not keep every trace (and its constants) alive."""

    __slots__ = ("_entries",)

    def __init__(self):
        self._entries = collections.OrderedDict()

    def get(self, key):
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def __setitem__(self, key, entry):
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > config.trace_cache_size:
            self._entries.popitem(last=False)

    def __len__(self):
        return len(self._entries)

    def keys(self):
        """The keys, least recently used first."""
        return list(self._entries)


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


def wrap_transformed(wrapper, fun, name):
    """``wrapper`` of ``fun`` as JAX's transformations make theirs: the function's attributes
    (an equinox module's fields), docstring and ``__wrapped__`` carry over (equinox reads a
    module's state index through ``jax.vmap(module)``, and warns of transformed modules
    assigned as attributes by following ``__wrapped__``)."""
    try:
        functools.update_wrapper(wrapper, fun)
    except (TypeError, AttributeError):  # (an attribute that cannot be set: not copied, as JAX)
        wrapper.__wrapped__ = fun
    wrapper.__name__ = name
    return wrapper
