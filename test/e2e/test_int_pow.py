"""Integer ``Pow`` through the whole stack (compile for ``tiny`` + interpreter), exact against
numpy's integer power (negative exponents: what ONNX Runtime's ``static_cast<T>(std::pow(x, y))``
gives, from the definition: 1, +-1 for a base of -1, else 0). torch-mlir lowers an integer Pow
through f64 and it was refused; ``frontend/onnx_rewrite_ipow`` is square-and-multiply. A power
outside int32 is the interpreter's overflow fault, never a wrapped number.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h

from m100.tools.onnx_backend import InterpreterReport, M100Backend


def _model(tx, ty, shape):
    g = h.make_graph([h.make_node("Pow", ["x", "y"], ["z"])], "g",
                     [h.make_tensor_value_info("x", tx, shape),
                      h.make_tensor_value_info("y", ty, shape)],
                     [h.make_tensor_value_info("z", tx, shape)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 15)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _want(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = np.zeros(x.shape, np.int64)
    for i, (a, e) in enumerate(zip(x.ravel().tolist(), y.ravel().tolist())):
        if e >= 0:
            out.flat[i] = a ** e  # Python's exact integer power
        else:
            out.flat[i] = 1 if a == 1 else (-1) ** (-e) if a == -1 else 0
    return out


@pytest.mark.onnx_op("Pow", kind="oracle")
@pytest.mark.parametrize("tx,ty", [(np.int32, np.int32), (np.int64, np.int64),
                                   (np.int32, np.int8), (np.int64, np.int32)])
def test_int_pow_exact(tx, ty):
    # every (x, y) whose power fits int32: small bases to high exponents, big bases squared,
    # 0/1/-1 to exponents beyond 31, negative exponents
    pairs = [(x, y) for x in range(-12, 13) for y in range(0, 9) if abs(x ** y) < 2**31]
    pairs += [(2, 30), (-2, 31), (3, 19), (-3, 19), (46340, 2), (-46340, 2), (1290, 3),
              (0, 0), (0, 40), (1, 100), (-1, 100), (-1, 101), (0, 32), (1, 32), (-1, 33),
              (2, -1), (-2, -3), (1, -5), (-1, -5), (-1, -4), (7, -2), (-46341, 1)]
    pairs += [(0, 0)] * (-len(pairs) % 16)
    x = np.array([p[0] for p in pairs], tx).reshape(-1, 16)
    y = np.array([p[1] for p in pairs], ty).reshape(-1, 16)
    m = _model(h.np_dtype_to_tensor_dtype(np.dtype(tx)), h.np_dtype_to_tensor_dtype(np.dtype(ty)),
               x.shape)
    (got,) = M100Backend.prepare(m, machine="tiny").run([x, y])
    assert got.dtype == tx
    np.testing.assert_array_equal(got.astype(np.int64), _want(x, y))


@pytest.mark.parametrize("x,y", [(2, 31), (46341, 2), (3, 40), (-2, 32)])
def test_int_pow_overflow_is_a_fault(x, y):
    """A power outside int32 (here only in the element checked) faults instead of wrapping."""
    m = _model(onnx.TensorProto.INT32, onnx.TensorProto.INT32, (2,))
    with pytest.raises(InterpreterReport, match="overflow|outside"):
        M100Backend.prepare(m, machine="tiny").run([np.array([x, 2], np.int32),
                                                    np.array([y, 3], np.int32)])
