"""Small ONNX models of the issue-12 ops rewritten before torch-mlir (losses, cumulative ops,
dropout, ...), for the lit tests: ``python opsa_models.py OUT kind...`` writes ``OUT.<kind>.onnx``."""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper


def _model(nodes, inputs, outputs, inits=(), opset=22):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def _vi(name, shape, t=T.FLOAT):
    return h.make_tensor_value_info(name, t, shape)


def nll_weight_ii():
    """NLL over [N, C, d1] with a class weight, ignore_index 1, reduction mean."""
    n = h.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["y"], reduction="mean",
                    ignore_index=1)
    return _model([n], [_vi("x", [2, 3, 4]), _vi("t", [2, 4], T.INT64), _vi("w", [3])],
                  [_vi("y", [])])


def sce_logprob():
    """SoftmaxCrossEntropyLoss over [N, C, d1, d2] with both outputs, reduction none."""
    n = h.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y", "lp"], reduction="none")
    return _model([n], [_vi("x", [2, 3, 2, 2]), _vi("t", [2, 2, 2], T.INT64)],
                  [_vi("y", [2, 2, 2]), _vi("lp", [2, 3, 2, 2])])


def nll_f64():
    """NLL of float64 log-probabilities (left to torch-mlir; the scheduler refuses f64)."""
    n = h.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="sum")
    return _model([n], [_vi("x", [2, 3, 4], T.DOUBLE), _vi("t", [2, 4], T.INT64)],
                  [_vi("y", [], T.DOUBLE)])


KINDS = {f.__name__: f for f in (nll_weight_ii, sce_logprob, nll_f64)}


def _axis_init(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


if __name__ == "__main__":
    out = sys.argv[1]
    for kind in sys.argv[2:]:
        onnx.save(KINDS[kind](), f"{out}.{kind}.onnx")
