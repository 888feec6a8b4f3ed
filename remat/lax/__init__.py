"""``remat.lax``: the primitives, each as a function and as its ``<name>_p`` object."""

from remat.lax.shape import *
from remat.lax.elementwise import *
from remat.lax.identity import *
from remat.lax.reductions import *
from remat.lax.linalg import *
from remat.lax.convolution import *
from remat.lax.slicing import *
from remat.lax.sorting import *
from remat.lax.control_flow import *
