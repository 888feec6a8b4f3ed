"""The differential fuzzer: random programs, run three ways.

A program is plain data (``Program``: nested tuples), so a failure's ``repr`` is a regression
case. It is a DAG of ops over float64 values of small shapes (elementwise, matmul, reductions,
reshapes, slicing and indexing, ``where``, identities such as ``checkpoint_name`` and
``stop_gradient``), with statements that open a scope: ``checkpoint`` (random policy, names,
``prevent_cse``) or ``jit`` around a sub-block whose inputs are arguments or closed-over values,
a ``scan`` (its body maybe checkpointed) and a ``cond``, nested up to two deep. Around the whole
program go up to two wrappers: ``jit vmap grad value_and_grad vjp jvp linearize checkpoint scan
cond fori``.

``build(program, ns, checkpoints, jit)`` interprets a program on a namespace of modules: remat's
or JAX's (``Namespace.remat()``, ``Namespace.jax()``), so the same source runs on both. The
checks (``check_program``):
1. remat with its checkpoints vs remat with every checkpoint removed: always equal;
2. remat vs JAX, where JAX is installed (values, gradients, tangents);
3. remat under ``jit`` vs remat with every ``jit`` removed;
4. the executor's plans as generated code vs step by step: bitwise equal.

Programs are drawn through a ``Chooser``: ``HypothesisChooser`` in the test suite (hypothesis
shrinks a failure to a small program), ``RandomChooser`` in ``fuzz_campaign.py`` (a seed per
case, fast, continuing past failures).
"""

import dataclasses
import random
import types

import numpy as np

from remat.config import config
from remat.exec import interpreted, native

SHAPES = ((3,), (2, 3), (), (3, 2))
NAMES = ("a", "b", "c")
BATCH = 2
LENGTH = 2  # iterations of a wrapper scan / fori loop


@dataclasses.dataclass(frozen=True)
class Program:
    arg_shapes: tuple
    body: tuple  # statements, see ``run_block``
    outs: tuple  # refs into the environment
    wrappers: tuple = ()  # outermost first
    seed: int = 0


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


# --- ops --------------------------------------------------------------------------------------
# name -> (arity, out_shape(shapes, param) or None when the operands do not fit, apply).


def _same(shapes, param):
    return shapes[0]


def _broadcast2(shapes, param):
    a, b = shapes
    if a == b or b == ():
        return a
    return b if a == () else None


def _matmul_shape(shapes, param):
    a, b = shapes
    if not a or not b or len(b) > 2 or a[-1] != b[0]:
        return None
    return a[:-1] + b[1:]


def _axis_dropped(shapes, param):
    s = shapes[0]
    return s[:param] + s[param + 1:] if param < len(s) else None


def _needs(pred, shape_fn=_same):
    return lambda shapes, param: shape_fn(shapes, param) if pred(shapes[0], param) else None


def _safe_div(ns, x, y):
    return x / (1.0 + y * y)


def _ref_accumulate(ns, x, y):
    """``x * y + sin(x)`` accumulated in a mutable array reference (``new_ref``, ``+=`` on
    the whole and on one row, ``freeze``): remat's state discharge under every wrapper. JAX
    computes the same values directly (its checkpoint of a Ref-writing function fails)."""
    shape = np.broadcast_shapes(x.shape, y.shape)
    first = ns.jnp.broadcast_to(ns.jnp.sin(x), shape)
    if ns.is_jax:
        total = x * y + first
        return total.at[0].add(1.0) if shape else total + 1.0
    r = ns.jax.new_ref(ns.jnp.zeros(shape, ns.jnp.result_type(x, y)))
    r[...] += x * y
    r[...] += first
    if shape:
        r[0] += 1.0
    else:
        r[...] += 1.0
    return ns.jax.freeze(r)


def _barrier_pair(ns, x, y):
    """A multiple-result equation (an optimization barrier on two values) whose both results
    are used: loop kernels and plans run it once and pick its results out."""
    a, b = ns.lax.optimization_barrier((x, y))
    return a * b + a


def _index_array(n):
    """Three indices into an axis of length ``n``, one repeated (gathers and scatter-adds
    with duplicates)."""
    return np.array([n - 1, 0, min(1, n - 1)], np.int32)


UNARY = {
    "sin": lambda ns, x: ns.jnp.sin(x),
    "cos": lambda ns, x: ns.jnp.cos(x),
    "tanh": lambda ns, x: ns.jnp.tanh(x),
    "exp_tanh": lambda ns, x: ns.jnp.exp(ns.jnp.tanh(x)),
    "log1p_sq": lambda ns, x: ns.jnp.log1p(x * x),
    "square": lambda ns, x: x ** 2,
    "cube": lambda ns, x: x * x * x,
    "sqrt1p": lambda ns, x: ns.jnp.sqrt(1.0 + x * x),
    "sigmoid": lambda ns, x: ns.nn.sigmoid(x),
    "softplus": lambda ns, x: ns.nn.softplus(x),
    "neg": lambda ns, x: -x,
    "abs": lambda ns, x: ns.jnp.abs(x),
    "relu": lambda ns, x: ns.jnp.maximum(x, 0.0),
    "scale": lambda ns, x: 0.5 * x + 1.0,
    "stop_gradient": lambda ns, x: ns.lax.stop_gradient(x),
    "astype_same": lambda ns, x: x.astype(x.dtype),
    "barrier": lambda ns, x: ns.lax.optimization_barrier(x),
    "reshape_same": lambda ns, x: ns.jnp.reshape(x, x.shape),
}

OPS = {name: (1, _same, fn) for name, fn in UNARY.items()}
OPS.update({
    "name": (1, _same, lambda ns, x, p: ns.checkpoint_name(x, p)),
    "add": (2, _broadcast2, lambda ns, x, y: x + y),
    "sub": (2, _broadcast2, lambda ns, x, y: x - y),
    "mul": (2, _broadcast2, lambda ns, x, y: x * y),
    "div": (2, _broadcast2, _safe_div),
    "maximum": (2, _broadcast2, lambda ns, x, y: ns.jnp.maximum(x, y)),
    "where": (2, _broadcast2, lambda ns, x, y: ns.jnp.where(x > y, x, 2.0 * y)),
    "matmul": (2, _matmul_shape, lambda ns, x, y: x @ y),
    "sum": (1, lambda s, p: (), lambda ns, x: ns.jnp.sum(x)),
    "mean": (1, lambda s, p: (), lambda ns, x: ns.jnp.mean(x)),
    "sum_axis": (1, _axis_dropped, lambda ns, x, p: ns.jnp.sum(x, axis=p)),
    "max_axis": (1, _axis_dropped, lambda ns, x, p: ns.jnp.max(x, axis=p)),
    "logsumexp": (1, _axis_dropped, lambda ns, x, p: ns.nn.logsumexp(x, axis=p)),
    "transpose": (1, _needs(lambda s, p: len(s) == 2, lambda sh, p: sh[0][::-1]),
                  lambda ns, x: x.T),
    "ravel": (1, lambda sh, p: (int(np.prod(sh[0])),), lambda ns, x: ns.jnp.ravel(x)),
    "reshape_swap": (1, _needs(lambda s, p: len(s) == 2, lambda sh, p: sh[0][::-1]),
                     lambda ns, x: ns.jnp.reshape(x, x.shape[::-1])),
    "expand0": (1, _needs(lambda s, p: len(s) <= 1, lambda sh, p: (1,) + sh[0]),
                lambda ns, x: x[None]),
    "broadcast": (1, _needs(lambda s, p: len(s) <= 1, lambda sh, p: (2,) + sh[0]),
                  lambda ns, x: ns.jnp.broadcast_to(x, (2,) + x.shape)),
    "stack": (2, lambda sh, p: (2,) + sh[0] if sh[0] == sh[1] and len(sh[0]) <= 1 else None,
              lambda ns, x, y: ns.jnp.stack([x, y])),
    "concat": (2, lambda sh, p: (sh[0][0] + sh[1][0],) + sh[0][1:]
               if sh[0] and sh[1] and sh[0][1:] == sh[1][1:] else None,
               lambda ns, x, y: ns.jnp.concatenate([x, y])),
    "slice": (1, _needs(lambda s, p: s and s[0] >= 2, lambda sh, p: (sh[0][0] - 1,) + sh[0][1:]),
              lambda ns, x: x[1:]),
    "slice_step": (1, _needs(lambda s, p: len(s) >= 1,
                             lambda sh, p: ((sh[0][0] + 1) // 2,) + sh[0][1:]),
                   lambda ns, x: x[::2]),
    "index": (1, _needs(lambda s, p: len(s) >= 1, lambda sh, p: sh[0][1:]),
              lambda ns, x: x[-1]),
    "index_col": (1, _needs(lambda s, p: len(s) == 2 and s[1] >= 2, lambda sh, p: sh[0][:1]),
                  lambda ns, x: x[:, 1]),
    "gather": (1, _needs(lambda s, p: len(s) >= 1, lambda sh, p: (3,) + sh[0][1:]),
               lambda ns, x: x[_index_array(x.shape[0])]),
    "take": (1, _needs(lambda s, p: len(s) >= 1, lambda sh, p: (3,) + sh[0][1:]),
             lambda ns, x: ns.jnp.take(x, _index_array(x.shape[0]), axis=0)),
    "dynamic_slice": (1, _needs(lambda s, p: s and s[0] >= 2,
                                lambda sh, p: (sh[0][0] - 1,) + sh[0][1:]),
                      lambda ns, x: ns.lax.dynamic_slice_in_dim(x, 1, x.shape[0] - 1)),
    "at_set": (2, lambda sh, p: sh[0] if sh[0] and sh[1] == sh[0][1:] else None,
               lambda ns, x, y: x.at[0].set(y)),
    "at_add": (2, lambda sh, p: sh[0] if sh[0] and sh[1] == sh[0][1:] else None,
               lambda ns, x, y: x.at[_index_array(x.shape[0])].add(y)),
    "flip": (1, _needs(lambda s, p: len(s) >= 1), lambda ns, x: ns.jnp.flip(x, 0)),
    "roll": (1, _needs(lambda s, p: len(s) >= 1), lambda ns, x: ns.jnp.roll(x, 1, 0)),
    "roll_last": (1, _needs(lambda s, p: len(s) >= 1), lambda ns, x: ns.jnp.roll(x, -2, -1)),
    "odd_even": (1, _needs(lambda s, p: len(s) >= 1),  # (concatenated strided slices)
                 lambda ns, x: ns.jnp.concatenate([x[1::2], x[::2]])),
    "pad": (1, _needs(lambda s, p: len(s) >= 1, lambda sh, p: tuple(d + 2 for d in sh[0])),
            lambda ns, x: ns.jnp.pad(x, 1)),
    "cumsum": (1, _needs(lambda s, p: len(s) >= 1), lambda ns, x: ns.jnp.cumsum(x, axis=0)),
    "iota": (1, _needs(lambda s, p: len(s) >= 1),
             lambda ns, x: x * ns.jnp.arange(x.shape[-1], dtype=x.dtype)),
    "ref_accumulate": (2, _broadcast2, _ref_accumulate),
    "barrier_pair": (2, _broadcast2, _barrier_pair),
})
# Complex numbers inside, real values in and out: ``complex real imag conj abs angle``, complex
# elementwise math, products and reductions, and their rules under every wrapper. Each keeps its
# complex values bounded (``tanh`` before an ``exp`` or ``sin`` of an imaginary part) and away
# from ``abs``/``angle``'s singularity at 0.


def _same2(shapes, param):
    return shapes[0] if shapes[0] == shapes[1] else None


def _z(ns, x, y):
    """``x + i y`` (one shape: ``lax.complex`` does not broadcast)."""
    return ns.lax.complex(x, y)


OPS.update({
    "c_sin_real": (2, _same2, lambda ns, x, y: ns.jnp.real(ns.jnp.sin(_z(ns, x, ns.jnp.tanh(y))))),
    "c_exp_imag": (2, _same2, lambda ns, x, y: ns.jnp.imag(
        ns.jnp.exp(_z(ns, ns.jnp.tanh(x), 0.1 * y)))),
    "c_abs_product": (2, _same2, lambda ns, x, y: ns.jnp.abs(_z(ns, x, y) * _z(ns, y, x) + 0.5)),
    "c_conj_square": (2, _same2, lambda ns, x, y: ns.jnp.real(ns.jnp.conj(_z(ns, x, y))
                                                              * _z(ns, x, y))),
    "c_angle": (2, _same2, lambda ns, x, y: ns.jnp.angle(_z(ns, 1.0 + x * x, y))),
    "c_log_abs": (1, _same, lambda ns, x: ns.jnp.real(ns.jnp.log(_z(ns, x, ns.jnp.ones_like(x))))),
    "c_rotate": (2, _broadcast2, lambda ns, x, y: ns.jnp.imag(
        (x + 0.5j) * ns.jnp.exp(1j * ns.jnp.tanh(y)))),
    "c_matmul": (2, _matmul_shape, lambda ns, x, y: ns.jnp.imag(
        (x * (1.0 + 0.5j)) @ ns.jnp.conj(y * (0.3 - 1.0j) + 0.2j))),
    "c_sum_sq": (2, lambda sh, p: () if sh[0] == sh[1] else None,
                 lambda ns, x, y: ns.jnp.real(ns.jnp.sum(_z(ns, x, y) ** 2))),
})
# ``const`` (a value of the shape in its param) is never drawn: ``shrink`` puts it in place of
# statements a failure does not need, keeping every other reference valid.
OPS["const"] = (0, lambda sh, p: p, lambda ns, p: ns.jnp.full(p, 0.3))
PARAMS = {"const": None, "name": NAMES, "sum_axis": (0, 1, 2), "max_axis": (0, 1, 2),
          "logsumexp": (0, 1, 2)}
# Collectives over the named vmap axis, drawn only in programs that bind it. Not pmax/pmin
# (JAX has no derivative for them) nor pbroadcast/all_to_all (JAX 0.10 fails on some).
AXIS = "i"
COLLECTIVES = {
    "pmean": (1, _same, lambda ns, x: ns.lax.pmean(x, AXIS)),
    "psum": (1, _same, lambda ns, x: 0.5 * ns.lax.psum(x, AXIS)),
    "axis_index": (1, _same, lambda ns, x: x * (1.0 + ns.lax.axis_index(AXIS))),
    "all_gather": (1, _same, lambda ns, x: ns.jnp.mean(ns.lax.all_gather(x, AXIS), axis=0)
                   - 0.5 * x),
    "ppermute": (1, _same, lambda ns, x: ns.lax.ppermute(
        x, AXIS, [(j, (j + 1) % BATCH) for j in range(BATCH)])),
    "psum_tuple_size": (1, _same, lambda ns, x: x * ns.lax.axis_size(AXIS)
                        - ns.lax.psum(ns.jnp.tanh(x), (AXIS,))),
}
OPS.update(COLLECTIVES)
OP_NAMES = tuple(n for n in OPS if n != "const" and n not in COLLECTIVES)  # simplest first
COLLECTIVE_OP_NAMES = tuple(COLLECTIVES)


def apply_op(ns, name, vals, param):
    fn = OPS[name][2]
    return fn(ns, *vals, param) if name in PARAMS else fn(ns, *vals)


def fit(ns, v, shape):
    """``v`` made to ``shape``: itself, or its sum broadcast (a carry or a branch output must
    keep its shape)."""
    if v.shape == shape:
        return v
    return ns.jnp.broadcast_to(ns.jnp.sum(v), shape)


# --- interpretation ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Flags:
    checkpoints: bool = True
    jit: bool = True


def run_block(ns, flags, stmts, outs, env):
    """Run statements over ``env`` (a list of values, extended in place); return the outs.

    Statements:
    - ``("op", name, refs, param)``;
    - ``("call", "checkpoint"|"jit"|"custom_remat", opts, arg_refs, body, outs)``: a function
      over the values at ``arg_refs`` that also closes over everything visible; ``opts`` is
      ``(policy_spec, prevent_cse)`` for a checkpoint, the save mode for a custom_remat;
    - ``("scan", carry_ref, xs_ref, policy_spec or None, body, (carry_ref, y_ref))``: a scan
      over the leading axis of ``xs``; the body sees ``[..., carry, x]`` and its new carry is
      ``(carry + tanh(fit(value)))/2``; a policy spec checkpoints the body;
    - ``("cond", pred_ref, operand_refs, (body, outs), (body, outs))``: branch outputs are
      fitted to the operands' shapes.
    """
    for stmt in stmts:
        kind = stmt[0]
        if kind == "op":
            _, name, refs, param = stmt
            env.append(apply_op(ns, name, [env[r] for r in refs], param))
        elif kind == "call":
            env.extend(_run_call(ns, flags, stmt, env))
        elif kind == "scan":
            env.extend(_run_scan(ns, flags, stmt, env))
        elif kind == "cond":
            env.extend(_run_cond(ns, flags, stmt, env))
        else:
            raise ValueError(f"unknown statement {stmt!r}")
    return [env[r] for r in outs]


def _run_call(ns, flags, stmt, env):
    _, kind, opts, arg_refs, body, outs = stmt
    outer = tuple(env)

    def inner(*args):
        return tuple(run_block(ns, flags, body, outs, list(outer) + list(args)))

    if kind == "checkpoint" and flags.checkpoints:
        inner = ns.jax.checkpoint(inner, policy=make_policy(ns, opts[0]), prevent_cse=opts[1])
    elif kind == "jit" and flags.jit:
        inner = ns.jax.jit(inner)
    elif kind == "custom_remat" and flags.checkpoints and not ns.is_jax:
        # (its rules may not close over traced values: the enclosing block's come in as
        # arguments too)
        def explicit(*values):
            return tuple(run_block(ns, flags, body, outs, list(values)))
        return custom_remat_of(ns, explicit, opts)(*outer, *[env[r] for r in arg_refs])
    return inner(*[env[r] for r in arg_refs])


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


def _run_scan(ns, flags, stmt, env):
    _, carry_ref, xs_ref, policy, body, (c_ref, y_ref) = stmt
    outer = tuple(env)

    def step(c, x):
        inner = list(outer) + [c, x]
        new_c, y = run_block(ns, flags, body, (c_ref, y_ref), inner)
        return 0.5 * (c + ns.jnp.tanh(fit(ns, new_c, c.shape))), y

    if policy is not None and flags.checkpoints:
        step = ns.jax.checkpoint(step, policy=make_policy(ns, policy))
    if flags.checkpoints and not ns.is_jax and len(body) % 2 == 0:
        # remat's binomial checkpointing of the loop itself (JAX's scan has no such keyword):
        # K stored carries, recomputed by the revolve schedule in reverse mode
        return ns.lax.scan(step, env[carry_ref], env[xs_ref], checkpoints=1 + len(body) % 3)
    return ns.lax.scan(step, env[carry_ref], env[xs_ref])


def _run_cond(ns, flags, stmt, env):
    _, pred_ref, operand_refs, *branches = stmt
    outer = tuple(env)
    operands = [env[r] for r in operand_refs]

    def branch(body, outs):
        def run(*ops):
            vals = run_block(ns, flags, body, outs, list(outer) + list(ops))
            return tuple(fit(ns, v, o.shape) for v, o in zip(vals, ops))
        return run

    true_fn, false_fn = (branch(*b) for b in branches)
    return ns.lax.cond(ns.jnp.sum(env[pred_ref]) > 0, true_fn, false_fn, *operands)


def weights(shape, k):
    """A fixed, shape-determined array: loss weights and cotangents."""
    n = int(np.prod(shape))
    return np.cos(np.arange(n) * 0.7 + k).reshape(shape)


def tangent(shape, k):
    n = int(np.prod(shape))
    return np.sin(np.arange(n) * 1.3 + k + 0.5).reshape(shape)


def _loss(ns, outs):
    return sum(ns.jnp.sum(o * weights(o.shape, k)) for k, o in enumerate(outs))


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
            cts = tuple(weights(o.shape, k) for k, o in enumerate(out))
            return (*out, *pullback(cts))
        return vjp
    if kind == "jvp":
        def jvp(*a):
            ts = tuple(tangent(np.shape(x), k) for k, x in enumerate(a))
            out, t_out = jax.jvp(fn, a, ts)
            return (*out, *t_out)
        return jvp
    if kind == "linearize":
        def linearize(*a):
            out, f_jvp = jax.linearize(fn, *a)
            f_jvp = jax.tree_util.tree_map(lambda r: r, f_jvp)  # a Partial over residuals
            t_out = f_jvp(*(tangent(np.shape(x), k) for k, x in enumerate(a)))
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
            return 0.5 * (c + jnp.tanh(fit(ns, mixed, c.shape))), outs

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
            return tuple(x + 0.25 * jnp.tanh(fit(ns, mixed, x.shape) + i) for x in xs)
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
    return [rng.standard_normal(s) for s in input_shapes(program)]


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
STMT_KINDS = ("op", "op", "op", "call", "op", "scan", "op", "cond")
WRAPPERS = ("grad", "jit", "vmap", "scan", "value_and_grad", "cond", "vjp", "jvp",
            "linearize", "fori", "checkpoint")
BUDGETS = (0.0, 0.3, 0.7, 1.0)  # fractions: every one is feasible


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


def draw_refs(ch, shapes, lo, hi):
    n = ch.integer(lo, min(hi, len(shapes)))
    return tuple(ch.choice(tuple(range(len(shapes) - 1, -1, -1))) for _ in range(n))


def draw_op(ch, shapes, named=False):
    """An op over earlier values (the most recent first, so chains are likely) whose shapes
    fit it; ``sin`` of the last value when none do. In a ``named`` program one op in four is
    a collective over ``AXIS``."""
    name = ch.choice(COLLECTIVE_OP_NAMES if named and ch.integer(0, 3) == 0 else OP_NAMES)
    arity, shape_fn, _ = OPS[name]
    param = ch.choice(PARAMS[name]) if name in PARAMS else None
    recent_first = range(len(shapes) - 1, -1, -1)
    if arity == 1:
        pairs = [(i,) for i in recent_first]
    else:
        pairs = [(i, j) for i in recent_first for j in recent_first]
    fits = [refs for refs in pairs
            if shape_fn(tuple(shapes[r] for r in refs), param) is not None]
    if not fits:
        return ("op", "sin", (len(shapes) - 1,), None), shapes[-1]
    first = ch.choice(tuple(dict.fromkeys(refs[0] for refs in fits)))
    refs = ch.choice(tuple(refs for refs in fits if refs[0] == first))
    return ("op", name, refs, param), shape_fn(tuple(shapes[r] for r in refs), param)


CALL_KINDS = ("checkpoint", "checkpoint", "jit", "custom_remat")


def draw_block(ch, shapes, n, depth, named=False):
    """``n`` statements over values of ``shapes`` (extended in place); collectives only in a
    ``named`` program, and never in a cond's branches (see ``draw_program``)."""
    stmts = []
    for _ in range(n):
        kind = ch.choice(STMT_KINDS) if depth < 2 else "op"
        if kind == "op":
            stmt, shape = draw_op(ch, shapes, named)
            stmts.append(stmt)
            shapes.append(shape)
        elif kind == "call":
            call = ch.choice(CALL_KINDS)
            opts = {"checkpoint": lambda: (draw_policy(ch), bool(ch.integer(0, 1))),
                    "jit": lambda: None,
                    "custom_remat": lambda: ch.choice(("none", "outs", "policy"))}[call]()
            args = draw_refs(ch, shapes, 0, 3)
            inner = shapes + [shapes[r] for r in args]
            body = draw_block(ch, inner, ch.integer(1, 4), depth + 1, named)
            outs = draw_refs(ch, inner, 1, 2)
            stmts.append(("call", call, opts, args, tuple(body), outs))
            shapes.extend(inner[r] for r in outs)
        elif kind == "scan":
            xs_candidates = [i for i in range(len(shapes) - 1, -1, -1) if shapes[i]]
            if not xs_candidates:
                continue
            carry = ch.choice(tuple(range(len(shapes) - 1, -1, -1)))
            xs = ch.choice(xs_candidates)
            policy = ch.choice((None, "draw")) and draw_policy(ch)
            inner = shapes + [shapes[carry], shapes[xs][1:]]
            body = draw_block(ch, inner, ch.integer(1, 4), depth + 1, named)
            c_ref, y_ref = draw_refs(ch, inner, 2, 2)
            stmts.append(("scan", carry, xs, policy, tuple(body), (c_ref, y_ref)))
            shapes.extend([shapes[carry], (shapes[xs][0],) + inner[y_ref]])
        else:
            pred = ch.choice(tuple(range(len(shapes) - 1, -1, -1)))
            operands = draw_refs(ch, shapes, 1, 2)
            branches = []
            for _ in range(2):
                inner = shapes + [shapes[r] for r in operands]
                body = draw_block(ch, inner, ch.integer(0, 3), depth + 1)
                outs = tuple(ch.choice(tuple(range(len(inner) - 1, -1, -1)))
                             for _ in operands)
                branches.append((tuple(body), outs))
            stmts.append(("cond", pred, operands, *branches))
            shapes.extend(shapes[r] for r in operands)
    return stmts


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
    if named:
        axes = draw_wrapper_vmap(ch, arg_shapes)
        at = ch.integer(0, len(wrappers))
        # inside the named vmap no cond wrapper: its predicate varies over the axis, and JAX
        # 0.10 then drops a collective's cotangent for the members of the other branch
        wrappers = wrappers[:at] + [axes + (AXIS,)] + [w for w in wrappers[at:]
                                                        if w[0] != "cond"]
    return Program(tuple(arg_shapes), tuple(body), outs, tuple(wrappers),
                   ch.integer(0, 2 ** 16))


# --- the checks -------------------------------------------------------------------------------


class Disagreement(AssertionError):
    pass


def _run(program, ns, flags, args):
    return [np.asarray(o) for o in build(program, ns, flags)(*args)]


def assert_same(program, what, got, want, rtol, atol):
    if len(got) != len(want):
        raise Disagreement(f"{what}: {len(got)} outputs vs {len(want)}\n{program!r}")
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            raise Disagreement(f"{what}: output {k} shape {g.shape} vs {w.shape}\n{program!r}")
        if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            raise Disagreement(f"{what}: output {k} differs (max abs diff "
                               f"{np.max(np.abs(g - w)):.3g})\n{g}\nvs\n{w}\n{program!r}")


def has_loop(program):
    """The program runs a scan or a fori loop (what the native loop tier compiles)."""
    def walk(body):
        return any(stmt[0] == "scan" or (stmt[0] in ("call", "scan") and walk(stmt[4]))
                   or (stmt[0] == "cond" and any(walk(b) for b, _ in stmt[3:]))
                   for stmt in body)
    return walk(program.body) or any(w[0] in ("scan", "fori") for w in program.wrappers)


def check_native(program, remat_ns):
    """The native loop tier (every loop of the program compiled) agrees with the Python tier."""
    args = inputs(program)
    with config.override("remat_native_loops", False):
        want = _run(program, remat_ns, Flags(), args)
    with config.override("remat_native_loops", True), native.eager():
        got = _run(program, remat_ns, Flags(), args)
    assert_same(program, "native vs Python loops", got, want, 1e-9, 1e-12)


def check_program(program, remat_ns, jax_ns=None):
    """Run the four checks (the JAX one when ``jax_ns`` is given); raise ``Disagreement`` on
    any difference. An exception from remat propagates (``fuzz_campaign`` counts it as a
    failure unless JAX rejects the program too)."""
    args = inputs(program)
    got = _run(program, remat_ns, Flags(), args)
    plain = _run(program, remat_ns, Flags(checkpoints=False), args)
    assert_same(program, "with vs without checkpoints", got, plain, 1e-10, 1e-12)
    eager = _run(program, remat_ns, Flags(jit=False), args)
    assert_same(program, "jit vs eager", got, eager, 1e-10, 1e-12)
    with interpreted():
        stepwise = _run(program, remat_ns, Flags(), args)
    assert_same(program, "generated vs interpreted plans", got, stepwise, 0, 0)
    if jax_ns is not None:
        with jax_ns.jax.disable_jit():
            want = _run(program, jax_ns, Flags(), args)
        assert_same(program, "remat vs JAX", got, want, 1e-7, 1e-9)


def jax_rejects(program, jax_ns):
    """JAX raises on the program (it was drawn outside what both systems accept)."""
    try:
        with jax_ns.jax.disable_jit():
            _run(program, jax_ns, Flags(), inputs(program))
    except Exception:
        return True
    return False


# --- shrinking a campaign's failure -----------------------------------------------------------


def stmt_shapes(stmt, shapes):
    """The shapes of the values ``stmt`` adds to an environment of ``shapes``."""
    kind = stmt[0]
    if kind == "op":
        return [OPS[stmt[1]][1](tuple(shapes[r] for r in stmt[2]), stmt[3])]
    if kind == "call":
        inner = shapes + [shapes[r] for r in stmt[3]]
        for s in stmt[4]:
            inner += stmt_shapes(s, inner)
        return [inner[r] for r in stmt[5]]
    if kind == "scan":
        inner = shapes + [shapes[stmt[1]], shapes[stmt[2]][1:]]
        for s in stmt[4]:
            inner += stmt_shapes(s, inner)
        return [shapes[stmt[1]], (shapes[stmt[2]][0],) + inner[stmt[5][1]]]
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
        if kind in ("call", "scan"):
            inner = shapes + ([shapes[r] for r in stmt[3]] if kind == "call"
                              else [shapes[stmt[1]], shapes[stmt[2]][1:]])
            for b in _simpler_bodies(stmt[4], inner):
                yield body[:i] + (stmt[:4] + (b,) + stmt[5:],) + body[i + 1:]
        elif kind == "cond":
            inner = shapes + [shapes[r] for r in stmt[2]]
            for k in (3, 4):
                for b in _simpler_bodies(stmt[k][0], inner):
                    new = list(stmt)
                    new[k] = (b, stmt[k][1])
                    yield body[:i] + (tuple(new),) + body[i + 1:]
        if kind == "call" and stmt[2] is not None and stmt[2][0] != ("default",):
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
    program = _drop_unused_tail(program)
    progress = True
    while progress:
        progress = False
        for candidate in _candidates(program):
            if fails(candidate):
                program, progress = _drop_unused_tail(candidate), True
                break
    return program

