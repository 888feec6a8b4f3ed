"""``associative_scan``: the parallel prefix scan (Blelloch, 1990) of an associative function
over pytrees of arrays, written with strided slices, pads and concatenations only, so it
traces, jits, vmaps and differentiates like any lax code."""

from remat import core, dtypes
from remat.lax.elementwise import add, bitwise_or
from remat.lax.shape import concatenate, full, pad, rev
from remat.lax.slicing import slice_in_dim
from remat.tree_util import tree_flatten, tree_unflatten

__all__ = ["associative_scan"]


def _interleave(a, b, axis):
    """``a[0], b[0], a[1], b[1], ...`` along ``axis``; ``a`` has as many entries as ``b`` or
    one more (each is zero-interleaved by a pad, and the two are added)."""
    n_a = core.get_aval(a).shape[axis]
    n_b = core.get_aval(b).shape[axis]
    ndim = core.get_aval(a).ndim
    dtype = core.get_aval(a).dtype
    zero = full((), False if dtypes.kind(dtype) == "b" else 0, dtype)
    a_config = [(0, 0, 0)] * ndim
    b_config = [(0, 0, 0)] * ndim
    a_config[axis] = (0, 1 if n_a == n_b else 0, 1)
    b_config[axis] = (1, 0 if n_a == n_b else 1, 1)
    combine = bitwise_or if dtypes.kind(dtype) == "b" else add
    return combine(pad(a, zero, a_config), pad(b, zero, b_config))


def associative_scan(fn, elems, reverse=False, axis=0):
    """Inclusive prefix combination of ``elems`` (a pytree of arrays of equal length along
    ``axis``) with an associative ``fn(earlier, later)`` that maps two such pytrees (slices of
    ``elems``) to one; from the end with ``reverse``."""
    if not callable(fn):
        raise TypeError("lax.associative_scan: fn argument should be callable.")
    elems_flat, tree = tree_flatten(elems)
    if not elems_flat:
        return elems
    if reverse:
        elems_flat = [rev(e, (_axis(e, axis),)) for e in elems_flat]
    axis = _axis(elems_flat[0], axis)
    num_elems = core.get_aval(elems_flat[0]).shape[axis]
    if any(core.get_aval(e).ndim <= axis or core.get_aval(e).shape[axis] != num_elems
           for e in elems_flat[1:]):
        raise ValueError(f"Array inputs to associative_scan must have the same first "
                         f"dimension. (saw: {[core.get_aval(e).shape for e in elems_flat]})")

    def combine(a_flat, b_flat):
        c = fn(tree_unflatten(tree, a_flat), tree_unflatten(tree, b_flat))
        c_flat, c_tree = tree_flatten(c)
        if c_tree != tree:
            raise TypeError(f"associative_scan fn must return a pytree of the structure of "
                            f"elems {tree}, got {c_tree}")
        return c_flat

    def scan(elems):
        n = core.get_aval(elems[0]).shape[axis]
        if n < 2:
            return elems
        # combine adjacent pairs, scan the half-length sequence, then fill in the evens
        reduced = combine([slice_in_dim(e, 0, n - 1, stride=2, axis=axis) for e in elems],
                          [slice_in_dim(e, 1, n, stride=2, axis=axis) for e in elems])
        odd = scan(reduced)
        if n % 2 == 0:
            m = core.get_aval(odd[0]).shape[axis]
            even = combine([slice_in_dim(e, 0, m - 1, axis=axis) for e in odd],
                           [slice_in_dim(e, 2, n, stride=2, axis=axis) for e in elems])
        else:
            even = combine(odd, [slice_in_dim(e, 2, n, stride=2, axis=axis)
                                 for e in elems])
        even = [concatenate([slice_in_dim(e, 0, 1, axis=axis), r], axis)
                for e, r in zip(elems, even)]
        return [_interleave(e, o, axis) for e, o in zip(even, odd)]

    scans = scan(elems_flat)
    if reverse:
        scans = [rev(s, (axis,)) for s in scans]
    return tree_unflatten(tree, scans)


def _axis(x, axis):
    ndim = core.get_aval(x).ndim
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return axis % ndim
