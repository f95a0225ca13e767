"""TCU semantics vs independent numpy / Python-int oracles (int8 paths bit-exact)."""

import numpy as np
import pytest

from m100.sim.testing import hb, run
from m100.targets.m100 import numerics
from m100.targets.m100.isa import (Act, Conv2D, DType, Epilogue, MatMul, Requant, Sync)
from m100.targets.m100.machine import get_machine


def requant_oracle(acc, mult, shift, zp, qmin, qmax, mode="f32-rne"):
    """Requant from the ISA text (docs/isa.md section 5), element by element in Python:
    ``fixed-half-up`` with Python integers; ``f32-rne`` as ONNX QuantizeLinear of the f32 product
    (``m`` and ``acc`` converted to f32, one f32 product, Python's round(): half to even)."""
    acc = np.asarray(acc)
    mult = np.broadcast_to(mult, acc.shape)
    shift = np.broadcast_to(shift, acc.shape)
    out = np.empty(acc.shape, dtype=np.int64)
    for idx in np.ndindex(acc.shape):
        s = int(shift[idx])
        if mode == "f32-rne":
            m = np.float32(int(mult[idx]) / 2 ** s)
            q = round(float(np.float32(np.float32(int(acc[idx])) * m)))
        else:
            p = int(acc[idx]) * int(mult[idx])
            q = (p + (1 << (s - 1))) >> s if s > 0 else p
        out[idx] = min(max(q + zp, qmin), qmax)
    return out


MODES = ("f32-rne", "fixed-half-up")


def _machine(mode):
    return get_machine("tiny").replace(tcu_requant=mode)


def i8(rng, shape):
    return rng.integers(-128, 128, shape)


def test_matmul_int8_plain(rng):
    m, k, n = 24, 40, 48
    a, b = i8(rng, (m, k)), i8(rng, (k, n))
    A, B, C = hb(0, 0, DType.I8, (m, k)), hb(0, 2048, DType.I8, (k, n)), hb(0, 8192, DType.I32, (m, n))
    res, (c,) = run([MatMul(0, A, B, C, m, n, k)], [(A, a), (B, b)], [C])
    assert res.ok
    assert np.array_equal(c.reshape(m, n), a @ b)


@pytest.mark.parametrize("mode", MODES)
def test_matmul_int8_bias_relu_requant_per_tensor(rng, mode):
    m, k, n = 16, 64, 32
    a, b = i8(rng, (m, k)), i8(rng, (k, n))
    bias = rng.integers(-5000, 5000, n)
    A, B = hb(0, 0, DType.I8, (m, k)), hb(0, 1024, DType.I8, (k, n))
    BI, C = hb(0, 4096, DType.I32, (n,)), hb(0, 8192, DType.I8, (m, n))
    ep = Epilogue(bias=BI, act=Act.RELU, requant=Requant(multiplier=1234567, shift=31, zero_point=-3))
    res, (c,) = run([MatMul(0, A, B, C, m, n, k, epilogue=ep)], [(A, a), (B, b), (BI, bias)], [C],
                    machine=_machine(mode))
    assert res.ok
    acc = np.maximum(a @ b + bias, 0)
    assert np.array_equal(c.reshape(m, n), requant_oracle(acc, 1234567, 31, -3, -128, 127, mode))


# acc, then the result by the ONNX definition (f32-rne) and by the fixed-point one, worked by hand
# with m = 0.5 (multiplier 2**30, shift 31) and zero point 0: ties go to even / up; saturation
_TIES = [(3, 2, 2), (5, 2, 3), (-3, -2, -1), (-5, -2, -2), (7, 4, 4), (-1, 0, 0), (1, 0, 1),
         (253, 126, 127), (255, 127, 127), (257, 127, 127), (-257, -128, -128),
         (-255, -128, -127), ((1 << 31) - 1, 127, 127), (-(1 << 31), -128, -128)]


@pytest.mark.parametrize("mode", MODES)
def test_requant_half_way_cases_and_saturation(mode):
    """Ties of ``acc * 0.5``: the M100's f32-rne rounds half to even (ONNX QuantizeLinear),
    fixed-half-up rounds half up; both saturate to [-128, 127] (qmin/qmax). And the case where
    only the f32 product is a tie: acc = -2903, m = f32(f32(xs * ws) / ys) (onnxruntime's
    multiplier of test_quant_e2e): the exact product is -87.49999805, the f32 product -87.5."""
    f = np.float32
    m = f(f(f(0.046575177) * f(0.051239517)) / f(0.07917691))
    mult, shift = numerics.quantize_multiplier(float(m))
    accs = np.array([a for a, _, _ in _TIES] + [-2903, 2903], np.int64)
    want = [r if mode == "f32-rne" else q for _, r, q in _TIES] + \
        ([-88, 88] if mode == "f32-rne" else [-87, 87])
    pairs = [(1 << 30, 31)] * len(_TIES) + [(mult, shift)] * 2

    def tcu(acc, pc_pairs=None, mm=0, sh=0):
        """One MatMul whose accumulator row is ``acc`` (A = 0, the bias = acc), requantized."""
        n = len(acc)
        A, B = hb(0, 0, DType.I8, (1, 1)), hb(0, 64, DType.I8, (1, n))
        BI, C, PC = hb(0, 128, DType.I32, (n,)), hb(0, 512, DType.I8, (1, n)), \
            hb(0, 1024, DType.I32, (n, 2))
        rq = Requant(zero_point=0, per_channel=PC) if pc_pairs is not None else \
            Requant(multiplier=mm, shift=sh, zero_point=0)
        data = [(A, [0]), (B, np.zeros(n)), (BI, acc)] + \
            ([(PC, np.array(pc_pairs).reshape(-1))] if pc_pairs is not None else [])
        res, (c,) = run([MatMul(0, A, B, C, 1, n, 1, epilogue=Epilogue(bias=BI, requant=rq))],
                        data, [C], machine=_machine(mode))
        assert res.ok
        return [int(v) for v in c]

    k = len(_TIES)
    assert tcu(accs, pc_pairs=pairs) == want  # per channel
    assert tcu(accs[:k], mm=1 << 30, sh=31) + tcu(accs[k:], mm=mult, sh=shift) == want
    assert np.array_equal(requant_oracle(accs[:len(_TIES)], 1 << 30, 31, 0, -128, 127, mode),
                          want[:len(_TIES)])


@pytest.mark.parametrize("mode", MODES)
def test_matmul_int8_requant_per_channel_and_clamp(rng, mode):
    m, k, n = 8, 32, 16
    a, b = i8(rng, (m, k)), i8(rng, (k, n))
    mult = rng.integers(1 << 20, 1 << 30, n)
    shift = rng.integers(20, 40, n)
    pc = np.stack([mult, shift], axis=1)
    A, B = hb(0, 0, DType.I8, (m, k)), hb(0, 512, DType.I8, (k, n))
    PC, C = hb(0, 2048, DType.I32, (n, 2)), hb(0, 4096, DType.I8, (m, n))
    ep = Epilogue(act=Act.CLAMP, clamp_lo=-3000.5, clamp_hi=2000.0,
                  requant=Requant(zero_point=5, qmin=-100, qmax=100, per_channel=PC))
    res, (c,) = run([MatMul(0, A, B, C, m, n, k, epilogue=ep)], [(A, a), (B, b), (PC, pc)], [C],
                    machine=_machine(mode))
    assert res.ok
    acc = np.clip(a @ b, -3000, 2000)
    want = requant_oracle(acc, mult[None, :], shift[None, :], 5, -100, 100, mode)
    assert np.array_equal(c.reshape(m, n), want)


def test_matmul_accumulate_and_blocks(rng):
    m, k, n = 32, 16, 8
    a, b, c0 = i8(rng, (m, k)), i8(rng, (k, n)), rng.integers(-10**6, 10**6, (m, n))
    A, B, C = hb(0, 0, DType.I8, (m, k)), hb(0, 1024, DType.I8, (k, n)), hb(0, 2048, DType.I32, (m, n))
    res, (c,) = run([MatMul(0, A, B, C, m, n, k, accumulate=True, sync=Sync(blocks=4))],
                    [(A, a), (B, b), (C, c0)], [C])
    assert res.ok
    assert np.array_equal(c.reshape(m, n), c0 + a @ b)
    assert len(res.records[0].blocks) == 4


def test_matmul_int32_wraps(rng):
    m, k, n = 2, 4, 2
    a = np.full((m, k), -128)
    b = np.full((k, n), -128)
    c0 = np.full((m, n), 2**31 - 10)
    A, B, C = hb(0, 0, DType.I8, (m, k)), hb(0, 64, DType.I8, (k, n)), hb(0, 128, DType.I32, (m, n))
    res, (c,) = run([MatMul(0, A, B, C, m, n, k, accumulate=True)], [(A, a), (B, b), (C, c0)], [C])
    want = ((c0 + a @ b + 2**31) % 2**32) - 2**31
    assert np.array_equal(c.reshape(m, n), want)


def test_matmul_i4_weights(rng):
    m, k, n = 8, 16, 6
    a, b = i8(rng, (m, k)), rng.integers(-8, 8, (k, n))
    A, B, C = hb(0, 0, DType.I8, (m, k)), hb(0, 512, DType.I4, (k, n)), hb(0, 1024, DType.I32, (m, n))
    res, (c, braw) = run([MatMul(0, A, B, C, m, n, k)], [(A, a), (B, b)], [C, B])
    assert np.array_equal(braw.reshape(k, n), b)
    assert np.array_equal(c.reshape(m, n), a @ b)


@pytest.mark.parametrize("dt", [DType.F32, DType.F16, DType.BF16])
def test_matmul_float(rng, dt):
    m, k, n = 8, 32, 16
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    a_q, b_q = numerics.convert(a, dt).astype(np.float32), numerics.convert(b, dt).astype(np.float32)
    A, B = hb(0, 0, dt, (m, k)), hb(0, 4096, dt, (k, n))
    BI, C = hb(0, 8192, DType.F32, (n,)), hb(0, 12288, dt, (m, n))
    ep = Epilogue(bias=BI, act=Act.GELU)
    res, (c,) = run([MatMul(0, A, B, C, m, n, k, epilogue=ep)], [(A, a), (B, b), (BI, bias)], [C])
    x = (a_q.astype(np.float64) @ b_q.astype(np.float64)) + bias
    import math
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))(x)
    tol = {DType.F32: 1e-4, DType.F16: 2e-3, DType.BF16: 1.6e-2}[dt]
    np.testing.assert_allclose(c.reshape(m, n).astype(np.float64), gelu, rtol=tol, atol=tol)
    # the stored value is exactly representable in the output type
    assert np.array_equal(numerics.convert(c, dt).astype(np.float32), c.astype(np.float32))


def conv_oracle(x, w, stride, pad, dil, groups):
    """Direct convolution by kernel-offset slicing (NHWC, HWIO weights)."""
    n, h, wd, c = x.shape
    kh, kw, cg, f = w.shape
    sh, sw = stride
    dh, dw = dil
    pt, pl, pb, pr = pad
    xp = np.pad(x.astype(np.int64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    fg = f // groups
    y = np.zeros((n, oh, ow, f), dtype=np.int64)
    for g in range(groups):
        for ky in range(kh):
            for kx in range(kw):
                patch = xp[:, ky * dh: ky * dh + sh * (oh - 1) + 1: sh,
                           kx * dw: kx * dw + sw * (ow - 1) + 1: sw, g * cg:(g + 1) * cg]
                y[..., g * fg:(g + 1) * fg] += patch @ w[ky, kx, :, g * fg:(g + 1) * fg].astype(np.int64)
    return y


@pytest.mark.parametrize("cfg", [
    dict(n=1, h=7, w=9, c=4, f=6, k=(3, 3), stride=(1, 1), pad=(1, 1, 1, 1), dil=(1, 1), g=1),
    dict(n=2, h=9, w=8, c=6, f=4, k=(3, 2), stride=(2, 1), pad=(0, 1, 2, 0), dil=(1, 2), g=2),
    dict(n=1, h=8, w=8, c=8, f=8, k=(3, 3), stride=(2, 2), pad=(1, 1, 1, 1), dil=(1, 1), g=8),
    dict(n=1, h=10, w=10, c=4, f=4, k=(3, 3), stride=(1, 1), pad=(2, 2, 2, 2), dil=(2, 2), g=4),
])
def test_conv2d_int8(rng, cfg):
    n, h, wd, c, f = cfg["n"], cfg["h"], cfg["w"], cfg["c"], cfg["f"]
    kh, kw = cfg["k"]
    g = cfg["g"]
    x, w = i8(rng, (n, h, wd, c)), i8(rng, (kh, kw, c // g, f))
    conv = Conv2D(0, hb(0, 0, DType.I8, (n, h, wd, c)), hb(0, 4096, DType.I8, (kh, kw, c // g, f)),
                  hb(0, 0, DType.I32, (1,)), n, h, wd, c, f, kh, kw, cfg["stride"], cfg["pad"],
                  cfg["dil"], g)
    oh, ow = conv.out_hw
    Y = hb(0, 8192, DType.I32, (n, oh, ow, f))
    conv = Conv2D(0, conv.x, conv.w, Y, n, h, wd, c, f, kh, kw, cfg["stride"], cfg["pad"],
                  cfg["dil"], g, sync=Sync(blocks=n * oh))
    for _ in range(2):  # the second run uses what the first kept on the instruction
        res, (y,) = run([conv], [(conv.x, x), (conv.w, w)], [Y])
        assert res.ok, res.reports
        assert np.array_equal(y.reshape(n, oh, ow, f), conv_oracle(
            x, w, cfg["stride"], cfg["pad"], cfg["dil"], g))


@pytest.mark.parametrize("mode", MODES)
def test_conv2d_requant_relu(rng, mode):
    n, h, wd, c, f = 1, 6, 6, 8, 16
    x, w = i8(rng, (n, h, wd, c)), i8(rng, (3, 3, c, f))
    bias = rng.integers(-2000, 2000, f)
    X, W = hb(0, 0, DType.I8, (n, h, wd, c)), hb(0, 1024, DType.I8, (3, 3, c, f))
    BI, Y = hb(0, 4096, DType.I32, (f,)), hb(0, 8192, DType.I8, (n, 6, 6, f))
    ep = Epilogue(bias=BI, act=Act.RELU, requant=Requant(multiplier=19, shift=10, zero_point=-128))
    res, (y,) = run([Conv2D(0, X, W, Y, n, h, wd, c, f, 3, 3, pad=(1, 1, 1, 1), epilogue=ep)],
                    [(X, x), (W, w), (BI, bias)], [Y], machine=_machine(mode))
    acc = np.maximum(conv_oracle(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1) + bias, 0)
    assert np.array_equal(y.reshape(n, 6, 6, f),
                          requant_oracle(acc, 19, 10, -128, -128, 127, mode))


def test_matmul_f16_with_i4_weights(rng):
    m, k, n = 4, 16, 8
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.integers(-8, 8, (k, n))
    A, B, C = hb(0, 0, DType.F16, (m, k)), hb(0, 512, DType.I4, (k, n)), hb(0, 1024, DType.F32, (m, n))
    res, (c,) = run([MatMul(0, A, B, C, m, n, k)], [(A, a), (B, b)], [C])
    assert res.ok
    np.testing.assert_allclose(c.reshape(m, n), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block", [4, 16])
def test_matmul_f16_dequantizes_i4_weights_on_the_fly(rng, block):
    """W4A16: B = f16(q * scale[k // block, n]) (ONNX DequantizeLinear, axis 0, block_size), then
    the f16 product accumulated in f32 and rounded once; oracle written from those definitions."""
    m, k, n = 3, 32, 10
    a = rng.standard_normal((m, k)).astype(np.float16)
    q = rng.integers(-8, 8, (k, n))
    s = (rng.random((k // block, n)) * 0.1 + 0.01).astype(np.float16)
    A, B = hb(0, 0, DType.F16, (m, k)), hb(0, 512, DType.I4, (k, n))
    S, C = hb(0, 1024, DType.F16, (k // block, n)), hb(0, 2048, DType.F16, (m, n))
    res, (c,) = run([MatMul(0, A, B, C, m, n, k, scale=S, block=block)], [(A, a), (B, q), (S, s)],
                    [C])
    assert res.ok
    w = np.empty((k, n), np.float16)
    for kk in range(k):
        for nn in range(n):
            w[kk, nn] = np.float16(float(q[kk, nn]) * float(s[kk // block, nn]))
    want = (a.astype(np.float32) @ w.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(c.reshape(m, n), want)
    # the scales are applied: the integer-valued product is far from it
    assert not np.allclose((a.astype(np.float32) @ q).astype(np.float16), want)


def test_matmul_dequant_scale_rules():
    from m100.targets.m100.isa_base import IsaError
    from m100.targets.m100.machine import get_machine
    A, B = hb(0, 0, DType.F16, (2, 8)), hb(0, 512, DType.I4, (8, 4))
    C = hb(0, 1024, DType.F16, (2, 4))
    with pytest.raises(IsaError, match="block"):  # block must divide k
        MatMul(0, A, B, C, 2, 4, 8, scale=hb(0, 2048, DType.F16, (1, 4)), block=3).check(
            get_machine("m100"))
    with pytest.raises(IsaError, match="i4 weights"):  # f16 weights are not dequantized
        MatMul(0, A, hb(0, 512, DType.F16, (8, 4)), C, 2, 4, 8,
               scale=hb(0, 2048, DType.F16, (2, 4)), block=4).check(get_machine("m100"))


def test_matmul_last_k_chunk_adds_the_f32_accumulator_and_rounds_once(rng):
    """A K-split f16 contraction: chunk 0 writes f32 partial sums, the last chunk reads them from
    ``acc`` and rounds the total to f16 once (vs numpy from the definition)."""
    m, k, n = 4, 64, 16
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    A0, A1 = hb(0, 0, DType.F16, (m, 32)), hb(0, 512, DType.F16, (m, 32))
    B0, B1 = hb(0, 1024, DType.F16, (32, n)), hb(0, 2048, DType.F16, (32, n))
    P, C = hb(0, 4096, DType.F32, (m, n)), hb(0, 8192, DType.F16, (m, n))
    prog = [MatMul(0, A0, B0, P, m, n, 32),
            MatMul(0, A1, B1, C, m, n, 32, accumulate=True, acc=P)]
    res, (c,) = run(prog, [(A0, a[:, :32]), (A1, a[:, 32:]), (B0, b[:32]), (B1, b[32:])], [C])
    assert res.ok
    f32 = np.float32
    part = a[:, :32].astype(f32) @ b[:32].astype(f32)
    want = (part + a[:, 32:].astype(f32) @ b[32:].astype(f32)).astype(np.float16)
    np.testing.assert_array_equal(c.reshape(m, n), want)


def test_convs_with_the_same_padded_shape_but_other_interiors(rng):
    """Two convs in one run whose zero-padded inputs have the same shape ([1, 10, 10, 4]) but
    different interiors: B (10x10, no padding) fills row/column 0, which is A's padding (8x8,
    padding 1). Each equals the oracle, so a padded scratch buffer shared by B and A (row 0 not
    zero any more) would fail here."""
    c, f = 4, 4
    xb, wb = i8(rng, (1, 10, 10, c)), i8(rng, (1, 1, c, f))
    xa, wa = i8(rng, (1, 8, 8, c)), i8(rng, (3, 3, c, f))
    XB, WB, YB = (hb(0, 0, DType.I8, (1, 10, 10, c)), hb(0, 512, DType.I8, (1, 1, c, f)),
                  hb(0, 1024, DType.I32, (1, 10, 10, f)))
    XA, WA, YA = (hb(0, 4096, DType.I8, (1, 8, 8, c)), hb(0, 4608, DType.I8, (3, 3, c, f)),
                  hb(0, 8192, DType.I32, (1, 8, 8, f)))
    convb = Conv2D(0, XB, WB, YB, 1, 10, 10, c, f, 1, 1, sync=Sync(blocks=2))
    conva = Conv2D(0, XA, WA, YA, 1, 8, 8, c, f, 3, 3, pad=(1, 1, 1, 1), sync=Sync(blocks=4))
    res, (yb, ya) = run([convb, conva], [(XB, xb), (WB, wb), (XA, xa), (WA, wa)], [YB, YA])
    assert res.ok, res.reports
    assert np.array_equal(yb.reshape(1, 10, 10, f),
                          conv_oracle(xb, wb, (1, 1), (0, 0, 0, 0), (1, 1), 1))
    assert np.array_equal(ya.reshape(1, 8, 8, f),
                          conv_oracle(xa, wa, (1, 1), (1, 1, 1, 1), (1, 1), 1))


def _dequant_oracle(acc, scale, out_np):
    """Epilogue.dequant from the ISA text, element by element: f32(acc) (round to nearest even),
    times the f32 scale of its column (one f32 rounding), converted to the result type (RNE)."""
    out = np.empty(acc.shape, dtype=out_np)
    for (i, j), v in np.ndenumerate(acc):
        out[i, j] = out_np(np.float32(np.float32(int(v)) * np.float32(scale[j])))
    return out


@pytest.mark.parametrize("ct", [DType.F16, DType.F32])
def test_matmul_int8_dequant_per_channel(rng, ct):
    """i8 x i8 -> i32 -> f32 * scale[n] -> f16/f32 in the TCU epilogue (W8A8 projections), with
    a bias and relu before it; accumulators beyond 2**24 (the f32 conversion rounds) via the bias."""
    m, k, n = 8, 64, 16
    a, b = i8(rng, (m, k)), i8(rng, (k, n))
    bias = rng.integers(-(1 << 26), 1 << 26, n)
    scale = (rng.standard_normal(n) * 1e-4).astype(np.float32)
    A, B = hb(0, 0, DType.I8, (m, k)), hb(0, 1024, DType.I8, (k, n))
    BI, S = hb(0, 2048, DType.I32, (n,)), hb(0, 2176, DType.F32, (n,))
    C = hb(0, 4096, ct, (m, n))
    ep = Epilogue(bias=BI, act=Act.RELU, dequant=S)
    res, (c,) = run([MatMul(0, A, B, C, m, n, k, epilogue=ep)],
                    [(A, a), (B, b), (BI, bias), (S, scale)], [C])
    assert res.ok
    acc = np.maximum(a @ b + bias[None, :], 0)
    want = _dequant_oracle(acc, scale, np.float16 if ct is DType.F16 else np.float32)
    assert np.array_equal(c.reshape(m, n).astype(want.dtype), want)
    assert np.any(np.abs(acc) > 1 << 24) and np.all(np.isfinite(want))


def test_matmul_int8_dequant_k_chunks_through_acc(rng):
    """A K-split integer chain: chunk 1 writes i32 to ``acc``, chunk 2 accumulates it and
    dequantizes once into the f16 C (the result equals the whole-K dequantization)."""
    m, k, n = 8, 64, 16
    a, b = i8(rng, (m, k)), i8(rng, (k, n))
    scale = (rng.random(n) * 1e-2 + 1e-3).astype(np.float32)
    h = k // 2
    A1, A2 = hb(0, 0, DType.I8, (m, h)), hb(0, 256, DType.I8, (m, h))
    B1, B2 = hb(0, 512, DType.I8, (h, n)), hb(0, 1024, DType.I8, (h, n))
    ACC, S, C = hb(0, 2048, DType.I32, (m, n)), hb(0, 2560, DType.F32, (n,)), \
        hb(0, 3072, DType.F16, (m, n))
    insts = [MatMul(0, A1, B1, ACC, m, n, h),
             MatMul(0, A2, B2, C, m, n, h, accumulate=True, epilogue=Epilogue(dequant=S),
                    acc=ACC)]
    res, (c,) = run(insts, [(A1, a[:, :h]), (A2, a[:, h:]), (B1, b[:h]), (B2, b[h:]), (S, scale)],
                    [C])
    assert res.ok
    assert np.array_equal(c.reshape(m, n).astype(np.float16),
                          _dequant_oracle(a @ b, scale, np.float16))


@pytest.mark.parametrize("what", ["i32-result", "float-operands", "f16-scale", "with-requant",
                                  "accumulate-onto-c"])
def test_matmul_dequant_refusals(what):
    from m100.targets.m100.isa import IsaError
    m, k, n = 4, 8, 4
    fl = what == "float-operands"
    A = hb(0, 0, DType.F16 if fl else DType.I8, (m, k))
    B = hb(0, 256, DType.F16 if fl else DType.I8, (k, n))
    C = hb(0, 512, DType.I32 if what == "i32-result" else DType.F16, (m, n))
    S = hb(0, 1024, DType.F16 if what == "f16-scale" else DType.F32, (n,))
    rq = Requant(per_channel=None) if what == "with-requant" else None
    ep = Epilogue(dequant=S, requant=rq)
    inst = MatMul(0, A, B, C, m, n, k, accumulate=what == "accumulate-onto-c", epilogue=ep)
    with pytest.raises(IsaError):
        inst.check(get_machine("tiny"))


def _conv_1x1_case(seed):
    """A random 1x1 conv: shape, stride, pads (bottom/right pads make windows outside x), groups,
    block split, x a channel slice of a wider tensor or contiguous."""
    r = np.random.default_rng(seed)
    n, h, wd = int(r.integers(1, 3)), int(r.integers(1, 8)), int(r.integers(1, 8))
    g = int(r.choice([1, 1, 2]))
    c, f = g * int(r.integers(1, 5)), g * int(r.integers(1, 4))
    stride = (int(r.integers(1, 4)), int(r.integers(1, 4)))
    pad = tuple(int(v) for v in (r.integers(0, 2, 4) if r.random() < 0.5 else (0, 0, 0, 0)))
    wide = c + int(r.integers(0, 3))
    return n, h, wd, c, f, g, stride, pad, wide, r


@pytest.mark.parametrize("dt", [DType.I8, DType.F16, DType.F32])
@pytest.mark.parametrize("seed", range(25))
def test_conv2d_1x1_box_as_im2col_matrix(seed, dt):
    """1x1 convs (a block whose windows are all inside x reads its box straight as the im2col
    matrix; blocks touching padding take the padded path): int8 equals the integer oracle;
    every type gives the same output bytes as the index path (``twu.STRIDED = False``, which
    gathers x by a flat index array), across strides, pads, groups, block splits and a channel
    slice x; two runs (the second uses what the first kept on the instruction)."""
    from m100.sim import twu
    from m100.targets.m100.isa import Space, Walk

    n, h, wd, c, f, g, stride, pad, wide, r = _conv_1x1_case(seed)
    proto = Conv2D(0, hb(0, 0, dt, (1,)), hb(0, 0, dt, (1,)), hb(0, 0, dt, (1,)), n, h, wd, c, f,
                   1, 1, stride, pad, (1, 1), g)
    oh, ow = proto.out_hw
    rows = n * oh
    blocks = int(r.choice([d for d in range(1, rows + 1) if rows % d == 0]))
    X = Walk.strided(Space.HBSM, 0, 0, dt, (n, h, wd, c), (h * wd * wide, wd * wide, wide, 1))
    XALL = hb(0, 0, dt, (n * h * wd * wide,))
    W = hb(0, 8192, dt, (1, 1, c // g, f))
    ydt = DType.I32 if dt is DType.I8 else dt
    Y = hb(0, 16384, ydt, (n, oh, ow, f))
    conv = Conv2D(0, X, W, Y, n, h, wd, c, f, 1, 1, stride, pad, (1, 1), g,
                  sync=Sync(blocks=blocks))
    if dt is DType.I8:
        xall, w = i8(r, (n, h, wd, wide)), i8(r, (1, 1, c // g, f))
    else:
        xall = r.standard_normal((n, h, wd, wide)).astype(np.float32)
        w = r.standard_normal((1, 1, c // g, f)).astype(np.float32)
    outs = []
    for strided in (True, True, False):
        twu.STRIDED = strided
        try:
            res, (y,) = run([conv], [(XALL, xall), (W, w)], [Y])
        finally:
            twu.STRIDED = True
        assert res.ok, res.reports
        outs.append(np.asarray(y).tobytes())
    assert outs[0] == outs[1] == outs[2]
    if dt is DType.I8:
        assert np.array_equal(y.reshape(n, oh, ow, f),
                              conv_oracle(xall[..., :c], w, stride, pad, (1, 1), g))


@pytest.mark.parametrize("accumulate", [False, True])
def test_float_conv_on_another_tpb_reads_its_own_operands(rng, accumulate):
    """A float conv (bias, relu, accumulate) on TPB 1 reads its weights, bias and old output from
    TPB 1's HBSM while TPB 0 holds other values at the same addresses (session 33: the weights and
    bias are read without an access object; a mutant reading TPB 0's fails), against numpy."""
    n, h, wd, c, f, t = 1, 5, 6, 4, 3, 1
    x = rng.standard_normal((n, h, wd, c)).astype(np.float32)
    w = rng.standard_normal((3, 3, c, f)).astype(np.float32)
    bias = rng.standard_normal(f).astype(np.float32)
    old = rng.standard_normal((n, h, wd, f)).astype(np.float32)
    X, W = hb(t, 0, DType.F32, (n, h, wd, c)), hb(t, 1024, DType.F32, (3, 3, c, f))
    BI, Y = hb(t, 2048, DType.F32, (f,)), hb(t, 4096, DType.F32, (n, h, wd, f))
    decoys = [(hb(0, 1024, DType.F32, (3, 3, c, f)), -w), (hb(0, 2048, DType.F32, (f,)), bias + 5),
              (hb(0, 4096, DType.F32, (n, h, wd, f)), old + 7)]
    conv = Conv2D(t, X, W, Y, n, h, wd, c, f, 3, 3, pad=(1, 1, 1, 1), accumulate=accumulate,
                  epilogue=Epilogue(bias=BI, act=Act.RELU))
    res, (y,) = run([conv], [(X, x), (W, w), (BI, bias), (Y, old)] + decoys, [Y])
    assert res.ok, res.reports
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((n, h, wd, f), dtype=np.float64)
    for ky in range(3):
        for kx in range(3):
            want += xp[:, ky:ky + h, kx:kx + wd, :].astype(np.float64) @ w[ky, kx].astype(np.float64)
    want += bias + (old if accumulate else 0)
    np.testing.assert_allclose(y.reshape(n, h, wd, f), np.maximum(want, 0), rtol=1e-5, atol=1e-5)
