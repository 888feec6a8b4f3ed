"""The user's transformations: ``grad``, ``vjp``, ``jvp``, ``linearize``, ``vmap`` ... (``api``),
``jit`` (``jit``), ``pmap`` and ``shard_map``, ``linear_transpose`` (``transposition``) and the
host callbacks (``callback``). They sit above every primitive."""
