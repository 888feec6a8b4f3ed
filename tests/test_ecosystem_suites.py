"""optax's and chex's own tests, a fixed slice of them, run unchanged on remat through the plugin
of ``benchmarks/ecosystem_suites.py``: each test of the slice must pass. Then the runner's
own mechanics on a made-up suite: a test past its alarm, one that kills its process and one
stuck where the alarm cannot reach fail as such, and the run goes on after each."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))

import ecosystem_suites  # noqa: E402
from ecosystem_suites import Suite, group_causes, normalize_cause, run_backend  # noqa: E402

# --- the slice: test ids relative to site-packages; each passes on JAX and on remat ------------

OPTAX_SLICE = [
    # optimizers: adam, adamw and sgd (with momentum) under every check alias_test runs on
    # each optimizer, but the 10^4-step convergence runs (seconds each)
    *(f"optax/_src/alias_test.py::AliasTest::{test}" for test in (
        "test_optimizers_accept_extra_args6",  # adam
        "test_optimizers_accept_extra_args9",  # adamw
        "test_optimizers_accept_extra_args28",  # sgd
        "test_optimizers_can_be_wrapped_in_inject_hyperparams6",
        "test_optimizers_can_be_wrapped_in_inject_hyperparams9",
        "test_optimizers_can_be_wrapped_in_inject_hyperparams28",
        "test_preserve_dtype12",  # adam, bfloat16
        "test_preserve_dtype13",  # adam, float32
        "test_preserve_dtype19",  # adamw, float32
        "test_preserve_dtype57",  # sgd, float32
        "test_gradient_accumulation13",  # adam, float32
        "test_gradient_accumulation19",  # adamw, float32
        "test_gradient_accumulation57",  # sgd, float32
        "test_state_shape_dtype_shard_stability38",  # adam, float32
        "test_state_shape_dtype_shard_stability56",  # adamw, float32
        "test_state_shape_dtype_shard_stability170",  # sgd, float32
    )),
    "optax/_src/alias_test.py::LBFGSTest::test_preconditioning_by_lbfgs_on_vectors0",
    # schedules, and injecting them as hyperparameters
    *(f"optax/schedules/_schedule_test.py::{test}" for test in (
        "ConstantTest::test_constant",
        "PolynomialTest::test_nonlinear",
        "PiecewiseConstantTest::test_positive",
        "ExponentialTest::test_exponential1",
        "CosineDecayTest::test_decay_count_smaller_count",
        "WarmupCosineDecayTest::test_with_exponent",
        "SGDRTest::test_limits_with step decay",
        "PiecewiseInterpolateTest::test_cos_piecewise",
        "OneCycleTest::test_cosine",
        "ScheduleAsLearningRateTest::test_optimization0",
    )),
    "optax/schedules/_inject_test.py::InjectHyperparamsTest::test_updates",
    "optax/schedules/_inject_test.py::InjectHyperparamsTest::test_hyperparams_state",
    "optax/schedules/_join_test.py::JoinTest::test_join_schedules",
    # transforms, their combinations, applying updates
    *(f"optax/_src/transform_test.py::TransformTest::{test}" for test in (
        "test_scalers_adam", "test_rms_match_adam", "test_scale", "test_apply_every",
        "test_centralize_2d")),
    *(f"optax/transforms/_clipping_test.py::ClippingTest::{test}" for test in (
        "test_clip", "test_clip_by_global_norm", "test_adaptive_grad_clip")),
    "optax/_src/combine_test.py::ComposeTest::test_chain",
    "optax/_src/combine_test.py::NamedChainTest::test_named_chain",
    "optax/_src/combine_test.py::PartitionTest::test_partition0",
    "optax/_src/update_test.py::UpdateTest::test_apply_updates",
    "optax/_src/update_test.py::UpdateTest::test_incremental_update",
    "optax/_src/update_test.py::UpdateTest::test_periodic_update",
    # losses
    *(f"optax/losses/_classification_test.py::{test}" for test in (
        "SoftmaxCrossEntropyTest::test_batched",
        "SoftmaxCrossEntropyTest::test_gradient",
        "SoftmaxCrossEntropyWithIntegerLabelsTest::"
        "test_consistent_with_softmax_cross_entropy_batched",
        "SigmoidCrossEntropyTest::test_sigmoid_cross_entropy0",
        "HingeTest::test_multi_class",
        "KLDivergenceTest::test_batched",
        "CTCTest::test_with_one_to_one_alignment",
        "SigmoidFocalLossTest::test_focal_equals_ce",
    )),
    *(f"optax/losses/_regression_test.py::{test}" for test in (
        "SquaredErrorTest::test_batched", "L2LossTest::test_scalar", "HuberLossTest::test_batched",
        "LogCoshTest::test_batched", "CosineDistanceTest::test_batched_distance")),
]

CHEX_SLICE = [
    # assertions, on arrays and on trees
    *(f"chex/_src/asserts_test.py::{test}" for test in (
        "ScalarAssertTest::test_scalar_positive",
        "ShapeAssertTest::test_shape_should_pass_matrices_variable_shape",
        "ShapeAssertTest::test_shape_should_fail_wrong_rank",
        "ShapeAssertTest::test_ellipsis_should_pass_inner_1",
        "RankAssertTest::test_rank_should_pass_multiple_options_seq_options_1",
        "RankAssertTest::test_rank_should_fail_single_rank_2",
        "EqualShapeAssertTest::test_equal_shape_at_dims_should_pass_first_and_last",
        "BroadcastAssertTest::test_shapes_are_broadcastable1",
        "AxisDimensionAssertionsTest::test_assert_axis_dimension_gt_pass",
        "EqualAssertionsTest::test_assert_equal_pass_on_arrays",
        "EqualAssertionsTest::test_assert_equal_fail_dtypes",
        "TreeAssertionsTest::test_assert_trees_all_close_passes_values_close_but_not_equal",
        "TreeAssertionsTest::test_assert_trees_all_close_fails_values_differ",
        "TreeAssertionsTest::test_assert_trees_all_close_ulp_passes_values_within_maxulp",
        "TreeAssertionsTest::test_assert_trees_all_equal_shapes_and_dtypes",
        "TreeAssertionsTest::test_assert_trees_all_equal_prng_keys",
        "TreeAssertionsTest::test_tree_all_finite_should_fail_inf",
        "TreeAssertionsTest::test_assert_tree_shape_prefix_matrices",
        "TreeAssertionsTest::test_assert_tree_no_nones",
        "TreeAssertionsTest::test_assert_tree_is_on_device",
        "NumericalGradsAssertTest::test_easy0",
        "AssertMaxTracesTest::test_nested_functions",
        "DevicesAssertTest::test_cpu_assert",
    )),
    # variants: chex's with_device/without_device, chexify without jit
    *(f"chex/_src/asserts_test.py::TypeAssertTest::{test}" for test in (
        "test_type_should_pass_array_one_float_array__with_device",
        "test_type_should_pass_array_one_float_array__without_device",
        "test_type_should_fail_array_int8_array__with_device",
        "test_type_should_fail_array_int8_array__without_device",
        "test_type_should_pass_mixed",
    )),
    # chexify: value assertions inside jit, through checkify
    *(f"chex/_src/asserts_chexify_test.py::{test}" for test in (
        "AssertsChexifyTest::test_static_assertion__without_jit",
        "AssertsChexifyTest::test_checkify_errors",
        "AssertsChexifyTest::test_docstring_example",
        "AssertsChexifyTestSuite::test_log_abs_fn_jitted_main",
        "AssertsChexifyTestSuite::test_log_abs_fn_jitted_vmapped_main",
        "AssertsLibraryTest::test_assert_trees_all_close",
    )),
    # chex.dataclass: a pytree, mappable, frozen or not
    *(f"chex/_src/dataclass_test.py::DataclassesTest::{test}" for test in (
        "test_dataclass_tree_leaves0", "test_dataclass_tree_map0", "test_flatten_is_leaf0",
        "test_flatten_roundtrip_ordering0", "test_frozen_dataclass_raise_error",
        "test_inheritance_mutable", "test_roundtrip_serialization0", "test_tree_map_with_keys",
        "test_keys_and_values_override0")),
    "chex/_src/dataclass_test.py::MappableDataclassTest::testIsDataclass_chex",
    # named dimensions
    "chex/_src/dimensions_test.py::DimensionsTest::test_docstring_examples",
    "chex/_src/dimensions_test.py::DimensionsTest::test_flatten_ok_mid",
    "chex/_src/dimensions_test.py::DimensionsTest::test_set_ok_numpy_array",
    "chex/_src/asserts_internal_test.py::JitCompatibleTest::test_api",
    # jit variants (jit's device and backend options), fake pmap (keyword arguments, a
    # jitted function's signature), the device count set through jax._src.xla_bridge
    "chex/_src/asserts_test.py::AssertMaxTracesTest::"
    "test_assert_type1_args_with_static_arg_max_traces_1__with_jit",
    "chex/_src/fake_test.py::PmapFakeTest::test_fake_parallel_axis",
    "chex/_src/fake_test.py::PmapFakeTest::test_with_kwargs_fake_pmap",
    "chex/_src/variants_test.py::ParamsProductTest::test_product",
    "chex/_src/asserts_chexify_test.py::AssertsLibraryTest::"
    "test_assert_trees_all_equal_with_prng_keys",
]

SLICES = {"optax": OPTAX_SLICE, "chex": CHEX_SLICE}
CASES = [(lib, test_id) for lib, ids in SLICES.items() for test_id in ids]


@pytest.fixture(scope="module")
def remat_run(tmp_path_factory):
    """One pytest process per library, on remat, running its whole slice."""
    runs = {}

    def run(lib):
        if lib not in runs:
            work_dir = str(tmp_path_factory.mktemp(lib))
            suite = Suite(lib, None, work_dir)
            outcomes, _, errors = run_backend(suite, "remat", work_dir, targets=SLICES[lib],
                                              timeout=120)
            runs[lib] = outcomes, errors
        return runs[lib]

    return run


@pytest.mark.parametrize("lib,test_id", CASES, ids=[test_id for _, test_id in CASES])
def test_library_test_passes_on_remat(remat_run, lib, test_id):
    outcomes, errors = remat_run(lib)
    assert test_id in outcomes, f"{test_id} did not run; test files that did not import: {errors}"
    assert outcomes[test_id].status == "passed", outcomes[test_id]


# --- the runner's mechanics ----------------------------------------------------------------------

MADE_UP_SUITE = """
import os
import signal
import time


def test_first():
    pass


def test_past_its_alarm():
    time.sleep(30)


def test_killing_its_process():
    os.kill(os.getpid(), signal.SIGKILL)


def test_stuck_where_the_alarm_cannot_reach():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    time.sleep(30)


def test_last():
    total = 2
    assert total == 3
"""


def test_runner_records_timeouts_crashes_and_hangs_and_goes_on(tmp_path, monkeypatch):
    (tmp_path / "suite" / "tests").mkdir(parents=True)
    (tmp_path / "suite" / "tests" / "test_made_up.py").write_text(MADE_UP_SUITE)
    monkeypatch.setattr(ecosystem_suites, "WATCHDOG_GRACE_S", 3)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # a start in seconds, not tens
    suite = Suite("made_up", str(tmp_path / "suite"), str(tmp_path))
    outcomes, collected, errors = run_backend(suite, "jax", str(tmp_path), timeout=2)
    name = "tests/test_made_up.py::test_"
    assert collected == [name + t for t in ("first", "past_its_alarm", "killing_its_process",
                                            "stuck_where_the_alarm_cannot_reach", "last")]
    assert errors == {}
    assert outcomes[name + "first"].status == "passed"
    assert outcomes[name + "past_its_alarm"].message == (
        "ecosystem_plugin.TestTimeout: test phase ran over 2 s")
    assert outcomes[name + "killing_its_process"].message == (
        "Crash: test process died (signal SIGKILL)")
    assert outcomes[name + "stuck_where_the_alarm_cannot_reach"].message == (
        "Hang: no progress for 5 s, test process killed")
    assert outcomes[name + "last"].message == "AssertionError: assert 2 == 3"
    assert {o.status for t, o in outcomes.items() if not t.endswith("first")} == {"failed"}


def test_causes_group_by_type_and_first_line_without_numbers():
    assert normalize_cause("jax._src.errors.TracerBoolConversionError: Attempted boolean "
                           "conversion of f32[3,4] at 0x7f00ab12\nmore") == (
        "TracerBoolConversionError: Attempted boolean conversion of f32[N,N] at 0x…")
    assert normalize_cause("ecosystem_plugin.TestTimeout: test phase ran over 2.5 s") == (
        "TestTimeout: test phase ran over N s")
    assert normalize_cause("AssertionError: float32 != int8") == (
        "AssertionError: float32 != int8")
    failed = ecosystem_suites.Outcome
    causes = group_causes([
        failed("failed", "TypeError: bad shape (3,)", "x = f(y)"),
        failed("failed", "TypeError: bad shape (4,)", "x = f(y)"),
        failed("failed", "AttributeError: 'Lowered' object has no attribute 'as_text'", "t()"),
        failed("failed", "AssertionError: 1 != 2", "self.assertIn('fusion', lowered.as_text())"),
        failed("failed", "AttributeError: module 'remat._src' has no attribute 'xla_bridge'", ""),
        failed("failed", "ValueError: x", "jax._src.interpreters.mlir.lower_fun(f)"),
        failed("failed", "ModuleNotFoundError: No module named 'jax._src.state'", "", True),
    ])
    assert causes == [
        [2, "TypeError: bad shape (N,)"],
        [1, "AssertionError: N != N [touches XLA lowering/HLO]"],
        [1, "AttributeError: 'Lowered' object has no attribute 'as_text' "
            "[touches XLA lowering/HLO]"],
        [1, "AttributeError: module 'remat._src' has no attribute 'xla_bridge' "
            "[touches devices/sharding]"],
        [1, "ModuleNotFoundError: No module named 'jax._src.state' (while importing the test "
            "file) [touches jax._src]"],
        [1, "ValueError: x [touches XLA lowering/HLO]"],
    ]


def test_runner_help_names_where_fetched_suites_come_from():
    assert "--tests-dir" in ecosystem_suites.__doc__
    for lib in ("flax", "equinox", "diffrax"):
        assert lib in ecosystem_suites.__doc__
    with pytest.raises(SystemExit, match="fetch them"):
        Suite("equinox", None, os.getcwd())
