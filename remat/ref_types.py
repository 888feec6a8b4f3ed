"""The types of mutable array references, below every transformation: ``AbstractRef`` (the
abstract value of a Ref, beside ``core.ShapedArray``), ``NDIndexer`` (the static part of a Ref
index), the eager ``Ref`` and ``TangentCell`` (the tangent of a Ref created inside a
differentiated function). The interpreters and the discharge of Refs (``interpreters.discharge``)
need only these; the Ref primitives and their rules are ``remat.state.primitives``, which also
gives ``Ref`` its reads and writes (``ref_ops``)."""

import types

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray, Tracer
from remat.runtime import memory

# how a Ref's ``ref[idx]``, ``ref[idx] = x`` and ``ref.addupdate`` run: filled by
# remat.state.primitives with the functions that bind the state primitives
ref_ops = types.SimpleNamespace(get=None, swap=None, addupdate=None)


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

INDEX_INT, INDEX_SLICE, INDEX_DYN, INDEX_ARR = "int", "slice", "dyn", "arr"


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
        return sum(e[0] in (INDEX_DYN, INDEX_ARR) for e in self.entries)

    @property
    def is_full(self):
        """Whether the index selects the whole Ref (``ref[...]``)."""
        return all(e[0] == INDEX_SLICE and e[1] == 0 and e[2] == d and e[3] == 1
                   for e, d in zip(self.entries, self.shape))

    @property
    def is_basic(self):
        """Static integers and slices only: a plain view of the contents."""
        return all(e[0] in (INDEX_INT, INDEX_SLICE) for e in self.entries)

    def with_full_axis(self, axis, size):
        """This index over a Ref with an extra (batch) axis of ``size`` at ``axis``."""
        entries = list(self.entries)
        entries.insert(axis, (INDEX_SLICE, 0, size, 1))
        shape = list(self.shape)
        shape.insert(axis, size)
        return NDIndexer(entries, shape)

    def __str__(self):
        if self.is_full:
            return "[...]"
        parts, k = [], 0
        for e in self.entries:
            if e[0] == INDEX_INT:
                parts.append(str(e[1]))
            elif e[0] == INDEX_SLICE:
                start, stop, step = e[1:]
                text = f"{start}:{stop if stop >= 0 else ''}"
                parts.append(text + (f":{step}" if step != 1 else ""))
            else:
                parts.append(f"i{k}")
                k += 1
        return "[" + ", ".join(parts) + "]"

    __repr__ = __str__


def full_indexer(shape):
    return NDIndexer([(INDEX_SLICE, 0, d, 1) for d in shape], shape)


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
            entries.append((INDEX_SLICE, *slice(*bounds).indices(dim)))
        elif _static_int(i):
            k = int(i)
            if not -dim <= k < dim:
                raise ValueError(f"Out of bound indexer: idx={k}, dim={dim}.")
            entries.append((INDEX_INT, k % dim))
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
            entries.append((INDEX_DYN,) if not aval.shape else (INDEX_ARR,))
            dynamic.append(i)
    return NDIndexer(entries, shape), dynamic


def indexed_shape(indexer, dynamic_shapes):
    """The shape of ``ref[idx]`` (NumPy's rules: integer scalars join array indices as
    advanced indices; a contiguous run of advanced indices keeps its place, else their
    broadcast shape goes first)."""
    it = iter(dynamic_shapes)
    advanced = any(e[0] == INDEX_ARR for e in indexer.entries)
    basic_before, basic_after, adv_shapes, adv_axes = [], [], [], []
    for axis, e in enumerate(indexer.entries):
        if e[0] == INDEX_SLICE:
            n = len(range(*e[1:]))
            (basic_after if adv_axes else basic_before).append(n)
        elif e[0] == INDEX_INT:
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
        return ref_ops.get(self, idx)

    def __setitem__(self, idx, value):
        ref_ops.swap(self, idx, value, _function_name="ref_set")

    def addupdate(self, x, idx=()):
        """``ref[idx] += x`` as one ``addupdate``."""
        ref_ops.addupdate(self, idx, x)

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


# --- forward mode ----------------------------------------------------------------------------


class TangentCell:
    """The tangent of a Ref created inside a differentiated function: the tangent of its
    contents as a value (``ad.Zero`` until a differentiated value is written), replaced by
    each write. Reads take their tangent from it."""

    __slots__ = ("value", "aval")

    def __init__(self, value, aval):
        self.value = value
        self.aval = aval

    def __repr__(self):
        return f"TangentCell({self.value!r})"


# --- errors of writes into a Ref from outside a transformation -------------------------------


def written_into_undifferentiated(what, ref):
    return Exception(f"performing a {what} operation with a differentiated value on a "
                     f"non-differentiated array reference of type {core.get_aval(ref)}. Move "
                     f"the array reference to be an argument of the differentiated function?")


def vmapped_write_error(what, ref):
    return Exception(f"performing a {what} operation with vmapped value on an unbatched array "
                     f"reference of type {core.get_aval(ref)}. Move the array reference to be "
                     f"an argument to the vmapped function?")
