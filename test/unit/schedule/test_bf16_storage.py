"""bf16 tensors through the whole stack (compile for ``tiny``, interpreter): stored as bf16,
computed in f32 on the CVU, rounded once to bf16 on the store. Oracle: the exact result (float64;
the inputs are chosen so that it is also exact in f32) rounded to nearest even to bf16 by
ml_dtypes -- one rounding, which for +, -, * equals the correctly rounded bf16 operation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.tools.onnx_backend import M100Backend

BF = ml_dtypes.bfloat16


def _bf16_exact(rng, shape, lo=1.0, hi=4.0):
    """bf16 values in [lo, hi) (8 significant bits: sums/products of two are exact in f32)."""
    return rng.uniform(lo, hi, shape).astype(np.float32).astype(BF)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul"])
def test_bf16_binary_is_rounded_once(op):
    rng = np.random.default_rng({"Add": 1, "Sub": 2, "Mul": 3}[op])
    a = _bf16_exact(rng, (4, 16))
    w = _bf16_exact(rng, (4, 16), -4.0, 4.0)  # a bf16 constant: the emitter's bf16 segment
    g = helper.make_graph(
        [helper.make_node(op, ["a", "w"], ["y"])], "bf",
        [helper.make_tensor_value_info("a", TensorProto.BFLOAT16, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [4, 16])],
        initializer=[numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
    (y,) = M100Backend.prepare(m, machine="tiny").run([a])
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    exact = {"Add": a64 + w64, "Sub": a64 - w64, "Mul": a64 * w64}[op]
    assert np.array_equal(exact.astype(np.float32).astype(np.float64), exact)  # exact in f32
    want = exact.astype(np.float32).astype(BF)
    assert y.dtype == BF
    # the rounding matters: the exact results are not all bf16 values
    assert not np.array_equal(want.astype(np.float64), exact)
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))


def test_bf16_pad_value_and_ties_to_even():
    """Pad's constant (a bf16 segment) and f32 -> bf16 ties (bf16 has 7 fraction bits): 1 + 2^-8
    lies halfway between 1 and 1 + 2^-7 -> 1 (even); 1 + 3*2^-8 halfway between 1 + 2^-7 and
    1 + 2^-6 -> 1 + 2^-6 (even; truncation would give 1 + 2^-7); 2 + 2^-7 halfway between 2 and
    2 + 2^-6 -> 2 (even; rounding half up would give 2 + 2^-6)."""
    x = np.array([[1.0, 1.0, 2.0]], np.float32).astype(BF)
    d = np.array([[2.0 ** -8, 3 * 2.0 ** -8, 2.0 ** -7]], np.float32)  # f32 addend
    g = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["xf", "d"], ["s"]),
         helper.make_node("Cast", ["s"], ["sb"], to=TensorProto.BFLOAT16),
         helper.make_node("Pad", ["sb", "pads", "cv"], ["y"], mode="constant")], "bf",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [1, 5])],
        initializer=[numpy_helper.from_array(d, "d"),
                     numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "pads"),
                     numpy_helper.from_array(np.array(-0.375, BF), "cv")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
    (y,) = M100Backend.prepare(m, machine="tiny").run([x])
    want = np.array([[-0.375, 1.0, 1.0 + 2.0 ** -6, 2.0, -0.375]])
    np.testing.assert_array_equal(y.astype(np.float64), want)
