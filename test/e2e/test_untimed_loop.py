"""The functional engine's own loop (``m100.sim.engine_untimed``) makes the same events in the
same order as the general loop: the same outputs (bytes), stats, reports, records (block start /
end times), counter histories and clock joins, executor calls in the same order, the same bulk
race log and clock rows (recorded inline by the functional loop) -- race batches
and the per-access checker, monitor-dropping mutants (races, deadlocks), a faulting run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from e2e_helpers import monitor_sites, mutate
from m100.frontend import models
from m100.sim import engine, engine_untimed, race_batch, replay
from m100.targets.m100.program import Program
from m100.tools import driver
from test_replay import CASES, _same  # (outputs' bytes, stats, reports, every record's times)


def _same_engines(a, b) -> None:
    assert np.array_equal(a.vc, b.vc)
    assert a.counters == b.counters
    assert a.hist.keys() == b.hist.keys()
    for key, h in a.hist.items():
        g = b.hist[key]
        assert h[0] == g[0] and h[3] == g[3], key
        assert len(h[1]) == len(g[1])
        for x, y in zip(h[1], g[1]):
            assert np.array_equal(x, y), key
    assert [u.state for u in a.units] == [u.state for u in b.units]
    assert [(u.busy, u.stalls, u.block) for u in a.units] == \
        [(u.busy, u.stalls, u.block) for u in b.units]
    assert a.done_count == b.done_count and a.now == b.now


@pytest.mark.parametrize("name", ["mlp", "convnet", "llama",
                                  pytest.param("resnet18-32", marks=pytest.mark.slow)])
def test_functional_loop_equals_the_general_loop(name, monkeypatch):
    build, machine, tpbs = CASES[name]
    cr = driver.compile(build(), machine=machine, tpbs=tpbs)
    inputs = driver.random_inputs(cr.program, 6)
    sites = monitor_sites(cr.program)
    programs = [cr.program] + [mutate(cr.program, s, "drop")
                               for s in sites[:: max(1, len(sites) // 5)]]
    programs += [_never(cr.program, sites[len(sites) // 2]), mutate(cr.program, sites[-1], "lower")]
    engines, loops, calls = [], [], []
    orig_run, orig_loop = engine.Engine.run, engine_untimed.UntimedLoop._loop_functional

    def run(self):
        engines.append(self)
        for r in self.recs:  # every executor call, in order
            if r.ex is not None:
                ex = r.ex
                r.ex = _Logged(ex, r.index, calls)
        return orig_run(self)

    def loop(self):
        loops.append(self)
        return orig_loop(self)

    swept = []  # the bulk race log and clock rows each sweep is handed
    orig_sweep = race_batch.RaceBatch.sweep

    def sweep(self):
        swept.append(([race_batch.unpack(pk)[0] for pk in self.log_rows], list(self.log_meta),
                       self.buf[:self.used].copy()))
        return orig_sweep(self)

    monkeypatch.setattr(race_batch.RaceBatch, "sweep", sweep)
    monkeypatch.setattr(engine.Engine, "run", run)
    monkeypatch.setattr(engine_untimed.UntimedLoop, "_loop_functional", loop)
    monkeypatch.setattr(replay, "REPLAY", False)  # (every run by the engine)
    reported = deadlocks = 0
    for program in programs:
        for batch, races in ((True, True), (False, True), (True, False)):
            monkeypatch.setattr(race_batch, "BATCH", batch)
            n = len(loops)
            del calls[:], swept[:]
            fast = driver.run(program, inputs, mode="functional", check_races=races)
            a, fast_calls, fast_swept = engines[-1], list(calls), list(swept)
            assert len(loops) > n  # (the functional loop ran)
            monkeypatch.setattr(engine_untimed, "FAST", False)
            n = len(loops)
            del calls[:], swept[:]
            ref = driver.run(program, inputs, mode="functional", check_races=races)
            b = engines[-1]
            assert len(loops) == n  # (the general loop ran)
            monkeypatch.setattr(engine_untimed, "FAST", True)
            _same(fast, ref)
            _same_engines(a, b)
            assert fast_calls == calls
            # (the functional loop records the bulk race log inline: the same entries, rows)
            assert len(fast_swept) == len(swept) == (batch and races)
            for (*fl, fb), (*rl, rbuf) in zip(fast_swept, swept):
                assert fl == rl and np.array_equal(fb, rbuf)
            reported += bool(fast.reports_of("race"))
            deadlocks += bool(fast.reports_of("deadlock"))
    assert reported and deadlocks  # racy and deadlocked runs compared


def _never(program, site):
    """``program`` with the monitor at ``site`` waiting for more than any update brings."""
    key, pos, k = site
    inst = program.streams[key][pos]
    mons = list(inst.sync.monitors)
    mons[k] = dataclasses.replace(mons[k], expected=mons[k].expected + 1000)
    new = dataclasses.replace(inst, sync=dataclasses.replace(inst.sync, monitors=tuple(mons)))
    streams = {kk: list(v) for kk, v in program.streams.items()}
    streams[key][pos] = new
    return dataclasses.replace(program, streams=streams)


class _Logged:
    """An executor whose run / apply calls are logged (record index, block or -1)."""

    def __init__(self, ex, i, log):
        self.ex, self.i, self.log = ex, i, log
        self.reads, self.writes = ex.reads, ex.writes

    def run(self, b):
        self.log.append((self.i, b))
        return self.ex.run(b)

    def apply(self, w):
        self.log.append((self.i, -1))
        return self.ex.apply(w)

    def __getattr__(self, k):
        return getattr(self.ex, k)


def test_functional_loop_reports_a_fault_as_the_general_loop(monkeypatch):
    """An executor that faults stops both loops at the same block with the same report."""
    from m100.sim import semantics_base

    cr = driver.compile(models.mlp(), machine="tiny")
    inputs = driver.random_inputs(cr.program, 1)
    monkeypatch.setattr(replay, "REPLAY", False)
    orig = engine.Engine.run

    class Faulty(_Logged):
        def apply(self, w):
            self.log.append(1)
            if len(self.log) == 7:
                raise semantics_base.SimError("a fault on purpose")
            return self.ex.apply(w)

    def run(self):
        log = []
        for r in self.recs:
            if r.ex is not None:
                r.ex = Faulty(r.ex, r.index, log)
        return orig(self)

    monkeypatch.setattr(engine.Engine, "run", run)
    fast = driver.run(cr.program, inputs, mode="functional")
    monkeypatch.setattr(engine_untimed, "FAST", False)
    ref = driver.run(cr.program, inputs, mode="functional")
    assert fast.reports_of("fault")
    assert [str(r) for r in fast.reports] == [str(r) for r in ref.reports]
    assert [(r.start, r.end, r.blocks) for r in fast.records] == \
        [(r.start, r.end, r.blocks) for r in ref.records]


def test_functional_loop_only_where_it_applies():
    """Random latencies, traces and timed modes run the general loops."""
    cr = driver.compile(models.mlp(), machine="tiny")
    inputs = driver.random_inputs(cr.program, 2)
    used = []
    orig = engine_untimed.UntimedLoop._loop_functional
    engine_untimed.UntimedLoop._loop_functional = lambda self: (used.append(1), orig(self))[1]
    try:
        for kw in ({"random_latency": 3}, {"trace": True}, {"mode": "full"},
                   {"mode": "timing"}):
            kw.setdefault("mode", "functional")
            driver.run(cr.program, inputs, **kw)
        assert not used
        driver.run(cr.program, inputs, mode="functional")
        assert used
    finally:
        engine_untimed.UntimedLoop._loop_functional = orig


def _unit_state(eng) -> list:
    return [(u.state, u.busy, u.busy_until, u.stalls, u.stall_since, u.stall_cause, u.block,
             u.block_start, u.wait, u.pending, u.cost, u.flows,
             u.cur.index if u.cur is not None else None, [r.index for r in u.queue])
            for u in eng.units]


@pytest.mark.parametrize("name", ["mlp", "convnet", "llama",
                                  pytest.param("resnet18-32", marks=pytest.mark.slow)])
def test_functional_loop_after_state_equals_the_general_loop(name, monkeypatch):
    """A first functional run whose race log is made after the loop (``after``: the calls
    logged, the pre-pass's table) leaves the engine as the general loop does (run with the
    same call log, its race log inline): the same units (busy and its end, stalls, waits,
    blocks), counters, waiting sets (``Engine.waiters``, kept in lists by the functional
    loop), call log, records and results; its clocks are not joined (race_clocks makes the
    rows), so ``vc`` is the identity plus one tick per block end on the diagonal -- the
    general loop's diagonal. On racy (dropped monitors) and deadlocked programs too."""
    build, machine, tpbs = CASES[name]
    cr = driver.compile(build(), machine=machine, tpbs=tpbs)
    inputs = driver.random_inputs(cr.program, 6)
    sites = monitor_sites(cr.program)
    programs = [cr.program] + [mutate(cr.program, s, "drop")
                               for s in sites[:: max(1, len(sites) // 3)]]
    programs.append(_never(cr.program, sites[len(sites) // 2]))
    engines, afters = [], []
    orig_run, orig_after = engine.Engine.run, engine_untimed.UntimedLoop._loop_functional

    def run(self):
        engines.append(self)
        return orig_run(self)

    def loop(self):  # (whether this loop made the log after itself)
        afters.append(self.defer is not None and self.race_halves is not None)
        return orig_after(self)

    monkeypatch.setattr(engine.Engine, "run", run)
    monkeypatch.setattr(engine_untimed.UntimedLoop, "_loop_functional", loop)
    deadlocks = 0
    for program in programs:
        blob = program.to_bytes()
        del engines[:], afters[:]
        fast = driver.run(Program.from_bytes(blob), inputs, mode="functional")
        a = engines[0]
        assert afters and afters[0]  # (the after path ran, in the first engine)
        monkeypatch.setattr(engine_untimed, "FAST", False)
        del engines[:]
        ref = driver.run(Program.from_bytes(blob), inputs, mode="functional")
        monkeypatch.setattr(engine_untimed, "FAST", True)
        b = engines[0]
        assert b.defer is not None
        _same(fast, ref)
        assert _unit_state(a) == _unit_state(b)
        assert a.counters == b.counters
        assert a.waiters == b.waiters
        assert a.defer == b.defer
        assert a.done_count == b.done_count and a.now == b.now
        ticks = np.zeros(len(a.units), dtype=np.int64)
        for r in a.recs:
            ticks[r.unit] += len(r.blocks)
        assert np.array_equal(a.vc, np.eye(len(a.units), dtype=np.int64) + np.diag(ticks))
        assert np.array_equal(np.diag(b.vc), np.diag(a.vc))
        deadlocks += bool(a.waiters)
    assert deadlocks
