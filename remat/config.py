"""Global flags, read from ``JAX_*`` environment variables and settable with ``config.update``."""

import contextlib
import os

_TRUE = ("1", "true", "yes", "on")


def _env_flag(name, default):
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in _TRUE


class Config:
    """Flags as attributes (``config.enable_x64``) and by JAX name (``config.jax_enable_x64``)."""

    _defaults = {
        "enable_x64": ("JAX_ENABLE_X64", False),
        "disable_jit": ("JAX_DISABLE_JIT", False),
        "log_checkpoint_residuals": ("JAX_LOG_CHECKPOINT_RESIDUALS", False),
        "threefry_partitionable": ("JAX_THREEFRY_PARTITIONABLE", True),
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
        object.__setattr__(self, self._flag_name(name), bool(value))

    def read(self, name):
        return getattr(self, self._flag_name(name))

    def __getattr__(self, name):  # only reached for names not set in __init__
        return object.__getattribute__(self, self._flag_name(name))

    def __setattr__(self, name, value):
        self.update(name, value)

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
