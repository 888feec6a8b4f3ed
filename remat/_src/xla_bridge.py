"""``jax._src.xla_bridge`` for libraries (chex reads ``_backends`` before it sets the number of
CPU devices): JAX's table of the XLA backends initialized so far, which fixes the device count
from then on.  remat initializes no backend: its devices are read from ``XLA_FLAGS`` (or
``remat_num_cpu_devices``) at each call, so the table stays empty, as in a JAX process that has
not run anything yet, and the device count may be set at any time.  The device queries are
``remat.devices``'."""

from remat.devices import (
    default_backend,
    device_count,
    devices,
    local_device_count,
    local_devices,
    process_count,
    process_index,
)

__all__ = ["default_backend", "device_count", "devices", "local_device_count", "local_devices",
           "process_count", "process_index"]

_backends = {}  # platform -> initialized backend: none ever is
