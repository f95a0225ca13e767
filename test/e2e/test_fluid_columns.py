"""``Fluid._unlimited``'s answer taken again without its tests (``m100.sim.fluid``, session 36)
when no recomputation of the column sums came between and only jobs were removed since a True
(each sum ``fl(x - u) <= x``, each count lower, ``crit_jobs`` still 0), only added since a False
(each sum ``fl(x + u) >= x``, each count higher, ``crit_jobs`` no lower), or nothing moved.

The reference is the code before, written out: ``_unlimited``'s tests made at every call on the
sums as they are. Runs: functional then full (the certified run), timing, full at random
latency, and timing on a machine object of its own with ``cost_batch.BATCH`` off (link columns
registered in the loop: the arrays grow mid-run). Mutants caught: a cached False after removals
and a cached True after additions (the directions swapped); an answer taken again whatever moved."""

from __future__ import annotations

import dataclasses

import pytest

from m100.sim import cost_batch, fluid
from m100.tools import driver
from test_replay import CASES, _same


def _spy(monkeypatch) -> dict:
    """Every ``_unlimited`` answer against its tests made afresh; counts (answers compared,
    answers taken again, arrays grown in a loop)."""
    seen = {"answers": 0, "again": 0, "grown": 0}
    unl, grow = fluid.Fluid._unlimited, fluid.Fluid._grow

    def spied_unl(self, jobs):
        last, moves, fresh = self.unl_last, self.unl_moves, self.col_updates >= 4096
        got = unl(self, jobs)
        want = True if not self.jobs else (not self.crit_jobs and bool(
            ((self.col_use <= self.col_lim) | (self.col_cnt < 2)).all()))
        assert got is want
        seen["answers"] += 1
        if self.jobs and not fresh and last is not None and \
                (moves == 0 or moves == (2 if last else 1)):
            seen["again"] += 1
        return got

    def spied_grow(self):
        n = self.col_use.size
        grow(self)
        seen["grown"] += self.col_use.size > n

    monkeypatch.setattr(fluid.Fluid, "_unlimited", spied_unl)
    monkeypatch.setattr(fluid.Fluid, "_grow", spied_grow)
    return seen


@pytest.mark.parametrize("name", ["mlp", "convnet", "llama"])
def test_unlimited_taken_again_equals_its_tests(name, monkeypatch):
    build, machine, tpbs = CASES[name]
    prog = driver.compile(build(), machine=machine, tpbs=tpbs).program
    feed = driver.random_inputs(prog, 3)
    plain = [driver.run(prog, feed, mode=m) for m in ("full", "timing")]
    seen = _spy(monkeypatch)
    prog2 = driver.compile(build(), machine=machine, tpbs=tpbs).program
    assert driver.run(prog2, feed, mode="functional").ok
    _same(driver.run(prog2, feed, mode="full"), plain[0])  # (the certified run)
    _same(driver.run(prog2, feed, mode="timing"), plain[1])
    assert driver.run(prog2, feed, mode="full", random_latency=5).stats["total_cycles"] > 0
    # a machine object of its own (a fresh column registry) without the cost batch: each link
    # is registered at its first block, the arrays grow in the loop
    monkeypatch.setattr(cost_batch, "BATCH", False)
    fresh = dataclasses.replace(prog2.machine_obj())
    prog3 = driver.compile(build(), machine=machine, tpbs=tpbs).program
    _same(driver.run(prog3, feed, mode="timing", machine=fresh), plain[1])
    assert seen["answers"] > 20 and seen["again"] > 0
    if name == "llama":  # (a run whose link columns are registered in its loop)
        assert seen["grown"]
