"""The differential fuzzer in the suite (see ``fuzzing.py``): a fixed-seed slice of generated
programs, each checked with vs without its checkpoints, jit vs eager, and against JAX where it
is installed; and the programs it found wrong, shrunk, as regression cases.

Long campaigns: ``python tests/fuzz_campaign.py --cases 50000``.
"""

import contextlib
import importlib.util

import fuzzing
import pytest
from fuzzing import Program
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from remat.config import config

SLICE = settings(deadline=None, derandomize=True, database=None,
                 suppress_health_check=list(HealthCheck))


@contextlib.contextmanager
def float64():
    """x64 on in remat and, where it is installed, in JAX; both restored after."""
    try:
        import jax
    except ImportError:
        jax = None
    previous = jax.config.jax_enable_x64 if jax else None
    if jax:
        jax.config.update("jax_enable_x64", True)
    try:
        with config.override("jax_enable_x64", True):
            yield fuzzing.Namespace.jax() if jax else None
    finally:
        if jax:
            jax.config.update("jax_enable_x64", previous)


@pytest.fixture(scope="module")
def namespaces():
    with float64() as jax_ns:
        yield fuzzing.Namespace.remat(), jax_ns


@settings(SLICE, max_examples=300)
@given(st.data())
def test_checkpoints_and_jit_never_change_a_result(namespaces, data):
    program = fuzzing.draw_program(fuzzing.HypothesisChooser(data))
    fuzzing.check_program(program, namespaces[0])


@settings(SLICE, max_examples=150)
@given(st.data())
def test_remat_agrees_with_jax(namespaces, data):
    if namespaces[1] is None:
        pytest.skip("JAX is not installed")
    program = fuzzing.draw_program(fuzzing.HypothesisChooser(data))
    try:
        fuzzing.check_program(program, *namespaces)
    except fuzzing.Disagreement:
        raise
    except Exception:
        if fuzzing.jax_rejects(program, namespaces[1]):
            # drawn outside what JAX accepts (e.g. its checkpoint of a complex angle in a scan
            # under x64 raises in reduce_precision): nothing to compare (fuzz_campaign too)
            reject()
        raise


@settings(SLICE, max_examples=40)
@given(st.data())
def test_native_loops_agree_with_python_loops(namespaces, data):
    pytest.importorskip("numba")
    program = fuzzing.draw_program(fuzzing.HypothesisChooser(data))
    if fuzzing.has_loop(program):  # (about one program in three; each compiles its loops)
        fuzzing.check_native(program, namespaces[0])


# Programs the fuzzer found wrong, shrunk (each also checked against JAX where installed).
REGRESSIONS = [
    # a scan in a checkpoint saving everything, whose carry the body makes unknown (it closes
    # over a differentiated value): the known scan was still passed that carry
    Program(arg_shapes=((), (3,), (2, 3)), body=(
        ("op", "stack", (0, 0), None),
        ("op", "const", (), (3, 2)),
        ("scan", 1, 3, ("everything",), (
            ("scan", 5, 4, None, (("op", "sigmoid", (3,), None),), (9, 2)),), (5, 7))),
        outs=(6,), wrappers=(("vjp",), ("value_and_grad",)), seed=56591),
    # a Ref created in a cond branch, around a while loop whose int32 counter adds a weak
    # literal, all in a checkpoint (x64): discharging the branch re-bound the literal as a
    # Python int, int64 under x64 ('add requires arguments to have the same dtypes')
    Program(
        arg_shapes=((3,),),
        body=(
            (
                "cond",
                0,
                (0,),
                ((), (1,)),
                (
                    (
                        (
                            "cond",
                            0,
                            (0,),
                            ((), (1,)),
                            ((("op", "c_log_abs", (1,), None),), (2,)),
                        ),
                        (
                            "cond",
                            0,
                            (0,),
                            ((), (2,)),
                            (
                                (
                                    ("op", "pad", (0,), None),
                                    ("op", "div", (2, 3), None),
                                    ("op", "c_matmul", (3, 3), None),
                                ),
                                (4,),
                            ),
                        ),
                        (
                            "scan",
                            0,
                            2,
                            ("only", ("c",)),
                            (
                                ("op", "at_add", (1, 5), None),
                                ("op", "astype_same", (3,), None),
                                ("op", "at_add", (1, 5), None),
                            ),
                            (8, 5),
                        ),
                    ),
                    (1,),
                ),
            ),
            ("op", "name", (1,), "c"),
            ("op", "sub", (2, 1), None),
            (
                "cond",
                0,
                (3,),
                ((("op", "cos", (2,), None),), (2,)),
                ((("op", "stack", (4, 0), None), ("op", "abs", (1,), None)), (0,)),
            ),
            ("op", "sin", (4,), None),
            (
                "call",
                "jit",
                None,
                (3, 5, 5),
                (
                    (
                        "scan",
                        6,
                        8,
                        ("offload_names", ("b",), ("c",)),
                        (("op", "barrier", (2,), None),),
                        (3, 8),
                    ),
                ),
                (4,),
            ),
            ("op", "log1p_sq", (3,), None),
            ("op", "exp_tanh", (1,), None),
            ("op", "flip", (8,), None),
            ("op", "cumsum", (1,), None),
            ("op", "ref_accumulate", (1, 1), None),
        ),
        outs=(11, 1),
        wrappers=(("checkpoint", ("nothing",), True), ("fori",)),
        seed=11480,
    ),
]


@pytest.mark.parametrize("program", REGRESSIONS)
def test_fuzzer_regression(namespaces, program):
    fuzzing.check_program(program, *namespaces)


# Campaign seeds (``fuzz_campaign.py``) that failed, as drawn: each program is checked as the
# campaign checks it (against JAX too; its loops natively where numba is installed).
CAMPAIGN_REGRESSIONS = [
    60092,  # linearize through a checkpoint's split of a custom_remat (forward custom_lin)
    61072,  # a custom_remat's rules batched by a named vmap, run at transposition
    62293,  # a product written into a transposed dying buffer: a sum added in another order
    63605,  # value_and_grad of linearize's tangent map through a custom_remat split
    64431,  # jit(lambda: axis_index("i"))() with no operands in a named vmap
    67542,  # an integer constant's float0 cotangent in a checkpointed scan's transpose
    68729,  # a native kernel called with a read-only operand where it was compiled writable
    73034,  # vmap of linearize's tangent map through a custom_remat split (custom_lin batched)
    74341,  # a loop kernel's gather of slices laid out unlike the plans' concatenate (a sum
    #         over it and the next axis added in another order: 1 ulp)
]


@pytest.mark.parametrize("seed", CAMPAIGN_REGRESSIONS)
def test_campaign_regression(namespaces, seed):
    program = fuzzing.draw_program(fuzzing.RandomChooser(seed))
    fuzzing.check_program(program, *namespaces)
    if importlib.util.find_spec("numba") is not None and fuzzing.has_loop(program):
        fuzzing.check_native(program, namespaces[0])


def test_every_op_and_wrapper_is_generated(namespaces):
    """The generator reaches every op, statement kind and wrapper (a table entry that is never
    drawn is a feature the fuzzer does not exercise)."""
    ops, stmts, wrappers, calls, policies = set(), set(), set(), set(), set()
    named_vmaps = 0

    def walk(body):
        for stmt in body:
            stmts.add(stmt[0])
            if stmt[0] == "op":
                ops.add(stmt[1])
            elif stmt[0] in ("call", "scan"):
                if stmt[0] == "call":
                    calls.add((stmt[1], stmt[2] if stmt[1] == "custom_remat" else None))
                    if stmt[1] == "checkpoint":
                        policies.add(stmt[2][0][0])
                walk(stmt[4])
            else:
                for branch, _ in stmt[3:]:
                    walk(branch)

    for seed in range(400):
        program = fuzzing.draw_program(fuzzing.RandomChooser(seed))
        walk(program.body)
        wrappers.update(w[0] for w in program.wrappers)
        named_vmaps += any(w[0] == "vmap" and len(w) > 3 for w in program.wrappers)
    assert ops == set(fuzzing.OP_NAMES) | set(fuzzing.COLLECTIVE_OP_NAMES)
    assert named_vmaps >= 40  # collectives run inside a vmap naming their axis
    assert "budget" in policies
    assert stmts == {"op", "call", "scan", "cond"}
    assert calls == {("checkpoint", None), ("jit", None), ("custom_remat", "none"),
                     ("custom_remat", "outs"), ("custom_remat", "policy")}
    assert wrappers == set(fuzzing.WRAPPERS) | {"auto_remat"}
