"""``remat.experimental``: JAX's experimental APIs that remat provides (``checkify``,
``mesh_utils``, ``shard_map``), and ``io_callback``, which JAX also exports here."""

from remat.transforms.callback import io_callback
from remat.experimental import checkify, mesh_utils
from remat.experimental import shard_map

__all__ = ["checkify", "io_callback", "mesh_utils", "shard_map"]
