"""A first functional run's bulk race log made after the loop (``Checks._race_log_after``, issue 15):
the functional loop of a run whose executor calls are logged (``Engine.defer``) keeps only each
block's clock row and makes the log from the calls' log and the pre-pass's per-half table. The
oracle is the log the loop makes itself (``Checks._race_log`` at each block's start and end, the
path taken when the pre-pass's table is missing): the same entries (packed rows, unit, epoch,
write, clock row) in the same order and the same clock rows handed to the sweep, and the same
outputs, stats, reports and records -- on compiled models, racy mutants and a deadlock, each run
on a fresh decode (a first run: nothing kept on the instructions)."""

from __future__ import annotations

import numpy as np
import pytest

from e2e_helpers import monitor_sites, mutate
from m100.sim import engine_checks, race_batch
from m100.targets.m100.program import Program
from m100.tools import driver
from test_replay import CASES, _same
from test_untimed_loop import _never


def _runs(blob: bytes, inputs: dict, monkeypatch, after: bool) -> tuple:
    """A first functional run of a fresh decode of ``blob``; the logs its sweeps were handed
    (entries, meta, clock rows, whether made after the loop)."""
    swept = []
    orig_sweep = race_batch.RaceBatch.sweep

    def sweep(self):
        ents, meta = self.entries()
        swept.append((ents, meta, self.buf[:self.used].copy(), self.log_arrays is not None))
        return orig_sweep(self)

    orig_derive = engine_checks.Checks._derive_blocks

    def derive(self):
        orig_derive(self)
        if not after:  # (the reference: the loop logs each block half itself)
            self.race_halves = None

    with monkeypatch.context() as m:
        m.setattr(race_batch.RaceBatch, "sweep", sweep)
        m.setattr(engine_checks.Checks, "_derive_blocks", derive)
        res = driver.run(Program.from_bytes(blob), inputs, mode="functional")
    return res, swept


@pytest.mark.parametrize("name", ["mlp", "convnet", "llama",
                                  pytest.param("resnet18-32", marks=pytest.mark.slow)])
def test_log_after_the_loop_equals_the_loops_own(name, monkeypatch):
    build, machine, tpbs = CASES[name]
    cr = driver.compile(build(), machine=machine, tpbs=tpbs)
    inputs = driver.random_inputs(cr.program, 6)
    sites = monitor_sites(cr.program)
    programs = [cr.program] + [mutate(cr.program, s, "drop")
                               for s in sites[:: max(1, len(sites) // 4)]]
    programs.append(_never(cr.program, sites[len(sites) // 2]))  # (a deadlock)
    made_after = raced = deadlocked = 0
    for program in programs:
        blob = program.to_bytes()
        new, new_swept = _runs(blob, inputs, monkeypatch, True)
        ref, ref_swept = _runs(blob, inputs, monkeypatch, False)
        _same(new, ref)
        assert len(new_swept) == len(ref_swept) >= 1
        for (ents, meta, rows, arr), (rents, rmeta, rrows, rarr) in zip(new_swept, ref_swept):
            assert not rarr  # (the reference logged in the loop)
            assert ents == rents and meta == rmeta
            assert np.array_equal(rows, rrows)
        made_after += new_swept[0][3]
        raced += bool(new.reports_of("race"))
        deadlocked += bool(new.reports_of("deadlock"))
    assert made_after == len(programs)  # (the first sweep of every first run: made after)
    assert raced and deadlocked  # (a racy and a deadlocked run compared)


def test_log_after_needs_alternating_calls():
    """An end that does not follow its unit's start is refused, not logged wrongly."""

    class RB:
        used = 1
        buf = np.ones((2, 1), dtype=np.int64)

    class Rec:
        index, unit = 0, 0

    class Eng(engine_checks.Checks):
        recs = [Rec()]
        rbatch = RB()

    eng = Eng()
    rows = race_batch.RaceRows(np.zeros((0, 3), dtype=np.int64), [])
    z = np.zeros(4, dtype=np.int64)
    eng.race_halves = (rows, z, z, np.zeros(1, dtype=np.int64))
    with pytest.raises(AssertionError):
        eng._race_log_after([(0, 0), (0, -1), (0, -1)])  # (two ends of one start)


def test_log_after_by_hand():
    """Two units' blocks started then ended in interleaved order, one half without bytes: the
    entries written out -- the halves with rows, in call order, each with its unit, the epoch
    in its row, its write flag and its block's start number."""

    class RB:
        used = 3
        buf = np.array([[1, 0], [0, 1], [2, 1]], dtype=np.int64)  # (rows of starts 0, 1, 2)

        def set_log(self, rows, first, cnt, meta):
            self.got = (first.tolist(), cnt.tolist(), meta.tolist())

    class Rec:
        def __init__(self, index, unit):
            self.index, self.unit = index, unit

    class Eng(engine_checks.Checks):
        recs = [Rec(0, 0), Rec(1, 1)]
        rbatch = RB()

    eng = Eng()
    rows = race_batch.RaceRows(np.zeros((9, 3), dtype=np.int64), [None] * 9)
    # halves: rec 0 block 0 reads (no bytes), writes; block 1 reads, writes; rec 1 block 0 ...
    hf = np.array([0, 0, 2, 3, 5, 7], dtype=np.int64)
    he = np.array([0, 2, 3, 5, 7, 9], dtype=np.int64)
    eng.race_halves = (rows, hf, he, np.array([0, 4], dtype=np.int64))
    eng._race_log_after([(0, 0), (1, 0), (0, -1), (1, -1), (0, 1), (0, -1)])
    assert eng.rbatch.got == ([5, 0, 7, 2, 3], [2, 2, 2, 1, 2],
                              [[1, 1, 0, 1], [0, 1, 1, 0], [1, 1, 1, 1], [0, 2, 0, 2],
                               [0, 2, 1, 2]])


@pytest.mark.parametrize("name", ["convnet", "llama"])
def test_int32_clock_rows_equal_int64(name, monkeypatch):
    """The engine's clock rows as int32 (``RaceBatch`` given its block count): the same log,
    rows (as numbers) and results as with int64 rows."""
    build, machine, tpbs = CASES[name]
    cr = driver.compile(build(), machine=machine, tpbs=tpbs)
    inputs = driver.random_inputs(cr.program, 6)
    blob = cr.program.to_bytes()
    new, new_swept = _runs(blob, inputs, monkeypatch, True)
    monkeypatch.setattr(race_batch, "_I32_ROWS", 0)  # (every row int64)
    ref, ref_swept = _runs(blob, inputs, monkeypatch, True)
    _same(new, ref)
    (ents, meta, rows, _), (rents, rmeta, rrows, _) = new_swept[0], ref_swept[0]
    assert rows.dtype == np.int32 and rrows.dtype == np.int64
    assert ents == rents and meta == rmeta and np.array_equal(rows, rrows)


def test_clock_rows_past_the_int32_bound_are_int64(monkeypatch):
    """Rows kept past ``_I32_ROWS`` (here 100) grow into int64; every row keeps its numbers."""
    monkeypatch.setattr(race_batch, "_I32_ROWS", 100)
    rb = race_batch.RaceBatch(3, rows=70)
    assert rb.buf.dtype == np.int32
    rows = [np.array([i + 1, i // 2 + 1, 2 ** 31 + 5 if i >= 140 else 1], dtype=np.int64)
            for i in range(150)]
    for r in rows:
        rb.keep(r)
    assert rb.buf.dtype == np.int64 and rb.used == 150
    assert np.array_equal(rb.buf[:150], np.array(rows))
    assert race_batch.RaceBatch(3, rows=100).buf.dtype == np.int64
    assert race_batch.RaceBatch(3).buf.dtype == np.int64
