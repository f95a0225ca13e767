"""A QDQ int8 Add (DequantizeLinear x2 -> Add -> QuantizeLinear) compiled by lower-quantized-add:
bit-exact with onnxruntime's int8 QLinearAdd kernel on every pair of int8 inputs (issue 11; the
residual Adds of the QDQ ResNet-18). onnxruntime (MLAS, x86 AVX2) computes
``round_half_even(fma(a, sa/sc, fma(b, sb/sc, zc - fma(sa/sc, za, sb/sc * zb))))`` in f32, which
differs from the ONNX definition ``round_half_even(((a - za) * sa + (b - zb) * sb) / sc) + zc``
near ties (passes/graph/lower_quantized_add.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.passes.graph.lower_quantized_add import qlinear_add_constants
from m100.targets.m100.isa import CvuOp, CvuPipeline
from m100.targets.m100.numerics import fma_f32
from m100.tools import driver
from qdq_oracle import ort_int8  # the shared onnxruntime int8-kernel oracle

F = np.float32
# every int8 pair (a, b), as two 256 x 256 tensors
A, B = (v.astype(np.int8) for v in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128),
                                               indexing="ij"))


def qdq_add(sa, za, sb, zb, sc, zc, b_shape=None, relu=False, shape=A.shape):
    """DQ(a), DQ(b) -> Add [-> Relu] -> Q, int8 per tensor (b of ``b_shape``: broadcast)."""
    inits = [numpy_helper.from_array(np.array(v, dtype=d), n) for n, v, d in (
        ("sa", sa, np.float32), ("za", za, np.int8), ("sb", sb, np.float32), ("zb", zb, np.int8),
        ("sc", sc, np.float32), ("zc", zc, np.int8))]
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["da"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["db"]),
             helper.make_node("Add", ["da", "db"], ["s0" if relu else "s"]),
             helper.make_node("QuantizeLinear", ["s", "sc", "zc"], ["y"])]
    if relu:
        nodes.insert(3, helper.make_node("Relu", ["s0"], ["s"]))
    g = helper.make_graph(nodes, "qadd", [
        helper.make_tensor_value_info("a", TensorProto.INT8, list(shape)),
        helper.make_tensor_value_info("b", TensorProto.INT8, list(b_shape or shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT8, list(shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def onnx_definition(a, sa, za, b, sb, zb, sc, zc):
    """The ONNX QDQ definition in f32: dequantize, add, QuantizeLinear (round half to even)."""
    v = ((a.astype(F) - F(za)) * F(sa) + (b.astype(F) - F(zb)) * F(sb)).astype(F)
    return np.clip(np.rint((v / F(sc)).astype(F)) + zc, -128, 127).astype(np.int8)


# the scales/zero points of a residual Add of the QDQ ResNet-18 where onnxruntime and the ONNX
# definition differ (a = 27, b = 71: 149.5 (a tie, -> 150) vs 149.49998 (-> 149)), and random ones
CASES = [(0.843863, 5, 0.88832384, 10, 0.48664045, -128),
         (0.0123, -17, 0.0456, 33, 0.0311, 7)]


@pytest.mark.parametrize("case", CASES)
def test_qdq_add_is_bit_exact_with_onnxruntime_qlinearadd_on_every_int8_pair(case):
    sa, za, sb, zb, sc, zc = case
    model = qdq_add(*case)
    want = ort_int8(model, {"a": A, "b": B})
    cr = driver.compile(model, machine="tiny")
    cvu = [i for _, i in cr.program.instructions() if isinstance(i, CvuPipeline)]
    assert cvu and all(any(s.op is CvuOp.FMA for s in i.stages) for i in cvu)
    got = driver.run(cr.program, {"a": A, "b": B}, machine=cr.machine).outputs["y"]
    np.testing.assert_array_equal(got.reshape(want.shape), want)
    if case is CASES[0]:  # the test separates the two arithmetics
        d = onnx_definition(A, sa, za, B, sb, zb, sc, zc)
        assert (d != want).sum() >= 1 and d[27 + 128, 71 + 128] == 22 and want[155, 199] == 21


def test_qlinearadd_formula_matches_onnxruntime_for_random_scales():
    """The f32 formula (qlinear_add_constants + fma_f32, what the lowered pipeline computes)
    against onnxruntime over all int8 pairs for random scales and zero points; it catches the
    other plausible contractions of the fixed part, which differ in a few elements."""
    rng = np.random.default_rng(7)
    af, bf = A.astype(F), B.astype(F)
    for _ in range(12):
        sa, sb, sc = (F(rng.uniform(0.01, 1.0)) for _ in range(3))
        za, zb, zc = (int(rng.integers(-128, 128)) for _ in range(3))
        want = ort_int8(qdq_add(sa, za, sb, zb, sc, zc), {"a": A, "b": B})
        rac, rbc, fixed = qlinear_add_constants(sa, za, sb, zb, sc, zc)
        y = fma_f32(af, F(rac), fma_f32(bf, F(rbc), F(fixed)))
        np.testing.assert_array_equal(np.clip(np.rint(y), -128, 127).astype(np.int8), want)


def test_broadcast_add_keeps_the_onnx_definition():
    """A broadcasting Add (b per channel) is not lowered (onnxruntime's vector-scalar kernel
    computes yet another expression); it stays the ONNX definition in f32, bit-exact."""
    case = CASES[1]
    model = qdq_add(*case, b_shape=[1, 256])
    b = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    cr = driver.compile(model, machine="tiny")
    cvu = [i for _, i in cr.program.instructions() if isinstance(i, CvuPipeline)]
    assert cvu and not any(s.op is CvuOp.FMA for i in cvu for s in i.stages)
    got = driver.run(cr.program, {"a": A, "b": b}, machine=cr.machine).outputs["y"]
    sa, za, sb, zb, sc, zc = case
    want = onnx_definition(A, sa, za, np.broadcast_to(b, A.shape), sb, zb, sc, zc)
    np.testing.assert_array_equal(got.reshape(want.shape), want)


@pytest.mark.parametrize("zc", [-128, -100])
def test_add_relu_quantize(zc):
    """DQ, DQ -> Add -> Relu -> Q (what m100's PTQ writes for a residual block): with the output
    zero point at qmin the Relu changes nothing, onnxruntime drops it (ReluQuantFusion) and runs
    QLinearAdd -- lowered the same way, bit-exact on every int8 pair; with another zero point the
    Relu matters and the chain keeps the ONNX definition (numpy, bit-exact)."""
    sa, za, sb, zb, sc, _ = CASES[0]
    a, b = (A, B) if zc == -128 else (A[::8], B[::8])  # the f32 chain: fewer rows fit tiny's HBSM
    model = qdq_add(sa, za, sb, zb, sc, zc, relu=True, shape=a.shape)
    cr = driver.compile(model, machine="tiny")
    fma = any(s.op is CvuOp.FMA for _, i in cr.program.instructions()
              if isinstance(i, CvuPipeline) for s in i.stages)
    got = driver.run(cr.program, {"a": a, "b": b}, machine=cr.machine).outputs["y"]
    if zc == -128:
        assert fma
        want = ort_int8(model, {"a": a, "b": b})
    else:
        assert not fma
        v = ((a.astype(F) - F(za)) * F(sa) + (b.astype(F) - F(zb)) * F(sb)).astype(F)
        want = np.clip(np.rint((np.maximum(v, F(0)) / F(sc)).astype(F)) + zc, -128, 127)
    np.testing.assert_array_equal(got.reshape(want.shape), want.astype(np.int8))


def test_reference_executor_computes_the_lowered_add_with_one_fma_rounding():
    """The graph-level reference executor (frontend/reference.py) on the m100-graph output agrees
    with onnxruntime on every int8 pair: math.fma rounds once (it rounded the product first, which
    moved the a = 27, b = 71 tie of CASES[0])."""
    from m100.context import make_context
    from m100.frontend import reference
    from m100.frontend.onnx_import import load_onnx
    from m100.passes.graph.m100_graph import M100Graph

    model = qdq_add(*CASES[0])
    module = load_onnx(model)
    M100Graph().apply(make_context(), module)
    assert any(o.name == "math.fma" for o in module.walk())
    got = reference.run(module, [A, B])[0]
    np.testing.assert_array_equal(got.reshape(A.shape), ort_int8(model, {"a": A, "b": B}))
