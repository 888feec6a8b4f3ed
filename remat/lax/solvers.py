"""Implicitly differentiated solvers: ``custom_linear_solve`` (the ``linear_solve_p``
primitive, carrying the jaxprs of ``matvec``, its transpose ``vecmat``, ``solve`` and
``transpose_solve``) and ``custom_root`` (a ``custom_jvp`` through the implicit function
theorem) — as JAX's.

Derivatives never go through the solver: the JVP of ``x = A^-1 b`` solves again for
``b_dot - A_dot x``, and the transpose solves with ``A^T`` (``transpose_solve``), so a solver
written with ``while_loop`` (not reverse-differentiable by itself) differentiates in both
modes. The jaxprs take their closed-over values as leading operands (``const_lengths`` of
them each), so derivatives with respect to those flow too.
"""

import functools
from typing import NamedTuple

from remat import core
from remat.api_util import flatten_fun_nokwargs, fun_name
from remat.core import ClosedJaxpr, Primitive
from remat.custom_derivatives import custom_jvp
from remat.interpreters import ad, batching
from remat.interpreters import partial_eval as pe
from remat.lax.elementwise import neg
from remat.lax.shape import full_like
from remat.tree_util import tree_flatten, tree_unflatten

__all__ = ["custom_linear_solve", "custom_root", "linear_solve_p"]


def _trace(fun, tree, avals, what):
    """``fun(x)`` for ``x`` a pytree of structure ``tree`` with leaves of ``avals``, traced:
    ``(ClosedJaxpr taking the closed-over values then x's leaves, those values, out tree)``."""
    store = {}

    def flat_fun(*leaves):
        out = fun(tree_unflatten(tree, list(leaves)))
        flat_out, store["tree"] = tree_flatten(out)
        return flat_out

    closed = pe.trace_to_jaxpr(flat_fun, list(avals), core.DebugInfo(fun_name(fun), [], what))
    return (ClosedJaxpr(pe.convert_constvars_jaxpr(closed.jaxpr), []), list(closed.consts),
            store["tree"])


def _run(closed, *args):
    return core.eval_jaxpr(closed.jaxpr, closed.consts, *args)


def _checked(fun, name, expected_name, tree, shapes, has_aux=False):
    """``fun`` whose output (its first element, with ``has_aux``) must be a pytree of
    structure ``tree`` with leaves of ``shapes`` (TypeError / ValueError as JAX's)."""

    def checked(x):
        out = fun(x)
        if has_aux:
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise ValueError(f"{name}() must return a pair of output and auxiliary data "
                                 f"because has_aux=True.")
            main = out[0]
        else:
            main = out
        leaves, out_tree = tree_flatten(main)
        if out_tree != tree:
            raise TypeError(f"{name}() output pytree structure must match {expected_name}, "
                            f"got {out_tree} and {tree}.")
        got = [core.get_aval(v).shape for v in leaves]
        if got != shapes:
            raise ValueError(f"{name}() output shapes must match {expected_name}, got {got} "
                             f"and {shapes}")
        return out

    return checked


# --- custom_linear_solve ---------------------------------------------------------------------


class _LinearSolveTuple(NamedTuple):
    matvec: object
    vecmat: object
    solve: object
    transpose_solve: object

    def transpose(self):
        return type(self)(self.vecmat, self.matvec, self.transpose_solve, self.solve)


def _split(args, const_lengths):
    parts, start = [], 0
    for n in const_lengths:
        parts.append(list(args[start:start + n]))
        start += n
    return _LinearSolveTuple(*parts), list(args[start:])


def _flatten(groups):
    return [x for group in groups for x in group]


def _linear_solve_abstract_eval(*avals, const_lengths, jaxprs):
    b = list(avals[sum(const_lengths):])
    return b + list(jaxprs.solve.out_avals[len(b):])


def _linear_solve_impl(*args, const_lengths, jaxprs):
    params, b = _split(args, const_lengths)
    with core.set_current_trace(core.eval_trace):
        outs = _run(jaxprs.solve, *params.solve, *b)
    return [core.to_numpy(o) for o in outs]


linear_solve_p = Primitive("custom_linear_solve")
linear_solve_p.multiple_results = True
linear_solve_p.def_impl(_linear_solve_impl)
linear_solve_p.def_abstract_eval(_linear_solve_abstract_eval)


def _linear_solve_jvp(primals, tangents, const_lengths, jaxprs):
    params_kw = dict(const_lengths=const_lengths, jaxprs=jaxprs)
    x = linear_solve_p.bind(*primals, **params_kw)
    params, _ = _split(primals, const_lengths)
    params_dot, b_dot = _split(tangents, const_lengths)
    n = len(b_dot)
    rhs = list(b_dot)
    if any(type(t) is not ad.Zero for t in params_dot.matvec):
        # x_dot = A^-1 (b_dot - A_dot x): the matvec's tangent in its closed-over values
        zeros = [ad.Zero.from_primal_value(v) for v in x[:n]]
        _, a_dot_x = ad.jvp_flat(lambda *a: _run(jaxprs.matvec, *a),
                                 params.matvec + list(x[:n]), params_dot.matvec + zeros)
        rhs = [ad.add_tangents(b, neg(m)) if type(m) is not ad.Zero else b
               for b, m in zip(rhs, a_dot_x)]
    aux_zeros = [ad.Zero.from_primal_value(a) for a in x[n:]]
    if all(type(t) is ad.Zero for t in rhs):
        return x, [ad.Zero.from_primal_value(v) for v in x[:n]] + aux_zeros
    x_dot = linear_solve_p.bind(*_flatten(params), *[ad.instantiate_zeros(t) for t in rhs],
                                **params_kw)
    return x, list(x_dot[:n]) + aux_zeros


def _linear_solve_transpose(cts, *primals, const_lengths, jaxprs):
    if jaxprs.transpose_solve is None:
        raise TypeError("transpose_solve required for backwards mode automatic "
                        "differentiation of custom_linear_solve")
    params, b = _split(primals, const_lengths)
    if any(ad.is_undefined_primal(p) for p in _flatten(params)):
        raise ValueError("custom_linear_solve is linear in b only: its transpose needs the "
                         "values the matvec and solvers close over")
    x_cts = [ad.instantiate_zeros(c) for c in cts[:len(b)]]
    b_cts = linear_solve_p.bind(*_flatten(params.transpose()), *x_cts,
                                const_lengths=const_lengths.transpose(),
                                jaxprs=jaxprs.transpose())
    return [None] * sum(const_lengths) + list(b_cts[:len(b)])


def _linear_solve_batch(vals, dims, const_lengths, jaxprs):
    """Batch the four jaxprs together: which of x and b are batched is a fixed point, since
    each solve's output feeds the matvec's input and back."""
    size = batching.axis_size_of(vals, dims)
    batched = [d is not batching.not_mapped for d in dims]
    params_bat, orig_b_bat = _split(batched, const_lengths)
    matvec, vecmat, solve, solve_t = jaxprs
    n_out = len(matvec.out_avals)
    num_aux = len(solve.out_avals) - n_out
    b_bat, x_bat = list(orig_b_bat), [False] * len(solve.out_avals)
    for _ in range(2 + len(orig_b_bat) + len(solve.out_avals)):
        solve_b, solve_x_bat = batching.batch_jaxpr(
            solve, size, tuple(params_bat.solve + b_bat), tuple(x_bat))
        if vecmat is None:
            vecmat_b, x_bat_out = None, list(solve_x_bat)
        else:
            vecmat_b, vecmat_x_bat = batching.batch_jaxpr(
                vecmat, size, tuple(params_bat.vecmat + b_bat), tuple(b_bat))
            x_bat_out = [a or s for a, s in
                         zip(list(vecmat_x_bat) + [True] * num_aux, solve_x_bat)]
        x_noaux = x_bat_out[:n_out]
        matvec_b, matvec_b_bat = batching.batch_jaxpr(
            matvec, size, tuple(params_bat.matvec + x_noaux), tuple(b_bat))
        if solve_t is None:
            solve_t_b = None
            b_bat_out = [m or o for m, o in zip(matvec_b_bat, orig_b_bat)]
        else:
            solve_t_b, solve_t_bat = batching.batch_jaxpr(
                solve_t, size, tuple(params_bat.transpose_solve + x_noaux), tuple(x_bat_out))
            b_bat_out = [m or s or o for m, s, o in
                         zip(matvec_b_bat, solve_t_bat[:len(orig_b_bat)], orig_b_bat)]
        if x_bat_out == x_bat and b_bat_out == b_bat:
            break
        x_bat, b_bat = x_bat_out, b_bat_out
    else:
        raise AssertionError("batching custom_linear_solve: no fixed point")
    params, b = _split(vals, const_lengths)
    params_dims, b_dims = _split(dims, const_lengths)
    new_params = [x if d is batching.not_mapped else batching.moveaxis(x, d, 0)
                  for x, d in zip(_flatten(params), _flatten(params_dims))]
    new_b = [batching.bdim_at_front(x, d, size) if now else x
             for x, d, now in zip(b, b_dims, b_bat)]
    outs = linear_solve_p.bind(*new_params, *new_b, const_lengths=const_lengths,
                               jaxprs=_LinearSolveTuple(matvec_b, vecmat_b, solve_b, solve_t_b))
    return outs, [0 if bat else batching.not_mapped for bat in solve_x_bat]


ad.primitive_jvps[linear_solve_p] = _linear_solve_jvp
ad.primitive_transposes[linear_solve_p] = _linear_solve_transpose
batching.primitive_batchers[linear_solve_p] = _linear_solve_batch


def _transpose_of(matvec_jaxpr, matvec_consts, tree, b_avals):
    """``vecmat``, the transpose of the linear ``matvec`` (by transposing its jaxpr)."""
    nc = len(matvec_consts)
    linear = (False,) * nc + (True,) * len(b_avals)
    transposed = ad.transpose_jaxpr(matvec_jaxpr, linear, (True,) * len(b_avals))

    def vecmat(y):
        leaves, y_tree = tree_flatten(y)
        if y_tree != tree:
            raise TypeError(f"vecmat called on a pytree of structure {y_tree}, expected {tree}")
        return tree_unflatten(tree, _run(transposed, *matvec_consts, *leaves))

    return vecmat


def custom_linear_solve(matvec, b, solve, transpose_solve=None, symmetric=False, has_aux=False):
    """``solve(matvec, b)``, differentiated implicitly: as the solution ``x`` of
    ``matvec(x) == b`` rather than through ``solve``. ``transpose_solve(vecmat, b)`` (or
    ``solve`` when ``symmetric``) solves the transposed system, for reverse mode."""
    if transpose_solve is None and symmetric:
        transpose_solve = solve
    b_leaves, tree = tree_flatten(b)
    b_avals = [core.get_aval(x) for x in b_leaves]
    shapes = [a.shape for a in b_avals]
    matvec_jaxpr, matvec_consts, _ = _trace(_checked(matvec, "matvec", "b", tree, shapes),
                                            tree, b_avals, "custom_linear_solve")
    solve_jaxpr, solve_consts, out_tree = _trace(
        _checked(functools.partial(solve, matvec), "solve", "b", tree, shapes, has_aux), tree,
        b_avals, "custom_linear_solve solve")
    if transpose_solve is None:
        vecmat_jaxpr = tr_solve_jaxpr = None
        vecmat_consts, tr_solve_consts = [], []
    else:
        if symmetric:
            vecmat = matvec
            vecmat_jaxpr, vecmat_consts = matvec_jaxpr, matvec_consts
        else:
            vecmat = _transpose_of(matvec_jaxpr, matvec_consts, tree, b_avals)
            vecmat_jaxpr, vecmat_consts, _ = _trace(vecmat, tree, b_avals,
                                                    "custom_linear_solve transpose_solve")
        tr_solve_jaxpr, tr_solve_consts, _ = _trace(
            _checked(functools.partial(transpose_solve, vecmat), "transpose_solve", "b", tree,
                     shapes, has_aux), tree, b_avals, "custom_linear_solve transpose_solve")
    consts = [matvec_consts, vecmat_consts, solve_consts, tr_solve_consts]
    const_lengths = _LinearSolveTuple(*map(len, consts))
    jaxprs = _LinearSolveTuple(matvec_jaxpr, vecmat_jaxpr, solve_jaxpr, tr_solve_jaxpr)
    outs = linear_solve_p.bind(*_flatten(consts), *b_leaves, const_lengths=const_lengths,
                               jaxprs=jaxprs)
    return tree_unflatten(out_tree, outs)


# --- custom_root -----------------------------------------------------------------------------


class _RootTuple(NamedTuple):
    f: object
    solve: object
    l_and_s: object


def _split_root(args, const_lengths):
    parts, start = [], 0
    for n in const_lengths:
        parts.append(list(args[start:start + n]))
        start += n
    return _RootTuple(*parts), list(args[start:])


@functools.partial(custom_jvp, nondiff_argnums=(0, 1))
def _custom_root(const_lengths, jaxprs, *args):
    params, guess = _split_root(args, const_lengths)
    return _run(jaxprs.solve, *params.solve, *guess)


@_custom_root.defjvp
def _root_jvp(const_lengths, jaxprs, primals, tangents):
    """By the implicit function theorem, ``f(x*(p), p) = 0`` gives
    ``x*_dot = -(df/dx)^-1 (df/dp p_dot)``: ``tangent_solve`` applies ``(df/dx)^-1``."""
    params, _ = _split_root(primals, const_lengths)
    solution = _custom_root(const_lengths, jaxprs, *primals)
    n = len(jaxprs.f.out_avals)
    solution, aux = list(solution[:n]), list(solution[n:])
    params_dot, _ = _split_root(tangents, const_lengths)
    _, rhs = ad.jvp_flat(lambda *p: _run(jaxprs.f, *p, *solution), params.f,
                         [ad.instantiate_zeros(t) for t in params_dot.f])
    rhs = [ad.instantiate_zeros(r) for r in rhs]
    solution_dot = [neg(v) for v in _run(jaxprs.l_and_s, *params.l_and_s, *solution, *rhs)]
    return solution + aux, solution_dot + [full_like(a, 0) for a in aux]


def _linearized(f, x):
    """``f``'s linear map at ``x``, as ``remat.linearize(f, x)[1]`` (the forward pass traced
    once, the map holding only residuals), from the interpreter below the user API."""
    flat_x, tree = tree_flatten((x,))
    flat_f, store = flatten_fun_nokwargs(f, tree)
    outs, linear, out_nonzero = ad.linearize_flat(flat_f, flat_x)
    out_avals = [core.get_aval(o).to_tangent_aval() for o in outs]

    def f_jvp(t):
        lin_outs = iter(core.eval_jaxpr(linear.jaxpr, linear.consts, *tree_flatten(t)[0]))
        flat = [next(lin_outs) if nz else ad.instantiate_zeros(ad.Zero(a))
                for nz, a in zip(out_nonzero, out_avals)]
        return tree_unflatten(store.tree, flat)

    return f_jvp


def custom_root(f, initial_guess, solve, tangent_solve, has_aux=False):
    """``solve(f, initial_guess)``, a root of ``f``, differentiated implicitly with respect to
    the values ``f`` closes over; ``tangent_solve(g, y)`` solves the linear ``g(x) = y`` for
    ``g``, ``f`` linearized at the root."""
    guess_leaves, tree = tree_flatten(initial_guess)
    avals = [core.get_aval(x) for x in guess_leaves]
    shapes = [a.shape for a in avals]
    f_jaxpr, f_consts, _ = _trace(_checked(f, "f", "initial_guess", tree, shapes), tree, avals,
                                  "custom_root")
    solve_jaxpr, solve_consts, solution_tree = _trace(
        _checked(functools.partial(solve, f), "solve", "initial_guess", tree, shapes, has_aux),
        tree, avals, "custom_root solve")

    def linearize_and_solve(pair):
        x, b = pair
        f_jvp = _linearized(f, x)
        return tangent_solve(f_jvp, b)

    pair_leaves, pair_tree = tree_flatten((initial_guess, initial_guess))
    l_and_s_jaxpr, l_and_s_consts, _ = _trace(
        _checked(linearize_and_solve, "tangent_solve", "x", tree, shapes), pair_tree,
        [core.get_aval(x) for x in pair_leaves], "custom_root tangent_solve")
    consts = [f_consts, solve_consts, l_and_s_consts]
    const_lengths = _RootTuple(*map(len, consts))
    jaxprs = _RootTuple(f_jaxpr, solve_jaxpr, l_and_s_jaxpr)
    solution = _custom_root(const_lengths, jaxprs, *_flatten(consts), *guess_leaves)
    return tree_unflatten(solution_tree, solution)

