"""``remat._src``: small modules at the paths of JAX-private modules that libraries written
for JAX import (``jax._src.traceback_util`` and a few others), so that with ``jax`` aliased to
remat (``remat.jax_alias``) those imports resolve.  Each holds only objects that are tiny and
stable in JAX, implemented for remat; nothing here is remat's own API.
"""

# reachable by attribute once ``jax`` is imported, as JAX's is
from remat._src import interpreters, xla_bridge  # noqa: F401
