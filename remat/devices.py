"""remat's devices — host CPU devices — with JAX's device API: ``devices()``,
``local_devices()``, the counts and indices of the processes, the ``Device`` objects
(``CpuDevice(id=k)``) and the sharding every Array has (``SingleDeviceSharding``).

There is one local device unless more are asked for (``REMAT_NUM_CPU_DEVICES=n``, JAX's
``XLA_FLAGS=--xla_force_host_platform_device_count=n``,
``remat.config.update("remat_num_cpu_devices", n)`` or JAX's ``jax_num_cpu_devices``); ``pmap``
and ``shard_map`` map over them. All of them are the host's memory: arrays live there,
nothing is ever transferred, and effects run synchronously in program order. With several
processes (``remat.distributed``), process ``p``'s local devices have the global ids
``p * n .. p * n + n - 1``.
"""

import os
import platform
import re
import sys
import warnings

import numpy as np

from remat import distributed
from remat.config import config
from remat.runtime import memory
from remat.tree_util import tree_map
from remat.version import __version__

__all__ = ["Device", "Shard", "SingleDeviceSharding", "copy_to_host_async", "default_backend",
           "device_count", "devices", "effects_barrier", "host_count", "host_id", "host_ids",
           "local_device_count", "local_devices", "print_environment_info", "process_count",
           "process_index", "process_indices"]


class Device:
    """A host CPU device (``CpuDevice(id=k)``, platform ``'cpu'``) of process
    ``process_index``."""

    platform = "cpu"
    device_kind = "cpu"

    def __init__(self, id=0, process_index=0, local_hardware_id=None):
        self.id = id
        self.process_index = self.host_id = self.task_id = process_index
        self.local_hardware_id = id if local_hardware_id is None else local_hardware_id

    def __repr__(self):
        return f"CpuDevice(id={self.id})"

    def __str__(self):
        return f"cpu:{self.id}"

    def __reduce__(self):
        return (_device_by_id, (self.id,))

    def memory_stats(self):
        """remat's own accounting of the arrays and executor buffers it holds (every device
        is the host's memory)."""
        return {"bytes_in_use": memory.live_bytes(), "peak_bytes_in_use": memory.peak_bytes(),
                "bytes_limit": memory.machine_bytes or 0}

    def default_memory(self):
        return "device"

    def addressable_memories(self):
        return ["device"]


CPU = Device()
_devices_by_id = {}  # (global id, local device count) -> Device
_XLA_COUNT = re.compile(r"--xla_force_host_platform_device_count=(\d+)")


def _device_by_id(device_id):
    """The device of global id ``device_id`` (made once per device count, so devices
    compare by identity)."""
    if device_id == 0:
        return CPU
    n = local_device_count()
    device = _devices_by_id.get((device_id, n))
    if device is None:
        device = _devices_by_id[device_id, n] = Device(device_id, device_id // n, device_id % n)
    return device


def _the_device():
    return CPU


def _num_local_devices():
    n = config.remat_num_cpu_devices
    if n is None and config.jax_num_cpu_devices != -1:
        n = config.jax_num_cpu_devices
    if n is None:
        match = _XLA_COUNT.search(os.environ.get("XLA_FLAGS", ""))
        n = int(match.group(1)) if match else 1
    return max(int(n), 1)


class SingleDeviceSharding:
    """Where an Array's data lives: all of it on one device (JAX's ``SingleDeviceSharding``)."""

    __slots__ = ("_device", "_memory_kind")

    def __init__(self, device=None, *, memory_kind=None):
        device = CPU if device is None else device
        if not isinstance(device, Device):
            raise ValueError(f"SingleDeviceSharding needs a device of remat.devices(), got "
                             f"{device!r}")
        if memory_kind not in (None, "device"):
            raise ValueError(f"memory_kind must be 'device' (remat's one memory), got "
                             f"{memory_kind!r}")
        self._device = device
        self._memory_kind = "device"

    device_set = property(lambda self: {self._device})
    addressable_devices = property(lambda self: {self._device})
    memory_kind = property(lambda self: self._memory_kind)
    num_devices = property(lambda self: 1)
    is_fully_replicated = property(lambda self: True)
    is_fully_addressable = property(lambda self: True)
    has_addressable_devices = property(lambda self: True)
    _device_assignment = property(lambda self: (self._device,))

    def shard_shape(self, global_shape):
        return tuple(global_shape)

    def devices_indices_map(self, global_shape):
        return {self._device: (slice(None),) * len(global_shape)}

    def addressable_devices_indices_map(self, global_shape):
        return self.devices_indices_map(global_shape)

    def with_memory_kind(self, kind):
        return SingleDeviceSharding(self._device, memory_kind=kind)

    def is_equivalent_to(self, other, ndim):
        return isinstance(other, SingleDeviceSharding)

    def check_compatible_aval(self, aval_shape):
        return None

    def __eq__(self, other):
        return isinstance(other, SingleDeviceSharding)

    def __hash__(self):
        return hash((SingleDeviceSharding, self._device))

    def __repr__(self):
        return f"SingleDeviceSharding(device={self._device!r}, memory_kind={self._memory_kind})"


SHARDING = SingleDeviceSharding(CPU)


class Shard:
    """One shard of an Array: with one device, the whole array."""

    __slots__ = ("device", "index", "replica_id", "data")

    def __init__(self, device, index, replica_id, data):
        self.device, self.index, self.replica_id, self.data = device, index, replica_id, data

    def __repr__(self):
        return (f"Shard(device={self.device!r}, index={self.index}, "
                f"replica_id={self.replica_id}, data={self.data})")


# --- the device API --------------------------------------------------------------------------


def _check_backend(backend):
    name = getattr(backend, "platform", backend)
    if name not in (None, "cpu"):
        raise RuntimeError(f"Unknown backend: '{name}' requested, but no platforms that are "
                           f"instances of {name} are present. Platforms present are: cpu")


def devices(backend=None):
    """Every process's devices, by global id (``[CpuDevice(id=0)]`` by default)."""
    _check_backend(backend)
    return [_device_by_id(i) for i in range(device_count())]


def local_devices(process_index=None, backend=None, host_id=None):
    """The devices of this process (or of process ``process_index``)."""
    _check_backend(backend)
    index = process_index if process_index is not None else host_id
    count = distributed.process_count()
    if index is None:
        index = distributed.process_index()
    elif not 0 <= index < count:
        raise ValueError(f"Invalid process_index {index}: there are {count} process(es) "
                         f"(indices 0 .. {count - 1})")
    n = local_device_count()
    return [_device_by_id(index * n + k) for k in range(n)]


def device_count(backend=None):
    _check_backend(backend)
    return distributed.process_count() * local_device_count()


def local_device_count(backend=None):
    _check_backend(backend)
    return _num_local_devices()


def default_backend():
    return "cpu"


def process_index(backend=None):
    _check_backend(backend)
    return distributed.process_index()


def process_count(backend=None):
    _check_backend(backend)
    return distributed.process_count()


def process_indices(backend=None):
    _check_backend(backend)
    return list(range(distributed.process_count()))


def _renamed(old, new):
    warnings.warn(f"jax.{old} has been renamed to jax.{new}. This alias will eventually be "
                  f"removed; please update your code.", UserWarning, stacklevel=3)


def host_id(backend=None):
    """Deprecated alias of ``process_index``."""
    _renamed("host_id", "process_index")
    return process_index(backend)


def host_count(backend=None):
    """Deprecated alias of ``process_count``."""
    _renamed("host_count", "process_count")
    return process_count(backend)


def host_ids(backend=None):
    """Deprecated alias of ``process_indices``."""
    _renamed("host_ids", "process_indices")
    return process_indices(backend)


def effects_barrier():
    """Wait for the effects of functions already called: remat runs every callback
    synchronously, in program order, so they are all done when this is called."""


def copy_to_host_async(x):
    """Start copying the arrays of pytree ``x`` to the host (they already are there);
    returns ``x``."""
    tree_map(lambda leaf: leaf.copy_to_host_async()
             if hasattr(leaf, "copy_to_host_async") else None, x)
    return x


def print_environment_info(return_string=False):
    """The versions of remat and its dependencies, and the device: printed, or returned."""
    lines = [f"remat:   {__version__}", f"numpy:   {np.__version__}"]
    for name in ("scipy", "ml_dtypes"):
        module = sys.modules.get(name)
        if module is not None:
            lines.append(f"{name + ':':8s} {getattr(module, '__version__', 'unknown')}")
    n = local_device_count()
    lines += [f"python:  {sys.version}", f"device info: cpu-{device_count()}, {n} local "
              f"devices", f"process_count: {process_count()}", f"platform: {platform.uname()}"]
    text = "\n".join(lines) + "\n"
    if return_string:
        return text
    print(text)
    return None
