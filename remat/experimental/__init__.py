"""``remat.experimental``: JAX's experimental APIs that remat provides (``checkify``,
``layout``, ``mesh_utils``, ``shard_map``: each imported at its first use, as JAX's are), and
``io_callback``, which JAX also exports here."""

from remat.runtime.lazy_imports import lazy_submodules
from remat.transforms.callback import io_callback

__getattr__, __dir__, _submodules = lazy_submodules(
    __name__, ["checkify", "layout", "mesh_utils", "shard_map"])
__all__ = ["io_callback", *_submodules]
