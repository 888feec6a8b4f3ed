"""Weak types survive transformations where JAX keeps them: cotangents of weakly typed inputs,
loop carries that start from Python scalars."""

import numpy as np
import pytest

import remat
import remat.numpy as jnp


def _cases(jax, jnp):
    f = lambda x: x * 2.0  # noqa: E731
    return {
        "grad": lambda: jax.grad(f)(3.0),
        "vjp": lambda: jax.vjp(f, 3.0)[1](1.0)[0],
        "jvp_tangent": lambda: jax.jvp(f, (3.0,), (1.0,))[1],
        "value_and_grad": lambda: jax.value_and_grad(f)(3.0)[1],
        "fori_loop": lambda: jax.lax.fori_loop(0, 3, lambda i, c: c + 1.0, 0.0),
        "while_loop": lambda: jax.lax.while_loop(lambda c: c < 3, lambda c: c + 1.0, 0.0),
        "scan_carry": lambda: jax.lax.scan(lambda c, x: (c + x, c), 0.0, jnp.arange(3.0))[0],
        "jit": lambda: jax.jit(f)(3.0),
        "grad_of_checkpoint": lambda: jax.grad(jax.checkpoint(f))(3.0),
    }


EXPECTED_WEAK = {"grad": True, "vjp": True, "jvp_tangent": True, "value_and_grad": True,
                 "fori_loop": True, "while_loop": True, "scan_carry": False, "jit": True,
                 "grad_of_checkpoint": True}


@pytest.mark.parametrize("name", sorted(EXPECTED_WEAK))
def test_weak_type_as_jax(name):
    out = _cases(remat, jnp)[name]()
    assert remat.core.get_aval(out).weak_type is EXPECTED_WEAK[name]


@pytest.mark.parametrize("name", sorted(EXPECTED_WEAK))
def test_weak_type_matches_the_oracle(name):
    import jax
    import jax.numpy as jjnp

    assert EXPECTED_WEAK[name] is jax.typeof(_cases(jax, jjnp)[name]()).weak_type


# What the differentiation transformations return for Python scalars and passed-through values,
# as JAX 0.10 returns it: (the value, its type's name, weakly typed or None for a non-array).
def _passthrough_cases(jax, jnp):
    import numpy as np

    two = np.float32(2)
    return {
        "jvp_identity": lambda: jax.jvp(lambda a: a, (2.0,), (3.0,)),
        "jvp_constant_output": lambda: jax.jvp(lambda a: 2.0, (2.0,), (3.0,)),
        "jvp_mixed_outputs": lambda: jax.jvp(lambda a: (a, 1.0, a * 2), (2.0,), (1.0,)),
        "jvp_add_passes_the_tangent": lambda: jax.jvp(lambda a: (a, a + 1), (2.0,), (1.0,)),
        "vjp_identity": lambda: jax.vjp(lambda a: a, 2.0)[1](1.0),
        "vjp_unused_input": lambda: jax.vjp(lambda a, b: a, 1.0, 2.0)[1](1.0),
        "jacfwd_identity": lambda: jax.jacfwd(lambda a: a)(2.0),
        "jacfwd_strong_output": lambda: jax.jacfwd(lambda a: a * two)(2.0),
        "jacrev_weak_input": lambda: jax.jacrev(lambda a: a * two)(2.0),
        "jacrev_strong_input": lambda: jax.jacrev(lambda a: a * 2)(two),
        "jacrev_pair": lambda: jax.jacrev(lambda a, b: a * b, (0, 1))(2.0, np.ones(2, np.float32)),
    }


def _described(tree):
    from remat.tree_util import tree_leaves

    return [(float(np.asarray(x).ravel()[0]), type(x).__name__ if not hasattr(x, "aval") else
             "Array", getattr(getattr(x, "aval", None), "weak_type", None))
            for x in tree_leaves(tree)]


EXPECTED_PASSTHROUGH = {
    "jvp_identity": [(2.0, "float", None), (3.0, "float", None)],
    "jvp_constant_output": [(2.0, "float", None), (0.0, "Array", True)],
    "jvp_mixed_outputs": [(2.0, "float", None), (1.0, "float", None), (4.0, "Array", True),
                          (1.0, "float", None), (0.0, "Array", True), (2.0, "Array", True)],
    "jvp_add_passes_the_tangent": [(2.0, "float", None), (3.0, "Array", True),
                                   (1.0, "float", None), (1.0, "Array", True)],
    "vjp_identity": [(1.0, "float", None)],
    "vjp_unused_input": [(1.0, "float", None), (0.0, "Array", True)],
    "jacfwd_identity": [(1.0, "Array", True)],
    "jacfwd_strong_output": [(2.0, "Array", False)],
    "jacrev_weak_input": [(2.0, "Array", True)],
    "jacrev_strong_input": [(2.0, "Array", False)],
    "jacrev_pair": [(1.0, "Array", True), (2.0, "Array", False)],
}


@pytest.mark.parametrize("name", sorted(EXPECTED_PASSTHROUGH))
def test_passed_through_values_and_jacobian_weak_types_as_jax(name):
    assert _described(_passthrough_cases(remat, jnp)[name]()) == EXPECTED_PASSTHROUGH[name]


@pytest.mark.parametrize("name", sorted(EXPECTED_PASSTHROUGH))
def test_passed_through_values_match_the_oracle(name):
    import jax
    import jax.numpy as jjnp

    out = _passthrough_cases(jax, jjnp)[name]()
    got = [(v, "Array" if kind == "ArrayImpl" else kind, weak if kind != "ArrayImpl" else
            jax.typeof(x).weak_type)
           for (v, kind, weak), x in zip(_described(out), jax.tree_util.tree_leaves(out))]
    assert got == EXPECTED_PASSTHROUGH[name]


@pytest.mark.parametrize("transform", ["grad", "value_and_grad", "vjp", "jvp", "linearize"])
def test_auxiliary_data_need_not_be_arrays(transform):
    # (as JAX: equinox's filter_grad returns a string beside the loss)
    x = np.ones(3, np.float32)
    f = lambda x: (jnp.sum(x), ("hi", x * 2, object, 1.5))  # noqa: E731
    if transform == "grad":
        aux = remat.grad(f, has_aux=True)(x)[1]
    elif transform == "value_and_grad":
        aux = remat.value_and_grad(f, has_aux=True)(x)[0][1]
    elif transform == "vjp":
        aux = remat.vjp(f, x, has_aux=True)[2]
    elif transform == "jvp":
        aux = remat.jvp(f, (x,), (x,), has_aux=True)[2]
    else:
        aux = remat.linearize(f, x, has_aux=True)[2]
    assert aux[0] == "hi" and aux[2] is object and aux[3] == 1.5 and type(aux[3]) is float
    np.testing.assert_array_equal(np.asarray(aux[1]), x * 2)


def _tracer_kinds(jax, jnp):
    """Which of a jvp'd function's inputs and outputs are tracers: only those carrying a
    tangent, as JAX's (a value with a symbolically zero tangent is the primal itself)."""
    seen = []

    def f(x, y, n):
        a, b, c = x * 2.0, y + 1.0, n * 3
        seen.append({k: isinstance(v, jax.core.Tracer)
                     for k, v in dict(x=x, y=y, n=n, a=a, b=b, c=c).items()})
        return a, b, c

    jax.jvp(f, (jnp.ones(2), jnp.ones(2), jnp.ones(2, dtype=int)),
            (jnp.ones(2), jnp.zeros(2), np.zeros(2, dtype=jax.dtypes.float0)))
    jax.jvp(lambda y: f(jnp.ones(2), y, 1)[1], (jnp.ones(2),), (jnp.ones(2),))
    return seen


def test_only_perturbed_values_are_jvp_tracers():
    # (an integer input's float0 tangent is symbolically zero; in the second jvp only y is
    # perturbed)
    assert _tracer_kinds(remat, jnp) == [
        {"x": True, "y": True, "n": False, "a": True, "b": True, "c": False},
        {"x": False, "y": True, "n": False, "a": False, "b": True, "c": False}]


def test_only_perturbed_values_are_jvp_tracers_as_the_oracle():
    import jax
    import jax.numpy as jjnp

    assert _tracer_kinds(jax, jjnp) == _tracer_kinds(remat, jnp)


def _passing_primitive_tangent(Primitive, ad):
    """jvp of a primitive whose rule hands its tangent through: the tangent comes back as
    the user gave it (equinox's nondifferentiable_backward), only jnp's ops make arrays."""
    p = Primitive("passing_tangent")
    p.def_impl(lambda x: x)
    p.def_abstract_eval(lambda x: x)
    ad.primitive_jvps[p] = lambda primals, tangents: (p.bind(*primals), tangents[0])
    return p


def test_a_rule_passing_its_tangent_through_keeps_it():
    from remat.core import Primitive
    from remat.interpreters import ad

    p = _passing_primitive_tangent(Primitive, ad)
    _, t = remat.jvp(p.bind, (1.0,), (2.0,))
    assert type(t) is float and t == 2.0


def test_a_rule_passing_its_tangent_through_keeps_it_as_the_oracle():
    import jax
    from jax.extend.core import Primitive
    from jax.interpreters import ad

    p = _passing_primitive_tangent(Primitive, ad)
    _, t = jax.jvp(p.bind, (1.0,), (2.0,))
    assert type(t) is float and t == 2.0
