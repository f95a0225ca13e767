"""CVU pipelines vs numpy oracles written from the op definitions (float64 reference)."""

import math

import numpy as np
import pytest

from m100.sim.testing import hb, run
from m100.targets.m100.isa import CvuOp, CvuPipeline, DType, Ref, RefKind, Stage, Sync

IN0, IN1, IN2 = (Ref(RefKind.INPUT, i) for i in range(3))


def S(i):
    return Ref(RefKind.STAGE, i)


def IMM(v):
    return Ref(RefKind.IMM, imm=v)


_erf = np.vectorize(math.erf)

UNARY = {
    CvuOp.COPY: lambda x: x, CvuOp.NEG: lambda x: -x, CvuOp.ABS: np.abs, CvuOp.EXP: np.exp,
    CvuOp.LOG: np.log, CvuOp.SQRT: np.sqrt, CvuOp.RSQRT: lambda x: 1 / np.sqrt(x),
    CvuOp.RECIP: lambda x: 1 / x, CvuOp.RELU: lambda x: np.maximum(x, 0),
    CvuOp.GELU: lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    CvuOp.SILU: lambda x: x / (1 + np.exp(-x)), CvuOp.SIGMOID: lambda x: 1 / (1 + np.exp(-x)),
    CvuOp.TANH: np.tanh, CvuOp.SQUARE: lambda x: x * x, CvuOp.ERF: _erf, CvuOp.FLOOR: np.floor,
    CvuOp.CEIL: np.ceil, CvuOp.SIN: np.sin, CvuOp.COS: np.cos, CvuOp.ATAN: np.arctan,
    CvuOp.SIGN: np.sign, CvuOp.ROUND: np.round,
}
BINARY = {
    CvuOp.ADD: np.add, CvuOp.SUB: np.subtract, CvuOp.MUL: np.multiply, CvuOp.DIV: np.divide,
    CvuOp.MAX: np.maximum, CvuOp.MIN: np.minimum, CvuOp.POW: np.power,
    CvuOp.CMP_GT: lambda a, b: (a > b) * 1.0, CvuOp.CMP_GE: lambda a, b: (a >= b) * 1.0,
    CvuOp.CMP_EQ: lambda a, b: (a == b) * 1.0,
}


def cvu(inputs, shapes, out_shape, stages, out_dtype=DType.F32, blocks=1, in_dtype=DType.F32):
    walks, base, data = [], 0, []
    for x, s in zip(inputs, shapes):
        w = hb(0, base, in_dtype, s)
        walks.append(w)
        data.append((w, x))
        base += 8192
    out = hb(0, base, out_dtype, out_shape)
    inst = CvuPipeline(0, tuple(walks), tuple(tuple(s) for s in shapes), out, tuple(out_shape),
                       tuple(stages), sync=Sync(blocks=blocks))
    res, (y,) = run([inst], data, [out])
    assert res.ok, res.reports
    return y.reshape(out_shape)


@pytest.mark.parametrize("op", list(UNARY))
def test_unary(rng, op):
    x = rng.standard_normal((4, 16)).astype(np.float32) * 2
    if op in (CvuOp.LOG, CvuOp.SQRT, CvuOp.RSQRT):
        x = np.abs(x) + 0.1
    y = cvu([x], [(4, 16)], (4, 16), [Stage(op, (IN0,))])
    np.testing.assert_allclose(y, UNARY[op](x.astype(np.float64)), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("op", list(BINARY))
def test_binary_broadcast(rng, op):
    a = rng.standard_normal((4, 8)).astype(np.float32)
    b = rng.standard_normal((1, 8)).astype(np.float32)
    if op is CvuOp.POW:
        a = np.abs(a) + 0.5
    if op is CvuOp.CMP_EQ:
        b[0, :4] = a[0, :4]
    y = cvu([a, b], [(4, 8), (1, 8)], (4, 8), [Stage(op, (IN0, IN1))])
    np.testing.assert_allclose(y, BINARY[op](a.astype(np.float64), b.astype(np.float64)), rtol=2e-6)


def test_select_and_immediates(rng):
    c = (rng.standard_normal((3, 5)) > 0).astype(np.float32)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    y = cvu([c, a, b], [(3, 5)] * 3, (3, 5),
            [Stage(CvuOp.SELECT, (IN0, IN1, IN2)), Stage(CvuOp.MUL, (S(0), IMM(2.5)))])
    np.testing.assert_allclose(y, np.where(c != 0, a, b) * 2.5, rtol=1e-6)


@pytest.mark.parametrize("op,fn", [(CvuOp.RSUM, np.sum), (CvuOp.RMAX, np.max), (CvuOp.RMIN, np.min),
                                   (CvuOp.RMEAN, np.mean), (CvuOp.RPROD, np.prod)])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_reductions(rng, op, fn, axis):
    x = rng.standard_normal((6, 10)).astype(np.float32)
    oshape = list(x.shape)
    oshape[axis] = 1
    y = cvu([x], [(6, 10)], tuple(oshape), [Stage(op, (IN0,), axis=axis)])
    np.testing.assert_allclose(y, fn(x.astype(np.float64), axis=axis, keepdims=True), rtol=1e-5,
                               atol=1e-6)


def test_round_ties_to_even_and_sign_of_zero():
    """ONNX Round rounds halves to the even neighbour; Sign(0) = 0."""
    x = np.array([[-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 2.4999]], np.float32)
    y = cvu([x], [x.shape], x.shape, [Stage(CvuOp.ROUND, (IN0,))])
    np.testing.assert_array_equal(y, [[-2.0, -2.0, -0.0, 0.0, 0.0, 2.0, 2.0, 2.0]])
    y = cvu([x], [x.shape], x.shape, [Stage(CvuOp.SIGN, (IN0,))])
    np.testing.assert_array_equal(y, [[-1, -1, -1, 0, 1, 1, 1, 1]])


def test_softmax_int8_output(rng):
    x = rng.standard_normal((8, 32)).astype(np.float32) * 3
    y = cvu([x], [(8, 32)], (8, 32), [Stage(CvuOp.SOFTMAX, (IN0,), axis=1),
                                      Stage(CvuOp.MUL, (S(0), IMM(127.0)))], out_dtype=DType.I8,
            blocks=4)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True) * 127
    assert np.abs(y.astype(np.float64) - ref).max() <= 0.5 + 1e-4
    assert y.dtype == np.int8


def test_softmax_f16_rounds_like_its_onnx_body(rng):
    """iparams (F16,): x - max, exp and the sum each rounded to f16 (the ONNX Softmax body of an
    f16 tensor), then the division rounded by the f16 store; without: f32 throughout."""
    x = (rng.standard_normal((8, 40)) * 3).astype(np.float16)
    r16 = lambda v: np.asarray(v, np.float64).astype(np.float16).astype(np.float64)  # noqa: E731
    xd = x.astype(np.float64)
    d = r16(xd - xd.max(axis=1, keepdims=True))
    e = r16(np.exp(d))
    body = (e / r16(e.sum(axis=1, keepdims=True))).astype(np.float16)
    ex = np.exp(xd - xd.max(axis=1, keepdims=True))
    once = (ex / ex.sum(axis=1, keepdims=True)).astype(np.float16)
    assert np.sum(body != once) > 0  # the inputs tell the two apart
    y = cvu([x], [x.shape], x.shape, [Stage(CvuOp.SOFTMAX, (IN0,), axis=1, iparams=(DType.F16,))],
            out_dtype=DType.F16, in_dtype=DType.F16, blocks=2)
    np.testing.assert_array_equal(y, body)
    y = cvu([x], [x.shape], x.shape, [Stage(CvuOp.SOFTMAX, (IN0,), axis=1)],
            out_dtype=DType.F16, in_dtype=DType.F16)
    np.testing.assert_array_equal(y, once)


@pytest.mark.parametrize("op", [CvuOp.ADD, CvuOp.SUB, CvuOp.MUL, CvuOp.DIV])
@pytest.mark.parametrize("dt, npdt", [(DType.F16, np.float16), (DType.BF16, None)])
def test_binary_rounded_to_16_bits(rng, op, dt, npdt):
    """iparams (dtype,) on add/sub/mul/div: the f32 result rounded to that type (RNE) before
    the next stage -- here ``(a op b) * 3`` -- so a chain of 16-bit ops keeps the graph's
    roundings; without iparams the chain stays f32 until the store."""
    a = (rng.standard_normal((4, 32)) * 3).astype(np.float32)
    b = (rng.standard_normal((4, 32)) * 3 + 0.1).astype(np.float32)

    def r(v):  # round to dt, nearest even (bf16: the high 16 bits of f32 after RNE)
        v = np.asarray(v, np.float32)
        if npdt is not None:
            return v.astype(npdt).astype(np.float32)
        u = v.view(np.uint32).astype(np.uint64)
        u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
        return u.astype(np.uint32).view(np.float32)

    f = BINARY[op]
    want = (r(f(a, b)) * np.float32(3)).astype(np.float32)
    once = (f(a, b).astype(np.float32) * np.float32(3)).astype(np.float32)
    assert (want != once).any()
    st = [Stage(op, (IN0, IN1), iparams=(dt,)), Stage(CvuOp.MUL, (S(0), IMM(3.0)))]
    np.testing.assert_array_equal(cvu([a, b], [(4, 32)] * 2, (4, 32), st), want)
    st = [Stage(op, (IN0, IN1)), Stage(CvuOp.MUL, (S(0), IMM(3.0)))]
    np.testing.assert_array_equal(cvu([a, b], [(4, 32)] * 2, (4, 32), st), once)


@pytest.mark.parametrize("op, ip, ins", [(CvuOp.MAX, (DType.F16,), "f"), (CvuOp.MUL, (7,), "f"),
                                         (CvuOp.MUL, (DType.F16, 1), "f"),
                                         (CvuOp.MUL, (DType.F16,), "i")])
def test_binary_rounding_refused(rng, op, ip, ins):
    """A rounding type only on float add/sub/mul/div, one of F16 / BF16: else one fault."""
    idt = DType.I32 if ins == "i" else DType.F32
    x = np.arange(8, dtype=np.int32 if ins == "i" else np.float32).reshape(2, 4)
    w = hb(0, 0, idt, (2, 4))
    out = hb(0, 4096, idt, (2, 4))
    inst = CvuPipeline(0, (w,), ((2, 4),), out, (2, 4), (Stage(op, (IN0, IN0), iparams=ip),))
    res, _ = run([inst], [(w, x)], [])
    assert [r.kind for r in res.reports] == ["fault"]
    assert "iparams" in res.reports[0].message


def test_layernorm_rmsnorm(rng):
    x = rng.standard_normal((4, 16)).astype(np.float32)
    g = rng.standard_normal(16).astype(np.float32)
    bt = rng.standard_normal(16).astype(np.float32)
    y = cvu([x, g, bt], [(4, 16), (16,), (16,)], (4, 16),
            [Stage(CvuOp.LAYERNORM, (IN0, IN1, IN2), axis=-1, fparam=1e-5)], blocks=2)
    xd = x.astype(np.float64)
    mu, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
    np.testing.assert_allclose(y, (xd - mu) / np.sqrt(var + 1e-5) * g + bt, rtol=1e-4, atol=1e-5)
    y = cvu([x, g], [(4, 16), (16,)], (4, 16), [Stage(CvuOp.RMSNORM, (IN0, IN1), fparam=1e-6)])
    np.testing.assert_allclose(y, xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + 1e-6) * g,
                               rtol=1e-4, atol=1e-5)


def pool_oracle(x, k, s, pad, is_max, include_pad=False):
    n, h, w, c = x.shape
    kh, kw = k
    pt, pl, pb, pr = pad
    oh, ow = (h + pt + pb - kh) // s[0] + 1, (w + pl + pr - kw) // s[1] + 1
    y = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s[0] - pt, j * s[1] - pl
            rs, cs = max(r0, 0), max(c0, 0)
            re, ce = min(r0 + kh, h), min(c0 + kw, w)
            win = x[:, rs:re, cs:ce, :]
            if is_max:
                y[:, i, j] = win.max(axis=(1, 2))
            else:
                y[:, i, j] = win.sum(axis=(1, 2)) / (kh * kw if include_pad else win.shape[1] * win.shape[2])
    return y


@pytest.mark.parametrize("is_max", [True, False])
@pytest.mark.parametrize("include_pad", [0, 1])
def test_pooling_int8(rng, is_max, include_pad):
    x = rng.integers(-128, 128, (1, 7, 6, 3))
    ip = (3, 2, 2, 2, 1, 1, 1, 0, include_pad)
    ref = pool_oracle(x.astype(np.float64), (3, 2), (2, 2), (1, 1, 1, 0), is_max, bool(include_pad))
    y = cvu([x], [(1, 7, 6, 3)], ref.shape,
            [Stage(CvuOp.MAXPOOL if is_max else CvuOp.AVGPOOL, (IN0,), iparams=ip)],
            out_dtype=DType.I8, in_dtype=DType.I8)
    # round half to even, saturating: the ISA's float -> int conversion
    assert np.array_equal(y, np.clip(np.rint(ref), -128, 127).astype(np.int8))


def test_bad_out_shape_is_a_fault(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = hb(0, 0, DType.F32, (4, 8))
    out = hb(0, 4096, DType.F32, (2, 16))
    inst = CvuPipeline(0, (w,), ((4, 8),), out, (2, 16), (Stage(CvuOp.EXP, (IN0,)),))
    res, _ = run([inst], [(w, x)], [])
    assert [r.kind for r in res.reports] == ["fault"]
    assert "out_shape [2, 16]" in res.reports[0].message
