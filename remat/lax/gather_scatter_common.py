"""What gather and scatter share: the out-of-bounds modes, the dimension numbers and their
checks, and the NumPy addressing of index windows that both impls use.

Gather and scatter follow XLA's semantics as JAX exposes them (the index vector is always the
last dimension of the indices). Their NumPy impls build one broadcast index grid per operand
dimension (``WindowPlan``) and apply it with a single advanced-indexing operation (or
``ufunc.at``), so no Python loop runs over the indices.
"""

import enum
from typing import NamedTuple

import numpy as np

from remat import core, dtypes
from remat.lax import shape as lax_shape
from remat.lax.elementwise import convert_element_type

__all__ = ["GatherDimensionNumbers", "GatherScatterMode", "ScatterDimensionNumbers"]

# --- dimension numbers and modes -------------------------------------------------------------


class GatherDimensionNumbers(NamedTuple):
    """How the dimensions of a gather's operand, start indices and output correspond (XLA's
    GatherDimensionNumbers; the index vector is the last dimension of the indices)."""

    offset_dims: tuple
    collapsed_slice_dims: tuple
    start_index_map: tuple
    operand_batching_dims: tuple = ()
    start_indices_batching_dims: tuple = ()


class ScatterDimensionNumbers(NamedTuple):
    """How the dimensions of a scatter's operand, indices and updates correspond (XLA's
    ScatterDimensionNumbers; the index vector is the last dimension of the indices)."""

    update_window_dims: tuple
    inserted_window_dims: tuple
    scatter_dims_to_operand_dims: tuple
    operand_batching_dims: tuple = ()
    scatter_indices_batching_dims: tuple = ()


class GatherScatterMode(enum.Enum):
    """What out-of-bounds indices do.

    CLIP: indices are clamped so that the whole window is in bounds.
    FILL_OR_DROP: a gathered window with any part out of bounds is filled with
      ``fill_value``; a scattered window with any part out of bounds is dropped.
    PROMISE_IN_BOUNDS: the caller promises in-bounds indices; out of bounds, gathers clamp
      and scatters drop (as XLA does), and gradients are not meaningful.
    ONE_HOT: indexing as a one-hot contraction would compute it (JAX's
      ``take_along_axis(mode='one_hot')``): an out-of-bounds gathered window reads zeros, an
      out-of-bounds scattered window is dropped.
    """

    CLIP = enum.auto()
    FILL_OR_DROP = enum.auto()
    PROMISE_IN_BOUNDS = enum.auto()
    ONE_HOT = enum.auto()

    @staticmethod
    def from_any(s):
        """The mode named by ``s``: a ``GatherScatterMode``, 'clip', 'fill' or 'drop' (also
        ``None``), 'promise_in_bounds' or 'one_hot'."""
        if isinstance(s, GatherScatterMode):
            return s
        if s == "clip":
            return GatherScatterMode.CLIP
        if s is None or s == "fill" or s == "drop":
            return GatherScatterMode.FILL_OR_DROP
        if s == "promise_in_bounds":
            return GatherScatterMode.PROMISE_IN_BOUNDS
        if s == "one_hot":
            return GatherScatterMode.ONE_HOT
        raise ValueError(f'Unknown gather mode "{s}"')


def reads_zero_out_of_bounds(mode):
    """Whether a gather of ``mode`` masks its out-of-bounds windows (with ``fill_value``, or
    zeros for ONE_HOT) rather than clamping them."""
    return mode is GatherScatterMode.FILL_OR_DROP or mode is GatherScatterMode.ONE_HOT


def shift_dims(dims, k=1):
    return tuple(d + k for d in dims)


def zeros(shape, dtype):
    return lax_shape.full(shape, 0, dtype)


def as_array_operand(x, dtype_of):
    """Python scalars take the dtype of ``dtype_of`` (weakly typed), as in lax."""
    if dtypes.is_python_scalar(x):
        aval = core.get_aval(dtype_of)
        return convert_element_type(x, aval.dtype, weak_type=True)
    return x


def canonical_dnums(cls, dnums, name):
    """Dimension numbers as ``cls`` with tuples of Python ints (hashable params)."""
    if isinstance(dnums, dict):
        dnums = cls(**dnums)
    elif not isinstance(dnums, cls):
        if not isinstance(dnums, (tuple, list)) or not 3 <= len(dnums) <= 5:
            raise TypeError(f"{name} dimension_numbers must be a {cls.__name__}, got {dnums!r}")
        dnums = cls(*dnums)
    try:
        return cls(*(tuple(int(d) for d in field) for field in dnums))
    except TypeError:
        raise TypeError(f"{name} dimension_numbers must hold sequences of integers, got "
                        f"{dnums!r}") from None


def gather_dnums_of_scatter(dnums):
    return GatherDimensionNumbers(
        offset_dims=dnums.update_window_dims,
        collapsed_slice_dims=dnums.inserted_window_dims,
        start_index_map=dnums.scatter_dims_to_operand_dims,
        operand_batching_dims=dnums.operand_batching_dims,
        start_indices_batching_dims=dnums.scatter_indices_batching_dims)


def scatter_dnums_of_gather(dnums):
    return ScatterDimensionNumbers(
        update_window_dims=dnums.offset_dims,
        inserted_window_dims=dnums.collapsed_slice_dims,
        scatter_dims_to_operand_dims=dnums.start_index_map,
        operand_batching_dims=dnums.operand_batching_dims,
        scatter_indices_batching_dims=dnums.start_indices_batching_dims)


def scatter_window_sizes(operand_shape, updates_shape, dnums):
    """The window size in every operand dimension: 1 for inserted and batching dimensions,
    the matching updates dimension otherwise (the slice sizes of the inverse gather)."""
    sizes, pos = [], 0
    for i in range(len(operand_shape)):
        if i in dnums.inserted_window_dims or i in dnums.operand_batching_dims:
            sizes.append(1)
        else:
            sizes.append(updates_shape[dnums.update_window_dims[pos]])
            pos += 1
    return tuple(sizes)


def default_fill_value(dtype):
    if dtypes.is_inexact(dtype):
        return float("nan")
    if dtypes.kind(dtype) == "i":
        return int(dtypes.iinfo(dtype).min)
    if dtypes.kind(dtype) == "u":
        return int(dtypes.iinfo(dtype).max)
    if dtype == dtypes.bool_:
        return True
    raise ValueError(f"Unsupported dtype for gather fill_value {dtype}")


# --- shared checks ---------------------------------------------------------------------------


def check_sorted(dims, op, name):
    if list(dims) != sorted(dims):
        raise TypeError(f"{name} in {op} op must be sorted; got {dims}")


def check_dims_in_range(dims, rank, op, name):
    for d in dims:
        if d < 0 or d >= rank:
            raise TypeError(f"Invalid {name} set in {op} op; valid range is [0, {rank}); "
                            f"got: {d}.")


def check_no_duplicate_dims(dims, op, name):
    if len(set(dims)) != len(dims):
        raise TypeError(f"{name} in {op} op must not repeat; got: {dims}.")


def check_indices_batching_dims(op, operand, indices, operand_batching_dims,
                                 indices_batching_dims, indices_name, index_vector_dim):
    """The batching dims of the indices (shared by gather and scatter): distinct, in range,
    not the index vector dim, paired one to one with the operand's and of the same sizes.
    Returns the batch shape."""
    Op = op.capitalize()
    check_no_duplicate_dims(indices_batching_dims, op, indices_name)
    check_dims_in_range(indices_batching_dims, indices.ndim, op, indices_name)
    if index_vector_dim in indices_batching_dims:
        raise TypeError(f"{Op} op cannot have the index vector dimension as a batching "
                        f"dimension; got {indices_batching_dims}.")
    if len(operand_batching_dims) != len(indices_batching_dims):
        raise TypeError(f"{Op} op requires equal numbers of operand_batching_dims and "
                        f"{indices_name}, got {operand_batching_dims} and "
                        f"{indices_batching_dims}.")
    operand_batch = tuple(operand.shape[i] for i in operand_batching_dims)
    indices_batch = tuple(indices.shape[i] for i in indices_batching_dims)
    if operand_batch != indices_batch:
        raise TypeError(f"{Op} op requires operand batching dimensions and indices batching "
                        f"dimensions to have the same shape, got {operand_batch} and "
                        f"{indices_batch}.")
    return operand_batch


def check_disjoint_dims(dims1, dims2, op, name1, name2):
    if not set(dims1).isdisjoint(dims2):
        raise TypeError(f"{name1} and {name2} in {op} op must be disjoint; got: {dims1} and "
                        f"{dims2}.")


def check_indices_dtype(indices):
    if not dtypes.is_integer(indices.dtype):
        raise ValueError(f"indices must have an integer type, got {indices.dtype.name}")


# --- NumPy addressing of windows ------------------------------------------------------------


def place_axes(a, positions, rank):
    """Reshape ``a`` (one axis per entry of ``positions``) to rank ``rank`` with its axes at
    ``positions`` and size 1 elsewhere, so it broadcasts against a grid of that rank."""
    shape = [1] * rank
    for p, n in zip(positions, a.shape):
        shape[p] = n
    return a.reshape(shape)


class WindowPlan:
    """How a gather or scatter addresses the operand: one broadcastable index array per
    *indexed* operand dimension; the *full* window dimensions (whole extent, never indexed)
    are left to basic slicing, so that e.g. ``x[idx]`` copies contiguous rows.

    ``perm`` puts the indexed operand dimensions first; indexing ``transpose(operand, perm)``
    with ``grid`` gives an array of shape ``kept_shape + full sizes``, whose axes are the
    output (or updates) axes ``order``."""

    def __init__(self, operand_shape, starts, batch_pos, window_pos, sizes, start_dims,
                 out_shape):
        rank = len(out_shape)
        full = sorted(d for d in window_pos
                      if d not in start_dims and sizes[d] == operand_shape[d])
        self.full_pos = [window_pos[d] for d in full]
        kept_pos = [p for p in range(rank) if p not in self.full_pos]
        indexed = [d for d in range(len(operand_shape)) if d not in full]
        self.perm = indexed + full
        self.kept_shape = tuple(out_shape[p] for p in kept_pos)
        self.order = kept_pos + self.full_pos
        self.grid = []
        for d in indexed:
            g = place_axes(starts[d], batch_pos, rank) if d in starts else np.zeros((), np.intp)
            if d in window_pos:
                g = g + place_axes(np.arange(sizes[d]), (window_pos[d],), rank)
            self.grid.append(self.reduce(g) if g.ndim else g)
        # with the indexed dimensions leading in a C-contiguous operand, one linear index
        # into the flattened leading dimensions addresses the same elements faster
        self.linear = len(indexed) > 1 and self.perm[:len(indexed)] == list(range(len(indexed)))

    def flat(self, x, shape):
        """``x`` (the operand, C-contiguous) with its indexed dims flattened, and the linear
        index into them (None when the operand is not laid out for it)."""
        n = len(self.grid)
        if not self.linear or not x.flags.c_contiguous:
            return None, None
        lin = self.grid[0]
        for g, size in zip(self.grid[1:], shape[1:n]):
            lin = lin * size + g
        return x.reshape((-1,) + tuple(shape[n:])), lin

    def reduce(self, a):
        """Drop the full window axes (of size 1 in ``a``)."""
        return np.squeeze(a, axis=tuple(self.full_pos)) if self.full_pos else a


def window_starts(operand_shape, indices, start_index_map, operand_batching_dims,
                  indices_batching_dims, window_sizes, clamp, check):
    """Per batch element, the start of its window in the operand: a dict from operand
    dimension to an array of the batch shape (dimensions absent start at 0); and, if
    ``check``, a mask of the batch elements whose window lies in bounds (None when all do)."""
    batch_shape = indices.shape[:-1]
    starts = {}
    in_bounds = None
    if start_index_map:
        idx = indices if indices.dtype == np.intp else indices.astype(np.intp)
        upper = np.array([operand_shape[d] - window_sizes[d] for d in start_index_map],
                         np.intp)
        clipped = np.clip(idx, 0, upper) if clamp or check else idx
        if check:
            ok = clipped == idx
            if not ok.all():
                in_bounds = ok.all(axis=-1)
        idx = clipped if clamp else idx
        for k, d in enumerate(start_index_map):
            starts[d] = idx[..., k]
    for od, idim in zip(operand_batching_dims, indices_batching_dims):
        starts[od] = np.broadcast_to(
            place_axes(np.arange(batch_shape[idim]), (idim,), len(batch_shape)), batch_shape)
    return starts, in_bounds

