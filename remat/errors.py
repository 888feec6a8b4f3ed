"""The error types users catch, with JAX's names and wording."""


class JAXTypeError(TypeError):
    """Base of the tracer errors (JAX's ``JAXTypeError``)."""


class ConcretizationTypeError(JAXTypeError):
    """A traced (abstract) value was used where a concrete Python value is needed."""

    def __init__(self, tracer, context=""):
        origin = getattr(tracer, "_origin", None) if tracer is not None else None
        aval = getattr(tracer, "aval", None)
        msg = f"Abstract tracer value encountered where concrete value is expected: {aval}\n"
        if context:
            msg += context + "\n"
        if origin:
            msg += origin + "\n"
        msg += ("The problem arose with a value that is traced, so its concrete value is not "
                "known while tracing. Use static_argnums / static_argnames to mark Python "
                "values as static, or use lax.cond / lax.while_loop for value-dependent "
                "control flow.")
        super().__init__(msg)


class TracerBoolConversionError(ConcretizationTypeError):
    """``bool(tracer)``: Python control flow on a traced value."""


class TracerIntegerConversionError(JAXTypeError):
    """``int(tracer)`` / ``tracer.__index__``."""

    def __init__(self, tracer, context=""):
        super().__init__(
            f"The __index__() method was called on traced array with shape "
            f"{tracer.aval.str_short()}.\n{context}".rstrip())


class TracerArrayConversionError(JAXTypeError):
    """``np.asarray(tracer)``."""

    def __init__(self, tracer):
        super().__init__(
            f"The numpy.ndarray conversion method __array__() was called on traced array with "
            f"shape {tracer.aval.str_short()}. A traced value cannot be converted to a NumPy "
            f"array; use remat.numpy functions on it instead.")


class UnexpectedTracerError(Exception):
    """A tracer escaped the transformation that created it and was used after it ended."""


class JaxRuntimeError(RuntimeError):
    """A failure while running a computation (JAX's ``jax.errors.JaxRuntimeError``)."""


class OutOfMemoryError(JaxRuntimeError, MemoryError):
    """An array larger than the machine's memory (XLA's ``RESOURCE_EXHAUSTED``), raised where
    the array is created; also a MemoryError, as NumPy's allocation failures are."""
