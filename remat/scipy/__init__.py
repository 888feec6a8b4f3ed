"""``remat.scipy``: SciPy functions with JAX's names, signatures and dtype rules, every one
traceable and differentiable (``jax.scipy``'s counterpart). Each submodule is imported at its
first use, as JAX's are."""

from remat.runtime.lazy_imports import lazy_submodules

__getattr__, __dir__, __all__ = lazy_submodules(__name__, ["linalg", "special", "stats"])
