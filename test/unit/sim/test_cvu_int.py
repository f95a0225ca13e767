"""The CVU's integer lane (docs/isa.md "CVU lanes") vs numpy oracles written from the ONNX
operator definitions (Add/Sub/Mul/Div of integers, comparisons, Where, Cast, Abs/Neg/Min/Max)."""

import numpy as np
import pytest

from m100.sim.testing import hb, run
from m100.targets.m100.isa import CvuOp, CvuPipeline, DType, Ref, RefKind, Stage, Sync

IN0, IN1, IN2 = (Ref(RefKind.INPUT, i) for i in range(3))
I32_MAX = 2**31 - 1


def S(i):
    return Ref(RefKind.STAGE, i)


def IMM(v):
    return Ref(RefKind.IMM, imm=v)


def cvu(inputs, out_dtype, stages, shape=(4, 16)):
    """Run one pipeline; ``inputs`` are (array, DType) pairs of ``shape``."""
    walks, data, base = [], [], 0
    for x, dt in inputs:
        w = hb(0, base, dt, shape)
        walks.append(w)
        data.append((w, x))
        base += 8192
    out = hb(0, base, out_dtype, shape)
    inst = CvuPipeline(0, tuple(walks), tuple(tuple(shape) for _ in inputs), out, tuple(shape),
                       tuple(stages), sync=Sync())
    res, (y,) = run([inst], data, [out])
    return res, y.reshape(shape)


def ints(rng, lo=-1000, hi=1000, shape=(4, 16)):
    return rng.integers(lo, hi, size=shape).astype(np.int32)


def onnx_div(a, b):
    """ONNX Div of integers: the quotient rounded toward zero (C semantics)."""
    q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
    return np.where((a < 0) != (b < 0), -q, q)


@pytest.mark.parametrize("op,oracle", [
    (CvuOp.ADD, lambda a, b: a.astype(np.int64) + b), (CvuOp.SUB, lambda a, b: a.astype(np.int64) - b),
    (CvuOp.MUL, lambda a, b: a.astype(np.int64) * b), (CvuOp.DIV, onnx_div),
    (CvuOp.MAX, np.maximum), (CvuOp.MIN, np.minimum),
    (CvuOp.CMP_GT, np.greater), (CvuOp.CMP_GE, np.greater_equal), (CvuOp.CMP_EQ, np.equal)])
def test_binary_exact_beyond_f32(rng, op, oracle):
    # operands around 2**26: an f32 computation would round (the old float-only CVU did)
    a = ints(rng, -(1 << 25), 1 << 25) | 1  # odd: f32 has no ulp of 1 up there
    b = ints(rng, 1, 40) * np.where(rng.random(a.shape) < 0.5, -1, 1).astype(np.int32)
    if op in (CvuOp.CMP_EQ, CvuOp.CMP_GE):
        b[0] = a[0]  # some equal pairs
        b[0, :3] += 1
    if op in (CvuOp.ADD, CvuOp.SUB, CvuOp.MUL, CvuOp.MAX, CvuOp.MIN, CvuOp.DIV):
        b = b * (1 << 20) if op in (CvuOp.ADD, CvuOp.SUB, CvuOp.MAX, CvuOp.MIN) else b
    res, y = cvu([(a, DType.I32), (b, DType.I32)], DType.I32, [Stage(op, (IN0, IN1))])
    assert res.ok, res.reports
    np.testing.assert_array_equal(y, oracle(a, b).astype(np.int64))


def test_unary_int(rng):
    a = ints(rng, -(1 << 30), 1 << 30)
    for op, oracle in ((CvuOp.NEG, np.negative), (CvuOp.ABS, np.abs), (CvuOp.COPY, lambda x: x),
                       (CvuOp.RELU, lambda x: np.maximum(x, 0))):
        res, y = cvu([(a, DType.I32)], DType.I32, [Stage(op, (IN0,))])
        assert res.ok, res.reports
        np.testing.assert_array_equal(y, oracle(a))


def test_where_and_compare_mask_to_bool_i8(rng):
    # Where(a < b, a, b - 7) with a bool (i8 0/1) mask output and an int16 result
    a, b = ints(rng, -3000, 3000), ints(rng, -3000, 3000)
    res, y = cvu([(a, DType.I32), (b, DType.I32)], DType.I16,
                 [Stage(CvuOp.CMP_GT, (IN1, IN0)), Stage(CvuOp.SUB, (IN1, IMM(7.0))),
                  Stage(CvuOp.SELECT, (S(0), IN0, S(1)))])
    assert res.ok, res.reports
    np.testing.assert_array_equal(y, np.where(a < b, a, b - 7))
    res, m = cvu([(a, DType.I32), (b, DType.I32)], DType.I8, [Stage(CvuOp.CMP_GT, (IN1, IN0))])
    assert res.ok and m.dtype == np.int8
    np.testing.assert_array_equal(m, (a < b).astype(np.int8))


def test_bool_logic_via_min_max_eq(rng):
    p = (rng.random((4, 16)) < 0.5).astype(np.int8)
    q = (rng.random((4, 16)) < 0.5).astype(np.int8)
    for stages, oracle in (([Stage(CvuOp.MIN, (IN0, IN1))], np.logical_and),
                           ([Stage(CvuOp.MAX, (IN0, IN1))], np.logical_or),
                           ([Stage(CvuOp.CMP_EQ, (IN0, IN1)), Stage(CvuOp.CMP_EQ, (S(0), IMM(0.0)))],
                            np.logical_xor)):
        res, y = cvu([(p, DType.I8), (q, DType.I8)], DType.I8, stages)
        assert res.ok, res.reports
        np.testing.assert_array_equal(y, oracle(p, q).astype(np.int8))


def test_ftoi_truncates_and_saturates():
    # ONNX Cast float -> int32 rounds toward zero; NaN/out of range: the lane's defined result
    x = np.array([[2.7, -2.7, 0.5, -0.5, 1e10, -1e10, np.nan, 7.0]], np.float32)
    res, y = cvu([(x, DType.F32)], DType.I32, [Stage(CvuOp.FTOI, (IN0,))], shape=(1, 8))
    assert res.ok, res.reports
    np.testing.assert_array_equal(y[0], [2, -2, 0, 0, I32_MAX, -(1 << 31), 0, 7])


def test_itof_and_mixed_lanes_round_once(rng):
    # Cast int32 -> float: round to nearest even (numpy's int -> float32 conversion)
    a = ints(rng, -(1 << 30), 1 << 30)
    res, y = cvu([(a, DType.I32)], DType.F32, [Stage(CvuOp.ITOF, (IN0,))])
    assert res.ok
    np.testing.assert_array_equal(y, a.astype(np.float32))
    # itof then a float division: not the integer lane's truncating div
    res, y = cvu([(a, DType.I32)], DType.F32, [Stage(CvuOp.ITOF, (IN0,)),
                                              Stage(CvuOp.DIV, (S(0), IMM(2.0)))])
    assert res.ok
    np.testing.assert_array_equal(y, a.astype(np.float32) / np.float32(2))
    # an int with a non-integral immediate computes in the float lane
    res, y = cvu([(a, DType.I32)], DType.F32, [Stage(CvuOp.MUL, (IN0, IMM(0.5)))])
    np.testing.assert_array_equal(y, a.astype(np.float32) * np.float32(0.5))


def test_overflow_and_div_by_zero_fault():
    a = np.full((4, 16), I32_MAX, np.int32)
    res, _ = cvu([(a, DType.I32), (a, DType.I32)], DType.I32, [Stage(CvuOp.ADD, (IN0, IN1))])
    assert not res.ok and "integer overflow" in str(res.reports[0])
    z = np.zeros((4, 16), np.int32)
    res, _ = cvu([(a, DType.I32), (z, DType.I32)], DType.I32, [Stage(CvuOp.DIV, (IN0, IN1))])
    assert not res.ok and "division by zero" in str(res.reports[0])


def test_integer_result_outside_a_narrow_output_faults():
    # int8 Add 100 + 100: ONNX wraps to -56; the integer lane neither wraps nor saturates silently
    a = np.full((4, 16), 100, np.int8)
    res, _ = cvu([(a, DType.I8), (a, DType.I8)], DType.I8, [Stage(CvuOp.ADD, (IN0, IN1))])
    assert not res.ok and "outside the i8 output range" in str(res.reports[0])
    res, y = cvu([(a, DType.I8), (a, DType.I8)], DType.I16, [Stage(CvuOp.ADD, (IN0, IN1))])
    assert res.ok and (y == 200).all()


def test_static_lanes_agree_with_the_interpreter(rng):
    # numerics.cvu_stage_lanes (the compiler's view, types the intermediates of split pipelines)
    # against the lane of each value the interpreter computes
    from m100.sim.semantics import cvu_eval
    from m100.targets.m100.numerics import cvu_stage_lanes

    ops2 = [CvuOp.ADD, CvuOp.SUB, CvuOp.MUL, CvuOp.DIV, CvuOp.MAX, CvuOp.CMP_GT, CvuOp.CMP_EQ]
    ops1 = [CvuOp.NEG, CvuOp.ABS, CvuOp.EXP, CvuOp.FTOI, CvuOp.ITOF, CvuOp.SIGN, CvuOp.FLOOR]
    for trial in range(200):
        in_int = [bool(rng.integers(2)), bool(rng.integers(2))]
        ins = [np.arange(1, 9, dtype=np.int64).reshape(2, 4) if k else
               np.linspace(1, 2, 8, dtype=np.float32).reshape(2, 4) for k in in_int]
        stages = []
        for i in range(4):
            pool = [IN0, IN1] + [S(j) for j in range(i)] + [IMM(2.0), IMM(0.5)]
            if rng.integers(3) == 0:
                stages.append(Stage(ops1[rng.integers(len(ops1))], (pool[rng.integers(len(pool) - 2)],)))
            else:
                a, b = pool[rng.integers(len(pool) - 2)], pool[rng.integers(len(pool))]
                stages.append(Stage(ops2[rng.integers(len(ops2))], (a, b)))
        lanes = cvu_stage_lanes(stages, in_int)
        for n in range(1, len(stages) + 1):
            try:
                v = cvu_eval(stages[:n], ins)
            except Exception:  # noqa: BLE001 - a fault (overflow, /0): no lane to compare
                break
            assert (v.dtype == np.int64) == lanes[n - 1], (trial, stages[:n], in_int)
