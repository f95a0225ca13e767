"""The CVU integer lane's width conversions, bitwise logic, shifts and remainder (docs/isa.md
"CVU lanes") vs numpy oracles written from the ONNX definitions (BitShift, BitwiseAnd/Or/Xor/Not,
Mod, unsigned compare / max / min), on every integer width the compiler uses."""

import numpy as np
import pytest

from m100.sim.semantics import cvu_eval
from m100.targets.m100.isa import CvuOp, DType, Ref, RefKind, Stage

from .test_cvu_int import IMM, IN0, IN1, S, cvu

_NP = {8: (np.int8, np.uint8), 16: (np.int16, np.uint16), 32: (np.int32, np.uint32),
       64: (np.int64, np.uint64)}


def onnx_shift(x: np.ndarray, y: np.ndarray, left: bool) -> np.ndarray:
    """ONNX BitShift (opset 28) element by element with Python integers: wrap at the type's
    width; an amount < 0 or >= width gives 0 (left, or right of a non-negative/unsigned x) or
    -1 (right of a negative signed x)."""
    bits = x.dtype.itemsize * 8
    out = []
    for a, s in zip(x.reshape(-1).tolist(), y.reshape(-1).tolist()):
        if not 0 <= s < bits:
            r = -1 if (not left and a < 0) else 0
        elif left:
            r = (a << s) % (1 << bits)
            if x.dtype.kind == "i" and r >= 1 << (bits - 1):
                r -= 1 << bits
        else:
            r = a >> s  # Python: arithmetic for negative a, logical for unsigned a >= 0
        out.append(r)
    return np.array(out, dtype=x.dtype).reshape(x.shape)


def as_lane(x: np.ndarray) -> np.ndarray:
    """An ONNX tensor as the compiler holds it: same-width signed bit patterns (u8 -> i8, ...)."""
    return x.view(_NP[x.dtype.itemsize * 8][0]).astype(np.int64)


def lane_shift(x, y, left):
    w = x.dtype.itemsize * 8
    logical = x.dtype.kind == "u"
    st = Stage(CvuOp.SHL, (IN0, IN1), iparams=(w,)) if left else \
        Stage(CvuOp.SHR, (IN0, IN1), iparams=(w, int(logical)))
    r = cvu_eval([st], [as_lane(x), as_lane(y)])
    return r.astype(np.int64).astype(_NP[w][0]).view(x.dtype)


@pytest.mark.parametrize("w", [8, 16, 32])
@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("left", [True, False])
def test_shift_every_amount_exhaustive(w, signed, left):
    # every amount -3..w+2 (negative and >= width included) against a spread of values
    t = _NP[w][0] if signed else _NP[w][1]
    info = np.iinfo(t)
    vals = np.array(sorted(v for v in {int(info.min), int(info.min) + 1, -5, -1, 0, 1, 3, 0x55,
                                       int(info.max) - 1, int(info.max)}
                           if info.min <= v <= info.max), dtype=t)
    amounts = np.arange(-3, w + 3)
    if not signed:
        amounts = amounts[amounts >= 0]
    xx, yy = np.meshgrid(vals, amounts.astype(t), indexing="ij")
    if w == 32 and not signed:  # u32 held as i32: only values < 2**31 are exact in the lane
        keep = xx.reshape(-1) < (1 << 31)
        xx, yy = xx.reshape(-1)[keep], yy.reshape(-1)[keep]
    np.testing.assert_array_equal(lane_shift(xx, yy, left), onnx_shift(xx, yy, left))


def test_shift_i64_held_as_i32():
    # i64 tensors are held as checked i32: a left shift whose i64 result leaves i32 faults
    x = np.array([5, -7, 1 << 20, -1], np.int64)
    y = np.array([3, 1, 10, 64], np.int64)  # 64: >= the width, 0 (left) or -1 (right)
    np.testing.assert_array_equal(lane_shift(x, y, True), onnx_shift(x, y, True))
    np.testing.assert_array_equal(lane_shift(x, y, False), onnx_shift(x, y, False))
    with pytest.raises(Exception, match="integer overflow"):
        lane_shift(np.array([1 << 20], np.int64), np.array([20], np.int64), True)


def test_shift_through_the_interpreter():
    # the whole instruction path (walks of i8 / i16 storage): int8 left shift wraps like ONNX
    x = np.array([[64, 1, -64, 5, -8, 4, -1, 127]], np.int8)
    y = np.array([[1, 7, 1, 8, -1, 9, 127, 2]], np.int8)
    res, z = cvu([(x, DType.I8), (y, DType.I8)], DType.I8,
                 [Stage(CvuOp.SHL, (IN0, IN1), iparams=(8,))], shape=(1, 8))
    assert res.ok, res.reports
    np.testing.assert_array_equal(z, onnx_shift(x, y, True))
    res, z = cvu([(x, DType.I8), (y, DType.I8)], DType.I8,
                 [Stage(CvuOp.SHR, (IN0, IN1), iparams=(8, 0))], shape=(1, 8))
    assert res.ok, res.reports
    np.testing.assert_array_equal(z, onnx_shift(x, y, False))


@pytest.mark.parametrize("w", [8, 16, 32, 64])
def test_bitwise_and_or_xor_not(rng, w):
    t = _NP[w][0]
    lo, hi = (-(1 << 31), 1 << 31) if w >= 32 else (int(np.iinfo(t).min), int(np.iinfo(t).max) + 1)
    a = rng.integers(lo, hi, size=(64,), dtype=np.int64).astype(t)
    b = rng.integers(lo, hi, size=(64,), dtype=np.int64).astype(t)
    for op, f in ((CvuOp.AND, np.bitwise_and), (CvuOp.OR, np.bitwise_or),
                  (CvuOp.XOR, np.bitwise_xor)):
        r = cvu_eval([Stage(op, (IN0, IN1))], [a.astype(np.int64), b.astype(np.int64)])
        np.testing.assert_array_equal(r.astype(t), f(a, b))
    r = cvu_eval([Stage(CvuOp.XOR, (IN0, IMM(-1.0)))], [a.astype(np.int64)])  # BitwiseNot
    np.testing.assert_array_equal(r.astype(t), np.invert(a))


def test_bitwise_on_unsigned_bit_patterns():
    # u8 200 is held as i8 -56: and/or/xor of the patterns are the patterns of the u8 results
    a = np.array([200, 255, 0, 129, 77], np.uint8)
    b = np.array([15, 128, 255, 1, 200], np.uint8)
    for op, f in ((CvuOp.AND, np.bitwise_and), (CvuOp.OR, np.bitwise_or),
                  (CvuOp.XOR, np.bitwise_xor)):
        r = cvu_eval([Stage(op, (IN0, IN1))], [as_lane(a), as_lane(b)])
        np.testing.assert_array_equal(r.astype(np.int8).view(np.uint8), f(a, b))


def onnx_mod_int(a, b):
    """ONNX Mod, fmod=0, integers: a - floor(a / b) * b (the sign of b), Python's %."""
    return np.array([x % y for x, y in zip(a.tolist(), b.tolist())], dtype=np.int64)


def test_rem_and_floor_mod(rng):
    a = rng.integers(-(1 << 30), 1 << 30, size=256)
    b = rng.integers(1, 1000, size=256) * rng.choice([-1, 1], size=256)
    a[:4], b[:4] = [7, -7, 7, -7], [3, 3, -3, -3]
    r = cvu_eval([Stage(CvuOp.REM, (IN0, IN1))], [a, b])
    np.testing.assert_array_equal(r, np.fmod(a, b))  # C %: the sign of the dividend
    # torch-mlir's Mod body: rem, then + b where rem != 0 and sign(rem) != sign(b)
    st = [Stage(CvuOp.REM, (IN0, IN1)),  # 0
          Stage(CvuOp.CMP_EQ, (S(0), IMM(0.0))), Stage(CvuOp.CMP_EQ, (S(1), IMM(0.0))),  # 2: r != 0
          Stage(CvuOp.CMP_GT, (IMM(0.0), IN1)), Stage(CvuOp.CMP_GT, (IMM(0.0), S(0))),  # 3, 4
          Stage(CvuOp.CMP_EQ, (S(3), S(4))), Stage(CvuOp.CMP_EQ, (S(5), IMM(0.0))),  # 6: xor
          Stage(CvuOp.MIN, (S(2), S(6)))]
    mask = cvu_eval(st, [a, b])
    fixed = np.where(mask != 0, np.fmod(a, b) + b, np.fmod(a, b))
    np.testing.assert_array_equal(fixed, onnx_mod_int(a, b))
    with pytest.raises(Exception, match="remainder by zero"):
        cvu_eval([Stage(CvuOp.REM, (IN0, IN1))], [a[:2], np.array([1, 0])])


def test_rem_float_lane_is_ieee_fmod(rng):
    """``rem`` on float arguments is IEEE fmod (exact, the dividend's sign), not a fault; the
    quotients here reach 2**40, where ``a - b * trunc(a / b)`` in f32 is far off."""
    a = (rng.standard_normal(256) * np.exp2(rng.uniform(0, 40, 256))).astype(np.float32)
    b = (rng.choice([-1, 1], 256) * np.exp2(rng.uniform(-4, 4, 256))).astype(np.float32)
    a[:4], b[:4] = [np.inf, 1.0, -7.5, 2.0], [1.0, 0.0, 2.0, np.inf]
    r = cvu_eval([Stage(CvuOp.REM, (IN0, IN1))], [a, b])
    assert r.dtype == np.float32
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(r, np.fmod(a.astype(np.float64), b.astype(np.float64)))


@pytest.mark.parametrize("w", [8, 16])
def test_zext_sext_unsigned_compare_max(w):
    # every w-bit pattern: zext gives the unsigned value, sext the signed one; unsigned
    # compare / max = signed ones on zext'd values, wrapped back with sext
    s, u = _NP[w]
    if w == 8:
        pats = np.arange(-128, 128, dtype=np.int64)
    else:
        pats = np.concatenate([np.arange(-32768, -32000), np.arange(-300, 300),
                               np.arange(32000, 32768)]).astype(np.int64)
    z = cvu_eval([Stage(CvuOp.ZEXT, (IN0,), iparams=(w,))], [pats])
    np.testing.assert_array_equal(z, pats.astype(s).view(u).astype(np.int64))
    # sext of an unwrapped value (e.g. an i8 add 100 + 100 = 200 held exactly) wraps it
    wide = pats + (1 << w) * 3
    sx = cvu_eval([Stage(CvuOp.SEXT, (IN0,), iparams=(w,))], [wide])
    np.testing.assert_array_equal(sx, pats)
    a = pats
    b = pats[::-1].copy()
    ua, ub = a.astype(s).view(u), b.astype(s).view(u)
    lt = cvu_eval([Stage(CvuOp.ZEXT, (IN0,), iparams=(w,)), Stage(CvuOp.ZEXT, (IN1,), iparams=(w,)),
                   Stage(CvuOp.CMP_GT, (S(1), S(0)))], [a, b])
    np.testing.assert_array_equal(lt, (ua < ub).astype(np.int64))
    mx = cvu_eval([Stage(CvuOp.ZEXT, (IN0,), iparams=(w,)), Stage(CvuOp.ZEXT, (IN1,), iparams=(w,)),
                   Stage(CvuOp.MAX, (S(0), S(1))), Stage(CvuOp.SEXT, (S(2),), iparams=(w,))], [a, b])
    np.testing.assert_array_equal(mx.astype(s).view(u), np.maximum(ua, ub))


def test_zext_of_a_negative_32_or_64_bit_value_faults():
    # u32 / u64 tensors are held as i32: a value whose unsigned reading leaves i32 is not exact
    for w in (32, 64):
        np.testing.assert_array_equal(
            cvu_eval([Stage(CvuOp.ZEXT, (IN0,), iparams=(w,))], [np.array([0, 5, (1 << 31) - 1])]),
            [0, 5, (1 << 31) - 1])
        with pytest.raises(Exception, match="integer overflow"):
            cvu_eval([Stage(CvuOp.ZEXT, (IN0,), iparams=(w,))], [np.array([3, -1])])


def test_int_only_ops_refuse_floats_and_bad_widths():
    x = np.ones(4, np.float32)
    for st in (Stage(CvuOp.AND, (IN0, IMM(1.0))), Stage(CvuOp.ZEXT, (IN0,), iparams=(8,))):
        with pytest.raises(Exception, match="integer-lane op on a float"):
            cvu_eval([st], [x])
    with pytest.raises(Exception, match="integer width"):
        cvu_eval([Stage(CvuOp.SHL, (IN0, IN0), iparams=(0,))], [np.ones(4, np.int64)])
    with pytest.raises(Exception, match="integer width"):
        cvu_eval([Stage(CvuOp.SEXT, (IN0,))], [np.ones(4, np.int64)])


def test_static_lanes_of_int_only_ops():
    from m100.targets.m100.numerics import cvu_stage_lanes
    st = [Stage(CvuOp.ZEXT, (IN0,), iparams=(8,)), Stage(CvuOp.ITOF, (S(0),)),
          Stage(CvuOp.AND, (IN0, IMM(3.0))), Stage(CvuOp.SHR, (S(2), IN0), iparams=(8, 1))]
    assert cvu_stage_lanes(st, [True]) == [True, False, True, True]
    assert isinstance(Ref(RefKind.IMM, 0, 1.0), Ref)
