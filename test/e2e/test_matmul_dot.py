"""``MatMul`` of two 1-D tensors (a dot product, a 0-D result) through the whole stack, against
numpy. torch-mlir lowers it to ``linalg.dot``, which the scheduler has no kind for (it was refused);
``frontend/onnx_rewrite._matmul_vec`` makes it ``[1, K] @ [K, 1]`` squeezed to a scalar."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h

from m100.tools.onnx_backend import M100Backend


@pytest.mark.onnx_op("MatMul", kind="oracle")
@pytest.mark.parametrize("k", [1, 7, 300])
def test_matmul_1d_1d(k):
    rng = np.random.default_rng(k)
    a, b = (rng.standard_normal(k).astype(np.float32) for _ in range(2))
    g = h.make_graph([h.make_node("MatMul", ["a", "b"], ["y"])], "g",
                     [h.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [k]),
                      h.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [k])],
                     [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    (got,) = M100Backend.prepare(m, machine="tiny").run([a, b])
    want = np.dot(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == ()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))
