"""``Cast`` to int16 / uint16 through the whole stack (compile for ``tiny`` + interpreter), exact
against numpy's ``astype`` (ONNX's Cast: integers keep their low 16 bits, floats truncate toward
zero). torch-mlir cannot lower such a Cast; ``frontend/onnx_rewrite_cast16`` makes it a table
``Gather``. Before, every one was refused (the integer fuzzer drew it in about one graph in ten).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h

from m100.tools.onnx_backend import M100Backend


def _model(src: np.dtype, dst: np.dtype, shape, opset: int = 18):
    ts, td = h.np_dtype_to_tensor_dtype(src), h.np_dtype_to_tensor_dtype(dst)
    g = h.make_graph([h.make_node("Cast", ["x"], ["y"], to=td)], "g",
                     [h.make_tensor_value_info("x", ts, shape)],
                     [h.make_tensor_value_info("y", td, shape)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _values(dt: np.dtype) -> np.ndarray:
    rng = np.random.default_rng(16)
    if dt == np.bool_:
        return np.array([False, True] * 32).reshape(4, 16)
    if dt.kind == "f":  # fractions of both signs (truncation), beyond int16, the 16-bit edges
        big = float(np.finfo(dt).max) if dt.itemsize == 2 else 1e5  # finite in float16
        v = np.concatenate([[0.0, -0.0, 0.75, -0.75, 1.5, -1.5, 32767.9, -32768.9, 40000.5,
                             -40000.5, 65504.0, -65504.0, 61000.7, -61000.7, 123.0, -123.0],
                            rng.uniform(-big, big, 48)])
        return v.astype(dt).reshape(4, 16)
    info = np.iinfo(dt)
    if dt.itemsize <= 2:  # every value of the type
        return np.arange(int(info.min), int(info.max) + 1).astype(dt).reshape(-1, 256)
    lim = 2**31 - 1  # int64 inputs are held as int32 by the runtime
    v = np.concatenate([[0, 1, -1, 32767, 32768, -32768, -32769, 65535, 65536, lim, -lim],
                        rng.integers(-lim, lim, 53)])
    return v.astype(dt).reshape(4, 16)


@pytest.mark.onnx_op("Cast", kind="oracle")
@pytest.mark.parametrize("dst", ["int16", "uint16"])
@pytest.mark.parametrize("src", ["bool", "int8", "uint8", "int16", "uint16", "int32", "int64",
                                 "float32", "float16"])
def test_cast_to_16_bit_exact(src, dst):
    s, d = np.dtype(src), np.dtype(dst)
    x = _values(s)
    if s.kind == "f":
        want = np.trunc(x.astype(np.float64)).astype(np.int64).astype(d)  # low 16 bits
    else:
        want = x.astype(d)
    # all 65536 16-bit values at once: the 128 KB table and its indices need more than tiny's HBSM
    machine = "m100" if x.size > 4096 else "tiny"
    (got,) = M100Backend.prepare(_model(s, d, x.shape), machine=machine).run([x])
    assert got.dtype == d
    np.testing.assert_array_equal(got, want)


def test_rewrite_shape():
    """The rewrite itself: 1-byte sources look up a table of their own range (no mask), wider ones
    mask to 16 bits and look up all 65536 patterns; a Cast to the same type is an Identity."""
    from m100.frontend.onnx_rewrite_cast16 import rewrite_cast16

    names = iter(f"v{i}" for i in range(100))
    cast = [h.make_node("Cast", ["a"], ["ya"], to=onnx.TensorProto.INT16),
            h.make_node("Cast", ["b"], ["yb"], to=onnx.TensorProto.UINT16),
            h.make_node("Cast", ["c"], ["yc"], to=onnx.TensorProto.INT16)]
    types = {"a": onnx.TensorProto.INT8, "b": onnx.TensorProto.INT32, "c": onnx.TensorProto.INT16}
    nodes, inits, count = rewrite_cast16(cast, lambda p: next(names), types, 18)
    assert count == 3
    assert [n.op_type for n in nodes] == ["Cast", "Sub", "Gather", "BitwiseAnd", "Gather",
                                           "Identity"]
    tables = [onnx.numpy_helper.to_array(t) for t in inits if t.dims and t.dims[0] > 1]
    assert [(t.dtype, t.shape, int(t[0]), int(t[-1])) for t in tables] == [
        (np.int16, (256,), -128, 127), (np.uint16, (65536,), 0, 65535)]
    # before opset 18 (no BitwiseAnd) a wide Cast stays (and is refused by the importer)
    nodes, _, count = rewrite_cast16(cast[1:2], lambda p: next(names), types, 17)
    assert count == 0 and nodes[0].op_type == "Cast"
