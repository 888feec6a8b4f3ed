"""Mutable array references: the ``Ref`` value, its abstract value ``AbstractRef``, and the
state primitives that create, read and write one (JAX's names): ``new_ref``, ``empty_ref``,
``get`` (``ref[idx]``), ``swap`` (``ref[idx] = x``, returning the old value), ``addupdate``
(``ref[idx] += x`` in one step), ``freeze`` and ``free_ref``.

Eagerly a ``Ref`` owns a writable NumPy buffer and the primitives act on it in place. Traced,
a Ref is a value of type ``Ref{f32[3]}`` and the primitives are staged as effects; before a
jaxpr runs, ``remat.interpreters.discharge`` rewrites them into pure array operations (the
executor never sees a Ref). Their rules:

- JVP: a Ref created inside a differentiated function carries a ``TangentCell``, the tangent
  of its contents as a *value*, updated by each write. The tangent computation is therefore
  pure, and reverse mode transposes it with the ordinary rules: a read's cotangent is a
  scatter-add into the contents' cotangent, an ``addupdate``'s is a read of it. A Ref
  created outside (closed over) has a zero tangent: writing a differentiated value into it
  is an error, as in JAX.
- Batching: a Ref created under ``vmap`` is always batched (values written later may be);
  indexing keeps its batch axis. Writing a batched value into an unbatched Ref is an error.

An index is stored as an ``NDIndexer`` param, one entry per axis; the dynamic parts (traced
scalar or array integer indices) are operands after the Ref (and the written value). Reads
and writes follow ``remat.numpy`` indexing (NumPy's rules) on the contents, with dynamic
scalar indices clamped into their axis, as JAX does for Refs.
"""

import numpy as np

from remat import core, dtypes, lax, memory
from remat.core import Primitive, ShapedArray, Tracer
from remat.interpreters import ad, batching
from remat.interpreters import partial_eval as pe
from remat.numpy import indexing as jnp_indexing

__all__ = [
    "AbstractRef",
    "NDIndexer",
    "Ref",
    "TangentCell",
    "addupdate_p",
    "empty_ref_p",
    "free_ref_p",
    "freeze_p",
    "get_p",
    "new_ref_p",
    "swap_p",
]


# --- the abstract value ----------------------------------------------------------------------


class AbstractRef:
    """The type of a mutable array reference: the ``inner_aval`` of its contents (printed
    ``Ref{f32[3]}``). ``kind='no_grad_no_remat'`` marks a Ref whose contents are never
    differentiated."""

    __slots__ = ("inner_aval", "memory_space", "kind", "_hash")

    def __init__(self, inner_aval, memory_space=None, kind=None):
        if not isinstance(inner_aval, ShapedArray):
            raise TypeError(f"a Ref holds an array, got contents of type {inner_aval}")
        self.inner_aval = inner_aval
        self.memory_space = memory_space
        self.kind = kind
        self._hash = None

    shape = property(lambda self: self.inner_aval.shape)
    dtype = property(lambda self: self.inner_aval.dtype)
    ndim = property(lambda self: self.inner_aval.ndim)
    size = property(lambda self: self.inner_aval.size)
    weak_type = property(lambda self: self.inner_aval.weak_type)
    nbytes = property(lambda self: self.inner_aval.nbytes)

    def update(self, shape=None, dtype=None, weak_type=None):
        return AbstractRef(self.inner_aval.update(shape, dtype, weak_type), self.memory_space,
                           self.kind)

    def strip_weak_type(self):
        return AbstractRef(self.inner_aval.strip_weak_type(), self.memory_space, self.kind)

    def to_tangent_aval(self):
        return AbstractRef(self.inner_aval.to_tangent_aval(), self.memory_space, self.kind)

    def __eq__(self, other):
        return (type(other) is AbstractRef and self.inner_aval == other.inner_aval
                and self.memory_space == other.memory_space and self.kind == other.kind)

    def __hash__(self):
        if self._hash is None:
            self._hash = hash((AbstractRef, self.inner_aval, self.memory_space, self.kind))
        return self._hash

    def str_short(self):
        return f"Ref{{{self.inner_aval.str_short()}}}"

    def __str__(self):
        return f"Ref{{{core.long_type_str(self.inner_aval)}}}"

    __repr__ = __str__

    def _bool(self, tracer):
        raise TypeError(f"bool() of a mutable array reference of type {self} is not defined; "
                        f"read its value first (ref[...])")

    def _int(self, tracer):
        raise TypeError(f"int() of a mutable array reference of type {self} is not defined; "
                        f"read its value first (ref[...])")

    _float = _int


# --- indices ---------------------------------------------------------------------------------

_INT, _SLICE, _DYN, _ARR = "int", "slice", "dyn", "arr"


class NDIndexer:
    """The static part of a Ref index: one entry per axis, ``('int', k)``,
    ``('slice', start, stop, step)`` (normalized to the axis), ``('dyn',)`` (a scalar
    integer operand) or ``('arr',)`` (an integer array operand, NumPy advanced indexing).
    Printed in NumPy syntax, dynamic operands as ``i0, i1, ...`` in operand order."""

    __slots__ = ("entries", "shape", "_hash")

    def __init__(self, entries, shape):
        self.entries = tuple(entries)
        self.shape = tuple(shape)
        self._hash = hash((self.entries, self.shape))

    def __eq__(self, other):
        return (type(other) is NDIndexer and self.entries == other.entries
                and self.shape == other.shape)

    def __hash__(self):
        return self._hash

    @property
    def num_dynamic(self):
        return sum(e[0] in (_DYN, _ARR) for e in self.entries)

    @property
    def is_full(self):
        """Whether the index selects the whole Ref (``ref[...]``)."""
        return all(e[0] == _SLICE and e[1] == 0 and e[2] == d and e[3] == 1
                   for e, d in zip(self.entries, self.shape))

    @property
    def is_basic(self):
        """Static integers and slices only: a plain view of the contents."""
        return all(e[0] in (_INT, _SLICE) for e in self.entries)

    def with_full_axis(self, axis, size):
        """This index over a Ref with an extra (batch) axis of ``size`` at ``axis``."""
        entries = list(self.entries)
        entries.insert(axis, (_SLICE, 0, size, 1))
        shape = list(self.shape)
        shape.insert(axis, size)
        return NDIndexer(entries, shape)

    def __str__(self):
        if self.is_full:
            return "[...]"
        parts, k = [], 0
        for e in self.entries:
            if e[0] == _INT:
                parts.append(str(e[1]))
            elif e[0] == _SLICE:
                start, stop, step = e[1:]
                text = f"{start}:{stop if stop >= 0 else ''}"
                parts.append(text + (f":{step}" if step != 1 else ""))
            else:
                parts.append(f"i{k}")
                k += 1
        return "[" + ", ".join(parts) + "]"

    __repr__ = __str__


def full_indexer(shape):
    return NDIndexer([(_SLICE, 0, d, 1) for d in shape], shape)


def _static_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def normalize_index(shape, idx):
    """``(indexer, dynamic operands)`` for ``ref[idx]`` on a Ref of ``shape``."""
    if idx is None:
        idx = ()
    if not isinstance(idx, tuple):
        idx = (idx,)
    if any(i is None for i in idx):
        raise TypeError("None (np.newaxis) is not supported when indexing a mutable array "
                        "reference")
    n_ellipsis = sum(i is Ellipsis for i in idx)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    n_real = len(idx) - n_ellipsis
    if n_real > len(shape):
        raise IndexError(f"Too many indices for a Ref of shape {tuple(shape)}: {n_real} "
                         f"indices for {len(shape)} axes")
    fill = (slice(None),) * (len(shape) - n_real)
    if n_ellipsis:
        at = next(k for k, i in enumerate(idx) if i is Ellipsis)
        idx = idx[:at] + fill + idx[at + 1:]
    else:
        idx = idx + fill
    entries, dynamic = [], []
    for dim, i in zip(shape, idx):
        if isinstance(i, slice):
            bounds = [None if b is None else int(core.concrete_or_error(
                b, "slice bounds of a Ref index must be static; use a dynamic index")) for b in
                (i.start, i.stop, i.step)]
            entries.append((_SLICE, *slice(*bounds).indices(dim)))
        elif _static_int(i):
            k = int(i)
            if not -dim <= k < dim:
                raise ValueError(f"Out of bound indexer: idx={k}, dim={dim}.")
            entries.append((_INT, k % dim))
        else:
            if isinstance(i, (list, tuple)):
                i = np.asarray(i)
            if isinstance(i, (bool, np.bool_)):
                raise IndexError("boolean indices are not supported when indexing a mutable "
                                 "array reference")
            aval = core.get_aval(i)
            if aval.dtype == np.bool_:
                raise IndexError("boolean indices are not supported when indexing a mutable "
                                 "array reference")
            if not dtypes.is_integer(aval.dtype):
                raise TypeError(f"Indexer must have integer or boolean type, got indexer with "
                                f"type {aval.dtype.name}")
            entries.append((_DYN,) if not aval.shape else (_ARR,))
            dynamic.append(i)
    return NDIndexer(entries, shape), dynamic


def indexed_shape(indexer, dynamic_shapes):
    """The shape of ``ref[idx]`` (NumPy's rules: integer scalars join array indices as
    advanced indices; a contiguous run of advanced indices keeps its place, else their
    broadcast shape goes first)."""
    it = iter(dynamic_shapes)
    advanced = any(e[0] == _ARR for e in indexer.entries)
    basic_before, basic_after, adv_shapes, adv_axes = [], [], [], []
    for axis, e in enumerate(indexer.entries):
        if e[0] == _SLICE:
            n = len(range(*e[1:]))
            (basic_after if adv_axes else basic_before).append(n)
        elif e[0] == _INT:
            if advanced:
                adv_shapes.append(())
                adv_axes.append(axis)
        else:
            shape = tuple(next(it))
            if advanced:
                adv_shapes.append(shape)
                adv_axes.append(axis)
    if not advanced:
        return tuple(basic_before + basic_after)
    broadcast = np.broadcast_shapes(*adv_shapes)
    if adv_axes == list(range(adv_axes[0], adv_axes[-1] + 1)):
        return tuple(basic_before) + broadcast + tuple(basic_after)
    return broadcast + tuple(basic_before + basic_after)


# --- reading and writing contents as values --------------------------------------------------


def _clamped(i, dim):
    """A dynamic scalar index counted from the end when negative, clamped into the axis."""
    dtype = core.get_aval(i).dtype
    i = lax.convert_element_type(i, dtype)
    if dtypes.kind(dtype) == "i":
        i = lax.select(lax.lt(i, lax.full((), 0, dtype)), lax.add(i, lax.full((), dim, dtype)),
                       i)
    return lax.clamp(lax.full((), 0, dtype), i, lax.full((), max(dim - 1, 0), dtype))


def _value_index(indexer, dynamic):
    """The ``remat.numpy`` index equivalent to ``indexer`` with its dynamic operands."""
    it = iter(dynamic)
    out = []
    for e, dim in zip(indexer.entries, indexer.shape):
        if e[0] == _INT:
            out.append(e[1])
        elif e[0] == _SLICE:
            out.append(slice(e[1], e[2] if e[2] >= 0 else None, e[3]))
        elif e[0] == _DYN:
            out.append(_clamped(next(it), dim))
        else:
            out.append(next(it))
    return tuple(out)


def _like(x, aval):
    """``x`` with exactly the dtype and weak type of ``aval`` (contents keep their type)."""
    x_aval = core.get_aval(x)
    if x_aval.dtype != aval.dtype or x_aval.weak_type != aval.weak_type:
        return lax.convert_element_type(x, aval.dtype, aval.weak_type)
    return x


def read_value(contents, indexer, dynamic):
    """``contents[idx]``: what ``get`` returns."""
    if indexer.is_full:
        return contents
    return jnp_indexing.rewriting_take(contents, _value_index(indexer, dynamic))


def write_value(contents, indexer, dynamic, x):
    """``contents`` with ``contents[idx] = x``: the contents after ``swap``."""
    aval = core.get_aval(contents)
    if indexer.is_full:
        return _like(x, aval)
    return _like(jnp_indexing.scatter_update(contents, _value_index(indexer, dynamic), x,
                                             "scatter"), aval)


def add_value(contents, indexer, dynamic, x):
    """``contents`` with ``contents[idx] += x``: the contents after ``addupdate``."""
    aval = core.get_aval(contents)
    if indexer.is_full:
        return _like(lax.add(contents, _like(x, aval)), aval)
    return _like(jnp_indexing.scatter_update(contents, _value_index(indexer, dynamic), x,
                                             "scatter_add"), aval)


# --- the eager Ref ---------------------------------------------------------------------------


class _RefMeta(type):
    def __instancecheck__(cls, inst):
        return type.__instancecheck__(cls, inst) or (
            isinstance(inst, Tracer) and type(inst.aval) is AbstractRef)


class Ref(metaclass=_RefMeta):
    """A mutable array reference (``remat.new_ref``): read with ``ref[idx]``, write with
    ``ref[idx] = x`` and ``ref[idx] += x``. A traced Ref (inside ``jit``, ``grad``, ...) is
    a tracer of type ``Ref{...}``; ``isinstance(x, Ref)`` holds for both."""

    __slots__ = ("aval", "_value", "_pristine", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("remat.Ref cannot be constructed directly; use remat.new_ref")

    @classmethod
    def _new(cls, buf, aval):
        obj = object.__new__(cls)
        obj.aval = aval
        obj._value = buf
        obj._pristine = True  # never written: its contents still have the initial weak type
        memory.track(buf)
        return obj

    def __del__(self):
        try:
            memory.untrack(self._value)
        except (AttributeError, KeyError, TypeError, NameError):  # interpreter shutdown
            pass

    shape = property(lambda self: self.aval.shape)
    dtype = property(lambda self: self.aval.dtype)
    ndim = property(lambda self: self.aval.ndim)
    size = property(lambda self: self.aval.size)

    def __len__(self):
        if not self.aval.shape:
            raise TypeError("len() of unsized object")
        return self.aval.shape[0]

    def __getitem__(self, idx):
        return ref_get(self, idx)

    def __setitem__(self, idx, value):
        ref_swap(self, idx, value, _function_name="ref_set")

    def addupdate(self, x, idx=()):
        """``ref[idx] += x`` as one ``addupdate``."""
        ref_addupdate(self, idx, x)

    def __array__(self, dtype=None, copy=None):
        raise TypeError(f"a mutable array reference of type {self.aval} is not an array: read "
                        f"its contents with ref[...] (or remat.freeze(ref))")

    def unsafe_buffer_pointer(self):
        """The address of the Ref's buffer: stable across writes, as the buffer is updated
        in place."""
        return self._value.ctypes.data

    def __repr__(self):
        weak = ", weak_type=True" if self.aval.weak_type and self._pristine else ""
        body = np.array2string(self._value, separator=", ", prefix="Array(")
        return f"Ref({body}, dtype={self.aval.dtype.name}{weak})"

    __str__ = __repr__


# --- the primitives --------------------------------------------------------------------------


class StatePrimitive(Primitive):
    """A state primitive: applied to concrete Refs (outside every transformation) it acts on
    the Ref's buffer at once; otherwise the current trace processes it."""

    def bind(self, *args, **params):
        trace = core.current_trace()
        if trace is core.eval_trace and not any(isinstance(x, Tracer) for x in args):
            return _eager(self, args, params)
        return trace.process_primitive(self, args, params)


def _eager(primitive, args, params):
    avals = [core.get_aval(x) for x in args]
    out_aval = core.abstract_eval(primitive, avals, params)
    bufs = [x if type(x) is Ref else core.to_numpy(x, a) for x, a in zip(args, avals)]
    quiet = core.ignore_fp_errors()
    try:
        out = primitive.impl(*bufs, **params)
    finally:
        core.restore_fp_errors(quiet)
    if primitive.multiple_results:
        return [_wrap(o, a) for o, a in zip(out, out_aval)]
    return _wrap(out, out_aval)


def _wrap(buf, aval):
    if type(aval) is AbstractRef:
        return Ref._new(np.array(buf, dtype=aval.dtype), aval)
    return core.make_array(buf, aval)


def _state_primitive(name, multiple_results=False):
    prim = StatePrimitive(name)
    prim.multiple_results = multiple_results
    pe.ref_primitives.add(prim)
    return prim


new_ref_p = _state_primitive("new_ref")
empty_ref_p = _state_primitive("empty_ref")
get_p = _state_primitive("get")
swap_p = _state_primitive("swap")
addupdate_p = _state_primitive("addupdate", multiple_results=True)
freeze_p = _state_primitive("freeze")
free_ref_p = _state_primitive("free_ref", multiple_results=True)
# writes are effects: dead-code elimination keeps them and a checkpoint runs them once, on the
# forward pass, never again when it rematerializes
for _p in (swap_p, addupdate_p, free_ref_p):
    _p.has_effects = True
    _p.remat_replayable = True  # (allowed inside checkpoint ...)
    _p.remat_run_once = True  # (... but never replayed there)
ad.always_differentiated.update({new_ref_p, empty_ref_p})
batching.always_batched.add(new_ref_p)


def _ref_operand(aval, what):
    if type(aval) is not AbstractRef:
        raise ValueError(f"Can only call `{what}` on a `Ref`, got a value of type "
                         f"{aval.str_short() if hasattr(aval, 'str_short') else aval}")
    return aval


def _dynamic_avals(indexer, avals):
    if len(avals) != indexer.num_dynamic:
        raise TypeError(f"index {indexer} takes {indexer.num_dynamic} dynamic operands, got "
                        f"{len(avals)}")
    for a in avals:
        if type(a) is AbstractRef or not dtypes.is_integer(a.dtype):
            raise TypeError(f"Indexer must have integer type, got {a}")
    return [a.shape for a in avals]


def _new_ref_abstract_eval(init, *, memory_space, kind):
    if type(init) is AbstractRef:
        raise TypeError(f"new_ref got a mutable array reference of type {init}: Refs of Refs "
                        f"are not supported")
    return AbstractRef(init, memory_space, kind)


def _empty_ref_abstract_eval(*, ty, memory_space):
    return AbstractRef(ty, memory_space)


def _get_abstract_eval(ref, *dynamic, indexer):
    ref = _ref_operand(ref, "get")
    shape = indexed_shape(indexer, _dynamic_avals(indexer, dynamic))
    return ShapedArray(shape, ref.dtype, ref.weak_type)


def _check_value(what, ref, x, indexer, dynamic):
    ref = _ref_operand(ref, what)
    expected = indexed_shape(indexer, _dynamic_avals(indexer, dynamic))
    if type(x) is AbstractRef:
        raise TypeError(f"cannot {what} a mutable array reference into a Ref")
    if x.shape != expected:
        raise ValueError(f"Invalid shape for `{what}`. Ref shape: {ref.shape}. Expected shape: "
                         f"{expected}. Value shape: {x.shape}. Transforms: {indexer}. ")
    if x.dtype != ref.dtype:
        raise ValueError(f"Invalid dtype for `{what}`. Ref dtype: {ref.dtype.name}. Value "
                         f"dtype: {x.dtype.name}. ")
    return ref, expected


def _swap_abstract_eval(ref, x, *dynamic, indexer):
    ref, shape = _check_value("swap", ref, x, indexer, dynamic)
    return ShapedArray(shape, ref.dtype, ref.weak_type)


def _addupdate_abstract_eval(ref, x, *dynamic, indexer):
    _check_value("addupdate", ref, x, indexer, dynamic)
    return []


def _freeze_abstract_eval(ref):
    return _ref_operand(ref, "freeze").inner_aval


def _free_ref_abstract_eval(ref):
    _ref_operand(ref, "free_ref")
    return []


new_ref_p.def_abstract_eval(_new_ref_abstract_eval)
empty_ref_p.def_abstract_eval(_empty_ref_abstract_eval)
get_p.def_abstract_eval(_get_abstract_eval)
swap_p.def_abstract_eval(_swap_abstract_eval)
addupdate_p.def_abstract_eval(_addupdate_abstract_eval)
freeze_p.def_abstract_eval(_freeze_abstract_eval)
free_ref_p.def_abstract_eval(_free_ref_abstract_eval)


# --- eager implementations: the Ref's buffer, in place ---------------------------------------


def _numpy_index(indexer, dynamic, clip_arrays):
    """The NumPy index of ``indexer`` on concrete dynamic operands, or None when an array
    index is out of bounds and the update must drop it (``remat.numpy``'s rule)."""
    it = iter(dynamic)
    out = []
    for e, dim in zip(indexer.entries, indexer.shape):
        if e[0] == _INT:
            out.append(e[1])
        elif e[0] == _SLICE:
            out.append(slice(e[1], e[2] if e[2] >= 0 else None, e[3]))
        elif e[0] == _DYN:
            i = int(next(it))
            out.append(min(max(i + dim if i < 0 else i, 0), max(dim - 1, 0)))
        else:
            a = np.asarray(next(it)).astype(np.int64)
            a = np.where(a < 0, a + dim, a)
            if clip_arrays:
                a = np.clip(a, 0, max(dim - 1, 0))
            elif a.size and (a.min() < 0 or a.max() >= dim):
                return None
            out.append(a)
    return tuple(out)


def _get_impl(ref, *dynamic, indexer):
    return np.array(ref._value[_numpy_index(indexer, dynamic, True)])


def _contents(ref):
    return core.make_array(np.array(ref._value), ref.aval.inner_aval)


def _swap_impl(ref, x, *dynamic, indexer):
    ref._pristine = False
    old = _get_impl(ref, *dynamic, indexer=indexer)
    idx = _numpy_index(indexer, dynamic, False)
    if idx is None:  # some indices drop out: the semantics of remat.numpy's scatter
        ref._value[...] = write_value(_contents(ref), indexer, dynamic, x)._buf
    else:
        ref._value[idx] = x
    return old


def _addupdate_impl(ref, x, *dynamic, indexer):
    ref._pristine = False
    idx = _numpy_index(indexer, dynamic, False)
    if idx is None:
        ref._value[...] = add_value(_contents(ref), indexer, dynamic, x)._buf
    elif indexer.is_basic:
        ref._value[idx] += x
    else:
        np.add.at(ref._value, idx, x)  # repeated indices accumulate
    return []


new_ref_p.def_impl(lambda init, *, memory_space, kind: np.array(init))
empty_ref_p.def_impl(lambda *, ty, memory_space: np.zeros(ty.shape, ty.dtype))
get_p.def_impl(_get_impl)
swap_p.def_impl(_swap_impl)
addupdate_p.def_impl(_addupdate_impl)
freeze_p.def_impl(lambda ref: np.array(ref._value))
free_ref_p.def_impl(lambda ref: [])


# --- forward mode ----------------------------------------------------------------------------


class TangentCell:
    """The tangent of a Ref created inside a differentiated function: the tangent of its
    contents as a value (``ad.Zero`` until a differentiated value is written), replaced by
    each write. Reads take their tangent from it."""

    __slots__ = ("value", "aval")

    def __init__(self, value, aval):
        self.value = value
        self.aval = aval

    def current(self):
        """The contents' tangent as an array (zeros, of the contents' type, while
        symbolic)."""
        if type(self.value) is ad.Zero and self.aval.dtype != dtypes.float0:
            return _like(ad.instantiate_zeros(self.value), self.aval)
        return ad.instantiate_zeros(self.value)

    def __repr__(self):
        return f"TangentCell({self.value!r})"


def _differentiated_ref_error(ref_tangent, ref):
    if type(ref_tangent) is ad.Zero:
        return
    raise ValueError(f"Differentiating with respect to a mutable array reference of type "
                     f"{core.get_aval(ref)} is not supported: read its value (ref[...]) and "
                     f"differentiate with respect to that, or pass the Ref as a "
                     f"non-differentiated argument.")


def _no_grad(ref):
    return core.get_aval(ref).kind == "no_grad_no_remat"


def _new_ref_jvp(primals, tangents, *, memory_space, kind):
    out = new_ref_p.bind(primals[0], memory_space=memory_space, kind=kind)
    aval = core.get_aval(primals[0]).to_tangent_aval()
    if kind == "no_grad_no_remat":
        return out, ad.Zero(AbstractRef(aval, memory_space, kind))
    return out, TangentCell(tangents[0], aval)


def _empty_ref_jvp(primals, tangents, *, ty, memory_space):
    out = empty_ref_p.bind(ty=ty, memory_space=memory_space)
    return out, TangentCell(ad.Zero(ty.to_tangent_aval()), ty.to_tangent_aval())


def _get_jvp(primals, tangents, *, indexer):
    ref, *dynamic = primals
    out = get_p.bind(ref, *dynamic, indexer=indexer)
    cell = tangents[0]
    if type(cell) is TangentCell and type(cell.value) is not ad.Zero:
        return out, read_value(cell.value, indexer, dynamic)
    if type(cell) is not TangentCell:
        _differentiated_ref_error(cell, ref)
    return out, ad.Zero.from_primal_value(out)


def _written_into_undifferentiated(what, ref):
    return Exception(f"performing a {what} operation with a differentiated value on a "
                     f"non-differentiated array reference of type {core.get_aval(ref)}. Move "
                     f"the array reference to be an argument of the differentiated function?")


def _swap_jvp(primals, tangents, *, indexer):
    ref, x, *dynamic = primals
    cell, x_dot = tangents[0], tangents[1]
    old = swap_p.bind(ref, x, *dynamic, indexer=indexer)
    zero = ad.Zero.from_primal_value(old)
    if type(cell) is not TangentCell:
        _differentiated_ref_error(cell, ref)
        if type(x_dot) is not ad.Zero and not _no_grad(ref):
            raise _written_into_undifferentiated("set/swap", ref)
        return old, zero
    if type(cell.value) is ad.Zero and type(x_dot) is ad.Zero:
        return old, zero
    old_dot = zero if type(cell.value) is ad.Zero else read_value(cell.value, indexer, dynamic)
    cell.value = write_value(cell.current(), indexer, dynamic, ad.instantiate_zeros(x_dot))
    return old, old_dot


def _addupdate_jvp(primals, tangents, *, indexer):
    ref, x, *dynamic = primals
    cell, x_dot = tangents[0], tangents[1]
    addupdate_p.bind(ref, x, *dynamic, indexer=indexer)
    if type(cell) is not TangentCell:
        _differentiated_ref_error(cell, ref)
        if type(x_dot) is not ad.Zero and not _no_grad(ref):
            raise _written_into_undifferentiated("addupdate", ref)
    elif type(x_dot) is not ad.Zero:
        cell.value = add_value(cell.current(), indexer, dynamic, x_dot)
    return [], []


def _freeze_jvp(primals, tangents):
    out = freeze_p.bind(primals[0])
    cell = tangents[0]
    if type(cell) is TangentCell:
        return out, cell.value
    _differentiated_ref_error(cell, primals[0])
    return out, ad.Zero.from_primal_value(out)


def _free_ref_jvp(primals, tangents):
    free_ref_p.bind(primals[0])
    return [], []


ad.primitive_jvps[new_ref_p] = _new_ref_jvp
ad.primitive_jvps[empty_ref_p] = _empty_ref_jvp
ad.primitive_jvps[get_p] = _get_jvp
ad.primitive_jvps[swap_p] = _swap_jvp
ad.primitive_jvps[addupdate_p] = _addupdate_jvp
ad.primitive_jvps[freeze_p] = _freeze_jvp
ad.primitive_jvps[free_ref_p] = _free_ref_jvp


# --- batching --------------------------------------------------------------------------------


def _kept_axis(indexer, axis):
    """Where the batch axis inserted at ``axis`` lands in a basic read's result."""
    return sum(e[0] == _SLICE for e in indexer.entries[:axis])


def _vmapped_write_error(what, ref):
    return Exception(f"performing a {what} operation with vmapped value on an unbatched array "
                     f"reference of type {core.get_aval(ref)}. Move the array reference to be "
                     f"an argument to the vmapped function?")


def _whole(ref):
    return get_p.bind(ref, indexer=full_indexer(core.get_aval(ref).shape))


def _new_ref_batch(vals, dims, *, memory_space, kind):
    x = batching.moveaxis(vals[0], dims[0], 0)
    return new_ref_p.bind(x, memory_space=memory_space, kind=kind), 0


def _get_batch(vals, dims, *, indexer):
    ref, *dynamic = vals
    ref_dim, *dyn_dims = dims
    if ref_dim is not None and indexer.is_basic:
        size = core.get_aval(ref).shape[ref_dim]
        out = get_p.bind(ref, indexer=indexer.with_full_axis(ref_dim, size))
        return out, _kept_axis(indexer, ref_dim)
    size = batching.axis_size_of(vals, dims)
    (out,), (out_dim,) = batching.batch_flat(
        lambda whole, *ds: [read_value(whole, indexer, ds)], size,
        [_whole(ref), *dynamic], [ref_dim, *dyn_dims])
    return out, out_dim


def _batched_write(what, update, vals, dims, indexer):
    """The contents after a batched ``swap``/``addupdate`` (and the old value), written back
    whole: ``update(contents, x, *dynamic) -> [old..., new contents]``."""
    ref, x, *dynamic = vals
    ref_dim, x_dim, *dyn_dims = dims
    if ref_dim is None:
        raise _vmapped_write_error(what, ref)
    size = batching.axis_size_of(vals, dims)
    outs, out_dims = batching.batch_flat(update, size, [_whole(ref), x, *dynamic],
                                         [ref_dim, x_dim, *dyn_dims])
    new = batching.moveaxis(batching.bdim_at_front(outs[-1], out_dims[-1], size), 0, ref_dim)
    swap_p.bind(ref, new, indexer=full_indexer(core.get_aval(ref).shape))
    return outs[:-1], out_dims[:-1]


def _swap_batch(vals, dims, *, indexer):
    ref, x, *dynamic = vals
    ref_dim, x_dim, *dyn_dims = dims
    if ref_dim is not None and indexer.is_basic:
        size = core.get_aval(ref).shape[ref_dim]
        at = _kept_axis(indexer, ref_dim)
        x = batching.moveaxis(batching.bdim_at_front(x, x_dim, size), 0, at)
        return swap_p.bind(ref, x, indexer=indexer.with_full_axis(ref_dim, size)), at

    def update(contents, x, *ds):
        return [read_value(contents, indexer, ds), write_value(contents, indexer, ds, x)]

    (old,), (old_dim,) = _batched_write("set/swap", update, vals, dims, indexer)
    return old, old_dim


def _addupdate_batch(vals, dims, *, indexer):
    ref, x, *dynamic = vals
    ref_dim, x_dim, *dyn_dims = dims
    if ref_dim is not None and indexer.is_basic:
        size = core.get_aval(ref).shape[ref_dim]
        at = _kept_axis(indexer, ref_dim)
        x = batching.moveaxis(batching.bdim_at_front(x, x_dim, size), 0, at)
        addupdate_p.bind(ref, x, indexer=indexer.with_full_axis(ref_dim, size))
        return [], []

    def update(contents, x, *ds):
        return [add_value(contents, indexer, ds, x)]

    _batched_write("addupdate", update, vals, dims, indexer)
    return [], []


def _freeze_batch(vals, dims):
    return freeze_p.bind(vals[0]), dims[0]


def _free_ref_batch(vals, dims):
    free_ref_p.bind(vals[0])
    return [], []


batching.primitive_batchers[new_ref_p] = _new_ref_batch
batching.primitive_batchers[get_p] = _get_batch
batching.primitive_batchers[swap_p] = _swap_batch
batching.primitive_batchers[addupdate_p] = _addupdate_batch
batching.primitive_batchers[freeze_p] = _freeze_batch
batching.primitive_batchers[free_ref_p] = _free_ref_batch


# --- the functions that bind them ------------------------------------------------------------


def _value_operand(x, what):
    if isinstance(x, Ref):
        raise TypeError(f"{what} got a mutable array reference where an array value is "
                        f"expected; read it first (ref[...])")
    if not core.is_array_like(x):
        raise TypeError(f"Error interpreting argument to {what} as a JAX value. The "
                        f"problematic value is of type {type(x)} and was passed to {what} at "
                        f"position 0.")
    return x


def _ref_arg(ref, what):
    if not isinstance(ref, Ref):
        raise TypeError(f"{what} expects a mutable array reference (remat.Ref), got "
                        f"{type(ref).__name__}")
    return ref


def new_ref(init_val, *, memory_space=None, kind=None):
    """A new mutable array reference holding (a copy of) ``init_val``."""
    if kind not in (None, "no_grad_no_remat"):
        raise ValueError(f"new_ref kind must be None or 'no_grad_no_remat', got {kind!r}")
    return new_ref_p.bind(_value_operand(init_val, "new_ref"), memory_space=memory_space,
                          kind=kind)


def empty_ref(ty, memory_space=None):
    """A new mutable array reference of type ``ty`` (a ShapeDtypeStruct, array or aval);
    its contents start as zeros."""
    if isinstance(ty, ShapedArray):
        aval = ty
    elif core.is_array_like(ty):
        aval = core.get_aval(ty).strip_weak_type()
    elif hasattr(ty, "shape") and hasattr(ty, "dtype"):
        aval = ShapedArray(ty.shape, dtypes.canonicalize_dtype(ty.dtype),
                           getattr(ty, "weak_type", False))
    else:
        raise TypeError(f"empty_ref expects a type (e.g. remat.ShapeDtypeStruct), got {ty!r}")
    return empty_ref_p.bind(ty=aval, memory_space=memory_space)


def free_ref(ref):
    """Invalidate ``ref`` (its buffer may be reused)."""
    free_ref_p.bind(_ref_arg(ref, "free_ref"))
    return ()


def freeze(ref):
    """The final contents of ``ref``, as an array."""
    return freeze_p.bind(_ref_arg(ref, "freeze"))


def ref_get(ref, idx=None):
    """``ref[idx]``: the indexed contents of ``ref``, as an array."""
    aval = core.get_aval(_ref_arg(ref, "get"))
    indexer, dynamic = normalize_index(aval.shape, idx)
    return get_p.bind(ref, *dynamic, indexer=indexer)


def ref_swap(ref, idx, value, _function_name="ref_swap"):
    """``ref[idx] = value``, returning the previous ``ref[idx]``."""
    aval = core.get_aval(_ref_arg(ref, _function_name))
    indexer, dynamic = normalize_index(aval.shape, idx)
    value = _value_operand(value, _function_name)
    return swap_p.bind(ref, value, *dynamic, indexer=indexer)


def ref_set(ref, idx, value):
    """``ref[idx] = value``."""
    ref_swap(ref, idx, value, _function_name="ref_set")


def ref_addupdate(ref, idx, x):
    """``ref[idx] += x`` as one operation (cheaper than a read and a write under autodiff:
    its transpose is a single read)."""
    aval = core.get_aval(_ref_arg(ref, "addupdate"))
    indexer, dynamic = normalize_index(aval.shape, idx)
    x = _value_operand(x, "addupdate")
    addupdate_p.bind(ref, x, *dynamic, indexer=indexer)
