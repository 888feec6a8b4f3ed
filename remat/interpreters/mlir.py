"""``remat.interpreters.mlir``: JAX's registration points for XLA lowerings, for libraries that
define primitives (equinox, lineax register a lowering for each).

remat compiles no MLIR/XLA. A lowering registered here is recorded (``lowerings``); one made by
``lower_fun(fun)`` tells remat what JAX's ``jit`` runs for the primitive: ``fun`` traced on the
operands' types. So a ``jit`` plan (and a loop body in it) inlines that trace in place of the
equation, as XLA does, where the equation would otherwise call the primitive's ``impl`` of
Arrays on every run: equinox's primitives then cost what their few operations cost, and the
native loop tier can compile the loops holding them. Eagerly, the primitive runs its
``impl``, as in JAX.
"""

from remat import tree_util
from remat.interpreters import partial_eval as pe
from remat.runtime import registry

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
    if isinstance(rule, LoweringRule) and platform in (None, "cpu"):
        registry.inline_rules[prim] = _inline_lowered


def _inline_lowered(eqn):
    """``eqn``'s primitive as the function its lowering traces, or None (its ``impl`` runs)
    where that trace gives other types or holds constants."""
    rules = lowerings[eqn.primitive]
    rule = rules.get("cpu", rules.get(None))
    in_avals = [v.aval for v in eqn.invars]

    def flat_fun(*args):
        outs = rule.fun(*args, **eqn.params)
        return tree_util.tree_leaves(outs) if eqn.primitive.multiple_results else [outs]

    closed = pe.trace_to_jaxpr(flat_fun, in_avals)
    if closed.consts or [v.aval for v in closed.jaxpr.outvars] != [v.aval for v in eqn.outvars]:
        return None
    return closed, None


def lower_fun(fun, multiple_results=True):
    """A lowering rule that lowers a primitive as the function ``fun`` of its operands."""
    if not callable(fun):
        raise TypeError(f"lower_fun expects a callable, got {fun!r}")
    return LoweringRule(fun, multiple_results)


def register_constant_handler(type_, handler_fun):
    """Record how constants of ``type_`` lower (remat stages constants as arrays)."""
    constant_handlers[type_] = handler_fun
