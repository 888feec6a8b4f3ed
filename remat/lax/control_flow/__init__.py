"""Control flow primitives: ``cond`` (and ``switch``), ``while_loop``, ``scan`` — each carrying
its body jaxpr(s) as params, with impl, abstract eval, JVP, partial-eval, transpose, batching
and DCE rules — plus ``fori_loop`` and ``map`` written on them. The ``checkpoints=`` forms
of ``scan`` and ``while_loop`` (``checkpointed``) sit above the slicing ops they store states
with; ``remat.lax`` imports them itself.

Sub-jaxprs are ClosedJaxprs whose consts are concrete; values the user's functions close over
are hoisted into leading operands when the function is traced, so outer tracers flow through
the rules like any operand.
"""

from remat.lax.control_flow.conditionals import cond, cond_p, switch
from remat.lax.control_flow.loops import fori_loop, map, scan, scan_p, while_loop, while_p

__all__ = [
    "cond",
    "cond_p",
    "fori_loop",
    "map",
    "scan",
    "scan_p",
    "switch",
    "while_loop",
    "while_p",
]
