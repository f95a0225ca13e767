"""A constant ``Pad`` whose pad value is a run-time input, through the whole stack (``tiny`` +
interpreter), against numpy's ``np.pad`` (negative pads crop). torch-mlir reads the value with a
``tensor.extract`` that no M100 unit runs (it was refused); ``frontend/onnx_rewrite_vision`` makes
it ``Where(mask, Pad(x, pads, 0), value)``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h, numpy_helper as nh


def _np_pad(x, pads, value):
    r = x.ndim
    lo, hi = pads[:r], pads[r:]
    crop = tuple(slice(max(0, -b), x.shape[i] - max(0, -e)) for i, (b, e) in enumerate(zip(lo, hi)))
    return np.pad(x[crop], [(max(0, b), max(0, e)) for b, e in zip(lo, hi)], constant_values=value)


@pytest.mark.onnx_op("Pad", kind="oracle")
@pytest.mark.parametrize("dtype,pads", [("float32", [1, 0, 2, 3]), ("float32", [0, -1, 1, 2]),
                                        ("int32", [2, 1, 0, 1])])
def test_pad_runtime_value(dtype, pads):
    from m100.tools.onnx_backend import M100Backend

    dt = np.dtype(dtype)
    t = h.np_dtype_to_tensor_dtype(dt)
    x = (np.arange(4 * 6).reshape(4, 6) - 7).astype(dt)
    v = np.array(-3.5 if dt.kind == "f" else 9, dt)
    out = _np_pad(x, pads, v)
    g = h.make_graph([h.make_node("Pad", ["x", "pads", "v"], ["y"], mode="constant")], "g",
                     [h.make_tensor_value_info("x", t, x.shape), h.make_tensor_value_info("v", t, [])],
                     [h.make_tensor_value_info("y", t, out.shape)],
                     [nh.from_array(np.array(pads, np.int64), "pads")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    (got,) = M100Backend.prepare(m, machine="tiny").run([x, v])
    np.testing.assert_array_equal(got, out)
