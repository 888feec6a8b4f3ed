"""Loop kernels' source: a ``scan`` or ``while_loop`` body written once as one function with
the loop inside it, for either tier of ``remat.exec.native``.

The Python tier's source calls each primitive's impl (or its ufunc) on the values the plans
would give it, so its results equal the interpreter's bit for bit; loop-invariant work and
constants are hoisted before the loop, single-use elementwise results nest in their consumer's
call, and a zero ``pad`` feeding an ``add`` becomes a slice-add. The native tier's source
writes every equation from ``native_rules``, fusing: elementwise equations and index remaps
(slices, pads, concatenations, flips, transposes, broadcasts) become lazy values, computed where
an array is needed in one explicit index loop with scalar intermediates (split where a
concatenation or pad changes part), into buffers allocated once before the loop unless they
outlive an iteration; sums accumulate in float64 loops, matrix products write into their
buffers (``np.dot(a, b, out)``), a product whose one use transposes it is computed transposed.
"""

import itertools
import math
import re

import numpy as np

from remat import source_info
from remat.core import Literal
from remat.exec.native_rules import (
    ELEMENTWISE,
    EXACT_RULES,
    EXPRESSIONS,
    NATIVE_DTYPES,
    Index,
    concatenate_element,
    element_source,
    index_remap,
    matrix_product,
    pad_element,
    rules,
    shape_src,
)
from remat.exec.passes import inline_calls
from remat.exec.steps import IDENTITIES
from remat.interpreters import partial_eval as pe
from remat.runtime.parallel import MIN_SPLIT_ELEMENTS
from remat.runtime.registry import elementwise_impls, source_forms

MAX_ELEMENTS = 1 << 16  # the largest value of a native body (larger work runs the executor)
# the largest value of a plan's native cluster: one pass on one thread beats NumPy's passes up
# to the size the executor splits across its workers
CLUSTER_MAX_ELEMENTS = MIN_SPLIT_ELEMENTS - 1


class Unsupported(Exception):
    """The body has an equation the native tier cannot write."""


# --- writing a kernel ------------------------------------------------------------------------


class _Kernel:
    """The source of one kernel function being written."""

    def __init__(self, invariant=(), native=True):
        self.native = native  # numba source (rules only), or Python calling the impls
        self.objects = {}  # the Python tier's namespace: impls, ufuncs and params by name
        self.lines = []
        self.indent = 1
        self.count = 0
        self.preamble = []  # statements before the loop: work on loop-invariant values only
        self.invariant = set(invariant)  # names of loop-invariant values
        self.constants = {}  # source of a typed constant -> its name
        self.reusable = frozenset()  # vars whose buffer is allocated once, before the loop
        self.memo = {}  # (lazy value, index) -> the name of its element in the current loop
        self.splits = None  # loop variable -> where to split its loop (while one is tried)
        self.one_pass = False  # lazy values stay lazy, however many use them (see
        # elementwise_source: its results are computed together, in one loop nest)
        self.max_elements = MAX_ELEMENTS

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
            v = float(value)
            text = "np.nan" if math.isnan(v) else ("np.inf" if v > 0 else "-np.inf") \
                if math.isinf(v) else repr(v)
        else:
            text = str(int(value))
        src = f"{self.dtype(dtype)}({text})"
        name = self.constants.get(src)
        if name is None:
            name = self.constants[src] = f"q{len(self.constants)}"
            self.preamble.append(f"    {name} = {src}")
            self.invariant.add(name)
        return name

    def body(self, jaxpr, ins, escaping=None, stored=(), carried=None):
        """Write ``jaxpr``'s equations on the operand sources ``ins``; its outputs' sources.

        ``escaping``: for the kernel's own loop body, the positions of the outputs that
        outlive an iteration (carries); every other array the native tier computes there gets
        a buffer allocated once, before the loop. ``stored``: positions of outputs the caller
        stores itself (``store``), returned as they are (possibly lazy). ``carried``: for the
        kernel's own loop body, each carry's input position -> its output position.

        Two rewrites keep tiny-array work from allocating at every equation on the Python
        tier: a single-use elementwise result stays an expression inside its consumer's, and
        a zero ``pad`` whose only use is an ``add`` becomes a slice-add into the other operand
        (the transpose of ``slice``, e.g. of ``roll``, no longer builds padded copies). The
        native tier fuses instead: elementwise and index-remapping equations become lazy
        values, computed in one explicit index loop per value that needs an array."""
        jaxpr = inline_calls(jaxpr)  # (nested bodies: the top level comes optimized)
        saved = self.reusable
        self.reusable = frozenset() if escaping is None or not self.native else \
            _reusable(jaxpr, [jaxpr.outvars[i] for i in escaping])
        try:
            return self._write(jaxpr, ins, stored, carried or {})
        finally:
            self.reusable = saved

    def _write(self, jaxpr, ins, stored, carried):
        env = dict(zip(jaxpr.invars, ins))
        uses, consumer, added = {}, {}, {}  # added: how many of a var's uses are slice-adds
        for eqn in jaxpr.eqns:
            for v in eqn.invars:
                if type(v) is not Literal:
                    uses[v] = uses.get(v, 0) + 1
                    consumer[v] = eqn
                    added[v] = added.get(v, 0) + _slice_add(eqn)
        for k, v in enumerate(jaxpr.outvars):
            if type(v) is not Literal:  # never inlined nor updated in place (a stored
                # output of the native tier may stay lazy: it is computed into its store)
                uses[v] = uses.get(v, 0) + (1 if self.native and k in stored else 2)
        accumulating = {} if self.native else _accumulating(jaxpr, carried, uses, consumer)
        fresh = set()  # vars holding a new array no other var sees
        done = set()  # equations already written with an earlier one
        pads = {}  # var -> (source, index) of a deferred zero pad
        pad_uses = {}  # deferred pad -> how many of its adds are still to come
        gathers = {}  # concatenate eqn -> (array var, index, axis): one gather of its slices
        pieces = {}  # zero pad -> (its slice eqn, axis), when it is a piece of a slice-add
        pending = {}  # accumulator name -> the slice-adds into it not written yet
        normalized = set()  # accumulators holding no -0.0 (so adding 0.0 changes nothing)
        if not self.native:
            gathers = _concatenated_slices(jaxpr)
            pieces = _padded_slices(jaxpr, uses, consumer)
            done.update(e for e in jaxpr.eqns if e.primitive.name == "slice"
                        and uses.get(e.outvars[0]) == 1 and consumer[e.outvars[0]] in gathers)
            done.update(sliced for sliced, _ in pieces.values())

        def flush(acc):
            for line in _merged_slice_adds(acc, pending.pop(acc), self.name_object):
                self.line(line)

        def read(v):
            if type(v) is Literal:
                if v.aval.shape:
                    raise Unsupported("an array literal")
                return self.const(np.asarray(v.val)[()], v.aval.dtype)
            if v in pads:  # a pad some other use needs after all: materialize it
                src, index, _ = pads.pop(v)
                del pad_uses[v]
                env[v] = self.bind(f"np.zeros({v.aval.shape}, {self.dtype(v.aval.dtype)})")
                self.line(f"{env[v]}{index} = {src}")
            if isinstance(env[v], _Lazy):  # an array some equation needs: compute it
                env[v] = self.materialize(v, env[v])
            if env[v] in pending:
                flush(env[v])
            return env[v]

        for eqn in jaxpr.eqns:
            if eqn in done:  # (a transpose written with the product it transposes)
                continue
            name = eqn.primitive.name
            rule = rules.get(name) or self.control_flow.get(name)
            if not self.native and name not in self.control_flow and name not in EXACT_RULES:
                rule = _Kernel.call_impl
            if rule is None:
                raise Unsupported(name)
            for v in (*eqn.invars, *eqn.outvars):
                if v.aval.dtype not in NATIVE_DTYPES or \
                        math.prod(v.aval.shape) > self.max_elements:
                    raise Unsupported(f"{name} on {v.aval.str_short()}")
            if not self.native and name in IDENTITIES:  # (its outputs are its operands: a
                # loop-invariant one stays invariant, and work on it is hoisted)
                env.update((o, read(v)) for o, v in zip(eqn.outvars, eqn.invars))
                continue
            out = eqn.outvars[0] if eqn.outvars else None
            if self.native and out is not None and name not in self.control_flow and \
                    not pe.has_effects(eqn) and self.fused(eqn, env, read, uses, consumer, done):
                continue
            if not self.native and name == "pad" and uses.get(out) and \
                    added.get(out) == uses[out] and _zero_pad(eqn):  # (every use a slice-add:
                # e.g. a gate's slice of two products' cotangents, each built from its pieces)
                if eqn in pieces:  # (its slice, not written: read here as a view)
                    sliced, axis = pieces[eqn]
                    src = read(sliced.invars[0])
                    pads[out] = (rules["slice"](self, sliced, [src])[0], _pad_index(eqn),
                                 _piece(src, sliced, axis, eqn))
                else:
                    src = read(eqn.invars[0])
                    if uses[out] > 1 and not src.isidentifier():  # (computed once)
                        src = self.bind(src)
                    pads[out] = (src, _pad_index(eqn), None)
                pad_uses[out] = uses[out]
                continue
            if any(v in pads for v in eqn.invars) and _slice_add(eqn):
                base = next((v for v in eqn.invars if v not in pads), None)
                if base is None:
                    acc = self.bind(f"np.zeros({out.aval.shape}, {self.dtype(out.aval.dtype)})")
                elif base in fresh and uses[base] == 1:
                    acc = env[base] if env[base].isidentifier() else self.bind(env[base])
                    if base not in normalized and out.aval.dtype.kind in "fc":
                        # (the pads' zeros added: -0.0 becomes 0.0 where nothing else is)
                        self.line(f"{acc} += {self.const(0, out.aval.dtype)}")
                else:
                    acc = self.bind(f"{read(base)} + {self.const(0, out.aval.dtype)}")
                for v in eqn.invars:
                    if v in pads:  # (slice-adds of one array in a row are written as one)
                        pending.setdefault(acc, []).append(pads[v])
                        pad_uses[v] -= 1
                        if not pad_uses[v]:
                            del pads[v], pad_uses[v]
                env[out] = acc
                fresh.add(out)
                normalized.add(out)
                continue
            if eqn in gathers:
                self.gather(eqn, gathers[eqn], read, env, fresh)
                continue
            if name not in self.control_flow and not pe.has_effects(eqn) \
                    and all(type(v) is Literal or env[v] in self.invariant for v in eqn.invars):
                self.hoist(rule, eqn, [read(v) for v in eqn.invars], env)
                continue
            if eqn in accumulating and rule is _Kernel.call_impl:
                # (a carry's one use, giving the next carry: written into the carry's buffer,
                # the kernel's own copy of the first one)
                carry = env[jaxpr.invars[accumulating[eqn]]]
                self.preamble.append(f"    {carry} = {carry}.copy()")
                ufunc = self.name_object("u", self.ufunc_of(eqn))
                env[out] = self.bind(f"{ufunc}({', '.join(read(v) for v in eqn.invars)}, "
                                     f"out={carry})")
                fresh.add(out)
                continue
            srcs = rule(self, eqn, [read(v) for v in eqn.invars])
            if name in self.control_flow:  # (results already bound to names)
                env.update(zip(eqn.outvars, srcs))
                continue
            if srcs is None:
                raise Unsupported(f"{name} with these operands")
            new_array = name in EXPRESSIONS if rule is not _Kernel.call_impl else \
                self.ufunc_of(eqn) is not None
            for v, src in zip(eqn.outvars, srcs):
                if new_array and v.aval.shape:
                    fresh.add(v)
                    if uses.get(v) == 1:
                        env[v] = f"({src})" if not src.startswith("(") else src
                        continue
                env[v] = self.bind(src if v.aval.shape else f"{self.dtype(v.aval.dtype)}({src})")
        for acc in list(pending):
            flush(acc)
        return [env[v] if k in stored and type(v) is not Literal and v not in pads else read(v)
                for k, v in enumerate(jaxpr.outvars)]

    def gather(self, eqn, found, read, env, fresh):
        """A concatenation of slices of one array (a ``roll``, a stencil's shifts) as one
        indexing by a constant index array: one NumPy call instead of one per slice and the
        concatenation (before the loop when the array is invariant)."""
        src, index, axis, taken = found
        x = read(src)
        if len(src.aval.shape) == 1:  # (one layout only: indexed in place)
            expr = f"{x}[{self.name_object('g', index)}]"
        else:
            slices = tuple((slice(None),) * axis + (slice(*t),) for t in taken)
            expr = f"{self.name_object('f', _gathered)}({x}, {self.name_object('g', index)}, " \
                   f"{axis}, {self.name_object('g', slices)})"
        if x in self.invariant:
            self.hoist(lambda ctx, e, ins: [expr], eqn, [], env)
            return
        env[eqn.outvars[0]] = self.bind(expr)
        fresh.add(eqn.outvars[0])

    # --- the native tier's fused loops ---

    def fused(self, eqn, env, read, uses, consumer, done):
        """Write ``eqn`` the native tier's fused way, if it has one: a lazy value (computed
        once, now, if several equations use it and it is costly), a float sum as a loop, a
        matrix product into its buffer; loop-invariant ones once before the loop. Whether it
        was written."""
        name, out = eqn.primitive.name, eqn.outvars[0]
        invariant = all(type(v) is Literal or env[v] in self.invariant for v in eqn.invars)
        if out.aval.shape and invariant:
            return self.hoist_fused(eqn, env, read)
        if invariant:
            return False
        if name == "dot_general":
            operands = matrix_product(eqn, [read(v) for v in eqn.invars])
            if operands is None:
                return False
            self.matmul(eqn, operands, uses, consumer, env, done)
            return True
        value = self.sum(eqn, env, read) if name == "reduce_sum" else \
            self.lazy(eqn, env, read) if out.aval.shape else None
        if value is None:
            return False
        env[out] = self.materialize(out, value) if isinstance(value, _Lazy) and \
            uses.get(out, 0) > 1 and not value.cheap and not self.one_pass else value
        return True

    def let(self, src):
        """A scalar source used more than once inside a fused loop, named once."""
        return src if src.isidentifier() or _NUMBER.fullmatch(src) else self.bind(src)

    def elements(self, v, value):
        """``idx -> source of v's element at idx`` (``value``: v's source or lazy value)."""
        if isinstance(value, _Lazy):
            def at(idx):
                key = (id(value), tuple(j.src for j in idx))
                src = self.memo.get(key)
                if src is None:
                    src = self.memo[key] = self.let(value.at(idx))
                return src
            return at
        if type(v) is Literal or not v.aval.shape:
            return lambda idx: value
        name = value if value.isidentifier() else self.bind(value)

        def read(idx):
            src = f"{name}[{', '.join(j.src for j in idx)}]"
            if src not in self.memo:
                self.memo[src] = self.let(src)
            return self.memo[src]
        return read

    def lazy(self, eqn, env, read):
        """``eqn``'s result as a lazy value (nothing written yet), or None where the native
        tier writes it with its array rule."""
        if len(eqn.outvars) != 1:
            return None
        name, out = eqn.primitive.name, eqn.outvars[0].aval

        def operand(v, replicated=False):
            """The elements of ``v``; a costly lazy operand some elements read more than once
            (``replicated``) is computed first."""
            value = read(v) if type(v) is Literal else env[v]
            if replicated and isinstance(value, _Lazy) and not value.cheap:
                value = read(v)
            return self.elements(v, value)

        def cheap(*vs):
            return all(type(v) is Literal or not isinstance(env[v], _Lazy) or env[v].cheap
                       for v in vs)

        if name in ELEMENTWISE:
            if any(type(v) is not Literal and v.aval.shape and v.aval.shape != out.shape
                   for v in eqn.invars):
                return None  # (operands broadcast by NumPy's rules: the array form)
            if not self.has_element_form(eqn):
                return None
            parts = [operand(v) for v in eqn.invars]
            identity = name in ("copy", "copy_p", "name", "stop_gradient")
            return _Lazy(out, lambda idx: element_source(self, eqn, [at(idx) for at in parts]),
                         identity and cheap(*eqn.invars))
        remap = index_remap(eqn)
        if remap is not None:
            x = eqn.invars[0]
            replicated = name == "broadcast_in_dim" and math.prod(out.shape) > \
                math.prod(x.aval.shape)
            at = operand(x, replicated)
            starts = [self.bind(f"min(max(int({read(s)}), 0), {n - k})") for s, n, k in zip(
                eqn.invars[1:], x.aval.shape, eqn.params.get("slice_sizes", ()))]
            return _Lazy(out, lambda idx: at(remap(idx, starts)), cheap(x))
        # (a select of reads of arrays or cheap values: cheap)
        if name == "concatenate":
            return _Lazy(out, concatenate_element(
                self, eqn, [operand(v, True) for v in eqn.invars]), True)
        if name == "pad" and not any(i for _, _, i in eqn.params["padding_config"]):
            return _Lazy(out, pad_element(self, eqn, operand(eqn.invars[0], True),
                                          read(eqn.invars[1])), True)
        return None

    def has_element_form(self, eqn):
        """Whether ``element_source`` writes ``eqn`` (tried on placeholder operands)."""
        lines, count = self.lines, self.count
        self.lines = []
        try:
            return element_source(self, eqn, [f"x{k}" for k in range(len(eqn.invars))]) \
                is not None
        finally:
            self.lines, self.count = lines, count

    def materialize(self, v, lazy, target=None, lead=""):
        """Compute a lazy value in loop nests: into ``target[lead, ...]``, else into a new
        buffer (allocated before the kernel's loop where ``v`` is reusable); its name."""
        if target is None:
            target = self.buffer(v, lazy.aval)
        self.materialize_together([(lazy, target)], lead)
        return target

    def materialize_together(self, pairs, lead=""):
        """Compute lazy values of one shape into their targets (``pairs`` of (lazy, target
        name)) in one loop nest, each element's shared work done once. The loops are split
        where concatenations and pads change part (found by writing the elements once on the
        whole range), so that each piece reads its part directly."""
        aval = pairs[0][0].aval
        if not math.prod(aval.shape):
            return
        names = [self.fresh() for _ in aval.shape]
        lines, memo, self.splits = self.lines, self.memo, {}
        self.lines, self.memo = [], {}
        try:  # (a trial: it only finds where to split)
            for lazy, _ in pairs:
                lazy.at([Index.loop(j, 0, n - 1) for j, n in zip(names, aval.shape)])
        finally:
            self.lines, self.memo, splits, self.splits = lines, memo, self.splits, None
        pieces = [_pieces(n, splits.get(j, ())) for j, n in zip(names, aval.shape)]
        if math.prod(map(len, pieces)) > _MAX_PIECES:
            pieces = [[(0, n)] for n in aval.shape]
        for ranges in itertools.product(*pieces):
            for j, (lo, hi) in zip(names, ranges):
                self.line(f"for {j} in range({lo}, {hi}):" if lo else f"for {j} in range({hi}):")
                self.indent += 1
            self.memo = {}
            try:
                idx = [Index.loop(j, lo, hi - 1) for j, (lo, hi) in zip(names, ranges)]
                # (every element computed before any is stored: a target may be the buffer
                # of an operand read at the same index)
                values = [lazy.at(idx) for lazy, _ in pairs]
                if len(values) > 1:
                    values = [self.let(v) for v in values]
                for value, (_, target) in zip(values, pairs):
                    self.line(f"{target}[{lead}{', '.join(names)}] = {value}")
            finally:
                self.memo = memo
                self.indent -= len(names)

    def split(self, index, bound):
        """Note that the loop of ``index``'s variable should split where it reaches ``bound``."""
        where = index.crossing(bound)
        if self.splits is not None and where is not None:
            self.splits.setdefault(where[0], set()).add(where[1])

    def matmul(self, eqn, operands, uses, consumer, env, done):
        """A matrix product into its own buffer (allocated before the loop where it can be);
        when its one use transposes it, the transposed product is computed instead."""
        a, b = operands
        out = eqn.outvars[0]
        then = consumer.get(out)
        if uses.get(out) == 1 and then is not None and then.primitive.name == "transpose" and \
                tuple(then.params["permutation"]) == (1, 0):
            flip = lambda x: x[:-2] if x.endswith(".T") else f"{x}.T"  # noqa: E731
            a, b, out = flip(b), flip(a), then.outvars[0]
            done.add(then)
        buf = self.buffer(out, out.aval)
        self.line(f"np.dot({a}, {b}, {buf})")
        env[out] = buf

    def buffer(self, v, aval, reuse=None):
        """A new array for ``v``: allocated once before the loop where ``v`` is reusable
        (``reuse``: a scratch array no value keeps, reusable anywhere)."""
        name = self.fresh()
        alloc = f"{name} = np.empty({shape_src(aval.shape)}, {self.dtype(aval.dtype)})"
        if reuse or (reuse is None and v in self.reusable):
            self.preamble.append("    " + alloc)
        else:
            self.line(alloc)
        return name

    def sum_in_order(self, x, idx, kept, at, target):
        """A sum over leading axes: its operand read in memory order, each kept element's
        float64 sum in a row of accumulators (each sum's terms in the same order as a sum
        of that element alone)."""
        shape = x.aval.shape
        acc = self.buffer(None, _Shape(tuple(shape[d] for d in kept), np.float64), True)
        self.line(f"{acc}[...] = 0.0")
        for j, n in zip(idx, shape):
            self.line(f"for {j} in range({n}):")
            self.indent += 1
        memo, self.memo = self.memo, {}
        try:
            element = at([Index.loop(j, 0, n - 1) for j, n in zip(idx, shape)])
            self.line(f"{acc}[{', '.join(idx[d] for d in kept)}] += np.float64({element})")
        finally:
            self.memo = memo
            self.indent -= len(shape)
        self.line(f"{target}[...] = {acc}")
        return target

    def store(self, target, index, value):
        """Write a value (its source, or lazy) into ``target[index]``."""
        if isinstance(value, _Lazy):
            self.materialize(None, value, target, f"{index}, ")
        else:
            self.line(f"{target}[{index}] = {value}")

    def sum(self, eqn, env, read):
        """A float ``reduce_sum`` as explicit loops accumulating in float64 (its operand's
        elements read where they are, or computed in the loop if lazy); None otherwise."""
        (x,), out = eqn.invars, eqn.outvars[0].aval
        if not np.issubdtype(x.aval.dtype, np.floating) or not x.aval.shape:
            return None
        axes = set(eqn.params["axes"])
        at = self.elements(x, env[x])
        idx = [self.fresh() for _ in x.aval.shape]
        kept = [d for d in range(len(idx)) if d not in axes]
        target = None
        if out.shape:
            target = self.buffer(eqn.outvars[0], out)
        if not math.prod(x.aval.shape):  # (an empty sum)
            if target is None:
                return self.const(0, out.dtype)
            self.line(f"{target}[...] = 0")
            return target
        if kept and max(kept) > min(axes, default=len(idx)):
            return self.sum_in_order(x, idx, kept, at, target)
        indent = self.indent
        for d in kept:
            self.line(f"for {idx[d]} in range({x.aval.shape[d]}):")
            self.indent += 1
        acc = self.bind("0.0")
        for d in sorted(axes):
            self.line(f"for {idx[d]} in range({x.aval.shape[d]}):")
            self.indent += 1
        memo, self.memo = self.memo, {}
        try:
            element = at([Index.loop(j, 0, n - 1) for j, n in zip(idx, x.aval.shape)])
            self.line(f"{acc} += np.float64({element})")
        finally:
            self.memo = memo
        self.indent -= len(axes)
        if target is None:
            self.indent = indent
            return self.bind(f"{self.dtype(out.dtype)}({acc})")
        self.line(f"{target}[{', '.join(idx[d] for d in kept)}] = {acc}")
        self.indent = indent
        return target

    def name_object(self, prefix, obj):
        name = f"{prefix}{len(self.objects)}"
        self.objects[name] = obj
        return name

    @staticmethod
    def ufunc_of(eqn):
        """The ufunc the equation's impl is, when calling it directly gives the impl's result
        (no params, the default impl, the result dtype the equation's)."""
        entry = elementwise_impls.get(eqn.primitive)
        if entry is None or entry[1] is None or eqn.params or eqn.primitive.impl is not entry[0]:
            return None
        try:
            dtypes = entry[1].resolve_dtypes(tuple(v.aval.dtype for v in eqn.invars)
                                             + (None,) * entry[1].nout)
        except (TypeError, ValueError):
            return None
        return entry[1] if list(dtypes[-entry[1].nout:]) == [v.aval.dtype for v in
                                                            eqn.outvars] else None

    def call_impl(self, eqn, ins):
        """The Python tier: the primitive's own impl (or its ufunc), as the plans run it, so
        a kernel's results are the interpreter's exactly."""
        ufunc = self.ufunc_of(eqn)
        if ufunc is not None:
            return [f"{self.name_object('u', ufunc)}({', '.join(ins)})"]
        form = source_forms.get(eqn.primitive)
        written = form(eqn, ins) if form is not None else None
        if written is not None:
            return [written]
        impl = self.name_object("f", eqn.primitive.impl)
        args = [f"np.asarray({x})" if not v.aval.shape else x
                for x, v in zip(ins, eqn.invars)]
        if eqn.params:
            args.append(f"**{self.name_object('p', eqn.params)}")
        call = f"{impl}({', '.join(args)})"
        if not eqn.outvars:  # run for its effect (a print, a callback), in order; the
            # comment names the user's line for an error it raises (``raised_at``)
            self.line(f"{call}  # at {source_info.summarize(eqn.source_info)}")
            return []
        if eqn.primitive.multiple_results:  # (called once: its results are picked out)
            called = self.bind(call)
            results = [f"{called}[{i}]" for i in range(len(eqn.outvars))]
        else:
            results = [call]
        return [f"_normalized({r}, {self.dtype(v.aval.dtype)})" if v.aval.shape else r
                for r, v in zip(results, eqn.outvars)]

    def hoist_fused(self, eqn, env, read):
        """Write a loop-invariant equation the native tier fuses once, before the loop (its
        operands are arrays already: it is one loop there)."""
        lines, indent = self.lines, self.indent
        self.lines, self.indent = self.preamble, 1
        try:
            name = eqn.primitive.name
            value = self.sum(eqn, env, read) if name == "reduce_sum" else \
                self.lazy(eqn, env, read)
            if value is None:
                return False
            out = eqn.outvars[0]
            env[out] = self.materialize(None, value) if isinstance(value, _Lazy) else value
            self.invariant.add(env[out])
            return True
        finally:
            self.lines, self.indent = lines, indent

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
        outs = self.body(jaxpr, list(consts) + carry_names + [self.bind(f"{x}[{i}]") for x in xs])
        for y, src in zip(ys, outs[num_carry:]):
            self.line(f"{y}[{i}] = {src}")
        self.carry(carry_names, outs[:num_carry], [v.aval for v in jaxpr.outvars[:num_carry]])
        self.indent -= 1
        return carry_names, ys

    def _scan(self, eqn, ins):
        p = eqn.params
        if p["jaxpr"].consts:
            raise Unsupported("a scan body with constants")
        k, c = p["num_consts"], p["num_carry"]
        carry, ys = self.loop(p["jaxpr"].jaxpr, ins[:k], ins[k:k + c], ins[k + c:], p["length"],
                              p["reverse"])
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
        (pred,) = self.body(cond.jaxpr, ins[:nc] + carry)
        self.line(f"if not {pred}:")
        self.line("    break")
        self.carry(carry, self.body(body.jaxpr, ins[nc:nc + nb] + carry),
                   [v.aval for v in body.jaxpr.outvars])
        self.indent -= 1
        return carry

    def _cond(self, eqn, ins):
        branches = eqn.params["branches"]
        if any(b.consts for b in branches):
            raise Unsupported("a cond branch with constants")
        outs = [self.fresh() for _ in eqn.outvars]
        index = ins[0]
        for k, branch in enumerate(branches):
            last = k == len(branches) - 1
            self.line("else:" if last else f"{'if' if k == 0 else 'elif'} {index} == {k}:")
            self.indent += 1
            srcs = self.body(branch.jaxpr, ins[1:])
            for o, src, v in zip(outs, srcs, eqn.outvars):
                self.line(f"{o} = {src}" if v.aval.shape else
                          f"{o} = {self.dtype(v.aval.dtype)}({src})")
            if not outs:
                self.line("pass")
            self.indent -= 1
        return outs

    def _call(self, eqn, ins):
        closed = eqn.params["call_jaxpr"]
        if closed.consts:
            raise Unsupported(f"a {eqn.primitive.name} with constants")
        return self.body(closed.jaxpr, ins)

    control_flow = {"scan": _scan, "while": _while, "cond": _cond, "custom_jvp_call": _call,
                    "custom_vjp_call": _call, "custom_remat_call": _call}

    def carry(self, names, outs, avals):
        """Rebind the carries to the iteration's results (all at once: one may be another's)."""
        if names:
            srcs = [o if a.shape else f"{self.dtype(a.dtype)}({o})" for o, a in zip(outs, avals)]
            self.line(f"{', '.join(names)}, = {', '.join(srcs)},")

    def source(self, params):
        """The kernel function's source (``_k``: the helpers, ``np``: NumPy)."""
        return "\n".join([f"def kernel({', '.join(params)}):"] + self.preamble + self.lines) + "\n"


def _check_operands(*jaxprs, max_elements=MAX_ELEMENTS):
    """A kernel's operands and results have types it computes on (no float0, no big arrays)."""
    for jaxpr in jaxprs:
        for v in (*jaxpr.invars, *jaxpr.outvars):
            if v.aval.dtype not in NATIVE_DTYPES or math.prod(v.aval.shape) > max_elements:
                raise Unsupported(f"an operand of type {v.aval.str_short()}")


def scan_source(jaxpr, num_consts, num_carry, reverse, native):
    """``kernel(length, *consts, *carry, *xs, *ys) -> carry``: the scan, ys written in place.
    Returns the kernel's source and the objects its namespace needs."""
    _check_operands(jaxpr)
    num_xs = len(jaxpr.invars) - num_consts - num_carry
    num_ys = len(jaxpr.outvars) - num_carry
    consts = [f"k{i}" for i in range(num_consts)]
    k = _Kernel(consts, native)
    carry = [f"c{i}" for i in range(num_carry)]
    xs = [f"xs{i}" for i in range(num_xs)]
    ys = [f"ys{i}" for i in range(num_ys)]
    k.line("for it in range(length):")
    k.indent += 1
    k.line("i = length - 1 - it" if reverse else "i = it")
    outs = k.body(jaxpr, consts + carry + [k.bind(f"{x}[i]") for x in xs],
                  escaping=range(num_carry), stored=range(num_carry, len(jaxpr.outvars)),
                  carried={num_consts + j: j for j in range(num_carry)})
    for y, value in zip(ys, outs[num_carry:]):
        k.store(y, "i", value)
    k.carry(carry, outs[:num_carry], [v.aval for v in jaxpr.outvars[:num_carry]])
    k.indent -= 1
    k.line(f"return ({''.join(c + ', ' for c in carry)})")
    return k.source(["length"] + consts + carry + xs + ys), k.objects


def while_source(cond, body, cond_nconsts, body_nconsts, native):
    """``kernel(*cond_consts, *body_consts, *carry) -> carry`` (and its namespace's objects)."""
    _check_operands(cond, body)
    cconsts = [f"a{i}" for i in range(cond_nconsts)]
    bconsts = [f"b{i}" for i in range(body_nconsts)]
    k = _Kernel(cconsts + bconsts, native)
    carry = [f"c{i}" for i in range(len(body.outvars))]
    k.line("while True:")
    k.indent += 1
    (pred,) = k.body(cond, cconsts + carry, escaping=())
    k.line(f"if not {pred}:")
    k.line("    break")
    k.carry(carry, k.body(body, bconsts + carry, escaping=range(len(body.outvars)),
                          carried={body_nconsts + j: j for j in range(len(carry))}),
            [v.aval for v in body.outvars])
    k.indent -= 1
    k.line(f"return ({''.join(c + ', ' for c in carry)})")
    return k.source(cconsts + bconsts + carry), k.objects


def elementwise_source(jaxpr, donated=None):
    """``kernel(*ins, *outs) -> scalars``: straight-line elementwise work (a plan's cluster, no
    loop) as the native tier writes it. The array results are computed into their buffers
    among ``outs`` (allocated by the caller, one per array result), those of one shape
    together in one loop nest, so that no intermediate is ever an array; the rank-0 results
    are returned, in order. ``donated``: result position -> the position of the operand it is
    written into (read only at the index written, every element's reads before its stores);
    that result has no buffer among ``outs``. (The operand itself, not a second view of its
    buffer, is written: a store through another array would stop the loop's vectorization.)"""
    _check_operands(jaxpr, max_elements=CLUSTER_MAX_ELEMENTS)
    donated = donated or {}
    ins = [f"x{i}" for i in range(len(jaxpr.invars))]
    k = _Kernel((), native=True)
    k.one_pass = True
    k.max_elements = CLUSTER_MAX_ELEMENTS
    values = k.body(jaxpr, ins, stored=range(len(jaxpr.outvars)))
    outs, scalars, by_shape = [], [], {}
    for pos, (v, value) in enumerate(zip(jaxpr.outvars, values)):
        if not v.aval.shape:
            scalars.append(value if v.aval.dtype == np.bool_ else
                           f"{k.dtype(v.aval.dtype)}({value})")
            continue
        if pos in donated:
            target = ins[donated[pos]]
        else:
            target = f"o{len(outs)}"
            outs.append(target)
        if isinstance(value, _Lazy):
            by_shape.setdefault(v.aval.shape, []).append((value, target))
        else:
            k.line(f"{target}[...] = {value}")
    for pairs in by_shape.values():
        k.materialize_together(pairs)
    k.line(f"return ({''.join(o + ', ' for o in scalars)})")
    return k.source(ins + outs)


class _Shape:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


class _Lazy:
    """An array of the native tier not computed yet: ``at(idx)`` writes (into the fused loop
    being written) what its element at the index sources ``idx`` needs and returns its
    source. ``cheap``: it only reads other arrays, so reading it twice costs nothing."""

    __slots__ = ("aval", "at", "cheap")

    def __init__(self, aval, at, cheap):
        self.aval, self.at, self.cheap = aval, at, cheap


_NUMBER = re.compile(r"-?[0-9.]+(e-?[0-9]+)?|True|False")

# results that are new arrays, never a view of an operand (escape analysis)
_NEW_ARRAYS = frozenset(ELEMENTWISE - {"copy", "copy_p", "name", "stop_gradient"}) | {
    "broadcast_in_dim", "pad", "concatenate", "stack", "dot_general", "dynamic_update_slice",
    "iota", "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_or",
    "reduce_and", "argmax", "argmin"}


def _accumulating(jaxpr, carried, uses, consumer):
    """The equations a loop body can write into a carry's buffer: ``{eqn: the carry's input
    position}`` for a carry whose one use is a ufunc call giving, as its only use, the same
    carry's next value, of its shape and dtype (a gradient accumulated over the iterations:
    ``acc + g`` allocated a new array at every one)."""
    found = {}
    for position, out_position in carried.items():
        v, out = jaxpr.invars[position], jaxpr.outvars[out_position]
        if type(out) is Literal or not v.aval.shape or uses.get(v) != 1 or \
                uses.get(out) != 2 or list(jaxpr.outvars).count(out) != 1:
            continue
        eqn = consumer[v]
        if eqn.outvars == [out] and out.aval.shape == v.aval.shape and \
                out.aval.dtype == v.aval.dtype and _Kernel.ufunc_of(eqn) is not None and \
                all(type(x) is Literal or x.aval.dtype == v.aval.dtype for x in eqn.invars):
            found[eqn] = position
    return found


def _reusable(jaxpr, escaping):
    """The vars of a loop body whose arrays never outlive an iteration: none of them is (a
    view of) an ``escaping`` output, so their buffers can be written again each iteration."""
    live = {v for v in escaping if type(v) is not Literal}
    for eqn in reversed(jaxpr.eqns):
        if eqn.primitive.name not in _NEW_ARRAYS and any(v in live for v in eqn.outvars):
            live.update(v for v in eqn.invars if type(v) is not Literal)
    return frozenset(v for eqn in jaxpr.eqns for v in eqn.outvars if v not in live)


_MAX_PIECES = 16  # the most pieces a fused loop nest is split into


def _pieces(n, points):
    """``[0, n)`` cut at ``points``: the ``(lo, hi)`` pieces."""
    cuts = [0, *sorted(p for p in points if 0 < p < n), n]
    return list(zip(cuts, cuts[1:]))


def _taken(eqn, axis):
    """``(start, stop, stride)`` a slice takes along ``axis`` when it takes every other axis
    whole, else None."""
    p = eqn.params
    shape = eqn.invars[0].aval.shape
    cuts = list(zip(p["start_indices"], p["limit_indices"],
                    p.get("strides") or (1,) * len(shape)))
    if any(cut != (0, n, 1) for d, (cut, n) in enumerate(zip(cuts, shape)) if d != axis):
        return None
    return cuts[axis]


def _concatenated_slices(jaxpr):
    """The concatenations whose operands are all slices of one array, each whole on every
    other axis: ``{concatenate eqn: (array var, index along the axis, axis)}``."""
    slices = {e.outvars[0]: e for e in jaxpr.eqns if e.primitive.name == "slice"}
    found = {}
    for eqn in jaxpr.eqns:
        if eqn.primitive.name != "concatenate":
            continue
        axis = eqn.params["dimension"]
        parts = [slices.get(v) for v in eqn.invars if type(v) is not Literal]
        if len(parts) != len(eqn.invars) or None in parts or \
                any(part.invars[0] is not parts[0].invars[0] for part in parts):
            continue
        taken = [_taken(part, axis) for part in parts]
        if None not in taken:
            found[eqn] = (parts[0].invars[0], np.concatenate([np.arange(*t) for t in taken]),
                          axis, tuple(taken))
    return found


def _gathered(x, index, axis, slices):
    """The slices of ``x`` along ``axis`` (``slices``: each one's index tuple) concatenated,
    in the layout the plans' ``np.concatenate`` gives them (it follows its operands' strides;
    a later sum's or product's rounding depends on it): for a C-contiguous ``x``, C order, so
    one ``np.take`` (always C order; ``x[:, index]`` is not: advanced indexing after a slice
    puts the indexed axis outermost in memory); else the slices concatenated, as the plans
    do."""
    if type(x) is not np.ndarray:
        x = np.asarray(getattr(x, "_buf", x))
    if x.flags.c_contiguous:
        return np.take(x, index, axis=axis)
    return np.concatenate([x[s] for s in slices], axis=axis)


def _padded_slices(jaxpr, uses, consumer):
    """Zero pads of single-use slices, the slice cutting (stride 1) and the pad padding one
    and the same axis, whose one use is a slice-add (``_slice_add``: the transpose of a
    ``roll`` or a stencil): ``{pad eqn: (slice eqn, axis)}``."""
    slices = {e.outvars[0]: e for e in jaxpr.eqns if e.primitive.name == "slice"}
    found = {}
    for eqn in jaxpr.eqns:
        if eqn.primitive.name != "pad" or not _zero_pad(eqn) or type(eqn.invars[0]) is Literal:
            continue
        sliced, out = slices.get(eqn.invars[0]), eqn.outvars[0]
        if sliced is None or uses.get(eqn.invars[0]) != 1 or uses.get(out) != 1 or \
                not _slice_add(consumer[out]) or type(sliced.invars[0]) is Literal:
            continue
        padded = [d for d, (lo, hi, _) in enumerate(eqn.params["padding_config"]) if lo or hi]
        axis = padded[0] if len(padded) == 1 else 0 if not padded else None
        taken = None if axis is None else _taken(sliced, axis)
        if taken is not None and taken[2] == 1:
            found[eqn] = (sliced, axis)
    return found


def _piece(src, sliced, axis, pad):
    """A slice-add ``acc[targets] += src[sources]`` along one axis: (array name, axis,
    source indices, target indices, the axis' length)."""
    lo, hi, _ = _taken(sliced, axis)
    at = pad.params["padding_config"][axis][0]
    return (src, axis, np.arange(lo, hi), np.arange(at, at + hi - lo),
            pad.outvars[0].aval.shape[axis])


def _merged_slice_adds(acc, adds, name_object):
    """The lines of slice-adds into ``acc`` in order; a run of pieces of one array into
    disjoint targets is one indexed add (each element still gets the same additions in the
    same order: bit for bit the separate adds)."""
    lines, run, targets = [], [], set()

    def write_run():
        if len(run) == 1:
            src, index, _ = run[0]
            lines.append(f"{acc}{index} += {src}")
        elif run:
            name, axis, _, _, n = run[0][2]
            sources = np.concatenate([piece[2] for _, _, piece in run])
            into = np.concatenate([piece[3] for _, _, piece in run])
            lead = ":, " * axis
            if len(into) == n:  # every element once: a permutation of the array
                order = np.empty(n, np.intp)
                order[into] = sources
                lines.append(f"{acc} += {name}[{lead}{name_object('g', order)}]")
            else:
                lines.append(f"{acc}[{lead}{name_object('g', into)}] += "
                             f"{name}[{lead}{name_object('g', sources)}]")
        run.clear()
        targets.clear()

    for add in adds:
        piece = add[2]
        if run and (piece is None or piece[:2] != run[0][2][:2]
                    or not targets.isdisjoint(piece[3].tolist())):
            write_run()
        if piece is None:
            src, index, _ = add
            lines.append(f"{acc}{index} += {src}")
        else:
            run.append(add)
            targets.update(piece[3].tolist())
    write_run()
    return lines


def _slice_add(eqn):
    """An ``add`` of arrays of its result's shape: the only use a pad written as slice-adds
    may have (its var is never bound; ``x + 1.0`` or a folded broadcast zero would read it)."""
    shape = eqn.outvars[0].aval.shape if eqn.primitive.name == "add" else ()
    return bool(shape) and all(type(v) is not Literal and v.aval.shape == shape
                               for v in eqn.invars)


def _zero_pad(eqn):
    """A pad by zeros on both sides, no interior padding (a slice's transpose)."""
    pad_value = eqn.invars[1]
    return type(pad_value) is Literal and np.asarray(pad_value.val)[()] == 0 and all(
        lo >= 0 and hi >= 0 and not interior for lo, hi, interior in eqn.params["padding_config"])


def _pad_index(eqn):
    shape = eqn.invars[0].aval.shape
    return "[" + ", ".join(f"{lo}:{lo + n}" for n, (lo, _, _) in
                           zip(shape, eqn.params["padding_config"])) + "]"
