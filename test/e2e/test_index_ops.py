"""Index-generating ops through the whole stack (issue 12): Trilu (iota inputs on the CVU integer
lane, materialize-index), Range, EyeLike and OneHot (rewritten before torch-mlir), each compared
with a numpy oracle written from the ONNX operator definition; a runtime OneHot depth is one
clean refusal."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from m100.errors import M100Error
from m100.tools.onnx_backend import M100Backend

RNG = np.random.default_rng(1213)


def _model(nodes, ins, outs, inits=()):
    g = h.make_graph(nodes, "index", ins, outs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m)
    return m


def _run(model, xs):
    return M100Backend.prepare(model, machine="tiny").run(xs)


@pytest.mark.parametrize("upper,k", [(0, 0), (1, -1), (0, 2), (1, 3)])
@pytest.mark.onnx_op("Trilu", kind="oracle")
def test_trilu_float(upper, k):
    # ONNX Trilu: upper keeps j - i >= k, lower keeps j - i <= k (numpy triu/tril)
    x = RNG.standard_normal((2, 5, 6)).astype(np.float32)
    m = _model([h.make_node("Trilu", ["x", "k"], ["y"], upper=upper)],
               [h.make_tensor_value_info("x", T.FLOAT, x.shape)],
               [h.make_tensor_value_info("y", T.FLOAT, x.shape)],
               [numpy_helper.from_array(np.array(k, np.int64), "k")])
    (y,) = _run(m, [x])
    np.testing.assert_array_equal(y, np.triu(x, k) if upper else np.tril(x, k))


@pytest.mark.onnx_op("Range", kind="oracle")
def test_range_int32():
    # ONNX Range: start + i * delta for i < max(ceil((limit - start) / delta), 0)
    start, limit, delta = np.int32(17), np.int32(-5), np.int32(-4)
    n = max(int(np.ceil((limit - start) / delta)), 0)
    m = _model([h.make_node("Range", ["s", "l", "d"], ["y"])], [],
               [h.make_tensor_value_info("y", T.INT32, [n])],
               [numpy_helper.from_array(np.array(v), nm) for v, nm in
                ((start, "s"), (limit, "l"), (delta, "d"))])
    (y,) = _run(m, [])
    np.testing.assert_array_equal(y, start + np.arange(n, dtype=np.int32) * delta)


@pytest.mark.onnx_op("EyeLike", kind="oracle")
def test_eyelike_offset_and_dtype():
    x = np.zeros((4, 6), np.int32)
    m = _model([h.make_node("EyeLike", ["x"], ["y"], k=-1, dtype=T.FLOAT)],
               [h.make_tensor_value_info("x", T.INT32, x.shape)],
               [h.make_tensor_value_info("y", T.FLOAT, x.shape)])
    (y,) = _run(m, [x])
    np.testing.assert_array_equal(y, np.eye(4, 6, k=-1, dtype=np.float32))


def onehot_ref(ind, depth, values, axis):
    """ONNX OneHot: indices cast to int64, negative ones + depth; an index outside
    [-depth, depth) gives the off value everywhere; the class axis is inserted at ``axis``."""
    i = ind.astype(np.int64)
    i = np.where(i < 0, i + depth, i)
    out = np.full(ind.shape + (depth,), values[0], dtype=values.dtype)
    for pos in np.ndindex(ind.shape):
        if 0 <= i[pos] < depth:
            out[pos + (i[pos],)] = values[1]
    return np.moveaxis(out, -1, axis % (ind.ndim + 1))


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.onnx_op("OneHot", kind="oracle")
def test_onehot_float_indices_negative_and_out_of_range(axis):
    depth = 5
    ind = np.array([[0.0, 3.7, -1.0], [-5.0, 7.0, -6.0]], np.float32)  # 3.7 -> 3 (cast)
    vals = np.array([-2.0, 9.5], np.float32)
    shape = list(onehot_ref(ind, depth, vals, axis).shape)
    m = _model([h.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis)],
               [h.make_tensor_value_info("i", T.FLOAT, ind.shape),
                h.make_tensor_value_info("v", T.FLOAT, [2])],
               [h.make_tensor_value_info("y", T.FLOAT, shape)],
               [numpy_helper.from_array(np.array([depth], np.int64), "d")])
    (y,) = _run(m, [ind, vals])
    np.testing.assert_array_equal(y, onehot_ref(ind, depth, vals, axis))


def test_onehot_runtime_depth_is_one_line_refusal():
    m = _model([h.make_node("OneHot", ["i", "d", "v"], ["y"])],
               [h.make_tensor_value_info("i", T.INT64, [3]),
                h.make_tensor_value_info("d", T.INT64, [1]),
                h.make_tensor_value_info("v", T.FLOAT, [2])],
               [h.make_tensor_value_info("y", T.FLOAT, [3, None])])
    with pytest.raises(M100Error) as e:
        M100Backend.prepare(m, machine="tiny", bind=False)
    assert "\n" not in str(e.value) and "tensor.extract" in str(e.value)


# Gather / GatherElements / GatherND with constant indices (slices of the flattened input,
# frontend/onnx_rewrite_index.py); the oracles are numpy's take / take_along_axis / fancy indexing
# (the ONNX definitions), negative indices wrapped by hand
GATHER_CASES = {
    "gather_rows": ("Gather", (5, 4), np.array([4, -1, 0, 1], np.int64), {"axis": 0}),
    "gather_scalar_col": ("Gather", (3, 5, 2), np.array(-2, np.int64), {"axis": 1}),
    "gather_2d_idx": ("Gather", (2, 6), np.array([[5, 0], [3, 3]], np.int64), {"axis": 1}),
    "gather_elements": ("GatherElements", (3, 4), np.array([[0, 3], [1, -1], [2, 2]], np.int64),
                        {"axis": 1}),
    "gather_nd": ("GatherND", (3, 4, 2), np.array([[0, 1], [2, -1]], np.int64), {}),
}


def _gather_ref(op, x, idx, axis):
    if op == "GatherND":
        dims = np.array(x.shape[:idx.shape[-1]])
        idx = np.where(idx < 0, idx + dims, idx)
        return x[tuple(np.moveaxis(idx, -1, 0))]
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    return np.take(x, idx, axis) if op == "Gather" else np.take_along_axis(x, idx, axis)


@pytest.mark.parametrize("case", sorted(GATHER_CASES))
@pytest.mark.onnx_op("Gather", "GatherElements", "GatherND", kind="oracle")
def test_gather_constant_indices(case):
    op, shape, idx, attrs = GATHER_CASES[case]
    x = RNG.standard_normal(shape).astype(np.float32)
    want = _gather_ref(op, x, idx, attrs.get("axis", 0))
    m = _model([h.make_node(op, ["x", "i"], ["y"], **attrs)],
               [h.make_tensor_value_info("x", T.FLOAT, shape)],
               [h.make_tensor_value_info("y", T.FLOAT, want.shape)],
               [numpy_helper.from_array(idx, "i")])
    (y,) = _run(m, [x])
    np.testing.assert_array_equal(y, want)


@pytest.mark.onnx_op("Gather", kind="negative")
def test_gather_constant_index_out_of_range_is_one_line():
    m = _model([h.make_node("Gather", ["x", "i"], ["y"], axis=0, name="g0")],
               [h.make_tensor_value_info("x", T.FLOAT, [5, 4])],
               [h.make_tensor_value_info("y", T.FLOAT, [2, 4])],
               [numpy_helper.from_array(np.array([1, 5], np.int64), "i")])
    with pytest.raises(M100Error) as ei:
        _run(m, [RNG.standard_normal((5, 4)).astype(np.float32)])
    msg = str(ei.value)
    assert "\n" not in msg and "Gather 'g0': constant index out of range" in msg, msg
