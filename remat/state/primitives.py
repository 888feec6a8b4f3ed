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

from remat import core, dtypes
from remat.core import Primitive, ShapedArray, Tracer
from remat.interpreters import ad, batching, discharge
from remat.interpreters import partial_eval as pe
from remat.lax.elementwise import add, clamp, convert_element_type, lt, select
from remat.lax.shape import full
from remat.numpy import indexing as jnp_indexing
from remat.ref_types import (
    INDEX_DYN,
    INDEX_INT,
    INDEX_SLICE,
    AbstractRef,
    NDIndexer,
    Ref,
    TangentCell,
    full_indexer,
    indexed_shape,
    normalize_index,
    ref_ops,
    vmapped_write_error,
    written_into_undifferentiated,
)
from remat.runtime import registry

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


# --- reading and writing contents as values --------------------------------------------------


def _clamped(i, dim):
    """A dynamic scalar index counted from the end when negative, clamped into the axis."""
    dtype = core.get_aval(i).dtype
    i = convert_element_type(i, dtype)
    if dtypes.kind(dtype) == "i":
        i = select(lt(i, full((), 0, dtype)), add(i, full((), dim, dtype)),
                       i)
    return clamp(full((), 0, dtype), i, full((), max(dim - 1, 0), dtype))


def _value_index(indexer, dynamic):
    """The ``remat.numpy`` index equivalent to ``indexer`` with its dynamic operands."""
    it = iter(dynamic)
    out = []
    for e, dim in zip(indexer.entries, indexer.shape):
        if e[0] == INDEX_INT:
            out.append(e[1])
        elif e[0] == INDEX_SLICE:
            out.append(slice(e[1], e[2] if e[2] >= 0 else None, e[3]))
        elif e[0] == INDEX_DYN:
            out.append(_clamped(next(it), dim))
        else:
            out.append(next(it))
    return tuple(out)


def _like(x, aval):
    """``x`` with exactly the dtype and weak type of ``aval`` (contents keep their type)."""
    x_aval = core.get_aval(x)
    if x_aval.dtype != aval.dtype or x_aval.weak_type != aval.weak_type:
        return convert_element_type(x, aval.dtype, aval.weak_type)
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
        return _like(add(contents, _like(x, aval)), aval)
    return _like(jnp_indexing.scatter_update(contents, _value_index(indexer, dynamic), x,
                                             "scatter_add"), aval)


# --- the eager Ref ---------------------------------------------------------------------------


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
        if e[0] == INDEX_INT:
            out.append(e[1])
        elif e[0] == INDEX_SLICE:
            out.append(slice(e[1], e[2] if e[2] >= 0 else None, e[3]))
        elif e[0] == INDEX_DYN:
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


def _current(cell):
    """The contents' tangent in ``cell`` as an array (zeros, of the contents' type, while
    symbolic)."""
    if type(cell.value) is ad.Zero and cell.aval.dtype != dtypes.float0:
        return _like(ad.instantiate_zeros(cell.value), cell.aval)
    return ad.instantiate_zeros(cell.value)


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


def _swap_jvp(primals, tangents, *, indexer):
    ref, x, *dynamic = primals
    cell, x_dot = tangents[0], tangents[1]
    old = swap_p.bind(ref, x, *dynamic, indexer=indexer)
    zero = ad.Zero.from_primal_value(old)
    if type(cell) is not TangentCell:
        _differentiated_ref_error(cell, ref)
        if type(x_dot) is not ad.Zero and not _no_grad(ref):
            raise written_into_undifferentiated("set/swap", ref)
        return old, zero
    if type(cell.value) is ad.Zero and type(x_dot) is ad.Zero:
        return old, zero
    old_dot = zero if type(cell.value) is ad.Zero else read_value(cell.value, indexer, dynamic)
    cell.value = write_value(_current(cell), indexer, dynamic, ad.instantiate_zeros(x_dot))
    return old, old_dot


def _addupdate_jvp(primals, tangents, *, indexer):
    ref, x, *dynamic = primals
    cell, x_dot = tangents[0], tangents[1]
    addupdate_p.bind(ref, x, *dynamic, indexer=indexer)
    if type(cell) is not TangentCell:
        _differentiated_ref_error(cell, ref)
        if type(x_dot) is not ad.Zero and not _no_grad(ref):
            raise written_into_undifferentiated("addupdate", ref)
    elif type(x_dot) is not ad.Zero:
        cell.value = add_value(_current(cell), indexer, dynamic, x_dot)
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
    return sum(e[0] == INDEX_SLICE for e in indexer.entries[:axis])


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
        raise vmapped_write_error(what, ref)
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


# --- discharge: the primitives on a Ref's contents as values -----------------------------------


def _new_ref_rule(contents, invals, eqn):
    x = invals[0]
    aval = AbstractRef(core.get_aval(x), eqn.params["memory_space"], eqn.params["kind"])
    h = discharge.Handle(object(), aval, eqn.source_info or True)
    contents[h.key] = x
    return h


def _empty_ref_rule(contents, invals, eqn):
    ty = eqn.params["ty"]
    h = discharge.Handle(object(), AbstractRef(ty), eqn.source_info or True)
    zeros = full(ty.shape, 0, ty.dtype)
    contents[h.key] = convert_element_type(zeros, ty.dtype, True) if ty.weak_type else zeros
    return h


def _get_rule(contents, invals, eqn):
    h, *dynamic = invals
    return read_value(contents[h.key], eqn.params["indexer"], dynamic)


def _swap_rule(contents, invals, eqn):
    h, x, *dynamic = invals
    indexer = eqn.params["indexer"]
    old = read_value(contents[h.key], indexer, dynamic)
    contents[h.key] = write_value(contents[h.key], indexer, dynamic, x)
    return old


def _addupdate_rule(contents, invals, eqn):
    h, x, *dynamic = invals
    contents[h.key] = add_value(contents[h.key], eqn.params["indexer"], dynamic, x)
    return []


def _freeze_rule(contents, invals, eqn):
    h = invals[0]
    if h.created is None:
        raise ValueError(f"freeze can only be applied to a Ref in the scope that created it: "
                         f"this Ref of type {h.aval} was passed in (as an argument, or closed "
                         f"over); read its value with ref[...] instead")
    return contents[h.key]


discharge.register_state_primitive(new_ref_p, _new_ref_rule, creates=True)
discharge.register_state_primitive(empty_ref_p, _empty_ref_rule, creates=True)
discharge.register_state_primitive(get_p, _get_rule)
discharge.register_state_primitive(swap_p, _swap_rule, writes=True)
discharge.register_state_primitive(addupdate_p, _addupdate_rule, writes=True)
discharge.register_state_primitive(freeze_p, _freeze_rule)
discharge.register_state_primitive(free_ref_p, lambda contents, invals, eqn: [], writes=True)


def _read_whole(ref):
    return get_p.bind(ref, indexer=full_indexer(core.get_aval(ref).shape))


def _write_whole(ref, value):
    swap_p.bind(ref, value, indexer=full_indexer(core.get_aval(ref).shape))


discharge.ref_access.read, discharge.ref_access.write = _read_whole, _write_whole
ref_ops.get, ref_ops.swap, ref_ops.addupdate = ref_get, ref_swap, ref_addupdate
# two reads of a Ref may differ (a write between them), two new Refs are distinct Refs: a
# staged program with state ops (jit(f).lower(...).as_text()) is never merged by CSE
registry.cse_barriers.update({new_ref_p, empty_ref_p, get_p, freeze_p})
