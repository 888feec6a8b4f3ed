"""Mutable array references' primitives (``new_ref``, ``get``, ``swap``, ``addupdate``,
``freeze``, ...) with all their rules, their discharge into pure array operations included
(``primitives``). They read and write a Ref's contents with ``remat.numpy``'s indexing, so
they sit above it; the types they act on (``remat.ref_types``) and the discharge interpreter
(``remat.interpreters.discharge``) sit below every primitive. ``remat.ref`` is the user's face."""
