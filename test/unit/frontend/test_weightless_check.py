"""``onnx_import.check_and_infer``: onnx's checker and shape inference with the big weights'
bytes kept out of the C++ round trip give the same model as on the whole model (the oracle:
``onnx.checker.check_model`` + ``onnx.shape_inference.infer_shapes`` of the model with its bytes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.frontend import FrontendError, models
from m100.frontend import onnx_import as oi

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _oracle(model) -> bytes:
    data = model.SerializeToString()
    onnx.checker.check_model(data)
    return onnx.shape_inference.infer_shapes(data, strict_mode=False).SerializeToString()


def _light_copies(monkeypatch) -> list:
    seen = []
    real = onnx.shape_inference.infer_shapes

    def spy(m, *a, **k):
        seen.append(m)
        return real(m, *a, **k)
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", spy)
    return seen


@pytest.mark.parametrize("name", ["resnet18", "light_resnet50", "light_inception_v2",
                                  "light_densenet121", "light_squeezenet"])
def test_weightless_check_and_infer(name, monkeypatch):
    if name == "resnet18":
        model = models.resnet18(hw=64, num_classes=10)
    else:
        model = models.randomize_light_model(onnx.load(str(LIGHT / f"{name}.onnx")))
        model = oi.convert_version(model, oi.MIN_OPSET)
    want = _oracle(model)
    seen = _light_copies(monkeypatch)
    assert oi.check_and_infer(model, name).SerializeToString() == want
    # the weightless path answered: what inference saw had fewer initializers
    assert len(seen) == 1 and not isinstance(seen[0], bytes)
    assert len(seen[0].graph.initializer) < len(model.graph.initializer)


def _conv_add_model(w_raw: bytes | None = None, in_type=None):
    w = np.arange(16 * 8 * 3 * 3, dtype=np.float32).reshape(16, 8, 3, 3) / 100
    k = np.ones((1, 16, 30, 30), np.float32)  # 57 600 bytes, read by Add (kept)
    wt = numpy_helper.from_array(w, "w")
    if w_raw is not None:
        wt.raw_data = w_raw
    kt = numpy_helper.from_array(k, "k")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[0, 0, 0, 0]),
             helper.make_node("Add", ["c", "k"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])]
    if in_type is not None:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, in_type))
    g = helper.make_graph(nodes, "g", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 30, 30])],
                          [wt, kt])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_only_weights_read_for_their_shape_go(monkeypatch):
    """The conv's weights go around the C++ round trip; an Add's constant operand (a value
    reader outside VALUE_FREE_READERS) does not; the result is the oracle's."""
    model = _conv_add_model()
    want = _oracle(model)
    seen = _light_copies(monkeypatch)
    assert oi.check_and_infer(model).SerializeToString() == want
    assert [t.name for t in seen[0].graph.initializer] == ["k"]
    assert [i.name for i in seen[0].graph.input] == ["x", "w"]


def test_input_of_another_type_goes_whole(monkeypatch):
    """A graph input named like the weight with another shape: the whole model goes (the
    oracle's bytes, its inference saw the weight)."""
    model = _conv_add_model(in_type=[16, 8, 3, "k"])
    model.ir_version = 8
    want = _oracle(model)
    seen = _light_copies(monkeypatch)
    assert oi.check_and_infer(model).SerializeToString() == want
    assert isinstance(seen[0], bytes)


def test_bad_weight_still_rejected():
    """A conv weight whose raw_data is too short for its dims is not plain: the checker sees it
    and the model is rejected with one line, as before."""
    model = _conv_add_model(w_raw=b"\0" * 4096)
    with pytest.raises(onnx.checker.ValidationError):
        _oracle(model)
    with pytest.raises(FrontendError, match="invalid ONNX model: .*raw_data size"):
        oi.check_and_infer(model, "bad.onnx")


def _tensors():
    base = numpy_helper.from_array(np.ones((4, 8), np.float32), "t")
    yield base, True
    for dt in (np.float16, np.int8, np.uint8, np.int64, np.float64, np.bool_, np.int32):
        yield numpy_helper.from_array(np.ones((3, 5), dt), "t"), True
    t = TensorProto(); t.CopyFrom(base); t.doc_string = "d"; yield t, True
    t = TensorProto(); t.CopyFrom(base); t.raw_data = b"\0" * 127; yield t, False
    t = TensorProto(); t.CopyFrom(base); t.raw_data = b"\0" * 129; yield t, False
    t = TensorProto(); t.CopyFrom(base); t.float_data.append(1.0); yield t, False
    t = TensorProto(); t.CopyFrom(base); t.name = ""; yield t, False
    t = TensorProto(); t.CopyFrom(base); t.data_type = TensorProto.STRING; yield t, False
    t = TensorProto(); t.CopyFrom(base); t.data_type = TensorProto.UNDEFINED; yield t, False
    t = TensorProto(); t.CopyFrom(base); del t.dims[:]; t.dims.extend([0, 8]); yield t, False
    t = TensorProto(); t.CopyFrom(base); t.data_location = TensorProto.EXTERNAL; yield t, False
    t = TensorProto(); t.CopyFrom(base); t.ClearField("raw_data"); yield t, False
    big = numpy_helper.from_array(np.ones((300, 301), np.float32), "big")
    yield big, True  # a length varint of three bytes
    t = TensorProto(); t.CopyFrom(big); t.raw_data = t.raw_data[:-1]; yield t, False


def test_plain_tensor_is_what_the_checker_accepts():
    """Every tensor ``_plain_tensor`` calls plain passes ``onnx.checker.check_tensor``; the
    malformed ones (short / long raw_data, a second value field, STRING, UNDEFINED, no name,
    a 0 dim, external data, no data) are not plain, so the checker sees them."""
    for t, plain in _tensors():
        assert oi._plain_tensor(t, t.ByteSize()) is plain, t
        if plain:
            onnx.checker.check_tensor(t)


def _more_tensors():
    """``_tensors`` and forms only the serialized size told apart before session 34: an explicit
    default ``data_location``, a ``segment``, unknown fields, metadata, a doc string."""
    yield from _tensors()
    base = numpy_helper.from_array(np.ones((40, 30), np.float32), "w")
    t = TensorProto(); t.CopyFrom(base); t.data_location = TensorProto.DEFAULT; yield t, False
    t = TensorProto(); t.CopyFrom(base); t.segment.begin = 0; yield t, False
    t = TensorProto.FromString(base.SerializeToString() + b"\xf8\x07\x05"); yield t, False
    t = TensorProto(); t.CopyFrom(base); t.metadata_props.add(key="k", value="v"); yield t, True
    t = TensorProto(); t.CopyFrom(base); t.doc_string = ""; yield t, True
    t = TensorProto(); t.CopyFrom(base); t.external_data.add(key="location", value="x")
    yield t, False


def test_plain_size_is_bytesize_and_plain_tensor():
    """``_plain_size`` (the raw data's length, no serialization) answers what ``ByteSize`` and
    ``_plain_tensor`` answered (the oracle, as check_and_infer used them until session 34): the
    size of a plain tensor, None for any other; with a field it does not know, ByteSize itself."""
    oi._FIELDS_KNOWN[0] = oi._fields_known()
    assert oi._FIELDS_KNOWN[0]
    try:
        for known in (True, False):
            oi._FIELDS_KNOWN[0] = known
            for t, plain in _more_tensors():
                b = t.ByteSize()
                want = b if oi._plain_tensor(t, b) else None
                assert (want is not None) is plain, t
                assert oi._plain_size(t) == want, t
    finally:
        oi._FIELDS_KNOWN[0] = oi._fields_known()
