"""Robustness: every executable instruction the ISA strategies can draw runs on the interpreter in
every mode without an internal error, and full/functional/random-latency runs write the same bytes
(one instruction has no one to race with, so timing must not change its data)."""

import dataclasses
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.sim import Simulator
from m100.targets.m100.isa import Broadcast, Copy, Dma, Space, Sync
from m100.targets.m100.machine import get_machine

import m100_isa_strategies as S  # (put in sys.modules by conftest.py)

TINY = get_machine("tiny")


def _run(inst, seed, mode, random_latency=None):
    sim = Simulator([inst], TINY, mode=mode, random_latency=random_latency)
    rng = np.random.default_rng(seed)
    for _, w, _ in inst.walks():  # random bytes under every operand
        lo, hi = w.byte_range()
        tpbs = [w.tpb] if w.space is Space.HBSM else [0]
        if getattr(inst, "tpb_mask", 0) and w.space is Space.HBSM:
            tpbs = [t for t in range(TINY.num_tpbs)]
        for t in tpbs:
            sim.memory.write_bytes(w.space, t, lo, rng.integers(0, 256, hi - lo, dtype=np.uint8))
    res = sim.run()
    out = []
    for name, w, written in inst.walks():
        if written:
            lo, hi = w.byte_range()
            for t in range(TINY.num_tpbs) if w.space is Space.HBSM else [0]:
                out.append(sim.memory.read_bytes(w.space, t, lo, hi - lo).tobytes())
    return res, out


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(S.instructions(TINY, executable=True), st.integers(0, 2**32 - 1))
def test_random_instruction_all_modes_agree(inst, seed):
    inst = dataclasses.replace(inst, sync=Sync(blocks=inst.sync.blocks))  # alone: no counters
    r_full, full = _run(inst, seed, "full")
    assert all(r.kind == "fault" for r in r_full.reports), [str(r) for r in r_full.reports]
    r_fun, fun = _run(inst, seed, "functional")
    r_rl, rl = _run(inst, seed, "full", random_latency=seed % 97)
    assert [r.kind for r in r_fun.reports] == [r.kind for r in r_full.reports] \
        == [r.kind for r in r_rl.reports]
    if not r_full.reports:
        assert full == fun == rl
        assert r_full.records[0].end > r_full.records[0].start
    r_t, _ = _run(inst, seed, "functional")  # deterministic
    r_tim = Simulator([inst], TINY, mode="timing").run()
    assert r_tim.ok and r_tim.records[0].end is not None


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(S.instructions(TINY, kinds=(Broadcast, Copy, Dma), executable=True),
       st.integers(0, 2**32 - 1))
def test_copy_views_write_what_the_general_path_writes(inst, seed):
    """A DTDU copy / broadcast or DMA of one element type between affine boxes runs as views of
    the memory (``CopyExec._views``): the same bytes and reports as the general path
    (read_walk / write_walk), in every data mode, with conversions and index walks left to it."""
    from m100.sim import semantics_move

    inst = dataclasses.replace(inst, sync=Sync(blocks=inst.sync.blocks))
    for mode in ("full", "functional"):
        r_fast, fast = _run(inst, seed, mode)
        orig = semantics_move.CopyExec._views
        semantics_move.CopyExec._views = lambda self, b: None
        try:
            r_ref, ref = _run(inst, seed, mode)
        finally:
            semantics_move.CopyExec._views = orig
        assert fast == ref
        assert [str(r) for r in r_fast.reports] == [str(r) for r in r_ref.reports]


def test_copy_views_are_taken():
    """(The comparison above is not vacuous: a same-type box copy runs as views.)"""
    from m100.sim import semantics_move
    from m100.targets.m100.isa import DType, Walk

    src = Walk.strided(Space.HBSM, 0, 64, DType.F16, (4, 8), (16, 1))
    dst = Walk.strided(Space.HBSM, 0, 4096, DType.F16, (32,))
    inst = Copy(tpb=0, src=src, dst=dst, sync=Sync(blocks=2))
    ex = semantics_move.CopyExec(inst, Simulator([inst], TINY).memory)
    assert ex._views(0) is not None and ex._views(1) is not None
