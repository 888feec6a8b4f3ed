"""Collectives over named axes (``psum``, ``all_gather``, ``ppermute`` ...) as primitives with
their rules.

Each primitive names one axis (``axis_name``); the user functions take a name or a tuple of
names and bind one primitive per name. A collective has two batching rules:

- ``batching.collective_batchers``: the vmapped axis *is* the collective's axis (``vmap(...,
  axis_name='i')``, ``pmap``, ``shard_map``), so the collective becomes ordinary array work
  across the batch dimension (``psum`` a sum over it, ``all_gather`` a move of it). It runs for
  unbatched operands too: ``psum`` of a value equal on every member multiplies it by the axis
  size, as in JAX. When the axis spans processes (``pmap`` over several processes) the rule
  does the process-local part and then calls ``remat.lax.process_collectives``.
- ``batching.primitive_batchers``: an unrelated vmap; the collective carries the extra dim.

Transposes: ``psum`` is its own, ``all_gather`` and ``psum_scatter`` are each other's,
``all_to_all`` swaps its split and concat axes, ``ppermute`` inverts its permutation.
``pmax``/``pmin`` differentiate as ``reduce_max`` does (ties share the tangent evenly).
"""

import math

import numpy as np

from remat import core, distributed, dtypes, named_axes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax import process_collectives
from remat.lax.elementwise import add, convert_element_type, div, eq, mul, select_n
from remat.lax.reductions import reduce_max, reduce_min, reduce_sum
from remat.lax.shape import broadcast_in_dim, concatenate, full, full_like, iota, reshape, squeeze
from remat.lax.slicing import dynamic_index_in_dim, index_in_dim, slice_in_dim
from remat.lax.standard import NUMBER, check_dtype, standard_primitive
from remat.tree_util import tree_map

__all__ = [
    "all_gather", "all_gather_p", "all_to_all", "all_to_all_p", "axis_index", "axis_index_p",
    "axis_size", "pbroadcast", "pbroadcast_p", "pmax", "pmax_p", "pmean", "pmin", "pmin_p",
    "ppermute", "ppermute_p", "pshuffle", "psum", "psum_p", "psum_scatter", "pswapaxes",
    "reduce_scatter_p",
]

not_mapped = batching.not_mapped


# --- shared helpers --------------------------------------------------------------------------


def _spanning_processes(axis_name, local_size):
    """``(process_count, process_index)`` when ``axis_name`` spans processes, else None."""
    frame = named_axes.axis_frame(axis_name)
    if not frame.spans_processes:
        return None
    count = distributed.process_count()
    if frame.size != count * local_size:
        raise ValueError(f"axis {axis_name!r} spans {count} processes of {local_size} members "
                         f"but was bound with size {frame.size}")
    return count, frame.process_index


def _at_front(x, d, size):
    return batching.bdim_at_front(x, d, size)


def _unbound_impl(*args, axis_name, **params):
    """Collectives only run as the batched array work of the axis they name: one evaluated on
    its own has no axis."""
    raise named_axes.unbound_error(axis_name)


def _check_groups(name, axis_index_groups):
    if axis_index_groups is not None:
        raise ValueError(f"{name}: axis_index_groups is not supported by remat (got "
                         f"{axis_index_groups!r}); split the axis with nested named axes "
                         f"instead")


def _single_name(fname, axis_name):
    names = named_axes.names_tuple(axis_name)
    if len(names) != 1:
        raise ValueError(f"{fname} takes one axis name in remat, got {axis_name!r}")
    return names[0]


def _check_axis(fname, axis, ndim, what="axis"):
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{fname}: {what} {axis} is out of bounds for an operand of rank "
                         f"{ndim}")
    return axis % ndim


def _merge(x, first):
    """``x`` with dims ``first`` and ``first + 1`` merged (the first major)."""
    shape = core.get_aval(x).shape
    return reshape(x, shape[:first] + (shape[first] * shape[first + 1],) + shape[first + 2:])


def _split(x, dim, outer):
    """``x`` with dim ``dim`` split into ``(outer, rest)``."""
    shape = core.get_aval(x).shape
    return reshape(x, shape[:dim] + (outer, shape[dim] // outer) + shape[dim + 1:])


# --- psum, pmax, pmin ------------------------------------------------------------------------


def _reduce_abstract_eval(name, accepted):
    def abstract_eval(aval, *, axis_name):
        named_axes.axis_frame(axis_name)
        check_dtype(name, aval, accepted)
        return aval

    return abstract_eval


def _reduce_primitive(name, accepted):
    return standard_primitive(name, _unbound_impl, _reduce_abstract_eval(name, accepted))


_ORDERED = ("signedinteger", "unsignedinteger", "floating", "bool")
psum_p = _reduce_primitive("psum", NUMBER)
pmax_p = _reduce_primitive("pmax", _ORDERED)
pmin_p = _reduce_primitive("pmin", _ORDERED)

_LOCAL_REDUCE = {psum_p: (reduce_sum, "sum"), pmax_p: (reduce_max, "max"),
                 pmin_p: (reduce_min, "min")}


def _reduce_named(prim):
    def rule(size, name, vals, dims, *, axis_name):
        (x,), (d,) = vals, dims
        local_reduce, op = _LOCAL_REDUCE[prim]
        if d is not_mapped:
            out = mul(x, full_like(x, size)) if prim is psum_p else x
        else:
            out = local_reduce(x, (d,))
        if _spanning_processes(axis_name, size) is not None:
            out = process_collectives.process_allreduce(out, op)
        return out, not_mapped

    batching.collective_batchers[prim] = rule


def _elementwise_unrelated(prim):
    def rule(vals, dims, **params):
        return prim.bind(*vals, **params), dims[0]

    batching.primitive_batchers[prim] = rule


for _prim in (psum_p, pmax_p, pmin_p):
    _reduce_named(_prim)
    _elementwise_unrelated(_prim)

ad.deflinear(psum_p, lambda ct, *, axis_name: [
    psum_p.bind(ad.instantiate_zeros(ct), axis_name=axis_name)])


def _extremum_jvp(prim):
    def jvp(primals, tangents, *, axis_name):
        (x,), (t,) = primals, tangents
        out = prim.bind(x, axis_name=axis_name)
        if type(t) is ad.Zero:
            return out, ad.Zero.from_primal_value(out)
        hit = convert_element_type(eq(x, out), core.get_aval(t).dtype)
        hits = psum_p.bind(hit, axis_name=axis_name)
        picked = psum_p.bind(mul(t, hit), axis_name=axis_name)
        return out, div(picked, hits)

    ad.primitive_jvps[prim] = jvp


_extremum_jvp(pmax_p)
_extremum_jvp(pmin_p)


def _tree_reduce(prim, x, axis_name, axis_index_groups, fname):
    _check_groups(fname, axis_index_groups)
    names = named_axes.names_tuple(axis_name)

    def one(leaf):
        if prim is psum_p and dtypes.kind(core.get_aval(leaf).dtype) == "b":
            leaf = convert_element_type(leaf, dtypes.int32)
        # checked here too: the vmapped axis's rule skips abstract eval
        check_dtype(fname, core.get_aval(leaf), NUMBER if prim is psum_p else _ORDERED)
        for name in names:
            leaf = prim.bind(leaf, axis_name=name)
        return leaf

    return tree_map(one, x)


def psum(x, axis_name, *, axis_index_groups=None):
    """The sum of ``x`` (a pytree) over the members of ``axis_name`` (a name or a tuple of
    names); a value equal on every member is multiplied by the axis size."""
    return _tree_reduce(psum_p, x, axis_name, axis_index_groups, "psum")


def pmax(x, axis_name, *, axis_index_groups=None):
    """The elementwise maximum of ``x`` over the members of ``axis_name``."""
    return _tree_reduce(pmax_p, x, axis_name, axis_index_groups, "pmax")


def pmin(x, axis_name, *, axis_index_groups=None):
    """The elementwise minimum of ``x`` over the members of ``axis_name``."""
    return _tree_reduce(pmin_p, x, axis_name, axis_index_groups, "pmin")


def pmean(x, axis_name, *, axis_index_groups=None):
    """The mean of ``x`` over the members of ``axis_name`` (integers give floats, as JAX's
    true division)."""
    size = axis_size(axis_name)

    def mean(leaf):
        aval = core.get_aval(leaf)
        if not dtypes.is_inexact(aval.dtype):
            leaf = convert_element_type(leaf, dtypes.default_float_dtype())
        return div(leaf, full_like(leaf, size))

    return tree_map(mean, psum(x, axis_name, axis_index_groups=axis_index_groups))


# --- axis_index ------------------------------------------------------------------------------


def _axis_index_abstract_eval(*, axis_name):
    named_axes.axis_frame(axis_name)
    return ShapedArray((), dtypes.int32)


axis_index_p = standard_primitive("axis_index", _unbound_impl, _axis_index_abstract_eval)


def _axis_index_named(size, name, vals, dims, *, axis_name):
    index = iota(dtypes.int32, size)
    span = _spanning_processes(axis_name, size)
    if span is not None:
        index = add(index, full_like(index, span[1] * size))
    return index, 0


batching.collective_batchers[axis_index_p] = _axis_index_named


def axis_index(axis_name):
    """This member's index along ``axis_name`` (row-major over a tuple of names)."""
    names = named_axes.names_tuple(axis_name)
    index = None
    for name in names:
        here = axis_index_p.bind(axis_name=name)
        if index is None:
            index = here
        else:
            size = named_axes.axis_frame(name).size
            index = add(mul(index, full_like(index, size)), here)
    return index


def axis_size(axis_name):
    """The number of members of ``axis_name`` (the product over a tuple of names)."""
    return named_axes.axis_size(axis_name)


# --- all_gather and psum_scatter -------------------------------------------------------------


def _all_gather_abstract_eval(aval, *, axis_name, axis, tiled):
    size = named_axes.axis_frame(axis_name).size
    shape = list(aval.shape)
    if tiled:
        shape[axis] *= size
    else:
        shape.insert(axis, size)
    return aval.update(shape=tuple(shape))


all_gather_p = standard_primitive("all_gather", _unbound_impl, _all_gather_abstract_eval)


def _all_gather_named(size, name, vals, dims, *, axis_name, axis, tiled):
    (x,), (d,) = vals, dims
    gathered = _at_front(x, d, size)
    span = _spanning_processes(axis_name, size)
    if span is not None:
        gathered = _merge(process_collectives.process_allgather(gathered), 0)
    gathered = batching.moveaxis(gathered, 0, axis)
    return (_merge(gathered, axis) if tiled else gathered), not_mapped


def _all_gather_unrelated(vals, dims, *, axis_name, axis, tiled):
    (x,), (d,) = vals, dims
    return all_gather_p.bind(batching.moveaxis(x, d, 0), axis_name=axis_name, axis=axis + 1,
                             tiled=tiled), 0


def _reduce_scatter_abstract_eval(aval, *, axis_name, scatter_dimension, tiled):
    size = named_axes.axis_frame(axis_name).size
    check_dtype("psum_scatter", aval, NUMBER)
    n = aval.shape[scatter_dimension]
    shape = list(aval.shape)
    if tiled:
        if n % size:
            raise ValueError(f"psum_scatter: the scatter dimension {scatter_dimension} of size "
                             f"{n} is not divisible by the size {size} of axis {axis_name!r}")
        shape[scatter_dimension] = n // size
    else:
        if n != size:
            raise ValueError(f"psum_scatter: the scatter dimension {scatter_dimension} must "
                             f"have the size {size} of axis {axis_name!r}, got {n}")
        del shape[scatter_dimension]
    return aval.update(shape=tuple(shape))


reduce_scatter_p = standard_primitive("reduce_scatter", _unbound_impl,
                                      _reduce_scatter_abstract_eval)


def _reduce_scatter_named(size, name, vals, dims, *, axis_name, scatter_dimension, tiled):
    (x,), (d,) = vals, dims
    summed = mul(x, full_like(x, size)) if d is not_mapped else reduce_sum(x, (d,))
    span = _spanning_processes(axis_name, size)
    members = size if span is None else span[0] * size
    if tiled:
        summed = _split(summed, scatter_dimension, members)
    summed = batching.moveaxis(summed, scatter_dimension, 0)  # (members, rest)
    if span is not None:
        summed = process_collectives.process_reduce_scatter(_split(summed, 0, span[0]))
    return summed, 0


def _reduce_scatter_unrelated(vals, dims, *, axis_name, scatter_dimension, tiled):
    (x,), (d,) = vals, dims
    return reduce_scatter_p.bind(batching.moveaxis(x, d, 0), axis_name=axis_name,
                                 scatter_dimension=scatter_dimension + 1, tiled=tiled), 0


batching.collective_batchers[all_gather_p] = _all_gather_named
batching.primitive_batchers[all_gather_p] = _all_gather_unrelated
batching.collective_batchers[reduce_scatter_p] = _reduce_scatter_named
batching.primitive_batchers[reduce_scatter_p] = _reduce_scatter_unrelated
ad.deflinear(all_gather_p, lambda ct, *, axis_name, axis, tiled: [reduce_scatter_p.bind(
    ad.instantiate_zeros(ct), axis_name=axis_name, scatter_dimension=axis, tiled=tiled)])
ad.deflinear(reduce_scatter_p, lambda ct, *, axis_name, scatter_dimension, tiled: [
    all_gather_p.bind(ad.instantiate_zeros(ct), axis_name=axis_name, axis=scatter_dimension,
                      tiled=tiled)])


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False, to="varying"):
    """Every member's ``x`` (a pytree), stacked along a new ``axis`` (or concatenated along
    ``axis`` when ``tiled``); over a tuple of names, in row-major member order."""
    _check_groups("all_gather", axis_index_groups)
    names = named_axes.names_tuple(axis_name)

    def one(leaf):
        ndim = core.get_aval(leaf).ndim
        if tiled and ndim == 0:
            raise ValueError("all_gather with tiled=True needs an operand of rank >= 1, got "
                             "a scalar")
        where = _check_axis("all_gather", axis, ndim if tiled else ndim + 1)
        if len(names) == 1:
            return all_gather_p.bind(leaf, axis_name=names[0], axis=where, tiled=bool(tiled))
        for name in reversed(names):
            leaf = all_gather_p.bind(leaf, axis_name=name, axis=0, tiled=False)
        for _ in names[1:]:
            leaf = _merge(leaf, 0)
        leaf = batching.moveaxis(leaf, 0, where)
        return _merge(leaf, where) if tiled else leaf

    return tree_map(one, x)


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
    """The sum over ``axis_name`` of ``x`` (a pytree), each member keeping its chunk of
    ``scatter_dimension`` (that dim removed unless ``tiled``)."""
    _check_groups("psum_scatter", axis_index_groups)
    names = named_axes.names_tuple(axis_name)

    def one(leaf):
        aval = core.get_aval(leaf)
        dim = _check_axis("psum_scatter", scatter_dimension, aval.ndim, "scatter_dimension")
        if len(names) == 1:  # checked here too: the vmapped axis's rule skips abstract eval
            _reduce_scatter_abstract_eval(aval, axis_name=names[0], scatter_dimension=dim,
                                          tiled=bool(tiled))
            return reduce_scatter_p.bind(leaf, axis_name=names[0], scatter_dimension=dim,
                                         tiled=bool(tiled))
        sizes = [named_axes.axis_frame(n).size for n in names]
        total, n = math.prod(sizes), aval.shape[dim]
        if (n % total) if tiled else (n != total):
            raise ValueError(f"psum_scatter: the scatter dimension {dim} of size {n} does not "
                             f"match the size {total} of axes {names}")
        parts = tuple(sizes) + ((n // total,) if tiled else ())
        leaf = reshape(leaf, aval.shape[:dim] + parts + aval.shape[dim + 1:])
        for name in names:
            leaf = reduce_scatter_p.bind(leaf, axis_name=name, scatter_dimension=dim,
                                         tiled=False)
        return leaf

    return tree_map(one, x)


# --- all_to_all ------------------------------------------------------------------------------


def _all_to_all_abstract_eval(aval, *, axis_name, split_axis, concat_axis):
    size = named_axes.axis_frame(axis_name).size
    if aval.shape[split_axis] != size:
        raise ValueError(f"all_to_all: the split axis {split_axis} must have the size {size} "
                         f"of axis {axis_name!r}, got {aval.shape[split_axis]}")
    shape = list(aval.shape)
    del shape[split_axis]
    shape.insert(concat_axis, size)
    return aval.update(shape=tuple(shape))


all_to_all_p = standard_primitive("all_to_all", _unbound_impl, _all_to_all_abstract_eval)


def _all_to_all_named(size, name, vals, dims, *, axis_name, split_axis, concat_axis):
    (x,), (d,) = vals, dims
    x = _at_front(x, d, size)  # (sources, *shape)
    out = batching.moveaxis(x, split_axis + 1, 0)  # (destinations, sources, rest)
    span = _spanning_processes(axis_name, size)
    if span is not None:
        out = process_collectives.process_alltoall(_split(out, 0, span[0]))
        out = _merge(batching.moveaxis(out, 0, 1), 1)  # (local destinations, all sources)
    return batching.moveaxis(out, 1, concat_axis + 1), 0


def _all_to_all_unrelated(vals, dims, *, axis_name, split_axis, concat_axis):
    (x,), (d,) = vals, dims
    return all_to_all_p.bind(batching.moveaxis(x, d, 0), axis_name=axis_name,
                             split_axis=split_axis + 1, concat_axis=concat_axis + 1), 0


batching.collective_batchers[all_to_all_p] = _all_to_all_named
batching.primitive_batchers[all_to_all_p] = _all_to_all_unrelated
ad.deflinear(all_to_all_p, lambda ct, *, axis_name, split_axis, concat_axis: [
    all_to_all_p.bind(ad.instantiate_zeros(ct), axis_name=axis_name, split_axis=concat_axis,
                      concat_axis=split_axis)])


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
    """Split ``x`` along ``split_axis`` into one chunk per member, send chunk ``j`` to member
    ``j``, and stack what arrives along ``concat_axis`` (concatenate when ``tiled``)."""
    _check_groups("all_to_all", axis_index_groups)
    name = _single_name("all_to_all", axis_name)
    size = named_axes.axis_frame(name).size

    def one(leaf):
        aval = core.get_aval(leaf)
        split = _check_axis("all_to_all", split_axis, aval.ndim, "split_axis")
        concat = _check_axis("all_to_all", concat_axis, aval.ndim, "concat_axis")
        if not tiled:
            _all_to_all_abstract_eval(aval, axis_name=name, split_axis=split,
                                      concat_axis=concat)
            return all_to_all_p.bind(leaf, axis_name=name, split_axis=split, concat_axis=concat)
        if aval.shape[split] % size:
            raise ValueError(f"all_to_all: the split axis {split} of size {aval.shape[split]} "
                             f"is not divisible by the size {size} of axis {name!r}")
        out = all_to_all_p.bind(_split(leaf, split, size), axis_name=name, split_axis=split,
                                concat_axis=concat)
        return _merge(out, concat)

    return tree_map(one, x)


def pswapaxes(x, axis_name, axis, *, axis_index_groups=None):
    """Swap the mapped axis ``axis_name`` with positional ``axis`` (whose size must be the
    axis size): ``all_to_all(x, axis_name, axis, axis)``."""
    return all_to_all(x, axis_name, axis, axis, axis_index_groups=axis_index_groups)


# --- ppermute and pbroadcast -----------------------------------------------------------------


def _ppermute_abstract_eval(aval, *, axis_name, perm):
    size = named_axes.axis_frame(axis_name).size
    for pair in perm:
        if not all(0 <= i < size for i in pair):
            raise ValueError(f"ppermute: perm {perm} has an index outside axis {axis_name!r} "
                             f"of size {size}")
    return aval


ppermute_p = standard_primitive("ppermute", _unbound_impl, _ppermute_abstract_eval)


def _gathered_members(x, d, size, axis_name):
    """Every member's ``x`` stacked first, and the global index of this process's first."""
    x = _at_front(x, d, size)
    span = _spanning_processes(axis_name, size)
    if span is None:
        return x, 0
    return _merge(process_collectives.process_allgather(x), 0), span[1] * size


def _row(x, i):
    return slice_in_dim(x, i, i + 1, axis=0)


def _ppermute_named(size, name, vals, dims, *, axis_name, perm):
    (x,), (d,) = vals, dims
    everyone, first = _gathered_members(x, d, size, axis_name)
    source = {dst: src for src, dst in perm}
    zero = full_like(_row(everyone, 0), 0)
    rows = [_row(everyone, source[g]) if g in source else zero
            for g in range(first, first + size)]
    return concatenate(rows, 0), 0


def _ppermute_transpose(ct, *, axis_name, perm):
    inverse = tuple((dst, src) for src, dst in perm)
    return [ppermute_p.bind(ad.instantiate_zeros(ct), axis_name=axis_name, perm=inverse)]


batching.collective_batchers[ppermute_p] = _ppermute_named
_elementwise_unrelated(ppermute_p)
ad.deflinear(ppermute_p, _ppermute_transpose)


def _check_perm(perm, size, axis_name):
    perm = tuple((int(s), int(d)) for s, d in perm)
    srcs, dsts = [s for s, _ in perm], [d for _, d in perm]
    if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
        raise ValueError(f"ppermute sources and destinations must be unique, got {perm}")
    if not all(0 <= i < size for i in srcs + dsts):
        raise ValueError(f"ppermute: perm {perm} has an index outside axis {axis_name!r} of "
                         f"size {size}")
    return perm


def ppermute(x, axis_name, perm):
    """Send member ``src``'s ``x`` to member ``dst`` for each pair of ``perm``; members no
    pair sends to get zeros. Over a tuple of names, members are numbered row-major."""
    names = named_axes.names_tuple(axis_name)
    perm = _check_perm(perm, axis_size(names), axis_name)
    if len(names) == 1:
        return tree_map(lambda leaf: ppermute_p.bind(leaf, axis_name=names[0], perm=perm), x)
    source = dict((dst, src) for src, dst in perm)
    size = axis_size(names)
    return tree_map(lambda leaf: _pick_member(leaf, names, [source.get(d) for d in
                                                            range(size)]), x)


def _pick_member(x, names, sources):
    """Over a tuple of axes: member ``k`` gets member ``sources[k]``'s ``x`` (zeros where
    ``None``), from an ``all_gather`` indexed by the member's own index."""
    me = axis_index(names)
    table = np.array([0 if s is None else s for s in sources], np.int32)
    keep = np.array([s is not None for s in sources], core.get_aval(x).dtype)
    everyone = all_gather(x, names)
    row = dynamic_index_in_dim(everyone, dynamic_index_in_dim(table, me, 0, False),
                                   0, False)
    return mul(row, broadcast_in_dim(dynamic_index_in_dim(keep, me, 0, False),
                                             core.get_aval(row).shape, ()))


def pshuffle(x, axis_name, perm):
    """Member ``i`` gets member ``perm[i]``'s ``x`` (``perm`` a permutation of the axis)."""
    size = axis_size(axis_name)
    if sorted(perm) != list(range(size)):
        raise ValueError(f"pshuffle: perm must be a permutation of range({size}), got "
                         f"{list(perm)}")
    return ppermute(x, axis_name, [(src, dst) for dst, src in enumerate(perm)])


def _pbroadcast_abstract_eval(aval, *, axis_name, source):
    size = named_axes.axis_frame(axis_name).size
    if not 0 <= source < size:
        raise ValueError(f"pbroadcast: source {source} is outside axis {axis_name!r} of size "
                         f"{size}")
    return aval


pbroadcast_p = standard_primitive("pbroadcast", _unbound_impl, _pbroadcast_abstract_eval)


def _pbroadcast_named(size, name, vals, dims, *, axis_name, source):
    (x,), (d,) = vals, dims
    x = _at_front(x, d, size)
    span = _spanning_processes(axis_name, size)
    if span is None:
        return squeeze(_row(x, source), (0,)), not_mapped
    first = span[1] * size
    if first <= source < first + size:
        mine = squeeze(_row(x, source - first), (0,))
    else:
        mine = full_like(squeeze(_row(x, 0), (0,)), 0)
    return process_collectives.process_allreduce(mine, "sum"), not_mapped


def _pbroadcast_transpose(ct, *, axis_name, source):
    total = psum_p.bind(ad.instantiate_zeros(ct), axis_name=axis_name)
    here = eq(axis_index_p.bind(axis_name=axis_name), full((), source, dtypes.int32))
    here = broadcast_in_dim(here, core.get_aval(total).shape, ())
    return [select_n(here, full_like(total, 0), total)]


batching.collective_batchers[pbroadcast_p] = _pbroadcast_named
_elementwise_unrelated(pbroadcast_p)
ad.deflinear(pbroadcast_p, _pbroadcast_transpose)


def pbroadcast(x, axis_name, source):
    """Every member gets member ``source``'s ``x``."""
    names = named_axes.names_tuple(axis_name)
    source = int(source)

    def one(leaf):  # checked here too: the vmapped axis's rule skips abstract eval
        if len(names) > 1:
            size = axis_size(names)
            if not 0 <= source < size:
                raise ValueError(f"pbroadcast: source {source} is outside axes {names} of "
                                 f"size {size}")
            return index_in_dim(all_gather(leaf, names), source, 0, False)
        _pbroadcast_abstract_eval(core.get_aval(leaf), axis_name=names[0], source=source)
        return pbroadcast_p.bind(leaf, axis_name=names[0], source=source)

    return tree_map(one, x)

