"""Small ONNX models of the issue-12 ops rewritten before torch-mlir (losses, dropout,
cumulative ops), for the lit tests: ``python opsa_models.py OUT kind...`` writes ``OUT.<kind>.onnx``."""

from __future__ import annotations

import sys

import onnx
from onnx import TensorProto as T
from onnx import helper as h


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


def dropout_train():
    """Dropout with runtime ratio and training_mode, seed 0, both outputs."""
    n = h.make_node("Dropout", ["x", "r", "t"], ["y", "m"], seed=0)
    return _model([n], [_vi("x", [4, 8]), _vi("r", []), _vi("t", [], T.BOOL)],
                  [_vi("y", [4, 8]), _vi("m", [4, 8], T.BOOL)])


def dropout_noseed():
    """Dropout with a runtime training_mode and no seed: needs a run-time generator."""
    n = h.make_node("Dropout", ["x", "r", "t"], ["y"])
    return _model([n], [_vi("x", [4, 8]), _vi("r", []), _vi("t", [], T.BOOL)], [_vi("y", [4, 8])])


def _scan(op, t, shape, **attrs):
    axis = h.make_tensor("axis", T.INT64, [], [1])
    n = h.make_node(op, ["x", "axis"], ["y"], **attrs)
    return _model([n], [_vi("x", shape, t)], [_vi("y", shape, t)], [axis],
                  opset=26 if op == "CumProd" else 22)  # CumProd came with opset 26


def cumsum_rev():
    """CumSum over axis 1 (length 5) of a [2, 5, 3] float32, reverse."""
    return _scan("CumSum", T.FLOAT, [2, 5, 3], reverse=1)


def cumprod_int_excl():
    """CumProd over axis 1 (length 4) of a [3, 4] int32, exclusive."""
    return _scan("CumProd", T.INT32, [3, 4], exclusive=1)


def cumsum_f64():
    """CumSum of float64 (refused: never computed in f32)."""
    return _scan("CumSum", T.DOUBLE, [2, 3])


def bf16_mul_pad():
    """bf16 storage: x * w (a bf16 constant), zero-padded by one on the last axis with 1.5."""
    import ml_dtypes
    import numpy as np
    from onnx import numpy_helper

    bf = ml_dtypes.bfloat16
    w = numpy_helper.from_array(np.array([[0.5, -2.0, 1.25], [3.0, 0.75, -1.5]], bf), "w")
    pads = h.make_tensor("pads", T.INT64, [4], [0, 0, 0, 1])
    cv = numpy_helper.from_array(np.array(1.5, bf), "cv")
    nodes = [h.make_node("Mul", ["x", "w"], ["m"]),
             h.make_node("Pad", ["m", "pads", "cv"], ["y"], mode="constant")]
    return _model(nodes, [_vi("x", [2, 3], T.BFLOAT16)], [_vi("y", [2, 4], T.BFLOAT16)],
                  [w, pads, cv])


KINDS = {f.__name__: f for f in (nll_weight_ii, sce_logprob, nll_f64, dropout_train,
                                 dropout_noseed, cumsum_rev, cumprod_int_excl, cumsum_f64,
                                 bf16_mul_pad)}


if __name__ == "__main__":
    out = sys.argv[1]
    for kind in sys.argv[2:]:
        onnx.save(KINDS[kind](), f"{out}.{kind}.onnx")
