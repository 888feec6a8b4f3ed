"""Collectives across the processes of an MPI job (``remat.distributed``), as primitives
with their rules, so a multi-process step differentiates, batches, jits and checkpoints like
any other program.

Each process runs the same program; the impls call MPI on the operand's NumPy buffer (through
``remat.distributed``). The process count is a parameter (``axis_size``), fixed when the
primitive is bound, so shapes are known while tracing. With one process they are identities
(``process_allgather`` adds the leading axis). The named-axis collectives (``psum`` over a
``pmap`` axis that spans processes) are written on these.

Linear structure, viewing the processes' operands as one global vector:
``allreduce('sum')`` is its own transpose (as ``psum``), ``allgather`` and
``reduce_scatter`` transpose to each other, ``alltoall`` is a permutation that is its own
transpose. ``allreduce('max'/'min')`` differentiates as ``reduce_max`` does: the tangent
flows from the processes holding the extremum, shared evenly among ties.
"""

from remat import core, distributed
from remat.core import ShapedArray
from remat.interpreters import ad, batching
from remat.lax import elementwise as ew
from remat.lax.standard import NUMBER, check_dtype, standard_primitive
from remat.tree_util import tree_map

__all__ = [
    "process_allgather",
    "process_allgather_p",
    "process_allreduce",
    "process_allreduce_p",
    "process_alltoall",
    "process_alltoall_p",
    "process_reduce_scatter",
    "process_reduce_scatter_p",
]

_OPS = ("sum", "max", "min")
_ORDERED = ("signedinteger", "unsignedinteger", "floating", "bool")  # what max/min accept


def _check_axis_size(name, axis_size):
    """A jaxpr traced for one process count cannot run under another."""
    if axis_size != distributed.process_count():
        raise ValueError(f"{name} was traced for {axis_size} process(es) but this job has "
                         f"{distributed.process_count()}; call remat.distributed.initialize() "
                         f"before tracing")


def _check_leading(name, aval, axis_size):
    if aval.ndim == 0 or aval.shape[0] != axis_size:
        raise ValueError(f"{name} needs an operand whose leading axis is the process count "
                         f"{axis_size}, got shape {aval.shape}")


# --- allreduce -------------------------------------------------------------------------------


def _allreduce_abstract_eval(aval, *, op, axis_size):
    check_dtype("process_allreduce", aval, NUMBER if op == "sum" else _ORDERED)
    return aval


def _allreduce_impl(x, *, op, axis_size):
    _check_axis_size("process_allreduce", axis_size)
    return distributed.allreduce(x, op)


process_allreduce_p = standard_primitive("process_allreduce", _allreduce_impl,
                                         _allreduce_abstract_eval)


def _allreduce_jvp(primals, tangents, *, op, axis_size):
    (x,), (t,) = primals, tangents
    out = process_allreduce_p.bind(x, op=op, axis_size=axis_size)
    if type(t) is ad.Zero:
        return out, ad.Zero.from_primal_value(out)
    if op == "sum":
        return out, process_allreduce_p.bind(t, op="sum", axis_size=axis_size)
    hit = ew.convert_element_type(ew.eq(x, out), core.get_aval(x).dtype)
    hits = process_allreduce_p.bind(hit, op="sum", axis_size=axis_size)
    picked = process_allreduce_p.bind(ew.mul(t, hit), op="sum", axis_size=axis_size)
    return out, ew.div(picked, hits)


def _allreduce_transpose(ct, x, *, op, axis_size):
    if op != "sum":
        raise ValueError(f"process_allreduce with op={op!r} is not linear")
    return [process_allreduce_p.bind(ad.instantiate_zeros(ct), op="sum", axis_size=axis_size)]


ad.primitive_jvps[process_allreduce_p] = _allreduce_jvp
ad.primitive_transposes[process_allreduce_p] = _allreduce_transpose
batching.defvectorized(process_allreduce_p)


def process_allreduce(x, op="sum"):
    """Elementwise ``op`` ('sum', 'max' or 'min') of ``x`` (a pytree) over all processes;
    every process gets the result."""
    if op not in _OPS:
        raise ValueError(f"process_allreduce: op must be one of {_OPS}, got {op!r}")
    size = distributed.process_count()
    return tree_map(lambda leaf: process_allreduce_p.bind(leaf, op=op, axis_size=size), x)


# --- allgather and its transpose, reduce-scatter ---------------------------------------------


def _allgather_abstract_eval(aval, *, axis_size):
    return ShapedArray((axis_size,) + aval.shape, aval.dtype, aval.weak_type)


def _allgather_impl(x, *, axis_size):
    _check_axis_size("process_allgather", axis_size)
    return distributed.allgather(x)


def _reduce_scatter_abstract_eval(aval, *, axis_size):
    _check_leading("process_reduce_scatter", aval, axis_size)
    check_dtype("process_reduce_scatter", aval, NUMBER)
    return ShapedArray(aval.shape[1:], aval.dtype, aval.weak_type)


def _reduce_scatter_impl(x, *, axis_size):
    _check_axis_size("process_reduce_scatter", axis_size)
    return distributed.reduce_scatter(x)


process_allgather_p = standard_primitive("process_allgather", _allgather_impl,
                                         _allgather_abstract_eval)
process_reduce_scatter_p = standard_primitive("process_reduce_scatter", _reduce_scatter_impl,
                                              _reduce_scatter_abstract_eval)

ad.deflinear(process_allgather_p, lambda ct, *, axis_size: [
    process_reduce_scatter_p.bind(ct, axis_size=axis_size)])
ad.deflinear(process_reduce_scatter_p, lambda ct, *, axis_size: [
    process_allgather_p.bind(ct, axis_size=axis_size)])


def _allgather_batcher(vals, dims, *, axis_size):
    (x,), (d,) = vals, dims
    return process_allgather_p.bind(x, axis_size=axis_size), d + 1


def _reduce_scatter_batcher(vals, dims, *, axis_size):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 1)  # the process axis stays first
    return process_reduce_scatter_p.bind(x, axis_size=axis_size), 0


batching.primitive_batchers[process_allgather_p] = _allgather_batcher
batching.primitive_batchers[process_reduce_scatter_p] = _reduce_scatter_batcher


def process_allgather(x):
    """Every process's ``x`` (a pytree of arrays), stacked in rank order: shape
    ``(process_count, *x.shape)``."""
    size = distributed.process_count()
    return tree_map(lambda leaf: process_allgather_p.bind(leaf, axis_size=size), x)


def process_reduce_scatter(x):
    """``x`` of shape ``(process_count, *s)``: on process ``i``, the sum over all processes
    of their ``x[i]`` (the transpose of :func:`process_allgather`)."""
    size = distributed.process_count()
    return tree_map(lambda leaf: process_reduce_scatter_p.bind(leaf, axis_size=size), x)


# --- alltoall --------------------------------------------------------------------------------


def _alltoall_abstract_eval(aval, *, axis_size):
    _check_leading("process_alltoall", aval, axis_size)
    return aval


def _alltoall_impl(x, *, axis_size):
    _check_axis_size("process_alltoall", axis_size)
    return distributed.alltoall(x)


process_alltoall_p = standard_primitive("process_alltoall", _alltoall_impl, _alltoall_abstract_eval)
ad.deflinear(process_alltoall_p, lambda ct, *, axis_size: [
    process_alltoall_p.bind(ct, axis_size=axis_size)])


def _alltoall_batcher(vals, dims, *, axis_size):
    (x,), (d,) = vals, dims
    x = batching.moveaxis(x, d, 1)  # the process axis stays first
    return process_alltoall_p.bind(x, axis_size=axis_size), 1


batching.primitive_batchers[process_alltoall_p] = _alltoall_batcher


def process_alltoall(x):
    """``x`` (a pytree of arrays) of shape ``(process_count, *s)``: chunk ``i`` goes to
    process ``i``; chunk ``j`` of the result came from process ``j``."""
    size = distributed.process_count()
    return tree_map(lambda leaf: process_alltoall_p.bind(leaf, axis_size=size), x)
