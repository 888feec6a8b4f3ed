"""The Python tier of loop kernels (``loop_source``): source calling each primitive's impl (or
its ufunc) on the values the plans would give it, so its results equal the interpreter's bit
for bit. Its bodies get the rewrites of ``loop_rewrites`` that keep tiny-array work from
allocating at every equation."""

from remat import source_info
from remat.exec.loop_rewrites import (
    AccumulatedCarries,
    ForwardedIdentities,
    GatheredSlices,
    HoistedInvariants,
    SliceAdds,
    UpdatedCarries,
)
from remat.exec.loop_writer import KernelWriter
from remat.exec.native_rules import EXACT_RULES, update_rules
from remat.runtime.registry import elementwise_impls, source_forms, update_impls


class PythonKernel(KernelWriter):
    """A kernel of the Python tier: every equation but control flow and the index rules that
    are exact (``EXACT_RULES``) calls its primitive's impl."""

    rewrites = (UpdatedCarries, ForwardedIdentities, SliceAdds, GatheredSlices,
                HoistedInvariants, AccumulatedCarries)

    def rule(self, eqn):
        name = eqn.primitive.name
        if name in self.control_flow or name in EXACT_RULES:
            return super().rule(eqn)
        return PythonKernel.call_impl

    def new_array(self, eqn, rule):
        if self.calls_impl(rule):
            return self.ufunc_of(eqn) is not None
        return super().new_array(eqn, rule)

    @staticmethod
    def calls_impl(rule):
        """Whether ``rule`` calls the primitive's impl (``call_impl``)."""
        return rule is PythonKernel.call_impl

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

    def write_into(self, eqn, ins, target):
        """An update without source of its own (``update_rules``) calls its registered
        ``into``, as the plans run it in place."""
        if eqn.primitive.name in update_rules:
            return super().write_into(eqn, ins, target)
        into = self.name_object("f", update_impls[eqn.primitive][1])
        self.line(f"{into}({', '.join([target, *self._impl_args(eqn, ins, 1)])})")

    def _impl_args(self, eqn, ins, first=0):
        """The source of the arguments of an impl call on the operands from ``first`` on:
        rank-0 operands as arrays, as the plans hand them over, then the params."""
        args = [f"np.asarray({x})" if not v.aval.shape else x
                for x, v in zip(ins[first:], eqn.invars[first:])]
        if eqn.params:
            args.append(f"**{self.name_object('p', eqn.params)}")
        return args

    def call_impl(self, eqn, ins):
        """The primitive's own impl (or its ufunc), as the plans run it, so a kernel's results
        are the interpreter's exactly."""
        ufunc = self.ufunc_of(eqn)
        if ufunc is not None:
            return [f"{self.name_object('u', ufunc)}({', '.join(ins)})"]
        form = source_forms.get(eqn.primitive)
        written = form(eqn, ins) if form is not None else None
        if written is not None:
            return [written]
        impl = self.name_object("f", eqn.primitive.impl)
        call = f"{impl}({', '.join(self._impl_args(eqn, ins))})"
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
