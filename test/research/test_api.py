"""m100.api (the research API): compile / inspect / run / check / change a machine field.

Oracles: MAC counts from the ONNX op definitions, onnxruntime (via ``check``), the machine's own
fields (a smaller HBSM bounds every buffer), and consistency between independent views of the same
run (interpreter statistics vs the per-block timeline, the recomputed placement vs the program).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from m100 import api
from m100.frontend import models
from m100.targets.m100.machine import KIB, MachineError, get_machine, machine_ref

N, C, HW, F = 1, 3, 16, 8


@pytest.fixture(scope="module")
def conv():
    return api.load(models.conv_relu_maxpool(N, C, HW, F))


@pytest.fixture(scope="module")
def compiled(conv):
    return api.compile(conv, "tiny", strategy="auto")


def _conv_macs() -> int:
    """MACs of the model from the ONNX op definitions: Conv 3x3 pad 1 (C -> F at HW x HW) and
    Conv 3x3 stride 2 pad 1 (F -> F at (HW/2 + 2 - 3) // 2 + 1)."""
    out2 = (HW // 2 + 2 - 3) // 2 + 1
    return N * F * HW * HW * C * 9 + N * F * out2 * out2 * F * 9


def test_load_hashes_the_model(conv, tmp_path):
    import onnx
    p = tmp_path / "m.onnx"
    onnx.save(conv.source, p)
    from_file = api.load(p)
    assert from_file.hash == conv.hash and from_file.name == "m"
    other = api.load(models.conv_relu_maxpool(N, C, HW, F, seed=1))
    assert other.hash != conv.hash
    with pytest.raises(api.DriverError, match="no such file"):
        api.load(tmp_path / "nope.onnx")


def test_schedule_report_and_tasks(compiled):
    rep = compiled.schedule_report()
    tcu = rep[rep.unit.str.startswith("tcu")]
    assert len(tcu) == 2 and int(tcu.macs.sum()) == _conv_macs()
    tasks = compiled.tasks()
    assert int(tasks[tasks.kind == "compute"].macs.sum()) == _conv_macs()
    assert (tasks.end >= tasks.start).all()
    # the recomputed placement is the one the program was compiled from
    assert abs(tasks.end.max() - compiled.predicted_cycles) <= 1.0
    assert int(compiled.program.metadata["predicted_cycles"]) == int(compiled.predicted_cycles)
    assert "conv" in compiled.schedule_text()
    # the plan: one task per instruction of the program, grouped into pieces
    plan = compiled.plan()
    assert len(plan) == compiled.num_instructions
    assert sorted(plan.unit.value_counts().items()) == sorted(
        _units_of(compiled.program).items())
    pieces = compiled.pieces()
    assert len(pieces) > 0 and set(pieces.op) <= set(rep.op)


def _units_of(program) -> dict[str, int]:
    """Instructions per unit kind, counted from the program (the oracle for the plan)."""
    out: dict[str, int] = {}
    for _, inst in program.instructions():
        k = inst.executor[0].name.lower()
        out[k] = out.get(k, 0) + 1
    return out


def test_run_modes_stats_and_timeline(compiled):
    full = compiled.run()
    timing = compiled.run(mode="timing")
    assert full.ok and timing.ok and timing.outputs == {}
    assert full.cycles == timing.cycles > 0
    assert full.stats["tcu_macs"] == _conv_macs()
    functional = compiled.run(mode="functional")
    for k, v in full.outputs.items():
        assert (functional.outputs[k] == v).all()
    tl = full.timeline()
    assert len(tl) == sum(len(r.blocks) for r in full.result.records)
    assert tl.end.max() == pytest.approx(full.cycles)
    units = full.units().set_index("unit")
    for unit, g in tl.groupby("unit"):  # busy = the union of the unit's blocks (pipelined overlap)
        busy, cur = 0.0, None
        for s, e in sorted(zip(g.start, g.end)):
            if cur is None or s > cur[1]:
                busy += 0.0 if cur is None else cur[1] - cur[0]
                cur = [s, e]
            else:
                cur[1] = max(cur[1], e)
        busy += cur[1] - cur[0]
        assert units.loc[unit, "busy_cycles"] == pytest.approx(busy)
    # utilization over the machine's 2 TCUs, at the f32 rate
    m = compiled.machine
    peak = m.tcu_macs_per_cycle("f32") * m.num_tpbs
    assert full.tcu_util == pytest.approx(100 * _conv_macs() / (peak * full.cycles))
    assert full.latency_us == pytest.approx(full.cycles / m.clock_hz * 1e6)
    assert full.ddr_bytes > 0


def test_check_against_onnxruntime(compiled):
    ck = compiled.check()
    assert ck.oracle == "onnxruntime" and ck.passed, ck.summary()
    assert list(ck.errors.output) == ["y"] and ck.errors.ok.all()


def test_figures(compiled):
    import matplotlib
    matplotlib.use("Agg")
    fig = compiled.run(mode="timing").figure()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "TPB0.TCU" in labels and "DMA0" in labels
    fig2 = compiled.predicted_figure()
    assert len(fig2.axes[0].get_yticklabels()) >= 3


def test_machine_replace_and_recompile(compiled):
    tiny = get_machine("tiny")
    small = compiled.machine.replace(hbsm_bytes=32 * KIB)
    assert small.hbsm_bytes == 32 * KIB and small.fingerprint() != tiny.fingerprint()
    with pytest.raises(MachineError, match="unknown machine parameter 'hbsm'"):
        tiny.replace(hbsm=1)
    with pytest.raises(MachineError, match="must be an integer"):
        tiny.replace(hbsm_bytes=1.5)
    c2 = compiled.recompile(machine=small, strategy="data-parallel")
    assert c2.program.fingerprint == small.fingerprint()
    assert c2.options["strategy"] == "data-parallel"
    rep = c2.schedule_report()
    assert (rep.hbsm_bytes <= small.hbsm_bytes).all()
    ck = c2.check()
    assert ck.passed, ck.summary()
    with pytest.raises(Exception, match="compiled for machine"):
        api.driver.run(c2.program, {}, mode="timing", machine=tiny)
    with pytest.raises(api.DriverError, match="unknown compile option"):
        compiled.recompile(strategyy="x")


def test_machine_ref_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("M100_CACHE_DIR", str(tmp_path))
    assert machine_ref(get_machine("tiny")) == "tiny"
    assert machine_ref("m100-12c") == "m100-12c"
    m = api.machine("tiny", clusters=2, hbsm_bytes=128 * KIB)
    ref = machine_ref(m)
    assert ref.startswith(str(tmp_path)) and get_machine(ref) == m
    assert machine_ref(m) == ref  # same machine, same file


def test_cli_check_with_a_machine_file(conv, tmp_path):
    """A machine file given to `m100 check` by path: the IR names the machine by that path (was:
    by its name, which did not resolve and failed to verify after m100-schedule)."""
    import onnx
    onnx.save(conv.source, tmp_path / "conv.onnx")
    mf = tmp_path / "tiny32.json"
    mf.write_text(json.dumps({"base": "tiny", "hbsm_bytes": 32 * KIB}))
    env = dict(os.environ)
    p = subprocess.run([sys.executable, "-m", "m100.tools.m100_cli", "check",
                        str(tmp_path / "conv.onnx"), "--machine", str(mf)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "PASS" in p.stdout
