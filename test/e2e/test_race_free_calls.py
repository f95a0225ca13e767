"""``replay.calls`` with ``race_free`` (a copy writes its destinations in its ``run_free``, before
the blocks logged between its run and its apply) only on the schedule of a run whose race checks
found nothing: a racy program run without race checks -- a copy's destination read by a
concurrent block -- gives the engine's bytes (data inline) in its first (deferred) run and in
its replay; with race checks it is reported as by the engine. Forcing ``race_free`` on makes
that run differ (the test is not vacuous). The copies' own equality is
``test/unit/sim/test_copy_run_free.py``."""

from __future__ import annotations

import numpy as np
import pytest

from m100.sim import replay
from m100.sim.testing import hb
from m100.targets.m100.isa import Copy, DType, Space, Sync
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import Program, Symbol
from m100.tools import driver
from test_replay import _engine_run, _same

SHAPE = (4, 8)


def _racy(first: int) -> Program:
    """TPB ``first``'s DTDU copies x (its HBSM) to y (the other TPB's HBSM) while the other
    TPB's DTDU copies y to z (TPB ``first``'s HBSM): no counter orders the two (a race on y)."""
    m = get_machine("tiny")
    other = 1 - first
    x, y, z = hb(first, 0, DType.F32, SHAPE), hb(other, 4096, DType.F32, SHAPE), \
        hb(first, 8192, DType.F32, SHAPE)
    insts = [Copy(tpb=first, src=x, dst=y, sync=Sync()), Copy(tpb=other, src=y, dst=z, sync=Sync())]
    syms = [Symbol("x", "input", SHAPE, DType.F32, Space.HBSM, 0, first),
            Symbol("z", "output", SHAPE, DType.F32, Space.HBSM, 8192, first)]
    return Program(m.name, m.fingerprint(), {m.cluster_of(0): insts}, symbols=syms)


def _feed(seed: int) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)}


@pytest.mark.parametrize("mode", ["functional", "full"])
@pytest.mark.parametrize("first", [0, 1])
def test_racy_runs_without_race_checks_are_the_engines(first, mode, monkeypatch):
    prog = _racy(first)
    for seed in (1, 2):  # the first run (deferred), then its replay
        want = _engine_run(monkeypatch, prog, _feed(seed), mode, check_races=False)
        assert want.ok
        _same(driver.run(prog, _feed(seed), mode=mode, check_races=False), want)
    assert "_sim_schedule" in prog.__dict__
    want = _engine_run(monkeypatch, prog, _feed(3), mode)
    assert [r.kind for r in want.reports] == ["race"]
    _same(driver.run(_racy(first), _feed(3), mode=mode), want)


def test_race_free_forced_on_would_differ(monkeypatch):
    """A mutant that passes ``race_free`` whatever the run checked: in one of the two programs
    (the copier of y starts before y's reader) the reader sees x's values, not y's zeros."""
    calls = replay.calls
    monkeypatch.setattr(replay, "calls", lambda exs, log, race_free=False: calls(exs, log, True))
    differ = 0
    for first in (0, 1):
        prog = _racy(first)
        with monkeypatch.context() as mp:
            mp.setattr(replay, "calls", calls)
            want = _engine_run(mp, prog, _feed(1), "functional", check_races=False)
        got = driver.run(prog, _feed(1), mode="functional", check_races=False)
        differ += got.outputs["z"].tobytes() != want.outputs["z"].tobytes()
    assert differ == 1
