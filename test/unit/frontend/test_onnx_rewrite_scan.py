"""CumSum / CumProd rewritten before torch-mlir as a log-step scan
(:mod:`m100.frontend.onnx_rewrite_scan`), through the whole stack (compile for ``tiny``,
interpreter), against a sequential numpy loop written from the ONNX definition."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.errors import M100Error
from m100.tools.onnx_backend import M100Backend

_T = {np.float32: TensorProto.FLOAT, np.int32: TensorProto.INT32, np.int64: TensorProto.INT64,
      np.float64: TensorProto.DOUBLE}


def _model(op, x, axis, **attrs):
    t = _T[x.dtype.type]
    g = helper.make_graph(
        [helper.make_node(op, ["x", "axis"], ["y"], **attrs)], "scan",
        [helper.make_tensor_value_info("x", t, list(x.shape))],
        [helper.make_tensor_value_info("y", t, list(x.shape))],
        initializer=[numpy_helper.from_array(np.array(axis, np.int64), "axis")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 26)])


def _oracle(op, x, axis, exclusive, reverse):
    """y[i] = x[0] (op) ... (op) x[i] along the axis, one element at a time (float64 / int64);
    exclusive leaves x[i] out, reverse runs from the end."""
    xm = np.moveaxis(x.astype(np.float64 if x.dtype.kind == "f" else np.int64), axis, 0)
    n = xm.shape[0]
    order = range(n - 1, -1, -1) if reverse else range(n)
    acc = np.full(xm.shape[1:], 0 if op == "CumSum" else 1, xm.dtype)
    y = np.empty_like(xm)
    for i in order:
        if exclusive:
            y[i] = acc
        acc = acc + xm[i] if op == "CumSum" else acc * xm[i]
        if not exclusive:
            y[i] = acc
    return np.moveaxis(y, 0, axis)


CASES = [  # op, dtype, shape, axis, exclusive, reverse
    ("CumSum", np.float32, (3, 7, 2), 1, 0, 0),
    ("CumSum", np.float32, (6, 4), 0, 1, 1),
    ("CumSum", np.int32, (2, 9), -1, 1, 0),
    ("CumSum", np.int64, (5,), 0, 0, 1),
    ("CumProd", np.float32, (2, 5, 3), 1, 0, 1),
    ("CumProd", np.int32, (3, 6), 1, 1, 0),
    ("CumSum", np.float32, (4, 1), 1, 1, 0),   # length 1, exclusive: all zeros
]


@pytest.mark.parametrize("op,dt,shape,axis,exclusive,reverse", CASES,
                         ids=[f"{c[0]}-{c[1].__name__}-{'x'.join(map(str, c[2]))}-a{c[3]}"
                              f"{'-excl' if c[4] else ''}{'-rev' if c[5] else ''}" for c in CASES])
def test_scan_matches_definition(op, dt, shape, axis, exclusive, reverse):
    rng = np.random.default_rng(sum(shape) * 10 + len(op))
    if dt is np.float32:
        x = (rng.uniform(0.5, 1.5, shape) if op == "CumProd" else rng.standard_normal(shape))
        x = x.astype(dt)
    else:
        x = rng.integers(-3, 4, shape).astype(dt)
    (y,) = M100Backend.prepare(_model(op, x, axis, exclusive=exclusive, reverse=reverse),
                               machine="tiny").run([x])
    want = _oracle(op, x, axis % len(shape), exclusive, reverse)
    assert y.dtype == x.dtype and y.shape == x.shape
    if dt is np.float32:  # another association than the sequential sum: f32 rounding apart
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(y, want)


def test_f64_is_refused_in_one_line():
    x = np.zeros((2, 3), np.float64)
    with pytest.raises(M100Error) as e:
        M100Backend.prepare(_model("CumSum", x, 1), machine="tiny")
    msg = str(e.value)
    assert "\n" not in msg.strip() and "CumSum" in msg and "float64" in msg
