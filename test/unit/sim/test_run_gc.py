"""A run's objects go to the collector's oldest generation unscanned (``Simulator.run``): the
same results as a run with the collector off (no freeze); a run leaves no cyclic garbage
that holds its engine or memory (so the memory's mappings still go back to the pool at once);
the run's objects are no longer young; a caller's own ``gc.freeze`` is not undone; the
collector's on / off state is the caller's after the run."""

from __future__ import annotations

import gc

import pytest

from m100.frontend import models
from m100.sim import engine, memory, mempool, simulator
from m100.targets.m100.program import Program
from m100.tools import driver


@pytest.fixture(scope="module")
def mlp():
    cr = driver.compile(models.mlp(), machine="tiny")
    return cr.program, driver.random_inputs(cr.program, 2)


def _key(res):
    return ({k: v.tobytes() for k, v in res.outputs.items()}, res.stats,
            [str(r) for r in res.reports], [(r.start, r.end, r.blocks) for r in res.records])


@pytest.mark.parametrize("mode", ["functional", "full", "timing"])
def test_frozen_run_equals_a_run_with_the_collector_off(mlp, mode):
    program, inputs = mlp
    data = program.to_bytes()
    for _ in range(2):  # a first run of a fresh decode each side, then a replay of it
        a_prog, b_prog = Program.from_bytes(data), Program.from_bytes(data)
        was = gc.isenabled()
        gc.enable()  # (the run freezes its objects into the oldest generation)
        try:
            a = driver.run(a_prog, inputs, mode=mode)
            a2 = driver.run(a_prog, inputs, mode=mode)
            gc.disable()  # (the reference: the collector off, the run freezes nothing)
            b = driver.run(b_prog, inputs, mode=mode)
            b2 = driver.run(b_prog, inputs, mode=mode)
        finally:
            (gc.enable if was else gc.disable)()
        assert _key(a) == _key(b) and _key(a2) == _key(b2)


def test_a_run_leaves_no_cycle_holding_its_engine_or_memory(mlp):
    """What OLDEST relies on: nothing of a run waits for a collection to be freed."""
    program, inputs = mlp
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        for mode in ("functional", "full", "timing", "functional"):
            res = driver.run(program, inputs, mode=mode)
            del res
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                gc.collect()
                kinds = {type(o) for o in gc.garbage}
            finally:
                gc.set_debug(0)
                del gc.garbage[:]
            assert not kinds & {engine.Engine, memory.Memory, memory.FlatBytes,
                                simulator.Simulator, engine.InstRec}, kinds
    finally:
        if was:
            gc.enable()


def test_the_memory_goes_back_to_the_pool_at_once(mlp, monkeypatch):
    program, inputs = mlp
    if mempool._MINCORE is None:
        pytest.skip("no mincore(2) here")
    monkeypatch.setattr(mempool, "_free", {})
    assert gc.isenabled()
    driver.run(program, inputs, mode="functional")
    assert sum(len(v) for v in mempool._free.values())  # (no collection needed)


def test_the_run_objects_are_old_and_a_callers_freeze_stays(mlp):
    program, inputs = mlp
    assert gc.isenabled()
    res = driver.run(program, inputs, mode="full")
    young = {id(o) for o in gc.get_objects(generation=0)}
    assert id(res.records) not in young and id(res.records[0].blocks) not in young
    sentinel = [[]]  # (a tracked object the caller freezes)
    gc.freeze()
    try:
        assert id(sentinel) not in {id(o) for o in gc.get_objects()}
        driver.run(program, inputs, mode="full")
        assert id(sentinel) not in {id(o) for o in gc.get_objects()}  # still frozen
        assert gc.isenabled()
    finally:
        gc.unfreeze()
    assert id(sentinel) in {id(o) for o in gc.get_objects()}
    gc.disable()
    try:
        driver.run(program, inputs, mode="functional")
        assert not gc.isenabled()
    finally:
        gc.enable()
