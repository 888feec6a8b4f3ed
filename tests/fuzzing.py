"""The differential fuzzer: random programs, run three ways.

A program is plain data (``Program``: nested tuples), so a failure's ``repr`` is a regression
case. It is a DAG of ops over values of small shapes in the program's dtype (float64 or
float32: ``Program.dtype``; the tolerances scale with it, see ``TOLERANCES``): elementwise,
matmul, reductions, reshapes, slicing and indexing, ``where``, identities such as
``checkpoint_name`` and ``stop_gradient``, and zero-size slices (the ops: ``fuzz_ops.py``). An
operand, a loop's initial carry or a call's argument may be a Python float instead of a
reference (a weak-typed scalar: ``x * 2.0``, ``scan(f, 0.0, xs)``, ``jit(f)(x, 0.5)``).
Statements open a scope: ``checkpoint`` (random policy, names, ``prevent_cse``; a
``memory_budget`` often around a loop over zero-size values) or ``jit`` around a sub-block whose
inputs are arguments or closed-over values, a ``scan`` (maybe over zero iterations, its body
maybe checkpointed), a ``fori_loop`` (maybe of zero trips), a ``cond``, nested up to two deep;
and a scan whose body checkpoints a ``jit`` of many repeated, unused and forwarded arguments
(three deep). Around the whole program go up to two wrappers: ``jit vmap grad value_and_grad
vjp jvp linearize checkpoint scan cond fori``.

``build(program, ns, checkpoints, jit)`` interprets a program on a namespace of modules: remat's
or JAX's (``Namespace.remat()``, ``Namespace.jax()``), so the same source runs on both. The
checks (``check_program``), each comparing dtypes too:
1. remat with its checkpoints vs remat with every checkpoint removed;
2. remat vs JAX, where JAX is installed (values, gradients, tangents);
3. remat under ``jit`` vs remat with every ``jit`` removed;
4. the executor's plans as generated code vs step by step: bitwise equal.

Programs are drawn through a ``Chooser``: ``HypothesisChooser`` in the test suite (hypothesis
shrinks a failure to a small program), ``RandomChooser`` in ``fuzz_campaign.py`` (a seed per
case, fast, continuing past failures).
"""

import contextlib
import dataclasses
import random
import types

import numpy as np
from fuzz_ops import (
    AXIS,
    BATCH,
    COLLECTIVE_OP_NAMES,
    DISTINCT_OPERANDS,
    INITS,
    LITERAL_OPS,
    LITERALS,
    NAMES,
    OP_NAMES,
    OPS,
    PARAMS,
    WHILE_OPS,
    ZERO_SIZE_UNSAFE,
    apply_op,
)

from remat.config import config
from remat.exec import generated, interpreted, native

SHAPES = ((3,), (2, 3), (), (3, 2))
DTYPES = ("float64", "float32")
LENGTH = 2  # iterations of a wrapper scan / fori loop


@dataclasses.dataclass(frozen=True)
class Program:
    arg_shapes: tuple
    body: tuple  # statements, see ``run_block``
    outs: tuple  # refs into the environment
    wrappers: tuple = ()  # outermost first
    seed: int = 0
    dtype: str = "float64"  # of the arguments (and so of most values)


# --- the namespaces a program runs on -------------------------------------------------------


class Namespace(types.SimpleNamespace):
    """``jax jnp lax nn checkpoint_name`` of one system, and whether it is JAX."""

    @classmethod
    def remat(cls):
        import remat
        import remat.nn
        import remat.numpy
        from remat.ad_checkpoint import checkpoint_name

        return cls(jax=remat, jnp=remat.numpy, lax=remat.lax, nn=remat.nn,
                   checkpoint_name=checkpoint_name, is_jax=False)

    @classmethod
    def jax(cls):
        import jax
        import jax.numpy
        from jax.ad_checkpoint import checkpoint_name

        return cls(jax=jax, jnp=jax.numpy, lax=jax.lax, nn=jax.nn,
                   checkpoint_name=checkpoint_name, is_jax=True)


def make_policy(ns, spec):
    """A checkpoint policy from its spec. JAX's CPU backend has no host memory to offload to,
    so on JAX an offloading policy becomes the saving policy with the same values kept
    (offloading moves a residual, it never changes one)."""
    cp = ns.jax.checkpoint_policies
    kind = spec[0]
    if kind == "default":
        return None
    if kind == "both":
        return cp.save_from_both_policies(*(make_policy(ns, s) or cp.nothing_saveable
                                            for s in spec[1:]))
    if kind == "except":
        return cp.save_anything_except_these_names(*spec[1])
    if kind == "any_but":
        return cp.save_any_names_but_these(*spec[1])
    if kind == "only":
        return cp.save_only_these_names(*spec[1])
    if kind == "offload_names":
        if ns.is_jax:
            return cp.save_only_these_names(*spec[1], *spec[2])
        return cp.save_and_offload_only_these_names(names_which_can_be_saved=spec[1],
                                                    names_which_can_be_offloaded=spec[2])
    if kind == "offload_dot":
        if ns.is_jax:
            return cp.dots_with_no_batch_dims_saveable
        return cp.offload_dot_with_no_batch_dims()
    if kind == "budget":  # beyond JAX: on JAX, the default (what is saved never changes values)
        return None if ns.is_jax else cp.memory_budget(spec[1])
    return {"everything": cp.everything_saveable, "nothing": cp.nothing_saveable,
            "dots": cp.dots_saveable,
            "dots_no_batch": cp.dots_with_no_batch_dims_saveable}[kind]


# --- interpretation ---------------------------------------------------------------------------


def fit(ns, v, shape, dtype=None):
    """``v`` made to ``shape``: itself, or its sum broadcast (a carry or a branch output must
    keep its shape); and to ``dtype`` where given and different (the branches of a cond must
    agree on theirs: a float32 program may make a float64 value of a weak-typed one)."""
    if v.shape != shape:
        v = ns.jnp.broadcast_to(ns.jnp.sum(v), shape)
    return v if dtype is None or v.dtype == dtype else v.astype(dtype)


def is_literal(ref):
    """A Python float written in place of a reference: a weak-typed scalar."""
    return isinstance(ref, float)


def value_of(env, ref):
    return ref if is_literal(ref) else env[ref]


def shape_of(shapes, ref):
    return () if is_literal(ref) else shapes[ref]


@dataclasses.dataclass(frozen=True)
class Flags:
    checkpoints: bool = True
    jit: bool = True


def run_block(ns, flags, stmts, outs, env):
    """Run statements over ``env`` (a list of values, extended in place); return the outs.

    Statements (a ref is an index into ``env``; where a Python float may stand for one, it is
    that weak-typed scalar):
    - ``("op", name, refs, param)``: a float for one operand of the ``LITERAL_OPS``;
    - ``("call", "checkpoint"|"jit"|"custom_remat", opts, arg_refs, body, outs)``: a function
      over the values at ``arg_refs`` (or floats) that also closes over everything visible;
      ``opts`` is ``(policy_spec, prevent_cse)`` for a checkpoint, the save mode for a
      custom_remat;
    - ``("scan", init_ref or float, xs_ref, policy_spec or None, body, (carry_ref, y_ref))``:
      a scan over the leading axis of ``xs`` (of length 0 when it is zero-size); the body
      sees ``[..., carry, x]`` and its new carry is ``next_carry(carry, value)``; a policy
      spec checkpoints the body;
    - ``("fori", init_ref or float, trips, policy_spec or None, body, carry_ref)``:
      ``fori_loop(0, trips, ...)``, the body seeing ``[..., carry]``, its carry as a scan's;
    - ``("cond", pred_ref, operand_refs, (body, outs), (body, outs))``: branch outputs are
      fitted to the operands' shapes.
    """
    for stmt in stmts:
        kind = stmt[0]
        if kind == "op":
            _, name, refs, param = stmt
            env.append(apply_op(ns, name, [value_of(env, r) for r in refs], param))
        elif kind == "call":  # (JAX's checkpoint returns a float argument it forwards)
            env.extend(map(ns.jnp.asarray, _run_call(ns, flags, stmt, env)))
        elif kind == "scan":
            env.extend(_run_scan(ns, flags, stmt, env))
        elif kind == "fori":
            env.append(_run_fori(ns, flags, stmt, env))
        elif kind == "cond":
            env.extend(_run_cond(ns, flags, stmt, env))
        else:
            raise ValueError(f"unknown statement {stmt!r}")
    return [env[r] for r in outs]


def _run_call(ns, flags, stmt, env):
    _, kind, opts, arg_refs, body, outs = stmt
    outer = tuple(env)

    def inner(*args):  # (a float argument is a weak-typed scalar here under jit or not)
        args = [ns.jnp.asarray(a) for a in args]
        return tuple(run_block(ns, flags, body, outs, list(outer) + args))

    if kind == "checkpoint" and flags.checkpoints:
        inner = ns.jax.checkpoint(inner, policy=make_policy(ns, opts[0]), prevent_cse=opts[1])
    elif kind == "jit" and flags.jit:
        inner = ns.jax.jit(inner)
    elif kind == "custom_remat" and flags.checkpoints and not ns.is_jax:
        # (its rules may not close over traced values: the enclosing block's come in as
        # arguments too)
        def explicit(*values):
            return tuple(run_block(ns, flags, body, outs, list(values)))
        args = [ns.jnp.asarray(value_of(env, r)) for r in arg_refs]
        return custom_remat_of(ns, explicit, opts)(*outer, *args)
    return inner(*[value_of(env, r) for r in arg_refs])


def custom_remat_of(ns, fn, save):
    """``fn`` with custom rematerialization rules that must not change any value: ``f_fwd``
    saves nothing, ``fn``'s outputs, or its outputs only when the enclosing checkpoint's policy
    is name-based data (``save`` is ``"none"``, ``"outs"`` or ``"policy"``); ``f_rem`` reuses
    saved outputs or recomputes them; ``f_bwd`` differentiates ``fn`` at the arguments. (JAX
    0.10 has no ``custom_remat``: there the call is ``fn``, which is what it must equal.)"""
    from remat.checkpoint_policies import SaveAnyNamesButThese, SaveOnlyTheseNames
    from remat.checkpointing.custom_remat import custom_remat

    def fwd(policy, *args):
        out = fn(*args)
        keep = save == "outs" or (save == "policy" and isinstance(
            policy, (SaveOnlyTheseNames, SaveAnyNamesButThese)))
        return out, (out if keep else None)

    def rem(saved, *args):
        return (fn(*args) if saved is None else saved), args

    def bwd(args, cts):
        return ns.jax.vjp(fn, *args)[1](cts)

    return custom_remat(fn, fwd, rem, bwd)


def next_carry(ns, c, value, promoted=False):
    """``(c + tanh(fit(value)))/2``: a loop's new carry, of ``c``'s dtype unless ``promoted``
    (the loop starts from a Python float: JAX promotes that weak-typed carry to the type the
    body makes of it)."""
    return 0.5 * (c + ns.jnp.tanh(fit(ns, value, c.shape, None if promoted else c.dtype)))


def _run_scan(ns, flags, stmt, env):
    _, carry_ref, xs_ref, policy, body, (c_ref, y_ref) = stmt
    outer = tuple(env)

    def step(c, x):
        inner = list(outer) + [c, x]
        new_c, y = run_block(ns, flags, body, (c_ref, y_ref), inner)
        return next_carry(ns, c, new_c, is_literal(carry_ref)), y

    if policy is not None and flags.checkpoints:
        step = ns.jax.checkpoint(step, policy=make_policy(ns, policy))
    init = value_of(env, carry_ref)
    if flags.checkpoints and not ns.is_jax and len(body) % 2 == 0:
        # remat's binomial checkpointing of the loop itself (JAX's scan has no such keyword):
        # K stored carries, recomputed by the revolve schedule in reverse mode
        return ns.lax.scan(step, init, env[xs_ref], checkpoints=1 + len(body) % 3)
    return ns.lax.scan(step, init, env[xs_ref])


def _run_fori(ns, flags, stmt, env):
    _, init_ref, trips, policy, body, carry_ref = stmt
    outer = tuple(env)

    def step(i, c):
        new_c, = run_block(ns, flags, body, (carry_ref,), list(outer) + [c])
        return next_carry(ns, c, new_c, is_literal(init_ref))

    if policy is not None and flags.checkpoints:
        step = ns.jax.checkpoint(step, policy=make_policy(ns, policy))
    return ns.jnp.asarray(ns.lax.fori_loop(0, trips, step, value_of(env, init_ref)))


def _run_cond(ns, flags, stmt, env):
    _, pred_ref, operand_refs, *branches = stmt
    outer = tuple(env)
    operands = [env[r] for r in operand_refs]

    def branch(body, outs):
        def run(*ops):
            vals = run_block(ns, flags, body, outs, list(outer) + list(ops))
            return tuple(fit(ns, v, o.shape, o.dtype) for v, o in zip(vals, ops))
        return run

    true_fn, false_fn = (branch(*b) for b in branches)
    return ns.lax.cond(branch_taken(ns, env[pred_ref]), true_fn, false_fn, *operands)


def branch_taken(ns, x):
    """Whether ``x``'s sum is clearly positive: above its rounding error's reach (a relative
    1e-5 of ``sum(abs(x))``). A sum that is zero in exact arithmetic (``x - x[::-1]``) is
    rounding noise whose sign depends on the order of the additions, which NumPy, XLA and the
    native tier each choose their own way: ``sum(x) > 0`` sent them down different branches."""
    return ns.jnp.sum(x) > 1e-5 * ns.jnp.sum(ns.jnp.abs(x))


def weights(like, k):
    """A fixed array of ``like``'s shape and dtype: loss weights and cotangents."""
    n = int(np.prod(like.shape))
    return np.cos(np.arange(n) * 0.7 + k).reshape(like.shape).astype(like.dtype)


def tangent(like, k):
    n = int(np.prod(np.shape(like)))
    return np.sin(np.arange(n) * 1.3 + k + 0.5).reshape(np.shape(like)).astype(like.dtype)


def _loss(ns, outs):
    return sum(ns.jnp.sum(o * weights(o, k)) for k, o in enumerate(outs))


def wrap(ns, flags, wrapper, fn, n_args):
    """``wrapper`` applied to ``fn`` (arrays -> tuple of arrays), keeping that interface."""
    kind = wrapper[0]
    jax = ns.jax
    if kind == "jit":
        return jax.jit(fn) if flags.jit else fn
    if kind == "checkpoint":
        if not flags.checkpoints:
            return fn
        return jax.checkpoint(fn, policy=make_policy(ns, wrapper[1]), prevent_cse=wrapper[2])
    if kind == "vmap":
        return jax.vmap(fn, in_axes=wrapper[1], out_axes=wrapper[2],
                        axis_name=wrapper[3] if len(wrapper) > 3 else None)
    if kind == "auto_remat":  # beyond JAX: on JAX (or with checkpoints off) the plain function
        if ns.is_jax or not flags.checkpoints:
            return fn
        return jax.auto_remat(fn, memory_budget=wrapper[1])
    if kind == "grad":
        argnums = tuple(range(n_args))
        return lambda *a: tuple(jax.grad(lambda *b: _loss(ns, fn(*b)), argnums)(*a))
    if kind == "value_and_grad":
        argnums = tuple(range(n_args))

        def vg(*a):
            v, g = jax.value_and_grad(lambda *b: _loss(ns, fn(*b)), argnums)(*a)
            return (v, *g)
        return vg
    if kind == "vjp":
        def vjp(*a):
            out, pullback = jax.vjp(fn, *a)
            # the pullback is a pytree of residuals: rebuilding it must not change it
            res, tree = jax.tree_util.tree_flatten(pullback)
            pullback = jax.tree_util.tree_unflatten(tree, res)
            cts = tuple(weights(o, k) for k, o in enumerate(out))
            return (*out, *pullback(cts))
        return vjp
    if kind == "jvp":
        def jvp(*a):
            ts = tuple(tangent(x, k) for k, x in enumerate(a))
            out, t_out = jax.jvp(fn, a, ts)
            return (*out, *t_out)
        return jvp
    if kind == "linearize":
        def linearize(*a):
            out, f_jvp = jax.linearize(fn, *a)
            f_jvp = jax.tree_util.tree_map(lambda r: r, f_jvp)  # a Partial over residuals
            t_out = f_jvp(*(tangent(x, k) for k, x in enumerate(a)))
            return (*out, *t_out)
        return linearize
    if kind == "scan":
        return _wrap_scan(ns, flags, wrapper, fn)
    if kind == "cond":
        return _wrap_cond(ns, wrapper, fn)
    if kind == "fori":
        return _wrap_fori(ns, flags, fn)
    raise ValueError(f"unknown wrapper {wrapper!r}")


def _wrap_scan(ns, flags, wrapper, fn):
    """``fn`` as a scan body: the first argument is the carry; the others are closed over
    (constants of the scan) or scanned over (as ``LENGTH`` scaled copies)."""
    _, closed, policy = wrapper
    jnp = ns.jnp

    def run(c0, *rest):
        def body(c, xs):
            args = rest if closed else xs
            outs = fn(c, *args)
            mixed = sum(jnp.sum(o) for o in outs)
            return next_carry(ns, c, mixed), outs

        if policy is not None and flags.checkpoints:
            body = ns.jax.checkpoint(body, policy=make_policy(ns, policy))
        xs = None if closed else tuple(jnp.stack([x, 0.5 * x + 0.25]) for x in rest)
        c, ys = ns.lax.scan(body, c0, xs, length=LENGTH)
        return (c, *ys)
    return run


def _wrap_cond(ns, wrapper, fn):
    """``fn`` in both branches of a cond (the false one scales the outputs), its operands
    passed in or closed over."""
    closed = wrapper[1]

    def scaled(*a):
        return tuple(2.0 * o for o in fn(*a))

    def run(*args):
        pred = ns.jnp.sum(args[0]) > 0
        if closed:
            return ns.lax.cond(pred, lambda: fn(*args), lambda: scaled(*args))
        return ns.lax.cond(pred, fn, scaled, *args)
    return run


def _wrap_fori(ns, flags, fn):
    """``LENGTH`` iterations that move every argument by a bounded function of ``fn``'s
    outputs; returns the final arguments. With checkpoints on, remat runs it as a
    reverse-differentiable ``while_loop`` (``max_steps``, 2 online checkpoints)."""
    jnp = ns.jnp

    def run(*args):
        def body(i, xs):
            mixed = sum(jnp.sum(o) for o in fn(*xs))
            return tuple(x + 0.25 * jnp.tanh(fit(ns, mixed, x.shape, x.dtype) + i) for x in xs)
        if flags.checkpoints and not ns.is_jax:
            i, xs = ns.lax.while_loop(
                lambda s: s[0] < LENGTH, lambda s: (s[0] + 1, body(s[0], s[1])),
                (jnp.asarray(0, jnp.int32), tuple(args)), max_steps=LENGTH, checkpoints=2)
            return xs
        return ns.lax.fori_loop(0, LENGTH, body, tuple(args))
    return run


def build(program, ns, flags=Flags()):
    """The program as a function of its (outermost) arguments returning a tuple of arrays."""
    def fn(*args):
        env = [ns.jnp.asarray(a) for a in args]
        return tuple(run_block(ns, flags, program.body, program.outs, env))

    n_args = len(program.arg_shapes)
    for wrapper in reversed(program.wrappers):
        fn = wrap(ns, flags, wrapper, fn, n_args)
    return fn


def input_shapes(program):
    """The argument shapes of the wrapped program (each vmap adds its batch axes)."""
    shapes = list(program.arg_shapes)
    for wrapper in reversed(program.wrappers):
        if wrapper[0] == "vmap":
            shapes = [s if ax is None else s[:ax] + (BATCH,) + s[ax:]
                      for s, ax in zip(shapes, wrapper[1])]
    return shapes


def inputs(program):
    rng = np.random.default_rng(program.seed)
    return [rng.standard_normal(s).astype(program.dtype) for s in input_shapes(program)]


# --- generation -------------------------------------------------------------------------------


class RandomChooser:
    """Choices from a seeded ``random.Random`` (campaigns)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def choice(self, seq):
        return seq[self.rng.randrange(len(seq))]

    def integer(self, lo, hi):
        return self.rng.randint(lo, hi)


class HypothesisChooser:
    """Choices drawn from hypothesis (tests: failures shrink)."""

    def __init__(self, data):
        self.data = data

    def choice(self, seq):
        from hypothesis import strategies as st

        return self.data.draw(st.sampled_from(seq))

    def integer(self, lo, hi):
        from hypothesis import strategies as st

        return self.data.draw(st.integers(lo, hi))


SIMPLE_POLICIES = (("default",), ("nothing",), ("everything",), ("dots",), ("dots_no_batch",),
                   ("offload_dot",))
STMT_KINDS = ("op", "op", "op", "call", "op", "scan", "op", "cond", "loop")
LOOP_KINDS = ("fori", "scanned_jit", "budget_region")  # (each one time in 27)
WRAPPERS = ("grad", "jit", "vmap", "scan", "value_and_grad", "cond", "vjp", "jvp",
            "linearize", "fori", "checkpoint")
BUDGETS = (0.0, 0.3, 0.7, 1.0)  # fractions: every one is feasible
DERIVATIVES = ("grad", "value_and_grad", "vjp", "jvp", "linearize")


def draw_names(ch):
    k = ch.integer(0, len(NAMES))
    return tuple(NAMES[:k]) if ch.integer(0, 1) else tuple(NAMES[len(NAMES) - k:])


def draw_policy(ch, depth=0):
    kind = ch.choice(("simple", "names", "names", "offload_names", "both", "budget"))
    if kind == "budget":  # a budget is resolved per checkpoint: never a part of "both"
        return ("budget", ch.choice(BUDGETS)) if not depth else ch.choice(SIMPLE_POLICIES)
    if kind == "simple" or (kind == "both" and depth):
        return ch.choice(SIMPLE_POLICIES)
    if kind == "names":
        return (ch.choice(("except", "any_but", "only")), draw_names(ch))
    if kind == "offload_names":
        names = draw_names(ch)
        k = ch.integer(0, len(names))
        return ("offload_names", names[:k], names[k:])
    return ("both", draw_policy(ch, 1), draw_policy(ch, 1))


def draw_ref(ch, shapes, literals=(), one_in=5):
    """A reference to an earlier value (the most recent first, so chains are likely), or one
    time in ``one_in`` one of ``literals`` (a weak-typed Python float) where there are any."""
    if literals and ch.integer(1, one_in) == 1:
        return ch.choice(literals)
    return ch.choice(tuple(range(len(shapes) - 1, -1, -1)))


def draw_refs(ch, shapes, lo, hi, literals=()):
    n = ch.integer(lo, min(hi, len(shapes)))
    return tuple(draw_ref(ch, shapes, literals) for _ in range(n))


def _fits(name, shapes, param):
    return (OPS[name][1](shapes, param) is not None
            and not (name in ZERO_SIZE_UNSAFE and any(0 in s for s in shapes)))


def draw_op(ch, shapes, named=False):
    """An op over earlier values (the most recent first, so chains are likely) whose shapes
    fit it; ``sin`` of the last value when none do. In a ``named`` program one op in four is
    a collective over ``AXIS``; one of the ``LITERAL_OPS`` in four has a Python float for an
    operand."""
    name = ch.choice(COLLECTIVE_OP_NAMES if named and ch.integer(0, 3) == 0 else OP_NAMES)
    arity, shape_fn, _ = OPS[name]
    param = ch.choice(PARAMS[name]) if name in PARAMS else None
    recent_first = range(len(shapes) - 1, -1, -1)
    if arity == 1:
        pairs = [(i,) for i in recent_first]
    else:
        pairs = [(i, j) for i in recent_first for j in recent_first]
    fits = [refs for refs in pairs if _fits(name, tuple(shapes[r] for r in refs), param)
            and not (name in DISTINCT_OPERANDS and refs[0] == refs[-1])]
    if not fits:
        return ("op", "sin", (len(shapes) - 1,), None), shapes[-1]
    first = ch.choice(tuple(dict.fromkeys(refs[0] for refs in fits)))
    refs = ch.choice(tuple(refs for refs in fits if refs[0] == first))
    if name in LITERAL_OPS and ch.integer(0, 3) == 0:
        k = ch.integer(0, 1)
        refs = refs[:k] + (ch.choice(LITERALS),) + refs[k + 1:]
    return ("op", name, refs, param), shape_fn(tuple(shape_of(shapes, r) for r in refs), param)


CALL_KINDS = ("checkpoint", "checkpoint", "jit", "custom_remat")


def draw_block(ch, shapes, n, depth, named=False):
    """``n`` statements over values of ``shapes`` (extended in place); collectives only in a
    ``named`` program, and never in a cond's branches (see ``draw_program``)."""
    stmts = []
    for _ in range(n):
        kind = ch.choice(STMT_KINDS) if depth < 2 else "op"
        kind = ch.choice(LOOP_KINDS) if kind == "loop" else kind
        if kind == "op":
            stmt, shape = draw_op(ch, shapes, named)
            stmts.append(stmt)
            shapes.append(shape)
        elif kind == "call":
            stmts.append(draw_call(ch, shapes, depth, named))
        elif kind == "scan":
            stmts += draw_scan(ch, shapes, depth, named)
        elif kind == "fori":
            stmts.append(draw_fori(ch, shapes, depth, named))
        elif kind == "scanned_jit":
            stmts += draw_scanned_jit(ch, shapes, named)
        elif kind == "budget_region":
            stmts.append(draw_budget_region(ch, shapes, named))
        else:
            stmts.append(draw_cond(ch, shapes, depth))
    return stmts


def draw_call(ch, shapes, depth, named):
    call = ch.choice(CALL_KINDS)
    opts = {"checkpoint": lambda: (draw_policy(ch), bool(ch.integer(0, 1))),
            "jit": lambda: None,
            "custom_remat": lambda: ch.choice(("none", "outs", "policy"))}[call]()
    args = draw_refs(ch, shapes, 0, 3, LITERALS)
    inner = shapes + [shape_of(shapes, r) for r in args]
    body = draw_block(ch, inner, ch.integer(1, 4), depth + 1, named)
    outs = draw_refs(ch, inner, 1, 2)
    shapes.extend(inner[r] for r in outs)
    return ("call", call, opts, args, tuple(body), outs)


def _ranked(shapes):
    return [i for i in range(len(shapes) - 1, -1, -1) if shapes[i]]


def draw_scan(ch, shapes, depth, named):
    """A scan over a value's leading axis, one time in four over a zero-size slice of it (no
    iterations at all); its initial carry one time in five a Python float."""
    if not _ranked(shapes):
        return []
    stmts = []
    carry = draw_ref(ch, shapes, INITS)
    xs = ch.choice(_ranked(shapes))
    if ch.integer(0, 3) == 0:
        stmts.append(("op", "empty_slice", (xs,), None))
        shapes.append((0,) + shapes[xs][1:])
        xs = len(shapes) - 1
    policy = ch.choice((None, "draw")) and draw_policy(ch)
    inner = shapes + [shape_of(shapes, carry), shapes[xs][1:]]
    body = draw_block(ch, inner, ch.integer(1, 4), depth + 1, named)
    c_ref, y_ref = draw_refs(ch, inner, 2, 2)
    stmts.append(("scan", carry, xs, policy, tuple(body), (c_ref, y_ref)))
    shapes.extend([shape_of(shapes, carry), (shapes[xs][0],) + inner[y_ref]])
    return stmts


def draw_fori(ch, shapes, depth, named):
    """A fori loop of 0 or 2 trips, its initial carry one time in two a Python float."""
    init = draw_ref(ch, shapes, INITS, 2)
    trips = ch.choice((0, 2))
    policy = ch.choice((None, "draw")) and draw_policy(ch)
    inner = shapes + [shape_of(shapes, init)]
    body = draw_block(ch, inner, ch.integer(1, 3), depth + 1, named)
    shapes.append(shape_of(shapes, init))
    return ("fori", init, trips, policy, tuple(body), draw_ref(ch, inner))


def draw_scanned_jit(ch, shapes, named):
    """A scan whose body checkpoints a block calling a ``jit`` of many values the checkpoint
    closes over, ``jit(blk)(e0, e1, e5, e5, 0.5, e5, e1)``: arguments repeated, some unused
    by ``blk``, one returned unchanged."""
    if not _ranked(shapes):
        return []
    carry = draw_ref(ch, shapes, INITS)
    xs = ch.choice(_ranked(shapes))
    scan_env = shapes + [shape_of(shapes, carry), shapes[xs][1:]]
    ck_args = draw_refs(ch, scan_env, 0, 1)
    ck_env = scan_env + [scan_env[r] for r in ck_args]
    pool = draw_refs(ch, ck_env, 2, 6, LITERALS)
    args = tuple(ch.choice(pool) for _ in range(ch.integer(len(pool), 11)))
    jit_env = ck_env + [shape_of(ck_env, r) for r in args]
    jit_body = draw_block(ch, jit_env, ch.integer(1, 3), 2, named)
    forwarded = ch.integer(len(ck_env), len(ck_env) + len(args) - 1)
    jit_outs = ch.choice(((forwarded, len(jit_env) - 1), (len(jit_env) - 1, forwarded)))
    ck_env += [jit_env[r] for r in jit_outs]
    ck_body = [("call", "jit", None, args, tuple(jit_body), jit_outs)]
    ck_body += draw_block(ch, ck_env, ch.integer(0, 2), 2, named)
    ck_outs = (len(ck_env) - 1,) + draw_refs(ch, ck_env, 0, 1)
    scan_env += [ck_env[r] for r in ck_outs]
    ck_opts = (draw_policy(ch), bool(ch.integer(0, 1)))
    body = [("call", "checkpoint", ck_opts, ck_args, tuple(ck_body), ck_outs)]
    body += draw_block(ch, scan_env, ch.integer(0, 1), 2, named)
    c_ref, y_ref = draw_refs(ch, scan_env, 2, 2)
    shapes.extend([shape_of(shapes, carry), (shapes[xs][0],) + scan_env[y_ref]])
    return [("scan", carry, xs, None, tuple(body), (c_ref, y_ref))]


def draw_budget_region(ch, shapes, named):
    """A checkpoint, three times in four with a ``memory_budget``, around a loop (a scan, maybe
    of length 0, or a fori loop, maybe of 0 trips) and maybe a zero-size slice."""
    args = draw_refs(ch, shapes, 0, 2, LITERALS)
    inner = shapes + [shape_of(shapes, r) for r in args]
    body = []
    if _ranked(inner) and ch.integer(0, 1):
        body.append(("op", "empty_slice", (ch.choice(_ranked(inner)),), None))
        inner.append((0,) + inner[body[-1][2][0]][1:])
    loop = draw_scan(ch, inner, 1, named) if ch.integer(0, 1) else []
    body += loop or [draw_fori(ch, inner, 1, named)]
    body += draw_block(ch, inner, ch.integer(0, 2), 2, named)
    outs = (len(inner) - 1,) + draw_refs(ch, inner, 0, 1)
    policy = ("budget", ch.choice(BUDGETS)) if ch.integer(0, 3) else draw_policy(ch)
    shapes.extend(inner[r] for r in outs)
    return ("call", "checkpoint", (policy, bool(ch.integer(0, 1))), args, tuple(body), outs)


def draw_cond(ch, shapes, depth):
    pred = ch.choice(tuple(range(len(shapes) - 1, -1, -1)))
    operands = draw_refs(ch, shapes, 1, 2)
    branches = []
    for _ in range(2):
        inner = shapes + [shapes[r] for r in operands]
        body = draw_block(ch, inner, ch.integer(0, 3), depth + 1)
        outs = tuple(ch.choice(tuple(range(len(inner) - 1, -1, -1))) for _ in operands)
        branches.append((tuple(body), outs))
    shapes.extend(shapes[r] for r in operands)
    return ("cond", pred, operands, *branches)


def draw_wrapper_vmap(ch, shapes):
    axes = []
    for s in shapes:
        axes.append(ch.choice((0, None, 1) if s else (0, None)))
    if all(a is None for a in axes):
        axes[0] = 0
    return ("vmap", tuple(axes), ch.choice((0, -1)))


def draw_wrapper(ch, n_args, shapes):
    kind = ch.choice(WRAPPERS)
    if kind == "vmap":
        return draw_wrapper_vmap(ch, shapes)
    if kind == "checkpoint":
        if ch.integer(0, 3) == 0:  # one in four: remat's own auto_remat (costly to choose)
            return ("auto_remat", ch.choice(BUDGETS))
        return ("checkpoint", draw_policy(ch), bool(ch.integer(0, 1)))
    if kind == "scan":
        return ("scan", bool(ch.integer(0, 1)), ch.choice((None, "draw")) and draw_policy(ch))
    if kind == "cond":
        return ("cond", bool(ch.integer(0, 1)))
    return (kind,)


def draw_program(ch, max_stmts=12):
    n_args = ch.integer(1, 3)
    arg_shapes = [ch.choice(SHAPES) for _ in range(n_args)]
    shapes = list(arg_shapes)
    named = ch.integer(0, 3) == 0  # collectives over a vmapped axis named AXIS
    body = draw_block(ch, shapes, ch.integer(1, max_stmts), 0, named)
    outs = (len(shapes) - 1,) + draw_refs(ch, shapes, 0, 2)
    wrappers = [draw_wrapper(ch, n_args, arg_shapes) for _ in range(ch.integer(0, 2))]
    if len(wrappers) == 2 and wrappers[0][0] == "auto_remat" and wrappers[1][0] in DERIVATIVES:
        # auto_remat chooses for a function that is then differentiated: around a derivative
        # it would weigh its structures on the second derivative (seconds a program)
        wrappers.reverse()
    if named:
        axes = draw_wrapper_vmap(ch, arg_shapes)
        at = ch.integer(0, len(wrappers))
        # inside the named vmap no cond wrapper: its predicate varies over the axis, and JAX
        # 0.10 then drops a collective's cotangent for the members of the other branch
        wrappers = wrappers[:at] + [axes + (AXIS,)] + [w for w in wrappers[at:]
                                                        if w[0] != "cond"]
    return Program(tuple(arg_shapes), tuple(body), outs, tuple(wrappers),
                   ch.integer(0, 2 ** 16), ch.choice(DTYPES))


# --- the checks -------------------------------------------------------------------------------


class Disagreement(AssertionError):
    pass


def _run(program, ns, flags, args):
    return [np.asarray(o) for o in build(program, ns, flags)(*args)]


# check -> program dtype -> (rtol, atol). remat with and without its checkpoints (or jits) runs
# the same primitives on the same values: bit for bit the same results in nearly every program
# (all of 63 measured, either dtype), a few ulps apart where a plan sums in another order; so
# float64 keeps 1e-10, float32 gets 1e-5 (80 ulps). Generated and interpreted plans run the
# same steps: bitwise. JAX's kernels round differently, a few ulps per op that a program
# amplifies: measured up to 14 ulps in float64 and 43 in float32 (5e-6), so 1e-7 and 1e-4.
TOLERANCES = {
    "with vs without checkpoints": {"float64": (1e-10, 1e-12), "float32": (1e-5, 1e-6)},
    "jit vs eager": {"float64": (1e-10, 1e-12), "float32": (1e-5, 1e-6)},
    "generated vs interpreted plans": {"float64": (0, 0), "float32": (0, 0)},
    "native vs Python loops": {"float64": (1e-9, 1e-12), "float32": (1e-5, 1e-6)},
    "remat vs JAX": {"float64": (1e-7, 1e-9), "float32": (1e-4, 1e-5)},
}


def assert_same(program, what, got, want):
    rtol, atol = TOLERANCES[what][program.dtype]
    if len(got) != len(want):
        raise Disagreement(f"{what}: {len(got)} outputs vs {len(want)}\n{program!r}")
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            raise Disagreement(f"{what}: output {k} shape {g.shape} vs {w.shape}\n{program!r}")
        if g.dtype != w.dtype:
            raise Disagreement(f"{what}: output {k} dtype {g.dtype} vs {w.dtype}\n{program!r}")
        if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            raise Disagreement(f"{what}: output {k} differs (max abs diff "
                               f"{np.max(np.abs(g - w)):.3g})\n{g}\nvs\n{w}\n{program!r}")


def features(program):
    """The constructs ``program`` holds that an op or a wrapper name does not show: its dtype,
    Python floats (as operands, loop inits, call arguments), zero-size values, loops of no
    iterations, a jit of many repeated arguments forwarding one, in a checkpoint in a scan
    body, and memory budgets around loops."""
    found = {program.dtype}

    def walk(body, shapes, scopes):
        for stmt in body:
            kind = stmt[0]
            if kind == "op" and any(map(is_literal, stmt[2])):
                found.add("literal operand")
            elif kind in ("scan", "fori") and is_literal(stmt[1]):
                found.add("literal init")
            if (kind == "scan" and shapes[stmt[2]][0] == 0) or (kind == "fori" and not stmt[2]):
                found.add(f"zero-length {kind}")
            if kind == "call":
                args = stmt[3]
                if any(map(is_literal, args)):
                    found.add("literal argument")
                if (stmt[1] == "jit" and scopes[-2:] == ("scan", "checkpoint")
                        and len(args) >= 6 and len(set(args)) < len(args)
                        and any(r >= len(shapes) for r in stmt[5])):
                    found.add("jit in checkpoint in scan")
                if (stmt[1] == "checkpoint" and stmt[2][0][0] == "budget"
                        and any(s[0] in ("scan", "fori") for s in stmt[4])):
                    found.add("budget around a loop")
            if kind in ("call", "scan", "fori"):
                walk(stmt[4], shapes + body_inputs(stmt, shapes),
                     scopes + (stmt[1] if kind == "call" else kind,))
            elif kind == "cond":
                for branch, _ in stmt[3:]:
                    walk(branch, shapes + [shapes[r] for r in stmt[2]], scopes + ("cond",))
            new = stmt_shapes(stmt, shapes)
            if any(0 in s for s in new):
                found.add("zero-size value")
            shapes = shapes + new

    walk(program.body, list(program.arg_shapes), ())
    return found


def has_loop(program):
    """The program runs a scan, a fori loop or a while loop (what the native loop tier
    compiles)."""
    def walk(body):
        return any(stmt[0] in ("scan", "fori") or (stmt[0] == "call" and walk(stmt[4]))
                   or (stmt[0] == "op" and stmt[1] in WHILE_OPS)
                   or (stmt[0] == "cond" and any(walk(b) for b, _ in stmt[3:]))
                   for stmt in body)
    return walk(program.body) or any(w[0] in ("scan", "fori") for w in program.wrappers)


def check_native(program, remat_ns):
    """The native loop tier (every loop of the program compiled) agrees with the Python tier:
    at the first run, where each loop compiles after its first call (a loop called once runs
    on the Python tier), and at a second, where every loop whose kernel compiled runs it (a
    new trace's loop of a compiled source is native from its first call)."""
    args = inputs(program)
    with config.override("remat_native_loops", False):
        want = _run(program, remat_ns, Flags(), args)
    with config.override("remat_native_loops", True), native.eager():
        for _ in range(2):
            got = _run(program, remat_ns, Flags(), args)
            assert_same(program, "native vs Python loops", got, want)
    with config.override("remat_native_loops", True), _handing_over():
        got = _run(program, remat_ns, Flags(), args)
        assert_same(program, "native vs Python loops", got, want)


class ReadyAfter:
    """A loop's ``native_ready`` flag as its Python-tier kernel reads it between iterations:
    ready after ``reads`` reads (the iteration a call hands over at), while the loop has its
    native kernel (one that exits at a branch it has no code for is dropped, and the call
    reruns on the Python tier)."""

    def __init__(self, loop, reads=1):
        self.read, self.reads, self.loop = 0, reads, loop

    def __getitem__(self, index):
        self.read += 1
        return self.read > self.reads and self.loop.kernel is not None


@contextlib.contextmanager
def _handing_over():
    """Every loop whose kernel an earlier run compiled starts each call on the Python tier and
    hands over to the native kernel after its first iteration (``native.HandOver``), as a
    long call does once its compile ends."""
    make, patched = native._loop, {}

    def loop_handing_over(jaxpr, key, write):
        loop = make(jaxpr, key, write)
        kernel = native._dispatchers.get(loop.source)
        if kernel is not None and loop.python is not None and loop not in patched:
            patched[loop] = loop.kernel, loop.state
            loop.kernel, loop.state = kernel, "compiling"  # (calls start on the Python tier)
            loop.python.__globals__["_native_ready"] = ReadyAfter(loop)
        return loop

    native._loop = loop_handing_over
    try:
        yield
    finally:
        native._loop = make
        for loop, (kernel, state) in patched.items():
            loop.kernel, loop.state = kernel, state
            loop.python.__globals__["_native_ready"] = loop.native_ready


def check_program(program, remat_ns, jax_ns=None):
    """Run the four checks (the JAX one when ``jax_ns`` is given); raise ``Disagreement`` on
    any difference. An exception from remat propagates (``fuzz_campaign`` counts it as a
    failure unless JAX rejects the program too)."""
    args = inputs(program)
    run = build(program, remat_ns)  # (its traces, plans and auto_remat's choice made once)
    # the plans as a hot plan runs them, loops on the Python tier (which the interpreted plans
    # equal bit for bit; a kernel compiled by an earlier case would run natively at once, and
    # ``check_native`` compares that tier, to its own tolerance)
    with generated(), config.override("remat_native_loops", False):
        got = [np.asarray(o) for o in run(*args)]
    plain = _run(program, remat_ns, Flags(checkpoints=False), args)
    assert_same(program, "with vs without checkpoints", got, plain)
    eager = _run(program, remat_ns, Flags(jit=False), args)
    assert_same(program, "jit vs eager", got, eager)
    with interpreted():  # the same plans, step by step
        stepwise = [np.asarray(o) for o in run(*args)]
    assert_same(program, "generated vs interpreted plans", got, stepwise)
    if jax_ns is not None:
        with jax_mode(program, jax_ns):
            want = _run(program, jax_ns, Flags(), args)
        assert_same(program, "remat vs JAX", got, want)


def jax_mode(program, jax_ns):
    """How JAX runs ``program``: eagerly (``disable_jit``: fast, no compiling), unless it has a
    loop starting from a Python float or of no iterations. JAX runs those as written only
    when it traces them: its eager loops are Python loops, which keep a weak-typed carry's
    type (no promotion to the body's) and refuse a scan of length 0."""
    def traced(body, shapes):
        for stmt in body:
            kind = stmt[0]
            if kind in ("scan", "fori") and (is_literal(stmt[1]) or (
                    stmt[2] == 0 if kind == "fori" else shapes[stmt[2]][0] == 0)):
                return True
            if kind in ("call", "scan", "fori"):
                if traced(stmt[4], shapes + body_inputs(stmt, shapes)):
                    return True
            elif kind == "cond" and any(traced(b, shapes + [shapes[r] for r in stmt[2]])
                                        for b, _ in stmt[3:]):
                return True
            shapes = shapes + stmt_shapes(stmt, shapes)
        return False

    if traced(program.body, list(program.arg_shapes)):
        return contextlib.nullcontext()
    return jax_ns.jax.disable_jit()


def jax_rejects(program, jax_ns):
    """JAX raises on the program (it was drawn outside what both systems accept)."""
    try:
        with jax_mode(program, jax_ns):
            _run(program, jax_ns, Flags(), inputs(program))
    except Exception:
        return True
    return False


# --- shrinking a campaign's failure -----------------------------------------------------------


def body_inputs(stmt, shapes):
    """The shapes of the values a ``call``, ``scan`` or ``fori`` statement's body sees after
    those of the enclosing block."""
    if stmt[0] == "call":
        return [shape_of(shapes, r) for r in stmt[3]]
    if stmt[0] == "scan":
        return [shape_of(shapes, stmt[1]), shapes[stmt[2]][1:]]
    return [shape_of(shapes, stmt[1])]


def stmt_shapes(stmt, shapes):
    """The shapes of the values ``stmt`` adds to an environment of ``shapes``."""
    kind = stmt[0]
    if kind == "op":
        return [OPS[stmt[1]][1](tuple(shape_of(shapes, r) for r in stmt[2]), stmt[3])]
    if kind == "fori":
        return [shape_of(shapes, stmt[1])]
    if kind in ("call", "scan"):
        inner = shapes + body_inputs(stmt, shapes)
        for s in stmt[4]:
            inner += stmt_shapes(s, inner)
        if kind == "call":
            return [inner[r] for r in stmt[5]]
        return [shape_of(shapes, stmt[1]), (shapes[stmt[2]][0],) + inner[stmt[5][1]]]
    return [shapes[r] for r in stmt[2]]


def _simpler_bodies(body, shapes):
    """Variants of ``body``, each with one statement (at any depth) replaced by constants of
    its shapes, or one nested body simplified."""
    shapes = list(shapes)
    for i, stmt in enumerate(body):
        outs = stmt_shapes(stmt, shapes)
        if stmt[:2] != ("op", "const"):
            yield body[:i] + tuple(("op", "const", (), s) for s in outs) + body[i + 1:]
        kind = stmt[0]
        if kind in ("call", "scan", "fori"):
            inner = shapes + body_inputs(stmt, shapes)
            for b in _simpler_bodies(stmt[4], inner):
                yield body[:i] + (stmt[:4] + (b,) + stmt[5:],) + body[i + 1:]
        elif kind == "cond":
            inner = shapes + [shapes[r] for r in stmt[2]]
            for k in (3, 4):
                for b in _simpler_bodies(stmt[k][0], inner):
                    new = list(stmt)
                    new[k] = (b, stmt[k][1])
                    yield body[:i] + (tuple(new),) + body[i + 1:]
        if stmt[:2] == ("call", "checkpoint") and stmt[2][0] != ("default",):
            yield body[:i] + (stmt[:2] + ((("default",), stmt[2][1]),) + stmt[3:],) + \
                body[i + 1:]
        shapes += outs


def _candidates(program):
    for k in range(len(program.wrappers)):
        yield dataclasses.replace(program,
                                  wrappers=program.wrappers[:k] + program.wrappers[k + 1:])
    for k in range(len(program.outs)):
        if len(program.outs) > 1:
            yield dataclasses.replace(program, outs=program.outs[:k] + program.outs[k + 1:])
    for body in _simpler_bodies(program.body, program.arg_shapes):
        yield dataclasses.replace(program, body=body)


def _drop_unused_tail(program):
    """Statements after the last one an output reads are dropped."""
    shapes = list(program.arg_shapes)
    for n, stmt in enumerate(program.body, 1):
        shapes += stmt_shapes(stmt, shapes)
        if len(shapes) > max(program.outs):
            return dataclasses.replace(program, body=program.body[:n])
    return program


def shrink(program, fails):
    """A smaller program for which ``fails(program)`` still holds (greedy, to a fixpoint)."""
    def trimmed(failing):  # without its unused tail, unless the failure is there (a crash)
        short = _drop_unused_tail(failing)
        return short if short == failing or fails(short) else failing

    program = trimmed(program)
    progress = True
    while progress:
        progress = False
        for candidate in _candidates(program):
            if fails(candidate):
                program, progress = trimmed(candidate), True
                break
    return program

