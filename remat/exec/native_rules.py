"""How each primitive is written in a native (numba) loop body: rules by primitive name, each
returning the source of its result(s) from its operands' source. The executor owns these
(as XLA owns its lowerings): primitives know nothing of the native tier, and a primitive with
no rule here keeps its loop on the generated-Python path."""

import math

import numpy as np

# name -> fn(ctx, eqn, ins) -> [source of each output]; ``ins`` are the operands' source
# (names or literal expressions), ``ctx`` the kernel being written (``ctx.line`` emits a
# statement, ``ctx.fresh()`` names a temporary, ``ctx.dtype(dt)`` spells a dtype).
rules = {}

NATIVE_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float32, np.float64))


def _rank(v):
    return len(v.aval.shape)


def _out(eqn):
    return eqn.outvars[0].aval


# --- elementwise -----------------------------------------------------------------------------

_BINARY_OPS = {"add": "+", "sub": "-", "mul": "*", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
               "eq": "==", "ne": "!="}
_FLOAT_UNARY = {"exp": "np.exp", "log": "np.log", "log1p": "np.log1p", "expm1": "np.expm1",
                "sin": "np.sin", "cos": "np.cos", "tan": "np.tan", "asin": "np.arcsin",
                "acos": "np.arccos", "atan": "np.arctan", "sinh": "np.sinh", "cosh": "np.cosh",
                "asinh": "np.arcsinh", "acosh": "np.arccosh", "atanh": "np.arctanh",
                "sqrt": "np.sqrt", "cbrt": "np.cbrt", "floor": "np.floor", "ceil": "np.ceil",
                "exp2": "np.exp2", "is_finite": "np.isfinite"}
_FLOAT_BINARY = {"atan2": "np.arctan2", "rem": "np.fmod", "pow": "np.power"}


def _binary(op):
    return lambda ctx, eqn, ins: [f"({ins[0]} {op} {ins[1]})"]


for _name, _op in _BINARY_OPS.items():
    rules[_name] = _binary(_op)


def _float_only(fn):
    def rule(ctx, eqn, ins):
        if not np.issubdtype(eqn.invars[0].aval.dtype, np.floating):
            return None
        return fn(ctx, eqn, ins)
    return rule


def _call(fname):
    return _float_only(lambda ctx, eqn, ins: [f"{fname}({', '.join(ins)})"])


for _name, _f in {**_FLOAT_UNARY, **_FLOAT_BINARY}.items():
    rules[_name] = _call(_f)


def _div(ctx, eqn, ins):
    if not np.issubdtype(_out(eqn).dtype, np.floating):
        return None  # integer division truncates toward zero in lax: no one-line form
    return [f"({ins[0]} / {ins[1]})"]


def _max_min(fname):
    return lambda ctx, eqn, ins: [f"{fname}({ins[0]}, {ins[1]})"] \
        if any(_rank(v) for v in eqn.invars) else \
        [f"({ins[0]} if ({ins[0]} {'>' if fname == 'np.maximum' else '<'} {ins[1]}) "
         f"or {ins[0]} != {ins[0]} else {ins[1]})"]


rules["div"] = _div
rules["max"] = _max_min("np.maximum")
rules["min"] = _max_min("np.minimum")
rules["neg"] = lambda ctx, eqn, ins: [f"(-{ins[0]})"]
rules["abs"] = lambda ctx, eqn, ins: [f"np.abs({ins[0]})"]
rules["sign"] = lambda ctx, eqn, ins: [f"np.sign({ins[0]})"]
rules["square"] = lambda ctx, eqn, ins: [f"({ins[0]} * {ins[0]})"]
rules["rsqrt"] = _float_only(
    lambda ctx, eqn, ins: [f"({ctx.const(1, _out(eqn).dtype)} / np.sqrt({ins[0]}))"])
rules["logistic"] = _float_only(lambda ctx, eqn, ins: [
    f"({ctx.const(1, _out(eqn).dtype)} / ({ctx.const(1, _out(eqn).dtype)} + np.exp(-{ins[0]})))"])


def _tanh(ctx, eqn, ins):
    dtype = _out(eqn).dtype
    if dtype == np.float32:
        fn = "_k.tanh_f32" if _rank(eqn.invars[0]) else "_k.tanh_f32_scalar"
        return [f"{fn}({ins[0]})"]
    return _call("np.tanh")(ctx, eqn, ins)


rules["tanh"] = _tanh


def _integer_pow(ctx, eqn, ins):
    y = eqn.params["y"]
    x = ins[0]
    if y == 0:
        return [f"({x} * {ctx.const(0, _out(eqn).dtype)} + {ctx.const(1, _out(eqn).dtype)})"]
    base = ctx.bind(x)
    acc, power, result = base, abs(y), None
    while power:  # square-and-multiply, as lax does
        if power & 1:
            result = acc if result is None else ctx.bind(f"{result} * {acc}")
        power >>= 1
        if power:
            acc = ctx.bind(f"{acc} * {acc}")
    if y < 0:
        if not np.issubdtype(_out(eqn).dtype, np.floating):
            return None
        return [f"({ctx.const(1, _out(eqn).dtype)} / {result})"]
    return [result]


rules["integer_pow"] = _integer_pow


def _logical(op, bitwise):
    def rule(ctx, eqn, ins):
        if eqn.invars[0].aval.dtype == np.bool_:
            if all(not _rank(v) for v in eqn.invars):
                return [f"({ins[0]} {op} {ins[1]})"]
            return [f"np.logical_{op}({ins[0]}, {ins[1]})"]
        return [f"({ins[0]} {bitwise} {ins[1]})"]
    return rule


rules["and"] = _logical("and", "&")
rules["or"] = _logical("or", "|")
rules["xor"] = _logical("xor", "^")


def _not(ctx, eqn, ins):
    if eqn.invars[0].aval.dtype == np.bool_:
        return [f"np.logical_not({ins[0]})" if _rank(eqn.invars[0]) else f"(not {ins[0]})"]
    return [f"(~{ins[0]})"]


rules["not"] = _not


def _select_n(ctx, eqn, ins):
    pred, cases = ins[0], ins[1:]
    scalar = not any(_rank(v) for v in eqn.invars)
    if eqn.invars[0].aval.dtype == np.bool_:
        if scalar:
            return [f"({cases[1]} if {pred} else {cases[0]})"]
        return [f"np.where({pred}, {cases[1]}, {cases[0]})"]
    result = cases[-1]  # an integer case index: nested selects, the last case the default
    for k in range(len(cases) - 2, -1, -1):
        if scalar:
            result = f"({cases[k]} if {pred} == {k} else {result})"
        else:
            result = f"np.where({pred} == {k}, {cases[k]}, {result})"
    return [result]


rules["select_n"] = _select_n


def _clamp(ctx, eqn, ins):
    lo, x, hi = ins
    return [f"np.minimum(np.maximum({x}, {lo}), {hi})"] if _rank(eqn.invars[1]) else \
        [f"min(max({x}, {lo}), {hi})"]


rules["clamp"] = _clamp

# The rules the Python tier writes too (it calls the impl, or its ufunc, for everything else,
# so that each value has the layout the plans give it, and with it the same rounding in
# layout-dependent reductions and BLAS calls: its results are the interpreter's bit for bit).
# A zero pad consumed by an add is written as a slice-add either way.
EXACT_RULES = frozenset({"pad", "slice", "rev", "concatenate"})

# Rules whose result is one array expression of their operands (no statements), a new array
# each time: a single-use result is written inside its consumer's expression (numba fuses
# array expressions into one loop), and may be updated in place by its consumer.
EXPRESSIONS = frozenset({*_BINARY_OPS, *_FLOAT_UNARY, *_FLOAT_BINARY, "div", "max", "min",
                         "neg", "abs", "sign", "square", "rsqrt", "logistic", "select_n",
                         "clamp", "and", "or", "xor", "not"})


def _convert(ctx, eqn, ins):
    new = np.dtype(eqn.params["new_dtype"])
    old = eqn.invars[0].aval.dtype
    if new == np.bool_ and old != np.bool_:
        return [f"({ins[0]} != {ctx.const(0, old)})"]
    if not _rank(eqn.invars[0]):
        return [f"{ctx.dtype(new)}({ins[0]})"]
    return [f"{ins[0]}.astype({ctx.dtype(new)})"]


rules["convert_element_type"] = _convert
for _name in ("copy", "copy_p", "optimization_barrier", "name", "stop_gradient"):
    rules[_name] = lambda ctx, eqn, ins: list(ins)


# --- shapes ----------------------------------------------------------------------------------


def shape_src(shape):
    """A shape as a tuple literal."""
    return "(" + "".join(f"{d}, " for d in shape) + ")"


def reshape_src(ctx, x, in_aval, shape):
    """``x`` (of ``in_aval``) reshaped to ``shape``: scalars in and out handled."""
    if tuple(in_aval.shape) == tuple(shape):
        return x
    if not in_aval.shape:
        return f"np.full({shape_src(shape)}, {x}, {ctx.dtype(in_aval.dtype)})"
    if not shape:
        return f"{x}.ravel()[0]"
    return f"np.ascontiguousarray({x}).reshape({shape_src(shape)})"


def _reshape(ctx, eqn, ins):
    return [reshape_src(ctx, ins[0], eqn.invars[0].aval, _out(eqn).shape)]


for _name in ("reshape", "squeeze"):
    rules[_name] = _reshape


def _broadcast_in_dim(ctx, eqn, ins):
    aval, out = eqn.invars[0].aval, _out(eqn)
    if not aval.shape:
        return [f"np.full({shape_src(out.shape)}, {ins[0]}, {ctx.dtype(out.dtype)})"]
    dims = eqn.params["broadcast_dimensions"]
    expanded = [1] * len(out.shape)
    for d, size in zip(dims, aval.shape):
        expanded[d] = size
    src = reshape_src(ctx, ins[0], aval, expanded)
    buf = ctx.fresh()
    ctx.line(f"{buf} = np.empty({shape_src(out.shape)}, {ctx.dtype(out.dtype)})")
    ctx.line(f"{buf}[...] = {src}")
    return [buf]


rules["broadcast_in_dim"] = _broadcast_in_dim


def _transpose(ctx, eqn, ins):
    perm = tuple(eqn.params["permutation"])
    if perm == tuple(range(len(perm))):
        return [ins[0]]
    return [f"np.transpose({ins[0]}, {shape_src(perm)})"]


rules["transpose"] = _transpose


def _index_src(parts):
    return "[" + ", ".join(parts) + "]"


def _slice(ctx, eqn, ins):
    p = eqn.params
    strides = p.get("strides") or (1,) * len(p["start_indices"])
    parts = [f"{a}:{b}" + (f":{s}" if s != 1 else "")
             for a, b, s in zip(p["start_indices"], p["limit_indices"], strides)]
    return [f"{ins[0]}{_index_src(parts)}"]


rules["slice"] = _slice


def _rev(ctx, eqn, ins):
    dims = set(eqn.params["dimensions"])
    parts = ["::-1" if d in dims else ":" for d in range(_rank(eqn.invars[0]))]
    return [f"{ins[0]}{_index_src(parts)}"]


rules["rev"] = _rev


def _pad(ctx, eqn, ins):
    aval, out = eqn.invars[0].aval, _out(eqn)
    config = eqn.params["padding_config"]
    # pad the non-negative part, then cut where the padding is negative
    grown = [lo_ + hi_ + n + max(n - 1, 0) * interior if n else lo_ + hi_
             for n, (lo_, hi_, interior) in zip(aval.shape, [(max(lo, 0), max(hi, 0), i)
                                                             for lo, hi, i in config])]
    buf = ctx.fresh()
    ctx.line(f"{buf} = np.full({shape_src(grown)}, {ins[1]}, {ctx.dtype(out.dtype)})")
    if math.prod(aval.shape):
        parts = [f"{max(lo, 0)}:{max(lo, 0) + (n - 1) * (i + 1) + 1}" + (f":{i + 1}" if i else "")
                 for n, (lo, hi, i) in zip(aval.shape, config)]
        ctx.line(f"{buf}{_index_src(parts)} = {ins[0]}")
    if any(lo < 0 or hi < 0 for lo, hi, _ in config):
        parts = [f"{-lo if lo < 0 else 0}:{g + hi if hi < 0 else g}"
                 for g, (lo, hi, _) in zip(grown, config)]
        return [f"{buf}{_index_src(parts)}"]
    return [buf]


rules["pad"] = _pad


def _concatenate(ctx, eqn, ins):
    return [f"np.concatenate(({', '.join(ins)},), axis={eqn.params['dimension']})"]


rules["concatenate"] = _concatenate
rules["unstack"] = lambda ctx, eqn, ins: [
    f"{ins[0]}[{':, ' * eqn.params['axis']}{j}]" for j in range(len(eqn.outvars))]
rules["stack"] = lambda ctx, eqn, ins: [
    f"np.stack(({''.join(x + ', ' for x in ins)}), axis={eqn.params['axis']})"]


def _iota(ctx, eqn, ins):
    p = eqn.params
    shape, dim, dtype = tuple(p["shape"]), p["dimension"], np.dtype(p["dtype"])
    line = f"np.arange({shape[dim]}).astype({ctx.dtype(dtype)})"
    expanded = [1] * len(shape)
    expanded[dim] = shape[dim]
    buf = ctx.fresh()
    ctx.line(f"{buf} = np.empty({shape_src(shape)}, {ctx.dtype(dtype)})")
    ctx.line(f"{buf}[...] = {line}.reshape({shape_src(expanded)})")
    return [buf]


rules["iota"] = _iota


def _clamped_starts(ctx, eqn, starts, sizes):
    shape = eqn.invars[0].aval.shape
    return [ctx.bind(f"min(max(int({s}), 0), {n - k})") for s, n, k in zip(starts, shape, sizes)]


def _dynamic_slice(ctx, eqn, ins):
    sizes = eqn.params["slice_sizes"]
    starts = _clamped_starts(ctx, eqn, ins[1:], sizes)
    return [f"{ins[0]}{_index_src([f'{s}:{s} + {k}' for s, k in zip(starts, sizes)])}"]


rules["dynamic_slice"] = _dynamic_slice


def _dynamic_update_slice(ctx, eqn, ins):
    sizes = eqn.invars[1].aval.shape
    starts = _clamped_starts(ctx, eqn, ins[2:], sizes)
    buf = ctx.bind(f"{ins[0]}.copy()")
    ctx.line(f"{buf}{_index_src([f'{s}:{s} + {k}' for s, k in zip(starts, sizes)])} = {ins[1]}")
    return [buf]


rules["dynamic_update_slice"] = _dynamic_update_slice


# --- reductions and contractions -------------------------------------------------------------


def _rows(ctx, eqn, x, axes):
    """``x`` as a 2-D array: the kept axes flattened into rows, the reduced ones into columns."""
    aval = eqn.invars[0].aval
    kept = [d for d in range(len(aval.shape)) if d not in axes]
    outer = math.prod(aval.shape[d] for d in kept)
    inner = math.prod(aval.shape[d] for d in axes)
    perm = tuple(kept) + tuple(axes)
    if not aval.shape:
        return f"np.full((1, 1), {x}, {ctx.dtype(aval.dtype)})"
    moved = x if perm == tuple(range(len(perm))) else f"np.transpose({x}, {shape_src(perm)})"
    return f"np.ascontiguousarray({moved}).reshape(({outer}, {inner}))"


def _reduction(kernel, *extra):
    """A reduction over ``axes`` by ``native_kernels.<kernel>(rows, *extra)``."""
    def rule(ctx, eqn, ins):
        aval, out = eqn.invars[0].aval, _out(eqn)
        axes = tuple(eqn.params["axes"])
        if kernel == "sum_rows_f64":  # float sums accumulate in float64
            if not np.issubdtype(aval.dtype, np.floating):
                return None
            if not out.shape:
                return [f"_k.sum_all_f64({ins[0]})"]  # (the scalar is cast to the output dtype)
            if len(axes) == 1:
                return [f"{ins[0]}.astype(np.float64).sum(axis={axes[0]})"
                        f".astype({ctx.dtype(out.dtype)})"]
        elif kernel not in ("any_rows", "all_rows") and \
                not math.prod(aval.shape[d] for d in axes):
            return None  # an empty max/min/prod/arg reduction: left to the NumPy path
        args = ", ".join([_rows(ctx, eqn, ins[0], axes), *extra])
        rows = ctx.bind(f"_k.{kernel}({args}).astype({ctx.dtype(out.dtype)})")
        return [reshape_src(ctx, rows, _Shape((math.prod(out.shape),), out.dtype), out.shape)]
    return rule


class _Shape:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


rules["reduce_sum"] = _reduction("sum_rows_f64")
rules["reduce_max"] = _reduction("extreme_rows", "True")
rules["reduce_min"] = _reduction("extreme_rows", "False")
rules["reduce_prod"] = _reduction("prod_rows")
rules["reduce_or"] = _reduction("any_rows")
rules["reduce_and"] = _reduction("all_rows")
rules["argmax"] = _reduction("arg_extreme_rows", "True")
rules["argmin"] = _reduction("arg_extreme_rows", "False")


def _dot_general(ctx, eqn, ins):
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs, rhs, out = eqn.invars[0].aval, eqn.invars[1].aval, _out(eqn)
    if lhs.dtype != rhs.dtype or lhs.dtype != out.dtype or \
            lhs.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None  # BLAS types only
    if not lb and len(lc) == 1 and len(lhs.shape) <= 2 and len(rhs.shape) <= 2 \
            and lhs.shape and rhs.shape:
        # a matrix (or vector) product: BLAS takes the transposed views as they are
        a = ins[0] if lc[0] == len(lhs.shape) - 1 else f"{ins[0]}.T"
        b = ins[1] if rc[0] == 0 else f"{ins[1]}.T"
        return [f"np.dot({a}, {b})"]
    lf = [d for d in range(len(lhs.shape)) if d not in lc and d not in lb]
    rf = [d for d in range(len(rhs.shape)) if d not in rc and d not in rb]
    size = lambda aval, dims: math.prod(aval.shape[d] for d in dims)  # noqa: E731
    b, m, k, n = size(lhs, lb), size(lhs, lf), size(lhs, lc), size(rhs, rf)

    def arranged(x, aval, perm, shape):
        if not aval.shape:
            return f"np.full({shape_src(shape)}, {x}, {ctx.dtype(aval.dtype)})"
        moved = x if tuple(perm) == tuple(range(len(perm))) else \
            f"np.transpose({x}, {shape_src(perm)})"
        return ctx.bind(f"np.ascontiguousarray({moved}).reshape({shape_src(shape)})")

    a = arranged(ins[0], lhs, list(lb) + lf + list(lc), (b, m, k))
    c = arranged(ins[1], rhs, list(rb) + list(rc) + rf, (b, k, n))
    prod = ctx.bind(f"_k.batched_dot({a}, {c})")
    return [reshape_src(ctx, prod, _Shape((b, m, n), out.dtype), out.shape)]


rules["dot_general"] = _dot_general
