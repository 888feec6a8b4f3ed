"""The native tier of loop kernels (``loop_source``): source for numba, every equation written
from ``native_rules``, fused (``Fusion``): elementwise equations and index remaps (slices,
pads, concatenations, flips, transposes, broadcasts) become lazy values, computed where an
array is needed in one explicit index loop with scalar intermediates (split where a
concatenation or pad changes part), into buffers allocated once before the loop unless they
outlive an iteration; sums add in NumPy's order, matrix products write into their
buffers (``np.dot(a, b, out)``), a product whose one use transposes it is computed transposed.
"""

import contextlib
import itertools
import math
import re

import numpy as np

from remat.core import Literal
from remat.exec.loop_rewrites import HoistedInvariants, Rewrite, UpdatedCarries
from remat.exec.loop_writer import KernelWriter
from remat.exec.native_rules import (
    COMPLEX_PRIMITIVES,
    ELEMENTWISE,
    Index,
    concatenate_element,
    copy_into,
    element_source,
    float_sum,
    index_remap,
    matrix_product,
    native_update_rules,
    numpy_sum_order,
    pad_element,
    shape_src,
)
from remat.interpreters import partial_eval as pe


class Fusion(Rewrite):
    """The native tier's way of writing an equation where it has one (``NativeKernel.lazy``,
    ``sum``, ``matmul``): a lazy value (computed once, now, if several equations use it and it
    is costly), a float sum as a loop, a matrix product into its buffer; loop-invariant ones
    once before the loop. A lazy value an equation reads as an array is computed then."""

    def write(self, eqn, rule):
        body, kernel = self.body, self.body.kernel
        name = eqn.primitive.name
        if not eqn.outvars or name in kernel.control_flow or pe.has_effects(eqn):
            return False
        env, read, out = body.env, body.read, eqn.outvars[0]
        invariant = all(type(v) is Literal or env[v] in kernel.invariant for v in eqn.invars)
        if out.aval.shape and invariant:
            return kernel.hoist_fused(eqn, env, read)
        if invariant:
            return False
        if name == "dot_general":
            operands = matrix_product(eqn, [read(v) for v in eqn.invars])
            if operands is None:
                return False
            kernel.matmul(eqn, operands, body.uses, body.consumer, env, body.done)
            return True
        value = kernel.sum(eqn, env, read) if name == "reduce_sum" else \
            kernel.lazy(eqn, env, read) if out.aval.shape else None
        if value is None:
            return False
        env[out] = kernel.materialize(out, value) if isinstance(value, Lazy) and \
            body.uses.get(out, 0) > 1 and not value.cheap and not kernel.one_pass else value
        return True

    def realize(self, v):
        env = self.body.env
        if isinstance(env[v], Lazy):  # (an array some equation needs: compute it)
            env[v] = self.body.kernel.materialize(v, env[v])


class NativeKernel(KernelWriter):
    """A kernel of the native tier (numba source)."""

    rewrites = (UpdatedCarries, Fusion, HoistedInvariants)
    update_rules = native_update_rules
    stores_lazily = True  # (a stored lazy value is computed into its store)

    def __init__(self, invariant=()):
        super().__init__(invariant)
        self.reusable = frozenset()  # vars whose buffer is allocated once, before the loop
        self.memo = {}  # (lazy value, index) -> the name of its element in the current loop
        self.splits = None  # loop variable -> where to split its loop (while one is tried)
        self.one_pass = False  # lazy values stay lazy, however many use them (see
        # elementwise_source: its results are computed together, in one loop nest)

    def computes_complex(self, name, v):
        return name in COMPLEX_PRIMITIVES or name in self.control_flow

    def written_so_far(self):
        return super().written_so_far(), dict(self.memo)

    def take_back(self, saved):
        saved, self.memo = saved
        super().take_back(saved)

    @contextlib.contextmanager
    def reusing(self, jaxpr, escaping):
        saved = self.reusable
        self.reusable = frozenset() if escaping is None else _reusable(jaxpr, escaping)
        try:
            yield
        finally:
            self.reusable = saved

    def store(self, target, index, value, shape=()):
        """Write a value (its source, or lazy) into ``target[index]``."""
        if isinstance(value, Lazy):
            self.materialize(None, value, target, f"{index}, ")
        else:
            copy_into(self, target, value, shape, lead=f"{index}, " if shape else index)

    def let(self, src):
        """A scalar source used more than once inside a fused loop, named once."""
        return src if src.isidentifier() or _NUMBER.fullmatch(src) else self.bind(src)

    def elements(self, v, value):
        """``idx -> source of v's element at idx`` (``value``: v's source or lazy value)."""
        if isinstance(value, Lazy):
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
            if replicated and isinstance(value, Lazy) and not value.cheap:
                value = read(v)
            return self.elements(v, value)

        def cheap(*vs):
            return all(type(v) is Literal or not isinstance(env[v], Lazy) or env[v].cheap
                       for v in vs)

        if name in ELEMENTWISE:
            if any(type(v) is not Literal and v.aval.shape and v.aval.shape != out.shape
                   for v in eqn.invars):
                return None  # (operands broadcast by NumPy's rules: the array form)
            if not self.has_element_form(eqn):
                return None
            parts = [operand(v) for v in eqn.invars]
            identity = name in ("copy", "copy_p", "name", "stop_gradient")
            return Lazy(out, lambda idx: element_source(self, eqn, [at(idx) for at in parts]),
                         identity and cheap(*eqn.invars))
        remap = index_remap(eqn)
        if remap is not None:
            x = eqn.invars[0]
            replicated = name == "broadcast_in_dim" and math.prod(out.shape) > \
                math.prod(x.aval.shape)
            at = operand(x, replicated)
            starts = [self.bind(f"min(max(int({read(s)}), 0), {n - k})") for s, n, k in zip(
                eqn.invars[1:], x.aval.shape, eqn.params.get("slice_sizes", ()))]
            return Lazy(out, lambda idx: at(remap(idx, starts)), cheap(x))
        # (a select of reads of arrays or cheap values: cheap)
        if name == "concatenate":
            return Lazy(out, concatenate_element(
                self, eqn, [operand(v, True) for v in eqn.invars]), True)
        if name == "pad" and not any(i for _, _, i in eqn.params["padding_config"]):
            return Lazy(out, pad_element(self, eqn, operand(eqn.invars[0], True),
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
        wide = _accumulating(x.aval.dtype)
        acc = self.buffer(None, _Shape(tuple(shape[d] for d in kept), wide), True)
        self.line(f"{acc}[...] = 0")
        for j, n in zip(idx, shape):
            self.line(f"for {j} in range({n}):")
            self.indent += 1
        memo, self.memo = self.memo, {}
        try:
            element = at([Index.loop(j, 0, n - 1) for j, n in zip(idx, shape)])
            self.line(f"{acc}[{', '.join(idx[d] for d in kept)}] += "
                      f"{self.dtype(wide)}({element})")
        finally:
            self.memo = memo
            self.indent -= len(shape)
        copy_into(self, target, acc, tuple(shape[d] for d in kept))
        return target


    def sum(self, eqn, env, read):
        """A float or complex ``reduce_sum`` in NumPy's order over a C-contiguous operand
        (``native_rules.numpy_sum_order``), so that it rounds as the Python tier's: a float
        one pairwise along a reduced innermost run (in the fused loops where the run is one
        axis of at most 128, ``pairwise_in_loops``; else ``_k.sum_in_numpy_order`` on its
        operand, computed first if lazy), otherwise as explicit loops accumulating in order,
        in its own dtype (complex sums in complex128); its operand's elements read where they
        are, or computed in the loop if lazy. None for other sums."""
        (x,), out = eqn.invars, eqn.outvars[0].aval
        if x.aval.dtype.kind not in "fc" or not x.aval.shape:
            return None
        axes = set(eqn.params["axes"])
        if x.aval.dtype.kind == "f" and math.prod(x.aval.shape) and \
                numpy_sum_order(x.aval.shape, axes)[-1]:  # (pairwise along the innermost run)
            value = env[x]
            big = [d for d, n in enumerate(x.aval.shape) if n != 1]
            if big and x.aval.shape[big[-1]] <= 128 and (len(big) == 1 or big[-2] not in axes):
                return self.pairwise_in_loops(x, self.elements(x, value), big, axes, out,
                                              eqn.outvars[0])
            operand = self.materialize(None, value, self.buffer(None, value.aval, True)) \
                if isinstance(value, Lazy) else \
                value if value.isidentifier() else self.bind(value)
            flat = self.buffer(None, _Shape((math.prod(out.shape),), out.dtype), True)
            (src,) = float_sum(self, eqn, operand, axes, flat)
            return self.bind(src)
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
        wide = self.dtype(_accumulating(x.aval.dtype))
        acc = self.bind(f"{wide}(0)")
        for d in sorted(axes):
            self.line(f"for {idx[d]} in range({x.aval.shape[d]}):")
            self.indent += 1
        memo, self.memo = self.memo, {}
        try:
            element = at([Index.loop(j, 0, n - 1) for j, n in zip(idx, x.aval.shape)])
            self.line(f"{acc} += {wide}({element})")
        finally:
            self.memo = memo
        self.indent -= len(axes)
        if target is None:
            self.indent = indent
            return self.bind(f"{self.dtype(out.dtype)}({acc})")
        self.line(f"{target}[{', '.join(idx[d] for d in kept)}] = {acc}")
        self.indent = indent
        return target

    def pairwise_in_loops(self, x, at, big, axes, out, v):
        """A float sum along one reduced innermost axis of at most 128 (``big``: the axes
        longer than 1), written into the fused loops: NumPy's ``pairwise_sum`` of each row
        (fewer than 8 in order; else eight interleaved accumulators combined as a tree, then
        the rest), each output the sum from zero of its rows' sums in C order."""
        shape, dtype = x.aval.shape, self.dtype(x.aval.dtype)
        last, n = big[-1], shape[big[-1]]
        names = {d: self.fresh() for d in big[:-1]}
        target = self.buffer(v, out) if out.shape else None
        if target is None:
            total = self.bind(f"{dtype}(0)")
        else:
            self.line(f"{target}[...] = 0")
        for d in big[:-1]:
            self.line(f"for {names[d]} in range({shape[d]}):")
            self.indent += 1

        def element(k):
            idx = [k if d == last else Index.loop(names[d], 0, shape[d] - 1) if d in names
                   else Index.const(0) for d in range(len(shape))]
            return f"{dtype}({at(idx)})"

        memo, self.memo = self.memo, {}
        try:
            if n < 8:
                res = self.bind(element(Index.const(0)))
                for k in range(1, n):
                    self.line(f"{res} += {element(Index.const(k))}")
            else:
                rs = [self.bind(element(Index.const(j))) for j in range(8)]
                end = n - n % 8
                if end > 8:
                    step = self.fresh()
                    self.line(f"for {step} in range(8, {end}, 8):")
                    self.indent += 1
                    outer, self.memo = self.memo, {}
                    block = Index.loop(step, 8, end - 8)
                    for j, r in enumerate(rs):
                        self.line(f"{r} += {element(block.shift(j))}")
                    self.memo = outer
                    self.indent -= 1
                res = self.bind(f"(({rs[0]} + {rs[1]}) + ({rs[2]} + {rs[3]})) + "
                                f"(({rs[4]} + {rs[5]}) + ({rs[6]} + {rs[7]}))")
                for k in range(end, n):
                    self.line(f"{res} += {element(Index.const(k))}")
        finally:
            self.memo = memo
        if target is None:
            self.line(f"{total} += {res}")
        else:
            at_out = [names.get(d, "0") for d in range(len(shape)) if d not in axes]
            self.line(f"{target}[{', '.join(at_out)}] += {res}")
        self.indent -= len(big) - 1
        return total if target is None else target

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
            env[out] = self.materialize(None, value) if isinstance(value, Lazy) else value
            self.invariant.add(env[out])
            return True
        finally:
            self.lines, self.indent = lines, indent


class _Shape:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


class Lazy:
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



def _accumulating(dtype):
    """The type a sum of ``dtype`` accumulates in: its own (a float sum in NumPy's order
    rounds as NumPy's), or complex128."""
    return np.dtype(np.complex128 if dtype.kind == "c" else dtype)


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

