"""Run libraries written for JAX (optax, chex, flax, equinox, diffrax) on remat.

Such libraries say ``import jax``; ``install()`` puts an import hook first on
``sys.meta_path`` so that ``jax`` resolves to a module that forwards every name to
``remat``, and every ``jax.<sub>`` to ``remat.<sub>`` itself
(``sys.modules["jax.numpy"] is remat.numpy``)::

    import remat.jax_alias
    remat.jax_alias.install()   # before the library is imported
    import optax                # optax's ``import jax`` now gets remat

The top-level ``jax`` module (and ``jax.version``) report ``JAX_API_VERSION``, the JAX release
whose public API remat follows, not remat's own version: libraries read ``jax.__version__``
to choose between JAX API spellings, and remat speaks that release's.  Attributes set on
``jax`` (``mock.patch("jax.jit", ...)``) stay on the alias and do not change ``remat``.

Install it before anything imports the real JAX: ``install`` refuses when a real ``jax``
module is already imported, rather than mix the two.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import types

import remat

__all__ = ["JAX_API_VERSION", "install", "installed", "uninstall"]

JAX_API_VERSION = "0.10.2"
_VERSION_INFO = tuple(int(part) for part in JAX_API_VERSION.split("."))


class _JaxModule(types.ModuleType):
    """``jax``: every name is remat's, except the version, which is the JAX API's."""

    def __getattr__(self, name):
        try:
            return getattr(remat, name)
        except AttributeError:
            raise AttributeError(f"module 'jax' (remat) has no attribute {name!r}") from None

    def __dir__(self):
        return sorted(set(dir(remat)) | set(self.__dict__))


def _version_module():
    module = types.ModuleType("jax.version", "The JAX API version remat follows.")
    module.__version__ = module._version = JAX_API_VERSION
    module.__version_info__ = _VERSION_INFO
    return module


def _jax_module():
    # ``import jax`` imports its private modules that libraries reach by attribute
    # (``jax._src.xla_bridge._backends``): so does the alias, for remat's stand-ins
    importlib.import_module("remat._src")
    module = _JaxModule("jax", remat.__doc__)
    module.__version__ = JAX_API_VERSION
    module.__version_info__ = _VERSION_INFO
    module.__path__ = []  # a package: ``jax.<sub>`` is found by the hook below
    module.version = _version_module()
    return module


def _target(fullname):
    """``remat``'s name for the module ``fullname`` (``jax.numpy`` -> ``remat.numpy``), or
    None when ``fullname`` is not in the ``jax`` namespace."""
    if fullname == "jax" or fullname.startswith("jax."):
        return "remat" + fullname[len("jax"):]
    return None


class _AliasLoader(importlib.abc.Loader):
    """Loads ``jax`` as the forwarding module, ``jax.<sub>`` as ``remat.<sub>`` itself."""

    def __init__(self, fullname, target):
        self.fullname, self.target = fullname, target

    def create_module(self, spec):
        if self.fullname == "jax":
            return _jax_module()
        if self.fullname == "jax.version":
            return sys.modules["jax"].version
        return importlib.import_module(self.target)

    def exec_module(self, module):
        # the import system stamped the alias spec on remat's module: give it back its own,
        # so that remat's relative imports and ``importlib.reload`` keep working
        original = _original_specs.get(self.target)
        if original is not None and self.fullname not in ("jax", "jax.version"):
            module.__spec__ = original


_original_specs = {}


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``jax`` and ``jax.<sub>`` as ``remat`` and ``remat.<sub>``."""

    def find_spec(self, fullname, path=None, target=None):
        name = _target(fullname)
        if name is None:
            return None
        if fullname in ("jax", "jax.version"):
            return importlib.util.spec_from_loader(fullname, _AliasLoader(fullname, name),
                                                   is_package=fullname == "jax")
        if importlib.util.find_spec(name) is None:
            return None
        module = importlib.import_module(name)
        _original_specs.setdefault(name, module.__spec__)
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(fullname, name),
            is_package=getattr(module, "__path__", None) is not None)


_FINDER = _AliasFinder()


def installed():
    """Whether ``jax`` currently resolves to remat."""
    return _FINDER in sys.meta_path


def _is_alias(module):
    return isinstance(module, _JaxModule) or getattr(module, "__name__", "").startswith(
        ("remat", "jax.version"))


def install():
    """Make ``import jax`` and ``import jax.<sub>`` give remat."""
    if installed():
        return
    real = [name for name, module in sys.modules.items()
            if _target(name) is not None and module is not None and not _is_alias(module)]
    if real:
        raise RuntimeError(f"jax is already imported ({real[0]!r}); install the remat alias "
                           f"before anything imports jax")
    sys.meta_path.insert(0, _FINDER)


def uninstall():
    """Undo ``install``: forget the ``jax`` aliases, so a later ``import jax`` finds JAX."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in [n for n in sys.modules if _target(n) is not None]:
        if _is_alias(sys.modules[name]):
            del sys.modules[name]
