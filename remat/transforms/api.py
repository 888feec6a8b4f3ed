"""The user-facing transformations."""

import contextlib
import functools

from remat import array, core, dtypes, lax, named_axes, source_info
from remat.api_util import (
    ShapeDtypeStruct,
    abstractify,
    arg_names,
    check_callable,
    flatten_fun,
    flatten_fun_nokwargs,
    fun_name,
    fun_sourceinfo,
    normalize_argnums,
    split_static,
    wrap_transformed,
)
from remat.config import config
from remat.interpreters import ad, batching
from remat.interpreters import partial_eval as pe
from remat.transforms.jit import jit
from remat.tree_util import (
    Partial,
    keystr,
    register_pytree_node,
    tree_flatten,
    tree_flatten_with_path,
    tree_map,
    tree_structure,
    tree_transpose,
    tree_unflatten,
)


def _trace_user_fun(fun, args, kwargs, static_argnums, traced_for):
    """Stage ``fun`` at the avals of ``args``: (ClosedJaxpr, output tree)."""
    label = f"{traced_for} of {fun_name(fun)}"
    static = normalize_argnums(static_argnums, len(args), label)
    dyn_args, dyn_fun = split_static(fun, args, static)
    flat_args, in_tree = tree_flatten((dyn_args, kwargs))
    names = arg_names(fun, args, kwargs, static)
    in_avals = [abstractify(x, n) for x, n in zip(flat_args, names)]
    flat_fun, store = flatten_fun(dyn_fun, in_tree)
    debug = core.DebugInfo(fun_name(fun), names, traced_for, fun_sourceinfo(fun))
    closed = pe.trace_to_jaxpr(flat_fun, in_avals, debug)
    return closed, store.tree


def make_jaxpr(fun, static_argnums=(), return_shape=False, axis_env=None):
    """``make_jaxpr(f)(*args)``: the ClosedJaxpr of ``f`` at the shapes of ``args``;
    ``axis_env`` (``[(name, size), ...]``) binds named axes for its collectives."""
    check_callable(fun)

    def make_jaxpr_f(*args, **kwargs):
        with contextlib.ExitStack() as axes:
            for name, size in axis_env or ():
                axes.enter_context(named_axes.extend_axis_env(name, size))
            closed, out_tree = _trace_user_fun(fun, args, kwargs, static_argnums, "make_jaxpr")
        if return_shape:
            shapes = [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in closed.out_avals]
            return closed, tree_unflatten(out_tree, shapes)
        return closed

    make_jaxpr_f.__name__ = f"make_jaxpr({fun_name(fun)})"
    return make_jaxpr_f


def eval_shape(fun, *args, **kwargs):
    """The output shapes/dtypes of ``fun(*args, **kwargs)`` without computing anything."""
    check_callable(fun)
    closed, out_tree = _trace_user_fun(fun, args, kwargs, (), "eval_shape")
    shapes = [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in closed.out_avals]
    return tree_unflatten(out_tree, shapes)


# --- forward mode ----------------------------------------------------------------------------


def _check_tangent(p, t, name):
    p_aval, t_aval = core.get_aval(p), core.get_aval(t)
    if p_aval.shape != t_aval.shape:
        raise ValueError(f"{name} called with different primal and tangent shapes;"
                         f"Got primal shape {p_aval.shape} and tangent shape as "
                         f"{t_aval.shape}")
    expected = p_aval.to_tangent_aval().dtype
    if t_aval.dtype != expected:
        raise TypeError(f"{name} called with inconsistent primal and tangent dtypes; primal "
                        f"dtype {p_aval.dtype.name} requires tangent dtype {expected.name}, "
                        f"got {t_aval.dtype.name}")


def _tangent_in(p, t):
    """Integer and boolean inputs have float0 tangents: symbolically zero."""
    if dtypes.kind(core.get_aval(p).dtype) not in "fc":
        return ad.Zero(core.get_aval(p).to_tangent_aval())
    return t


def jvp(fun, primals, tangents, has_aux=False):
    """``(fun(*primals), J·tangents)`` (and the aux output with ``has_aux``)."""
    check_callable(fun)
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("primal and tangent arguments to jvp must be tuples or lists; found "
                        f"{type(primals).__name__} and {type(tangents).__name__}.")
    flat_p, tree_p = tree_flatten(tuple(primals))
    flat_t, tree_t = tree_flatten(tuple(tangents))
    if tree_p != tree_t:
        raise TypeError(f"primal and tangent arguments to jvp must have the same tree "
                        f"structure; primals have tree structure {tree_p} whereas tangents "
                        f"have tree structure {tree_t}.")
    for p, t in zip(flat_p, flat_t):
        _check_tangent(p, t, "jvp")
    flat_fun, store = flatten_fun_nokwargs(fun, tree_p, has_aux)
    outs, out_tangents = ad.jvp_flat(flat_fun, flat_p,
                                     [_tangent_in(p, t) for p, t in zip(flat_p, flat_t)])
    n = store.num_out
    # (as JAX: an output the function passes through is returned as it came, a Python float
    # as a Python float; zero tangents are made arrays)
    out = tree_unflatten(store.tree, outs[:n])
    tangent = tree_unflatten(store.tree, [ad.instantiate_zeros(t) for t in out_tangents[:n]])
    if has_aux:
        return out, tangent, store.aux(outs[n:])
    return out, tangent


def linearize(fun, *primals, has_aux=False):
    """``(fun(*primals), f_jvp)`` where ``f_jvp`` evaluates the linearized function: the
    forward pass runs once now; ``f_jvp`` holds only the residuals. As JAX's, ``f_jvp`` is a
    ``tree_util.Partial`` (its leaves are the residuals) whose ``func.args[0]`` is the linear
    jaxpr, with the residuals as its constvars."""
    check_callable(fun)
    flat_p, tree_p = tree_flatten(primals)
    flat_fun, store = flatten_fun_nokwargs(fun, tree_p, has_aux)
    outs, linear, out_nonzero = ad.linearize_flat(flat_fun, flat_p)
    n = store.num_out
    in_avals = tuple(core.get_aval(p).to_tangent_aval() for p in flat_p)
    out_avals = tuple(core.get_aval(o).to_tangent_aval() for o in outs[:n])
    lifted = _Unmerged(functools.partial(_lift_linearized, linear.jaxpr, in_avals, tree_p,
                                         out_avals, store.tree, tuple(out_nonzero[:n])))
    f_jvp = Partial(lifted, list(linear.consts))
    out = tree_unflatten(store.tree, outs[:n])
    if has_aux:
        return out, f_jvp, store.aux(outs[n:])
    return out, f_jvp


class _Unmerged:
    """A ``functools.partial`` that a ``Partial`` over it keeps as its ``func`` (instead of
    merging the two argument lists), so ``f_jvp.func.args`` are the static ones."""

    __slots__ = ("partial",)

    def __init__(self, partial):
        self.partial = partial

    def __call__(self, *args, **kwargs):
        return self.partial(*args, **kwargs)

    func = property(lambda self: self.partial.func)
    args = property(lambda self: self.partial.args)
    keywords = property(lambda self: self.partial.keywords)

    def __repr__(self):
        return repr(self.partial)


def _lift_linearized(jaxpr, in_avals, in_tree, out_avals, out_tree, out_nonzero, consts,
                     *tangents):
    """The linearized function at the residuals ``consts``, applied to ``tangents``."""
    flat_t, tree_t = tree_flatten(tangents)
    if tree_t != in_tree:
        raise TypeError(f"linearized function called on tangents with tree structure "
                        f"{tree_t}, but the primals had structure {in_tree}")
    for a, t in zip(in_avals, flat_t):
        _check_tangent_aval(a, t)
    lin_outs = iter(core.eval_jaxpr(jaxpr, consts, *flat_t))
    flat_out = [next(lin_outs) if nz else ad.instantiate_zeros(ad.Zero(a))
                for nz, a in zip(out_nonzero, out_avals)]
    return tree_unflatten(out_tree, flat_out)


def _check_tangent_aval(aval, t):
    t_aval = core.get_aval(t)
    if t_aval.shape != aval.shape or t_aval.dtype != aval.dtype:
        raise ValueError(f"linearized function called on tangent of type "
                         f"{t_aval.str_short()}, expected {aval.str_short()}")


# --- reverse mode ----------------------------------------------------------------------------


class _VJP:
    """The pullback returned by ``vjp``: holds only the linear jaxpr and its residuals. A
    pytree whose leaves are the residuals (as JAX's), so it can leave ``jit`` and
    ``make_jaxpr``, be flattened and rebuilt."""

    def __init__(self, linear, out_nonzero, out_avals, out_tree, in_avals, in_tree):
        self.linear = linear
        self.out_nonzero = out_nonzero
        self.out_avals = out_avals
        self.out_tree = out_tree
        self.in_avals = in_avals
        self.in_tree = in_tree

    def __call__(self, cotangent):
        return self.apply(cotangent, consume=False)

    jaxpr = property(lambda self: self.linear.jaxpr, doc="the linear (backward) jaxpr")
    residuals = property(lambda self: list(self.linear.consts))

    def _flatten(self):
        if self.linear is None:
            raise RuntimeError("this pullback was already consumed by its single use")
        return list(self.linear.consts), (self.linear.jaxpr, tuple(self.out_nonzero),
                                          tuple(self.out_avals), self.out_tree,
                                          tuple(self.in_avals), self.in_tree)

    @classmethod
    def _unflatten(cls, aux, residuals):
        jaxpr, out_nonzero, out_avals, out_tree, in_avals, in_tree = aux
        return cls(core.ClosedJaxpr(jaxpr, list(residuals)), list(out_nonzero),
                   list(out_avals), out_tree, list(in_avals), in_tree)

    def apply(self, cotangent, consume):
        """Run the backward pass; ``consume`` releases the residuals as they are used (the
        pullback cannot be called again)."""
        if self.linear is None:
            raise RuntimeError("this pullback was already consumed by its single use")
        flat_ct, ct_tree = tree_flatten(cotangent)
        if ct_tree != self.out_tree:
            raise TypeError(f"Tree structure of cotangent input {ct_tree}, does not match "
                            f"structure of primal output {self.out_tree}.")
        for a, ct in zip(self.out_avals, flat_ct):
            ct_aval = core.get_aval(ct)
            if ct_aval.shape != a.shape:
                raise ValueError(f"Shape of cotangent input to vjp pullback function "
                                 f"{ct_aval.shape} must be the same as the shape of "
                                 f"corresponding primal input {a.shape}.")
        cts = [ct for ct, nz in zip(flat_ct, self.out_nonzero) if nz]
        linear = self.linear
        consts = list(linear.consts)
        if consume:
            self.linear = None
            linear = core.ClosedJaxpr(linear.jaxpr, [None] * len(consts))
        args = [ad.UndefinedPrimal(a) for a in self.in_avals]
        cts_in = ad.backward_pass(linear.jaxpr, consts, args, cts, consume_consts=consume)
        del consts
        flat = [_weak_like(ad.instantiate_zeros(c), a) for c, a in zip(cts_in, self.in_avals)]
        return tree_unflatten(self.in_tree, flat)


register_pytree_node(_VJP, _VJP._flatten, _VJP._unflatten)


def _weak_like(ct, aval):
    """A cotangent has its primal's type, weak type included (as in JAX)."""
    if getattr(aval, "weak_type", False) and not core.get_aval(ct).weak_type:
        return lax.convert_element_type(ct, aval.dtype, weak_type=True)
    return ct


def _vjp(fun, primals, has_aux):
    flat_p, tree_p = tree_flatten(primals)
    flat_fun, store = flatten_fun_nokwargs(fun, tree_p, has_aux)
    outs, linear, out_nonzero = ad.linearize_flat(flat_fun, flat_p)
    n = store.num_out
    in_avals = [core.get_aval(p).to_tangent_aval() for p in flat_p]
    out_avals = [core.get_aval(o) for o in outs[:n]]
    pullback = _VJP(linear, out_nonzero[:n], out_avals, store.tree, in_avals, tree_p)
    aux = store.aux(outs[n:]) if has_aux else None
    return tree_unflatten(store.tree, outs[:n]), pullback, aux


def vjp(fun, *primals, has_aux=False):
    """``(fun(*primals), f_vjp)``: ``f_vjp(ct)`` is the cotangent of the inputs."""
    check_callable(fun)
    out, pullback, aux = _vjp(fun, primals, has_aux)
    return (out, pullback, aux) if has_aux else (out, pullback)


def _check_grad_input(x, argnum, allow_int):
    dtype = core.get_aval(x).dtype
    if dtypes.kind(dtype) not in "fc" and not allow_int:
        raise TypeError(f"grad requires real- or complex-valued inputs (input dtype that is a "
                        f"sub-dtype of np.inexact), but got {dtype.name}. If you want to use "
                        f"Integer-valued inputs, set allow_int to True.")


def _check_scalar_output(out, name, holomorphic=False):
    aval = core.get_aval(out)
    if aval.shape != ():
        raise TypeError(f"Gradient only defined for scalar-output functions. Output had shape: "
                        f"{aval.shape}.")
    _check_output_dtype(name, out, holomorphic)


def _check_holomorphic_input(name, x):
    """With ``holomorphic=True`` every differentiated input must be complex (as JAX)."""
    dtype = core.get_aval(x).dtype
    if dtypes.kind(dtype) != "c":
        raise TypeError(f"{name} with holomorphic=True requires inputs with complex dtype, but "
                        f"got {dtype.name}.")


def _check_output_dtype(name, out, holomorphic):
    """Reverse mode starts from a real cotangent, or a complex one when ``holomorphic``: the
    outputs of ``grad``/``jacrev`` must be real, or complex when ``holomorphic=True``."""
    dtype = core.get_aval(out).dtype
    if holomorphic:
        if dtypes.kind(dtype) != "c":
            raise TypeError(f"{name} with holomorphic=True requires outputs with complex "
                            f"dtype, but got {dtype.name}.")
    elif dtypes.kind(dtype) == "c":
        raise TypeError(f"{name} requires real-valued outputs (output dtype that is a sub-dtype "
                        f"of np.floating), but got {dtype.name}. For holomorphic "
                        f"differentiation, pass holomorphic=True. For differentiation of "
                        f"non-holomorphic functions involving complex outputs, use jax.vjp "
                        f"directly.")
    elif dtypes.kind(dtype) != "f":
        raise TypeError(f"{name} requires real-valued outputs (output dtype that is a sub-dtype "
                        f"of np.floating), but got {dtype.name}. For differentiation of "
                        f"functions with integer outputs, use jax.vjp directly.")


def _with_args_at(fun, args, kwargs, nums):
    """``fun`` as a function of its arguments at positions ``nums`` (the others as given)."""
    def of_chosen(*chosen):
        full = list(args)
        for i, a in zip(nums, chosen):
            full[i] = a
        return fun(*full, **kwargs)

    return of_chosen


def value_and_grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """``(fun(*args), ∂fun/∂args[argnums])`` for scalar-output ``fun``."""
    check_callable(fun)
    name = "value_and_grad"

    def value_and_grad_f(*args, **kwargs):
        nums = normalize_argnums(argnums, None, f"{name} of {fun_name(fun)}", "argnums")
        if not nums:
            raise ValueError("argnums must not be empty")
        if max(nums) >= len(args):  # JAX's TypeError, as for a missing positional argument
            raise TypeError(f"differentiating with respect to argnums={argnums} requires at "
                            f"least {max(nums) + 1} positional arguments to be passed by the "
                            f"caller, but got only {len(args)} positional arguments.")
        nums = normalize_argnums(nums, len(args), f"{name} of {fun_name(fun)}", "argnums")
        diff_args = tuple(args[i] for i in nums)
        for i in nums:
            for leaf in tree_flatten(args[i])[0]:
                if holomorphic:
                    _check_holomorphic_input("grad", leaf)
                _check_grad_input(leaf, i, allow_int)

        fun_of_diff = _with_args_at(fun, args, kwargs, nums)
        out, pullback, aux = _vjp(fun_of_diff, diff_args, has_aux)
        _check_scalar_output(out, "grad", holomorphic)
        ct = lax.full_like(out, 1.0)
        grads = pullback.apply(ct, consume=True)
        g = grads[0] if isinstance(argnums, int) else grads
        return ((out, aux), g) if has_aux else (out, g)

    return wrap_transformed(value_and_grad_f, fun, f"value_and_grad({fun_name(fun)})")


def grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """The gradient of scalar-output ``fun`` with respect to ``args[argnums]``."""
    vg = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int)

    def grad_f(*args, **kwargs):
        if has_aux:
            (_, aux), g = vg(*args, **kwargs)
            return g, aux
        return vg(*args, **kwargs)[1]

    return wrap_transformed(grad_f, fun, f"grad({fun_name(fun)})")


# --- jacobians -------------------------------------------------------------------------------


def _std_basis(flat_avals, dtype_of):
    """One-hot tangents for every scalar entry of the inputs, stacked along a new axis 0."""
    import numpy as np

    sizes = [a.size for a in flat_avals]
    total = sum(sizes)
    basis = np.eye(total, dtype=dtype_of)
    out, start = [], 0
    for a, n in zip(flat_avals, sizes):
        out.append(basis[:, start:start + n].reshape((total,) + a.shape))
        start += n
    return out, total


def jacfwd(fun, argnums=0, has_aux=False, holomorphic=False):
    """The Jacobian of ``fun`` by forward mode (vmapped JVPs)."""
    check_callable(fun)

    def jacfun(*args, **kwargs):
        import numpy as np

        nums = normalize_argnums(argnums, len(args), f"jacfwd of {fun_name(fun)}", "argnums")
        diff = tuple(args[i] for i in nums)
        flat, tree = tree_flatten(diff)
        avals = [core.get_aval(x) for x in flat]
        for x, a in zip(flat, avals):
            if holomorphic:
                _check_holomorphic_input("jacfwd", x)
            elif dtypes.kind(a.dtype) != "f":
                raise TypeError(f"jacfwd requires real-valued inputs (input dtype that is a "
                                f"sub-dtype of np.floating), but got {a.dtype.name}. For "
                                f"holomorphic differentiation, pass holomorphic=True. For "
                                f"differentiation of non-holomorphic functions involving "
                                f"complex inputs or integer inputs, use jax.jvp directly.")
        dtype = np.result_type(*[a.dtype for a in avals])

        f_of_diff = _with_args_at(fun, args, kwargs, nums)
        basis, total = _std_basis(avals, dtype)

        def push(*tangents):
            t_tree = tree_unflatten(tree, [t.astype(a.dtype) for t, a in zip(tangents, avals)])
            return jvp(f_of_diff, diff, t_tree, has_aux=has_aux)

        res = vmap(push, out_axes=-1)(*basis)
        if holomorphic:
            for o in tree_flatten(res[1])[0]:
                if dtypes.kind(core.get_aval(o).dtype) != "c":
                    raise TypeError(f"jacfwd with holomorphic=True requires outputs with "
                                    f"complex dtype, but got {core.get_aval(o).dtype.name}.")
        out_tangents = res[1]
        jac = tree_map(lambda t, y: _unflatten_jac_axis(t, avals, tree, total, _is_weak(y)),
                       out_tangents, res[0])
        jac = jac if not isinstance(argnums, int) else tree_map(lambda j: j[0], jac,
                                                               is_leaf=_is_tuple1)
        return (jac, res[2]) if has_aux else jac

    return wrap_transformed(jacfun, fun, f"jacfwd({fun_name(fun)})")


def _is_tuple1(x):
    return isinstance(x, tuple) and len(x) == 1


def _is_weak(x):
    return core.get_aval(x).weak_type


def _weakly_typed_as(x, weak):
    """``x`` weakly typed or not: a Jacobian's block has the weak type of its example, the
    output for ``jacfwd``, the input for ``jacrev`` (as JAX's)."""
    aval = core.get_aval(x)
    return x if aval.weak_type == weak else lax.convert_element_type(x, aval.dtype, weak)


def _unflatten_jac_axis(t, avals, tree, total, weak):
    """Split the trailing basis axis of ``t`` into the input pytree's shapes."""
    out_shape = core.get_aval(t).shape[:-1]
    parts, start = [], 0
    for a in avals:
        n = a.size
        piece = lax.slice_in_dim(t, start, start + n, axis=len(out_shape))
        parts.append(_weakly_typed_as(lax.reshape(piece, out_shape + a.shape), weak))
        start += n
    return tree_unflatten(tree, parts)


def jacrev(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """The Jacobian of ``fun`` by reverse mode (vmapped VJPs)."""
    check_callable(fun)

    def jacfun(*args, **kwargs):
        import numpy as np

        nums = normalize_argnums(argnums, len(args), f"jacrev of {fun_name(fun)}", "argnums")
        diff = tuple(args[i] for i in nums)
        if holomorphic:
            for leaf in tree_flatten(diff)[0]:
                _check_holomorphic_input("jacrev", leaf)

        f_of_diff = _with_args_at(fun, args, kwargs, nums)
        out, pullback, aux = _vjp(f_of_diff, diff, has_aux)
        flat_out, out_tree = tree_flatten(out)
        for o in flat_out:
            _check_output_dtype("jacrev", o, holomorphic)
        avals = [core.get_aval(o) for o in flat_out]
        dtype = np.result_type(*[a.dtype for a in avals])
        basis, total = _std_basis(avals, dtype)
        cts = vmap(lambda *b: pullback(tree_unflatten(out_tree, [
            x.astype(a.dtype) for x, a in zip(b, avals)])))(*basis)
        # cts: the input tree, each leaf with leading axis `total` over output entries
        per_input = tree_map(lambda c, x: _split_leading(c, avals, out_tree, _is_weak(x)),
                             cts, diff)
        jac = tree_transpose(tree_structure(diff), out_tree, per_input)
        if isinstance(argnums, int):
            jac = tree_map(lambda j: j[0], jac, is_leaf=_is_tuple1)
        return (jac, aux) if has_aux else jac

    return wrap_transformed(jacfun, fun, f"jacrev({fun_name(fun)})")


def _split_leading(c, out_avals, out_tree, weak):
    in_shape = core.get_aval(c).shape[1:]
    parts, start = [], 0
    for a in out_avals:
        n = a.size
        piece = lax.slice_in_dim(c, start, start + n, axis=0)
        parts.append(_weakly_typed_as(lax.reshape(piece, a.shape + in_shape), weak))
        start += n
    return tree_unflatten(out_tree, parts)


def hessian(fun, argnums=0, has_aux=False, holomorphic=False):
    """The Hessian: ``jacfwd(jacrev(fun))``."""
    return jacfwd(jacrev(fun, argnums, has_aux, holomorphic), argnums, has_aux, holomorphic)


# --- vmap ------------------------------------------------------------------------------------


def _flatten_axes(what, tree, axes):
    """Broadcast the prefix tree ``axes`` (ints/None) to the leaves of ``tree``."""
    proxy = object()
    leaves_tree = tree_map(lambda _: proxy, tree)
    try:
        expanded = _broadcast_prefix(axes, leaves_tree)
    except ValueError:
        raise ValueError(f"vmap {what} specification must be a tree prefix of the "
                         f"corresponding value, got specification {axes!r} for value tree "
                         f"{tree_structure(tree)}.") from None
    # up to the leaves of ``tree``: a None *node* of ``tree`` (no leaves) takes no axis
    return tree_structure(leaves_tree).flatten_up_to(expanded)


def _broadcast_prefix(prefix, full):
    if prefix is None or isinstance(prefix, int):
        return tree_map(lambda _: prefix, full)
    prefix_def = tree_structure(prefix, is_leaf=lambda x: x is None)
    subtrees = prefix_def.flatten_up_to(full)
    prefix_leaves = tree_flatten(prefix, is_leaf=lambda x: x is None)[0]
    return prefix_def.unflatten([_broadcast_prefix(p, s) for p, s in
                                 zip(prefix_leaves, subtrees)])


def vmap(fun, in_axes=0, out_axes=0, axis_name=None, axis_size=None, spmd_axis_name=None):
    """Vectorize ``fun`` over the ``in_axes`` of its arguments. ``spmd_axis_name`` is the
    mesh axis JAX adds to the sharding constraints inside (flax's lifted vmap passes it);
    remat's values are whole on the host, with no sharding to constrain, so it changes
    nothing."""
    del spmd_axis_name
    check_callable(fun)
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if not (in_axes is None or type(in_axes) in (int, tuple)):
        raise TypeError(f"vmap in_axes must be an int, None, or a tuple of entries "
                        f"corresponding to the positional arguments passed to the function, "
                        f"but got {in_axes}.")
    for what, spec in (("in_axes", in_axes), ("out_axes", out_axes)):
        if not all(type(leaf) is int for leaf in tree_flatten(spec)[0]):
            raise TypeError(f"vmap {what} must be an int, None, or (nested) container with "
                            f"those types as leaves, but got {spec}.")

    def vmapped(*args, **kwargs):
        if isinstance(in_axes, tuple) and len(in_axes) != len(args):
            raise ValueError(f"vmap in_axes must be an int, None, or a tuple of entries "
                             f"corresponding to the positional arguments passed to the "
                             f"function, but got len(in_axes)={len(in_axes)}, "
                             f"len(args)={len(args)}")
        flat_args, in_tree = tree_flatten((args, kwargs))
        # keyword arguments are mapped along their leading axis, whatever in_axes says (JAX)
        flat_axes = _flatten_axes("in_axes", args, in_axes)
        flat_axes += [0] * (len(flat_args) - len(flat_axes))
        names = arg_names(fun, args, {}) + [
            "kwargs" + keystr(path) for path, _ in tree_flatten_with_path(kwargs)[0]]
        # an unmapped argument passes through as it is, array or not (equinox's pooling layers
        # pass ``jnp.mean``), as in JAX
        avals = [None if ax is None else core.get_aval(x) for x, ax in zip(flat_args, flat_axes)]
        axes = []
        for a, ax in zip(avals, flat_axes):
            if ax is None:
                axes.append(None)
                continue
            if not -a.ndim <= ax < max(a.ndim, 1) or a.ndim == 0:
                need = ax + 1 if ax >= 0 else -ax
                raise ValueError(f"vmap was requested to map its argument along axis {ax}, "
                                 f"which implies that its rank should be at least {need}, "
                                 f"but is only {a.ndim} (its shape is {a.shape})")
            axes.append(ax % a.ndim)
        sizes = {a.shape[ax] for a, ax in zip(avals, axes) if ax is not None}
        if axis_size is not None:
            sizes.add(axis_size)
        if not sizes:
            raise ValueError("vmap must have at least one non-None value in in_axes")
        if len(sizes) > 1:
            lines = [f"  * one axis had size {a.shape[ax]}: axis {ax} of argument {nm} of type "
                     f"{a.str_short()}" for a, ax, nm in zip(avals, axes, names)
                     if ax is not None]
            if axis_size is not None:
                lines.append(f"  * axis_size was {axis_size}")
            raise ValueError("vmap got inconsistent sizes for array axes to be mapped:\n"
                             + "\n".join(lines))
        size = sizes.pop()
        flat_fun, store = flatten_fun(fun, in_tree)
        with named_axes.batch_axis_env(axis_name, size), \
                core.new_trace(batching.BatchTrace, size, axis_name) as trace:
            ins = [x if ax is None else batching.BatchTracer(trace, x, ax)
                   for x, ax in zip(flat_args, axes)]
            outs = flat_fun(*ins)
            vals_dims = [trace.to_val_dim(o) for o in outs]
        out_tree = store.tree
        flat_out_axes = _flatten_axes("out_axes", tree_unflatten(out_tree, [0] * len(outs)),
                                      out_axes)
        results = []
        for (v, d), oax in zip(vals_dims, flat_out_axes):
            if oax is None:
                if d is not None:
                    raise ValueError(f"at vmap out_axes, got axis spec None but output was "
                                     f"batched on axis {d}")
                results.append(v)
                continue
            if d is None:
                v = batching.bdim_at_front(v, None, size)
                d = 0
            nd = core.get_aval(v).ndim
            if not -nd <= oax < nd:
                raise ValueError(f"vmap out_axes: axis {oax} is out of bounds for array of "
                                 f"dimension {nd} (a batched output of shape "
                                 f"{core.get_aval(v).shape})")
            results.append(batching.moveaxis(v, d, oax % nd))
        return tree_unflatten(out_tree, results)

    return wrap_transformed(vmapped, fun, f"vmap({fun_name(fun)})")


# --- small utilities -------------------------------------------------------------------------


@contextlib.contextmanager
def disable_jit(disable=True):
    """Run jitted functions as plain Python (for debugging)."""
    with config.override("jax_disable_jit", disable):
        yield


def block_until_ready(x):
    """Arrays are computed eagerly: returns ``x``."""
    return x


def device_get(x):
    """NumPy copies of the arrays in pytree ``x``."""
    import numpy as np

    return tree_map(lambda leaf: np.asarray(leaf) if hasattr(leaf, "aval") else leaf, x)


def device_put(x, device=None):
    """Arrays of the values in pytree ``x``."""
    return tree_map(array.asarray, x)


# --- names -----------------------------------------------------------------------------------

named_scope = source_info.name_scope


def named_call(fun, *, name=None):
    """``fun`` whose equations are traced under the name scope ``name`` (default: the
    function's name), shown by ``pretty_print(name_stack=True)``."""
    check_callable(fun)
    scope = name if name is not None else fun_name(fun)

    @functools.wraps(fun)
    def named(*args, **kwargs):
        with source_info.name_scope(scope):
            return fun(*args, **kwargs)

    return named


# --- a forward and a backward function -------------------------------------------------------


def _ensure_index(argnums):
    """An int, or a tuple of ints (JAX's ``argnums``)."""
    import operator

    try:
        return operator.index(argnums)
    except TypeError:
        return tuple(map(operator.index, argnums))


def fwd_and_bwd(fun, argnums, has_aux=False, jitted=True):
    """``(fwd, bwd)``: ``fwd(*args)`` is ``vjp`` of ``fun`` with respect to the arguments at
    ``argnums`` (``(out, f_vjp)``, or ``(out, f_vjp, aux)`` with ``has_aux``) and
    ``bwd(f_vjp, out_cotangent)`` applies the pullback (one cotangent for an int ``argnums``,
    a tuple otherwise). With ``jitted`` both are jitted once, so the pullback (a pytree of its
    residuals) passes between them without retracing."""
    check_callable(fun)
    argnums = _ensure_index(argnums)

    def fwd(*args, **kwargs):
        nums = (argnums,) if isinstance(argnums, int) else argnums
        nums = normalize_argnums(nums, len(args), f"fwd_and_bwd of {fun_name(fun)}", "argnums")
        f_partial = _with_args_at(fun, args, {}, nums)
        return vjp(f_partial, *[args[i] for i in nums], has_aux=has_aux)

    def bwd(f_vjp, outgrad):
        g = f_vjp(outgrad)
        return g[0] if isinstance(argnums, int) else g

    if jitted:
        fwd, bwd = jit(fwd), jit(bwd)
    return fwd, bwd
