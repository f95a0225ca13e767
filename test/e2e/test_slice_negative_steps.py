"""``Slice`` with negative steps, through the whole stack (``tiny`` + interpreter), against numpy's
own slicing (``x[start:end:step]`` clamps out-of-range bounds exactly as the ONNX definition does).
torch-mlir lowers a negative step through ``torch.aten.flip`` with dynamic shapes, which the static
schedule refused; ``frontend/onnx_rewrite_slice.py`` makes it a positive-step ``Slice`` and a
reversal ``Gather`` with constant indices (a DMA copy: ``from_ir/csu.flip``). Also a ``Gather``
with a constant, non-affine index tensor (it was refused: its indices were not a produced value)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h, numpy_helper as nh


def _slice_model(shape, starts, ends, axes, steps, dt):
    x = (np.arange(np.prod(shape)).reshape(shape) * 3 - 11).astype(dt)
    sl = [slice(None)] * len(shape)
    for a, b, e, s in zip(axes, starts, ends, steps):
        sl[a] = slice(b, e, s)
    want = x[tuple(sl)]
    t = h.np_dtype_to_tensor_dtype(np.dtype(dt))
    inits = [nh.from_array(np.array(v, np.int64), n)
             for v, n in ((starts, "s"), (ends, "e"), (axes, "a"), (steps, "k"))]
    g = h.make_graph([h.make_node("Slice", ["x", "s", "e", "a", "k"], ["y"])], "g",
                     [h.make_tensor_value_info("x", t, x.shape)],
                     [h.make_tensor_value_info("y", t, want.shape)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    onnx.checker.check_model(m, full_check=True)
    return m, x, want


@pytest.mark.onnx_op("Slice", kind="oracle")
@pytest.mark.parametrize("shape,starts,ends,axes,steps,dt", [
    ((20, 10, 5), [20, 10, 4], [0, 0, 1], [0, 1, 2], [-1, -3, -2], "float32"),  # ONNX's own case
    ((7, 6), [-1], [-100], [1], [-1], "float32"),          # whole axis reversed, clamped end
    ((7, 6), [100, 1], [2, 5], [0, 1], [-2, 2], "int32"),   # clamped start, mixed signs
    ((3, 4, 5), [3], [-6], [-1], [-1], "int8"),             # negative axis, int8
])
def test_negative_step_slice(shape, starts, ends, axes, steps, dt):
    from m100.tools.onnx_backend import M100Backend

    m, x, want = _slice_model(shape, starts, ends, axes, steps, dt)
    (got,) = M100Backend.prepare(m, machine="tiny").run([x])
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.onnx_op("Gather", kind="oracle")
@pytest.mark.parametrize("axis,idx", [(0, [[4, 0, 2], [1, 1, 3]]), (1, [[4, 0, 2], [1, 1, 3]]),
                                      (0, [5, 0, 3, 3]), (1, [2, 4, 0])])
def test_gather_constant_indices(axis, idx):
    from m100.tools.onnx_backend import M100Backend

    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    idx = np.array(idx, np.int64)  # not an affine map: a real gather
    want = np.take(x, idx, axis=axis)
    g = h.make_graph([h.make_node("Gather", ["x", "i"], ["y"], axis=axis)], "g",
                     [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                     [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, want.shape)],
                     [nh.from_array(idx, "i")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    (got,) = M100Backend.prepare(m, machine="tiny").run([x])
    np.testing.assert_array_equal(got, want)


@pytest.mark.onnx_op("Gather", kind="oracle")
@pytest.mark.parametrize("shape,axis", [((2, 4, 1), 1), ((2, 4, 1), -3), ((1, 3, 1, 2), 1),
                                        ((1, 3, 1, 2), 3)])
def test_gather_runtime_indices_beside_unit_axes(shape, axis):
    """Run-time indices (every value of [-d, d - 1], negative ones normalized by torch-mlir's
    select) on a table with extent-1 axes: canonicalization folds those axes' ``linalg.index`` to
    the constant 0, which the gather reader refused (found by the fuzzer's Gather, session 11)."""
    from m100.tools.onnx_backend import M100Backend

    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    d = shape[axis]
    idx = np.arange(-d, d, dtype=np.int64)
    rng.shuffle(idx)
    want = np.take(x, idx, axis=axis)
    g = h.make_graph([h.make_node("Gather", ["x", "i"], ["y"], axis=axis)], "g",
                     [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape),
                      h.make_tensor_value_info("i", onnx.TensorProto.INT64, idx.shape)],
                     [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, want.shape)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    (got,) = M100Backend.prepare(m, machine="tiny").run([x, idx])
    np.testing.assert_array_equal(got, want)
