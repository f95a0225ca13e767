"""Compile by shape (issue 13 step 1): ONNX weights whose external data is left out become DDR
weight symbols (no bytes in the program); timing-only runs need nothing, functional runs need the
weights supplied. Oracle: numpy written from the ONNX op definitions."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.frontend.shape_only import lift_shape_only_weights, weight_quant_info
from m100.targets.m100.program import Program
from m100.tools import driver


def _mlp(k: int = 64, h: int = 96, n: int = 48, rows: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((k, h)) / np.sqrt(k)).astype(np.float32)
    w2 = (rng.standard_normal((h, n)) / np.sqrt(h)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, {"w1": w1, "w2": w2}


def _save_external(tmp_path, model, keep_data: bool) -> str:
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.bin", size_threshold=0)
    if not keep_data:
        os.remove(tmp_path / "m.bin")
    return path


def _oracle(x, w):
    return np.maximum(x @ w["w1"], 0.0) @ w["w2"]


def test_shape_only_compile_has_weight_symbols_and_no_bytes(tmp_path):
    model, w = _mlp()
    cr = driver.compile(_save_external(tmp_path, model, keep_data=False), machine="tiny")
    syms = {s.name: s for s in cr.program.symbols}
    assert syms["w1"].role == "weight" and syms["w1"].shape == (64, 96)
    assert syms["w2"].role == "weight" and syms["w2"].shape == (96, 48)
    assert syms["x"].role == "input" and syms["y"].role == "output"
    assert cr.program.segments == []  # not a byte of the weights is in the program
    assert '"w1"' in cr.program.metadata["m100.weights"]
    # the container keeps the weight symbols through its binary form
    back = Program.from_bytes(cr.program.to_bytes())
    assert {s.name: s.role for s in back.symbols} == {s.name: s.role for s in cr.program.symbols}
    # timing-only: nothing to supply
    res = driver.run(back, {}, mode="timing", check_races=False)
    assert res.stats["total_cycles"] > 0
    # functional: the weights come like inputs, the result is the model's
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    got = driver.run(back, {"x": x, **w}).outputs["y"]
    np.testing.assert_allclose(got, _oracle(x, w), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="missing weight .*'w2'"):
        driver.run(back, {"x": x, "w1": w["w1"]})


def test_external_data_present_is_an_ordinary_model(tmp_path):
    model, w = _mlp()
    cr = driver.compile(_save_external(tmp_path, model, keep_data=True), machine="tiny")
    assert not any(s.role == "weight" for s in cr.program.symbols)
    assert sum(len(s.data) for s in cr.program.segments) >= (64 * 96 + 96 * 48) * 4
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_allclose(driver.run(cr.program, {"x": x}).outputs["y"], _oracle(x, w),
                               rtol=1e-5, atol=1e-5)


def test_check_on_a_shape_only_model_is_one_clear_line(tmp_path):
    model, _ = _mlp()
    path = _save_external(tmp_path, model, keep_data=False)
    r = subprocess.run([sys.executable, "-m", "m100.tools.m100_cli", "check", path],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "compiled by shape" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_shape_only_program_size_does_not_grow_with_the_weights(tmp_path):
    """A 1024 x 2816 SwiGLU-sized MLP: 23 MB of f32 weights, the program stays a few hundred KB."""
    model, _ = _mlp(k=1024, h=2816, n=1024, rows=1)
    cr = driver.compile(_save_external(tmp_path, model, keep_data=False), machine="m100")
    weight_bytes = (1024 * 2816 * 2) * 4
    assert len(cr.program.to_bytes()) < weight_bytes // 20
    assert cr.program.segments == []


def test_weight_quant_info_names_the_dequantize():
    w = TensorProto(name="wq", data_type=TensorProto.INT8, dims=[8, 4])
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="absent.bin")
    g = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wf"], axis=1),
         helper.make_node("MatMul", ["x", "wf"], ["y"])], "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [w, numpy_helper.from_array(np.ones(4, np.float32), "s"),
         numpy_helper.from_array(np.zeros(4, np.int8), "z")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    names = lift_shape_only_weights(m)
    assert names == ["wq"]
    assert [i.name for i in m.graph.input] == ["x", "wq"]
    assert [i.name for i in m.graph.initializer] == ["s", "z"]
    assert weight_quant_info(m, names) == {"wq": {"quant": {
        "op": "DequantizeLinear", "scale": "s", "zero_point": "z", "axis": "1"}}}
