"""sync-insert output run on the project's reference interpreter (``m100.sim``): its race and
deadlock checks and its numbers must agree with the sequential numpy reference."""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import progs  # noqa: E402
import toysim  # noqa: E402

from m100.passes.backend.sync_insert import insert_sync  # noqa: E402
from m100.targets.m100.isa import DType, Space, Walk  # noqa: E402
from m100.targets.m100.machine import get_machine  # noqa: E402

sim = pytest.importorskip("m100.sim.simulator")

TINY = get_machine("tiny")


def simrun(insts, mem, machine=TINY, **kw):
    s = sim.Simulator(list(insts), machine, **kw)
    walks = {k: Walk.strided(Space(k[0]), k[1], 0, DType.F32, (v.size,)) for k, v in mem.items()}
    for k, v in mem.items():
        s.write(walks[k], v)
    res = s.run()
    return res, {k: np.asarray(s.read(w), np.float32) for k, w in walks.items()}


def good(res, out, ref) -> bool:
    return res.ok and all(np.allclose(out[k], ref[k], rtol=1e-4, atol=1e-4) for k in ref)


def setup(prog, seed=0):
    mem = toysim.memories_for(prog, TINY, np.random.default_rng(seed))
    return mem, toysim.sequential(prog, mem)


@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
@pytest.mark.parametrize("seed", range(8))
def test_random_programs_on_interpreter(seed, mode):
    prog = progs.random_program(seed, n=18)
    mem, ref = setup(prog, seed)
    raw, _ = simrun(prog, mem)
    res = insert_sync(prog, TINY, sync_mode=mode)
    r, out = simrun(res.instructions, mem, random_latency=seed)
    assert good(r, out, ref), [str(x) for x in r.reports[:3]]
    if seed == 0:
        assert raw.reports  # the interpreter does see the races of the unsynchronized program


def test_interpreter_twenty_latency_seeds():
    prog = progs.random_program(77, n=24)
    mem, ref = setup(prog)
    res = insert_sync(prog, TINY, stream_blocks=4)
    first = None
    for s in range(20):
        r, out = simrun(res.instructions, mem, random_latency=s)
        assert good(r, out, ref), (s, [str(x) for x in r.reports[:2]])
        if first is None:
            first = out
        assert all(np.array_equal(out[k], first[k]) for k in out)


def test_interpreter_catches_mutants():
    total = caught = 0
    for seed in range(4):
        prog = progs.random_program(seed, n=18)
        mem, ref = setup(prog, seed)
        out = insert_sync(prog, TINY).instructions
        for i, inst in enumerate(out):
            mons = inst.sync.monitors
            for mi, mon in enumerate(mons):
                for v in (mons[:mi] + mons[mi + 1:],
                          mons[:mi] + (dataclasses.replace(mon, expected=mon.expected - 1),)
                          + mons[mi + 1:]):
                    q = list(out)
                    q[i] = dataclasses.replace(inst, sync=dataclasses.replace(inst.sync, monitors=v))
                    r, o = simrun(q, mem, mode="functional")
                    total += 1
                    caught += not good(r, o, ref)
    print(f"\ninterpreter mutation test: {caught}/{total} caught ({100 * caught / total:.1f} %)")
    assert total > 50 and caught / total >= 0.95


def test_interpreter_pipeline_dataflow_vs_barrier_and_budget():
    prog = progs.pipeline(tiles=8, slots=2, blocks=4)
    mem, ref = setup(prog)
    cyc = {}
    for mode in ("dataflow", "barrier-all"):
        res = insert_sync(prog, TINY, sync_mode=mode)
        r, out = simrun(res.instructions, mem)
        assert good(r, out, ref)
        cyc[mode] = r.total_cycles
    small = TINY.with_overrides(su_counters=2)
    res = insert_sync(prog, small)
    assert res.decisions
    r3, out = simrun(res.instructions, mem, machine=small, random_latency=3)
    assert good(r3, out, ref)
    r, out = simrun(res.instructions, mem, machine=small)
    assert good(r, out, ref)
    print(f"\ninterpreter pipeline: dataflow {cyc['dataflow']:.0f} cycles, barrier-all "
          f"{cyc['barrier-all']:.0f} cycles, dataflow with 2 counters/TPB {r.total_cycles:.0f}")
    assert cyc["dataflow"] < cyc["barrier-all"]
