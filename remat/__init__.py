"""remat: composable function transformations on NumPy, built around rematerialization."""

from remat import config as _config_module
from remat import core, dtypes, lax, memory, numpy, tree_util
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
from remat.array import Array
from remat.call import jit
from remat.custom_derivatives import custom_jvp, custom_vjp
from remat.config import config
from remat.core import ensure_compile_time_eval

__version__ = "0.1.0"
