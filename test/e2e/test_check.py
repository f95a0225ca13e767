"""``m100 check`` / compile / run end to end on small models (tiny machine, a few on m100).

Oracle: onnxruntime on the same inputs (the graph reference executor for .mlir inputs); the
interpreter runs with its race and deadlock checks on, and the sync certificate is verified
independently (``m100.sim.certificate``)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest

from m100.frontend import models
from m100.tools.onnx_backend import onnxruntime_run
from m100.sim import certificate
from m100.targets.m100.program import Program
from m100.tools import driver
from m100.tools.m100_cli import main as m100
from m100.tools.m100_sim import main as m100_sim

MODELS = {"mlp": models.mlp, "convnet": models.conv_relu_maxpool}


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    out = {}
    for name, build in MODELS.items():
        out[name] = d / f"{name}.onnx"
        onnx.save(build(), out[name])
    return out


@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
@pytest.mark.parametrize("name", list(MODELS))
def test_check_passes_with_no_reports(model_files, name, mode):
    ck = driver.check(model_files[name], machine="tiny", sync_mode=mode)
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed and ck.oracle == "onnxruntime"
    assert [e.name for e in ck.errors] == ["y"]
    assert all(e.max_rel <= 1e-3 for e in ck.errors)
    assert ck.cycles > 0 and 0 < ck.tcu_util <= 100
    assert ck.compile.certificate["sync_mode"] == mode


def test_dataflow_is_faster_than_barrier_all_on_the_convnet(model_files):
    cyc = {m: driver.check(model_files["convnet"], machine="tiny", sync_mode=m).cycles
           for m in ("dataflow", "barrier-all")}
    assert cyc["dataflow"] < cyc["barrier-all"], cyc


def test_check_mlp_on_m100_with_4_tpbs(model_files):
    ck = driver.check(model_files["mlp"], machine="m100", tpbs=4, seed=3)
    assert ck.passed, ck.summary()


def test_cli_check_prints_errors_cycles_and_pass(model_files, capsys):
    assert m100(["check", str(model_files["mlp"]), "--machine", "tiny", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "y: max abs error" in out and "cycles" in out and "TCU utilization" in out
    assert out.rstrip().endswith("PASS")


def test_cli_compile_run_matches_onnxruntime(model_files, tmp_path, capsys):
    prog_path = tmp_path / "p.m100"
    assert m100(["compile", str(model_files["convnet"]), "-o", str(prog_path), "--machine",
                 "tiny", "--tpbs", "2"]) == 0
    cert_path = tmp_path / "p.m100.cert.json"
    cert = json.loads(cert_path.read_text())
    assert cert["format"] == "m100-sync-certificate" and cert["edges"]
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    assert m100(["run", str(prog_path), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                 str(tmp_path / "out.npz"), "--trace", str(tmp_path / "t.json")]) == 0
    with np.load(tmp_path / "out.npz") as z:
        got = z["y"]
    want = onnxruntime_run(models.conv_relu_maxpool(), [x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)
    trace = json.loads((tmp_path / "t.json").read_text())
    assert any(e.get("ph") == "X" for e in (trace["traceEvents"] if isinstance(trace, dict)
                                            else trace))
    capsys.readouterr()
    # the interpreter's side verifies the certificate on its own
    assert m100_sim([str(prog_path), "--check-certificate", str(cert_path)]) == 0
    assert "verified" in capsys.readouterr().out
    # and the dataflow certificate (every read reads the tensor the compiler meant)
    flow = tmp_path / "p.m100.dataflow.json"
    assert json.loads(flow.read_text())["format"] == "m100-dataflow-certificate"
    assert m100_sim([str(prog_path), "--check-dataflow", str(flow)]) == 0
    assert "every read reads its tensor" in capsys.readouterr().out


def test_cli_compile_as_a_process_writes_what_the_library_compiles(model_files, tmp_path):
    # `m100 compile` on its own command line ends the process without freeing its heap
    # (m100_cli._exit_now): the files are complete, stdout is flushed, atexit handlers run
    import subprocess
    import sys
    prog_path = tmp_path / "p.m100"
    code = ("import atexit, sys; atexit.register(lambda: print('atexit ran', flush=True)); "
            "from m100.tools.m100_cli import main; sys.argv[0] = 'm100'; sys.exit(main())")
    p = subprocess.run([sys.executable, "-c", code, "compile", str(model_files["convnet"]), "-o",
                        str(prog_path), "--machine", "tiny", "--tpbs", "2"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    wrote, ran = p.stdout.splitlines()
    assert wrote.startswith(f"m100: wrote {prog_path} (") and ran == "atexit ran"
    assert wrote.endswith(f" instructions), {prog_path}.cert.json and {prog_path}.dataflow.json")
    cr = driver.compile(model_files["convnet"], machine="tiny", tpbs=2)
    assert prog_path.read_bytes() == cr.program.to_bytes()
    assert json.loads((tmp_path / "p.m100.cert.json").read_text()) == cr.certificate
    assert json.loads((tmp_path / "p.m100.dataflow.json").read_text()) == cr.dataflow


def test_mlir_input_is_checked_against_the_reference_executor(tmp_path):
    from m100.frontend import onnx_to_linalg_text
    path = tmp_path / "mlp.mlir"
    path.write_text(onnx_to_linalg_text(models.mlp()))
    ck = driver.check(path, machine="tiny")
    assert ck.oracle == "reference executor"
    assert ck.passed, ck.summary()


def test_check_fails_when_the_program_computes_something_else(model_files):
    # the comparison is not vacuous: the same check on a program whose weights were changed FAILs
    cr = driver.compile(model_files["mlp"], machine="tiny")
    prog = cr.program
    k = max(range(len(prog.segments)), key=lambda i: len(prog.segments[i].data))
    w = np.frombuffer(prog.segments[k].data, dtype=np.float32).copy()
    w[0] += 1.0
    prog.segments[k] = dataclasses.replace(prog.segments[k], data=w.tobytes())
    inputs = driver.random_inputs(prog, 0)
    res = driver.run(prog, inputs)
    want = onnxruntime_run(models.mlp(), [inputs["x"]])[0]
    assert res.ok
    assert not driver.compare("y", res.outputs["y"], want, 1e-3, 1e-4).ok


def test_certificate_of_another_program_is_rejected(model_files):
    a = driver.compile(model_files["mlp"], machine="tiny")
    b = driver.compile(model_files["convnet"], machine="tiny")
    assert certificate.verify(a.program, a.certificate) == []
    assert certificate.verify(a.program, b.certificate) != []


def test_program_file_round_trip_keeps_model_names(model_files, tmp_path):
    cr = driver.compile(model_files["mlp"], machine="tiny")
    cr.program.save(tmp_path / "p.m100")
    prog = Program.load(tmp_path / "p.m100")
    assert prog.metadata[driver.META_INPUTS] == "x"
    assert prog.metadata[driver.META_OUTPUTS] == "y"
    with pytest.raises(driver.DriverError, match="unknown input 'nope'"):
        driver.run(prog, {"nope": np.zeros((4, 16), np.float32)})
