"""Ragged contractions: ``ragged_dot`` and ``ragged_dot_general`` (grouped matmuls, as in
mixture-of-experts layers), written as JAX's reference implementation: the ragged operand is
expanded to one dense masked copy per group and contracted with ``dot_general``, so every
transformation rule is the dot's and the masks'.

Modes, by the kind of the lhs ragged dimension (``g`` groups; ``group_sizes`` is ``[g]`` or
``[prefix..., g]``): non-contracting ``[b,m,k] x [g,b,k,n] -> [b,m,n]`` (rows of group i use
``rhs[i]``), contracting ``[b,m,k] x [b,k,n] -> [g,b,m,n]`` (one partial product per group of
the contraction), and batch ``[b,m,k] x [b,k,n] -> [b,m,n]`` (a plain batched dot).
"""

import dataclasses

from remat import core, dtypes
from remat.lax.dot import dot_general
from remat.lax.elementwise import bitwise_and, le, lt, select, sub
from remat.lax.reductions import cumsum
from remat.lax.shape import broadcast, broadcast_in_dim, broadcasted_iota, full_like, transpose

__all__ = ["RaggedDotDimensionNumbers", "ragged_dot", "ragged_dot_general"]


@dataclasses.dataclass(frozen=True)
class RaggedDotDimensionNumbers:
    """A ragged dot's ``dot_dimension_numbers`` (``((lhs_contracting, rhs_contracting),
    (lhs_batch, rhs_batch))``), its one lhs ragged dimension and its rhs group dimensions."""

    dot_dimension_numbers: tuple
    lhs_ragged_dimensions: tuple
    rhs_group_dimensions: tuple

    def __init__(self, dot_dimension_numbers, lhs_ragged_dimensions, rhs_group_dimensions):
        object.__setattr__(self, "dot_dimension_numbers",
                           tuple(tuple(map(tuple, t)) for t in dot_dimension_numbers))
        object.__setattr__(self, "lhs_ragged_dimensions", tuple(lhs_ragged_dimensions))
        object.__setattr__(self, "rhs_group_dimensions", tuple(rhs_group_dimensions))


_BASIC = RaggedDotDimensionNumbers((([1], [1]), ([], [])), [0], [0])


def _remaining(n, *used):
    taken = {d for group in used for d in group}
    return [d for d in range(n) if d not in taken]


def _mode(lhs_ndim, dnums):
    if len(dnums.lhs_ragged_dimensions) != 1:
        raise TypeError("ragged_dot_general expects exactly one lhs ragged dimension.")
    ragged = dnums.lhs_ragged_dimensions[0]
    if not 0 <= ragged < lhs_ndim:
        raise TypeError(f"ragged_dot_general requires lhs ragged dimension numbers to be "
                        f"nonnegative and less than the number of axes of the lhs value, got "
                        f"{ragged} for lhs of rank {lhs_ndim}.")
    (contract, _), (batch, _) = dnums.dot_dimension_numbers
    if ragged in batch:
        return "batch", ragged
    if ragged in contract:
        return "contracting", ragged
    return "noncontracting", ragged


def _prefix_dims(mode, ndim, ragged, batch, contract):
    """The operand dims that ``group_sizes``' leading dims correspond to."""
    batch, contract = list(batch), list(contract)
    if mode == "noncontracting":
        free = _remaining(ndim, contract, batch)
        return batch + free[:free.index(ragged)]
    if mode == "contracting":
        return batch + contract[:contract.index(ragged)]
    return batch[:batch.index(ragged)]


def _expand(x, dim, group_sizes, axes):
    """``x`` as ``[g] + x.shape``: copy ``i`` keeps the entries of group ``i`` along ``dim``
    (zeros elsewhere); ``group_sizes`` is ``[x.shape[a] for a in axes] + [g]``."""
    shape = core.get_aval(x).shape
    gs_shape = core.get_aval(group_sizes).shape
    out_shape = (gs_shape[-1],) + shape
    ends = cumsum(group_sizes, axis=len(gs_shape) - 1)
    starts = sub(ends, group_sizes)
    # group_sizes' dims go to (a + 1 for a in axes) and 0, in increasing order
    targets = [a + 1 for a in axes] + [0]
    order = sorted(range(len(targets)), key=targets.__getitem__)
    ends = broadcast_in_dim(transpose(ends, order), out_shape, sorted(targets))
    starts = broadcast_in_dim(transpose(starts, order), out_shape, sorted(targets))
    iota = broadcasted_iota(core.get_aval(group_sizes).dtype, out_shape, dim + 1)
    mask = bitwise_and(le(starts, iota), lt(iota, ends))
    wide = broadcast_in_dim(x, out_shape, tuple(range(1, len(out_shape))))
    return select(mask, wide, full_like(wide, 0))


def ragged_dot_general(lhs, rhs, group_sizes, ragged_dot_dimension_numbers, precision=None,
                       preferred_element_type=None, group_offset=None, out_sharding=None):
    """A ``dot_general`` whose lhs ragged dimension is split into groups of
    ``group_sizes`` (see the module docstring for the three modes)."""
    if group_offset is not None:
        raise NotImplementedError("Unimplemented group_offset support.")
    dnums = ragged_dot_dimension_numbers
    lhs_shape, rhs_shape = core.get_aval(lhs).shape, core.get_aval(rhs).shape
    gs_aval = core.get_aval(group_sizes)
    if dtypes.kind(gs_aval.dtype) not in "iu":
        raise TypeError(f"ragged_dot_general requires that group_sizes.dtype is subtype of "
                        f"np.integer, but got {gs_aval.dtype}.")
    if not gs_aval.shape:
        raise TypeError("expected rank of group_sizes to be >=1.")
    mode, ragged = _mode(len(lhs_shape), dnums)
    (l_contract, r_contract), (l_batch, r_batch) = dnums.dot_dimension_numbers
    l_contract, r_contract = list(l_contract), list(r_contract)
    l_batch, r_batch = list(l_batch), list(r_batch)
    prefix = _prefix_dims(mode, len(lhs_shape), ragged, l_batch, l_contract)
    expected = tuple(lhs_shape[i] for i in prefix) + (gs_aval.shape[-1],)
    if len(gs_aval.shape) != 1 and gs_aval.shape != expected:
        raise TypeError(f"expected group_sizes to have shape {expected}, got "
                        f"{gs_aval.shape}.")
    num_groups = gs_aval.shape[-1]
    group_dims = list(dnums.rhs_group_dimensions)
    if mode == "noncontracting":
        if len(group_dims) != 1:
            raise TypeError("ragged_dot_general requires exactly one rhs group dimension "
                            "when lhs ragged dimension is noncontracting.")
        if not 0 <= group_dims[0] < len(rhs_shape):
            raise TypeError(f"ragged_dot_general requires rhs group dimension numbers to be "
                            f"nonnegative and less than the number of axes of the rhs value, "
                            f"got {group_dims[0]} for rhs of rank {len(rhs_shape)}.")
        if group_dims[0] in r_batch or group_dims[0] in r_contract:
            raise TypeError("ragged_dot_general requires rhs group dimension numbers to be "
                            "distinct from contracting and batch dimensions.")
        if rhs_shape[group_dims[0]] != num_groups:
            raise TypeError(f"expected rhs group dimension size to be {num_groups}, got "
                            f"{rhs_shape[group_dims[0]]}.")
    elif group_dims:
        raise TypeError("ragged_dot_general requires zero group dimensions in the rhs when "
                        "lhs ragged dimension is contracting or batch.")
    if len(gs_aval.shape) == 1:
        group_sizes = broadcast(group_sizes, tuple(lhs_shape[i] for i in prefix))
    dot = lambda a, b, dn: dot_general(a, b, dn, precision=precision,  # noqa: E731
                                           preferred_element_type=preferred_element_type)
    up = lambda dims: [d + 1 for d in dims]  # noqa: E731
    if mode == "noncontracting":
        return dot(_expand(lhs, ragged, group_sizes, prefix), rhs,
                   ((up(l_contract) + [0], r_contract + group_dims), (up(l_batch), r_batch)))
    if mode == "contracting":
        rhs_ragged = r_contract[l_contract.index(ragged)]
        r_prefix = _prefix_dims(mode, len(rhs_shape), rhs_ragged, r_batch, r_contract)
        return dot(_expand(lhs, ragged, group_sizes, prefix),
                   _expand(rhs, rhs_ragged, group_sizes, r_prefix),
                   ((up(l_contract), up(r_contract)), ([0] + up(l_batch), [0] + up(r_batch))))
    return dot(lhs, rhs, dnums.dot_dimension_numbers)


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None, out_sharding=None):
    """``lhs`` (m, k) times ``rhs`` (g, k, n): the rows of group ``i`` (consecutive, of
    ``group_sizes[i]`` rows) use ``rhs[i]``; rows past the groups give zeros."""
    return ragged_dot_general(lhs, rhs, group_sizes, _BASIC, precision=precision,
                              preferred_element_type=preferred_element_type,
                              group_offset=group_offset, out_sharding=out_sharding)

