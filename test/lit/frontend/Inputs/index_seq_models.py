"""Small ONNX models of the ops rewritten before torch-mlir by frontend/onnx_rewrite_index.py,
onnx_rewrite_scatter.py, onnx_rewrite_pool3d.py and onnx_rewrite_recurrent.py (lit inputs).

    python index_seq_models.py PREFIX kind...   # writes PREFIX.kind.onnx
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

F = T.FLOAT


def model(nodes, ins, outs, inits=(), opset=18):
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info(n, t, s) for n, t, s in ins],
                     [h.make_tensor_value_info(n, t, s) for n, t, s in outs],
                     [nh.from_array(a, n) for n, a in inits])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


MODELS = {
    "onehot": lambda: model(
        [h.make_node("OneHot", ["i", "d", "v"], ["y"], axis=1)],
        [("i", T.INT64, [2, 3]), ("v", F, [2])], [("y", F, [2, 4, 3])],
        [("d", np.array([4], np.int64))]),
    "scatter_elements": lambda: model(
        [h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction="add")],
        [("x", F, [3, 5]), ("i", T.INT64, [3, 2]), ("u", F, [3, 2])], [("y", F, [3, 5])]),
    "scatter_nd": lambda: model(
        [h.make_node("ScatterND", ["x", "i", "u"], ["y"])],
        [("x", F, [4, 3]), ("i", T.INT64, [2, 1]), ("u", F, [2, 3])], [("y", F, [4, 3])]),
    "maxpool3d": lambda: model(
        [h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2])],
        [("x", F, [1, 2, 4, 4, 4])], [("y", F, [1, 2, 3, 3, 3])]),
    "causal_conv": lambda: model(
        [h.make_node("CausalConvWithState", ["x", "w"], ["y", "s"], activation="silu")],
        [("x", F, [1, 4, 6]), ("w", F, [4, 1, 3])], [("y", F, [1, 4, 6]), ("s", F, [1, 4, 2])],
        opset=27),
    "linear_attention": lambda: model(
        [h.make_node("LinearAttention", ["q", "k", "v"], ["o", "s"], q_num_heads=2,
                     kv_num_heads=1, update_rule="linear")],
        [("q", F, [1, 2, 8]), ("k", F, [1, 2, 4]), ("v", F, [1, 2, 4])],
        [("o", F, [1, 2, 8]), ("s", F, [1, 1, 4, 4])], opset=27),
}

if __name__ == "__main__":
    for kind in sys.argv[2:]:
        onnx.save(MODELS[kind](), f"{sys.argv[1]}.{kind}.onnx")
