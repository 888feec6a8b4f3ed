"""Core: the printer, source info, eval_jaxpr freeing, the extension API, tracer errors."""

import numpy as np
import pytest

import remat
from remat import core, lax, memory
from remat.errors import ConcretizationTypeError, UnexpectedTracerError
from remat.interpreters import ad, batching
from remat.test_util import check_grads

f32 = np.float32


def test_print_single_equation():
    jaxpr = remat.make_jaxpr(lax.sin)(np.ones(3, f32))
    assert str(jaxpr) == "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }"


def test_print_literal_and_two_equations():
    jaxpr = remat.make_jaxpr(lambda x: lax.mul(lax.sin(x), 2.0))(np.ones(3, f32))
    assert str(jaxpr) == ("{ lambda ; a:f32[3]. let b:f32[3] = sin a; "
                          "c:f32[3] = mul b 2.0:f32[] in (c,) }")


def test_print_multiline_with_params():
    def f(x):
        y = lax.broadcast_in_dim(x, (2, 3), (1,))
        return lax.add(lax.sin(y), lax.cos(y))

    assert str(remat.make_jaxpr(f)(np.ones(3, f32))) == (
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[2,3] = broadcast_in_dim[shape=(2, 3) broadcast_dimensions=(1,)] a\n"
        "    c:f32[2,3] = sin b\n"
        "    d:f32[2,3] = cos b\n"
        "    e:f32[2,3] = add c d\n"
        "  in (e,) }")


def test_print_constvars_and_nested_jit():
    c = remat.numpy.arange(3.0)

    def f(x):
        return remat.jit(lax.sin)(lax.mul(x, c))

    assert str(remat.make_jaxpr(f)(np.ones(3, f32))) == (
        "{ lambda a:f32[3]; b:f32[3]. let\n"
        "    c:f32[3] = mul b a\n"
        "    d:f32[3] = jit[\n"
        "      name=sin\n"
        "      jaxpr={ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }\n"
        "    ] c\n"
        "  in (d,) }")


def test_equations_record_user_source_line():
    def f(x):
        return lax.sin(x)  # the line recorded

    jaxpr = remat.make_jaxpr(f)(f32(1))
    info = jaxpr.eqns[0].source_info
    assert info.file == __file__
    assert info.function == "f"
    with open(__file__) as fh:
        assert "the line recorded" in fh.readlines()[info.line - 1]


def test_eval_jaxpr_frees_intermediates_after_last_use():
    n = 1 << 18  # 1 MiB of float32 per array

    def chain(x):
        for _ in range(8):
            x = lax.sin(x)
        return x

    x = remat.numpy.ones(n, dtype="float32")
    closed = remat.make_jaxpr(chain)(x)
    start = memory.reset_peak()
    out = core.eval_jaxpr(closed.jaxpr, closed.consts, x)[0]
    # at most the input (held by the caller), one live intermediate and the one being made
    assert memory.peak_bytes() - start <= 2 * 4 * n
    del out


def test_non_array_argument_names_its_path():
    with pytest.raises(TypeError, match=r"Argument 'x\[1\]' of type <class 'str'>"):
        remat.make_jaxpr(lambda x: x[0])((f32(1), "a"))


def test_shape_mismatch_names_primitive_shapes_and_line():
    with pytest.raises(TypeError, match=r"add got incompatible shapes.*\(3,\), \(4,\)") as e:
        remat.make_jaxpr(lambda x, y: lax.add(x, y))(np.ones(3, f32), np.ones(4, f32))
    assert any("test_core.py" in note for note in getattr(e.value, "__notes__", []))


def test_dtype_mismatch_error():
    with pytest.raises(TypeError, match="add requires arguments to have the same dtypes"):
        lax.add(np.ones(3, f32), np.ones(3, np.int32))


def test_concretization_error_names_function_and_argument():
    def f(x, flag):
        return x if flag > 0 else -x

    with pytest.raises(ConcretizationTypeError, match="depends on the value of the argument flag"):
        remat.jit(f)(f32(1), f32(2))


def test_python_control_flow_on_concrete_values_under_grad():
    f = lambda x: lax.sin(x) if x > 0 else lax.cos(x)
    assert np.isclose(remat.grad(f)(f32(0.5)), np.cos(0.5))
    assert np.isclose(remat.grad(f)(f32(-0.5)), -np.sin(-0.5))


def test_leaked_tracer_raises_unexpected_tracer_error():
    leaked = []

    def f(x):
        leaked.append(x)
        return x

    remat.jit(f)(f32(1))
    with pytest.raises(UnexpectedTracerError):
        lax.sin(leaked[0])


def test_ensure_compile_time_eval_inside_jit():
    seen = []

    def f(x):
        with remat.ensure_compile_time_eval():
            c = lax.sin(f32(0.5))
            seen.append(type(c).__name__)
        return lax.mul(x, c)

    out = remat.jit(f)(f32(2))
    assert seen == ["Array"]
    assert np.isclose(out, 2 * np.sin(0.5))


def _define_cube():
    """A user primitive defined through the extension API only."""
    cube_p = core.Primitive("cube")
    cube_p.def_impl(lambda x: x * x * x)
    cube_p.def_abstract_eval(lambda aval: aval)
    ad.defjvp(cube_p, lambda g, x: lax.mul(g, lax.mul(3.0, lax.square(x))))
    batching.defvectorized(cube_p)
    return cube_p


def test_extension_api_primitive_under_every_transformation():
    cube_p = _define_cube()
    cube = cube_p.bind
    x = np.array([0.5, -1.0, 2.0], f32)
    np.testing.assert_allclose(cube(x), x ** 3)
    assert "cube" in str(remat.make_jaxpr(cube)(x))
    np.testing.assert_allclose(remat.jit(cube)(x), x ** 3)
    np.testing.assert_allclose(remat.vmap(remat.grad(cube))(x), 3 * x ** 2, rtol=1e-6)
    check_grads(cube, (x,), order=2)


def test_impl_override_counts_evaluations():
    cube_p = _define_cube()
    calls = []
    impl = cube_p.impl
    cube_p.def_impl(lambda x: (calls.append(1), impl(x))[1])
    remat.jit(cube_p.bind)(f32(2))
    remat.jit(cube_p.bind)(f32(3))
    assert len(calls) == 2  # the executor calls prim.impl (overrides are honoured)


def test_missing_rules_raise_clear_errors():
    p = core.Primitive("opaque")
    p.def_impl(lambda x: x)
    p.def_abstract_eval(lambda a: a)
    with pytest.raises(NotImplementedError, match="Differentiation rule for 'opaque'"):
        remat.grad(p.bind)(f32(1))
    with pytest.raises(NotImplementedError, match="Batching rule for 'opaque'"):
        remat.vmap(p.bind)(np.ones(2, f32))


def test_shaped_array_str_and_equality():
    a = core.ShapedArray((2, 3), np.float32)
    assert str(a) == "f32[2,3]"
    assert a == core.ShapedArray((2, 3), np.float32)
    assert a != core.ShapedArray((2, 3), np.float32, weak_type=True)
    assert core.ShapedArray((), np.int32).to_tangent_aval().dtype == remat.dtypes.float0
