"""``jax.experimental.mesh_utils``: arrays of devices shaped for ``jax.sharding.Mesh``.
remat's devices are CPU devices, for which JAX lays the devices out in the order given (no
network topology to follow); so does remat."""

import collections
import math

import numpy as np

from remat.devices import devices as all_devices

__all__ = ["create_device_mesh", "create_hybrid_device_mesh"]


def _axis_sizes(mesh_shape):
    try:
        return tuple(int(s) for s in mesh_shape)
    except (TypeError, ValueError):
        return None


def create_device_mesh(mesh_shape, devices=None, *, contiguous_submeshes=False,
                       allow_split_physical_axes=False):
    """``devices`` (default: all of them) as an array of shape ``mesh_shape``. The two
    options concern accelerators' network topologies: for CPU devices, JAX's too, they change
    nothing."""
    if devices is None:
        devices = all_devices()
    shape = _axis_sizes(mesh_shape)
    if shape is None:
        raise ValueError(f"`mesh_shape` passed to `create_device_mesh` should be a sequence "
                         f"of ints. Got {mesh_shape}")
    if math.prod(shape) != len(devices):
        raise ValueError(f"Number of devices {len(devices)} must equal the product of "
                         f"mesh_shape {shape}")
    return np.asarray(devices).reshape(shape)


def create_hybrid_device_mesh(mesh_shape, dcn_mesh_shape, devices=None, *,
                              process_is_granule=False, should_sort_granules_by_key=True,
                              allow_split_physical_axes=False):
    """A mesh of per-granule meshes: each granule's devices (a process's, with
    ``process_is_granule``; CPU devices have no slices) shaped ``mesh_shape``, the granules
    laid out as ``dcn_mesh_shape``."""
    if devices is None:
        devices = all_devices()
    attr = "process_index" if process_is_granule else "slice_index"
    if not hasattr(devices[0], attr):
        raise ValueError(f"Device {devices[0]} does not have attribute {attr}. See "
                         f"`process_is_granule` option.")
    by_granule = collections.defaultdict(list)
    for device in devices:
        by_granule[getattr(device, attr)].append(device)
    granules = ([by_granule[key] for key in sorted(by_granule)]
                if should_sort_granules_by_key else list(by_granule.values()))
    if math.prod(dcn_mesh_shape) != len(granules):
        raise ValueError(f"Number of slices {len(granules)} must equal the product of "
                         f"dcn_mesh_shape {dcn_mesh_shape}")
    meshes = [create_device_mesh(mesh_shape, granule) for granule in granules]
    layout = np.arange(len(granules)).reshape(dcn_mesh_shape)
    blocks = np.vectorize(lambda i: meshes[i], otypes=[object])(layout)
    return np.block(blocks.tolist())
