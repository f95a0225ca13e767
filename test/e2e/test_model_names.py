"""The model's input/output names reach the program's symbols (``m100 compile`` and the
``m100-opt``/``m100-translate`` path), ``m100-sim --inputs`` takes them, and ``m100 check --inputs``
validates an inputs file against the model (names, shapes, declared element types); random inputs
follow the declared element types. Oracle: onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from m100.frontend import models
from m100.targets.m100.program import Program
from m100.tools import driver
from m100.tools import program_io
from m100.tools.m100_cli import main as m100
from m100.tools.m100_sim import main as m100_sim
from m100.tools.onnx_backend import onnxruntime_run

A, B, Y, Z = "in:0", "other/x", "out.y", "sum"


def _two_io(elem=TensorProto.FLOAT):
    """y = Relu(a * b), z = a + b; odd but legal ONNX names."""
    nodes = [helper.make_node("Mul", [A, B], ["ab"]), helper.make_node("Relu", ["ab"], [Y]),
             helper.make_node("Add", [A, B], [Z])]
    g = helper.make_graph(nodes, "two_io", [helper.make_tensor_value_info(n, elem, [4, 8]) for n in (A, B)],
                          [helper.make_tensor_value_info(n, elem, [4, 8]) for n in (Y, Z)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("names")
    out = {"mlp": d / "mlp.onnx", "two": d / "two.onnx", "f16": d / "f16.onnx"}
    onnx.save(models.mlp(), out["mlp"])
    onnx.save(_two_io(), out["two"])
    onnx.save(_two_io(TensorProto.FLOAT16), out["f16"])
    return out


def test_program_symbols_are_the_onnx_names(files):
    cr = driver.compile(files["two"], machine="tiny")
    syms = [(s.name, s.role) for s in cr.program.symbols]
    assert syms == [(A, "input"), (B, "input"), (Y, "output"), (Z, "output")]
    assert cr.input_names == [A, B] and cr.output_names == [Y, Z]


def test_compile_then_m100_sim_with_the_model_names(files, tmp_path, capsys):
    """The README's round trip: m100 compile model.onnx -o p.m100 && m100-sim p.m100 --inputs in.npz."""
    prog = tmp_path / "p.m100"
    assert m100(["compile", str(files["mlp"]), "-o", str(prog), "--machine", "tiny"]) == 0
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    assert m100_sim([str(prog), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                     str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as z:
        assert z.files == ["y"]
        np.testing.assert_allclose(z["y"], onnxruntime_run(models.mlp(), [x])[0], rtol=1e-4, atol=1e-5)


def test_opt_translate_path_keeps_the_names(files, tmp_path):
    """m100-opt model.onnx -p m100-pipeline | m100-translate --to-bin: the symbols are the ONNX names."""
    from m100.tools.m100_opt import main as m100_opt
    from m100.tools.m100_translate import main as m100_translate

    mlir, prog = tmp_path / "p.mlir", tmp_path / "p.m100"
    rc = m100_opt([str(files["two"]), "-p", "m100-pipeline{machine=tiny}", "-o", str(mlir)])
    assert rc in (0, None)
    assert f'tpb.symbol "{A}" input' in mlir.read_text()
    assert m100_translate([str(mlir), "--to-bin", "-o", str(prog)]) in (0, None)
    assert [s.name for s in Program.load(prog).symbols] == [A, B, Y, Z]


def test_check_with_an_inputs_file(files, tmp_path, capsys):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
    np.savez(tmp_path / "in.npz", **{A: a, B: b})
    ck = driver.check(files["two"], machine="tiny", inputs={A: a, B: b})
    assert ck.passed, ck.summary()
    # the interpreter really ran on these inputs: compare with numpy from the op definitions
    np.testing.assert_allclose(ck.result.outputs[Y], np.maximum(a * b, 0), rtol=1e-6)
    np.testing.assert_allclose(ck.result.outputs[Z], a + b, rtol=1e-6)
    assert m100(["check", str(files["two"]), "--machine", "tiny", "--inputs",
                 str(tmp_path / "in.npz")]) == 0
    assert capsys.readouterr().out.rstrip().endswith("PASS")


@pytest.mark.parametrize("inputs, message", [
    ({A: np.zeros((4, 8), np.float32)}, f"in.npz: missing input '{B}' (float32[4, 8]); it has: {A}"),
    ({A: np.zeros((4, 8), np.float32), B: np.zeros((4, 8), np.float32), "c": np.zeros(1)},
     f"in.npz: unknown input(s) 'c'; the model's inputs are: {A}, {B}"),
    ({A: np.zeros((4, 8), np.float64), B: np.zeros((4, 8), np.float32)},
     f"in.npz: input '{A}' is float64, the model declares float32"),
    ({A: np.zeros((4, 8), np.float32), B: np.zeros((8, 4), np.float32)},
     f"in.npz: input '{B}' has shape [8, 4], the model's is [4, 8]"),
])
def test_check_inputs_file_errors_are_one_line(files, tmp_path, capsys, inputs, message):
    path = tmp_path / "in.npz"
    np.savez(path, **inputs)
    assert m100(["check", str(files["two"]), "--machine", "tiny", "--inputs", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("m100: error: ") and err.endswith(message)


def test_random_inputs_follow_the_declared_element_types(files, capsys):
    """An f16-input model: check feeds float16 (it fed float32, which onnxruntime rejected)."""
    ck = driver.check(files["f16"], machine="tiny")
    assert ck.passed, ck.summary()
    cr = ck.compile
    ins = driver.random_inputs(cr.program, 0, cr.model)
    assert {k: v.dtype for k, v in ins.items()} == {A: np.float16, B: np.float16}
    # integer, unsigned and boolean inputs get values of their own type and range
    rng = np.random.default_rng(0)
    i8 = program_io._random_array(rng, (64,), np.dtype(np.int8), "q")
    u8 = program_io._random_array(rng, (64,), np.dtype(np.uint8), "u")
    bo = program_io._random_array(rng, (64,), np.dtype(bool), "b")
    assert i8.dtype == np.int8 and i8.min() >= -8 and i8.max() < 8 and (i8 < 0).any()
    assert u8.dtype == np.uint8 and u8.max() < 16
    assert bo.dtype == np.bool_ and bo.any() and not bo.all()
    with pytest.raises(driver.DriverError, match="no random inputs for element type"):
        program_io._random_array(rng, (2,), np.dtype(object), "s")
