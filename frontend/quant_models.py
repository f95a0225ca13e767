"""Quantized ONNX models for tests and benchmarks (recipes: ``notes/quant-recipes.md``; issue 11).

* :func:`qdq_static` -- a float model through onnxruntime's ``quantize_static`` (QDQ or QOperator
  format, per-tensor or per-channel weights, int8 or uint8 activations) with a fixed random
  calibration set;
* :func:`qdq_convnet`, :func:`qdq_mlp` -- :func:`~m100.frontend.models.conv_relu_maxpool` and
  :func:`~m100.frontend.models.mlp` quantized that way;
* :func:`w4_blocked_matmul` -- ``DequantizeLinear(int4 weights, f16 scales, axis=0, block_size=B)``
  then ``MatMul`` with f16 activations (opset 21, ir_version 10: the W4A16 form);
* :func:`matmul_nbits` -- onnxruntime's ``com.microsoft.MatMulNBits`` (4-bit, blocked, optional zero
  points), built by hand (the quantizer needs the ``onnx-ir`` package);
* :func:`matmul_integer`, :func:`conv_integer` -- ``MatMulInteger`` / ``ConvInteger`` with zero points.

Every builder returns a checked ``ModelProto``; weights are random (``seed``).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from m100.frontend import models


def _onnx():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    return onnx, TensorProto, helper, numpy_helper


def qdq_static(model, *, fmt: str = "qdq", per_channel: bool = True, activation: str = "s8",
               weight: str = "s8", calib: int = 8, seed: int = 0, preprocess: bool = False):
    """``model`` quantized by onnxruntime's ``quantize_static`` (``fmt`` 'qdq' or 'qoperator',
    ``activation``/``weight`` 's8' or 'u8'); calibration: ``calib`` standard-normal inputs.
    ``preprocess``: onnxruntime's ``quant_pre_process`` first (folds BatchNorm into Conv)."""
    onnx = _onnx()[0]
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    data = [{inp.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(calib)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(data)

        def get_next(self):
            return next(self.it, None)

    qt = {"s8": QuantType.QInt8, "u8": QuantType.QUInt8}
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        onnx.save(model, src)
        if preprocess:
            from onnxruntime.quantization.shape_inference import quant_pre_process

            pre = os.path.join(d, "p.onnx")
            quant_pre_process(src, pre, skip_symbolic_shape=True)  # no sympy dependency
            src = pre
        import logging

        level = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice
        try:
            quantize_static(src, dst, Reader(),
                            quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                            per_channel=per_channel, activation_type=qt[activation],
                            weight_type=qt[weight])
        finally:
            logging.getLogger().setLevel(level)
        return onnx.load(dst)


def qdq_convnet(fmt="qdq", per_channel=True, activation="s8", weight="s8", hw=8, f=4, seed=0):
    return qdq_static(models.conv_relu_maxpool(n=1, c=3, hw=hw, f=f, seed=seed), fmt=fmt,
                      per_channel=per_channel, activation=activation, weight=weight, seed=seed)


def qdq_mlp(fmt="qdq", per_channel=True, activation="s8", weight="s8", seed=0):
    return qdq_static(models.mlp(batch=4, d_in=16, hidden=32, d_out=10, seed=seed), fmt=fmt,
                      per_channel=per_channel, activation=activation, weight=weight, seed=seed)


def qdq_resnet18(hw=64, num_classes=10, seed=0):
    """ResNet-18 (random weights) pre-processed (BatchNorm folded) and quantized QDQ per-channel
    S8S8, the acceptance model of issue 11 (at a small input size)."""
    return qdq_static(models.resnet18(batch=1, hw=hw, num_classes=num_classes, seed=seed),
                      per_channel=True, seed=seed, preprocess=True)


def to_f16(model):
    """``model`` with every float32 initializer, input and output in float16 (ops unchanged)."""
    onnx, TensorProto, _, numpy_helper = _onnx()
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i, t in enumerate(m.graph.initializer):
        if t.data_type == TensorProto.FLOAT:
            m.graph.initializer[i].CopyFrom(
                numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in list(m.graph.input) + list(m.graph.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    onnx.checker.check_model(m)
    return m


def f16_mlp(batch=4, d_in=16, hidden=32, d_out=10, seed=0):
    """:func:`~m100.frontend.models.mlp` in float16 (weights, biases, activations)."""
    return to_f16(models.mlp(batch=batch, d_in=d_in, hidden=hidden, d_out=d_out, seed=seed))


def w4_blocked_matmul(m=4, k=64, n=16, block=16, signed=True, seed=0):
    """y[m, n] = x_f16[m, k] @ DequantizeLinear(W4[k, n], scale_f16[k/B, n], axis=0, block_size=B)."""
    onnx, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(seed)
    lo, hi = (-8, 7) if signed else (0, 15)
    w4 = rng.integers(lo, hi + 1, (k, n))
    scale = (rng.uniform(0.5, 2.0, (k // block, n)) / 8).astype(np.float16)
    wq = helper.make_tensor("Wq", TensorProto.INT4 if signed else TensorProto.UINT4, [k, n],
                            w4.flatten().tolist())
    nodes = [helper.make_node("DequantizeLinear", ["Wq", "Ws"], ["W"], axis=0, block_size=block),
             helper.make_node("MatMul", ["x", "W"], ["y"])]
    graph = helper.make_graph(
        nodes, "w4_matmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [m, n])],
        [wq, numpy_helper.from_array(scale, "Ws")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def matmul_nbits(m=4, k=64, n=16, block=32, zero_points=False, seed=0):
    """``com.microsoft.MatMulNBits`` (bits=4): y = x @ dequant(W_Q4)^T with W_Q4 uint8 [N, K/B, B/2]
    (two 4-bit values per byte, low nibble first), scales [N * K/B], zero points packed [N, ceil(K/B/2)]
    (default 8 when absent)."""
    onnx, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(seed)
    nb = k // block
    q = rng.integers(0, 16, (n, nb, block)).astype(np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.05, (n * nb,)).astype(np.float32)
    inputs = ["x", "Wq", "Ws"]
    inits = [numpy_helper.from_array(packed, "Wq"), numpy_helper.from_array(scales, "Ws")]
    if zero_points:
        zp = rng.integers(0, 16, (n, nb)).astype(np.uint8)
        if nb % 2:
            zp = np.concatenate([zp, np.zeros((n, 1), np.uint8)], axis=1)
        zpp = (zp[:, 0::2] | (zp[:, 1::2] << 4)).astype(np.uint8)
        inputs.append("Wz")
        inits.append(numpy_helper.from_array(zpp.reshape(-1), "Wz"))
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=block)
    graph = helper.make_graph(
        [node], "matmul_nbits", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


def matmul_integer(m=4, k=32, n=8, unsigned_a=True, seed=0):
    """``MatMulInteger(a, B, a_zp, B_zp)`` with a u8 (or s8) input and s8 constant weights."""
    onnx, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(seed)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    azp = np.array(rng.integers(100, 150) if unsigned_a else rng.integers(-10, 10),
                   np.uint8 if unsigned_a else np.int8)
    bzp = np.array(rng.integers(-5, 5), np.int8)
    node = helper.make_node("MatMulInteger", ["a", "B", "azp", "bzp"], ["y"])
    graph = helper.make_graph(
        [node], "matmul_integer",
        [helper.make_tensor_value_info("a", TensorProto.UINT8 if unsigned_a else TensorProto.INT8,
                                       [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])],
        [numpy_helper.from_array(b, "B"), numpy_helper.from_array(azp, "azp"),
         numpy_helper.from_array(bzp, "bzp")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def conv_integer(c=3, hw=6, f=4, seed=0):
    """``ConvInteger(x_u8, W_u8, x_zp, w_zp)``, 3x3, pads 1."""
    onnx, TensorProto, helper, numpy_helper = _onnx()
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 256, (f, c, 3, 3)).astype(np.uint8)
    xzp = np.array(rng.integers(100, 150), np.uint8)
    wzp = np.array(rng.integers(100, 150), np.uint8)
    node = helper.make_node("ConvInteger", ["x", "W", "xzp", "wzp"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "conv_integer",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, f, hw, hw])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(xzp, "xzp"),
         numpy_helper.from_array(wzp, "wzp")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


__all__ = ["qdq_static", "qdq_convnet", "qdq_mlp", "qdq_resnet18", "w4_blocked_matmul", "matmul_nbits",
           "matmul_integer", "conv_integer"]


def runtime_op(kind: str):
    """One-node models whose quantization parameters / narrow types are run-time graph inputs
    (frontend/onnx_rewrite_qruntime.py, onnx_rewrite_narrow_int.py), for the lit tests:
    ``qlinear_matmul_u8`` (QLinearMatMul, every operand an input), ``dq_u8_axis`` (per-axis u8
    DequantizeLinear), ``cast_f32_int4``, ``cast_f8_f32`` (float8 e4m3fn -> f32), ``cast_f32_f8``, ``cast_i32_int4`` (refused),
    ``dynamic_quantize``, ``cast_f32_u8``."""
    onnx, TP, helper, _ = _onnx()
    U8, F32 = TP.UINT8, TP.FLOAT
    vi = helper.make_tensor_value_info
    if kind == "qlinear_matmul_u8":
        names = ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"]
        ins = [vi("a", U8, [4, 8]), vi("sa", F32, []), vi("za", U8, []), vi("b", U8, [8, 3]),
               vi("sb", F32, []), vi("zb", U8, []), vi("sy", F32, []), vi("zy", U8, [])]
        node, outs = helper.make_node("QLinearMatMul", names, ["y"]), [vi("y", U8, [4, 3])]
    elif kind == "dq_u8_axis":
        ins = [vi("x", U8, [2, 3, 4]), vi("s", F32, [3]), vi("z", U8, [3])]
        node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)
        outs = [vi("y", F32, [2, 3, 4])]
    elif kind == "cast_f32_int4":
        ins, outs = [vi("x", F32, [4, 4])], [vi("y", TP.INT4, [4, 4])]
        node = helper.make_node("Cast", ["x"], ["y"], to=TP.INT4)
    elif kind == "cast_f32_f8":
        ins, outs = [vi("x", F32, [4, 4])], [vi("y", TP.FLOAT8E4M3FN, [4, 4])]
        node = helper.make_node("Cast", ["x"], ["y"], to=TP.FLOAT8E4M3FN)
    elif kind == "cast_i32_int4":  # refused: int -> int4 wraps around
        ins, outs = [vi("x", TP.INT32, [4, 4])], [vi("y", TP.INT4, [4, 4])]
        node = helper.make_node("Cast", ["x"], ["y"], to=TP.INT4)
    elif kind == "cast_f8_f32":
        ins, outs = [vi("x", TP.FLOAT8E4M3FN, [16, 16])], [vi("y", F32, [16, 16])]
        node = helper.make_node("Cast", ["x"], ["y"], to=F32)
    elif kind == "dynamic_quantize":
        ins = [vi("x", F32, [4, 6])]
        outs = [vi("y", U8, [4, 6]), vi("ys", F32, []), vi("yz", U8, [])]
        node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "ys", "yz"])
    elif kind == "cast_f32_u8":
        ins, outs = [vi("x", F32, [4, 6])], [vi("y", U8, [4, 6])]
        node = helper.make_node("Cast", ["x"], ["y"], to=U8)
    else:
        raise ValueError(f"unknown runtime_op kind '{kind}'")
    m = helper.make_model(helper.make_graph([node], kind, ins, outs),
                          opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(m)
    return m
