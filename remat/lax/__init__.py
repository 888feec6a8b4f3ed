"""``remat.lax``: the primitives, each as a function and as its ``<name>_p`` object."""

from remat.lax.shape import *
from remat.lax.elementwise import *
from remat.lax.complex_parts import *
from remat.lax.identity import *
from remat.lax.reductions import *
from remat.lax.dot import *
from remat.lax.linalg import *
from remat.lax.fft import *
from remat.lax.convolution import *
from remat.lax.slicing import *
from remat.lax.gather_scatter_common import *
from remat.lax.gathers import *
from remat.lax.scatters import *
from remat.lax.sorting import *
from remat.lax.special_functions import *
from remat.lax.control_flow import *
from remat.lax.control_flow.checkpointed import (  # registers scan/while_loop(checkpoints=)
    checkpointed_scan_lin_p, checkpointed_scan_p, checkpointed_while_fwd_p,
    checkpointed_while_lin_p, checkpointed_while_p)
from remat.lax.windowed import *
from remat.lax.conv_local import *
from remat.lax.scans import *
from remat.lax.bits import *
from remat.lax.structure import *
from remat.lax.generic_reduce import *
from remat.lax.solvers import *
from remat.lax.tokens import *
from remat.lax.rng import *
from remat.lax.dot_types import *
from remat.lax.ragged import *
from remat.lax.process_collectives import *
from remat.lax.parallel import *
