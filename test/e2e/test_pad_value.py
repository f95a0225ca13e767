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


@pytest.mark.onnx_op("Pad", kind="oracle")
@pytest.mark.parametrize("shape,pool,pads,value", [
    ((2, 1, 2, 2), "GlobalAveragePool", [1, 1, 1, 2, 0, 0, 0, 1], 0.25),  # the fuzzer's case
    ((2, 1, 2, 3), "GlobalAveragePool", [0, 1, 1, 2, 0, 0, 0, 1], 0.0),  # C and spatial
    ((1, 2, 3, 3), "GlobalMaxPool", [0, 2, 0, 0, 1, 0, 0, 0], 0.0),  # N and C only
    ((1, 2, 1, 1), "GlobalAveragePool", [0, 1, 0, 0, 0, 1, 0, 0], 0.0),  # C only, 1x1 image
])
def test_pad_of_batch_or_channels_before_a_pool(shape, pool, pads, value):
    """A ``Pad`` of N or C between two pools: a pool pads only H and W, so the pad must stay its
    own copy instead of folding into the pool (it was refused, "padding of N or C"; found by the
    fuzzer, session 11). Oracle: numpy's mean, ``np.pad`` and the pool's mean / max over H, W."""
    from m100.tools.onnx_backend import M100Backend

    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    padded = _np_pad(x.mean(axis=(2, 3), keepdims=True), pads, np.float32(value))
    red = np.mean if pool == "GlobalAveragePool" else np.max
    want = red(padded, axis=(2, 3), keepdims=True).astype(np.float32)
    g = h.make_graph([h.make_node("GlobalAveragePool", ["x"], ["x1"]),
                      h.make_node("Pad", ["x1", "pads", "v"], ["t"], mode="constant"),
                      h.make_node(pool, ["t"], ["y"])], "g",
                     [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                     [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, want.shape)],
                     [nh.from_array(np.array(pads, np.int64), "pads"),
                      nh.from_array(np.array(value, np.float32), "v")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    (got,) = M100Backend.prepare(m, machine="tiny").run([x])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
