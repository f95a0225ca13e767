"""Integer Neg and Abs through the whole stack (compile for ``tiny`` + interpreter), exact against
numpy (``-x`` and ``np.abs``, which wrap in the type as ONNX does).

Two bugs this would have caught (found by the integer fuzzer, seed 803):
- torch-mlir lowers an integer ``Neg`` through f32 (``sitofp``, ``negf``, ``fptosi``): int32
  values beyond 2**24 lost their low bits (Neg of 16777217 gave -16777216, silently wrong) and the
  int8/int16 minimum faulted; ``frontend/onnx_rewrite_unsigned`` now makes it ``Sub(0, x)``.
- ``math.absi`` of the i8/i16 minimum (|-128| = 128) faulted at the narrowing store instead of
  wrapping to -128 (``passes/schedule/ir_facts``: absi is wrapped like addi/subi/muli).
An int32 result outside i32 (Neg or Abs of -2**31) is the interpreter's fault, never a number.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h

from m100.tools.onnx_backend import InterpreterReport, M100Backend


def _model(dt: np.dtype, shape: tuple[int, ...]):
    tt = h.np_dtype_to_tensor_dtype(dt)
    g = h.make_graph([h.make_node("Neg", ["x"], ["n"]), h.make_node("Abs", ["x"], ["a"])], "g",
                     [h.make_tensor_value_info("x", tt, shape)],
                     [h.make_tensor_value_info("n", tt, shape),
                      h.make_tensor_value_info("a", tt, shape)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _values(dt: np.dtype) -> np.ndarray:
    info = np.iinfo(dt)
    if dt.itemsize <= 2:  # every value of the type
        return np.arange(int(info.min), int(info.max) + 1).astype(dt).reshape(-1, 256)
    rng = np.random.default_rng(7)
    # beyond f32's 24-bit mantissa, around it, and the i32 extremes (without -2**31: a fault)
    v = np.concatenate([[2**24 + 1, -(2**24 + 1), 2**31 - 1, -(2**31 - 1), 0, 1, -1, 123456789],
                        rng.integers(-(2**31 - 1), 2**31, 248)])
    return v.astype(dt).reshape(-1, 64)


@pytest.mark.onnx_op("Neg", "Abs", kind="oracle")
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_integer_neg_abs_exact(dtype):
    dt = np.dtype(dtype)
    x = _values(dt)
    with np.errstate(over="ignore"):
        want_n, want_a = -x, np.abs(x)
    got_n, got_a = M100Backend.prepare(_model(dt, x.shape), machine="tiny").run([x])
    assert got_n.dtype == dt and got_a.dtype == dt
    np.testing.assert_array_equal(got_n, want_n)
    np.testing.assert_array_equal(got_a, want_a)


def test_int32_neg_overflow_is_a_fault_not_a_wrapped_value():
    x = np.array([-2**31, 5], np.int32)
    rep = M100Backend.prepare(_model(np.dtype(np.int32), (2,)), machine="tiny")
    with pytest.raises(InterpreterReport, match="overflow"):
        rep.run([x])
