"""``jax._src.compiler`` for libraries (chex imports it): JAX's hooks that compile XLA
programs for a backend.  remat compiles no XLA program (its ``jit`` plans run on NumPy, on the
one CPU), so there is no backend compile hook here: ``chex.restrict_backends`` finds none to
patch and, as on a CPU-only JAX asked to forbid accelerators, changes nothing."""

__all__ = []
