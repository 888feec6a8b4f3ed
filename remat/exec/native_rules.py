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


class Unsupported(Exception):
    """The body has an equation the native tier cannot write."""


class BranchNotNative(Exception):
    """Raised by a native loop kernel that reached a ``cond`` branch its tier could not write
    (a callback's, such as a runtime check's error branch): the loop's caller reruns the call
    on the Python tier, from the operands the kernel left as they were."""


NATIVE_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float32, np.float64, np.complex64, np.complex128))

# The primitives the native tier writes on complex values (a complex operand or result of any
# other keeps its loop on the Python tier): arithmetic numba computes as NumPy does, within
# rounding, and the equations that only move elements.
COMPLEX_PRIMITIVES = frozenset({
    "add", "sub", "mul", "div", "neg", "eq", "ne", "exp", "real", "imag", "conj", "complex",
    "convert_element_type", "select_n", "copy", "copy_p", "name", "stop_gradient",
    "optimization_barrier", "reshape", "squeeze", "broadcast_in_dim", "transpose", "slice",
    "rev", "pad", "concatenate", "stack", "unstack", "dynamic_slice", "dynamic_update_slice",
    "gather", "scatter", "scatter-add", "reduce_sum"})


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


def _int_helper(name, dtype):
    """The helper computing integer ``div`` or ``rem`` as lax does (toward zero, not numba's
    ``//``; by 0 as XLA), or None: signed ``div`` and ``rem`` (in int64), unsigned ones."""
    if dtype.kind == "i":
        return f"int_{name}"
    return f"uint_{name}" if dtype.kind == "u" else None


def _div(ctx, eqn, ins):
    if not np.issubdtype(_out(eqn).dtype, np.floating):
        return _int_scalar("div", eqn, ins)
    return [f"({ins[0]} / {ins[1]})"]


def _int_scalar(name, eqn, ins):
    """An integer div/rem of scalars by its helper (arrays: their fused loops)."""
    helper = _int_helper(name, _out(eqn).dtype)
    if helper is None or any(_rank(v) for v in eqn.invars):
        return None
    return [f"_k.{helper}({ins[0]}, {ins[1]})"]


def _rem(ctx, eqn, ins):
    if not np.issubdtype(_out(eqn).dtype, np.floating):
        return _int_scalar("rem", eqn, ins)
    return [f"np.fmod({ins[0]}, {ins[1]})"]


def _max_min(fname):
    return lambda ctx, eqn, ins: [f"{fname}({ins[0]}, {ins[1]})"] \
        if any(_rank(v) for v in eqn.invars) else \
        [f"({ins[0]} if ({ins[0]} {'>' if fname == 'np.maximum' else '<'} {ins[1]}) "
         f"or {ins[0]} != {ins[0]} else {ins[1]})"]


rules["div"] = _div
rules["rem"] = _rem
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


def _complex_exp(ctx, eqn, ins):
    if _out(eqn).dtype.kind == "c":
        return [f"np.exp({ins[0]})"]
    return _call("np.exp")(ctx, eqn, ins)


def _part(name):
    """``real``/``imag``: a contiguous copy of the part (an array's part is a strided view)."""
    def rule(ctx, eqn, ins):
        if not _rank(eqn.invars[0]):
            return [f"{ins[0]}.{name}"]
        return [f"np.ascontiguousarray({ins[0]}.{name})"]
    return rule


def _complex(ctx, eqn, ins):
    """``complex(x, y)``: the parts written into a new array, as the impl does (``x + 1j * y``
    would turn an infinite ``y`` into a NaN real part); rank-0 parts broadcast."""
    out = _out(eqn)
    if not out.shape:
        return [f"complex({ins[0]}, {ins[1]})"]
    buf = ctx.bind(f"np.empty({shape_src(out.shape)}, {ctx.dtype(out.dtype)})")
    elements = _elements(ctx, eqn, ins)
    at = ", ".join(_loop_nest(ctx, out.shape))
    ctx.line(f"{buf}[{at}] = complex({', '.join(elements(at))})")
    ctx.indent -= len(out.shape)
    return [buf]


def _elements(ctx, eqn, ins):
    """``at -> each operand's element at the index source at``, for an equation whose
    operands are of its result's shape or rank 0 (those are their own element); an operand's
    expression is computed once, before the loop nest that reads it."""
    names = [x if not _rank(v) or x.isidentifier() else ctx.bind(x)
             for x, v in zip(ins, eqn.invars)]
    return lambda at: [f"{x}[{at}]" if _rank(v) else x for x, v in zip(names, eqn.invars)]


rules["exp"] = _complex_exp
rules["real"] = _part("real")
rules["imag"] = _part("imag")
rules["conj"] = lambda ctx, eqn, ins: [f"np.conj({ins[0]})"]
rules["complex"] = _complex


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


# --- one element, for fused loops ------------------------------------------------------------
# The native writer computes chains of elementwise work as one explicit index loop, the
# intermediates scalars: each equation's element from its operands' elements. numba keeps
# float32 arithmetic in float32 but widens small integers, so every non-bool element is cast
# back to the equation's dtype (a no-op where it already is).

def _element_max_min(op):
    """NumPy's ``maximum``/``minimum`` exactly: the first operand where it wins or is NaN,
    else the second (so of two zeros the second, which numba's ``max`` does not give), the
    operands read as the executor's denormals-are-zero mode reads them."""
    def rule(ctx, eqn, ins):
        dtype = eqn.invars[0].aval.dtype
        if dtype.kind == "f":  # (NumPy's maxps/minps read subnormals as zeros under DAZ)
            tiny = ctx.const(np.finfo(dtype).tiny, dtype)
            ins = [f"_k.flushed({x}, {tiny})" for x in ins]
        a, b = ctx.let(ins[0]), ctx.let(ins[1])
        return f"({a} if ({a} {op} {b}) | ({a} != {a}) else {b})"
    return rule


def _element_integer_pow(ctx, eqn, ins):
    y, dtype = eqn.params["y"], _out(eqn).dtype
    if y == 0:
        return f"({ins[0]} * {ctx.const(0, dtype)} + {ctx.const(1, dtype)})"
    if y < 0 and not np.issubdtype(dtype, np.floating):
        return None
    acc, power, result = ctx.let(ins[0]), abs(y), None
    while power:  # square-and-multiply, as lax does (so the same roundings)
        if power & 1:
            result = acc if result is None else ctx.let(f"{result} * {acc}")
        power >>= 1
        if power:
            acc = ctx.let(f"{acc} * {acc}")
    return f"({ctx.const(1, dtype)} / {result})" if y < 0 else result


def _element_select_n(ctx, eqn, ins):
    pred, cases = ins[0], ins[1:]
    if eqn.invars[0].aval.dtype == np.bool_:
        return f"({cases[1]} if {pred} else {cases[0]})"
    result = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        result = f"({cases[k]} if {pred} == {k} else {result})"
    return result


def _element_convert(ctx, eqn, ins):
    new, old = np.dtype(eqn.params["new_dtype"]), eqn.invars[0].aval.dtype
    if new == np.bool_ and old != np.bool_:
        return f"({ins[0]} != {ctx.const(0, old)})"
    if old.kind == "c" and new.kind != "c":  # (the real part, as lax converts)
        return None if new.kind != "f" else f"{ctx.dtype(new)}(({ins[0]}).real)"
    return f"{ctx.dtype(new)}({ins[0]})"


def _element_tanh(ctx, eqn, ins):
    return f"_k.tanh_value({ins[0]})" if _out(eqn).dtype == np.float32 else f"np.tanh({ins[0]})"


def _exp(x, dtype):
    """float32 exp as ``native_kernels.exp_value`` (within 3 ulp; a loop of it vectorizes)."""
    return f"_k.exp_value({x})" if dtype == np.float32 else f"np.exp({x})"


def _element_int(name, float_form):
    """Integer div/rem as lax computes them (``_int_helper``)."""
    def rule(ctx, eqn, ins):
        dtype = _out(eqn).dtype
        if np.issubdtype(dtype, np.floating):
            return float_form(ctx, eqn, ins)
        helper = _int_helper(name, dtype)
        return None if helper is None else f"_k.{helper}({ins[0]}, {ins[1]})"
    return rule


def _element_exp(ctx, eqn, ins):
    dtype = _out(eqn).dtype
    if dtype.kind == "c":
        return f"np.exp({ins[0]})"
    return _exp(ins[0], dtype) if np.issubdtype(dtype, np.floating) else None


def _element_logistic(ctx, eqn, ins):
    dtype = _out(eqn).dtype
    if not np.issubdtype(dtype, np.floating):
        return None
    one = ctx.const(1, dtype)
    return f"({one} / ({one} + {_exp(f'-{ins[0]}', dtype)}))"


def _xla_kernel(float32_helper, float64_helper):
    """One of ``random.kernels``' XLA float kernels, by its ``native_kernels`` helper per
    dtype: bit for bit its impl (float16 and narrower are left to the Python tier)."""
    def rule(ctx, eqn, ins):
        dtype = _out(eqn).dtype
        helper = {np.dtype(np.float32): float32_helper,
                  np.dtype(np.float64): float64_helper}.get(dtype)
        return None if helper is None else f"{helper}({', '.join(ins)})"
    return rule


_XLA_KERNELS = {
    "xla_erf_inv": _xla_kernel("_k.erf_inv_f32", "_k.erf_inv_f64"),
    "xla_log1p": _xla_kernel("_k.log1p_f32", "_k.log1p_f64"),
    "xla_log": _xla_kernel("_k.log_f32", "np.log"),
    "fma": _xla_kernel("_k.fma", "_k.fma"),
}
for _name, _rule in _XLA_KERNELS.items():  # (rank 0; arrays are fused element by element)
    rules[_name] = lambda ctx, eqn, ins, _rule=_rule: None if any(
        _rank(v) for v in eqn.invars) else [_rule(ctx, eqn, ins)]


_ELEMENT_RULES = {
    **_XLA_KERNELS,
    **{name: _binary(op) for name, op in _BINARY_OPS.items()},
    **{name: _call(f) for name, f in {**_FLOAT_UNARY, **_FLOAT_BINARY}.items()},
    "div": _element_int("div", _div), "rem": _element_int("rem", _rem),
    "max": _element_max_min(">"), "min": _element_max_min("<"),
    "neg": rules["neg"], "abs": rules["abs"], "sign": rules["sign"],
    "square": lambda ctx, eqn, ins: f"({ctx.let(ins[0])} * {ctx.let(ins[0])})",
    "rsqrt": rules["rsqrt"], "logistic": _element_logistic, "tanh": _element_tanh,
    "exp": _element_exp,
    "integer_pow": _element_integer_pow, "select_n": _element_select_n,
    "clamp": lambda ctx, eqn, ins: f"np.minimum(np.maximum({ins[1]}, {ins[0]}), {ins[2]})",
    "and": _binary("&"), "or": _binary("|"), "xor": _binary("^"),  # (bools too)
    "not": lambda ctx, eqn, ins: f"(not {ins[0]})" if eqn.invars[0].aval.dtype == np.bool_
    else f"(~{ins[0]})",
    "convert_element_type": _element_convert,
    "real": lambda ctx, eqn, ins: f"({ins[0]}).real",
    "imag": lambda ctx, eqn, ins: f"({ins[0]}).imag",
    "conj": lambda ctx, eqn, ins: f"np.conj({ins[0]})",
    "complex": lambda ctx, eqn, ins: f"complex({ins[0]}, {ins[1]})",
    **{name: (lambda ctx, eqn, ins: ins[0]) for name in (
        "copy", "copy_p", "name", "stop_gradient")},
}


def element_source(ctx, eqn, ins):
    """The source of one element of an elementwise equation's result from its operands'
    elements ``ins`` (scalar sources), of the result's dtype; None if it has no such form.
    ``ctx.let(src)`` names a scalar used more than once."""
    rule = _ELEMENT_RULES.get(eqn.primitive.name)
    src = rule(ctx, eqn, ins) if rule is not None else None
    if isinstance(src, list):  # (a rule shared with the array form)
        (src,) = src
    dtype = _out(eqn).dtype
    if src is None or dtype == np.bool_:
        return src
    return f"{ctx.dtype(dtype)}({src})"


ELEMENTWISE = frozenset(_ELEMENT_RULES)


# --- indices, for fused loops ----------------------------------------------------------------


class Index:
    """An index inside a fused loop: its source, the range ``[lo, hi]`` of values it takes in
    the loop being written and, when it is ``var * scale + offset`` of one loop variable,
    that form. A concatenation or pad reads only the parts a loop's range touches, and tells
    the loop where to split (``ctx.split``) so that each piece touches one part."""

    __slots__ = ("src", "lo", "hi", "var", "scale", "offset")

    def __init__(self, src, lo, hi, var=None, scale=1, offset=0):
        self.src, self.lo, self.hi = src, lo, hi
        self.var, self.scale, self.offset = var, scale, offset

    @classmethod
    def loop(cls, var, lo, hi):
        return cls(var, lo, hi, var)

    @classmethod
    def const(cls, k):
        return cls(str(k), k, k)

    def _affine(self, src, lo, hi, scale, offset):
        if lo == hi:
            return Index.const(lo)
        return Index(src, lo, hi, self.var, scale, offset) if self.var else Index(src, lo, hi)

    def shift(self, a):
        """``self + a``."""
        if not a:
            return self
        src = f"{self.src} + {a}" if a > 0 else f"{self.src} - {-a}"
        return self._affine(src, self.lo + a, self.hi + a, self.scale, self.offset + a)

    def times(self, k):
        """``self * k`` (a positive stride)."""
        if k == 1:
            return self
        return self._affine(f"({self.src}) * {k}", self.lo * k, self.hi * k, self.scale * k,
                            self.offset * k)

    def flip(self, n):
        """``n - 1 - self``."""
        return self._affine(f"{n - 1} - ({self.src})", n - 1 - self.hi, n - 1 - self.lo,
                            -self.scale, n - 1 - self.offset)

    def clamp(self, n):
        """Into ``[0, n)``: the sides the range crosses."""
        src = self.src
        if self.lo < 0:
            src = f"max({src}, 0)"
        if self.hi > n - 1:
            src = f"min({src}, {n - 1})"
        if src == self.src:
            return self
        lo, hi = min(max(self.lo, 0), n - 1), min(max(self.hi, 0), n - 1)
        return Index.const(lo) if lo == hi else Index(src, lo, hi)

    def plus(self, name, most):
        """``self + name``, ``name`` a runtime start in ``[0, most]``."""
        return Index(f"{name} + ({self.src})", self.lo, self.hi + most)

    def crossing(self, bound):
        """The loop variable and the first value of it at which ``self >= bound`` turns (None
        when the index is not a unit-stride form of one variable)."""
        if self.var is None or self.scale not in (1, -1):
            return None
        return self.var, (bound - self.offset if self.scale == 1 else self.offset - bound + 1)


def index_remap(eqn):
    """For an equation whose result's elements are its operand's, rearranged: ``(idx,
    starts) -> the operand's index`` (``Index`` lists); None for others."""
    name, p = eqn.primitive.name, eqn.params
    if not eqn.invars:  # (iota: its array rule)
        return None
    x, out = eqn.invars[0].aval, _out(eqn)
    if name == "slice":
        strides = p.get("strides") or (1,) * len(x.shape)
        return lambda idx, starts: [j.times(k).shift(a) for a, k, j in
                                    zip(p["start_indices"], strides, idx)]
    if name == "rev":
        dims = set(p["dimensions"])
        return lambda idx, starts: [j.flip(n) if d in dims else j
                                    for d, (n, j) in enumerate(zip(x.shape, idx))]
    if name == "transpose":
        perm = list(p["permutation"])
        return lambda idx, starts: [idx[perm.index(d)] for d in range(len(perm))]
    if name == "broadcast_in_dim":
        dims = p["broadcast_dimensions"]
        return lambda idx, starts: [idx[d] if n == out.shape[d] else Index.const(0)
                                    for d, n in zip(dims, x.shape)]
    if name in ("reshape", "squeeze") and [n for n in x.shape if n != 1] == \
            [n for n in out.shape if n != 1]:
        kept = [d for d, n in enumerate(out.shape) if n != 1]
        spots = [d for d, n in enumerate(x.shape) if n != 1]

        def remap(idx, starts):
            inner = [Index.const(0)] * len(x.shape)
            for d, k in zip(spots, kept):
                inner[d] = idx[k]
            return inner
        return remap
    if name == "dynamic_slice":
        sizes = p["slice_sizes"]
        return lambda idx, starts: [j.plus(s, n - k) for s, j, n, k in
                                    zip(starts, idx, x.shape, sizes)]
    return None


def concatenate_element(ctx, eqn, parts):
    """``idx -> source``: a concatenation's element. Only the operands whose span the loop's
    range meets are read, each at its clamped index (in bounds wherever the loop is), the one
    holding the index selected; each boundary inside the range is a place to split."""
    axis = eqn.params["dimension"]
    spans, start = [], 0
    for v, part in zip(eqn.invars, parts):
        n = v.aval.shape[axis]
        if n:
            spans.append((start, n, part))
        start += n

    def at(idx):
        j = idx[axis]
        live = [span for span in spans if j.lo < span[0] + span[1] and j.hi >= span[0]]
        result = None
        for k in range(len(live) - 1, -1, -1):
            s, n, part = live[k]
            if k:
                ctx.split(j, s)
            local = j.shift(-s).clamp(n)
            src = part(idx[:axis] + [local] + idx[axis + 1:])
            result = src if result is None else f"({src} if {j.src} < {s + n} else {result})"
        return result
    return at


def pad_element(ctx, eqn, part, pad_value):
    """``idx -> source``: a pad's element (no interior padding): the operand's where the
    index is inside it (its range decides where it can), else the padding value."""
    shape = eqn.invars[0].aval.shape
    config = eqn.params["padding_config"]

    def at(idx):
        inner, inside = [], []
        for j, n, (lo, _, _) in zip(idx, shape, config):
            q = j.shift(-lo)  # the operand's index
            if q.hi < 0 or q.lo > n - 1 or not n:
                return pad_value
            if q.lo < 0:
                inside.append(f"{q.src} >= 0")
                ctx.split(q, 0)
            if q.hi > n - 1:
                inside.append(f"{q.src} < {n}")
                ctx.split(q, n)
            inner.append(q.clamp(n))
        src = part(inner)
        return f"({src} if {' and '.join(inside)} else {pad_value})" if inside else src
    return at


def _convert(ctx, eqn, ins):
    new = np.dtype(eqn.params["new_dtype"])
    old = eqn.invars[0].aval.dtype
    if new == np.bool_ and old != np.bool_:
        return [f"({ins[0]} != {ctx.const(0, old)})"]
    if old.kind == "c" and new.kind != "c":  # (the real part, as lax converts)
        if new.kind != "f":
            return None
        ins = [f"np.ascontiguousarray({ins[0]}.real)" if _rank(eqn.invars[0]) else
               f"{ins[0]}.real"]
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
    buf = ctx.bind(f"np.empty({shape_src(out.shape)}, {ctx.dtype(out.dtype)})")
    copy_into(ctx, buf, src, out.shape,
              read=lambda idx: [j if n > 1 else "0" for j, n in zip(idx, expanded)])
    return [buf]


rules["broadcast_in_dim"] = _broadcast_in_dim


def _transpose(ctx, eqn, ins):
    perm = tuple(eqn.params["permutation"])
    if perm == tuple(range(len(perm))):
        return [ins[0]]
    return [f"np.transpose({ins[0]}, {shape_src(perm)})"]


rules["transpose"] = _transpose


def _index_src(parts):
    return "[" + (", ".join(parts) or "...") + "]"  # (a rank-0 array: all of it)


def copy_into(ctx, target, value, shape, starts=None, lead="", read=None):
    """Write the array ``value`` (of ``shape``) into ``target[lead, starts + j]`` element by
    element, as a loop nest (``read(j)``: the parts of ``value``'s index, where it is not
    ``j`` itself). numba compiles an array assigned to a slice with a shape check that costs
    about a second of compile time each (four of them were half of a 7 s compile); a loop nest
    costs milliseconds, and runs as fast on a loop body's small arrays."""
    if not shape:
        ctx.line(f"{target}[{lead or '()'}] = {value}")
        return
    value = value if value.isidentifier() else ctx.bind(value)
    names = _loop_nest(ctx, shape)
    at = names if starts is None else [f"{s} + {j}" for s, j in zip(starts, names)]
    ctx.line(f"{target}[{lead}{', '.join(at)}] = "
             f"{value}[{', '.join(names if read is None else read(names))}]")
    ctx.indent -= len(shape)


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
    buf = ctx.bind(f"np.empty({shape_src(shape)}, {ctx.dtype(dtype)})")
    idx = _loop_nest(ctx, shape)
    ctx.line(f"{buf}[{', '.join(idx)}] = {idx[dim]}")
    ctx.indent -= len(idx)
    return [buf]


rules["iota"] = _iota


def _clamped_starts(ctx, operand, starts, sizes):
    """The starts clamped into the array ``operand``'s bounds, read from its shape (not
    written in: a loop over a buffer of another size runs the same kernel)."""
    return [ctx.bind(f"min(max(int({s}), 0), {operand}.shape[{d}] - {k})")
            for d, (s, k) in enumerate(zip(starts, sizes))]


def _dynamic_slice(ctx, eqn, ins):
    sizes = eqn.params["slice_sizes"]
    operand = ins[0] if ins[0].isidentifier() else ctx.bind(ins[0])
    starts = _clamped_starts(ctx, operand, ins[1:], sizes)
    return [f"{operand}{_index_src([f'{s}:{s} + {k}' for s, k in zip(starts, sizes)])}"]


rules["dynamic_slice"] = _dynamic_slice


def write_update(ctx, eqn, ins, target):
    """Write the update of a ``dynamic_update_slice`` (``ins``: its operands' sources) into
    the array named ``target``."""
    sizes = eqn.invars[1].aval.shape
    starts = _clamped_starts(ctx, target, ins[2:], sizes)
    ctx.line(f"{target}{_index_src([f'{s}:{s} + {k}' for s, k in zip(starts, sizes)])} = "
             f"{ins[1]}")


def write_update_native(ctx, eqn, ins, target):
    """``write_update`` as the native tier writes it: the update copied by a loop nest."""
    sizes = eqn.invars[1].aval.shape
    starts = _clamped_starts(ctx, target, ins[2:], sizes)
    copy_into(ctx, target, ins[1], sizes, starts)


def _dynamic_update_slice(ctx, eqn, ins):
    buf = ctx.bind(f"{ins[0]}.copy()")
    write_update_native(ctx, eqn, ins, buf)
    return [buf]


rules["dynamic_update_slice"] = _dynamic_update_slice
# how an update (``registry.update_impls``) is written into a named array, its operand's
# buffer, as ``write(ctx, eqn, ins, target)``: the source both tiers write it as in place
update_rules = {"dynamic_update_slice": write_update}


# --- gathers and scatters of single elements along indexed axes ------------------------------
# The form a vmapped loop's ``x[i]`` and ``x.at[i].set(v)`` take: each operand axis is a
# batching axis (one per batch element), an indexed axis (one element, at an index read per
# batch element) or a whole window. A loop over the batch elements reads or writes one
# element or whole-axis block each, so the work is that of the elements addressed, whatever
# the operand's size. Other forms keep their loop on the Python tier.


def _point_axes(shape, sizes, batching, index_batching, indexed, collapsed, batch_rank):
    """Per operand axis ``("batch", batch axis)``, ``("index", position in the index vector)``
    (``"index1"`` where the result keeps the axis, of length 1) or ``("window", None)``;
    None unless every axis is one of these."""
    axes = []
    for d, n in enumerate(shape):
        if d in batching:
            b = index_batching[batching.index(d)]
            if b >= batch_rank:
                return None
            axes.append(("batch", b))
        elif d in indexed:
            if d not in collapsed and sizes[d] != 1:
                return None
            axes.append(("index" if d in collapsed else "index1", indexed.index(d)))
        elif d in collapsed or sizes[d] != n:
            return None
        else:
            axes.append(("window", None))
    return axes


def _loop_nest(ctx, shape):
    """Open a loop nest over ``shape``; its index variables (the caller closes it)."""
    names = [ctx.fresh() for _ in shape]
    for j, n in zip(names, shape):
        ctx.line(f"for {j} in range({n}):")
        ctx.indent += 1
    return names


def _point_loop(ctx, axes, operand, indices, batch_shape, clamp):
    """Open a loop over the batch elements; the array ``operand``'s index parts there and the
    condition that every index is in bounds (None where there is no index), the indices
    clamped into bounds where ``clamp``. The bounds are read from ``operand``'s shape, not
    written in: a loop over a buffer of another size runs the same kernel."""
    qs = _loop_nest(ctx, batch_shape)
    parts, bounds = [], []
    for d, (kind, k) in enumerate(axes):
        if kind == "batch":
            parts.append(qs[k])
        elif kind == "window":
            parts.append(":")
        else:
            start = ctx.bind(f"int({indices}[{', '.join([*qs, str(k)])}])")
            last = f"{operand}.shape[{d}] - 1"
            bounds.append(f"0 <= {start} <= {last}")
            if clamp:
                ctx.line(f"{start}_ = min(max({start}, 0), {last})")
                start += "_"
            parts.append(start if kind == "index" else f"{start}:{start} + 1")
    return qs, parts, " and ".join(bounds) or None


def _around(qs, window_positions, rank):
    """The index parts of a gather's result or a scatter's updates: ``:`` at the window
    positions, the batch loop's variables elsewhere, in order."""
    batch = iter(qs)
    return [":" if i in window_positions else next(batch) for i in range(rank)]


def _gather(ctx, eqn, ins):
    dn, p = eqn.params["dimension_numbers"], eqn.params
    shape, index_shape, out = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape, _out(eqn)
    axes = _point_axes(shape, p["slice_sizes"], dn.operand_batching_dims,
                       dn.start_indices_batching_dims, dn.start_index_map,
                       dn.collapsed_slice_dims, len(index_shape) - 1)
    masked = p["mode"].name in ("FILL_OR_DROP", "ONE_HOT")
    fill = 0 if p["mode"].name == "ONE_HOT" else p["fill_value"]
    if axes is None or (masked and fill is None):
        return None  # (JAX's default fill value: the Python tier computes it)
    operand, indices = ctx.bind(ins[0]), ctx.bind(ins[1])
    buf = ctx.bind(f"np.empty({shape_src(out.shape)}, {ctx.dtype(out.dtype)})")
    qs, parts, bounds = _point_loop(ctx, axes, operand, indices, index_shape[:-1], clamp=True)
    target = f"{buf}{_index_src(_around(qs, set(dn.offset_dims), len(out.shape)))}"
    if masked and bounds:
        ctx.line(f"if {bounds}:")
        ctx.line(f"    {target} = {operand}{_index_src(parts)}")
        ctx.line("else:")
        ctx.line(f"    {target} = {ctx.const(fill, out.dtype)}")
    else:
        ctx.line(f"{target} = {operand}{_index_src(parts)}")
    ctx.indent -= len(qs)
    return [buf]


_COMBINES = {"scatter": None, "scatter-add": "+", "scatter-sub": "-", "scatter-mul": "*",
             "scatter-min": "np.minimum", "scatter-max": "np.maximum"}


def _scatter_axes(eqn):
    """``_point_axes`` of a scatter's operand, or None."""
    dn = eqn.params["dimension_numbers"]
    shape = eqn.invars[0].aval.shape
    index_shape, updates = eqn.invars[1].aval.shape, eqn.invars[2].aval
    window_dims = [d for d in range(len(shape)) if d not in dn.inserted_window_dims
                   and d not in dn.operand_batching_dims]
    sizes = [1] * len(shape)
    for d, u in zip(window_dims, dn.update_window_dims):
        sizes[d] = updates.shape[u]
    if len(index_shape) - 1 != updates.ndim - len(dn.update_window_dims):
        return None
    return _point_axes(shape, sizes, dn.operand_batching_dims, dn.scatter_indices_batching_dims,
                       dn.scatter_dims_to_operand_dims, dn.inserted_window_dims,
                       len(index_shape) - 1)


def write_scatter(ctx, eqn, ins, target):
    """Write a scatter of single elements along indexed axes into the array named
    ``target``, update by update in row-major order (the last of duplicates wins, and
    combining scatters accumulate in that order, as the impl's ``ufunc.at`` does)."""
    dn, p = eqn.params["dimension_numbers"], eqn.params
    index_shape, updates = eqn.invars[1].aval.shape, eqn.invars[2].aval
    axes = _scatter_axes(eqn)
    if axes is None:
        raise Unsupported("scatter of this form")
    indices, values = ctx.bind(ins[1]), ctx.bind(ins[2])
    clamp = p["mode"].name == "CLIP"
    qs, parts, bounds = _point_loop(ctx, axes, target, indices, index_shape[:-1], clamp)
    bounds = None if clamp else bounds
    if bounds:
        ctx.line(f"if {bounds}:")
        ctx.indent += 1
    at = f"{target}{_index_src(parts)}"
    value = values if not updates.ndim else \
        f"{values}{_index_src(_around(qs, set(dn.update_window_dims), updates.ndim))}"  # (a
    # rank-0 update is a scalar in a kernel's body)
    combine = _COMBINES[eqn.primitive.name]
    if combine is None:
        ctx.line(f"{at} = {value}")
    elif combine.startswith("np."):
        ctx.line(f"{at} = {combine}({at}, {value})")
    else:
        ctx.line(f"{at} = {at} {combine} {value}")
    ctx.indent -= bool(bounds) + len(qs)


def _scatter(ctx, eqn, ins):
    if _scatter_axes(eqn) is None:
        return None
    buf = ctx.bind(f"{ins[0]}.copy()")
    write_scatter(ctx, eqn, ins, buf)
    return [buf]


rules["gather"] = _gather
for _name in _COMBINES:
    rules[_name] = _scatter
# the native tier's further updates written in place (the Python tier calls their ``into``)
native_update_rules = {**update_rules, "dynamic_update_slice": write_update_native,
                       **dict.fromkeys(_COMBINES, write_scatter)}
# primitives whose work is the part of their first operand they address, not its size: that
# operand (and an update's result, written in place) may be larger than a body's values
ADDRESSING = frozenset({"gather", "dynamic_slice", "dynamic_update_slice", *_COMBINES})


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
        if kernel not in ("any_rows", "all_rows") and \
                not math.prod(aval.shape[d] for d in axes):
            return None  # an empty max/min/prod/arg reduction: left to the NumPy path
        args = ", ".join([_rows(ctx, eqn, ins[0], axes), *extra])
        rows = ctx.bind(f"_k.{kernel}({args}).astype({ctx.dtype(out.dtype)})")
        return [reshape_src(ctx, rows, _Shape((math.prod(out.shape),), out.dtype), out.shape)]
    return rule


def numpy_sum_order(shape, axes):
    """How NumPy's ``add.reduce`` over ``axes`` walks a C-contiguous operand of ``shape``:
    ``(sizes, kept_strides, inner, inner_reduced)`` for
    ``native_kernels.sum_in_numpy_order`` (its size-1 dimensions dropped and neighbours of one
    kind merged, as NumPy's iterator does; a leading dimension of 1 so that ``sizes`` is never
    empty)."""
    dims = []
    for d, size in enumerate(shape):
        if size != 1:
            if dims and dims[-1][1] == (d in axes):
                dims[-1][0] *= size
            else:
                dims.append([size, d in axes])
    inner, inner_reduced = dims.pop() if dims else (1, True)
    dims.insert(0, [1, False])
    kept_strides, stride = [], 1
    for size, reduced in reversed(dims):
        kept_strides.append(0 if reduced else stride)
        stride *= 1 if reduced else size
    return tuple(s for s, _ in dims), tuple(reversed(kept_strides)), inner, inner_reduced


def float_sum(ctx, eqn, x, axes, out=None):
    """A float sum rounded as the Python tier's NumPy sum of a C-contiguous operand: in its
    dtype, pairwise along a reduced innermost run, in order across the rest (a float64
    accumulator rounded otherwise: an ulp off, and a tier handing over mid-call changed a
    result). ``out``: a flat array of the result's size to write it into (else a new one)."""
    aval = eqn.invars[0].aval
    if not np.issubdtype(aval.dtype, np.floating) or not math.prod(aval.shape):
        return None
    sizes, kept_strides, inner, inner_reduced = numpy_sum_order(aval.shape, axes)
    dtype = ctx.dtype(aval.dtype)
    result = _out(eqn)
    if not result.shape and math.prod(sizes) == 1 and inner_reduced:  # (a whole sum)
        flat = f"np.ascontiguousarray({x}).ravel()" if aval.shape else f"np.full(1, {x}, {dtype})"
        return [f"{dtype}(0) + _k.pairwise_sum({flat}, 0, {inner})"]
    rows = f"np.ascontiguousarray({x}).reshape(({math.prod(sizes)}, {inner}))"
    if out is None:
        out = ctx.bind(f"np.empty({math.prod(result.shape)}, {dtype})")
    ctx.line(f"_k.sum_in_numpy_order({rows}, {sizes}, {kept_strides}, {inner_reduced}, {out})")
    if not result.shape:
        return [f"{out}[0]"]
    return [reshape_src(ctx, out, _Shape((math.prod(result.shape),), result.dtype), result.shape)]


class _Shape:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


rules["reduce_sum"] = lambda ctx, eqn, ins: float_sum(ctx, eqn, ins[0], eqn.params["axes"])
rules["reduce_max"] = _reduction("extreme_rows", "True")
rules["reduce_min"] = _reduction("extreme_rows", "False")
rules["reduce_prod"] = _reduction("prod_rows")
rules["reduce_or"] = _reduction("any_rows")
rules["reduce_and"] = _reduction("all_rows")
rules["argmax"] = _reduction("arg_extreme_rows", "True")
rules["argmin"] = _reduction("arg_extreme_rows", "False")


def matrix_product(eqn, ins):
    """``(a, b)`` with ``a @ b`` the equation's result when it is a product of two matrices
    of one BLAS type (either may be a transposed view: BLAS takes it as it is); else None."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs, rhs, out = eqn.invars[0].aval, eqn.invars[1].aval, _out(eqn)
    if lb or len(lc) != 1 or len(lhs.shape) != 2 or len(rhs.shape) != 2 or \
            lhs.dtype != rhs.dtype or lhs.dtype != out.dtype or \
            lhs.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    return (ins[0] if lc[0] == 1 else f"{ins[0]}.T"), (ins[1] if rc[0] == 0 else f"{ins[1]}.T")


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


def _threefry2x32(ctx, eqn, ins):
    """``remat.random``'s hash, element by element (``_k.threefry_pair``); operands of the
    output's shape or rank-0."""
    shape = _out(eqn).shape
    if any(_rank(v) and v.aval.shape != shape for v in eqn.invars):
        return None
    if not shape:
        pair = ctx.bind(f"_k.threefry_pair({', '.join(ins)})")
        return [f"{pair}[0]", f"{pair}[1]"]
    a, b = (ctx.bind(f"np.empty({shape_src(shape)}, np.uint32)") for _ in range(2))
    elements = _elements(ctx, eqn, ins)
    at = ", ".join(_loop_nest(ctx, shape))
    pair = ctx.bind(f"_k.threefry_pair({', '.join(elements(at))})")
    ctx.line(f"{a}[{at}], {b}[{at}] = {pair}[0], {pair}[1]")
    ctx.indent -= len(shape)
    return [a, b]


rules["threefry2x32"] = _threefry2x32
