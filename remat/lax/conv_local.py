"""Patch extraction and unshared ("locally connected") convolution, written as JAX writes
them: ``conv_general_dilated_patches`` is a grouped convolution with a one-hot kernel (so its
derivatives are the convolution's), and ``conv_general_dilated_local`` contracts those patches
with a kernel that has one filter per output position (``dot_general`` with the output's
spatial dims as batch dims)."""

import math

from remat import core, dtypes
from remat.lax.convolution import conv_dimension_numbers, conv_general_dilated
from remat.lax.dot import Precision, canonicalize_precision, dot_general
from remat.lax.elementwise import convert_element_type, eq
from remat.lax.shape import broadcast_in_dim, broadcasted_iota, reshape, transpose

__all__ = ["conv_general_dilated_local", "conv_general_dilated_patches"]


def _moveaxes(x, src, dst):
    """``np.moveaxis(x, src, dst)`` for tuples of axes, as a transpose."""
    ndim = core.get_aval(x).ndim
    order = [i for i in range(ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, tuple(order))


def conv_general_dilated_patches(lhs, filter_shape, window_strides, padding, lhs_dilation=None,
                                 rhs_dilation=None, dimension_numbers=None, precision=None,
                                 preferred_element_type=None):
    """The patches a convolution with ``filter_shape`` windows would see, flattened into the
    output's feature dim in the order ``c`` then the spatial dims of the rhs spec (size
    ``prod(filter_shape) * channels``)."""
    filter_shape = tuple(int(d) for d in filter_shape)
    lhs_shape = core.get_aval(lhs).shape
    dtype = core.get_aval(lhs).dtype
    dnums = conv_dimension_numbers(lhs_shape, (1, 1) + filter_shape, dimension_numbers)
    lhs_spec, rhs_spec, _ = dnums
    spatial = math.prod(filter_shape)
    channels = lhs_shape[lhs_spec[1]]
    eye = convert_element_type(
        eq(broadcasted_iota(dtypes.int32, (spatial, spatial), 0),
               broadcasted_iota(dtypes.int32, (spatial, spatial), 1)), dtype)
    rhs = broadcast_in_dim(eye, (channels, spatial, spatial), (1, 2))
    rhs = reshape(rhs, (channels * spatial, 1) + filter_shape)
    rhs = _moveaxes(rhs, (0, 1), (rhs_spec[0], rhs_spec[1]))
    if precision is not None:
        lhs_precision = canonicalize_precision(precision)[0]
        precision = (lhs_precision, Precision.DEFAULT)
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                rhs_dilation=rhs_dilation, dimension_numbers=dnums,
                                precision=precision, feature_group_count=channels,
                                preferred_element_type=preferred_element_type)


def conv_general_dilated_local(lhs, rhs, window_strides, padding, filter_shape,
                               lhs_dilation=None, rhs_dilation=None, dimension_numbers=None,
                               precision=None):
    """Unshared convolution: output position ``p`` uses its own filter ``rhs[..., p, ...]``,
    whose in-feature dim holds the flattened ``(channel, *filter_shape)`` patch."""
    lhs_precision = None
    if precision is not None:
        canonical = canonicalize_precision(precision)
        if not (isinstance(canonical, tuple) and len(canonical) == 2):
            raise ValueError(f"Unsupported precision for conv_general_dilated_local: "
                             f"{precision}")
        lhs_precision = canonical[0]
    patches = conv_general_dilated_patches(lhs, filter_shape, window_strides, padding,
                                           lhs_dilation=lhs_dilation,
                                           rhs_dilation=rhs_dilation,
                                           dimension_numbers=dimension_numbers,
                                           precision=lhs_precision)
    lhs_shape = core.get_aval(lhs).shape
    _, rhs_spec, out_spec = conv_dimension_numbers(lhs_shape, (1, 1) + tuple(filter_shape),
                                                   dimension_numbers)
    out_spatial = list(out_spec[2:])
    rhs_spatial = list(rhs_spec[2:])
    rhs_batch = [rhs_spatial[i] for i in sorted(range(len(rhs_spatial)),
                                                key=lambda k: out_spatial[k])]
    dn = (([out_spec[1]], [rhs_spec[1]]), (sorted(out_spatial), rhs_batch))
    out = dot_general(patches, rhs, dimension_numbers=dn, precision=precision)
    ndim = core.get_aval(out).ndim
    return _moveaxes(out, (ndim - 2, ndim - 1), (out_spec[0], out_spec[1]))
