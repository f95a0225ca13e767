"""The oracle session (frontend/ort_session.py): onnxruntime's answers through it follow the ONNX
definition on the integer kernels whose fast x86 path saturates (AVX2 without VNNI: u8 x s8 pairs
summed in int16 by ``vpmaddubsw``). Oracle: numpy in int64 from MatMulInteger's definition."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")

from m100.frontend.ort_session import ort_session  # noqa: E402


def _matmul_integer(w: np.ndarray, xdt: int):
    m = helper.make_model(helper.make_graph(
        [helper.make_node("MatMulInteger", ["x", "w"], ["y"])], "mmi",
        [helper.make_tensor_value_info("x", xdt, [4, w.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [4, w.shape[1]])],
        [numpy_helper.from_array(w, "w")]), opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("xdt", [TensorProto.UINT8, TensorProto.INT8])
def test_integer_matmul_with_pairs_beyond_int16_is_exact(xdt):
    """255 * 127 + 255 * 127 = 64770 does not fit int16: a saturating kernel returns 32767-based
    sums (on the CI's AMD EPYC, AVX2 only, MatMulInteger u8 x s8 was off by up to 24 890)."""
    rng = np.random.default_rng(0)
    k, n = 64, 24
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    w[:, 0] = 127  # every pair of column 0 overflows int16 with x = 255
    if xdt == TensorProto.UINT8:
        x = rng.integers(0, 256, (4, k)).astype(np.uint8)
        x[0] = 255
    else:
        x = rng.integers(-128, 128, (4, k)).astype(np.int8)
        x[0] = -128
    (y,) = ort_session(_matmul_integer(w, xdt)).run(None, {"x": x})
    np.testing.assert_array_equal(y.astype(np.int64), x.astype(np.int64) @ w.astype(np.int64))
