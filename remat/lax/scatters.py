"""The scatter primitives (scatter, scatter-add, -sub, -mul, -min, -max): impls, abstract
evals, JVPs, transposes (a scatter-add's is a gather with the same mode) and batching;
``lax.scatter*`` and ``lax.scatter_apply``.

Out-of-bounds update windows are dropped (FILL_OR_DROP, PROMISE_IN_BOUNDS, ONE_HOT) or
clamped into bounds (CLIP); with duplicate indices ``scatter`` keeps the last update in
row-major order, and the combining scatters apply every update (``ufunc.at``)."""

import numpy as np

from remat import core, dtypes
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax import rule_ops
from remat.lax.control_flow.loops import while_loop
from remat.lax.elementwise import (
    add,
    convert_element_type,
    div,
    eq,
    gt,
    lt,
    mul,
    neg,
    select,
    select_n,
)
from remat.lax.gather_scatter_common import (
    GatherScatterMode,
    ScatterDimensionNumbers,
    WindowPlan,
    as_array_operand,
    canonical_dnums,
    check_dims_in_range,
    check_disjoint_dims,
    check_indices_batching_dims,
    check_indices_dtype,
    check_no_duplicate_dims,
    check_sorted,
    gather_dnums_of_scatter,
    place_axes,
    scatter_window_sizes,
    shift_dims,
    window_starts,
    zeros,
)
from remat.lax.gathers import gather_p
from remat.lax.reductions import reduce_max
from remat.lax.shape import broadcast_in_dim, full, full_like, iota, reshape
from remat.lax.standard import copying_impl, standard_primitive
from remat.runtime import registry

__all__ = [
    "scatter",
    "scatter_add",
    "scatter_add_p",
    "scatter_apply",
    "scatter_max",
    "scatter_max_p",
    "scatter_min",
    "scatter_min_p",
    "scatter_mul",
    "scatter_mul_p",
    "scatter_p",
    "scatter_sub",
    "scatter_sub_p",
]


def _updates_batching_dims(indices_batching_dims, update_window_dims, updates_rank):
    scatter_dims = [d for d in range(updates_rank) if d not in update_window_dims]
    return tuple(scatter_dims[i] for i in indices_batching_dims)


def _scatter_abstract_eval_for(name):
    def abstract_eval(operand, indices, updates, *, dimension_numbers, indices_are_sorted,
                      mode, unique_indices):
        check_indices_dtype(indices)
        if operand.dtype != updates.dtype:
            raise TypeError(f"{name} requires arguments to have the same dtypes, got "
                            f"{operand.dtype.name}, {updates.dtype.name}.")
        _scatter_shape_check(operand, indices, updates, dimension_numbers)
        return ShapedArray(operand.shape, operand.dtype, operand.weak_type)

    return abstract_eval


def _scatter_shape_check(operand, indices, updates, dn):
    if indices.ndim < 1:
        raise TypeError(f"Scatter index leaf dimension must be within [0, rank(indices) + 1). "
                        f"rank(indices) is {indices.ndim} and scatter index leaf dimension is "
                        f"-1; indices need a trailing index vector dimension.")
    index_vector_dim = indices.ndim - 1
    expected_rank = indices.ndim - 1 + len(dn.update_window_dims)
    if updates.ndim != expected_rank:
        raise TypeError(f"Updates tensor must be of rank {expected_rank}; got {updates.ndim}.")
    check_sorted(dn.update_window_dims, "scatter", "update_window_dims")
    check_no_duplicate_dims(dn.update_window_dims, "scatter", "update_window_dims")
    check_dims_in_range(dn.update_window_dims, updates.ndim, "scatter", "update_window_dims")
    check_sorted(dn.inserted_window_dims, "scatter", "inserted_window_dims")
    check_no_duplicate_dims(dn.inserted_window_dims, "scatter", "inserted_window_dims")
    check_dims_in_range(dn.inserted_window_dims, operand.ndim, "scatter", "inserted_window_dims")
    check_sorted(dn.operand_batching_dims, "scatter", "operand_batching_dims")
    check_no_duplicate_dims(dn.operand_batching_dims, "scatter", "operand_batching_dims")
    check_dims_in_range(dn.operand_batching_dims, operand.ndim, "scatter", "operand_batching_dims")
    check_disjoint_dims(dn.inserted_window_dims, dn.operand_batching_dims, "scatter",
                   "inserted_window_dims", "operand_batching_dims")
    check_disjoint_dims(dn.scatter_dims_to_operand_dims, dn.operand_batching_dims, "scatter",
                   "scatter_dims_to_operand_dims", "operand_batching_dims")
    operand_batch = check_indices_batching_dims(
        "scatter", operand, indices, dn.operand_batching_dims, dn.scatter_indices_batching_dims,
        "scatter_indices_batching_dims", index_vector_dim)
    updates_batch = tuple(updates.shape[i] for i in _updates_batching_dims(
        dn.scatter_indices_batching_dims, dn.update_window_dims, updates.ndim))
    if operand_batch != updates_batch:
        raise TypeError(f"Scatter op requires operand batching dimensions and updates batching "
                        f"dimensions to have the same shape, got {operand_batch} and "
                        f"{updates_batch}.")
    window_size = len(dn.update_window_dims) + len(dn.inserted_window_dims) + \
        len(dn.operand_batching_dims)
    if operand.ndim != window_size:
        raise TypeError(f"Scatter op has window of size {window_size}; doesn't match operand of "
                        f"rank {operand.ndim}.")
    if len(dn.scatter_dims_to_operand_dims) != indices.shape[index_vector_dim]:
        raise TypeError(f"Scatter op has {len(dn.scatter_dims_to_operand_dims)} elements in "
                        f"scatter_dims_to_operand_dims and the bound of dimension "
                        f"index_vector_dim={index_vector_dim} of indices is "
                        f"{indices.shape[index_vector_dim]}. These two numbers must be equal")
    for i, d in enumerate(dn.scatter_dims_to_operand_dims):
        if d < 0 or d >= operand.ndim:
            raise TypeError(f"Invalid scatter_dims_to_operand_dims mapping; domain is "
                            f"[0, {operand.ndim}), got: {i}->{d}.")
    check_no_duplicate_dims(dn.scatter_dims_to_operand_dims, "scatter",
                       "scatter_dims_to_operand_dims")
    max_sizes = [operand.shape[i] for i in range(operand.ndim)
                 if i not in dn.inserted_window_dims and i not in dn.operand_batching_dims]
    for i, d in enumerate(dn.update_window_dims):
        if max_sizes[i] < updates.shape[d]:
            raise TypeError(f"Bounds of the window dimensions of updates must not exceed the "
                            f"bounds of the corresponding dimensions of operand. For dimension "
                            f"{d}, updates bound is {updates.shape[d]}, operand bound is "
                            f"{max_sizes[i]}.")
    scatter_dims = [d for d in range(updates.ndim) if d not in dn.update_window_dims]
    for k, d in enumerate(scatter_dims):
        if updates.shape[d] != indices.shape[k]:
            raise TypeError(f"Bounds of the scatter dimensions of updates must be the same as "
                            f"the bounds of the corresponding dimensions of scatter indices. "
                            f"For scatter dimension {d}, updates bound is {updates.shape[d]}, "
                            f"indices bound is {indices.shape[k]}.")


def _scatter_into_for(combine):
    """The scatter written into its operand ``out`` itself, by ``combine(out, index_tuple,
    values)``: ``ufunc.at`` for the combining scatters, assignment for ``scatter`` (the impl
    runs it on a copy; the executor on the operand, where it dies there)."""

    def into(out, indices, updates, *, dimension_numbers, indices_are_sorted, mode,
             unique_indices):
        dn = dimension_numbers
        if updates.size == 0:
            return
        rank = updates.ndim
        batch_pos = [i for i in range(rank) if i not in dn.update_window_dims]
        window_dims = [d for d in range(out.ndim) if d not in dn.inserted_window_dims
                       and d not in dn.operand_batching_dims]
        window_pos = dict(zip(window_dims, dn.update_window_dims))
        sizes = scatter_window_sizes(out.shape, updates.shape, dn)
        clip = mode is GatherScatterMode.CLIP
        starts, in_bounds = window_starts(
            out.shape, indices, dn.scatter_dims_to_operand_dims, dn.operand_batching_dims,
            dn.scatter_indices_batching_dims, sizes, clamp=clip, check=not clip)
        plan = WindowPlan(out.shape, starts, batch_pos, window_pos, sizes,
                          dn.scatter_dims_to_operand_dims, updates.shape)
        values = np.transpose(updates, plan.order)
        target, lin = plan.flat(out, out.shape)  # views: writes land in ``out``
        if target is not None:
            grid = [np.broadcast_to(lin, plan.kept_shape)]
        else:
            target = np.transpose(out, plan.perm)
            grid = [np.broadcast_to(g, plan.kept_shape) for g in plan.grid]
        if not grid:  # nothing indexed: address a leading axis of length 1
            target = target[np.newaxis]
            grid = [np.zeros(plan.kept_shape, np.intp)]
        if in_bounds is not None:  # drop the windows that do not fit
            keep = np.broadcast_to(plan.reduce(place_axes(in_bounds, batch_pos, rank)),
                                   plan.kept_shape)
            grid = [g[keep] for g in grid]
            values = values[keep]
        combine(target, tuple(grid), values)

    return into


def _assign(out, index, values):
    out[index] = values  # with duplicate indices, the last update in row-major order wins


def _scatter_prim(name, combine):
    into = _scatter_into_for(combine)
    impl = copying_impl(into)
    prim = standard_primitive(name, impl, _scatter_abstract_eval_for(name))
    registry.update_impls[prim] = (impl, into)
    return prim


scatter_p = _scatter_prim("scatter", _assign)
scatter_add_p = _scatter_prim("scatter-add", np.add.at)
scatter_sub_p = _scatter_prim("scatter-sub", np.subtract.at)
scatter_mul_p = _scatter_prim("scatter-mul", np.multiply.at)
scatter_min_p = _scatter_prim("scatter-min", np.minimum.at)
scatter_max_p = _scatter_prim("scatter-max", np.maximum.at)


def _scatter_gather(x, indices, dnums, updates_shape, mode):
    """The gather that reads, for every update element, the operand element it scatters to
    (0 for the windows a FILL_OR_DROP or ONE_HOT scatter drops; a PROMISE_IN_BOUNDS one reads
    the clamped window, as JAX's transposes do)."""
    sizes = scatter_window_sizes(core.get_aval(x).shape, updates_shape, dnums)
    fill_value = 0 if mode is GatherScatterMode.FILL_OR_DROP else None
    return gather_p.bind(x, indices, dimension_numbers=gather_dnums_of_scatter(dnums),
                         fill_value=fill_value, indices_are_sorted=False, mode=mode,
                         slice_sizes=sizes, unique_indices=False)


def _clamping(mode):
    """A gather mode that reads where a scatter of ``mode`` writes (any in-bounds value for
    windows the scatter drops)."""
    return GatherScatterMode.CLIP if mode is GatherScatterMode.CLIP else \
        GatherScatterMode.PROMISE_IN_BOUNDS


def _scatter_addsub_jvp(prim, primals, tangents, **params):
    operand, indices, updates = primals
    out = prim.bind(operand, indices, updates, **params)
    t_op, _, t_up = tangents
    if type(t_op) is ad.Zero and type(t_up) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    return out, prim.bind(ad.instantiate_zeros(t_op), indices, ad.instantiate_zeros(t_up),
                          **params)


def _scatter_addsub_transpose(prim, ct, operand, indices, updates, *, dimension_numbers,
                              indices_are_sorted, mode, unique_indices):
    assert not ad.is_undefined_primal(indices)
    ct_op = ct if ad.is_undefined_primal(operand) else None
    ct_up = None
    if ad.is_undefined_primal(updates):
        ct_up = _scatter_gather(ct, indices, dimension_numbers, updates.aval.shape, mode)
        if prim is scatter_sub_p:
            ct_up = neg(ct_up)
    return [ct_op, None, ct_up]


def _scatter_mul_jvp(primals, tangents, **params):
    x, indices, y = primals
    t_x, _, t_y = tangents
    out = scatter_mul_p.bind(x, indices, y, **params)
    tangent = ad.Zero.from_primal_value(out)
    if type(t_x) is not ad.Zero:
        tangent = scatter_mul_p.bind(t_x, indices, y, **params)
    if type(t_y) is not ad.Zero:
        tangent = ad.add_tangents(tangent, _scatter_mul_updates_tangent(x, indices, y, t_y,
                                                                        **params))
    return out, tangent


def _scatter_mul_updates_tangent(x, indices, y, t_y, *, dimension_numbers, indices_are_sorted,
                                 mode, unique_indices):
    """d out / d y · t_y, where out[p] = x[p] · prod of the updates y_j landing on p.

    With unique indices that is x · scatter_add(t_y). Otherwise each y_j's factor is the
    product of the *other* updates at its position, computed without dividing by zero: the
    product of the nonzero updates and the number of zero updates per position decide it."""
    dn = dimension_numbers
    params = dict(dimension_numbers=dn, indices_are_sorted=indices_are_sorted, mode=mode,
                  unique_indices=unique_indices)
    zeros_x = full_like(x, 0)
    if unique_indices:
        return mul(x, scatter_add_p.bind(zeros_x, indices, t_y, **params))
    y_shape = core.get_aval(y).shape
    is_zero = eq(y, full_like(y, 0))
    ones_y, zeros_y = full_like(y, 1), full_like(y, 0)
    y_nonzero = select(is_zero, ones_y, y)
    prod_nonzero = scatter_mul_p.bind(full_like(x, 1), indices, y_nonzero, **params)
    n_zero = scatter_add_p.bind(zeros_x, indices, select(is_zero, ones_y, zeros_y), **params)
    prod_at = _scatter_gather(prod_nonzero, indices, dn, y_shape, _clamping(mode))
    n_zero_at = _scatter_gather(n_zero, indices, dn, y_shape, _clamping(mode))
    others = select(
        is_zero,
        select(eq(n_zero_at, ones_y), prod_at, zeros_y),
        select(eq(n_zero_at, zeros_y), div(prod_at, y_nonzero), zeros_y))
    return mul(x, scatter_add_p.bind(zeros_x, indices, mul(t_y, others), **params))


def _scatter_mul_transpose(ct, operand, indices, updates, *, dimension_numbers,
                           indices_are_sorted, mode, unique_indices):
    assert not ad.is_undefined_primal(indices)
    params = dict(dimension_numbers=dimension_numbers, indices_are_sorted=indices_are_sorted,
                  mode=mode, unique_indices=unique_indices)
    ct_op = ct_up = None
    if ad.is_undefined_primal(operand):
        if ad.is_undefined_primal(updates):
            raise ValueError("scatter_mul is not linear in operand and updates together")
        ct_op = scatter_mul_p.bind(ct, indices, updates, **params)
    elif ad.is_undefined_primal(updates):
        if not unique_indices:
            raise NotImplementedError(
                "scatter_mul is linear in its updates only with unique_indices=True; "
                "with duplicate indices the updates multiply each other")
        ct_up = _scatter_gather(mul(ct, operand), indices, dimension_numbers,
                                updates.aval.shape, mode)
    return [ct_op, None, ct_up]


def _scatter_extremal_jvp(prim, primals, tangents, **params):
    """scatter-min/max: the tangent of a position comes from the values that won there; ties
    (among updates, and with the operand) share it equally, as in JAX."""
    operand, indices, updates = primals
    t_op, _, t_up = tangents
    out = prim.bind(operand, indices, updates, **params)
    if type(t_op) is ad.Zero and type(t_up) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    t_op, t_up = ad.instantiate_zeros(t_op), ad.instantiate_zeros(t_up)
    dn, mode = params["dimension_numbers"], params["mode"]
    shape = core.get_aval(updates).shape
    read = lambda x: _scatter_gather(x, indices, dn, shape, _clamping(mode))  # noqa: E731
    count = lambda u: scatter_add_p.bind(full_like(operand, 0), indices, u,  # noqa: E731
                                         **params)
    initial, target = read(operand), read(out)
    won = eq(updates, target)
    kept = eq(initial, target)
    ones, zeros = full_like(updates, 1), full_like(updates, 0)
    num_won = read(count(select(won, ones, zeros)))
    num_refs = read(count(ones))
    share_kept = div(1.0, add(num_won, 1.0))
    updates_coef = select(won, select(kept, share_kept, div(1.0, num_won)), zeros)
    operand_coef = div(add(-1.0, select(kept, share_kept, zeros)), num_refs)
    contributions = add(mul(read(t_op), operand_coef), mul(t_up, updates_coef))
    return out, scatter_add_p.bind(t_op, indices, contributions, **params)


def _update_ids(updates_shape, dn):
    """A positive id per update window (the same over a window's elements), to find out
    which update a scatter lets win each position."""
    ids_shape = [1 if d in dn.update_window_dims else n for d, n in enumerate(updates_shape)]
    n = int(np.prod(ids_shape, dtype=np.int64))
    id_dtype = dtypes.int32 if n < np.iinfo(np.int32).max else dtypes.default_int_dtype()
    ids = add(reshape(iota(id_dtype, n), ids_shape),
                  convert_element_type(1, id_dtype))
    return broadcast_in_dim(ids, tuple(updates_shape), tuple(range(len(updates_shape))))


def _winners(ids, indices, operand_shape, dn, params):
    """The ids left in each operand position by scattering ``ids`` (0 where none landed), and
    for each update element whether it won its position."""
    id_dtype = core.get_aval(ids).dtype
    ids_shape = core.get_aval(ids).shape
    scattered = scatter_p.bind(zeros(operand_shape, id_dtype), indices, ids, **params)
    gathered = _scatter_gather(scattered, indices, dn, ids_shape, _clamping(params["mode"]))
    return scattered, eq(ids, gathered)


def _scatter_jvp(primals, tangents, *, dimension_numbers, indices_are_sorted, mode,
                 unique_indices):
    operand, indices, updates = primals
    t_op, _, t_up = tangents
    dn = dimension_numbers
    params = dict(dimension_numbers=dn, indices_are_sorted=indices_are_sorted, mode=mode,
                  unique_indices=unique_indices)
    if type(t_op) is ad.Zero and type(t_up) is ad.Zero:
        out = scatter_p.bind(operand, indices, updates, **params)
        return out, ad.Zero.from_primal_value(out)
    t_op, t_up = ad.instantiate_zeros(t_op), ad.instantiate_zeros(t_up)
    if unique_indices:
        return (scatter_p.bind(operand, indices, updates, **params),
                scatter_p.bind(t_op, indices, t_up, **params))
    # Duplicate indices: which update wins is decided by scattering ids; the primal and the
    # tangent are then scatter-adds of the masked winners into the masked operand.
    ids = _update_ids(core.get_aval(updates).shape, dn)
    scattered, won = _winners(ids, indices, core.get_aval(operand).shape, dn, params)
    untouched = eq(scattered, full_like(scattered, 0))
    mask_op = lambda x: select(untouched, x, full_like(x, 0))  # noqa: E731
    mask_up = lambda x: select(won, x, full_like(x, 0))  # noqa: E731
    out = scatter_add_p.bind(mask_op(operand), indices, mask_up(updates), **params)
    tangent = scatter_add_p.bind(mask_op(t_op), indices, mask_up(t_up), **params)
    return out, tangent


def _scatter_transpose(ct, operand, indices, updates, *, dimension_numbers,
                       indices_are_sorted, mode, unique_indices):
    assert not ad.is_undefined_primal(indices)
    dn = dimension_numbers
    params = dict(dimension_numbers=dn, indices_are_sorted=indices_are_sorted, mode=mode,
                  unique_indices=unique_indices)
    updates_aval = updates.aval if ad.is_undefined_primal(updates) else \
        core.get_aval(updates)
    ct_dtype = core.get_aval(ct).dtype
    ct_op = ct_up = None
    if ad.is_undefined_primal(operand):
        # overwritten positions get no cotangent
        ct_op = scatter_p.bind(ct, indices, zeros(updates_aval.shape, ct_dtype), **params)
    if ad.is_undefined_primal(updates):
        ct_up = _scatter_gather(ct, indices, dn, updates_aval.shape, mode)
        if not unique_indices:  # only the update that won a position gets its cotangent
            ids = _update_ids(updates_aval.shape, dn)
            _, won = _winners(ids, indices, core.get_aval(ct).shape, dn, params)
            ct_up = select(won, ct_up, full_like(ct_up, 0))
    return [ct_op, None, ct_up]


def scatter_batching_rule(prim, vals, dims, *, dimension_numbers, indices_are_sorted, mode,
                          unique_indices):
    operand, indices, updates = vals
    od, idd, ud = dims
    dn = dimension_numbers
    size = batching.axis_size_of(vals, dims)
    operand = batching.bdim_at_front(operand, od, size)
    updates = batching.bdim_at_front(updates, ud, size)
    params = dict(indices_are_sorted=indices_are_sorted, mode=mode,
                  unique_indices=unique_indices)
    if idd is None:
        # the batch dimension is one more window dimension, updated whole
        dnums = ScatterDimensionNumbers(
            update_window_dims=(0,) + shift_dims(dn.update_window_dims),
            inserted_window_dims=shift_dims(dn.inserted_window_dims),
            scatter_dims_to_operand_dims=shift_dims(dn.scatter_dims_to_operand_dims),
            operand_batching_dims=shift_dims(dn.operand_batching_dims),
            scatter_indices_batching_dims=dn.scatter_indices_batching_dims)
        return prim.bind(operand, indices, updates, dimension_numbers=dnums, **params), 0
    indices = batching.moveaxis(indices, idd, 0)
    dnums = ScatterDimensionNumbers(
        update_window_dims=shift_dims(dn.update_window_dims),
        inserted_window_dims=shift_dims(dn.inserted_window_dims),
        scatter_dims_to_operand_dims=shift_dims(dn.scatter_dims_to_operand_dims),
        operand_batching_dims=(0,) + shift_dims(dn.operand_batching_dims),
        scatter_indices_batching_dims=(0,) + shift_dims(dn.scatter_indices_batching_dims))
    return prim.bind(operand, indices, updates, dimension_numbers=dnums, **params), 0


def _identity(prim, dtype):
    """The update that leaves an operand element as it is under ``prim``'s combine."""
    if prim in (scatter_add_p, scatter_sub_p):  # x + -0.0 is x for every x, -0.0 included
        return -0.0 if prim is scatter_add_p and dtypes.kind(dtype) in "fc" else 0
    if prim is scatter_mul_p:
        return 1
    if dtypes.kind(dtype) == "f":
        return np.inf if prim is scatter_min_p else -np.inf
    info = np.iinfo(dtype) if dtypes.kind(dtype) in "iu" else None
    if info is None:
        return None
    return info.max if prim is scatter_min_p else info.min


def _selected_scatter(eqn, kept_dims, update_case):
    """``select_n`` between a scatter's operand and its result, its predicate broadcast along
    the operand's ``kept_dims``, as one scatter: the predicate, carried to each update along
    the batching dimensions and the whole windows, picks the update or what keeps the operand
    element (its value, read by the scatter's gather, or the combine's identity). None unless
    every kept dimension is a batching dimension or a window as long as the operand's (a
    predicate along a scattered dimension or a part window would vary with the index)."""
    operand, indices, updates = (v.aval for v in eqn.invars)
    dn = eqn.params["dimension_numbers"]
    scatter_dims = [d for d in range(updates.ndim) if d not in dn.update_window_dims]
    window_dims = [d for d in range(operand.ndim) if d not in dn.inserted_window_dims
                   and d not in dn.operand_batching_dims]
    if len(scatter_dims) != indices.ndim - 1 or operand.dtype != updates.dtype:
        return None
    update_dims = []
    for d in kept_dims:
        if d in dn.operand_batching_dims:
            index_dim = dn.scatter_indices_batching_dims[dn.operand_batching_dims.index(d)]
            update_dims.append(scatter_dims[index_dim])
        elif d in window_dims and \
                updates.shape[dn.update_window_dims[window_dims.index(d)]] == operand.shape[d]:
            update_dims.append(dn.update_window_dims[window_dims.index(d)])
        else:
            return None
    update_dims = tuple(update_dims)
    if list(update_dims) != sorted(update_dims):
        return None
    prim = eqn.primitive
    identity = None if prim is scatter_p else _identity(prim, updates.dtype)
    if prim is not scatter_p and identity is None:
        return None

    def selected(pred, x, idx, u):
        which = broadcast_in_dim(pred, updates.shape, update_dims)
        kept = _scatter_gather(x, idx, dn, updates.shape, eqn.params["mode"]) \
            if prim is scatter_p else full(updates.shape, identity, updates.dtype)
        cases = (kept, u) if update_case == 1 else (u, kept)
        return prim.bind(x, idx, select_n(which, *cases), **eqn.params)
    return selected


def _register_scatter_rules():
    for prim in (scatter_add_p, scatter_sub_p):
        ad.primitive_jvps[prim] = (lambda p: lambda primals, tangents, **params:
                                   _scatter_addsub_jvp(p, primals, tangents, **params))(prim)
        ad.primitive_transposes[prim] = (lambda p: lambda ct, *args, **params:
                                         _scatter_addsub_transpose(p, ct, *args, **params))(prim)
    for prim in (scatter_min_p, scatter_max_p):
        ad.primitive_jvps[prim] = (lambda p: lambda primals, tangents, **params:
                                   _scatter_extremal_jvp(p, primals, tangents, **params))(prim)
    ad.primitive_jvps[scatter_mul_p] = _scatter_mul_jvp
    ad.primitive_transposes[scatter_mul_p] = _scatter_mul_transpose
    ad.primitive_jvps[scatter_p] = _scatter_jvp
    ad.primitive_transposes[scatter_p] = _scatter_transpose
    for prim in (scatter_p, scatter_add_p, scatter_sub_p, scatter_mul_p, scatter_min_p,
                 scatter_max_p):
        batching.primitive_batchers[prim] = (lambda p: lambda vals, dims, **params:
                                             scatter_batching_rule(p, vals, dims, **params))(prim)
        registry.selected_update_forms[prim] = _selected_scatter


_register_scatter_rules()


def _scatter_fn(prim, doc):
    def fn(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
           unique_indices=False, mode=None):
        dnums = canonical_dnums(ScatterDimensionNumbers, dimension_numbers, prim.name)
        updates = as_array_operand(updates, operand)
        return prim.bind(operand, scatter_indices, updates, dimension_numbers=dnums,
                         indices_are_sorted=bool(indices_are_sorted),
                         mode=GatherScatterMode.from_any(mode),
                         unique_indices=bool(unique_indices))

    fn.__name__ = prim.name.replace("-", "_")
    fn.__qualname__ = fn.__name__
    fn.__doc__ = doc + (" Out-of-bounds update windows are dropped unless ``mode='clip'`` "
                        "clamps them.")
    return fn


scatter = _scatter_fn(scatter_p, "XLA's Scatter: ``operand`` with the ``updates`` windows "
                      "written at the index vectors (last axis of ``scatter_indices``); with "
                      "duplicate indices the last update in row-major order wins.")
scatter_add = _scatter_fn(scatter_add_p, "Scatter combining by addition (duplicates "
                          "accumulate).")
scatter_sub = _scatter_fn(scatter_sub_p, "Scatter combining by subtraction.")
scatter_mul = _scatter_fn(scatter_mul_p, "Scatter combining by multiplication.")
scatter_min = _scatter_fn(scatter_min_p, "Scatter combining by minimum.")
scatter_max = _scatter_fn(scatter_max_p, "Scatter combining by maximum.")


def scatter_apply(operand, scatter_indices, func, dimension_numbers, *, update_shape=(),
                  indices_are_sorted=False, unique_indices=False, mode=None):
    """``operand`` with the unary elementwise ``func`` applied at every index window (the
    updates of a scatter of shape ``update_shape`` say where); a position hit ``k`` times gets
    ``func`` applied ``k`` times, as in JAX. Out-of-bounds windows are dropped unless
    ``mode='clip'`` clamps them.

    How often each position is hit is a scatter-add of ones; ``func`` is then applied to the
    whole operand and kept where hits remain, in a ``while_loop`` over the largest count
    (no loop with ``unique_indices``)."""
    if not callable(func):
        raise TypeError(f"scatter_apply func must be callable, got {func!r}")
    dnums = canonical_dnums(ScatterDimensionNumbers, dimension_numbers, "scatter_apply")
    aval = core.get_aval(operand)
    count_dtype = dtypes.int32
    hits = scatter_add_p.bind(
        zeros(aval.shape, count_dtype), scatter_indices,
        full(tuple(update_shape), 1, count_dtype), dimension_numbers=dnums,
        indices_are_sorted=bool(indices_are_sorted), mode=GatherScatterMode.from_any(mode),
        unique_indices=bool(unique_indices))

    def apply_where_hit(k, x):
        """``func(x)`` where more than ``k`` (a scalar) windows hit, ``x`` elsewhere."""
        y = func(x)
        y_aval = core.get_aval(y)
        if y_aval.shape != aval.shape or y_aval.dtype != aval.dtype:
            raise ValueError(f"scatter_apply func must map each element to one of the same "
                             f"dtype: for an operand {aval.str_short()} it returned "
                             f"{y_aval.str_short()}")
        if y_aval.weak_type != aval.weak_type:
            y = convert_element_type(y, aval.dtype, aval.weak_type)
        return select(gt(hits, broadcast_in_dim(k, aval.shape, ())), y, x)

    start = full((), 0, count_dtype)
    if unique_indices:
        return apply_where_hit(start, operand)
    most = reduce_max(hits, tuple(range(len(aval.shape))))

    def body(carry):
        k, x = carry
        return add(k, full_like(k, 1)), apply_where_hit(k, x)

    _, out = while_loop(lambda carry: lt(carry[0], most), body, (start, operand))
    return out


rule_ops.provide(scatter_add_p=scatter_add_p)


