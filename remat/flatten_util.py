"""``remat.flatten_util.ravel_pytree``: a pytree of arrays as one flat vector, and the
function that puts a vector of that length back into the pytree's shape (JAX's
``jax.flatten_util``).  Optimizers and solvers that work on vectors use it."""

import numpy as np

from remat import dtypes, lax
from remat.numpy import asarray
from remat.tree_util import tree_flatten, tree_unflatten

__all__ = ["ravel_pytree"]


class _Unravel:
    """Puts a flat vector back into a pytree; equal (and hashing equal) for equal pytree
    layouts, so that passing it to ``jit`` as a static argument does not retrace."""

    __slots__ = ("treedef", "sizes", "shapes", "from_dtypes", "to_dtype")

    def __init__(self, treedef, sizes, shapes, from_dtypes, to_dtype):
        self.treedef, self.sizes, self.shapes = treedef, sizes, shapes
        self.from_dtypes, self.to_dtype = from_dtypes, to_dtype

    def _key(self):
        return (self.treedef, self.sizes, self.shapes, self.from_dtypes, self.to_dtype)

    def __eq__(self, other):
        return isinstance(other, _Unravel) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __call__(self, flat):
        if not self.sizes:
            return tree_unflatten(self.treedef, [])
        flat = asarray(flat)
        if self.from_dtypes is not None and flat.dtype != self.to_dtype:
            raise TypeError(f"unravel function given array of dtype {flat.dtype}, but "
                            f"expected dtype {self.to_dtype}")
        if flat.shape != (sum(self.sizes),):
            raise ValueError(f"unravel function given array of shape {flat.shape}, but "
                             f"expected shape ({sum(self.sizes)},)")
        chunks = lax.split(flat, self.sizes) if len(self.sizes) > 1 else [flat]
        leaves = [lax.reshape(chunk, shape) for chunk, shape in zip(chunks, self.shapes)]
        if self.from_dtypes is not None:  # several dtypes: each leaf gets its own back
            leaves = [lax.convert_element_type(leaf, dtype)
                      for leaf, dtype in zip(leaves, self.from_dtypes)]
        return tree_unflatten(self.treedef, leaves)


def ravel_pytree(pytree):
    """``(flat, unravel)``: the leaves of ``pytree`` raveled and concatenated into one 1-D
    array (of their promoted dtype; an empty float32 vector when there are no leaves), and
    the function taking such a vector back to ``pytree``'s structure.  When all leaves share
    one dtype, ``unravel`` keeps the dtype of the vector it is given."""
    leaves, treedef = tree_flatten(pytree)
    if not leaves:
        return lax.full((0,), 0, np.float32), _Unravel(treedef, (), (), None, None)
    leaves = [asarray(leaf) for leaf in leaves]
    from_dtypes = tuple(dtypes.canonicalize_dtype(leaf.dtype) for leaf in leaves)
    to_dtype = dtypes.result_type(*from_dtypes)
    sizes = tuple(int(leaf.size) for leaf in leaves)
    shapes = tuple(tuple(leaf.shape) for leaf in leaves)
    flat = lax.concatenate([lax.convert_element_type(leaf, to_dtype).reshape(-1)
                            for leaf in leaves], 0)
    single = all(dtype == to_dtype for dtype in from_dtypes)
    unravel = _Unravel(treedef, sizes, shapes, None if single else from_dtypes, to_dtype)
    return flat, unravel
