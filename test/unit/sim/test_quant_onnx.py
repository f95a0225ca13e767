"""The interpreter's integer TCU path against numpy oracles written from the ONNX operator
definitions (issue 11): QLinearMatMul / QLinearConv (per-channel weight scales, int8 and uint8
activations) run as ONE TCU instruction each, with the activation zero point folded into the i32
bias and a per-channel requant epilogue whose (multiplier, shift) pairs come from
``numerics.quantize_multiplier``; MatMulInteger-style i8 x i4 accumulation; f16 / bf16 rounding
against numpy / ml_dtypes.

The M100's requant (``Machine.tcu_requant = "f32-rne"``) is ONNX QuantizeLinear of the f32 product
``f32(f32(acc) * m)`` with the f32 multiplier ``m = f32(f32(sx * sw) / sy)``, as onnxruntime's
integer kernels compute it: bit-exact against that oracle. The ``fixed-half-up`` mode (a machine
file may select it) rounds the exact fixed-point product half up; against ONNX in real arithmetic
it agrees except where the real product lies within ~2**-31 relative of a .5 boundary -- at most
1 LSB, and only there (checked exactly below)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from m100.sim.testing import hb, run
from m100.targets.m100 import numerics
from m100.targets.m100.isa import Conv2D, DType, Epilogue, MatMul, Requant
from m100.targets.m100.machine import get_machine

#: the fixed-point requant mode, for the tests of its agreement with real arithmetic
FIXED = get_machine("tiny").replace(tcu_requant="fixed-half-up")


def f32_requant_oracle(acc, reals, zy, axis):
    """ONNX QuantizeLinear of the f32 product, element by element in Python: ``m`` (per index
    along ``axis``) an f32, ``round(float(f32(f32(acc) * m)))`` (Python round: half to even)."""
    out = np.empty(acc.shape, np.int64)
    for idx in np.ndindex(acc.shape):
        m = np.float32(reals[idx[axis]])
        q = round(float(np.float32(np.float32(int(acc[idx])) * m)))
        out[idx] = min(max(q + zy, -128), 127)
    return out


def qlinear_matmul_oracle(a, sa, za, b, sb, zb, sy, zy, lo=-128, hi=127):
    """ONNX QLinearMatMul: y = saturate(round_half_even((a - za) @ (b - zb) * sa * sb / sy) + zy),
    b's scale/zero point per output column (per-channel) or scalar; computed with exact rationals."""
    acc = (a.astype(np.int64) - za) @ (b.astype(np.int64) - np.asarray(zb, np.int64))
    n = acc.shape[1]
    sb = np.broadcast_to(np.asarray(sb, np.float64), (n,))
    out = np.empty(acc.shape, np.int64)
    for j in range(n):
        r = Fraction(float(sa)) * Fraction(float(sb[j])) / Fraction(float(sy))
        for i in range(acc.shape[0]):
            v = acc[i, j] * r
            out[i, j] = min(max(round(v) + zy, lo), hi)  # Python round(): half to even
    return out, acc


def _near_tie(acc, real, mult, shift):
    """True where the ISA's fixed-point rounding may legitimately differ from the real one: the
    real and the fixed-point products straddle or sit on a .5 boundary."""
    a = Fraction(int(acc))
    x = a * Fraction(real)
    y = a * Fraction(int(mult), 1 << int(shift))
    fl = lambda v: v - (v.numerator // v.denominator)  # noqa: E731  (fractional part)
    return fl(x) == Fraction(1, 2) or fl(y) == Fraction(1, 2) or \
        ((x - Fraction(1, 2)) // 1) != ((y - Fraction(1, 2)) // 1)


def _per_channel_pairs(reals):
    pairs = [numerics.quantize_multiplier(r) for r in reals]
    return np.array(pairs, np.int64)


@pytest.mark.parametrize("mode", ["f32-rne", "fixed-half-up"])
@pytest.mark.parametrize("unsigned_a", [False, True])
def test_qlinear_matmul_per_channel_on_one_tcu_instruction(rng, unsigned_a, mode):
    m, k, n = 16, 64, 24
    if unsigned_a:
        a_onnx = rng.integers(0, 256, (m, k))
        za_onnx = 131
        a, za = a_onnx - 128, za_onnx - 128  # u8 -> s8: x - 128 on both sides, exact
    else:
        a_onnx = rng.integers(-128, 128, (m, k))
        za_onnx = -7
        a, za = a_onnx, za_onnx
    b = rng.integers(-127, 128, (k, n))  # symmetric per-channel weights (zero point 0)
    sa, sy, zy = np.float32(0.02), np.float32(0.05), 9
    sb = rng.uniform(0.001, 0.01, n).astype(np.float32)
    want, acc_onnx = qlinear_matmul_oracle(a_onnx, sa, za_onnx, b, sb, 0, sy, zy)
    # the compiler's mapping: bias = -za * colsum(b), requant pairs from the real multipliers
    bias = -za * b.sum(axis=0)
    reals = [float(sa) * float(s) / float(sy) for s in sb]
    if mode == "f32-rne":  # onnxruntime's multiplier: f32 product, then f32 quotient
        reals = [float(np.float32(np.float32(sa * s) / sy)) for s in sb]
    pc = _per_channel_pairs(reals)
    A, B = hb(0, 0, DType.I8, (m, k)), hb(0, 2048, DType.I8, (k, n))
    BI, PC = hb(0, 4096, DType.I32, (n,)), hb(0, 4352, DType.I32, (n, 2))
    C = hb(0, 8192, DType.I8, (m, n))
    ep = Epilogue(bias=BI, requant=Requant(zero_point=zy, per_channel=PC))
    res, (c,) = run([MatMul(0, A, B, C, m, n, k, epilogue=ep)],
                    [(A, a), (B, b), (BI, bias), (PC, pc)], [C],
                    machine=FIXED if mode == "fixed-half-up" else "tiny")
    assert res.ok, res.reports
    got = c.reshape(m, n).astype(np.int64)
    if mode == "f32-rne":
        np.testing.assert_array_equal(got, f32_requant_oracle(acc_onnx, reals, zy, 1))
        return
    diff = np.abs(got - want)
    assert diff.max() <= 1
    for i, j in zip(*np.nonzero(diff)):
        assert _near_tie(acc_onnx[i, j], Fraction(reals[j]), pc[j, 0], pc[j, 1]) or \
            want[i, j] in (-128, 127), (i, j)
    assert (diff == 0).mean() >= 0.99


def qlinear_conv_oracle(x, sx, zx, w, sw, bias, sy, zy, pad):
    """ONNX QLinearConv (NCHW, stride 1, symmetric per-output-channel weights, int32 bias of scale
    sx * sw): pads are real zeros, i.e. the quantized value zx; exact integer sum, then requant
    rounding half to even in exact rationals."""
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64) - zx, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    acc = np.zeros((n, f, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            acc[:, :, i, j] = np.einsum("nckl,fckl->nf", xp[:, :, i:i + kh, j:j + kw],
                                        w.astype(np.int64))
    acc += np.asarray(bias, np.int64).reshape(1, f, 1, 1)
    out = np.empty_like(acc)
    for fi in range(f):
        r = Fraction(float(sx)) * Fraction(float(sw[fi])) / Fraction(float(sy))
        out[:, fi] = np.vectorize(lambda v: min(max(round(v * r) + zy, -128), 127))(acc[:, fi])
    return out, acc


@pytest.mark.parametrize("mode", ["f32-rne", "fixed-half-up"])
def test_qlinear_conv_per_channel_on_one_tcu_instruction(rng, mode):
    n, c, h, wd, f = 1, 8, 6, 6, 16
    x = rng.integers(-128, 128, (n, c, h, wd))
    w = rng.integers(-127, 128, (f, c, 3, 3))
    sx, sy, zx, zy = np.float32(0.03), np.float32(0.08), 11, -128
    sw = rng.uniform(0.002, 0.02, f).astype(np.float32)
    b = rng.integers(-3000, 3000, f)
    want, acc_onnx = qlinear_conv_oracle(x, sx, zx, w, sw, b, sy, zy, pad=1)
    # the compiler's mapping: NHWC input pre-padded with zx (a DTDU pad; the TCU pads with 0),
    # HWCF weights, bias - zx * sum(w), per-channel requant pairs
    xn = np.pad(x.transpose(0, 2, 3, 1), ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=zx)
    wh = w.transpose(2, 3, 1, 0)
    bias = b - zx * w.reshape(f, -1).sum(axis=1)
    reals = [float(sx) * float(s) / float(sy) for s in sw]
    if mode == "f32-rne":
        reals = [float(np.float32(np.float32(sx * s) / sy)) for s in sw]
    pc = _per_channel_pairs(reals)
    X, W = hb(0, 0, DType.I8, xn.shape), hb(0, 1024, DType.I8, wh.shape)
    BI, PC = hb(0, 3072, DType.I32, (f,)), hb(0, 3200, DType.I32, (f, 2))
    Y = hb(0, 4096, DType.I8, (n, h, wd, f))
    ep = Epilogue(bias=BI, requant=Requant(zero_point=zy, per_channel=PC))
    inst = Conv2D(0, X, W, Y, n, h + 2, wd + 2, c, f, 3, 3, epilogue=ep)
    res, (y,) = run([inst], [(X, xn), (W, wh), (BI, bias), (PC, pc)], [Y],
                    machine=FIXED if mode == "fixed-half-up" else "tiny")
    assert res.ok, res.reports
    got = y.reshape(n, h, wd, f).transpose(0, 3, 1, 2).astype(np.int64)
    if mode == "f32-rne":
        np.testing.assert_array_equal(got, f32_requant_oracle(acc_onnx, reals, zy, 1))
        return
    diff = np.abs(got - want)
    assert diff.max() <= 1
    for idx in zip(*np.nonzero(diff)):
        fi = idx[1]
        assert _near_tie(acc_onnx[idx], Fraction(reals[fi]), pc[fi, 0], pc[fi, 1]), idx
    assert (diff == 0).mean() >= 0.99


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=2.0**-32, max_value=1.99, allow_nan=False),
       st.lists(st.integers(-(1 << 31), (1 << 31) - 1), min_size=1, max_size=20))
def test_quantize_multiplier_requant_is_onnx_rounding_except_near_ties(real, accs):
    """fixed-half-up requant with quantize_multiplier(real) == round_half_even(acc * real) unless
    near a tie."""
    mult, shift = numerics.quantize_multiplier(real)
    assert 1 << 30 <= mult < 1 << 31 and 0 <= shift <= 63
    assert abs(Fraction(mult, 1 << shift) / Fraction(real) - 1) <= Fraction(1, 1 << 31)
    from m100.sim.semantics import requantize

    acc = np.array(accs, np.int64)
    p = [((a * mult) + (1 << (shift - 1))) >> shift if shift else a * mult for a in accs]
    got = requantize(acc.astype(np.int32), mult, shift, 0, -128, 127,  # the interpreter's
                     "fixed-half-up")
    assert np.array_equal(got, np.clip(p, -128, 127))
    for a, q in zip(accs, p):
        exact = round(Fraction(a) * Fraction(real))
        assert q == exact or (abs(q - exact) == 1 and _near_tie(a, Fraction(real), mult, shift))


def test_quantize_multiplier_rejects_out_of_range():
    for bad in (0.0, -1.0, float("inf"), float("nan"), 2.0**31, 2.0**-40):
        with pytest.raises(ValueError):
            numerics.quantize_multiplier(bad)


def test_matmul_i8_x_i4_like_matmulinteger(rng):
    """MatMulInteger(a, b4, za, 0) with int4 weights: exact i32 accumulation on the TCU (i4 weights
    packed two per byte); the zero point folds into the bias."""
    m, k, n = 8, 32, 12
    a = rng.integers(-128, 128, (m, k))
    b = rng.integers(-8, 8, (k, n))
    za = 5
    want = (a - za) @ b  # ONNX MatMulInteger definition
    A, B = hb(0, 0, DType.I8, (m, k)), hb(0, 512, DType.I4, (k, n))
    BI, C = hb(0, 1024, DType.I32, (n,)), hb(0, 2048, DType.I32, (m, n))
    res, (c,) = run([MatMul(0, A, B, C, m, n, k, epilogue=Epilogue(bias=BI))],
                    [(A, a), (B, b), (BI, -za * b.sum(axis=0))], [C])
    assert res.ok
    assert np.array_equal(c.reshape(m, n), want)


def test_f16_bf16_rounding_like_numpy_and_ml_dtypes(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    special = np.array([0.0, -0.0, 1.0, 1.00390625, 1.01171875, 65504.0, 65520.0, 1e-8, 6e-8, 3e38,
                        3.4e38, -3.4e38, np.inf, -np.inf, 2.0**-133, 2.0**-126 * 1.5], np.float32)
    x = np.concatenate([special, rng.standard_normal(2000).astype(np.float32) * 1e3,
                        (rng.standard_normal(2000) * 1e-5).astype(np.float32)])
    with np.errstate(over="ignore"):  # the oracle's own overflow to inf is intended
        assert np.array_equal(numerics.convert(x, DType.F16), x.astype(np.float16))
    want_bf = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(numerics.convert(x, DType.BF16), want_bf)
    nan = numerics.convert(np.array([np.nan], np.float32), DType.BF16)
    assert np.isnan(nan).all()
