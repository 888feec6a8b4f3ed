"""remat: composable function transformations on NumPy, built around rematerialization."""
# ruff: noqa: I001  (import order matters: the Array type registers itself with the core)

from remat.config import config
from remat import core, dtypes, tree_util, memory
from remat.array import Array
from remat import lax
from remat import numpy
from remat.api import (
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
from remat.call import jit
from remat.core import ensure_compile_time_eval
from remat.custom_derivatives import custom_jvp, custom_vjp
from remat import ad_checkpoint
from remat.callback import io_callback
from remat import nn, random
from remat.ad_checkpoint import checkpoint, checkpoint_policies, remat

__version__ = "0.1.0"
