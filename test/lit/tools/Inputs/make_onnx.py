"""Write a tiny ONNX model: y = relu(x @ w + b), x: 2x4 f32, w: 4x3, b: 3 (for m100-opt tests).

usage: make_onnx.py OUT.onnx [--broken]   (--broken: a MatMul whose shapes do not agree)
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

broken = "--broken" in sys.argv
w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
if broken:
    w = numpy_helper.from_array(np.ones((5, 3), np.float32), "w")
b = numpy_helper.from_array(np.array([0.5, -1.0, 0.25], np.float32), "b")
nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["xwb"]),
         helper.make_node("Relu", ["xwb"], ["y"])]
graph = helper.make_graph(nodes, "tiny_mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          initializer=[w, b])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.save(model, sys.argv[1])
