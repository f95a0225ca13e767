"""MaxPool of int8 / uint8 with padding through the whole stack (compile for ``tiny`` +
interpreter), compared exactly with onnxruntime.

torch-mlir pads an integer MaxPool whose padding is asymmetric (explicit, ``auto_pad`` SAME_*, or
the end pads of ``ceil_mode``) by 0 instead of the type's smallest value: a window of negative
int8 values (or, through the unsigned order flip, of uint8 values below 128) gave 0 / 128. Found
by the integer fuzzer (``m100.tools.fuzz_int``, seed 12 #33: ``MaxPool kernel [1, 2] pads
[0, 1, 0, 0]`` of uint8). ``frontend/onnx_rewrite_pool.integer_maxpool_pads`` pads explicitly
with the type's smallest value. The inputs hold mostly values near the type's minimum, so that a
0 pad would win most windows at the border.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h

from m100.tools.onnx_backend import M100Backend, onnxruntime_run

#: MaxPool attributes over a [1, 2, 5, 7] input
VARIANTS = [
    dict(kernel_shape=[1, 2], pads=[0, 1, 0, 0]),  # the fuzzer's case
    dict(kernel_shape=[2, 3], pads=[1, 0, 0, 2], strides=[2, 1]),
    dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),  # symmetric (was right)
    dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[2, 2], auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(kernel_shape=[3, 3], pads=[2, 2, 2, 2]),
    # windows that end before the input does (seed 13 #44: a cropping Pad failed verification)
    dict(kernel_shape=[2, 2], strides=[3, 3], pads=[1, 0, 0, 1]),
]
#: int8 only: dilated (uint8 dilated pooling is refused by the scheduler in one line)
VARIANTS_I8 = [dict(kernel_shape=[2, 2], dilations=[2, 2], pads=[1, 1, 1, 1])]
SHAPE = [1, 2, 5, 7]


def _model(dt, variants):
    tt = h.np_dtype_to_tensor_dtype(np.dtype(dt))
    nodes = [h.make_node("MaxPool", ["x"], [f"y{i}"], **a) for i, a in enumerate(variants)]
    g = h.make_graph(nodes, "pools", [h.make_tensor_value_info("x", tt, SHAPE)],
                     [h.make_tensor_value_info(f"y{i}", tt, None) for i in range(len(nodes))])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)  # static output shapes
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.mark.onnx_op("MaxPool", kind="oracle")
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_padded_integer_maxpool_matches_onnxruntime(dtype):
    dt = np.dtype(dtype)
    model = _model(dt, VARIANTS + (VARIANTS_I8 if dt == np.int8 else []))
    info = np.iinfo(dt)
    rng = np.random.default_rng(33)
    x = rng.integers(info.min, info.min + 40, SHAPE).astype(dt)
    x.ravel()[::5] = rng.integers(info.min, info.max, x.size)[::5]
    x[0, 1, 2, 3] = info.max
    want = onnxruntime_run(model, [x])
    got = M100Backend.prepare(model, machine="tiny").run([x])
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == dt and g.shape == w.shape, (i, g.shape, w.shape)
        np.testing.assert_array_equal(g, w, err_msg=str(model.graph.node[i]))
