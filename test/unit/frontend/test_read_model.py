"""``shape_only.read_model`` (a binary model parsed from a mapping of its file) against
``onnx.load(path, load_external_data=False)`` -- the reference -- on every form a path can hold."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper, numpy_helper

from m100.frontend.shape_only import load_onnx_lazy, read_model


def _model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b")
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, name="gemm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.metadata_props.add(key="k", value="v")
    return m


def _same(path) -> onnx.ModelProto:
    ref = onnx.load(str(path), load_external_data=False)
    got = read_model(path)
    assert type(got) is type(ref)
    assert got == ref and got.SerializeToString() == ref.SerializeToString()
    return got


@pytest.mark.parametrize("name", ["m.onnx", "m.pb", "model", "m.ONNX.bin"])
def test_read_model_is_onnx_load(tmp_path, name):
    p = tmp_path / name
    onnx.save(_model(1), str(p), format="protobuf")
    got = _same(p)
    assert numpy_helper.to_array(got.graph.initializer[0]).shape == (64, 32)


@pytest.mark.parametrize("name,fmt", [("m.textproto", "textproto"), ("m.json", "json"),
                                      ("m.pbtxt", "textproto")])
def test_read_model_text_formats(tmp_path, name, fmt):
    """A text format by extension is onnx's own parse (parsed as binary it raises DecodeError)."""
    p = tmp_path / name
    onnx.save(_model(2), str(p), format=fmt)
    _same(p)


def test_read_model_external_data_is_left_out(tmp_path):
    p = tmp_path / "ext.onnx"
    onnx.save(_model(3), str(p), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.bin", size_threshold=0)
    got = _same(p)
    assert all(t.data_location == TensorProto.EXTERNAL for t in got.graph.initializer)
    full = load_onnx_lazy(p)  # the data file is there: loaded
    assert full.graph.initializer[0].raw_data == _model(3).graph.initializer[0].raw_data


def test_read_model_empty_and_broken_files(tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert not _same(empty).HasField("graph")
    data = _model(4).SerializeToString()
    for k, body in enumerate((data[: len(data) // 2], b"\xff" * 64, b"not a model at all")):
        p = tmp_path / f"bad{k}.onnx"
        p.write_bytes(body)
        with pytest.raises(DecodeError):
            onnx.load(str(p), load_external_data=False)
        with pytest.raises(DecodeError):
            read_model(p)


def test_read_model_leaves_no_mapping(tmp_path):
    """The mapping is closed after the parse (the message owns its bytes): the file can be
    rewritten and read again."""
    p = tmp_path / "m.onnx"
    onnx.save(_model(5), str(p))
    first = read_model(p)
    onnx.save(_model(6), str(p))
    assert read_model(p) == _model(6) and first == _model(5)
