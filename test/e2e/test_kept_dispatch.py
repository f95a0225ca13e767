"""A program's ICB dispatch times kept per machine (``Simulator._dispatch_times``): a timed run
that takes them from the program gets the times a run computing them afresh gets -- records and
stats equal, bit for bit -- and a kept entry is used only for the same instructions in the same
streams and the same machine object."""

from __future__ import annotations

import pytest

from m100.sim.simulator import Simulator
from m100.targets.m100.program import Program
from m100.tools import driver
from test_speed_paths import CASES, _records, _same


@pytest.mark.parametrize("name", ["convnet", "llama"])
def test_kept_dispatch_times_equal_computed_ones(name, monkeypatch):
    build, machine, tpbs = CASES[name]
    blob = driver.compile(build(), machine=machine, tpbs=tpbs).program.to_bytes()
    kept, computed = Program.from_bytes(blob), Program.from_bytes(blob)
    inputs = driver.random_inputs(kept, 3)
    calls = []
    real = Simulator._dispatch_times_of
    monkeypatch.setattr(Simulator, "_dispatch_times_of",
                        lambda self, recs: (calls.append(self.program is kept), real(self, recs)))
    for kw in ({"mode": "timing"}, {"mode": "full"}, {"mode": "timing"}, {"random_latency": 5},
               {"mode": "full", "trace": True}):
        a = driver.run(kept, inputs, **kw)
        computed.__dict__.pop("_sim_dispatch", None)  # (the reference: computed afresh)
        b = driver.run(computed, inputs, **kw)
        _same(a, b)
        assert _records(a) == _records(b)
        assert any(r.dispatch > 0 for r in a.records)
    # computed once for the kept program, on every timed engine run for the other
    assert calls.count(True) == 1 and calls.count(False) == 5


def test_kept_dispatch_times_are_checked_by_identity():
    build, machine, tpbs = CASES["convnet"]
    prog = driver.compile(build(), machine=machine, tpbs=tpbs).program
    sim = Simulator(prog, None, mode="timing")
    recs, _ = sim._records()
    sim._dispatch_times(recs)
    want = [r.dispatch for r in recs]
    m, insts, times = prog.__dict__["_sim_dispatch"]
    assert m is sim.machine and times == want and max(want) > 0
    # a kept entry of other instructions (equal, not the same objects) or of another machine
    # object is not used: the times are computed again
    for bad in ((m, [(s, Program.from_bytes(prog.to_bytes()).streams[s][0]) for s, _ in insts],
                 [-1.0] * len(times)),
                (object(), insts, [-1.0] * len(times)),
                (m, insts[:-1], [-1.0] * (len(times) - 1))):
        prog.__dict__["_sim_dispatch"] = bad
        recs, _ = sim._records()
        sim._dispatch_times(recs)
        assert [r.dispatch for r in recs] == want
    # the kept entry is what a run takes when it matches
    prog.__dict__["_sim_dispatch"] = (m, insts, [float(k) for k in range(len(times))])
    recs, _ = sim._records()
    sim._dispatch_times(recs)
    assert [r.dispatch for r in recs] == [float(k) for k in range(len(times))]
