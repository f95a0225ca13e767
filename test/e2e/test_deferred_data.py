"""The first functional or full run of a program (the one whose schedule is kept; functional
since session 30, through ``sim/engine_untimed.py``'s loop) makes its executors' calls
after the engine's loop, in the order the loop logged them (``sim/replay.py``, "The first full
run"): it gives what the engine gives with the data inline, bit for bit -- outputs, stats,
reports, every record, and the kept schedule (the calls in order, the records) -- on compiled
models, when the data makes an executor fault (the engine runs again with the data inline and
reports it) and on a racy mutant (the per-access checker's reports)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from e2e_helpers import monitor_sites, mutate
from m100.sim import engine, replay, simulator
from m100.tools import driver
from test_replay import CASES, _div_feeds, _div_program, _engine_run, _same


def _inline(monkeypatch, program, inputs, mode="full", **kw):
    """The engine's run with the data inline: nothing replayed or recorded (REPLAY False)."""
    return _engine_run(monkeypatch, program, inputs, mode=mode, **kw)


@pytest.fixture
def spy(monkeypatch):
    """Counts of the engine's runs, of those with a logged (deferred) data part and of
    :func:`replay.calls` made after a loop."""
    n = {"engine": 0, "deferred": 0, "calls": 0}
    run, calls = engine.Engine.run, replay.calls

    def counted_run(self):
        n["engine"] += 1
        n["deferred"] += self.defer is not None
        return run(self)

    def counted_calls(exs, log, race_free=False):
        n["calls"] += 1
        return calls(exs, log, race_free)

    monkeypatch.setattr(engine.Engine, "run", counted_run)
    monkeypatch.setattr(replay, "calls", counted_calls)
    return n


def _recorded_inline(monkeypatch, program, inputs, mode="full"):
    """The first full run of ``program`` recorded as before: the data inline, the calls logged
    by the executors' recorders (``Simulator._run_once``'s ``defer`` False)."""
    run_once = simulator.Simulator._run_once
    monkeypatch.setattr(simulator.Simulator, "_run_once",
                        lambda self, inputs, batch, defer=True: run_once(self, inputs, batch,
                                                                         False))
    try:
        return driver.run(program, inputs, mode=mode)
    finally:
        monkeypatch.setattr(simulator.Simulator, "_run_once", run_once)


def _schedule(program):
    (sched,) = program.__dict__["_sim_schedule"].values()
    return sched


@pytest.mark.parametrize("mode", ["functional", "full"])
@pytest.mark.parametrize("name", ["mlp", "convnet", "llama"])
def test_deferred_first_full_run_equals_the_inline_engine(name, mode, monkeypatch, spy):
    build, machine, tpbs = CASES[name]
    prog = driver.compile(build(), machine=machine, tpbs=tpbs).program
    other = copy.deepcopy(prog)  # (the same instructions by value; no schedule)
    feeds = [driver.random_inputs(prog, s) for s in (5, 6)]
    want = [_inline(monkeypatch, prog, x, mode) for x in feeds]
    assert all(w.ok for w in want) and "_sim_schedule" not in prog.__dict__
    n = dict(spy)
    _same(driver.run(prog, feeds[0], mode=mode), want[0])  # the first: deferred
    assert (spy["engine"], spy["deferred"], spy["calls"]) == \
        (n["engine"] + 1, n["deferred"] + 1, n["calls"] + 1)
    _same(driver.run(prog, feeds[1], mode=mode), want[1])  # replayed from its schedule
    assert spy["engine"] == n["engine"] + 1
    # its kept schedule is the one the inline run records: the same calls, records, stats
    _same(_recorded_inline(monkeypatch, other, feeds[0], mode), want[0])
    assert spy["deferred"] == n["deferred"] + 1  # (that one inline)
    a, b = _schedule(prog), _schedule(other)
    blocks = sum(r.inst.sync.blocks for r in driver.run(prog, feeds[0], mode=mode).records)
    assert a.calls == b.calls and len(a.calls) == 2 * blocks
    assert [r[:3] + r[4:] for r in a.recs] == [r[:3] + r[4:] for r in b.recs]
    assert (a.units, a.macs, a.peak, a.nbytes) == (b.units, b.macs, b.peak, b.nbytes)
    # without race checks: its own schedule, deferred too
    want_nr = _inline(monkeypatch, prog, feeds[1], mode, check_races=False)
    _same(driver.run(prog, feeds[1], mode=mode, check_races=False), want_nr)
    assert spy["deferred"] == n["deferred"] + 2


@pytest.mark.parametrize("mode", ["functional", "full"])
def test_a_fault_in_the_deferred_calls_is_the_engines(mode, monkeypatch, spy):
    """The data makes an executor fault among the calls made after the loop: the engine runs
    again with the data inline (the fault stops it there) and reports it; no schedule is kept,
    and a later first run without the fault is deferred and kept."""
    prog = _div_program()
    good, bad = _div_feeds(1, (1, 3))
    a = good["a"]
    want_bad = _inline(monkeypatch, prog, bad, mode)
    want_good = _inline(monkeypatch, prog, good, mode)
    assert [r.kind for r in want_bad.reports] == ["fault"] and want_good.ok
    assert np.array_equal(want_good.outputs["y"], np.trunc(a / good["b"]).astype(np.int32))
    n = dict(spy)
    _same(driver.run(prog, bad, mode=mode), want_bad)
    assert (spy["engine"], spy["deferred"], spy["calls"]) == \
        (n["engine"] + 2, n["deferred"] + 1, n["calls"] + 1)
    assert "_sim_schedule" not in prog.__dict__
    _same(driver.run(prog, good, mode=mode), want_good)  # deferred, kept
    assert spy["deferred"] == n["deferred"] + 2 and "_sim_schedule" in prog.__dict__


@pytest.mark.parametrize("mode", ["functional", "full"])
def test_a_racy_first_full_run_reports_as_the_engine(mode, monkeypatch, spy):
    """A mutant with a monitor dropped: the loop's batch check finds the race before any call
    is made, and the per-access checker's run (data inline) reports it, as without deferring."""
    build, machine, tpbs = CASES["convnet"]
    prog = driver.compile(build(), machine=machine, tpbs=tpbs).program
    feed = driver.random_inputs(prog, 2)
    sites = monitor_sites(prog)
    found = 0
    for site in sites[len(sites) // 3:: max(1, len(sites) // 6)]:
        mut = mutate(prog, site, "drop")
        want = _inline(monkeypatch, mut, feed, mode)
        n = dict(spy)
        _same(driver.run(mut, feed, mode=mode), want)
        if want.reports:
            found += 1
            assert spy["calls"] == n["calls"] and "_sim_schedule" not in mut.__dict__
    assert found  # (some mutant is racy: the path above was taken)
