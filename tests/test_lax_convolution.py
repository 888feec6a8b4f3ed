"""conv_general_dilated and its wrappers: values against a direct NumPy loop and against JAX
(when installed), dimension numbers and padding helpers, errors, printing, derivatives (finite
differences) and vmap against a loop."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat
from remat import lax
from remat.lax import convolution
from remat.test_util import check_grads, check_vmap

RNG = np.random.default_rng(0)


def _rand(shape, dtype=np.float32):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return RNG.integers(-3, 4, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def _layout_perm(spec, chars):
    """Permutation taking the string layout ``spec`` to (chars[0], chars[1], spatial...) with
    the spatial dims in the order of the letters ``spatial`` (written independently of the
    library's ``conv_general_permutations``)."""
    return [spec.index(c) for c in chars]


def conv_reference(x, w, strides, padding, lhs_dilation, rhs_dilation, layouts, fgc=1, bgc=1):
    """A direct, slow convolution: dilate and pad the input explicitly, then sum products over
    every output position, kernel position and input feature, group by group."""
    lhs_l, rhs_l, out_l = layouts
    spatial = [c for c in rhs_l if c not in "OI"]
    x = np.transpose(x, _layout_perm(lhs_l, ["N", "C"] + spatial)).astype(np.float64)
    w = np.transpose(w, _layout_perm(rhs_l, ["O", "I"] + spatial)).astype(np.float64)
    nsp = len(spatial)
    # lhs dilation: put the input values on a grid of holes
    dil = [(s - 1) * d + 1 if s else 0 for s, d in zip(x.shape[2:], lhs_dilation)]
    xd = np.zeros(x.shape[:2] + tuple(dil))
    xd[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in lhs_dilation)] = x
    # padding: grow on positive pads, then crop on negative ones
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi in padding]
    xp = np.pad(xd, [(0, 0), (0, 0)] + grow)
    xp = xp[(slice(None), slice(None)) + tuple(
        slice(max(-lo, 0), xp.shape[2 + i] - max(-hi, 0)) for i, (lo, hi) in enumerate(padding))]
    n_total, c_total = xp.shape[:2]
    o_total, c_in = w.shape[:2]
    kernel = w.shape[2:]
    groups = fgc * bgc
    n_out, o_per = n_total // bgc, o_total // groups
    out_sp = []
    for i in range(nsp):
        span = (kernel[i] - 1) * rhs_dilation[i] + 1
        out_sp.append(max(0, (xp.shape[2 + i] - span) // strides[i] + 1))
    out = np.zeros((n_out, o_total) + tuple(out_sp))
    for o in range(o_total):
        g = o // o_per
        batch = slice(g * n_out, (g + 1) * n_out) if bgc > 1 else slice(None)
        feats = slice(g * c_in, (g + 1) * c_in) if fgc > 1 else slice(None)
        for pos in itertools.product(*map(range, out_sp)):
            acc = np.zeros(n_out)
            for kpos in itertools.product(*map(range, kernel)):
                idx = tuple(p * s + k * r for p, s, k, r in
                            zip(pos, strides, kpos, rhs_dilation))
                acc += xp[(batch, feats) + idx] @ w[(o, slice(None)) + kpos]
            out[(slice(None), o) + pos] = acc
    # back to the output layout
    canon = ["N", "C"] + spatial
    return np.transpose(out, [canon.index(c) for c in out_l])


def _pads(padding, in_sp, k_sp, strides, rhs_dilation):
    """Explicit pads for a padding string (SAME from the definition: output ceil(n/s))."""
    if not isinstance(padding, str):
        return padding
    pads = []
    for n, k, s, r in zip(in_sp, k_sp, strides, rhs_dilation):
        if padding == "VALID":
            pads.append((0, 0))
            continue
        span = (k - 1) * r + 1
        total = max(0, (-(-n // s) - 1) * s + span - n)
        lo = total // 2 if padding == "SAME" else total - total // 2
        pads.append((lo, total - lo))
    return pads


# (lhs shape, rhs shape, layouts, strides, padding, lhs dilation, rhs dilation, fgc, bgc)
CASES = [
    ((2, 3, 5), (4, 3, 2), ("NCH", "OIH", "NCH"), (1,), "VALID", (1,), (1,), 1, 1),
    ((2, 3, 7), (4, 3, 3), ("NCH", "OIH", "NCH"), (2,), "SAME", (1,), (1,), 1, 1),
    ((2, 6, 3), (3, 3, 4), ("NHC", "HIO", "NHC"), (1,), [(2, -1)], (2,), (2,), 1, 1),
    ((2, 3, 6, 5), (4, 3, 3, 2), ("NCHW", "OIHW", "NCHW"), (1, 1), "SAME", (1, 1), (1, 1), 1, 1),
    ((2, 3, 7, 6), (4, 3, 3, 2), ("NCHW", "OIHW", "NCHW"), (2, 3), "VALID", (1, 1), (1, 1), 1, 1),
    ((1, 2, 5, 6), (3, 2, 2, 3), ("NCHW", "OIHW", "NCHW"), (2, 1), "SAME_LOWER", (1, 1), (1, 1),
     1, 1),
    ((2, 6, 5, 3), (3, 2, 3, 4), ("NHWC", "HWIO", "NHWC"), (1, 2), "SAME", (1, 1), (2, 1), 1, 1),
    ((2, 5, 4, 2), (2, 3, 2, 3), ("NHWC", "HWIO", "NHWC"), (1, 1), [(1, 2), (0, -1)], (2, 1),
     (1, 2), 1, 1),
    ((1, 5, 4, 4), (3, 2, 2, 6), ("NHWC", "HWIO", "NHWC"), (1, 1), "SAME", (1, 1), (1, 1), 2, 1),
    ((2, 4, 6, 5), (4, 1, 3, 3), ("NCHW", "OIHW", "NCHW"), (2, 2), "SAME", (1, 1), (1, 1), 4, 1),
    ((4, 2, 5, 4), (6, 2, 2, 2), ("NCHW", "OIHW", "NCHW"), (1, 1), "VALID", (1, 1), (1, 1), 1, 2),
    ((2, 5, 3, 4), (2, 4, 3, 3), ("NWCH", "OHWI", "CHNW"), (1, 2), [(0, 1), (2, 0)], (2, 1),
     (1, 1), 1, 1),
    ((1, 2, 4, 3, 3), (2, 2, 2, 2, 2), ("NCDHW", "OIDHW", "NCDHW"), (1, 2, 1), "SAME", (1, 1, 1),
     (1, 1, 2), 1, 1),
    # wide enough for the shifted products (``_shifted_conv``): by taps (16 features) ...
    ((2, 16, 9), (5, 16, 3), ("NCH", "OIH", "NCH"), (1,), "SAME", (1,), (1,), 1, 1),
    ((2, 7, 6, 16), (3, 2, 16, 5), ("NHWC", "HWIO", "NHWC"), (1, 1), "SAME", (1, 1), (2, 1), 1,
     1),
    ((2, 16, 5, 4), (3, 16, 2, 2), ("NCHW", "OIHW", "NCHW"), (1, 1), [(1, 2), (0, -1)], (2, 1),
     (1, 1), 1, 1),
    ((1, 16, 6, 6, 6), (2, 16, 2, 2, 2), ("NCDHW", "OIDHW", "NCDHW"), (1, 1, 1), "SAME",
     (1, 1, 1), (1, 1, 2), 1, 1),
    # ... and by windows (16 images, few output positions: a weight gradient's shape)
    ((16, 3, 6, 6), (4, 3, 5, 5), ("NCHW", "OIHW", "NCHW"), (1, 1), "VALID", (1, 1), (1, 1), 1,
     1),
    ((16, 7, 6, 2), (4, 5, 2, 3), ("NHWC", "HWIO", "NHWC"), (1, 1), [(1, 0), (0, 1)], (1, 1),
     (1, 1), 1, 1),
]
SHIFTED = range(13, 19)
IDS = [f"{c[2][0]}-{c[4] if isinstance(c[4], str) else 'explicit'}-f{c[7]}b{c[8]}-{i}"
       for i, c in enumerate(CASES)]


def _call(x, w, case, **kw):
    _, _, layouts, strides, padding, lhs_d, rhs_d, fgc, bgc = case
    return lax.conv_general_dilated(x, w, strides, padding, lhs_d, rhs_d, layouts, fgc, bgc,
                                    **kw)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_values_against_direct_loop(case):
    lhs_shape, rhs_shape, layouts, strides, padding, lhs_d, rhs_d, fgc, bgc = case
    x, w = _rand(lhs_shape), _rand(rhs_shape)
    out = _call(x, w, case)
    spatial = [c for c in layouts[1] if c not in "OI"]
    in_sp = [lhs_shape[layouts[0].index(c)] for c in spatial]
    k_sp = [rhs_shape[layouts[1].index(c)] for c in spatial]
    pads = _pads(padding, in_sp, k_sp, strides, rhs_d)
    expected = conv_reference(x, w, strides, pads, lhs_d, rhs_d, layouts, fgc, bgc)
    assert out.shape == expected.shape
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)
    if isinstance(padding, str) and padding != "VALID":  # SAME keeps ceil(n / stride)
        out_sp = [out.shape[layouts[2].index(c)] for c in spatial]
        assert out_sp == [-(-n // s) for n, s in zip(in_sp, strides)]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_values_against_jax(case):
    jax = pytest.importorskip("jax")
    x, w = _rand(case[0]), _rand(case[1])
    _, _, layouts, strides, padding, lhs_d, rhs_d, fgc, bgc = case
    expected = jax.lax.conv_general_dilated(x, w, strides, padding, lhs_d, rhs_d, layouts, fgc,
                                            bgc, precision="highest")
    out = _call(x, w, case)
    assert out.shape == expected.shape
    np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-5, atol=1e-5)


def _shifted_calls(monkeypatch):
    """The ways ``_shifted_conv`` goes, recorded: "taps", "windows", or None (im2col)."""
    ways = []
    original = convolution._shifted_conv

    def spy(x, w, rhs_dilation, out_spatial, work):
        out = original(x, w, rhs_dilation, out_spatial, work)
        way = None if out is None else "taps" if x.shape[-1] >= convolution._MIN_SHIFTED_WIDTH \
            and np.prod(x.shape[1:-1]) * w[0, 0].size <= 2 * np.prod(out_spatial) * \
            w[0, 0].size else "windows"
        ways.append(way)
        return out

    monkeypatch.setattr(convolution, "_shifted_conv", spy)
    return ways


@pytest.mark.parametrize("case", [CASES[i] for i in SHIFTED], ids=[IDS[i] for i in SHIFTED])
def test_wide_convolutions_take_the_shifted_products(case, monkeypatch):
    """The cases meant for ``_shifted_conv`` do not fall back to im2col (the value tests above
    then check its values), and give im2col's values to rounding."""
    ways = _shifted_calls(monkeypatch)
    x, w = _rand(case[0]), _rand(case[1])
    out = np.asarray(_call(x, w, case))
    assert ways and all(ways), ways
    monkeypatch.setattr(convolution, "_MIN_SHIFTED_WIDTH", 10**9)  # im2col
    np.testing.assert_allclose(out, np.asarray(_call(x, w, case)), rtol=1e-5, atol=1e-5)
    assert ways[-1] is None


def test_shifted_windows_keep_non_finite_inputs_to_their_own_outputs(monkeypatch):
    """By windows, the products that are not the convolution's multiply zeros of the spread
    kernel by inputs outside a window: an inf there would make the window's output NaN, so
    an input with one goes to im2col, and only the outputs whose windows hold it are not
    finite."""
    case = CASES[17]
    x, w = _rand(case[0]), _rand(case[1])
    x[3, 1, 4, 2] = np.inf
    ways = _shifted_calls(monkeypatch)
    out = np.asarray(_call(x, w, case))
    assert ways == [None]
    expected = conv_reference(x, w, case[3], _pads(case[4], case[0][2:], case[1][2:], case[3],
                                                   case[6]), case[5], case[6], case[2])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert np.isfinite(out[:3]).all() and np.isfinite(out[4:]).all()
    assert not np.isfinite(out[3]).all()


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_shifted_products_match_the_direct_loop_on_generated_convolutions(data):
    """Generated stride-1 convolutions wide enough for ``_shifted_conv`` (either way), in 1 to
    3 spatial dims, with padding (negative too) and both dilations: its values are the
    direct loop's."""
    nsp = data.draw(st.integers(1, 3), "spatial dims")
    windows = data.draw(st.booleans(), "weight-gradient shape")
    n = data.draw(st.integers(16, 18)) if windows else data.draw(st.integers(1, 2))
    c = data.draw(st.integers(1, 3)) if windows else data.draw(st.integers(16, 18))
    size = 6 if nsp < 3 else 4
    spatial = data.draw(st.lists(st.integers(2, size), min_size=nsp, max_size=nsp))
    kernel = [data.draw(st.integers(1, s)) for s in spatial]
    pads = [tuple(data.draw(st.integers(-1, 2)) for _ in "lh") for _ in spatial]
    lhs_d = data.draw(st.lists(st.integers(1, 2), min_size=nsp, max_size=nsp))
    rhs_d = data.draw(st.lists(st.integers(1, 2), min_size=nsp, max_size=nsp))
    o = data.draw(st.integers(1, 4))
    letters = "DHW"[-nsp:]
    layouts = ("N" + letters + "C", letters + "IO", "NC" + letters)
    x = _rand((n, *spatial, c))
    w = _rand((*kernel, c, o))
    case = (x.shape, w.shape, layouts, (1,) * nsp, pads, tuple(lhs_d), tuple(rhs_d), 1, 1)
    try:
        out = np.asarray(_call(x, w, case))
    except (TypeError, ValueError):  # (pads that crop past the input)
        return
    expected = conv_reference(x, w, (1,) * nsp, pads, lhs_d, rhs_d, layouts)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_large_batch_goes_in_chunks(monkeypatch):
    case = CASES[9]
    x, w = _rand((7,) + case[0][1:]), _rand(case[1])
    whole = np.asarray(_call(x, w, case))
    monkeypatch.setattr(convolution, "_CHUNK_BYTES", 1)  # one image per matmul
    chunked = np.asarray(_call(x, w, case))
    np.testing.assert_array_equal(chunked, whole)
    pads = _pads("SAME", case[0][2:], case[1][2:], case[3], case[6])
    expected = conv_reference(x, w, case[3], pads, case[5], case[6], case[2], case[7], case[8])
    np.testing.assert_allclose(chunked, expected, rtol=1e-5, atol=1e-5)


def test_degenerate_sizes():
    x, w = _rand((2, 3, 5)), _rand((4, 3, 7))
    assert lax.conv(x, w, (1,), "VALID").shape == (2, 4, 0)  # window larger than input
    assert lax.conv(_rand((0, 3, 5)), _rand((4, 3, 2)), (1,), "VALID").shape == (0, 4, 4)
    out = lax.conv_general_dilated(_rand((2, 0, 5)), _rand((4, 0, 2)), (1,), [(1, 1)])
    np.testing.assert_array_equal(np.asarray(out), np.zeros((2, 4, 6)))
    out = lax.conv_general_dilated(x, _rand((4, 3, 2)), (1,), [(-3, -1)])
    assert out.shape == (2, 4, 0)


def test_wrappers():
    x, w = _rand((2, 3, 6, 5)), _rand((4, 3, 3, 2))
    ref = conv_reference(x, w, (2, 1), _pads("SAME", (6, 5), (3, 2), (2, 1), (1, 1)), (1, 1),
                         (1, 1), ("NCHW", "OIHW", "NCHW"))
    np.testing.assert_allclose(np.asarray(lax.conv(x, w, (2, 1), "SAME")), ref, rtol=1e-5,
                               atol=1e-5)
    pads = [(1, 0), (2, 1)]
    ref = conv_reference(x, w, (1, 2), pads, (2, 1), (1, 2), ("NCHW", "OIHW", "NCHW"))
    out = lax.conv_with_general_padding(x, w, (1, 2), pads, (2, 1), (1, 2))
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.complex64])
def test_dtypes(dtype):
    x, w = _rand((2, 3, 5), dtype), _rand((2, 3, 2), dtype)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * _rand((2, 3, 5)).astype(dtype)
    out = lax.conv(x, w, (1,), "SAME")
    expected_dtype = remat.dtypes.canonicalize_dtype(dtype)
    assert out.dtype == expected_dtype
    ref = np.zeros((2, 2, 5), np.complex128)
    xp = np.pad(x.astype(np.complex128), [(0, 0), (0, 0), (0, 1)])
    for k in range(2):
        ref += np.einsum("nch,oc->noh", xp[:, :, k:k + 5], w[:, :, k].astype(np.complex128))
    if np.dtype(dtype).kind != "c":
        ref = ref.real
    tol = 2e-3 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(np.asarray(out).astype(ref.dtype), ref, rtol=tol, atol=tol)


def test_preferred_element_type():
    x = np.full((1, 64, 3), 100, np.int8)
    w = np.full((2, 64, 1), 100, np.int8)
    out = lax.conv(x, w, (1,), "VALID", preferred_element_type=np.int32)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(out), np.full((1, 2, 3), 640000))
    out = lax.conv(x, w, (1,), "VALID", preferred_element_type=np.float32)
    assert out.dtype == np.float32
    with pytest.raises(TypeError, match="must not be narrower"):
        lax.conv(x.astype(np.int32), w.astype(np.int32), (1,), "VALID",
                 preferred_element_type=np.int8)
    with pytest.raises(TypeError, match="incompatible with `preferred_element_type`"):
        lax.conv(x.astype(np.float32), w.astype(np.float32), (1,), "VALID",
                 preferred_element_type=np.int32)


def test_weak_type():
    x = np.ones((1, 1, 3), np.float32)
    assert not lax.conv(x, x, (1,), "VALID").aval.weak_type


# --- dimension numbers and padding helpers ---------------------------------------------------


@pytest.mark.parametrize("layouts", [("NCHW", "OIHW", "NCHW"), ("NHWC", "HWIO", "NHWC"),
                                     ("NWCH", "OHWI", "CHNW"), ("NCH", "IOH", "HNC"),
                                     ("NCDHW", "DHWIO", "NDHWC")])
def test_conv_dimension_numbers(layouts):
    shape = (1,) * len(layouts[0])
    dn = lax.conv_dimension_numbers(shape, shape, layouts)
    assert isinstance(dn, lax.ConvDimensionNumbers)
    spatial = [c for c in layouts[1] if c not in "OI"]
    assert dn.lhs_spec == tuple(_layout_perm(layouts[0], ["N", "C"] + spatial))
    assert dn.rhs_spec == tuple(_layout_perm(layouts[1], ["O", "I"] + spatial))
    assert dn.out_spec == tuple(_layout_perm(layouts[2], ["N", "C"] + spatial))
    assert lax.conv_dimension_numbers(shape, shape, dn) == dn
    jax = pytest.importorskip("jax")
    assert tuple(dn) == tuple(jax.lax.conv_dimension_numbers(shape, shape, layouts))


def test_conv_dimension_numbers_defaults_and_errors():
    dn = lax.conv_dimension_numbers((1, 2, 3, 4), (5, 2, 1, 1), None)
    assert dn == lax.ConvDimensionNumbers((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3))
    with pytest.raises(TypeError, match="lhs and rhs ndim to be equal"):
        lax.conv_dimension_numbers((1, 2, 3), (1, 2, 3, 4), None)
    with pytest.raises(TypeError, match="must be length 3"):
        lax.conv_dimension_numbers((1, 2, 3), (1, 2, 3), ("NCH", "OIH"))
    with pytest.raises(TypeError, match="must have len equal to the ndim"):
        lax.conv_dimension_numbers((1, 2, 3), (1, 2, 3), ("NCHW", "OIH", "NCH"))
    with pytest.raises(TypeError, match=r"must contain the characters 'O' and 'I' exactly once"):
        lax.conv_dimension_numbers((1, 2, 3), (1, 2, 3), ("NCH", "OOH", "NCH"))
    with pytest.raises(TypeError, match="same set of spatial characters"):
        lax.conv_dimension_numbers((1, 2, 3), (1, 2, 3), ("NCH", "OIW", "NCH"))
    with pytest.raises(TypeError, match="must be tuple/list or None"):
        lax.conv_dimension_numbers((1, 2, 3), (1, 2, 3), "NCH")


def test_padtype_to_pads():
    assert lax.padtype_to_pads((5, 6), (3, 2), (2, 1), "VALID") == [(0, 0), (0, 0)]
    assert lax.padtype_to_pads((5, 6), (3, 2), (2, 1), "SAME") == [(1, 1), (0, 1)]
    assert lax.padtype_to_pads((5, 6), (3, 2), (2, 1), "SAME_LOWER") == [(1, 1), (1, 0)]
    assert lax.padtype_to_pads((6,), (4,), (2,), "same") == [(1, 1)]
    assert lax.padtype_to_pads((6,), (1,), (4,), "SAME") == [(0, 0)]
    with pytest.raises(RuntimeError, match="Unrecognized padding type"):
        lax.padtype_to_pads((6,), (1,), (4,), "FULL")
    jax = pytest.importorskip("jax")
    for args in [((7, 4), (3, 3), (2, 3), "SAME"), ((7, 4), (4, 1), (3, 1), "SAME_LOWER")]:
        assert lax.padtype_to_pads(*args) == [tuple(p) for p in jax.lax.padtype_to_pads(*args)]


ERRORS = [
    (dict(lhs=(2, 3, 5), rhs=(4, 2, 3)), ValueError,
     r"conv_general_dilated lhs feature dimension size divided by feature_group_count must "
     r"equal the rhs input feature dimension size, but 3 // 1 != 2\."),
    (dict(lhs=(2, 4, 5), rhs=(6, 1, 3), feature_group_count=3), ValueError,
     "feature_group_count must divide lhs feature dimension size, but 3 does not divide 4"),
    (dict(lhs=(2, 4, 5), rhs=(6, 1, 3), feature_group_count=4), ValueError,
     "rhs output feature dimension size must be a multiple of feature_group_count"),
    (dict(lhs=(3, 4, 5), rhs=(6, 4, 3), batch_group_count=2), ValueError,
     "batch_group_count must divide lhs batch dimension size, but 2 does not divide 3"),
    (dict(lhs=(4, 4, 5), rhs=(6, 2, 3), batch_group_count=2, feature_group_count=2), ValueError,
     "At most one of batch_group_count and feature_group_count may be > 1"),
    (dict(lhs=(2, 3, 5), rhs=(4, 3, 3), feature_group_count=0), ValueError,
     "feature_group_count must be a positive integer, got 0"),
    (dict(lhs=(2, 3, 5), rhs=(4, 3, 3, 3)), TypeError,
     "convolution requires lhs and rhs ndim to be equal, got 3 and 4"),
    (dict(lhs=(2, 3, 5), rhs=(4, 3, 3), window_strides=(1, 1)), ValueError,
     r"window_strides must have one entry per spatial dimension \(1\)"),
    (dict(lhs=(2, 3, 5), rhs=(4, 3, 3), window_strides=(0,)), ValueError,
     "window_strides must be positive"),
    (dict(lhs=(2, 3, 5), rhs=(4, 3, 3), padding=[(1, 1), (1, 1)]), ValueError,
     "window and padding must have the same number of dimensions"),
    (dict(lhs=(2, 3, 5), rhs=(4, 3, 3), padding=[(-4, -2)]), ValueError,
     "Negative padding is larger than the size of the corresponding dimension"),
    (dict(lhs=(2, 3, 5), rhs=(4, 3, 3), padding="FULL"), RuntimeError,
     "Unrecognized padding type"),
    (dict(lhs=(2, 3, 5), rhs=(4, 3, 3), padding=[1]), ValueError,
     "should be a string or a sequence of \\(low, high\\) pairs"),
    (dict(lhs=(2, 3, 5), rhs=(4, 3, 3), padding="SAME", lhs_dilation=(2,)), ValueError,
     "String padding is not implemented for transposed convolution"),
    (dict(lhs=(2, 3, 5), rhs=(4, 3, 3), rhs_dtype=np.float16), TypeError,
     "lax.conv_general_dilated requires arguments to have the same dtypes, got float32, "
     "float16"),
]


@pytest.mark.parametrize("spec,exc,msg", ERRORS)
def test_errors(spec, exc, msg):
    spec = dict(spec)
    x = np.ones(spec.pop("lhs"), np.float32)
    w = np.ones(spec.pop("rhs"), spec.pop("rhs_dtype", np.float32))
    strides = spec.pop("window_strides", (1,))
    padding = spec.pop("padding", "VALID")
    with pytest.raises(exc, match=msg):
        lax.conv_general_dilated(x, w, strides, padding, **spec)


def test_jaxpr_printing():
    x, w = np.ones((2, 5, 5, 3), np.float32), np.ones((3, 3, 3, 4), np.float32)
    f = lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME",
                                              dimension_numbers=("NHWC", "HWIO", "NHWC"))
    jaxpr = remat.make_jaxpr(f)(x, w)
    text = str(jaxpr)
    assert "c:f32[2,5,5,4] = conv_general_dilated[" in text
    assert ("dimension_numbers=ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2), "
            "rhs_spec=(3, 2, 0, 1), out_spec=(0, 3, 1, 2))") in text
    assert "padding=((1, 1), (1, 1))" in text
    assert "feature_group_count=1" in text and "batch_group_count=1" in text
    eqn = jaxpr.jaxpr.eqns[0]
    hash(tuple(eqn.params.items()))  # params are hashable
    assert eqn.params["window_strides"] == (1, 1)


# --- derivatives -----------------------------------------------------------------------------

GRAD_CASES = [CASES[i] for i in (1, 2, 4, 7, 8, 10, 11, 13, 17)]
GRAD_IDS = [IDS[i] for i in (1, 2, 4, 7, 8, 10, 11, 13, 17)]


@pytest.mark.parametrize("case", GRAD_CASES, ids=GRAD_IDS)
def test_grads(case):
    x, w = _rand(case[0]), _rand(case[1])
    check_grads(lambda a, b: _call(a, b, case), (x, w), order=2, modes=("fwd", "rev"))


def test_grads_3d_and_depthwise():
    for case in (CASES[12], CASES[9]):
        x, w = _rand(case[0]), _rand(case[1])
        check_grads(lambda a, b, case=case: _call(a, b, case), (x, w), order=1,
                    modes=("rev",))


def test_vjp_against_jax():
    jax = pytest.importorskip("jax")
    for case in (CASES[4], CASES[7], CASES[9], CASES[10], CASES[11]):
        x, w = _rand(case[0]), _rand(case[1])
        out, pullback = remat.vjp(lambda a, b, case=case: _call(a, b, case), x, w)
        ct = _rand(out.shape)
        _, jpull = jax.vjp(lambda a, b, case=case: jax.lax.conv_general_dilated(
            a, b, *case[3:7], case[2], *case[7:], precision="highest"), x, w)
        for got, want in zip(pullback(ct), jpull(ct)):
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)


def test_grad_under_jit():
    case = CASES[6]
    x, w = _rand(case[0]), _rand(case[1])
    loss = lambda a, b: lax.reduce_sum(lax.mul(_call(a, b, case), _call(a, b, case)),
                                       (0, 1, 2, 3))
    eager = remat.grad(loss, argnums=(0, 1))(x, w)
    jitted = remat.jit(remat.grad(loss, argnums=(0, 1)))(x, w)
    for a, b in zip(eager, jitted):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


# --- vmap ------------------------------------------------------------------------------------


def _insert(shape, axis, size):
    return shape[:axis] + (size,) + shape[axis:]


VMAP_CASES = [CASES[i] for i in (1, 6, 8, 9, 10, 11)]
VMAP_IDS = [IDS[i] for i in (1, 6, 8, 9, 10, 11)]


@pytest.mark.parametrize("case", VMAP_CASES, ids=VMAP_IDS)
def test_vmap(case):
    f = lambda a, b: _call(a, b, case)
    lhs_shape, rhs_shape = case[0], case[1]
    ndim, size = len(lhs_shape), 2
    for la, rb in [(0, 0), (ndim, 1), (2, ndim)]:
        xb, wb = _rand(_insert(lhs_shape, la, size)), _rand(_insert(rhs_shape, rb, size))
        check_vmap(f, (xb, wb), (la, rb))
        check_vmap(f, (xb, _rand(rhs_shape)), (la, None))
        check_vmap(f, (_rand(lhs_shape), wb), (None, rb))


def test_vmap_of_grad_of_grouped_conv():
    """The rhs cotangent of a grouped convolution is a batch-grouped convolution; vmapping it
    exercises the batch_group_count batching paths."""
    case = CASES[9]
    loss = lambda a, b: lax.reduce_sum(_call(a, b, case), (0, 1, 2, 3))
    g = remat.grad(loss, argnums=1)
    xs, w = _rand((3,) + case[0]), _rand(case[1])
    check_vmap(g, (xs, w), (0, None))
    ws = _rand((3,) + case[1])
    check_vmap(g, (xs, ws), (0, 0))
    check_vmap(g, (xs[0], ws), (None, 0))


def test_grad_with_wider_preferred_element_type():
    """The cotangent is in the preferred (wider) dtype; the transposes convert the other
    operand to it and return cotangents in the operands' own dtype."""
    x, w = _rand((2, 3, 6), np.float16), _rand((4, 3, 3), np.float16)
    f = lambda a, b: lax.conv(a, b, (2,), "SAME", preferred_element_type=np.float32)
    out, pullback = remat.vjp(f, x, w)
    assert out.dtype == np.float32
    ct = _rand(out.shape)
    gx, gw = pullback(ct)
    assert gx.dtype == np.float16 and gw.dtype == np.float16
    _, pull32 = remat.vjp(lambda a, b: lax.conv(a, b, (2,), "SAME"),
                          x.astype(np.float32), w.astype(np.float32))
    for got, want in zip((gx, gw), pull32(ct)):
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want), rtol=2e-2,
                                   atol=2e-2)


def test_float64_under_x64(x64):
    case = CASES[7]
    x, w = _rand(case[0], np.float64), _rand(case[1], np.float64)
    out = _call(x, w, case)
    assert out.dtype == np.float64
    pads = case[4]
    expected = conv_reference(x, w, case[3], pads, case[5], case[6], case[2])
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-12, atol=1e-12)
    check_grads(lambda a, b: _call(a, b, case), (x, w), order=1, modes=("fwd", "rev"))


# --- conv_transpose --------------------------------------------------------------------------

TRANSPOSE_CASES = [
    ((2, 5, 5, 3), (3, 3, 3, 4), (2, 2), "SAME", {}),
    ((2, 5, 5, 3), (3, 3, 3, 4), (2, 2), "VALID", {}),
    ((2, 5, 5, 3), (3, 2, 3, 4), (3, 1), "SAME", dict(rhs_dilation=(1, 2))),
    ((2, 5, 5, 3), (3, 3, 4, 3), (2, 2), "SAME", dict(transpose_kernel=True)),
    ((2, 5, 5, 3), (3, 3, 3, 4), (2, 2), [(1, 0), (2, 1)], {}),
    ((2, 5, 5, 3), (3, 3, 3, 4), (2, 2), [(1, 0), (2, 1)], dict(use_consistent_padding=True)),
    ((2, 3, 7), (4, 3, 3), (2,), "SAME", dict(dimension_numbers=("NCH", "OIH", "NCH"))),
]


@pytest.mark.parametrize("lhs_shape,rhs_shape,strides,padding,kw", TRANSPOSE_CASES)
def test_conv_transpose_against_jax(lhs_shape, rhs_shape, strides, padding, kw):
    jax = pytest.importorskip("jax")
    x, w = _rand(lhs_shape), _rand(rhs_shape)
    out = lax.conv_transpose(x, w, strides, padding, **kw)
    expected = jax.lax.conv_transpose(x, w, strides, padding, precision="highest", **kw)
    assert out.shape == expected.shape
    np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-5, atol=1e-5)


def test_conv_transpose_with_transposed_kernel_is_the_input_gradient():
    x, w = _rand((2, 6, 4, 3)), _rand((3, 2, 3, 5))
    layouts = ("NHWC", "HWIO", "NHWC")
    for padding in ("SAME", "VALID"):
        f = lambda a, padding=padding: lax.conv_general_dilated(
            a, w, (2, 2), padding, dimension_numbers=layouts)
        out, pullback = remat.vjp(f, x)
        ct = _rand(out.shape)
        (expected,) = pullback(ct)
        got = lax.conv_transpose(ct, w, (2, 2), padding, dimension_numbers=layouts,
                                 transpose_kernel=True)
        expected = np.asarray(expected)
        if padding == "VALID":  # the forward conv never read the last row
            assert got.shape == (2, 5, 4, 3)
            np.testing.assert_array_equal(expected[:, 5:], 0)
            expected = expected[:, :5]
        assert got.shape == expected.shape
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5)


def test_conv_transpose_grads_and_errors():
    x, w = _rand((1, 3, 3, 2)), _rand((2, 2, 2, 3))
    check_grads(lambda a, b: lax.conv_transpose(a, b, (2, 2), "SAME"), (x, w), order=1,
                modes=("fwd", "rev"))
    with pytest.raises(ValueError, match="equal rank"):
        lax.conv_transpose(x, w[0], (2, 2), "SAME")
    with pytest.raises(ValueError, match="Invalid padding mode"):
        lax.conv_transpose(x, w, (2, 2), "FULL", use_consistent_padding=True)


# --- shape tuples, patches and unshared convolution ------------------------------------------


def test_shape_tuples_against_jax():
    jax = pytest.importorskip("jax")
    for args in [((2, 3, 9, 9), (4, 3, 3, 3), (1, 1), "SAME"),
                 ((2, 3, 9, 9), (4, 3, 3, 3), (2, 1), ((1, 2), (0, 1))),
                 ((4, 3, 8), (6, 3, 2), (3,), "VALID")]:
        assert lax.conv_shape_tuple(*args) == tuple(int(d) for d in jax.lax.conv_shape_tuple(*args))
    assert lax.conv_shape_tuple((4, 3, 8), (6, 3, 2), (1,), "VALID", batch_group_count=2) == \
        (2, 6, 7)
    dn = ("NHWC", "HWIO", "NHWC")
    for pad in ["SAME", "VALID", ((1, 2), (0, 1))]:
        for fn in ("conv_general_shape_tuple", "conv_transpose_shape_tuple"):
            ours = getattr(lax, fn)((2, 9, 8, 3), (3, 2, 3, 4), (2, 1), pad, dn)
            theirs = getattr(jax.lax, fn)((2, 9, 8, 3), (3, 2, 3, 4), (2, 1), pad, dn)
            assert ours == tuple(int(d) for d in theirs), (fn, pad)
    with pytest.raises(TypeError, match="Wrong number of explicit pads"):
        lax.conv_shape_tuple((2, 3, 9, 9), (4, 3, 3, 3), (1, 1), ((1, 1),))
    with pytest.raises(ValueError, match="Negative padding"):
        lax.conv_shape_tuple((2, 3, 3), (4, 3, 3), (1,), ((-3, -1),))


def test_conv_transpose_shape_tuple_is_the_output_shape():
    x, k = _rand((2, 5, 6, 3)), _rand((3, 3, 3, 4))
    for pad in ("SAME", "VALID"):
        out = lax.conv_transpose(x, k, (2, 2), pad, dimension_numbers=("NHWC", "HWIO", "NHWC"))
        assert out.shape == lax.conv_transpose_shape_tuple(
            x.shape, k.shape, (2, 2), pad, ("NHWC", "HWIO", "NHWC"))


@pytest.mark.parametrize("dn", [None, ("NCHW", "OIHW", "NCHW"), ("NHWC", "HWIO", "NHWC"),
                                ("NCHW", "OIWH", "CNHW")], ids=str)
@pytest.mark.parametrize("pad", ["SAME", "VALID", ((1, 0), (0, 2))], ids=str)
def test_patches_against_jax(dn, pad):
    jax = pytest.importorskip("jax")
    x = _rand((2, 3, 6, 5))
    if dn is not None and dn[0] == "NHWC":
        x = np.transpose(x, (0, 2, 3, 1))
    ours = lax.conv_general_dilated_patches(x, (2, 3), (1, 2), pad, rhs_dilation=(2, 1),
                                            dimension_numbers=dn)
    theirs = jax.lax.conv_general_dilated_patches(x, (2, 3), (1, 2), pad, rhs_dilation=(2, 1),
                                                  dimension_numbers=dn)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-6)


def test_patches_hold_the_windows():
    """Channel c, window position (i, j) of the patch at output (h, w) is
    x[c, h + i, w + j] (VALID, unit strides): the one-hot kernel copies, it does not mix."""
    x = _rand((1, 2, 4, 5))
    p = np.asarray(lax.conv_general_dilated_patches(x, (2, 3), (1, 1), "VALID"))
    assert p.shape == (1, 2 * 2 * 3, 3, 3)
    p = p.reshape(1, 2, 2, 3, 3, 3)
    for c, i, j, h, w in itertools.product(range(2), range(2), range(3), range(3), range(3)):
        assert p[0, c, i, j, h, w] == x[0, c, h + i, w + j]


def test_local_conv_against_jax_and_a_loop():
    jax = pytest.importorskip("jax")
    lhs = _rand((2, 3, 5, 4))
    dn = ("NCHW", "HWIO", "NCHW")
    rhs = _rand((4, 3, 3 * 2 * 2, 7))  # one (3*2*2 -> 7) filter per output position
    ours = lax.conv_general_dilated_local(lhs, rhs, (1, 1), "VALID", (2, 2),
                                          dimension_numbers=dn)
    theirs = jax.lax.conv_general_dilated_local(lhs, rhs, (1, 1), "VALID", (2, 2),
                                                dimension_numbers=dn)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-5, atol=1e-5)
    expected = np.zeros((2, 7, 4, 3), np.float32)
    for h, w in itertools.product(range(4), range(3)):
        patch = lhs[:, :, h:h + 2, w:w + 2].reshape(2, -1)
        expected[:, :, h, w] = patch @ rhs[h, w]
    np.testing.assert_allclose(np.asarray(ours), expected, rtol=1e-5, atol=1e-5)


def test_patches_and_local_conv_derivatives_vmap_jit():
    lhs = _rand((1, 2, 4, 4))
    rhs = _rand((3, 3, 2 * 2 * 2, 3))
    f = lambda l, r: lax.conv_general_dilated_local(  # noqa: E731
        l, r, (1, 1), "VALID", (2, 2), dimension_numbers=("NCHW", "HWIO", "NCHW"))
    check_grads(f, (lhs, rhs), order=2, modes=("fwd", "rev"))
    check_grads(lambda x: lax.conv_general_dilated_patches(x, (2, 2), (2, 1), "SAME"), (lhs,),
                order=1)
    xs = _rand((3, 1, 2, 4, 4))
    check_vmap(lambda x: f(x, rhs), (xs,), (0,))
    np.testing.assert_allclose(np.asarray(remat.jit(f)(lhs, rhs)), np.asarray(f(lhs, rhs)),
                               rtol=1e-6)
