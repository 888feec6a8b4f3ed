"""``remat.experimental.shard_map.shard_map``: JAX's older home of ``shard_map``
(``shard_map(f, mesh, in_specs, out_specs, check_rep=True, auto=frozenset())``)."""

from remat.transforms.shard_map import shard_map

__all__ = ["shard_map"]
