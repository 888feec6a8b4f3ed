"""``remat.extend.linear_util``: JAX's wrapped functions (``jax.extend.linear_util``).

A ``WrappedFun`` is a Python function together with a stack of *transformations* applied
around it when it is called: each transformation sees the arguments on the way in and the
results on the way out, and may leave an auxiliary output in a ``Store``.  Two styles, as
JAX's: generators (``transformation``: ``args = yield args, kwargs`` ... ``yield out``) and
plain functions taking the inner callable first (``transformation2``).  Equal wrapped
functions (same function, same transformations and parameters) hash equal, so ``cache``
memoizes on them.
"""

import functools
import weakref

from remat.core import DebugInfo

__all__ = ["StoreException", "WrappedFun", "cache", "merge_linear_aux", "transformation",
           "transformation2", "transformation_with_aux", "transformation_with_aux2",
           "wrap_init"]


class StoreException(Exception):
    """A ``Store`` read before it was filled, or filled twice."""


class _Empty:
    def __repr__(self):
        return "<empty>"


_EMPTY = _Empty()


class Store:
    """Where a transformation leaves an auxiliary output, filled once when the wrapped
    function runs."""

    __slots__ = ("_val",)

    def __init__(self):
        self._val = _EMPTY

    def store(self, val):
        if self._val is not _EMPTY:
            raise StoreException("Store occupied")
        self._val = val

    def reset(self):
        self._val = _EMPTY

    @property
    def val(self):
        if self._val is _EMPTY:
            raise StoreException("Store empty")
        return self._val

    def __nonzero__(self):
        return self._val is not _EMPTY

    __bool__ = __nonzero__


class _Transform:
    """One transformation on the stack: its function, static arguments, style and store."""

    __slots__ = ("fn", "static_args", "generator", "store")

    def __init__(self, fn, static_args, generator, store):
        self.fn, self.static_args = fn, static_args
        self.generator, self.store = generator, store

    def key(self):
        return (self.fn, self.static_args, self.generator)


class WrappedFun:
    """``f`` with ``params`` (keyword arguments bound at the innermost call) and a stack of
    transformations (outermost last)."""

    __slots__ = ("f", "params", "transforms", "debug_info", "__weakref__")

    def __init__(self, f, params, transforms, debug_info):
        self.f, self.params = f, tuple(params)
        self.transforms, self.debug_info = tuple(transforms), debug_info

    __name__ = property(lambda self: getattr(self.f, "__name__", type(self.f).__name__))

    def wrap(self, fn, static_args, generator, store=None):
        return WrappedFun(self.f, self.params,
                          self.transforms + (_Transform(fn, static_args, generator, store),),
                          self.debug_info)

    def wrap_with_aux(self, fn, static_args, generator):
        """``(wrapped, aux)``: wrapped in ``fn``, which returns ``(out, aux)``; ``aux()``
        reads ``aux`` after the wrapped function ran."""
        store = Store()
        return self.wrap(fn, static_args, generator, store), lambda: store.val

    def populate_stores(self, other):
        """Copy the auxiliary outputs of ``other`` (an equal wrapped function that ran)."""
        for mine, theirs in zip(self.transforms, other.transforms):
            if mine.store is not None and theirs.store is not None:
                mine.store.store(theirs.store.val)

    def call_wrapped(self, *args, **kwargs):
        """Run the function under its transformations."""
        return self._call(len(self.transforms), args, kwargs)

    def _call(self, depth, args, kwargs):
        if depth == 0:
            return self.f(*args, **dict(self.params), **kwargs)
        t = self.transforms[depth - 1]
        inner = functools.partial(self._call_inner, depth - 1)
        if not t.generator:
            out = t.fn(inner, *t.static_args, *args, **kwargs)
            if t.store is not None:
                out, aux = out
                t.store.store(aux)
            return out
        gen = t.fn(*t.static_args, *args, **kwargs)
        inner_args, inner_kwargs = next(gen)
        result = self._call(depth - 1, inner_args, inner_kwargs)
        out = gen.send(result)
        if t.store is not None:
            out, aux = out
            t.store.store(aux)
        gen.close()
        return out

    def _call_inner(self, depth, *args, **kwargs):
        return self._call(depth, args, kwargs)

    def _key(self):
        return (self.f, self.params, tuple(t.key() for t in self.transforms))

    def __eq__(self, other):
        return isinstance(other, WrappedFun) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        names = ", ".join(getattr(t.fn, "__name__", repr(t.fn)) for t in self.transforms)
        return f"Wrapped function {self.__name__} with transformations [{names}]"


def wrap_init(f, params=None, *, debug_info=None):
    """``f`` as a ``WrappedFun`` with no transformation (``params``: keyword arguments)."""
    params = () if params is None else tuple(sorted(dict(params).items()))
    if debug_info is None:
        debug_info = DebugInfo(getattr(f, "__name__", type(f).__name__), (),
                               "linear_util.wrap_init")
    return WrappedFun(f, params, (), debug_info)


def transformation(gen, fun, *gen_static_args):
    """Wrap ``fun`` in generator transformation ``gen``."""
    return fun.wrap(gen, gen_static_args, True)


def transformation_with_aux(gen, fun, *gen_static_args):
    """``(wrapped, aux)``: ``gen`` yields ``(out, aux)`` last; ``aux()`` reads ``aux`` after
    the wrapped function ran."""
    return fun.wrap_with_aux(gen, gen_static_args, True)


def transformation2(gen, fun, *gen_static_args):
    """Wrap ``fun`` in ``gen(inner_callable, *static_args, *args, **kwargs)``."""
    return fun.wrap(gen, gen_static_args, False)


def transformation_with_aux2(gen, fun, *gen_static_args):
    """As ``transformation2``, ``gen`` returning ``(out, aux)``; see
    ``transformation_with_aux``."""
    return fun.wrap_with_aux(gen, gen_static_args, False)


def merge_linear_aux(aux1, aux2):
    """The one of two auxiliary-output thunks that was filled (exactly one must be)."""
    try:
        out1 = aux1()
    except StoreException:
        try:
            out2 = aux2()
        except StoreException:
            raise StoreException("neither store occupied") from None
        return False, out2
    try:
        aux2()
    except StoreException:
        return True, out1
    raise StoreException("both stores occupied")


def cache(call, *, explain=None):
    """Memoize ``call(fun: WrappedFun, *args)`` on ``fun`` (while it lives) and ``args``;
    a hit fills ``fun``'s stores from the run that was cached."""
    caches = weakref.WeakKeyDictionary()

    @functools.wraps(call)
    def memoized(fun, *args):
        key = (fun.transforms and tuple(t.key() for t in fun.transforms), fun.params, args)
        per_fun = caches.setdefault(fun.f, {}) if _weakrefable(fun.f) else {}
        hit = per_fun.get(key)
        if hit is None:
            ans = call(fun, *args)
            per_fun[key] = (ans, fun)
            return ans
        ans, ran = hit
        fun.populate_stores(ran)
        return ans

    memoized.cache_clear = caches.clear
    return memoized


def _weakrefable(f):
    try:
        weakref.ref(f)
    except TypeError:
        return False
    return True
