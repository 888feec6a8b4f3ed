"""remat: composable function transformations on NumPy, built around rematerialization."""

from remat import config as _config_module
from remat import core, dtypes, lax, memory, numpy, tree_util
from remat.api import eval_shape, make_jaxpr
from remat.api_util import ShapeDtypeStruct
from remat.array import Array
from remat.config import config
from remat.core import ensure_compile_time_eval

__version__ = "0.1.0"
