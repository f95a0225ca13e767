"""A 0-D value that gains unit dims (``tensor.expand_shape`` with reassociation ``[]`` from
torch-mlir) compiles: ``frontend.onnx_import.zero_d_expands_as_reshapes``. Before, xDSL's verifier
refused every such model ("expected the total number of reassociation dimensions (0) ..."; fuzz
float seed 1311 #40). Oracle: numpy from the ONNX definitions; every index value, negative ones
included (a runtime index: the program must read the row the value names)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from m100.frontend.mlir_load import shared_context
from m100.tools import driver


def _run(nodes, inputs, out, out_shape, feeds, machine="tiny"):
    g = helper.make_graph(nodes, "zero_d", inputs,
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    module, _ = driver.load_model(m, shared_context())
    cr = driver.compile(module, machine=machine)
    syms = [s.name for s in cr.program.symbols if s.role == "input"]
    res = driver.run(cr.program, {s: feeds[s] for s in syms})
    assert not res.reports, res.reports
    return np.asarray(list(res.outputs.values())[0])


@pytest.mark.onnx_op("Gather", kind="oracle")
@pytest.mark.parametrize("axis", [0, 1])
def test_gather_with_a_runtime_scalar_index_every_index(axis):
    """``Gather(x, i)`` with a rank-0 runtime ``i``: ``x[i]`` (axis 0) / ``x[:, i]`` (axis 1)
    for every valid ``i``, negative ones included."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5 - 2.0
    n = x.shape[axis]
    out_shape = [4] if axis == 0 else [3]
    for i in range(-n, n):
        got = _run([helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, [])],
                   "y", out_shape, {"x": x, "i": np.array(i, np.int64)})
        want = np.take(x, i, axis=axis)
        np.testing.assert_array_equal(got.reshape(want.shape), want, err_msg=f"i={i}")


@pytest.mark.onnx_op("Unsqueeze", kind="oracle")
def test_unsqueeze_of_a_0d_input_then_broadcast_mul():
    """``Unsqueeze`` of a 0-D runtime input to ``[1, 1]``, times a ``[2, 3]`` input."""
    s = np.array(-1.75, np.float32)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    axes = helper.make_tensor("ax", TensorProto.INT64, [2], [0, 1])
    got = _run([helper.make_node("Constant", [], ["axes"], value=axes),
                helper.make_node("Unsqueeze", ["s", "axes"], ["u"]),
                helper.make_node("Mul", ["u", "x"], ["y"])],
               [helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
                helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
               "y", [2, 3], {"s": s, "x": x})
    np.testing.assert_array_equal(got.reshape(2, 3), s.reshape(1, 1) * x)
