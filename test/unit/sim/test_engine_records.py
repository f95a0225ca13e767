"""The engine's pass over a run's records (``Engine.__init__``, session 36): one loop makes each
record's executor, the run's block count (the race batch's clock rows) and ``Engine.syncs`` --
each record's sync by its index, which the functional loop reads instead of the (cold)
instruction. The references are the passes before it, written out: the executors by
``inst.executor``, the units sorted as before, the queues by (stream, position), the rows as
``sum(inst.sync.blocks)``; ``syncs[r.index] is r.inst.sync`` for records whose indices are
their positions (a list) and for records in another order (a dict)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from m100.frontend import models
from m100.sim import engine
from m100.sim.simulator import Simulator
from m100.targets.m100.isa import Unit
from m100.tools import driver


@pytest.fixture(scope="module")
def program():
    return driver.compile(models.mlp(), machine="tiny").program


def _old_units(recs: list) -> tuple:
    """The units, their records' unit ids, queues and row count as the passes before made them."""
    execs = [r.inst.executor for r in recs]
    keys = sorted(set(execs), key=lambda k: (k[0] is Unit.DMA, k[1], k[0]))
    uid = {k: i for i, k in enumerate(keys)}
    queues: list = [[] for _ in keys]
    for r in sorted(recs, key=lambda r: (r.stream, r.pos)):
        queues[uid[r.inst.executor]].append(r.index)
    return keys, [uid[k] for k in execs], queues, sum(r.inst.sync.blocks for r in recs)


def _check(sim: Simulator, recs: list, monkeypatch) -> engine.Engine:
    keys, units, queues, rows = _old_units(recs)
    asked = []  # (the row count the race batch is made with)
    orig = engine.RaceBatch

    def batch(n, rows=None):
        asked.append(rows)
        return orig(n, rows=rows)

    monkeypatch.setattr(engine, "RaceBatch", batch)
    eng = engine.Engine(sim.machine, recs, sim.memory, "functional", None, True, False,
                        batch_races=True)
    assert [u.key for u in eng.units] == keys
    assert [r.unit for r in recs] == units
    assert [[r.index for r in u.queue] for u in eng.units] == queues
    assert asked == [rows]
    assert len(eng.syncs) == len(recs)
    for r in recs:
        assert eng.syncs[r.index] is r.inst.sync
    return eng


def test_syncs_by_index_in_order(program, monkeypatch):
    sim = Simulator(program, mode="functional")
    recs, _ = sim._records()
    assert isinstance(_check(sim, recs, monkeypatch).syncs, list)


def test_syncs_by_index_in_another_order(program, monkeypatch):
    sim = Simulator(program, mode="functional")
    recs, _ = sim._records()
    shuffled = list(recs)
    random.Random(3).shuffle(shuffled)  # (indices are no longer positions)
    assert [r.index for r in shuffled] != list(range(len(recs)))
    assert isinstance(_check(sim, shuffled, monkeypatch).syncs, dict)
    # and records whose indices are not 0 .. n - 1 at all
    far = [dataclasses.replace(r, index=r.index + 1000, blocks=[]) for r in recs]
    assert isinstance(_check(sim, far, monkeypatch).syncs, dict)


def test_rows_count_every_block(program, monkeypatch):
    """Instructions of several blocks: the row count is the sum of their blocks."""
    sim = Simulator(program, mode="functional")
    recs, _ = sim._records()
    rng = random.Random(5)
    many = [dataclasses.replace(r, inst=dataclasses.replace(
        r.inst, sync=dataclasses.replace(r.inst.sync, blocks=rng.randint(1, 4))), blocks=[])
        for r in recs]
    assert sum(r.inst.sync.blocks for r in many) > len(many)
    _check(sim, many, monkeypatch)
