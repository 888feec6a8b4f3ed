"""The ops of the differential fuzzer's programs (see ``fuzzing.py``): a table of name ->
(arity, out_shape(shapes, param) or None when the operands do not fit, apply(ns, *values[,
param])), run the same on remat's namespace and on JAX's."""

import numpy as np

NAMES = ("a", "b", "c")  # of checkpoint_name
BATCH = 2  # members of a vmap
AXIS = "i"  # the name of a vmapped axis, for collectives


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


def _checked(ns, v):
    """``v``, through a cond branch that calls back into Python where all of ``v`` is above
    0.5 (the callback hands ``v`` back: the shape of equinox's runtime checks). A native loop
    kernel cannot write that branch: it exits there, and the call reruns on the Python tier."""
    def passed(a):
        return np.asarray(a)

    def call_back(a):
        return ns.jax.pure_callback(passed, ns.jax.ShapeDtypeStruct(a.shape, a.dtype), a,
                                    vmap_method="sequential")
    return ns.lax.cond(ns.jnp.all(v > 0.5), call_back, lambda a: a, v)


def _while_update(kind):
    """A while loop of a data-dependent trip count (0 to ``len(x) + 1``: one step may fall out
    of bounds) that reads one row of a buffer (``x``) and writes a function of it back, by
    ``.at[i].set`` (the new row checked for ``checked``: ``_checked``; the row read drawn at
    random for ``random``, normal noise added for ``normal``), ``.at[i].add`` or a dynamic
    update: under ``vmap`` its predicate is batched, so each step ends in a ``select_n`` of
    the buffer and its update (which remat
    runs as one update in place), and the row reads and writes are the point gathers and
    scatters of the native tier. Its value goes through the loop, its derivative (as ``x``'s)
    around it: JAX has no reverse mode for ``while_loop``."""
    def apply(ns, x, y):
        jnp, lax = ns.jnp, ns.lax
        x0, y0 = lax.stop_gradient(x), lax.stop_gradient(y)
        n = x.shape[0]
        # (a count of elements, not a rounded float: remat's and JAX's sums may differ in
        # their last bit, and a trip count computed from one would then differ by a step)
        steps = jnp.sum((x0 > 0.1).astype(jnp.int32)) % (n + 2)

        def body(carry):
            i, buf = carry
            new = jnp.tanh(buf[i % n] * 0.5 + y0).astype(buf.dtype)  # (y may be wider)
            if kind == "random":  # (a row drawn by ``randint``: threefry and uint32 rem)
                j = ns.jax.random.randint(ns.jax.random.PRNGKey(i), (), 0, n)
                buf = buf.at[i].set(jnp.tanh(buf[j] * 0.5 + y0).astype(buf.dtype))
            elif kind == "normal":  # (normal noise: uint32 div, XLA's erf_inv and log1p)
                noise = ns.jax.random.normal(ns.jax.random.PRNGKey(i), new.shape, new.dtype)
                buf = buf.at[i].set(new + 0.1 * noise)
            elif kind == "checked":
                buf = buf.at[i].set(_checked(ns, new))
            elif kind == "set":
                buf = buf.at[i].set(new)
            elif kind == "add":
                buf = buf.at[i].add(new)
            else:
                buf = lax.dynamic_update_index_in_dim(buf, new, i, 0)
            return i + 1, buf
        _, out = lax.while_loop(lambda c: c[0] < steps, body, (jnp.asarray(0, jnp.int32), x0))
        return x + (out - x0)
    return apply


WHILE_OPS = ("while_set", "while_add", "while_update_slice", "while_checked", "while_random",
             "while_normal")


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
    **{name: (2, lambda sh, p: sh[0] if sh[0] and sh[1] == sh[0][1:] else None,
              _while_update(name.split("_", 1)[1])) for name in WHILE_OPS},
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
    "empty_slice": (1, _needs(lambda s, p: len(s) >= 1, lambda sh, p: (0,) + sh[0][1:]),
                    lambda ns, x: x[:0]),
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
    """``x + i y`` (one shape and one dtype: ``lax.complex`` neither broadcasts nor promotes,
    and ``x`` or ``y`` may be a float64 value weak-typed in a float32 program)."""
    dtype = ns.jnp.result_type(x, y)
    return ns.lax.complex(*(v if v.dtype == dtype else v.astype(dtype) for v in (x, y)))


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
# Ops drawn with a Python float for one operand (``2.0 - x``, ``x * 0.5``); and those never
# drawn over a zero-size value (JAX rejects them, or they make an inf or a nan: the mean or the
# max of nothing, the last row of nothing, an update of row 0 of nothing).
LITERAL_OPS = ("add", "sub", "mul", "div", "maximum", "where")
LITERALS = (2.0, 0.5, -1.5)
INITS = (0.0, 1.5)  # a loop's initial carry written as a Python float
ZERO_SIZE_UNSAFE = frozenset(("mean", "max_axis", "logsumexp", "index", "gather", "take",
                              "at_set", "at_add", "ref_accumulate", *WHILE_OPS))
# Ops never drawn with one value for both operands: ``c_sum_sq(x, x)`` is 0 made of rounding
# errors (the real part of ``(x + ix)**2``), whose sign decides a cond or a ``where`` after it.
DISTINCT_OPERANDS = frozenset(("c_sum_sq",))


def apply_op(ns, name, vals, param):
    fn = OPS[name][2]
    return fn(ns, *vals, param) if name in PARAMS else fn(ns, *vals)
