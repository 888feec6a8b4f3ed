"""Third-party modules imported at their first use. numba and SciPy's special functions,
solvers, LAPACK wrappers and FFTs together take longer to import than remat itself, and most
programs never reach them: ``import remat`` loads none of them."""

import importlib
import importlib.util


class LazyModule:
    """Stands for the module ``name``: the first attribute read imports it (through the import
    system, whose per-module lock makes a first use from two threads import it once)."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self):
        return f"<module {self._name!r}, imported at its first use>"


def lazy_function(module, name):
    """``module.name`` as a function that imports ``module`` at its first call (for tables
    built at import time from a lazily imported module's functions)."""

    def call(*args, **kwargs):
        return getattr(module, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def installed(name):
    """Whether the top-level package ``name`` can be imported (without importing it)."""
    return importlib.util.find_spec(name) is not None


def lazy_submodules(package, names):
    """``(__getattr__, __dir__, __all__)`` for a package whose submodules ``names`` are
    imported at their first use, as ``jax.scipy``'s are: ``remat.scipy.special`` works after
    ``import remat`` without paying for every submodule."""
    names = tuple(names)

    def __getattr__(name):
        if name in names:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(names)

    return __getattr__, __dir__, list(names)
