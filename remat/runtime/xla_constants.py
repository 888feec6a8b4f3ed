"""The constants of XLA's CPU float kernels (Cephes' float32 log, the rational log1p, Giles'
erf_inv polynomials), bit for bit: shared by their NumPy impls (``remat.random.kernels``) and
the native loop tier's forms of them (``remat.exec.native_kernels``)."""

import numpy as np


def float32_bits(bits):
    return np.array(bits, np.uint32).view(np.float32)


def float64_bits(bits):
    return np.array(bits, np.uint64).view(np.float64)


# log (float32): Cephes' logf as in Eigen's plog. Mantissa m in [sqrt(1/2), sqrt(2)), x = m - 1,
# log = x - x^2/2 + x^3 P(x) + e log(2) with log(2) split in two parts.
LOG_P = float32_bits([0x3D9021BB, 0xBDEBD1B8, 0x3DEF251A, 0xBDFE5D4F, 0x3E11E9BF, 0xBE2AAE50,
               0x3E4CCEAC, 0xBE7FFFFC, 0x3EAAAAAA])
LOG2_LO, LOG2_HI = float32_bits(0xB95E8083), float32_bits(0x3F318000)
MIN_NORMAL32 = float32_bits(0x00800000)
SQRT_HALF32 = float32_bits(0x3F3504F3)


# log1p: a rational approximation for |t| < sqrt(2) - 1 (where log(1 + t) loses digits),
# log(1 + t) elsewhere.
LOG1P = {
    np.dtype(np.float32): (
        float32_bits([0x417101AD, 0x42A6185B, 0x435DC32D, 0x439A8CA3, 0x43586D8A, 0x42707982]),
        np.concatenate([np.float32([4.527e-05]),
                        float32_bits([0x3EFF40C5, 0x40D284FA, 0x41EF4B9C, 0x4273CC76,
                                      0x426473AD, 0x41A05101])]),
        float32_bits(0x3ED413CD)),
    np.dtype(np.float64): (
        float64_bits([0x402E20359E903E37, 0x4054C30B52213498, 0x406BB86590FCFB56,
                      0x407351945DC908A5, 0x406B0DB13E48E066, 0x404E0F304466448E]),
        float64_bits([0x3F07BC0962B395CA, 0x3FDFE818A0FE1A83, 0x401A509F46F4FA53,
                      0x403DE9738B8CB9C9, 0x404E798EB86C3351, 0x404C8E7597479A10,
                      0x40340A202D99830A]),
        float64_bits(0x3FDA827999FCEF32)),
}


# erf_inv: M. Giles, "Approximating the erfinv function" (GPU Computing Gems, 2010), with
# w = -log1p(-x^2); float32 uses the single-precision polynomials (w < 5, w >= 5), float64 the
# double-precision ones (w < 6.25, w < 16, w >= 16), each evaluated by Horner's rule in FMAs.
ERF_INV32 = (
    np.float32([2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                -0.00125372503, -0.00417768164, 0.246640727, 1.50140941]),
    np.float32([-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682]))
ERF_INV64 = (
    float64_bits([0xBBB135D2E746E627, 0xBC08DDF93324D327, 0x3C37B83EEF0B7C9F, 0x3C69BA72CD589B91,
          0xBCA33689090A6B96, 0x3C782E11898132E0, 0x3CFDE4ACFD9E26BA, 0xBD26D33EED66C487,
          0xBD36F2167040D8E2, 0x3D872A22C2D77E20, 0xBDAC8859C4E5C0AF, 0xBDCDC583D118A561,
          0x3E120F47CCF46B3C, 0xBE31A9E38DC84D60, 0xBE5F36CD6D3D46A9, 0x3E9C6B4F5D03B787,
          0xBEB6E8A5434AE8A2, 0xBEED1D1F7B8736F6, 0x3F2879C2A212F024, 0xBF4845769484FCA8,
          0xBF78B6C33114F909, 0x3FCEBD80D9B13E28, 0x3FFA755E7C99AE86]),
    float64_bits([0x3E23040F87DBD932, 0x3E785CBE52878635, 0xBE92777453DD3955, 0x3E5395ABCD554C6C,
          0x3EB936388A3790AD, 0xBED0D5DB812B5083, 0x3EC8860CD5D652F6, 0x3EEA29A0CACDFB23,
          0xBF08CEF1F80281F2, 0x3F11E684D0B9188A, 0x3EF932CD54C8A222, 0xBF37448A89EF8AA3,
          0x3F4F3CC55AD40C25, 0xBF5BA924132F38B1, 0x3F6468EECA533CF8, 0xBF6EBADABB891BBD,
          0x3F75FFCFE5B76AFC, 0x3FF0158A6D641D39, 0x4008ABCC380D5A48]),
    float64_bits([0xBDBDCEC3A7785389, 0xBDF18FEEC0E38727, 0x3E19E6BF2DDA45E3, 0xBE30468FB24E2F5F,
          0x3E405AC6A8FBA182, 0xBE50102E495FB9C0, 0x3E5F4C20E1334AF8, 0xBE722D220FDF9C3E,
          0x3E8EBC8BB824CB54, 0xBEB0A8D40EA372CC, 0x3ED2FBD29D093D2B, 0xBEF4A3497E1E0FAC,
          0x3F13EBF4EB00938F, 0xBF2C2F36A8FC5D53, 0xBF222EA5DF04047C, 0x3FF02A30D1FBA0DC,
          0x4013664DDD1AD7FB]))
