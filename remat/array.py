"""The eager array type: an immutable NumPy buffer with an abstract value.

Operators and methods (``+``, ``@``, ``x[i]``, ``.at[]``, ``.sum()`` ...) are attached by
``remat.numpy`` so that Arrays and tracers share one implementation. Every Array registers its
buffer with ``remat.memory`` while it lives.
"""

import gc

import numpy as np

from remat import core, devices, dtypes
from remat.runtime import memory


class _ArrayMeta(type):
    """Makes ``isinstance(tracer, Array)`` true, as ``isinstance(tracer, jax.Array)`` is in JAX:
    code written for JAX tests for arrays so, inside transformations too. Only tracers of
    arrays count (not of tokens or mutable references: their aval is no plain ShapedArray).
    An Array's own type check stays Python's exact-type fast path; remat itself tests for a
    concrete Array with ``type(x) is Array``."""

    def __instancecheck__(cls, instance):
        if type(instance) is cls:
            return True
        if isinstance(instance, core.Tracer):
            return type(getattr(instance, "aval", None)) is core.ShapedArray
        return type.__instancecheck__(cls, instance)


class Array(metaclass=_ArrayMeta):
    """A remat array. Create one with ``remat.numpy.asarray``. A tracer of an array is an
    instance too (as in JAX), so ``type(x) is Array`` is the test for a concrete value."""

    __slots__ = ("_buf", "aval", "__weakref__")
    __array_priority__ = 100

    def __init__(self, *args, **kwargs):
        raise TypeError("remat.Array cannot be constructed directly; use remat.numpy.asarray")

    @classmethod
    def _new(cls, buf, aval):
        obj = object.__new__(cls)
        buf.flags.writeable = False
        obj._buf = buf
        obj.aval = aval
        memory.track(buf)
        return obj

    def __del__(self):
        try:
            if type(self._buf) is not _DeletedBuffer:
                memory.untrack(self._buf)
        except (AttributeError, KeyError, TypeError, NameError):  # interpreter shutdown
            pass

    def delete(self):
        """Release the buffer now; any later use raises RuntimeError (as for JAX arrays
        donated to a jitted function)."""
        if type(self._buf) is not _DeletedBuffer:
            buf = self._buf
            self._buf = _DeletedBuffer(self.aval)
            memory.untrack(buf)
            return buf
        return None

    def is_deleted(self):
        return type(self._buf) is _DeletedBuffer

    shape = property(lambda self: self._buf.shape)
    # an extended dtype (key<fry>) is the aval's; the buffer holds its values as records
    dtype = property(lambda self: self.aval.dtype if self._buf.dtype.kind == "V"
                     else self._buf.dtype)
    ndim = property(lambda self: self._buf.ndim)
    size = property(lambda self: self._buf.size)
    nbytes = property(lambda self: self._buf.nbytes)
    itemsize = property(lambda self: self._buf.itemsize)
    weak_type = property(lambda self: self.aval.weak_type)

    def __array__(self, dtype=None, copy=None):
        if isinstance(self.aval.dtype, dtypes.ExtendedDType):
            raise TypeError(f"remat array with {self.aval.dtype.name} dtype cannot be converted "
                            f"to a NumPy array. Use remat.random.key_data(arr) if you wish to "
                            f"extract the underlying integer array.")
        if copy:
            return np.array(self._buf, dtype=dtype)
        return self._buf if dtype is None else self._buf.astype(dtype, copy=False)

    def __len__(self):
        if not self._buf.shape:
            raise TypeError("len() of unsized object")
        return self._buf.shape[0]

    def __iter__(self):
        if not self._buf.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self._buf.shape[0]))

    def __bool__(self):
        return bool(self._buf)

    def __int__(self):
        return int(self._buf)

    def __float__(self):
        return float(self._buf)

    def __complex__(self):
        return complex(self._buf)

    def __index__(self):
        if not dtypes.issubdtype(self._buf.dtype, np.integer):
            raise TypeError(f"only integer arrays can be used as an index, got {self.dtype}")
        return int(self._buf)

    def __hash__(self):
        raise TypeError("unhashable type: 'Array'")

    def __format__(self, spec):
        return format(self._buf.item(), spec) if not self._buf.shape else format(str(self), spec)

    def item(self, *args):
        return self._buf.item(*args)

    def tolist(self):
        return self._buf.tolist()

    def block_until_ready(self):
        return self

    def copy_to_host_async(self):
        """Arrays already live in host memory: nothing to copy."""

    # --- placement: one CPU device (see remat.devices) ---------------------------------------

    device = property(lambda self: devices.CPU, doc="The device holding the data: the CPU.")
    sharding = property(lambda self: devices.SHARDING,
                        doc="All of the data on the one device.")
    is_fully_replicated = property(lambda self: True)
    is_fully_addressable = property(lambda self: True)
    # remat never pins an array to a device: like a JAX array made without device_put
    committed = property(lambda self: False)

    def devices(self):
        return {devices.CPU}

    @property
    def addressable_shards(self):
        return [devices.Shard(devices.CPU, (slice(None),) * self.ndim, 0, self)]

    global_shards = addressable_shards

    def addressable_data(self, index):
        if index != 0:
            raise IndexError(f"addressable_data index {index} out of range: one shard")
        return self

    def on_device_size_in_bytes(self):
        return self._buf.nbytes

    def unsafe_buffer_pointer(self):
        """The address of the array's data in host memory."""
        return self._buf.ctypes.data

    def __repr__(self):
        if isinstance(self.aval.dtype, dtypes.ExtendedDType):  # JAX's form: shape and data
            data = self._buf[self._buf.dtype.names[0]]
            return f"Array({self.shape}, dtype={self.dtype.name}) overlaying:\n{data}"
        weak = ", weak_type=True" if self.aval.weak_type else ""
        body = np.array2string(self._buf, separator=", ", prefix="Array(")
        return f"Array({body}, dtype={self.dtype.name}{weak})"

    def __str__(self):
        if isinstance(self.aval.dtype, dtypes.ExtendedDType):
            return repr(self)
        return str(self._buf)

    def __reduce__(self):
        if isinstance(self.aval.dtype, dtypes.ExtendedDType):  # keys: their dtype, not records
            return (_rebuild, (np.array(self._buf), False, self.aval.dtype))
        return (_rebuild, (np.array(self._buf), self.aval.weak_type))


class _DeletedBuffer:
    """Stands in for the buffer of a deleted (donated) Array: every use is an error."""

    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval

    def __getattr__(self, name):
        raise RuntimeError(f"Array has been deleted with shape={self.aval.str_short()}: it "
                           f"was donated to a jitted function (donate_argnums) or deleted.")

    def __array__(self, *args, **kwargs):
        self.__getattr__("__array__")


def _rebuild(buf, weak_type, dtype=None):
    return Array._new(buf, core.ShapedArray(buf.shape, buf.dtype if dtype is None else dtype,
                                            weak_type))


def from_numpy(x, dtype=None, weak_type=False):
    """A new Array holding a copy of ``x`` converted to its canonical remat dtype."""
    dtype = dtypes.canonicalize_dtype(dtype if dtype is not None else np.asarray(x).dtype)
    buf = np.array(x, dtype=dtype)
    return Array._new(buf, core.ShapedArray(buf.shape, dtype, weak_type))


core.register_array_type(Array)


def asarray(x):
    """``x`` as an Array, as ``remat.numpy.asarray`` makes a leaf one: Arrays and tracers as
    they are, a Python scalar weakly typed, anything else through NumPy."""
    if isinstance(x, (Array, core.Tracer)):
        return x
    if dtypes.is_python_scalar(x) and type(x) is not bool:
        return from_numpy(x, dtypes.python_scalar_dtype(x), weak_type=True)
    return from_numpy(np.asarray(x))


def live_arrays(platform=None):
    """The Arrays alive now (not deleted), as ``jax.live_arrays``."""
    if platform not in (None, "cpu"):
        raise RuntimeError(f"Unknown backend: '{platform}' requested, but no platforms that are "
                           f"instances of {platform} are present. Platforms present are: cpu")
    return [x for x in gc.get_objects() if type(x) is Array and not x.is_deleted()]
