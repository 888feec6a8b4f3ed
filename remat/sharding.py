"""``remat.sharding``: JAX's sharding classes, truthful for remat's host devices.

Every array is whole in host memory.  A ``Mesh`` lays remat's devices (one by default; see
``remat.devices`` for more) out in a named grid; ``shard_map`` maps over its axes.  A
``NamedSharding`` describes how ``spec`` splits an array over the mesh (``shard_shape``,
``devices_indices_map``) as JAX's does; ``reshard`` and the axis-type decorators change
nothing about where the data is.  Code written for many devices (flax's partitioning
metadata, optax's sharded states) runs unchanged, and gets the same answers.
"""

import abc
import contextlib
import enum
import functools
import threading

import numpy as np

from remat.devices import CPU, Device, SingleDeviceSharding, local_devices
from remat.tree_util import tree_leaves, tree_map

__all__ = ["AbstractDevice", "AbstractMesh", "AxisType", "ManualAxisType", "Mesh",
           "NamedSharding", "PartitionSpec", "Sharding", "SingleDeviceSharding", "auto_axes",
           "explicit_axes", "get_abstract_mesh", "get_mesh", "make_mesh",
           "make_single_device_sharding",
           "reshard", "set_mesh", "use_abstract_mesh"]


class Sharding(abc.ABC):
    """How an array's data is laid out over devices (the base of every sharding)."""

    device_set = property(abc.abstractmethod(lambda self: None))
    is_fully_replicated = property(abc.abstractmethod(lambda self: None))
    is_fully_addressable = property(abc.abstractmethod(lambda self: None))
    num_devices = property(abc.abstractmethod(lambda self: None))
    memory_kind = property(abc.abstractmethod(lambda self: None))

    @abc.abstractmethod
    def shard_shape(self, global_shape):
        """The shape of each shard of an array of ``global_shape``."""

    @abc.abstractmethod
    def devices_indices_map(self, global_shape):
        """Each device's index (a tuple of slices) into an array of ``global_shape``."""

    @abc.abstractmethod
    def with_memory_kind(self, kind):
        """The same sharding in memory ``kind``."""

    @abc.abstractmethod
    def is_equivalent_to(self, other, ndim):
        """Whether ``other`` lays out an array of rank ``ndim`` the same way."""

    addressable_devices = property(lambda self: self.device_set)
    has_addressable_devices = property(lambda self: True)

    def addressable_devices_indices_map(self, global_shape):
        return self.devices_indices_map(global_shape)


Sharding.register(SingleDeviceSharding)


def make_single_device_sharding(device, *, memory_kind=None):
    """``SingleDeviceSharding(device, memory_kind=memory_kind)``."""
    return SingleDeviceSharding(device, memory_kind=memory_kind)


class AxisType(enum.Enum):
    """How a mesh axis is sharded: by the compiler, by explicit types, or by hand."""

    Auto = enum.auto()
    Explicit = enum.auto()
    Manual = enum.auto()

    def __repr__(self):
        return self.name


class ManualAxisType(enum.Enum):
    """The kinds of manual (``shard_map``) axes: varying or replicated values."""

    Varying = enum.auto()
    Invariant = enum.auto()

    def __repr__(self):
        return self.name


class _Unconstrained:
    def __repr__(self):
        return "UNCONSTRAINED"


class PartitionSpec:
    """Which mesh axes split each dimension of an array: an entry per dimension, each a mesh
    axis name, a tuple of names, ``None`` (not split) or ``PartitionSpec.UNCONSTRAINED``."""

    UNCONSTRAINED = _Unconstrained()
    __slots__ = ("_partitions", "unreduced", "reduced")

    def __init__(self, *partitions, unreduced=frozenset(), reduced=frozenset()):
        for p in partitions:
            ok = (p is None or p is PartitionSpec.UNCONSTRAINED or isinstance(p, str)
                  or (isinstance(p, tuple | list) and all(isinstance(q, str) for q in p)))
            if not ok:
                raise TypeError(f"PartitionSpec entries must be a mesh axis name, a tuple of "
                                f"names, None or UNCONSTRAINED; got {p!r}")
        self._partitions = tuple(tuple(p) if isinstance(p, list) else p for p in partitions)
        self.unreduced = frozenset(unreduced)
        self.reduced = frozenset(reduced)

    def __repr__(self):
        inner = ", ".join(repr(p) for p in self._partitions)
        if len(self._partitions) == 1:
            inner += ","
        return f"P({inner})"

    def __iter__(self):
        return iter(self._partitions)

    def __len__(self):
        return len(self._partitions)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return PartitionSpec(*self._partitions[i])
        return self._partitions[i]

    def __eq__(self, other):
        if isinstance(other, PartitionSpec):
            return (self._partitions == other._partitions
                    and self.unreduced == other.unreduced and self.reduced == other.reduced)
        return NotImplemented

    def __hash__(self):
        return hash((self._partitions, self.unreduced, self.reduced))

    def index(self, value):
        return self._partitions.index(value)

    def count(self, value):
        return self._partitions.count(value)

    def update(self, **kwargs):
        """A copy with ``partitions``, ``unreduced`` or ``reduced`` replaced."""
        return PartitionSpec(*kwargs.pop("partitions", self._partitions),
                             unreduced=kwargs.pop("unreduced", self.unreduced),
                             reduced=kwargs.pop("reduced", self.reduced))

    def _axis_names(self):
        for p in self._partitions:
            if isinstance(p, str):
                yield p
            elif isinstance(p, tuple):
                yield from p


class AbstractDevice:
    """A device by kind only (what an ``AbstractMesh`` knows): here, the CPU."""

    def __init__(self, device_kind="cpu", num_cores=None):
        self.device_kind = device_kind
        self.num_cores = num_cores

    def __repr__(self):
        return f"AbstractDevice(device_kind={self.device_kind}, num_cores={self.num_cores})"

    def __eq__(self, other):
        return (isinstance(other, AbstractDevice) and self.device_kind == other.device_kind
                and self.num_cores == other.num_cores)

    def __hash__(self):
        return hash((self.device_kind, self.num_cores))


def _axis_types(axis_types, n):
    if axis_types is None:
        return (AxisType.Auto,) * n
    if isinstance(axis_types, AxisType):
        axis_types = (axis_types,)
    axis_types = tuple(axis_types)
    if len(axis_types) != n or not all(isinstance(t, AxisType) for t in axis_types):
        raise ValueError(f"axis_types must be one AxisType per mesh axis ({n}); got "
                         f"{axis_types!r}")
    return axis_types


class _MeshShape:
    """What ``Mesh`` and ``AbstractMesh`` share: axis names, sizes and types."""

    axis_names = property(lambda self: self._axis_names)
    axis_sizes = property(lambda self: self._axis_sizes)
    axis_types = property(lambda self: self._axis_types)
    shape = property(lambda self: dict(zip(self._axis_names, self._axis_sizes)))
    shape_tuple = property(lambda self: tuple(zip(self._axis_names, self._axis_sizes)))
    size = property(lambda self: int(np.prod(self._axis_sizes, dtype=np.int64)))
    empty = property(lambda self: not self._axis_names)
    is_scalar = property(lambda self: bool(self._axis_names) and self.size == 1)

    def _names_of(self, kind):
        return tuple(n for n, t in zip(self._axis_names, self._axis_types) if t is kind)

    def _all_of(self, kind):
        """Whether every axis is of ``kind``: False for a mesh without axes, as in JAX."""
        return bool(self._axis_types) and all(t is kind for t in self._axis_types)

    auto_axes = property(lambda self: self._names_of(AxisType.Auto))
    explicit_axes = property(lambda self: self._names_of(AxisType.Explicit))
    manual_axes = property(lambda self: self._names_of(AxisType.Manual))
    are_all_axes_auto = property(lambda self: self._all_of(AxisType.Auto))
    are_all_axes_explicit = property(lambda self: self._all_of(AxisType.Explicit))
    are_all_axes_manual = property(lambda self: self._all_of(AxisType.Manual))

    def _shape_repr(self):
        return ", ".join(f"'{n}': {s}" for n, s in zip(self._axis_names, self._axis_sizes))


def _check_names(axis_names, n, what):
    if isinstance(axis_names, str):
        axis_names = (axis_names,)
    axis_names = tuple(axis_names)
    if len(axis_names) != n:
        raise ValueError(f"{what} requires the ndim of its first argument (`devices`) to equal "
                         f"the length of its second argument (`axis_names`), but got "
                         f"devices.ndim == {n} and len(axis_names) == {len(axis_names)}.")
    if len(set(axis_names)) != n:
        raise ValueError(f"Mesh axis names must be unique; got {axis_names!r}")
    return axis_names


class AbstractMesh(_MeshShape):
    """A mesh's axis names, sizes and types, without devices."""

    def __init__(self, axis_sizes, axis_names, *, axis_types=None,
                 abstract_device=None):
        self._axis_sizes = tuple(int(s) for s in axis_sizes)
        self._axis_names = _check_names(axis_names, len(self._axis_sizes), "AbstractMesh")
        self._axis_types = _axis_types(axis_types, len(self._axis_sizes))
        self.abstract_device = abstract_device or AbstractDevice()

    def update(self, axis_sizes=None, axis_names=None, axis_types=None):
        return AbstractMesh(self._axis_sizes if axis_sizes is None else axis_sizes,
                            self._axis_names if axis_names is None else axis_names,
                            axis_types=self._axis_types if axis_types is None else axis_types)

    abstract_mesh = property(lambda self: self)

    def __eq__(self, other):
        return (isinstance(other, AbstractMesh) and self.shape_tuple == other.shape_tuple
                and self._axis_types == other._axis_types)

    def __hash__(self):
        return hash((self.shape_tuple, self._axis_types))

    def __repr__(self):
        shape = self._shape_repr() if self._axis_names else "()"
        return f"AbstractMesh({shape}, axis_types={self._axis_types!r})"


class Mesh(_MeshShape):
    """remat's devices laid out in a named n-dimensional grid."""

    def __init__(self, devices, axis_names, axis_types=None):
        devices = np.asarray(devices, dtype=object)
        if devices.size and any(not isinstance(d, Device) for d in devices.flat):
            bad = next(d for d in devices.flat if not isinstance(d, Device))
            raise ValueError(f"a Mesh is built of remat's devices (remat.devices()); got "
                             f"{bad!r}")
        if len({d.id for d in devices.flat}) != devices.size:
            raise ValueError(f"a Mesh's devices must be distinct (one device, one place); got "
                             f"{list(devices.flat)}")
        self.devices = devices
        self._axis_sizes = devices.shape
        self._axis_names = _check_names(axis_names, devices.ndim, "Mesh")
        self._axis_types = _axis_types(axis_types, devices.ndim)
        self._entered = []

    device_ids = property(lambda self: np.vectorize(lambda d: d.id, otypes=[np.int64])(
        self.devices) if self.devices.size else np.zeros(self.devices.shape, np.int64))
    local_devices = property(lambda self: list(self.devices.flat))
    local_mesh = property(lambda self: self)
    is_multi_process = property(lambda self: False)
    abstract_mesh = property(lambda self: AbstractMesh(self._axis_sizes, self._axis_names,
                                                       axis_types=self._axis_types))

    def update(self, devices=None, axis_names=None, axis_types=None):
        return Mesh(self.devices if devices is None else devices,
                    self._axis_names if axis_names is None else axis_names,
                    self._axis_types if axis_types is None else axis_types)

    def __enter__(self):
        self._entered.append(set_mesh(self))
        self._entered[-1].__enter__()
        return self

    def __exit__(self, *exc):
        return self._entered.pop().__exit__(*exc)

    def __eq__(self, other):
        return (isinstance(other, Mesh) and self.shape_tuple == other.shape_tuple
                and self._axis_types == other._axis_types
                and [d.id for d in self.devices.flat] == [d.id for d in other.devices.flat])

    def __hash__(self):
        return hash((Mesh, self.shape_tuple, self._axis_types,
                     tuple(d.id for d in self.devices.flat)))

    def __repr__(self):
        return (f"Mesh(axis_sizes={self._axis_sizes!r}, axis_names={self._axis_names!r}, "
                f"axis_types={self._axis_types!r})")


class NamedSharding(Sharding):
    """An array laid out over ``mesh`` as ``spec`` says: dim ``i`` split over the mesh axes
    ``spec[i]`` names (row-major over a tuple), replicated over the others."""

    def __init__(self, mesh, spec, *, memory_kind=None):
        if not isinstance(mesh, Mesh | AbstractMesh):
            raise TypeError(f"NamedSharding's mesh must be a Mesh or AbstractMesh; got "
                            f"{type(mesh).__name__}")
        if not isinstance(spec, PartitionSpec):
            raise TypeError(f"NamedSharding's spec must be a PartitionSpec; got "
                            f"{type(spec).__name__}")
        unknown = [n for n in spec._axis_names() if n not in mesh.axis_names]
        if unknown:
            raise ValueError(f"Resource axis: {unknown[0]} of {spec} is not found in mesh: "
                             f"{tuple(mesh.axis_names)}.")
        if memory_kind not in (None, "device"):
            raise ValueError(f"memory_kind must be 'device' (remat's one memory), got "
                             f"{memory_kind!r}")
        self.mesh, self.spec, self._memory_kind = mesh, spec, "device"

    memory_kind = property(lambda self: self._memory_kind)
    is_fully_addressable = property(lambda self: True)

    @property
    def _device_assignment(self):
        devices = getattr(self.mesh, "devices", None)
        return tuple(devices.flat) if devices is not None and devices.size else (CPU,)

    device_set = property(lambda self: set(self._device_assignment))
    num_devices = property(lambda self: len(self._device_assignment))
    is_fully_replicated = property(
        lambda self: all(self.mesh.shape[n] == 1 for n in self.spec._axis_names()))

    def _dim_axes(self, ndim):
        if len(self.spec) > ndim:
            raise ValueError(f"Sharding {self!r} is only valid for values of rank at least "
                             f"{len(self.spec)}, but was applied to a value of rank {ndim}")
        entries = list(self.spec) + [None] * (ndim - len(self.spec))
        return [() if e is None or e is PartitionSpec.UNCONSTRAINED else (e,) if isinstance(e, str)
                else tuple(e) for e in entries]

    def shard_shape(self, global_shape):
        out = []
        for n, axes in zip(global_shape, self._dim_axes(len(global_shape))):
            parts = int(np.prod([self.mesh.shape[a] for a in axes], dtype=np.int64))
            if n % parts:
                raise ValueError(f"One of pjit outputs with pytree key path  was given the "
                                 f"sharding of {self!r}, which implies that the global size of "
                                 f"its dimension should be divisible by {parts}, but it is "
                                 f"equal to {n} (full shape: {tuple(global_shape)})")
            out.append(n // parts)
        return tuple(out)

    def devices_indices_map(self, global_shape):
        shard = self.shard_shape(global_shape)
        dim_axes = self._dim_axes(len(global_shape))
        names = list(self.mesh.axis_names)
        result = {}
        for pos, device in zip(np.ndindex(*self.mesh.axis_sizes), self._device_assignment):
            coord = dict(zip(names, pos))
            index = []
            for size, axes in zip(shard, dim_axes):
                k = 0
                for a in axes:
                    k = k * self.mesh.shape[a] + coord[a]
                index.append(slice(k * size, (k + 1) * size) if axes else slice(None))
            result[device] = tuple(index)
        return result

    def with_memory_kind(self, kind):
        return NamedSharding(self.mesh, self.spec, memory_kind=kind)

    def update(self, **kwargs):
        return NamedSharding(kwargs.get("mesh", self.mesh), kwargs.get("spec", self.spec),
                             memory_kind=kwargs.get("memory_kind", self._memory_kind))

    def is_equivalent_to(self, other, ndim):
        if not isinstance(other, Sharding) or other.num_devices != self.num_devices:
            return False
        shape = (2 * 3 * 5 * 7 * 11 * self.num_devices,) * ndim
        return other.devices_indices_map(shape) == self.devices_indices_map(shape)

    def __eq__(self, other):
        return (isinstance(other, NamedSharding) and self.mesh == other.mesh
                and self.spec == other.spec)

    def __hash__(self):
        return hash((NamedSharding, self.mesh, self.spec))

    def __repr__(self):
        return (f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r}, "
                f"memory_kind={self._memory_kind})")


# --- the current mesh ------------------------------------------------------------------------

class _MeshContext(threading.local):
    def __init__(self):
        self.concrete = None
        self.abstract = AbstractMesh((), ())


_context = _MeshContext()


def get_mesh():
    """The concrete mesh set by ``set_mesh`` (None outside one)."""
    return _context.concrete


def get_abstract_mesh():
    """The abstract mesh in force (an empty one outside ``set_mesh`` /
    ``use_abstract_mesh``)."""
    return _context.abstract


@contextlib.contextmanager
def _setting(concrete, abstract):
    saved = _context.concrete, _context.abstract
    _context.concrete, _context.abstract = concrete, abstract
    try:
        yield concrete if concrete is not None else abstract
    finally:
        _context.concrete, _context.abstract = saved


class _MeshSetter:
    """``set_mesh(mesh)``: sets ``mesh`` as the current mesh now, and, used as a context
    manager, restores the previous one on exit."""

    def __init__(self, mesh):
        if mesh is not None and not isinstance(mesh, Mesh):
            raise ValueError(f"Expected mesh of type `jax.sharding.Mesh`. Got {type(mesh)}")
        self._previous = _context.concrete, _context.abstract
        _context.concrete = mesh
        _context.abstract = mesh.abstract_mesh if mesh is not None else AbstractMesh((), ())

    def __enter__(self):
        return _context.concrete

    def __exit__(self, *exc):
        _context.concrete, _context.abstract = self._previous
        return False


def set_mesh(mesh):
    """Make ``mesh`` the current mesh (as a context manager: within the block)."""
    return _MeshSetter(mesh)


def use_abstract_mesh(mesh):
    """Within the block, ``mesh`` (an ``AbstractMesh``) is the abstract mesh in force."""
    if not isinstance(mesh, AbstractMesh):
        raise ValueError(f"Expected mesh of type `jax.sharding.AbstractMesh`. Got "
                         f"{type(mesh)}")
    return _setting(_context.concrete, mesh)


# --- resharding ------------------------------------------------------------------------------

def _check_sharding(sharding, name):
    if isinstance(sharding, PartitionSpec):
        if get_abstract_mesh().empty:
            raise ValueError(f"Using PartitionSpec when you are not under a mesh context is "
                             f"not allowed. Please pass a NamedSharding instance or enter into a "
                             f"mesh context via `jax.set_mesh`. Got {sharding}")
    elif not isinstance(sharding, Sharding):
        raise TypeError(f"{name} expects a Sharding or PartitionSpec; got "
                        f"{type(sharding).__name__}")


def reshard(xs, out_shardings):
    """``xs`` laid out as ``out_shardings`` says: on one device, the same values."""
    for s in tree_leaves(out_shardings, is_leaf=lambda s: isinstance(s, PartitionSpec)):
        _check_sharding(s, "reshard")
    return tree_map(lambda x: x, xs)


def _axes_decorator(kind):
    def decorator(f=None, /, *, axes=None, in_sharding=None, out_sharding=None):
        if f is None:
            return functools.partial(decorator, axes=axes, in_sharding=in_sharding,
                                     out_sharding=out_sharding)

        @functools.wraps(f)
        def wrapped(*args, **kwargs):
            return f(*args, **kwargs)

        return wrapped

    decorator.__name__ = f"{kind}_axes"
    decorator.__doc__ = (f"``f`` with the mesh axes ``axes`` made {kind} while it runs: on "
                         f"one device that changes no value, so ``f`` runs as it is.")
    return decorator


auto_axes = _axes_decorator("auto")
explicit_axes = _axes_decorator("explicit")


def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None):
    """A ``Mesh`` of ``axis_shapes`` over the first ``prod(axis_shapes)`` of ``devices``
    (by default this process's local devices), as ``jax.make_mesh``."""
    axis_shapes = tuple(int(s) for s in axis_shapes)
    devices = list(local_devices() if devices is None else devices)
    need = int(np.prod(axis_shapes, dtype=np.int64))
    if need > len(devices):
        raise ValueError(f"Number of devices {len(devices)} must be >= the product of mesh_shape "
                         f"{axis_shapes}")
    grid = np.empty(need, dtype=object)
    grid[:] = devices[:need]
    return Mesh(grid.reshape(axis_shapes), axis_names, axis_types)
