"""The few array operations the interpreters build with: zeros and the sum of two tangents
(``ad``), a transpose and a broadcast (``batching``). The primitives that compute them belong to
``remat.lax``, which fills these slots when it is imported, so the interpreters stay below
every primitive module."""

full = None  # full(shape, fill_value, dtype, weak_type): remat.lax.shape
add = None  # add(x, y): remat.lax.elementwise
transpose = None  # transpose(x, permutation): remat.lax.shape
broadcast_in_dim = None  # broadcast_in_dim(x, shape, broadcast_dimensions): remat.lax.shape
