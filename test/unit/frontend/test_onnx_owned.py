"""``frontend/onnx_owned.py``: the preparation in the forked torch-mlir child, the weights not
copied back into the inferred model.

Oracles: ``check_and_infer`` / ``prepare_model`` as they ran before (``owned=False``: the
initializers put back into a copy) give the same serialized model as the owned path on real and
edge models (unknown fields: the copy path); ``load_onnx`` with the preparation in the parent (as
until session 34, ``PREPARE_IN_CHILD = False``) prints the same module (the W4 weights' names and
values, which ``name_io`` reads from the prepared model, included) and raises the same errors;
the caller's model is unchanged. Mutants caught: ``merge_inferred`` not taking the inferred value
infos (the serialized models differ), ``io_model`` stripping the W4 scales too (the printed
module of the W4 model differs), the child's exception reported as a message (the type test)."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.context import make_context
from m100.frontend import FrontendError, models
from m100.frontend import onnx_import as oi
from m100.frontend import onnx_owned, quant_models

LIGHT = __import__("pathlib").Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _copy(m):
    c = onnx.ModelProto()
    c.CopyFrom(m)
    return c


def _gelu_tanh_model():
    """A model prepare_model rewrites (Gelu tanh) with a conv weight check_and_infer strips."""
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Gelu", ["c"], ["y"], approximate="tanh")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 4, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                          [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])


def _builds():
    return {"resnet18-64": lambda: models.resnet18(hw=64, num_classes=10),
            "conv_relu_maxpool": models.conv_relu_maxpool, "mlp": models.mlp,
            "gelu_tanh": _gelu_tanh_model,
            "light_squeezenet_opset9": lambda: models.randomize_light_model(
                onnx.load(str(LIGHT / "light_squeezenet.onnx"))),
            # scales of 8 KB: big enough to be stripped by io_model, were they not W4 scales
            "w4_blocked": lambda: quant_models.w4_blocked_matmul(k=256, n=256, seed=2)}


@pytest.mark.parametrize("name", ["resnet18-64", "conv_relu_maxpool", "light_squeezenet_opset9"])
def test_owned_check_and_infer_is_the_put_back(name):
    model = _builds()[name]()
    if name.endswith("opset9"):
        model = oi.convert_version(model, oi.MIN_OPSET)
    want = oi.check_and_infer(_copy(model), name).SerializeToString()
    mine = _copy(model)
    got = oi.check_and_infer(mine, name, owned=True)
    # the owned path answered (no copy of the weights) where the weights went around the C++
    # round trip; conv_relu_maxpool's are all under CONVERT_STRIP_BYTES (the whole model goes)
    assert (got is mine) == (name != "conv_relu_maxpool")
    assert got.SerializeToString() == want


def test_unknown_fields_take_the_copy_path():
    model = models.conv_relu_maxpool()
    data = model.SerializeToString() + b"\xf8\x07\x05"  # field 127, varint 5: unknown to onnx
    with_unknown = onnx.ModelProto.FromString(data)
    assert onnx_owned.merge_inferred(_copy(with_unknown), _copy(model)) is None
    want = oi.check_and_infer(onnx.ModelProto.FromString(data)).SerializeToString()
    mine = onnx.ModelProto.FromString(data)
    got = oi.check_and_infer(mine, owned=True)
    assert got is not mine and got.SerializeToString() == want


@pytest.mark.parametrize("name", list(_builds()))
def test_owned_prepare_model_is_prepare_model(name):
    model = _builds()[name]()
    want = oi.prepare_model(_copy(model), name).SerializeToString()
    assert oi.prepare_model(_copy(model), name, owned=True).SerializeToString() == want


def _printed(module) -> str:
    from xdsl.printer import Printer
    buf = io.StringIO()
    Printer(stream=buf, print_generic_format=True).print_op(module)
    return buf.getvalue()


@pytest.mark.parametrize("name", list(_builds()))
def test_load_onnx_prepared_in_the_child_is_as_before(name, monkeypatch):
    monkeypatch.setattr(oi._Worker, "mode", "fork")
    model = _builds()[name]()
    before = model.SerializeToString()
    ctx = make_context()
    texts = {}
    for child in (False, True):
        monkeypatch.setattr(oi, "PREPARE_IN_CHILD", child)
        texts[child] = _printed(oi.load_onnx(model, ctx))
        assert model.SerializeToString() == before  # the caller's model is not changed
    assert texts[True] == texts[False]
    if name == "w4_blocked":
        assert "m100.int4" in texts[True] or "int4" in texts[True]


def test_errors_are_as_before(monkeypatch, tmp_path):
    monkeypatch.setattr(oi._Worker, "mode", "fork")
    bad = helper.make_model(helper.make_graph(
        [helper.make_node("Bogus", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 17)])
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00\x01 this is not a protobuf \xff" * 10)
    for src in (bad, str(garbage), str(tmp_path / "nope.onnx")):
        errs = {}
        for child in (False, True):
            monkeypatch.setattr(oi, "PREPARE_IN_CHILD", child)
            with pytest.raises(FrontendError) as e:
                oi.load_onnx(src)
            errs[child] = str(e.value)
        assert errs[True] == errs[False]

    def boom(model):
        raise Boom("rewrite bug")

    import m100.frontend.onnx_rewrite as rw
    monkeypatch.setattr(rw, "rewrite_for_torch_mlir", boom)
    for child in (False, True):
        monkeypatch.setattr(oi, "PREPARE_IN_CHILD", child)
        with pytest.raises(Boom, match="rewrite bug"):
            oi.load_onnx(models.mlp())


class Boom(RuntimeError):
    """An exception of the preparation other than FrontendError (picklable: module level)."""


def test_io_model_strips_only_big_non_w4_bytes():
    prepared = oi.prepare_model(_builds()["w4_blocked"](), "w4")
    light = onnx.ModelProto.FromString(onnx_owned.io_model(prepared))
    w4 = {n for d in __import__("m100.frontend.shape_only", fromlist=["x"]).int4_weights(
        prepared).values() for n in (d["q"], d["scale"])}
    for a, b in zip(prepared.graph.initializer, light.graph.initializer):
        assert a.name == b.name and list(a.dims) == list(b.dims)
        stripped = oi._tensor_bytes(a) >= oi.CONVERT_STRIP_BYTES and a.name not in w4
        assert b.raw_data == (b"" if stripped else a.raw_data)
    assert list(light.graph.node) == list(prepared.graph.node)
    assert any(oi._tensor_bytes(a) >= oi.CONVERT_STRIP_BYTES for a in prepared.graph.initializer
               if a.name in w4)  # a W4 scale big enough to be stripped, were it not one
    resnet = oi.prepare_model(models.resnet18(hw=32, num_classes=10), "r")
    light = onnx.ModelProto.FromString(onnx_owned.io_model(resnet))
    kept = sum(len(t.raw_data) for t in light.graph.initializer)
    assert kept * 20 < sum(len(t.raw_data) for t in resnet.graph.initializer)
