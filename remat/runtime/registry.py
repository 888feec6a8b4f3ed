"""What primitives tell the executor (``remat.exec``), filled in beside the primitives and
read by the executor's planner and passes: the primitives stay below the executor.

- ``elementwise_impls[prim] = (impl, ufunc or None)``: an elementwise primitive, which the
  planner may fuse, split across workers and run in place;
- ``cse_barriers``: primitives common-subexpression elimination never merges;
- ``barrier_primitive``: the optimization barrier inlined calls put before their inputs;
- ``inline_rules[prim](eqn) -> (closed_jaxpr, barrier flags or None)``: calls the executor
  flattens into their caller's plan;
- ``transposed_forms[prim](eqn, permutation) -> (invars, params) or None``: an equation of
  ``prim`` computing the transpose of ``eqn``'s result directly (a matrix product's, by
  swapping its operands), so a transpose that is its one use need not read it across its
  rows; ``transpose_primitive`` is that transpose (registered by ``remat.lax.shape``);
- ``broadcast_primitive``: ``broadcast_in_dim`` (registered by ``remat.lax.shape``), whose
  broadcasts of scalar constants the executor folds into the uses that take a scalar
  operand beside full-shape ones, the ``scalar_broadcasting`` primitives;
- ``in_order_forms[prim](eqn) -> params or None``: the params of ``eqn`` on its second operand
  transposed, when ``eqn`` reads that operand across its rows (``x @ w.T``): a loop whose
  body does so with a loop constant reads a contiguous transposed copy, made once per loop;
- ``host_results``: primitives whose results live in host memory (an offloaded residual): a
  loop stacks them into host buffers;
- ``source_forms[prim](eqn, operand sources) -> source or None``: the NumPy expression a
  generated loop kernel may write for an equation instead of calling its impl, giving the
  impl's result bit for bit (the impl's own NumPy call, without its per-call checks);
- ``update_impls[prim] = (impl, into)``: a primitive whose result is its first operand with a
  part replaced (``dynamic_update_slice``); ``into(operand, *rest)`` writes that part into the
  operand itself, which the executor does where the operand dies there and nothing else holds
  its buffer;
- ``selected_update_forms[prim](eqn, kept_dims, update_case) -> fn or None``: for an update
  ``eqn`` of ``prim`` (one of ``update_impls``), ``select_n`` between its operand and its result
  computed as an update: ``fn(pred, *eqn.invars)`` gives ``select_n(broadcast_in_dim(pred,
  shape, kept_dims), *cases)``, the update being case ``update_case``, by selecting within the
  updated part only, so the update stays its operand's last use and may write into it (a
  vmapped while loop's batched predicate selects each carry after its step);
  ``select_primitive`` is ``select_n`` (registered by ``remat.lax.elementwise``);
- ``donating_impls[prim] = (impl, fn)``: ``fn(offered, taken, *args, **params) -> outs`` runs
  ``prim`` as its impl ``impl`` does (a loop), taking over operands its caller offers
  (``offered``: positions of operands that die there, whose buffers the caller owns alone)
  to write into them; it appends the positions it takes to the list ``taken`` before it
  runs, and untracks each of them once, before it returns or raises.
"""

elementwise_impls = {}
cse_barriers = set()
barrier_primitive = None  # optimization_barrier_p, registered by remat.lax.identity
inline_rules = {}
transposed_forms = {}
transpose_primitive = None
broadcast_primitive = None
scalar_broadcasting = set()
in_order_forms = {}
source_forms = {}
host_results = set()
update_impls = {}
selected_update_forms = {}
select_primitive = None  # select_n_p, registered by remat.lax.elementwise
donating_impls = {}
