"""A functional or full run replayed from the program's kept schedule (``m100.sim.replay``) gives
what the engine gives, bit for bit: outputs, stats (cycles, stall causes, bytes, MACs), reports and
every record's unit / dispatch / times / blocks --
on compiled models with other inputs than the recorded run's, without race checks, and when the
data makes an executor fault (the replay then hands over to the engine, which reports it)."""

from __future__ import annotations

import onnx
import numpy as np
import pytest

from e2e_helpers import monitor_sites, mutate
from m100.frontend import models
from m100.sim import engine, replay
from m100.sim.testing import hb
from m100.targets.m100.isa import CvuOp, CvuPipeline, DType, Ref, RefKind, Space, Stage
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import Program, Symbol
from m100.tools import driver

CASES = {"mlp": (models.mlp, "tiny", 0), "convnet": (models.conv_relu_maxpool, "tiny", 0),
         "llama": (lambda: onnx.load("test/data/llama_layer_small.onnx"), "m100", 8),
         "resnet18-32": (lambda: models.resnet18(hw=32, num_classes=10), "m100", 8)}


def _same(a, b) -> None:
    assert a.outputs.keys() == b.outputs.keys()
    for k in a.outputs:
        assert a.outputs[k].dtype == b.outputs[k].dtype
        assert a.outputs[k].tobytes() == b.outputs[k].tobytes(), k
    assert [r.to_dict() for r in a.reports] == [r.to_dict() for r in b.reports]
    assert a.stats == b.stats
    assert [(r.index, r.stream, r.pos, r.unit, r.dispatch, r.start, r.end, r.blocks)
            for r in a.records] == [(r.index, r.stream, r.pos, r.unit, r.dispatch, r.start,
                                     r.end, r.blocks) for r in b.records]


@pytest.fixture
def engine_runs(monkeypatch):
    """The number of the engine's runs so far (a replay runs none)."""
    count = [0]
    run = engine.Engine.run

    def counted(self):
        count[0] += 1
        return run(self)

    monkeypatch.setattr(engine.Engine, "run", counted)
    return count


def _engine_run(monkeypatch, program, inputs, mode="functional", **kw):
    monkeypatch.setattr(replay, "REPLAY", False)
    try:
        return driver.run(program, inputs, mode=mode, **kw)
    finally:
        monkeypatch.setattr(replay, "REPLAY", True)


@pytest.mark.parametrize("mode", ["functional", "full"])
@pytest.mark.parametrize("name", ["mlp", "convnet", "llama",
                                  pytest.param("resnet18-32", marks=pytest.mark.slow)])
def test_replay_equals_the_engine(name, mode, monkeypatch, engine_runs):
    build, machine, tpbs = CASES[name]
    cr = driver.compile(build(), machine=machine, tpbs=tpbs)
    prog = cr.program
    feeds = [driver.random_inputs(prog, s) for s in (3, 4)]
    ref = [_engine_run(monkeypatch, prog, x, mode) for x in feeds]
    ref_nr = _engine_run(monkeypatch, prog, feeds[1], mode, check_races=False)
    assert all(r.ok for r in ref) and "_sim_schedule" not in prog.__dict__
    assert ref[0].outputs.keys() == ref[1].outputs.keys() and any(
        ref[0].outputs[k].tobytes() != ref[1].outputs[k].tobytes() for k in ref[0].outputs)
    n = engine_runs[0]
    _same(driver.run(prog, feeds[0], mode=mode), ref[0])  # the engine, recorded
    assert engine_runs[0] == n + 1 and "_sim_schedule" in prog.__dict__
    for x, want in ((feeds[1], ref[1]), (feeds[0], ref[0]), (feeds[1], ref[1])):
        _same(driver.run(prog, x, mode=mode), want)  # replayed
    assert engine_runs[0] == n + 1
    _same(driver.run(prog, feeds[1], mode=mode, check_races=False), ref_nr)
    _same(driver.run(prog, feeds[1], mode=mode, check_races=False), ref_nr)
    assert engine_runs[0] == n + 2  # (a schedule per option set)
    # the other replayed mode has its own schedule; timing mode and random latencies never replay
    other = "full" if mode == "functional" else "functional"
    for kw in ({"mode": other}, {"mode": other}, {"mode": "timing"}, {"mode": "timing"},
               {"mode": mode, "random_latency": 3}, {"mode": mode, "random_latency": 3}):
        driver.run(prog, feeds[1], **kw)
    assert engine_runs[0] == n + 7
    # a racy mutant keeps no schedule: its reports every run
    site = monitor_sites(prog)[len(monitor_sites(prog)) // 2]
    mut = mutate(prog, site, "drop")
    want = _engine_run(monkeypatch, mut, feeds[0], mode)
    for _ in range(2):
        _same(driver.run(mut, feeds[0], mode=mode), want)
    if want.reports:
        assert "_sim_schedule" not in mut.__dict__


def test_changed_streams_run_the_engine(monkeypatch, engine_runs):
    """The schedule belongs to the instructions it was recorded with: a program object whose
    streams changed since (here: an instruction replaced by one with a monitor less) runs the
    engine."""
    cr = driver.compile(models.conv_relu_maxpool(), machine="tiny")
    prog = cr.program
    feed = driver.random_inputs(prog, 3)
    driver.run(prog, feed, mode="functional")
    n = engine_runs[0]
    driver.run(prog, feed, mode="functional")
    assert engine_runs[0] == n  # replayed
    key, pos, k = next(s for s in monitor_sites(prog) if s[1] > 0)
    mut = mutate(prog, (key, pos, k), "drop")
    prog.streams[key][pos] = mut.streams[key][pos]  # the same program object
    want = _engine_run(monkeypatch, mut, feed)
    n = engine_runs[0]
    _same(driver.run(prog, feed, mode="functional"), want)
    assert engine_runs[0] > n


def _div_program() -> Program:
    """y = a / b on the integer lane of the CVU: a fault when some b is 0."""
    m = get_machine("tiny")
    a, b, y = (hb(0, base, DType.I32, (4, 8)) for base in (0, 8192, 16384))
    ins = (Ref(RefKind.INPUT, 0), Ref(RefKind.INPUT, 1))
    inst = CvuPipeline(0, (a, b), ((4, 8), (4, 8)), y, (4, 8), (Stage(CvuOp.DIV, ins),))
    syms = [Symbol(n, role, (4, 8), DType.I32, Space.HBSM, base, 0)
            for n, role, base in (("a", "input", 0), ("b", "input", 8192),
                                  ("y", "output", 16384))]
    return Program(m.name, m.fingerprint(), {m.cluster_of(0): [inst]}, symbols=syms)


def _div_feeds(seed: int, zero: tuple) -> tuple[dict, dict]:
    """Inputs of :func:`_div_program`: good ones (b never 0) and the same with b 0 at
    ``zero``."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-1000, 1000, (4, 8)).astype(np.int32)
    good = {"a": a, "b": rng.integers(1, 50, (4, 8)).astype(np.int32)}
    bad = {"a": a, "b": good["b"].copy()}
    bad["b"][zero] = 0
    return good, bad


@pytest.mark.parametrize("mode", ["functional", "full"])
def test_a_fault_in_a_replay_is_the_engines(mode, monkeypatch, engine_runs):
    prog = _div_program()
    good, bad = _div_feeds(0, (2, 5))
    a = good["a"]
    want_good = _engine_run(monkeypatch, prog, good, mode)
    want_bad = _engine_run(monkeypatch, prog, bad, mode)
    assert want_good.ok and [r.kind for r in want_bad.reports] == ["fault"]
    assert np.array_equal(want_good.outputs["y"], np.trunc(a / good["b"]).astype(np.int32))
    _same(driver.run(prog, good, mode=mode), want_good)  # recorded
    n = engine_runs[0]
    _same(driver.run(prog, bad, mode=mode), want_bad)  # replay faults: the engine
    assert engine_runs[0] == n + 1
    _same(driver.run(prog, good, mode=mode), want_good)  # replayed
    assert engine_runs[0] == n + 1


def test_replays_in_threads(monkeypatch):
    """Replays of one program in several threads at once: each its own memory (a replay binds
    the kept executors to its memory; one meanwhile in another thread makes its own)."""
    import sys
    import threading

    cr = driver.compile(models.conv_relu_maxpool(), machine="tiny")
    prog = cr.program
    feeds = [driver.random_inputs(prog, s) for s in range(4)]
    want = [_engine_run(monkeypatch, prog, x) for x in feeds]
    driver.run(prog, feeds[0], mode="functional")  # recorded
    got: dict = {}
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: the replays interleave
    try:
        def work(k):
            got[k] = [driver.run(prog, feeds[k], mode="functional") for _ in range(3)]
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    for k in range(4):
        for res in got[k]:
            _same(res, want[k])


def test_a_copy_keeps_no_schedule(monkeypatch, engine_runs):
    """``copy.deepcopy`` of a program with a kept schedule works (the schedule holds a lock) and
    gives a program without it: a changed copy runs the engine and reports what
    the change did (notebooks/04_sync.ipynb mutates a deep copy of a compiled program)."""
    import copy

    cr = driver.compile(models.conv_relu_maxpool(), machine="tiny")
    prog = cr.program
    feed = driver.random_inputs(prog, 3)
    want = driver.run(prog, feed, mode="full")  # recorded
    assert "_sim_schedule" in prog.__dict__
    for dup in (copy.deepcopy(prog), copy.copy(prog)):
        assert "_sim_schedule" not in dup.__dict__
        assert dup == prog
        n = engine_runs[0]
        _same(driver.run(dup, feed, mode="full"), want)
        assert engine_runs[0] == n + 1  # the copy's own first run: the engine
