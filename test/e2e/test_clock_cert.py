"""The first full run's race verdict from the first functional run's (``m100.sim.clock_cert``):
a full run after a kept functional run of the same program takes its clocks' certificate and
gives what the engine gives with its own race log and sweep (outputs, stats, reports, records);
a program whose functional run is race-free and whose full run races (a counter's arrivals come
in another order with timing) is reported as by the engine -- a mutant that takes the
certificate without comparing the clocks reports nothing."""

from __future__ import annotations

import numpy as np
import pytest

from m100.frontend import models
from m100.sim import clock_cert, engine
from m100.sim.testing import hb
from m100.targets.m100.isa import Copy, DType, Monitor, Space, Sync, Update
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import Program, Symbol
from m100.tools import driver
from test_replay import _engine_run, _same


@pytest.fixture(autouse=True)
def _rows(monkeypatch):
    """These are the row certificate's tests (``engine.ARRIVAL_CERT`` off); the arrivals'
    certificate is test_arrival_cert.py's."""
    monkeypatch.setattr(engine, "ARRIVAL_CERT", False)


@pytest.fixture
def certs(monkeypatch):
    """Per engine run: (mode, took a certificate, its clocks the same)."""
    seen = []
    run = engine.Engine.run

    def spied(self):
        run(self)
        seen.append((self.mode, self.cert is not None, self.clocks_ok))

    monkeypatch.setattr(engine.Engine, "run", spied)
    return seen


@pytest.mark.parametrize("build", [models.mlp, models.conv_relu_maxpool])
def test_full_run_with_the_certificate_is_the_engines(build, monkeypatch, certs):
    prog = driver.compile(build(), machine="tiny").program
    feed = driver.random_inputs(prog, 5)
    want = _engine_run(monkeypatch, prog, feed, "full")  # (its own log and sweep)
    assert want.ok and "_sim_schedule" not in prog.__dict__
    del certs[:]
    driver.run(prog, driver.random_inputs(prog, 6), mode="functional")  # (kept, race-free)
    _same(driver.run(prog, feed, mode="full"), want)
    assert certs == [("functional", False, None), ("full", True, True)]


SHAPE = (64, 128)  # X's copy: 32 KiB, ~4x the cycles of Y's with timing


def _late_writer() -> Program:
    """TPB 1's DTDU copies x into r (TPB 0's HBSM) and TPB 2's DTDU copies a few bytes of its
    own; both add 1 to counter 0 of TPB 0, where TPB 0's DTDU waits for 1 and reads r. Without
    timing X (the lower unit) ends and arrives first: Z joins X's clock, no race. With timing the
    short copy arrives first: Z joins only Y's clock and reads r while X writes it."""
    m = get_machine("m100")
    x, r, z = hb(1, 0, DType.F32, SHAPE), hb(0, 0, DType.F32, SHAPE), \
        hb(0, 65536, DType.F32, SHAPE)
    up = (Update(counter=0, tpb_mask=1 << 0),)
    insts = [Copy(tpb=1, src=x, dst=r, sync=Sync(updates=up)),
             Copy(tpb=2, src=hb(2, 0, DType.F32, (4,)), dst=hb(2, 64, DType.F32, (4,)),
                  sync=Sync(updates=up)),
             Copy(tpb=0, src=r, dst=z, sync=Sync(monitors=(Monitor(0, 0, 1),)))]
    syms = [Symbol("x", "input", SHAPE, DType.F32, Space.HBSM, 0, 1),
            Symbol("z", "output", SHAPE, DType.F32, Space.HBSM, 65536, 0)]
    return Program(m.name, m.fingerprint(), {m.cluster_of(0): insts}, symbols=syms)


def _feed() -> dict:
    return {"x": np.random.default_rng(7).standard_normal(SHAPE).astype(np.float32)}


def _functional_then_full(prog: Program):
    assert driver.run(prog, _feed(), mode="functional").ok  # (kept, with its race log)
    return driver.run(prog, _feed(), mode="full")


def test_other_clocks_with_timing_run_the_race_checks(monkeypatch, certs):
    want = _engine_run(monkeypatch, _late_writer(), _feed(), "full")
    assert [r.kind for r in want.reports] == ["race"]
    assert _engine_run(monkeypatch, _late_writer(), _feed(), "functional").ok
    del certs[:]
    _same(_functional_then_full(_late_writer()), want)
    assert ("full", True, False) in certs  # (the certificate was taken and did not hold)


def test_certificate_without_the_comparison_would_differ(monkeypatch):
    """The mutant: every certificate holds. The racy full run then reports nothing."""
    monkeypatch.setattr(clock_cert, "same", lambda *a: True)
    got = _functional_then_full(_late_writer())
    assert got.ok


def test_unconfirmed_certificate_with_other_reports_runs_the_race_checks(monkeypatch, certs):
    """A certificate run whose clocks differ and which reported something else (here a report
    added to every certificate run: a fault or a deadlock of the timed run) still ends with the
    engine's race report: a deferred run with a report is made again inline, and only a
    deferred run takes the certificate. A mutant that lets the inline run take it too (the
    simulator's ``defer`` test dropped) returns no race report -- the other tests pass it."""
    from m100.sim.checks import Report
    run = engine.Engine.run

    def noisy(self):
        run(self)
        if self.cert is not None:
            self.reports.append(Report("fault", "injected into the certificate run"))

    monkeypatch.setattr(engine.Engine, "run", noisy)
    got = _functional_then_full(_late_writer())
    assert "race" in [r.kind for r in got.reports]
    assert ("full", True, False) in certs and ("full", False, None) in certs  # (made again)
