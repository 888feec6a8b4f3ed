"""``remat.ad_checkpoint`` (JAX's ``jax.ad_checkpoint``): ``checkpoint``/``remat``, its
policies, ``checkpoint_name`` and the residual reports. They live in ``remat.checkpointing``."""

from remat.checkpointing.checkpoint import *  # noqa: F403
from remat.checkpointing.checkpoint import __all__  # noqa: F401
