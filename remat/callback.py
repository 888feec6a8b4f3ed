"""``io_callback``: calling back into Python from staged code, as a side effect.

Its primitive is effectful: dead-code elimination keeps it, CSE never merges it, and a
checkpoint refuses to contain it (replaying a side effect during recomputation is unsafe).
"""

import numpy as np

from remat import core, dtypes
from remat.core import Primitive, ShapedArray
from remat.exec import passes
from remat.tree_util import tree_flatten, tree_unflatten

io_callback_p = Primitive("io_callback")
io_callback_p.multiple_results = True
io_callback_p.has_effects = True
passes.cse_barriers.add(io_callback_p)


def _io_callback_impl(*args, callback, out_avals, in_tree):
    result = callback(*tree_unflatten(in_tree, [np.asarray(a) for a in args]))
    flat = tree_flatten(result)[0]
    if len(flat) != len(out_avals):
        raise TypeError(f"io_callback: callback returned {len(flat)} values, but "
                        f"result_shape_dtypes describes {len(out_avals)}")
    outs = []
    for x, aval in zip(flat, out_avals):
        x = np.asarray(x)
        if x.shape != aval.shape:
            raise TypeError(f"io_callback: callback returned shape {x.shape}, expected "
                            f"{aval.shape}")
        outs.append(x.astype(aval.dtype))
    return outs


io_callback_p.def_impl(_io_callback_impl)
io_callback_p.def_abstract_eval(lambda *avals, callback, out_avals, in_tree: list(out_avals))


def io_callback(callback, result_shape_dtypes, *args, ordered=False):
    """Call ``callback(*args)`` on NumPy values, also inside jit and other traced code.
    ``result_shape_dtypes`` is a pytree of ``ShapeDtypeStruct`` describing the result."""
    flat_args, in_tree = tree_flatten(args)
    shapes, out_tree = tree_flatten(result_shape_dtypes)
    out_avals = tuple(ShapedArray(s.shape, dtypes.canonicalize_dtype(s.dtype)) for s in shapes)
    for x in flat_args:
        core.get_aval(x)  # a clear TypeError for non-array arguments
    outs = io_callback_p.bind(*flat_args, callback=callback, out_avals=out_avals,
                              in_tree=in_tree)
    return tree_unflatten(out_tree, outs)
