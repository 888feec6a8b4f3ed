"""The core: abstract values, primitives, traces and tracers, the jaxpr IR and its evaluator.

Every operation ends as ``Primitive.bind``, which hands the primitive to the *current trace*.
A transformation (jvp, vmap, staging, partial evaluation) is a ``Trace`` subclass; it makes
itself current while the user's function runs, and runs its rules with its ``parent`` current,
so transformations nest in any order. A trace treats any value that is not one of its own
tracers as a constant of its parent's (values of enclosing transformations included), which is
what keeps tracers of different transformations from being confused.
"""

import contextlib
import itertools

import numpy as np

from remat import dtypes, sharding, source_info
from remat.errors import (
    ConcretizationTypeError,
    TracerArrayConversionError,
    TracerBoolConversionError,
    TracerIntegerConversionError,
    UnexpectedTracerError,
)
from remat.runtime import memory

# --- abstract values -------------------------------------------------------------------------


class AbstractValue:
    """The base of abstract values (JAX's ``core.AbstractValue``: libraries test for it)."""

    __slots__ = ()


class ShapedArray(AbstractValue):
    """The abstract value of an array: shape, dtype and whether its dtype is weak."""

    __slots__ = ("shape", "dtype", "weak_type", "_hash")
    array_abstraction_level = 1

    def __init__(self, shape, dtype, weak_type=False, *, sharding=None):
        # ``sharding``: JAX's avals carry one; remat's values are whole on the host, so an
        # aval's sharding is always the replicated one (below) and a given one is not kept
        del sharding
        self.shape = tuple(shape)
        # extended dtypes (key<fry>) stay themselves; their values are NumPy records
        self.dtype = dtype if isinstance(dtype, (np.dtype, dtypes.ExtendedDType)) else \
            np.dtype(dtype)
        self.weak_type = bool(weak_type)
        self._hash = None

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def sharding(self):
        """JAX's sharding of an abstract value: replicated over the abstract mesh in force
        (remat's arrays are whole on the host), so ``typeof(x).sharding.mesh`` and ``.spec``
        read as in JAX."""
        return sharding.NamedSharding(sharding.get_abstract_mesh(),
                                      sharding.PartitionSpec(*(None,) * len(self.shape)))

    def update(self, shape=None, dtype=None, weak_type=None, sharding=None):
        del sharding  # (see __init__)
        return ShapedArray(self.shape if shape is None else shape,
                           self.dtype if dtype is None else dtype,
                           self.weak_type if weak_type is None else weak_type)

    def strip_weak_type(self):
        return self.update(weak_type=False) if self.weak_type else self

    def to_tangent_aval(self):
        """The aval of tangents/cotangents: float0 for integer and boolean values."""
        if dtypes.is_inexact(self.dtype):
            return self
        return ShapedArray(self.shape, dtypes.float0)

    def __eq__(self, other):
        return (type(other) is ShapedArray and self.shape == other.shape
                and self.dtype == other.dtype and self.weak_type == other.weak_type)

    def __hash__(self):
        if self._hash is None:
            self._hash = hash((self.shape, self.dtype, self.weak_type))
        return self._hash

    def str_short(self):
        return f"{dtypes.short_name(self.dtype)}[{','.join(str(d) for d in self.shape)}]"

    def __str__(self):
        return self.str_short()

    def __repr__(self):
        weak = ", weak_type=True" if self.weak_type else ""
        return f"ShapedArray({self.str_short()}{weak})"

    # Tracers with this aval raise on Python-level concretization.
    def _bool(self, tracer):
        raise TracerBoolConversionError(tracer, "The bool() of a traced value was requested.")

    def _int(self, tracer):
        raise ConcretizationTypeError(tracer, "The int() of a traced value was requested.")

    def _float(self, tracer):
        raise ConcretizationTypeError(tracer, "The float() of a traced value was requested.")


_INT32_RANGE = (np.iinfo(np.int32).min, np.iinfo(np.int32).max)


def _python_scalar_aval(x):
    dtype = dtypes.python_scalar_dtype(x)
    if type(x) is int and dtype == dtypes.int32 and not _INT32_RANGE[0] <= x <= _INT32_RANGE[1]:
        raise OverflowError(f"Python int {x} too large to convert to int32")
    return ShapedArray((), dtype, weak_type=type(x) is not bool)  # bools are never weak


# the avals of types of the layers above that stand for arrays without being values (the
# ShapeDtypeStruct of api_util), as JAX's ``pytype_aval_mappings``
pytype_aval_mappings = {}


def get_aval(x):
    """The abstract value of an array, tracer, NumPy value or Python scalar (or of a type
    registered in ``pytype_aval_mappings``)."""
    aval = getattr(x, "aval", None)
    if aval is not None:
        return aval
    if type(x) in _PYTHON_SCALARS:
        return _python_scalar_aval(x)
    if isinstance(x, (np.ndarray, np.generic)):
        return ShapedArray(x.shape, dtypes.canonicalize_dtype(x.dtype))
    mapping = pytype_aval_mappings.get(type(x))
    if mapping is not None:
        return mapping(x)
    raise TypeError(f"Value {x!r} with type {type(x)} is not a valid JAX type")


_PYTHON_SCALARS = (bool, int, float, complex)


def is_array_like(x):
    return (hasattr(x, "aval") or type(x) in _PYTHON_SCALARS
            or isinstance(x, (np.ndarray, np.generic)))


def to_numpy(x, aval=None):
    """A concrete value (Array, NumPy value or Python scalar) as an ndarray of its remat dtype."""
    buf = getattr(x, "_buf", None)
    if buf is not None:
        return buf
    aval = aval or get_aval(x)
    return np.asarray(x, dtype=aval.dtype)


# --- floating-point errors ------------------------------------------------------------------
# Impls run with NumPy's floating-point errors ignored: log(-1), 1/0 and overflow give nan/inf
# silently, as in JAX, not RuntimeWarnings from inside remat. NumPy 2 keeps that state in a
# context variable; setting it directly costs a fifth of entering np.errstate (once per op).

try:
    from numpy._core._multiarray_umath import _extobj_contextvar as _np_fp_state
except ImportError:  # NumPy 1: a per-thread setting
    _np_fp_state = None

if _np_fp_state is not None:
    with np.errstate(all="ignore"):
        _FP_IGNORED = _np_fp_state.get()

    def ignore_fp_errors():
        """Ignore floating-point errors until ``restore_fp_errors(token)``."""
        return _np_fp_state.set(_FP_IGNORED)

    def restore_fp_errors(token):
        _np_fp_state.reset(token)
else:
    def ignore_fp_errors():
        """Ignore floating-point errors until ``restore_fp_errors(token)``."""
        return np.seterr(all="ignore")

    def restore_fp_errors(token):
        np.seterr(**token)


# --- the current trace -----------------------------------------------------------------------


class Trace:
    """A transformation's interpreter. ``parent`` is the trace its rules run under."""

    def __init__(self, parent):
        self.parent = parent
        self.level = 0 if parent is None else parent.level + 1
        self._alive = True

    @property
    def main(self):
        """JAX's older name for a trace's identity (its ``tag``): equinox tells a
        transformation's own tracers by ``tracer._trace.main``. A remat trace is its own."""
        return self

    def process_primitive(self, primitive, args, params):
        raise NotImplementedError  # every concrete trace overrides this

    def check_foreign(self, tracer):
        """Validate a tracer of another trace found among this trace's arguments."""
        other = tracer._trace
        if not other._alive:
            where = other.describe_leak(tracer)
            where = "\n" + where if where else ""
            raise UnexpectedTracerError(
                f"Encountered an unexpected tracer. A function transformed by remat had a side "
                f"effect, allowing for a reference to an intermediate value with type "
                f"{tracer.aval.str_short()} wrapped in a {type(tracer).__name__} to escape the "
                f"scope of the transformation.\nremat transformations require that functions "
                f"explicitly return their outputs, and disallow saving intermediate values to "
                f"global state.{where}")
        if other.level >= self.level and not _ctx.set_aside:
            raise UnexpectedTracerError(
                f"Encountered an unexpected tracer: {tracer!r} belongs to a transformation "
                f"({type(other).__name__}) that does not enclose the current one "
                f"({type(self).__name__}); it escaped through a side effect.")

    def describe_leak(self, tracer):
        """For the escaped-tracer error: which function was being traced when ``tracer``
        leaked, and where the value was created ('' when this trace does not know)."""
        return ""

    def end(self):
        """Mark this trace finished: its tracers may no longer be used."""
        self._alive = False

    def __repr__(self):
        return f"{type(self).__name__}(level={self.level})"


class EvalTrace(Trace):
    """Eager evaluation: each primitive runs its impl on NumPy buffers."""

    def process_primitive(self, primitive, args, params):
        quiet = ignore_fp_errors()
        try:
            bufs = []
            avals = []
            borrowed = []
            for x in args:
                if type(x) is _array_type:
                    bufs.append(x._buf)
                    avals.append(x.aval)
                elif isinstance(x, Tracer):
                    return self._forward_to_tracer_trace(primitive, args, params)
                else:
                    aval = get_aval(x)
                    if not isinstance(aval, ShapedArray):  # a mutable array: see ref_eval
                        return ref_eval(self, primitive, args, params)
                    avals.append(aval)
                    if type(x) is np.ndarray and x.dtype == aval.dtype:
                        borrowed.append(x)  # (read, never written: see unborrowed)
                        bufs.append(x)
                    else:
                        bufs.append(np.array(x, dtype=aval.dtype))
            out_aval = abstract_eval(primitive, avals, params)
            out = primitive.impl(*bufs, **params)
            if primitive.multiple_results:
                out = [make_array(unborrowed(o, borrowed), a) for o, a in zip(out, out_aval)]
            else:
                out = make_array(unborrowed(out, borrowed), out_aval)
        finally:
            restore_fp_errors(quiet)
        if memory._recorder is not None:
            memory.record_step(primitive)
        return out

    def _forward_to_tracer_trace(self, primitive, args, params):
        # Reached under ensure_compile_time_eval (or with an escaped tracer): traced operands
        # are still traced, by the innermost trace among them.
        tracers = [x for x in args if isinstance(x, Tracer)]
        for t in tracers:
            if not t._trace._alive:
                self.check_foreign(t)
        trace = max((t._trace for t in tracers), key=lambda tr: tr.level)
        with set_current_trace(trace):
            return primitive.bind(*args, **params)


def abstract_eval(primitive, avals, params):
    """``primitive.abstract_eval`` whose shape/dtype errors name the user's source line."""
    try:
        return primitive.abstract_eval(*avals, **params)
    except (TypeError, ValueError) as e:
        where = source_info.current()
        if where is not None and not getattr(e, "_remat_noted", False):
            e.add_note(f"(raised by '{primitive.name}' at {where.file}:{where.line} "
                       f"in {where.function})")
            e._remat_noted = True
        raise


def unborrowed(buf, borrowed):
    """``buf``, or a copy where it may share memory with one of the ``borrowed`` NumPy arrays.
    The user's NumPy arguments are read in place, not copied, at every call (an RNN's 8 MiB of
    inputs was copied at every step); a result is an immutable Array, so one that is, or views,
    such an argument (an identity, a reshape) gets its own copy: the user may write theirs."""
    if not borrowed or type(buf) is not np.ndarray:
        return buf
    if buf.base is None:  # (a buffer of its own: one of theirs, or none of theirs)
        return buf.copy() if any(buf is b for b in borrowed) else buf
    owner = memory.owner(buf)
    return buf.copy() if any(owner is memory.owner(b) for b in borrowed) else buf


def make_array(buf, aval):
    """Wrap an impl's output buffer as an Array of ``aval`` (fixing NumPy's dtype drift)."""
    if type(buf) is not np.ndarray:
        inner = getattr(buf, "_buf", None)
        buf = inner if inner is not None else np.asarray(buf)
    if buf.dtype != aval.dtype:
        buf = buf.astype(aval.dtype)
    if buf.shape != aval.shape:
        raise AssertionError(f"impl produced shape {buf.shape}, abstract eval {aval.shape}")
    return _array_type._new(buf, aval)


def array_of_value(x):
    """A Python scalar or NumPy value as the Array JAX would have made of it (weakly typed for
    a Python scalar); anything else (an Array, a tracer) as it is."""
    if type(x) in (bool, int, float, complex) or isinstance(x, (np.ndarray, np.generic)):
        aval = get_aval(x)
        return make_array(np.array(x, dtype=aval.dtype), aval)
    return x


_array_type = None  # remat.array.Array, registered by that module
# How an operation on a mutable array reference (remat.Ref: its aval is not a ShapedArray) is
# run eagerly: ``ref_eval(trace, primitive, args, params)``, set by remat.interpreters.discharge
ref_eval = None


def register_array_type(cls):
    global _array_type
    _array_type = cls


class _TraceContext:
    __slots__ = ("trace", "set_aside")

    def __init__(self):
        self.trace = EvalTrace(None)
        self.set_aside = 0  # how many ensure_compile_time_eval blocks are open


_ctx = _TraceContext()
eval_trace = _ctx.trace


def current_trace():
    return _ctx.trace


class set_current_trace:  # noqa: N801 (used as a function: ``with set_current_trace(t):``)
    """Inside, ``trace`` is the current trace. A class, not a generator: every primitive a
    transformation processes enters one (contextlib's machinery cost three times as much)."""

    __slots__ = ("trace", "prev")

    def __init__(self, trace):
        self.trace = trace

    def __enter__(self):
        self.prev = _ctx.trace
        _ctx.trace = self.trace
        return self.trace

    def __exit__(self, *exc):
        _ctx.trace = self.prev


@contextlib.contextmanager
def ensure_compile_time_eval():
    """Evaluate operations on concrete values eagerly, even inside traced code. The traces
    set aside stay live: a tracer of theirs met here is a constant to the traces started here
    (as JAX: lineax takes ``eval_shape`` of a closure over a tracer in such a block)."""
    _ctx.set_aside += 1
    try:
        with set_current_trace(eval_trace):
            yield
    finally:
        _ctx.set_aside -= 1


@contextlib.contextmanager
def new_trace(trace_cls, *args, **kwargs):
    """Create a trace over the current one, make it current, and end it on exit."""
    trace = trace_cls(_ctx.trace, *args, **kwargs)
    try:
        with set_current_trace(trace):
            yield trace
    finally:
        trace.end()


# --- tracers ---------------------------------------------------------------------------------


class Tracer:
    """A value under a transformation. Array methods and operators are attached by
    ``remat.numpy`` so they work alike on tracers and Arrays."""

    __slots__ = ("_trace", "__weakref__")
    __array_priority__ = 1000

    @property
    def aval(self):
        raise NotImplementedError  # every tracer type defines its aval

    shape = property(lambda self: self.aval.shape)
    dtype = property(lambda self: self.aval.dtype)
    ndim = property(lambda self: self.aval.ndim)
    size = property(lambda self: self.aval.size)
    weak_type = property(lambda self: self.aval.weak_type)

    def __len__(self):
        if not self.aval.shape:
            raise TypeError("len() of unsized object")
        return self.aval.shape[0]

    def __iter__(self):
        if not self.aval.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.aval.shape[0]))

    def __bool__(self):
        value = self.concrete_value()
        return self.aval._bool(self) if value is None else bool(value)

    def __int__(self):
        value = self.concrete_value()
        return self.aval._int(self) if value is None else int(value)

    def __float__(self):
        value = self.concrete_value()
        return self.aval._float(self) if value is None else float(value)

    def __complex__(self):
        value = self.concrete_value()
        return self.aval._float(self) if value is None else complex(value)

    def __index__(self):
        value = self.concrete_value()
        if value is None or dtypes.kind(value.dtype) not in "iu":
            raise TracerIntegerConversionError(self)
        return int(value)

    @property
    def _origin(self):
        """Where this tracer's abstract value came from (for ConcretizationTypeError)."""
        return None

    def __array__(self, dtype=None, copy=None):
        raise TracerArrayConversionError(self)

    def __hash__(self):
        raise TypeError(f"unhashable type: {type(self).__name__}")

    def __repr__(self):
        return f"Traced<{self.aval}>with<{type(self._trace).__name__}>"


    def concrete_value(self):
        """The concrete value behind this tracer, or None when it is abstract."""
        return None


def long_type_str(aval):
    """``float32[3]``: an aval as JAX's tracer reprs write it."""
    return f"{np.dtype(aval.dtype).name}[{','.join(str(d) for d in aval.shape)}]"


def value_str(x):
    """A traced value's payload in a tracer repr: concrete values as NumPy prints them."""
    if isinstance(x, Tracer):
        return repr(x)
    return str(np.asarray(x))


def concrete_or_error(x, context=""):
    """A concrete Python/NumPy value of ``x``; ConcretizationTypeError when it is traced."""
    if isinstance(x, Tracer):
        value = x.concrete_value()
        if value is None:
            raise ConcretizationTypeError(x, context)
        return value
    buf = getattr(x, "_buf", None)
    return x if buf is None else buf


# --- primitives ------------------------------------------------------------------------------


class Primitive:
    """An operation the transformations know: an impl, an abstract eval and rules in the
    interpreters' registries (``ad.primitive_jvps``, ``batching.primitive_batchers`` ...)."""

    multiple_results = False

    def __init__(self, name):
        self.name = name
        self.impl = self._no_impl
        self.abstract_eval = self._no_abstract_eval

    def __repr__(self):
        return self.name

    def bind(self, *args, **params):
        return _ctx.trace.process_primitive(self, args, params)

    def get_bind_params(self, params):
        """The params to bind an equation's primitive with again (JAX's hook for jaxpr
        interpreters such as equinox's): remat's primitives bind their params as they are."""
        return dict(params)

    def def_impl(self, impl):
        """``impl(*ndarrays, **params)``: NumPy buffers in, buffer(s) out."""
        self.impl = impl
        return impl

    def def_abstract_eval(self, abstract_eval):
        """``abstract_eval(*avals, **params)``: output aval(s), raising on invalid input."""
        self.abstract_eval = abstract_eval
        return abstract_eval

    def _no_impl(self, *args, **params):
        raise NotImplementedError(f"Evaluation rule for '{self.name}' not implemented")

    def _no_abstract_eval(self, *args, **params):
        raise NotImplementedError(f"Abstract evaluation for '{self.name}' not implemented")


# --- the jaxpr IR ----------------------------------------------------------------------------


class DebugInfo:
    """Where a jaxpr came from: the traced function's name, where it is defined
    (``file:line``, when known) and its arguments' names."""

    __slots__ = ("func_name", "arg_names", "traced_for", "func_src")

    def __init__(self, func_name, arg_names, traced_for="make_jaxpr", func_src=None):
        self.func_name = func_name
        self.arg_names = list(arg_names)
        self.traced_for = traced_for
        self.func_src = func_src

    def __repr__(self):
        return f"DebugInfo({self.traced_for} of {self.func_name}({', '.join(self.arg_names)}))"


class Var:
    """A variable of a jaxpr; compared by identity."""

    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval

    def __repr__(self):
        return f"Var({self.aval})"


class DropVar(Var):
    """An equation output nobody reads (printed ``_``)."""

    __slots__ = ()


class Literal:
    """A scalar constant inlined in an equation."""

    __slots__ = ("val", "aval")

    def __init__(self, val, aval):
        self.val = val
        self.aval = aval

    def __repr__(self):
        return f"Literal({self.val})"

    def bindable(self):
        """The value to bind, with the literal's own type: a weakly typed one as a weak Array
        of its dtype (a Python scalar would take the default dtype, int64 under x64, where the
        equation had resolved it to, say, int32)."""
        if self.aval.weak_type:
            return make_array(np.asarray(self.val, self.aval.dtype), self.aval)
        return self.val


# What an equation reads: a variable or an inlined literal (JAX's ``core.Atom``, which jaxpr
# interpreters such as equinox's annotate with).
Atom = Var | Literal


class JaxprEqn:
    __slots__ = ("invars", "outvars", "primitive", "params", "source_info")

    def __init__(self, invars, outvars, primitive, params, source_info=None):
        self.invars = list(invars)
        self.outvars = list(outvars)
        self.primitive = primitive
        self.params = params
        self.source_info = source_info

    @property
    def effects(self):
        """JAX's set of the equation's effects: remat marks an effectful primitive
        (``has_effects``) rather than typing its effects, so the set names the primitive."""
        if getattr(self.primitive, "has_effects", False):
            return frozenset({self.primitive.name})
        return frozenset()

    def replace(self, **kwargs):
        fields = {s: getattr(self, s) for s in self.__slots__}
        fields.update(kwargs)
        return JaxprEqn(**fields)

    def __repr__(self):
        return pp_eqn(self, _Names())


class Jaxpr:
    """A closed-over-nothing program: ``constvars``, ``invars``, equations, ``outvars``."""

    __slots__ = ("constvars", "invars", "outvars", "eqns", "debug_info", "_free_plan",
                 "__weakref__")

    def __init__(self, constvars, invars, outvars, eqns, debug_info=None):
        self.constvars = list(constvars)
        self.invars = list(invars)
        self.outvars = list(outvars)
        self.eqns = list(eqns)
        self.debug_info = debug_info
        self._free_plan = None

    @property
    def in_avals(self):
        return [v.aval for v in self.invars]

    @property
    def out_avals(self):
        return [v.aval for v in self.outvars]

    def free_plan(self):
        """For each equation, the variables whose last use it is (freed right after it)."""
        if self._free_plan is None:
            last_use = {}
            for i, eqn in enumerate(self.eqns):
                for v in eqn.invars:
                    if type(v) is not Literal:
                        last_use[v] = i
                for v in eqn.outvars:
                    last_use.setdefault(v, i)  # never read: free at once
            for v in self.outvars:
                last_use.pop(v, None)
            plan = [[] for _ in self.eqns]
            for v, i in last_use.items():
                plan[i].append(v)
            self._free_plan = plan
        return self._free_plan

    def __str__(self):
        return pp_jaxpr(self)

    __repr__ = __str__

    def pretty_print(self, *, source_info=False, name_stack=False, **_):
        return pretty_print(self, source_info=source_info, name_stack=name_stack)


class ClosedJaxpr:
    """A jaxpr together with the values of its constvars."""

    __slots__ = ("jaxpr", "consts", "__weakref__")

    def __init__(self, jaxpr, consts):
        assert len(jaxpr.constvars) == len(consts)
        self.jaxpr = jaxpr
        self.consts = list(consts)

    in_avals = property(lambda self: self.jaxpr.in_avals)
    out_avals = property(lambda self: self.jaxpr.out_avals)
    eqns = property(lambda self: self.jaxpr.eqns)

    def __call__(self, *args):
        return eval_jaxpr(self.jaxpr, self.consts, *args)

    def __str__(self):
        return pp_jaxpr(self.jaxpr)

    __repr__ = __str__

    def pretty_print(self, *, source_info=False, name_stack=False, **_):
        return pretty_print(self.jaxpr, source_info=source_info, name_stack=name_stack)


def eval_jaxpr(jaxpr, consts, *args):
    """Evaluate ``jaxpr`` by binding each equation under the current trace, freeing every
    intermediate right after its last use."""
    if len(args) != len(jaxpr.invars):
        raise TypeError(f"jaxpr takes {len(jaxpr.invars)} arguments, got {len(args)}")
    env = {}
    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    free_plan = jaxpr.free_plan()
    saved_info = source_info._override
    try:
        for eqn, frees in zip(jaxpr.eqns, free_plan):
            invals = [v.bindable() if type(v) is Literal else env[v] for v in eqn.invars]
            if eqn.source_info is not None:
                source_info._override = eqn.source_info
            outs = eqn.primitive.bind(*invals, **eqn.params)
            if eqn.primitive.multiple_results:
                for v, x in zip(eqn.outvars, outs):
                    env[v] = x
            else:
                env[eqn.outvars[0]] = outs
            for v in frees:
                env.pop(v, None)
    finally:
        source_info._override = saved_info
    return [v.bindable() if type(v) is Literal else env[v] for v in jaxpr.outvars]


def jaxpr_as_fun(closed_jaxpr):
    return lambda *args: eval_jaxpr(closed_jaxpr.jaxpr, closed_jaxpr.consts, *args)


# --- the printer -----------------------------------------------------------------------------


class _Names:
    """Assigns JAX-style names a, b, ..., z, ba, bb, ... in order of first appearance."""

    def __init__(self):
        self.names = {}
        self.counter = itertools.count()

    def __call__(self, v):
        if isinstance(v, DropVar):
            return "_"
        name = self.names.get(v)
        if name is None:
            name = self.names[v] = _encode(next(self.counter))
        return name


def _encode(n):
    s = chr(ord("a") + n % 26)
    while n >= 26:
        n //= 26
        s = chr(ord("a") + n % 26) + s
    return s


def pp_atom(v, names):
    if type(v) is Literal:
        return f"{_pp_literal(v.val)}:{v.aval.str_short()}"
    return names(v)


def _pp_literal(val):
    val = np.asarray(val)
    if val.dtype == np.bool_:
        return str(bool(val))
    if dtypes.kind(val.dtype) == "f":
        return repr(float(val))
    if dtypes.kind(val.dtype) == "c":
        return repr(complex(val))
    return str(int(val))


def _pp_binder(v, names):
    return f"{names(v)}:{v.aval.str_short()}"


def _pp_param_value(value, indent):
    if isinstance(value, ClosedJaxpr):
        value = value.jaxpr
    if isinstance(value, Jaxpr):
        return pp_jaxpr(value, indent=indent)  # nested jaxprs name their own variables
    if isinstance(value, (tuple, list)) and any(isinstance(x, (Jaxpr, ClosedJaxpr))
                                                for x in value):
        inner = (_pp_param_value(x, indent) for x in value)
        return "(" + ", ".join(inner) + ")"
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, type) and issubclass(value, np.generic):
        return np.dtype(value).name
    if callable(value) and hasattr(value, "__name__"):
        return value.__name__
    return str(value)


def pp_eqn(eqn, names, indent=0):
    outs = " ".join(_pp_binder(v, names) for v in eqn.outvars)
    ins = " ".join(pp_atom(v, names) for v in eqn.invars)
    params = ""
    if eqn.params:
        items = [(k, _pp_param_value(v, indent + 2)) for k, v in eqn.params.items()]
        one_line = " ".join(f"{k}={v}" for k, v in items)
        if "\n" in one_line or "{ lambda" in one_line or indent + len(one_line) > 60:
            pad = " " * (indent + 2)
            params = "[\n" + "\n".join(f"{pad}{k}={v}" for k, v in items) + "\n" + \
                " " * indent + "]"
        else:
            params = f"[{one_line}]"
    head = f"{outs} = " if outs else ""  # an effect-only equation has no binders
    return f"{head}{eqn.primitive.name}{params}" + (f" {ins}" if ins else "")


_annotations = {"source_info": False, "name_stack": False}  # what the printer adds per eqn


def _eqn_annotations(eqn):
    info = eqn.source_info
    notes = []
    if _annotations["source_info"]:
        notes.append(source_info.summarize(info))
    if _annotations["name_stack"] and info is not None and info.name_stack:
        notes.append(f"[{info.name_stack_str()}]")
    return notes


def _pp_annotated(eqns, texts, indent):
    """Each equation followed by its ``# source`` / ``# [name/stack]`` comments, aligned."""
    width = max((len(t.split("\n")[0]) for t in texts), default=0)
    pad = " " * (indent + 4)
    lines = []
    for eqn, text in zip(eqns, texts):
        first, *rest = text.split("\n")
        notes = _eqn_annotations(eqn)
        if notes:
            first = first.ljust(width) + " # " + notes[0]
            rest = [" " * (indent + 5 + width) + "# " + n for n in notes[1:]] + rest
        lines.append(pad + first)
        lines += rest
    return lines


def pp_jaxpr(jaxpr, names=None, indent=0, width=80):
    """JAX-style text: ``{ lambda c:f32[3]; a:f32[3]. let b:f32[3] = sin a in (b,) }``."""
    names = names or _Names()
    consts = " ".join(_pp_binder(v, names) for v in jaxpr.constvars)
    args = " ".join(_pp_binder(v, names) for v in jaxpr.invars)
    head = f"{{ lambda {consts}; {args}. let"
    eqns = [pp_eqn(e, names, indent + 4) for e in jaxpr.eqns]
    outs = ", ".join(pp_atom(v, names) for v in jaxpr.outvars)
    tail = f"in ({outs}{',' if len(jaxpr.outvars) == 1 else ''}) }}"
    annotated = any(_annotations.values()) and jaxpr.eqns
    one_line = " ".join([head, "; ".join(eqns), tail]) if eqns else f"{head} {tail}"
    if not annotated and "\n" not in one_line and indent + len(one_line) <= width:
        return one_line
    if annotated:
        body = "\n".join(_pp_annotated(jaxpr.eqns, eqns, indent))
    else:
        body = "\n".join(" " * (indent + 4) + e for e in eqns)
    return f"{head}\n{body}\n{' ' * (indent + 2)}{tail}"


def pretty_print(jaxpr, *, source_info=False, name_stack=False):
    """``jaxpr`` as text, each equation annotated with its user source line and/or its name
    stack when asked (as JAX's ``Jaxpr.pretty_print``)."""
    saved = dict(_annotations)
    _annotations.update(source_info=bool(source_info), name_stack=bool(name_stack))
    try:
        return pp_jaxpr(jaxpr)
    finally:
        _annotations.update(saved)


# --- helpers shared by the interpreters ------------------------------------------------------


def new_jaxpr_eqn(invars, outvars, primitive, params, info=None):
    return JaxprEqn(invars, outvars, primitive, params,
                    info if info is not None else source_info.current())


def unzip2(pairs):
    a, b = [], []
    for x, y in pairs:
        a.append(x)
        b.append(y)
    return a, b


def safe_map(f, *lists):
    n = len(lists[0])
    for xs in lists[1:]:
        if len(xs) != n:
            raise ValueError(f"length mismatch: {[len(x) for x in lists]}")
    return [f(*xs) for xs in zip(*lists)]



class _Key:
    """Stands for the jaxpr a memoized result is keyed on, where the result holds it: a
    cache entry whose value holds its own weak key would never be freed."""


def _replaced(result, old, new):
    """``result`` with ``old`` put as ``new``, where it is the result or an item of a tuple."""
    if result is old:
        return new
    if type(result) is tuple and any(r is old for r in result):
        return tuple(new if r is old else r for r in result)
    return result


def memoize_on_jaxpr(fn):
    """Cache ``fn(closed_jaxpr, *hashable_args)`` for as long as the jaxpr object lives, so
    derived jaxprs (JVP, transpose, batched, partial-eval splits) are traced once."""
    import weakref

    caches = weakref.WeakKeyDictionary()

    def cached(closed, *args):
        per_jaxpr = caches.get(closed)
        if per_jaxpr is None:
            per_jaxpr = caches[closed] = {}
        key = tuple(tuple(a) if isinstance(a, list) else a for a in args)
        hit = per_jaxpr.get(key)
        if hit is None:
            hit = per_jaxpr[key] = _replaced(fn(closed, *args), closed, _Key)
        return _replaced(hit, _Key, closed)

    cached.__name__ = fn.__name__
    cached.__doc__ = fn.__doc__
    return cached
