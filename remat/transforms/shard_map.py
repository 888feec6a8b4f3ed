"""``shard_map``: run a function on each shard of its inputs over a ``Mesh``, each mesh axis
a named axis for collectives.

Each input is split as its ``PartitionSpec`` says (dim ``i`` into one block per member of
the mesh axes ``spec[i]`` names, row-major over a tuple), the body sees one block, and each
output is reassembled as ``out_specs`` says: blocks concatenated along the dims that name mesh
axes. An output whose spec does not name a mesh axis must be replicated over it: as JAX's
``check_vma``, a value that varies over the axis is an error (with ``check_vma=False`` or
``check_rep=False``, member 0's value is returned). The shards run as one batched program,
batched once per mesh axis, outermost first; an output that is the same on every member of an
axis (the result of a ``psum``, a closed-over value) is known to be replicated there.
"""

import functools
import math

from remat import lax
from remat.api_util import check_callable, fun_name
from remat.core import get_aval
from remat.interpreters import batching
from remat.sharding import Mesh, PartitionSpec, get_mesh
from remat.tree_util import tree_broadcast, tree_flatten, tree_structure, tree_unflatten

__all__ = ["shard_map"]


def _is_spec(x):
    return x is None or isinstance(x, PartitionSpec)


def _dim_axes(spec, rank, mesh, what):
    """Per dim of a rank-``rank`` value, the mesh axes ``spec`` splits it over."""
    spec = PartitionSpec() if spec is None else spec
    if len(spec) > rank:
        raise ValueError(f"shard_map {what}: its spec {spec} has {len(spec)} entries but the "
                         f"value has rank {rank}")
    dims = []
    for entry in tuple(spec) + (None,) * (rank - len(spec)):
        axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        for a in axes:
            if a not in mesh.shape:
                raise ValueError(f"shard_map {what}: spec {spec} names the axis {a!r}, which "
                                 f"is not in the mesh's axes {tuple(mesh.axis_names)}")
        dims.append(axes)
    used = [a for axes in dims for a in axes]
    if len(set(used)) != len(used):
        raise ValueError(f"shard_map {what}: spec {spec} names a mesh axis more than once")
    return dims


def _split_input(x, dims, mesh, what):
    """``x`` with each named mesh axis's members as a leading dim (in mesh order); returns
    the value and which mesh axes it is mapped over."""
    shape = get_aval(x).shape
    new_shape, positions = [], {}
    for n, axes in zip(shape, dims):
        parts = math.prod(mesh.shape[a] for a in axes)
        if n % parts:
            raise ValueError(f"shard_map {what}: dim {len(new_shape) - len(positions)} of "
                             f"size {n} is not divisible by the {parts} members of mesh axes "
                             f"{axes} ({', '.join(f'{a}={mesh.shape[a]}' for a in axes)})")
        for a in axes:
            positions[a] = len(new_shape)
            new_shape.append(mesh.shape[a])
        new_shape.append(n // parts)
    x = lax.reshape(x, tuple(new_shape))
    mapped = [a for a in mesh.axis_names if a in positions]
    order = [positions[a] for a in mapped]
    rest = [i for i in range(len(new_shape)) if i not in order]
    return lax.transpose(x, tuple(order + rest)), set(mapped)


def _join_output(y, dims, mesh, what):
    """The body's output ``y`` (one leading dim per mesh axis, in mesh order) reassembled."""
    names = list(mesh.axis_names)
    k = len(names)
    named = {a for axes in dims for a in axes}
    block = get_aval(y).shape[k:]
    if len(dims) != len(block):
        raise ValueError(f"shard_map {what}: out spec has {len(dims)} dims for an output of "
                         f"rank {len(block)}")
    # members of axes the spec does not name: the output is the same on each; keep one
    for i in reversed(range(k)):
        if names[i] not in named:
            y = lax.index_in_dim(y, 0, axis=i, keepdims=False)
    kept = [a for a in names if a in named]
    order, out_shape = [], []
    for d, axes in enumerate(dims):
        order += [kept.index(a) for a in axes] + [len(kept) + d]
        out_shape.append(block[d] * math.prod(mesh.shape[a] for a in axes))
    return lax.reshape(lax.transpose(y, tuple(order)), tuple(out_shape))


def shard_map(f=None, /, mesh=None, in_specs=None, out_specs=None, *, check_rep=True,
              check_vma=True, auto=frozenset(), axis_names=frozenset()):
    """``f`` run per shard over ``mesh``: inputs split by ``in_specs``, outputs assembled by
    ``out_specs`` (pytree prefixes of the arguments and results); the mesh axes are named
    axes inside ``f``."""
    if f is None:
        return functools.partial(shard_map, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                 check_rep=check_rep, check_vma=check_vma, auto=auto,
                                 axis_names=axis_names)
    check_callable(f)
    if out_specs is None:
        raise TypeError("shard_map requires out_specs")
    if auto:
        raise ValueError(f"shard_map: auto axes {set(auto)} are not supported: remat's mesh "
                         f"axes are all manual inside shard_map")

    @functools.wraps(f)
    def mapped(*args):
        the_mesh = mesh if mesh is not None else get_mesh()
        if not isinstance(the_mesh, Mesh):
            raise ValueError("shard_map needs a mesh: pass mesh= or call it under "
                             "`with jax.set_mesh(mesh)`")
        if axis_names and set(axis_names) != set(the_mesh.axis_names):
            raise ValueError(f"shard_map: axis_names {set(axis_names)} leave mesh axes "
                             f"{set(the_mesh.axis_names) - set(axis_names)} automatic, which "
                             f"remat does not support: its mesh axes are all manual inside "
                             f"shard_map")
        specs = in_specs if in_specs is not None else (PartitionSpec(),) * len(args)
        if isinstance(specs, PartitionSpec) and len(args) == 1:
            specs = (specs,)
        try:
            flat_specs = tree_flatten(tree_broadcast(tuple(specs) if isinstance(specs, list)
                                                     else specs, args, is_leaf=_is_spec),
                                      is_leaf=_is_spec)[0]
        except (ValueError, TypeError) as e:
            raise ValueError(f"shard_map in_specs must be a tree prefix of the arguments; got "
                             f"in_specs {specs!r} for arguments of structure "
                             f"{tree_structure(args)}") from e
        leaves, in_tree = tree_flatten(args)
        split, mapped_axes = [], []
        for i, (x, spec) in enumerate(zip(leaves, flat_specs)):
            what = f"argument {i} (in_specs {spec})"
            dims = _dim_axes(spec, get_aval(x).ndim, the_mesh, what)
            x, axes = _split_input(x, dims, the_mesh, what)
            split.append(x)
            mapped_axes.append(axes)
        names = list(the_mesh.axis_names)
        info = {}

        def level(i, *vals):
            """The body batched over mesh axes ``names[i:]``; the outputs varying over an
            axis get its members as a leading dim (mesh order), replicated ones do not."""
            if i == len(names):
                flat_outs, info["tree"] = tree_flatten(f(*tree_unflatten(in_tree, list(vals))))
                info["varying"] = [set() for _ in flat_outs]
                return flat_outs
            name = names[i]
            outs, out_dims = batching.batch_flat(
                lambda *xs: level(i + 1, *xs), the_mesh.shape[name], list(vals),
                [0 if name in axes else None for axes in mapped_axes], axis_name=name)
            result = []
            for varying, o, d in zip(info["varying"], outs, out_dims):
                if d is not None:
                    o = batching.moveaxis(o, d, 0)
                    varying.add(name)
                result.append(o)
            return result

        outs = level(0, *split)
        out_tree = info["tree"]
        try:
            flat_out_specs = tree_flatten(
                tree_broadcast(out_specs, tree_unflatten(out_tree, outs), is_leaf=_is_spec),
                is_leaf=_is_spec)[0]
        except (ValueError, TypeError) as e:
            raise ValueError(f"shard_map out_specs must be a tree prefix of the results; got "
                             f"out_specs {out_specs!r} for results of structure "
                             f"{out_tree}") from e
        results = []
        for i, (y, spec, varying) in enumerate(zip(outs, flat_out_specs, info["varying"])):
            what = f"output {i} (out_specs {spec})"
            rank = get_aval(y).ndim - len(varying)
            dims = _dim_axes(spec, rank, the_mesh, what)
            named = {a for axes in dims for a in axes}
            if check_rep and check_vma and varying - named:
                raise ValueError(
                    f"shard_map applied to the function {fun_name(f)!r} was given out_specs "
                    f"which require replication which can't be statically inferred given the "
                    f"mesh: {what} does not name mesh axis "
                    f"{sorted(varying - named)[0]!r}, so it must be replicated over it, but "
                    f"its value varies over it. Name the axis in out_specs, reduce over it "
                    f"(psum, all_gather ...), or pass check_vma=False")
            for k, name in enumerate(names):  # one leading dim per mesh axis
                if name not in varying:
                    y = batching.bdim_at_front(y, None, the_mesh.shape[name])
                    y = batching.moveaxis(y, 0, k)
            results.append(_join_output(y, dims, the_mesh, what))
        return tree_unflatten(out_tree, results)

    mapped.__name__ = f"shard_map({fun_name(f)})"
    return mapped
