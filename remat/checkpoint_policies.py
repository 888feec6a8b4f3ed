"""``remat.checkpoint_policies`` (JAX's ``jax.checkpoint_policies``): the policies that say what
``checkpoint`` saves. They live in ``remat.checkpointing.policies``."""

from remat.checkpointing.policies import *  # noqa: F403
from remat.checkpointing.policies import __all__  # noqa: F401
