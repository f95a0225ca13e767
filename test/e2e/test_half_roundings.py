"""16-bit roundings inside one CVU op (``ir_facts._expr_stages``): a 16-bit value in the middle of
a generic's body is rounded where the body rounds it.

Found by the ``quant`` fuzz family (``python -m m100.tools.fuzz_onnx --family quant --seed 1``,
graph #11): a W8A8 projection with a per-tensor scale, ``Cast(Cast(acc, f32) * dq, f16)``,
multiplied by another f16 value and quantized to int8. The graph passes fuse the dequantization
and the product into one generic (``sitofp, mulf f32, truncf f16, mulf f16``); its CVU stages
dropped the ``truncf`` (the CVU computes in f32), so the product was rounded once instead of
twice and one int8 of 384 came out one off. Likewise the f16 ``QuantizeLinear``'s division is an
f16 division (ONNX: in the scale's type; torch-mlir's linalg ``divf f16``): with a scale that is
not a power of two, dividing in f32 gives other int8 values.

Oracle: numpy from the ONNX definitions, op by op in each op's output type. The inputs are
chosen so that the f32-once forms give other int8 values (asserted: the test fails without the
roundings).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from m100.tools.onnx_backend import M100Backend

M, K, N = 16, 13, 24
SX = np.float16(1 / 32)


def _model(sm: float):
    nodes = [h.make_node("QuantizeLinear", ["x", "sx", "z"], ["xq"]),
             h.make_node("MatMulInteger", ["xq", "w"], ["acc"]),
             h.make_node("Cast", ["acc"], ["accf"], to=TP.FLOAT),
             h.make_node("Mul", ["accf", "dq"], ["uf"]),
             h.make_node("Cast", ["uf"], ["u"], to=TP.FLOAT16),
             h.make_node("Mul", ["u", "s"], ["m"]),
             h.make_node("QuantizeLinear", ["m", "sm", "z"], ["y"])]
    g = h.make_graph(nodes, "half_roundings",
                     [h.make_tensor_value_info("x", TP.FLOAT16, [M, K]),
                      h.make_tensor_value_info("s", TP.FLOAT16, [M, N])],
                     [h.make_tensor_value_info("y", TP.INT8, [M, N])],
                     [numpy_helper.from_array(np.asarray(SX, np.float16), "sx"),
                      numpy_helper.from_array(np.asarray(sm, np.float16), "sm"),
                      numpy_helper.from_array(np.asarray(0, np.int8), "z"),
                      numpy_helper.from_array(_weights()[0], "w"),
                      numpy_helper.from_array(_weights()[1], "dq")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def _weights():
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (K, N)).astype(np.int8)
    return w, np.asarray(float(SX) * 0.7 / (73.6 * np.sqrt(K)), np.float32)  # per tensor


def _definition(x, s, sm, once: bool = False):
    """The ONNX definitions op by op (``once``: the product and the quantize's division computed
    in f32 and rounded once: the wrong form)."""
    w, dq = _weights()
    xq = np.clip(np.rint(x / SX), -128, 127).astype(np.int8)  # x / 2^-5: exact in f16
    acc = xq.astype(np.int32) @ w.astype(np.int32)
    uf = acc.astype(np.float32) * dq
    if once:
        q = np.rint(uf * s.astype(np.float32) / np.float32(np.float16(sm)))
    else:
        m = uf.astype(np.float16) * s
        q = np.rint((m / np.float16(sm)).astype(np.float32))
    return np.clip(q, -128, 127).astype(np.int8)


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((M, K)) * 2).astype(np.float16)
    s = (rng.standard_normal((M, N)) * 1.5).astype(np.float16)
    return x, s


@pytest.mark.parametrize("sm", [1 / 64, 0.021], ids=["pow2-scale", "other-scale"])
def test_f16_values_inside_one_cvu_op_are_rounded_where_the_graph_rounds_them(sm):
    # the first seed whose inputs tell the roundings apart (the wrong form gives other int8s)
    seed = next(k for k in range(200) if (_definition(*_inputs(k), sm) !=
                                          _definition(*_inputs(k), sm, once=True)).any())
    x, s = _inputs(seed)
    got = M100Backend.prepare(_model(sm), machine="tiny").run([x, s])[0]
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, _definition(x, s, sm))


def test_a_mid_body_truncf_becomes_a_rounding_stage():
    """The fused generic's stages: ``itof, mul{f32}, mul -> rounded to f16, mul`` (the store
    rounds the root), the quantize's ``div`` rounded to f16."""
    from m100.context import make_context
    from m100.frontend import load_onnx
    from m100.passes.graph.m100_graph import M100Graph
    from m100.passes.schedule.from_ir import from_module
    from m100.targets.m100.isa import CvuOp, DType

    ctx = make_context()
    mod = load_onnx(_model(0.021), ctx)
    M100Graph().apply(ctx, mod)
    irg = from_module(mod, 8, 64)
    st = {o.name: [(s.op, s.iparams) for s in irg.lowering[o.name].stages]
          for o in irg.graph.ops if o.unit == "cvu.elementwise"}
    r16 = (DType.F16.value,)
    assert [(CvuOp.ITOF, ()), (CvuOp.MUL, r16), (CvuOp.MUL, ())] in st.values(), st
    quant = [v for v in st.values() if v and v[-1][0] is CvuOp.FTOI]
    assert quant and all(v[0] == (CvuOp.DIV, r16) for v in quant), quant
