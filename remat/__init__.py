"""remat: composable function transformations on NumPy, built around rematerialization."""
# ruff: noqa: I001  (import order matters: the Array type registers itself with the core)

from remat.config import config
from remat import core, dtypes, tree_util
from remat.array import Array, live_arrays
from remat import lax
from remat import memory, numpy
from remat.transforms.api import (
    block_until_ready,
    device_get,
    device_put,
    disable_jit,
    eval_shape,
    grad,
    hessian,
    jacfwd,
    jacrev,
    jvp,
    linearize,
    make_jaxpr,
    value_and_grad,
    vjp,
    vmap,
)
from remat.api_util import ShapeDtypeStruct
from remat.transforms.jit import jit
from remat.core import ensure_compile_time_eval
from remat.custom_derivatives import closure_convert, custom_gradient, custom_jvp, custom_vjp
from remat import custom_batching, custom_derivatives
from remat.checkpointing.custom_remat import custom_remat
from remat import ad_checkpoint, checkpoint_policies
from remat.transforms.callback import io_callback, pure_callback
from remat import nn, random
from remat.ad_checkpoint import checkpoint, remat
from remat.checkpointing.auto_remat import auto_remat
from remat import debug, scipy, tree, stages, version
from remat import experimental, sharding, typing  # as `import jax` does
from remat.devices import Device
from remat.version import __version__
from remat.transforms.api import jacrev as jacobian
from remat.transforms.jit import clear_caches
from remat.core import get_aval as typeof
from remat.dtypes import float0
from remat.devices import (
    copy_to_host_async,
    default_backend,
    device_count,
    devices,
    effects_barrier,
    host_count,
    host_id,
    host_ids,
    local_device_count,
    local_devices,
    print_environment_info,
    process_count,
    process_index,
    process_indices,
)
from remat.source_info import name_scope as named_scope
from remat.transforms.api import named_call
from remat.transforms.transposition import linear_transpose
from remat.config import (
    allow_f16_reductions,
    array_garbage_collection_guard,
    check_tracer_leaks,
    checking_leaks,
    debug_infs,
    debug_key_reuse,
    debug_nans,
    default_device,
    default_matmul_precision,
    default_prng_impl,
    enable_checks,
    enable_custom_prng,
    enable_x64,
    explain_cache_misses,
    jax2tf_associative_scan_reductions,
    legacy_prng_key,
    log_compiles,
    make_user_context,
    no_execution,
    no_tracing,
    numpy_dtype_promotion,
    numpy_rank_promotion,
    softmax_custom_jvp,
    thread_guard,
    threefry_partitionable,
    transfer_guard,
    transfer_guard_device_to_device,
    transfer_guard_device_to_host,
    transfer_guard_host_to_device,
)
from remat import ref
from remat.ref import Ref, empty_ref, free_ref, freeze, new_ref
from remat.transforms.api import fwd_and_bwd
from remat import distributed
from remat.transforms.pmap import pmap
from remat.transforms.shard_map import shard_map
from remat.sharding import make_mesh
