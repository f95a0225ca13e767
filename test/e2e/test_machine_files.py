"""Any machine file compiles, checks and runs (issue 10): the machine travels in the IR
(``tpb.program`` ``machine_spec``) and in the program file (metadata ``m100.machine``), never as a
preset name that a verifier would have to look up. Oracle: onnxruntime via ``m100 check``, and the
same outputs whether or not the machine file is still around when the program runs."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

from m100.frontend import models
from m100.sim.simulator import Simulator
from m100.targets.m100.machine import PRESETS, get_machine, machine_from_spec
from m100.targets.m100.program import MACHINE_SPEC_KEY, Program
from m100.tools import driver
from m100.tools.m100_cli import main as m100
from m100.tools.m100_sim import main as m100_sim

SPECS = {"same-as-tiny": {"base": "tiny"},
         "wider": {"base": "tiny", "name": "tiny-wide", "clusters": 2, "hbsm_bytes": 131072}}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("machines")
    onnx.save(models.mlp(), d / "mlp.onnx")
    for name, spec in SPECS.items():
        (d / f"{name}.json").write_text(json.dumps(spec))
    return d


@pytest.mark.parametrize("name", list(SPECS))
def test_machine_file_compiles_checks_and_runs_without_the_file(files, name, tmp_path, capsys):
    mfile = files / f"{name}.json"
    m = get_machine(str(mfile))
    assert not m.is_preset()
    assert m100(["check", str(files / "mlp.onnx"), "--machine", str(mfile)]) == 0
    assert "PASS" in capsys.readouterr().out
    prog_path = tmp_path / "p.m100"
    assert m100(["compile", str(files / "mlp.onnx"), "-o", str(prog_path), "--machine",
                 str(mfile)]) == 0
    prog = Program.load(prog_path)  # no machine given: the file carries it
    assert prog.fingerprint == m.fingerprint()
    assert machine_from_spec(prog.metadata[MACHINE_SPEC_KEY]) == m
    inputs = driver.symbol_inputs(prog, driver.random_inputs(prog, 3))
    np.savez(tmp_path / "in.npz", **inputs)
    ref = Simulator(prog, get_machine(str(mfile))).run(inputs)  # the machine given explicitly
    assert ref.ok
    mfile.rename(mfile.with_suffix(".away"))  # m100-sim must not need the file
    try:
        assert m100_sim([str(prog_path), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                         str(tmp_path / "out.npz"), "-q"]) == 0
    finally:
        mfile.with_suffix(".away").rename(mfile)
    with np.load(tmp_path / "out.npz") as z:
        for k, v in ref.outputs.items():
            np.testing.assert_array_equal(z[k], v)


def test_m100_opt_pipeline_with_a_machine_file_and_translate(files, tmp_path):
    mfile = files / "wider.json"
    mlir = tmp_path / "p.mlir"
    tools = [sys.executable, "-m"]
    r = subprocess.run([*tools, "m100.tools.m100_opt", str(files / "mlp.onnx"), "-p",
                        f'm100-pipeline{{machine="{mfile}"}}', "-o", str(mlir)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    text = mlir.read_text()
    assert 'tpb.program "tiny-wide" resolved' in text and "machine_spec" in text
    r = subprocess.run([*tools, "m100.tools.m100_translate", str(mlir), "--to-bin", "-o",
                        str(tmp_path / "p.m100")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert Program.load(tmp_path / "p.m100").machine_obj() == get_machine(str(mfile))


def test_spec_round_trips_every_preset_and_picks_the_closest_base():
    for m in PRESETS.values():
        assert machine_from_spec(m.spec()) == m and m.is_preset()
    wide = get_machine("tiny").with_overrides(name="w", clusters=2)
    assert json.loads(wide.spec()) == {"base": "tiny", "name": "w", "clusters": 2}
    assert machine_from_spec(wide.spec()) == wide


def test_every_machine_field_has_limits_and_each_is_checked_on_its_own():
    import dataclasses

    from m100.targets.m100.machine import FIELD_CHOICES, FIELD_LIMITS, Machine, MachineError

    fields = {f.name for f in dataclasses.fields(Machine)}
    assert set(FIELD_LIMITS) | set(FIELD_CHOICES) == fields - {"name"}
    assert not set(FIELD_LIMITS) & set(FIELD_CHOICES)
    tiny = get_machine("tiny")
    for key, choices in FIELD_CHOICES.items():
        for bad in (True, 1, None, "", choices[0].upper(), choices[0] + " "):
            with pytest.raises(MachineError, match=key):
                tiny.with_overrides(**{key: bad})
        for good in choices:
            assert getattr(tiny.with_overrides(**{key: good}), key) == good
    for key, (kind, lo, hi) in FIELD_LIMITS.items():
        for bad in (True, float("nan"), float("inf"), "1", None, hi * 2 + 1, lo - 1):
            if kind is float and isinstance(bad, int) and not isinstance(bad, bool) and lo <= bad <= hi:
                continue
            with pytest.raises(MachineError, match=key):
                tiny.with_overrides(**{key: bad})
