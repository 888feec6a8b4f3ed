"""Global flags, read from ``JAX_*`` environment variables and settable with ``config.update``."""

import contextlib
import functools
import itertools
import operator
import os
import sys

_TRUE = ("1", "true", "yes", "on")


# flags whose values are one of a few names (None: unset), as JAX's enum flags
_CHOICES = {
    "jax_numpy_dtype_promotion": ("standard", "strict"),
    "jax_numpy_rank_promotion": ("allow", "warn", "raise"),
    "jax_default_matmul_precision": (None, "default", "high", "highest", "bfloat16",
                                     "tensorfloat32", "float32", "fastest", "bfloat16_3x",
                                     "ANY_F8_ANY_F8_F32", "F16_F16_F32", "F32_F32_F32",
                                     "F64_F64_F64"),
    "jax_default_prng_impl": ("threefry2x32", "rbg", "unsafe_rbg"),
    "jax_legacy_prng_key": ("allow", "warn", "error"),
    "jax_array_garbage_collection_guard": (None, "allow", "log", "fatal"),
    **{f"jax_transfer_guard{kind}": (None, "allow", "log", "disallow", "log_explicit",
                                     "disallow_explicit")
       for kind in ("", "_host_to_device", "_device_to_device", "_device_to_host")},
}
# flags that hold any object (None: unset); user contexts join them
_OBJECTS = {"jax_default_device"}


def _parse_choice(name, value):
    if isinstance(value, str) and value.strip().lower() in ("", "none"):
        value = None
    if value not in _CHOICES[name]:
        raise ValueError(f"{value!r} is not a valid value for {name}; expected one of "
                         f"{', '.join(repr(c) for c in _CHOICES[name])}")
    return value


def _parse(name, value, default):
    """``value`` as the type of the flag's default (bool flags take JAX's spellings)."""
    if name in _CHOICES:
        return _parse_choice(name, value)
    if name in _OBJECTS or (value is None and default is None):
        return value
    if isinstance(default, bool):
        return value.strip().lower() in _TRUE if isinstance(value, str) else bool(value)
    try:
        value = int(value) if isinstance(value, str) else operator.index(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive integer, got {value!r}") from None
    if value < 1 and not (value == -1 and name.lower() == "jax_num_cpu_devices"):  # (unset)
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _env_flag(name, default):
    value = os.environ.get(name) if name else None  # user contexts have no variable
    return default if value is None else _parse(name, value, default)


class Config:
    """Flags as attributes (``config.enable_x64``) and by JAX name (``config.jax_enable_x64``)."""

    _defaults = {
        "enable_x64": ("JAX_ENABLE_X64", False),
        "disable_jit": ("JAX_DISABLE_JIT", False),
        "log_checkpoint_residuals": ("JAX_LOG_CHECKPOINT_RESIDUALS", False),
        "threefry_partitionable": ("JAX_THREEFRY_PARTITIONABLE", True),
        # JAX 0.11's new checkpoint (data policies, custom_remat): remat's only implementation,
        # so the flag is accepted either way and changes nothing
        "remat3": ("JAX_REMAT3", True),
        # loops of tiny arrays compiled with numba once hot (remat.exec.native); no effect
        # without numba installed
        "remat_native_loops": ("REMAT_NATIVE_LOOPS", True),
        # local CPU devices (pmap, shard_map); unset: XLA_FLAGS'
        # --xla_force_host_platform_device_count, else 1 (remat.devices)
        "remat_num_cpu_devices": ("REMAT_NUM_CPU_DEVICES", None),
        # JAX's spelling of the same (-1: unset); remat reads it at every call, so unlike
        # JAX's it may also be set after the first computation
        "num_cpu_devices": ("JAX_NUM_CPU_DEVICES", -1),
        # the most traces one jitted (or checkpointed) function keeps, least recently used
        # evicted first: JAX's bound on its trace caches
        "trace_cache_size": ("JAX_TRACE_CACHE_SIZE", 4096),
        # honoured by jit: checks of its outputs, logs of its traces and cache misses,
        # refusals to trace or run (see remat.transforms.jit)
        "debug_nans": ("JAX_DEBUG_NANS", False),
        "debug_infs": ("JAX_DEBUG_INFS", False),
        "log_compiles": ("JAX_LOG_COMPILES", False),
        "explain_cache_misses": ("JAX_EXPLAIN_CACHE_MISSES", False),
        "no_tracing": ("JAX_NO_TRACING", False),
        "no_execution": ("JAX_NO_EXECUTION", False),
        # escaped tracers are always detected (UnexpectedTracerError): these checks are on
        "check_tracer_leaks": ("JAX_CHECK_TRACER_LEAKS", False),
        "enable_checks": ("JAX_ENABLE_CHECKS", False),
        # one CPU device: no transfers to guard, float32 matmuls always at full precision
        "transfer_guard": ("JAX_TRANSFER_GUARD", None),
        "transfer_guard_host_to_device": ("JAX_TRANSFER_GUARD_HOST_TO_DEVICE", None),
        "transfer_guard_device_to_device": ("JAX_TRANSFER_GUARD_DEVICE_TO_DEVICE", None),
        "transfer_guard_device_to_host": ("JAX_TRANSFER_GUARD_DEVICE_TO_HOST", None),
        "default_matmul_precision": ("JAX_DEFAULT_MATMUL_PRECISION", None),
        "default_device": ("JAX_DEFAULT_DEVICE", None),
        # JAX's settings of features remat has one way of doing: accepted and reported
        "numpy_dtype_promotion": ("JAX_NUMPY_DTYPE_PROMOTION", "standard"),
        "numpy_rank_promotion": ("JAX_NUMPY_RANK_PROMOTION", "allow"),
        "default_prng_impl": ("JAX_DEFAULT_PRNG_IMPL", "threefry2x32"),
        "legacy_prng_key": ("JAX_LEGACY_PRNG_KEY", "allow"),
        "enable_custom_prng": ("JAX_ENABLE_CUSTOM_PRNG", False),
        "debug_key_reuse": ("JAX_DEBUG_KEY_REUSE", False),
        "softmax_custom_jvp": ("JAX_SOFTMAX_CUSTOM_JVP", False),
        "allow_f16_reductions": ("JAX_ALLOW_F16_REDUCTIONS", False),
        "array_garbage_collection_guard": ("JAX_ARRAY_GARBAGE_COLLECTION_GUARD", None),
        "thread_guard": ("JAX_THREAD_GUARD", False),
        "jax2tf_associative_scan_reductions": ("JAX2TF_ASSOCIATIVE_SCAN_REDUCTIONS", False),
    }
    # flags that change what tracing produces: part of every trace cache's key
    _trace_flags = ("enable_x64", "threefry_partitionable")

    def __init__(self):
        for flag, (env, default) in self._defaults.items():
            object.__setattr__(self, flag, _env_flag(env, default))

    def _flag_name(self, name):
        flag = name[4:] if name.startswith("jax_") else name
        if flag not in self._defaults:
            known = ", ".join("jax_" + f for f in self._defaults)
            raise AttributeError(f"Unrecognized config option: {name!r} (known: {known})")
        return flag

    def update(self, name, value):
        flag = self._flag_name(name)
        object.__setattr__(self, flag, _parse("jax_" + flag, value, self._defaults[flag][1]))

    def read(self, name):
        return getattr(self, self._flag_name(name))

    def __getattr__(self, name):  # only reached for names not set in __init__
        return object.__getattribute__(self, self._flag_name(name))

    def __setattr__(self, name, value):
        self.update(name, value)

    def parse_flags_with_absl(self):
        """JAX's reading of its flags from the command line: the arguments before a ``--``
        that start with ``--jax``, as ``--jax_name=value`` (or ``--jax_name``, a boolean set);
        those naming no flag are left alone (absl's ``known_only``). Once per process, as
        in JAX (flax's test modules call it at import)."""
        global _parsed_command_line
        if _parsed_command_line:
            return
        for arg in itertools.takewhile(lambda a: a != "--", sys.argv[1:]):
            name, has_value, value = arg[2:].partition("=")
            if not arg.startswith("--jax") or name[4:] not in self._defaults:
                continue
            if not has_value:
                if not isinstance(self._defaults[name[4:]][1], bool):
                    raise ValueError(f"Flag --{name} must have a value other than None.")
                value = True
            self.update(name, value)
        _parsed_command_line = True

    def trace_context(self):
        """The values of the flags that change what a trace produces (cache keys use it)."""
        return tuple(getattr(self, f) for f in self._trace_flags)

    @contextlib.contextmanager
    def override(self, name, value):
        """Temporarily set a flag (``with config.override("jax_enable_x64", True): ...``)."""
        flag = self._flag_name(name)
        old = getattr(self, flag)
        self.update(flag, value)
        try:
            yield
        finally:
            self.update(flag, old)


config = Config()
_parsed_command_line = False  # parse_flags_with_absl has run


class State:
    """One flag as JAX's config states (``remat.enable_x64``): ``.value`` reads it and
    calling it gives a context manager that sets it inside (``with remat.enable_x64(True):``;
    boolean flags default to True, ``with remat.debug_nans():``)."""

    def __init__(self, name):
        self.name = "jax_" + config._flag_name(name)

    @property
    def value(self):
        return config.read(self.name)

    def __call__(self, new_val=True):
        return config.override(self.name, new_val)

    def __repr__(self):
        return f"State({self.name}={self.value!r})"


def make_user_context(default_value=None):
    """A context whose value is part of every jit cache key: changing it (``with
    ctx(1): f(x)``) makes jitted functions trace again, as JAX's user contexts."""
    flag = f"user_context_{len(_user_contexts)}"
    Config._defaults[flag] = (None, default_value)
    _OBJECTS.add("jax_" + flag)
    object.__setattr__(config, flag, default_value)
    Config._trace_flags = Config._trace_flags + (flag,)
    _user_contexts.append(flag)
    return State(flag)


_user_contexts = []


# JAX's top-level config contexts (``remat.enable_x64``, ``with remat.debug_nans(True):``)
enable_x64 = State("enable_x64")
debug_nans = State("debug_nans")
debug_infs = State("debug_infs")
log_compiles = State("log_compiles")
explain_cache_misses = State("explain_cache_misses")
no_tracing = State("no_tracing")
no_execution = State("no_execution")
check_tracer_leaks = State("check_tracer_leaks")
checking_leaks = functools.partial(check_tracer_leaks, True)
enable_checks = State("enable_checks")
numpy_dtype_promotion = State("numpy_dtype_promotion")
numpy_rank_promotion = State("numpy_rank_promotion")
default_matmul_precision = State("default_matmul_precision")
default_prng_impl = State("default_prng_impl")
legacy_prng_key = State("legacy_prng_key")
enable_custom_prng = State("enable_custom_prng")
debug_key_reuse = State("debug_key_reuse")
threefry_partitionable = State("threefry_partitionable")
softmax_custom_jvp = State("softmax_custom_jvp")
allow_f16_reductions = State("allow_f16_reductions")
array_garbage_collection_guard = State("array_garbage_collection_guard")
thread_guard = State("thread_guard")
jax2tf_associative_scan_reductions = State("jax2tf_associative_scan_reductions")
default_device = State("default_device")
transfer_guard_host_to_device = State("transfer_guard_host_to_device")
transfer_guard_device_to_device = State("transfer_guard_device_to_device")
transfer_guard_device_to_host = State("transfer_guard_device_to_host")


@contextlib.contextmanager
def transfer_guard(new_val):
    """Set the guard level of every kind of transfer inside (with one CPU device, nothing is
    ever transferred, so no level ever refuses anything)."""
    with contextlib.ExitStack() as stack:
        for flag in ("transfer_guard", "transfer_guard_host_to_device",
                     "transfer_guard_device_to_device", "transfer_guard_device_to_host"):
            stack.enter_context(config.override(flag, new_val))
        yield
