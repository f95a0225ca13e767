"""Import of quantized ONNX (issue 11): onnxruntime's QOperator models (QLinearConv per-channel and
uint8, QLinearMatMul + QLinearAdd + QGemm), MatMulInteger/ConvInteger, blocked int4
DequantizeLinear with f16 activations (W4A16) and MatMulNBits go through torch-mlir (after the
rewrites in ``frontend/onnx_rewrite_quant.py``) and the numpy reference executor matches
onnxruntime / oracles written from the operator definitions."""

from __future__ import annotations

import numpy as np
import pytest

from m100.frontend import quant_models as qm
from m100.frontend import reference
from m100.tools.onnx_backend import onnxruntime_run
from m100.frontend.onnx_import import FrontendError, load_onnx

pytest.importorskip("onnxruntime")


def _inputs(module, rng, model):
    import onnx

    out = []
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dt = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if dt.kind == "f":
            out.append(rng.standard_normal(shape).astype(dt))
        else:
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, info.max + 1, shape).astype(dt))
    return out


@pytest.mark.parametrize("make", [
    lambda: qm.qdq_convnet(fmt="qoperator"),                                   # per-channel s8
    lambda: qm.qdq_convnet(fmt="qoperator", per_channel=False, activation="u8", weight="u8"),
    lambda: qm.qdq_mlp(fmt="qoperator", activation="u8"),                      # QLinearMatMul/Add, QGemm
    lambda: qm.matmul_integer(unsigned_a=True),
    lambda: qm.conv_integer(),
    lambda: qm.matmul_nbits(zero_points=False),
    lambda: qm.matmul_nbits(zero_points=True),
], ids=["qlinearconv_s8_pc", "qlinearconv_u8", "qop_mlp_u8", "matmulinteger", "convinteger",
        "matmulnbits", "matmulnbits_zp"])
def test_quantized_model_matches_onnxruntime(make):
    model = make()
    module = load_onnx(model)
    rng = np.random.default_rng(5)
    for _ in range(2):
        xs = _inputs(module, rng, model)
        got = reference.run(module, xs)[0]
        want = onnxruntime_run(model, xs)[0]
        if want.dtype.kind in "iu":
            assert np.array_equal(got.astype(np.int64), want.astype(np.int64))
        elif "nbits" in model.graph.name:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # float accumulation order
        else:
            assert np.array_equal(got, want)  # dequantized int8 outputs: exact


def _nbits_oracle(model, x):
    """MatMulNBits from the com.microsoft definition, unpacked independently (bit by bit)."""
    from onnx import helper, numpy_helper

    node = model.graph.node[0]
    at = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    k, n, bs = at["K"], at["N"], at["block_size"]
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    packed = inits[node.input[1]].reshape(n, -1)
    scales = inits[node.input[2]].reshape(n, -1).astype(np.float64)
    zp = inits[node.input[3]].reshape(n, -1) if len(node.input) > 3 else None
    w = np.zeros((k, n))
    for j in range(n):
        for kk in range(k):
            byte = int(packed[j, kk // 2])
            q = (byte >> 4) if kk % 2 else (byte & 0xF)
            blk = kk // bs
            z = 8 if zp is None else ((int(zp[j, blk // 2]) >> 4) if blk % 2 else (int(zp[j, blk // 2]) & 0xF))
            w[kk, j] = (q - z) * scales[j, blk]
    return x.astype(np.float64) @ w


@pytest.mark.parametrize("zps", [False, True])
def test_matmulnbits_definition_oracle(zps):
    model = qm.matmul_nbits(zero_points=zps, seed=3)
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    got = reference.run(load_onnx(model), [x])[0]
    np.testing.assert_allclose(got, _nbits_oracle(model, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("signed", [True, False])
def test_w4_blocked_dequantize_f16_matmul(signed):
    """DequantizeLinear(int4 [K, N], f16 scales [K/B, N], axis=0, block_size=B) -> MatMul with f16
    activations: the reference equals the exact product rounded once to f16 (f32 accumulation);
    onnxruntime's f16 MatMul is within 0.1 (its own accumulation rounding)."""
    from onnx import numpy_helper

    model = qm.w4_blocked_matmul(signed=signed, seed=2)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    q, s = inits["Wq"].astype(np.int64), inits["Ws"].astype(np.float64)
    w = (q * np.repeat(s, 16, axis=0)).astype(np.float16)  # DQ definition: (q - 0) * scale, in f16
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float16)
    got = reference.run(load_onnx(model), [x])[0]
    assert got.dtype == np.float16
    assert np.array_equal(got, (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float16))
    np.testing.assert_allclose(got.astype(np.float32), onnxruntime_run(model, [x])[0], atol=0.1)


def test_unsupported_quantized_inputs_are_one_line_errors():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    # int4 tensor that is a graph input (not a constant): held in int8 now
    # (onnx_rewrite_narrow_int.py), dequantized per its definition
    g = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["q", "s"], ["y"], axis=0, block_size=2)], "g",
        [helper.make_tensor_value_info("q", TensorProto.INT4, [4, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])],
        [numpy_helper.from_array(np.array([[0.5, 2.0], [0.25, 4.0]], np.float32), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    q = np.arange(-8, 8, 2, dtype=np.int8).reshape(4, 2)
    s = np.array([[0.5, 2.0], [0.25, 4.0]], np.float32)
    got = reference.run(load_onnx(m), [q])[0]
    np.testing.assert_array_equal(got, q.astype(np.float32) * np.repeat(s, 2, axis=0))
    # an int4 graph input an Add reads (wraps at 4 bits): one line, never computed in int8
    g2 = helper.make_graph(
        [helper.make_node("Add", ["q", "q"], ["y"])], "g2",
        [helper.make_tensor_value_info("q", TensorProto.INT4, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT4, [4])])
    m2 = helper.make_model(g2, opset_imports=[helper.make_opsetid("", 21)])
    m2.ir_version = 10
    with pytest.raises(FrontendError) as e:
        load_onnx(m2)
    assert "int4 tensor 'q'" in str(e.value) and "\n" not in str(e.value)
    bad = qm.matmul_nbits()
    for a in bad.graph.node[0].attribute:
        if a.name == "bits":
            a.i = 8
    with pytest.raises(FrontendError, match="only bits=4"):
        load_onnx(bad)
    del onnx
