"""The shared writer of loop kernels (``loop_source``): a jaxpr's equations written in order
as statements of one kernel function. Each equation is offered to its tier's rewrite passes
(``loop_rewrites``) in order; the first that applies writes it, else the tier's rule does. The
tiers are subclasses of ``KernelWriter``: ``loop_python.PythonKernel`` calls each primitive's
impl (bit for bit the interpreter's results), ``loop_native.NativeKernel`` writes source for
numba from ``native_rules``, fused."""

import contextlib
import math

import numpy as np

from remat.core import Literal
from remat.exec.loop_constants import transposed_constants
from remat.exec.loop_rewrites import nested
from remat.exec.native_rules import (
    ADDRESSING,
    EXPRESSIONS,
    NATIVE_DTYPES,
    Unsupported,
    rules,
    shape_src,
    update_rules,
)
from remat.exec.passes import optimize_jaxpr

MAX_ELEMENTS = 1 << 16  # the largest value of a native body (larger work runs the executor)


def _float_text(v):
    """A float's source: NaN and the infinities by name, others by ``repr`` (exact)."""
    return "np.nan" if math.isnan(v) else ("np.inf" if v > 0 else "-np.inf") \
        if math.isinf(v) else repr(v)


class KernelWriter:
    """The source of one kernel function being written, shared by both tiers: its statements,
    the preamble before its loop (loop-invariant work, typed constants), the namespace its
    source needs, and the loops and conditionals of control flow. A tier says how an equation
    is written (``rule``), whether a rule's results are new arrays (``new_array``) and which
    rewrite passes its bodies get (``rewrites``: tried in order on each equation)."""

    rewrites = ()
    update_rules = update_rules  # how an update is written into its operand's buffer
    stores_lazily = False  # a stored output stays as its rule left it until it is stored

    def __init__(self, invariant=()):
        self.objects = {}  # the source's namespace: impls, ufuncs, params and indices by name
        self.lines = []
        self.indent = 1
        self.count = 0
        self.preamble = []  # statements before the loop: work on loop-invariant values only
        self.invariant = set(invariant)  # names of loop-invariant values
        self.constants = {}  # source of a typed constant -> its name
        self.values = None  # a loop kernel's constants read from its operand ``_q``, in order
        # (None: written into the source; a list: loops differing only in a constant, such as
        # ``step < xs.size`` of a buffer of another size, share one source and one compile)
        self.max_elements = MAX_ELEMENTS
        self.donated = frozenset()  # positions of the kernel's own loop body's carries that
        # the caller handed over: they are written in place without a copy first
        self.may_exit = False  # a cond branch it cannot write exits the kernel (``branch``)
        self.exits = False  # whether some branch does

    def fresh(self):
        self.count += 1
        return f"t{self.count}"

    def line(self, text):
        self.lines.append("    " * self.indent + text)

    def bind(self, expr):
        name = self.fresh()
        self.line(f"{name} = {expr}")
        return name

    @staticmethod
    def dtype(dtype):
        dtype = np.dtype(dtype)
        return "np.bool_" if dtype == np.bool_ else f"np.{dtype.name}"

    def const(self, value, dtype):
        """A typed scalar constant: a name bound once before the loop."""
        dtype = np.dtype(dtype)
        if dtype == np.bool_:
            return "True" if value else "False"
        if dtype.kind == "f":
            text = _float_text(float(value))
        elif dtype.kind == "c":
            v = complex(value)
            text = f"complex({_float_text(v.real)}, {_float_text(v.imag)})"
        else:
            text = str(int(value))
        src = f"{self.dtype(dtype)}({text})"
        name = self.constants.get(src)
        if name is None:
            name = self.constants[src] = f"q{len(self.constants)}"
            if self.values is not None and getattr(np, dtype.name, None) is dtype.type and \
                    issubclass(dtype.type, np.number):
                self.values.append(dtype.type(complex(value) if dtype.kind == "c" else
                                              text.replace("np.", "")))
                src = f"_q[{len(self.values) - 1}]"
            self.preamble.append(f"    {name} = {src}")
            self.invariant.add(name)
        return name

    def name_object(self, prefix, obj):
        """A name for ``obj`` in the source's namespace."""
        name = f"{prefix}{len(self.objects)}"
        self.objects[name] = obj
        return name

    # --- what a tier decides ---

    def rule(self, eqn):
        """How ``eqn`` is written: ``fn(kernel, eqn, ins) -> [source of each output]`` (None
        where it cannot be), or None where no rule writes it."""
        name = eqn.primitive.name
        return rules.get(name) or self.control_flow.get(name)

    def computes_complex(self, name, v):
        """Whether the tier writes primitive ``name`` with the complex operand or result
        ``v``. The Python tier: arrays and literals. A rank-0 value is a NumPy scalar there,
        and a fuzzed loop of rank-0 complex values then differed from the plans' 0-d arrays
        in its last bit (cause not found), so such a loop runs step by step, as the plans
        run it."""
        return type(v) is Literal or bool(v.aval.shape)

    def new_array(self, eqn, rule):
        """Whether ``rule``'s results are new arrays, never a view nor another var's array
        (so one may be nested in its consumer and updated in place)."""
        return eqn.primitive.name in EXPRESSIONS

    def reusing(self, jaxpr, escaping):
        """A context in which ``jaxpr``'s values that never outlive an iteration (none of them
        is an ``escaping`` output) may reuse buffers allocated before the loop."""
        return contextlib.nullcontext()

    def write_into(self, eqn, ins, target):
        """Write an update equation (``registry.update_impls``) on the operand sources ``ins``
        into the array named ``target``, its first operand's buffer."""
        write = self.update_rules.get(eqn.primitive.name)
        if write is None:
            raise Unsupported(f"{eqn.primitive.name} in place")
        write(self, eqn, ins, target)

    def store(self, target, index, value, shape=()):
        """Write a value's source (of ``shape``) into ``target[index]``."""
        self.line(f"{target}[{index}] = {value}")

    # --- bodies ---

    def body(self, jaxpr, ins, escaping=None, stored=(), carried=None):
        """Write ``jaxpr``'s equations on the operand sources ``ins``; its outputs' sources.

        ``escaping``: for the kernel's own loop body, the positions of the outputs that
        outlive an iteration (carries). ``stored``: positions of outputs the caller stores
        itself (``store``), returned as they are (possibly unwritten on a tier that stores
        lazily). ``carried``: for the kernel's own loop body, each carry's input position ->
        its output position."""
        with self.reusing(jaxpr, None if escaping is None else
                          [jaxpr.outvars[i] for i in escaping]):
            return Body(self, jaxpr, ins, stored, carried or {}).write()

    def hoist(self, rule, eqn, ins, env):
        """Write an equation of loop-invariant operands once, before the loop."""
        lines, indent = self.lines, self.indent
        self.lines, self.indent = self.preamble, 1
        try:
            srcs = rule(self, eqn, ins)
            if srcs is None:
                raise Unsupported(f"{eqn.primitive.name} with these operands")
            if eqn.primitive.name in self.control_flow:  # (already bound)
                env.update(zip(eqn.outvars, srcs))
                self.invariant.update(srcs)
                return
            for v, src in zip(eqn.outvars, srcs):
                env[v] = self.bind(src if v.aval.shape else
                                   f"{self.dtype(v.aval.dtype)}({src})")
                self.invariant.add(env[v])
        finally:
            self.lines, self.indent = lines, indent

    # --- control flow inside a body ---

    def nested(self, jaxpr, ins):
        """A nested body (a loop's, a branch's, a call's) written inline, optimized as the
        plan that runs it step by step is (the top level comes optimized): both tiers then
        run the same equations, so their results agree bit for bit."""
        return self.body(optimize_jaxpr(jaxpr), ins)

    def loop(self, jaxpr, consts, carry, xs, length, reverse):
        """A scan written inline: ``(carry names, stacked ys names)`` after it."""
        num_carry = len(carry)
        carry_names = [self.bind(c) for c in carry]
        ys = [self.bind(f"np.empty({shape_src((length,) + v.aval.shape)}, "
                        f"{self.dtype(v.aval.dtype)})") for v in jaxpr.outvars[num_carry:]]
        it, i = self.fresh(), self.fresh()
        self.line(f"for {it} in range({length}):")
        self.indent += 1
        self.line(f"{i} = {length - 1} - {it}" if reverse else f"{i} = {it}")
        outs = self.nested(jaxpr, list(consts) + carry_names + [self.bind(f"{x}[{i}]") for x in xs])
        for y, src, v in zip(ys, outs[num_carry:], jaxpr.outvars[num_carry:]):
            self.store(y, i, src, v.aval.shape)
        self.carry(carry_names, outs[:num_carry], [v.aval for v in jaxpr.outvars[:num_carry]])
        self.indent -= 1
        return carry_names, ys

    def _scan(self, eqn, ins):
        p = eqn.params
        if p["jaxpr"].consts:
            raise Unsupported("a scan body with constants")
        k, c = p["num_consts"], p["num_carry"]
        # the body reads transposed loop constants as contiguous copies, as a scan run as a
        # step does (``loops.donating_scan``): the same layouts, so the same sums, bit for bit
        body, sources = transposed_constants(p["jaxpr"], k)
        copies = [self.bind(f"np.ascontiguousarray(np.transpose({ins[i]}, {shape_src(perm)}))")
                  for i, perm in sources]
        carry, ys = self.loop(body.jaxpr, copies + ins[:k], ins[k:k + c], ins[k + c:],
                              p["length"], p["reverse"])
        return carry + ys

    def _while(self, eqn, ins):
        p = eqn.params
        cond, body = p["cond_jaxpr"], p["body_jaxpr"]
        if cond.consts or body.consts:
            raise Unsupported("a while loop with constants")
        nc, nb = p["cond_nconsts"], p["body_nconsts"]
        carry = [self.bind(c) for c in ins[nc + nb:]]
        self.line("while True:")
        self.indent += 1
        (pred,) = self.nested(cond.jaxpr, ins[:nc] + carry)
        self.line(f"if not {pred}:")
        self.line("    break")
        self.carry(carry, self.nested(body.jaxpr, ins[nc:nc + nb] + carry),
                   [v.aval for v in body.jaxpr.outvars])
        self.indent -= 1
        return carry

    def _cond(self, eqn, ins):
        branches = eqn.params["branches"]
        if any(b.consts for b in branches):
            raise Unsupported("a cond branch with constants")
        outs = [self.fresh() for _ in eqn.outvars]
        index = ins[0]
        written = 0
        for k, branch in enumerate(branches):
            last = k == len(branches) - 1
            self.line("else:" if last else f"{'if' if k == 0 else 'elif'} {index} == {k}:")
            self.indent += 1
            srcs = self.branch(branch.jaxpr, ins[1:])
            if srcs is None:
                self.line("raise _k.BranchNotNative")
            else:
                written += 1
                for o, src, v in zip(outs, srcs, eqn.outvars):
                    self.line(f"{o} = {src}" if v.aval.shape else
                              f"{o} = {self.dtype(v.aval.dtype)}({src})")
                if not outs:
                    self.line("pass")
            self.indent -= 1
        if not written:
            raise Unsupported("a cond of no branch the native tier can write")
        return outs

    def branch(self, jaxpr, ins):
        """A cond branch written inline: its outputs' sources. Where the kernel may exit
        (``may_exit``: a native loop kernel, whose caller then reruns the call on the Python
        tier) and the branch cannot be written, None: nothing of it is kept, and the caller
        writes the exit instead. So a loop whose rarely taken branch calls back into Python
        (equinox's runtime checks raise from one) still runs natively."""
        if not self.may_exit:
            return self.nested(jaxpr, ins)
        saved = self.written_so_far()
        try:
            return self.nested(jaxpr, ins)
        except Unsupported:
            self.take_back(saved)
            self.exits = True
            return None

    def written_so_far(self):
        """What ``take_back`` restores: everything a body's writing adds to."""
        return (len(self.lines), len(self.preamble), self.indent, dict(self.constants),
                None if self.values is None else len(self.values), set(self.invariant),
                dict(self.objects))

    def take_back(self, saved):
        """Forget what was written since ``written_so_far`` gave ``saved``."""
        lines, preamble, self.indent, self.constants, values, self.invariant, \
            self.objects = saved
        del self.lines[lines:], self.preamble[preamble:]
        if values is not None:
            del self.values[values:]

    def _call(self, eqn, ins):
        closed = eqn.params["call_jaxpr"]
        if closed.consts:
            raise Unsupported(f"a {eqn.primitive.name} with constants")
        return self.nested(closed.jaxpr, ins)

    control_flow = {"scan": _scan, "while": _while, "cond": _cond, "custom_jvp_call": _call,
                    "custom_vjp_call": _call, "custom_remat_call": _call}

    def carry(self, names, outs, avals):
        """Rebind the carries to the iteration's results (all at once: one may be another's)."""
        if names:
            srcs = [o if a.shape else f"{self.dtype(a.dtype)}({o})" for o, a in zip(outs, avals)]
            self.line(f"{', '.join(names)}, = {', '.join(srcs)},")

    def source(self, params):
        """The kernel function's source (``_k``: the helpers, ``np``: NumPy)."""
        params = [*params, "_q"] if self.values else params
        return "\n".join([f"def kernel({', '.join(params)}):"] + self.preamble + self.lines) + "\n"


class Body:
    """One jaxpr's equations being written into a kernel, and what the rewrite passes know of
    them: each var's source (``env``: a name, an expression, or a value a tier or a pass has
    not written yet), how many uses it has (a body output counts twice, so that it is never
    nested nor updated in place; once where the tier stores it lazily) and which equation
    uses it last (``consumer``), the vars holding a new array no other var sees (``fresh``),
    and the equations a pass has written already with an earlier one (``done``)."""

    def __init__(self, kernel, jaxpr, ins, stored, carried):
        self.kernel, self.jaxpr, self.stored, self.carried = kernel, jaxpr, stored, carried
        self.env = dict(zip(jaxpr.invars, ins))
        self.uses, self.consumer = {}, {}
        for eqn in jaxpr.eqns:
            for v in eqn.invars:
                if type(v) is not Literal:
                    self.uses[v] = self.uses.get(v, 0) + 1
                    self.consumer[v] = eqn
        for k, v in enumerate(jaxpr.outvars):
            if type(v) is not Literal:
                self.uses[v] = self.uses.get(v, 0) + (
                    1 if kernel.stores_lazily and k in stored else 2)
        self.fresh = set()
        self.done = set()
        self.passes = [rewrite(self) for rewrite in kernel.rewrites]

    def write(self):
        """Write the equations; the outputs' sources (a stored one as it is)."""
        for eqn in self.jaxpr.eqns:
            if eqn in self.done:
                continue
            name = eqn.primitive.name
            rule = self.kernel.rule(eqn)
            if rule is None:
                raise Unsupported(name)
            addressed = (eqn.invars[0], *eqn.outvars) if name in ADDRESSING else ()
            for v in (*eqn.invars, *eqn.outvars):
                if v.aval.dtype not in NATIVE_DTYPES or math.prod(v.aval.shape) > \
                        self.kernel.max_elements and not any(v is a for a in addressed) or \
                        v.aval.dtype.kind == "c" and not self.kernel.computes_complex(name, v):
                    raise Unsupported(f"{name} on {v.aval.str_short()}")
            if not any(rewrite.write(eqn, rule) for rewrite in self.passes):
                self.write_rule(eqn, rule)
        for rewrite in self.passes:
            rewrite.finish()
        return [self.env[v] if k in self.stored and type(v) is not Literal else self.read(v)
                for k, v in enumerate(self.jaxpr.outvars)]

    def read(self, v):
        """``v``'s source as an equation takes it: a literal as a typed constant, a value a
        pass or the tier holds back written first."""
        if type(v) is Literal:
            if v.aval.shape:
                raise Unsupported("an array literal")
            return self.kernel.const(np.asarray(v.val)[()], v.aval.dtype)
        for rewrite in self.passes:
            rewrite.realize(v)
        return self.env[v]

    def write_rule(self, eqn, rule):
        """Write ``eqn`` by its rule: its results bound to names, or nested in their one
        consumer (``loop_rewrites.nested``)."""
        kernel, name = self.kernel, eqn.primitive.name
        srcs = rule(kernel, eqn, [self.read(v) for v in eqn.invars])
        if name in kernel.control_flow:  # (results already bound to names)
            self.env.update(zip(eqn.outvars, srcs))
            return
        if srcs is None:
            raise Unsupported(f"{name} with these operands")
        new_array = kernel.new_array(eqn, rule)
        for v, src in zip(eqn.outvars, srcs):
            if new_array and v.aval.shape:
                self.fresh.add(v)
                inside = nested(self, v, src)
                if inside is not None:
                    self.env[v] = inside
                    continue
            self.env[v] = kernel.bind(src if v.aval.shape else
                                      f"{kernel.dtype(v.aval.dtype)}({src})")
