"""The special-function primitives of ``jax.lax`` that are not plain arithmetic: incomplete
gamma and beta functions, Hurwitz zeta and the scaled Bessel functions, each with its impl
(a kernel of ``remat.lax.special``), abstract eval (float operands of one dtype; rank-0
operands broadcast), JVP rules as JAX defines them, and an elementwise batching rule.

``erf``, ``erfc``, ``erf_inv``, ``lgamma``, ``digamma`` and ``polygamma`` live with the other
unary primitives in ``remat.lax.elementwise`` (on kernels of the same module).
"""

import numpy as np

from remat import core, dtypes
from remat.interpreters import ad, batching
from remat.lax import elementwise, special
from remat.lax.elementwise import (
    add,
    digamma,
    div,
    exp,
    gt,
    lgamma,
    log,
    log1p,
    mul,
    neg,
    select,
    sign,
    sub,
)
from remat.lax.shape import broadcast_in_dim, full_like
from remat.lax.standard import (
    FLOAT,
    as_operands,
    broadcasting_shape,
    nary_abstract_eval,
    standard_primitive,
)

__all__ = [
    "bessel_i0e",
    "bessel_i0e_p",
    "bessel_i1e",
    "bessel_i1e_p",
    "betainc",
    "igamma",
    "igamma_grad_a",
    "igamma_grad_a_p",
    "igamma_p",
    "igammac",
    "igammac_p",
    "random_gamma_grad",
    "regularized_incomplete_beta_p",
    "zeta",
    "zeta_p",
]


def elementwise_primitive(name, impl, nargs, accepted=FLOAT):
    """An elementwise primitive on operands of one dtype (class ``accepted``) whose shapes
    are equal or rank 0, batched elementwise."""
    prim = standard_primitive(name, impl, nary_abstract_eval(name, accepted))
    if nargs == 1:
        batching.defvectorized(prim)
    else:
        batching.broadcast_batcher(prim)
    return prim


def defjvp_elementwise(prim, *rules, with_output=False):
    """``ad.defjvp`` (``ad.defjvp2`` with ``with_output``) whose contributions are broadcast
    to the output shape, since a rank-0 operand broadcasts against the others."""

    def wrap(rule):
        if rule is None:
            return None

        def broadcast_rule(g, *args, **params):
            primals = args[1:] if with_output else args
            shape = broadcasting_shape(prim.name, [core.get_aval(p) for p in primals])
            t = rule(g, *args, **params)
            if core.get_aval(t).shape != shape:
                t = broadcast_in_dim(t, shape, ())
            return t

        return broadcast_rule

    (ad.defjvp2 if with_output else ad.defjvp)(prim, *(wrap(r) for r in rules))


def _bind(prim, *args):
    return prim.bind(*as_operands(prim.name, *args))


# --- incomplete gamma -----------------------------------------------------------------------

igamma_p = elementwise_primitive("igamma", special.igamma, 2)
igammac_p = elementwise_primitive("igammac", special.igammac, 2)
igamma_grad_a_p = elementwise_primitive("igamma_grad_a", special.igamma_grad_a, 2)
random_gamma_grad_p = elementwise_primitive("random_gamma_grad", special.random_gamma_grad, 2)


def igamma(a, x):
    """Regularized lower incomplete gamma function ``P(a, x)``."""
    return _bind(igamma_p, a, x)


def igammac(a, x):
    """Regularized upper incomplete gamma function ``Q(a, x) = 1 - P(a, x)``."""
    return _bind(igammac_p, a, x)


def igamma_grad_a(a, x):
    """``d/da P(a, x)``."""
    return _bind(igamma_grad_a_p, a, x)


def random_gamma_grad(a, x):
    """The derivative ``dx/da`` of a sample ``x`` of ``Gamma(a, 1)`` (reparameterization).
    Operands broadcast against each other as in JAX: each one's dimensions are the leading
    dimensions of the result."""
    a, x = as_operands("random_gamma_grad", a, x)
    shape = np.broadcast_shapes(core.get_aval(a).shape, core.get_aval(x).shape)
    a, x = (v if core.get_aval(v).shape == shape else
            broadcast_in_dim(v, shape, tuple(range(core.get_aval(v).ndim))) for v in (a, x))
    return random_gamma_grad_p.bind(a, x)


def _igamma_density(a, x):
    """``dP/dx = x^(a-1) exp(-x) / Gamma(a)``, through logarithms."""
    one = full_like(a, 1)
    return exp(sub(mul(sub(a, one), log(x)), add(x, lgamma(a))))


defjvp_elementwise(igamma_p, lambda g, a, x: mul(g, igamma_grad_a(a, x)),
                   lambda g, a, x: mul(g, _igamma_density(a, x)))
defjvp_elementwise(igammac_p, lambda g, a, x: neg(mul(g, igamma_grad_a(a, x))),
                   lambda g, a, x: neg(mul(g, _igamma_density(a, x))))


def _random_gamma_grad_da(g, ans, a, x):
    raise ValueError("random_gamma_grad gradient with respect to a is not supported.")


def _random_gamma_grad_dx(g, ans, a, x):
    """r = -P_a / P_x, so dr/dx = psi(a) - log x - r ((a - 1) / x - 1)."""
    one = full_like(a, 1)
    slope = sub(div(sub(a, one), x), one)
    return mul(g, sub(sub(digamma(a), log(x)), mul(ans, slope)))


defjvp_elementwise(random_gamma_grad_p, _random_gamma_grad_da, _random_gamma_grad_dx,
                   with_output=True)


# --- incomplete beta ----------------------------------------------------------------------

regularized_incomplete_beta_p = elementwise_primitive("regularized_incomplete_beta",
                                                      special.betainc, 3)


def betainc(a, b, x):
    """Regularized incomplete beta function ``I_x(a, b)``."""
    return _bind(regularized_incomplete_beta_p, a, b, x)


def _betainc_grad_not_supported(g, a, b, x):
    raise ValueError("Betainc gradient with respect to a and b not supported.")


def _betainc_dx(g, a, b, x):
    """``x^(a-1) (1-x)^(b-1) / B(a, b)``."""
    one = full_like(x, 1)
    lbeta = sub(add(lgamma(a), lgamma(b)), lgamma(add(a, b)))
    log_density = add(mul(sub(b, one), log1p(neg(x))),
                          mul(sub(a, one), log(x)))
    return mul(exp(sub(log_density, lbeta)), g)


defjvp_elementwise(regularized_incomplete_beta_p, _betainc_grad_not_supported,
                   _betainc_grad_not_supported, _betainc_dx)


# --- Hurwitz zeta ---------------------------------------------------------------------------

# No JVP rule, as in JAX: ``remat.scipy.special.zeta`` differentiates a series instead.
zeta_p = elementwise_primitive("zeta", special.zeta, 2)


def zeta(x, q):
    """Hurwitz zeta function ``sum_k (q + k)^-x``."""
    return _bind(zeta_p, x, q)


# --- exponentially scaled Bessel functions ------------------------------------------------

bessel_i0e_p = elementwise_primitive("bessel_i0e", special.bessel_i0e, 1)
bessel_i1e_p = elementwise_primitive("bessel_i1e", special.bessel_i1e, 1)


def bessel_i0e(x):
    """``exp(-|x|) I0(x)``."""
    return bessel_i0e_p.bind(x)


def bessel_i1e(x):
    """``exp(-|x|) I1(x)``."""
    return bessel_i1e_p.bind(x)


def _bessel_i0e_jvp(g, y, x):
    return mul(g, sub(bessel_i1e(x), mul(sign(x), y)))


def _bessel_i1e_jvp(g, y, x):
    """``i0e(x) - y (sign(x) + 1/x)``, with its limit 1/2 at |x| <= eps."""
    eps = full_like(x, dtypes.finfo(core.get_aval(x).dtype).eps)
    not_tiny = gt(elementwise.abs(x), eps)
    safe_x = select(not_tiny, x, eps)
    dy_dx = sub(bessel_i0e(safe_x),
                    mul(y, add(sign(safe_x), div(full_like(x, 1), safe_x))))
    return mul(g, select(not_tiny, dy_dx, full_like(x, 0.5)))


defjvp_elementwise(bessel_i0e_p, _bessel_i0e_jvp, with_output=True)
defjvp_elementwise(bessel_i1e_p, _bessel_i1e_jvp, with_output=True)
