"""A SwiGLU MLP (LLaMA-style: ``down(SwiGLU(x @ Wg, x @ Wu))``, opset 28) through the whole stack
(compile for ``tiny`` + interpreter) against numpy written from the ONNX definition
(``SwiGLU(A, B) = A * sigmoid(alpha * A) * B``). The SwiGLU node is replaced by its function body,
whose Swish is expanded in turn (``frontend/onnx_rewrite_functions.py``); its gate and value are
internal values of the graph here, not graph inputs as in the node tests."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from m100.tools.onnx_backend import M100Backend


@pytest.mark.onnx_op("SwiGLU", kind="oracle")
@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_swiglu_mlp_matches_numpy(alpha):
    rng = np.random.default_rng(7)
    wg, wu = (rng.normal(0, 0.3, (16, 32)).astype(np.float32) for _ in range(2))
    wd = rng.normal(0, 0.2, (32, 16)).astype(np.float32)
    nodes = [h.make_node("MatMul", ["x", "wg"], ["gate"]), h.make_node("MatMul", ["x", "wu"], ["up"]),
             h.make_node("SwiGLU", ["gate", "up"], ["act"], alpha=alpha),
             h.make_node("MatMul", ["act", "wd"], ["y"])]
    g = h.make_graph(nodes, "mlp", [h.make_tensor_value_info("x", T.FLOAT, [8, 16])],
                     [h.make_tensor_value_info("y", T.FLOAT, [8, 16])],
                     [nh.from_array(wg, "wg"), nh.from_array(wu, "wu"), nh.from_array(wd, "wd")])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 28)])
    onnx.checker.check_model(model)
    x = rng.uniform(-3, 3, (8, 16)).astype(np.float32)
    (got,) = M100Backend.prepare(model, machine="tiny").run([x])
    a, b = x.astype(np.float64) @ wg, x.astype(np.float64) @ wu
    want = (a / (1 + np.exp(-alpha * a)) * b) @ wd
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
