"""Small ONNX models of ops whose lowering had no lit test (``m100.tools.op_audit``): constants
and shapes, CastLike, Optional*, normalizations and activations lowered by torch-mlir or an m100
rewrite, old-opset Upsample / Scatter, windows, recurrent ops, attention, quantized ops.

    python op_audit_models.py PREFIX kind...   # writes PREFIX.kind.onnx
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

F = T.FLOAT


def model(nodes, ins, outs, inits=(), opset=21, extra=()):
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info(n, t, s) for n, t, s in ins],
                     [h.make_tensor_value_info(n, t, s) for n, t, s in outs],
                     [nh.from_array(np.asarray(a), n) for n, a in inits])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset), *extra])
    onnx.checker.check_model(m)
    return m


def _shapes():
    """Constant, ConstantOfShape, Shape, Size, Range, CastLike, Optional*: one independent node (or
    pair) per op, each with its own graph output (opset 21)."""
    f32 = lambda a: np.array(a, np.float32)  # noqa: E731
    i64 = lambda a: np.array(a, np.int64)  # noqa: E731
    nodes = [
        h.make_node("Constant", [], ["c"], value=nh.from_array(f32([[1.5, -2.0, 0.25]]))),
        h.make_node("Add", ["x", "c"], ["y_const"]),
        h.make_node("ConstantOfShape", ["cs_shape"], ["cs"], value=nh.from_array(f32([0.75]))),
        h.make_node("Mul", ["x", "cs"], ["y_cos"]),
        h.make_node("Shape", ["x3"], ["y_shape"], start=1),
        h.make_node("Size", ["x3"], ["y_size"]),
        h.make_node("Range", ["r_start", "r_limit", "r_delta"], ["r"]),
        h.make_node("Add", ["xi", "r"], ["y_range"]),
        h.make_node("CastLike", ["x", "t16"], ["y_castlike"]),
        h.make_node("Optional", ["x"], ["opt"]),
        h.make_node("OptionalGetElement", ["opt"], ["y_get"]),
        h.make_node("OptionalHasElement", ["opt"], ["y_has"]),
    ]
    return model(
        nodes, [("x", F, [2, 3]), ("x3", F, [2, 3, 4]), ("xi", T.INT64, [3]),
                ("t16", T.FLOAT16, [1])],
        [("y_const", F, [2, 3]), ("y_cos", F, [2, 3]), ("y_shape", T.INT64, [2]),
         ("y_size", T.INT64, []), ("y_range", T.INT64, [3]), ("y_castlike", T.FLOAT16, [2, 3]),
         ("y_get", F, [2, 3]), ("y_has", T.BOOL, [])],
        [("cs_shape", i64([2, 3])), ("r_start", i64(1)), ("r_limit", i64(10)),
         ("r_delta", i64(3))])


MODELS = {
    "shapes": _shapes,
    # BlackmanWindow (periodic) and HammingWindow (symmetric) of a constant size 8
    "windows": lambda: model(
        [h.make_node("BlackmanWindow", ["n"], ["b"]),
         h.make_node("HammingWindow", ["n"], ["m"], periodic=0)],
        [], [("b", F, [8]), ("m", F, [8])], [("n", np.array(8, np.int64))], opset=17),
    # MeanVarianceNormalization (axes 0, 2, 3), RMSNormalization (last axis), Softsign, Swish
    "norm_act": lambda: model(
        [h.make_node("MeanVarianceNormalization", ["x4"], ["y_mvn"]),
         h.make_node("RMSNormalization", ["x", "s"], ["y_rms"], axis=-1, epsilon=1e-3),
         h.make_node("Softsign", ["x"], ["y_softsign"]),
         h.make_node("Swish", ["x"], ["y_swish"], alpha=1.5)],
        [("x4", F, [2, 3, 4, 5]), ("x", F, [3, 8])],
        [("y_mvn", F, [2, 3, 4, 5]), ("y_rms", F, [3, 8]), ("y_softsign", F, [3, 8]),
         ("y_swish", F, [3, 8])], [("s", np.full(8, 2.0, np.float32))], opset=24),
    # SwiGLU (opset 28, alpha 0.5): its function body calls Swish, expanded in turn
    "swiglu": lambda: model(
        [h.make_node("SwiGLU", ["a", "b"], ["y"], alpha=0.5)],
        [("a", F, [3, 8]), ("b", F, [3, 8])], [("y", F, [3, 8])], opset=28),
    "upsample": lambda: model(
        [h.make_node("Upsample", ["x", "s"], ["y"], mode="nearest")],
        [("x", F, [1, 2, 3, 4])], [("y", F, [1, 2, 6, 12])],
        [("s", np.array([1, 1, 2, 3], np.float32))], opset=9),
    "upsample_linear": lambda: model(
        [h.make_node("Upsample", ["x", "s"], ["y"], mode="linear")],
        [("x", F, [1, 2, 3, 3])], [("y", F, [1, 2, 3, 6])],
        [("s", np.array([1, 1, 1, 2], np.float32))], opset=9),
    "scatter": lambda: model(
        [h.make_node("Scatter", ["x", "i", "u"], ["y"], axis=1)],
        [("x", F, [3, 5]), ("i", T.INT64, [3, 2]), ("u", F, [3, 2])], [("y", F, [3, 5])],
        opset=10),
    "recurrent": lambda: _recurrent(),
    # Attention (opset 23), causal, 2 heads of 8 in a 3-D [B, S, H*D] layout
    "attention": lambda: model(
        [h.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1, q_num_heads=2,
                     kv_num_heads=2)],
        [("q", F, [1, 4, 16]), ("k", F, [1, 6, 16]), ("v", F, [1, 6, 16])],
        [("y", F, [1, 4, 16])], opset=23),
    # FlexAttention (ai.onnx.preview 1, scale 0.5, no score / prob modifier)
    "flex_attention": lambda: model(
        [h.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview",
                     scale=0.5)],
        [("q", F, [1, 2, 4, 8]), ("k", F, [1, 2, 6, 8]), ("v", F, [1, 2, 6, 8])],
        [("y", F, [1, 2, 4, 8])], opset=26, extra=(h.make_opsetid("ai.onnx.preview", 1),)),
    "quant": lambda: _quant(),
}


def _quant():
    """One independent node per quantized op (opset 21), constant parameters and weights."""
    rng = np.random.default_rng(0)
    f32 = lambda a: np.array(a, np.float32)  # noqa: E731
    nodes = [
        h.make_node("QuantizeLinear", ["xq", "q_s", "q_z"], ["y_q"]),
        h.make_node("DequantizeLinear", ["xd", "d_s", "d_z"], ["y_dq"], axis=1),
        h.make_node("DynamicQuantizeLinear", ["xq"], ["y_dyn", "y_dyn_s", "y_dyn_z"]),
        h.make_node("MatMulInteger", ["a", "mm_b", "mm_za", "mm_zb"], ["y_mmi"]),
        h.make_node("ConvInteger", ["xc", "ci_w", "ci_zx", "ci_zw"], ["y_ci"], pads=[1, 1, 1, 1]),
        h.make_node("QLinearConv", ["xs", "qc_sx", "qc_zx", "qc_w", "qc_sw", "qc_zw", "qc_sy",
                                    "qc_zy", "qc_b"], ["y_qc"], pads=[1, 1, 1, 1]),
    ]
    inits = [
        ("q_s", f32(0.05)), ("q_z", np.array(3, np.int8)),
        ("d_s", f32([0.5, 0.25, 2.0])), ("d_z", np.array([128, 0, 7], np.uint8)),
        ("mm_b", rng.integers(-128, 128, (32, 8)).astype(np.int8)),
        ("mm_za", np.array(120, np.uint8)), ("mm_zb", np.array(3, np.int8)),
        ("ci_w", rng.integers(0, 256, (4, 3, 3, 3)).astype(np.uint8)),
        ("ci_zx", np.array(120, np.uint8)), ("ci_zw", np.array(130, np.uint8)),
        ("qc_sx", f32(0.02)), ("qc_zx", np.array(-3, np.int8)),
        ("qc_w", rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)),
        ("qc_sw", f32([0.01, 0.02, 0.005, 0.03])), ("qc_zw", np.zeros(4, np.int8)),
        ("qc_sy", f32(0.1)), ("qc_zy", np.array(5, np.int8)),
        ("qc_b", np.array([10, -20, 0, 7], np.int32)),
    ]
    return model(nodes, [("xq", F, [4, 6]), ("xd", T.UINT8, [2, 3, 4]), ("a", T.UINT8, [4, 32]),
                         ("xc", T.UINT8, [1, 3, 6, 6]), ("xs", T.INT8, [1, 3, 6, 6])],
                 [("y_q", T.INT8, [4, 6]), ("y_dq", F, [2, 3, 4]), ("y_dyn", T.UINT8, [4, 6]),
                  ("y_dyn_s", F, []), ("y_dyn_z", T.UINT8, []), ("y_mmi", T.INT32, [4, 8]),
                  ("y_ci", T.INT32, [1, 4, 6, 6]), ("y_qc", T.INT8, [1, 4, 6, 6])], inits)


def _recurrent(seq=2, batch=2, inp=4, hid=3):
    """RNN, GRU (reverse) and LSTM (peepholes) on the same x [seq, batch, input], constant weights
    and biases, every output (opset 22)."""
    rng = np.random.default_rng(0)
    nodes, inits, outs = [], [], []
    for op, gates, kw in (("RNN", 1, {}), ("GRU", 3, {"direction": "reverse"}),
                          ("LSTM", 4, {})):
        t = op.lower()
        names = ["x", f"{t}_w", f"{t}_r", f"{t}_b"]
        inits += [(f"{t}_w", rng.standard_normal((1, gates * hid, inp)).astype(np.float32)),
                  (f"{t}_r", rng.standard_normal((1, gates * hid, hid)).astype(np.float32)),
                  (f"{t}_b", rng.standard_normal((1, 2 * gates * hid)).astype(np.float32))]
        if op == "LSTM":
            names += ["", "", "", f"{t}_p"]
            inits.append((f"{t}_p", rng.standard_normal((1, 3 * hid)).astype(np.float32)))
        ys = [f"{t}_y", f"{t}_yh"] + ([f"{t}_yc"] if op == "LSTM" else [])
        nodes.append(h.make_node(op, names, ys, hidden_size=hid, **kw))
        outs += [(ys[0], F, [seq, 1, batch, hid])] + [(y, F, [1, batch, hid]) for y in ys[1:]]
    return model(nodes, [("x", F, [seq, batch, inp])], outs, inits, opset=22)


if __name__ == "__main__":
    for kind in sys.argv[2:]:
        onnx.save(MODELS[kind](), f"{sys.argv[1]}.{kind}.onnx")
