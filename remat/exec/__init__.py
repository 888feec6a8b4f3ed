"""The jit executor: jaxpr passes (inlining, constant folding, barrier-aware CSE, DCE) and
prepared plans that run on NumPy buffers, freeing each at its last use, fusing runs of
elementwise steps into cache-sized tiles (``fusion``) and splitting large steps across the
executor's worker threads (``parallel``)."""

from remat.runtime.parallel import session
from remat.exec.plan import Plan, evaluate, generated, interpreted, plan_for, prepared
from remat.exec.passes import cse_jaxpr, optimize_jaxpr
