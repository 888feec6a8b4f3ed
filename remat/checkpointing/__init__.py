"""Rematerialization: ``checkpoint`` and its primitive (``checkpoint``), the policies that say
what it saves (``policies``), the budget policy that chooses under a memory budget
(``budget``), ``auto_remat`` over a whole step (``auto_remat``) and a function's own rule
(``custom_remat``). ``remat.ad_checkpoint`` and ``remat.checkpoint_policies`` are its public
faces."""
