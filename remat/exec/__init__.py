"""The jit executor: jaxpr passes (DCE, barrier-aware CSE) and prepared plans that run on
NumPy buffers, freeing each at its last use."""

from remat.exec.plan import Plan, evaluate, plan_for
from remat.exec.passes import cse_jaxpr, optimize_jaxpr
