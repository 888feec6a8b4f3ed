"""``remat.interpreters.mlir``: JAX's registration points for XLA lowerings, for libraries that
define primitives (equinox, lineax register a lowering for each).

remat compiles no MLIR/XLA: a primitive runs by its ``impl`` (eagerly and in ``jit`` plans).
So a lowering registered here is recorded (``lowerings``) and never used, and ``lower_fun``
returns a rule object that remembers the function it lowers.  A library primitive whose
``impl`` is defined runs the same with or without its lowering.
"""

__all__ = ["LoweringRule", "lower_fun", "lowerings", "register_constant_handler",
           "register_lowering"]

lowerings = {}  # primitive -> {platform or None: rule}, as registered
constant_handlers = {}  # type -> handler, as registered


class LoweringRule:
    """What ``lower_fun(fun)`` returns: the lowering of a primitive as ``fun`` (traced by
    XLA in JAX; in remat the primitive's ``impl`` runs instead)."""

    __slots__ = ("fun", "multiple_results")

    def __init__(self, fun, multiple_results):
        self.fun, self.multiple_results = fun, multiple_results

    def __call__(self, ctx, *args, **params):
        return self.fun(*args, **params)

    def __repr__(self):
        return f"LoweringRule({getattr(self.fun, '__name__', self.fun)!r})"


def register_lowering(prim, rule, platform=None, inline=True, cacheable=True):
    """Record ``rule`` as ``prim``'s lowering (for ``platform``, or all)."""
    if not callable(rule):
        raise TypeError(f"register_lowering expects a callable rule, got {rule!r}")
    lowerings.setdefault(prim, {})[platform] = rule


def lower_fun(fun, multiple_results=True):
    """A lowering rule that lowers a primitive as the function ``fun`` of its operands."""
    if not callable(fun):
        raise TypeError(f"lower_fun expects a callable, got {fun!r}")
    return LoweringRule(fun, multiple_results)


def register_constant_handler(type_, handler_fun):
    """Record how constants of ``type_`` lower (remat stages constants as arrays)."""
    constant_handlers[type_] = handler_fun
